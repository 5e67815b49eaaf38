"""Gradient error of adaptive bit-widths against random and uniform widths at the same parameters.

Accuracy after 200 epochs hardly separates the quantized methods on small graphs (even uniform
2-bit messages lose little), so this measures what the bit-width program optimizes: the error
that stochastic quantization of the halo exchange adds to the gradient.

For each dataset and model, ``adaqp`` trains on the mesh (dropout 0, so the gradient depends
on the parameters and the quantization key only) and, right after each of its first
``--solves`` assignments, freezes the parameters and computes:

* the exact gradient ``g`` (fp32 exchange, Vanilla);
* for every method (the fresh ``adaqp`` assignment; ``adaqp squares``, the same traces solved
  with each message weighed by the seed's ``beta_k``, the sum of squares of its aggregation
  coefficients, instead of the square of their sum; ``quant-random``'s draw for the same
  period; uniform 2/4/8 bits) the gradients ``g_k`` of ``--keys`` quantization keys.

It reports the relative error ``E_k ||g_k - g||^2 / ||g||^2`` (mean over keys, and its
standard error), the bias ``||mean_k g_k - g||^2 / ||g||^2`` against the error's share
``1 / K`` that an unbiased quantizer leaves in a ``K``-key mean, and the halo bytes one
training step moves under each assignment (exact layout, what the collectives carry),
relative to Vanilla, and the step's communication time projected under 10GbE (the program's
time model: per ring round the slowest channel), relative to Vanilla's.

    python experiments/adaqp_gradient_error.py --out experiments/results/adaqp_gradient_error
    python experiments/adaqp_gradient_error.py --datasets cora --models gcn --keys 8 --quick
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

import jax  # noqa: E402
import numpy as np  # noqa: E402
from adaqp_table import data_config  # noqa: E402

from jaxgraph.comm.adaptive import AssignConfig  # noqa: E402
from jaxgraph.comm.adaqp import AdaQP  # noqa: E402
from jaxgraph.comm.costmodel import CostModel  # noqa: E402
from jaxgraph.comm.method import RunInfo  # noqa: E402
from jaxgraph.comm.projection import projected_comm_time  # noqa: E402
from jaxgraph.comm.quantized import Quantized  # noqa: E402
from jaxgraph.comm.strategy import Vanilla  # noqa: E402
from jaxgraph.comm.wirebytes import byte_report  # noqa: E402
from jaxgraph.mesh import make_mesh, to_host  # noqa: E402
from jaxgraph.models import make_model  # noqa: E402
from jaxgraph.partition import build_halo_plan, partition_graph  # noqa: E402
from jaxgraph.partition.buckets import BitAssignment  # noqa: E402
from jaxgraph.partition.shard import GraphShard
from jaxgraph.train import OptimConfig  # noqa: E402
from jaxgraph.train.loop import load_graph, make_optimizer  # noqa: E402
from jaxgraph.train.state import Trainer  # noqa: E402

from results_io import write_csv  # noqa: E402

FIXED = (2, 4, 8)


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in jax.tree.leaves(tree)])


def _step_bytes(plan, assignment: BitAssignment, dims) -> int:
    return sum(v["moved"] for v in byte_report(plan, assignment, dims).values())


class Setup:
    """Graph, plan, mesh and one trainer per strategy, sharing the model and the shards."""

    def __init__(self, dataset: str, model_name: str, parts: int, hidden: int, seed: int):
        self.graph = load_graph(data_config(dataset, seed))
        self.plan = build_halo_plan(
            self.graph,
            partition_graph(self.graph, parts, method="metis", seed=seed),
            num_parts=parts,
        )
        self.mesh = make_mesh(parts)
        self.model = make_model(
            model_name, hidden=hidden, out_dim=self.graph.num_classes, num_layers=2, dropout=0.0
        )
        self.dims = self.model.layer_input_dims(self.graph.num_features)
        self.tx = make_optimizer(OptimConfig(learning_rate=0.01, weight_decay=5e-4))
        self.num_train = int(self.graph.train_mask.sum())
        self.shards = None

    def trainer(self, strategy) -> Trainer:
        t = Trainer(self.model, self.tx, strategy, self.mesh, num_train=self.num_train)
        if self.shards is None:
            self.shards = t.place_shards(GraphShard.from_plan(self.graph, self.plan))
        return t


def _step_seconds(setup: Setup, assignment: BitAssignment) -> float:
    cost = CostModel.from_preset("10gbe", setup.plan.num_parts)
    return sum(projected_comm_time(setup.plan, assignment, setup.dims, cost).values())


def measure(setup: Setup, state, methods: dict, keys: int, exact: np.ndarray) -> list[dict]:
    """Relative gradient error of every ``(trainer, comm_state, assignment)`` in ``methods``."""
    rows = []
    norm2 = float(exact @ exact)
    vanilla = BitAssignment.uniform(setup.plan, 2, 32)
    vanilla_bytes = _step_bytes(setup.plan, vanilla, setup.dims)
    vanilla_seconds = _step_seconds(setup, vanilla)
    for name, (trainer, comm_state, assignment) in methods.items():
        base = state.replace(comm_state=trainer.place_comm_state(comm_state))
        grads = []
        for k in range(keys):
            _, g = trainer.loss_and_grads(base.replace(rng=jax.random.key(1000 + k)), setup.shards)
            grads.append(_flat(g))
        grads = np.stack(grads)
        err = np.sum((grads - exact) ** 2, axis=1) / norm2
        bias = float(np.sum((grads.mean(axis=0) - exact) ** 2) / norm2)
        rows.append(
            {
                "method": name,
                "rel_error": float(err.mean()),
                "rel_error_se": float(err.std(ddof=1) / np.sqrt(keys)),
                "mean_bias": bias,
                "unbiased_share": float(err.mean() / keys),
                "bytes_vs_vanilla": _step_bytes(setup.plan, assignment, setup.dims) / vanilla_bytes,
                "proj_10gbe_vs_vanilla": _step_seconds(setup, assignment) / vanilla_seconds,
            }
        )
    return rows


def run(
    dataset, model_name, parts, *, hidden, period, solves, keys, lam, extra_lams, seed
) -> list[dict]:
    setup = Setup(dataset, model_name, parts, hidden, seed)
    plan, dims = setup.plan, setup.dims
    run_info = RunInfo(seed=seed, model=model_name)
    adaptive = AdaQP(AssignConfig(lam=lam), period=period, chunks=0)
    controller = adaptive.controller(plan, dims, run=run_info)
    random = Quantized("random", period=period, chunks=0)
    random_widths = random.controller(plan, dims, run=run_info)
    t_ada, t_van = setup.trainer(adaptive), setup.trainer(Vanilla())
    trainers = {"random": setup.trainer(random)}
    trainers.update({f"{b}-bit": setup.trainer(Quantized(b)) for b in FIXED})
    state = t_ada.create_state(
        jax.random.key(seed), setup.graph.num_features, controller.init_state()
    )
    rows = []
    others = {
        x: AdaQP(AssignConfig(lam=x), period=period, chunks=0).controller(plan, dims, run=run_info)
        for x in extra_lams
    }
    squares = AdaQP(AssignConfig(lam=lam), period=period, chunks=0, score="squares")
    squares = squares.controller(plan, dims, run=run_info)
    for epoch in range(1, period * solves + 2):
        before = state.comm_state
        new = controller.update(before, epoch=epoch)
        if new is not None:
            traces, current = jax.tree.map(to_host, (before.trace, before.bits))  # solved on
            state = state.replace(comm_state=t_ada.place_comm_state(new))
            index = (epoch - 1) // period
            t0 = time.perf_counter()
            _, g = t_van.loss_and_grads(
                state.replace(comm_state=t_van.place_comm_state({})), setup.shards
            )
            ada_assignment = new.bits
            rnd_assignment = random.assignment(plan, len(dims), period_index=index, seed=seed)
            methods = {
                "adaqp": (t_ada, new, ada_assignment),
                "random": (
                    trainers["random"],
                    random_widths.init_state(epoch=epoch),
                    rnd_assignment,
                ),
            }
            for x, other in others.items():  # the same traces, solved with another λ
                a, _ = other.solve(traces, current)
                methods[f"adaqp λ{x}"] = (t_ada, controller.state_of(a), a)
            # The same traces, each message weighed by the seed's beta_k (sum of squares).
            a, _ = squares.solve(traces, current)
            methods["adaqp squares"] = (t_ada, controller.state_of(a), a)
            for b in FIXED:
                fixed = Quantized(b)
                methods[f"{b}-bit"] = (
                    trainers[f"{b}-bit"],
                    fixed.init_state(plan, dims),
                    BitAssignment.uniform(plan, len(dims), b),
                )
            for row in measure(setup, state, methods, keys, _flat(g)):
                row.update(
                    dataset=setup.graph.name,
                    model=model_name,
                    parts=parts,
                    seed=seed,
                    epoch=epoch,
                    lam=lam,
                )
                rows.append(row)
                print(
                    f"{setup.graph.name} {model_name} P={parts} epoch {epoch} "
                    f"{row['method']:>11}: rel err {row['rel_error']:.3e} "
                    f"± {row['rel_error_se']:.1e}, bias {row['mean_bias']:.2e} "
                    f"(1/K share {row['unbiased_share']:.2e}), "
                    f"bytes {row['bytes_vs_vanilla']:.3f}, "
                    f"10GbE time {row['proj_10gbe_vs_vanilla']:.3f}",
                    flush=True,
                )
            print(f"  measured in {time.perf_counter() - t0:.1f} s", flush=True)
        state, _ = t_ada.train_step(state, setup.shards)
    return rows


def markdown(rows: list[dict]) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = [
        "| dataset | model | P | " + " | ".join(methods) + " |",
        "|---|---|---|" + "---|" * len(methods),
    ]
    cells = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["model"], r["parts"]), {}).setdefault(
            r["method"], []
        ).append(r)
    for (ds, model, parts), by_method in cells.items():
        out = []
        for m in methods:
            rs = by_method.get(m, [])
            if not rs:
                out.append("")
                continue
            err = statistics.fmean(r["rel_error"] for r in rs)
            nbytes = statistics.fmean(r["bytes_vs_vanilla"] for r in rs)
            seconds = statistics.fmean(r["proj_10gbe_vs_vanilla"] for r in rs)
            out.append(f"{err:.2e} ({nbytes:.3f} / {seconds:.3f})")
        lines.append(f"| {ds} | {model} | {parts} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer", "pubmed", "sbm"])
    p.add_argument("--models", nargs="+", default=["gcn", "sage"])
    p.add_argument("--parts", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--period", type=int, default=40, help="epochs per assignment period")
    p.add_argument("--solves", type=int, default=2, help="assignments measured per run")
    p.add_argument("--keys", type=int, default=32, help="quantization keys per gradient")
    p.add_argument("--lam", type=float, default=AssignConfig().lam, help="λ of the adaqp run")
    p.add_argument(
        "--extra-lams",
        nargs="*",
        type=float,
        default=[0.9, 0.99],
        help="also solve the same traces with these λ and measure their assignments",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="output prefix: <out>.csv, <out>.md")
    p.add_argument("--quick", action="store_true", help="Cora, GCN, period 5, one solve, 8 keys")
    args = p.parse_args(argv)
    if args.quick:
        args.datasets, args.models = ["cora"], ["gcn"]
        args.period, args.solves, args.keys = 5, 1, 8
    rows = []
    for dataset in args.datasets:
        for model in args.models:
            rows += run(
                dataset,
                model,
                args.parts,
                hidden=args.hidden,
                period=args.period,
                solves=args.solves,
                keys=args.keys,
                lam=args.lam,
                extra_lams=args.extra_lams,
                seed=args.seed,
            )
    table = markdown(rows)
    print(table)
    if args.out:
        write_csv(rows, args.out.with_suffix(".csv"))
        args.out.with_suffix(".md").write_text(
            f"Relative gradient error E||g_k - g||^2 / ||g||^2 over {args.keys} quantization "
            f"keys at the parameters of an adaqp run right after each of its first "
            f"{args.solves} assignments (period {args.period} epochs, λ {args.lam}, dropout 0, "
            f"hidden {args.hidden}, seed {args.seed}), mean over those points; in parentheses "
            "the halo bytes of one training step (exact layout) / its communication time "
            "projected under 10GbE (the program's time model: per ring round the slowest "
            "channel), both relative to Vanilla.\n\n"
            f"{table}\n"
        )


if __name__ == "__main__":
    main()
