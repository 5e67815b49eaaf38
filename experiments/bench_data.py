"""Benchmark of the synthetic graph generators (and, later, of graph partitioning).

Generates a large DC-SBM and a large R-MAT graph (default 1M nodes, about 20M directed edges
each, both undirected) and prints, for each, the wall-clock generation time, the peak memory
allocated by NumPy during the call (``tracemalloc``) and the process's peak resident set size
(``ru_maxrss``, cumulative over the run).

Usage::

    python experiments/bench_data.py --nodes 1000000 --edges 20000000

The functions return plain dicts so that other parts (e.g. a METIS partition benchmark) can be
appended and share :func:`measure` and :func:`main`.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable

from jaxgraph.data.synthetic import dc_sbm, rmat
from jaxgraph.graph import Graph

GIB = float(1 << 30)


def measure(fn: Callable[[], Graph]) -> tuple[Graph, dict]:
    """Runs ``fn`` and returns its graph and ``{seconds, peak_alloc_gib, maxrss_gib}``."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    graph = fn()
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return graph, {
        "seconds": round(seconds, 2),
        "peak_alloc_gib": round(peak / GIB, 3),
        "maxrss_gib": round(maxrss / GIB, 3),
    }


def graph_stats(graph: Graph) -> dict:
    """Sizes of a generated graph."""
    deg = graph.in_degree()
    return {
        "nodes": graph.num_nodes,
        "directed_edges": graph.num_edges,
        "features": graph.num_features,
        "mean_degree": round(float(deg.mean()), 2),
        "max_degree": int(deg.max()),
        "graph_gib": round(
            (graph.indptr.nbytes + graph.indices.nbytes + graph.features.nbytes) / GIB, 3
        ),
    }


def bench_dc_sbm(nodes: int, edges: int, *, features: int, seed: int) -> dict:
    """DC-SBM with ``avg_degree = edges / nodes`` (about ``edges`` directed edges)."""
    graph, result = measure(
        lambda: dc_sbm(nodes, avg_degree=edges / nodes, num_features=features, seed=seed)
    )
    return {"generator": "dc_sbm", **result, **graph_stats(graph)}


def bench_rmat(nodes: int, edges: int, *, features: int, seed: int) -> dict:
    """Undirected R-MAT with ``edges / 2`` sampled edges (at most ``edges`` directed edges)."""
    graph, result = measure(
        lambda: rmat(nodes, edges // 2, symmetrize=True, num_features=features, seed=seed)
    )
    return {"generator": "rmat", **result, **graph_stats(graph)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=20_000_000, help="target directed edges")
    p.add_argument("--features", type=int, default=32, help="feature dimension (dc_sbm)")
    p.add_argument("--rmat-features", type=int, default=0, help="feature dimension (rmat)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--only", choices=("dc_sbm", "rmat"), action="append", help="run only these generators"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
    return p.parse_args(argv)


def run_generation(args: argparse.Namespace) -> list[dict]:
    """The synthetic-generation part of the benchmark."""
    which = args.only or ["dc_sbm", "rmat"]
    results = []
    if "dc_sbm" in which:
        results.append(bench_dc_sbm(args.nodes, args.edges, features=args.features, seed=args.seed))
    if "rmat" in which:
        results.append(
            bench_rmat(args.nodes, args.edges, features=args.rmat_features, seed=args.seed)
        )
    return results


def report(results: list[dict], as_json: bool) -> None:
    for r in results:
        if as_json:
            print(json.dumps(r))
        else:
            print(
                f"{r['generator']:>7}: {r['seconds']:7.2f} s  peak alloc {r['peak_alloc_gib']:.2f}"
                f" GiB  maxrss {r['maxrss_gib']:.2f} GiB | N={r['nodes']:,} "
                f"E={r['directed_edges']:,} F={r['features']} mean deg {r['mean_degree']} "
                f"max deg {r['max_degree']:,} graph {r['graph_gib']:.2f} GiB"
            )
    sys.stdout.flush()


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    results = run_generation(args)
    report(results, args.json)
    return results


if __name__ == "__main__":
    main()
