"""Converters between :class:`~jaxgraph.graph.Graph` and networkx or jraph graphs, in memory.

Neither library is imported until a converter runs. jraph 0.0.6.dev0 calls ``jax.tree_map``,
which the pinned jax no longer has, so this module only constructs ``jraph.GraphsTuple`` and
reads its fields, never calling a jraph utility.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxgraph.data.assemble import MASK_NAMES
from jaxgraph.graph import Graph, SelfLoops

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    import jraph
    import networkx as nx

__all__ = ["from_jraph", "from_networkx", "to_jraph", "to_networkx"]


def from_networkx(
    g: nx.Graph,
    *,
    symmetrize: bool | None = None,
    feature_attr: str | None = None,
    label_attr: str | None = None,
    mask_attrs: Sequence[str] = MASK_NAMES,
    self_loops: SelfLoops = "remove",
    return_ids: bool = False,
    name: str | None = None,
) -> Graph | tuple[Graph, list]:
    """Converts a networkx graph (``Graph``, ``DiGraph`` or multigraph; parallel edges are
    merged), numbering the nodes ``0..N-1`` in ``g.nodes`` order.

    Args:
      symmetrize: default ``not g.is_directed()``: undirected graphs get both directions.
      feature_attr: node attribute holding the feature vector (or scalar); every node must
        have it. ``None``: no features.
      label_attr: node attribute holding an ``int`` label (nodes without it, or with ``None``,
        get ``-1``) or a multi-label indicator vector (then every node must have it).
      mask_attrs: the boolean train / val / test node attributes (missing: ``False``), read
        only with ``label_attr``.
      return_ids: also return the list of original node keys, ``ids[i]`` = node ``i``.
      name: graph name; default ``g.name`` or ``"graph"``.

    Raises:
      ValueError: the graph has no node, or a node lacks ``feature_attr``.
    """
    nodes = list(g.nodes)
    n = len(nodes)
    if n == 0:
        raise ValueError("empty graph: the networkx graph has no node")
    index = {v: i for i, v in enumerate(nodes)}
    edges = np.array([(index[u], index[v]) for u, v in g.edges()], np.int64).reshape(-1, 2)
    attrs = g.nodes
    features = None
    if feature_attr is not None:
        missing = [v for v in nodes if feature_attr not in attrs[v]]
        if missing:
            raise ValueError(
                f"node {missing[0]!r} has no feature attribute {feature_attr!r} "
                f"({len(missing)} nodes lack it)"
            )
        features = np.stack([np.atleast_1d(np.asarray(attrs[v][feature_attr])) for v in nodes])
        features = features.astype(np.float32)
    labels, masks = None, {}
    if label_attr is not None:
        values = [attrs[v].get(label_attr) for v in nodes]
        if any(val is not None and np.ndim(val) > 0 for val in values):
            if any(val is None for val in values):
                raise ValueError(f"multi-label attribute {label_attr!r} missing on some nodes")
            labels = np.stack([np.asarray(val, bool) for val in values])
        else:
            labels = np.array([-1 if val is None else int(val) for val in values], np.int32)
        for key, attr in zip(MASK_NAMES, mask_attrs, strict=True):
            masks[key] = np.fromiter((bool(attrs[v].get(attr, False)) for v in nodes), bool, n)
    graph = Graph.from_edges(
        edges[:, 0],
        edges[:, 1],
        num_nodes=n,
        symmetrize=not g.is_directed() if symmetrize is None else symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        name=(g.name or "graph") if name is None else name,
        **masks,
    )
    return (graph, nodes) if return_ids else graph


def to_networkx(
    graph: Graph,
    *,
    directed: bool | None = None,
    feature_attr: str = "x",
    label_attr: str = "y",
    mask_attrs: Sequence[str] = MASK_NAMES,
) -> nx.Graph:
    """Converts to networkx with nodes ``0..N-1`` and the node data as attributes.

    Node attributes: ``feature_attr`` (``f32[F]``, only when ``F > 0``), ``label_attr`` (``int``,
    or ``bool[C]`` for multi-label graphs) and the three masks (``bool``); :func:`from_networkx`
    with the same attribute names inverts it. ``directed``: ``True`` gives an ``nx.DiGraph``,
    ``False`` an ``nx.Graph`` (an edge ``u - v`` wherever ``u -> v`` or ``v -> u``); default:
    ``DiGraph`` unless the graph is symmetric.
    """
    import networkx as nx

    if directed is None:
        directed = not graph.is_symmetric()
    out = nx.DiGraph() if directed else nx.Graph()
    out.graph["name"] = graph.name
    label_vals = list(graph.labels) if graph.multi_label else graph.labels.tolist()
    mask_lists = [getattr(graph, key).tolist() for key in MASK_NAMES]
    feats = list(graph.features) if graph.num_features > 0 else None
    for i in range(graph.num_nodes):
        data = {label_attr: label_vals[i]}
        for attr, m in zip(mask_attrs, mask_lists, strict=True):
            data[attr] = m[i]
        if feats is not None:
            data[feature_attr] = feats[i]
        out.add_node(i, **data)
    src, dst = graph.edges()
    out.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    return out


def to_jraph(graph: Graph) -> jraph.GraphsTuple:
    """Converts to a single-graph ``jraph.GraphsTuple`` of NumPy arrays (``senders`` = sources in
    :meth:`Graph.edges` order, ``nodes`` = features, no labels or masks)."""
    import jraph

    src, dst = graph.edges()
    return jraph.GraphsTuple(
        nodes=graph.features,
        edges=None,
        receivers=dst.astype(np.int32),
        senders=src.astype(np.int32),
        globals=None,
        n_node=np.array([graph.num_nodes], np.int32),
        n_edge=np.array([graph.num_edges], np.int32),
    )


def from_jraph(
    gt: Any,
    *,
    symmetrize: bool,
    self_loops: SelfLoops = "remove",
    feature_key: str | None = None,
    labels=None,
    train_mask=None,
    val_mask=None,
    test_mask=None,
    name: str = "graph",
) -> Graph:
    """Builds a graph from a ``jraph.GraphsTuple`` (or any object with its fields; NumPy or JAX
    arrays); a batched one becomes one graph of ``sum(n_node)`` nodes, padding graphs included.
    ``feature_key``: the features' key when ``gt.nodes`` is a mapping.

    Raises:
      ValueError: ``senders`` / ``receivers`` lengths disagree with ``sum(n_edge)``, or
        ``gt.nodes`` is a mapping and ``feature_key`` is not given / not in it.
    """
    num_nodes = int(np.sum(np.asarray(gt.n_node)))
    senders, receivers = np.asarray(gt.senders), np.asarray(gt.receivers)
    num_edges = int(np.sum(np.asarray(gt.n_edge)))
    if senders.shape != (num_edges,) or receivers.shape != (num_edges,):
        raise ValueError(
            f"senders {senders.shape} and receivers {receivers.shape} must both have "
            f"sum(n_edge) = {num_edges} entries"
        )
    nodes = gt.nodes
    if isinstance(nodes, Mapping):
        if feature_key is None or feature_key not in nodes:
            raise ValueError(
                f"gt.nodes is a mapping with keys {sorted(nodes)}; pass feature_key= to pick "
                "the feature array"
            )
        nodes = nodes[feature_key]
    return Graph.from_edges(
        senders,
        receivers,
        num_nodes=num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=None if nodes is None else np.asarray(nodes),
        labels=labels,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name=name,
    )
