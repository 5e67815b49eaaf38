"""What the tests of the compiled skip-gram kernels share: a chunk's pair order written out."""

from __future__ import annotations

import numpy as np


def interleaved_order(num_steps: int, batch: int, span: int | None) -> list[np.ndarray]:
    """``jaxgraph.embed.programs._train_chunk``'s pair order, written out independently: the
    flat pair indices of each step (the span of ``span`` steps starting at ``g`` deals its
    ``width * batch`` pairs round-robin, ``width = min(span, num_steps - g)``)."""
    span = num_steps if span is None else span
    order = []
    for g in range(0, num_steps, span):
        width = min(span, num_steps - g)
        order += [g * batch + (s - g) + width * np.arange(batch) for s in range(g, g + width)]
    return order
