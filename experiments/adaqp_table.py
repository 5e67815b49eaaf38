"""Adaptive message quantization against full precision and fixed/random bit-widths.

For every dataset, model, part count and seed this trains Vanilla (fp32 exchange), the
uniform and random quantized methods and ``adaqp`` (bit-widths re-solved every
``epochs / 5`` epochs by the mixed-integer program) with the same hyper-parameters, and
reports:

* test accuracy at the best-validation epoch (mean ± std over seeds);
* halo bytes moved per training epoch over the whole mesh (mean over epochs), and its ratio
  to Vanilla;
* the median epoch time measured on the (emulated CPU) mesh;
* the communication time per epoch projected with the program's cost model under two
  interconnect presets (per ring round the slowest channel; real rows only), averaged over
  the epochs with the assignment each epoch used;
* for ``adaqp``: the assignment overhead (solves, traces to the host, re-jit) as a share of
  the run's wall clock, and the bit-width histogram of the last assignment.

A sensitivity block varies λ, the group size and the period on one configuration.

Outputs: a CSV with one row per run, a markdown table of means, and a plot of accuracy
against projected communication time.

    python experiments/adaqp_table.py --out experiments/results/adaqp
    python experiments/adaqp_table.py --datasets cora --models gcn --parts 8 --seeds 0 1
"""

from __future__ import annotations

import argparse
import itertools
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import dataclasses  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from jaxgraph.comm.adaptive import (  # noqa: E402
    PROJECTION_PRESETS,
    AssignConfig,
    first_width,
)
from jaxgraph.comm.assign import SOLVERS  # noqa: E402
from jaxgraph.comm.costmodel import CostModel  # noqa: E402
from jaxgraph.comm.method import RunInfo  # noqa: E402
from jaxgraph.comm.projection import projected_comm_time  # noqa: E402
from jaxgraph.models import make_model  # noqa: E402
from jaxgraph.partition import build_halo_plan, partition_graph  # noqa: E402
from jaxgraph.partition.buckets import BitAssignment, default_chunks  # noqa: E402
from jaxgraph.train import (  # noqa: E402
    AdaQP,
    DataConfig,
    Method,
    ModelConfig,
    OptimConfig,
    Quantized,
    TrainConfig,
    Vanilla,
    load_graph,
    parse_method,
    train,
)

from results_io import read_csv, write_csv  # noqa: E402

METHODS = ("vanilla", "quant-8", "quant-4", "quant-2", "quant-random", "adaqp")
PERIODIC = ("quant-random", "adaqp")  # re-assigned every period
PRESETS = PROJECTION_PRESETS


def data_config(name: str, seed: int) -> DataConfig:
    """A bundled dataset, or ``sbm`` / ``sbm<N>``: a degree-corrected SBM (power-law degrees,
    class-dependent features) of 10,000 or ``N`` nodes, average degree 10."""
    if name.startswith("sbm"):
        nodes = int(name[3:]) if name[3:].isdigit() else 10_000
        return DataConfig(
            name="sbm", num_nodes=nodes, avg_degree=10, num_features=64, num_classes=5, seed=0
        )
    return DataConfig(name=name, seed=0)


def make_method(name: str, assign: AssignConfig, period: int, chunks: int) -> Method:
    """The method spelled ``name`` (as in :data:`METHODS`) with the grid's settings where they
    apply: ``adaqp`` takes ``assign``, ``quant-random`` its candidate widths; both take the
    ``period`` (0: epochs / 5) and the exchange layout ``chunks``."""
    if name == "adaqp":
        return AdaQP(assign=assign, period=period, chunks=chunks)
    if name == "quant-random":
        return Quantized("random", widths=assign.widths, period=period, chunks=chunks)
    return parse_method(name)


def _candidate_widths(method: Method) -> tuple[int, ...] | None:
    """The widths a re-assigned method (:data:`PERIODIC`) chooses from; None for the others."""
    if isinstance(method, AdaQP):
        return method.assign.widths
    if isinstance(method, Quantized) and method.bits == "random":
        return method.widths
    return None


def _assignment_at(cfg: TrainConfig, plan, num_layers: int, epoch: int, metrics: list[dict]):
    """The bit assignment the run used at ``epoch`` (None for adaqp)."""
    if isinstance(cfg.method, Vanilla):
        return BitAssignment.uniform(plan, num_layers, 32)
    if isinstance(cfg.method, Quantized):  # the run's own strategy, as training builds it
        q, run = cfg.method, RunInfo(cfg.epochs, cfg.seed)
        index = (epoch - 1) // run.period(q.period)
        return q.assignment(plan, num_layers, period_index=index, seed=cfg.seed)
    return None


def projected_times(cfg, graph, metrics: list[dict]) -> dict[str, float]:
    """Mean projected communication seconds per epoch under each preset."""
    parts = partition_graph(graph, cfg.parts, method=cfg.partition, seed=cfg.seed)
    plan = build_halo_plan(graph, parts, num_parts=cfg.parts)
    model = make_model(
        cfg.model.name,
        hidden=cfg.model.hidden,
        out_dim=graph.num_classes,
        num_layers=cfg.model.num_layers,
    )
    dims = model.layer_input_dims(graph.num_features)
    out = {}
    for preset in PRESETS:
        cost = CostModel.from_preset(preset, cfg.parts)
        cache, per_epoch = {}, []
        for m in metrics:
            if isinstance(cfg.method, AdaQP):
                # The first period's uniform width until the first solve; then the logged
                # projection.
                if "projected" in m:
                    cache["adaqp"] = m["projected"][preset]
                if "adaqp" not in cache:
                    first = BitAssignment.uniform(plan, len(dims), first_width(cfg.method.assign))
                    cache["adaqp"] = sum(projected_comm_time(plan, first, dims, cost).values())
                per_epoch.append(cache["adaqp"])
                continue
            a = _assignment_at(cfg, plan, len(dims), m["epoch"], metrics)
            digest = a.digest()
            if digest not in cache:
                cache[digest] = sum(projected_comm_time(plan, a, dims, cost).values())
            per_epoch.append(cache[digest])
        out[preset] = float(np.mean(per_epoch))
    return out


def run_one(cfg: TrainConfig, graph, *, assign: AssignConfig, period: int) -> dict:
    """Trains ``cfg`` and returns its row. ``assign`` and ``period`` (0: epochs / 5) are the
    grid's settings, recorded in every row (the table groups runs by them) whether or not
    the method uses them."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = train(cfg.replace(workdir=tmp), graph=graph)
        metrics = [json.loads(s) for s in Path(tmp, "metrics.jsonl").read_text().split("\n") if s]
    adaptive, widths = isinstance(cfg.method, AdaQP), _candidate_widths(cfg.method)
    row = {
        "dataset": graph.name,
        "model": cfg.model.name,
        "layers": cfg.model.num_layers,
        "parts": cfg.parts,
        "method": cfg.method.label(),
        "seed": cfg.seed,
        "lam": assign.lam,
        "group_size": assign.group_size,
        "period": period or max(cfg.epochs // 5, 1),
        "lookahead": cfg.method.assign.lookahead if adaptive else 0,
        "solver": cfg.method.assign.solver if adaptive else "",
        "widths": _widths_text(widths) if widths is not None else "",
        "chunks": summary["exchange_chunks"],  # 0 for the methods without a layout choice
        "compiled_steps": summary["compiled_steps"],
        "compile_time": summary["compile_time"],
        "test_acc": 100 * summary["test_at_best"],
        "bytes_per_epoch": summary["mean_bytes_per_epoch"],
        "median_epoch_time": summary["median_epoch_time"],
        "wall_time": summary["wall_time"],
        "assign_overhead_share": summary["assign_overhead_share"],
        "assign_solve_share": summary["assign_solve_share"],
        "assign_solve_time": summary["assign_solve_time"],
        "assign_rejit_time": summary["assign_rejit_time"],
    }
    for preset, t in projected_times(cfg, graph, metrics).items():
        row[f"proj_{preset}"] = t
    widths = [m["widths"] for m in metrics if "widths" in m]
    row["last_widths"] = json.dumps(widths[-1]) if widths else ""
    return row


def _mean_std(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _solver(row: dict) -> str:
    """The bit-width solver of an adaqp run ("milp" in CSVs from before the column)."""
    return (row.get("solver") or "milp") if row["method"] == "adaqp" else ""


def _widths_text(widths) -> str:
    return "/".join(str(w) for w in widths)


DEFAULT_WIDTHS = _widths_text(AssignConfig().widths)


def _widths(row: dict) -> str:
    """The candidate widths of a random or adaqp run, as ``"2/4/8"`` (the default in CSVs
    from before the column)."""
    return (row.get("widths") or DEFAULT_WIDTHS) if row["method"] in PERIODIC else ""


def _config_key(row: dict) -> tuple:
    """The settings that make one table row (everything but the seed)."""
    return tuple(
        row[f] for f in ("dataset", "model", "parts", "method", "lam", "group_size", "period")
    ) + (
        row.get("lookahead", 0),
        row.get("chunks", 0),
        _solver(row),
        row.get("layers", 2),
        _widths(row),
    )


def _label(method: str, solver: str, widths: str = "") -> str:
    label = f"{method} ({solver})" if solver not in ("", "milp") else method
    if widths not in ("", DEFAULT_WIDTHS):
        label += " {" + widths.replace("/", ",") + "}"
    return label


def markdown(rows: list[dict]) -> str:
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))  # first-seen order
    order = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(
        {_config_key(r) for r in rows},
        key=lambda k: (
            datasets.index(k[0]),
            k[1],
            k[2],
            order.get(k[3], len(order)),
            *k[4:9],
            SOLVERS.index(k[9]) if k[9] else -1,
            k[10],
            k[11],
        ),
    )
    lines = [
        "| dataset | model | P | method | λ | group | period | seeds | test acc "
        "| bytes/epoch vs vanilla | CPU epoch (s) | proj. comm 10GbE (ms) | proj. comm PCIe3 (ms) "
        "| layout | compiled steps | assign overhead: solve / re-jit (% of wall) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in keys:
        sel = [r for r in rows if _config_key(r) == k]
        base = [
            r
            for r in rows
            if (r["dataset"], r["model"], r["parts"], r["method"]) == (k[0], k[1], k[2], "vanilla")
            and r.get("layers", 2) == k[10]
        ]
        acc, std = _mean_std([r["test_acc"] for r in sel])
        nbytes = statistics.mean(r["bytes_per_epoch"] for r in sel)
        ratio = (
            nbytes / statistics.mean(r["bytes_per_epoch"] for r in base) if base else float("nan")
        )
        adaptive = k[3] == "adaqp"
        periodic = k[3] in PERIODIC
        steps = [r["compiled_steps"] for r in sel if "compiled_steps" in r]
        layout = (f"chunks {k[8]}" if k[8] else "exact") if periodic else ""
        overhead = ""
        if periodic:
            solve = 100 * statistics.mean(r["assign_solve_share"] for r in sel)
            rejit = 100 * statistics.mean(r["assign_rejit_time"] / r["wall_time"] for r in sel)
            overhead = f"{solve:.1f} / {rejit:.1f}"
        lines.append(
            f"| {k[0]} | {k[1]} | {k[2]} | {_label(k[3], k[9], k[11])} | "
            f"{k[4] if adaptive else ''} | "
            f"{k[5] if adaptive else ''} | "
            f"{(f'{k[6]}' + (f' (lookahead {k[7]})' if k[7] else '')) if periodic else ''} | "
            f"{len(sel)} | "
            f"{acc:.1f} ± {std:.1f} | {ratio:.3f} | "
            f"{statistics.median(r['median_epoch_time'] for r in sel):.3f} | "
            f"{1e3 * statistics.mean(r['proj_10gbe'] for r in sel):.2f} | "
            f"{1e3 * statistics.mean(r['proj_pcie3x16'] for r in sel):.3f} | "
            f"{layout} | {f'{statistics.mean(steps):.3g}' if steps else ''} | {overhead} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One row of panels per (model, P), one column per dataset.
    datasets = sorted({r["dataset"] for r in rows})
    settings = sorted({(r["model"], r["parts"]) for r in rows})
    fig, axes = plt.subplots(
        len(settings),
        len(datasets),
        figsize=(4 * len(datasets), 3.2 * len(settings)),
        squeeze=False,
    )
    chunkings = sorted({r.get("chunks", 0) for r in rows})
    for (i, (model, parts)), (j, ds) in itertools.product(enumerate(settings), enumerate(datasets)):
        ax = axes[i][j]
        if not any((r["dataset"], r["model"], r["parts"]) == (ds, model, parts) for r in rows):
            ax.set_axis_off()
            continue
        solvers = sorted({_solver(r) for r in rows})
        width_sets = sorted({_widths(r) for r in rows})
        for method, chunks, solver, widths in itertools.product(
            METHODS, chunkings, solvers, width_sets
        ):
            sel = [
                r
                for r in rows
                if (r["dataset"], r["model"], r["parts"], r["method"]) == (ds, model, parts, method)
                and r["lam"] == AssignConfig().lam
                and r.get("chunks", 0) == chunks
                and _solver(r) == solver
                and _widths(r) == widths
            ]
            if not sel:
                continue
            x = 1e3 * statistics.mean(r["proj_10gbe"] for r in sel)
            y, e = _mean_std([r["test_acc"] for r in sel])
            label = _label(method, solver, widths) + (
                f" ({'chunks ' + str(chunks) if chunks else 'exact'})"
                if (method in PERIODIC and len(chunkings) > 1)
                else ""
            )
            ax.errorbar(x, y, yerr=e, fmt="o", label=label)
        ax.set_title(f"{ds} {model} P={parts}")
        ax.set_xlabel("projected comm / epoch, 10GbE (ms)")
        ax.set_ylabel("test accuracy (%)")
    next(ax for ax in axes.flat if ax.has_data()).legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "pubmed", "sbm"])
    p.add_argument("--models", nargs="+", default=["gcn", "sage"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2, help="GNN layers (exchanges per step)")
    p.add_argument(
        "--period", type=int, help="epochs per assignment of random and adaqp (default epochs/5)"
    )
    p.add_argument("--lam", type=float, default=AssignConfig().lam)
    p.add_argument("--group-size", type=int, default=AssignConfig().group_size)
    p.add_argument(
        "--solver",
        nargs="+",
        choices=SOLVERS,
        default=[AssignConfig().solver],
        help="adaqp: how the bit-width program is solved (several values run each)",
    )
    p.add_argument(
        "--widths",
        nargs="+",
        type=int,
        default=list(AssignConfig().widths),
        help="random and adaqp: the candidate bit-widths (default 2 4 8)",
    )
    p.add_argument(
        "--sensitivity",
        action="store_true",
        help="also vary λ, group size and period on the first configuration",
    )
    p.add_argument(
        "--lookahead",
        type=int,
        default=AssignConfig().lookahead,
        help="adaqp: solve this many epochs before each boundary (the step compiles meanwhile)",
    )
    p.add_argument(
        "--exchange-chunks",
        nargs="+",
        type=int,
        default=[default_chunks()],
        help="layouts of quant-random and adaqp: 0 = exact buffers (a step per assignment), "
        "J = one chunked layout for the run; several values run each (default: the "
        "backend's, 6 on CPU)",
    )
    p.add_argument("--out", type=Path, help="output prefix: <out>.csv, <out>.md, <out>.png")
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already in <out>.csv and run only the missing ones (a grid "
        "stopped part-way continues; settings outside the table's columns must not change)",
    )
    p.add_argument(
        "--from-csv",
        type=Path,
        nargs="+",
        metavar="CSV",
        help="train nothing: build the table and plot from these CSVs of earlier runs (those "
        "of --models and --parts; a run present in several files counts once, the last read)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="Cora, GCN, P=4, Vanilla / 4-bit / adaqp, one seed, 20 epochs (a smoke run)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.datasets, args.models, args.parts, args.seeds = ["cora"], ["gcn"], [4], [0]
        args.methods, args.epochs = ["vanilla", "quant-4", "adaqp"], 20

    if args.from_csv:
        rows = [
            r
            for r in read_rows(args.from_csv)
            if r["model"] in args.models and r["parts"] in args.parts
        ]
        write_outputs(rows, args, note=f"runs merged from {', '.join(map(str, args.from_csv))}")
        return
    period = args.period or 0  # 0: epochs / 5
    base_assign = AssignConfig(
        lam=args.lam,
        group_size=args.group_size,
        lookahead=args.lookahead,
        solver=args.solver[0],
        widths=tuple(args.widths),
    )
    solver_variants = [dataclasses.replace(base_assign, solver=s) for s in args.solver]
    jobs = []
    for dataset in args.datasets:
        for model in args.models:
            for parts in args.parts:
                for method in args.methods:
                    for seed in args.seeds:
                        for chunks in args.exchange_chunks if method in PERIODIC else [0]:
                            for a in solver_variants if method == "adaqp" else [base_assign]:
                                jobs.append(
                                    (dataset, model, parts, method, seed, a, period, chunks)
                                )
    if args.sensitivity:
        d, m, parts = args.datasets[0], args.models[0], args.parts[-1]
        chunks = args.exchange_chunks[0]
        variants = [dataclasses.replace(base_assign, lam=lam) for lam in (0.1, 0.9)]
        variants += [dataclasses.replace(base_assign, group_size=g) for g in (20, 500)]
        for seed in args.seeds:
            # The baselines of the block's configuration: bytes are relative to Vanilla.
            for method in ("vanilla", "quant-random", "adaqp"):
                job_chunks = chunks if method in PERIODIC else 0
                jobs.append((d, m, parts, method, seed, base_assign, 0, job_chunks))
            for a in variants:
                jobs.append((d, m, parts, "adaqp", seed, a, 0, chunks))
            for period in (10, 100):
                jobs.append((d, m, parts, "adaqp", seed, base_assign, period, chunks))

    jobs = list(dict.fromkeys(jobs))  # the sensitivity block may repeat the main grid's runs
    graphs, rows, done = {}, [], set()
    csv_path = args.out.with_suffix(".csv") if args.out else None
    if args.resume and csv_path is not None and csv_path.exists():
        rows = read_rows([csv_path])
        done = {(*_config_key(r), r["seed"]) for r in rows}
        print(f"resuming: {len(rows)} runs already in {csv_path}", flush=True)
    for dataset, model, parts, method, seed, assign, period, chunks in jobs:
        if dataset not in graphs:
            graphs[dataset] = load_graph(data_config(dataset, seed))
        lookahead = assign.lookahead if method == "adaqp" else 0
        key = (graphs[dataset].name, model, parts, method, assign.lam, assign.group_size)
        solver = assign.solver if method == "adaqp" else ""
        widths = _widths_text(assign.widths) if method in PERIODIC else ""
        key += (period or max(args.epochs // 5, 1), lookahead, chunks, solver, args.layers)
        key += (widths, seed)
        if key in done:
            continue
        cfg = TrainConfig(
            data=data_config(dataset, seed),
            model=ModelConfig(name=model, hidden=args.hidden, num_layers=args.layers, dropout=0.5),
            optim=OptimConfig(learning_rate=0.01, weight_decay=5e-4),
            parts=parts,
            method=make_method(method, assign, period, chunks),
            epochs=args.epochs,
            seed=seed,
            progress=False,
        )
        t0 = time.perf_counter()
        row = run_one(cfg, graphs[dataset], assign=assign, period=period)
        rows.append(row)
        print(
            f"{dataset} {model} P={parts} {_label(method, solver, widths)} seed={seed} "
            f"λ={assign.lam} "
            f"g={assign.group_size} period={row['period']} chunks={chunks}: "
            f"acc {row['test_acc']:.1f} "
            f"bytes {row['bytes_per_epoch']:.3g} proj10GbE {1e3 * row['proj_10gbe']:.2f} ms "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        if csv_path:  # rewritten after every run, so a long grid keeps what it has
            write_csv(rows, csv_path)
    write_outputs(rows, args, note=f"seeds {args.seeds}")


def write_outputs(rows: list[dict], args, *, note: str) -> None:
    table = markdown(rows)
    print(table)
    if args.out:
        args.out.with_suffix(".md").write_text(
            f"{args.layers} layers, hidden {args.hidden}, dropout 0.5, Adam lr 0.01, wd 5e-4, "
            f"{args.epochs} epochs, "
            f"METIS parts, {note}; test accuracy at the best-validation epoch (mean ± std over "
            "seeds); bytes = halo bytes per training epoch over the whole mesh (what the "
            "collectives carry: every device sends as many bytes in a ring round as the round's "
            "largest payload; mean over epochs), relative to Vanilla; projected comm = the cost "
            "model's time per epoch (per round the slowest channel, real rows) under each "
            "preset.\n\n"
            f"{table}\n"
        )
        plot(rows, args.out.with_suffix(".png"))
        if args.from_csv:
            write_csv(rows, args.out.with_suffix(".csv"))


_INT_FIELDS = (
    "parts",
    "layers",
    "seed",
    "group_size",
    "period",
    "lookahead",
    "chunks",
    "compiled_steps",
)
_TEXT_FIELDS = ("dataset", "model", "method", "solver", "widths", "last_widths")


def read_rows(paths) -> list[dict]:
    """Rows of earlier runs from CSV files, typed as :func:`run_one` returns them; a run
    (configuration and seed) present in several files is taken from the last one."""
    runs = {}
    for path in paths:
        for row in read_csv(path, ints=_INT_FIELDS, texts=_TEXT_FIELDS):
            runs[(*_config_key(row), row["seed"])] = row
    return list(runs.values())


if __name__ == "__main__":
    main()
