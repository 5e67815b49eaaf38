"""Kernel backend choice shared by every kernel wrapper in `pallas_kernels`."""

from __future__ import annotations

import enum

import jax

_TILE_ELEMENTS = 4096  # default tile size of the kernels: a starting point, not tuned


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


class Backend(enum.Enum):
    """Which implementation a kernel wrapper runs.

    Attributes:
      REFERENCE: the pure-`jnp` reference beside the kernel; XLA compiles it for any platform.
        The default on CPU (and TPU), where Pallas GPU kernels can only be interpreted.
      PALLAS: the Pallas kernel (Triton lowering on GPU). The default on GPU. On CPU it runs
        only with ``interpret=True``, which is how the tests check it against the reference.
    """

    REFERENCE = "reference"
    PALLAS = "pallas"


def default_backend(platform: str | None = None) -> Backend:
    """The default for a JAX ``platform`` name (None: `jax.default_backend()`):
    `Backend.PALLAS` on GPU (``"gpu"``, ``"cuda"``, ``"rocm"``), `Backend.REFERENCE` elsewhere."""
    platform = jax.default_backend() if platform is None else platform
    return Backend.PALLAS if platform in ("gpu", "cuda", "rocm") else Backend.REFERENCE


def resolve_backend(backend: Backend | None, *, interpret: bool) -> Backend:
    """The backend a wrapper runs: ``backend``, or for None the platform default (Pallas when
    ``interpret=True``, which has no meaning for the reference). ValueError if ``backend`` is
    not a `Backend`, or for ``interpret=True`` with the reference."""
    if backend is None:
        return Backend.PALLAS if interpret else default_backend()
    if not isinstance(backend, Backend):
        raise ValueError(f"backend must be a pallas_kernels.Backend or None, got {backend!r}")
    if interpret and backend is Backend.REFERENCE:
        raise ValueError("interpret=True applies to the Pallas kernel, not to Backend.REFERENCE")
    return backend
