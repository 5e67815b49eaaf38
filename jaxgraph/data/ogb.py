"""OGB node-property-prediction directories, read without the ``ogb`` package or a download.

The layout (e.g. ``ogbn-arxiv/``): ``raw/edge.csv.gz`` (``src,dst`` per line, no header),
optional ``raw/num-node-list.csv.gz``, ``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz`` (an
empty or ``nan`` label = unlabelled) and ``split/<name>/{train,valid,test}.csv.gz`` (node
indices).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxgraph.data.assemble import assemble
from jaxgraph.data.errors import GraphFileError
from jaxgraph.data.text import bad_line, data_lines, fields, line_of_row, loadtxt, read_text
from jaxgraph.graph import Graph

__all__ = ["check_ogb_dir", "read_ogb"]

_SPLIT_FILES = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))


def read_ogb(path: Path, directed, notes: list[str], name: str) -> Graph:
    """The ``"ogb"`` format of :func:`jaxgraph.data.read_graph`: node count, features, labels
    and the first split of the directory ``path``; appends to ``notes``."""
    check_ogb_dir(path)
    raw = path / "raw"
    edge_file = raw / "edge.csv.gz"
    edges = _read_numeric(edge_file, np.int64, "two node indices 'src,dst'", ncols=2)
    used = {"edge.csv.gz"}
    sizes = []
    if (raw / "num-node-list.csv.gz").is_file():
        used.add("num-node-list.csv.gz")
        counts = _read_numeric(raw / "num-node-list.csv.gz", np.int64, "a node count", ncols=1)
        if counts.shape[0] != 1:
            raise GraphFileError(
                f"{raw / 'num-node-list.csv.gz'}: {counts.shape[0]} graphs; only single-graph "
                "(node-property prediction) datasets are supported"
            )
        sizes.append(("raw/num-node-list.csv.gz", int(counts[0, 0])))
    x = None
    if (raw / "node-feat.csv.gz").is_file():
        used.add("node-feat.csv.gz")
        x = _read_numeric(raw / "node-feat.csv.gz", np.float64, "comma-separated floats")
        sizes.append(("raw/node-feat.csv.gz", x.shape[0]))
    y = None
    if (raw / "node-label.csv.gz").is_file():
        used.add("node-label.csv.gz")
        y = _read_labels(raw / "node-label.csv.gz")
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
                f"{edge_file}, line {line_of_row(read_text(edge_file), row)}: "
                f"{edges[row].tolist()} holds a node index outside [0, {num_nodes}) "
                f"({bad.size} such edges)"
            )
    ignored = sorted(p.name for p in raw.iterdir() if p.name not in used)
    if ignored:
        notes.append(f"ignored {', '.join(ignored)} in {raw}")
    masks = _read_split(path, num_nodes, y, notes)
    src, dst, ids = edges[:, 0], edges[:, 1], np.arange(num_nodes)
    data = dict(features=x, labels=y, **masks)
    return assemble(edge_file, src, dst, num_nodes, directed, notes, name, ids, **data)


def _read_labels(path: Path) -> np.ndarray:
    """``int32[N]`` (or ``bool[N, C]`` for several tasks); an empty or ``nan`` entry -> ``-1``.
    Not read with ``np.loadtxt``, which would skip the empty line of an unlabelled node."""
    lines = read_text(path).split("\n")
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


def _read_split(path: Path, n: int, y, notes: list[str]) -> dict[str, np.ndarray]:
    root = path / "split"
    names = sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    if not names:
        return {}
    if len(names) > 1:
        notes.append(f"used the split {names[0]!r} of {root}; ignored {names[1:]}")
    masks = {}
    for stem, key in _SPLIT_FILES:
        f = root / names[0] / f"{stem}.csv.gz"
        if not f.is_file():
            raise GraphFileError(f"{f}: missing ({stem} nodes of the split {names[0]!r})")
        idx = _read_numeric(f, np.int64, "one node index per line", ncols=1)[:, 0]
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            line = line_of_row(read_text(f), int(bad[0]))
            raise GraphFileError(
                f"{f}, line {line}: node index {int(idx[bad[0]])} is outside [0, {n}) "
                f"({bad.size} such indices)"
            )
        if y is not None and y.ndim == 1:
            unlabelled = np.flatnonzero(y[idx] < 0)
            if unlabelled.size:
                line = line_of_row(read_text(f), int(unlabelled[0]))
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


def check_ogb_dir(path: Path) -> None:
    """Raises :class:`GraphFileError` unless ``path`` holds ``raw/edge.csv.gz``."""
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


def _read_numeric(path: Path, dtype, expect: str, ncols: int | None = None) -> np.ndarray:
    """A comma-separated numeric table (OGB files), ``[R, C]``, with line-numbered errors."""
    text = read_text(path)
    first = next(data_lines(text), None)
    if first is None:
        return np.zeros((0, ncols or 0), dtype)
    width = len(fields(first[2], ","))
    if ncols is not None and width != ncols:
        raise GraphFileError(f"{path}, line {first[0]}: expected {expect}, got {first[2]!r}")
    parse = int if np.issubdtype(dtype, np.integer) else float
    try:
        return loadtxt(text, dtype, ",", tuple(range(width)))
    except ValueError as exc:
        raise bad_line(path, text, ",", width, parse, expect, exc) from exc
