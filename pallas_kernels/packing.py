"""Row packing of quantization codes: AdaQP's wire layout, bit for bit.

A message quantized to ``b`` bits in {2, 4, 8} holds one code ``q[n, d]`` in ``[0, 2^b - 1]``
per element of ``x: f32[N, D]``; with ``k = 8 / b`` rows per byte::

    packed[n // k, d] |= q[n, d] << ((n % k) * b)        (the lowest row in the low bits)

with rows padded by zero codes to a multiple of ``k``: exactly ``ceil(N / k) * D`` bytes (AdaQP
sends one spare byte more), e.g. ``b = 2, D = 1``, codes ``[1, 2, 3, 0]`` give ``0x39``. The
padding falls on rows, so ``D`` needs none. `pack_codes` and `unpack_codes` are the checked
entry points; `pack_block` and `unpack_block` the unchecked forms the references and the Pallas
kernels share.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

SUPPORTED_BITS = (2, 4, 8)
"""Bit-widths with a whole number of codes per byte."""


def check_bits(bits) -> int:
    """``bits`` as an int; ValueError unless it is an int in `SUPPORTED_BITS`."""
    if (
        isinstance(bits, bool)
        or not isinstance(bits, int | np.integer)
        or bits not in SUPPORTED_BITS
    ):
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits!r}")
    return int(bits)


def codes_per_byte(bits: int) -> int:
    """``k = 8 / bits``: rows packed into one byte (ValueError for bits not supported)."""
    return 8 // check_bits(bits)


def packed_rows(num_rows: int, bits: int) -> int:
    """``ceil(num_rows / k)``: rows of the packed array (its bytes are this times D)."""
    k = codes_per_byte(bits)
    return -(-num_rows // k)


def check_packed(packed, bits: int, num_rows):
    """Validates a packed message of ``num_rows`` rows at ``bits`` (already checked) bits:
    ValueError unless ``num_rows`` is a non-negative int and ``packed`` ``uint8`` of
    ``packed_rows(num_rows, bits)`` rows."""
    if isinstance(num_rows, bool) or not isinstance(num_rows, int | np.integer) or num_rows < 0:
        raise ValueError(f"num_rows must be a non-negative int, got {num_rows!r}")
    if packed.ndim != 2 or packed.dtype != jnp.uint8:
        raise ValueError(
            f"packed must be uint8[ceil(N/k), D], got {packed.dtype}{list(packed.shape)}"
        )
    expect = packed_rows(int(num_rows), bits)
    if packed.shape[0] != expect:
        raise ValueError(
            f"packed has {packed.shape[0]} rows; {num_rows} rows at {bits} bits pack into {expect}"
        )


def pack_block(codes, bits: int):
    """``codes: int[R, C]`` (``R`` a multiple of ``k``, values ``< 2^b``) -> ``uint8[R / k, C]``.

    A reshape to ``[R / k, k, C]``, a shift by ``(n % k) * b`` and a sum over the ``k`` axis
    (the bit fields are disjoint, so the sum is an OR).
    """
    k = 8 // bits
    codes = codes.astype(jnp.uint32)
    if k > 1:
        r, c = codes.shape
        shape = (r // k, k, c)
        shift = lax.broadcasted_iota(jnp.uint32, shape, 1) * np.uint32(bits)
        codes = jnp.sum(lax.shift_left(codes.reshape(shape), shift), axis=1, dtype=jnp.uint32)
    return codes.astype(jnp.uint8)


def unpack_block(packed, bits: int):
    """``uint8[G, C]`` -> ``u32[G * k, C]`` codes."""
    k = 8 // bits
    p = packed.astype(jnp.uint32)
    if k == 1:
        return p
    g, c = p.shape
    shape = (g, k, c)
    shift = lax.broadcasted_iota(jnp.uint32, shape, 1) * np.uint32(bits)
    codes = lax.shift_right_logical(lax.broadcast_in_dim(p, shape, (0, 2)), shift)
    return (codes & np.uint32(2**bits - 1)).reshape(g * k, c)


@functools.partial(jax.jit, static_argnames=("bits",))
def pack_codes(codes: jax.Array, bits: int) -> jax.Array:
    """Packs codes ``uint8[N, D]`` (their low ``bits`` bits) along rows, AdaQP's layout (module
    docstring) -> ``uint8[ceil(N / k), D]``. Raises ValueError for bad ``bits`` or ``codes``."""
    bits = check_bits(bits)
    if codes.ndim != 2 or codes.dtype != jnp.uint8:
        raise ValueError(f"codes must be uint8[N, D], got {codes.dtype}{list(codes.shape)}")
    n, d = codes.shape
    k = 8 // bits
    g = packed_rows(n, bits)
    codes = jnp.pad(codes & np.uint8(2**bits - 1), ((0, g * k - n), (0, 0)))
    return pack_block(codes, bits)


@functools.partial(jax.jit, static_argnames=("bits", "num_rows"))
def unpack_codes(packed: jax.Array, bits: int, num_rows: int) -> jax.Array:
    """Inverse of `pack_codes`: ``uint8[ceil(N / k), D]`` -> ``uint8[num_rows, D]`` (ValueError
    on bad ``bits``, ``num_rows`` or ``packed``)."""
    bits = check_bits(bits)
    check_packed(packed, bits, num_rows)
    return unpack_block(packed, bits)[:num_rows].astype(jnp.uint8)
