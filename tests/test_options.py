"""The command line is generated from the typed configs: every field of every config and
method type has its option in ``--help`` with a line of help, every option in ``--help`` maps
back to a field (or is one of the process-level options), and a method registered outside the
library trains from the command line and from a config file."""

import dataclasses
import json
import re
from typing import ClassVar

import pytest

from jaxgraph.cli import PROCESS_OPTIONS, _build_parser, _options, job_from_args, main
from jaxgraph.options import attribute_help
from jaxgraph.train import Vanilla
from jaxgraph.train.methods import METHOD_TYPES, register_method


def _help(command: str) -> str:
    parser = _build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    return sub.format_help()


@pytest.mark.parametrize("command", ["train", "embed", "partition"])
def test_every_field_has_its_option_and_every_option_a_field(command):
    options = _options(command)
    text = _help(command)
    listed = set(re.findall(r"^\s+(--[\w-]+)", text, re.M))
    listed |= set(re.findall(r"^\s+-h, (--help)", text, re.M))
    fields = set(options.by_flag) | set(options.negatives)
    selectors = {"--" + d.split(".")[-1] for d in options.choices}
    assert fields <= listed
    assert listed - fields - selectors <= set(PROCESS_OPTIONS)
    for name, targets in options.by_flag.items():
        for t in targets:  # every field is documented where it is declared
            assert attribute_help(t.cls).get(t.field), f"{t.cls.__name__}.{t.field} ({name})"


@pytest.fixture
def echo_method():
    """A method defined here, registered for the test and removed after it."""

    @register_method
    @dataclasses.dataclass(frozen=True)
    class Echo(Vanilla):
        """The fp32 ring exchange under another name (a method is its own exchange: this one
        inherits Vanilla's).

        Attributes:
          echo_rounds: how many times the name is said.
        """

        echo_rounds: int = 1
        key: ClassVar[str] = "echo"

        def __post_init__(self):
            if self.echo_rounds < 1:
                raise ValueError(f"echo.echo_rounds must be >= 1, got {self.echo_rounds}")

        def label(self) -> str:
            return "echo"

    yield Echo
    METHOD_TYPES.pop("echo")


def test_a_method_registered_outside_the_library_trains(echo_method, tmp_path, capsys):
    assert "--echo-rounds" in _help("train") and "echo" in _help("train")
    argv = ["train", "--dataset", "sbm", "--nodes", "64", "--num-features", "8", "--parts", "2"]
    argv += ["--epochs", "2", "--no-progress", "--hidden", "8"]
    assert main([*argv, "--method", "echo", "--echo-rounds", "3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "echo"
    path = tmp_path / "run.toml"
    path.write_text("[method.echo]\necho_rounds = 2\n")
    job = job_from_args(["train", "--config", str(path)])
    assert job.method == echo_method(2)
    assert main([*argv, "--config", str(path)]) == 0
    assert main([*argv, "--method", "echo", "--echo-rounds", "0"]) == 2
    assert "--echo-rounds (echo.echo_rounds) must be >= 1, got 0" in capsys.readouterr().err
    assert main([*argv, "--method", "vanilla", "--echo-rounds", "2"]) == 2
    assert "--echo-rounds applies to --method echo only" in capsys.readouterr().err


def test_help_of_switches_abbreviations_and_shared_options():
    """A switch that turns a default-on field off says so; a help sentence runs past "e.g."
    and "Eq."; an option that several methods take shows every value any of them takes."""
    train = _build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    embed = _build_parser()._subparsers._group_actions[0].choices["embed"].format_help()
    flat = lambda text: " ".join(text.split())  # noqa: E731
    assert "--no-progress turn off (on by default): show a progress bar" in flat(train)
    assert re.search(r'--interconnect STR .*\(e\.g\. "10gbe"\), a two-level', flat(train))
    assert re.search(r"--fabc-k INT\|none hot ranks; None chooses it by Eq\. 8 on", flat(embed))
    assert "--quantize INT|adaptive|random|none" in train  # PipeGCN's, Sancus's and CAGNET's
