"""Config files: a ``.toml`` or ``.json`` table read into frozen config dataclasses, and the
checks of their fields (:func:`check_int`, :func:`check`), whose errors name the field.

Training and embedding read their files through these functions, so both report a bad file
the same way: the file, then the dotted key (``config.model.hidden``, ``sgns.lr``) and what is
wrong with it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The table of a ``.json`` or ``.toml`` file (a ValueError naming the file where it cannot
    be read, has another suffix or is malformed)."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read config file {path}: {e}") from e
    try:
        if path.suffix == ".json":
            d = json.loads(text)
        elif path.suffix == ".toml":
            d = tomllib.loads(text.decode())
        else:
            raise ValueError(f"config file {path} must end in .json or .toml")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"config file {path} is malformed: {e}") from e
    if not isinstance(d, dict):
        raise ValueError(f"config file {path} must hold a table/object, got {type(d).__name__}")
    return d


def check_new_name(kind: str, name, builtin, registered, what: str) -> None:
    """Raises a ValueError unless ``name`` is a word that no built-in or registered ``kind``
    holds (``what``: what a user registers, for the message)."""
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise ValueError(f"a {kind}'s name must be a non-empty word, got {name!r}")
    if name in builtin:
        raise ValueError(f"{kind} {name!r} is built in; register a {what} under a new name")
    if name in registered:
        raise ValueError(f"{kind} {name!r} is already registered")


def load_config_file(path: str | Path, build: Callable[[dict[str, Any]], Any]):
    """``build`` of the table of ``path`` (:func:`read_config_file`); its ValueError names the
    file."""
    d = read_config_file(path)
    try:
        return build(d)
    except ValueError as e:
        raise ValueError(f"config file {path}: {e}") from e


def from_dict(
    cls,
    d: Any,
    where: str,
    *,
    convert: Mapping[str, Callable[[Any, str], Any]] | None = None,
    base=None,
):
    """``cls(**d)`` for a frozen dataclass, checked: unknown keys are named, a field whose
    default is a dataclass is read from its own sub-table (over that default's values), lists
    become tuples, and ``convert[name](value, where)`` builds the fields that need more (a
    method section, an optional sub-config). With ``base`` (an instance of ``cls``), the fields
    ``d`` leaves out keep ``base``'s values.

    Raises:
      ValueError: naming ``where`` (the dotted path of the table) and the key.
    """
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a table/object, got {type(d).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where}; known: {sorted(fields)}")
    convert = convert or {}
    kwargs = {}
    for k, v in d.items():
        default = fields[k].default
        if k in convert:
            kwargs[k] = convert[k](v, f"{where}.{k}")
        elif dataclasses.is_dataclass(default):
            kwargs[k] = from_dict(type(default), v, f"{where}.{k}", base=default)
        else:
            kwargs[k] = tuple(v) if isinstance(v, list) else v
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from e


def check_int(name: str, value, low: int, high: float = math.inf, what: str = "") -> None:
    """``value`` is an integer in ``[low, high]``, or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        span = f">= {low}" if high == math.inf else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {span}{what}, got {value!r}")


def check(where: str, ok: bool, value, allowed: str) -> None:
    """An error ``<where> must be <allowed>, got <value>`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{where} must be {allowed}, got {value!r}")


def is_real(value) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
