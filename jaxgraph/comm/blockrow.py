"""What the 1D block-row methods share (:class:`~jaxgraph.comm.cagnet.CAGNET`,
:class:`~jaxgraph.comm.sancus.Sancus`, :class:`~jaxgraph.comm.skipg.SkipG`).

They run on the layout of :func:`jaxgraph.partition.build_block_halo_plan` (device ``i`` owns
block ``i``; halo slot ``r - 1`` holds block ``(i - r) mod P``). Their ``quantize`` is ``None``
(fp32), a fixed width with an optional backward width ``quantize_grad``
(:mod:`jaxgraph.comm.qbroadcast`), or widths per owner block (``"random"`` / ``"adaptive"``,
:mod:`jaxgraph.comm.blockwidths`) with their ``period`` and ``assign``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.blockwidths import BlockQuantize, BlockWidthsController
from jaxgraph.comm.method import RunInfo, bits_label, check_quantize
from jaxgraph.comm.strategy import Controller
from jaxgraph.configfile import check_int, from_dict
from jaxgraph.partition.halo import HaloPlan


def check_block_plan(plan: HaloPlan, who: str) -> None:
    b, p = plan.num_local_rows, plan.num_parts
    if tuple(plan.round_rows) != (b,) * (p - 1):
        raise ValueError(
            f"{who} needs the block-row layout (every round sends the whole block); build the "
            "plan with jaxgraph.partition.build_block_halo_plan"
        )


def replace_layer(comm_state, layer, new):
    return tuple(new if k == layer else s for k, s in enumerate(comm_state))


BLOCK_MODES = ("random", "adaptive")
GRAD_SPELLING = "(?:g(?P<g>2|4|8|32))?"  # a backward width after the forward one: -q8g4


def check_block_widths(owner: str, method) -> None:
    """``quantize``, ``quantize_grad``, ``period`` and ``assign`` of a block-row method: a
    fixed width (and its backward width), or widths per owner block (``"random"`` /
    ``"adaptive"``) with their period and program."""
    if isinstance(method.assign, dict):
        object.__setattr__(
            method, "assign", from_dict(AssignConfig, method.assign, f"{owner}.assign")
        )
    check_int(f"{owner}.period", method.period, 0, what=" (0: epochs // 5)")
    defaults = {f.name: f.default for f in dataclasses.fields(method)}
    if method.quantize in BLOCK_MODES:
        default = AssignConfig()
        for name in ("group_size", "solver", "lookahead", "time_limit", "mip_gap"):
            if getattr(method.assign, name) != getattr(default, name):
                raise ValueError(
                    f"{owner}.assign.{name} applies to AdaQP's halo program, not to block "
                    "widths (which take widths, lam and interconnect)"
                )
        inert = ("quantize_grad",)
    else:
        check_quantize(owner, method.quantize)
        inert = ("period", "assign")
    for name in inert:
        if getattr(method, name) != defaults[name]:
            which = "a fixed width" if name == "quantize_grad" else "'random' or 'adaptive'"
            raise ValueError(f"{owner}.{name} applies to quantize={which} only")
    check_quantize_grad(owner, method)


def check_quantize_grad(owner: str, method) -> None:
    """``quantize_grad``: none, or a width beside a forward width ``quantize``."""
    grad = method.quantize_grad
    if grad is not None:
        if method.quantize is None:
            raise ValueError(f"{owner}.quantize_grad needs quantize (the forward width)")
        if grad not in (2, 4, 8, 32) or isinstance(grad, bool):
            raise ValueError(f"{owner}.quantize_grad must be none, 2, 4, 8 or 32, got {grad!r}")


def fixed_widths(method) -> tuple[int, int]:
    """``(forward, backward)`` widths of a fixed-width quantized broadcast."""
    q = method.quantize
    return q, q if method.quantize_grad is None else method.quantize_grad


def quantize_label(method) -> str:
    out = bits_label(method.quantize)
    grad = method.quantize_grad
    if grad is not None and grad != method.quantize:
        out += f"g{grad}"
    return out


def tree_bytes_here(per_rank, per_source, i, num_parts: int) -> tuple[jax.Array, jax.Array]:
    """What device ``i`` sends under :func:`~jaxgraph.comm.qbroadcast.block_tree_bytes`: per
    source, its share of that source's broadcast tree (``f32[P]``), and one hop of the
    reduction of every block but its own (``f32[]``)."""
    rel = (i - jnp.arange(num_parts)) % num_parts  # this device's rank in each tree
    per_source = jnp.asarray(per_source, jnp.float32)
    sends = jnp.asarray(per_rank, jnp.float32)[jnp.arange(num_parts), rel]
    return sends, jnp.sum(per_source) - per_source[i]


def _trace(layer_state):
    """The layer's :class:`~jaxgraph.comm.blockwidths.WidthTrace`, or None."""
    return None if layer_state.quant is None else layer_state.quant.trace


class BlockWidthsMethod:
    """The parts of :class:`~jaxgraph.comm.cagnet.CAGNET` and
    :class:`~jaxgraph.comm.sancus.Sancus` that follow from their ``quantize`` settings."""

    @property
    def name(self) -> str:
        """The method's label."""
        return self.label()

    def options(self) -> tuple[str, ...]:
        """The fields that take effect under ``quantize``."""
        if self.quantize in BLOCK_MODES:
            inert = ("quantize_grad",)
        elif self.quantize is None:
            inert = ("period", "assign", "quantize_grad")
        else:
            inert = ("period", "assign")
        return tuple(f for f in super().options() if f not in inert)

    def controller(self, plan, layer_dims, *, cost=None, run=None):
        """The widths per owner block's controller, or the plain one."""
        if self.quantize in BLOCK_MODES:
            run = run or RunInfo()
            q = BlockQuantize(
                self.quantize,
                period=run.period(self.period),
                seed=run.seed,
                assign=self.assign,
                norm=run.norm,
            )
            return BlockWidthsController(self, plan, layer_dims, q=q, cost=cost)
        return Controller(self, plan, layer_dims)

    def probes(self, comm_state, num_layers):
        """Adaptive block widths trace the gradient partials each device sends: per layer,
        zeros of the backward trace's shape, or None (nothing to trace anywhere: None)."""
        traces = [_trace(st) for st in comm_state]
        if all(t is None for t in traces):
            return None
        return tuple(None if t is None else jnp.zeros_like(t.bwd) for t in traces)

    def absorb_probes(self, comm_state, probe_grads):
        """``comm_state`` with the backward traces added."""
        if probe_grads is None:
            return comm_state
        out = list(comm_state)
        for layer, grads in enumerate(probe_grads):
            if grads is not None:
                st = out[layer]
                trace = st.quant.trace._replace(bwd=st.quant.trace.bwd + grads)
                out[layer] = st._replace(quant=st.quant._replace(trace=trace))
        return tuple(out)
