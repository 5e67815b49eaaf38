"""Device decode of a bitmap-compressed walk corpus (FaBC, FeLoG §5.2.2).

The host encoder (:func:`jaxgraph.embed.compress.encode`) turns ``W`` padded walks of length
``L`` into ``hot_ids: int32[Wh, k]`` (``Wh = W``, or 1 shared; ``-1`` an unused slot),
``bitmaps: uint8[W, k, ceil(L / 8)]`` (bit ``j % 8``, LSB first, of byte ``j // 8`` of
``bitmaps[w, s]`` set iff position ``j`` of walk ``w`` holds ``hot_ids[w, s]``), ``residual:
int32[R]`` (the other tokens, walk after walk) and ``lengths: int32[W]``. For ``j < lengths[w]``::

    hot(w, j)   = OR_s bit(w, s, j)                                  (at most one s is set)
    out[w, j]   = hot_ids[w, s]                                       if bit(w, s, j)
                = residual[off[w] + #{i <= j : not hot(w, i)} - 1]   otherwise
    off[w]      = sum_{v < w} (lengths[v] - popcount(bitmaps[v]))    (exclusive prefix sum)

and ``out[w, j] = -1`` past ``lengths[w]``. The encoder guarantees, and the device does not
check, disjoint bitmaps, no bits past a walk's length and ``R`` non-hot positions; a malformed
input gives wrong tokens, never an out-of-bounds read. The kernel runs one program per block of
walks, the offsets computed before it (:func:`residual_offsets`), every input read by gathers.
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

from pallas_kernels.backend import _TILE_ELEMENTS, Backend, _next_pow2, resolve_backend

PAD = -1
"""The token of padding positions (``jaxgraph.embed.walks.PAD``)."""


def _check_inputs(hot_ids, bitmaps, residual, lengths, walk_length) -> tuple[int, int, int]:
    """``(W, k, B)`` after validating dtypes and shapes (ValueError on any mismatch)."""
    if isinstance(walk_length, bool) or not isinstance(walk_length, int | np.integer):
        raise ValueError(f"walk_length must be an int, got {walk_length!r}")
    if walk_length < 1:
        raise ValueError(f"walk_length must be >= 1, got {walk_length}")
    for name, a, dtype, ndim in (
        ("hot_ids", hot_ids, jnp.int32, 2),
        ("bitmaps", bitmaps, jnp.uint8, 3),
        ("residual", residual, jnp.int32, 1),
        ("lengths", lengths, jnp.int32, 1),
    ):
        if a.dtype != dtype or a.ndim != ndim:
            raise ValueError(
                f"{name} must be a rank-{ndim} {np.dtype(dtype).name} array, "
                f"got {a.dtype}{list(a.shape)}"
            )
    w, k, b = bitmaps.shape
    if b != -(-walk_length // 8):
        raise ValueError(f"bitmaps need ceil({walk_length} / 8) bytes per walk, got {b}")
    if lengths.shape[0] != w:
        raise ValueError(f"lengths has {lengths.shape[0]} walks, bitmaps {w}")
    if hot_ids.shape[1] != k or hot_ids.shape[0] not in (1, w):
        raise ValueError(f"hot_ids must be [{w}, {k}] or [1, {k}], got {list(hot_ids.shape)}")
    return w, k, b


def residual_offsets(bitmaps: jax.Array, lengths: jax.Array) -> jax.Array:
    """Where each walk's residual starts: ``int32[W]`` exclusive prefix sums of
    ``lengths - popcount(bitmaps)``.

    Shapes:
      ``uint8[W, k, B], int32[W] -> int32[W]``.
    """
    hot = jnp.sum(lax.population_count(bitmaps).astype(jnp.int32), axis=(1, 2))  # int32[W]
    counts = lengths - hot
    return jnp.cumsum(counts) - counts


@functools.partial(jax.jit, static_argnames=("walk_length",))
def decode_reference(
    hot_ids: jax.Array,
    bitmaps: jax.Array,
    residual: jax.Array,
    lengths: jax.Array,
    *,
    walk_length: int,
) -> jax.Array:
    """Pure-``jnp`` decode; same contract as `decode`."""
    w, k, _ = _check_inputs(hot_ids, bitmaps, residual, lengths, walk_length)
    if w == 0:
        return jnp.zeros((0, walk_length), jnp.int32)
    j = jnp.arange(walk_length, dtype=jnp.int32)
    in_walk = j[None, :] < lengths[:, None]  # bool[W, L]
    byte = bitmaps[:, :, j >> 3].astype(jnp.int32)  # int32[W, k, L]
    bits = ((byte >> (j & 7)) & 1).astype(bool) & in_walk[:, None, :]  # bool[W, k, L]
    hot = jnp.any(bits, axis=1)  # bool[W, L]
    if k:
        slot = jnp.argmax(bits, axis=1)  # int32[W, L]
        ids = jnp.broadcast_to(hot_ids, (w, k))
        hot_val = jnp.take_along_axis(ids, slot, axis=1)  # int32[W, L]
    else:
        hot_val = jnp.full((w, walk_length), PAD, jnp.int32)
    res = in_walk & ~hot  # bool[W, L]
    rank = jnp.cumsum(res.astype(jnp.int32), axis=1) - 1
    idx = residual_offsets(bitmaps, lengths)[:, None] + rank  # int32[W, L]
    padded = jnp.concatenate([residual, jnp.full((1,), PAD, jnp.int32)])  # R = 0 allowed
    res_val = padded[jnp.clip(idx, 0, residual.shape[0])]
    return jnp.where(hot, hot_val, jnp.where(res, res_val, PAD))


@dataclasses.dataclass(frozen=True)
class DecodeBlockSizes:
    """Tile of the decode kernel: ``walks`` walks by ``next_pow2(L)`` positions.

    Attributes:
      walks: a power of two; None: about 4096 positions per tile (at most 256 walks, no more
        than the input needs).
      num_warps: Triton warps per program.
      num_stages: Triton pipelining stages.
    """

    walks: int | None = None
    num_warps: int = 4
    num_stages: int = 1

    def resolve(self, num_walks: int, walk_length: int) -> int:
        """Walks per program for ``num_walks`` walks of length ``walk_length``."""
        walks = self.walks
        if walks is None:
            cols = _next_pow2(walk_length)
            return max(1, min(_TILE_ELEMENTS // cols, 256, _next_pow2(num_walks)))
        if walks < 1 or walks & (walks - 1):
            raise ValueError(f"walks must be a power of two, got {walks}")
        return walks


def _decode_kernel(
    hot_ref, bits_ref, res_ref, len_ref, off_ref, out_ref, *, num_walks, walk_length, k, shared
):
    """One tile: walks ``[pid * BW, (pid + 1) * BW)`` -> ``out[BW, Lp]``.

    Refs (whole arrays, read with gathers): ``hot_ref: int32[Wh * k]``,
    ``bits_ref: uint8[W * k * B]``, ``res_ref: int32[R + 1]``, ``len_ref, off_ref: int32[W]``.
    """
    bw, cols = out_ref.shape
    nbytes = -(-walk_length // 8)
    pid = pl.program_id(0)
    w = pid * bw + lax.broadcasted_iota(jnp.int32, (bw,), 0)  # int32[BW]
    w_ok = w < num_walks
    wc = jnp.where(w_ok, w, 0)  # in-bounds addresses for masked-off lanes
    length = plgpu.load(len_ref.at[wc], mask=w_ok, other=0)  # int32[BW]
    off = plgpu.load(off_ref.at[wc], mask=w_ok, other=0)  # int32[BW]
    j = lax.broadcasted_iota(jnp.int32, (bw, cols), 1)  # int32[BW, Lp]
    in_walk = j < length[:, None]  # bool[BW, Lp]
    hot = jnp.zeros((bw, cols), jnp.bool_)
    hot_val = jnp.full((bw, cols), PAD, jnp.int32)
    wrow = lax.broadcast_in_dim(wc, (bw, cols), (0,))  # int32[BW, Lp]
    for s in range(k):
        byte = plgpu.load(
            bits_ref.at[(wrow * k + s) * nbytes + (j >> 3)], mask=in_walk, other=0
        ).astype(jnp.int32)  # int32[BW, Lp]
        bit = ((byte >> (j & 7)) & 1) == 1
        hrow = jnp.zeros_like(wc) if shared else wc
        hid = plgpu.load(hot_ref.at[hrow * k + s], mask=w_ok, other=PAD)  # int32[BW]
        hot_val = jnp.where(bit, lax.broadcast_in_dim(hid, (bw, cols), (0,)), hot_val)
        hot = hot | bit
    res = in_walk & ~hot  # bool[BW, Lp]
    rank = jnp.cumsum(res.astype(jnp.int32), axis=1) - 1  # int32[BW, Lp]
    idx = jnp.clip(off[:, None] + rank, 0, res_ref.shape[0] - 1)
    res_val = plgpu.load(res_ref.at[idx], mask=res, other=PAD)  # int32[BW, Lp]
    out = jnp.where(hot, hot_val, jnp.where(res, res_val, PAD))
    plgpu.store(out_ref, out, mask=w_ok[:, None] & (j < walk_length))


@functools.partial(jax.jit, static_argnames=("walk_length", "interpret", "block_sizes"))
def decode_pallas(
    hot_ids: jax.Array,
    bitmaps: jax.Array,
    residual: jax.Array,
    lengths: jax.Array,
    *,
    walk_length: int,
    interpret: bool = False,
    block_sizes: DecodeBlockSizes | None = None,
) -> jax.Array:
    """The Pallas (Triton) decode kernel; same contract as `decode_reference`.
    ``interpret=True`` runs it on CPU (slow; for tests; not inside ``jax.shard_map``)."""
    w, k, _ = _check_inputs(hot_ids, bitmaps, residual, lengths, walk_length)
    block_sizes = block_sizes or DecodeBlockSizes()
    bw = block_sizes.resolve(w, walk_length)
    if w == 0:
        return jnp.zeros((0, walk_length), jnp.int32)
    cols = _next_pow2(walk_length)
    offsets = residual_offsets(bitmaps, lengths)
    flat = (
        hot_ids.reshape(-1) if k else jnp.zeros((1,), jnp.int32),
        bitmaps.reshape(-1) if k else jnp.zeros((1,), jnp.uint8),
        jnp.concatenate([residual, jnp.full((1,), PAD, jnp.int32)]),  # never empty
        lengths,
        offsets,
    )
    whole = [pl.BlockSpec(a.shape, lambda i: (0,)) for a in flat]
    kernel = functools.partial(
        _decode_kernel, num_walks=w, walk_length=walk_length, k=k, shared=hot_ids.shape[0] == 1
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((w, walk_length), jnp.int32),
        grid=(pl.cdiv(w, bw),),
        in_specs=whole,
        out_specs=pl.BlockSpec((bw, cols), lambda i: (i, 0)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(
            num_warps=block_sizes.num_warps, num_stages=block_sizes.num_stages
        ),
        name="bitmap_decode",
    )(*flat)


@functools.partial(jax.jit, static_argnames=("walk_length", "backend", "interpret", "block_sizes"))
def decode(
    hot_ids: jax.Array,
    bitmaps: jax.Array,
    residual: jax.Array,
    lengths: jax.Array,
    *,
    walk_length: int,
    backend: Backend | None = None,
    interpret: bool = False,
    block_sizes: DecodeBlockSizes | None = None,
) -> jax.Array:
    """Decodes a bitmap-compressed walk corpus to ``int32[W, L]`` (padding ``-1``; the layout
    and formula: module docstring). ``walk_length`` is static; ``W = 0`` gives ``int32[0, L]``.

    ``lengths`` are each in ``[0, L]``; ``backend``, ``interpret`` (not inside ``shard_map``)
    and ``block_sizes`` as in :func:`pallas_kernels.quantize.quantize`. Raises ValueError on
    wrong dtypes or shapes, a bad ``walk_length`` or ``backend``, or options that do not apply.
    """
    backend = resolve_backend(backend, interpret=interpret)
    if backend is Backend.REFERENCE:
        if block_sizes is not None:
            raise ValueError("block_sizes applies to the Pallas backend only")
        return decode_reference(hot_ids, bitmaps, residual, lengths, walk_length=walk_length)
    return decode_pallas(
        hot_ids,
        bitmaps,
        residual,
        lengths,
        walk_length=walk_length,
        interpret=interpret,
        block_sizes=block_sizes,
    )
