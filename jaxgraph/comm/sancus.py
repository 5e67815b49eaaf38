"""Sancus: skip-broadcast of historical embedding blocks under bounded staleness.

Each owner decides per layer and epoch whether its block is ACTIVE (broadcast; receivers
refresh their copy and its version) or STALE (skipped; receivers reuse ``H̃_j``), by the bounds
of :mod:`jaxgraph.comm.staleness`; the local diagonal block is always fresh. The first layer's
rows are data: a block is broadcast iff it differs from its last broadcast copy. Gradients
always travel back along every block's tree (a cached block stands in for the owner's current
one). Quantized, the caches, ``last_sent`` and Δ_H's gap hold what the receivers decoded.

**Local gradient clipping** (Sec. 5.2.2, ``th_i = sqrt(P) th``): ``clip_at="parameters"``
clips each device's parameter-gradient partial before the sum (the Trainer; Alg. 1 line 23);
``clip_at="embeddings"`` (Alg. 1 line 22) clips, at every layer after the first, the whole
embedding-gradient message a device sends back (``[P-1, B, F]``) as one vector
(:func:`clip_cotangent`); the diagonal term is not clipped.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, ClassVar, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.blockrow import (
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
from jaxgraph.comm.broadcast import broadcast_bytes, halo_sources, skip_broadcast_blocks
from jaxgraph.comm.method import (
    NUMBER,
    Method,
    match_spelling,
    number_label,
    parse_bits,
    parse_bits_or_mode,
)
from jaxgraph.comm.qbroadcast import block_tree_bytes, quantized_blocks
from jaxgraph.comm.qring import row_range_variance
from jaxgraph.comm.staleness import (
    NOT_READ,
    REPORT_COLUMNS,
    PolicyKind,
    StalenessPolicy,
    decide,
    decision_bytes,
    variation_gap,
)
from jaxgraph.comm.strategy import CommStrategy
from jaxgraph.configfile import check_int
from jaxgraph.options import flag
from jaxgraph.partition.shard import GraphShard


def _reads_blocks(shard: GraphShard, num_parts: int) -> jax.Array:
    """Whether this device has an edge from each halo block. ``-> bool[P-1]``."""
    b = shard.x.shape[0]
    slot = shard.edge_src // b - 1  # -1 for a local source
    valid = shard.edge_mask & (slot >= 0)
    hits = (
        jnp.zeros(num_parts, jnp.int32)
        .at[jnp.where(valid, slot, num_parts - 1)]
        .max(valid.astype(jnp.int32))
    )
    return hits[: num_parts - 1] > 0


def _tag_index(num_parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Static gather from receiver rows ``[P, P-1]`` (halo order) to ``[P, P]`` (block order):
    ``(rows, cols, diagonal)``; entry ``[i, j]`` reads column ``(i - j) mod P - 1``."""
    i, j = np.meshgrid(np.arange(num_parts), np.arange(num_parts), indexing="ij")
    cols = (i - j) % num_parts - 1
    return i, np.maximum(cols, 0), cols < 0


class SancusLayer(NamedTuple):
    """One layer's Sancus state on every device (leaves ``[P, ...]``; per device below).

    Attributes:
      cache: ``f32[P-1, B, F]`` the other devices' blocks as last received (halo order).
      tags: ``int32[P-1]`` the epoch each cached block was broadcast at (-1: never).
      last_sent: ``f32[B, F]`` this device's block as its receivers hold it.
      sent_version: ``int32[]`` the epoch this device last broadcast at (-1: never).
      count: ``int32[]`` epochs run (the epoch of the next exchange, minus one).
      quant: the widths in force when they change per block (None otherwise).
    """

    cache: Any
    tags: Any
    last_sent: Any
    sent_version: Any
    count: Any
    quant: LayerWidths | None = None


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def clip_cotangent(x: jax.Array, threshold: float) -> jax.Array:
    """Identity in the forward pass; in the backward pass the cotangent of ``x`` (this
    device's, as one vector) is scaled to L2 norm at most ``threshold``:
    ``g * min(1, threshold / ‖g‖_2)``."""
    del threshold
    return x


def _clip_fwd(x, threshold):
    del threshold
    return x, None


def _clip_bwd(threshold, _, g):
    norm = jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32))))
    scale = jnp.where(norm > threshold, threshold / jnp.maximum(norm, 1e-30), 1.0)
    return (g * scale.astype(g.dtype),)


clip_cotangent.defvjp(_clip_fwd, _clip_bwd)


_POLICY_LETTER = {"epoch": "e", "adaptive": "a", "gap": "h"}


@dataclasses.dataclass(frozen=True)
class Sancus(BlockWidthsMethod, Method, CommStrategy):
    """Skip-broadcast of historical embedding blocks under a staleness bound, with local
    gradient clipping.

    Attributes:
      policy: ``"epoch"`` (Δ_E: a block is re-broadcast when its copy is ``bound`` epochs
        old), ``"adaptive"`` (Δ_A) or ``"gap"`` (Δ_H: when the mean absolute difference to
        the last broadcast exceeds ``bound``); :class:`StalenessPolicy`.
      bound: Δ; whole epochs for ``epoch``/``adaptive``; ``math.inf`` never re-broadcasts.
      warmup: epochs ``1..warmup`` broadcast every block.
      clip: local gradient clipping threshold ``th`` (an L2 norm of ``sqrt(P) th`` per
        device), or ``None``.
      clip_at: what is clipped: ``"parameters"`` (each device's parameter-gradient partial
        before the all-reduce, applied by the Trainer) or ``"embeddings"`` (Algorithm 1,
        line 22: the embedding-gradient message each device sends at every layer after the
        first, inside the exchange); module docstring.
      quantize: ``None`` (fp32 blocks), or ``2``, ``4``, ``8``: the blocks of the layers after
        the first and the backward gradient sums travel stochastically quantized, and the
        caches hold what the receivers decoded; ``32``: the same byte path, exact. The first
        layer's rows (data) stay exact, under the first layer's rule. ``"random"`` or
        ``"adaptive"``: a width per owner block and layer in each direction, drawn or chosen
        by AdaQP's bi-objective every ``period`` epochs (:mod:`jaxgraph.comm.blockwidths`).
      quantize_grad: the width of the backward gradient sums under a fixed ``quantize``
        (default: ``quantize``).
      period: epochs per width assignment of ``"random"`` / ``"adaptive"`` (0: epochs // 5).
      assign: the candidate widths, ``lam`` and ``interconnect`` of those assignments (the
        other fields of :class:`AssignConfig` belong to the halo program and must keep their
        defaults).
    """

    policy: PolicyKind = "epoch"
    bound: float = 1
    warmup: int = 50
    clip: float | None = None
    clip_at: Literal["parameters", "embeddings"] = "parameters"
    quantize: int | Literal["random", "adaptive"] | None = None
    quantize_grad: int | None = None
    period: int = flag("--assign-period", 0)
    assign: AssignConfig = AssignConfig()

    key: ClassVar[str] = "sancus"
    spellings: ClassVar[str] = (
        "sancus-<e|a|h><bound>[-w<warmup>][-clip<th>|-eclip<th>][-q<bits>] "
        "(e.g. sancus-e1, sancus-h0.04)"
    )
    layout: ClassVar[str] = "block"
    modes: ClassVar[tuple[str, ...]] = ("quantize",)

    @classmethod
    def parse(cls, text: str) -> Sancus | None:
        """``sancus-<e|a|h><bound>[-w<warmup>][-clip<th>|-eclip<th>][-q<bits>]``: ``e``
        epochs, ``a`` adaptive, ``h`` mean absolute gap; ``-clip`` clips parameter gradients,
        ``-eclip`` the embedding-gradient messages; ``sancus`` alone is the defaults."""
        if text == cls.key:
            return cls()
        g = match_spelling(
            rf"sancus-(?P<kind>[eah])(?P<bound>{NUMBER})(?:-w(?P<warmup>\d+))?"
            rf"(?:-(?P<at>e?)clip(?P<clip>\d+(?:\.\d+)?))?(?:-q(?P<q>2|4|8|32|random|adaptive){GRAD_SPELLING})?",
            text,
        )
        if g is None:
            return None
        return cls(
            {"e": "epoch", "a": "adaptive", "h": "gap"}[g["kind"]],
            float(g["bound"]),
            50 if g["warmup"] is None else int(g["warmup"]),
            None if g["clip"] is None else float(g["clip"]),
            "embeddings" if g["at"] else "parameters",
            parse_bits_or_mode(g["q"]),
            parse_bits(g["g"]),
        )

    @classmethod
    def taker(cls, field: str) -> str:
        return "sancus-<...>-q<random|adaptive>" if field in ("period", "assign") else cls.key

    def __post_init__(self):
        if self.policy not in _POLICY_LETTER:
            raise ValueError(
                f"sancus.policy must be one of {tuple(_POLICY_LETTER)}, got {self.policy!r}"
            )
        if isinstance(self.bound, str) and self.bound == "inf":
            object.__setattr__(self, "bound", math.inf)
        if not (isinstance(self.bound, int | float) and self.bound >= 0):
            raise ValueError(f"sancus.bound must be a number >= 0 (or inf), got {self.bound!r}")
        if self.policy != "gap" and not math.isinf(self.bound) and self.bound != int(self.bound):
            raise ValueError(
                f"sancus.bound of policy {self.policy!r} is whole epochs, got {self.bound!r}"
            )
        check_int("sancus.warmup", self.warmup, 0)
        if self.clip is not None and not (
            isinstance(self.clip, int | float) and 0 < self.clip < math.inf
        ):
            raise ValueError(f"sancus.clip must be a positive number or none, got {self.clip!r}")
        if self.clip_at not in ("parameters", "embeddings"):
            raise ValueError(
                f"sancus.clip_at must be one of ('parameters', 'embeddings'), got {self.clip_at!r}"
            )
        if self.clip_at != "parameters" and self.clip is None:
            raise ValueError("sancus.clip_at applies only with a clipping threshold (sancus.clip)")
        check_block_widths("sancus", self)

    def label(self) -> str:
        text = f"sancus-{_POLICY_LETTER[self.policy]}{number_label(self.bound)}"
        if self.warmup != 50:
            text += f"-w{self.warmup}"
        if self.clip is not None:
            prefix = "e" if self.clip_at == "embeddings" else ""
            text += f"-{prefix}clip{number_label(self.clip)}"
        return text + quantize_label(self)

    @property
    def staleness(self) -> StalenessPolicy:
        """The :class:`StalenessPolicy` of the layers after the first."""
        return StalenessPolicy(self.policy, self.bound, self.warmup)

    @property
    def local_grad_clip(self) -> float | None:
        """The threshold the Trainer clips each device's parameter gradient at, or None."""
        return self.clip if self.clip_at == "parameters" else None

    @property
    def embedding_grad_clip(self) -> float | None:
        """The threshold of the embedding-gradient messages (Algorithm 1, line 22), or None."""
        return self.clip if self.clip_at == "embeddings" else None

    def quantized_layers(self, num_layers: int) -> tuple[int, ...]:
        """The layers whose broadcasts are quantized: every one after the first (data)."""
        return tuple(range(1, num_layers)) if self.quantize is not None else ()

    def init_state(self, plan, layer_dims, *, epoch=0):
        check_block_plan(plan, "Sancus")
        p, b = plan.num_parts, plan.num_local_rows
        return tuple(
            SancusLayer(
                cache=np.zeros((p, p - 1, b, f), np.float32),
                tags=np.full((p, p - 1), -1, np.int32),
                last_sent=np.zeros((p, b, f), np.float32),
                sent_version=np.full(p, -1, np.int32),
                count=np.full(p, epoch, np.int32),
            )
            for f in layer_dims
        )

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        st = comm_state[layer]
        p = num_parts
        b, f = h_local.shape
        count = st.count + 1
        if p == 1:
            new = st._replace(count=count)
            halo = jnp.zeros((0, f), h_local.dtype)
            return halo, replace_layer(comm_state, layer, new), jnp.float32(0)

        i = jax.lax.axis_index(axis_name)
        h = jax.lax.stop_gradient(h_local)  # h: f32[B, F]
        last = st.last_sent  # f32[B, F]
        gap = variation_gap(h, last, shard.local_mask)
        tags = jnp.where(_reads_blocks(shard, p), st.tags, NOT_READ)  # int32[P-1]
        changed = jnp.any(h != last).astype(jnp.int32)
        stats = [count, st.sent_version, changed, jax.lax.bitcast_convert_type(gap, jnp.int32)]
        report = jnp.concatenate([jnp.stack(stats), tags])  # int32[4 + P - 1]
        # One row per device, summed: the table is the same on every device, and its type
        # is device-invariant, so every predicate derived from it is uniform.
        table = jax.lax.psum(
            jnp.zeros((p, report.shape[0]), jnp.int32).at[i].set(report), axis_name
        )
        epoch = table[0, 0]
        sent_version = table[:, 1]
        if layer == 0:
            active = (sent_version < 0) | (table[:, 2] > 0)
        else:
            rows, cols, diag = _tag_index(p)
            tag_matrix = jnp.where(diag, NOT_READ, table[:, REPORT_COLUMNS:][rows, cols])  # [i, j]
            gaps = jax.lax.bitcast_convert_type(table[:, 3], jnp.float32)
            active = decide(
                self.staleness, epoch=epoch, sent_version=sent_version, tags=tag_matrix, gap=gaps
            )

        quantized = self.quantize is not None and layer > 0
        if quantized:
            if key is None:
                raise ValueError("a quantized broadcast needs a PRNG key")
            if st.quant is not None:  # per owner block (random or adaptive)
                bits, grad_bits = st.quant.widths.fwd, st.quant.widths.bwd
            else:
                bits, grad_bits = fixed_widths(self)
            kw = dict(axis_name=axis_name, num_parts=p)
            halo, decoded = quantized_blocks(
                h_local, st.cache, active, key, bits=bits, grad_bits=grad_bits, probe=probe, **kw
            )  # [P-1, B, F], [B, F]: what every receiver holds of this device's block
            sends, backward = tree_bytes_here(*block_tree_bytes(b, f, p, bits, grad_bits), i, p)
            decoded = jax.lax.stop_gradient(decoded)
        else:
            halo = skip_broadcast_blocks(
                h_local, st.cache, active, axis_name=axis_name, num_parts=p
            )  # [P-1, B, F]
            per_rank, total = broadcast_bytes((b, f), p, h_local.dtype.itemsize)
            sends = jnp.asarray(per_rank, jnp.float32)[(i - jnp.arange(p)) % p]  # [P] by source
            backward = jnp.float32(0 if layer == 0 else total)
            decoded = h
        fresh = active[halo_sources(i, p)]  # [P-1]
        own = active[i]
        new = st._replace(
            cache=jax.lax.stop_gradient(halo),
            tags=jnp.where(fresh, epoch, st.tags),
            last_sent=jnp.where(own, decoded, last),
            sent_version=jnp.where(own, epoch, st.sent_version),
            count=count,
        )
        if st.quant is not None and st.quant.trace is not None:  # adaptive widths
            traced = jnp.where(own, row_range_variance(h_local), 0.0)  # when the block travels
            trace = st.quant.trace._replace(fwd=st.quant.trace.fwd + traced)
            new = new._replace(quant=st.quant._replace(trace=trace))

        sent = jnp.sum(jnp.where(active, sends, 0.0))
        nbytes = sent + backward + jnp.float32(decision_bytes(p))
        if layer > 0 and self.embedding_grad_clip is not None:
            halo = clip_cotangent(halo, math.sqrt(p) * self.embedding_grad_clip)
        return halo.reshape(-1, f), replace_layer(comm_state, layer, new), nbytes


__all__ = ["Sancus", "SancusLayer", "clip_cotangent"]
