"""The operators of one embedding run (:class:`RoundRunner`) and what a round reports
(:class:`RoundLog`).

A round walks from its active set, encodes the walks (FaBC) and checkpoints the corpus on the
host (:meth:`RoundRunner.produce`), then decodes and trains on the devices, checks the round's
health and computes the feedback that fixes later rounds' active sets
(:meth:`RoundRunner.consume`). :func:`run_rounds` runs them on the schedule of
:mod:`jaxgraph.embed.pipeline` (:func:`~jaxgraph.embed.pipeline.run_stages`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jaxgraph.atomic import CheckpointError
from jaxgraph.embed.checkpoints import (
    corpus_arrays,
    corpus_from,
    corpus_path,
    read_checkpoint,
    read_state,
    write_checkpoint,
    write_state,
)
from jaxgraph.embed.compress import CompressedWalks, raw_bytes
from jaxgraph.embed.feedback import update_active_set
from jaxgraph.embed.health import UnhealthyTraining
from jaxgraph.embed.pipeline import PipelineConfig, Span, StopSignal, run_stages
from jaxgraph.embed.walks import Walks, random_walks


@dataclasses.dataclass
class Corpus:
    round: int
    source_round: int  # the feedback round whose active set the walks started from
    active: int
    payload: Walks | CompressedWalks
    raw_bytes: int
    seconds_host: float


@dataclasses.dataclass
class RoundLog:
    """One round of :func:`embed`."""

    round: int
    active: int
    walks: int
    tokens: int
    pairs: int
    lr: float
    loss: float
    syncs: int
    sync_rows: int
    seconds_walk: float
    seconds_train: float
    seconds_feedback: float
    seconds: float
    evaluated: int = 0
    psi_mean: float = float("nan")
    reactivated: int = 0
    next_active: int = 0
    walk_bytes_raw: int = 0
    walk_bytes_sent: int = 0
    seconds_codec: float = 0.0
    source_round: int = -1  # the feedback round whose active set the walks started from
    # Training input moved host -> device by the trainer: pair buffers or walk rows (0 for walks
    # decoded on the device, whose compressed corpus is walk_bytes_sent).
    train_input_bytes: int = 0
    max_norm: float = float("nan")  # the largest row norm of syn0 and syn1 after the round


class RoundRunner:
    """The operators of one embedding run (of an :class:`~jaxgraph.embed.run.EmbedConfig`, on
    the out-CSR ``csr``, with a FaBC :class:`WalkCodec` or None and the round-0 active set
    ``int32[A]``) and the state they share; :func:`run_rounds` calls them on one or two threads.
    """

    def __init__(self, csr, config, trainer, codec, initial_active, checkpoint_dir=None):
        self.csr = csr
        self.config = config
        self.pipe: PipelineConfig = config.pipeline or PipelineConfig("sequential", lag=0)
        self.trainer = trainer
        self.codec = codec
        self.dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.active_after: dict[int, np.ndarray] = {-1: initial_active}  # feedback round -> set
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.ever_inactive = np.zeros(trainer.num_nodes, bool)
        self.rounds: list = []
        self.spans: list[Span] = []
        self.t0 = time.perf_counter()
        self.start_round = 0
        self.finished = False
        self.stop_reason = "max_rounds"
        self.after_round: Callable[[Any], None] | None = None  # called with each RoundLog

    def _span(self, r: int, op: str, start: float) -> float:
        end, thread = time.perf_counter(), threading.current_thread().name
        self.spans.append(Span(r, op, thread, start - self.t0, end - self.t0))
        return end - start

    def _settings(self) -> dict:
        cfg = self.config.to_dict()
        # The schedule and the round budget may change across a resume; nothing else may.
        cfg.pop("pipeline", None)
        cfg.pop("rounds", None)
        cfg["pipeline_lag"] = self.pipe.lag
        return json.loads(json.dumps(cfg, default=str))

    def _wait_active(self, r: int) -> tuple[int, np.ndarray]:
        """The active set round ``r`` walks from: ``(feedback round, set)``."""
        if not self.config.uses_feedback:
            return -1, self.active_after[-1]
        need = max(-1, r - 1 - self.pipe.lag)
        with self.cond:
            while need not in self.active_after and not self.finished:
                if self.stop.is_set():
                    raise StopSignal
                self.cond.wait(self.pipe.poll_seconds)
            if need not in self.active_after:
                raise StopSignal
            src = need
            if self.pipe.mode == "overlapped":
                src = max(f for f in self.active_after if f < r)
            return src, self.active_after[src]

    def produce(self, r: int) -> Corpus:
        """Walks (or a checkpointed corpus), FaBC encoding and the corpus checkpoint of round
        ``r``."""
        src, active = self._wait_active(r)
        t_host = time.perf_counter()
        path = None if self.dir is None else corpus_path(self.dir, r)
        if path is not None and path.exists():
            t = time.perf_counter()
            arrays, meta = read_checkpoint(path)
            payload = corpus_from(arrays, meta)
            self._span(r, "corpus_load", t)
            return Corpus(
                r, int(meta["source_round"]), int(meta["active"]), payload, int(meta["raw"]), 0.0
            )
        t = time.perf_counter()
        walks = random_walks(
            self.csr, active, self.config.walk, seed=self.config.seed, round_index=r
        )
        self._span(r, "walk", t)
        payload: Walks | CompressedWalks = walks
        if self.codec is not None:
            t = time.perf_counter()
            payload = self.codec.encode(walks)
            self._span(r, "encode", t)
        corpus = Corpus(
            r, src, int(active.size), payload, raw_bytes(walks), time.perf_counter() - t_host
        )
        if path is not None:
            t = time.perf_counter()
            arrays, meta = corpus_arrays(payload)
            meta.update(round=r, source_round=src, active=corpus.active, raw=corpus.raw_bytes)
            write_checkpoint(path, arrays, meta)
            self._span(r, "corpus_ckpt", t)
        return corpus

    def consume(self, corpus: Corpus, round_start: float) -> bool:
        """Decode, train, feedback and the state checkpoint of one round; returns True when
        the run stops after it."""
        r, cfg = corpus.round, self.config
        t = time.perf_counter()
        sent = raw = corpus.raw_bytes
        if isinstance(corpus.payload, CompressedWalks):
            on_host = self.trainer.config.pairs == "host"
            walks, sent = self.codec.decode(corpus.payload, to_host=on_host)
            seconds_codec = self._span(r, "decode", t)
        else:
            walks, seconds_codec = corpus.payload, 0.0
        t1 = time.perf_counter()
        stats = self.trainer.train_round(walks, r)
        seconds_train = self._span(r, "train", t1)
        entry = RoundLog(
            round=r,
            active=corpus.active,
            walks=walks.num_walks,
            tokens=walks.num_tokens,
            pairs=stats.pairs,
            lr=stats.lr,
            loss=stats.loss,
            syncs=stats.syncs,
            sync_rows=stats.sync_rows,
            seconds_walk=corpus.seconds_host,
            seconds_train=seconds_train,
            seconds_feedback=0.0,
            seconds=0.0,
            next_active=corpus.active,
            source_round=corpus.source_round,
            train_input_bytes=stats.input_bytes,
            max_norm=stats.max_norm,
        )
        if self.codec is not None:
            entry.walk_bytes_raw, entry.walk_bytes_sent = raw, sent
            entry.seconds_codec = seconds_codec
        stop = self._check_health(entry)
        t2 = time.perf_counter()
        if cfg.uses_feedback:
            step = update_active_set(
                self.active_after[corpus.source_round],
                self.trainer.input_vectors(),
                *self.csr,
                cfg.feedback,
                seed=cfg.seed,
                round_index=r,
                ever_inactive=self.ever_inactive,
            )
            entry.evaluated, entry.psi_mean = step.evaluated, step.psi_mean
            entry.reactivated, entry.next_active = step.reactivated, int(step.active.size)
            if step.stop and not stop:
                stop = True
                self.stop_reason = "active_set_empty" if step.active.size == 0 else "stop_ratio"
            with self.cond:
                self.active_after[r] = step.active
                for f in [f for f in self.active_after if -1 < f < r - 1 - self.pipe.lag]:
                    del self.active_after[f]  # no later round walks from these
                self.cond.notify_all()
        entry.seconds_feedback = self._span(r, "feedback", t2)
        end = time.perf_counter()
        entry.seconds = end - round_start
        self.rounds.append(entry)
        if self.after_round is not None:
            self.after_round(entry)
        if self.dir is not None:
            t = time.perf_counter()
            self.save_state(r, stop)
            self._span(r, "state_ckpt", t)
        return stop

    def _check_health(self, entry) -> bool:
        """Warns when the round left its healthy range (:mod:`jaxgraph.embed.health`);
        returns whether the run stops here (a non-finite loss, or ``action="stop"``)."""
        health = self.config.health
        negatives, path = self.config.sgns.negatives, self.trainer.path_length
        problems = health.problems(entry.loss, entry.max_norm, negatives, path)
        fatal = not math.isfinite(entry.loss)
        if not problems or (health.action == "ignore" and not fatal):
            return False
        stops = fatal or health.action == "stop"
        tail = " (the run stops here)" if stops else ""
        message = f"round {entry.round}: {'; '.join(problems)}{tail}"
        warnings.warn(message, UnhealthyTraining, stacklevel=2)
        if stops:
            self.stop_reason = "non_finite_loss" if fatal else "unhealthy"
        return stops

    def save_state(self, r: int, stopped: bool) -> None:
        arrays, counters = self.trainer.state_dict()
        arrays["ever_inactive"] = self.ever_inactive
        with self.cond:
            pending = dict(self.active_after)
        for f, a in pending.items():
            arrays[f"active_{f + 1}"] = a  # key shifted so that round -1 reads as 0
        if self.codec is not None and self.codec.hot_ids is not None:
            arrays["hot_ids"] = self.codec.hot_ids
        header = {
            "round": r,
            "stopped": stopped,
            "stop_reason": self.stop_reason,
            **counters,
            "codec_k": None if self.codec is None else self.codec.k,
            "settings": self._settings(),
            "rounds": [dataclasses.asdict(x) for x in self.rounds],
        }
        write_state(self.dir, r, arrays, header, keep=2)

    def restore(self, path: Path) -> bool:
        """Loads a state checkpoint; returns True when the saved run had already stopped."""
        arrays, meta = read_state(path)
        saved, ours = meta["settings"], self._settings()
        if saved != ours:
            diff = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
            raise CheckpointError(f"checkpoint {path} is from a different run: settings {diff}")
        try:
            self.trainer.load_state_dict(arrays, meta)
        except ValueError as e:
            raise CheckpointError(f"checkpoint {path}: {e}") from e
        self.ever_inactive[:] = arrays["ever_inactive"]
        self.active_after = {
            int(k.split("_")[1]) - 1: v for k, v in arrays.items() if k.startswith("active_")
        }
        if self.codec is not None:
            self.codec.k = meta["codec_k"]
            self.codec.hot_ids = arrays.get("hot_ids")
        self.rounds = [RoundLog(**x) for x in meta["rounds"]]
        self.stop_reason = meta["stop_reason"]
        self.start_round = int(meta["round"]) + 1
        return bool(meta["stopped"])


def run_rounds(runner: RoundRunner, *, stop: threading.Event | None = None) -> None:
    """Runs the remaining rounds of ``runner`` on its configured schedule."""
    pipe = runner.pipe
    last_end = [time.perf_counter()]

    def produce(r):
        try:
            return runner.produce(r)
        except StopSignal:
            raise
        except BaseException:
            runner.stop.set()
            raise

    def consume(corpus):
        stopped = runner.consume(corpus, last_end[0])
        last_end[0] = time.perf_counter()
        return stopped

    stop_event = stop or runner.stop
    runner.stop = stop_event
    try:
        run_stages(
            produce,
            consume,
            range(runner.start_round, runner.config.rounds),
            threaded=pipe.mode != "sequential",
            queue_size=pipe.queue_size,
            poll_seconds=pipe.poll_seconds,
            stop=stop_event,
        )
    finally:
        with runner.cond:
            runner.finished = True
            runner.cond.notify_all()
