"""Command-line options generated from the typed configs.

Every field of a frozen config dataclass is an option: its flag is the field's name
(``walk_length`` -> ``--walk-length``) unless :func:`flag` renames it, its type decides how
the text is read (``Literal`` choices, ``X | None`` with ``none``, ``tuple[int, ...]``,
booleans as switches), and its help is the first sentence of its ``Attributes:`` entry.
Nested configs flatten into one namespace (fields of one name share an option). A
:class:`Choice` field (a run's method) gets a selector option and the options of every member
type, each applying only when its type is chosen (else an error names the types that take it).
A value out of range is refused by the config's own validation, in a message naming the option.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union


def flag(name: str, default: Any = dataclasses.MISSING, *, negative: str | None = None):
    """A dataclass field whose option is spelled ``name`` (``--layers``); ``negative`` is the
    switch that sets an ``bool | None`` field to False (``--undirected``)."""
    return dataclasses.field(default=default, metadata={"flag": name, "negative": negative})


@dataclasses.dataclass(frozen=True)
class Choice:
    """A field whose value is one of several config types, chosen by one option.

    Attributes:
      types: the member types, by the name the selector takes.
      make: ``(text, config) -> instance``: the selector's text (a name, or a type's own short
        spelling) as the value of the field in ``config``.
      label: an instance's spelling, for messages.
      taker: ``(type, field) -> text`` naming what takes a field, for messages (default: the
        type's name).
      applies: ``(instance, field) -> bool``: whether a field takes effect under the
        instance's other settings (default: every field does).
      modes: ``type -> fields`` that decide which others apply; they are read first.
      forms: what the selector takes, for its help (default: the types' names).
    """

    types: Callable[[], dict[str, type]]
    make: Callable[[str, Any], Any]
    label: Callable[[Any], str]
    taker: Callable[[type, str], str] | None = None
    applies: Callable[[Any, str], bool] = lambda value, field: True
    modes: Callable[[type], tuple[str, ...]] = lambda cls: ()
    forms: Callable[[], str] | None = None

    def name(self, cls: type) -> str:
        """The name the selector takes for member type ``cls``."""
        return next(k for k, c in self.types().items() if c is cls)


@dataclasses.dataclass(frozen=True)
class _Target:
    path: tuple[Any, ...]  # attribute names, with a member type after a choice's name
    cls: type  # the dataclass that declares the field
    field: str
    hint: Any  # the field's resolved type
    default: Any  # the field's declared default
    choice: Choice | None  # the choice among whose member types the field is, if any
    at: int  # the index of that member type in ``path``

    def spelled(self, end: int | None = None) -> str:
        """``path[:end]`` with the member type by its name (``method.sancus.bound``)."""
        return ".".join(self.choice.name(p) if isinstance(p, type) else p for p in self.path[:end])

    def taker(self) -> str:
        """What of its choice takes the field ("" where there is no choice)."""
        if self.choice is None:
            return ""
        member, field = self.path[self.at : self.at + 2]
        return self.choice.taker(member, field) if self.choice.taker else self.choice.name(member)

    def is_mode(self) -> bool:
        """Whether the field decides which others of its member type apply."""
        if self.choice is None:
            return False
        member, field = self.path[self.at : self.at + 2]
        return field in self.choice.modes(member)

    def applies(self, cfg) -> bool:
        """Whether the field takes effect in ``cfg`` (its member type chosen and applying)."""
        for p in self.path[:-1]:
            if isinstance(p, type):
                if not (isinstance(cfg, p) and self.choice.applies(cfg, self.path[self.at + 1])):
                    return False
            elif cfg is None:
                return False
            else:
                cfg = getattr(cfg, p)
        return True


@functools.cache
def attribute_help(cls: type) -> dict[str, str]:
    """The first sentence of each field's entry in the ``Attributes:`` sections of ``cls``
    and its bases (``a, b: text`` documents both)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        lines = (klass.__dict__.get("__doc__") or "").expandtabs().splitlines()
        if "Attributes:" not in (stripped := [line.strip() for line in lines]):
            continue
        entries, indent = [], 0  # entries: (names, lines of text)
        for line in lines[stripped.index("Attributes:") + 1 :]:
            here = len(line) - len(line.lstrip())
            m = re.match(r"\s*([\w, ]+):(?:\s|$)(.*)", line)
            if m and (not entries or here == indent):
                indent = here
                entries.append(([n.strip() for n in m.group(1).split(",")], [m.group(2).strip()]))
            elif line.strip() and entries and here > indent:
                entries[-1][1].append(line.strip())
            elif entries:
                break
        for names, text in entries:
            out.update(dict.fromkeys(names, _sentence(" ".join(text))))
    return out


def _sentence(text: str) -> str:
    text = text.replace("``", "").replace("%", "%%")
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    m = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bEq)(?<!\bSec)(?<!\bFig)(?<!\bet al)\.\s", text)
    return (text[: m.start()] if m else text.rstrip(".")).strip()


def _args(hint) -> tuple:
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return typing.get_args(hint) if union else (hint,)


def _literals(hint) -> list:
    lits = (v for a in _args(hint) if typing.get_origin(a) is Literal for v in typing.get_args(a))
    return list(dict.fromkeys(lits))


def convert(text: str, hint, option: str):
    """``text`` read as a value of type ``hint`` (a ValueError names ``option`` and the types
    it takes)."""
    members = _args(hint)
    if text.lower() == "none" and type(None) in members:
        return None
    for a in members:
        origin = typing.get_origin(a)
        if origin is Literal:
            for v in typing.get_args(a):
                if str(v) == text:
                    return v
        elif origin is tuple:
            return convert(text, typing.get_args(a)[0], option)
        elif a in (int, float):
            with contextlib.suppress(ValueError):
                return a(text)
        elif a is str:
            return text
    wanted = [str(v) for v in _literals(hint)]
    wanted += [a.__name__ for a in members if a in (int, float)]
    wanted += ["none"] if type(None) in members else []
    raise ValueError(f"{option} takes {' or '.join(wanted)}, got {text!r}")


class Options:
    """The options of the config type of ``root`` (whose values are their defaults), with the
    fields ``choices`` chosen among several types, by attribute path (``"method"``)."""

    def __init__(self, root: Any, choices: dict[str, Choice] | None = None):
        self.root = root
        self.choices = choices or {}
        self.by_flag: dict[str, list[_Target]] = {}
        self.negatives: dict[str, str] = {}  # the switch that sets a field False -> its flag
        self._walk(type(root), (), None, -1)

    def _walk(self, cls: type, path: tuple, choice: Choice | None, at: int) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            here = (*path, f.name)
            dotted = ".".join(p for p in here if isinstance(p, str))
            if dotted in self.choices:
                for member in self.choices[dotted].types().values():
                    self._walk(member, (*here, member), self.choices[dotted], len(here))
            elif (section := _section_type(hints[f.name], f.default)) is not None:
                self._walk(section, here, choice, at)
            else:
                no = "no-" if hints[f.name] is bool and f.default is True else ""
                name = f.metadata.get("flag") or f"--{no}{f.name.replace('_', '-')}"
                if f.metadata.get("negative"):
                    self.negatives[f.metadata["negative"]] = name
                target = _Target(here, cls, f.name, hints[f.name], f.default, choice, at)
                self.by_flag.setdefault(name, []).append(target)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Adds every option, grouped by section, to ``parser``."""
        groups: dict[str, Any] = {}
        for dotted, choice in self.choices.items():
            names, path = ", ".join(choice.types()), dotted.split(".")
            help_ = attribute_help(_type_at(type(self.root), path[:-1])).get(path[-1], "")
            groups[dotted] = parser.add_argument_group(f"{dotted} ({names})")
            groups[dotted].add_argument(
                f"--{path[-1]}",
                dest=f"choice:{dotted}",
                default=argparse.SUPPRESS,
                metavar="NAME",
                help=f"{help_}: {choice.forms() if choice.forms else names}",
            )
        for name, targets in self.by_flag.items():
            t = targets[0]
            if (section := t.spelled(-1)) not in groups:
                groups[section] = parser.add_argument_group(section or "run")
            group = groups[section]
            help_ = attribute_help(t.cls).get(t.field, "")
            if takers := self._takers(targets):
                help_ += f" [{takers}]"
            kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS}
            if set(_args(t.hint)) <= {bool, type(None)}:
                kw.update(action="store_const", const=not name.startswith("--no-"))
                help_ = f"turn off (on by default): {help_}" if name.startswith("--no-") else help_
                negative = next((n for n, p in self.negatives.items() if p == name), None)
                if negative:  # the switch, then its opposite, one of them at most
                    group = group.add_mutually_exclusive_group()
                    group.add_argument(name, help=help_, **kw)
                    name, help_, kw["const"] = negative, f"the opposite of {name}", False
            else:
                if any(typing.get_origin(a) is tuple for a in _args(t.hint)):
                    kw["nargs"] = "+"
                kw["metavar"] = _metavar(Union[tuple(u.hint for u in targets)])  # noqa: UP007
                default = _get(self.root, t.path)  # the root's value, else the declared one
                default = t.default if default is None else default
                if default is not dataclasses.MISSING and default is not None:
                    shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
                    help_ += f" (default: {shown})"
            group.add_argument(name, help=help_, **kw)

    def _takers(self, targets: list[_Target]) -> str:
        return ", ".join(dict.fromkeys(filter(None, (t.taker() for t in targets))))

    def read(self, base: Any, ns: argparse.Namespace) -> Any:
        """``base`` with every option given in ``ns`` (from a parser made by :meth:`add_to`); a
        ValueError names an option out of its range or not applying to the chosen config."""
        given = {k: v for k, v in vars(ns).items() if k in self.by_flag}
        cfg = base
        for dotted, choice in self.choices.items():
            text = getattr(ns, f"choice:{dotted}", None)
            if text is not None:
                cfg = self._set(cfg, dotted.split("."), choice.make(text, cfg))
        # Options that decide which others apply (a method's ``modes``: ``--quantize``) first.
        first = [n for n in given if any(t.is_mode() for t in self.by_flag[n])]
        for names in (first, [n for n in given if n not in first]):
            cfg = self._read(cfg, {n: given[n] for n in names})
        return cfg

    def _read(self, cfg, given: dict[str, Any]):
        changes: dict[tuple, dict[str, Any]] = {}
        for name, raw in given.items():
            targets = self.by_flag[name]
            hit = [t for t in targets if t.applies(cfg)]
            if not hit:
                t = targets[0]
                takers = " or ".join(dict.fromkeys(x.taker() for x in targets))
                chosen = t.choice.label(_get(cfg, t.path[: t.at]))
                raise ValueError(
                    f"{name} applies to --{t.path[t.at - 1]} {takers} only, not {chosen!r}"
                )
            for t in hit:
                value = raw
                if isinstance(raw, str):
                    value = convert(raw, t.hint, name)
                elif isinstance(raw, list):
                    value = tuple(convert(x, t.hint, name) for x in raw)
                changes.setdefault(t.path[:-1], {})[t.field] = value
        # The deepest sections first, each through ``dataclasses.replace``.
        for path in sorted(changes, key=len, reverse=True):
            section = _get(cfg, path)
            if section is None:  # an optional section, switched on by its options
                section = _type_at(type(self.root), path)()
            try:
                section = dataclasses.replace(section, **changes[path])
            except ValueError as e:
                raise ValueError(self._name(str(e), path)) from e
            cfg = self._set(cfg, [p for p in path if isinstance(p, str)], section)
        return cfg

    def _set(self, cfg, names: Sequence[str], value):
        if not names:
            return value
        try:
            inner = self._set(getattr(cfg, names[0]), names[1:], value)
            return dataclasses.replace(cfg, **{names[0]: inner})
        except ValueError as e:
            raise ValueError(self._name(str(e))) from e

    def _name(self, message: str, within: tuple = ()) -> str:
        """``model.dropout must ...`` -> ``--dropout (model.dropout) must ...``, preferring
        the field spelled exactly, then the options of the section ``within``, then the
        shallowest field; unchanged unless that leaves one option."""
        word = message.split(" ", 1)[0]
        if word.startswith("--"):
            return message
        parts = word.split(".")
        found = [
            ((spelled != word, t.path[: len(within)] != within, len(t.path)), name)
            for name, targets in self.by_flag.items()
            for t in targets
            if (spelled := t.spelled()).split(".")[-len(parts) :] == parts
        ]
        top = min((rank for rank, _ in found), default=None)
        best = {name for rank, name in found if rank == top}
        if len(best) != 1:
            return message
        return f"{best.pop()} ({word}){message[len(word) :]}"


def _get(cfg, path):
    """The value at ``path`` in ``cfg`` (None past a None or a member type not chosen)."""
    for p in path:
        if isinstance(p, type):
            cfg = cfg if isinstance(cfg, p) else None
        else:
            cfg = getattr(cfg, p, None)
    return cfg


def _section_type(hint, default) -> type | None:
    """The config type of a nested section (a dataclass, or ``Dataclass | None``)."""
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return type(default)
    members = [a for a in _args(hint) if a is not type(None)]
    if len(members) == 1 and dataclasses.is_dataclass(members[0]):
        return members[0]
    return None


def _type_at(cls: type, path: Sequence) -> type:
    """The config type at ``path`` (names, a member type after a choice's) from ``cls``."""
    for p in path:
        cls = p if isinstance(p, type) else _section_type(typing.get_type_hints(cls)[p], None)
    return cls


def _metavar(hint) -> str:
    """``{a,b}`` for a ``Literal`` alone, else what it takes (``INT|none``)."""
    members, lits = _args(hint), _literals(hint)
    if lits and len(members) == 1:
        return "{" + ",".join(map(str, lits)) + "}"
    names = [a.__name__.upper() for a in members if a in (int, float, str)]
    names += [str(v) for v in lits] + (["none"] if type(None) in members else [])
    names += [_metavar(typing.get_args(a)[0]) for a in members if typing.get_origin(a) is tuple]
    return "|".join(names) or "VALUE"
