"""Sancus against CAGNET with a stale phase long enough to show in the accuracy.

`sancus_table.py` gives Sancus 50 warm-up epochs (every block broadcast); on Cora without
dropout the best-validation epoch of CAGNET falls at 38-81, so the accuracy it reports was
mostly reached before any broadcast was skipped. This script trains the same model (GCN-2,
hidden 64, no dropout, Adam 0.01, wd 5e-4, METIS parts) for ``--epochs`` epochs with a short
warm-up (``-w<W>`` methods, default 10) for Sancus and SkipG, and records per run:

* the best-validation epoch, the validation accuracy there and the test accuracy at it;
* the test accuracy at the last epoch;
* where the best epoch falls: in the warm-up or in the stale phase, and how many stale
  epochs came before it;
* bytes per epoch relative to CAGNET of the same seed, over the stale epochs up to the best
  epoch (the part of the run the headline accuracy depends on) and over the whole run, and
  the hidden layer's forward broadcasts alone over the same stale epochs (the total less the
  static parts of `sancus_table.static_bytes`), which is what the staleness bounds skip;
* the per-epoch validation and test accuracy and bytes (in the JSON).

Outputs (prefix ``--out``): ``.json`` (every run with its curves, and the settings), ``.md``
(the per-seed rows and the means over seeds, with machine and date).

    PYTHONPATH=experiments python experiments/sancus_stale_phase.py --parts 4 8 \\
        --seeds 0 1 2 --epochs 300 --out experiments/results/sancus_stale_cora
    PYTHONPATH=experiments python experiments/sancus_stale_phase.py --quick --out /tmp/ss
"""

from __future__ import annotations

import argparse
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from sancus_table import plan_for, static_bytes  # noqa: E402

from jaxgraph.models import make_model  # noqa: E402
from jaxgraph.train import (  # noqa: E402
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    load_graph,
    make_strategy,
    train,
)

from results_io import add_output_args, load_runs, write_runs  # noqa: E402

METHODS = ("cagnet", "sancus-e1", "sancus-e3", "sancus-a3", "sancus-h0.03", "skipg")


def warmup_of(method: str) -> int:
    """The warm-up epochs of a method label (``-w<W>``; 50 when absent; 0 for CAGNET)."""
    if method == "cagnet":
        return 0
    for part in method.split("-")[1:]:
        if part.startswith("w") and part[1:].isdigit():
            return int(part[1:])
    return 50


def run_one(args, graph, parts: int, method: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        cfg = TrainConfig(
            data=DataConfig(name=args.dataset, seed=0),
            model=ModelConfig(name="gcn", hidden=64, num_layers=2, dropout=0.0),
            optim=OptimConfig(learning_rate=0.01, weight_decay=5e-4),
            parts=parts,
            method=method,
            epochs=args.epochs,
            seed=seed,
            progress=False,
            workdir=workdir,
        )
        summary = train(cfg, graph=graph)
        lines = (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {
        "dataset": graph.name,
        "parts": parts,
        "method": method,
        "warmup": warmup_of(method),
        "seed": seed,
        "epochs": args.epochs,
        "best_epoch": summary["best_epoch"],
        "best_val": 100 * summary["best_val"],
        "test_at_best": 100 * summary["test_at_best"],
        "test_last": 100 * records[-1]["test_score"],
        "val_last": 100 * records[-1]["val_score"],
        "wall_time": summary["wall_time"],
        "val_curve": [round(100 * r["val_score"], 2) for r in records],
        "test_curve": [round(100 * r["test_score"], 2) for r in records],
        "bytes_curve": [r["bytes_moved"] for r in records],
    }


def add_static(graph, row: dict) -> None:
    """The bytes per epoch that do not depend on the staleness decisions (backward reductions,
    decision tables, the first layer's broadcast; `sancus_table.static_bytes`)."""
    strategy = make_strategy(row["method"], epochs=row["epochs"], seed=row["seed"])
    plan = plan_for(strategy, graph, row["parts"], row["seed"])
    dims = make_model("gcn", hidden=64, out_dim=graph.num_classes, num_layers=2)
    dims = dims.layer_input_dims(graph.num_features)
    static = static_bytes(strategy, plan, dims, epochs=row["epochs"], dropout=0.0)
    row["backward_bytes"] = static["backward"]
    row["control_bytes"] = static["control"]
    row["layer0_forward_bytes"] = static["layer0"]


def add_relative(rows: list[dict]) -> None:
    """Differences and byte ratios against the CAGNET run of the same part count and seed."""
    base = {(r["parts"], r["seed"]): r for r in rows if r["method"] == "cagnet"}
    for r in rows:
        b = base.get((r["parts"], r["seed"]))
        if b is None:
            continue
        w, best = r["warmup"], r["best_epoch"]
        mine, theirs = np.asarray(r["bytes_curve"]), np.asarray(b["bytes_curve"])
        r["in_warmup"] = best <= w
        r["stale_epochs_before_best"] = max(0, best - w)
        upto = slice(w, best) if best > w else slice(w, w + 1)  # epochs w+1 .. best
        r["bytes_stale_to_best_vs_cagnet"] = float(mine[upto].sum() / theirs[upto].sum())
        r["bytes_vs_cagnet"] = float(mine.sum() / theirs.sum())
        if r["method"].startswith("sancus") and "backward_bytes" in r:
            # Hidden-layer broadcasts in epochs w+1 .. best: the total less the static parts
            # (the first layer's rows are cached after epoch 1 without dropout), against
            # CAGNET's, which broadcasts every block of every layer.
            n = len(mine[upto])
            fwd = mine[upto].sum() - n * (r["backward_bytes"] + r["control_bytes"])
            full = theirs[upto].sum() - n * (b["backward_bytes"] + b["layer0_forward_bytes"])
            r["hidden_forward_stale_to_best_vs_cagnet"] = float(fwd / full)
        r["delta_best"] = r["test_at_best"] - b["test_at_best"]
        r["delta_last"] = r["test_last"] - b["test_last"]


def per_seed_table(rows: list[dict]) -> str:
    lines = [
        "| P | method | seed | best epoch | phase of best epoch | stale epochs before it "
        "| best val (%) | test at best (%) | Δ vs CAGNET (pts) | test at last epoch (%) "
        "| Δ last (pts) | bytes vs CAGNET, stale epochs to best "
        "| hidden-layer broadcasts vs CAGNET, stale epochs to best | bytes vs CAGNET, run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "delta_best" not in r:
            continue
        cag = r["method"] == "cagnet"
        phase = "—" if cag else ("warm-up" if r["in_warmup"] else "stale")
        stale = "—" if cag else str(r["stale_epochs_before_best"])
        ratio = "1.000" if cag else f"{r['bytes_stale_to_best_vs_cagnet']:.3f}"
        hidden = _hidden(r)
        lines.append(
            f"| {r['parts']} | {r['method']} | {r['seed']} | {r['best_epoch']} | {phase} "
            f"| {stale} | {r['best_val']:.1f} | {r['test_at_best']:.1f} | {r['delta_best']:+.1f} "
            f"| {r['test_last']:.1f} | {r['delta_last']:+.1f} | {ratio} | {hidden} "
            f"| {r['bytes_vs_cagnet']:.3f} |"
        )
    return "\n".join(lines)


def _hidden(r: dict) -> str:
    """The hidden-layer broadcast ratio of a row, '1.000' for CAGNET (and SkipG, which
    broadcasts every block forward), as text."""
    if "hidden_forward_stale_to_best_vs_cagnet" in r:
        return f"{r['hidden_forward_stale_to_best_vs_cagnet']:.3f}"
    return "1.000"


def mean_table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "delta_best" in r:
            groups.setdefault((r["parts"], r["method"]), []).append(r)
    lines = [
        "| P | method | seeds | best epochs | best epoch in stale phase | test at best (%) "
        "| Δ vs CAGNET (pts), per seed | worst Δ | test at last epoch (%) | Δ last, per seed "
        "| bytes vs CAGNET, stale epochs to best "
        "| hidden-layer broadcasts vs CAGNET, stale epochs to best | bytes vs CAGNET, run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (parts, method), runs in groups.items():
        acc = [r["test_at_best"] for r in runs]
        last = [r["test_last"] for r in runs]
        deltas = [r["delta_best"] for r in runs]
        deltas_last = [r["delta_last"] for r in runs]
        cag = method == "cagnet"
        stale = "—" if cag else f"{sum(not r['in_warmup'] for r in runs)} of {len(runs)}"
        lines.append(
            f"| {parts} | {method} | {len(runs)} "
            f"| {', '.join(str(r['best_epoch']) for r in runs)} | {stale} "
            f"| {np.mean(acc):.1f} ± {np.std(acc):.1f} "
            f"| {', '.join(f'{d:+.1f}' for d in deltas)} "
            f"| {min(deltas):+.1f} "
            f"| {np.mean(last):.1f} ± {np.std(last):.1f} "
            f"| {', '.join(f'{d:+.1f}' for d in deltas_last)} "
            + (
                "| 1.000 | 1.000 | 1.000 |"
                if cag
                else f"| {np.mean([r['bytes_stale_to_best_vs_cagnet'] for r in runs]):.3f} "
                f"| {_hidden_mean(runs)} "
                f"| {np.mean([r['bytes_vs_cagnet'] for r in runs]):.3f} |"
            )
        )
    return "\n".join(lines)


def _hidden_mean(runs: list[dict]) -> str:
    key = "hidden_forward_stale_to_best_vs_cagnet"
    if all(key in r for r in runs):
        return f"{np.mean([r[key] for r in runs]):.3f}"
    return "1.000"


def header(args, seeds) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"`experiments/sancus_stale_phase.py`, {now}, {platform.node()} ({os.cpu_count()} "
        f"CPUs, jax {jax.__version__}, emulated CPU mesh): {args.dataset}, GCN-2 hidden 64, "
        f"dropout 0, Adam lr 0.01, wd 5e-4, {args.epochs} epochs, METIS parts, seeds "
        f"{', '.join(map(str, seeds))}. Sancus methods with a {args.warmup}-epoch warm-up "
        "(every block broadcast in epochs 1..W, staleness bounds after). 'test at best' = "
        "test accuracy at the best-validation epoch; Δ = against CAGNET of the same seed "
        "and part count. 'bytes vs CAGNET, stale epochs to best' = the mesh's bytes over "
        "epochs W+1 .. best epoch against CAGNET's over the same epochs (the broadcasts the "
        "headline accuracy could have lost); 'hidden-layer broadcasts' = the same window's "
        "forward broadcasts of the layer after the first (the total less the backward "
        "reductions and decision tables; the first layer's rows are cached after epoch 1), "
        "against CAGNET's (SkipG broadcasts every block forward: 1); 'run' = over all "
        "epochs.\n\n"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--warmup", type=int, default=10, help="warm-up epochs of the Sancus methods")
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument(
        "--quick", action="store_true", help="P = 4, seed 0, 40 epochs, CAGNET and Δ_H 0.03"
    )
    add_output_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.parts, args.seeds, args.epochs = [4], [0], 40
        args.methods = ["cagnet", "sancus-h0.03"]
    methods = [m if m == "cagnet" or "-w" in m else f"{m}-w{args.warmup}" for m in args.methods]
    if "cagnet" not in methods:
        methods = ["cagnet", *methods]

    graph = load_graph(DataConfig(name=args.dataset, seed=0))
    rows = load_runs(args)
    for r in rows:
        if "backward_bytes" not in r:
            add_static(graph, r)
    done = {(r["parts"], r["method"], r["seed"]) for r in rows}
    for parts in args.parts:
        for seed in args.seeds:
            for method in methods:
                if (parts, method, seed) in done:
                    continue
                t0 = time.perf_counter()
                rows.append(run_one(args, graph, parts, method, seed))
                add_static(graph, rows[-1])
                add_relative(rows)
                r = rows[-1]
                print(
                    f"P={parts} seed {seed} {method}: best epoch {r['best_epoch']}, val "
                    f"{r['best_val']:.1f}, test {r['test_at_best']:.1f} "
                    f"({r.get('delta_best', 0):+.1f}), last {r['test_last']:.1f} "
                    f"({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
                if args.out:  # rewritten after every run, so a long grid keeps what it has
                    write(args, rows)
    add_relative(rows)
    if args.out:
        write(args, rows)
    print(mean_table(rows))
    print(per_seed_table(rows))


def write(args, rows) -> None:
    seeds = sorted({r["seed"] for r in rows})
    text = header(args, seeds) + "Means over seeds:\n\n" + mean_table(rows) + "\n\nPer seed:\n\n"
    write_runs(args, rows, text + per_seed_table(rows) + "\n")


if __name__ == "__main__":
    main()
