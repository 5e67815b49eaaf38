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

from jaxgraph.data import dc_sbm
from jaxgraph.embed.compress import FabcConfig
from jaxgraph.embed.feedback import FeedbackConfig
from jaxgraph.embed.pipeline import (
    CheckpointError,
    PipelineConfig,
    PipelineStopped,
    busy_fractions,
    read_checkpoint,
    run_stages,
    write_checkpoint,
)
from jaxgraph.embed.run import EmbedConfig, embed
from jaxgraph.embed.skipgram import SkipGramConfig
from jaxgraph.embed.sync import HotspotSync
from jaxgraph.embed.walks import WalkConfig
from jaxgraph.mesh import make_mesh

from harness import kill_when

GRAPH = dc_sbm(300, 5, 10.0, num_features=0, homophily=0.8, seed=0)
# The trainer shapes of test_skipgram.py / test_embed_run.py, to reuse their compilations.
BASE = EmbedConfig(
    method="felog",
    walk=WalkConfig(walk_length=10),
    sgns=SkipGramConfig(dim=8, window=3, negatives=2, batch_size=16, sync_every=4),
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
    mesh = make_mesh(2)
    extra = dict(compress=FabcConfig(k=2), sync=HotspotSync(full_every=4))
    seq = embed(GRAPH, _config("sequential", **extra), mesh)
    det = embed(GRAPH, _config("deterministic", **extra), mesh)
    _same(seq, det)
    assert [r.source_round for r in seq.rounds] == [-1, -1, 0, 1][: len(seq.rounds)]
    assert {s.thread for s in det.trace if s.op == "walk"} == {"ripp-host"}
    assert {s.op for s in det.trace} >= {"walk", "encode", "decode", "train", "feedback"}
    # lag 0 is the plain loop (pipeline None).
    _same(embed(GRAPH, BASE, mesh), embed(GRAPH, _config("deterministic", lag=0), mesh))
    # The overlapped schedule walks from sets no older than the lag allows.
    ovl = embed(GRAPH, _config("overlapped"), mesh)
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
    path = tmp_path / "state_000001.ckpt"
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


def test_embed_refuses_a_corrupt_or_foreign_checkpoint(tmp_path):
    mesh = make_mesh(2)
    cfg = _config("deterministic", rounds=2)
    embed(GRAPH, cfg, mesh, checkpoint_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corpus_000000.ckpt",
        "corpus_000001.ckpt",
        "state_000000.ckpt",
        "state_000001.ckpt",
    ]
    with pytest.raises(CheckpointError, match=r"different run: settings \['seed'\]"):
        embed(GRAPH, cfg.replace(seed=3), mesh, checkpoint_dir=tmp_path)
    state = tmp_path / "state_000001.ckpt"
    state.write_bytes(state.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match="state_000001.ckpt"):
        embed(GRAPH, cfg, mesh, checkpoint_dir=tmp_path)


def test_killed_run_resumes_to_identical_embeddings(tmp_path):
    """SIGKILL after a few rounds; the resumed run equals an uninterrupted one bit for bit.

    ``mu = 2`` keeps every node active (Psi <= 1), so the run cannot stop by itself."""
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
        cfg = _config("deterministic", rounds={rounds * 100}, feedback=FeedbackConfig(mu=2.0))
        slow = lambda r: time.sleep(0.2)
        embed(GRAPH, cfg, make_mesh(2), checkpoint_dir={str(killed)!r}, log=slow)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    kill_when(
        subprocess.Popen([sys.executable, "-c", script], env=env),
        (killed / "state_000002.ckpt").exists,
        what="embedding",
    )
    done = max(int(p.stem.split("_")[1]) for p in killed.glob("state_*.ckpt"))
    total = max(rounds, done + 3)
    cfg = _config("deterministic", rounds=total, feedback=FeedbackConfig(mu=2.0))
    mesh = make_mesh(2)
    resumed = embed(GRAPH, cfg, mesh, checkpoint_dir=killed)
    full = embed(GRAPH, cfg, mesh)
    assert resumed.rounds[-1].round == total - 1 and len(resumed.rounds) == total
    _same(resumed, full)
