"""The halo-exchange plan: padded per-device arrays for ring-scheduled message passing.

Device ``d`` owns the nodes of part ``d`` (its *local rows*) and needs, as *halo rows*, the
remote in-neighbours of its nodes. In ring round ``r = 1..P-1``, device ``d`` sends the rows
``send_idx[r-1][d]`` to ``(d + r) % P``, padded to the same ``S_r`` rows on every device; the
halo buffer is the concatenation of the received payloads, so the receiver needs no scatter.
Edges index the buffer ``[local rows (Nl) | halo rows (H)]``, so a device aggregates with one
gather and one sorted segment sum:

.. code-block:: python

    x_all = concat([x_local, halo], axis=0)                       # [Nl + H, F]
    msg = edge_weight[:, None] * x_all[edge_src]                  # [Em, F]
    out = segment_sum(msg, edge_dst, Nl, indices_are_sorted=True) + self_weight[:, None] * x_local

*Global ids* index ``[0, N)``, *local rows* ``[0, Nl)``, *buffer rows* ``[0, Nl + H)``.
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
    """``(rank of each element within its group int64[K], counts int64[num_groups])`` for
    non-decreasing ``groups: int[K]``."""
    counts = np.bincount(groups, minlength=num_groups).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.arange(groups.size, dtype=np.int64) - starts[groups], counts


@dataclasses.dataclass(frozen=True, eq=False)
class HaloPlan:
    """Per-device layout of a partitioned graph for ring halo exchange; per-device arrays are
    stacked on a leading axis of size ``P`` (device ``d`` = part ``d``).

    Attributes:
      num_parts: ``P``.
      num_nodes: global ``N``.
      parts: ``int32[N]`` owner part of each global node.
      local_nodes: ``int32[P, Nl]`` global id of each local row (0 on pad rows): central, then
        marginal nodes, each by ascending global id.
      local_mask: ``bool[P, Nl]`` True on real local rows (the first ``num_local[d]`` rows).
      num_local: ``int32[P]`` number of nodes of each part (may be 0).
      num_central: ``int32[P]`` central rows ``[0, num_central[d])``: no in-neighbour elsewhere.
      marginal_mask: ``bool[P, Nl]`` True on marginal rows ``[num_central[d], num_local[d])``.
      local_index: ``int32[N]`` local row of each global node on its owner device.
      send_idx: ``P - 1`` arrays, ``send_idx[r-1]: int32[P, S_r]`` = local rows that device
        ``d`` sends to ``(d + r) % P`` in round ``r``, by ascending global id, padded with 0.
      send_mask: ``P - 1`` arrays ``bool[P, S_r]``, True on real (non-pad) sent rows.
      round_rows: ``(S_1, ..., S_{P-1})``, padded payload rows per device (may be 0).
      halo_nodes: ``int32[P, H]`` global id of each halo row (0 on pad slots); round ``r``'s
        payload, from ``(d - r) % P``, starts at row ``halo_offsets()[r - 1]``.
      halo_mask: ``bool[P, H]`` True on real halo rows.
      edge_src: ``int32[P, Em]`` source of each local in-edge as a buffer row (``Nl + h`` for
        halo row ``h``); pad edges use 0.
      edge_dst: ``int32[P, Em]`` destination local row in ``[0, Nl)``; pad edges use ``Nl - 1``.
        Real edges are sorted by ``(edge_dst, edge_src)`` and precede the pad edges.
      edge_mask: ``bool[P, Em]`` True on real edges.
      num_edges: ``int32[P]`` real in-edges per device (input self-loops included, none added).
      gcn_edge_weight: ``float32[P, Em]`` :meth:`Graph.gcn_norm` edge weights of the global graph.
      gcn_self_weight: ``float32[P, Nl]`` :meth:`Graph.gcn_norm` self weight of each local row.
      mean_edge_weight: ``float32[P, Em]`` :meth:`Graph.mean_norm` weights. Weights are 0 on
        pad edges and rows.

    Shapes:
      ``Nl``, ``S_r``, ``Em``: the largest part, round payload and local edge count (``Nl``,
      ``Em`` at least 1), rounded up to ``pad_multiple``; ``H = sum_r S_r``.
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
        """Bytes of one ring exchange over the whole mesh, padding included."""
        return int(self.num_parts * self.payload_rows * feature_dim * itemsize)

    def useful_bytes(self, feature_dim: int, itemsize: int = 4) -> int:
        """Bytes of one ring exchange that receivers actually need."""
        return int(self.useful_rows * feature_dim * itemsize)

    def shard_nodes(self, array) -> np.ndarray:
        """``[N, ...]`` (global ids) -> ``[P, Nl, ...]`` (device, local row); pad rows are 0."""
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
        """Inverse of :meth:`shard_nodes`, ``[P, Nl, ...] -> [N, ...]`` (NumPy or JAX arrays)."""
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
    """The :class:`HaloPlan` edge fields: each edge of ``graph`` on its destination's part, its
    source the buffer row ``edge_src_buf[e]`` (``[E]``, in :meth:`Graph.edges` order)."""
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


def _check_pad_multiple(pad_multiple) -> int:
    if int(pad_multiple) < 1:
        raise ValueError(f"pad_multiple must be at least 1, got {pad_multiple}")
    return int(pad_multiple)


def _local_rows(parts, p: int, src, dst, pad_multiple: int, min_rows: int = 1):
    """``(rows, local_index int64[N], cut bool[E])``: the :class:`HaloPlan` fields
    ``local_nodes`` to ``local_index`` (``Nl`` at least ``min_rows``), and the edges between
    parts."""
    n = parts.shape[0]
    cut = parts[src] != parts[dst]
    marginal = np.zeros(n, bool)
    marginal[dst[cut]] = True
    order = np.lexsort((np.arange(n), marginal, parts))  # sorted by (part, marginal, id)
    rank, num_local = _group_positions(parts[order], p)
    local_index = np.empty(n, np.int64)
    local_index[order] = rank
    nl = max(_round_up(max(int(num_local.max()), 1), pad_multiple), min_rows)
    local_nodes = np.zeros((p, nl), np.int32)
    local_nodes[parts, local_index] = np.arange(n)
    local_mask = np.zeros((p, nl), bool)
    local_mask[parts, local_index] = True
    marginal_mask = np.zeros((p, nl), bool)
    marginal_mask[parts, local_index] = marginal
    rows = dict(
        local_nodes=local_nodes,
        local_mask=local_mask,
        num_local=num_local.astype(np.int32),
        num_central=np.bincount(parts[~marginal], minlength=p).astype(np.int32),
        marginal_mask=marginal_mask,
        local_index=local_index.astype(np.int32),
    )
    return rows, local_index, cut


def build_halo_plan(
    graph: Graph, parts, *, num_parts: int | None = None, pad_multiple: int = 1
) -> HaloPlan:
    """Builds the ring halo-exchange plan of ``graph`` partitioned by ``parts``.

    Args:
      graph: the global graph (input self-loops are ordinary edges).
      parts: ``int[N]`` owner part of each node (:func:`~jaxgraph.partition.partition_graph`).
      num_parts: ``P``; defaults to ``max(parts) + 1``. Pass it when trailing parts may be
        empty (e.g. after METIS on a tiny graph), so the plan matches the mesh size.
      pad_multiple: round ``Nl``, every ``S_r`` and ``Em`` up to a multiple of this (e.g. 8
        for aligned shapes); results do not depend on it.

    Raises:
      ValueError: on an invalid ``parts`` array or ``pad_multiple < 1``.
    """
    pad_multiple = _check_pad_multiple(pad_multiple)
    n = graph.num_nodes
    parts, p = check_parts(parts, n, num_parts)
    src, dst = graph.edges()
    src = src.astype(np.int64)
    dst = dst.astype(np.int64)
    rows, local_index, cut = _local_rows(parts, p, src, dst, pad_multiple)
    nl = rows["local_nodes"].shape[1]

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
        send_idx=tuple(send_idx),
        send_mask=tuple(send_mask),
        round_rows=tuple(round_rows),
        halo_nodes=halo_nodes,
        halo_mask=halo_mask,
        **rows,
        **edges,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class SourceSplitEdges:
    """A plan's in-edges split by where their source lives: local rows or halo rows.

    ``A h = A_local h_local + A_remote h_halo``: the first term needs no communication, so it
    can run while the halo exchange is in flight (AdaQP's central/marginal overlap, Wan et al.
    2023, split by edge source so that shapes stay static). Each list keeps the plan's order
    and pad edges (source 0, destination ``Nl - 1``, weight 0).

    Attributes:
      local_src: ``int32[P, El]`` source local row (``El = max(1, max_d num_local_edges)``).
      local_dst: ``int32[P, El]`` destination local row in ``[0, Nl)``, non-decreasing.
      local_gcn_weight, local_mean_weight: ``float32[P, El]`` the plan's edge weights.
      num_local_edges: ``int32[P]`` real local-source edges per device.
      remote_src: ``int32[P, Er]`` source *halo* row (buffer row minus ``Nl``; ``Er`` likewise).
      remote_dst: ``int32[P, Er]`` destination local row in ``[0, Nl)``, non-decreasing.
      remote_gcn_weight, remote_mean_weight: ``float32[P, Er]``.
      num_remote_edges: ``int32[P]`` real halo-source edges per device.
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
    """``(src - src_offset, dst, gcn, mean, count)`` of the plan's edges where ``keep: bool[P,
    Em]`` holds, moved to the front of each device's list, width ``max(1, max count)``."""
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
    """Splits every device's in-edges into local-source and halo-source lists (together,
    exactly the plan's real edges)."""
    nl = plan.num_local_rows
    remote = plan.edge_src >= nl
    loc = _compact_edges(plan, plan.edge_mask & ~remote, 0)
    rem = _compact_edges(plan, plan.edge_mask & remote, nl)
    return SourceSplitEdges(*loc, *rem)
