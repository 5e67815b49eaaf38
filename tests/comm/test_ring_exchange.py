"""The ring halo exchange against a NumPy simulation of the plan, exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxgraph.comm import ring_exchange, ring_exchange_bytes
from jaxgraph.mesh import make_mesh
from jaxgraph.partition import build_halo_plan, partition_graph

from graph_cases import ALL_CASES, random_graph

MESH_SIZES = (1, 2, 4, 8)


def _rank_coded(plan, width=3):
    """Row value = global node id * 10 + column: a misrouted row is visible exactly."""
    ids = plan.local_nodes.astype(np.float32)
    x = ids[..., None] * 10 + np.arange(width, dtype=np.float32)
    return np.where(plan.local_mask[..., None], x, -1.0).astype(np.float32)


def _simulate(plan, x):
    """NumPy simulation: device d's halo = concat_r x[(d - r) % P][send_idx[r-1][(d - r) % P]]."""
    p = plan.num_parts
    out = []
    for d in range(p):
        blocks = [x[(d - r) % p][plan.send_idx[r - 1][(d - r) % p]] for r in range(1, p)]
        out.append(np.concatenate(blocks) if blocks else np.zeros((0, x.shape[-1]), x.dtype))
    return np.stack(out)


def _run(plan, x):
    mesh = make_mesh(plan.num_parts)
    axis = mesh.axis_names[0]

    def body(x, send_idx):
        # x: f32[1, Nl, F]; send_idx[r]: int32[1, S_r]
        halo = ring_exchange(
            x[0], [s[0] for s in send_idx], axis_name=axis, num_parts=plan.num_parts
        )
        return halo[None]  # f32[1, H, F]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(axis), P(axis)), out_specs=P(axis)))
    return f, mesh


@pytest.mark.parametrize("num_parts", MESH_SIZES)
@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_exchange_matches_numpy_simulation(case, method, num_parts):
    graph = ALL_CASES[case]()
    if num_parts > graph.num_nodes:
        pytest.skip("more parts than nodes is rejected by the partitioner (tested there)")
    plan = build_halo_plan(graph, partition_graph(graph, num_parts, method=method, seed=1))
    x = _rank_coded(plan)
    f, _ = _run(plan, x)
    halo = np.asarray(f(x, tuple(plan.send_idx)))
    np.testing.assert_array_equal(halo, _simulate(plan, x))
    # Every unmasked halo slot holds exactly the row of the node the plan says it holds.
    expect = plan.halo_nodes[..., None] * 10.0 + np.arange(3)
    np.testing.assert_array_equal(halo[plan.halo_mask], expect[plan.halo_mask])


@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_exchange_transpose_is_scatter_add(num_parts):
    """The gradient of <halo, g> w.r.t. x is the scatter-add of g back to the sent rows."""
    graph = random_graph(n=90, avg_deg=5, seed=3)
    plan = build_halo_plan(graph, partition_graph(graph, num_parts, method="random", seed=0))
    x = _rank_coded(plan)
    f, mesh = _run(plan, x)
    rng = np.random.default_rng(0)
    g = rng.standard_normal((num_parts, plan.num_halo_rows, 3)).astype(np.float32)
    grad = jax.grad(lambda x: jnp.sum(f(x, tuple(plan.send_idx)) * g))(x)

    expect = np.zeros_like(x)
    p = num_parts
    for d in range(p):
        offset = 0
        for r in range(1, p):
            src = (d - r) % p
            idx = plan.send_idx[r - 1][src]
            np.add.at(expect[src], idx, g[d, offset : offset + len(idx)])
            offset += len(idx)
    np.testing.assert_allclose(np.asarray(grad), expect, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_reported_bytes(num_parts):
    graph = random_graph(n=90, avg_deg=5, seed=4)
    plan = build_halo_plan(graph, partition_graph(graph, num_parts, method="metis", seed=0))
    padded = ring_exchange_bytes(plan.round_rows, 16, num_parts)
    assert padded == plan.bytes_moved(16) == num_parts * plan.payload_rows * 16 * 4
    assert plan.useful_bytes(16) == int(sum(m.sum() for m in plan.send_mask)) * 16 * 4
    assert plan.useful_bytes(16) <= padded


def test_wrong_round_count_is_an_error():
    with pytest.raises(ValueError, match="3 rounds"):
        ring_exchange(jnp.zeros((2, 1)), [], axis_name="parts", num_parts=4)
