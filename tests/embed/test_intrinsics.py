"""The LLVM intrinsics of the numba kernels (:mod:`jaxgraph.embed._intrinsics`) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from jaxgraph.embed._intrinsics import axpy_rows, mulhi


@njit
def _axpy_rows(y, rows, coefs, x, i):
    axpy_rows(y, rows, coefs, x, i)


@pytest.mark.parametrize("width", [1, 7, 8, 13, 128])
def test_axpy_rows_updates_six_rows_in_order(width):
    """Every row takes its multiple of ``x[i]``; a row named twice takes both (vectors of 8
    floats, and the columns past the last whole vector)."""
    rng = np.random.default_rng(width)
    y = rng.normal(size=(10, width)).astype(np.float32)
    x = rng.normal(size=(4, width)).astype(np.float32)
    rows = np.array([3, 0, 9, 3, 5, 3], np.int64)
    coefs = rng.normal(size=6).astype(np.float32)
    want = y.astype(np.float64)
    for r, c in zip(rows, coefs, strict=True):
        want[r] += np.float64(c) * x[2]
    _axpy_rows(y, rows, coefs, x, 2)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_mulhi_is_the_high_half_of_the_product():
    @njit
    def high(a, b):
        return mulhi(a, b)

    for a, b in [(2**64 - 1, 2**64 - 1), (2**63, 3), (12345, 2**40), (0, 7)]:
        assert int(high(np.uint64(a), np.uint64(b))) == (a * b) >> 64
