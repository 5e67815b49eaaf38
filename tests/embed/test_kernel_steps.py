"""How the CPU kernels' workers run (:func:`jaxgraph.embed._kernel_steps.run_workers`): each
worker once, on at most the threads asked for, and workers that wait on each other's steps all
at once, whichever thread calls."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import njit

from jaxgraph.embed import _kernel_steps
from jaxgraph.embed._kernel_steps import await_written, mark_written, run_workers


@njit(nogil=True)
def _count(first, stride, hits):
    """Marks workers ``first, first + stride, ..``; returns how many it ran."""
    ran = 0
    for u in range(first, hits.shape[0], stride):
        hits[u] += 1
        ran += 1
    return ran


@njit(nogil=True)
def _in_step_order(first, stride, steps, written, order):
    """Worker ``u`` of ``stride`` writes steps ``u, u + stride, ..`` in step order: each waits
    for the step before it, so the workers finish only if they all run at once."""
    for s in range(first, steps, stride):
        await_written(written, s)
        order[s] = s
        mark_written(written, s)
    return 0


@pytest.mark.parametrize("workers, threads", [(1, 2), (5, 1), (5, 2), (7, 3), (2, 4)])
def test_every_worker_runs_once_on_at_most_the_threads_asked(workers, threads):
    hits = np.zeros(workers, np.int64)
    ran = run_workers(_count, workers, hits, threads=threads)
    np.testing.assert_array_equal(hits, 1)
    assert len(ran) == min(threads, workers) and sum(ran) == workers


def _ordered_run(steps, threads, out):
    written = np.zeros(1, np.int64)
    order = np.full(steps, -1, np.int64)
    run_workers(_in_step_order, threads, steps, written, order, threads=threads)
    out.append(order)


def test_workers_that_wait_on_each_other_run_at_once_from_two_callers():
    """Two callers at once, each with three workers that write their steps in turn: every
    worker needs its own thread while its caller runs, and both finish in step order."""
    steps, outs = 60, []
    callers = [
        threading.Thread(target=_ordered_run, args=(steps, 3, outs), daemon=True) for _ in range(2)
    ]
    _ordered_run(4, 3, [])  # compiles outside the timed part
    for c in callers:
        c.start()
    for c in callers:
        c.join(timeout=60)
    assert not any(c.is_alive() for c in callers), "ordered workers did not finish"
    for order in outs:
        np.testing.assert_array_equal(order, np.arange(steps))


def test_each_calling_thread_has_its_own_pool():
    """A shared pool could queue one caller's waiting workers behind another's (a deadlock);
    each thread's calls go to a pool of its own, the same one on every call."""
    mine = _kernel_steps._pool(2)
    assert _kernel_steps._pool(2) is mine
    other = []
    t = threading.Thread(target=lambda: other.append(_kernel_steps._pool(2)))
    t.start()
    t.join()
    assert other[0] is not mine
