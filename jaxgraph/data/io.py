"""Importers and exporters between :class:`~jaxgraph.graph.Graph` and other representations.

Supported representations:

* PyTorch-Geometric-style ``.npz`` files (:func:`from_pyg_npz`, :func:`save_pyg_npz`):
  ``edge_index`` ``int[2, E]`` with row 0 = source and row 1 = destination, optional ``x``,
  ``y``, ``train_mask``, ``val_mask``, ``test_mask`` and ``num_nodes``.
* Text edge lists, one ``src dst`` pair per line (:func:`from_edge_list`).
* SciPy sparse (or dense) adjacency matrices (:func:`from_scipy`). The convention is the one of
  :meth:`Graph.adjacency() <jaxgraph.graph.Graph.adjacency>`: **``A[dst, src] != 0`` means an
  edge ``src -> dst``** (rows are destinations). This is the transpose of the networkx / "row =
  source" convention; pass ``A.T`` for a matrix in that convention.
* networkx graphs (:func:`from_networkx`, :func:`to_networkx`).
* ``jraph.GraphsTuple`` (:func:`to_jraph`, :func:`from_jraph`). jraph 0.0.6.dev0 still calls
  ``jax.tree_map`` / ``jax.tree_leaves``, which the pinned jax no longer has, so a few jraph
  utilities (``jraph.zero_out_padding``, ``jraph.get_fully_connected_graph`` with features) raise
  ``AttributeError``. This module only *constructs* ``jraph.GraphsTuple`` (a ``NamedTuple``)
  and reads its fields; it never calls a jraph utility.

Files that cannot be read (missing, truncated, corrupt, malformed lines) raise
:class:`GraphFileError` (a ``ValueError``) whose message starts with the file path.
"""

from __future__ import annotations

import warnings
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from jaxgraph.atomic import atomic_write
from jaxgraph.graph import Graph, SelfLoops

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    import jraph
    import networkx as nx

__all__ = [
    "GraphFileError",
    "from_edge_list",
    "from_jraph",
    "from_networkx",
    "from_pyg_npz",
    "from_scipy",
    "read_npz",
    "save_pyg_npz",
    "to_jraph",
    "to_networkx",
]

MASK_NAMES = ("train_mask", "val_mask", "test_mask")


def pyg_edge_index(arrays: Mapping[str, np.ndarray], path: Path) -> np.ndarray:
    """The ``edge_index`` of a PyG-style archive, checked: ``int[2, E]``."""
    if "edge_index" not in arrays:
        raise GraphFileError(f"{path}: missing required array 'edge_index' (has {sorted(arrays)})")
    ei = arrays["edge_index"]
    if ei.ndim != 2 or ei.shape[0] != 2 or not np.issubdtype(ei.dtype, np.integer):
        raise GraphFileError(
            f"{path}: 'edge_index' must be an integer array of shape [2, E], "
            f"got {ei.dtype} {ei.shape}"
        )
    return ei


class GraphFileError(ValueError):
    """A graph file is missing pieces, truncated, corrupt or has a malformed line.

    The message always names the file (and the line, for text files).
    """


# ---------------------------------------------------------------------- building


# ---------------------------------------------------------------------- PyG npz


_NPZ_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


def from_pyg_npz(
    path,
    *,
    symmetrize: bool,
    self_loops: SelfLoops = "remove",
    num_nodes: int | None = None,
    name: str | None = None,
) -> Graph:
    """Reads a PyTorch-Geometric-style ``.npz`` file.

    Keys: ``edge_index`` (required, integer ``[2, E]``, row 0 = source, row 1 = destination),
    optional ``x`` (features), ``y`` (``int[N]`` labels with ``-1`` = unlabelled, or ``[N, C]``
    multi-label indicators), ``train_mask`` / ``val_mask`` / ``test_mask`` (``bool[N]``) and
    ``num_nodes`` (scalar). Other keys are ignored. Pickled objects are refused.

    Args:
      path: the ``.npz`` file.
      symmetrize: ``True`` adds reverse edges (undirected graph); must be given explicitly.
      self_loops: ``"remove"`` (default) or ``"keep"`` input self-loops.
      num_nodes: overrides the node count; default: ``num_nodes`` key, else the rows of ``x`` or
        ``y``, else ``max(edge_index) + 1``.
      name: graph name; default the file stem.

    Returns:
      The :class:`Graph`.

    Raises:
      FileNotFoundError: the file does not exist.
      GraphFileError: the file is not a readable npz, is truncated, lacks ``edge_index`` or has
        arrays of inconsistent shapes.

    Shapes:
      ``edge_index: int[2, E]``, ``x: float[N, F]``, ``y: int[N]`` or ``[N, C]``, masks
      ``bool[N]``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"PyG npz file not found: {path}")
    arrays = read_npz(path)
    ei = pyg_edge_index(arrays, path)
    x, y = arrays.get("x"), arrays.get("y")
    if num_nodes is None:
        if "num_nodes" in arrays:
            num_nodes = int(arrays["num_nodes"])
        elif x is not None:
            num_nodes = int(x.shape[0])
        elif y is not None:
            num_nodes = int(y.shape[0])
        else:
            num_nodes = int(ei.max()) + 1 if ei.size else 0
    if x is not None and x.ndim == 1:
        x = x[:, None]
    masks = {}
    for key in MASK_NAMES:
        if key in arrays:
            masks[key] = arrays[key].astype(bool)
    try:
        return Graph.from_edges(
            ei[0],
            ei[1],
            num_nodes=num_nodes,
            symmetrize=symmetrize,
            self_loops=self_loops,
            features=x,
            labels=y,
            name=path.stem if name is None else name,
            **masks,
        )
    except ValueError as exc:
        raise GraphFileError(f"{path}: inconsistent graph arrays: {exc}") from exc


def read_npz(path, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Reads the arrays of an ``.npz`` archive (all, or only ``keys``), refusing pickles.

    Raises:
      GraphFileError: the file is missing, not an ``.npz`` archive (e.g. a single ``.npy``),
        truncated or corrupt, or lacks one of ``keys``.
    """
    path = Path(path)
    try:
        # np.load leaks its file handle when the zip is corrupt; own the handle instead.
        with open(path, "rb") as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise GraphFileError(f"{path}: a single .npy array, not an .npz archive")
            with z:
                missing = [k for k in keys or () if k not in z.files]
                if missing:
                    raise GraphFileError(
                        f"{path}: missing array(s) {missing} (has {sorted(z.files)})"
                    )
                return {k: np.asarray(z[k]) for k in (z.files if keys is None else keys)}
    except FileNotFoundError as exc:
        raise GraphFileError(f"{path}: no such file") from exc
    except GraphFileError:
        raise
    except _NPZ_READ_ERRORS as exc:
        raise GraphFileError(
            f"{path}: cannot read as an .npz archive (truncated or corrupt?): {exc}"
        ) from exc


def save_pyg_npz(graph: Graph, path, *, compressed: bool = True) -> Path:
    """Writes ``graph`` as a PyG-style ``.npz`` readable by :func:`from_pyg_npz`.

    Stores ``edge_index`` (``int64[2, E]``, sources in row 0, in :meth:`Graph.edges` order),
    ``x``, ``y``, the three masks and ``num_nodes``. The file is written atomically (temporary
    file + rename), at exactly ``path`` (no ``.npz`` suffix is appended).

    Args:
      graph: the graph to save.
      path: destination file.
      compressed: use ``np.savez_compressed`` (default) or ``np.savez``.

    Returns:
      The path written.

    Shapes:
      ``edge_index: int64[2, E]``, ``x: f32[N, F]``, ``y: int32[N]`` or ``bool[N, C]``.
    """
    path = Path(path)
    src, dst = graph.edges()
    arrays = dict(
        edge_index=np.stack([src, dst]).astype(np.int64),
        x=graph.features,
        y=graph.labels,
        train_mask=graph.train_mask,
        val_mask=graph.val_mask,
        test_mask=graph.test_mask,
        num_nodes=np.int64(graph.num_nodes),
    )
    save = np.savez_compressed if compressed else np.savez
    atomic_write(path, lambda f: save(f, **arrays))
    return path


# ---------------------------------------------------------------------- edge lists


def from_edge_list(
    path,
    *,
    symmetrize: bool,
    num_nodes: int | None = None,
    comments: str | None = "#",
    delimiter: str | None = None,
    relabel: bool = False,
    return_ids: bool = False,
    self_loops: SelfLoops = "remove",
    name: str | None = None,
) -> Graph | tuple[Graph, np.ndarray]:
    """Reads a text edge list: one ``src dst`` pair per line.

    Blank lines and everything after ``comments`` are ignored; columns after the second
    (weights, timestamps) are ignored.

    Args:
      path: the text file.
      symmetrize: ``True`` adds reverse edges (undirected graph); must be given explicitly.
      num_nodes: node count; default ``max id + 1`` (or the number of distinct ids with
        ``relabel``). Must cover every id.
      comments: comment prefix (``None`` for none).
      delimiter: column separator; ``None`` = any whitespace.
      relabel: map the distinct ids, sorted, to ``0..K-1``. Ids may then be any tokens: they
        are sorted numerically when all are integers, else as strings.
      return_ids: also return the original id of every node (``relabel`` only; without it the
        ids are ``arange(N)``). With ``relabel`` (and no extra nodes from ``num_nodes``) the
        graph's :attr:`~jaxgraph.graph.Graph.node_ids` hold them too.
      self_loops: ``"remove"`` (default) or ``"keep"``.
      name: graph name; default the file stem.

    Returns:
      The :class:`Graph`, or ``(graph, ids)`` with ``return_ids``.

    Raises:
      FileNotFoundError: the file does not exist.
      GraphFileError: a line is not a pair of integer ids (the message names file and line),
        an id is negative or ``>= num_nodes``, the file is not text, or it holds no edge and
        ``num_nodes`` is not given.

    Shapes:
      ``ids: int64[N]`` (or ``str[N]`` for non-integer tokens).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"edge list file not found: {path}")
    dtype = str if relabel else np.int64
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*input contained no data")
            pairs = np.loadtxt(
                path,
                dtype=dtype,
                comments=comments,
                delimiter=delimiter,
                usecols=(0, 1),
                ndmin=2,
                encoding="utf-8",
            )
    except (ValueError, IndexError) as exc:
        raise _bad_line_error(path, comments, delimiter, relabel, exc) from exc
    src, dst = pairs[:, 0], pairs[:, 1]
    ids = None
    if relabel:
        tokens = np.concatenate([src, dst])
        try:
            tokens = tokens.astype(np.int64)
        except ValueError:
            pass
        ids, inverse = np.unique(tokens, return_inverse=True)
        src, dst = inverse[: src.shape[0]], inverse[src.shape[0] :]
        inferred = int(ids.shape[0])
    else:
        inferred = int(max(src.max(), dst.max())) + 1 if src.size else 0
        if src.size and min(src.min(), dst.min()) < 0:
            row = int(np.flatnonzero((src < 0) | (dst < 0))[0])
            line = _data_line_number(path, comments, row)
            raise GraphFileError(f"{path}, line {line}: negative node id")
    if num_nodes is None:
        if inferred == 0:
            raise GraphFileError(f"{path}: no edges found and num_nodes not given")
        num_nodes = inferred
    elif inferred > num_nodes:
        if relabel:
            raise GraphFileError(
                f"{path}: {inferred} distinct node ids but num_nodes = {num_nodes}"
            )
        row = int(np.flatnonzero((src >= num_nodes) | (dst >= num_nodes))[0])
        line = _data_line_number(path, comments, row)
        raise GraphFileError(f"{path}, line {line}: node id >= num_nodes = {num_nodes}")
    graph = Graph.from_edges(
        src,
        dst,
        num_nodes=num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        name=path.stem if name is None else name,
        node_ids=ids if ids is not None and ids.shape[0] == num_nodes else None,
    )
    if return_ids:
        if ids is None:
            ids = np.arange(num_nodes, dtype=np.int64)
        return graph, ids
    return graph


def _iter_data_lines(path: Path, comments: str | None):
    """Yields ``(line_number, stripped_content)`` of the non-blank, non-comment lines."""
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if comments:
                    line = line.split(comments, 1)[0]
                line = line.strip()
                if line:
                    yield lineno, line
    except UnicodeDecodeError as exc:
        raise GraphFileError(f"{path}: not a UTF-8 text edge list ({exc})") from exc


def _data_line_number(path: Path, comments: str | None, row: int) -> int:
    for k, (lineno, _) in enumerate(_iter_data_lines(path, comments)):
        if k == row:
            return lineno
    return -1  # pragma: no cover - row always exists


def _bad_line_error(path, comments, delimiter, relabel, exc) -> GraphFileError:
    """Locates the first malformed line after ``np.loadtxt`` failed (error path only)."""
    try:
        for lineno, line in _iter_data_lines(path, comments):
            fields = line.split(delimiter) if delimiter is not None else line.split()
            fields = [t.strip() for t in fields]
            if len(fields) < 2 or not fields[0] or not fields[1]:
                return GraphFileError(
                    f"{path}, line {lineno}: expected two node ids 'src dst', got {line!r}"
                )
            if not relabel:
                for tok in fields[:2]:
                    try:
                        int(tok)
                    except ValueError:
                        return GraphFileError(
                            f"{path}, line {lineno}: {tok!r} is not an integer node id "
                            f"(line {line!r})"
                        )
    except GraphFileError as err:
        return err
    return GraphFileError(f"{path}: cannot parse edge list: {exc}")


# ---------------------------------------------------------------------- scipy


def from_scipy(
    matrix,
    *,
    symmetrize: bool,
    self_loops: SelfLoops = "remove",
    features=None,
    labels=None,
    train_mask=None,
    val_mask=None,
    test_mask=None,
    name: str = "graph",
) -> Graph:
    """Builds a graph from an adjacency matrix with **``A[dst, src] != 0`` = edge ``src -> dst``**.

    This is the convention of :meth:`Graph.adjacency`, so ``from_scipy(g.adjacency(),
    symmetrize=False, self_loops="keep")`` reproduces ``g``'s edges. For a matrix in the
    networkx / "row = source" convention (``A[src, dst]``), pass its transpose. Values are
    ignored except that explicitly stored zeros are not edges.

    Args:
      matrix: square SciPy sparse matrix / array, or a dense 2-D array.
      symmetrize: ``True`` adds reverse edges (undirected graph); must be given explicitly.
      self_loops: ``"remove"`` (default) or ``"keep"`` diagonal entries.
      features, labels, train_mask, val_mask, test_mask, name: passed to :class:`Graph`.

    Returns:
      The :class:`Graph`.

    Raises:
      ValueError: the matrix is not square or 2-D.

    Shapes:
      ``matrix: [N, N]`` -> graph with ``N`` nodes.
    """
    if not sp.issparse(matrix):
        matrix = np.asarray(matrix)
        if matrix.ndim != 2:
            raise ValueError(f"adjacency matrix must be 2-D, got shape {matrix.shape}")
    if matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"adjacency matrix must be square, got shape {matrix.shape}")
    coo = sp.coo_array(matrix)
    nz = coo.data != 0
    return Graph.from_edges(
        coo.col[nz],
        coo.row[nz],
        num_nodes=matrix.shape[0],
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name=name,
    )


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
