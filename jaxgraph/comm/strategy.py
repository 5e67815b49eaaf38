"""The communication-strategy interface and its first strategy, Vanilla.

A strategy moves rows between devices inside a ``shard_map`` program and carries its own
state (caches, stale halos, statistics) in ``comm_state``, a pytree that lives inside the train
state. Models never see the strategy: they call a :class:`jaxgraph.models.Propagator`, which
calls :meth:`CommStrategy.exchange`.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.ring import ring_exchange
from jaxgraph.partition.halo import HaloPlan
from jaxgraph.partition.shard import GraphShard

CommState = Any


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
