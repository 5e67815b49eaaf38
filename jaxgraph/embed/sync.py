"""Selective table synchronization: hotspot-aware (HaSyn, FeLoG §5.2.3) and a random baseline.

Where :class:`~jaxgraph.embed.merge.AllSync` merges every row of the replicas, these syncs
(:class:`~jaxgraph.embed.merge.TableSync`) merge a few rows chosen on the host before each sync:

* :class:`HotspotSync` (HaSyn). Hotness is the number of **real updates** a node's rows have
  received (``SkipGramTrainer.update_counts``; the public FeLoG code used the degree). Nodes
  are cut into blocks ``B_f = {v : f(v) = f}`` of equal count and one node is drawn uniformly
  from every block, **the last block included** (DistGER skips it), so a node of ``B_f`` is
  synced with probability ``1 / |B_f|``. With ``num_rows = M``: the ``M`` hottest nodes
  (:func:`select_hottest`).
* :class:`RandomSync`: the same number of rows (or a fixed number), drawn uniformly without
  replacement; the seed's baseline "under the same synchronization size".

Both sync **both tables** (the public code synced ``syn0`` only) and every ``full_every``-th
periodic sync merges all rows. The rows are drawn on the host, keyed by ``(trainer seed, sync
index)``, so every replica and process merges the same rows (:meth:`HotspotSync.plan`), then
merged by :func:`merge_selected_rows` (experiments/README.md, "FeLoG system", compares them).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import ClassVar, Literal, NamedTuple, get_args

import jax
import numpy as np

from jaxgraph.embed.merge import PlannedSync, merge_block, register_sync
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
    """Nodes sorted by count (descending, ties by id) and the start of every equal-count block:
    ``(order int64[N], starts int64[|F| + 1])``, block ``b`` is ``order[starts[b]:starts[b + 1]]``
    and ``starts[-1] = N``."""
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(counts.size), -counts))
    sorted_counts = counts[order]
    starts = np.flatnonzero(np.diff(sorted_counts)) + 1
    return order, np.concatenate([[0], starts, [counts.size]]).astype(np.int64)


def select_hotspots(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One node drawn uniformly from every equal-count block, hottest block first:
    ``int32[|F|]``, ``|F|`` the number of distinct counts."""
    order, starts = hotspot_blocks(counts)
    if order.size == 0:
        return np.zeros(0, np.int32)
    sizes = np.diff(starts)
    pick = starts[:-1] + np.minimum((rng.random(sizes.size) * sizes).astype(np.int64), sizes - 1)
    return order[pick].astype(np.int32)


def select_hottest(counts: np.ndarray, num_rows: int, rng: np.random.Generator) -> np.ndarray:
    """The ``num_rows`` nodes of largest count (among equal counts at the cut, a uniform draw),
    as sorted ids ``int32[min(num_rows, N)]``."""
    counts = np.asarray(counts)
    order = np.lexsort((rng.random(counts.size), -counts))
    return np.sort(order[:num_rows]).astype(np.int32)


def _rng(seed: int, sync_index: int) -> np.random.Generator:
    return np.random.default_rng([seed, _PURPOSE_SYNC, sync_index])


def _plan(index: np.ndarray, num_nodes: int) -> SyncPlan:
    """``index`` padded to its size class (:func:`~jaxgraph.embed.sizes.padded_size`, which
    bounds recompilations) by repeating its first entry; a full merge once that reaches ``N``."""
    cap = padded_size(index.size) if index.size else num_nodes
    if cap >= num_nodes:
        return SyncPlan(None, num_nodes, 2 * num_nodes)
    padded = np.full(cap, index[0], np.int32)
    padded[: index.size] = index
    return SyncPlan(padded, int(index.size), 2 * cap)


def merge_selected_rows(
    tables: Tables, anchor: Tables | None, index: jax.Array, merge: Merge, *, axis_name: str
) -> tuple[Tables, Tables | None]:
    """Merges rows ``index`` of both tables across ``axis_name`` by
    :func:`jaxgraph.embed.merge.merge_block` (the anchor rows likewise); other rows are unchanged.
    A repeated index (the plan's padding) is merged and written twice with the same value.

    Shapes (per device):
      ``Tables(f32[N, d], f32[N, d])``, the anchor the same (or None), ``index: int32[C]``
      (replicated) -> same; the collective moves ``f32[C, d]`` per table.
    """
    anchors = (None, None) if anchor is None else anchor
    merged = [
        merge_block(t[index], None if a is None else a[index], merge, axis_name=axis_name)
        for t, a in zip(tables, anchors, strict=True)
    ]  # f32[C, d] each
    put = lambda ts: Tables(*(t.at[index].set(m) for t, m in zip(ts, merged, strict=True)))
    return (put(tables), anchor) if merge == "mean" else (put(tables), put(anchor))


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
        arguments, which every process holds alike, so every replica merges the same rows).

        Args:
          update_counts, round_update_counts, pending_counts: ``int64[N]`` updates per node in
            the run, in the round and since each row's last merge (``"pending"`` needs it).
          sync_index: periodic syncs before this one (0-based, over the whole run).
          seed: the trainer's seed; with ``sync_index`` it keys the draw.
        """
        if self.counts == "pending" and pending_counts is None:
            raise ValueError(
                "counts='pending' needs pending_counts (updates since each row's last merge)"
            )
        by = {"total": update_counts, "round": round_update_counts, "pending": pending_counts}
        counts = np.asarray(by[self.counts])
        n = int(counts.shape[0])
        if self.is_full(sync_index):
            return SyncPlan(None, n, 2 * n)
        return _plan(self.select(counts, _rng(seed, sync_index)), n)

    def __call__(self, tables, anchor, index, *, axis_name):
        return merge_selected_rows(tables, anchor, index, self.merge, axis_name=axis_name)

    def rows(self, num_nodes: int) -> int:
        """An upper bound (a full merge); the trainer counts each :class:`SyncPlan`'s rows."""
        return 2 * num_nodes


@register_sync
@dataclasses.dataclass(frozen=True)
class HotspotSync(_SelectiveSync):
    """HaSyn: one node per block of equal update count, both tables (see the module docstring).

    Hotness counts one update per trained pair in which the node is the input row of ``syn0``
    or the positive output row of ``syn1``; the hot nodes, with nearly unique counts, are synced
    almost every time, the cold ones rarely.

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

    key: ClassVar[str] = "hotspot"

    def select(self, update_counts, rng):
        budget = self.budget(update_counts.shape[0])
        if budget is None:
            return select_hotspots(update_counts, rng)
        return select_hottest(update_counts, budget, rng)


@register_sync
@dataclasses.dataclass(frozen=True)
class RandomSync(_SelectiveSync):
    """RandomSync: rows drawn uniformly without replacement.

    Attributes:
      merge, full_every, counts: as :class:`HotspotSync`.
      num_rows: nodes per sync (an int, or a float share of the nodes); None: as many as
        :class:`HotspotSync` would pick from the same counts (the number of distinct update
        counts).
    """

    key: ClassVar[str] = "random"

    def select(self, update_counts, rng):
        n = update_counts.shape[0]
        size = self.budget(n)
        if size is None:
            size = hotspot_blocks(update_counts)[1].size - 1
        return np.sort(rng.choice(n, size=min(size, n), replace=False)).astype(np.int32)
