"""Host planning of skip-gram data: sub-sampling, windows, pairs, counts, alias tables."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed.corpus import (
    alias_table,
    corpus_counts,
    keep_probability,
    negative_weights,
    pack_steps,
    pairs_per_walk,
    skipgram_pairs,
)
from jaxgraph.embed.walks import PAD, Walks

KEY = hr.round_key(0, hr.PURPOSE_PAIRS, 0)


def _walks(rows: list[list[int]], width: int | None = None, pad: int = PAD) -> Walks:
    width = width or max(len(r) for r in rows)
    nodes = np.full((len(rows), width), pad, np.int32)
    for i, r in enumerate(rows):
        nodes[i, : len(r)] = r
    return Walks(nodes, np.array([len(r) for r in rows], np.int32))


def _reference_pairs(walks, walk_ids, keep_prob, window, key):
    """word2vec's skip-gram enumeration, in plain Python, on the same random streams."""
    u64 = np.uint64  # numba returns streams as Python ints; hand them back as uint64
    pairs = []
    for row, n, wid in zip(walks.nodes, walks.lengths, walk_ids, strict=True):
        state = u64(hr.stream(key, int(wid)))
        kept = []
        for v in row[:n]:
            state, u = hr.next_uniform(u64(state))
            if u < keep_prob[v]:
                kept.append(int(v))
        for j in range(len(kept)):
            state, b = hr.next_below(u64(state), window)
            reach = window - b
            for c in range(max(0, j - reach), min(len(kept), j + reach + 1)):
                if c != j:
                    pairs.append((kept[c], kept[j]))
    return pairs


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=12), min_size=1, max_size=6),
    window=st.integers(1, 4),
    sample=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_pairs_equal_the_word2vec_enumeration(rows, window, sample):
    walks = _walks(rows)
    keep = keep_probability(corpus_counts(walks, 10), sample)
    ids = np.arange(len(rows)) * 7 + 3
    ins, outs = skipgram_pairs(walks, ids, keep, window, KEY)
    assert ins.dtype == np.int32 and outs.dtype == np.int32
    assert list(zip(ins.tolist(), outs.tolist(), strict=True)) == _reference_pairs(
        walks, ids, keep, window, KEY
    )


def test_padding_is_never_read_and_pairs_do_not_depend_on_the_split():
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 50, rng.integers(1, 30)).tolist() for _ in range(40)]
    keep = keep_probability(np.arange(50) + 1, 0.02)
    ids = np.arange(40)
    a = skipgram_pairs(_walks(rows, 32), ids, keep, 5, KEY)
    b = skipgram_pairs(_walks(rows, 32, pad=49), ids, keep, 5, KEY)  # a valid id as padding
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    # Walks 0..19 and 20..39 separately (as on two devices): the same pairs, in order.
    first = skipgram_pairs(_walks(rows[:20], 32), ids[:20], keep, 5, KEY)
    second = skipgram_pairs(_walks(rows[20:], 32), ids[20:], keep, 5, KEY)
    for x, y, z in zip(a, first, second, strict=True):
        np.testing.assert_array_equal(x, np.concatenate([y, z]))


def test_effective_window_is_uniform():
    w, n = 5, 20_000
    length = 2 * w + 1
    # Walk i holds its own ids i * length + (0..2w); its middle token sees 2 * reach contexts.
    nodes = (np.arange(n)[:, None] * length + np.arange(length)[None, :]).astype(np.int32)
    walks = Walks(nodes, np.full(n, length, np.int32))
    _, outs = skipgram_pairs(walks, np.arange(n), np.ones(n * length), w, KEY)
    per_centre = np.bincount(outs, minlength=n * length)[nodes[:, w]]
    assert np.all(per_centre % 2 == 0)
    counts = np.bincount(per_centre // 2, minlength=w + 1)
    assert counts[0] == 0 and counts.sum() == n
    assert stats.chisquare(counts[1:]).pvalue > 1e-3


def test_subsampling_keep_rate_matches_the_formula():
    counts = np.array([1000, 30, 10_000, 5], np.int64)
    sample = 1e-2
    p = keep_probability(counts, sample)
    st_ = sample * counts.sum()
    expected = np.minimum(1.0, (np.sqrt(counts / st_) + 1) * st_ / counts)
    np.testing.assert_allclose(p, expected, rtol=1e-12)
    assert p[3] == 1.0 and p[2] < p[0] < 1.0
    np.testing.assert_array_equal(keep_probability(counts, 0.0), 1.0)
    np.testing.assert_array_equal(keep_probability(np.zeros(3), 1e-3), 1.0)
    # Walks [v, u] with p(u) = 1: a walk yields pairs iff v is kept.
    keep = np.array([p[2], 1.0])
    n = 100_000
    walks = Walks(np.tile(np.array([0, 1], np.int32), (n, 1)), np.full(n, 2, np.int32))
    ins, _ = skipgram_pairs(walks, np.arange(n), keep, 1, KEY)
    rate = ins.size / 2 / n
    assert abs(rate - p[2]) < 0.01


def test_corpus_counts_ignore_padding():
    walks = _walks([[0, 1, 1], [2]], width=5, pad=3)
    np.testing.assert_array_equal(corpus_counts(walks, 4), [1, 2, 1, 0])


def test_alias_table_samples_the_distribution():
    counts = np.array([0, 1, 5, 50, 500, 0, 20], np.float64)
    probs = negative_weights(counts)
    np.testing.assert_allclose(probs, counts**0.75 / np.sum(counts**0.75))
    accept, alias = alias_table(probs)
    # Exact: the probability mass the table assigns to every id.
    mass = accept / len(probs) + np.bincount(
        alias, weights=(1 - accept) / len(probs), minlength=len(probs)
    )
    np.testing.assert_allclose(mass, probs, atol=1e-7)
    assert mass[0] == 0 and mass[5] == 0
    with pytest.raises(
        ValueError, match="^the negative-sampling distribution is empty: every count is zero$"
    ):
        negative_weights(np.zeros(4))


def test_alias_table_takes_unnormalised_weights_in_any_precision():
    """Weights 1 and 3 give probabilities 1/4 and 3/4: id 0 keeps half of its draws (2 * 1/4)
    and sends the other half to id 1. The table is built in float64 whatever the input."""
    accept, alias = alias_table(np.array([1, 3]))
    assert accept.dtype == np.float32 and alias.dtype == np.int32
    np.testing.assert_array_equal(accept, [0.5, 1.0])
    assert alias[0] == 1
    np.testing.assert_array_equal(alias_table(np.array([0.25, 0.75]))[0], [0.5, 1.0])
    w = np.random.default_rng(0).random(7).astype(np.float32)
    a32, l32 = alias_table(w)
    a64, l64 = alias_table(w.astype(np.float64))
    np.testing.assert_array_equal(a32, a64)
    np.testing.assert_array_equal(l32, l64)
    assert ((a64 >= 0) & (a64 <= 1)).all()  # acceptance probabilities


def test_bad_window():
    with pytest.raises(ValueError, match="window must be >= 1"):
        skipgram_pairs(_walks([[0, 1]]), [0], np.ones(2), 0, KEY)


def test_single_token_corpus_is_subsampled_by_the_formula():
    """T = 1: the lone token's keep probability is (sqrt(1 / s) + 1) s, not 1."""
    np.testing.assert_allclose(keep_probability([1, 0], 1e-3), [(1000**0.5 + 1) * 1e-3, 1.0])


def test_no_walks_give_no_pairs_and_walk_ids_must_match():
    empty = Walks(np.zeros((0, 4), np.int32), np.zeros(0, np.int32))
    inputs, outputs = skipgram_pairs(empty, np.zeros(0, np.int64), np.ones(3), 2, np.uint64(1))
    assert inputs.shape == outputs.shape == (0,)
    assert inputs.dtype == outputs.dtype == np.int32
    with pytest.raises(ValueError, match="^walk_ids must have one id per walk$"):
        pairs_per_walk(_walks([[0, 1]]), np.zeros(2, np.int64), np.ones(3), 2, np.uint64(1))


def test_negative_weights_use_float_powers():
    """An integer power of a large count must not overflow: 2^32 squared is 2^64."""
    w = negative_weights(np.array([2**32, 1, 0]), power=2)
    np.testing.assert_allclose(w, [1.0, 2.0**-64, 0.0], rtol=1e-12)
    # Power 0: uniform over the nodes that occur (0 ** 0 would be 1); a lone token is certain.
    np.testing.assert_array_equal(negative_weights([0, 1, 3], power=0), [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(negative_weights([0, 1]), [0.0, 1.0])


@pytest.mark.parametrize("mark", [True, False])
def test_pack_steps_pads_tallies_and_reuses_buffers(mark):
    """Steps ``start .. start + take`` of each device's pairs land in order, the rest is
    zero-weight padding of id 0, the packed pairs (and only they) are counted and their inputs
    marked, and buffers handed back in (holding an older chunk) end as fresh ones."""
    rng = np.random.default_rng(1)
    n, b, steps = 50, 4, 3
    ins = [rng.integers(0, n, m).astype(np.int32) for m in (30, 17)]
    outs = [rng.integers(0, n, m).astype(np.int32) for m in (30, 17)]
    stale = tuple(np.full((2, steps, b), 7, t) for t in (np.int32, np.int32, np.float32))
    for out in (None, stale):
        counts = rng.integers(0, 9, n).astype(np.int64)
        start_counts, marks = counts.copy(), np.zeros(n, bool)
        got = pack_steps(ins, outs, 2, 3, b, steps, counts, marks if mark else marks[:0], out)
        packed_in, packed_out = [], []
        for d in range(2):
            src_in, src_out = ins[d][8:20], outs[d][8:20]  # steps 2..4, batch 4
            m = src_in.size  # 12 and 9
            for x, src in ((got[0], src_in), (got[1], src_out)):
                np.testing.assert_array_equal(x[d].ravel(), np.r_[src, np.zeros(12 - m, np.int32)])
            np.testing.assert_array_equal(got[2][d].ravel(), np.r_[np.ones(m), np.zeros(12 - m)])
            packed_in.append(src_in)
            packed_out.append(src_out)
        all_ids = np.concatenate(packed_in + packed_out)
        np.testing.assert_array_equal(counts - start_counts, np.bincount(all_ids, minlength=n))
        inputs = np.concatenate(packed_in)
        np.testing.assert_array_equal(marks, np.isin(np.arange(n), inputs) if mark else False)
        if out is not None:
            assert all(g is o for g, o in zip(got, out, strict=True))


def test_nth_draw_of_a_stream_equals_stepping_it():
    """The negatives' draws take a stream's numbers out of order (``nth_u64``)."""
    u64 = np.uint64  # numba returns streams as Python ints; hand them back as uint64
    state = u64(hr.stream(KEY, 12345))
    stepped, draws = state, set()
    for k in range(1, 9):
        stepped, z = hr.next_u64(u64(stepped))
        assert hr.nth_u64(state, k) == z
        draws.add(int(z))
    assert len(draws) == 8
