"""Building the device mesh that the distributed programs run on, and moving arrays onto it.

In a multi-process run the mesh spans every process's devices; :func:`place` materialises only
this process's shards of a host array every process holds, :func:`to_host` brings a whole array
back to every process. Inside ``shard_map`` :func:`varying_axes` reads the mesh axes a value
varies over and :func:`to_varying` widens them (a ``pcast``), as custom VJPs need.

**Programs in flight on a CPU mesh.** On the XLA CPU runtime the devices of a mesh are threads
of one host, and a collective that waits past the runtime's rendezvous timeout aborts the
process ("Expected 8 threads to join the rendezvous, but only 7 of them arrived on time"). A
few dozen programs with collectives queued without waiting starve a rendezvous that long, so a
:class:`Bounded` program waits for each call's result on such a mesh; on GPU and TPU meshes,
and on one device, it is the program itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DEFAULT_AXIS = "parts"

EMULATION_HINT = (
    "to emulate more devices on a CPU, set "
    "XLA_FLAGS=--xla_force_host_platform_device_count=8 in the environment before jax is "
    "imported (or call jax.config.update('jax_num_cpu_devices', 8) right after importing jax)"
)


def free_memory() -> int:
    """Bytes of host memory available to a new allocation (Linux ``MemAvailable``; elsewhere
    the free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def make_mesh(
    num_parts: int, axis_name: str = DEFAULT_AXIS, devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """A one-dimensional mesh of ``num_parts`` of ``devices`` along ``axis_name`` (default: the
    first of ``jax.devices()``; multi-process, the first ``num_parts / process_count`` devices
    of every process, so that every process takes part in every program).

    Raises:
      ValueError: if ``num_parts`` is not positive, exceeds the devices (the message says how
        to emulate more on a CPU) or, multi-process, is not a multiple of the process count.
    """
    if num_parts < 1:
        raise ValueError(f"the number of parts must be at least 1, got {num_parts}")
    if devices is None and jax.process_count() > 1:
        devices = _per_process_devices(num_parts)
    devices = list(jax.devices() if devices is None else devices)
    if num_parts > len(devices):
        raise ValueError(
            f"{num_parts} parts need {num_parts} devices but only {len(devices)} "
            f"{devices[0].platform} device(s) are available; {EMULATION_HINT}"
        )
    return Mesh(np.asarray(devices[:num_parts]), (axis_name,))


def _per_process_devices(num_parts: int) -> list[jax.Device]:
    """``num_parts / process_count`` devices of every process, ordered by process then id."""
    procs = jax.process_count()
    if num_parts % procs:
        raise ValueError(
            f"{num_parts} parts cannot be spread evenly over {procs} processes; "
            f"use a multiple of {procs}"
        )
    per = num_parts // procs
    devices = []
    for i in range(procs):
        local = sorted((d for d in jax.devices() if d.process_index == i), key=lambda d: d.id)
        if per > len(local):
            raise ValueError(
                f"{num_parts} parts over {procs} processes need {per} devices per process but "
                f"process {i} has {len(local)} {local[0].platform} device(s); {EMULATION_HINT}"
            )
        devices += local[:per]
    return devices


def place(value, sharding: jax.sharding.Sharding) -> jax.Array:
    """A host array, identical on every process, laid out on devices as ``sharding``; each
    process materialises only its addressable shards (``jax.make_array_from_callback``)."""
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def to_host(x: jax.Array) -> np.ndarray:
    """The whole value of ``x`` as a NumPy array, on every process (all-gathered where it is
    sharded over several: then every process must call this for the same arrays in order)."""
    if x.is_fully_addressable or x.is_fully_replicated:
        return np.asarray(jax.device_get(x))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def shard_leading(mesh: Mesh, tree, axis_name: str | None = None):
    """Places every array ``[P, ...]`` of ``tree`` on ``mesh``, ``[1, ...]`` on each device."""
    axis_name = axis_name or mesh.axis_names[0]
    sharding = NamedSharding(mesh, PartitionSpec(axis_name))
    return jax.tree.map(lambda a: place(a, sharding), tree)


def replicate(mesh: Mesh, tree):
    """Places every array of ``tree`` on every device of ``mesh``."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda a: place(a, sharding), tree)


def varying_axes(x: jax.Array) -> frozenset:
    """Mesh axes along which ``x`` varies inside ``shard_map`` (empty outside)."""
    aval = jax.typeof(x)
    manual = getattr(aval, "manual_axis_type", None)
    if manual is not None:
        return frozenset(manual.varying)
    return frozenset(getattr(aval, "vma", ()))  # older jax


def to_varying(x: jax.Array, axes: frozenset) -> jax.Array:
    """``x`` typed to vary over ``axes`` as well (a no-op where it already does)."""
    missing = tuple(sorted(axes - varying_axes(x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


def bounds_in_flight(mesh: Mesh) -> bool:
    """Whether programs with collectives on ``mesh`` must run one at a time: a CPU mesh of
    more than one device (see the module docstring)."""
    return mesh.devices.size > 1 and mesh.devices.flat[0].platform == "cpu"


class Bounded:
    """A jitted ``program`` that, on a ``mesh`` where :func:`bounds_in_flight` holds, blocks
    until each call's outputs are ready; everything else (``lower``, ``eval_shape``) is the
    program's."""

    def __init__(self, program: Callable, mesh: Mesh):
        self.program = program
        self.blocks = bounds_in_flight(mesh)

    def __call__(self, *args, **kwargs):
        out = self.program(*args, **kwargs)
        if self.blocks:
            jax.block_until_ready(out)
        return out

    def __getattr__(self, name):
        return getattr(self.program, name)
