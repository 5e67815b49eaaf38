"""METIS in a process of its own (run by path: it imports neither jax nor jaxgraph).

pymetis's METIS draws from the C library's per-process ``rand()``: another thread calling it
meanwhile (JAX's distributed runtime does) changes the partition, differently on each process.
:func:`jaxgraph.partition.partition_graph` then runs METIS here, in a child with no other
thread: stdin carries an ``.npz`` of ``indptr``, ``indices``, ``num_parts`` and ``seed``;
stdout returns the ``.npy`` of the part ids.
"""

from __future__ import annotations

import io
import sys

import numpy as np


def run_metis(indptr: np.ndarray, indices: np.ndarray, num_parts: int, seed: int) -> np.ndarray:
    """pymetis's ``int32[N]`` partition of the symmetric, loop-free CSR ``(indptr, indices)``."""
    import pymetis

    csr = pymetis.CSRAdjacency(
        adj_starts=np.asarray(indptr, np.int64), adjacent=np.asarray(indices, np.int64)
    )
    result = pymetis.part_graph(int(num_parts), csr, options=pymetis.Options(seed=int(seed)))
    return np.asarray(result.vertex_part, dtype=np.int32)


def main() -> None:
    args = np.load(io.BytesIO(sys.stdin.buffer.read()))
    parts = run_metis(args["indptr"], args["indices"], int(args["num_parts"]), int(args["seed"]))
    out = io.BytesIO()
    np.save(out, parts)
    sys.stdout.buffer.write(out.getvalue())


if __name__ == "__main__":
    main()
