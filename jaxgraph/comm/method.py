"""What a training method is: a frozen, validated configuration that names itself, parses
its own short spellings, and knows what of the run it needs (:class:`RunInfo`).

Every method type (``jaxgraph.train.methods`` lists the built-in ones) subclasses
:class:`Method` and is registered once (:func:`register_method`): the ``--method`` choices,
their options and help, the errors and the config-file sections all come from the registry.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, ClassVar

from jaxgraph.configfile import check_int


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a method's host half needs to know of the run it serves.

    Attributes:
      epochs: the run's length (a period of 0 means ``epochs // 5``, as AdaQP).
      seed: the run's seed (random widths are drawn from it).
      model: the model's name; its aggregation weighs the messages of adaptive widths.
    """

    epochs: int = 200
    seed: int = 0
    model: str = "gcn"

    @property
    def norm(self) -> str:
        """The aggregation whose coefficients weigh a message in the adaptive assignments
        (GAT's attention is data-dependent: the mean aggregator's stands in for it)."""
        return "gcn" if self.model == "gcn" else "mean"

    def period(self, period: int) -> int:
        """Epochs per assignment period: ``period``, or ``epochs // 5`` for 0."""
        return period or max(self.epochs // 5, 1)


class Method:
    """What every method type provides (a frozen dataclass below)."""

    key: ClassVar[str]  # the section name in a config file, [method.<key>]
    spellings: ClassVar[str] = ""  # the short spellings :meth:`parse` reads, for messages
    layout: ClassVar[str] = "halo"  # the plan it runs on: "halo" or "block"
    modes: ClassVar[tuple[str, ...]] = ()  # fields that decide which others apply
    # Whether the loop compiles the next period's step ahead, in a thread.
    compile_ahead: ClassVar[bool] = False

    @classmethod
    def parse(cls, text: str) -> Method | None:
        """The method ``text`` spells, or None if it is not one of this type's spellings."""
        return cls() if text == cls.key else None

    @classmethod
    def taker(cls, field: str) -> str:
        """The spelling of this type that takes ``field``, for messages."""
        return cls.key

    def label(self) -> str:
        """The short spelling (``quant-4``, ``sancus-h0.04``), for logs and summaries."""
        raise NotImplementedError

    def check_run(self, run: RunInfo) -> None:
        """Raises ValueError where this method cannot serve ``run`` (a lookahead past a period)."""
        del run

    def options(self) -> tuple[str, ...]:
        """The fields that take effect for this method (all of them, unless a setting makes
        some inert: a fixed-width :class:`Quantized` has no period)."""
        return tuple(f.name for f in dataclasses.fields(self))

    def exchange_chunks(self) -> int:
        """The layout of a quantized exchange under changing widths (0: exact, or none)."""
        return 0

    def replace(self, **changes) -> Method:
        """A copy with ``changes``; a field this method does not take is an error naming it."""
        for name in changes:
            if name not in {f.name for f in dataclasses.fields(self)}:
                raise ValueError(f"{name!r} does not apply to method {self.label()!r}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """``{key: fields}``, the config-file section of this method."""
        return {self.key: dataclasses.asdict(self)}


def chunks_or_default(chunks: int | None) -> int:
    """``chunks``, or the backend's default layout for None."""
    if chunks is not None:
        return chunks
    from jaxgraph.partition.buckets import default_chunks

    return default_chunks()


def check_periodic(owner: str, period: int, chunks: int | None) -> None:
    """Checks ``<owner>.period`` (0: ``epochs // 5``) and ``<owner>.chunks`` (none or a layout)."""
    from jaxgraph.partition.buckets import MAX_CHUNKS

    check_int(f"{owner}.period", period, 0, what=" (0: epochs // 5)")
    if chunks is not None:
        check_int(f"{owner}.chunks", chunks, 0, MAX_CHUNKS, " (0: exact layouts)")


METHOD_TYPES: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Registers ``cls`` for ``--method`` and ``[method.<key>]`` (a class decorator)."""
    METHOD_TYPES[cls.key] = cls
    return cls


NUMBER = r"(?:inf|\d+(?:\.\d+)?)"


def match_spelling(pattern: str, text: str) -> dict[str, str | None] | None:
    """The named groups of ``pattern`` matching all of ``text``, or None."""
    m = re.fullmatch(pattern, text)
    return None if m is None else m.groupdict()


def check_quantize(method: str, bits, *, adaptive: bool = False) -> None:
    """``<method>.quantize`` is none or a width (or ``"adaptive"`` where allowed)."""
    if bits is not None and bits not in (2, 4, 8, 32):
        also = " or 'adaptive'" if adaptive else ""
        raise ValueError(
            f"{method}.quantize must be none, 2, 4, 8 or 32 (bits){also}, got {bits!r}"
        )


def bits_label(bits) -> str:
    return "" if bits is None else f"-q{bits}"


def number_label(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:g}"


def parse_bits(value) -> int | None:
    return None if value is None else int(value)


def parse_bits_or_mode(value: str | None) -> int | str | None:
    return value if value in ("random", "adaptive") else parse_bits(value)
