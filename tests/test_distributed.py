"""Multi-process settings: flags over environment, launcher detection, clear errors.

The runtime itself is exercised by tests/train/test_multihost.py (separate processes); here
nothing is started. The coordinator checks use sockets on 127.0.0.1 only; where a missing
check would let JAX abort the process, the CLI runs in a subprocess with a time bound.
"""

import errno
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from jaxgraph.distributed import (
    DistributedConfig,
    check_coordinator,
    check_same_on_all_processes,
    detect_launcher,
    initialize,
    parse_coordinator,
)

ENV = {
    "JAXGRAPH_COORDINATOR": "10.0.0.1:1234",
    "JAXGRAPH_NUM_PROCESSES": "4",
    "JAXGRAPH_PROCESS_ID": "2",
    "JAXGRAPH_HEARTBEAT_TIMEOUT": "7",
}


def test_flags_override_environment():
    cfg = DistributedConfig.from_env(ENV, process_id=3, coordinator=None)
    assert cfg == DistributedConfig("10.0.0.1:1234", 4, 3, init_timeout=300, heartbeat_timeout=7)
    assert cfg.explicit
    assert not DistributedConfig.from_env({}).explicit


def test_bad_integer_names_its_source():
    with pytest.raises(ValueError, match="JAXGRAPH_NUM_PROCESSES must be an integer, got 'two'"):
        DistributedConfig.from_env({"JAXGRAPH_NUM_PROCESSES": "two"})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DistributedConfig(num_processes=2), r"--coordinator \(JAXGRAPH_COORDINATOR\), --process"),
        (
            DistributedConfig("h:1", 2, 2),
            r"--process-id \(JAXGRAPH_PROCESS_ID\) must be in \[0, 2\) .*, got 2$",
        ),
        (DistributedConfig("h:1", 2, -1), r"--process-id .* must be in \[0, 2\) .*, got -1$"),
        (DistributedConfig(process_id=-1), r"--process-id .* must be >= 0, got -1$"),
        (DistributedConfig("h:1", 0, 0), r"--num-processes .* must be >= 1, got 0$"),
        (DistributedConfig(num_processes=-2), r"--num-processes .* must be >= 1, got -2$"),
        (DistributedConfig(init_timeout=0), r"--init-timeout .* must be > 0 seconds, got 0$"),
        (
            DistributedConfig("h:1", 2, 0, heartbeat_timeout=-1),
            r"--heartbeat-timeout \(JAXGRAPH_HEARTBEAT_TIMEOUT\) must be > 0 seconds, got -1$",
        ),
        (DistributedConfig("h", 2, 0), r"must be host:port with a port in 1..65535, got 'h'"),
    ],
)
def test_incomplete_settings_are_refused(config, message):
    with pytest.raises(ValueError, match=message):
        initialize(config, {})


def test_single_process_starts_nothing():
    assert initialize(DistributedConfig(), {}) is False
    assert initialize(DistributedConfig(num_processes=1), {}) is False
    check_same_on_all_processes("anything", np.arange(3))  # no-op with one process


SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_STEP_NODELIST": "node[01-02]",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
}


@pytest.mark.parametrize(
    ("environ", "launcher"),
    [
        ({}, None),
        ({**SLURM, "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2"}, "SLURM"),
        ({**SLURM, "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1"}, None),  # one task
        ({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2"}, None),  # batch script, not an srun step
        ({"OMPI_COMM_WORLD_SIZE": "4"}, "Open MPI"),
        ({"OMPI_COMM_WORLD_SIZE": "1"}, None),
    ],
)
def test_detect_launcher(environ, launcher):
    assert detect_launcher(environ) == launcher


# --- the coordinator address, checked before JAX is called ---


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:1234", ("127.0.0.1", 1234)),
        ("node-01.cluster:65535", ("node-01.cluster", 65535)),
        ("[::1]:80", ("::1", 80)),
    ],
)
def test_parse_coordinator(address, expected):
    assert parse_coordinator(address) == expected


@pytest.mark.parametrize("address", ["nohost", "nohost:", ":1234", "h:x", "h:0", "h:65536", "h:-1"])
def test_malformed_coordinator_names_the_flag_and_value(address):
    message = (
        r"--coordinator \(JAXGRAPH_COORDINATOR\) must be host:port with a port in 1\.\.65535, "
        f"got '{address}'"
    )
    with pytest.raises(ValueError, match=message):
        check_coordinator(address, process_id=0, timeout=1)


@pytest.mark.parametrize("process_id", [0, 1])
def test_unresolvable_host(process_id):
    with pytest.raises(
        ValueError,
        match="cannot resolve coordinator host 'nohost.invalid' of "
        r"--coordinator \(JAXGRAPH_COORDINATOR\) 'nohost.invalid:1'",
    ):
        check_coordinator("nohost.invalid:1", process_id, timeout=1)


def test_process_0_binds_a_free_port():
    assert check_coordinator(f"127.0.0.1:{_free_port()}", 0, timeout=1) is None


def test_process_0_refuses_a_port_in_use():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        message = (
            f"process 0 runs the coordinator but cannot bind 127.0.0.1:{port}: "
            f"{os.strerror(errno.EADDRINUSE)} \\(another program holds port {port}"
        )
        with pytest.raises(RuntimeError, match=message):
            check_coordinator(f"127.0.0.1:{port}", 0, timeout=1)


def test_process_0_refuses_a_port_in_use_on_another_interface():
    """JAX's service binds all interfaces: a port held on another local address blocks it."""
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.2", 0))
        except OSError:
            pytest.skip("127.0.0.2 is not a local address here")
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"cannot bind port {port} on all interfaces"):
            check_coordinator(f"127.0.0.1:{port}", 0, timeout=1)


def test_process_0_refuses_an_address_of_another_machine():
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this machine.
    with pytest.raises(RuntimeError, match="'192.0.2.1' is not an address of this machine"):
        check_coordinator("192.0.2.1:5000", 0, timeout=1)


def test_other_process_reaches_a_listening_coordinator():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_coordinator(f"127.0.0.1:{server.getsockname()[1]}", 1, timeout=1)


def test_other_process_waits_for_a_late_coordinator():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        late = threading.Timer(0.7, server.listen)
        late.start()
        start = time.monotonic()
        check_coordinator(f"127.0.0.1:{server.getsockname()[1]}", 1, timeout=10, interval=0.2)
        late.join()
    assert 0.7 <= time.monotonic() - start < 3


def test_other_process_gives_up_after_the_timeout():
    port = _free_port()
    start = time.monotonic()
    message = (
        f"cannot reach the coordinator at 127.0.0.1:{port} within 1 s "
        r"\(is process 0 running\?\): " + os.strerror(errno.ECONNREFUSED)
    )
    with pytest.raises(RuntimeError, match=message):
        check_coordinator(f"127.0.0.1:{port}", 1, timeout=1)
    assert 1 <= time.monotonic() - start < 3


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``jaxgraph train`` in a subprocess: without the checks, JAX would abort it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXGRAPH_")}
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run(
        [sys.executable, "-m", "jaxgraph.cli", "train", "--init-timeout", "1", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# The address (``{port}``: a port of 127.0.0.1), the process id, words of the message.
CLI_CASES = {
    "unresolvable host": ("nohost.invalid:1", 0, "cannot resolve coordinator host 'nohost"),
    "port in use": ("127.0.0.1:{port}", 0, "cannot bind 127.0.0.1:{port}: "),
    "nobody listening": ("127.0.0.1:{port}", 1, "cannot reach the coordinator at 127.0.0.1:"),
    "process id out of range": ("127.0.0.1:{port}", 2, "--process-id (JAXGRAPH_PROCESS_ID)"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_reports_coordinator_problems_without_aborting(case):
    address, process_id, words = CLI_CASES[case]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        if case != "port in use":
            held.close()  # a port nobody listens on
        start = time.monotonic()
        done = _cli(
            f"--coordinator={address.format(port=port)}",
            "--num-processes=2",
            f"--process-id={process_id}",
        )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("jaxgraph train: error: "), done.stderr
    assert words.format(port=port) in done.stderr
    assert "Traceback" not in done.stderr and "Check failure" not in done.stderr
    assert time.monotonic() - start < 30
