"""Quantized block broadcasts (CAGNET, Sancus): exact at 32 bits, unbiased in both passes,
caches that hold what the receivers decoded, byte accounting, and the method spellings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from test_stale_training import GRAPH, HIDDEN, _check_consistent, _setup

from jaxgraph.comm.broadcast import tree_perm, tree_rounds
from jaxgraph.comm.cagnet import CAGNET
from jaxgraph.comm.qbroadcast import (
    block_bytes,
    decode_block,
    encode_block,
    quantized_blocks,
)
from jaxgraph.comm.sancus import Sancus
from jaxgraph.comm.skipg import SkipG
from jaxgraph.comm.staleness import decision_bytes, table_bytes
from jaxgraph.mesh import make_mesh
from jaxgraph.train.methods import parse_method

from dense_stale import stale_gcn

STEPS = 3


def _run(strategy, num_parts, steps=STEPS, dropout=0.0):
    plan, trainer, shards, state = _setup(strategy, GRAPH, num_parts, dropout=dropout)
    out = []
    for _ in range(steps):
        state, metrics = trainer.train_step(state, shards)
        out.append((float(metrics["loss"]), float(metrics["bytes_moved"])))
    return plan, state, out


@pytest.mark.parametrize(
    "make",
    [
        lambda q: CAGNET(quantize=q),
        lambda q: Sancus("epoch", 1, 1, quantize=q),
        lambda q: SkipG(1, warmup=1, quantize=q),
    ],
    ids=["cagnet", "sancus", "skipg"],
)
@pytest.mark.parametrize(
    "num_parts", [pytest.param(p, marks=pytest.mark.slow) for p in (1, 2, 8)] + [4]
)
def test_quantize_32_trains_as_the_plain_method_bit_for_bit(make, num_parts):
    """At 32 bits the blocks and gradient sums travel as fp32 bytes through the quantized
    path: losses, bytes, parameters and caches equal the plain method's, bit for bit (Sancus
    reuses cached blocks and SkipG its cached gradient sums at epoch 2)."""
    _, plain, ref = _run(make(None), num_parts, dropout=0.5)
    _, state, got = _run(make(32), num_parts, dropout=0.5)
    assert got == ref
    got_tree, ref_tree = ((s.params, s.comm_state, s.opt_state) for s in (state, plain))
    for a, b in zip(jax.tree.leaves(got_tree), jax.tree.leaves(ref_tree), strict=True):
        np.testing.assert_array_equal(a, b)


def _blocks_program(num_parts, bits, grad_bits):
    mesh = make_mesh(num_parts)
    axis = mesh.axis_names[0]

    def body(x, g, key):
        def readout(x):
            halo, _ = quantized_blocks(
                x[0], None, None, key, bits=bits, grad_bits=grad_bits, axis_name=axis,
                num_parts=num_parts,
            )  # fmt: skip
            return jnp.sum(halo * g[0].reshape(halo.shape)), halo

        (_, halo), dx = jax.value_and_grad(readout, has_aux=True)(x)
        return halo[None], dx

    return jax.jit(
        jax.shard_map(
            body, mesh=mesh, in_specs=(P(axis), P(axis), P()), out_specs=(P(axis), P(axis))
        )
    )


def _delta(rows, bits):
    """The quantization step of each row, ``[..., F] -> [..., 1]``."""
    return (rows.max(-1, keepdims=True) - rows.min(-1, keepdims=True)) / (2**bits - 1)


def _tree_reduce_bound(g, bits):
    """Per owner, the exact sum of the other devices' cotangents of its block and a bound on
    the variance of the quantized tree's estimate of it.

    Every hop sends its running sum quantized: a variance of at most ``Δ²/4`` per element
    (a stochastically rounded value has variance ``Δ² p (1 - p)``), independent across hops,
    so the variances add. A hop's ``Δ`` is its row range over ``2^b - 1``, and the range of a
    decoded sum exceeds the exact one's by at most twice the rounding errors it carries (each
    under its ``Δ``): the recursion below bounds it from the exact running sums.

    Shapes: ``g: [P, P-1, B, F]`` (device, halo slot) -> ``(exact, var)``, each ``[P, B, F]``.
    ``bits``: one width, or one per owner.
    """
    p = g.shape[0]
    widths = (bits,) * p if isinstance(bits, int) else tuple(bits)
    exact, var = np.zeros((p,) + g.shape[2:]), np.zeros((p,) + g.shape[2:])
    for j in range(p):
        # partial[d]: device d's cotangent of block j (zero on the owner), by relative rank.
        acc = {(d - j) % p: g[d, (d - j) % p - 1] if d != j else 0 * g[0, 0] for d in range(p)}
        err = {a: 0 * g[0, 0, :, :1] for a in acc}  # accumulated rounding error bound, per row
        for k in reversed(tree_rounds(p)):
            for src, dst in tree_perm(p, 0, k):  # relative ranks: src sends up to dst
                step = (np.ptp(acc[dst], -1, keepdims=True) + 2 * err[dst]) / (2 ** widths[j] - 1)
                var[j] += np.broadcast_to(step**2 / 4, var[j].shape)
                acc[src] = acc[src] + acc[dst]
                err[src] = err[src] + err[dst] + step
        exact[j] = acc[0]
    return exact, var


@pytest.mark.parametrize("bits", [2, pytest.param(4, marks=pytest.mark.slow), 8])
def test_forward_and_backward_broadcasts_are_unbiased(bits):
    """For a linear read-out <halo, G>: the decoded blocks (forward) and the gradient each
    owner receives (backward, summed along the reduction tree with every hop quantized) are
    unbiased. Tolerance from the variance model: a mean over K draws lies within
    6 σ / √K of the exact value (σ² <= Δ²/4 forward, the tree bound of
    :func:`_tree_reduce_bound` backward); the 1e-5 slack is fp32 reconstruction."""
    num_parts, b, f, draws = 4, 6, 5, 200
    rng = np.random.default_rng(0)
    x = rng.standard_normal((num_parts, b, f)).astype(np.float32)
    g = rng.standard_normal((num_parts, (num_parts - 1) * b, f)).astype(np.float32)
    run = _blocks_program(num_parts, bits, bits)
    halos, grads = [], []
    for i in range(draws):
        halo, dx = run(x, g, jax.random.key(100 + i))
        halos.append(np.asarray(halo))
        grads.append(np.asarray(dx))
    halos, grads = np.stack(halos), np.stack(grads)

    exact = np.stack(
        [np.stack([x[(d - r) % num_parts] for r in range(1, num_parts)]) for d in range(num_parts)]
    ).reshape(halos.shape[1:])
    bound = 6 * (_delta(exact, bits) / 2) / np.sqrt(draws) + 1e-5
    assert np.all(np.abs(halos.mean(0) - exact) <= bound)
    assert np.abs(halos[0] - exact).max() > 0.1 * _delta(exact, bits).max()  # really noisy

    grad_exact, var = _tree_reduce_bound(g.reshape(num_parts, num_parts - 1, b, f), bits)
    bound = 6 * np.sqrt(var) / np.sqrt(draws) + 1e-5
    assert np.all(np.abs(grads.mean(0) - grad_exact) <= bound)
    assert np.abs(grads[0] - grad_exact).max() > 0.1 * np.sqrt(var).max()


@pytest.mark.parametrize("bits", [2, 4, 8, 32])
def test_encoded_block_has_the_accounted_size_and_decodes_within_a_step(bits):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((7, 5)).astype(np.float32))
    wire = encode_block(x, bits, jax.random.key(0))
    assert wire.dtype == jnp.uint8 and wire.shape == (block_bytes(7, 5, bits),)
    back = np.asarray(decode_block(wire, bits, 7, 5))
    if bits == 32:
        np.testing.assert_array_equal(back, np.asarray(x))
    else:
        assert np.all(np.abs(back - np.asarray(x)) <= _delta(np.asarray(x), bits) * (1 + 1e-5))


def test_sancus_caches_hold_the_decoded_blocks_and_skips_cost_nothing():
    """4-bit Sancus, Δ_E = 1 after a one-epoch warm-up: every receiver's cache equals the
    owner's last-sent copy bit for bit; that copy is the decoded block (within one
    quantization step of the dense ``H_1`` of its epoch, and not equal to it); the bytes are
    the quantized blocks' (layer 1 broadcast at epochs 1 and 3 only; the first layer's
    features exact, once)."""
    num_parts, bits = 4, 4
    strategy = Sancus("epoch", 1, 1, quantize=bits)
    plan, trainer, shards, state = _setup(strategy, GRAPH, num_parts)
    sent = []
    for _ in range(3):
        params = jax.device_get(state.params)
        state, metrics = trainer.train_step(state, shards)
        sent.append(float(metrics["bytes_moved"]))
        _check_consistent(state.comm_state, num_parts)
    b = plan.num_local_rows
    fwd0 = num_parts * (num_parts - 1) * b * GRAPH.num_features * 4
    fwd1 = num_parts * (num_parts - 1) * block_bytes(b, HIDDEN, bits)
    bwd1 = num_parts * (num_parts - 1) * block_bytes(b, HIDDEN, bits)
    tables = 2 * num_parts * decision_bytes(num_parts)
    assert sent == [fwd0 + fwd1 + bwd1 + tables, bwd1 + tables, fwd1 + bwd1 + tables]

    layer1 = jax.device_get(state.comm_state[1])
    assert np.all(layer1.sent_version == 3)
    _, (_, h1), _, _ = stale_gcn(params, GRAPH, plan.parts)  # epoch 3's rows
    decoded = plan.unshard_nodes(layer1.last_sent)
    h1 = np.asarray(h1)
    assert np.all(np.abs(decoded - h1) <= _delta(h1, bits) * (1 + 1e-4) + 1e-6)
    assert np.abs(decoded - h1).max() > 1e-4


def test_quantized_skipg_reuses_its_decoded_sum_and_counts_quantized_bytes():
    """4-bit SkipG, Δ = 1 after a one-epoch warm-up: reductions at epochs 1 and 3 store the
    decoded gradient sums, which epochs 2 and 4 reuse unchanged; every epoch broadcasts both
    layers' blocks at 4 bits, and only reducing epochs add the 4-bit backward blocks."""
    num_parts, bits = 4, 4
    plan, trainer, shards, state = _setup(SkipG(1, warmup=1, quantize=bits), GRAPH, num_parts)
    b, per_layer = plan.num_local_rows, num_parts * (num_parts - 1)
    forward = per_layer * (block_bytes(b, GRAPH.num_features, bits) + block_bytes(b, HIDDEN, bits))
    forward += num_parts * table_bytes(num_parts, 2)
    backward = per_layer * block_bytes(b, HIDDEN, bits)
    cached = None
    for epoch in range(1, 5):
        state, metrics = trainer.train_step(state, shards)
        reduced = epoch % 2 == 1
        assert float(metrics["bytes_moved"]) == forward + (backward if reduced else 0)
        grad = np.asarray(jax.device_get(state.comm_state[1].grad))
        if reduced:
            assert cached is None or not np.array_equal(grad, cached)
            cached = grad
        else:
            np.testing.assert_array_equal(grad, cached)


def test_spellings_and_widths():
    assert parse_method("cagnet-q4").quantize == 4
    sancus = parse_method("sancus-h0.04-eclip1-q8")
    assert (sancus.quantize, sancus.embedding_grad_clip) == (8, 1.0)
    assert sancus.name == "sancus-h0.04-eclip1-q8"
    with pytest.raises(ValueError, match="cagnet.quantize must be none, 2, 4, 8 or 32"):
        CAGNET(quantize=3)
    with pytest.raises(ValueError, match="quantize_grad needs quantize"):
        CAGNET(quantize_grad=4)
    with pytest.raises(ValueError, match="sancus.quantize_grad applies to quantize=a fixed"):
        Sancus(quantize="adaptive", quantize_grad=4)
    assert CAGNET(quantize=8, quantize_grad=4).name == "cagnet-q8g4"
    assert parse_method("cagnet-q8g4") == CAGNET(quantize=8, quantize_grad=4)
    assert parse_method("skipg-q2").name == "skipg-q2"


def test_widths_per_owner_are_unbiased_and_equal_widths_are_the_single_width_path():
    """Blocks at widths (2, 8, 4, 8) by owner: each decoded block and each owner's reduced
    gradient are unbiased within the variance model at its owner's width (the bounds of the
    single-width test, per owner). The same width for every owner, given as a tuple, is the
    single-width program bit for bit."""
    num_parts, b, f, draws = 4, 6, 5, 200
    widths = (2, 8, 4, 8)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((num_parts, b, f)).astype(np.float32)
    g = rng.standard_normal((num_parts, (num_parts - 1) * b, f)).astype(np.float32)
    run = _blocks_program(num_parts, widths, widths)
    halos, grads = [], []
    for i in range(draws):
        halo, dx = run(x, g, jax.random.key(300 + i))
        halos.append(np.asarray(halo))
        grads.append(np.asarray(dx))
    halos, grads = np.stack(halos), np.stack(grads)
    exact = np.stack(
        [np.stack([x[(d - r) % num_parts] for r in range(1, num_parts)]) for d in range(num_parts)]
    )  # [P, P-1, B, F]
    owner_bits = np.array(
        [[widths[(d - r) % num_parts] for r in range(1, num_parts)] for d in range(num_parts)]
    )[..., None, None]
    delta = np.ptp(exact, -1, keepdims=True) / (2.0**owner_bits - 1)
    bound = 6 * (delta / 2) / np.sqrt(draws) + 1e-5
    assert np.all(np.abs(halos.mean(0).reshape(exact.shape) - exact) <= bound)
    # Each block carries its owner's noise: 2-bit blocks far noisier than 8-bit ones.
    err = np.abs(halos[0].reshape(exact.shape) - exact) / np.maximum(delta, 1e-12)
    assert err[owner_bits[..., 0, 0] == 2].max() > 0.1
    grad_exact, var = _tree_reduce_bound(g.reshape(num_parts, num_parts - 1, b, f), widths)
    assert np.all(np.abs(grads.mean(0) - grad_exact) <= 6 * np.sqrt(var) / np.sqrt(draws) + 1e-5)

    same = _blocks_program(num_parts, (4,) * num_parts, (4,) * num_parts)
    single = _blocks_program(num_parts, 4, 4)
    for a, c in zip(same(x, g, jax.random.key(7)), single(x, g, jax.random.key(7)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_the_probe_traces_the_gradient_partials_each_device_sends():
    """The probe's cotangent is, per halo slot, the summed row-range variance (F / 6)
    (max - min)^2 of this device's gradient partial for that block."""
    num_parts, b, f = 4, 3, 5
    mesh = make_mesh(num_parts)
    axis = mesh.axis_names[0]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((num_parts, b, f)).astype(np.float32)
    g = rng.standard_normal((num_parts, num_parts - 1, b, f)).astype(np.float32)

    def body(x, g, probe):
        def readout(x, probe):
            halo, _ = quantized_blocks(
                x[0], None, None, jax.random.key(0), bits=8, grad_bits=8, axis_name=axis,
                num_parts=num_parts, probe=probe,
            )  # fmt: skip
            return jnp.sum(halo * g[0])

        return jax.grad(readout, argnums=1)(x, probe[0])[None]

    # Per device, as a probe held in comm_state is.
    probe = np.zeros((num_parts, num_parts - 1), np.float32)
    program = jax.shard_map(body, mesh=mesh, in_specs=(P(axis),) * 3, out_specs=P(axis))
    trace = jax.jit(program)(x, g, probe)
    expect = (f / 6) * np.sum(np.ptp(g, -1) ** 2, axis=-1)  # [P, P-1]
    np.testing.assert_allclose(np.asarray(trace), expect, rtol=1e-5)
