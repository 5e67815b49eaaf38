"""Tests of jaxgraph.partition.buckets on the host: hand-computed buckets, layouts and byte
counts (the exchange that runs on them is tested in tests/comm/test_quantized_exchange.py)."""

from types import SimpleNamespace

import numpy as np
import pytest

from jaxgraph.partition.buckets import (
    BitAssignment,
    _capacity,
    _round_buckets,
    block_offsets,
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
