"""Ring all-to-all of halo rows.

Round ``r = 1..P-1``: device ``d`` sends the rows ``send_idx[r-1]`` to ``(d + r) mod P``, one
``lax.ppermute`` of the same (padded) shape on every device, so the unbalanced all-to-all of a
halo exchange runs as ``P - 1`` balanced collectives. The payloads, concatenated in round order,
are the halo layout of :class:`jaxgraph.partition.HaloPlan`. Autodiff gives the reverse ring
(``ppermute`` inverted, the gather's transpose a scatter-add into the sent rows).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp


def ring_perm(num_parts: int, r: int) -> list[tuple[int, int]]:
    """The ``(source, destination)`` pairs of ring round ``r``: ``d -> (d + r) mod P``."""
    return [(d, (d + r) % num_parts) for d in range(num_parts)]


def ring_exchange(
    h_local: jax.Array, send_idx: Sequence[jax.Array], *, axis_name: str, num_parts: int
) -> jax.Array:
    """Delivers every device's halo rows (the ``P - 1`` received payloads, concatenated) inside
    ``shard_map`` over ``axis_name``. ``send_idx[r-1]``: the local rows this device sends in
    round ``r`` (padded slots may hold any valid row: the receiver never reads them).

    Shapes:
      ``h_local: [N_local, F]``, ``send_idx[r-1]: int32[S_r]`` -> ``[sum_r S_r, F]``.
    """
    if len(send_idx) != num_parts - 1:
        raise ValueError(
            f"a ring over {num_parts} devices has {num_parts - 1} rounds, "
            f"got {len(send_idx)} send lists"
        )
    received = []
    for r, idx in enumerate(send_idx, start=1):
        payload = jnp.take(h_local, idx, axis=0)
        received.append(jax.lax.ppermute(payload, axis_name, ring_perm(num_parts, r)))
    if not received:
        return jnp.zeros((0,) + h_local.shape[1:], h_local.dtype)
    return jnp.concatenate(received, axis=0)


def ring_exchange_bytes(
    round_rows: Sequence[int], feature_dim: int, num_parts: int, itemsize: int = 4
) -> int:
    """Bytes that one :func:`ring_exchange` moves over the whole mesh (padded payloads)."""
    return int(num_parts * sum(round_rows) * feature_dim * itemsize)
