"""Tests of jaxgraph.data.synthetic: the DC-SBM and R-MAT generators."""

from __future__ import annotations

import numpy as np
import pytest

from jaxgraph.data.synthetic import dc_sbm, rmat
from jaxgraph.graph import Graph


def _same(a: Graph, b: Graph) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("indptr", "indices", "features", "labels", "train_mask", "val_mask", "test_mask")
    )


def _nearest_centroid_accuracy(x: np.ndarray, g: Graph) -> float:
    """Test accuracy of a nearest-class-mean classifier fitted on the training nodes."""
    c = g.num_classes
    y = g.labels
    means = np.stack([x[g.train_mask & (y == k)].mean(0) for k in range(c)])
    dist = ((x[g.test_mask, None, :] - means[None]) ** 2).sum(-1)
    return float((dist.argmin(1) == y[g.test_mask]).mean())


# ---------------------------------------------------------------------- dc_sbm


@pytest.fixture(scope="module")
def sbm():
    return dc_sbm(4000, 4, 10.0, seed=0)


def test_dc_sbm_shapes_and_structure(sbm):
    g = sbm
    assert g.num_nodes == 4000 and g.name == "dc_sbm_n4000_c4"
    assert g.features.shape == (4000, 32) and g.features.dtype == np.float32
    assert g.labels.dtype == np.int32 and g.num_classes == 4
    assert g.is_symmetric() and not g.has_self_loops()
    # 20,000 sampled pairs; repeated pairs (mostly at the hubs) and self-loops collapse
    assert 0.8 * 40_000 <= g.num_edges <= 40_000
    np.testing.assert_array_equal(np.bincount(g.labels), [1000] * 4)  # balanced classes


def test_dc_sbm_split(sbm):
    g = sbm
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (2400, 800, 800)
    total = g.train_mask.astype(int) + g.val_mask + g.test_mask
    assert total.max() == 1 and total.sum() == 4000
    p = dc_sbm(700, 7, 6.0, train_per_class=20, split=(0.0, 0.2, 0.4), seed=2)
    np.testing.assert_array_equal(np.bincount(p.labels[p.train_mask]), [20] * 7)
    assert (p.val_mask.sum(), p.test_mask.sum()) == (140, 280)
    assert not (p.train_mask & (p.val_mask | p.test_mask)).any()


def test_dc_sbm_deterministic():
    a = dc_sbm(500, 3, 8.0, seed=5)
    b = dc_sbm(500, 3, 8.0, seed=5)
    c = dc_sbm(500, 3, 8.0, seed=6)
    assert _same(a, b)
    assert not np.array_equal(a.indices, c.indices)


@pytest.mark.parametrize("homophily", [0.2, 0.7, 0.95])
def test_dc_sbm_edge_homophily(homophily):
    g = dc_sbm(6000, 5, 12.0, homophily=homophily, num_features=0, seed=1)
    src, dst = g.edges()
    measured = float((g.labels[src] == g.labels[dst]).mean())
    assert abs(measured - homophily) < 0.04  # hubs make the realized ratio fluctuate
    assert g.features.shape == (6000, 0)


def test_dc_sbm_degree_heavy_tail():
    skewed = dc_sbm(5000, 4, 10.0, degree_exponent=2.2, num_features=0, seed=0).in_degree()
    flat = dc_sbm(5000, 4, 10.0, degree_exponent=None, num_features=0, seed=0).in_degree()
    assert skewed.max() > 20 * skewed.mean()
    assert flat.max() < 3 * flat.mean()


def test_dc_sbm_features_are_informative_but_not_trivial(sbm):
    """Raw features alone are weak; averaging over neighbours (GCN propagation) helps a lot."""
    g = sbm
    a = g.normalized_adjacency("gcn")
    ax = a @ g.features
    acc_raw = _nearest_centroid_accuracy(g.features, g)
    acc_1 = _nearest_centroid_accuracy(ax, g)
    acc_2 = _nearest_centroid_accuracy(a @ ax, g)
    assert 0.35 < acc_raw < 0.65
    assert acc_1 > acc_raw + 0.1
    assert 0.7 < acc_2 < 0.95 and acc_2 > acc_1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_nodes=3, num_classes=5), "num_nodes >= num_classes"),
        (dict(homophily=1.5), "homophily"),
        (dict(degree_exponent=1.0), "degree_exponent"),
        (dict(avg_degree=0.0), "avg_degree"),
    ],
)
def test_dc_sbm_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dc_sbm(**{"num_nodes": 100, **kwargs})


def test_dc_sbm_single_class():
    g = dc_sbm(200, 1, 5.0, seed=0)
    assert g.num_classes == 1 and g.is_symmetric()


# ---------------------------------------------------------------------- rmat


def test_rmat_sizes_and_structure():
    g = rmat(1000, 8000, symmetrize=True, seed=0)
    assert g.num_nodes == 1000 and g.name == "rmat_n1000_e8000"
    assert g.is_symmetric() and not g.has_self_loops()
    assert 8000 < g.num_edges <= 16000
    assert g.features.shape == (1000, 0)
    assert (g.labels == -1).all() and not g.train_mask.any()


def test_rmat_directed_and_scale():
    g = rmat(scale=10, num_edges=5000, symmetrize=False, seed=1)
    assert g.num_nodes == 1024
    assert not g.is_symmetric()
    assert g.num_edges <= 5000
    default = rmat(scale=6, symmetrize=False, seed=1, self_loops="keep")
    assert default.name == "rmat_n64_e1024"  # 16 edges per node by default


def test_rmat_deterministic():
    a = rmat(3000, 20000, symmetrize=True, seed=3, num_features=4)
    b = rmat(3000, 20000, symmetrize=True, seed=3, num_features=4)
    c = rmat(3000, 20000, symmetrize=True, seed=4, num_features=4)
    assert _same(a, b)
    assert not np.array_equal(a.indices, c.indices)
    assert a.features.shape == (3000, 4) and a.features.dtype == np.float32


def test_rmat_heavy_tail_and_permutation():
    kept = rmat(scale=12, num_edges=40_000, symmetrize=False, permute=False, seed=2)
    perm = rmat(scale=12, num_edges=40_000, symmetrize=False, permute=True, seed=2)
    deg = kept.out_degree()
    assert deg.max() > 20 * deg.mean()
    assert int(deg.argmax()) == 0  # unpermuted, node 0 (quadrant a at every level) is the hub
    assert int(perm.out_degree().argmax()) != 0
    # the permutation only relabels: same degree sequence, same edge count
    np.testing.assert_array_equal(np.sort(deg), np.sort(perm.out_degree()))
    np.testing.assert_array_equal(np.sort(kept.in_degree()), np.sort(perm.in_degree()))


def test_rmat_uniform_probabilities_are_not_skewed():
    g = rmat(scale=12, num_edges=40_000, a=0.25, b=0.25, c=0.25, d=0.25, noise=0.0,
             symmetrize=False, seed=0)  # fmt: skip
    deg = g.out_degree()
    assert deg.max() < 3 * deg.mean()


def test_rmat_non_power_of_two_nodes():
    g = rmat(1500, 30_000, symmetrize=False, permute=False, self_loops="keep", seed=0)
    assert g.num_nodes == 1500
    src, dst = g.edges()
    assert src.max() < 1500 and dst.max() < 1500
    assert g.has_self_loops()


def test_rmat_random_labels_for_benchmarks():
    g = rmat(2000, 10_000, num_classes=4, num_features=8, seed=0)
    assert g.is_symmetric()  # symmetrize defaults to True
    assert g.num_classes == 4 and np.unique(g.labels).tolist() == [0, 1, 2, 3]
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (1200, 400, 400)
    assert g.features.shape == (2000, 8)
    plain = rmat(2000, 10_000, seed=0)
    np.testing.assert_array_equal(plain.indices, g.indices)  # labels do not change the edges


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(), "exactly one of num_nodes and scale"),
        (dict(num_nodes=10, scale=3), "exactly one of num_nodes and scale"),
        (dict(num_nodes=10, a=0.5), "sum to 1"),
        (dict(num_nodes=10, noise=0.5), "noise"),
        (dict(num_nodes=10, num_classes=-1), "non-negative"),
    ],
)
def test_rmat_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rmat(symmetrize=True, **kwargs)
