"""The stochastically quantized ring halo exchange, on the device (AdaQP's message compression).

Halo rows travel as 2-, 4- or 8-bit codes (or raw fp32 at "32 bits"), forward and, for the
gradient rows sent back, backward (Wan et al., MLSys 2023), in the bucket layouts of
:mod:`jaxgraph.partition.buckets` (bytes: :mod:`jaxgraph.comm.wirebytes`). Each device sends one
byte buffer per round, its buckets' real bytes back to back by ascending width, padded to the
round's largest sender's total (not each bucket to its largest sender, which under a mixed
assignment would pay for the widest mix of every width at once). The offsets are data, so the
program is the same on every device. A ``custom_vjp`` sends the gradients back along the
reversed ring at the backward widths and scatter-adds them into the sender's rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.ring import ring_perm
from jaxgraph.comm.wirebytes import chunk_bytes, exchange_bytes, round_buffer_bytes, round_units
from jaxgraph.mesh import to_varying, varying_axes
from jaxgraph.partition.buckets import (
    ExchangeLayout,
    block_offsets,
    codes_per_row_block,
    piece_bytes,
)
from pallas_kernels.quantize import dequantize, quantize


def _as_bytes(x: jax.Array) -> jax.Array:
    """``[N, ...]`` -> ``uint8[N, ...(, itemsize)]``: the bytes of each element, last."""
    return x if x.dtype == jnp.uint8 else jax.lax.bitcast_convert_type(x, jnp.uint8)


def _exchange(source, layout: ExchangeLayout, key, axis_name, num_parts, reverse):
    """The rows of ``layout`` gathered from ``source``, quantized, sent around the ring and
    dequantized: ``f32[M, D]``, the received rows of all widths (ascending) and rounds.

    Each width is quantized once for all rounds (key ``fold_in(key, w)``). Round ``r`` sends,
    per width, the codes and then the ``(scale, lo)`` of the device's real rows, in one buffer
    to ``d ± r``; bytes past a sender's real rows are zeroed, and the rows they decode to are
    dropped by the placement. Few, large operations keep the compile time small.
    """
    dim = source.shape[-1]
    counts = layout.counts
    if not layout.widths:  # no rounds (P = 1)
        return jnp.zeros((0, dim), source.dtype)
    data, params = {}, {}
    pb = layout.param_bytes  # (scale, lo) bytes per row: fp32 or bfloat16
    param_dtype = jnp.float32 if pb == 8 else jnp.bfloat16
    for w in layout.widths:
        x = jnp.take(source, layout.rows[f"b{w}"], axis=0, mode="fill", fill_value=0)
        if w == 32:
            data[w] = _as_bytes(x.astype(jnp.float32)).reshape(x.shape[0], 4 * dim)
        else:
            packed, scale, lo = quantize(x, w, jax.random.fold_in(key, w), param_dtype=param_dtype)
            data[w] = _computed_once(packed, key)  # [N / k, D]
            params[w] = _as_bytes(jnp.stack([scale, lo], axis=1).astype(param_dtype))
            params[w] = params[w].reshape(-1, pb)  # [N, pb]
    lengths = round_buffer_bytes(layout, dim)
    if layout.chunks:
        units, unit = round_units(layout, dim, axis_name), chunk_bytes(layout, dim)
    offsets = {w: block_offsets(counts, w) for w in layout.widths}
    received, q = [], 0
    for r, rc in enumerate(counts):
        pieces = []  # (static bytes, real length in bytes)
        for w, c in rc:
            k, start = codes_per_row_block(w), offsets[w][r]
            code_bytes, param_bytes = piece_bytes(layout.sent[q], dim, w, pb)
            pieces.append((data[w][start // k : start // k + -(-c // k)].reshape(-1), code_bytes))
            if w < 32:
                pieces.append((params[w][start : start + c].reshape(-1), param_bytes))
            q += 1
        if not pieces:  # no device sends in this round
            received.append(None)
            continue
        buf = _pack(pieces, lengths[r])
        perm = ring_perm(num_parts, -(r + 1) if reverse else r + 1)
        if layout.chunks:
            received.append(_send_chunks(buf, units[r], unit[r], layout.chunks, axis_name, perm))
        else:
            received.append(jax.lax.ppermute(buf, axis_name, perm))
    codes, parameters, q = {w: [] for w in layout.widths}, {w: [] for w in layout.widths}, 0
    for r, rc in enumerate(counts):
        sizes = []  # per piece: (static bytes, real length in bytes)
        for w, c in rc:
            static, real = piece_bytes(c, dim, w, pb), piece_bytes(layout.got[q], dim, w, pb)
            sizes.append((static[0], real[0]))  # codes
            if w < 32:
                sizes.append((static[1], real[1]))  # parameters
            q += 1
        pieces = iter(_unpack(received[r], sizes) if sizes else ())
        for w, c in rc:
            codes[w].append(next(pieces))
            if w < 32:
                k = codes_per_row_block(w)
                parameters[w].append(next(pieces))
                # Rows that pad the bucket to whole bytes carry no parameters on the wire.
                parameters[w].append(jnp.zeros((pb * (-(-c // k) * k - c),), jnp.uint8))
    blocks = []
    for w in layout.widths:
        k, n = codes_per_row_block(w), offsets[w][-1]
        block = jnp.concatenate(codes[w])
        if w == 32:
            rows = jax.lax.bitcast_convert_type(block.reshape(n, dim, 4), jnp.float32)
        else:
            p = jax.lax.bitcast_convert_type(
                jnp.concatenate(parameters[w]).reshape(n, 2, pb // 2), param_dtype
            )
            rows = dequantize(block.reshape(n // k, dim), p[:, 0], p[:, 1], w, n)
        blocks.append(rows.astype(source.dtype))
    return jnp.concatenate(blocks)


def _pack(pieces, length: int) -> jax.Array:
    """One device's round buffer: ``uint8[length]`` holding the real bytes of each piece
    ``(static bytes, real length)`` back to back. Each piece is written whole at the running
    offset (the next overwrites its tail) into a scratch buffer that fits every piece at its
    static size, so no write is shifted by ``dynamic_update_slice``'s clamping."""
    size = max(sum(p.shape[0] for p, _ in pieces), length)
    scratch = _like_varying(jnp.zeros((size,), jnp.uint8), pieces[0][0])
    offset = jnp.int32(0)
    for piece, real in pieces:
        scratch = jax.lax.dynamic_update_slice(scratch, piece, (offset,))
        offset = offset + real
    return scratch[:length]


def _send_chunks(buf, units, unit: int, chunks: int, axis_name, perm) -> jax.Array:
    """The first ``units * unit`` bytes of ``buf`` (``uint8[2^chunks * unit]``) sent along
    ``perm``, the rest of the received buffer zero: one ``ppermute`` of ``2^j * unit`` bytes per
    set bit ``j`` of ``units``, each under a ``lax.cond`` (``units`` is identical on every
    device, from a ``pmax``)."""
    out = _like_varying(jnp.zeros_like(buf), buf)
    offset = jnp.int32(0)
    for j in reversed(range(chunks + 1)):
        size, take = unit << j, (units >> j) & 1

        def send(out, offset=offset, size=size):
            piece = jax.lax.dynamic_slice(buf, (offset,), (size,))
            piece = jax.lax.ppermute(piece, axis_name, perm)
            return jax.lax.dynamic_update_slice(out, piece, (offset,))

        out = jax.lax.cond(take == 1, send, lambda out: out, out)
        offset = offset + take * size
    return out


def _unpack(buf: jax.Array, sizes) -> list[jax.Array]:
    """The pieces of a received round buffer, ``sizes`` = per piece ``(static bytes, real
    length)`` of the sender: each read at the running offset at its static size, its bytes
    past the real length zeroed."""
    widest = max(size for size, _ in sizes)
    padded = jnp.concatenate([buf, _like_varying(jnp.zeros((widest,), jnp.uint8), buf)])
    offset, out = jnp.int32(0), []
    for size, real in sizes:
        piece = jax.lax.dynamic_slice(padded, (offset,), (size,))
        out.append(jnp.where(jnp.arange(size) < real, piece, jnp.uint8(0)))
        offset = offset + real
    return out


def _computed_once(packed: jax.Array, key: jax.Array) -> jax.Array:
    """``packed`` unchanged, but materialized once before it is sliced into rounds.

    XLA's fusion would duplicate the whole quantization (Threefry included) into every round's
    slice, multiplying the compile time (at 8 bits). An integer division by a runtime value
    counts as expensive in that heuristic, so dividing by a one XLA cannot prove constant
    (``k // k`` of the key's data, ``k`` odd) stops it, for one division per byte.
    """
    word = jax.random.key_data(key).reshape(-1)[0] | np.uint32(1)
    return packed // (word // word).astype(packed.dtype)


def _like_varying(x: jax.Array, like: jax.Array) -> jax.Array:
    """``x`` cast to vary over the mesh axes ``like`` varies over (a no-op outside shard_map)."""
    return to_varying(x, varying_axes(like))


def row_range_variance(rows: jax.Array) -> jax.Array:
    """``(D / 6) * (max_d x - min_d x)^2`` per row: the expected squared error of stochastic
    rounding at ``b`` bits times ``(2^b - 1)^2`` (a fractional part uniform on [0, 1) has
    ``E[p (1 - p)] = 1/6``), the quantity AdaQP traces. ``[N, D] -> f32[N]``."""
    if rows.shape[-1] == 0:
        return jnp.zeros(rows.shape[:-1], jnp.float32)
    rows = jax.lax.stop_gradient(rows).astype(jnp.float32)
    spread = jnp.max(rows, axis=-1) - jnp.min(rows, axis=-1)
    return (rows.shape[-1] / 6.0) * spread * spread


def slot_variances(g_halo, round_rows) -> tuple:
    """:func:`row_range_variance` of halo-layout rows ``g_halo: [H, D]``, cut into the rounds'
    slots (``round_rows[r-1]`` rows in round ``r``): the backward trace of a quantized exchange,
    per round ``f32[S_r]``."""
    v = row_range_variance(g_halo)
    offsets = np.cumsum((0,) + tuple(round_rows))
    return tuple(v[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1))


def quantized_halo(h_local, layout, key, *, axis_name, num_parts):
    """The forward data path of :func:`quantized_ring_exchange`, with no gradient rule (PipeGCN
    sends its stale halos this way): ``h_local: f32[Nl, D]`` -> the halo rows ``f32[H, D]`` of
    the forward ``layout``, quantized with ``key`` and dequantized on arrival."""
    rows = _exchange(h_local, layout, key, axis_name, num_parts, reverse=False)
    return jnp.take(rows, layout.place, axis=0, mode="fill", fill_value=0)


def quantized_halo_gradient(g_halo, layout, key, num_local: int, *, axis_name, num_parts):
    """The backward data path: halo gradient rows ``g_halo: f32[H, D]`` sent back to their
    owners along the reversed ring, quantized with ``key`` under the backward ``layout``, and
    added onto the rows they came from: ``f32[num_local, D]``."""
    rows = _exchange(g_halo, layout, key, axis_name, num_parts, reverse=True)
    # Typed like the primal input: varying over the mesh axis even with no rounds (P = 1).
    g = _like_varying(jnp.zeros((num_local, g_halo.shape[-1]), g_halo.dtype), g_halo)
    return g.at[layout.place].add(rows, mode="drop")  # padding rows point past the end


def quantized_ring_exchange(h_local, fwd, bwd, key, *, axis_name, num_parts, probe=None):
    """Ring halo exchange with quantized messages in both passes.

    Args:
      h_local: ``f32[Nl, D]`` this device's rows.
      fwd, bwd: this device's :class:`ExchangeLayout` of each direction.
      key: PRNG key of this device, step and layer; directions and widths fold it.
      probe: optional per round ``f32[S_r]`` (value ignored); its cotangent is
        :func:`slot_variances` of the gradient rows this device sends back.

    Returns:
      ``f32[H, D]``: the dequantized halo rows in the plan's halo layout.
    """
    shape, dtype = h_local.shape, h_local.dtype
    round_rows = tuple(fwd.round_rows)

    def forward(h_local, aux):
        fwd, _, key_data = aux
        fkey = jax.random.fold_in(jax.random.wrap_key_data(key_data), 0)
        return quantized_halo(h_local, fwd, fkey, axis_name=axis_name, num_parts=num_parts)

    # Index arrays and the key are explicit (non-differentiated) arguments rather than closed
    # over, so the exchange can be differentiated from outside an enclosing jit/shard_map.
    @jax.custom_vjp
    def exchange(h_local, probe, aux):
        return forward(h_local, aux)

    def exchange_fwd(h_local, probe, aux):
        return forward(h_local, aux), aux

    def exchange_bwd(aux, g_halo):
        _, bwd, key_data = aux
        bkey = jax.random.fold_in(jax.random.wrap_key_data(key_data), 1)
        g = quantized_halo_gradient(
            g_halo, bwd, bkey, shape[0], axis_name=axis_name, num_parts=num_parts
        ).astype(dtype)
        probe_ct = None if probe is None else slot_variances(g_halo, round_rows)
        return g, probe_ct, None

    exchange.defvjp(exchange_fwd, exchange_bwd)
    aux = (fwd, bwd, jax.random.key_data(key))
    return exchange(h_local, None if probe is None else tuple(probe), aux)


def quantized_layer_exchange(h_local, layouts, *, layer, key, axis_name, num_parts, probe):
    """Layer ``layer``'s quantized ring exchange under ``layouts``
    (:class:`~jaxgraph.partition.buckets.Layouts`): ``(h_remote, bytes_moved)``."""
    if key is None:
        raise ValueError("the quantized exchange needs a PRNG key")
    fwd, bwd = layouts.fwd[layer], layouts.bwd[layer]
    h_remote = quantized_ring_exchange(
        h_local, fwd, bwd, key, axis_name=axis_name, num_parts=num_parts, probe=probe
    )
    dim = h_local.shape[-1]
    nbytes = exchange_bytes(fwd, dim, axis_name, num_parts)
    if layer > 0:  # the first layer's input is data: no backward exchange
        nbytes = nbytes + exchange_bytes(bwd, dim, axis_name, num_parts)
    return h_remote, nbytes


__all__ = [
    "quantized_halo",
    "quantized_halo_gradient",
    "quantized_layer_exchange",
    "quantized_ring_exchange",
    "row_range_variance",
    "slot_variances",
]
