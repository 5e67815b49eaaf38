"""Cost and quality of the bit-width solvers: HiGHS (cvxpy) at a relative gap against the exact
frontier solver, on the programs of real partitions.

For each dataset and part count this partitions the graph (METIS), builds the halo plan and
draws ``--solves`` sets of traces (log-normal per sent row, as the traced range variances of
a run spread over orders of magnitude); each set is one re-assignment: all exchange keys of a
2-layer model solved by :meth:`jaxgraph.comm.adaptive.Adaptive.solve`, which is what a training
run times as its solve overhead (grouping, the programs, expanding groups to rows). The traces
are synthetic; the channels, groups, aggregation scores and transfer costs are those of the
real plan. Every solver sees the same traces, in the same process.

Reported per solver: seconds per re-assignment (the first, which for HiGHS includes building
and canonicalizing the cvxpy programs, and the median of the others, which reuse them), and the
largest relative excess of a key's objective over the exact optimum (the frontier solver's).

    python experiments/bench_assign.py
    python experiments/bench_assign.py --datasets cora sbm --parts 4 8 --gaps 0.01 0.0
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from adaqp_table import data_config

from jaxgraph.comm.adaptive import AssignConfig, Traces
from jaxgraph.comm.adaqp import AdaQP
from jaxgraph.comm.method import RunInfo
from jaxgraph.models import make_model
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.partition.buckets import BitAssignment
from jaxgraph.train.loop import load_graph


def traces_for(plan, dims, rng) -> dict:
    """Per exchange, per ring round, one log-normal trace per sent row (``[P, S_r]``)."""
    return {
        d: tuple(tuple(rng.lognormal(0.0, 2.0, m.shape) * m for m in plan.send_mask) for _ in dims)
        for d in ("fwd", "bwd")
    }


def bench(dataset: str, parts: int, args) -> list[dict]:
    graph = load_graph(data_config(dataset, 0))
    plan = build_halo_plan(graph, partition_graph(graph, parts, seed=0), num_parts=parts)
    model = make_model(args.model, hidden=args.hidden, out_dim=graph.num_classes, num_layers=2)
    dims = model.layer_input_dims(graph.num_features)
    norm = "gcn" if args.model == "gcn" else "mean"
    previous = BitAssignment.uniform(plan, len(dims), 8)
    rng = np.random.default_rng(args.seed)
    draws = [traces_for(plan, dims, rng) for _ in range(args.solves)]
    solvers = [("frontier", None)] + [("milp", gap) for gap in args.gaps]
    results = {}
    for name, gap in solvers:
        config = AssignConfig(
            lam=args.lam,
            group_size=args.group_size,
            interconnect=args.interconnect,
            solver=name,
            mip_gap=gap if gap is not None else AssignConfig().mip_gap,
        )
        run = RunInfo(model="gcn" if norm == "gcn" else "sage")  # sage: the mean
        controller = AdaQP(config, period=1, chunks=0).controller(plan, dims, run=run)
        seconds, objectives = [], []
        for traces in draws:
            t0 = time.perf_counter()
            _, log = controller.solve(Traces(**traces), previous)
            seconds.append(time.perf_counter() - t0)
            objectives.append({k: v["objective"] for k, v in log["keys"].items()})
        results[(name, gap)] = (seconds, objectives)
        groups = {k: v["groups"] for k, v in log["keys"].items()}  # the same for every solve
    exact = results[("frontier", None)][1]
    rows = []
    for (name, gap), (seconds, objectives) in results.items():
        excess = max(
            (obj[k] - ref[k]) / ref[k] if ref[k] > 0 else obj[k] - ref[k]
            for obj, ref in zip(objectives, exact, strict=True)
            for k in ref
        )
        rows.append(
            {
                "dataset": graph.name,
                "parts": parts,
                "groups": "/".join(str(groups[k]) for k in sorted(groups)),
                "solver": name if gap is None else f"milp, gap {gap:g}",
                "first_s": seconds[0],
                "median_s": statistics.median(seconds[1:] or seconds),
                "max_excess": excess,
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| dataset | P | groups per key | solver | first assignment (s) | later (median, s) "
        "| worst excess over the optimum |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['parts']} | {r['groups']} | {r['solver']} | "
            f"{r['first_s']:.3f} | {r['median_s']:.3f} | {100 * r['max_excess']:.2f} % |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "sbm"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    p.add_argument("--model", default="gcn", choices=["gcn", "sage"])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lam", type=float, default=AssignConfig().lam)
    p.add_argument("--group-size", type=int, default=AssignConfig().group_size)
    p.add_argument("--interconnect", default="10gbe")
    p.add_argument("--gaps", nargs="+", type=float, default=[AssignConfig().mip_gap, 0.0])
    p.add_argument("--solves", type=int, default=5, help="re-assignments (trace draws) per case")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the table to this markdown file")
    args = p.parse_args(argv)
    rows = []
    for dataset in args.datasets:
        for parts in args.parts:
            rows += bench(dataset, parts, args)
            print(markdown(rows[-1 - len(args.gaps) :]), flush=True)
    table = markdown(rows)
    print(table)
    if args.out:
        args.out.write_text(
            f"Bit-width solvers, {args.model.upper()} (2 layers, hidden {args.hidden}), λ "
            f"{args.lam}, group size {args.group_size}, {args.interconnect}, {args.solves} "
            "re-assignments of synthetic log-normal traces on each real plan; seconds per "
            "re-assignment (all keys, as a training run times it).\n\n"
            f"{table}\n"
        )


if __name__ == "__main__":
    main()
