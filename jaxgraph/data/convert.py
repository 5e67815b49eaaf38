"""Converters between :class:`~jaxgraph.graph.Graph` and networkx or jraph graphs, in memory.

* networkx graphs (:func:`from_networkx`, :func:`to_networkx`), node data as attributes.
* ``jraph.GraphsTuple`` (:func:`to_jraph`, :func:`from_jraph`). jraph 0.0.6.dev0 still calls
  ``jax.tree_map`` / ``jax.tree_leaves``, which the pinned jax no longer has, so a few jraph
  utilities (``jraph.zero_out_padding``, ``jraph.get_fully_connected_graph`` with features) raise
  ``AttributeError``. This module only *constructs* ``jraph.GraphsTuple`` (a ``NamedTuple``)
  and reads its fields; it never calls a jraph utility.

Neither library is imported until a converter runs. Files are read by the format modules
(:mod:`~jaxgraph.data.pyg`, :mod:`~jaxgraph.data.edgelist`, :mod:`~jaxgraph.data.adjacency`).
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


# ---------------------------------------------------------------------- networkx


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
    """Converts a networkx graph (``Graph``, ``DiGraph`` or multigraph).

    Nodes are numbered ``0..N-1`` in ``g.nodes`` iteration order. Parallel edges are merged.

    Args:
      g: the networkx graph.
      symmetrize: default ``not g.is_directed()``: undirected graphs get both directions.
      feature_attr: node attribute holding the feature vector (or scalar); every node must
        have it. ``None``: no features (``F = 0``).
      label_attr: node attribute holding an ``int`` label (nodes without it, or with ``None``,
        get ``-1``) or a multi-label indicator vector (then every node must have it).
      mask_attrs: names of the boolean train / val / test node attributes, read only with
        ``label_attr`` (a mask may only select labelled nodes); a missing attribute reads as
        ``False``.
      self_loops: ``"remove"`` (default) or ``"keep"``.
      return_ids: also return the list of original node keys, ``ids[i]`` = node ``i``.
      name: graph name; default ``g.name`` or ``"graph"``.

    Returns:
      The :class:`Graph`, or ``(graph, ids)`` with ``return_ids``.

    Raises:
      ValueError: the graph has no node, or a node lacks ``feature_attr``.

    Shapes:
      graph with ``N = g.number_of_nodes()`` nodes, ``features: f32[N, F]``.
    """
    nodes = list(g.nodes)
    n = len(nodes)
    if n == 0:
        raise ValueError("empty graph: the networkx graph has no node")
    index = {v: i for i, v in enumerate(nodes)}
    num_e = g.number_of_edges()
    src = np.empty(num_e, np.int64)
    dst = np.empty(num_e, np.int64)
    for k, (u, v) in enumerate(g.edges()):
        src[k] = index[u]
        dst[k] = index[v]
    if symmetrize is None:
        symmetrize = not g.is_directed()
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
    labels = None
    if label_attr is not None:
        values = [attrs[v].get(label_attr) for v in nodes]
        if any(val is not None and np.ndim(val) > 0 for val in values):
            if any(val is None for val in values):
                raise ValueError(f"multi-label attribute {label_attr!r} missing on some nodes")
            labels = np.stack([np.asarray(val, bool) for val in values])
        else:
            labels = np.array([-1 if val is None else int(val) for val in values], np.int32)
    masks = {}
    if label_attr is not None:
        for key, attr in zip(MASK_NAMES, mask_attrs, strict=True):
            masks[key] = np.fromiter((bool(attrs[v].get(attr, False)) for v in nodes), bool, n)
    graph = Graph.from_edges(
        src,
        dst,
        num_nodes=n,
        symmetrize=symmetrize,
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

    Node attributes: ``feature_attr`` (``f32[F]`` array, only when ``F > 0``), ``label_attr``
    (``int`` for single-label graphs, ``bool[C]`` array for multi-label ones) and the three mask
    attributes (``bool``). :func:`from_networkx` with the same attribute names inverts it.

    Args:
      graph: the graph.
      directed: ``True`` -> ``nx.DiGraph`` with every directed edge; ``False`` -> ``nx.Graph``
        (an edge ``u - v`` wherever ``u -> v`` or ``v -> u``); default: ``DiGraph`` unless the
        graph is symmetric.
      feature_attr, label_attr, mask_attrs: attribute names.

    Returns:
      ``networkx.Graph`` or ``networkx.DiGraph``.

    Shapes:
      ``N`` nodes ``0..N-1``; ``E`` edges (``DiGraph``) or ``E / 2`` for a symmetric graph
      without self-loops (``Graph``).
    """
    import networkx as nx

    if directed is None:
        directed = not graph.is_symmetric()
    out = nx.DiGraph() if directed else nx.Graph()
    out.graph["name"] = graph.name
    n = graph.num_nodes
    labels = graph.labels
    label_vals = list(labels) if graph.multi_label else labels.tolist()
    mask_lists = [getattr(graph, key).tolist() for key in MASK_NAMES]
    feats = list(graph.features) if graph.num_features > 0 else None
    node_data = []
    for i in range(n):
        data = {label_attr: label_vals[i]}
        for attr, m in zip(mask_attrs, mask_lists, strict=True):
            data[attr] = m[i]
        if feats is not None:
            data[feature_attr] = feats[i]
        node_data.append((i, data))
    out.add_nodes_from(node_data)
    src, dst = graph.edges()
    out.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    return out


# ---------------------------------------------------------------------- jraph


def to_jraph(graph: Graph) -> jraph.GraphsTuple:
    """Converts to a single-graph ``jraph.GraphsTuple`` of NumPy arrays.

    ``senders`` = sources, ``receivers`` = destinations (:meth:`Graph.edges` order),
    ``nodes`` = features, ``edges = globals = None``. Labels and masks are not part of a
    ``GraphsTuple``; keep them from ``graph``. Use ``jax.tree.map(jnp.asarray, gt)`` to move the
    arrays to a device (``jax.tree_map``-based jraph helpers are broken with this jax, see the
    module docstring).

    Returns:
      ``jraph.GraphsTuple``.

    Shapes:
      ``nodes: f32[N, F]``, ``senders, receivers: int32[E]``, ``n_node: int32[1] = [N]``,
      ``n_edge: int32[1] = [E]``.
    """
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
    """Builds a graph from a ``jraph.GraphsTuple`` (NumPy or JAX arrays).

    A batched ``GraphsTuple`` becomes one graph of ``sum(n_node)`` nodes (jraph's senders and
    receivers already index the concatenated nodes). Padding graphs are kept; strip them first
    if unwanted.

    Args:
      gt: the ``GraphsTuple`` (any object with its fields).
      symmetrize: ``True`` adds reverse edges; must be given explicitly.
      self_loops: ``"remove"`` (default) or ``"keep"``.
      feature_key: when ``gt.nodes`` is a mapping, the key of the feature array.
      labels, train_mask, val_mask, test_mask, name: passed to :class:`Graph`.

    Returns:
      The :class:`Graph`.

    Raises:
      ValueError: ``senders`` / ``receivers`` lengths disagree with ``sum(n_edge)``, or
        ``gt.nodes`` is a mapping and ``feature_key`` is not given / not in it.

    Shapes:
      ``nodes: [sum(n_node), F]`` (or ``None``), ``senders, receivers: int[sum(n_edge)]``.
    """
    num_nodes = int(np.sum(np.asarray(gt.n_node)))
    senders = np.asarray(gt.senders)
    receivers = np.asarray(gt.receivers)
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
    features = None if nodes is None else np.asarray(nodes)
    return Graph.from_edges(
        senders,
        receivers,
        num_nodes=num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name=name,
    )
