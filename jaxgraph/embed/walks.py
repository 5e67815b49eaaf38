"""Random walks on the host: DeepWalk (uniform) and node2vec (second order), compiled with numba.

Walks follow **out-edges** (``u -> v``); :class:`~jaxgraph.graph.Graph` stores in-edges, so
:func:`out_csr` transposes it once. A walk of length ``L`` holds ``L`` nodes, its start
included, and ends early at a node without out-edges. Padding slots hold ``-1``; there is no
sentinel node (the public FeLoG trainer cut every walk at the highest-degree node).

Each walk draws from its own counter-based stream (:mod:`jaxgraph.embed._hostrng`), so the
corpus depends only on ``(graph, starts, seed, round)``, not on the thread count.

node2vec (Grover & Leskovec 2016) moves from ``v`` (having come from ``t``) to a neighbour ``x``
with unnormalised weight ``1/p`` if ``x = t``, ``1`` if ``x`` is a neighbour of ``t`` and ``1/q``
otherwise. It is sampled exactly by rejection: propose ``x`` uniformly from ``N(v)``, accept
with probability ``w(x) / max(1/p, 1, 1/q)``, so no ``O(sum deg^2)`` table is built.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Literal, NamedTuple

import numpy as np
from numba import njit

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed._kernel_steps import run_workers
from jaxgraph.graph import Graph
from jaxgraph.options import flag

WalkKind = Literal["deepwalk", "node2vec"]
WALK_KINDS = ("deepwalk", "node2vec")
PAD = -1


@dataclasses.dataclass(frozen=True)
class WalkConfig:
    """How one round samples walks.

    Attributes:
      kind: ``"deepwalk"`` (uniform next node) or ``"node2vec"`` (second order).
      walk_length: nodes per walk, the start included (>= 1).
      walks_per_node: walks started at every start node in one round (>= 1).
      p: node2vec return parameter (> 0; ignored by DeepWalk).
      q: node2vec in-out parameter (> 0; ignored by DeepWalk).
    """

    kind: WalkKind = flag("--walker", "deepwalk")
    walk_length: int = 80
    walks_per_node: int = 1
    p: float = 1.0
    q: float = 1.0

    def __post_init__(self):
        if self.kind not in WALK_KINDS:
            raise ValueError(f"unknown walk kind {self.kind!r}; expected one of {WALK_KINDS}")
        for name in ("walk_length", "walks_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("p", "q"):  # node2vec's return and in-out parameters
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0 (node2vec), got {value}")


class Walks(NamedTuple):
    """A padded batch of walks.

    Attributes:
      nodes: ``int32[W, L]``; ``nodes[i, :lengths[i]]`` is walk ``i``, the rest is padding
        (``-1``) that no consumer reads.
      lengths: ``int32[W]`` number of nodes of each walk, in ``[1, L]``.
    """

    nodes: np.ndarray
    lengths: np.ndarray

    @property
    def num_walks(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def to_lists(self) -> list[list[int]]:
        """The walks as Python lists (for gensim or inspection)."""
        return [row[:n].tolist() for row, n in zip(self.nodes, self.lengths, strict=True)]


def out_csr(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Out-neighbour CSR of ``graph``, ``(indptr int64[N + 1], indices int32[E])``:
    ``indices[indptr[u]:indptr[u+1]]`` are the ``v`` of the edges ``u -> v``, sorted ascending."""
    out = graph.adjacency().T.tocsr()  # rows = sources
    out.sort_indices()
    return out.indptr.astype(np.int64), out.indices.astype(np.int32)


def check_node_ids(ids, num_nodes: int, what: str = "node ids") -> np.ndarray:
    """``ids`` as ``int32[k]``; raises ``ValueError`` naming the first id outside ``[0, N)``."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must be integers, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr < 0) | (arr >= num_nodes))
    if bad.size:
        raise ValueError(
            f"{what}[{int(bad[0])}] = {int(arr[bad[0]])} is not a node id in [0, {num_nodes})"
        )
    return arr.astype(np.int32)


def random_walks(
    graph_or_csr: Graph | tuple[np.ndarray, np.ndarray],
    starts,
    config: WalkConfig,
    *,
    seed: int,
    round_index: int = 0,
) -> Walks:
    """Samples ``walks_per_node`` walks from every start node: :class:`Walks` with
    ``W = S * walks_per_node`` walks, walk ``i`` from ``starts[i % S]`` (``int[S]``, repeats
    allowed). ``graph_or_csr`` is a :class:`Graph` or its :func:`out_csr`; ``(seed,
    round_index)`` fixes every draw. A start id outside ``[0, N)`` or a negative seed raises
    ``ValueError``."""
    indptr, indices = out_csr(graph_or_csr) if isinstance(graph_or_csr, Graph) else graph_or_csr
    n = indptr.shape[0] - 1
    starts = check_node_ids(starts, n, "starts")
    num_walks = starts.shape[0] * config.walks_per_node
    nodes = np.full((num_walks, config.walk_length), PAD, np.int32)
    lengths = np.zeros(num_walks, np.int32)
    if num_walks == 0:
        return Walks(nodes, lengths)
    key = hr.round_key(seed, hr.PURPOSE_WALKS, round_index)
    # node2vec at p = q = 1 weighs every neighbour alike: DeepWalk's walk, at a third of the cost.
    second_order = config.kind == "node2vec" and not config.p == config.q == 1
    inv_p, inv_q = 1.0 / config.p, 1.0 / config.q
    args = (indptr, indices, starts, key, second_order, inv_p, inv_q, nodes, lengths)
    run_workers(_walk_kernel, nodes.shape[0], *args)
    return Walks(nodes, lengths)


def walk_throughput(
    graph: Graph, config: WalkConfig, *, seed: int = 0, repeats: int = 1
) -> dict[str, float]:
    """Times :func:`random_walks` from every node with out-edges (compile excluded):
    ``{"walks", "tokens", "seconds", "walks_per_s", "tokens_per_s"}`` of the fastest repeat."""
    csr = out_csr(graph)
    starts = np.flatnonzero(np.diff(csr[0]) > 0)
    random_walks(csr, starts[:2], dataclasses.replace(config, walk_length=3), seed=seed)
    best = None  # (seconds, walks) of the fastest repeat
    for r in range(repeats):
        t0 = time.perf_counter()
        w = random_walks(csr, starts, config, seed=seed, round_index=r)
        dt = time.perf_counter() - t0
        if best is None or dt < best[0]:
            best = (dt, w)
    best, w = best
    return {
        "walks": float(w.num_walks),
        "tokens": float(w.num_tokens),
        "seconds": best,
        "walks_per_s": w.num_walks / best,
        "tokens_per_s": w.num_tokens / best,
    }


@njit(inline="always", cache=True)
def _has_edge(indptr, indices, u, x):
    lo = indptr[u]
    hi = indptr[u + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if indices[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo < indptr[u + 1] and indices[lo] == x


@njit(nogil=True, cache=True)
def _walk_kernel(
    first, stride, indptr, indices, starts, key, second_order, inv_p, inv_q, nodes, lengths
):
    """Fills rows ``first, first + stride, ..`` of ``nodes`` and ``lengths`` (a worker of
    :func:`~jaxgraph.embed._kernel_steps.run_workers`); ``second_order=False`` is DeepWalk's
    uniform walk."""
    num_starts = starts.shape[0]
    length = nodes.shape[1]
    w_max = max(inv_p, 1.0, inv_q)
    for i in range(first, nodes.shape[0], stride):
        state = hr.stream(key, i)
        v = starts[i % num_starts]
        prev = -1
        nodes[i, 0] = v
        size = 1
        while size < length:
            lo = indptr[v]
            deg = indptr[v + 1] - lo
            if deg == 0:
                break
            state, j = hr.next_below(state, deg)
            x = indices[lo + j]
            if second_order and prev >= 0:
                while True:
                    if x == prev:
                        w = inv_p
                    elif _has_edge(indptr, indices, prev, x):
                        w = 1.0
                    else:
                        w = inv_q
                    state, r = hr.next_uniform(state)
                    if r * w_max < w:
                        break
                    state, j = hr.next_below(state, deg)
                    x = indices[lo + j]
            prev = v
            v = x
            nodes[i, size] = v
            size += 1
        lengths[i] = size
