"""The documentation, tested: README.md and every page under docs/.

- The site builds with ``mkdocs build --strict`` (broken links, missing pages or anchors, and
  API references that do not resolve fail it).
- Every ``jaxgraph`` command in a ``bash``/``console``/``sh`` block runs to completion at a tiny
  size (1 epoch, one short round of walks, at most 2 parts), and every ``python`` block runs:
  a page's blocks in order, in one namespace, in a directory holding the small files the pages
  name (``my_graph.npz``, ``friends.tsv``, ...). A block that is only an excerpt takes another
  fence (```` ```text ````); a block that only includes an example file (``--8<--``) is run by
  the test that the example's page names.
- Every acronym and Greek symbol the pages use is in docs/glossary.md, and every public module
  of ``jaxgraph`` and ``pallas_kernels`` has a ``:::`` entry under docs/api/.

The commands and blocks are read from the pages, so a command added to or removed from the docs
is added to or removed from the test by the same edit. They run in one separate process (this
file, run as a script), with XLA's optimizations off and a compilation cache shared by the
commands: what is tested is that each completes, not how fast its program runs.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
PACKAGES = ("jaxgraph", "pallas_kernels")

SHELL_FENCES = {"bash", "console", "sh", "shell"}
# Multi-host flags: such a command runs here as one process (the multi-process runs have their
# own tests, tests/train/test_multihost.py), with every other option as the page gives it.
HOST_FLAGS = {
    "--coordinator",
    "--num-processes",
    "--process-id",
    "--init-timeout",
    "--heartbeat-timeout",
}
TINY_PARTS = 2
TINY_EMBED = ["--rounds", "1", "--walk-length", "5", "--dim", "8", "--window", "2"]
TINY_EVAL = ["--shuffles", "1", "--train-ratios", "0.5"]


# ---------------------------------------------------------------------------- reading the pages


def doc_pages() -> list[Path]:
    """README.md and the Markdown pages under docs/ that live there (``docs/experiments.md``
    and ``docs/results/`` are links to experiments/, whose own tests cover it)."""
    pages = [README]
    for root, dirs, files in os.walk(DOCS):  # does not descend into linked directories
        dirs[:] = sorted(d for d in dirs if not (Path(root) / d).is_symlink())
        pages += [
            Path(root) / f
            for f in sorted(files)
            if f.endswith(".md") and not (Path(root) / f).is_symlink()
        ]
    return pages


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def fenced_blocks(text: str) -> list[tuple[str, str, int, str]]:
    """``(language, body, line, line before)`` of every fenced block of ``text``; the body is
    dedented by the fence's indentation (blocks inside list items)."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        start, body = i, []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if close and close["fence"].startswith(fence) and not close["info"].strip():
                break
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        language = info.split()[0].lower() if info else ""
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        out.append((language, "\n".join(body), start + 1, before))
        i += 1
    return out


def shell_commands(body: str) -> list[list[str]]:
    """The ``jaxgraph`` argument lists of a shell block (continued lines joined, comments and
    prompts dropped; ``jaxgraph`` after ``&&``, ``srun`` or ``launch_local.py ... --``)."""
    out = []
    for line in re.sub(r"\\\n\s*", " ", body).splitlines():
        line = re.sub(r"^\s*\$\s+", "", line)
        if not line.strip():
            continue
        words = shlex.split(line, comments=True)
        parts, current = [], []
        for word in words:
            if word in ("&&", "||", ";", "|"):
                parts.append(current)
                current = []
            else:
                current.append(word)
        parts.append(current)
        for cmd in filter(None, parts):
            if "jaxgraph" in cmd and cmd[0] in ("jaxgraph", "srun", "mpirun", "env"):
                out.append(cmd[cmd.index("jaxgraph") + 1 :])
            elif any(w.endswith("launch_local.py") for w in cmd) and "--" in cmd:
                out.append(cmd[cmd.index("--") + 1 :])
    return out


_RUN_BY = re.compile(r"^\s*<!--\s*run by (?P<test>tests/[\w/]+\.py)\s*-->\s*$")


def run_elsewhere(page: Path, line: int, before: str) -> bool:
    """Whether the block is marked ``<!-- run by tests/X.py -->`` (the line before it), and
    that test exists and reads the page: such a block is that test's to run (an example that
    needs files of its own)."""
    m = _RUN_BY.match(before)
    if m is None:
        return False
    test = REPO / m["test"]
    assert test.is_file(), f"{rel(page)}:{line} says it is run by {m['test']}, which is missing"
    assert page.name in test.read_text(), (
        f"{rel(page)}:{line} says it is run by {m['test']}, which does not read {page.name}"
    )
    return True


def documented_commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every ``jaxgraph`` command of the pages, in page order (except in
    blocks that another test runs, :func:`run_elsewhere`)."""
    out = []
    for page in doc_pages():
        for language, body, line, before in fenced_blocks(page.read_text()):
            if language in SHELL_FENCES and not run_elsewhere(page, line, before):
                out += [(f"{rel(page)}:{line}", argv) for argv in shell_commands(body)]
    return out


_SNIPPET = re.compile(r"^\s*-{1,}8<-{1,}\s+[\"'](?P<path>[^\"']+)[\"']\s*$")


def expand_snippets(body: str) -> tuple[str, list[str]]:
    """``body`` with its ``--8<-- "path"`` lines replaced by the files (pymdownx.snippets,
    ``base_path`` the repository; ``path:a:b`` takes lines ``a..b``), and the included paths."""
    out, paths = [], []
    for line in body.split("\n"):
        m = _SNIPPET.match(line)
        if not m:
            out.append(line)
            continue
        path, *span = m["path"].split(":")
        paths.append(path)
        lines = (REPO / path).read_text().split("\n")
        if span:
            a = int(span[0] or 1)
            b = int(span[1]) if len(span) > 1 and span[1] else len(lines)
            lines = lines[a - 1 : b]
        out += lines
    return "\n".join(out), paths


def _tested_elsewhere(paths: list[str]) -> bool:
    """Whether every included file is named by a test file other than this one."""
    tests = [p for p in (REPO / "tests").rglob("test_*.py") if p.name != Path(__file__).name]
    texts = [p.read_text() for p in tests]
    return bool(paths) and all(any(path in t for t in texts) for path in paths)


def python_pages() -> tuple[list[dict], list[str]]:
    """The ``python`` blocks to run, one job per page, and the blocks that only include example
    files (run by the tests that name them)."""
    jobs, included = [], []
    for page in doc_pages():
        blocks = []
        for language, body, line, before in fenced_blocks(page.read_text()):
            if language not in ("python", "py", "python3") or run_elsewhere(page, line, before):
                continue
            code, paths = expand_snippets(body)
            only_includes = all(_SNIPPET.match(x) or not x.strip() for x in body.split("\n"))
            if only_includes and paths:
                included.append(f"{rel(page)}:{line}")
                assert _tested_elsewhere(paths), (
                    f"{rel(page)}:{line} includes {paths}, which no test under tests/ names"
                )
                continue
            blocks.append({"line": line, "code": code})
        if blocks:
            jobs.append({"kind": "python", "where": rel(page), "blocks": blocks})
    return jobs, included


# ------------------------------------------------------------------------- the commands, tiny


def single_process(argv: list[str]) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in HOST_FLAGS:
            skip = True
        elif word.split("=")[0] not in HOST_FLAGS:
            out.append(word)
    return out


def _drop(argv: list[str], option: str) -> tuple[list[str], str | None]:
    """``argv`` without ``option`` and its value, and the (last) value."""
    out, value, i = [], None, 0
    while i < len(argv):
        if argv[i] == option and i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out, value


def tiny(argv: list[str]) -> list[str]:
    """``argv`` at a tiny size, as one process: one epoch (a checkpoint every epoch where the
    command writes them), one round of short walks, at most :data:`TINY_PARTS` parts, absolute
    output paths made relative, shell variables set to 0."""
    argv = [re.sub(r"\$\{?\w+\}?", "0", w) for w in single_process(argv)]
    for option in ("--workdir", "--out"):
        argv = [w.lstrip("/") if i and argv[i - 1] == option else w for i, w in enumerate(argv)]
    command = argv[0]
    if command == "datasets":
        return argv
    argv, parts = _drop(argv, "--parts")
    if parts is not None or command in ("train", "partition"):
        argv += ["--parts", str(min(int(parts or TINY_PARTS), TINY_PARTS))]
    if command == "train":
        argv, _ = _drop(argv, "--epochs")
        argv, every = _drop(argv, "--checkpoint-every")
        argv, lookahead = _drop(argv, "--lookahead")
        if lookahead is not None:  # a lookahead must be shorter than the assignment period
            argv += ["--lookahead", "1", "--assign-period", "2", "--epochs", "3"]
        else:
            argv += ["--epochs", "1"]
        if every is not None:
            argv += ["--checkpoint-every", "1"]
        if "--no-progress" not in argv:
            argv.append("--no-progress")
    elif command == "embed":
        argv += [*TINY_EMBED, *TINY_EVAL, "--quiet"]
    return argv


def command_jobs() -> list[dict]:
    """One job per distinct tiny command, with every place the docs show it."""
    jobs: dict[tuple[str, ...], dict] = {}
    for where, argv in documented_commands():
        key = tuple(tiny(argv))
        jobs.setdefault(key, {"kind": "cli", "argv": list(key), "where": []})["where"].append(where)
    return list(jobs.values())


# ------------------------------------------------------------------------ the files they name


def make_doc_files(directory: Path) -> None:
    """The small files the pages name, in ``directory``: a PyG-style graph (``my_graph.npz``),
    edge lists with string ids (``friends.tsv``, ``edges.tsv``), features and labels for the
    latter, and a link to experiments/ (config files)."""
    rng = np.random.default_rng(0)
    n = 60
    src = rng.integers(0, n, 300)
    dst = rng.integers(0, n, 300)
    ring = np.arange(n)  # every node on a cycle: no isolated node
    src, dst = np.concatenate([src, ring]), np.concatenate([dst, np.roll(ring, 1)])
    edges = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])  # undirected
    np.savez(
        directory / "my_graph.npz",
        edge_index=edges,
        x=rng.normal(size=(n, 8)).astype(np.float32),
        y=rng.integers(0, 3, n),
    )
    for name in ("friends.tsv", "edges.tsv"):
        lines = (f"u{a}\tu{b}" for a, b in edges.T)
        (directory / name).write_text("\n".join(lines) + "\n")
    np.save(directory / "features.npy", rng.normal(size=(n, 8)).astype(np.float32))
    (directory / "labels.tsv").write_text("".join(f"u{v}\t{v % 3}\n" for v in range(n)))
    (directory / "experiments").symlink_to(REPO / "experiments")


# ------------------------------------------------------------------------------------ the runner


def _warning_filters() -> None:
    """pytest's ``filterwarnings`` of pyproject.toml, as ``warnings`` filters: a documented
    command or snippet that warns fails as a test would."""
    import tomllib
    import warnings

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    entries = config["tool"]["pytest"]["ini_options"].get("filterwarnings", [])
    for entry in entries:  # later entries take precedence, as in pytest
        action, *rest = entry.split(":")
        message = rest[0] if rest else ""
        category = Warning
        if len(rest) > 1 and rest[1]:
            import builtins

            category = getattr(builtins, rest[1], Warning)
        warnings.filterwarnings(action, message=re.escape(message), category=category)


def _run(job: dict, workdir: Path) -> dict:
    os.chdir(workdir)
    out = io.StringIO()
    t0 = time.perf_counter()
    result = {"where": job["where"], "ok": False}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            if job["kind"] == "cli":
                from jaxgraph.cli import main

                result["argv"] = job["argv"]
                result["ok"] = main(job["argv"]) == 0
            else:
                namespace: dict = {"__name__": "__main__"}
                for block in job["blocks"]:
                    result["line"] = block["line"]
                    code = compile(block["code"], f"{job['where']}:{block['line']}", "exec")
                    exec(code, namespace)  # the docs' own code
                result["ok"] = True
        except SystemExit as e:  # argparse
            print(f"exit {e.code}")
        except BaseException:
            print(traceback.format_exc())
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["output"] = out.getvalue()[-3000:]
    return result


def run_jobs(jobs_path: str, results_path: str) -> None:
    """Runs the jobs of ``jobs_path`` in order, each in a fresh directory holding the doc files,
    and writes the results after each (so a time-out still reports what ran)."""
    import jax

    _warning_filters()
    base = Path(results_path).parent
    jax.config.update("jax_compilation_cache_dir", str(base / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jobs = json.loads(Path(jobs_path).read_text())
    results = []
    for n, job in enumerate(jobs):
        workdir = base / f"job{n:03d}"
        workdir.mkdir()
        make_doc_files(workdir)
        results.append(_run(job, workdir))
        Path(results_path).write_text(json.dumps(results))


# --------------------------------------------------------------------------------------- tests


def test_readme_is_a_front_door():
    text = README.read_text()
    assert len(text) <= 10_000, f"README.md has {len(text)} characters (at most 10,000)"
    # CI installs and tests exactly as README says.
    assert 'python -m pip install -e ".[dev]"' in text
    assert "python -m pytest -q -n 2" in text


def test_docs_show_every_subcommand():
    commands = documented_commands()
    assert {argv[0] for _, argv in commands} == {"datasets", "partition", "train", "embed"}


@pytest.mark.parametrize("where_argv", documented_commands(), ids=lambda c: " ".join(c[1]))
def test_documented_command_is_a_valid_run(where_argv, tmp_path, monkeypatch, capsys):
    """Each command as the page gives it (one process): its options parse and the run it
    describes is whole and in range, before any data is read."""
    from jaxgraph.cli import job_from_args, main

    where, argv = where_argv
    make_doc_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = [re.sub(r"\$\{?\w+\}?", "0", w) for w in single_process(argv)]
    if argv[0] == "datasets":
        assert main(argv) == 0 and "cora" in capsys.readouterr().out
        return
    job = job_from_args(argv)
    expected = {"train": "TrainConfig", "embed": "EmbedJob", "partition": "PartitionJob"}
    assert type(job).__name__ == expected[argv[0]], where


def test_documented_commands_and_python_blocks_run(tmp_path):
    """Every distinct command at its tiny size, then every page's Python blocks, in one process
    (see the module docstring)."""
    pages, _ = python_pages()
    jobs = command_jobs() + pages
    jobs_path, results_path = tmp_path / "jobs.json", tmp_path / "results.json"
    jobs_path.write_text(json.dumps(jobs))
    flags = (
        "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
        "--xla_llvm_disable_expensive_passes=true"
    )
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, __file__, "--run", str(jobs_path), str(results_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    results = json.loads(results_path.read_text()) if results_path.exists() else []
    failed = [r for r in results if not r["ok"]]
    report = "\n\n".join(
        f"{r['where']}{' line ' + str(r['line']) if 'line' in r else ''}"
        f"{': jaxgraph ' + ' '.join(r['argv']) if 'argv' in r else ''}\n{r['output']}"
        for r in failed
    )
    assert proc.returncode == 0 and len(results) == len(jobs) and not failed, (
        f"{len(failed)} of {len(jobs)} failed, {len(jobs) - len(results)} did not run "
        f"(exit {proc.returncode}):\n{report}\n{proc.stderr[-3000:]}"
    )


def test_included_examples_are_tested_elsewhere():
    """A block that only includes an example file is left to the test that names the file
    (``python_pages`` checks that one does)."""
    python_pages()


# Words that are acronyms or names by their capitals: two or more capital letters.
_ACRONYM = re.compile(r"(?<![\w])[A-Za-z0-9]*[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*(?![\w])")
_GREEK = re.compile(r"[\u0370-\u03ff]")


def _prose(text: str) -> str:
    """``text`` without fenced blocks, inline code, link targets and HTML tags."""
    kept, fence = [], None
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if m and (fence is None or m["fence"].startswith(fence)):
            fence = m["fence"] if fence is None else None
            continue
        if fence is None:
            kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"``.+?``|`[^`\n]+`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"<[^>\n]+>", " ", text)
    return re.sub(r"https?://\S+", " ", text)


def test_glossary_names_every_acronym_and_symbol():
    glossary = (DOCS / "glossary.md").read_text()
    missing: dict[str, set[str]] = {}
    for page in doc_pages():
        text = page.read_text()
        prose = _prose(text)
        for word in set(_ACRONYM.findall(prose)):
            found = re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", glossary)
            if not found and word.endswith("s"):  # a plural: GPUs
                found = re.search(rf"(?<![\w]){re.escape(word[:-1])}(?![\w])", glossary)
            if not found:
                missing.setdefault(word, set()).add(rel(page))
        # Greek letters anywhere on a page, code included (Δ_E, λ, β_k).
        for letter in set(_GREEK.findall(text)):
            if letter not in glossary:
                missing.setdefault(letter, set()).add(rel(page))
    assert not missing, "not in docs/glossary.md: " + "; ".join(
        f"{word} ({', '.join(sorted(pages))})" for word, pages in sorted(missing.items())
    )


def public_modules() -> set[str]:
    """Every module of the packages whose dotted name has no part starting with ``_``."""
    out = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not any(p.startswith("_") for p in parts):
                out.add(".".join(parts))
    return out


def test_api_reference_lists_every_public_module():
    listed = set()
    for page in sorted((DOCS / "api").glob("*.md")):
        listed |= set(re.findall(r"^:::\s+([\w.]+)", page.read_text(), re.M))
    modules = public_modules()
    assert not modules - listed, f"no ::: entry under docs/api/: {sorted(modules - listed)}"
    stale = sorted(listed - modules)
    assert not stale, f"docs/api/ lists modules that do not exist: {stale}"


def test_docs_python_blocks_are_valid_python():
    """Cheap and first: a ``python`` block that does not parse is an excerpt in the wrong
    fence."""
    pages, _ = python_pages()
    for page in pages:
        for block in page["blocks"]:
            ast.parse(block["code"], filename=f"{page['where']}:{block['line']}")


def test_mkdocs_build_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert (tmp_path / "site" / "api" / "train" / "index.html").exists()
    shutil.rmtree(tmp_path / "site", ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--run":
        run_jobs(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"usage: python {Path(__file__).name} --run JOBS.json RESULTS.json")
