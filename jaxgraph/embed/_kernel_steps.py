"""How the CPU kernels (:mod:`~jaxgraph.embed.cpu_sgns`, :mod:`~jaxgraph.embed.cpu_hsoftmax`)
order a chunk's steps and deal them to threads.

**Order.** Step ``s`` of the span of ``I`` steps starting at ``g`` trains pairs
``g B + (s - g) + I' j`` of the chunk's flattened buffers (``I' = min(I, S' - g)``), as
:func:`jaxgraph.embed.programs._train_chunk` (:func:`gather_step`).

**Threads.** A step has two phases: its gradients, read from the tables, then its writes. With
``T`` threads, thread ``t`` trains steps ``t, t + T, ..``; the gradient phases of concurrent
steps overlap, and the writes reach the tables one step at a time in step order: a thread writes
step ``s`` once step ``s - 1``'s writes are done (:func:`await_written`, :func:`mark_written`).
No update is lost, and step ``s``'s gradients see every update of the steps up to ``s - T`` and
possibly some of the ``T - 1`` after those. (Unordered writes lose updates: on a hub row two
threads' read-modify-writes overlap, which on a small R-MAT trained on 4 replicas shrank the
row norms by a third and dropped dot AUC from 0.81 to 0.47.) One thread is the sequential rule.

**Copies.** With ``copies``, each thread instead trains its own copy of its replica's tables
on a contiguous stretch of the chunk's steps (``ceil(S' / T)`` each), without waiting for the
others, and the caller sums the copies' changes (the trainer does so on one device:
:class:`~jaxgraph.embed.skipgram.SkipGramTrainer`). No thread reads a row another writes.

**Workers.** A call's ``W`` workers (one per thread of each replica) run on ``min(T, W)``
Python threads (:func:`run_workers`), each worker one call of a ``nogil`` kernel, so the kernels
compile without numba's parallel loops (a chunk's kernel compiled in 4.9 s where its ``prange``
version took 11.7 s on the first run after install) and threads that wait on each other's steps
always run at once.

**Replicas.** A call trains ``R`` replicas (their own tables, pairs and negatives) at once:
each takes ``T // R`` of the threads (:func:`replica_threads`; at least one, and past ``T``
replicas a thread trains several in turn), ordered as above among themselves only. Replicas
share no row, so with one thread each they scale where threads sharing one table do not (on
a 2-core VM whose cores move cache lines slowly, two threads on one table train 0.9M pairs/s
and two replicas 3.8M).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import numbers
import threading

import numba
from numba import njit

from jaxgraph.embed._intrinsics import load_acquire, store_release


@njit(inline="always", cache=True)
def gather_step(flat_in, flat_out, flat_w, s, span, num_steps, ins, outs, w):
    """Copies step ``s`` of a chunk's flattened pairs into ``ins, outs, w`` (the order above)."""
    batch = ins.shape[0]
    g = (s // span) * span  # the first step of s's span
    stride = min(span, num_steps - g)
    start = g * batch + (s - g)
    for j in range(batch):
        at = start + stride * j
        ins[j], outs[j], w[j] = flat_in[at], flat_out[at], flat_w[at]


@njit(inline="always", cache=True)
def worker_steps(u, per_replica, num_steps, copies):
    """``(replica, table, first, last, stride)`` of worker ``u`` (of ``R T``, ``T =
    per_replica``): thread ``t = u % T`` of replica ``r = u // T`` trains steps ``first, first +
    stride, .. < last`` of the chunk on tables ``table``; its replica's (``r``), every ``T``-th
    step from ``t``, or with ``copies`` its own copy ``u``, the ``t``-th of ``T`` contiguous
    stretches of ``ceil(S' / T)`` steps (``S' = num_steps``)."""
    r, t = u // per_replica, u % per_replica
    if copies:
        stretch = (num_steps + per_replica - 1) // per_replica
        return r, u, t * stretch, min(num_steps, (t + 1) * stretch), 1
    return r, r, t, num_steps, per_replica


@njit(inline="always", cache=True)
def await_written(written, s):
    """Waits until the writes of every step before ``s`` are done (``written: int64[1]``, the
    number of steps written)."""
    while load_acquire(written, 0) < s:
        pass


@njit(inline="always", cache=True)
def mark_written(written, s):
    """Publishes, after step ``s``'s writes, that steps up to ``s`` are written."""
    store_release(written, 0, s + 1)


def replica_threads(threads: int, replicas: int) -> int:
    """The threads of each replica when ``threads`` train ``replicas`` at once (at least 1)."""
    return max(1, threads // replicas)


@contextlib.contextmanager
def num_threads(threads: int | None):
    """Runs the block on ``threads`` numba threads (None: numba's current count), restoring
    the count after."""
    limit = numba.config.NUMBA_NUM_THREADS
    if threads is None:
        threads = numba.get_num_threads()
    if not isinstance(threads, numbers.Integral) or not 1 <= threads <= limit:
        raise ValueError(f"threads must be an integer in [1, {limit}] or None, got {threads!r}")
    previous = numba.get_num_threads()
    numba.set_num_threads(int(threads))
    try:
        yield int(threads)
    finally:
        numba.set_num_threads(previous)


_callers = threading.local()


def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The calling thread's own pool of ``threads`` threads for :func:`run_workers` (own, so
    that workers that wait on each other never queue behind another caller's; a pool's threads
    end with its caller)."""
    pools = _callers.__dict__.setdefault("pools", {})
    if threads not in pools:
        pools[threads] = concurrent.futures.ThreadPoolExecutor(threads, "jaxgraph-kernel")
    return pools[threads]


def run_workers(worker, workers: int, *args, threads: int | None = None) -> list:
    """``worker(u, T, *args)`` (a ``nogil`` kernel that runs workers ``u, u + T, ..`` below
    ``workers``) on ``T = min(threads, workers)`` threads (None: numba's thread count), the
    caller's among them; returns what each call returned. Workers that wait on each other must
    number at most ``threads``: each then has its own thread, all at once."""
    threads = max(1, min(numba.get_num_threads() if threads is None else threads, workers))
    if threads == 1:
        return [worker(0, 1, *args)]
    futures = [_pool(threads - 1).submit(worker, u, threads, *args) for u in range(1, threads)]
    first = worker(0, threads, *args)
    return [first, *(f.result() for f in futures)]
