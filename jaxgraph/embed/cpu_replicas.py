"""The CPU kernel's replicas on the host (:class:`HostReplicas`): a trainer's tables copied
from the devices once a round, every replica's chunk trained at once
(:func:`jaxgraph.embed.cpu_sgns.train_replicas`), merged between chunks in place by
:func:`merge_replicas` (:func:`jaxgraph.embed.merge.merge_rows`' rule, without copying every
table to the devices and back at each periodic merge), and copied back at the round's end."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numba
import numpy as np
from numba import njit

from jaxgraph.embed import cpu_hsoftmax, cpu_sgns
from jaxgraph.embed._kernel_args import page_aligned
from jaxgraph.embed._kernel_steps import run_workers
from jaxgraph.embed.hsoftmax import HuffmanTree
from jaxgraph.embed.programs import local_replica
from jaxgraph.embed.sgns import Merge, NegativeTable, SkipGramConfig, Tables, check_merge
from jaxgraph.mesh import free_memory

_RULES = {"mean": 0, "sum": 1, "touched": 2}


# The most threads of one device that train copies of its tables (more share one table). C
# copies merge their C + 1 tables every C S steps, and from 3 copies on S <= 64 / (C - 1)
# (sum_period): on ca-AstroPh a merge moves about 0.9 KB per pair trained at C = 2 and 2.2 KB
# at C = 4 (a pair's rows move 7 KB), growing with C; measured at C = 2 only.
MAX_COPIES = 4


def copies_that_fit(threads: int, num_nodes: int, dim: int) -> int:
    """The copies of one device's tables its ``threads`` train: one each, while the copies and
    their anchor (``threads + 1`` times both tables) take at most half the host's free memory;
    fewer (at least 1: the threads then share the tables) with a warning past that."""
    if threads <= 1:
        return 1
    tables = 2 * num_nodes * dim * 4
    free = free_memory()
    fit = max(1, free // (2 * tables) - 1)
    if fit < threads:
        warnings.warn(
            f"{threads} threads would train {threads} copies of the tables ({tables / 2**30:.1f}"
            f" GiB each, and their anchor) in {free / 2**30:.1f} GiB of free memory: training "
            + (f"{fit} copies" if fit > 1 else "one copy (the threads share the tables)"),
            stacklevel=4,
        )
    return int(min(threads, fit))


def host_copies(config: SkipGramConfig, num_nodes: int) -> int:
    """The copies of one device's tables its CPU kernel trains on ``config.threads`` threads
    (None: numba's count): one per thread on 2 to ``MAX_COPIES`` threads, as many as fit
    (:func:`copies_that_fit`); 1 (the threads share the tables) for one thread or more than
    ``MAX_COPIES``."""
    threads = config.threads or numba.get_num_threads()
    if threads > MAX_COPIES:
        return 1
    return copies_that_fit(threads, num_nodes, config.dim)


# Rows a thread merges with one scratch row.
_ROWS = 256


@njit(inline="always", cache=True)
def _sum_two(tables, anchor, i):
    """Row ``i`` of two replicas (a device's two copies) merged by sum, ``t0 + t1 - anchor``
    rounded as :func:`_merge` rounds it for any ``P``, in one pass over the row: 45 % less time
    than the passes over a scratch row on one thread (65,536 rows), 7-11 % on two threads,
    where memory bounds both (65,536 and 10,312 rows)."""
    for q in range(tables.shape[2]):
        v = tables[0, i, q] + tables[1, i, q]
        v -= anchor[i, q]
        tables[0, i, q] = v
        tables[1, i, q] = v
        anchor[i, q] = v


@njit(nogil=True, cache=True)
def _merge(first, stride, tables, anchor, rows, rule):
    """Rows ``rows`` (distinct) of ``tables: f32[P, N, d]`` merged by ``rule`` (0 mean, 1 sum,
    2 touched) into every replica and, for sum and touched, into ``anchor: f32[N, d]``: blocks
    ``first, first + stride, ..`` of ``_ROWS`` rows (a worker of
    :func:`~jaxgraph.embed._kernel_steps.run_workers`); every loop runs along a row, so it
    vectorises."""
    p, _, d = tables.shape
    for c in range(first, (rows.shape[0] + _ROWS - 1) // _ROWS, stride):
        value = np.empty(d, np.float32)
        for j in range(c * _ROWS, min((c + 1) * _ROWS, rows.shape[0])):
            i = rows[j]
            if p == 2 and rule == 1:
                _sum_two(tables, anchor, i)
                continue
            if rule == 2:  # the mean change of the replicas that changed the row
                changed = 0
                for r in range(p):
                    for q in range(d):
                        if tables[r, i, q] != anchor[i, q]:
                            changed += 1
                            break
                k = np.float32(max(changed, 1))
                for q in range(d):
                    value[q] = tables[0, i, q] - anchor[i, q]
                for r in range(1, p):
                    for q in range(d):
                        value[q] += tables[r, i, q] - anchor[i, q]
                for q in range(d):
                    value[q] = anchor[i, q] + value[q] / k
            else:
                for q in range(d):
                    value[q] = tables[0, i, q]
                for r in range(1, p):
                    for q in range(d):
                        value[q] += tables[r, i, q]
                if rule == 0:
                    for q in range(d):
                        value[q] /= np.float32(p)
                else:
                    for q in range(d):
                        value[q] -= np.float32(p - 1) * anchor[i, q]
            for r in range(p):
                for q in range(d):
                    tables[r, i, q] = value[q]
            if rule != 0:
                for q in range(d):
                    anchor[i, q] = value[q]


def merge_replicas(
    tables: Tables, anchor: Tables | None, merge: Merge, input_rows: np.ndarray | None = None
) -> None:
    """Merges host replicas ``Tables(f32[P, N, d], f32[P, N, d])`` in place by ``merge``, as
    :func:`~jaxgraph.embed.merge.merge_rows` merges device replicas (to fp32 rounding):
    ``syn1`` at every row, ``syn0`` at every row or only at ``input_rows`` (distinct ids, the
    rows trained since the last merge); ``anchor`` (``Tables(f32[N, d], f32[N, d])``, the value
    at the last merge; None for ``"mean"``) takes the merged rows."""
    check_merge(merge)
    if merge != "mean" and anchor is None:
        raise ValueError(f"merge={merge!r} needs the anchor tables")
    n = tables.syn0.shape[1]
    every = np.arange(n, dtype=np.int64)
    rows0 = every if input_rows is None else np.asarray(input_rows, np.int64)
    for table, at, rows in zip(tables, anchor or (None, None), (rows0, every), strict=True):
        at = np.empty((1, 1), np.float32) if at is None else at
        blocks = (rows.shape[0] + _ROWS - 1) // _ROWS
        run_workers(_merge, blocks, table, at, rows, _RULES[merge])


def _page_copy(table, copies: int = 1) -> np.ndarray:
    """A page-aligned host copy of ``table`` (:func:`~jaxgraph.embed._kernel_args.page_aligned`:
    the kernels' rows then start cache lines), or ``copies`` copies of its one replica
    (``[1, N, d] -> [C, N, d]``), each written once."""
    table = np.asarray(table)
    out = page_aligned((table.shape[0] * copies, *table.shape[1:]), table.dtype)
    out[...] = table
    return out


@dataclasses.dataclass
class HostReplicas:
    """Host copies of a trainer's replicas: ``tables`` (``Tables(f32[P, N, d], f32[P, N,
    d])``) and the ``anchor`` every replica shares (``Tables(f32[N, d], f32[N, d])``, the value
    at the last merge; None for ``"mean"``), updated in place until :meth:`push`.

    With ``copies = C > 1`` (one device, ``P = 1``), ``tables`` holds ``C`` copies of its
    tables, one per kernel thread (``cpu_sgns.train_replicas``' ``copies``), and ``anchor``
    their value at the last merge; :meth:`merge` sums their changes."""

    tables: Tables
    anchor: Tables | None
    copies: int = 1

    @classmethod
    def pull(cls, tables: Tables, anchor: Tables | None, copies: int = 1) -> HostReplicas:
        """Copies of device tables ``f32[P, N, d]`` and of this process's replica of the
        anchor, or ``copies`` copies of one device's tables and their anchor."""
        if copies == 1:
            host = Tables(*(_page_copy(t) for t in tables))
            shared = None if anchor is None else Tables(*(local_replica(a).copy() for a in anchor))
            return cls(host, shared)
        if tables.syn0.shape[0] != 1:
            raise ValueError(f"copies train one device's tables, got {tables.syn0.shape[0]}")
        host = Tables(*(_page_copy(t, copies) for t in tables))
        return cls(host, Tables(*(t[0].copy() for t in host)), copies)

    def train(
        self,
        chunk: tuple,
        output: HuffmanTree | NegativeTable,
        config: SkipGramConfig,
        keys: list[int],
        first_step: int,
    ) -> float:
        """Trains every replica's chunk (``chunk``: ``(inputs, outputs, weights: [P, S, B],
        lrs: f32[S], num_steps)``) at once against ``output``; replica ``d`` draws its
        negatives on the streams of ``keys[d]``. Returns the summed loss."""
        c = config
        rules = (c.negatives, c.shared_negatives, c.interleave, c.row_cap, c.threads)
        if isinstance(output, HuffmanTree):
            args = (*self.tables, *chunk, *output, *rules[2:])
            return cpu_hsoftmax.train_replicas(*args, copies=self.copies)
        args = (*self.tables, *chunk, keys, *output, *rules)
        return cpu_sgns.train_replicas(*args, first_step=first_step, copies=self.copies)

    def merge(self, merge: Merge, input_rows: np.ndarray | None = None) -> None:
        """:func:`merge_replicas` on these copies (``"sum"`` for a device's copies)."""
        merge_replicas(self.tables, self.anchor, "sum" if self.copies > 1 else merge, input_rows)

    def push(self, place: Callable) -> tuple[Tables, Tables | None]:
        """The tables and the anchor (broadcast to every replica) as ``place(syn0, syn1)``
        places host arrays ``f32[P, N, d]``; None for no anchor, and for a device's copies
        (merged: copy 0 is the device's tables)."""
        shape = self.tables.syn0.shape
        if self.copies > 1:
            return place(*(t[:1] for t in self.tables)), None
        if self.anchor is None:
            return place(*self.tables), None
        return place(*self.tables), place(*(np.broadcast_to(a, shape) for a in self.anchor))
