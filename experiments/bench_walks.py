"""Walk throughput on a bundled graph: DeepWalk and node2vec, walks/s and tokens/s, beside
PecanPy on the same graph.

    python experiments/bench_walks.py --dataset blogcatalog --walks-per-node 10 --walk-length 80 \
        --pecanpy-python /path/to/venv/bin/python

Compilation (numba, cached on disk after the first run) is excluded; the best of ``--repeats``
runs is reported, with the numba thread count.

PecanPy (Liu & Krishnan, 2021; ``pip install pecanpy``) walks the same graph, written as an edge
list, with as many threads, in a separate interpreter: PecanPy 2.0.9 imports ``nptyping``,
which needs numpy < 2, and this JAX needs numpy >= 2, so it lives in its own environment
(``python -m venv pp && pp/bin/pip install pecanpy``), named by ``--pecanpy-python``; without
it the script tries this interpreter. Its modes: ``FirstOrderUnweighted`` for DeepWalk and
``p = q = 1``, ``PreComp`` (second-order probabilities precomputed per edge, the fastest for
graphs that fit) and ``SparseOTF`` (computed on the fly) for node2vec. Two times per mode:
``simulate_walks`` as a user calls it (walks returned as lists of node-id strings; each call
builds new numba closures for its walk loop and so compiles it again, about 0.8 s on 2
cores) and its numba walk loop alone, compiled once ahead (``_random_walks``, walks as an index
matrix, as ``random_walks`` returns them): the engines compared. PecanPy's ``walk_length``
counts steps, so it is given ``L - 1`` for walks of ``L`` nodes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numba
import numpy as np

from jaxgraph.data import load_dataset
from jaxgraph.embed.walks import WalkConfig, walk_throughput

# Runs under the PecanPy interpreter: argv = edge file, mode, p, q, walks per node, walk
# length (nodes), threads, repeats; prints one JSON line.
PECANPY_DRIVER = """
import json, sys, time
import numpy as np
from pecanpy import pecanpy as p2v
from pecanpy.pecanpy import ProgressBar
path, mode, p, q, per_node, length, workers, repeats = sys.argv[1:]
g = getattr(p2v, mode)(p=float(p), q=float(q), workers=int(workers), random_state=0)
g.read_edg(path, weighted=False, directed=False)
t0 = time.perf_counter()
g.preprocess_transition_probs()
prep = time.perf_counter() - t0
steps = int(length) - 1
starts = np.concatenate([np.arange(g.num_nodes, dtype=np.uint32)] * int(per_node))
has_nbrs, move_forward = g.get_has_nbrs(), g.get_move_forward()


def loop(starts):
    with ProgressBar(total=starts.size, disable=True) as progress:
        return g._random_walks(starts.size, steps, 0, starts, has_nbrs, move_forward, progress)


loop(starts[:2])  # compiles the loop for these two functions
api = best = None
for _ in range(int(repeats)):
    t0 = time.perf_counter()
    walks = g.simulate_walks(num_walks=int(per_node), walk_length=steps)
    dt = time.perf_counter() - t0
    api = dt if api is None else min(api, dt)
    t0 = time.perf_counter()
    mat = loop(starts)
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
print(json.dumps({"walks": len(walks), "tokens": int(sum(map(len, walks))),
                  "tokens_loop": int(mat[:, -1].sum()), "seconds": api, "seconds_loop": best,
                  "preprocess_s": prep}))
"""


def pecanpy_walks(python, edge_file, mode, p, q, per_node, length, threads, repeats):
    """PecanPy's throughput in mode ``mode`` (a dict, see ``PECANPY_DRIVER``), or the reason
    it could not run (a str)."""
    cmd = [python, "-c", PECANPY_DRIVER, str(edge_file), mode, str(p), str(q)]
    cmd += [str(per_node), str(length), str(threads), str(repeats)]
    env = {"NUMBA_NUM_THREADS": str(threads), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_edge_list(graph, path: Path) -> None:
    """Each undirected edge once, ``u<TAB>v``, as PecanPy's ``read_edg`` reads it."""
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    src = np.asarray(graph.indices)
    keep = src < dst
    np.savetxt(path, np.stack([src[keep], dst[keep]], 1), fmt="%d", delimiter="\t")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="blogcatalog")
    ap.add_argument("--walks-per-node", type=int, default=10)
    ap.add_argument("--walk-length", type=int, default=80)
    ap.add_argument("--p", type=float, default=0.25)
    ap.add_argument("--q", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--pecanpy-python",
        default=sys.executable,
        help="an interpreter with PecanPy installed (default: this one)",
    )
    ap.add_argument("--quick", action="store_true", help="Cora, 2 walks per node, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.dataset, args.walks_per_node, args.repeats = "cora", 2, 1
    g = load_dataset(args.dataset)
    print(f"{g!r}; numba threads: {numba.get_num_threads()}")
    cols = ("walks", "tokens", "seconds", "walks/s", "tokens/s")
    print(f"{'walker':<40} " + " ".join(f"{c:>10}" for c in cols))
    row = lambda name, walks, tokens, secs: print(  # noqa: E731
        f"{name:<40} {walks:>10,} {tokens:>10,} {secs:>10.2f} {walks / secs:>10,.0f} "
        f"{tokens / secs:>10,.0f}"
    )
    threads = numba.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        edges = Path(tmp) / "graph.edg"
        write_edge_list(g, edges)
        for kind, p, q, modes in (
            ("deepwalk", 1.0, 1.0, ("FirstOrderUnweighted",)),
            ("node2vec", 1.0, 1.0, ()),
            ("node2vec", args.p, args.q, ("PreComp", "SparseOTF")),
        ):
            cfg = WalkConfig(kind, args.walk_length, args.walks_per_node, p, q)
            r = walk_throughput(g, cfg, repeats=args.repeats)
            name = kind if kind == "deepwalk" else f"node2vec p={p:g} q={q:g}"
            row(f"jaxgraph {name}", int(r["walks"]), int(r["tokens"]), r["seconds"])
            for mode in modes:
                pp = pecanpy_walks(
                    args.pecanpy_python,
                    edges,
                    mode,
                    p,
                    q,
                    args.walks_per_node,
                    args.walk_length,
                    threads,
                    args.repeats,
                )
                if isinstance(pp, str):
                    print(f"  PecanPy {mode}: not run ({pp}); see --pecanpy-python")
                    continue
                print(f"  PecanPy {mode} preprocess_transition_probs: {pp['preprocess_s']:.2f} s")
                row(f"  PecanPy {mode} simulate_walks", pp["walks"], pp["tokens"], pp["seconds"])
                row(
                    f"  PecanPy {mode} walk loop",
                    pp["walks"],
                    pp["tokens_loop"],
                    pp["seconds_loop"],
                )


if __name__ == "__main__":
    main()
