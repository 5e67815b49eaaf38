"""RiPP: the round-interleaved pipeline of the embedding loop (FeLoG §5.3, §6.7).

Each round runs six operators::

    host:    walk (numba walkers)  -> encode (FaBC)  -> corpus checkpoint
    device:  decode (bitmap kernel) -> train (skip-gram + syncs) -> feedback (FeeST)

The feedback after round ``f`` yields the active set of later rounds. With a lag ``l``, the
walks of round ``r`` start from the active set computed after round ``r - 1 - l`` (the initial
set while ``r - 1 - l < 0``). ``l = 0`` is the plain loop; ``l = 1`` lets the walks of round
``r + 1`` be generated while round ``r`` trains.

Schedules (:class:`PipelineConfig.mode`):

* ``sequential``: the operators run one after the other on the calling thread.
* ``deterministic``: the host operators run in a producer thread ahead of the trainer, handing
  corpora over through a bounded queue; round ``r`` waits for exactly the active set of round
  ``r - 1 - l``. Walks, pairs and negatives are keyed by ``(seed, round)``, so the embeddings
  are bit-identical to the ``sequential`` schedule with the same lag.
* ``overlapped``: as ``deterministic``, but round ``r`` starts from the newest active set
  available when its walks begin (at least that of round ``r - 1 - l``), so the staleness is
  between 0 and ``l`` rounds and depends on timing (FeLoG's behaviour, minus its time-boxed
  walk rounds).

The numba walkers and encoders are compiled with ``nogil=True``, so a host thread samples while
the main thread dispatches JAX programs. Stops propagate without deadlock: every blocking
``put``/``get``/wait polls a shared stop event; an exception in either thread (including
``KeyboardInterrupt``) sets it, the other side leaves, and the first error is re-raised by
:func:`run_rounds`.

Checkpoints (``checkpoint_dir``): after every round the producer writes that round's corpus
(``corpus_<r>.ckpt``, compressed when FaBC is on; :func:`write_checkpoint`) and the trainer the
train state (the orbax step ``state_<r>/``: both tables of every replica, the sync anchor,
counts, step counters, FaBC's hot ids, the pending active sets, the log; :func:`write_state`),
each atomically and with SHA-256 digests. A truncated, altered or foreign file raises
:class:`CheckpointError` naming it; a state from another run names the settings that differ. A
run started on a directory that holds state checkpoints resumes after the last complete round;
corpora already written for later rounds are reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import queue
import re
import threading
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np

from jaxgraph.atomic import CheckpointError, atomic_write_bytes
from jaxgraph.embed.compress import CompressedWalks, raw_bytes
from jaxgraph.embed.feedback import update_active_set
from jaxgraph.embed.health import UnhealthyTraining
from jaxgraph.embed.walks import Walks, random_walks
from jaxgraph.options import flag

Mode = Literal["sequential", "overlapped", "deterministic"]
MODES = ("sequential", "overlapped", "deterministic")
HOST_OPS = ("walk", "encode", "corpus_ckpt", "corpus_load")
DEVICE_OPS = ("decode", "train")
MAGIC = b"JGEMBCKPT1"
_STATE = re.compile(r"^state_(\d{6})$")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """The schedule of the round loop.

    Attributes:
      mode: ``sequential``, ``deterministic`` or ``overlapped`` (module docstring).
      lag: rounds between the feedback that fixes an active set and the round that walks from
        it (``0`` allows no overlap of walks with training).
      queue_size: corpora the producer may hold ready ahead of the trainer.
      poll_seconds: timeout of each blocking queue operation before the stop event is checked.

    CPU-sized run: ``cpu_config("felog", pipeline=PipelineConfig("deterministic"))``.
    """

    mode: Mode = flag("--pipeline", "sequential")
    lag: int = 1
    queue_size: int = 1
    poll_seconds: float = 0.05

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown pipeline mode {self.mode!r}; expected one of {MODES}")
        if self.lag < 0:
            raise ValueError(f"lag must be >= 0, got {self.lag}")
        if self.queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {self.queue_size}")
        if self.poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be positive, got {self.poll_seconds}")


class PipelineStopped(RuntimeError):
    """The pipeline was stopped by its stop event before the rounds were done."""


@dataclasses.dataclass(frozen=True)
class Span:
    """One operator of one round: ``op`` ran on ``thread`` from ``start`` to ``end`` (seconds
    since the round loop began)."""

    round: int
    op: str
    thread: str
    start: float
    end: float


# ---------------------------------------------------------------------- checkpoint files


def write_checkpoint(path: str | Path, arrays: dict[str, np.ndarray], header: dict) -> None:
    """Writes ``MAGIC + header JSON + newline + npz`` atomically; the header records the
    payload's length and SHA-256."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
    meta = {**header, "payload_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    atomic_write_bytes(path, MAGIC + json.dumps(meta).encode() + b"\n" + payload)


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Reads a file of :func:`write_checkpoint`, verified.

    Raises:
      CheckpointError: naming the file, when it is missing, truncated or altered.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} cannot be read: {e}") from e
    if not data.startswith(MAGIC) or b"\n" not in data:
        raise CheckpointError(f"checkpoint {path} is not an embedding checkpoint or is truncated")
    head, payload = data[len(MAGIC) :].split(b"\n", 1)
    try:
        meta = json.loads(head.decode())
        expect_len, expect_sha = int(meta["payload_bytes"]), str(meta["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} has a damaged header ({e})") from e
    if len(payload) != expect_len:
        raise CheckpointError(
            f"checkpoint {path} is truncated or padded: payload {len(payload)} bytes, "
            f"header says {expect_len}"
        )
    if hashlib.sha256(payload).hexdigest() != expect_sha:
        raise CheckpointError(f"checkpoint {path} is corrupt: SHA-256 of the payload differs")
    try:
        with np.load(io.BytesIO(payload)) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint {path} has an unreadable payload ({e})") from e
    return arrays, meta


def corpus_path(directory: Path, r: int) -> Path:
    return directory / f"corpus_{r:06d}.ckpt"


def state_path(directory: Path, r: int) -> Path:
    return directory / f"state_{r:06d}"


def latest_state(directory: str | Path) -> Path | None:
    """The state checkpoint of the highest round in ``directory``, or None.

    Raises:
      CheckpointError: if ``directory`` holds only state files of the old format.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _STATE.match(p.name)))
    if found:
        return state_path(directory, found[-1])
    if any(directory.glob("state_*.ckpt")):
        raise CheckpointError(
            f"{directory} holds state checkpoints of an older format (state_*.ckpt), which "
            "cannot be resumed; delete them to start over"
        )
    return None


def _state_manager(directory: Path, keep: int):
    """A synchronous orbax ``CheckpointManager`` over ``directory`` with steps
    ``state_<round:06d>``, keeping the newest ``keep``."""
    import orbax.checkpoint as ocp  # slow to import; only runs that checkpoint pay it

    options = ocp.CheckpointManagerOptions(
        step_prefix="state",
        step_format_fixed_length=6,
        enable_async_checkpointing=False,
        cleanup_tmp_directories=True,
        save_root_metadata=False,
        preservation_policy=ocp.checkpoint_managers.LatestN(keep),
    )
    # orbax needs absolute paths.
    return ocp.CheckpointManager(
        directory.absolute(), options=options, item_names=("state", "meta")
    )


def _digest(meta: dict) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def write_state(
    directory: Path, r: int, arrays: dict[str, np.ndarray], header: dict, keep: int = 2
) -> Path:
    """Writes ``arrays`` and ``header`` as the orbax step ``state_<r>`` of ``directory``
    (atomically; an existing step ``r`` is replaced), keeping the newest ``keep`` steps.

    Layout, beside the round's corpus file (:func:`write_checkpoint`)::

        <checkpoint_dir>/corpus_000003.ckpt   MAGIC + header JSON line + .npz payload whose
                                              length and SHA-256 the header records (written
                                              to a temporary file, fsynced, renamed)
        <checkpoint_dir>/state_000003/        an orbax step (``CheckpointManager``, the newest
            state/                            two kept): the arrays, an orbax PyTree item, and
            meta/                             a JSON item with the counters, the run's
                                              settings, the log, each array's shape, dtype and
                                              SHA-256, and a SHA-256 of the item itself

    The step is written into a temporary directory and renamed when complete (orbax).
    """
    import orbax.checkpoint as ocp

    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    meta = {
        **header,
        "arrays": {
            k: {
                "shape": list(a.shape),
                "dtype": str(a.dtype),
                "sha256": hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest(),
            }
            for k, a in arrays.items()
        },
    }
    meta["sha256"] = _digest(meta)
    stored = {k: a for k, a in arrays.items() if a.size}  # orbax stores no empty array
    with _state_manager(directory, keep) as manager:
        if r in manager.all_steps():
            manager.delete(r)
        manager.save(
            r,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(stored), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )
    return state_path(directory, r)


def _reason(e: BaseException) -> str:
    """The first line of the root cause of an orbax/tensorstore error."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = str(e).split(" [tensorstore_spec=")[0].split(" See full TensorStore details")[0]
    lines = text.strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def _read_array(path: Path, key: str) -> np.ndarray:
    """The array ``key`` of the ``state`` item of the orbax step ``path``, read whole through
    tensorstore's synchronous API (an orbax restore reads arrays concurrently; when one read
    fails, the others complete into its closed event loop and print tracebacks)."""
    import tensorstore as ts

    state = path.absolute() / "state"
    flags = json.loads((state / "_METADATA").read_text())
    driver = "zarr3" if flags.get("use_zarr3") else "zarr"
    if flags.get("use_ocdbt", True):
        kvstore = {"driver": "ocdbt", "base": f"file://{state}/", "path": f"{key}/"}
    else:
        kvstore = {"driver": "file", "path": f"{state / key}/"}
    store = ts.open({"driver": driver, "kvstore": kvstore}, open=True, read=True).result()
    return np.asarray(store.read().result())


def read_state(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Reads a step of :func:`write_state`, verified.

    The arrays are read back one by one through tensorstore, the store orbax writes with, so
    that its errors surface one at a time.

    Raises:
      CheckpointError: naming the checkpoint, when it is missing, truncated, altered or not a
        state checkpoint.
    """
    import orbax.checkpoint as ocp

    path = Path(path)
    if not (path / "meta").is_dir():
        raise CheckpointError(f"checkpoint {path} is not an embedding state or is truncated")
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
            items = ocp.args.Composite(meta=ocp.args.JsonRestore())
            meta = ckptr.restore(path.absolute(), args=items).meta
    except Exception as e:  # orbax raises many types; all mean unreadable
        raise CheckpointError(f"checkpoint {path} is truncated or unreadable ({_reason(e)})") from e
    if not isinstance(meta, dict) or meta.get("sha256") != _digest(
        {k: v for k, v in meta.items() if k != "sha256"}
    ):
        raise CheckpointError(f"checkpoint {path} has a damaged header")
    arrays = {}
    for k, spec in meta["arrays"].items():
        shape, dtype = tuple(spec["shape"]), jnp.dtype(spec["dtype"])
        try:
            a = _read_array(path, k) if math.prod(shape) else np.zeros(shape, dtype)
        except Exception as e:  # tensorstore reports every failure as a ValueError today
            raise CheckpointError(
                f"checkpoint {path} is truncated or unreadable ({_reason(e)})"
            ) from e
        digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
        if a.shape != shape or a.dtype != dtype or digest != spec["sha256"]:
            raise CheckpointError(f"checkpoint {path} is corrupt: SHA-256 of array {k} differs")
        arrays[k] = a
    return arrays, meta


def _corpus_arrays(payload: Walks | CompressedWalks) -> tuple[dict[str, np.ndarray], dict]:
    if isinstance(payload, CompressedWalks):
        names = ("hot_ids", "bitmaps", "residual", "lengths")
        arrays = {k: np.asarray(getattr(payload, k)) for k in names}
        return arrays, {"kind": "fabc", "walk_length": payload.walk_length}
    return {"nodes": payload.nodes, "lengths": payload.lengths}, {"kind": "raw"}


def _corpus_from(arrays: dict[str, np.ndarray], meta: dict) -> Walks | CompressedWalks:
    if meta["kind"] == "fabc":
        return CompressedWalks(
            arrays["hot_ids"],
            arrays["bitmaps"],
            arrays["residual"],
            arrays["lengths"],
            int(meta["walk_length"]),
        )
    return Walks(arrays["nodes"], arrays["lengths"])


# ---------------------------------------------------------------------- the rounds


@dataclasses.dataclass
class _Corpus:
    round: int
    source_round: int  # the feedback round whose active set the walks started from
    active: int
    payload: Walks | CompressedWalks
    raw_bytes: int
    seconds_host: float


class _Stop(Exception):
    """Raised inside a stage when the shared stop event is set."""


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
    # Training input moved host -> device by the trainer: pair buffers (sgns.pairs="host") or
    # walk rows (sgns.pairs="device"; 0 for walks decoded on the device, whose compressed
    # corpus is walk_bytes_sent).
    train_input_bytes: int = 0
    max_norm: float = float("nan")  # the largest row norm of syn0 and syn1 after the round


class RoundRunner:
    """The operators of one embedding run and the state they share; :func:`run_rounds` calls
    them on one or two threads.

    Args:
      csr: the out-CSR ``(indptr, indices)``.
      config: the :class:`~jaxgraph.embed.run.EmbedConfig`.
      trainer: the :class:`~jaxgraph.embed.skipgram.SkipGramTrainer`.
      codec: the FaBC :class:`WalkCodec`, or None.
      initial_active: ``int32[A]`` the round-0 active set.
      checkpoint_dir: where corpora and state go, or None.
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

    # .............................................................. bookkeeping

    def _span(self, r: int, op: str, start: float) -> float:
        end = time.perf_counter()
        self.spans.append(
            Span(r, op, threading.current_thread().name, start - self.t0, end - self.t0)
        )
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
                    raise _Stop
                self.cond.wait(self.pipe.poll_seconds)
            if need not in self.active_after:
                raise _Stop
            src = need
            if self.pipe.mode == "overlapped":
                src = max(f for f in self.active_after if f < r)
            return src, self.active_after[src]

    # .............................................................. host operators

    def produce(self, r: int) -> _Corpus:
        """Walks (or a checkpointed corpus), FaBC encoding and the corpus checkpoint of round
        ``r``."""
        src, active = self._wait_active(r)
        t_host = time.perf_counter()
        path = None if self.dir is None else corpus_path(self.dir, r)
        if path is not None and path.exists():
            t = time.perf_counter()
            arrays, meta = read_checkpoint(path)
            payload = _corpus_from(arrays, meta)
            self._span(r, "corpus_load", t)
            return _Corpus(
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
        corpus = _Corpus(
            r, src, int(active.size), payload, raw_bytes(walks), time.perf_counter() - t_host
        )
        if path is not None:
            t = time.perf_counter()
            arrays, meta = _corpus_arrays(payload)
            meta.update(round=r, source_round=src, active=corpus.active, raw=corpus.raw_bytes)
            write_checkpoint(path, arrays, meta)
            self._span(r, "corpus_ckpt", t)
        return corpus

    # .............................................................. device operators

    def consume(self, corpus: _Corpus, round_start: float) -> bool:
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
        problems = health.problems(entry.loss, entry.max_norm, self.config.sgns.negatives)
        fatal = not math.isfinite(entry.loss)
        if not problems or (health.action == "ignore" and not fatal):
            return False
        stops = fatal or health.action == "stop"
        warnings.warn(
            f"round {entry.round}: "
            + "; ".join(problems)
            + (" (the run stops here)" if stops else ""),
            UnhealthyTraining,
            stacklevel=2,
        )
        if stops:
            self.stop_reason = "non_finite_loss" if fatal else "unhealthy"
        return stops

    # .............................................................. train state

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
        if meta["settings"] != self._settings():
            diff = sorted(
                k
                for k in set(meta["settings"]) | set(self._settings())
                if meta["settings"].get(k) != self._settings().get(k)
            )
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


# ---------------------------------------------------------------------- schedules


def _put(q: queue.Queue, item, stop: threading.Event, poll: float) -> None:
    while True:
        if stop.is_set():
            raise _Stop
        try:
            q.put(item, timeout=poll)
            return
        except queue.Full:
            continue


def _get(q: queue.Queue, stop: threading.Event, poll: float):
    while True:
        try:
            return q.get(timeout=poll)
        except queue.Empty:
            if stop.is_set():
                raise _Stop from None


def run_stages(
    produce: Callable[[int], Any],
    consume: Callable[[Any], bool],
    rounds: range,
    *,
    threaded: bool,
    queue_size: int = 1,
    poll_seconds: float = 0.05,
    stop: threading.Event | None = None,
    join_seconds: float = 30.0,
) -> int:
    """Runs ``consume(produce(r))`` for ``r`` in ``rounds`` until ``consume`` returns True.

    Threaded: ``produce`` runs in a producer thread up to ``queue_size`` rounds ahead, through a
    bounded queue; rounds reach ``consume`` in order. An exception on either side (or ``stop``
    being set) stops both without deadlock, including a producer blocked on a full queue.

    Returns:
      the number of rounds consumed.

    Raises:
      the first exception of a stage; :class:`PipelineStopped` if ``stop`` was set from outside.
    """
    stop = stop or threading.Event()
    done = 0
    if not threaded:
        for r in rounds:
            if stop.is_set():
                raise PipelineStopped("stop requested")
            done += 1
            if consume(produce(r)):
                break
        return done
    q: queue.Queue = queue.Queue(maxsize=queue_size)
    errors: list[BaseException] = []

    def producer():
        try:
            for r in rounds:
                _put(q, produce(r), stop, poll_seconds)
        except _Stop:
            pass
        except BaseException as e:  # noqa: BLE001 -- handed to the consumer thread
            errors.append(e)
            stop.set()

    thread = threading.Thread(target=producer, name="ripp-host", daemon=True)
    thread.start()
    try:
        for _ in rounds:
            try:
                item = _get(q, stop, poll_seconds)
            except _Stop:
                if errors:
                    raise errors[0] from None
                raise PipelineStopped("stop requested") from None
            done += 1
            if consume(item):
                break
    finally:
        stop.set()
        thread.join(join_seconds)
        if thread.is_alive():
            raise RuntimeError(f"the RiPP producer did not stop within {join_seconds} s")
    if errors:
        raise errors[0]
    return done


def run_rounds(runner: RoundRunner, *, stop: threading.Event | None = None) -> None:
    """Runs the remaining rounds of ``runner`` on its configured schedule."""
    pipe = runner.pipe
    last_end = [time.perf_counter()]

    def produce(r):
        try:
            return runner.produce(r)
        except _Stop:
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


# ---------------------------------------------------------------------- utilisation


def busy_fractions(spans: list[Span], ops: tuple[str, ...], bins: int = 0):
    """The fraction of the run during which at least one of ``ops`` ran.

    Returns:
      the overall fraction, or with ``bins > 0`` ``(edges f64[bins+1], fraction f64[bins])``.
    """
    chosen = sorted((s.start, s.end) for s in spans if s.op in ops)
    total = max((s.end for s in spans), default=0.0)
    merged: list[list[float]] = []
    for a, b in chosen:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if bins <= 0:
        return sum(b - a for a, b in merged) / total if total > 0 else 0.0
    edges = np.linspace(0.0, total, bins + 1)
    frac = np.zeros(bins)
    for a, b in merged:
        lo, hi = np.maximum(edges[:-1], a), np.minimum(edges[1:], b)
        frac += np.clip(hi - lo, 0.0, None)
    return edges, frac / np.maximum(np.diff(edges), 1e-12)
