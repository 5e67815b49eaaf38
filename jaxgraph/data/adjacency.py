"""Adjacency matrices, with this repository's convention ``A[dst, src] != 0`` = edge
``src -> dst`` (that of :meth:`Graph.adjacency() <jaxgraph.graph.Graph.adjacency>`, the transpose
of networkx's). Explicitly stored zeros are not edges; other values are ignored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgraph.data.assemble import assemble
from jaxgraph.data.errors import NPZ_READ_ERRORS, GraphFileError
from jaxgraph.graph import Graph, SelfLoops

__all__ = ["adjacency_edges", "from_scipy", "read_scipy_npz"]


def adjacency_edges(matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, values)``, three ``[E]``, of the non-zero entries of ``A[dst, src]``."""
    coo = sp.coo_array(matrix)
    nz = coo.data != 0
    return coo.col[nz], coo.row[nz], coo.data[nz]


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

    ``from_scipy(g.adjacency(), symmetrize=False, self_loops="keep")`` reproduces ``g``'s edges;
    for a matrix ``A[src, dst]`` (networkx's convention), pass its transpose.

    ``matrix``: square SciPy sparse matrix / array, or dense 2-D array; ``symmetrize`` (adding
    reverse edges) must be given explicitly; the other keywords go to :meth:`Graph.from_edges`.

    Raises:
      ValueError: the matrix is not square or 2-D.
    """
    if not sp.issparse(matrix):
        matrix = np.asarray(matrix)
        if matrix.ndim != 2:
            raise ValueError(f"adjacency matrix must be 2-D, got shape {matrix.shape}")
    if matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"adjacency matrix must be square, got shape {matrix.shape}")
    src, dst, _ = adjacency_edges(matrix)
    return Graph.from_edges(
        src,
        dst,
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


def read_scipy_npz(path: Path, directed, notes: list[str], name: str) -> Graph:
    """The ``"scipy"`` format of :func:`jaxgraph.data.read_graph`: a ``scipy.sparse.save_npz``
    file; appends to ``notes``."""
    try:
        with open(path, "rb") as f:
            matrix = sp.load_npz(f)
    except NPZ_READ_ERRORS as exc:
        raise GraphFileError(
            f"{path}: cannot read as a scipy.sparse .npz (truncated or corrupt?): {exc!r}"
        ) from exc
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise GraphFileError(f"{path}: the adjacency matrix must be square, got {matrix.shape}")
    src, dst, values = adjacency_edges(matrix)
    if np.any(values != 1):
        notes.append(f"ignored the values of {path.name}: every non-zero entry is one edge")
    n = int(matrix.shape[0])
    graph = assemble(path, src, dst, n, directed, notes, name, np.arange(n))
    if not graph.is_symmetric():
        notes.append(f"read A[dst, src] != 0 in {path.name} as an edge src -> dst")
    return graph
