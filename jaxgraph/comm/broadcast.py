"""One-to-all broadcast of a row block, and the all-blocks exchange of the 1D block-row layout.

In the 1D block-row layout (CAGNET, Tripathy et al., SC'20; Sancus, Peng et al., VLDB'22)
device ``i`` owns row block ``H_i`` and computes ``sum_j Â_ij H_j``: ``P`` broadcasts, one per
source. ``jax.lax.pbroadcast`` lowers on GPU only in this jax, so :func:`broadcast` takes it on
CUDA/ROCm and elsewhere a binomial tree of ``ceil(log2 P)`` ``ppermute`` rounds (round ``k = 1,
2, 4, ...``: relative rank ``a < k`` sends to ``a + k``), ``(P - 1) * |block|`` bytes either way.

**Backward.** A ``custom_vjp`` reduces the cotangents to the source along the reversed tree
(:func:`reduce_to_source`, the same volume), where autodiff of the native op would give an
all-reduce of twice the volume (and fails to trace here); unlike an ``all_gather``, it can be
gated per source (Sancus). The exchange's backward receives the partials ``Â_ijᵀ G_i`` and
reduces them to their owner: exact for any ``Â`` (CAGNET's own backward needs a symmetric one).

**Halo order.** On device ``i`` halo slot ``r - 1`` (``r = 1..P-1``) holds block
``(i - r) mod P``, as :func:`jaxgraph.comm.ring_exchange` delivers them and
:func:`jaxgraph.partition.build_block_halo_plan` lays them out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


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
    """Blocks each relative rank ``a = (device - source) mod P`` sends in one broadcast tree:
    ``int32[P]``, summing to ``P - 1``."""
    sends = np.zeros(num_parts, np.int32)
    for k in tree_rounds(num_parts):
        sends[: min(k, num_parts - k)] += 1  # a < k with a + k < P
    return sends


def halo_sources(device: jax.Array | int, num_parts: int) -> jax.Array:
    """Source block of each halo slot on ``device``: ``(device - r) mod P`` for
    ``r = 1..P-1``. ``-> int32[P-1]``."""
    return (device - jnp.arange(1, num_parts, dtype=jnp.int32)) % num_parts


def _relative_rank(source: int, axis_name: str, num_parts: int) -> jax.Array:
    return (jax.lax.axis_index(axis_name) - source) % num_parts


def tree_broadcast(x: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """Binomial-tree broadcast from ``ppermute`` rounds (no custom gradient): ``x: [B, F]``
    (only the source's is read) -> the source's."""
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


def _tree_reduce(g, source: int, axis_name: str, num_parts: int, hop) -> jax.Array:
    """The reduction of :func:`reduce_to_source`, every hop's partial sum moved by
    ``hop(acc, k, perm)`` (a ``ppermute`` along ``perm``, maybe encoded) in round ``k``."""
    if num_parts == 1:
        return g
    rank = _relative_rank(source, axis_name, num_parts)
    acc = g
    for k in reversed(tree_rounds(num_parts)):
        back = [(dst, src) for src, dst in tree_perm(num_parts, source, k)]
        recv = hop(acc, k, back)
        acc = jnp.where((rank < k) & (rank + k < num_parts), acc + recv, acc)
    return jnp.where(rank == 0, acc, jnp.zeros_like(acc))


def reduce_to_source(g: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """Sum of ``g: [B, F]`` over the axis, delivered to ``source`` along the reversed broadcast
    tree (each non-source device sends one partial sum); zeros elsewhere."""
    return _tree_reduce(
        g, source, axis_name, num_parts, lambda acc, k, perm: jax.lax.ppermute(acc, axis_name, perm)
    )


def broadcast(x: jax.Array, source: int, *, axis_name: str, num_parts: int) -> jax.Array:
    """Every device receives the ``source`` device's ``x``; the gradient is reduced back to
    the source along the same tree. Inside ``shard_map`` over ``axis_name`` (of size
    ``num_parts``); ``source`` is static.

    Shapes:
      ``x: [B, F]`` (only the source's is read) -> ``[B, F]``, the source's block.
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
    """Bytes one broadcast of a ``shape`` block moves: ``(per_device, total)``, ``per_device[a]``
    what relative rank ``a`` sends (``int64[P]``) and ``total = (P - 1) * prod(shape) *
    itemsize`` (also the reversed tree's, in the backward pass)."""
    block = int(np.prod(shape)) * itemsize
    return tree_sends(num_parts).astype(np.int64) * block, (num_parts - 1) * block


def all_blocks_by_broadcast(h_local: jax.Array, *, axis_name: str, num_parts: int) -> jax.Array:
    """The other ``P - 1`` blocks in halo order, by ``P`` broadcasts (CAGNET 1D); forward and
    backward each move ``(P - 1) * |block|`` bytes per device.

    Shapes:
      ``h_local: [B, F] -> [(P - 1) * B, F]``; slot ``r - 1`` holds block ``(i - r) mod P``.
    """
    f = h_local.shape[1]
    if num_parts == 1:
        return jnp.zeros((0, f), h_local.dtype)
    send = functools.partial(broadcast, axis_name=axis_name, num_parts=num_parts)
    return skip_forward(h_local, None, None, axis_name, num_parts, send).reshape(-1, f)


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

    For each source ``j`` a ``lax.cond`` on ``active[j]`` runs the broadcast of block ``j`` or
    reads the cached copy (no collective). ``active`` must be identical on every device (derive
    it from a ``psum``): a collective in a branch only some devices take never completes. The
    result never aliases ``cache``. Backward: every halo slot's gradient goes back to the
    block's owner, whether fresh or cached (as in Sancus); the cache gets no gradient.

    ``send``: the forward broadcast ``(x, source) -> block`` (default :func:`broadcast_forward`).

    Shapes:
      ``h_local: [B, F]``, ``cache: [P-1, B, F]`` (halo order), ``active: bool[P]`` (per
      source) -> ``[P-1, B, F]`` in halo order.
    """
    if send is None:
        send = functools.partial(broadcast_forward, axis_name=axis_name, num_parts=num_parts)
    return _skip_broadcast(h_local, cache, active, axis_name, num_parts, send)


def skip_forward(h_local, cache, active, axis_name, num_parts, send):
    """The forward of :func:`skip_broadcast_blocks`, with no gradient rule: per source ``j``,
    ``send(h_local, j)`` where ``active[j]`` and this device's cached copy otherwise
    (``active=None``: every source sends). ``-> [P-1, B, F]`` in halo order."""
    i = jax.lax.axis_index(axis_name)
    blocks = []
    for j in range(num_parts):
        if active is None:
            blocks.append(send(h_local, j))
            continue
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
    """Each halo slot's gradient ``g_halo: [P-1, B, F]`` summed over devices and delivered to
    the block's owner, ``[B, F]`` (zeros if its tree was skipped): one reversed tree per source
    (:func:`reduce_to_source`, or ``reduce(g, source)``), gated by ``active`` (``bool[P]``,
    identical on every device; ``None``: all)."""
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
