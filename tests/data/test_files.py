"""Tests of jaxgraph.data.files (reading a user's graph file) and Graph.node_ids."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from jaxgraph.data import GraphFileError, from_edge_list, save_pyg_npz
from jaxgraph.data.files import (
    GRAPH_FORMATS,
    detect_format,
    random_split_if_missing,
    read_graph,
)
from jaxgraph.graph import Graph


def edge_set(graph: Graph) -> set[tuple]:
    """The edges as ``(src id, dst id)`` pairs in the user's ids."""
    src, dst = graph.edges()
    ids = graph.ids.tolist()
    return {(ids[s], ids[d]) for s, d in zip(src.tolist(), dst.tolist(), strict=True)}


def both_ways(pairs) -> set[tuple]:
    return {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}


def write_gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()))
    return path


def write_ogb(root: Path, *, split=True, label_text="0\n\n1\n2\n") -> Path:
    """A 4-node OGB node-property directory: edges 0->1, 1->2, 2->3, 3->3 (a self-loop)."""
    raw = root / "ogbn-toy" / "raw"
    raw.mkdir(parents=True)
    write_gz(raw / "edge.csv.gz", "0,1\n1,2\n2,3\n3,3\n")
    write_gz(raw / "num-node-list.csv.gz", "4\n")
    write_gz(raw / "node-feat.csv.gz", "0.5,1\n1.5,2\n2.5,3\n3.5,4\n")
    write_gz(raw / "node-label.csv.gz", label_text)  # node 1 unlabelled (empty line)
    write_gz(raw / "node_year.csv.gz", "2001\n2002\n2003\n2004\n")
    if split:
        s = root / "ogbn-toy" / "split" / "time"
        s.mkdir(parents=True)
        write_gz(s / "train.csv.gz", "0\n2\n")
        write_gz(s / "valid.csv.gz", "3\n")
        write_gz(s / "test.csv.gz", "")
    return root / "ogbn-toy"


# ---------------------------------------------------------------------- formats


def test_pyg_npz_round_trip_reads_ids_features_labels_masks(tmp_path):
    g = Graph.from_edges(
        [0, 1, 2],
        [1, 2, 3],
        num_nodes=5,
        symmetrize=True,
        features=np.arange(10, dtype=np.float32).reshape(5, 2),
        labels=np.array([0, 1, -1, 2, 1]),
        train_mask=np.array([1, 1, 0, 0, 0], bool),
        val_mask=np.array([0, 0, 0, 1, 0], bool),
        test_mask=np.array([0, 0, 0, 0, 1], bool),
    )
    path = save_pyg_npz(g, tmp_path / "toy.npz")
    assert detect_format(path) == "pyg"
    out, notes = read_graph(path)
    assert edge_set(out) == both_ways([(0, 1), (1, 2), (2, 3)])
    np.testing.assert_array_equal(out.node_ids, np.arange(5))
    np.testing.assert_array_equal(out.features, g.features)
    np.testing.assert_array_equal(out.labels, [0, 1, -1, 2, 1])
    np.testing.assert_array_equal(out.train_mask, g.train_mask)
    np.testing.assert_array_equal(out.test_mask, g.test_mask)
    assert out.name == "toy"
    assert notes == ["read toy.npz as undirected: every edge has its reverse"]


def test_pyg_npz_self_loops_duplicates_and_extra_arrays_are_noted(tmp_path):
    path = tmp_path / "raw.npz"
    ei = np.array([[0, 0, 1, 2, 2], [1, 1, 1, 0, 1]])
    np.savez(path, edge_index=ei, edge_attr=np.ones(5), y=np.array([[2], [0], [1]]))
    g, notes = read_graph(path, directed=True)
    assert edge_set(g) == {(0, 1), (2, 0), (2, 1)}
    np.testing.assert_array_equal(g.labels, [2, 0, 1])
    assert notes == [
        "read 'y' of shape [N, 1] in raw.npz as one class per node",
        "ignored the arrays edge_attr of raw.npz",
        "removed 1 self-loop from raw.npz",
        "merged 1 duplicate edge in raw.npz",
    ]


def test_edge_list_with_string_ids_features_npy_and_labels_table(tmp_path):
    edges = tmp_path / "friends.tsv"
    edges.write_text("# who follows whom\ncarol\tbob\n% another comment\nbob\talice\ndave\tbob\n")
    # .npy rows follow graph.ids, i.e. the sorted ids alice, bob, carol, dave.
    feats = tmp_path / "x.npy"
    np.save(feats, np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]]))
    labels = tmp_path / "y.tsv"
    labels.write_text("alice\tcat\ncarol\tdog\nbob\tcat\n")
    g, notes = read_graph(edges, directed=True, features=feats, labels=labels)
    assert detect_format(edges) == "edgelist"
    assert g.node_ids.tolist() == ["alice", "bob", "carol", "dave"]
    assert edge_set(g) == {("carol", "bob"), ("bob", "alice"), ("dave", "bob")}
    np.testing.assert_array_equal(g.features[:, 0], [1, 2, 3, 4])
    np.testing.assert_array_equal(g.labels, [0, 0, 1, -1])
    assert notes == [
        "mapped the classes of y.tsv to ids in sorted order: 'cat'=0, 'dog'=1",
        "set the label of 1 of 4 nodes to -1 (unlabelled): y.tsv gives them none",
    ]


def test_csv_gz_edge_list_with_header_and_weights_undirected(tmp_path):
    path = write_gz(tmp_path / "roads.csv.gz", "src,dst,weight\n10,2,0.5\n2,33,1.5\n33,33,1\n")
    g, notes = read_graph(path, directed=False)
    assert g.node_ids.tolist() == [2, 10, 33]  # integers sorted numerically, not as strings
    assert g.node_ids.dtype == np.int64
    assert edge_set(g) == both_ways([(10, 2), (2, 33)])
    assert g.name == "roads"
    assert notes == [
        "skipped the header line 1 of roads.csv.gz: 'src,dst,weight'",
        "ignored a third column (weights?) in roads.csv.gz",
        "removed 1 self-loop from roads.csv.gz",
        "added the reverse of 2 edges (undirected): 4 directed edges in all",
    ]


def test_int_edge_list_with_features_table_and_npy_labels(tmp_path):
    edges = tmp_path / "g.edges"
    edges.write_text("5 7\n7 9\n5 7\n")
    feats = write_gz(tmp_path / "feats.csv.gz", "id,a,b\n9,0.9,9\n5,0.5,5\n7,0.7,7\n")
    labels = tmp_path / "labels.npy"
    np.save(labels, np.array([1, -1, 0]))
    g, notes = read_graph(edges, directed=True, features=feats, labels=labels)
    assert edge_set(g) == {(5, 7), (7, 9)}
    np.testing.assert_allclose(g.features, [[0.5, 5], [0.7, 7], [0.9, 9]])
    np.testing.assert_array_equal(g.labels, [1, -1, 0])
    assert notes == [
        "merged 1 duplicate edge in g.edges",
        "skipped the header line 1 of feats.csv.gz: 'id,a,b'",
        "set the label of 1 of 3 nodes to -1 (unlabelled): labels.npy gives them none",
    ]


def test_scipy_npz_symmetric_is_undirected_without_being_told(tmp_path):
    a = sp.csr_matrix(np.array([[0, 2, 0], [2, 0, 1], [0, 1, 0]], np.float32))
    path = tmp_path / "adj.npz"
    sp.save_npz(path, a)
    assert detect_format(path) == "scipy"
    g, notes = read_graph(path)
    assert edge_set(g) == both_ways([(0, 1), (1, 2)])
    np.testing.assert_array_equal(g.node_ids, [0, 1, 2])
    assert notes == [
        "ignored the values of adj.npz: every non-zero entry is one edge",
        "read adj.npz as undirected: every edge has its reverse",
    ]


def test_scipy_npz_directed_follows_dst_src_convention(tmp_path):
    a = sp.coo_matrix(([1.0, 1.0], ([1, 2], [0, 0])), shape=(3, 3))  # A[1, 0], A[2, 0]
    path = tmp_path / "dir.npz"
    sp.save_npz(path, a)
    g, notes = read_graph(path, directed=True)
    assert edge_set(g) == {(0, 1), (0, 2)}
    assert notes == ["read A[dst, src] != 0 in dir.npz as an edge src -> dst"]
    undirected, _ = read_graph(path, directed=False)
    assert edge_set(undirected) == both_ways([(0, 1), (0, 2)])


def test_ogb_directory_with_split(tmp_path):
    path = write_ogb(tmp_path)
    assert detect_format(path) == "ogb"
    g, notes = read_graph(path, directed=False)
    assert edge_set(g) == both_ways([(0, 1), (1, 2), (2, 3)])
    np.testing.assert_array_equal(g.node_ids, np.arange(4))
    np.testing.assert_allclose(g.features, [[0.5, 1], [1.5, 2], [2.5, 3], [3.5, 4]])
    np.testing.assert_array_equal(g.labels, [0, -1, 1, 2])
    assert np.flatnonzero(g.train_mask).tolist() == [0, 2]
    assert np.flatnonzero(g.val_mask).tolist() == [3]
    assert not g.test_mask.any()
    assert g.name == "ogbn-toy"
    assert notes == [
        f"ignored node_year.csv.gz in {path / 'raw'}",
        "removed 1 self-loop from edge.csv.gz",
        "added the reverse of 3 edges (undirected): 6 directed edges in all",
    ]
    directed, _ = read_graph(path, directed=True)
    assert edge_set(directed) == {(0, 1), (1, 2), (2, 3)}


def test_format_argument_overrides_detection(tmp_path):
    path = tmp_path / "graph.dat"
    path.write_text("1 2\n")
    with pytest.raises(GraphFileError, match="unsupported file type"):
        read_graph(path, directed=True)
    g, _ = read_graph(path, format="edgelist", directed=True)
    assert edge_set(g) == {(1, 2)}
    assert GRAPH_FORMATS == ("pyg", "edgelist", "scipy", "ogb")


def test_random_split_if_missing(tmp_path):
    labels = np.array([0, 1, -1, 1, 0, 1, 0, 1, 0, 1, -1, 0])
    g = Graph.from_edges([0], [1], num_nodes=12, symmetrize=True, labels=labels)
    split, note = random_split_if_missing(g, seed=3)
    assert note == (
        "no split in the file: made a seeded random 60/20/20 split of the 10 labelled nodes "
        "(seed 3)"
    )
    counts = [int(m.sum()) for m in (split.train_mask, split.val_mask, split.test_mask)]
    assert counts == [6, 2, 2]
    union = split.train_mask | split.val_mask | split.test_mask
    assert not union[labels < 0].any() and union.sum() == 10
    again, _ = random_split_if_missing(g, seed=3)
    np.testing.assert_array_equal(again.train_mask, split.train_mask)
    assert random_split_if_missing(split, seed=0) == (split, None)
    unlabelled = Graph.from_edges([0], [1], num_nodes=2, symmetrize=True)
    assert random_split_if_missing(unlabelled, seed=0) == (unlabelled, None)


# ---------------------------------------------------------------------- Graph.node_ids


def test_graph_node_ids_default_replace_and_repr():
    g = Graph.from_edges([0, 1], [1, 2], num_nodes=3, symmetrize=False)
    assert g.node_ids is None
    np.testing.assert_array_equal(g.ids, [0, 1, 2])
    named = g.replace(node_ids=np.array(["x", "y", "z"]))
    assert named.ids.tolist() == ["x", "y", "z"]
    assert named.replace(name="other").node_ids.tolist() == ["x", "y", "z"]
    assert repr(named) == repr(g)
    objects = g.replace(node_ids=np.array([7, 8, 9], dtype=object))
    assert objects.node_ids.dtype == np.int64


@pytest.mark.parametrize(
    ("node_ids", "message"),
    [
        (np.array([1, 2]), r"node_ids must have shape \[3\] \(one id per node\), got \(2,\)"),
        (np.array([4, 5, 4]), "node_ids must be distinct: 4 is the id of 2 nodes"),
        (np.array(["a", "b", "a"]), "node_ids must be distinct: 'a' is the id of 2 nodes"),
        (np.array([0.5, 1.5, 2.5]), "node_ids must be integers or strings, got dtype float64"),
        (np.array([1, "a", 2], dtype=object), "all integers or all strings"),
    ],
)
def test_graph_node_ids_validation(node_ids, message):
    with pytest.raises(ValueError, match=message):
        Graph.from_edges([0], [1], num_nodes=3, symmetrize=False, node_ids=node_ids)


def test_from_edge_list_relabel_fills_node_ids(tmp_path):
    path = tmp_path / "e.txt"
    path.write_text("b a\nc b\n")
    g = from_edge_list(path, symmetrize=False, relabel=True)
    assert g.node_ids.tolist() == ["a", "b", "c"]
    assert from_edge_list(path.with_name("e.txt"), symmetrize=False, relabel=True).ids[2] == "c"
    ints = tmp_path / "i.txt"
    ints.write_text("0 1\n")
    assert from_edge_list(ints, symmetrize=False).node_ids is None


# ---------------------------------------------------------------------- bad inputs


def _truncated_npz(tmp):
    p = tmp / "cut.npz"
    np.savez_compressed(p, edge_index=np.arange(2000).reshape(2, 1000))
    p.write_bytes(p.read_bytes()[:300])
    return dict(path=p), p, r"cannot read as an \.npz archive \(truncated or corrupt\?\)"


def _corrupt_npz_member(tmp):
    p = tmp / "bad.npz"
    rng = np.random.default_rng(0)
    np.savez_compressed(p, edge_index=rng.integers(0, 50, (2, 5000)))
    data = bytearray(p.read_bytes())
    for i in range(200, 260):
        data[i] ^= 0xFF  # inside the compressed edge_index member; the zip directory survives
    p.write_bytes(bytes(data))
    return dict(path=p, directed=True), p, "cannot read as an .npz archive"


def _truncated_gzip(tmp):
    p = tmp / "e.txt.gz"
    text = "".join(f"{i} {i * 7919 % 1000}\n" for i in range(500))
    data = gzip.compress(text.encode())
    p.write_bytes(data[: len(data) // 2])
    return dict(path=p, directed=True), p, "truncated or corrupt gzip data"


def _malformed_line(tmp):
    p = tmp / "e.txt"
    p.write_text("# header comment\n1 2\n3\n4 5\n")
    return dict(path=p, directed=True), p, "line 3: expected two node ids 'src dst', got '3'"


def _npz_unknown_keys(tmp):
    p = tmp / "what.npz"
    np.savez(p, a=np.zeros(2), b=np.ones(2))
    return dict(path=p), p, r"arrays \['a', 'b'\]; expected 'edge_index' \(PyG\) or 'format'"


def _npy_named_npz(tmp):
    p = tmp / "single.npz"
    with open(p, "wb") as f:
        np.save(f, np.zeros(3))
    return dict(path=p), p, "a single .npy array, not an .npz archive"


def _unknown_suffix(tmp):
    p = tmp / "graph.json"
    p.write_text("{}")
    return dict(path=p), p, r"unsupported file type '\.json'; supported: \.npz"


def _missing_file(tmp):
    p = tmp / "nowhere.csv"
    return dict(path=p, directed=True), p, "no such file or directory"


def _missing_directed(tmp):
    p = tmp / "e.csv"
    p.write_text("1,2\n")
    return dict(path=p), p, r"pass directed=True or directed=False \(--directed or --undirected\)"


def _asymmetric_pyg_without_directed(tmp):
    p = tmp / "g.npz"
    np.savez(p, edge_index=np.array([[0], [1]]))
    return dict(path=p), p, "some edges have no reverse.*pass directed=True"


def _negative_edge_index(tmp):
    p = tmp / "neg.npz"
    np.savez(p, edge_index=np.array([[0, -1], [1, 0]]), num_nodes=3)
    return dict(path=p), p, r"edge_index\[0, 1\] = -1 is a negative node id"


def _edge_index_out_of_range(tmp):
    p = tmp / "big.npz"
    np.savez(p, edge_index=np.array([[0, 1], [7, 0]]), x=np.zeros((3, 2)))
    return dict(path=p), p, r"edge_index\[1, 0\] = 7 is out of range for 3 nodes \(from the rows"


def _float_edge_index(tmp):
    p = tmp / "float.npz"
    np.savez(p, edge_index=np.array([[0.0], [1.0]]))
    return dict(path=p), p, r"'edge_index' must be an integer array of shape \[2, E\]"


def _empty_pyg(tmp):
    p = tmp / "empty.npz"
    np.savez(p, edge_index=np.zeros((2, 0), np.int64), num_nodes=0)
    return dict(path=p), p, r"empty graph \(no nodes, no edges\)"


def _empty_edge_list(tmp):
    p = tmp / "e.el"
    p.write_text("")
    return dict(path=p, directed=False), p, "empty edge list"


def _comment_only_edge_list(tmp):
    p = write_gz(tmp / "e.tsv.gz", "# nothing\n% here\n\n")
    return dict(path=p, directed=False), p, "empty edge list"


def _not_gzip(tmp):
    p = tmp / "e.txt.gz"
    p.write_text("1 2\n")
    return dict(path=p, directed=True), p, "named .gz but not gzip-compressed"


def _binary_text(tmp):
    p = tmp / "e.txt"
    p.write_bytes(b"1 2\n3 \xff\xfe\n")
    return dict(path=p, directed=True), p, r"line 2: not UTF-8 text \(byte 0xff\)"


def _unknown_format(tmp):
    p = tmp / "e.txt"
    p.write_text("1 2\n")
    return dict(path=p, format="graphml"), p, "unknown format 'graphml'; expected one of pyg"


def _scipy_not_square(tmp):
    p = tmp / "rect.npz"
    sp.save_npz(p, sp.csr_matrix(np.ones((2, 3))))
    return dict(path=p, directed=True), p, r"adjacency matrix must be square, got \(2, 3\)"


def _edges_and_labels(tmp, text):
    edges = tmp / "e.txt"
    edges.write_text("a b\nb c\n")
    labels = tmp / "labels.tsv"
    labels.write_text(text)
    return edges, labels


def _labels_unknown_ids(tmp):
    edges, labels = _edges_and_labels(tmp, "a\t0\nb\t1\nzed\t0\nyan\t1\n")
    pattern = "line 3: 2 ids are not nodes of the graph, e.g. 'zed', 'yan'"
    return dict(path=edges, directed=True, labels=labels), labels, pattern


def _labels_mixed_kinds(tmp):
    edges, labels = _edges_and_labels(tmp, "a\t0\nb\tdog\n")
    pattern = r"labels mix integers \(line 1: '0'\) and class names \(line 2: 'dog'\)"
    return dict(path=edges, directed=True, labels=labels), labels, pattern


def _labels_duplicate_id(tmp):
    edges, labels = _edges_and_labels(tmp, "a\t0\nc\t1\na\t1\n")
    pattern = r"node 'a' is listed 2 times \(lines 1 and 3\)"
    return dict(path=edges, directed=True, labels=labels), labels, pattern


def _string_id_in_int_table(tmp):
    edges = tmp / "e.txt"
    edges.write_text("1 2\n2 3\n")
    labels = tmp / "labels.txt"
    labels.write_text("1 0\nx 1\n")
    pattern = "line 2: 'x' is not an integer node id"
    return dict(path=edges, directed=True, labels=labels), labels, pattern


def _labels_npy_below_minus_one(tmp):
    edges, _ = _edges_and_labels(tmp, "")
    labels = tmp / "y.npy"
    np.save(labels, np.array([0, -2, 1]))
    pattern = r"labels\[1\] = -2 \(node 'b'\) is below -1"
    return dict(path=edges, directed=True, labels=labels), labels, pattern


def _features_wrong_rows(tmp):
    edges, _ = _edges_and_labels(tmp, "")
    feats = tmp / "x.npy"
    np.save(feats, np.zeros((2, 4)))
    pattern = "2 feature rows but the graph has 3 nodes"
    return dict(path=edges, directed=True, features=feats), feats, pattern


def _features_nan_npy(tmp):
    edges, _ = _edges_and_labels(tmp, "")
    feats = tmp / "x.npy"
    np.save(feats, np.array([[0.0, 1.0], [np.nan, 2.0], [0.0, 0.0]]))
    pattern = r"features\[1, 0\] = nan \(node 'b'\) is not a finite float32 \(1 such values\)"
    return dict(path=edges, directed=True, features=feats), feats, pattern


def _features_inf_table(tmp):
    edges, _ = _edges_and_labels(tmp, "")
    feats = tmp / "x.csv"
    feats.write_text("a,1,2\nb,3,4\nc,5,inf\n")
    pattern = r"line 3: value inf in column 3 \(node 'c'\) is not a finite float32"
    return dict(path=edges, directed=True, features=feats), feats, pattern


def _features_table_missing_nodes(tmp):
    edges, _ = _edges_and_labels(tmp, "")
    feats = tmp / "x.tsv"
    feats.write_text("a\t1\nb\t2\n")
    pattern = "no features for 1 of 3 nodes, e.g. 'c'"
    return dict(path=edges, directed=True, features=feats), feats, pattern


def _features_table_bad_value(tmp):
    edges, _ = _edges_and_labels(tmp, "")
    feats = tmp / "x.csv"
    feats.write_text("a,1,2\nb,3,x\nc,5,6\n")
    pattern = r"line 2: 'x' is not a number \(expected a node id and 2 features\)"
    return dict(path=edges, directed=True, features=feats), feats, pattern


def _ogb_missing_edges(tmp):
    d = tmp / "ogbn-empty"
    (d / "raw").mkdir(parents=True)
    return dict(path=d), d, "not an OGB dataset directory: missing raw/edge.csv.gz"


def _ogb_parent_dir(tmp):
    d = write_ogb(tmp).parent
    return dict(path=d), d, "missing raw/.*did you mean the dataset directory .*ogbn-toy"


def _ogb_split_out_of_range(tmp):
    d = write_ogb(tmp)
    f = d / "split" / "time" / "train.csv.gz"
    write_gz(f, "0\n9\n")
    return dict(path=d, directed=False), f, r"line 2: node index 9 is outside \[0, 4\)"


def _ogb_split_unlabelled(tmp):
    d = write_ogb(tmp)
    f = d / "split" / "time" / "valid.csv.gz"
    write_gz(f, "1\n")
    pattern = "line 1: node 1 has no label in raw/node-label.csv.gz"
    return dict(path=d, directed=False), f, pattern


def _ogb_bad_edge_token(tmp):
    d = write_ogb(tmp)
    f = d / "raw" / "edge.csv.gz"
    write_gz(f, "0,1\n1,x\n")
    return dict(path=d, directed=False), f, "line 2: 'x' is not an integer"


def _ogb_fractional_label(tmp):
    d = write_ogb(tmp, label_text="0\n1.5\n1\n2\n")
    f = d / "raw" / "node-label.csv.gz"
    return dict(path=d, directed=False), f, "line 2: '1.5' is not an integer label"


def _ogb_feature_rows(tmp):
    d = write_ogb(tmp)
    f = d / "raw" / "node-feat.csv.gz"
    write_gz(f, "0.5,1\n1.5,2\n")
    pattern = "2 rows but raw/num-node-list.csv.gz says 4 nodes"
    return dict(path=d, directed=False), f, pattern


def _pyg_as_directory(tmp):
    d = tmp / "folder"
    d.mkdir()
    return dict(path=d, format="pyg"), d, "is a directory, not a pyg file"


BAD_INPUTS = {
    f.__name__.lstrip("_"): f
    for f in (
        _truncated_npz,
        _corrupt_npz_member,
        _truncated_gzip,
        _malformed_line,
        _npz_unknown_keys,
        _npy_named_npz,
        _unknown_suffix,
        _missing_file,
        _missing_directed,
        _asymmetric_pyg_without_directed,
        _negative_edge_index,
        _edge_index_out_of_range,
        _float_edge_index,
        _empty_pyg,
        _empty_edge_list,
        _comment_only_edge_list,
        _not_gzip,
        _binary_text,
        _unknown_format,
        _scipy_not_square,
        _labels_unknown_ids,
        _labels_mixed_kinds,
        _labels_duplicate_id,
        _string_id_in_int_table,
        _labels_npy_below_minus_one,
        _features_wrong_rows,
        _features_nan_npy,
        _features_inf_table,
        _features_table_missing_nodes,
        _features_table_bad_value,
        _ogb_missing_edges,
        _ogb_parent_dir,
        _ogb_split_out_of_range,
        _ogb_split_unlabelled,
        _ogb_bad_edge_token,
        _ogb_fractional_label,
        _ogb_feature_rows,
        _pyg_as_directory,
    )
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_graph_file_error_naming_file_and_problem(case, tmp_path):
    kwargs, bad_file, pattern = BAD_INPUTS[case](tmp_path)
    with pytest.raises(GraphFileError) as info:
        read_graph(**kwargs)
    message = str(info.value)
    assert message.startswith(f"{bad_file}:") or message.startswith(f"{bad_file}, line ")
    assert re.search(pattern, message), message
    assert isinstance(info.value, ValueError)


def test_detect_format_errors_are_graph_file_errors(tmp_path):
    with pytest.raises(GraphFileError, match="no such file or directory"):
        detect_format(tmp_path / "missing.npz")
    with pytest.raises(GraphFileError, match="not an OGB dataset directory: missing raw/"):
        detect_format(tmp_path)


def test_labels_table_missing_nodes_is_a_note_not_an_error(tmp_path):
    edges, labels = _edges_and_labels(tmp_path, "id\tlabel\nc\t4\n")
    g, notes = read_graph(edges, directed=True, labels=labels)
    np.testing.assert_array_equal(g.labels, [-1, -1, 4])
    assert notes == [
        "skipped the header line 1 of labels.tsv: 'id\\tlabel'",
        "set the label of 2 of 3 nodes to -1 (unlabelled): labels.tsv gives them none",
    ]


# ---------------------------------------------------------------------- registered formats

DASH_EDGES = [(0, 1), (1, 2), (2, 0), (2, 3)]


def _read_dash(path, directed, notes, name):
    """A format of the test's own: one edge ``a-b`` per line, nodes ``0..N-1``."""
    from jaxgraph.data.assemble import assemble
    from jaxgraph.data.text import read_text

    pairs = [token.split("-") for token in read_text(path).split()]
    try:
        src, dst = np.array(pairs, np.int64).reshape(-1, 2).T
    except ValueError as exc:
        raise GraphFileError(f"{path}: expected one edge 'a-b' per line ({exc})") from exc
    notes.append(f"read {path.name} as dash pairs")
    num_nodes = int(max(src.max(), dst.max())) + 1
    return assemble(path, src, dst, num_nodes, directed, notes, name, None)


def _dash_text(edges=DASH_EDGES) -> str:
    return "".join(f"{a}-{b}\n" for a, b in edges)


@pytest.fixture
def dash():
    """``dash`` registered for ``.dash`` files; removed again so that other tests see only the
    built-in formats."""
    from jaxgraph.data import register_format
    from jaxgraph.data.files import REGISTERED_FORMATS

    register_format("dash", _read_dash, suffixes=(".dash",))
    yield "dash"
    REGISTERED_FORMATS.pop("dash", None)
    REGISTERED_FORMATS.pop("other", None)  # a test's failed registration must not linger


def test_registered_format_reads_through_read_graph(dash, tmp_path):
    path = tmp_path / "toy.txt"  # an edge-list suffix: the format given wins
    path.write_text(_dash_text())
    g, notes = read_graph(path, format="dash", directed=False)
    assert edge_set(g) == both_ways(DASH_EDGES)
    assert g.name == "toy" and g.num_nodes == 4
    assert notes[0] == "read toy.txt as dash pairs"
    assert notes[1].startswith("added the reverse of")
    g, notes = read_graph(path, format="dash", directed=True, name="mine")
    assert edge_set(g) == set(DASH_EDGES) and g.name == "mine"
    with pytest.raises(GraphFileError, match="some edges have no reverse"):
        read_graph(path, format="dash")  # directed=None on a directed file: the reader refuses
    bad = tmp_path / "bad.dash"
    bad.write_text("0-1\n1-x\n")
    with pytest.raises(GraphFileError, match=re.escape(f"{bad}: expected one edge 'a-b'")):
        read_graph(bad, directed=True)


def test_registered_format_is_detected_by_suffix(dash, tmp_path):
    for name in ("toy.dash", "TOY.Dash", "toy.dash.gz"):
        path = tmp_path / name
        if name.endswith(".gz"):
            write_gz(path, _dash_text())
        else:
            path.write_text(_dash_text())
        assert detect_format(path) == "dash"
        g, notes = read_graph(path, directed=False)
        assert edge_set(g) == both_ways(DASH_EDGES) and g.name == name.split(".")[0]
        assert notes[0] == f"read {name} as dash pairs"
    other = tmp_path / "toy.dasher"
    other.write_text(_dash_text())
    with pytest.raises(GraphFileError, match="unsupported file type '.dasher'"):
        detect_format(other)


def test_errors_list_registered_formats(dash, tmp_path):
    path = tmp_path / "toy.json"
    path.write_text("{}")
    with pytest.raises(GraphFileError) as info:
        read_graph(path)
    message = str(info.value)
    assert message.startswith(f"{path}: unsupported file type '.json'; supported: .npz")
    assert message.endswith("; registered formats: dash (.dash, optionally .gz)")
    with pytest.raises(GraphFileError) as info:
        read_graph(path, format="graphml")
    assert str(info.value) == (
        f"{path}: unknown format 'graphml'; expected one of pyg, edgelist, scipy, ogb, dash"
    )
    assert GRAPH_FORMATS == ("pyg", "edgelist", "scipy", "ogb")  # the built-ins only


def test_registered_format_refuses_taken_names_and_suffixes(dash):
    from jaxgraph.data import register_format
    from jaxgraph.data.files import REGISTERED_FORMATS

    with pytest.raises(ValueError, match="graph format 'dash' is already registered"):
        register_format("dash", _read_dash)
    with pytest.raises(ValueError, match="graph format 'pyg' is built in"):
        register_format("pyg", _read_dash)
    with pytest.raises(ValueError, match=r"suffix '\.DASH' is already claimed \(format 'dash'\)"):
        register_format("other", _read_dash, suffixes=(".DASH",))
    with pytest.raises(ValueError, match=r"suffix '\.npz' is already claimed \(built in\)"):
        register_format("other", _read_dash, suffixes=(".npz",))
    with pytest.raises(ValueError, match=r"suffix '\.tsv' is already claimed \(built in\)"):
        register_format("other", _read_dash, suffixes=(".ok", ".tsv"))
    for bad in (".gz", "dash2", ".tar.gz", ".", ""):
        with pytest.raises(ValueError, match="a suffix is a dot and a word"):
            register_format("other", _read_dash, suffixes=(bad,))
    with pytest.raises(ValueError, match="must be a non-empty word"):
        register_format("two words", _read_dash)
    with pytest.raises(TypeError, match="not callable"):
        register_format("other", "read_dash")
    assert list(REGISTERED_FORMATS) == ["dash"]  # a refused registration adds nothing


def test_registered_format_reader_must_return_a_graph(dash, tmp_path):
    from jaxgraph.data import register_format

    register_format("other", lambda path, directed, notes, name: (None, notes))
    path = tmp_path / "toy.txt"
    path.write_text(_dash_text())
    with pytest.raises(TypeError, match="reader of graph format 'other' returned a tuple"):
        read_graph(path, format="other")


def test_registered_format_trains_from_the_command_line(dash, tmp_path, capsys):
    import json

    from jaxgraph.cli import job_from_args, main
    from jaxgraph.data import load_graph

    rng = np.random.default_rng(0)
    n = 24
    ring = [(i, (i + 1) % n) for i in range(n)] + [(i, (i + 5) % n) for i in range(0, n, 3)]
    path = tmp_path / "ring.dash"
    path.write_text(_dash_text(ring))
    np.save(tmp_path / "x.npy", rng.normal(size=(n, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.arange(n) % 2)
    data = ["--undirected", "--features", str(tmp_path / "x.npy")]
    data += ["--labels", str(tmp_path / "y.npy")]
    argv = ["train", "--graph", str(path), *data, "--parts", "2", "--epochs", "1"]
    argv += ["--hidden", "8", "--no-progress", "--workdir", str(tmp_path / "run")]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dataset"] == "ring" and summary["num_nodes"] == n
    assert summary["num_edges"] == 2 * len(ring) and np.isfinite(summary["final_loss"])
    # --format and a config file's data.format name it for a file of another suffix.
    other = tmp_path / "ring.edges"
    other.write_text(_dash_text(ring))
    job = job_from_args(["train", "--graph", str(other), "--format", "dash", *data])
    assert load_graph(job.data, split=True).num_edges == 2 * len(ring)
    config = tmp_path / "run.toml"
    config.write_text(f'[data]\ngraph = "{other}"\nformat = "dash"\ndirected = false\n')
    job = job_from_args(["train", "--config", str(config)])
    assert job.data.format == "dash"
    assert load_graph(job.data).num_edges == 2 * len(ring)
    assert main(["train", "--graph", str(other), "--format", "nope", *data]) == 2
    assert "unknown format 'nope'; expected one of pyg, edgelist, scipy, ogb, dash" in (
        capsys.readouterr().err
    )
