"""Bucket layouts of the quantized ring exchange, planned on the host from the halo plan and a
bit assignment (:mod:`jaxgraph.comm.quantized` runs the exchange on them).

**Slots.** Round ``r`` carries, from device ``d`` to ``(d + r) mod P``, the ``S_r`` rows of
``HaloPlan.send_idx[r-1][d]``; a *slot* is a position ``s`` in that list. A
:class:`BitAssignment` gives every real slot a forward and a backward bit-width,
``fwd[l][r-1][d, s]`` and ``bwd[l][r-1][d, s]`` (``d``: the forward sender).

**Buckets.** Per layer, direction, round and width, the slots of that width in ascending order
(the reference wire order: buckets by ascending width, rows in send-list order). A bucket
travels as its packed codes and its ``(scale, lo)`` parameters (``param_dtype``).

**Layout.** Per layer and direction, an :class:`ExchangeLayout` (exact or chunked).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from jaxgraph.partition.halo import HaloPlan

WIDTHS = (2, 4, 8, 32)
QUANT_WIDTHS = (2, 4, 8)


@dataclasses.dataclass(frozen=True, eq=False)
class BitAssignment:
    """Bit-widths of every halo message, per layer, direction, round and slot.

    Attributes:
      fwd, bwd: per layer, per round ``r = 1..P-1``, ``int8[P, S_r]``: the width of the row
        device ``d`` sends in slot ``s`` (forward), and of the gradient row sent back for it
        (backward), in ``{2, 4, 8, 32}``; slots without a row are ignored.
    """

    fwd: tuple[tuple[np.ndarray, ...], ...]
    bwd: tuple[tuple[np.ndarray, ...], ...]

    @classmethod
    def uniform(cls, plan: HaloPlan, num_layers: int, bits: int) -> BitAssignment:
        """Every message of every layer and direction at ``bits``."""
        check_width(bits)
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


# An assignment is a pytree of its widths (a controller gathers or broadcasts one whole).
jax.tree_util.register_dataclass(BitAssignment, data_fields=["fwd", "bwd"], meta_fields=[])


def check_width(bits: int) -> None:
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


def _round_buckets(
    bits: np.ndarray, mask: np.ndarray, r: int, backward: bool, capacity=None
) -> dict:
    """Bucket slots of one round, one direction: ``{w: {"send": int32[P, C], "recv": int32[P,
    C]}}`` for each width ``w`` present, ascending: the slots device ``d`` sends and those its
    received rows fill, ``-1`` past its own count (``C``: the largest count). With
    ``capacity`` (a set of widths) each of them has a bucket of ``C = S_r``."""
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

    The rows of each width, from all rounds, form one block quantized once; round ``r``'s
    bucket of ``C`` rows is padded to a multiple of ``k = 8 / b`` so that no byte mixes two
    rounds. The receiver concatenates the dequantized blocks by ascending width: ``M`` rows.

    Attributes:
      rows: ``{"b{w}": int32[P, N_w]}``: the rows each device gathers for width ``w`` (forward:
        local rows; backward: halo rows of the gradient), round by round (padding: ``_PAD``).
      place: forward ``int32[P, H]``: each halo slot's row among the ``M`` received rows.
        Backward ``int32[P, M]``: the local row each received gradient row adds into.
      sent, got: ``int32[P, Q]``: per bucket ``q`` (in ``counts`` order), the real rows each
        device sends and receives in it.
      counts: static: per round, ``((w, C), ...)``, the widths present and their bucket sizes.
      round_rows: static: ``(S_1, ..., S_{P-1})``.
      round_bytes: static: per round, the distinct ``(a, b)`` such that a sender's bytes are
        ``a * D + b`` for rows of width ``D``; the round's buffer is the largest of them. In a
        chunked layout, one pair: the round's capacity (every slot at the widest width).
      param_bytes: static: the bytes of a quantized row's ``(scale, lo)`` (:data:`PARAM_BYTES`).
      chunks: static: ``0`` for an exact layout, sized for one assignment (new sizes compile a
        new step). ``J >= 1`` for a *chunked* layout, whose static fields depend on the plan
        only: every width has a bucket of ``C = S_r``, and only the first ``n * u`` bytes of a
        round's buffer travel (``u`` = capacity / ``2^J``, ``n`` the largest sender's units),
        as ``ppermute`` s of ``2^j u`` bytes for the set bits ``j`` of ``n``, each gated.
    """

    rows: dict
    place: np.ndarray
    sent: np.ndarray
    got: np.ndarray
    counts: tuple
    round_rows: tuple
    round_bytes: tuple
    chunks: int = 0
    param_bytes: int = 8

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(sorted({w for rc in self.counts for w, _ in rc}))


jax.tree_util.register_dataclass(
    ExchangeLayout,
    data_fields=["rows", "place", "sent", "got"],
    meta_fields=["counts", "round_rows", "round_bytes", "chunks", "param_bytes"],
)


class Layouts(NamedTuple):
    """The layouts of a quantized exchange: per layer, an :class:`ExchangeLayout` for the
    forward rows (``fwd``) and one for the gradient rows sent back (``bwd``)."""

    fwd: tuple[ExchangeLayout, ...]
    bwd: tuple[ExchangeLayout, ...]


# The precisions a quantized row's (scale, lo) may travel in, and their bytes per row.
PARAM_BYTES = {"float32": 8, "bfloat16": 4}


def check_param_dtype(param_dtype: str) -> str:
    """``param_dtype`` if it names a precision of :data:`PARAM_BYTES`, else a ValueError."""
    if param_dtype not in PARAM_BYTES:
        raise ValueError(
            f"param_dtype must be one of {', '.join(map(repr, PARAM_BYTES))}, got {param_dtype!r}"
        )
    return param_dtype


def codes_per_row_block(w: int) -> int:
    return 8 // w if w < 32 else 1


def block_offsets(counts: tuple, w: int) -> list[int | None]:
    """Start of each round's bucket of width ``w`` in that width's block (None: absent)."""
    k = codes_per_row_block(w)
    out, pos = [], 0
    for rc in counts:
        c = dict(rc).get(w)
        out.append(None if c is None else pos)
        pos += 0 if c is None else -(-c // k) * k
    return out + [pos]


def _layout(
    plan: HaloPlan, buckets: tuple, backward: bool, chunks: int = 0, param_bytes: int = 8
) -> ExchangeLayout:
    """The :class:`ExchangeLayout` of one layer's buckets (``round_buckets(...)[dir][layer]``;
    with ``chunks``, buckets built with a ``capacity``; ``param_bytes`` per quantized row)."""
    num_parts = plan.num_parts
    counts = tuple(tuple((w, b["send"].shape[1]) for w, b in rb.items()) for rb in buckets)
    halo_off = plan.halo_offsets()
    widths = sorted({w for rc in counts for w, _ in rc})
    offsets = {w: block_offsets(counts, w) for w in widths}
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
            round_bytes.append((_capacity(rb, plan.round_rows[r], param_bytes),))
        else:
            round_bytes.append(_bytes_by_dim(rb, sent[len(sent) - len(rb) :], param_bytes))
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
        param_bytes=param_bytes,
    )


def _capacity(rb: dict, rows: int, param_bytes: int) -> tuple[int, int]:
    """``(a, b)``: a sender's bytes in a round of ``rows`` slots are at most ``a * D + b``
    whatever widths (keys of ``rb``) its rows have."""
    per_row = [(4, 0) if w == 32 else (1, param_bytes) for w in rb]
    return (
        rows * max((a for a, _ in per_row), default=0),
        rows * max((b for _, b in per_row), default=0),
    )


def _bytes_by_dim(rb: dict, sent: list, param_bytes: int) -> tuple[tuple[int, int], ...]:
    """The distinct ``(a, b)`` over the senders of one round, where a sender's bytes are
    ``a * D + b``: which sender sends most can depend on ``D``."""
    per_dev = np.zeros((len(sent[0]) if sent else 0, 2), np.int64)
    for w, counts in zip(rb, sent, strict=True):
        per_dev += np.stack(piece_bytes(counts, 1, w, param_bytes), axis=-1)  # codes scale with D
    return tuple(sorted({(int(a), int(b)) for a, b in per_dev}))


def bucket_state(
    plan: HaloPlan,
    assignment: BitAssignment,
    *,
    chunks: int = 0,
    widths=QUANT_WIDTHS,
    param_dtype: str = "float32",
) -> Layouts:
    """The device-side :class:`Layouts` of ``assignment`` (leaves ``int32[P, ...]``).

    ``chunks = 0``: exact layouts, sized for this assignment. ``chunks = J >= 1``: chunked
    layouts (:class:`ExchangeLayout`) with a bucket for each of ``widths`` in every round, the
    same for every assignment over ``widths``, at the price of quantizing every slot at each
    width and of padding each transfer to a multiple of ``1 / 2^J`` of its capacity.
    ``param_dtype``: the precision of each row's ``(scale, lo)`` (:data:`PARAM_BYTES`)."""
    check_chunks(chunks)
    param_bytes = PARAM_BYTES[check_param_dtype(param_dtype)]
    capacity = tuple(sorted(widths)) if chunks else None
    buckets = round_buckets(plan, assignment, capacity)
    return Layouts(
        *(
            tuple(
                _layout(plan, layer, name == "bwd", chunks, param_bytes) for layer in buckets[name]
            )
            for name in ("fwd", "bwd")
        )
    )


MAX_CHUNKS = 12


def default_chunks(backend: str | None = None) -> int:
    """The layout for changing assignments on ``backend`` (default: JAX's): chunked (``6``,
    units of 1/64 of a round's capacity) on CPU, exact (``0``) on accelerators.

    On CPU, compiling competes with training for the same cores, so one program for the run
    wins; on accelerators the gated chunks could not overlap the central aggregation, and the
    next assignment's step compiles in a host thread (``TrainConfig.compile_ahead``)."""
    return 6 if (backend or jax.default_backend()) == "cpu" else 0


def check_chunks(chunks: int) -> None:
    if not (isinstance(chunks, int | np.integer) and 0 <= chunks <= MAX_CHUNKS):
        raise ValueError(
            f"exchange chunks must be an integer in [0, {MAX_CHUNKS}] (0: exact layouts), "
            f"got {chunks!r}"
        )


def piece_bytes(rows, dim: int, bits: int, param_bytes: int = 8):
    """``(codes, parameters)``: the wire bytes of ``rows`` rows (an int or an integer array) of
    width ``dim`` at ``bits``: packed codes and ``param_bytes`` per row (at 32 bits: fp32, 0)."""
    if bits == 32:
        return rows * dim * 4, rows * 0
    return -(-rows // codes_per_row_block(bits)) * dim, param_bytes * rows


def wire_bytes(rows: int, dim: int, bits: int, param_bytes: int = 8) -> int:
    """Bytes of one bucket of ``rows`` rows of width ``dim`` at ``bits`` on the wire."""
    return sum(piece_bytes(rows, dim, bits, param_bytes))
