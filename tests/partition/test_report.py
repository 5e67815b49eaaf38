"""Tests of jaxgraph.partition.report against dense brute-force references."""

import numpy as np
import pytest

from jaxgraph.partition import build_halo_plan, partition_graph, partition_report

from graph_cases import ALL_CASES, random_graph, two_cliques_bridge


def _dense_reference(graph, parts, num_parts):
    """Pair volume and remote ratio from dense matrices.

    ``A[v, u] = 1`` for an edge ``u -> v``; ``M[v, p] = 1`` when ``v`` is on part ``p``.
    """
    a = graph.adjacency().toarray() > 0
    m = np.eye(num_parts, dtype=bool)[parts]
    # needs[u, j]: node u has an out-edge to a node of part j.
    needs = (a.T.astype(int) @ m.astype(int)) > 0
    pair = m.T.astype(int) @ needs.astype(int)
    np.fill_diagonal(pair, 0)
    # in_nb[p, u]: u is an in-neighbour of some node of part p.
    in_nb = (m.T.astype(int) @ a.astype(int)) > 0
    remote = in_nb & (parts[None, :] != np.arange(num_parts)[:, None])
    total = in_nb.sum(1)
    ratio = np.where(total > 0, remote.sum(1) / np.maximum(total, 1), 0.0)
    return pair, ratio


@pytest.mark.parametrize("num_parts", [1, 2, 4, 8])
@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_report_matches_dense_reference(case, method, num_parts):
    graph = ALL_CASES[case]()
    parts = partition_graph(graph, num_parts, method=method)
    rep = partition_report(graph, parts, num_parts=num_parts)
    pair, ratio = _dense_reference(graph, parts, num_parts)

    assert rep.num_parts == num_parts and rep.num_nodes == graph.num_nodes
    np.testing.assert_array_equal(rep.sizes, np.bincount(parts, minlength=num_parts))
    src, dst = graph.edges()
    assert rep.edge_cut == int(np.sum(parts[src] != parts[dst]))
    if graph.is_symmetric():
        assert rep.edge_cut_undirected * 2 == rep.edge_cut
    else:
        assert rep.edge_cut_undirected is None
    assert rep.balance == pytest.approx(rep.sizes.max() / rep.sizes.mean())
    np.testing.assert_array_equal(rep.pair_volume, pair)
    np.testing.assert_allclose(rep.remote_ratio, ratio)

    # Ring payloads: round r pads to the largest d -> (d + r) % P volume.
    assert rep.round_rows.shape == (num_parts - 1,)
    for r in range(1, num_parts):
        vols = [pair[d, (d + r) % num_parts] for d in range(num_parts)]
        assert rep.round_rows[r - 1] == max(vols)
        assert rep.round_useful_rows[r - 1] == sum(vols)
    assert rep.ring_useful_rows == rep.halo_rows == pair.sum()
    assert rep.ring_padded_rows == num_parts * rep.round_rows.sum() >= rep.ring_useful_rows
    assert 0.0 <= rep.ring_efficiency <= 1.0

    # The report and the halo plan agree on the schedule.
    plan = build_halo_plan(graph, parts, num_parts=num_parts)
    assert tuple(rep.round_rows.tolist()) == plan.round_rows
    assert rep.ring_useful_rows == plan.useful_rows
    assert rep.ring_padded_rows == plan.num_parts * plan.payload_rows


def test_two_cliques_metis_volume():
    graph = two_cliques_bridge()
    rep = partition_report(graph, partition_graph(graph, 2))
    np.testing.assert_array_equal(rep.pair_volume, [[0, 1], [1, 0]])
    np.testing.assert_array_equal(rep.round_rows, [1])
    assert rep.edge_cut == 2 and rep.edge_cut_undirected == 1
    # The in-neighbours of a clique are its own 12 nodes plus the far end of the bridge.
    assert rep.remote_ratio.max() == pytest.approx(1 / 13)


def test_empty_parts_and_format():
    graph = random_graph(40, 4.0, seed=2)
    parts = np.where(np.arange(40) < 20, 0, 2)  # part 1 and part 3 are empty
    rep = partition_report(graph, parts, num_parts=4)
    np.testing.assert_array_equal(rep.sizes, [20, 0, 20, 0])
    assert rep.balance == pytest.approx(2.0)
    assert rep.remote_ratio[1] == 0.0 and rep.remote_ratio[3] == 0.0
    assert rep.pair_volume[:, [1, 3]].sum() == 0 and rep.pair_volume[[1, 3]].sum() == 0
    text = rep.format()
    assert "edge cut" in text and "ring schedule (3 rounds)" in text and "pair volume" in text
    assert str(rep) == text


def test_single_part_report():
    graph = random_graph(30, 3.0, seed=1)
    rep = partition_report(graph, np.zeros(30, np.int32))
    assert rep.num_parts == 1 and rep.edge_cut == 0 and rep.halo_rows == 0
    assert rep.round_rows.shape == (0,) and rep.ring_efficiency == 1.0
    np.testing.assert_array_equal(rep.remote_ratio, [0.0])
    assert "ring schedule" not in rep.format()


def test_save_heatmap(tmp_path):
    graph = ALL_CASES["power_law"]()
    rep = partition_report(graph, partition_graph(graph, 4))
    path = tmp_path / "pairs.png"
    rep.save_heatmap(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
