"""Mutation testing of jaxgraph's host modules with mutmut, within a time budget.

mutmut (3.x, configured in ``[tool.mutmut]`` of pyproject.toml) copies ``jaxgraph/`` and
``tests/`` into ``mutants/``, rewrites each function of the modules in ``only_mutate`` into a
trampoline over its mutants, records which of the configured test files reach which function,
and runs, per mutant, only those tests. Its verdicts stay in ``mutants/**/*.meta``, so a run
that runs out of budget resumes where it stopped.

This script runs mutmut on the named modules (each in turn, within one overall budget), then
writes ``experiments/results/mutation.md`` from the verdicts: per module the mutants killed,
survived, timed out and not yet checked, and every survivor, either classified as equivalent
(``experiments/mutation_equivalent.toml``, kept by hand: mutant id -> reason) or listed as a
test gap with its diff. The report is generated: edit the TOML file or the tests, not it.

Not part of CI (it takes hours on 2 cores); see experiments/README.md. Usage::

    python experiments/mutation.py                        # every module, 1 h budget
    python experiments/mutation.py halo buckets --budget 900
    python experiments/mutation.py --report-only          # rewrite the report from mutants/
    python experiments/mutation.py sync --retest survived # rerun survivors after new tests

numba kernels (``@njit`` functions) are not mutated: mutmut 3 leaves every decorated function
alone, so the report lists them as not covered by this tool.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "experiments" / "results" / "mutation.md"
EQUIVALENT = ROOT / "experiments" / "mutation_equivalent.toml"

# Short name -> source files (must match only_mutate in pyproject.toml's [tool.mutmut]).
MODULES = {
    "assign": (
        "jaxgraph/comm/assign/__init__.py",
        "jaxgraph/comm/assign/frontier.py",
        "jaxgraph/comm/assign/milp.py",
        "jaxgraph/comm/assign/problem.py",
        "jaxgraph/comm/assign/solving.py",
    ),
    "halo": ("jaxgraph/partition/halo.py",),
    "buckets": ("jaxgraph/partition/buckets.py",),
    "sync": ("jaxgraph/embed/sync.py",),
    "feedback": ("jaxgraph/embed/feedback.py",),
    "corpus": ("jaxgraph/embed/corpus.py",),
    "walks": ("jaxgraph/embed/walks.py",),
}

# mutmut's exit-code verdicts (mutmut.stats.status_by_exit_code), folded into the report's.
KILLED = {1, 3, 37}
SURVIVED = {0}
TIMEOUT = {36, 24, -24, 152, 255}
NO_TESTS = {33, 5}


def verdict(exit_code: int | None) -> str:
    if exit_code is None:
        return "not checked"
    if exit_code in KILLED:
        return "killed"
    if exit_code in SURVIVED:
        return "survived"
    if exit_code in TIMEOUT:
        return "timeout"
    if exit_code in NO_TESTS:
        return "no tests"
    return "other"


def load_verdicts(module: str) -> dict[str, int | None]:
    """Mutant id -> mutmut exit code (None: not checked) for every mutant of ``module``."""
    out = {}
    for path in MODULES[module]:
        meta = ROOT / "mutants" / (path + ".meta")
        if meta.exists():
            out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def decorated_functions(path: str) -> list[str]:
    """Functions with a decorator other than staticmethod/classmethod: mutmut skips them."""
    tree = ast.parse((ROOT / path).read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.decorator_list:
            names = [ast.unparse(d) for d in node.decorator_list]
            if names not in (["staticmethod"], ["classmethod"]):
                out.append(f"`{node.name}` (line {node.lineno}, `@{', @'.join(names)}`)")
    return out


def run_module(
    module: str, budget_s: float, max_children: int, retest: set[str], sample: int | None
) -> None:
    """Runs mutmut on ``module``'s pending mutants for at most ``budget_s`` seconds.

    With ``sample``, only the unchecked ones among ``sample`` mutants drawn uniformly from the
    module's (seed 0: a rerun with a larger sample extends the same draw); mutants with a
    verdict in ``retest`` are always rerun."""
    verdicts = load_verdicts(module)
    if verdicts:
        names = sorted(verdicts)
        if sample is not None:
            names = random.Random(0).sample(names, min(sample, len(names)))
        names = sorted(k for k in names if verdict(verdicts[k]) == "not checked")
        names += sorted(k for k, v in verdicts.items() if verdict(v) in retest)
        if not names:
            print(f"{module}: every mutant (of the sample) has a verdict")
            return
    else:  # no mutants generated yet: let mutmut generate them and run the module's glob
        names = [_glob(path) for path in MODULES[module]]
    cmd = ["mutmut", "run", "--max-children", str(max_children), *names]
    print(f"{module}: {len(names)} mutant(s) or globs, budget {budget_s:.0f} s", flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        # SIGINT: mutmut stops its workers and keeps every verdict it has saved.
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _glob(path: str) -> str:
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return f"{module}.*"


def _diff(mutant: str) -> str:
    """mutmut's diff of ``mutant`` against the source, without the file header."""
    out = subprocess.run(
        ["mutmut", "show", mutant], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout
    lines = [
        ln
        for ln in out.splitlines()
        if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and ln.strip() not in "+-"
    ]
    return "\n".join(lines)


def write_report(modules: list[str]) -> None:
    equivalent = tomllib.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}
    rows, sections = [], []
    for module in modules:
        verdicts = load_verdicts(module)
        counts = {
            k: 0 for k in ("killed", "survived", "timeout", "no tests", "not checked", "other")
        }
        equiv, gaps = [], []
        for mutant, code in sorted(verdicts.items()):
            v = verdict(code)
            if v in ("survived", "no tests") and mutant in equivalent:
                equiv.append(mutant)
                continue
            counts[v] += 1
            if v in ("survived", "no tests", "other"):
                gaps.append((mutant, v))
        real = counts["killed"] + counts["timeout"] + counts["survived"] + counts["no tests"]
        real += counts["other"]
        score = 100.0 * (counts["killed"] + counts["timeout"]) / real if real else float("nan")
        rows.append(
            f"| `{module}` | {len(verdicts)} | {counts['killed']} | {counts['survived']} | "
            f"{counts['timeout']} | {counts['other']} | {counts['no tests']} | {len(equiv)} | "
            f"{counts['not checked']} | {score:.1f} % |"
        )
        body = [f"## `{module}`", "", "Files: " + ", ".join(f"`{p}`" for p in MODULES[module])]
        skipped = [f for p in MODULES[module] for f in decorated_functions(p)]
        if skipped:
            body += ["", "Not mutated (decorated; mutmut 3 skips them): " + "; ".join(skipped)]
        if gaps:
            body += ["", "Survivors that no test kills yet:", ""]
            for mutant, v in gaps:
                body += [f"- `{mutant}` ({v})", "", "  ```diff"]
                body += ["  " + ln for ln in _diff(mutant).splitlines()] + ["  ```"]
        if equiv:
            body += ["", "Equivalent mutants (experiments/mutation_equivalent.toml):", ""]
            body += [f"- `{m}`: {equivalent[m]}" for m in equiv]
        stale = sorted(
            m
            for m in equivalent
            if m.startswith(_glob(MODULES[module][0]).removesuffix("*"))
            and m in verdicts
            and verdict(verdicts[m]) not in ("survived", "no tests")
        )
        if stale:
            body += ["", "Classified as equivalent but no longer surviving: " + ", ".join(stale)]
        sections.append("\n".join(body))
    header = [
        "# Mutation testing",
        "",
        "Generated by `python experiments/mutation.py` (mutmut "
        f"{_mutmut_version()}, configuration in `[tool.mutmut]` of pyproject.toml); do not "
        "edit by hand. *Killed* counts mutants a test failed on, *timeout* those that ran past "
        "mutmut's time limit (detected: the mutant changed behaviour), *no tests* those whose "
        "function no configured test reaches, *crashed* those whose test process died (a "
        "numba kernel writing out of bounds: the change is seen, but counted as not killed). "
        "The score is (killed + timeout) / (all checked mutants that are not equivalent).",
        "",
        "| module | mutants | killed | survived | timeout | crashed | no tests | equivalent "
        "| not checked | score |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(header + rows) + "\n\n" + "\n\n".join(sections) + "\n")
    print(f"wrote {REPORT.relative_to(ROOT)}")


def _mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"some of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds, all modules")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument(
        "--retest",
        nargs="*",
        default=[],
        choices=["survived", "no tests", "timeout"],
        help="also rerun mutants with these verdicts (e.g. after adding tests)",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help="check at most this many mutants per module, a uniform draw (default: all)",
    )
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    modules = args.modules or list(MODULES)
    unknown = sorted(set(modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {', '.join(MODULES)}")
    if not args.report_only:
        deadline = time.monotonic() + args.budget
        for i, module in enumerate(modules):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # An even share of what is left, so that a slow module leaves time to the others.
            share = left / (len(modules) - i)
            run_module(module, share, args.max_children, set(args.retest), args.sample)
    write_report(list(MODULES))


if __name__ == "__main__":
    sys.exit(main())
