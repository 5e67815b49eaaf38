"""1D block-row strategies: CAGNET (broadcast every block), Sancus (skip-broadcast with
bounded embedding staleness) and SkipG (bounded gradient staleness).

All three run on the block-row layout of :func:`jaxgraph.partition.build_block_halo_plan`: device
``i`` owns block ``i`` (``B`` padded rows) and its halo is every other block, slot ``r - 1``
holding block ``(i - r) mod P``. The models are unchanged: the exchange delivers those blocks,
the :class:`~jaxgraph.models.Propagator` multiplies them by the device's block row of ``Â``.

**CAGNET** (Tripathy et al., SC'20): at every layer each block is broadcast from its owner
(:func:`~jaxgraph.comm.broadcast.all_blocks_by_broadcast`), and the backward pass reduces the
gradient partials back to the owners along the same trees.

**Sancus** (Peng et al., "Sancus: staleness-aware communication-avoiding full-graph
decentralized training", VLDB'22; the chapter's Algorithms 1-4): each owner decides per layer
and epoch whether its block is ACTIVE (broadcast; receivers refresh their cache and its
version) or STALE (skipped; receivers reuse their cached copy ``H̃_j``). ``comm_state`` holds,
per layer and per device:

- ``cache: f32[P-1, B, F]`` the cached copies of the other blocks, in halo order;
- ``tags: int32[P-1]`` the version (epoch that produced it) of each cached block on this
  receiver, ``Ver_i(j)``; ``-1`` = never received;
- ``last_sent: f32[B, F]`` this owner's copy of its block as last broadcast (equal, bit for
  bit, to every receiver's cache entry for it);
- ``sent_version: int32[]`` the epoch of that broadcast (``-1`` = never);
- ``count: int32[]`` the exchanges done at this layer, i.e. completed epochs: the exchange
  of epoch ``e`` (1-indexed, as in :func:`jaxgraph.train.train`) sees ``count = e - 1``.

Every device contributes its owner statistics and receiver tags to one small ``psum``; all
devices then evaluate the same pure function (:func:`decide`) on the same table, and the
``lax.cond`` around each broadcast has a predicate that is device-invariant in shard_map's
types. The local diagonal block is always the fresh one (the owner never reads its own
cache entry); every broadcast result is a new array, never an alias of a cache entry.

Conventions (documented choices where the chapter is ambiguous):

- **Epoch bounds** (Δ_E, Def. 5.2 / Alg. 2; Δ_A, Def. 5.3 / Alg. 3): a block used at epoch
  ``e`` may be at most Δ epochs old, ``e - Ver <= Δ``; block ``j`` is broadcast at epoch
  ``e`` iff ``e - Ver(j) > Δ``. This is the algorithms' ``Ver - Ver(j) >= Δ`` evaluated when
  the flag is updated, at the end of epoch ``e - 1`` (Alg. 1, line 17). Δ = 0 never reuses a
  block; Δ_E = 1 broadcasts every other epoch (sent at 7, reused at 8, sent at 9), as the
  chapter states; and in the Fig. 5.7b example (Δ_A = 1; after epoch 9 the receivers hold
  ``H1^(8)``, ``H2^(7)``, ``H3^(9)``, ``H4^(9)``) workers 2 and 1 broadcast at epoch 10 and
  workers 3 and 4 at epoch 11 (``tests/stale/test_policies.py``).
- **Δ_A** takes the oldest copy over the receivers that read block ``j`` (those with an edge
  from it; a receiver that reads nothing of ``j`` never asks for it). In this synchronous
  SPMD program every broadcast reaches all receivers at once, so their tags agree and Δ_A
  schedules like Δ_E except for blocks nobody reads; the per-receiver rule matters when
  workers progress at different speeds (the chapter's setting), which :func:`decide`
  handles on any tag matrix.
- **Δ_H** (Def. 5.4 / Alg. 4): broadcast iff ``gap >= Δ_H`` with ``gap`` the *mean absolute
  difference* between the owner's current block and its last broadcast copy over the real
  (non-pad) rows, ``mean |H_i - H̃_i|`` (the ``F.l1_loss`` of the public prototype,
  ``chenzhao/dist-gnn``; Δ_H ≈ 0.04 for 2 layers, 0.10 for 4 layers there). It measures drift
  accumulated since the last broadcast, not per-epoch change.
- **Warm-up**: epochs ``1..warmup`` (default 50) broadcast every block at every layer.
- **First layer**: its input rows are data (features, after input dropout), so it follows an
  exact rule instead of the policy: a block is broadcast iff it differs from its last
  broadcast copy (or was never sent). Without input dropout the features never change and
  are sent once, at epoch 1; with input dropout they are re-sent whenever the mask changes.
  Either way the first layer's halo is exact.
- **Backward**: gradients always travel (the reversed trees of every block, as Sancus's
  backward broadcasts are never skipped); a cached block passes its gradient to its owner as
  if it were the owner's current block.
- **Bytes**: a skipped broadcast moves 0 bytes; the decision table costs a ``psum`` of
  ``P * (P + 3)`` int32 per layer (:func:`decision_bytes`), included in ``bytes_moved``.

**SkipG** (the chapter's bounded-gradient-staleness baseline, after Miao et al., SIGMOD'21):
"skip gradient broadcasts while within the bound". Conventions of :class:`SkipG`: the forward
broadcasts every block (embeddings are never stale); the backward reduction of block ``j``'s
gradient partials to its owner is skipped while the owner's last reduced sum is at most Δ
epochs old (the Δ_E rule of :func:`decide`, with the same 50-epoch warm-up as Sancus by
default), and the owner then adds that cached sum; the unit of skipping is a block's whole
reduction tree (all devices' partials of one block, as one broadcast is the unit in Sancus).
In this synchronous program every block shares one schedule. A skipped reduction moves 0
bytes; the schedule table is a ``psum`` of ``int32[P, 2]`` per layer (:func:`table_bytes`).

**Quantized broadcasts** (``quantize=b`` on :class:`CAGNET`, :class:`Sancus` and
:class:`SkipG`, whose cached gradient is then the decoded sum; the wire
format and the unbiasedness argument in :mod:`jaxgraph.comm.qbroadcast`): an owner encodes
its block once and the encoded bytes travel down the tree; every receiver, and the owner,
decodes the same bytes. Sancus caches what the receivers decoded: ``last_sent`` is the
decoded block, so the cache-consistency invariant (every receiver's copy equals the owner's
``last_sent``, bit for bit) holds at any width, and Δ_H's gap measures the owner's drift from
what the receivers hold, quantization error included. Sancus keeps its first layer exact
(its rule is exactness: data rows are re-sent only when they change). The backward gradient
sums travel along the reversed trees with every hop quantized (``quantize_grad``, default
``quantize``). ``b = 32`` runs the same byte path with fp32 rows and trains bit for bit as
the unquantized method.

Local gradient clipping (Sancus, Sec. 5.2.2: clip a worker's gradient ``δ_i`` when
``‖δ_i‖_2 > th_i = sqrt(P) th``) comes in two variants:

- **parameters** (``Sancus(clip=th)``): the :class:`~jaxgraph.train.Trainer`
  clips each device's gradient with respect to its own copy of the parameters, before the
  sum over devices (inside ``shard_map`` the gradient of replicated parameters arrives
  already summed, so the Trainer differentiates a device-varying copy). This bounds each
  worker's share of the all-reduce of Algorithm 1, line 23.
- **embeddings** (``Sancus(clip=th, clip_at="embeddings")``; Algorithm 1, line 22,
  ``δ_i^(ℓ) ← GRADIENT_CLIP(δ_i^(ℓ))`` before ``BROADCAST(δ_i^(ℓ))``): at every layer after
  the first, the embedding-gradient message this device sends in the backward pass is
  clipped to L2 norm ``sqrt(P) th`` before it travels. The chapter's backward broadcasts a
  worker's gradient block; here the backward runs the reversed broadcast trees, so what a
  device puts on the wire is its gradient with respect to every halo block it read (its
  partials ``Â_ijᵀ G_i`` for all owners ``j != i``, ``[P-1, B, F]``), and that whole message
  is clipped as one vector (:func:`clip_cotangent`). The owner's own diagonal term is never
  clipped, and neither are the parameter gradients.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.blockwidths import (
    BlockQuantize,
    BlockWidthsController,
)
from jaxgraph.comm.broadcast import (
    all_blocks_by_broadcast,
    broadcast_bytes,
    broadcast_forward,
    halo_sources,
    reduce_halo_to_owners,
    skip_broadcast_blocks,
)
from jaxgraph.comm.method import (
    NUMBER,
    Method,
    RunInfo,
    bits_label,
    check_int,
    check_quantize,
    match_spelling,
    number_label,
    parse_bits,
    parse_bits_or_mode,
)
from jaxgraph.comm.qbroadcast import (
    block_bytes,
    block_tree_bytes,
    quantized_all_blocks,
    quantized_blocks,
    quantized_broadcast_bytes,
    quantized_reduce_halo_to_owners,
)
from jaxgraph.comm.quantized import row_range_variance
from jaxgraph.comm.strategy import CommStrategy, Controller
from jaxgraph.configfile import from_dict
from jaxgraph.options import flag
from jaxgraph.partition.halo import HaloPlan
from jaxgraph.partition.shard import GraphShard

# A receiver's tag for a block it does not read: never too old.
NOT_READ = np.iinfo(np.int32).max
_REPORT = 4  # count, sent_version, changed, gap bits; then the P - 1 receiver tags

PolicyKind = Literal["epoch", "adaptive", "gap"]


@dataclasses.dataclass(frozen=True)
class StalenessPolicy:
    """When a Sancus owner broadcasts its block (layers after the first).

    Attributes:
      kind: ``"epoch"`` (Δ_E, Def. 5.2), ``"adaptive"`` (Δ_A, Def. 5.3) or ``"gap"`` (Δ_H,
        Def. 5.4).
      bound: Δ: epochs for ``epoch`` / ``adaptive``, a mean absolute difference for ``gap``;
        ``0`` never reuses a block, ``math.inf`` never re-sends one after the warm-up.
      warmup: epochs ``1..warmup`` broadcast every block.
    """

    kind: PolicyKind
    bound: float
    warmup: int = 50

    def __post_init__(self):
        if self.kind not in ("epoch", "adaptive", "gap"):
            raise ValueError(f"unknown staleness policy {self.kind!r}")
        if not self.bound >= 0:
            raise ValueError(f"the staleness bound must be >= 0, got {self.bound}")
        if self.warmup < 0:
            raise ValueError(f"warm-up epochs must be >= 0, got {self.warmup}")


def decide(
    policy: StalenessPolicy,
    *,
    epoch,
    sent_version,
    tags,
    gap,
) -> jax.Array:
    """Which owners broadcast at ``epoch`` (the same pure function on every device).

    Args:
      policy: the staleness policy.
      epoch: the current epoch, 1-indexed.
      sent_version: per owner, the epoch of its last broadcast (``-1``: never sent).
      tags: ``tags[i, j]`` = receiver ``i``'s version of block ``j`` (:data:`NOT_READ` where
        ``i`` reads nothing of ``j``, and on the diagonal).
      gap: per owner, the variation gap of its block (:func:`variation_gap`).

    Returns:
      ``bool[P]``: owner ``j`` broadcasts. A block never sent is always broadcast, and so is
      every block during the warm-up.

    Shapes:
      ``sent_version: int[P]``, ``tags: int[P, P]``, ``gap: f32[P]`` -> ``bool[P]``.
    """
    sent_version = jnp.asarray(sent_version, jnp.int32)
    epoch = jnp.asarray(epoch, jnp.int32)
    never = sent_version < 0
    warm = epoch <= policy.warmup
    if policy.kind == "epoch":
        flag = (epoch - sent_version).astype(jnp.float32) > policy.bound
    elif policy.kind == "adaptive":
        age = (epoch - jnp.asarray(tags, jnp.int32)).astype(jnp.float32)  # [receiver, block]
        flag = jnp.any(age > policy.bound, axis=0)
    else:
        flag = jnp.asarray(gap, jnp.float32) >= policy.bound
    return never | warm | flag


def variation_gap(h: jax.Array, last_sent: jax.Array, mask: jax.Array) -> jax.Array:
    """``mean |h - last_sent|`` over the real rows (``mask``) and all features.

    Shapes:
      ``h, last_sent: [B, F]``, ``mask: bool[B]`` -> ``f32[]`` (0 for an empty block).
    """
    diff = jnp.abs(h.astype(jnp.float32) - last_sent.astype(jnp.float32))
    total = jnp.sum(jnp.where(mask[:, None], diff, 0.0))
    count = jnp.sum(mask).astype(jnp.float32) * h.shape[-1]
    return total / jnp.maximum(count, 1.0)


def table_bytes(num_parts: int, columns: int) -> int:
    """Bytes one device sends for a ``psum`` of an ``int32[P, columns]`` table: a ring
    all-reduce moves ``2 (P - 1) / P`` of it per device."""
    if num_parts == 1:
        return 0
    return 2 * (num_parts - 1) * columns * 4


def decision_bytes(num_parts: int) -> int:
    """Bytes one device sends for the decision table of one Sancus exchange
    (``int32[P, P + 3]``, :func:`table_bytes`)."""
    return table_bytes(num_parts, num_parts - 1 + _REPORT)


def _check_block_plan(plan: HaloPlan, who: str) -> None:
    b, p = plan.num_local_rows, plan.num_parts
    if tuple(plan.round_rows) != (b,) * (p - 1):
        raise ValueError(
            f"{who} needs the block-row layout (every round sends the whole block); build the "
            "plan with jaxgraph.partition.build_block_halo_plan"
        )


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


def _replace_layer(comm_state, layer, new):
    return tuple(new if k == layer else s for k, s in enumerate(comm_state))


_BLOCK_MODES = ("random", "adaptive")
_GRAD = "(?:g(?P<g>2|4|8|32))?"  # a backward width after the forward one: -q8g4


def _check_block_widths(owner: str, method) -> None:
    """``quantize``, ``quantize_grad``, ``period`` and ``assign`` of a block-row method: a
    fixed width (and its backward width), or widths per owner block (``"random"`` /
    ``"adaptive"``) with their period and program."""
    if isinstance(method.assign, dict):
        object.__setattr__(
            method, "assign", from_dict(AssignConfig, method.assign, f"{owner}.assign")
        )
    check_int(f"{owner}.period", method.period, 0, what=" (0: epochs // 5)")
    defaults = {f.name: f.default for f in dataclasses.fields(method)}
    if method.quantize in _BLOCK_MODES:
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
        if getattr(method, name, None) != defaults.get(name):
            which = "a fixed width" if name == "quantize_grad" else "'random' or 'adaptive'"
            raise ValueError(f"{owner}.{name} applies to quantize={which} only")
    grad = getattr(method, "quantize_grad", None)
    if grad is not None:
        if method.quantize is None:
            raise ValueError(f"{owner}.quantize_grad needs quantize (the forward width)")
        if grad not in (2, 4, 8, 32) or isinstance(grad, bool):
            raise ValueError(f"{owner}.quantize_grad must be none, 2, 4, 8 or 32, got {grad!r}")


def _block_width_options(method, fields: tuple[str, ...]) -> tuple[str, ...]:
    """The fields that take effect under ``method.quantize``."""
    if method.quantize in _BLOCK_MODES:
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


def _block_controller(method, plan, layer_dims, cost, run):
    if method.quantize in _BLOCK_MODES:
        q = _block_quantize(method, run or RunInfo())
        return BlockWidthsController(method, plan, layer_dims, q=q, cost=cost)
    return Controller(method, plan, layer_dims)


def _widths(method) -> tuple[int, int]:
    """``(forward, backward)`` widths of a fixed-width quantized broadcast."""
    q = method.quantize
    return q, q if method.quantize_grad is None else method.quantize_grad


def _quantize_label(method) -> str:
    out = bits_label(method.quantize)
    grad = getattr(method, "quantize_grad", None)
    if grad is not None and grad != method.quantize:
        out += f"g{grad}"
    return out


@dataclasses.dataclass(frozen=True)
class CAGNET(Method, CommStrategy):
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
        g = match_spelling(rf"cagnet(?:-q(?P<q>2|4|8|32|random|adaptive){_GRAD})?", text)
        return None if g is None else cls(parse_bits_or_mode(g["q"]), parse_bits(g["g"]))

    @classmethod
    def taker(cls, field: str) -> str:
        return "cagnet-q<random|adaptive>" if field in ("period", "assign") else cls.key

    def __post_init__(self):
        _check_block_widths("cagnet", self)

    def options(self) -> tuple[str, ...]:
        return _block_width_options(self, super().options())

    def label(self) -> str:
        return "cagnet" + _quantize_label(self)

    @property
    def name(self) -> str:
        return self.label()

    def quantized_layers(self, num_layers: int) -> tuple[int, ...]:
        """The layers whose broadcasts are quantized: all of them."""
        return tuple(range(num_layers)) if self.quantize is not None else ()

    def controller(self, plan, layer_dims, *, cost=None, run=None):
        return _block_controller(self, plan, layer_dims, cost, run)

    def init_state(self, plan, layer_dims, *, epoch=0):
        _check_block_plan(plan, "CAGNET")
        # Widths per block: a state per layer, which the controller fills with the widths.
        return tuple({} for _ in layer_dims) if self.quantize in _BLOCK_MODES else {}

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
        per_block = self.quantize in _BLOCK_MODES
        st = comm_state[layer] if per_block else {}
        bits, grad_bits = (st["widths"].fwd, st["widths"].bwd) if per_block else _widths(self)
        halo, _ = quantized_blocks(
            h_local,
            None,
            None,
            key,
            bits=bits,
            grad_bits=grad_bits,
            axis_name=axis_name,
            num_parts=num_parts,
            probe=probe,
        )
        if per_block:  # what this device sends in every source's tree, at that tree's width
            per_rank, per_source = block_tree_bytes(b, f, num_parts, bits, grad_bits)
            i = jax.lax.axis_index(axis_name)
            rel = (i - jnp.arange(num_parts)) % num_parts  # this device's rank in each tree
            forward = jnp.sum(jnp.asarray(per_rank, jnp.float32)[jnp.arange(num_parts), rel])
            # Every device but the owner sends one hop of each block's reduction.
            per_source = jnp.asarray(per_source, jnp.float32)
            backward = jnp.sum(per_source) - per_source[i]
        else:
            _, forward = quantized_broadcast_bytes(b, f, num_parts, bits)
            _, backward = quantized_broadcast_bytes(b, f, num_parts, grad_bits)
        nbytes = jnp.float32(forward + (0 if layer == 0 else backward))
        if "trace" in st:  # adaptive widths: this block's row variances (always broadcast)
            new = {
                **st,
                "trace": {**st["trace"], "fwd": st["trace"]["fwd"] + row_range_variance(h_local)},
            }
            comm_state = _replace_layer(comm_state, layer, new)
        return halo.reshape(-1, f), comm_state, nbytes

    def probes(self, comm_state, num_layers):
        return _block_trace_probes(comm_state)

    def absorb_probes(self, comm_state, probe_grads):
        return _absorb_block_traces(comm_state, probe_grads)


def _block_trace_probes(comm_state):
    """Adaptive block widths trace the gradient partials each device sends: per layer, zeros
    of the backward trace's shape, or None (nothing to trace anywhere: None)."""
    if not isinstance(comm_state, tuple) or not any("trace" in st for st in comm_state):
        return None
    return tuple(jnp.zeros_like(st["trace"]["bwd"]) if "trace" in st else None for st in comm_state)


def _absorb_block_traces(comm_state, probe_grads):
    if probe_grads is None:
        return comm_state
    out = list(comm_state)
    for layer, grads in enumerate(probe_grads):
        if grads is not None:
            st = out[layer]
            out[layer] = {**st, "trace": {**st["trace"], "bwd": st["trace"]["bwd"] + grads}}
    return tuple(out)


_POLICY_LETTER = {"epoch": "e", "adaptive": "a", "gap": "h"}


@dataclasses.dataclass(frozen=True)
class Sancus(Method, CommStrategy):
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

    ``period`` and ``assign`` apply to ``quantize="random"`` or ``"adaptive"`` only.
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
        ``-eclip`` the embedding-gradient messages."""
        g = match_spelling(
            rf"sancus-(?P<kind>[eah])(?P<bound>{NUMBER})(?:-w(?P<warmup>\d+))?"
            rf"(?:-(?P<at>e?)clip(?P<clip>\d+(?:\.\d+)?))?(?:-q(?P<q>2|4|8|32|random|adaptive){_GRAD})?",
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
        _check_block_widths("sancus", self)

    def options(self) -> tuple[str, ...]:
        return _block_width_options(self, super().options())

    def label(self) -> str:
        text = f"sancus-{_POLICY_LETTER[self.policy]}{number_label(self.bound)}"
        if self.warmup != 50:
            text += f"-w{self.warmup}"
        if self.clip is not None:
            prefix = "e" if self.clip_at == "embeddings" else ""
            text += f"-{prefix}clip{number_label(self.clip)}"
        return text + _quantize_label(self)

    @property
    def name(self) -> str:
        return self.label()

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

    def controller(self, plan, layer_dims, *, cost=None, run=None):
        return _block_controller(self, plan, layer_dims, cost, run)

    def init_state(self, plan, layer_dims, *, epoch=0):
        _check_block_plan(plan, "Sancus")
        p, b = plan.num_parts, plan.num_local_rows
        return tuple(
            {
                "cache": np.zeros((p, p - 1, b, f), np.float32),
                "tags": np.full((p, p - 1), -1, np.int32),
                "last_sent": np.zeros((p, b, f), np.float32),
                "sent_version": np.full(p, -1, np.int32),
                "count": np.full(p, epoch, np.int32),
            }
            for f in layer_dims
        )

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        st = comm_state[layer]
        p = num_parts
        b, f = h_local.shape
        count = st["count"] + 1
        if p == 1:
            new = {**st, "count": count}
            halo = jnp.zeros((0, f), h_local.dtype)
            return halo, _replace_layer(comm_state, layer, new), jnp.float32(0)

        i = jax.lax.axis_index(axis_name)
        h = jax.lax.stop_gradient(h_local)  # h: f32[B, F]
        last = st["last_sent"]  # f32[B, F]
        gap = variation_gap(h, last, shard.local_mask)
        tags = jnp.where(_reads_blocks(shard, p), st["tags"], NOT_READ)  # int32[P-1]
        report = jnp.concatenate(
            [
                jnp.stack(
                    [
                        count,
                        st["sent_version"],
                        jnp.any(h != last).astype(jnp.int32),
                        jax.lax.bitcast_convert_type(gap, jnp.int32),
                    ]
                ),
                tags,
            ]
        )  # int32[4 + P - 1]
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
            tag_matrix = jnp.where(diag, NOT_READ, table[:, _REPORT:][rows, cols])  # [i, j]
            active = decide(
                self.staleness,
                epoch=epoch,
                sent_version=sent_version,
                tags=tag_matrix,
                gap=jax.lax.bitcast_convert_type(table[:, 3], jnp.float32),
            )

        quantized = self.quantize is not None and layer > 0
        if quantized:
            if key is None:
                raise ValueError("a quantized broadcast needs a PRNG key")
            if "widths" in st:  # per owner block (random or adaptive)
                bits, grad_bits = st["widths"].fwd, st["widths"].bwd
            else:
                bits, grad_bits = _widths(self)
            halo, decoded = quantized_blocks(
                h_local,
                st["cache"],
                active,
                key,
                bits=bits,
                grad_bits=grad_bits,
                axis_name=axis_name,
                num_parts=p,
                probe=probe,
            )  # [P-1, B, F], [B, F]: what every receiver holds of this device's block
            per_rank, per_source = block_tree_bytes(b, f, p, bits, grad_bits)
            # Every device but the owner sends one hop of each block's reduction.
            backward = (
                jnp.sum(jnp.asarray(per_source, jnp.float32))
                - jnp.asarray(per_source, jnp.float32)[i]
            )
            decoded = jax.lax.stop_gradient(decoded)
        else:
            halo = skip_broadcast_blocks(
                h_local, st["cache"], active, axis_name=axis_name, num_parts=p
            )  # [P-1, B, F]
            per_rank, total = broadcast_bytes((b, f), p, h_local.dtype.itemsize)
            per_rank = np.broadcast_to(per_rank, (p, p))  # the same for every source
            backward = jnp.float32(0 if layer == 0 else total)
            decoded = h
        fresh = active[halo_sources(i, p)]  # [P-1]
        own = active[i]
        new = {
            **st,
            "cache": jax.lax.stop_gradient(halo),
            "tags": jnp.where(fresh, epoch, st["tags"]),
            "last_sent": jnp.where(own, decoded, last),
            "sent_version": jnp.where(own, epoch, st["sent_version"]),
            "count": count,
        }
        if "trace" in st:  # adaptive widths: this block's row variances when it travels
            traced = jnp.where(own, row_range_variance(h_local), 0.0)
            new["trace"] = {**st["trace"], "fwd": st["trace"]["fwd"] + traced}

        rel = (i - jnp.arange(p)) % p  # this device's relative rank in each source's tree
        sends = jnp.asarray(per_rank, jnp.float32)[jnp.arange(p), rel]  # [P] by source
        sent = jnp.sum(jnp.where(active, sends, 0.0))
        nbytes = sent + backward + jnp.float32(decision_bytes(p))
        if layer > 0 and self.embedding_grad_clip is not None:
            halo = clip_cotangent(halo, math.sqrt(p) * self.embedding_grad_clip)
        return halo.reshape(-1, f), _replace_layer(comm_state, layer, new), nbytes

    def probes(self, comm_state, num_layers):
        return _block_trace_probes(comm_state)

    def absorb_probes(self, comm_state, probe_grads):
        return _absorb_block_traces(comm_state, probe_grads)


def _gradient_skip_exchange(
    h_local, probe, cached, active, key=None, *, axis_name, num_parts, bits=None, grad_bits=None
):
    """CAGNET's forward with SkipG's backward: each block's gradient reduce runs only when
    its owner is ``active``; otherwise the owner reuses ``cached``, its last reduced sum.

    Forward: every block is broadcast (halo order), encoded at ``bits`` when given
    (:mod:`jaxgraph.comm.qbroadcast`). Backward: for each source ``j`` a ``lax.cond`` on
    ``active[j]`` (identical on every device) runs the reduction tree of block ``j`` (every hop
    quantized at ``grad_bits`` when given) or nothing; this device's cotangent is the fresh sum
    when its own block is active and ``cached`` otherwise, and ``probe`` receives the same value
    (the new cache).

    Shapes:
      ``h_local, probe, cached: [B, F]``, ``active: bool[P]`` -> ``[P-1, B, F]``.
    """
    kw = dict(axis_name=axis_name, num_parts=num_parts)

    @jax.custom_vjp
    def exchange(h_local, probe, cached, active, key):
        del probe, cached, active
        if bits is not None:
            return quantized_all_blocks(h_local, bits, key, **kw)
        i = jax.lax.axis_index(axis_name)
        blocks = jnp.stack([broadcast_forward(h_local, j, **kw) for j in range(num_parts)])
        return jnp.take(blocks, halo_sources(i, num_parts), axis=0)  # [P-1, B, F]

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


@dataclasses.dataclass(frozen=True)
class SkipG(Method, CommStrategy):
    """Bounded gradient staleness on the block-row layout (the SkipG baseline).

    Every block is broadcast in the forward pass, as in CAGNET. In the backward pass the
    reduction of block ``j``'s gradient partials to its owner (``sum_i Â_ijᵀ G_i``, the
    halo part of ``dH_j``) runs at epoch ``e`` iff ``e - Ver(j) > Δ`` (or during the warm-up,
    or if it never ran), ``Ver(j)`` the epoch of its last reduction; otherwise the owner adds
    the sum it received then, at most Δ epochs old, and the reduction moves 0 bytes. The rule
    is Sancus's Δ_E (:func:`decide`) applied to gradients instead of embeddings; Δ = 0 is
    CAGNET. The owner's own diagonal term is always fresh.

    ``comm_state`` per layer and device: ``grad: f32[B, F]`` the last reduced sum of this
    device's block, ``sent_version: int32[]`` its epoch (``-1`` = never), ``count: int32[]``
    completed epochs. Every device adds ``(count, sent_version)`` to one ``psum``'d table,
    so the predicate of every ``lax.cond`` is device-invariant; it costs :func:`table_bytes`
    per layer after the first. Layer 0 (data input) has no backward pass; its state is the
    counter only.

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
            rf"skipg(?:-(?P<bound>inf|\d+))?(?:-w(?P<warmup>\d+))?(?:-q(?P<q>2|4|8|32){_GRAD})?",
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
        if self.quantize_grad is not None:
            if self.quantize is None:
                raise ValueError("skipg.quantize_grad needs quantize (the forward width)")
            if self.quantize_grad not in (2, 4, 8, 32) or isinstance(self.quantize_grad, bool):
                raise ValueError(
                    f"skipg.quantize_grad must be none, 2, 4, 8 or 32, got {self.quantize_grad!r}"
                )

    def options(self) -> tuple[str, ...]:
        fields = super().options()
        return fields if self.quantize is not None else fields[:-1]

    def label(self) -> str:
        text = "skipg"
        if self.bound != 1:
            text += f"-{number_label(self.bound)}"
        if self.warmup != 50:
            text += f"-w{self.warmup}"
        return text + _quantize_label(self)

    @property
    def name(self) -> str:
        return self.label()

    def init_state(self, plan, layer_dims, *, epoch=0):
        _check_block_plan(plan, "SkipG")
        p, b = plan.num_parts, plan.num_local_rows
        count = {"count": np.full(p, epoch, np.int32)}
        # Layer 0 (data input) has no backward pass: only its counter.
        return (count,) + tuple(
            {
                "grad": np.zeros((p, b, f), np.float32),
                "sent_version": np.full(p, -1, np.int32),
                **count,
            }
            for f in layer_dims[1:]
        )

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        p = num_parts
        b, f = h_local.shape
        st = comm_state[layer]
        count = st["count"] + 1
        quantized = self.quantize is not None and p > 1
        if quantized:
            if key is None:
                raise ValueError("a quantized broadcast needs a PRNG key")
            bits, grad_bits = _widths(self)
            _, total = quantized_broadcast_bytes(b, f, p, bits)
            block = block_bytes(b, f, grad_bits)
        else:
            bits = grad_bits = None
            _, total = broadcast_bytes((b, f), p, h_local.dtype.itemsize)
            block = b * f * h_local.dtype.itemsize
        if p == 1 or probe is None:  # layer 0: CAGNET's forward, no backward
            if quantized:
                kw = dict(axis_name=axis_name, num_parts=p)
                halo = quantized_all_blocks(h_local, bits, key, **kw).reshape(-1, f)
            else:
                halo = all_blocks_by_broadcast(h_local, axis_name=axis_name, num_parts=p)
            new = {**st, "count": count}
            return halo, _replace_layer(comm_state, layer, new), jnp.float32(total)
        i = jax.lax.axis_index(axis_name)
        report = jnp.stack([count, st["sent_version"]])  # int32[2]
        table = jax.lax.psum(jnp.zeros((p, 2), jnp.int32).at[i].set(report), axis_name)
        epoch = table[0, 0]
        policy = StalenessPolicy("epoch", self.bound, self.warmup)
        active = decide(policy, epoch=epoch, sent_version=table[:, 1], tags=None, gap=None)
        halo = _gradient_skip_exchange(
            h_local,
            probe,
            st["grad"],
            active,
            key,
            axis_name=axis_name,
            num_parts=p,
            bits=bits,
            grad_bits=grad_bits,
        )
        new = {
            **st,
            "sent_version": jnp.where(active[i], epoch, st["sent_version"]),
            "count": count,
        }
        # Backward: every non-source device sends one block per executed reduction tree.
        backward = jnp.sum(jnp.where(active & (jnp.arange(p) != i), block, 0)).astype(jnp.float32)
        nbytes = jnp.float32(total + table_bytes(p, 2)) + backward
        return halo.reshape(-1, f), _replace_layer(comm_state, layer, new), nbytes

    def probes(self, comm_state, num_layers):
        return tuple(
            None if layer == 0 else jnp.zeros_like(comm_state[layer]["grad"])
            for layer in range(num_layers)
        )

    def absorb_probes(self, comm_state, probe_grads):
        out = comm_state
        for layer, grad in enumerate(probe_grads):
            if grad is not None:
                out = _replace_layer(out, layer, {**out[layer], "grad": grad})
        return out


__all__ = [
    "CAGNET",
    "NOT_READ",
    "Sancus",
    "SkipG",
    "StalenessPolicy",
    "clip_cotangent",
    "decide",
    "decision_bytes",
    "table_bytes",
    "variation_gap",
]
