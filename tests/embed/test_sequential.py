"""The sequential (batch-1) skip-gram reference: the update pair by pair against the closed
form, and the trainer's pair stream."""

from __future__ import annotations

import numpy as np
import pytest

from jaxgraph.embed.sequential import train_pairs, train_pairs_given, train_sequential
from jaxgraph.embed.sgns import SkipGramConfig, sgns_update_reference
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.walks import WalkConfig, Walks, random_walks
from jaxgraph.mesh import make_mesh

from graph_cases import power_law


def _tables(rng, n=12, d=8):
    syn0 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    syn1 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    return syn0, syn1


def test_each_pair_sees_the_tables_the_previous_pair_left():
    """Pair by pair, the numba update equals the float64 closed form applied to one pair at a
    time (a batch of 1), including repeated rows and a negative equal to the positive."""
    rng = np.random.default_rng(0)
    syn0, syn1 = _tables(rng)
    inputs = np.array([0, 0, 3, 5, 0, 3], np.int32)
    outputs = np.array([1, 1, 4, 3, 2, 1], np.int32)
    negatives = rng.integers(0, 12, (6, 3)).astype(np.int32)
    negatives[1, 0] = outputs[1]  # skipped, as word2vec does
    rates = np.array([0.5, 0.4, 0.3, 0.3, 0.2, 0.1], np.float32)
    ref0, ref1 = syn0.astype(np.float64), syn1.astype(np.float64)
    for m in range(6):
        ref0, ref1 = sgns_update_reference(
            ref0,
            ref1,
            inputs[m : m + 1],
            outputs[m : m + 1],
            negatives[m : m + 1],
            np.ones(1),
            rates[m],
        )
    got0, got1 = syn0.copy(), syn1.copy()
    loss = train_pairs_given(got0, got1, inputs, outputs, negatives, rates)
    np.testing.assert_allclose(got0, ref0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got1, ref1, rtol=1e-5, atol=1e-6)
    # A batch of all six pairs from the same tables is a different (stale) update.
    b0, _ = sgns_update_reference(syn0, syn1, inputs, outputs, negatives, np.ones(6), 0.5)
    assert np.abs(b0 - ref0).max() > 1e-2
    assert loss > 0 and np.isfinite(loss)


def test_drawn_negatives_are_deterministic_and_follow_the_table():
    rng = np.random.default_rng(1)
    syn0, syn1 = _tables(rng)
    inputs = np.zeros(4000, np.int32)
    outputs = np.ones(4000, np.int32)
    rates = np.zeros(4000, np.float32)  # no step: the loss is the same function of the draws
    accept = np.ones(12, np.float32)
    alias = np.arange(12, dtype=np.int32)
    accept[5:] = 0.0  # rows 5.. always redirect to row 2
    alias[5:] = 2
    a0, a1 = syn0.copy(), syn1.copy()
    l1 = train_pairs(a0, a1, inputs, outputs, rates, accept, alias, 3, np.uint64(7))
    l2 = train_pairs(a0, a1, inputs, outputs, rates, accept, alias, 3, np.uint64(7))
    l3 = train_pairs(a0, a1, inputs, outputs, rates, accept, alias, 3, np.uint64(8))
    assert l1 == l2 and l1 != l3
    np.testing.assert_array_equal(a0, syn0)  # rate 0 leaves the tables unchanged
    # The loss of one pair's negative o is softplus(s.o); averaged over the draws it is the
    # table's expectation: rows 0, 1, 3, 4 with 1/12 each, row 2 with 8/12 (row 1, the
    # positive, is skipped). The mean of 12,000 draws is within 4 standard errors.
    s = syn0[0].astype(np.float64)
    soft = np.log1p(np.exp(s @ syn1.T.astype(np.float64)))
    p = np.zeros(12)
    p[[0, 3, 4]] = 1 / 12
    p[2] = 8 / 12
    pos = np.log1p(np.exp(-(s @ syn1[1])))
    mean = (p * soft).sum()
    var = (p * soft**2).sum() - mean**2  # a skipped draw (row 1) adds 0
    got = (l1 / 4000 - pos) / 3
    assert abs(got - mean) < 4 * np.sqrt(var / 12000)


def test_sequential_run_trains_the_trainers_pairs():
    """Round by round the reference takes exactly the pairs the trainer takes (same counts,
    sub-sampling, shrinks and walk order), and its loss per pair falls into word2vec's range."""
    g = power_law()
    cfg = SkipGramConfig(dim=16, window=3, lr_schedule="global", schedule_rounds=2)
    walk_cfg = WalkConfig(walk_length=20)
    rounds = [
        random_walks(g, np.arange(g.num_nodes), walk_cfg, seed=4, round_index=r) for r in range(2)
    ]
    tr = SkipGramTrainer(g.num_nodes, cfg, make_mesh(1), seed=4)
    stats = [tr.train_round(w, r) for r, w in enumerate(rounds)]
    syn0, syn1, losses, pairs = train_sequential(rounds, g.num_nodes, cfg, seed=4)
    assert pairs == [s.pairs for s in stats] and pairs[0] > 0
    assert np.isfinite(syn0).all() and np.abs(syn1).max() > 0
    # A pair's loss starts at (1 + K) log 2 = 4.16 (random tables) and falls as it trains.
    assert losses[1] < losses[0] <= (1 + cfg.negatives) * np.log(2) + 1e-3
    empty = Walks(np.zeros((0, 20), np.int32), np.zeros(0, np.int32))
    assert train_sequential([empty], g.num_nodes, cfg, seed=0)[3] == [0]
    with pytest.raises(ValueError, match="counts='corpus'"):
        train_sequential(rounds, g.num_nodes, SkipGramConfig(counts="degree"), seed=0)
