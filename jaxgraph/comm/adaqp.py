"""AdaQP (Wan et al., MLSys 2023): quantized halo exchange whose bit-widths per message group
are re-solved every period by the bi-objective program of :mod:`jaxgraph.comm.assign`, from the
traces and scores of :mod:`jaxgraph.comm.adaptive`.

**Schedule.** Epochs ``1..period`` run at uniform 8 bits; before epoch ``k * period + 1`` the
period's traces are gathered to the host, one program per exchange key (``fwd{l}``,
``bwd{l}``) is solved, the traces are reset and the new bucket layout installed (with
``chunks``, of the same shapes: the compiled step stays). The state is an
:class:`~jaxgraph.comm.adaptive.AdaptiveState`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar, Literal

import jax
import numpy as np

from jaxgraph.comm.adaptive import (
    PROJECTION_PRESETS,
    AdaptiveState,
    AssignConfig,
    Traces,
    aggregation_scores,
    check_adaptive,
    check_adaptive_run,
    first_width,
    saved_like,
    trace_returned_rows,
    trace_sent_rows,
    widths_log,
    zero_trace_probe,
)
from jaxgraph.comm.method import Method, RunInfo, chunks_or_default
from jaxgraph.comm.projection import channel_bytes, comm_time
from jaxgraph.comm.qring import quantized_layer_exchange
from jaxgraph.comm.strategy import CommStrategy, Controller
from jaxgraph.mesh import to_host
from jaxgraph.options import flag
from jaxgraph.partition.buckets import (
    PARAM_BYTES,
    BitAssignment,
    bucket_state,
    check_param_dtype,
)
from jaxgraph.partition.halo import HaloPlan


@dataclasses.dataclass(frozen=True)
class AdaQP(Method, CommStrategy):
    """Adaptive message quantization: the widths of every message group re-solved every
    ``period`` epochs from traced messages by the mixed-integer program of
    :mod:`jaxgraph.comm.assign`.

    This device half runs the quantized ring exchange under the layouts in ``comm_state`` and
    adds the traces; the host half is :class:`AdaptiveController`.

    Attributes:
      assign: the assignment problem and its solver (:class:`AssignConfig`).
      period: epochs per assignment period (0: ``epochs // 5``, as AdaQP).
      chunks: exchange layout: ``0`` an exact layout per assignment, each compiling its own
        step; ``J >= 1`` one chunked layout and one compiled step for the whole run
        (:func:`~jaxgraph.partition.buckets.bucket_state`); ``None`` the backend's default.
      compile_ahead: with ``assign.lookahead``, compile the next period's step in a thread.
      score: a message's weight ``beta`` in the program: ``"sum"``, the square of the sum of
        its aggregation coefficients (the public AdaQP implementation), or ``"squares"``, their
        sum of squares (the seed's ``beta_k``, after its Theorem 3; :mod:`~jaxgraph.comm.adaptive`).
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

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        h_remote, nbytes = quantized_layer_exchange(
            h_local,
            comm_state.layouts,
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


class AdaptiveController(Controller):
    """The host half of adaptive widths in one run (:class:`AdaQP`, or :class:`PipeGCN
    <jaxgraph.comm.pipegcn.PipeGCN>` with ``quantize="adaptive"``): at each period boundary
    (or ``lookahead`` epochs before it) gathers the traces, solves the program per exchange
    key and installs the new assignment. Without a ``cost`` model it builds one from
    ``assign.interconnect`` when first needed.
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
        self.param_dtype = exchange.param_dtype
        self.cost = cost
        self._pending: dict | None = None  # lookahead: (boundary, state, log) of a solve
        if self.config.solver == "milp":
            from jaxgraph.comm import assign

            assign.load_solver()  # at set-up, not in the first assignment's overhead

    def state_of(self, assignment, *, upcoming=None, traces=None) -> AdaptiveState:
        """The :class:`AdaptiveState` of ``assignment`` with ``traces`` (zeros unless given;
        leaves ``[P, ...]``); with a lookahead, ``upcoming`` as the next assignment (until a
        solve, the current one)."""
        plan = self.plan
        layouts = bucket_state(
            plan,
            assignment,
            chunks=self.chunks,
            widths=self.config.widths,
            param_dtype=self.param_dtype,
        )
        if traces is None:
            zeros = tuple(np.zeros(m.shape, np.float32) for m in plan.send_mask)
            traces = Traces(*((zeros,) * len(self.layer_dims),) * 2)
        upcoming = (upcoming or assignment) if self.config.lookahead else None
        return AdaptiveState(layouts, assignment, traces, upcoming)

    def init_state(self, *, epoch: int = 0):
        """The first period's state: uniform widths (:func:`first_width`), zero traces. Only
        a checkpoint knows a later assignment (:meth:`resume`)."""
        del epoch
        first = first_width(self.config)
        return self.state_of(BitAssignment.uniform(self.plan, len(self.layer_dims), first))

    def resume(self, *, epoch, saved):
        template = self.init_state()
        upcoming = None
        if self.config.lookahead:
            upcoming = saved_like(saved, template.next_bits, ".next_bits")
        state = self.state_of(saved_like(saved, template.bits, ".bits"), upcoming=upcoming)
        return state._replace(trace=saved_like(saved, template.trace, ".trace"))

    def _is_boundary(self, epoch: int) -> bool:
        return epoch > 1 and (epoch - 1) % self.period == 0

    def _gather_and_decide(self, comm_state):
        """``(traces, current assignment, new assignment, its log)`` from ``comm_state``."""
        t0 = time.perf_counter()
        traces, current = jax.tree.map(to_host, (comm_state.trace, comm_state.bits))
        t_gather = time.perf_counter() - t0
        assignment, info = self._decide(traces, current)
        info["gather_time"] = t_gather
        return traces, current, assignment, info

    def update(self, comm_state, *, epoch):
        lookahead = self.config.lookahead
        if lookahead and self._is_boundary(epoch + lookahead):
            # Solve now; the assignment takes over at the boundary. Only `next_bits` changes,
            # so the step keeps its layout (no re-jit); the traces keep accumulating.
            traces, current, assignment, info = self._gather_and_decide(comm_state)
            info["solved_at"] = epoch
            state = self.state_of(current, upcoming=assignment, traces=traces)
            boundary = epoch + lookahead
            self._pending = {"boundary": boundary, "state": self.state_of(assignment), "log": info}
            return state
        if not self._is_boundary(epoch):
            return None
        if lookahead:  # install the assignment solved `lookahead` epochs ago; reset traces
            assignment = jax.tree.map(to_host, comm_state.next_bits)
            pending = self._pending if self._pending and self._pending["boundary"] == epoch else {}
            info = {
                **pending.get("log", {}),  # solver details (lost if the run resumed since)
                **self.describe(assignment),
                "solved_at": epoch - lookahead,
            }
            self._pending = None
        else:
            _, _, assignment, info = self._gather_and_decide(comm_state)
        info["epoch"] = epoch
        self.last_update = info
        return self.state_of(assignment)

    def upcoming(self, comm_state, *, epoch):
        pending = self._pending
        if pending is None or pending["boundary"] <= epoch:
            return None
        return pending["boundary"], pending["state"]

    def log(self, epoch: int) -> dict:
        """The installed widths per key, their projected communication seconds, and each
        key's solver status, for the metrics line of ``epoch`` (``{}`` between decisions)."""
        info = self.last_update or {}
        if info.get("epoch") != epoch:
            return {}
        out = {"widths": widths_log(info["widths"])}
        out.update((k, info[k]) for k in ("projected", "cost_model", "solved_at") if k in info)
        if "keys" in info:
            out["solver"] = {
                k: {f: v[f] for f in ("status", "solve_seconds", "mip_gap") if f in v}
                for k, v in info["keys"].items()
            }
        return out

    def _decide(self, traces, previous):
        """The new assignment and its log; in a multi-process run process 0 solves (a
        time-limited solve need not repeat) and broadcasts it."""
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
            traced = [np.asarray(t, np.float64) for t in traces.fwd[layer]]
            # beta = s^2 * traced (square of the sum) or s * traced (s = sum of squares).
            weight = scores if squares else tuple(x * x for x in scores)
            beta = tuple(w * t * m for w, t, m in zip(weight, traced, plan.send_mask, strict=True))
            out[f"fwd{layer}"] = (beta, int(dim), False)
            if layer > 0:  # the first layer's input is data: no backward exchange
                traced = [np.asarray(t, np.float64) for t in traces.bwd[layer]]
                # Held by the backward sender (the forward receiver d + r), in the slot order
                # of the rows it received: already indexed by the channel's sender.
                beta = tuple(
                    t * np.roll(m, r, axis=0)
                    for r, (t, m) in enumerate(zip(traced, plan.send_mask, strict=True), 1)
                )
                out[f"bwd{layer}"] = (beta, int(dim), True)
        return out

    def solve(self, traces: Traces, previous: BitAssignment):
        """The new assignment from host-side :class:`Traces` (leaves ``[P, S_r]``), and a
        log."""
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
            (bwd if backward else fwd)[layer] = _bits_from_channels(channel_bits, plan, backward)
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
        per_channel = channel_bytes(plan, assignment, self.layer_dims, param_bytes)
        cost = self.cost_model()
        projected = {"model": sum(comm_time(per_channel, cost).values())}
        for preset in PROJECTION_PRESETS:
            preset_cost = AssignConfig(interconnect=preset).cost_model(plan.num_parts)
            projected[preset] = sum(comm_time(per_channel, preset_cost).values())
        return {
            # Message counts per width and key; layer 0 has no backward exchange.
            "widths": {k: v for k, v in assignment.width_counts(plan).items() if k != "bwd0"},
            "cost_model": cost.source,
            "projected": projected,
        }


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


__all__ = ["AdaQP", "AdaptiveController"]
