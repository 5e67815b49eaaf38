"""The negatives the CPU SGNS kernel (:mod:`~jaxgraph.embed.cpu_sgns`) draws: ``K`` per group
of a step's pairs through the alias table (:func:`jaxgraph.embed.corpus.alias_table`), on the
counter-based stream of (chunk key, global step, group) (:mod:`~jaxgraph.embed._hostrng`), so a
step's draws do not depend on the thread or the order that trains it."""

from __future__ import annotations

import numbers

import numpy as np
from numba import njit

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed._intrinsics import mulhi
from jaxgraph.embed._kernel_args import check_alias, check_key
from jaxgraph.embed._kernel_steps import run_workers


@njit(inline="always", cache=True)
def draw_step(key, step, accept, alias, out):
    """Fills ``out: int32[B / G, K]`` with the negatives of every group of global step ``step``
    under the chunk key ``key``. Negative ``k`` of group ``g`` is an alias draw from the
    ``k + 1``-th number ``z`` of the stream (step key, ``g``): the bucket ``j = floor(z N /
    2**64)``, and ``u`` the fraction of ``z N / 2**64`` past ``j`` (uniform in ``[0, 1)`` given
    ``j``); ``j if u < accept[j] else alias[j]``.

    Every stream's numbers are drawn first, in one pass without loads or branches (it
    vectorises), then the table lookups. The lookups select through a two-slot array: as a
    select, LLVM compiled them to a branch that ``u`` mispredicts, 38 of a pair's 50 ns of
    draws."""
    step_key = hr.stream(key, step)
    groups, kn = out.shape
    starts = np.empty(groups, np.uint64)
    for g in range(groups):
        starts[g] = hr.stream(step_key, g)
    draws = np.empty((kn, groups), np.uint64)
    for k in range(kn):
        for g in range(groups):
            draws[k, g] = hr.nth_u64(starts[g], k + 1)
    n = np.uint64(accept.shape[0])
    pick = np.empty(2, np.int64)
    for g in range(groups):
        for k in range(kn):
            z = draws[k, g]
            j = np.int64(mulhi(z, n))
            pick[0], pick[1] = alias[j], j
            out[g, k] = pick[np.int64(hr.unit(z * n) < accept[j])]


@njit(nogil=True, cache=True)
def _chunk_negatives(first, stride, key, first_step, accept, alias, out):
    """Fills rows ``first, first + stride, ..`` of ``out: int32[S, B/G, K]`` with the negatives
    of steps ``first_step ..`` (a worker of :func:`~jaxgraph.embed._kernel_steps.run_workers`)."""
    for s in range(first, out.shape[0], stride):
        draw_step(key, first_step + s, accept, alias, out[s])


def chunk_negatives(
    key: int,
    first_step: int,
    num_steps: int,
    groups: int,
    negatives: int,
    accept: np.ndarray,
    alias: np.ndarray,
) -> np.ndarray:
    """The negatives :func:`jaxgraph.embed.cpu_sgns.train_chunk` draws: ``int32[num_steps,
    groups, K]``, step ``s`` group ``n`` from the stream ``(key, first_step + s, n)`` through
    the alias table (:func:`jaxgraph.embed.corpus.alias_table`, ``accept: f32[N]``, ``alias:
    int[N]``)."""
    key = check_key(key)
    accept, alias = check_alias(accept, alias, np.asarray(accept).shape[0])
    for name, value in (("first_step", first_step), ("num_steps", num_steps)):
        if not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if groups < 1 or negatives < 1:
        raise ValueError(f"groups and negatives must be >= 1, got {groups} and {negatives}")
    out = np.empty((num_steps, groups, negatives), np.int32)
    args = (key, np.int64(first_step), accept, alias, out)
    run_workers(_chunk_negatives, num_steps, *args)
    return out
