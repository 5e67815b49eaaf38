"""A replica-sync rule defined outside jaxgraph: round-robin slices of the tables.

Periodic sync number ``k`` merges the rows ``v`` with ``v % stride == k % stride``, in both
tables: each sync moves about ``1 / stride`` of the rows a full merge moves, and no row's
replicas drift apart for more than ``stride`` sync periods. The rows are chosen on the host
(a :class:`~jaxgraph.embed.merge.PlannedSync`), the same on every replica, from the sync index
alone; the update counts that HaSyn reads are ignored.
"""

import dataclasses
from typing import ClassVar

import numpy as np

from jaxgraph.data import dc_sbm
from jaxgraph.embed import EmbedConfig, embed
from jaxgraph.embed.merge import PlannedSync, register_sync
from jaxgraph.embed.sgns import Merge, SkipGramConfig, check_merge
from jaxgraph.embed.sync import SyncPlan, merge_selected_rows
from jaxgraph.embed.walks import WalkConfig


@register_sync
@dataclasses.dataclass(frozen=True)
class RoundRobinSync(PlannedSync):
    """Merges every ``stride``-th row of both tables, a different slice at every sync.

    Attributes:
      merge: how the replicas of a merged row combine: ``"mean"``, ``"sum"`` or ``"touched"``
        (:func:`jaxgraph.embed.merge.merge_rows`); must equal the trainer's
        ``SkipGramConfig.merge``.
      stride: the number of syncs that merge every row once (1: every row at every sync).
    """

    merge: Merge = "mean"
    stride: int = 4

    key: ClassVar[str] = "round-robin"  # --sync round-robin, [sync.round-robin]

    def __post_init__(self):
        check_merge(self.merge)
        if isinstance(self.stride, bool) or not isinstance(self.stride, int) or self.stride < 1:
            raise ValueError(f"stride must be an int >= 1, got {self.stride!r}")

    @property
    def needs_anchor(self) -> bool:
        """Whether the trainer keeps the tables of the last merge ("sum" and "touched")."""
        return self.merge != "mean"

    def plan(self, update_counts, round_update_counts, sync_index, seed, pending_counts=None):
        """The rows of periodic sync ``sync_index`` (0-based over the run); host side."""
        del round_update_counts, seed, pending_counts  # the slice depends on the index only
        n = int(np.shape(update_counts)[0])
        stride = min(self.stride, n)
        if stride == 1:
            return SyncPlan(index=None, selected=n, rows=2 * n)  # None: a full merge
        # int32[C], C = ceil((n - k) / stride): two sizes, so at most two compiled programs.
        index = np.arange(sync_index % stride, n, stride, dtype=np.int32)
        return SyncPlan(index=index, selected=index.size, rows=2 * index.size)

    def __call__(self, tables, anchor, index, *, axis_name):
        """Inside ``shard_map``: ``Tables(f32[N, d], f32[N, d])`` of this replica, its anchor
        (or None) and ``index: int32[C]`` (replicated) -> the tables and anchor with rows
        ``index`` merged across ``axis_name``; every other row unchanged."""
        return merge_selected_rows(tables, anchor, index, self.merge, axis_name=axis_name)

    def rows(self, num_nodes: int) -> int:
        """An upper bound (a full merge); the trainer counts each plan's ``rows``."""
        return 2 * num_nodes


def small_run(sync, *, nodes=200, parts=2, seed=0):
    """Two rounds of DeepWalk on a small synthetic graph, merged by ``sync`` (None: AllSync).

    Returns:
      The :class:`~jaxgraph.embed.run.EmbedResult`; each round's log counts its merged rows
      (``sync_rows``).
    """
    graph = dc_sbm(nodes, 4, 6.0, num_features=0, seed=seed)
    config = EmbedConfig(
        method="deepwalk",
        walk=WalkConfig(kind="deepwalk", walk_length=10),
        sgns=SkipGramConfig(dim=16, window=3, batch_size=32, sync_every=2),
        rounds=2,
        seed=seed,
        sync=sync,
        parts=parts,
    )
    return embed(config, graph)


if __name__ == "__main__":
    from jaxgraph.cli import emulate_cpu_devices

    emulate_cpu_devices(2)  # on a CPU: two devices, set before JAX starts its backend
    for label, sync in (("AllSync", None), ("RoundRobinSync", RoundRobinSync(stride=4))):
        result = small_run(sync)
        rows = sum(r.sync_rows for r in result.rounds)
        print(f"{label}: {rows} rows merged, loss per pair {result.rounds[-1].loss:.3f}")
