"""A graph file format that jaxgraph does not read: METIS's ``.graph`` adjacency lists.

The format (METIS manual, section 4.1.1): lines starting with ``%`` are comments; the header
``n m [fmt [ncon]]`` gives the node and (undirected) edge counts; then line ``v`` (1-based)
lists the neighbours of node ``v``, 1-based, each edge appearing on both of its nodes' lines.
``fmt`` is three binary digits: vertex sizes, ``ncon`` vertex weights, edge weights (after
each neighbour). A blank vertex line is a node without neighbours.

:func:`read_metis` returns what :func:`jaxgraph.data.read_graph` returns, ``(graph, notes)``.
Importing the file registers the format ``"metis"`` for ``.graph`` files (and ``.graph.gz``):
``read_graph("my.graph")``, and ``--graph my.graph`` in a command line started from a script
that imports this file, then read METIS files. Run as a script, the file converts a METIS
graph (with optional ``.npy`` features and labels) to a PyG ``.npz`` that the installed
``jaxgraph train --graph`` and ``jaxgraph embed --graph`` read::

    python docs/examples/metis_reader.py my.graph my.npz --features x.npy --labels y.npy
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from jaxgraph.data import GraphFileError, random_split_if_missing, register_format, save_pyg_npz
from jaxgraph.data.assemble import assemble
from jaxgraph.data.text import read_text
from jaxgraph.graph import Graph


def read_metis(
    path, *, directed: bool | None = None, name: str | None = None
) -> tuple[Graph, list[str]]:
    """Reads a METIS graph file.

    Args:
      directed: as :func:`~jaxgraph.data.read_graph`'s; every edge of a METIS file has its
        reverse, so ``None`` (the default) and ``False`` read it as undirected, and ``True``
        keeps both directions as directed edges.
      name: the graph's name; default the file name up to its first dot.

    Returns:
      ``(graph, notes)``: the undirected :class:`~jaxgraph.graph.Graph` (no features, no
      labels, no split; ``graph.ids`` are the file's 1-based node numbers) and one sentence
      per thing the reader changed or ignored.

    Raises:
      GraphFileError: a malformed header or vertex line, a neighbour out of ``1..n``, fewer
        or more vertex lines than ``n``, an edge listed on one of its nodes' lines only, or
        a neighbour count that is not ``2 m``. The message starts with the path (and line).

    Shapes:
      ``graph.indptr: int64[n + 1]``, ``graph.indices: int32[2 m']`` (``m'`` edges after
      self-loops are removed and duplicates merged).
    """
    path = Path(path)
    notes: list[str] = []
    text = read_text(path)  # gunzips if needed; GraphFileError for a missing or binary file
    lines = [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), 1)
        if not line.lstrip().startswith("%")
    ]
    if not lines:
        raise GraphFileError(f"{path}: empty file (no header line 'n m [fmt [ncon]]')")
    (head_line, header), body = lines[0], lines[1:]
    head = _ints(header.split())
    fmt = f"{head[2]:03d}" if head is not None and len(head) > 2 else "000"
    if head is None or not 2 <= len(head) <= 4 or set(fmt) - {"0", "1"} or len(fmt) != 3:
        raise GraphFileError(
            f"{path}, line {head_line}: expected the header 'n m [fmt [ncon]]', got {header!r}"
        )
    n, m = head[0], head[1]
    ncon = head[3] if len(head) == 4 else 1
    skip = int(fmt[0]) + int(fmt[1]) * ncon  # leading values of a vertex line: size, weights
    step = 1 + int(fmt[2])  # a neighbour, then its edge weight
    if len(body) < n:
        raise GraphFileError(f"{path}: the header says {n} nodes but there are {len(body)} lines")
    extra = [number for number, line in body[n:] if line]
    if extra:
        raise GraphFileError(f"{path}, line {extra[0]}: more than n = {n} vertex lines")
    src, dst, where = [], [], []
    for v, (number, line) in enumerate(body[:n]):
        values = _ints(line.split())
        if values is None or len(values) < skip or (len(values) - skip) % step:
            raise GraphFileError(f"{path}, line {number}: malformed vertex line {line!r}")
        neighbours = values[skip::step]
        if any(not 1 <= u <= n for u in neighbours):
            raise GraphFileError(f"{path}, line {number}: a neighbour outside 1..{n}")
        src += [u - 1 for u in neighbours]  # edge u -> v: CSR rows are destinations
        dst += [v] * len(neighbours)
        where += [number] * len(neighbours)
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if src.size != 2 * m:
        raise GraphFileError(
            f"{path}: the header says m = {m} edges, so 2m = {2 * m} neighbour entries, but "
            f"the vertex lines hold {src.size}"
        )
    one_sided = ~np.isin(dst * n + src, src * n + dst)
    if one_sided.any():
        i = int(np.flatnonzero(one_sided)[0])
        raise GraphFileError(
            f"{path}, line {where[i]}: node {dst[i] + 1} lists {src[i] + 1}, but line "
            f"{body[src[i]][0]} (node {src[i] + 1}) does not list {dst[i] + 1}"
        )
    if skip:
        notes.append(f"ignored the vertex sizes and weights in {path.name}")
    if step == 2:
        notes.append(f"ignored the edge weights in {path.name}")
    name = path.name.split(".")[0] if name is None else name
    # assemble: removes self-loops, merges duplicates, notes each; symmetric, so undirected.
    # node_ids: node v of the graph is node v + 1 of the file (results are keyed by them).
    graph = assemble(path, src, dst, n, directed, notes, name, np.arange(1, n + 1))
    return graph, notes


def _ints(tokens: list[str]) -> list[int] | None:
    try:
        return [int(t) for t in tokens]
    except ValueError:
        return None


def _reader(path: Path, directed: bool | None, notes: list[str], name: str) -> Graph:
    """:func:`read_metis` as :func:`~jaxgraph.data.register_format` calls a reader: the notes
    go to the list ``read_graph`` passes, and the graph comes back alone."""
    graph, own = read_metis(path, directed=directed, name=name)
    notes += own
    return graph


# read_graph(path, format="metis"), --format metis, data.format = "metis", and any *.graph file.
register_format("metis", _reader, suffixes=(".graph",))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="convert a METIS graph to a PyG .npz")
    p.add_argument("graph", help="the METIS .graph file")
    p.add_argument("out", help="the .npz to write")
    p.add_argument("--features", help="f32[n, F] node features, .npy, in METIS node order")
    p.add_argument("--labels", help="int[n] node labels (-1: unlabelled), .npy")
    p.add_argument("--split-seed", type=int, default=0, help="seeds a random 60/20/20 split")
    args = p.parse_args(argv)
    graph, notes = read_metis(args.graph)
    if args.features:
        graph = graph.replace(features=np.load(args.features).astype(np.float32))
    if args.labels:
        graph = graph.replace(labels=np.load(args.labels).astype(np.int32))
    graph, note = random_split_if_missing(graph, seed=args.split_seed)
    for line in [*notes, note] if note else notes:
        print(f"note: {line}", file=sys.stderr)
    save_pyg_npz(graph, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
