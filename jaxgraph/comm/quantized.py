"""The ``quantized`` method: every halo message at a fixed width, or at widths drawn at random
every period (AdaQP's random baseline), over the quantized ring exchange of
:mod:`jaxgraph.comm.qring`."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from jaxgraph.comm.method import (
    Method,
    RunInfo,
    check_periodic,
    chunks_or_default,
    match_spelling,
)
from jaxgraph.comm.qring import quantized_layer_exchange
from jaxgraph.comm.strategy import CommStrategy, Controller
from jaxgraph.options import flag
from jaxgraph.partition.buckets import (
    QUANT_WIDTHS,
    BitAssignment,
    bucket_state,
    check_param_dtype,
    check_widths,
)
from jaxgraph.partition.halo import HaloPlan


@dataclasses.dataclass(frozen=True)
class Quantized(Method, CommStrategy):
    """Halo messages as ``bits``-bit codes in both passes, at a fixed width or at widths drawn
    at random every period (AdaQP's random baseline).

    Attributes:
      bits: 2, 4 or 8; 32 sends fp32 through the same path; ``"random"`` draws a width from
        ``widths`` for every message, anew every ``period`` epochs.
      widths: the candidate widths of ``"random"`` (a subset of :data:`QUANT_WIDTHS`; a
        chunked layout holds a bucket for each, so fewer widths quantize less).
      period: epochs per draw (0: ``epochs // 5``).
      chunks: layout of the exchange under changing widths: ``J >= 1`` one layout (and one
        compiled step) for the whole run; 0 exact buffers and a step per draw; ``None`` the
        backend's default (:func:`jaxgraph.partition.buckets.default_chunks`).
      compile_ahead: compile the next draw's step in a thread while the current one trains.
      param_dtype: the precision of each quantized row's ``(scale, lo)`` on the wire:
        ``"float32"`` (8 bytes per row) or ``"bfloat16"`` (4; the kernel rounds the parameters
        first, so the message stays unbiased; :mod:`pallas_kernels.quantize`).

    ``widths``, ``period``, ``chunks`` and ``compile_ahead`` apply to ``bits="random"`` only;
    ``param_dtype`` to every width but 32.
    """

    bits: int | Literal["random"] = 8
    widths: tuple[int, ...] = QUANT_WIDTHS
    period: int = flag("--assign-period", 0)
    chunks: int | None = flag("--exchange-chunks", None)
    compile_ahead: bool = True
    param_dtype: str = "float32"

    key: ClassVar[str] = "quantized"
    spellings: ClassVar[str] = "quant-<2|4|8|32|random>[-bf16]"
    modes: ClassVar[tuple[str, ...]] = ("bits",)
    _RANDOM_ONLY: ClassVar[tuple[str, ...]] = ("widths", "period", "chunks", "compile_ahead")

    @classmethod
    def parse(cls, text: str) -> Quantized | None:
        g = match_spelling(r"quant-(?P<bits>2|4|8|32|random)(?P<bf16>-bf16)?", text)
        if g is None or (g["bf16"] and g["bits"] == "32"):
            return super().parse(text)
        bits = g["bits"] if g["bits"] == "random" else int(g["bits"])
        return cls(bits, param_dtype="bfloat16" if g["bf16"] else "float32")

    @classmethod
    def taker(cls, field: str) -> str:
        return "quant-random" if field in cls._RANDOM_ONLY else "quant-<2|4|8|random>"

    def __post_init__(self):
        if self.bits not in (2, 4, 8, 32, "random") or isinstance(self.bits, bool):
            raise ValueError(f"quantized.bits must be 2, 4, 8, 32 or 'random', got {self.bits!r}")
        object.__setattr__(self, "widths", check_widths(self.widths))
        check_periodic("quantized", self.period, self.chunks)
        try:
            check_param_dtype(self.param_dtype)
        except ValueError as e:
            raise ValueError(f"quantized.{e}") from None
        if self.bits == 32 and self.param_dtype != "float32":
            raise ValueError(
                "quantized.param_dtype applies to bits 2, 4, 8 or 'random', not to bits=32 "
                "(fp32 rows carry no scale or offset)"
            )
        if self.bits != "random":
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name in self._RANDOM_ONLY:
                if getattr(self, name) != defaults[name]:
                    raise ValueError(
                        f"quantized.{name} applies to bits='random' only, not to bits={self.bits}"
                    )

    def options(self) -> tuple[str, ...]:
        if self.bits == "random":
            return super().options()
        return ("bits",) if self.bits == 32 else ("bits", "param_dtype")

    def label(self) -> str:
        return f"quant-{self.bits}" + ("-bf16" if self.param_dtype == "bfloat16" else "")

    @property
    def name(self) -> str:
        return self.label()

    def exchange_chunks(self) -> int:
        return chunks_or_default(self.chunks) if self.bits == "random" else 0

    def assignment(
        self, plan: HaloPlan, num_layers: int, *, period_index: int = 0, seed: int = 0
    ) -> BitAssignment:
        """The assignment in force during assignment period ``period_index`` (0-based) of a
        run seeded ``seed``."""
        if self.bits == "random":
            rng = np.random.default_rng([seed, period_index])
            return BitAssignment.random(plan, num_layers, rng, self.widths)
        return BitAssignment.uniform(plan, num_layers, self.bits)

    def init_state(self, plan, layer_dims, *, epoch: int = 0):
        """The state after ``epoch`` epochs under :class:`RunInfo`'s defaults."""
        return QuantizedWidths(self, plan, layer_dims).init_state(epoch=epoch)

    def controller(self, plan, layer_dims, *, cost=None, run=None):
        del cost
        return QuantizedWidths(self, plan, layer_dims, run=run)

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        del shard
        h_remote, nbytes = quantized_layer_exchange(
            h_local,
            comm_state,
            layer=layer,
            key=key,
            axis_name=axis_name,
            num_parts=num_parts,
            probe=probe,
        )
        return h_remote, comm_state, nbytes


class QuantizedWidths(Controller):
    """Host half of :class:`Quantized` in one run: the fixed width's layout, or random widths
    re-drawn every period from the run's seed and the period index (known a period ahead).

    Attributes:
      period: epochs per draw in this run.
      seed: the run's seed.
      chunks: the layout of the draws (0 for a fixed width: exact).
    """

    _upcoming: tuple | None = None  # (boundary, its state), computed once per boundary

    def __init__(self, exchange: Quantized, plan, layer_dims, *, run: RunInfo | None = None):
        super().__init__(exchange, plan, layer_dims)
        run = run or RunInfo()
        self.period, self.seed = run.period(exchange.period), run.seed
        self.chunks = exchange.exchange_chunks()

    def init_state(self, *, epoch: int = 0):
        # After `epoch` completed epochs the state holds the assignment that epoch used.
        q = self.exchange
        assignment = q.assignment(
            self.plan,
            len(self.layer_dims),
            period_index=max(epoch - 1, 0) // self.period,
            seed=self.seed,
        )
        return bucket_state(
            self.plan,
            assignment,
            chunks=self.chunks,
            widths=q.widths if q.bits == "random" else QUANT_WIDTHS,
            param_dtype=q.param_dtype,
        )

    def update(self, comm_state, *, epoch):
        del comm_state
        if self.exchange.bits != "random" or epoch == 1 or (epoch - 1) % self.period:
            return None
        return self.init_state(epoch=epoch)

    def upcoming(self, comm_state, *, epoch):
        del comm_state
        if self.exchange.bits != "random":
            return None
        boundary = (epoch - 1) // self.period * self.period + self.period + 1
        if self._upcoming is None or self._upcoming[0] != boundary:
            self._upcoming = (boundary, self.init_state(epoch=boundary))
        return self._upcoming


__all__ = ["Quantized", "QuantizedWidths"]
