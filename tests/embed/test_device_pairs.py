"""Skip-gram pairs built on the device: the 64-bit stream arithmetic against the host's
SplitMix64, the pairs against the host enumeration (same pairs, same order), and the trainer
with ``pairs="device"`` against ``pairs="host"`` (identical tables and update counts)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed import device_pairs as dp
from jaxgraph.embed.corpus import corpus_counts, keep_probability, skipgram_pairs
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.sizes import padded_size
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.sync import HotspotSync
from jaxgraph.embed.walks import PAD, WalkConfig, Walks, random_walks
from jaxgraph.mesh import make_mesh

from graph_cases import power_law

AXIS = "parts"
U64 = st.integers(0, (1 << 64) - 1)


def _join(x: dp.U64) -> np.ndarray:
    return (np.asarray(x.hi, np.uint64) << np.uint64(32)) | np.asarray(x.lo, np.uint64)


def _split(values) -> dp.U64:
    return dp.U64(*map(jnp.asarray, dp.split_u64(values)))


@settings(max_examples=30, deadline=None)
@given(key=U64, ids=st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=8))
def test_streams_and_draws_equal_splitmix64(key, ids):
    key = np.uint64(key)
    kw = dp.key_words(key)
    s0 = dp.stream(dp.U64(jnp.uint32(kw[0]), jnp.uint32(kw[1])), jnp.asarray(ids, jnp.uint32))
    expect0 = [np.uint64(hr.stream(key, i)) for i in ids]
    np.testing.assert_array_equal(_join(s0), expect0)
    for i, state in zip(range(len(ids)), expect0, strict=True):
        draws = _join(dp.draw(dp.U64(s0.hi[i], s0.lo[i]), jnp.arange(5, dtype=jnp.uint32)))
        for k in range(5):
            state, z = hr.next_u64(np.uint64(state))
            assert draws[k] == np.uint64(z)


@settings(max_examples=30, deadline=None)
@given(a=U64, b=U64)
def test_limb_multiply_and_modulo(a, b):
    prod = dp._mul(_split([a]), _split([b]))
    assert int(_join(prod)[0]) == (a * b) % (1 << 64)
    for n in (1, 3, 10, 4096):
        assert int(dp._below(_split([a]), n)[0]) == a % n


def test_keep_threshold_is_the_exact_float64_test():
    # u = m 2^-53 < p exactly when m < ceil(p 2^53), also for p at and next to a grid point.
    grid = np.array([0.0, 0.25, 1 / 3, 0.5 + 2.0**-53, 1.0, np.nextafter(0.5, 0)])
    hi, lo = dp.keep_thresholds(grid)
    t = (hi.astype(np.uint64) << np.uint64(32)) | lo
    for p, thr in zip(grid, t, strict=True):
        for m in (int(thr) - 1, int(thr), int(thr) + 1):
            if 0 <= m < 2**53:
                assert (m * 2.0**-53 < p) == (m < int(thr))


def _device(walks, ids, keep, window, key, capacity=None):
    th, tl = dp.keep_thresholds(keep)
    i, o, c = dp.skipgram_pairs_device(
        walks.nodes,
        walks.lengths,
        np.asarray(ids, np.uint32),
        th,
        tl,
        dp.key_words(key),
        window=window,
        capacity=capacity,
    )
    return np.asarray(i), np.asarray(o), int(c)


@settings(max_examples=15, deadline=None)  # each new shape compiles the program
@given(
    rows=st.lists(st.lists(st.integers(0, 9), min_size=0, max_size=12), min_size=1, max_size=6),
    window=st.integers(1, 5),
    sample=st.sampled_from([0.0, 0.05, 0.3]),
    seed=st.integers(0, 3),
)
def test_device_pairs_equal_host_pairs(rows, window, sample, seed):
    width = max(1, max(len(r) for r in rows))
    nodes = np.full((len(rows), width), PAD, np.int32)
    for i, r in enumerate(rows):
        nodes[i, : len(r)] = r
    walks = Walks(nodes, np.array([len(r) for r in rows], np.int32))
    keep = keep_probability(corpus_counts(walks, 10), sample)
    ids = np.arange(len(rows)) * 5 + 2
    key = hr.round_key(seed, hr.PURPOSE_PAIRS, 1)
    ins, outs = skipgram_pairs(walks, ids, keep, window, key)
    d_in, d_out, count = _device(walks, ids, keep, window, key)
    assert count == ins.size
    np.testing.assert_array_equal(d_in[:count], ins)
    np.testing.assert_array_equal(d_out[:count], outs)
    assert not d_in[count:].any() and not d_out[count:].any()  # zero past the count


def test_device_pairs_on_real_walks_and_a_short_buffer():
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=20), seed=1)
    keep = keep_probability(corpus_counts(walks, g.num_nodes), 1e-2)
    ids = np.arange(walks.num_walks)
    key = hr.round_key(7, hr.PURPOSE_PAIRS, 0)
    ins, outs = skipgram_pairs(walks, ids, keep, 4, key)
    d_in, d_out, count = _device(walks, ids, keep, 4, key)
    assert count == ins.size > 1000
    np.testing.assert_array_equal(d_in[:count], ins)
    np.testing.assert_array_equal(d_out[:count], outs)
    # A buffer shorter than the pairs keeps the first ones and still counts them all.
    s_in, _, s_count = _device(walks, ids, keep, 4, key, capacity=100)
    assert s_count == count and s_in.shape == (100,)
    np.testing.assert_array_equal(s_in, ins[:100])


def test_device_counts_ignore_padding():
    nodes = np.array([[1, 2, 2, 7], [3, 3, 9, 9], [5, 5, 5, 5]], np.int32)
    lengths = np.array([3, 1], np.int32)  # the third row is padding past the corpus
    got = np.asarray(dp.device_counts(nodes, lengths, num_nodes=8))
    np.testing.assert_array_equal(got, np.bincount([1, 2, 2, 3], minlength=8))


@pytest.mark.parametrize("num_parts,on_device", [(1, False), (4, True)])
def test_trainer_device_pairs_equal_host_pairs(num_parts, on_device):
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=8), seed=0)
    # The JAX program, which trains host- and device-built pairs alike.
    cfg = SkipGramConfig(dim=8, window=3, negatives=2, batch_size=16, sync_every=4, kernel="jax")
    mesh = make_mesh(num_parts, AXIS)
    runs = {}
    for mode in ("host", "device"):
        tr = SkipGramTrainer(
            g.num_nodes,
            dataclasses.replace(cfg, pairs=mode),
            mesh,
            seed=3,
            sync=HotspotSync(full_every=3),
        )
        feed = walks
        if mode == "device" and on_device:
            nodes = np.concatenate([walks.nodes, np.full((5, 8), PAD, np.int32)])  # padded rows
            feed = dp.DeviceWalks(jax.device_put(nodes, jax.devices()[0]), walks.lengths)
        stats = [tr.train_round(feed, r) for r in range(2)]
        runs[mode] = (tr.embeddings(), tr.update_counts.copy(), stats)
    (host_t, host_u, host_s), (dev_t, dev_u, dev_s) = runs["host"], runs["device"]
    for a, b in zip(host_t, dev_t, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(host_u, dev_u)
    for a, b in zip(host_s, dev_s, strict=True):
        assert (a.pairs, a.steps, a.syncs, a.sync_rows) == (b.pairs, b.steps, b.syncs, b.sync_rows)
        assert a.loss == pytest.approx(b.loss, rel=1e-6)
        # Host pairs: 12 bytes per buffered pair slot (input, output, weight); here 1.6 pairs
        # per token. Device pairs: the walk rows (4 bytes per slot, unless they were decoded
        # on a device already) and 8 bytes per row (length, stream id).
        rows = num_parts * padded_size(-(-walks.num_walks // num_parts))
        assert b.input_bytes == rows * (0 if on_device else 4 * 8) + rows * 8
        assert a.input_bytes >= 12 * a.pairs > 3 * b.input_bytes


def test_device_pairs_config_errors():
    with pytest.raises(ValueError, match="pairs must be 'host' or 'device'"):
        SkipGramConfig(pairs="gpu")
    with pytest.raises(ValueError, match="needs window <= 4096"):
        SkipGramConfig(pairs="device", window=5000)
