"""The communication-strategy interface and its first strategy, Vanilla.

A strategy moves rows between devices inside a ``shard_map`` program and carries its own
state (caches, stale halos, statistics) in ``comm_state``, a pytree that lives inside the train
state. Models never see the strategy: they call a :class:`jaxgraph.models.Propagator`, which
calls :meth:`CommStrategy.exchange`.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.ring import ring_exchange
from jaxgraph.partition.halo import HaloPlan, split_edges_by_source

CommState = Any


class GraphShard(NamedTuple):
    """One device's share of a partitioned graph, built from a :class:`HaloPlan`.

    On the host every field carries a leading axis of size ``P`` (the mesh axis); inside the
    ``shard_map`` body that axis is gone and the shapes are those below.

    Shapes:
      x: ``f32[Nl, F]`` local node features (zero on pad rows).
      labels: ``int32[Nl]`` (``-1`` on unlabelled and pad rows) or ``bool[Nl, C]``.
      train_mask, val_mask, test_mask, local_mask: ``bool[Nl]`` (``False`` on pad rows).
      edge_src: ``int32[Em]`` sources in ``[0, Nl + H)``, i.e. ``[local rows | halo rows]``.
      edge_dst: ``int32[Em]`` destinations in ``[0, Nl)``, sorted ascending.
      edge_mask: ``bool[Em]`` (``False`` on pad edges).
      gcn_edge_weight, mean_edge_weight: ``f32[Em]``; gcn_self_weight: ``f32[Nl]``.
      send_idx: per ring round ``r``, ``int32[S_r]`` local rows sent in round ``r``.

    Optional: the in-edges split by source, local rows or halo rows
    (:func:`~jaxgraph.partition.halo.split_edges_by_source`; ``None`` when the shard was
    built with ``split=False``). Each list keeps the destination-sorted order; pad edges have
    source 0, destination ``Nl - 1`` and weight 0:
      local_edge_src: ``int32[El]`` sources in ``[0, Nl)`` (local rows).
      local_edge_dst: ``int32[El]`` destinations in ``[0, Nl)``, sorted ascending.
      local_gcn_weight, local_mean_weight: ``f32[El]``.
      remote_edge_src: ``int32[Er]`` sources in ``[0, H)`` (halo rows, i.e. ``edge_src - Nl``).
      remote_edge_dst: ``int32[Er]`` destinations in ``[0, Nl)``, sorted ascending.
      remote_gcn_weight, remote_mean_weight: ``f32[Er]``.
    ``El``, ``Er`` = the largest local-source / halo-source edge count over devices (at least 1).
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
        """Host-side stacked shards ``[P, ...]`` of ``graph`` under ``plan`` (NumPy arrays).

        ``split``: also store the in-edges split by source (the ``local_*`` / ``remote_*``
        fields), which lets the aggregation overlap its local part with the halo exchange.
        """
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


class CommStrategy(abc.ABC):
    """How halo rows travel between devices.

    Subclasses are immutable descriptions (hashable, so a jitted step can close over them);
    everything that changes during training lives in ``comm_state``.
    """

    name: str = "abstract"
    # The plan the strategy runs on: "halo" (build_halo_plan: 1-hop halos on the ring) or
    # "block" (build_block_halo_plan: every block row, CAGNET / Sancus / SkipG).
    layout: ClassVar[str] = "halo"
    # Local gradient clipping threshold the training step applies (Sancus), or None.
    local_grad_clip: float | None = None
    # What the last host-side update decided (epoch, widths, solver figures; AdaQP and random
    # widths), for the loop's log; None for strategies that decide nothing on the host.
    last_update: dict | None = None
    # True: the model exchanges a layer's input rows before its dropout, and drops out the
    # received halo rows with its own mask (PipeGCN); False: the rows travel after dropout.
    exchange_before_dropout: bool = False

    def init_state(
        self, plan: HaloPlan, layer_dims: tuple[int, ...], *, epoch: int = 0
    ) -> CommState:
        """Host-side ``comm_state`` in force after ``epoch`` completed epochs (leaves stacked
        with a leading ``P`` axis). ``epoch > 0`` gives the structure a checkpoint taken at
        that epoch restores into.

        Args:
          plan: the halo plan of the run.
          layer_dims: the feature width of the rows exchanged at each layer.
          epoch: number of completed epochs.
        """
        del plan, layer_dims, epoch
        return {}

    def update_state(
        self, comm_state: CommState, *, epoch: int, plan: HaloPlan, layer_dims: tuple[int, ...]
    ) -> CommState | None:
        """Host-side decision before epoch ``epoch`` (1-indexed), outside the jitted step.

        Returns a new host-side ``comm_state`` (e.g. a new bit assignment, whose new buffer
        sizes re-jit the step) or ``None`` to keep the current one.
        """
        del comm_state, epoch, plan, layer_dims
        return None

    def upcoming_state(
        self, comm_state: CommState, *, epoch: int, plan: HaloPlan, layer_dims: tuple[int, ...]
    ) -> tuple[int, CommState] | None:
        """The next change :meth:`update_state` will make, if already decided after epoch
        ``epoch``: ``(the epoch before which it happens, its host-side comm_state)``, or
        ``None``. The training loop compiles that state's step ahead of time. Must be cheap
        when called every epoch.
        """
        del comm_state, epoch, plan, layer_dims
        return None

    def resume_state(
        self,
        plan: HaloPlan,
        layer_dims: tuple[int, ...],
        *,
        epoch: int,
        saved: dict[str, np.ndarray],
    ) -> CommState:
        """Host-side template of the ``comm_state`` a checkpoint taken after ``epoch`` epochs
        restores into. ``saved`` maps each saved ``comm_state`` leaf's tree path
        (``jax.tree_util.keystr``) to its array, for strategies whose state shapes depend on
        what happened during training (e.g. a bit assignment solved from traced data).
        """
        del saved
        return self.init_state(plan, layer_dims, epoch=epoch)

    def probes(self, comm_state: CommState, num_layers: int):
        """Per layer, a pytree of zeros that the exchange takes as ``probe=``, or ``None``.

        The training step differentiates the loss with respect to the probes as well as the
        parameters; a probe's cotangent carries whatever the exchange's backward pass wants
        to record (e.g. statistics of the gradient rows it sends), and
        :meth:`absorb_probes` folds it into ``comm_state``. Runs inside ``shard_map`` (this
        device's ``comm_state``, no leading axis).
        """
        del comm_state, num_layers
        return None

    def absorb_probes(self, comm_state: CommState, probe_grads) -> CommState:
        """``comm_state`` updated with the probes' cotangents (inside ``shard_map``)."""
        del probe_grads
        return comm_state

    @abc.abstractmethod
    def exchange(
        self,
        h_local: jax.Array,
        shard: GraphShard,
        comm_state: CommState,
        *,
        layer: int,
        axis_name: str,
        num_parts: int,
        key: jax.Array | None = None,
    ) -> tuple[jax.Array, CommState, jax.Array]:
        """Delivers this device's halo rows.

        Returns:
          ``(h_remote, comm_state', bytes_moved)``: the halo rows in the plan's halo layout,
          the updated state, and the bytes this device put on the wire for this exchange
          (forward and backward), as an ``f32[]`` scalar.

        Shapes:
          ``h_local: [Nl, F] -> h_remote: [H, F]``.
        """


class Vanilla(CommStrategy):
    """Full-precision (fp32) ring all-to-all of halo rows, synchronous, in both passes."""

    name = "vanilla"

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    def exchange(self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None):
        del key
        h_remote = ring_exchange(h_local, shard.send_idx, axis_name=axis_name, num_parts=num_parts)
        # The backward pass sends the same volume back along the reversed ring, except at the
        # first layer, whose input is data and is never differentiated.
        payload = sum(idx.shape[0] for idx in shard.send_idx) * h_local.shape[-1]
        passes = 1 if layer == 0 else 2
        bytes_moved = jnp.float32(passes * payload * h_local.dtype.itemsize)
        return h_remote, comm_state, bytes_moved
