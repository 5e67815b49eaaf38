"""Counter-based random bits for stochastic rounding: Threefry-2x32 of (row group, column).

The quantizer rounds with ``u = U / 2^R``, each ``U`` a hash of its position under a seed (two
words from the key, `seed_words`), so the Pallas kernel computes it in registers and the
reference, with the same functions on whole arrays, draws the same bits. Rows are taken in draw
groups of ``m = 4`` (``b = 2``) or ``2`` (``b = 4, 8``); group ``h = n // m`` and column ``d``
give ``(w0, w1) = threefry2x32(s, (h, d))`` (20 rounds, as ``jax.random``), of which row ``n``
takes ``R`` random bits:

* ``b = 2`` (``R = 16``): the 16-bit half ``(n % 4) % 2`` of word ``(n % 4) // 2``, low first;
* ``b = 4, 8`` (``R = 23``): the top 23 bits of word ``n % 2``; 23 is the most that keeps the
  fixed-point sum ``t + U <= (L + 1) * 2^R - 1`` within int32 at 8 bits.

The stream depends only on ``(s, n, d, b)``: devices, layers, directions and steps must use
different keys (``jax.random.fold_in``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_kernels.packing import check_bits

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_SEED_COUNTER = (np.uint32(0x71756E74), np.uint32(0x697A6521))  # "quantiz!": a domain tag


def draw_rows(bits: int) -> int:
    """``m``: rows sharing one Threefry block (two 32-bit words)."""
    return 4 if bits == 2 else 2


def uniform_bits(bits: int) -> int:
    """``R``: random bits per element."""
    return 16 if bits == 2 else 23


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32, 20 rounds (as `jax.random`): key words ``k0, k1``, counters ``c0, c1``."""
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(_THREEFRY_PARITY))
    x0 = c0 + ks[0]
    x1 = c1 + ks[1]
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = lax.shift_left(x1, np.uint32(r)) | lax.shift_right_logical(x1, np.uint32(32 - r))
            x1 = x1 ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def uniform_ints(w0, w1, bits: int):
    """Threefry words of the draw groups ``u32[G, C]`` -> ``U: i32[G * m, C]`` in ``[0, 2^R)``."""
    g, c = w0.shape
    m = draw_rows(bits)
    shape = (g, m, c)
    j = lax.broadcasted_iota(jnp.uint32, shape, 1)
    word = jnp.where(
        j < m // 2,
        lax.broadcast_in_dim(w0, shape, (0, 2)),
        lax.broadcast_in_dim(w1, shape, (0, 2)),
    )
    if bits == 2:
        u = lax.shift_right_logical(word, (j & 1) * np.uint32(16)) & np.uint32(0xFFFF)
    else:
        u = lax.shift_right_logical(word, np.uint32(32 - uniform_bits(bits)))
    return u.reshape(g * m, c).astype(jnp.int32)


def uniform_ints_from_uniforms(u, bits: int):
    """Explicit uniforms ``f32`` -> ``U = clip(floor(u * 2^R), 0, 2^R - 1)`` (NaN -> 0)."""
    r = uniform_bits(bits)
    t = jnp.floor(u * float(2**r))
    t = jnp.minimum(jnp.where(t > 0, t, 0.0), float(2**r - 1))
    return t.astype(jnp.int32)


def seed_words(key):
    """Two uint32 seed words from a single PRNG key (typed, or raw ``uint32[2]``; ValueError
    otherwise): the key's two data words hashed at a fixed counter (a domain tag, apart from
    ``jax.random`` draws with the same key); other key implementations first draw two words."""
    key = jnp.asarray(key)
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    if (typed and key.shape != ()) or (
        not typed and (key.dtype != jnp.uint32 or key.shape != (2,))
    ):
        raise ValueError(
            f"key must be a single PRNG key (jax.random.key, or a raw uint32[2] key), got "
            f"{key.dtype}{list(key.shape)}"
        )
    words = jax.random.key_data(key) if typed else key
    if words.shape != (2,) or words.dtype != jnp.uint32:
        words = jax.random.bits(key, (2,), jnp.uint32)
    return jnp.stack(threefry2x32(words[0], words[1], *_SEED_COUNTER))


def counter_uniform_ints(seed, num_rows: int, num_cols: int, bits: int):
    """``U: i32[num_rows, num_cols]`` from the seed words; ``num_rows`` a multiple of ``m``."""
    groups = num_rows // draw_rows(bits)
    c0 = lax.broadcasted_iota(jnp.uint32, (groups, num_cols), 0)
    c1 = lax.broadcasted_iota(jnp.uint32, (groups, num_cols), 1)
    return uniform_ints(*threefry2x32(seed[0], seed[1], c0, c1), bits)


@functools.partial(jax.jit, static_argnames=("shape", "bits"))
def random_uniforms(key: jax.Array, shape: tuple[int, int], bits: int) -> jax.Array:
    """The uniforms ``u = U / 2^R`` that `quantize` draws for ``key``, as ``f32[N, D]``.

    ``quantize(x, bits, key)`` equals ``quantize_reference(x, bits, uniforms=random_uniforms(key,
    x.shape, bits))`` bit for bit. The values lie on the grid ``{0, 1, ..., 2^R - 1} / 2^R``
    (ValueError for a bad ``bits`` or ``key``).
    """
    bits = check_bits(bits)
    n, d = shape
    m = draw_rows(bits)
    n_pad = -(-n // m) * m
    uints = counter_uniform_ints(seed_words(key), n_pad, d, bits)[:n]
    return uints.astype(jnp.float32) * float(2.0 ** -uniform_bits(bits))
