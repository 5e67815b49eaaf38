#!/usr/bin/env python
"""The short accelerator check: every Pallas kernel compiled for the device against its jnp
reference, their throughput, and a few training steps per communication method.

Run on a machine with a GPU (a few minutes); on CPU it runs the same checks with the
reference backend and says so. Exits non-zero if a kernel fails to compile, differs from its
reference, or a training step fails. Results are printed and, with ``--out DIR``, written to
``DIR/gpu_check.json``.

    python experiments/gpu_check.py --out "$OUT"
    python experiments/hlo_overlap.py --out "$OUT/hlo"      # exchange / compute overlap

The exchange itself needs several devices; with one GPU the training steps run on ``P = 1``
(no halo), and the exchange's schedule is read from the step compiled for a mocked 8-GPU
topology (``hlo_overlap.py``, run here for the Vanilla and a quantized exchange; HLO text and
summaries under ``--out``/hlo).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import device_times


def _timed(fn, *args, repeats: int = 5) -> float:
    return float(np.median(device_times(fn, *args, repeats=repeats)))


def _kernel_args(gpu: bool) -> dict:
    """Compiled Pallas on a GPU; the Pallas interpreter elsewhere (slow: small shapes)."""
    from pallas_kernels.backend import Backend

    return {"backend": Backend.PALLAS} if gpu else {"interpret": True}


def check_quantize(report: dict, gpu: bool) -> bool:
    from pallas_kernels.backend import Backend
    from pallas_kernels.quantize import dequantize, quantize

    ok = True
    key = jax.random.key(0)
    kernel = _kernel_args(gpu)
    for n, d in ((4096, 128), (65_536, 602)) if gpu else ((64, 128), (40, 602)):
        x = jax.random.normal(jax.random.key(1), (n, d), jnp.float32)
        for bits in (2, 4, 8):
            name = f"quantize n={n} d={d} b={bits}"
            try:
                ref = quantize(x, bits, key, backend=Backend.REFERENCE)
                got = quantize(x, bits, key, **kernel)
                # The contract: packets equal the reference's as computed on the host CPU (the
                # platform the tests pin). XLA:GPU's own division is not correctly rounded, so
                # the reference run on the GPU may differ from both by 1 ulp in a scale.
                host = _host_reference(x, bits, key)
                same = all(bool(np.array_equal(a, b)) for a, b in zip(host, got, strict=True))
                same_device = all(
                    bool(jnp.array_equal(a, b)) for a, b in zip(ref, got, strict=True)
                )
                # Dequantize: kernel and reference on the same packets (the GPU contracts
                # q * step + lo into one fused multiply-add: a few ulp).
                back_ref = dequantize(*got, bits, n, backend=Backend.REFERENCE)
                back = dequantize(*got, bits, n, **kernel)
                dequant_err = float(jnp.max(jnp.abs(back - back_ref)))
                same &= dequant_err <= 1e-6
                fq = jax.jit(lambda x, b=bits: quantize(x, b, key, **kernel))
                t = _timed(fq, x)
                copy = _timed(jax.jit(lambda x: x + 0), x)
                report[name] = {
                    "equal_to_reference": same,
                    "equal_to_device_reference": same_device,
                    "dequantize_max_abs_diff": dequant_err,
                    "quantize_GBps": x.nbytes / t / 1e9,
                    "copy_GBps": 2 * x.nbytes / copy / 1e9,
                }
                if not (same and same_device):
                    report[name]["diagnosis"] = _diagnose(bits, ref, got, host, n)
                ok &= same
            except Exception as e:  # report every kernel, fail at the end
                report[name] = {"error": f"{type(e).__name__}: {e}"}
                traceback.print_exc()
                ok = False
    return ok


def _host_reference(x, bits, key) -> list[np.ndarray]:
    """The reference packets computed on the host CPU."""
    from pallas_kernels.backend import Backend
    from pallas_kernels.quantize import quantize

    cpu = jax.devices("cpu")[0]
    fn = jax.jit(lambda x: quantize(x, bits, key, backend=Backend.REFERENCE))
    return [np.asarray(a) for a in fn(jax.device_put(x, cpu))]


def _diagnose(bits, ref, got, host, n) -> dict:
    """Where a kernel's packets differ from the reference's: per output, against the
    reference on this device and on the host CPU."""
    from pallas_kernels.quantize import unpack_codes

    def compare(a, b) -> dict:
        qa = np.asarray(unpack_codes(jnp.asarray(a[0]), bits, n)).astype(np.int32)
        qb = np.asarray(unpack_codes(jnp.asarray(b[0]), bits, n)).astype(np.int32)
        diff = np.abs(qa - qb)
        sa, sb = np.asarray(a[1]), np.asarray(b[1])
        return {
            "codes_differ": float((diff > 0).mean()),
            "codes_max_diff": int(diff.max()),
            "rows_with_diff": int((diff > 0).any(axis=1).sum()),
            "scale_differ": int((sa != sb).sum()),
            "scale_max_rel": float(np.max(np.abs(sa - sb) / np.abs(sb))),
            "lo_differ": int((np.asarray(a[2]) != np.asarray(b[2])).sum()),
        }

    ref = [np.asarray(a) for a in ref]
    got = [np.asarray(a) for a in got]
    host = [np.asarray(a) for a in host]
    return {
        "kernel_vs_device_reference": compare(got, ref),
        "kernel_vs_host_reference": compare(got, host),
        "device_reference_vs_host_reference": compare(ref, host),
    }


def check_bitmap(report: dict, gpu: bool) -> bool:
    from jaxgraph.embed.compress import encode
    from jaxgraph.embed.walks import Walks
    from pallas_kernels.backend import Backend
    from pallas_kernels.bitmap import decode

    rng = np.random.default_rng(0)
    num_walks, length = (20_000, 80) if gpu else (50, 20)
    kernel = _kernel_args(gpu)
    nodes = rng.zipf(1.6, size=(num_walks, length)).astype(np.int64) % 5000
    lengths = rng.integers(1, length + 1, num_walks).astype(np.int32)
    nodes = np.where(np.arange(length) < lengths[:, None], nodes, -1).astype(np.int32)
    c = encode(Walks(nodes, lengths), 2)
    args = [jnp.asarray(a) for a in (c.hot_ids, c.bitmaps, c.residual, c.lengths)]
    try:
        ref = decode(*args, walk_length=length, backend=Backend.REFERENCE)
        got = decode(*args, walk_length=length, **kernel)
        same = bool(jnp.array_equal(ref, got)) and bool(jnp.array_equal(got, nodes))
        f = jax.jit(lambda *a: decode(*a, walk_length=length, **kernel))
        t = _timed(f, *args)
        report["bitmap decode"] = {
            "equal_to_reference": same,
            "walks_per_s": num_walks / t,
            "compressed_bytes": int(c.nbytes),
            "raw_bytes": int(nodes.nbytes),
        }
        return same
    except Exception as e:
        report["bitmap decode"] = {"error": f"{type(e).__name__}: {e}"}
        traceback.print_exc()
        return False


def check_training(report: dict, gpu: bool) -> bool:
    """A few epochs per method on a synthetic DC-SBM graph (no dataset files needed)."""
    from jaxgraph.train import (
        AdaQP,
        DataConfig,
        ModelConfig,
        Quantized,
        TrainConfig,
        Vanilla,
        train,
    )

    ok = True
    parts = min(jax.device_count(), 8)
    nodes = 100_000 if gpu else 2_000
    for method in (Vanilla(), Quantized(4), AdaQP(period=5)):
        cfg = TrainConfig(
            data=DataConfig(name="sbm", num_nodes=nodes, avg_degree=20.0, num_features=128),
            model=ModelConfig(hidden=128),
            parts=parts,
            method=method,
            epochs=10,
            progress=False,
        )
        name = f"train sbm n={nodes} P={parts} {method.label()}"
        try:
            s = train(cfg)
            report[name] = {
                k: s[k]
                for k in ("median_epoch_time", "compile_time", "bytes_per_epoch", "test_acc")
                if k in s
            }
            print(name, report[name], flush=True)
        except Exception as e:
            report[name] = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
            ok = False
    return ok


def check_overlap(report: dict, out: Path | None, timeout: float) -> bool:
    """Runs ``hlo_overlap.py`` (a mocked 8-GPU topology on one GPU) for the Vanilla and a
    quantized exchange and copies its summaries into the report."""
    import subprocess
    import tempfile

    script = Path(__file__).with_name("hlo_overlap.py")
    hlo_dir = out / "hlo" if out else Path(tempfile.mkdtemp(prefix="hlo_overlap"))
    ok = True
    for method in ("vanilla", "quant-random"):
        cmd = [sys.executable, str(script), "--out", str(hlo_dir), "--method", method]
        cmd += ["--mock-timeout", str(timeout)]
        try:
            proc = subprocess.run(cmd, timeout=timeout + 60, check=False)
            ok &= proc.returncode == 0
        except subprocess.TimeoutExpired:
            report[f"hlo overlap {method}"] = {"error": "timed out"}
            ok = False
    for summary in sorted(hlo_dir.glob("summary_*.json")):
        report[f"hlo {summary.stem}"] = json.loads(summary.read_text())
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--skip-overlap", action="store_true", help="skip the HLO schedule check")
    p.add_argument("--overlap-timeout", type=float, default=240.0)
    p.add_argument("--quick", action="store_true", help="same as --skip-overlap (a smoke run)")
    args = p.parse_args(argv)
    args.skip_overlap |= args.quick
    platform = jax.devices()[0].platform
    report = {"platform": platform, "devices": jax.device_count(), "jax": jax.__version__}
    print(f"platform {platform}, {jax.device_count()} device(s)", flush=True)
    gpu = platform == "gpu"
    if not gpu:
        print("no GPU: kernels run in the Pallas interpreter on small shapes (timings meaningless)")
    ok = check_quantize(report, gpu)
    ok &= check_bitmap(report, gpu)
    ok &= check_training(report, gpu)
    if not args.skip_overlap:
        ok &= check_overlap(report, args.out, args.overlap_timeout)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
