"""The per-pair transfer time model: fitting, presets, topology, serialization, measuring."""

import json

import numpy as np
import pytest

from jaxgraph.comm.costmodel import PRESETS, CostModel, fit, fit_line, measure
from jaxgraph.mesh import make_mesh

MIB = 2**20


def _samples(rng, theta, gamma, sigma, repeats=5):
    x = np.repeat(np.linspace(0.1, 10.0, 8), repeats)
    return x, theta * x + gamma + rng.normal(0.0, sigma, x.size)


def _standard_errors(x, sigma):
    """Standard errors of the least-squares slope and intercept under noise ``sigma``."""
    sxx = np.sum((x - x.mean()) ** 2)
    return sigma / np.sqrt(sxx), sigma * np.sqrt(1.0 / x.size + x.mean() ** 2 / sxx)


def test_fit_recovers_a_known_line_within_the_noise():
    rng = np.random.default_rng(0)
    theta, gamma, sigma = 2e-3, 5e-5, 1e-5
    x, y = _samples(rng, theta, gamma, sigma)
    t, g, rms = fit_line(x, y)
    se_t, se_g = _standard_errors(x, sigma)
    assert abs(t - theta) < 5 * se_t
    assert abs(g - gamma) < 5 * se_g
    assert rms == pytest.approx(sigma, rel=0.3)  # 40 samples: the RMS residual estimates sigma


def test_fit_per_pair():
    rng = np.random.default_rng(1)
    p, sigma = 3, 1e-6
    theta = rng.uniform(1e-4, 1e-2, (p, p))
    gamma = rng.uniform(1e-6, 1e-4, (p, p))
    sizes = np.repeat(np.geomspace(0.01, 4.0, 6), 3)
    times = theta[..., None] * sizes + gamma[..., None] + rng.normal(0, sigma, (p, p, sizes.size))
    model, resid = fit(sizes, times)
    se_t, se_g = _standard_errors(sizes, sigma)
    off = ~np.eye(p, dtype=bool)
    assert np.all(np.abs(model.theta - theta)[off] < 5 * se_t)
    assert np.all(np.abs(model.gamma - gamma)[off] < 5 * se_g)
    assert np.all(np.diag(model.theta) == 0) and np.all(np.diag(resid) == 0)
    assert resid.shape == (p, p) and np.all(resid[off] > 0)


def test_negative_slope_clamps_theta_to_zero():
    x = np.repeat([1.0, 2.0, 3.0], 2)
    y = np.array([3.0, 3.2, 2.0, 2.2, 1.0, 1.2]) * 1e-4  # falling with size
    theta, gamma, _ = fit_line(x, y)
    assert theta == 0.0
    assert gamma == pytest.approx(y.mean(), rel=1e-9)


def test_presets_give_the_nominal_numbers():
    p = 4
    ten = CostModel.from_preset("10gbe", p)
    assert ten.time(0, 1, 1.0) == pytest.approx(MIB / 1.25e9 + PRESETS["10gbe"].alpha, rel=1e-12)
    assert CostModel.from_preset("pcie3x16", p).theta[1, 2] == pytest.approx(MIB / 15.75e9)
    assert CostModel.from_preset("nvlink3", p).theta[3, 0] == pytest.approx(MIB / 300e9)
    assert CostModel.from_preset("ib_edr", p).theta[0, 3] == pytest.approx(MIB / 12.5e9)
    for name in PRESETS:
        m = CostModel.from_preset(name, p)
        assert m.theta.shape == m.gamma.shape == (p, p) and m.num_parts == p
        assert np.all(np.diag(m.theta) == 0) and np.all(np.diag(m.gamma) == 0)
        assert PRESETS[name].source  # every figure states where it comes from
    doubled = CostModel.from_preset("10gbe", p, scale=2.0)
    assert doubled.time(0, 1, 1.0) == pytest.approx(2 * ten.time(0, 1, 1.0))


def test_two_level_topology_makes_inter_host_pairs_slower():
    m = CostModel.from_preset("nvlink3", 4, nodes=2, inter="10gbe")  # hosts {0, 1} and {2, 3}
    assert m.channel(0, 1) == m.channel(3, 2) == (MIB / 300e9, PRESETS["nvlink3"].alpha)
    assert m.channel(1, 2) == (MIB / 1.25e9, PRESETS["10gbe"].alpha)
    for s, r in [(0, 2), (0, 3), (1, 2), (3, 0)]:
        assert m.time(s, r, 1.0) > 100 * m.time(0, 1, 1.0)


def test_dict_round_trip_through_json():
    m = CostModel.from_preset("pcie3x16", 3, nodes=3, inter="100gbe")
    back = CostModel.from_dict(json.loads(json.dumps(m.to_dict())))
    np.testing.assert_array_equal(back.theta, m.theta)
    np.testing.assert_array_equal(back.gamma, m.gamma)
    assert back.source == m.source


@pytest.mark.parametrize("num_parts", [2, 4])
def test_measure_on_the_emulated_mesh(num_parts):
    m = measure(make_mesh(num_parts), sizes_bytes=[1024, 256 * 1024], repeats=2)
    for a in (m.theta, m.gamma):
        assert a.shape == (num_parts, num_parts)
        assert np.all(np.isfinite(a)) and np.all(a >= 0)
    off = ~np.eye(num_parts, dtype=bool)
    assert np.all(m.time(0, 1, 1.0) > 0) and np.all((m.theta + m.gamma)[off] > 0)


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"unknown interconnect preset 'ethernet'.*10gbe"):
        CostModel.from_preset("ethernet", 2)
    with pytest.raises(ValueError, match="3 sizes but 2 times"):
        fit_line([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least 2 distinct sizes"):
        fit_line([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"times_s must have shape \[P, P, 2\]"):
        fit([1.0, 2.0], np.zeros((2, 3, 2)))
    with pytest.raises(ValueError, match="divide"):
        CostModel.from_preset("nvlink3", 4, nodes=3, inter="10gbe")
    with pytest.raises(ValueError, match="inter preset"):
        CostModel.from_preset("nvlink3", 4, nodes=2)
    with pytest.raises(ValueError, match="non-negative"):
        CostModel(theta=-np.ones((2, 2)), gamma=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="at least 2 distinct sizes"):
        measure(make_mesh(2), sizes_bytes=[64, 64], repeats=1)
