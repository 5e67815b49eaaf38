"""Assigning every node of a graph to one of ``P`` parts (one part per device).

A partition is an ``int32[N]`` array ``parts``, ``parts[v]`` in ``[0, P)``. Parts may be empty
(METIS on tiny or disconnected graphs); every consumer in :mod:`jaxgraph.partition` allows it.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp

from jaxgraph.graph import Graph
from jaxgraph.partition._metis_worker import run_metis

Method = Literal["metis", "random", "contiguous"]
METHODS: tuple[str, ...] = ("metis", "random", "contiguous")


def partition_graph(
    graph: Graph, num_parts: int, *, method: Method = "metis", seed: int = 0
) -> np.ndarray:
    """Splits the nodes of ``graph`` into ``num_parts`` parts.

    Methods:
      ``"metis"``: :func:`pymetis.part_graph` (k-way for ``P > 8``, else recursive bisection)
        of the symmetrized adjacency without self-loops: the least edge cut under a balance
        constraint.
      ``"random"``: a seeded, balanced random assignment (part sizes differ by at most one).
      ``"contiguous"``: ``parts[v] = floor(v * P / N)`` (sizes differ by at most one).

    With ``num_parts == 1`` every node is on part 0 and no partitioner runs.

    Args:
      num_parts: number of parts ``P >= 1``, at most ``graph.num_nodes``.
      seed: seed of the METIS run or of the random assignment (ignored by ``"contiguous"``).

    Returns:
      ``parts``, ``int32[N]``: the owner part of each node.

    Raises:
      ValueError: on an unknown method, ``num_parts < 1`` or ``num_parts > num_nodes``.
    """
    if method not in METHODS:
        raise ValueError(
            f"unknown partition method {method!r}; expected one of {', '.join(METHODS)}"
        )
    n = graph.num_nodes
    num_parts = _check_num_parts(num_parts, n)
    if num_parts == 1:
        return np.zeros(n, np.int32)
    if method == "contiguous":
        return (np.arange(n, dtype=np.int64) * num_parts // n).astype(np.int32)
    if method == "random":
        return np.random.default_rng(seed).permutation(np.arange(n) % num_parts).astype(np.int32)
    return _metis(graph, num_parts, seed)


def _check_num_parts(num_parts, num_nodes: int) -> int:
    if isinstance(num_parts, bool) or int(num_parts) != num_parts:
        raise ValueError(f"num_parts must be an integer, got {num_parts!r}")
    num_parts = int(num_parts)
    if num_parts < 1:
        raise ValueError(f"num_parts must be at least 1, got {num_parts}")
    if num_parts > num_nodes:
        raise ValueError(
            f"cannot split a graph of {num_nodes} nodes into {num_parts} parts "
            f"(num_parts={num_parts} > num_nodes={num_nodes})"
        )
    return num_parts


def _rand_is_shared() -> bool:
    """Whether other threads may call the C library's ``rand()`` during a METIS call: those of
    JAX's distributed runtime, once initialized (see :mod:`._metis_worker`)."""
    jax = sys.modules.get("jax")
    return jax is not None and jax.distributed.is_initialized()


def _metis_in_child(indptr, indices, num_parts: int, seed: int) -> np.ndarray:
    """:func:`run_metis` in a child process with no other thread (a reproducible partition,
    the same on every process of a multi-process run)."""
    payload = io.BytesIO()
    np.savez(payload, indptr=indptr, indices=indices, num_parts=num_parts, seed=seed)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_metis_worker.py"))],
        input=payload.getvalue(),
        capture_output=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"METIS failed in its child process (exit {done.returncode}): "
            f"{done.stderr.decode(errors='replace').strip()[-2000:]}"
        )
    return np.load(io.BytesIO(done.stdout))


def _metis(graph: Graph, num_parts: int, seed: int) -> np.ndarray:
    n = graph.num_nodes
    src, dst = graph.edges()
    keep = src != dst
    rows = np.concatenate([dst[keep], src[keep]])
    cols = np.concatenate([src[keep], dst[keep]])
    sym = sp.csr_matrix((np.ones(rows.size, np.int8), (rows, cols)), shape=(n, n))
    sym.sum_duplicates()  # canonical: sorted, duplicate-free neighbour lists
    run = _metis_in_child if _rand_is_shared() else run_metis
    parts = run(sym.indptr, sym.indices, num_parts, seed)
    if parts.shape != (n,) or parts.min() < 0 or parts.max() >= num_parts:
        raise RuntimeError(f"METIS returned an invalid partition into {num_parts} parts")
    return parts


def check_parts(parts, num_nodes: int, num_parts: int | None = None) -> tuple[np.ndarray, int]:
    """Validates a partition array: ``(parts int32[N], P)``, ``P = num_parts`` or by default
    ``max(parts) + 1`` (pass it when trailing parts may be empty).

    Raises:
      ValueError: on a wrong shape, non-integer values or part ids outside ``[0, P)``.
    """
    arr = np.asarray(parts)
    if arr.shape != (num_nodes,):
        raise ValueError(f"parts must have shape [{num_nodes}], got {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"parts must hold integer part ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int32)
    if num_parts is None:
        num_parts = int(arr.max()) + 1 if arr.size else 1
    num_parts = int(num_parts)
    if num_parts < 1:
        raise ValueError(f"num_parts must be at least 1, got {num_parts}")
    bad = np.flatnonzero((arr < 0) | (arr >= num_parts))
    if bad.size:
        v = int(bad[0])
        raise ValueError(
            f"parts[{v}] = {int(arr[v])} is not a part id in [0, {num_parts}) "
            f"({bad.size} invalid entries)"
        )
    return arr, num_parts
