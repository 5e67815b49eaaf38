"""Skip-gram pairs built on the device from walks, equal to the host enumeration.

Host-built pairs (:func:`jaxgraph.embed.corpus.skipgram_pairs`) move ``2 x 4`` bytes per pair
to the devices, about ``2 w`` pairs per kept token; building them on the device moves only the
walks (4 bytes per token, or the FaBC-compressed corpus), which is what makes compression pay.

The program draws from the same SplitMix64 streams as the host kernel
(:mod:`jaxgraph.embed._hostrng`): draw ``k`` of a stream with initial state ``s0`` is
``mix(s0 + (k + 1) gamma)``, so every token's draws are computed in parallel, with the 64-bit
arithmetic on ``(hi, lo)`` pairs of ``uint32``. The sub-sampling test ``u < p(v)``, ``u = (z >>
11) 2^-53``, is the exact integer test ``z >> 11 < ceil(p(v) 2^53)``, so the pairs, their order
and their count equal the host's bit for bit. The candidates form a dense ``[W, L, 2w]`` array
(centre, context offset ``-w..-1, 1..w``) compacted stably into the host's order.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
MAX_WINDOW = 4096  # next_below's limb arithmetic needs window**2 < 2**32


class U64(NamedTuple):
    """A 64-bit unsigned integer array as two ``uint32`` arrays (high and low words)."""

    hi: jax.Array
    lo: jax.Array


def u64_const(value: int) -> U64:
    value = int(value) % (1 << 64)
    return U64(jnp.uint32(value >> 32), jnp.uint32(value & 0xFFFFFFFF))


def split_u64(values) -> tuple[np.ndarray, np.ndarray]:
    """Host ``uint64`` values -> ``(hi, lo)`` ``uint32`` arrays."""
    v = np.asarray(values, np.uint64)
    return (v >> np.uint64(32)).astype(np.uint32), (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _add(a: U64, b: U64) -> U64:
    lo = a.lo + b.lo
    carry = (lo < a.lo).astype(jnp.uint32)
    return U64(a.hi + b.hi + carry, lo)


def _xor(a: U64, b: U64) -> U64:
    return U64(a.hi ^ b.hi, a.lo ^ b.lo)


def _shr(a: U64, n: int) -> U64:
    """``a >> n`` for ``0 < n < 32``."""
    return U64(a.hi >> n, (a.lo >> n) | (a.hi << (32 - n)))


def _mulhi32(a: jax.Array, b: jax.Array) -> jax.Array:
    """High word of the 64-bit product of two ``uint32`` arrays (16-bit halves)."""
    mask = jnp.uint32(0xFFFF)
    a0, a1 = a & mask, a >> 16
    b0, b1 = b & mask, b >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 16) + (p01 & mask) + (p10 & mask)
    return p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)


def _mul(a: U64, b: U64) -> U64:
    """``a * b mod 2^64``."""
    hi = _mulhi32(a.lo, b.lo) + a.hi * b.lo + a.lo * b.hi
    return U64(hi, a.lo * b.lo)


def mix(z: U64) -> U64:
    """SplitMix64's finaliser (``_hostrng._mix``)."""
    z = _mul(_xor(z, _shr(z, 30)), u64_const(_M1))
    z = _mul(_xor(z, _shr(z, 27)), u64_const(_M2))
    return _xor(z, _shr(z, 31))


def stream(key: U64, stream_id: jax.Array) -> U64:
    """Initial state of stream ``stream_id`` (``uint32``) under ``key``
    (``_hostrng.stream``)."""
    sid = U64(jnp.zeros_like(stream_id, jnp.uint32), stream_id.astype(jnp.uint32))
    return mix(_xor(key, mix(_add(sid, u64_const(_GAMMA)))))


def draw(state0: U64, k: jax.Array) -> U64:
    """Draw number ``k`` (0-based, ``uint32``) of the stream that starts at ``state0``: the
    value ``_hostrng.next_u64`` returns on its ``k + 1``-th call."""
    step = U64(jnp.zeros_like(k, jnp.uint32), k.astype(jnp.uint32) + jnp.uint32(1))
    return mix(_add(state0, _mul(step, u64_const(_GAMMA))))


def _less(a: U64, b: U64) -> jax.Array:
    return (a.hi < b.hi) | ((a.hi == b.hi) & (a.lo < b.lo))


def _below(z: U64, n: int) -> jax.Array:
    """``z mod n`` as ``int32`` for a static ``1 <= n <= MAX_WINDOW``."""
    nn = jnp.uint32(n)
    r = (z.hi % nn) * jnp.uint32((1 << 32) % n) + z.lo % nn
    return (r % nn).astype(jnp.int32)


def keep_thresholds(keep_prob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host: the integer form ``ceil(p 2^53)`` of the keep probabilities, as ``(hi, lo)``
    ``uint32[N]``; ``u < p`` holds exactly when ``z >> 11 < ceil(p 2^53)``."""
    p = np.clip(np.asarray(keep_prob, np.float64), 0.0, 1.0)
    return split_u64(np.ceil(p * 2.0**53).astype(np.uint64))


def key_words(key: np.uint64) -> np.ndarray:
    """Host: a 64-bit round key as ``uint32[2]`` (high, low)."""
    hi, lo = split_u64(np.uint64(key))
    return np.array([hi, lo], np.uint32)


def pair_capacity(num_walks: int, walk_length: int, window: int) -> int:
    """The most pairs ``num_walks`` walks of ``walk_length`` can give: ``W L 2w``."""
    return num_walks * walk_length * 2 * window


@functools.partial(jax.jit, static_argnames=("window", "capacity"))
def skipgram_pairs_device(
    nodes: jax.Array,
    lengths: jax.Array,
    walk_ids: jax.Array,
    thresh_hi: jax.Array,
    thresh_lo: jax.Array,
    key: jax.Array,
    *,
    window: int,
    capacity: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The skip-gram pairs of the walks ``nodes[i, :lengths[i]]`` (``int32[W, L]``; a padding
    row has length 0) on the device, in the host order: ``(inputs int32[capacity], outputs
    int32[capacity], count int32[])``, slots from ``count`` on holding 0.

    Args:
      walk_ids: ``uint32[W]`` stream id of each walk (its index in the round).
      thresh_hi, thresh_lo, key: from :func:`keep_thresholds` and :func:`key_words`.
      window: maximum window ``w``, ``1 <= w <= MAX_WINDOW``.
      capacity: length of the output buffers (default :func:`pair_capacity`, which always
        suffices); pairs beyond it are dropped, and ``count`` still counts them.
    """
    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window must be in [1, {MAX_WINDOW}], got {window}")
    w_count, length = nodes.shape
    cap = pair_capacity(w_count, length, window) if capacity is None else capacity
    num_nodes = thresh_hi.shape[0]
    pos = jnp.arange(length, dtype=jnp.int32)  # [L]
    in_walk = pos[None, :] < lengths[:, None]  # bool[W, L]
    v = jnp.clip(nodes, 0, num_nodes - 1)
    s0 = stream(U64(key[0], key[1]), walk_ids)  # U64 of [W]
    col = lambda a: a[:, None]
    s0_col = U64(col(s0.hi), col(s0.lo))
    # Draws 0..length-1: the sub-sampling uniforms, one per token.
    z = draw(s0_col, jnp.broadcast_to(pos[None, :], nodes.shape))
    keep = in_walk & _less(_shr(z, 11), U64(thresh_hi[v], thresh_lo[v]))
    rank = jnp.cumsum(keep, axis=1, dtype=jnp.int32) - 1  # position among the kept tokens
    kept_len = jnp.sum(keep, axis=1, dtype=jnp.int32)  # [W]
    rows = jnp.arange(w_count, dtype=jnp.int32)[:, None]
    kept = jnp.zeros_like(nodes).at[rows, jnp.where(keep, rank, length)].set(nodes, mode="drop")
    # Draws length..length+k-1: one window shrink per kept centre.
    shrink = _below(draw(s0_col, lengths[:, None] + pos[None, :]), window)  # [W, L]
    reach = window - shrink
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)]).astype(np.int32)
    ctx = pos[:, None] + offsets[None, :]  # [L, 2w]
    valid = (
        (pos[None, :, None] < kept_len[:, None, None])
        & (np.abs(offsets)[None, None, :] <= reach[:, :, None])
        & (ctx[None] >= 0)
        & (ctx[None] < kept_len[:, None, None])
    )  # bool[W, L, 2w]
    ins = kept[:, jnp.clip(ctx, 0, length - 1)]  # int32[W, L, 2w]
    outs = jnp.broadcast_to(kept[:, :, None], ins.shape)
    flat = valid.reshape(-1)
    slot = jnp.where(flat, jnp.cumsum(flat, dtype=jnp.int32) - 1, cap)
    count = jnp.sum(flat, dtype=jnp.int32)
    inputs = jnp.zeros(cap, jnp.int32).at[slot].set(ins.reshape(-1), mode="drop")
    outputs = jnp.zeros(cap, jnp.int32).at[slot].set(outs.reshape(-1), mode="drop")
    return inputs, outputs, count


class DeviceWalks(NamedTuple):
    """A walk corpus whose rows are already on a device (decoded there from the compressed
    corpus); the lengths stay on the host, which encoded them.

    Attributes:
      nodes: ``int32[W', L]`` on one device, ``W' >= W``; rows from ``W`` on are padding.
      lengths: host ``int32[W]``.
    """

    nodes: jax.Array
    lengths: np.ndarray

    @property
    def num_walks(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(np.asarray(self.lengths, np.int64).sum())

    def counts(self, num_nodes: int) -> np.ndarray:
        """Host ``int64[N]`` occurrences of every node in the walks, counted on the device (the
        lengths padded to the rows' size class, so that it compiles once per class)."""
        lengths = np.zeros(self.nodes.shape[0], np.int32)
        lengths[: self.num_walks] = self.lengths
        on_device = jax.device_put(lengths, self.nodes.sharding)
        counts = device_counts(self.nodes, on_device, num_nodes=num_nodes)
        return np.asarray(counts).astype(np.int64)


@functools.partial(jax.jit, static_argnames=("num_nodes",))
def device_counts(nodes: jax.Array, lengths: jax.Array, *, num_nodes: int) -> jax.Array:
    """``int32[N]`` occurrences of every node in ``nodes[i, :lengths[i]]`` (rows past
    ``lengths.shape[0]`` are ignored)."""
    w = lengths.shape[0]
    rows = nodes[:w]
    mask = jnp.arange(rows.shape[1])[None, :] < lengths[:, None]
    ids = jnp.where(mask, rows, num_nodes)
    return jnp.zeros(num_nodes, jnp.int32).at[ids.reshape(-1)].add(1, mode="drop")


@jax.jit
def gather_rows(nodes: jax.Array, index: jax.Array) -> jax.Array:
    """``nodes[index]`` on the device that holds ``nodes`` (``index: int32[P, W_p]``)."""
    return nodes[index]
