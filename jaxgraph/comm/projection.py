"""The modelled communication time of a bit assignment: the bytes of every channel of every
ring round (codes and row parameters, as :func:`jaxgraph.partition.buckets.wire_bytes` puts
them on the wire) priced by a :class:`~jaxgraph.comm.costmodel.CostModel`, each round as long
as its slowest channel."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxgraph.comm.costmodel import MIB
from jaxgraph.partition.buckets import BitAssignment, wire_bytes
from jaxgraph.partition.halo import HaloPlan


def projected_comm_time(
    plan: HaloPlan, assignment: BitAssignment, layer_dims: Sequence[int], cost
) -> dict[str, float]:
    """Modelled seconds per exchange key (``fwd{l}``, ``bwd{l}``) of one training step under
    ``cost``: per ring round ``max_c (theta_c * MiB_c + gamma_c)`` over the channels that carry
    rows (real rows only), summed over rounds (Vanilla is the uniform 32-bit assignment)."""
    return comm_time(channel_bytes(plan, assignment, layer_dims), cost)


def channel_bytes(
    plan: HaloPlan, assignment: BitAssignment, layer_dims: Sequence[int], param_bytes: int = 8
) -> dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per exchange key, per ring round: ``(senders, receivers, bytes)`` of the channels that
    carry rows (the cost-model-free part of :func:`projected_comm_time`)."""
    p = plan.num_parts
    out = {}
    for name, direction in (("fwd", assignment.fwd), ("bwd", assignment.bwd)):
        for layer, rounds in enumerate(direction):
            if name == "bwd" and layer == 0:
                continue
            dim = int(layer_dims[layer])
            per_round = []
            for r, (bits, mask) in enumerate(zip(rounds, plan.send_mask, strict=True), 1):
                src, dst, nbytes = [], [], []
                for d in range(p):
                    w = np.asarray(bits[d])[mask[d]]
                    if not w.size:
                        continue
                    widths, counts = np.unique(w, return_counts=True)
                    nbytes.append(
                        sum(
                            wire_bytes(int(c), dim, int(b), param_bytes)
                            for b, c in zip(widths, counts, strict=True)
                        )
                    )
                    s, t = (d, (d + r) % p) if name == "fwd" else ((d + r) % p, d)
                    src.append(s)
                    dst.append(t)
                per_round.append(
                    (np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(nbytes))
                )
            out[f"{name}{layer}"] = per_round
    return out


def comm_time(channel_bytes, cost) -> dict[str, float]:
    """:func:`projected_comm_time` from :func:`channel_bytes`."""
    out = {}
    for key, per_round in channel_bytes.items():
        total = 0.0
        for src, dst, nbytes in per_round:
            if src.size:
                times = cost.theta[src, dst] * nbytes / MIB + cost.gamma[src, dst]
                total += max(0.0, float(np.max(times)))
        out[key] = total
    return out


__all__ = ["channel_bytes", "comm_time", "projected_comm_time"]
