"""Stochastically quantized ring halo exchange (the message compression of AdaQP).

Every halo row that crosses devices travels as 2-, 4- or 8-bit integer codes (or raw fp32, the
"32-bit" width that turns compression off), in the forward pass and, for the gradient rows sent
back, in the backward pass (Wan et al., MLSys 2023).

**Slots.** Round ``r`` of the ring carries, from each device ``d`` to ``(d + r) mod P``, the
``S_r`` rows listed in ``HaloPlan.send_idx[r-1][d]``; a *slot* is a position ``s`` in that list.
A :class:`BitAssignment` gives every real slot a forward and a backward bit-width, indexed by the
forward sender ``d`` and the slot: ``fwd[l][r-1][d, s]`` and ``bwd[l][r-1][d, s]``.

**Buckets.** Per layer, direction, round and bit-width the slots of that width form one bucket,
in ascending slot order (the wire order of the reference implementation: buckets by ascending
width, rows in send-list order). A bucket travels as its packed codes and its fp32
``(scale, lo)`` parameters; one ``ppermute`` per round carries all the round's buckets, and each
width is quantized once for all rounds (see :func:`_exchange_rounds`). ``ppermute`` needs the
same shape on every device, so each bucket is padded to its largest size over the senders of that
round. The bucket indices live in
``comm_state`` (leading axis ``P``), so their shapes are part of the step's signature: a new
assignment with new bucket sizes re-jits the step, and compiled steps are cached by shape.

**Backward.** A ``custom_vjp`` sends the halo-row gradients back along the reversed ring, each
bucket quantized with its backward width, and scatter-adds them into the sender's rows. The
first layer's input is data, never differentiated, so it has no backward exchange.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.ring import ring_perm
from jaxgraph.comm.strategy import CommStrategy
from jaxgraph.partition.halo import HaloPlan
from pallas_kernels.quantize import dequantize, quantize

WIDTHS = (2, 4, 8, 32)
QUANT_WIDTHS = (2, 4, 8)


@dataclasses.dataclass(frozen=True, eq=False)
class BitAssignment:
    """Bit-widths of every halo message, per layer, direction, round and slot.

    Attributes:
      fwd, bwd: per layer ``l``, per round ``r = 1..P-1``, ``int8[P, S_r]``: the width of the
        row that device ``d`` sends in slot ``s`` of round ``r`` (forward), and of the gradient
        row that travels back for that slot (backward). Values in ``{2, 4, 8, 32}``; slots that
        hold no row (``send_mask`` false) are ignored.
    """

    fwd: tuple[tuple[np.ndarray, ...], ...]
    bwd: tuple[tuple[np.ndarray, ...], ...]

    @classmethod
    def uniform(cls, plan: HaloPlan, num_layers: int, bits: int) -> BitAssignment:
        """Every message of every layer and direction at ``bits``."""
        _check_width(bits)
        rounds = tuple(np.full(m.shape, bits, np.int8) for m in plan.send_mask)
        return cls(fwd=(rounds,) * num_layers, bwd=(rounds,) * num_layers)

    @classmethod
    def random(
        cls,
        plan: HaloPlan,
        num_layers: int,
        rng: np.random.Generator,
        widths: Sequence[int] = QUANT_WIDTHS,
    ) -> BitAssignment:
        """Independent uniform draws from ``widths`` for every message (the random baseline)."""
        widths = np.asarray(widths, np.int8)

        def draw():
            return tuple(rng.choice(widths, size=m.shape).astype(np.int8) for m in plan.send_mask)

        return cls(
            fwd=tuple(draw() for _ in range(num_layers)),
            bwd=tuple(draw() for _ in range(num_layers)),
        )

    def digest(self) -> str:
        h = hashlib.sha1()
        for direction in (self.fwd, self.bwd):
            for layer in direction:
                for a in layer:
                    h.update(a.tobytes() + bytes(str(a.shape), "ascii"))
        return h.hexdigest()

    def width_counts(self, plan: HaloPlan) -> dict[str, dict[int, int]]:
        """Number of real messages per width, per ``"fwd{l}"`` / ``"bwd{l}"``."""
        out = {}
        for name, direction in (("fwd", self.fwd), ("bwd", self.bwd)):
            for layer, rounds in enumerate(direction):
                vals = [a[m] for a, m in zip(rounds, plan.send_mask, strict=True)]
                flat = np.concatenate(vals) if vals else np.zeros(0, np.int8)
                out[f"{name}{layer}"] = {b: int(np.sum(flat == b)) for b in WIDTHS}
        return out


def _check_width(bits: int) -> None:
    if bits not in WIDTHS:
        raise ValueError(f"bit-width must be one of {WIDTHS}, got {bits}")


# ---------------------------------------------------------------------- host: buckets


def _round_buckets(bits: np.ndarray, mask: np.ndarray, r: int, backward: bool) -> dict:
    """Bucket indices of one round, one direction.

    Returns ``{f"b{w}": {"send": int32[P, C], "recv": int32[P, C]}}`` for each width ``w``
    present: ``send[d]`` are the slots the device sends (pad: 0), ``recv[d]`` the slots the
    received rows fill (pad: ``S_r``, a dump slot past the end).
    """
    num_parts, num_slots = bits.shape
    out = {}
    for w in WIDTHS:
        sel = (bits == w) & mask  # [P, S_r], indexed by the forward sender
        if not sel.any():
            continue
        count = int(sel.sum(axis=1).max())
        slots = np.full((num_parts, count), -1, np.int32)
        for d in range(num_parts):
            s = np.flatnonzero(sel[d])
            slots[d, : s.size] = s
        # Forward: the sender d sends its own slots, the receiver d + r fills them.
        # Backward: the forward receiver d + r sends the gradient rows of those slots back.
        send, recv = (
            (np.roll(slots, r, axis=0), slots) if backward else (slots, np.roll(slots, r, axis=0))
        )
        out[f"b{w}"] = {
            "send": np.where(send < 0, 0, send).astype(np.int32),
            "recv": np.where(recv < 0, num_slots, recv).astype(np.int32),
        }
    return out


def bucket_state(plan: HaloPlan, assignment: BitAssignment) -> dict:
    """The device-side bucket indices of ``assignment`` (leaves ``int32[P, C]``)."""
    state = {}
    for name, direction in (("fwd", assignment.fwd), ("bwd", assignment.bwd)):
        state[name] = tuple(
            tuple(
                _round_buckets(np.asarray(bits), mask, r, backward=name == "bwd")
                for r, (bits, mask) in enumerate(zip(rounds, plan.send_mask, strict=True), 1)
            )
            for rounds in direction
        )
    return state


def wire_bytes(rows: int, dim: int, bits: int) -> int:
    """Bytes of one bucket of ``rows`` rows of width ``dim`` at ``bits`` on the wire."""
    if bits == 32:
        return rows * dim * 4
    per_byte = 8 // bits
    return -(-rows // per_byte) * dim + 2 * rows * 4  # packed codes + fp32 (scale, lo)


def byte_report(plan: HaloPlan, assignment: BitAssignment, layer_dims: Sequence[int]) -> dict:
    """Static bytes over the whole mesh per ``fwd{l}`` / ``bwd{l}``: ``moved`` (padded buckets,
    what the collectives carry) and ``useful`` (real rows only). Layer 0 has no backward."""
    state = bucket_state(plan, assignment)
    p = plan.num_parts
    out = {}
    for name in ("fwd", "bwd"):
        for layer, rounds in enumerate(state[name]):
            if name == "bwd" and layer == 0:
                continue
            moved = useful = 0
            for r, buckets in enumerate(rounds):
                for key, idx in buckets.items():
                    w = int(key[1:])
                    moved += p * wire_bytes(idx["send"].shape[1], layer_dims[layer], w)
                    real = (idx["recv"] < plan.round_rows[r]).sum(axis=1)
                    useful += sum(wire_bytes(int(c), layer_dims[layer], w) for c in real)
            out[f"{name}{layer}"] = {"moved": moved, "useful": useful}
    return out


# ---------------------------------------------------------------------- device: exchange


def _pad_rows(x: jax.Array, rows: int) -> jax.Array:
    return jnp.pad(x, ((0, rows - x.shape[0]), (0, 0))) if rows > x.shape[0] else x


def _exchange_rounds(rows_of_round, buckets, round_rows, key, axis_name, num_parts, reverse):
    """Per round: the dequantized rows delivered into that round's slots, ``[S_r, D]`` each.

    Each width is quantized once for all rounds: the buckets of that width, each padded with
    zero rows to a multiple of ``k = 8 / b`` rows so that no byte mixes two rounds, are
    concatenated and quantized with one key; round ``r``'s slice of the packed codes and its
    ``(scale, lo)`` go to ``d ± r`` (one ``ppermute`` per round carries all its widths); the
    receiver concatenates what it got in round order and dequantizes once per width. Pad rows
    are constant rows (code 0, no parameters on the wire), dropped on arrival. One quantize and
    one dequantize per width, instead of one per round and width, keeps the compiled step small.
    """
    widths = sorted({int(n[1:]) for rb in buckets for n in rb})
    sends = [dict() for _ in buckets]  # per round: width -> payload sent in that round
    layout = {}  # width -> per round: (rows C, packed rows) of that round's slice, or None
    for w in widths:
        k = 8 // w if w < 32 else 1
        pieces, spans = [], []
        for rows, rb in zip(rows_of_round, buckets, strict=True):
            name = f"b{w}"
            if name not in rb:
                spans.append(None)
                continue
            x = jnp.take(rows, rb[name]["send"], axis=0)  # [C, D]
            c = x.shape[0]
            pieces.append(_pad_rows(x, -(-c // k) * k))
            spans.append((c, -(-c // k)))
        layout[w] = spans
        x = jnp.concatenate(pieces, axis=0)
        if w == 32:
            packed = x
        else:
            packed, scale, lo = quantize(x, w, jax.random.fold_in(key, w))
        prow = row = 0
        for i, span in enumerate(spans):
            if span is None:
                continue
            c, pr = span
            if w == 32:
                sends[i][w] = (packed[row : row + c],)
            else:
                sends[i][w] = (packed[prow : prow + pr], scale[row : row + c], lo[row : row + c])
            prow += pr
            row += pr * k
    received = [
        jax.lax.ppermute(payload, axis_name, ring_perm(num_parts, -r if reverse else r))
        if payload
        else {}
        for r, payload in enumerate(sends, 1)
    ]
    arrived = {}  # width -> per round: [C, D] dequantized rows
    for w in widths:
        got = [received[i][w] for i, span in enumerate(layout[w]) if span is not None]
        if w == 32:
            rows = [g[0] for g in got]
        else:
            k = 8 // w
            counts = [span[0] for span in layout[w] if span is not None]
            padded = [-(-c // k) * k for c in counts]
            packed = jnp.concatenate([g[0] for g in got], axis=0)
            scale, lo = (
                jnp.concatenate(
                    [jnp.pad(g[i], (0, p - c)) for g, p, c in zip(got, padded, counts, strict=True)]
                )
                for i in (1, 2)
            )
            x = dequantize(packed, scale, lo, w, sum(padded))
            offsets = np.cumsum([0, *padded[:-1]])
            rows = [x[o : o + c] for o, c in zip(offsets, counts, strict=True)]
        it = iter(rows)
        arrived[w] = [next(it) if span is not None else None for span in layout[w]]
    out = []
    for i, (rb, s_r) in enumerate(zip(buckets, round_rows, strict=True)):
        dim = rows_of_round[i].shape[-1]
        block = jnp.zeros((s_r + 1, dim), rows_of_round[i].dtype)  # slot S_r: dump for padding
        for w in widths:
            if arrived[w][i] is not None:
                block = block.at[rb[f"b{w}"]["recv"]].set(arrived[w][i])
        out.append(block[:s_r])
    return out


def _like_varying(x: jax.Array, like: jax.Array) -> jax.Array:
    """``x`` cast to vary over the mesh axes ``like`` varies over (a no-op outside shard_map)."""
    from jaxgraph.models.propagate import _to_varying, _varying_axes

    return _to_varying(x, _varying_axes(like))


def row_range_variance(rows: jax.Array) -> jax.Array:
    """``(D / 6) * (max_d x - min_d x)^2`` per row: the expected squared error of stochastic
    rounding at ``b`` bits times ``(2^b - 1)^2`` (a fractional part uniform on [0, 1) has
    ``E[p (1 - p)] = 1/6``), the quantity AdaQP traces. ``[N, D] -> f32[N]``."""
    if rows.shape[-1] == 0:
        return jnp.zeros(rows.shape[:-1], jnp.float32)
    rows = jax.lax.stop_gradient(rows).astype(jnp.float32)
    spread = jnp.max(rows, axis=-1) - jnp.min(rows, axis=-1)
    return (rows.shape[-1] / 6.0) * spread * spread


def quantized_ring_exchange(
    h_local, send_idx, fwd_buckets, bwd_buckets, key, *, axis_name, num_parts, probe=None
):
    """Ring halo exchange with quantized messages in both passes.

    Args:
      h_local: ``f32[Nl, D]`` this device's rows.
      send_idx: per round, ``int32[S_r]`` local rows sent in that round.
      fwd_buckets, bwd_buckets: this device's bucket indices per round (from
        :func:`bucket_state`, leading axis removed).
      key: PRNG key of this device, step and layer; directions, rounds and widths fold it.
      probe: optional per round ``f32[S_r]`` (its value is ignored). Its cotangent is the
        :func:`row_range_variance` of the gradient rows this device sends back in the
        backward pass, slot by slot (indexed as the rows it received in that round): the
        side channel through which the backward messages are traced.

    Returns:
      ``f32[H, D]``: the dequantized halo rows in the plan's halo layout.
    """
    round_rows = tuple(int(i.shape[0]) for i in send_idx)
    shape, dtype = h_local.shape, h_local.dtype

    def forward(h_local, aux):
        send_idx, fwd_buckets, _, key_data = aux
        fkey = jax.random.fold_in(jax.random.wrap_key_data(key_data), 0)
        rows = [jnp.take(h_local, idx, axis=0) for idx in send_idx]
        blocks = _exchange_rounds(
            rows, fwd_buckets, round_rows, fkey, axis_name, num_parts, reverse=False
        )
        return jnp.concatenate(blocks, axis=0) if blocks else h_local[:0]

    # Index arrays and the key are explicit (non-differentiated) arguments rather than closed
    # over, so the exchange can be differentiated from outside an enclosing jit/shard_map.
    @jax.custom_vjp
    def exchange(h_local, probe, aux):
        return forward(h_local, aux)

    def exchange_fwd(h_local, probe, aux):
        return forward(h_local, aux), aux

    def exchange_bwd(aux, g_halo):
        send_idx, _, bwd_buckets, key_data = aux
        bkey = jax.random.fold_in(jax.random.wrap_key_data(key_data), 1)
        offsets = np.cumsum((0,) + round_rows)
        g_rows = [g_halo[offsets[i] : offsets[i + 1]] for i in range(len(round_rows))]
        back = _exchange_rounds(
            g_rows, bwd_buckets, round_rows, bkey, axis_name, num_parts, reverse=True
        )
        # Typed like the primal input: varying over the mesh axis even with no rounds (P = 1).
        g = _like_varying(jnp.zeros(shape, dtype), g_halo)
        for idx, rows in zip(send_idx, back, strict=True):
            g = g.at[idx].add(rows)  # pad slots carry zero rows
        probe_ct = None if probe is None else tuple(row_range_variance(r) for r in g_rows)
        return g, probe_ct, None

    exchange.defvjp(exchange_fwd, exchange_bwd)
    aux = (tuple(send_idx), fwd_buckets, bwd_buckets, jax.random.key_data(key))
    return exchange(h_local, None if probe is None else tuple(probe), aux)


class Quantized(CommStrategy):
    """Quantized ring exchange under a fixed or periodically re-drawn bit assignment.

    Args:
      bits: ``2``, ``4``, ``8`` (every message at that width), ``32`` (no compression: the
        same code path delivering exact rows) or ``"random"`` (uniform over {2, 4, 8} per
        message, re-drawn every ``period`` epochs).
      period: epochs per assignment period (random mode).
      seed: seed of the random draws.
    """

    def __init__(self, bits: int | str = 8, *, period: int = 40, seed: int = 0):
        if bits != "random":
            _check_width(bits)
        if period < 1:
            raise ValueError(f"assignment period must be at least 1 epoch, got {period}")
        self.bits, self.period, self.seed = bits, int(period), int(seed)
        self.name = f"quant-{bits}"

    def _key(self):
        return (type(self), self.bits, self.period, self.seed)

    def __eq__(self, other):
        return isinstance(other, Quantized) and other._key() == self._key()

    def __hash__(self):
        return hash(self._key())

    def assignment(self, plan: HaloPlan, num_layers: int, *, period_index: int = 0):
        """The assignment in force during assignment period ``period_index`` (0-based)."""
        if self.bits == "random":
            rng = np.random.default_rng([self.seed, period_index])
            return BitAssignment.random(plan, num_layers, rng)
        return BitAssignment.uniform(plan, num_layers, self.bits)

    def init_state(self, plan, layer_dims, *, epoch: int = 0):
        # After `epoch` completed epochs the state holds the assignment that epoch used.
        period_index = max(epoch - 1, 0) // self.period
        assignment = self.assignment(plan, len(layer_dims), period_index=period_index)
        return bucket_state(plan, assignment)

    def update_state(self, comm_state, *, epoch, plan, layer_dims):
        if self.bits != "random" or epoch == 1 or (epoch - 1) % self.period:
            return None
        return self.init_state(plan, layer_dims, epoch=epoch)

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        if key is None:
            raise ValueError("the quantized exchange needs a PRNG key")
        fwd = comm_state["fwd"][layer]
        bwd = comm_state["bwd"][layer]
        h_remote = quantized_ring_exchange(
            h_local,
            shard.send_idx,
            fwd,
            bwd,
            key,
            axis_name=axis_name,
            num_parts=num_parts,
            probe=probe,
        )
        dim = h_local.shape[-1]
        nbytes = sum(
            wire_bytes(b["send"].shape[0], dim, int(k[1:])) for rb in fwd for k, b in rb.items()
        )
        if layer > 0:
            nbytes += sum(
                wire_bytes(b["send"].shape[0], dim, int(k[1:])) for rb in bwd for k, b in rb.items()
            )
        return h_remote, comm_state, jnp.float32(nbytes)
