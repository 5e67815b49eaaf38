"""Ring all-to-all of halo rows: the first device program.

Round ``r = 1..P-1``: device ``d`` sends the rows listed in ``send_idx[r-1]`` to device
``(d + r) mod P`` and receives the rows that ``(d - r) mod P`` sends it. Every round is one
``lax.ppermute`` whose payload has the same (padded) shape on every device, so the ring
delivers the unbalanced all-to-all of a halo exchange as ``P - 1`` balanced collectives.

The received payloads are concatenated in round order: this is exactly the halo layout of
:class:`jaxgraph.partition.HaloPlan`, so no scatter is needed on the receiving side. The
transpose (gradient) is the reverse ring: autodiff of ``ppermute`` is ``ppermute`` with the
inverted permutation and the transpose of the gather is a scatter-add into the sent rows.
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
    """Delivers every device's halo rows through ``P - 1`` ``ppermute`` rounds.

    Must be called inside ``shard_map`` over ``axis_name`` (of size ``num_parts``).

    Args:
      h_local: this device's local rows.
      send_idx: per round ``r = 1..P-1``, the local rows this device sends in round ``r``
        (padded slots may hold any valid row: the receiver never reads them).
      axis_name: the mesh axis of the ring.
      num_parts: the size of ``axis_name``.

    Returns:
      The halo rows, the concatenation of the ``P - 1`` received payloads.

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
        # payload: f32[S_r, F]
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
