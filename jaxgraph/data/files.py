"""Reading a user's own graph file, with its node ids, features, labels and split.

The formats (:data:`GRAPH_FORMATS`): ``"pyg"``, ``"edgelist"`` (any tokens as ids, relabelled
``0..K-1`` in sorted order), ``"scipy"`` (:mod:`~jaxgraph.data.adjacency`:
**``A[dst, src] != 0`` = edge ``src -> dst``**) and ``"ogb"``. Self-loops are removed and
duplicate edges merged; ``directed`` may be left out only when every edge has its reverse (never
for edge lists). The graph comes back with :attr:`Graph.node_ids <jaxgraph.graph.Graph.node_ids>`
set and with notes, one sentence per thing the reader changed or assumed. Every problem raises
:class:`~jaxgraph.data.errors.GraphFileError`, whose message starts with the file's path.

A reader written outside the library joins them with :func:`register_format`; ``read_graph``,
``--graph`` / ``--format`` and a config file's ``data.format`` then reach it by its name, and
:func:`detect_format` by its suffixes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxgraph.configfile import check_new_name
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
    "REGISTERED_FORMATS",
    "GraphReader",
    "RegisteredFormat",
    "detect_format",
    "load_graph_file",
    "random_split_if_missing",
    "read_graph",
    "register_format",
]

GraphReader = Callable[[Path, bool | None, list[str], str], Graph]
"""A format's reader: ``reader(path, directed, notes, name) -> Graph``."""

_READERS = {"pyg": read_pyg, "edgelist": read_edge_list, "scipy": read_scipy_npz, "ogb": read_ogb}
GRAPH_FORMATS = tuple(_READERS)
"""The built-in formats (those of :func:`register_format` are in :data:`REGISTERED_FORMATS`)."""
_BUILTIN_SUFFIXES = (".npz", *EDGE_LIST_SUFFIXES)


class RegisteredFormat(NamedTuple):
    """A format added by :func:`register_format`: its reader and its lower-case suffixes."""

    reader: GraphReader
    suffixes: tuple[str, ...]


REGISTERED_FORMATS: dict[str, RegisteredFormat] = {}
"""The formats added by :func:`register_format`, by name, in the order of registration
(``REGISTERED_FORMATS.pop(name)`` removes one again, as tests do)."""


def register_format(name: str, reader: GraphReader, *, suffixes: tuple[str, ...] = ()) -> None:
    """Adds a graph file format: ``read_graph(path, format=name)`` (so ``--format name`` and a
    config file's ``data.format = name``) then calls ``reader(path, directed, notes, name)``,
    and :func:`detect_format` names it for a file whose suffix is one of ``suffixes``.

    The reader keeps the built-in readers' contract: ``path`` is a :class:`~pathlib.Path` to an
    existing file; ``directed`` is ``True`` (keep directions), ``False`` (add the reverse of
    every edge) or ``None`` (the file's own, refused when the file cannot say); it appends one
    sentence to the list ``notes`` per thing it changed or assumed; ``name`` is the graph's
    name; it returns the :class:`~jaxgraph.graph.Graph` and raises
    :class:`~jaxgraph.data.errors.GraphFileError` with a message starting with the path.
    :func:`jaxgraph.data.assemble.assemble` does the common part (self-loops, duplicates,
    ``directed``, the notes).

    Args:
      name: the format's name, as ``--format`` gives it.
      reader: the function reading one file.
      suffixes: file suffixes such as ``".graph"``, matched in any case; a file ending in one
        of them followed by ``.gz`` is the format too (the reader gets the path as it is:
        :func:`jaxgraph.data.text.read_bytes` and ``read_text`` gunzip).

    Raises:
      ValueError: a name that is taken, a suffix that a built-in or registered format claims,
        or a suffix that is not one dot and a word (``".graph"``; ``".gz"`` is refused).
      TypeError: a reader that is not callable.
    """
    check_new_name("graph format", name, _READERS, REGISTERED_FORMATS, "reader")
    if not callable(reader):
        raise TypeError(f"the reader of graph format {name!r} is not callable: {reader!r}")
    if isinstance(suffixes, str):
        suffixes = (suffixes,)
    claimed = {s: "built in" for s in _BUILTIN_SUFFIXES}
    claimed |= {s: f"format {n!r}" for n, f in REGISTERED_FORMATS.items() for s in f.suffixes}
    own: list[str] = []
    for given in suffixes:
        ext = given.lower() if isinstance(given, str) else given
        single = isinstance(ext, str) and len(ext) > 1 and Path(f"x{ext}").suffix == ext
        if not single or ext == ".gz":
            raise ValueError(
                f"graph format {name!r}: a suffix is a dot and a word such as '.graph' "
                f"(not .gz, which may follow any suffix), got {given!r}"
            )
        if ext in claimed:
            raise ValueError(
                f"graph format {name!r}: suffix {given!r} is already claimed ({claimed[ext]})"
            )
        if ext not in own:
            own.append(ext)
    REGISTERED_FORMATS[name] = RegisteredFormat(reader, tuple(own))


def detect_format(path: str | os.PathLike) -> str:
    """The format of a graph file or directory, one of :data:`GRAPH_FORMATS` or
    :data:`REGISTERED_FORMATS`: ``"ogb"`` for a directory, ``"pyg"`` or ``"scipy"`` for an
    ``.npz`` by its arrays, ``"edgelist"`` for :data:`~jaxgraph.data.edgelist.EDGE_LIST_SUFFIXES`
    (optionally ``.gz``), a registered format for one of its suffixes (optionally ``.gz``).

    Raises:
      GraphFileError: no such path, an unsupported suffix, or content that fits no format.
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
    for name, registered in REGISTERED_FORMATS.items():
        if ext in registered.suffixes:
            return name
    raise GraphFileError(
        f"{path}: unsupported file type {''.join(path.suffixes) or '(no suffix)'!r}; "
        "supported: .npz (PyG or scipy.sparse), edge lists "
        f"{', '.join(EDGE_LIST_SUFFIXES)} (optionally .gz), or an OGB dataset directory"
        + _registered_suffixes()
    )


def _registered_suffixes() -> str:
    """``"; registered formats: metis (.graph, optionally .gz), ..."``, or ``""``."""
    if not REGISTERED_FORMATS:
        return ""
    listed = [
        f"{name} ({', '.join(f.suffixes)}, optionally .gz)" if f.suffixes else f"{name} (by name)"
        for name, f in REGISTERED_FORMATS.items()
    ]
    return f"; registered formats: {', '.join(listed)}"


def read_graph(
    path: str | os.PathLike,
    *,
    format: str | None = None,
    directed: bool | None = None,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    name: str | None = None,
) -> tuple[Graph, list[str]]:
    """Reads a user's graph file: ``(graph, notes)`` (see the module docstring).

    Args:
      format: one of :data:`GRAPH_FORMATS` or :data:`REGISTERED_FORMATS`; default
        :func:`detect_format`.
      directed: ``True`` keeps edge directions, ``False`` adds the reverse of every edge.
      features: optional node features replacing those of the file: a ``.npy`` float array
        with one row per node **in the order of** ``graph.ids``, or a text table (``.csv`` /
        ``.tsv`` / ``.txt``, optionally ``.gz``) of node id and features, one row per node.
      labels: optional node labels replacing those of the file: a text table ``id label``
        (integers, or class names mapped to ``0..C-1`` in sorted order; unlisted nodes get
        ``-1``), or a ``.npy`` integer array in the order of ``graph.ids``.
      name: the graph's name; default the file name without its suffixes.

    Raises:
      GraphFileError: a missing, unreadable or malformed file, an empty graph, ids out of
        range, a missing ``directed``, or features or labels that do not match the nodes.
      TypeError: a registered format's reader returned something other than a ``Graph``.
    """
    path = Path(path)
    if format is None:
        format = detect_format(path)
    elif format not in _READERS and format not in REGISTERED_FORMATS:
        known = (*GRAPH_FORMATS, *REGISTERED_FORMATS)
        raise GraphFileError(
            f"{path}: unknown format {format!r}; expected one of {', '.join(known)}"
        )
    elif not path.exists():
        raise GraphFileError(f"{path}: no such file or directory")
    if format != "ogb" and path.is_dir():
        raise GraphFileError(f"{path}: is a directory, not a {format} file")
    notes: list[str] = []
    name = _stem(path) if name is None else name
    if format in _READERS:
        graph = _READERS[format](path, directed, notes, name)
    else:
        graph = REGISTERED_FORMATS[format].reader(path, directed, notes, name)
        if not isinstance(graph, Graph):
            raise TypeError(
                f"the reader of graph format {format!r} returned a {type(graph).__name__}, "
                "not a jaxgraph.graph.Graph"
            )
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
    without a split gets :func:`random_split_if_missing`'s; the notes go to the ``jaxgraph``
    logger (INFO)."""
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
    """Adds a seeded :func:`~jaxgraph.data.splits.random_split` of the labelled nodes when the
    graph has labels but no split: ``(graph with the masks, note)``, else ``(graph, None)``."""
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
