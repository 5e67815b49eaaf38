"""METIS in a process of its own (run by path: it imports neither jax nor jaxgraph).

METIS, as pymetis builds it, draws its randomness from the C library's ``rand()``, whose
state is one per process. It seeds that state at the start of every call, so a call alone is
reproducible; but any other thread of the process that calls ``rand()`` meanwhile (the
threads of JAX's distributed runtime do) changes the partition, differently on each
process of a multi-process run. :func:`jaxgraph.partition.partition_graph` then runs METIS
here, in a child process with no other thread: stdin carries an ``.npz`` of ``indptr``,
``indices``, ``num_parts`` and ``seed``; stdout returns the ``.npy`` of the part ids.
"""

from __future__ import annotations

import io
import sys

import numpy as np


def run_metis(indptr: np.ndarray, indices: np.ndarray, num_parts: int, seed: int) -> np.ndarray:
    """pymetis's partition of the symmetric, loop-free CSR adjacency ``(indptr, indices)``:
    ``int32[N]``."""
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
