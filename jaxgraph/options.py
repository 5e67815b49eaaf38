"""Command-line options generated from the typed configs.

Every field of a frozen config dataclass is an option: its flag is the field's name
(``walk_length`` -> ``--walk-length``) unless :func:`flag` renames it, its type decides how
the text is read (``int``, ``float``, ``str``, ``Literal`` choices, ``X | None`` with
``none``, ``tuple[int, ...]``, booleans as switches), and its help is the field's entry in
the ``Attributes:`` section of its class docstring. Nested configs flatten into the same
namespace; a field whose value is one of several types (a :class:`Choice`: the method of a
training run, the replica sync of an embedding run) gets a selector option and the options of
every member type, each applying only when its type is chosen. Fields of different sections
that share a name share one option, which sets every one of them the config has.

A value out of range is refused by the config's own validation; the message is rewritten to
name the option (``--lr (optim.learning_rate) must be ...``). An option that sets no field of
the chosen configuration (``--score`` with ``--method vanilla``) is an error naming the
choices that take it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal


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

    def takes(self, cls: type, field: str) -> str:
        return self.taker(cls, field) if self.taker else self.name(cls)


@dataclasses.dataclass(frozen=True)
class _Target:
    path: tuple[Any, ...]  # attribute names, with a member type after a choice's name
    cls: type  # the dataclass that declares the field
    field: str
    hint: Any  # the field's resolved type

    def member(self) -> int | None:
        """The index in ``path`` of the chosen type the field belongs to, if any."""
        return next((i for i, p in enumerate(self.path) if isinstance(p, type)), None)


@functools.cache
def attribute_help(cls: type) -> dict[str, str]:
    """The first sentence of each field's entry in the ``Attributes:`` sections of ``cls``
    and its bases (``a, b: text`` documents both)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = klass.__dict__.get("__doc__") or ""
        lines = doc.expandtabs().splitlines()
        try:
            start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
        except StopIteration:
            continue
        indent, names, text = None, [], []
        for line in [*lines[start + 1 :], ""]:
            here = len(line) - len(line.lstrip())
            m = re.match(r"^(\s*)([\w, ]+):(\s|$)(.*)", line)
            if m and (indent is None or here == indent):
                indent = here
                for name in names:
                    out[name] = _sentence(" ".join(text))
                names = [n.strip() for n in m.group(2).split(",")]
                text = [m.group(4).strip()]
            elif line.strip() and indent is not None and here > indent:
                text.append(line.strip())
            elif indent is not None:
                break
        for name in names:
            out[name] = _sentence(" ".join(text))
    return out


def _sentence(text: str) -> str:
    text = text.replace("``", "").replace("%", "%%")
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    m = re.search(r"\.\s", text)
    return (text[: m.start()] if m else text.rstrip(".")).strip()


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _args(hint) -> tuple:
    return (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType)
        else (typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,))
    )


def _literals(hint) -> list:
    out = []
    for a in _args(hint):
        if typing.get_origin(a) is Literal:
            out += typing.get_args(a)
    return out


def convert(text: str, hint, option: str):
    """``text`` read as a value of type ``hint`` for ``option``.

    Raises:
      ValueError: naming the option and the types it takes.
    """
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
        elif a is int:
            try:
                return int(text)
            except ValueError:
                pass
        elif a is float:
            try:
                return float(text)
            except ValueError:
                pass
        elif a is str:
            return text
    wanted = [str(v) for v in _literals(hint)]
    wanted += [a.__name__ for a in members if a in (int, float)]
    wanted += ["none"] if type(None) in members else []
    raise ValueError(f"{option} takes {' or '.join(wanted)}, got {text!r}")


class Options:
    """The options of one config type: build them into a parser, read them back into an
    instance.

    Args:
      root: the config dataclass (its default instance gives each option's default).
      choices: the fields chosen among several types, by their attribute path (``"method"``).
    """

    def __init__(self, root: Any, choices: dict[str, Choice] | None = None):
        self.root = root
        self.choices = choices or {}
        self.by_flag: dict[str, list[_Target]] = {}
        self.negatives: dict[str, str] = {}
        self._walk(type(root), ())

    def _walk(self, cls: type, path: tuple) -> None:
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            here = (*path, f.name)
            dotted = ".".join(p for p in here if isinstance(p, str))
            if dotted in self.choices:
                for member in self.choices[dotted].types().values():
                    self._walk(member, (*here, member))
                continue
            section = _section_type(hints[f.name], f.default)
            if section is not None:
                self._walk(section, here)
                continue
            name = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            hint = hints[f.name]
            if hint is bool and f.default is True and "flag" not in f.metadata:
                name = "--no-" + f.name.replace("_", "-")
            if f.metadata.get("negative"):
                self.negatives[f.metadata["negative"]] = name
            self.by_flag.setdefault(name, []).append(_Target(here, cls, f.name, hint))

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Adds every option, grouped by section, to ``parser``."""
        groups: dict[str, Any] = {}
        for dotted, choice in self.choices.items():
            names = ", ".join(choice.types())
            g = groups.setdefault(dotted, parser.add_argument_group(f"{dotted} ({names})"))
            path = dotted.split(".")
            help_ = attribute_help(_owner(type(self.root), path)).get(path[-1], "")
            help_ += f": {choice.forms() if choice.forms else names}"
            g.add_argument(
                f"--{dotted.split('.')[-1]}",
                dest=f"choice:{dotted}",
                default=argparse.SUPPRESS,
                metavar="NAME",
                help=help_,
            )
        for name, targets in self.by_flag.items():
            t = targets[0]
            section = self._spelled(t.path[:-1])
            group = groups.get(section)
            if group is None:
                group = groups[section] = parser.add_argument_group(section or "run")
            help_ = attribute_help(t.cls).get(t.field, "")
            takers = self._takers(targets)
            if takers:
                help_ += f" [{takers}]"
            default = self._default(t)
            hint = t.hint
            kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS}
            if hint is bool or (set(_args(hint)) <= {bool, type(None)}):
                kw.update(action="store_const", const=not name.startswith("--no-"))
                negative = next((n for n, p in self.negatives.items() if p == name), None)
                if negative:
                    m = group.add_mutually_exclusive_group()
                    m.add_argument(name, help=help_, **kw)
                    m.add_argument(
                        negative,
                        dest=name,
                        action="store_const",
                        const=False,
                        default=argparse.SUPPRESS,
                        help=f"the opposite of {name}",
                    )
                    continue
            else:
                lits = _literals(hint)
                if any(typing.get_origin(a) is tuple for a in _args(hint)):
                    kw["nargs"] = "+"
                kw["metavar"] = (
                    "{" + ",".join(map(str, lits)) + "}"
                    if lits and len(_args(hint)) == 1
                    else _metavar(hint)
                )
                if default is not dataclasses.MISSING and default is not None:
                    help_ += f" (default: {_show(default)})"
            group.add_argument(name, help=help_, **kw)

    def _default(self, t: _Target):
        value = self.root
        for p in t.path:
            if isinstance(p, type):
                value = value if isinstance(value, p) else None
            else:
                value = getattr(value, p, dataclasses.MISSING) if value is not None else None
        if value is None or value is dataclasses.MISSING:
            f = {f.name: f for f in dataclasses.fields(t.cls)}[t.field]
            return f.default
        return value

    def _choice(self, t: _Target) -> tuple[int, Choice] | None:
        """The position of the chosen type in ``t.path`` and its choice, if any."""
        i = t.member()
        return None if i is None else (i, self.choices[".".join(t.path[:i])])

    def _spelled(self, path: tuple) -> str:
        """``path`` with each member type by its name (``method.sancus.bound``)."""
        names, choice = [], None
        for i, p in enumerate(path):
            if isinstance(p, type):
                choice = self.choices[".".join(path[:i])]
                names.append(choice.name(p))
            else:
                names.append(p)
        return ".".join(names)

    def _takers(self, targets: list[_Target]) -> str:
        out = []
        for t in targets:
            if (found := self._choice(t)) is not None:
                i, choice = found
                out.append(choice.takes(t.path[i], t.path[i + 1]))
        return ", ".join(dict.fromkeys(out))

    def read(self, base: Any, ns: argparse.Namespace) -> Any:
        """``base`` with every option given in ``ns`` (from a parser made by :meth:`add_to`).

        Raises:
          ValueError: an option out of its range or not applying to the chosen config (the
            message names the option).
        """
        given = {k: v for k, v in vars(ns).items() if k in self.by_flag}
        cfg = base
        for dotted, choice in self.choices.items():
            text = getattr(ns, f"choice:{dotted}", None)
            if text is not None:
                cfg = self._set(cfg, dotted.split("."), choice.make(text, cfg))
        # Options that decide which others apply (a method's ``modes``: ``--quantize``) first.
        first = {
            name: raw
            for name, raw in given.items()
            if any(self._is_mode(t) for t in self.by_flag[name])
        }
        cfg = self._read(cfg, first)
        return self._read(cfg, {n: v for n, v in given.items() if n not in first})

    def _read(self, cfg, given: dict[str, Any]):
        changes: dict[tuple, dict[str, Any]] = {}
        for name, raw in given.items():
            hit = [t for t in self.by_flag[name] if self._applies(cfg, t)]
            if not hit:
                targets = self.by_flag[name]
                chosen = self._chosen(cfg, targets[0])
                raise ValueError(
                    f"{name} applies to {self._takers_message(targets)} only, not {chosen}"
                )
            for t in hit:
                value = raw
                if isinstance(raw, str):
                    value = convert(raw, t.hint, name)
                elif isinstance(raw, list):
                    value = tuple(convert(x, t.hint, name) for x in raw)
                changes.setdefault(t.path[:-1], {})[t.field] = (value, name)
        return self._apply(cfg, changes)

    def _is_mode(self, t: _Target) -> bool:
        found = self._choice(t)
        return found is not None and t.path[found[0] + 1] in found[1].modes(t.path[found[0]])

    def _takers_message(self, targets) -> str:
        i = targets[0].member()
        return f"--{targets[0].path[i - 1]} " + " or ".join(
            dict.fromkeys(self._takers([x]) for x in targets)
        )

    def _chosen(self, cfg, t: _Target) -> str:
        i, choice = self._choice(t)
        return repr(choice.label(_get(cfg, t.path[:i])))

    def _applies(self, cfg, t: _Target) -> bool:
        value = cfg
        for i, p in enumerate(t.path[:-1]):
            if isinstance(p, type):
                choice = self.choices[".".join(t.path[:i])]
                if not isinstance(value, p) or not choice.applies(value, t.path[i + 1]):
                    return False
            elif value is None:
                return False
            else:
                value = getattr(value, p)
        return True

    def _apply(self, cfg, changes: dict[tuple, dict[str, Any]]):
        """Applies the deepest sections first, each through ``dataclasses.replace``."""
        for path in sorted(changes, key=len, reverse=True):
            fields = changes[path]
            section = _get(cfg, path)
            if section is None:  # an optional section, switched on by its options
                owner = _owner(type(self.root), path)
                section = _section_type(_hints(owner)[path[-1]], None)()
            try:
                section = dataclasses.replace(section, **{k: v for k, (v, _) in fields.items()})
            except ValueError as e:
                raise ValueError(self._name(str(e), path)) from e
            cfg = self._set(cfg, [p for p in path if isinstance(p, str)], section)
        return cfg

    def _set(self, cfg, names: Sequence[str], value):
        if not names:
            return value
        try:
            if len(names) == 1:
                return dataclasses.replace(cfg, **{names[0]: value})
            inner = self._set(getattr(cfg, names[0]), names[1:], value)
            return dataclasses.replace(cfg, **{names[0]: inner})
        except ValueError as e:
            raise ValueError(self._name(str(e))) from e

    def _name(self, message: str, within: tuple = ()) -> str:
        """``model.dropout must ...`` -> ``--dropout (model.dropout) must ...``, preferring
        the options of the section ``within`` where a field name is not unique."""
        word = message.split(" ", 1)[0]
        if word.startswith("--"):
            return message
        parts = word.split(".")
        found = []
        for name, targets in self.by_flag.items():
            for t in targets:
                spelled = self._spelled(t.path)
                if spelled.split(".")[-len(parts) :] == parts:
                    rank = (spelled != word, t.path[: len(within)] != within, len(t.path))
                    found.append((*rank, name))
        # Prefer the field spelled exactly, then the section that refused the value, then the
        # shallowest field.
        best = min(found, default=None)
        found = {name for *rank, name in found if rank == list(best[:3])} if best else set()
        if len(found) != 1:
            return message
        return f"{found.pop()} ({word}){message[len(word) :]}"


def _get(cfg, path):
    for p in path:
        if not isinstance(p, type):
            cfg = getattr(cfg, p) if cfg is not None else None
    return cfg


def _section_type(hint, default) -> type | None:
    """The config type of a nested section (a dataclass, or ``Dataclass | None``)."""
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return type(default)
    members = [a for a in _args(hint) if a is not type(None)]
    if len(members) == 1 and dataclasses.is_dataclass(members[0]):
        return members[0]
    return None


def _owner(cls: type, path: Sequence) -> type:
    """The config type that declares the last field of ``path`` (names, and member types
    after a choice's name), starting from ``cls``."""
    for p in path[:-1]:
        cls = p if isinstance(p, type) else _section_type(_hints(cls)[p], None)
    return cls


def _metavar(hint) -> str:
    names = [a.__name__.upper() for a in _args(hint) if a in (int, float, str)]
    names += [str(v) for v in _literals(hint)]
    names += ["none"] if type(None) in _args(hint) else []
    for a in _args(hint):
        if typing.get_origin(a) is tuple:
            names.append(typing.get_args(a)[0].__name__.upper())
    return "|".join(names) or "VALUE"


def _show(value) -> str:
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    return str(value)
