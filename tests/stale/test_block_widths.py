"""Widths per owner block for the quantized broadcasts of Sancus and CAGNET (random and
adaptive): the separable program against brute force, the schedule of the controller,
equivalence with the fixed width, and the configs that reach it."""

import itertools
import json

import jax
import numpy as np
import pytest
from test_stale_training import GRAPH, _setup

from jaxgraph.cli import main
from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.blockwidths import (
    BlockQuantize,
    BlockWidths,
    choose_widths,
    tree_seconds,
)
from jaxgraph.comm.cagnet import CAGNET
from jaxgraph.comm.costmodel import CostModel
from jaxgraph.comm.method import RunInfo
from jaxgraph.comm.sancus import Sancus
from jaxgraph.partition import partition_graph
from jaxgraph.partition.blockhalo import build_block_halo_plan
from jaxgraph.train import TrainConfig, train
from jaxgraph.train.methods import parse_method

POLICY = dict(policy="epoch", bound=1, warmup=2)


def _plan(num_parts):
    parts = partition_graph(GRAPH, num_parts, method="metis", seed=0)
    return build_block_halo_plan(GRAPH, parts, num_parts=num_parts)


def _objective(weights, seconds, candidates, lam, pick):
    """The program's objective of a choice ``pick`` (index per block), from its definition."""
    phi = np.array([1.0 / (2**b - 1) ** 2 for b in candidates])
    var = weights[:, None] * phi
    v = var[np.arange(len(pick)), pick].sum()
    t = seconds[np.arange(len(pick)), pick].sum()
    v_n, v_u = var[:, 0].sum(), var[:, -1].sum()
    t_n, t_u = seconds[:, -1].sum(), seconds[:, 0].sum()
    return lam * (v - v_u) / (v_n - v_u) + (1 - lam) * (t - t_u) / (t_n - t_u)


@pytest.mark.parametrize("lam", [0.0, 0.2, 0.5, 0.9])
def test_separable_program_matches_brute_force(lam):
    """Over every assignment of 3 widths to 4 blocks, none has a smaller objective than the
    chosen one (the program separates by block, so the per-block choice is optimal)."""
    rng = np.random.default_rng(0)
    candidates = (2, 4, 8)
    for _ in range(20):
        weights = rng.lognormal(0.0, 2.0, 4)
        seconds = np.sort(rng.uniform(1e-4, 1e-2, (4, 3)), axis=1)  # wider is slower
        widths, info = choose_widths(weights, seconds, candidates, lam)
        pick = [candidates.index(w) for w in widths]
        best = min(
            _objective(weights, seconds, candidates, lam, np.array(c))
            for c in itertools.product(range(3), repeat=4)
        )
        assert _objective(weights, seconds, candidates, lam, np.array(pick)) <= best + 1e-12
        assert info["seconds"] == pytest.approx(seconds[np.arange(4), pick].sum())


def test_the_extremes_and_the_weights_order_the_widths():
    """lam 1 (variance only): every block at the widest width; lam 0 (time only): the
    narrowest; in between, a block of larger weight never gets a narrower width than one of
    smaller weight and equal cost."""
    weights = np.array([1e-4, 1e-2, 1.0, 100.0])
    seconds = np.tile([1e-3, 2e-3, 4e-3], (4, 1))
    assert choose_widths(weights, seconds, (2, 4, 8), 1.0)[0] == (8, 8, 8, 8)
    assert choose_widths(weights, seconds, (2, 4, 8), 0.0)[0] == (2, 2, 2, 2)
    widths, _ = choose_widths(weights, seconds, (2, 4, 8), 0.5)
    assert list(widths) == sorted(widths) and widths[0] < widths[-1]


def test_tree_time_is_the_slowest_link_per_round():
    """P = 4, source 0: round k = 1 has the link 0 -> 1, round k = 2 the links 0 -> 2 and
    1 -> 3; the reduction runs the same links reversed."""
    theta = np.arange(16, dtype=float).reshape(4, 4)
    gamma = np.zeros((4, 4))
    cost = CostModel(theta=theta, gamma=gamma)
    assert tree_seconds(4, 0, 1.0, cost, reverse=False) == theta[0, 1] + max(
        theta[0, 2], theta[1, 3]
    )
    assert tree_seconds(4, 0, 1.0, cost, reverse=True) == theta[1, 0] + max(
        theta[2, 0], theta[3, 1]
    )


def _steps(strategy, num_parts, epochs):
    """Epochs 1..``epochs`` the way the loop drives them: the controller's update before
    each step. Returns the losses, bytes and the final state."""
    plan, trainer, shards, state = _setup(strategy, GRAPH, num_parts)
    controller = strategy.controller(plan, trainer.model.layer_input_dims(GRAPH.num_features))
    out = []
    for epoch in range(1, epochs + 1):
        new = controller.update(state.comm_state, epoch=epoch)
        if new is not None:
            state = state.replace(comm_state=trainer.place_comm_state(new))
        state, metrics = trainer.train_step(state, shards)
        out.append((float(metrics["loss"]), float(metrics["bytes_moved"])))
    return out, state, controller


def test_one_candidate_width_is_the_fixed_width_bit_for_bit():
    """Random widths over the single candidate 4 put every block at 4 bits: the run is the
    fixed-width Sancus-q4 run, losses, bytes and parameters bit for bit."""
    q = dict(quantize="random", period=2, assign=AssignConfig(widths=(4,)))
    per_block, state_b, _ = _steps(Sancus(**POLICY, **q), 4, 5)
    fixed, state_f, _ = _steps(Sancus(**POLICY, quantize=4), 4, 5)
    assert per_block == fixed
    for a, b in zip(jax.tree.leaves(state_b.params), jax.tree.leaves(state_f.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_cagnet_one_candidate_width_is_the_fixed_width_bit_for_bit():
    """CAGNET with widths per block over the single candidate 4: the fixed-width CAGNET-q4
    run, losses, bytes and parameters bit for bit (every layer, the first included)."""
    q = dict(quantize="random", period=2, assign=AssignConfig(widths=(4,)))
    per_block, state_b, _ = _steps(CAGNET(**q), 4, 5)
    fixed, state_f, _ = _steps(CAGNET(quantize=4), 4, 5)
    assert per_block == fixed
    for a, b in zip(jax.tree.leaves(state_b.params), jax.tree.leaves(state_f.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_adaptive_cagnet_widths_follow_the_traces():
    """CAGNET's every block is broadcast every epoch, so every layer is traced: after a
    period, lam 1 keeps every block of both layers at 8 bits and lam 0 drops them to 2, and
    fewer bytes move."""
    for lam, expect in ((1.0, {8}), (0.0, {2})):
        q = dict(quantize="adaptive", period=2, assign=AssignConfig(lam=lam))
        out, state, controller = _steps(CAGNET(**q), 4, 3)
        for layer in (0, 1):
            assert set(state.comm_state[layer].quant.widths.fwd) == expect
        assert set(state.comm_state[1].quant.widths.bwd) == expect
        assert {"fwd0", "fwd1", "bwd1"} <= set(controller.log(3)["widths"])
        assert (out[2][1] < out[1][1]) == (lam == 0.0)


@pytest.mark.parametrize("strategy", ["cagnet", "sancus"])
def test_one_part_keeps_its_widths_and_moves_nothing(strategy):
    """On one part nothing is broadcast: the boundary installs nothing (there is no remote
    receiver to weigh a block by) and no byte moves."""
    q = dict(quantize="adaptive", period=2)
    exchange = CAGNET(**q) if strategy == "cagnet" else Sancus(**POLICY, **q)
    out, _, controller = _steps(exchange, 1, 3)
    assert [sent for _, sent in out] == [0.0] * 3 and controller.last_update is None


def test_random_widths_follow_the_period_and_are_known_ahead():
    """Widths change at each period boundary only, the controller announces them (with the
    epoch they start) before they are installed, and a state rebuilt for a later epoch (what
    a checkpoint restores into) holds the widths the run reached."""
    strategy = Sancus(**POLICY, quantize="random", period=2)
    plan, trainer, shards, state = _setup(strategy, GRAPH, 4, run=RunInfo(seed=5))
    dims = tuple(state.comm_state[layer].cache.shape[-1] for layer in range(2))
    controller = strategy.controller(plan, dims, run=RunInfo(seed=5))
    seen = []
    for epoch in range(1, 8):
        ahead = controller.upcoming(state.comm_state, epoch=epoch - 1) if epoch > 1 else None
        new = controller.update(state.comm_state, epoch=epoch)
        assert (new is not None) == (epoch in (3, 5, 7))
        if new is not None:
            assert ahead[0] == epoch and ahead[1][1].quant.widths == new[1].quant.widths
            state = state.replace(comm_state=trainer.place_comm_state(new))
        seen.append(state.comm_state[1].quant.widths)
        rebuilt = controller.init_state(epoch=epoch)
        assert rebuilt[1].quant.widths == seen[-1]
        state, _ = trainer.train_step(state, shards)
    assert len(set(seen)) > 1  # the draws differ between periods
    assert all(isinstance(w, BlockWidths) and len(w.fwd) == 4 for w in seen)


def test_adaptive_widths_follow_the_traces():
    """After a period the controller solves from the traced variances: at lam 1 every block
    returns to 8 bits, at lam 0 every block drops to the narrowest width, and the log holds
    the widths and the projected time per direction."""
    for lam, expect in ((1.0, {8}), (0.0, {2})):
        q = dict(quantize="adaptive", period=2, assign=AssignConfig(lam=lam))
        _, state, controller = _steps(Sancus(**POLICY, **q), 4, 3)
        widths = state.comm_state[1].quant.widths
        assert set(widths.fwd) == set(widths.bwd) == expect
        log = controller.log(3)
        assert set(log["widths"]) == {"fwd1", "bwd1"} and log["projected"]["fwd1"] > 0
        # The traces restarted with the new widths and hold one step of statistics.
        trace = np.asarray(state.comm_state[1].quant.trace.bwd)
        assert np.all(trace >= 0) and trace.sum() > 0


def test_adaptive_sancus_resumes_exactly(tmp_path):
    """A run resumed from a checkpoint taken after a re-assignment logs the metrics of the
    uninterrupted run (widths restored from the checkpoint)."""
    method = Sancus(warmup=2, quantize="adaptive", period=3, assign=AssignConfig(lam=0.3))
    cfg = TrainConfig(parts=2, method=method, epochs=6, progress=False)
    cfg = cfg.replace(model=cfg.model.__class__(hidden=8, dropout=0.0))
    train(cfg.replace(workdir=str(tmp_path / "full")), graph=GRAPH)
    part = cfg.replace(workdir=str(tmp_path / "resumed"), checkpoint_every=4, epochs=4)
    train(part, graph=GRAPH)
    train(part.replace(epochs=6), graph=GRAPH)

    def metrics(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        skip = ("epoch_time", "assign_time", "rejit_time")
        return [{k: v for k, v in json.loads(x).items() if k not in skip} for x in lines]

    assert metrics("resumed") == metrics("full")


def test_spellings_configs_and_flags(capsys):
    method = parse_method("sancus-e1-qadaptive")
    assert method == Sancus(quantize="adaptive") and method.label() == "sancus-e1-qadaptive"
    assert parse_method("sancus-h0.04-w20-qrandom").quantize == "random"
    method = Sancus(quantize="random", period=4)
    controller = method.controller(_plan(4), (8, 8), run=RunInfo(epochs=100, seed=3))
    assert controller.q == BlockQuantize("random", period=4, seed=3)
    with pytest.raises(ValueError, match="sancus.period applies to quantize='random'"):
        Sancus(quantize=4, period=4)
    with pytest.raises(ValueError, match="sancus.assign.group_size applies to AdaQP"):
        Sancus(quantize="adaptive", assign=AssignConfig(group_size=7))
    argv = ["train", "--dataset", "nope", "--method", "sancus-e1"]
    assert main([*argv, "--lam", "0.3"]) == 2
    takers = (
        "adaqp or pipegcn-qadaptive or cagnet-q<random|adaptive> or sancus-<...>-q<random|adaptive>"
    )
    assert f"--lam applies to --method {takers} only" in capsys.readouterr().err
    assert main([*argv, "--quantize", "adaptive", "--lam", "0.3", "--assign-period", "5"]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err  # the options were taken
    method = parse_method("cagnet-qrandom")
    assert method == CAGNET(quantize="random") and method.label() == "cagnet-qrandom"
    method = CAGNET(quantize="adaptive", period=0)
    run = RunInfo(epochs=100, seed=3, model="sage")  # period 0: epochs // 5
    controller = method.controller(_plan(4), (8, 8), run=run)
    assert controller.q == BlockQuantize("adaptive", period=20, seed=3, norm="mean")
    with pytest.raises(ValueError, match="cagnet.period applies to quantize='random'"):
        CAGNET(quantize=4, period=4)
    argv = ["train", "--dataset", "nope", "--method", "cagnet", "--quantize", "adaptive"]
    assert main([*argv, "--assign-period", "5"]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err
