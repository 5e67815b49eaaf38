"""The training methods: one registry of typed, validated method configurations.

Each method is a frozen dataclass that is also the exchange it runs inside ``shard_map``
(:class:`~jaxgraph.comm.strategy.CommStrategy`): ``Vanilla`` (the fp32 ring all-to-all),
``Quantized`` (fixed or random bit-widths), ``AdaQP`` (widths from a mixed-integer program),
``PipeGCN`` (the ring exchange one epoch stale), ``CAGNET`` (block-row broadcasts), ``Sancus``
(skip-broadcast under a staleness bound) and ``SkipG`` (gradient reductions skipped under a
bound); each class's docstring and module say more. A config file names a method as a section
(``[method.adaqp]``) or by its short spelling (``method = "adaqp"``); the registry and the
spellings are :mod:`jaxgraph.comm.method`'s.
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
    """The method a name or short spelling names (each registered type's :meth:`Method.parse`
    asked in turn; a :class:`Method` as it is); for other text, a ValueError lists them all."""
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
