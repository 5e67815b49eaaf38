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


def check_copies(train, step, syn0, syn1, num_steps: int, copies: int):
    """Trains ``copies`` copies of ``syn0, syn1`` with ``train(got0, got1)`` (a kernel's
    ``train_replicas`` with ``copies``) and checks that copy ``t`` ends bit for bit as steps
    ``t ceil(S / C) .. (t + 1) ceil(S / C) - 1`` applied one by one with ``step(syn0, syn1,
    s)`` (which returns the step's loss), and that the loss sums every copy's steps."""
    stretch = -(-num_steps // copies)
    want = [np.repeat(t[None], copies, axis=0) for t in (syn0, syn1)]
    want_loss = sum(step(want[0][s // stretch], want[1][s // stretch], s) for s in range(num_steps))
    got = [np.repeat(t[None], copies, axis=0) for t in (syn0, syn1)]
    loss = train(*got)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert abs(loss - want_loss) <= 1e-12 * abs(want_loss)
    assert not np.array_equal(got[0][0], got[0][1])  # each copy trained its own steps
