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


@pytest.fixture(autouse=True)
def _one_kernel_thread():
    """Compiled kernels run on one numba thread unless a test asks for more (``threads=2``):
    with more, the CPU skip-gram kernel trains steps concurrently and its bits vary from run to
    run, and two xdist workers would share two cores between four threads."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)
