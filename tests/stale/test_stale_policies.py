"""Sancus staleness policies on scripted trajectories (pure functions, no mesh)."""

import math

import numpy as np
import pytest

from jaxgraph.comm.cagnet import CAGNET
from jaxgraph.comm.sancus import Sancus
from jaxgraph.comm.staleness import NOT_READ, StalenessPolicy, decide, variation_gap
from jaxgraph.train import make_strategy


def _tags(versions, num_parts):
    """Every receiver holds ``versions[j]`` of block ``j`` (a synchronous broadcast)."""
    t = np.tile(np.asarray(versions, np.int32), (num_parts, 1))
    np.fill_diagonal(t, NOT_READ)
    return t


def _run_epochs(policy, num_parts, epochs):
    """Simulates the exchange's version bookkeeping on a policy that needs no gap: returns
    ``{epoch: [broadcasting owners]}``."""
    sent = np.full(num_parts, -1, np.int32)
    schedule = {}
    for e in epochs:
        active = np.asarray(
            decide(policy, epoch=e, sent_version=sent, tags=_tags(sent, num_parts), gap=0.0)
        )
        sent = np.where(active, e, sent)
        schedule[e] = np.flatnonzero(active).tolist()
    return schedule


def test_epoch_fixed_schedules():
    # Δ_E = 0 never reuses a block.
    s = _run_epochs(StalenessPolicy("epoch", 0, warmup=0), 3, range(1, 8))
    assert all(who == [0, 1, 2] for who in s.values())
    # Δ_E = 1 skips every other epoch after the warm-up (sent at 3, reused at 4, sent at 5).
    s = _run_epochs(StalenessPolicy("epoch", 1, warmup=3), 3, range(1, 10))
    assert [e for e, who in s.items() if who == [0, 1, 2]] == [1, 2, 3, 5, 7, 9]
    assert all(s[e] == [] for e in (4, 6, 8))
    # Δ_E = 2: a block is used at most 2 epochs after it was produced.
    s = _run_epochs(StalenessPolicy("epoch", 2, warmup=2), 3, range(1, 12))
    assert [e for e, who in s.items() if who] == [1, 2, 5, 8, 11]
    # Δ = ∞ never re-sends after the warm-up.
    s = _run_epochs(StalenessPolicy("epoch", math.inf, warmup=2), 3, range(1, 12))
    assert [e for e, who in s.items() if who] == [1, 2]


def test_epoch_adaptive_fig_5_7b():
    """Fig. 5.7b of the Sancus chapter, Δ_A = 1, workers 1-4 = indices 0-3. After epoch 9
    the receivers hold H1^(8), H2^(7), H3^(9), H4^(9): H2^(7) is too old (9 - 7 = 2 > Δ_A),
    so worker 2 broadcasts at epoch 10, and so does worker 1 (H1^(8) would be 2 epochs old
    at epoch 10); workers 3 and 4 follow at epoch 11."""
    policy = StalenessPolicy("adaptive", 1, warmup=0)
    versions = np.array([8, 7, 9, 9], np.int32)
    assert 9 - versions[1] > policy.bound  # the chapter's check at epoch 9
    schedule = {}
    for e in (10, 11, 12, 13):
        active = np.asarray(
            decide(policy, epoch=e, sent_version=versions, tags=_tags(versions, 4), gap=np.zeros(4))
        )
        versions = np.where(active, e, versions).astype(np.int32)
        schedule[e] = (np.flatnonzero(active) + 1).tolist()  # 1-indexed workers
    assert schedule == {10: [1, 2], 11: [3, 4], 12: [1, 2], 13: [3, 4]}


def test_epoch_adaptive_takes_the_oldest_reader():
    """Per-receiver tags: one receiver's old copy forces the owner to broadcast; a receiver
    that reads nothing of a block never asks for it."""
    policy = StalenessPolicy("adaptive", 2, warmup=0)
    sent = np.array([5, 5, 5], np.int32)
    tags = _tags([5, 5, 5], 3)
    tags[2, 0] = 3  # receiver 2 still holds block 0 from epoch 3 (e.g. a slow worker)
    active = decide(policy, epoch=6, sent_version=sent, tags=tags, gap=np.zeros(3))
    assert np.asarray(active).tolist() == [True, False, False]
    tags[2, 0] = NOT_READ  # ... but receiver 2 has no edge from block 0
    active = decide(policy, epoch=6, sent_version=sent, tags=tags, gap=np.zeros(3))
    assert not np.asarray(active).any()
    # An epoch bound on the same versions: Δ_E looks at the owner's last broadcast only.
    epoch = decide(StalenessPolicy("epoch", 2, 0), epoch=6, sent_version=sent, tags=tags, gap=0)
    assert not np.asarray(epoch).any()


def test_variation_gap_schedule():
    """Δ_H on a scripted trajectory: block 0 drifts by 0.01 per epoch, block 1 is constant,
    block 2 jumps once. A block is re-sent when its drift since the last broadcast reaches
    Δ_H, however many epochs that takes."""
    bound = 0.025
    mask = np.array([True, True, False])  # one pad row, which never counts

    def block(j, e):
        h = np.zeros((3, 2), np.float32)
        if j == 0:
            h[:2] = 0.01 * e
        elif j == 2 and e >= 6:
            h[:2] = 1.0
        h[2] = 100.0 * e  # pad row: changes wildly, ignored
        return h

    last = {j: np.zeros((3, 2), np.float32) for j in range(3)}

    def gaps(e):
        return np.asarray([variation_gap(block(j, e), last[j], mask) for j in range(3)])

    policy = StalenessPolicy("gap", bound, warmup=1)
    sent = np.full(3, -1, np.int32)
    schedule = {}
    for e in range(1, 12):
        active = np.asarray(
            decide(policy, epoch=e, sent_version=sent, tags=_tags(sent, 3), gap=gaps(e))
        )
        for j in np.flatnonzero(active):
            last[j] = block(j, e)
        sent = np.where(active, e, sent)
        schedule[e] = np.flatnonzero(active).tolist()
    assert [e for e, who in schedule.items() if 0 in who] == [1, 4, 7, 10]
    assert [e for e, who in schedule.items() if 1 in who] == [1]
    assert [e for e, who in schedule.items() if 2 in who] == [1, 6]


def test_variation_gap_is_mean_absolute_difference_over_real_rows():
    h = np.array([[1.0, 2.0], [3.0, 5.0], [9.0, 9.0]], np.float32)
    last = np.zeros_like(h)
    assert float(variation_gap(h, last, np.array([True, True, False]))) == pytest.approx(11 / 4)
    assert float(variation_gap(h, last, np.zeros(3, bool))) == 0.0
    # Δ_H = 0 always broadcasts, Δ_H = ∞ never after the warm-up.
    kw = dict(epoch=9, sent_version=np.array([3]), tags=_tags([3], 1), gap=np.array([0.0]))
    assert np.asarray(decide(StalenessPolicy("gap", 0.0, 0), **kw)).all()
    assert not np.asarray(decide(StalenessPolicy("gap", math.inf, 0), **kw)).any()


def test_method_names():
    assert make_strategy("cagnet") == CAGNET()
    s = make_strategy("sancus-e1")
    assert s == Sancus("epoch", 1, 50) and s.local_grad_clip is None
    assert make_strategy("sancus-a2-w10").staleness == StalenessPolicy("adaptive", 2, 10)
    s = make_strategy("sancus-h0.04-clip1.5")
    assert s.staleness == StalenessPolicy("gap", 0.04, 50) and s.local_grad_clip == 1.5
    assert make_strategy("sancus-einf-w3").bound == math.inf
    assert make_strategy(s.name) == s  # names round-trip
    assert hash(make_strategy("sancus-e1")) == hash(Sancus("epoch", 1))
    assert make_strategy("sancus") == Sancus()  # the name alone: the defaults
    for bad in ("sancus-x1", "sancus-e1.5", "sancus-e1-clip", "cagnet-2"):
        with pytest.raises(ValueError):
            make_strategy(bad)
    with pytest.raises(ValueError, match="bound"):
        StalenessPolicy("epoch", -1)
