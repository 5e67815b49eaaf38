"""Accuracy, bytes and epoch time of quantized halo exchange against full precision.

For every dataset, model, part count and seed, trains Vanilla (fp32 exchange) and the quantized
methods (uniform 8/4/2-bit, random widths per message) with the same hyper-parameters and
prints test accuracy at the best-validation epoch (mean ± std over seeds), bytes moved per
epoch relative to Vanilla, and the median epoch time on the emulated CPU mesh.

    python experiments/quant_table.py --out experiments/results/quant_table.md
    python experiments/quant_table.py --datasets cora --models gcn --parts 8 --seeds 0 1 2
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

METHODS = ("vanilla", "quant-8", "quant-4", "quant-2", "quant-random")


def data_config(name: str) -> DataConfig:
    if name == "sbm":
        return DataConfig(
            name="sbm", num_nodes=10_000, avg_degree=10, num_features=64, num_classes=5
        )
    return DataConfig(name=name)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "pubmed", "sbm"])
    p.add_argument("--models", nargs="+", default=["gcn", "sage"])
    p.add_argument("--parts", nargs="+", type=int, default=[4, 8])
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    rows = [
        "| dataset | model | P | method | test acc (mean ± std) | bytes/epoch vs vanilla "
        "| median epoch time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset in args.datasets:
        for model in args.models:
            for parts in args.parts:
                base_bytes = None
                for method in args.methods:
                    accs, times, nbytes = [], [], 0.0
                    t0 = time.perf_counter()
                    for seed in args.seeds:
                        cfg = TrainConfig(
                            data=data_config(dataset),
                            model=ModelConfig(name=model, hidden=args.hidden, dropout=0.5),
                            optim=OptimConfig(learning_rate=0.01, weight_decay=5e-4),
                            parts=parts,
                            method=method,
                            epochs=args.epochs,
                            seed=seed,
                            progress=False,
                        )
                        s = train(cfg)
                        accs.append(100 * s["test_at_best"])
                        times.append(s["median_epoch_time"])
                        nbytes += s["bytes_per_epoch"] / len(args.seeds)
                    if method == "vanilla":
                        base_bytes = nbytes
                    ratio = f"{nbytes / base_bytes:.3f}" if base_bytes else "n/a"
                    std = statistics.stdev(accs) if len(accs) > 1 else 0.0
                    row = (
                        f"| {dataset} | {model} | {parts} | {method} | "
                        f"{statistics.mean(accs):.1f} ± {std:.1f} | {ratio} | "
                        f"{statistics.median(times):.3f} |"
                    )
                    rows.append(row)
                    print(row, f"({time.perf_counter() - t0:.0f} s)", flush=True)
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"Hidden {args.hidden}, dropout 0.5, Adam lr 0.01, wd 5e-4, {args.epochs} epochs, "
            f"METIS parts, seeds {args.seeds}; test accuracy at the best-validation epoch; "
            "bytes = halo exchange bytes per training epoch over the whole mesh (padded "
            f"payloads), relative to Vanilla.\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
