"""The package's layers, checked on its module-level import graph: no import cycle, and no
layer importing one above it (host planning never imports the strategies or the loop; the
strategies never import the loop; embeddings never import full-graph training)."""

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "jaxgraph"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _import_graph() -> dict[str, set[str]]:
    """Module -> the jaxgraph modules it imports at its top level (imports inside functions
    run later and cannot form an import-time cycle)."""
    mods = _modules()
    graph = {m: set() for m in mods}

    def owner(target: str) -> str | None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        return target or None

    for name, path in mods.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                # `from package import submodule` needs the submodule, not a cycle through
                # the package that is being initialized.
                found = [s for s in subs if s in mods]
                targets = found if len(found) == len(subs) else [node.module, *found]
            else:
                continue
            for target in targets:
                t = owner(target)
                if t is not None and t != name:
                    graph[name].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "lower, higher",
    [
        ("jaxgraph.partition", "jaxgraph.comm"),
        ("jaxgraph.partition", "jaxgraph.train"),
        ("jaxgraph.comm", "jaxgraph.train"),
        ("jaxgraph.models", "jaxgraph.train"),
        ("jaxgraph.embed", "jaxgraph.train"),
        ("jaxgraph.data", "jaxgraph.train"),
    ],
)
def test_no_layer_imports_a_layer_above_it(lower, higher):
    graph = _import_graph()
    wrong = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m == lower or m.startswith(lower + ".")
        for t in targets
        if t == higher or t.startswith(higher + ".")
    )
    assert wrong == []


def _library_imports(path: Path):
    """``(module, name)`` of every ``from jaxgraph... / pallas_kernels... import name`` in
    ``path``, at any depth."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "jaxgraph",
            "pallas_kernels",
        ):
            yield from ((node.module, alias.name) for alias in node.names)


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (Path(__file__).parents[1] / "experiments").glob("*.py"))
)
def test_every_library_name_an_experiment_imports_exists(script):
    """A rename in the library breaks no experiment script silently (most run only by hand)."""
    path = Path(__file__).parents[1] / "experiments" / script
    for module, name in _library_imports(path):
        owner = importlib.import_module(module)
        assert hasattr(owner, name) or importlib.util.find_spec(f"{module}.{name}"), (
            f"{script} imports {name} from {module}, which has no such name"
        )
