"""Node features and labels from files beside a user's graph: a ``.npy`` array (one row per
node, in the order of ``graph.ids``) or a text table whose first column is the node id
(``.csv`` / ``.tsv`` / ``.txt``, optionally ``.gz``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxgraph.data.errors import GraphFileError
from jaxgraph.data.npz import load_npy
from jaxgraph.data.text import (
    as_int,
    bad_line,
    comment_out,
    fields,
    line_of_row,
    loadtxt,
    parses,
    read_table,
    suffix,
)
from jaxgraph.graph import Graph

__all__ = ["TABLE_SUFFIXES", "attach_features", "attach_labels"]

TABLE_SUFFIXES = (".csv", ".tsv", ".txt")
_TABLE_HEADER_WORDS = frozenset("id node node_id nodeid name vertex index idx".split())


def attach_features(graph: Graph, path: Path, graph_path: Path, notes: list[str]) -> Graph:
    """``graph`` with the features of ``path`` (``graph_path``: the graph's file, for notes)."""
    ids, n = graph.ids, graph.num_nodes
    if _is_npy(path, "features"):
        x = load_npy(path)
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
        x32, bad = _float32(x)
        if bad is not None:
            r, c, count = bad
            raise GraphFileError(
                f"{path}: features[{r}, {c}] = {x[r, c]} (node {ids[r].item()!r}) is not a "
                f"finite float32 ({count} such values)"
            )
    else:
        x32 = _read_feature_table(path, graph, notes)
    if graph.num_features:
        notes.append(f"replaced the features stored in {graph_path.name} by {path.name}")
    return graph.replace(features=x32)


def _is_npy(path: Path, what: str) -> bool:
    """Whether ``path`` is a ``.npy`` array (else a table; anything else raises)."""
    ext, gz = suffix(path)
    if ext in TABLE_SUFFIXES or (ext == ".npy" and not gz):
        return ext == ".npy"
    raise GraphFileError(
        f"{path}: unsupported {what} file; expected .npy or a table "
        f"{', '.join(TABLE_SUFFIXES)} (optionally .gz)"
    )


def _read_feature_table(path: Path, graph: Graph, notes: list[str]) -> np.ndarray:
    text, delimiter, first = read_table(path, "empty features table")
    cols = fields(first[2], delimiter)
    ncols = len(cols)
    if ncols < 2:
        raise GraphFileError(
            f"{path}, line {first[0]}: expected a node id and at least one feature, "
            f"got {first[2]!r}"
        )
    if not any(parses(t, float) for t in cols[1:]):
        notes.append(f"skipped the header line {first[0]} of {path.name}: {first[2]!r}")
        text = comment_out(text, first)
    expect = f"a node id and {ncols - 1} features"
    try:
        keys = loadtxt(text, str, delimiter, (0,))[:, 0]
        values = loadtxt(text, np.float64, delimiter, tuple(range(1, ncols)))
    except ValueError as exc:
        raise bad_line(path, text, delimiter, ncols, float, expect, exc, first=1) from exc
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
    values32, bad = _float32(values)
    if bad is not None:
        r, c, count = bad
        raise GraphFileError(
            f"{path}, line {line_of_row(text, r)}: value {values[r, c]} in column {c + 2} "
            f"(node {str(keys[r]).strip()!r}) is not a finite float32 ({count} such values)"
        )
    x = np.empty((graph.num_nodes, ncols - 1), np.float32)
    x[rows] = values32
    return x


def attach_labels(graph: Graph, path: Path, graph_path: Path, notes: list[str]) -> Graph:
    """``graph`` with the labels of ``path``; nodes a table does not list get ``-1``."""
    ids, n = graph.ids, graph.num_nodes
    if _is_npy(path, "labels"):
        y = load_npy(path)
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
    else:
        y = _read_label_table(path, graph, notes)
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
    text, delimiter, first = read_table(path, "empty labels table")
    cols = fields(first[2], delimiter)
    if len(cols) < 2:
        raise GraphFileError(
            f"{path}, line {first[0]}: expected a node id and a label, got {first[2]!r}"
        )
    if cols[0].lower() in _TABLE_HEADER_WORDS and not np.isin(cols[0], graph.ids.astype(str)):
        notes.append(f"skipped the header line {first[0]} of {path.name}: {first[2]!r}")
        text = comment_out(text, first)
    if len(cols) > 2:
        notes.append(f"ignored the columns after the second in {path.name}")
    try:
        tokens = loadtxt(text, str, delimiter, (0, 1))
    except ValueError as exc:
        raise bad_line(path, text, delimiter, 2, None, "a node id and a label", exc) from exc
    if tokens.shape[0] == 0:
        raise GraphFileError(f"{path}: empty labels table")
    tokens = np.char.strip(tokens)
    rows = _rows_of_ids(path, text, graph, tokens[:, 0])
    raw = tokens[:, 1]
    values = as_int(raw)
    ints = None if values is not None else np.array([parses(t, int) for t in raw.tolist()], bool)
    if values is not None:
        low = np.flatnonzero(values < -1)
        if low.size:
            r = int(low[0])
            raise GraphFileError(
                f"{path}, line {line_of_row(text, r)}: label {values[r]} is below -1 "
                "(-1 = unlabelled)"
            )
    elif not ints.any():
        classes, values = np.unique(raw, return_inverse=True)
        values = values.reshape(-1)
        shown = ", ".join(f"{c!r}={i}" for i, c in enumerate(classes[:10].tolist()))
        more = f", ... ({classes.size} classes)" if classes.size > 10 else ""
        notes.append(f"mapped the classes of {path.name} to ids in sorted order: {shown}{more}")
    else:
        i, s = int(np.flatnonzero(ints)[0]), int(np.flatnonzero(~ints)[0])
        raise GraphFileError(
            f"{path}: labels mix integers (line {line_of_row(text, i)}: {str(raw[i])!r}) and "
            f"class names (line {line_of_row(text, s)}: {str(raw[s])!r}); use one kind"
        )
    y = np.full(graph.num_nodes, -1, np.int32)
    y[rows] = values
    return y


def _rows_of_ids(path: Path, text: str, graph: Graph, keys) -> np.ndarray:
    """Node index of every table row, keyed by the graph's ids (line-numbered errors)."""
    ids = graph.ids
    keys = np.char.strip(np.asarray(keys, str))
    if ids.dtype.kind in "iu":
        numbers = as_int(keys)
        if numbers is None:
            r = next(i for i, k in enumerate(keys.tolist()) if not parses(k, int))
            raise GraphFileError(
                f"{path}, line {line_of_row(text, r)}: {str(keys[r])!r} is not an integer node id "
                "(the graph's node ids are integers)"
            )
        keys = numbers
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, keys), ids.shape[0] - 1)
    found = sorted_ids[pos] == keys
    if not found.all():
        bad = np.flatnonzero(~found)
        raise GraphFileError(
            f"{path}, line {line_of_row(text, int(bad[0]))}: {bad.size} ids are not nodes "
            f"of the graph, e.g. {_few(keys[bad])}"
        )
    rows = order[pos]
    counts = np.bincount(rows, minlength=graph.num_nodes)
    if counts.max(initial=0) > 1:
        v = int(np.flatnonzero(counts > 1)[0])
        at = np.flatnonzero(rows == v)[:2]
        lines = " and ".join(str(line_of_row(text, int(r))) for r in at)
        raise GraphFileError(
            f"{path}: node {ids[v].item()!r} is listed {counts[v]} times (lines {lines})"
        )
    return rows


def _float32(values: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int] | None]:
    """``values`` as ``float32`` and, if one is not finite there, ``(row, column, count)`` of
    the first such entry and of all of them."""
    x32 = values.astype(np.float32)
    bad = np.argwhere(~np.isfinite(x32))
    if not bad.size:
        return x32, None
    return x32, (int(bad[0, 0]), int(bad[0, 1]), int(bad.shape[0]))


def _few(values, k: int = 3) -> str:
    values = list(np.asarray(values).tolist())
    shown = ", ".join(repr(v) for v in values[:k])
    return shown + (", ..." if len(values) > k else "")
