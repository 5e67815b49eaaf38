"""**Solved round by round.** The objective is a sum over rounds and no constraint spans two
rounds, so the program splits into one independent program per round (with the whole
program's normalization) whose optima add up to its optimum. Programs above
:data:`JOINT_MAX_GROUPS` groups are solved that way, smaller ones whole.

The relative gap is HiGHS's, per solved part, relative to that part of the normalized objective
with its constants folded in: HiGHS sees each group's variance as ``V x - V_widest`` and each
round's time as ``Z_r - max_c t_c(narrowest)``, so every term is non-negative (with the
constants added afterwards, the gap would be relative to a quantity dominated by ``(1 - lam)
T_u / (T_n - T_u)`` and accept solutions far above the optimum). The whole program's gap is
then at most the largest part's, which :class:`Solution` reports.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import time
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from jaxgraph.comm.assign.frontier import _frontier
from jaxgraph.comm.assign.milp import _check_solver, _milp
from jaxgraph.comm.assign.problem import (
    ALL_WIDTHS,
    BITS,
    SOLVERS,
    Channel,
    Problem,
    Solution,
    SolverFallbackWarning,
    _choice_of,
    _evaluate,
    _fast_path,
    _Model,
    _model,
    _NoSolution,
    _solution,
    evaluate,
    expand_bits,
    make_problem,
    objective_bounds,
)

# Programs of at most this many groups are solved whole (a HiGHS run's fixed cost outweighs the
# search); larger ones round by round (experiments/README.md, "Keys of more than 64 groups").
JOINT_MAX_GROUPS = 64


def _check_limits(time_limit: float, mip_rel_gap: float, solver: str = "milp") -> None:
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if not time_limit >= 0:
        raise ValueError(f"time_limit must be a non-negative number of seconds, got {time_limit}")
    if not mip_rel_gap >= 0:
        raise ValueError(f"mip_rel_gap must be non-negative, got {mip_rel_gap}")


def _is_width(fallback) -> bool:
    return isinstance(fallback, (int, np.integer))


def _fallback_choice(problem: Problem, model: _Model, fallback) -> np.ndarray:
    if fallback is None:
        return np.full(model.channel.size, model.widths.size - 1, np.int64)
    if _is_width(fallback):
        if int(fallback) not in problem.widths:
            raise ValueError(f"fallback width {fallback} is not one of {problem.widths}")
        return np.full(model.channel.size, problem.widths.index(int(fallback)), np.int64)
    return _choice_of(problem, model, fallback)


def describe_fallback(fallback, widths: Sequence[int] = BITS) -> str:
    """The end of the fallback warning: what is kept instead of a solution."""
    if fallback is None or _is_width(fallback):
        width = max(widths) if fallback is None else int(fallback)
        return f"using uniform {width}-bit widths"
    return "keeping the previous bit assignment"


def _solve(problem, time_limit, mip_rel_gap, fallback, solver="milp") -> Solution:
    """:func:`solve` without the warning, its rounds one after another."""
    fallbacks = {None: fallback}
    return _solve_all({None: problem}, time_limit, mip_rel_gap, fallbacks, 1, solver)[None]


def _fell_back(problem: Problem, model: _Model, choice, t0: float, cause: str) -> Solution:
    return _solution(problem, model, choice, "fallback", t0, used_fallback=True, cause=cause)


def _round_model(model: _Model, r: int) -> tuple[_Model, np.ndarray]:
    """The part of ``model`` that round ``r`` (an index into the used rounds) owns, with the
    whole program's normalization, and the indices of its groups in ``model``."""
    chans = np.flatnonzero(model.round_of == r)
    local = np.full(model.gamma.size, -1, np.int64)
    local[chans] = np.arange(chans.size)
    groups = np.flatnonzero(local[model.channel] >= 0)
    part = model._replace(
        channel=local[model.channel[groups]],
        var=model.var[groups],
        sec=model.sec[groups],
        gamma=model.gamma[chans],
        round_of=np.zeros(chans.size, np.int64),
        num_rounds=1,
    )
    return part, groups


def _solve_round(problem: Problem, part: _Model, share: float, mip_rel_gap: float):
    """One round's program: ``(choice, status, gap)``, or the :class:`_NoSolution` raised."""
    try:
        return _milp(problem, part, share, mip_rel_gap)
    except _NoSolution as e:
        return e


def _solve_all(problems, time_limit, mip_rel_gap, fallbacks, max_workers, solver="milp") -> dict:
    """Solves every program of ``problems``, whole or round by round, all HiGHS runs in one pool
    of ``max_workers`` threads (HiGHS releases the GIL); the caller's thread warns. Each round
    gets an equal, fixed share of its program's ``time_limit`` (so its answer does not depend on
    how fast the others ran); a part without an integer solution keeps the fallback, its round
    named in the cause. ``solver="frontier"``: :func:`_frontier` (exact; gap 0, no fallback).
    """
    _check_limits(time_limit, mip_rel_gap, solver)
    t0 = time.perf_counter()
    out, pending, tasks = {}, {}, []
    for key, problem in problems.items():
        model = _model(problem)
        fallback_choice = _fallback_choice(problem, model, fallbacks[key])  # validated first
        fast = _fast_path(problem, model)
        if fast is not None:
            choice = np.full(model.channel.size, model.widths.size - 1, np.int64)
            out[key] = _solution(problem, model, choice, fast, t0)
            continue
        if solver == "frontier":
            out[key] = _solution(
                problem, model, _frontier(problem, model), "optimal", t0, mip_gap=0.0
            )
            continue
        pending[key] = (model, fallback_choice)
        if model.channel.size <= JOINT_MAX_GROUPS:  # one program: HiGHS's fixed cost dominates
            parts = [(None, np.arange(model.channel.size), model)]
        else:
            parts = [(r, *_round_model(model, r)[::-1]) for r in range(model.num_rounds)]
        share = time_limit / len(parts)
        for r, groups, part in parts:
            tasks.append((key, r, groups, (problem, part, share, mip_rel_gap)))
    if not pending:
        return out
    try:
        _check_solver()
    except _NoSolution as e:
        for key, (model, fallback_choice) in pending.items():
            out[key] = _fell_back(problems[key], model, fallback_choice, t0, str(e))
        return {key: out[key] for key in problems}
    # Always on the pool's threads, one worker included (see _milp: HiGHS's per-thread scheduler).
    workers = min(max_workers or os.cpu_count() or 1, len(tasks))  # tasks: at least one
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_solve_round, *args) for *_, args in tasks]
        results = [f.result() for f in futures]
    by_key = {key: [] for key in pending}
    for (key, r, groups, _), result in zip(tasks, results, strict=True):
        by_key[key].append((r, groups, result))
    for key, rounds in by_key.items():
        problem, (model, fallback_choice) = problems[key], pending[key]
        failed = [(r, res) for r, _, res in rounds if isinstance(res, _NoSolution)]
        if len(failed) == len(rounds):  # nothing solved: the whole program falls back
            r, e = failed[0]
            cause = str(e)
            if r is not None:
                cause += f" (in every one of the {model.num_rounds} ring rounds that carry rows)"
            out[key] = _fell_back(problem, model, fallback_choice, t0, cause)
            continue
        # A round without a solution keeps its fallback widths; the rounds are independent,
        # so the others' solutions stand.
        choice = fallback_choice.copy()
        for _, groups, res in rounds:
            if not isinstance(res, _NoSolution):
                choice[groups] = res[0]
        solved = [res for _, _, res in rounds if not isinstance(res, _NoSolution)]
        status = "optimal" if all(res[1] == "optimal" for res in solved) else "user_limit"
        gaps = [res[2] for res in solved]
        gap = None if failed or any(g is None for g in gaps) else max(gaps)
        cause, kept = "", ()
        if failed:
            cause = "; ".join(
                f"{e} (round {r + 1} of the {model.num_rounds} ring rounds that carry rows: "
                "the fallback for that round's channels only)"
                for r, e in failed
            )
            used = [i for i, c in enumerate(problem.channels) if c.count.size]
            chans = (c for r, _ in failed for c in np.flatnonzero(model.round_of == r))
            kept = tuple(sorted(used[c] for c in chans))
        out[key] = _solution(
            problem, model, choice, status, t0, mip_gap=gap, cause=cause, fallback_channels=kept
        )
    return {key: out[key] for key in problems}


def _warn_fallback(problem, solution, fallback, key=None, stacklevel=3) -> None:
    if solution.cause:
        where = f" for {key}" if key is not None else ""
        warnings.warn(
            f"{solution.cause}{where}; {describe_fallback(fallback, problem.widths)}",
            SolverFallbackWarning,
            stacklevel=stacklevel,
        )


def solve(
    problem: Problem,
    *,
    time_limit: float = 10.0,
    mip_rel_gap: float = 0.01,
    fallback: int | Sequence[np.ndarray] | None = None,
    solver: str = "milp",
) -> Solution:
    """Solves one program with HiGHS (cvxpy), within ``time_limit`` seconds and ``mip_rel_gap``,
    or exactly by its frontiers (``solver="frontier"``).

    Args:
      time_limit: seconds of HiGHS for the whole program, split equally between its rounds.
      mip_rel_gap: HiGHS's relative MIP gap at which the search stops (0: prove optimality).
      fallback: the assignment kept when the program cannot be solved: one width for every
        group (``None``: the widest of ``problem.widths``), or per channel ``int[G_c]``.
      solver: ``"milp"`` (HiGHS through cvxpy) or ``"frontier"`` (exact, :mod:`.frontier`;
        ``time_limit``, ``mip_rel_gap`` and ``fallback`` do not apply).

    Returns:
      The :class:`Solution`. A solver failure (none, an error, no integer solution in time)
      never raises: ``fallback`` is returned with a :class:`SolverFallbackWarning`.
    """
    solution = _solve(problem, time_limit, mip_rel_gap, fallback, solver)
    _warn_fallback(problem, solution, fallback)
    return solution


def solve_brute_force(problem: Problem, *, max_groups: int = 12) -> Solution:
    """Exhaustive enumeration of the same objective (a test oracle; ``W^K`` candidates);
    ValueError for more than ``max_groups`` groups."""
    t0 = time.perf_counter()
    model = _model(problem)
    k, w = model.var.shape
    if k > max_groups:
        raise ValueError(f"{k} groups is too many to enumerate (max_groups={max_groups})")
    if k == 0:
        return _solution(problem, model, np.zeros(0, np.int64), "empty", t0)
    choices = np.array(list(itertools.product(range(w), repeat=k)), np.int64)
    objective, _, _ = _evaluate(model, choices)
    return _solution(problem, model, choices[int(np.argmin(objective))], "brute_force", t0)


def solve_many(
    problems: Mapping[str, Problem],
    *,
    time_limit: float = 10.0,
    mip_rel_gap: float = 0.01,
    fallback: int | Mapping[str, Sequence[np.ndarray]] | None = None,
    max_workers: int | None = None,
    solver: str = "milp",
) -> dict[str, Solution]:
    """Solves independent programs (one per exchange key); the rounds of all of them share a
    pool of ``max_workers`` threads (default: one per CPU). ``fallback`` is one
    width for all, or per key as in :func:`solve`; ``solver`` as in :func:`solve`. Warnings are
    raised in the calling thread.
    """
    out = _solve_parallel(problems, time_limit, mip_rel_gap, fallback, max_workers, solver)
    for key, sol in out.items():
        _warn_fallback(problems[key], sol, _pick(fallback, key), key)
    return out


def _pick(fallback, key):
    return fallback if fallback is None or _is_width(fallback) else fallback[key]


def _solve_parallel(problems, time_limit, mip_rel_gap, fallback, max_workers, solver) -> dict:
    """:func:`_solve_all` with one fallback for all or one per key."""
    fallbacks = {key: _pick(fallback, key) for key in problems}
    return _solve_all(problems, time_limit, mip_rel_gap, fallbacks, max_workers, solver)


def _row_result(problem, group_of_row, solution, channels, fallback) -> tuple[list, dict]:
    """Per-row widths of each channel and a JSON-friendly log."""
    if solution.fallback_channels and not (fallback is None or _is_width(fallback)):
        # The kept channels take the row-level fallback (e.g. the previous assignment).
        kept = set(solution.fallback_channels)
        rows = [
            np.asarray(fb, np.int8).copy() if c in kept else expand_bits(g, b)
            for c, (fb, g, b) in enumerate(zip(fallback, group_of_row, solution.bits, strict=True))
        ]
        # Score the kept assignment on the same objective, with one group per row.
        same = ("dim", "theta", "gamma", "num_parts", "lam", "param_bytes")
        widths = tuple(sorted(set(problem.widths) | {int(v) for b in rows for v in b}))
        kw = {name: getattr(problem, name) for name in same}
        singles, _ = make_problem(channels, group_size=1, widths=widths, **kw)
        objective, variance, total = evaluate(singles, rows)
    else:
        rows = [expand_bits(g, b) for g, b in zip(group_of_row, solution.bits, strict=True)]
        objective, variance, total = solution.objective, solution.variance, solution.time
    flat = np.concatenate(rows) if rows else np.zeros(0, np.int8)
    bounds = objective_bounds(problem)
    info = {
        "status": solution.status,
        "used_fallback": solution.used_fallback,
        "cause": solution.cause,
        "objective": objective,
        "variance": variance,
        "time": total,
        **{k: v for k, v in bounds.items() if k.endswith(("_nadir", "_utopia"))},
        "solve_seconds": solution.solve_seconds,
        "mip_gap": solution.mip_gap,
        "groups": problem.num_groups,
        "rows_per_width": {int(w): int(np.sum(flat == w)) for w in np.unique(flat)},
    }
    return rows, info


def _check_row_fallback(fallback, channels) -> None:
    """A row-level fallback must give every row of every channel a known width."""
    if fallback is None or _is_width(fallback):
        return
    if len(fallback) != len(channels):
        raise ValueError(f"fallback has {len(fallback)} channels, the key has {len(channels)}")
    for b, ch in zip(fallback, channels, strict=True):
        b = np.asarray(b)
        if b.shape != np.shape(ch[3]):
            raise ValueError(f"fallback widths {b.shape} do not match the rows {np.shape(ch[3])}")
        if not np.isin(b, ALL_WIDTHS).all():
            raise ValueError(f"fallback widths must be drawn from {ALL_WIDTHS}")


def _group_fallback(fallback):
    """The group-level stand-in of a row-level fallback (replaced by the rows afterwards)."""
    return fallback if fallback is None or _is_width(fallback) else None


def assign_bits(
    channels: Sequence[Channel],
    *,
    dim: int,
    theta: np.ndarray,
    gamma: np.ndarray,
    num_parts: int,
    lam: float,
    group_size: int,
    time_limit: float = 10.0,
    mip_rel_gap: float = 0.01,
    fallback: int | Sequence[np.ndarray] | None = None,
    solver: str = "milp",
    widths: tuple[int, ...] = BITS,
) -> tuple[list[np.ndarray], dict]:
    """Groups (:func:`group_rows`), solves and expands one exchange key: per channel
    ``int8[n_c]`` row widths in the channel's row order, and a log dict.

    ``channels``: :class:`Channel` s (or plain tuples); the problem's fields as in
    :class:`Problem`, the solver's as in :func:`solve`, except that ``fallback`` is one width
    (``None``: the widest) or per channel ``int[n_c]`` row widths (e.g. the previous
    assignment), kept with a :class:`SolverFallbackWarning` when the program is not solved.
    """
    problem, group_of_row = make_problem(
        channels,
        dim=dim,
        theta=theta,
        gamma=gamma,
        num_parts=num_parts,
        lam=lam,
        group_size=group_size,
        widths=widths,
    )
    _check_row_fallback(fallback, channels)
    solution = _solve(problem, time_limit, mip_rel_gap, _group_fallback(fallback), solver)
    _warn_fallback(problem, solution, fallback)
    return _row_result(problem, group_of_row, solution, channels, fallback)


def solve_channels(
    specs: Mapping[str, tuple[Sequence[Channel], int]],
    *,
    theta: np.ndarray,
    gamma: np.ndarray,
    num_parts: int,
    lam: float,
    group_size: int,
    time_limit: float = 10.0,
    mip_rel_gap: float = 0.01,
    fallback: int | Mapping[str, Sequence[np.ndarray]] | None = None,
    max_workers: int | None = None,
    solver: str = "milp",
    widths: tuple[int, ...] = BITS,
    param_bytes: int = 8,
) -> dict[str, tuple[list[np.ndarray], dict]]:
    """:func:`assign_bits` for ``specs = {key: (channels, dim)}`` at once, in parallel threads:
    ``{key: (row widths, log dict)}``. ``fallback`` is one width or per key; ``param_bytes``:
    bytes of a row's ``(scale, lo)`` on the wire (8: fp32, 4: bfloat16)."""
    built = {
        key: make_problem(
            chans,
            dim=dim,
            theta=theta,
            gamma=gamma,
            num_parts=num_parts,
            lam=lam,
            group_size=group_size,
            widths=widths,
            param_bytes=param_bytes,
        )
        for key, (chans, dim) in specs.items()
    }
    for key, (chans, _) in specs.items():
        _check_row_fallback(_pick(fallback, key), chans)
    solved = _solve_parallel(
        {k: p for k, (p, _) in built.items()},
        time_limit,
        mip_rel_gap,
        {k: _group_fallback(_pick(fallback, k)) for k in built},
        max_workers,
        solver,
    )
    out = {}
    for key, (problem, group_of_row) in built.items():
        fb = _pick(fallback, key)
        _warn_fallback(problem, solved[key], fb, key)
        out[key] = _row_result(problem, group_of_row, solved[key], specs[key][0], fb)
    return out
