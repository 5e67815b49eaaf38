"""Communication methods as typed, validated configurations.

Each method of full-graph training is a frozen dataclass, checked on construction with errors
that name the field and its allowed values:

==============  ===================================================================
``Vanilla``     fp32 ring all-to-all of the halo rows
``Quantized``   every halo message as ``bits``-bit codes, or widths drawn at random
``AdaQP``       widths per message group from a mixed-integer program, per period
``PipeGCN``     the ring exchange one epoch stale, optionally smoothed
``CAGNET``      1D block-row broadcasts
``Sancus``      skip-broadcast under a staleness bound, with local gradient clipping
``SkipG``       broadcasts every epoch, gradient reductions skipped under a bound
==============  ===================================================================

A :class:`~jaxgraph.train.config.TrainConfig` holds one of them. A config file names it as a
section, or by its short spelling::

    [method.adaqp]            # or:  method = "adaqp"
    period = 10
    [method.adaqp.assign]
    lam = 0.3

A method type is registered once (:func:`register_method`): the ``--method`` choices, their
options and help, the errors and the config-file sections all come from the registry. Each
type parses its own short spellings (``quant-4``, ``sancus-h0.04-w20-clip1``, ``pipegcn-fg``,
``skipg-2``; :meth:`Method.parse`) and spells itself back (:meth:`Method.label`).

The block-row methods (``CAGNET``, ``Sancus``, ``SkipG``; :mod:`jaxgraph.comm.stale`) are
their own exchange: the frozen dataclass is what runs inside ``shard_map``, and its host half
(:meth:`~jaxgraph.comm.strategy.CommStrategy.controller`) takes the run's
:class:`~jaxgraph.comm.method.RunInfo`. The halo methods build their exchange
(:meth:`Method.strategy`) for a run of a given length.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.method import (
    METHOD_TYPES,
    Method,
    RunInfo,
    bits_label,
    check_int,
    check_quantize,
    chunks_or_default,
    match_spelling,
    parse_bits_or_mode,
    register_method,
)
from jaxgraph.comm.pipegcn import DEFAULT_MOMENTUM
from jaxgraph.comm.stale import CAGNET, Sancus, SkipG
from jaxgraph.comm.strategy import CommStrategy
from jaxgraph.configfile import from_dict
from jaxgraph.options import flag
from jaxgraph.partition.buckets import MAX_CHUNKS, QUANT_WIDTHS, check_param_dtype, check_widths


def _check_periodic(owner: str, period: int, chunks: int | None) -> None:
    check_int(f"{owner}.period", period, 0, what=" (0: epochs // 5)")
    if chunks is not None:
        check_int(f"{owner}.chunks", chunks, 0, MAX_CHUNKS, " (0: exact layouts)")


def _check_adaptive(owner: str, method) -> None:
    """The settings of AdaQP's widths (``period``, ``chunks``, ``score``, ``assign``), on
    method ``adaqp`` or on ``pipegcn`` with ``quantize="adaptive"``."""
    _check_periodic(owner, method.period, method.chunks)
    if method.score not in ("sum", "squares"):
        raise ValueError(f"{owner}.score must be 'sum' or 'squares', got {method.score!r}")
    if method.period and method.assign.lookahead >= method.period:
        raise ValueError(
            f"{owner}.assign.lookahead ({method.assign.lookahead} epochs) must be shorter than "
            f"{owner}.period ({method.period} epochs)"
        )


def _adaptive_exchange(
    method, *, epochs: int, seed: int, model: str, param_dtype: str = "float32"
) -> CommStrategy:
    """The :class:`~jaxgraph.comm.adaptive.Adaptive` exchange of those settings."""
    from jaxgraph.comm.adaptive import Adaptive

    return Adaptive(
        method.assign,
        period=RunInfo(epochs).period(method.period),
        norm=RunInfo(model=model).norm,
        seed=seed,
        chunks=chunks_or_default(method.chunks),
        squares=method.score == "squares",
        param_dtype=param_dtype,
    )


@dataclasses.dataclass(frozen=True)
class Vanilla(Method):
    """The uncompressed (fp32) ring all-to-all of halo rows."""

    key: ClassVar[str] = "vanilla"

    def label(self) -> str:
        return "vanilla"

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.strategy import Vanilla as VanillaExchange

        return VanillaExchange()


@dataclasses.dataclass(frozen=True)
class Quantized(Method):
    """Halo messages as ``bits``-bit codes (both passes).

    Attributes:
      bits: 2, 4 or 8; 32 sends fp32 through the same path; ``"random"`` draws a width from
        ``widths`` for every message, anew every ``period`` epochs (AdaQP's random baseline).
      widths: the candidate widths of ``"random"``.
      period: epochs per draw (0: ``epochs // 5``).
      chunks: layout of the exchange under changing widths: ``J >= 1`` one layout (and one
        compiled step) for the whole run; 0 exact buffers and a step per draw; ``None`` the
        backend's default (:func:`jaxgraph.partition.buckets.default_chunks`).
      compile_ahead: compile the next draw's step in a thread while the current one trains.
      param_dtype: the precision of each quantized row's ``(scale, lo)`` on the wire:
        ``"float32"`` (8 bytes per row) or ``"bfloat16"`` (4; the kernel rounds the parameters
        first, so the message stays unbiased; :mod:`pallas_kernels.quantize`).

    ``widths``, ``period``, ``chunks`` and ``compile_ahead`` apply to ``bits="random"`` only;
    ``param_dtype`` to every width but 32 (fp32 rows carry no parameters).
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
        _check_periodic("quantized", self.period, self.chunks)
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

    def exchange_chunks(self) -> int:
        return chunks_or_default(self.chunks) if self.bits == "random" else 0

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.quantized import Quantized as QuantizedExchange

        if self.bits != "random":
            return QuantizedExchange(self.bits, seed=seed, param_dtype=self.param_dtype)
        return QuantizedExchange(
            "random",
            period=RunInfo(epochs).period(self.period),
            seed=seed,
            chunks=chunks_or_default(self.chunks),
            widths=self.widths,
            param_dtype=self.param_dtype,
        )


@dataclasses.dataclass(frozen=True)
class AdaQP(Method):
    """Adaptive message quantization: the widths of every message group re-solved every
    ``period`` epochs from traced messages.

    Attributes:
      assign: the assignment problem and its solver (:class:`AssignConfig`).
      period: epochs per assignment period (0: ``epochs // 5``, as AdaQP).
      chunks: exchange layout, as :attr:`Quantized.chunks`.
      compile_ahead: with ``assign.lookahead``, compile the next period's step in a thread.
      score: a message's weight ``beta`` in the program: ``"sum"``, the square of the sum of
        its aggregation coefficients (the public AdaQP implementation), or ``"squares"``, their
        sum of squares (the seed's ``beta_k``, stated after its Theorem 3);
        :mod:`jaxgraph.comm.adaptive`.
      param_dtype: ``"bfloat16"`` sends each quantized row's ``(scale, lo)`` as bfloat16 (4
        bytes instead of 8), in the layouts and in the program's row times, as
        :attr:`Quantized.param_dtype`.
    """

    assign: AssignConfig = AssignConfig()
    period: int = flag("--assign-period", 0)
    chunks: int | None = flag("--exchange-chunks", None)
    compile_ahead: bool = True
    score: Literal["sum", "squares"] = "sum"
    param_dtype: str = "float32"

    key: ClassVar[str] = "adaqp"
    spellings: ClassVar[str] = "adaqp[-bf16]"

    @classmethod
    def parse(cls, text: str) -> AdaQP | None:
        return cls(param_dtype="bfloat16") if text == "adaqp-bf16" else super().parse(text)

    def __post_init__(self):
        if isinstance(self.assign, dict):
            object.__setattr__(self, "assign", from_dict(AssignConfig, self.assign, "adaqp.assign"))
        _check_adaptive("adaqp", self)
        try:
            check_param_dtype(self.param_dtype)
        except ValueError as e:
            raise ValueError(f"adaqp.{e}") from None

    def label(self) -> str:
        return "adaqp" + ("-bf16" if self.param_dtype == "bfloat16" else "")

    def exchange_chunks(self) -> int:
        return chunks_or_default(self.chunks)

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        return _adaptive_exchange(
            self, epochs=epochs, seed=seed, model=model, param_dtype=self.param_dtype
        )


@dataclasses.dataclass(frozen=True)
class PipeGCN(Method):
    """The ring exchange pipelined: halo rows and halo gradients one epoch stale.

    Attributes:
      stale: ``False`` runs the synchronous exchange (staleness off), for comparison.
      feature_momentum, gradient_momentum: ``gamma`` of the moving average of the stale halo
        rows (PipeGCN-F) or gradients (PipeGCN-G), in ``[0, 1)``; ``None`` for none.
      quantize: ``None`` (fp32 rows), or ``2``, ``4``, ``8``: the halo rows and halo
        gradients travel stochastically quantized at that width; ``32``: the quantized byte
        path with exact rows (:class:`jaxgraph.comm.pipegcn.PipeGCN`). ``"adaptive"``: widths
        per message group re-solved every ``period`` epochs by AdaQP's program from the stale
        messages' traces (needs ``stale``).
      period, assign, chunks, score: the adaptive widths' settings, as :class:`AdaQP`'s;
        they apply to ``quantize="adaptive"`` only.
    """

    stale: bool = True
    feature_momentum: float | None = None
    gradient_momentum: float | None = None
    quantize: int | Literal["adaptive"] | None = None
    period: int = flag("--assign-period", 0)
    assign: AssignConfig = AssignConfig()
    chunks: int | None = flag("--exchange-chunks", None)
    score: Literal["sum", "squares"] = "sum"

    key: ClassVar[str] = "pipegcn"
    spellings: ClassVar[str] = "pipegcn[-sync|-f|-g|-fg][-q<bits>|-qadaptive]"
    modes: ClassVar[tuple[str, ...]] = ("quantize",)
    _ADAPTIVE_ONLY: ClassVar[tuple[str, ...]] = ("period", "assign", "chunks", "score")

    @classmethod
    def parse(cls, text: str) -> PipeGCN | None:
        """``pipegcn``, ``-sync``, ``-f`` / ``-g`` / ``-fg`` (momentum 0.95; ``-f0.9g0.8``
        sets it), each with ``-q<2|4|8|32>`` or, stale, ``-qadaptive``."""
        g = match_spelling(
            r"pipegcn(?:-(?P<sync>sync)|-(?=[fg])(?P<f>f(?P<fm>0?\.\d+)?)?(?P<g>g(?P<gm>0?\.\d+)?)?)?"
            r"(?:-q(?P<q>2|4|8|32|adaptive))?",
            text,
        )
        if g is None:
            return None
        quantize = parse_bits_or_mode(g["q"])
        if g["sync"]:
            return cls(stale=False, quantize=quantize)
        f, m = _momentum(g["f"], g["fm"]), _momentum(g["g"], g["gm"])
        return cls(feature_momentum=f, gradient_momentum=m, quantize=quantize)

    @classmethod
    def taker(cls, field: str) -> str:
        return "pipegcn-qadaptive" if field in cls._ADAPTIVE_ONLY else cls.key

    def __post_init__(self):
        for name in ("feature_momentum", "gradient_momentum"):
            m = getattr(self, name)
            if m is not None and not 0.0 <= m < 1.0:
                raise ValueError(f"pipegcn.{name} must lie in [0, 1), got {m!r}")
        if not self.stale and (self.feature_momentum, self.gradient_momentum) != (None, None):
            raise ValueError("pipegcn momenta smooth stale halos: they need stale = true")
        if isinstance(self.assign, dict):
            object.__setattr__(
                self, "assign", from_dict(AssignConfig, self.assign, "pipegcn.assign")
            )
        if self.quantize == "adaptive":
            if not self.stale:
                raise ValueError(
                    "pipegcn.quantize = 'adaptive' needs stale = true (adaptive widths on the "
                    "synchronous ring are method adaqp)"
                )
            _check_adaptive("pipegcn", self)
            return
        check_quantize("pipegcn", self.quantize, adaptive=True)
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in self._ADAPTIVE_ONLY:
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"pipegcn.{name} applies to quantize='adaptive' only")

    def options(self) -> tuple[str, ...]:
        fields = super().options()
        if self.quantize == "adaptive":
            return fields
        return tuple(f for f in fields if f not in self._ADAPTIVE_ONLY)

    def label(self) -> str:
        bits = bits_label(self.quantize)
        if not self.stale:
            return "pipegcn-sync" + bits
        tag = ""
        for letter, m in (("f", self.feature_momentum), ("g", self.gradient_momentum)):
            if m is not None:
                tag += letter if m == DEFAULT_MOMENTUM else f"{letter}{m:g}"
        return (f"pipegcn-{tag}" if tag else "pipegcn") + bits

    def exchange_chunks(self) -> int:
        return chunks_or_default(self.chunks) if self.quantize == "adaptive" else 0

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.pipegcn import PipeGCN as PipeGCNExchange

        quantize = self.quantize
        if quantize == "adaptive":
            quantize = _adaptive_exchange(self, epochs=epochs, seed=seed, model=model)
        return PipeGCNExchange(
            stale=self.stale,
            feature_momentum=self.feature_momentum,
            gradient_momentum=self.gradient_momentum,
            quantize=quantize,
        )


def _momentum(flag, value) -> float | None:
    if not flag:
        return None
    return DEFAULT_MOMENTUM if value is None else float(value)


def _bits_or_random(value: str) -> int | str:
    return value if value == "random" else int(value)


# The built-in methods, in the order --method lists them.
for _cls in (Vanilla, Quantized, AdaQP, PipeGCN, CAGNET, Sancus, SkipG):
    register_method(_cls)


def parse_method(text: str | Method) -> Method:
    """The method a name or short spelling names, asking each registered type
    (:meth:`Method.parse`) in turn; a :class:`Method` is returned as it is.

    Raises:
      ValueError: for any other text (the message lists every type's spellings).
    """
    if isinstance(text, Method):
        return text
    for cls in METHOD_TYPES.values():
        method = cls.parse(str(text))
        if method is not None:
            return method
    forms = ", ".join(cls.spellings or cls.key for cls in METHOD_TYPES.values())
    raise ValueError(f"unknown method {text!r}; expected one of {forms}")


def method_from_dict(d) -> Method:
    """A method from a config file: its short spelling (``"adaqp"``) or a table with one key
    naming the type (``{"adaqp": {"period": 10}}``)."""
    if isinstance(d, str):
        return parse_method(d)
    if not isinstance(d, dict) or len(d) != 1:
        raise ValueError(
            "method must be a short spelling such as 'adaqp' or a table with one of the "
            f"sections {sorted(METHOD_TYPES)}, got {d!r}"
        )
    ((key, fields),) = d.items()
    if key not in METHOD_TYPES:
        raise ValueError(f"unknown method section [method.{key}]; known: {sorted(METHOD_TYPES)}")
    return from_dict(METHOD_TYPES[key], fields or {}, f"method.{key}")


__all__ = [
    "CAGNET",
    "RunInfo",
    "METHOD_TYPES",
    "AdaQP",
    "Method",
    "PipeGCN",
    "Quantized",
    "Sancus",
    "SkipG",
    "Vanilla",
    "method_from_dict",
    "parse_method",
    "register_method",
]
