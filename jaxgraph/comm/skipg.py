"""SkipG: bounded gradient staleness on the block-row layout (the Sancus chapter's baseline,
after Miao et al., SIGMOD'21: "skip gradient broadcasts while within the bound"); the rule is
:class:`SkipG`'s."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.blockrow import (
    GRAD_SPELLING,
    check_block_plan,
    check_quantize_grad,
    fixed_widths,
    quantize_label,
    replace_layer,
)
from jaxgraph.comm.broadcast import (
    all_blocks_by_broadcast,
    broadcast_bytes,
    broadcast_forward,
    reduce_halo_to_owners,
    skip_forward,
)
from jaxgraph.comm.method import Method, check_quantize, match_spelling, number_label, parse_bits
from jaxgraph.comm.qbroadcast import (
    block_bytes,
    quantized_all_blocks,
    quantized_broadcast_bytes,
    quantized_reduce_halo_to_owners,
)
from jaxgraph.comm.staleness import StalenessPolicy, decide, table_bytes
from jaxgraph.comm.strategy import CommStrategy
from jaxgraph.configfile import check_int


def _gradient_skip_exchange(
    h_local, probe, cached, active, key=None, *, axis_name, num_parts, bits=None, grad_bits=None
):
    """CAGNET's forward (encoded at ``bits`` when given) with SkipG's backward: block ``j``'s
    reduction tree (quantized at ``grad_bits`` when given) runs only where ``active[j]``
    (identical on every device); this device's cotangent is the fresh sum when its own block is
    active and ``cached`` otherwise, and ``probe`` receives the same value (the new cache).

    Shapes:
      ``h_local, probe, cached: [B, F]``, ``active: bool[P]`` -> ``[P-1, B, F]``.
    """
    kw = dict(axis_name=axis_name, num_parts=num_parts)

    @jax.custom_vjp
    def exchange(h_local, probe, cached, active, key):
        del probe, cached, active
        if bits is not None:
            return quantized_all_blocks(h_local, bits, key, **kw)
        send = functools.partial(broadcast_forward, **kw)
        return skip_forward(h_local, None, None, axis_name, num_parts, send)  # [P-1, B, F]

    def fwd(h_local, probe, cached, active, key):
        return exchange(h_local, probe, cached, active, key), (cached, active, key)

    def bwd(res, g_halo):
        cached, active, key = res
        i = jax.lax.axis_index(axis_name)
        if grad_bits is None:
            dh = reduce_halo_to_owners(g_halo, active=active, **kw)
        else:
            back = jax.random.fold_in(key, 1 << 20)
            dh = quantized_reduce_halo_to_owners(g_halo, grad_bits, back, active=active, **kw)
        dh = jnp.where(active[i], dh, cached)
        return dh, dh, None, None, None

    exchange.defvjp(fwd, bwd)
    return exchange(h_local, probe, cached, active, key)


class SkipGLayer(NamedTuple):
    """One layer's SkipG state on every device (leaves ``[P, ...]``; per device below). The
    first layer (data input, no backward pass) has the counter only.

    Attributes:
      count: ``int32[]`` epochs run.
      grad: ``f32[B, F]`` the last reduced gradient sum of this device's block.
      sent_version: ``int32[]`` the epoch of that reduction (-1: never).
    """

    count: Any
    grad: Any = None
    sent_version: Any = None


@dataclasses.dataclass(frozen=True)
class SkipG(Method, CommStrategy):
    """Bounded gradient staleness on the block-row layout (the SkipG baseline).

    Every block is broadcast forward, as in CAGNET; the reduction of block ``j``'s gradient
    partials to its owner runs at epoch ``e`` iff ``e - Ver(j) > Δ`` (or in the warm-up, or if
    it never ran), else the owner adds the sum it received then: Sancus's Δ_E (:func:`decide`)
    on gradients; Δ = 0 is CAGNET. The schedule travels in a ``psum``'d table per layer.

    Attributes:
      bound: Δ, whole epochs (``math.inf``: never reduce again after the warm-up).
      warmup: epochs ``1..warmup`` reduce every block.
      quantize: ``None`` (fp32), or ``2``, ``4``, ``8``: the broadcasts, and the reductions
        that run, travel stochastically quantized (:mod:`jaxgraph.comm.qbroadcast`); the
        cached gradient is the decoded sum. ``32``: the same byte path, exact.
      quantize_grad: the width of the backward reductions (default: ``quantize``).
    """

    bound: float = 1
    warmup: int = 50
    quantize: int | None = None
    quantize_grad: int | None = None

    key: ClassVar[str] = "skipg"
    spellings: ClassVar[str] = "skipg[-<bound>][-w<warmup>][-q<bits>[g<bits>]]"
    layout: ClassVar[str] = "block"

    @classmethod
    def parse(cls, text: str) -> SkipG | None:
        g = match_spelling(
            rf"skipg(?:-(?P<bound>inf|\d+))?(?:-w(?P<warmup>\d+))?(?:-q(?P<q>2|4|8|32){GRAD_SPELLING})?",
            text,
        )
        if g is None:
            return None
        bound = 1 if g["bound"] is None else float(g["bound"])
        warmup = 50 if g["warmup"] is None else int(g["warmup"])
        return cls(bound, warmup, parse_bits(g["q"]), parse_bits(g["g"]))

    def __post_init__(self):
        if isinstance(self.bound, str) and self.bound == "inf":
            object.__setattr__(self, "bound", math.inf)
        if not (
            isinstance(self.bound, int | float)
            and self.bound >= 0
            and (math.isinf(self.bound) or self.bound == int(self.bound))
        ):
            raise ValueError(f"skipg.bound must be whole epochs >= 0 (or inf), got {self.bound!r}")
        check_int("skipg.warmup", self.warmup, 0)
        check_quantize("skipg", self.quantize)
        check_quantize_grad("skipg", self)

    def options(self) -> tuple[str, ...]:
        fields = super().options()
        return fields if self.quantize is not None else fields[:-1]

    def label(self) -> str:
        text = "skipg"
        if self.bound != 1:
            text += f"-{number_label(self.bound)}"
        if self.warmup != 50:
            text += f"-w{self.warmup}"
        return text + quantize_label(self)

    @property
    def name(self) -> str:
        return self.label()

    def init_state(self, plan, layer_dims, *, epoch=0):
        check_block_plan(plan, "SkipG")
        p, b = plan.num_parts, plan.num_local_rows
        count = np.full(p, epoch, np.int32)
        # Layer 0 (data input) has no backward pass: only its counter.
        return (SkipGLayer(count),) + tuple(
            SkipGLayer(count, np.zeros((p, b, f), np.float32), np.full(p, -1, np.int32))
            for f in layer_dims[1:]
        )

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        p = num_parts
        b, f = h_local.shape
        st = comm_state[layer]
        count = st.count + 1
        kw = dict(axis_name=axis_name, num_parts=p)
        quantized = self.quantize is not None and p > 1
        if quantized:
            if key is None:
                raise ValueError("a quantized broadcast needs a PRNG key")
            bits, grad_bits = fixed_widths(self)
            _, total = quantized_broadcast_bytes(b, f, p, bits)
            block = block_bytes(b, f, grad_bits)
        else:
            bits = grad_bits = None
            _, total = broadcast_bytes((b, f), p, h_local.dtype.itemsize)
            block = b * f * h_local.dtype.itemsize
        if p == 1 or probe is None:  # layer 0: CAGNET's forward, no backward
            if quantized:
                halo = quantized_all_blocks(h_local, bits, key, **kw).reshape(-1, f)
            else:
                halo = all_blocks_by_broadcast(h_local, **kw)
            new = st._replace(count=count)
            return halo, replace_layer(comm_state, layer, new), jnp.float32(total)
        i = jax.lax.axis_index(axis_name)
        report = jnp.stack([count, st.sent_version])  # int32[2]
        table = jax.lax.psum(jnp.zeros((p, 2), jnp.int32).at[i].set(report), axis_name)
        epoch = table[0, 0]
        policy = StalenessPolicy("epoch", self.bound, self.warmup)
        active = decide(policy, epoch=epoch, sent_version=table[:, 1], tags=None, gap=None)
        halo = _gradient_skip_exchange(
            h_local, probe, st.grad, active, key, bits=bits, grad_bits=grad_bits, **kw
        )
        new = st._replace(sent_version=jnp.where(active[i], epoch, st.sent_version), count=count)
        # Backward: every non-source device sends one block per executed reduction tree.
        backward = jnp.sum(jnp.where(active & (jnp.arange(p) != i), block, 0)).astype(jnp.float32)
        nbytes = jnp.float32(total + table_bytes(p, 2)) + backward
        return halo.reshape(-1, f), replace_layer(comm_state, layer, new), nbytes

    def probes(self, comm_state, num_layers):
        return tuple(
            None if layer == 0 else jnp.zeros_like(comm_state[layer].grad)
            for layer in range(num_layers)
        )

    def absorb_probes(self, comm_state, probe_grads):
        out = comm_state
        for layer, grad in enumerate(probe_grads):
            if grad is not None:
                out = replace_layer(out, layer, out[layer]._replace(grad=grad))
        return out


__all__ = ["SkipG", "SkipGLayer"]
