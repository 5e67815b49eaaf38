"""Bit-width assignment by the bi-objective mixed-integer program of AdaQP (host side).

One program per exchange key (``fwd{l}``, ``bwd{l}``), after Wan et al., "Adaptive Message
Quantization and Parallelization for Distributed Full-graph GNN Training", MLSys 2023 (AdaQP,
``assigner/assigner.py``), with the fixes listed below.

**Channels.** A channel ``c`` is one directed transfer of one ring round: ``sender -> receiver``
in round ``r`` (forward keys: ``d -> (d + r) mod P``; backward keys run the ring the other way).
Its rows, each with a variance weight ``beta_v >= 0`` (AdaQP's traced range variance times the
squared aggregation score), are sorted by ``beta`` descending and cut into groups of
``group_size`` rows, the last one possibly partial; a group's weight is ``g_j = sum beta_v``.
Every row of a group gets the group's width.

**Program.** Booleans ``x[j, i]`` pick width ``b_i`` in ``{2, 4, 8}`` (or the problem's
``widths``) for group ``j`` (one per group), continuous ``Z_r`` bound the time of round ``r``::

    minimize   lam * (sum V x - V_u) / (V_n - V_u) + (1 - lam) * (sum_r Z_r - T_u) / (T_n - T_u)
    s.t.       sum_i x[j, i] = 1                                       for every group j
               theta_c * sum_{j in c, i} MB[j, i] x[j, i] + gamma_c <= Z_r(c)   for every channel c

    V[j, i]  = g_j / (2^b_i - 1)^2                 (stochastic-rounding variance of the group)
    MB[j, i] = (b_i * D * n_j / 8 + 8 * n_j) / 2^20  MiB (codes + fp32 (scale, lo) per row)

``theta_c`` (s/MiB) and ``gamma_c`` (s) are the channel's cost (:mod:`jaxgraph.comm.costmodel`).
``V_n``/``V_u`` is the variance with every group at the narrowest/widest width, ``T_n`` =
``sum_r max_c t_c(widest)`` and ``T_u = sum_r max_c t_c(narrowest)``.

Differences from AdaQP, on purpose:

* ``MB`` counts the group's real rows ``n_j`` (AdaQP uses ``group_size`` for the partial last
  group too) and the 8 bytes of fp32 ``(scale, lo)`` per row that
  :func:`jaxgraph.comm.quantized.wire_bytes` puts on the wire. The per-bucket rounding of packed
  codes up to whole bytes (at most ``D`` bytes per bucket) is left out, which keeps the model
  linear.
* ``T_u`` is the achievable lower bound ``sum_r max_c`` (AdaQP: the looser ``sum_r min_c``).
* A channel with no rows sends nothing: it has no constraint and adds no ``gamma`` (AdaQP posts
  every pair). A round none of whose channels carries rows has no ``Z_r``.
* Zero denominators are guarded (AdaQP divides unguarded): if every weight is zero
  (``V_n == V_u``) the variance term is dropped; if ``T_n - T_u <= 1e-12 T_n`` (no transfer time
  to trade, e.g. ``theta = 0``) the time term is dropped. Whenever the time term carries no
  weight (``lam = 1`` or dropped) every group gets the widest width, which is optimal (groups of
  zero weight are indifferent and get it too): a fast path without the solver, as is a single
  width choice. With only the variance term dropped (all weights zero, ``lam < 1``) the solver
  minimizes the time alone.
* At ``lam = 0`` only each round's slowest channel counts and the other channels' widths are
  ties, resolved by the solver; a small ``lam > 0`` instead fills the slack under each round's
  bottleneck with the widest widths that fit.
* The solver (HiGHS through cvxpy) always runs with a time limit and a relative MIP gap. The
  best integer solution found under the limit is accepted; without one, or without the solver,
  the caller's fallback assignment is kept, with a :class:`SolverFallbackWarning`.

**Solved round by round.** The objective is a sum over rounds (each group's variance belongs to
its channel's round, and each ``Z_r`` to one round) and no constraint spans two rounds, so the
program splits into one independent program per round, with the whole program's normalization;
the per-round optima add up to its optimum. Programs larger than :data:`JOINT_MAX_GROUPS`
groups are solved that way, faster than whole (HiGHS's branch and bound no longer searches the
product of the rounds' choices); smaller ones are solved whole, where a HiGHS run's fixed cost
outweighs the search.

The relative gap is HiGHS's, per solved part (a round, or the whole program), and relative to
that part of the normalized objective itself: HiGHS sees each group's variance as ``V x -
V_widest`` (``sum_j V_widest = V_u``) and each round's time as ``y_r = Z_r - max_c
t_c(narrowest)`` (the round's share of ``T_u``, below which no choice of widths goes), so the
objective's constant terms are folded in and every term is non-negative. (Handing HiGHS ``sum
V x + sum Z`` and adding the constants afterwards, as a plain transcription does, makes the gap
relative to a quantity dominated by ``(1 - lam) T_u / (T_n - T_u)``: on Cora at P = 8 a "1 %"
gap then allowed solutions 26 % above the optimum.) The parts are non-negative, so the whole
program's gap is at most the largest part's, which is what :class:`Solution` reports.

**The exact frontier solver** (``solver="frontier"``) solves the same program without a MIP
solver, to optimality. Within a round, channels share nothing but ``Z_r``; a channel's time
rises with its bytes, so all that matters of its choices is, for each byte count, the least
variance reaching it: its Pareto frontier. The groups of one size form a class whose loads
lie on a grid (``3 n + 1`` points for ``n`` groups at widths 2/4/8), on which a dynamic
program over the groups finds the least variance of every load exactly; the classes' frontiers
(at most two per channel of :func:`make_problem`: full groups and a partial last one) are
combined by Pareto-pruned sums. For a given ``Z_r`` each channel takes its frontier's least
variance that fits; the round's objective is then a step function of ``Z_r`` plus ``a_time
Z_r``, minimal at one of the channels' frontier times, all of which are scored. Cost
``O(n^2 W)`` per class: 8-10 ms for a 258-group key (about 5 groups per channel) where HiGHS
takes 0.08-1.2 s at a 1 % gap, 0.13 s for one channel of 1,000 groups.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import scipy.sparse as sparse

BITS = (2, 4, 8)
ALL_WIDTHS = (2, 4, 8, 32)  # 32: raw fp32 rows (compression off), as in jaxgraph.comm.quantized
MIB = 2**20
PARAM_BYTES = 8  # fp32 (scale, lo) per quantized row
# Programs of at most this many groups are solved whole: a HiGHS run has a fixed cost of a few
# milliseconds, which there outweighs the search (Cora at P = 8, 52 groups per key: 7-23 ms
# whole, 50 ms in 7 rounds); larger ones are solved round by round (SBM 10k, 258 groups:
# 0.08-0.22 s by rounds against 0.11-0.36 s whole, at equal or better objectives).
JOINT_MAX_GROUPS = 64
TIME_TOL = 1e-12  # relative: T_n - T_u below this share of T_n counts as "no time to trade"
SOLVER = "HIGHS"
# How a program is solved: "milp" (HiGHS through cvxpy, with a time limit and a gap) or
# "frontier" (exact, by per-channel Pareto frontiers and a sweep over each round's time).
SOLVERS = ("milp", "frontier")


class SolverFallbackWarning(RuntimeWarning):
    """The program was not solved (no solver, solver error, no integer solution in time) and the
    fallback assignment was kept."""


class Channel(NamedTuple):
    """One directed transfer of one ring round and the variance weights of its rows.

    Attributes:
      sender, receiver: device indices, ``0 <= . < P``, different.
      round: ring round ``r`` in ``1..P-1`` (the channels of a round run at the same time).
      beta: ``float[n]`` per-row variance weight, ``>= 0``, in the channel's row order.
    """

    sender: int
    receiver: int
    round: int
    beta: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class ChannelGroups:
    """The groups of one channel, as the program sees them.

    Attributes:
      sender, receiver, round: as in :class:`Channel`.
      weight: ``float64[G]`` group weights ``g_j`` (sum of ``beta`` over the group).
      count: ``int64[G]`` rows per group (``>= 1``).
    """

    sender: int
    receiver: int
    round: int
    weight: np.ndarray
    count: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "weight", np.asarray(self.weight, np.float64))
        object.__setattr__(self, "count", np.asarray(self.count, np.int64))


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """One exchange key's program.

    Attributes:
      channels: the key's channels, in any order (empty ones allowed: ``G = 0``).
      dim: feature dimension ``D`` of the exchanged rows.
      theta: ``float64[P, P]`` seconds per MiB, ``[sender, receiver]``.
      gamma: ``float64[P, P]`` seconds per transfer, ``[sender, receiver]``.
      lam: weight of the variance term, in ``[0, 1]``.
      num_parts: ``P``.
      widths: the width choices, ascending, from ``(2, 4, 8, 32)`` (default :data:`BITS`;
        32 is a raw fp32 row: ``4 D`` bytes, no variance).
    """

    channels: tuple[ChannelGroups, ...]
    dim: int
    theta: np.ndarray
    gamma: np.ndarray
    lam: float
    num_parts: int
    widths: tuple[int, ...] = BITS

    def __post_init__(self):
        p = self.num_parts
        if p < 1:
            raise ValueError(f"num_parts must be at least 1, got {p}")
        if self.dim < 1:
            raise ValueError(f"dim must be at least 1, got {self.dim}")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must lie in [0, 1], got {self.lam}")
        if not self.widths or list(self.widths) != sorted(set(self.widths)):
            raise ValueError(f"widths must be distinct and ascending, got {self.widths}")
        if any(w not in ALL_WIDTHS for w in self.widths):
            raise ValueError(f"widths must be drawn from {ALL_WIDTHS}, got {self.widths}")
        for name in ("theta", "gamma"):
            a = np.asarray(getattr(self, name), np.float64)
            if a.shape != (p, p):
                raise ValueError(f"{name} must have shape [P, P] = [{p}, {p}], got {a.shape}")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"{name} must be finite and non-negative")
            object.__setattr__(self, name, a)
        for c in self.channels:
            if not (0 <= c.sender < p and 0 <= c.receiver < p) or c.sender == c.receiver:
                raise ValueError(
                    f"channel {c.sender} -> {c.receiver} is not a pair of distinct devices of {p}"
                )
            if not 1 <= c.round <= max(p - 1, 1):
                raise ValueError(f"round {c.round} is outside 1..{p - 1}")
            w, n = np.asarray(c.weight), np.asarray(c.count)
            if w.shape != n.shape or w.ndim != 1:
                raise ValueError(f"weight {w.shape} and count {n.shape} must be equal 1-D shapes")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError("group weights must be finite and non-negative")
            if np.any(n < 1):
                raise ValueError("every group must hold at least one row")

    @property
    def num_groups(self) -> int:
        return sum(int(c.count.size) for c in self.channels)


@dataclasses.dataclass(frozen=True, eq=False)
class Solution:
    """An assignment of one :class:`Problem` and its objective.

    Attributes:
      bits: per channel (the problem's order), ``int8[G_c]`` the width of each group.
      objective: the normalized objective of ``bits`` (see the module docstring).
      variance: ``sum V x`` of ``bits``.
      time: ``sum_r max_c t_c`` of ``bits`` in seconds (``sum_r Z_r`` at the optimum).
      status: ``"optimal"``, ``"user_limit"`` (best integer solution under the time limit or
        gap), ``"fast_path"``, ``"empty"`` or ``"fallback"``.
      solve_seconds: wall time from the start of the solving call (which may solve several
        programs together) to this program's result.
      used_fallback: the fallback was returned for the whole program.
      cause: why the fallback was used, for the whole program or some rounds (empty
        otherwise).
      fallback_channels: indices into ``problem.channels`` whose widths are the fallback's
        because their round found no solution (all channels if ``used_fallback``).
      mip_gap: the largest final relative gap of its solved parts (rounds, or the whole
        program), a bound on the program's (``None`` when no solver ran or a round fell back).
    """

    bits: tuple[np.ndarray, ...]
    objective: float
    variance: float
    time: float
    status: str
    solve_seconds: float
    used_fallback: bool = False
    cause: str = ""
    fallback_channels: tuple[int, ...] = ()
    mip_gap: float | None = None


# ---------------------------------------------------------------------- grouping


def group_rows(beta: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups one channel's rows by descending ``beta`` (AdaQP's grouping).

    Rows are sorted by ``beta`` descending (ties keep their order) and cut into consecutive
    groups of ``group_size``; the last group may be partial.

    Shapes:
      ``beta: [n]`` -> ``group_of_row: int32[n]`` (the group of each row, original row order),
      ``group_weight: float64[G]`` (sum of ``beta`` per group), ``group_count: int64[G]``,
      with ``G = ceil(n / group_size)``.

    Raises:
      ValueError: if ``group_size < 1`` or ``beta`` is not 1-D, finite and non-negative.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    beta = np.asarray(beta, np.float64)
    if beta.ndim != 1:
        raise ValueError(f"beta must be 1-D, got shape {beta.shape}")
    if not np.all(np.isfinite(beta)) or np.any(beta < 0):
        raise ValueError("beta must be finite and non-negative")
    n = beta.size
    order = np.argsort(-beta, kind="stable")
    group_of_row = np.empty(n, np.int32)
    group_of_row[order] = np.arange(n, dtype=np.int32) // group_size
    num_groups = -(-n // group_size)
    weight = np.bincount(group_of_row, weights=beta, minlength=num_groups).astype(np.float64)
    count = np.bincount(group_of_row, minlength=num_groups).astype(np.int64)
    return group_of_row, weight, count


def expand_bits(group_of_row: np.ndarray, group_bits: np.ndarray) -> np.ndarray:
    """Per-group widths -> per-row widths. ``int32[n], int8[G] -> int8[n]``."""
    return np.asarray(group_bits, np.int8)[np.asarray(group_of_row, np.intp)]


def make_problem(
    channels: Sequence[Channel],
    *,
    dim: int,
    theta: np.ndarray,
    gamma: np.ndarray,
    num_parts: int,
    lam: float,
    group_size: int,
    widths: tuple[int, ...] = BITS,
) -> tuple[Problem, tuple[np.ndarray, ...]]:
    """Groups every channel's rows and builds the program.

    Returns:
      the :class:`Problem` and, per channel, ``group_of_row: int32[n_c]`` for
      :func:`expand_bits`.
    """
    groups, group_of_row = [], []
    for ch in channels:
        sender, receiver, rnd, beta = ch
        g_of_r, weight, count = group_rows(beta, group_size)
        groups.append(ChannelGroups(int(sender), int(receiver), int(rnd), weight, count))
        group_of_row.append(g_of_r)
    problem = Problem(
        channels=tuple(groups),
        dim=int(dim),
        theta=np.asarray(theta, np.float64),
        gamma=np.asarray(gamma, np.float64),
        lam=float(lam),
        num_parts=int(num_parts),
        widths=tuple(widths),
    )
    return problem, tuple(group_of_row)


# ---------------------------------------------------------------------- the model, in numpy


def _row_bits(widths: np.ndarray, dim: int) -> np.ndarray:
    """``int64[W]`` bits per row at each width: packed codes plus fp32 (scale, lo); raw fp32
    at 32 (exact integers, so that the frontier solver's equal totals compare equal)."""
    widths = np.asarray(widths, np.int64)
    return np.where(widths == 32, 32 * dim, widths * dim + 8 * PARAM_BYTES)


def _row_mib(widths: np.ndarray, dim: int) -> np.ndarray:
    """MiB per row at each width (:func:`_row_bits` in MiB)."""
    return _row_bits(widths, dim) / (8.0 * MIB)


def _variance_factor(widths: np.ndarray) -> np.ndarray:
    """``1 / (2^b - 1)^2``; 0 at 32 bits (fp32 rows are sent exactly)."""
    factor = 1.0 / (2.0 ** widths.astype(np.float64) - 1.0) ** 2
    return np.where(widths == 32, 0.0, factor)


class _Model(NamedTuple):
    """The program's data over the ``K`` groups of the non-empty channels, concatenated."""

    widths: np.ndarray  # int64[W]
    channel: np.ndarray  # int64[K] index into the non-empty channels
    var: np.ndarray  # float64[K, W] V
    sec: np.ndarray  # float64[K, W] theta_c * MB (seconds)
    gamma: np.ndarray  # float64[C'] per non-empty channel
    round_of: np.ndarray  # int64[C'] index into the used rounds
    num_rounds: int
    v_nadir: float
    v_utopia: float
    t_nadir: float
    t_utopia: float
    a_var: float  # objective weight of sum V x (0 when dropped)
    a_time: float  # objective weight of sum Z (0 when dropped)


def _model(problem: Problem) -> _Model:
    widths = np.asarray(problem.widths, np.int64)
    used = [c for c in problem.channels if c.count.size]
    rounds = sorted({c.round for c in used})
    round_index = {r: i for i, r in enumerate(rounds)}
    k_counts = [c.count.size for c in used]
    channel = np.repeat(np.arange(len(used), dtype=np.int64), k_counts)
    weight = np.concatenate([c.weight for c in used]) if used else np.zeros(0)
    count = np.concatenate([c.count for c in used]).astype(np.float64) if used else np.zeros(0)
    theta = np.array([problem.theta[c.sender, c.receiver] for c in used], np.float64)
    gamma = np.array([problem.gamma[c.sender, c.receiver] for c in used], np.float64)
    var = weight[:, None] * _variance_factor(widths)[None, :]
    sec = theta[channel][:, None] * count[:, None] * _row_mib(widths, problem.dim)[None, :]
    round_of = np.array([round_index[c.round] for c in used], np.int64)

    def total_time(column):
        ch = np.bincount(channel, weights=sec[:, column], minlength=len(used)) + gamma
        worst = np.zeros(len(rounds))
        np.maximum.at(worst, round_of, ch)
        return float(worst.sum())

    v_nadir, v_utopia = float(var[:, 0].sum()), float(var[:, -1].sum())
    t_nadir, t_utopia = (total_time(-1), total_time(0)) if used else (0.0, 0.0)
    dv, dt = v_nadir - v_utopia, t_nadir - t_utopia
    a_var = problem.lam / dv if dv > 0 else 0.0
    a_time = (1.0 - problem.lam) / dt if dt > TIME_TOL * t_nadir and dt > 0 else 0.0
    return _Model(
        widths=widths,
        channel=channel,
        var=var,
        sec=sec,
        gamma=gamma,
        round_of=round_of,
        num_rounds=len(rounds),
        v_nadir=v_nadir,
        v_utopia=v_utopia,
        t_nadir=t_nadir,
        t_utopia=t_utopia,
        a_var=a_var,
        a_time=a_time,
    )


def _evaluate(model: _Model, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Objective, variance and time of width indices ``choice: int[M, K]`` (``M`` candidates)."""
    choice = np.atleast_2d(choice)
    k = np.arange(model.channel.size)
    variance = model.var[k, choice].sum(axis=1)
    sec = model.sec[k, choice]  # [M, K]
    num_ch = model.gamma.size
    onehot = np.zeros((k.size, num_ch))
    onehot[k, model.channel] = 1.0
    ch_time = sec @ onehot + model.gamma  # [M, C']
    worst = np.zeros((choice.shape[0], model.num_rounds))
    for r in range(model.num_rounds):
        worst[:, r] = ch_time[:, model.round_of == r].max(axis=1)
    total = worst.sum(axis=1)
    objective = model.a_var * (variance - model.v_utopia) + model.a_time * (total - model.t_utopia)
    return objective, variance, total


def objective_bounds(problem: Problem) -> dict[str, float]:
    """The normalization points: ``variance_nadir``, ``variance_utopia`` (all groups at the
    narrowest / widest width), ``time_nadir = sum_r max_c t_c(widest)`` and ``time_utopia =
    sum_r max_c t_c(narrowest)``, and the objective weights ``a_var`` and ``a_time`` after the
    zero-denominator guards (0 means the term is dropped)."""
    m = _model(problem)
    return {
        "variance_nadir": m.v_nadir,
        "variance_utopia": m.v_utopia,
        "time_nadir": m.t_nadir,
        "time_utopia": m.t_utopia,
        "a_var": m.a_var,
        "a_time": m.a_time,
    }


def evaluate(problem: Problem, bits: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """``(objective, variance, time)`` of per-channel group widths ``bits`` (``int[G_c]`` each,
    values in ``problem.widths``)."""
    m = _model(problem)
    return tuple(float(v[0]) for v in _evaluate(m, _choice_of(problem, m, bits)))


def _choice_of(problem: Problem, model: _Model, bits: Sequence[np.ndarray]) -> np.ndarray:
    if len(bits) != len(problem.channels):
        raise ValueError(f"{len(bits)} bit arrays for {len(problem.channels)} channels")
    flat = [np.asarray(b) for b, c in zip(bits, problem.channels, strict=True) if c.count.size]
    flat = np.concatenate(flat) if flat else np.zeros(0, np.int64)
    choice = np.searchsorted(model.widths, flat)
    if flat.size != model.channel.size or not np.array_equal(
        model.widths[np.minimum(choice, model.widths.size - 1)], flat
    ):
        raise ValueError(f"bits must give one width in {tuple(model.widths)} per group")
    return choice


def _solution(problem, model, choice, status, t0, **extra) -> Solution:
    if extra.get("used_fallback"):
        extra["fallback_channels"] = tuple(range(len(problem.channels)))
    objective, variance, total = _evaluate(model, choice)
    bits, start = [], 0
    for c in problem.channels:
        g = c.count.size
        bits.append(model.widths[choice[start : start + g]].astype(np.int8))
        start += g
    return Solution(
        bits=tuple(bits),
        objective=float(objective[0]),
        variance=float(variance[0]),
        time=float(total[0]),
        status=status,
        solve_seconds=time.perf_counter() - t0,
        **extra,
    )


# ---------------------------------------------------------------------- solvers


class _NoSolution(Exception):
    """The solver gave no usable integer solution; the message names the cause."""


def _fast_path(problem: Problem, model: _Model) -> str | None:
    if model.channel.size == 0:
        return "empty"
    if model.widths.size == 1 or model.a_time == 0.0:
        return "fast_path"
    return None


def load_solver() -> None:
    """Imports cvxpy and its solver interfaces now (about 1 s, once per process), so that the
    first solve of a run does not pay for it. A missing solver is reported by the solve."""
    try:
        _check_solver()
    except _NoSolution:
        pass


def _check_solver() -> None:
    """Raises :class:`_NoSolution` naming the cause if cvxpy or HiGHS is missing."""
    try:
        import cvxpy as cp
    except ImportError as e:  # pragma: no cover - cvxpy is a dependency
        raise _NoSolution(f"cvxpy is not importable ({e})") from e
    installed = _installed_solvers(cp.installed_solvers)
    if SOLVER not in installed:
        raise _NoSolution(
            f"MIP solver {SOLVER} is not installed (cvxpy installed solvers: {installed})"
        )


@functools.lru_cache(maxsize=4)
def _installed_solvers(query) -> tuple[str, ...]:
    """``query()`` (cvxpy's ``installed_solvers``), once per process: it probes every solver
    interface (about 10 ms a call, on every re-assignment otherwise). Keyed by the function, so
    a replaced query (a test's missing solver) is asked anew."""
    return tuple(query())


class _Program:
    """The cvxpy program of one structure (groups, channels, costs in seconds) with the variance
    costs as a parameter. The program is DPP, so cvxpy canonicalizes it once; a later solve of
    the same structure (the next assignment of a run: same plan, same groups) only substitutes
    the new costs, which saves most of cvxpy's share of a round's solve (about 12 of 22 ms for
    37 groups).

    Times are in units of ``unit`` (``T_n``), which keeps the constraint coefficients near 1:
    HiGHS drops matrix entries below 1e-9 (small_matrix_value), and NVLink-class seconds are
    far smaller. The objective is the normalized one, its constant terms folded in (see the
    module docstring).
    """

    def __init__(self, model: _Model, unit: float, pairs: np.ndarray):
        import cvxpy as cp

        num_groups, num_widths = model.var.shape
        num_ch = model.gamma.size
        cols = np.arange(num_groups * num_widths)
        onehot = sparse.csr_matrix(
            (np.ones(cols.size), (cols // num_widths, cols)), shape=(num_groups, cols.size)
        )
        load = sparse.csr_matrix(
            ((model.sec / unit).ravel(), (np.repeat(model.channel, num_widths), cols)),
            shape=(num_ch, cols.size),
        )
        in_round = sparse.csr_matrix(
            (np.ones(num_ch), (np.arange(num_ch), model.round_of)),
            shape=(num_ch, model.num_rounds),
        )
        # Each round's time is its bottleneck at the narrowest width plus y_r >= 0 (no channel
        # can be faster than that), so sum_r Z_r - T_u = sum_r y_r.
        narrowest = np.bincount(model.channel, weights=model.sec[:, 0], minlength=num_ch)
        floor = np.zeros(model.num_rounds)
        np.maximum.at(floor, model.round_of, narrowest + model.gamma)
        # Groups of one channel with equal row counts cost the same at every width, so an
        # optimum gives the heavier group at least the lighter one's width (swapping two such
        # groups' widths changes no time and the variance by (g_a - g_b)(f(b_b) - f(b_a))):
        # these order constraints (`pairs`, from _order_pairs) cut the symmetric solutions
        # HiGHS would otherwise search.
        order = _order_matrix(pairs, num_widths, cols.size)
        self.x = cp.Variable(cols.size, boolean=True)
        y = cp.Variable(model.num_rounds, nonneg=True)  # round time above `floor`, / T_n
        self.cost = cp.Parameter(cols.size)  # lam (V - V_widest) / (V_n - V_u) >= 0
        self.problem = cp.Problem(
            cp.Minimize(self.cost @ self.x + (model.a_time * unit) * cp.sum(y)),
            [
                onehot @ self.x == 1,
                load @ self.x + model.gamma / unit <= in_round @ (floor / unit + y),
                order @ self.x >= 0,
            ],
        )
        self.lock = threading.Lock()  # one solve at a time: the parameter is shared state


_PROGRAMS: collections.OrderedDict[bytes, _Program] = collections.OrderedDict()
_PROGRAMS_LOCK = threading.Lock()
PROGRAM_CACHE_SIZE = 128  # programs kept (a run of L layers and P parts needs (2L - 1)(P - 1))


def _order_pairs(model: _Model) -> np.ndarray:
    """``int64[n, 2]`` (heavier, lighter): consecutive groups, by descending weight (ties by
    index), among the groups of one channel whose per-width seconds are equal."""
    classes: dict[tuple, list[int]] = {}
    for j in range(model.channel.size):
        classes.setdefault((int(model.channel[j]), model.sec[j].tobytes()), []).append(j)
    pairs = []
    for members in classes.values():
        members.sort(key=lambda j: (-model.var[j, 0], j))
        pairs += zip(members[:-1], members[1:], strict=True)
    return np.asarray(pairs, np.int64).reshape(-1, 2)


def _order_matrix(pairs: np.ndarray, num_widths: int, num_cols: int) -> sparse.csr_matrix:
    """Rows ``sum_{i >= k} x[a, i] - sum_{i >= k} x[b, i]`` (to be ``>= 0``) for every pair
    ``(a, b)`` and threshold ``k = 1 .. W - 1``: ``a``'s width index is at least ``b``'s."""
    thresholds = np.arange(1, num_widths)
    pair, k, i = np.meshgrid(
        np.arange(pairs.shape[0]), thresholds, np.arange(num_widths), indexing="ij"
    )
    keep = i >= k  # [pairs, W - 1, W]
    row = (pair * thresholds.size + k - 1)[keep]
    heavier = (pairs[pair, 0] * num_widths + i)[keep]
    lighter = (pairs[pair, 1] * num_widths + i)[keep]
    return sparse.csr_matrix(
        (
            np.concatenate([np.ones(row.size), -np.ones(row.size)]),
            (np.concatenate([row, row]), np.concatenate([heavier, lighter])),
        ),
        shape=(pairs.shape[0] * thresholds.size, num_cols),
    )


def _structure(model: _Model, unit: float, pairs: np.ndarray) -> bytes:
    """A digest of everything in a :class:`_Program` but the variance costs."""
    h = hashlib.blake2b(digest_size=20)
    scalars = np.array([unit, model.a_time, model.num_rounds, *model.var.shape], np.float64)
    for a in (model.sec, model.gamma, model.channel, model.round_of, pairs, scalars):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.digest()


@contextlib.contextmanager
def _program(model: _Model, unit: float):
    """The cached :class:`_Program` of ``model``'s structure, held for one solve (a fresh,
    uncached one if another thread is solving the cached one)."""
    pairs = _order_pairs(model)
    key = _structure(model, unit, pairs)
    with _PROGRAMS_LOCK:
        program = _PROGRAMS.get(key)
        if program is not None:
            _PROGRAMS.move_to_end(key)
    if program is None or not program.lock.acquire(blocking=False):
        fresh = _Program(model, unit, pairs)
        fresh.lock.acquire()
        if program is None:
            with _PROGRAMS_LOCK:
                _PROGRAMS[key] = fresh
                while len(_PROGRAMS) > PROGRAM_CACHE_SIZE:
                    _PROGRAMS.popitem(last=False)
        program = fresh
    try:
        yield program
    finally:
        program.lock.release()


def _milp(problem: Problem, model: _Model, time_limit: float, mip_rel_gap: float):
    """Solves the program with HiGHS through cvxpy (checked by :func:`_check_solver`). Returns
    ``(choice int[K], status, gap)``; raises :class:`_NoSolution` when there is no usable
    integer solution."""
    num_groups, num_widths = model.var.shape
    # HiGHS options pass through cvxpy as solver_opts (cvxpy 1.9: each key goes to
    # Highs.setOptionValue; a bad name or value raises). mip_abs_gap = 0 leaves the relative gap
    # as the only optimality stop (HiGHS's default absolute gap of 1e-6 is not small next to
    # a normalized objective).
    # threads = 1: the parallelism is across programs and rounds (:func:`_solve_all`'s pool);
    # HiGHS's own workers on top of that oversubscribe the cores (SBM, P = 8, 2 cores: 0.50-0.54
    # s per re-assignment with its default, 0.33-0.36 s with one thread, the same objectives;
    # experiments/bench_assign.py). HiGHS keeps one scheduler per calling thread, sized by the first
    # run on it, and refuses a later run asking for another size: hence the solves always run
    # on the pool's own threads, never on the caller's.
    options = {
        "time_limit": float(time_limit),
        "mip_rel_gap": float(mip_rel_gap),
        "mip_abs_gap": 0.0,
        "output_flag": False,
        "threads": 1,
    }
    try:
        with _program(model, model.t_nadir) as program:
            program.cost.value = model.a_var * (model.var - model.var[:, -1:]).ravel()
            prob = program.problem
            # get_problem_data + solve_via_data + invert is cvxpy's documented low-level path;
            # it skips Problem.solve's "Solution may be inaccurate" UserWarning on a time
            # limit, which is an expected outcome here, not a reason to warn.
            data, chain, inverse = prob.get_problem_data(SOLVER)
            raw = chain.solve_via_data(prob, data, solver_opts=options)
            result = chain.invert(raw, inverse)
            values = (result.primal_vars or {}).get(program.x.id)
    except Exception as e:  # any solver failure falls back: the training run must go on
        raise _NoSolution(f"MIP solver {SOLVER} raised {type(e).__name__}: {e}") from e
    info = raw.get("info") if isinstance(raw, dict) else None
    feasible = getattr(info, "primal_solution_status", 2) == 2  # kSolutionStatusFeasible
    if result.status not in ("optimal", "optimal_inaccurate", "user_limit") or not feasible:
        raise _NoSolution(
            f"MIP solver {SOLVER} found no integer solution (status {result.status}, "
            f"HiGHS {raw.get('model_status') if isinstance(raw, dict) else raw!r}, "
            f"time_limit {time_limit} s)"
        )
    values = np.asarray(values, np.float64).reshape(num_groups, num_widths)
    if not np.all(np.isfinite(values)) or np.any(np.abs(values.sum(axis=1) - 1.0) > 0.5):
        raise _NoSolution(f"MIP solver {SOLVER} returned a non-integral assignment")
    gap = getattr(info, "mip_gap", None)
    gap = float(gap) if gap is not None and np.isfinite(gap) else None
    return np.argmax(values, axis=1), result.status, gap


# ---------------------------------------------------------------------- the exact frontier solver

# States a channel's frontier program may hold before the frontier solver gives up: n groups of
# one size at widths 2/4/8 take n (3 n + 1) (20M: n = 2,580 groups in one channel).
FRONTIER_MAX_POINTS = 20_000_000


def _pareto(load: np.ndarray, var: np.ndarray) -> np.ndarray:
    """Indices of the Pareto points among candidates ``(load, var)``, by ascending load with
    strictly descending variance (of equal loads, only the least variance)."""
    order = np.lexsort((var, load))  # by load, then variance
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], var[order][:-1]]))
    return order[var[order] < best_before]


def _class_frontier(var: np.ndarray, load: np.ndarray) -> tuple[np.ndarray, ...]:
    """The frontier of ``n`` groups of one size: ``var: float64[n, W]``, their common per-width
    loads ``load: int64[W]``; returns as :func:`_channel_frontier`.

    The loads above the cheapest width's are multiples of their gcd ``q``, so a choice's load is
    ``n * min(load) + s * q`` for an integer ``s`` up to ``n * (max(load) - min(load)) / q``
    (``3 n`` at widths 2/4/8). A dynamic program over the groups keeps, for every ``s``, the
    least variance reaching it exactly and each group's width there; the frontier is the ``s``
    whose variance is below that of every smaller ``s``."""
    n, num_widths = var.shape
    if n == 1:  # the group's own widths
        kept = _pareto(load, var[0])
        return load[kept], var[0, kept], kept[:, None].astype(np.int8)
    step = load - load.min()
    q = np.gcd.reduce(step[step > 0]) if np.any(step > 0) else 1
    step = step // q
    size = n * int(step.max()) + 1
    if n * size > FRONTIER_MAX_POINTS:
        raise ValueError(
            f"a channel's frontier needs {n} x {size} states, more than {FRONTIER_MAX_POINTS} "
            f"({n} groups of one size in one channel): use a larger group_size, or "
            "solver='milp'"
        )
    best = np.full(size, np.inf)
    best[0] = 0.0
    picks = np.zeros((n, size), np.int8)
    cand = np.empty((num_widths, size))
    for j in range(n):
        cand.fill(np.inf)
        for i in range(num_widths):
            cand[i, step[i] :] = best[: size - step[i]] + var[j, i]
        picks[j] = np.argmin(cand, axis=0)  # ties: the first width
        best = cand[picks[j], np.arange(size)]
    reached = np.flatnonzero(np.isfinite(best))
    kept = reached[_pareto(reached, best[reached])]
    choice = np.empty((kept.size, n), np.int8)
    point = kept.copy()
    for j in range(n - 1, -1, -1):
        choice[:, j] = picks[j, point]
        point -= step[choice[:, j]]
    return n * load.min() + kept * q, best[kept], choice


def _channel_frontier(
    var: np.ndarray, count: np.ndarray, per_row: np.ndarray
) -> tuple[np.ndarray, ...]:
    """The exact (load, variance) Pareto frontier of one channel's groups.

    ``var: float64[G, W]``, ``count: int64[G]`` rows per group, ``per_row: int64[W]`` bits per
    row at each width -> ``load: int64[F]`` ascending, ``variance: float64[F]`` strictly
    descending, ``choice: int8[F, G]`` width indices reaching them: each point is the least
    variance of any choice of widths with at most its load. The groups of one size form a
    class with a frontier of its own (:func:`_class_frontier`); the classes' frontiers are
    combined pairwise, keeping the Pareto points of their sums (a channel of
    :func:`make_problem` has at most two classes: its full groups and a partial last one)."""
    sizes, klass = np.unique(count, return_inverse=True)
    total, spread = np.zeros(1, np.int64), np.zeros(1)
    choice = np.zeros((1, var.shape[0]), np.int8)
    for c, size in enumerate(sizes):
        members = np.flatnonzero(klass == c)
        c_load, c_var, c_choice = _class_frontier(var[members], size * per_row)
        if total.size * c_load.size > FRONTIER_MAX_POINTS:
            raise ValueError(
                f"a channel's frontier needs {total.size * c_load.size} candidate points, "
                f"more than {FRONTIER_MAX_POINTS} (groups of too many distinct sizes): use "
                "solver='milp'"
            )
        cand_load = (total[:, None] + c_load[None, :]).ravel()
        cand_var = (spread[:, None] + c_var[None, :]).ravel()
        kept = _pareto(cand_load, cand_var)
        a, b = np.divmod(kept, c_load.size)
        total, spread, choice = cand_load[kept], cand_var[kept], choice[a]
        choice[:, members] = c_choice[b]
    return total, spread, choice


def _frontier(problem: Problem, model: _Model) -> np.ndarray:
    """The exact optimum of the program (width indices ``int64[K]``), without a MIP solver.

    In one ring round the channels interact only through the round's time ``Z_r``: for a
    given ``Z_r`` each channel independently takes the least variance whose time fits, which
    is a lookup in its (load, variance) frontier (:func:`_channel_frontier`). The round's
    objective ``a_var * sum_c V_c(Z_r) + a_time * Z_r`` is then piecewise constant in ``Z_r``
    plus a rising line, so its minimum lies at one of the channels' frontier times; all of
    them are scored and the best kept (ties: the shortest round). Rounds are independent (see
    the module docstring), so the program's optimum is the rounds' optima together.
    """
    used = [c for c in problem.channels if c.count.size]  # the model's channels
    count = np.concatenate([c.count for c in used])  # the bits of a group: count * per_row
    per_row = _row_bits(model.widths, problem.dim)
    theta = np.array([problem.theta[c.sender, c.receiver] for c in used], np.float64)
    choice = np.zeros(model.channel.size, np.int64)
    for r in range(model.num_rounds):
        chans = np.flatnonzero(model.round_of == r)
        fronts = []
        for c in chans:
            groups = np.flatnonzero(model.channel == c)
            bits, variance, pick = _channel_frontier(model.var[groups], count[groups], per_row)
            seconds = theta[c] * bits / (8.0 * MIB) + model.gamma[c]
            fronts.append((groups, seconds, variance, pick))
        floor = max(seconds[0] for _, seconds, _, _ in fronts)
        z = np.unique(np.concatenate([seconds for _, seconds, _, _ in fronts]))
        z = z[z >= floor]
        total = np.zeros(z.size)
        index = []
        for _, seconds, variance, _ in fronts:
            k = np.searchsorted(seconds, z, side="right") - 1  # >= 0: z >= the channel's least
            total += variance[k]
            index.append(k)
        best = int(np.argmin(model.a_var * total + model.a_time * z))
        for (groups, _, _, pick), k in zip(fronts, index, strict=True):
            choice[groups] = pick[k[best]]
    return choice


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
    """Solves every program of ``problems``: whole if it has at most :data:`JOINT_MAX_GROUPS`
    groups, else round by round (see the module docstring: the rounds share no variable or
    constraint, so the per-round optima add up to the program's optimum); all these HiGHS runs
    share one pool of ``max_workers`` threads (HiGHS releases the GIL while it runs). No
    warnings: the caller's thread raises them.

    Each round's HiGHS run gets an equal, fixed share of its program's ``time_limit`` (not what
    earlier rounds left over, so a round's answer does not depend on how fast the others ran).
    A program's status is ``"optimal"`` when every round was solved to its gap and
    ``"user_limit"`` otherwise; its gap is the largest part's. If a part has no integer
    solution, the program keeps its fallback, with the round named in the cause.
    ``solve_seconds`` is the wall time from the call to the program's result.

    With ``solver="frontier"`` each program is solved exactly by :func:`_frontier` instead
    (status ``"optimal"``, gap 0; no time limit, no fallback).
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
            out[key] = _solution(
                problems[key],
                model,
                fallback_choice,
                "fallback",
                t0,
                used_fallback=True,
                cause=str(e),
            )
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
            out[key] = _solution(
                problem,
                model,
                fallback_choice,
                "fallback",
                t0,
                used_fallback=True,
                cause=cause,
            )
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
            kept = tuple(used[c] for r, _ in failed for c in np.flatnonzero(model.round_of == r))
        out[key] = _solution(
            problem,
            model,
            choice,
            status,
            t0,
            mip_gap=gap,
            cause=cause,
            fallback_channels=tuple(sorted(kept)),
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
      problem: the program.
      time_limit: seconds of HiGHS for the whole program, split equally between its rounds
        (cvxpy's model building comes on top: milliseconds per round).
      mip_rel_gap: HiGHS's relative MIP gap at which the search stops (0: prove optimality).
      fallback: the assignment kept when the program cannot be solved: one width for every
        group (``None``: the widest of ``problem.widths``), or per channel ``int[G_c]`` group
        widths.
      solver: ``"milp"`` (HiGHS through cvxpy) or ``"frontier"`` (exact: per-channel Pareto
        frontiers of (bytes, variance) and a sweep over each round's time, see
        :func:`_frontier`; ``time_limit``, ``mip_rel_gap`` and ``fallback`` do not apply).

    Returns:
      The :class:`Solution`. Never raises for a solver failure: a missing solver, a solver
      error or no integer solution within the limit returns ``fallback`` and warns.

    Warns:
      SolverFallbackWarning: naming the cause when the fallback is returned.
    """
    solution = _solve(problem, time_limit, mip_rel_gap, fallback, solver)
    _warn_fallback(problem, solution, fallback)
    return solution


def solve_brute_force(problem: Problem, *, max_groups: int = 12) -> Solution:
    """Exhaustive enumeration of the same objective (a test oracle; ``W^K`` candidates).

    Raises:
      ValueError: if the problem has more than ``max_groups`` groups.
    """
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


# ---------------------------------------------------------------------- rows in, rows out


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
        singles, _ = make_problem(
            channels,
            dim=problem.dim,
            theta=problem.theta,
            gamma=problem.gamma,
            num_parts=problem.num_parts,
            lam=problem.lam,
            group_size=1,
            widths=tuple(sorted(set(problem.widths) | {int(v) for b in rows for v in b})),
        )
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
        "variance_nadir": bounds["variance_nadir"],
        "variance_utopia": bounds["variance_utopia"],
        "time_nadir": bounds["time_nadir"],
        "time_utopia": bounds["time_utopia"],
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
    """Groups, solves and expands one exchange key.

    Args:
      channels: the key's :class:`Channel` s (or plain ``(sender, receiver, round, beta)``).
      dim, theta, gamma, num_parts, lam, widths: as in :class:`Problem`.
      group_size: rows per group (:func:`group_rows`).
      time_limit, mip_rel_gap, solver: as in :func:`solve`.
      fallback: kept when the program cannot be solved: one width (``None``: the widest), or per
        channel ``int[n_c]`` row widths (e.g. the previous assignment).

    Returns:
      per channel ``int8[n_c]`` row widths in the channel's row order, and a log dict.

    Warns:
      SolverFallbackWarning: when the fallback is returned.
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
) -> dict[str, tuple[list[np.ndarray], dict]]:
    """:func:`assign_bits` for several exchange keys at once, solved in parallel threads.

    Args:
      specs: ``{key: (channels, dim)}``.
      fallback: one width, or ``{key: per channel int[n_c] row widths}``.
      others: as in :func:`assign_bits`.

    Returns:
      ``{key: (per channel int8[n_c] row widths, log dict)}``.
    """
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


__all__ = [
    "BITS",
    "Channel",
    "ChannelGroups",
    "Problem",
    "Solution",
    "SOLVERS",
    "SolverFallbackWarning",
    "assign_bits",
    "evaluate",
    "expand_bits",
    "group_rows",
    "load_solver",
    "make_problem",
    "objective_bounds",
    "solve",
    "solve_brute_force",
    "solve_channels",
    "solve_many",
]
