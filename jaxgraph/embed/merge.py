"""How the replicas of the SGNS tables merge: the :class:`TableSync` protocol every sync
implements, the merge rules (:func:`merge_rows`, :func:`merge_block`) and :class:`AllSync`.

Each device of the data-parallel trainer (:class:`~jaxgraph.embed.skipgram.SkipGramTrainer`)
trains a full replica of both tables; a :class:`TableSync` merges rows across the replicas every
``sync_every`` steps, inside ``shard_map``. :class:`AllSync` merges every row (FeLoG's
baseline); the selective syncs of :mod:`jaxgraph.embed.sync` merge the rows a plan picks.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp

from jaxgraph.embed.sgns import Merge, Tables, check_merge


class TableSync(Protocol):
    """Merges (some) table rows across the replicas; called inside ``shard_map``.

    ``__call__(tables, anchor, *, axis_name) -> (tables, anchor)`` on one replica's
    ``Tables(f32[N, d], f32[N, d])``. ``anchor`` is the value of the tables at the previous
    merge (``None`` unless ``needs_anchor``); the sync returns the new anchor. ``merge`` names
    the rule the closing full sync of a round uses; ``rows(num_nodes)`` is the number of rows
    (of both tables together) that one call all-reduces, for communication accounting.

    A sync whose rows are picked on the host is a :class:`PlannedSync`.
    """

    merge: Merge
    needs_anchor: bool

    def __call__(self, tables: Tables, anchor: Tables | None, *, axis_name: str): ...

    def rows(self, num_nodes: int) -> int: ...


class PlannedSync(abc.ABC):
    """A :class:`TableSync` whose rows a host-side plan picks (:mod:`jaxgraph.embed.sync`).

    ``plan(update_counts, round_update_counts, sync_index, seed, pending_counts=...)
    -> SyncPlan`` is called on the host before each periodic sync with the trainer's counts (of
    the run, of the round, and since each row's last merge); the sync is then called as
    ``__call__(tables, anchor, index, *, axis_name)`` with the plan's replicated row index
    (:func:`~jaxgraph.embed.programs.indexed_sync_program`), or replaced by a full merge when
    the plan's index is None.
    """

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
    to those rows; ``syn1`` is merged whole. The result is the full merge's whenever every
    other ``syn0`` row is unchanged on every replica since the last merge: such a row is
    equal on all replicas and to its anchor, so every rule leaves it as it is. ``syn0``
    changes only at the input rows of the trained pairs, which the host knows, so the trainer
    passes the inputs trained since the last merge (:class:`SkipGramTrainer`); ``syn1`` also
    changes at the negatives, drawn on the devices.

    A merge reads and writes every row of both tables and the anchor, so it is bound by memory
    bandwidth; merging ``syn0`` at its trained rows only is what makes it cheaper
    (experiments/README.md, "Where a round's time goes").

    ``"mean"`` (FeLoG, DistGER): ``pmean`` (model averaging; each replica's update counts
    ``1/P``). With a merge after every step, ``P`` devices at ``alpha`` equal one device training
    on the union of their batches at ``alpha / P``, so a round on ``P`` devices moves the tables
    about as far as ``1/P`` of a round on one device.
    ``"sum"``: ``anchor + psum(tables - anchor)``: every replica's update counts fully, so
    ``P`` replicas merged after every step equal one device on the union of their batches at
    ``alpha``. Over a sync period a hub changes on every replica, and the sum of ``P`` such
    changes, each computed from the same anchor, overshoots: it diverges at 4 and 8 replicas on
    an R-MAT of 2^14 nodes, and with 2 replicas merged every 512 steps or more the dot-product
    AUC swings from one round to the next while loss per pair and row norms stay healthy
    (experiments/README.md, "Fewer merges" and "Merge rules on more replicas").
    ``"touched"``: each row takes the mean of the changes of the replicas that changed it: a
    row trained on one replica keeps its whole change (as ``"sum"``), a hub trained on all
    ``P`` takes the mean of their changes (as ``"mean"``), so no row's merged step is ``P``
    steps computed from one stale value; it stays healthy where ``"sum"`` diverges.

    ``tests/embed/test_skipgram.py`` checks the mean and sum identities on several mesh sizes,
    a replica simulation for longer sync periods, and the ``"touched"`` rule row by row.
    """
    anchors = (None, None) if anchor is None else anchor
    if input_rows is None:
        new = Tables(
            *(
                merge_block(t, a, merge, axis_name=axis_name)
                for t, a in zip(tables, anchors, strict=True)
            )
        )
        return (new, anchor) if merge == "mean" else (new, new)
    a0 = None if anchor is None else anchor.syn0[input_rows]
    rows = merge_block(tables.syn0[input_rows], a0, merge, axis_name=axis_name)  # f32[C, d]
    syn1 = merge_block(tables.syn1, anchors[1], merge, axis_name=axis_name)
    new = Tables(tables.syn0.at[input_rows].set(rows), syn1)
    if merge == "mean":
        return new, anchor
    return new, Tables(anchor.syn0.at[input_rows].set(rows), syn1)


@dataclasses.dataclass(frozen=True)
class AllSync:
    """Merges every row of ``syn0`` and ``syn1`` (the AllSync baseline of FeLoG §6.6).

    The trainer passes the ``syn0`` rows trained since the last merge when it knows them
    (host-built pairs), and the rest of ``syn0``, unchanged on every replica, is left as it
    is: the same tables as merging every row, with fewer rows moved (``RoundStats.sync_rows``
    counts those merged). With one replica the trainer skips the periodic merges (the merge of
    one replica is the identity).

    Attributes:
      merge: ``"mean"`` (default; averaging all rows, as FeLoG / DistGER), ``"sum"`` (adds
        every replica's change since the last merge) or ``"touched"``; see :func:`merge_rows`.
    """

    merge: Merge = "mean"

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
