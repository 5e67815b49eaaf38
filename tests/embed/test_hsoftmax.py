"""Hierarchical softmax: the Huffman tree, the batched update against word2vec's pair-by-pair
update, and DeepWalk trained with it end to end on 1 and 2 devices."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from jaxgraph.data import dc_sbm
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed.hsoftmax import HuffmanTree, hs_update, hs_update_reference, huffman_tree
from jaxgraph.embed.run import EmbedConfig, embed
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.sync import HotspotSync
from jaxgraph.embed.walks import WalkConfig
from jaxgraph.mesh import make_mesh


def _huffman_cost(weights) -> float:
    """The optimal weighted path length, by merging the two lightest of a sorted list."""
    items = sorted(float(w) for w in weights)
    cost = 0.0
    while len(items) > 1:
        a, b = items.pop(0), items.pop(0)
        cost += a + b
        items = sorted([*items, a + b])
    return cost


def _codes(tree: HuffmanTree) -> list[str]:
    labels = np.asarray(tree.labels)
    return ["".join(str(int(1 - x)) for x in row if x >= 0) for row in labels]


@pytest.mark.parametrize("seed", range(4))
def test_huffman_tree_is_optimal_full_and_prefix_free(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    weights = rng.integers(0, 50, n).astype(float)
    if seed == 0:
        weights = np.array([5.0, 1, 1, 2, 8, 3])  # depths 2 5 5 4 1 3 by hand
        n = 6
    tree = huffman_tree(weights)
    codes = _codes(tree)
    lengths = np.array([len(c) for c in codes])
    if seed == 0:
        np.testing.assert_array_equal(lengths, [2, 5, 5, 4, 1, 3])
    assert np.dot(weights, lengths) == pytest.approx(_huffman_cost(weights))
    assert np.sum(2.0**-lengths) == pytest.approx(1.0)  # a full binary tree
    assert len(set(codes)) == n
    assert not any(a != b and b.startswith(a) for a in codes for b in codes)
    points = np.asarray(tree.points)
    assert np.all(points[:, 0] == n - 2)  # every path starts at the root
    # One inner row per prefix: the same prefix always names the same row, and all N - 1 occur.
    rows = {}
    for code, path in zip(codes, points, strict=True):
        for depth in range(len(code)):
            assert rows.setdefault(code[:depth], path[depth]) == path[depth]
    assert sorted(rows.values()) == list(range(n - 1))


def test_huffman_tree_rejects_bad_weights():
    with pytest.raises(ValueError, match="at least 2 weights"):
        huffman_tree(np.ones(1))
    with pytest.raises(ValueError, match="finite and >= 0"):
        huffman_tree(np.array([1.0, -1.0, 2.0]))


@pytest.mark.parametrize("row_cap", [None, 1, 3])
def test_update_equals_word2vec_pair_by_pair(row_cap):
    """The batched update equals word2vec's hs update summed per row (and capped per row),
    with repeated inputs and outputs, padding pairs of weight 0 and paths of every length."""
    rng = np.random.default_rng(7)
    n, d, b = 13, 6, 40
    tree = huffman_tree(rng.integers(1, 30, n).astype(float))
    syn0 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    syn1 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    inputs = rng.integers(0, 5, b).astype(np.int32)  # many duplicates
    outputs = rng.integers(0, n, b).astype(np.int32)
    weight = (rng.random(b) > 0.2).astype(np.float32)
    got0, got1, loss = hs_update(
        jnp.asarray(syn0), jnp.asarray(syn1), inputs, outputs, tree, weight, 0.1, row_cap=row_cap
    )
    want0, want1 = hs_update_reference(syn0, syn1, inputs, outputs, tree, weight, 0.1, row_cap)
    np.testing.assert_allclose(got0, want0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got1, want1, rtol=1e-5, atol=1e-6)
    want_loss = 0.0
    for i, o, w in zip(inputs, outputs, weight, strict=True):
        for p, label in zip(tree.points[o], tree.labels[o], strict=True):
            if label >= 0:
                f = float(syn0[i].astype(np.float64) @ syn1[p])
                want_loss -= w * np.log(1 / (1 + np.exp(-f if label else f)))
    assert float(loss) == pytest.approx(want_loss, rel=1e-5)
    assert not np.array_equal(got1, syn1)  # the step moved the inner rows


def _graph():
    return dc_sbm(300, 6, 12.0, num_features=0, homophily=0.95, degree_exponent=None, seed=4)


def _config(parts: int, pairs: str = "host") -> EmbedConfig:
    sgns = SkipGramConfig(
        dim=16, window=3, batch_size=256, sync_every=16, objective="hierarchical", pairs=pairs
    )
    return EmbedConfig("deepwalk", WalkConfig(walk_length=20, walks_per_node=4), sgns, rounds=2)


@pytest.mark.parametrize("parts", [1, 2])
def test_deepwalk_with_hierarchical_softmax_learns_the_blocks(parts):
    """Six planted blocks: node classification far above chance (1/6), held-out edges above
    non-edges, and the loss falls from round to round; on 2 devices as on one."""
    g = _graph()
    cfg = _config(parts).replace(parts=parts)
    res = embed(cfg, g)
    assert res.rounds[1].loss < res.rounds[0].loss
    acc = ev.node_classification(res.syn0, g.labels, train_ratios=(0.5,), shuffles=1)
    assert acc[0.5]["micro"]["mean"] > 0.9
    split = ev.link_prediction_split(g, 0.5, seed=0)
    lp = embed(cfg, split.train_graph)
    assert ev.link_prediction_auc(split, lp.syn0, "cosine") > 0.85


def test_device_pairs_train_the_same_tables():
    """Pairs built on the device train the same tables as host pairs under the tree."""
    g = _graph()
    host = embed(_config(2).replace(parts=2, rounds=1), g)
    device = embed(_config(2, "device").replace(parts=2, rounds=1), g)
    np.testing.assert_allclose(device.syn0, host.syn0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(device.syn1, host.syn1, rtol=1e-5, atol=1e-6)


def test_trainer_errors_name_the_problem():
    mesh = make_mesh(1, "data")
    cfg = SkipGramConfig(dim=8, objective="hierarchical")
    with pytest.raises(ValueError, match="objective='hierarchical' needs degrees"):
        SkipGramTrainer(10, cfg, mesh)
    with pytest.raises(ValueError, match="sync of every row"):
        SkipGramTrainer(10, cfg, mesh, degrees=np.ones(10), sync=HotspotSync())
    with pytest.raises(ValueError, match="objective must be one of"):
        dataclasses.replace(cfg, objective="hs")
