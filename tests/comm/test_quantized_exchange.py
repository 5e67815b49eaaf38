"""The quantized ring exchange: exactness when off, delivered values, gradients, bytes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxgraph.comm.method import RunInfo
from jaxgraph.comm.qring import quantized_ring_exchange
from jaxgraph.comm.quantized import Quantized
from jaxgraph.comm.strategy import Vanilla
from jaxgraph.comm.wirebytes import byte_report
from jaxgraph.mesh import make_mesh
from jaxgraph.models import make_model
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.partition.buckets import (
    BitAssignment,
    bucket_state,
    default_chunks,
    round_buckets,
    wire_bytes,
)
from jaxgraph.train import assemble_run
from pallas_kernels.quantize import dequantize, quantize

from graph_cases import random_graph

GRAPH = random_graph(n=120, avg_deg=6, seed=5)


def _plan(num_parts, method="metis"):
    parts = partition_graph(GRAPH, num_parts, method=method, seed=0)
    return build_halo_plan(GRAPH, parts, num_parts=num_parts)


def _trainer(strategy, plan, model_name="gcn"):
    model = make_model(model_name, hidden=8, out_dim=GRAPH.num_classes, dropout=0.0)
    run = assemble_run(GRAPH, plan, strategy, model, plan.num_parts, seed=3)
    return run.trainer, run.shards, run.state


@pytest.mark.parametrize("model_name", ["gcn", "sage"])
@pytest.mark.parametrize("num_parts", [2, 8])
def test_uncompressed_width_equals_vanilla(model_name, num_parts):
    """32-bit buckets deliver exactly Vanilla's rows, so the loss is bit-identical. The gradient
    rows sent back are the same fp32 values too; only the order in which the scatter-add sums a
    row's contributions from different rounds differs from autodiff's, so gradients agree to
    fp32 rounding (tens of ulp on the smallest gradients), not bit for bit."""
    plan = _plan(num_parts)
    t_v, shards_v, state_v = _trainer(Vanilla(), plan, model_name)
    t_q, shards_q, state_q = _trainer(Quantized(32), plan, model_name)
    loss_v, grads_v = t_v.loss_and_grads(state_v, shards_v)
    loss_q, grads_q = t_q.loss_and_grads(state_q, shards_q)
    assert float(loss_v) == float(loss_q)
    for a, b in zip(jax.tree.leaves(grads_v), jax.tree.leaves(grads_q), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-8)


def _exchange_program(plan, state):
    mesh = make_mesh(plan.num_parts)
    axis = mesh.axis_names[0]

    def body(x, fwd, bwd, key):
        dev_key = jax.random.fold_in(key, jax.lax.axis_index(axis))
        sq = lambda t: jax.tree.map(lambda a: a[0], t)  # noqa: E731
        halo = quantized_ring_exchange(
            x[0], sq(fwd), sq(bwd), dev_key, axis_name=axis, num_parts=plan.num_parts
        )
        return halo[None]

    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(P(axis),) * 3 + (P(),), out_specs=P(axis))
    )


@pytest.mark.parametrize(
    ("num_parts", "bits", "chunks", "param_dtype"),
    [
        (2, 2, 0, "float32"),
        (4, 4, 0, "float32"),
        (8, 8, 0, "float32"),
        (4, "random", 0, "float32"),
        (4, "random", 3, "float32"),  # every width's bucket holds every slot
        (4, "random-2-4", 3, "float32"),  # candidate widths 2 and 4 only: a bucket for each
        (4, "random", 0, "bfloat16"),  # (scale, lo) on the wire as bfloat16
        (4, "random", 3, "bfloat16"),
        pytest.param(8, "random", 0, "float32", marks=pytest.mark.slow),
    ],
)
def test_receiver_gets_dequant_of_quant_of_sender_rows(bits, num_parts, chunks, param_dtype):
    """The receiver holds exactly the kernel's ``dequantize(quantize(rows))`` of the sender's
    bucket rows, with the sender's key, at every width and in either parameter precision."""
    plan = _plan(num_parts, "random")
    widths = (2, 4) if bits == "random-2-4" else (2, 4, 8)
    bits = "random" if bits == "random-2-4" else bits
    drawn = dict(chunks=chunks, widths=widths) if bits == "random" else {}
    strategy = Quantized(bits, param_dtype=param_dtype, **drawn)
    state = strategy.controller(plan, (3,), run=RunInfo(seed=1)).init_state()
    x = plan.local_nodes[..., None] * 10.0 + np.arange(3, dtype=np.float32)
    x = np.where(plan.local_mask[..., None], x, 0).astype(np.float32)
    key = jax.random.key(7)
    f = _exchange_program(plan, state)
    halo = np.asarray(f(x, state.fwd[0], state.bwd[0], key))

    offsets = np.cumsum([0, *plan.round_rows])
    capacity = widths if chunks else None
    buckets = round_buckets(plan, strategy.assignment(plan, 1, seed=1), capacity)["fwd"][0]
    if chunks:  # the layout's buckets: exactly the candidate widths
        assert state.fwd[0].widths == widths
    for s in range(num_parts):
        sender_key = jax.random.fold_in(jax.random.fold_in(key, s), 0)
        rows_of = lambda r, slots, s=s: x[s][plan.send_idx[r - 1][s]][slots]
        messages = _sender_messages(buckets, s, rows_of, sender_key, param_dtype)
        for w, (expect, where) in messages.items():
            for r, start, count in where:
                d = (s + r) % num_parts
                slots = buckets[r - 1][w]["recv"][d]
                real = slots >= 0
                got = halo[d, offsets[r - 1] + slots[real]]
                np.testing.assert_array_equal(got, expect[start : start + count][real])
    # Every real halo slot is within one quantization step of its node's row: Δ of a 2-bit
    # code on a row of range 2 (rows of different nodes differ by at least 10, so a misrouted
    # row cannot pass). With bfloat16 parameters lo is rounded down by up to its bf16 ulp
    # (|lo| / 128) and the scale truncated (relative 2^-7), which widens the step to
    # (2 + |lo| / 128) / 3 * (1 + 2^-7).
    expect = plan.halo_nodes[..., None] * 10.0 + np.arange(3)
    err = np.abs(halo - expect)[plan.halo_mask]
    lo = (plan.halo_nodes * 10.0)[plan.halo_mask][:, None]
    step = 2.0 / 3.0 if param_dtype == "float32" else (2.0 + lo / 128) / 3 * (1 + 2**-7)
    assert np.all(err <= step + 1e-5)


@pytest.mark.parametrize(
    ("chunks", "param_dtype"), [(0, "float32"), (0, "bfloat16"), (3, "bfloat16")]
)
def test_owner_gets_dequant_of_quant_of_gradient_rows(chunks, param_dtype):
    """Backward: each owner row gains exactly the kernel's ``dequantize(quantize(g))`` of the
    gradient rows sent back for its slots, quantized by the forward receiver with its backward
    key, in either parameter precision. Only one round's halo gradient is nonzero at a time,
    so an owner row gets one message per run (the zero rows of the other rounds decode to
    exact zeros) and the comparison is exact whatever order the scatter-add sums in."""
    num_parts = 4
    plan = _plan(num_parts, "random")
    strategy = Quantized("random", chunks=chunks, param_dtype=param_dtype)
    state = strategy.controller(plan, (3,), run=RunInfo(seed=1)).init_state()
    f = _exchange_program(plan, state)
    args = (state.fwd[0], state.bwd[0])
    key = jax.random.key(7)
    x = np.zeros((num_parts, plan.num_local_rows, 3), np.float32)  # x: [P, Nl, 3]
    grad = jax.jit(jax.grad(lambda x, g: jnp.sum(f(x, *args, key) * g)))
    g_all = np.random.default_rng(0).standard_normal((num_parts, plan.num_halo_rows, 3))
    g_all = np.where(plan.halo_mask[..., None], g_all, 0).astype(np.float32)  # [P, H, 3]

    offsets = np.cumsum([0, *plan.round_rows])
    capacity = strategy.widths if chunks else None
    buckets = round_buckets(plan, strategy.assignment(plan, 1, seed=1), capacity)["bwd"][0]
    for r in range(1, num_parts):
        g = np.zeros_like(g_all)
        g[:, offsets[r - 1] : offsets[r]] = g_all[:, offsets[r - 1] : offsets[r]]
        got = np.asarray(grad(x, g))
        # Each backward sender e is the forward receiver; the owner of its round-rr rows is
        # e - rr.
        expect = np.zeros_like(x)
        for e in range(num_parts):
            sender_key = jax.random.fold_in(jax.random.fold_in(key, e), 1)
            rows_of = lambda rr, slots, e=e, g=g: g[e][offsets[rr - 1] + slots]
            messages = _sender_messages(buckets, e, rows_of, sender_key, param_dtype)
            for w, (rows, where) in messages.items():
                for rr, start, count in where:
                    owner = (e - rr) % num_parts
                    slots = buckets[rr - 1][w]["recv"][owner]
                    real = slots >= 0
                    np.testing.assert_array_equal(slots, buckets[rr - 1][w]["send"][e])
                    target = plan.send_idx[rr - 1][owner][slots[real]]
                    np.add.at(expect[owner], target, rows[start : start + count][real])
        np.testing.assert_array_equal(got, expect)
        assert np.abs(got).max() > 0  # the round's gradient rows did arrive


@functools.partial(jax.jit, static_argnums=(1, 3))
def _roundtrip(rows, bits, key, param_dtype):
    """The kernels' ``dequantize(quantize(rows))`` at ``bits`` with ``key``."""
    dtype = jnp.dtype(param_dtype)
    return dequantize(*quantize(rows, bits, key, param_dtype=dtype), bits, rows.shape[0])


def _sender_messages(buckets, sender, rows_of, sender_key, param_dtype):
    """Simulates one sender of the quantized exchange on the host: per width ``b``, its round
    buckets (each padded with zero rows to a multiple of ``k = 8 / b``) concatenated in round
    order and quantized with ``fold_in(sender_key, b)``. ``rows_of(r, slots)`` gives the rows
    the sender puts in round ``r``'s slots (pad slots, -1, pick some row; callers compare
    real slots only).

    Returns:
      ``{b: (decoded rows, [(round, first row, row count), ...])}``.
    """
    out = {}
    for w in sorted({w for rb in buckets for w in rb}):
        k = 8 // w
        pieces, where = [], []
        for r, rb in enumerate(buckets, 1):
            if w not in rb:
                continue
            sent = rows_of(r, rb[w]["send"][sender])
            where.append((r, sum(p.shape[0] for p in pieces), sent.shape[0]))
            pad = -(-sent.shape[0] // k) * k - sent.shape[0]
            pieces.append(np.pad(sent, ((0, pad), (0, 0))))
        rows = _roundtrip(
            jnp.asarray(np.concatenate(pieces)), w, jax.random.fold_in(sender_key, w), param_dtype
        )
        out[w] = (np.asarray(rows), where)
    return out


def _row_delta(rows, bits):
    """Quantization step Δ = (max - min) / (2^b - 1) of each row, ``[..., D] -> [..., 1]``."""
    return (rows.max(-1, keepdims=True) - rows.min(-1, keepdims=True)) / (2**bits - 1)


@pytest.mark.parametrize("bits", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_exchange_values_and_gradients_are_unbiased(bits):
    """For a linear read-out <halo, G> both the delivered halo (forward messages) and the
    gradient w.r.t. the sender rows (backward messages) are unbiased.

    Tolerance from the variance model: a stochastically rounded element has variance
    Δ² p (1 - p) <= Δ²/4, so its mean over K draws lies within 6 σ_max / √K = 3 Δ / √K of the
    exact value except with negligible probability; a gradient element sums independent
    backward messages, so its variance bound is the scatter-add of their Δ²/4. The 1e-5 slack
    is the fp32 policy: ``q / scale + lo`` reconstructs to a few ulp of the row range.
    """
    plan = _plan(4, "random")
    state = Quantized(bits).init_state(plan, (5,))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, plan.num_local_rows, 5)).astype(np.float32)
    g = rng.standard_normal((4, plan.num_halo_rows, 5)).astype(np.float32)
    f = _exchange_program(plan, state)
    args = (state.fwd[0], state.bwd[0])
    value_and_grad = jax.jit(jax.value_and_grad(lambda x, k: jnp.sum(f(x, *args, k) * g)))
    k = 200
    halos, grads = [], []
    for i in range(k):
        key = jax.random.key(1000 + i)
        halos.append(np.asarray(f(x, *args, key)))
        grads.append(np.asarray(value_and_grad(x, key)[1]))
    halos, grads = np.stack(halos), np.stack(grads)

    halo_exact = _simulate_exact(plan, x)
    bound = 3 * _row_delta(halo_exact, bits) / np.sqrt(k) + 1e-5
    assert np.all(np.abs(halos.mean(0) - halo_exact) <= bound)

    grad_exact = _scatter_back(plan, g, x.shape)
    var = np.broadcast_to(_row_delta(g, bits) ** 2 / 4, g.shape)
    bound = 6 * np.sqrt(_scatter_back(plan, var, x.shape)) / np.sqrt(k) + 1e-5
    assert np.all(np.abs(grads.mean(0) - grad_exact) <= bound)
    assert np.abs(grads[0] - grad_exact).max() > 1e-2  # the draws are really noisy


def _simulate_exact(plan, x):
    p = plan.num_parts
    out = []
    for d in range(p):
        blocks = [x[(d - r) % p][plan.send_idx[r - 1][(d - r) % p]] for r in range(1, p)]
        out.append(np.concatenate(blocks))
    halo = np.stack(out)
    return np.where(plan.halo_mask[..., None], halo, 0)


def _scatter_back(plan, g, shape):
    p = plan.num_parts
    out = np.zeros(shape, np.float32)
    g = np.where(plan.halo_mask[..., None], g, 0)
    for d in range(p):
        offset = 0
        for r in range(1, p):
            src = (d - r) % p
            idx = plan.send_idx[r - 1][src]
            np.add.at(out[src], idx, g[d, offset : offset + len(idx)])
            offset += len(idx)
    return out


def test_model_gradient_mean_approaches_exact_at_8_bits():
    """Through the nonlinear model the forward quantization noise leaves an O(Δ²) bias; at
    8 bits the mean of K step gradients is within 1% (relative L2) of the exact gradient."""
    plan = _plan(4)
    t_v, shards_v, state_v = _trainer(Vanilla(), plan)
    t_q, shards_q, state_q = _trainer(Quantized(8), plan)
    exact = np.concatenate(
        [np.ravel(a) for a in jax.tree.leaves(t_v.loss_and_grads(state_v, shards_v)[1])]
    )
    draws = []
    for i in range(8):
        s = state_q.replace(rng=jax.random.key(100 + i))
        grads = t_q.loss_and_grads(s, shards_q)[1]
        draws.append(np.concatenate([np.ravel(a) for a in jax.tree.leaves(grads)]))
    mean = np.mean(draws, axis=0)
    assert np.linalg.norm(mean - exact) <= 0.01 * np.linalg.norm(exact)
    assert not np.array_equal(draws[0], draws[1])


@pytest.mark.parametrize("bits", [2, 32])
def test_reported_bytes_match_static_report(bits):
    plan = _plan(4)
    trainer, shards, state = _trainer(Quantized(bits), plan)
    state, metrics = trainer.train_step(state, shards)
    dims = (GRAPH.num_features, 8)
    report = byte_report(plan, BitAssignment.uniform(plan, 2, bits), dims)
    assert float(metrics["bytes_moved"]) == sum(v["moved"] for v in report.values())
    assert set(report) == {"fwd0", "fwd1", "bwd1"}  # layer 0 has no backward exchange
    if bits == 32:
        t_v, shards_v, state_v = _trainer(Vanilla(), plan)
        _, mv = t_v.train_step(state_v, shards_v)
        assert float(mv["bytes_moved"]) == float(metrics["bytes_moved"])
    for v in report.values():
        assert 0 < v["useful"] <= v["moved"]


def test_bfloat16_parameters_halve_the_parameter_bytes():
    """With bfloat16 ``(scale, lo)`` every quantized row carries 4 parameter bytes instead of
    8: the real bytes of each exchange drop by exactly 4 per row sent, the step reports what
    the static report counts, and the loss stays within the quantization noise of fp32
    parameters (the kernel keeps the message unbiased)."""
    plan = _plan(4)
    dims = (GRAPH.num_features, 8)
    assignment = BitAssignment.uniform(plan, 2, 4)
    fp32 = byte_report(plan, assignment, dims)
    bf16 = byte_report(plan, assignment, dims, param_dtype="bfloat16")
    rows = int(sum(m.sum() for m in plan.send_mask))  # real rows per exchange, whole mesh
    for key in fp32:
        assert fp32[key]["useful"] - bf16[key]["useful"] == 4 * rows
        assert bf16[key]["moved"] < fp32[key]["moved"]
    trainer, shards, state = _trainer(Quantized(4, param_dtype="bfloat16"), plan)
    _, metrics = trainer.train_step(state, shards)
    assert float(metrics["bytes_moved"]) == sum(v["moved"] for v in bf16.values())
    with pytest.raises(ValueError, match="param_dtype must be one of 'float32', 'bfloat16'"):
        Quantized(4, param_dtype="float16")


def test_bfloat16_parameters_change_nothing_at_32_bits():
    """fp32 rows carry no parameters: at 32 bits a layout built for bfloat16 parameters moves
    the same bytes and delivers the same rows, bit for bit."""
    plan = _plan(4, "random")
    a = BitAssignment.uniform(plan, 1, 32)
    exact = bucket_state(plan, a)
    bf16 = bucket_state(plan, a, param_dtype="bfloat16")
    x = np.random.default_rng(0).normal(size=(4, plan.num_local_rows, 5)).astype(np.float32)
    halos = [
        np.asarray(_exchange_program(plan, s)(x, s.fwd[0], s.bwd[0], jax.random.key(2)))
        for s in (exact, bf16)
    ]
    np.testing.assert_array_equal(halos[0], halos[1])
    assert byte_report(plan, a, (5,)) == byte_report(plan, a, (5,), param_dtype="bfloat16")


def _assert_rows_arrive(plan, state):
    """Every real halo slot of the first layer's forward exchange under ``state`` is within
    one 2-bit quantization step of its node's row. Rows of different nodes are 10 or more
    apart, so a row delivered to the wrong slot cannot pass."""
    x = plan.local_nodes[..., None] * 10.0 + np.arange(3, dtype=np.float32)
    x = np.where(plan.local_mask[..., None], x, 0).astype(np.float32)
    f = _exchange_program(plan, state)
    halo = np.asarray(f(x, state.fwd[0], state.bwd[0], jax.random.key(1)))
    expect = plan.halo_nodes[..., None] * 10.0 + np.arange(3)
    err = np.abs(halo - expect)[plan.halo_mask]
    assert err.max() <= 2.0 / 3.0 + 1e-5  # Δ of a 2-bit code on a row of range 2


def test_round_buffer_is_as_long_as_the_largest_sender():
    """Under a mixed assignment a round's buffer holds each sender's real buckets back to back,
    at the sender's own offsets: it is as long as the largest sender's bytes, not the sum of
    the per-width buckets each padded to its largest sender. Device ``d`` sends every row at
    width ``(8, 2, 4, 2)[d]``, so each round has three widths of which a device uses one."""
    plan = _plan(4, "random")
    widths = np.array([8, 2, 4, 2], np.int8)
    rounds = tuple(np.broadcast_to(widths[:, None], m.shape).copy() for m in plan.send_mask)
    assignment = BitAssignment(fwd=(rounds, rounds), bwd=(rounds, rounds))
    dims = (3, 8)
    report = byte_report(plan, assignment, dims)
    for layer, dim in enumerate(dims):
        longest = sum(
            max(
                wire_bytes(int(n), dim, int(w))
                for n, w in zip(mask.sum(axis=1), widths, strict=True)
            )
            for mask in plan.send_mask
        )
        moved = report[f"fwd{layer}"]["moved"]
        assert moved == plan.num_parts * longest
        assert moved < report[f"fwd{layer}"]["bucket_padded"]
        if layer:  # the gradient rows travel back at the same widths: the same buffers
            assert report[f"bwd{layer}"]["moved"] == moved
    # The rows arrive where they belong (the offsets differ per device).
    _assert_rows_arrive(plan, bucket_state(plan, assignment))
    # The training step reports the bytes the report counts.
    trainer, shards, _ = _trainer(Quantized(8), plan)
    model_dims = (GRAPH.num_features, 8)
    state = trainer.create_state(
        jax.random.key(3), GRAPH.num_features, bucket_state(plan, assignment)
    )
    _, metrics = trainer.train_step(state, shards)
    report = byte_report(plan, assignment, model_dims)
    assert float(metrics["bytes_moved"]) == sum(v["moved"] for v in report.values())


def test_random_assignment_is_redrawn_each_period():
    plan = _plan(4)
    strategy = Quantized("random", period=3, chunks=0)
    a0 = strategy.assignment(plan, 2, period_index=0, seed=2)
    a1 = strategy.assignment(plan, 2, period_index=1, seed=2)
    assert a0.digest() != a1.digest()
    assert strategy.assignment(plan, 2, period_index=1, seed=2).digest() == a1.digest()
    counts = a0.width_counts(plan)["fwd0"]
    assert counts[32] == 0 and min(counts[2], counts[4], counts[8]) > 0
    dims = (8, 8)
    controller = strategy.controller(plan, dims, run=RunInfo(seed=2))
    for epoch in (1, 2, 3, 5, 6):
        assert controller.update(None, epoch=epoch) is None
    new = controller.update(None, epoch=4)
    assert jax.tree.structure(new) == jax.tree.structure(bucket_state(plan, a1))
    assert Quantized(8).controller(plan, dims).update(None, epoch=4) is None


def test_state_after_epochs_matches_replayed_updates():
    """``init_state(epoch=E)`` (what a checkpoint after epoch E restores into) equals the state
    reached by running the host updates of epochs 1..E from the start."""
    plan = _plan(4)
    strategy = Quantized("random", period=2, chunks=0)
    dims = (8, 8)
    controller = strategy.controller(plan, dims, run=RunInfo(seed=3))
    state = controller.init_state()
    for epoch in range(1, 8):
        new = controller.update(state, epoch=epoch)
        state = state if new is None else new
        expect = strategy.controller(plan, dims, run=RunInfo(seed=3)).init_state(epoch=epoch)
        assert jax.tree.structure(state) == jax.tree.structure(expect)
        for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(expect), strict=True):
            np.testing.assert_array_equal(a, b)


def test_invalid_widths():
    with pytest.raises(ValueError, match="quantized.bits must be 2, 4, 8, 32 or 'random'"):
        Quantized(3)
    with pytest.raises(ValueError, match="quantized.period must be an integer >= 0"):
        Quantized("random", period=-1)


def test_step_sends_one_buffer_per_round_and_quantizes_each_width_once():
    """The program is as small as the layout promises: per exchange (forward of both layers,
    backward of the second) one ``ppermute`` per ring round whatever the number of widths, and
    one quantize and one dequantize per width for all rounds. Per-round or per-bucket
    collectives or quantizations would multiply these counts, and the compile time with them."""
    import re

    plan = _plan(4, "random")
    trainer, shards, state = _trainer(Quantized("random", chunks=0), plan)
    text = trainer.train_step.lower(state, shards).as_text()
    rounds, exchanges, widths = plan.num_parts - 1, 3, 3
    assert text.count("stablehlo.collective_permute") == exchanges * rounds
    assert len(re.findall(r"call @quantize(?:_\d+)?\(", text)) == exchanges * widths
    assert len(re.findall(r"call @dequantize(?:_\d+)?\(", text)) == exchanges * widths


# ---------------------------------------------------------------------- chunked layouts


def _mixed_assignment(plan, widths):
    """Device ``d`` sends every row at ``widths[d]`` (both directions, both layers)."""
    widths = np.asarray(widths, np.int8)
    rounds = tuple(np.broadcast_to(widths[:, None], m.shape).copy() for m in plan.send_mask)
    return BitAssignment(fwd=(rounds, rounds), bwd=(rounds, rounds))


def test_chunked_layout_shapes_do_not_depend_on_the_assignment():
    """One chunked layout, hence one compiled step, serves every assignment over its widths;
    exact layouts of different assignments differ in shape."""
    plan = _plan(4)
    rng = np.random.default_rng(0)
    assignments = [
        BitAssignment.uniform(plan, 2, 8),
        BitAssignment.random(plan, 2, rng),
        _mixed_assignment(plan, [8, 2, 4, 2]),
    ]

    def signature(state):
        leaves, tree = jax.tree_util.tree_flatten(state)
        return tree, [np.shape(a) for a in leaves]

    chunked = [signature(bucket_state(plan, a, chunks=3)) for a in assignments]
    exact = [signature(bucket_state(plan, a)) for a in assignments]
    assert chunked[0] == chunked[1] == chunked[2]
    assert exact[0] != exact[1] and exact[1] != exact[2]
    with pytest.raises(ValueError, match=r"bit-widths \[32\] are outside"):
        bucket_state(plan, BitAssignment.uniform(plan, 2, 32), chunks=3)
    with pytest.raises(ValueError, match="exchange chunks must be an integer"):
        bucket_state(plan, assignments[0], chunks=-1)
    # Chunked where compiling competes with training (CPU), exact on accelerators.
    assert (default_chunks("cpu"), default_chunks("gpu"), default_chunks("tpu")) == (6, 0, 0)


def test_chunked_uncompressed_width_equals_vanilla(chunks=2):
    """At 32 bits through a chunked layout (every bucket at full capacity, the round buffers
    sent in chunks) the loss is Vanilla's bit for bit and the gradients agree to fp32
    rounding, as for the exact layout."""
    plan = _plan(2)
    t_v, shards_v, state_v = _trainer(Vanilla(), plan)
    t_q, shards_q, state_q = _trainer(Quantized(32), plan)
    layout = bucket_state(
        plan, BitAssignment.uniform(plan, 2, 32), chunks=chunks, widths=(2, 4, 8, 32)
    )
    state_q = state_q.replace(comm_state=t_q.place_comm_state(layout))
    loss_v, grads_v = t_v.loss_and_grads(state_v, shards_v)
    loss_q, grads_q = t_q.loss_and_grads(state_q, shards_q)
    assert float(loss_v) == float(loss_q)
    for a, b in zip(jax.tree.leaves(grads_v), jax.tree.leaves(grads_q), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-8)


def test_chunked_layout_sends_the_largest_sender_rounded_up_to_a_unit():
    """Devices of a round use different widths (8, 2, 4, 2). A chunked layout moves, per
    round, the largest sender's bytes rounded up to a unit of capacity / 2^J, plus the
    ``pmax`` that agrees on it; rows still arrive where they belong; the step reports those
    bytes."""
    from jaxgraph.comm.wirebytes import chunk_bytes, layout_bytes

    plan = _plan(4, "random")
    assignment = _mixed_assignment(plan, [8, 2, 4, 2])
    chunks, dims = 2, (3, 8)
    exact = byte_report(plan, assignment, dims)
    report = byte_report(plan, assignment, dims, chunks=chunks)
    state = bucket_state(plan, assignment, chunks=chunks)
    p, rounds = plan.num_parts, plan.num_parts - 1
    for layer, dim in enumerate(dims):
        layout = state.fwd[layer]
        units = chunk_bytes(layout, dim)
        # Capacity: every slot at 8 bits, codes plus 8 parameter bytes per row.
        assert units == tuple(-(-(s * (dim + 8)) // 2**chunks) for s in plan.round_rows)
        moved = 0
        for mask, u in zip(plan.send_mask, units, strict=True):
            longest = max(
                wire_bytes(int(n), dim, int(w))
                for n, w in zip(mask.sum(axis=1), (8, 2, 4, 2), strict=True)
            )
            moved += -(-longest // u) * u
        agree = (p - 1) * 4 * rounds
        assert layout_bytes(layout, dim) == moved + agree
        assert report[f"fwd{layer}"]["moved"] == p * (moved + agree)
        assert report[f"fwd{layer}"]["useful"] == exact[f"fwd{layer}"]["useful"]
        assert exact[f"fwd{layer}"]["moved"] <= report[f"fwd{layer}"]["moved"]
        assert report[f"fwd{layer}"]["moved"] < exact[f"fwd{layer}"]["moved"] + p * (
            sum(units) + agree
        )
    _assert_rows_arrive(plan, state)
    trainer, shards, _ = _trainer(Quantized("random", chunks=chunks), plan)
    model_dims = (GRAPH.num_features, 8)
    train_state = trainer.create_state(
        jax.random.key(3), GRAPH.num_features, bucket_state(plan, assignment, chunks=chunks)
    )
    _, metrics = trainer.train_step(train_state, shards)
    report = byte_report(plan, assignment, model_dims, chunks=chunks)
    assert float(metrics["bytes_moved"]) == sum(v["moved"] for v in report.values())


@pytest.mark.parametrize("chunks", [1, 3])
def test_send_chunks_delivers_the_agreed_prefix(chunks):
    """Each device's buffer holds its own number of real bytes; the ``pmax`` of the units
    they need decides the transfers, and every receiver gets exactly the first
    ``units * unit`` bytes of its sender's buffer, zeros after."""
    from jaxgraph.comm.qring import _send_chunks
    from jaxgraph.comm.ring import ring_perm

    num_parts, unit = 4, 5
    size = unit << chunks
    mesh = make_mesh(num_parts)
    axis = mesh.axis_names[0]
    rng = np.random.default_rng(chunks)
    for lengths in ([0, 0, 0, 0], [1, 0, 3, 2], [size, 1, 0, 7], list(rng.integers(0, size, 4))):
        bufs = rng.integers(1, 255, (num_parts, size)).astype(np.uint8)
        need = -(-max(lengths) // unit)

        def body(buf, length):
            units = jax.lax.pmax((length[0] + unit - 1) // unit, axis)
            out = _send_chunks(buf[0], units, unit, chunks, axis, ring_perm(num_parts, 1))
            return out[None]

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(axis),) * 2, out_specs=P(axis)))
        got = np.asarray(f(bufs, np.asarray(lengths, np.int32)))
        for d in range(num_parts):
            sender = bufs[(d - 1) % num_parts]
            np.testing.assert_array_equal(got[d, : need * unit], sender[: need * unit])
            assert not got[d, need * unit :].any()


def test_chunked_step_gates_each_rounds_transfers():
    """A chunked exchange runs, per ring round, one ``ppermute`` per power-of-two chunk size
    (``J + 1`` of them, each in a conditional branch) and still one quantize and dequantize
    per width."""
    import re

    plan = _plan(4, "random")
    chunks = 2
    trainer, shards, state = _trainer(Quantized("random", chunks=chunks), plan)
    text = trainer.train_step.lower(state, shards).as_text()
    rounds, exchanges, widths = plan.num_parts - 1, 3, 3
    assert text.count("stablehlo.collective_permute") == exchanges * rounds * (chunks + 1)
    assert text.count("stablehlo.case") >= exchanges * rounds * (chunks + 1)
    assert len(re.findall(r"call @quantize(?:_\d+)?\(", text)) == exchanges * widths
    assert len(re.findall(r"call @dequantize(?:_\d+)?\(", text)) == exchanges * widths
