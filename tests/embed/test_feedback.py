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
from jaxgraph.embed.sgns import SkipGramConfig
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


def _pair_csr():
    """Nodes 0 - 1 joined by one edge, node 2 isolated."""
    return out_csr(Graph.from_edges([0], [1], num_nodes=3, symmetrize=True))


def test_psi_is_computed_in_float64_from_float32_vectors():
    indptr, indices = _pair_csr()
    x = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]], np.float32)
    psi = neighbour_consistency(x, indptr, indices, [0, 1], 5, seed=0)
    assert psi.dtype == np.float64
    np.testing.assert_allclose(psi, [0.5**0.5, 0.5**0.5], rtol=1e-14)  # cos 45 degrees
    # Vectors are read as float32, whatever their dtype.
    x64 = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_array_equal(
        neighbour_consistency(x64, indptr, indices, [0, 1], 5, seed=0, center=True),
        neighbour_consistency(
            x64.astype(np.float32), indptr, indices, [0, 1], 5, seed=0, center=True
        ),
    )


def test_centering_subtracts_each_column_mean():
    """Column means (1, 2): node 0 (2, 0) -> (1, -2), node 1 (0, 2) -> (-1, 0); their cosine is
    -1 / sqrt(5). The centred vectors are float32, as uncentred ones are."""
    indptr, indices = _pair_csr()
    x = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 4.0]], np.float32)
    psi = neighbour_consistency(x, indptr, indices, [0, 1], 5, seed=0, center=True)
    np.testing.assert_allclose(psi, [-(0.2**0.5)] * 2, rtol=1e-6)
    y = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32) + 3
    mean = y.mean(axis=0, dtype=np.float64).astype(np.float32)
    np.testing.assert_array_equal(
        neighbour_consistency(y, indptr, indices, [0, 1], 5, seed=0, center=True),
        neighbour_consistency(y - mean, indptr, indices, [0, 1], 5, seed=0),
    )


def test_centering_subtracts_the_exact_mean():
    """Column 0 holds 1e8, 1, -1e8: its mean is 1/3, which a float32 running sum loses
    (1e8 + 1 rounds to 1e8). Centred, node 1 is (2/3, 2/3) and node 0 is almost (1e8, 0):
    their cosine is 1 / sqrt(2)."""
    indptr, indices = _pair_csr()
    x = np.array([[1e8, 0.0], [1.0, 1.0], [-1e8, 0.0]], np.float32)
    psi = neighbour_consistency(x, indptr, indices, [1], 5, seed=0, center=True)
    np.testing.assert_allclose(psi, [0.5**0.5], rtol=1e-6)


def test_psi_equal_to_mu_retires_a_node():
    """Eq. 5 keeps ``Psi < mu``: orthogonal neighbours give Psi = 0, which mu = 0 retires."""
    indptr, indices = _pair_csr()
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    step = update_active_set(
        [0, 1], x, indptr, indices, FeedbackConfig(mu=0.0), seed=0, round_index=0
    )
    assert step.active.size == 0 and step.stop and step.evaluated == 2
    assert step.psi_mean == 0.0 and step.reactivated == 0  # no ever_inactive: nothing counted
    # Parallel neighbours give Psi = 1, which mu = 1 retires as well.
    x[1] = [2.0, 0.0]
    step = update_active_set(
        [0, 1], x, indptr, indices, FeedbackConfig(mu=1.0), seed=0, round_index=0
    )
    assert step.active.size == 0 and step.psi_mean == 1.0
    # Psi = 0 below mu = 1: both stay.
    x[1] = [0.0, 1.0]
    step = update_active_set(
        [0, 1], x, indptr, indices, FeedbackConfig(mu=1.0), seed=0, round_index=0
    )
    np.testing.assert_array_equal(step.active, [0, 1])
    assert step.active.dtype == np.int32 and step.reactivated == 0 and not step.stop


def test_empty_frontier_has_no_mean_and_stops():
    indptr, indices = _pair_csr()
    x = np.ones((3, 2), np.float32)
    step = update_active_set([], x, indptr, indices, FeedbackConfig(), seed=0, round_index=0)
    assert step.active.size == 0 and step.evaluated == 0 and step.stop
    assert np.isnan(step.psi_mean)


def test_config_bounds_are_inclusive_where_documented():
    """mu in [-1, 1], num_neighbors >= 1, stop_ratio in (0, 1], warmup_rounds >= 0."""
    for ok in (
        dict(mu=1.0),
        dict(mu=-1.0),
        dict(num_neighbors=1),
        dict(stop_ratio=1.0),
        dict(warmup_rounds=0),
    ):
        FeedbackConfig(**ok)
    for bad, match in (
        (dict(mu=1.01), "mu must lie"),
        (dict(mu=-1.01), "mu must lie"),
        (dict(stop_ratio=0.0), "stop_ratio must be in"),
        (dict(warmup_rounds=-1), "warmup_rounds must be >= 0"),
    ):
        with pytest.raises(ValueError, match=match):
            FeedbackConfig(**bad)


def test_neighbour_samples_follow_the_round_index():
    """The star centre has 40 leaves, 3 of them parallel to it, and samples 30: Psi counts the
    parallel leaves drawn, which changes from round to round; round 0 is the default."""
    g = _clique_and_star()
    indptr, indices = out_csr(g)
    x = np.zeros((46, 2), np.float32)
    x[4] = [1.0, 0.0]
    x[5:45] = [0.0, 1.0]
    x[[7, 20, 33]] = [1.0, 0.0]
    psi = [
        neighbour_consistency(x, indptr, indices, [4], 30, seed=0, round_index=r)[0]
        for r in range(8)
    ]
    r = next(r for r in range(1, 8) if psi[r] != psi[0])  # a round that drew another sample
    assert neighbour_consistency(x, indptr, indices, [4], 30, seed=0)[0] == psi[0]
    step = update_active_set(
        [4], x, indptr, indices, FeedbackConfig(num_neighbors=30), seed=0, round_index=r
    )
    assert step.psi_mean == psi[r]


def test_warmup_round_keeps_the_frontier_and_reports_nothing():
    indptr, indices = _pair_csr()
    x = np.ones((3, 2), np.float32)
    cfg = FeedbackConfig(warmup_rounds=1)
    warm = update_active_set([0, 1], x, indptr, indices, cfg, seed=0, round_index=0)
    np.testing.assert_array_equal(warm.active, [0, 1])
    assert warm.active.dtype == np.int32
    assert warm.evaluated == 0 and warm.reactivated == 0 and np.isnan(warm.psi_mean)
    assert warm.stop is False
    empty = update_active_set([], x, indptr, indices, cfg, seed=0, round_index=0)
    assert empty.stop is True and empty.active.size == 0


def test_stop_ratio_is_strict_and_an_empty_frontier_still_stops():
    """Path 0 - 1 - 2 with node 0 parallel to node 1 (Psi = 1) and node 2 orthogonal (Psi = 0):
    of the active nodes {0, 2} one survives mu = 0.65, a ratio of exactly 1/2."""
    indptr, indices = out_csr(Graph.from_edges([0, 1], [1, 2], num_nodes=3, symmetrize=True))
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)

    def step(**config):
        return update_active_set(
            [0, 2], x, indptr, indices, FeedbackConfig(**config), seed=0, round_index=0
        )

    assert step(stop_ratio=0.4).stop
    half = step(stop_ratio=0.5)
    np.testing.assert_array_equal(half.active, [2])
    assert not half.stop  # 1/2 does not exceed 1/2
    # Nobody survives mu = -1: the empty frontier stops whatever the ratio says.
    assert step(mu=-1.0, stop_ratio=0.5).stop
