"""What the 1D block-row methods share (:class:`~jaxgraph.comm.cagnet.CAGNET`,
:class:`~jaxgraph.comm.sancus.Sancus`, :class:`~jaxgraph.comm.skipg.SkipG`).

They run on the block-row layout of :func:`jaxgraph.partition.build_block_halo_plan`: device
``i`` owns block ``i`` (``B`` padded rows) and its halo is every other block, slot ``r - 1``
holding block ``(i - r) mod P``; the models multiply the delivered blocks by the device's block
row of ``Â``. A block-row method's ``quantize`` is ``None`` (fp32), a fixed width (2, 4, 8;
32 takes the quantized byte path exactly, :mod:`jaxgraph.comm.qbroadcast`) with an optional
backward width ``quantize_grad``, or widths per owner block (``"random"`` / ``"adaptive"``,
:mod:`jaxgraph.comm.blockwidths`) with their ``period`` and ``assign``. This module validates
those settings once for all three, builds their host half, and keeps the adaptive widths'
traces in ``comm_state``.
"""

from __future__ import annotations

import dataclasses

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


def block_width_options(method, fields: tuple[str, ...]) -> tuple[str, ...]:
    """The fields that take effect under ``method.quantize``."""
    if method.quantize in BLOCK_MODES:
        inert = ("quantize_grad",)
    elif method.quantize is None:
        inert = ("period", "assign", "quantize_grad")
    else:
        inert = ("period", "assign")
    return tuple(f for f in fields if f not in inert)


def _block_quantize(method, run: RunInfo) -> BlockQuantize:
    """The widths per owner block of ``method`` in ``run``."""
    return BlockQuantize(
        method.quantize,
        period=run.period(method.period),
        seed=run.seed,
        assign=method.assign,
        norm=run.norm,
    )


def block_controller(method, plan, layer_dims, cost, run):
    if method.quantize in BLOCK_MODES:
        q = _block_quantize(method, run or RunInfo())
        return BlockWidthsController(method, plan, layer_dims, q=q, cost=cost)
    return Controller(method, plan, layer_dims)


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


def _trace(layer_state):
    """The layer's :class:`~jaxgraph.comm.blockwidths.WidthTrace`, or None."""
    return None if layer_state.quant is None else layer_state.quant.trace


def block_trace_probes(comm_state):
    """Adaptive block widths trace the gradient partials each device sends: per layer, zeros
    of the backward trace's shape, or None (nothing to trace anywhere: None)."""
    traces = [_trace(st) for st in comm_state]
    if all(t is None for t in traces):
        return None
    return tuple(None if t is None else jnp.zeros_like(t.bwd) for t in traces)


def absorb_block_traces(comm_state, probe_grads):
    if probe_grads is None:
        return comm_state
    out = list(comm_state)
    for layer, grads in enumerate(probe_grads):
        if grads is not None:
            st = out[layer]
            trace = st.quant.trace._replace(bwd=st.quant.trace.bwd + grads)
            out[layer] = st._replace(quant=st.quant._replace(trace=trace))
    return tuple(out)
