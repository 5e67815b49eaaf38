"""The bit-width program: HiGHS optimum against brute force, limits, fallbacks, grouping."""

import dataclasses
import itertools
import os
import re
import threading
import time
import warnings

import cvxpy
import numpy as np
import pytest

from jaxgraph.comm import assign
from jaxgraph.comm.assign import (
    BITS,
    Channel,
    SolverFallbackWarning,
    expand_bits,
    group_rows,
    make_problem,
    objective_bounds,
    solve,
    solve_brute_force,
)

REL = 1e-6  # objective agreement with brute force: the solve runs with mip_rel_gap = 0


def _random_channels(rng, num_parts, max_rows, scale=1.0):
    return [
        Channel(s, (s + r) % num_parts, r, scale * rng.random(int(rng.integers(0, max_rows + 1))))
        for r in range(1, num_parts)
        for s in range(num_parts)
    ]


def _random_costs(rng, num_parts, unbalanced):
    theta = rng.uniform(5e-4, 2e-3, (num_parts, num_parts))
    gamma = rng.uniform(0.0, 5e-5, (num_parts, num_parts))
    if unbalanced:  # one slow pair per sender, 50x
        for s in range(num_parts):
            theta[s, (s + 1) % num_parts] *= 50.0
    return theta, gamma


def _small_instance(seed, lam):
    """A random instance with 1..8 groups in total."""
    rng = np.random.default_rng(seed)
    while True:
        p = int(rng.choice([2, 3, 4]))
        group_size = int(rng.choice([1, 2, 3]))
        channels = _random_channels(rng, p, max_rows=4 if p < 4 else 2)
        theta, gamma = _random_costs(rng, p, unbalanced=bool(seed % 2))
        problem, groups = make_problem(
            channels,
            dim=int(rng.integers(8, 300)),
            theta=theta,
            gamma=gamma,
            num_parts=p,
            lam=lam,
            group_size=group_size,
        )
        if 1 <= problem.num_groups <= 8:
            return problem, channels, groups


def _assert_valid(problem, solution):
    """One width from ``problem.widths`` per group (the one-hot, after rounding)."""
    assert len(solution.bits) == len(problem.channels)
    for bits, ch in zip(solution.bits, problem.channels, strict=True):
        assert bits.dtype == np.int8 and bits.shape == ch.count.shape
        assert np.isin(bits, problem.widths).all()
    for v in (solution.objective, solution.variance, solution.time):
        assert np.isfinite(v)


@pytest.fixture(params=["whole", "by_round"])
def split(request, monkeypatch):
    """Solve programs whole (the default at these sizes) or force the round-by-round path."""
    if request.param == "by_round":
        monkeypatch.setattr(assign.solving, "JOINT_MAX_GROUPS", 0)
    return request.param


@pytest.mark.parametrize("lam", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("seed", range(5))
def test_milp_optimum_equals_brute_force(seed, lam, split):
    problem, _, _ = _small_instance(seed, lam)
    milp = solve(problem, mip_rel_gap=0.0)
    brute = solve_brute_force(problem)
    _assert_valid(problem, milp)
    assert milp.status == "optimal"
    assert milp.objective == pytest.approx(brute.objective, rel=REL, abs=1e-12)
    # The reported terms are those of the returned bits.
    assert assign.evaluate(problem, milp.bits) == pytest.approx(
        (milp.objective, milp.variance, milp.time), rel=1e-12
    )


@pytest.mark.parametrize("lam", [0.2, 0.7])
def test_round_by_round_solve_equals_the_joint_program(lam, monkeypatch):
    """The rounds share no variable or constraint: solving them one by one reaches the optimum
    of one joint program over every round (both proven optimal, gap 0), on instances well past
    brute force (4 parts, 3 rounds, about 50 groups, unbalanced pairs)."""
    rng = np.random.default_rng(11)
    channels = _random_channels(rng, 4, max_rows=25)
    theta, gamma = _random_costs(rng, 4, unbalanced=True)
    problem, _, _ = _instance(channels, theta, gamma, lam=lam, group_size=3)
    model = assign.problem._model(problem)
    assert model.num_rounds == 3 and problem.num_groups >= 30
    monkeypatch.setattr(assign.solving, "JOINT_MAX_GROUPS", 0)
    joint, joint_status, _ = assign.milp._milp(problem, model, 60.0, 0.0)
    by_round = solve(problem, mip_rel_gap=0.0)
    assert joint_status == "optimal" and by_round.status == "optimal"
    joint_objective = assign.problem._evaluate(model, joint)[0][0]
    assert by_round.objective == pytest.approx(joint_objective, rel=REL, abs=1e-12)


def test_programs_of_one_structure_are_reused_with_new_weights(split):
    """A second program with the same groups and costs but other weights (the next assignment
    of a run) reuses the cached cvxpy programs and still reaches its own optimum, also when
    several threads solve that structure at once."""
    problem, _, _ = _small_instance(3, lam=0.5)
    rng = np.random.default_rng(12)
    reweighted = dataclasses.replace(
        problem,
        channels=tuple(
            dataclasses.replace(c, weight=rng.permutation(c.weight) * 3.0 + 0.1)
            for c in problem.channels
        ),
    )
    assign.milp._PROGRAMS.clear()
    first = solve(problem, mip_rel_gap=0.0)
    cached = dict(assign.milp._PROGRAMS)
    assert len(cached) == (assign.problem._model(problem).num_rounds if split == "by_round" else 1)
    second = solve(reweighted, mip_rel_gap=0.0)
    assert assign.milp._PROGRAMS == cached  # no new program was built
    for p, sol in ((problem, first), (reweighted, second)):
        assert sol.objective == pytest.approx(solve_brute_force(p).objective, rel=REL, abs=1e-12)
    expected = solve_brute_force(reweighted).objective
    out = assign.solve_many({k: reweighted for k in "abcd"}, mip_rel_gap=0.0, max_workers=4)
    for sol in out.values():
        assert sol.objective == pytest.approx(expected, rel=REL, abs=1e-12)


@pytest.mark.parametrize("lam", [0.3, 0.7])
def test_relative_gap_bounds_the_normalized_objective(lam, split):
    """A 1 % gap stops within 1 % of the normalized objective's optimum, also when the
    objective's constant (here the transfers' latency floor, ``T_u`` far above ``T_n - T_u``)
    dwarfs it: the constant is folded into what HiGHS sees."""
    rng = np.random.default_rng(13)
    channels = _random_channels(rng, 4, max_rows=40)
    theta, _ = _random_costs(rng, 4, unbalanced=True)
    gamma = np.full((4, 4), 2e-3)  # latency: every round takes >= 2 ms whatever the widths
    problem, _, _ = _instance(channels, theta, gamma, lam=lam, group_size=2, dim=16)
    bounds = objective_bounds(problem)
    optimum = solve(problem, mip_rel_gap=0.0)
    assert optimum.status == "optimal"
    assert bounds["a_time"] * bounds["time_utopia"] > 10 * optimum.objective
    loose = solve(problem, mip_rel_gap=0.01)
    assert loose.objective <= optimum.objective * 1.01 + 1e-12
    assert loose.mip_gap is not None and loose.mip_gap <= 0.01


def test_lam_one_gives_every_weighted_group_the_widest_width():
    rng = np.random.default_rng(1)
    channels = _random_channels(rng, 4, max_rows=30)
    theta, gamma = _random_costs(rng, 4, unbalanced=True)
    problem, _, _ = _instance(channels, theta, gamma, lam=1.0, group_size=4)
    sol = solve(problem)
    _assert_valid(problem, sol)
    for bits, ch in zip(sol.bits, problem.channels, strict=True):
        assert np.all(bits[ch.weight > 0] == 8)
    small, _, _ = _small_instance(3, lam=1.0)
    assert solve(small).objective == pytest.approx(solve_brute_force(small).objective, abs=1e-12)


def _instance(channels, theta, gamma, *, lam, group_size, dim=64):
    p = theta.shape[0]
    problem, groups = make_problem(
        channels, dim=dim, theta=theta, gamma=gamma, num_parts=p, lam=lam, group_size=group_size
    )
    return problem, channels, groups


def _channel_time(problem, ch, bits):
    """Seconds of one channel at group widths ``bits``, straight from the definition."""
    mib = np.sum(ch.count * (bits.astype(np.float64) * problem.dim / 8 + 8)) / 2**20
    return problem.theta[ch.sender, ch.receiver] * mib + problem.gamma[ch.sender, ch.receiver]


def _bottleneck_time(problem, width, param_bytes=8):
    """``sum_r max_c`` of every non-empty channel at ``width``, straight from the definition
    (a row carries its ``width``-bit codes and ``param_bytes`` of scale and minimum)."""
    worst = {}
    for ch in problem.channels:
        if ch.count.size:
            mib = ch.count.sum() * (width * problem.dim / 8 + param_bytes) / 2**20
            t = problem.theta[ch.sender, ch.receiver] * mib + problem.gamma[ch.sender, ch.receiver]
            worst[ch.round] = max(worst.get(ch.round, 0.0), t)
    return sum(worst.values())


def test_lam_zero_reaches_the_bottleneck_bound():
    rng = np.random.default_rng(2)
    channels = _random_channels(rng, 4, max_rows=40)
    theta, gamma = _random_costs(rng, 4, unbalanced=True)
    problem, _, _ = _instance(channels, theta, gamma, lam=0.0, group_size=5)
    sol = solve(problem, mip_rel_gap=0.0)
    _assert_valid(problem, sol)
    bounds = objective_bounds(problem)
    assert bounds["time_utopia"] == pytest.approx(_bottleneck_time(problem, 2), rel=1e-12)
    assert bounds["time_nadir"] == pytest.approx(_bottleneck_time(problem, 8), rel=1e-12)
    assert sol.time == pytest.approx(bounds["time_utopia"], rel=1e-6)
    small, _, _ = _small_instance(4, lam=0.0)
    assert solve(small, mip_rel_gap=0.0).time == pytest.approx(
        objective_bounds(small)["time_utopia"], rel=1e-6
    )


def test_small_lam_fills_the_slack_under_the_bottleneck():
    # Round 1 of P = 2: 0 -> 1 is 40x slower than 1 -> 0; same rows on both.
    beta = np.array([5.0, 4.0, 3.0, 2.0])
    channels = [Channel(0, 1, 1, beta), Channel(1, 0, 1, beta)]
    theta = np.array([[0.0, 4e-2], [1e-3, 0.0]])
    gamma = np.full((2, 2), 1e-5)
    problem, _, _ = _instance(channels, theta, gamma, lam=0.01, group_size=1, dim=256)
    sol = solve(problem, mip_rel_gap=0.0)
    brute = solve_brute_force(problem)
    assert sol.objective == pytest.approx(brute.objective, rel=REL)
    slow, fast = sol.bits
    assert np.all(slow == 2)
    assert np.all(fast > 2)  # the fast channel gets more bits for free
    t_slow, t_fast = (
        _channel_time(problem, c, b) for c, b in zip(problem.channels, sol.bits, strict=True)
    )
    assert t_fast <= t_slow  # ...but only what fits under the bottleneck


def test_slack_filling_stops_at_the_bottleneck():
    # The fast channel cannot take every group at 8 bits: the optimum mixes widths.
    beta = np.array([8.0, 4.0, 2.0, 1.0])
    channels = [Channel(0, 1, 1, beta), Channel(1, 0, 1, beta)]
    theta = np.array([[0.0, 3e-3], [1e-3, 0.0]])  # 3x: 2 bits slow ~ 6 bits fast on average
    problem, _, _ = _instance(channels, theta, np.zeros((2, 2)), lam=0.01, group_size=1, dim=256)
    sol = solve(problem, mip_rel_gap=0.0)
    assert sol.objective == pytest.approx(solve_brute_force(problem).objective, rel=REL)
    slow, fast = sol.bits
    assert np.all(slow == 2) and np.any(fast > 2) and np.any(fast < 8)


# ---------------------------------------------------------------------- grouping


def test_group_rows_sorts_descending_and_keeps_a_partial_last_group():
    beta = np.array([0.1, 5.0, 3.0, 3.0, 0.2])
    group_of_row, weight, count = group_rows(beta, 2)
    # Sorted: rows 1 (5.0), 2 (3.0), 3 (3.0, tie keeps order), 4 (0.2), 0 (0.1).
    np.testing.assert_array_equal(group_of_row, [2, 0, 0, 1, 1])
    np.testing.assert_allclose(weight, [8.0, 3.2, 0.1])
    np.testing.assert_array_equal(count, [2, 2, 1])
    assert group_of_row.dtype == np.int32 and count.dtype == np.int64
    np.testing.assert_array_equal(expand_bits(group_of_row, [8, 4, 2]), [2, 8, 8, 4, 4])


def test_group_rows_edge_sizes():
    g, w, n = group_rows(np.array([1.0, 3.0, 2.0]), 10)  # group_size > n: one group
    np.testing.assert_array_equal(g, [0, 0, 0])
    np.testing.assert_allclose(w, [6.0])
    np.testing.assert_array_equal(n, [3])
    g, w, n = group_rows(np.zeros(0), 4)  # empty channel: no group
    assert g.shape == (0,) and w.shape == (0,) and n.shape == (0,)
    assert expand_bits(g, np.zeros(0, np.int8)).shape == (0,)
    with pytest.raises(ValueError, match="group_size"):
        group_rows(np.ones(3), 0)
    with pytest.raises(ValueError, match="non-negative"):
        group_rows(np.array([1.0, np.nan]), 2)


def test_assign_bits_expands_groups_to_rows_in_original_order():
    rng = np.random.default_rng(5)
    channels = _random_channels(rng, 3, max_rows=23) + [Channel(0, 2, 2, np.zeros(0))]
    theta, gamma = _random_costs(rng, 3, unbalanced=True)
    kw = dict(dim=32, theta=theta, gamma=gamma, num_parts=3, lam=0.3, group_size=4)
    rows, info = assign.assign_bits(channels, **kw)
    problem, groups = make_problem(channels, **kw)
    sol = solve(problem)
    assert info["objective"] == pytest.approx(sol.objective, rel=1e-9)
    for r, ch, g, bits in zip(rows, channels, groups, sol.bits, strict=True):
        assert r.dtype == np.int8 and r.shape == ch.beta.shape
        for v in range(ch.beta.size):  # each row carries its group's width
            assert r[v] == bits[g[v]]
    assert sum(info["rows_per_width"].values()) == sum(c.beta.size for c in channels)


# ---------------------------------------------------------------------- limits and failures


def test_time_limited_large_instance_returns_a_valid_assignment():
    rng = np.random.default_rng(6)
    p, group_size = 8, 10
    channels = [
        Channel(s, (s + r) % p, r, rng.lognormal(0.0, 2.0, int(rng.integers(300, 420))))
        for r in range(1, p)
        for s in range(p)
    ]
    theta, gamma = _random_costs(rng, p, unbalanced=True)
    problem, _, _ = _instance(channels, theta, gamma, lam=0.5, group_size=group_size, dim=128)
    assert problem.num_groups >= 2000
    t0 = time.perf_counter()
    # 7 rounds of about 300 groups, 3 s for all: each round's HiGHS run stops at 3/7 s.
    sol = solve(problem, time_limit=3.0, mip_rel_gap=0.0)
    assert time.perf_counter() - t0 < 3.0 + 4.0
    assert sol.status in ("optimal", "user_limit") and not sol.used_fallback
    _assert_valid(problem, sol)


def test_no_integer_solution_in_time_falls_back_with_a_warning(split):
    problem, _, _ = _small_instance(0, lam=0.5)
    where = r" \(in every one of the \d ring rounds that carry rows\)"
    where = where if split == "by_round" else ""
    with pytest.warns(SolverFallbackWarning, match=rf"no integer solution[^;]*s\){where};.*8-bit"):
        sol = solve(problem, time_limit=0.0)
    assert sol.used_fallback and sol.status == "fallback"
    assert all(np.all(b == 8) for b in sol.bits)


def test_missing_solver_keeps_the_previous_assignment(monkeypatch):
    monkeypatch.setattr(cvxpy, "installed_solvers", lambda: ["CLARABEL", "SCS"])
    rng = np.random.default_rng(7)
    channels = _random_channels(rng, 3, max_rows=10)
    previous = [rng.choice(BITS, size=c.beta.size).astype(np.int8) for c in channels]
    theta, gamma = _random_costs(rng, 3, unbalanced=False)
    with pytest.warns(
        SolverFallbackWarning, match=r"HIGHS is not installed .*previous bit assignment"
    ):
        rows, info = assign.assign_bits(
            channels,
            dim=16,
            theta=theta,
            gamma=gamma,
            num_parts=3,
            lam=0.5,
            group_size=3,
            fallback=previous,
        )
    for r, prev in zip(rows, previous, strict=True):
        np.testing.assert_array_equal(r, prev)
    assert info["used_fallback"] and np.isfinite(info["objective"])


def test_a_round_without_a_solution_keeps_its_fallback_alone(monkeypatch):
    """Solved round by round, a round that finds nothing keeps the previous widths of its
    channels; the other rounds keep their solutions, and the warning names the round."""
    monkeypatch.setattr(assign.solving, "JOINT_MAX_GROUPS", 0)
    rng = np.random.default_rng(14)
    channels = _random_channels(rng, 4, max_rows=12)
    previous = [np.full(c.beta.size, 2, np.int8) for c in channels]
    theta, gamma = _random_costs(rng, 4, unbalanced=False)
    kwargs = dict(dim=16, theta=theta, gamma=gamma, num_parts=4, lam=0.5, group_size=2)
    solved, _ = assign.assign_bits(channels, **kwargs, fallback=previous, time_limit=5.0)
    milp, calls = assign.milp._milp, []

    def first_round_fails(problem, part, *args):
        calls.append(part)
        if len(calls) == 1:  # solve() runs the rounds in order: round 1 first
            raise assign.problem._NoSolution("no integer solution (test)")
        return milp(problem, part, *args)

    monkeypatch.setattr(assign.solving, "_milp", first_round_fails)
    with pytest.warns(SolverFallbackWarning, match=r"round 1 of the 3 ring rounds.*previous"):
        rows, info = assign.assign_bits(channels, **kwargs, fallback=previous, time_limit=5.0)
    assert len(calls) == 3 and not info["used_fallback"]
    first = min(c.round for c in channels if c.beta.size)
    for ch, r, prev, ref in zip(channels, rows, previous, solved, strict=True):
        np.testing.assert_array_equal(r, prev if ch.round == first else ref)
    first_solved = [ref for ch, ref in zip(channels, solved, strict=True) if ch.round == first]
    assert any(np.any(ref != 2) for ref in first_solved)  # the kept widths differ from a solve


def test_solver_error_falls_back(monkeypatch):
    def broken(*args, **kwargs):
        raise cvxpy.error.SolverError("HiGHS crashed")

    monkeypatch.setattr(cvxpy.Problem, "get_problem_data", broken)
    problem, _, _ = _small_instance(1, lam=0.5)
    with pytest.warns(SolverFallbackWarning, match="HIGHS raised SolverError: HiGHS crashed"):
        sol = solve(problem, fallback=4)
    assert all(np.all(b == 4) for b in sol.bits)
    with pytest.warns(SolverFallbackWarning, match="for k1"):
        out = assign.solve_many({"k1": problem}, fallback=2)
    assert all(np.all(b == 2) for b in out["k1"].bits)


# ---------------------------------------------------------------------- degenerate inputs


def _zero_weight_instance():
    """Channels whose rows all have weight 0 (3 parts), and random pair costs."""
    rng = np.random.default_rng(8)
    zeros = [
        Channel(c.sender, c.receiver, c.round, 0.0 * c.beta)
        for c in _random_channels(rng, 3, max_rows=6)
    ]
    return zeros, *_random_costs(rng, 3, unbalanced=False)


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_zero_weights_and_free_transfers_give_finite_objectives(lam):
    zeros, theta, gamma = _zero_weight_instance()
    for th, ga in ((theta, gamma), (np.zeros((3, 3)), np.zeros((3, 3)))):
        problem, _, _ = _instance(zeros, th, ga, lam=lam, group_size=2)
        sol = solve(problem, mip_rel_gap=0.0)
        _assert_valid(problem, sol)
        if lam == 1.0 or not th.any():
            assert all(np.all(b == 8) for b in sol.bits)  # nothing to trade: widest
        bounds = objective_bounds(problem)
        assert all(np.isfinite(v) for v in bounds.values())
        if problem.num_groups <= 8:
            assert sol.objective == pytest.approx(solve_brute_force(problem).objective, abs=1e-9)


def test_identical_channel_costs():
    rng = np.random.default_rng(9)
    channels = _random_channels(rng, 4, max_rows=8)
    problem, _, _ = _instance(
        channels, np.full((4, 4), 1e-3), np.full((4, 4), 1e-5), lam=0.5, group_size=4
    )
    sol = solve(problem, mip_rel_gap=0.0)
    _assert_valid(problem, sol)
    single, _, _ = _instance(
        channels[:1], np.full((4, 4), 1e-3), np.full((4, 4), 1e-5), lam=0.5, group_size=1
    )
    assert solve(single).objective == pytest.approx(solve_brute_force(single).objective, abs=1e-9)


def test_empty_problem_and_single_width():
    theta = np.full((2, 2), 1e-3)
    empty, _, _ = _instance([Channel(0, 1, 1, np.zeros(0))], theta, theta, lam=0.5, group_size=2)
    sol = solve(empty)
    assert sol.status == "empty" and sol.bits[0].shape == (0,) and sol.objective == 0.0
    one = assign.Problem(
        channels=(assign.ChannelGroups(0, 1, 1, np.array([1.0]), np.array([3])),),
        dim=8,
        theta=theta,
        gamma=theta,
        lam=0.5,
        num_parts=2,
        widths=(4,),
    )
    assert solve(one).bits[0].tolist() == [4]


def test_solve_many_and_solve_channels_match_single_solves():
    rng = np.random.default_rng(10)
    theta, gamma = _random_costs(rng, 3, unbalanced=True)
    specs = {f"fwd{i}": (_random_channels(rng, 3, max_rows=12), 16 * (i + 1)) for i in range(3)}
    kw = dict(theta=theta, gamma=gamma, num_parts=3, lam=0.5, group_size=3)
    out = assign.solve_channels(specs, mip_rel_gap=0.0, max_workers=3, **kw)
    problems = {k: make_problem(ch, dim=d, **kw)[0] for k, (ch, d) in specs.items()}
    many = assign.solve_many(problems, mip_rel_gap=0.0, max_workers=3)
    for key, problem in problems.items():
        single = solve(problem, mip_rel_gap=0.0)
        assert many[key].objective == pytest.approx(single.objective, rel=REL)
        rows, info = out[key]
        assert info["objective"] == pytest.approx(single.objective, rel=REL)
        assert [r.shape for r in rows] == [c.beta.shape for c in specs[key][0]]


def test_solves_after_the_caller_ran_highs_with_its_own_thread_count():
    """HiGHS keeps one scheduler per calling thread, sized by its first run, and fails a later
    run on that thread that asks for another size. The program's solves ask for one thread, so
    they must never run on the caller's thread, which may have used HiGHS already (here: with
    its default thread count), even when one worker does all of them."""
    x = cvxpy.Variable(3, boolean=True)
    warm = cvxpy.Problem(cvxpy.Minimize(np.array([1.0, 2.0, 3.0]) @ x), [cvxpy.sum(x) >= 2])
    warm.solve(solver=assign.SOLVER)
    assert warm.value == pytest.approx(3.0)
    problem, _, _ = _small_instance(3, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SolverFallbackWarning)
        milp = solve(problem, mip_rel_gap=0.0)
        many = assign.solve_many({"a": problem}, mip_rel_gap=0.0, max_workers=1)
    expected = solve_brute_force(problem).objective
    for sol in (milp, many["a"]):
        assert sol.status == "optimal"
        assert sol.objective == pytest.approx(expected, rel=REL, abs=1e-12)
    warm.solve(solver=assign.SOLVER)  # and the caller's own HiGHS use still works after ours
    assert warm.status == "optimal"


def test_bad_problems_raise():
    theta = np.full((2, 2), 1e-3)
    ch = [Channel(0, 1, 1, np.ones(2))]
    with pytest.raises(ValueError, match="lam"):
        make_problem(ch, dim=8, theta=theta, gamma=theta, num_parts=2, lam=1.5, group_size=1)
    with pytest.raises(ValueError, match=r"theta must have shape \[P, P\]"):
        make_problem(ch, dim=8, theta=theta, gamma=theta, num_parts=3, lam=0.5, group_size=1)
    with pytest.raises(ValueError, match="distinct devices"):
        make_problem(
            [Channel(1, 1, 1, np.ones(2))],
            dim=8,
            theta=theta,
            gamma=theta,
            num_parts=2,
            lam=0.5,
            group_size=1,
        )
    problem, _ = make_problem(
        ch, dim=8, theta=theta, gamma=theta, num_parts=2, lam=0.5, group_size=1
    )
    with pytest.raises(ValueError, match="time_limit"):
        solve(problem, time_limit=-1.0)
    with pytest.raises(ValueError, match="fallback width"):
        solve(problem, fallback=3)


# ---------------------------------------------------------------------- the frontier solver


def _mixed_problem(seed, lam, widths=BITS):
    """Groups of arbitrary sizes (not make_problem's equal sizes), so no ordering argument
    applies: the frontier's dynamic program must be exact by itself."""
    rng = np.random.default_rng(seed)
    p = 3
    channels = []
    for r in range(1, p):
        for s in range(p):
            g = int(rng.integers(0, 3))
            channels.append(
                assign.ChannelGroups(
                    s,
                    (s + r) % p,
                    r,
                    rng.random(g) * rng.choice([1e-3, 1.0]),
                    rng.integers(1, 9, g),
                )
            )
    theta, gamma = _random_costs(rng, p, unbalanced=True)
    problem = assign.Problem(
        channels=tuple(channels),
        dim=int(rng.integers(4, 200)),
        theta=theta,
        gamma=gamma,
        lam=lam,
        num_parts=p,
        widths=widths,
    )
    return problem


@pytest.mark.parametrize("lam", [0.0, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("seed", range(5))
def test_frontier_optimum_equals_brute_force(seed, lam):
    problem, _, _ = _small_instance(seed, lam)
    frontier = solve(problem, solver="frontier")
    brute = solve_brute_force(problem)
    _assert_valid(problem, frontier)
    assert frontier.status == "optimal" and frontier.mip_gap == 0.0
    assert frontier.objective == pytest.approx(brute.objective, rel=1e-9, abs=1e-12)
    assert assign.evaluate(problem, frontier.bits) == pytest.approx(
        (frontier.objective, frontier.variance, frontier.time), rel=1e-12
    )


@pytest.mark.parametrize("widths", [BITS, (2, 4, 8, 32), (4, 8)])
@pytest.mark.parametrize("seed", range(4))
def test_frontier_is_exact_for_groups_of_any_size(seed, widths):
    problem = _mixed_problem(seed, lam=0.4, widths=widths)
    if problem.num_groups > 8 or problem.num_groups == 0:
        problem = _mixed_problem(seed + 100, lam=0.4, widths=widths)
    assert 1 <= problem.num_groups <= 8
    frontier = solve(problem, solver="frontier")
    brute = solve_brute_force(problem)
    assert frontier.objective == pytest.approx(brute.objective, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    ("seed", "widths", "dim"),
    [
        (21, BITS, 16),
        (22, BITS, 3),
        (23, (2, 4, 8, 32), 2),
        (24, (2, 4, 8, 32), 40),
        (25, (4, 8), 5),
    ],
)
def test_channel_frontier_holds_the_least_variance_at_each_load(seed, widths, dim):
    """Every frontier point is the least variance of all width choices within its load; every
    choice is dominated by the frontier point of the largest load it reaches; loads ascend
    and variances strictly descend; each point's choice reproduces it. Seven groups, most of
    one size (the dynamic program of a size class) and some of others (classes combined);
    at D = 2 a raw 32-bit row is cheaper than an 8-bit one."""
    rng = np.random.default_rng(seed)
    num_groups, widths = 7, np.array(widths)
    counts = np.where(rng.random(num_groups) < 0.7, 3, rng.integers(1, 6, num_groups))
    var = rng.random(num_groups)[:, None] * np.where(
        widths == 32, 0.0, 1.0 / (2.0**widths - 1) ** 2
    )
    var[rng.integers(num_groups)] = 0.0  # a group of zero weight
    per_row = np.where(widths == 32, 32 * dim, widths * dim + 64)
    load = counts[:, None] * per_row[None, :]
    loads, variances, choice = assign.frontier._channel_frontier(var, counts, per_row)
    assert np.all(np.diff(loads) > 0) and np.all(np.diff(variances) < 0)
    rows = np.arange(num_groups)
    for k in range(loads.size):
        assert load[rows, choice[k]].sum() == loads[k]
        assert var[rows, choice[k]].sum() == pytest.approx(variances[k], rel=1e-12)
    everything = np.array(list(itertools.product(range(widths.size), repeat=num_groups)))
    all_loads = load[rows, everything].sum(axis=1)
    all_vars = var[rows, everything].sum(axis=1)
    for k in range(loads.size):
        assert variances[k] == pytest.approx(all_vars[all_loads <= loads[k]].min(), rel=1e-12)
    reach = np.searchsorted(loads, all_loads, side="right") - 1
    assert np.all(reach >= 0)
    assert np.all(variances[reach] <= all_vars * (1 + 1e-12))


@pytest.mark.parametrize("lam", [0.0, 0.2, 0.7, 0.99])
def test_frontier_equals_the_proven_milp_optimum(lam):
    """Past brute force (4 parts, about 100 groups, unbalanced pairs, a latency floor): the
    frontier's objective equals HiGHS's at gap 0, on both of HiGHS's paths."""
    rng = np.random.default_rng(22)
    channels = _random_channels(rng, 4, max_rows=30)
    theta, gamma = _random_costs(rng, 4, unbalanced=True)
    gamma += 2e-4
    problem, _, _ = _instance(channels, theta, gamma, lam=lam, group_size=2, dim=32)
    assert problem.num_groups >= 60
    frontier = solve(problem, solver="frontier")
    milp = solve(problem, mip_rel_gap=0.0, time_limit=60.0)
    assert milp.status == "optimal"
    assert frontier.objective == pytest.approx(milp.objective, rel=1e-6, abs=1e-9)
    if lam == 0.0:
        assert frontier.time == pytest.approx(objective_bounds(problem)["time_utopia"], rel=1e-12)


def test_frontier_lies_within_the_milp_gap_on_a_large_program():
    """On 8 parts and about 900 groups HiGHS stops at a 1 % gap: its objective bounds the
    exact optimum from above, and (1 - gap) times it bounds it from below."""
    rng = np.random.default_rng(23)
    channels = [
        Channel(s, (s + r) % 8, r, rng.lognormal(0.0, 2.0, int(rng.integers(40, 90))))
        for r in range(1, 8)
        for s in range(8)
    ]
    theta, gamma = _random_costs(rng, 8, unbalanced=True)
    problem, _, _ = _instance(channels, theta, gamma, lam=0.5, group_size=4, dim=64)
    assert problem.num_groups >= 800
    frontier = solve(problem, solver="frontier")
    milp = solve(problem, mip_rel_gap=0.01, time_limit=30.0)
    assert milp.status == "optimal"
    assert frontier.objective <= milp.objective * (1 + 1e-9)
    assert frontier.objective >= milp.objective * (1 - 0.01) - 1e-12
    _assert_valid(problem, frontier)


def test_frontier_needs_no_mip_solver(monkeypatch):
    monkeypatch.setattr(cvxpy, "installed_solvers", lambda: ["SCS"])
    problem, _, _ = _small_instance(2, lam=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SolverFallbackWarning)
        sol = solve(problem, solver="frontier")
    assert sol.status == "optimal" and not sol.used_fallback
    assert sol.objective == pytest.approx(solve_brute_force(problem).objective, abs=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_frontier_degenerate_programs(lam):
    """Zero weights (variance term dropped), free transfers (time term dropped, fast path),
    an empty program and a single width."""
    zeros, theta, gamma = _zero_weight_instance()
    for th, ga in ((theta, gamma), (np.zeros((3, 3)), np.zeros((3, 3)))):
        problem, _, _ = _instance(zeros, th, ga, lam=lam, group_size=2)
        sol = solve(problem, solver="frontier")
        _assert_valid(problem, sol)
        if lam == 1.0 or not th.any():
            assert all(np.all(b == 8) for b in sol.bits)
        else:  # weights all zero: only time counts, and it reaches the bottleneck bound
            assert sol.time == pytest.approx(objective_bounds(problem)["time_utopia"], rel=1e-12)
    theta = np.full((2, 2), 1e-3)
    empty, _, _ = _instance([Channel(0, 1, 1, np.zeros(0))], theta, theta, lam=lam, group_size=2)
    assert solve(empty, solver="frontier").status == "empty"


def test_frontier_bad_input_raises(monkeypatch):
    problem, _, _ = _small_instance(0, lam=0.5)
    with pytest.raises(ValueError, match=r"solver must be one of \('milp', 'frontier'\)"):
        solve(problem, solver="highs")
    monkeypatch.setattr(assign.frontier, "FRONTIER_MAX_POINTS", 1)
    with pytest.raises(ValueError, match=r"more than 1 .*solver='milp'"):
        solve(problem, solver="frontier")


def test_solve_channels_with_the_frontier_matches_single_solves():
    rng = np.random.default_rng(10)
    theta, gamma = _random_costs(rng, 3, unbalanced=True)
    specs = {f"fwd{i}": (_random_channels(rng, 3, max_rows=12), 16 * (i + 1)) for i in range(3)}
    kw = dict(theta=theta, gamma=gamma, num_parts=3, lam=0.5, group_size=3)
    out = assign.solve_channels(specs, solver="frontier", **kw)
    for key, (chans, dim) in specs.items():
        problem, groups = make_problem(chans, dim=dim, **kw)
        milp = solve(problem, mip_rel_gap=0.0)
        rows, info = out[key]
        assert info["status"] == "optimal" and info["mip_gap"] == 0.0
        assert info["objective"] == pytest.approx(milp.objective, rel=REL, abs=1e-12)
        assert [r.shape for r in rows] == [c.beta.shape for c in chans]


@pytest.mark.parametrize("solver", ["milp", "frontier"])
def test_bfloat16_row_parameters_in_the_row_time(solver):
    """With 4-byte row parameters (bfloat16 scale and offset) a row at ``b`` bits costs
    ``b D + 32`` bits instead of ``b D + 64``: every assignment's modelled time falls, and both
    solvers still find the brute-force optimum of that program."""
    fp32, _, _ = _small_instance(3, 0.5)
    bf16 = dataclasses.replace(fp32, param_bytes=4)
    bits = solve_brute_force(fp32).bits
    assert assign.evaluate(bf16, bits)[2] < assign.evaluate(fp32, bits)[2]
    best = solve_brute_force(bf16)
    got = solve(bf16, solver=solver, mip_rel_gap=0.0)
    assert got.objective == pytest.approx(best.objective, rel=REL, abs=1e-12)
    with pytest.raises(ValueError, match="param_bytes must be 4 or 8, got 3"):
        dataclasses.replace(fp32, param_bytes=3)


# ---------------------------------------------------------------------- validation and messages

_THETA = np.full((2, 2), 1e-3)
_GROUP = assign.ChannelGroups(0, 1, 1, np.array([1.0]), np.array([1]))


def _problem(**changes):
    """A valid one-group program of 2 parts, with ``changes`` applied."""
    fields = dict(channels=(_GROUP,), dim=8, theta=_THETA, gamma=_THETA, lam=0.5, num_parts=2)
    return assign.Problem(**{**fields, **changes})


def _groups(sender=0, receiver=1, rnd=1, weight=(1.0,), count=(1,)):
    return (assign.ChannelGroups(sender, receiver, rnd, np.array(weight), np.array(count)),)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(param_bytes=3), "param_bytes must be 4 or 8, got 3"),
        (dict(num_parts=0, channels=()), "num_parts must be at least 1, got 0"),
        (dict(dim=0), "dim must be at least 1, got 0"),
        (dict(lam=-0.1), "lam must lie in [0, 1], got -0.1"),
        (dict(lam=1.5), "lam must lie in [0, 1], got 1.5"),
        (dict(widths=(4, 2)), "widths must be distinct and ascending, got (4, 2)"),
        (dict(widths=(2, 2, 4)), "widths must be distinct and ascending, got (2, 2, 4)"),
        (dict(widths=()), "widths must be distinct and ascending, got ()"),
        (dict(widths=(2, 3)), "widths must be drawn from (2, 4, 8, 32), got (2, 3)"),
        (dict(theta=np.ones((3, 3))), "theta must have shape [P, P] = [2, 2], got (3, 3)"),
        (dict(gamma=np.ones(2)), "gamma must have shape [P, P] = [2, 2], got (2,)"),
        (
            dict(theta=np.array([[0.0, np.nan], [1.0, 0.0]])),
            "theta must be finite and non-negative",
        ),
        (dict(theta=np.array([[0.0, -1.0], [1.0, 0.0]])), "theta must be finite and non-negative"),
        (
            dict(gamma=np.array([[0.0, np.inf], [1.0, 0.0]])),
            "gamma must be finite and non-negative",
        ),
        (dict(gamma=np.array([[0.0, 1.0], [-1e-9, 0.0]])), "gamma must be finite and non-negative"),
        (
            dict(channels=_groups(receiver=2)),
            "channel 0 -> 2 is not a pair of distinct devices of 2",
        ),
        (
            dict(channels=_groups(sender=-1)),
            "channel -1 -> 1 is not a pair of distinct devices of 2",
        ),
        (
            dict(channels=_groups(receiver=0)),
            "channel 0 -> 0 is not a pair of distinct devices of 2",
        ),
        (dict(channels=_groups(rnd=2)), "round 2 is outside 1..1"),
        (dict(channels=_groups(rnd=0)), "round 0 is outside 1..1"),
        (
            dict(channels=_groups(weight=(1.0, 2.0))),
            "weight (2,) and count (1,) must be equal 1-D shapes",
        ),
        (dict(channels=_groups(weight=(np.nan,))), "group weights must be finite and non-negative"),
        (dict(channels=_groups(weight=(-1.0,))), "group weights must be finite and non-negative"),
        (dict(channels=_groups(count=(0,))), "every group must hold at least one row"),
    ],
)
def test_problem_rejects_each_bad_field_with_its_message(changes, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _problem(**changes)


def test_problem_accepts_the_edges_of_its_ranges_and_converts_its_arrays():
    """One part (no channel), ``D = 1``, the last ring round ``P - 1``, and ``lam`` at 0 and 1
    are valid; integer costs and weights become ``float64``, counts ``int64``."""
    assert _problem(num_parts=1, channels=(), theta=np.zeros((1, 1)), gamma=np.zeros((1, 1)))
    assert _problem(dim=1).dim == 1
    assert _problem(lam=0.0).lam == 0.0 and _problem(lam=1.0).lam == 1.0
    three = np.ones((3, 3), np.int32)
    problem = _problem(channels=_groups(0, 2, rnd=2), theta=three, gamma=three, num_parts=3)
    assert problem.theta.dtype == np.float64 and problem.gamma.dtype == np.float64
    np.testing.assert_array_equal(problem.theta, np.ones((3, 3)))
    group = assign.ChannelGroups(0, 1, 1, [3, 1], np.array([2, 5], np.int32))
    assert group.weight.dtype == np.float64 and group.count.dtype == np.int64
    np.testing.assert_array_equal(group.weight, [3.0, 1.0])
    np.testing.assert_array_equal(group.count, [2, 5])


def test_evaluate_rejects_bits_that_do_not_fit_the_groups():
    problem = _problem(channels=_groups(weight=(1.0, 2.0), count=(1, 1)))
    assert assign.evaluate(problem, [np.array([2, 2])])[0] == pytest.approx(0.5)
    for bits in ([np.array([2, 3])], [np.array([2, 9])], [np.array([2])], [np.array([2, 2, 2])]):
        with pytest.raises(
            ValueError, match=r"^bits must give one width in \(2, 4, 8\) per group$"
        ):
            assign.evaluate(problem, bits)
    with pytest.raises(ValueError, match="^2 bit arrays for 1 channels$"):
        assign.evaluate(problem, [np.array([2, 2]), np.array([2])])


def test_row_fallback_is_checked_against_the_rows():
    channels = [Channel(0, 1, 1, np.ones(3)), Channel(1, 0, 1, np.ones(2))]
    kw = dict(dim=8, theta=_THETA, gamma=_THETA, num_parts=2, lam=0.5, group_size=2)
    shared = {k: v for k, v in kw.items() if k != "dim"}
    good = [np.full(3, 4, np.int8), np.full(2, 4, np.int8)]
    for fallback, message in [
        (good[:1], "fallback has 1 channels, the key has 2"),
        ([good[0], np.full(3, 4)], "fallback widths (3,) do not match the rows (2,)"),
        ([good[0], np.array([4, 5])], "fallback widths must be drawn from (2, 4, 8, 32)"),
    ]:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            assign.assign_bits(channels, **kw, fallback=fallback)
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            assign.solve_channels({"k": (channels, 8)}, **shared, fallback={"k": fallback})


# ---------------------------------------------------------------------- statuses and bounds


def test_trivial_programs_report_their_status_and_zero_bounds():
    """A program without rows is ``"empty"`` for every solver, with all-zero bounds and terms;
    a program without time to trade (``lam = 1``) takes the fast path; brute force says so."""
    empty = _problem(channels=_groups(weight=(), count=()))
    zeros = dict.fromkeys(
        ("variance_nadir", "variance_utopia", "time_nadir", "time_utopia", "a_var", "a_time"), 0.0
    )
    assert objective_bounds(empty) == zeros
    assert assign.evaluate(empty, [np.zeros(0, np.int8)]) == (0.0, 0.0, 0.0)
    for sol in (solve_brute_force(empty), solve(empty), solve(empty, solver="frontier")):
        assert sol.status == "empty" and (sol.objective, sol.variance, sol.time) == (0, 0, 0)
        assert sol.bits[0].shape == (0,) and sol.bits[0].dtype == np.int8
    rows, info = assign.assign_bits(
        [], dim=8, theta=_THETA, gamma=_THETA, num_parts=2, lam=0.5, group_size=1
    )
    assert rows == [] and info["status"] == "empty" and info["rows_per_width"] == {}
    one = _problem(lam=1.0)
    assert solve(one).status == "fast_path" and solve(one).bits[0].tolist() == [8]
    # lam = 1/2: 2 bits cost 1/2 (variance), 8 bits 1/2 (time), 4 bits about 0.02 + 1/6.
    brute = solve_brute_force(_problem())
    assert brute.status == "brute_force" and brute.bits[0].tolist() == [4]


@pytest.mark.parametrize("widths", [BITS, (2, 4, 8, 32)])
def test_objective_bounds_of_one_group_by_hand(widths):
    """One group of 3 rows, weight 9, D = 8: ``V = 9 / (2^b - 1)^2`` (0 for raw fp32 rows);
    a row is ``b D + 64`` bits (``32 D`` raw), at ``theta = 2`` s/MiB and no latency."""
    theta = np.array([[0.0, 2.0], [0.0, 0.0]])
    problem = _problem(
        channels=_groups(weight=(9.0,), count=(3,)),
        theta=theta,
        gamma=np.zeros((2, 2)),
        widths=widths,
        lam=0.3,
    )
    widest = 32 * 8 if widths[-1] == 32 else 8 * 8 + 64
    v_n, v_u = 9.0 / 3.0**2, (0.0 if widths[-1] == 32 else 9.0 / 255.0**2)
    t_n, t_u = (2.0 * 3 * bits / 8 / 2**20 for bits in (widest, 2 * 8 + 64))
    bounds = objective_bounds(problem)
    assert bounds == pytest.approx(
        dict(
            variance_nadir=v_n,
            variance_utopia=v_u,
            time_nadir=t_n,
            time_utopia=t_u,
            a_var=0.3 / (v_n - v_u),
            a_time=0.7 / (t_n - t_u),
        ),
        rel=1e-12,
    )
    assert bounds["variance_utopia"] == v_u  # exactly 0 for raw rows
    assert assign.evaluate(problem, [np.array([widths[-1]])])[1] == v_u


def test_group_rows_and_expand_bits_keep_their_dtypes():
    """Unsigned weights sort as numbers (not as their negation's wrap-around), and widths given
    as a list still expand to ``int8`` rows."""
    group_of_row, weight, count = group_rows(np.array([0, 5, 2], np.uint8), 1)
    np.testing.assert_array_equal(group_of_row, [2, 0, 1])
    np.testing.assert_array_equal(weight, [5.0, 2.0, 0.0])
    assert weight.dtype == np.float64 and count.dtype == np.int64
    rows = expand_bits(np.array([1, 0, 1]), [8, 4])
    assert rows.dtype == np.int8 and rows.tolist() == [4, 8, 4]


# ---------------------------------------------------------------------- fallbacks


def _no_highs(monkeypatch):
    monkeypatch.setattr(cvxpy, "installed_solvers", lambda: ["CLARABEL", "SCS"])


def _one_round(widths=BITS):
    """Round 1 of 2 parts: two channels of 3 rows, weights 3, 2, 1 (group size 2: groups of 2
    and 1 rows)."""
    beta = np.array([3.0, 1.0, 2.0])
    channels = [Channel(0, 1, 1, beta), Channel(1, 0, 1, 2.0 * beta)]
    theta = np.array([[0.0, 2e-2], [1e-3, 0.0]])
    gamma = np.full((2, 2), 1e-5)
    kw = dict(dim=16, theta=theta, gamma=gamma, num_parts=2, lam=0.4, group_size=2)
    return channels, {**kw, "widths": widths}


def test_missing_solver_keeps_each_kind_of_fallback(monkeypatch):
    """Without HiGHS every entry point keeps its fallback, with status ``"fallback"`` and a
    warning naming what is kept: one width, the widest of the program's widths, per-channel
    group widths, or per-channel row widths."""
    _no_highs(monkeypatch)
    channels, kw = _one_round()
    problem, _ = make_problem(channels, **kw)
    groups = [np.array([4, 2], np.int8), np.array([8, 4], np.int8)]
    with pytest.warns(SolverFallbackWarning, match="; keeping the previous bit assignment$"):
        sol = solve(problem, fallback=groups)
    assert sol.status == "fallback" and sol.used_fallback and sol.fallback_channels == (0, 1)
    assert [b.tolist() for b in sol.bits] == [[4, 2], [8, 4]]
    assert sol.objective == assign.evaluate(problem, groups)[0]

    with pytest.warns(SolverFallbackWarning, match="HIGHS is not installed.*; using uniform 4-bit"):
        rows, info = assign.assign_bits(channels, **kw, fallback=4)
    assert [r.tolist() for r in rows] == [[4, 4, 4], [4, 4, 4]]
    assert info["status"] == "fallback" and info["used_fallback"]

    wide_channels, wide = _one_round(widths=(2, 4, 8, 32))
    with pytest.warns(SolverFallbackWarning, match="; using uniform 32-bit widths$"):
        rows, info = assign.assign_bits(wide_channels, **wide)
    assert [r.tolist() for r in rows] == [[32, 32, 32], [32, 32, 32]]

    specs = {"k": (channels, kw["dim"])}
    shared = {k: v for k, v in kw.items() if k != "dim"}
    with pytest.warns(SolverFallbackWarning, match="for k; using uniform 2-bit widths$"):
        out = assign.solve_channels(specs, **shared, fallback=2)
    assert [r.tolist() for r in out["k"][0]] == [[2, 2, 2], [2, 2, 2]]
    with pytest.warns(SolverFallbackWarning, match="for k; using uniform 2-bit widths$"):
        many = assign.solve_many({"k": problem}, fallback=2)
    assert [b.tolist() for b in many["k"].bits] == [[2, 2], [2, 2]]


def test_kept_row_fallback_is_scored_on_the_seed_objective(monkeypatch):
    """Previous rows at the narrowest width are the variance nadir and the time utopia: the
    objective is ``lam`` exactly, the variance ``sum beta / 3^2`` and the time the narrowest
    bottleneck; the log carries the program's bounds."""
    _no_highs(monkeypatch)
    channels, kw = _one_round()
    previous = [np.full(3, 2, np.int8), np.full(3, 2, np.int8)]
    specs = {"k": (channels, kw["dim"])}
    shared = {k: v for k, v in kw.items() if k != "dim"}
    with pytest.warns(SolverFallbackWarning, match="for k; keeping the previous bit assignment$"):
        out = assign.solve_channels(specs, **shared, fallback={"k": previous})
    with pytest.warns(SolverFallbackWarning, match="; keeping the previous bit assignment$"):
        single = assign.assign_bits(channels, **kw, fallback=previous)
    problem, _ = make_problem(channels, **kw)
    beta = np.concatenate([c.beta for c in channels])
    for rows, info in (out["k"], single):
        assert [r.tolist() for r in rows] == [p.tolist() for p in previous]
        assert info["status"] == "fallback" and info["used_fallback"]
        assert info["objective"] == pytest.approx(kw["lam"], rel=1e-12)
        assert info["variance"] == pytest.approx(beta.sum() / 9.0, rel=1e-12)
        assert info["time"] == pytest.approx(_bottleneck_time(problem, 2), rel=1e-12)
        assert info["variance_nadir"] == pytest.approx(beta.sum() / 9.0, rel=1e-12)
        assert info["variance_utopia"] == pytest.approx(beta.sum() / 255.0**2, rel=1e-12)
        assert info["time_nadir"] == pytest.approx(_bottleneck_time(problem, 8), rel=1e-12)
        assert info["time_utopia"] == pytest.approx(_bottleneck_time(problem, 2), rel=1e-12)
        assert info["groups"] == 4 and info["rows_per_width"] == {2: 6}


def test_kept_rows_outside_the_programs_widths_are_scored_and_returned_as_int8(monkeypatch):
    """Previous rows at 32 bits (raw fp32, not among the program's widths) are kept as given,
    as ``int8`` rows whatever the caller's dtype, scored with 32 among the widths (variance 0,
    the widest time), and the log names its cause and solve time."""
    _no_highs(monkeypatch)
    channels, kw = _one_round()
    previous = [np.full(3, 32, np.int64), np.full(3, 32, np.int64)]
    with pytest.warns(SolverFallbackWarning, match="keeping the previous bit assignment$"):
        rows, info = assign.assign_bits(channels, **kw, fallback=previous)
    assert [r.dtype for r in rows] == [np.int8, np.int8]
    assert [r.tolist() for r in rows] == [[32] * 3, [32] * 3]
    problem, _ = make_problem(channels, **{**kw, "widths": (2, 4, 8, 32)})
    assert info["variance"] == 0.0
    # Raw fp32 rows carry no (scale, lo): 4 * dim bytes a row.
    assert info["time"] == pytest.approx(_bottleneck_time(problem, 32, 0), rel=1e-12)
    assert info["rows_per_width"] == {32: 6}
    assert info["cause"] and info["solve_seconds"] >= 0.0


def test_kept_row_fallback_is_timed_with_the_runs_row_parameters(monkeypatch):
    """bfloat16 row parameters (4 bytes a row): the kept assignment's logged time is the
    narrowest bottleneck at 4 bytes a row, as the program's own bounds are."""
    _no_highs(monkeypatch)
    channels, kw = _one_round()
    previous = [np.full(3, 2, np.int8), np.full(3, 2, np.int8)]
    shared = {k: v for k, v in kw.items() if k != "dim"}
    with pytest.warns(SolverFallbackWarning, match="keeping the previous bit assignment$"):
        out = assign.solve_channels(
            {"k": (channels, kw["dim"])}, **shared, fallback={"k": previous}, param_bytes=4
        )
    problem, _ = make_problem(channels, **kw, param_bytes=4)
    _, info = out["k"]
    assert info["time"] == pytest.approx(_bottleneck_time(problem, 2, 4), rel=1e-12)
    assert info["time_utopia"] == pytest.approx(_bottleneck_time(problem, 2, 4), rel=1e-12)
    assert info["time"] < _bottleneck_time(problem, 2)


def test_frontier_through_solve_many_needs_no_mip_solver(monkeypatch):
    _no_highs(monkeypatch)
    problem, _, _ = _small_instance(2, lam=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SolverFallbackWarning)
        out = assign.solve_many({"a": problem}, solver="frontier")
    assert out["a"].status == "optimal" and not out["a"].used_fallback
    assert out["a"].objective == pytest.approx(solve_brute_force(problem).objective, abs=1e-12)


def test_no_integer_solution_names_highs_model_status():
    problem, _, _ = _small_instance(0, lam=0.5)
    message = (
        "MIP solver HIGHS found no integer solution (status user_limit, HiGHS 'kTimeLimit', "
        "time_limit 0.0 s); using uniform 8-bit widths"
    )
    with pytest.warns(SolverFallbackWarning, match=f"^{re.escape(message)}$"):
        solve(problem, time_limit=0.0)


def test_a_non_integral_solver_answer_falls_back(monkeypatch):
    """Rows of the one-hot that do not sum to 1 (here: all zeros) are no assignment."""
    invert = cvxpy.reductions.solvers.solving_chain.SolvingChain.invert

    def zeroed(self, raw, inverse):
        result = invert(self, raw, inverse)
        result.primal_vars = {k: 0.0 * v for k, v in result.primal_vars.items()}
        return result

    monkeypatch.setattr(cvxpy.reductions.solvers.solving_chain.SolvingChain, "invert", zeroed)
    problem, _, _ = _small_instance(1, lam=0.5)
    with pytest.warns(
        SolverFallbackWarning, match=r"^MIP solver HIGHS returned a non-integral assignment; "
    ):
        sol = solve(problem, fallback=4)
    assert sol.used_fallback and all(np.all(b == 4) for b in sol.bits)


# ---------------------------------------------------------------------- what HiGHS is asked


def _spy_milp(monkeypatch, delay=0.0):
    """Records each HiGHS run's ``(time_limit, mip_rel_gap, thread)``, ``delay`` s each."""
    milp, calls = assign.milp._milp, []

    def spy(problem, part, time_limit, mip_rel_gap):
        calls.append((time_limit, mip_rel_gap, threading.get_ident()))
        time.sleep(delay)
        return milp(problem, part, time_limit, mip_rel_gap)

    monkeypatch.setattr(assign.solving, "_milp", spy)
    return calls


def test_documented_defaults_reach_highs(monkeypatch):
    """10 s and a 1 % relative gap for the whole program (solved whole at this size), with
    HiGHS's absolute gap off, its log off and one thread per run."""
    calls = _spy_milp(monkeypatch)
    opts = []
    chain = cvxpy.reductions.solvers.solving_chain.SolvingChain
    solve_via_data = chain.solve_via_data

    def record(self, problem, data, *args, solver_opts=None, **kwargs):
        opts.append(dict(solver_opts))
        return solve_via_data(self, problem, data, *args, solver_opts=solver_opts, **kwargs)

    monkeypatch.setattr(chain, "solve_via_data", record)
    channels, kw = _one_round()
    problem, _ = make_problem(channels, **kw)
    shared = {k: v for k, v in kw.items() if k != "dim"}
    solve(problem)
    assign.solve_many({"a": problem})
    assign.assign_bits(channels, **kw)
    assign.solve_channels({"a": (channels, kw["dim"])}, **shared)
    assert [c[:2] for c in calls] == [(10.0, 0.01)] * 4
    expected = dict(time_limit=10.0, mip_rel_gap=0.01, mip_abs_gap=0.0, output_flag=False)
    assert opts == [{**expected, "threads": 1}] * 4


def _three_rounds():
    rng = np.random.default_rng(14)
    channels = _random_channels(rng, 4, max_rows=6)
    theta, gamma = _random_costs(rng, 4, unbalanced=False)
    kw = dict(dim=16, theta=theta, gamma=gamma, num_parts=4, lam=0.5, group_size=2)
    problem, _ = make_problem(channels, **kw)
    assert assign.problem._model(problem).num_rounds == 3
    return channels, kw, problem


def test_rounds_share_a_pool_of_max_workers_threads(monkeypatch):
    """Solved round by round, ``solve`` runs its rounds one after another on one thread;
    ``solve_many`` and ``solve_channels`` use at most ``max_workers`` threads, and one when
    the CPU count is unknown."""
    monkeypatch.setattr(assign.solving, "JOINT_MAX_GROUPS", 0)
    channels, kw, problem = _three_rounds()
    shared = {k: v for k, v in kw.items() if k != "dim"}
    specs = {"a": (channels, kw["dim"])}

    def threads(run):
        calls = _spy_milp(monkeypatch, delay=0.02)
        run()
        assert len(calls) == 3
        return len({c[2] for c in calls})

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert threads(lambda: solve(problem)) == 1
    assert threads(lambda: assign.solve_many({"a": problem}, max_workers=1)) == 1
    assert threads(lambda: assign.solve_channels(specs, **shared, max_workers=1)) == 1
    assert threads(lambda: assign.solve_many({"a": problem}, max_workers=3)) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert threads(lambda: assign.solve_many({"a": problem})) == 1


def test_programs_up_to_joint_max_groups_are_solved_whole(monkeypatch):
    _, _, problem = _three_rounds()
    for limit, runs in ((problem.num_groups, 1), (problem.num_groups - 1, 3)):
        monkeypatch.setattr(assign.solving, "JOINT_MAX_GROUPS", limit)
        calls = _spy_milp(monkeypatch)
        sol = solve(problem, mip_rel_gap=0.0)
        assert len(calls) == runs and sol.status == "optimal"
        assert calls[0][0] == pytest.approx(10.0 / runs)


# ---------------------------------------------------------------------- frontier limits


def test_frontier_state_limits_name_their_sizes(monkeypatch):
    """Two groups of one size at widths 2/4/8 take a 2 x 7 state table (loads 0..6 steps of
    ``2 D``); a channel with one group of 1 row and one of 2 rows combines 3 x 3 candidate
    points (each group's own three widths)."""
    same = _problem(channels=_groups(weight=(1.0, 2.0), count=(3, 3)))
    monkeypatch.setattr(assign.frontier, "FRONTIER_MAX_POINTS", 13)
    message = (
        "a channel's frontier needs 2 x 7 states, more than 13 (2 groups of one size in one "
        "channel): use a larger group_size, or solver='milp'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        solve(same, solver="frontier")
    monkeypatch.setattr(assign.frontier, "FRONTIER_MAX_POINTS", 14)
    assert solve(same, solver="frontier").status == "optimal"
    mixed = _problem(channels=_groups(weight=(1.0, 2.0), count=(1, 2)))
    monkeypatch.setattr(assign.frontier, "FRONTIER_MAX_POINTS", 8)
    message = (
        "a channel's frontier needs 9 candidate points, more than 8 (groups of too many "
        "distinct sizes): use solver='milp'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        solve(mixed, solver="frontier")
    monkeypatch.setattr(assign.frontier, "FRONTIER_MAX_POINTS", 9)
    assert solve(mixed, solver="frontier").status == "optimal"


def test_channel_frontier_of_one_group_by_hand():
    """One group of 2 rows at D = 8: ``b D + 64`` bits a row, so loads 160, 192, 256 bits
    (exact ``int64``) and variances ``w / (2^b - 1)^2``."""
    per_row = np.array([80, 96, 128], np.int64)
    var = np.array([[1 / 9, 1 / 225, 1 / 65025]])
    loads, variances, choice = assign.frontier._channel_frontier(var, np.array([2]), per_row)
    assert loads.dtype == np.int64 and loads.tolist() == [160, 192, 256]
    np.testing.assert_array_equal(variances, var[0])
    assert choice.tolist() == [[0], [1], [2]]


# ---------------------------------------------------------------------- the MILP's order cuts


def test_order_cuts_by_hand():
    """Groups of one channel with equal row counts (equal seconds at every width) are chained
    by descending weight, ties by index; each pair ``(a, b)`` gets one row per threshold
    ``k = 1 .. W - 1``: ``sum_{i >= k} x[a, i] - sum_{i >= k} x[b, i]`` (columns ``W j + i``)."""
    problem = _problem(
        channels=(
            assign.ChannelGroups(0, 1, 1, [1.0, 3.0, 3.0], [2, 2, 1]),
            assign.ChannelGroups(1, 0, 1, [2.0, 2.0, 5.0], [1, 1, 1]),
        )
    )
    pairs = assign.milp._order_pairs(assign.problem._model(problem))
    assert pairs.dtype == np.int64 and pairs.tolist() == [[1, 0], [5, 3], [3, 4]]
    lone = assign.milp._order_pairs(assign.problem._model(_problem()))
    assert lone.dtype == np.int64 and lone.shape == (0, 2)
    matrix = assign.milp._order_matrix(np.array([[0, 1], [2, 1]]), 3, 9).toarray()
    expected = np.zeros((4, 9))
    expected[0, [1, 2]], expected[0, [4, 5]] = 1, -1  # pair (0, 1), k = 1
    expected[1, 2], expected[1, 5] = 1, -1  # pair (0, 1), k = 2
    expected[2, [7, 8]], expected[2, [4, 5]] = 1, -1  # pair (2, 1), k = 1
    expected[3, 8], expected[3, 5] = 1, -1  # pair (2, 1), k = 2
    np.testing.assert_array_equal(matrix, expected)


def test_highs_is_named_not_left_to_cvxpys_default(monkeypatch):
    """The program goes to HiGHS by name: cvxpy's own default (which, e.g., prefers an
    installed commercial solver when cvxpy is configured so) is never consulted."""

    def elsewhere(problem_form):
        raise AssertionError("cvxpy's default solver was asked for")

    monkeypatch.setattr(cvxpy.reductions.solvers.solving_chain, "pick_default_solver", elsewhere)
    problem, _, _ = _small_instance(3, lam=0.5)
    assign.milp._PROGRAMS.clear()  # a fresh cvxpy program: its solving chain is built anew
    with warnings.catch_warnings():
        warnings.simplefilter("error", SolverFallbackWarning)
        sol = solve(problem, mip_rel_gap=0.0)
    assert sol.status == "optimal"
    assert sol.objective == pytest.approx(solve_brute_force(problem).objective, rel=REL, abs=1e-12)


def test_fallback_warnings_point_at_the_callers_line(monkeypatch):
    """Every entry point warns from the line that called it (the warning's stack level), so a
    user sees their own call, not the library's internals."""
    _no_highs(monkeypatch)
    channels, kw = _one_round()
    problem, _ = make_problem(channels, **kw)
    shared = {k: v for k, v in kw.items() if k != "dim"}
    # Called here directly (no helper in between): each warning must name this file.
    with pytest.warns(SolverFallbackWarning) as record:
        solve(problem)
        assign.solve_many({"a": problem})
        assign.assign_bits(channels, **kw)
        assign.solve_channels({"k": (channels, kw["dim"])}, **shared)
    assert [w.filename for w in record] == [__file__] * 4


def test_brute_force_names_its_group_limit():
    problem, _, _ = _small_instance(0, lam=0.5)
    with pytest.raises(ValueError, match=r"^\d+ groups is too many to enumerate \(max_groups=0\)$"):
        solve_brute_force(problem, max_groups=0)
