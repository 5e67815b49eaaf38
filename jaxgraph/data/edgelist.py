"""Text edge lists, one ``src dst`` pair per line: :func:`from_edge_list` converts a file as
told; :func:`read_edge_list` is the ``"edgelist"`` format of :func:`jaxgraph.data.read_graph`
(delimiter from the suffix, ``#`` and ``%`` comments, a header line skipped, any tokens as ids).
"""

from __future__ import annotations

import bz2
import lzma
from pathlib import Path

import numpy as np

from jaxgraph.data.assemble import assemble
from jaxgraph.data.errors import GraphFileError
from jaxgraph.data.text import (
    as_int,
    bad_line,
    fields,
    first_bad_line,
    line_of_row,
    loadtxt,
    read_bytes,
    read_table,
)
from jaxgraph.graph import Graph, SelfLoops

__all__ = ["EDGE_LIST_SUFFIXES", "from_edge_list", "index_pairs", "read_edge_list"]

EDGE_LIST_SUFFIXES = (".txt", ".csv", ".tsv", ".edges", ".el")

_PAIR = "two node ids 'src dst'"
_DECOMPRESS = {".bz2": bz2.decompress, ".xz": lzma.decompress, ".lzma": lzma.decompress}
# A first line whose two tokens are both column names is a header, not an edge.
_EDGE_HEADER_WORDS = frozenset(
    "src dst source target from to head tail node1 node2 node_1 node_2 id1 id2 "
    "src_id dst_id source_id target_id".split()
)


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
    """Reads a text edge list: one ``src dst`` pair per line (blank lines, comments and
    columns after the second are ignored).

    Args:
      symmetrize: ``True`` adds reverse edges (undirected graph); must be given explicitly.
      num_nodes: node count; default ``max id + 1`` (or the number of distinct ids with
        ``relabel``). Must cover every id.
      comments: comment prefix (``None`` for none).
      delimiter: column separator; ``None`` = any whitespace.
      relabel: map the distinct ids, sorted (numerically when all are integers), to
        ``0..K-1``; ids may then be any tokens.
      return_ids: also return the original id of every node (``arange(N)`` without
        ``relabel``); with ``relabel`` the graph's ``node_ids`` hold them too (unless
        ``num_nodes`` adds nodes).
      name: graph name; default the file stem.

    Raises:
      FileNotFoundError: the file does not exist.
      GraphFileError: a line is not a pair of integer ids, an id is negative or ``>=
        num_nodes``, the file is not text, or it holds no edge and ``num_nodes`` is not given.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"edge list file not found: {path}")
    marks = (comments,) if comments else ()
    text = _read_text(path)
    try:
        pairs = loadtxt(text, str if relabel else np.int64, delimiter, (0, 1), marks)
    except (ValueError, IndexError) as exc:
        raise _pair_error(path, text, delimiter, marks, relabel, exc) from exc
    src, dst = pairs[:, 0], pairs[:, 1]
    ids = None
    if relabel:
        values = as_int(pairs)
        ids, src, dst = index_pairs(pairs if values is None else values)
        inferred = int(ids.shape[0])
    else:
        inferred = int(max(src.max(), dst.max())) + 1 if src.size else 0
        if src.size and min(src.min(), dst.min()) < 0:
            line = line_of_row(text, int(np.flatnonzero((src < 0) | (dst < 0))[0]), marks)
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
        line = line_of_row(text, row, marks)
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


def read_edge_list(path: Path, directed, notes: list[str], name: str) -> Graph:
    """The ``"edgelist"`` format of :func:`jaxgraph.data.read_graph` (``directed`` required);
    appends to ``notes``."""
    if directed is None:
        raise GraphFileError(
            f"{path}: an edge list does not say whether its edges are directed: pass "
            "directed=True or directed=False (--directed or --undirected)"
        )
    text, delimiter, first = read_table(path, "empty edge list (no edges, no nodes)")
    ncols = len(fields(first[2], delimiter))
    if ncols < 2:
        raise GraphFileError(f"{path}, line {first[0]}: expected {_PAIR}, got {first[2]!r}")
    try:
        tokens = loadtxt(text, str, delimiter, (0, 1))
    except ValueError as exc:
        raise bad_line(path, text, delimiter, 2, None, _PAIR, exc) from exc
    if delimiter is not None:
        tokens = np.char.strip(tokens)
    empty = np.flatnonzero((tokens == "").any(axis=1))
    if empty.size:
        line = line_of_row(text, int(empty[0]))
        raise GraphFileError(f"{path}, line {line}: empty node id")
    ints = as_int(tokens)
    if ints is None:
        header_words = {t.lower() for t in tokens[0]} <= _EDGE_HEADER_WORDS
        rest = as_int(tokens[1:]) if tokens.shape[0] > 1 else None
        if header_words or rest is not None:
            notes.append(f"skipped the header line {first[0]} of {path.name}: {first[2]!r}")
            tokens, ints = tokens[1:], rest
            if tokens.shape[0] == 0:
                raise GraphFileError(f"{path}: empty edge list (only a header line)")
    if ncols > 2:
        extra = "a third column" if ncols == 3 else f"columns 3 to {ncols}"
        notes.append(f"ignored {extra} (weights?) in {path.name}")
    ids, src, dst = index_pairs(tokens if ints is None else ints)
    return assemble(path, src, dst, ids.shape[0], directed, notes, name, ids)


def index_pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, src, dst)``: the sorted distinct ids of the pairs ``values: [M, 2]`` (integers
    or strings), and every pair as ``int64`` indices into them."""
    m = values.shape[0]
    ids, inverse = np.unique(np.concatenate([values[:, 0], values[:, 1]]), return_inverse=True)
    inverse = inverse.reshape(-1)
    return ids, inverse[:m], inverse[m:]


def _read_text(path: Path) -> str:
    """The text of ``path`` as ``np.loadtxt`` opens a path: decompressed by suffix (``.bz2``,
    ``.xz``, ``.lzma``; gzip by its magic bytes), UTF-8 with universal newlines, BOM kept."""
    decompress = _DECOMPRESS.get(path.suffix)
    data = decompress(path.read_bytes()) if decompress else read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GraphFileError(f"{path}: not a UTF-8 text edge list ({exc})") from exc
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _pair_error(path, text, delimiter, comments, relabel, exc) -> GraphFileError:
    """Names the first malformed line after ``np.loadtxt`` failed (error path only)."""
    found = first_bad_line(text, delimiter, 2, None if relabel else int, comments=comments)
    if found is None:
        return GraphFileError(f"{path}: cannot parse edge list: {exc}")
    lineno, content, tok = found
    if tok is None:
        return GraphFileError(f"{path}, line {lineno}: expected {_PAIR}, got {content!r}")
    return GraphFileError(
        f"{path}, line {lineno}: {tok!r} is not an integer node id (line {content!r})"
    )
