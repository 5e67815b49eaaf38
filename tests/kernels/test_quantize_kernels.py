"""Stochastic message quantization: the reference's statistics and edge cases, the packing layout,
and the Pallas kernels (interpret mode, small shapes) bit for bit against the reference."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.extend.random import threefry2x32_p
from jax.sharding import PartitionSpec as P

from jaxgraph.mesh import make_mesh
from pallas_kernels.backend import Backend, default_backend, resolve_backend
from pallas_kernels.packing import pack_codes, packed_rows, unpack_codes
from pallas_kernels.quantize import (
    DequantizeBlockSizes,
    QuantizeBlockSizes,
    dequantize,
    quantize,
    quantize_pallas,
)
from pallas_kernels.quantize_ref import (
    dequantize_reference,
    quantize_codes_reference,
    quantize_reference,
)
from pallas_kernels.random_bits import random_uniforms, threefry2x32

BITS = (2, 4, 8)
F32_EPS = float(np.finfo(np.float32).eps)
U_MAX = float(np.nextafter(np.float32(1), np.float32(0)))  # the largest float32 below 1

# Small tiles so that the interpreted kernels run several programs with partial row and
# column blocks.
SMALL_Q = QuantizeBlockSizes(rows=4)
SMALL_DQ = DequantizeBlockSizes(rows=4, cols=4)


def _levels(bits):
    return 2**bits - 1


def _gaussian_rows(n, d, seed, offset_scale=0.0):
    """Rows ``offset_n + sigma_n * z``, sigma in [0.5, 2]."""
    rng = np.random.default_rng(seed)
    sigma = rng.uniform(0.5, 2.0, (n, 1))
    offset = offset_scale * sigma * rng.standard_normal((n, 1))
    return (offset + sigma * rng.standard_normal((n, d))).astype(np.float32)


def _edge_rows(d=5):
    """Rows a quantizer must survive: constant (zero, nonzero, negative), a tiny spread whose
    scale overflows fp32, an fp32-overflowing range, and ordinary rows."""
    rows = [
        np.zeros(d),
        np.full(d, 2.5),
        np.full(d, -0.3),
        np.linspace(0.0, 1e-40, d),  # denormal spread: L / spread overflows (or FTZ makes it 0)
        np.linspace(-1e30, 1e30, d),
        np.linspace(-3e38, 3e38, d),  # spread overflows to inf: unsupported, but finite output
    ]
    rng = np.random.default_rng(0)
    rows += list(rng.standard_normal((5, d)))
    return np.asarray(rows, np.float32)


# --------------------------------------------------------------------------------------------
# Randomness


def test_threefry_matches_jax():
    k0, k1 = np.uint32(0x12345678), np.uint32(0x9ABCDEF0)
    c0 = jnp.arange(64, dtype=jnp.uint32) * np.uint32(2654435761)
    c1 = jnp.arange(64, dtype=jnp.uint32)
    ours = jax.jit(threefry2x32)(k0, k1, c0, c1)
    theirs = threefry2x32_p.bind(jnp.uint32(k0), jnp.uint32(k1), c0, c1)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_random_uniforms_drive_quantize():
    x = jnp.asarray(_edge_rows())
    key = jax.random.key(5)
    for bits in (2, 8):  # the two draw layouts (16-bit halves; 23-bit words, as at 4 bits)
        u = random_uniforms(key, x.shape, bits)
        r = 16 if bits == 2 else 23
        assert u.dtype == jnp.float32 and float(u.min()) >= 0.0 and float(u.max()) < 1.0
        np.testing.assert_array_equal(np.asarray(u) * 2.0**r % 1.0, 0.0)  # on the R-bit grid
        from_key = quantize(x, bits, key)
        from_uniforms = quantize_reference(x, bits, uniforms=u)
        for a, b in zip(from_key, from_uniforms, strict=True):
            np.testing.assert_array_equal(a, b)


def test_fixed_key_reproduces_and_keys_differ():
    x = jnp.asarray(_edge_rows())
    key = jax.random.key(7)
    first = quantize(x, 2, key)
    again = quantize(x, 2, jax.random.key(7))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    for other in (jax.random.key(8), jax.random.fold_in(key, 1), jax.random.fold_in(key, 2)):
        assert not np.array_equal(quantize(x, 2, other)[0], first[0])
    # A raw uint32[2] key with the same data is the same key.
    np.testing.assert_array_equal(quantize(x, 2, jax.random.PRNGKey(7))[0], first[0])


def test_devices_with_folded_keys_draw_different_noise():
    """Two devices quantize identical rows with fold_in(key, axis_index): different packets."""
    mesh = make_mesh(2)
    axis = mesh.axis_names[0]
    x = jnp.asarray(_gaussian_rows(8, 16, seed=3))

    def body(x, key):
        # x: f32[8, 16] (replicated); key: key<fry>[] (replicated)
        dev_key = jax.random.fold_in(key, jax.lax.axis_index(axis))
        packed, _, _ = quantize(x, 2, dev_key)
        return packed[None]  # u8[1, 2, 16]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P(axis)))
    packets = np.asarray(f(x, jax.random.key(0)))
    assert packets.shape == (2, 2, 16)
    assert not np.array_equal(packets[0], packets[1])


# --------------------------------------------------------------------------------------------
# Statistics of the reference


NUM_DRAWS = 500
STAT_CONFIGS = [(2, "float32", 0.0), (4, "float32", 0.0), (8, "float32", 0.0), (8, "bfloat16", 3.0)]


@functools.cache
def _draws(bits, param_dtype, offset_scale):
    """Gaussian rows ``x: f32[32, 128]`` and, over NUM_DRAWS keys: the mean of x̂, the per-row
    mean squared error, and the parameters (the same in every draw)."""
    x = _gaussian_rows(32, 128, seed=bits, offset_scale=offset_scale)

    @jax.jit
    def run(x, key):
        def one(k):
            packed, scale, lo = quantize_reference(x, bits, k, param_dtype=param_dtype)
            return dequantize_reference(packed, scale, lo, bits, x.shape[0]), scale, lo

        xhat, scale, lo = jax.vmap(one)(jax.random.split(key, NUM_DRAWS))
        mse = jnp.mean(jnp.sum((xhat - x) ** 2, axis=-1), axis=0)
        return jnp.mean(xhat, axis=0), mse, scale[0], lo[0]

    return x, *(np.asarray(v, np.float64) for v in run(jnp.asarray(x), jax.random.key(11)))


# Unbiasedness bound. Per element, x̂ - x is zero-mean (bias <= 2^-17 Δ, from the R-bit noise)
# and lies in an interval of length Δ, so Hoeffding gives P(|mean_K(x̂) - x| >= 3Δ/√K) <=
# 2·exp(-2K(3Δ/√K)²/Δ²) = 2·exp(-18) ≈ 3.0e-8 per element. With 32·128 elements per
# configuration and four configurations (~16k elements) the union bound is 5e-4 for a random
# key (the key here is fixed, so the test is deterministic). The bound is 6 standard deviations
# (σ <= Δ / (2√K)).
@pytest.mark.parametrize("bits, param_dtype, offset_scale", STAT_CONFIGS)
def test_reference_is_unbiased(bits, param_dtype, offset_scale):
    x, mean, _, scale, lo = _draws(bits, param_dtype, offset_scale)
    # The grid the receiver uses: Δ = 1 / scale (with bf16 parameters, the rounded one).
    deviation = np.abs(mean - x) * scale[:, None]
    assert deviation.max() <= 3.0 / np.sqrt(NUM_DRAWS), deviation.max()
    if param_dtype == "bfloat16":
        np.testing.assert_array_equal(scale, scale.astype(jnp.bfloat16).astype(np.float64))
        np.testing.assert_array_equal(lo, lo.astype(jnp.bfloat16).astype(np.float64))
        # The rounded parameters still cover every row: lo <= min and lo + L / scale >= max.
        assert np.all(lo <= x.min(1))
        top = lo + _levels(bits) / scale
        assert np.all(top >= x.max(1) - 4 * F32_EPS * np.abs(x).max(1))


@pytest.mark.parametrize("bits", BITS)
def test_reference_mse_matches_variance_model(bits):
    """Row MSE against D·(hi - lo)²/(6·L²) (fractional parts uniform: E[p(1 - p)] = 1/6)."""
    x, _, mse, _, _ = _draws(bits, "float32", 0.0)
    spread = x.max(1).astype(np.float64) - x.min(1)
    model = x.shape[1] * spread**2 / (6 * _levels(bits) ** 2)
    ratio = mse / model
    assert 0.95 <= ratio.mean() <= 1.05, ratio.mean()
    assert 0.8 <= ratio.min() and ratio.max() <= 1.2, (ratio.min(), ratio.max())


# --------------------------------------------------------------------------------------------
# Edge cases of the reference


@pytest.mark.parametrize("bits", BITS)
def test_codes_in_range_at_the_upper_limit_of_u(bits):
    levels = _levels(bits)
    x = _gaussian_rows(11, 5, seed=4)
    x[1] = np.round(np.linspace(0, levels, 5))  # scale 1: every y is a level, the max is L
    x = jnp.asarray(x)
    codes = {}
    for u_value in (0.0, U_MAX, 1.0):  # 1.0 lies outside U[0, 1) and must clamp as well
        q, scale, lo = quantize_codes_reference(x, bits, jnp.full(x.shape, u_value, jnp.float32))
        codes[u_value] = np.asarray(q).astype(np.int64)
        assert codes[u_value].max() <= levels
        assert np.all(codes[u_value][x == x.max(1, keepdims=True)] == levels)
        assert np.all(codes[u_value][x == x.min(1, keepdims=True)] == 0)
    # u = 0 rounds y down and u just below 1 rounds it up, up to the 2^-R noise resolution;
    # on a level both give the level.
    y = (np.asarray(x) - np.asarray(lo)[:, None]) * np.asarray(scale)[:, None]
    low, high = codes[0.0], codes[U_MAX]
    assert np.all((low <= y + 1e-4) & (low > y - 1)), "u = 0 must round down"
    assert np.all((high >= y - 1e-4) & (high < y + 1)), "u -> 1 must round up"
    np.testing.assert_array_equal(codes[1.0], high)
    np.testing.assert_array_equal(low[1], y[1])
    np.testing.assert_array_equal(high[1], y[1])


@pytest.mark.parametrize(
    "bits, param_dtype",
    [(2, jnp.float32), (4, jnp.float32), (8, jnp.float32), (8, jnp.bfloat16)],
)
def test_edge_rows_are_exact_and_finite(bits, param_dtype):
    x = _edge_rows()
    packed, scale, lo = quantize(jnp.asarray(x), bits, jax.random.key(3), param_dtype=param_dtype)
    xhat = np.asarray(dequantize(packed, scale, lo, bits, x.shape[0]))
    scale, lo = np.asarray(scale, np.float32), np.asarray(lo, np.float32)
    assert np.all(np.isfinite(scale)) and np.all(np.isfinite(lo)) and np.all(np.isfinite(xhat))
    assert np.all(scale > 0)
    codes = np.asarray(unpack_codes(packed, bits, x.shape[0]))
    # Zero rows are exact in both modes; other constant rows in fp32 mode (their value need not
    # be representable in bf16, where they are rounded stochastically instead).
    constant = [0, 1, 2] if param_dtype == jnp.float32 else [0]
    for i in constant:
        assert np.all(codes[i] == 0) and scale[i] == 1.0 and lo[i] == x[i, 0]
        np.testing.assert_array_equal(xhat[i], x[i])
    ordinary = slice(6, None)
    if param_dtype == jnp.float32:
        levels = _levels(bits)
        spread = x[ordinary].max(1) - x[ordinary].min(1)
        np.testing.assert_array_equal(scale[ordinary], np.float32(levels) / spread)
        np.testing.assert_array_equal(lo[ordinary], x[ordinary].min(1))
        # Row min and max reconstruct: the min exactly, the max to fp32 rounding.
        for row, xr in zip(x[ordinary], xhat[ordinary], strict=True):
            assert xr[row.argmin()] == row.min()
            tolerance = 8 * F32_EPS * np.abs(row).max()
            assert abs(xr[row.argmax()] - row.max()) <= tolerance


def test_empty_block():
    x = jnp.zeros((0, 6), jnp.float32)
    for bits in (2, 8):
        for kw in ({}, {"interpret": True}):
            packed, scale, lo = quantize(x, bits, jax.random.key(0), **kw)
            assert packed.shape == (0, 6) and packed.dtype == jnp.uint8
            assert scale.shape == lo.shape == (0,) and scale.dtype == jnp.float32
            out = dequantize(packed, scale, lo, bits, 0, **kw)
            assert out.shape == (0, 6) and out.dtype == jnp.float32


def test_round_trip_under_jit():
    x = jnp.asarray(_gaussian_rows(11, 5, seed=6))

    @jax.jit
    def round_trip(x, key):
        return dequantize(*quantize(x, 4, key), 4, x.shape[0])

    out = round_trip(x, jax.random.key(1))
    spread = np.asarray(x.max(1) - x.min(1))[:, None]
    assert out.shape == x.shape
    assert np.all(np.abs(np.asarray(out) - np.asarray(x)) <= spread / 15 * (1 + 1e-5))


# --------------------------------------------------------------------------------------------
# Packing layout


def _numpy_pack(codes, bits):
    """The layout written out: byte [(n // k), d] holds code (n, d) at bit (n % k) * bits."""
    n, d = codes.shape
    k = 8 // bits
    out = np.zeros((-(-n // k), d), np.uint32)
    for i in range(n):
        out[i // k] |= (codes[i].astype(np.uint32) & (2**bits - 1)) << ((i % k) * bits)
    return out.astype(np.uint8)


def test_packing_test_vector():
    codes = jnp.asarray([[1], [2], [3], [0]], jnp.uint8)
    packed = pack_codes(codes, 2)
    assert packed.shape == (1, 1) and int(packed[0, 0]) == 0x39
    np.testing.assert_array_equal(unpack_codes(packed, 2, 4), codes)


@functools.partial(jax.jit, static_argnames=("bits",))
def _pack_round_trip(codes, bits):
    packed = pack_codes(codes, bits)
    return packed, unpack_codes(packed, bits, codes.shape[0])


@settings(max_examples=10, deadline=None, database=None)
@given(
    bits=st.sampled_from(BITS),
    d=st.sampled_from([1, 3, 602, 1500]),
    groups=st.integers(0, 3),
    extra=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_pack_unpack_round_trip(bits, d, groups, extra, seed):
    k = 8 // bits
    n = groups * k + (1 + (extra - 1) % (k - 1) if k > 1 else extra)  # N % k != 0 where k > 1
    codes = np.random.default_rng(seed).integers(0, 256, (n, d), dtype=np.uint8)
    packed, unpacked = _pack_round_trip(jnp.asarray(codes), bits)
    assert packed.shape == (packed_rows(n, bits), d)
    assert packed.size == -(-n // k) * d  # exactly ceil(N / k) * D bytes
    np.testing.assert_array_equal(packed, _numpy_pack(codes, bits))
    np.testing.assert_array_equal(unpacked, codes & (2**bits - 1))


# --------------------------------------------------------------------------------------------
# Pallas kernels (interpret mode) against the reference


KERNEL_CONFIGS = [(2, "float32"), (4, "float32"), (8, "bfloat16")]  # every packing and draw layout
KERNEL_COPIES = 256


@functools.cache
def _kernel_run(bits, param_dtype):
    """Reference and interpreted kernel on one block: the edge rows, then one Gaussian row
    repeated KERNEL_COPIES times (each copy draws its own noise, so the copies are independent
    draws of that row). 267 rows: 67 row tiles, 2 column tiles when dequantizing."""
    row = _gaussian_rows(1, 5, seed=14)
    x = jnp.asarray(np.concatenate([_edge_rows(), np.repeat(row, KERNEL_COPIES, axis=0)]))
    key = jax.random.key(21)
    ref = quantize(x, bits, key, param_dtype=param_dtype)
    ker = quantize(x, bits, key, param_dtype=param_dtype, interpret=True, block_sizes=SMALL_Q)
    out_ref = dequantize(*ref, bits, x.shape[0])
    out_ker = dequantize(*ker, bits, x.shape[0], interpret=True, block_sizes=SMALL_DQ)
    return np.asarray(x), ref, ker, np.asarray(out_ref), np.asarray(out_ker)


@pytest.mark.parametrize("bits, param_dtype", KERNEL_CONFIGS)
def test_pallas_matches_reference_bit_for_bit(bits, param_dtype):
    _, ref, ker, out_ref, out_ker = _kernel_run(bits, param_dtype)
    for name, a, b in zip(("packed", "scale", "lo"), ref, ker, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_array_equal(out_ref, out_ker)
    assert np.all(np.isfinite(out_ker))


@pytest.mark.parametrize("bits, param_dtype", KERNEL_CONFIGS)
def test_pallas_is_unbiased(bits, param_dtype):
    """The mean over the repeated row's copies, with the bound of the reference test
    (Hoeffding: 2·exp(-18) per element)."""
    x, _, (_, scale, _), _, out_ker = _kernel_run(bits, param_dtype)
    copies = slice(-KERNEL_COPIES, None)
    deviation = np.abs(out_ker[copies].mean(0) - x[-1]) * float(scale[-1])
    assert deviation.max() <= 3.0 / np.sqrt(KERNEL_COPIES), deviation.max()


def test_pallas_explicit_uniforms_test_vector_and_upper_limit():
    """Rows [c, 0, 3, ...] at 2 bits quantize to codes [c, 0, 3] for u = 0, so column 0 packs the
    test vector [1, 2, 3, 0] -> 0x39; u at its upper limit keeps codes in range."""
    x = _gaussian_rows(11, 5, seed=9)
    x[:4, :3] = [[1, 0, 3], [2, 0, 3], [3, 0, 3], [0, 0, 3]]
    x[:4, 3:] = 1.5
    x = jnp.asarray(x)
    for u_value in (0.0, U_MAX):
        u = jnp.full(x.shape, u_value, jnp.float32)
        packed, _, _ = quantize_reference(x, 2, uniforms=u)
        kernel, _, _ = quantize_pallas(x, 2, uniforms=u, interpret=True, block_sizes=SMALL_Q)
        np.testing.assert_array_equal(packed[0, :3], [0x39, 0x00, 0xFF])
        np.testing.assert_array_equal(kernel, packed)
        assert np.asarray(unpack_codes(kernel, 2, 11)).max() <= 3


def test_pallas_kernels_lower_for_gpu():
    """The Triton lowering (run here on CPU) accepts both kernels: power-of-two tiles, masked
    loads and stores, the inline-PTX division; also inside shard_map with the replication check
    on, as the quantized exchange calls them. Compiling the Triton IR needs a GPU.

    The Pallas path must lower to one Triton custom call per kernel, named for its width, on a
    grid that covers every row (and column block), with the packed message or the f32 block as
    its results; the reference path to none."""
    import re

    # jax 0.10.2, jax/_src/pallas/triton/pallas_call_registration.py: with jaxlib <= 0.10.2
    # a pallas_call lowers to `mlir.custom_call(call_target_name="__gpu$xla.gpu.triton", ...)`
    # whose backend_config holds the kernel's name and grid_x/y/z. Another target after an
    # upgrade fails here: the check must then be re-read.
    triton = "__gpu$xla.gpu.triton"

    def triton_calls(text):
        """``(name, grid, result types)`` of each Triton custom call, in program order."""
        calls = []
        for line in text.splitlines():
            m = re.search(r"stablehlo\.custom_call @([^\s(]+)\(", line)
            if not m or m.group(1) != triton:
                continue
            line = re.sub(r'ir = "[^"]*"', "ir = ...", line)  # the serialized Triton module
            name = re.search(r'name = "([^"]*)"', line).group(1)
            grid = tuple(int(re.search(rf"grid_{a} = (\d+) : i32", line).group(1)) for a in "xyz")
            results = re.findall(r"tensor<[^>]*>", line.rsplit(" -> ", 1)[1])
            calls.append((name, grid, results))
        return calls

    def lower(fn, *args):
        return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()

    n, d = 1000, 602
    x = jax.ShapeDtypeStruct((n, d), jnp.float32)
    for bits, param_dtype, ir_dtype in ((2, jnp.float32, "f32"), (8, jnp.bfloat16, "bf16")):
        q_rows, _ = QuantizeBlockSizes().resolve(n, d, bits)
        dq_rows, dq_cols = DequantizeBlockSizes().resolve(n, d, bits)
        texts = {}
        for backend in Backend:

            def q(x, key, bits=bits, param_dtype=param_dtype, backend=backend):
                return quantize(x, bits, key, backend=backend, param_dtype=param_dtype)

            def dq(packed, scale, lo, bits=bits, backend=backend):
                return dequantize(packed, scale, lo, bits, n, backend=backend)

            outs = jax.eval_shape(q, x, jax.random.key(0))
            texts[backend] = (lower(q, x, jax.random.key(0)), lower(dq, *outs))
        q_text, dq_text = texts[Backend.PALLAS]
        packed = f"tensor<{packed_rows(n, bits)}x{d}xui8>"
        params = f"tensor<{n}x{ir_dtype}>"
        assert triton_calls(q_text) == [
            (f"quantize_{bits}bit", (-(-n // q_rows), 1, 1), [packed, params, params])
        ]
        assert triton_calls(dq_text) == [
            (
                f"dequantize_{bits}bit",
                (-(-n // dq_rows), -(-d // dq_cols), 1),
                [f"tensor<{n}x{d}xf32>"],
            )
        ]
        assert not any(triton in t for t in texts[Backend.REFERENCE])

    mesh = make_mesh(2)
    axis = mesh.axis_names[0]
    texts = {}
    for backend in Backend:

        def body(x, key, backend=backend):
            # x: f32[1000, 602] (replicated); key: key<fry>[] (replicated, folded per device)
            key = jax.random.fold_in(key, jax.lax.axis_index(axis))
            packed, scale, lo = quantize(x, 4, key, backend=backend)
            return dequantize(packed, scale, lo, 4, n, backend=backend)[None]

        f = jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P(axis))
        texts[backend] = lower(f, x, jax.random.key(0))
    assert [name for name, _, _ in triton_calls(texts[Backend.PALLAS])] == [
        "quantize_4bit",
        "dequantize_4bit",
    ]
    assert triton not in texts[Backend.REFERENCE]


# --------------------------------------------------------------------------------------------
# Backend choice and validation


def test_backend_defaults_follow_the_platform():
    assert default_backend("cpu") is Backend.REFERENCE
    assert default_backend("gpu") is Backend.PALLAS
    assert default_backend("cuda") is Backend.PALLAS
    assert resolve_backend(None, interpret=True) is Backend.PALLAS
    assert resolve_backend(Backend.PALLAS, interpret=False) is Backend.PALLAS
    with pytest.raises(ValueError, match="interpret"):
        resolve_backend(Backend.REFERENCE, interpret=True)
    with pytest.raises(ValueError, match="Backend"):
        resolve_backend("pallas", interpret=False)


def test_validation_errors():
    x = jnp.ones((11, 5), jnp.float32)
    key = jax.random.key(0)
    packed, scale, lo = quantize(x, 2, key)
    cases = [
        (lambda: quantize(x, 3, key), "bits"),
        (lambda: quantize(x, True, key), "bits"),
        (lambda: quantize(x[0], 2, key), "rank 2"),
        (lambda: quantize(x.astype(jnp.int32), 2, key), "float32"),
        (lambda: quantize(jnp.ones((4, 0)), 2, key), "D >= 1"),
        (lambda: quantize(x, 2, jax.random.split(key, 2)), "single PRNG key"),
        (lambda: quantize(x, 2, key, param_dtype=jnp.float16), "param_dtype"),
        (lambda: quantize(x, 2, key, backend="pallas"), "Backend"),
        (lambda: quantize(x, 2, key, backend=Backend.REFERENCE, interpret=True), "interpret"),
        (lambda: quantize(x, 2, key, block_sizes=SMALL_Q), "block_sizes"),
        (
            lambda: quantize(x, 2, key, interpret=True, block_sizes=QuantizeBlockSizes(rows=2)),
            "power of two >= 4",
        ),
        (lambda: quantize_reference(x, 2, uniforms=jnp.ones((11, 4))), "shape of x"),
        (lambda: quantize_reference(x, 2), "exactly one"),
        (lambda: dequantize(packed, scale, lo, 2, 13), "pack into"),
        (lambda: dequantize(packed, scale[:3], lo, 2, 11), "scale"),
        (lambda: dequantize(packed.astype(jnp.int8), scale, lo, 2, 11), "uint8"),
        (lambda: dequantize(packed, scale, lo, 6, 11), "bits"),
        (lambda: dequantize(packed, scale, lo, 2, -1), "num_rows"),
        (lambda: pack_codes(jnp.ones((4, 3), jnp.int32), 2), "uint8"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
