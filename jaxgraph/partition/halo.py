"""The halo-exchange plan: padded per-device arrays for ring-scheduled message passing.

Each device ``d`` owns the nodes of part ``d`` (its *local rows*) and needs, as *halo rows*, the
remote in-neighbours of its nodes. The halo is delivered by a ring of ``P - 1`` rounds: in
round ``r`` device ``d`` sends the rows listed in ``send_idx[r-1][d]`` to ``(d + r) % P`` and
receives from ``(d - r) % P``. Payloads are padded to the same ``S_r`` rows on every device,
and the receiver's halo buffer is the plain concatenation of its ``P - 1`` received payloads
(pad slots included), so the receiving side needs no scatter.

Local edge lists index the concatenated buffer ``[local rows (Nl) | halo rows (H)]`` so that a
device aggregates with one gather and one sorted segment sum:

.. code-block:: python

    x_all = concat([x_local, halo], axis=0)                       # [Nl + H, F]
    msg = edge_weight[:, None] * x_all[edge_src]                  # [Em, F]
    out = segment_sum(msg, edge_dst, Nl, indices_are_sorted=True) + self_weight[:, None] * x_local

Index conventions: *global ids* are node ids of the :class:`~jaxgraph.graph.Graph` in
``[0, N)``; *local rows* index ``[0, Nl)`` on one device; *buffer rows* index ``[0, Nl + H)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxgraph.graph import Graph
from jaxgraph.partition.partitioners import check_parts
from jaxgraph.partition.report import halo_triples


def _round_up(x: int, multiple: int) -> int:
    return -(-int(x) // multiple) * multiple


def _group_positions(groups: np.ndarray, num_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank of each element within its group, for ``groups`` sorted ascending.

    Shapes:
      ``groups: int[K]`` (non-decreasing) -> ``(position int64[K], counts int64[num_groups])``.
    """
    counts = np.bincount(groups, minlength=num_groups).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.arange(groups.size, dtype=np.int64) - starts[groups], counts


@dataclasses.dataclass(frozen=True, eq=False)
class HaloPlan:
    """Per-device layout of a partitioned graph for ring halo exchange.

    All per-device arrays are stacked with a leading axis of size ``P`` (device ``d`` = part
    ``d``), so they can be placed on the mesh with their leading axis sharded.

    Attributes:
      num_parts: ``P``.
      num_nodes: global ``N``.
      parts: ``int32[N]`` owner part of each global node.
      local_nodes: ``int32[P, Nl]`` global id of each local row (0 on pad rows). Row order on
        each device: central nodes, then marginal nodes, each by ascending global id.
      local_mask: ``bool[P, Nl]`` True on real local rows (the first ``num_local[d]`` rows).
      num_local: ``int32[P]`` number of nodes of each part (may be 0).
      num_central: ``int32[P]`` number of central nodes of each part (rows
        ``[0, num_central[d])``); a central node has no in-neighbour on another part.
      marginal_mask: ``bool[P, Nl]`` True on marginal rows (local nodes with at least one
        in-neighbour owned by another part), i.e. rows ``[num_central[d], num_local[d])``.
      local_index: ``int32[N]`` local row of each global node on its owner device.
      send_idx: ``P - 1`` arrays, ``send_idx[r-1]: int32[P, S_r]`` = local rows that device
        ``d`` sends to ``(d + r) % P`` in round ``r``, by ascending global id, padded with 0.
      send_mask: ``P - 1`` arrays ``bool[P, S_r]``, True on real (non-pad) sent rows.
      round_rows: ``(S_1, ..., S_{P-1})``, padded payload rows per device in each round
        (``S_r`` may be 0).
      halo_nodes: ``int32[P, H]`` global id of each halo row (0 on pad slots), ``H = sum S_r``.
        Halo rows ``[sum_{r'<r} S_r', sum_{r'<=r} S_r')`` are the payload received in round
        ``r`` from device ``(d - r) % P``, in the sender's order.
      halo_mask: ``bool[P, H]`` True on real halo rows.
      edge_src: ``int32[P, Em]`` source of each local in-edge as a buffer row in
        ``[0, Nl + H)``: ``< Nl`` for a local source, ``Nl + h`` for halo row ``h``. Pad edges
        use 0.
      edge_dst: ``int32[P, Em]`` destination local row in ``[0, Nl)``; pad edges use ``Nl - 1``.
        Real edges are sorted by ``(edge_dst, edge_src)`` and precede the pad edges, so
        ``edge_dst`` is non-decreasing (``indices_are_sorted=True`` holds).
      edge_mask: ``bool[P, Em]`` True on real edges.
      num_edges: ``int32[P]`` number of real edges per device (in-edges of its nodes, input
        self-loops included; no normalisation self-loop is added).
      gcn_edge_weight: ``float32[P, Em]`` :meth:`Graph.gcn_norm` edge weight of each edge (0 on
        pad edges), computed on the global graph.
      gcn_self_weight: ``float32[P, Nl]`` :meth:`Graph.gcn_norm` self weight of each local row
        (0 on pad rows).
      mean_edge_weight: ``float32[P, Em]`` :meth:`Graph.mean_norm` weight (0 on pad edges).

    Shapes:
      ``Nl`` = max part size (at least 1, rounded up to ``pad_multiple``), ``S_r`` = max over
      devices of the rows sent in round ``r`` (rounded up to ``pad_multiple``), ``H = sum_r
      S_r`` (0 when ``P == 1``), ``Em`` = max local edge count (at least 1, rounded up to
      ``pad_multiple``).
    """

    num_parts: int
    num_nodes: int
    parts: np.ndarray
    local_nodes: np.ndarray
    local_mask: np.ndarray
    num_local: np.ndarray
    num_central: np.ndarray
    marginal_mask: np.ndarray
    local_index: np.ndarray
    send_idx: tuple[np.ndarray, ...]
    send_mask: tuple[np.ndarray, ...]
    round_rows: tuple[int, ...]
    halo_nodes: np.ndarray
    halo_mask: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_mask: np.ndarray
    num_edges: np.ndarray
    gcn_edge_weight: np.ndarray
    gcn_self_weight: np.ndarray
    mean_edge_weight: np.ndarray

    # ------------------------------------------------------------------ sizes

    @property
    def num_local_rows(self) -> int:
        """``Nl``, padded local rows per device."""
        return int(self.local_nodes.shape[1])

    @property
    def num_halo_rows(self) -> int:
        """``H = sum_r S_r``, halo rows per device (pad slots included)."""
        return int(self.halo_nodes.shape[1])

    @property
    def max_edges(self) -> int:
        """``Em``, padded edges per device."""
        return int(self.edge_src.shape[1])

    @property
    def payload_rows(self) -> int:
        """Rows one device sends (and receives) over all rounds, padding included."""
        return int(sum(self.round_rows))

    @property
    def useful_rows(self) -> int:
        """Real rows sent over all devices and rounds (= total pair volume)."""
        return int(sum(int(m.sum()) for m in self.send_mask))

    def bytes_moved(self, feature_dim: int, itemsize: int = 4) -> int:
        """Bytes of one ring exchange over the whole mesh, padding included.

        ``P * sum_r S_r * feature_dim * itemsize``.
        """
        return int(self.num_parts * self.payload_rows * feature_dim * itemsize)

    def useful_bytes(self, feature_dim: int, itemsize: int = 4) -> int:
        """Bytes of one ring exchange that receivers actually need."""
        return int(self.useful_rows * feature_dim * itemsize)

    # ------------------------------------------------------------------ layout helpers

    def shard_nodes(self, array) -> np.ndarray:
        """Gathers a global per-node array into the padded per-device local layout.

        Pad rows are 0 (``False`` for booleans).

        Shapes:
          ``array: [N, ...]`` (index = global id) -> ``[P, Nl, ...]`` (index = device, local row).
        """
        array = np.asarray(array)
        if array.shape[:1] != (self.num_nodes,):
            raise ValueError(
                f"expected a per-node array with leading dimension {self.num_nodes}, "
                f"got shape {array.shape}"
            )
        out = np.zeros((self.num_parts, self.num_local_rows) + array.shape[1:], array.dtype)
        out[self.parts, self.local_index] = array
        return out

    def unshard_nodes(self, array):
        """Inverse of :meth:`shard_nodes`: drops pad rows and returns global order.

        Works on NumPy and JAX arrays (plain advanced indexing).

        Shapes:
          ``array: [P, Nl, ...]`` -> ``[N, ...]`` (index = global id).
        """
        if tuple(array.shape[:2]) != (self.num_parts, self.num_local_rows):
            raise ValueError(
                f"expected a [P={self.num_parts}, Nl={self.num_local_rows}, ...] array, "
                f"got shape {tuple(array.shape)}"
            )
        return array[self.parts, self.local_index]

    def halo_offsets(self) -> tuple[int, ...]:
        """Start row of each round's payload in the halo buffer, ``P`` entries (last = H)."""
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(self.round_rows, dtype=int)]))


def _local_edge_arrays(
    graph: Graph,
    parts: np.ndarray,
    local_index: np.ndarray,
    edge_src_buf: np.ndarray,
    num_parts: int,
    num_rows: int,
    pad_multiple: int,
) -> dict[str, np.ndarray]:
    """The padded per-device edge arrays of a plan (:class:`HaloPlan`'s ``edge_*``,
    ``num_edges``, ``gcn_*`` and ``mean_edge_weight`` fields).

    Each edge of ``graph`` belongs to its destination's part; its source is given as a buffer
    row in ``edge_src_buf`` (``[E]``, aligned with :meth:`Graph.edges`). Real edges are sorted
    by ``(destination row, source row)`` and precede the pad edges (source 0, destination
    ``num_rows - 1``, weight 0).
    """
    src, dst = graph.edges()
    edge_part = parts[dst].astype(np.int64)
    edge_dst_local = local_index[dst]
    ew, sw = graph.gcn_norm()
    mw = graph.mean_norm()
    eorder = np.lexsort((edge_src_buf, edge_dst_local, edge_part))
    edge_part = edge_part[eorder]
    epos, num_edges = _group_positions(edge_part, num_parts)
    em = _round_up(max(int(num_edges.max(initial=0)), 1), pad_multiple)
    out = {
        "edge_src": np.zeros((num_parts, em), np.int32),
        "edge_dst": np.full((num_parts, em), num_rows - 1, np.int32),
        "edge_mask": np.zeros((num_parts, em), bool),
        "gcn_edge_weight": np.zeros((num_parts, em), np.float32),
        "mean_edge_weight": np.zeros((num_parts, em), np.float32),
        "gcn_self_weight": np.zeros((num_parts, num_rows), np.float32),
        "num_edges": num_edges.astype(np.int32),
    }
    out["edge_src"][edge_part, epos] = edge_src_buf[eorder]
    out["edge_dst"][edge_part, epos] = edge_dst_local[eorder]
    out["edge_mask"][edge_part, epos] = True
    out["gcn_edge_weight"][edge_part, epos] = ew[eorder]
    out["mean_edge_weight"][edge_part, epos] = mw[eorder]
    out["gcn_self_weight"][parts, local_index] = sw
    return out


def build_halo_plan(
    graph: Graph, parts, *, num_parts: int | None = None, pad_multiple: int = 1
) -> HaloPlan:
    """Builds the ring halo-exchange plan of ``graph`` partitioned by ``parts``.

    Args:
      graph: the global graph (directed edges ``src -> dst``; input self-loops are ordinary
        edges).
      parts: owner part of each node, as from :func:`~jaxgraph.partition.partition_graph`.
      num_parts: ``P``; defaults to ``max(parts) + 1``. Pass it when trailing parts may be
        empty (e.g. after METIS on a tiny graph), so the plan matches the mesh size.
      pad_multiple: round ``Nl``, every ``S_r`` and ``Em`` up to a multiple of this (e.g. 8
        for aligned shapes); results do not depend on it.

    Returns:
      The :class:`HaloPlan`.

    Shapes:
      ``parts: int[N]`` (index = global id) -> arrays described in :class:`HaloPlan`.

    Raises:
      ValueError: on an invalid ``parts`` array or ``pad_multiple < 1``.
    """
    if int(pad_multiple) < 1:
        raise ValueError(f"pad_multiple must be at least 1, got {pad_multiple}")
    pad_multiple = int(pad_multiple)
    n = graph.num_nodes
    parts, p = check_parts(parts, n, num_parts)
    src, dst = graph.edges()
    src = src.astype(np.int64)
    dst = dst.astype(np.int64)

    # ---- local rows: per part, central nodes then marginal nodes, by ascending global id.
    cut = parts[src] != parts[dst]
    marginal = np.zeros(n, bool)
    marginal[dst[cut]] = True
    order = np.lexsort((np.arange(n), marginal, parts))  # sorted by (part, marginal, id)
    rank, num_local = _group_positions(parts[order], p)
    local_index = np.empty(n, np.int64)
    local_index[order] = rank
    nl = _round_up(max(int(num_local.max()), 1), pad_multiple)
    local_nodes = np.zeros((p, nl), np.int32)
    local_nodes[parts, local_index] = np.arange(n)
    local_mask = np.zeros((p, nl), bool)
    local_mask[parts, local_index] = True
    marginal_mask = np.zeros((p, nl), bool)
    marginal_mask[parts, local_index] = marginal
    num_central = np.bincount(parts[~marginal], minlength=p)

    # ---- ring schedule and halo layout.
    owner, needer, node = halo_triples(graph, parts, p)  # sorted by (owner, needer, node)
    rounds = (needer - owner) % p
    send_idx, send_mask, round_rows = [], [], []
    halo_parts, halo_slot_nodes, halo_slots = [], [], []
    offset = 0
    for r in range(1, p):
        sel = rounds == r  # for a fixed r the needer is fixed by the owner: sorted by (d, node)
        d, u = owner[sel], node[sel]
        pos, counts = _group_positions(d, p)
        s_r = _round_up(int(counts.max(initial=0)), pad_multiple)
        idx = np.zeros((p, s_r), np.int32)
        idx[d, pos] = local_index[u]
        mask = np.zeros((p, s_r), bool)
        mask[d, pos] = True
        send_idx.append(idx)
        send_mask.append(mask)
        round_rows.append(s_r)
        halo_parts.append((d + r) % p)
        halo_slot_nodes.append(u)
        halo_slots.append(offset + pos)
        offset += s_r
    h = offset
    halo_nodes = np.zeros((p, h), np.int32)
    halo_mask = np.zeros((p, h), bool)
    if p > 1:
        hp = np.concatenate(halo_parts)
        hu = np.concatenate(halo_slot_nodes)
        hs = np.concatenate(halo_slots)
        halo_nodes[hp, hs] = hu
        halo_mask[hp, hs] = True
    else:
        hp = hu = hs = np.zeros(0, np.int64)

    # ---- local edges: in-edges of each device's nodes, sources as buffer rows.
    edge_part = parts[dst].astype(np.int64)
    edge_src_buf = local_index[src].copy()
    if cut.any():
        halo_key = hp * n + hu
        key_order = np.argsort(halo_key)
        sorted_keys = halo_key[key_order]
        cut_key = edge_part[cut] * n + src[cut]
        at = np.searchsorted(sorted_keys, cut_key)
        edge_src_buf[cut] = nl + hs[key_order[at]]
    edges = _local_edge_arrays(graph, parts, local_index, edge_src_buf, p, nl, pad_multiple)

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
        send_idx=tuple(send_idx),
        send_mask=tuple(send_mask),
        round_rows=tuple(round_rows),
        halo_nodes=halo_nodes,
        halo_mask=halo_mask,
        **edges,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class SourceSplitEdges:
    """A plan's in-edges split by where their source lives: local rows or halo rows.

    ``A h = A_local h_local + A_remote h_halo``: the first term needs no communication, so a
    device can compute it while the halo exchange is in flight (the central/marginal overlap
    of AdaQP, Wan et al., MLSys 2023, split by edge source so that shapes stay static).
    Central rows receive no remote edge. Each part keeps the plan's destination-sorted order
    and is padded per device to the largest count over devices (at least 1 edge); pad edges
    have source 0, destination ``Nl - 1`` and weight 0, as in the plan.

    Attributes:
      local_src: ``int32[P, El]`` source local row in ``[0, Nl)``.
      local_dst: ``int32[P, El]`` destination local row in ``[0, Nl)``, non-decreasing.
      local_gcn_weight, local_mean_weight: ``float32[P, El]`` the plan's edge weights.
      num_local_edges: ``int32[P]`` real local-source edges per device.
      remote_src: ``int32[P, Er]`` source *halo* row in ``[0, H)`` (the plan's buffer row
        minus ``Nl``).
      remote_dst: ``int32[P, Er]`` destination local row in ``[0, Nl)``, non-decreasing.
      remote_gcn_weight, remote_mean_weight: ``float32[P, Er]``.
      num_remote_edges: ``int32[P]`` real halo-source edges per device.

    Shapes:
      ``El = max(1, max_d num_local_edges[d])``, ``Er = max(1, max_d num_remote_edges[d])``.
    """

    local_src: np.ndarray
    local_dst: np.ndarray
    local_gcn_weight: np.ndarray
    local_mean_weight: np.ndarray
    num_local_edges: np.ndarray
    remote_src: np.ndarray
    remote_dst: np.ndarray
    remote_gcn_weight: np.ndarray
    remote_mean_weight: np.ndarray
    num_remote_edges: np.ndarray


def _compact_edges(plan: HaloPlan, keep: np.ndarray, src_offset: int):
    """The plan's edges where ``keep`` holds, moved to the front of each device's list.

    Shapes:
      ``keep: bool[P, Em]`` -> ``(src, dst int32[P, E'], gcn, mean f32[P, E'], count
      int32[P])`` with ``E' = max(1, max count)``; ``src`` is the buffer row minus
      ``src_offset``.
    """
    count = keep.sum(axis=1)
    width = max(int(count.max(initial=0)), 1)
    dev, _ = np.nonzero(keep)  # row-major: each device's edges in their sorted order
    pos = (np.cumsum(keep, axis=1) - 1)[keep]
    src = np.zeros((plan.num_parts, width), np.int32)
    dst = np.full((plan.num_parts, width), plan.num_local_rows - 1, np.int32)
    gcn = np.zeros((plan.num_parts, width), np.float32)
    mean = np.zeros((plan.num_parts, width), np.float32)
    src[dev, pos] = plan.edge_src[keep] - src_offset
    dst[dev, pos] = plan.edge_dst[keep]
    gcn[dev, pos] = plan.gcn_edge_weight[keep]
    mean[dev, pos] = plan.mean_edge_weight[keep]
    return src, dst, gcn, mean, count.astype(np.int32)


def split_edges_by_source(plan: HaloPlan) -> SourceSplitEdges:
    """Splits every device's in-edges into local-source and halo-source lists.

    Args:
      plan: the halo plan.

    Returns:
      The :class:`SourceSplitEdges`; together the two lists hold exactly the plan's real
      edges (same sources, destinations and weights).
    """
    nl = plan.num_local_rows
    remote = plan.edge_src >= nl
    loc = _compact_edges(plan, plan.edge_mask & ~remote, 0)
    rem = _compact_edges(plan, plan.edge_mask & remote, nl)
    return SourceSplitEdges(*loc, *rem)
