"""A griffe extension for the API reference: the reStructuredText the docstrings use, as Markdown.

jaxgraph's docstrings are Google style with a few reStructuredText habits that Markdown does not
read. Before mkdocstrings renders them this extension rewrites, in every docstring of the
package:

* cross-reference roles (``:class:`~jaxgraph.graph.Graph```, ``:func:`embed```, ``:mod:``,
  ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``) into links to the object's entry in the
  reference; a name without a module is looked up from the docstring's module and class, and a
  target the reference does not render stays code, unlinked;
* ``.. code-block::`` directives and a paragraph's closing ``::`` into an indented code block;
* simple tables (columns under ``====  ====`` rules) into a preformatted block.

It only changes what the site shows: the docstrings in the source stay as they are.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|type):"
    r"`(?P<body>[^`]+)`"
)
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
_RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")
_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. code-block::.*$")


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as written in ``obj``'s docstring (``target`` itself when it
    cannot be found: the link is then left out)."""
    scopes = []
    scope: Any = obj
    while scope is not None:
        if isinstance(scope, griffe.Module | griffe.Class):
            scopes.append(scope)
        scope = scope.parent
    package = scopes[-1] if scopes else None
    candidates = []
    if package is not None and target.split(".")[0] == package.name:
        candidates.append((package, target.split(".", 1)[1] if "." in target else ""))
    candidates += [(s, target) for s in scopes]
    for base, rest in candidates:
        try:
            found = base if not rest else base[rest]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if isinstance(found, griffe.Alias):
            try:
                return found.final_target.path
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                return found.target_path
        return found.path
    return target


def _roles(obj: griffe.Object, text: str) -> str:
    def link(match: re.Match) -> str:
        body = " ".join(match["body"].split())
        titled = _TITLED.match(body)
        if titled:
            title, target = titled["title"], titled["target"].lstrip("~")
        else:
            target = body.lstrip("~").rstrip("()")
            title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
        if body.endswith("()") and not title.endswith("()"):
            title += "()"
        identifier = _resolve(obj, target)
        return (
            f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>"
        )

    return _ROLE.sub(link, text)


def _blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _DIRECTIVE.match(line):  # the indented block below it is code already
            i += 1
            continue
        if _RULE.match(line):  # a simple table: up to its closing rule, preformatted
            end, rules = i, 0
            while end < len(lines) and lines[end].strip():
                rules += bool(_RULE.match(lines[end]))
                end += 1
                if rules == 3:
                    break
            indent = re.match(r"\s*", line).group(0)
            out += ["", *(f"{indent}    {row[len(indent) :]}" for row in lines[i:end]), ""]
            i = end
            continue
        stripped = line.rstrip()
        if stripped.endswith("::") and not stripped.endswith(":::"):
            head = stripped[:-2].rstrip()
            line = (head + ":") if head.strip() else ""
        out.append(line)
        i += 1
    return "\n".join(out)


def _outside_raises(obj: griffe.Object, text: str) -> str:
    """``text`` with its roles rewritten, except in a ``Raises:`` section, whose entries griffe
    reads as ``Type: description`` (an entry written as prose keeps its role as it is)."""
    chunks: list[tuple[bool, list[str]]] = []  # (in a Raises section, lines)
    raises = None
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip())
        if line.strip() == "Raises:":
            raises = indent
        elif raises is not None and line.strip() and indent <= raises:
            raises = None
        inside = raises is not None
        if chunks and chunks[-1][0] == inside:
            chunks[-1][1].append(line)
        else:
            chunks.append((inside, [line]))
    return "\n".join(
        "\n".join(lines) if inside else _roles(obj, "\n".join(lines)) for inside, lines in chunks
    )


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = _outside_raises(obj, _blocks(obj.docstring.value))
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias):
            _rewrite(member)


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of a loaded package (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._done: set[str] = set()

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path not in self._done:  # once, whichever hooks this griffe calls
            self._done.add(pkg.path)
            _rewrite(pkg)

    on_package_loaded = on_package  # the hook's name before griffe 2
