"""The command line: end-to-end runs on tiny data and clear errors."""

import json
from pathlib import Path

import pytest

from jaxgraph.cli import main
from jaxgraph.train import TrainConfig, load_config

CONFIGS = sorted((Path(__file__).parents[1] / "experiments" / "configs").glob("*.*"))


def test_two_epoch_training_run(tmp_path, capsys):
    """Two epochs of adaptive quantization: epoch 2 runs on a solved assignment."""
    rc = main(
        [
            "train",
            "--dataset",
            "sbm",
            "--nodes",
            "400",
            "--model",
            "sage",
            "--parts",
            "4",
            "--epochs",
            "2",
            "--hidden",
            "16",
            "--no-progress",
            "--workdir",
            str(tmp_path),
            "--method",
            "adaqp",
            "--assign-period",
            "1",
            "--lam",
            "0.2",
            "--group-size",
            "8",
            "--interconnect",
            "nvlink3:2:10gbe",
            "--assign-solver",
            "frontier",
            "--widths",
            "4",
            "2",
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["epochs"] == 2 and summary["parts"] == 4 and summary["model"] == "sage"
    # On CPU the default layout is chunked: the solved assignment reuses the first step.
    assert summary["method"] == "adaqp" and summary["exchange_chunks"] == 6
    assert summary["compiled_steps"] == 1
    assert 0.0 <= summary["test_at_best"] <= 1.0
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [1, 2]
    assert "widths" not in lines[0] and set(lines[1]["widths"]) == {"fwd0", "fwd1", "bwd1"}
    assert "10gbe across 2 hosts" in lines[1]["cost_model"]
    # Candidate widths 2 and 4: the solved assignment uses nothing else.
    for key, counts in lines[1]["widths"].items():
        assert set(counts) <= {"2", "4"} and sum(counts.values()) > 0, key
    for key in ("fwd0", "fwd1", "bwd1"):  # the exact solver: optimal, gap 0
        assert lines[1]["solver"][key]["status"] in ("optimal", "fast_path")
        assert lines[1]["solver"][key]["solve_seconds"] >= 0


def test_partition_report_and_heatmap(tmp_path, capsys):
    png = tmp_path / "pairs.png"
    assert main(["partition", "--dataset", "cora", "--parts", "4", "--heatmap", str(png)]) == 0
    out = capsys.readouterr().out
    assert "edge cut" in out.lower() and "4 parts" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--dataset", "nope", "--epochs", "1"], "unknown dataset 'nope'"),
        (
            ["train", "--dataset", "sbm", "--nodes", "300", "--parts", "16", "--epochs", "1"],
            "xla_force_host_platform_device_count",
        ),
        (["train", "--config", "missing.toml"], "cannot read config file missing.toml"),
        (["train", "--method", "adaqp", "--lam", "2"], "--lam (lam) must lie in [0, 1], got 2"),
        (["train", "--method", "adaqp", "--interconnect", "56k"], "unknown interconnect '56k'"),
        (
            ["train", "--method", "adaqp", "--assign-solver", "cplex"],
            "--assign-solver (solver) must be one of ('milp', 'frontier'), got 'cplex'",
        ),
        (
            ["train", "--method", "quant-random", "--widths", "2", "16"],
            "candidate bit-widths must be distinct values from (2, 4, 8) (at least one), "
            "got (2, 16)",
        ),
    ],
)
def test_errors_exit_2_with_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "method, option",
    [
        ("vanilla", ["--lam", "0.5"]),
        ("vanilla", ["--widths", "2", "4"]),
        ("quant-4", ["--exchange-chunks", "2"]),
        ("vanilla", ["--param-dtype", "bfloat16"]),
        ("quant-32", ["--param-dtype", "bfloat16"]),  # fp32 rows carry no parameters
        ("sancus-h0.04", ["--param-dtype", "bfloat16"]),
        ("quant-2", ["--assign-period", "5"]),
        ("quant-random", ["--interconnect", "10gbe"]),
        ("quant-random", ["--lookahead", "2"]),
        ("adaqp", ["--epochs", "1", "--group-size", "0"]),  # applies: its own range error
        ("pipegcn-fg", ["--assign-solver", "frontier"]),
        ("cagnet", ["--group-size", "100"]),
        ("sancus-h0.04", ["--assign-period", "10"]),
        ("skipg", ["--no-compile-ahead"]),
    ],
)
def test_an_option_of_another_method_is_an_error(method, option, capsys):
    """Checked before any data is read (the dataset does not exist)."""
    argv = ["train", "--dataset", "nope", "--method", method, *option]
    assert main(argv) == 2
    err = capsys.readouterr().err
    if method == "adaqp":
        assert "applies to" not in err
        return
    flag = option[0] if option[0] != "--epochs" else option[2]
    assert f"{flag} applies to --method " in err and f"only, not {method!r}" in err, err


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert isinstance(cfg, TrainConfig) and cfg != TrainConfig()


def test_config_unknown_key(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": {"name": "gcn", "hiddn": 3}}')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['hiddn'\] in config.model"):
        load_config(bad)


@pytest.mark.parametrize(
    "argv, devices",
    [
        (["embed", "--dataset", "cora"], 1),  # one replica: one device
        (["embed", "--dataset", "cora", "--parts", "4"], 4),  # as many as the run uses
        (["embed", "--dataset", "cora", "--parts", "0"], 1),  # refused later, with its name
        (["train", "--dataset", "cora"], 8),
        (["--cpu-devices", "3", "embed", "--dataset", "cora"], 3),  # an explicit count wins
        (["embed", "--dataset", "cora", "--cpu-devices", "3"], 3),  # after the command too
        (["train", "--cpu-devices", "2", "--parts", "2"], 2),
        (["partition", "--cpu-devices", "5"], 5),
    ],
)
def test_emulated_cpu_device_count(argv, devices):
    from jaxgraph.cli import _build_parser, _cpu_devices

    assert _cpu_devices(_build_parser().parse_args(argv)) == devices


def test_emulated_cpu_device_count_must_be_positive():
    from jaxgraph.cli import _build_parser, _cpu_devices

    with pytest.raises(SystemExit, match="--cpu-devices must be >= 1, got 0"):
        _cpu_devices(_build_parser().parse_args(["--cpu-devices", "0", "datasets"]))


def test_notes_go_to_the_stderr_of_each_call(monkeypatch):
    """Each command sends the library's notes to the stderr in force when it runs, not to the
    one of the first command in the process (a test or a notebook swaps it in between)."""
    import io
    import logging
    import sys

    from jaxgraph.cli import _log_notes

    for _ in range(2):
        stream = io.StringIO()
        monkeypatch.setattr(sys, "stderr", stream)
        _log_notes()
        logging.getLogger("jaxgraph").info("removed 1 self-loop")
        assert stream.getvalue() == "jaxgraph: note: removed 1 self-loop\n"
        stream.close()  # as a test's captured stderr is, once the test ends
