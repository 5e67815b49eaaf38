"""Seeded train / validation / test splits of a graph's labelled nodes."""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["planetoid_split", "random_split"]


def planetoid_split(
    labels: np.ndarray,
    *,
    train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded Planetoid-style split (Yang et al. 2016; Kipf & Welling 2017) of ``labels:
    int[N]`` (``-1`` = unlabelled, in no mask): disjoint ``(train, val, test)`` ``bool[N]``.

    ``train_per_class`` random nodes of every class (all of a smaller class) for training, then
    ``num_val`` and ``num_test`` random nodes among the remaining labelled nodes.

    Raises:
      ValueError: fewer than ``num_val + num_test`` labelled nodes remain after training.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(np.flatnonzero(labels >= 0))
    grouped = perm[np.argsort(labels[perm], kind="stable")]  # by class, random within class
    glab = labels[grouped]
    rank = np.arange(grouped.size) - np.searchsorted(glab, glab, side="left")
    train = np.zeros(n, bool)
    train[grouped[rank < train_per_class]] = True
    rest = perm[~train[perm]]
    if rest.size < num_val + num_test:
        raise ValueError(
            f"only {rest.size} labelled nodes left after training, need "
            f"num_val + num_test = {num_val + num_test}"
        )
    val = np.zeros(n, bool)
    val[rest[:num_val]] = True
    test = np.zeros(n, bool)
    test[rest[num_val : num_val + num_test]] = True
    return train, val, test


def random_split(
    labels: np.ndarray,
    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    *,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded random split of the labelled nodes (``labels``: ``int[N]``, ``-1`` = unlabelled,
    or ``bool[N, C]``, all labelled) by ``fractions`` (sum ``<= 1``): disjoint ``(train, val,
    test)`` ``bool[N]`` of ``floor(f * num_labelled)`` nodes for train and val and the rounded
    share for test.

    Raises:
      ValueError: negative fractions or a sum above 1.
    """
    labels = np.asarray(labels)
    f = np.asarray(fractions, np.float64)
    if f.shape != (3,) or np.any(f < 0) or f.sum() > 1 + 1e-9:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to <= 1, got {f}")
    n = labels.shape[0]
    labelled = np.arange(n) if labels.ndim == 2 else np.flatnonzero(labels >= 0)
    perm = np.random.default_rng(seed).permutation(labelled)
    k = perm.size
    n_train, n_val = int(f[0] * k), int(f[1] * k)
    n_test = min(int(round(f[2] * k)), k - n_train - n_val)
    bounds = np.cumsum([0, n_train, n_val, n_test])
    masks = []
    for lo, hi in itertools.pairwise(bounds):
        m = np.zeros(n, bool)
        m[perm[lo:hi]] = True
        masks.append(m)
    return masks[0], masks[1], masks[2]
