"""Selective table synchronization: hotspot-aware (HaSyn, FeLoG §5.2.3) and a random baseline.

The data-parallel trainer (:class:`~jaxgraph.embed.skipgram.SkipGramTrainer`) keeps one replica
of ``syn0`` and ``syn1`` per device and merges them every ``sync_every`` steps with a
:class:`~jaxgraph.embed.merge.TableSync`. :class:`~jaxgraph.embed.merge.AllSync` merges
every row; the syncs here merge a few rows chosen on the host before each sync, to move fewer
bytes than AllSync at about its quality:

* :class:`HotspotSync` (HaSyn). Hotness is the number of **real updates** a node's rows have
  received (``SkipGramTrainer.update_counts``), over the whole run (``counts="total"``, the
  seed's frequencies "observed in the training data"), the current round (``"round"``) or since
  the row was last merged (``"pending"``); the public FeLoG code used the degree instead. Nodes
  are cut into blocks ``B_f = {v : f(v) = f}`` of equal count and one node is drawn uniformly
  from every block, **the last block included** (DistGER skips it): ``|F|`` rows, one per
  distinct count, so a node of ``B_f`` is synced with probability ``1 / |B_f|``. With
  ``num_rows = M`` the ``M`` hottest nodes instead (:func:`select_hottest`).
* :class:`RandomSync`: the same number of rows (or a fixed number), drawn uniformly without
  replacement; the seed's baseline "under the same synchronization size".

Which to use: on ca-AstroPh the seed's rule (the defaults) trails RandomSync of the same size,
and ``counts="pending", num_rows=1280`` moves fewer bytes and leads it (experiments/README.md,
"FeLoG system"; ``experiments/hasyn_sweep.py``).

Both sync **both tables** (the public code synced ``syn0`` only) and, every ``full_every``-th
periodic sync, all rows (a full merge), so that no row's replicas stay apart for more than
``full_every`` sync periods; the trainer also merges everything at the end of each round, so
checkpoints taken between rounds need no extra state. The rows are drawn on the host, keyed by
``(trainer seed, sync index)``, so every replica and process merges the same rows
(:meth:`HotspotSync.plan`), and merged by :func:`merge_selected_rows` under ``shard_map``;
:class:`SyncPlan` reports the rows the collective moves and :func:`sync_bytes` converts them to
bytes.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Literal, NamedTuple, get_args

import jax
import numpy as np

from jaxgraph.embed.merge import PlannedSync, merge_block
from jaxgraph.embed.sgns import Merge, Tables, check_merge
from jaxgraph.embed.sizes import padded_size
from jaxgraph.options import flag

_PURPOSE_SYNC = 5  # host-stream purpose (jaxgraph.embed._hostrng uses 1..4)

Hotness = Literal["total", "round", "pending"]


class SyncPlan(NamedTuple):
    """What one selective sync merges.

    Attributes:
      index: ``int32[C]`` rows to merge in both tables, padded to ``C`` by repeating
        ``index[0]``; None: every row (a full merge).
      selected: distinct nodes chosen (``|F|`` for :class:`HotspotSync`; ``N`` for a full merge).
      rows: rows of both tables that the collective all-reduces (``2C``, or ``2N``).
    """

    index: np.ndarray | None
    selected: int
    rows: int


def sync_bytes(rows: int, dim: int, itemsize: int = 4) -> int:
    """Bytes one replica contributes to an all-reduce of ``rows`` rows of ``dim`` values."""
    return rows * dim * itemsize


def hotspot_blocks(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes sorted by count (descending, ties by id) and the start of every equal-count block.

    Returns:
      ``(order int64[N], starts int64[|F| + 1])``: block ``b`` is
      ``order[starts[b]:starts[b + 1]]``, all with the same count; ``starts[-1] = N``.
    """
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(counts.size), -counts))
    sorted_counts = counts[order]
    starts = np.flatnonzero(np.diff(sorted_counts)) + 1
    return order, np.concatenate([[0], starts, [counts.size]]).astype(np.int64)


def select_hotspots(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One node drawn uniformly from every equal-count block, hottest block first.

    Returns:
      ``int32[|F|]``, ``|F|`` the number of distinct counts (empty for ``N = 0``).
    """
    order, starts = hotspot_blocks(counts)
    if order.size == 0:
        return np.zeros(0, np.int32)
    sizes = np.diff(starts)
    pick = starts[:-1] + np.minimum((rng.random(sizes.size) * sizes).astype(np.int64), sizes - 1)
    return order[pick].astype(np.int32)


def select_hottest(counts: np.ndarray, num_rows: int, rng: np.random.Generator) -> np.ndarray:
    """The ``num_rows`` nodes of largest count; among equal counts at the cut, a uniform draw.

    Returns:
      ``int32[min(num_rows, N)]``, sorted ids.
    """
    counts = np.asarray(counts)
    order = np.lexsort((rng.random(counts.size), -counts))
    return np.sort(order[:num_rows]).astype(np.int32)


def _rng(seed: int, sync_index: int) -> np.random.Generator:
    return np.random.default_rng([seed, _PURPOSE_SYNC, sync_index])


def _plan(index: np.ndarray, num_nodes: int) -> SyncPlan:
    cap = padded_size(index.size) if index.size else num_nodes
    if cap >= num_nodes:
        return SyncPlan(None, num_nodes, 2 * num_nodes)
    padded = np.full(cap, index[0], np.int32)
    padded[: index.size] = index
    return SyncPlan(padded, int(index.size), 2 * cap)


def merge_selected_rows(
    tables: Tables, anchor: Tables | None, index: jax.Array, merge: Merge, *, axis_name: str
) -> tuple[Tables, Tables | None]:
    """Merges rows ``index`` of both tables across ``axis_name``; other rows are unchanged.

    Each rule as :func:`jaxgraph.embed.merge.merge_block` on the gathered rows, e.g.
    ``"mean"``: ``t[index] <- pmean(t[index])``, ``"sum"``: ``t[index] <- a[index] +
    psum(t[index] - a[index])``, ``"touched"`` divided per row by the replicas that changed it,
    and the anchor rows likewise; unselected rows are not touched.

    To bound recompilations the plan pads the index array to ``C``: ``|F|`` rounded up to a
    multiple of ``next_pow2(|F|) / 16`` (fewer than ``|F| / 8`` extra rows; at most 16 sizes per
    octave), by repeating its first entry (a repeated row is merged and written twice with the
    same value). The collective moves ``C`` rows per table, and :class:`SyncPlan` reports exactly
    those ``2C`` rows. A selection of all ``N`` rows, or one whose padded size reaches ``N``, is a
    full merge.

    Shapes (per device):
      ``Tables(f32[N, d], f32[N, d])``, the anchor the same (or None), ``index: int32[C]``
      (replicated) -> same; the collective moves ``f32[C, d]`` per table.
    """
    anchors = (None, None) if anchor is None else anchor
    merged = [
        merge_block(t[index], None if a is None else a[index], merge, axis_name=axis_name)
        for t, a in zip(tables, anchors, strict=True)
    ]  # f32[C, d] each
    new = Tables(*(t.at[index].set(m) for t, m in zip(tables, merged, strict=True)))
    if merge == "mean":
        return new, anchor
    new_anchor = Tables(*(a.at[index].set(m) for a, m in zip(anchor, merged, strict=True)))
    return new, new_anchor


@dataclasses.dataclass(frozen=True)
class _SelectiveSync(PlannedSync):
    merge: Merge = "mean"
    full_every: int | None = 32
    counts: Hotness = flag("--hotness", "total")
    num_rows: int | float | None = flag("--sync-rows", None)

    def __post_init__(self):
        check_merge(self.merge)
        if self.counts not in get_args(Hotness):
            raise ValueError(
                f"counts must be one of {', '.join(get_args(Hotness))}, got {self.counts!r}"
            )
        if self.full_every is not None and self.full_every < 1:
            raise ValueError(f"full_every must be >= 1 or None, got {self.full_every}")
        rows = self.num_rows
        if isinstance(rows, numbers.Integral) and rows < 1:
            raise ValueError(f"num_rows must be >= 1 or None, got {rows}")
        if not (
            rows is None
            or isinstance(rows, numbers.Integral)
            or (isinstance(rows, numbers.Real) and 0 < rows <= 1)
        ):
            raise ValueError(
                f"num_rows must be a row count >= 1 or a share of the nodes in (0, 1], got {rows}"
            )

    def budget(self, num_nodes: int) -> int | None:
        """Rows per sync for ``num_nodes`` nodes: ``num_rows`` (an int), or that share of the
        nodes rounded up (a float); None without a budget."""
        if self.num_rows is None:
            return None
        if isinstance(self.num_rows, numbers.Integral):
            return int(self.num_rows)
        # round first: 0.05 * 300 is 15.000000000000002 in floating point, and means 15.
        return max(1, math.ceil(round(float(self.num_rows) * num_nodes, 6)))

    @property
    def needs_anchor(self) -> bool:
        return self.merge != "mean"

    def is_full(self, sync_index: int) -> bool:
        """Whether periodic sync number ``sync_index`` (0-based) merges every row."""
        return self.full_every is not None and (sync_index + 1) % self.full_every == 0

    def select(self, update_counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def plan(
        self,
        update_counts: np.ndarray,
        round_update_counts: np.ndarray,
        sync_index: int,
        seed: int,
        pending_counts: np.ndarray | None = None,
    ) -> SyncPlan:
        """The rows of periodic sync number ``sync_index`` (host side; deterministic in its
        arguments).

        **Same selection everywhere.** The rows are drawn from a generator keyed by ``(seed,
        sync_index)`` and passed to the device program as one replicated index array, so every
        replica merges the same rows. In a multi-process run every process holds the same
        counts (each builds the same pairs on the host; device-built pairs are counted on the
        devices and summed into a replicated array), so the keyed draws agree.

        Args:
          update_counts: ``int64[N]`` updates per node in the run so far
            (``SkipGramTrainer.update_counts``).
          round_update_counts: ``int64[N]`` the same in the current round.
          sync_index: periodic syncs before this one (0-based, over the whole run).
          seed: the trainer's seed; with ``sync_index`` it keys the draw.
          pending_counts: ``int64[N]`` updates since each row's last merge; needed for
            ``counts="pending"``.

        Raises:
          ValueError: ``counts="pending"`` without ``pending_counts``.
        """
        if self.counts == "pending" and pending_counts is None:
            raise ValueError(
                "counts='pending' needs pending_counts (updates since each row's last merge)"
            )
        counts = np.asarray(
            {"total": update_counts, "round": round_update_counts, "pending": pending_counts}[
                self.counts
            ]
        )
        n = int(counts.shape[0])
        if self.is_full(sync_index):
            return SyncPlan(None, n, 2 * n)
        return _plan(self.select(counts, _rng(seed, sync_index)), n)

    def __call__(self, tables, anchor, index, *, axis_name):
        return merge_selected_rows(tables, anchor, index, self.merge, axis_name=axis_name)

    def rows(self, num_nodes: int) -> int:
        """An upper bound (a full merge); the trainer counts each :class:`SyncPlan`'s rows."""
        return 2 * num_nodes


@dataclasses.dataclass(frozen=True)
class HotspotSync(_SelectiveSync):
    """HaSyn: one node per block of equal update count, both tables (see the module docstring).

    Hotness counts, per node, one update per trained pair in which it is the input row of
    ``syn0`` and one per pair in which it is the positive output row of ``syn1`` (negatives are
    drawn on the device and not counted). ``"round"`` counts since the last full merge (fewer
    distinct values, so fewer rows); ``"pending"`` counts since the row was last merged, i.e. how
    far its replicas can have drifted apart: the trainer keeps the round's counts minus, per
    row, their value at its last merge, and a full merge (the round-end merge included) resets
    every row. Nodes are sorted by count (descending; ties by id) before they are cut into
    blocks: the hot nodes, whose counts are nearly unique, are synced almost every time; the
    cold ones, which share counts, rarely. With ``num_rows`` the ties at the cut are drawn
    uniformly, a fixed budget per sync.

    Attributes:
      merge: ``"mean"`` (averaging, as FeLoG), ``"sum"`` or ``"touched"`` (see
        :func:`jaxgraph.embed.merge.merge_rows`).
      full_every: every ``full_every``-th periodic sync merges all rows, so no row stays
        unmerged for more than ``full_every`` sync periods; None: only the round-end merge.
      counts: hotness from the update counts of the whole run (``"total"``), of the current
        round (``"round"``) or since each row's last merge (``"pending"``).
      num_rows: None: one node per equal-count block (the seed's rule); an int ``M``: the
        ``M`` hottest nodes; a float in (0, 1]: that share of the nodes, the hottest.
    """

    def select(self, update_counts, rng):
        budget = self.budget(update_counts.shape[0])
        if budget is None:
            return select_hotspots(update_counts, rng)
        return select_hottest(update_counts, budget, rng)


@dataclasses.dataclass(frozen=True)
class RandomSync(_SelectiveSync):
    """RandomSync: rows drawn uniformly without replacement.

    Attributes:
      merge, full_every, counts: as :class:`HotspotSync`.
      num_rows: nodes per sync (an int, or a float share of the nodes); None: as many as
        :class:`HotspotSync` would pick from the same counts (the number of distinct update
        counts).
    """

    def select(self, update_counts, rng):
        n = update_counts.shape[0]
        size = self.budget(n)
        if size is None:
            size = hotspot_blocks(update_counts)[1].size - 1
        return np.sort(rng.choice(n, size=min(size, n), replace=False)).astype(np.int32)
