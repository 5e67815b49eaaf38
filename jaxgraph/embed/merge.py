"""How the replicas of the SGNS tables merge: the :class:`TableSync` protocol every sync
implements, the merge rules (:func:`merge_rows`, :func:`merge_block`) and :class:`AllSync`
(every row, FeLoG's baseline); the selective syncs are :mod:`jaxgraph.embed.sync`'s.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.embed.sgns import Merge, Tables, check_merge


class TableSync(Protocol):
    """Merges (some) table rows across the replicas; called inside ``shard_map``.

    ``__call__(tables, anchor, *, axis_name) -> (tables, anchor)`` on one replica's tables;
    ``anchor`` is their value at the previous merge (``None`` unless ``needs_anchor``). ``merge``
    names the rule of a round's closing full sync; ``rows(num_nodes)`` counts the rows (of both
    tables) one call all-reduces."""

    merge: Merge
    needs_anchor: bool

    def __call__(self, tables: Tables, anchor: Tables | None, *, axis_name: str): ...

    def rows(self, num_nodes: int) -> int: ...


class PlannedSync(abc.ABC):
    """A :class:`TableSync` whose rows a host-side plan picks (:mod:`jaxgraph.embed.sync`).

    ``plan(...) -> SyncPlan`` runs on the host before each periodic sync; the sync is then
    called as ``__call__(tables, anchor, index, *, axis_name)`` with the plan's row index, or
    replaced by a full merge when it is None."""

    @abc.abstractmethod
    def plan(self, update_counts, round_update_counts, sync_index, seed, pending_counts=None): ...


def merge_block(t: jax.Array, a: jax.Array | None, merge: Merge, *, axis_name: str) -> jax.Array:
    """Merges one block of rows across ``axis_name`` (``t``: this replica's rows, ``a``: their
    anchor, the value at the last merge): ``f32[R, d] -> f32[R, d]`` (replicated).

    ``"mean"``: ``pmean(t)``. ``"sum"``: ``a + psum(t - a)``. ``"touched"``: ``a + psum(t - a)
    / k`` with ``k`` the number of replicas whose row changed since the anchor (at least 1).
    """
    if merge == "mean":
        return jax.lax.pmean(t, axis_name)
    if a is None:
        raise ValueError(f"merge={merge!r} needs the anchor tables")
    if merge == "sum":
        # a + psum(t - a), one elementwise pass shorter.
        return jax.lax.psum(t, axis_name) - (jax.lax.axis_size(axis_name) - 1) * a
    delta = t - a  # f32[R, d]
    total = jax.lax.psum(delta, axis_name)
    changed = jnp.any(delta != 0, axis=-1).astype(t.dtype)  # f32[R]
    k = jnp.maximum(jax.lax.psum(changed, axis_name), 1.0)
    return a + total / k[:, None]


def merge_rows(
    tables: Tables,
    anchor: Tables | None,
    merge: Merge,
    *,
    axis_name: str,
    input_rows: jax.Array | None = None,
):
    """Merges whole tables across ``axis_name``: ``Tables[N, d] -> Tables[N, d]`` (replicated),
    and returns the new anchor (None for ``"mean"``, which needs none).

    ``input_rows`` (``int32[C]``, replicated; repeats allowed) restricts the merge of ``syn0``
    to those rows, exact when every other ``syn0`` row is unchanged since the last merge (every
    rule leaves such a row as it is): ``syn0`` changes only at the trained pairs' inputs.

    ``"mean"`` (FeLoG, DistGER): model averaging; with a merge after every step, ``P`` devices at
    ``alpha`` equal one device on the union of their batches at ``alpha / P``.
    ``"sum"``: every replica's update counts fully (one device at ``alpha``), but the sum of
    ``P`` changes of a hub computed from the same anchor overshoots over long sync periods
    (experiments/README.md, "Fewer merges").
    ``"touched"``: each row takes the mean change of the replicas that changed it, as ``"sum"``
    for a row trained on one replica and as ``"mean"`` for a hub trained on all ``P``.
    """
    anchors = (None, None) if anchor is None else anchor
    if input_rows is None:
        pairs = zip(tables, anchors, strict=True)
        new = Tables(*(merge_block(t, a, merge, axis_name=axis_name) for t, a in pairs))
        return (new, anchor) if merge == "mean" else (new, new)
    a0 = None if anchor is None else anchor.syn0[input_rows]
    rows = merge_block(tables.syn0[input_rows], a0, merge, axis_name=axis_name)  # f32[C, d]
    syn1 = merge_block(tables.syn1, anchors[1], merge, axis_name=axis_name)
    new = Tables(tables.syn0.at[input_rows].set(rows), syn1)
    if merge == "mean":
        return new, anchor
    return new, Tables(anchor.syn0.at[input_rows].set(rows), syn1)


# What the other replicas of a sum merge train between two merges, together (sum_period): at
# most SUM_ROW_UPDATES pairs per row on average and, with three replicas or more, at most
# SUM_BLIND_STEPS steps.
SUM_ROW_UPDATES = 8
SUM_BLIND_STEPS = 64


def sum_period(sync_every: int, num_nodes: int, batch_size: int, replicas: int) -> int:
    """The steps ``S`` between two merges of ``merge="sum"`` on ``P = replicas`` replicas:
    ``sync_every``, at most ``8 N / (B (P - 1))`` and, for ``P >= 3``, at most
    ``64 / (P - 1)`` (rounded down), and at least 1.

    Between two merges each replica trains ``S`` steps from the anchor, blind to the other
    replicas' ``S (P - 1)``, whose changes the merge then adds in full. Where each replica
    moves a row (a hub) most of the way to where its pairs pull it, the sum moves it ``P``
    times as far: on 2 replicas it lands as far past that point as it started (the quality
    swings from merge to merge), on 3 or more further each merge, and the run diverges.

    - *Pairs per row:* on an R-MAT of 2^10 nodes (``B`` = 1,024), 2 replicas every 64 steps
      (64 blind pairs per row) scored dot AUC 0.46, every 8-32 steps 0.60-0.61, one replica
      0.61. The three benchmark graphs (10k-65k nodes) on 2 replicas keep 64 steps.
    - *Steps, 3 replicas or more:* on R-MATs of 2^10 and 2^14 nodes, 4 and 8 replicas stayed
      healthy up to 24-63 blind steps and diverged at 48 (2^10), 126 (2^14) and more.
    """
    if replicas <= 1:
        return sync_every
    blind = SUM_ROW_UPDATES * num_nodes // batch_size
    if replicas >= 3:
        blind = min(blind, SUM_BLIND_STEPS)
    return max(1, min(sync_every, blind // (replicas - 1)))


SYNC_TYPES: dict[str, type] = {}


def register_sync(cls: type) -> type:
    """Registers a sync rule (a frozen dataclass with a ``key``) under its key: ``--sync
    <key>`` and a config file's ``[sync.<key>]`` then name it, and a run's config saves it."""
    SYNC_TYPES[cls.key] = cls
    return cls


def sync_key(sync) -> str:
    """The registered key of ``sync``'s type; a ValueError for an unregistered rule."""
    for key, cls in SYNC_TYPES.items():
        if type(sync) is cls:
            return key
    raise ValueError(
        f"sync rule {type(sync).__name__} is not registered: decorate its class with "
        "jaxgraph.embed.merge.register_sync so that a config can name it"
    )


@register_sync
@dataclasses.dataclass(frozen=True)
class AllSync:
    """Merges every row of ``syn0`` and ``syn1`` (the AllSync baseline of FeLoG §6.6).

    The trainer passes the ``syn0`` rows trained since the last merge when it knows them
    (host-built pairs): the same tables as merging every row, with fewer rows moved.

    Attributes:
      merge: ``"mean"`` (default; averaging all rows, as FeLoG / DistGER), ``"sum"`` (adds
        every replica's change since the last merge) or ``"touched"``; see :func:`merge_rows`.
    """

    merge: Merge = "mean"

    key: ClassVar[str] = "all"

    def __post_init__(self):
        check_merge(self.merge)

    @property
    def needs_anchor(self) -> bool:
        return self.merge != "mean"

    def __call__(self, tables, anchor, input_rows=None, *, axis_name):
        """Merges every row; with ``input_rows``, only those of ``syn0`` need merging and the
        rest are left as they are (exact; see :func:`merge_rows`)."""
        return merge_rows(tables, anchor, self.merge, axis_name=axis_name, input_rows=input_rows)

    def rows(self, num_nodes: int) -> int:
        return 2 * num_nodes


def input_row_index(touched: np.ndarray) -> np.ndarray | None:
    """The rows set in ``touched`` (``bool[N]``) as ``int32[C]``, padded by repeating the first
    to the smallest ``C = ceil(N / 2^k)``, ``2 <= k <= 10``, that holds them (few compiled
    sizes); None (merge every row) past ``N / 4`` rows, where an indexed merge costs about what
    it saves."""
    rows = np.flatnonzero(touched)
    n = touched.shape[0]
    caps = [-(-n // (1 << k)) for k in range(10, 1, -1)]  # ascending
    cap = next((c for c in caps if c >= rows.size), None)
    if cap is None or cap >= n:
        return None
    index = np.full(cap, rows[0] if rows.size else 0, np.int32)
    index[: rows.size] = rows
    return index
