"""**The exact frontier solver** (``solver="frontier"``): the same program without a MIP solver,
to optimality. Within a round, channels share nothing but ``Z_r``, and a channel's time rises
with its bytes, so all that matters of its choices is its Pareto frontier of (bytes, least
variance). The groups of one size form a class whose loads lie on a grid (``3 n + 1`` points
for ``n`` groups at widths 2/4/8), where a dynamic program finds the least variance of every
load exactly; the classes' frontiers are combined by Pareto-pruned sums. A round's objective is
then a step function of ``Z_r`` plus ``a_time Z_r``, minimal at one of the channels' frontier
times, all of which are scored. Cost ``O(n^2 W)`` per class.
"""

from __future__ import annotations

import numpy as np

from jaxgraph.comm.assign.problem import Problem, _Model, _row_bits
from jaxgraph.comm.costmodel import MIB

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

    A choice's load is ``n * min(load) + s * q`` (``q`` the gcd of the load steps) for an
    integer ``s``; a dynamic program over the groups keeps, for every ``s``, the least variance
    reaching it and each group's width there."""
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
    descending, ``choice: int8[F, G]`` width indices reaching them. The classes' frontiers
    (:func:`_class_frontier`) are combined pairwise, keeping the Pareto points of their sums."""
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
    """The exact optimum of the program (width indices ``int64[K]``), without a MIP solver: per
    round, every channel frontier time is scored as ``Z_r`` (each channel taking its least
    variance that fits) and the best kept (ties: the shortest round)."""
    used = [c for c in problem.channels if c.count.size]  # the model's channels
    count = np.concatenate([c.count for c in used])  # the bits of a group: count * per_row
    per_row = _row_bits(model.widths, problem.dim, problem.param_bytes)
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
