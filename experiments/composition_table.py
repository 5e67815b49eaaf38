"""Composed strategies: quantized broadcasts (CAGNET, Sancus), quantized stale halos (PipeGCN),
AdaQP, and the seeds' exact variants beside the library's choices.

For every dataset, part count and seed this trains GCN-2 with each method below (METIS
parts, the same hyper-parameters) and reports, per method, the means over the seeds of:

* test accuracy at the best-validation epoch, and its difference in points to the baseline
  of its layout (CAGNET for the block-row methods, Vanilla for the halo-ring methods);
* bytes per epoch over the whole mesh as the strategies measure them (skipped broadcasts
  move 0 bytes; quantized blocks count their codes and row parameters), relative to the
  same baseline;
* the projected communication time of one epoch under two interconnect presets
  (:data:`jaxgraph.comm.costmodel.PRESETS`): ``bytes per device / bandwidth + transfers x
  latency``, with the transfers of the exchange's schedule (ring: ``P - 1`` rounds per layer
  and pass; block rows: ``P`` trees of ``ceil(log2 P)`` rounds per layer and pass, counted
  whole even when Sancus skips a tree, so Sancus's latency term is an upper bound).

Methods (``--methods``): ``cagnet``, ``cagnet-q4`` (4-bit blocks and gradient sums),
``cagnet-adaptive`` (a width per owner block, layer and direction by AdaQP's bi-objective, as
``sancus-adaptive`` below),
``sancus`` (Δ_E = 1 after ``--warmup`` epochs), ``sancus-q4`` (and its blocks at 4 bits),
``sancus-clip`` / ``sancus-eclip`` (local clipping of the parameter gradients before the
all-reduce at ``th = --clip``, or of each device's embedding-gradient message as in
Algorithm 1, line 22, at ``th = --eclip``; the two clip different quantities, of different
norms), ``sancus-random`` / ``sancus-adaptive`` (a width per owner block, layer and
direction, drawn from 2/4/8 or chosen by AdaQP's bi-objective at λ 0.5 under the 10 GbE cost
model, every ``epochs // 5`` epochs; :mod:`jaxgraph.comm.blockwidths`), ``skipg`` and
``skipg-q4`` (Δ = 1 after the same warm-up), ``vanilla``,
``pipegcn``, ``pipegcn-q4``, ``pipegcn-adaptive`` (the stale halos at AdaQP's widths, re-solved
every ``epochs // 5`` epochs from the stale messages' traces), ``adaqp`` and ``adaqp-squares``
(message weight: the square of the sum of aggregation coefficients, as the public
implementation, or their sum of squares, the paper's beta_k).

Outputs (prefix ``--out``): ``.csv`` (one row per run, rewritten after every run; ``--resume``
keeps them) and ``.md`` (the table with its settings).

    python experiments/composition_table.py --quick
    python experiments/composition_table.py --datasets cora citeseer --parts 4 8 \\
        --seeds 0 1 2 --epochs 100 --out experiments/results/composition
"""

from __future__ import annotations

import argparse
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import datetime  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxgraph.comm.costmodel import PRESETS  # noqa: E402
from jaxgraph.train import DataConfig, ModelConfig, OptimConfig, TrainConfig, load_graph  # noqa: E402
from jaxgraph.train.loop import train  # noqa: E402
from jaxgraph.train.methods import (  # noqa: E402
    CAGNET,
    AdaQP,
    PipeGCN,
    Sancus,
    SkipG,
    Vanilla,
)

from results_io import read_csv, write_csv  # noqa: E402

BLOCK = (
    "cagnet",
    "cagnet-q4",
    "cagnet-adaptive",
    "sancus",
    "sancus-q4",
    "sancus-clip",
    "sancus-eclip",
)
BLOCK += ("sancus-random", "sancus-adaptive", "skipg", "skipg-q4")
HALO = ("vanilla", "pipegcn", "pipegcn-q4", "pipegcn-adaptive", "adaqp", "adaqp-squares")
PRESET_NAMES = ("10gbe", "nvlink3")


def method_for(name: str, args):
    """The typed method a table row names."""
    sancus = dict(policy="epoch", bound=1, warmup=args.warmup)
    return {
        "cagnet": CAGNET(),
        "cagnet-q4": CAGNET(quantize=4),
        "cagnet-adaptive": CAGNET(quantize="adaptive"),
        "sancus": Sancus(**sancus),
        "sancus-q4": Sancus(**sancus, quantize=4),
        "sancus-clip": Sancus(**sancus, clip=args.clip),
        "sancus-eclip": Sancus(**sancus, clip=args.eclip, clip_at="embeddings"),
        "sancus-random": Sancus(**sancus, quantize="random"),
        "sancus-adaptive": Sancus(**sancus, quantize="adaptive"),
        "skipg": SkipG(1, warmup=args.warmup),
        "skipg-q4": SkipG(1, warmup=args.warmup, quantize=4),
        "vanilla": Vanilla(),
        "pipegcn": PipeGCN(),
        "pipegcn-q4": PipeGCN(quantize=4),
        "pipegcn-adaptive": PipeGCN(quantize="adaptive"),
        "adaqp": AdaQP(),
        "adaqp-squares": AdaQP(score="squares"),
    }[name]


def data_config(name: str) -> DataConfig:
    if name == "sbm":  # degree-corrected SBM: power-law degrees, class-dependent features
        return DataConfig(
            name="sbm", num_nodes=10_000, avg_degree=10, num_features=64, num_classes=5, seed=0
        )
    return DataConfig(name=name, seed=0)


def transfers(name: str, parts: int, layers: int = 2) -> int:
    """Point-to-point transfers per device and epoch in the exchange's schedule (see the
    module docstring)."""
    passes = 2 * layers - 1  # the first layer's input is data: no backward exchange
    if name in BLOCK:
        return parts * math.ceil(math.log2(parts)) * passes if parts > 1 else 0
    return (parts - 1) * passes


def run_one(args, graph, dataset: str, parts: int, seed: int, name: str) -> dict:
    config = TrainConfig(
        data=data_config(dataset),
        model=ModelConfig(name="gcn", hidden=args.hidden, num_layers=2, dropout=args.dropout),
        optim=OptimConfig(learning_rate=0.01, weight_decay=5e-4),
        parts=parts,
        method=method_for(name, args),
        epochs=args.epochs,
        seed=seed,
        progress=False,
    )
    t0 = time.perf_counter()
    summary = train(config, graph=graph)
    return {
        "dataset": dataset,
        "parts": parts,
        "seed": seed,
        "method": name,
        "label": config.method.label(),
        "test_acc": 100 * summary["test_at_best"],
        "best_epoch": summary["best_epoch"],
        "bytes_per_epoch": summary["mean_bytes_per_epoch"],
        "seconds": time.perf_counter() - t0,
    }


def aggregate(rows: list[dict]) -> list[dict]:
    """Means over seeds per (dataset, parts, method), relative to the layout's baseline of
    the same seeds."""
    out = []
    keys = sorted({(r["dataset"], r["parts"]) for r in rows}, key=str)
    for dataset, parts in keys:
        here = [r for r in rows if (r["dataset"], r["parts"]) == (dataset, parts)]
        for name in BLOCK + HALO:
            mine = [r for r in here if r["method"] == name]
            base_name = "cagnet" if name in BLOCK else "vanilla"
            base = {r["seed"]: r for r in here if r["method"] == base_name}
            mine = [r for r in mine if r["seed"] in base]
            if not mine:
                continue
            acc = np.array([r["test_acc"] for r in mine])
            diff = np.array([r["test_acc"] - base[r["seed"]]["test_acc"] for r in mine])
            ratio = np.array(
                [r["bytes_per_epoch"] / base[r["seed"]]["bytes_per_epoch"] for r in mine]
            )
            nbytes = float(np.mean([r["bytes_per_epoch"] for r in mine]))
            row = {
                "dataset": dataset,
                "parts": parts,
                "method": name,
                "seeds": len(mine),
                "test_acc": float(acc.mean()),
                "acc_std": float(acc.std()),
                "points_vs_base": float(diff.mean()),
                "bytes_per_epoch": nbytes,
                "bytes_vs_base": float(ratio.mean()),
            }
            for preset in PRESET_NAMES:
                link = PRESETS[preset]
                seconds = nbytes / parts / link.bandwidth + transfers(name, parts) * link.alpha
                row[f"ms_{preset}"] = 1e3 * seconds
            out.append(row)
    return out


def markdown(agg: list[dict]) -> str:
    cols = ["dataset", "P", "method", "seeds", "test acc %", "± std", "pts vs base"]
    cols += ["MB/epoch", "bytes vs base"] + [f"ms/epoch {p}" for p in PRESET_NAMES]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in agg:
        cells = [
            r["dataset"],
            str(r["parts"]),
            r["method"],
            str(r["seeds"]),
            f"{r['test_acc']:.1f}",
            f"{r['acc_std']:.1f}",
            f"{r['points_vs_base']:+.1f}",
            f"{r['bytes_per_epoch'] / 1e6:.2f}",
            f"{r['bytes_vs_base']:.3f}",
        ] + [f"{r[f'ms_{p}']:.3f}" for p in PRESET_NAMES]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def header(args, rows) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    seeds = ", ".join(map(str, sorted({r["seed"] for r in rows})))
    return (
        f"`experiments/composition_table.py`, {now}, {platform.node()} ({os.cpu_count()} CPUs, "
        f"jax {jax.__version__}, emulated CPU mesh). GCN-2, hidden {args.hidden}, dropout "
        f"{args.dropout}, Adam lr 0.01, wd 5e-4, {args.epochs} epochs, METIS parts, seeds "
        f"{seeds}; Sancus Δ_E = 1 after {args.warmup} warm-up epochs; clipping th = "
        f"{args.clip} (parameters), {args.eclip} (embedding-gradient messages). Test accuracy "
        "at the best-validation epoch, mean over seeds (± std); "
        "'pts vs base' and 'bytes vs base' against CAGNET (block-row methods) or Vanilla "
        "(halo-ring methods) of the same seeds; bytes = mesh total per epoch as measured; "
        "ms/epoch = projected communication time (module docstring).\n\n"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "pubmed", "sbm"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    p.add_argument("--methods", nargs="+", default=list(BLOCK + HALO), choices=BLOCK + HALO)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20, help="Sancus warm-up epochs")
    p.add_argument("--clip", type=float, default=0.1, help="sancus-clip's threshold th")
    p.add_argument("--eclip", type=float, default=0.002, help="sancus-eclip's threshold th")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--quick", action="store_true", help="Cora, P=4, seed 0, 30 epochs")
    p.add_argument("--out", type=Path, help="output prefix: <out>.csv and <out>.md")
    p.add_argument("--resume", action="store_true", help="keep the runs in <out>.csv")
    args = p.parse_args(argv)
    if args.quick:
        args.datasets, args.parts, args.seeds, args.epochs, args.warmup = ["cora"], [4], [0], 30, 5
    methods = list(dict.fromkeys(["cagnet", "vanilla", *args.methods]))
    csv_path = args.out.with_name(args.out.name + ".csv") if args.out else None
    rows = []
    if args.resume and csv_path is not None and csv_path.exists():
        rows = read_csv(
            csv_path, ints=("parts", "seed", "best_epoch"), texts=("dataset", "method", "label")
        )
        print(f"resuming: {len(rows)} runs already in {csv_path}", flush=True)
    done = {(r["dataset"], r["parts"], r["seed"], r["method"]) for r in rows}
    graphs = {}
    for dataset in args.datasets:
        for parts in args.parts:
            for seed in args.seeds:
                for name in methods:
                    if (dataset, parts, seed, name) in done:
                        continue
                    if dataset not in graphs:
                        graphs[dataset] = load_graph(data_config(dataset), split=True)
                    row = run_one(args, graphs[dataset], dataset, parts, seed, name)
                    rows.append(row)
                    print(
                        f"{dataset} P={parts} seed {seed} {name} ({row['label']}): acc "
                        f"{row['test_acc']:.1f}, {row['bytes_per_epoch'] / 1e6:.2f} MB/epoch "
                        f"({row['seconds']:.0f} s)",
                        flush=True,
                    )
                    if csv_path:
                        write_csv(rows, csv_path)
                        md = args.out.with_name(args.out.name + ".md")
                        md.write_text(header(args, rows) + markdown(aggregate(rows)) + "\n")
    print(markdown(aggregate(rows)))


if __name__ == "__main__":
    main()
