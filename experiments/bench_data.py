"""Benchmark of synthetic graph generation and graph partitioning.

1. Generates a large DC-SBM and a large R-MAT graph (default 1M nodes, about 20M directed edges
   each, both undirected) and prints the wall-clock generation time, the peak memory allocated
   by NumPy during the call (``tracemalloc``) and the process's peak resident set size
   (``ru_maxrss``, cumulative over the run).
2. Partitions the DC-SBM graph into ``--parts`` parts with METIS and, as the baseline, randomly,
   printing time and memory, and builds the halo plan of the METIS partition.
3. Partition quality on PubMed, METIS against random: edge cut, remote-neighbour ratio, halo
   rows and the padded ring payload.

Usage::

    python experiments/bench_data.py --nodes 1000000 --edges 20000000 --parts 8
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
from typing import Any

import numpy as np

from jaxgraph.data import load_dataset
from jaxgraph.data.synthetic import dc_sbm, rmat
from jaxgraph.graph import Graph
from jaxgraph.partition import build_halo_plan, partition_graph, partition_report

GIB = float(1 << 30)


def measure(fn: Callable[[], Any]) -> tuple[Any, dict]:
    """Runs ``fn`` and returns its result and ``{seconds, peak_alloc_gib, maxrss_gib}``."""
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
    p.add_argument("--parts", type=int, default=8, help="number of parts to partition into")
    p.add_argument("--skip-partition", action="store_true", help="only time the generators")
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
    p.add_argument("--quick", action="store_true", help="50k nodes, 1M edges")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.edges = 50_000, 1_000_000
    return args


def bench_partition(graph: Graph, parts: int, *, seed: int) -> list[dict]:
    """METIS and random partitioning of ``graph`` (time, memory, quality) and the halo plan."""
    results = []
    for method in ("metis", "random"):
        assignment, result = measure(
            lambda method=method: partition_graph(graph, parts, method=method, seed=seed)
        )
        rep = partition_report(graph, assignment, num_parts=parts)
        results.append(
            {
                "partition": f"{graph.name} {method} P={parts}",
                **result,
                **_quality(rep),
            }
        )
        if method == "metis":
            _, plan_result = measure(
                lambda a=assignment: build_halo_plan(graph, a, num_parts=parts)
            )
            results.append({"partition": f"{graph.name} halo plan P={parts}", **plan_result})
    return results


def _quality(rep) -> dict:
    return {
        "edge_cut": int(rep.edge_cut),
        "cut_fraction": round(rep.edge_cut / max(rep.num_edges, 1), 4),
        "balance": round(float(rep.balance), 3),
        "remote_ratio_mean": round(float(np.mean(rep.remote_ratio)), 4),
        "remote_ratio_max": round(float(np.max(rep.remote_ratio)), 4),
        "halo_rows": int(rep.halo_rows),
        "ring_padded_rows": int(rep.ring_padded_rows),
    }


def partition_quality(dataset: str, parts: int, *, seed: int) -> list[dict]:
    """Quality of METIS against random partitioning on a bundled dataset."""
    graph = load_dataset(dataset)
    out = []
    for method in ("metis", "random"):
        rep = partition_report(
            graph, partition_graph(graph, parts, method=method, seed=seed), num_parts=parts
        )
        out.append({"partition": f"{dataset} {method} P={parts}", **_quality(rep)})
    return out


def report(results: list[dict], as_json: bool) -> None:
    for r in results:
        if as_json:
            print(json.dumps(r))
        elif "partition" in r:
            print(f"{r.pop('partition'):>26}: " + "  ".join(f"{k}={v}" for k, v in r.items()))
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
    results = []
    which = args.only or ["dc_sbm", "rmat"]
    if "dc_sbm" in which:
        graph, gen = measure(
            lambda: dc_sbm(
                args.nodes,
                avg_degree=args.edges / args.nodes,
                num_features=args.features,
                seed=args.seed,
            )
        )
        results.append({"generator": "dc_sbm", **gen, **graph_stats(graph)})
        report(results[-1:], args.json)
        if not args.skip_partition:
            part = bench_partition(graph, args.parts, seed=args.seed)
            report([dict(r) for r in part], args.json)
            results += part
        del graph
    if "rmat" in which:
        results.append(
            bench_rmat(args.nodes, args.edges, features=args.rmat_features, seed=args.seed)
        )
        report(results[-1:], args.json)
    if not args.skip_partition:
        quality = partition_quality("pubmed", args.parts, seed=args.seed)
        report([dict(r) for r in quality], args.json)
        results += quality
    return results


if __name__ == "__main__":
    main()
