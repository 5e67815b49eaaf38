"""The bad-input catalogue of the command line: each case exits 2 with a message that names the
option (or file) and its range, before any data is read or any JAX work is done, and writes
nothing.

Option cases name the dataset ``nope``: a run that got past validation would fail on the
unknown dataset instead, so the message shows that validation came first. The readers' own
catalogue (malformed, truncated and inconsistent files of every format) is in
``tests/data/test_files.py``; checkpoints in ``tests/train/test_loop.py`` and
``tests/embed/test_pipeline.py``; coordinator addresses in ``tests/test_distributed.py``.
"""

import json
import math

import numpy as np
import pytest

from jaxgraph.cli import main

TRAIN_OPTIONS = [
    (["--lr", "nan"], "--lr (optim.learning_rate) must be a finite number > 0, got nan"),
    (["--lr", "0"], "--lr (optim.learning_rate) must be a finite number > 0, got 0.0"),
    (["--lr", "inf"], "--lr (optim.learning_rate) must be a finite number > 0, got inf"),
    (["--dropout", "1.5"], "--dropout (model.dropout) must be a number in [0, 1), got 1.5"),
    (["--dropout", "-0.1"], "--dropout (model.dropout) must be a number in [0, 1), got -0.1"),
    (["--epochs", "-4"], "--epochs (epochs) must be an integer >= 1, got -4"),
    (["--hidden", "0"], "--hidden (model.hidden) must be an integer >= 1, got 0"),
    (["--layers", "0"], "--layers (model.num_layers) must be an integer >= 1, got 0"),
    (["--weight-decay", "-1"], "--weight-decay (optim.weight_decay) must be a finite number >= 0"),
    (["--parts", "0"], "--parts (parts) must be an integer >= 1, got 0"),
    (["--eval-every", "0"], "--eval-every (eval_every) must be an integer >= 1, got 0"),
    (["--checkpoint-every", "-1"], "--checkpoint-every (checkpoint_every) must be an integer >= 0"),
    (["--seed", "-1"], "--seed (seed) must be an integer >= 0, got -1"),
    (["--nodes", "0"], "--nodes (data.num_nodes) must be an integer >= 1, got 0"),
    (["--method", "bogus"], "unknown method 'bogus'; expected one of vanilla, quant-<"),
    (["--method", "quant-3"], "unknown method 'quant-3'"),
    (
        ["--method", "vanilla", "--score", "squares"],
        "--score applies to --method adaqp or pipegcn-qadaptive only",
    ),
    (["--method", "adaqp", "--lookahead", "5", "--assign-period", "5"], "must be shorter than"),
    (["--format", "pyg"], "--format (data.format) applies to a graph file (data.graph) only"),
    (
        ["--features", "x.npy"],
        "--features (data.features) applies to a graph file (data.graph) only",
    ),
    (["--directed"], "--directed (data.directed) applies to a graph file (data.graph) only"),
]


@pytest.mark.parametrize("option, message", TRAIN_OPTIONS, ids=lambda x: " ".join(x)[:40])
def test_train_option_out_of_range(option, message, tmp_path, capsys):
    workdir = tmp_path / "run"
    argv = ["train", "--dataset", "nope", "--workdir", str(workdir), "--no-progress", *option]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "nope" not in err  # validated before the dataset was looked up
    assert not workdir.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        # P larger than the node count: the partition count's message, not the generator's.
        (
            ["--dataset", "sbm", "--nodes", "6", "--parts", "8"],
            "--nodes (data.num_nodes) must be at least data.num_classes = 8 for an sbm graph, "
            "got 6",
        ),
        (["--graph", "g.npz", "--dataset", "cora"], "give --dataset or --graph, not both"),
    ],
)
def test_train_inconsistent_options(argv, message, tmp_path, capsys):
    workdir = tmp_path / "run"
    assert main(["train", "--workdir", str(workdir), "--no-progress", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not workdir.exists()


def test_workdir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("keep")
    assert main(["train", "--dataset", "nope", "--workdir", str(target)]) == 2
    assert f"--workdir {target} is a file, not a directory" in capsys.readouterr().err
    assert target.read_text() == "keep"


EMBED_OPTIONS = [
    (["--dim", "0"], "--dim (dim) must be positive, got 0"),
    (["--window", "0"], "--window (window) must be positive, got 0"),
    (["--negatives", "-1"], "--negatives (negatives) must be positive, got -1"),
    (["--sample", "nan"], "--sample (sample) must be a finite number"),
    (["--walk-length", "1"], "--walk-length (walk_length) must be >= 2 to train"),
    (["--walks-per-node", "0"], "--walks-per-node (walks_per_node) must be >= 1, got 0"),
    (["--rounds", "0"], "--rounds (rounds) must be >= 1, got 0"),
    (["--p", "0"], "--p (p) must be a finite number > 0 (node2vec), got 0.0"),
    (["--q", "nan"], "--q (q) must be a finite number > 0 (node2vec), got nan"),
    (["--q", "inf"], "--q (q) must be a finite number > 0 (node2vec), got inf"),
    (["--mu", "2"], "--mu (mu) must lie in [-1, 1] (Psi is a mean cosine), got 2.0"),
    (["--neighbors", "0"], "--neighbors (num_neighbors) must be >= 1, got 0"),
    (["--stop-ratio", "1.5"], "--stop-ratio (stop_ratio) must be in (0, 1], got 1.5"),
    (["--warmup-rounds", "-1"], "--warmup-rounds (warmup_rounds) must be >= 0, got -1"),
    (["--lr", "nan"], "--lr (lr) must be a finite number > 0, got nan"),
    (["--lr", "-1"], "--lr (lr) must be a finite number > 0, got -1.0"),
    (["--lr-decay", "-1"], "--lr-decay (lr_decay) must be a finite number >= 0, got -1.0"),
    (["--init-scale", "0"], "--init-scale (init_scale) must be a finite number > 0, got 0.0"),
    (["--batch-size", "0"], "--batch-size (batch_size) must be positive, got 0"),
    (
        ["--shared-negatives", "3"],
        "--shared-negatives (shared_negatives) must be in [1, batch_size = 1024] and divide it",
    ),
    (["--sync-every", "0"], "--sync-every (sync_every) must be positive, got 0"),
    (["--max-norm", "nan"], "--max-norm (max_norm) must be positive, got nan"),
    (["--parts", "0"], "--parts (parts) must be an integer >= 1, got 0"),
    (["--nodes", "0"], "--nodes (data.num_nodes) must be an integer >= 1, got 0"),
    (["--seed", "-1"], "--seed (seed) must be non-negative, got -1"),
    (["--row-cap", "0"], "--row-cap (row_cap) must be >= 1 or None, got 0"),
    (["--shuffles", "0"], "--shuffles (shuffles) must be an integer >= 1, got 0"),
    (["--train-ratios", "0.5", "1.5"], "--train-ratios (train_ratios) must be numbers in (0, 1)"),
    (["--train-ratios", "abc"], "--train-ratios takes float, got 'abc'"),
    (["--sync", "all", "--hotness", "2"], "--hotness applies to --sync hotspot or random only"),
    (["--sync", "all", "--sync-rows", "3"], "--sync-rows applies to --sync hotspot or random"),
    (["--sync", "all", "--full-every", "2"], "--full-every applies to --sync hotspot or random"),
]


@pytest.mark.parametrize("option, message", EMBED_OPTIONS, ids=lambda x: " ".join(x)[:40])
def test_embed_option_out_of_range(option, message, tmp_path, capsys):
    out = tmp_path / "emb"
    assert main(["embed", "--dataset", "nope", "--out", str(out), *option]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "nope" not in err
    assert list(tmp_path.iterdir()) == []


def test_embed_out_is_checked_before_training(tmp_path, capsys):
    """``--out`` names a directory (created with its parents, as ``train --workdir``): an
    existing file, or a file among its parents, is refused before the graph is read."""
    existing = tmp_path / "emb.npy"
    existing.write_text("keep")
    assert main(["embed", "--dataset", "nope", "--out", str(existing)]) == 2
    assert f"--out {existing} is a file; give a directory" in capsys.readouterr().err
    assert existing.read_text() == "keep"
    below = existing / "no" / "such"
    assert main(["embed", "--dataset", "nope", "--out", str(below)]) == 2
    err = capsys.readouterr().err
    assert f"--out {below}: {existing} is a file, not a directory" in err and "nope" not in err
    assert list(tmp_path.iterdir()) == [existing]


def test_config_file_errors_name_the_field(tmp_path, capsys):
    """A config file's method section is validated like the flags; its errors name the field."""
    bad_period = tmp_path / "period.toml"
    bad_period.write_text('[data]\nname = "nope"\n\n[method.adaqp]\nperiod = -3\n')
    assert main(["train", "--config", str(bad_period)]) == 2
    assert "period" in (err := capsys.readouterr().err) and "-3" in err and "nope" not in err
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"data": {"name": "nope"}, "method": {"sancus": {"lam": 1}}}))
    assert main(["train", "--config", str(unknown)]) == 2
    assert "lam" in (err := capsys.readouterr().err) and "nope" not in err
    missing = tmp_path / "missing.toml"
    missing.write_text(f'[data]\ngraph = "{tmp_path / "g.npz"}"\n')
    assert main(["train", "--config", str(missing)]) == 2
    assert f"{tmp_path / 'g.npz'}: no such file or directory" in capsys.readouterr().err


def _edge_list(tmp_path, text="a b\nb c\nc a\n"):
    path = tmp_path / "edges.txt"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["train", "embed", "partition"])
def test_graph_file_errors_name_the_file(command, tmp_path, capsys):
    """A file the readers refuse ends the command with the reader's message naming the file."""
    truncated = tmp_path / "cut.npz"
    np.savez_compressed(truncated, edge_index=np.arange(2000).reshape(2, 1000))
    truncated.write_bytes(truncated.read_bytes()[:300])
    assert main([command, "--graph", str(truncated)]) == 2
    assert f"{truncated}: cannot read as an .npz archive" in capsys.readouterr().err
    edges = _edge_list(tmp_path)
    assert main([command, "--graph", str(edges)]) == 2  # an edge list cannot say
    err = capsys.readouterr().err
    assert str(edges) in err and "--directed" in err and "--undirected" in err
    assert main([command, "--graph", str(tmp_path / "missing.txt"), "--directed"]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.npz", "edges.txt"]


def test_more_parts_than_nodes_of_a_graph_file(tmp_path, capsys):
    edges = _edge_list(tmp_path)
    assert main(["partition", "--graph", str(edges), "--undirected", "--parts", "4"]) == 2
    err = capsys.readouterr().err
    assert "--parts" in err and "4" in err and "3 nodes" in err, err


def test_features_with_nan_are_refused(tmp_path, capsys):
    edges = _edge_list(tmp_path)
    feats = tmp_path / "x.npy"
    np.save(feats, np.array([[1.0], [math.nan], [0.0]], np.float32))
    argv = ["train", "--graph", str(edges), "--undirected", "--features", str(feats)]
    assert main([*argv, "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{feats}: features[1, 0] = nan (node 'b') is not a finite" in err, err
    assert not (tmp_path / "run").exists()


def test_divergence_stops_the_run(tmp_path, capsys):
    """A non-finite loss stops at its epoch, names the last finite loss, writes the metrics up
    to there and no checkpoint of the diverged state; ``--allow-nonfinite`` trains on."""
    workdir = tmp_path / "run"
    argv = ["train", "--dataset", "sbm", "--nodes", "80", "--parts", "2", "--epochs", "4"]
    argv += ["--lr", "1e30", "--checkpoint-every", "1", "--no-progress", "--eval-every", "1"]
    assert main([*argv, "--workdir", str(workdir)]) == 2
    err = capsys.readouterr().err
    assert "not finite at epoch 2; the last finite loss was" in err and "at epoch 1" in err
    assert "--allow-nonfinite" in err
    records = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2]
    assert math.isfinite(records[0]["loss"]) and not math.isfinite(records[1]["loss"])
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["ckpt_000001"]
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["stopped_at"] == 2 and summary["stop_reason"] == "non_finite_loss"

    onward = tmp_path / "onward"
    assert main([*argv, "--workdir", str(onward), "--allow-nonfinite"]) == 0
    records = [json.loads(x) for x in (onward / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]
