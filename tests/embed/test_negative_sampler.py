"""The negatives the library's sampler draws, against ``count ** 0.75`` computed here.

``test_skipgram.py`` checks the draws against ``negative_weights(counts)``, the library's own
noise distribution, so a noise distribution that is uniform (or has the wrong power) passes
there. Here the expected frequencies are ``c^0.75 / sum c^0.75``, written in this file, and the
draws go through the path the trainer takes: :func:`negative_weights`, :func:`alias_table`,
:func:`sample_negatives`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxgraph.embed.corpus import alias_table, negative_weights
from jaxgraph.embed.sgns import sample_negatives

draw = jax.jit(sample_negatives, static_argnums=3)

# False-alarm rate of the whole test: the clean sampler fails with probability at most this
# (the seed is fixed, so a pass is reproducible; the bound says the pass is not luck).
ALPHA = 1e-6


@pytest.mark.parametrize(
    "counts",
    [
        [0, 1, 3, 10, 40, 200, 7, 0, 1000, 55],
        [5, 5, 5, 5, 5000],  # one hub
        list(range(1, 41)),  # many nodes, mild skew
    ],
    ids=["mixed", "hub", "ramp"],
)
def test_draws_follow_count_power_075(counts):
    counts = np.asarray(counts, np.int64)
    n = 2_000_000
    expected = np.where(counts > 0, counts.astype(np.float64) ** 0.75, 0.0)
    expected /= expected.sum()
    accept, alias = alias_table(negative_weights(counts))
    ids = draw(jax.random.key(11), jnp.asarray(accept), jnp.asarray(alias), (n,))
    freq = np.bincount(np.asarray(ids), minlength=counts.size)
    assert freq.size == counts.size and freq.sum() == n
    # A node that never occurs is never drawn.
    assert np.all(freq[counts == 0] == 0)
    live = counts > 0
    # Per node, freq ~ Binomial(n, p): two-sided exact tail probability, Bonferroni over the
    # nodes and the chi-square below. The float32 acceptance table shifts a mass by at most
    # ~1e-7 relative, i.e. ~0.2 draws at n = 2e6, far below one sigma (>= 40 draws here).
    k, p = freq[live], expected[live]
    tail = 2 * np.minimum(stats.binom.cdf(k, n, p), stats.binom.sf(k - 1, n, p))
    assert tail.min() > ALPHA / (live.sum() + 1), (freq, np.round(n * expected))
    # And all nodes together.
    assert stats.chisquare(k, n * p).pvalue > ALPHA / (live.sum() + 1)


def test_the_check_separates_nearby_noise_distributions():
    """The sample size resolves the power: 0.7 or 1.0 instead of 0.75 moves some node's
    frequency by many standard deviations (here > 20)."""
    counts = np.array([0, 1, 3, 10, 40, 200, 7, 0, 1000, 55], np.float64)
    n = 2_000_000
    live = counts > 0
    right = counts[live] ** 0.75 / np.sum(counts[live] ** 0.75)
    for power in (0.0, 0.7, 1.0):
        wrong = counts[live] ** power / np.sum(counts[live] ** power)
        z = np.abs(wrong - right) * n / np.sqrt(n * right * (1 - right))
        assert z.max() > 20
