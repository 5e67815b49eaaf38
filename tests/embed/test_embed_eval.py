"""Evaluation metrics against scikit-learn and hand-computed toy values."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score

from jaxgraph.embed import evaluate as ev
from jaxgraph.embed import retrieval as rt
from jaxgraph.graph import Graph

from graph_cases import directed, power_law, random_graph


def test_link_split_keeps_every_node_and_draws_true_non_edges():
    g = random_graph(120, 8.0, seed=3)
    split = ev.link_prediction_split(g, 0.5, seed=0)
    full = {tuple(e) for e in ev.undirected_edges(g).tolist()}
    train = {tuple(e) for e in ev.undirected_edges(split.train_graph).tolist()}
    pos = [tuple(e) for e in split.test_pos.tolist()]
    neg = [tuple(e) for e in split.test_neg.tolist()]
    assert split.test_fraction == pytest.approx(0.5, abs=0.01)
    assert set(pos) | train == full and not set(pos) & train and len(set(pos)) == len(pos)
    assert len(neg) == len(pos) == len(set(neg))
    assert all(u < v for u, v in neg) and not set(neg) & full
    deg_full = np.bincount(ev.undirected_edges(g).ravel(), minlength=g.num_nodes)
    deg_train = np.bincount(ev.undirected_edges(split.train_graph).ravel(), minlength=g.num_nodes)
    np.testing.assert_array_equal(deg_train > 0, deg_full > 0)
    assert split.train_graph.is_symmetric()
    again = ev.link_prediction_split(g, 0.5, seed=0)
    np.testing.assert_array_equal(again.test_neg, split.test_neg)


def test_link_split_errors():
    with pytest.raises(ValueError, match="undirected"):
        ev.link_prediction_split(directed(), seed=0)
    star = Graph.from_edges(np.zeros(5, int), np.arange(1, 6), num_nodes=6, symmetrize=True)
    with pytest.raises(ValueError, match="no edge can be held out"):
        ev.link_prediction_split(star, seed=0)
    with pytest.raises(ValueError, match="test_fraction"):
        ev.link_prediction_split(star, 1.0, seed=0)


def test_roc_auc_equals_sklearn_with_ties():
    rng = np.random.default_rng(0)
    y = rng.random(500) < 0.4
    s = np.round(rng.standard_normal(500) + y, 1)  # many ties
    assert ev.roc_auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert ev.roc_auc([1, 1, 0, 0], [0.9, 0.8, 0.1, 0.8]) == pytest.approx(0.875)
    with pytest.raises(ValueError, match="both positive and negative"):
        ev.roc_auc([1, 1], [0.1, 0.2])


def test_pair_scores_and_auc_by_hand():
    syn0 = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.0, 0.0]])
    syn1 = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [5.0, 5.0]])
    pairs = np.array([[0, 1], [0, 2], [1, 3]])
    np.testing.assert_allclose(ev.pair_scores(pairs, syn0, "dot"), [2.0, 0.0, 0.0])
    np.testing.assert_allclose(ev.pair_scores(pairs, syn0, "cosine"), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(ev.pair_scores(pairs, syn0, "dot_context", syn1), [1.0, 1.0, 10.0])
    with pytest.raises(ValueError, match="unknown score 'l1'"):
        ev.pair_scores(pairs, syn0, "l1")
    g = random_graph(60, 6.0, seed=1)
    split = ev.link_prediction_split(g, 0.5, seed=1)
    # An "oracle" embedding: rows of A + I of the full graph; u.v = common neighbours + 2 A_uv.
    emb = g.adjacency().toarray() + np.eye(g.num_nodes)
    auc = ev.link_prediction_auc(split, emb, "dot")
    assert auc > 0.8


def test_f1_and_top_k_equal_sklearn():
    rng = np.random.default_rng(1)
    y_true = rng.random((200, 7)) < 0.3
    y_true[:, 6] = False  # a label absent everywhere
    k = np.maximum(y_true.sum(1), 1)
    scores = rng.standard_normal((200, 7))
    pred = ev.top_k_labels(scores, k)
    np.testing.assert_array_equal(pred.sum(1), k)
    order = np.argsort(-scores, axis=1)
    for i in range(5):
        assert set(np.flatnonzero(pred[i])) == set(order[i, : k[i]])
    micro, macro = ev.f1_scores(y_true, pred)
    assert micro == pytest.approx(f1_score(y_true, pred, average="micro", zero_division=0))
    assert macro == pytest.approx(f1_score(y_true, pred, average="macro", zero_division=0))


def test_one_vs_rest_equals_sklearn_and_classifies_separable_labels():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 6))
    y = np.stack([x[:, 0] > 0, x[:, 1] > 0.5, x[:, 2] + x[:, 3] > 0], 1)
    y[:, 2] &= ~y[:, 0] | y[:, 1]
    scores = ev.one_vs_rest_scores(x[:200], y[:200], x[200:])
    for c in range(3):
        ref = LogisticRegression(solver="liblinear", random_state=0).fit(x[:200], y[:200, c])
        np.testing.assert_allclose(scores[:, c], ref.decision_function(x[200:]), atol=1e-6)
    const = ev.one_vs_rest_scores(x[:10], np.zeros((10, 1), bool), x[10:12])
    assert np.all(const == -np.inf)
    labels = np.where(y[:, 0], 1, 0)  # single-label int labels work too
    res = ev.node_classification(x, labels, train_ratios=(0.5,), shuffles=2, seed=0)
    assert res[0.5]["micro"]["mean"] > 0.9 and len(res[0.5]["micro"]["values"]) == 2
    multi = ev.node_classification(x, y, train_ratios=(0.3, 0.7), shuffles=1)
    assert set(multi) == {0.3, 0.7} and multi[0.7]["micro"]["mean"] > 0.75
    with pytest.raises(ValueError, match="train ratios"):
        ev.node_classification(x, y, train_ratios=(1.0,))


def test_faiss_and_numpy_top_k_agree():
    rng = np.random.default_rng(3)
    base = rt.l2_normalize(rng.standard_normal((400, 16)))
    queries = base[:50]
    fs, fi = rt.top_k_inner_product(base, queries, 20, "faiss")
    ns, ni = rt.top_k_inner_product(base, queries, 20, "numpy")
    np.testing.assert_array_equal(fi, ni)
    np.testing.assert_allclose(fs, ns, atol=1e-5)
    np.testing.assert_array_equal(fi[:, 0], np.arange(50))  # a vector is its own best match


def _toy_line():
    """Five nodes on a circle arc: node i at angle 0.3 i, so cosine order = id distance."""
    ang = 0.3 * np.arange(5)
    return np.stack([np.cos(ang), np.sin(ang)], 1).astype(np.float32)


def test_retrieval_metrics_by_hand():
    emb = _toy_line()
    # Graph 0-1, 0-2 (train) and held out 0-3, 1-4. Query 0 (drops 1, 2): ranks 3 -> 1.
    # Query 3 (drops nothing: 3 has no training edge): order 2, 4, 1, 0 -> rank 4 for node 0.
    # Query 1 (drops 0): 2, 3, 4 -> rank 3 for node 4; query 4: 3, 2, 1 -> rank 3.
    train = Graph.from_edges([0, 0], [1, 2], num_nodes=5, symmetrize=True)
    split = ev.LinkSplit(train, np.array([[0, 3], [1, 4]]), np.array([[2, 4], [0, 4]]), 0.5)
    for backend in ("faiss", "numpy"):
        m = rt.edge_retrieval(emb, split, ks=(1, 3), backend=backend)
        ranks = np.array([1.0, 3.0, 4.0, 3.0])
        assert m["queries"] == 4
        assert m["hit@1"] == pytest.approx(0.25) and m["hit@3"] == pytest.approx(0.75)
        assert m["mrr@3"] == pytest.approx(np.mean(np.where(ranks <= 3, 1 / ranks, 0)))
        assert m["ndcg@3"] == pytest.approx(
            np.mean(np.where(ranks <= 3, 1 / np.log2(ranks + 1), 0))
        )


def test_label_retrieval_by_hand():
    emb = _toy_line()
    labels = np.array([[1, 0], [0, 1], [1, 0], [0, 1], [1, 1]], bool)
    m = rt.label_retrieval(emb, labels, ks=(1, 3), max_queries=None)
    assert m["queries"] == 5
    top = rt.filtered_top_k(emb, np.arange(5), np.zeros(6, np.int64), np.zeros(0, np.int64), 3)
    rel = [[bool(labels[q] @ labels[j]) for j in top[q]] for q in range(5)]
    first = [next((i + 1 for i, r in enumerate(row) if r), np.inf) for row in rel]
    n_rel = [(labels @ labels[q] > 0).sum() - 1 for q in range(5)]
    gains = 1 / np.log2(np.arange(2, 5))
    ndcg = [
        sum(g for g, r in zip(gains, row, strict=True) if r) / gains[: min(3, n)].sum()
        for row, n in zip(rel, n_rel, strict=True)
    ]
    assert m["hit@3"] == pytest.approx(np.mean([any(r) for r in rel]))
    assert m["mrr@3"] == pytest.approx(np.mean([1 / f if f <= 3 else 0 for f in first]))
    assert m["ndcg@3"] == pytest.approx(np.mean(ndcg))
    assert m["hit@1"] == pytest.approx(np.mean([r[0] for r in rel]))
    # Query 0 ranks 1, 2, 3; relevant {2, 4}: first hit at rank 2, DCG@3 = 1/log2(3),
    # IDCG@3 = 1 + 1/log2(3) (two relevant nodes).
    np.testing.assert_array_equal(top[0], [1, 2, 3])
    assert first[0] == 2 and ndcg[0] == pytest.approx(0.38685280723454163)


def test_retrieval_backends_agree_on_a_real_split():
    g = power_law()
    split = ev.link_prediction_split(g, 0.5, seed=0)
    emb = np.random.default_rng(0).standard_normal((g.num_nodes, 8))
    a = rt.edge_retrieval(emb, split, backend="faiss")
    b = rt.edge_retrieval(emb, split, backend="numpy")
    assert a == b
