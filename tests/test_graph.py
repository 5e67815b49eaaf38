"""The graph container: construction, validation, normalisation."""

import numpy as np
import pytest

from jaxgraph.graph import Graph

from graph_cases import ALL_CASES


def test_duplicates_merged_and_rows_sorted():
    g = Graph.from_edges([2, 0, 2, 1], [1, 1, 1, 0], num_nodes=3, symmetrize=False)
    src, dst = g.edges()
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == [(1, 0), (0, 1), (2, 1)]
    assert g.num_edges == 3


def test_symmetrize_and_self_loop_options():
    directed = Graph.from_edges([0, 1, 2], [1, 2, 2], num_nodes=3, symmetrize=False)
    assert not directed.is_symmetric() and not directed.has_self_loops()
    sym = Graph.from_edges([0, 1], [1, 2], num_nodes=3, symmetrize=True)
    assert sym.is_symmetric() and sym.num_edges == 4
    kept = Graph.from_edges([0, 1, 2], [1, 2, 2], num_nodes=3, symmetrize=False, self_loops="keep")
    assert kept.has_self_loops() and kept.num_edges == 3
    with pytest.raises(ValueError, match="self_loops must be"):
        Graph.from_edges([0], [1], num_nodes=2, symmetrize=False, self_loops="drop")


@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_gcn_norm_matches_dense_formula(case):
    g = ALL_CASES[case]()
    a = g.adjacency().toarray().astype(np.float64)  # A[dst, src]
    a_hat = a + np.eye(g.num_nodes)
    d_in, d_out = a_hat.sum(1), a_hat.sum(0)
    expect = a_hat / np.sqrt(d_in)[:, None] / np.sqrt(d_out)[None, :]
    np.testing.assert_allclose(g.normalized_adjacency("gcn").toarray(), expect, rtol=1e-6)
    mean = a / np.maximum(a.sum(1), 1)[:, None]
    np.testing.assert_allclose(g.normalized_adjacency("mean").toarray(), mean, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(src=[0, -1], dst=[1, 0]), r"src\[1\] = -1 is not a node id in \[0, 3\)"),
        (dict(src=[0, 1], dst=[1, 7]), r"dst\[1\] = 7 is not a node id"),
        (dict(src=[0, 1], dst=[1]), "same length, got 2 and 1"),
        (dict(src=[0.5], dst=[1]), "not an integer node id"),
        (dict(src=[0], dst=[1], num_nodes=0), "empty graph"),
        (
            dict(src=[0], dst=[1], features=np.array([[1.0], [np.nan], [0.0]])),
            "features of node 1 contain NaN or inf",
        ),
        (dict(src=[0], dst=[1], features=np.zeros((2, 4))), r"features must have shape \[3, F\]"),
        (dict(src=[0], dst=[1], labels=np.zeros(5, int)), r"labels must have shape \[3\]"),
        (
            dict(
                src=[0],
                dst=[1],
                labels=np.array([0, -1, 1]),
                train_mask=np.array([True, True, False]),
            ),
            "selects node 1, which has no label",
        ),
    ],
)
def test_bad_input_errors(kwargs, message):
    kwargs = {"num_nodes": 3, "symmetrize": False, **kwargs}
    with pytest.raises(ValueError, match=message):
        Graph.from_edges(**kwargs)


def test_unsorted_csr_rejected():
    with pytest.raises(ValueError, match="in-edges of node 1 are not sorted"):
        Graph(
            indptr=np.array([0, 0, 2]),
            indices=np.array([1, 0]),
            features=np.zeros((2, 0)),
            labels=np.zeros(2, int),
            train_mask=np.zeros(2, bool),
            val_mask=np.zeros(2, bool),
            test_mask=np.zeros(2, bool),
        )


def test_multilabel_container():
    labels = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 0]], bool)
    g = Graph.from_edges([0], [1], num_nodes=3, symmetrize=True, labels=labels)
    assert g.multi_label and g.num_classes == 3
