#!/usr/bin/env python
"""Skip-gram step throughput on one accelerator: pairs/s of the trainer's device program and
the fraction of memory bandwidth it reaches, beside a device copy measured in the same run.

The program is the trainer's: ``S`` steps of :func:`jaxgraph.embed.sgns._sgns_step` in one
``fori_loop`` (the chunk between two syncs), power-law row ids, shared negatives (``G``) and
the row cap as configured. Bytes per pair are counted as the random rows a step moves: each
pair gathers its input and positive rows and ``K / G`` negative rows, and scatter-adds into the
same rows (read and write): ``3 (2 + K / G) d 4`` bytes, ignoring any reuse in caches, so the
fraction is an estimate of the traffic the step asks of memory. The baseline is a copy of a
1 GiB array (bytes read plus bytes written).

    python experiments/sgns_gpu.py --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from timing import device_times


def _best(fn, *args, repeats=5):
    return min(device_times(fn, *args, repeats=repeats))


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes read plus written per second by a device copy of ``nbytes``."""
    x = jnp.ones(nbytes // 4, jnp.float32)
    f = jax.jit(lambda x: x * 1.0 + 0.0)
    return 2 * nbytes / _best(f, x)


def step_rate(rows: int, dim: int, batch: int, steps: int, negatives: int, share: int, cap):
    """Pairs per second of ``steps`` trainer steps of ``batch`` pairs on ``rows`` rows."""
    from jaxgraph.embed.sgns import _sgns_step

    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, rows + 1) ** 0.8
    p /= p.sum()
    ids = lambda *shape: jnp.asarray(rng.choice(rows, size=shape, p=p).astype(np.int32))  # noqa: E731
    ins, outs = ids(steps, batch), ids(steps, batch)
    negs = ids(steps, batch // share, negatives)
    syn0 = jnp.asarray(rng.normal(size=(rows, dim)).astype(np.float32) * 0.1)
    syn1 = jnp.zeros((rows, dim), jnp.float32)
    weight = jnp.ones(batch, jnp.float32)
    scratch = None if cap is None else jnp.zeros(2 * rows, jnp.int32)

    def body(s, carry):
        a, b, loss, sc = carry
        a, b, step_loss, sc = _sgns_step(a, b, ins[s], outs[s], negs[s], weight, 0.025, cap, sc)
        return a, b, loss + step_loss, sc

    f = jax.jit(lambda a, b: jax.lax.fori_loop(0, steps, body, (a, b, 0.0, scratch))[:3])
    seconds = _best(f, syn0, syn1)
    return steps * batch / seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    dev = jax.devices()[0]
    copy = copy_bandwidth()
    print(f"{dev.device_kind} ({dev.platform}), jax {jax.__version__}: copy {copy / 1e9:.0f} GB/s")
    dim, negatives, steps = 128, 5, 64
    results = {"device": dev.device_kind, "jax": jax.__version__, "copy_bytes_per_s": copy}
    runs = []
    for rows in (18_772, 65_536, 1 << 20):
        for batch in (1024, 16_384, 131_072):
            for share, cap in ((8, 4), (8, None), (1, 4)):
                rate = step_rate(rows, dim, batch, steps, negatives, share, cap)
                per_pair = 3 * (2 + negatives / share) * dim * 4
                frac = rate * per_pair / copy
                runs.append(
                    dict(
                        rows=rows,
                        batch=batch,
                        share=share,
                        cap=cap,
                        pairs_per_s=rate,
                        bytes_per_pair=per_pair,
                        fraction_of_copy=frac,
                    )
                )
                print(
                    f"rows {rows:>8,} batch {batch:>7,} G {share} cap {cap}: "
                    f"{rate / 1e6:8.1f}M pairs/s, {rate * per_pair / 1e9:6.0f} GB/s "
                    f"({100 * frac:.0f} % of the copy)",
                    flush=True,
                )
    results["runs"] = runs
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sgns_gpu.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
