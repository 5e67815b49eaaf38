"""RiPP: the pipelined schedules against the sequential one, stop propagation, checkpoints."""

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from jaxgraph.atomic import CheckpointError
from jaxgraph.data import dc_sbm
from jaxgraph.embed.checkpoints import (
    latest_state,
    read_checkpoint,
    read_state,
    write_checkpoint,
    write_state,
)
from jaxgraph.embed.codec import FabcConfig
from jaxgraph.embed.feedback import FeedbackConfig
from jaxgraph.embed.pipeline import PipelineConfig, PipelineStopped, busy_fractions, run_stages
from jaxgraph.embed.run import EmbedConfig, embed
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.sync import HotspotSync
from jaxgraph.embed.walks import WalkConfig

from harness import kill_when

GRAPH = dc_sbm(300, 5, 10.0, num_features=0, homophily=0.8, seed=0)
# The trainer shapes of test_skipgram.py / test_embed_run.py, to reuse their compilations.
BASE = EmbedConfig(
    method="felog",
    walk=WalkConfig(walk_length=10),
    # One kernel thread, so that runs repeat their bits (also in the killed run's process).
    sgns=SkipGramConfig(dim=8, window=3, negatives=2, batch_size=16, sync_every=4, threads=1),
    feedback=FeedbackConfig(mu=0.5),
    rounds=4,
)


def _config(mode, lag=1, **changes):
    return BASE.replace(pipeline=PipelineConfig(mode, lag=lag), **changes)


def _same(a, b):
    np.testing.assert_array_equal(a.syn0, b.syn0)
    np.testing.assert_array_equal(a.syn1, b.syn1)
    assert [(r.active, r.walks, r.pairs, r.source_round) for r in a.rounds] == [
        (r.active, r.walks, r.pairs, r.source_round) for r in b.rounds
    ]


def test_deterministic_pipeline_equals_sequential_bit_for_bit():
    extra = dict(compress=FabcConfig(k=2), sync=HotspotSync(full_every=4))
    seq = embed(_config("sequential", **extra).replace(parts=2), GRAPH)
    det = embed(_config("deterministic", **extra).replace(parts=2), GRAPH)
    _same(seq, det)
    assert [r.source_round for r in seq.rounds] == [-1, -1, 0, 1][: len(seq.rounds)]
    assert {s.thread for s in det.trace if s.op == "walk"} == {"ripp-host"}
    assert {s.op for s in det.trace} >= {"walk", "encode", "decode", "train", "feedback"}
    # lag 0 is the plain loop (pipeline None).
    _same(
        embed(BASE.replace(parts=2), GRAPH),
        embed(_config("deterministic", lag=0).replace(parts=2), GRAPH),
    )
    # The overlapped schedule walks from sets no older than the lag allows.
    ovl = embed(_config("overlapped").replace(parts=2), GRAPH)
    assert all(r.round - 2 <= r.source_round < r.round for r in ovl.rounds)


def test_threaded_stages_overlap():
    def produce(r):
        time.sleep(0.08)
        return r

    def consume(r):
        time.sleep(0.08)
        return False

    timings = {}
    for threaded in (False, True):
        t0 = time.perf_counter()
        assert run_stages(produce, consume, range(6), threaded=threaded) == 6
        timings[threaded] = time.perf_counter() - t0
    # Sequential: 12 sleeps; overlapped: about 7.
    assert timings[True] < 0.8 * timings[False], timings


def _bounded(fn, seconds=10.0):
    """Runs ``fn`` in a thread; fails the test if it has not returned within ``seconds``."""
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- inspected by the caller
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the pipeline deadlocked"
    return out


def test_a_failing_producer_stops_the_consumer():
    def produce(r):
        if r == 2:
            raise ValueError("walker failed at round 2")
        return r

    out = _bounded(lambda: run_stages(produce, lambda r: False, range(10), threaded=True))
    assert isinstance(out["error"], ValueError) and "round 2" in str(out["error"])


def test_a_failing_consumer_releases_a_producer_blocked_on_a_full_queue():
    produced = []
    blocked = threading.Event()

    def produce(r):
        produced.append(r)
        if r >= 2:
            blocked.set()  # the queue (size 1) is full from here on
        return r

    def consume(r):
        assert blocked.wait(5)
        time.sleep(0.1)  # the producer now sits in put() on the full queue
        raise KeyboardInterrupt

    t0 = time.perf_counter()
    out = _bounded(lambda: run_stages(produce, consume, range(100), threaded=True))
    assert isinstance(out["error"], KeyboardInterrupt)
    assert time.perf_counter() - t0 < 5 and len(produced) <= 3


def test_an_external_stop_event_ends_the_run():
    stop = threading.Event()

    def consume(r):
        if r == 1:
            stop.set()
        return False

    out = _bounded(lambda: run_stages(lambda r: r, consume, range(100), threaded=True, stop=stop))
    assert isinstance(out["error"], PipelineStopped)


def test_busy_fractions():
    from jaxgraph.embed.pipeline import Span

    spans = [Span(0, "walk", "h", 0.0, 1.0), Span(0, "train", "m", 0.5, 2.0)]
    assert busy_fractions(spans, ("walk",)) == pytest.approx(0.5)
    assert busy_fractions(spans, ("walk", "train")) == pytest.approx(1.0)
    edges, frac = busy_fractions(spans, ("walk",), bins=4)
    np.testing.assert_allclose(frac, [1, 1, 0, 0])
    assert edges[-1] == 2.0


def test_corrupt_checkpoints_are_rejected_naming_the_file(tmp_path):
    path = tmp_path / "corpus_000001.ckpt"
    write_checkpoint(path, {"x": np.arange(1000.0)}, {"round": 1})
    arrays, meta = read_checkpoint(path)
    assert meta["round"] == 1 and np.array_equal(arrays["x"], np.arange(1000.0))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match=f"{path}.*truncated"):
        read_checkpoint(path)
    flipped = bytearray(data)
    flipped[-500] ^= 0x10
    path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match=f"{path}.*corrupt"):
        read_checkpoint(path)
    path.write_bytes(data[:5])
    with pytest.raises(CheckpointError, match=str(path)):
        read_checkpoint(path)
    assert not list(tmp_path.glob(".*.tmp"))


def _data_files(directory: Path) -> list[Path]:
    """The OCDBT data files of an orbax checkpoint (b-tree nodes and array chunks), biggest
    first. Some are dead copies (small values are merged into the root database), so a test
    that must hit the live data damages all of them."""
    found = [p for p in directory.rglob("*") if p.is_file() and p.parent.name == "d"]
    return sorted(found, key=lambda p: -p.stat().st_size)


def test_state_checkpoints_are_verified_naming_the_checkpoint(tmp_path):
    arrays = {"x": np.arange(100_000.0), "empty": np.zeros((0, 3), np.int32)}
    path = write_state(tmp_path, 1, arrays, {"round": 1})
    assert path == tmp_path / "state_000001" and latest_state(tmp_path) == path
    read, meta = read_state(path)
    assert meta["round"] == 1 and sorted(read) == ["empty", "x"]
    np.testing.assert_array_equal(read["x"], arrays["x"])
    assert read["empty"].shape == (0, 3) and read["empty"].dtype == np.int32
    data = _data_files(path)[0]  # the chunks of x
    original = data.read_bytes()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x10
    data.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match=f"{path}.*corrupt"):
        read_state(path)
    data.write_bytes(original[: len(original) // 2])
    with pytest.raises(CheckpointError, match=f"{path}.*truncated"):
        read_state(path)
    data.write_bytes(original)
    meta_file = path / "meta" / "metadata"
    meta_file.write_text(meta_file.read_text().replace('"round": 1', '"round": 2'))
    with pytest.raises(CheckpointError, match=f"{path}.*damaged header"):
        read_state(path)
    for r in (2, 3):
        write_state(tmp_path, r, arrays, {"round": r})
    # The newest two steps are kept, no temporary directory is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state_000002", "state_000003"]
    (tmp_path / "state_000004").mkdir()  # not a checkpoint
    with pytest.raises(CheckpointError, match="state_000004"):
        read_state(latest_state(tmp_path))


def test_state_checkpoints_take_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # orbax itself wants absolute paths
    path = write_state(Path("ckpts"), 0, {"x": np.arange(3)}, {"round": 0})
    assert path == Path("ckpts/state_000000") and latest_state("ckpts") == path
    np.testing.assert_array_equal(read_state(path)[0]["x"], np.arange(3))


def test_embed_refuses_a_corrupt_or_foreign_checkpoint(tmp_path):
    cfg = _config("deterministic", rounds=2)
    embed(cfg.replace(parts=2), GRAPH, checkpoint_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corpus_000000.ckpt",
        "corpus_000001.ckpt",
        "state_000000",
        "state_000001",
    ]
    with pytest.raises(CheckpointError, match=r"different run: settings \['seed'\]"):
        embed(cfg.replace(seed=3, parts=2), GRAPH, checkpoint_dir=tmp_path)
    for data in _data_files(tmp_path / "state_000001"):
        data.write_bytes(data.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match="state_000001"):
        embed(cfg.replace(parts=2), GRAPH, checkpoint_dir=tmp_path)


def test_killed_run_resumes_to_identical_embeddings(tmp_path):
    """SIGKILL after a few rounds; the resumed run equals an uninterrupted one bit for bit.

    ``mu = 1`` keeps the active set from emptying (Psi < 1 unless a node's sampled
    neighbours are exactly parallel to it), so the run cannot stop by itself."""
    killed = tmp_path / "killed"
    rounds = 7
    script = textwrap.dedent(f"""
        import os, sys, time
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]
        from test_pipeline import GRAPH, _config
        from jaxgraph.embed.feedback import FeedbackConfig
        from jaxgraph.embed.run import embed
        from jaxgraph.mesh import make_mesh
        cfg = _config("deterministic", rounds={rounds * 100}, feedback=FeedbackConfig(mu=1.0))
        slow = lambda r: time.sleep(0.2)
        embed(cfg.replace(parts=2), GRAPH, checkpoint_dir={str(killed)!r}, log=slow)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    kill_when(
        subprocess.Popen([sys.executable, "-c", script], env=env),
        (killed / "state_000002").exists,  # orbax renames a step into place when complete
        what="embedding",
    )
    done = int(latest_state(killed).name.split("_")[1])
    total = max(rounds, done + 3)
    cfg = _config("deterministic", rounds=total, feedback=FeedbackConfig(mu=1.0))
    resumed = embed(cfg.replace(parts=2), GRAPH, checkpoint_dir=killed)
    full = embed(cfg.replace(parts=2), GRAPH)
    assert resumed.rounds[-1].round == total - 1 and len(resumed.rounds) == total
    _same(resumed, full)
