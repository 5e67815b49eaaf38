"""The communication-strategy interface and its first method, Vanilla.

A strategy moves rows between devices inside a ``shard_map`` program and carries its own
state (caches, stale halos, statistics) in ``comm_state``, a pytree that lives inside the train
state. Models never see the strategy: they call a :class:`jaxgraph.models.Propagator`, which
calls :meth:`CommStrategy.exchange`.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.method import Method
from jaxgraph.comm.ring import ring_exchange
from jaxgraph.partition.halo import HaloPlan
from jaxgraph.partition.shard import GraphShard

CommState = Any


class CommStrategy(abc.ABC):
    """How halo rows travel between devices: the device half of a strategy.

    A strategy is an immutable description (hashable, so a jitted step can close over it)
    whose :meth:`exchange` runs inside ``shard_map``; everything that changes during training
    lives in ``comm_state`` (device) or in the strategy's :class:`Controller` (host), which
    :meth:`controller` binds to one run's plan and layer widths.
    """

    name: str = "abstract"
    # The plan the strategy runs on: "halo" (build_halo_plan: 1-hop halos on the ring) or
    # "block" (build_block_halo_plan: every block row, CAGNET / Sancus / SkipG).
    layout: ClassVar[str] = "halo"
    # Local gradient clipping threshold the training step applies (Sancus), or None.
    local_grad_clip: float | None = None
    # True: the model exchanges a layer's input rows before its dropout, and drops out the
    # received halo rows with its own mask (PipeGCN); False: the rows travel after dropout.
    exchange_before_dropout: bool = False

    def init_state(
        self, plan: HaloPlan, layer_dims: tuple[int, ...], *, epoch: int = 0
    ) -> CommState:
        """Host-side ``comm_state`` in force after ``epoch`` completed epochs (leaves stacked
        with a leading ``P`` axis), for strategies whose state follows from the plan and the
        epoch alone; ``epoch > 0`` gives the structure a checkpoint taken at that epoch
        restores into.

        Args:
          plan: the halo plan of the run.
          layer_dims: the feature width of the rows exchanged at each layer.
          epoch: number of completed epochs.
        """
        del plan, layer_dims, epoch
        return {}

    def controller(
        self, plan: HaloPlan, layer_dims: tuple[int, ...], *, cost=None, run=None
    ) -> Controller:
        """The host half of this strategy, bound to one run's plan and layer widths.

        Args:
          plan: the run's plan.
          layer_dims: the width of the rows each layer exchanges.
          cost: a :class:`~jaxgraph.comm.costmodel.CostModel` measured on the run's mesh, for
            controllers that decide from one (AdaQP); ``None``: their configured preset.
          run: the run's :class:`~jaxgraph.comm.method.RunInfo` (length, seed, model), for
            controllers that depend on it (periods, random draws); ``None``: its defaults.
        """
        del cost, run
        return Controller(self, plan, layer_dims)

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
        probe=None,
    ) -> tuple[jax.Array, CommState, jax.Array]:
        """Delivers this device's halo rows.

        Args:
          h_local: this device's rows of the layer's input.
          shard: this device's :class:`GraphShard`.
          comm_state: this device's ``comm_state`` (no leading axis).
          layer: the layer's index.
          axis_name, num_parts: the mesh axis and its size.
          key: a PRNG key for the layer (stochastic strategies).
          probe: this layer's entry of :meth:`probes` (``None`` for strategies without).

        Returns:
          ``(h_remote, comm_state', bytes_moved)``: the halo rows in the plan's halo layout,
          the updated state, and the bytes this device put on the wire for this exchange
          (forward and backward), as an ``f32[]`` scalar.

        Shapes:
          ``h_local: [Nl, F] -> h_remote: [H, F]``.
        """


class Controller:
    """The host half of a strategy, bound once to a run's plan and layer widths.

    Between epochs the training loop asks the controller for the ``comm_state`` the next
    epochs run on (:meth:`update`), for the state it has already decided will follow (to
    compile that step ahead, :meth:`upcoming`), for the state a checkpoint restores into
    (:meth:`resume`), and for what its last decision was (:meth:`log`). Everything a strategy
    decides on the host (traced statistics gathered, bit assignments, schedules, the cost
    model) lives here, never on the frozen exchange.

    This base controller installs the exchange's :meth:`CommStrategy.init_state` and never
    changes it; strategies that decide between epochs subclass it.

    Attributes:
      exchange: the strategy's device half.
      plan: the run's plan.
      layer_dims: the width of the rows each layer exchanges.
      last_update: what the latest decision installed (epoch, widths, solver figures), or
        ``None``.
    """

    def __init__(self, exchange: CommStrategy, plan: HaloPlan, layer_dims: tuple[int, ...]):
        self.exchange = exchange
        self.plan = plan
        self.layer_dims = tuple(int(d) for d in layer_dims)
        self.last_update: dict | None = None

    def init_state(self, *, epoch: int = 0) -> CommState:
        """Host-side ``comm_state`` in force after ``epoch`` completed epochs."""
        return self.exchange.init_state(self.plan, self.layer_dims, epoch=epoch)

    def update(self, comm_state: CommState, *, epoch: int) -> CommState | None:
        """Host-side decision before epoch ``epoch`` (1-indexed), outside the jitted step.

        Returns a new host-side ``comm_state`` (e.g. a new bit assignment, whose new buffer
        sizes re-jit the step) or ``None`` to keep the current one.
        """
        del comm_state, epoch
        return None

    def upcoming(self, comm_state: CommState, *, epoch: int) -> tuple[int, CommState] | None:
        """The next change :meth:`update` will make, if already decided after epoch
        ``epoch``: ``(the epoch before which it happens, its host-side comm_state)``, or
        ``None``. The training loop compiles that state's step ahead of time; must be cheap
        when called every epoch.
        """
        del comm_state, epoch
        return None

    def resume(self, *, epoch: int, saved: dict[str, np.ndarray]) -> CommState:
        """Host-side template of the ``comm_state`` a checkpoint taken after ``epoch`` epochs
        restores into. ``saved`` maps each saved ``comm_state`` leaf's tree path below
        ``comm_state`` (``jax.tree_util.keystr``, e.g. ``".bits.fwd[0][0]"``) to its array,
        for strategies whose state shapes depend on what happened during training (e.g. a bit
        assignment solved from traced data; :func:`~jaxgraph.comm.adaptive.saved_like`)."""
        del saved
        return self.init_state(epoch=epoch)

    def log(self, epoch: int) -> dict:
        """What the decision installed before ``epoch`` reports for the metrics line (widths,
        projected communication time, solver status), or ``{}``; each controller that decides
        writes its own."""
        del epoch
        return {}


@dataclasses.dataclass(frozen=True)
class Vanilla(Method, CommStrategy):
    """The uncompressed (fp32) ring all-to-all of halo rows, synchronous, in both passes."""

    key: ClassVar[str] = "vanilla"

    def label(self) -> str:
        return "vanilla"

    @property
    def name(self) -> str:
        return self.label()

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        del key, probe
        h_remote = ring_exchange(h_local, shard.send_idx, axis_name=axis_name, num_parts=num_parts)
        # The backward pass sends the same volume back along the reversed ring, except at the
        # first layer, whose input is data and is never differentiated.
        payload = sum(idx.shape[0] for idx in shard.send_idx) * h_local.shape[-1]
        passes = 1 if layer == 0 else 2
        bytes_moved = jnp.float32(passes * payload * h_local.dtype.itemsize)
        return h_remote, comm_state, bytes_moved
