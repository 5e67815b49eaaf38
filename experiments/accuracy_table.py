"""Test accuracy of distributed GCN training against single-device training.

Standard GCN hyper-parameters (Kipf & Welling, 2017): 2 layers, hidden 16, dropout 0.5, Adam
lr 0.01, weight decay 5e-4, 200 epochs; test accuracy at the best-validation epoch, mean ± std
over seeds, for P = 1 and P = 8 (METIS) on the emulated CPU mesh. Writes a Markdown table.

    python experiments/accuracy_table.py --out experiments/results/gcn_accuracy.md
"""

from __future__ import annotations

import argparse
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from jaxgraph.train import DataConfig, ModelConfig, OptimConfig, TrainConfig, train  # noqa: E402


def run(dataset: str, parts: int, seed: int, epochs: int, hidden: int) -> dict:
    cfg = TrainConfig(
        data=DataConfig(name=dataset, seed=0),  # Cora's split is fixed across model seeds
        model=ModelConfig(name="gcn", hidden=hidden, num_layers=2, dropout=0.5),
        optim=OptimConfig(learning_rate=0.01, weight_decay=5e-4),
        parts=parts,
        partition="metis",
        epochs=epochs,
        seed=seed,
        progress=False,
    )
    return train(cfg)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "pubmed"])
    p.add_argument("--parts", nargs="+", type=int, default=[1, 8])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--out", type=Path)
    p.add_argument("--quick", action="store_true", help="Cora, P 1 and 8, one seed, 30 epochs")
    args = p.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds, args.epochs = ["cora"], [0], 30

    rows = [
        "| dataset | P | test accuracy (mean ± std) | per seed | median epoch time (s) |",
        "|---|---|---|---|---|",
    ]
    for dataset in args.datasets:
        for parts in args.parts:
            accs, times = [], []
            t0 = time.perf_counter()
            for seed in args.seeds:
                s = run(dataset, parts, seed, args.epochs, args.hidden)
                accs.append(100 * s["test_at_best"])
                times.append(s["median_epoch_time"])
            std = statistics.stdev(accs) if len(accs) > 1 else 0.0
            row = (
                f"| {dataset} | {parts} | {statistics.mean(accs):.1f} ± {std:.1f} | "
                f"{', '.join(f'{a:.1f}' for a in accs)} | {statistics.median(times):.3f} |"
            )
            rows.append(row)
            print(row, f"({time.perf_counter() - t0:.0f} s)", flush=True)
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"GCN, 2 layers, hidden {args.hidden}, dropout 0.5, Adam lr 0.01, wd 5e-4, "
            f"{args.epochs} epochs, test accuracy at the best-validation epoch, seeds "
            f"{args.seeds}, METIS parts, emulated CPU mesh.\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
