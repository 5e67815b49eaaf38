"""The batched SGNS step of :func:`jaxgraph.embed.sgns.sgns_update` as a compiled CPU kernel.

JAX's CPU runtime runs the per-pair gathers and scatter-adds of a batched step as serial loops.
Here a step runs on one thread in two passes: :func:`_gradients` computes every pair's input-row
gradient and its output rows' coefficients from the tables, then :func:`_write` applies the
output rows' updates (multiples of the input rows; a negative shared by a group of ``G`` pairs
takes each pair's in turn), then the input rows', each scaled by the row cap ``min(1, c / k)``
counted over one id space (``syn0`` row ``i`` is id ``i``, ``syn1`` row ``j`` is id ``N + j``)
in counters cleared only at the batch's ids, so a step costs ``O(B (K + 2) d)``, not ``O(N
d)``. A pair scores its positive and negatives six rows to a pass over its input row
(:func:`_dots`: six independent sums, where one row at a time waits on each sum's adds; the pass
is 15-20 % cheaper) and writes them six to a pass over its input row
(:func:`~jaxgraph.embed._intrinsics.axpy_rows`: 5-8 % more pairs/s on one thread); the rows of the
pair two ahead are prefetched.

:func:`step_update` is one step; :func:`train_chunk` is
:func:`jaxgraph.embed.programs._train_chunk` for one replica (interleaved spans, a rate per
step, zero-weight padding) with the negatives drawn in the kernel from the alias table on
counter-based streams, one per (key, global step, group) (:mod:`~jaxgraph.embed.cpu_negatives`);
:func:`train_replicas` trains several replicas at once. Threads share a chunk's steps as
:mod:`jaxgraph.embed._kernel_steps` describes: gradients overlap, writes go in step order, so
``T > 1`` threads on a replica vary its bits from run to run, or (``copies``) each trains a
stretch of the steps on its own copy of the tables; one thread gives the JAX step's result to
fp32 tolerance and repeats its bits.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np
from numba import njit

from jaxgraph.embed._intrinsics import axpy_rows, prefetch_row
from jaxgraph.embed._kernel_args import (
    check_alias,
    check_cap,
    check_ids,
    check_key,
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
from jaxgraph.embed.cpu_negatives import draw_step

# Reassociation vectorises the dot products and row updates (fp32 rounding differs, within
# tolerance); no nnan / ninf, so a diverging table still shows NaN or inf.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


class _Workspace(NamedTuple):
    """One buffer per thread (leading axis ``T``) for its steps of ``B`` pairs in ``B / G``
    groups of ``K`` negatives: ``grad: f32[T, B, d]`` each pair's input-row gradient, ``pos:
    f32[T, B]`` each positive's coefficient (its update is ``pos[p] * syn0[i_p]``), ``neg:
    f32[T, B, K]`` each of its negatives' (the same multiple of its input row; a negative
    shared by a group takes the sum of its pairs'), ``hit: int32[T, B / G, K]`` whether a
    live pair used it, ``counts: int32[T, 2N]`` the cap's counters over one id space (``syn0``
    row ``i`` is id ``i``, ``syn1`` row ``j`` is ``N + j``; zero between steps), and the
    step's pairs ``ins, outs: int32[T, B]``, ``w: f32[T, B]``, ``negs: int32[T, B / G, K]``."""

    grad: np.ndarray
    pos: np.ndarray
    neg: np.ndarray
    hit: np.ndarray
    counts: np.ndarray
    ins: np.ndarray
    outs: np.ndarray
    w: np.ndarray
    negs: np.ndarray

    @classmethod
    def create(cls, threads: int, num_rows: int, dim: int, batch: int, groups: int, k: int):
        t = threads
        return cls(
            page_aligned((t, batch, dim)),
            np.empty((t, batch), np.float32),
            np.zeros((t, batch, k), np.float32),
            np.zeros((t, groups, k), np.int32),
            np.zeros((t, 2 * num_rows), np.int32),
            np.empty((t, batch), np.int32),
            np.empty((t, batch), np.int32),
            np.empty((t, batch), np.float32),
            np.empty((t, groups, k), np.int32),
        )


@njit(inline="always", cache=True)
def _scale(counts, r, cap):
    """The cap's factor ``min(1, cap / k)`` for id ``r`` with ``k`` live updates (1 without a
    cap), as ``cap / max(k, cap)``: no branch on ``k``, which a hub row makes unpredictable
    (7 % of a step at 18,000 rows)."""
    if cap == 0:
        return np.float32(1.0)
    return np.float32(cap) / np.float32(max(counts[r], cap))


# Pairs ahead whose rows are prefetched (the best of 1, 2, 4, 8, 16 on a 20k-row table).
_AHEAD = 2


@njit(inline="always", cache=True)
def _prefetch_pair(syn0, syn1, ins, outs, negs, p, share):
    """Prefetches the rows pair ``p`` reads and writes (its negatives when it has its own: a
    group's shared ones are in cache after its first pair)."""
    prefetch_row(syn0, ins[p])
    prefetch_row(syn1, outs[p])
    if share == 1:
        for k in range(negs.shape[1]):
            prefetch_row(syn1, negs[p, k])


# Output rows a pair scores in one pass over its input row: the positive and K = 5 negatives
# (more negatives take more passes; fewer leave rows unused, scored against the positive's).
_BLOCK = 6


@njit(inline="always", cache=True, fastmath=_FAST)
def _dots(x, i, y, r0, r1, r2, r3, r4, r5):
    """The scores ``x[i] . y[r]`` of six rows of ``y``, in one pass."""
    f0 = f1 = f2 = f3 = f4 = f5 = np.float32(0.0)
    for q in range(x.shape[1]):
        v = x[i, q]
        f0 += v * y[r0, q]
        f1 += v * y[r1, q]
        f2 += v * y[r2, q]
        f3 += v * y[r3, q]
        f4 += v * y[r4, q]
        f5 += v * y[r5, q]
    return f0, f1, f2, f3, f4, f5


@njit(inline="always", cache=True, fastmath=_FAST)
def _combine(out, p, add, y, rows, gs):
    """``out[p] (+)= sum_j gs[j] y[rows[j]]`` over six rows, in one pass."""
    r0, r1, r2, r3, r4, r5 = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
    g0, g1, g2, g3, g4, g5 = gs[0], gs[1], gs[2], gs[3], gs[4], gs[5]
    zero = np.float32(0.0)
    for q in range(out.shape[1]):
        acc = out[p, q] if add else zero
        acc += g0 * y[r0, q] + g1 * y[r1, q] + g2 * y[r2, q]
        acc += g3 * y[r3, q] + g4 * y[r4, q] + g5 * y[r5, q]
        out[p, q] = acc


@njit(inline="always", cache=True)
def _coef(f, positive, a):
    """A score's update coefficient ``(label - sigmoid(f)) a`` and its loss terms: with
    ``e = exp(-|f|)``, ``sigmoid(f) = 1 / (1 + e)`` for ``f >= 0`` and ``e / (1 + e)`` below,
    and ``-log sigmoid(+-f) = log(1 + e) + max(-+f, 0)``. Returns ``(g, 1 + e, hinge)``."""
    zero, one = np.float32(0.0), np.float32(1.0)
    e = math.exp(-abs(f))
    inv = one / (one + e)
    if positive:
        return (e * inv if f >= zero else inv) * a, 1.0 + np.float64(e), max(-np.float64(f), 0.0)
    return -(inv if f >= zero else e * inv) * a, 1.0 + np.float64(e), max(np.float64(f), 0.0)


@njit(nogil=True, cache=True, fastmath=_FAST)
def _gradients(syn0, syn1, ins, outs, weight, negs, lr, cap, grad, pos, neg, hit, counts):
    """A step's first pass (:func:`step_update`'s rule), reading the tables: fills one
    thread's slices of :class:`_Workspace`. Returns the step's weighted loss."""
    n_rows, d = syn0.shape
    b = ins.shape[0]
    groups, kn = negs.shape
    share = b // groups
    lr32 = np.float32(lr)
    zero = np.float32(0.0)
    rows = np.empty(_BLOCK, np.int64)
    gs = np.empty(_BLOCK, np.float32)
    loss = 0.0
    # Gradients, from the unchanged tables; the cap's counts.
    for n in range(groups):
        for k in range(kn):
            hit[n, k] = 0
        for p in range(n * share, (n + 1) * share):
            i, t, wp = ins[p], outs[p], weight[p]
            if p + _AHEAD < b:
                _prefetch_pair(syn0, syn1, ins, outs, negs, p + _AHEAD, share)
            live = 1 if wp > 0 else 0
            if cap > 0:
                counts[i] += live
                counts[n_rows + t] += live
            a = lr32 * wp
            # The logs of a pair are one log of the product of its (1 + e) (float64: at most
            # 2 ** (K + 1)). Row j of the pair: the positive (j = 0), then negative j - 1.
            product, hinge = 1.0, 0.0
            for j0 in range(0, kn + 1, _BLOCK):
                for j in range(_BLOCK):
                    rows[j] = t if j0 + j == 0 or j0 + j > kn else negs[n, j0 + j - 1]
                fs = _dots(syn0, i, syn1, rows[0], rows[1], rows[2], rows[3], rows[4], rows[5])
                for j in range(_BLOCK):
                    jj, gs[j] = j0 + j, zero
                    if jj > kn or (jj > 0 and rows[j] == t):
                        # past the negatives, or one equal to the positive (word2vec skips it)
                        if 0 < jj <= kn:
                            neg[p, jj - 1] = zero
                        continue
                    g, one_plus_e, h = _coef(fs[j], jj == 0, a)
                    gs[j], product, hinge = g, product * one_plus_e, hinge + h
                    if jj == 0:
                        pos[p] = g
                        continue
                    hit[n, jj - 1] |= live
                    neg[p, jj - 1] = g
                _combine(grad, p, j0 > 0, syn1, rows, gs)
            loss += wp * (math.log(product) + hinge)
        if cap > 0:
            for k in range(kn):
                counts[n_rows + negs[n, k]] += hit[n, k]
    return loss


@njit(nogil=True, cache=True, fastmath=_FAST)
def _write(syn0, syn1, ins, outs, negs, cap, grad, pos, neg, counts):
    """A step's second pass: :func:`_gradients`' updates applied to the tables in place, and
    the cap's counters cleared."""
    n_rows, d = syn0.shape
    b = ins.shape[0]
    groups, kn = negs.shape
    share = b // groups
    rows = np.empty(_BLOCK, np.int64)
    cs = np.empty(_BLOCK, np.float32)
    zero = np.float32(0.0)
    # Output rows first (their updates are multiples of the unchanged input rows), then the
    # input rows; each update scaled by its row's cap. A shared negative takes its group's
    # pairs' multiples one by one: the sum of their updates, scaled once.
    for n in range(groups - 1, -1, -1):
        for p in range((n + 1) * share - 1, n * share - 1, -1):
            i, t = ins[p], outs[p]
            if p >= _AHEAD:
                _prefetch_pair(syn0, syn1, ins, outs, negs, p - _AHEAD, share)
            # The positive and the K negatives, six rows to a pass; rows past the K-th are the
            # positive's with coefficient 0, as the gradient pass pads them.
            for j0 in range(0, kn + 1, _BLOCK):
                for j in range(_BLOCK):
                    jj = j0 + j
                    o = t if jj == 0 or jj > kn else negs[n, jj - 1]
                    g = pos[p] if jj == 0 else (neg[p, jj - 1] if jj <= kn else zero)
                    rows[j], cs[j] = o, g * _scale(counts, n_rows + o, cap)
                axpy_rows(syn1, rows, cs, syn0, i)
    # Forward: pair 0's input row is the one the output pass read last, and LLVM vectorises
    # this loop only with a forward stride (backward, it ran one float at a time: 12 % of a
    # step's time).
    for p in range(b):
        i = ins[p]
        c = _scale(counts, i, cap)
        for q in range(d):
            syn0[i, q] += c * grad[p, q]
    if cap > 0:
        for p in range(b):
            counts[ins[p]] = 0
            counts[n_rows + outs[p]] = 0
        for n in range(groups):
            for k in range(kn):
                counts[n_rows + negs[n, k]] = 0


@njit(nogil=True, cache=True)
def _chunk(
    first_worker, stride_workers, syn0, syn1, flat_in, flat_out, flat_w, lrs, num_steps, span,
    keys, first_step, accept, alias, cap, per_replica, copies, written, grad, pos, neg,
    hit, counts, ins, outs, w, negs,
):  # fmt: skip
    """Workers ``first_worker, first_worker + stride_workers, ..`` of :func:`train_replicas`
    (:func:`~jaxgraph.embed._kernel_steps.run_workers`): worker ``u`` (of ``R T``) is thread
    ``t = u % T`` of replica ``r = u // T`` (``T = per_replica``) and trains its steps ``t, t +
    T, ..``, writing each once the replica's step before it is written (``written[r]``,
    :mod:`~jaxgraph.embed._kernel_steps`); with ``copies``, it trains the ``t``-th of ``T``
    contiguous stretches of the steps on its own copy ``u`` of the tables, without waiting.
    Returns the workers' summed loss."""
    total = 0.0
    for u in range(first_worker, ins.shape[0], stride_workers):
        r, c, first, last, stride = worker_steps(u, per_replica, num_steps, copies)
        x0, x1, key, done = syn0[c], syn1[c], keys[r], written[c]
        for s in range(first, last, stride):
            gather_step(
                flat_in[r], flat_out[r], flat_w[r], s, span, num_steps, ins[u], outs[u], w[u]
            )
            draw_step(key, first_step + s, accept, alias, negs[u])
            total += _gradients(
                x0, x1, ins[u], outs[u], w[u], negs[u], lrs[s], cap,
                grad[u], pos[u], neg[u], hit[u], counts[u],
            )  # fmt: skip
            if not copies:
                await_written(done, s)
            _write(x0, x1, ins[u], outs[u], negs[u], cap, grad[u], pos[u], neg[u], counts[u])
            if not copies:
                mark_written(done, s)
    return total


def step_update(
    syn0: np.ndarray,
    syn1: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    negatives: np.ndarray,
    weight: np.ndarray,
    lr: float,
    row_cap: int | None = None,
) -> float:
    """One batched SGNS step in place: :func:`jaxgraph.embed.sgns.sgns_update`'s rule (every
    pair's gradient from the unchanged tables, a negative equal to the pair's positive skipped,
    the row cap counted over one id space, a shared negative counted once per group).

    Shapes:
      ``syn0, syn1: f32[N, d]`` (C-contiguous, updated in place), ``inputs, outputs: int[B]``,
      ``negatives: int[B / G, K]`` (group ``n`` is pairs ``n G .. n G + G - 1``),
      ``weight: f[B]`` (``0`` for padding pairs).

    Args:
      lr: the step's rate.
      row_cap: a row with ``k`` live updates moves by ``min(1, row_cap / k)`` times their sum
        (None: the sum).

    Returns:
      The weighted loss ``sum_b w_b (-log sigmoid(s.o_0) - sum_k log sigmoid(-s.o_k))`` before
      the update.

    Raises:
      ValueError: on tables that are not C-contiguous float32 of one shape, ids out of range,
        shapes that do not match, a non-finite ``lr`` or weight, or a bad ``row_cap``; nothing
        is changed then.
    """
    step = check_step(syn0, syn1, inputs, outputs, weight, lr, row_cap)
    n, d, inputs, outputs, weight, cap = step
    b = inputs.shape[0]
    negatives = check_ids("negatives", negatives, n)
    if negatives.ndim != 2 or negatives.shape[0] < 1 or b % negatives.shape[0]:
        raise ValueError(
            f"negatives must be int[B / G, K] with B / G dividing B = {b}, got shape "
            f"{negatives.shape}"
        )
    ws = _Workspace.create(1, n, d, b, *negatives.shape)
    grad, pos, neg, hit, counts = (a[0] for a in ws[:5])
    args = (inputs, outputs, weight, negatives, np.float32(lr), cap, grad, pos, neg, hit)
    loss = _gradients(syn0, syn1, *args, counts)
    _write(syn0, syn1, inputs, outputs, negatives, cap, grad, pos, neg, counts)
    return loss


def train_chunk(
    syn0: np.ndarray,
    syn1: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    weights: np.ndarray,
    lrs: np.ndarray,
    num_steps: int,
    key: int,
    accept: np.ndarray,
    alias: np.ndarray,
    negatives: int,
    share: int = 1,
    span: int | None = None,
    row_cap: int | None = None,
    threads: int | None = None,
    *,
    first_step: int = 0,
) -> float:
    """The first ``num_steps`` steps of a chunk on one replica, in place, as
    :func:`jaxgraph.embed.programs._train_chunk` (in :mod:`~jaxgraph.embed._kernel_steps`'
    order): step ``s`` at rate ``lrs[s]`` with :func:`step_update`'s rule, drawing ``K``
    negatives per group of ``share`` pairs
    (:func:`~jaxgraph.embed.cpu_negatives.chunk_negatives` with ``first_step``).

    Shapes:
      ``syn0, syn1: f32[N, d]`` (C-contiguous), ``inputs, outputs: int[S, B]``, ``weights:
      f[S, B]`` (``0``: padding), ``lrs: f[S]``, ``accept: f32[N]``, ``alias: int[N]``.

    Args:
      num_steps: ``S' <= S`` steps to train.
      key: the chunk's 64-bit key of the negatives' streams.
      negatives: ``K``.
      share: ``G``, pairs per draw of negatives (dividing ``B``).
      span: ``I``, steps whose batches interleave (None: all ``S'``).
      row_cap: as :func:`step_update`.
      threads: kernel threads for the call (None: numba's thread count); above one, steps
        overlap (:mod:`~jaxgraph.embed._kernel_steps`).
      first_step: the global index of step 0 (keys the negatives).

    Returns:
      The summed loss of the steps (each before its update).

    Raises:
      ValueError: on bad tables, shapes, ids or arguments (as :func:`step_update`); nothing is
        changed then.
    """
    replica = one_replica(syn0, syn1, inputs, outputs, weights)
    args = (lrs, num_steps, [key], accept, alias, negatives, share, span, row_cap, threads)
    return train_replicas(*replica, *args, first_step=first_step)


def train_replicas(
    syn0: np.ndarray,
    syn1: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    weights: np.ndarray,
    lrs: np.ndarray,
    num_steps: int,
    keys,
    accept: np.ndarray,
    alias: np.ndarray,
    negatives: int,
    share: int = 1,
    span: int | None = None,
    row_cap: int | None = None,
    threads: int | None = None,
    *,
    first_step: int = 0,
    copies: int = 1,
) -> float:
    """:func:`train_chunk` on ``R`` replicas at once, each on its own tables, pairs and key,
    the threads split among them (:func:`~jaxgraph.embed._kernel_steps.replica_threads`): with
    one thread a replica, each ends as :func:`train_chunk` with ``threads=1`` would leave it.

    With ``copies = C > 1``, replica ``r`` has ``C`` copies of its tables (``syn0, syn1:
    f32[R C, N, d]``, copy ``r C + t``) and ``C`` workers: worker ``t`` trains the ``t``-th of
    ``C`` contiguous stretches of the replica's steps (``ceil(S' / C)`` each; their pairs,
    rates and negatives as above) on copy ``r C + t`` without waiting for the others; the
    caller merges the copies.

    Shapes:
      ``syn0, syn1: f32[R, N, d]`` (C-contiguous), ``inputs, outputs: int[R, S, B]``,
      ``weights: f[R, S, B]``, ``keys``: ``R`` keys; the rest as :func:`train_chunk`.

    Returns:
      The summed loss of every replica's steps.

    Raises:
      ValueError: as :func:`train_chunk`, or on ``R`` that differs between arguments.
    """
    pairs = (inputs, outputs, weights, lrs, num_steps, span)
    r, n, d, flat, lrs, b, span = check_replicas(syn0, syn1, *pairs, copies=copies)
    if not isinstance(first_step, numbers.Integral) or first_step < 0:
        raise ValueError(f"first_step must be an integer >= 0, got {first_step!r}")
    accept, alias = check_alias(accept, alias, n)
    if len(keys) != r:
        raise ValueError(f"keys must hold one key per replica ({r}), got {len(keys)}")
    keys = np.array([check_key(k) for k in keys], np.uint64)
    if not isinstance(negatives, numbers.Integral) or negatives < 1:
        raise ValueError(f"negatives must be an integer >= 1, got {negatives!r}")
    if not isinstance(share, numbers.Integral) or not 1 <= share <= b or b % share:
        raise ValueError(f"share must be in [1, B = {b}] and divide it, got {share!r}")
    cap = check_cap(row_cap)
    if num_steps == 0:
        return 0.0
    groups = b // share
    table = (accept, alias)
    with num_threads(threads) as parts:
        per = copies if copies > 1 else replica_threads(parts, r)
        ws = _Workspace.create(r * per, n, d, b, groups, int(negatives))
        written = np.zeros((syn0.shape[0], 16), np.int64)  # 128 bytes apart: a line each
        args = (syn0, syn1, *flat, lrs, num_steps, span, keys, np.int64(first_step), *table)
        args += (cap, per, copies > 1, written, *ws)
        return sum(run_workers(_chunk, r * per, *args, threads=parts))
