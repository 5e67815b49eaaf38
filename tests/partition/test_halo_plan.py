"""Tests of jaxgraph.partition.halo: a NumPy simulation of the ring exchange and aggregation."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxgraph.graph import Graph
from jaxgraph.partition import (
    HaloPlan,
    build_halo_plan,
    partition_graph,
    partition_report,
)
from jaxgraph.partition.halo import split_edges_by_source

from graph_cases import ALL_CASES, random_graph

PARTS = (1, 2, 4, 8)


@functools.cache
def _graph(case) -> Graph:
    return ALL_CASES[case]()


@functools.cache
def _parts(case, num_parts, method) -> np.ndarray:
    return partition_graph(_graph(case), num_parts, method=method, seed=0)


# ---------------------------------------------------------------------- simulation


def _exchange(plan: HaloPlan, local: np.ndarray) -> np.ndarray:
    """What the ring delivers: ``halo[d] = concat_r local[(d-r)%P][send_idx[r-1][(d-r)%P]]``.

    Shapes:
      ``local: [P, Nl, ...]`` -> ``[P, H, ...]``.
    """
    p = plan.num_parts
    halo = []
    for d in range(p):
        rows = [local[(d - r) % p][plan.send_idx[r - 1][(d - r) % p]] for r in range(1, p)]
        halo.append(np.concatenate(rows) if rows else np.zeros((0,) + local.shape[2:], local.dtype))
    return np.stack(halo)


def _aggregate(plan: HaloPlan, x: np.ndarray, kind: str, pad_value: float) -> np.ndarray:
    """Per-device ``segment_sum(w * [x_local | halo][edge_src], edge_dst)`` + self term.

    Pad local rows are filled with ``pad_value`` to show that padding never leaks into results.

    Shapes:
      ``x: f64[N, F]`` (global) -> ``f64[N, F]`` (global, unsharded).
    """
    local = plan.shard_nodes(x)
    local[~plan.local_mask] = pad_value
    halo = _exchange(plan, local)
    out = np.zeros_like(local)
    for d in range(plan.num_parts):
        buf = np.concatenate([local[d], halo[d]])
        if kind == "gcn":
            w = plan.gcn_edge_weight[d].astype(np.float64)
            out[d] = plan.gcn_self_weight[d][:, None] * local[d]
        else:
            w = plan.mean_edge_weight[d].astype(np.float64)
        np.add.at(out[d], plan.edge_dst[d], w[:, None] * buf[plan.edge_src[d]])
    return plan.unshard_nodes(out)


# ---------------------------------------------------------------------- invariants


def _check_plan(graph: Graph, parts: np.ndarray, plan: HaloPlan) -> None:
    n, p = graph.num_nodes, plan.num_parts
    nl, h, em = plan.num_local_rows, plan.num_halo_rows, plan.max_edges
    ids = np.arange(n)
    src, dst = graph.edges()

    # ---- shapes and dtypes
    assert plan.num_nodes == n
    np.testing.assert_array_equal(plan.parts, parts)
    for name, shape, dtype in [
        ("local_nodes", (p, nl), np.int32),
        ("local_mask", (p, nl), bool),
        ("marginal_mask", (p, nl), bool),
        ("num_local", (p,), np.int32),
        ("num_central", (p,), np.int32),
        ("local_index", (n,), np.int32),
        ("halo_nodes", (p, h), np.int32),
        ("halo_mask", (p, h), bool),
        ("edge_src", (p, em), np.int32),
        ("edge_dst", (p, em), np.int32),
        ("edge_mask", (p, em), bool),
        ("num_edges", (p,), np.int32),
        ("gcn_edge_weight", (p, em), np.float32),
        ("gcn_self_weight", (p, nl), np.float32),
        ("mean_edge_weight", (p, em), np.float32),
    ]:
        arr = getattr(plan, name)
        assert arr.shape == shape, name
        assert arr.dtype == dtype, name
    assert nl >= max(1, np.bincount(parts, minlength=p).max()) and em >= 1
    assert len(plan.send_idx) == len(plan.send_mask) == len(plan.round_rows) == p - 1
    assert h == sum(plan.round_rows)
    for r in range(1, p):
        s_r = plan.round_rows[r - 1]
        assert plan.send_idx[r - 1].shape == (p, s_r) and plan.send_idx[r - 1].dtype == np.int32
        assert plan.send_mask[r - 1].shape == (p, s_r)

    # ---- local rows
    sizes = np.bincount(parts, minlength=p)
    np.testing.assert_array_equal(plan.num_local, sizes)
    np.testing.assert_array_equal(plan.local_mask, np.arange(nl)[None, :] < sizes[:, None])
    np.testing.assert_array_equal(plan.local_nodes[parts, plan.local_index], ids)
    assert np.all(plan.local_nodes[~plan.local_mask] == 0)
    marginal = np.zeros(n, bool)
    marginal[dst[parts[src] != parts[dst]]] = True
    np.testing.assert_array_equal(plan.num_central, np.bincount(parts[~marginal], minlength=p))
    rows = np.arange(nl)[None, :]
    np.testing.assert_array_equal(
        plan.marginal_mask, (rows >= plan.num_central[:, None]) & (rows < sizes[:, None])
    )
    np.testing.assert_array_equal(plan.marginal_mask[parts, plan.local_index], marginal)
    for d in range(p):
        c, k = plan.num_central[d], plan.num_local[d]
        assert np.all(np.diff(plan.local_nodes[d, :c]) > 0)
        assert np.all(np.diff(plan.local_nodes[d, c:k]) > 0)

    # ---- ring schedule and halo layout
    rep = partition_report(graph, parts, num_parts=p)
    needed = {}  # (owner, needer) -> sorted global ids
    cut = parts[src] != parts[dst]
    for i in range(p):
        for j in range(p):
            if i != j:
                sel = cut & (parts[src] == i) & (parts[dst] == j)
                needed[i, j] = np.unique(src[sel])
    for r in range(1, p):
        idx, mask = plan.send_idx[r - 1], plan.send_mask[r - 1]
        assert np.all(idx[~mask] == 0)
        counts = mask.sum(1)
        assert plan.round_rows[r - 1] >= counts.max(initial=0)
        for d in range(p):
            k = counts[d]
            assert np.all(mask[d, :k]) and not np.any(mask[d, k:])
            sent = plan.local_nodes[d, idx[d, :k]]
            # Every ordered pair is served exactly once, in this round, by ascending id.
            np.testing.assert_array_equal(sent, needed[d, (d + r) % p])
            assert k == rep.pair_volume[d, (d + r) % p]
            assert np.all(plan.local_mask[d, idx[d, :k]])
    arrived_ids = _exchange(plan, plan.local_nodes)
    arrived_mask = _exchange(plan, plan.local_mask)
    sent_mask = np.stack(
        [
            np.concatenate(
                [plan.send_mask[r - 1][(d - r) % p] for r in range(1, p)] or [np.zeros(0, bool)]
            )
            for d in range(p)
        ]
    )
    np.testing.assert_array_equal(plan.halo_mask, sent_mask)
    assert np.all(arrived_mask[plan.halo_mask])
    np.testing.assert_array_equal(plan.halo_nodes[plan.halo_mask], arrived_ids[plan.halo_mask])
    assert np.all(plan.halo_nodes[~plan.halo_mask] == 0)
    for d in range(p):
        got = plan.halo_nodes[d][plan.halo_mask[d]]
        remote_in = np.unique(src[cut & (parts[dst] == d)])
        np.testing.assert_array_equal(np.sort(got), remote_in)  # each needed node exactly once
    assert plan.useful_rows == rep.halo_rows

    # ---- edges
    np.testing.assert_array_equal(plan.num_edges, np.bincount(parts[dst], minlength=p))
    np.testing.assert_array_equal(plan.edge_mask, np.arange(em)[None, :] < plan.num_edges[:, None])
    pad = ~plan.edge_mask
    assert np.all(plan.edge_src[pad] == 0) and np.all(plan.edge_dst[pad] == nl - 1)
    assert np.all(plan.gcn_edge_weight[pad] == 0) and np.all(plan.mean_edge_weight[pad] == 0)
    assert np.all(plan.gcn_self_weight[~plan.local_mask] == 0)
    assert np.all(np.diff(plan.edge_dst, axis=1) >= 0)  # indices_are_sorted holds
    buf_nodes = np.concatenate([plan.local_nodes, plan.halo_nodes], axis=1)
    buf_valid = np.concatenate([plan.local_mask, plan.halo_mask], axis=1)
    ew, sw = graph.gcn_norm()
    mw = graph.mean_norm()
    edge_key = dst.astype(np.int64) * n + src
    for d in range(p):
        k = plan.num_edges[d]
        s, t = plan.edge_src[d, :k], plan.edge_dst[d, :k]
        assert np.all((s >= 0) & (s < nl + h)) and np.all((t >= 0) & (t < nl))
        order = np.lexsort((s, t))
        np.testing.assert_array_equal(order, np.arange(k))  # sorted by (dst, src)
        assert np.all(buf_valid[d, s]) and np.all(plan.local_mask[d, t])
        # Central rows only read local rows.
        assert np.all(s[~plan.marginal_mask[d, t]] < nl)
        assert np.all(plan.marginal_mask[d, t[s >= nl]])
        g_src, g_dst = buf_nodes[d, s], plan.local_nodes[d, t]
        assert np.all(parts[g_dst] == d)
        assert np.all((s < nl) == (parts[g_src] == d))
        at = np.searchsorted(edge_key, g_dst.astype(np.int64) * n + g_src)
        np.testing.assert_array_equal(edge_key[at], g_dst.astype(np.int64) * n + g_src)
        np.testing.assert_array_equal(plan.gcn_edge_weight[d, :k], ew[at])
        np.testing.assert_array_equal(plan.mean_edge_weight[d, :k], mw[at])
    np.testing.assert_array_equal(plan.gcn_self_weight[parts, plan.local_index], sw)
    assert plan.num_edges.sum() == graph.num_edges

    # ---- sizes
    assert plan.payload_rows == sum(plan.round_rows)
    assert plan.bytes_moved(16) == p * sum(plan.round_rows) * 16 * 4
    assert plan.bytes_moved(16, itemsize=2) == p * sum(plan.round_rows) * 16 * 2
    assert plan.useful_bytes(16) == rep.halo_rows * 16 * 4


def _check_aggregation(graph: Graph, plan: HaloPlan) -> None:
    x = graph.features.astype(np.float64)
    if x.shape[1] == 0:
        x = np.ones((graph.num_nodes, 1))
    for kind in ("gcn", "mean"):
        expected = graph.normalized_adjacency(kind).astype(np.float64) @ x
        got = _aggregate(plan, x, kind, pad_value=1e3)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=kind)


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("num_parts", PARTS)
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_plan_matches_global_aggregation(case, num_parts, method):
    graph = _graph(case)
    parts = _parts(case, num_parts, method)
    plan = build_halo_plan(graph, parts, num_parts=num_parts)
    assert plan.num_parts == num_parts
    _check_plan(graph, parts, plan)
    _check_aggregation(graph, plan)


@pytest.mark.parametrize("case", ["power_law", "directed", "self_loops", "empty_edges"])
def test_padding_invariance(case):
    graph = _graph(case)
    parts = _parts(case, 4, "metis")
    base = build_halo_plan(graph, parts, num_parts=4)
    padded = build_halo_plan(graph, parts, num_parts=4, pad_multiple=8)
    assert padded.num_local_rows % 8 == 0 and padded.max_edges % 8 == 0
    assert all(s % 8 == 0 for s in padded.round_rows)
    assert padded.num_local_rows >= base.num_local_rows
    assert padded.payload_rows >= base.payload_rows
    assert padded.useful_rows == base.useful_rows
    _check_plan(graph, parts, padded)
    _check_aggregation(graph, padded)
    x = graph.features.astype(np.float64)
    for kind in ("gcn", "mean"):
        np.testing.assert_allclose(
            _aggregate(padded, x, kind, pad_value=-7.0), _aggregate(base, x, kind, pad_value=0.0)
        )


def test_single_part():
    graph = _graph("random")
    plan = build_halo_plan(graph, np.zeros(graph.num_nodes, np.int32))
    assert plan.num_parts == 1 and plan.num_halo_rows == 0
    assert plan.send_idx == () and plan.round_rows == () and plan.halo_nodes.shape == (1, 0)
    assert plan.num_central[0] == graph.num_nodes and not plan.marginal_mask.any()
    np.testing.assert_array_equal(plan.local_nodes[0], np.arange(graph.num_nodes))
    assert plan.bytes_moved(8) == 0 and plan.useful_rows == 0
    _check_plan(graph, plan.parts, plan)
    _check_aggregation(graph, plan)


def test_empty_parts():
    graph = random_graph(40, 4.0, seed=2)
    parts = np.where(np.arange(40) % 3 == 0, 1, 3)  # parts 0, 2 and 4 are empty
    plan = build_halo_plan(graph, parts, num_parts=5)
    np.testing.assert_array_equal(plan.num_local, np.bincount(parts, minlength=5))
    assert plan.num_edges[0] == 0 and not plan.local_mask[0].any()
    _check_plan(graph, parts, plan)
    _check_aggregation(graph, plan)
    # Without num_parts the trailing empty part is dropped.
    assert build_halo_plan(graph, parts).num_parts == 4


def test_all_nodes_on_one_of_several_parts():
    graph = _graph("two_cliques_bridge")
    parts = np.full(graph.num_nodes, 2)
    plan = build_halo_plan(graph, parts, num_parts=4)
    assert plan.round_rows == (0, 0, 0) and plan.num_halo_rows == 0
    assert all(idx.shape == (4, 0) for idx in plan.send_idx)
    _check_plan(graph, parts, plan)
    _check_aggregation(graph, plan)


def test_shard_unshard_roundtrip():
    graph = _graph("power_law")
    plan = build_halo_plan(graph, _parts("power_law", 8, "random"), num_parts=8)
    x = np.arange(graph.num_nodes * 6, dtype=np.float32).reshape(graph.num_nodes, 3, 2)
    sx = plan.shard_nodes(x)
    assert sx.shape == (8, plan.num_local_rows, 3, 2)
    assert np.all(sx[~plan.local_mask] == 0)
    np.testing.assert_array_equal(plan.unshard_nodes(sx), x)
    m = plan.shard_nodes(graph.train_mask)
    assert m.dtype == bool and not m[~plan.local_mask].any()
    np.testing.assert_array_equal(plan.unshard_nodes(m), graph.train_mask)
    np.testing.assert_array_equal(plan.shard_nodes(np.arange(graph.num_nodes)), plan.local_nodes)
    with pytest.raises(ValueError, match="leading dimension"):
        plan.shard_nodes(x[:-1])
    with pytest.raises(ValueError, match="P=8"):
        plan.unshard_nodes(sx[:, :-1])


def test_invalid_inputs():
    graph = _graph("random")
    with pytest.raises(ValueError, match="shape"):
        build_halo_plan(graph, np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="not a part id"):
        build_halo_plan(graph, np.full(graph.num_nodes, 4), num_parts=2)
    with pytest.raises(ValueError, match="pad_multiple"):
        build_halo_plan(graph, np.zeros(graph.num_nodes, np.int32), pad_multiple=0)


@settings(max_examples=25, deadline=None, database=None)
@given(
    n=st.integers(1, 25),
    num_parts=st.integers(1, 6),
    directed=st.booleans(),
    keep_loops=st.booleans(),
    pad=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_small_graphs(n, num_parts, directed, keep_loops, pad, seed):
    rng = np.random.default_rng(seed)
    num_edges = int(rng.integers(0, 3 * n + 1))
    graph = Graph.from_edges(
        rng.integers(0, n, num_edges),
        rng.integers(0, n, num_edges),
        num_nodes=n,
        symmetrize=not directed,
        self_loops="keep" if keep_loops else "remove",
        features=rng.standard_normal((n, 3)).astype(np.float32),
    )
    parts = rng.integers(0, num_parts, n)  # any part may be empty
    plan = build_halo_plan(graph, parts, num_parts=num_parts, pad_multiple=pad)
    _check_plan(graph, parts, plan)
    _check_aggregation(graph, plan)


def test_one_node_per_part_has_one_local_row_and_halo_offsets_add_round_rows():
    # 0 <-> 1 <-> 2 on three parts: each part holds one node (Nl = 1) and needs its neighbours.
    g = Graph.from_edges([0, 1], [1, 2], num_nodes=3, symmetrize=True)
    plan = build_halo_plan(g, np.array([0, 1, 2]))
    assert plan.num_local_rows == 1
    assert plan.round_rows == (1, 1)  # round 1: 0 -> 1, 1 -> 2; round 2: 2 -> 1 (2 = 1 + 2 mod 3)
    assert plan.halo_offsets() == (0, 1, 2)
    padded = build_halo_plan(g, np.array([0, 1, 2]), pad_multiple=4)
    assert padded.halo_offsets() == (0, 4, 8) and padded.num_local_rows == 4


def _path5_plan() -> HaloPlan:
    """The path 0 - 1 - 2 - 3 - 4 on parts [0, 0, 1, 1, 1]: Nl = 3, one halo row each way.

    Part 0: rows 0, 1 = nodes 0, 1 (1 is marginal); part 1: rows 0, 1, 2 = nodes 3, 4 (central)
    and 2 (marginal). Device 0's halo row (buffer row 3) is node 2, device 1's is node 1.
    """
    g = Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 4], num_nodes=5, symmetrize=True)
    return build_halo_plan(g, np.array([0, 0, 1, 1, 1]))


def test_split_edges_by_source_by_hand():
    """In-edges as (source row, destination row), sorted by destination then source:
    device 0: (1, 0), (0, 1), (3, 1); device 1: (1, 0), (2, 0), (0, 1), (0, 2), (3, 2).
    Buffer row 3 is the halo row. GCN weights ``1 / sqrt((deg u + 1)(deg v + 1))`` with degrees
    1, 2, 2, 2, 1; mean weights ``1 / in-degree(dst)``."""
    plan = _path5_plan()
    assert plan.num_local_rows == 3 and plan.num_halo_rows == 1
    e = split_edges_by_source(plan)
    a, t = 1 / np.sqrt(6), 1 / 3
    # Local sources: device 0 has 2 edges, padded to El = 4 (source 0, destination Nl - 1 = 2).
    np.testing.assert_array_equal(e.local_src, [[1, 0, 0, 0], [1, 2, 0, 0]])
    np.testing.assert_array_equal(e.local_dst, [[0, 1, 2, 2], [0, 0, 1, 2]])
    np.testing.assert_allclose(e.local_gcn_weight, [[a, a, 0, 0], [a, t, a, t]], rtol=1e-6)
    np.testing.assert_allclose(e.local_mean_weight, [[1, 0.5, 0, 0], [0.5, 0.5, 1, 0.5]], rtol=1e-6)
    np.testing.assert_array_equal(e.num_local_edges, [2, 4])
    # Halo sources: node 2 -> node 1 on device 0, node 1 -> node 2 on device 1, as halo row 0.
    np.testing.assert_array_equal(e.remote_src, [[0], [0]])
    np.testing.assert_array_equal(e.remote_dst, [[1], [2]])
    np.testing.assert_allclose(e.remote_gcn_weight, [[t], [t]], rtol=1e-6)
    np.testing.assert_allclose(e.remote_mean_weight, [[0.5], [0.5]], rtol=1e-6)
    np.testing.assert_array_equal(e.num_remote_edges, [1, 1])
    for name in ("local_src", "local_dst", "remote_src", "remote_dst"):
        assert getattr(e, name).dtype == np.int32
    assert e.local_gcn_weight.dtype == e.remote_mean_weight.dtype == np.float32
    assert e.num_local_edges.dtype == e.num_remote_edges.dtype == np.int32


def test_split_edges_by_source_without_halo_keeps_one_pad_edge():
    """One part: every edge is local; the halo-source list is one pad edge per device."""
    g = Graph.from_edges([0, 1, 2, 3], [1, 2, 3, 4], num_nodes=5, symmetrize=True)
    e = split_edges_by_source(build_halo_plan(g, np.zeros(5, np.int32)))
    np.testing.assert_array_equal(e.num_local_edges, [8])
    assert e.local_src.shape == (1, 8)
    np.testing.assert_array_equal(e.remote_src, [[0]])
    np.testing.assert_array_equal(e.remote_dst, [[4]])  # Nl - 1
    np.testing.assert_array_equal(e.remote_gcn_weight, [[0]])
    np.testing.assert_array_equal(e.remote_mean_weight, [[0]])
    np.testing.assert_array_equal(e.num_remote_edges, [0])


def test_a_single_edge_needs_a_single_edge_slot():
    """Em is the largest local edge count, at least 1: one edge (or none) gives Em = 1."""
    one = Graph.from_edges([0], [1], num_nodes=2, symmetrize=False)
    assert build_halo_plan(one, np.zeros(2, np.int32)).max_edges == 1
    none = Graph.from_edges([], [], num_nodes=2, symmetrize=False)
    assert build_halo_plan(none, np.zeros(2, np.int32)).max_edges == 1
