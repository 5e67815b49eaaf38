"""PipeGCN: pipelined halo exchange with one step of staleness in both passes.

Wan et al., "PipeGCN: Efficient full-graph training of graph convolutional networks with
pipelined feature communication", ICLR 2022. The exchange runs on the
:class:`~jaxgraph.partition.HaloPlan` ring (the rows each peer needs, as Vanilla sends them),
but a layer never waits for this step's messages:

- **Forward.** At step ``t`` layer ``l`` aggregates the halo rows its peers sent at step
  ``t - 1`` (zeros at step 0); this step's boundary rows are sent now and stored in
  ``comm_state`` for step ``t + 1``.
- **Backward.** The gradient rows of the halo (``dL/dh_halo``) go back along the reversed
  ring to the owners, which add them to their boundary rows at step ``t + 1``; at step ``t``
  the owners add the halo gradients of step ``t - 1`` instead (zeros at step 0). A
  ``custom_vjp`` injects the stored gradient; the fresh one leaves the backward pass through
  the exchange's probe (:meth:`CommStrategy.probes`): its cotangent is the scatter-add of the
  received gradient rows onto this device's local rows, which :meth:`PipeGCN.absorb_probes`
  stores.
- **Order.** The exchange happens before dropout (:attr:`exchange_before_dropout`): the
  halo rows arrive undropped and the receiver draws their dropout mask, as in the reference
  implementation, where ``cat(h, halo)`` is dropped out as a whole.
- **Smoothing** (PipeGCN-F / -G): ``avg <- gamma avg + (1 - gamma) recv`` per layer for the
  features and/or the gradients (``gamma = 0.95``), started at zero without bias correction,
  used in place of the raw received rows.
- **Staleness off** (``stale=False``): a synchronous ring exchange whose gradient is autodiff's
  transpose, after dropout: Vanilla, bit for bit (the reference's synchronous mode exchanges
  before dropout; here that order is kept for the pipeline only, since it changes the
  accumulation order of a row's gradient terms and so the last bits).

``comm_state`` is a tuple over layers; each entry holds, per device:

- ``halo: f32[H, F]`` the halo rows (or their average) to use at the next step;
- ``grad: f32[Nl, F]`` the received halo gradients (or their average), scatter-added onto
  this device's local rows, to inject at the next step (not at layer 0, whose input is data
  and is never differentiated).

Averaging per peer and averaging after the scatter-add are the same linear map, so one
``[Nl, F]`` buffer serves the gradient average too. With ``stale=False`` the state is empty.

Bytes: the same ring as Vanilla, forward at every layer and backward at layers after the
first; staleness hides the transfers behind computation but does not shrink them.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.ring import ring_exchange, ring_perm
from jaxgraph.comm.strategy import CommStrategy

DEFAULT_MOMENTUM = 0.95


def reverse_ring_scatter(
    g_halo: jax.Array, send_idx, *, num_local: int, axis_name: str, num_parts: int
) -> jax.Array:
    """Halo-row gradients back to their owners, added onto the rows they came from.

    The transpose of :func:`~jaxgraph.comm.ring.ring_exchange`: round ``r``'s received block
    travels back along ``d -> (d - r) mod P`` and is scatter-added into the sender's rows
    ``send_idx[r-1]`` (pad slots carry whatever the receiver computed for them, which is zero:
    no edge reads a pad slot).

    Shapes:
      ``g_halo: [H, F]``, ``send_idx[r-1]: int32[S_r]`` -> ``[num_local, F]``.
    """
    g = jnp.zeros((num_local, g_halo.shape[-1]), g_halo.dtype)
    start = 0
    for r, idx in enumerate(send_idx, start=1):
        size = idx.shape[0]
        back = jax.lax.ppermute(
            g_halo[start : start + size], axis_name, ring_perm(num_parts, -r)
        )  # f32[S_r, F]
        g = g.at[idx].add(back)
        start += size
    return g


def stale_halo(h_local, probe, halo, grad, send_idx, *, axis_name, num_parts):
    """The stored halo ``halo`` as this step's halo, with PipeGCN's stale backward.

    Forward: returns ``halo`` (its value does not depend on ``h_local``). Backward: the
    cotangent of ``h_local`` is ``grad`` (the gradient its peers sent at the previous step),
    and the cotangent of ``probe`` is the halo cotangent sent to the owners now
    (:func:`reverse_ring_scatter`), for the next step. ``halo`` and ``grad`` get none.

    Shapes:
      ``h_local, probe, grad: [Nl, F]``, ``halo: [H, F]`` -> ``[H, F]``.
    """
    send_idx = tuple(send_idx)
    num_local = h_local.shape[0]

    @jax.custom_vjp
    def inject(h_local, probe, halo, grad, send_idx):
        del h_local, probe, grad, send_idx
        return halo

    def fwd(h_local, probe, halo, grad, send_idx):
        return halo, (grad, send_idx)

    def bwd(res, g_halo):
        grad, send_idx = res
        fresh = reverse_ring_scatter(
            g_halo, send_idx, num_local=num_local, axis_name=axis_name, num_parts=num_parts
        )
        return grad, fresh, None, None, None

    inject.defvjp(fwd, bwd)
    return inject(h_local, probe, halo, grad, send_idx)


@dataclasses.dataclass(frozen=True)
class PipeGCN(CommStrategy):
    """Pipelined ring exchange: halo rows and halo gradients one step stale.

    Args:
      stale: ``False`` runs the synchronous exchange (no pipeline), for comparison.
      feature_momentum: ``gamma`` of the halo-row average (PipeGCN-F), or ``None``.
      gradient_momentum: ``gamma`` of the halo-gradient average (PipeGCN-G), or ``None``.
    """

    stale: bool = True
    feature_momentum: float | None = None
    gradient_momentum: float | None = None

    @property
    def exchange_before_dropout(self) -> bool:
        # The synchronous mode keeps Vanilla's order, so that it is Vanilla bit for bit (the
        # order changes how autodiff accumulates a row's gradient terms, by a few ulp).
        return self.stale

    def __post_init__(self):
        for what, m in (("feature", self.feature_momentum), ("gradient", self.gradient_momentum)):
            if m is not None and not 0.0 <= m < 1.0:
                raise ValueError(f"the {what} momentum must lie in [0, 1), got {m}")
            if m is not None and not self.stale:
                raise ValueError("smoothing needs the stale pipeline (stale=True)")

    @property
    def name(self) -> str:
        if not self.stale:
            return "pipegcn-sync"
        suffix = ("f" if self.feature_momentum is not None else "") + (
            "g" if self.gradient_momentum is not None else ""
        )
        return "pipegcn" + (f"-{suffix}" if suffix else "")

    def init_state(self, plan, layer_dims, *, epoch=0):
        # Zeros are also the shape template a checkpoint restores into, whatever the epoch.
        del epoch
        if not self.stale:
            return ()
        p, nl, h = plan.num_parts, plan.num_local_rows, plan.num_halo_rows
        # Layer 0 (data input) sends no gradient back: no gradient buffer.
        return tuple(
            {"halo": np.zeros((p, h, f), np.float32)}
            | ({"grad": np.zeros((p, nl, f), np.float32)} if layer else {})
            for layer, f in enumerate(layer_dims)
        )

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        del key
        payload = sum(idx.shape[0] for idx in shard.send_idx) * h_local.shape[-1]
        passes = 1 if layer == 0 else 2
        nbytes = jnp.float32(passes * payload * h_local.dtype.itemsize)
        if not self.stale:
            h_remote = ring_exchange(
                h_local, shard.send_idx, axis_name=axis_name, num_parts=num_parts
            )
            return h_remote, comm_state, nbytes
        st = comm_state[layer]
        # This step's boundary rows, for the next step: no gradient flows through them.
        recv = ring_exchange(
            jax.lax.stop_gradient(h_local),
            shard.send_idx,
            axis_name=axis_name,
            num_parts=num_parts,
        )  # f32[H, F]
        if probe is None:  # layer 0: the input is data, nothing to send back
            h_remote = st["halo"]
        else:
            h_remote = stale_halo(
                h_local,
                probe,
                st["halo"],
                st["grad"],
                shard.send_idx,
                axis_name=axis_name,
                num_parts=num_parts,
            )
        new = {**st, "halo": _smooth(st["halo"], recv, self.feature_momentum)}
        return h_remote, _replace(comm_state, layer, new), nbytes

    def probes(self, comm_state, num_layers):
        if not self.stale:
            return None
        return tuple(
            None if layer == 0 else jnp.zeros_like(comm_state[layer]["grad"])
            for layer in range(num_layers)
        )

    def absorb_probes(self, comm_state, probe_grads):
        if not self.stale:
            return comm_state
        out = comm_state
        for layer, fresh in enumerate(probe_grads):
            if fresh is not None:
                st = out[layer]
                grad = _smooth(st["grad"], fresh, self.gradient_momentum)
                out = _replace(out, layer, {**st, "grad": grad})
        return out


def _smooth(avg, recv, momentum):
    """``momentum * avg + (1 - momentum) * recv``, or ``recv`` without smoothing."""
    if momentum is None:
        return recv
    return momentum * avg + (1.0 - momentum) * recv


def _replace(comm_state, layer, new):
    return tuple(new if k == layer else s for k, s in enumerate(comm_state))


__all__ = ["PipeGCN", "reverse_ring_scatter", "stale_halo"]
