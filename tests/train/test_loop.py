"""The training loop: metrics, best-validation bookkeeping, checkpoints, resume, errors."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxgraph.train import (
    AdaQP,
    CheckpointError,
    DataConfig,
    ModelConfig,
    PipeGCN,
    Quantized,
    TrainConfig,
    train,
)
from jaxgraph.train.checkpoint import (
    latest_checkpoint,
    read_header,
    read_leaves,
    restore_checkpoint,
    save_checkpoint,
)

from graph_cases import random_graph
from harness import kill_when

GRAPH = random_graph(n=150, avg_deg=6, seed=11)


def _config(tmp_path, **kw):
    base = dict(
        model=ModelConfig(name="gcn", hidden=16, dropout=0.5),
        parts=4,
        epochs=6,
        checkpoint_every=3,
        progress=False,
        workdir=str(tmp_path),
    )
    base.update(kw)
    return TrainConfig(**base)


def _assert_resume_reproduces(cut, kw, stop: int, records):
    """A run of ``kw`` stopped after ``stop`` epochs and resumed to the end logs ``records``
    (without wall-clock fields and the solver's own timings)."""
    train(_config(cut, **{**kw, "epochs": stop}), graph=GRAPH)
    train(_config(cut, **kw), graph=GRAPH)
    expect = [{k: v for k, v in r.items() if k != "solver"} for r in _strip_time(records)]
    got = [{k: v for k, v in r.items() if k != "solver"} for r in _strip_time(_metrics(cut))]
    assert got == expect


def _metrics(workdir):
    lines = (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


_TIMING = ("epoch_time", "assign_time", "rejit_time", "compiled_ahead")


def _strip_time(records):
    """Metrics without wall-clock fields (and whether a step happened to compile ahead)."""
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in records]


def test_metrics_and_summary(tmp_path):
    summary = train(_config(tmp_path, checkpoint_every=0), graph=GRAPH)
    records = _metrics(tmp_path)
    assert [r["epoch"] for r in records] == list(range(1, 7))
    assert all(np.isfinite(r["loss"]) and r["bytes_moved"] > 0 for r in records)
    best = max(records, key=lambda r: (r["val_score"], -r["epoch"]))
    assert summary["best_epoch"] == best["epoch"]
    assert summary["test_at_best"] == best["test_score"]
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_resume_reproduces_uninterrupted_run(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    train(_config(full), graph=GRAPH)
    # Stop after epoch 4: the checkpoint is at 3 and epoch 4's metrics line is orphaned, as
    # after a kill during epoch 5. Resuming drops it and recomputes epochs 4-6.
    train(_config(cut, epochs=4), graph=GRAPH)
    assert latest_checkpoint(cut / "checkpoints").name == "ckpt_000003"
    train(_config(cut), graph=GRAPH)
    assert _strip_time(_metrics(cut)) == _strip_time(_metrics(full))


def test_killed_process_resumes_exactly(tmp_path):
    """A run killed with SIGKILL mid-training resumes to the same metrics."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from graph_cases import random_graph
        from jaxgraph.train import ModelConfig, TrainConfig, train
        cfg = TrainConfig(model=ModelConfig(name="gcn", hidden=16, dropout=0.5), parts=4,
                          epochs=10**6, checkpoint_every=2, progress=False,
                          workdir={str(killed)!r})
        train(cfg, graph=random_graph(n=150, avg_deg=6, seed=11))
    """)
    metrics = killed / "metrics.jsonl"
    kill_when(
        subprocess.Popen([sys.executable, "-c", script]),
        lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5,
        what="training",
    )
    # On a loaded machine the kill may land later than planned: train a few epochs past the
    # last checkpoint, whatever it is, so that the resumed run always has epochs to redo.
    last = latest_checkpoint(killed / "checkpoints")
    epochs = max(8, (read_header(last)["epoch"] if last else 0) + 4)
    train(_config(full, epochs=epochs, checkpoint_every=2), graph=GRAPH)
    train(_config(killed, epochs=epochs, checkpoint_every=2), graph=GRAPH)
    assert _strip_time(_metrics(killed)) == _strip_time(_metrics(full))


def test_mismatched_checkpoint_is_rejected(tmp_path):
    train(_config(tmp_path, epochs=3), graph=GRAPH)
    with pytest.raises(CheckpointError, match=r"different run: settings \['model'\]"):
        train(_config(tmp_path, model=ModelConfig(name="sage", hidden=16)), graph=GRAPH)
    # A state whose leaves differ from the file is refused, naming the leaves.
    path = latest_checkpoint(tmp_path / "checkpoints")
    with pytest.raises(CheckpointError, match="does not match this run's state"):
        restore_checkpoint(path, {"params": jnp.zeros(3)})
    with pytest.raises(CheckpointError, match=r"different run: settings \['seed'\]"):
        train(_config(tmp_path, seed=5), graph=GRAPH)


def test_checkpoint_round_trip_and_shape_check(tmp_path):
    tree = {"a": jnp.arange(3.0), "b": (jnp.ones((2, 2), jnp.int32), jax.random.key(4))}
    path = save_checkpoint(tmp_path, 7, tree, {"note": "x"})
    restored, header = restore_checkpoint(path, tree)
    assert header["epoch"] == 7 and header["note"] == "x"
    for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(restored), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # One orbax step directory, no temporary directory left behind.
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt_000007"]
    bad = {"a": jnp.arange(4.0), "b": tree["b"]}
    with pytest.raises(CheckpointError, match=r"leaf \['a'\] has shape \(3,\)"):
        restore_checkpoint(path, bad)


def test_checkpoints_take_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # orbax itself wants absolute paths
    tree = {"a": jnp.arange(3.0)}
    path = save_checkpoint("ckpts", 1, tree, {})
    assert path == Path("ckpts/ckpt_000001") and latest_checkpoint("ckpts") == path
    np.testing.assert_array_equal(restore_checkpoint(path, tree)[0]["a"], tree["a"])
    np.testing.assert_array_equal(read_leaves(path)["['a']"], tree["a"])


def _data_files(directory: Path) -> list[Path]:
    """The OCDBT data files of an orbax checkpoint (b-tree nodes and array chunks), biggest
    first. Some are dead copies (small values are merged into the root database), so a test
    that must hit the live data damages all of them."""
    found = [p for p in directory.rglob("*") if p.is_file() and p.parent.name == "d"]
    return sorted(found, key=lambda p: -p.stat().st_size)


def test_corrupt_checkpoint_is_rejected(tmp_path):
    train(_config(tmp_path, epochs=3), graph=GRAPH)
    path = latest_checkpoint(tmp_path / "checkpoints")
    for data in _data_files(path):
        data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="unreadable or truncated"):
        train(_config(tmp_path), graph=GRAPH)


def test_damaged_or_foreign_checkpoints_are_rejected(tmp_path):
    """Every kind of damage raises a CheckpointError naming the checkpoint, never an orbax or
    tensorstore error; a flipped bit in array chunks (which OCDBT does not checksum) included."""
    big = jax.random.normal(jax.random.key(0), (256, 256))  # chunks in their own data file
    tree = {"w": big, "b": jnp.arange(3), "key": jax.random.key(1)}
    path = save_checkpoint(tmp_path / "ckpts", 2, tree, {"note": "x"})
    at = re.escape(str(path))
    data = _data_files(path)[0]  # the chunks of w
    original = data.read_bytes()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x10
    data.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match=rf"{at} is corrupt: leaf \['w'\]"):
        restore_checkpoint(path, tree)
    with pytest.raises(CheckpointError, match=rf"{at} is corrupt"):
        read_leaves(path)
    data.unlink()
    with pytest.raises(CheckpointError, match=rf"{at} is unreadable or truncated"):
        restore_checkpoint(path, tree)
    data.write_bytes(original)
    restore_checkpoint(path, tree)  # repaired
    meta = path / "meta" / "metadata"
    meta.write_text(meta.read_text().replace('"note": "x"', '"note": "y"'))
    with pytest.raises(CheckpointError, match=rf"{at} is corrupt: its header"):
        read_header(path)
    meta.unlink()
    with pytest.raises(CheckpointError, match=rf"{at} is unreadable or truncated"):
        read_header(path)
    foreign = tmp_path / "ckpts" / "ckpt_000009"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a checkpoint")
    assert latest_checkpoint(tmp_path / "ckpts") == foreign
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(foreign))} is unreadable"):
        restore_checkpoint(foreign, tree)
    old = tmp_path / "old"
    old.mkdir()
    (old / "ckpt_000003.npz").write_bytes(b"PK")
    with pytest.raises(CheckpointError, match="format 1"):
        latest_checkpoint(old)


def test_bad_inputs_have_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        train(_config(tmp_path, data=DataConfig(name="nope")))
    with pytest.raises(ValueError, match="model.name must be one of gcn, sage, gat, got 'mlp'"):
        train(_config(tmp_path, model=ModelConfig(name="mlp")), graph=GRAPH)
    with pytest.raises(ValueError, match="unknown method 'zip'"):
        train(_config(tmp_path, method="zip"), graph=GRAPH)
    tiny = random_graph(n=5, avg_deg=2, seed=0)
    with pytest.raises(ValueError, match="cannot split 5 nodes .* into 8 parts"):
        train(_config(tmp_path, parts=8), graph=tiny)
    with pytest.raises(ValueError, match="xla_force_host_platform_device_count"):
        train(_config(tmp_path, parts=16), graph=GRAPH)


@pytest.mark.slow
def test_quantized_random_run_resumes_across_assignment_periods(tmp_path):
    """Random bit-widths are re-drawn every period (re-jitting for new bucket sizes); a run
    resumed in the middle restores the assignment in force and reproduces the metrics."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    kw = dict(method=Quantized("random", period=2, chunks=0), checkpoint_every=2, parts=2)
    summary = train(_config(full, epochs=5, **kw), graph=GRAPH)
    records = _metrics(full)
    assert summary["compiled_steps"] >= 2
    assert len({r["bytes_moved"] for r in records}) >= 2  # the assignment really changed
    train(_config(cut, epochs=3, **kw), graph=GRAPH)
    train(_config(cut, epochs=5, **kw), graph=GRAPH)
    assert _strip_time(_metrics(cut)) == _strip_time(records)


def test_compiling_ahead_changes_nothing_but_when_the_step_compiles(tmp_path):
    """Random widths are known before their period: the next step compiles in the background
    and is used at the boundary, with metrics identical to compiling at the boundary."""
    # Exact layouts (chunks 0): each assignment compiles its own step.
    method = Quantized("random", period=2, chunks=0)
    kw = dict(parts=2, epochs=3, checkpoint_every=0)
    ahead = train(_config(tmp_path / "ahead", method=method, **kw), graph=GRAPH)
    sync = train(
        _config(tmp_path / "sync", method=method.replace(compile_ahead=False), **kw), graph=GRAPH
    )
    assert (ahead["compiled_steps"], ahead["compiled_ahead"]) == (2, 1)
    assert (sync["compiled_steps"], sync["compiled_ahead"]) == (2, 0)
    records = _metrics(tmp_path / "ahead")
    assert records[2]["compiled_ahead"] is True and "compiled_ahead" not in records[1]
    assert _strip_time(records) == _strip_time(_metrics(tmp_path / "sync"))


@pytest.mark.slow
def test_adaqp_lookahead_solves_early_installs_at_the_boundary_and_resumes(tmp_path):
    """With a lookahead of 1 epoch and a period of 3, the solve runs before epoch 3, the new
    assignment takes over at epoch 4 (its step compiled meanwhile), and a run resumed from the
    checkpoint between the two (holding the pending assignment) reproduces the metrics."""
    from jaxgraph.comm.adaptive import AssignConfig

    kw = dict(
        # Exact layouts (chunks 0): the installed assignment's step compiles ahead.
        method=AdaQP(AssignConfig(lookahead=1, group_size=8, lam=0.2), period=3, chunks=0),
        parts=2,
        epochs=5,
        checkpoint_every=1,
    )
    summary = train(_config(tmp_path / "full", **kw), graph=GRAPH)
    records = _metrics(tmp_path / "full")
    assert "assign_time" in records[2] and "widths" not in records[2]  # solved, not installed
    assert records[3]["solved_at"] == 3 and "widths" in records[3]
    assert summary["compiled_ahead"] == (summary["compiled_steps"] == 2)
    _assert_resume_reproduces(tmp_path / "cut", kw, 3, records)


def test_pipegcn_adaptive_run_resumes_with_its_widths_and_stale_buffers(tmp_path):
    """PipeGCN with AdaQP's widths: the assignment re-solved at epochs 3 and 5 is logged, the
    bytes change with it, and a run resumed from the epoch-2 checkpoint (the stale halos and
    gradients, the traces and the 8-bit first period) reproduces the metrics."""
    from jaxgraph.comm.adaptive import AssignConfig

    # Exact layouts (chunks 0): the bytes follow the widths exactly; a new layout compiles.
    method = PipeGCN(
        quantize="adaptive", period=2, chunks=0, assign=AssignConfig(solver="frontier")
    )
    kw = dict(method=method, parts=2, epochs=5, checkpoint_every=2)
    train(_config(tmp_path / "full", **kw), graph=GRAPH)
    records = _metrics(tmp_path / "full")
    assert ["widths" in r for r in records] == [False, False, True, False, True]
    assert records[2]["bytes_moved"] < records[1]["bytes_moved"]  # below the first 8 bits'
    _assert_resume_reproduces(tmp_path / "cut", kw, 3, records)


def test_adaqp_with_bfloat16_row_parameters(tmp_path):
    """AdaQP with bfloat16 scale and offset: at the same widths (the first 8-bit period) each
    quantized row carries 4 fewer bytes, the losses agree to bfloat16's rounding of the
    grid, and the program solves at the boundary."""
    from jaxgraph.comm.adaptive import AssignConfig

    runs = {}
    for dtype in ("float32", "bfloat16"):
        method = AdaQP(AssignConfig(solver="frontier"), period=2, chunks=0, param_dtype=dtype)
        train(_config(tmp_path / dtype, method=method, parts=2, epochs=3), graph=GRAPH)
        runs[dtype] = _metrics(tmp_path / dtype)
    fp32, bf16 = runs["float32"], runs["bfloat16"]
    assert bf16[0]["bytes_moved"] < fp32[0]["bytes_moved"]
    assert abs(bf16[0]["loss"] - fp32[0]["loss"]) < 1e-2
    assert "widths" in bf16[2] and np.isfinite(bf16[2]["loss"])


def test_one_part_quantized_methods_train_like_vanilla(tmp_path):
    """On one part there is no halo: the quantized strategies with chunked layouts (which once
    failed to trace an exchange without ring rounds) move nothing and train exactly as Vanilla
    does."""
    kw = dict(parts=1, epochs=3, checkpoint_every=0)
    train(_config(tmp_path / "vanilla", **kw), graph=GRAPH)
    fields = ("loss", "val_loss", "train_score", "val_score", "test_score", "bytes_moved")
    expect = [[r[f] for f in fields] for r in _metrics(tmp_path / "vanilla")]
    for method in (Quantized("random", period=1, chunks=2), AdaQP(period=1, chunks=2)):
        name = method.label()
        summary = train(_config(tmp_path / name, method=method, **kw), graph=GRAPH)
        assert summary["mean_bytes_per_epoch"] == 0.0, name
        assert [[r[f] for f in fields] for r in _metrics(tmp_path / name)] == expect, name
