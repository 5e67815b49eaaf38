"""Reading a user's own graph file, with its node ids, features, labels and split.

:func:`read_graph` reads one of :data:`GRAPH_FORMATS`, found by :func:`detect_format`:

* ``"pyg"``: a PyTorch-Geometric-style ``.npz`` (``edge_index`` ``int[2, E]``, row 0 = source;
  optional ``x``, ``y``, ``train_mask`` / ``val_mask`` / ``test_mask``, ``num_nodes``), as
  :func:`jaxgraph.data.io.from_pyg_npz` reads it. Node ids ``0..N-1``.
* ``"edgelist"``: a text edge list ``.txt``, ``.csv``, ``.tsv``, ``.edges`` or ``.el``, each
  optionally gzip-compressed (``.gz``). One ``src dst`` pair per line, separated by a comma
  (``.csv``), a tab (``.tsv``) or any whitespace (the others); ``#`` and ``%`` start a comment;
  columns after the second (weights, timestamps) are ignored. Node ids are any tokens: integers
  (sorted numerically) or strings (sorted as strings), relabelled to ``0..K-1`` in sorted
  order. A first line naming the columns (``src,dst``) is skipped. Whether the edges are directed
  must be given.
* ``"scipy"``: a ``scipy.sparse.save_npz`` file holding the adjacency matrix, read with this
  repository's convention **``A[dst, src] != 0`` = edge ``src -> dst``** (see
  :func:`jaxgraph.data.io.from_scipy`); values are ignored. Node ids ``0..N-1``.
* ``"ogb"``: a directory in the layout the ``ogb`` package writes for node-property prediction
  (e.g. ``ogbn-arxiv/``): ``raw/edge.csv.gz`` (``src,dst`` per line, no header), optional
  ``raw/num-node-list.csv.gz``, ``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz`` (an empty
  or ``nan`` label = unlabelled) and ``split/<name>/{train,valid,test}.csv.gz`` (node indices).
  Nothing is downloaded and the ``ogb`` package is not needed. Node ids ``0..N-1``.

For every format except edge lists, ``directed`` may be left out when every edge has its reverse
(the graph is then undirected); otherwise it must be given. ``directed=False`` adds the reverse
of every edge. Self-loops are removed and duplicate edges merged.

The graph comes back with :attr:`Graph.node_ids <jaxgraph.graph.Graph.node_ids>` set, so that
results can be written keyed by the user's ids, and with a list of notes: one short sentence per
thing the reader changed or assumed, e.g. ``"removed 3 self-loops from edges.tsv"``. Every
problem raises :class:`~jaxgraph.data.io.GraphFileError` (a ``ValueError``) whose message starts
with the path of the offending file (and ``, line N`` for text files) and names the problem.
"""

from __future__ import annotations

import gzip
import logging
import os
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgraph.data.datasets import random_split
from jaxgraph.data.io import MASK_NAMES, GraphFileError, pyg_edge_index, read_npz
from jaxgraph.graph import Graph

__all__ = [
    "GRAPH_FORMATS",
    "detect_format",
    "random_split_if_missing",
    "read_graph",
]

GRAPH_FORMATS = ("pyg", "edgelist", "scipy", "ogb")
EDGE_LIST_SUFFIXES = (".txt", ".csv", ".tsv", ".edges", ".el")
TABLE_SUFFIXES = (".csv", ".tsv", ".txt")

_COMMENTS = ("#", "%")
# A first line whose two tokens are both column names is a header, not an edge.
_EDGE_HEADER_WORDS = frozenset(
    "src dst source target from to head tail node1 node2 node_1 node_2 id1 id2 "
    "src_id dst_id source_id target_id".split()
)
_TABLE_HEADER_WORDS = frozenset("id node node_id nodeid name vertex index idx".split())
_NPZ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
_OGB_SPLIT_FILES = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))


# ---------------------------------------------------------------------- public API


def detect_format(path: str | os.PathLike) -> str:
    """Returns the format of a graph file or directory, one of :data:`GRAPH_FORMATS`.

    A directory is ``"ogb"`` (it must hold ``raw/edge.csv.gz``); an ``.npz`` is ``"pyg"`` when it
    has ``edge_index`` and ``"scipy"`` when it has ``format`` and ``shape``; ``.txt``, ``.csv``,
    ``.tsv``, ``.edges`` and ``.el`` (optionally ``.gz``) are ``"edgelist"``.

    Raises:
      GraphFileError: the path does not exist, a directory lacks ``raw/edge.csv.gz``, an
        ``.npz`` is unreadable or has neither set of keys, or the suffix is not supported.
    """
    path = Path(path)
    if path.is_dir():
        _check_ogb_dir(path)
        return "ogb"
    if not path.exists():
        raise GraphFileError(f"{path}: no such file or directory")
    ext, gz = _suffix(path)
    if ext == ".npz" and not gz:
        keys = _npz_keys(path)
        if "edge_index" in keys:
            return "pyg"
        if {"format", "shape"} <= keys:
            return "scipy"
        raise GraphFileError(
            f"{path}: an .npz with arrays {sorted(keys)}; expected 'edge_index' (PyG) or "
            "'format' and 'shape' (scipy.sparse.save_npz)"
        )
    if ext in EDGE_LIST_SUFFIXES:
        return "edgelist"
    raise GraphFileError(
        f"{path}: unsupported file type {''.join(path.suffixes) or '(no suffix)'!r}; "
        "supported: .npz (PyG or scipy.sparse), edge lists "
        f"{', '.join(EDGE_LIST_SUFFIXES)} (optionally .gz), or an OGB dataset directory"
    )


def read_graph(
    path: str | os.PathLike,
    *,
    format: str | None = None,
    directed: bool | None = None,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    name: str | None = None,
) -> tuple[Graph, list[str]]:
    """Reads a user's graph file (see the module docstring for the formats).

    Args:
      path: the file, or the dataset directory for ``"ogb"``.
      format: one of :data:`GRAPH_FORMATS`; default :func:`detect_format`.
      directed: ``True`` keeps edge directions, ``False`` makes the graph undirected (adds the
        reverse of every edge). Required for edge lists; for the other formats it may be left
        out when every edge has its reverse.
      features: optional node features replacing those of the file: a ``.npy`` float array
        with one row per node **in the order of** ``graph.ids`` (sorted ids for an edge list),
        or a text table (``.csv`` / ``.tsv`` / ``.txt``, optionally ``.gz``) whose first column
        is the node id and the others the features; every node needs exactly one row.
      labels: optional node labels replacing those of the file: a text table ``id label``
        (integer labels, or class names mapped to ``0..C-1`` in sorted order; nodes it does not
        list get ``-1``, unlabelled), or a ``.npy`` integer array in the order of ``graph.ids``
        (``-1`` = unlabelled).
      name: the graph's name; default the file name without its suffixes.

    Returns:
      ``(graph, notes)``: the :class:`Graph` with ``node_ids`` set, and the notes (human-readable
      sentences, in the order the reader made them) on what it changed or assumed.

    Raises:
      GraphFileError: a missing, unreadable, truncated, corrupt or malformed file; an empty
        graph; ids out of range; a missing ``directed``; features or labels that do not match
        the nodes. The message starts with the offending file's path.

    Shapes:
      ``graph.features: f32[N, F]``, ``graph.labels: int32[N]`` (or ``bool[N, C]``),
      ``graph.node_ids: int64[N]`` or ``str[N]``.
    """
    path = Path(path)
    if format is None:
        format = detect_format(path)
    elif format not in GRAPH_FORMATS:
        raise GraphFileError(
            f"{path}: unknown format {format!r}; expected one of {', '.join(GRAPH_FORMATS)}"
        )
    elif not path.exists():
        raise GraphFileError(f"{path}: no such file or directory")
    if format != "ogb" and path.is_dir():
        raise GraphFileError(f"{path}: is a directory, not a {format} file")
    notes: list[str] = []
    name = _stem(path) if name is None else name
    if format == "pyg":
        graph = _read_pyg(path, directed, notes, name)
    elif format == "edgelist":
        graph = _read_edge_list(path, directed, notes, name)
    elif format == "scipy":
        graph = _read_scipy(path, directed, notes, name)
    else:
        graph = _read_ogb(path, directed, notes, name)
    if features is not None:
        graph = _attach_features(graph, Path(features), path, notes)
    if labels is not None:
        graph = _attach_labels(graph, Path(labels), path, notes)
    return graph, notes


def load_graph_file(
    path: str | os.PathLike,
    *,
    format: str | None = None,
    directed: bool | None = None,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    split_seed: int | None = None,
) -> Graph:
    """:func:`read_graph` as a run reads a user's file: with ``split_seed``, a labelled graph
    without a split gets :func:`random_split_if_missing`'s; every note of what reading changed
    or assumed goes to the ``jaxgraph`` logger (INFO).

    Raises:
      GraphFileError: as :func:`read_graph`.
    """
    graph, notes = read_graph(
        path, format=format, directed=directed, features=features, labels=labels
    )
    if split_seed is not None:
        graph, note = random_split_if_missing(graph, seed=split_seed)
        notes = [*notes, note] if note else notes
    for note in notes:
        logging.getLogger("jaxgraph").info("%s", note)
    return graph


def random_split_if_missing(
    graph: Graph,
    *,
    seed: int,
    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> tuple[Graph, str | None]:
    """Adds a seeded random train / val / test split when the graph has labels but no split.

    The split is :func:`jaxgraph.data.datasets.random_split` over the labelled nodes.

    Args:
      graph: the graph.
      seed: the split's seed.
      fractions: train, val and test fractions of the labelled nodes.

    Returns:
      ``(graph with the masks, note)`` when a split was made, else ``(graph, None)`` (no
      labelled node, or at least one mask already selects a node).
    """
    labelled = graph.num_nodes if graph.multi_label else int(np.count_nonzero(graph.labels >= 0))
    has_split = graph.train_mask.any() or graph.val_mask.any() or graph.test_mask.any()
    if labelled == 0 or has_split:
        return graph, None
    train, val, test = random_split(graph.labels, fractions, seed=seed)
    shares = "/".join(f"{100 * f:g}" for f in fractions)
    note = (
        f"no split in the file: made a seeded random {shares} split of the {labelled} "
        f"labelled nodes (seed {seed})"
    )
    return graph.replace(train_mask=train, val_mask=val, test_mask=test), note


# ---------------------------------------------------------------------- formats


def _read_pyg(path: Path, directed, notes: list[str], name: str) -> Graph:
    arrays = read_npz(path)
    ei = pyg_edge_index(arrays, path)
    x, y = arrays.get("x"), arrays.get("y")
    if "num_nodes" in arrays:
        num_nodes, source = int(arrays["num_nodes"]), "'num_nodes'"
    elif x is not None:
        num_nodes, source = int(x.shape[0]), "the rows of 'x'"
    elif y is not None:
        num_nodes, source = int(y.shape[0]), "the rows of 'y'"
    else:
        num_nodes, source = (int(ei.max()) + 1 if ei.size else 0), "max(edge_index) + 1"
    if ei.size:
        neg = np.argwhere(ei < 0)
        if neg.size:
            r, c = (int(v) for v in neg[0])
            raise GraphFileError(
                f"{path}: edge_index[{r}, {c}] = {int(ei[r, c])} is a negative node id "
                f"({neg.shape[0]} negative entries)"
            )
        big = np.argwhere(ei >= num_nodes)
        if big.size:
            r, c = (int(v) for v in big[0])
            raise GraphFileError(
                f"{path}: edge_index[{r}, {c}] = {int(ei[r, c])} is out of range for "
                f"{num_nodes} nodes (from {source}; {big.shape[0]} entries out of range)"
            )
    if y is not None and y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
        notes.append(f"read 'y' of shape [N, 1] in {path.name} as one class per node")
    known = {"edge_index", "x", "y", "num_nodes", *MASK_NAMES}
    ignored = sorted(set(arrays) - known)
    if ignored:
        notes.append(f"ignored the arrays {', '.join(ignored)} of {path.name}")
    masks = {k: arrays[k].astype(bool) for k in MASK_NAMES if k in arrays}
    data = dict(features=x, labels=y, **masks)
    ids = np.arange(num_nodes)
    return _assemble(path, ei[0], ei[1], num_nodes, directed, notes, name, ids, **data)


def _read_edge_list(path: Path, directed, notes: list[str], name: str) -> Graph:
    if directed is None:
        raise GraphFileError(
            f"{path}: an edge list does not say whether its edges are directed: pass "
            "directed=True or directed=False (--directed or --undirected)"
        )
    text = _read_text(path)
    delimiter = _delimiter(path)
    first = next(_data_lines(text), None)
    if first is None:
        raise GraphFileError(f"{path}: empty edge list (no edges, no nodes)")
    ncols = len(_fields(first[2], delimiter))
    if ncols < 2:
        raise GraphFileError(
            f"{path}, line {first[0]}: expected two node ids 'src dst', got {first[2]!r}"
        )
    try:
        tokens = _loadtxt(text, str, delimiter, (0, 1))
    except ValueError as exc:
        raise _bad_line(path, text, delimiter, 2, None, "two node ids 'src dst'", exc) from exc
    if delimiter is not None:
        tokens = np.char.strip(tokens)
    empty = np.flatnonzero((tokens == "").any(axis=1))
    if empty.size:
        line = _line_of_row(text, int(empty[0]))
        raise GraphFileError(f"{path}, line {line}: empty node id")
    ints = _as_int(tokens)
    if ints is None:
        header_words = {t.lower() for t in tokens[0]} <= _EDGE_HEADER_WORDS
        rest = _as_int(tokens[1:]) if tokens.shape[0] > 1 else None
        if header_words or rest is not None:
            notes.append(f"skipped the header line {first[0]} of {path.name}: {first[2]!r}")
            tokens, ints = tokens[1:], rest
            if tokens.shape[0] == 0:
                raise GraphFileError(f"{path}: empty edge list (only a header line)")
    if ncols > 2:
        extra = "a third column" if ncols == 3 else f"columns 3 to {ncols}"
        notes.append(f"ignored {extra} (weights?) in {path.name}")
    values = tokens if ints is None else ints
    m = values.shape[0]
    ids, inverse = np.unique(np.concatenate([values[:, 0], values[:, 1]]), return_inverse=True)
    inverse = inverse.reshape(-1)
    return _assemble(path, inverse[:m], inverse[m:], ids.shape[0], directed, notes, name, ids)


def _read_scipy(path: Path, directed, notes: list[str], name: str) -> Graph:
    try:
        with open(path, "rb") as f:
            matrix = sp.load_npz(f)
    except _NPZ_ERRORS as exc:
        raise GraphFileError(
            f"{path}: cannot read as a scipy.sparse .npz (truncated or corrupt?): {exc!r}"
        ) from exc
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise GraphFileError(f"{path}: the adjacency matrix must be square, got {matrix.shape}")
    coo = sp.coo_array(matrix)
    nz = coo.data != 0
    if np.any(coo.data[nz] != 1):
        notes.append(f"ignored the values of {path.name}: every non-zero entry is one edge")
    n = int(matrix.shape[0])
    graph = _assemble(path, coo.col[nz], coo.row[nz], n, directed, notes, name, np.arange(n))
    if not graph.is_symmetric():
        notes.append(f"read A[dst, src] != 0 in {path.name} as an edge src -> dst")
    return graph


def _read_ogb(path: Path, directed, notes: list[str], name: str) -> Graph:
    _check_ogb_dir(path)
    raw = path / "raw"
    edge_file = raw / "edge.csv.gz"
    edges = _read_numeric(edge_file, np.int64, "two node indices 'src,dst'", ncols=2)
    used = {"edge.csv.gz"}
    sizes = []
    num_nodes = None
    if (raw / "num-node-list.csv.gz").is_file():
        used.add("num-node-list.csv.gz")
        counts = _read_numeric(raw / "num-node-list.csv.gz", np.int64, "a node count", ncols=1)
        if counts.shape[0] != 1:
            raise GraphFileError(
                f"{raw / 'num-node-list.csv.gz'}: {counts.shape[0]} graphs; only single-graph "
                "(node-property prediction) datasets are supported"
            )
        num_nodes = int(counts[0, 0])
        sizes.append(("raw/num-node-list.csv.gz", num_nodes))
    x = None
    if (raw / "node-feat.csv.gz").is_file():
        used.add("node-feat.csv.gz")
        x = _read_numeric(raw / "node-feat.csv.gz", np.float64, "comma-separated floats")
        sizes.append(("raw/node-feat.csv.gz", x.shape[0]))
    y = None
    if (raw / "node-label.csv.gz").is_file():
        used.add("node-label.csv.gz")
        y = _read_ogb_labels(raw / "node-label.csv.gz")
        sizes.append(("raw/node-label.csv.gz", y.shape[0]))
    for what, rows in sizes:
        if rows != sizes[0][1]:
            raise GraphFileError(
                f"{path / what}: {rows} rows but {sizes[0][0]} says {sizes[0][1]} nodes"
            )
    if sizes:
        num_nodes = sizes[0][1]
    elif edges.size:
        num_nodes = int(edges.max()) + 1
    else:
        num_nodes = 0
    if edges.size:
        bad = np.flatnonzero(((edges < 0) | (edges >= num_nodes)).any(axis=1))
        if bad.size:
            row = int(bad[0])
            raise GraphFileError(
                f"{edge_file}, line {_line_of_row(_read_text(edge_file), row)}: "
                f"{edges[row].tolist()} holds a node index outside [0, {num_nodes}) "
                f"({bad.size} such edges)"
            )
    ignored = sorted(p.name for p in raw.iterdir() if p.name not in used)
    if ignored:
        notes.append(f"ignored {', '.join(ignored)} in {raw}")
    masks = _read_ogb_split(path, num_nodes, y, notes)
    src, dst, ids = edges[:, 0], edges[:, 1], np.arange(num_nodes)
    data = dict(features=x, labels=y, **masks)
    return _assemble(edge_file, src, dst, num_nodes, directed, notes, name, ids, **data)


def _read_ogb_labels(path: Path) -> np.ndarray:
    """``int32[N]`` (or ``bool[N, C]`` for several tasks); an empty or ``nan`` entry -> ``-1``.

    Read line by line rather than with ``np.loadtxt``: an unlabelled node of a one-column file
    is an empty line, which ``loadtxt`` would skip.
    """
    lines = _read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return np.zeros(0, np.int32)
    rows = [line.strip().split(",") for line in lines]
    width = len(rows[0])
    for i, r in enumerate(rows):
        if len(r) != width:
            raise GraphFileError(
                f"{path}, line {i + 1}: {len(r)} columns, expected {width} like line 1"
            )
    tokens = np.char.lower(np.char.strip(np.array(rows, dtype=str)))
    missing = (tokens == "") | (tokens == "nan")
    try:
        values = np.where(missing, "nan", tokens).astype(np.float64)
    except ValueError:
        for i, r in enumerate(rows):
            for tok in r:
                try:
                    float(tok or "nan")
                except ValueError:
                    raise GraphFileError(
                        f"{path}, line {i + 1}: {tok!r} is not a label (an integer, or empty "
                        "for unlabelled)"
                    ) from None
        raise  # pragma: no cover - some token failed above
    frac = np.flatnonzero((~missing & (values != np.round(values))).any(axis=1))
    if frac.size:
        i = int(frac[0])
        raise GraphFileError(f"{path}, line {i + 1}: {lines[i]!r} is not an integer label")
    if width == 1:
        return np.where(missing[:, 0], -1, values[:, 0]).astype(np.int32)
    return np.where(missing, 0, values) > 0


def _read_ogb_split(path: Path, n: int, y, notes: list[str]) -> dict[str, np.ndarray]:
    split_root = path / "split"
    if not split_root.is_dir():
        return {}
    names = sorted(d.name for d in split_root.iterdir() if d.is_dir())
    if not names:
        return {}
    if len(names) > 1:
        notes.append(f"used the split {names[0]!r} of {split_root}; ignored {names[1:]}")
    masks = {}
    for stem, key in _OGB_SPLIT_FILES:
        f = split_root / names[0] / f"{stem}.csv.gz"
        if not f.is_file():
            raise GraphFileError(f"{f}: missing ({stem} nodes of the split {names[0]!r})")
        idx = _read_numeric(f, np.int64, "one node index per line", ncols=1)[:, 0]
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            line = _line_of_row(_read_text(f), int(bad[0]))
            raise GraphFileError(
                f"{f}, line {line}: node index {int(idx[bad[0]])} is outside [0, {n}) "
                f"({bad.size} such indices)"
            )
        if y is not None and y.ndim == 1:
            unlabelled = np.flatnonzero(y[idx] < 0)
            if unlabelled.size:
                line = _line_of_row(_read_text(f), int(unlabelled[0]))
                raise GraphFileError(
                    f"{f}, line {line}: node {int(idx[unlabelled[0]])} has no label in "
                    f"raw/node-label.csv.gz ({unlabelled.size} unlabelled nodes in the split)"
                )
        elif y is None:
            notes.append(f"ignored the split {names[0]!r} of {path.name}: it has no node labels")
            return {}
        m = np.zeros(n, bool)
        m[idx] = True
        masks[key] = m
    return masks


def _check_ogb_dir(path: Path) -> None:
    if (path / "raw" / "edge.csv.gz").is_file():
        return
    missing = "raw/edge.csv.gz" if (path / "raw").is_dir() else "raw/ (and raw/edge.csv.gz)"
    hint = ""
    if path.is_dir():
        inner = sorted(d.name for d in path.iterdir() if (d / "raw" / "edge.csv.gz").is_file())
        if inner:
            hint = f"; did you mean the dataset directory {path / inner[0]}?"
    raise GraphFileError(
        f"{path}: not an OGB dataset directory: missing {missing} (the layout is raw/edge.csv.gz "
        f"with optional raw/node-feat.csv.gz, raw/node-label.csv.gz, split/<name>/){hint}"
    )


# ---------------------------------------------------------------------- assembling


def _assemble(
    path: Path,
    src,
    dst,
    num_nodes: int,
    directed: bool | None,
    notes: list[str],
    name: str,
    node_ids,
    **data,
) -> Graph:
    """Builds the graph from in-range edges: removes self-loops, merges duplicates, symmetrizes.

    ``directed=None`` is allowed only when every edge has its reverse (the graph is then read as
    undirected). ``data``: ``features``, ``labels`` and the masks, passed to :class:`Graph`.
    """
    if num_nodes <= 0:
        raise GraphFileError(f"{path}: empty graph (no nodes, no edges)")
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    loops = int(np.count_nonzero(src == dst))
    if loops:
        notes.append(f"removed {_plural(loops, 'self-loop')} from {path.name}")
    try:
        graph = Graph.from_edges(
            src, dst, num_nodes=num_nodes, symmetrize=False, name=name, node_ids=node_ids, **data
        )
    except ValueError as exc:
        raise GraphFileError(f"{path}: {exc}") from exc
    duplicates = src.shape[0] - loops - graph.num_edges
    if duplicates:
        notes.append(f"merged {_plural(duplicates, 'duplicate edge')} in {path.name}")
    if graph.num_edges == 0:
        notes.append(f"{path.name} has no edge besides self-loops: the nodes are isolated")
    symmetric = graph.is_symmetric()
    if directed is None:
        if not symmetric:
            raise GraphFileError(
                f"{path}: some edges have no reverse, so the file does not say whether the "
                "graph is directed: pass directed=True (--directed) or directed=False "
                "(--undirected, adds the reverse edges)"
            )
        if graph.num_edges:
            notes.append(f"read {path.name} as undirected: every edge has its reverse")
    elif not directed and not symmetric:
        sym = Graph.from_edges(*graph.edges(), num_nodes=num_nodes, symmetrize=True)
        added = sym.num_edges - graph.num_edges
        notes.append(
            f"added the reverse of {_plural(added, 'edge')} (undirected): "
            f"{sym.num_edges} directed edges in all"
        )
        graph = graph.replace(indptr=sym.indptr, indices=sym.indices)
    return graph


def _attach_features(graph: Graph, path: Path, graph_path: Path, notes: list[str]) -> Graph:
    ids, n = graph.ids, graph.num_nodes
    ext, gz = _suffix(path)
    if ext == ".npy" and not gz:
        x = _load_npy(path)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.dtype.kind not in "biuf":
            raise GraphFileError(
                f"{path}: features must be a 2-D numeric array [N, F], got {x.dtype} {x.shape}"
            )
        if x.shape[0] != n:
            raise GraphFileError(
                f"{path}: {x.shape[0]} feature rows but the graph has {n} nodes (one row per "
                "node, in the order of the graph's node ids)"
            )
        x32 = x.astype(np.float32)
        bad = np.argwhere(~np.isfinite(x32))
        if bad.size:
            r, c = (int(v) for v in bad[0])
            raise GraphFileError(
                f"{path}: features[{r}, {c}] = {x[r, c]} (node {ids[r].item()!r}) is not a "
                f"finite float32 ({bad.shape[0]} such values)"
            )
    elif ext in TABLE_SUFFIXES:
        x32 = _read_feature_table(path, graph, notes)
    else:
        raise GraphFileError(
            f"{path}: unsupported features file; expected .npy or a table "
            f"{', '.join(TABLE_SUFFIXES)} (optionally .gz)"
        )
    if graph.num_features:
        notes.append(f"replaced the features stored in {graph_path.name} by {path.name}")
    return graph.replace(features=x32)


def _read_feature_table(path: Path, graph: Graph, notes: list[str]) -> np.ndarray:
    text = _read_text(path)
    delimiter = _delimiter(path)
    first = next(_data_lines(text), None)
    if first is None:
        raise GraphFileError(f"{path}: empty features table")
    fields = _fields(first[2], delimiter)
    ncols = len(fields)
    if ncols < 2:
        raise GraphFileError(
            f"{path}, line {first[0]}: expected a node id and at least one feature, "
            f"got {first[2]!r}"
        )
    if not any(_is_float(t) for t in fields[1:]):
        notes.append(f"skipped the header line {first[0]} of {path.name}: {first[2]!r}")
        text = _comment_out(text, first)
    expect = f"a node id and {ncols - 1} features"
    try:
        keys = _loadtxt(text, str, delimiter, (0,))[:, 0]
        values = _loadtxt(text, np.float64, delimiter, tuple(range(1, ncols)))
    except ValueError as exc:
        raise _bad_line(path, text, delimiter, ncols, float, expect, exc, first=1) from exc
    if keys.shape[0] == 0:
        raise GraphFileError(f"{path}: empty features table")
    rows = _rows_of_ids(path, text, graph, keys)
    covered = np.zeros(graph.num_nodes, bool)
    covered[rows] = True
    if not covered.all():
        missing = np.flatnonzero(~covered)
        raise GraphFileError(
            f"{path}: no features for {missing.size} of {graph.num_nodes} nodes, e.g. "
            f"{_few(graph.ids[missing])}"
        )
    values32 = values.astype(np.float32)
    bad = np.argwhere(~np.isfinite(values32))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise GraphFileError(
            f"{path}, line {_line_of_row(text, r)}: value {values[r, c]} in column {c + 2} "
            f"(node {str(keys[r]).strip()!r}) is not a finite float32 ({bad.shape[0]} such values)"
        )
    x = np.empty((graph.num_nodes, ncols - 1), np.float32)
    x[rows] = values32
    return x


def _attach_labels(graph: Graph, path: Path, graph_path: Path, notes: list[str]) -> Graph:
    ids, n = graph.ids, graph.num_nodes
    ext, gz = _suffix(path)
    if ext == ".npy" and not gz:
        y = _load_npy(path)
        if y.ndim != 1 or y.shape[0] != n:
            raise GraphFileError(
                f"{path}: labels must be a 1-D array with one entry per node ({n}, in the order "
                f"of the graph's node ids), got shape {y.shape}"
            )
        if y.dtype.kind == "f":
            frac = np.flatnonzero(np.isfinite(y) & (y != np.round(y)))
            if frac.size:
                i = int(frac[0])
                raise GraphFileError(
                    f"{path}: labels[{i}] = {y[i]} (node {ids[i].item()!r}) is not an integer"
                )
            y = np.where(np.isnan(y), -1, y)
        elif y.dtype.kind not in "iu":
            raise GraphFileError(f"{path}: labels must be integers, got dtype {y.dtype}")
        if y.size and y.min() < -1:
            i = int(np.argmin(y))
            raise GraphFileError(
                f"{path}: labels[{i}] = {y[i]} (node {ids[i].item()!r}) is below -1 "
                "(-1 = unlabelled)"
            )
        y = y.astype(np.int32)
    elif ext in TABLE_SUFFIXES:
        y = _read_label_table(path, graph, notes)
    else:
        raise GraphFileError(
            f"{path}: unsupported labels file; expected .npy or a table "
            f"{', '.join(TABLE_SUFFIXES)} (optionally .gz)"
        )
    unlabelled = int(np.count_nonzero(y < 0))
    if unlabelled:
        notes.append(
            f"set the label of {unlabelled} of {n} nodes to -1 (unlabelled): "
            f"{path.name} gives them none"
        )
    if graph.multi_label or np.any(graph.labels >= 0):
        notes.append(f"replaced the labels stored in {graph_path.name} by {path.name}")
    try:
        return graph.replace(labels=y)
    except ValueError as exc:  # a mask of the graph file selects a node without a label
        raise GraphFileError(f"{path}: {exc} (the split comes from {graph_path})") from exc


def _read_label_table(path: Path, graph: Graph, notes: list[str]) -> np.ndarray:
    text = _read_text(path)
    delimiter = _delimiter(path)
    first = next(_data_lines(text), None)
    if first is None:
        raise GraphFileError(f"{path}: empty labels table")
    fields = _fields(first[2], delimiter)
    if len(fields) < 2:
        raise GraphFileError(
            f"{path}, line {first[0]}: expected a node id and a label, got {first[2]!r}"
        )
    if fields[0].lower() in _TABLE_HEADER_WORDS and not np.isin(fields[0], graph.ids.astype(str)):
        notes.append(f"skipped the header line {first[0]} of {path.name}: {first[2]!r}")
        text = _comment_out(text, first)
    if len(fields) > 2:
        notes.append(f"ignored the columns after the second in {path.name}")
    try:
        tokens = _loadtxt(text, str, delimiter, (0, 1))
    except ValueError as exc:
        raise _bad_line(path, text, delimiter, 2, None, "a node id and a label", exc) from exc
    if tokens.shape[0] == 0:
        raise GraphFileError(f"{path}: empty labels table")
    tokens = np.char.strip(tokens)
    rows = _rows_of_ids(path, text, graph, tokens[:, 0])
    raw = tokens[:, 1]
    values = _as_int(raw)
    is_int = None if values is not None else np.array([_is_int(t) for t in raw.tolist()], bool)
    if values is not None:
        low = np.flatnonzero(values < -1)
        if low.size:
            r = int(low[0])
            raise GraphFileError(
                f"{path}, line {_line_of_row(text, r)}: label {values[r]} is below -1 "
                "(-1 = unlabelled)"
            )
    elif not is_int.any():
        classes, values = np.unique(raw, return_inverse=True)
        values = values.reshape(-1)
        shown = ", ".join(f"{c!r}={i}" for i, c in enumerate(classes[:10].tolist()))
        more = f", ... ({classes.size} classes)" if classes.size > 10 else ""
        notes.append(f"mapped the classes of {path.name} to ids in sorted order: {shown}{more}")
    else:
        i, s = int(np.flatnonzero(is_int)[0]), int(np.flatnonzero(~is_int)[0])
        raise GraphFileError(
            f"{path}: labels mix integers (line {_line_of_row(text, i)}: {str(raw[i])!r}) and "
            f"class names (line {_line_of_row(text, s)}: {str(raw[s])!r}); use one kind"
        )
    y = np.full(graph.num_nodes, -1, np.int32)
    y[rows] = values
    return y


# ---------------------------------------------------------------------- text helpers


def _read_text(path: Path) -> str:
    """The file's text, gunzipped when it starts with the gzip magic bytes."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise GraphFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise GraphFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise GraphFileError(f"{path}: truncated or corrupt gzip data ({exc})") from exc
    elif data and path.suffix.lower() == ".gz":
        raise GraphFileError(f"{path}: named .gz but not gzip-compressed")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise GraphFileError(
            f"{path}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); a binary file?"
        ) from exc


def _data_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """``(line number, offset, content)`` of the lines with data, as ``np.loadtxt`` sees them."""
    offset = 0
    for lineno, line in enumerate(StringIO(text), start=1):
        cut = min((i for i in (line.find(c) for c in _COMMENTS) if i >= 0), default=len(line))
        content = line[:cut].strip()
        if content:
            yield lineno, offset, content
        offset += len(line)


def _line_of_row(text: str, row: int) -> int:
    for k, (lineno, _, _) in enumerate(_data_lines(text)):
        if k == row:
            return lineno
    return -1  # pragma: no cover - the row always exists


def _comment_out(text: str, line: tuple[int, int, str]) -> str:
    return text[: line[1]] + _COMMENTS[0] + text[line[1] :]


def _loadtxt(text: str, dtype, delimiter: str | None, usecols: tuple[int, ...]) -> np.ndarray:
    with warnings.catch_warnings():
        # An empty input or a comment-only line makes np.loadtxt warn; both are handled here.
        warnings.filterwarnings("ignore", message=".*contained no data", category=UserWarning)
        return np.loadtxt(
            StringIO(text),
            dtype=dtype,
            comments=_COMMENTS,
            delimiter=delimiter,
            usecols=usecols,
            ndmin=2,
        )


def _read_numeric(path: Path, dtype, expect: str, ncols: int | None = None) -> np.ndarray:
    """A comma-separated numeric table (OGB files), ``[R, C]``, with line-numbered errors."""
    text = _read_text(path)
    first = next(_data_lines(text), None)
    if first is None:
        return np.zeros((0, ncols or 0), dtype)
    width = len(_fields(first[2], ","))
    if ncols is not None and width != ncols:
        raise GraphFileError(f"{path}, line {first[0]}: expected {expect}, got {first[2]!r}")
    parse = int if np.issubdtype(dtype, np.integer) else float
    try:
        return _loadtxt(text, dtype, ",", tuple(range(width)))
    except ValueError as exc:
        raise _bad_line(path, text, ",", width, parse, expect, exc) from exc


def _bad_line(path, text, delimiter, ncols, parse, expect, exc, first=0) -> GraphFileError:
    """Locates the first malformed line after ``np.loadtxt`` failed (error path only).

    A line is malformed when it has fewer than ``ncols`` fields, an empty one, or a field from
    column ``first`` on that ``parse`` (``int``, ``float`` or ``None``) rejects.
    """
    for lineno, _, content in _data_lines(text):
        fields = _fields(content, delimiter)
        if len(fields) < ncols or any(not f for f in fields[:ncols]):
            return GraphFileError(f"{path}, line {lineno}: expected {expect}, got {content!r}")
        if parse is not None:
            for tok in fields[first:ncols]:
                try:
                    parse(tok)
                except ValueError:
                    kind = "an integer" if parse is int else "a number"
                    return GraphFileError(
                        f"{path}, line {lineno}: {tok!r} is not {kind} (expected {expect})"
                    )
    return GraphFileError(f"{path}: cannot parse ({exc})")


def _rows_of_ids(path: Path, text: str, graph: Graph, keys) -> np.ndarray:
    """Node index of every table row, keyed by the graph's ids (line-numbered errors)."""
    ids = graph.ids
    keys = np.char.strip(np.asarray(keys, str))
    if ids.dtype.kind in "iu":
        as_int = _as_int(keys)
        if as_int is None:
            r = next(i for i, k in enumerate(keys.tolist()) if not _is_int(k))
            raise GraphFileError(
                f"{path}, line {_line_of_row(text, r)}: {str(keys[r])!r} is not an integer node id "
                "(the graph's node ids are integers)"
            )
        keys = as_int
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, keys), ids.shape[0] - 1)
    found = sorted_ids[pos] == keys
    if not found.all():
        bad = np.flatnonzero(~found)
        raise GraphFileError(
            f"{path}, line {_line_of_row(text, int(bad[0]))}: {bad.size} ids are not nodes "
            f"of the graph, e.g. {_few(keys[bad])}"
        )
    rows = order[pos]
    counts = np.bincount(rows, minlength=graph.num_nodes)
    if counts.max(initial=0) > 1:
        v = int(np.flatnonzero(counts > 1)[0])
        at = np.flatnonzero(rows == v)[:2]
        lines = " and ".join(str(_line_of_row(text, int(r))) for r in at)
        raise GraphFileError(
            f"{path}: node {ids[v].item()!r} is listed {counts[v]} times (lines {lines})"
        )
    return rows


def _fields(content: str, delimiter: str | None) -> list[str]:
    parts = content.split(delimiter) if delimiter is not None else content.split()
    return [p.strip() for p in parts]


def _delimiter(path: Path) -> str | None:
    ext, _ = _suffix(path)
    return {".csv": ",", ".tsv": "\t"}.get(ext)


def _suffix(path: Path) -> tuple[str, bool]:
    """``(lower-case suffix without .gz, whether it ends in .gz)``."""
    name = path.name.lower()
    gz = name.endswith(".gz")
    return Path(name[:-3] if gz else name).suffix, gz


def _stem(path: Path) -> str:
    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    return Path(name).stem if not path.is_dir() else path.name


def _is_int(token: str) -> bool:
    try:
        int(token)
    except ValueError:
        return False
    return True


def _is_float(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _as_int(tokens: np.ndarray) -> np.ndarray | None:
    try:
        return tokens.astype(np.int64)
    except (ValueError, OverflowError):
        return None


def _few(values, k: int = 3) -> str:
    values = list(np.asarray(values).tolist())
    shown = ", ".join(repr(v) for v in values[:k])
    return shown + (", ..." if len(values) > k else "")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------------- binary helpers


def _npz_keys(path: Path) -> set[str]:
    try:
        with open(path, "rb") as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise GraphFileError(f"{path}: a single .npy array, not an .npz archive")
            with z:
                return set(z.files)
    except GraphFileError:
        raise
    except _NPZ_ERRORS as exc:
        raise GraphFileError(
            f"{path}: cannot read as an .npz archive (truncated or corrupt?): {exc}"
        ) from exc


def _load_npy(path: Path) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            arr = np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise GraphFileError(f"{path}: no such file") from None
    except _NPZ_ERRORS as exc:
        raise GraphFileError(f"{path}: cannot read as a .npy array ({exc})") from exc
    if not isinstance(arr, np.ndarray):
        raise GraphFileError(f"{path}: an .npz archive, expected a single .npy array")
    return arr
