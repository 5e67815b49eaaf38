"""One device's share of a partitioned graph: the arrays a ``shard_map`` step reads, laid out
under a :mod:`jaxgraph.partition.halo` plan."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxgraph.partition.halo import HaloPlan, split_edges_by_source


class GraphShard(NamedTuple):
    """One device's share of a partitioned graph, built from a :class:`HaloPlan`; on the host
    every field has a leading axis of size ``P``.

    Shapes (inside ``shard_map``):
      x: ``f32[Nl, F]`` local node features (zero on pad rows).
      labels: ``int32[Nl]`` (``-1`` on unlabelled and pad rows) or ``bool[Nl, C]``.
      train_mask, val_mask, test_mask, local_mask: ``bool[Nl]`` (``False`` on pad rows).
      edge_src: ``int32[Em]`` sources in ``[0, Nl + H)``, i.e. ``[local rows | halo rows]``.
      edge_dst: ``int32[Em]`` destinations in ``[0, Nl)``, sorted ascending.
      edge_mask: ``bool[Em]`` (``False`` on pad edges).
      gcn_edge_weight, mean_edge_weight: ``f32[Em]``; gcn_self_weight: ``f32[Nl]``.
      send_idx: per ring round ``r``, ``int32[S_r]`` local rows sent in round ``r``.

    Optional (``None`` with ``split=False``): the in-edges split by source
    (:func:`~jaxgraph.partition.halo.split_edges_by_source`):
      local_edge_src: ``int32[El]`` sources in ``[0, Nl)`` (local rows).
      local_edge_dst: ``int32[El]`` destinations in ``[0, Nl)``, sorted ascending.
      local_gcn_weight, local_mean_weight: ``f32[El]``.
      remote_edge_src: ``int32[Er]`` sources in ``[0, H)`` (halo rows, i.e. ``edge_src - Nl``).
      remote_edge_dst: ``int32[Er]`` destinations in ``[0, Nl)``, sorted ascending.
      remote_gcn_weight, remote_mean_weight: ``f32[Er]``.
    """

    x: jax.Array
    labels: jax.Array
    train_mask: jax.Array
    val_mask: jax.Array
    test_mask: jax.Array
    local_mask: jax.Array
    edge_src: jax.Array
    edge_dst: jax.Array
    edge_mask: jax.Array
    gcn_edge_weight: jax.Array
    gcn_self_weight: jax.Array
    mean_edge_weight: jax.Array
    send_idx: tuple[jax.Array, ...]
    local_edge_src: jax.Array | None = None
    local_edge_dst: jax.Array | None = None
    local_gcn_weight: jax.Array | None = None
    local_mean_weight: jax.Array | None = None
    remote_edge_src: jax.Array | None = None
    remote_edge_dst: jax.Array | None = None
    remote_gcn_weight: jax.Array | None = None
    remote_mean_weight: jax.Array | None = None

    @classmethod
    def from_plan(cls, graph, plan: HaloPlan, *, split: bool = True) -> GraphShard:
        """Host-side stacked shards ``[P, ...]`` of ``graph`` under ``plan`` (NumPy arrays);
        ``split`` also stores the ``local_*`` / ``remote_*`` fields."""
        labels = plan.shard_nodes(graph.labels)
        if not graph.multi_label:
            labels = np.where(plan.local_mask, labels, -1).astype(np.int32)
        split_fields = {}
        if split:
            e = split_edges_by_source(plan)
            split_fields = dict(
                local_edge_src=e.local_src,
                local_edge_dst=e.local_dst,
                local_gcn_weight=e.local_gcn_weight,
                local_mean_weight=e.local_mean_weight,
                remote_edge_src=e.remote_src,
                remote_edge_dst=e.remote_dst,
                remote_gcn_weight=e.remote_gcn_weight,
                remote_mean_weight=e.remote_mean_weight,
            )
        return cls(
            x=plan.shard_nodes(graph.features).astype(np.float32),
            labels=labels,
            train_mask=plan.shard_nodes(graph.train_mask),
            val_mask=plan.shard_nodes(graph.val_mask),
            test_mask=plan.shard_nodes(graph.test_mask),
            local_mask=plan.local_mask,
            edge_src=plan.edge_src,
            edge_dst=plan.edge_dst,
            edge_mask=plan.edge_mask,
            gcn_edge_weight=plan.gcn_edge_weight,
            gcn_self_weight=plan.gcn_self_weight,
            mean_edge_weight=plan.mean_edge_weight,
            send_idx=tuple(plan.send_idx),
            **split_fields,
        )

    @property
    def num_local(self) -> int:
        return self.x.shape[-2]
