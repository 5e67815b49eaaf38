"""PipeGCN against Vanilla (staleness off) and against a dense stale-GCN reference: halo rows
one step old (zeros at step 0) and halo gradients injected one step late."""

import jax
import numpy as np
import pytest

from jaxgraph.comm.adaptive import AdaptiveState, AssignConfig
from jaxgraph.comm.pipegcn import PipeGCN
from jaxgraph.comm.strategy import Vanilla
from jaxgraph.models import make_model
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.train import assemble_run, make_strategy

from dense_stale import halo_gradient, stale_gcn
from graph_cases import random_graph
from harness import setup_training

RTOL = ATOL = 1e-5  # fp32 policy
GRAPH = random_graph(n=60, avg_deg=5, seed=5)
HIDDEN = 8


def _setup(strategy, num_parts, *, dropout=0.0):
    parts = partition_graph(GRAPH, num_parts, method="metis", seed=0)
    plan = build_halo_plan(GRAPH, parts, num_parts=num_parts)
    model = make_model("gcn", hidden=HIDDEN, out_dim=GRAPH.num_classes, dropout=dropout)
    trainer, shards, state = setup_training(GRAPH, plan, strategy, model, num_parts, seed=3)
    return parts, plan, trainer, shards, state


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)


def test_staleness_off_equals_vanilla_bit_for_bit():
    """Loss, gradients, bytes and two updates are identical (no dropout: the exchange order
    is the only other difference, and it changes nothing then)."""
    runs = []
    for strategy in (Vanilla(), PipeGCN(stale=False)):
        _, _, trainer, shards, state = _setup(strategy, 4)
        loss, grads = trainer.loss_and_grads(state, shards)
        sent = []
        for _ in range(2):
            state, metrics = trainer.train_step(state, shards)
            sent.append(float(metrics["bytes_moved"]))
        runs.append(jax.device_get((loss, grads, state.params, sent)))
    for a, b in zip(jax.tree.leaves(runs[0]), jax.tree.leaves(runs[1]), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("quantize", [None, 32])
@pytest.mark.parametrize("num_parts", [pytest.param(2, marks=pytest.mark.slow), 4])
def test_stale_halo_and_gradient_match_dense_reference(num_parts, quantize):
    """Step t aggregates the step t-1 rows of the other parts (zeros at step 0); the halo
    gradients of step t-1 reach their owners at step t, where they enter the parameter
    gradients; each step stores its own halo gradient, Â_crossᵀ dZ_1, for the next. With
    ``quantize=32`` both travel through the quantized exchange's byte path, exactly."""
    parts, plan, trainer, shards, state = _setup(PipeGCN(quantize=quantize), num_parts)
    zeros = (np.zeros_like(GRAPH.features), np.zeros((GRAPH.num_nodes, HIDDEN), np.float32))
    halo, inject = zeros, None
    for step in range(3):
        params = jax.device_get(state.params)
        ref_loss, inputs, ref_grads, dz1 = stale_gcn(params, GRAPH, parts, halo=halo, inject=inject)
        _, grads = trainer.loss_and_grads(state, shards)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
            _close(a, b)
        state, metrics = trainer.train_step(state, shards)
        _close(metrics["loss"], ref_loss)
        comm = jax.device_get(state.comm_state)
        stored = halo_gradient(GRAPH, parts, dz1)
        _close(plan.unshard_nodes(comm[1].grad), stored)
        assert comm[0].grad is None  # layer 0 sends nothing back
        for layer, rows in enumerate(inputs):  # halo slots hold this step's owner rows
            expect = np.where(plan.halo_mask[..., None], np.asarray(rows)[plan.halo_nodes], 0)
            _close(np.where(plan.halo_mask[..., None], comm[layer].halo, 0), expect)
        if step == 0:
            assert np.any(np.asarray(stored))  # a non-trivial injection follows
        halo, inject = inputs, stored


@pytest.mark.parametrize("stale", [True, False])
@pytest.mark.parametrize(
    "num_parts", [pytest.param(p, marks=pytest.mark.slow) for p in (1, 2, 8)] + [4]
)
def test_quantize_32_trains_as_plain_pipegcn(num_parts, stale):
    """The quantized byte path at 32 bits: the same losses, gradients and parameters over
    three steps as the fp32 ring (to fp32 rounding: the gradient rows are added onto their
    owners in another order), and the same bytes."""
    runs = []
    for quantize in (None, 32):
        _, _, trainer, shards, state = _setup(PipeGCN(stale=stale, quantize=quantize), num_parts)
        out = []
        for _ in range(3):
            _, grads = trainer.loss_and_grads(state, shards)
            state, metrics = trainer.train_step(state, shards)
            out.append(jax.device_get((metrics["loss"], grads, state.params)))
        runs.append((out, float(metrics["bytes_moved"])))
    for a, b in zip(jax.tree.leaves(runs[0][0]), jax.tree.leaves(runs[1][0]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert runs[1][1] == runs[0][1]


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_stale_halos_stay_within_one_quantization_step(bits):
    """A stored halo row differs from the row its owner sent by at most one step of its
    grid, ``(max - min) / (2^b - 1)`` (stochastic rounding picks a neighbouring grid point),
    and the halo gradients stored for the next step are quantized too; fewer bytes move."""
    exact = _setup(PipeGCN(), 4)
    quant = _setup(PipeGCN(quantize=bits), 4)
    (_, plan, t0, sh0, s0), (_, _, t1, sh1, s1) = exact, quant
    s0, m0 = t0.train_step(s0, sh0)
    s1, m1 = t1.train_step(s1, sh1)
    c0, c1 = jax.device_get(s0.comm_state), jax.device_get(s1.comm_state)
    real = plan.halo_mask[..., None]  # pad slots carry nothing
    for layer in range(2):
        h0, h1 = (np.where(real, c[layer].halo, 0) for c in (c0, c1))
        # The grid of a halo row is its owner's row's: the same values as h0's row.
        step = (h0.max(-1) - h0.min(-1)) / (2**bits - 1)
        assert np.all(np.abs(h1 - h0) <= step[..., None] * (1 + 1e-5) + 1e-6)
        assert np.any(h1 != h0)  # it is quantized
    assert np.any(c1[1].grad != c0[1].grad)
    assert np.allclose(c1[1].grad, c0[1].grad, atol=0.5 * np.abs(c0[1].grad).max())
    # Per row b D / 8 bytes of codes and 8 of (scale, lo) against 4 D: below fp32 for D > 2.
    assert float(m1["bytes_moved"]) < float(m0["bytes_moved"])


def _adaptive(period=2, chunks=0):
    assign = AssignConfig(solver="frontier")
    return PipeGCN(quantize="adaptive", period=period, chunks=chunks, assign=assign)


def test_adaptive_first_period_is_the_8_bit_exchange_bit_for_bit():
    """Adaptive widths start at uniform 8 bits: on exact layouts the same packets, keys and
    stale buffers as ``quantize=8``, so three steps give identical losses, gradients,
    parameters, bytes and pipeline buffers."""
    runs = []
    for strategy in (PipeGCN(quantize=8), _adaptive(period=10)):
        _, _, trainer, shards, state = _setup(strategy, 4)
        out = []
        for _ in range(3):
            _, grads = trainer.loss_and_grads(state, shards)
            state, metrics = trainer.train_step(state, shards)
            out.append(jax.device_get((metrics["loss"], metrics["bytes_moved"], grads)))
        comm = jax.device_get(state.comm_state)
        pipe = comm.pipe if isinstance(comm, AdaptiveState) else [(x.halo, x.grad) for x in comm]
        runs.append((out, jax.device_get(state.params), pipe))
    for a, b in zip(jax.tree.leaves(runs[0]), jax.tree.leaves(runs[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_adaptive_widths_trace_the_stale_messages_and_carry_the_pipeline():
    """Over a period the step traces the stale halo rows it sends (every layer) and the halo
    gradients it sends back (layers after the first); at the boundary the controller solves
    AdaQP's program from those traces, installs the widths with fresh traces, and keeps the
    stale halos and gradients: the next step reads what was received under the old widths.
    The chunked layout serves the new widths without a new compile."""
    parts = partition_graph(GRAPH, 4, method="metis", seed=0)
    plan = build_halo_plan(GRAPH, parts, num_parts=4)
    model = make_model("gcn", hidden=HIDDEN, out_dim=GRAPH.num_classes, dropout=0.0)
    run = assemble_run(GRAPH, plan, _adaptive(period=2, chunks=2), model, 4, seed=3)
    trainer, shards, state, controller = run.trainer, run.shards, run.state, run.controller
    assert controller.update(state.comm_state, epoch=1) is None
    for _ in range(2):
        state, metrics = trainer.train_step(state, shards)
    before = jax.device_get(state.comm_state)
    real = [np.asarray(m, bool) for m in plan.send_mask]
    for layer in range(2):
        assert all(np.all(t[m] > 0) for t, m in zip(before.trace.fwd[layer], real, strict=True))
    assert any(np.any(t > 0) for t in before.trace.bwd[1])
    assert not any(np.any(t) for t in before.trace.bwd[0])  # data: nothing sent back
    new = controller.update(state.comm_state, epoch=3)
    assert new is not None and controller.last_update["epoch"] == 3
    widths = controller.last_update["widths"]
    assert any(n for key in widths.values() for b, n in key.items() if b != 8)  # re-solved
    for a, b in zip(jax.tree.leaves(before.pipe), jax.tree.leaves(new.pipe), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not any(np.any(t) for t in jax.tree.leaves(new.trace))
    shapes = [np.shape(x) for x in jax.tree.leaves(before)]
    assert [np.shape(x) for x in jax.tree.leaves(new)] == shapes  # one compiled step
    state = state.replace(comm_state=trainer.place_comm_state(new))
    sent_8 = float(metrics["bytes_moved"])
    state, metrics = trainer.train_step(state, shards)
    assert np.isfinite(float(metrics["loss"]))
    assert float(metrics["bytes_moved"]) < sent_8


@pytest.mark.slow
def test_smoothing_averages_rows_and_gradients():
    """After one step from zero averages, ``avg = (1 - 0.95) * recv`` for both buffers."""
    _, _, trainer, shards, state = _setup(PipeGCN(), 2)
    plain, _ = trainer.train_step(state, shards)
    _, _, trainer, shards, state = _setup(make_strategy("pipegcn-fg"), 2)
    smooth, _ = trainer.train_step(state, shards)
    pairs = zip(jax.tree.leaves(plain.comm_state), jax.tree.leaves(smooth.comm_state), strict=True)
    for a, b in pairs:
        _close(b, (1 - 0.95) * np.asarray(a))


def test_names_and_bad_settings():
    assert make_strategy("pipegcn") == PipeGCN()
    assert make_strategy("pipegcn-sync").name == "pipegcn-sync"
    assert make_strategy("pipegcn-g").gradient_momentum == 0.95
    with pytest.raises(ValueError, match="unknown method 'pipegcn-x'"):
        make_strategy("pipegcn-x")
    with pytest.raises(ValueError, match="momentum must lie in"):
        PipeGCN(feature_momentum=1.0)
    with pytest.raises(ValueError, match="momenta smooth stale halos: they need stale = true"):
        PipeGCN(stale=False, gradient_momentum=0.9)
    with pytest.raises(ValueError, match="pipegcn.quantize must be none, 2, 4, 8 or 32"):
        PipeGCN(quantize=3)
    with pytest.raises(ValueError, match="'adaptive' needs stale = true"):
        PipeGCN(stale=False, quantize="adaptive")
    assert _adaptive().name == "pipegcn-qadaptive"
    assert PipeGCN(quantize=4).name == "pipegcn-q4"
    assert PipeGCN(stale=False, quantize=8).name == "pipegcn-sync-q8"
