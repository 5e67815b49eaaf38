"""The jitted ``shard_map`` programs of the data-parallel SGNS trainer, cached per mesh and
setting: training steps from host-built pair buffers (:func:`train_program`) or from pairs built
on the devices (:func:`buffered_train_program`, :func:`pairs_program`), and the periodic merges
(:func:`sync_program`, :func:`indexed_sync_program`). Tables are ``f32[P, N, d]`` with the mesh
axis leading; each program runs one replica per device.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxgraph.embed.device_pairs import (
    DeviceWalks,
    gather_rows,
    pair_capacity,
    skipgram_pairs_device,
)
from jaxgraph.embed.hsoftmax import HuffmanTree, hs_step
from jaxgraph.embed.merge import AllSync, PlannedSync, TableSync
from jaxgraph.embed.sgns import SkipGramConfig, Tables, _sgns_step, sample_negatives
from jaxgraph.embed.sizes import padded_size
from jaxgraph.embed.walks import Walks
from jaxgraph.mesh import Bounded, place


def _shard_jit(fn, mesh, axis_name, ins, outs, donate=(), **static):
    """``jit(shard_map(fn))`` with ``axis_name`` and ``static`` bound; ``ins`` and ``outs`` are
    ``(sharded, replicated)`` counts: that many leading arguments (results) sharded on
    ``axis_name``, then that many replicated."""
    specs = lambda counts: (P(axis_name),) * counts[0] + (P(),) * counts[1]
    fn = functools.partial(fn, axis_name=axis_name, **static)
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=specs(ins), out_specs=specs(outs))
    return jax.jit(mapped, donate_argnums=donate)


def _train_chunk(
    tables,
    inputs,
    outputs,
    weights,
    lr,
    num_steps,
    first_step,
    key,
    output,
    *,
    axis_name,
    negatives,
    row_cap,
    share=1,
    span=None,
):
    """The first ``num_steps`` of ``S`` buffered SGNS steps on this device's replica.

    ``num_steps`` (``S'``) is traced, so one compiled program serves every chunk length. Batches
    are interleaved (:mod:`jaxgraph.embed.sgns`) within spans of ``I = span`` steps (None: the
    whole chunk): step ``s`` of the span starting at step ``g`` trains pairs
    ``g B + (s - g) + I' j`` (``j < B``) of the flattened buffer, ``I' = min(I, S' - g)``.
    Step ``s`` draws ``K`` negatives per group of ``share`` pairs from
    ``fold_in(fold_in(key, first_step + s), device)``. ``output`` is the output layer: the
    negatives' :class:`~jaxgraph.embed.sgns.NegativeTable` or hierarchical softmax's
    :class:`~jaxgraph.embed.hsoftmax.HuffmanTree` (no negatives drawn).

    Shapes (per device):
      ``tables: Tables(f32[1, N, d], f32[1, N, d])``, ``inputs, outputs: int32[1, S, B]``,
      ``weights: f32[1, S, B]``, ``lr: f32[S]``, ``num_steps, first_step: int32[]``
      (replicated), ``output`` (replicated) -> ``(Tables, loss f32[1])``.
    """
    device = jax.lax.axis_index(axis_name)
    batch = inputs.shape[-1]
    n = tables.syn0.shape[1]
    # in, out: int32[S B]; w: f32[S B]
    flat_in, flat_out, flat_w = (a[0].reshape(-1) for a in (inputs, outputs, weights))
    lane = jnp.arange(batch, dtype=jnp.int32)  # int32[B]
    span = num_steps if span is None else jnp.minimum(span, num_steps)

    def step(s, carry):
        syn0, syn1, loss, scratch = carry  # f32[N, d], f32[N, d], f32[], int32[2N] | None
        k = jax.random.fold_in(jax.random.fold_in(key, first_step + s), device)
        g = (s // span) * span  # first step of s's span
        at = g * batch + (s - g) + lane * jnp.minimum(span, num_steps - g)  # int32[B]
        ins, outs, w = flat_in[at], flat_out[at], flat_w[at]  # int32[B], int32[B], f32[B]
        if isinstance(output, HuffmanTree):
            syn0, syn1, step_loss, scratch = hs_step(
                syn0, syn1, ins, outs, output, w, lr[s], row_cap, scratch
            )
        else:
            neg = sample_negatives(k, *output, (batch // share, negatives))  # int32[B/G, K]
            syn0, syn1, step_loss, scratch = _sgns_step(
                syn0, syn1, ins, outs, neg, w, lr[s], row_cap, scratch
            )
        return syn0, syn1, loss + step_loss, scratch

    loss0 = jax.lax.pcast(jnp.zeros((), jnp.float32), axis_name, to="varying")
    scratch = None
    if row_cap is not None:
        scratch = jax.lax.pcast(jnp.zeros(2 * n, jnp.int32), axis_name, to="varying")
    syn0, syn1, loss, _ = jax.lax.fori_loop(
        0, num_steps, step, (tables.syn0[0], tables.syn1[0], loss0, scratch)
    )
    return Tables(syn0[None], syn1[None]), loss[None]


def _sync_tables(tables, anchor, *index, axis_name, sync):
    """Shapes (per device): ``Tables(f32[1, N, d], f32[1, N, d])``, the same (or ``None``)
    anchor and, for a planned sync, ``index: int32[C]`` (replicated) -> tables and anchor."""
    squeeze = lambda t: None if t is None else Tables(*(a[0] for a in t))
    unsqueeze = lambda t: None if t is None else Tables(*(a[None] for a in t))
    tables, anchor = sync(squeeze(tables), squeeze(anchor), *index, axis_name=axis_name)
    return unsqueeze(tables), unsqueeze(anchor)


@functools.lru_cache(maxsize=32)
def train_program(
    mesh: Mesh,
    axis_name: str,
    negatives: int,
    row_cap: int | None = None,
    share: int = 1,
    span: int | None = None,
):
    """The jitted :func:`_train_chunk` on every replica, ``train(tables, inputs, outputs,
    weights, lr, num_steps, first_step, key, output) -> (tables, loss f32[P])``: tables
    (donated) and pair buffers sharded on ``axis_name``, the rest replicated."""
    static = dict(negatives=negatives, row_cap=row_cap, share=share, span=span)
    return _shard_jit(_train_chunk, mesh, axis_name, (4, 5), (2, 0), 0, **static)


def _train_buffered(
    tables,
    inputs,
    outputs,
    count,
    updates,
    lr,
    num_steps,
    start,
    first_step,
    key,
    output,
    *,
    batch,
    **static,
):
    """:func:`_train_chunk` on steps ``start .. start + num_steps`` of pair buffers held on
    the device (:func:`pairs_program`), weight 0 from ``count`` on. ``updates`` accumulates the
    rows trained (input and positive output row of every pair) per device.

    Shapes (per device):
      ``inputs, outputs: int32[1, M]`` with ``M >= (start + S) B``, ``count: int32[1]``,
      ``updates: int32[1, N]``, ``lr: f32[S]``, ``start: int32[]`` (replicated), the rest as in
      :func:`_train_chunk` -> ``(Tables, loss f32[1], updates)``.
    """
    size = lr.shape[0] * batch
    lo = start * batch
    x_in = jax.lax.dynamic_slice(inputs[0], (lo,), (size,))
    x_out = jax.lax.dynamic_slice(outputs[0], (lo,), (size,))
    at = lo + jnp.arange(size, dtype=jnp.int32)
    live = (at < count[0]) & (at < lo + num_steps * batch)
    shape = (1, lr.shape[0], batch)
    chunk = (x_in.reshape(shape), x_out.reshape(shape), live.astype(jnp.float32).reshape(shape))
    tables, loss = _train_chunk(tables, *chunk, lr, num_steps, first_step, key, output, **static)
    hits = live.astype(jnp.int32)
    updates = updates[0].at[x_in].add(hits).at[x_out].add(hits)
    return tables, loss, updates[None]


@functools.lru_cache(maxsize=32)
def buffered_train_program(
    mesh: Mesh,
    axis_name: str,
    negatives: int,
    batch: int,
    row_cap: int | None = None,
    share: int = 1,
    span: int | None = None,
):
    """The jitted :func:`_train_buffered`: ``train(tables, inputs, outputs, count, updates, lr,
    num_steps, start, first_step, key, output) -> (tables, loss f32[P], updates)``, the
    first five sharded on ``axis_name`` (tables and ``updates`` donated)."""
    static = dict(negatives=negatives, batch=batch, row_cap=row_cap, share=share, span=span)
    return _shard_jit(_train_buffered, mesh, axis_name, (5, 6), (3, 0), (0, 4), **static)


def _device_pairs(nodes, lengths, ids, thresh_hi, thresh_lo, key, *, window, capacity, axis_name):
    """Per device: ``nodes int32[1, W_p, L]``, ``lengths int32[1, W_p]``, ``ids uint32[1,
    W_p]`` -> ``(inputs int32[1, M], outputs int32[1, M], count int32[1], all counts
    int32[P])`` (the last replicated)."""
    ins, outs, count = skipgram_pairs_device(
        nodes[0], lengths[0], ids[0], thresh_hi, thresh_lo, key, window=window, capacity=capacity
    )
    # Every device's count, replicated (a one-hot psum: the result is mesh-invariant).
    slot = jax.nn.one_hot(
        jax.lax.axis_index(axis_name), jax.lax.axis_size(axis_name), dtype=jnp.int32
    )
    return ins[None], outs[None], count[None], jax.lax.psum(slot * count, axis_name)


@functools.lru_cache(maxsize=32)
def pairs_program(mesh: Mesh, axis_name: str, window: int, capacity: int):
    """The jitted per-device pair builder: every device enumerates the skip-gram pairs of its
    own walks (:func:`jaxgraph.embed.device_pairs.skipgram_pairs_device`) into a buffer of
    ``capacity`` slots."""
    static = dict(window=window, capacity=capacity)
    return _shard_jit(_device_pairs, mesh, axis_name, (3, 3), (3, 1), **static)


@functools.lru_cache(maxsize=32)
def indexed_sync_program(mesh: Mesh, axis_name: str, sync: TableSync):
    """The jitted ``(tables, anchor, index) -> (tables, anchor)`` of a planned sync: ``index:
    int32[C]`` replicated, tables ``f32[P, N, d]`` sharded on ``axis_name`` (both donated)."""
    return _shard_jit(_sync_tables, mesh, axis_name, (2, 1), (2, 0), (0, 1), sync=sync)


@functools.lru_cache(maxsize=32)
def sync_program(mesh: Mesh, axis_name: str, sync: TableSync):
    """The jitted ``(tables, anchor) -> (tables, anchor)`` applying ``sync`` on every replica
    (tables ``f32[P, N, d]`` sharded on ``axis_name``, both donated)."""
    return _shard_jit(_sync_tables, mesh, axis_name, (2, 0), (2, 0), (0, 1), sync=sync)


def device_block_pairs(
    walks: Walks | DeviceWalks, ids: np.ndarray, device_args, mesh: Mesh, config: SkipGramConfig
):
    """Moves the walks ``ids`` to the devices (split evenly, in order, as the host-built pairs
    are) and builds their pairs there (:func:`pairs_program`).

    Returns ``((inputs, outputs, counts), per_device_counts, bytes_sent)``: the buffers
    ``int32[P, M]`` and ``counts int32[P]`` sharded over the mesh, and the bytes sent."""
    p, axis = mesh.shape[mesh.axis_names[0]], mesh.axis_names[0]
    shard = NamedSharding(mesh, P(axis))
    parts = np.array_split(ids, p)
    wp = padded_size(max(1, max(part.size for part in parts)))
    index = np.zeros((p, wp), np.int32)
    lengths = np.zeros((p, wp), np.int32)  # padding rows have length 0: no pairs
    for d, part in enumerate(parts):
        index[d, : part.size] = part
        lengths[d, : part.size] = walks.lengths[part]
    sent = lengths.nbytes + index.nbytes
    if isinstance(walks, DeviceWalks):  # rows move device -> device
        rows = gather_rows(walks.nodes, jax.device_put(index, walks.nodes.sharding))
        nodes = jax.device_put(rows, shard)
    else:
        rows = np.asarray(walks.nodes)[index]
        sent += rows.nbytes
        nodes = place(rows, shard)
    lengths, ids_dev = place_all((lengths, index.astype(np.uint32)), shard)
    capacity = pair_capacity(wp, nodes.shape[-1], config.window)
    capacity += config.sync_every * config.batch_size
    build = Bounded(pairs_program(mesh, axis, config.window, capacity), mesh)
    inputs, outputs, counts, all_counts = build(nodes, lengths, ids_dev, *device_args)
    return (inputs, outputs, counts), [int(c) for c in np.asarray(all_counts)], sent


class TrainerPrograms(NamedTuple):
    """The programs of one :class:`~jaxgraph.embed.skipgram.SkipGramTrainer`, each
    :class:`~jaxgraph.mesh.Bounded` (on an emulated CPU mesh a call waits for its result).

    Attributes:
      train, train_buffered: steps from host-built and from device-built pair buffers.
      full_sync: every row of both tables, by the sync's merge rule (a round's closing merge).
      periodic_sync: the sync every ``sync_every`` steps (indexed by a plan's rows for a
        :class:`~jaxgraph.embed.merge.PlannedSync`).
      input_rows_sync: :class:`~jaxgraph.embed.merge.AllSync` at given ``syn0`` rows (None for
        other syncs).
    """

    train: Bounded
    train_buffered: Bounded
    full_sync: Bounded
    periodic_sync: Bounded
    input_rows_sync: Bounded | None


def trainer_programs(mesh: Mesh, config: SkipGramConfig, sync: TableSync) -> TrainerPrograms:
    """The programs a trainer with ``config`` and the periodic ``sync`` runs on ``mesh``."""
    axis, k, b, cap = mesh.axis_names[0], config.negatives, config.batch_size, config.row_cap
    share, span = config.shared_negatives, config.interleave
    periodic = indexed_sync_program if isinstance(sync, PlannedSync) else sync_program
    input_rows = indexed_sync_program(mesh, axis, sync) if isinstance(sync, AllSync) else None
    bound = lambda program: None if program is None else Bounded(program, mesh)
    return TrainerPrograms(
        train=bound(train_program(mesh, axis, k, cap, share, span)),
        train_buffered=bound(buffered_train_program(mesh, axis, k, b, cap, share, span)),
        full_sync=bound(sync_program(mesh, axis, AllSync(sync.merge))),
        periodic_sync=bound(periodic(mesh, axis, sync)),
        input_rows_sync=bound(input_rows),
    )


@jax.jit
def max_row_norm(tables: Tables) -> jax.Array:
    """The largest row norm over both tables and every replica: ``Tables[P, N, d] -> f32[]``."""
    return jnp.sqrt(jnp.max(jnp.stack([jnp.max(jnp.sum(t * t, axis=-1)) for t in tables])))


def local_replica(table: jax.Array) -> np.ndarray:
    """The replica ``[N, d]`` of ``table: [P, N, d]`` on this process's first device (after a
    full merge every replica is the same, on every process)."""
    shard = min(table.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.asarray(shard.data)[0]


def place_all(values, sharding):
    """Host arrays (a tuple), identical on every process, placed as ``sharding``."""
    return tuple(place(v, sharding) for v in values)
