"""End to end: the ``jaxgraph embed`` command on tiny data, and embedding quality on a planted
partition."""

import dataclasses
import json

import numpy as np
import pytest

from jaxgraph.cli import main
from jaxgraph.data import dc_sbm
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed import retrieval as rt
from jaxgraph.embed.health import HealthCheck
from jaxgraph.embed.job import PRESETS, preset
from jaxgraph.embed.run import EmbedConfig, embed
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.walks import WalkConfig

# 300 nodes and the trainer shapes of test_skipgram.py, to reuse its compilations.
SMALL = [
    "--nodes",
    "300",
    "--dim",
    "8",
    "--window",
    "3",
    "--negatives",
    "2",
    "--batch-size",
    "16",
    "--sync-every",
    "4",
    "--walk-length",
    "10",
    "--quiet",
]


def test_cli_writes_embedding_round_log_and_evaluation(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "embed",
        "--dataset",
        "sbm",
        "--method",
        "felog",
        "--rounds",
        "3",
        "--parts",
        "2",
        "--train-ratios",
        "0.5",
        "--shuffles",
        "1",
        "--retrieval",
        "--sync",
        "hotspot",
        "--hotness",
        "pending",
        "--sync-rows",
        "0.05",
        "--full-every",
        "1000",
        "--out",
        str(out),
        *SMALL,
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "felog" and 1 <= summary["rounds"] <= 3
    assert summary["evaluation"]["task"] == "nc"
    assert 0 <= summary["evaluation"]["node_classification"]["0.5"]["micro"]["mean"] <= 1
    assert "hit@10" in summary["evaluation"]["retrieval"]
    emb = np.load(out / "embedding.npy")
    assert emb.shape == (300, 8) and emb.dtype == np.float32
    rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == list(range(summary["rounds"]))
    # The 15 hottest rows (5 % of 300) per periodic sync, both tables; every row at the
    # round-end merge.
    for r in rounds:
        assert r["sync_rows"] == 2 * 15 * (r["syncs"] - 1) + 2 * 300
    saved = json.loads((out / "eval.json").read_text())
    assert saved["config"]["method"] == "felog" and saved["tokens"] == summary["tokens"]
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary file


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "line"], "unknown method 'line'"),
        (["--dim", "0"], "--dim (dim) must be positive, got 0"),
        (["--task", "nc", "--dataset", "ca-astroph"], "needs node labels"),
        (["--dataset", "nope"], "unknown dataset 'nope'"),
        (
            ["--sync", "hotspot", "--hotness", "degree"],
            "--hotness takes total or round or pending, got 'degree'",
        ),
        (["--sync", "random", "--sync-rows", "0"], "--sync-rows (num_rows) must be >= 1"),
        (["--sync", "hotspot", "--sync-rows", "1.5"], "a share of the nodes in (0, 1]"),
    ],
)
def test_cli_errors_exit_2_with_message(extra, message, capsys):
    assert main(["embed", "--dataset", "sbm", *SMALL, *extra]) == 2
    assert message in capsys.readouterr().err


def test_planted_partition_quality():
    """Six planted blocks (homophily 0.95): blocks separate in cosine, node classification is
    far above chance (1/6) and held-out edges beat non-edges (AUC)."""
    g = dc_sbm(300, 6, 12.0, num_features=0, homophily=0.95, degree_exponent=None, seed=4)
    cfg = EmbedConfig(
        "deepwalk",
        WalkConfig(walk_length=20, walks_per_node=4),
        SkipGramConfig(dim=16, window=3, negatives=2, batch_size=256, sync_every=16),
        rounds=2,
    )
    res = embed(cfg, g, snapshot_rounds=(0, 1))
    # Per-round snapshots and end times: the last snapshot is the output, times increase.
    assert sorted(res.snapshots) == sorted(res.elapsed) == [0, 1]
    np.testing.assert_array_equal(res.snapshots[1], res.syn0)
    assert 0 < res.elapsed[0] < res.elapsed[1] <= res.seconds
    unit = rt.l2_normalize(res.syn0)
    cos = unit @ unit.T
    same = g.labels[:, None] == g.labels[None, :]
    off = ~np.eye(300, dtype=bool)
    assert cos[same & off].mean() > cos[~same].mean() + 0.3
    acc = ev.node_classification(res.syn0, g.labels, train_ratios=(0.5,), shuffles=1)
    assert acc[0.5]["micro"]["mean"] > 0.9
    split = ev.link_prediction_split(g, 0.5, seed=0)
    lp = embed(cfg, split.train_graph)
    assert ev.link_prediction_auc(split, lp.syn0, "dot") > 0.8
    assert ev.link_prediction_auc(split, lp.syn0, "cosine") > 0.85


def test_global_schedule_spans_the_run():
    """``embed`` gives the global schedule the run's rounds: round r starts at
    ``alpha_0 (1 - r / R)``."""
    g = dc_sbm(300, 6, 12.0, num_features=0, homophily=0.95, degree_exponent=None, seed=4)
    cfg = EmbedConfig(
        "deepwalk",
        WalkConfig(walk_length=10),
        SkipGramConfig(dim=8, window=3, negatives=2, batch_size=16, sync_every=4),
        rounds=4,
    )
    cfg = cfg.replace(sgns=dataclasses.replace(cfg.sgns, lr_schedule="global"))
    res = embed(cfg, g)
    np.testing.assert_allclose([r.lr for r in res.rounds], 0.025 * np.array([1, 0.75, 0.5, 0.25]))


def test_command_line_defaults_come_from_the_preset():
    from jaxgraph.cli import job_from_args
    from jaxgraph.embed.run import cpu_config

    def config(*argv):
        return job_from_args(["embed", *argv]).config

    published = config("--method", "deepwalk")
    assert published == EmbedConfig(method="deepwalk", walk=WalkConfig(kind="deepwalk"))
    assert (published.walk.walk_length, published.sgns.window) == (80, 10)
    assert published.sgns.lr_schedule == "global" and published.sgns.row_cap == 4
    assert published.sgns.interleave == 8 and config("--interleave", "2").sgns.interleave == 2
    with pytest.raises(ValueError, match=r"--interleave .*must be >= 1 or None, got 0"):
        config("--interleave", "0")
    assert config("--preset", "cpu", "--method", "felog") == cpu_config("felog")
    mixed = config("--preset", "cpu", "--window", "7", "--row-cap", "none", "--merge", "touched")
    assert mixed.walk.walk_length == 40 and mixed.sgns.window == 7
    assert mixed.sgns.row_cap is None and mixed.sgns.merge == "touched"
    assert config("--on-unhealthy", "stop", "--max-norm", "50").health == HealthCheck(
        50.0, None, "stop"
    )
    gpu = config("--preset", "gpu", "--method", "deepwalk")
    assert gpu.walk == published.walk and gpu.rounds == published.rounds
    assert (gpu.sgns.batch_size, gpu.sgns.shared_negatives, gpu.sgns.row_cap) == (16384, 8, 16)
    same = dataclasses.replace(gpu.sgns, batch_size=1024, shared_negatives=4, row_cap=4)
    assert same == published.sgns
    # word2vec's update: the published run without the row cap, the interleaving window and
    # the shared negatives.
    w2v = config("--preset", "word2vec", "--method", "deepwalk")
    assert (w2v.sgns.row_cap, w2v.sgns.interleave, w2v.sgns.shared_negatives) == (None, None, 1)
    back = dataclasses.replace(w2v.sgns, row_cap=4, interleave=8, shared_negatives=4)
    assert w2v.replace(sgns=back) == published
    with pytest.raises(
        ValueError, match="unknown --preset 'tpu'; expected one of published, word2vec, cpu, gpu"
    ):
        preset("tpu")


def test_preset_help_names_every_setting_it_changes(capsys):
    """`embed --help` says what each preset changes: the published preset's row cap and
    interleaving, word2vec's lack of them, the GPU preset's step size."""
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in PRESETS:
        assert f"{name}: " in text
    assert "(row_cap 4)" in text and "(interleave 8)" in text
    assert "word2vec: the published run with word2vec's update: no row cap" in text
    assert "16,384 pairs per device" in text
    with pytest.raises(SystemExit):
        main(["embed", "--preset", "tpu"])
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_openne_preset_trains_fifty_walks_per_node():
    dw, n2v = preset("openne", "deepwalk"), preset("openne", "node2vec")
    assert dw.walk.walks_per_node * dw.rounds == 50 and dw.walk.walk_length == 80
    assert dw.sgns == preset("published", "deepwalk").sgns
    assert (dw.walk.p, dw.walk.q, n2v.walk.p, n2v.walk.q) == (1.0, 1.0, 0.25, 0.25)
    assert n2v.walk.kind == "node2vec" and n2v.sgns == dw.sgns


def test_node_classification_of_one_pass_says_what_trains_more(capsys):
    """--task nc on the published corpus (10 walks per node) notes the preset of 50."""
    assert main(["embed", *SMALL, "--method", "deepwalk", "--rounds", "1", "--task", "nc"]) == 0
    err = capsys.readouterr().err
    assert "node classification of embeddings trained on 1 walk per node" in err
    assert "--preset openne" in err
    assert main(["embed", *SMALL, "--method", "deepwalk", "--rounds", "1", "--task", "lp"]) == 0
    assert "--preset openne" not in capsys.readouterr().err
