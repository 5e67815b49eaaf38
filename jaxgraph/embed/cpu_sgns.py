"""The batched SGNS step of :func:`jaxgraph.embed.sgns.sgns_update` as a compiled CPU kernel.

JAX's CPU runtime runs the per-pair gathers and scatter-adds of a batched step as serial loops.
Here the same rule runs in two parallel phases (numba, ``prange``). Phase 1, one group of ``G``
pairs (sharing negatives) per iteration, computes from the unchanged tables each pair's
input-row gradient and keeps a copy of its input row, of which its output rows' updates are
multiples (with ``G > 1`` a shared negative's update is summed over its group there). Phase 2
adds the updates to the tables, scaled by the row cap ``min(1, c / k)``: rows are dealt to
threads by id and each row takes its updates in the order of ``sgns_update``'s scatters, so
the result is the same for any thread count. The cap counts over one id space (``syn0`` row
``i`` is id ``i``, ``syn1`` row ``j`` is id ``N + j``) in counters cleared only at the batch's
ids, so a step costs ``O(B (K + 2) d)``, not ``O(N d)``.

:func:`step_update` is one step; :func:`train_chunk` is
:func:`jaxgraph.embed.programs._train_chunk` for one replica (interleaved spans, a rate per
step, zero-weight padding) with the negatives drawn in the kernel from the alias table on
counter-based streams, one per (key, global step, group) (:func:`chunk_negatives`), so the
draws do not depend on the thread count either.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from jaxgraph.embed import _hostrng as hr

# Reassociation vectorises the dot products and row updates (fp32 rounding differs, within
# tolerance); no nnan / ninf, so a diverging table still shows NaN or inf.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


@njit(inline="always", cache=True)
def _step_key(key, step):
    """The key of global step ``step`` under the chunk key ``key`` (``uint64``)."""
    return hr.stream(key, step)


@njit(inline="always", cache=True)
def _draw_group(step_key, group, accept, alias, out):
    """Fills ``out: int32[K]`` with the negatives of group ``group`` of the step keyed
    ``step_key``: alias draws ``i ~ U[0, N)``, ``i if u < accept[i] else alias[i]``."""
    state = hr.stream(step_key, group)
    n = accept.shape[0]
    for k in range(out.shape[0]):
        state, j = hr.next_below(state, n)
        state, u = hr.next_uniform(state)
        out[k] = j if u < accept[j] else alias[j]


class _Workspace(NamedTuple):
    """The buffers of a step. Entry ``e < E = 2B + K B/G`` is one update of one row: the ``B``
    input rows, the ``B`` positive rows, then each group's ``K`` negative rows, in the order of
    ``sgns_update``'s scatters. Its row is id ``ids[e]``; its update is ``coef[e] *
    rows[src[e]]``, where ``rows: f32[E, d]`` holds each pair's input-row gradient (rows
    ``< B``), a copy of its input row from before the step (rows ``B .. 2B``: a positive's
    update, and a negative's when ``G = 1``, is a multiple of it) and, when ``G > 1``, each
    shared negative's summed update; ``owner[e] = ids[e] % threads`` is the thread that
    applies it, ``hits[e]`` whether it is live for the cap. ``counts: int32[2N]`` are the
    cap's counters (zero between steps), ``group_loss: f64[B/G]`` each group's loss."""

    rows: np.ndarray
    coef: np.ndarray
    src: np.ndarray
    ids: np.ndarray
    owner: np.ndarray
    hits: np.ndarray
    counts: np.ndarray
    group_loss: np.ndarray

    @classmethod
    def create(cls, num_rows: int, dim: int, batch: int, groups: int, negatives: int):
        entries = 2 * batch + groups * negatives
        ints = lambda: np.empty(entries, np.int32)
        rows = np.empty((entries, dim), np.float32)  # rows >= 2B are touched only when G > 1
        coef = np.empty(entries, np.float32)
        counts = np.zeros(2 * num_rows, np.int32)
        return cls(rows, coef, ints(), ints(), ints(), ints(), counts, np.zeros(groups))


@njit(parallel=True, nogil=True, cache=True, fastmath=_FAST)
def _gradients(syn0, syn1, ins, outs, weight, negs, lr, draw, step_key, table, parts, ws):
    """Phase 1: every entry of ``ws`` (:class:`_Workspace`) from the unchanged tables, one
    group of pairs per iteration; ``table = (accept, alias)`` draws ``negs`` first if
    ``draw``."""
    # Not one tuple unpacking of them all: numba 0.68's parfor pass then lost the stores to
    # the last one (group_loss).
    rows, coef, src = ws.rows, ws.coef, ws.src
    ids, owner, hits = ws.ids, ws.owner, ws.hits
    group_loss = ws.group_loss
    n_rows, d = syn0.shape
    b = ins.shape[0]
    groups, kn = negs.shape
    share = b // groups
    lr32 = np.float32(lr)
    zero, one = np.float32(0.0), np.float32(1.0)
    for n in prange(groups):
        if draw:
            _draw_group(step_key, n, table[0], table[1], negs[n])
        base = 2 * b + n * kn
        for k in range(kn):
            e = base + k
            ids[e] = n_rows + negs[n, k]
            owner[e] = ids[e] % parts
            hits[e] = 0
            if share == 1:  # a multiple of the pair's input row
                src[e], coef[e] = b + n, zero
            else:  # the sum over the group, accumulated here
                src[e], coef[e] = e, one
                for q in range(d):
                    rows[e, q] = zero
        loss = 0.0
        for p in range(n * share, (n + 1) * share):
            i, t, wp = ins[p], outs[p], weight[p]
            live = 1 if wp > 0 else 0
            ids[p], ids[b + p] = i, n_rows + t
            owner[p], owner[b + p] = ids[p] % parts, ids[b + p] % parts
            hits[p], hits[b + p] = live, live
            a = lr32 * wp
            # With e = exp(-|f|): sigmoid(f) = 1 / (1 + e) for f >= 0, e / (1 + e) below, and
            # -log sigmoid(+-f) = log(1 + e) + max(-+f, 0); the logs of a pair are one log of
            # the product of its (1 + e) (float64: at most 2 ** (K + 1)).
            f = zero
            for q in range(d):
                f += syn0[i, q] * syn1[t, q]
            e = math.exp(-abs(f))
            inv = one / (one + e)
            g = (e * inv if f >= zero else inv) * a  # (1 - sigmoid(f)) * lr * w
            product = 1.0 + np.float64(e)
            hinge = max(-np.float64(f), 0.0)
            src[p], coef[p] = p, one
            src[b + p], coef[b + p] = b + p, g
            for q in range(d):
                rows[p, q] = g * syn1[t, q]
                rows[b + p, q] = syn0[i, q]
            for k in range(kn):
                o = negs[n, k]
                if o == t:  # word2vec skips a negative equal to the positive
                    continue
                f = zero
                for q in range(d):
                    f += syn0[i, q] * syn1[o, q]
                e = math.exp(-abs(f))
                inv = one / (one + e)
                g = -(inv if f >= zero else e * inv) * a  # -sigmoid(f) * lr * w
                product *= 1.0 + np.float64(e)
                hinge += max(np.float64(f), 0.0)
                hits[base + k] |= live
                for q in range(d):
                    rows[p, q] += g * syn1[o, q]
                if share == 1:
                    coef[base + k] = g
                else:
                    for q in range(d):
                        rows[base + k, q] += g * syn0[i, q]
            loss += wp * (math.log(product) + hinge)
        group_loss[n] = loss


@njit(parallel=True, nogil=True, cache=True, fastmath=_FAST)
def _apply(syn0, syn1, cap, parts, ws):
    """Phase 2: thread ``part`` adds the entries of the ids it owns to the tables, in entry
    order, each scaled by ``min(1, cap / k)`` for its id's ``k`` live entries (``cap = 0``: no
    cap), counted in ``ws.counts`` and cleared there after."""
    rows, coef, src = ws.rows, ws.coef, ws.src
    ids, owner, hits = ws.ids, ws.owner, ws.hits
    counts = ws.counts
    n_rows, d = syn0.shape
    entries = ids.shape[0]
    one = np.float32(1.0)
    for part in prange(parts):
        if cap > 0:
            for e in range(entries):
                if owner[e] == part:
                    counts[ids[e]] += hits[e]
        for e in range(entries):
            if owner[e] != part:
                continue
            r = ids[e]
            c = coef[e]
            if cap > 0:
                c *= min(one, np.float32(cap) / np.float32(max(counts[r], 1)))
            j = src[e]
            if r < n_rows:
                for q in range(d):
                    syn0[r, q] += c * rows[j, q]
            else:
                r -= n_rows
                for q in range(d):
                    syn1[r, q] += c * rows[j, q]
        if cap > 0:
            for e in range(entries):
                if owner[e] == part:
                    counts[ids[e]] = 0


@njit(nogil=True, cache=True)
def _chunk(syn0, syn1, flat, lrs, num_steps, span, key, first_step, table, cap, parts, step, ws):
    """The steps of :func:`train_chunk`; ``flat = (inputs, outputs, weights)`` flattened,
    ``step = (inputs, outputs, weights, negatives)`` one step's buffers. Returns the summed
    loss."""
    flat_in, flat_out, flat_w = flat
    ins, outs, w, negs = step
    batch = ins.shape[0]
    total = 0.0
    for s in range(num_steps):
        g = (s // span) * span  # the first step of s's span
        stride = min(span, num_steps - g)
        start = g * batch + (s - g)
        for j in range(batch):
            at = start + stride * j
            ins[j], outs[j], w[j] = flat_in[at], flat_out[at], flat_w[at]
        step_key = _step_key(key, first_step + s)
        _gradients(syn0, syn1, ins, outs, w, negs, lrs[s], True, step_key, table, parts, ws)
        _apply(syn0, syn1, cap, parts, ws)
        for n in range(ws.group_loss.shape[0]):
            total += ws.group_loss[n]
    return total


@njit(parallel=True, nogil=True, cache=True)
def _chunk_negatives(key, first_step, accept, alias, out):
    """Fills ``out: int32[S, B/G, K]`` with the negatives of steps ``first_step ..``."""
    for s in range(out.shape[0]):
        step_key = _step_key(key, first_step + s)
        for n in prange(out.shape[1]):
            _draw_group(step_key, n, accept, alias, out[s, n])


@contextlib.contextmanager
def _num_threads(threads: int | None):
    """Runs the block on ``threads`` numba threads (None: all), restoring the count after."""
    limit = numba.config.NUMBA_NUM_THREADS
    if threads is None:
        threads = limit
    if not isinstance(threads, numbers.Integral) or not 1 <= threads <= limit:
        raise ValueError(f"threads must be an integer in [1, {limit}] or None, got {threads!r}")
    previous = numba.get_num_threads()
    numba.set_num_threads(int(threads))
    try:
        yield int(threads)
    finally:
        numba.set_num_threads(previous)


def _check_tables(syn0, syn1) -> tuple[int, int]:
    """Raises ``ValueError`` unless both tables are writeable, C-contiguous ``float32[N, d]``
    NumPy arrays of one shape and distinct memory; returns ``(N, d)``."""
    for name, table in (("syn0", syn0), ("syn1", syn1)):
        if not isinstance(table, np.ndarray):
            raise ValueError(f"{name} must be a NumPy array (updated in place), got {type(table)}")
        if table.dtype != np.float32 or table.ndim != 2:
            raise ValueError(f"{name} must be float32[N, d], got {table.dtype}{list(table.shape)}")
        if not table.flags.c_contiguous or not table.flags.writeable:
            raise ValueError(f"{name} must be C-contiguous and writeable (it is updated in place)")
    if syn0.shape != syn1.shape:
        raise ValueError(f"syn0 and syn1 must have one shape, got {syn0.shape} and {syn1.shape}")
    if np.may_share_memory(syn0, syn1):
        raise ValueError("syn0 and syn1 must not share memory")
    if syn0.shape[0] >= 2**30:
        raise ValueError(f"at most 2**30 rows, got {syn0.shape[0]}")
    return syn0.shape


def _check_ids(name: str, ids, num_rows: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``ids`` as contiguous ``int32``; raises ``ValueError`` for a non-integer array, another
    ``shape`` or an id outside ``[0, num_rows)``."""
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, got {ids.dtype}")
    if shape is not None and ids.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_rows):
        raise ValueError(
            f"{name} must be row ids in [0, {num_rows}), got values in [{ids.min()}, {ids.max()}]"
        )
    return np.ascontiguousarray(ids, np.int32)


def _check_floats(name: str, values, shape: tuple[int, ...]) -> np.ndarray:
    """``values`` as contiguous finite ``float32[shape]``, else ``ValueError``."""
    values = np.asarray(values)
    if values.shape != shape or not np.issubdtype(values.dtype, np.floating):
        want = ", ".join(map(str, shape))
        raise ValueError(f"{name} must be float[{want}], got {values.dtype}{list(values.shape)}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(values, np.float32)


def _check_cap(row_cap) -> int:
    """``row_cap`` as the kernel's integer (0: None), else ``ValueError``."""
    if row_cap is None:
        return 0
    if isinstance(row_cap, bool) or not isinstance(row_cap, numbers.Integral) or row_cap < 1:
        raise ValueError(f"row_cap must be an integer >= 1 or None, got {row_cap!r}")
    return int(row_cap)


def _check_alias(accept, alias, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The alias table as contiguous ``(f32[N], int32[N])`` over the ``N`` table rows."""
    accept = _check_floats("accept", accept, (num_rows,))
    return accept, _check_ids("alias", alias, num_rows, (num_rows,))


def step_update(
    syn0: np.ndarray,
    syn1: np.ndarray,
    inputs: np.ndarray,
    outputs: np.ndarray,
    negatives: np.ndarray,
    weight: np.ndarray,
    lr: float,
    row_cap: int | None = None,
    *,
    threads: int | None = None,
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
      threads: numba threads for the call (None: all); the result does not depend on it.

    Returns:
      The weighted loss ``sum_b w_b (-log sigmoid(s.o_0) - sum_k log sigmoid(-s.o_k))`` before
      the update.

    Raises:
      ValueError: on tables that are not C-contiguous float32 of one shape, ids out of range,
        shapes that do not match, a non-finite ``lr`` or weight, or a bad ``row_cap``; nothing
        is changed then.
    """
    n, d = _check_tables(syn0, syn1)
    inputs = _check_ids("inputs", inputs, n)
    if inputs.ndim != 1:
        raise ValueError(f"inputs must be int[B], got shape {inputs.shape}")
    b = inputs.shape[0]
    outputs = _check_ids("outputs", outputs, n, (b,))
    negatives = _check_ids("negatives", negatives, n)
    if negatives.ndim != 2 or negatives.shape[0] < 1 or b % negatives.shape[0]:
        raise ValueError(
            f"negatives must be int[B / G, K] with B / G dividing B = {b}, got shape "
            f"{negatives.shape}"
        )
    weight = _check_floats("weight", weight, (b,))
    if not math.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    cap = _check_cap(row_cap)
    no_table = (np.ones(1, np.float32), np.zeros(1, np.int32))  # negatives are given
    with _num_threads(threads) as parts:
        ws = _Workspace.create(n, d, b, *negatives.shape)
        lr = np.float32(lr)
        args = (inputs, outputs, weight, negatives, lr, False, np.uint64(0), no_table, parts, ws)
        _gradients(syn0, syn1, *args)
        _apply(syn0, syn1, cap, parts, ws)
    return float(ws.group_loss.sum())


def _check_key(key) -> np.uint64:
    if isinstance(key, bool) or not isinstance(key, numbers.Integral) or not 0 <= key < 2**64:
        raise ValueError(f"key must be an integer in [0, 2**64), got {key!r}")
    return np.uint64(key)


def chunk_negatives(
    key: int,
    first_step: int,
    num_steps: int,
    groups: int,
    negatives: int,
    accept: np.ndarray,
    alias: np.ndarray,
) -> np.ndarray:
    """The negatives :func:`train_chunk` draws: ``int32[num_steps, groups, K]``, step ``s``
    group ``n`` from the stream ``(key, first_step + s, n)`` through the alias table
    (:func:`jaxgraph.embed.corpus.alias_table`, ``accept: f32[N]``, ``alias: int[N]``)."""
    key = _check_key(key)
    accept, alias = _check_alias(accept, alias, np.asarray(accept).shape[0])
    for name, value in (("first_step", first_step), ("num_steps", num_steps)):
        if not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if groups < 1 or negatives < 1:
        raise ValueError(f"groups and negatives must be >= 1, got {groups} and {negatives}")
    out = np.empty((num_steps, groups, negatives), np.int32)
    _chunk_negatives(key, np.int64(first_step), accept, alias, out)
    return out


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
    :func:`jaxgraph.embed.programs._train_chunk`: step ``s`` of the span of ``I = span`` steps
    starting at ``g`` (None: one span) trains pairs ``g B + (s - g) + I' j`` (``j < B``,
    ``I' = min(I, S' - g)``) of the flattened buffers at rate ``lrs[s]`` with
    :func:`step_update`'s rule, drawing ``K`` negatives per group of ``share`` pairs
    (:func:`chunk_negatives` with ``first_step``).

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
      threads: numba threads for the call (None: all); the result does not depend on it.
      first_step: the global index of step 0 (keys the negatives).

    Returns:
      The summed loss of the steps (each before its update).

    Raises:
      ValueError: on bad tables, shapes, ids or arguments (as :func:`step_update`); nothing is
        changed then.
    """
    n, d = _check_tables(syn0, syn1)
    inputs = np.asarray(inputs)
    if inputs.ndim != 2 or inputs.shape[1] < 1:
        raise ValueError(f"inputs must be int[S, B], got shape {inputs.shape}")
    s_all, b = inputs.shape
    if not isinstance(num_steps, numbers.Integral) or not 0 <= num_steps <= s_all:
        raise ValueError(f"num_steps must be an integer in [0, {s_all}], got {num_steps!r}")
    if not isinstance(first_step, numbers.Integral) or first_step < 0:
        raise ValueError(f"first_step must be an integer >= 0, got {first_step!r}")
    if np.shape(outputs) != (s_all, b):
        raise ValueError(f"outputs must have shape {(s_all, b)}, got {np.shape(outputs)}")
    used = slice(0, num_steps)
    flat_in = _check_ids("inputs", inputs[used], n).reshape(-1)
    flat_out = _check_ids("outputs", np.asarray(outputs)[used], n).reshape(-1)
    flat_w = _check_floats("weights", weights, (s_all, b))[used].reshape(-1)
    lrs = _check_floats("lrs", lrs, (s_all,))
    accept, alias = _check_alias(accept, alias, n)
    key = _check_key(key)
    if not isinstance(negatives, numbers.Integral) or negatives < 1:
        raise ValueError(f"negatives must be an integer >= 1, got {negatives!r}")
    if not isinstance(share, numbers.Integral) or not 1 <= share <= b or b % share:
        raise ValueError(f"share must be in [1, B = {b}] and divide it, got {share!r}")
    if span is not None and (not isinstance(span, numbers.Integral) or span < 1):
        raise ValueError(f"span must be an integer >= 1 or None, got {span!r}")
    cap = _check_cap(row_cap)
    if num_steps == 0:
        return 0.0
    span = num_steps if span is None else min(int(span), num_steps)
    groups = b // share
    step = (np.empty(b, np.int32), np.empty(b, np.int32), np.empty(b, np.float32))
    step += (np.empty((groups, int(negatives)), np.int32),)
    flat, table, first = (flat_in, flat_out, flat_w), (accept, alias), np.int64(first_step)
    with _num_threads(threads) as parts:
        ws = _Workspace.create(n, d, b, groups, int(negatives))
        return _chunk(
            syn0, syn1, flat, lrs, num_steps, span, key, first, table, cap, parts, step, ws
        )
