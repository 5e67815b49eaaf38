"""The adaptive (AdaQP) strategy: scores, traces, the channel <-> assignment mapping, the loop."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxgraph.comm.adaptive import AssignConfig, Traces, aggregation_scores
from jaxgraph.comm.adaqp import _bits_from_channels, _channel_rows, _channels
from jaxgraph.comm.projection import projected_comm_time
from jaxgraph.comm.qring import quantized_ring_exchange, row_range_variance
from jaxgraph.mesh import make_mesh
from jaxgraph.models import make_model
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.partition.buckets import BitAssignment, bucket_state
from jaxgraph.partition.shard import GraphShard
from jaxgraph.train import AdaQP, TrainConfig, build_run, train

from graph_cases import directed, random_graph
from harness import setup_training

GRAPH = random_graph(n=120, avg_deg=6, seed=5)


def _plan(graph, num_parts, method="metis"):
    parts = partition_graph(graph, num_parts, method=method, seed=0)
    return build_halo_plan(graph, parts, num_parts=num_parts)


@pytest.mark.parametrize("graph", [GRAPH, directed()], ids=["undirected", "directed"])
@pytest.mark.parametrize("norm", ["gcn", "mean"])
@pytest.mark.parametrize("squares", [False, True])
def test_aggregation_scores_equal_brute_force(graph, norm, squares):
    """s(v) = sum over the receiver's nodes w with an edge v -> w of the coefficient a_wv."""
    num_parts = 4
    plan = _plan(graph, num_parts, "random")
    scores = aggregation_scores(plan, norm, squares=squares)
    src, dst = graph.edges()
    coef = graph.gcn_norm()[0] if norm == "gcn" else graph.mean_norm()
    for r in range(1, num_parts):
        for d in range(num_parts):
            e = (d + r) % num_parts
            for s in range(plan.round_rows[r - 1]):
                if not plan.send_mask[r - 1][d, s]:
                    assert scores[r - 1][d, s] == 0
                    continue
                v = plan.local_nodes[d, plan.send_idx[r - 1][d, s]]
                sel = (src == v) & (plan.parts[dst] == e)
                a = coef[sel].astype(np.float64)
                expect = np.sum(a * a) if squares else np.sum(a)
                assert scores[r - 1][d, s] == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("squares", [False, True])
def test_message_weight_is_square_of_sum_or_sum_of_squares(squares):
    """beta(v) = (sum_w a_wv)^2 traced(v) (the public implementation's) or, with squares,
    (sum_w a_wv^2) traced(v) (the seed's beta_k): linear in the sum of squares, not squared."""
    num_parts = 4
    plan = _plan(GRAPH, num_parts, "random")
    rng = np.random.default_rng(3)
    traced = [rng.uniform(0.5, 2.0, m.shape) for m in plan.send_mask]
    traces = {"fwd": [traced, traced], "bwd": [None, traced]}
    method = AdaQP(score="squares" if squares else "sum", chunks=0)
    problems = method.controller(plan, (7, 5)).problems(Traces(**traces))
    sums = aggregation_scores(plan, "gcn")
    sq = aggregation_scores(plan, "gcn", squares=True)
    for r, (beta, t, m) in enumerate(zip(problems["fwd1"][0], traced, plan.send_mask, strict=True)):
        expect = (sq[r] if squares else sums[r] ** 2) * t * m
        np.testing.assert_allclose(beta, expect, rtol=1e-12)
    assert problems["fwd1"][1] == 5 and not problems["fwd1"][2]
    assert problems["bwd1"][2]  # backward weights do not depend on the score


def test_backward_probe_carries_the_range_variance_of_sent_gradient_rows():
    """The cotangent of the exchange's probe is (D/6)(max - min)^2 of each gradient row the
    device sends back, slot by slot in the order of the rows it received."""
    num_parts, dim = 4, 5
    plan = _plan(GRAPH, num_parts, "random")
    state = bucket_state(plan, BitAssignment.uniform(plan, 1, 32))  # exact: compare values
    mesh = make_mesh(num_parts)
    axis = mesh.axis_names[0]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((num_parts, plan.num_local_rows, dim)).astype(np.float32)
    g = rng.standard_normal((num_parts, plan.num_halo_rows, dim)).astype(np.float32)
    probe = tuple(np.zeros(m.shape, np.float32) for m in plan.send_mask)

    def body(x, g, fwd, bwd, probe):
        sq = lambda t: jax.tree.map(lambda a: a[0], t)  # noqa: E731

        def f(x, probe):
            halo = quantized_ring_exchange(
                x,
                sq(fwd),
                sq(bwd),
                jax.random.key(0),
                axis_name=axis,
                num_parts=num_parts,
                probe=probe,
            )
            return jnp.sum(halo * g[0])

        _, probe_ct = jax.grad(f, argnums=(0, 1))(x[0], sq(probe))
        return jax.tree.map(lambda a: a[None], probe_ct)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(axis),) * 5, out_specs=P(axis)))
    got = f(x, g, state.fwd[0], state.bwd[0], probe)
    offsets = np.cumsum([0, *plan.round_rows])
    for r in range(num_parts - 1):
        rows = g[:, offsets[r] : offsets[r + 1]]  # the halo gradient rows of round r + 1
        expect = dim / 6 * (rows.max(-1) - rows.min(-1)) ** 2
        np.testing.assert_allclose(np.asarray(got[r]), expect, rtol=1e-6)


def test_row_range_variance_matches_definition_and_handles_empty_rows():
    x = jnp.asarray([[1.0, -2.0, 0.5], [3.0, 3.0, 3.0]])
    np.testing.assert_allclose(row_range_variance(x), [3 / 6 * 9.0, 0.0])
    assert row_range_variance(jnp.zeros((4, 0))).shape == (4,)


@pytest.mark.parametrize("num_parts", [2, 4])
def test_channel_mapping_round_trips_to_the_assignment(num_parts):
    """Widths chosen per channel land on the slots that channel carries: forward channel
    d -> d + r on send slots of d; backward channel e -> e - r on the slots e received from
    e - r, stored under the forward sender e - r."""
    plan = _plan(GRAPH, num_parts, "random")
    beta = tuple(np.ones(m.shape) for m in plan.send_mask)
    for backward in (False, True):
        chans = _channels(beta, plan, backward)
        # Code each row's width from its channel: 2 if the sender is even, else 4; and the
        # last real row of each channel at 8 to check the row order.
        bits = []
        for sender, receiver, r, b in chans:
            expect_receiver = (sender - r) % num_parts if backward else (sender + r) % num_parts
            assert receiver == expect_receiver
            w = np.full(b.shape, 2 if sender % 2 == 0 else 4, np.int8)
            if w.size:
                w[-1] = 8
            bits.append(w)
        rounds = _bits_from_channels(bits, plan, backward)
        back = _channel_rows(rounds, plan, backward)
        for got, want in zip(back, bits, strict=True):
            np.testing.assert_array_equal(got, want)
        for r, (a, mask) in enumerate(zip(rounds, plan.send_mask, strict=True), 1):
            for d in range(num_parts):
                real = np.flatnonzero(mask[d])
                if not real.size:
                    continue
                sender = (d + r) % num_parts if backward else d
                expect = np.full(real.size, 2 if sender % 2 == 0 else 4)
                expect[-1] = 8
                np.testing.assert_array_equal(a[d][real], expect)


def _adaptive_trainer(num_parts):
    plan = _plan(GRAPH, num_parts)
    strategy = AdaQP(AssignConfig(), period=2, chunks=0)
    model = make_model("gcn", hidden=8, out_dim=GRAPH.num_classes, dropout=0.0)
    trainer, shards, state = setup_training(GRAPH, plan, strategy, model, num_parts, seed=1)
    return plan, strategy, trainer, shards, state, model.layer_input_dims(GRAPH.num_features)


def test_step_traces_forward_rows_and_backward_gradient_rows():
    """After one step the forward traces of layer 0 equal (D/6)(max - min)^2 of the feature
    rows sent (no dropout); the backward traces of layer 1 are positive exactly on the slots
    whose node has a training node among its out-neighbours on the receiver (the last
    layer's gradient reaches only training nodes' rows); nothing is traced for layer 0's
    (non-existent) backward exchange. Exact backward values: the probe test above."""
    num_parts = 4
    plan, _, trainer, shards, state, dims = _adaptive_trainer(num_parts)
    state, _ = trainer.train_step(state, shards)
    trace = jax.device_get(state.comm_state.trace)
    src, dst = GRAPH.edges()
    x = GraphShard.from_plan(GRAPH, plan).x
    for r in range(num_parts - 1):
        rows = np.take_along_axis(x, plan.send_idx[r][..., None], axis=1)
        expect = dims[0] / 6 * (rows.max(-1) - rows.min(-1)) ** 2
        np.testing.assert_allclose(trace.fwd[0][r], expect, rtol=1e-6)
        assert np.all(trace.bwd[0][r] == 0)
        held = np.roll(plan.send_mask[r], r + 1, axis=0)  # slots held by the receivers
        assert np.all(trace.bwd[1][r][~held] == 0)
        offset = sum(plan.round_rows[:r])
        for e in range(num_parts):
            for slot in np.flatnonzero(held[e]):
                v = plan.halo_nodes[e, offset + slot]
                reaches = np.any(GRAPH.train_mask[dst[src == v]] & (plan.parts[dst[src == v]] == e))
                assert (trace.bwd[1][r][e, slot] > 0) == reaches
        assert np.all(trace.fwd[1][r][plan.send_mask[r]] >= 0)
    state, _ = trainer.train_step(state, shards)
    trace2 = jax.device_get(state.comm_state.trace)
    np.testing.assert_allclose(trace2.fwd[0][0], 2 * trace.fwd[0][0], rtol=1e-6)


def _adaqp_config(chunks=None, **changes):
    cfg = TrainConfig(
        parts=4,
        method=AdaQP(AssignConfig(lam=0.1, group_size=4, time_limit=5.0), period=2, chunks=chunks),
        epochs=5,
        progress=False,
    )
    return cfg.replace(model=cfg.model.__class__(hidden=8), **changes)


def _metrics(workdir):
    return [json.loads(s) for s in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("chunks", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_end_to_end_adaqp_reassigns_and_logs(tmp_path, chunks):
    """`train` with method adaqp: uniform 8 bits in the first period, then a solved
    assignment, its width histogram and overhead in the metrics. With exact layouts the new
    assignment compiles a new step; a chunked layout keeps the first one."""
    full = train(_adaqp_config(chunks, workdir=str(tmp_path)), graph=GRAPH)
    assert (full["compiled_steps"] == 1) == (chunks > 0)
    assert 0 < full["assign_overhead"] < full["wall_time"]
    lines = _metrics(tmp_path)
    assert [("widths" in m) for m in lines] == [False, False, True, False, True]
    assert lines[2]["assign_time"] > 0 and lines[2]["rejit_time"] >= 0
    assert set(lines[2]["widths"]) == {"fwd0", "fwd1", "bwd1"}
    assert set(lines[2]["solver"]) == {"fwd0", "fwd1", "bwd1"}
    # lam = 0.1 on a 10 GbE model: some messages leave 8 bits.
    assert any(set(v) != {"8"} for v in lines[2]["widths"].values())
    # Bytes follow the assignment: uniform 8 bits for epochs 1-2, then fewer.
    assert lines[0]["bytes_moved"] == lines[1]["bytes_moved"] > lines[2]["bytes_moved"]


def test_the_exchange_stays_a_value_while_its_controller_decides():
    """Everything AdaQP decides lives in its controller: after a solve ahead of the boundary
    (lookahead) and its installation, the strategy's attributes and hash are those it was
    built with, the controller holds the log, and a new controller of the same strategy
    starts again from the first period's uniform state."""
    cfg = _adaqp_config(2, method=AdaQP(AssignConfig(lam=0.1, group_size=4, lookahead=1), period=2))
    run = build_run(cfg, GRAPH)
    strategy, controller = run.strategy, run.controller
    built, digest = dict(vars(strategy)), hash(strategy)
    state = run.state
    for epoch in range(1, 4):
        new = controller.update(state.comm_state, epoch=epoch)
        if new is not None:
            state = state.replace(comm_state=run.trainer.place_comm_state(new))
        assert (epoch == 2) == (controller.upcoming(state.comm_state, epoch=epoch) is not None)
        state, _ = run.trainer.train_step(state, run.shards)
        jax.block_until_ready(state)
    assert vars(strategy) == built and hash(strategy) == digest
    log = controller.log(3)
    assert log["solved_at"] == 2 and set(log["widths"]) == {"fwd0", "fwd1", "bwd1"}

    def widths(bits):
        return {
            int(w)
            for rounds in bits.fwd
            for b, mask in zip(rounds, run.plan.send_mask, strict=True)
            for w in np.unique(np.asarray(b)[mask])
        }

    assert widths(state.comm_state.bits) != {8}  # lam = 0.1: some messages left 8 bits
    assert widths(strategy.controller(run.plan, run.layer_dims).init_state().bits) == {8}


@pytest.mark.slow
def test_adaqp_resume_after_reassignment_reproduces_metrics(tmp_path):
    """A run resumed from a checkpoint taken after a re-assignment (the assignment and the
    traces come from the checkpoint) logs exactly the metrics of an uninterrupted run."""
    train(_adaqp_config(workdir=str(tmp_path / "full")), graph=GRAPH)
    part = _adaqp_config(workdir=str(tmp_path / "resumed"), checkpoint_every=3, epochs=3)
    train(part, graph=GRAPH)
    train(part.replace(epochs=5), graph=GRAPH)
    strip = lambda m: {  # noqa: E731
        k: v for k, v in m.items() if k not in ("epoch_time", "assign_time", "rejit_time", "solver")
    }
    full, resumed = _metrics(tmp_path / "full"), _metrics(tmp_path / "resumed")
    assert [strip(m) for m in resumed] == [strip(m) for m in full]


def test_resume_reads_the_state_by_tree_path_and_names_a_missing_leaf():
    """A checkpoint restores the assignment, the next one and the traces from the leaves at
    their tree paths below ``comm_state``; a leaf that is missing (another method's state, or
    an older layout's names) or of another shape is an error naming it."""
    plan = _plan(GRAPH, 4)
    dims = (GRAPH.num_features, 8)
    method = AdaQP(AssignConfig(solver="frontier", lookahead=1), period=5, chunks=0)
    controller = method.controller(plan, dims)
    rng = np.random.default_rng(0)
    bits = BitAssignment.random(plan, len(dims), rng)
    template = controller.init_state()
    traces = jax.tree.map(lambda t: rng.random(t.shape).astype(np.float32), template.trace)
    expect = controller.state_of(bits, upcoming=bits, traces=traces)
    flat, _ = jax.tree_util.tree_flatten_with_path(expect)
    saved = {jax.tree_util.keystr(path): np.asarray(v) for path, v in flat}
    restored = controller.resume(epoch=7, saved=saved)
    assert jax.tree.structure(restored) == jax.tree.structure(expect)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(expect), strict=True):
        np.testing.assert_array_equal(a, b)
    older = {k.replace(".bits.", "['bits']."): v for k, v in saved.items()}
    with pytest.raises(ValueError, match=r"no comm_state leaf \.bits\.fwd\[0\]\[0\]"):
        controller.resume(epoch=7, saved=older)
    key = ".trace.bwd[1][0]"
    with pytest.raises(ValueError, match=re.escape(f"leaf {key} has shape (4, 1)")):
        controller.resume(epoch=7, saved={**saved, key: saved[key][:, :1]})


def test_missing_solver_keeps_the_previous_assignment(monkeypatch):
    """A re-assignment without a MIP solver warns and keeps the assignment in force."""
    import cvxpy

    from jaxgraph.comm.assign import SolverFallbackWarning

    num_parts = 4
    plan = _plan(GRAPH, num_parts)
    dims = (GRAPH.num_features, 8)
    strategy = AdaQP(AssignConfig(lam=0.1, group_size=4), period=1, chunks=0)
    previous = BitAssignment.random(plan, 2, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    traces = {
        d: tuple(tuple(rng.random(m.shape) for m in plan.send_mask) for _ in dims)
        for d in ("fwd", "bwd")
    }
    monkeypatch.setattr(cvxpy, "installed_solvers", lambda: ["SCS"])
    with pytest.warns(SolverFallbackWarning, match="HIGHS is not installed"):
        assignment, _ = strategy.controller(plan, dims).solve(Traces(**traces), previous)
    for name in ("fwd", "bwd"):
        for layer in range(2):
            if name == "bwd" and layer == 0:
                continue
            for a, b, m in zip(
                getattr(assignment, name)[layer],
                getattr(previous, name)[layer],
                plan.send_mask,
                strict=True,
            ):
                np.testing.assert_array_equal(a[m], b[m])


def test_projected_comm_time_is_the_slowest_channel_per_round():
    """Hand computation on P = 2 (one round, two channels) with unequal pair costs."""
    from jaxgraph.comm.costmodel import CostModel

    plan = _plan(GRAPH, 2)
    dim = 10
    a = BitAssignment.uniform(plan, 1, 4)
    theta = np.array([[0.0, 1.0], [3.0, 0.0]])
    gamma = np.array([[0.0, 0.5], [0.25, 0.0]])
    cost = CostModel(theta=theta, gamma=gamma)
    rows = plan.send_mask[0].sum(axis=1)  # real rows sent by device 0 and 1
    mib = [(-(-int(n) // 2) * dim + 8 * int(n)) / 2**20 for n in rows]
    expect = max(1.0 * mib[0] + 0.5, 3.0 * mib[1] + 0.25)
    got = projected_comm_time(plan, a, (dim,), cost)
    assert set(got) == {"fwd0"}
    assert got["fwd0"] == pytest.approx(expect, rel=1e-12)


def test_frontier_solver_reaches_the_milp_optimum_without_a_mip_solver(monkeypatch):
    """``AssignConfig(solver="frontier")``: each key's objective equals HiGHS's at gap 0,
    and the re-assignment needs no MIP solver (no fallback, no warning)."""
    import warnings

    import cvxpy

    from jaxgraph.comm.assign import SolverFallbackWarning

    plan = _plan(GRAPH, 4)
    dims = (GRAPH.num_features, 8)
    previous = BitAssignment.uniform(plan, 2, 8)
    rng = np.random.default_rng(2)
    traces = {
        d: tuple(tuple(rng.random(m.shape) for m in plan.send_mask) for _ in dims)
        for d in ("fwd", "bwd")
    }
    milp = AdaQP(AssignConfig(lam=0.3, group_size=2, mip_gap=0.0), period=1, chunks=0)
    _, milp_log = milp.controller(plan, dims).solve(Traces(**traces), previous)
    monkeypatch.setattr(cvxpy, "installed_solvers", lambda: ["SCS"])
    frontier = AdaQP(AssignConfig(lam=0.3, group_size=2, solver="frontier"), period=1, chunks=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SolverFallbackWarning)
        assignment, log = frontier.controller(plan, dims).solve(Traces(**traces), previous)
    assert set(log["keys"]) == set(milp_log["keys"]) == {"fwd0", "fwd1", "bwd1"}
    for key, info in log["keys"].items():
        assert info["status"] == "optimal" and not info["used_fallback"]
        assert info["objective"] == pytest.approx(milp_log["keys"][key]["objective"], rel=1e-6)
    assert any(set(v) != {8} for v in log["widths"].values())  # lam = 0.3 trades bits
    with pytest.raises(ValueError, match="solver must be one of"):
        AssignConfig(solver="cplex")


@pytest.mark.parametrize("solver", ["milp", "frontier"])
def test_candidate_widths_bound_the_assignment_and_the_layout(solver):
    """``AssignConfig(widths=(2, 4))``: the first period runs at 4 bits, a solve uses only 2
    and 4 (both solvers reach the same optimum of that program), and the chunked layout has a
    bucket for exactly those widths, so a solved assignment fits it."""
    plan = _plan(GRAPH, 4)
    dims = (GRAPH.num_features, 8)
    config = AssignConfig(lam=0.5, group_size=2, widths=[4, 2], solver=solver, mip_gap=0.0)
    assert config.widths == (2, 4)
    strategy = AdaQP(config, period=1, chunks=2)
    state = strategy.controller(plan, dims).init_state()
    for rounds in state.bits.fwd + state.bits.bwd:
        for bits, mask in zip(rounds, plan.send_mask, strict=True):
            assert set(np.unique(bits[mask])) == {4}
    assert all(layout.widths == (2, 4) for layout in state.layouts.fwd + state.layouts.bwd)
    rng = np.random.default_rng(3)
    traces = {
        d: tuple(tuple(rng.lognormal(0.0, 2.0, m.shape) for m in plan.send_mask) for _ in dims)
        for d in ("fwd", "bwd")
    }
    previous = BitAssignment.uniform(plan, 2, 4)
    assignment, log = strategy.controller(plan, dims).solve(Traces(**traces), previous)
    used = {w for counts in log["widths"].values() for w, n in counts.items() if n}
    assert used == {2, 4}  # λ 0.5 on log-normal traces trades bits: both widths occur
    other = AdaQP(
        AssignConfig(
            lam=0.5,
            group_size=2,
            widths=(2, 4),
            mip_gap=0.0,
            solver="frontier" if solver == "milp" else "milp",
        ),
        period=1,
        chunks=0,
    )
    _, other_log = other.controller(plan, dims).solve(Traces(**traces), previous)
    for key, info in log["keys"].items():
        assert info["objective"] == pytest.approx(other_log["keys"][key]["objective"], rel=1e-6)
    full = AdaQP(AssignConfig(lam=0.5, group_size=2, solver="frontier"), period=1, chunks=0)
    _, full_log = full.controller(plan, dims).solve(Traces(**traces), previous)
    assert any(c[8] for c in full_log["widths"].values())  # without the bound, 8 bits occur
    layout = strategy.controller(plan, dims).state_of(assignment)
    assert all(a.widths == (2, 4) for a in layout.layouts.fwd + layout.layouts.bwd)
    # 8 bits leads when it is a candidate; otherwise the widest candidate does.
    for widths, first in (((4, 8), 8), ((2,), 2)):
        s = AdaQP(AssignConfig(widths=widths), period=1, chunks=0).init_state(plan, dims)
        assert {int(v) for v in np.unique(s.bits.fwd[0][0][plan.send_mask[0]])} == {first}


def test_random_baseline_draws_from_the_candidate_widths():
    from jaxgraph.comm.quantized import Quantized

    plan = _plan(GRAPH, 4)
    narrow = Quantized("random", widths=(4, 2), chunks=2)
    drawn = {
        int(v)
        for rounds in narrow.assignment(plan, 2).fwd
        for bits, mask in zip(rounds, plan.send_mask, strict=True)
        for v in np.unique(bits[mask])
    }
    assert drawn == {2, 4} and narrow.widths == (2, 4)
    assert narrow != Quantized("random", chunks=2)  # a different strategy, another step


@pytest.mark.parametrize("widths", [(), (2, 2), (2, 16), (32,)])
def test_bad_candidate_widths_raise(widths):
    from jaxgraph.comm.quantized import Quantized

    with pytest.raises(ValueError, match="candidate bit-widths must be distinct values"):
        AssignConfig(widths=widths)
    with pytest.raises(ValueError, match="candidate bit-widths must be distinct values"):
        Quantized("random", widths=widths)
