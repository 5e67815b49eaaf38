"""Sequential skip-gram: word2vec's update one pair at a time, on the host (numba).

The reference the batched trainer (:class:`~jaxgraph.embed.skipgram.SkipGramTrainer`) is
compared against: :func:`train_sequential` trains on exactly the trainer's pair stream and
learning rates (by token fraction at the start of each walk), with negatives from the same
``count ** 0.75`` alias table. Only the batching differs: every pair reads the tables as the
pair before it left them, as word2vec's and gensim's single thread do.

The update of one pair, input row ``i``, positive ``t``, negatives ``n_1..n_K``, rate
``alpha`` (:func:`pair_update`; a negative equal to ``t`` is skipped)::

    e = 0
    for (o, label) in (t, 1), (n_1, 0), ..., (n_K, 0):
        g = (label - sigmoid(syn0[i] . syn1[o])) * alpha
        e += g * syn1[o]
        syn1[o] += g * syn0[i]
    syn0[i] += e
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed.corpus import (
    alias_table,
    corpus_counts,
    keep_probability,
    negative_weights,
    pairs_per_walk,
    skipgram_pairs,
)
from jaxgraph.embed.sgns import round_walk_order
from jaxgraph.embed.walks import Walks


@njit(cache=True, nogil=True)
def pair_update(syn0, syn1, i, t, negatives, lr, work):
    """Applies one pair's update in place (module docstring); returns its loss
    ``-log sigmoid(s.o_t) - sum_k log sigmoid(-s.o_k)`` before the update. ``work`` is a
    ``float32[d]`` scratch row."""
    work[:] = 0.0
    loss = 0.0
    d = syn0.shape[1]
    for k in range(negatives.shape[0] + 1):
        if k == 0:
            o = t
            label = 1.0
        else:
            o = negatives[k - 1]
            if o == t:
                continue
            label = 0.0
        f = 0.0
        for q in range(d):
            f += syn0[i, q] * syn1[o, q]
        # -log sigmoid(x) = log1p(exp(-x)), written stably for either sign.
        x = f if label == 1.0 else -f
        loss += math.log1p(math.exp(-abs(x))) + max(-x, 0.0)
        g = np.float32((label - 1.0 / (1.0 + math.exp(-f))) * lr)
        for q in range(d):
            work[q] += g * syn1[o, q]
            syn1[o, q] += g * syn0[i, q]
    for q in range(d):
        syn0[i, q] += work[q]
    return loss


@njit(cache=True, nogil=True)
def train_pairs_given(syn0, syn1, inputs, outputs, negatives, rates):
    """Trains ``inputs[m] -> outputs[m]`` in order against ``negatives[m]`` (``int[M, K]``) at
    ``rates[m]``, in place; returns the summed loss."""
    work = np.zeros(syn0.shape[1], np.float32)
    total = 0.0
    for m in range(inputs.shape[0]):
        total += pair_update(syn0, syn1, inputs[m], outputs[m], negatives[m], rates[m], work)
    return total


@njit(cache=True, nogil=True)
def train_pairs(syn0, syn1, inputs, outputs, rates, accept, alias, num_negatives, key):
    """Trains the pairs in order, drawing ``num_negatives`` per pair from the alias table
    ``(accept, alias)`` with the counter-based stream ``key``; in place. Returns the summed
    loss."""
    work = np.zeros(syn0.shape[1], np.float32)
    negs = np.empty(num_negatives, np.int64)
    n = accept.shape[0]
    state = hr.stream(key, 0)
    total = 0.0
    for m in range(inputs.shape[0]):
        for k in range(num_negatives):
            state, j = hr.next_below(state, n)
            state, u = hr.next_uniform(state)
            negs[k] = j if u < accept[j] else alias[j]
        total += pair_update(syn0, syn1, inputs[m], outputs[m], negs, rates[m], work)
    return total


def train_sequential(rounds, num_nodes, config, *, seed):
    """Trains ``rounds`` (a list of :class:`~jaxgraph.embed.walks.Walks`, as the trainer's
    ``train_round(walks, r)`` takes them) one pair at a time, on the trainer's pair stream for
    ``seed`` (``config.counts`` must be ``"corpus"``; batching options are ignored):
    ``(syn0 f32[N, d], syn1 f32[N, d], loss per pair of each round, pairs of each round)``."""
    if config.counts != "corpus":
        raise ValueError("train_sequential counts nodes in the corpus (counts='corpus')")
    d = config.dim
    rng = np.random.default_rng([seed, 0x5E9])
    half = config.init_scale / d
    syn0 = rng.uniform(-half, half, (num_nodes, d)).astype(np.float32)
    syn1 = np.zeros((num_nodes, d), np.float32)
    counts = np.zeros(num_nodes, np.int64)
    losses, pair_counts = [], []
    for r, walks in enumerate(rounds):
        counts += corpus_counts(walks, num_nodes)
        if walks.num_walks == 0:
            losses.append(0.0)
            pair_counts.append(0)
            continue
        order = round_walk_order(seed, r, walks.num_walks)
        sub = Walks(walks.nodes[order], walks.lengths[order])
        keep = keep_probability(counts, config.sample)
        key = hr.round_key(seed, hr.PURPOSE_PAIRS, r)
        per_walk = pairs_per_walk(sub, order, keep, config.window, key)
        inputs, outputs = skipgram_pairs(sub, order, keep, config.window, key, per_walk)
        # Each walk's pairs at the rate of the token fraction where the walk starts.
        tokens = sub.lengths.astype(np.int64)
        start = (np.cumsum(tokens) - tokens) / max(int(tokens.sum()), 1)
        rates = np.repeat(config.step_rates(r, start), per_walk).astype(np.float32)
        accept, alias = alias_table(negative_weights(counts))
        neg_key = hr.round_key(seed, 0x4E47, r)
        total = train_pairs(
            syn0, syn1, inputs, outputs, rates, accept, alias, config.negatives, neg_key
        )
        losses.append(total / max(inputs.shape[0], 1))
        pair_counts.append(int(inputs.shape[0]))
    return syn0, syn1, losses, pair_counts
