"""Quantized block broadcasts for the 1D block-row layout (CAGNET, Sancus).

The trees of :mod:`jaxgraph.comm.broadcast` carry blocks encoded as the halo exchange's wire
format: packed ``b``-bit codes, then each row's fp32 ``(scale, lo)`` (:func:`encode_block`;
``b = 32`` sends the fp32 rows). **Forward:** the owner encodes its block once, so every
receiver (and the owner) holds the same decoded block. **Backward:** every hop of the reversed
tree sends its running partial sum encoded at the gradient width (fresh noise per device, source
and round): unbiased, the hops' variances summed; the gradient through the forward quantization
is the identity.

**Widths per owner.** ``bits`` (and ``grad_bits``) is one width or a tuple of ``P``: block ``j``
travels at ``bits[j]`` (:mod:`jaxgraph.comm.blockwidths`); every device encodes its block once
per distinct width (the program is the same everywhere) and sends the owner's encoding.
**Traces:** given a probe (``f32[P-1]``), the backward pass returns as its cotangent, per halo
slot, the summed row-range variance ``(F / 6) (max - min)^2`` of this device's partial.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.broadcast import (
    _tree_reduce,
    broadcast_bytes,
    broadcast_forward,
    reduce_halo_to_owners,
    skip_forward,
    tree_sends,
)
from jaxgraph.comm.qring import row_range_variance
from jaxgraph.partition.buckets import wire_bytes
from pallas_kernels.quantize import dequantize, packed_rows, quantize

BROADCAST_WIDTHS = (2, 4, 8, 32)


def check_bits(bits: int, what: str = "bits") -> int:
    if bits not in BROADCAST_WIDTHS:
        raise ValueError(f"{what} must be 2, 4, 8 or 32, got {bits!r}")
    return int(bits)


def per_source(bits, num_parts: int) -> tuple[int, ...]:
    """``bits`` as one width per source block: an int for every block, or a tuple of ``P``."""
    if isinstance(bits, int | np.integer):
        return (int(bits),) * num_parts
    widths = tuple(int(b) for b in bits)
    if len(widths) != num_parts:
        raise ValueError(f"{len(widths)} block widths for {num_parts} blocks")
    return widths


def block_bytes(rows: int, dim: int, bits: int) -> int:
    """Bytes of one encoded ``[rows, dim]`` block at ``bits`` (codes and row parameters)."""
    return wire_bytes(rows, dim, bits)


def _bytes_of(x: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint8).reshape(-1)


def encode_block(x: jax.Array, bits: int, key: jax.Array) -> jax.Array:
    """``x: f32[B, F]`` on the wire, ``uint8[block_bytes(B, F, bits)]``: the packed codes of
    :func:`pallas_kernels.quantize.quantize` (noise from ``key``) and each row's fp32 ``scale``
    and ``lo``; at 32 bits the fp32 rows' bytes."""
    if bits == 32:
        return _bytes_of(x)
    packed, scale, lo = quantize(x.astype(jnp.float32), bits, key)
    return jnp.concatenate([packed.reshape(-1), _bytes_of(jnp.stack([scale, lo], axis=1))])


def decode_block(buf: jax.Array, bits: int, rows: int, dim: int) -> jax.Array:
    """The rows :func:`encode_block` encoded: ``uint8[L] -> f32[rows, dim]``."""
    if bits == 32:
        return jax.lax.bitcast_convert_type(buf.reshape(rows, dim, 4), jnp.float32)
    code_bytes = packed_rows(rows, bits) * dim
    codes = buf[:code_bytes].reshape(-1, dim)
    params = jax.lax.bitcast_convert_type(buf[code_bytes:].reshape(rows, 2, 4), jnp.float32)
    return dequantize(codes, params[:, 0], params[:, 1], bits, rows)


def quantized_reduce_to_source(
    g: jax.Array, source: int, bits: int, key: jax.Array, *, axis_name: str, num_parts: int
) -> jax.Array:
    """:func:`~jaxgraph.comm.broadcast.reduce_to_source` whose every hop sends its running
    sum encoded at ``bits`` (``key`` already folded with this device's index).

    Shapes:
      ``g: f32[B, F]`` -> ``f32[B, F]``: an unbiased estimate of ``sum_i g_i`` on the source,
      zeros elsewhere.
    """
    rows, dim = g.shape

    def hop(acc, k, perm):
        wire = encode_block(acc, bits, jax.random.fold_in(key, k))
        return decode_block(jax.lax.ppermute(wire, axis_name, perm), bits, rows, dim)

    return _tree_reduce(g, source, axis_name, num_parts, hop)


def quantized_reduce_halo_to_owners(
    g_halo: jax.Array,
    bits: int,
    key: jax.Array,
    *,
    axis_name: str,
    num_parts: int,
    active: jax.Array | None = None,
) -> jax.Array:
    """:func:`~jaxgraph.comm.broadcast.reduce_halo_to_owners` with every tree quantized
    (:func:`quantized_reduce_to_source`; key folded with this device and the source), tree
    ``j`` at ``bits`` or ``bits[j]``. ``[P-1, B, F]`` (halo order) -> ``[B, F]``."""
    key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
    kw = dict(axis_name=axis_name, num_parts=num_parts)
    widths = per_source(bits, num_parts)

    def reduce(g, source):
        return quantized_reduce_to_source(
            g, source, widths[source], jax.random.fold_in(key, source), **kw
        )

    return reduce_halo_to_owners(g_halo, active=active, reduce=reduce, **kw)


def quantized_all_blocks(
    h_local: jax.Array, bits: int, key: jax.Array, *, axis_name: str, num_parts: int
) -> jax.Array:
    """Every other block, broadcast encoded at ``bits`` (owner key ``fold_in(key, i)``), with
    no gradient rule of its own. ``[B, F] -> [P-1, B, F]`` (halo order)."""
    halo, _ = _blocks_forward(
        h_local, None, None, key, per_source(bits, num_parts), axis_name, num_parts
    )
    return halo


def quantized_blocks(
    h_local: jax.Array,
    cache: jax.Array | None,
    active: jax.Array | None,
    key: jax.Array,
    *,
    bits,
    grad_bits,
    axis_name: str,
    num_parts: int,
    probe: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The other blocks, broadcast quantized (fresh from active owners, cached otherwise), and
    this device's own block as every receiver decodes it.

    As :func:`~jaxgraph.comm.broadcast.skip_broadcast_blocks` (``active=None``: all, CAGNET),
    owner key ``fold_in(key, i)``; backward by :func:`quantized_reduce_halo_to_owners` at
    ``grad_bits``. ``probe``'s cotangent is the backward trace (module docstring).

    Shapes:
      ``h_local: f32[B, F]``, ``cache: f32[P-1, B, F]`` or ``None``, ``active: bool[P]`` or
      ``None``, ``probe: f32[P-1]`` -> ``(halo f32[P-1, B, F], own f32[B, F])``.
    """
    bits, grad_bits = per_source(bits, num_parts), per_source(grad_bits, num_parts)
    return _quantized_blocks(
        h_local, cache, active, key, probe, bits, grad_bits, axis_name, num_parts
    )


def _blocks_forward(h_local, cache, active, key, bits, axis_name, num_parts):
    """``bits``: a width per source block."""
    i = jax.lax.axis_index(axis_name)
    rows, dim = h_local.shape
    distinct = sorted(set(bits))
    own_key = jax.random.fold_in(key, i)
    # This device's block at every width some owner uses: it sends the one of its own width.
    wires = {w: encode_block(h_local, w, own_key) for w in distinct}
    if len(distinct) == 1:
        own = decode_block(wires[distinct[0]], distinct[0], rows, dim)
    else:  # what the receivers decode of this device's block: its own width's encoding
        branch = jnp.asarray([distinct.index(w) for w in bits], jnp.int32)[i]
        own = jax.lax.switch(
            branch, [lambda w=w: decode_block(wires[w], w, rows, dim) for w in distinct]
        )

    def send(h, source):  # the owner's encoding, down its tree, decoded
        del h
        w = bits[source]
        wire_j = broadcast_forward(wires[w], source, axis_name=axis_name, num_parts=num_parts)
        return decode_block(wire_j, w, rows, dim)

    halo = skip_forward(h_local, cache, active, axis_name, num_parts, send)
    return halo.astype(h_local.dtype), own.astype(h_local.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8))
def _quantized_blocks(h_local, cache, active, key, probe, bits, grad_bits, axis_name, num_parts):
    del probe
    return _blocks_forward(h_local, cache, active, key, bits, axis_name, num_parts)


def _blocks_fwd(h_local, cache, active, key, probe, bits, grad_bits, axis_name, num_parts):
    out = _blocks_forward(h_local, cache, active, key, bits, axis_name, num_parts)
    return out, (key, probe is not None)


def _blocks_bwd(bits, grad_bits, axis_name, num_parts, res, cotangents):
    del bits
    key, traced = res
    g_halo, _ = cotangents
    back = jax.random.fold_in(key, 1 << 20)  # distinct from the forward's per-device keys
    dh = quantized_reduce_halo_to_owners(
        g_halo, grad_bits, back, axis_name=axis_name, num_parts=num_parts
    )
    trace = None
    if traced:  # per halo slot: the row-range variance of the partial this device sends
        trace = jnp.sum(
            row_range_variance(g_halo.reshape(-1, g_halo.shape[-1])).reshape(g_halo.shape[:2]),
            axis=1,
        )
    return dh, None, None, None, trace


_quantized_blocks.defvjp(_blocks_fwd, _blocks_bwd)


def block_tree_bytes(
    rows: int, dim: int, num_parts: int, bits, grad_bits
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of the trees under widths per owner: ``forward[j, a]`` (``[P, P]``), what relative
    rank ``a`` sends in block ``j``'s broadcast, and ``backward[j]`` (``[P]``), what every
    device but ``j`` sends in ``j``'s reduction (one hop)."""
    sends = tree_sends(num_parts).astype(np.int64)
    fwd = per_source(bits, num_parts)
    bwd = per_source(grad_bits, num_parts)
    forward = np.stack([sends * block_bytes(rows, dim, w) for w in fwd])
    backward = np.array([block_bytes(rows, dim, w) for w in bwd], np.int64)
    return forward, backward


def quantized_broadcast_bytes(
    rows: int, dim: int, num_parts: int, bits: int
) -> tuple[np.ndarray, int]:
    """``(per_rank, total)`` as :func:`~jaxgraph.comm.broadcast.broadcast_bytes`, for one
    block encoded at ``bits``."""
    return broadcast_bytes((block_bytes(rows, dim, bits),), num_parts, 1)


__all__ = [
    "BROADCAST_WIDTHS",
    "block_bytes",
    "block_tree_bytes",
    "check_bits",
    "decode_block",
    "encode_block",
    "quantized_all_blocks",
    "quantized_blocks",
    "quantized_broadcast_bytes",
    "quantized_reduce_halo_to_owners",
    "quantized_reduce_to_source",
    "per_source",
]
