"""PyTorch-Geometric-style ``.npz`` graphs: one archive layout, read two ways and written once.

The layout: ``edge_index`` ``int[2, E]`` (row 0 = source, row 1 = destination), optional ``x``
(features), ``y`` (``int[N]`` labels, ``-1`` = unlabelled, or ``[N, C]`` multi-label
indicators), ``train_mask`` / ``val_mask`` / ``test_mask`` and ``num_nodes``; other arrays are
ignored and pickles refused. :func:`from_pyg_npz` converts an archive as told; :func:`read_pyg`
is the ``"pyg"`` format of :func:`jaxgraph.data.read_graph`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from jaxgraph.atomic import atomic_write
from jaxgraph.data.assemble import MASK_NAMES, assemble
from jaxgraph.data.errors import GraphFileError
from jaxgraph.data.npz import read_npz
from jaxgraph.graph import Graph, SelfLoops

__all__ = ["from_pyg_npz", "pyg_edge_index", "pyg_num_nodes", "read_pyg", "save_pyg_npz"]


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


def pyg_num_nodes(arrays: Mapping[str, np.ndarray], ei: np.ndarray) -> tuple[int, str]:
    """The node count of a PyG-style archive and where it comes from: ``num_nodes``, else the
    rows of ``x`` or of ``y``, else ``max(edge_index) + 1``."""
    if "num_nodes" in arrays:
        return int(arrays["num_nodes"]), "'num_nodes'"
    for key in ("x", "y"):
        if key in arrays:
            return int(arrays[key].shape[0]), f"the rows of {key!r}"
    return (int(ei.max()) + 1 if ei.size else 0), "max(edge_index) + 1"


def _masks(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: arrays[k].astype(bool) for k in MASK_NAMES if k in arrays}


def from_pyg_npz(
    path,
    *,
    symmetrize: bool,
    self_loops: SelfLoops = "remove",
    num_nodes: int | None = None,
    name: str | None = None,
) -> Graph:
    """Reads a PyTorch-Geometric-style ``.npz`` file (the layout in the module docstring).

    ``symmetrize`` (adding reverse edges) must be given explicitly; ``num_nodes`` overrides
    :func:`pyg_num_nodes`; ``name`` defaults to the file stem.

    Raises:
      FileNotFoundError: the file does not exist.
      GraphFileError: the file is not a readable npz, is truncated, lacks ``edge_index`` or has
        arrays of inconsistent shapes.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"PyG npz file not found: {path}")
    arrays = read_npz(path)
    ei = pyg_edge_index(arrays, path)
    x, y = arrays.get("x"), arrays.get("y")
    if num_nodes is None:
        num_nodes, _ = pyg_num_nodes(arrays, ei)
    if x is not None and x.ndim == 1:
        x = x[:, None]
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
            **_masks(arrays),
        )
    except ValueError as exc:
        raise GraphFileError(f"{path}: inconsistent graph arrays: {exc}") from exc


def save_pyg_npz(graph: Graph, path, *, compressed: bool = True) -> Path:
    """Writes ``graph`` as a PyG-style ``.npz`` readable by :func:`from_pyg_npz`, atomically
    and at exactly ``path`` (no ``.npz`` appended); returns ``path``.

    ``edge_index`` is ``int64[2, E]`` in :meth:`Graph.edges` order; ``compressed`` chooses
    ``np.savez_compressed`` (default) or ``np.savez``.
    """
    path = Path(path)
    src, dst = graph.edges()
    arrays = dict(
        edge_index=np.stack([src, dst]).astype(np.int64),
        x=graph.features,
        y=graph.labels,
        **{k: getattr(graph, k) for k in MASK_NAMES},
        num_nodes=np.int64(graph.num_nodes),
    )
    save = np.savez_compressed if compressed else np.savez
    atomic_write(path, lambda f: save(f, **arrays))
    return path


def read_pyg(path: Path, directed, notes: list[str], name: str) -> Graph:
    """The ``"pyg"`` format of :func:`jaxgraph.data.read_graph`: ids checked against the node
    count, ``y`` of shape ``[N, 1]`` read as one class per node; appends to ``notes``."""
    arrays = read_npz(path)
    ei = pyg_edge_index(arrays, path)
    x, y = arrays.get("x"), arrays.get("y")
    num_nodes, source = pyg_num_nodes(arrays, ei)
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
    data = dict(features=x, labels=y, **_masks(arrays))
    ids = np.arange(num_nodes)
    return assemble(path, ei[0], ei[1], num_nodes, directed, notes, name, ids, **data)
