"""Tests of jaxgraph.partition.buckets on the host: hand-computed buckets, layouts and byte
counts (the exchange that runs on them is tested in tests/comm/test_quantized_exchange.py)."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

from jaxgraph.partition.buckets import (
    _PAD,
    BitAssignment,
    _capacity,
    _round_buckets,
    block_offsets,
    bucket_state,
    check_chunks,
    check_param_dtype,
    check_width,
    check_widths,
    default_chunks,
    piece_bytes,
    wire_bytes,
)

# Two devices, one round (r = 1), three slots; device 1's slot 1 holds no row.
BITS = np.array([[2, 8, 2], [4, 2, 2]], np.int8)
MASK = np.array([[True, True, True], [True, False, True]])


def _as_lists(buckets):
    return {w: {k: v.tolist() for k, v in b.items()} for w, b in buckets.items()}


def test_round_buckets_forward_by_hand():
    """Width 2: device 0 sends slots 0 and 2, device 1 slot 2 (slot 1 is padding); device 1
    receives device 0's slots and device 0 device 1's. ``C`` is the largest sender's count."""
    got = _as_lists(_round_buckets(BITS, MASK, 1, backward=False))
    assert list(got) == [2, 4, 8]
    assert got[2] == {"send": [[0, 2], [2, -1]], "recv": [[2, -1], [0, 2]]}
    assert got[4] == {"send": [[-1], [0]], "recv": [[0], [-1]]}
    assert got[8] == {"send": [[1], [-1]], "recv": [[-1], [1]]}
    assert all(
        a.dtype == np.int32
        for b in _round_buckets(BITS, MASK, 1, False).values()
        for a in b.values()
    )


def test_round_buckets_backward_swaps_sender_and_receiver():
    """Backward the forward receiver sends the gradient rows of the slots it received."""
    fwd = _as_lists(_round_buckets(BITS, MASK, 1, backward=False))
    bwd = _as_lists(_round_buckets(BITS, MASK, 1, backward=True))
    assert list(bwd) == list(fwd)
    for w in fwd:
        assert bwd[w] == {"send": fwd[w]["recv"], "recv": fwd[w]["send"]}


def test_piece_and_wire_bytes_by_hand():
    # 5 rows of 3 features at 2 bits: 4 codes a byte -> 2 code rows of 3 bytes, 8 B of params.
    assert piece_bytes(5, 3, 2) == (6, 40)
    assert piece_bytes(5, 3, 4, param_bytes=4) == (9, 20)  # 2 codes a byte: 3 code rows
    assert piece_bytes(5, 3, 8) == (15, 40)
    assert piece_bytes(5, 3, 32) == (60, 0)  # plain fp32, no parameters
    assert wire_bytes(5, 3, 2) == 46
    assert wire_bytes(5, 3, 32) == 60
    assert wire_bytes(5, 3, 2, param_bytes=4) == 26


def test_block_offsets_pad_each_round_to_whole_bytes():
    counts = (((2, 5), (8, 1)), ((8, 3),), ((2, 1),))
    # Width 2 packs 4 rows a byte: round 1's 5 rows take 8, round 2 has none, round 3 starts at 8.
    assert block_offsets(counts, 2) == [0, None, 8, 12]
    assert block_offsets(counts, 8) == [0, 1, None, 4]
    assert block_offsets(counts, 4) == [None, None, None, 0]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_piece_bytes_take_integer_arrays(bits):
    rows = np.array([0, 1, 9])
    codes, params = piece_bytes(rows, 2, bits, param_bytes=4)
    k = 8 // bits
    np.testing.assert_array_equal(codes, [0, 2, 2 * ((9 + k - 1) // k)])
    np.testing.assert_array_equal(params, [0, 4, 36])


# A stand-in plan: BitAssignment reads only the send masks (one round of two devices here).
PLAN = SimpleNamespace(send_mask=(np.array([[True, True, False], [True, False, False]]),))


def test_width_counts_count_real_slots_only():
    fwd = ((np.array([[2, 8, 2], [8, 8, 8]], np.int8),),)  # real: 2, 8 | 8
    bwd = BitAssignment.uniform(PLAN, 1, 32).bwd
    counts = BitAssignment(fwd=fwd, bwd=bwd).width_counts(PLAN)
    assert counts == {"fwd0": {2: 1, 4: 0, 8: 2, 32: 0}, "bwd0": {2: 0, 4: 0, 8: 0, 32: 3}}


def test_random_assignment_draws_every_given_width_per_layer_and_direction():
    a = BitAssignment.random(PLAN, 2, np.random.default_rng(0), widths=(2, 8))
    assert len(a.fwd) == len(a.bwd) == 2
    draws = np.stack([r[0] for r in a.fwd + a.bwd])  # [4, 2, 3]
    assert draws.dtype == np.int8 and draws.shape == (4, 2, 3)
    assert set(np.unique(draws)) == {2, 8}
    assert not all(np.array_equal(draws[0], d) for d in draws[1:])  # independent draws


def test_digest_tells_assignments_apart():
    a = BitAssignment.uniform(PLAN, 1, 4)
    assert a.digest() == BitAssignment.uniform(PLAN, 1, 4).digest()
    assert a.digest() != BitAssignment.uniform(PLAN, 1, 8).digest()
    swapped = BitAssignment(fwd=a.fwd, bwd=BitAssignment.uniform(PLAN, 1, 2).bwd)
    assert a.digest() != swapped.digest() != BitAssignment(fwd=swapped.bwd, bwd=a.bwd).digest()
    # The same bytes in another shape are another assignment.
    flat = BitAssignment(fwd=((a.fwd[0][0].reshape(3, 2),),), bwd=((a.bwd[0][0].reshape(3, 2),),))
    assert flat.digest() != a.digest()


def test_capacity_is_every_slot_at_the_widest_width():
    """A round of 5 slots: at most 4 bytes a value (fp32 rows) and 8 parameter bytes a row."""
    assert _capacity({2: None, 32: None}, 5, 8) == (20, 40)
    assert _capacity({2: None, 8: None}, 5, 4) == (5, 20)
    assert _capacity({32: None}, 5, 8) == (20, 0)
    assert _capacity({}, 5, 8) == (0, 0)


# A stand-in plan of three devices (the layout reads only these fields): round 1 has S_1 = 2
# slots (device 2's slot 1 is padding), round 2 has S_2 = 1 (device 1's slot is padding), so
# the halo has H = 3 rows and round 2's payload starts at halo row 2.
RING = SimpleNamespace(
    num_parts=3,
    send_idx=(np.array([[4, 1], [0, 2], [3, 0]]), np.array([[2], [1], [0]])),
    send_mask=(
        np.array([[True, True], [True, True], [True, False]]),
        np.array([[True], [False], [True]]),
    ),
    round_rows=(2, 1),
    num_halo_rows=3,
    halo_offsets=lambda: (0, 2, 3),
)
# Widths per (sender, slot): round 1 [[2, 8], [8, 8], [2, -]], round 2 [[8], [-], [2]].
RING_BITS = (
    np.array([[2, 8], [8, 8], [2, 32]], np.int8),
    np.array([[8], [2], [2]], np.int8),
)
P_ = _PAD


def test_exact_layout_by_hand():
    """Buckets (sender's slots -> receiver): round 1 width 2: 0 -> 1 slot 0, 2 -> 0 slot 0 (C =
    1); width 8: 0 -> 1 slot 1, 1 -> 2 slots 0, 1 (C = 2). Round 2 (d -> d + 2): width 2: 2 -> 1
    slot 0; width 8: 0 -> 2 slot 0. Width 2 packs 4 rows a byte, so each round's bucket takes 4
    rows of its block (8 in all); width 8 takes 2 + 1. The M = 11 received rows are width 2's
    block (rows 0-7), then width 8's (rows 8-10)."""
    a = BitAssignment(fwd=(RING_BITS,), bwd=(RING_BITS,))
    state = bucket_state(RING, a)
    (fwd,), (bwd,) = state.fwd, state.bwd
    assert fwd.counts == bwd.counts == (((2, 1), (8, 2)), ((2, 1), (8, 1)))
    assert fwd.round_rows == bwd.round_rows == (2, 1)
    assert fwd.chunks == 0 and fwd.param_bytes == 8
    # Forward: senders gather their local rows send_idx[d, slot] ...
    assert list(fwd.rows) == ["b2", "b8"]
    np.testing.assert_array_equal(
        fwd.rows["b2"], [[4, P_, P_, P_, P_, P_, P_, P_], [P_] * 8, [3, P_, P_, P_, 0, P_, P_, P_]]
    )
    np.testing.assert_array_equal(fwd.rows["b8"], [[1, P_, 2], [0, 2, P_], [P_, P_, P_]])
    # ... and each halo slot takes its row among the M received ones (device 0's slot 1 of
    # round 1 and its round-2 slot hold nothing).
    np.testing.assert_array_equal(fwd.place, [[0, P_, P_], [0, 8, 4], [8, 9, 10]])
    # Buckets q = (r1, w2), (r1, w8), (r2, w2), (r2, w8).
    np.testing.assert_array_equal(fwd.sent, [[1, 1, 0, 1], [0, 2, 0, 0], [1, 0, 1, 0]])
    np.testing.assert_array_equal(fwd.got, [[1, 0, 0, 0], [1, 1, 1, 0], [0, 2, 0, 1]])
    # Bytes a D + b per sender: a width-2 row takes a code row (4 rows a byte), a width-8 row
    # one code row, each 8 parameter bytes. Round 1: (2, 16), (2, 16), (1, 8); round 2: (1, 8),
    # (0, 0), (1, 8).
    assert fwd.round_bytes == (((1, 8), (2, 16)), ((0, 0), (1, 8)))
    # Backward: the forward receivers send the gradients of their halo rows back ...
    np.testing.assert_array_equal(
        bwd.rows["b2"], [[0, P_, P_, P_, P_, P_, P_, P_], [0, P_, P_, P_, 2, P_, P_, P_], [P_] * 8]
    )
    np.testing.assert_array_equal(bwd.rows["b8"], [[P_, P_, P_], [1, P_, P_], [0, 1, 2]])
    # ... and every received gradient row adds into the local row its slot was sent from.
    np.testing.assert_array_equal(
        bwd.place,
        [
            [4, P_, P_, P_, P_, P_, P_, P_, 1, P_, 2],
            [P_, P_, P_, P_, P_, P_, P_, P_, 0, 2, P_],
            [3, P_, P_, P_, 0, P_, P_, P_, P_, P_, P_],
        ],
    )
    for layout in (fwd, bwd):
        assert all(a.dtype == np.int32 for a in (*layout.rows.values(), layout.place))
        assert layout.sent.dtype == layout.got.dtype == np.int32
    np.testing.assert_array_equal(bwd.sent, fwd.got)
    np.testing.assert_array_equal(bwd.got, fwd.sent)
    assert bwd.round_bytes == (((1, 8), (2, 16)), ((0, 0), (1, 8)))


def test_layout_per_layer_and_parameter_precision():
    """Layer 1 sends everything at 32 bits: one bucket per round, 4 bytes a value, no
    parameters. bfloat16 parameters halve the parameter bytes of quantized rows."""
    a = BitAssignment(
        fwd=(RING_BITS, BitAssignment.uniform(RING, 1, 32).fwd[0]), bwd=(RING_BITS,) * 2
    )
    state = bucket_state(RING, a, param_dtype="bfloat16")
    assert len(state.fwd) == len(state.bwd) == 2
    assert state.fwd[0].param_bytes == 4
    assert state.fwd[0].round_bytes == (((1, 4), (2, 8)), ((0, 0), (1, 4)))
    f1 = state.fwd[1]
    assert f1.counts == (((32, 2),), ((32, 1),))
    np.testing.assert_array_equal(f1.rows["b32"], [[4, 1, 2], [0, 2, P_], [3, P_, 0]])
    np.testing.assert_array_equal(f1.place, [[0, P_, P_], [0, 1, 2], [0, 1, 2]])
    assert f1.round_bytes == (((4, 0), (8, 0)), ((0, 0), (4, 0)))


def test_chunked_layout_has_every_width_with_room_for_every_slot():
    a = BitAssignment(fwd=(RING_BITS,), bwd=(RING_BITS,))
    (fwd,) = bucket_state(RING, a, chunks=2, widths=(8, 2)).fwd
    assert fwd.chunks == 2
    assert fwd.counts == (((2, 2), (8, 2)), ((2, 1), (8, 1)))
    # The round's capacity: every slot as one code row plus 8 parameter bytes.
    assert fwd.round_bytes == (((2, 16),), ((1, 8),))
    # Width 2's block: round 1's 2 rows padded to 4, round 2's row from row 4 on (8 rows);
    # width 8's block (3 rows) follows.
    np.testing.assert_array_equal(fwd.place, [[0, P_, P_], [0, 8, 4], [8, 9, 10]])
    with pytest.raises(ValueError, match="outside the layout's widths"):
        bucket_state(RING, a, chunks=2, widths=(2, 4))


def test_round_without_real_slots_has_no_bucket():
    """Two devices whose only slot holds no row: no bucket, nothing placed, nothing sent."""
    idle = SimpleNamespace(
        num_parts=2,
        send_idx=(np.zeros((2, 1), np.int32),),
        send_mask=(np.zeros((2, 1), bool),),
        round_rows=(1,),
        num_halo_rows=1,
        halo_offsets=lambda: (0, 1),
    )
    (fwd,) = bucket_state(idle, BitAssignment.uniform(idle, 1, 8)).fwd
    assert fwd.counts == ((),) and fwd.rows == {} and fwd.round_bytes == ((),)
    np.testing.assert_array_equal(fwd.place, [[P_], [P_]])
    assert fwd.sent.shape == fwd.got.shape == (2, 0)
    assert fwd.sent.dtype == fwd.got.dtype == np.int32


def test_default_chunks_by_backend():
    assert default_chunks("cpu") == 6
    assert default_chunks("gpu") == default_chunks("tpu") == 0
    assert default_chunks() == 6  # the tests run on JAX's CPU backend


def test_assignment_must_have_one_array_per_round():
    a = BitAssignment(fwd=(RING_BITS[:1],), bwd=(RING_BITS,))  # round 2 missing
    with pytest.raises(ValueError, match="zip"):
        bucket_state(RING, a)


def test_uniform_assignment_and_width_counts_without_rounds():
    """One device: no round, so no message of any width."""
    single = SimpleNamespace(send_mask=())
    a = BitAssignment.uniform(single, 2, 8)
    assert a.fwd == a.bwd == ((), ())
    assert a.width_counts(single) == {
        name: {2: 0, 4: 0, 8: 0, 32: 0} for name in ("fwd0", "fwd1", "bwd0", "bwd1")
    }
    u = BitAssignment.uniform(PLAN, 1, 4)
    assert u.fwd[0][0].dtype == np.int8 and u.fwd[0][0].tolist() == [[4, 4, 4], [4, 4, 4]]
    with pytest.raises(ValueError, match="zip"):  # two rounds for a plan of one
        BitAssignment(fwd=(u.fwd[0] * 2,), bwd=u.bwd).width_counts(PLAN)


def test_validation_messages():
    check_chunks(0)
    check_chunks(12)
    check_chunks(np.int64(3))
    for bad in (-1, 13, 2.0, "6"):
        with pytest.raises(ValueError, match=r"exchange chunks must be an integer in \[0, 12\]"):
            check_chunks(bad)
    assert check_param_dtype("bfloat16") == "bfloat16"
    with pytest.raises(
        ValueError, match="param_dtype must be one of 'float32', 'bfloat16', got 'f16'"
    ):
        check_param_dtype("f16")
    check_width(32)
    with pytest.raises(ValueError, match=r"bit-width must be one of \(2, 4, 8, 32\), got 16"):
        check_width(16)


def test_check_widths_sorts_and_rejects_empty_repeated_or_unknown_widths():
    assert check_widths([8, 2]) == (2, 8)
    for bad in ((), (2, 2), (2, 32)):
        with pytest.raises(
            ValueError,
            match=r"candidate bit-widths must be distinct values from \(2, 4, 8\) "
            rf"\(at least one\), got {re.escape(str(bad))}",
        ):
            check_widths(bad)
