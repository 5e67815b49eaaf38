"""The SGNS update against word2vec's closed form, and the data-parallel trainer against its
single-device oracle on several mesh sizes."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest
from scipy import stats

from jaxgraph.embed.corpus import alias_table, negative_weights
from jaxgraph.embed.cpu_replicas import MAX_COPIES
from jaxgraph.embed.merge import (
    SUM_BLIND_STEPS,
    SUM_ROW_UPDATES,
    AllSync,
    merge_rows,
    sum_period,
)
from jaxgraph.embed.programs import sync_program, train_program
from jaxgraph.embed.sgns import (
    NegativeTable,
    SkipGramConfig,
    Tables,
    init_tables,
    row_multiplicity,
    sample_negatives,
    sgns_update,
    sgns_update_reference,
)
from jaxgraph.embed.skipgram import SUM_SWING_STEPS, SkipGramTrainer
from jaxgraph.embed.walks import WalkConfig, random_walks
from jaxgraph.mesh import make_mesh

from graph_cases import power_law

TOL = 1e-5  # fp32 arithmetic policy
# Shapes shared by the oracle and trainer tests, so each mesh size compiles one program.
N, DIM, BATCH, NEG, BUFFER = 300, 8, 16, 2, 4
update = jax.jit(sgns_update)
capped_update = jax.jit(
    lambda s0, s1, i, o, w, neg, lr, cap: sgns_update(s0, s1, i, o, neg, w, lr, row_cap=cap),
    static_argnums=7,
)
negatives_of = jax.jit(sample_negatives, static_argnums=3)
MESH_SIZES = (1, 2, 4, 8)
AXIS = "parts"


def _tables(rng, n, d, scale=0.3):
    syn0 = rng.uniform(-scale, scale, (n, d)).astype(np.float32)
    syn1 = rng.uniform(-scale, scale, (n, d)).astype(np.float32)
    return syn0, syn1


@pytest.mark.parametrize("row_cap", [None, 1, 3])
def test_update_equals_word2vec_closed_form(row_cap):
    rng = np.random.default_rng(0)
    n, d, b, k = 12, 8, 40, 3
    syn0, syn1 = _tables(rng, n, d)
    ins = rng.integers(0, n, b).astype(np.int32)  # duplicates on purpose (12 rows, 40 pairs)
    outs = rng.integers(0, n, b).astype(np.int32)
    neg = rng.integers(0, n, (b, k)).astype(np.int32)
    neg[:5, 0] = outs[:5]  # a negative equal to the positive is skipped
    weight = (rng.random(b) > 0.2).astype(np.float32)  # padding pairs change nothing
    new0, new1, loss = capped_update(syn0, syn1, ins, outs, weight, neg, 0.05, row_cap)
    ref0, ref1 = sgns_update_reference(syn0, syn1, ins, outs, neg, weight, 0.05, row_cap)
    np.testing.assert_allclose(new0, ref0, atol=1e-6, rtol=0)
    np.testing.assert_allclose(new1, ref1, atol=1e-6, rtol=0)
    f = np.einsum("bd,bkd->bk", syn0[ins], syn1[np.concatenate([outs[:, None], neg], 1)])
    live = np.concatenate([np.ones((b, 1), bool), neg != outs[:, None]], 1) * weight[:, None]
    ref_loss = -np.sum(live * np.log(1 / (1 + np.exp(-np.where(np.arange(k + 1) == 0, f, -f)))))
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)


@pytest.mark.parametrize("row_cap", [None, 2])
@pytest.mark.parametrize("share", [2, 5, 40])
def test_shared_negatives_equal_word2vec_closed_form(share, row_cap):
    """Groups of G pairs sharing K negatives update as word2vec's closed form pair by pair
    (a shared negative counting once per group under the cap), skipped where a shared negative
    is a pair's own positive. Without a cap this is the per-pair update with each group's
    negatives repeated for its G pairs."""
    rng = np.random.default_rng(2)
    n, d, b, k = 15, 8, 40, 3
    syn0, syn1 = _tables(rng, n, d)
    ins = rng.integers(0, n, b).astype(np.int32)
    outs = rng.integers(0, n, b).astype(np.int32)
    shared = rng.integers(0, n, (b // share, k)).astype(np.int32)
    shared[0, 1] = outs[0]  # the first pair's positive is a negative of its group
    weight = (rng.random(b) > 0.2).astype(np.float32)
    new0, new1, loss = capped_update(syn0, syn1, ins, outs, weight, shared, 0.05, row_cap)
    ref0, ref1 = sgns_update_reference(syn0, syn1, ins, outs, shared, weight, 0.05, row_cap)
    np.testing.assert_allclose(new0, ref0, atol=1e-6, rtol=0)
    np.testing.assert_allclose(new1, ref1, atol=1e-6, rtol=0)
    per_pair = np.repeat(shared, share, axis=0)
    pp0, pp1, loss_pp = capped_update(syn0, syn1, ins, outs, weight, per_pair, 0.05, row_cap)
    np.testing.assert_allclose(loss, loss_pp, rtol=1e-6)
    if row_cap is None:
        np.testing.assert_allclose(new0, pp0, atol=1e-6, rtol=0)
        np.testing.assert_allclose(new1, pp1, atol=1e-6, rtol=0)
    else:  # the per-pair count scales a shared row's step by up to c / G: not the same update
        assert np.abs(np.asarray(new1) - np.asarray(pp1)).max() > 1e-4
    with pytest.raises(ValueError, match="3 rows do not divide 40 pairs"):
        sgns_update(syn0, syn1, ins, outs, np.zeros((3, k), np.int32), weight, 0.05)


def test_shared_negatives_config_range():
    with pytest.raises(ValueError, match=r"shared_negatives must be in \[1, batch_size = 1024\]"):
        SkipGramConfig(shared_negatives=3)
    with pytest.raises(ValueError, match="shared_negatives"):
        SkipGramConfig(shared_negatives=0)
    assert SkipGramConfig(shared_negatives=8).shared_negatives == 8
    with pytest.raises(ValueError, match="interleave must be >= 1 or None, got 0"):
        SkipGramConfig(interleave=0)


@pytest.mark.parametrize("copies", [1, 3, 4, 5, 40])
def test_a_recurring_pair_moves_its_rows_at_most_row_cap_times(copies):
    """A pair present k times in a batch moves its rows min(k, c) times as far as once: the
    plain sum (c = None) would move them k times."""
    rng = np.random.default_rng(1)
    syn0, syn1 = _tables(rng, 6, 4)
    one = (np.array([2], np.int32), np.array([3], np.int32), np.ones(1, np.float32))
    negs = np.array([[4, 5]], np.int32)
    many = tuple(np.repeat(a, copies, axis=0) for a in one)
    a0, a1, _ = capped_update(syn0, syn1, *one, negs, 0.1, 4)
    b0, b1, _ = capped_update(syn0, syn1, *many, np.repeat(negs, copies, 0), 0.1, 4)
    c0, c1, _ = capped_update(syn0, syn1, *many, np.repeat(negs, copies, 0), 0.1, None)
    factor = min(copies, 4)
    for got, one_step, summed, table in ((b0, a0, c0, syn0), (b1, a1, c1, syn1)):
        step = np.asarray(one_step) - table
        np.testing.assert_allclose(np.asarray(got) - table, factor * step, atol=1e-6)
        np.testing.assert_allclose(np.asarray(summed) - table, copies * step, atol=1e-6)


def test_row_multiplicity_counts_live_entries_and_clears_its_buffer():
    ids = jnp.array([3, 1, 3, 3, 0, 1, 7], jnp.int32)
    live = jnp.array([1, 1, 0, 1, 1, 1, 1], bool)
    k, scratch = jax.jit(row_multiplicity)(ids, live, jnp.zeros(8, jnp.int32))
    np.testing.assert_array_equal(k, [2, 2, 2, 2, 1, 2, 1])
    assert not np.asarray(scratch).any()


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_initialisation(scale):
    """``syn0 ~ U(-scale/d, scale/d)`` (gensim 4 at 1, word2vec at 0.5): the bound holds, the
    mean is 0 within 4 standard errors and the standard deviation is the uniform's
    ``2 scale / d / sqrt(12)`` (32,000 draws: its relative error is about 0.5 %)."""
    d = 64
    t = init_tables(jax.random.key(0), 500, d, scale)
    syn0 = np.asarray(t.syn0)
    sd = 2 * scale / d / np.sqrt(12)
    assert np.abs(syn0).max() <= scale / d and abs(syn0.mean()) < 4 * sd / np.sqrt(syn0.size)
    assert syn0.std() == pytest.approx(sd, rel=0.02)
    assert np.abs(syn0).max() > 0.99 * scale / d  # the whole range is used
    assert not np.asarray(t.syn1).any()


def test_trainer_starts_from_the_configured_range():
    g = power_law()
    mesh = make_mesh(1)
    for scale in (1.0, 0.25):
        tr = SkipGramTrainer(g.num_nodes, SkipGramConfig(dim=DIM, init_scale=scale), mesh, seed=0)
        syn0 = tr.input_vectors()
        assert np.abs(syn0).max() <= scale / DIM and np.abs(syn0).max() > 0.9 * scale / DIM
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="init_scale must be a finite number > 0"):
            SkipGramConfig(init_scale=bad)


def test_negatives_follow_count_power_075():
    counts = np.array([0, 1, 3, 10, 40, 200, 7, 0, 1000], np.float64)
    probs = negative_weights(counts)
    accept, alias = alias_table(probs)
    draws = negatives_of(jax.random.key(3), jnp.asarray(accept), jnp.asarray(alias), (1_000_000,))
    freq = np.bincount(np.asarray(draws), minlength=counts.size)
    assert freq[0] == 0 and freq[7] == 0
    nz = probs > 0
    assert stats.chisquare(freq[nz], probs[nz] * freq.sum()).pvalue > 1e-3


def _negatives(key, step, device, accept, alias, batch):
    k = jax.random.fold_in(jax.random.fold_in(key, step), device)
    return negatives_of(k, accept, alias, (batch, NEG))


def _interleaved(a, dev, s, period, j, span=None):
    """Step ``j`` of the chunk of steps ``s .. s + period`` of device ``dev``: pairs
    ``j, j + period, ...`` of the chunk (the trainer's interleaved batches), or with ``span``
    the same within each run of ``span`` steps (the last run may be shorter)."""
    span = period if span is None else min(span, period)
    first = (j // span) * span
    width = min(span, period - first)
    flat = a[dev, s : s + period].reshape(-1)
    return flat[first * BATCH + (j - first) + width * np.arange(BATCH)]


@pytest.mark.parametrize("merge", ["mean", "sum"])
@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_data_parallel_equals_single_device_oracle(num_parts, merge):
    """Merged after every step: mean = union batch at lr / P, sum = union batch at lr (the
    plain sum of updates; a row cap counts rows per device, so the union identity is for
    ``row_cap=None``). Merged every 2 steps, with and without a row cap: equals an explicit
    simulation of the P replicas on their interleaved batches."""
    rng = np.random.default_rng(num_parts)
    steps, lr = 4, 0.2
    mesh = make_mesh(num_parts, AXIS)
    for period, cap in ((1, None), (2, None), (2, 2)):
        _check_replicas(rng, mesh, num_parts, merge, steps, lr, period, cap)


@pytest.mark.parametrize("num_parts", [2, 8])
def test_data_parallel_with_shared_negatives_equals_oracle(num_parts):
    """Groups of 4 pairs sharing their negatives: the same identities as above, each device
    drawing K negatives per group of its batch."""
    rng = np.random.default_rng(10 + num_parts)
    mesh = make_mesh(num_parts, AXIS)
    for period, cap in ((1, None), (2, 2)):
        _check_replicas(rng, mesh, num_parts, "sum", 4, 0.2, period, cap, share=4)


@pytest.mark.parametrize("num_parts", [1, 2])
def test_batches_interleave_within_spans(num_parts):
    """``interleave = 3`` with a sync period of 4: steps 0-2 deal the first 3 B pairs of the
    chunk round-robin, step 3 trains the last B in order; equal to the replica simulation."""
    rng = np.random.default_rng(20 + num_parts)
    mesh = make_mesh(num_parts, AXIS)
    _check_replicas(rng, mesh, num_parts, "sum", 8, 0.2, 4, 2, span=3)


def _check_replicas(rng, mesh, num_parts, merge, steps, lr, period, cap, share=1, span=None):
    train = train_program(mesh, AXIS, NEG, cap, share, span)
    sync = sync_program(mesh, AXIS, AllSync(merge))
    syn0, syn1 = _tables(rng, N, DIM, 0.5)
    ins = rng.integers(0, 20, (num_parts, steps, BATCH)).astype(np.int32)  # many duplicates
    outs = rng.integers(0, 20, (num_parts, steps, BATCH)).astype(np.int32)
    w = (rng.random((num_parts, steps, BATCH)) > 0.1).astype(np.float32)
    counts = np.zeros(N)
    counts[:20] = np.arange(20) + 1.0
    accept, alias = (jnp.asarray(a) for a in alias_table(negative_weights(counts)))
    key = jax.random.key(5)

    stacked = Tables(*(np.broadcast_to(t, (num_parts, N, DIM)).copy() for t in (syn0, syn1)))
    tables = jax.device_put(stacked)
    anchor = jax.device_put(Tables(*(a.copy() for a in stacked))) if merge == "sum" else None
    for s in range(0, steps, period):
        # Buffers of BUFFER steps, of which the first `period` are run.
        chunk = [np.zeros((num_parts, BUFFER, BATCH), a.dtype) for a in (ins, outs, w)]
        for c, a in zip(chunk, (ins, outs, w), strict=True):
            c[:, :period] = a[:, s : s + period]
        lrs = jnp.full(BUFFER, lr, jnp.float32)
        tables, _ = train(
            tables, *chunk, lrs, jnp.int32(period), jnp.int32(s), key, NegativeTable(accept, alias)
        )
        tables, anchor = sync(tables, anchor)
    got = [np.asarray(t) for t in tables]
    for t in got:  # every replica identical after a merge
        np.testing.assert_array_equal(t, np.broadcast_to(t[:1], t.shape))

    ref = (jnp.asarray(syn0), jnp.asarray(syn1))
    if period == 1:  # the single-device oracle on the union batch
        scale = lr / num_parts if merge == "mean" else lr
        for s in range(steps):
            neg = jnp.concatenate(
                [_negatives(key, s, d, accept, alias, BATCH // share) for d in range(num_parts)]
            )
            flat = [a[:, s].reshape(-1) for a in (ins, outs, w)]
            ref = update(*ref, flat[0], flat[1], neg, flat[2], scale)[:2]
    else:  # P replicas, merged every `period` steps
        for s in range(0, steps, period):
            reps = []
            for dev in range(num_parts):
                r = ref
                for j in range(period):
                    neg = _negatives(key, s + j, dev, accept, alias, BATCH // share)
                    batch = (_interleaved(a, dev, s, period, j, span) for a in (ins, outs, w))
                    r = capped_update(*r, *batch, neg, lr, cap)[:2]
                reps.append(r)
            if merge == "mean":
                ref = tuple(jnp.mean(jnp.stack([r[i] for r in reps]), 0) for i in range(2))
            else:
                ref = tuple(ref[i] + sum(r[i] - ref[i] for r in reps) for i in range(2))
    for t, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(t[0], np.asarray(r), atol=TOL, rtol=0)


@pytest.mark.parametrize("num_parts", [4])
def test_trainer_round_is_reproducible_and_replicas_agree(num_parts):
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=6), seed=0)
    assert g.num_nodes == N
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=BUFFER)
    mesh = make_mesh(num_parts, AXIS)
    runs = []
    for _ in range(2):
        tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3)
        st = tr.train_round(walks, 0)
        reps = tr.replicas()
        for t in reps:
            np.testing.assert_array_equal(np.asarray(t), np.broadcast_to(t[:1], t.shape))
        runs.append(tr.embeddings())
        assert st.pairs > 0 and np.isfinite(st.loss) and st.lr == cfg.lr
        assert st.steps >= st.pairs / (cfg.batch_size * num_parts)
        assert st.syncs == 1 + (st.steps - 1) // cfg.sync_every
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.abs(runs[0][1]).sum() > 0  # syn1 moved away from zero


def test_trainer_errors():
    mesh = make_mesh(1, AXIS)
    with pytest.raises(ValueError, match="dim must be positive"):
        SkipGramConfig(dim=0)
    with pytest.raises(ValueError, match="counts must be one of"):
        SkipGramConfig(counts="pagerank")
    with pytest.raises(ValueError, match="counts='degree' needs degrees"):
        SkipGramTrainer(10, SkipGramConfig(counts="degree"), mesh)
    with pytest.raises(ValueError, match="'global' needs schedule_rounds"):
        SkipGramTrainer(10, SkipGramConfig(lr_schedule="global"), mesh)
    with pytest.raises(ValueError, match="merge must be one of mean, sum, touched"):
        AllSync("max")


def test_degree_counts_and_linear_schedule_options():
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=6), seed=0)
    mesh = make_mesh(1, AXIS)
    base = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=BUFFER)
    out = {}
    for name, cfg in {
        "default": base,
        "degree": dataclasses.replace(base, counts="degree"),
        "linear": dataclasses.replace(base, lr_schedule="linear"),
    }.items():
        tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3, degrees=g.out_degree())
        st = tr.train_round(walks, 2)
        assert st.lr == pytest.approx(cfg.lr * np.exp(-0.2)) and np.isfinite(st.loss)
        out[name] = tr.embeddings()[0]
    # Degree counts change the negatives and the sub-sampling; the linear schedule takes
    # smaller steps, so the tables move less from their common initialisation.
    assert not np.array_equal(out["default"], out["degree"])
    init = np.asarray(init_tables(jax.random.key(3), g.num_nodes, DIM).syn0)
    assert np.abs(out["linear"] - init).sum() < np.abs(out["default"] - init).sum()


def test_learning_rate_schedules():
    """Per-step rates by token fraction: constant, linear within a round, and one linear decay
    over ``R`` rounds that continues across round boundaries and bottoms out at 1e-4."""
    frac = np.array([0.0, 0.25, 0.5, 0.999999])
    a0 = 0.025
    rnd = SkipGramConfig(lr=a0)
    np.testing.assert_allclose(rnd.step_rates(2, frac), a0 * np.exp(-0.2))
    lin = SkipGramConfig(lr=a0, lr_schedule="linear")
    np.testing.assert_allclose(
        lin.step_rates(1, frac), a0 * np.exp(-0.1) * np.maximum(1 - frac, 1e-4)
    )
    glo = SkipGramConfig(lr=a0, lr_schedule="global", schedule_rounds=4)
    np.testing.assert_allclose(glo.step_rates(1, frac), a0 * (1 - (1 + frac) / 4))
    assert glo.step_rates(1, frac[-1:])[0] == pytest.approx(glo.step_rates(2, [0.0])[0])
    assert glo.round_lr(2) == pytest.approx(a0 / 2)
    np.testing.assert_allclose(glo.step_rates(4, frac), a0 * 1e-4)  # past R: the floor
    with pytest.raises(ValueError, match="needs schedule_rounds"):
        SkipGramConfig(lr_schedule="global").step_rates(0, frac)
    with pytest.raises(ValueError, match="schedule_rounds must be >= 1, got 0"):
        SkipGramConfig(lr_schedule="global", schedule_rounds=0)
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        SkipGramConfig(lr_schedule="cosine")


def test_global_schedule_over_one_round_is_the_linear_schedule():
    """With R = 1 the global schedule is word2vec's single linear decay, which is what the
    linear schedule does in round 0: the trained tables are identical."""
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=6), seed=0)
    mesh = make_mesh(1, AXIS)
    base = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=BUFFER)
    out = []
    for cfg in (
        dataclasses.replace(base, lr_schedule="linear"),
        dataclasses.replace(base, lr_schedule="global", schedule_rounds=1),
    ):
        tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3)
        tr.train_round(walks, 0)
        out.append(tr.embeddings())
    for a, b in zip(out[0], out[1], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("num_parts", [2, 4])
def test_touched_merge_averages_the_changes_of_the_replicas_that_changed_a_row(num_parts):
    """Row 0 changed on every replica, row 1 on replica 0 only, row 2 on none."""
    mesh = make_mesh(num_parts, AXIS)
    sync = sync_program(mesh, AXIS, AllSync("touched"))
    anchor = np.zeros((num_parts, 3, 2), np.float32)
    tables = anchor.copy()
    tables[:, 0] = np.arange(num_parts)[:, None] + 1.0
    tables[0, 1] = 5.0
    (merged, _), _ = sync(
        Tables(jnp.asarray(tables), jnp.asarray(tables)),
        Tables(jnp.asarray(anchor), jnp.asarray(anchor)),
    )
    want = [np.full(2, (num_parts + 1) / 2), np.full(2, 5.0), np.zeros(2)]
    for replica in np.asarray(merged):
        np.testing.assert_allclose(replica, np.stack(want), rtol=1e-6)


@dataclasses.dataclass(frozen=True)
class _WholeTableSync:
    """AllSync's rule under another type, which the trainer runs as given: every row of both
    tables at every sync."""

    merge: str

    @property
    def needs_anchor(self):
        return self.merge != "mean"

    def __call__(self, tables, anchor, *, axis_name):
        return merge_rows(tables, anchor, self.merge, axis_name=axis_name)

    def rows(self, num_nodes):
        return 2 * num_nodes


@pytest.mark.parametrize(
    "num_parts, merge, kernel",
    [
        (1, "sum", "cpu"),
        (2, "sum", "cpu"),
        (2, "mean", "cpu"),
        (4, "sum", "cpu"),
        (4, "touched", "cpu"),
        (2, "sum", "jax"),
        (4, "touched", "jax"),
    ],
)
def test_allsync_merges_the_trained_input_rows_and_equals_a_whole_table_merge(
    num_parts, merge, kernel
):
    """A round on the 300-node graph, merged every 4 steps of 16 pairs per device: AllSync
    merges ``syn0`` at the inputs trained since the last merge only (on the devices padded to
    75 rows, a quarter, or all rows when more; the CPU kernel's host merge takes the rows as
    they are), and one replica not at all between rounds; the tables equal those of merging
    every row on the devices. On 1 and 2 replicas exactly (``2a - a`` and ``(a + a) / 2`` are
    exact); on 4 within fp32 rounding (``4a - 3a`` is not)."""
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=6), seed=0)
    cfg = SkipGramConfig(
        dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=BUFFER, merge=merge
    )
    cfg = dataclasses.replace(cfg, kernel=kernel)
    mesh = make_mesh(num_parts, AXIS)
    out = {}
    for name, sync in {"allsync": AllSync(merge), "whole": _WholeTableSync(merge)}.items():
        tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3, sync=sync)
        stats = [tr.train_round(walks, r) for r in range(2)]
        out[name] = ([np.asarray(t) for t in tr.replicas()], stats)
    (got, got_stats), (want, want_stats) = out["allsync"], out["whole"]
    for g_t, w_t in zip(got, want, strict=True):
        np.testing.assert_array_equal(g_t, np.broadcast_to(g_t[:1], g_t.shape))
        if num_parts <= 2:
            np.testing.assert_array_equal(g_t, w_t)
        else:
            np.testing.assert_allclose(g_t, w_t, atol=TOL, rtol=0)
    for a, b in zip(got_stats, want_stats, strict=True):
        assert a.pairs == b.pairs and b.syncs > 2
        assert b.sync_rows == b.syncs * 2 * N
        if num_parts == 1:
            assert (a.syncs, a.sync_rows) == (1, 2 * N)  # the round-end merge only
        else:
            assert a.syncs == b.syncs
            # A periodic merge moves all N rows of syn1 and C of syn0. On the devices C = 75
            # while the inputs fit (on 2 replicas 128 pairs per period touch 39-56 of them; on
            # 4, 256 pairs touch 46-99), else C = N; on the host C is the touched rows.
            periodic = a.sync_rows - 2 * N
            if kernel == "cpu":
                pairs = BUFFER * BATCH * num_parts
                assert (a.syncs - 1) * (N + 1) <= periodic <= (a.syncs - 1) * (N + pairs)
                assert pairs < N
            else:
                assert (a.syncs - 1) * (N + 75) <= periodic < (a.syncs - 1) * 2 * N
            if num_parts == 2 and kernel == "jax":
                assert periodic == (a.syncs - 1) * (N + 75)


def test_long_sum_merge_periods_warn_before_training():
    """merge='sum' at SUM_SWING_STEPS steps or more on several replicas warns at construction;
    one replica, a shorter period, or another merge rule do not (on a graph large enough that
    sum_period keeps 512 steps on 2 replicas)."""
    n = SUM_SWING_STEPS * BATCH // SUM_ROW_UPDATES
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, merge="sum")
    long = dataclasses.replace(cfg, sync_every=SUM_SWING_STEPS)
    with pytest.warns(UserWarning, match=r"merge='sum' every 512 steps: .*use merge='mean'"):
        SkipGramTrainer(n, long, make_mesh(2, AXIS))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SkipGramTrainer(n, long, make_mesh(1, AXIS))
        SkipGramTrainer(
            n, dataclasses.replace(long, sync_every=SUM_SWING_STEPS - 1), make_mesh(2, AXIS)
        )
        SkipGramTrainer(n, dataclasses.replace(long, merge="touched"), make_mesh(2, AXIS))
        # On a smaller graph the sum's period is cut below the swing.
        SkipGramTrainer(n - 1, long, make_mesh(2, AXIS))


@pytest.mark.parametrize("num_parts", [1, 2, 4, 8])
def test_sum_merges_at_most_a_few_blind_updates_per_row_apart(num_parts):
    """The trainer runs merge='sum' every sum_period steps: between two merges the other
    replicas train at most 8 pairs per row and, from 3 replicas, 64 steps; every other rule,
    and one replica, keep sync_every."""
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=64)
    mesh = make_mesh(num_parts, AXIS)
    for n in (10, 100, 300, 5000):
        expect = 64
        if num_parts > 1:
            blind = SUM_ROW_UPDATES * n // BATCH
            blind = blind if num_parts == 2 else min(blind, SUM_BLIND_STEPS)
            expect = max(1, min(64, blind // (num_parts - 1)))
        got = SkipGramTrainer(n, dataclasses.replace(cfg, merge="sum"), mesh).config
        assert got.sync_every == sum_period(64, n, BATCH, num_parts) == expect
        assert dataclasses.replace(got, sync_every=64, merge="mean") == cfg
        for merge in ("mean", "touched"):
            other = SkipGramTrainer(n, dataclasses.replace(cfg, merge=merge), mesh).config
            assert other.sync_every == 64
    # The bound itself: min(8 N / B, 64 for P >= 3) / (P - 1) rounded down, within
    # [1, sync_every].
    assert sum_period(64, 300, 16, 2) == 64
    assert sum_period(1000, 300, 16, 2) == 150
    assert sum_period(1000, 300, 16, 3) == 32
    assert sum_period(1000, 300, 16, 4) == 21
    assert sum_period(1000, 30, 16, 4) == 5
    assert sum_period(1000, 10, 16, 8) == 1
    assert sum_period(7, 10, 16, 1) == 7


def test_the_cpu_kernel_trains_one_copy_per_thread_on_one_device():
    """One device on the CPU kernel's T > 1 threads trains T copies (either objective),
    merged every T sum_period steps of the device; one thread, several devices and the JAX
    program train the device's tables."""
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=64)
    degrees = np.ones(N, np.int64)
    for threads, kernel, objective, parts, copies in (
        (2, "cpu", "negative", 1, 2),
        (1, "cpu", "negative", 1, 1),
        (2, "cpu", "hierarchical", 1, 2),
        (2, "cpu", "negative", 2, 1),
        (2, "jax", "negative", 1, 1),
    ):
        if threads > numba.config.NUMBA_NUM_THREADS:
            continue
        c = dataclasses.replace(cfg, threads=threads, kernel=kernel, objective=objective)
        tr = SkipGramTrainer(N, c, make_mesh(parts, AXIS), degrees=degrees)
        assert tr.copies == copies
        want = 64 if copies == 1 else copies * sum_period(64, N, BATCH, copies)
        assert tr.config.sync_every == want


class _Counted:
    """A program that logs each call (1) and each compilation (0) in ``calls``."""

    def __init__(self, program, calls: list):
        self.program, self.calls = program, calls

    def __call__(self, *args):
        self.calls.append(1)
        return self.program(*args)

    def lower(self, *args):
        self.calls.append(0)
        return self.program.lower(*args)


@pytest.mark.parametrize("kernel", ["cpu", "jax"])
def test_one_replica_merged_by_its_mean_runs_no_sync_program(kernel):
    """On one device with merge='mean' the closing merges are the identity: no sync program
    compiles or runs, and the tables end bit for bit as when the program runs them."""
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=6), seed=0)
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, kernel=kernel)
    runs = []
    for forced in (False, True):
        tr = SkipGramTrainer(g.num_nodes, cfg, make_mesh(1, AXIS), seed=3)
        calls = []
        tr.programs = tr.programs._replace(
            full_sync=_Counted(tr.programs.full_sync, calls),
            periodic_sync=_Counted(tr.programs.periodic_sync, calls),
        )
        tr._merges_itself = tr._merges_itself and not forced
        tr.compile()
        tr.train_round(walks, 0)
        runs.append(tr.embeddings())
        # forced: full_sync compiled, then run by the round's closing merge and embeddings()
        assert calls == ([0, 1, 1] if forced else [])
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("threads, copies", [(3, 3), (MAX_COPIES, MAX_COPIES), (MAX_COPIES + 1, 1)])
def test_copies_up_to_max_copies_threads(monkeypatch, threads, copies):
    """Up to MAX_COPIES threads (numba's count) train a copy each, every 64 / (T - 1) steps of
    each; more threads share the device's tables (their merges would outgrow training)."""
    monkeypatch.setattr(numba, "get_num_threads", lambda: threads)
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, kernel="cpu")
    tr = SkipGramTrainer(5000, cfg, make_mesh(1, AXIS))
    assert tr.copies == copies
    per_copy = SUM_BLIND_STEPS // (threads - 1)
    assert tr.config.sync_every == (64 if copies == 1 else copies * per_copy)


def test_copies_that_do_not_fit_in_memory_fall_back_with_a_warning(monkeypatch):
    """Copies and their anchor take at most half the free memory: with room for 2 tables' worth
    (one copy and its anchor), 2 threads share the device's tables, and the trainer says so."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads")
    from jaxgraph import mesh
    from jaxgraph.embed import cpu_replicas

    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, threads=2)
    tables = 2 * N * DIM * 4
    monkeypatch.setattr(cpu_replicas, "free_memory", lambda: 4 * tables)
    with pytest.warns(
        UserWarning,
        match=r"2 threads would train 2 copies .* training one copy \(the threads share",
    ):
        assert SkipGramTrainer(N, cfg, make_mesh(1, AXIS)).copies == 1
    monkeypatch.setattr(cpu_replicas, "free_memory", lambda: 6 * tables)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SkipGramTrainer(N, cfg, make_mesh(1, AXIS)).copies == 2
    assert mesh.free_memory() > 0
