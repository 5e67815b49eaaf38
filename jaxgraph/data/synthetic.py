"""Seeded synthetic graphs, generated with vectorized NumPy (no Python loop over nodes or edges).

* :func:`dc_sbm`: a degree-corrected stochastic block model (Karrer & Newman 2011) with
  power-law degree propensities, a tunable edge homophily and class-dependent noisy Gaussian
  features: a node-classification benchmark of any size.
* :func:`rmat`: the recursive-matrix (R-MAT) generator of Chakrabarti, Zhan & Faloutsos (2004)
  with per-level noise (Seshadhri, Pinar & Kolda 2013), a skewed, heavy-tailed graph for
  systems benchmarks.

Both build the :class:`~jaxgraph.graph.Graph` with :meth:`jaxgraph.graph.Graph.from_edges`,
which merges repeated pairs; ``experiments/bench_data.py`` measures their time and memory.
"""

from __future__ import annotations

import math

import numpy as np

from jaxgraph.data.splits import planetoid_split, random_split
from jaxgraph.graph import Graph, SelfLoops

__all__ = ["dc_sbm", "rmat"]

_CHUNK = 1 << 22  # edges per vectorized batch (bounds the temporary arrays)


def dc_sbm(
    num_nodes: int = 10_000,
    num_classes: int = 5,
    avg_degree: float = 10.0,
    *,
    num_features: int = 32,
    homophily: float = 0.7,
    degree_exponent: float | None = 2.5,
    feature_noise: float = 1.0,
    split: tuple[float, float, float] = (0.6, 0.2, 0.2),
    train_per_class: int | None = None,
    seed: int = 0,
    name: str | None = None,
) -> Graph:
    """An undirected degree-corrected SBM with class-dependent Gaussian features.

    Generation (all vectorized, seeded by ``seed``):

    1. Labels: balanced classes (sizes differ by at most one), randomly placed.
    2. Degree propensities ``theta_i``: Pareto with density ``~ theta^-degree_exponent`` on
       ``[1, inf)`` (``None``: all equal, a plain SBM), capped so that no expected degree
       exceeds ``N / 2``.
    3. ``round(N * avg_degree / 2)`` node pairs: one end drawn with probability
       ``~ theta``; the other end, with probability ``homophily`` in the same class, else in a
       uniformly chosen other class, drawn within that class with probability ``~ theta``.
       The graph is symmetrized; self-loops and repeated pairs (mostly between hubs) are
       dropped, so the realized average degree is below ``avg_degree``: with the defaults
       about 86 % of it at ``N = 4,000``, 92 % at 10,000 and 98 % at 1,000,000.
    4. Features: ``x_i = mu[y_i] + feature_noise * eps_i`` with class centres
       ``mu ~ N(0, I_F / F)`` (unit expected norm) and ``eps_i ~ N(0, I_F)``.
    5. Split: :func:`~jaxgraph.data.splits.random_split` with ``split`` fractions, or with
       ``train_per_class`` a Planetoid-style split (that many training nodes per class;
       validation and test sizes ``round(split[1] * N)`` and ``round(split[2] * N)``).

    With the defaults (``N = 10,000``, 60/20/20 split, mean of seeds 0-2), a logistic regression
    reaches about 46 % test accuracy on the raw features, 65 % on one round of neighbour
    averaging ``Â X`` and 81 % on two rounds ``Â² X`` (``Â = D^-1/2 (A + I) D^-1/2``, the GCN
    propagation; ``Â² X`` is what a linear 2-layer GCN sees), so a 2-layer GCN should land at
    roughly 75-85 %, not 100 %. Raise ``homophily`` or lower ``feature_noise`` for an easier
    task (``homophily=0.8``: 47 / 73 / 89 %).

    Args:
      num_nodes: ``N`` (at least ``num_classes``).
      num_classes: ``C >= 1``.
      avg_degree: target average (undirected) degree, ``> 0``.
      num_features: ``F >= 0``.
      homophily: probability that a sampled edge stays within its class, in ``[0, 1]``;
        ``1 / C`` gives no class structure.
      degree_exponent: power-law exponent ``> 1`` of the degree propensities, or ``None``.
      feature_noise: standard deviation of the per-node, per-dimension feature noise, ``>= 0``
        (relative to class centres of unit expected norm).
      split: train / val / test fractions.
      train_per_class: Planetoid-style training nodes per class (overrides ``split[0]``).
      seed: random seed; equal seeds give identical graphs.
      name: graph name; default ``"dc_sbm_n{N}_c{C}"``.

    Returns:
      An undirected :class:`Graph` without self-loops.

    Raises:
      ValueError: on an out-of-range argument.

    Shapes:
      ``features: f32[N, F]``, ``labels: int32[N]`` in ``[0, C)``, masks ``bool[N]``,
      ``num_edges ~= N * avg_degree`` directed edges.
    """
    n, c = int(num_nodes), int(num_classes)
    if c < 1 or n < c:
        raise ValueError(f"need num_classes >= 1 and num_nodes >= num_classes, got {n}, {c}")
    if not avg_degree > 0:
        raise ValueError(f"avg_degree must be positive, got {avg_degree}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    if degree_exponent is not None and not degree_exponent > 1.0:
        raise ValueError(f"degree_exponent must be > 1 (or None), got {degree_exponent}")
    if num_features < 0 or feature_noise < 0:
        raise ValueError("num_features and feature_noise must be non-negative")
    rng = np.random.default_rng(seed)

    labels = rng.permutation(np.arange(n, dtype=np.int32) % c)
    if degree_exponent is None:
        theta = np.ones(n)
    else:
        theta = (1.0 - rng.random(n)) ** (-1.0 / (degree_exponent - 1.0))
        theta = np.minimum(theta, theta.mean() * n / (2.0 * avg_degree))
    src, dst = _dc_sbm_edges(rng, labels, theta, int(round(n * avg_degree / 2.0)), homophily)

    features = np.zeros((n, 0), np.float32)
    if num_features:
        centres = rng.standard_normal((c, num_features), dtype=np.float32)
        centres /= np.float32(math.sqrt(num_features))  # unit expected norm
        features = rng.standard_normal((n, num_features), dtype=np.float32)
        features *= np.float32(feature_noise)
        features += centres[labels]

    if train_per_class is None:
        train, val, test = random_split(labels, split, seed=seed)
    else:
        train, val, test = planetoid_split(
            labels,
            train_per_class=train_per_class,
            num_val=int(round(split[1] * n)),
            num_test=int(round(split[2] * n)),
            seed=seed,
        )
    return Graph.from_edges(
        src,
        dst,
        num_nodes=n,
        symmetrize=True,
        features=features,
        labels=labels,
        train_mask=train,
        val_mask=val,
        test_mask=test,
        name=f"dc_sbm_n{n}_c{c}" if name is None else name,
    )


def _dc_sbm_edges(
    rng: np.random.Generator,
    labels: np.ndarray,
    theta: np.ndarray,
    num_pairs: int,
    homophily: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Samples the DC-SBM node pairs block by block (loops over classes only).

    Equivalent to ``num_pairs`` i.i.d. draws of (source ~ theta over all nodes; target class =
    the source's class w.p. ``homophily``, else a uniform other class; target ~ theta within
    that class), but drawn as counts: a multinomial over the ``C x C`` class blocks, then per
    class one multinomial over its nodes for all its source ends and one for all its target
    ends, shuffled and dealt out to the blocks.

    Shapes:
      ``labels: int32[N]``, ``theta: f64[N]`` -> ``(src int32[num_pairs], dst int32[num_pairs])``.
    """
    c = int(labels.max()) + 1
    order = np.argsort(labels, kind="stable").astype(np.int32)  # nodes grouped by class
    starts = np.searchsorted(labels[order], np.arange(c + 1))
    mass = np.add.reduceat(theta[order], starts[:-1])  # theta mass of every class
    share = mass / mass.sum()
    block = np.empty((c, c))
    block[:] = (share * ((1.0 - homophily) / (c - 1) if c > 1 else 0.0))[:, None]
    np.fill_diagonal(block, share * (homophily if c > 1 else 1.0))
    block /= block.sum()
    counts = rng.multinomial(num_pairs, block.ravel()).reshape(c, c)  # [source, target] class
    offsets = np.concatenate([[0], np.cumsum(counts.ravel())]).reshape(-1)[:-1].reshape(c, c)
    src = np.empty(num_pairs, np.int32)
    dst = np.empty(num_pairs, np.int32)
    for k in range(c):
        nodes = order[starts[k] : starts[k + 1]]
        p = theta[nodes] / theta[nodes].sum()
        # source ends of class k: the blocks (k, 0..C-1) are contiguous in row-major order
        ends = np.repeat(nodes, rng.multinomial(counts[k].sum(), p))
        rng.shuffle(ends)
        src[offsets[k, 0] : offsets[k, 0] + ends.shape[0]] = ends
        # target ends in class k: dealt to the blocks (0..C-1, k)
        ends = np.repeat(nodes, rng.multinomial(counts[:, k].sum(), p))
        rng.shuffle(ends)
        cut = np.concatenate([[0], np.cumsum(counts[:, k])])
        for j in range(c):
            dst[offsets[j, k] : offsets[j, k] + counts[j, k]] = ends[cut[j] : cut[j + 1]]
    return src, dst


def rmat(
    num_nodes: int | None = None,
    num_edges: int | None = None,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    d: float = 0.05,
    *,
    symmetrize: bool = True,
    scale: int | None = None,
    noise: float = 0.1,
    permute: bool = True,
    num_features: int = 0,
    num_classes: int = 0,
    split: tuple[float, float, float] = (0.6, 0.2, 0.2),
    self_loops: SelfLoops = "remove",
    seed: int = 0,
    name: str | None = None,
) -> Graph:
    """An R-MAT graph (Chakrabarti, Zhan & Faloutsos 2004), generated level by level.

    Each of the ``num_edges`` edges picks, at each of the ``L = ceil(log2 N)`` recursion levels,
    one quadrant of the adjacency matrix with probabilities ``(a, b, c, d)`` (top-left,
    top-right, bottom-left, bottom-right; rows = sources), which sets one bit of its source and
    destination ids. The draws are vectorized over all edges of a batch, one level at a time.
    With ``noise > 0`` every level uses perturbed probabilities
    ``a - 2 mu a / (a + d), b + mu, c + mu, d - 2 mu d / (a + d)`` with ``mu ~ U[-noise,
    noise]`` (Seshadhri et al. 2013), which smooths the oscillations of the degree
    distribution. When ``N`` is not a power of two, edges with an endpoint ``>= N`` are
    redrawn. Finally the ids are randomly permuted (``permute``) so that a node's degree does
    not depend on its id. Repeated edges are merged and self-loops removed (``self_loops``), so
    the graph has somewhat fewer than ``num_edges`` (x2 if symmetrized) edges.

    Args:
      num_nodes: ``N``; alternatively give ``scale`` (``N = 2 ** scale``).
      num_edges: number of sampled edges; default ``16 * N`` (the Graph500 edge factor).
      a, b, c, d: quadrant probabilities (non-negative, summing to 1).
      symmetrize: ``True`` (default) adds reverse edges (undirected graph); ``False`` keeps
        the sampled directions.
      scale: ``log2`` of the number of nodes, instead of ``num_nodes``.
      noise: per-level noise amplitude, ``0 <= noise <= min(b, c, (a + d) / 2)``.
      permute: randomly relabel the nodes.
      num_features: ``F``; features are i.i.d. standard normal (``f32``).
      num_classes: ``C > 0`` draws uniformly random labels in ``[0, C)`` and a random
        ``split`` (train / val / test fractions). These labels carry no signal: they only make
        the graph usable for throughput benchmarks of node classifiers. ``0``: no labels
        (``-1``) and no split.
      split: train / val / test fractions, used with ``num_classes``.
      self_loops: ``"remove"`` (default) or ``"keep"``.
      seed: random seed; equal seeds give identical graphs.
      name: graph name; default ``"rmat_n{N}_e{num_edges}"``.

    Returns:
      The :class:`Graph` (without ``num_classes``: labels ``-1``, masks all ``False``).

    Raises:
      ValueError: on inconsistent or out-of-range arguments.

    Shapes:
      ``features: f32[N, F]``, ``num_edges <= num_edges`` (or ``2 * num_edges`` symmetrized).
    """
    if (num_nodes is None) == (scale is None):
        raise ValueError("give exactly one of num_nodes and scale")
    n = int(num_nodes) if scale is None else 1 << int(scale)
    if n < 1:
        raise ValueError(f"num_nodes must be positive, got {n}")
    levels = max(1, math.ceil(math.log2(n))) if n > 1 else 1
    if levels > 31:
        raise ValueError(f"num_nodes = {n} is too large (at most 2**31 nodes)")
    m = 16 * n if num_edges is None else int(num_edges)
    if m < 0:
        raise ValueError(f"num_edges must be non-negative, got {m}")
    if num_classes < 0 or num_features < 0:
        raise ValueError("num_classes and num_features must be non-negative")
    probs = np.array([a, b, c, d], np.float64)
    if np.any(probs < 0) or not math.isclose(probs.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"a, b, c, d must be non-negative and sum to 1, got {probs.tolist()}")
    if not 0.0 <= noise <= min(b, c, (a + d) / 2.0):
        raise ValueError(f"noise must be in [0, min(b, c, (a + d) / 2)], got {noise}")
    rng = np.random.default_rng(seed)

    # per-level quadrant probabilities, shape [L, 4]
    mu = rng.uniform(-noise, noise, levels) if noise > 0 else np.zeros(levels)
    p = np.stack([a - 2 * mu * a / (a + d), b + mu, c + mu, d - 2 * mu * d / (a + d)], axis=1).clip(
        0.0
    )
    p /= p.sum(axis=1, keepdims=True)
    thresholds = np.cumsum(p, axis=1)[:, :3].astype(np.float32)  # u < t0: a, < t1: b, < t2: c

    src = np.empty(m, np.int32)
    dst = np.empty(m, np.int32)
    filled = 0
    while filled < m:  # rounds of batches; only the out-of-range edges are redrawn
        want = min(_CHUNK, m - filled)
        s, t = _rmat_batch(rng, want, thresholds)
        ok = (s < n) & (t < n)
        if not ok.all():
            s, t = s[ok], t[ok]
        k = s.shape[0]
        src[filled : filled + k] = s
        dst[filled : filled + k] = t
        filled += k
    if permute:
        perm = rng.permutation(n).astype(np.int32)
        src = perm[src]
        dst = perm[dst]
    features = None
    if num_features:
        features = rng.standard_normal((n, num_features), dtype=np.float32)
    labels = masks = None
    if num_classes:
        labels = rng.integers(0, num_classes, n, dtype=np.int32)
        masks = random_split(labels, split, seed=seed)
    return Graph.from_edges(
        src,
        dst,
        num_nodes=n,
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        train_mask=None if masks is None else masks[0],
        val_mask=None if masks is None else masks[1],
        test_mask=None if masks is None else masks[2],
        name=f"rmat_n{n}_e{m}" if name is None else name,
    )


def _rmat_batch(
    rng: np.random.Generator, m: int, thresholds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` R-MAT edges in ``[0, 2**L)^2``; one vectorized quadrant draw per level.

    Shapes:
      ``thresholds: f32[L, 3]`` cumulative quadrant probabilities -> ``(int32[m], int32[m])``.
    """
    src = np.zeros(m, np.int32)
    dst = np.zeros(m, np.int32)
    for t_a, t_b, t_c in thresholds:  # loop over the L levels, not over edges
        u = rng.random(m, dtype=np.float32)
        src <<= 1
        dst <<= 1
        src |= u >= t_b  # bottom half: quadrants c, d
        dst |= ((u >= t_a) & (u < t_b)) | (u >= t_c)  # right half: quadrants b, d
    return src, dst
