"""Per-pair transfer time model ``t = theta * MiB + gamma`` (AdaQP's cost model, fitted better).

``theta[s, r]`` (seconds per MiB) and ``gamma[s, r]`` (seconds) describe the ordered pair
``sender s -> receiver r`` (diagonal unused: 0); :mod:`jaxgraph.comm.assign` prices every
channel with them. Three sources:

* :meth:`CostModel.from_preset`: nominal figures of a named interconnect, uniform or two-level
  (hosts). On the emulated CPU mesh a transfer is a memory copy, so a preset is how an
  experiment projects what a cluster would see.
* :func:`fit`: non-negative least squares per pair over timed samples (AdaQP: ``np.polyfit`` of
  one sample per size, no sign constraint; reference notes, sections 1.12 and 1.16).
* :func:`measure`: times ``ppermute`` payloads on a real mesh and fits them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import jax
import numpy as np
import scipy.optimize
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxgraph.comm.ring import ring_perm
from jaxgraph.mesh import place

MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Interconnect:
    """Nominal figures of one link type.

    Attributes:
      alpha: per-transfer latency in seconds.
      bandwidth: bytes per second, one direction.
      source: where the figures come from.
    """

    alpha: float
    bandwidth: float
    source: str


# Nominal figures, not measurements: bandwidths are the published per-direction data rates
# (what a single large transfer can at best reach); latencies are order-of-magnitude
# small-message figures for the usual software path, stated as assumptions.
PRESETS: dict[str, Interconnect] = {
    "10gbe": Interconnect(
        alpha=20e-6,
        bandwidth=1.25e9,
        source="IEEE 802.3ae 10GBASE: 10 Gb/s line rate = 1.25 GB/s; latency ~20 us assumed "
        "(kernel TCP, e.g. gloo)",
    ),
    "100gbe": Interconnect(
        alpha=5e-6,
        bandwidth=12.5e9,
        source="IEEE 802.3ba/bj 100GbE: 100 Gb/s = 12.5 GB/s; latency ~5 us assumed (RDMA/RoCE)",
    ),
    "ib_edr": Interconnect(
        alpha=1e-6,
        bandwidth=12.5e9,
        source="InfiniBand EDR 4x: 100 Gb/s data rate = 12.5 GB/s; latency ~1 us assumed (verbs)",
    ),
    "ib_hdr": Interconnect(
        alpha=1e-6,
        bandwidth=25e9,
        source="InfiniBand HDR 4x: 200 Gb/s data rate = 25 GB/s; latency ~1 us assumed (verbs)",
    ),
    "pcie3x16": Interconnect(
        alpha=5e-6,
        bandwidth=15.75e9,
        source="PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b = 15.75 GB/s per direction; "
        "latency ~5 us assumed (peer copy)",
    ),
    "pcie4x16": Interconnect(
        alpha=5e-6,
        bandwidth=31.5e9,
        source="PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction; "
        "latency ~5 us assumed (peer copy)",
    ),
    "nvlink3": Interconnect(
        alpha=2e-6,
        bandwidth=300e9,
        source="NVIDIA A100 NVLink 3: 12 links, 600 GB/s total = 300 GB/s per direction; "
        "latency ~2 us assumed",
    ),
}


@dataclasses.dataclass(frozen=True, eq=False)
class CostModel:
    """Transfer time of every ordered device pair: ``t = theta * MiB + gamma``.

    Attributes:
      theta: ``float64[P, P]`` seconds per MiB, ``[sender, receiver]``; diagonal unused (0).
      gamma: ``float64[P, P]`` seconds per transfer, same indexing.
      source: provenance, for logs (preset name, ``"fit"``, ``"measured ..."``).
    """

    theta: np.ndarray
    gamma: np.ndarray
    source: str = ""

    def __post_init__(self):
        theta = np.array(self.theta, np.float64)
        gamma = np.array(self.gamma, np.float64)
        if theta.ndim != 2 or theta.shape[0] != theta.shape[1] or theta.shape != gamma.shape:
            raise ValueError(
                f"theta and gamma must both have shape [P, P], got {theta.shape} and {gamma.shape}"
            )
        off = ~np.eye(theta.shape[0], dtype=bool)
        for name, a in (("theta", theta), ("gamma", gamma)):
            if not np.all(np.isfinite(a[off])) or np.any(a[off] < 0):
                raise ValueError(f"{name} must be finite and non-negative off the diagonal")
            np.fill_diagonal(a, 0.0)
            a.setflags(write=False)
            object.__setattr__(self, name, a)

    @property
    def num_parts(self) -> int:
        return self.theta.shape[0]

    def channel(self, sender: int, receiver: int) -> tuple[float, float]:
        """``(theta, gamma)`` of the pair ``sender -> receiver``."""
        return float(self.theta[sender, receiver]), float(self.gamma[sender, receiver])

    def time(self, sender: int, receiver: int, mib: float) -> float:
        """Seconds to send ``mib`` MiB from ``sender`` to ``receiver``."""
        theta, gamma = self.channel(sender, receiver)
        return theta * mib + gamma

    def to_dict(self) -> dict:
        """A JSON-serializable dict (nested lists)."""
        return {"theta": self.theta.tolist(), "gamma": self.gamma.tolist(), "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> CostModel:
        return cls(
            theta=np.asarray(d["theta"]), gamma=np.asarray(d["gamma"]), source=d.get("source", "")
        )

    @classmethod
    def uniform(cls, num_parts: int, theta: float, gamma: float, source: str = "") -> CostModel:
        """The same ``theta`` and ``gamma`` for every pair."""
        if num_parts < 1:
            raise ValueError(f"num_parts must be at least 1, got {num_parts}")
        full = np.ones((num_parts, num_parts))
        return cls(theta=theta * full, gamma=gamma * full, source=source)

    @classmethod
    def from_preset(
        cls,
        name: str,
        num_parts: int,
        *,
        scale: float = 1.0,
        nodes: int = 1,
        inter: str | None = None,
    ) -> CostModel:
        """Nominal costs of the ``name`` preset (:data:`PRESETS`): ``theta = 2^20 / bandwidth``
        and ``gamma = alpha`` for every pair, times ``scale`` (e.g. 2 for links at half their
        nominal rate). With ``nodes > 1`` device ``d`` is on host ``d // (num_parts / nodes)``,
        and pairs on different hosts use the ``inter`` preset.

        Raises:
          ValueError: unknown preset (naming the known ones), ``nodes`` not dividing
            ``num_parts``, ``inter`` without ``nodes > 1`` or missing, ``scale <= 0``.
        """
        intra = _preset(name)
        if num_parts < 1:
            raise ValueError(f"num_parts must be at least 1, got {num_parts}")
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        if nodes < 1 or num_parts % nodes:
            raise ValueError(f"nodes={nodes} must be positive and divide num_parts={num_parts}")
        if (nodes > 1) != (inter is not None):
            raise ValueError("a two-level topology needs both nodes > 1 and an inter preset")
        theta = np.full((num_parts, num_parts), MIB / intra.bandwidth)
        gamma = np.full((num_parts, num_parts), intra.alpha)
        source = name
        if inter is not None:
            net = _preset(inter)
            host = np.arange(num_parts) // (num_parts // nodes)
            across = host[:, None] != host[None, :]
            theta[across] = MIB / net.bandwidth
            gamma[across] = net.alpha
            source = f"{name} x{num_parts // nodes} per host, {inter} across {nodes} hosts"
        if scale != 1.0:
            source += f", scale {scale}"
        return cls(theta=theta * scale, gamma=gamma * scale, source=source)


def _preset(name: str) -> Interconnect:
    if name not in PRESETS:
        raise ValueError(f"unknown interconnect preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]


def fit_line(sizes_mib: np.ndarray, times_s: np.ndarray) -> tuple[float, float, float]:
    """``time = theta * MiB + gamma`` by non-negative least squares over all samples
    (``scipy.optimize.nnls``; e.g. ``theta = 0, gamma = mean(time)`` for a negative slope):
    ``sizes_mib, times_s: [N]`` -> ``(theta, gamma, rms residual)``. ValueError for lengths
    that differ, fewer than 2 distinct sizes, negative or non-finite values."""
    x = np.asarray(sizes_mib, np.float64).ravel()
    y = np.asarray(times_s, np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{x.size} sizes but {y.size} times: one time per size sample")
    distinct = np.unique(x)
    if distinct.size < 2:
        raise ValueError(
            f"a line needs at least 2 distinct sizes, got {distinct.size} ({distinct.tolist()})"
        )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x < 0) or np.any(y < 0):
        raise ValueError("sizes and times must be finite and non-negative")
    design = np.stack([x, np.ones_like(x)], axis=1)
    # Scale the columns to unit norm so that MiB-sized and byte-sized inputs condition alike.
    norms = np.linalg.norm(design, axis=0)
    coef, _ = scipy.optimize.nnls(design / norms, y)
    theta, gamma = coef / norms
    residual = y - (theta * x + gamma)
    return float(theta), float(gamma), float(np.sqrt(np.mean(residual**2)))


def fit(sizes_mib: np.ndarray, times_s: np.ndarray) -> tuple[CostModel, np.ndarray]:
    """Fits :func:`fit_line` for every ordered pair (ValueError as it, or for ``times_s`` not
    ``[P, P, N]``).

    Shapes:
      ``sizes_mib: [N]`` (shared by all pairs), ``times_s: [P, P, N]`` seconds (diagonal
      ignored) -> the :class:`CostModel` and ``float64[P, P]`` RMS residuals (0 on the diagonal).
    """
    x = np.asarray(sizes_mib, np.float64).ravel()
    y = np.asarray(times_s, np.float64)
    if y.ndim != 3 or y.shape[0] != y.shape[1] or y.shape[2] != x.size:
        raise ValueError(f"times_s must have shape [P, P, {x.size}], got {y.shape}")
    p = y.shape[0]
    theta, gamma, resid = (np.zeros((p, p)) for _ in range(3))
    for s in range(p):
        for r in range(p):
            if s != r:
                theta[s, r], gamma[s, r], resid[s, r] = fit_line(x, y[s, r])
    return CostModel(theta=theta, gamma=gamma, source="fit"), resid


def measure_samples(
    mesh: Mesh, sizes_bytes: Sequence[int], repeats: int, axis_name: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Times ring-shift ``ppermute`` payloads on ``mesh``: for every shift ``r = 1..P-1`` and
    size, a ``uint8[size]`` payload from every device ``d`` to ``(d + r) mod P``, timed
    ``repeats`` times after a warm-up. The ``P`` transfers of a shift run in one collective, so
    its wall time (what a ring round costs) is attributed to every pair of that shift:
    ``sizes_mib: float64[N]`` and ``times_s: float64[P, P, N]``, ``N = len(sizes_bytes) *
    repeats``."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    sizes = [int(s) for s in sizes_bytes]
    if any(s < 1 for s in sizes):
        raise ValueError(f"sizes must be at least 1 byte, got {sizes}")
    axis = axis_name or mesh.axis_names[0]
    p = mesh.shape[axis]
    sizes_mib = np.repeat(np.asarray(sizes, np.float64) / MIB, repeats)
    times = np.zeros((p, p, sizes_mib.size))
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    for shift in range(1, p):
        perm = ring_perm(p, shift)

        def body(x, perm=perm):  # x: u8[1, size], this device's payload
            return jax.lax.ppermute(x, axis, perm)

        program = jax.jit(
            jax.shard_map(
                body, mesh=mesh, in_specs=PartitionSpec(axis), out_specs=PartitionSpec(axis)
            )
        )
        for i, size in enumerate(sizes):
            payload = place(np.ones((p, size), np.uint8), sharding)
            program(payload).block_until_ready()  # compile and warm up
            for k in range(repeats):
                t0 = time.perf_counter()
                program(payload).block_until_ready()
                elapsed = time.perf_counter() - t0
                for d, e in perm:
                    times[d, e, i * repeats + k] = elapsed
    return sizes_mib, times


def measure(
    mesh: Mesh, sizes_bytes: Sequence[int], repeats: int = 3, axis_name: str | None = None
) -> CostModel:
    """A :class:`CostModel` fitted to ``ppermute`` timings on ``mesh`` (:func:`measure_samples`,
    :func:`fit`); all zeros on one device. ValueError for fewer than 2 distinct sizes or
    ``repeats < 1``."""
    if len(set(int(s) for s in sizes_bytes)) < 2:
        raise ValueError(f"measure needs at least 2 distinct sizes, got {list(sizes_bytes)}")
    sizes_mib, times = measure_samples(mesh, sizes_bytes, repeats, axis_name)
    p = times.shape[0]
    if p == 1:
        return CostModel(theta=np.zeros((1, 1)), gamma=np.zeros((1, 1)), source="measured")
    model, _ = fit(sizes_mib, times)
    platform = mesh.devices.flat[0].platform
    return dataclasses.replace(model, source=f"measured on {p} {platform} devices")


__all__ = ["PRESETS", "CostModel", "Interconnect", "fit", "fit_line", "measure", "measure_samples"]
