"""Byte accounting of the quantized ring exchange: the bytes each round's buffer holds, what
the collectives move (exact and chunked layouts), inside the step and on the host, and the
per-exchange report over the mesh. The size of one bucket on the wire is
:func:`jaxgraph.partition.buckets.wire_bytes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.partition.buckets import (
    QUANT_WIDTHS,
    BitAssignment,
    ExchangeLayout,
    bucket_state,
    piece_bytes,
    wire_bytes,
)
from jaxgraph.partition.halo import HaloPlan


def round_buffer_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Length of each round's byte buffer for rows of width ``dim``: the largest sender's total
    (exact layout), or the round's capacity in whole units (chunked layout: :func:`chunk_bytes`;
    only the units the largest sender fills travel, :func:`round_moved_bytes`)."""
    if not layout.chunks:
        return _largest_round_bytes(layout, dim)
    return tuple(u << layout.chunks for u in chunk_bytes(layout, dim))


def _largest_round_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Per round, the largest ``a * dim + b`` of ``round_bytes``: the largest sender's bytes
    (exact layout) or the round's capacity (chunked layout)."""
    return tuple(max((a * dim + b for a, b in rb), default=0) for rb in layout.round_bytes)


def chunk_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Per round, the transfer unit ``u`` of a chunked layout: capacity / ``2^J``, rounded up."""
    if not layout.chunks:
        raise ValueError("an exact layout (chunks = 0) has no transfer unit")
    return tuple(-(-c // (1 << layout.chunks)) for c in _largest_round_bytes(layout, dim))


def _sender_bytes(layout: ExchangeLayout, dim: int, sent) -> list:
    """Per round, the bytes of a sender's buckets in the round's buffer, from its real rows
    per bucket ``sent`` (``[..., Q]``, host or device) -> per round ``[...]``."""
    out, q = [], 0
    for rc in layout.counts:
        total = 0
        for w, _ in rc:
            total = total + sum(piece_bytes(sent[..., q], dim, w, layout.param_bytes))
            q += 1
        out.append(total)
    return out


def round_moved_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Bytes every device sends in each round (host side). Exact layout: the round's buffer.
    Chunked layout: the units the round's largest sender fills."""
    if not layout.chunks:
        return round_buffer_bytes(layout, dim)
    totals = _sender_bytes(layout, dim, np.asarray(layout.sent))
    return tuple(
        -(-int(np.max(t)) // u) * u if u else 0
        for t, u in zip(totals, chunk_bytes(layout, dim), strict=True)
    )


def _agreement_bytes(layout: ExchangeLayout, num_parts: int) -> int:
    """Bytes one device sends for a chunked layout's ``pmax`` of ``int32[R]`` (counted as an
    all-gather, an upper bound of a ring all-reduce's ``2 (P - 1) / P`` of the vector)."""
    return (num_parts - 1) * 4 * len(layout.counts) if layout.chunks else 0


def layout_bytes(layout: ExchangeLayout, dim: int) -> int:
    """Bytes one device sends in one exchange with ``layout`` (host side: padded round
    buffers; for a chunked layout, the units sent and the ``pmax`` that agrees on them)."""
    if not layout.chunks:  # static: also inside the step
        return sum(round_buffer_bytes(layout, dim))
    num_parts = np.asarray(layout.sent).shape[0]
    return sum(round_moved_bytes(layout, dim)) + _agreement_bytes(layout, num_parts)


def round_units(layout: ExchangeLayout, dim: int, axis_name) -> jax.Array:
    """Device side, chunked layout: ``int32[R]``, per round the units the largest sender
    fills, from each device's own bucket sizes by a ``pmax`` -- identical on every device, so
    it can gate the collectives of :func:`_send_chunks`."""
    units = np.maximum(np.asarray(chunk_bytes(layout, dim), np.int32), 1)
    own = jnp.stack([jnp.asarray(t, jnp.int32) for t in _sender_bytes(layout, dim, layout.sent)])
    return (jax.lax.pmax(own, axis_name) + units - 1) // units


def exchange_bytes(layout: ExchangeLayout, dim: int, axis_name, num_parts: int):
    """Bytes one device sends in one exchange with ``layout``, inside the step: a static
    count for an exact layout, the units the rounds need (data) for a chunked one."""
    if not layout.counts:  # no ring rounds (P = 1): nothing moves
        return jnp.float32(0.0)
    if not layout.chunks:
        return jnp.float32(layout_bytes(layout, dim))
    units = round_units(layout, dim, axis_name)
    moved = jnp.sum(units * jnp.asarray(chunk_bytes(layout, dim), jnp.int32))
    return (moved + _agreement_bytes(layout, num_parts)).astype(jnp.float32)


def byte_report(
    plan: HaloPlan,
    assignment: BitAssignment,
    layer_dims: Sequence[int],
    *,
    chunks: int = 0,
    widths=QUANT_WIDTHS,
    param_dtype: str = "float32",
) -> dict:
    """Bytes over the whole mesh per ``fwd{l}`` / ``bwd{l}``: ``moved`` (what the collectives
    carry, :func:`layout_bytes`), ``bucket_padded`` (with every bucket padded to its largest
    sender) and ``useful`` (real rows only). ``chunks``, ``widths`` and ``param_dtype`` as in
    :func:`bucket_state`."""
    state = bucket_state(plan, assignment, chunks=chunks, widths=widths, param_dtype=param_dtype)
    p = plan.num_parts
    out = {}
    for name, layouts in zip(("fwd", "bwd"), state, strict=True):
        for layer, layout in enumerate(layouts):
            if name == "bwd" and layer == 0:
                continue
            dim = layer_dims[layer]
            q = [w for rc in layout.counts for w, _ in rc]  # buckets, in `sent` order
            largest = np.asarray(layout.sent).max(axis=0, initial=0)  # per bucket
            out[f"{name}{layer}"] = {
                "moved": p * layout_bytes(layout, dim),
                "bucket_padded": p
                * sum(
                    wire_bytes(int(c), dim, w, layout.param_bytes)
                    for w, c in zip(q, largest, strict=True)
                ),
                "useful": sum(
                    wire_bytes(int(n), dim, w, layout.param_bytes)
                    for i, w in enumerate(q)
                    for n in layout.sent[:, i]
                ),
            }
    return out
