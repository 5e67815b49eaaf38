"""Bandwidth of the stochastic message quantization kernels against a plain copy.

For each message block ``x: f32[N, D]`` and bit-width ``b``, times (median of ``--reps`` runs
after a compiling warm-up) ``quantize`` (x -> packed codes, scale, lo) and ``dequantize`` (back
to f32), and reports effective bandwidth as the bytes each one reads plus writes per second.
The baseline is an elementwise pass over ``x`` (``x + 1``: reads and writes ``N * D * 4`` bytes),
which is what "as fast as a copy" means for a memory-bound kernel.

Backends: the pure-``jnp`` reference (XLA) everywhere; on a GPU also the compiled Pallas kernels,
and a check that both backends produce the same packets bit for bit (the codes must not depend on
the backend) and dequantize to within 1e-6 of each other (the GPU contracts ``q * step + lo``
into one fused multiply-add).

Usage::

    python experiments/bench_quant.py --quick          # N = 100k, D in {128, 602}, b in {2, 4, 8}
    python experiments/bench_quant.py --rows 1000000 --dims 128 602 1500 --reps 20
"""

from __future__ import annotations

import argparse
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np
from timing import device_times

from pallas_kernels.backend import Backend, default_backend
from pallas_kernels.quantize import dequantize, packed_rows, quantize

GB = 1e9


def timed(fn, *args, reps: int) -> float:
    """Median seconds of ``fn(*args)`` over ``reps`` runs, after one warm-up (compile) run."""
    return statistics.median(device_times(fn, *args, repeats=reps))


def message_bytes(n: int, d: int, bits: int) -> tuple[int, int]:
    """``(f32 block bytes, quantized message bytes: packed codes + fp32 scale and lo)``."""
    return n * d * 4, packed_rows(n, bits) * d + 2 * n * 4


def bench_block(n: int, d: int, bits_list, backends, *, reps: int, check: bool) -> list[dict]:
    x = jax.random.normal(jax.random.key(0), (n, d), jnp.float32)
    key = jax.random.key(1)
    copy = jax.jit(lambda a: a + 1.0)
    dense, _ = message_bytes(n, d, 8)
    copy_gbs = 2 * dense / timed(copy, x, reps=reps) / GB
    rows = []
    for bits in bits_list:
        dense, message = message_bytes(n, d, bits)
        outputs = {}
        for backend in backends:
            row = {"N": n, "D": d, "bits": bits, "backend": backend.value, "copy_gbs": copy_gbs}
            rows.append(row)
            q = jax.jit(lambda x, k, b=bits, be=backend: quantize(x, b, k, backend=be))
            dq = jax.jit(
                lambda p, s, lo, b=bits, be=backend: dequantize(p, s, lo, b, n, backend=be)
            )
            try:  # a kernel that fails to compile is reported, and the others still run
                msg = q(x, key)
                t_q = timed(q, x, key, reps=reps)
                t_dq = timed(dq, *msg, reps=reps)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                continue
            outputs[backend] = (msg, dq(*msg))
            row.update(
                q_ms=1e3 * t_q,
                q_gbs=(dense + message) / t_q / GB,
                dq_ms=1e3 * t_dq,
                dq_gbs=(dense + message) / t_dq / GB,
                ratio=dense / message,
            )
        if check and len(outputs) > 1:
            (msg_a, out_a), (msg_b, out_b) = outputs.values()
            same = all(np.array_equal(a, b) for a, b in zip(msg_a, msg_b, strict=True))
            gap = float(jnp.max(jnp.abs(out_a - out_b) / (1.0 + jnp.abs(out_a))))
            rows[-1]["check"] = f"packets {'identical' if same else 'DIFFER'}, dq gap {gap:.1e}"
            rows[-1]["failed"] = not same or gap > 1e-6
    return rows


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'N':>8} {'D':>5} {'b':>2} {'backend':>9} {'quant ms':>9} {'quant GB/s':>10} "
        f"{'dequant ms':>10} {'dequant GB/s':>12} {'copy GB/s':>9} {'q/copy':>6} {'dq/copy':>7} "
        f"{'x smaller':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        if "error" in r:
            print(f"{r['N']:>8} {r['D']:>5} {r['bits']:>2} {r['backend']:>9}   FAILED {r['error']}")
            continue
        print(
            f"{r['N']:>8} {r['D']:>5} {r['bits']:>2} {r['backend']:>9} {r['q_ms']:>9.2f} "
            f"{r['q_gbs']:>10.1f} {r['dq_ms']:>10.2f} {r['dq_gbs']:>12.1f} {r['copy_gbs']:>9.1f} "
            f"{r['q_gbs'] / r['copy_gbs']:>6.2f} {r['dq_gbs'] / r['copy_gbs']:>7.2f} "
            f"{r['ratio']:>9.1f}" + (f"   {r['check']}" if "check" in r else "")
        )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N=100k, D in {128, 602}, 5 reps")
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dims", type=int, nargs="+", default=[128, 602, 1500])
    p.add_argument("--bits", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument(
        "--backend",
        choices=["all", *(b.value for b in Backend)],
        default="all",
        help="all: the reference, plus Pallas where it compiles (GPU)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.dims, args.reps = 100_000, [128, 602], 5
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.backend == "all":
        backends = [Backend.REFERENCE]
        if default_backend() is Backend.PALLAS:
            backends.append(Backend.PALLAS)
    else:
        backends = [Backend(args.backend)]
    device = jax.devices()[0]
    print(
        f"jax {jax.__version__} on {jax.default_backend()} ({device.device_kind}); "
        f"backends: {', '.join(b.value for b in backends)}; median of {args.reps} runs"
    )
    print(
        "GB/s = (f32 block + quantized message) bytes / time; copy = x + 1 over the f32 block; "
        "x smaller = f32 block / message bytes"
    )
    rows = []
    for d in args.dims:
        rows += bench_block(args.rows, d, args.bits, backends, reps=args.reps, check=True)
    print_table(rows)
    return 1 if any(r.get("failed") or "error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
