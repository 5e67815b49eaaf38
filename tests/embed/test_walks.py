"""Random walks: valid paths, padding, dead ends, reproducibility, transition probabilities."""

from types import SimpleNamespace

import numba
import numpy as np
import pytest
from scipy import stats

from jaxgraph.embed import walks as walks_module
from jaxgraph.embed.walks import (
    PAD,
    WalkConfig,
    Walks,
    check_node_ids,
    out_csr,
    random_walks,
    walk_throughput,
)
from jaxgraph.graph import Graph

from graph_cases import ALL_CASES, directed, power_law


def _edge_set(graph: Graph) -> set[tuple[int, int]]:
    src, dst = graph.edges()
    return set(zip(src.tolist(), dst.tolist(), strict=True))


@pytest.mark.parametrize("kind", ["deepwalk", "node2vec"])
@pytest.mark.parametrize("case", ["isolated_nodes", "self_loops", "directed", "power_law"])
def test_walks_are_paths_of_out_edges_padded_after_their_length(case, kind):
    g = ALL_CASES[case]()
    cfg = WalkConfig(kind=kind, walk_length=12, walks_per_node=3, p=0.5, q=2.0)
    starts = np.arange(g.num_nodes)
    w = random_walks(g, starts, cfg, seed=1)
    assert w.nodes.shape == (3 * g.num_nodes, 12) and w.nodes.dtype == np.int32
    np.testing.assert_array_equal(w.nodes[:, 0], np.tile(starts, 3))
    edges = _edge_set(g)
    out_deg = g.out_degree()
    for row, n in zip(w.nodes, w.lengths, strict=True):
        assert 1 <= n <= 12
        assert np.all(row[n:] == PAD)
        for u, v in zip(row[: n - 1], row[1:n], strict=True):
            assert (int(u), int(v)) in edges
        if n < 12:  # only a dead end stops a walk early
            assert out_deg[row[n - 1]] == 0


def test_dead_end_and_isolated_start():
    # 0 -> 1 -> 2, node 2 has no out-edge, node 3 is isolated.
    g = Graph.from_edges([0, 1], [1, 2], num_nodes=4, symmetrize=False)
    w = random_walks(g, [0, 3], WalkConfig(walk_length=6), seed=0)
    np.testing.assert_array_equal(w.lengths, [3, 1])
    np.testing.assert_array_equal(w.nodes[0], [0, 1, 2, PAD, PAD, PAD])
    assert w.to_lists() == [[0, 1, 2], [3]]


def test_no_node_is_a_sentinel():
    """The public FeLoG trainer cuts walks at the highest-degree node; nothing here does."""
    g = power_law()
    hub = int(np.argmax(g.out_degree()))
    w = random_walks(
        g, np.arange(g.num_nodes), WalkConfig(walk_length=30, walks_per_node=2), seed=0
    )
    visits = [np.flatnonzero(row[:n] == hub) for row, n in zip(w.nodes, w.lengths, strict=True)]
    through = [i for i, v in enumerate(visits) if v.size and v[0] < w.lengths[i] - 1]
    assert through, "some walk must continue after visiting the hub"
    # Undirected: only isolated starts end early, after their first node.
    isolated = g.out_degree()[w.nodes[:, 0]] == 0
    assert np.all(w.lengths[~isolated] == 30) and np.all(w.lengths[isolated] == 1)


@pytest.mark.parametrize("kind", ["deepwalk", "node2vec"])
def test_reproducible_and_thread_count_independent(kind):
    g = power_law()
    cfg = WalkConfig(kind=kind, walk_length=20, walks_per_node=2, p=0.25, q=4.0)
    starts = np.arange(g.num_nodes)
    a = random_walks(g, starts, cfg, seed=7, round_index=3)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        b = random_walks(out_csr(g), starts, cfg, seed=7, round_index=3)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    c = random_walks(g, starts, cfg, seed=7, round_index=4)
    d = random_walks(g, starts, cfg, seed=8, round_index=3)
    assert not np.array_equal(a.nodes, c.nodes) and not np.array_equal(a.nodes, d.nodes)


def test_deepwalk_step_is_uniform_over_neighbours():
    g = power_law()
    v = int(np.argmax(g.out_degree()))
    w = random_walks(g, np.full(4000, v), WalkConfig(walk_length=2, walks_per_node=5), seed=0)
    nbrs = out_csr(g)[1][out_csr(g)[0][v] : out_csr(g)[0][v + 1]]
    counts = np.array([np.sum(w.nodes[:, 1] == u) for u in nbrs])
    assert counts.sum() == w.num_walks
    assert stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize(("p", "q"), [(0.25, 4.0), (4.0, 0.25), (1.0, 1.0)])
def test_node2vec_second_order_transition_matches_the_formula(p, q):
    # t = 0, v = 1; v's neighbours are t (return: 1/p), 2 (also t's neighbour: 1) and 3, 4
    # (two hops from t: 1/q). Walks start at t; those whose first step is v are checked.
    edges = [(0, 1), (1, 2), (1, 3), (1, 4), (0, 2)]
    src, dst = zip(*edges, strict=True)
    g = Graph.from_edges(src, dst, num_nodes=5, symmetrize=True)
    w = random_walks(g, np.zeros(20000, np.int32), WalkConfig("node2vec", 3, 1, p, q), seed=2)
    via_v = w.nodes[:, 1] == 1
    third = w.nodes[via_v, 2]
    weights = {0: 1 / p, 2: 1.0, 3: 1 / q, 4: 1 / q}
    expected = np.array(list(weights.values())) / sum(weights.values())
    counts = np.array([np.sum(third == x) for x in weights])
    assert counts.sum() == third.size
    assert stats.chisquare(counts, expected * third.size).pvalue > 1e-3


def test_node2vec_at_p_q_one_is_deepwalk():
    """Every neighbour weighs 1 at p = q = 1: the walks are DeepWalk's, draw for draw."""
    g = power_law()
    starts = np.arange(g.num_nodes)
    deepwalk = random_walks(g, starts, WalkConfig(walk_length=12, walks_per_node=2), seed=4)
    flat = random_walks(g, starts, WalkConfig("node2vec", 12, 2, 1.0, 1.0), seed=4)
    biased = random_walks(g, starts, WalkConfig("node2vec", 12, 2, 1.0, 2.0), seed=4)
    np.testing.assert_array_equal(flat.nodes, deepwalk.nodes)
    np.testing.assert_array_equal(flat.lengths, deepwalk.lengths)
    assert (biased.nodes != deepwalk.nodes).any()


def test_empty_start_set_and_errors():
    g = directed()
    w = random_walks(g, np.zeros(0, np.int64), WalkConfig(walk_length=5), seed=0)
    assert isinstance(w, Walks) and w.nodes.shape == (0, 5) and w.num_tokens == 0
    with pytest.raises(ValueError, match=r"starts\[1\] = 80 is not a node id in \[0, 80\)"):
        random_walks(g, [0, 80], WalkConfig(), seed=0)
    with pytest.raises(ValueError, match="seed must be non-negative"):
        random_walks(g, [0], WalkConfig(), seed=-1)
    with pytest.raises(ValueError, match="unknown walk kind 'levy'"):
        WalkConfig(kind="levy")
    with pytest.raises(ValueError, match="walk_length must be >= 1"):
        WalkConfig(walk_length=0)
    with pytest.raises(ValueError, match=r"q must be a finite number > 0 \(node2vec\), got 0.0"):
        WalkConfig(kind="node2vec", q=0.0)


def test_check_node_ids_returns_int32_and_names_the_problem():
    ids = check_node_ids(np.array([0, 4, 2], np.int64), 5)
    assert ids.dtype == np.int32 and ids.tolist() == [0, 4, 2]
    assert check_node_ids([], 5).shape == (0,)  # an empty list is float64, and allowed
    with pytest.raises(ValueError, match=r"seeds must be one-dimensional, got shape \(1, 2\)"):
        check_node_ids([[0, 1]], 5, "seeds")
    with pytest.raises(ValueError, match="node ids must be integers, got dtype float64"):
        check_node_ids([0.0, 1.0], 5)
    with pytest.raises(ValueError, match=r"node ids\[2\] = -1 is not a node id in \[0, 5\)"):
        check_node_ids([0, 1, -1, 7], 5)
    with pytest.raises(ValueError, match=r"node ids\[0\] = 5 is not"):
        check_node_ids([5], 5)


def test_walk_throughput_counts_one_walk_per_node_with_out_edges():
    # 0 -> 1 -> 2 -> 0 and 3 -> 0; node 4 has no out-edge: 4 walks of 5 nodes, none cut short.
    g = Graph.from_edges([0, 1, 2, 3], [1, 2, 0, 0], num_nodes=5, symmetrize=False)
    got = walk_throughput(g, WalkConfig(walk_length=5), repeats=2)
    assert set(got) == {"walks", "tokens", "seconds", "walks_per_s", "tokens_per_s"}
    assert got["walks"] == 4.0 and got["tokens"] == 20.0
    assert got["seconds"] > 0
    assert got["walks_per_s"] == pytest.approx(4.0 / got["seconds"])
    assert got["tokens_per_s"] == pytest.approx(20.0 / got["seconds"])


def test_deepwalk_ignores_p_and_q():
    """p and q are node2vec's: a DeepWalk config with other values walks exactly as without."""
    g = power_law()
    starts = np.arange(g.num_nodes)
    plain = random_walks(g, starts, WalkConfig(walk_length=12, walks_per_node=2), seed=4)
    biased = random_walks(g, starts, WalkConfig("deepwalk", 12, 2, 0.25, 4.0), seed=4)
    np.testing.assert_array_equal(biased.nodes, plain.nodes)
    np.testing.assert_array_equal(biased.lengths, plain.lengths)


def test_round_index_defaults_to_the_first_round():
    g = power_law()
    starts = np.arange(g.num_nodes)
    cfg = WalkConfig(walk_length=8)
    default = random_walks(g, starts, cfg, seed=3)
    np.testing.assert_array_equal(
        default.nodes, random_walks(g, starts, cfg, seed=3, round_index=0).nodes
    )
    assert not np.array_equal(
        default.nodes, random_walks(g, starts, cfg, seed=3, round_index=1).nodes
    )


def test_walk_length_one_is_just_the_start_and_walks_per_node_is_checked():
    g = Graph.from_edges([0, 1], [1, 2], num_nodes=4, symmetrize=False)
    w = random_walks(g, [0, 3], WalkConfig(walk_length=1, walks_per_node=2), seed=0)
    assert w.to_lists() == [[0], [3], [0], [3]]
    with pytest.raises(ValueError) as err:
        WalkConfig(walks_per_node=0)
    assert str(err.value) == "walks_per_node must be >= 1, got 0"


def test_to_lists_rejects_lengths_that_do_not_match_the_walks():
    """A length per walk: a batch with fewer lengths than rows fails instead of dropping walks."""
    w = Walks(np.array([[0, 1], [2, PAD]], np.int32), np.array([2], np.int32))
    with pytest.raises(ValueError, match="shorter"):
        w.to_lists()


def _fake_clock(monkeypatch, ticks):
    """Makes walk_throughput's clock return ``ticks`` in turn; more reads than ticks fail."""
    ticks = list(ticks)

    def perf_counter():
        assert ticks, "the clock was read more often than expected"
        return ticks.pop(0)

    monkeypatch.setattr(walks_module, "time", SimpleNamespace(perf_counter=perf_counter))
    return ticks


@pytest.mark.parametrize(
    ("ticks", "best"),
    [
        ([10.0, 13.0, 20.0, 21.0], 1.0),  # repeats take 3 s and 1 s
        ([10.0, 11.0, 20.0, 23.0], 1.0),  # 1 s and 3 s: the faster is the first
    ],
)
def test_walk_throughput_reports_the_fastest_repeat(monkeypatch, ticks, best):
    # 0 -> 1 -> 2 -> 0 and 3 -> 0: 4 walks of 5 nodes every repeat (no dead end reached).
    g = Graph.from_edges([0, 1, 2, 3], [1, 2, 0, 0], num_nodes=5, symmetrize=False)
    left = _fake_clock(monkeypatch, ticks)
    got = walk_throughput(g, WalkConfig(walk_length=5), repeats=2)
    assert left == []  # read twice per repeat
    assert got == {
        "walks": 4.0,
        "tokens": 20.0,
        "seconds": best,
        "walks_per_s": 4.0 / best,
        "tokens_per_s": 20.0 / best,
    }


def test_walk_throughput_walks_seed_zero_once_and_a_new_round_per_repeat(monkeypatch):
    # 0 -> 1..20, 1..10 -> 0, 11..20 are dead ends: every step from 0 ends the walk with
    # probability 1/2, so the token count depends on the draws (seed and round).
    hub = np.zeros(20, np.int64)
    leaves = np.arange(1, 21)
    g = Graph.from_edges(
        np.concatenate([hub, leaves[:10]]),
        np.concatenate([leaves, hub[:10]]),
        num_nodes=21,
        symmetrize=False,
    )
    cfg = WalkConfig(walk_length=9)
    starts = np.arange(11)  # the nodes with out-edges

    def tokens(seed, round_index):
        return random_walks(g, starts, cfg, seed=seed, round_index=round_index).num_tokens

    first, second, other_seed = tokens(0, 0), tokens(0, 1), tokens(1, 0)
    assert len({first, second, other_seed}) == 3  # the draws tell them apart
    _fake_clock(monkeypatch, [0.0, 2.0])  # the default: one repeat
    got = walk_throughput(g, cfg)
    assert got["walks"] == 11.0 and got["tokens"] == first and got["seconds"] == 2.0
    # Two repeats, the second (round 1) the faster: its walks are the ones reported.
    _fake_clock(monkeypatch, [0.0, 2.0, 5.0, 6.0])
    got = walk_throughput(g, cfg, repeats=2)
    assert got["tokens"] == second and got["seconds"] == 1.0
    assert got["tokens_per_s"] == second
    # The first (round 0) the faster: its walks, not the last repeat's, go with its time.
    _fake_clock(monkeypatch, [0.0, 1.0, 5.0, 7.0])
    got = walk_throughput(g, cfg, repeats=2)
    assert got["tokens"] == first and got["seconds"] == 1.0
    assert got["tokens_per_s"] == first
    # A tie keeps the first of the fastest repeats.
    _fake_clock(monkeypatch, [0.0, 1.0, 5.0, 6.0])
    got = walk_throughput(g, cfg, repeats=2)
    assert got["tokens"] == first and got["seconds"] == 1.0
