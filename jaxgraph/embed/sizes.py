"""Size classes for arrays whose length changes from round to round.

The active set of a feedback run shrinks every round, so the walk corpus, the pair buffers and
the synced row sets change shape; each new shape would compile its programs again. Rounding a
size up to its class (at most 16 classes per octave, under 1/8 extra) bounds the compilations
to a few per octave.
"""

from __future__ import annotations


def padded_size(n: int) -> int:
    """``n`` rounded up to a multiple of ``next_pow2(n) / 16`` (``n >= 1``)."""
    quantum = max(1, (1 << max(0, n - 1).bit_length()) // 16)
    return -(-n // quantum) * quantum
