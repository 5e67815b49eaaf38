"""Adaptive widths per owner block at interior lam, against the seed's objective written here.

``test_block_widths.py`` drives the controller at lam = 0 and 1 only, where every block takes
the narrowest or the widest width whatever its weight, and checks ``choose_widths`` alone on
given weights. Here the controller solves from traces, and every assignment of widths to the
blocks is scored in this file from the graph, the traces and the cost model:

* forward weight of block ``j``: ``V_j = sum_v (sum_w a_wv^2) traced_v`` over the block's rows
  ``v`` and their receivers ``w`` in other blocks, ``a_wv`` GCN's coefficient with one
  self-loop per node (the seed's ``beta_k`` after its Theorem 3, ``traced_v = D (max - min)^2 /
  6``); backward weight: the summed traces of the gradient partials reduced to block ``j``;
* variance ``sum_j V_j / (2^b_j - 1)^2``; time ``sum_j T_j(b_j)``, ``T_j`` the binomial tree
  of block ``j`` (round ``k = 1, 2, 4, ...``: relative rank ``a < k`` sends to ``a + k``), per
  round its slowest link ``theta * MiB + gamma`` (links reversed for the reduction);
* objective ``lam (V - V_u) / (V_n - V_u) + (1 - lam) (T - T_u) / (T_n - T_u)`` with ``n`` / ``u``
  every block at the narrowest / widest width.
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.blockwidths import WidthTrace
from jaxgraph.comm.cagnet import CAGNET
from jaxgraph.comm.costmodel import CostModel
from jaxgraph.partition.blockhalo import build_block_halo_plan

from graph_cases import power_law

CANDIDATES = (2, 4, 8)
LAMS = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 .. 0.95
# The objective is normalized (O(1)); the controller's weights carry the plan's float32 GCN
# coefficients and float32 traces (relative rounding about 1e-7), so a choice within 1e-6 of
# the enumerated minimum is optimal.
OPT_ABS = 1e-6


def _setup(num_parts=4, dims=(8, 24), seed=2):
    graph = power_law(n=120, seed=3)  # hubs: rows with many remote receivers
    rng = np.random.default_rng(seed)
    parts = rng.integers(0, num_parts, graph.num_nodes)
    plan = build_block_halo_plan(graph, parts, num_parts=num_parts)
    p, b = plan.num_parts, plan.num_local_rows
    # Heterogeneous links, so that the blocks' trees differ in time.
    cost = CostModel(theta=rng.uniform(0.02, 2.0, (p, p)), gamma=rng.uniform(0.0, 2e-5, (p, p)))
    traces = [
        {
            "fwd": (rng.lognormal(0.0, 1.0, (p, b)) * plan.local_mask).astype(np.float32),
            "bwd": rng.lognormal(0.0, 1.0, (p, p - 1)).astype(np.float32),
        }
        for _ in dims
    ]
    return graph, plan, cost, traces, dims


def _forward_weights(graph, plan, trace, squares=True):
    """``V_j`` from the graph (``squares=False``: the square of the coefficients' sum, the
    public AdaQP implementation's weight, which the seed's ``beta_k`` replaces)."""
    src, dst = graph.edges()
    din = np.bincount(dst, minlength=graph.num_nodes) + 1.0
    dout = np.bincount(src, minlength=graph.num_nodes) + 1.0
    out = np.zeros(plan.num_parts)
    for j in range(plan.num_parts):
        for v in range(plan.num_local_rows):
            if not plan.local_mask[j, v]:
                continue
            u = plan.local_nodes[j, v]
            w = dst[(src == u) & (plan.parts[dst] != j)]
            a = din[w] ** -0.5 * dout[u] ** -0.5
            weight = np.sum(a * a) if squares else np.sum(a) ** 2
            out[j] += weight * float(trace[j, v])
    return out


def _backward_weights(plan, trace):
    """Device ``d`` holds in halo slot ``r - 1`` the partial of block ``(d - r) mod P``."""
    p = plan.num_parts
    out = np.zeros(p)
    for d in range(p):
        for r in range(1, p):
            out[(d - r) % p] += float(trace[d, r - 1])
    return out


def _block_mib(rows, dim, bits):
    """A block on the wire: ``8 / b`` rows packed per byte of each feature column, and an fp32
    ``(scale, lo)`` per row."""
    per_byte = 8 // bits
    return (-(-rows // per_byte) * dim + 8 * rows) / 2.0**20


def _tree_seconds(cost, p, source, mib, reverse):
    total, k = 0.0, 1
    while k < p:
        links = [((source + a) % p, (source + a + k) % p) for a in range(k) if a + k < p]
        if reverse:
            links = [(b, a) for a, b in links]
        total += max(cost.theta[a, b] * mib + cost.gamma[a, b] for a, b in links)
        k *= 2
    return total


def _best(weights, seconds, lam):
    """Every assignment's objective, and the minimum's widths."""
    phi = np.array([1.0 / (2.0**b - 1.0) ** 2 for b in CANDIDATES])
    var = weights[:, None] * phi  # [P, W]
    p = len(weights)
    picks = np.array(list(itertools.product(range(len(CANDIDATES)), repeat=p)))  # [W^P, P]
    rows = np.arange(p)
    v = var[rows, picks].sum(axis=1)
    t = seconds[rows, picks].sum(axis=1)
    v_n, v_u = var[:, 0].sum(), var[:, -1].sum()
    t_n, t_u = seconds[:, -1].sum(), seconds[:, 0].sum()
    objective = lam * (v - v_u) / (v_n - v_u) + (1 - lam) * (t - t_u) / (t_n - t_u)
    best = picks[np.argmin(objective)]
    return objective, picks, tuple(CANDIDATES[i] for i in best)


def _expected(graph, plan, cost, traces, dims, lam, squares=True):
    """``{(direction, layer): (objective over every pick, picks, optimal widths)}``."""
    p, rows = plan.num_parts, plan.num_local_rows
    out = {}
    for layer, dim in enumerate(dims):
        seconds = {
            reverse: np.array(
                [
                    [
                        _tree_seconds(cost, p, j, _block_mib(rows, dim, b), reverse)
                        for b in CANDIDATES
                    ]
                    for j in range(p)
                ]
            )
            for reverse in (False, True)
        }
        fwd = _forward_weights(graph, plan, traces[layer]["fwd"], squares)
        bwd = _backward_weights(plan, traces[layer]["bwd"])
        out["fwd", layer] = _best(fwd, seconds[False], lam)
        out["bwd", layer] = _best(bwd, seconds[True], lam)
    return out


def _solve(plan, cost, traces, dims, lam):
    exchange = CAGNET(quantize="adaptive", period=2, assign=AssignConfig(lam=lam))
    controller = exchange.controller(plan, dims, cost=cost)
    state = controller.init_state()
    # The traces as the step leaves them: device arrays.
    traced = [WidthTrace(jnp.asarray(t["fwd"]), jnp.asarray(t["bwd"])) for t in traces]
    state = tuple(
        s._replace(quant=s.quant._replace(trace=t)) for s, t in zip(state, traced, strict=True)
    )
    widths, _ = controller.solve(state)
    return widths


@pytest.mark.parametrize("lam", LAMS)
def test_adaptive_block_widths_minimize_the_seed_objective(lam):
    """At every interior lam each layer's forward and backward widths attain the minimum of the
    seed's objective over all ``3^P`` assignments."""
    graph, plan, cost, traces, dims = _setup()
    widths = _solve(plan, cost, traces, dims, lam)
    expected = _expected(graph, plan, cost, traces, dims, lam)
    for (direction, layer), (objective, picks, _) in expected.items():
        got = getattr(widths[layer], direction)
        pick = [CANDIDATES.index(w) for w in got]
        value = objective[np.flatnonzero((picks == pick).all(axis=1))[0]]
        assert value <= objective.min() + OPT_ABS, (direction, layer, got)


def test_interior_lams_mix_widths_and_depend_on_the_seed_weight():
    """The instance has teeth: over the interior lams the optimal forward widths mix
    candidates, and at some lam they differ from the optimum under the square of the
    coefficients' sum (a weight that drops the seed's ``beta_k``), so the test above tells the
    two apart."""
    graph, plan, cost, traces, dims = _setup()
    mixed = differ = 0
    for lam in LAMS:
        seed = _expected(graph, plan, cost, traces, dims, lam)
        other = _expected(graph, plan, cost, traces, dims, lam, squares=False)
        for layer in range(len(dims)):
            best = seed["fwd", layer][2]
            mixed += len(set(best)) > 1
            differ += best != other["fwd", layer][2]
    assert mixed >= 5 and differ >= 4
