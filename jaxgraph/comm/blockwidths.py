"""Widths per owner block for the quantized broadcasts of the block-row layout (Sancus, CAGNET).

A broadcast sends one encoding to every receiver, so a width belongs to an owner block and a
layer (its gradient's reduction has its own), and a broadcast takes its tree's time, the slowest
link of every round. :class:`BlockWidthsController` re-decides them every ``period`` epochs:

* ``random``: each block's widths drawn from the candidates by seed and period index.
* ``adaptive``: AdaQP's bi-objective per block. The step traces each owner's rows' range
  variance ``(F / 6) (max - min)^2`` and each device's gradient partials (through the probe).
  A block's forward weight is ``V_j = sum_v w_v traced_v``, ``w_v`` the sum of squared
  aggregation coefficients of row ``v`` over its remote receivers (the seed's ``beta_k``); its
  backward weight the summed trace of the partials reduced to it. Per layer and direction::

      lam (sum_j V_j phi(b_j) - V_u) / (V_n - V_u) + (1 - lam) (sum_j T_j(b_j) - T_u) / (T_n - T_u)

  with ``phi(b) = 1 / (2^b - 1)^2`` (0 at 32 bits), ``T_j(b)`` block ``j``'s tree time (per
  round, its slowest link ``theta * MiB + gamma``), ``V_n, V_u`` / ``T_n, T_u`` the totals at the
  narrowest / widest candidate. A layer's broadcasts run one after another, so both terms sum
  over blocks and each block takes its cheapest width, exactly; a zero denominator drops its term.

A layer's state has a field ``quant``: None, or a :class:`LayerWidths`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jax
import numpy as np

from jaxgraph.comm.adaptive import (
    AssignConfig,
    aggregation_scores,
    first_width,
    saved_like,
    widths_log,
)
from jaxgraph.comm.assign.problem import TIME_TOL, variance_factor
from jaxgraph.comm.broadcast import tree_perm, tree_rounds
from jaxgraph.comm.costmodel import MIB
from jaxgraph.comm.qbroadcast import block_bytes
from jaxgraph.comm.strategy import Controller
from jaxgraph.mesh import to_host

MODES = ("random", "adaptive")


@dataclasses.dataclass(frozen=True)
class BlockWidths:
    """The static widths of one layer: ``fwd[j]`` block ``j``'s broadcast, ``bwd[j]`` the
    reduction of its gradient."""

    fwd: tuple[int, ...]
    bwd: tuple[int, ...]


jax.tree_util.register_dataclass(BlockWidths, data_fields=[], meta_fields=["fwd", "bwd"])


class WidthTrace(NamedTuple):
    """What adaptive widths trace over a period, per device: ``fwd: f32[P, B]`` the range
    variance of each row of its block when it travels, ``bwd: f32[P, P-1]`` that of the gradient
    partials it sends back, in halo order."""

    fwd: Any
    bwd: Any


class LayerWidths(NamedTuple):
    """The widths in force in one layer: ``widths`` (static: a new assignment compiles a new
    step), ``bits: int32[P, 2, P]`` (the same as data, for checkpoints) and, for adaptive
    widths, their ``trace``."""

    widths: BlockWidths
    bits: Any
    trace: WidthTrace | None = None


@dataclasses.dataclass(frozen=True)
class BlockQuantize:
    """Widths per owner block, re-decided every ``period`` epochs.

    Attributes:
      mode: ``"random"`` or ``"adaptive"`` (module docstring).
      period: epochs per assignment.
      seed: seed of the random draws.
      assign: the candidate widths (``widths``), ``lam`` and the cost model
        (``interconnect``) of the adaptive program.
      norm: the model's aggregation (``"gcn"`` or ``"mean"``), for the forward weights.
    """

    mode: Literal["random", "adaptive"]
    period: int = 40
    seed: int = 0
    assign: AssignConfig = AssignConfig()
    norm: str = "gcn"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"block widths mode must be one of {MODES}, got {self.mode!r}")
        if isinstance(self.period, bool) or not isinstance(self.period, int) or self.period < 1:
            raise ValueError(f"block widths period must be an integer >= 1, got {self.period!r}")

    @property
    def label(self) -> str:
        return self.mode


def draw_widths(q: BlockQuantize, num_parts: int, layer: int, period_index: int) -> BlockWidths:
    """Random widths of ``layer`` in assignment period ``period_index``."""
    rng = np.random.default_rng([q.seed, period_index, layer])
    widths = np.asarray(q.assign.widths)
    fwd, bwd = rng.choice(widths, num_parts), rng.choice(widths, num_parts)
    return BlockWidths(tuple(int(w) for w in fwd), tuple(int(w) for w in bwd))


def initial_widths(q: BlockQuantize, num_parts: int, layer: int, epoch: int) -> BlockWidths:
    """The widths in force after ``epoch`` completed epochs (random: that period's draw;
    adaptive: the first period's uniform width; a checkpoint knows a later one)."""
    if q.mode == "random":
        return draw_widths(q, num_parts, layer, max(epoch - 1, 0) // q.period)
    w = (first_width(q.assign),) * num_parts
    return BlockWidths(w, w)


def widths_state(widths: BlockWidths, num_parts: int, rows: int, traced: bool) -> LayerWidths:
    """A layer's :class:`LayerWidths` for ``widths`` (leaves ``[P, ...]``), traces zeroed."""
    bits = np.asarray([widths.fwd, widths.bwd], np.int32)
    trace = None
    if traced:
        trace = WidthTrace(
            np.zeros((num_parts, rows), np.float32),
            np.zeros((num_parts, num_parts - 1), np.float32),
        )
    return LayerWidths(widths, np.broadcast_to(bits, (num_parts, 2, num_parts)).copy(), trace)


def tree_seconds(num_parts: int, source: int, mib: float, cost, *, reverse: bool) -> float:
    """Time of ``source``'s broadcast tree (``reverse``: its reduction tree) moving ``mib``
    MiB per link: per round, its slowest link ``theta * mib + gamma``."""
    total = 0.0
    for k in tree_rounds(num_parts):
        links = [(d, s) if reverse else (s, d) for s, d in tree_perm(num_parts, source, k)]
        total += max(cost.theta[a, b] * mib + cost.gamma[a, b] for a, b in links)
    return total


def choose_widths(
    weights: np.ndarray, seconds: np.ndarray, candidates: tuple[int, ...], lam: float
) -> tuple[tuple[int, ...], dict]:
    """The separable program of the module docstring for one layer and direction, from the
    weights ``V_j >= 0`` (``[P]``) and times ``T_j(b)`` (``[P, W]``) of each block at each of the
    ascending ``candidates``: ``(width per block, {"variance", "seconds"})`` of the solution."""
    var = weights[:, None] * variance_factor(np.asarray(candidates))[None, :]  # [P, W]
    v_n, v_u = var[:, 0].sum(), var[:, -1].sum()
    t_n, t_u = seconds[:, -1].sum(), seconds[:, 0].sum()
    # The time term's weight, 0 when there is no time to trade (as in assign.problem).
    a_time = (1.0 - lam) / (t_n - t_u) if t_n - t_u > max(TIME_TOL * t_n, 0.0) else 0.0
    if a_time == 0.0:  # variance alone: the widest width is optimal for every block
        pick = np.full(len(weights), len(candidates) - 1)
    else:
        cost = a_time * (seconds - seconds[:, :1])
        if v_n - v_u > 0:
            cost = cost + lam * (var - var[:, -1:]) / (v_n - v_u)
        pick = np.argmin(cost, axis=1)
    rows = np.arange(len(weights))
    widths = tuple(int(candidates[i]) for i in pick)
    return widths, {
        "variance": float(var[rows, pick].sum()),
        "seconds": float(seconds[rows, pick].sum()),
    }


class BlockWidthsController(Controller):
    """Host half of widths per owner block: installs the next period's widths at each
    boundary (random draws known ahead; adaptive solved from the traces of the period), in the
    layers the block-row exchange's ``quantized_layers`` names.
    """

    def __init__(self, exchange, plan, layer_dims, *, q: BlockQuantize, cost=None):
        super().__init__(exchange, plan, layer_dims)
        self.q = q
        self.cost = cost
        self._upcoming: tuple | None = None

    def init_state(self, *, epoch: int = 0):
        """The exchange's state with the widths in force after ``epoch`` epochs."""
        p = self.plan.num_parts
        widths = {layer: initial_widths(self.q, p, layer, epoch) for layer in self._layers()}
        return self._install(super().init_state(epoch=epoch), widths)

    def _boundary(self, epoch: int) -> bool:
        # One part broadcasts nothing: the widths never change.
        return self.plan.num_parts > 1 and epoch > 1 and (epoch - 1) % self.q.period == 0

    def _layers(self) -> tuple[int, ...]:
        return self.exchange.quantized_layers(len(self.layer_dims))

    def _install(self, comm_state, widths: dict[int, BlockWidths]):
        p, rows = self.plan.num_parts, self.plan.num_local_rows
        traced = self.q.mode == "adaptive"
        out = list(comm_state)
        for layer, w in widths.items():
            out[layer] = comm_state[layer]._replace(quant=widths_state(w, p, rows, traced))
        return tuple(out)

    def update(self, comm_state, *, epoch):
        if not self._boundary(epoch):
            return None
        if self.q.mode == "random":
            widths = self._draw(epoch)
        else:
            widths, info = self.solve(comm_state)
            self.last_update = {"epoch": epoch, **info}
        return self._install(comm_state, widths)

    def _draw(self, epoch: int) -> dict[int, BlockWidths]:
        p, index = self.plan.num_parts, (epoch - 1) // self.q.period
        return {layer: draw_widths(self.q, p, layer, index) for layer in self._layers()}

    def upcoming(self, comm_state, *, epoch):
        if self.q.mode != "random" or self.plan.num_parts == 1:
            return None  # adaptive widths are known only once the period's traces are in
        boundary = (epoch - 1) // self.q.period * self.q.period + self.q.period + 1
        if self._upcoming is None or self._upcoming[0] != boundary:
            self._upcoming = (boundary, self._install(comm_state, self._draw(boundary)))
        return self._upcoming

    def resume(self, *, epoch, saved):
        state, widths = self.init_state(epoch=epoch), {}
        for layer in self._layers():
            bits = saved_like(saved, state[layer].quant.bits, f"[{layer}].quant.bits")
            widths[layer] = BlockWidths(tuple(map(int, bits[0, 0])), tuple(map(int, bits[0, 1])))
        return self._install(state, widths)

    def log(self, epoch: int) -> dict:
        """The adaptive widths installed before ``epoch``, per key, with their projected
        seconds (``{}`` between decisions and for random widths)."""
        info = self.last_update or {}
        if info.get("epoch") != epoch:
            return {}
        return {
            "widths": widths_log(info["widths"]),
            "projected": info["projected"],
            "cost_model": info["cost_model"],
        }

    def cost_model(self):
        if self.cost is None:
            self.cost = self.q.assign.cost_model(self.plan.num_parts)
        return self.cost

    def solve(self, comm_state) -> tuple[dict[int, BlockWidths], dict]:
        """The adaptive widths from the traces in ``comm_state``, and a log."""
        plan, q = self.plan, self.q
        p, rows = plan.num_parts, plan.num_local_rows
        cost = self.cost_model()
        scores = aggregation_scores(plan, q.norm, squares=True)
        row_weight = np.sum(np.stack(scores), axis=0)  # [P, B]: over every remote receiver
        slot_source = (np.arange(p)[:, None] - np.arange(1, p)[None, :]) % p  # [P, P-1]
        candidates = tuple(sorted(q.assign.widths))
        widths, log = {}, {"widths": {}, "projected": {}}
        for layer in self._layers():
            dim = self.layer_dims[layer]
            trace = jax.tree.map(to_host, comm_state[layer].quant.trace)
            forward = np.sum(row_weight * np.asarray(trace.fwd, np.float64), axis=1)
            backward = np.bincount(
                slot_source.ravel(), np.asarray(trace.bwd, np.float64).ravel(), p
            )
            chosen = []
            for weights, reverse in ((forward, False), (backward, True)):
                seconds = np.array(
                    [
                        [
                            tree_seconds(
                                p, j, block_bytes(rows, dim, b) / MIB, cost, reverse=reverse
                            )
                            for b in candidates
                        ]
                        for j in range(p)
                    ]
                )
                w, info = choose_widths(weights, seconds, candidates, q.assign.lam)
                chosen.append(w)
                direction = "bwd" if reverse else "fwd"
                log["widths"][f"{direction}{layer}"] = {b: w.count(b) for b in candidates}
                log["projected"][f"{direction}{layer}"] = info["seconds"]
            widths[layer] = BlockWidths(*chosen)
        log["cost_model"] = cost.source
        return widths, log


__all__ = [
    "BlockQuantize",
    "BlockWidths",
    "BlockWidthsController",
    "choose_widths",
    "draw_widths",
    "initial_widths",
    "tree_seconds",
    "widths_state",
]
