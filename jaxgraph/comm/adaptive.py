"""Adaptive bit-widths (AdaQP, Wan et al., MLSys 2023): the settings, message scores and traces.

AdaQP picks a width for every group of halo messages by a bi-objective mixed-integer program
trading the variance quantization adds to the aggregations against the slowest transfer of each
ring round (:mod:`jaxgraph.comm.assign`; the method is :class:`~jaxgraph.comm.adaqp.AdaQP`).

**Tracing** (in :attr:`AdaptiveState.trace`): every exchange adds, per slot, the row's range
variance ``(D / 6) (max - min)^2`` (:func:`~jaxgraph.comm.qring.row_range_variance`; the
rounding variance up to ``1 / (2^b - 1)^2``); forward rows at the sender, backward rows at the
forward receiver through the exchange's probe.

**Scores.** A forward message ``v`` enters the receiver's aggregation with coefficients ``a_wv``
(``deg(w)^-1/2 deg(v)^-1/2`` for GCN, ``1 / deg(w)`` for mean). By default its weight is
``beta(v) = (sum_w a_wv)^2 * traced(v)``, the square of the sum, as the public implementation.
With ``squares=True`` it is the seed's ``beta_k`` (after AdaQP's Theorem 3), ``beta(v) = (sum_w
a_wv^2) * traced(v)``. A backward message is already the receiver's aggregated partial
``sum_w a_wv g_w``, added with coefficient 1: its score is 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.method import RunInfo, check_periodic
from jaxgraph.comm.qring import row_range_variance
from jaxgraph.configfile import from_dict
from jaxgraph.options import flag
from jaxgraph.partition.buckets import QUANT_WIDTHS, BitAssignment, Layouts, check_widths
from jaxgraph.partition.halo import HaloPlan

NORMS = ("gcn", "mean")
# Presets under which every re-assignment logs its modelled communication time.
PROJECTION_PRESETS = ("10gbe", "pcie3x16")


@dataclasses.dataclass(frozen=True)
class AssignConfig:
    """Settings of the adaptive bit assignment.

    Attributes:
      lam: weight of the variance term (``1 - lam`` weighs the time term), in ``[0, 1]``.
      group_size: messages per group of one channel (rows sorted by weight, descending).
      interconnect: how a transfer between two devices is priced: a preset of
        :data:`jaxgraph.comm.costmodel.PRESETS` (e.g. ``"10gbe"``), a two-level topology
        ``"<intra>:<hosts>:<inter>"`` (e.g. ``"nvlink3:2:10gbe"``: the devices split over 2
        hosts, NVLink inside a host, 10 GbE across), or ``"measure"`` to time ``ppermute``
        payloads on the run's mesh (meaningful on accelerators; on the emulated CPU mesh a
        transfer is a memory copy).
      widths: the candidate bit-widths of every group (a subset of ``(2, 4, 8)``; also the
        widths ``quant-random`` draws from, for a like-for-like baseline). The first period
        runs at 8 bits, or the widest.
      solver: ``"milp"``: the mixed-integer program with HiGHS through cvxpy, under
        ``time_limit`` and ``mip_gap``; ``"frontier"``: the same program's exact optimum by
        per-channel Pareto frontiers (:func:`jaxgraph.comm.assign.solve`; milliseconds where
        HiGHS takes tenths of a second, and no MIP solver needed).
      time_limit: seconds per mixed-integer solve.
      mip_gap: relative MIP gap at which a solve stops.
      lookahead: solve this many epochs before each period boundary, so that the new step can
        compile in the background while those epochs train (``TrainConfig.compile_ahead``).
        The solve misses the period's last ``lookahead`` epochs; 0 solves at the boundary.
    """

    lam: float = 0.5
    group_size: int = 100
    interconnect: str = "10gbe"
    widths: tuple[int, ...] = QUANT_WIDTHS
    solver: str = flag("--assign-solver", "milp")
    time_limit: float = 10.0
    mip_gap: float = 0.01
    lookahead: int = 0

    def __post_init__(self):
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must lie in [0, 1], got {self.lam}")
        if self.group_size < 1:
            raise ValueError(f"group_size must be at least 1, got {self.group_size}")
        object.__setattr__(self, "widths", check_widths(self.widths))  # sorted, a tuple
        from jaxgraph.comm.assign import SOLVERS

        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.time_limit <= 0:
            raise ValueError(f"time_limit must be positive, got {self.time_limit}")
        if not 0.0 <= self.mip_gap < 1.0:
            raise ValueError(f"mip_gap must lie in [0, 1), got {self.mip_gap}")
        if self.lookahead < 0:
            raise ValueError(f"lookahead must be at least 0 epochs, got {self.lookahead}")
        if self.interconnect != "measure":
            parse_interconnect(self.interconnect)

    def cost_model(self, num_parts: int):
        """The preset cost model of ``interconnect`` for ``num_parts`` devices."""
        from jaxgraph.comm.costmodel import CostModel

        name, nodes, inter = parse_interconnect(self.interconnect)
        return CostModel.from_preset(name, num_parts, nodes=nodes, inter=inter)


def parse_interconnect(spec: str) -> tuple[str, int, str | None]:
    """``"10gbe"`` -> ``("10gbe", 1, None)``; ``"nvlink3:2:10gbe"`` -> ``("nvlink3", 2,
    "10gbe")``. Raises ValueError naming the known presets."""
    from jaxgraph.comm.costmodel import PRESETS

    fields = spec.split(":")
    ok = len(fields) in (1, 3) and all(f in PRESETS for f in fields[::2])
    if ok and len(fields) == 3:
        ok = fields[1].isdigit() and int(fields[1]) >= 1
    if not ok:
        raise ValueError(
            f"unknown interconnect {spec!r}: use 'measure', a preset ({', '.join(PRESETS)}) or "
            "'<preset>:<hosts>:<preset>'"
        )
    if len(fields) == 1:
        return spec, 1, None
    return fields[0], int(fields[1]), fields[2]


def aggregation_scores(
    plan: HaloPlan, norm: str, *, squares: bool = False
) -> tuple[np.ndarray, ...]:
    """Per round ``r``, ``float64[P, S_r]``: the score ``s(v) = sum_w a_wv`` (``squares``:
    ``sum_w a_wv^2``) of the row device ``d`` sends in slot ``s``, over the receiver's in-edges
    with the coefficients of ``norm``, indexed by the forward sender; pad slots score 0."""
    if norm not in NORMS:
        raise ValueError(f"unknown aggregation norm {norm!r}; choose one of {NORMS}")
    weight = plan.gcn_edge_weight if norm == "gcn" else plan.mean_edge_weight
    nl, num_halo = plan.num_local_rows, plan.num_halo_rows
    received = np.zeros((plan.num_parts, num_halo), np.float64)  # indexed by the receiver
    for e in range(plan.num_parts):
        sel = plan.edge_mask[e] & (plan.edge_src[e] >= nl)
        w = weight[e][sel].astype(np.float64)
        received[e] = np.bincount(plan.edge_src[e][sel] - nl, w * w if squares else w, num_halo)
    out, offset = [], 0
    for r, s_r in enumerate(plan.round_rows, 1):
        block = received[:, offset : offset + s_r]
        offset += s_r
        # The receiver e holds the slots of sender e - r: roll back to sender indexing.
        out.append(np.roll(block, -r, axis=0) * plan.send_mask[r - 1])
    return tuple(out)


def receiver_to_sender(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Per-round ``[P, S_r]`` arrays held by the forward receivers -> indexed by the sender."""
    return tuple(np.roll(np.asarray(a), -r, axis=0) for r, a in enumerate(arrays, 1))


def first_width(config: AssignConfig) -> int:
    """The uniform width of the first period, before any traces: 8 bits, or the widest
    candidate if 8 is not one."""
    return 8 if 8 in config.widths else max(config.widths)


def check_adaptive(owner: str, method) -> None:
    """The settings of AdaQP's widths (``period``, ``chunks``, ``score``, ``assign``), on
    method ``adaqp`` or on ``pipegcn`` with ``quantize="adaptive"``."""
    if isinstance(method.assign, dict):
        assign = from_dict(AssignConfig, method.assign, f"{owner}.assign")
        object.__setattr__(method, "assign", assign)
    check_periodic(owner, method.period, method.chunks)
    if method.score not in ("sum", "squares"):
        raise ValueError(f"{owner}.score must be 'sum' or 'squares', got {method.score!r}")
    if method.period and method.assign.lookahead >= method.period:
        raise ValueError(
            f"{owner}.assign.lookahead ({method.assign.lookahead} epochs) must be shorter than "
            f"{owner}.period ({method.period} epochs)"
        )


def check_adaptive_run(method, run: RunInfo) -> None:
    """A lookahead shorter than the run's period (``period = 0`` takes ``epochs // 5``)."""
    period = run.period(method.period)
    if method.assign.lookahead >= period:
        raise ValueError(
            f"lookahead ({method.assign.lookahead} epochs) must be shorter than the assignment "
            f"period ({period} epochs)"
        )


class Traces(NamedTuple):
    """What an exchange with adaptive widths traces over a period, per layer and ring round
    ``r``, ``f32[P, S_r]`` by slot: the summed range variance of the rows sent (``fwd``, at the
    sender) and of the gradient rows sent back for them (``bwd``, at the forward receiver)."""

    fwd: tuple
    bwd: tuple


class AdaptiveState(NamedTuple):
    """``comm_state`` of adaptive widths on the halo ring (leaves ``[P, ...]`` on the host).

    Attributes:
      layouts: the bucket layouts of ``bits`` (:func:`~jaxgraph.partition.buckets.bucket_state`).
      bits: the assignment in force, as data, so that a checkpoint restores it exactly.
      trace: the period's :class:`Traces` so far.
      next_bits: with a lookahead, the assignment solved for the next boundary (until a
        solve, the current one); ``None`` without.
      pipe: PipeGCN's stale buffers per layer (:class:`~jaxgraph.comm.pipegcn.PipeLayer`) when
        its widths are adaptive; ``None`` for AdaQP.
    """

    layouts: Layouts
    bits: BitAssignment
    trace: Traces
    next_bits: BitAssignment | None = None
    pipe: tuple | None = None


def trace_sent_rows(state: AdaptiveState, layer: int, h_local, send_idx) -> AdaptiveState:
    """``state`` with the range variance of the rows ``h_local`` sends at ``layer`` (in round
    ``r``, ``send_idx[r-1]``) added to the forward trace."""
    v = row_range_variance(h_local)  # per local row, then per sent slot
    fwd = state.trace.fwd
    traced = tuple(t + jnp.take(v, idx) for t, idx in zip(fwd[layer], send_idx, strict=True))
    return state._replace(trace=state.trace._replace(fwd=_replace(fwd, layer, traced)))


def zero_trace_probe(state: AdaptiveState, layer: int) -> tuple:
    """Zeros shaped like ``layer``'s backward trace: the probe whose cotangent traces the
    gradient rows sent back."""
    return tuple(jnp.zeros_like(t) for t in state.trace.bwd[layer])


def trace_returned_rows(state: AdaptiveState, layer: int, grads) -> AdaptiveState:
    """``state`` with a probe's cotangent ``grads`` (per round) added to ``layer``'s backward
    trace."""
    bwd = state.trace.bwd
    summed = tuple(t + g for t, g in zip(bwd[layer], grads, strict=True))
    return state._replace(trace=state.trace._replace(bwd=_replace(bwd, layer, summed)))


def saved_like(saved: dict[str, np.ndarray], template, path: str):
    """``template`` (the subtree of ``comm_state`` at ``path``, e.g. ``".bits"``) with each leaf
    read from ``saved`` (a checkpoint's ``comm_state`` leaves by tree path); a missing leaf, or
    one of another shape, is a ValueError naming it."""

    def leaf(at, expect):
        name = path + jax.tree_util.keystr(at)
        if name not in saved:
            raise ValueError(f"the checkpoint holds no comm_state leaf {name}")
        value = np.asarray(saved[name])
        if value.shape != np.shape(expect):
            raise ValueError(
                f"saved comm_state leaf {name} has shape {value.shape}, this run's plan "
                f"expects {np.shape(expect)}"
            )
        return value.astype(np.asarray(expect).dtype)

    return jax.tree_util.tree_map_with_path(leaf, template)


def widths_log(widths: dict) -> dict:
    """Messages per width and exchange key, without the widths no message took."""
    return {k: {str(b): n for b, n in v.items() if n} for k, v in widths.items()}


def _replace(seq: tuple, index: int, value) -> tuple:
    return seq[:index] + (value,) + seq[index + 1 :]


__all__ = [
    "NORMS",
    "PROJECTION_PRESETS",
    "QUANT_WIDTHS",
    "AdaptiveState",
    "AssignConfig",
    "Traces",
    "aggregation_scores",
    "check_adaptive",
    "check_adaptive_run",
    "first_width",
    "parse_interconnect",
    "receiver_to_sender",
    "saved_like",
    "trace_returned_rows",
    "trace_sent_rows",
    "widths_log",
    "zero_trace_probe",
]
