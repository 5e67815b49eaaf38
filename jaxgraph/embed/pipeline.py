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
:func:`run_stages` (for an embedding run, :func:`jaxgraph.embed.rounds.run_rounds`).

Checkpoints (``checkpoint_dir``; files of :mod:`jaxgraph.embed.checkpoints`): after every
round the corpus and the train state; a state from another run names the settings that differ.
A run started on a directory that holds state checkpoints resumes after the last complete
round; corpora already written for later rounds are reused.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from jaxgraph.options import flag

Mode = Literal["sequential", "overlapped", "deterministic"]
MODES = ("sequential", "overlapped", "deterministic")
HOST_OPS = ("walk", "encode", "corpus_ckpt", "corpus_load")
DEVICE_OPS = ("decode", "train")


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


# ---------------------------------------------------------------------- the rounds


class StopSignal(Exception):
    """Raised inside a stage when the shared stop event is set."""


# ---------------------------------------------------------------------- schedules


def _put(q: queue.Queue, item, stop: threading.Event, poll: float) -> None:
    while True:
        if stop.is_set():
            raise StopSignal
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
                raise StopSignal from None


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
        except StopSignal:
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
            except StopSignal:
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
