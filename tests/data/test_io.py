"""Tests of the converters (jaxgraph.data.pyg, edgelist, adjacency, convert) and
Graph.from_edges: round trips and errors."""

from __future__ import annotations

import jraph
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgraph.data import (
    GraphFileError,
    from_edge_list,
    from_jraph,
    from_networkx,
    from_pyg_npz,
    from_scipy,
    save_pyg_npz,
    to_jraph,
    to_networkx,
)
from jaxgraph.graph import Graph

from graph_cases import ALL_CASES

FIELDS = ("indptr", "indices", "features", "labels", "train_mask", "val_mask", "test_mask")
CASES = sorted(ALL_CASES)


def assert_same_graph(a: Graph, b: Graph, fields=FIELDS) -> None:
    for f in fields:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype, f
        np.testing.assert_array_equal(x, y, err_msg=f)


def _keep_loops(g: Graph) -> str:
    return "keep" if g.has_self_loops() else "remove"


def multi_label_graph() -> Graph:
    rng = np.random.default_rng(0)
    labels = rng.random((30, 5)) < 0.3
    return Graph.from_edges(
        rng.integers(0, 30, 60),
        rng.integers(0, 30, 60),
        num_nodes=30,
        symmetrize=True,
        features=rng.standard_normal((30, 3)).astype(np.float32),
        labels=labels,
        train_mask=rng.random(30) < 0.5,
        name="multi",
    )


# ---------------------------------------------------------------------- graph_from_edges


@pytest.mark.parametrize("symmetrize", [True, False])
@pytest.mark.parametrize("self_loops", ["remove", "keep"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.uint16])
def test_from_edges_matches_unique_pairs(symmetrize, self_loops, dtype):
    rng = np.random.default_rng(7)
    src = rng.integers(0, 40, 300).astype(dtype)
    dst = rng.integers(0, 40, 300).astype(dtype)
    got = Graph.from_edges(src, dst, num_nodes=45, symmetrize=symmetrize, self_loops=self_loops)
    pairs = np.stack([src, dst], 1).astype(np.int64)
    if symmetrize:
        pairs = np.concatenate([pairs, pairs[:, ::-1]])
    if self_loops == "remove":
        pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs = np.unique(pairs, axis=0)
    pairs = pairs[np.lexsort((pairs[:, 0], pairs[:, 1]))]  # by (dst, src)
    got_src, got_dst = got.edges()
    np.testing.assert_array_equal(got_src, pairs[:, 0])
    np.testing.assert_array_equal(got_dst, pairs[:, 1])


@pytest.mark.parametrize("name", CASES)
def test_graph_from_edges_rebuilds_cases(name):
    g = ALL_CASES[name]()
    src, dst = g.edges()
    rebuilt = Graph.from_edges(
        src,
        dst,
        num_nodes=g.num_nodes,
        symmetrize=False,
        self_loops="keep",
        features=g.features,
        labels=g.labels,
        train_mask=g.train_mask,
        val_mask=g.val_mask,
        test_mask=g.test_mask,
        name=g.name,
    )
    assert_same_graph(rebuilt, g)
    assert rebuilt.name == g.name


@pytest.mark.parametrize(
    "src, dst, kwargs, match",
    [
        ([0, 5], [1, 2], dict(num_nodes=5), r"src\[1\] = 5 is not a node id in \[0, 5\)"),
        ([0, 1], [1, -1], dict(num_nodes=5), r"dst\[1\] = -1 is not a node id"),
        ([0, 1], [1], dict(num_nodes=5), "same length"),
        ([0.5], [1], dict(num_nodes=5), "not an integer node id"),
        ([0], [1], dict(num_nodes=0), "empty graph"),
        ([0], [1], dict(num_nodes=5, self_loops="drop"), "self_loops"),
    ],
)
def test_graph_from_edges_errors(src, dst, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Graph.from_edges(src, dst, symmetrize=False, **kwargs)


def test_graph_from_edges_no_edges():
    g = Graph.from_edges([], [], num_nodes=3, symmetrize=True)
    assert g.num_edges == 0 and g.indptr.tolist() == [0, 0, 0, 0]


# ---------------------------------------------------------------------- PyG npz


@pytest.mark.parametrize("name", CASES)
def test_pyg_npz_round_trip(name, tmp_path):
    g = ALL_CASES[name]()
    path = save_pyg_npz(g, tmp_path / "g.npz")
    back = from_pyg_npz(path, symmetrize=False, self_loops=_keep_loops(g))
    assert_same_graph(back, g)
    assert back.name == "g"
    with np.load(path) as z:
        src, dst = g.edges()
        np.testing.assert_array_equal(z["edge_index"], np.stack([src, dst]))
        assert z["edge_index"].dtype == np.int64 and int(z["num_nodes"]) == g.num_nodes


def test_pyg_npz_multi_label_and_exact_path(tmp_path):
    g = multi_label_graph()
    path = save_pyg_npz(g, tmp_path / "graph.data", compressed=False)
    assert path == tmp_path / "graph.data" and path.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["graph.data"]  # no temp file left
    assert_same_graph(from_pyg_npz(path, symmetrize=False, name="m"), g)


def test_pyg_npz_minimal_file(tmp_path):
    path = tmp_path / "min.npz"
    np.savez(path, edge_index=np.array([[0, 1, 3], [1, 2, 3]]), y=np.array([0, 1, 1, -1, 2]))
    g = from_pyg_npz(path, symmetrize=True)
    assert g.num_nodes == 5  # from y; the self-loop 3 -> 3 is removed
    assert g.edges()[0].tolist() == [1, 0, 2, 1]
    assert g.num_features == 0 and not g.train_mask.any()
    np.savez(path, edge_index=np.array([[0, 1], [1, 6]]))
    assert from_pyg_npz(path, symmetrize=False).num_nodes == 7


def test_pyg_npz_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="PyG npz file not found"):
        from_pyg_npz(tmp_path / "nope.npz", symmetrize=True)
    good = save_pyg_npz(ALL_CASES["random"](), tmp_path / "good.npz")
    data = good.read_bytes()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFileError, match=f"{truncated}: cannot read as an .npz archive"):
        from_pyg_npz(truncated, symmetrize=True)
    text = tmp_path / "text.npz"
    text.write_text("0 1\n1 2\n")
    with pytest.raises(GraphFileError, match=f"{text}: cannot read"):
        from_pyg_npz(text, symmetrize=True)
    no_edges = tmp_path / "no_edges.npz"
    np.savez(no_edges, x=np.zeros((3, 2)))
    with pytest.raises(GraphFileError, match="missing required array 'edge_index'"):
        from_pyg_npz(no_edges, symmetrize=True)
    bad_shape = tmp_path / "bad_shape.npz"
    np.savez(bad_shape, edge_index=np.zeros((3, 4), np.int64))
    with pytest.raises(GraphFileError, match=r"shape \[2, E\]"):
        from_pyg_npz(bad_shape, symmetrize=True)
    mismatch = tmp_path / "mismatch.npz"
    np.savez(mismatch, edge_index=np.array([[0], [1]]), x=np.zeros((3, 2)), y=np.zeros(4, int))
    with pytest.raises(GraphFileError, match=f"{mismatch}: inconsistent graph arrays"):
        from_pyg_npz(mismatch, symmetrize=True)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, edge_index=np.array([[0], [1]]), x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(GraphFileError, match=f"{pickled}: cannot read"):
        from_pyg_npz(pickled, symmetrize=True)


# ---------------------------------------------------------------------- edge lists


def test_edge_list_parsing(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("# a comment\n0 1\n\n1\t2  0.5\n2 0 # trailing comment\n4 4\n")
    g = from_edge_list(path, symmetrize=False)
    assert g.num_nodes == 5 and g.name == "edges"
    src, dst = g.edges()
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(2, 0), (0, 1), (1, 2)]
    g = from_edge_list(path, symmetrize=True, num_nodes=8, self_loops="keep")
    assert g.num_nodes == 8 and g.num_edges == 7 and g.has_self_loops()
    csv = tmp_path / "edges.csv"
    csv.write_text("%header\n3,1\n1, 2\n")
    g = from_edge_list(csv, symmetrize=True, delimiter=",", comments="%")
    assert g.num_nodes == 4 and g.num_edges == 4


def test_edge_list_relabel(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("100 7\n7 30\n")
    g, ids = from_edge_list(path, symmetrize=False, relabel=True, return_ids=True)
    assert ids.tolist() == [7, 30, 100]  # numeric order, not string order
    src, dst = g.edges()
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(2, 0), (0, 1)]
    names = tmp_path / "names.txt"
    names.write_text("bob alice\nalice carol\n")
    g, ids = from_edge_list(names, symmetrize=True, relabel=True, return_ids=True)
    assert ids.tolist() == ["alice", "bob", "carol"] and g.num_edges == 4
    g, ids = from_edge_list(tmp_path / "ids.txt", symmetrize=True, return_ids=True)
    assert g.num_nodes == 101 and ids.tolist() == list(range(101))


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        ("0 1\n1 x\n", {}, r"line 2: 'x' is not an integer node id"),
        ("# c\n0 1\n\n2\n", {}, r"line 4: expected two node ids 'src dst', got '2'"),
        ("0 1\n1.5 2\n", {}, r"line 2: '1.5' is not an integer node id"),
        ("0 1\n# c\n-3 2\n", {}, r"line 3: negative node id"),
        ("0 1\n\n1 9\n", dict(num_nodes=5), r"line 3: node id >= num_nodes = 5"),
        ("a b\nb c\n", dict(relabel=True, num_nodes=2), "3 distinct node ids but num_nodes = 2"),
        ("# nothing\n", {}, "no edges found and num_nodes not given"),
    ],
)
def test_edge_list_errors(tmp_path, text, kwargs, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(GraphFileError, match=f"{path}(, |: ){match}"):
        from_edge_list(path, symmetrize=True, **kwargs)


def test_edge_list_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="edge list file not found"):
        from_edge_list(tmp_path / "missing.txt", symmetrize=True)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01 1\n")
    with pytest.raises(GraphFileError, match=f"{binary}: not a UTF-8 text edge list"):
        from_edge_list(binary, symmetrize=True)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert from_edge_list(empty, symmetrize=True, num_nodes=3).num_edges == 0


# ---------------------------------------------------------------------- scipy


@pytest.mark.parametrize("name", CASES)
def test_scipy_round_trip(name):
    g = ALL_CASES[name]()
    back = from_scipy(
        g.adjacency(),
        symmetrize=False,
        self_loops=_keep_loops(g),
        features=g.features,
        labels=g.labels,
        train_mask=g.train_mask,
        val_mask=g.val_mask,
        test_mask=g.test_mask,
    )
    assert_same_graph(back, g)


def test_scipy_convention_and_inputs():
    dense = np.zeros((3, 3))
    dense[1, 0] = 2.5  # A[dst=1, src=0]: the edge 0 -> 1
    g = from_scipy(dense, symmetrize=False)
    assert [a.tolist() for a in g.edges()] == [[0], [1]]
    np.testing.assert_array_equal(g.adjacency().toarray() != 0, dense != 0)
    explicit_zero = sp.csr_array((np.array([0.0, 1.0]), (np.array([0, 2]), np.array([1, 1]))),
                                 shape=(3, 3))  # fmt: skip
    g = from_scipy(explicit_zero, symmetrize=False)
    assert [a.tolist() for a in g.edges()] == [[1], [2]]  # the stored zero is not an edge
    # networkx's to_scipy_sparse_array is A[src, dst]: transpose it
    d = nx.DiGraph([(0, 1), (1, 2), (2, 0), (0, 2)])
    g = from_scipy(nx.to_scipy_sparse_array(d, nodelist=[0, 1, 2]).T, symmetrize=False)
    assert_same_graph(g, from_networkx(d), fields=("indptr", "indices"))
    with pytest.raises(ValueError, match="square"):
        from_scipy(np.zeros((2, 3)), symmetrize=True)
    with pytest.raises(ValueError, match="2-D"):
        from_scipy(np.zeros(4), symmetrize=True)


# ---------------------------------------------------------------------- networkx


@pytest.mark.parametrize("name", CASES)
def test_networkx_round_trip(name):
    g = ALL_CASES[name]()
    nxg = to_networkx(g)
    assert nxg.is_directed() == (not g.is_symmetric())
    assert nxg.number_of_nodes() == g.num_nodes
    back = from_networkx(nxg, feature_attr="x", label_attr="y", self_loops=_keep_loops(g))
    assert_same_graph(back, g)
    assert back.name == g.name
    directed = to_networkx(g, directed=True)
    assert directed.number_of_edges() == g.num_edges
    structure = from_networkx(directed, self_loops=_keep_loops(g))
    assert_same_graph(structure, g, fields=FIELDS[:2])
    assert not structure.train_mask.any()  # masks are read only together with labels


def test_networkx_multi_label_and_no_features():
    g = multi_label_graph()
    assert_same_graph(from_networkx(to_networkx(g), feature_attr="x", label_attr="y"), g)
    bare = g.replace(features=np.zeros((30, 0), np.float32))
    nxg = to_networkx(bare)
    assert "x" not in nxg.nodes[0]
    assert_same_graph(from_networkx(nxg, label_attr="y"), bare)


def test_from_networkx_node_keys_and_attributes():
    nxg = nx.Graph()
    nxg.add_node("c", feat=[1.0, 2.0], cls=1, train_mask=True)
    nxg.add_node("a", feat=[3.0, 4.0], cls=0)
    nxg.add_node("b", feat=[5.0, 6.0])  # no label -> -1
    nxg.add_edges_from([("a", "b"), ("b", "c"), ("c", "c")])
    g, ids = from_networkx(nxg, feature_attr="feat", label_attr="cls", return_ids=True)
    assert ids == ["c", "a", "b"]  # g.nodes order
    assert g.labels.tolist() == [1, 0, -1]
    assert g.train_mask.tolist() == [True, False, False]
    np.testing.assert_array_equal(g.features, [[1, 2], [3, 4], [5, 6]])
    assert g.is_symmetric() and not g.has_self_loops() and g.num_edges == 4
    multi = nx.MultiDiGraph([(0, 1), (0, 1), (1, 0)])
    assert from_networkx(multi).num_edges == 2  # parallel edges merged
    assert from_networkx(multi, symmetrize=False).is_symmetric()
    with pytest.raises(ValueError, match="node 'b' has no feature attribute 'cls'"):
        from_networkx(nxg, feature_attr="cls")
    with pytest.raises(ValueError, match="empty graph"):
        from_networkx(nx.Graph())


# ---------------------------------------------------------------------- jraph


@pytest.mark.parametrize("name", CASES)
def test_jraph_round_trip(name):
    g = ALL_CASES[name]()
    gt = to_jraph(g)
    assert isinstance(gt, jraph.GraphsTuple)
    src, dst = g.edges()
    np.testing.assert_array_equal(gt.senders, src)
    np.testing.assert_array_equal(gt.receivers, dst)
    assert gt.senders.dtype == np.int32 and gt.edges is None and gt.globals is None
    assert gt.n_node.tolist() == [g.num_nodes] and gt.n_edge.tolist() == [g.num_edges]
    np.testing.assert_array_equal(gt.nodes, g.features)
    back = from_jraph(
        gt,
        symmetrize=False,
        self_loops=_keep_loops(g),
        labels=g.labels,
        train_mask=g.train_mask,
        val_mask=g.val_mask,
        test_mask=g.test_mask,
    )
    assert_same_graph(back, g)


def test_from_jraph_batch_and_dict_nodes():
    a, b = ALL_CASES["directed"](), ALL_CASES["random"]()
    batch = jraph.batch([to_jraph(a), to_jraph(b)])  # jax.tree_util based: works
    g = from_jraph(batch, symmetrize=False)
    assert g.num_nodes == a.num_nodes + b.num_nodes
    assert g.num_edges == a.num_edges + b.num_edges
    np.testing.assert_array_equal(g.features, np.concatenate([a.features, b.features]))
    gt = to_jraph(a)._replace(nodes={"x": a.features, "pos": np.zeros((a.num_nodes, 2))})
    assert from_jraph(gt, symmetrize=False, feature_key="x").num_features == a.num_features
    with pytest.raises(ValueError, match="pass feature_key="):
        from_jraph(gt, symmetrize=False)
    featureless = to_jraph(a)._replace(nodes=None)
    assert from_jraph(featureless, symmetrize=False).num_features == 0
    broken = to_jraph(a)._replace(n_edge=np.array([3], np.int32))
    with pytest.raises(ValueError, match=r"sum\(n_edge\) = 3"):
        from_jraph(broken, symmetrize=False)
