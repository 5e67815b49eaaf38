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
``(scale, lo)`` parameters.

**Wire.** Each device sends one byte buffer per round: its buckets' real bytes back to back, by
ascending width. ``ppermute`` moves the same shape on every device, so the buffer is padded to
the largest sender's total in that round -- not each bucket to its largest sender, which under a
mixed assignment (one device's rows mostly at 8 bits, another's mostly at 2) would pay for the
widest mix of every width at once. The offsets differ per device and travel as data
(each device's bucket sizes), so the program is the same for every device.

**Layout.** Per layer and direction an :class:`ExchangeLayout` in ``comm_state`` (leading axis
``P``) holds, per width, the rows every device gathers for all rounds at once, where the
received rows go, and the real bucket sizes of what each device sends and receives. Each width
is gathered and quantized once, each round's buckets travel as one byte buffer (one
``ppermute`` per round), and one gather places the received rows in the halo (see
:func:`_exchange`). In an *exact* layout the padded bucket sizes and the buffer lengths are
static fields, so a new assignment with new sizes re-jits the step (compiled steps are cached
by structure and shape). A *chunked* layout (:func:`bucket_state` with ``chunks``) gives every
width room for every slot and sends each round's buffer as a few gated chunks, as many as the
round's largest sender fills: its static fields depend on the plan only, so one compiled step
serves every assignment.

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
from jaxgraph.comm.strategy import CommStrategy, Controller
from jaxgraph.mesh import to_varying, varying_axes
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


def check_widths(widths: Sequence[int]) -> tuple[int, ...]:
    """A set of candidate widths, validated and sorted: a non-empty subset of
    :data:`QUANT_WIDTHS` without repeats."""
    out = tuple(sorted(int(w) for w in widths))
    if not out or len(set(out)) != len(out) or not set(out) <= set(QUANT_WIDTHS):
        raise ValueError(
            f"candidate bit-widths must be distinct values from {QUANT_WIDTHS} (at least one), "
            f"got {tuple(widths)}"
        )
    return out


# ---------------------------------------------------------------------- host: buckets


def _round_buckets(
    bits: np.ndarray, mask: np.ndarray, r: int, backward: bool, capacity=None
) -> dict:
    """Bucket slots of one round, one direction (host side).

    Returns ``{w: {"send": int32[P, C], "recv": int32[P, C]}}`` for each width ``w`` present,
    in ascending order: ``send[d]`` are the slots device ``d`` sends, ``recv[d]`` the slots the
    rows it receives fill, both ``-1`` past the device's own count (``C`` is the largest count
    over the senders: ``ppermute`` moves the same shape everywhere). With ``capacity`` (a set
    of widths) every one of those widths has a bucket, of ``C = S_r`` (room for every slot),
    whatever the assignment: the shapes then depend on the plan only.
    """
    num_parts = bits.shape[0]
    if capacity is not None:
        used = {int(w) for w in np.unique(bits[mask])}
        if not used <= set(capacity):
            raise ValueError(
                f"round {r}: bit-widths {sorted(used - set(capacity))} are outside the "
                f"layout's widths {tuple(capacity)}"
            )
    out = {}
    for w in WIDTHS if capacity is None else sorted(capacity):
        sel = (bits == w) & mask  # [P, S_r], indexed by the forward sender
        if capacity is None and not sel.any():
            continue
        count = mask.shape[1] if capacity is not None else int(sel.sum(axis=1).max())
        slots = np.full((num_parts, count), -1, np.int32)
        for d in range(num_parts):
            s = np.flatnonzero(sel[d])
            slots[d, : s.size] = s
        # Forward: the sender d sends its own slots, the receiver d + r fills them.
        # Backward: the forward receiver d + r sends the gradient rows of those slots back.
        send, recv = (
            (np.roll(slots, r, axis=0), slots) if backward else (slots, np.roll(slots, r, axis=0))
        )
        out[w] = {"send": send, "recv": recv}
    return out


def round_buckets(plan: HaloPlan, assignment: BitAssignment, capacity=None) -> dict:
    """Host-side buckets: ``{"fwd"|"bwd": per layer, per round, {width: {"send", "recv"}}}``
    (see :func:`_round_buckets`); the wire order within a round is ascending width."""
    out = {}
    for name, direction in (("fwd", assignment.fwd), ("bwd", assignment.bwd)):
        out[name] = tuple(
            tuple(
                _round_buckets(np.asarray(bits), mask, r, name == "bwd", capacity)
                for r, (bits, mask) in enumerate(zip(rounds, plan.send_mask, strict=True), 1)
            )
            for rounds in direction
        )
    return out


_PAD = np.iinfo(np.int32).max  # an index past every array: gathers fill 0, scatters drop


@dataclasses.dataclass(frozen=True)
class ExchangeLayout:
    """Device-side index arrays of one quantized exchange (one layer, one direction).

    The rows of each width, from all rounds, are gathered into one block and quantized once;
    within the block, round ``r``'s bucket of ``C`` rows is padded to a multiple of
    ``k = 8 / b`` so that no byte mixes two rounds. The receiver dequantizes each width's block
    and concatenates the widths in ascending order: ``M`` rows in all.

    Attributes:
      rows: ``{"b{w}": int32[P, N_w]}``: the rows each device gathers for width ``w`` (forward:
        local rows; backward: halo rows of the gradient), round by round; padding is ``_PAD``.
      place: forward ``int32[P, H]``: for each halo slot, its row among the ``M`` received
        rows (``_PAD`` for slots that hold no row). Backward ``int32[P, M]``: for each received
        gradient row, the local row it adds into (``_PAD``: padding, dropped).
      sent, got: ``int32[P, Q]``: per bucket ``q`` (rounds in order, widths ascending within a
        round, as in ``counts``), the real rows each device sends in it and receives in it;
        they place the buckets in each device's buffer.
      counts: static: per round, ``((w, C), ...)``, the widths present and their bucket sizes
        (``C``: the largest over the senders).
      round_rows: static: ``(S_1, ..., S_{P-1})``.
      round_bytes: static: per round, the distinct ``(a, b)`` such that a sender's bytes are
        ``a * D + b`` for rows of width ``D`` (the layout serves any ``D``); the round's buffer
        is the largest of them (:func:`round_buffer_bytes`). In a chunked layout, one pair: the
        capacity of the round (every slot at the widest width).
      chunks: static: ``0`` for an exact layout, whose bucket sizes and buffer lengths are
        those of one assignment. ``J >= 1`` for a *chunked* layout: every width of the layout
        has a bucket with room for every slot of the round (``C = S_r``), the round's buffer
        is its capacity, and only its first ``n * u`` bytes travel (``u`` = capacity /
        ``2^J``, ``n`` the units of the round's largest sender, agreed on by a ``pmax``), as
        ``ppermute`` s of ``2^j u`` bytes for the set bits ``j`` of ``n``, each under a
        ``lax.cond``. Its static fields depend on the plan only, so one compiled step serves
        every assignment (see :func:`bucket_state`).

    ``counts``, ``round_bytes`` and ``chunks`` are part of the pytree structure: under exact
    layouts a new assignment with new sizes compiles a new step (compiled steps are cached by
    structure and shapes); chunked layouts of one plan share one structure.
    """

    rows: dict
    place: np.ndarray
    sent: np.ndarray
    got: np.ndarray
    counts: tuple
    round_rows: tuple
    round_bytes: tuple
    chunks: int = 0

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(sorted({w for rc in self.counts for w, _ in rc}))


jax.tree_util.register_dataclass(
    ExchangeLayout,
    data_fields=["rows", "place", "sent", "got"],
    meta_fields=["counts", "round_rows", "round_bytes", "chunks"],
)


def _codes_per_row_block(w: int) -> int:
    return 8 // w if w < 32 else 1


def _block_offsets(counts: tuple, w: int) -> list[int | None]:
    """Start of each round's bucket of width ``w`` in that width's block (None: absent)."""
    k = _codes_per_row_block(w)
    out, pos = [], 0
    for rc in counts:
        c = dict(rc).get(w)
        out.append(None if c is None else pos)
        pos += 0 if c is None else -(-c // k) * k
    return out + [pos]


def _layout(plan: HaloPlan, buckets: tuple, backward: bool, chunks: int = 0) -> ExchangeLayout:
    """The :class:`ExchangeLayout` of one layer's buckets (``round_buckets(...)[dir][layer]``;
    with ``chunks``, buckets built with a ``capacity``)."""
    num_parts = plan.num_parts
    counts = tuple(tuple((w, b["send"].shape[1]) for w, b in rb.items()) for rb in buckets)
    halo_off = plan.halo_offsets()
    widths = sorted({w for rc in counts for w, _ in rc})
    offsets = {w: _block_offsets(counts, w) for w in widths}
    base, total = {}, 0  # start of each width's rows among the M received rows
    for w in widths:
        base[w], total = total, total + offsets[w][-1]
    rows = {w: np.full((num_parts, offsets[w][-1]), _PAD, np.int32) for w in widths}
    place = np.full((num_parts, total if backward else plan.num_halo_rows), _PAD, np.int32)
    sent, got, round_bytes = [], [], []
    for r, rb in enumerate(buckets):
        send_idx = plan.send_idx[r]  # [P, S_r] local rows of the forward sender
        for w, b in rb.items():
            # Real slots come first in a bucket (see `_round_buckets`).
            sent.append((b["send"] >= 0).sum(axis=1))
            got.append((b["recv"] >= 0).sum(axis=1))
            start = offsets[w][r]
            for d in range(num_parts):
                send, recv = b["send"][d], b["recv"][d]
                real = np.flatnonzero(send >= 0)
                if backward:  # d sends the gradient rows of halo slots it received in round r
                    rows[w][d, start + real] = halo_off[r] + send[real]
                else:
                    rows[w][d, start + real] = send_idx[d, send[real]]
                real = np.flatnonzero(recv >= 0)
                pos = base[w] + start + real
                if backward:  # the gradient rows of d's own forward slots come back
                    place[d, pos] = send_idx[d, recv[real]]
                else:
                    place[d, halo_off[r] + recv[real]] = pos
        if chunks:
            round_bytes.append((_capacity(rb, plan.round_rows[r]),))
        else:
            round_bytes.append(_bytes_by_dim(rb, sent[len(sent) - len(rb) :]))
    shape = (num_parts, len(sent))
    return ExchangeLayout(
        rows={f"b{w}": a for w, a in rows.items()},
        place=place,
        sent=np.stack(sent, axis=1).astype(np.int32) if sent else np.zeros(shape, np.int32),
        got=np.stack(got, axis=1).astype(np.int32) if got else np.zeros(shape, np.int32),
        counts=counts,
        round_rows=tuple(plan.round_rows),
        round_bytes=tuple(round_bytes),
        chunks=chunks,
    )


def _capacity(rb: dict, rows: int) -> tuple[int, int]:
    """``(a, b)``: a sender's bytes in a round of ``rows`` slots are at most ``a * D + b``
    whatever widths (keys of ``rb``) its rows have (a bucket of ``c`` rows packs into
    ``ceil(c / k) <= c`` code rows)."""
    per_row = [(4, 0) if w == 32 else (1, 8) for w in rb]
    return (
        rows * max((a for a, _ in per_row), default=0),
        rows * max((b for _, b in per_row), default=0),
    )


def _bytes_by_dim(rb: dict, sent: list) -> tuple[tuple[int, int], ...]:
    """The distinct ``(a, b)`` over the senders of one round, where a sender's bytes are
    ``a * D + b`` (packed code rows times the feature width, plus 8 parameter bytes per
    quantized row): which sender sends most can depend on ``D``."""
    per_dev = np.zeros((len(sent[0]) if sent else 0, 2), np.int64)
    for w, counts in zip(rb, sent, strict=True):
        per_dev += np.stack(_piece_bytes(counts, 1, w), axis=-1)  # codes scale with D
    return tuple(sorted({(int(a), int(b)) for a, b in per_dev}))


def bucket_state(
    plan: HaloPlan, assignment: BitAssignment, *, chunks: int = 0, widths=QUANT_WIDTHS
) -> dict:
    """The device-side layout of ``assignment``: ``{"fwd"|"bwd": per layer ExchangeLayout}``
    (leaves ``int32[P, ...]``).

    ``chunks = 0`` sizes every bucket and round buffer for this assignment (a new assignment
    compiles a new step). ``chunks = J >= 1`` gives a chunked layout (see
    :class:`ExchangeLayout`) with a bucket for each of ``widths`` in every round: its
    structure and shapes are the same for every assignment over ``widths``, at the price of
    quantizing every slot at each width and of padding each round's transfer to a multiple
    of ``1 / 2^J`` of its capacity."""
    check_chunks(chunks)
    capacity = tuple(sorted(widths)) if chunks else None
    buckets = round_buckets(plan, assignment, capacity)
    return {
        name: tuple(_layout(plan, layer, name == "bwd", chunks) for layer in buckets[name])
        for name in ("fwd", "bwd")
    }


MAX_CHUNKS = 12


def default_chunks(backend: str | None = None) -> int:
    """The layout for changing assignments on ``backend`` (default: JAX's): chunked (``6``,
    units of 1/64 of a round's capacity) on CPU, exact (``0``) on accelerators.

    On the emulated CPU mesh compiling a step takes the same cores as training, and many
    times a period's training time on small graphs, so one program for the whole run wins.
    On accelerators the chunks' collectives, each inside a conditional, could not overlap the
    central aggregation outside it, while the step of a known next assignment compiles in a
    host thread as the devices train (``TrainConfig.compile_ahead``)."""
    return 6 if (backend or jax.default_backend()) == "cpu" else 0


def check_chunks(chunks: int) -> None:
    if not (isinstance(chunks, int | np.integer) and 0 <= chunks <= MAX_CHUNKS):
        raise ValueError(
            f"exchange chunks must be an integer in [0, {MAX_CHUNKS}] (0: exact layouts), "
            f"got {chunks!r}"
        )


def _piece_bytes(rows, dim: int, bits: int):
    """``(codes, parameters)``: the bytes of ``rows`` rows of width ``dim`` at ``bits`` on the
    wire -- packed codes (fp32 rows at 32 bits) and their fp32 ``(scale, lo)`` (none at 32
    bits). ``rows`` may be an int or an integer array (host or device)."""
    if bits == 32:
        return rows * dim * 4, rows * 0
    return -(-rows // _codes_per_row_block(bits)) * dim, 8 * rows


def wire_bytes(rows: int, dim: int, bits: int) -> int:
    """Bytes of one bucket of ``rows`` rows of width ``dim`` at ``bits`` on the wire."""
    return sum(_piece_bytes(rows, dim, bits))


def round_buffer_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Length of each round's byte buffer for rows of width ``dim``. Exact layout: the largest
    sender's total (every device sends that many bytes in the round). Chunked layout: the
    round's capacity rounded up to whole units (:func:`chunk_bytes`); only the units the
    largest sender fills travel (:func:`round_moved_bytes`)."""
    if not layout.chunks:
        return _largest_round_bytes(layout, dim)
    return tuple(u << layout.chunks for u in chunk_bytes(layout, dim))


def _largest_round_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Per round, the largest ``a * dim + b`` of ``round_bytes``: the largest sender's bytes
    (exact layout) or the round's capacity (chunked layout)."""
    return tuple(max((a * dim + b for a, b in rb), default=0) for rb in layout.round_bytes)


def chunk_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Per round, the transfer unit ``u`` of a chunked layout: capacity / ``2^J``, rounded up."""
    if not layout.chunks:
        raise ValueError("an exact layout (chunks = 0) has no transfer unit")
    return tuple(-(-c // (1 << layout.chunks)) for c in _largest_round_bytes(layout, dim))


def _sender_bytes(layout: ExchangeLayout, dim: int, sent) -> list:
    """Per round, the bytes of a sender's buckets in the round's buffer, from its real rows
    per bucket ``sent`` (``[..., Q]``, host or device) -> per round ``[...]``."""
    out, q = [], 0
    for rc in layout.counts:
        total = 0
        for w, _ in rc:
            total = total + sum(_piece_bytes(sent[..., q], dim, w))
            q += 1
        out.append(total)
    return out


def round_moved_bytes(layout: ExchangeLayout, dim: int) -> tuple[int, ...]:
    """Bytes every device sends in each round (host side). Exact layout: the round's buffer.
    Chunked layout: the units the round's largest sender fills."""
    if not layout.chunks:
        return round_buffer_bytes(layout, dim)
    totals = _sender_bytes(layout, dim, np.asarray(layout.sent))
    return tuple(
        -(-int(np.max(t)) // u) * u if u else 0
        for t, u in zip(totals, chunk_bytes(layout, dim), strict=True)
    )


def _agreement_bytes(layout: ExchangeLayout, num_parts: int) -> int:
    """Bytes one device sends for a chunked layout's ``pmax`` of ``int32[R]`` (counted as an
    all-gather, an upper bound of a ring all-reduce's ``2 (P - 1) / P`` of the vector)."""
    return (num_parts - 1) * 4 * len(layout.counts) if layout.chunks else 0


def layout_bytes(layout: ExchangeLayout, dim: int) -> int:
    """Bytes one device sends in one exchange with ``layout`` (host side: padded round
    buffers; for a chunked layout, the units sent and the ``pmax`` that agrees on them)."""
    if not layout.chunks:  # static: also inside the step
        return sum(round_buffer_bytes(layout, dim))
    num_parts = np.asarray(layout.sent).shape[0]
    return sum(round_moved_bytes(layout, dim)) + _agreement_bytes(layout, num_parts)


def _round_units(layout: ExchangeLayout, dim: int, axis_name) -> jax.Array:
    """Device side, chunked layout: ``int32[R]``, per round the units the largest sender
    fills, from each device's own bucket sizes by a ``pmax`` -- identical on every device, so
    it can gate the collectives of :func:`_send_chunks`."""
    units = np.maximum(np.asarray(chunk_bytes(layout, dim), np.int32), 1)
    own = jnp.stack([jnp.asarray(t, jnp.int32) for t in _sender_bytes(layout, dim, layout.sent)])
    return (jax.lax.pmax(own, axis_name) + units - 1) // units


def exchange_bytes(layout: ExchangeLayout, dim: int, axis_name, num_parts: int):
    """Bytes one device sends in one exchange with ``layout``, inside the step: a static
    count for an exact layout, the units the rounds need (data) for a chunked one."""
    if not layout.counts:  # no ring rounds (P = 1): nothing moves
        return jnp.float32(0.0)
    if not layout.chunks:
        return jnp.float32(layout_bytes(layout, dim))
    units = _round_units(layout, dim, axis_name)
    moved = jnp.sum(units * jnp.asarray(chunk_bytes(layout, dim), jnp.int32))
    return (moved + _agreement_bytes(layout, num_parts)).astype(jnp.float32)


def byte_report(
    plan: HaloPlan,
    assignment: BitAssignment,
    layer_dims: Sequence[int],
    *,
    chunks: int = 0,
    widths=QUANT_WIDTHS,
) -> dict:
    """Bytes over the whole mesh per ``fwd{l}`` / ``bwd{l}``: ``moved`` (padded round buffers,
    what the collectives carry; see :func:`layout_bytes`), ``bucket_padded`` (what they would
    carry with every bucket padded to its largest sender, the layout before round buffers) and
    ``useful`` (real rows only). Layer 0 has no backward exchange. ``chunks`` and ``widths``
    as in :func:`bucket_state`."""
    state = bucket_state(plan, assignment, chunks=chunks, widths=widths)
    p = plan.num_parts
    out = {}
    for name in ("fwd", "bwd"):
        for layer, layout in enumerate(state[name]):
            if name == "bwd" and layer == 0:
                continue
            dim = layer_dims[layer]
            q = [w for rc in layout.counts for w, _ in rc]  # buckets, in `sent` order
            largest = np.asarray(layout.sent).max(axis=0, initial=0)  # per bucket
            out[f"{name}{layer}"] = {
                "moved": p * layout_bytes(layout, dim),
                "bucket_padded": p
                * sum(wire_bytes(int(c), dim, w) for w, c in zip(q, largest, strict=True)),
                "useful": sum(
                    wire_bytes(int(n), dim, w) for i, w in enumerate(q) for n in layout.sent[:, i]
                ),
            }
    return out


# ---------------------------------------------------------------------- device: exchange


def _as_bytes(x: jax.Array) -> jax.Array:
    """``[N, ...]`` -> ``uint8[N, ...(, itemsize)]``: the bytes of each element, last."""
    return x if x.dtype == jnp.uint8 else jax.lax.bitcast_convert_type(x, jnp.uint8)


def _exchange(source, layout: ExchangeLayout, key, axis_name, num_parts, reverse):
    """The rows of ``layout`` gathered from ``source``, quantized, sent around the ring and
    dequantized: ``f32[M, D]``, the received rows of all widths (ascending) and rounds.

    Each width is gathered and quantized once for all rounds (key ``fold_in(key, w)``). Round
    ``r`` sends, per width, the packed codes and then the fp32 ``(scale, lo)`` of the device's
    real rows of its bucket (fp32 rows at 32 bits), back to back in one byte buffer of the
    round's static length, to ``d ± r``: one ``ppermute`` per round. Each piece is written at an
    offset that depends on the device's own bucket sizes (data), and read back from the
    received buffer at the sender's offsets; bytes past a sender's real rows are zeroed, and
    the rows they decode to are dropped by the placement. Few, large operations keep the
    compiled step small: its compile time grows with the number of kernels.
    """
    dim = source.shape[-1]
    counts = layout.counts
    if not layout.widths:  # no rounds (P = 1)
        return jnp.zeros((0, dim), source.dtype)
    data, params = {}, {}
    for w in layout.widths:
        x = jnp.take(source, layout.rows[f"b{w}"], axis=0, mode="fill", fill_value=0)
        if w == 32:
            data[w] = _as_bytes(x.astype(jnp.float32)).reshape(x.shape[0], 4 * dim)
        else:
            packed, scale, lo = quantize(x, w, jax.random.fold_in(key, w))
            data[w] = _computed_once(packed, key)  # [N / k, D]
            params[w] = _as_bytes(jnp.stack([scale, lo], axis=1).astype(jnp.float32))
            params[w] = params[w].reshape(-1, 8)  # [N, 8]
    lengths = round_buffer_bytes(layout, dim)
    if layout.chunks:
        units, unit = _round_units(layout, dim, axis_name), chunk_bytes(layout, dim)
    offsets = {w: _block_offsets(counts, w) for w in layout.widths}
    received, q = [], 0
    for r, rc in enumerate(counts):
        pieces = []  # (static bytes, real length in bytes)
        for w, c in rc:
            k, start = _codes_per_row_block(w), offsets[w][r]
            code_bytes, param_bytes = _piece_bytes(layout.sent[q], dim, w)
            pieces.append((data[w][start // k : start // k + -(-c // k)].reshape(-1), code_bytes))
            if w < 32:
                pieces.append((params[w][start : start + c].reshape(-1), param_bytes))
            q += 1
        if not pieces:  # no device sends in this round
            received.append(None)
            continue
        buf = _pack(pieces, lengths[r])
        perm = ring_perm(num_parts, -(r + 1) if reverse else r + 1)
        if layout.chunks:
            received.append(_send_chunks(buf, units[r], unit[r], layout.chunks, axis_name, perm))
        else:
            received.append(jax.lax.ppermute(buf, axis_name, perm))
    codes, parameters, q = {w: [] for w in layout.widths}, {w: [] for w in layout.widths}, 0
    for r, rc in enumerate(counts):
        sizes = []  # per piece: (static bytes, real length in bytes)
        for w, c in rc:
            static, real = _piece_bytes(c, dim, w), _piece_bytes(layout.got[q], dim, w)
            sizes.append((static[0], real[0]))  # codes
            if w < 32:
                sizes.append((static[1], real[1]))  # parameters
            q += 1
        pieces = iter(_unpack(received[r], sizes) if sizes else ())
        for w, c in rc:
            codes[w].append(next(pieces))
            if w < 32:
                k = _codes_per_row_block(w)
                parameters[w].append(next(pieces))
                # Rows that pad the bucket to whole bytes carry no parameters on the wire.
                parameters[w].append(jnp.zeros((8 * (-(-c // k) * k - c),), jnp.uint8))
    blocks = []
    for w in layout.widths:
        k, n = _codes_per_row_block(w), offsets[w][-1]
        block = jnp.concatenate(codes[w])
        if w == 32:
            rows = jax.lax.bitcast_convert_type(block.reshape(n, dim, 4), jnp.float32)
        else:
            p = jax.lax.bitcast_convert_type(
                jnp.concatenate(parameters[w]).reshape(n, 2, 4), jnp.float32
            )
            rows = dequantize(block.reshape(n // k, dim), p[:, 0], p[:, 1], w, n)
        blocks.append(rows.astype(source.dtype))
    return jnp.concatenate(blocks)


def _pack(pieces, length: int) -> jax.Array:
    """One device's round buffer: ``uint8[length]`` holding the real bytes of each piece
    ``(static bytes, real length)`` back to back, in order.

    Each piece is written whole at the running offset; its bytes past the real length are
    overwritten by the next piece or lie past the device's own total. The scratch buffer holds
    every piece at its static size, so no write is shifted by ``dynamic_update_slice``'s
    clamping of the start index."""
    size = max(sum(p.shape[0] for p, _ in pieces), length)
    scratch = _like_varying(jnp.zeros((size,), jnp.uint8), pieces[0][0])
    offset = jnp.int32(0)
    for piece, real in pieces:
        scratch = jax.lax.dynamic_update_slice(scratch, piece, (offset,))
        offset = offset + real
    return scratch[:length]


def _send_chunks(buf, units, unit: int, chunks: int, axis_name, perm) -> jax.Array:
    """The first ``units * unit`` bytes of ``buf`` (``uint8[2^chunks * unit]``) sent along
    ``perm``; the rest of the received buffer is zero.

    The prefix travels as one ``ppermute`` of ``2^j * unit`` bytes per set bit ``j`` of
    ``units`` (largest first), each under a ``lax.cond``: at most ``chunks + 1`` transfers, no
    more than one unit beyond the largest sender's bytes. ``units`` must be identical on every
    device (it comes from a ``pmax``): a collective in a branch that only some devices take
    never completes."""
    out = _like_varying(jnp.zeros_like(buf), buf)
    offset = jnp.int32(0)
    for j in reversed(range(chunks + 1)):
        size, take = unit << j, (units >> j) & 1

        def send(out, offset=offset, size=size):
            piece = jax.lax.dynamic_slice(buf, (offset,), (size,))
            piece = jax.lax.ppermute(piece, axis_name, perm)
            return jax.lax.dynamic_update_slice(out, piece, (offset,))

        out = jax.lax.cond(take == 1, send, lambda out: out, out)
        offset = offset + take * size
    return out


def _unpack(buf: jax.Array, sizes) -> list[jax.Array]:
    """The pieces of a received round buffer, ``sizes`` = per piece ``(static bytes, real
    length)`` of the sender: each read at the running offset at its static size, its bytes
    past the real length zeroed."""
    widest = max(size for size, _ in sizes)
    padded = jnp.concatenate([buf, _like_varying(jnp.zeros((widest,), jnp.uint8), buf)])
    offset, out = jnp.int32(0), []
    for size, real in sizes:
        piece = jax.lax.dynamic_slice(padded, (offset,), (size,))
        out.append(jnp.where(jnp.arange(size) < real, piece, jnp.uint8(0)))
        offset = offset + real
    return out


def _computed_once(packed: jax.Array, key: jax.Array) -> jax.Array:
    """``packed`` unchanged, but materialized once before it is sliced into rounds.

    XLA's fusion duplicates a chain of cheap elementwise producers into every consumer, so
    without this each round's slice of the codes would recompute the whole quantization
    (the Threefry hash included): one copy per round in the compiled program, multiplying its
    compile time (at 8 bits, where packing has no reduction to stop the chain). An integer
    division by a runtime value counts as expensive in that heuristic, so dividing by a one
    that XLA cannot prove constant (``k // k`` of the key's data, ``k`` odd) stops the
    duplication, at the price of one integer division per byte.
    """
    word = jax.random.key_data(key).reshape(-1)[0] | np.uint32(1)
    return packed // (word // word).astype(packed.dtype)


def _like_varying(x: jax.Array, like: jax.Array) -> jax.Array:
    """``x`` cast to vary over the mesh axes ``like`` varies over (a no-op outside shard_map)."""
    return to_varying(x, varying_axes(like))


def row_range_variance(rows: jax.Array) -> jax.Array:
    """``(D / 6) * (max_d x - min_d x)^2`` per row: the expected squared error of stochastic
    rounding at ``b`` bits times ``(2^b - 1)^2`` (a fractional part uniform on [0, 1) has
    ``E[p (1 - p)] = 1/6``), the quantity AdaQP traces. ``[N, D] -> f32[N]``."""
    if rows.shape[-1] == 0:
        return jnp.zeros(rows.shape[:-1], jnp.float32)
    rows = jax.lax.stop_gradient(rows).astype(jnp.float32)
    spread = jnp.max(rows, axis=-1) - jnp.min(rows, axis=-1)
    return (rows.shape[-1] / 6.0) * spread * spread


def quantized_halo(h_local, layout, key, *, axis_name, num_parts):
    """The forward data path of :func:`quantized_ring_exchange`: the halo rows of ``layout``
    (a forward :class:`ExchangeLayout`), quantized with ``key`` and dequantized on arrival,
    with no gradient rule of its own (PipeGCN sends its stale halos this way).

    Shapes:
      ``h_local: f32[Nl, D]`` -> ``f32[H, D]``.
    """
    rows = _exchange(h_local, layout, key, axis_name, num_parts, reverse=False)
    return jnp.take(rows, layout.place, axis=0, mode="fill", fill_value=0)


def quantized_halo_gradient(g_halo, layout, key, num_local: int, *, axis_name, num_parts):
    """The backward data path: halo gradient rows sent back to their owners along the
    reversed ring, quantized with ``key`` under ``layout`` (a backward :class:`ExchangeLayout`)
    and added onto the rows they came from.

    Shapes:
      ``g_halo: f32[H, D]`` -> ``f32[num_local, D]``.
    """
    rows = _exchange(g_halo, layout, key, axis_name, num_parts, reverse=True)
    # Typed like the primal input: varying over the mesh axis even with no rounds (P = 1).
    g = _like_varying(jnp.zeros((num_local, g_halo.shape[-1]), g_halo.dtype), g_halo)
    return g.at[layout.place].add(rows, mode="drop")  # padding rows point past the end


def quantized_ring_exchange(h_local, fwd, bwd, key, *, axis_name, num_parts, probe=None):
    """Ring halo exchange with quantized messages in both passes.

    Args:
      h_local: ``f32[Nl, D]`` this device's rows.
      fwd, bwd: this device's :class:`ExchangeLayout` of each direction (from
        :func:`bucket_state`, leading axis removed).
      key: PRNG key of this device, step and layer; directions and widths fold it.
      probe: optional per round ``f32[S_r]`` (its value is ignored). Its cotangent is the
        :func:`row_range_variance` of the gradient rows this device sends back in the
        backward pass, slot by slot (indexed as the rows it received in that round): the
        side channel through which the backward messages are traced.

    Returns:
      ``f32[H, D]``: the dequantized halo rows in the plan's halo layout.
    """
    shape, dtype = h_local.shape, h_local.dtype
    offsets = np.cumsum((0,) + tuple(fwd.round_rows))

    def forward(h_local, aux):
        fwd, _, key_data = aux
        fkey = jax.random.fold_in(jax.random.wrap_key_data(key_data), 0)
        return quantized_halo(h_local, fwd, fkey, axis_name=axis_name, num_parts=num_parts)

    # Index arrays and the key are explicit (non-differentiated) arguments rather than closed
    # over, so the exchange can be differentiated from outside an enclosing jit/shard_map.
    @jax.custom_vjp
    def exchange(h_local, probe, aux):
        return forward(h_local, aux)

    def exchange_fwd(h_local, probe, aux):
        return forward(h_local, aux), aux

    def exchange_bwd(aux, g_halo):
        _, bwd, key_data = aux
        bkey = jax.random.fold_in(jax.random.wrap_key_data(key_data), 1)
        g = quantized_halo_gradient(
            g_halo, bwd, bkey, shape[0], axis_name=axis_name, num_parts=num_parts
        ).astype(dtype)
        probe_ct = None
        if probe is not None:
            v = row_range_variance(g_halo)
            probe_ct = tuple(v[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1))
        return g, probe_ct, None

    exchange.defvjp(exchange_fwd, exchange_bwd)
    aux = (fwd, bwd, jax.random.key_data(key))
    return exchange(h_local, None if probe is None else tuple(probe), aux)


class Quantized(CommStrategy):
    """Quantized ring exchange under a fixed or periodically re-drawn bit assignment.

    Args:
      bits: ``2``, ``4``, ``8`` (every message at that width), ``32`` (no compression: the
        same code path delivering exact rows) or ``"random"`` (uniform over ``widths`` per
        message, re-drawn every ``period`` epochs).
      period: epochs per assignment period (random mode).
      seed: seed of the random draws.
      chunks: layout of a re-drawn assignment (random mode; see :func:`bucket_state`): ``0``
        sizes the buffers for each assignment, so every new one compiles a new step; ``J``
        keeps one chunked layout, and one compiled step, for every assignment. A fixed width
        never changes, so its layout is always exact.
      widths: the candidate widths of random mode (a subset of :data:`QUANT_WIDTHS`); a
        chunked layout holds a bucket for each, so fewer widths quantize less.
    """

    def __init__(
        self,
        bits: int | str = 8,
        *,
        period: int = 40,
        seed: int = 0,
        chunks: int = 0,
        widths: Sequence[int] = QUANT_WIDTHS,
    ):
        if bits != "random":
            _check_width(bits)
        if period < 1:
            raise ValueError(f"assignment period must be at least 1 epoch, got {period}")
        check_chunks(chunks)
        self.bits, self.period, self.seed = bits, int(period), int(seed)
        self.chunks = int(chunks) if bits == "random" else 0
        self.widths = check_widths(widths) if bits == "random" else QUANT_WIDTHS
        self.name = f"quant-{bits}"

    def _key(self):
        return (type(self), self.bits, self.period, self.seed, self.chunks, self.widths)

    def __eq__(self, other):
        return isinstance(other, Quantized) and other._key() == self._key()

    def __hash__(self):
        return hash(self._key())

    def assignment(self, plan: HaloPlan, num_layers: int, *, period_index: int = 0):
        """The assignment in force during assignment period ``period_index`` (0-based)."""
        if self.bits == "random":
            rng = np.random.default_rng([self.seed, period_index])
            return BitAssignment.random(plan, num_layers, rng, self.widths)
        return BitAssignment.uniform(plan, num_layers, self.bits)

    def init_state(self, plan, layer_dims, *, epoch: int = 0):
        # After `epoch` completed epochs the state holds the assignment that epoch used.
        period_index = max(epoch - 1, 0) // self.period
        assignment = self.assignment(plan, len(layer_dims), period_index=period_index)
        return bucket_state(plan, assignment, chunks=self.chunks, widths=self.widths)

    def controller(self, plan, layer_dims, *, cost=None):
        del cost
        if self.bits == "random":
            return RandomWidths(self, plan, layer_dims)
        return Controller(self, plan, layer_dims)

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        del shard
        return quantized_layer_exchange(
            h_local,
            comm_state,
            layer=layer,
            key=key,
            axis_name=axis_name,
            num_parts=num_parts,
            probe=probe,
        )


def quantized_layer_exchange(h_local, comm_state, *, layer, key, axis_name, num_parts, probe):
    """Layer ``layer``'s quantized ring exchange under the bucket layouts of ``comm_state``
    (``comm_state["fwd"][layer]``, ``["bwd"][layer]``; :func:`bucket_state`), and the bytes it
    moves; the exchange of :class:`Quantized` and of AdaQP's adaptive widths.

    Returns:
      ``(h_remote, comm_state, bytes_moved)``.
    """
    if key is None:
        raise ValueError("the quantized exchange needs a PRNG key")
    fwd = comm_state["fwd"][layer]
    bwd = comm_state["bwd"][layer]
    h_remote = quantized_ring_exchange(
        h_local, fwd, bwd, key, axis_name=axis_name, num_parts=num_parts, probe=probe
    )
    dim = h_local.shape[-1]
    nbytes = exchange_bytes(fwd, dim, axis_name, num_parts)
    if layer > 0:  # the first layer's input is data: no backward exchange
        nbytes = nbytes + exchange_bytes(bwd, dim, axis_name, num_parts)
    return h_remote, comm_state, nbytes


class RandomWidths(Controller):
    """Random widths re-drawn every ``period`` epochs (:class:`Quantized` ``"random"``): each
    period's assignment follows from the seed and the period index, so the next one is known
    (and its step compiled) a whole period ahead."""

    _upcoming: tuple | None = None  # (boundary, its state), computed once per boundary

    def update(self, comm_state, *, epoch):
        del comm_state
        if epoch == 1 or (epoch - 1) % self.exchange.period:
            return None
        return self.init_state(epoch=epoch)

    def upcoming(self, comm_state, *, epoch):
        del comm_state
        period = self.exchange.period
        boundary = (epoch - 1) // period * period + period + 1
        if self._upcoming is None or self._upcoming[0] != boundary:
            self._upcoming = (boundary, self.init_state(epoch=boundary))
        return self._upcoming
