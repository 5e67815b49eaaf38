"""The training methods: one registry of typed, validated method configurations.

Each method of full-graph training is a frozen dataclass that is also the exchange it runs
inside ``shard_map`` (:class:`~jaxgraph.comm.strategy.CommStrategy`); it is checked on
construction with errors that name the field and its allowed values:

==============  ===================================================================
``Vanilla``     fp32 ring all-to-all of the halo rows (:mod:`jaxgraph.comm.strategy`)
``Quantized``   every halo message as ``bits``-bit codes, or widths drawn at random
                (:mod:`jaxgraph.comm.quantized`)
``AdaQP``       widths per message group from a mixed-integer program, per period
                (:mod:`jaxgraph.comm.adaptive`)
``PipeGCN``     the ring exchange one epoch stale, optionally smoothed
                (:mod:`jaxgraph.comm.pipegcn`)
``CAGNET``      1D block-row broadcasts (:mod:`jaxgraph.comm.cagnet`)
``Sancus``      skip-broadcast under a staleness bound, with local gradient clipping
                (:mod:`jaxgraph.comm.sancus`)
``SkipG``       broadcasts every epoch, gradient reductions skipped under a bound
                (:mod:`jaxgraph.comm.skipg`)
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
``skipg-2``; :meth:`Method.parse`) and spells itself back (:meth:`Method.label`). What a
method needs of the run (its length, seed and model) reaches its host half through
:meth:`~jaxgraph.comm.strategy.CommStrategy.controller` as a
:class:`~jaxgraph.comm.method.RunInfo`.
"""

from __future__ import annotations

from jaxgraph.comm.adaqp import AdaQP
from jaxgraph.comm.cagnet import CAGNET
from jaxgraph.comm.method import METHOD_TYPES, Method, RunInfo, register_method
from jaxgraph.comm.pipegcn import PipeGCN
from jaxgraph.comm.quantized import Quantized
from jaxgraph.comm.sancus import Sancus
from jaxgraph.comm.skipg import SkipG
from jaxgraph.comm.strategy import Vanilla
from jaxgraph.configfile import from_dict

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
