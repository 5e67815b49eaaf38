"""The communication-strategy interface and its first method, Vanilla.

A strategy moves rows between devices inside ``shard_map`` and keeps its state (caches, stale
halos, statistics) in ``comm_state``, a pytree in the train state. Models call it through a
:class:`jaxgraph.models.Propagator`.
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

    Immutable and hashable (a jitted step closes over it); what changes during training lives
    in ``comm_state`` (device) or in the strategy's :class:`Controller` (host).
    """

    name: str = "abstract"
    # The plan: "halo" (1-hop halos on the ring) or "block" (every block row: CAGNET, Sancus).
    layout: ClassVar[str] = "halo"
    local_grad_clip: float | None = None  # the step's local gradient clipping (Sancus)
    # True: rows travel before dropout and the receiver drops the halo out itself (PipeGCN).
    exchange_before_dropout: bool = False

    def init_state(
        self, plan: HaloPlan, layer_dims: tuple[int, ...], *, epoch: int = 0
    ) -> CommState:
        """Host-side ``comm_state`` (leaves ``[P, ...]``) in force after ``epoch`` completed
        epochs, for strategies whose state follows from the plan and the epoch alone; also the
        structure a checkpoint taken at that epoch restores into."""
        del plan, layer_dims, epoch
        return {}

    def controller(
        self, plan: HaloPlan, layer_dims: tuple[int, ...], *, cost=None, run=None
    ) -> Controller:
        """The host half of this strategy, bound to one run's plan and layer widths, with the
        run's measured :class:`~jaxgraph.comm.costmodel.CostModel` (``None``: the configured
        preset) and :class:`~jaxgraph.comm.method.RunInfo` (``None``: its defaults)."""
        del cost, run
        return Controller(self, plan, layer_dims)

    def probes(self, comm_state: CommState, num_layers: int):
        """Per layer, a pytree of zeros that the exchange takes as ``probe=``, or ``None``.

        The step differentiates the loss with respect to the probes too: a probe's cotangent
        carries what the exchange's backward pass records (e.g. statistics of the gradient rows
        it sends), which :meth:`absorb_probes` folds into ``comm_state`` (inside ``shard_map``).
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
        """Delivers this device's halo rows, from its rows ``h_local [Nl, F]`` of the layer's
        input and its ``comm_state`` (no leading axis); ``key`` is the layer's PRNG key and
        ``probe`` its entry of :meth:`probes`.

        Returns:
          ``(h_remote [H, F], comm_state', bytes_moved)``: the halo rows in the plan's halo
          layout, the updated state, and the bytes this device sends for this exchange (forward
          and backward), ``f32[]``.
        """


class Controller:
    """The host half of a strategy, bound once to a run's plan and layer widths.

    Between epochs the loop asks it for the next ``comm_state`` (:meth:`update`), the state
    already decided to follow (:meth:`upcoming`), the state a checkpoint restores into
    (:meth:`resume`) and its last decision (:meth:`log`). This base installs
    :meth:`CommStrategy.init_state` and never changes it.

    Attributes:
      exchange: the strategy's device half.
      plan: the run's plan.
      layer_dims: the width of the rows each layer exchanges.
      last_update: what the latest decision installed (epoch, widths, solver figures), or None.
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
        """A new host-side ``comm_state`` before epoch ``epoch`` (1-indexed), or ``None`` to
        keep the current one."""
        del comm_state, epoch
        return None

    def upcoming(self, comm_state: CommState, *, epoch: int) -> tuple[int, CommState] | None:
        """``(the epoch before which it happens, its host-side comm_state)`` of the next change
        :meth:`update` will make, if already decided after ``epoch``, else ``None`` (called
        every epoch: must be cheap)."""
        del comm_state, epoch
        return None

    def resume(self, *, epoch: int, saved: dict[str, np.ndarray]) -> CommState:
        """Host-side template of the ``comm_state`` a checkpoint taken after ``epoch`` epochs
        restores into; ``saved`` maps each saved leaf's tree path below ``comm_state`` (e.g.
        ``".bits.fwd[0][0]"``) to its array (:func:`~jaxgraph.comm.adaptive.saved_like`)."""
        del saved
        return self.init_state(epoch=epoch)

    def log(self, epoch: int) -> dict:
        """What the decision installed before ``epoch`` reports for the metrics line, or
        ``{}``."""
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
        return h_remote, comm_state, ring_bytes(h_local, shard.send_idx, layer)


def ring_bytes(h_local: jax.Array, send_idx, layer: int) -> jax.Array:
    """``f32[]`` bytes one device sends on the fp32 ring at ``layer``: its rows, and the same
    volume of gradient rows back along the reversed ring after the first layer (whose input
    is data)."""
    payload = sum(idx.shape[0] for idx in send_idx) * h_local.shape[-1]
    passes = 1 if layer == 0 else 2
    return jnp.float32(passes * payload * h_local.dtype.itemsize)
