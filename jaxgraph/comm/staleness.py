"""Bounded staleness: when an owner re-sends its block (Sancus) or its gradient sum (SkipG).

Peng et al., "Sancus: staleness-aware communication-avoiding full-graph decentralized
training", VLDB'22 (the chapter's Algorithms 1-4). Every device reports its owner statistics
and receiver tags in one small ``psum``'d table; all devices then evaluate the same pure
function (:func:`decide`) on the same table, so the predicate of every ``lax.cond`` around a
broadcast is device-invariant. Conventions where the chapter is ambiguous:

- **Epoch bounds** (Δ_E, Def. 5.2 / Alg. 2; Δ_A, Def. 5.3 / Alg. 3): a block used at epoch
  ``e`` may be at most Δ epochs old, ``e - Ver <= Δ``; block ``j`` is broadcast at epoch ``e``
  iff ``e - Ver(j) > Δ`` (the algorithms' ``Ver - Ver(j) >= Δ`` evaluated when the flag is
  updated, at the end of epoch ``e - 1``, Alg. 1 line 17). Δ = 0 never reuses a block; Δ_E = 1
  broadcasts every other epoch, as the chapter states, and the Fig. 5.7b example holds
  (``tests/stale/test_stale_policies.py``).
- **Δ_A** takes the oldest copy over the receivers that read block ``j`` (those with an edge
  from it). In this synchronous program every broadcast reaches all receivers at once, so
  Δ_A schedules like Δ_E except for blocks nobody reads; :func:`decide` handles any tag matrix.
- **Δ_H** (Def. 5.4 / Alg. 4): broadcast iff ``gap >= Δ_H``, ``gap`` the mean absolute
  difference between the owner's block and its last broadcast copy over the real rows
  (:func:`variation_gap`; the ``F.l1_loss`` of the public prototype): drift accumulated since
  the last broadcast, not per-epoch change.
- **Warm-up**: epochs ``1..warmup`` (default 50) broadcast every block.
- **Bytes**: the decision table costs a ``psum`` of ``P (P + 3)`` int32 per layer
  (:func:`decision_bytes`); SkipG's schedule table ``int32[P, 2]`` (:func:`table_bytes`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

NOT_READ = np.iinfo(np.int32).max
REPORT_COLUMNS = 4  # count, sent_version, changed, gap bits; then the P - 1 receiver tags

PolicyKind = Literal["epoch", "adaptive", "gap"]


@dataclasses.dataclass(frozen=True)
class StalenessPolicy:
    """When a Sancus owner broadcasts its block (layers after the first).

    Attributes:
      kind: ``"epoch"`` (Δ_E, Def. 5.2), ``"adaptive"`` (Δ_A, Def. 5.3) or ``"gap"`` (Δ_H,
        Def. 5.4).
      bound: Δ: epochs for ``epoch`` / ``adaptive``, a mean absolute difference for ``gap``;
        ``0`` never reuses a block, ``math.inf`` never re-sends one after the warm-up.
      warmup: epochs ``1..warmup`` broadcast every block.
    """

    kind: PolicyKind
    bound: float
    warmup: int = 50

    def __post_init__(self):
        if self.kind not in ("epoch", "adaptive", "gap"):
            raise ValueError(f"unknown staleness policy {self.kind!r}")
        if not self.bound >= 0:
            raise ValueError(f"the staleness bound must be >= 0, got {self.bound}")
        if self.warmup < 0:
            raise ValueError(f"warm-up epochs must be >= 0, got {self.warmup}")


def decide(
    policy: StalenessPolicy,
    *,
    epoch,
    sent_version,
    tags,
    gap,
) -> jax.Array:
    """Which owners broadcast at ``epoch`` (the same pure function on every device).

    Args:
      policy: the staleness policy.
      epoch: the current epoch, 1-indexed.
      sent_version: per owner, the epoch of its last broadcast (``-1``: never sent).
      tags: ``tags[i, j]`` = receiver ``i``'s version of block ``j`` (:data:`NOT_READ` where
        ``i`` reads nothing of ``j``, and on the diagonal).
      gap: per owner, the variation gap of its block (:func:`variation_gap`).

    Returns:
      ``bool[P]``: owner ``j`` broadcasts. A block never sent is always broadcast, and so is
      every block during the warm-up.

    Shapes:
      ``sent_version: int[P]``, ``tags: int[P, P]``, ``gap: f32[P]`` -> ``bool[P]``.
    """
    sent_version = jnp.asarray(sent_version, jnp.int32)
    epoch = jnp.asarray(epoch, jnp.int32)
    never = sent_version < 0
    warm = epoch <= policy.warmup
    if policy.kind == "epoch":
        flag = (epoch - sent_version).astype(jnp.float32) > policy.bound
    elif policy.kind == "adaptive":
        age = (epoch - jnp.asarray(tags, jnp.int32)).astype(jnp.float32)  # [receiver, block]
        flag = jnp.any(age > policy.bound, axis=0)
    else:
        flag = jnp.asarray(gap, jnp.float32) >= policy.bound
    return never | warm | flag


def variation_gap(h: jax.Array, last_sent: jax.Array, mask: jax.Array) -> jax.Array:
    """``mean |h - last_sent|`` over the real rows (``mask``) and all features.

    Shapes:
      ``h, last_sent: [B, F]``, ``mask: bool[B]`` -> ``f32[]`` (0 for an empty block).
    """
    diff = jnp.abs(h.astype(jnp.float32) - last_sent.astype(jnp.float32))
    total = jnp.sum(jnp.where(mask[:, None], diff, 0.0))
    count = jnp.sum(mask).astype(jnp.float32) * h.shape[-1]
    return total / jnp.maximum(count, 1.0)


def table_bytes(num_parts: int, columns: int) -> int:
    """Bytes one device sends for a ``psum`` of an ``int32[P, columns]`` table: a ring
    all-reduce moves ``2 (P - 1) / P`` of it per device."""
    if num_parts == 1:
        return 0
    return 2 * (num_parts - 1) * columns * 4


def decision_bytes(num_parts: int) -> int:
    """Bytes one device sends for the decision table of one Sancus exchange
    (``int32[P, P + 3]``, :func:`table_bytes`)."""
    return table_bytes(num_parts, num_parts - 1 + REPORT_COLUMNS)


__all__ = [
    "NOT_READ",
    "REPORT_COLUMNS",
    "StalenessPolicy",
    "decide",
    "decision_bytes",
    "table_bytes",
    "variation_gap",
]
