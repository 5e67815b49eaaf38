"""The 1D block-row layout (CAGNET, Sancus) as a :class:`HaloPlan` whose halo is every other block.

Device ``i`` owns block ``i``: the nodes of part ``i``, padded to ``B`` rows. The 1D block-row
algorithm needs *all* other blocks (``T_i = sum_j Â_ij H_j``), so the halo is the ``P - 1``
other blocks verbatim, by ring distance: halo rows ``[(r - 1) B, r B)`` are block
``(i - r) mod P``. A plain ring exchange and the broadcasts of :mod:`jaxgraph.comm.broadcast`
deliver the same halo buffer.

Unlike :func:`~jaxgraph.partition.build_halo_plan` (every other invariant holds): ``S_r = B``
in every round; ``send_idx[r-1][d] = arange(B)`` (pad slots hold the pad rows), ``send_mask``
is the sender's ``local_mask``, and ``halo_nodes`` / ``halo_mask`` are the senders'
``local_nodes`` / ``local_mask``.
"""

from __future__ import annotations

import numpy as np

from jaxgraph.graph import Graph
from jaxgraph.partition.blockrow import BlockRowPlan
from jaxgraph.partition.halo import HaloPlan, _check_pad_multiple, _local_edge_arrays, _local_rows
from jaxgraph.partition.partitioners import check_parts


def build_block_halo_plan(
    graph: Graph,
    parts,
    *,
    num_parts: int | None = None,
    pad_multiple: int = 1,
) -> HaloPlan:
    """The block-row layout of ``graph`` as a halo plan whose halo is every other block.

    Args:
      parts: owner part of each node (``int[N]``), or a
        :class:`~jaxgraph.partition.BlockRowPlan` whose blocks (``perm // block_size``) and
        block size to use (within a block, rows are ordered central-first).
      num_parts: ``P``; defaults to ``max(parts) + 1`` (ignored for a ``BlockRowPlan``).
      pad_multiple: round ``B`` and ``Em`` up to a multiple of this; results do not depend on
        it.

    Raises:
      ValueError: on an invalid ``parts`` array or ``pad_multiple < 1``.
    """
    pad_multiple = _check_pad_multiple(pad_multiple)
    min_rows = 1
    if isinstance(parts, BlockRowPlan):
        min_rows = parts.block_size
        num_parts = parts.num_parts
        parts = parts.perm // parts.block_size
    parts, p = check_parts(parts, graph.num_nodes, num_parts)
    src, dst = graph.edges()
    rows, local_index, _ = _local_rows(parts, p, src, dst, pad_multiple, min_rows)
    local_nodes, local_mask = rows["local_nodes"], rows["local_mask"]
    b = local_nodes.shape[1]

    # ---- every round sends the whole block; halo slot r - 1 = block (d - r) mod P.
    whole = np.broadcast_to(np.arange(b, dtype=np.int32), (p, b))
    senders = [(np.arange(p) - r) % p for r in range(1, p)]
    if p > 1:
        halo_nodes = np.concatenate([local_nodes[s] for s in senders], axis=1)
        halo_mask = np.concatenate([local_mask[s] for s in senders], axis=1)
    else:
        halo_nodes = np.zeros((p, 0), np.int32)
        halo_mask = np.zeros((p, 0), bool)

    # ---- local edges: in-edges of each device's nodes, sources as buffer rows.
    ring = (parts[dst].astype(np.int64) - parts[src]) % p  # 0 for a local source
    edge_src_buf = np.where(ring == 0, 0, b + (ring - 1) * b) + local_index[src]
    return HaloPlan(
        num_parts=p,
        num_nodes=graph.num_nodes,
        parts=parts,
        send_idx=tuple(whole.copy() for _ in range(1, p)),
        send_mask=tuple(local_mask.copy() for _ in range(1, p)),
        round_rows=(b,) * (p - 1),
        halo_nodes=halo_nodes,
        halo_mask=halo_mask,
        **rows,
        **_local_edge_arrays(graph, parts, local_index, edge_src_buf, p, b, pad_multiple),
    )


__all__ = ["build_block_halo_plan"]
