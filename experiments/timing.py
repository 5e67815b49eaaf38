"""Wall-clock timing shared by the experiment scripts."""

from __future__ import annotations

import time

import jax


def device_times(fn, *args, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn(*args)``, each waited for until its outputs
    are ready, after one warm-up (compile) call. Callers take the statistic they report (the
    median, or the best)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return times
