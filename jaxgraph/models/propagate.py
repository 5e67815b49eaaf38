"""Aggregation over a partitioned graph, independent of the communication strategy."""

from __future__ import annotations

import functools
import math
from typing import Literal

import jax
import jax.numpy as jnp

from jaxgraph.comm.strategy import CommState, CommStrategy
from jaxgraph.mesh import to_varying, varying_axes
from jaxgraph.partition.shard import GraphShard

Norm = Literal["gcn", "mean"]


class Propagator:
    """Runs a strategy's exchange and the local aggregation for one traced program.

    A trace-time object: the model calls it once per layer; it threads ``comm_state`` through
    the strategy and adds up :attr:`bytes_moved`, which the step reads after the forward pass.

    Args:
      shard: this device's :class:`GraphShard` (no leading axis).
      comm_state: this device's state of ``strategy``.
      axis_name, num_parts: the mesh axis and its size.
      key: a PRNG key for stochastic strategies (folded per layer), or ``None``.
      probes: per layer, the strategy's backward probe (:meth:`CommStrategy.probes`), or None.
      split: aggregate the local-source edges before the halo exchange and the halo-source
        edges after it, where the shard has them apart (:meth:`__call__`); otherwise one
        aggregation over ``[local rows | halo rows]``. Results agree to fp32 rounding.
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
        probes=None,
        split: bool = True,
    ):
        self.shard = shard
        self.strategy = strategy
        self.comm_state = comm_state
        self.axis_name = axis_name
        self.num_parts = num_parts
        self.key = key
        self.probes = probes
        self.split = split
        self.bytes_moved = jnp.float32(0)
        self._prefetched: dict[int, jax.Array] = {}

    @property
    def exchange_before_dropout(self) -> bool:
        """Whether the model should fetch each layer's halo with :meth:`prefetch`, before its
        dropout, rather than exchange the rows after it (the strategy's choice)."""
        return self.strategy.exchange_before_dropout

    @property
    def num_local(self) -> int:
        return self.shard.x.shape[0]

    def gather(self, h: jax.Array, *, layer: int) -> jax.Array:
        """Local rows followed by the halo rows: ``[Nl, F] -> [Nl + H, F]``."""
        return jnp.concatenate([h, self.exchange(h, layer=layer)], axis=0)

    def prefetch(self, h: jax.Array, *, layer: int, dropout) -> jax.Array:
        """Exchanges the halo of ``h`` before ``dropout``, then drops out ``[local | halo]``
        at once (PipeGCN's order); returns the local rows (``[Nl, F] -> [Nl, F]``) and keeps
        the halo for this layer's aggregation, which then runs no exchange of its own."""
        n = h.shape[0]
        both = dropout(jnp.concatenate([h, self._exchange(h, layer=layer)], axis=0))
        self._prefetched[layer] = both[n:]  # f32[H, F]
        return both[:n]

    def drop(self, h: jax.Array, *, layer: int, dropout) -> jax.Array:
        """``dropout`` on layer ``layer``'s input in the strategy's order: through
        :meth:`prefetch` where :attr:`exchange_before_dropout` (PipeGCN), else on the local rows
        alone, the layer's exchange following it (``[Nl, F] -> [Nl, F]``)."""
        if self.exchange_before_dropout:
            return self.prefetch(h, layer=layer, dropout=dropout)
        return dropout(h)

    def exchange(self, h: jax.Array, *, layer: int) -> jax.Array:
        """The halo rows of ``h`` from the strategy, in ``h``'s dtype: ``[Nl, F] -> [H, F]``
        (after :meth:`prefetch` of ``layer``, the prefetched, dropped-out halo)."""
        if layer in self._prefetched:
            return self._prefetched.pop(layer)
        return self._exchange(h, layer=layer)

    def _exchange(self, h: jax.Array, *, layer: int) -> jax.Array:
        key = None if self.key is None else jax.random.fold_in(self.key, layer)
        # Only strategies that trace their backward messages have probes.
        probe = None if self.probes is None else self.probes[layer]
        h_remote, self.comm_state, nbytes = self.strategy.exchange(
            h,
            self.shard,
            self.comm_state,
            layer=layer,
            axis_name=self.axis_name,
            num_parts=self.num_parts,
            key=key,
            probe=probe,
        )
        self.bytes_moved = self.bytes_moved + nbytes
        return h_remote.astype(h.dtype)

    def __call__(self, h: jax.Array, *, layer: int, norm: Norm) -> jax.Array:
        """Normalised neighbour aggregation ``[Nl, F] -> [Nl, F]``.

        ``norm="gcn"``: ``Â h`` with ``Â = D_in^-1/2 (A + I) D_out^-1/2`` of the global graph.
        ``norm="mean"``: the mean over in-neighbours (zero for nodes without in-edges).

        Split by edge source (the central/marginal overlap of AdaQP, Wan et al., MLSys 2023,
        with static shapes): ``out = [A_local h (+ self term)] + A_remote h_halo``. The first
        term is traced before the exchange and does not depend on it, so the scheduler may run
        it while the collectives are in flight; central rows receive no halo-source edge, so
        the second term adds exact zeros to them whatever the halo holds.
        """
        s, n, gcn = self.shard, self.num_local, norm == "gcn"
        split = self.split and s.local_edge_src is not None
        if split:  # the local-source term, traced before the exchange
            local_w = s.local_gcn_weight if gcn else s.local_mean_weight  # f32[El]
            out = segment_sum_sorted(h, s.local_edge_src, s.local_edge_dst, local_w, n)
        else:  # one term over [local rows | halo rows], f32[Nl + H, F]
            weight = s.gcn_edge_weight if gcn else s.mean_edge_weight  # f32[Em]
            out = segment_sum_sorted(self.gather(h, layer=layer), s.edge_src, s.edge_dst, weight, n)
        if gcn:
            out = out + s.gcn_self_weight[:, None] * h
        if not split:
            return out
        h_remote = self.exchange(h, layer=layer)  # f32[H, F]
        if h_remote.shape[0] == 0:  # no halo (P = 1 or no cut edge): only pad remote edges
            return out
        remote_w = s.remote_gcn_weight if gcn else s.remote_mean_weight  # f32[Er]
        return out + segment_sum_sorted(h_remote, s.remote_edge_src, s.remote_edge_dst, remote_w, n)


def segment_sum_sorted(
    h: jax.Array, src: jax.Array, dst: jax.Array, weight: jax.Array, num_segments: int
) -> jax.Array:
    """``out[v] = sum_{e: dst[e] = v} weight[e] * h[src[e]]`` with ``dst`` sorted ascending.

    The edges go in chunks of about :data:`_CHUNK_BYTES` of messages (a ``lax.scan`` adding each
    chunk into the output in place), so the ``[E, F]`` message array (10 GB at 20M edges,
    F = 128) is never materialised. Results equal the one-shot
    ``segment_sum(h[src] * weight[:, None], dst)``: the additions happen in the same edge order.
    Gradients (a custom VJP): ``d h`` is the same gather/scatter with ``src`` and ``dst``
    swapped, ``d weight[e] = <g[dst[e]], h[src[e]]>``; integer inputs get no cotangent, and
    forward-mode autodiff (``jax.jvp``) is not supported.

    Shapes:
      ``h: [N_src, F]``, ``src, dst, weight: [E]`` -> ``[num_segments, F]``.
    """
    h, src, dst, weight = (jnp.asarray(a) for a in (h, src, dst, weight))
    # Inside shard_map, give the differentiable inputs the device-varying type of all inputs
    # before the custom VJP (its cotangents must have its inputs' types); the transpose of
    # this cast (a psum for an input that is the same on every device) stays with autodiff.
    union = frozenset().union(*(varying_axes(a) for a in (h, src, dst, weight)))
    h, weight = (to_varying(a, union) for a in (h, weight))
    return _gather_scatter(h, src, dst, weight, int(num_segments), True)


# Messages per chunk: ~2 MiB (4096 edges at F = 128, fp32) stays in cache, reused by every chunk.
_CHUNK_BYTES = 2 << 20
_MIN_CHUNK = 256


def _chunk_edges(h: jax.Array) -> int:
    row_bytes = max(1, math.prod(h.shape[1:])) * h.dtype.itemsize
    return max(_MIN_CHUNK, _CHUNK_BYTES // row_bytes)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _gather_scatter(h, gather_idx, scatter_idx, weight, num_segments, indices_are_sorted):
    """``out[scatter_idx[e]] += weight[e] * h[gather_idx[e]]``, chunk by chunk, in edge order:
    ``h: [N_src, ...]``, ``gather_idx, scatter_idx, weight: [E]`` -> ``[num_segments, ...]``."""
    num_edges = gather_idx.shape[0]
    chunk = _chunk_edges(h)
    num_chunks = num_edges // chunk
    trailing = (1,) * (h.ndim - 1)

    def add_chunk(acc, gi, si, w):
        msgs = h.at[gi].get(mode="promise_in_bounds") * w.reshape(-1, *trailing).astype(h.dtype)
        return acc.at[si].add(msgs, indices_are_sorted=indices_are_sorted, mode="promise_in_bounds")

    def add_chunk_at(acc, i):
        sl = lambda a: jax.lax.dynamic_slice_in_dim(a, i * chunk, chunk)  # noqa: E731
        return add_chunk(acc, sl(gather_idx), sl(scatter_idx), sl(weight))

    acc = jnp.zeros_like(h, shape=(num_segments,) + h.shape[1:])
    if num_chunks:
        # The first chunk runs outside the loop: under shard_map its result carries the
        # device-varying type of all inputs, which the scan carry must have from the start.
        acc = add_chunk_at(acc, 0)
    if num_chunks > 1:
        acc, _ = jax.lax.scan(
            lambda acc, i: (add_chunk_at(acc, i), None),
            acc,
            jnp.arange(1, num_chunks, dtype=jnp.int32),
        )
    if num_edges > num_chunks * chunk:
        rest = num_chunks * chunk
        acc = add_chunk(acc, gather_idx[rest:], scatter_idx[rest:], weight[rest:])
    return acc


def _edge_dots(h: jax.Array, g: jax.Array, gather_idx: jax.Array, scatter_idx: jax.Array):
    """``<g[scatter_idx[e]], h[gather_idx[e]]>`` per edge, chunked like the aggregation:
    ``h: [N_src, ...]``, ``g: [N_out, ...]``, indices ``[E]`` -> ``[E]`` in h's dtype."""
    num_edges = gather_idx.shape[0]
    chunk = _chunk_edges(h)
    num_chunks = num_edges // chunk
    axes = tuple(range(1, h.ndim))

    def dots(gi, si):
        return jnp.sum(
            g.at[si].get(mode="promise_in_bounds") * h.at[gi].get(mode="promise_in_bounds"),
            axis=axes,
        )

    parts = []
    if num_chunks:

        def body(_, i):
            sl = lambda a: jax.lax.dynamic_slice_in_dim(a, i * chunk, chunk)  # noqa: E731
            return None, dots(sl(gather_idx), sl(scatter_idx))

        _, per_chunk = jax.lax.scan(body, None, jnp.arange(num_chunks, dtype=jnp.int32))
        parts.append(per_chunk.reshape(-1))
    if num_edges > num_chunks * chunk:
        rest = num_chunks * chunk
        parts.append(dots(gather_idx[rest:], scatter_idx[rest:]))
    if not parts:
        return jnp.zeros((0,), h.dtype)
    return jnp.concatenate(parts) if len(parts) > 1 else parts[0]


def _gather_scatter_fwd(h, gather_idx, scatter_idx, weight, num_segments, indices_are_sorted):
    out = _gather_scatter(h, gather_idx, scatter_idx, weight, num_segments, indices_are_sorted)
    return out, (h, gather_idx, scatter_idx, weight)


def _gather_scatter_bwd(num_segments, indices_are_sorted, res, g):
    del num_segments, indices_are_sorted
    h, gather_idx, scatter_idx, weight = res
    # The transpose is the same operation with the index roles swapped; the gradient
    # scatter goes over the (unsorted) gather indices.
    dh = _gather_scatter(g, scatter_idx, gather_idx, weight, h.shape[0], False)
    dweight = _edge_dots(h, g, gather_idx, scatter_idx).astype(weight.dtype)
    return dh, None, None, dweight


_gather_scatter.defvjp(_gather_scatter_fwd, _gather_scatter_bwd)
