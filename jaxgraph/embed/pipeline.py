"""RiPP: the round-interleaved pipeline of the embedding loop (FeLoG §5.3, §6.7).

A round runs walk, encode (FaBC) and the corpus checkpoint on the host, then decode, train and
feedback (FeeST) on the devices. With a lag ``l``, the walks of round ``r`` start from the
active set computed after round ``r - 1 - l`` (the initial set while that is negative):
``l = 0`` is the plain loop, ``l = 1`` lets round ``r + 1`` walk while round ``r`` trains.

Schedules (:class:`PipelineConfig.mode`):

* ``sequential``: the operators run one after the other on the calling thread.
* ``deterministic``: the host operators run in a producer thread ahead of the trainer, through
  a bounded queue; round ``r`` waits for exactly the active set of round ``r - 1 - l``, so the
  embeddings are bit-identical to ``sequential`` with the same lag.
* ``overlapped``: round ``r`` starts from the newest active set available (at least that of
  round ``r - 1 - l``), so its staleness depends on timing (FeLoG's behaviour).

The numba kernels release the GIL, so a host thread samples while the main thread dispatches
JAX programs; every blocking wait polls a shared stop event.
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


class StopSignal(Exception):
    """Raised inside a stage when the shared stop event is set."""


def _put(q: queue.Queue, item, stop: threading.Event, poll: float) -> None:
    while not stop.is_set():
        try:
            return q.put(item, timeout=poll)
        except queue.Full:
            pass
    raise StopSignal


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
    """Runs ``consume(produce(r))`` for ``r`` in ``rounds`` until ``consume`` returns True;
    returns the number of rounds consumed.

    Threaded: ``produce`` runs in a producer thread up to ``queue_size`` rounds ahead, through a
    bounded queue; rounds reach ``consume`` in order. An exception on either side (or ``stop``
    being set) stops both without deadlock, including a producer blocked on a full queue, and
    re-raises the first one (:class:`PipelineStopped` if ``stop`` was set from outside).
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


def busy_fractions(spans: list[Span], ops: tuple[str, ...], bins: int = 0):
    """The fraction of the run during which at least one of ``ops`` ran, or with ``bins > 0``
    per bin: ``(edges f64[bins+1], fraction f64[bins])``."""
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
