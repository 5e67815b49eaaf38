"""Evaluation of node embeddings, shared by every embedding method.

**Link prediction** (FeLoG §6.4; DistGER's ``gtrain`` split): :func:`link_prediction_split`
holds out 50 % of the undirected edges, removing an edge only while both endpoints keep a
training edge, and draws as many distinct non-edges of the full graph; embeddings train on
``split.train_graph`` and :func:`link_prediction_auc` reports the ROC AUC of the pair scores
(:func:`pair_scores`), equal to ``sklearn.metrics.roc_auc_score``.

**Node classification** (DeepWalk's ``scoring.py``): :func:`node_classification` fits one
L2-regularised logistic regression per label (one-vs-rest, ``C = 1``, liblinear) on a random
``ratio`` of the labelled nodes, predicts for each test node its ``k`` most probable labels,
``k`` = its true label count, and reports Micro- and Macro-F1 (``zero_division=0``), mean and
std over shuffles.

**Retrieval** (Hit/MRR/nDCG@K on FAISS): :mod:`jaxgraph.embed.retrieval`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from numba import njit

from jaxgraph.graph import Graph

Score = Literal["dot", "cosine", "dot_context"]
SCORES = ("dot", "cosine", "dot_context")
RATIOS = tuple(round(0.1 * i, 1) for i in range(1, 10))
SMALL_RATIOS = tuple(round(0.01 * i, 2) for i in range(1, 10))
_NODE_DATA = ("features", "labels", "train_mask", "val_mask", "test_mask")


@dataclasses.dataclass(frozen=True)
class LinkSplit:
    """A link-prediction split.

    Attributes:
      train_graph: the graph without the held-out edges (same nodes, labels and features).
      test_pos: ``int32[M, 2]`` held-out edges ``(u, v)``, ``u < v``.
      test_neg: ``int32[M, 2]`` non-edges of the full graph, ``u < v``, distinct.
      test_fraction: the fraction of undirected edges actually held out (the requested one
        unless too few edges can be removed without isolating a node).
    """

    train_graph: Graph
    test_pos: np.ndarray
    test_neg: np.ndarray
    test_fraction: float


def undirected_edges(graph: Graph) -> np.ndarray:
    """``int32[M, 2]`` the edges ``(u, v)`` with ``u < v`` (self-loops dropped)."""
    src, dst = graph.edges()
    keep = src < dst
    return np.stack([src[keep], dst[keep]], axis=1).astype(np.int32)


def link_prediction_split(graph: Graph, test_fraction: float = 0.5, *, seed: int) -> LinkSplit:
    """Holds out ``test_fraction`` of the undirected edges (see the module docstring); raises
    ``ValueError`` for a directed graph, a fraction outside ``(0, 1)``, no removable edge, or too
    few non-edges for the negatives."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if not graph.is_symmetric():
        raise ValueError("link prediction needs an undirected (symmetric) graph")
    n = graph.num_nodes
    edges = undirected_edges(graph)
    rng = np.random.default_rng(seed)
    order = rng.permutation(edges.shape[0])
    target = int(round(test_fraction * edges.shape[0]))
    deg = np.bincount(edges.ravel(), minlength=n).astype(np.int64)
    held = _hold_out(edges[order], deg, target)
    if held.sum() == 0:
        raise ValueError("no edge can be held out without isolating a node")
    test_pos = edges[order][held]
    train = edges[order][~held]
    num_pairs = n * (n - 1) // 2
    if num_pairs - edges.shape[0] < test_pos.shape[0]:
        raise ValueError(
            f"the graph has {num_pairs - edges.shape[0]} non-edges, fewer than the "
            f"{test_pos.shape[0]} negatives needed"
        )
    test_neg = _sample_non_edges(edges, n, test_pos.shape[0], rng)
    kept = {k: getattr(graph, k) for k in _NODE_DATA}  # same nodes, labels and features
    name = f"{graph.name}-lp-train"
    train_graph = Graph.from_edges(
        train[:, 0], train[:, 1], num_nodes=n, symmetrize=True, name=name, **kept
    )
    return LinkSplit(train_graph, test_pos, test_neg, test_pos.shape[0] / edges.shape[0])


@njit(cache=True)
def _hold_out(edges, deg, target):
    held = np.zeros(edges.shape[0], np.bool_)
    count = 0
    for i in range(edges.shape[0]):
        if count >= target:
            break
        u = edges[i, 0]
        v = edges[i, 1]
        if deg[u] > 1 and deg[v] > 1:
            held[i] = True
            deg[u] -= 1
            deg[v] -= 1
            count += 1
    return held


def _sample_non_edges(edges: np.ndarray, n: int, m: int, rng) -> np.ndarray:
    edge_keys = np.sort(edges[:, 0].astype(np.int64) * n + edges[:, 1])
    chosen = np.zeros(0, np.int64)
    while chosen.size < m:
        draw = max(2 * (m - chosen.size), 1024)
        u = rng.integers(0, n, draw)
        v = rng.integers(0, n, draw)
        ok = u != v
        lo, hi = np.minimum(u, v)[ok], np.maximum(u, v)[ok]
        keys = lo * n + hi
        pos = np.searchsorted(edge_keys, keys)
        pos[pos == edge_keys.size] = 0
        keys = keys[edge_keys[pos] != keys] if edge_keys.size else keys
        keys = np.concatenate([chosen, keys])
        _, first = np.unique(keys, return_index=True)
        chosen = keys[np.sort(first)]  # distinct, in draw order
    chosen = chosen[:m]
    return np.stack([chosen // n, chosen % n], axis=1).astype(np.int32)


def roc_auc(y_true, y_score) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) statistic, ties at average rank (equals
    ``sklearn.metrics.roc_auc_score``); raises ``ValueError`` if ``y_true`` has one class."""
    y_true = np.asarray(y_true).astype(bool)
    n_pos = int(y_true.sum())
    n_neg = y_true.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC AUC needs both positive and negative examples")
    from scipy.stats import rankdata  # 0.6 s to import: not on a run's path that needs no AUC

    ranks = rankdata(np.asarray(y_score, np.float64))
    return float((ranks[y_true].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def pair_scores(
    pairs: np.ndarray, syn0: np.ndarray, score: Score = "dot", syn1: np.ndarray | None = None
) -> np.ndarray:
    """Scores of node pairs, ``float64[M]``: ``dot`` ``syn0[u].syn0[v]``, ``cosine``, or
    ``dot_context`` ``syn0[u].syn1[v]`` (which needs ``syn1``)."""
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; expected one of {SCORES}")
    x = np.asarray(syn0, np.float64)
    a = x[pairs[:, 0]]
    if score == "dot_context":
        if syn1 is None:
            raise ValueError("score 'dot_context' needs the output table syn1")
        b = np.asarray(syn1, np.float64)[pairs[:, 1]]
    else:
        b = x[pairs[:, 1]]
    s = np.einsum("md,md->m", a, b)
    if score == "cosine":
        den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        s = np.divide(s, den, out=np.zeros_like(s), where=den > 0)
    return s


def link_prediction_auc(
    split: LinkSplit, syn0: np.ndarray, score: Score = "dot", syn1: np.ndarray | None = None
) -> float:
    """ROC AUC of held-out edges against the split's non-edges."""
    pos = pair_scores(split.test_pos, syn0, score, syn1)
    neg = pair_scores(split.test_neg, syn0, score, syn1)
    labels = np.concatenate([np.ones(pos.size, bool), np.zeros(neg.size, bool)])
    return roc_auc(labels, np.concatenate([pos, neg]))


def link_prediction(
    graph: Graph,
    train_fn: Callable[[Graph, int], tuple[np.ndarray, np.ndarray]],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    test_fraction: float = 0.5,
    scores: Sequence[Score] = ("dot",),
) -> dict[str, dict[str, float]]:
    """Mean and std of the AUC over seeded splits of ``graph``, training on each split's
    training graph with ``train_fn(train_graph, seed) -> (syn0, syn1)``: ``{score: {"mean",
    "std", "values"}}``."""
    values = {s: [] for s in scores}
    for seed in seeds:
        split = link_prediction_split(graph, test_fraction, seed=seed)
        syn0, syn1 = train_fn(split.train_graph, seed)
        for s in scores:
            values[s].append(link_prediction_auc(split, syn0, s, syn1))
    return {s: _mean_std(v) for s, v in values.items()}


def _mean_std(values) -> dict:
    v = np.asarray(values, np.float64)
    return {"mean": float(v.mean()), "std": float(v.std()), "values": [float(x) for x in v]}


def label_matrix(labels: np.ndarray) -> np.ndarray:
    """``bool[N, C]`` indicators from ``int[N]`` class ids (``-1`` = none) or ``bool[N, C]``."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        return labels.astype(bool)
    if labels.ndim != 1:
        raise ValueError(f"labels must be int[N] or bool[N, C], got shape {labels.shape}")
    c = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    out = np.zeros((labels.shape[0], c), bool)
    ok = labels >= 0
    out[np.flatnonzero(ok), labels[ok]] = True
    return out


def f1_scores(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[float, float]:
    """``(micro, macro)`` F1 of ``bool[M, C]`` indicator matrices (a label with no true and no
    predicted positive scores 0 in the macro average)."""
    y_true = np.asarray(y_true, bool)
    y_pred = np.asarray(y_pred, bool)
    tp = np.sum(y_true & y_pred, axis=0).astype(np.float64)
    fp = np.sum(~y_true & y_pred, axis=0).astype(np.float64)
    fn = np.sum(y_true & ~y_pred, axis=0).astype(np.float64)
    den = 2 * tp.sum() + fp.sum() + fn.sum()
    micro = 2 * tp.sum() / den if den > 0 else 0.0
    per = np.divide(2 * tp, 2 * tp + fp + fn, out=np.zeros_like(tp), where=(2 * tp + fp + fn) > 0)
    return float(micro), float(per.mean()) if per.size else 0.0


def top_k_labels(scores: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``bool[M, C]`` with the ``k[i]`` highest-scoring labels of row ``i`` set (ties: lower
    label id first)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(scores.shape[1])[None, :], axis=1)
    return ranks < np.asarray(k)[:, None]


def one_vs_rest_scores(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    *,
    C: float = 1.0,
    solver: str = "liblinear",
    seed: int = 0,
) -> np.ndarray:
    """Decision scores ``float64[M_test, C]`` of one L2 logistic regression per label.

    A label that is constant on the training nodes gets a constant score (``-inf`` if never
    present, ``+inf`` if always present) instead of a fit.
    """
    from sklearn.linear_model import LogisticRegression

    out = np.empty((x_test.shape[0], y_train.shape[1]), np.float64)
    for c in range(y_train.shape[1]):
        y = y_train[:, c]
        if not y.any() or y.all():
            out[:, c] = np.inf if y.all() else -np.inf
            continue
        clf = LogisticRegression(C=C, solver=solver, max_iter=1000, random_state=seed)
        clf.fit(x_train, y)
        out[:, c] = clf.decision_function(x_test)
    return out


def node_classification(
    embeddings: np.ndarray,
    labels: np.ndarray,
    *,
    train_ratios: Sequence[float] = RATIOS,
    shuffles: int = 5,
    seed: int = 0,
    C: float = 1.0,
    solver: str = "liblinear",
) -> dict[float, dict[str, dict]]:
    """Micro/Macro-F1 of top-k one-vs-rest logistic regression (see the module docstring).

    ``labels``: ``int[N]`` (``-1`` = unlabelled) or ``bool[N, C]``; ``train_ratios``: shares
    of the labelled nodes to train on (``SMALL_RATIOS`` for large graphs), ``shuffles`` each.

    Returns ``{ratio: {"micro": {"mean", "std", "values"}, "macro": {...}}}``; raises
    ``ValueError`` for mismatched shapes, a ratio outside ``(0, 1)`` or under 2 labelled nodes.
    """
    x = np.asarray(embeddings, np.float64)
    y = label_matrix(labels)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"{x.shape[0]} embeddings but {y.shape[0]} label rows")
    keep = y.any(axis=1)
    x, y = x[keep], y[keep]
    m = x.shape[0]
    if m < 2:
        raise ValueError("node classification needs at least 2 labelled nodes")
    rng = np.random.default_rng(seed)
    result = {}
    for ratio in train_ratios:
        if not 0.0 < ratio < 1.0:
            raise ValueError(f"train ratios must be in (0, 1), got {ratio}")
        n_train = min(max(1, int(ratio * m)), m - 1)
        micro, macro = [], []
        for _ in range(shuffles):
            perm = rng.permutation(m)
            tr, te = perm[:n_train], perm[n_train:]
            scores = one_vs_rest_scores(x[tr], y[tr], x[te], C=C, solver=solver, seed=seed)
            pred = top_k_labels(scores, y[te].sum(axis=1))
            mi, ma = f1_scores(y[te], pred)
            micro.append(mi)
            macro.append(ma)
        result[ratio] = {"micro": _mean_std(micro), "macro": _mean_std(macro)}
    return result
