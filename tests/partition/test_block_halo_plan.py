"""The block-row layout as a halo plan: halo = every other block, verbatim, in ring order."""

import numpy as np
import pytest

from jaxgraph.graph import Graph
from jaxgraph.partition import build_block_row_plan, build_halo_plan, partition_graph
from jaxgraph.partition.blockhalo import build_block_halo_plan
from jaxgraph.partition.halo import HaloPlan

from graph_cases import ALL_CASES, random_graph


def _aggregate(plan: HaloPlan, x: np.ndarray, norm: str) -> np.ndarray:
    """Per device: halo = the other blocks in ring order, then Â x over the local edges."""
    p, b = plan.num_parts, plan.num_local_rows
    local = plan.shard_nodes(x)
    out = np.zeros_like(local)
    for d in range(p):
        halo = [local[(d - r) % p] for r in range(1, p)]
        buf = np.concatenate([local[d], *halo])
        w = plan.gcn_edge_weight[d] if norm == "gcn" else plan.mean_edge_weight[d]
        np.add.at(out[d], plan.edge_dst[d], w[:, None] * buf[plan.edge_src[d]])
        if norm == "gcn":
            out[d] += plan.gcn_self_weight[d][:, None] * local[d]
        assert buf.shape[0] == b * p
    return plan.unshard_nodes(out)


def _check(graph: Graph, plan: HaloPlan, parts: np.ndarray) -> None:
    p, b = plan.num_parts, plan.num_local_rows
    ref = build_halo_plan(graph, parts, num_parts=p)
    # Same local rows, central-first order and normalisation as the ordinary halo plan.
    for name in ("parts", "local_index", "num_local", "num_central", "num_edges"):
        np.testing.assert_array_equal(getattr(plan, name), getattr(ref, name), err_msg=name)
    assert b >= ref.num_local_rows
    np.testing.assert_array_equal(plan.local_nodes[:, : ref.num_local_rows], ref.local_nodes)
    assert plan.round_rows == (b,) * (p - 1) and plan.num_halo_rows == (p - 1) * b
    for r in range(1, p):
        np.testing.assert_array_equal(plan.send_idx[r - 1], np.tile(np.arange(b), (p, 1)))
        np.testing.assert_array_equal(plan.send_mask[r - 1], plan.local_mask)
        for d in range(p):
            rows = slice((r - 1) * b, r * b)
            np.testing.assert_array_equal(plan.halo_nodes[d, rows], plan.local_nodes[(d - r) % p])
            np.testing.assert_array_equal(plan.halo_mask[d, rows], plan.local_mask[(d - r) % p])
    assert np.all(np.diff(plan.edge_dst, axis=1) >= 0)
    # Every real edge reads the right node: source buffer row -> global id.
    buf_nodes = np.concatenate([plan.local_nodes, plan.halo_nodes], axis=1)
    buf_mask = np.concatenate([plan.local_mask, plan.halo_mask], axis=1)
    src, dst = graph.edges()
    for d in range(p):
        k = plan.num_edges[d]
        s, t = plan.edge_src[d, :k], plan.edge_dst[d, :k]
        assert np.all(buf_mask[d, s])
        got = sorted(zip(buf_nodes[d, s].tolist(), plan.local_nodes[d, t].tolist(), strict=True))
        sel = parts[dst] == d
        assert got == sorted(zip(src[sel].tolist(), dst[sel].tolist(), strict=True))
    x = graph.features.astype(np.float64)
    for norm in ("gcn", "mean"):
        expect = graph.normalized_adjacency(norm) @ x
        np.testing.assert_allclose(_aggregate(plan, x, norm), expect, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("num_parts", (1, 2, 3, 4, 8))
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_block_plan_matches_global_aggregation(case, num_parts):
    graph = ALL_CASES[case]()
    if num_parts > graph.num_nodes:
        pytest.skip("more parts than nodes")
    parts = partition_graph(graph, num_parts, method="metis", seed=0)
    _check(graph, build_block_halo_plan(graph, parts, num_parts=num_parts), parts)


def test_padding_and_block_row_plan_input():
    graph = random_graph(n=50, avg_deg=4, seed=5)
    parts = partition_graph(graph, 4, method="random", seed=0)
    padded = build_block_halo_plan(graph, parts, pad_multiple=16)
    assert padded.num_local_rows % 16 == 0 and padded.max_edges % 16 == 0
    _check(graph, padded, parts)
    # From a BlockRowPlan: its blocks (contiguous ids here) and its block size.
    rows = build_block_row_plan(graph, 4, pad_multiple=8)
    plan = build_block_halo_plan(graph, rows)
    assert plan.num_local_rows == rows.block_size
    np.testing.assert_array_equal(plan.parts, rows.perm // rows.block_size)
    _check(graph, plan, plan.parts)


def test_empty_part_and_invalid_padding():
    graph = random_graph(n=30, avg_deg=3, seed=1)
    parts = np.repeat([0, 1, 3], 10)  # part 2 empty: its block is all padding
    plan = build_block_halo_plan(graph, parts, num_parts=4)
    assert plan.num_local[2] == 0 and not plan.halo_mask[3, :10].any()
    _check(graph, plan, parts)
    with pytest.raises(ValueError, match="pad_multiple"):
        build_block_halo_plan(graph, parts, pad_multiple=0)
