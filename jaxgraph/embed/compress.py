"""Frequency-aware bitmap compression (FaBC, FeLoG §5.2.2) of walk corpora, on the host.

FaBC replaces the occurrences of ``k`` *hot* ids of a padded walk corpus
(:class:`~jaxgraph.embed.walks.Walks`) by bitmaps: per walk the ``k`` hot ids, one ``L``-bit
bitmap per hot id (bit ``j`` set where ``walk[j]`` is that id) and, in order, the ids at the
remaining (*residual*) positions. The four arrays (:class:`CompressedWalks`) travel host ->
device and are decoded there (:func:`decode_on_device`, :mod:`pallas_kernels.bitmap`); the run
uses them through :class:`~jaxgraph.embed.codec.WalkCodec`.

**Reading of the seed (Eq. 6-8).** Its numbers (YouTube's top-2 over 50 %, Table 6's top-1
ratios of 0.59-0.67) only fit **per-walk ranks**, as does the public code, so by default
(``scope="walk"``) ``c_w(i)`` is the count of walk ``w``'s ``i``-th most frequent id (ties: the
smaller id first; 0 past its distinct ids), ``p(i) = sum_w c_w(i) / T`` with ``T`` the tokens,
``F_k = p(1) + ... + p(k)`` (:func:`frequency_profile`), and walk ``w``'s hot ids are its own
top-``k`` (:func:`encode`; missing slots hold ``-1`` and empty bitmaps). ``scope="corpus"``
stores one corpus-wide hot set once; on DeepWalk corpora Eq. 8 then picks ``k = 0``.

Size (Eq. 6, :func:`eq6_bytes`, exact: ``CompressedWalks.nbytes`` equals it), with ``N`` walks,
``T`` tokens of which ``H = F_k T`` are hot, padded length ``L`` and ``B = ceil(L / 8)``::

    S(k) = 4 (T - H) + 4 N k + N k B          (scope="walk"; 4k instead of 4Nk for "corpus")
    S_0  = 4 T

The ratio ``S(k) / S_0`` is Eq. 7 (:func:`predicted_ratio`); ``k`` is chosen by Eq. 8
(:func:`choose_k`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import numpy as np
from numba import njit

from jaxgraph.embed._kernel_steps import run_workers
from jaxgraph.embed.sizes import padded_size
from jaxgraph.embed.walks import PAD, Walks

Scope = Literal["walk", "corpus"]
SCOPES = ("walk", "corpus")
ID_BYTES = 4
_PROFILE_CHUNK = 1 << 16  # walks per block of the per-walk rank profile


def check_scope(scope) -> str:
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    return scope


def _check_walks(walks: Walks) -> tuple[np.ndarray, np.ndarray]:
    nodes = np.asarray(walks.nodes)
    lengths = np.asarray(walks.lengths)
    if nodes.ndim != 2 or lengths.shape != nodes.shape[:1]:
        raise ValueError(
            f"walks need nodes [W, L] and lengths [W], got {nodes.shape} and {lengths.shape}"
        )
    if lengths.size and (lengths.min() < 0 or lengths.max() > nodes.shape[1]):
        raise ValueError(f"walk lengths must lie in [0, {nodes.shape[1]}]")
    nodes = np.ascontiguousarray(nodes, np.int32)
    lengths = np.ascontiguousarray(lengths, np.int32)
    valid = np.arange(nodes.shape[1])[None, :] < lengths[:, None]
    if (nodes[valid] < 0).any():
        raise ValueError("walk tokens (inside the lengths) must be node ids >= 0")
    return nodes, lengths


def bitmap_bytes(walk_length: int) -> int:
    """``B = ceil(L / 8)``: bytes of one walk's bitmap for one hot id."""
    return -(-int(walk_length) // 8)


@dataclasses.dataclass(frozen=True)
class CompressedWalks:
    """A FaBC-compressed walk corpus (a pytree; ``walk_length`` is static metadata).

    Attributes:
      hot_ids: ``int32[W, k]`` each walk's hot ids (``scope="walk"``), or ``int32[1, k]`` the
        corpus-wide hot ids shared by every walk (``scope="corpus"``); ``-1`` marks an unused
        slot (its bitmap is empty).
      bitmaps: ``uint8[W, k, B]``, ``B = ceil(L / 8)``: bit ``j % 8`` of byte ``j // 8`` of
        ``bitmaps[w, s]`` is set iff position ``j < lengths[w]`` of walk ``w`` holds
        ``hot_ids[w, s]`` (least significant bit first; bits at or past the length are 0; the
        ``k`` bitmaps of a walk are disjoint).
      residual: ``int32[R]`` the non-hot tokens of all walks, walk after walk, each walk's in
        position order; ``R = T - H``.
      lengths: ``int32[W]`` walk lengths (``0 <= lengths <= L``).
      walk_length: ``L``, the padded length of the decoded walks.
    """

    hot_ids: np.ndarray
    bitmaps: np.ndarray
    residual: np.ndarray
    lengths: np.ndarray
    walk_length: int

    @property
    def num_walks(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def k(self) -> int:
        return int(self.hot_ids.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes of the compressed payload (hot ids, bitmaps, residual): Eq. 6's ``S(k)``."""
        return int(self.hot_ids.nbytes + self.bitmaps.nbytes + self.residual.nbytes)

    def residual_offsets(self) -> np.ndarray:
        """``int64[W + 1]``: walk ``w``'s residual is ``residual[off[w]:off[w + 1]]``."""
        bits = np.unpackbits(np.asarray(self.bitmaps), axis=-1).sum(axis=(1, 2))
        off = np.zeros(self.num_walks + 1, np.int64)
        np.cumsum(np.asarray(self.lengths, np.int64) - bits, out=off[1:])
        return off


jax.tree_util.register_dataclass(
    CompressedWalks,
    data_fields=["hot_ids", "bitmaps", "residual", "lengths"],
    meta_fields=["walk_length"],
)


def raw_bytes(walks: Walks) -> int:
    """``S_0 = 4 T``: the uncompressed tokens (padding and lengths excluded)."""
    return ID_BYTES * int(np.asarray(walks.lengths, np.int64).sum())


def eq6_bytes(
    num_walks: int,
    num_tokens: int,
    hot_tokens: int,
    k: int,
    walk_length: int,
    scope: Scope = "walk",
) -> int:
    """Eq. 6, exact: ``4 (T - H) + 4 N k + N k ceil(L / 8)`` (``4 k`` ids for ``"corpus"``),
    with ``N = num_walks``, ``T = num_tokens``, ``H = hot_tokens`` and ``L = walk_length``. The
    lengths (``4N`` bytes) travel with both corpora and are counted in neither."""
    ids = k if check_scope(scope) == "corpus" else num_walks * k
    return (
        ID_BYTES * (num_tokens - hot_tokens)
        + ID_BYTES * ids
        + num_walks * k * bitmap_bytes(walk_length)
    )


def frequency_profile(walks: Walks, scope: Scope = "walk") -> np.ndarray:
    """The sorted normalized frequencies ``p(1) >= p(2) >= ...`` (module docstring),
    ``float64[M]`` summing to 1: per-walk ranks (``M = L``, trailing zeros kept) for ``"walk"``,
    node frequencies (``M`` = distinct ids) for ``"corpus"``."""
    nodes, lengths = _check_walks(walks)
    total = int(lengths.astype(np.int64).sum())
    if check_scope(scope) == "corpus":
        if total == 0:
            return np.zeros(0)
        counts = np.bincount(nodes[np.arange(nodes.shape[1])[None, :] < lengths[:, None]])
        counts = np.sort(counts[counts > 0])[::-1]
        return counts / total
    if total == 0:
        return np.zeros(nodes.shape[1])
    summed = np.zeros(nodes.shape[1], np.int64)
    for lo in range(0, nodes.shape[0], _PROFILE_CHUNK):  # bounds the [chunk, L] buffer
        part = slice(lo, lo + _PROFILE_CHUNK)
        ranked = np.zeros(nodes[part].shape, np.int64)
        no_ids = np.zeros((0, 0), np.int32)
        run_workers(_ranks_kernel, ranked.shape[0], nodes[part], lengths[part], no_ids, ranked)
        summed += ranked.sum(axis=0)
    return summed / total


def rank_overhead(walk_length: int, mean_length: float) -> float:
    """``c = (4 + ceil(L / 8)) / (4 Lbar)``: the ratio one more hot rank costs (ids + bitmaps);
    ``1/L + 1/32`` for full-length walks with ``8 | L``."""
    return (ID_BYTES + bitmap_bytes(walk_length)) / (ID_BYTES * mean_length)


def predicted_ratio(profile: np.ndarray, k: int, walk_length: int, mean_length: float) -> float:
    """Eq. 7: ``g(k) = 1 - F_k + k c`` (``scope="walk"``; exact for the bytes of :func:`encode`
    up to the rounding of ``F_k``); the seed's ``1 - F_k + k/L + k/32`` for full-length walks
    with ``8 | L``."""
    f_k = float(np.sum(profile[:k]))
    return 1.0 - f_k + k * rank_overhead(walk_length, mean_length)


def choose_k(
    profile: np.ndarray, walk_length: int, mean_length: float, *, k_max: int | None = None
) -> int:
    """Eq. 8: the number of hot ranks (``>= 0``; 0: no rank pays for its bitmap).

    Starting from ``k = 0`` (``g(0) = 1``), add the ``(k+1)``-th rank while ``p(k+1) >= c +
    0.1 g(k)`` (it cuts the ratio by at least 10 % of its current value), with ``c`` the
    per-rank overhead (:func:`rank_overhead`, ``Lbar = mean_length``); then ``g(k+1) = g(k) -
    p(k+1) + c``. The seed's "largest ``k`` satisfying" the condition is read as the expansion
    its text describes: the first rank that fails stops it. ``k_max`` bounds ``k``.
    """
    if mean_length <= 0:
        return 0
    c = rank_overhead(walk_length, mean_length)
    limit = len(profile) if k_max is None else min(len(profile), k_max)
    k, g = 0, 1.0
    while k < limit and profile[k] >= c + 0.1 * g:
        g = g - float(profile[k]) + c
        k += 1
    return k


def corpus_hot_ids(walks: Walks, k: int) -> np.ndarray:
    """The ``k`` most frequent ids of the corpus (ties: the smaller id), ``int32[k]``; fewer when
    the corpus has fewer distinct ids."""
    nodes, lengths = _check_walks(walks)
    tokens = nodes[np.arange(nodes.shape[1])[None, :] < lengths[:, None]]
    if tokens.size == 0 or k <= 0:
        return np.zeros(0, np.int32)
    counts = np.bincount(tokens)
    order = np.lexsort((np.arange(counts.size), -counts))  # count desc, then id asc
    order = order[counts[order] > 0]
    return order[:k].astype(np.int32)


def encode(
    walks: Walks, k: int, *, scope: Scope = "walk", hot_ids: np.ndarray | None = None
) -> CompressedWalks:
    """Compresses ``walks`` with ``k >= 0`` hot ids per walk (``scope="walk"``) or corpus-wide
    (``hot_ids``, default: this corpus's top-``k``); the result's ``nbytes`` is :func:`eq6_bytes`.
    Negative ``k``, an unknown scope, malformed walks or ``hot_ids`` raise ``ValueError``."""
    nodes, lengths = _check_walks(walks)
    scope = check_scope(scope)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    w, length = nodes.shape
    if scope == "walk":
        if hot_ids is not None:
            raise ValueError("hot_ids applies to scope='corpus' only")
        ids = np.full((w, k), PAD, np.int32)
        if k:
            run_workers(
                _ranks_kernel, nodes.shape[0], nodes, lengths, ids, np.zeros((0, 0), np.int64)
            )
    else:
        chosen = corpus_hot_ids(walks, k) if hot_ids is None else np.asarray(hot_ids)
        if chosen.ndim != 1 or chosen.size > k or (chosen < 0).any():
            raise ValueError(f"hot_ids must be at most k={k} ids >= 0, got {chosen!r}")
        if np.unique(chosen).size != chosen.size:
            raise ValueError("hot_ids must be distinct")
        ids = np.full((1, k), PAD, np.int32)
        ids[0, : chosen.size] = chosen
    walk_ids = np.ascontiguousarray(np.broadcast_to(ids, (w, k)))
    per_walk = np.zeros(w, np.int64)
    bitmaps = np.zeros((w, k, bitmap_bytes(length)), np.uint8)
    empty = np.zeros(0, np.int32)
    run_workers(
        _encode_kernel, nodes.shape[0], nodes, lengths, walk_ids, True, per_walk, bitmaps, empty
    )
    offsets = np.zeros(w + 1, np.int64)
    np.cumsum(per_walk, out=offsets[1:])
    residual = np.empty(offsets[-1], np.int32)
    run_workers(
        _encode_kernel, nodes.shape[0], nodes, lengths, walk_ids, False, offsets, bitmaps, residual
    )
    return CompressedWalks(ids, bitmaps, residual, lengths.copy(), int(length))


def pad_to_bucket(compressed: CompressedWalks) -> CompressedWalks:
    """``compressed`` with its walk count and residual length rounded up to a size class
    (:func:`jaxgraph.embed.sizes.padded_size`): the added walks are empty and the residual gains
    zeros no walk reads, so its first ``num_walks`` decoded rows are ``compressed``'s walks."""
    c = compressed
    w, r = c.num_walks, int(c.residual.shape[0])
    w_pad = padded_size(w) if w else 0
    r_pad = padded_size(r) if r else 0
    if (w_pad, r_pad) == (w, r):
        return c
    extra = w_pad - w
    hot = c.hot_ids
    if hot.shape[0] > 1:  # per-walk hot ids; a [1, k] hot set is shared by the added walks too
        hot = np.concatenate([hot, np.full((extra, hot.shape[1]), PAD, hot.dtype)])
    return CompressedWalks(
        hot,
        np.concatenate([c.bitmaps, np.zeros((extra, *c.bitmaps.shape[1:]), np.uint8)]),
        np.concatenate([c.residual, np.zeros(r_pad - r, np.int32)]),
        np.concatenate([c.lengths, np.zeros(extra, c.lengths.dtype)]),
        c.walk_length,
    )


def decode_host(compressed: CompressedWalks) -> Walks:
    """The NumPy inverse of :func:`encode`: ``decode_host(encode(w)) == w`` (padding ``-1``).
    Residual entries past the last walk's are ignored (:func:`pad_to_bucket`)."""
    c = compressed
    w, length = c.num_walks, c.walk_length
    nodes = np.full((w, length), PAD, np.int32)
    lengths = np.asarray(c.lengths, np.int32)
    if w == 0:
        return Walks(nodes, lengths.copy())
    bits = np.unpackbits(np.asarray(c.bitmaps), axis=-1, bitorder="little")[..., :length]
    bits = bits.astype(bool)  # [W, k, L]
    in_walk = np.arange(length)[None, :] < lengths[:, None]
    hot = bits.any(axis=1) & in_walk
    if c.k:
        ids = np.broadcast_to(np.asarray(c.hot_ids), (w, c.k))
        slot = bits.argmax(axis=1)
        nodes[hot] = np.take_along_axis(ids, slot, axis=1)[hot]
    at = in_walk & ~hot
    residual = np.asarray(c.residual)
    need = int(at.sum())
    if residual.shape[0] < need:
        raise ValueError(f"the residual holds {residual.shape[0]} ids, the walks need {need}")
    # Row-major order = walk, then position; trailing entries (bucket padding) are not read.
    nodes[at] = residual[:need]
    return Walks(nodes, lengths.copy())


def decode_on_device(
    compressed: CompressedWalks, *, backend=None, interpret: bool = False
) -> tuple[jax.Array, jax.Array]:
    """Decodes a (device) :class:`CompressedWalks` with :func:`pallas_kernels.bitmap.decode`:
    ``(nodes int32[W, L], lengths int32[W])`` on the device of the inputs."""
    from pallas_kernels.bitmap import decode

    c = compressed
    arrays = (c.hot_ids, c.bitmaps, c.residual, c.lengths)
    nodes = decode(*arrays, walk_length=c.walk_length, backend=backend, interpret=interpret)
    return nodes, c.lengths


def compression_ratio(walks: Walks, k: int, scope: Scope = "walk") -> float:
    """The actual ``S(k) / S_0`` of :func:`encode` (1.0 for an empty corpus)."""
    raw = raw_bytes(walks)
    return encode(walks, k, scope=scope).nbytes / raw if raw else 1.0


def ratio_table(
    walks: Walks, ks: tuple[int, ...] = (1, 2, 3), scope: Scope = "walk", *, k_max: int = 8
) -> dict[str, float]:
    """The seed's Table 6 for one corpus: ``{"top1": ..., "top2": ..., "top3": ...,
    "chosen_k": k, "chosen": ratio, "predicted_chosen": g(k)}``, the actual ratios of top-``k``
    for ``ks`` and for Eq. 8's ``k``, and Eq. 7's prediction for the latter."""
    profile = frequency_profile(walks, scope)
    n = walks.num_walks
    mean = walks.num_tokens / n if n else 0.0
    length = int(np.asarray(walks.nodes).shape[1])
    k = choose_k(profile, length, mean, k_max=k_max)
    out: dict[str, float] = {f"top{j}": compression_ratio(walks, j, scope) for j in ks}
    out["chosen_k"] = float(k)
    out["chosen"] = compression_ratio(walks, k, scope)
    out["predicted_chosen"] = predicted_ratio(profile, k, length, mean) if mean else 1.0
    return out


@njit(nogil=True, cache=True)
def _sorted_runs(row, n):
    """Distinct ids of ``row[:n]`` and their counts, ordered by count desc, then id asc."""
    toks = np.sort(row[:n])
    ids = np.empty(n, np.int32)
    cnt = np.empty(n, np.int64)
    r = 0
    for j in range(n):
        if r > 0 and toks[j] == ids[r - 1]:
            cnt[r - 1] += 1
        else:
            ids[r] = toks[j]
            cnt[r] = 1
            r += 1
    order = np.argsort(-cnt[:r], kind="mergesort")  # stable: equal counts keep id order
    return ids[:r][order], cnt[:r][order]


@njit(nogil=True, cache=True)
def _ranks_kernel(first, stride, nodes, lengths, top_ids, top_counts):
    """Per walk ``first, first + stride, ..`` (a worker of
    :func:`~jaxgraph.embed._kernel_steps.run_workers`), the ids and the counts of its
    :func:`_sorted_runs`, as many as ``top_ids`` and ``top_counts`` have columns (either may
    have none)."""
    for i in range(first, nodes.shape[0], stride):
        n = lengths[i]
        if n == 0:
            continue
        ids, cnt = _sorted_runs(nodes[i], n)
        for s in range(min(top_ids.shape[1], ids.shape[0])):
            top_ids[i, s] = ids[s]
        for s in range(min(top_counts.shape[1], cnt.shape[0])):
            top_counts[i, s] = cnt[s]


@njit(nogil=True, cache=True)
def _encode_kernel(first, stride, nodes, lengths, hot_ids, count_only, offsets, bitmaps, residual):
    """Counts residual tokens per walk into ``offsets[i]`` (``count_only``), or sets the bitmaps
    and writes walk ``i``'s residual from ``offsets[i]`` on, for walks ``first, first + stride,
    ..`` (a worker of :func:`~jaxgraph.embed._kernel_steps.run_workers`). ``hot_ids:
    int32[W, k]``."""
    k = hot_ids.shape[1]
    for i in range(first, nodes.shape[0], stride):
        pos = 0 if count_only else offsets[i]
        for j in range(lengths[i]):
            v = nodes[i, j]
            slot = -1
            for s in range(k):
                if hot_ids[i, s] == v:
                    slot = s
                    break
            if slot < 0:
                if not count_only:
                    residual[pos] = v
                pos += 1
            elif not count_only:
                bitmaps[i, slot, j >> 3] |= np.uint8(1 << (j & 7))
        if count_only:
            offsets[i] = pos
