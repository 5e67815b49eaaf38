"""Small labelled graphs shared by the tests of every jaxgraph module.

Each factory returns a :class:`jaxgraph.graph.Graph` with 20-300 nodes, random ``float32``
features, integer labels in ``[0, C)`` and disjoint random train/val/test masks. Every factory is
deterministic (fixed seeds), so tests can compare results across runs. :data:`ALL_CASES` maps a
short name to a zero-argument factory, for ``pytest.mark.parametrize``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from jaxgraph.graph import Graph

NUM_FEATURES = 8
NUM_CLASSES = 4


def _attributed(
    src,
    dst,
    *,
    num_nodes: int,
    name: str,
    seed: int,
    symmetrize: bool = True,
    self_loops: str = "remove",
    num_features: int = NUM_FEATURES,
    num_classes: int = NUM_CLASSES,
) -> Graph:
    """Builds a graph from edges and attaches random features, labels and split masks.

    Shapes:
      ``src, dst: int[E]`` -> graph with ``features: f32[N, num_features]``, ``labels: int32[N]``
      and ``bool[N]`` masks (about 50% / 25% / 25% of the nodes, disjoint).
    """
    rng = np.random.default_rng(seed + 1_000)
    features = rng.standard_normal((num_nodes, num_features)).astype(np.float32)
    labels = rng.integers(0, num_classes, num_nodes).astype(np.int32)
    split = rng.random(num_nodes)
    return Graph.from_edges(
        np.asarray(src, np.int64),
        np.asarray(dst, np.int64),
        num_nodes=num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        train_mask=split < 0.5,
        val_mask=(split >= 0.5) & (split < 0.75),
        test_mask=split >= 0.75,
        name=name,
    )


def random_graph(
    n: int = 120,
    avg_deg: float = 6.0,
    num_features: int = NUM_FEATURES,
    num_classes: int = NUM_CLASSES,
    seed: int = 0,
    directed: bool = False,
) -> Graph:
    """An Erdos-Renyi-like graph with about ``n * avg_deg`` directed edges (before merging).

    ``directed=False`` symmetrizes (each sampled pair gives both directions, so the average
    degree is about ``avg_deg``); ``directed=True`` keeps the sampled directions.
    """
    rng = np.random.default_rng(seed)
    num_pairs = int(round(n * avg_deg / (1 if directed else 2)))
    src = rng.integers(0, n, num_pairs)
    dst = rng.integers(0, n, num_pairs)
    return _attributed(
        src,
        dst,
        num_nodes=n,
        name=f"random_n{n}_d{avg_deg:g}" + ("_directed" if directed else ""),
        seed=seed,
        symmetrize=not directed,
        num_features=num_features,
        num_classes=num_classes,
    )


def empty_edges(n: int = 20, seed: int = 1) -> Graph:
    """``n`` nodes and no edge at all."""
    empty = np.zeros(0, np.int64)
    return _attributed(empty, empty, num_nodes=n, name="empty_edges", seed=seed)


def isolated_nodes(n: int = 60, seed: int = 2) -> Graph:
    """A random undirected graph in which a third of the nodes (scattered ids) have no edge."""
    rng = np.random.default_rng(seed)
    connected = np.sort(rng.permutation(n)[: 2 * n // 3])
    pairs = rng.integers(0, connected.size, (2, 3 * n))
    return _attributed(
        connected[pairs[0]], connected[pairs[1]], num_nodes=n, name="isolated_nodes", seed=seed
    )


def self_loops(n: int = 50, seed: int = 3) -> Graph:
    """An undirected random graph whose input self-loops are kept (``self_loops="keep"``).

    About half of the nodes carry a ``v -> v`` edge.
    """
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, 2 * n)
    dst = rng.integers(0, n, 2 * n)
    loops = np.flatnonzero(rng.random(n) < 0.5)
    return _attributed(
        np.concatenate([src, loops]),
        np.concatenate([dst, loops]),
        num_nodes=n,
        name="self_loops",
        seed=seed,
        self_loops="keep",
    )


def directed(n: int = 80, seed: int = 4) -> Graph:
    """A non-symmetric directed graph (``symmetrize=False``): a directed ring plus random arcs.

    Some nodes have in-edges but no out-edges and vice versa.
    """
    rng = np.random.default_rng(seed)
    ids = np.arange(n)
    src = np.concatenate([ids[:-1], rng.integers(0, n, 2 * n)])
    dst = np.concatenate([ids[1:], rng.integers(0, n // 2, 2 * n)])
    return _attributed(src, dst, num_nodes=n, name="directed", seed=seed, symmetrize=False)


def power_law(n: int = 300, avg_deg: float = 4.0, exponent: float = 2.2, seed: int = 5) -> Graph:
    """A Chung-Lu graph with power-law expected degrees (a few hubs, many leaves).

    Endpoints are drawn with probability proportional to ``w_i = (i + 1) ** (-1 / (exponent-1))``
    on a random permutation of the ids, so hubs are scattered over the id range.
    """
    rng = np.random.default_rng(seed)
    w = (np.arange(n) + 1.0) ** (-1.0 / (exponent - 1.0))
    p = rng.permutation(w / w.sum())
    num_pairs = int(n * avg_deg / 2)
    src = rng.choice(n, num_pairs, p=p)
    dst = rng.choice(n, num_pairs, p=p)
    return _attributed(src, dst, num_nodes=n, name="power_law", seed=seed)


def two_cliques_bridge(clique: int = 12, seed: int = 6) -> Graph:
    """Two ``clique``-node cliques joined by a single bridge edge, with interleaved ids.

    Clique A holds the even ids, clique B the odd ids, and the bridge is ``0 - 1``. A good
    partition (METIS) cuts only the bridge, whereas contiguous or random partitions straddle
    both cliques and cut many edges.
    """
    a, b = np.triu_indices(clique, k=1)
    even_src, even_dst = 2 * a, 2 * b
    odd_src, odd_dst = 2 * a + 1, 2 * b + 1
    src = np.concatenate([even_src, odd_src, [0]])
    dst = np.concatenate([even_dst, odd_dst, [1]])
    return _attributed(src, dst, num_nodes=2 * clique, name="two_cliques_bridge", seed=seed)


ALL_CASES: dict[str, Callable[[], Graph]] = {
    "empty_edges": empty_edges,
    "isolated_nodes": isolated_nodes,
    "self_loops": self_loops,
    "directed": directed,
    "power_law": power_law,
    "two_cliques_bridge": two_cliques_bridge,
    "random": functools.partial(random_graph, 120, 6.0, seed=7),
    "random_directed": functools.partial(random_graph, 100, 5.0, seed=8, directed=True),
}
"""Name -> zero-argument factory of every shared test graph."""


def star(leaves: int = 400, seed: int = 7) -> Graph:
    """One hub joined to ``leaves`` leaves: every walk alternates hub, leaf, hub, ..., so the
    hub is in half of all skip-gram pairs and each leaf-hub edge recurs within a walk."""
    src = np.zeros(leaves, np.int64)
    dst = np.arange(1, leaves + 1)
    return _attributed(src, dst, num_nodes=leaves + 1, name="star", seed=seed)


def caterpillar(hubs: int = 8, leaves: int = 60, seed: int = 8) -> Graph:
    """A ring of ``hubs`` hubs, each with ``leaves`` leaves of degree 1: walks bounce on the
    leaf-hub edges and cross between hubs along the ring."""
    ring = np.arange(hubs)
    src = [ring, np.repeat(ring, leaves)]
    dst = [(ring + 1) % hubs, hubs + np.arange(hubs * leaves)]
    return _attributed(
        np.concatenate(src),
        np.concatenate(dst),
        num_nodes=hubs * (leaves + 1),
        name="caterpillar",
        seed=seed,
    )
