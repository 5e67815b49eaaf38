"""Run a ``jaxgraph`` command as N processes on this machine, emulating N hosts.

Each process gets M emulated CPU devices and joins one multi-controller JAX run through a
coordinator on 127.0.0.1 (a free port), so the mesh has N x M devices, exactly as N hosts with
M accelerators each would. This is the localhost test of the multi-host path::

    python experiments/launch_local.py --processes 2 --devices 4 -- \\
        train --dataset cora --parts 8 --epochs 5 --no-progress --workdir runs/cora-2x4

Process 0's standard output is this script's (``train`` prints its summary there); every
process's standard error goes to ``<logdir>/process_<i>.err`` (and other processes' standard
output to ``process_<i>.out``). Every process has the same wall-clock bound (``--timeout``). If
one process exits with an error, dies or runs past the bound, the others are killed and this
script exits non-zero (1: a process failed, 124: time-out), naming the process and printing its
last standard-error lines. It never waits on a dead peer.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_DEVICE_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S*")
# Gloo's connection chatter (written to standard output), left out of what is shown.
_NOISE = re.compile(r"^\[Gloo\] Rank \d+ is connected to")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(
    process_id: int,
    num_processes: int,
    port: int,
    *,
    init_timeout: int,
    heartbeat_timeout: int,
) -> dict[str, str]:
    """The environment of process ``process_id``: CPU only, coordinator on localhost."""
    env = dict(os.environ)
    # The launcher's own device emulation (e.g. a test session's) must not leak into the
    # processes: `--cpu-devices` sets theirs.
    env["XLA_FLAGS"] = _DEVICE_FLAG.sub("", env.get("XLA_FLAGS", "")).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["JAXGRAPH_COORDINATOR"] = f"127.0.0.1:{port}"
    env["JAXGRAPH_NUM_PROCESSES"] = str(num_processes)
    env["JAXGRAPH_PROCESS_ID"] = str(process_id)
    env["JAXGRAPH_INIT_TIMEOUT"] = str(init_timeout)
    env["JAXGRAPH_HEARTBEAT_TIMEOUT"] = str(heartbeat_timeout)
    return env


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no output)"
    kept = [line for line in text if not _NOISE.match(line)]
    return "\n".join(kept[-lines:]) or "(no output)"


def _forward(stream, sink) -> None:
    """Copies ``stream`` to ``sink`` line by line, without Gloo's connection chatter."""
    for line in stream:
        if not _NOISE.match(line.decode(errors="replace")):
            sink.write(line)
            sink.flush()


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop(procs: list[subprocess.Popen], grace: float = 5.0) -> None:
    """SIGTERM to every still-running process group, then SIGKILL after ``grace`` seconds."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for p in running:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _report_timeout(procs: list[subprocess.Popen], timeout: float, logdir: Path) -> int:
    late = [i for i, p in enumerate(procs) if p.poll() is None]
    _stop(procs)
    report = "\n".join(
        f"--- process {i} ({logdir / f'process_{i}.err'}):\n{tail(logdir / f'process_{i}.err', 10)}"
        for i in late
    )
    print(
        f"launch_local: process(es) {late} still running after the time bound of {timeout:g} s; "
        f"stopped all. Last lines of their standard error:\n{report}",
        file=sys.stderr,
    )
    return 124


def launch(
    command: list[str],
    *,
    processes: int,
    devices: int,
    timeout: float,
    logdir: Path,
    init_timeout: int = 60,
    heartbeat_timeout: int = 20,
) -> int:
    """Runs ``jaxgraph <command>`` as ``processes`` processes; returns the exit status."""
    if processes < 1 or devices < 1:
        raise ValueError("--processes and --devices must be at least 1")
    logdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [sys.executable, "-m", "jaxgraph.cli", "--cpu-devices", str(devices), *command]
    procs: list[subprocess.Popen] = []
    files = []
    start = time.monotonic()
    try:
        for i in range(processes):
            # Files closed in `finally`; process 0's standard output is forwarded.
            err = open(logdir / f"process_{i}.err", "wb")  # noqa: SIM115
            files.append(err)
            out = subprocess.PIPE
            if i:
                out = open(logdir / f"process_{i}.out", "wb")  # noqa: SIM115
                files.append(out)
            env = child_env(
                i,
                processes,
                port,
                init_timeout=init_timeout,
                heartbeat_timeout=heartbeat_timeout,
            )
            # Own session: stopping a process also stops anything it started.
            procs.append(
                subprocess.Popen(argv, env=env, stdout=out, stderr=err, start_new_session=True)
            )
            print(f"launch_local: process {i} started (pid {procs[-1].pid})", file=sys.stderr)
        sys.stderr.flush()
        forward = threading.Thread(
            target=_forward, args=(procs[0].stdout, sys.stdout.buffer), daemon=True
        )
        forward.start()
        # One waiter per process: the queue holds exits in the order they happen, so the
        # process that failed first is named, not a peer that aborted because of it.
        exits: queue.Queue[tuple[int, int]] = queue.Queue()
        for i, proc in enumerate(procs):
            threading.Thread(
                target=lambda i=i, proc=proc: exits.put((i, proc.wait())), daemon=True
            ).start()
        finished = 0
        while finished < processes:
            try:
                i, code = exits.get(timeout=max(start + timeout - time.monotonic(), 0.0))
            except queue.Empty:
                return _report_timeout(procs, timeout, logdir)
            if code:
                time.sleep(0.5)  # let peers that fail because of it exit on their own
                also = []
                while not exits.empty():
                    j, other = exits.get()
                    if other:
                        also.append(f"process {j} then {describe_exit(other)}")
                _stop(procs)
                print(
                    f"launch_local: process {i} of {processes} {describe_exit(code)} after "
                    f"{time.monotonic() - start:.1f} s; stopped the others"
                    f"{' (' + '; '.join(also) + ')' if also else ''}. Last lines of its "
                    f"standard error ({logdir / f'process_{i}.err'}):\n"
                    f"{tail(logdir / f'process_{i}.err')}",
                    file=sys.stderr,
                )
                return 1
            finished += 1
        forward.join()
        return 0
    finally:
        _stop(procs)
        for f in files:
            f.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s [options] -- JAXGRAPH_COMMAND [ARGS...]",
    )
    p.add_argument("--processes", type=int, default=2, help="number of processes (default 2)")
    p.add_argument("--devices", type=int, default=4, help="CPU devices per process (default 4)")
    p.add_argument(
        "--timeout", type=float, default=1800, help="wall-clock bound per process, s (1800)"
    )
    p.add_argument(
        "--init-timeout",
        type=int,
        default=60,
        help="seconds for all processes to connect to the coordinator (default 60)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=int,
        default=20,
        help="seconds without a heartbeat before a peer counts as dead (default 20)",
    )
    p.add_argument(
        "--logdir",
        help="where the per-process logs go (default: a temporary directory, "
        "removed after a successful run)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the jaxgraph command, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the jaxgraph command after --, e.g. -- train --dataset cora --parts 8")
    if "--cpu-devices" in command:
        p.error("set the devices per process with --devices, not --cpu-devices")
    logdir = Path(args.logdir or tempfile.mkdtemp(prefix="jaxgraph-launch-"))
    code = launch(
        command,
        processes=args.processes,
        devices=args.devices,
        timeout=args.timeout,
        logdir=logdir,
        init_timeout=args.init_timeout,
        heartbeat_timeout=args.heartbeat_timeout,
    )
    if code == 0 and not args.logdir:
        shutil.rmtree(logdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
