"""The host merge of the CPU kernel's replicas (:mod:`jaxgraph.embed.cpu_replicas`) against
:func:`jaxgraph.embed.merge.merge_rows` run on an emulated mesh of the same replicas."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxgraph.embed._kernel_args import PAGE, page_aligned
from jaxgraph.embed.cpu_replicas import HostReplicas, merge_replicas
from jaxgraph.embed.merge import AllSync
from jaxgraph.embed.programs import sync_program
from jaxgraph.embed.sgns import Tables
from jaxgraph.mesh import make_mesh

AXIS = "data"


def _replicas(rng, p, n, d):
    """Replicas moved from one anchor at some rows only (row 0 on one replica, row 1 on all,
    rows 2.. on about half), as a sync period of training leaves them."""
    anchor = rng.normal(0, 1, (n, d)).astype(np.float32)
    tables = np.repeat(anchor[None], p, axis=0)
    moved = rng.random((p, n)) < 0.5
    moved[:, 0], moved[0, 0], moved[:, 1] = False, True, True
    tables[moved] += rng.normal(0, 0.1, (int(moved.sum()), d)).astype(np.float32)
    return tables, anchor


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("merge", ["mean", "sum", "touched"])
def test_host_merge_equals_the_device_merge(p, merge):
    rng = np.random.default_rng(p)
    n, d = 40, 8
    t0, a0 = _replicas(rng, p, n, d)
    t1, a1 = _replicas(rng, p, n, d)
    sync = sync_program(make_mesh(p, AXIS), AXIS, AllSync(merge))
    anchor = Tables(*(jnp.asarray(np.repeat(a[None], p, axis=0)) for a in (a0, a1)))
    want, want_anchor = sync(Tables(jnp.asarray(t0), jnp.asarray(t1)), anchor)
    host, host_anchor = Tables(t0.copy(), t1.copy()), Tables(a0.copy(), a1.copy())
    merge_replicas(host, None if merge == "mean" else host_anchor, merge)
    for got, w in zip(host, want, strict=True):
        np.testing.assert_allclose(got, np.asarray(w), rtol=1e-6, atol=1e-6)
    if merge != "mean":
        for got, w in zip(host_anchor, want_anchor, strict=True):
            np.testing.assert_allclose(got, np.asarray(w)[0], rtol=1e-6, atol=1e-6)


def test_two_copies_sum_in_float32_as_any_number_of_replicas_does():
    """Two replicas' sum merge (a device's two copies, merged in one pass over each row) is
    ``(t0 + t1) - anchor`` rounded in float32, bit for bit, at every row and in the anchor."""
    rng = np.random.default_rng(3)
    t0, a0 = _replicas(rng, 2, 300, 40)
    t1, a1 = _replicas(rng, 2, 300, 40)
    host, anchor = Tables(t0.copy(), t1.copy()), Tables(a0.copy(), a1.copy())
    merge_replicas(host, anchor, "sum")
    for got, got_anchor, t, a in zip(host, anchor, (t0, t1), (a0, a1), strict=True):
        want = (t[0] + t[1]) - a
        np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))
        np.testing.assert_array_equal(got_anchor, want)


def test_input_rows_restrict_the_merge_of_syn0():
    """``syn0`` merges at the given rows only; ``syn1`` at every row."""
    rng = np.random.default_rng(0)
    t0, a0 = _replicas(rng, 2, 10, 4)
    t1, a1 = _replicas(rng, 2, 10, 4)
    host, anchor = Tables(t0.copy(), t1.copy()), Tables(a0.copy(), a1.copy())
    merge_replicas(host, anchor, "sum", np.array([1, 3]))
    np.testing.assert_allclose(
        host.syn0[:, [1, 3]], np.broadcast_to((t0[0] + t0[1] - a0)[[1, 3]], (2, 2, 4)), rtol=1e-6
    )
    untouched = [i for i in range(10) if i not in (1, 3)]
    np.testing.assert_array_equal(host.syn0[:, untouched], t0[:, untouched])
    np.testing.assert_allclose(host.syn1, np.broadcast_to(t1[0] + t1[1] - a1, t1.shape), rtol=1e-6)
    np.testing.assert_array_equal(anchor.syn0[untouched], a0[untouched])
    with pytest.raises(ValueError, match="merge='touched' needs the anchor"):
        merge_replicas(host, None, "touched")
    with pytest.raises(ValueError, match="merge must be one of"):
        merge_replicas(host, anchor, "median")


def test_host_copies_start_a_page_and_equal_the_device_tables():
    """The kernels' tables start a page (rows of 512 bytes then start cache lines) and hold the
    device values; :func:`page_aligned` starts a page for any shape and fills on request."""
    rng = np.random.default_rng(0)
    device = Tables(*(jnp.asarray(rng.normal(0, 1, (2, 33, 16)).astype(np.float32)) for _ in "ab"))
    host = HostReplicas.pull(device, None)
    for got, want in zip(host.tables, device, strict=True):
        assert got.ctypes.data % PAGE == 0 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, np.asarray(want))
    for shape, dtype in (((3, 5, 7), np.float32), ((1,), np.int64), ((4, 1024), np.float32)):
        out = page_aligned(shape, dtype, fill=3)
        assert out.shape == shape and out.dtype == dtype and out.ctypes.data % PAGE == 0
        assert (out == 3).all()


@pytest.mark.parametrize("rows", [None, np.array([0, 3, 5])])
def test_copies_of_one_device_sum_their_changes(rows):
    """``copies`` copies of one device's tables: pulled equal (page-aligned), with their
    anchor; a merge (any rule named) sums the copies' changes from the anchor into every copy
    and the anchor (``syn0`` at ``rows`` only); push places copy 0 and no anchor."""
    rng = np.random.default_rng(3)
    n, d, c = 8, 4, 3
    device = Tables(*(rng.normal(0, 1, (1, n, d)).astype(np.float32) for _ in range(2)))
    host = HostReplicas.pull(device, None, copies=c)
    assert host.copies == c and host.tables.syn0.shape == (c, n, d)
    for t, a, dev in zip(host.tables, host.anchor, device, strict=True):
        assert t.ctypes.data % PAGE == 0
        np.testing.assert_array_equal(t, np.repeat(dev, c, axis=0))
        np.testing.assert_array_equal(a, dev[0])
    moves = [rng.normal(0, 0.1, (c, n, d)).astype(np.float32) for _ in range(2)]
    for t, m in zip(host.tables, moves, strict=True):
        t += m
    host.merge("mean", rows)
    for i, (t, dev, m) in enumerate(zip(host.tables, device, moves, strict=True)):
        want = np.broadcast_to(dev[0] + m.sum(axis=0), (c, n, d)).copy()
        if i == 0 and rows is not None:
            keep = np.setdiff1d(np.arange(n), rows)
            want[:, keep] = (dev + m)[:, keep]
        np.testing.assert_allclose(t, want, rtol=1e-6, atol=1e-6)
        merged = np.arange(n) if i == 1 or rows is None else rows
        np.testing.assert_array_equal(host.anchor[i][merged], t[0][merged])
    placed, anchor = host.push(lambda *a: a)
    assert anchor is None
    for p, t in zip(placed, host.tables, strict=True):
        np.testing.assert_array_equal(p, t[:1])
    with pytest.raises(ValueError, match="copies train one device's tables, got 2"):
        HostReplicas.pull(Tables(*(np.repeat(t, 2, axis=0) for t in device)), None, copies=2)
