"""FeeST: neighbourhood consistency, the active-set rule, and the round loop's log."""

import numpy as np
import pytest

from jaxgraph.embed.feedback import (
    FeedbackConfig,
    initial_active_set,
    neighbour_consistency,
    update_active_set,
)
from jaxgraph.embed.run import EmbedConfig, embed
from jaxgraph.embed.skipgram import SkipGramConfig
from jaxgraph.embed.walks import WalkConfig, out_csr
from jaxgraph.graph import Graph

from graph_cases import power_law

# The trainer shapes of tests/embed/test_skipgram.py (300 nodes), to reuse its compilations.
SGNS = SkipGramConfig(dim=8, window=3, negatives=2, batch_size=16, sync_every=4)


def _clique_and_star():
    """Nodes 0-3: a 4-clique; node 4: a star centre with leaves 5..44 (40 leaves)."""
    a, b = np.triu_indices(4, k=1)
    src = np.concatenate([a, np.full(40, 4)])
    dst = np.concatenate([b, np.arange(5, 45)])
    return Graph.from_edges(src, dst, num_nodes=46, symmetrize=True)  # node 45 isolated


def test_identical_clique_is_consistent_orthogonal_is_not_zero_norm_counts_zero():
    g = _clique_and_star()
    indptr, indices = out_csr(g)
    x = np.zeros((46, 3), np.float32)
    x[:4] = [1.0, 2.0, 0.5]  # identical clique vectors
    x[4] = [1.0, 0.0, 0.0]  # centre orthogonal to every leaf ...
    x[5:45] = [0.0, 1.0, 0.0]
    x[6] = 0.0  # ... one leaf has a zero vector
    psi = neighbour_consistency(x, indptr, indices, np.arange(46), 100, seed=0)
    np.testing.assert_allclose(psi[:4], 1.0, atol=1e-12)
    assert psi[4] == 0.0 and psi[45] == 0.0  # orthogonal; isolated
    assert psi[5] == 0.0 and psi[6] == 0.0  # zero norm counts as cosine 0
    x[4] = [0.0, 1.0, 0.0]
    psi = neighbour_consistency(x, indptr, indices, [4], 100, seed=0)
    np.testing.assert_allclose(psi, 39 / 40)  # all 40 leaves, one of them zero


def test_neighbours_are_sampled_without_replacement():
    g = _clique_and_star()
    indptr, indices = out_csr(g)
    x = np.zeros((46, 2), np.float32)
    x[4] = [1.0, 0.0]
    x[5:45] = [0.0, 1.0]
    x[[7, 20, 33]] = [1.0, 0.0]  # 3 of the 40 leaves are parallel to the centre
    hits = np.array(
        [
            neighbour_consistency(x, indptr, indices, [4], 30, seed=0, round_index=r)[0] * 30
            for r in range(300)
        ]
    )
    np.testing.assert_allclose(hits, np.round(hits), atol=1e-9)
    assert hits.max() <= 3  # with replacement a sample could hold a leaf twice
    assert hits.mean() == pytest.approx(30 * 3 / 40, abs=0.15)  # hypergeometric mean
    again = neighbour_consistency(x, indptr, indices, [4], 30, seed=0, round_index=5)
    assert again[0] * 30 == pytest.approx(hits[5])


def test_active_set_rule_reactivation_and_stop_ratio():
    g = _clique_and_star()
    indptr, indices = out_csr(g)
    active = initial_active_set(indptr)
    assert 45 not in active and active.size == 45  # the isolated node never starts a walk
    x = np.zeros((46, 2), np.float32)
    x[:4] = [1.0, 0.0]  # the clique is consistent
    x[4] = [0.0, 1.0]  # the star is not: centre orthogonal to its leaves
    x[5:45] = [1.0, 0.0]
    cfg = FeedbackConfig(mu=0.65)
    ever = np.zeros(46, bool)
    step = update_active_set(
        active, x, indptr, indices, cfg, seed=0, round_index=0, ever_inactive=ever
    )
    assert set(step.active) == set(range(4, 45)) and step.evaluated == 45 and not step.stop
    assert step.reactivated == 0 and set(np.flatnonzero(ever)) == {0, 1, 2, 3}
    # Node 0 becomes inconsistent: permanent inactivity keeps it out ...
    x[0] = [0.0, 1.0]
    kept = update_active_set(step.active, x, indptr, indices, cfg, seed=0, round_index=1)
    assert 0 not in kept.active
    # ... the reactivation option recomputes the frontier over all candidates.
    re = update_active_set(
        step.active,
        x,
        indptr,
        indices,
        FeedbackConfig(reactivate=True),
        seed=0,
        round_index=1,
        ever_inactive=ever,
    )
    assert set(re.active) == set(kept.active) | {0} and re.reactivated == 1
    assert re.evaluated == 45
    # Stop ratio: 42 of 45 survive (0.93 > 0.7) -> stop; 41 of 45 (0.91 < 0.95) go on.
    assert update_active_set(
        active, x, indptr, indices, FeedbackConfig(stop_ratio=0.7), seed=0, round_index=0
    ).stop
    x[0] = [1.0, 0.0]
    assert not update_active_set(
        active, x, indptr, indices, FeedbackConfig(stop_ratio=0.95), seed=0, round_index=0
    ).stop
    # Warm-up rounds do not prune; an empty frontier stops.
    warm = update_active_set(
        active, x, indptr, indices, FeedbackConfig(warmup_rounds=2), seed=0, round_index=1
    )
    assert warm.active.size == 45 and warm.evaluated == 0
    x[:] = [1.0, 0.0]
    assert update_active_set(active, x, indptr, indices, cfg, seed=0, round_index=0).stop


def test_config_errors():
    with pytest.raises(ValueError, match="num_neighbors must be >= 1"):
        FeedbackConfig(num_neighbors=0)
    with pytest.raises(ValueError, match="stop_ratio must be in"):
        FeedbackConfig(stop_ratio=1.5)
    with pytest.raises(ValueError, match="unknown method 'line'"):
        EmbedConfig(method="line")
    with pytest.raises(ValueError, match="method 'node2vec' needs walk.kind='node2vec'"):
        EmbedConfig(method="node2vec")
    with pytest.raises(ValueError, match="has no edge"):
        embed(EmbedConfig(), Graph.from_edges([], [], num_nodes=3, symmetrize=True))


@pytest.mark.parametrize("num_parts", [2])
def test_round_log_of_felog_and_baseline(num_parts):
    g = power_law()
    walk = WalkConfig(walk_length=8, walks_per_node=2)
    # mu = 0.3 prunes quickly on this graph, so the loop ends before max rounds.
    fb = EmbedConfig("felog", walk, SGNS, FeedbackConfig(mu=0.3), rounds=6, seed=1)
    res = embed(fb.replace(parts=num_parts), g)
    logs = res.rounds
    assert logs[0].active == int(np.count_nonzero(g.out_degree()))
    for r, log in enumerate(logs):
        assert log.round == r and log.walks == 2 * log.active and log.tokens <= 8 * log.walks
        assert log.next_active <= log.active and log.evaluated == log.active
    for a, b in zip(logs, logs[1:], strict=False):
        assert b.active == a.next_active
    assert res.stop_reason in ("active_set_empty", "max_rounds")
    assert (res.stop_reason == "active_set_empty") == (logs[-1].next_active == 0)
    assert res.syn0.shape == (g.num_nodes, 8) and np.isfinite(res.syn0).all()
    base = embed(fb.replace(method="deepwalk", parts=num_parts), g)
    assert len(base.rounds) == 6 and base.stop_reason == "max_rounds"
    assert all(b.active == logs[0].active for b in base.rounds)
    assert base.tokens > res.tokens


def test_centering_removes_the_common_component():
    """Skip-gram vectors share a large common direction early on; raw cosines are then near 1
    for any pair, centred ones are not."""
    g = _clique_and_star()
    indptr, indices = out_csr(g)
    rng = np.random.default_rng(0)
    x = (np.array([5.0, 5.0, 5.0, 5.0]) + 0.3 * rng.standard_normal((46, 4))).astype(np.float32)
    nodes = np.arange(45)
    raw = neighbour_consistency(x, indptr, indices, nodes, 30, seed=0)
    cen = neighbour_consistency(x, indptr, indices, nodes, 30, seed=0, center=True)
    assert raw.min() > 0.95 and abs(cen.mean()) < 0.2
    step = update_active_set(
        nodes, x, indptr, indices, FeedbackConfig(center=True), seed=0, round_index=0
    )
    assert step.active.size > 30  # while the raw rule retires every node:
    assert (
        update_active_set(
            nodes, x, indptr, indices, FeedbackConfig(), seed=0, round_index=0
        ).active.size
        == 0
    )
