"""Stochastic row-wise quantization in pure ``jnp``: the row math and the references.

For rows ``x: f32[N, D]`` at ``b`` bits in {2, 4, 8}, with ``L = 2^b - 1``:

    lo = min_d x[n, d]        hi = max_d x[n, d]        scale = L / (hi - lo)
    q  = clip(floor((x - lo) * scale + u), 0, L),   u ~ U[0, 1)      (stochastic rounding)
    x̂  = q / scale + lo                                              (receiver)

so ``E[x̂] = x`` (AdaQP, references 1.3 and 7.1). Fixes over the AdaQP CUDA kernel, each
covered by a test: codes are clamped to ``[0, L]``; rows with ``hi == lo``, or whose ``scale``
would overflow fp32, get codes 0 and ``scale = 1`` (no NaN or inf); the row max gets ``q = L``
(fp32 parameters); the packed block is exactly ``ceil(N / k) * D`` bytes; randomness comes from
an explicit key; the rounding is fixed point (:func:`quantize_codes_reference`); bf16
parameters are rounded before the codes (:func:`pallas_kernels.quantize.quantize`). Inputs must
be finite. `quantize_rows` and `dequantize_rows` hold the math once, in ops Triton lowers, for
the references (whole arrays) and the kernels (tiles) alike.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.pallas import triton as plgpu

from pallas_kernels.packing import check_bits, check_packed, pack_block, packed_rows, unpack_block
from pallas_kernels.random_bits import (
    counter_uniform_ints,
    draw_rows,
    seed_words,
    uniform_bits,
    uniform_ints_from_uniforms,
)

_PARAM_DTYPES = (np.dtype(jnp.float32), np.dtype(jnp.bfloat16))
_FLT_INF = float("inf")


def check_quantize_args(x, bits, key, uniforms, param_dtype) -> tuple[int, np.dtype]:
    """``(bits, param_dtype)`` of a quantize call, validated with ``x`` and its randomness.

    Raises:
      ValueError: bad ``bits`` or ``param_dtype``, ``x`` not ``f32[N, D >= 1]``, not exactly one
        of ``key`` and ``uniforms``, or ``uniforms`` not of the shape of ``x``.
    """
    bits = check_bits(bits)
    try:
        dtype = np.dtype(param_dtype)
    except TypeError:
        dtype = None
    if dtype not in _PARAM_DTYPES:
        raise ValueError(f"param_dtype must be float32 or bfloat16, got {param_dtype!r}")
    if x.ndim != 2:
        raise ValueError(f"x must have rank 2 [N, D], got shape {x.shape}")
    if x.dtype != jnp.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    if x.shape[1] == 0:
        raise ValueError(f"x must have at least one column (D >= 1), got shape {x.shape}")
    if (key is None) == (uniforms is None):
        raise ValueError("pass exactly one of key and uniforms")
    if uniforms is not None and (uniforms.shape != x.shape or uniforms.dtype != jnp.float32):
        raise ValueError(
            f"uniforms must be float32 of the shape of x {x.shape}, got {uniforms.dtype}"
            f"{list(uniforms.shape)}"
        )
    return bits, dtype


def check_params(scale, lo, num_rows: int):
    """Validates the transmitted parameters of ``num_rows`` rows.

    Raises:
      ValueError: ``scale`` or ``lo`` is not float32 or bfloat16 of shape ``(num_rows,)``.
    """
    for name, v in (("scale", scale), ("lo", lo)):
        if v.shape != (num_rows,) or np.dtype(v.dtype) not in _PARAM_DTYPES:
            raise ValueError(
                f"{name} must be float32 or bfloat16 of shape ({num_rows},), got "
                f"{v.dtype}{list(v.shape)}"
            )


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


def quantize_rows(x, uints, bits: int, bf16_params: bool, ieee_asm: bool, valid_cols=None):
    """Codes and parameters of a row block: ``x: f32[R, C]`` and random ``uints: i32[R, C]`` in
    ``[0, 2^R)`` -> ``(codes i32[R, C] in [0, L], scale f32[R], lo f32[R])``.

    ``bf16_params`` rounds ``lo`` and ``scale`` down to bf16 before the codes are computed;
    ``ieee_asm`` divides by inline PTX (Triton kernels only); columns where ``valid_cols``
    (``bool[1, C]``, None: all) is False are ignored.
    """
    levels = 2**bits - 1
    r = uniform_bits(bits)
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


def dequantize_rows(codes, scale, lo, ieee_asm: bool):
    """``x̂ = q * (1 / scale) + lo``: ``codes u32[R, C]``, ``scale, lo: f32[R]`` -> ``f32[R, C]``.

    One reciprocal per row (XLA rewrites ``a / broadcast(b)`` so anyway), which keeps every
    backend on the same operations, up to the GPU's fused multiply-add (1 ulp).
    """
    q = codes.astype(jnp.int32).astype(jnp.float32)
    step = _divide(jnp.ones_like(scale), scale, ieee_asm)
    return q * step[:, None] + lo[:, None]


@functools.partial(jax.jit, static_argnames=("bits", "param_dtype"))
def quantize_codes_reference(
    x: jax.Array, bits: int, uniforms: jax.Array, *, param_dtype=jnp.float32
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unpacked codes with explicit uniforms (pure ``jnp``).

    **Exact, portable rounding** in fixed point: only one subtraction and one multiplication
    decide a code (identical on every IEEE backend, immune to FMA contraction)::

        t = clip(round((x - lo) * scale * 2^R), 0, L * 2^R)        q = (t + U) >> R

    This is ``floor(y + u)`` with ``y = t / 2^R``, ``u = U / 2^R``, and ``E[q] = t / 2^R``: a
    bias of at most ``2^-(R+1)`` steps. On GPU ``L / (hi - lo)`` uses IEEE division
    (``div.rn.f32``), so the kernel's codes equal the reference's bit for bit on one platform
    (XLA on CPU flushes denormals, so a denormal spread may differ across platforms).

    ``x, uniforms: f32[N, D]`` (``u`` used as ``floor(u * 2^R)``, clamped) ->
    ``(codes uint8[N, D], scale P[N], lo P[N])``; ValueError on bad arguments.
    """
    bits, param_dtype = check_quantize_args(x, bits, None, uniforms, param_dtype)
    codes, scale, lo = quantize_rows(
        x, uniform_ints_from_uniforms(uniforms, bits), bits, param_dtype != jnp.float32, False
    )
    return codes.astype(jnp.uint8), scale.astype(param_dtype), lo.astype(param_dtype)


def empty_quantized(d: int, param_dtype):
    """The message of ``N = 0`` rows: ``(uint8[0, d], P[0], P[0])``."""
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
    bits, param_dtype = check_quantize_args(x, bits, key, uniforms, param_dtype)
    seed = None if key is None else seed_words(key)
    n, d = x.shape
    if n == 0:
        return empty_quantized(d, param_dtype)
    m = draw_rows(bits)
    n_pad = -(-n // m) * m  # a multiple of k too; zero rows give zero codes
    xp = jnp.pad(x, ((0, n_pad - n), (0, 0)))
    if uniforms is None:
        uints = counter_uniform_ints(seed, n_pad, d, bits)
    else:
        uints = uniform_ints_from_uniforms(jnp.pad(uniforms, ((0, n_pad - n), (0, 0))), bits)
    codes, scale, lo = quantize_rows(xp, uints, bits, param_dtype != jnp.float32, False)
    packed = pack_block(codes, bits)[: packed_rows(n, bits)]
    return packed, scale[:n].astype(param_dtype), lo[:n].astype(param_dtype)


@functools.partial(jax.jit, static_argnames=("bits", "num_rows"))
def dequantize_reference(
    packed: jax.Array, scale: jax.Array, lo: jax.Array, bits: int, num_rows: int
) -> jax.Array:
    """Pure-``jnp`` unpack and ``x̂ = q / scale + lo``; same contract as `dequantize`."""
    bits = check_bits(bits)
    check_packed(packed, bits, num_rows)
    check_params(scale, lo, num_rows)
    codes = unpack_block(packed, bits)[:num_rows]
    return dequantize_rows(codes, scale.astype(jnp.float32), lo.astype(jnp.float32), False)
