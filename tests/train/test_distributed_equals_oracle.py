"""Distributed programs against the single-device dense oracle: logits, loss, gradients."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxgraph.comm.strategy import Vanilla
from jaxgraph.models import make_model
from jaxgraph.models.oracle import oracle_forward, oracle_loss_and_grads
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.train import OptimConfig, assemble_run, make_optimizer

from graph_cases import ALL_CASES, random_graph

RTOL = ATOL = 1e-5  # fp32 policy
MESH_SIZES = (1, 2, 4, 8)


def _setup(graph, model_name, num_parts, method, layer_norm=False):
    plan = build_halo_plan(graph, partition_graph(graph, num_parts, method=method, seed=0))
    model = make_model(
        model_name,
        hidden=8,
        out_dim=graph.num_classes,
        num_layers=2,
        dropout=0.0,
        layer_norm=layer_norm,
        heads=2,
    )
    run = assemble_run(graph, plan, Vanilla(), model, num_parts, seed=42)
    return plan, model, run.trainer, run.shards, run.state


def _assert_tree_close(a, b):
    flat_a, flat_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(flat_a, flat_b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL)


_RANDOM_GRAPH = random_graph(n=100, avg_deg=6, seed=7)


@functools.cache
def _oracle(model_name):
    """Oracle logits, loss and gradients: the initial parameters depend only on the model,
    so one oracle run serves every mesh size and partitioner."""
    graph = _RANDOM_GRAPH
    _, _, _, _, state = _setup(graph, model_name, 1, "contiguous")
    logits = jax.jit(lambda p: oracle_forward(model_name, p, graph, num_layers=2, heads=2))(
        state.params
    )
    loss, grads = oracle_loss_and_grads(model_name, state.params, graph, num_layers=2, heads=2)
    return np.asarray(logits), float(loss), grads


@pytest.mark.parametrize("num_parts", MESH_SIZES)
@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("model_name", ["gcn", "sage", "gat"])
def test_loss_logits_grads_match_oracle(model_name, method, num_parts):
    graph = _RANDOM_GRAPH
    plan, _, trainer, shards, state = _setup(graph, model_name, num_parts, method)
    ref_logits, ref_loss, ref_grads = _oracle(model_name)

    logits = plan.unshard_nodes(np.asarray(trainer.logits(state.params, shards)))
    np.testing.assert_allclose(logits, ref_logits, rtol=RTOL, atol=ATOL)
    loss, grads = trainer.loss_and_grads(state, shards)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=RTOL, atol=ATOL)
    _assert_tree_close(grads, ref_grads)


@pytest.mark.parametrize(
    "num_parts",
    [pytest.param(2, marks=pytest.mark.slow), 4, pytest.param(8, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("case", ["directed", "isolated_nodes", "self_loops", "power_law"])
@pytest.mark.parametrize("model_name", ["gcn", "sage", "gat"])
def test_graph_cases_match_oracle(case, model_name, num_parts):
    graph = ALL_CASES[case]()
    plan, _, trainer, shards, state = _setup(graph, model_name, num_parts, "metis")
    loss, grads = trainer.loss_and_grads(state, shards)
    ref_loss, ref_grads = oracle_loss_and_grads(
        model_name, state.params, graph, num_layers=2, heads=2
    )
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL, atol=ATOL)
    _assert_tree_close(grads, ref_grads)


@pytest.mark.parametrize("num_parts", (1, 4))
def test_layer_norm_model_matches_oracle(num_parts):
    graph = random_graph(n=80, avg_deg=5, seed=2)
    plan, _, trainer, shards, state = _setup(graph, "gcn", num_parts, "metis", layer_norm=True)
    logits = plan.unshard_nodes(np.asarray(trainer.logits(state.params, shards)))
    expect = oracle_forward("gcn", state.params, graph, num_layers=2, layer_norm=True)
    np.testing.assert_allclose(logits, np.asarray(expect), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("num_parts", (1, 8))
def test_training_step_matches_single_device_adam(num_parts):
    """Three optimizer steps on the mesh equal three Adam steps on the oracle loss."""
    graph = random_graph(n=100, avg_deg=6, seed=8)
    _, _, trainer, shards, state = _setup(graph, "gcn", num_parts, "metis")
    tx = make_optimizer(OptimConfig())
    params = jax.tree.map(jnp.copy, state.params)  # the step donates `state`
    opt_state = tx.init(params)
    for _ in range(3):
        state, metrics = trainer.train_step(state, shards)
        loss, grads = oracle_loss_and_grads("gcn", params, graph, num_layers=2)
        np.testing.assert_allclose(float(metrics["loss"]), float(loss), rtol=RTOL, atol=ATOL)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = jax.tree.map(jnp.add, params, updates)
    _assert_tree_close(state.params, params)
    assert trainer.trace_count == 1


def test_multilabel_loss_matches_oracle():
    base = random_graph(n=60, avg_deg=5, seed=9)
    labels = np.random.default_rng(0).random((60, 5)) < 0.3
    graph = base.replace(labels=labels)
    _, _, trainer, shards, state = _setup(graph, "sage", 4, "metis")
    loss, grads = trainer.loss_and_grads(state, shards)
    ref_loss, ref_grads = oracle_loss_and_grads("sage", state.params, graph, num_layers=2)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL, atol=ATOL)
    _assert_tree_close(grads, ref_grads)
