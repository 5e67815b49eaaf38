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

Where it differs from AdaQP on purpose (real row counts, a tighter ``T_u``, empty channels,
guarded denominators, ties at ``lam = 0``, a time-limited solver with a fallback) is listed in
:mod:`.problem`.

Modules: :mod:`.problem` (channels, groups, the program's model and its evaluation),
:mod:`.milp` (the program for HiGHS through cvxpy, cached by structure), :mod:`.frontier`
(the exact solver without a MIP solver), :mod:`.solving` (whole or round by round, in threads,
with the caller's fallback; per-row results for the exchange).
"""

from jaxgraph.comm.assign.milp import SOLVER, load_solver
from jaxgraph.comm.assign.problem import (
    ALL_WIDTHS,
    BITS,
    PARAM_BYTES,
    SOLVERS,
    Channel,
    ChannelGroups,
    Problem,
    Solution,
    SolverFallbackWarning,
    evaluate,
    expand_bits,
    group_rows,
    make_problem,
    objective_bounds,
)
from jaxgraph.comm.assign.solving import (
    assign_bits,
    describe_fallback,
    solve,
    solve_brute_force,
    solve_channels,
    solve_many,
)

__all__ = [
    "ALL_WIDTHS",
    "BITS",
    "PARAM_BYTES",
    "SOLVER",
    "Channel",
    "ChannelGroups",
    "Problem",
    "Solution",
    "SOLVERS",
    "SolverFallbackWarning",
    "assign_bits",
    "describe_fallback",
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
