"""Size classes for arrays whose length changes from round to round.

Each new shape of the walk corpus, the pair buffers or the synced row sets would compile its
programs again; rounding a size up to its class (at most 16 classes per octave, under 1/8
extra) bounds the compilations.
"""

from __future__ import annotations


def padded_size(n: int) -> int:
    """``n`` rounded up to a multiple of ``next_pow2(n) / 16`` (``n >= 1``)."""
    quantum = max(1, (1 << max(0, n - 1).bit_length()) // 16)
    return -(-n // quantum) * quantum
