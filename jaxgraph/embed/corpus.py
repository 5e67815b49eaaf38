"""Host planning of skip-gram training data: counts, sub-sampling, negative tables, pairs.

Following word2vec (Mikolov et al. 2013) exactly:

* **Sub-sampling**: a token of node ``v`` is kept with probability
  ``p(v) = min(1, (sqrt(c_v / (s T)) + 1) * s T / c_v)`` (``c_v`` its count, ``T`` the total,
  ``s`` = ``sample``; ``s <= 0`` keeps everything). Discarded tokens are removed from the walk
  before windowing, so a window spans over them.
* **Window**: each kept centre draws a shrink ``b`` uniform on ``{0..w-1}``; the effective
  window ``w - b`` is uniform on ``{1..w}``.
* **Pairs**: centre ``j`` and each context ``c`` within the effective window give one pair with
  input row ``syn0[tok[c]]`` and output row ``syn1[tok[j]]`` (the context word's input vector
  predicts the centre word).
* **Negatives** are drawn on the device from ``count ** 0.75`` with an alias table
  (:func:`alias_table`), O(1) per draw and exact.

All draws come from per-walk counter-based streams (:mod:`jaxgraph.embed._hostrng`), so the pairs
of a walk do not depend on how walks are split over devices or threads.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numba import njit

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed._kernel_steps import run_workers
from jaxgraph.embed.walks import Walks

CountSource = Literal["corpus", "degree"]
COUNT_SOURCES = ("corpus", "degree")


def corpus_counts(walks: Walks, num_nodes: int) -> np.ndarray:
    """``int64[N]`` occurrences of every node in the walks (padding excluded)."""
    mask = np.arange(walks.nodes.shape[1])[None, :] < walks.lengths[:, None]
    return np.bincount(walks.nodes[mask], minlength=num_nodes).astype(np.int64)


def keep_probability(counts: np.ndarray, sample: float) -> np.ndarray:
    """word2vec's sub-sampling keep probability per node (module docstring), ``float64[N]``:
    1 for nodes never in the corpus, and for all with ``sample <= 0``."""
    counts = np.asarray(counts, np.float64)
    p = np.ones_like(counts)
    total = counts.sum()
    if sample <= 0 or total <= 0:
        return p
    st = sample * total
    nz = counts > 0
    c = counts[nz]
    p[nz] = np.minimum(1.0, (np.sqrt(c / st) + 1.0) * st / c)
    return p


def negative_weights(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """The noise distribution ``counts ** power`` normalised, ``float64[N]``; raises
    ``ValueError`` if every count is zero (nothing to sample)."""
    w = np.asarray(counts, np.float64) ** power
    w[np.asarray(counts) <= 0] = 0.0
    total = w.sum()
    if total <= 0:
        raise ValueError("the negative-sampling distribution is empty: every count is zero")
    return w / total


def alias_table(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table (Vose's construction) for ``i ~ probs``: ``(accept f32[N], alias
    int32[N])``. Draw ``i`` uniformly in ``[0, N)`` and ``u ~ U[0, 1)``; return ``i`` if
    ``u < accept[i]``, else ``alias[i]`` (never an entry of probability 0)."""
    probs = np.asarray(probs, np.float64)
    n = probs.shape[0]
    scaled = probs * (n / probs.sum())
    accept = np.ones(n, np.float64)
    alias = np.arange(n, dtype=np.int32)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s = small.pop()
        g = large.pop()
        accept[s] = scaled[s]
        alias[s] = g
        scaled[g] = scaled[g] + scaled[s] - 1.0
        (small if scaled[g] < 1.0 else large).append(g)
    # Leftovers are 1 up to rounding; a zero-probability leftover must never be kept.
    for i in small + large:
        accept[i] = 1.0 if probs[i] > 0 else 0.0
    return accept.astype(np.float32), alias


def skipgram_pairs(
    walks: Walks,
    walk_ids: np.ndarray,
    keep_prob: np.ndarray,
    window: int,
    key: np.uint64,
    per_walk: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """All skip-gram pairs of the given walks, in walk order: ``(inputs int32[M], outputs
    int32[M])``, pair ``k`` training ``syn0[inputs[k]]`` against ``syn1[outputs[k]]``.

    Args:
      walk_ids: ``int64[W]`` stream id of each walk (its index in the round), so that a walk's
        pairs do not depend on which device or block it lands in.
      key: the round's 64-bit key (``_hostrng.round_key(seed, PURPOSE_PAIRS, round)``).
      per_walk: :func:`pairs_per_walk` of the same arguments, if known (saves its pass).
    """
    if per_walk is None:
        per_walk = pairs_per_walk(walks, walk_ids, keep_prob, window, key)
    if walks.num_walks == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    walk_ids = np.asarray(walk_ids, np.int64)
    kp = np.asarray(keep_prob, np.float64)
    offsets = np.zeros(walks.num_walks + 1, np.int64)
    np.cumsum(per_walk, out=offsets[1:])
    inputs = np.empty(offsets[-1], np.int32)
    outputs = np.empty(offsets[-1], np.int32)
    stream = (walks.nodes, walks.lengths, walk_ids, kp, window, key)
    run_workers(_pairs_kernel, walks.num_walks, *stream, False, offsets, inputs, outputs)
    return inputs, outputs


def split_pairs(
    walks: Walks, ids: np.ndarray, keep_prob: np.ndarray, window: int, key: np.uint64, parts: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """:func:`skipgram_pairs` of the walks ``ids`` (rows of ``walks`` and their stream ids) cut
    into ``parts`` even runs, one per device: ``(inputs, outputs)``, lists of ``int32[M_p]``."""
    ins, outs = [], []
    for part in np.array_split(ids, parts):
        sub = Walks(walks.nodes[part], walks.lengths[part])
        i, o = skipgram_pairs(sub, part, keep_prob, window, key)
        ins.append(i)
        outs.append(o)
    return ins, outs


@njit(nogil=True, cache=True)
def _pack(inputs, outputs, x_in, x_out, x_w, counts, marks):
    """One device's pairs ``inputs, outputs: int[m]`` into the flat buffers ``x_in, x_out:
    int32[S B]``, ``x_w: f32[S B]`` (weight 1, then zero-weight padding of id 0), in one pass
    that also adds one to ``counts: int64[N]`` at every id of both and sets ``marks: bool[N]``
    at the inputs' ids unless ``marks`` is empty."""
    m, mark = inputs.shape[0], marks.shape[0] > 0
    for j in range(m):
        i, o = inputs[j], outputs[j]
        x_in[j], x_out[j], x_w[j] = i, o, 1.0
        counts[i] += 1
        counts[o] += 1
        if mark:
            marks[i] = True
    for j in range(m, x_in.shape[0]):
        x_in[j], x_out[j], x_w[j] = 0, 0, 0.0


def step_buffers(parts: int, steps: int, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uninitialised buffers for :func:`pack_steps`: ``(inputs, outputs: int32[P, steps,
    batch], weights: f32[P, steps, batch])``."""
    shape = (parts, steps, batch)
    return np.empty(shape, np.int32), np.empty(shape, np.int32), np.empty(shape, np.float32)


def pack_steps(
    ins: list[np.ndarray],
    outs: list[np.ndarray],
    start: int,
    take: int,
    batch: int,
    steps: int,
    counts: np.ndarray,
    marks: np.ndarray,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps ``start .. start + take`` of each device's pairs (``ins[p], outs[p]: int[M_p]``,
    ``batch`` pairs a step) in buffers of ``steps`` steps, the rest zero-weight padding:
    ``(inputs, outputs: int32[P, steps, batch], weights: f32[P, steps, batch])``, written into
    ``out`` (buffers of those shapes, reused) when given. Each packed pair is tallied into
    ``counts`` and ``marks`` (:func:`_pack`)."""
    p = len(ins)
    out = step_buffers(p, steps, batch) if out is None else out
    x_in, x_out, x_w = out
    lo, hi = start * batch, (start + take) * batch
    for d in range(p):
        m = max(0, min(hi, ins[d].shape[0]) - lo)
        flat = (a[d].reshape(-1) for a in out)
        _pack(ins[d][lo : lo + m], outs[d][lo : lo + m], *flat, counts, marks)
    return x_in, x_out, x_w


def pairs_per_walk(
    walks: Walks, walk_ids: np.ndarray, keep_prob: np.ndarray, window: int, key: np.uint64
) -> np.ndarray:
    """``int64[W]``: how many pairs each walk gives in :func:`skipgram_pairs` (same
    arguments), without building them."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    walk_ids = np.asarray(walk_ids, np.int64)
    if walk_ids.shape != walks.lengths.shape:
        raise ValueError("walk_ids must have one id per walk")
    per_walk = np.zeros(walks.num_walks, np.int64)
    if walks.num_walks:
        kp = np.asarray(keep_prob, np.float64)
        empty = np.zeros(0, np.int32)
        stream = (walks.nodes, walks.lengths, walk_ids, kp, window, key)
        run_workers(_pairs_kernel, walks.num_walks, *stream, True, per_walk, empty, empty)
    return per_walk


@njit(nogil=True, cache=True)
def _pairs_kernel(
    first, stride, nodes, lengths, walk_ids, keep_prob, window, key, count_only, offsets, inputs,
    outputs,
):  # fmt: skip
    """Counts pairs per walk into ``offsets[i]`` (``count_only``), or writes walk ``i``'s pairs
    from ``offsets[i]`` on, for walks ``first, first + stride, ..`` (a worker of
    :func:`~jaxgraph.embed._kernel_steps.run_workers`). Both passes replay the same stream, so
    they agree."""
    for i in range(first, nodes.shape[0], stride):
        state = hr.stream(key, walk_ids[i])
        length = lengths[i]
        kept = np.empty(length, np.int32)
        k = 0
        for j in range(length):
            v = nodes[i, j]
            state, u = hr.next_uniform(state)
            if u < keep_prob[v]:
                kept[k] = v
                k += 1
        pos = 0 if count_only else offsets[i]
        for j in range(k):
            state, b = hr.next_below(state, window)
            reach = window - b
            lo = max(0, j - reach)
            hi = min(k, j + reach + 1)
            if count_only:
                pos += hi - lo - 1
            else:
                for c in range(lo, hi):
                    if c != j:
                        inputs[pos] = kept[c]
                        outputs[pos] = kept[j]
                        pos += 1
        if count_only:
            offsets[i] = pos
