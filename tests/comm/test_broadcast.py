"""The ppermute broadcast, its reduction transpose, the all-blocks exchange and Skip-Broadcast:
exact data movement with rank-coded blocks."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxgraph.comm import ring_exchange
from jaxgraph.comm.broadcast import (
    all_blocks_by_broadcast,
    broadcast,
    broadcast_bytes,
    broadcast_forward,
    skip_broadcast_blocks,
    tree_perm,
    tree_rounds,
    tree_sends,
)
from jaxgraph.mesh import make_mesh

MESH_SIZES = (1, 2, 4, 8)
B, F = 3, 2


def _rank_coded(p):
    """Block of device d: 100 * d + 10 * row + column, so a misrouted block is visible."""
    d, r, c = np.meshgrid(np.arange(p), np.arange(B), np.arange(F), indexing="ij")
    return (100.0 * d + 10.0 * r + c).astype(np.float32)  # [P, B, F]


def _program(p, body, num_in=1):
    mesh = make_mesh(p)
    axis = mesh.axis_names[0]
    f = jax.jit(
        jax.shard_map(
            lambda *a: body(axis, *a), mesh=mesh, in_specs=(P(axis),) * num_in, out_specs=P(axis)
        )
    )
    put = lambda a: jax.device_put(np.asarray(a), NamedSharding(mesh, P(axis)))  # noqa: E731
    return f, put


@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_tree_schedule(num_parts):
    """Every non-source device receives exactly once, from a device that already has the
    block; the sends add up to P - 1 blocks."""
    for source in range(num_parts):
        have = {source}
        received = collections.Counter()
        for k in tree_rounds(num_parts):
            pairs = tree_perm(num_parts, source, k)
            assert len({d for _, d in pairs}) == len(pairs)  # a permutation
            assert all(s in have for s, _ in pairs)
            received.update(d for _, d in pairs)
            have |= {d for _, d in pairs}
        assert have == set(range(num_parts))
        assert all(received[d] == 1 for d in range(num_parts) if d != source)
    assert tree_sends(num_parts).sum() == num_parts - 1
    per_rank, total = broadcast_bytes((B, F), num_parts)
    assert per_rank.sum() == total == (num_parts - 1) * B * F * 4


@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_broadcast_every_source_exactly(num_parts):
    x = _rank_coded(num_parts)

    def body(axis, x):  # x: f32[1, B, F]
        out = [broadcast(x[0], s, axis_name=axis, num_parts=num_parts) for s in range(num_parts)]
        return jnp.stack(out)[None]  # f32[1, P, B, F]

    f, put = _program(num_parts, body)
    got = np.asarray(f(put(x)))  # [device, source, B, F]
    for s in range(num_parts):
        np.testing.assert_array_equal(got[:, s], np.broadcast_to(x[s], (num_parts, B, F)))


@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_broadcast_gradient_is_reduction_to_source(num_parts):
    """d/dx <broadcast(x, s), g> = sum_i g_i on the source, 0 elsewhere (integers: exact)."""
    x = _rank_coded(num_parts)
    g = np.random.default_rng(0).integers(-5, 5, (num_parts, num_parts, B, F)).astype(np.float32)

    def body(axis, x, g):  # x: f32[1, B, F], g: f32[1, P, B, F]
        def loss(x):
            out = [broadcast(x, s, axis_name=axis, num_parts=num_parts) for s in range(num_parts)]
            return jnp.sum(jnp.stack(out) * g[0])

        return jax.grad(loss)(x[0])[None]

    f, put = _program(num_parts, body, num_in=2)
    got = np.asarray(f(put(x), put(g)))
    np.testing.assert_array_equal(got, g.sum(axis=0))  # g[i, s]: device i, source s


@pytest.mark.parametrize("num_parts", MESH_SIZES)
def test_all_blocks_equal_ring_exchange_of_whole_blocks(num_parts):
    """Halo order: slot r - 1 is block (i - r) mod P, as a ring of whole blocks delivers it."""
    x = _rank_coded(num_parts)
    send_idx = [jnp.arange(B)] * (num_parts - 1)

    def body(axis, x):
        a = all_blocks_by_broadcast(x[0], axis_name=axis, num_parts=num_parts)
        r = ring_exchange(x[0], send_idx, axis_name=axis, num_parts=num_parts)
        return jnp.stack([a, r])[None]

    f, put = _program(num_parts, body)
    got = np.asarray(f(put(x)))
    expect = [
        np.concatenate([x[(i - r) % num_parts] for r in range(1, num_parts)] or [x[0, :0]])
        for i in range(num_parts)
    ]
    np.testing.assert_array_equal(got[:, 0], np.stack(expect))
    np.testing.assert_array_equal(got[:, 1], np.stack(expect))


def test_native_pbroadcast_has_no_cpu_lowering():
    """Why the ppermute tree exists: on this jax, CollectiveBroadcast lowers on GPU only. The
    helper lowers to collective-permutes on CPU, without a collective-broadcast."""
    f, put = _program(4, lambda axis, x: jax.lax.pbroadcast(x, (axis,), 1))
    with pytest.raises(NotImplementedError, match="pbroadcast"):
        f.lower(put(_rank_coded(4)))
    g, _ = _program(4, lambda axis, x: broadcast_forward(x, 1, axis_name=axis, num_parts=4))
    hlo = g.lower(put(_rank_coded(4))).as_text()
    assert "collective_permute" in hlo and "collective_broadcast" not in hlo


def _skip_program(num_parts, active, send=None):
    def body(axis, x, cache):  # x: f32[1, B, F], cache: f32[1, P-1, B, F]
        return skip_broadcast_blocks(
            x[0], cache[0], jnp.asarray(active), axis_name=axis, num_parts=num_parts, send=send
        )[None]

    return _program(num_parts, body, num_in=2)


@pytest.mark.parametrize("num_parts", (2, 4, 8))
def test_skip_broadcast_mixes_fresh_and_cached_blocks(num_parts):
    rng = np.random.default_rng(num_parts)
    active = rng.random(num_parts) < 0.5
    x = _rank_coded(num_parts)
    cache = (
        -_rank_coded(num_parts)[:, None].repeat(num_parts - 1, axis=1)
        - 1000.0 * np.arange(1, num_parts)[None, :, None, None]
    )  # [P, P-1, B, F], distinct from every block
    f, put = _skip_program(num_parts, active)
    got = np.asarray(f(put(x), put(cache)))
    for i in range(num_parts):
        for r in range(1, num_parts):
            j = (i - r) % num_parts
            expect = x[j] if active[j] else cache[i, r - 1]
            np.testing.assert_array_equal(got[i, r - 1], expect)


def test_skipped_broadcast_executes_no_collective():
    """The send of a skipped source never runs: count executions with a debug callback."""
    num_parts = 4
    active = np.array([True, False, True, False])
    calls = collections.Counter()

    def counting_send(x, source, *, axis):
        jax.debug.callback(lambda: calls.update([source]))
        return broadcast_forward(x, source, axis_name=axis, num_parts=num_parts)

    def body(axis, x, cache):
        send = lambda x, s: counting_send(x, s, axis=axis)  # noqa: E731
        return skip_broadcast_blocks(
            x[0], cache[0], jnp.asarray(active), axis_name=axis, num_parts=num_parts, send=send
        )[None]

    f, put = _program(num_parts, body, num_in=2)
    x = _rank_coded(num_parts)
    cache = np.zeros((num_parts, num_parts - 1, B, F), np.float32)
    jax.block_until_ready(f(put(x), put(cache)))
    jax.effects_barrier()
    # Each active source's send ran once per device; the skipped sources' sends never ran.
    assert calls == {0: num_parts, 2: num_parts}


@pytest.mark.parametrize("num_parts", (2, 4))
def test_skip_broadcast_gradient_reaches_owner_even_when_cached(num_parts):
    """Backward: every halo slot's gradient is summed on the block's owner (straight-through
    for cached blocks); the cache gets none."""
    active = np.arange(num_parts) % 2 == 0
    x = _rank_coded(num_parts)
    cache = np.ones((num_parts, num_parts - 1, B, F), np.float32)
    g = (
        np.random.default_rng(1)
        .integers(-4, 4, (num_parts, num_parts - 1, B, F))
        .astype(np.float32)
    )

    def body(axis, x, cache, g):
        def loss(x, cache):
            halo = skip_broadcast_blocks(
                x, cache, jnp.asarray(active), axis_name=axis, num_parts=num_parts
            )
            return jnp.sum(halo * g[0])

        dx, dcache = jax.grad(loss, argnums=(0, 1))(x[0], cache[0])
        return jnp.concatenate([dx[None], dcache])[None]

    f, put = _program(num_parts, body, num_in=3)
    got = np.asarray(f(put(x), put(cache), put(g)))
    expect = np.zeros_like(x)
    for i in range(num_parts):
        for r in range(1, num_parts):
            expect[(i - r) % num_parts] += g[i, r - 1]
    np.testing.assert_array_equal(got[:, 0], expect)
    assert not got[:, 1:].any()
