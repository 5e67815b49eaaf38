"""The graph container shared by every part of jaxgraph.

A :class:`Graph` lives on the host (NumPy). Edges are *directed* ``src -> dst`` and are stored
as a CSR matrix indexed by destination: ``indices[indptr[v]:indptr[v + 1]]`` are the sources of
the in-edges of ``v``, sorted ascending, without duplicates, so that message passing
``h'_v = sum_{u in in(v)} c_uv * h_u`` is a CSR row-times-matrix product.

Node ids are global ``int`` ids in ``[0, num_nodes)`` (partitioned views:
:mod:`jaxgraph.partition`). A graph read from a user's file also carries the user's id of every
node (:attr:`Graph.node_ids`), so that results can be written back keyed by them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import scipy.sparse as sp

SelfLoops = Literal["remove", "keep"]


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A host-side attributed graph in CSR form (rows = destinations).

    Attributes:
      indptr: ``int64[N + 1]`` CSR row pointer over destinations.
      indices: ``int32[E]`` source node of each in-edge, sorted within each row, no duplicates.
      features: ``float32[N, F]`` node features (``F`` may be 0 for structure-only graphs).
      labels: ``int32[N]`` class ids for single-label graphs (``-1`` = unlabelled), or
        ``bool[N, C]`` label indicators for multi-label graphs.
      train_mask, val_mask, test_mask: ``bool[N]`` split masks (all ``False`` when the dataset
        has no split).
      name: a short name used in reports and caches.
      node_ids: ``int64[N]`` or ``str[N]`` (any integer or unicode dtype) the user's id of each
        node, all distinct: node ``v`` is ``node_ids[v]`` in the file it was read from. ``None``
        means ``0..N-1`` (:attr:`ids`); no computation uses it, and a graph rebuilt from another
        one (a subgraph, a partition) does not inherit it.

    Shapes:
      ``N = num_nodes``, ``E = num_edges`` (directed edges; an undirected edge counts twice).
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    name: str = "graph"
    node_ids: np.ndarray | None = None

    def __post_init__(self):
        _validate(self)

    @classmethod
    def from_edges(
        cls,
        src,
        dst,
        *,
        num_nodes: int,
        symmetrize: bool,
        self_loops: SelfLoops = "remove",
        features=None,
        labels=None,
        train_mask=None,
        val_mask=None,
        test_mask=None,
        name: str = "graph",
        node_ids=None,
    ) -> Graph:
        """Builds a graph from directed edges ``src[i] -> dst[i]``, duplicates merged.

        ``symmetrize`` (no default): ``True`` adds the reverse of every edge (an undirected
        graph). ``self_loops="remove"`` drops ``v -> v`` edges (normalisations add their own
        self-loops); ``"keep"`` keeps them as ordinary edges. The other keywords fill the fields
        of the same name; missing features are ``F = 0``, labels ``-1``, masks all ``False``.

        Raises:
          ValueError: on invalid node ids, mismatched lengths, an empty graph or bad fields.
        """
        if self_loops not in ("remove", "keep"):
            raise ValueError(f"self_loops must be 'remove' or 'keep', got {self_loops!r}")
        num_nodes = _check_num_nodes(num_nodes)
        src = _as_index_array(src, "src")
        dst = _as_index_array(dst, "dst")
        if src.shape != dst.shape:
            raise ValueError(
                f"src and dst must have the same length, got {src.shape[0]} and {dst.shape[0]}"
            )
        for arr, what in ((src, "src"), (dst, "dst")):
            _check_ids(arr, num_nodes, what)
        if self_loops == "remove":
            loops = src == dst
            if loops.any():
                src, dst = src[~loops], dst[~loops]
        indptr, indices = _csr_from_edges(src, dst, num_nodes, symmetrize=symmetrize)
        return cls(
            indptr=indptr,
            indices=indices,
            features=np.zeros((num_nodes, 0), np.float32) if features is None else features,
            labels=np.full(num_nodes, -1, np.int32) if labels is None else labels,
            train_mask=np.zeros(num_nodes, bool) if train_mask is None else train_mask,
            val_mask=np.zeros(num_nodes, bool) if val_mask is None else val_mask,
            test_mask=np.zeros(num_nodes, bool) if test_mask is None else test_mask,
            name=name,
            node_ids=node_ids,
        )

    def replace(self, **changes) -> Graph:
        """Returns a copy with the given fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def ids(self) -> np.ndarray:
        """The user's id of every node: :attr:`node_ids`, or ``arange(N)`` when it is ``None``."""
        if self.node_ids is None:
            return np.arange(self.num_nodes, dtype=np.int64)
        return self.node_ids

    @property
    def num_edges(self) -> int:
        """Number of directed edges (self-loops from the input included, if kept)."""
        return int(self.indices.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def multi_label(self) -> bool:
        return self.labels.ndim == 2

    @property
    def num_classes(self) -> int:
        if self.multi_label:
            return int(self.labels.shape[1])
        return int(self.labels.max()) + 1 if self.labels.size and self.labels.max() >= 0 else 0

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Returns ``(src, dst)`` as ``int32[E]`` arrays, sorted by ``(dst, src)``."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int32), np.diff(self.indptr))
        return self.indices.copy(), dst

    def in_degree(self) -> np.ndarray:
        """``int64[N]`` number of in-edges per node (input self-loops counted if kept)."""
        return np.diff(self.indptr)

    def out_degree(self) -> np.ndarray:
        """``int64[N]`` number of out-edges per node."""
        return np.bincount(self.indices, minlength=self.num_nodes).astype(np.int64)

    def is_symmetric(self) -> bool:
        a = self.adjacency()
        return (a != a.T).nnz == 0

    def adjacency(self) -> sp.csr_matrix:
        """``A[dst, src] = 1`` as a ``scipy.sparse.csr_matrix`` (float32)."""
        data = np.ones(self.num_edges, np.float32)
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(self.num_nodes,) * 2)

    def has_self_loops(self) -> bool:
        src, dst = self.edges()
        return bool(np.any(src == dst))

    def gcn_norm(self) -> tuple[np.ndarray, np.ndarray]:
        """GCN symmetric normalisation ``Â = D_in^{-1/2} (A + I) D_out^{-1/2}`` with degrees of
        ``A + I`` (Kipf & Welling 2017; out-degrees on the source side), the self-loop apart.

        Returns:
          ``(edge_weight f32[E], self_weight f32[N])`` aligned with :meth:`edges`:
          ``h'_v = self_weight[v] h_v + sum_e edge_weight[e] h_{src[e]}``.
        """
        din = (self.in_degree() + 1).astype(np.float64)
        dout = (self.out_degree() + 1).astype(np.float64)
        src, dst = self.edges()
        edge_w = (din[dst] ** -0.5) * (dout[src] ** -0.5)
        self_w = 1.0 / np.sqrt(din * dout)
        return edge_w.astype(np.float32), self_w.astype(np.float32)

    def mean_norm(self) -> np.ndarray:
        """Mean-aggregation (GraphSAGE) coefficients ``1 / in_degree(dst)`` per edge, ``f32[E]``
        (nodes without in-edges aggregate to zero)."""
        deg = np.maximum(self.in_degree(), 1).astype(np.float64)
        _, dst = self.edges()
        return (1.0 / deg[dst]).astype(np.float32)

    def normalized_adjacency(self, kind: Literal["gcn", "mean"] = "gcn") -> sp.csr_matrix:
        """The normalised propagation matrix as CSR (rows = destinations), float32."""
        src, dst = self.edges()
        n = self.num_nodes
        if kind == "gcn":
            ew, sw = self.gcn_norm()
            rows = np.concatenate([dst, np.arange(n)])
            cols = np.concatenate([src, np.arange(n)])
            vals = np.concatenate([ew, sw])
        elif kind == "mean":
            rows, cols, vals = dst, src, self.mean_norm()
        else:
            raise ValueError(f"unknown normalisation {kind!r}; expected 'gcn' or 'mean'")
        return sp.csr_matrix((vals, (rows, cols)), shape=(n, n), dtype=np.float32)

    def __repr__(self) -> str:
        return (
            f"Graph(name={self.name!r}, num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}, "
            f"multi_label={self.multi_label}, train/val/test={int(self.train_mask.sum())}/"
            f"{int(self.val_mask.sum())}/{int(self.test_mask.sum())})"
        )


def _check_num_nodes(num_nodes) -> int:
    if num_nodes is None:
        raise ValueError("num_nodes is required")
    if int(num_nodes) != num_nodes:
        raise ValueError(f"num_nodes must be an integer, got {num_nodes!r}")
    num_nodes = int(num_nodes)
    if num_nodes <= 0:
        raise ValueError(f"empty graph: num_nodes must be positive, got {num_nodes}")
    return num_nodes


def _as_index_array(a, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            bad = int(np.flatnonzero(~np.isfinite(a) | (a != np.round(a)))[0])
            raise ValueError(f"{what}[{bad}] = {a[bad]!r} is not an integer node id")
    return a.astype(np.int64)


def _check_ids(ids: np.ndarray, num_nodes: int, what: str) -> None:
    if ids.size == 0:
        return
    bad = np.flatnonzero((ids < 0) | (ids >= num_nodes))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{what}[{i}] = {int(ids[i])} is not a node id in [0, {num_nodes}) "
            f"({bad.size} invalid ids in {what})"
        )


def _csr_from_edges(
    src: np.ndarray, dst: np.ndarray, n: int, *, symmetrize: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, duplicate-free CSR over destinations from ``int64`` keys ``dst * n + src``,
    by an in-place sort (``np.unique`` is far slower on tens of millions of keys)."""
    if n > 3_037_000_499:  # n * n must fit in int64
        raise ValueError(f"num_nodes = {n} is too large for int64 edge keys")
    m = src.shape[0]
    key = np.empty(m * (2 if symmetrize else 1), np.int64)
    np.multiply(dst, n, out=key[:m], dtype=np.int64)
    key[:m] += src
    if symmetrize:
        np.multiply(src, n, out=key[m:], dtype=np.int64)
        key[m:] += dst
    key.sort()
    if key.size > 1:
        new = np.empty(key.shape, bool)
        new[0] = True
        np.not_equal(key[1:], key[:-1], out=new[1:])
        if not new.all():
            key = key[new]
    indptr = np.searchsorted(key, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64)
    rows = key // n  # key - (key // n) * n: a scalar floor-divide is faster than remainder
    rows *= n
    np.subtract(key, rows, out=rows)
    return indptr, rows.astype(np.int32)


def _validate(g: Graph) -> None:
    object.__setattr__(g, "indptr", np.asarray(g.indptr, np.int64))
    object.__setattr__(g, "indices", np.asarray(g.indices, np.int32))
    if g.indptr.ndim != 1 or g.indptr.shape[0] < 2:
        raise ValueError("empty graph: indptr must have num_nodes + 1 >= 2 entries")
    n = g.indptr.shape[0] - 1
    if g.indptr[0] != 0 or np.any(np.diff(g.indptr) < 0) or g.indptr[-1] != g.indices.shape[0]:
        raise ValueError(f"indptr is not a valid CSR row pointer for {g.indices.shape[0]} edges")
    _check_ids(g.indices, n, "indices")
    if g.indices.size > 1:
        # Within each row the sources must increase strictly (sorted, no duplicates); a
        # decrease is allowed only where a new row starts.
        bad = np.diff(g.indices) <= 0
        starts = g.indptr[1:-1]
        bad[starts[(starts > 0) & (starts < g.indices.size)] - 1] = False
        if bad.any():
            v = int(np.searchsorted(g.indptr, np.flatnonzero(bad)[0] + 1, side="right") - 1)
            raise ValueError(
                f"in-edges of node {v} are not sorted or contain duplicates; build graphs "
                "with Graph.from_edges, which sorts and merges them"
            )

    feats = np.asarray(g.features)
    if feats.ndim == 1:
        feats = feats[:, None]
    if feats.ndim != 2 or feats.shape[0] != n:
        raise ValueError(f"features must have shape [{n}, F], got {feats.shape}")
    feats = feats.astype(np.float32, copy=False)
    finite = np.isfinite(feats).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(
            f"features of node {int(bad[0])} contain NaN or inf ({bad.size} nodes affected)"
        )
    object.__setattr__(g, "features", feats)

    labels = np.asarray(g.labels)
    if labels.ndim not in (1, 2) or labels.shape[0] != n:
        raise ValueError(f"labels must have shape [{n}] or [{n}, C], got {labels.shape}")
    if labels.ndim == 1:
        if labels.size and not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"single-label labels must be integers, got dtype {labels.dtype}")
        labels = labels.astype(np.int32)
        if labels.size and labels.min() < -1:
            raise ValueError(f"labels must be >= -1 (-1 = unlabelled), got {labels.min()}")
    else:
        labels = labels.astype(bool)
    object.__setattr__(g, "labels", labels)

    for field in ("train_mask", "val_mask", "test_mask"):
        m = np.asarray(getattr(g, field))
        if m.shape != (n,):
            raise ValueError(f"{field} must have shape [{n}], got {m.shape}")
        m = m.astype(bool)
        if labels.ndim == 1 and np.any(labels[m] < 0):
            bad = int(np.flatnonzero(m & (labels < 0))[0])
            raise ValueError(f"{field} selects node {bad}, which has no label (-1)")
        object.__setattr__(g, field, m)

    if g.node_ids is not None:
        object.__setattr__(g, "node_ids", _checked_node_ids(g.node_ids, n))


def _checked_node_ids(node_ids, n: int) -> np.ndarray:
    ids = np.asarray(node_ids)
    if ids.dtype == object:
        # An object array (e.g. from pandas) must hold one kind: as strings, 1 and "1" collide.
        values = ids.ravel().tolist()
        if all(isinstance(v, str) for v in values):
            ids = ids.astype(str)
        elif all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
            ids = ids.astype(np.int64)
        else:
            raise ValueError("node_ids must be all integers or all strings, got mixed objects")
    if ids.ndim != 1 or ids.shape[0] != n:
        raise ValueError(f"node_ids must have shape [{n}] (one id per node), got {ids.shape}")
    if ids.dtype.kind not in "iuU":
        raise ValueError(f"node_ids must be integers or strings, got dtype {ids.dtype}")
    if ids.dtype.kind == "i":
        ids = ids.astype(np.int64, copy=False)
    if n > 1:
        s = np.sort(ids)
        same = np.flatnonzero(s[1:] == s[:-1])
        if same.size:
            dup = s[same[0]]
            count = int(np.count_nonzero(ids == dup))
            raise ValueError(
                f"node_ids must be distinct: {dup.item()!r} is the id of {count} nodes "
                f"({np.unique(s[same]).size} ids repeated)"
            )
    return ids
