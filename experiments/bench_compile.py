"""Compile cost of the training step per communication method, against Vanilla's.

A new bit assignment (``quant-random``, ``adaqp``) compiles a new step, so the step's compile
time is part of every re-assignment's overhead. For each method this lowers and compiles the
train step of one configuration (default: Cora, GCN, P = 8, METIS) and reports the seconds
spent tracing/lowering and compiling, the size of the optimized program (HLO lines, kernels =
fusions, collective-permutes) and the ratio to Vanilla's compile time, measured in the same run.

    python experiments/bench_compile.py
    python experiments/bench_compile.py --dataset pubmed --model sage --methods vanilla quant-8
"""

from __future__ import annotations

import argparse
import json
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import time  # noqa: E402

import jax  # noqa: E402

from jaxgraph.train import (  # noqa: E402
    DataConfig,
    ModelConfig,
    TrainConfig,
    build_run,
    load_graph,
    parse_method,
)


def exact_layout(method: str):
    """The method spelled ``method`` with exact exchange buffers (``chunks = 0``: a step per
    assignment, whose compile time is then part of every re-assignment) where it has a
    layout choice (``quant-random``, ``adaqp``)."""
    m = parse_method(method)
    return m.replace(chunks=0) if "chunks" in m.options() else m


def measure(config: TrainConfig, graph, method: str) -> dict:
    run = build_run(config.replace(method=exact_layout(method)), graph)
    trainer, shards, state = run.trainer, run.shards, run.state
    t0 = time.perf_counter()
    lowered = trainer.train_step.lower(state, shards)
    t1 = time.perf_counter()
    text = lowered.compile().as_text()
    t2 = time.perf_counter()
    return {
        "method": method,
        "lower_s": t1 - t0,
        "compile_s": t2 - t1,
        "hlo_lines": text.count("\n"),
        "kernels": text.count(" fusion("),
        "collective_permutes": text.count(" collective-permute("),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--model", default="gcn")
    p.add_argument("--parts", type=int, default=8)
    p.add_argument(
        "--methods", nargs="+", default=["vanilla", "quant-8", "quant-4", "quant-random", "adaqp"]
    )
    p.add_argument("--json", action="store_true", help="also print one JSON object per method")
    p.add_argument("--quick", action="store_true", help="vanilla and quant-random only")
    args = p.parse_args(argv)
    methods = ["vanilla", "quant-random"] if args.quick else list(args.methods)
    if "vanilla" not in methods:
        methods.insert(0, "vanilla")  # the baseline
    data = DataConfig(name=args.dataset)
    graph = load_graph(data)
    config = TrainConfig(
        data=data,
        model=ModelConfig(name=args.model, hidden=64, dropout=0.5),
        parts=args.parts,
        partition="metis",
        seed=0,
        progress=False,
    )
    print(
        f"{graph.name}, {args.model}, P = {args.parts}, jax {jax.__version__} "
        f"({jax.default_backend()})"
    )
    rows = [measure(config, graph, m) for m in methods]
    base = next(r for r in rows if r["method"] == "vanilla")["compile_s"]
    print(
        f"{'method':<14}{'lower (s)':>10}{'compile (s)':>12}{'x vanilla':>10}"
        f"{'HLO lines':>11}{'kernels':>9}{'c-permutes':>11}"
    )
    for r in rows:
        print(
            f"{r['method']:<14}{r['lower_s']:>10.2f}{r['compile_s']:>12.2f}"
            f"{r['compile_s'] / base:>10.2f}{r['hlo_lines']:>11}{r['kernels']:>9}"
            f"{r['collective_permutes']:>11}"
        )
        if args.json:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
