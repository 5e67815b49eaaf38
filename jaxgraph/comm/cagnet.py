"""CAGNET's 1D algorithm (Tripathy et al., SC'20): every block broadcast from its owner at
every layer (:func:`~jaxgraph.comm.broadcast.all_blocks_by_broadcast`), the gradient partials
reduced back to the owners along the same trees; optionally quantized
(:mod:`jaxgraph.comm.blockrow`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, NamedTuple

import jax
import jax.numpy as jnp

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.blockrow import (
    BLOCK_MODES,
    GRAD_SPELLING,
    BlockWidthsMethod,
    check_block_plan,
    check_block_widths,
    fixed_widths,
    quantize_label,
    replace_layer,
    tree_bytes_here,
)
from jaxgraph.comm.blockwidths import LayerWidths
from jaxgraph.comm.broadcast import all_blocks_by_broadcast, broadcast_bytes
from jaxgraph.comm.method import Method, match_spelling, parse_bits, parse_bits_or_mode
from jaxgraph.comm.qbroadcast import block_tree_bytes, quantized_blocks, quantized_broadcast_bytes
from jaxgraph.comm.qring import row_range_variance
from jaxgraph.comm.strategy import CommStrategy
from jaxgraph.options import flag


class CagnetLayer(NamedTuple):
    """A layer's state under widths per block: its widths in force (None until installed)."""

    quant: LayerWidths | None = None


@dataclasses.dataclass(frozen=True)
class CAGNET(BlockWidthsMethod, Method, CommStrategy):
    """1D block-row training: every block broadcast from its owner at every layer, in both
    passes (CAGNET's 1D algorithm).

    Attributes:
      quantize: ``None`` (fp32 blocks), or ``2``, ``4``, ``8``: the blocks and the backward
        gradient sums travel stochastically quantized at that width
        (:mod:`jaxgraph.comm.qbroadcast`); ``32``: the same byte path, exact. ``"random"`` or
        ``"adaptive"``: a width per owner block, layer and direction, as :class:`Sancus`'s
        (every layer, the first included: CAGNET quantizes its data rows too).
      quantize_grad: the width of the backward gradient sums under a fixed ``quantize``
        (default: ``quantize``).
      period, assign: as :class:`Sancus`'s, for ``quantize="random"`` or ``"adaptive"`` only.
    """

    quantize: int | Literal["random", "adaptive"] | None = None
    quantize_grad: int | None = None
    period: int = flag("--assign-period", 0)
    assign: AssignConfig = AssignConfig()

    key: ClassVar[str] = "cagnet"
    spellings: ClassVar[str] = "cagnet[-q<bits>[g<bits>]|-qrandom|-qadaptive]"
    layout: ClassVar[str] = "block"
    modes: ClassVar[tuple[str, ...]] = ("quantize",)

    @classmethod
    def parse(cls, text: str) -> CAGNET | None:
        g = match_spelling(rf"cagnet(?:-q(?P<q>2|4|8|32|random|adaptive){GRAD_SPELLING})?", text)
        return None if g is None else cls(parse_bits_or_mode(g["q"]), parse_bits(g["g"]))

    @classmethod
    def taker(cls, field: str) -> str:
        return "cagnet-q<random|adaptive>" if field in ("period", "assign") else cls.key

    def __post_init__(self):
        check_block_widths("cagnet", self)

    def label(self) -> str:
        return "cagnet" + quantize_label(self)

    def quantized_layers(self, num_layers: int) -> tuple[int, ...]:
        """The layers whose broadcasts are quantized: all of them."""
        return tuple(range(num_layers)) if self.quantize is not None else ()

    def init_state(self, plan, layer_dims, *, epoch=0):
        check_block_plan(plan, "CAGNET")
        # Widths per block: a state per layer, which the controller fills with the widths.
        return tuple(CagnetLayer() for _ in layer_dims) if self.quantize in BLOCK_MODES else ()

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        b, f = h_local.shape
        # Over the P trees every device sends P - 1 blocks forward and P - 1 back (the first
        # layer's input is data: no backward pass).
        if self.quantize is None or num_parts == 1:
            halo = all_blocks_by_broadcast(h_local, axis_name=axis_name, num_parts=num_parts)
            _, total = broadcast_bytes((b, f), num_parts, h_local.dtype.itemsize)
            passes = 1 if layer == 0 else 2
            return halo, comm_state, jnp.float32(passes * total)
        if key is None:
            raise ValueError("a quantized broadcast needs a PRNG key")
        per_block = self.quantize in BLOCK_MODES
        quant = comm_state[layer].quant if per_block else None
        bits, grad_bits = (quant.widths.fwd, quant.widths.bwd) if per_block else fixed_widths(self)
        kw = dict(axis_name=axis_name, num_parts=num_parts)
        halo, _ = quantized_blocks(
            h_local, None, None, key, bits=bits, grad_bits=grad_bits, probe=probe, **kw
        )
        if per_block:  # what this device sends in every source's tree, at that tree's width
            tree_bytes = block_tree_bytes(b, f, num_parts, bits, grad_bits)
            i = jax.lax.axis_index(axis_name)
            sends, backward = tree_bytes_here(*tree_bytes, i, num_parts)
            forward = jnp.sum(sends)
        else:
            _, forward = quantized_broadcast_bytes(b, f, num_parts, bits)
            _, backward = quantized_broadcast_bytes(b, f, num_parts, grad_bits)
        nbytes = jnp.float32(forward + (0 if layer == 0 else backward))
        if quant is not None and quant.trace is not None:  # adaptive: this block's variances
            trace = quant.trace._replace(fwd=quant.trace.fwd + row_range_variance(h_local))
            new = CagnetLayer(quant._replace(trace=trace))
            comm_state = replace_layer(comm_state, layer, new)
        return halo.reshape(-1, f), comm_state, nbytes


__all__ = ["CAGNET"]
