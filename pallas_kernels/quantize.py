"""Stochastic row-wise message quantization with row packing (AdaQP semantics, with fixes).

For a block of rows ``x: f32[N, D]`` and a bit-width ``b`` in {2, 4, 8}, with ``L = 2^b - 1``:

    lo = min_d x[n, d]        hi = max_d x[n, d]        scale = L / (hi - lo)
    q  = clip(floor((x - lo) * scale + u), 0, L),   u ~ U[0, 1)      (stochastic rounding)
    x̂  = q / scale + lo                                              (receiver)

so ``E[x̂] = x`` and the per-row expected squared error is ``Σ_d Δ² p_d (1 - p_d)`` with
``Δ = 1 / scale`` and ``p_d`` the fractional part of ``(x - lo) * scale`` (AdaQP, references 1.3
and 7.1). The sender transmits ``scale`` itself (not ``1 / scale``) and ``lo``.

Fixes over the AdaQP CUDA kernel, each covered by a test: codes are clamped to ``[0, L]`` (AdaQP
has no upper clamp); rows with ``hi == lo``, or whose ``scale`` would overflow fp32 (``hi - lo <
L / FLT_MAX``), get codes 0 and ``scale = 1``, so ``x̂ = lo`` and nothing is NaN or inf (AdaQP
relies on CUDA's ``fmax(NaN, 0) = 0``); the row max gets ``q = L`` deterministically (fp32
parameters), so the row's min and max reconstruct to fp32 rounding; the packed block is exactly
``ceil(N / k) * D`` bytes (AdaQP sends a spare, uninitialised byte); randomness comes from an
explicit key, not a global generator (:func:`random_uniforms`). The rounding is done in fixed
point, bit-identical across backends (:func:`quantize_codes_reference`), and bf16 parameters are
rounded before the codes are computed, so the message stays unbiased (:func:`quantize`).

**Packing** (bit-compatible with AdaQP): with ``k = 8 / b`` rows per byte, byte ``(n // k) * D + d``
holds the code of row ``n`` at bit offset ``(n % k) * b``, the lowest row in the least significant
bits; rows are padded with zero codes to a multiple of ``k``. As an array: ``uint8[ceil(N/k), D]``.
Example: ``b = 2, D = 1``, codes ``[1, 2, 3, 0]`` give the byte ``0x39``.

Inputs must be finite; a row whose range overflows fp32 is not supported. Codes stay in range
for any input. The Pallas (Triton) kernels (:func:`quantize_pallas`, :func:`dequantize_pallas`)
equal the pure-``jnp`` references (:func:`quantize_reference`, :func:`dequantize_reference`) bit
for bit for the same key.

Shapes:
  x: f32[N, D] -> packed: uint8[ceil(N / k), D], scale: P[N], lo: P[N] (P = ``param_dtype``);
  dequantize: (uint8[ceil(N / k), D], P[N], P[N]) -> f32[N, D].
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels.backend import Backend, resolve_backend

SUPPORTED_BITS = (2, 4, 8)
"""Bit-widths with a whole number of codes per byte."""

_PARAM_DTYPES = (np.dtype(jnp.float32), np.dtype(jnp.bfloat16))
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_SEED_COUNTER = (np.uint32(0x71756E74), np.uint32(0x697A6521))  # "quantiz!": a domain tag
_TILE_ELEMENTS = 4096
_MAX_QUANTIZE_COLS = 16384  # one row per tile; wider rows would spill registers
_FLT_INF = float("inf")


# ----------------------------------------------------------------------------------------------
# Layout helpers


def _check_bits(bits) -> int:
    if (
        isinstance(bits, bool)
        or not isinstance(bits, int | np.integer)
        or bits not in SUPPORTED_BITS
    ):
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits!r}")
    return int(bits)


def codes_per_byte(bits: int) -> int:
    """``k = 8 / bits``: rows packed into one byte.

    Raises:
      ValueError: ``bits`` is not in `SUPPORTED_BITS`.
    """
    return 8 // _check_bits(bits)


def packed_rows(num_rows: int, bits: int) -> int:
    """``ceil(num_rows / k)``: rows of the packed array (its bytes are this times D)."""
    k = codes_per_byte(bits)
    return -(-num_rows // k)


def _draw_rows(bits: int) -> int:
    """Rows sharing one Threefry block (two 32-bit words)."""
    return 4 if bits == 2 else 2


def _random_bits(bits: int) -> int:
    """Random bits ``R`` per element."""
    return 16 if bits == 2 else 23


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _match_manual_axes(*arrays):
    """Inside ``jax.shard_map`` (replication check on): the inputs cast to vary over the union of
    their manual mesh axes, and that union as a `jax.sharding.ManualAxisType` for the outputs of
    a ``pallas_call``, which cannot infer it. Outside ``shard_map`` the union is empty."""
    varying = frozenset().union(*(jax.typeof(a).manual_axis_type.varying for a in arrays))
    arrays = [
        a
        if jax.typeof(a).manual_axis_type.varying == varying
        else jax.lax.pcast(a, tuple(varying - jax.typeof(a).manual_axis_type.varying), to="varying")
        for a in arrays
    ]
    return arrays, jax.sharding.ManualAxisType(varying=varying)


# ----------------------------------------------------------------------------------------------
# Shared math: used by the reference on whole arrays and by the kernels on tiles, so the two
# produce identical codes. Only elementwise ops, reshapes, iotas and row reductions on tensors
# whose sizes are powers of two inside the kernels (Triton's constraint).


def _threefry2x32(k0, k1, c0, c1):
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


def _uniform_ints(w0, w1, bits: int):
    """Threefry words of the draw groups ``u32[G, C]`` -> ``U: i32[G * m, C]`` in ``[0, 2^R)``."""
    g, c = w0.shape
    m = _draw_rows(bits)
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
        u = lax.shift_right_logical(word, np.uint32(32 - _random_bits(bits)))
    return u.reshape(g * m, c).astype(jnp.int32)


def _uniform_ints_from_uniforms(u, bits: int):
    """Explicit uniforms ``f32`` -> ``U = clip(floor(u * 2^R), 0, 2^R - 1)`` (NaN -> 0)."""
    r = _random_bits(bits)
    t = jnp.floor(u * float(2**r))
    t = jnp.minimum(jnp.where(t > 0, t, 0.0), float(2**r - 1))
    return t.astype(jnp.int32)


def _divide(a, b, ieee_asm: bool):
    """``a / b`` rounded to nearest (IEEE); inline PTX on GPU, where Triton's ``/`` is not."""
    a, b = jnp.broadcast_arrays(a, b)
    if not ieee_asm:
        return a / b
    (out,) = plgpu.elementwise_inline_asm(
        "div.rn.f32 $0, $1, $2;",
        args=[a, b],
        constraints="=f,f,f",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.float32)],
    )
    return out


def _bf16_round_down(v):
    """The largest bf16-representable f32 ``<= v`` (finite ``v``), by bit manipulation."""
    bits = lax.bitcast_convert_type(v, jnp.uint32)
    trunc = bits & np.uint32(0xFFFF0000)  # toward zero
    negative = lax.shift_right_logical(bits, np.uint32(31)) == np.uint32(1)
    inexact = (bits & np.uint32(0xFFFF)) != np.uint32(0)
    bits = jnp.where(negative & inexact, trunc + np.uint32(0x10000), trunc)
    return lax.bitcast_convert_type(bits, jnp.float32)


def _bf16_truncate(v):
    """``v`` rounded toward zero to bf16 precision, kept in f32."""
    bits = lax.bitcast_convert_type(v, jnp.uint32) & np.uint32(0xFFFF0000)
    return lax.bitcast_convert_type(bits, jnp.float32)


def _quantize_rows(x, uints, bits: int, bf16_params: bool, ieee_asm: bool, valid_cols=None):
    """Codes and parameters of a row block.

    Args:
      x: ``f32[R, C]``; columns where ``valid_cols`` is False are ignored.
      uints: ``i32[R, C]`` random integers in ``[0, 2^R)``.
      bits: the bit-width.
      bf16_params: round ``lo`` and ``scale`` to bf16 (downward) before computing the codes.
      ieee_asm: use inline PTX for the IEEE division (Triton kernels only).
      valid_cols: ``bool[1, C]`` or None (all valid).

    Returns:
      ``(codes i32[R, C] in [0, L], scale f32[R], lo f32[R])``; with ``bf16_params`` the two
      parameter vectors hold bf16-representable values.
    """
    levels = 2**bits - 1
    r = _random_bits(bits)
    if valid_cols is None:
        lo = jnp.min(x, axis=1)
        hi = jnp.max(x, axis=1)
    else:
        lo = jnp.min(jnp.where(valid_cols, x, _FLT_INF), axis=1)
        hi = jnp.max(jnp.where(valid_cols, x, -_FLT_INF), axis=1)
    if bf16_params:
        lo = _bf16_round_down(lo)
    spread = hi - lo
    positive = spread > 0  # False for constant rows (and NaN)
    scale = _divide(
        jnp.full_like(spread, float(levels)), jnp.where(positive, spread, 1.0), ieee_asm
    )
    if bf16_params:
        scale = _bf16_truncate(scale)
    ok = positive & (scale > 0) & (scale < _FLT_INF)
    scale = jnp.where(ok, scale, 1.0)

    y = (x - lo[:, None]) * scale[:, None]
    if not bf16_params:
        y = jnp.where(x == hi[:, None], float(levels), y)
    t = jnp.floor(y * float(2**r) + 0.5)  # exact product: a fused multiply-add changes nothing
    t = jnp.minimum(jnp.where(t > 0, t, 0.0), float(levels * 2**r))  # the where maps NaN to 0
    t = jnp.where(ok[:, None], t, 0.0)
    codes = lax.shift_right_arithmetic(t.astype(jnp.int32) + uints, np.int32(r))
    return codes, scale, lo


def _pack_block(codes, bits: int):
    """``codes: int[R, C]`` (``R`` a multiple of ``k``, values ``< 2^b``) -> ``uint8[R / k, C]``."""
    k = 8 // bits
    codes = codes.astype(jnp.uint32)
    if k > 1:
        r, c = codes.shape
        shape = (r // k, k, c)
        shift = lax.broadcasted_iota(jnp.uint32, shape, 1) * np.uint32(bits)
        codes = jnp.sum(lax.shift_left(codes.reshape(shape), shift), axis=1, dtype=jnp.uint32)
    return codes.astype(jnp.uint8)


def _unpack_block(packed, bits: int):
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


def _dequantize_rows(codes, scale, lo, ieee_asm: bool):
    """``x̂ = q * (1 / scale) + lo``: ``codes u32[R, C]``, ``scale, lo: f32[R]`` -> ``f32[R, C]``.

    One reciprocal per row, not a division per element: XLA rewrites ``a / broadcast(b)`` into
    that form anyway, so writing it out keeps every backend on the same operations (up to the
    GPU's fused multiply-add: 1 ulp).
    """
    q = codes.astype(jnp.int32).astype(jnp.float32)
    step = _divide(jnp.ones_like(scale), scale, ieee_asm)
    return q * step[:, None] + lo[:, None]


# ----------------------------------------------------------------------------------------------
# Validation


def _check_param_dtype(param_dtype) -> np.dtype:
    try:
        dtype = np.dtype(param_dtype)
    except TypeError:
        dtype = None
    if dtype not in _PARAM_DTYPES:
        raise ValueError(f"param_dtype must be float32 or bfloat16, got {param_dtype!r}")
    return dtype


def _check_x(x, name: str = "x"):
    if x.ndim != 2:
        raise ValueError(f"{name} must have rank 2 [N, D], got shape {x.shape}")
    if x.dtype != jnp.float32:
        raise ValueError(f"{name} must be float32, got {x.dtype}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} must have at least one column (D >= 1), got shape {x.shape}")


def _check_uniforms(uniforms, x):
    if uniforms.shape != x.shape or uniforms.dtype != jnp.float32:
        raise ValueError(
            f"uniforms must be float32 of the shape of x {x.shape}, got {uniforms.dtype}"
            f"{list(uniforms.shape)}"
        )


def _check_quantize_args(x, bits, key, uniforms, param_dtype) -> tuple[int, np.dtype]:
    bits = _check_bits(bits)
    param_dtype = _check_param_dtype(param_dtype)
    _check_x(x)
    if (key is None) == (uniforms is None):
        raise ValueError("pass exactly one of key and uniforms")
    if uniforms is not None:
        _check_uniforms(uniforms, x)
    return bits, param_dtype


def _seed_words(key):
    """Two uint32 seed words from a single PRNG key (typed, or raw ``uint32[2]``).

    A Threefry key's two data words are hashed once more at a fixed counter, which keeps the
    quantization stream apart from ``jax.random`` draws made with the same key (other key
    implementations first draw two words with ``jax.random.bits``).
    """
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
    return jnp.stack(_threefry2x32(words[0], words[1], *_SEED_COUNTER))


def _check_packed(packed, bits: int, num_rows):
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


def _check_params(scale, lo, num_rows: int):
    for name, v in (("scale", scale), ("lo", lo)):
        if v.shape != (num_rows,) or np.dtype(v.dtype) not in _PARAM_DTYPES:
            raise ValueError(
                f"{name} must be float32 or bfloat16 of shape ({num_rows},), got "
                f"{v.dtype}{list(v.shape)}"
            )


# ----------------------------------------------------------------------------------------------
# Packing and randomness (public helpers)


@functools.partial(jax.jit, static_argnames=("bits",))
def pack_codes(codes: jax.Array, bits: int) -> jax.Array:
    """Packs codes along rows, AdaQP's layout (module docstring).

    Args:
      codes: ``uint8[N, D]``; only the low ``bits`` bits of each code are kept.
      bits: 2, 4 or 8.

    Returns:
      ``uint8[ceil(N / k), D]``: byte ``[n // k, d]`` holds ``codes[n, d]`` at bit
      ``(n % k) * bits``.

    Raises:
      ValueError: bad ``bits``, or ``codes`` not a rank-2 uint8 array.
    """
    bits = _check_bits(bits)
    if codes.ndim != 2 or codes.dtype != jnp.uint8:
        raise ValueError(f"codes must be uint8[N, D], got {codes.dtype}{list(codes.shape)}")
    n, d = codes.shape
    k = 8 // bits
    g = packed_rows(n, bits)
    codes = jnp.pad(codes & np.uint8(2**bits - 1), ((0, g * k - n), (0, 0)))
    return _pack_block(codes, bits)


@functools.partial(jax.jit, static_argnames=("bits", "num_rows"))
def unpack_codes(packed: jax.Array, bits: int, num_rows: int) -> jax.Array:
    """Inverse of `pack_codes`: ``uint8[ceil(N / k), D]`` -> ``uint8[num_rows, D]``.

    Raises:
      ValueError: bad ``bits`` or ``num_rows``, or ``packed`` of the wrong dtype or row count.
    """
    bits = _check_bits(bits)
    _check_packed(packed, bits, num_rows)
    return _unpack_block(packed, bits)[:num_rows].astype(jnp.uint8)


def _reference_uints(seed, num_rows: int, num_cols: int, bits: int):
    """``U: i32[num_rows, num_cols]`` from the seed words; ``num_rows`` a multiple of ``m``."""
    groups = num_rows // _draw_rows(bits)
    c0 = lax.broadcasted_iota(jnp.uint32, (groups, num_cols), 0)
    c1 = lax.broadcasted_iota(jnp.uint32, (groups, num_cols), 1)
    return _uniform_ints(*_threefry2x32(seed[0], seed[1], c0, c1), bits)


@functools.partial(jax.jit, static_argnames=("shape", "bits"))
def random_uniforms(key: jax.Array, shape: tuple[int, int], bits: int) -> jax.Array:
    """The uniforms ``u = U / 2^R`` that `quantize` draws for ``key``, as ``f32[N, D]``.

    ``quantize(x, bits, key)`` equals ``quantize_reference(x, bits, uniforms=random_uniforms(key,
    x.shape, bits))`` bit for bit; useful for tests and analysis. The values lie on the grid
    ``{0, 1, ..., 2^R - 1} / 2^R`` (``R = 16`` at 2 bits, 23 otherwise).

    The key becomes two seed words ``s``: the Threefry hash of the key's two data words at a
    fixed counter (a domain tag, which keeps the stream apart from ``jax.random`` draws with the
    same key; keys of other implementations first draw two words with ``jax.random.bits``). Rows
    are taken in draw groups of ``m = 4`` (``b = 2``) or ``m = 2`` (``b = 4, 8``); for group
    ``h = n // m`` and column ``d`` one Threefry-2x32 block (20 rounds, the hash behind
    ``jax.random``) gives two words ``(w0, w1) = threefry2x32(s, (h, d))``. Row ``n`` draws an
    integer ``U`` with ``R`` random bits:

    * ``b = 2`` (``R = 16``): the 16-bit half ``(n % 4) % 2`` of word ``(n % 4) // 2``, low half
      first;
    * ``b = 4, 8`` (``R = 23``): the top 23 bits of word ``n % 2``;

    and ``u = U / 2^R``. The kernel evaluates the hash in registers, so a quantize pass reads
    ``x`` once and writes the packed bytes, with no uniform array in memory. The stream depends
    only on ``(s, n, d, b)``: a fixed key reproduces bit-identical packets, the rows of a prefix
    get the same codes, and different devices, layers, directions and steps must use different
    keys (``jax.random.fold_in``; the caller does this).

    Raises:
      ValueError: bad ``bits`` or ``key``.
    """
    bits = _check_bits(bits)
    n, d = shape
    m = _draw_rows(bits)
    n_pad = -(-n // m) * m
    uints = _reference_uints(_seed_words(key), n_pad, d, bits)[:n]
    return uints.astype(jnp.float32) * float(2.0 ** -_random_bits(bits))


# ----------------------------------------------------------------------------------------------
# References


@functools.partial(jax.jit, static_argnames=("bits", "param_dtype"))
def quantize_codes_reference(
    x: jax.Array, bits: int, uniforms: jax.Array, *, param_dtype=jnp.float32
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unpacked codes with explicit uniforms (pure ``jnp``).

    **Exact, portable rounding.** The rounding is done in fixed point, so that the only
    floating-point operations that decide a code are one subtraction and one multiplication
    (identical on every IEEE backend, and immune to FMA contraction)::

        t = clip(round((x - lo) * scale * 2^R), 0, L * 2^R)        q = (t + U) >> R

    This equals ``floor(y + u)`` with ``y = t / 2^R`` and ``u = U / 2^R``, and ``E[q] = t / 2^R``
    exactly, so the bias is at most ``2^-(R+1)`` steps (``2^-17`` at 2 bits, ``2^-24`` at 4 and
    8 bits), far below the fp32 rounding of ``y`` itself at 8 bits. On GPU the per-row
    ``L / (hi - lo)`` uses IEEE division (``div.rn.f32``; Triton's default ``/`` is the
    approximate ``div.full.f32``), so the Pallas kernel produces the same codes as the reference
    for the same key, bit for bit (on one platform: XLA on CPU flushes denormals to zero, so rows
    whose spread is denormal can quantize differently on another platform). The receiver
    computes ``x̂ = q * (1 / scale) + lo`` with one reciprocal per row (XLA rewrites a division by
    a broadcast row vector into this form anyway); backends agree on ``x̂`` to 1 ulp (a GPU fuses
    the multiply-add).

    Args:
      x: ``f32[N, D]``.
      bits: 2, 4 or 8.
      uniforms: ``f32[N, D]`` in ``[0, 1)``, used at ``R`` bits (``floor(u * 2^R)``, clamped, so
        ``u = 1`` behaves as the largest draw).
      param_dtype: float32 or bfloat16 (:func:`quantize`).

    Returns:
      ``(codes uint8[N, D], scale P[N], lo P[N])``.

    Raises:
      ValueError: bad ``bits``, ``param_dtype``, or shapes/dtypes.
    """
    bits = _check_bits(bits)
    param_dtype = _check_param_dtype(param_dtype)
    _check_x(x)
    _check_uniforms(uniforms, x)
    codes, scale, lo = _quantize_rows(
        x, _uniform_ints_from_uniforms(uniforms, bits), bits, param_dtype != jnp.float32, False
    )
    return codes.astype(jnp.uint8), scale.astype(param_dtype), lo.astype(param_dtype)


def _empty_quantized(d: int, param_dtype):
    return (
        jnp.zeros((0, d), jnp.uint8),
        jnp.zeros((0,), param_dtype),
        jnp.zeros((0,), param_dtype),
    )


@functools.partial(jax.jit, static_argnames=("bits", "param_dtype"))
def quantize_reference(
    x: jax.Array,
    bits: int,
    key: jax.Array | None = None,
    *,
    uniforms: jax.Array | None = None,
    param_dtype=jnp.float32,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pure-``jnp`` quantize and pack; randomness from ``key`` or explicit ``uniforms``.

    Same contract as `quantize` (exactly one of ``key`` and ``uniforms``).
    """
    bits, param_dtype = _check_quantize_args(x, bits, key, uniforms, param_dtype)
    seed = None if key is None else _seed_words(key)
    n, d = x.shape
    if n == 0:
        return _empty_quantized(d, param_dtype)
    m = _draw_rows(bits)
    n_pad = -(-n // m) * m  # a multiple of k too; zero rows give zero codes
    xp = jnp.pad(x, ((0, n_pad - n), (0, 0)))
    if uniforms is None:
        uints = _reference_uints(seed, n_pad, d, bits)
    else:
        uints = _uniform_ints_from_uniforms(jnp.pad(uniforms, ((0, n_pad - n), (0, 0))), bits)
    codes, scale, lo = _quantize_rows(xp, uints, bits, param_dtype != jnp.float32, False)
    packed = _pack_block(codes, bits)[: packed_rows(n, bits)]
    return packed, scale[:n].astype(param_dtype), lo[:n].astype(param_dtype)


@functools.partial(jax.jit, static_argnames=("bits", "num_rows"))
def dequantize_reference(
    packed: jax.Array, scale: jax.Array, lo: jax.Array, bits: int, num_rows: int
) -> jax.Array:
    """Pure-``jnp`` unpack and ``x̂ = q / scale + lo``; same contract as `dequantize`."""
    bits = _check_bits(bits)
    _check_packed(packed, bits, num_rows)
    _check_params(scale, lo, num_rows)
    codes = _unpack_block(packed, bits)[:num_rows]
    return _dequantize_rows(codes, scale.astype(jnp.float32), lo.astype(jnp.float32), False)


# ----------------------------------------------------------------------------------------------
# Pallas kernels


@dataclasses.dataclass(frozen=True)
class QuantizeBlockSizes:
    """Tile of the quantize kernel: ``rows`` input rows by ``next_pow2(D)`` columns.

    Attributes:
      rows: a power of two and a multiple of the draw group (4 rows at 2 bits, else 2); None
        picks about 4096 elements per tile (at most 256 rows, no more than the input needs).
      num_warps: Triton warps per program; None: 4, or 8 for tiles above 4096 elements.
      num_stages: Triton pipelining stages.
    """

    rows: int | None = None
    num_warps: int | None = None
    num_stages: int = 1

    def resolve(self, num_rows: int, num_cols: int, bits: int) -> tuple[int, int]:
        """``(rows, num_warps)`` for an input of ``num_rows x num_cols``."""
        m = _draw_rows(bits)
        cols = _next_pow2(num_cols)
        rows = self.rows
        if rows is None:
            rows = min(max(_TILE_ELEMENTS // cols, m), 256, max(_next_pow2(num_rows), m))
        elif rows < m or rows & (rows - 1):
            raise ValueError(f"rows must be a power of two >= {m} at {bits} bits, got {rows}")
        warps = self.num_warps or (4 if rows * cols <= _TILE_ELEMENTS else 8)
        return rows, warps


@dataclasses.dataclass(frozen=True)
class DequantizeBlockSizes:
    """Tile of the dequantize kernel: ``rows`` output rows by ``cols`` columns.

    Attributes:
      rows: a power of two and a multiple of ``k = 8 / bits``; None: about 4096 elements per
        tile (at most 256 rows).
      cols: a power of two; None: ``min(next_pow2(D), 128)``.
      num_warps: Triton warps per program.
      num_stages: Triton pipelining stages.
    """

    rows: int | None = None
    cols: int | None = None
    num_warps: int = 4
    num_stages: int = 1

    def resolve(self, num_rows: int, num_cols: int, bits: int) -> tuple[int, int]:
        """``(rows, cols)`` for an output of ``num_rows x num_cols``."""
        k = 8 // bits
        cols = self.cols
        if cols is None:
            cols = min(_next_pow2(num_cols), 128)
        elif cols < 1 or cols & (cols - 1):
            raise ValueError(f"cols must be a power of two, got {cols}")
        rows = self.rows
        if rows is None:
            rows = min(max(_TILE_ELEMENTS // cols, k), 256, max(_next_pow2(num_rows), k))
        elif rows < k or rows & (rows - 1):
            raise ValueError(f"rows must be a power of two >= {k} at {bits} bits, got {rows}")
        return rows, cols


def _quantize_kernel(*refs, bits, num_rows, num_cols, bf16_params, ieee_asm, explicit_uniforms):
    """One tile: ``x[rows, Dp]`` -> packed ``[rows / k, Dp]``, scale and lo ``[rows]``."""
    if explicit_uniforms:
        x_ref, u_ref, packed_ref, scale_ref, lo_ref = refs
    else:
        seed_ref, x_ref, packed_ref, scale_ref, lo_ref = refs
    rows, cols = x_ref.shape
    k = 8 // bits
    pid = pl.program_id(0)
    row_ok = pid * rows + lax.broadcasted_iota(jnp.int32, (rows,), 0) < num_rows
    col_ids = lax.broadcasted_iota(jnp.int32, (cols,), 0)
    col_ok = col_ids < num_cols
    mask = row_ok[:, None] & col_ok[None, :]
    x = plgpu.load(x_ref, mask=mask, other=0.0)  # padded rows are zero: constant, zero codes
    if explicit_uniforms:
        uints = _uniform_ints_from_uniforms(plgpu.load(u_ref, mask=mask, other=0.0), bits)
    else:
        groups = rows // _draw_rows(bits)
        group_ids = pid * groups + lax.broadcasted_iota(jnp.int32, (groups, cols), 0)
        c1 = lax.broadcast_in_dim(col_ids, (groups, cols), (1,))
        words = _threefry2x32(
            seed_ref[0], seed_ref[1], group_ids.astype(jnp.uint32), c1.astype(jnp.uint32)
        )
        uints = _uniform_ints(*words, bits)
    codes, scale, lo = _quantize_rows(
        x, uints, bits, bf16_params, ieee_asm, valid_cols=col_ok[None, :]
    )
    num_groups = -(-num_rows // k)
    packed_ok = pid * (rows // k) + lax.broadcasted_iota(jnp.int32, (rows // k,), 0) < num_groups
    plgpu.store(packed_ref, _pack_block(codes, bits), mask=packed_ok[:, None] & col_ok[None, :])
    plgpu.store(scale_ref, scale.astype(scale_ref.dtype), mask=row_ok)
    plgpu.store(lo_ref, lo.astype(lo_ref.dtype), mask=row_ok)


@functools.partial(jax.jit, static_argnames=("bits", "param_dtype", "interpret", "block_sizes"))
def quantize_pallas(
    x: jax.Array,
    bits: int,
    key: jax.Array | None = None,
    *,
    uniforms: jax.Array | None = None,
    param_dtype=jnp.float32,
    interpret: bool = False,
    block_sizes: QuantizeBlockSizes | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The Pallas (Triton) quantize kernel; same contract as `quantize_reference`.

    ``interpret=True`` runs it on CPU (slow; for tests). With ``uniforms`` the kernel reads the
    uniforms instead of hashing the key (tests drive edge cases through this path).

    One program per block of ``rows`` input rows (a power of two, a multiple of the draw group)
    and all ``next_pow2(D)`` columns, since the row min and max need the whole row; loads and
    stores are masked to ``N`` and ``D``. It computes the row statistics, the Threefry words for
    its ``rows / m`` draw groups, the codes, and packs ``k`` consecutive rows into each byte by a
    reshape to ``[rows / k, k, D]``, a shift by ``(n % k) * b`` and a sum over the ``k`` axis
    (the bit fields are disjoint, so the sum is an OR). Tile sizes are powers of two, as the
    Triton lowering requires; the default tile (`QuantizeBlockSizes`) holds about 4096 elements,
    a starting point, not tuned on hardware.
    """
    bits, param_dtype = _check_quantize_args(x, bits, key, uniforms, param_dtype)
    n, d = x.shape
    if d > _MAX_QUANTIZE_COLS:
        raise ValueError(
            f"the Pallas quantize kernel holds a whole row in one tile; D={d} exceeds "
            f"{_MAX_QUANTIZE_COLS}. Use Backend.REFERENCE."
        )
    block_sizes = block_sizes or QuantizeBlockSizes()
    rows, num_warps = block_sizes.resolve(n, d, bits)
    seed = None if key is None else _seed_words(key)
    if n == 0:
        return _empty_quantized(d, param_dtype)
    k = 8 // bits
    cols = _next_pow2(d)
    tile = pl.BlockSpec((rows, cols), lambda i: (i, 0))
    if uniforms is None:
        in_specs, args = [pl.BlockSpec((2,), lambda i: (0,)), tile], (seed, x)
    else:
        in_specs, args = [tile, tile], (x, uniforms)
    row_spec = pl.BlockSpec((rows,), lambda i: (i,))
    kernel = functools.partial(
        _quantize_kernel,
        bits=bits,
        num_rows=n,
        num_cols=d,
        bf16_params=param_dtype != jnp.float32,
        ieee_asm=not interpret,
        explicit_uniforms=uniforms is not None,
    )
    args, axes = _match_manual_axes(*args)
    return pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((packed_rows(n, bits), d), jnp.uint8, manual_axis_type=axes),
            jax.ShapeDtypeStruct((n,), param_dtype, manual_axis_type=axes),
            jax.ShapeDtypeStruct((n,), param_dtype, manual_axis_type=axes),
        ),
        grid=(pl.cdiv(n, rows),),
        in_specs=in_specs,
        out_specs=(pl.BlockSpec((rows // k, cols), lambda i: (i, 0)), row_spec, row_spec),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(
            num_warps=num_warps, num_stages=block_sizes.num_stages
        ),
        name=f"quantize_{bits}bit",
    )(*args)


def _dequantize_kernel(
    packed_ref, scale_ref, lo_ref, out_ref, *, bits, num_rows, num_cols, ieee_asm
):
    """One tile: packed ``[rows / k, cols]`` -> ``out[rows, cols]``."""
    groups, cols = packed_ref.shape
    rows = out_ref.shape[0]
    k = 8 // bits
    pid_r, pid_c = pl.program_id(0), pl.program_id(1)
    col_ok = pid_c * cols + lax.broadcasted_iota(jnp.int32, (cols,), 0) < num_cols
    group_ok = pid_r * groups + lax.broadcasted_iota(jnp.int32, (groups,), 0) < -(-num_rows // k)
    row_ok = pid_r * rows + lax.broadcasted_iota(jnp.int32, (rows,), 0) < num_rows
    packed = plgpu.load(packed_ref, mask=group_ok[:, None] & col_ok[None, :], other=0)
    scale = plgpu.load(scale_ref, mask=row_ok, other=1.0).astype(jnp.float32)
    lo = plgpu.load(lo_ref, mask=row_ok, other=0.0).astype(jnp.float32)
    out = _dequantize_rows(_unpack_block(packed, bits), scale, lo, ieee_asm)
    plgpu.store(out_ref, out, mask=row_ok[:, None] & col_ok[None, :])


@functools.partial(jax.jit, static_argnames=("bits", "num_rows", "interpret", "block_sizes"))
def dequantize_pallas(
    packed: jax.Array,
    scale: jax.Array,
    lo: jax.Array,
    bits: int,
    num_rows: int,
    *,
    interpret: bool = False,
    block_sizes: DequantizeBlockSizes | None = None,
) -> jax.Array:
    """The Pallas (Triton) dequantize kernel; same contract as `dequantize_reference`.

    A 2-D grid over (row block, column block); each program unpacks its bytes with shifts and
    masks. The default tile (`DequantizeBlockSizes`) holds about 4096 elements, a starting
    point, not tuned on hardware.
    """
    bits = _check_bits(bits)
    _check_packed(packed, bits, num_rows)
    _check_params(scale, lo, num_rows)
    d = packed.shape[1]
    block_sizes = block_sizes or DequantizeBlockSizes()
    rows, cols = block_sizes.resolve(num_rows, d, bits)
    if num_rows == 0 or d == 0:
        return jnp.zeros((num_rows, d), jnp.float32)
    k = 8 // bits
    row_spec = pl.BlockSpec((rows,), lambda i, j: (i,))
    kernel = functools.partial(
        _dequantize_kernel, bits=bits, num_rows=num_rows, num_cols=d, ieee_asm=not interpret
    )
    (packed, scale, lo), axes = _match_manual_axes(packed, scale, lo)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((num_rows, d), jnp.float32, manual_axis_type=axes),
        grid=(pl.cdiv(num_rows, rows), pl.cdiv(d, cols)),
        in_specs=[pl.BlockSpec((rows // k, cols), lambda i, j: (i, j)), row_spec, row_spec],
        out_specs=pl.BlockSpec((rows, cols), lambda i, j: (i, j)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(
            num_warps=block_sizes.num_warps, num_stages=block_sizes.num_stages
        ),
        name=f"dequantize_{bits}bit",
    )(packed, scale, lo)


# ----------------------------------------------------------------------------------------------
# Wrappers: what library code calls


@functools.partial(
    jax.jit, static_argnames=("bits", "backend", "interpret", "param_dtype", "block_sizes")
)
def quantize(
    x: jax.Array,
    bits: int,
    key: jax.Array,
    *,
    backend: Backend | None = None,
    interpret: bool = False,
    param_dtype=jnp.float32,
    block_sizes: QuantizeBlockSizes | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Stochastically quantizes rows to ``bits`` bits and packs them (AdaQP, with fixes).

    See the module docstring for the formulas and the packing layout, and `random_uniforms` for
    how ``key`` becomes the rounding noise. Jit-compatible: ``bits`` is static; ``N = 0`` gives
    empty arrays.

    **Parameter precision.** ``scale`` and ``lo`` travel in fp32 by default;
    ``param_dtype=bfloat16`` halves their bytes. AdaQP computes the codes with fp32 parameters
    and then sends them as bf16, which biases 8-bit messages by up to about one quantization
    step (about 1.1Δ on N(0, 1) rows, reference 1.16). Here the sender instead rounds the
    parameters first -- ``lo`` down and ``scale`` down to bf16, so that ``[lo, lo + L / scale]``
    still covers the row -- and computes the codes against the values the receiver will see. The
    message stays unbiased; the price is a slightly coarser grid, and a much coarser one for rows
    whose spread is small next to ``|lo|`` (the bf16 ulp of ``lo`` is ``|lo| / 128``). In bf16
    mode a constant row is exact when its value is representable in bf16 (zeros always are);
    other constant rows are rounded stochastically, without bias. The row max is not forced to
    ``q = L`` in bf16 mode (it would bias it).

    Args:
      x: ``f32[N, D]``, finite.
      bits: 2, 4 or 8.
      key: a single PRNG key; fold in device, layer, direction and step before calling. A fixed
        key reproduces bit-identical packets on every backend.
      backend: `Backend.REFERENCE` or `Backend.PALLAS`; None picks the platform default (Pallas
        on GPU, the reference elsewhere), or Pallas when ``interpret=True``.
      interpret: run the Pallas kernel in interpret mode (CPU tests). JAX's Pallas interpreter
        fails inside ``jax.shard_map`` with the replication check on; the compiled kernel and
        the reference run there.
      param_dtype: dtype of the transmitted ``scale`` and ``lo``: float32 (default) or bfloat16
        (unbiased here, but a coarser grid; see above).
      block_sizes: Pallas tile sizes; only with the Pallas backend.

    Returns:
      ``packed: uint8[ceil(N / k), D]``, ``scale: P[N]`` (``(2^b - 1) / (hi - lo)``, or 1 for
      constant rows) and ``lo: P[N]``; the receiver computes ``x̂ = q / scale + lo``.

    Raises:
      ValueError: bad ``bits``, ``x`` not rank-2 float32 with ``D >= 1``, a bad key, an unknown
        ``param_dtype`` or ``backend``, or options that do not apply to the chosen backend.
    """
    backend = resolve_backend(backend, interpret=interpret)
    if backend is Backend.REFERENCE:
        if block_sizes is not None:
            raise ValueError("block_sizes applies to the Pallas backend only")
        return quantize_reference(x, bits, key, param_dtype=param_dtype)
    return quantize_pallas(
        x, bits, key, param_dtype=param_dtype, interpret=interpret, block_sizes=block_sizes
    )


@functools.partial(
    jax.jit, static_argnames=("bits", "num_rows", "backend", "interpret", "block_sizes")
)
def dequantize(
    packed: jax.Array,
    scale: jax.Array,
    lo: jax.Array,
    bits: int,
    num_rows: int,
    *,
    backend: Backend | None = None,
    interpret: bool = False,
    block_sizes: DequantizeBlockSizes | None = None,
) -> jax.Array:
    """Unpacks and dequantizes a `quantize` message: ``x̂ = q / scale + lo``.

    Args:
      packed: ``uint8[ceil(num_rows / k), D]``.
      scale: ``P[num_rows]`` (float32 or bfloat16), as sent by `quantize`.
      lo: ``P[num_rows]``.
      bits: 2, 4 or 8 (static).
      num_rows: N (static); 0 gives ``f32[0, D]``.
      backend, interpret: as in `quantize`.
      block_sizes: Pallas tile sizes; only with the Pallas backend.

    Returns:
      ``f32[num_rows, D]``.

    Raises:
      ValueError: bad ``bits`` or ``num_rows``; ``packed``, ``scale`` or ``lo`` of the wrong
        dtype or shape; options that do not apply to the chosen backend.
    """
    backend = resolve_backend(backend, interpret=interpret)
    if backend is Backend.REFERENCE:
        if block_sizes is not None:
            raise ValueError("block_sizes applies to the Pallas backend only")
        return dequantize_reference(packed, scale, lo, bits, num_rows)
    return dequantize_pallas(
        packed, scale, lo, bits, num_rows, interpret=interpret, block_sizes=block_sizes
    )
