"""Parsers of the raw files of the bundled datasets (see
:func:`~jaxgraph.data.datasets.load_dataset`): from the ``raw/`` directory to ``num_nodes``,
``src``, ``dst`` and, where the dataset has them, ``features`` (SciPy sparse), ``labels`` and
``masks``."""

from __future__ import annotations

import collections
import itertools
import pickle
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgraph.data.errors import DatasetError
from jaxgraph.data.text import loadtxt

__all__ = ["parse_astroph", "parse_blogcatalog", "parse_cora", "parse_planetoid"]


def _load_text(path: Path, dtype, delimiter: str | None = None) -> np.ndarray:
    return loadtxt(path.read_text(encoding="utf-8"), dtype, delimiter, comments=("#",))


def parse_cora(raw: Path) -> dict:
    lines = (raw / "cora" / "cora.content").read_text(encoding="utf-8").splitlines()
    ncol = len(lines[0].split("\t"))
    feats = np.loadtxt(lines, delimiter="\t", usecols=range(1, ncol - 1), dtype=np.float32)
    meta = np.loadtxt(lines, delimiter="\t", usecols=(0, ncol - 1), dtype=str, ndmin=2)
    paper_ids, class_names = meta[:, 0], meta[:, 1]
    _, labels = np.unique(class_names, return_inverse=True)
    cites = _load_text(raw / "cora" / "cora.cites", str)  # "cited citing" per line
    order = np.argsort(paper_ids)
    sorted_ids = paper_ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, cites), sorted_ids.size - 1)
    unknown = sorted_ids[pos] != cites
    if unknown.any():
        bad = cites[unknown][0]
        raise DatasetError(f"{raw / 'cora' / 'cora.cites'} cites unknown paper id {bad!r}")
    idx = order[pos]
    return {
        "num_nodes": len(paper_ids),
        "src": idx[:, 1],
        "dst": idx[:, 0],
        "features": sp.csr_matrix(feats),
        "labels": labels.astype(np.int32),
    }


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickles the Python-2 Planetoid files, allowing only the classes they use (the
    deprecated ``scipy.sparse.csr`` path maps to ``csr_matrix``, without a warning)."""

    _ALLOWED = {
        ("collections", "defaultdict"): collections.defaultdict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
        ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
        ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }
    _NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return self._ALLOWED[(module, name)]
        if (module, name) in self._NUMPY:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def _unpickle(path: Path):
    with open(path, "rb") as f:
        return _PlanetoidUnpickler(f, encoding="latin1").load()


def parse_planetoid(raw: Path, name: str) -> dict:
    base = raw / name

    def part(suffix):
        return _unpickle(base / f"ind.{name}.{suffix}")

    y, allx, ally, tx, ty, graph = (part(s) for s in ("y", "allx", "ally", "tx", "ty", "graph"))
    test_index = _load_text(base / f"ind.{name}.test.index", np.int64)[:, 0]
    allx, tx = sp.csr_matrix(allx, dtype=np.float32), sp.csr_matrix(tx, dtype=np.float32)
    ally, ty = np.asarray(ally), np.asarray(ty)
    keys = np.fromiter(graph.keys(), np.int64, len(graph))
    lens = np.fromiter((len(v) for v in graph.values()), np.int64, len(graph))
    src = np.repeat(keys, lens)
    dst = np.fromiter(itertools.chain.from_iterable(graph.values()), np.int64, int(lens.sum()))
    n = int(max(keys.max() + 1, dst.max() + 1, test_index.max() + 1, allx.shape[0]))
    # features: allx rows are nodes 0..len(allx)-1, tx row i is node test_index[i].
    ax, tt = allx.tocoo(), tx.tocoo()
    rows = np.concatenate([ax.row, test_index[tt.row]])
    cols = np.concatenate([ax.col, tt.col])
    vals = np.concatenate([ax.data, tt.data])
    feats = sp.csr_matrix((vals, (rows, cols)), shape=(n, allx.shape[1]), dtype=np.float32)
    labels = np.full(n, -1, np.int32)
    labels[: ally.shape[0]] = np.where(ally.any(1), ally.argmax(1), -1)
    labels[test_index] = np.where(ty.any(1), ty.argmax(1), -1)
    num_train = int(np.asarray(y).shape[0])
    train, val, test = (np.zeros(n, bool) for _ in range(3))
    train[:num_train] = True
    val[num_train : num_train + 500] = True
    test[test_index] = True
    labelled = labels >= 0
    masks = (train & labelled, val & labelled, test & labelled)
    return {"num_nodes": n, "src": src, "dst": dst, "features": feats, "labels": labels,
            "masks": masks}  # fmt: skip


def parse_blogcatalog(raw: Path) -> dict:
    base = raw / "BlogCatalog"
    nodes = _load_text(base / "nodes.csv", np.int64)[:, 0]
    groups = _load_text(base / "groups.csv", np.int64)[:, 0]
    n, c = int(nodes.shape[0]), int(groups.shape[0])
    if not (np.array_equal(np.sort(nodes), np.arange(1, n + 1))):
        raise DatasetError(f"{base / 'nodes.csv'}: node ids are not 1..{n}")
    edges = _load_text(base / "edges.csv", np.int64, ",") - 1
    member = _load_text(base / "group-edges.csv", np.int64, ",") - 1
    labels = np.zeros((n, c), bool)
    labels[member[:, 0], member[:, 1]] = True
    return {"num_nodes": n, "src": edges[:, 0], "dst": edges[:, 1], "labels": labels}


def parse_astroph(raw: Path) -> dict:
    edges = _load_text(raw / "arXiv" / "ca-AstroPh.txt", np.int64)
    ids, inverse = np.unique(edges.ravel(), return_inverse=True)
    inverse = inverse.reshape(edges.shape)
    return {"num_nodes": int(ids.shape[0]), "src": inverse[:, 0], "dst": inverse[:, 1]}
