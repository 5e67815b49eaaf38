"""Starting JAX's multi-controller runtime: one process per host, one mesh over all devices.

A multi-process run starts the same command once per host (or per process on one machine:
``experiments/launch_local.py``); before any other JAX call each process connects to process
0's coordination service (``jax.distributed.initialize``). Settings, the first match wins:

1. explicit settings (``jaxgraph --coordinator --num-processes --process-id``), each falling
   back to the environment variable of :data:`ENV`;
2. a multi-task launch by SLURM (``srun``, ``SLURM_STEP_NUM_TASKS > 1``) or Open MPI
   (``mpirun``, ``OMPI_COMM_WORLD_SIZE > 1``): JAX's own cluster detection supplies them;
3. otherwise, or with ``--num-processes 1``, the run is single-process and nothing is started.

Explicit settings are checked in Python first (:func:`check_coordinator`): JAX answers an
unreachable or unbindable coordinator by aborting the process from C++ after its whole timeout.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import math
import os
import socket
import time
from collections.abc import Mapping

import jax
import numpy as np

# Environment variables read by `DistributedConfig.from_env`, by field.
ENV = {
    "coordinator": "JAXGRAPH_COORDINATOR",
    "num_processes": "JAXGRAPH_NUM_PROCESSES",
    "process_id": "JAXGRAPH_PROCESS_ID",
    "init_timeout": "JAXGRAPH_INIT_TIMEOUT",
    "heartbeat_timeout": "JAXGRAPH_HEARTBEAT_TIMEOUT",
}


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How this process joins a multi-process run.

    Attributes:
      coordinator: ``host:port`` of process 0's coordination service (``None``: not given).
      num_processes: number of processes in the run.
      process_id: this process's index in ``[0, num_processes)``.
      init_timeout: seconds to wait for every process to connect before failing.
      heartbeat_timeout: seconds without a heartbeat after which a process counts as dead and
        the others abort instead of waiting on it in a collective.
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    init_timeout: int = 300
    heartbeat_timeout: int = 100

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **given: str | int | None
    ) -> DistributedConfig:
        """Settings ``given`` (``None`` = not given), each falling back to its :data:`ENV`
        variable, then to the default; a numeric one not an integer is a ValueError naming it."""
        environ = os.environ if environ is None else environ
        values = {}
        for field in dataclasses.fields(cls):
            value = given.get(field.name)
            source = f"--{field.name.replace('_', '-')}"
            if value is None and environ.get(ENV[field.name], "") != "":
                value, source = environ[ENV[field.name]], ENV[field.name]
            if value is None:
                continue
            if field.name != "coordinator":
                try:
                    value = int(value)
                except ValueError:
                    raise ValueError(f"{source} must be an integer, got {value!r}") from None
            values[field.name] = value
        return cls(**values)

    @property
    def explicit(self) -> bool:
        """Whether any of coordinator, process count or process id was given."""
        return (self.coordinator, self.num_processes, self.process_id) != (None, None, None)


def detect_launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """The launcher that started this process among several: ``SLURM`` (``srun`` with several
    tasks) or ``Open MPI`` (``mpirun -np`` > 1); ``None`` for a single task."""
    environ = os.environ if environ is None else environ

    def count(name: str) -> int:
        try:
            return int(environ.get(name, "1").split("(")[0])
        except ValueError:
            return 1

    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_PROCID", "SLURM_LOCALID")
    tasks = min(count("SLURM_NTASKS"), count("SLURM_STEP_NUM_TASKS"))
    if all(v in environ for v in slurm) and tasks > 1:
        return "SLURM"
    if count("OMPI_COMM_WORLD_SIZE") > 1:
        return "Open MPI"
    return None


def _flag(field: str) -> str:
    """How the user gives ``field``: ``--num-processes (JAXGRAPH_NUM_PROCESSES)``."""
    return f"--{field.replace('_', '-')} ({ENV[field]})"


def _check_ranges(config: DistributedConfig) -> None:
    """Raises ValueError, naming the flag and the value, for a setting out of its range."""
    if config.num_processes is not None and config.num_processes < 1:
        raise ValueError(f"{_flag('num_processes')} must be >= 1, got {config.num_processes}")
    n, i = config.num_processes, config.process_id
    if i is not None and (i < 0 or (n is not None and i >= n)):
        span = f"in [0, {n}) with {_flag('num_processes')} {n}" if n is not None else ">= 0"
        raise ValueError(f"{_flag('process_id')} must be {span}, got {i}")
    for field in ("init_timeout", "heartbeat_timeout"):
        if getattr(config, field) <= 0:
            raise ValueError(f"{_flag(field)} must be > 0 seconds, got {getattr(config, field)}")


def parse_coordinator(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6-address]:port`` too) as ``(host, port)``; a ValueError names
    --coordinator and ``address`` unless it is ``host:port`` with a port in 1..65535."""
    host, _, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        number = 0
    if not host or not 1 <= number <= 65535:
        raise ValueError(
            f"{_flag('coordinator')} must be host:port with a port in 1..65535, got {address!r}"
        )
    return host, number


def _resolve(address: str, host: str, port: int) -> list[tuple[int, tuple]]:
    """The ``(family, sockaddr)`` TCP endpoints of ``host:port``, in resolver order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError(
            f"cannot resolve coordinator host {host!r} of {_flag('coordinator')} "
            f"{address!r}: {e.strerror}"
        ) from None
    endpoints = []
    for family, _, _, _, sockaddr in infos:
        if (family, sockaddr) not in endpoints:
            endpoints.append((family, sockaddr))
    return endpoints


def _socket_error(family: int, sockaddr: tuple, connect: float | None = None) -> OSError | None:
    """Why a TCP socket cannot bind ``sockaddr`` or, given ``connect`` seconds, connect to it
    (``None``: it can); the socket is closed at once. Binding sets SO_REUSEADDR as gRPC does, so
    that a port whose last connections linger in TIME_WAIT counts as free; a connection closed
    before sending anything is harmless to a gRPC server."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            if connect is None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(sockaddr)
            else:
                s.settimeout(connect)
                s.connect(sockaddr)
    except OSError as e:
        return e
    return None


def _all_interfaces_error(port: int) -> OSError | None:
    """Why ``port`` cannot be bound on all interfaces, where JAX's coordination service
    listens (``[::]:port``, or ``0.0.0.0:port`` without IPv6)."""
    error = _socket_error(socket.AF_INET6, ("::", port))
    if error is not None and error.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
        error = _socket_error(socket.AF_INET, ("0.0.0.0", port))
    return error


def check_coordinator(
    address: str, process_id: int, timeout: float, *, interval: float = 0.5
) -> None:
    """Checks, before JAX is called, that ``process_id`` can take its part at ``address``.

    Process 0 runs the coordination service: the host must be an address of this machine and
    the port free, also on all interfaces, where JAX binds it. Every other process connects to
    it, retrying every ``interval`` seconds for up to ``timeout`` seconds.

    Raises:
      ValueError: if ``address`` is not ``host:port`` or its host does not resolve.
      RuntimeError: if process 0 cannot bind it, or another process cannot reach it in time.
    """
    host, port = parse_coordinator(address)
    endpoints = _resolve(address, host, port)
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    if process_id == 0:
        errors = [_socket_error(family, sockaddr) for family, sockaddr in endpoints]
        error = None if None in errors else errors[0]
        if error is None:
            error = _all_interfaces_error(port)
            where = f"port {port} on all interfaces (where the coordination service listens)"
        if error is not None:
            hint = {
                errno.EADDRINUSE: f"another program holds port {port}: choose a free port",
                errno.EADDRNOTAVAIL: f"{host!r} is not an address of this machine: "
                "process 0 must run on the coordinator's host",
                errno.EACCES: "ports below 1024 need privileges: choose a higher port",
            }.get(error.errno)
            raise RuntimeError(
                f"process 0 runs the coordinator but cannot bind {where}: "
                f"{error.strerror or error}" + (f" ({hint})" if hint else "")
            )
        return
    deadline = time.monotonic() + timeout
    while True:
        for family, sockaddr in endpoints:
            left = deadline - time.monotonic()
            error = _socket_error(family, sockaddr, max(min(left, interval), 0.05))
            if error is None:
                return
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(
                f"cannot reach the coordinator at {where} within {timeout:g} s "
                f"(is process 0 running?): {error.strerror or error}"
            )
        time.sleep(min(interval, left))


def initialize(config: DistributedConfig, environ: Mapping[str, str] | None = None) -> bool:
    """Joins the multi-process run that ``config`` or the launcher describes, if any; returns
    whether a multi-process runtime was started. Must run before any other JAX call; on CPU the
    collectives use Gloo. Explicit settings are checked first (:func:`check_coordinator`), the
    time that takes counting against ``config.init_timeout``.

    Raises:
      ValueError: for incomplete, out-of-range or inconsistent settings, or a bad coordinator
        address.
      RuntimeError: if process 0 cannot bind the coordinator address, or the processes do not
        all reach it and connect within ``config.init_timeout``.
    """
    _check_ranges(config)
    if config.num_processes == 1:
        return False
    timeout = config.init_timeout
    if config.explicit:
        missing = [
            _flag(f)
            for f in ("coordinator", "num_processes", "process_id")
            if getattr(config, f) is None
        ]
        if missing:
            raise ValueError(f"a multi-process run also needs {', '.join(missing)}")
        start = time.monotonic()
        check_coordinator(config.coordinator, config.process_id, config.init_timeout)
        timeout = max(1, math.ceil(config.init_timeout - (time.monotonic() - start)))
        address = dict(
            coordinator_address=config.coordinator,
            num_processes=config.num_processes,
            process_id=config.process_id,
        )
    elif detect_launcher(environ) is not None:
        address = {}  # JAX's cluster detection reads the launcher's environment
    else:
        return False
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        **address,
        initialization_timeout=timeout,
        heartbeat_timeout_seconds=config.heartbeat_timeout,
    )
    return True


def is_primary() -> bool:
    """Whether this process writes the run's files (metrics, summary, checkpoints)."""
    return jax.process_index() == 0


def check_same_on_all_processes(what: str, *arrays: np.ndarray) -> None:
    """Raises RuntimeError, naming the processes whose ``arrays`` differ from process 0's
    (compared by digest), so that host planning that diverges fails on every process at once.
    A collective; a no-op single-process."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    digest = np.frombuffer(h.digest()[:16], np.uint32)
    every = np.asarray(multihost_utils.process_allgather(digest))  # [processes, 4]
    differ = [i for i in range(every.shape[0]) if not np.array_equal(every[i], every[0])]
    if differ:
        raise RuntimeError(
            f"{what} differs between processes: processes {differ} disagree with process 0 "
            "(host planning must be deterministic and see the same inputs on every process)"
        )


__all__ = [
    "ENV",
    "DistributedConfig",
    "check_coordinator",
    "check_same_on_all_processes",
    "detect_launcher",
    "initialize",
    "is_primary",
    "parse_coordinator",
]
