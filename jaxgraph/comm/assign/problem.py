"""The assignment problem: channels, groups of rows, the program's model and its evaluation.

Differences from AdaQP, on purpose:

* ``MB`` counts the group's real rows ``n_j`` (AdaQP: ``group_size`` for the partial last group
  too) and the bytes of the ``(scale, lo)`` per row (:func:`jaxgraph.partition.buckets.wire_bytes`);
  the per-bucket rounding to whole bytes is left out, which keeps the model linear.
* ``T_u`` is the achievable lower bound ``sum_r max_c`` (AdaQP: the looser ``sum_r min_c``).
* A channel with no rows has no constraint and adds no ``gamma``; nor has a round without rows
  a ``Z_r``.
* Zero denominators are guarded: with every weight zero the variance term is dropped, with
  ``T_n - T_u <= 1e-12 T_n`` the time term. Without time term (or with a single width) every
  group gets the widest width, without the solver (optimal).
* At ``lam = 0`` the widths under each round's bottleneck are ties the solver resolves; a small
  ``lam > 0`` fills that slack with the widest widths that fit.
* The solver runs under a time limit and a relative gap; without an integer solution the
  caller's fallback is kept (:class:`SolverFallbackWarning`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxgraph.comm.costmodel import MIB

BITS = (2, 4, 8)
ALL_WIDTHS = (2, 4, 8, 32)  # 32: raw fp32 rows (compression off), as in jaxgraph.partition.buckets
PARAM_BYTES = 8  # fp32 (scale, lo) per quantized row (bfloat16: 4; Problem.param_bytes)
TIME_TOL = 1e-12  # relative: T_n - T_u below this share of T_n counts as "no time to trade"
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
      param_bytes: bytes of a quantized row's ``(scale, lo)``: 8 (fp32) or 4 (bfloat16).
    """

    channels: tuple[ChannelGroups, ...]
    dim: int
    theta: np.ndarray
    gamma: np.ndarray
    lam: float
    num_parts: int
    widths: tuple[int, ...] = BITS
    param_bytes: int = PARAM_BYTES

    def __post_init__(self):
        p = self.num_parts
        if self.param_bytes not in (4, 8):
            raise ValueError(f"param_bytes must be 4 or 8, got {self.param_bytes}")
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
      status: ``"optimal"``, ``"user_limit"`` (best integer solution under the limit or gap),
        ``"fast_path"``, ``"empty"`` or ``"fallback"``.
      solve_seconds: wall time from the start of the solving call to this program's result.
      used_fallback: the fallback was returned for the whole program.
      cause: why the fallback was used, for the whole program or some rounds (else empty).
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


def group_rows(beta: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups one channel's rows by descending ``beta`` (AdaQP's grouping): sorted (ties keep
    their order) and cut into consecutive groups of ``group_size``, the last maybe partial.

    ValueError if ``group_size < 1`` or ``beta`` is not 1-D, finite and non-negative.

    Shapes:
      ``beta: [n]`` -> ``group_of_row: int32[n]`` (the group of each row, original row order),
      ``group_weight: float64[G]`` (sum of ``beta`` per group), ``group_count: int64[G]``.
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
    param_bytes: int = PARAM_BYTES,
) -> tuple[Problem, tuple[np.ndarray, ...]]:
    """Groups every channel's rows and builds the program: the :class:`Problem` and, per
    channel, ``group_of_row: int32[n_c]`` for :func:`expand_bits`."""
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
        param_bytes=int(param_bytes),
    )
    return problem, tuple(group_of_row)


def _row_bits(widths: np.ndarray, dim: int, param_bytes: int = PARAM_BYTES) -> np.ndarray:
    """``int64[W]`` bits per row at each width: packed codes plus the ``(scale, lo)`` of
    ``param_bytes``; raw fp32 at 32 (exact integers, so that the frontier solver's equal
    totals compare equal)."""
    widths = np.asarray(widths, np.int64)
    return np.where(widths == 32, 32 * dim, widths * dim + 8 * param_bytes)


def _row_mib(widths: np.ndarray, dim: int, param_bytes: int = PARAM_BYTES) -> np.ndarray:
    """MiB per row at each width (:func:`_row_bits` in MiB)."""
    return _row_bits(widths, dim, param_bytes) / (8.0 * MIB)


def variance_factor(widths: np.ndarray) -> np.ndarray:
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
    var = weight[:, None] * variance_factor(widths)[None, :]
    sec = (
        theta[channel][:, None]
        * count[:, None]
        * _row_mib(widths, problem.dim, problem.param_bytes)[None, :]
    )
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
        raise ValueError(f"bits must give one width in {tuple(model.widths.tolist())} per group")
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


class _NoSolution(Exception):
    """The solver gave no usable integer solution; the message names the cause."""


def _fast_path(problem: Problem, model: _Model) -> str | None:
    if model.channel.size == 0:
        return "empty"
    if model.widths.size == 1 or model.a_time == 0.0:
        return "fast_path"
    return None
