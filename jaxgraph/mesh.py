"""Building the device mesh that the distributed programs run on."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DEFAULT_AXIS = "parts"

EMULATION_HINT = (
    "to emulate more devices on a CPU, set "
    "XLA_FLAGS=--xla_force_host_platform_device_count=8 in the environment before jax is "
    "imported (or call jax.config.update('jax_num_cpu_devices', 8) right after importing jax)"
)


def make_mesh(
    num_parts: int, axis_name: str = DEFAULT_AXIS, devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """A one-dimensional mesh of ``num_parts`` devices along ``axis_name``.

    Args:
      num_parts: number of graph parts; one device per part.
      axis_name: name of the mesh axis that the programs' collectives use.
      devices: devices to use (default: the first ``num_parts`` of ``jax.devices()``).

    Raises:
      ValueError: if ``num_parts`` is not positive or exceeds the available devices (the message
        says how to emulate more devices on a CPU).
    """
    if num_parts < 1:
        raise ValueError(f"the number of parts must be at least 1, got {num_parts}")
    devices = list(jax.devices() if devices is None else devices)
    if num_parts > len(devices):
        raise ValueError(
            f"{num_parts} parts need {num_parts} devices but only {len(devices)} "
            f"{devices[0].platform} device(s) are available; {EMULATION_HINT}"
        )
    return Mesh(np.asarray(devices[:num_parts]), (axis_name,))


def shard_leading(mesh: Mesh, tree, axis_name: str | None = None):
    """Places every array of ``tree`` on ``mesh``, split along its leading axis.

    Shapes:
      each leaf ``[P, ...] -> global [P, ...]`` with ``[1, ...]`` on each device.
    """
    axis_name = axis_name or mesh.axis_names[0]
    sharding = NamedSharding(mesh, PartitionSpec(axis_name))
    return jax.tree.map(lambda a: jax.device_put(a, sharding), tree)


def replicate(mesh: Mesh, tree):
    """Places every array of ``tree`` on every device of ``mesh``."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda a: jax.device_put(a, sharding), tree)
