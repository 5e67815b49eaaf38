"""One-to-all broadcast of a row block, and the all-blocks exchange of the 1D block-row layout.

In the 1D block-row layout (CAGNET, Tripathy et al., SC'20; Sancus, Peng et al., VLDB'22)
device ``i`` owns row block ``H_i`` (``B`` padded rows) and computes ``sum_j Â_ij H_j``, so
every block must reach every device: ``P`` broadcasts, one per source.

**Broadcast.** :func:`broadcast` copies the source's block to every device of the axis.
``jax.lax.pbroadcast`` (XLA's CollectiveBroadcast) lowers on GPU only in this jax (on CPU it
raises ``NotImplementedError: MLIR translation rule for primitive 'pbroadcast' not found``),
so :func:`broadcast` picks the native op on GPUs (CUDA, ROCm) and a binomial tree of
``ppermute`` rounds elsewhere, through ``jax.lax.platform_dependent`` (the untaken platform's
branch is not lowered). The tree runs ``ceil(log2 P)`` rounds; in round ``k = 1, 2, 4, ...``
every device of relative rank ``a < k`` (rank relative to the source) sends the block to rank
``a + k``. Each non-source device receives the block exactly once: ``(P - 1) * |block|``
bytes per broadcast over the mesh.

**Backward.** The transpose of a broadcast is a reduction to the source (``dx_s = sum_i
dy_i``). :func:`broadcast` has a ``custom_vjp`` that sends the cotangents back along the same
tree with the edges reversed, adding at every hop (:func:`reduce_to_source`): each non-source
device sends one partial sum, again ``(P - 1) * |block|`` bytes. Without it, autodiff of the
native ``pbroadcast`` transposes to a ``psum`` of the whole block (an all-reduce, about
``2 (P - 1) * |block|`` bytes, that leaves the sum on every device although only the source
needs it; in this jax that transpose rule even fails to trace for a non-scalar block,
``TypeError: full must be called with scalar fill_value``). The alternative formulation of
the exchange, ``all_gather`` of the blocks, has a ``psum_scatter`` of ``[P * B, F]`` partials
as its transpose: a ring reduce-scatter moves ``(P - 1) * |block|`` per device, the same
volume as the ``P`` reduction trees here, but it cannot be gated per source (as Sancus's
skipped broadcasts need).

CAGNET's own backward broadcasts the output gradient ``G_i`` (width ``F_out``) and multiplies by
the transposed blocks ``Â_jiᵀ`` held locally, which needs a symmetric ``Â`` (its code uses the
same blocks in both directions). Here the exchange sits before an aggregation it does not own
(:class:`jaxgraph.models.Propagator`), so its backward receives the partial products
``Â_ijᵀ G_i`` (width ``F_in``) and reduces them to their owner: exact for any ``Â`` (mean
aggregation, directed graphs), with the same per-source tree volume.

**Halo order.** On device ``i`` the other blocks are concatenated by ring distance: halo slot
``r - 1`` (``r = 1..P-1``) holds block ``(i - r) mod P``, the order in which a ring exchange
(:func:`jaxgraph.comm.ring_exchange` with ``send_idx[r-1] = arange(B)``) delivers them, and
the halo layout of :func:`jaxgraph.partition.build_block_halo_plan`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

# ---------------------------------------------------------------------- static schedules


def tree_rounds(num_parts: int) -> tuple[int, ...]:
    """Round strides ``k = 1, 2, 4, ... < P`` of the binomial broadcast tree."""
    out, k = [], 1
    while k < num_parts:
        out.append(k)
        k *= 2
    return tuple(out)


def tree_perm(num_parts: int, source: int, k: int) -> list[tuple[int, int]]:
    """``(sender, receiver)`` pairs of round ``k`` of the tree rooted at ``source``:
    relative rank ``a < k`` sends to ``a + k`` when ``a + k < P``."""
    return [
        ((source + a) % num_parts, (source + a + k) % num_parts)
        for a in range(k)
        if a + k < num_parts
    ]


def tree_sends(num_parts: int) -> np.ndarray:
    """Blocks each relative rank sends in one forward broadcast tree.

    Shapes:
      ``-> int32[P]`` indexed by relative rank ``a = (device - source) mod P``; the entries
      sum to ``P - 1``.
    """
    sends = np.zeros(num_parts, np.int32)
    for k in tree_rounds(num_parts):
        for a in range(k):
            if a + k < num_parts:
                sends[a] += 1
    return sends


def halo_sources(device: jax.Array | int, num_parts: int) -> jax.Array:
    """Source block of each halo slot on ``device``: ``(device - r) mod P`` for
    ``r = 1..P-1``. ``-> int32[P-1]``."""
    return (device - jnp.arange(1, num_parts, dtype=jnp.int32)) % num_parts


# ---------------------------------------------------------------------- broadcast


def _relative_rank(source: int, axis_name: str, num_parts: int) -> jax.Array:
    return (jax.lax.axis_index(axis_name) - source) % num_parts


def tree_broadcast(x: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """Binomial-tree broadcast from ``ppermute`` rounds (no custom gradient).

    Shapes:
      ``x: [B, F]`` on every device (only the source's is read) -> ``[B, F]`` = the source's.
    """
    rank = _relative_rank(source, axis_name, num_parts)
    buf = x  # non-source devices overwrite it before they ever send it
    for k in tree_rounds(num_parts):
        recv = jax.lax.ppermute(buf, axis_name, tree_perm(num_parts, source, k))
        buf = jnp.where((rank >= k) & (rank < 2 * k), recv, buf)
    return buf


def _native_broadcast(x, source, *, axis_name, num_parts):
    del num_parts
    # A tuple: this jax's pbroadcast checks each character of a string axis name.
    return jax.lax.pbroadcast(x, (axis_name,), source)


def broadcast_forward(x: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """The forward data movement of :func:`broadcast`: ``pbroadcast`` on GPU, the
    ``ppermute`` tree elsewhere. ``[B, F] -> [B, F]``."""
    if num_parts == 1:
        return x
    kw = dict(axis_name=axis_name, num_parts=num_parts)
    native = functools.partial(_native_broadcast, source=source, **kw)
    return jax.lax.platform_dependent(
        x, cuda=native, rocm=native, default=lambda x: tree_broadcast(x, source, **kw)
    )


def reduce_to_source(g: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """Sum of ``g`` over the axis, delivered to ``source`` along the reversed broadcast tree.

    Each non-source device sends one partial sum (``(P - 1) * |g|`` bytes over the mesh).

    Shapes:
      ``g: [B, F]`` -> ``[B, F]``: ``sum_i g_i`` on the source, zeros elsewhere.
    """
    if num_parts == 1:
        return g
    rank = _relative_rank(source, axis_name, num_parts)
    acc = g
    for k in reversed(tree_rounds(num_parts)):
        back = [(dst, src) for src, dst in tree_perm(num_parts, source, k)]
        recv = jax.lax.ppermute(acc, axis_name, back)
        acc = jnp.where((rank < k) & (rank + k < num_parts), acc + recv, acc)
    return jnp.where(rank == 0, acc, jnp.zeros_like(acc))


def broadcast(x: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """Every device receives the ``source`` device's ``x``; the gradient is reduced back to
    the source along the same tree (see the module docstring).

    Must be called inside ``shard_map`` over ``axis_name`` (of size ``num_parts``).

    Args:
      x: this device's block (only the source's is read).
      source: the static index of the source device along ``axis_name``.
      axis_name: the mesh axis.
      num_parts: the size of ``axis_name``.

    Returns:
      The source's block, on every device.

    Shapes:
      ``x: [B, F] -> [B, F]``.
    """
    return _broadcast(x, int(source), axis_name, int(num_parts))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _broadcast(x, source, axis_name, num_parts):
    return broadcast_forward(x, source, axis_name=axis_name, num_parts=num_parts)


def _broadcast_fwd(x, source, axis_name, num_parts):
    return _broadcast(x, source, axis_name, num_parts), None


def _broadcast_bwd(source, axis_name, num_parts, _, g):
    return (reduce_to_source(g, source, axis_name=axis_name, num_parts=num_parts),)


_broadcast.defvjp(_broadcast_fwd, _broadcast_bwd)


def broadcast_bytes(
    shape: tuple[int, ...], num_parts: int, itemsize: int = 4
) -> tuple[np.ndarray, int]:
    """Bytes one broadcast of a ``shape`` block moves: ``(per_device, total)``.

    ``per_device[a]`` = what the device of relative rank ``a`` sends (``int64[P]``, NumPy);
    ``total = (P - 1) * prod(shape) * itemsize`` (the same for the reversed tree of the
    backward pass, where every non-source device sends exactly once).
    """
    block = int(np.prod(shape)) * itemsize
    return tree_sends(num_parts).astype(np.int64) * block, (num_parts - 1) * block


# ---------------------------------------------------------------------- all blocks


def all_blocks_by_broadcast(h_local: jax.Array, *, axis_name: str, num_parts: int) -> jax.Array:
    """The other ``P - 1`` blocks in halo order, by ``P`` broadcasts (CAGNET 1D).

    Forward and backward each move ``(P - 1) * |block|`` bytes per device (every device is
    relative rank ``a`` of exactly one tree for each ``a``).

    Shapes:
      ``h_local: [B, F] -> [(P - 1) * B, F]``; slot ``r - 1`` holds block ``(i - r) mod P``.
    """
    b, f = h_local.shape
    if num_parts == 1:
        return jnp.zeros((0, f), h_local.dtype)
    # blocks: [P, B, F] in source order (this device's own entry is its own block)
    blocks = jnp.stack(
        [broadcast(h_local, j, axis_name=axis_name, num_parts=num_parts) for j in range(num_parts)]
    )
    i = jax.lax.axis_index(axis_name)
    return jnp.take(blocks, halo_sources(i, num_parts), axis=0).reshape(-1, f)


# ---------------------------------------------------------------------- skip-broadcast

Send = Callable[[jax.Array, int], jax.Array]


def skip_broadcast_blocks(
    h_local: jax.Array,
    cache: jax.Array,
    active: jax.Array,
    *,
    axis_name: str,
    num_parts: int,
    send: Send | None = None,
) -> jax.Array:
    """Sancus's Skip-Broadcast: the other blocks, fresh from active sources, cached otherwise.

    For each source ``j`` a ``lax.cond`` on ``active[j]`` either runs the broadcast of block
    ``j`` or reads this device's cached copy; a skipped broadcast executes no collective.
    ``active`` must be identical on every device (derive it from a ``psum``, so that it is
    device-invariant in shard_map's types): a collective inside a branch that only some
    devices take never completes. The result is a new array; it never aliases ``cache``.

    Backward: the gradient of every halo slot goes back to the block's owner along the
    reversed tree, whether the forward value was fresh or cached (a cached block is treated
    as a stand-in for the owner's current block, as in Sancus, whose backward pass always
    exchanges gradients). The cache gets no gradient.

    Args:
      h_local: this device's block.
      cache: this device's cached copies of the other blocks, in halo order.
      active: per source device, whether it broadcasts.
      axis_name, num_parts: the mesh axis and its size.
      send: the forward broadcast ``(x, source) -> block`` (default
        :func:`broadcast_forward`); e.g. a compressed broadcast, or an instrumented one.

    Returns:
      The halo blocks in halo order.

    Shapes:
      ``h_local: [B, F]``, ``cache: [P-1, B, F]``, ``active: bool[P]`` -> ``[P-1, B, F]``.
    """
    if send is None:
        send = functools.partial(broadcast_forward, axis_name=axis_name, num_parts=num_parts)
    return _skip_broadcast(h_local, cache, active, axis_name, num_parts, send)


def skip_forward(h_local, cache, active, axis_name, num_parts, send):
    """The forward of :func:`skip_broadcast_blocks`, with no gradient rule: per source ``j``,
    ``send(h_local, j)`` where ``active[j]`` and this device's cached copy otherwise
    (``active=None``: every source sends). ``-> [P-1, B, F]`` in halo order."""
    i = jax.lax.axis_index(axis_name)
    if active is None:
        blocks = jnp.stack([send(h_local, j) for j in range(num_parts)])
        return jnp.take(blocks, halo_sources(i, num_parts), axis=0)
    blocks = []
    for j in range(num_parts):
        # Halo slot of block j here; on the owner (slot -1) the stale branch's value is unused.
        slot = jnp.maximum((i - j) % num_parts - 1, 0)
        blocks.append(
            jax.lax.cond(
                active[j],
                lambda h, c, j=j: send(h, j),
                lambda h, c, slot=slot: jax.lax.dynamic_index_in_dim(c, slot, keepdims=False),
                h_local,
                cache,
            )
        )
    blocks = jnp.stack(blocks)  # [P, B, F] in source order
    return jnp.take(blocks, halo_sources(i, num_parts), axis=0)  # [P-1, B, F]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _skip_broadcast(h_local, cache, active, axis_name, num_parts, send):
    return skip_forward(h_local, cache, active, axis_name, num_parts, send)


def _skip_fwd(h_local, cache, active, axis_name, num_parts, send):
    return skip_forward(h_local, cache, active, axis_name, num_parts, send), None


def reduce_halo_to_owners(
    g_halo: jax.Array,
    *,
    axis_name: str,
    num_parts: int,
    active: jax.Array | None = None,
    reduce: Callable[[jax.Array, int], jax.Array] | None = None,
) -> jax.Array:
    """Each halo slot's gradient summed over devices and delivered to the block's owner, one
    reversed tree per source (:func:`reduce_to_source`, or ``reduce(g, source)``, e.g. a
    quantized tree).

    ``active`` (``bool[P]``, identical on every device) gates the trees: a ``lax.cond`` runs
    the reduction of block ``j`` only where ``active[j]``, and skips its collectives
    otherwise; ``None`` runs all of them.

    Shapes:
      ``g_halo: [P-1, B, F]`` (halo order) -> ``[B, F]``: on device ``i``, the sum over the
      other devices of their slot for block ``i`` (zeros if its tree was skipped).
    """
    i = jax.lax.axis_index(axis_name)
    b, f = g_halo.shape[1:]
    if reduce is None:
        reduce = functools.partial(reduce_to_source, axis_name=axis_name, num_parts=num_parts)
    # Source order: slot of block j is (i - j) mod P - 1; the owner contributes zeros.
    padded = jnp.concatenate([jnp.zeros((1, b, f), g_halo.dtype), g_halo])  # [P, B, F]
    dh = jnp.zeros((b, f), g_halo.dtype)
    for j in range(num_parts):
        g_j = jax.lax.dynamic_index_in_dim(padded, (i - j) % num_parts, keepdims=False)
        if active is None:
            dh = dh + reduce(g_j, j)
        else:
            dh = dh + jax.lax.cond(
                active[j], functools.partial(reduce, source=j), jnp.zeros_like, g_j
            )
    return dh


def _skip_bwd(axis_name, num_parts, send, _, g_halo):
    del send
    return reduce_halo_to_owners(g_halo, axis_name=axis_name, num_parts=num_parts), None, None


_skip_broadcast.defvjp(_skip_fwd, _skip_bwd)


__all__ = [
    "all_blocks_by_broadcast",
    "broadcast",
    "broadcast_bytes",
    "broadcast_forward",
    "halo_sources",
    "reduce_halo_to_owners",
    "reduce_to_source",
    "skip_broadcast_blocks",
    "skip_forward",
    "tree_broadcast",
    "tree_perm",
    "tree_rounds",
    "tree_sends",
]
