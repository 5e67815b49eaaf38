"""Retrieval metrics of node embeddings (FAISS, exact inner product on L2-normalised vectors).

* :func:`edge_retrieval`: for each held-out edge ``(u, v)``, in both directions, query ``u``,
  drop ``u`` and its training neighbours from the ranking, and take the 1-based rank of ``v``.
  ``Hit@K = 1[rank <= K]``, ``MRR@K = 1/rank`` if ``rank <= K`` else 0,
  ``nDCG@K = 1/log2(rank + 1)`` if ``rank <= K`` else 0 (one relevant item).
* :func:`label_retrieval`: query a labelled node, drop itself; a result is relevant if it shares a
  label with the query. ``Hit@K`` = a relevant result in the top ``K``; ``MRR@K`` = 1 / rank of
  the first relevant result; ``nDCG@K = DCG@K / IDCG@K`` with binary gains and
  ``IDCG@K = sum_{i <= min(K, R)} 1/log2(i + 1)``, ``R`` the number of relevant nodes.

Both run on FAISS (``backend="faiss"``) or on a brute-force NumPy top-k (``backend="numpy"``),
which give the same rankings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from jaxgraph.embed.evaluate import LinkSplit, label_matrix

Backend = Literal["faiss", "numpy"]
DEFAULT_KS = (1, 10, 20, 50)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (zero rows stay zero), ``float32``."""
    x = np.asarray(x, np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def top_k_inner_product(
    base: np.ndarray, queries: np.ndarray, k: int, backend: Backend = "faiss"
) -> tuple[np.ndarray, np.ndarray]:
    """Exact maximum-inner-product search of ``queries: f32[Q, d]`` in ``base: f32[N, d]``:
    ``(scores f32[Q, k], ids int64[Q, k])``, best first (``k`` capped at ``N``)."""
    base = np.ascontiguousarray(base, np.float32)
    queries = np.ascontiguousarray(queries, np.float32)
    k = min(k, base.shape[0])
    if backend == "faiss":
        import faiss

        index = faiss.IndexFlatIP(base.shape[1])
        index.add(base)
        scores, ids = index.search(queries, k)
        return scores, ids.astype(np.int64)
    if backend != "numpy":
        raise ValueError(f"unknown backend {backend!r}; expected 'faiss' or 'numpy'")
    scores = np.empty((queries.shape[0], k), np.float32)
    ids = np.empty((queries.shape[0], k), np.int64)
    for lo in range(0, queries.shape[0], 1024):
        s = queries[lo : lo + 1024] @ base.T  # f32[q, N]
        part = np.argpartition(-s, k - 1, axis=1)[:, :k] if k < s.shape[1] else np.argsort(-s)
        ps = np.take_along_axis(s, part, axis=1)
        order = np.lexsort((part, -ps), axis=1)  # score descending, then id ascending
        ids[lo : lo + 1024] = np.take_along_axis(part, order, axis=1)
        scores[lo : lo + 1024] = np.take_along_axis(ps, order, axis=1)
    return scores, ids


def filtered_top_k(
    embeddings: np.ndarray,
    queries: np.ndarray,
    exclude_indptr: np.ndarray,
    exclude_indices: np.ndarray,
    k: int,
    backend: Backend = "faiss",
) -> np.ndarray:
    """Top-``k`` cosine neighbours of each query node, leaving out the query itself and the
    nodes ``exclude_indices[exclude_indptr[q]:exclude_indptr[q + 1]]`` of query ``q``:
    ``int64[Q, k]`` node ids, best first, ``-1`` where fewer candidates remain."""
    unit = l2_normalize(embeddings)
    queries = np.asarray(queries, np.int64)
    n_excl = np.diff(exclude_indptr) + 1  # + the query itself
    out = np.full((queries.shape[0], k), -1, np.int64)
    # Search depth k + |excluded|, bucketed by powers of two to bound the result size.
    need = k + n_excl
    bucket = np.ceil(np.log2(np.maximum(need, 1))).astype(np.int64)
    for bkt in np.unique(bucket):
        rows = np.flatnonzero(bucket == bkt)
        depth = min(1 << int(bkt), unit.shape[0])
        _, ids = top_k_inner_product(unit, unit[queries[rows]], depth, backend)
        for r, res in zip(rows, ids, strict=True):
            excl = exclude_indices[exclude_indptr[r] : exclude_indptr[r + 1]]
            keep = (res != queries[r]) & ~np.isin(res, excl) & (res >= 0)
            got = res[keep][:k]
            out[r, : got.size] = got
    return out


def _metrics_from_ranks(ranks: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """Single-relevant-item metrics from 1-based ranks (``inf`` = not retrieved)."""
    out = {}
    for k in ks:
        hit = ranks <= k
        out[f"hit@{k}"] = float(hit.mean())
        out[f"mrr@{k}"] = float(np.where(hit, 1.0 / ranks, 0.0).mean())
        out[f"ndcg@{k}"] = float(np.where(hit, 1.0 / np.log2(ranks + 1.0), 0.0).mean())
    return out


def edge_retrieval(
    embeddings: np.ndarray,
    split: LinkSplit,
    ks: Sequence[int] = DEFAULT_KS,
    backend: Backend = "faiss",
) -> dict[str, float]:
    """Hit@K, MRR@K and nDCG@K of the held-out edges (both directions); see the module
    docstring. The training neighbours of the query are filtered out."""
    kmax = max(ks)
    pos = split.test_pos
    q_src = np.concatenate([pos[:, 0], pos[:, 1]])
    q_dst = np.concatenate([pos[:, 1], pos[:, 0]])
    uniq, inv = np.unique(q_src, return_inverse=True)
    g = split.train_graph  # symmetric: in-neighbours = neighbours
    starts, ends = g.indptr[uniq], g.indptr[uniq + 1]
    excl_indptr = np.concatenate([[0], np.cumsum(ends - starts)])
    excl = [g.indices[s:e] for s, e in zip(starts, ends, strict=True)]
    excl = np.concatenate(excl) if excl else np.zeros(0, np.int32)
    top = filtered_top_k(embeddings, uniq, excl_indptr, excl, kmax, backend)[inv]
    found = top == q_dst[:, None]
    ranks = np.where(found.any(axis=1), found.argmax(axis=1) + 1.0, np.inf)
    return {"queries": int(q_src.size), **_metrics_from_ranks(ranks, ks)}


def label_retrieval(
    embeddings: np.ndarray,
    labels: np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    max_queries: int | None = 2000,
    seed: int = 0,
    backend: Backend = "faiss",
) -> dict[str, float]:
    """Hit@K, MRR@K and nDCG@K with relevance = sharing a label with the query (see the module
    docstring). Queries: up to ``max_queries`` random labelled nodes with at least one other
    relevant node."""
    y = label_matrix(labels)
    yf = y.astype(np.float32)
    labelled = np.flatnonzero(y.any(axis=1))
    rng = np.random.default_rng(seed)
    if max_queries is not None and labelled.size > max_queries:
        labelled = np.sort(rng.choice(labelled, max_queries, replace=False))
    relevant_count = (yf[labelled] @ yf.T > 0).sum(axis=1) - 1  # minus the query itself
    queries = labelled[relevant_count > 0]
    relevant_count = relevant_count[relevant_count > 0]
    kmax = max(ks)
    empty = np.zeros(queries.size + 1, np.int64)
    top = filtered_top_k(embeddings, queries, empty, np.zeros(0, np.int64), kmax, backend)
    rel = (y[np.maximum(top, 0)] & y[queries][:, None, :]).any(axis=2) & (top >= 0)
    gains = 1.0 / np.log2(np.arange(2, kmax + 2))
    first = np.where(rel.any(axis=1), rel.argmax(axis=1) + 1.0, np.inf)  # first relevant rank
    out = {"queries": int(queries.size), **_metrics_from_ranks(first, ks)}
    for k in ks:  # binary gains, several relevant results: nDCG against the ideal ranking
        idcg = np.cumsum(gains)[np.minimum(relevant_count, k) - 1]
        out[f"ndcg@{k}"] = float(((rel[:, :k] * gains[:k]).sum(axis=1) / idcg).mean())
    return out


def format_classification(result: dict[float, dict]) -> str:
    """A small text table of :func:`node_classification`'s result."""
    lines = ["ratio  micro-F1        macro-F1"]
    for ratio, r in result.items():
        mi, ma = r["micro"], r["macro"]
        lines.append(
            f"{ratio:<5g}  {mi['mean']:.4f}±{mi['std']:.4f}  {ma['mean']:.4f}±{ma['std']:.4f}"
        )
    return "\n".join(lines)
