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

:meth:`Method.strategy` builds the communication strategy (:mod:`jaxgraph.comm`) a method
describes for a run of a given length.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, ClassVar, Literal

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.pipegcn import DEFAULT_MOMENTUM
from jaxgraph.comm.strategy import CommStrategy
from jaxgraph.configfile import from_dict
from jaxgraph.options import flag
from jaxgraph.partition.buckets import MAX_CHUNKS, QUANT_WIDTHS, check_param_dtype, check_widths

# The aggregation whose coefficients weigh a message in the adaptive assignment; GAT's
# attention coefficients are data-dependent and take the mean aggregator's as a proxy.
_MODEL_NORM = {"gcn": "gcn", "sage": "mean", "gat": "mean"}


class Method:
    """What every method type provides (a frozen dataclass below)."""

    key: ClassVar[str]  # the section name in a config file, [method.<key>]
    spellings: ClassVar[str] = ""  # the short spellings :meth:`parse` reads, for messages
    layout: ClassVar[str] = "halo"  # the plan it runs on: "halo" or "block"
    modes: ClassVar[tuple[str, ...]] = ()  # fields that decide which others apply
    # Whether the loop compiles the step of an already decided next state in a thread
    # (a field of the methods whose state changes between periods).
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

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        """The communication strategy of this method in a run of ``epochs`` epochs."""
        raise NotImplementedError

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


def _period(period: int, epochs: int) -> int:
    """Epochs per assignment period: ``period``, or ``epochs // 5`` (AdaQP's) for 0."""
    return period or max(epochs // 5, 1)


def _chunks(chunks: int | None) -> int:
    if chunks is not None:
        return chunks
    from jaxgraph.partition.buckets import default_chunks

    return default_chunks()


def _check_int(name: str, value, low: int, high: float = math.inf, what: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        top = "" if high == math.inf else f", {high}"
        raise ValueError(
            f"{name} must be an integer in [{low}{top}]{what}, got {value!r}"
            if top
            else f"{name} must be an integer >= {low}{what}, got {value!r}"
        )


def _check_periodic(owner: str, period: int, chunks: int | None) -> None:
    _check_int(f"{owner}.period", period, 0, what=" (0: epochs // 5)")
    if chunks is not None:
        _check_int(f"{owner}.chunks", chunks, 0, MAX_CHUNKS, " (0: exact layouts)")


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
        period=_period(method.period, epochs),
        norm=_MODEL_NORM.get(model, "mean"),
        seed=seed,
        chunks=_chunks(method.chunks),
        squares=method.score == "squares",
        param_dtype=param_dtype,
    )


METHOD_TYPES: dict[str, type[Method]] = {}


def register_method(cls: type[Method]) -> type[Method]:
    """Makes ``cls`` a method of ``jaxgraph train`` (``--method``, its options, config files
    with ``[method.<key>]``); returns it, so that it decorates the class."""
    METHOD_TYPES[cls.key] = cls
    return cls


_NUM = r"(?:inf|\d+(?:\.\d+)?)"


def _match(pattern: str, text: str) -> dict[str, str | None] | None:
    m = re.fullmatch(pattern, text)
    return None if m is None else m.groupdict()


@register_method
@dataclasses.dataclass(frozen=True)
class Vanilla(Method):
    """The uncompressed (fp32) ring all-to-all of halo rows."""

    key: ClassVar[str] = "vanilla"

    def label(self) -> str:
        return "vanilla"

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.strategy import Vanilla as VanillaExchange

        return VanillaExchange()


@register_method
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
        g = _match(r"quant-(?P<bits>2|4|8|32|random)(?P<bf16>-bf16)?", text)
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
        return _chunks(self.chunks) if self.bits == "random" else 0

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.quantized import Quantized as QuantizedExchange

        if self.bits != "random":
            return QuantizedExchange(self.bits, seed=seed, param_dtype=self.param_dtype)
        return QuantizedExchange(
            "random",
            period=_period(self.period, epochs),
            seed=seed,
            chunks=_chunks(self.chunks),
            widths=self.widths,
            param_dtype=self.param_dtype,
        )


@register_method
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
        return _chunks(self.chunks)

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        return _adaptive_exchange(
            self, epochs=epochs, seed=seed, model=model, param_dtype=self.param_dtype
        )


@register_method
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
        g = _match(
            r"pipegcn(?:-(?P<sync>sync)|-(?=[fg])(?P<f>f(?P<fm>0?\.\d+)?)?(?P<g>g(?P<gm>0?\.\d+)?)?)?"
            r"(?:-q(?P<q>2|4|8|32|adaptive))?",
            text,
        )
        if g is None:
            return None
        quantize = _bits_or_mode(g["q"])
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
        _check_quantize("pipegcn", self.quantize, adaptive=True)
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
        bits = _quantize_label(self.quantize)
        if not self.stale:
            return "pipegcn-sync" + bits
        tag = ""
        for letter, m in (("f", self.feature_momentum), ("g", self.gradient_momentum)):
            if m is not None:
                tag += letter if m == DEFAULT_MOMENTUM else f"{letter}{m:g}"
        return (f"pipegcn-{tag}" if tag else "pipegcn") + bits

    def exchange_chunks(self) -> int:
        return _chunks(self.chunks) if self.quantize == "adaptive" else 0

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


def _check_quantize(method: str, bits, *, adaptive: bool = False) -> None:
    if bits is not None and bits not in (2, 4, 8, 32):
        also = " or 'adaptive'" if adaptive else ""
        raise ValueError(
            f"{method}.quantize must be none, 2, 4, 8 or 32 (bits){also}, got {bits!r}"
        )


def _quantize_label(bits) -> str:
    return "" if bits is None else f"-q{bits}"


@register_method
@dataclasses.dataclass(frozen=True)
class CAGNET(Method):
    """1D block-row training: every block broadcast every epoch (CAGNET's 1D algorithm).

    Attributes:
      quantize: ``None`` (fp32 blocks), or ``2``, ``4``, ``8``: the blocks and the backward
        gradient sums travel stochastically quantized at that width
        (:mod:`jaxgraph.comm.qbroadcast`); ``32``: the same byte path, exact. ``"random"`` or
        ``"adaptive"``: a width per owner block and layer in each direction, as
        :class:`Sancus`'s (:mod:`jaxgraph.comm.blockwidths`).
      period, assign: as :class:`Sancus`'s, for ``quantize="random"`` or ``"adaptive"`` only.
    """

    quantize: int | Literal["random", "adaptive"] | None = None
    period: int = flag("--assign-period", 0)
    assign: AssignConfig = AssignConfig()

    key: ClassVar[str] = "cagnet"
    spellings: ClassVar[str] = "cagnet[-q<bits|random|adaptive>]"
    layout: ClassVar[str] = "block"
    modes: ClassVar[tuple[str, ...]] = ("quantize",)

    @classmethod
    def parse(cls, text: str) -> CAGNET | None:
        g = _match(r"cagnet(?:-q(?P<q>2|4|8|32|random|adaptive))?", text)
        return None if g is None else cls(_bits_or_mode(g["q"]))

    @classmethod
    def taker(cls, field: str) -> str:
        return "cagnet-q<random|adaptive>" if field in ("period", "assign") else cls.key

    def __post_init__(self):
        _check_block_widths("cagnet", self)

    def options(self) -> tuple[str, ...]:
        return _block_width_options(self, super().options())

    def label(self) -> str:
        return "cagnet" + _quantize_label(self.quantize)

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.stale import CAGNET as CAGNETExchange

        quantize = _block_quantize(self, epochs=epochs, seed=seed, model=model)
        return CAGNETExchange(quantize=quantize)


_BLOCK_MODES = ("random", "adaptive")


def _check_block_widths(owner: str, method) -> None:
    """``quantize``, ``period`` and ``assign`` of a block-row method: a fixed width, or widths
    per owner block (``"random"`` / ``"adaptive"``) with their period and program."""
    if isinstance(method.assign, dict):
        object.__setattr__(
            method, "assign", from_dict(AssignConfig, method.assign, f"{owner}.assign")
        )
    _check_int(f"{owner}.period", method.period, 0, what=" (0: epochs // 5)")
    if method.quantize in _BLOCK_MODES:
        default = AssignConfig()
        for name in ("group_size", "solver", "lookahead", "time_limit", "mip_gap"):
            if getattr(method.assign, name) != getattr(default, name):
                raise ValueError(
                    f"{owner}.assign.{name} applies to AdaQP's halo program, not to block "
                    "widths (which take widths, lam and interconnect)"
                )
        return
    _check_quantize(owner, method.quantize)
    defaults = {f.name: f.default for f in dataclasses.fields(method)}
    for name in ("period", "assign"):
        if getattr(method, name) != defaults[name]:
            raise ValueError(f"{owner}.{name} applies to quantize='random' or 'adaptive' only")


def _block_width_options(method, fields: tuple[str, ...]) -> tuple[str, ...]:
    if method.quantize in _BLOCK_MODES:
        return fields
    return tuple(f for f in fields if f not in ("period", "assign"))


def _block_quantize(method, *, epochs: int, seed: int, model: str):
    """The exchange's ``quantize``: the fixed width, or the
    :class:`~jaxgraph.comm.blockwidths.BlockQuantize` of widths per owner block."""
    if method.quantize not in _BLOCK_MODES:
        return method.quantize
    from jaxgraph.comm.blockwidths import BlockQuantize

    return BlockQuantize(
        method.quantize,
        period=_period(method.period, epochs),
        seed=seed,
        assign=method.assign,
        norm=_MODEL_NORM.get(model, "mean"),
    )


_POLICY_LETTER = {"epoch": "e", "adaptive": "a", "gap": "h"}


@register_method
@dataclasses.dataclass(frozen=True)
class Sancus(Method):
    """Staleness-aware skip-broadcast on the block-row layout.

    Attributes:
      policy: ``"epoch"`` (Δ_E: a block is re-broadcast when its copy is ``bound`` epochs
        old), ``"adaptive"`` (Δ_A) or ``"gap"`` (Δ_H: when the mean absolute difference to
        the last broadcast exceeds ``bound``).
      bound: Δ; whole epochs for ``epoch``/``adaptive``; ``math.inf`` never re-broadcasts.
      warmup: epochs ``1..warmup`` broadcast every block.
      clip: local gradient clipping threshold ``th`` (an L2 norm of ``sqrt(P) th`` per
        device), or ``None``.
      clip_at: what is clipped: ``"parameters"`` (each device's parameter-gradient partial
        before the all-reduce) or ``"embeddings"`` (Algorithm 1, line 22: the
        embedding-gradient message each device sends at every layer after the first); see
        :mod:`jaxgraph.comm.stale`.
      quantize: ``None`` (fp32 blocks), or ``2``, ``4``, ``8``: the blocks of the layers after
        the first and the backward gradient sums travel stochastically quantized, and the
        caches hold what the receivers decoded; ``32``: the same byte path, exact.
        ``"random"`` or ``"adaptive"``: a width per owner block and layer in each direction,
        drawn or chosen by AdaQP's bi-objective every ``period`` epochs
        (:mod:`jaxgraph.comm.blockwidths`).
      period: epochs per width assignment of ``"random"`` / ``"adaptive"`` (0: epochs // 5).
      assign: the candidate widths, ``lam`` and ``interconnect`` of those assignments (the
        other fields of :class:`AssignConfig` belong to the halo program and must keep their
        defaults).

    ``period`` and ``assign`` apply to ``quantize="random"`` or ``"adaptive"`` only.
    """

    policy: Literal["epoch", "adaptive", "gap"] = "epoch"
    bound: float = 1
    warmup: int = 50
    clip: float | None = None
    clip_at: Literal["parameters", "embeddings"] = "parameters"
    quantize: int | Literal["random", "adaptive"] | None = None
    period: int = flag("--assign-period", 0)
    assign: AssignConfig = AssignConfig()

    key: ClassVar[str] = "sancus"
    spellings: ClassVar[str] = (
        "sancus-<e|a|h><bound>[-w<warmup>][-clip<th>|-eclip<th>][-q<bits>] "
        "(e.g. sancus-e1, sancus-h0.04)"
    )
    layout: ClassVar[str] = "block"
    modes: ClassVar[tuple[str, ...]] = ("quantize",)

    @classmethod
    def parse(cls, text: str) -> Sancus | None:
        """``sancus-<e|a|h><bound>[-w<warmup>][-clip<th>|-eclip<th>][-q<bits>]``: ``e``
        epochs, ``a`` adaptive, ``h`` mean absolute gap; ``-clip`` clips parameter gradients,
        ``-eclip`` the embedding-gradient messages."""
        g = _match(
            rf"sancus-(?P<kind>[eah])(?P<bound>{_NUM})(?:-w(?P<warmup>\d+))?"
            rf"(?:-(?P<at>e?)clip(?P<clip>\d+(?:\.\d+)?))?(?:-q(?P<q>2|4|8|32|random|adaptive))?",
            text,
        )
        if g is None:
            return None
        return cls(
            {"e": "epoch", "a": "adaptive", "h": "gap"}[g["kind"]],
            float(g["bound"]),
            50 if g["warmup"] is None else int(g["warmup"]),
            None if g["clip"] is None else float(g["clip"]),
            "embeddings" if g["at"] else "parameters",
            _bits_or_mode(g["q"]),
        )

    @classmethod
    def taker(cls, field: str) -> str:
        return "sancus-<...>-q<random|adaptive>" if field in ("period", "assign") else cls.key

    def __post_init__(self):
        if self.policy not in _POLICY_LETTER:
            raise ValueError(
                f"sancus.policy must be one of {tuple(_POLICY_LETTER)}, got {self.policy!r}"
            )
        if isinstance(self.bound, str) and self.bound == "inf":
            object.__setattr__(self, "bound", math.inf)
        if not (isinstance(self.bound, int | float) and self.bound >= 0):
            raise ValueError(f"sancus.bound must be a number >= 0 (or inf), got {self.bound!r}")
        if self.policy != "gap" and not math.isinf(self.bound) and self.bound != int(self.bound):
            raise ValueError(
                f"sancus.bound of policy {self.policy!r} is whole epochs, got {self.bound!r}"
            )
        _check_int("sancus.warmup", self.warmup, 0)
        if self.clip is not None and not (
            isinstance(self.clip, int | float) and 0 < self.clip < math.inf
        ):
            raise ValueError(f"sancus.clip must be a positive number or none, got {self.clip!r}")
        if self.clip_at not in ("parameters", "embeddings"):
            raise ValueError(
                f"sancus.clip_at must be one of ('parameters', 'embeddings'), got {self.clip_at!r}"
            )
        if self.clip_at != "parameters" and self.clip is None:
            raise ValueError("sancus.clip_at applies only with a clipping threshold (sancus.clip)")
        _check_block_widths("sancus", self)

    def options(self) -> tuple[str, ...]:
        return _block_width_options(self, super().options())

    def label(self) -> str:
        text = f"sancus-{_POLICY_LETTER[self.policy]}{_number(self.bound)}"
        if self.warmup != 50:
            text += f"-w{self.warmup}"
        if self.clip is not None:
            prefix = "e" if self.clip_at == "embeddings" else ""
            text += f"-{prefix}clip{_number(self.clip)}"
        return text + _quantize_label(self.quantize)

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.stale import Sancus as SancusExchange
        from jaxgraph.comm.stale import StalenessPolicy

        policy = StalenessPolicy(self.policy, self.bound, self.warmup)
        clip = {
            "embedding_grad_clip" if self.clip_at == "embeddings" else "local_grad_clip": self.clip
        }
        quantize = _block_quantize(self, epochs=epochs, seed=seed, model=model)
        return SancusExchange(policy, quantize=quantize, **clip)


@register_method
@dataclasses.dataclass(frozen=True)
class SkipG(Method):
    """Broadcasts every epoch; a block's gradient reduction skipped while at most ``bound``
    epochs old (the SkipG baseline).

    Attributes:
      bound: Δ, whole epochs (``math.inf``: never again after the warm-up).
      warmup: epochs ``1..warmup`` reduce every block.
      quantize: ``None`` (fp32), or ``2``, ``4``, ``8``: the broadcasts and the reductions
        that run travel stochastically quantized; ``32``: the same byte path, exact.
    """

    bound: float = 1
    warmup: int = 50
    quantize: int | None = None

    key: ClassVar[str] = "skipg"
    spellings: ClassVar[str] = "skipg[-<bound>][-w<warmup>][-q<bits>]"
    layout: ClassVar[str] = "block"

    @classmethod
    def parse(cls, text: str) -> SkipG | None:
        g = _match(
            r"skipg(?:-(?P<bound>inf|\d+))?(?:-w(?P<warmup>\d+))?(?:-q(?P<q>2|4|8|32))?", text
        )
        if g is None:
            return None
        bound = 1 if g["bound"] is None else float(g["bound"])
        return cls(bound, 50 if g["warmup"] is None else int(g["warmup"]), _bits(g["q"]))

    def __post_init__(self):
        if isinstance(self.bound, str) and self.bound == "inf":
            object.__setattr__(self, "bound", math.inf)
        if not (
            isinstance(self.bound, int | float)
            and self.bound >= 0
            and (math.isinf(self.bound) or self.bound == int(self.bound))
        ):
            raise ValueError(f"skipg.bound must be whole epochs >= 0 (or inf), got {self.bound!r}")
        _check_int("skipg.warmup", self.warmup, 0)
        _check_quantize("skipg", self.quantize)

    def label(self) -> str:
        text = "skipg"
        if self.bound != 1:
            text += f"-{_number(self.bound)}"
        if self.warmup != 50:
            text += f"-w{self.warmup}"
        return text + _quantize_label(self.quantize)

    def strategy(self, *, epochs: int, seed: int = 0, model: str = "gcn") -> CommStrategy:
        from jaxgraph.comm.stale import SkipG as SkipGExchange

        return SkipGExchange(self.bound, self.warmup, quantize=self.quantize)


def _number(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:g}"


def _momentum(flag, value) -> float | None:
    if not flag:
        return None
    return DEFAULT_MOMENTUM if value is None else float(value)


def _bits(value) -> int | None:
    return None if value is None else int(value)


def _bits_or_mode(value: str | None) -> int | str | None:
    return value if value in ("random", "adaptive") else _bits(value)


def _bits_or_random(value: str) -> int | str:
    return value if value == "random" else int(value)


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
