"""Tests of jaxgraph.partition.partitioners."""

import numpy as np
import pytest

from jaxgraph.partition import METHODS, check_parts, partition_graph, partition_report

from graph_cases import ALL_CASES, random_graph, two_cliques_bridge

PARTS = (1, 2, 4, 8)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_parts", PARTS)
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_partition_is_valid(case, num_parts, method):
    graph = ALL_CASES[case]()
    parts = partition_graph(graph, num_parts, method=method, seed=1)
    assert parts.dtype == np.int32
    assert parts.shape == (graph.num_nodes,)
    assert parts.min() >= 0 and parts.max() < num_parts
    if method != "metis":
        sizes = np.bincount(parts, minlength=num_parts)
        assert sizes.max() - sizes.min() <= 1


def test_single_part_skips_metis(monkeypatch):
    import pymetis

    def boom(*args, **kwargs):
        raise AssertionError("METIS must not run for one part")

    monkeypatch.setattr(pymetis, "part_graph", boom)
    graph = random_graph(50, 4.0, seed=3)
    for method in METHODS:
        np.testing.assert_array_equal(partition_graph(graph, 1, method=method), 0)


def test_too_many_parts_names_both_numbers():
    graph = two_cliques_bridge()  # 24 nodes
    with pytest.raises(ValueError, match=r"25.*24|24.*25"):
        partition_graph(graph, 25)
    assert partition_graph(graph, 24, method="random").tolist() != []  # P == N is fine


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_invalid_num_parts(bad):
    with pytest.raises(ValueError, match="num_parts"):
        partition_graph(two_cliques_bridge(), bad)


def test_invalid_method_lists_methods():
    with pytest.raises(ValueError, match="metis, random, contiguous"):
        partition_graph(two_cliques_bridge(), 2, method="spectral")


def test_random_is_seeded():
    graph = random_graph(100, 4.0, seed=0)
    a = partition_graph(graph, 4, method="random", seed=5)
    b = partition_graph(graph, 4, method="random", seed=5)
    c = partition_graph(graph, 4, method="random", seed=6)
    np.testing.assert_array_equal(a, b)
    assert np.any(a != c)


def test_contiguous_blocks():
    graph = random_graph(30, 3.0, seed=0)
    parts = partition_graph(graph, 4, method="contiguous")
    assert np.all(np.diff(parts) >= 0)
    np.testing.assert_array_equal(np.bincount(parts), [8, 7, 8, 7])


def test_metis_is_deterministic_for_a_seed():
    graph = ALL_CASES["power_law"]()
    a = partition_graph(graph, 4, method="metis", seed=3)
    b = partition_graph(graph, 4, method="metis", seed=3)
    np.testing.assert_array_equal(a, b)


def test_metis_cuts_only_the_bridge():
    graph = two_cliques_bridge()
    parts = partition_graph(graph, 2, method="metis")
    assert partition_report(graph, parts).edge_cut == 2  # the bridge, both directions
    # The cliques are the even and the odd ids.
    assert len(set(parts[0::2].tolist())) == 1 and len(set(parts[1::2].tolist())) == 1


@pytest.mark.parametrize("case", ["power_law", "random", "random_directed", "self_loops"])
def test_metis_cuts_less_than_random(case):
    graph = ALL_CASES[case]()
    metis = partition_report(graph, partition_graph(graph, 4, method="metis"))
    rand = partition_report(graph, partition_graph(graph, 4, method="random"))
    assert metis.edge_cut < rand.edge_cut


def test_check_parts():
    parts, p = check_parts(np.array([0, 2, 2, 0]), 4)
    assert p == 3 and parts.dtype == np.int32
    assert check_parts(np.array([0, 1, 1, 0]), 4, num_parts=5)[1] == 5
    with pytest.raises(ValueError, match="shape"):
        check_parts(np.zeros(3, int), 4)
    with pytest.raises(ValueError, match=r"parts\[1\] = 3"):
        check_parts(np.array([0, 3, 1, 0]), 4, num_parts=3)
    with pytest.raises(ValueError, match=r"parts\[2\] = -1"):
        check_parts(np.array([0, 1, -1, 0]), 4)
    with pytest.raises(ValueError, match="integer"):
        check_parts(np.array([0.0, 1.0, 1.0, 0.0]), 4)


def test_metis_runs_in_a_child_process_once_jax_distributed_is_up(monkeypatch):
    """METIS draws from the C library's rand(), one state per process, and the threads of
    JAX's distributed runtime draw from it too: in a 2-process run on a loaded host, process 0
    got a different partition from process 1 in 3 of 9 runs. Once jax.distributed is
    initialized, METIS runs in a child process of its own, with the same result as alone."""
    from jaxgraph.partition import partitioners

    assert not partitioners._rand_is_shared()  # this test process: no distributed runtime
    calls = []
    in_child = partitioners._metis_in_child

    def spy(*args):
        calls.append(args[2:])
        return in_child(*args)

    monkeypatch.setattr(partitioners, "_metis_in_child", spy)
    for graph, num_parts in (
        (random_graph(n=400, avg_deg=8, seed=5), 8),
        (two_cliques_bridge(), 2),
    ):
        expect = partition_graph(graph, num_parts, method="metis", seed=1)
        assert not calls
        with monkeypatch.context() as m:
            m.setattr(partitioners, "_rand_is_shared", lambda: True)
            parts = partition_graph(graph, num_parts, method="metis", seed=1)
        assert calls.pop() == (num_parts, 1)
        np.testing.assert_array_equal(parts, expect)
