"""Selective table syncs (HaSyn and RandomSync): block construction and keyed selection on the host,
exact row merging on 4 and 8 devices (rank-coded tables), the staleness bound of the periodic
full merge, byte accounting, and the trainer's update counts."""

import jax
import numpy as np
import pytest

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed.corpus import keep_probability, skipgram_pairs
from jaxgraph.embed.merge import AllSync
from jaxgraph.embed.programs import indexed_sync_program
from jaxgraph.embed.sgns import SkipGramConfig, Tables
from jaxgraph.embed.sizes import padded_size
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.sync import (
    HotspotSync,
    RandomSync,
    SyncPlan,
    hotspot_blocks,
    select_hotspots,
    select_hottest,
    sync_bytes,
)
from jaxgraph.embed.walks import WalkConfig, random_walks
from jaxgraph.mesh import make_mesh

from graph_cases import power_law

AXIS = "parts"
# Trainer shapes of test_skipgram.py, to reuse its compilations.
N, DIM, BATCH, NEG, BUFFER = 300, 8, 16, 2, 4


def test_padded_sizes():
    assert [padded_size(n) for n in (1, 2, 3, 16, 17, 33, 1715)] == [1, 2, 3, 16, 18, 36, 1792]
    for n in range(1, 5000):
        assert n <= padded_size(n) <= n + n // 8


def test_blocks_are_maximal_equal_count_runs():
    counts = np.array([5, 3, 3, 9, 0, 0, 0, 3])
    order, starts = hotspot_blocks(counts)
    blocks = [sorted(order[a:b].tolist()) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    assert blocks == [[3], [0], [1, 2, 7], [4, 5, 6]]


def test_one_node_per_block_uniformly_including_the_last():
    counts = np.array([5, 3, 3, 9, 0, 0, 0, 3, 0, 0])
    rng = np.random.default_rng(0)
    draws = np.array([select_hotspots(counts, rng) for _ in range(4000)])  # [4000, |F|]
    assert draws.shape == (4000, 4)
    np.testing.assert_array_equal(draws[:, 0], 3)  # singleton blocks: synced every time
    np.testing.assert_array_equal(draws[:, 1], 0)
    assert set(np.unique(draws[:, 2])) == {1, 2, 7}
    assert set(np.unique(draws[:, 3])) == {4, 5, 6, 8, 9}  # the last (coldest) block too
    for col, size in ((2, 3), (3, 5)):
        freq = np.unique(draws[:, col], return_counts=True)[1] / len(draws)
        np.testing.assert_allclose(freq, 1 / size, atol=0.03)


def test_plans_are_keyed_padded_and_accounted():
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 40, 300)
    distinct = np.unique(counts).size
    sync = HotspotSync(full_every=None)
    plan = sync.plan(counts, counts, 3, 7)
    again = sync.plan(counts, counts, 3, 7)  # any process computes the same rows from the same key
    np.testing.assert_array_equal(plan.index, again.index)
    assert not np.array_equal(plan.index, sync.plan(counts, counts, 4, 7).index)
    assert plan.selected == distinct
    cap = plan.index.size
    assert cap == padded_size(distinct) and plan.rows == 2 * cap
    np.testing.assert_array_equal(plan.index[distinct:], plan.index[0])  # padding repeats
    assert np.unique(counts[plan.index[:distinct]]).size == distinct  # one per block
    assert sync_bytes(plan.rows, 128) == 2 * cap * 128 * 4

    rand = RandomSync(full_every=None).plan(counts, counts, 3, 7)
    assert rand.selected == plan.selected and rand.rows == plan.rows  # same sync size
    assert np.unique(rand.index[: rand.selected]).size == rand.selected
    fixed = RandomSync(num_rows=10, full_every=None).plan(counts, counts, 0, 7)
    assert fixed.selected == fixed.index.size == 10
    # Hotness of the round only: the blocks come from the round's counts.
    round_counts = counts % 3
    by_round = HotspotSync(full_every=None, counts="round").plan(counts, round_counts, 3, 7)
    assert by_round.selected == 3 and np.unique(round_counts[by_round.index]).size == 3
    # Every node distinct: the selection would be every row, so the plan is a full merge.
    assert sync.plan(np.arange(50), np.arange(50), 0, 0) == SyncPlan(None, 50, 100)


def test_hottest_rows_take_every_larger_count_and_draw_ties_uniformly():
    counts = np.array([9, 1, 7, 4, 4, 4, 0, 4, 8])  # cut at 4 rows: 9, 8, 7 and one of four 4s
    rng = np.random.default_rng(0)
    draws = np.array([select_hottest(counts, 4, rng) for _ in range(4000)])
    assert (np.diff(draws, axis=1) > 0).all()  # sorted, distinct
    assert np.isin([0, 2, 8], draws).all() and np.isin(draws, [0, 2, 8, 3, 4, 5, 7]).all()
    tied = draws[~np.isin(draws, [0, 2, 8])]
    assert tied.size == 4000
    freq = np.unique(tied, return_counts=True)[1] / tied.size
    np.testing.assert_allclose(freq, 0.25, atol=0.03)  # 4000 draws: 3 std of a share is 0.021
    np.testing.assert_array_equal(select_hottest(counts, 20, rng), np.arange(9))


def test_pending_hotness_selects_from_the_pending_counts():
    rng = np.random.default_rng(4)
    total, by_round = rng.integers(0, 50, 200), rng.integers(0, 50, 200)
    pending = rng.permutation(200)  # distinct: the top rows are unambiguous
    sync = HotspotSync(counts="pending", num_rows=10, full_every=None)
    plan = sync.plan(total, by_round, 0, 1, pending_counts=pending)
    np.testing.assert_array_equal(plan.index[: plan.selected], np.sort(np.argsort(pending)[-10:]))
    with pytest.raises(ValueError, match="pending_counts"):
        sync.plan(total, by_round, 0, 1)
    # A float budget is a share of the nodes, rounded up: 0.052 of 200 nodes is 11 rows.
    share = HotspotSync(counts="pending", num_rows=0.052, full_every=None)
    assert share.budget(200) == 11 and HotspotSync(num_rows=np.int64(7)).budget(200) == 7
    assert HotspotSync(num_rows=0.05).budget(300) == 15  # not 16 from 15.000000000000002
    plan = share.plan(total, by_round, 0, 1, pending_counts=pending)
    np.testing.assert_array_equal(plan.index[: plan.selected], np.sort(np.argsort(pending)[-11:]))
    rand = RandomSync(num_rows=0.052, full_every=None).plan(total, by_round, 0, 1)
    assert rand.selected == 11
    blocks = HotspotSync(counts="pending", full_every=None).plan(
        total, by_round, 0, 1, pending_counts=pending % 7
    )
    assert blocks.selected == 7  # one per distinct pending count
    rand = RandomSync(counts="pending", full_every=None).plan(
        total, by_round, 0, 1, pending_counts=pending % 7
    )
    assert rand.selected == 7


def test_trainer_pending_counts_are_updates_since_each_rows_last_merge():
    g, walks, cfg = _walks_and_config()
    mesh = make_mesh(4, AXIS)
    sync = HotspotSync(counts="pending", num_rows=20, full_every=5)
    tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3, sync=sync)
    plans = []
    tr.sync = rec = _Recording(tr.sync, plans)
    for r in range(2):
        rec.calls.clear()
        plans.clear()
        st = tr.train_round(walks, r)
        assert len(plans) == st.syncs - 1 > 5
        merged_at = np.zeros(N, np.int64)  # round counts at each row's last merge
        for (args, kwargs), plan in zip(rec.calls, plans, strict=True):
            round_counts = args[1]
            np.testing.assert_array_equal(kwargs["pending_counts"], round_counts - merged_at)
            pend = kwargs["pending_counts"]
            if plan.index is None:
                merged_at[:] = round_counts
                continue
            chosen = plan.index[: plan.selected]
            assert plan.selected == 20
            assert pend[chosen].min() >= np.delete(pend, chosen).max()  # the 20 hottest
            merged_at[chosen] = round_counts[chosen]
        first = tr.periodic_syncs - len(plans)  # the sync index keys the whole run
        assert [p.index is None for p in plans] == [
            sync.is_full(first + i) for i in range(len(plans))
        ]
        assert any(p.index is None for p in plans)
        np.testing.assert_array_equal(tr.pending_counts, 0)  # the round-end merge


def test_full_every_bounds_staleness():
    """No node goes more than ``full_every`` periodic syncs without being merged."""
    counts = np.repeat(np.arange(20), 15)  # 300 nodes in 20 blocks: cold nodes rarely drawn
    for full_every in (1, 3, 5):
        sync = HotspotSync(full_every=full_every)
        last = np.full(counts.size, -1)
        for i in range(40):
            plan = sync.plan(counts, counts, i, 0)
            assert (plan.index is None) == ((i + 1) % full_every == 0)
            if plan.index is None:
                last[:] = i
            else:
                last[plan.index] = i
            assert (i - last).max() < full_every
    assert HotspotSync(full_every=None).plan(counts, counts, 99, 0).index is not None


@pytest.mark.parametrize("num_parts", [4, 8])
@pytest.mark.parametrize("merge", ["mean", "sum"])
def test_selected_rows_are_merged_exactly_and_others_untouched(num_parts, merge):
    n, d = 64, 4
    mesh = make_mesh(num_parts, AXIS)
    rep = np.arange(num_parts, dtype=np.float32)[:, None, None]
    rows = np.arange(n, dtype=np.float32)[None, :, None]
    cols = np.arange(d, dtype=np.float32)[None, None, :]
    # Rank-coded: replica p holds 1000 p + 10 v + c (syn1 shifted), so a misrouted row shows.
    syn0 = 1000 * rep + 10 * rows + cols
    syn1 = syn0 + 0.5
    counts = np.random.default_rng(2).integers(0, 9, n)
    sync = HotspotSync(merge=merge, full_every=None)
    plan = sync.plan(counts, counts, 0, 0)
    chosen = np.unique(plan.index)
    assert chosen.size == plan.selected == np.unique(counts).size
    shard = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    tables = jax.device_put(Tables(syn0, syn1), shard)
    anchor = None
    if merge == "sum":
        anchor = jax.device_put(Tables(syn0 * 0 + 7.0, syn1 * 0 - 3.0), shard)
    program = indexed_sync_program(mesh, AXIS, sync)
    new, new_anchor = program(tables, anchor, jax.device_put(plan.index))
    for before, after, a in zip((syn0, syn1), new, (7.0, -3.0), strict=True):
        after = np.asarray(after)
        if merge == "mean":
            expect = before[:, chosen].mean(axis=0)
        else:
            expect = a + (before[:, chosen] - a).sum(axis=0)
        for p in range(num_parts):  # every replica: the same merged rows
            np.testing.assert_array_equal(after[p, chosen], expect)
        others = np.setdiff1d(np.arange(n), chosen)
        np.testing.assert_array_equal(after[:, others], before[:, others])
        # The rows on which the replicas agree are exactly the selected ones.
        agree = np.flatnonzero((after == after[:1]).all(axis=(0, 2)))
        np.testing.assert_array_equal(agree, chosen)
    if merge == "sum":
        for tab, anc in zip(new, new_anchor, strict=True):
            np.testing.assert_array_equal(np.asarray(anc)[:, chosen], np.asarray(tab)[:, chosen])
            others = np.setdiff1d(np.arange(n), chosen)
            assert np.isin(np.asarray(anc)[:, others], (7.0, -3.0)).all()


def _walks_and_config():
    g = power_law()
    walks = random_walks(g, np.arange(g.num_nodes), WalkConfig(walk_length=6), seed=0)
    cfg = SkipGramConfig(dim=DIM, window=3, negatives=NEG, batch_size=BATCH, sync_every=BUFFER)
    return g, walks, cfg


def test_trainer_counts_real_updates_and_accounts_sync_rows():
    g, walks, cfg = _walks_and_config()
    mesh = make_mesh(4, AXIS)
    tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3, sync=HotspotSync(full_every=3))
    plans = []
    tr.sync = _Recording(tr.sync, plans)  # same program (bound before), records each plan
    st = tr.train_round(walks, 0)
    # Update counts: one per pair as input (syn0) and one as positive output (syn1), of
    # exactly the pairs trained (the round's pairs are a multiset independent of the split).
    keep = keep_probability(tr.counts, cfg.sample)
    key = hr.round_key(3, hr.PURPOSE_PAIRS, 0)
    ins, outs = skipgram_pairs(walks, np.arange(walks.num_walks), keep, cfg.window, key)
    expect = np.bincount(ins, minlength=N) + np.bincount(outs, minlength=N)
    np.testing.assert_array_equal(tr.update_counts, expect)
    assert tr.update_counts.sum() == 2 * st.pairs
    assert len(plans) == st.syncs - 1 == tr.periodic_syncs > 3
    assert st.sync_rows == sum(p.rows for p in plans) + 2 * N
    assert st.sync_rows < st.syncs * 2 * N
    assert [p.index is None for p in plans[:3]] == [False, False, True]
    for t in tr.replicas():  # the round-end merge leaves one table
        np.testing.assert_array_equal(np.asarray(t), np.broadcast_to(t[:1], t.shape))


def test_full_every_one_equals_allsync_and_random_sync_runs():
    g, walks, cfg = _walks_and_config()
    mesh = make_mesh(2, AXIS)
    out = {}
    for name, sync in {
        "all": AllSync(),
        "hot1": HotspotSync(full_every=1),
        "random": RandomSync(full_every=None),
    }.items():
        tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=3, sync=sync)
        st = tr.train_round(walks, 0)
        out[name] = (tr.embeddings()[0], st)
    np.testing.assert_array_equal(out["hot1"][0], out["all"][0])
    assert out["hot1"][1].syncs == out["all"][1].syncs
    assert out["hot1"][1].sync_rows == out["hot1"][1].syncs * 2 * N
    # AllSync merges syn0 only at the inputs trained since the last merge: at most 75 of the 300
    # rows (the devices pad them to 75; the CPU kernel's host merge takes them as they are).
    periods, periodic = out["all"][1].syncs - 1, out["all"][1].sync_rows - 2 * N
    assert periods * (N + 1) <= periodic <= periods * (N + 75)
    assert out["random"][1].sync_rows < out["hot1"][1].sync_rows
    assert np.isfinite(out["random"][0]).all()


def test_errors():
    with pytest.raises(ValueError, match="merge"):
        HotspotSync(merge="max")
    with pytest.raises(ValueError, match="full_every"):
        HotspotSync(full_every=0)
    for bad in (0, 0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="num_rows"):
            HotspotSync(num_rows=bad)
    with pytest.raises(ValueError, match="num_rows"):
        RandomSync(num_rows=0)
    with pytest.raises(ValueError, match="counts must be"):
        HotspotSync(counts="degree")


class _Recording:
    """Wraps a planned sync and records its plans (the trainer's programs are already bound)."""

    def __init__(self, sync, plans):
        self._sync, self._plans = sync, plans
        self.calls = []  # copies of the arguments of every plan
        self.merge, self.needs_anchor = sync.merge, sync.needs_anchor

    def plan(self, *args, **kwargs):
        copy = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
        self.calls.append((copy, {k: np.array(v) for k, v in kwargs.items()}))
        plan = self._sync.plan(*args, **kwargs)
        self._plans.append(plan)
        return plan

    def rows(self, num_nodes):
        return self._sync.rows(num_nodes)


def test_selections_are_int32_and_empty_without_nodes():
    rng = np.random.default_rng(0)
    for counts in (np.zeros(0, np.int64), np.array([4])):
        got = select_hotspots(counts, rng)
        assert got.dtype == np.int32 and got.tolist() == list(range(counts.size))
    assert select_hottest(np.array([1, 5, 3]), 2, rng).dtype == np.int32
    assert RandomSync(num_rows=2).select(np.array([1, 5, 3]), rng).dtype == np.int32


def test_block_draws_are_independent_across_blocks():
    """Two blocks of two equal counts: each pick is a fair coin, and the two coins differ in
    about half of the draws (one shared uniform would always pick the same position)."""
    counts = np.array([5, 5, 3, 3])
    rng = np.random.default_rng(2)
    draws = np.array([select_hotspots(counts, rng) for _ in range(400)])  # [400, 2]
    same_position = (draws[:, 0] == 0) == (draws[:, 1] == 2)
    assert 0.35 < same_position.mean() < 0.65  # 400 fair coins: 3 std is 0.075


def test_selection_padded_to_every_row_is_a_full_merge():
    """17 hottest of 18 rows pad to ``padded_size(17) = 18`` rows: the plan merges everything;
    of 40 rows it merges 18, the padding repeating the first selected row."""
    counts = np.arange(40)[::-1].copy()  # node i has the (i+1)-th largest count
    sync = HotspotSync(num_rows=17, full_every=None)
    assert sync.plan(counts[:18], counts[:18], 0, 0) == SyncPlan(None, 18, 36)
    plan = sync.plan(counts, counts, 0, 0)
    assert plan.selected == 17 and plan.rows == 36
    np.testing.assert_array_equal(plan.index, list(range(17)) + [0])


def test_share_budget_rounds_up_to_at_least_one_row():
    assert HotspotSync(num_rows=0.01).budget(50) == 1  # 0.5 rows
    assert HotspotSync(num_rows=0.05).budget(300) == 15
    assert HotspotSync(num_rows=0.05).budget(301) == 16
    assert HotspotSync().budget(50) is None
    assert HotspotSync().rows(10) == RandomSync().rows(10) == 20  # both tables, every row


def test_budget_bounds_are_inclusive():
    """``num_rows = 1`` (one row) and ``num_rows = 1.0`` (every node) are the ends of the valid
    ranges: a count >= 1 and a share in (0, 1]."""
    counts = np.array([2, 9, 4])
    one = HotspotSync(num_rows=1, full_every=None)
    assert one.budget(3) == 1 and RandomSync(num_rows=1).budget(3) == 1
    # The single hottest row (node 1, count 9); padded_size(1) = 1 < 3 rows: no full merge.
    np.testing.assert_array_equal(one.plan(counts, counts, 0, 0).index, [1])
    assert one.plan(counts, counts, 0, 0).selected == 1
    every = HotspotSync(num_rows=1.0, full_every=None)
    assert every.budget(7) == 7 and RandomSync(num_rows=1.0).budget(3) == 3
    assert every.plan(counts, counts, 0, 0) == SyncPlan(None, 3, 6)  # all rows: a full merge


def test_share_budget_rounding_absorbs_float_error_of_large_products():
    # 0.56 of 600,000,000 nodes is exactly 336,000,000 rows, but 0.56 * 6e8 is
    # 336000000.00000006 in float64 (one ulp, 6e-8, above): rounding to 6 decimals removes it,
    # rounding to 7 would not and ceil would add a row.
    assert 0.56 * 600_000_000 > 336_000_000
    assert HotspotSync(num_rows=0.56).budget(600_000_000) == 336_000_000


def test_periodic_full_merge_selects_every_node():
    counts = np.array([2, 9, 4, 4, 2, 9])  # 3 blocks of 6 nodes
    sync = HotspotSync(full_every=2)
    assert sync.plan(counts, counts, 1, 0) == SyncPlan(None, 6, 12)  # sync 1: (1 + 1) % 2 == 0
    assert sync.plan(counts, counts, 0, 0).selected == 3  # sync 0: one node per block


def test_error_messages_name_the_option_and_its_values():
    with pytest.raises(ValueError, match=r"counts must be one of total, round, pending, got 'x'"):
        HotspotSync(counts="x")
    sync = RandomSync(counts="pending")
    with pytest.raises(ValueError) as err:
        sync.plan(np.zeros(3), np.zeros(3), 0, 0)
    assert str(err.value) == (
        "counts='pending' needs pending_counts (updates since each row's last merge)"
    )
