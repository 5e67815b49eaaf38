"""The bit-width program against AdaQP's objective written out here, not the library's model.

The brute-force tests of ``test_assign.py`` compare the solvers with ``solve_brute_force``, which
scores candidates with the library's own model: a wrong variance factor or byte count there
moves both sides alike. Here every candidate assignment of a tiny program is scored by the
seed's formulas (Wan et al., MLSys 2023, problems 10-12, with the normalization and the byte
count that ``jaxgraph.comm.assign`` documents), computed in this file with NumPy:

* variance: ``V = sum_k beta_k / (2^b_k - 1)^2`` (stochastic rounding of a row of range
  ``max - min`` at ``b`` bits; ``beta_k`` folds in ``D (max - min)^2 / 6`` and the aggregation
  coefficients), 0 for a raw fp32 row;
* time: per channel ``t_c = theta_c * MiB_c + gamma_c`` with ``MiB_c = sum_k (b_k D + 8 * 8)
  / 8 / 2^20`` (codes plus an fp32 ``(scale, lo)`` per row; ``4 D`` bytes for a raw fp32 row),
  per ring round the slowest channel that carries rows, summed over the rounds;
* objective: ``lam (V - V_u) / (V_n - V_u) + (1 - lam) (T - T_u) / (T_n - T_u)``, ``n`` / ``u``
  every row at the narrowest / widest width.

The solvers' choice must attain the minimum over all assignments and the objective, variance and
time they report must be those of their choice under these formulas.
"""

import itertools

import numpy as np
import pytest

from jaxgraph.comm.adaptive import AssignConfig, Traces
from jaxgraph.comm.adaqp import AdaQP
from jaxgraph.comm.assign import BITS, Channel, assign_bits
from jaxgraph.comm.costmodel import CostModel
from jaxgraph.graph import Graph
from jaxgraph.partition import build_halo_plan
from jaxgraph.partition.buckets import BitAssignment

# Objectives are O(1) (normalized); the MILP runs with mip_rel_gap = 0, so its optimum agrees
# with the enumerated one up to HiGHS's feasibility tolerance (1e-7 on normalized terms). The
# reported terms are recomputed from the same floats: float64 rounding only.
OPT_ABS = 1e-6
REPORT_REL = 1e-9
# Through the controller the weights carry the plan's float32 GCN coefficients (relative rounding
# 6e-8, squared: 1.2e-7), and so does every term the log reports.
PLAN_REL = 1e-6


def _row_bytes(width: int, dim: int, param_bytes: int = 8) -> float:
    """Bytes of one row on the wire: packed codes and its (scale, lo) (fp32: 8 bytes, bfloat16:
    4), or a raw fp32 row."""
    return 4.0 * dim if width == 32 else (width * dim + 8 * param_bytes) / 8.0


def _row_variance_factor(width: int) -> float:
    return 0.0 if width == 32 else 1.0 / (2.0**width - 1.0) ** 2


def _seed_terms(rows, dim, theta, gamma, candidates, param_bytes=8):
    """Variance and time of every candidate assignment.

    Args:
      rows: per row ``(sender, receiver, round, beta)``.
      candidates: ``int[M, K]`` a width per row for each of ``M`` assignments.

    Returns:
      ``(variance float64[M], time float64[M])``.
    """
    candidates = np.asarray(candidates)
    beta = np.array([r[3] for r in rows], np.float64)
    factor = np.array(
        [_row_variance_factor(w) if w in (2, 4, 8, 32) else np.nan for w in range(33)]
    )
    nbytes = np.array([_row_bytes(w, dim, param_bytes) for w in range(33)])
    variance = (factor[candidates] * beta[None, :]).sum(axis=1)  # [M]
    nbytes = nbytes[candidates]  # [M, K]
    channels = sorted({(s, e, r) for s, e, r, _ in rows})
    rounds = sorted({r for _, _, r in channels})
    worst = np.zeros((candidates.shape[0], len(rounds)))
    for s, e, r in channels:
        mine = [k for k, row in enumerate(rows) if row[:3] == (s, e, r)]
        mib = nbytes[:, mine].sum(axis=1) / 2.0**20
        t = theta[s, e] * mib + gamma[s, e]
        i = rounds.index(r)
        worst[:, i] = np.maximum(worst[:, i], t)
    return variance, worst.sum(axis=1)


def _seed_objective(rows, dim, theta, gamma, lam, widths, candidates, param_bytes=8):
    """The normalized objective of every candidate, and its variance and time."""
    k = len(rows)
    ends = np.array([[min(widths)] * k, [max(widths)] * k])
    (v_n, v_u), (t_u, t_n) = _seed_terms(rows, dim, theta, gamma, ends, param_bytes)
    assert v_n > v_u and t_n > t_u  # the instances below trade both terms
    variance, total = _seed_terms(rows, dim, theta, gamma, candidates, param_bytes)
    objective = lam * (variance - v_u) / (v_n - v_u) + (1 - lam) * (total - t_u) / (t_n - t_u)
    return objective, variance, total


def _groups(beta, group_size):
    """AdaQP's grouping, restated: rows by descending beta (stable), cut into groups."""
    order = np.argsort(-np.asarray(beta), kind="stable")
    group = np.empty(len(beta), np.int64)
    group[order] = np.arange(len(beta)) // group_size
    return group


def _all_assignments(rows_group, num_groups, widths):
    """Every assignment of one width per group, expanded to rows: ``int[W^G, K]``."""
    choices = np.array(list(itertools.product(widths, repeat=num_groups)), np.int64)
    return choices[:, rows_group]


def _instance(seed, num_parts, max_rows):
    rng = np.random.default_rng(seed)
    channels = []
    for r in range(1, num_parts):
        for s in range(num_parts):
            n = int(rng.integers(0, max_rows + 1))
            # Weights spread over decades, as traced ranges and scores are.
            channels.append(Channel(s, (s + r) % num_parts, r, rng.lognormal(0.0, 1.5, n)))
    theta = rng.uniform(5e-4, 2e-2, (num_parts, num_parts))
    gamma = rng.uniform(0.0, 1e-5, (num_parts, num_parts))
    return channels, theta, gamma


CASES = [
    # (seed, P, max rows per channel, group size, widths)
    (0, 2, 4, 1, BITS),
    (1, 3, 2, 1, BITS),
    (2, 3, 3, 2, BITS),
    (3, 4, 1, 1, BITS),
    (4, 3, 2, 1, (2, 4, 8, 32)),
    (5, 2, 5, 2, (4, 8)),
]


@pytest.mark.parametrize("solver", ["milp", "frontier"])
@pytest.mark.parametrize("lam", [0.05, 0.3, 0.6, 0.9])
@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_solver_attains_the_seed_objective_minimum(case, lam, solver):
    seed, p, max_rows, group_size, widths = case
    channels, theta, gamma = _instance(seed, p, max_rows)
    dim = 64
    rows = [(s, e, r, b) for s, e, r, beta in channels for b in beta]
    # Groups never span channels: number them channel by channel.
    rows_group, offset = [], 0
    for ch in channels:
        g = _groups(ch.beta, group_size)
        rows_group.extend(g + offset)
        offset += int(g.max()) + 1 if g.size else 0
    assert 1 <= offset <= 9  # groups to enumerate
    candidates = _all_assignments(np.array(rows_group), offset, widths)
    objective, _, _ = _seed_objective(rows, dim, theta, gamma, lam, widths, candidates)

    got, info = assign_bits(
        channels,
        dim=dim,
        theta=theta,
        gamma=gamma,
        num_parts=p,
        lam=lam,
        group_size=group_size,
        mip_rel_gap=0.0,
        solver=solver,
        widths=widths,
    )
    chosen = np.concatenate([np.asarray(b, np.int64) for b in got])[None, :]
    obj, var, total = _seed_objective(rows, dim, theta, gamma, lam, widths, chosen)
    assert obj[0] <= objective.min() + OPT_ABS
    # Every row of a group shares its width.
    for ch, b in zip(channels, got, strict=True):
        g = _groups(ch.beta, group_size)
        for j in np.unique(g):
            assert len(set(np.asarray(b)[g == j].tolist())) == 1
    assert info["objective"] == pytest.approx(obj[0], rel=REPORT_REL, abs=1e-12)
    assert info["variance"] == pytest.approx(var[0], rel=REPORT_REL)
    assert info["time"] == pytest.approx(total[0], rel=REPORT_REL)


# ---------------------------------------------------------------------- through the controller


def _tiny_plan():
    """12 nodes in 3 parts with a few cut edges: 8 messages per exchange key."""
    n, p = 12, 3
    parts = np.repeat(np.arange(p), n // p)
    src, dst = [], []
    for part in range(p):  # a path inside every part
        nodes = np.flatnonzero(parts == part)
        src.extend(nodes[:-1])
        dst.extend(nodes[1:])
    for a, b in [(0, 4), (1, 9), (5, 10), (7, 11)]:  # the cut
        src.append(a)
        dst.append(b)
    graph = Graph.from_edges(
        np.array(src), np.array(dst), num_nodes=n, symmetrize=True, name="tiny"
    )
    return graph, parts, build_halo_plan(graph, parts, num_parts=p)


def _gcn_coefficient(graph, v, w):
    """``a_wv`` of GCN with one self-loop per node, from the degrees (Kipf & Welling)."""
    src, dst = graph.edges()
    din = np.bincount(dst, minlength=graph.num_nodes) + 1.0
    dout = np.bincount(src, minlength=graph.num_nodes) + 1.0
    return din[w] ** -0.5 * dout[v] ** -0.5


def _messages(graph, parts, plan, traces, layer):
    """Per key, the rows ``(sender, receiver, round, beta)`` and where their widths live in a
    :class:`BitAssignment` (``(round - 1, forward sender, slot)``), from the graph."""
    src, dst = graph.edges()
    p = plan.num_parts
    fwd, bwd, where = [], [], []
    for r in range(1, p):
        for d in range(p):
            e = (d + r) % p
            for s in range(plan.round_rows[r - 1]):
                if not plan.send_mask[r - 1][d, s]:
                    continue
                v = int(plan.local_nodes[d, plan.send_idx[r - 1][d, s]])
                receivers = dst[(src == v) & (parts[dst] == e)]
                assert receivers.size  # a sent row has a receiver
                a2 = sum(_gcn_coefficient(graph, v, int(w)) ** 2 for w in receivers)
                # Forward: the seed's beta_k = sum_w a_wv^2 * D (max - min)^2 / 6, whose last
                # factor is the trace. Backward: the gradient partial e returns, weight 1.
                fwd.append((d, e, r, a2 * float(traces["fwd"][layer][r - 1][d, s])))
                bwd.append((e, d, r, float(traces["bwd"][layer][r - 1][e, s])))
                where.append((r - 1, d, s))
    return {f"fwd{layer}": fwd, f"bwd{layer}": bwd}, where


@pytest.mark.parametrize(
    "solver, param_dtype", [("milp", "float32"), ("frontier", "float32"), ("milp", "bfloat16")]
)
@pytest.mark.parametrize("lam", [0.2, 0.5, 0.8])
def test_controller_assignment_minimizes_the_seed_objective(lam, solver, param_dtype):
    """AdaQP end to end on the host: traces and a plan in, widths out. Forward weights are the
    seed's ``beta_k`` (``squares=True``), backward weights the returned rows' traces; every key's
    widths attain the minimum of the seed's objective over all assignments, and the log reports
    that objective."""
    graph, parts, plan = _tiny_plan()
    p, dims = plan.num_parts, (6, 40)
    rng = np.random.default_rng(5)
    # Traces per layer and round, [P, S_r]: forward ones held by the sender, backward ones by
    # the forward receiver (d + r), in the slot order of the rows it received.
    held = {
        "fwd": list(plan.send_mask),
        "bwd": [np.roll(m, r, axis=0) for r, m in enumerate(plan.send_mask, 1)],
    }
    traces = {
        direction: [[rng.lognormal(0.0, 1.5, m.shape) * m for m in masks] for _ in dims]
        for direction, masks in held.items()
    }
    cost = CostModel(theta=rng.uniform(0.05, 1.0, (p, p)) * 1e3, gamma=rng.uniform(0, 1e-5, (p, p)))
    exchange = AdaQP(
        AssignConfig(lam=lam, group_size=1, solver=solver, mip_gap=0.0),
        chunks=0,
        score="squares",
        param_dtype=param_dtype,
    )
    param_bytes = {"float32": 8, "bfloat16": 4}[param_dtype]
    controller = exchange.controller(plan, dims, cost=cost)
    previous = BitAssignment.uniform(plan, len(dims), 8)
    assignment, log = controller.solve(Traces(**traces), previous)
    checked = 0
    for layer, dim in enumerate(dims):
        keys, where = _messages(graph, parts, plan, traces, layer)
        for key, rows in keys.items():
            if key == "bwd0":
                continue  # the first layer's input is data: no backward exchange
            table = assignment.bwd[layer] if key.startswith("bwd") else assignment.fwd[layer]
            chosen = np.array([[int(table[r][d, s]) for r, d, s in where]])
            assert 1 <= len(rows) <= 9
            cand = np.array(list(itertools.product(BITS, repeat=len(rows))), np.int64)
            args = (rows, dim, cost.theta, cost.gamma, lam, BITS)
            objective, _, _ = _seed_objective(*args, cand, param_bytes)
            obj, var, total = _seed_objective(*args, chosen, param_bytes)
            assert obj[0] <= objective.min() + OPT_ABS, key
            info = log["keys"][key]
            assert info["objective"] == pytest.approx(obj[0], rel=PLAN_REL, abs=1e-9)
            assert info["variance"] == pytest.approx(var[0], rel=PLAN_REL)
            assert info["time"] == pytest.approx(total[0], rel=REPORT_REL)
            checked += 1
    assert checked == 3  # fwd0, fwd1, bwd1
