"""Bitmap corpus decode: the Pallas kernel (interpret mode, small shapes) equals the jnp
reference, both invert the host encoder, and the kernel lowers for GPUs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxgraph.embed.compress import encode
from jaxgraph.embed.walks import PAD, Walks
from pallas_kernels.backend import Backend
from pallas_kernels.bitmap import (
    DecodeBlockSizes,
    decode,
    decode_pallas,
    decode_reference,
    residual_offsets,
)


def _corpus(seed, num_walks, length, vocab, *, min_len=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, length + 1, num_walks).astype(np.int32)
    # Skewed ids, so that hot ids cover many positions.
    nodes = np.minimum(rng.geometric(0.4, (num_walks, length)) - 1, vocab - 1).astype(np.int32)
    nodes[np.arange(length)[None, :] >= lengths[:, None]] = PAD
    return Walks(nodes, lengths)


def _args(c):
    return c.hot_ids, c.bitmaps, c.residual, c.lengths


CASES = [
    # (seed, walks, L, vocab, k, scope, block of walks)
    (0, 13, 21, 6, 2, "walk", 4),  # partial last block, L not a multiple of 8
    (1, 8, 16, 3, 5, "walk", 8),  # k above the distinct ids (empty slots)
    (2, 5, 1, 2, 1, "walk", 2),  # L = 1
    (3, 9, 12, 5, 0, "walk", 4),  # k = 0: everything residual
    (4, 11, 10, 4, 2, "corpus", 4),  # one hot set for all walks
    (5, 1, 7, 2, 1, "walk", None),  # one walk, default tile
]


@pytest.mark.parametrize("seed,num_walks,length,vocab,k,scope,block", CASES)
def test_interpreted_kernel_equals_reference_and_inverts_encoder(
    seed, num_walks, length, vocab, k, scope, block
):
    w = _corpus(seed, num_walks, length, vocab)
    c = encode(w, k, scope=scope)
    ref = decode_reference(*_args(c), walk_length=length)
    sizes = DecodeBlockSizes(walks=block) if block else None
    ker = decode_pallas(*_args(c), walk_length=length, interpret=True, block_sizes=sizes)
    np.testing.assert_array_equal(np.asarray(ref), w.nodes)
    np.testing.assert_array_equal(np.asarray(ker), np.asarray(ref))


def test_empty_and_length_one_corpora():
    for w in (_corpus(0, 0, 6, 3), Walks(np.array([[7]], np.int32), np.array([1], np.int32))):
        c = encode(w, 1)
        for backend, interpret in ((Backend.REFERENCE, False), (Backend.PALLAS, True)):
            out = decode(
                *_args(c), walk_length=w.nodes.shape[1], backend=backend, interpret=interpret
            )
            np.testing.assert_array_equal(np.asarray(out), w.nodes)


def test_residual_offsets():
    w = _corpus(7, 6, 9, 3, min_len=1)
    c = encode(w, 1)
    np.testing.assert_array_equal(
        np.asarray(residual_offsets(c.bitmaps, c.lengths)), c.residual_offsets()[:-1]
    )


def test_validation():
    c = encode(_corpus(0, 4, 9, 3), 1)
    hot, bits, res, lengths = _args(c)
    with pytest.raises(ValueError, match="bitmaps need"):
        decode(hot, bits, res, lengths, walk_length=17)
    with pytest.raises(ValueError, match="hot_ids must be a rank-2 int32"):
        decode(hot.astype(np.float32), bits, res, lengths, walk_length=9)
    with pytest.raises(ValueError, match="hot_ids must be"):
        decode(np.zeros((2, 1), np.int32), bits, res, lengths, walk_length=9)
    with pytest.raises(ValueError, match="lengths has"):
        decode(hot, bits, res, lengths[:3], walk_length=9)
    with pytest.raises(ValueError, match="walk_length must be >= 1"):
        decode(hot, bits[:, :, :0], res, lengths, walk_length=0)
    with pytest.raises(ValueError, match="block_sizes applies"):
        decode(*_args(c), walk_length=9, backend=Backend.REFERENCE, block_sizes=DecodeBlockSizes())
    with pytest.raises(ValueError, match="power of two"):
        DecodeBlockSizes(walks=3).resolve(10, 9)


def test_pallas_kernel_lowers_for_gpu():
    """The Triton lowering (run here on CPU) accepts the kernel: gathers from flat refs, the
    cumulative sum along a walk, masked stores. Compiling the Triton IR needs a GPU.

    The Pallas path must lower to exactly one Triton custom call, the ``bitmap_decode`` kernel
    on a grid that covers every walk with the configured warps and stages and the decoded
    ``int32[W, L]`` as its result; the reference path to none."""
    import re

    # jax 0.10.2, jax/_src/pallas/triton/pallas_call_registration.py: with jaxlib <= 0.10.2
    # a pallas_call lowers to `mlir.custom_call(call_target_name="__gpu$xla.gpu.triton", ...)`
    # whose backend_config holds the kernel's name, grid_x/y/z, num_warps and num_stages.
    # Another target after an upgrade fails here: the check must then be re-read.
    triton = "__gpu$xla.gpu.triton"

    def custom_calls(text):
        """``(target, backend_config attrs, result types)`` of each StableHLO custom call."""
        calls = []
        for line in text.splitlines():
            m = re.search(r"stablehlo\.custom_call @([^\s(]+)\(", line)
            if not m:
                continue
            line = re.sub(r'ir = "[^"]*"', "ir = ...", line)  # the serialized Triton module
            attrs = dict(re.findall(r"(\w+) = (\d+) : i32", line))
            attrs.update(re.findall(r'(\w+) = "([^"]*)"', line))
            results = re.findall(r"tensor<[^>]*>", line.rsplit(" -> ", 1)[1])
            calls.append((m.group(1), attrs, results))
        return calls

    w, length = 1000, 80
    blocks = DecodeBlockSizes()
    walks_per_program = blocks.resolve(w, length)
    for k, shared in ((2, False), (0, False), (3, True)):
        hot = jax.ShapeDtypeStruct((1 if shared else w, k), jnp.int32)
        bits = jax.ShapeDtypeStruct((w, k, 10), jnp.uint8)
        res = jax.ShapeDtypeStruct((50_000,), jnp.int32)
        lengths = jax.ShapeDtypeStruct((w,), jnp.int32)
        texts = {}
        for backend in Backend:

            def f(*a, backend=backend):
                return decode(*a, walk_length=length, backend=backend)

            lowered = jax.jit(f).trace(hot, bits, res, lengths).lower(lowering_platforms=("cuda",))
            texts[backend] = lowered.as_text()
        ((target, attrs, results),) = custom_calls(texts[Backend.PALLAS])
        assert target == triton and attrs["name"] == "bitmap_decode"
        grid = tuple(int(attrs[f"grid_{a}"]) for a in "xyz")
        assert grid == (-(-w // walks_per_program), 1, 1)
        assert (int(attrs["num_warps"]), int(attrs["num_stages"])) == (
            blocks.num_warps,
            blocks.num_stages,
        )
        assert results == [f"tensor<{w}x{length}xi32>"]
        assert triton not in texts[Backend.REFERENCE]
