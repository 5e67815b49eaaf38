"""Counter-based random streams for the compiled host kernels (walks, pairs, feedback).

Every walk (or node) gets its own SplitMix64 stream, seeded by hashing a 64-bit round key with
the walk's id. A kernel therefore draws the same numbers for a walk whichever thread runs it and
whatever the thread count, so host sampling is reproducible on any number of threads.

Numba promotes ``uint64 op int64`` to ``float64``, so every integer that meets a stream value is
cast to ``np.uint64`` first.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53

# Purposes, so that walks, pairs and feedback of the same round never share a stream.
PURPOSE_WALKS = 1
PURPOSE_PAIRS = 2
PURPOSE_FEEDBACK = 3
PURPOSE_SHUFFLE = 4
PURPOSE_NEGATIVES = 5


def round_key(seed: int, purpose: int, round_index: int, *more: int) -> np.uint64:
    """A 64-bit key for one (seed, purpose, round, ``*more``), from NumPy's ``SeedSequence``
    hashing."""
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    entropy = [seed, purpose, round_index, *more]
    state = np.random.SeedSequence(entropy).generate_state(1, np.uint64)
    return np.uint64(state[0])


@njit(inline="always", cache=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(inline="always", cache=True)
def stream(key, stream_id):
    """The initial state of stream ``stream_id`` (an ``int``) under ``key`` (``uint64``)."""
    return _mix(key ^ _mix(np.uint64(stream_id) + _GAMMA))


@njit(inline="always", cache=True)
def next_u64(state):
    """SplitMix64: returns ``(new_state, uint64 draw)``."""
    state = state + _GAMMA
    return state, _mix(state)


@njit(inline="always", cache=True)
def nth_u64(state, k):
    """The ``k``-th ``uint64`` draw (``k >= 1``) that :func:`next_u64` gives from ``state``
    (the state only adds ``_GAMMA`` per draw), so a stream's draws can be taken in any order."""
    return _mix(state + np.uint64(k) * _GAMMA)


@njit(inline="always", cache=True)
def unit(z):
    """The ``float64`` in ``[0, 1)`` of a ``uint64``'s top 53 bits."""
    return (z >> np.uint64(11)) * _TO_UNIT


@njit(inline="always", cache=True)
def next_uniform(state):
    """Returns ``(new_state, float64 draw in [0, 1))``."""
    state, z = next_u64(state)
    return state, unit(z)


@njit(inline="always", cache=True)
def next_below(state, n):
    """Returns ``(new_state, int in [0, n))`` for ``n >= 1`` (modulo bias below 2**-40)."""
    state, z = next_u64(state)
    return state, np.int64(z % np.uint64(n))
