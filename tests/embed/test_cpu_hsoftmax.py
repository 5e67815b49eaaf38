"""Hierarchical softmax in the compiled CPU kernel (:mod:`jaxgraph.embed.cpu_hsoftmax`) against
the JAX step (:func:`hs_update`) and word2vec's pair-by-pair oracle, its chunk against a loop of
JAX steps in the interleaved order, 2 threads against one, its input checks, and inside
``embed()`` on 1 and 2 emulated devices."""

from __future__ import annotations

import jax.numpy as jnp
import numba
import numpy as np
import pytest
from kernel_cases import check_copies, interleaved_order

from jaxgraph.embed import cpu_hsoftmax
from jaxgraph.embed.hsoftmax import hs_update, hs_update_reference, huffman_tree

# fp32 arithmetic against JAX and the float64 oracle.
RTOL, ATOL = 1e-5, 1e-6


def _problem(rng, n, d, b):
    tree = huffman_tree(rng.integers(1, 30, n).astype(float))
    syn0 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    syn1 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    return tree, syn0, syn1


def _jax_step(syn0, syn1, inputs, outputs, tree, weight, lr, row_cap):
    got0, got1, loss = hs_update(
        jnp.asarray(syn0), jnp.asarray(syn1), inputs, outputs, tree, weight, lr, row_cap=row_cap
    )
    return np.asarray(got0), np.asarray(got1), float(loss)


@pytest.mark.parametrize("row_cap", [None, 1, 3])
def test_step_equals_the_jax_step_and_word2vec(row_cap):
    """Repeated inputs and outputs, padding pairs of weight 0, paths of every length."""
    rng = np.random.default_rng(7)
    n, d, b = 13, 6, 40
    tree, syn0, syn1 = _problem(rng, n, d, b)
    inputs = rng.integers(0, 5, b).astype(np.int32)
    outputs = rng.integers(0, n, b).astype(np.int32)
    weight = (rng.random(b) > 0.2).astype(np.float32)
    want0, want1, want_loss = _jax_step(syn0, syn1, inputs, outputs, tree, weight, 0.1, row_cap)
    ref0, ref1 = hs_update_reference(syn0, syn1, inputs, outputs, tree, weight, 0.1, row_cap)
    got0, got1 = syn0.copy(), syn1.copy()
    args = (inputs, outputs, tree.points, tree.labels, weight, 0.1, row_cap)
    loss = cpu_hsoftmax.step_update(got0, got1, *args)
    for got, want, ref in ((got0, want0, ref0), (got1, want1, ref1)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    assert loss == pytest.approx(want_loss, rel=RTOL)
    assert np.abs(got1 - syn1).max() > 1e-2  # the step moved the inner rows


def test_step_on_long_paths_equals_the_jax_step():
    """Paths of more than 12 rows (the outputs deepest in a skewed tree of 3,000 leaves), with
    the row cap."""
    rng = np.random.default_rng(9)
    n, d, b = 3000, 8, 64
    tree = huffman_tree(1.0 / np.arange(1, n + 1) ** 1.2)
    assert (tree.labels >= 0).sum(1).max() > 12
    syn0 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    syn1 = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    inputs = rng.integers(0, n, b).astype(np.int32)
    deep = np.argsort((tree.labels >= 0).sum(1))[-b:]  # the outputs of the longest paths
    outputs = rng.permutation(deep).astype(np.int32)
    weight = np.ones(b, np.float32)
    want0, want1, want_loss = _jax_step(syn0, syn1, inputs, outputs, tree, weight, 0.1, 3)
    got0, got1 = syn0.copy(), syn1.copy()
    args = (inputs, outputs, tree.points, tree.labels, weight, 0.1, 3)
    loss = cpu_hsoftmax.step_update(got0, got1, *args)
    np.testing.assert_allclose(got0, want0, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got1, want1, rtol=RTOL, atol=ATOL)
    assert loss == pytest.approx(want_loss, rel=RTOL)


@pytest.mark.parametrize("span", [None, 3])
def test_chunk_equals_a_loop_of_jax_steps_in_the_interleaved_order(span):
    rng = np.random.default_rng(3)
    n, d, b, s_all, steps, cap = 11, 8, 16, 8, 7, 2
    tree, syn0, syn1 = _problem(rng, n, d, b)
    inputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    outputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    weights = np.ones((s_all, b), np.float32)
    weights.reshape(-1)[steps * b - 5 :] = 0.0
    lrs = np.linspace(0.2, 0.05, s_all).astype(np.float32)
    flat = [a.reshape(-1) for a in (inputs, outputs, weights)]
    want0, want1, want_loss = syn0, syn1, 0.0
    for s, at in enumerate(interleaved_order(steps, b, span)):
        want0, want1, loss = _jax_step(
            want0, want1, flat[0][at], flat[1][at], tree, flat[2][at], lrs[s], cap
        )
        want_loss += loss
    got0, got1 = syn0.copy(), syn1.copy()
    args = (inputs, outputs, weights, lrs, steps, tree.points, tree.labels, span, cap, 1)
    loss = cpu_hsoftmax.train_chunk(got0, got1, *args)
    np.testing.assert_allclose(got0, want0, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got1, want1, rtol=RTOL, atol=ATOL)
    assert loss == pytest.approx(want_loss, rel=RTOL)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_two_threads_train_every_step_once():
    """Overlapping steps: every step of the tree meets the others at the root's rows, whose
    products enter every pair's input-row gradient, so the tables are not close row by row as
    with negatives (how 2 threads train: the embedding test below); the loss sums the same
    steps' losses, each from a slightly other state, and one thread repeats its bits."""
    rng = np.random.default_rng(4)
    n, d, b, s_all = 4000, 16, 64, 12
    tree, syn0, syn1 = _problem(rng, n, d, b)
    inputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    outputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    lrs = np.full(s_all, 0.1, np.float32)
    chunk = (inputs, outputs, np.ones((s_all, b), np.float32), lrs, s_all)
    chunk += (tree.points, tree.labels, 2, 3)
    runs = []
    for threads in (1, 1, 2):
        t0, t1 = syn0.copy(), syn1.copy()
        runs.append((t0, t1, cpu_hsoftmax.train_chunk(t0, t1, *chunk, threads)))
    for got, want in zip(runs[1], runs[0], strict=True):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(runs[0][1], syn1)
    assert runs[2][2] == pytest.approx(runs[0][2], rel=1e-2)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_two_threads_lose_no_update_on_the_root():
    """Every pair of every step updates the root's row, and the writes of 2 threads go one step
    at a time, so none is lost: from ``syn1 = 0`` at a tiny ``lr`` each update is
    ``(label - sigma(~0)) lr syn0[i]`` whatever the order, and the inner rows equal one
    thread's to 1e-3 of their size (as the negative-sampling test argues)."""
    rng = np.random.default_rng(7)
    n, d, b, s_all = 16, 16, 256, 160
    tree, syn0, _ = _problem(rng, n, d, b)
    inputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    outputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    lrs = np.full(s_all, 1e-6, np.float32)
    chunk = (inputs, outputs, np.ones((s_all, b), np.float32), lrs, s_all)
    chunk += (tree.points, tree.labels, None, None)
    inner = {}
    for threads in (1, 2):
        t1 = np.zeros_like(syn0)
        cpu_hsoftmax.train_chunk(syn0.copy(), t1, *chunk, threads)
        inner[threads] = t1
    size = np.abs(inner[1]).max()
    assert size > 1e-5
    np.testing.assert_allclose(inner[2], inner[1], rtol=0, atol=1e-3 * size)


@pytest.mark.parametrize("copies, threads", [(2, 1), (2, 2), (3, 2)])
def test_copies_train_contiguous_stretches_each_on_its_own_tables(copies, threads):
    """With ``copies = C``, copy ``t`` ends bit for bit as the chunk's steps ``t ceil(S / C)
    .. (t + 1) ceil(S / C) - 1`` applied one by one (the interleaved order and the rates) to
    the starting tables, whatever the thread count; the loss sums every copy's steps."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("needs 2 numba threads")
    rng = np.random.default_rng(22)
    n, d, b, s_all, steps, span, cap = 300, 8, 16, 9, 8, 3, 2
    tree, syn0, syn1 = _problem(rng, n, d, b)
    inputs = rng.integers(0, n // 10, (s_all, b)).astype(np.int32)  # rows the copies share
    outputs = rng.integers(0, n, (s_all, b)).astype(np.int32)
    weights = np.ones((s_all, b), np.float32)
    lrs = np.linspace(0.2, 0.05, s_all).astype(np.float32)
    flat = [a.reshape(-1) for a in (inputs, outputs, weights)]
    order = interleaved_order(steps, b, span)
    paths = (tree.points, tree.labels)

    def step(t0, t1, s):
        batch = (flat[0][order[s]], flat[1][order[s]], *paths, flat[2][order[s]], lrs[s], cap)
        return cpu_hsoftmax.step_update(t0, t1, *batch)

    pairs = (inputs[None], outputs[None], weights[None], lrs, steps)
    rules = (*paths, span, cap, threads)

    def train(t0, t1):
        return cpu_hsoftmax.train_replicas(t0, t1, *pairs, *rules, copies=copies)

    check_copies(train, step, syn0, syn1, steps, copies)
    with pytest.raises(ValueError, match=r"copies must be an integer >= 1 that divides"):
        cpu_hsoftmax.train_replicas(syn0[None], syn1[None], *pairs, *rules, copies=2)


@pytest.mark.parametrize("threads", [1, 2])
def test_replicas_at_once_end_as_one_call_each(threads):
    """Three replicas in one call (own tables and pairs, one tree) end bit for bit as three
    one-thread calls of ``train_chunk``; with 2 threads two train at once, one thread each."""
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("needs 2 numba threads")
    rng = np.random.default_rng(12)
    r, n, d, b, s_all = 3, 300, 16, 64, 8
    tree = huffman_tree(rng.integers(1, 30, n).astype(float))
    syn0 = rng.normal(0, 0.5, (r, n, d)).astype(np.float32)
    syn1 = rng.normal(0, 0.5, (r, n, d)).astype(np.float32)
    inputs = rng.integers(0, n, (r, s_all, b)).astype(np.int32)
    outputs = rng.integers(0, n, (r, s_all, b)).astype(np.int32)
    weights = np.ones((r, s_all, b), np.float32)
    lrs = np.full(s_all, 0.1, np.float32)
    rules = (tree.points, tree.labels, 3, 2)
    want0, want1, want_loss = syn0.copy(), syn1.copy(), 0.0
    for i in range(r):
        pairs = (inputs[i], outputs[i], weights[i], lrs, s_all)
        want_loss += cpu_hsoftmax.train_chunk(want0[i], want1[i], *pairs, *rules, 1)
    pairs = (inputs, outputs, weights, lrs, s_all)
    loss = cpu_hsoftmax.train_replicas(syn0, syn1, *pairs, *rules, threads)
    np.testing.assert_array_equal(syn0, want0)
    np.testing.assert_array_equal(syn1, want1)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    with pytest.raises(ValueError, match=r"weights must hold one chunk per replica \(3\)"):
        cpu_hsoftmax.train_replicas(syn0, syn1, *pairs[:2], weights[:1], *pairs[3:], *rules)


def test_bad_inputs_raise_before_any_work():
    rng = np.random.default_rng(5)
    n, b = 6, 8
    tree, syn0, syn1 = _problem(rng, n, 4, b)
    before = syn0.copy(), syn1.copy()
    ins = rng.integers(0, n, b)
    w = np.ones(b, np.float32)
    bad = [
        ((ins + n, ins, tree.points, tree.labels, w, 0.1), "inputs must be row ids"),
        ((ins, ins, tree.points + n, tree.labels, w, 0.1), "points must be row ids"),
        ((ins, ins, tree.points, tree.labels[:-1], w, 0.1), "labels must be f32"),
        ((ins, ins, tree.points, tree.labels, w[:3], 0.1), "weight must be float"),
        ((ins, ins, tree.points, tree.labels, w, float("inf")), "lr must be finite"),
    ]
    for args, message in bad:
        with pytest.raises(ValueError, match=message):
            cpu_hsoftmax.step_update(syn0, syn1, *args)
    with pytest.raises(ValueError, match="row_cap must be an integer"):
        cpu_hsoftmax.step_update(syn0, syn1, ins, ins, tree.points, tree.labels, w, 0.1, 0)
    chunk = (ins[None], ins[None], w[None], np.full(1, 0.1, np.float32), 1)
    with pytest.raises(ValueError, match="span must be"):
        cpu_hsoftmax.train_chunk(syn0, syn1, *chunk, tree.points, tree.labels, span=0)
    with pytest.raises(ValueError, match="threads must be"):
        cpu_hsoftmax.train_chunk(syn0, syn1, *chunk, tree.points, tree.labels, threads=0)
    np.testing.assert_array_equal(syn0, before[0])
    np.testing.assert_array_equal(syn1, before[1])


def _planted():
    from jaxgraph.data import dc_sbm

    return dc_sbm(300, 6, 12.0, num_features=0, homophily=0.95, degree_exponent=None, seed=4)


def _embed_config(parts: int, **sgns):
    from jaxgraph.embed.run import EmbedConfig
    from jaxgraph.embed.sgns import SkipGramConfig
    from jaxgraph.embed.walks import WalkConfig

    cfg = SkipGramConfig(
        dim=16, window=3, batch_size=256, sync_every=16, objective="hierarchical", **sgns
    )
    return EmbedConfig("deepwalk", WalkConfig(walk_length=20, walks_per_node=4), cfg, rounds=2)


@pytest.mark.parametrize("parts", [1, 2])
def test_embed_with_the_kernel_trains_as_the_jax_program(parts):
    """The tree has no random draws, so the kernel (one thread) and the JAX program train the
    same run: the same loss per round to fp32 rounding, tables close, planted blocks learnt."""
    from jaxgraph.embed import evaluate as ev
    from jaxgraph.embed.run import embed

    g = _planted()
    cpu = embed(_embed_config(parts, kernel="cpu").replace(parts=parts), g)
    jax_run = embed(_embed_config(parts, kernel="jax").replace(parts=parts), g)
    for a, b in zip(cpu.rounds, jax_run.rounds, strict=True):
        assert a.loss == pytest.approx(b.loss, rel=1e-4)
    np.testing.assert_allclose(cpu.syn0, jax_run.syn0, rtol=1e-3, atol=1e-3)
    acc = ev.node_classification(cpu.syn0, g.labels, train_ratios=(0.5,), shuffles=1)
    assert acc[0.5]["micro"]["mean"] > 0.9


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_embed_with_two_kernel_threads_trains_as_one():
    """2 devices on 2 threads (one each, at once) against one thread: every round's loss
    within 5 % (the margin of the negative-sampling kernel's test) and the blocks learnt."""
    from jaxgraph.embed import evaluate as ev
    from jaxgraph.embed.run import embed

    g = _planted()
    one = embed(_embed_config(2, kernel="cpu", threads=1).replace(parts=2, rounds=3), g)
    two = embed(_embed_config(2, kernel="cpu", threads=2).replace(parts=2, rounds=3), g)
    for a, b in zip(one.rounds, two.rounds, strict=True):
        assert abs(a.loss - b.loss) < 0.05 * a.loss
    acc = ev.node_classification(two.syn0, g.labels, train_ratios=(0.5,), shuffles=1)
    assert acc[0.5]["micro"]["mean"] > 0.9


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_one_device_on_two_threads_trains_two_copies():
    """One device on 2 threads trains 2 copies of its tables (every pair reaches the tree's
    root, which both copies move; their changes are summed every period) against one thread:
    every round's loss within 10 % (the negative-sampling copies' margin), the blocks learnt,
    and the copies repeat their bits (no thread reads a row another writes)."""
    from jaxgraph.embed import evaluate as ev
    from jaxgraph.embed.run import embed

    g = _planted()
    one = embed(_embed_config(1, kernel="cpu", threads=1).replace(rounds=3), g)
    two = embed(_embed_config(1, kernel="cpu", threads=2).replace(rounds=3), g)
    again = embed(_embed_config(1, kernel="cpu", threads=2).replace(rounds=3), g)
    np.testing.assert_array_equal(two.syn0, again.syn0)
    for a, b in zip(one.rounds, two.rounds, strict=True):
        assert abs(a.loss - b.loss) < 0.1 * a.loss
        assert b.syncs > a.syncs  # the copies merged
    acc = ev.node_classification(two.syn0, g.labels, train_ratios=(0.5,), shuffles=1)
    assert acc[0.5]["micro"]["mean"] > 0.9
