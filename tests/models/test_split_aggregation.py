"""Aggregation split by edge source (local rows | halo rows), the AdaQP central/marginal overlap.

Host side: the split edge lists hold exactly the plan's edges. Device side: central rows do not
depend on the halo at all (bit for bit), the split equals the one-shot aggregation, the local
term is traced before the exchange, and the models still match the single-device oracle.
"""

import functools

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxgraph.comm.ring import ring_exchange
from jaxgraph.comm.strategy import CommStrategy, Vanilla
from jaxgraph.mesh import DEFAULT_AXIS, make_mesh
from jaxgraph.models import Propagator, make_model
from jaxgraph.models.oracle import oracle_loss_and_grads
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.partition.halo import split_edges_by_source
from jaxgraph.partition.shard import GraphShard
from jaxgraph.train import assemble_run

from graph_cases import ALL_CASES

RTOL = ATOL = 1e-5  # fp32 policy for model outputs against the oracle
SPLIT_RTOL = SPLIT_ATOL = 1e-6  # split vs one-shot aggregation: same terms, other sum order
MESHES = [(4, "metis"), (8, "random")]  # both leave central and marginal rows on every device


@functools.cache
def _graph(case):
    return ALL_CASES[case]()


@functools.cache
def _plan(case, num_parts, method):
    graph = _graph(case)
    parts = partition_graph(graph, num_parts, method=method, seed=0)
    return build_halo_plan(graph, parts, num_parts=num_parts)


# ---------------------------------------------------------------------- host: the edge lists


def _rows(src, dst, gcn, mean) -> np.ndarray:
    """Edges as rows ``(src, dst, gcn, mean)`` in a canonical order (a multiset)."""
    rows = np.stack([src, dst, gcn, mean], axis=1).astype(np.float64)
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("num_parts", [1, 2, 4, 8])
@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_split_edges_partition_the_plan_edges(case, num_parts, method):
    plan = _plan(case, num_parts, method)
    e = split_edges_by_source(plan)
    nl, h = plan.num_local_rows, plan.num_halo_rows
    np.testing.assert_array_equal(e.num_local_edges + e.num_remote_edges, plan.num_edges)
    assert e.local_src.shape[1] == max(1, int(e.num_local_edges.max()))
    assert e.remote_src.shape[1] == max(1, int(e.num_remote_edges.max()))
    for d in range(num_parts):
        nloc, nrem, nall = e.num_local_edges[d], e.num_remote_edges[d], plan.num_edges[d]
        ls, ld = e.local_src[d, :nloc], e.local_dst[d, :nloc]
        rs, rd = e.remote_src[d, :nrem], e.remote_dst[d, :nrem]
        assert np.all(ls < nl) and np.all((rs >= 0) & (rs < h))
        # Central rows (the first num_central[d]) receive no halo-source edge.
        assert np.all(rd >= plan.num_central[d])
        expected = _rows(
            plan.edge_src[d, :nall],
            plan.edge_dst[d, :nall],
            plan.gcn_edge_weight[d, :nall],
            plan.mean_edge_weight[d, :nall],
        )
        got = _rows(
            np.concatenate([ls, rs + nl]),
            np.concatenate([ld, rd]),
            np.concatenate([e.local_gcn_weight[d, :nloc], e.remote_gcn_weight[d, :nrem]]),
            np.concatenate([e.local_mean_weight[d, :nloc], e.remote_mean_weight[d, :nrem]]),
        )
        np.testing.assert_array_equal(got, expected)
        for src, dst, gcn, mean, n in [
            (e.local_src, e.local_dst, e.local_gcn_weight, e.local_mean_weight, nloc),
            (e.remote_src, e.remote_dst, e.remote_gcn_weight, e.remote_mean_weight, nrem),
        ]:
            assert np.all(np.diff(dst[d]) >= 0)  # sorted by destination, pad edges last
            assert np.all(src[d, n:] == 0) and np.all(dst[d, n:] == nl - 1)
            assert np.all(gcn[d, n:] == 0) and np.all(mean[d, n:] == 0)


def test_graph_shard_carries_split_edges_on_request():
    graph, plan = _graph("power_law"), _plan("power_law", 4, "metis")
    e = split_edges_by_source(plan)
    shard = GraphShard.from_plan(graph, plan)
    np.testing.assert_array_equal(shard.local_edge_src, e.local_src)
    np.testing.assert_array_equal(shard.remote_edge_src, e.remote_src)
    np.testing.assert_array_equal(shard.remote_mean_weight, e.remote_mean_weight)
    unsplit = GraphShard.from_plan(graph, plan, split=False)
    assert unsplit.local_edge_src is None and unsplit.remote_mean_weight is None
    np.testing.assert_array_equal(unsplit.edge_src, shard.edge_src)


# ---------------------------------------------------------------------- device: aggregation


class _NoisyHalo(CommStrategy):
    """The ring's halo plus large per-device noise: what a wrong (or stale) halo looks like."""

    name = "noisy_halo"

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        del layer, key
        halo = ring_exchange(h_local, shard.send_idx, axis_name=axis_name, num_parts=num_parts)
        noise_key = jax.random.fold_in(jax.random.key(0), jax.lax.axis_index(axis_name))
        noise = 1e3 * jax.random.normal(noise_key, halo.shape, halo.dtype)
        return halo + noise, comm_state, jax.numpy.float32(0)


def _shard_map(fn, num_parts, shards):
    specs = jax.tree.map(lambda _: P(DEFAULT_AXIS), shards)
    mapped = jax.shard_map(
        fn, mesh=make_mesh(num_parts), in_specs=(specs,), out_specs=P(DEFAULT_AXIS)
    )
    return jax.jit(mapped)(shards)


def _propagator(shard, strategy, num_parts, split):
    return Propagator(shard, strategy, {}, axis_name=DEFAULT_AXIS, num_parts=num_parts, split=split)


@functools.cache
def _aggregations(num_parts, method):
    """Per norm: (split + true halo, split + noisy halo, one-shot + true halo), ``[P, Nl, F]``."""
    graph, plan = _graph("power_law"), _plan("power_law", num_parts, method)

    def body(shards):
        shard = jax.tree.map(lambda a: a[0], shards)  # x: f32[Nl, F], edge lists: [E]
        out = {}
        for norm in ("gcn", "mean"):
            runs = [(Vanilla(), True), (_NoisyHalo(), True), (Vanilla(), False)]
            out[norm] = tuple(
                _propagator(shard, s, num_parts, split)(shard.x, layer=0, norm=norm)[None]
                for s, split in runs
            )  # each f32[1, Nl, F]
        return out

    out = _shard_map(body, num_parts, GraphShard.from_plan(graph, plan))
    return plan, jax.tree.map(np.asarray, out)


@pytest.mark.parametrize("norm", ["gcn", "mean"])
@pytest.mark.parametrize(("num_parts", "method"), MESHES)
def test_central_rows_ignore_the_halo(num_parts, method, norm):
    plan, out = _aggregations(num_parts, method)
    true_halo, noisy_halo, _ = out[norm]
    for d in range(num_parts):
        c, n = plan.num_central[d], plan.num_local[d]
        assert 0 < c < n
        np.testing.assert_array_equal(noisy_halo[d, :c], true_halo[d, :c])
        # Every marginal row has an in-edge from the halo with a nonzero weight.
        assert np.all(np.any(noisy_halo[d, c:n] != true_halo[d, c:n], axis=-1))


@pytest.mark.parametrize("norm", ["gcn", "mean"])
@pytest.mark.parametrize(("num_parts", "method"), MESHES)
def test_split_equals_one_shot_aggregation(num_parts, method, norm):
    _, out = _aggregations(num_parts, method)
    split, _, one_shot = out[norm]
    np.testing.assert_allclose(split, one_shot, rtol=SPLIT_RTOL, atol=SPLIT_ATOL)


def _first_eqn(jaxpr, predicate) -> int:
    return next(i for i, eqn in enumerate(jaxpr.eqns) if predicate(eqn.primitive.name))


@pytest.mark.parametrize("split", [True, False])
def test_local_term_is_traced_before_the_exchange(split):
    """The local-source aggregation precedes the first ``ppermute`` in program order only in
    the split path (so it can run while the collective is in flight)."""
    num_parts = 4
    graph, plan = _graph("power_law"), _plan("power_law", num_parts, "metis")
    shards = GraphShard.from_plan(graph, plan)

    def body(shards):
        shard = jax.tree.map(lambda a: a[0], shards)
        prop = _propagator(shard, Vanilla(), num_parts, split)
        return prop(shard.x, layer=0, norm="gcn")[None]

    specs = jax.tree.map(lambda _: P(DEFAULT_AXIS), shards)
    mapped = jax.shard_map(
        body, mesh=make_mesh(num_parts), in_specs=(specs,), out_specs=P(DEFAULT_AXIS)
    )
    (eqn,) = jax.make_jaxpr(mapped)(shards).jaxpr.eqns  # the shard_map
    inner = eqn.params["jaxpr"]
    first_permute = _first_eqn(inner, lambda name: name == "ppermute")
    first_aggregation = _first_eqn(inner, lambda name: "custom_vjp" in name)
    assert (first_aggregation < first_permute) == split


# ---------------------------------------------------------------------- models vs oracle


@pytest.mark.parametrize("model_name", ["gcn", "sage"])
@pytest.mark.parametrize(("num_parts", "method"), MESHES)
def test_split_models_match_oracle(model_name, num_parts, method):
    graph, plan = _graph("power_law"), _plan("power_law", num_parts, method)
    model = make_model(model_name, hidden=8, out_dim=graph.num_classes, dropout=0.0)
    run = assemble_run(graph, plan, Vanilla(), model, num_parts, seed=42, split=True)
    assert run.shards.local_edge_src is not None
    loss, grads = run.trainer.loss_and_grads(run.state, run.shards)
    state = run.state
    ref_loss, ref_grads = oracle_loss_and_grads(model_name, state.params, graph, num_layers=2)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL, atol=ATOL)
    assert jax.tree.structure(grads) == jax.tree.structure(ref_grads)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=RTOL, atol=ATOL)
