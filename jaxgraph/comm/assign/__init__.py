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
  :func:`jaxgraph.partition.buckets.wire_bytes` puts on the wire. The per-bucket rounding of packed
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
