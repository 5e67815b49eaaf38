"""Aggregation over a partitioned graph, independent of the communication strategy."""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from jaxgraph.comm.strategy import CommState, CommStrategy, GraphShard

Norm = Literal["gcn", "mean"]


class Propagator:
    """Runs a strategy's exchange and the local aggregation for one traced program.

    A ``Propagator`` exists only while a step is being traced: the model calls it once per
    layer, it threads ``comm_state`` through the strategy and adds up the bytes moved. The
    step reads :attr:`comm_state` and :attr:`bytes_moved` after the forward pass. It is a
    Python object used at trace time, so the traced program stays pure.

    Args:
      shard: this device's :class:`GraphShard` (no leading axis).
      strategy: the communication strategy.
      comm_state: this device's strategy state.
      axis_name, num_parts: the mesh axis and its size.
      key: a PRNG key for stochastic strategies (folded per layer), or ``None``.
    """

    def __init__(
        self,
        shard: GraphShard,
        strategy: CommStrategy,
        comm_state: CommState,
        *,
        axis_name: str,
        num_parts: int,
        key: jax.Array | None = None,
    ):
        self.shard = shard
        self.strategy = strategy
        self.comm_state = comm_state
        self.axis_name = axis_name
        self.num_parts = num_parts
        self.key = key
        self.bytes_moved = jnp.float32(0)

    @property
    def num_local(self) -> int:
        return self.shard.x.shape[0]

    def gather(self, h: jax.Array, *, layer: int) -> jax.Array:
        """Local rows followed by the halo rows: ``[Nl, F] -> [Nl + H, F]``."""
        key = None if self.key is None else jax.random.fold_in(self.key, layer)
        h_remote, self.comm_state, nbytes = self.strategy.exchange(
            h,
            self.shard,
            self.comm_state,
            layer=layer,
            axis_name=self.axis_name,
            num_parts=self.num_parts,
            key=key,
        )
        self.bytes_moved = self.bytes_moved + nbytes
        return jnp.concatenate([h, h_remote.astype(h.dtype)], axis=0)

    def __call__(self, h: jax.Array, *, layer: int, norm: Norm) -> jax.Array:
        """Normalised neighbour aggregation ``[Nl, F] -> [Nl, F]``.

        ``norm="gcn"``: ``Â h`` with ``Â = D_in^-1/2 (A + I) D_out^-1/2`` of the global graph.
        ``norm="mean"``: the mean over in-neighbours (zero for nodes without in-edges).
        """
        s = self.shard
        h_all = self.gather(h, layer=layer)  # f32[Nl + H, F]
        weight = s.gcn_edge_weight if norm == "gcn" else s.mean_edge_weight  # f32[Em]
        out = segment_sum_sorted(h_all, s.edge_src, s.edge_dst, weight, self.num_local)
        if norm == "gcn":
            out = out + s.gcn_self_weight[:, None] * h
        return out


def segment_sum_sorted(
    h: jax.Array, src: jax.Array, dst: jax.Array, weight: jax.Array, num_segments: int
) -> jax.Array:
    """``out[v] = sum_{e: dst[e] = v} weight[e] * h[src[e]]`` with ``dst`` sorted ascending.

    Shapes:
      ``h: [N_src, F]``, ``src, dst, weight: [E]`` -> ``[num_segments, F]``.
    """
    msgs = jnp.take(h, src, axis=0) * weight[:, None].astype(h.dtype)  # [E, F]
    return jax.ops.segment_sum(msgs, dst, num_segments=num_segments, indices_are_sorted=True)
