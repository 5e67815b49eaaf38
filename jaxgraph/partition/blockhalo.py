"""The 1D block-row layout (CAGNET, Sancus) as a :class:`HaloPlan` whose halo is every other block.

Device ``i`` owns block ``i``: the nodes of part ``i``, padded to ``B`` rows. In the 1D
block-row algorithm it needs *all* other blocks (``T_i = sum_j Â_ij H_j``, every ``H_j``
broadcast whole), so its halo is the concatenation of the ``P - 1`` other blocks, verbatim
(pad rows included), by ring distance: halo slot ``r - 1`` (``r = 1..P-1``) is block
``(i - r) mod P``, halo rows ``[(r - 1) B, r B)``. In plan terms every ring round sends the
whole block, ``send_idx[r-1][d] = arange(B)``, so a plain ring exchange
(:func:`jaxgraph.comm.ring_exchange`, e.g. the Vanilla strategy used for evaluation) and the
broadcasts of :mod:`jaxgraph.comm.broadcast` deliver the same halo buffer, and
:meth:`jaxgraph.partition.shard.GraphShard.from_plan` builds the shards unchanged.

Differences from :func:`~jaxgraph.partition.build_halo_plan` (every other field and invariant
is the same: central rows first, edges sorted by ``(dst, src)``, global normalisation):

- ``S_r = B`` for every round and ``H = (P - 1) B``, however few rows a neighbour needs;
- ``send_idx`` pad slots hold the pad rows themselves (``arange(B)``, not 0), masked by
  ``send_mask`` = the sender's ``local_mask``; ``halo_nodes`` / ``halo_mask`` are the senders'
  ``local_nodes`` / ``local_mask``.

Blocks can come from any partition (``parts``), or from a
:class:`~jaxgraph.partition.BlockRowPlan` (the same node-to-block assignment and block size;
within a block the rows are ordered central-first, as in every halo plan).
"""

from __future__ import annotations

import numpy as np

from jaxgraph.graph import Graph
from jaxgraph.partition.blockrow import BlockRowPlan
from jaxgraph.partition.halo import HaloPlan, _group_positions, _local_edge_arrays, _round_up
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
      graph: the global graph.
      parts: owner part of each node (``int[N]``), or a
        :class:`~jaxgraph.partition.BlockRowPlan` whose blocks (``perm // block_size``) and
        block size to use.
      num_parts: ``P``; defaults to ``max(parts) + 1`` (ignored for a ``BlockRowPlan``).
      pad_multiple: round ``B`` and ``Em`` up to a multiple of this; results do not depend on
        it.

    Returns:
      The :class:`HaloPlan` described in the module docstring.

    Shapes:
      ``Nl = B`` (at least the largest part, at least 1), ``round_rows = (B,) * (P - 1)``,
      ``H = (P - 1) B``.

    Raises:
      ValueError: on an invalid ``parts`` array or ``pad_multiple < 1``.
    """
    if int(pad_multiple) < 1:
        raise ValueError(f"pad_multiple must be at least 1, got {pad_multiple}")
    pad_multiple = int(pad_multiple)
    min_rows = 1
    if isinstance(parts, BlockRowPlan):
        min_rows = parts.block_size
        num_parts = parts.num_parts
        parts = parts.perm // parts.block_size
    n = graph.num_nodes
    parts, p = check_parts(parts, n, num_parts)
    src, dst = graph.edges()
    src = src.astype(np.int64)
    dst = dst.astype(np.int64)

    # ---- local rows: per part, central nodes then marginal nodes, by ascending global id.
    cut = parts[src] != parts[dst]
    marginal = np.zeros(n, bool)
    marginal[dst[cut]] = True
    order = np.lexsort((np.arange(n), marginal, parts))
    rank, num_local = _group_positions(parts[order], p)
    local_index = np.empty(n, np.int64)
    local_index[order] = rank
    b = max(_round_up(max(int(num_local.max()), 1), pad_multiple), min_rows)
    local_nodes = np.zeros((p, b), np.int32)
    local_nodes[parts, local_index] = np.arange(n)
    local_mask = np.zeros((p, b), bool)
    local_mask[parts, local_index] = True
    marginal_mask = np.zeros((p, b), bool)
    marginal_mask[parts, local_index] = marginal
    num_central = np.bincount(parts[~marginal], minlength=p)

    # ---- every round sends the whole block; halo slot r - 1 = block (d - r) mod P.
    whole = np.broadcast_to(np.arange(b, dtype=np.int32), (p, b))
    send_idx = tuple(whole.copy() for _ in range(1, p))
    send_mask = tuple(local_mask.copy() for _ in range(1, p))
    senders = [(np.arange(p) - r) % p for r in range(1, p)]
    if p > 1:
        halo_nodes = np.concatenate([local_nodes[s] for s in senders], axis=1)
        halo_mask = np.concatenate([local_mask[s] for s in senders], axis=1)
    else:
        halo_nodes = np.zeros((p, 0), np.int32)
        halo_mask = np.zeros((p, 0), bool)

    # ---- local edges: in-edges of each device's nodes, sources as buffer rows.
    edge_part = parts[dst].astype(np.int64)
    ring = (edge_part - parts[src]) % p  # 0 for a local source
    edge_src_buf = np.where(ring == 0, 0, b + (ring - 1) * b) + local_index[src]
    edges = _local_edge_arrays(graph, parts, local_index, edge_src_buf, p, b, pad_multiple)

    return HaloPlan(
        num_parts=p,
        num_nodes=n,
        parts=parts,
        local_nodes=local_nodes,
        local_mask=local_mask,
        num_local=num_local.astype(np.int32),
        num_central=num_central.astype(np.int32),
        marginal_mask=marginal_mask,
        local_index=local_index.astype(np.int32),
        send_idx=send_idx,
        send_mask=send_mask,
        round_rows=(b,) * (p - 1),
        halo_nodes=halo_nodes,
        halo_mask=halo_mask,
        **edges,
    )


__all__ = ["build_block_halo_plan"]
