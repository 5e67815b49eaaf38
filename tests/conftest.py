"""Test configuration: an emulated 8-device CPU mesh, set before jax is imported."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

NUM_DEVICES = 8
MESH_SIZES = (1, 2, 4, 8)


@pytest.fixture(scope="session", autouse=True)
def _emulated_devices():
    count = jax.device_count()
    assert count == NUM_DEVICES, (
        f"expected {NUM_DEVICES} emulated CPU devices, found {count}; XLA_FLAGS must be set "
        "before jax is imported"
    )
