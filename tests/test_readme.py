"""Every ``jaxgraph`` command README shows: checked whole in the default suite (the options
parse and the config they build validates), and run to completion at a tiny size (slow).

The commands are read from README's code blocks, so a command added there is tested here.
Paths in them (``my_graph.npz``, ``friends.tsv``, ``experiments/configs/...``) resolve in a
temporary directory holding small graphs of those names and a link to ``experiments/``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from jaxgraph.cli import job_from_args, main

REPO = Path(__file__).resolve().parents[1]
# Multi-host flags: such a command runs here as one process (the multi-process runs have their
# own tests, tests/test_distributed*.py), with every other option as README gives it.
_HOST_FLAGS = {"--coordinator", "--num-processes", "--process-id"}


def readme_commands() -> list[list[str]]:
    """The argument lists of the ``jaxgraph`` commands in README's code blocks (a line
    continued with ``\\`` joined, comments dropped, a ``pip ... &&`` or ``srun ...`` prefix
    removed)."""
    text = (REPO / "README.md").read_text()
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if "jaxgraph" in words and words[0] in ("jaxgraph", "pip", "srun"):
                out.append(words[words.index("jaxgraph") + 1 :])
    return out


COMMANDS = readme_commands()


def _single_process(argv: list[str]) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in _HOST_FLAGS:
            skip = True
        else:
            out.append(word)
    return out


def _tiny(argv: list[str]) -> list[str]:
    """``argv`` at a tiny size: one epoch (30 with a lookahead), one short round of walks, at
    most 8 parts."""
    argv = _single_process(argv)
    argv = [
        str(min(int(w), 8)) if i and argv[i - 1] == "--parts" else w for i, w in enumerate(argv)
    ]
    if argv[0] == "train":
        # A lookahead must be shorter than the assignment period (epochs // 5).
        return [*argv, "--epochs", "30" if "--lookahead" in argv else "1"]
    if argv[0] == "embed":
        small = ["--rounds", "1", "--walk-length", "5", "--dim", "8", "--window", "2"]
        return [*argv, *small, "--shuffles", "1", "--train-ratios", "0.5"]
    return argv


@pytest.fixture
def readme_dir(tmp_path, monkeypatch):
    """A working directory with the files README's commands name."""
    rng = np.random.default_rng(0)
    n = 60
    src = rng.integers(0, n, 300)
    dst = rng.integers(0, n, 300)
    ring = np.arange(n)  # every node on a cycle: no isolated node
    src, dst = np.concatenate([src, ring]), np.concatenate([dst, np.roll(ring, 1)])
    edges = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])  # undirected
    np.savez(
        tmp_path / "my_graph.npz",
        edge_index=edges,
        x=rng.normal(size=(n, 8)).astype(np.float32),
        y=rng.integers(0, 3, n),
    )
    for name in ("friends.tsv", "edges.tsv"):
        lines = (f"u{a}\tu{b}" for a, b in edges.T)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "experiments").symlink_to(REPO / "experiments")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_shows_the_commands_of_every_subcommand():
    assert len(COMMANDS) >= 20
    assert {argv[0] for argv in COMMANDS} == {"datasets", "partition", "train", "embed"}


_JOB_TYPES = {"train": "TrainConfig", "embed": "EmbedJob", "partition": "PartitionJob"}


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_readme_command_is_a_valid_run(argv, readme_dir, capsys):
    """The options parse and the config they describe is whole and in range (``datasets``,
    which reads nothing, runs)."""
    argv = [w.replace("$i", "0") for w in argv]
    if argv[0] == "datasets":
        assert main(argv) == 0 and "cora" in capsys.readouterr().out
        return
    assert type(job_from_args(argv)).__name__ == _JOB_TYPES[argv[0]]


@pytest.mark.slow
@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_readme_command_runs(argv, readme_dir, capsys):
    assert main(_tiny(argv)) == 0, capsys.readouterr().err
