"""Bit-width assignment by the bi-objective mixed-integer program of AdaQP (host side).

One program per exchange key (``fwd{l}``, ``bwd{l}``), after Wan et al., MLSys 2023 (AdaQP,
``assigner/assigner.py``). A channel ``c`` is one directed transfer of one ring round (forward
keys: ``d -> (d + r) mod P``, backward keys the other way); its rows, each with a variance
weight ``beta_v >= 0``, are sorted by ``beta`` descending and cut into groups of ``group_size``
rows of weight ``g_j = sum beta_v``, a group's rows sharing its width.
Booleans ``x[j, i]`` pick width ``b_i`` for group ``j``; continuous ``Z_r`` bound round ``r``::

    minimize   lam * (sum V x - V_u) / (V_n - V_u) + (1 - lam) * (sum_r Z_r - T_u) / (T_n - T_u)
    s.t.       sum_i x[j, i] = 1                                       for every group j
               theta_c * sum_{j in c, i} MB[j, i] x[j, i] + gamma_c <= Z_r(c)   for every channel c

    V[j, i]  = g_j / (2^b_i - 1)^2                 (stochastic-rounding variance of the group)
    MB[j, i] = (b_i * D * n_j / 8 + 8 * n_j) / 2^20  MiB (codes + fp32 (scale, lo) per row)

``theta_c``, ``gamma_c``: :mod:`jaxgraph.comm.costmodel`. ``V_n``/``V_u`` and ``T_n``/``T_u =
sum_r max_c t_c``: every group at the narrowest/widest and widest/narrowest width. The
deliberate differences from AdaQP are listed in :mod:`.problem`.
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
