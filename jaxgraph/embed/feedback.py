"""FeeST: the feedback that couples training back to sampling (FeLoG §5.1).

After a training round, the *neighbourhood consistency* of a node is the mean cosine similarity
between its input vector and those of up to ``k_s`` neighbours sampled without replacement
(FeLoG Eq. 4)::

    Psi(v) = 1/|N~(v)| * sum_{u in N~(v)} cos(syn0[v], syn0[u]),   |N~(v)| = min(k_s, deg v)

A zero-norm vector has cosine 0 with everything; a node without neighbours has ``Psi = 0``.
Nodes with ``Psi(v) >= mu`` are considered trained and stop starting walks (Eq. 5)::

    V_a^{r+1} = {v in V_a^r : Psi(v) < mu}

Round 0 starts from every node with an out-edge; inactive nodes still appear in other walks.
Options beyond the paper's rule (:class:`FeedbackConfig`): ``stop_ratio`` (the public code's
stop once the frontier stops shrinking), ``reactivate`` (§5.1's recomputed frontier; off, as
in the public code, makes inactivity permanent), ``warmup_rounds`` (the public code's
``--min_R``) and ``center``: early in training all input vectors share a large common
component, so raw cosines are near 1 for any two nodes and the paper's rule retires almost
every node at once; centring removes it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed._kernel_steps import run_workers
from jaxgraph.options import flag


@dataclasses.dataclass(frozen=True)
class FeedbackConfig:
    """The active-set rule.

    Attributes:
      mu: similarity threshold; a node stays active while ``Psi < mu``.
      num_neighbors: ``k_s``, neighbours sampled (without replacement) per node.
      stop_ratio: if set, stop when ``|V_a^{r+1}| / |V_a^r| > stop_ratio``.
      reactivate: recompute the frontier over all candidates every round.
      warmup_rounds: rounds before the first pruning.
      center: cosines of mean-centred vectors (see the module docstring).
    """

    mu: float = 0.65
    num_neighbors: int = flag("--neighbors", 30)
    stop_ratio: float | None = None
    reactivate: bool = False
    warmup_rounds: int = 0
    center: bool = False

    def __post_init__(self):
        if not -1.0 <= self.mu <= 1.0:  # Psi is a mean cosine, in [-1, 1]
            raise ValueError(f"mu must lie in [-1, 1] (Psi is a mean cosine), got {self.mu}")
        if self.num_neighbors < 1:
            raise ValueError(f"num_neighbors must be >= 1, got {self.num_neighbors}")
        if self.stop_ratio is not None and not 0.0 < self.stop_ratio <= 1.0:
            raise ValueError(f"stop_ratio must be in (0, 1], got {self.stop_ratio}")
        if self.warmup_rounds < 0:
            raise ValueError(f"warmup_rounds must be >= 0, got {self.warmup_rounds}")


def neighbour_consistency(
    vectors: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    nodes,
    num_neighbors: int,
    *,
    seed: int,
    round_index: int = 0,
    center: bool = False,
) -> np.ndarray:
    """``Psi(v)`` of ``nodes`` (Eq. 4), ``float64[M]`` in ``[-1, 1]``, from the input vectors
    ``f32[N, d]`` and the neighbour CSR (:func:`jaxgraph.embed.walks.out_csr`). ``seed`` and
    ``round_index`` fix the neighbour samples; ``center`` subtracts the mean vector first."""
    vectors = np.asarray(vectors, np.float32)
    if center:
        vectors = vectors - vectors.mean(axis=0, dtype=np.float64).astype(np.float32)
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    unit = np.zeros_like(vectors, dtype=np.float64)
    nz = norms > 0
    unit[nz] = vectors[nz] / norms[nz, None]
    nodes = np.asarray(nodes, np.int64)
    out = np.zeros(nodes.shape[0], np.float64)
    if nodes.size:
        key = hr.round_key(seed, hr.PURPOSE_FEEDBACK, round_index)
        args = (unit, indptr, indices, nodes, num_neighbors, key, out)
        run_workers(_psi_kernel, nodes.shape[0], *args)
    return out


@njit(nogil=True, cache=True)
def _psi_kernel(first, stride, unit, indptr, indices, nodes, k, key, out):
    """``out[m]`` for ``m = first, first + stride, ..`` (a worker of
    :func:`~jaxgraph.embed._kernel_steps.run_workers`)."""
    for m in range(first, nodes.shape[0], stride):
        v = nodes[m]
        lo = indptr[v]
        deg = indptr[v + 1] - lo
        if deg == 0:
            out[m] = 0.0
            continue
        take = min(k, deg)
        state = hr.stream(key, v)
        pick = np.arange(deg)
        if take < deg:
            # Partial Fisher-Yates: pick[:take] is a uniform subset without replacement.
            for j in range(take):
                state, r = hr.next_below(state, deg - j)
                t = pick[j]
                pick[j] = pick[j + r]
                pick[j + r] = t
        acc = 0.0
        for j in range(take):
            u = indices[lo + pick[j]]
            for c in range(unit.shape[1]):
                acc += unit[v, c] * unit[u, c]
        out[m] = acc / take


@dataclasses.dataclass
class FeedbackStep:
    """What one feedback evaluation decided."""

    active: np.ndarray  # int32[A'] the next round's active nodes
    evaluated: int  # nodes whose Psi was computed
    psi_mean: float  # mean Psi over the evaluated nodes
    reactivated: int  # nodes active again after being inactive (reactivate mode)
    stop: bool  # the stop_ratio rule fired, or the active set is empty


def initial_active_set(indptr: np.ndarray) -> np.ndarray:
    """Round 0: every node with at least one out-edge, ``int32[A]``."""
    return np.flatnonzero(np.diff(indptr) > 0).astype(np.int32)


def update_active_set(
    active: np.ndarray,
    vectors: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    config: FeedbackConfig,
    *,
    seed: int,
    round_index: int,
    ever_inactive: np.ndarray | None = None,
) -> FeedbackStep:
    """Applies the rule of the module docstring to round ``round_index``'s ``active`` nodes,
    given the input vectors ``f32[N, d]`` after it. ``ever_inactive`` (``bool[N]``) is updated
    in place with the nodes that left the frontier (needed to count reactivations)."""
    active = np.asarray(active, np.int32)
    if round_index < config.warmup_rounds:
        return FeedbackStep(active, 0, float("nan"), 0, stop=active.size == 0)
    candidates = initial_active_set(indptr) if config.reactivate else active
    k, center = config.num_neighbors, config.center
    psi = neighbour_consistency(
        vectors, indptr, indices, candidates, k, seed=seed, round_index=round_index, center=center
    )
    nxt = candidates[psi < config.mu].astype(np.int32)
    reactivated = 0
    if ever_inactive is not None:
        was_active = np.zeros(ever_inactive.shape[0], bool)
        was_active[active] = True
        now_active = np.zeros_like(was_active)
        now_active[nxt] = True
        reactivated = int(np.count_nonzero(now_active & ~was_active & ever_inactive))
        ever_inactive |= was_active & ~now_active
    stop = nxt.size == 0
    if config.stop_ratio is not None and active.size:
        # Survivors among this round's active nodes (reactivated ones are not survivors).
        survived = np.count_nonzero(np.isin(active, nxt, assume_unique=True))
        stop |= survived / active.size > config.stop_ratio
    psi_mean = float(psi.mean()) if psi.size else float("nan")
    return FeedbackStep(nxt, int(candidates.size), psi_mean, reactivated, bool(stop))
