"""The trainer end to end (pairs, schedule, negatives, batching, merges) against word2vec's
skip-gram written out here, and against the sequential reference.

At a tiny learning rate one round of SGNS is linear in its inputs. ``syn1`` starts at zero, so
every score is ``s . o = O(alpha)`` and ``sigmoid = 1/2 + O(alpha)``; ``syn0`` moves by
``O(alpha^2)``. To first order a round adds to ``syn1``::

    delta syn1 = 1/2 C X,   C[o, i] = sum over the round's pairs m with input i of
                                      alpha_m (1[t_m = o] - n_m(o))

with ``X`` the round's starting ``syn0``, ``t_m`` the pair's positive and ``n_m(o)`` how many of
its ``K`` negatives are ``o`` (a negative equal to ``t_m`` is skipped). With ``d > N`` the rows
of ``X`` are independent, so ``C = 2 delta syn1 X^+`` recovers, per round, the rate times
``P - Nneg``: ``P[o, i]`` the number of pairs ``i -> o`` and ``Nneg[o, i]`` the number of
negatives ``o`` drawn for pairs of input ``i``. Here (window 1, no sub-sampling, the ``"round"``
schedule) ``P`` and the rate ``alpha_0 exp(-decay r)`` are known exactly, so ``Nneg = P - C /
alpha`` must come out as non-negative integers (to ~1e-2 at ``alpha = 2e-5``: the second-order
terms), and word2vec's sampling makes them random with a known law::

    Nneg[o, i] ~ Binomial(K (in_i - P[o, i]), p_o),   p_o = c_o^0.75 / sum c^0.75

(``in_i`` the pairs of input ``i``, ``c`` the corpus counts of the rounds so far). A wrong pair
stream breaks the integers or the totals, a wrong rate the integers, a wrong noise distribution
the binomial law, correlated draws its dispersion.
"""

import functools

import numpy as np
import pytest
from scipy import stats

from jaxgraph.embed.sequential import train_sequential
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.walks import Walks
from jaxgraph.mesh import make_mesh

N, DIM, K = 10, 16, 5
LR, DECAY = 2e-5, 0.5
# First order: the recovered negative counts are integers up to the O(alpha) relative terms
# neglected above (measured ~7e-3 at these sizes); a rate off by even 1 % moves counts of
# ~100 by ~1.
INTEGER_TOL = 0.1
# Family-wise false-alarm rate of the statistical checks of one run (Bonferroni over them).
ALPHA = 1e-6


def _walks(seed, num=200, max_len=12):
    """Random walks on a hub (node 0, linked to every node) with a ring 1..9 around it, of
    lengths 2..12, padded with -1."""
    rng = np.random.default_rng(seed)
    nbrs = {0: list(range(1, N))}
    for v in range(1, N):
        nbrs[v] = [0, 1 + v % (N - 1), 1 + (v - 2) % (N - 1)]
    nodes = np.full((num, max_len), -1, np.int32)
    lengths = rng.integers(2, max_len + 1, num).astype(np.int32)
    for w in range(num):
        v = int(rng.integers(0, N))
        for j in range(lengths[w]):
            nodes[w, j] = v
            v = int(rng.choice(nbrs[v]))
    return Walks(nodes, lengths)


ROUNDS = (_walks(1), _walks(2))


def _config(**kw):
    # window 1 (no shrink to draw), no sub-sampling, no row cap (its scaling is not linear),
    # a rate constant within the round and decaying across rounds.
    base = dict(
        dim=DIM,
        window=1,
        negatives=K,
        sample=0.0,
        lr=LR,
        lr_decay=DECAY,
        lr_schedule="round",
        batch_size=8,
        row_cap=None,
        sync_every=16,
    )
    return SkipGramConfig(**{**base, **kw})


def _pairs(walks):
    """``P[o, i]``: word2vec's skip-gram pairs at window 1 (each neighbour in the walk predicts
    the centre), counted from the walks."""
    pairs = np.zeros((N, N))
    for row, n in zip(walks.nodes, walks.lengths, strict=True):
        for a, b in zip(row[: n - 1], row[1:n], strict=True):
            pairs[b, a] += 1
            pairs[a, b] += 1
    return pairs


def _noise(counts):
    return counts**0.75 / np.sum(counts**0.75)


def _recovered_negatives(snapshots):
    """Per round ``Nneg = P - C / alpha_r`` from ``(X, syn1 before, syn1 after)``."""
    out = []
    for r, (x, before, after) in enumerate(snapshots):
        c = 2.0 * (after - before) @ np.linalg.pinv(x)
        out.append(_pairs(ROUNDS[r]) - c / (LR * np.exp(-DECAY * r)))
    return out


def _check_against_word2vec(negs, counts_source=None):
    """The recovered counts are integers with word2vec's law."""
    counts = np.zeros(N)
    checks = []
    for r, neg in enumerate(negs):
        assert np.abs(neg - np.round(neg)).max() < INTEGER_TOL, f"round {r}: not integers"
        neg = np.round(neg)
        assert neg.min() >= 0, f"round {r}: negative counts"
        pairs = _pairs(ROUNDS[r])
        for row, n in zip(ROUNDS[r].nodes, ROUNDS[r].lengths, strict=True):
            counts += np.bincount(row[:n], minlength=N)
        p = _noise(counts if counts_source is None else counts_source)
        inputs = pairs.sum(axis=0)  # pairs of input i
        trials = K * (inputs[None, :] - pairs)  # draws that may land on o (not skipped)
        # Every cell: two-sided exact binomial tail.
        cell = 2 * np.minimum(
            stats.binom.cdf(neg, trials, p[:, None]), stats.binom.sf(neg - 1, trials, p[:, None])
        )
        checks.append(("cell", r, np.minimum(cell, 1.0)))
        # Over-dispersion (negatives correlated across pairs, e.g. a key reused between
        # steps): each cell's z^2 has mean 1 and the cells of one input are negatively
        # correlated (one draw lands on one node), so the sum is at most as spread as a
        # chi-square with one degree per cell.
        z2 = (neg - trials * p[:, None]) ** 2 / (trials * (p * (1 - p))[:, None])
        checks.append(("dispersion", r, np.array([stats.chi2.sf(z2.sum(), z2.size)])))
        # Every input's total: K in_i draws minus the skipped ones (a negative equal to the
        # pair's positive), a sum of Binomial(K, p_t) over its pairs; normal approximation
        # (its mean is >= 10 here), checked below at a z of ALPHA's order.
        skip_mean = K * (pairs * p[:, None]).sum(axis=0)
        skip_var = K * (pairs * (p * (1 - p))[:, None]).sum(axis=0)
        z = (K * inputs - neg.sum(axis=0) - skip_mean) / np.sqrt(skip_var)
        checks.append(("total", r, 2 * stats.norm.sf(np.abs(z))))
    num = sum(c[2].size for c in checks)
    for kind, r, tail in checks:
        assert tail.min() > ALPHA / num, f"round {r}: {kind} tail {tail.min():.2e}"


@functools.cache
def _trainer_run(num_devices, pairs, merge, counts):
    cfg = _config(pairs=pairs, merge=merge, counts=counts)
    degrees = np.bincount(np.concatenate([w.nodes[w.nodes >= 0] for w in ROUNDS]), minlength=N)
    tr = SkipGramTrainer(N, cfg, make_mesh(num_devices), seed=3, degrees=degrees)
    snapshots, syn1 = [], np.zeros((N, DIM))
    for r, walks in enumerate(ROUNDS):
        x = tr.input_vectors().astype(np.float64)
        tr.train_round(walks, r)
        after = tr.embeddings()[1].astype(np.float64)
        snapshots.append((x, syn1, after))
        syn1 = after
    assert np.abs(syn1).max() > 0
    return _recovered_negatives(snapshots), degrees


@functools.cache
def _sequential_run(seed=3):
    cfg = _config()
    x0, zero, _, _ = train_sequential([], N, cfg, seed=seed)
    x1, s1, _, _ = train_sequential(list(ROUNDS[:1]), N, cfg, seed=seed)
    _, s2, _, _ = train_sequential(list(ROUNDS), N, cfg, seed=seed)
    snapshots = [(x0, zero, s1), (x1, s1, s2)]
    return _recovered_negatives([tuple(a.astype(np.float64) for a in s) for s in snapshots])


@pytest.mark.parametrize(
    "num_devices, pairs, merge",
    [(1, "host", "mean"), (1, "device", "mean"), (2, "host", "sum")],
    ids=["one-device", "device-pairs", "two-devices-sum"],
)
def test_trainer_first_order_is_word2vec(num_devices, pairs, merge):
    """One device, or two whose summed changes (``merge="sum"``, linear to first order) make
    one pass: the trainer's pairs, rates and negatives are word2vec's."""
    negs, _ = _trainer_run(num_devices, pairs, merge, "corpus")
    _check_against_word2vec(negs)


def test_trainer_degree_counts_draw_from_degree_power_075():
    negs, degrees = _trainer_run(1, "host", "mean", "degree")
    _check_against_word2vec(negs, counts_source=degrees.astype(np.float64))


def test_sequential_reference_first_order_is_word2vec():
    _check_against_word2vec(_sequential_run())


def test_trainer_and_sequential_reference_agree():
    """Both runs train the same pairs at the same rates; only their negatives' random streams
    differ, so per input ``i`` and output ``o`` the two counts are two independent draws of one
    binomial: their difference has variance ``2 K (in_i - P[o, i]) p_o (1 - p_o)``."""
    tr, _ = _trainer_run(1, "host", "mean", "corpus")
    seq = _sequential_run()
    counts = np.zeros(N)
    zs = []
    for r, (a, b) in enumerate(zip(tr, seq, strict=True)):
        for row, n in zip(ROUNDS[r].nodes, ROUNDS[r].lengths, strict=True):
            counts += np.bincount(row[:n], minlength=N)
        p = _noise(counts)
        pairs = _pairs(ROUNDS[r])
        var = 2 * K * (pairs.sum(axis=0)[None, :] - pairs) * (p * (1 - p))[:, None]
        zs.append((np.round(a) - np.round(b)) / np.sqrt(var))
    z = np.abs(np.stack(zs))
    # Normal approximation per cell (every cell's variance is >= 40 here), Bonferroni.
    assert 2 * stats.norm.sf(z.max()) > ALPHA / z.size
    # And the rounds' total negatives, which differ only by the skipped draws.
    assert np.abs(np.round(tr[0]).sum() - np.round(seq[0]).sum()) < 6 * np.sqrt(
        2 * K * (_pairs(ROUNDS[0]).sum(axis=0) * 0.25).sum()
    )
