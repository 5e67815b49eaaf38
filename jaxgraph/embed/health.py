"""Whether a round of skip-gram training stayed in its healthy range.

Two figures of every round (:class:`jaxgraph.embed.rounds.RoundLog`) tell training from
diverging:

* **loss per pair**: the untrained tables (``syn1 = 0``) score ``(K + 1) ln 2`` per pair (with
  hierarchical softmax at most ``L ln 2``, ``L`` the longest path of the tree); a round above
  that left the tables worse than no training.
* **the largest row norm**: healthy tables stay below about 10 at ``d = 128``; past about 100,
  dot products saturate ``sigmoid`` in float32 and the row no longer trains.

A round outside either range raises a :class:`UnhealthyTraining` warning and, with
``action="stop"``, ends the run; a non-finite loss always ends it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from jaxgraph.options import flag

ACTIONS = ("warn", "stop", "ignore")


class UnhealthyTraining(RuntimeWarning):
    """A round of SGNS left its healthy range (see :mod:`jaxgraph.embed.health`)."""


@dataclasses.dataclass(frozen=True)
class HealthCheck:
    """The healthy range of a round and what happens outside it.

    Attributes:
      max_norm: the largest row norm of a healthy table.
      max_loss: the largest healthy loss per pair; None: ``(K + 1) ln 2``, the loss of the
        untrained tables.
      action: ``"warn"`` (default), ``"stop"`` (warn and end the run after the round) or
        ``"ignore"``.
    """

    max_norm: float = 100.0
    max_loss: float | None = None
    action: Literal["warn", "stop", "ignore"] = flag("--on-unhealthy", "warn")

    def __post_init__(self):
        if not self.max_norm > 0:
            raise ValueError(f"max_norm must be positive, got {self.max_norm}")
        if self.max_loss is not None and not self.max_loss > 0:
            raise ValueError(f"max_loss must be positive or None, got {self.max_loss}")
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")

    def loss_bound(self, negatives: int, path_length: int | None = None) -> float:
        """The largest healthy loss per pair: ``max_loss``, else the untrained tables' loss
        with ``negatives`` negatives, or at most ``path_length`` tree nodes per pair."""
        terms = negatives + 1 if path_length is None else path_length
        return terms * math.log(2) if self.max_loss is None else self.max_loss

    def problems(
        self, loss: float, max_norm: float, negatives: int, path_length: int | None = None
    ) -> list[str]:
        """What is out of range in a round with this ``loss`` per pair and largest row norm
        (empty when healthy; a NaN norm is a round that trained nothing and is not checked);
        ``path_length``: hierarchical softmax's longest path (None: negative sampling)."""
        out = []
        bound = self.loss_bound(negatives, path_length)
        if not math.isfinite(loss):
            out.append(f"loss per pair is {loss}")
        elif loss > bound:
            what = f"{negatives} negatives" if path_length is None else f"paths of {path_length}"
            out.append(
                f"loss per pair {loss:.4g} is above {bound:.4g} (the untrained tables' loss "
                f"with {what})"
            )
        if max_norm > self.max_norm:
            out.append(f"largest row norm {max_norm:.4g} is above {self.max_norm:g}")
        return out
