"""Embedding configs from files: every setting of a run (FaBC, the pipeline, the sync
included) is reachable from a .toml/.json file, and the command line's options override it."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxgraph.cli import main
from jaxgraph.data import load_graph
from jaxgraph.embed.codec import FabcConfig
from jaxgraph.embed.merge import AllSync
from jaxgraph.embed.pipeline import PipelineConfig
from jaxgraph.embed.run import (
    EmbedConfig,
    embed,
    load_embed_config,
)
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.sync import HotspotSync, RandomSync
from jaxgraph.embed.walks import WalkConfig


def EmbedData(**fields):
    """``embed``'s default graph description (the sbm of its size) with ``fields``."""
    return dataclasses.replace(EmbedConfig().data, **{"name": None, **fields})


EXAMPLE = Path(__file__).parents[2] / "experiments" / "configs" / "embed" / "astroph_felog.toml"


@pytest.mark.parametrize(
    "sync", [None, AllSync("sum"), HotspotSync(counts="pending", num_rows=0.1), RandomSync()]
)
def test_round_trip_through_json(sync, tmp_path):
    cfg = EmbedConfig(
        method="node2vec",
        walk=WalkConfig(kind="node2vec", walk_length=20, p=0.5, q=2.0),
        sgns=SkipGramConfig(dim=16, shared_negatives=4, lr_schedule="global"),
        rounds=3,
        compress=FabcConfig(scope="corpus", k=2),
        pipeline=PipelineConfig(mode="deterministic", lag=2),
        sync=sync,
    )
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg.to_dict()))
    assert load_embed_config(path) == cfg


def test_example_file_and_defaults():
    """A key left out keeps EmbedConfig's default (not the sub-config class's: the run's
    learning rate decays over the whole run); the walker follows the method."""
    cfg = load_embed_config(EXAMPLE)
    assert cfg.compress == FabcConfig(scope="walk")
    assert cfg.pipeline == PipelineConfig(mode="sequential")
    assert cfg.sync == HotspotSync(counts="pending", num_rows=0.068, full_every=32)
    assert cfg.feedback.mu == 0.7 and cfg.walk.walks_per_node == 1
    assert cfg.data == EmbedData(name="ca-astroph") and cfg.parts == 2
    assert EmbedConfig.from_dict({"sgns": {"dim": 8}}).sgns == SkipGramConfig(
        dim=8, lr_schedule="global"
    )
    assert EmbedConfig.from_dict({"method": "node2vec"}).walk.kind == "node2vec"
    assert EmbedConfig.from_dict({}) == EmbedConfig()


@pytest.mark.parametrize(
    "text, message",
    [
        ("[sgns]\nbogus = 1\n", r"unknown key\(s\) \['bogus'\] in config.sgns"),
        ("[sgns]\nlr = -1.0\n", "lr must be a finite number > 0, got -1.0"),
        ("[sync.hotspot]\n[sync.random]\n", "config.sync must be a table with one of"),
        ("[sync.hotspot]\ncounts = 'degree'\n", "counts must be one of"),
        ("[pipeline]\nmode = 'fast'\n", "mode"),
        ("[compress]\nscope = 'graph'\n", "scope"),
        ("rounds = 0\n", "rounds must be >= 1, got 0"),
        ("walk = 3\n", "config.walk must be a table/object, got int"),
        ("[walk\n", "is malformed"),
        ("parts = 0\n", "parts must be an integer >= 1, got 0"),
        ("parts = true\n", "parts must be an integer >= 1, got True"),
        ('parts = "2"\n', "parts must be an integer >= 1, got '2'"),
        ("[data]\nnum_nodes = 0\n", "num_nodes must be an integer >= 1, got 0"),
        ("[data]\nnodes = 10\n", r"unknown key\(s\) \['nodes'\] in config.data"),
        ('[data]\nformat = "pyg"\n', "format applies to a graph file"),
    ],
)
def test_bad_files_name_the_file_and_key(text, message, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_embed_config(path)
    assert str(path) in str(info.value)


def test_cli_reads_the_file_and_options_override_it(tmp_path, capsys):
    """FaBC and the deterministic pipeline, reachable only through a file, run from the
    command line; --dim overrides the file; --preset with --config is an error."""
    config = tmp_path / "run.toml"
    config.write_text(
        'method = "deepwalk"\nrounds = 2\n[walk]\nwalk_length = 8\nwalks_per_node = 2\n'
        "[sgns]\ndim = 16\nwindow = 3\n[compress]\nk = 1\n"
        '[pipeline]\nmode = "deterministic"\n[sync.random]\nnum_rows = 5\nfull_every = 2\n'
    )
    out = tmp_path / "emb"
    argv = ["embed", "--dataset", "sbm", "--nodes", "60", "--parts", "2", "--task", "none"]
    assert main([*argv, "--config", str(config), "--dim", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out  # a line per round, then the summary
    summary = json.loads(printed[printed.index("{") :])
    assert summary["rounds"] == 2
    rows = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert all(0 < r["walk_bytes_sent"] < r["walk_bytes_raw"] for r in rows)  # FaBC on
    assert all(r["sync_rows"] > 0 for r in rows)  # the random sync of the file ran
    assert np.load(out / "embedding.npy").shape == (60, 8)
    assert main([*argv, "--config", str(config), "--preset", "cpu"]) == 2
    assert "give --preset or --config, not both" in capsys.readouterr().err


TINY = (
    'method = "deepwalk"\nrounds = 1\nparts = 2\n[data]\nname = "sbm"\nnum_nodes = 120\n'
    "[walk]\nwalk_length = 8\n[sgns]\ndim = 8\nwindow = 3\nnegatives = 2\nbatch_size = 16\n"
)


def test_a_config_file_describes_the_whole_run(tmp_path):
    """``[data]`` and ``parts`` make a file a complete run: ``embed(load_embed_config(f))``
    loads the graph and builds the mesh itself, and trains exactly the embedding of the same
    config given the graph loaded by hand."""
    path = tmp_path / "run.toml"
    path.write_text(TINY)
    cfg = load_embed_config(path)
    assert cfg.data == EmbedData(name="sbm", num_nodes=120) and cfg.parts == 2
    from_file = embed(cfg)
    graph = load_graph(cfg.data, seed=cfg.seed)
    assert graph.num_nodes == 120
    by_hand = embed(cfg, graph)
    np.testing.assert_array_equal(from_file.syn0, by_hand.syn0)
    np.testing.assert_array_equal(from_file.syn1, by_hand.syn1)


def test_parts_data_and_mesh_are_checked_before_any_work():
    from jaxgraph.mesh import make_mesh

    with pytest.raises(ValueError, match="parts must be an integer >= 1, got 0"):
        EmbedConfig(parts=0)
    with pytest.raises(ValueError, match="num_nodes must be an integer >= 1, got 0"):
        EmbedData(name="sbm", num_nodes=0)
    with pytest.raises(ValueError, match="format applies to a graph file"):
        EmbedData(format="pyg")
    with pytest.raises(ValueError, match="name two graphs"):
        EmbedData(name="cora", graph="edges.txt")
    with pytest.raises(ValueError, match="the mesh has 1 devices but config.parts is 2"):
        embed(EmbedConfig(parts=2, data=EmbedData(name="no-such-dataset")), mesh=make_mesh(1))


def test_cli_takes_the_graph_and_devices_from_the_file(tmp_path, capsys):
    """``jaxgraph embed --config FILE``: the dataset and the device count come from the file;
    ``--dataset`` on the command line replaces the file's graph."""
    path = tmp_path / "run.toml"
    path.write_text(TINY)
    out = tmp_path / "emb"
    assert (
        main(["embed", "--config", str(path), "--task", "none", "--quiet", "--out", str(out)]) == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["parts"] == 2 and summary["dataset"] == "dc_sbm_n120_c5"
    assert np.load(out / "embedding.npy").shape == (120, 8)
    argv = ["embed", "--config", str(path), "--dataset", "nope", "--task", "none"]
    assert main(argv) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err


def test_data_and_parts_round_trip_through_json_and_toml(tmp_path):
    """The graph and the device count read back from a file as they were written: JSON from
    ``to_dict``, and TOML with its ``[data]`` section."""
    cfg = EmbedConfig(
        data=EmbedData(graph="edges.txt", format="edgelist", directed=False, labels="y.txt"),
        parts=4,
    )
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg.to_dict()))
    assert load_embed_config(path) == cfg
    path = tmp_path / "c.toml"
    path.write_text('parts = 4\n[data]\nname = "sbm"\nnum_nodes = 300\nseed = 7\n')
    assert load_embed_config(path) == EmbedConfig(
        data=EmbedData(name="sbm", num_nodes=300, seed=7), parts=4
    )


def test_data_seed_draws_the_graph_apart_from_the_run_seed():
    """``data.seed`` fixes the sbm graph whatever the run's seed; None takes the run's."""
    own = load_graph(EmbedData(name="sbm", num_nodes=80, seed=3), seed=0)
    runs = load_graph(EmbedData(name="sbm", num_nodes=80), seed=3)
    other = load_graph(EmbedData(name="sbm", num_nodes=80), seed=0)
    np.testing.assert_array_equal(own.indices, runs.indices)
    assert not np.array_equal(own.indices, other.indices)
    with pytest.raises(ValueError, match="data.seed must be an integer >= 0 or None, got -1"):
        EmbedData(name="sbm", seed=-1)


def test_parts_beyond_the_devices_and_a_mesh_of_another_size_are_refused():
    import jax

    from jaxgraph.mesh import make_mesh

    too_many = jax.device_count() + 1
    with pytest.raises(ValueError, match=f"{too_many}"):
        embed(EmbedConfig(parts=too_many, data=EmbedData(name="sbm", num_nodes=60)))
    with pytest.raises(ValueError, match="the mesh has 2 devices but config.parts is 1"):
        embed(EmbedConfig(data=EmbedData(name="sbm", num_nodes=60)), mesh=make_mesh(2))


def test_a_config_file_names_a_graph_file(tmp_path):
    """``[data] graph = ...`` with its ``directed``: the user's file, ids kept, embedded from
    the config alone exactly as from the graph read by hand."""
    from jaxgraph.data import read_graph

    rng = np.random.default_rng(0)
    ids = 1000 + np.arange(40) * 7
    edges = [(ids[i], ids[(i + 1) % 40]) for i in range(40)]
    edges += [(ids[a], ids[b]) for a, b in rng.integers(0, 40, size=(40, 2)) if a != b]
    (tmp_path / "edges.txt").write_text("".join(f"{u} {v}\n" for u, v in edges))
    path = tmp_path / "run.toml"
    path.write_text(
        f'method = "deepwalk"\nrounds = 1\n[data]\ngraph = "{tmp_path / "edges.txt"}"\n'
        "directed = false\n[walk]\nwalk_length = 8\n[sgns]\ndim = 8\nwindow = 3\n"
    )
    cfg = load_embed_config(path)
    graph, _ = read_graph(tmp_path / "edges.txt", directed=False)
    assert sorted(graph.ids.tolist()) == sorted(ids.tolist())
    np.testing.assert_array_equal(embed(cfg).syn0, embed(cfg, graph).syn0)


def test_cli_parts_and_nodes_on_the_command_line_replace_the_file(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text(TINY)
    argv = ["embed", "--config", str(path), "--task", "none", "--quiet"]
    assert main([*argv, "--parts", "1", "--nodes", "90", "--seed", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["parts"] == 1 and summary["dataset"] == "dc_sbm_n90_c5"


def test_cli_config_file_sets_the_devices_before_jax_starts(tmp_path):
    """A fresh ``jaxgraph embed --config FILE`` process (no device emulation set outside)
    emulates enough CPU devices for the file's ``parts``, and embeds the file's graph."""
    path = tmp_path / "run.toml"
    path.write_text(TINY)
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    argv = ["embed", "--config", str(path), "--task", "none", "--quiet"]
    script = f"from jaxgraph.cli import main; raise SystemExit(main({argv!r}))"
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["parts"] == 2 and summary["dataset"] == "dc_sbm_n120_c5"
