"""Starting JAX's multi-controller runtime: one process per host, one mesh over all devices.

A multi-process run starts the same command once per host (or, to emulate hosts on one machine,
once per process: ``experiments/launch_local.py``). Before any other JAX call, each process
connects to the coordination service of process 0 (``jax.distributed.initialize``); from then on
``jax.devices()`` lists every process's devices, the mesh spans them all, and each process runs
the same programs on its own devices. Where the settings come from, first match wins:

1. explicit settings (``jaxgraph --coordinator --num-processes --process-id``), each falling
   back to the environment variable of :data:`ENV`;
2. a multi-task launch by SLURM (``srun``, ``SLURM_STEP_NUM_TASKS > 1``) or Open MPI
   (``mpirun``, ``OMPI_COMM_WORLD_SIZE > 1``): JAX's own cluster detection supplies them;
3. otherwise, or with ``--num-processes 1``, the run is single-process and nothing is started.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
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
        variable, then to the default.

        Raises:
          ValueError: if a numeric setting is not an integer (names the variable).
        """
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
    """The multi-process launcher that started this process, if it started more than one.

    ``SLURM`` (``srun`` with several tasks) or ``Open MPI`` (``mpirun -np`` > 1); ``None`` for a
    single task, so that a one-task job or an interactive allocation runs single-process.
    """
    environ = os.environ if environ is None else environ

    def count(name: str) -> int:
        try:
            return int(environ.get(name, "1").split("(")[0])
        except ValueError:
            return 1

    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_PROCID", "SLURM_LOCALID")
    if (
        all(v in environ for v in slurm)
        and min(count("SLURM_NTASKS"), count("SLURM_STEP_NUM_TASKS")) > 1
    ):
        return "SLURM"
    if count("OMPI_COMM_WORLD_SIZE") > 1:
        return "Open MPI"
    return None


def initialize(config: DistributedConfig, environ: Mapping[str, str] | None = None) -> bool:
    """Joins the multi-process run that ``config`` or the launcher describes, if any.

    Must run before any other JAX call (the first one creates the backends). On CPU the
    cross-process collectives use Gloo. Returns whether a multi-process runtime was started.

    Raises:
      ValueError: for incomplete or inconsistent explicit settings.
      RuntimeError: if the other processes do not connect within ``config.init_timeout``
        (raised by JAX).
    """
    if config.num_processes == 1:
        return False
    if config.explicit:
        missing = [
            f"--{f.replace('_', '-')} ({ENV[f]})"
            for f in ("coordinator", "num_processes", "process_id")
            if getattr(config, f) is None
        ]
        if missing:
            raise ValueError(f"a multi-process run also needs {', '.join(missing)}")
        if config.num_processes < 1 or not 0 <= config.process_id < config.num_processes:
            raise ValueError(
                f"process id {config.process_id} is not in [0, {config.num_processes})"
            )
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
        initialization_timeout=config.init_timeout,
        heartbeat_timeout_seconds=config.heartbeat_timeout,
    )
    return True


def is_primary() -> bool:
    """Whether this process writes the run's files (metrics, summary, checkpoints)."""
    return jax.process_index() == 0


def check_same_on_all_processes(what: str, *arrays: np.ndarray) -> None:
    """Raises unless every process holds the same ``arrays`` (compared by digest).

    Host planning (partition, halo plan) must be identical on every process; this turns a
    silent divergence into an error on every process at once. A no-op single-process; a
    collective otherwise.

    Raises:
      RuntimeError: naming the processes whose value differs from process 0's.
    """
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
    "check_same_on_all_processes",
    "detect_launcher",
    "initialize",
    "is_primary",
]
