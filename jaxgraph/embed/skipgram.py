"""The data-parallel SGNS trainer (:class:`SkipGramTrainer`): one round of walks at a time.

Each device of a 1-D mesh trains on its shard of the round's walks with a full replica of both
tables (``f32[P, N, d]``; the update is :mod:`jaxgraph.embed.sgns`'s, the programs
:mod:`jaxgraph.embed.programs`'). A :class:`~jaxgraph.embed.merge.TableSync` merges rows every
``sync_every`` steps (``merge="sum"``: at most :func:`~jaxgraph.embed.merge.sum_period`'s); a
round ends with a full merge, so the feedback and the output read one consistent table. On one
device, the CPU kernel's ``T > 1`` threads train ``T`` host copies of its tables, summed as
``T`` replicas would be (:attr:`SkipGramTrainer.copies`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed.corpus import (
    alias_table,
    corpus_counts,
    keep_probability,
    negative_weights,
    pack_steps,
    split_pairs,
    step_buffers,
)
from jaxgraph.embed.cpu_replicas import HostReplicas, host_copies
from jaxgraph.embed.device_pairs import DeviceWalks, keep_thresholds, key_words
from jaxgraph.embed.hsoftmax import HuffmanTree, huffman_tree
from jaxgraph.embed.merge import (
    AllSync,
    PlannedSync,
    TableSync,
    input_row_index,
    sum_period,
)
from jaxgraph.embed.programs import (
    device_block_pairs,
    local_replica,
    max_row_norm,
    place_all,
    trainer_programs,
)
from jaxgraph.embed.sgns import NegativeTable, SkipGramConfig, Tables, init_tables, round_walk_order
from jaxgraph.embed.walks import Walks
from jaxgraph.mesh import place

# Sum merges this many steps apart (or more) swing from round to round on a hub-heavy graph
# (merge_rows); the trainer warns at them.
SUM_SWING_STEPS = 512


@dataclasses.dataclass
class RoundStats:
    """What one :meth:`SkipGramTrainer.train_round` did (host-side numbers)."""

    walks: int
    tokens: int
    pairs: int
    steps: int
    syncs: int
    sync_rows: int
    lr: float
    loss: float
    seconds_pairs: float
    seconds: float
    # Bytes of training input moved host -> device: the pair buffers (``pairs="host"``) or the
    # walk rows (``pairs="device"``; 0 when the walks were decoded on a device already).
    input_bytes: int = 0
    max_norm: float = float("nan")  # the largest row norm after the round's closing merge


class SkipGramTrainer:
    """Data-parallel SGNS over the devices of a 1-D mesh, one round of walks at a time.

    One replica per device of ``mesh``. ``seed`` seeds the table initialisation, the walk
    shuffling, the pairs and the negatives; ``degrees`` (``int[N]``) is required when
    ``config.counts == "degree"``; ``sync`` is the periodic :class:`TableSync` (default
    ``AllSync(config.merge)``).

    Raises:
      ValueError: non-positive ``num_nodes``, a mesh that is not 1-D, missing or mis-shaped
        ``degrees``, the ``"global"`` schedule without ``schedule_rounds``.
    """

    def __init__(
        self,
        num_nodes: int,
        config: SkipGramConfig,
        mesh: Mesh,
        *,
        seed: int = 0,
        degrees: np.ndarray | None = None,
        sync: TableSync | None = None,
    ):
        if num_nodes <= 0:
            raise ValueError(f"num_nodes must be positive, got {num_nodes}")
        if len(mesh.axis_names) != 1:
            raise ValueError(f"the trainer needs a 1-D mesh, got axes {mesh.axis_names}")
        hierarchical = config.objective == "hierarchical"
        for name, used in (
            ("counts='degree'", config.counts == "degree"),
            ("objective='hierarchical'", hierarchical),
        ):
            if used and (degrees is None or np.shape(degrees) != (num_nodes,)):
                raise ValueError(f"{name} needs degrees of shape [num_nodes]")
        config.round_lr(0)  # an incomplete schedule ('global' without its rounds) fails here
        self.num_nodes = num_nodes
        self.mesh = mesh
        self.axis_name = mesh.axis_names[0]
        self.num_devices = mesh.shape[self.axis_name]
        self.seed = seed
        self.sync = sync or AllSync(config.merge)
        self.kernel = config.kernel_in_use()
        # One device on the CPU kernel's threads: each trains a copy of the tables on a
        # contiguous T-th of each period, and the copies' changes are summed every sync_every
        # steps of each (at most sum_period's); the config this trainer runs says T times that.
        one_device = self.kernel == "cpu" and self.num_devices == 1
        self.copies = host_copies(config, num_nodes) if one_device else 1
        if self.copies > 1:
            period = sum_period(config.sync_every, num_nodes, config.batch_size, self.copies)
            config = dataclasses.replace(config, sync_every=self.copies * period)
        elif self.sync.merge == "sum":  # sum's bounded period
            period = sum_period(config.sync_every, num_nodes, config.batch_size, self.num_devices)
            config = dataclasses.replace(config, sync_every=period)
        self.config = config
        if hierarchical and isinstance(self.sync, PlannedSync):
            raise ValueError(
                "objective='hierarchical' needs a sync of every row (AllSync): a planned sync "
                "picks syn1 rows by node, and hierarchical softmax's syn1 rows are tree nodes"
            )
        if self.sync.merge != config.merge:
            raise ValueError(
                f"sync merges by {self.sync.merge!r} but config.merge is {config.merge!r}"
            )
        swings = self.sync.merge == "sum" and config.sync_every >= SUM_SWING_STEPS
        if self.num_devices > 1 and swings:
            warnings.warn(
                f"merge='sum' every {config.sync_every} steps: summed replica changes over "
                "long periods overshoot on hub-heavy graphs, and the dot AUC swings from round "
                "to round with healthy loss and row norms (experiments/README.md, 'Fewer "
                "merges'); merge more often than "
                f"every {SUM_SWING_STEPS} steps, or use merge='mean' or 'touched'",
                stacklevel=2,
            )
        self.degrees = None if degrees is None else np.asarray(degrees, np.int64)
        self.counts = np.zeros(num_nodes, np.int64)  # corpus counts of all rounds so far
        # Row updates per node (input row of syn0 + positive output row of syn1 of each trained
        # pair), all rounds so far: the hotness of selective syncs (jaxgraph.embed.sync).
        self.update_counts = np.zeros(num_nodes, np.int64)
        self.round_update_counts = np.zeros(num_nodes, np.int64)  # the same, this round only
        # round_update_counts at each row's last merge: the difference is the pending count.
        self._merged_round_counts = np.zeros(num_nodes, np.int64)
        self.periodic_syncs = 0  # keys the row draws of planned syncs
        self._planned = isinstance(self.sync, PlannedSync)
        # AllSync merges syn0 at the input rows trained since the last merge only (exact:
        # merge_rows), which the host knows when it builds the pairs; one replica never merges.
        self._skip_untouched = isinstance(self.sync, AllSync)
        # One replica under AllSync: a periodic merge would be the identity, none runs.
        self._never_syncs = self._skip_untouched and self.num_devices == 1
        # One replica merged by its mean is itself: the closing merges run no program.
        self._merges_itself = self.num_devices == 1 and self.sync.merge == "mean"
        self.programs = trainer_programs(mesh, config, self.sync)
        self._tracks_inputs = self.copies > 1 or (
            self._skip_untouched and self.num_devices > 1 and config.pairs == "host"
        )
        self._inputs_since_merge = np.zeros(num_nodes, bool)
        self._shard = NamedSharding(mesh, P(self.axis_name))
        self._rep = NamedSharding(mesh, P())
        # The CPU kernel trains host copies of the tables (None: none taken), from pairs packed
        # in buffers it reuses (None: not yet made).
        self._host: HostReplicas | None = None
        self._packed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # The keys of the CPU kernel's negatives, a replica each, set by each round.
        self._negative_keys = [0] * self.num_devices
        # Hierarchical softmax's tree, one for the whole run; path_length: its longest path.
        self._tree, self.path_length = None, None
        if hierarchical:
            tree = huffman_tree(degrees)
            self._tree = tree if self.kernel == "cpu" else HuffmanTree(*place_all(tree, self._rep))
            self.path_length = tree.points.shape[1]
        self._step = 0  # global step counter: keys the negatives
        self._input_bytes = 0  # training input moved host -> device, all rounds
        self._since_sync = 0
        self.tables = self._init(jax.random.key(seed))
        # Row-update counts of device-built pairs, int32[P, N] per device until read back.
        zeros = lambda: jnp.zeros((self.num_devices, num_nodes), jnp.int32)
        self._zero_updates = jax.jit(zeros, out_shardings=self._shard)
        self._sum_updates = jax.jit(lambda u: jnp.sum(u, axis=0), out_shardings=self._rep)
        self._updates = self._zero_updates() if config.pairs == "device" else None
        # The last merged value, for merge="sum" (a separate buffer: both are donated).
        self.anchor = self._copy(self.tables) if self.sync.needs_anchor else None

    def _flush_updates(self) -> None:
        """Adds the device-side update counts to the host counters and clears them."""
        if self._updates is None:
            return
        total = np.asarray(self._sum_updates(self._updates)).astype(np.int64)
        self.update_counts += total
        self.round_update_counts += total
        self._updates = self._zero_updates()

    def _copy(self, tables: Tables) -> Tables:
        return jax.jit(
            lambda t: jax.tree.map(jnp.copy, t), out_shardings=Tables(self._shard, self._shard)
        )(tables)

    def _init(self, key) -> Tables:
        n, d, p = self.num_nodes, self.config.dim, self.num_devices

        def init():
            t = init_tables(key, n, d, self.config.init_scale)
            return Tables(*(jnp.broadcast_to(a, (p, n, d)) for a in t))

        return jax.jit(init, out_shardings=Tables(self._shard, self._shard))()

    def compile(self) -> float:
        """Compiles the programs ahead of the first round (a zero-step chunk, the syncs) without
        changing the tables; returns the seconds spent. Programs whose shapes come from the
        corpus compile on first use of each size."""
        t0 = time.perf_counter()
        empty = [np.zeros(0, np.int32)] * self.num_devices
        output = self._output_layer(np.ones(self.num_nodes))
        key = jax.random.key(self.seed)
        loss = self._run(empty, empty, 0, 0, np.zeros(0), key, output)
        # A planned sync's index size varies: compiled on first use; one replica's AllSync
        # never runs.
        if not self._planned and not self._never_syncs:
            self.programs.periodic_sync.lower(self.tables, self.anchor).compile()
        if not self._merges_itself:
            self.programs.full_sync.lower(self.tables, self.anchor).compile()
        jax.block_until_ready((self.tables, loss))
        return time.perf_counter() - t0

    def train_round(self, walks: Walks | DeviceWalks, round_index: int) -> RoundStats:
        """Trains one pass over ``walks`` at the round's learning rate, then merges the replicas.

        The walks are shuffled (seeded), cut into blocks of about ``block_pairs`` pairs and, in
        each block, split evenly over the devices. Walks already on a device
        (:class:`DeviceWalks`, single-process runs) are read back for ``pairs="host"``.
        """
        t0 = time.perf_counter()
        cfg = self.config
        n, b, p = self.num_nodes, cfg.batch_size, self.num_devices
        if isinstance(walks, DeviceWalks):
            if cfg.pairs == "host":
                w = walks.num_walks
                walks = Walks(np.asarray(walks.nodes)[:w], np.asarray(walks.lengths))
            elif jax.process_count() > 1:
                raise ValueError("walks on a device are for single-process runs: pass host walks")
        on_device = isinstance(walks, DeviceWalks)
        self.counts += walks.counts(n) if on_device else corpus_counts(walks, n)
        self.round_update_counts[:] = 0
        self._merged_round_counts[:] = 0  # the previous round ended with a full merge
        counts = self.counts if cfg.counts == "corpus" else self.degrees
        lr = cfg.round_lr(round_index)
        stats = RoundStats(walks.num_walks, walks.num_tokens, 0, 0, 0, 0, lr, 0.0, 0.0, 0.0)
        if walks.num_walks == 0 or counts.sum() == 0:
            stats.seconds = time.perf_counter() - t0
            return stats
        keep = keep_probability(counts, cfg.sample)
        output = self._output_layer(counts)
        key = jax.random.fold_in(jax.random.key(self.seed), round_index)
        neg = hr.PURPOSE_NEGATIVES
        self._negative_keys = [
            hr.round_key(self.seed, neg, round_index, d) for d in range(self.num_devices)
        ]
        pair_key = hr.round_key(self.seed, hr.PURPOSE_PAIRS, round_index)
        device_args = None
        if cfg.pairs == "device":
            device_args = place_all((*keep_thresholds(keep), key_words(pair_key)), self._rep)
        sent0 = self._input_bytes
        order = round_walk_order(self.seed, round_index, walks.num_walks)
        tokens = walks.lengths[order].astype(np.int64)
        token_end = np.cumsum(tokens)
        est_pairs = token_end[-1] * (cfg.window + 1)
        num_blocks = max(1, math.ceil(est_pairs / cfg.block_pairs))
        losses = []
        t_pairs = 0.0
        for block in np.array_split(np.arange(walks.num_walks), num_blocks):
            if block.size == 0:
                continue
            tp = time.perf_counter()
            if device_args is None:
                ins, outs = split_pairs(walks, order[block], keep, cfg.window, pair_key, p)
                per_dev = [i.shape[0] for i in ins]
                run = functools.partial(self._run, ins, outs)
            else:
                buffers, per_dev, sent = device_block_pairs(
                    walks, order[block], device_args, self.mesh, cfg
                )
                self._input_bytes += sent
                run = functools.partial(self._run_buffered, buffers)
            t_pairs += time.perf_counter() - tp
            steps = max(math.ceil(m / b) for m in per_dev)
            if steps == 0:
                continue
            stats.pairs += int(sum(per_dev))
            # Learning rate per step, by token progress through the round.
            done0 = token_end[block[0]] - tokens[block[0]]
            block_tokens = token_end[block[-1]] - done0
            frac = (done0 + block_tokens * np.arange(steps) / steps) / token_end[-1]
            alphas = cfg.step_rates(round_index, frac)
            start = 0
            while start < steps:
                take = min(cfg.sync_every - self._since_sync, steps - start)
                loss = run(start, take, alphas, key, output)
                losses.append(loss)
                stats.steps += take
                start += take
                self._since_sync += take
                if self._since_sync >= cfg.sync_every and start < steps:
                    rows = self._sync_periodic()
                    stats.sync_rows += rows
                    stats.syncs += rows > 0
                    self._since_sync = 0
        self._flush_updates()
        self._push()
        # Round end: a full merge, so the feedback and the output read one table.
        self._full_sync()
        self._merged_round_counts[:] = self.round_update_counts
        self._inputs_since_merge[:] = False
        self._since_sync = 0
        stats.input_bytes = self._input_bytes - sent0
        stats.syncs += 1
        stats.sync_rows += 2 * n
        stats.loss = float(sum(float(jnp.sum(x)) for x in losses)) / max(stats.pairs, 1)
        stats.max_norm = float(max_row_norm(self.tables))
        stats.seconds_pairs = t_pairs
        stats.seconds = time.perf_counter() - t0
        return stats

    def _sync_periodic(self) -> int:
        """Runs one periodic sync; returns the rows (of both tables) it all-reduced (0: none
        was needed)."""
        sync_index = self.periodic_syncs
        self.periodic_syncs += 1
        if self.copies > 1:  # one device's copies, summed whatever the sync
            return self._merge_host()
        if self._never_syncs:
            return 0  # merging one replica is the identity
        if self._skip_untouched and self._host is not None:  # the CPU kernel's tables
            return self._merge_host()
        self._push()
        if self._skip_untouched:
            index = self._input_rows()
            self._inputs_since_merge[:] = False
            if index is None:
                self.tables, self.anchor = self.programs.full_sync(self.tables, self.anchor)
                return 2 * self.num_nodes
            self.tables, self.anchor = self.programs.input_rows_sync(
                self.tables, self.anchor, place(index, self._rep)
            )
            return index.size + self.num_nodes
        if not self._planned:
            self.tables, self.anchor = self.programs.periodic_sync(self.tables, self.anchor)
            return self.sync.rows(self.num_nodes)
        self._flush_updates()
        counts = (self.update_counts, self.round_update_counts)
        plan = self.sync.plan(*counts, sync_index, self.seed, pending_counts=self.pending_counts)
        if plan.index is None:
            self.tables, self.anchor = self.programs.full_sync(self.tables, self.anchor)
            self._merged_round_counts[:] = self.round_update_counts
        else:
            index = place(plan.index, self._rep)
            self.tables, self.anchor = self.programs.periodic_sync(self.tables, self.anchor, index)
            self._merged_round_counts[plan.index] = self.round_update_counts[plan.index]
        return plan.rows

    def _full_sync(self) -> None:
        """Merges every row of the device replicas (nothing to do for one replica's mean)."""
        if not self._merges_itself:
            self.tables, self.anchor = self.programs.full_sync(self.tables, self.anchor)

    def _input_rows(self) -> np.ndarray | None:
        """:func:`~jaxgraph.embed.merge.input_row_index` of the ``syn0`` rows trained since the
        last merge; None (a full merge) when the host does not see the inputs."""
        return input_row_index(self._inputs_since_merge) if self._tracks_inputs else None

    @property
    def pending_counts(self) -> np.ndarray:
        """``int64[N]`` row updates since each row was last merged (host counts; device-built
        pairs' counts are added at each planned sync and at the end of a round)."""
        return self.round_update_counts - self._merged_round_counts

    def _output_layer(self, counts: np.ndarray) -> HuffmanTree | NegativeTable:
        """What the steps train against: the run's Huffman tree, or the alias table of the
        negatives drawn from ``counts ** 0.75`` (on the devices, or the CPU kernel's host)."""
        if self._tree is not None:
            return self._tree
        table = alias_table(negative_weights(counts))
        return NegativeTable(*(table if self.kernel == "cpu" else place_all(table, self._rep)))

    def _merge_host(self) -> int:
        """Merges the host copies (``syn0`` at the rows trained since the last merge where the
        host tracks them; one device's copies by ``"sum"``); returns the rows merged (of both
        tables), 0 when no copies are held."""
        if self._host is None:
            return 0
        rows = np.flatnonzero(self._inputs_since_merge) if self._tracks_inputs else None
        self._inputs_since_merge[:] = False
        self._host.merge(self.sync.merge, rows)
        return self.num_nodes + (self.num_nodes if rows is None else rows.size)

    def _push(self) -> None:
        """The host copies back to the devices (merged), where the other merges run."""
        if self._host is not None:
            if self.copies > 1:
                self._merge_host()
            self.tables, anchor = self._host.push(self._on_devices)
            self.anchor = self.anchor if anchor is None else anchor
            self._host = None

    def _on_devices(self, syn0: np.ndarray, syn1: np.ndarray) -> Tables:
        """Host tables ``f32[P, N, d]`` placed one replica per device."""
        return Tables(*(jax.device_put(a, self._shard) for a in (syn0, syn1)))

    def _run(self, ins, outs, start, take, alphas, key, output):
        """Steps ``start .. start + take`` of every device's pair stream, in one call, in buffers
        of ``sync_every`` steps (one compiled shape) padded with zero-weight pairs."""
        updates = np.zeros(self.num_nodes, np.int64)
        marks = self._inputs_since_merge if self._tracks_inputs else self._inputs_since_merge[:0]
        b, cap = self.config.batch_size, self.config.sync_every
        if self.kernel == "cpu" and self._packed is None:  # the kernel's buffers, reused
            self._packed = step_buffers(self.num_devices, cap, b)
        out = self._packed if self.kernel == "cpu" else None  # placed buffers stay as they are
        x_in, x_out, x_w = pack_steps(ins, outs, start, take, b, cap, updates, marks, out)
        self.update_counts += updates
        self.round_update_counts += updates
        lr = self._rates(alphas, start, take)
        first, self._step = self._step, self._step + take
        if self.kernel == "cpu":  # every replica at once on host copies, kept until _push
            if self._host is None:
                self._host = HostReplicas.pull(self.tables, self.anchor, self.copies)
            chunk = (x_in, x_out, x_w, lr, take)
            return self._host.train(chunk, output, self.config, self._negative_keys, first)
        self._input_bytes += x_in.nbytes + x_out.nbytes + x_w.nbytes
        x_in, x_out, x_w = place_all((x_in, x_out, x_w), self._shard)
        lr, num_steps, first = place_all((lr, np.int32(take), np.int32(first)), self._rep)
        self.tables, loss = self.programs.train(
            self.tables, x_in, x_out, x_w, lr, num_steps, first, key, output
        )
        return loss

    def _rates(self, alphas: np.ndarray, start: int, take: int) -> np.ndarray:
        """The rates of steps ``start .. start + take``, zero-padded to ``sync_every`` steps."""
        lr = alphas[start : start + take].astype(np.float32)
        return np.pad(lr, (0, self.config.sync_every - take))

    def _run_buffered(self, buffers, start, take, alphas, key, output):
        """:meth:`_run` on pair buffers built on the devices (same batches, same order)."""
        lr = self._rates(alphas, start, take)
        # lr, num_steps, start, first_step
        scalars = place_all((lr, np.int32(take), np.int32(start), np.int32(self._step)), self._rep)
        self._step += take
        self.tables, loss, self._updates = self.programs.train_buffered(
            self.tables, *buffers, self._updates, *scalars, key, output
        )
        return loss

    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """What resumes this trainer exactly after a round's closing merge: host arrays (the
        tables, the anchor, the corpus and update counts) and counters (the step that keys the
        negatives, the periodic syncs that key a plan's draws)."""
        arrays = {
            "syn0": np.asarray(self.tables.syn0),
            "syn1": np.asarray(self.tables.syn1),
            "counts": self.counts,
            "update_counts": self.update_counts,
        }
        if self.anchor is not None:
            arrays["anchor0"], arrays["anchor1"] = map(np.asarray, self.anchor)
        return arrays, {"step": self._step, "periodic_syncs": self.periodic_syncs}

    def load_state_dict(self, arrays: dict[str, np.ndarray], counters: dict[str, int]) -> None:
        """Restores :meth:`state_dict`'s output; raises ``ValueError`` for tables of another
        shape than this trainer's (another mesh or size)."""
        shape = self.tables.syn0.shape
        if arrays["syn0"].shape != shape:
            raise ValueError(
                f"tables of shape {arrays['syn0'].shape}, this run has {shape} (a different mesh?)"
            )
        self._host = None
        self.tables = self._on_devices(arrays["syn0"], arrays["syn1"])
        if self.anchor is not None:
            self.anchor = self._on_devices(arrays["anchor0"], arrays["anchor1"])
        self.counts[:] = arrays["counts"]
        self.update_counts[:] = arrays["update_counts"]
        self._step = int(counters["step"])
        self.periodic_syncs = int(counters["periodic_syncs"])

    def replicas(self) -> Tables:
        """The device tables, ``Tables(f32[P, N, d], f32[P, N, d])``."""
        self._push()
        return self.tables

    def embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        """A full average of the replicas, then ``(syn0, syn1)`` as host ``f32[N, d]``."""
        self._push()
        self._full_sync()
        self._inputs_since_merge[:] = False
        return local_replica(self.tables.syn0), local_replica(self.tables.syn1)

    def input_vectors(self) -> np.ndarray:
        """``syn0`` as merged at the end of the last round (every replica holds it), read from
        this process's first device, ``f32[N, d]``."""
        return local_replica(self.tables.syn0)
