"""Hierarchical softmax in the compiled CPU kernel: :func:`jaxgraph.embed.hsoftmax.hs_update`'s
batched rule as :mod:`jaxgraph.embed.cpu_sgns` runs negative sampling's.

A step runs on one thread in two passes: :func:`_gradients` computes every pair's path
coefficients ``g_l`` and input-row gradient ``sum_l g_l syn1[p_l]`` from the tables, then
:func:`_write` applies the inner rows' updates ``g_l syn0[i]`` (the input rows still unchanged),
then the input rows', each scaled by the row cap counted over one id space (``syn0`` row ``i`` is
id ``i``, ``syn1`` row ``j`` is ``N + j``). A chunk's steps are shared by threads as
:mod:`jaxgraph.embed._kernel_steps` describes; there are no negatives to draw.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from jaxgraph.embed._kernel_args import (
    check_cap,
    check_floats,
    check_ids,
    check_replicas,
    check_step,
    one_replica,
    page_aligned,
)
from jaxgraph.embed._kernel_steps import (
    await_written,
    gather_step,
    mark_written,
    num_threads,
    replica_threads,
    run_workers,
    worker_steps,
)
from jaxgraph.embed.cpu_sgns import _FAST, _scale


@njit(nogil=True, cache=True, fastmath=_FAST)
def _gradients(syn0, syn1, ins, outs, weight, points, labels, lr, cap, grad, coef, counts):
    """A step's first pass (the module docstring), reading the tables; ``grad: f32[B, d]``,
    ``coef: f32[B, L]`` and ``counts: int32[2N]`` (zero between steps) are one thread's buffers.
    Returns the weighted loss before the update."""
    n_rows, d = syn0.shape
    b = ins.shape[0]
    depth = points.shape[1]
    lr32 = np.float32(lr)
    zero, one = np.float32(0.0), np.float32(1.0)
    loss = 0.0
    for p in range(b):
        i, t, wp = ins[p], outs[p], weight[p]
        live = 1 if wp > 0 else 0
        if cap > 0:
            counts[i] += live
        a = lr32 * wp
        for q in range(d):
            grad[p, q] = zero
        for h in range(depth):
            label = labels[t, h]
            if label < zero:  # padding: the path has ended
                coef[p, h] = zero
                continue
            r = points[t, h]
            f = zero
            for q in range(d):
                f += syn0[i, q] * syn1[r, q]
            # sigmoid and -log sigmoid((2 label - 1) f) through e = exp(-|f|), as cpu_sgns.
            e = math.exp(-abs(f))
            inv = one / (one + e)
            sig = inv if f >= zero else e * inv
            g = (label - sig) * a
            coef[p, h] = g
            x = f if label > np.float32(0.5) else -f
            loss += wp * (math.log(1.0 + np.float64(e)) + max(-np.float64(x), 0.0))
            for q in range(d):
                grad[p, q] += g * syn1[r, q]
            if cap > 0:
                counts[n_rows + r] += live
    return loss


@njit(nogil=True, cache=True, fastmath=_FAST)
def _write(syn0, syn1, ins, outs, points, labels, cap, grad, coef, counts):
    """A step's second pass: :func:`_gradients`' updates applied in place, the cap's counters
    cleared."""
    n_rows, d = syn0.shape
    b = ins.shape[0]
    depth = points.shape[1]
    zero = np.float32(0.0)
    for p in range(b):
        i, t = ins[p], outs[p]
        for h in range(depth):
            if labels[t, h] < zero:
                continue
            r = points[t, h]
            c = coef[p, h] * _scale(counts, n_rows + r, cap)
            for q in range(d):
                syn1[r, q] += c * syn0[i, q]
    for p in range(b):
        i = ins[p]
        c = _scale(counts, i, cap)
        for q in range(d):
            syn0[i, q] += c * grad[p, q]
    if cap > 0:
        for p in range(b):
            counts[ins[p]] = 0
            t = outs[p]
            for h in range(depth):
                counts[n_rows + points[t, h]] = 0


@njit(nogil=True, cache=True)
def _chunk(
    first_worker, stride_workers, syn0, syn1, flat_in, flat_out, flat_w, lrs, num_steps, span,
    points, labels, cap, per_replica, copies, written, grad, coef, counts, ins, outs, w,
):  # fmt: skip
    """Workers ``first_worker, first_worker + stride_workers, ..`` of :func:`train_replicas`,
    split as :func:`jaxgraph.embed.cpu_sgns._chunk` splits them
    (:func:`~jaxgraph.embed._kernel_steps.worker_steps`); the buffers from ``grad`` on have a
    leading worker axis. Returns the workers' summed loss."""
    total = 0.0
    for u in range(first_worker, ins.shape[0], stride_workers):
        r, c, first, last, stride = worker_steps(u, per_replica, num_steps, copies)
        x0, x1, done = syn0[c], syn1[c], written[c]
        for s in range(first, last, stride):
            gather_step(
                flat_in[r], flat_out[r], flat_w[r], s, span, num_steps, ins[u], outs[u], w[u]
            )
            total += _gradients(
                x0, x1, ins[u], outs[u], w[u], points, labels, lrs[s], cap,
                grad[u], coef[u], counts[u],
            )  # fmt: skip
            if not copies:
                await_written(done, s)
            _write(x0, x1, ins[u], outs[u], points, labels, cap, grad[u], coef[u], counts[u])
            if not copies:
                mark_written(done, s)
    return total


def _check_tree(points, labels, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The tree's paths as contiguous ``(int32[N, L], f32[N, L])`` (:class:`HuffmanTree`)."""
    labels = check_floats("labels", labels, np.shape(labels))
    if labels.ndim != 2 or labels.shape[0] != num_rows:
        raise ValueError(f"labels must be f32[N = {num_rows}, L], got shape {labels.shape}")
    return check_ids("points", points, num_rows - 1, labels.shape), labels


def step_update(syn0, syn1, inputs, outputs, points, labels, weight, lr, row_cap=None) -> float:
    """One batched hierarchical-softmax step in place: :func:`jaxgraph.embed.hsoftmax.hs_update`'s
    rule.

    Shapes:
      ``syn0, syn1: f32[N, d]`` (C-contiguous, updated in place), ``inputs, outputs: int[B]``,
      ``points: int[N, L]``, ``labels: f[N, L]`` (a :class:`~jaxgraph.embed.hsoftmax.HuffmanTree`
      on the host), ``weight: f[B]`` (``0`` for padding pairs).

    Returns:
      The weighted loss before the update.

    Raises:
      ValueError: on bad tables, ids, shapes, a non-finite ``lr`` or weight, or a bad
        ``row_cap``; nothing is changed then.
    """
    step = check_step(syn0, syn1, inputs, outputs, weight, lr, row_cap)
    n, d, inputs, outputs, weight, cap = step
    b = inputs.shape[0]
    points, labels = _check_tree(points, labels, n)
    grad = np.empty((b, d), np.float32)
    coef = np.empty((b, labels.shape[1]), np.float32)
    counts = np.zeros(2 * n, np.int32)
    loss = _gradients(
        syn0, syn1, inputs, outputs, weight, points, labels, np.float32(lr), cap, grad, coef, counts
    )
    _write(syn0, syn1, inputs, outputs, points, labels, cap, grad, coef, counts)
    return loss


def train_chunk(
    syn0: np.ndarray,
    syn1: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    weights: np.ndarray,
    lrs: np.ndarray,
    num_steps: int,
    points: np.ndarray,
    labels: np.ndarray,
    span: int | None = None,
    row_cap: int | None = None,
    threads: int | None = None,
) -> float:
    """The first ``num_steps`` steps of a chunk on one replica, in place, in
    :func:`jaxgraph.embed.cpu_sgns.train_chunk`'s order (interleaved spans, a rate per step,
    zero-weight padding) with :func:`step_update`'s rule.

    Shapes:
      ``inputs, outputs: int[S, B]``, ``weights: f[S, B]``, ``lrs: f[S]``; the rest as
      :func:`step_update`.

    Args:
      num_steps: ``S' <= S`` steps to train.
      span: steps whose batches interleave (None: all ``S'``).
      row_cap: as :func:`step_update`.
      threads: kernel threads (None: numba's thread count); above one, steps overlap
        (:mod:`~jaxgraph.embed._kernel_steps`).

    Returns:
      The summed loss of the steps.

    Raises:
      ValueError: on bad tables, shapes, ids or arguments; nothing is changed then.
    """
    replica = one_replica(syn0, syn1, inputs, outputs, weights)
    return train_replicas(*replica, lrs, num_steps, points, labels, span, row_cap, threads)


def train_replicas(
    syn0: np.ndarray,
    syn1: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    weights: np.ndarray,
    lrs: np.ndarray,
    num_steps: int,
    points: np.ndarray,
    labels: np.ndarray,
    span: int | None = None,
    row_cap: int | None = None,
    threads: int | None = None,
    *,
    copies: int = 1,
) -> float:
    """:func:`train_chunk` on ``R`` replicas at once (``syn0, syn1: f32[R, N, d]``, ``inputs,
    outputs: int[R, S, B]``, ``weights: f[R, S, B]``), one tree for all, the threads split as
    :func:`jaxgraph.embed.cpu_sgns.train_replicas` splits them; with ``copies = C > 1`` (tables
    ``f32[R C, N, d]``), its ``C`` workers train contiguous stretches of each replica's steps
    on their own copies, as there. Returns the summed loss."""
    pairs = (inputs, outputs, weights, lrs, num_steps, span)
    r, n, d, flat, lrs, b, span = check_replicas(syn0, syn1, *pairs, copies=copies)
    points, labels = _check_tree(points, labels, n)
    cap = check_cap(row_cap)
    if num_steps == 0:
        return 0.0
    with num_threads(threads) as parts:
        per = copies if copies > 1 else replica_threads(parts, r)
        u = r * per
        bufs = (
            page_aligned((u, b, d)),
            np.empty((u, b, labels.shape[1]), np.float32),
            np.zeros((u, 2 * n), np.int32),
            np.empty((u, b), np.int32),
            np.empty((u, b), np.int32),
            np.empty((u, b), np.float32),
        )
        tree = (points, labels)
        written = np.zeros((syn0.shape[0], 16), np.int64)  # 128 bytes apart: a line each
        args = (syn0, syn1, *flat, lrs, num_steps, span, *tree, cap, per, copies > 1, written)
        args += bufs
        return sum(run_workers(_chunk, u, *args, threads=parts))
