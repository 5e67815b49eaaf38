"""Stochastic row-wise message quantization: the Pallas (Triton) kernels and the entry points.

Library code calls `quantize` and `dequantize` (AdaQP's semantics, with fixes)::

    quantize(x, b, key)                 -> packed: uint8[ceil(N / k), D], scale: P[N], lo: P[N]
    dequantize(packed, scale, lo, b, N) -> x̂ = q / scale + lo: f32[N, D]

(``P``: float32 or bfloat16). The row math is in :mod:`pallas_kernels.quantize_ref`, the noise in
:mod:`pallas_kernels.random_bits`, the layout in :mod:`pallas_kernels.packing`. Both run the
reference (default on CPU and TPU) or the Pallas kernel (default on GPU; interpreted with
``interpret=True``), bit for bit the same for one key, since the kernels apply the reference's
row functions to tiles. `quantize_pallas` holds a whole row in a tile (for the row min and
max), so it takes ``D <= 16384``. Tiles are powers of two, as Triton requires.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels.backend import _TILE_ELEMENTS, Backend, _next_pow2, resolve_backend
from pallas_kernels.packing import check_bits, check_packed, pack_block, packed_rows, unpack_block
from pallas_kernels.packing import unpack_codes as unpack_codes  # re-exported for callers
from pallas_kernels.quantize_ref import (
    check_params,
    check_quantize_args,
    dequantize_reference,
    dequantize_rows,
    empty_quantized,
    quantize_reference,
    quantize_rows,
)
from pallas_kernels.random_bits import (
    draw_rows,
    seed_words,
    threefry2x32,
    uniform_ints,
    uniform_ints_from_uniforms,
)

_MAX_QUANTIZE_COLS = 16384  # one row per tile; wider rows would spill registers


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
        m = draw_rows(bits)
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
        uints = uniform_ints_from_uniforms(plgpu.load(u_ref, mask=mask, other=0.0), bits)
    else:
        groups = rows // draw_rows(bits)
        group_ids = pid * groups + lax.broadcasted_iota(jnp.int32, (groups, cols), 0)
        c1 = lax.broadcast_in_dim(col_ids, (groups, cols), (1,))
        words = threefry2x32(
            seed_ref[0], seed_ref[1], group_ids.astype(jnp.uint32), c1.astype(jnp.uint32)
        )
        uints = uniform_ints(*words, bits)
    codes, scale, lo = quantize_rows(
        x, uints, bits, bf16_params, ieee_asm, valid_cols=col_ok[None, :]
    )
    num_groups = -(-num_rows // k)
    packed_ok = pid * (rows // k) + lax.broadcasted_iota(jnp.int32, (rows // k,), 0) < num_groups
    plgpu.store(packed_ref, pack_block(codes, bits), mask=packed_ok[:, None] & col_ok[None, :])
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
    """The Pallas (Triton) quantize kernel; same contract as `quantize_reference` (bit for bit).

    ``interpret=True`` runs it on CPU (slow; for tests); with ``uniforms`` the kernel reads them
    instead of hashing the key. One program per block of ``rows`` input rows and all
    ``next_pow2(D)`` columns (`QuantizeBlockSizes`), masked to ``N`` and ``D``.
    """
    bits, param_dtype = check_quantize_args(x, bits, key, uniforms, param_dtype)
    n, d = x.shape
    if d > _MAX_QUANTIZE_COLS:
        raise ValueError(
            f"the Pallas quantize kernel holds a whole row in one tile; D={d} exceeds "
            f"{_MAX_QUANTIZE_COLS}. Use Backend.REFERENCE."
        )
    block_sizes = block_sizes or QuantizeBlockSizes()
    rows, num_warps = block_sizes.resolve(n, d, bits)
    seed = None if key is None else seed_words(key)
    if n == 0:
        return empty_quantized(d, param_dtype)
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
    out = dequantize_rows(unpack_block(packed, bits), scale, lo, ieee_asm)
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
    """The Pallas (Triton) dequantize kernel; same contract as `dequantize_reference`: a grid
    over (row block, column block) tiles (`DequantizeBlockSizes`)."""
    bits = check_bits(bits)
    check_packed(packed, bits, num_rows)
    check_params(scale, lo, num_rows)
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

    Jit-compatible: ``bits`` is static; ``N = 0`` gives empty arrays.

    **bf16 parameters.** AdaQP computes the codes with fp32 parameters and sends them as bf16,
    which biases 8-bit messages by up to about one step. Here the sender first rounds ``lo``
    and ``scale`` down to bf16 (so ``[lo, lo + L / scale]`` still covers the row) and computes
    the codes against what the receiver sees: unbiased, on a slightly coarser grid (much
    coarser for rows whose spread is small next to ``|lo|``). The row max is then not forced to
    ``q = L``, and constant rows not representable in bf16 are rounded stochastically.

    Args:
      x: ``f32[N, D]``, finite; ``bits``: 2, 4 or 8.
      key: a single PRNG key with device, layer, direction and step folded in; a fixed key
        reproduces bit-identical packets on every backend.
      backend: `Backend`, or None for :func:`~pallas_kernels.backend.resolve_backend`'s choice.
      interpret: run the Pallas kernel interpreted (CPU tests; not inside ``jax.shard_map``).
      param_dtype: dtype of the transmitted ``scale`` and ``lo``: float32 or bfloat16 (above).
      block_sizes: Pallas tile sizes; only with the Pallas backend.

    Returns:
      ``packed: uint8[ceil(N / k), D]``, ``scale: P[N]`` (``(2^b - 1) / (hi - lo)``, or 1 for
      constant rows) and ``lo: P[N]``.

    Raises:
      ValueError: bad arguments, or options that do not apply to the chosen backend.
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
    """Unpacks and dequantizes a `quantize` message: ``x̂ = q / scale + lo``, ``f32[N, D]``.

    ``packed: uint8[ceil(N / k), D]``, ``scale, lo: P[N]`` as sent by `quantize`; ``bits`` and
    ``num_rows = N`` are static; ``backend``, ``interpret`` and ``block_sizes`` as in
    `quantize`. Raises ValueError on bad arguments or options that do not apply.
    """
    backend = resolve_backend(backend, interpret=interpret)
    if backend is Backend.REFERENCE:
        if block_sizes is not None:
            raise ValueError("block_sizes applies to the Pallas backend only")
        return dequantize_reference(packed, scale, lo, bits, num_rows)
    return dequantize_pallas(
        packed, scale, lo, bits, num_rows, interpret=interpret, block_sizes=block_sizes
    )
