"""Bounded staleness: when an owner re-sends its block (Sancus) or its gradient sum (SkipG).

Peng et al., "Sancus", VLDB'22 (Algorithms 1-4). Every device reports its owner statistics and
receiver tags in one ``psum``'d table, and all evaluate the same pure :func:`decide` on it, so
every ``lax.cond`` predicate around a broadcast is device-invariant. Where the chapter is
ambiguous:

- **Epoch bounds** (Δ_E, Def. 5.2; Δ_A, Def. 5.3): block ``j`` is broadcast at epoch ``e`` iff
  ``e - Ver(j) > Δ`` (Alg. 1 line 17's ``Ver - Ver(j) >= Δ`` at the end of epoch ``e - 1``), so
  Δ_E = 1 broadcasts every other epoch and the Fig. 5.7b example holds.
- **Δ_A** takes the oldest copy over the receivers that read block ``j``; every broadcast
  reaches all receivers at once, so it schedules like Δ_E except for blocks nobody reads.
- **Δ_H** (Def. 5.4): broadcast iff ``gap >= Δ_H``, ``gap`` the mean absolute drift of the
  block since its last broadcast over the real rows (:func:`variation_gap`, the prototype's
  ``F.l1_loss``), not per-epoch change.
- **Warm-up**: epochs ``1..warmup`` (default 50) broadcast every block.
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


def decide(policy: StalenessPolicy, *, epoch, sent_version, tags, gap) -> jax.Array:
    """Which owners broadcast at ``epoch`` (1-indexed; the same pure function on every
    device): ``bool[P]``, always for a block never sent and during the warm-up.

    Args:
      sent_version: ``int[P]`` per owner, the epoch of its last broadcast (``-1``: never).
      tags: ``int[P, P]``, ``tags[i, j]`` = receiver ``i``'s version of block ``j``
        (:data:`NOT_READ` where ``i`` reads nothing of ``j``, and on the diagonal).
      gap: ``f32[P]`` per owner, the :func:`variation_gap` of its block.
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
