"""Seeded synthetic graphs, generated with vectorized NumPy (no Python loop over nodes or edges).

* :func:`dc_sbm`: a degree-corrected stochastic block model (Karrer & Newman 2011) with
  class-dependent Gaussian features: a node-classification benchmark of any size.
* :func:`rmat`: the R-MAT generator (Chakrabarti, Zhan & Faloutsos 2004) with per-level noise
  (Seshadhri, Pinar & Kolda 2013): a skewed, heavy-tailed graph for systems benchmarks.
"""

from __future__ import annotations

import math

import numpy as np

from jaxgraph.data.assemble import MASK_NAMES
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

    1. Labels: balanced classes (sizes differ by at most one), randomly placed.
    2. Degree propensities ``theta_i``: Pareto with density ``~ theta^-degree_exponent`` on
       ``[1, inf)`` (``None``: all equal, a plain SBM), capped so that no expected degree
       exceeds ``N / 2``.
    3. ``round(N * avg_degree / 2)`` node pairs: one end drawn ``~ theta``; the other, with
       probability ``homophily`` in the same class, else in a uniform other class, drawn
       ``~ theta`` within it. Self-loops and repeated pairs are dropped, so the realized
       average degree is somewhat below ``avg_degree``.
    4. Features: ``x_i = mu[y_i] + feature_noise * eps_i``, ``mu ~ N(0, I_F / F)`` (unit
       expected norm), ``eps_i ~ N(0, I_F)``.
    5. Split: :func:`~jaxgraph.data.splits.random_split` by ``split``, or with
       ``train_per_class`` a Planetoid-style split (validation and test sizes
       ``round(split[1] * N)`` and ``round(split[2] * N)``).

    Args:
      num_nodes: ``N`` (at least ``num_classes``).
      num_classes: ``C >= 1``.
      avg_degree: target average (undirected) degree, ``> 0``.
      num_features: ``F >= 0``.
      homophily: in ``[0, 1]``; ``1 / C`` gives no class structure.
      degree_exponent: ``> 1``, or ``None``.
      feature_noise: ``>= 0``; raise ``homophily`` or lower this for an easier task.
      train_per_class: Planetoid-style training nodes per class (overrides ``split[0]``).
      name: graph name; default ``"dc_sbm_n{N}_c{C}"``.
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
        masks = random_split(labels, split, seed=seed)
    else:
        masks = planetoid_split(
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
        **dict(zip(MASK_NAMES, masks, strict=True)),
        name=f"dc_sbm_n{n}_c{c}" if name is None else name,
    )


def _dc_sbm_edges(
    rng: np.random.Generator,
    labels: np.ndarray,
    theta: np.ndarray,
    num_pairs: int,
    homophily: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)``, ``int32[num_pairs]``: the DC-SBM node pairs, drawn as counts (a
    multinomial over the ``C x C`` class blocks, then per class one multinomial over its nodes
    for its source ends and one for its target ends, shuffled and dealt out to the blocks)."""
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

    Each edge picks, at each of the ``L = ceil(log2 N)`` levels, one quadrant of the adjacency
    matrix (rows = sources) with probabilities ``(a, b, c, d)`` (top-left, top-right,
    bottom-left, bottom-right), which sets one bit of its source and destination ids. With
    ``noise > 0`` every level uses ``a - 2 mu a / (a + d), b + mu, c + mu, d - 2 mu d / (a +
    d)``, ``mu ~ U[-noise, noise]`` (Seshadhri et al. 2013), smoothing the degree distribution.
    Edges with an endpoint ``>= N`` are redrawn. Repeated edges are merged and self-loops
    removed (``self_loops``), so the graph has somewhat fewer than ``num_edges`` (x2 if
    symmetrized) edges.

    Args:
      num_nodes: ``N``; alternatively give ``scale`` (``N = 2 ** scale``).
      num_edges: number of sampled edges; default ``16 * N`` (the Graph500 edge factor).
      a, b, c, d: quadrant probabilities (non-negative, summing to 1).
      noise: ``0 <= noise <= min(b, c, (a + d) / 2)``.
      permute: randomly relabel the nodes (so that degree does not depend on id).
      num_features: ``F``; features are i.i.d. standard normal.
      num_classes: ``C > 0`` draws uniformly random labels in ``[0, C)`` (no signal: for
        throughput benchmarks) and a random ``split``; ``0``: labels ``-1``, no split.
      name: graph name; default ``"rmat_n{N}_e{num_edges}"``.
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
    q = [a - 2 * mu * a / (a + d), b + mu, c + mu, d - 2 * mu * d / (a + d)]
    p = np.stack(q, axis=1).clip(0.0)
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
        src, dst = perm[src], perm[dst]
    features = None
    if num_features:
        features = rng.standard_normal((n, num_features), dtype=np.float32)
    labels, masks = None, {}
    if num_classes:
        labels = rng.integers(0, num_classes, n, dtype=np.int32)
        masks = dict(zip(MASK_NAMES, random_split(labels, split, seed=seed), strict=True))
    return Graph.from_edges(
        src,
        dst,
        num_nodes=n,
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        **masks,
        name=f"rmat_n{n}_e{m}" if name is None else name,
    )


def _rmat_batch(
    rng: np.random.Generator, m: int, thresholds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` R-MAT edges in ``[0, 2**L)^2``, one quadrant draw per level (``thresholds:
    f32[L, 3]``, cumulative quadrant probabilities)."""
    src = np.zeros(m, np.int32)
    dst = np.zeros(m, np.int32)
    for t_a, t_b, t_c in thresholds:  # loop over the L levels, not over edges
        u = rng.random(m, dtype=np.float32)
        src <<= 1
        dst <<= 1
        src |= u >= t_b  # bottom half: quadrants c, d
        dst |= ((u >= t_a) & (u < t_b)) | (u >= t_c)  # right half: quadrants b, d
    return src, dst
