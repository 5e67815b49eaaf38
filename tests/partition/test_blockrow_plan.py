"""Tests of jaxgraph.partition.blockrow: block-row assembly equals the global product."""

import functools

import numpy as np
import pytest

from jaxgraph.graph import Graph
from jaxgraph.partition import BlockRowPlan, build_block_row_plan, partition_graph

from graph_cases import ALL_CASES, random_graph

PARTS = (1, 2, 4, 8)


@functools.cache
def _graph(case) -> Graph:
    return ALL_CASES[case]()


@functools.cache
def _metis(case, num_parts) -> np.ndarray:
    return partition_graph(_graph(case), num_parts, method="metis")


def _multiply(plan: BlockRowPlan, x: np.ndarray, pad_value: float) -> np.ndarray:
    """``Y_i = sum_j Â_ij @ X_j`` from the padded COO blocks, in float64.

    Pad rows of ``X`` hold ``pad_value`` to show that padding never leaks into results.

    Shapes:
      ``x: [N, F]`` (global) -> ``[N, F]`` (global, unsharded).
    """
    xs = plan.shard_nodes(x.astype(np.float64))
    xs[~plan.row_mask] = pad_value
    y = np.zeros_like(xs)
    for i in range(plan.num_parts):
        for j in range(plan.num_parts):
            vals = plan.block_vals[i, j].astype(np.float64)[:, None]
            np.add.at(y[i], plan.block_rows[i, j], vals * xs[j][plan.block_cols[i, j]])
    return plan.unshard_nodes(y)


def _dense(plan: BlockRowPlan) -> np.ndarray:
    """The padded ``[P * B, P * B]`` matrix assembled from all blocks."""
    p, b = plan.num_parts, plan.block_size
    out = np.zeros((p * b, p * b), np.float64)
    for i in range(p):
        for j in range(p):
            out[i * b : (i + 1) * b, j * b : (j + 1) * b] = plan.dense_block(i, j)
    return out


def _check_plan(graph: Graph, plan: BlockRowPlan, norm: str, parts) -> None:
    n, p, b, z = graph.num_nodes, plan.num_parts, plan.block_size, plan.max_nnz
    assert plan.perm.shape == (n,) and plan.perm.dtype == np.int32
    assert plan.row_nodes.shape == plan.row_mask.shape == (p, b)
    for arr in (plan.block_rows, plan.block_cols, plan.block_vals):
        assert arr.shape == (p, p, z)
    assert plan.block_vals.dtype == np.float32 and plan.block_rows.dtype == np.int32
    assert plan.block_nnz.shape == (p, p) and z >= max(1, plan.block_nnz.max())

    # Placement.
    assert len(np.unique(plan.perm)) == n and plan.perm.min() >= 0 and plan.perm.max() < p * b
    np.testing.assert_array_equal(plan.row_nodes.reshape(-1)[plan.perm], np.arange(n))
    assert plan.row_mask.sum() == n and np.all(plan.row_mask.reshape(-1)[plan.perm])
    assert np.all(plan.row_nodes[~plan.row_mask] == 0)
    if parts is None:
        b0 = -(-n // p)
        assert b >= b0
        np.testing.assert_array_equal(plan.perm // b, np.arange(n) // b0)
        np.testing.assert_array_equal(plan.perm % b, np.arange(n) % b0)
    else:
        assert b >= max(1, np.bincount(parts, minlength=p).max())
        np.testing.assert_array_equal(plan.perm // b, parts)
        for i in range(p):
            assert np.all(np.diff(plan.row_nodes[i][plan.row_mask[i]]) > 0)

    # Entries: real ones first, sorted by (row, col), pads are zeros.
    a = graph.normalized_adjacency(norm)
    assert plan.block_nnz.sum() == a.nnz
    k = np.arange(z)[None, None, :]
    pad = k >= plan.block_nnz[:, :, None]
    assert np.all(plan.block_vals[pad] == 0)
    assert np.all(plan.block_rows[pad] == 0) and np.all(plan.block_cols[pad] == 0)
    assert np.all((plan.block_rows >= 0) & (plan.block_rows < b))
    assert np.all((plan.block_cols >= 0) & (plan.block_cols < b))
    for i in range(p):
        for j in range(p):
            m = plan.block_nnz[i, j]
            key = plan.block_rows[i, j, :m].astype(np.int64) * b + plan.block_cols[i, j, :m]
            assert np.all(np.diff(key) > 0)

    # The assembled padded matrix is Â permuted, with zero pad rows and columns.
    dense = _dense(plan)
    pad_pos = ~plan.row_mask.reshape(-1)
    assert not dense[pad_pos].any() and not dense[:, pad_pos].any()
    np.testing.assert_array_equal(dense[np.ix_(plan.perm, plan.perm)], a.toarray())


def _check_product(graph: Graph, plan: BlockRowPlan, norm: str) -> None:
    x = graph.features if graph.num_features else np.ones((graph.num_nodes, 1), np.float32)
    expected = graph.normalized_adjacency(norm).astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(_multiply(plan, x, pad_value=1e3), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm", ["gcn", "mean"])
@pytest.mark.parametrize("permute", [False, True], ids=["contiguous", "metis"])
@pytest.mark.parametrize("num_parts", PARTS)
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_block_product_matches_global(case, num_parts, permute, norm):
    graph = _graph(case)
    parts = _metis(case, num_parts) if permute else None
    plan = build_block_row_plan(graph, num_parts, norm=norm, parts=parts)
    assert plan.num_parts == num_parts and plan.num_nodes == graph.num_nodes
    assert plan.norm == norm
    _check_plan(graph, plan, norm, parts)
    _check_product(graph, plan, norm)


@pytest.mark.parametrize("permute", [False, True], ids=["contiguous", "metis"])
@pytest.mark.parametrize("case", ["power_law", "directed", "self_loops", "empty_edges"])
def test_padding_invariance(case, permute):
    graph = _graph(case)
    parts = _metis(case, 4) if permute else None
    base = build_block_row_plan(graph, 4, parts=parts)
    padded = build_block_row_plan(graph, 4, parts=parts, pad_multiple=16)
    assert padded.block_size % 16 == 0 and padded.max_nnz % 16 == 0
    np.testing.assert_array_equal(padded.block_nnz, base.block_nnz)
    _check_plan(graph, padded, "gcn", parts)
    x = graph.features
    np.testing.assert_allclose(
        _multiply(padded, x, pad_value=-5.0), _multiply(base, x, pad_value=0.0), atol=1e-12
    )


def test_block_sizes():
    graph = random_graph(30, 3.0, seed=0)
    assert build_block_row_plan(graph, 4).block_size == 8  # ceil(30 / 4)
    plan = build_block_row_plan(graph, 4, parts=np.repeat([0, 1, 3], 10))  # part 2 empty
    assert plan.block_size == 10
    assert not plan.row_mask[2].any() and plan.block_nnz[2].sum() == 0
    assert plan.block_nnz[:, 2].sum() == 0
    _check_plan(graph, plan, "gcn", np.repeat([0, 1, 3], 10))
    _check_product(graph, plan, "gcn")


def test_trailing_empty_block_without_parts():
    graph = random_graph(9, 2.0, seed=4)
    plan = build_block_row_plan(
        graph, 4, norm="mean"
    )  # B = 3: blocks 0..2 full, block 3 only padding
    assert plan.block_size == 3 and not plan.row_mask[3].any()
    _check_plan(graph, plan, "mean", None)
    _check_product(graph, plan, "mean")


def test_shard_unshard_roundtrip():
    graph = _graph("random")
    plan = build_block_row_plan(graph, 8, parts=_metis("random", 8))
    x = np.arange(graph.num_nodes * 4, dtype=np.float32).reshape(-1, 2, 2)
    sx = plan.shard_nodes(x)
    assert sx.shape == (8, plan.block_size, 2, 2) and not sx[~plan.row_mask].any()
    np.testing.assert_array_equal(plan.unshard_nodes(sx), x)
    np.testing.assert_array_equal(plan.shard_nodes(np.arange(graph.num_nodes)), plan.row_nodes)
    with pytest.raises(ValueError, match="leading dimension"):
        plan.shard_nodes(x[1:])
    with pytest.raises(ValueError, match="B="):
        plan.unshard_nodes(sx[:, 1:])


def test_invalid_inputs():
    graph = _graph("random")
    with pytest.raises(ValueError, match="normalisation"):
        build_block_row_plan(graph, 2, norm="sum")
    with pytest.raises(ValueError, match="num_parts"):
        build_block_row_plan(graph, graph.num_nodes + 1)
    with pytest.raises(ValueError, match="shape"):
        build_block_row_plan(graph, 2, parts=np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="not a part id"):
        build_block_row_plan(graph, 2, parts=np.full(graph.num_nodes, 2))
    with pytest.raises(ValueError, match="pad_multiple"):
        build_block_row_plan(graph, 2, pad_multiple=0)
