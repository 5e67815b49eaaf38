"""Set-up shared by the training tests: a trainer with placed shards and a fresh state, and
killing a subprocess once it has reached a given point."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest

from jaxgraph.train import assemble_run


def setup_training(graph, plan, strategy, model, num_parts: int, *, seed: int, **trainer_kw):
    """``(trainer, shards, state)`` of :func:`jaxgraph.train.assemble_run`: a Trainer (default
    Adam) of ``model`` and ``strategy`` on ``num_parts`` devices, ``graph``'s shards of
    ``plan`` placed on its mesh, and a state holding ``strategy``'s initial ``comm_state``, its
    parameters drawn from ``seed``."""
    run = assemble_run(graph, plan, strategy, model, num_parts, seed=seed, **trainer_kw)
    return run.trainer, run.shards, run.state


def kill_when(
    proc: subprocess.Popen, ready: Callable[[], bool], *, what: str, timeout: float = 120.0
) -> None:
    """SIGKILLs ``proc`` as soon as ``ready()`` holds (or after ``timeout`` seconds); fails the
    test if ``proc`` exits first. ``proc`` is reaped either way."""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not ready():
            if proc.poll() is not None:
                pytest.fail(f"{what} subprocess exited early with {proc.returncode}")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
