"""Adaptive bit-width assignment: the full message-quantization method of AdaQP.

Wan et al. (MLSys 2023) choose a bit-width for every group of halo messages by a bi-objective
mixed-integer program that trades the variance the quantization adds to the aggregated
embeddings (and gradients) against the time of the slowest transfer of each ring round.

**Tracing** (inside the jitted step, in ``comm_state["trace"]``). For every slot of every
exchange the step adds :func:`~jaxgraph.comm.quantized.row_range_variance` of the row sent,
``(D / 6) (max - min)^2``, the expected stochastic-rounding variance of that row up to the
factor ``1 / (2^b - 1)^2``. Forward rows are traced at the sender; backward rows (the gradient
rows the forward receiver sends back) are traced at the forward receiver through the
exchange's probe (:meth:`CommStrategy.probes`): their cotangent is the trace.

**Aggregation scores** (on the host, from the plan). A forward message ``v`` enters the
receiver's aggregation with coefficients ``a_wv`` (``deg(w)^-1/2 deg(v)^-1/2`` for GCN,
``1 / deg(w)`` for the mean aggregator); two weights are selectable (``squares``). By
default its score is ``s(v) = sum_w a_wv`` and its weight in the program ``beta(v) = s(v)^2 *
traced(v)``, the square of the sum, as the public implementation computes it (the variance of
``sum_w out_w``). With ``squares=True`` the weight is the seed's ``beta_k`` (the problem AdaQP
states after its Theorem 3): ``beta(v) = (sum_w a_wv^2) * traced(v)``, the variance summed over
the receivers' rows. A backward message is the receiver's partial gradient sum ``sum_w a_wv
g_w``, which the sender adds to its gradient with coefficient 1: its score is 1. (AdaQP sends
raw gradient rows and aggregates them after the exchange on the transposed graph, hence its
backward scores; here the aggregation happens before the exchange and is already in the traced
rows.)

**Schedule.** Epochs ``1..period`` run at uniform 8 bits; before epoch ``k * period + 1`` the
traces of the last period are gathered to the host, one program per exchange key
(``fwd{l}``, ``bwd{l}``) is solved (in threads), the traces are reset and the new bucket
layout is installed: with ``chunks`` (the default of :class:`~jaxgraph.train.TrainConfig`) a
layout of the same shapes, so the compiled step stays; with exact layouts a new step
compiles (the loop caches compiled steps by layout). The assignment itself lives in
``comm_state["bits"]`` so that checkpoints restore it exactly.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.costmodel import MIB
from jaxgraph.comm.method import Method, RunInfo, check_int, chunks_or_default
from jaxgraph.comm.quantized import quantized_layer_exchange, row_range_variance
from jaxgraph.comm.strategy import CommStrategy, Controller
from jaxgraph.configfile import from_dict
from jaxgraph.mesh import to_host
from jaxgraph.options import flag
from jaxgraph.partition.buckets import (
    MAX_CHUNKS,
    PARAM_BYTES,
    QUANT_WIDTHS,
    BitAssignment,
    bucket_state,
    check_param_dtype,
    check_widths,
)
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
        runs at 8 bits, or at the widest candidate if 8 is not one.
      solver: ``"milp"``: the mixed-integer program with HiGHS through cvxpy, under
        ``time_limit`` and ``mip_gap``; ``"frontier"``: the same program's exact optimum by
        per-channel Pareto frontiers (:func:`jaxgraph.comm.assign.solve`; milliseconds where
        HiGHS takes tenths of a second, and no MIP solver needed).
      time_limit: seconds per mixed-integer solve.
      mip_gap: relative MIP gap at which a solve stops.
      lookahead: solve this many epochs before each period boundary, so that the new step can
        compile in the background while those epochs train (``TrainConfig.compile_ahead``).
        The solve then sees the traces of all but the period's last ``lookahead`` epochs.
        0 solves at the boundary, as AdaQP does.
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


# ---------------------------------------------------------------------- host: scores


def aggregation_scores(
    plan: HaloPlan, norm: str, *, squares: bool = False
) -> tuple[np.ndarray, ...]:
    """Per round ``r``, ``float64[P, S_r]``: the aggregation score of the row that device ``d``
    sends in slot ``s`` (indexed by the forward sender, like :class:`BitAssignment`).

    ``s(v) = sum_w a_wv`` over the receiver's in-edges ``v -> w`` with the global coefficients
    of ``norm`` (``"gcn"``: ``deg_in(w)^-1/2 deg_out(v)^-1/2``; ``"mean"``: ``1/deg_in(w)``);
    with ``squares=True``, ``sum_w a_wv^2``. Pad slots score 0.
    """
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


# ---------------------------------------------------------------------- the strategy


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
    check_int(f"{owner}.period", method.period, 0, what=" (0: epochs // 5)")
    if method.chunks is not None:
        check_int(f"{owner}.chunks", method.chunks, 0, MAX_CHUNKS, " (0: exact layouts)")
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


@dataclasses.dataclass(frozen=True)
class AdaQP(Method, CommStrategy):
    """Adaptive message quantization: the widths of every message group re-solved every
    ``period`` epochs from traced messages by the mixed-integer program of
    :mod:`jaxgraph.comm.assign`.

    The device half (this class inside ``shard_map``) runs the quantized ring exchange of
    :mod:`jaxgraph.comm.quantized` under the bucket layouts in ``comm_state`` and adds the
    traces; the host half (:class:`AdaptiveController`, from :meth:`controller`) gathers the
    traces, solves and installs the next assignment. The first period runs at uniform 8 bits,
    or at the widest of ``assign.widths``.

    Attributes:
      assign: the assignment problem and its solver (:class:`AssignConfig`).
      period: epochs per assignment period (0: ``epochs // 5``, as AdaQP).
      chunks: exchange layout: ``0`` an exact layout per assignment, each compiling its own
        step; ``J >= 1`` one chunked layout and one compiled step for the whole run
        (:func:`~jaxgraph.partition.buckets.bucket_state`); ``None`` the backend's default.
      compile_ahead: with ``assign.lookahead``, compile the next period's step in a thread.
      score: a message's weight ``beta`` in the program: ``"sum"``, the square of the sum of
        its aggregation coefficients (the public AdaQP implementation), or ``"squares"``, their
        sum of squares (the seed's ``beta_k``, stated after its Theorem 3); module docstring.
      param_dtype: ``"bfloat16"`` sends each quantized row's ``(scale, lo)`` as bfloat16 (4
        bytes instead of 8), in the layouts and in the program's row times, as
        :attr:`~jaxgraph.comm.quantized.Quantized.param_dtype`.
    """

    assign: AssignConfig = AssignConfig()
    period: int = flag("--assign-period", 0)
    chunks: int | None = flag("--exchange-chunks", None)
    compile_ahead: bool = True
    score: Literal["sum", "squares"] = "sum"
    param_dtype: str = "float32"

    key: ClassVar[str] = "adaqp"
    spellings: ClassVar[str] = "adaqp[-bf16]"

    @classmethod
    def parse(cls, text: str) -> AdaQP | None:
        return cls(param_dtype="bfloat16") if text == "adaqp-bf16" else super().parse(text)

    def __post_init__(self):
        check_adaptive("adaqp", self)
        try:
            check_param_dtype(self.param_dtype)
        except ValueError as e:
            raise ValueError(f"adaqp.{e}") from None

    def label(self) -> str:
        return "adaqp" + ("-bf16" if self.param_dtype == "bfloat16" else "")

    @property
    def name(self) -> str:
        return self.label()

    def exchange_chunks(self) -> int:
        return chunks_or_default(self.chunks)

    def check_run(self, run: RunInfo) -> None:
        check_adaptive_run(self, run)

    def init_state(self, plan, layer_dims, *, epoch: int = 0):
        """The first period's state under :class:`RunInfo`'s defaults (:meth:`controller`
        gives the run's own)."""
        return AdaptiveController(self, plan, layer_dims).init_state(epoch=epoch)

    def controller(self, plan, layer_dims, *, cost=None, run=None) -> AdaptiveController:
        return AdaptiveController(self, plan, layer_dims, cost=cost, run=run)

    # ------------------------------------------------------------------ device side

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        h_remote, comm_state, nbytes = quantized_layer_exchange(
            h_local,
            comm_state,
            layer=layer,
            key=key,
            axis_name=axis_name,
            num_parts=num_parts,
            probe=probe,
        )
        return h_remote, trace_sent_rows(comm_state, layer, h_local, shard.send_idx), nbytes

    def probes(self, comm_state, num_layers):
        # Layer 0 has no backward exchange; the others trace their gradient rows.
        return tuple(
            None if layer == 0 else zero_trace_probe(comm_state, layer)
            for layer in range(num_layers)
        )

    def absorb_probes(self, comm_state, probe_grads):
        for layer, grads in enumerate(probe_grads):
            if grads is not None:
                comm_state = trace_returned_rows(comm_state, layer, grads)
        return comm_state


# ---------------------------------------------------------------------- traces in comm_state
# An exchange with adaptive widths (this module's, or PipeGCN's stale one) keeps its traces in
# ``comm_state["trace"]``: ``fwd[layer][r]`` per sent slot, ``bwd[layer][r]`` per slot of the
# gradient rows sent back.


def trace_sent_rows(comm_state, layer: int, h_local, send_idx):
    """``comm_state`` with the range variance of the rows ``h_local`` sends at ``layer`` added
    to the forward trace, slot by slot (``send_idx[r-1]``: the local rows of round ``r``)."""
    v = row_range_variance(h_local)  # per local row, then per sent slot
    sent = comm_state["trace"]["fwd"][layer]
    traced = tuple(t + jnp.take(v, idx) for t, idx in zip(sent, send_idx, strict=True))
    fwd = _replace(comm_state["trace"]["fwd"], layer, traced)
    return {**comm_state, "trace": {**comm_state["trace"], "fwd": fwd}}


def zero_trace_probe(comm_state, layer: int) -> tuple:
    """Zeros shaped like ``layer``'s backward trace: the probe whose cotangent traces the
    gradient rows sent back."""
    return tuple(jnp.zeros_like(t) for t in comm_state["trace"]["bwd"][layer])


def trace_returned_rows(comm_state, layer: int, grads):
    """``comm_state`` with a probe's cotangent ``grads`` (per round) added to ``layer``'s
    backward trace."""
    bwd = comm_state["trace"]["bwd"]
    summed = tuple(t + g for t, g in zip(bwd[layer], grads, strict=True))
    return {**comm_state, "trace": {**comm_state["trace"], "bwd": _replace(bwd, layer, summed)}}


class AdaptiveController(Controller):
    """The host half of adaptive widths in one run (:class:`AdaQP`, or :class:`PipeGCN
    <jaxgraph.comm.pipegcn.PipeGCN>` with ``quantize="adaptive"``): at each period boundary
    (or ``lookahead`` epochs before it) gathers the traces, solves the program per exchange
    key and installs the new assignment; keeps the cost model, the pending lookahead solve
    and the latest log.

    Args:
      exchange: the method (its ``assign``, ``period``, ``chunks``, ``score`` and
        ``param_dtype``).
      plan, layer_dims: the run's plan and the width of each layer's rows.
      cost: a :class:`~jaxgraph.comm.costmodel.CostModel` for the mesh, or ``None`` to build
        one from ``assign.interconnect`` when the first program is set up.
      run: the run (its length sets a period of 0; its model, the aggregation the scores
        weigh).
    """

    def __init__(self, exchange, plan, layer_dims, *, cost=None, run: RunInfo | None = None):
        super().__init__(exchange, plan, layer_dims)
        run = run or RunInfo()
        check_adaptive_run(exchange, run)
        self.config: AssignConfig = exchange.assign
        self.period = run.period(exchange.period)
        self.norm = run.norm
        self.chunks = chunks_or_default(exchange.chunks)
        self.squares = exchange.score == "squares"
        self.param_dtype = getattr(exchange, "param_dtype", "float32")
        self.cost = cost
        self._pending: dict | None = None  # lookahead: (boundary, state, log) of a solve
        if self.config.solver == "milp":
            from jaxgraph.comm import assign

            assign.load_solver()  # at set-up, not in the first assignment's overhead

    def state_of(self, assignment, *, upcoming=None, traces=None) -> dict:
        """Bucket layout, the assignment itself and the traces (zeros unless given; leaves
        ``[P, ...]``). With a lookahead, also ``next_bits``: the assignment solved ahead of
        the next boundary (``upcoming``; until a solve, the current one)."""
        plan = self.plan
        state = bucket_state(
            plan,
            assignment,
            chunks=self.chunks,
            widths=self.config.widths,
            param_dtype=self.param_dtype,
        )
        state["bits"] = {"fwd": assignment.fwd, "bwd": assignment.bwd}
        if self.config.lookahead:
            upcoming = upcoming or assignment
            state["next_bits"] = {"fwd": upcoming.fwd, "bwd": upcoming.bwd}
        if traces is None:
            zeros = tuple(np.zeros(m.shape, np.float32) for m in plan.send_mask)
            n = len(self.layer_dims)
            traces = {"fwd": (zeros,) * n, "bwd": (zeros,) * n}
        state["trace"] = traces
        return state

    def init_state(self, *, epoch: int = 0):
        """The first period's state: uniform widths (:func:`first_width`), zero traces. Only
        a checkpoint knows a later assignment (:meth:`resume`)."""
        del epoch
        first = first_width(self.config)
        return self.state_of(BitAssignment.uniform(self.plan, len(self.layer_dims), first))

    def resume(self, *, epoch, saved):
        template = self.init_state()

        def saved_assignment(name):
            fetch = saved_getter(saved, f"['{name}']")
            fwd, bwd = (
                tuple(
                    tuple(fetch(f"['{d}'][{layer}][{r}]", a) for r, a in enumerate(rounds))
                    for layer, rounds in enumerate(template["bits"][d])
                )
                for d in ("fwd", "bwd")
            )
            return BitAssignment(fwd=fwd, bwd=bwd)

        upcoming = saved_assignment("next_bits") if self.config.lookahead else None
        state = self.state_of(saved_assignment("bits"), upcoming=upcoming)
        trace = saved_getter(saved, "['trace']")
        state["trace"] = jax.tree_util.tree_map_with_path(
            lambda path, a: trace(jax.tree_util.keystr(path), a), state["trace"]
        )
        return state

    def _is_boundary(self, epoch: int) -> bool:
        return epoch > 1 and (epoch - 1) % self.period == 0

    def update(self, comm_state, *, epoch):
        lookahead = self.config.lookahead
        if lookahead and self._is_boundary(epoch + lookahead):
            # Solve now; the assignment takes over at the boundary. Only `next_bits` changes,
            # so the step keeps its layout (no re-jit); the traces keep accumulating.
            t0 = time.perf_counter()
            traces, current = self._to_host(comm_state)
            t_gather = time.perf_counter() - t0
            assignment, info = self._decide(traces, current)
            info.update(gather_time=t_gather, solved_at=epoch)
            state = self.state_of(current, upcoming=assignment, traces=traces)
            boundary = epoch + lookahead
            self._pending = {"boundary": boundary, "state": self.state_of(assignment), "log": info}
            return state
        if not self._is_boundary(epoch):
            return None
        if lookahead:  # install the assignment solved `lookahead` epochs ago; reset traces
            nxt = jax.tree.map(_gather_to_host, comm_state["next_bits"])
            assignment = BitAssignment(fwd=nxt["fwd"], bwd=nxt["bwd"])
            pending = self._pending if self._pending and self._pending["boundary"] == epoch else {}
            info = {
                **pending.get("log", {}),  # solver details (lost if the run resumed since)
                **self.describe(assignment),
                "solved_at": epoch - lookahead,
            }
            self._pending = None
        else:
            t0 = time.perf_counter()
            traces, current = self._to_host(comm_state)
            t_gather = time.perf_counter() - t0
            assignment, info = self._decide(traces, current)
            info["gather_time"] = t_gather
        info["epoch"] = epoch
        self.last_update = info
        return self.state_of(assignment)

    def upcoming(self, comm_state, *, epoch):
        pending = self._pending
        if pending is None or pending["boundary"] <= epoch:
            return None
        return pending["boundary"], pending["state"]

    def _to_host(self, comm_state):
        """The traces and the assignment in force, gathered to the host."""
        traces = jax.tree.map(_gather_to_host, comm_state["trace"])
        current = BitAssignment(
            fwd=jax.tree.map(_gather_to_host, comm_state["bits"]["fwd"]),
            bwd=jax.tree.map(_gather_to_host, comm_state["bits"]["bwd"]),
        )
        return traces, current

    def _decide(self, traces, previous):
        """The new assignment and its log; in a multi-process run process 0 solves (a
        time-limited solve need not give the same answer twice) and broadcasts it."""
        if jax.process_count() == 1:
            return self.solve(traces, previous)
        from jax.experimental import multihost_utils

        if jax.process_index() == 0:
            assignment, info = self.solve(traces, previous)
        else:
            assignment, info = previous, {}
        fwd, bwd = multihost_utils.broadcast_one_to_all((assignment.fwd, assignment.bwd))
        assignment = BitAssignment(
            fwd=jax.tree.map(np.asarray, fwd), bwd=jax.tree.map(np.asarray, bwd)
        )
        if jax.process_index() != 0:
            info = {**self.describe(assignment), "solved_on": 0}
        return assignment, info

    def cost_model(self):
        """The cost model in use: the one given, or the configured preset's."""
        if self.cost is None:
            if self.config.interconnect == "measure":
                raise ValueError(
                    "interconnect 'measure' needs a cost model measured on the run's mesh "
                    "(jaxgraph.comm.costmodel.measure); pass it as "
                    "AdaQP(...).controller(plan, layer_dims, cost=...)"
                )
            self.cost = self.config.cost_model(self.plan.num_parts)
        return self.cost

    def problems(self, traces) -> dict:
        """The per-key inputs of the program: ``{key: (beta per round [P, S_r] indexed by the
        channel's sender, feature dim, reversed)}``; ``reversed`` marks the backward keys,
        whose channel for forward sender ``d`` in round ``r`` runs from ``d + r`` to ``d``."""
        plan, squares = self.plan, self.squares
        scores = aggregation_scores(plan, self.norm, squares=squares)
        out = {}
        for layer, dim in enumerate(self.layer_dims):
            traced = [np.asarray(t, np.float64) for t in traces["fwd"][layer]]
            # beta = s^2 * traced (square of the sum) or s * traced (s = sum of squares).
            weight = scores if squares else tuple(x * x for x in scores)
            beta = tuple(w * t * m for w, t, m in zip(weight, traced, plan.send_mask, strict=True))
            out[f"fwd{layer}"] = (beta, int(dim), False)
            if layer > 0:  # the first layer's input is data: no backward exchange
                traced = [np.asarray(t, np.float64) for t in traces["bwd"][layer]]
                # Held by the backward sender (the forward receiver d + r), in the slot order
                # of the rows it received: already indexed by the channel's sender.
                beta = tuple(
                    t * np.roll(m, r, axis=0)
                    for r, (t, m) in enumerate(zip(traced, plan.send_mask, strict=True), 1)
                )
                out[f"bwd{layer}"] = (beta, int(dim), True)
        return out

    def solve(self, traces, previous: BitAssignment):
        """The new assignment from host-side traces (leaves ``[P, S_r]``), and a log."""
        from jaxgraph.comm import assign

        cfg, plan = self.config, self.plan
        cost = self.cost_model()
        problems = self.problems(traces)
        t0 = time.perf_counter()
        specs, fallback = {}, {}
        for key, (beta, dim, backward) in problems.items():
            specs[key] = (_channels(beta, plan, backward), dim)
            layer = int(key[3:])
            prev = previous.bwd[layer] if backward else previous.fwd[layer]
            fallback[key] = _channel_rows(prev, plan, backward)
        results = assign.solve_channels(
            specs,
            theta=cost.theta,
            gamma=cost.gamma,
            num_parts=plan.num_parts,
            lam=cfg.lam,
            group_size=cfg.group_size,
            widths=cfg.widths,
            time_limit=cfg.time_limit,
            mip_rel_gap=cfg.mip_gap,
            fallback=fallback,
            solver=cfg.solver,
            param_bytes=PARAM_BYTES[self.param_dtype],
        )
        solve_time = time.perf_counter() - t0
        fwd = [list(r) for r in previous.fwd]
        bwd = [list(r) for r in previous.bwd]
        log = {"solve_time": solve_time, "keys": {}}
        for key, (channel_bits, info) in results.items():
            layer, backward = int(key[3:]), key.startswith("bwd")
            target = bwd if backward else fwd
            rounds = _bits_from_channels(channel_bits, plan, backward)
            target[layer] = rounds
            log["keys"][key] = info
        assignment = BitAssignment(
            fwd=tuple(tuple(r) for r in fwd), bwd=tuple(tuple(r) for r in bwd)
        )
        log.update(self.describe(assignment))
        return assignment, log

    def describe(self, assignment: BitAssignment) -> dict:
        """Widths per key and the modelled communication seconds per step of
        ``assignment``: under the cost model in use and under fixed presets (comparable
        across runs and methods)."""
        plan = self.plan
        param_bytes = PARAM_BYTES[self.param_dtype]
        # Once for every model.
        channel_bytes = _channel_bytes(plan, assignment, self.layer_dims, param_bytes)
        cost = self.cost_model()
        projected = {"model": sum(_comm_time(channel_bytes, cost).values())}
        for preset in PROJECTION_PRESETS:
            preset_cost = AssignConfig(interconnect=preset).cost_model(plan.num_parts)
            projected[preset] = sum(_comm_time(channel_bytes, preset_cost).values())
        return {
            "widths": _used_widths(assignment, plan),
            "cost_model": cost.source,
            "projected": projected,
        }


# ---------------------------------------------------------------------- projection


def projected_comm_time(
    plan: HaloPlan, assignment: BitAssignment, layer_dims: Sequence[int], cost
) -> dict[str, float]:
    """Modelled seconds per exchange key (``fwd{l}``, ``bwd{l}``) of one training step under
    ``cost``: per ring round the slowest channel, ``max_c (theta_c * MiB_c + gamma_c)`` over
    channels that carry rows (real rows only: codes and fp32 parameters, or fp32 rows at
    32 bits), summed over rounds: the program's time model, applied to any assignment
    (Vanilla is the uniform 32-bit one)."""
    return _comm_time(_channel_bytes(plan, assignment, layer_dims), cost)


def _channel_bytes(
    plan: HaloPlan, assignment: BitAssignment, layer_dims: Sequence[int], param_bytes: int = 8
) -> dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per exchange key, per ring round: ``(senders, receivers, bytes)`` of the channels that
    carry rows (the cost-model-free part of :func:`projected_comm_time`)."""
    from jaxgraph.partition.buckets import wire_bytes

    p = plan.num_parts
    out = {}
    for name, direction in (("fwd", assignment.fwd), ("bwd", assignment.bwd)):
        for layer, rounds in enumerate(direction):
            if name == "bwd" and layer == 0:
                continue
            dim = int(layer_dims[layer])
            per_round = []
            for r, (bits, mask) in enumerate(zip(rounds, plan.send_mask, strict=True), 1):
                src, dst, nbytes = [], [], []
                for d in range(p):
                    w = np.asarray(bits[d])[mask[d]]
                    if not w.size:
                        continue
                    widths, counts = np.unique(w, return_counts=True)
                    nbytes.append(
                        sum(
                            wire_bytes(int(c), dim, int(b), param_bytes)
                            for b, c in zip(widths, counts, strict=True)
                        )
                    )
                    s, t = (d, (d + r) % p) if name == "fwd" else ((d + r) % p, d)
                    src.append(s)
                    dst.append(t)
                per_round.append(
                    (np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(nbytes))
                )
            out[f"{name}{layer}"] = per_round
    return out


def _comm_time(channel_bytes, cost) -> dict[str, float]:
    """:func:`projected_comm_time` from :func:`_channel_bytes`."""
    out = {}
    for key, per_round in channel_bytes.items():
        total = 0.0
        for src, dst, nbytes in per_round:
            if src.size:
                times = cost.theta[src, dst] * nbytes / MIB + cost.gamma[src, dst]
                total += max(0.0, float(np.max(times)))
        out[key] = total
    return out


# ---------------------------------------------------------------------- helpers


def _used_widths(assignment: BitAssignment, plan: HaloPlan) -> dict:
    """Message counts per width and exchange key; layer 0 has no backward exchange."""
    return {k: v for k, v in assignment.width_counts(plan).items() if k != "bwd0"}


def _replace(seq: tuple, index: int, value) -> tuple:
    return seq[:index] + (value,) + seq[index + 1 :]


def _gather_to_host(x) -> np.ndarray:
    """A ``[P, ...]`` array sharded over the mesh -> the whole NumPy array on this host (a
    collective across processes in a multi-process run)."""
    return to_host(x)


def saved_getter(saved: dict, prefix: str):
    """``fetch(path, template)``: the saved leaf ``...comm_state<prefix><path>``, checked."""

    def fetch(path: str, template):
        for name, value in saved.items():
            if name.endswith(prefix + path):
                value = np.asarray(value)
                if value.shape != np.shape(template):
                    raise ValueError(
                        f"saved comm_state leaf {name} has shape {value.shape}, this run's plan "
                        f"expects {np.shape(template)}"
                    )
                return value.astype(np.asarray(template).dtype)
        raise ValueError(f"the checkpoint holds no comm_state leaf {prefix + path}")

    return fetch


def _channels(beta, plan: HaloPlan, backward: bool) -> list:
    """Channels of one key as ``(sender, receiver, round, beta of its real rows)``.

    Forward: sender ``d`` -> ``d + r`` in round ``r``, rows = ``send_mask[r-1][d]``.
    Backward: sender ``e`` -> ``e - r``, rows = the slots ``e`` received from ``e - r``.
    """
    p = plan.num_parts
    out = []
    for r, (b, mask) in enumerate(zip(beta, plan.send_mask, strict=True), 1):
        if backward:
            mask = np.roll(mask, r, axis=0)  # indexed by the backward sender
        for s in range(p):
            receiver = (s - r) % p if backward else (s + r) % p
            out.append((s, receiver, r, np.asarray(b[s][mask[s]], np.float64)))
    return out


def _channel_rows(rounds, plan: HaloPlan, backward: bool) -> list[np.ndarray]:
    """Per round ``[P, S_r]`` values indexed by the forward sender -> per channel (order of
    :func:`_channels`) the values of its real rows; the inverse of :func:`_bits_from_channels`."""
    out = []
    for r, (a, mask) in enumerate(zip(rounds, plan.send_mask, strict=True), 1):
        a = np.asarray(a)
        if backward:  # to the backward sender's (the forward receiver's) indexing
            a, mask = np.roll(a, r, axis=0), np.roll(mask, r, axis=0)
        out.extend(a[s][mask[s]] for s in range(plan.num_parts))
    return out


def _bits_from_channels(channel_bits, plan: HaloPlan, backward: bool) -> list:
    """Per-row widths of each channel (same order as :func:`_channels`) -> per round
    ``int8[P, S_r]`` indexed by the forward sender."""
    p = plan.num_parts
    rounds, i = [], 0
    for r, mask in enumerate(plan.send_mask, 1):
        held = np.roll(mask, r, axis=0) if backward else mask
        bits = np.full(mask.shape, 8, np.int8)
        for s in range(p):
            bits[s][held[s]] = channel_bits[i]
            i += 1
        rounds.append(np.roll(bits, -r, axis=0) if backward else bits)
    return rounds


__all__ = [
    "QUANT_WIDTHS",
    "AdaQP",
    "AdaptiveController",
    "AssignConfig",
    "aggregation_scores",
    "first_width",
    "projected_comm_time",
    "receiver_to_sender",
    "trace_returned_rows",
    "trace_sent_rows",
    "zero_trace_probe",
]
