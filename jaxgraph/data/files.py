"""Reading a user's own graph file, with its node ids, features, labels and split.

:func:`read_graph` reads one of :data:`GRAPH_FORMATS`, found by :func:`detect_format`, with the
format's reader: ``"pyg"`` (:mod:`~jaxgraph.data.pyg`), ``"edgelist"``
(:mod:`~jaxgraph.data.edgelist`; ``.txt``, ``.csv``, ``.tsv``, ``.edges``, ``.el``, each
optionally ``.gz``), ``"scipy"`` (:mod:`~jaxgraph.data.adjacency`: **``A[dst, src] != 0`` =
edge ``src -> dst``**) or ``"ogb"`` (:mod:`~jaxgraph.data.ogb`); features and labels from files
beside it come from :mod:`~jaxgraph.data.nodedata`. Edge-list ids are any tokens, relabelled
to ``0..K-1`` in sorted order; the other formats number the nodes ``0..N-1``.

For every format except edge lists, ``directed`` may be left out when every edge has its reverse
(the graph is then undirected); otherwise it must be given. ``directed=False`` adds the reverse
of every edge. Self-loops are removed and duplicate edges merged.

The graph comes back with :attr:`Graph.node_ids <jaxgraph.graph.Graph.node_ids>` set, so that
results can be written keyed by the user's ids, and with a list of notes: one short sentence per
thing the reader changed or assumed, e.g. ``"removed 3 self-loops from edges.tsv"``. Every
problem raises :class:`~jaxgraph.data.errors.GraphFileError` (a ``ValueError``) whose message
starts with the path of the offending file (and ``, line N`` for text files) and names the
problem. :func:`load_graph_file` is the same read as a run does it, with a split if missing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from jaxgraph.data.adjacency import read_scipy_npz
from jaxgraph.data.edgelist import EDGE_LIST_SUFFIXES, read_edge_list
from jaxgraph.data.errors import GraphFileError
from jaxgraph.data.nodedata import attach_features, attach_labels
from jaxgraph.data.npz import npz_keys
from jaxgraph.data.ogb import check_ogb_dir, read_ogb
from jaxgraph.data.pyg import read_pyg
from jaxgraph.data.splits import random_split
from jaxgraph.data.text import suffix
from jaxgraph.graph import Graph

__all__ = [
    "GRAPH_FORMATS",
    "detect_format",
    "load_graph_file",
    "random_split_if_missing",
    "read_graph",
]

GRAPH_FORMATS = ("pyg", "edgelist", "scipy", "ogb")


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
        check_ogb_dir(path)
        return "ogb"
    if not path.exists():
        raise GraphFileError(f"{path}: no such file or directory")
    ext, gz = suffix(path)
    if ext == ".npz" and not gz:
        keys = npz_keys(path)
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
        graph = read_pyg(path, directed, notes, name)
    elif format == "edgelist":
        graph = read_edge_list(path, directed, notes, name)
    elif format == "scipy":
        graph = read_scipy_npz(path, directed, notes, name)
    else:
        graph = read_ogb(path, directed, notes, name)
    if features is not None:
        graph = attach_features(graph, Path(features), path, notes)
    if labels is not None:
        graph = attach_labels(graph, Path(labels), path, notes)
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

    The split is :func:`jaxgraph.data.splits.random_split` over the labelled nodes.

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


def _stem(path: Path) -> str:
    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    return Path(name).stem if not path.is_dir() else path.name
