"""The extension recipes of ``docs/extending/``: each page includes its example
(``docs/examples/<name>.py``) whole, and this file runs every example at a tiny size:

* a communication method (``half_method.py``) registered outside the library trains through
  the page's command, moves half of Vanilla's bytes and starts from Vanilla's loss to
  bfloat16 rounding; the page's config file selects it;
* a model (``gin_model.py``) gives the same loss and gradients on 4 devices as on one, is
  registered as ``gin`` (once) and trains by that name: under a block-row method (CAGNET)
  through ``train``, and under a stale one (PipeGCN) through the page's Python block and its
  command; the page's config file selects it;
* a graph format (``metis_reader.py``) reads to the expected CSR arrays, names the file and
  line of each malformed input, is registered for ``.graph`` files (``read_graph``, and the
  page's script that starts the command line), and its converted file trains through
  ``jaxgraph train``;
* a replica-sync rule (``round_robin_sync.py``) merges exactly the rows a NumPy reference
  merges, covers every row once per ``stride`` syncs, and counts its rows in an embedding run.

Commands on these pages that this file runs stand in ``bash`` blocks after an HTML comment
``<!-- run by tests/test_extending.py -->``.
"""

import importlib.util
import json
import re
import runpy
import shlex
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxgraph.cli import job_from_args, main
from jaxgraph.comm.method import METHOD_TYPES
from jaxgraph.data.files import REGISTERED_FORMATS
from jaxgraph.embed import EmbedConfig
from jaxgraph.embed.merge import SYNC_TYPES, AllSync
from jaxgraph.embed.programs import indexed_sync_program
from jaxgraph.embed.sgns import Tables
from jaxgraph.mesh import make_mesh
from jaxgraph.models import MODEL_TYPES
from jaxgraph.train import ModelConfig, TrainConfig, train

from graph_cases import random_graph

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
PAGES = ROOT / "docs" / "extending"
RTOL = ATOL = 1e-5  # fp32 policy
MARK = "<!-- run by tests/test_extending.py -->"


def _load(name: str):
    """``docs/examples/<name>.py`` as a module (in ``sys.modules`` while it runs, as
    dataclasses need)."""
    spec = importlib.util.spec_from_file_location(f"docs_examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _blocks(page: str, lang: str) -> list[str]:
    """The ``lang`` fenced blocks of ``docs/extending/<page>`` that follow :data:`MARK`."""
    text = (PAGES / page).read_text()
    return re.findall(re.escape(MARK) + rf"\s*```{lang}[^\n]*\n(.*?)```", text, re.S)


def _commands(page: str) -> list[list[str]]:
    """Every command of the marked ``bash`` blocks of ``page``, continuation lines joined."""
    out = []
    for block in _blocks(page, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(shlex.split(line))
    assert out, f"{page} has no command marked {MARK!r}"
    return out


def _summary(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ a communication method


@pytest.fixture(scope="module")
def half():
    """The example registers ``half`` on import; it is removed again after these tests."""
    module = _load("half_method")
    yield module
    METHOD_TYPES.pop("half")
    sys.modules.pop(module.__name__)


def _losses(workdir: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (workdir / "metrics.jsonl").read_text().splitlines()]


def _first_loss(workdir: Path) -> float:
    return _losses(workdir)[0]


def test_half_method_page_command_trains_on_half_the_bytes(half, tmp_path, monkeypatch, capsys):
    ((python, script, *argv),) = _commands("strategy.md")
    assert (python, script) == ("python", "docs/examples/half_method.py")
    argv += ["--no-progress", "--workdir"]
    monkeypatch.setattr(sys, "argv", [script, *argv, str(tmp_path / "half")])
    try:
        with pytest.raises(SystemExit) as done:  # the file's __main__: the command line
            runpy.run_path(str(ROOT / script), run_name="__main__")
    finally:
        METHOD_TYPES["half"] = half.Half  # running the file registered a second class
    assert done.value.code == 0
    summary = _summary(capsys)
    assert summary["method"] == "half-bf16" and np.isfinite(summary["final_loss"])
    assert main([*argv, str(tmp_path / "vanilla"), "--method", "vanilla"]) == 0
    ref = _summary(capsys)
    # The exchange ran: the same rows as Vanilla's ring, at 2 bytes a value instead of 4.
    assert summary["bytes_per_epoch"] == ref["bytes_per_epoch"] / 2 > 0
    # The first epoch's loss comes from the same parameters and dropout masks; only the halo
    # rows differ, each rounded once to bfloat16 (relative error <= 2^-9 ~ 2e-3): 8e-3
    # leaves a 4x margin, while a misrouted row is off by O(1).
    first, ref_first = _first_loss(tmp_path / "half"), _first_loss(tmp_path / "vanilla")
    np.testing.assert_allclose(first, ref_first, rtol=8e-3)
    assert first != ref_first  # the rows really travelled in 16 bits


def test_half_method_config_file_and_errors(half, tmp_path, capsys):
    (toml,) = _blocks("strategy.md", "toml")
    path = tmp_path / "run.toml"
    path.write_text(toml)
    job = job_from_args(["train", "--config", str(path)])
    assert job.method == half.Half(wire_dtype="bfloat16") and job.method.label() == "half-bf16"
    assert job_from_args(["train", "--method", "half"]).method == half.Half("float16")
    with pytest.raises(ValueError, match="half.wire_dtype must be 'float16' or 'bfloat16'"):
        half.Half(wire_dtype="float8")
    assert main(["train", "--method", "vanilla", "--wire-dtype", "bfloat16"]) == 2
    assert "--wire-dtype applies to --method half only" in capsys.readouterr().err


# ------------------------------------------------------------------ a model


@pytest.fixture(scope="module")
def gin():
    """The example registers the model ``gin`` on import; it is removed again after these
    tests."""
    module = _load("gin_model")
    yield module
    MODEL_TYPES.pop("gin", None)
    sys.modules.pop(module.__name__, None)


def test_gin_on_four_devices_equals_one(gin):
    from jaxgraph.comm.strategy import Vanilla
    from jaxgraph.partition import build_halo_plan, partition_graph
    from jaxgraph.train import assemble_run

    graph = random_graph(n=80, avg_deg=5, seed=3)
    model = gin.GIN(hidden=8, out_dim=graph.num_classes)
    out = []
    for parts in (1, 4):
        plan = build_halo_plan(graph, partition_graph(graph, parts, seed=0), num_parts=parts)
        run = assemble_run(graph, plan, Vanilla(), model, parts, seed=5)
        out.append(run.trainer.loss_and_grads(run.state, run.shards))
    (loss1, grads1), (loss4, grads4) = out
    np.testing.assert_allclose(float(loss4), float(loss1), rtol=RTOL, atol=ATOL)
    for a, b in zip(jax.tree.leaves(grads4), jax.tree.leaves(grads1), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)
    assert set(grads1) >= {"eps0", "eps1"}  # GIN's own parameters take gradients


def test_gin_trains_by_name_under_a_block_row_method(gin, tmp_path):
    graph = random_graph(n=80, avg_deg=5, seed=3)
    model = ModelConfig("gin", hidden=8, dropout=0.5)
    config = TrainConfig(
        model=model, method="cagnet", parts=2, epochs=2, progress=False, workdir=str(tmp_path)
    )
    summary = train(config, graph=graph)
    assert summary["model"] == "gin" and summary["method"] == "cagnet"
    losses = _losses(tmp_path)
    assert len(losses) == 2 and np.isfinite(losses).all()
    assert 0 <= summary["test_at_best"] <= 1
    with pytest.raises(ValueError, match="model 'gin' is already registered"):
        gin.register_model("gin", gin.GIN)


def test_gin_page_python_block_trains_by_name(gin, tmp_path, monkeypatch, capsys):
    (block,) = _blocks("model.md", "python")
    monkeypatch.chdir(tmp_path)
    # ``import gin_model`` finds the module loaded here: the model is registered once.
    monkeypatch.setitem(sys.modules, "gin_model", gin)
    namespace = {"__name__": "__main__"}
    exec(compile(block, "docs/extending/model.md", "exec"), namespace)
    summary = namespace["summary"]
    assert summary["model"] == "gin" and summary["method"] == "pipegcn"
    loss, accuracy = map(float, re.findall(r"[\d.]+", capsys.readouterr().out))
    assert loss == pytest.approx(summary["final_loss"], abs=1e-3) and 0 <= accuracy <= 1


def test_gin_page_command_trains_under_pipegcn(gin, tmp_path, monkeypatch, capsys):
    ((python, script, *argv),) = _commands("model.md")
    assert (python, script) == ("python", "docs/examples/gin_model.py")
    assert argv[argv.index("--model") + 1] == "gin"
    monkeypatch.setattr(sys, "argv", [script, *argv, "--no-progress", "--workdir", str(tmp_path)])
    # Run as a script, the file registers ``gin`` a second time: the fixture's registration
    # steps aside meanwhile, and monkeypatch puts it back.
    monkeypatch.delitem(MODEL_TYPES, "gin")
    with pytest.raises(SystemExit) as done:  # the file's __main__: the command line
        runpy.run_path(str(ROOT / script), run_name="__main__")
    assert done.value.code == 0
    summary = _summary(capsys)
    assert summary["model"] == "gin" and summary["method"] == "pipegcn"
    assert 0 <= summary["test_at_best"] <= 1
    losses = _losses(tmp_path)
    assert len(losses) == 20 and np.isfinite(losses).all() and losses[-1] < losses[0]


def test_gin_page_config_file_selects_it(gin, tmp_path):
    (toml,) = _blocks("model.md", "toml")
    path = tmp_path / "run.toml"
    path.write_text(toml)
    job = job_from_args(["train", "--config", str(path)])
    assert job.model == ModelConfig("gin", hidden=16)
    assert job_from_args(["train", "--model", "gin"]).model.name == "gin"


# ------------------------------------------------------------------ a graph file format

# The graph of the METIS manual (section 4.1.1), unweighted, and with vertex and edge weights.
MANUAL = "% a comment\n7 11\n5 3 2\n1 3 4\n5 4 2 1\n2 3 6 7\n1 3 6\n5 4 7\n6 4\n"
WEIGHTED = (
    "7 11 011\n4 5 1 3 2 2 1\n2 1 1 3 2 4 1\n5 5 3 4 2 2 2 1 2\n3 2 1 3 2 6 2 7 5\n"
    "1 1 1 3 3 6 2\n6 5 2 4 2 7 6\n2 6 6 4 5\n"
)
# In-neighbours of each node, sorted: CSR rows are destinations.
INDPTR = [0, 3, 6, 10, 14, 17, 20, 22]
INDICES = [1, 2, 4, 0, 2, 3, 0, 1, 3, 4, 1, 2, 5, 6, 0, 2, 5, 3, 4, 6, 3, 5]


@pytest.fixture(scope="module")
def metis():
    """The example registers the format ``metis`` on import; it is removed again after these
    tests."""
    module = _load("metis_reader")
    yield module
    REGISTERED_FORMATS.pop("metis", None)
    sys.modules.pop(module.__name__, None)


@pytest.mark.parametrize("text", [MANUAL, WEIGHTED], ids=["plain", "weighted"])
def test_metis_reader_reads_the_expected_arrays(metis, tmp_path, text):
    path = tmp_path / "manual.graph"
    path.write_text(text)
    graph, notes = metis.read_metis(path)
    np.testing.assert_array_equal(graph.indptr, INDPTR)
    np.testing.assert_array_equal(graph.indices, INDICES)
    assert graph.name == "manual" and graph.num_features == 0 and graph.is_symmetric()
    np.testing.assert_array_equal(graph.ids, np.arange(1, 8))  # the file's node numbers
    assert notes[-1] == "read manual.graph as undirected: every edge has its reverse"
    if text is WEIGHTED:
        assert notes[:2] == [
            "ignored the vertex sizes and weights in manual.graph",
            "ignored the edge weights in manual.graph",
        ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"g\.graph: empty file"),
        ("3\n", r"g\.graph, line 1: expected the header 'n m \[fmt \[ncon\]\]', got '3'"),
        ("3 2 012\n", r"g\.graph, line 1: expected the header"),
        ("3 2\n2\n1 x\n2\n", r"g\.graph, line 3: malformed vertex line '1 x'"),
        ("2 1 1\n2 1\n1\n", r"g\.graph, line 3: malformed vertex line '1'"),
        ("3 2\n2\n1 4\n2\n", r"g\.graph, line 3: a neighbour outside 1\.\.3"),
        ("3 2\n2\n1 3\n", r"g\.graph: the header says 3 nodes but there are 2 lines"),
        ("3 2\n2\n1 3\n2\n1\n", r"g\.graph, line 5: more than n = 3 vertex lines"),
        ("3 1\n2\n1 3\n2\n", r"g\.graph: the header says m = 1 edges, so 2m = 2"),
        ("3 2\n2\n1 3\n1\n", r"g\.graph, line 3: node 2 lists 3, but line 4 \(node 3\) does not"),
    ],
)
def test_metis_reader_names_the_file_and_line(metis, tmp_path, text, message):
    from jaxgraph.data import GraphFileError

    path = tmp_path / "g.graph"
    path.write_text(text)
    with pytest.raises(GraphFileError, match=re.escape(f"{tmp_path}/") + message):
        metis.read_metis(path)


def test_metis_is_a_registered_format(metis, tmp_path):
    import gzip

    from jaxgraph.data import GraphFileError, detect_format, read_graph

    plain, packed = tmp_path / "manual.graph", tmp_path / "manual.GRAPH.gz"
    plain.write_text(MANUAL)
    packed.write_bytes(gzip.compress(MANUAL.encode()))
    for path in (plain, packed):
        assert detect_format(path) == "metis"
        graph, notes = read_graph(path)
        np.testing.assert_array_equal(graph.indptr, INDPTR)
        np.testing.assert_array_equal(graph.indices, INDICES)
        np.testing.assert_array_equal(graph.ids, np.arange(1, 8))
        assert graph.name == "manual"
        assert notes == [f"read {path.name} as undirected: every edge has its reverse"]
    graph, notes = read_graph(plain, format="metis", directed=True, name="m")
    assert graph.name == "m" and graph.num_edges == len(INDICES) and notes == []
    bad = tmp_path / "bad.graph"
    bad.write_text("3 2\n2\n1 4\n2\n")
    with pytest.raises(GraphFileError, match=re.escape(f"{bad}, line 3: a neighbour outside")):
        read_graph(bad)
    with pytest.raises(ValueError, match="graph format 'metis' is already registered"):
        metis.register_format("metis", metis._reader, suffixes=(".graph",))


def _write_metis(graph, path: Path) -> None:
    """``graph`` (undirected) as a METIS file: line ``v`` lists its neighbours, 1-based."""
    rows = np.split(graph.indices + 1, graph.indptr[1:-1])
    lines = [f"{graph.num_nodes} {graph.num_edges // 2}"] + [" ".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def test_metis_page_script_trains_on_the_graph_file(metis, tmp_path, monkeypatch, capsys):
    """The page's ``my_jaxgraph.py``, run as its command says, reads ``--graph my.graph``."""
    graph = random_graph(n=60, avg_deg=4, seed=2)
    (script,) = _blocks("reader.md", "python")
    run = _commands("reader.md")[0]
    assert run[:3] == ["python", "my_jaxgraph.py", "train"]
    monkeypatch.chdir(tmp_path)  # the page's file names, made here
    Path(run[1]).write_text(script)
    _write_metis(graph, Path(run[run.index("--graph") + 1]))
    np.save(run[run.index("--features") + 1], graph.features)
    np.save(run[run.index("--labels") + 1], graph.labels)
    # ``import metis_reader`` finds the module loaded here: the format is registered once.
    monkeypatch.setitem(sys.modules, "metis_reader", metis)
    monkeypatch.setattr(sys, "argv", [*run[1:], "--epochs", "2", "--no-progress"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(run[1], run_name="__main__")
    assert done.value.code == 0
    summary = _summary(capsys)
    assert summary["dataset"] == "my" and summary["num_nodes"] == graph.num_nodes
    assert summary["num_edges"] == graph.num_edges and np.isfinite(summary["final_loss"])


def test_metis_page_commands_convert_and_train(metis, tmp_path, monkeypatch, capsys):
    graph = random_graph(n=60, avg_deg=4, seed=2)
    _, convert, train = _commands("reader.md")
    assert convert[:2] == ["python", "docs/examples/metis_reader.py"] and train[:2] == [
        "jaxgraph",
        "train",
    ]
    monkeypatch.chdir(tmp_path)  # the page's file names, made here
    _write_metis(graph, Path(convert[2]))
    np.save(convert[convert.index("--features") + 1], graph.features)
    np.save(convert[convert.index("--labels") + 1], graph.labels)
    assert metis.main(convert[2:]) == 0
    assert "note: no split in the file: made a seeded random 60/20/20 split" in (
        capsys.readouterr().err
    )
    assert main([*train[1:], "--epochs", "2", "--no-progress"]) == 0
    summary = _summary(capsys)
    assert summary["num_nodes"] == graph.num_nodes and summary["num_edges"] == graph.num_edges
    assert np.isfinite(summary["final_loss"])


# ------------------------------------------------------------------ a replica-sync rule

AXIS = "parts"


@pytest.fixture(scope="module")
def round_robin():
    """The example registers ``round-robin`` on import; it is removed again after these tests."""
    yield _load("round_robin_sync")
    SYNC_TYPES.pop("round-robin", None)


def test_round_robin_is_named_by_its_key(round_robin):
    """Registered, the rule is a ``--sync`` choice and a ``[sync.round-robin]`` section, and a
    run's config (what a checkpointed run saves) round-trips with it; a rule that is not
    registered is refused by name when the config is written."""
    sync = round_robin.RoundRobinSync(stride=3)
    config = EmbedConfig(sync=sync)
    table = json.loads(json.dumps(config.to_dict()))
    assert table["sync"] == {"round-robin": {"merge": "mean", "stride": 3}}
    assert EmbedConfig.from_dict(table).sync == sync
    argv = ["embed", "--method", "deepwalk", "--sync", "round-robin", "--merge", "sum"]
    assert job_from_args(argv).config.sync == round_robin.RoundRobinSync(merge="sum")

    class Unregistered(round_robin.RoundRobinSync):
        pass

    with pytest.raises(ValueError, match="Unregistered is not registered.*register_sync"):
        EmbedConfig(sync=Unregistered()).to_dict()


def test_round_robin_plans_cover_every_row_once_per_stride(round_robin):
    sync = round_robin.RoundRobinSync(stride=4)
    counts = np.zeros(10, np.int64)
    plans = [sync.plan(counts, counts, k, seed=0) for k in range(8)]
    for k, plan in enumerate(plans):
        assert plan.index.dtype == np.int32
        assert plan.rows == 2 * plan.selected == 2 * plan.index.size
        np.testing.assert_array_equal(plan.index, plans[k % 4].index)
    np.testing.assert_array_equal(np.sort(np.concatenate([p.index for p in plans[:4]])), range(10))
    assert round_robin.RoundRobinSync(stride=1).plan(counts, counts, 3, seed=0).index is None
    with pytest.raises(ValueError, match="stride must be an int >= 1, got 0"):
        round_robin.RoundRobinSync(stride=0)
    with pytest.raises(ValueError, match="merge must be one of"):
        round_robin.RoundRobinSync(merge="max")


@pytest.mark.parametrize("merge", ["mean", "sum"])
def test_round_robin_merges_as_numpy_does(round_robin, merge):
    parts, n, d = 4, 10, 3
    mesh = make_mesh(parts, AXIS)
    # Rank-coded: replica p holds 1000 p + 10 v + c (syn1 shifted), so a misrouted row shows.
    syn0 = (
        1000 * np.arange(parts, dtype=np.float32)[:, None, None]
        + 10 * np.arange(n, dtype=np.float32)[None, :, None]
        + np.arange(d, dtype=np.float32)[None, None, :]
    )
    syn1 = syn0 + 0.5
    anchor0, anchor1 = np.full_like(syn0, 7.0), np.full_like(syn1, -3.0)
    sync = round_robin.RoundRobinSync(merge=merge, stride=3)
    plan = sync.plan(np.zeros(n), np.zeros(n), sync_index=1, seed=0)
    shard = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    tables = jax.device_put(Tables(syn0, syn1), shard)
    anchor = jax.device_put(Tables(anchor0, anchor1), shard) if sync.needs_anchor else None
    new, new_anchor = indexed_sync_program(mesh, AXIS, sync)(tables, anchor, plan.index)
    rows = [1, 4, 7]  # v % 3 == 1
    np.testing.assert_array_equal(plan.index, rows)
    for before, a, after in zip((syn0, syn1), (anchor0, anchor1), new, strict=True):
        expect = before.copy()
        if merge == "mean":
            expect[:, rows] = before[:, rows].mean(axis=0)
        else:
            expect[:, rows] = a[:, rows] + (before[:, rows] - a[:, rows]).sum(axis=0)
        np.testing.assert_array_equal(np.asarray(after), expect)
    if merge == "sum":  # the anchor moves to the merged rows
        for tab, anc, a in zip(new, new_anchor, (anchor0, anchor1), strict=True):
            expect = a.copy()
            expect[:, rows] = np.asarray(tab)[:, rows]
            np.testing.assert_array_equal(np.asarray(anc), expect)


def test_round_robin_in_an_embedding_run(round_robin):
    result = round_robin.small_run(round_robin.RoundRobinSync(stride=4))
    n, k = result.syn0.shape[0], 0  # k: the sync index, counted over the whole run
    for log in result.rounds:
        # Periodic sync k merges ceil((n - k % 4) / 4) rows of each table; every round closes
        # with a full merge of every row.
        periodic = [2 * len(range(i % 4, n, 4)) for i in range(k, k + log.syncs - 1)]
        assert log.syncs > 4 and log.sync_rows == sum(periodic) + 2 * n
        assert np.isfinite(log.loss)
        k += log.syncs - 1
    # stride 1 merges every row at every sync: AllSync's tables exactly.
    one = round_robin.small_run(round_robin.RoundRobinSync(stride=1))
    ref = round_robin.small_run(AllSync())
    np.testing.assert_array_equal(one.syn0, ref.syn0)
    np.testing.assert_array_equal(one.syn1, ref.syn1)


def test_round_robin_page_command(round_robin, capsys):
    ((python, script),) = _commands("sync.md")
    assert (python, script) == ("python", "docs/examples/round_robin_sync.py")
    runpy.run_path(str(ROOT / script), run_name="__main__")
    merged = [int(m) for m in re.findall(r"(\d+) rows merged", capsys.readouterr().out)]
    assert len(merged) == 2 and merged[1] < merged[0]  # round-robin moves fewer rows
