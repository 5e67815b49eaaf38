"""Building a user's graph from the edges and node arrays its file holds, noting every change.
:data:`MASK_NAMES` names a split's masks (the :class:`~jaxgraph.graph.Graph` fields)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxgraph.data.errors import GraphFileError
from jaxgraph.graph import Graph

__all__ = ["MASK_NAMES", "assemble"]

MASK_NAMES = ("train_mask", "val_mask", "test_mask")


def assemble(
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
        notes.append(
            f"added the reverse of {_plural(sym.num_edges - graph.num_edges, 'edge')} "
            f"(undirected): {sym.num_edges} directed edges in all"
        )
        graph = graph.replace(indptr=sym.indptr, indices=sym.indices)
    return graph


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
