"""DeepWalk under the ``published`` preset beside the same settings with word2vec's exact update.

``preset("published", "deepwalk")`` is DeepWalk's published corpus (10 rounds of one walk of 80
per node, window 10, d 128, 5 negatives, sub-sampling 1e-3, word2vec's global linear decay from
0.025) trained by :class:`~jaxgraph.embed.skipgram.SkipGramTrainer` with two settings that
change the update:

* ``row_cap = 4``: a row with ``k`` updates in one step moves by ``min(1, 4 / k)`` times their
  sum;
* ``interleave = 8``: a step's batch draws its pairs round-robin from a stretch of 8 steps.

The **word2vec-exact** configuration is the same preset with ``row_cap=None`` (the plain sum
of a step's updates), ``interleave=1`` (a batch is 1,024 consecutive pairs of the walks) and
``shared_negatives=1`` (every pair draws its own negatives; the published preset shares a draw
between 4 pairs since 2026-12-06, after the tables in ``results/presets/``):
the update of word2vec / gensim applied to a batch of pairs at once. Both configurations are
built through the library's API, and both run :func:`jaxgraph.embed.embed` on one device.

Quality is measured with the library's evaluation functions, as ``jaxgraph embed`` does:

* BlogCatalog: node classification, Micro- and Macro-F1 of one-vs-rest logistic regression at
  10 %, 50 % and 90 % training labels (``--shuffles`` random splits each);
* ca-AstroPh: link prediction on a 50 % edge split (seeded by the run's seed), ROC AUC of the
  dot product (the headline) and of the cosine.

The two configurations alternate within a seed (published, exact, then exact, published on
the next seed), so both see the same drift of a shared machine. Outputs (prefix ``--out``):
``.json`` (every run: settings, per-round loss and largest row norm, timings, quality) and
``.md`` (the tables, with machine and date).

    python experiments/preset_compare.py --seeds 0 1 2 \\
        --out experiments/results/presets/preset_compare
    python experiments/preset_compare.py --quick --out /tmp/preset_quick   # a few minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import time

import jax
import numpy as np

from jaxgraph.data import DataConfig, load_graph
from jaxgraph.embed import EmbedConfig, embed
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed.job import preset

from results_io import add_output_args, load_runs, write_runs

RATIOS = (0.1, 0.5, 0.9)
PRESETS = ("published", "word2vec-exact", "word2vec-spread")


def configs(seed: int, *, quick: bool = False) -> dict[str, EmbedConfig]:
    """The configurations of ``seed``: the ``published`` DeepWalk preset; the same with
    word2vec's update (no row cap, no interleaving, per-pair negatives); and the same update
    with each batch drawn from the whole sync period (``interleave=None``)."""
    published = preset("published", "deepwalk").replace(seed=seed)
    if quick:
        walk = dataclasses.replace(published.walk, walk_length=20)
        published = published.replace(rounds=2, walk=walk)
    exact = published.replace(
        sgns=dataclasses.replace(published.sgns, row_cap=None, interleave=1, shared_negatives=1)
    )
    spread = exact.replace(sgns=dataclasses.replace(exact.sgns, interleave=None))
    word2vec = preset("word2vec", "deepwalk")
    assert spread == word2vec.replace(seed=seed, walk=published.walk, rounds=published.rounds)
    return {"published": published, "word2vec-exact": exact, "word2vec-spread": spread}


def quality(syn0: np.ndarray, graph, split, args, seed: int) -> dict[str, float]:
    if split is not None:
        return {f"auc_{s}": ev.link_prediction_auc(split, syn0, s) for s in ("dot", "cosine")}
    nc = ev.node_classification(
        syn0, graph.labels, train_ratios=RATIOS, shuffles=args.shuffles, seed=seed
    )
    return {
        f"{kind}_{ratio}": nc[ratio][kind]["mean"]
        for ratio in RATIOS
        for kind in ("micro", "macro")
    }


def run_one(name: str, cfg: EmbedConfig, dataset: str, graph, split, args) -> dict:
    train_graph = split.train_graph if split is not None else graph
    result = embed(cfg, train_graph)
    t0 = time.perf_counter()
    q = quality(result.syn0, graph, split, args, cfg.seed)
    s = result.summary()
    return {
        "dataset": dataset,
        "preset": name,
        "seed": cfg.seed,
        "seconds": result.seconds,
        "seconds_train": sum(r.seconds_train for r in result.rounds),
        "seconds_compile": result.seconds_compile,
        "seconds_eval": time.perf_counter() - t0,
        "pairs": s["pairs"],
        "pairs_per_s": s["pairs_per_s"],
        "loss_per_pair": [r.loss for r in result.rounds],
        "max_norm": [r.max_norm for r in result.rounds],
        "sgns": dataclasses.asdict(cfg.sgns),
        **q,
    }


def _ms(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{v.mean():.4f}" + (f" ± {v.std():.4f}" if v.size > 1 else "")


def _num(values, fmt: str) -> str:
    v = np.asarray(values, np.float64)
    return format(v.mean(), fmt) + (f" ± {format(v.std(), fmt)}" if v.size > 1 else "")


def tables(rows: list[dict]) -> str:
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        runs = [r for r in rows if r["dataset"] == dataset]
        lp = "auc_dot" in runs[0]
        metrics = (
            [("dot AUC", "auc_dot"), ("cosine AUC", "auc_cosine")]
            if lp
            else [
                (f"{kind.capitalize()}-F1 @{ratio}", f"{kind}_{ratio}")
                for kind in ("micro", "macro")
                for ratio in RATIOS
            ]
        )
        head = "| preset | seeds | train s | loop s | pairs | pairs/s | loss/pair, last round "
        head += "| largest row norm, last round | " + " | ".join(m[0] for m in metrics) + " |"
        lines = [f"**{dataset}**", "", head, "|" + "---|" * (8 + len(metrics))]
        for name in PRESETS:
            mine = [r for r in runs if r["preset"] == name]
            if not mine:
                continue
            lines.append(
                f"| {name} | {len(mine)} "
                f"| {_num([r['seconds_train'] for r in mine], '.1f')} "
                f"| {_num([r['seconds'] for r in mine], '.1f')} "
                f"| {np.mean([r['pairs'] for r in mine]):,.0f} "
                f"| {_num([r['pairs_per_s'] / 1e6 for r in mine], '.2f')}M "
                f"| {_num([r['loss_per_pair'][-1] for r in mine], '.3f')} "
                f"| {_num([r['max_norm'][-1] for r in mine], '.2f')} | "
                + " | ".join(_ms([r[k] for r in mine]) for _, k in metrics)
                + " |"
            )
        pairs = {}
        for r in runs:
            pairs.setdefault(r["seed"], {})[r["preset"]] = r
        a = PRESETS[0]
        for b in PRESETS[1:]:
            paired = [p for p in pairs.values() if a in p and b in p]
            if not paired:
                continue
            diff = [
                f"{label} {_signed([p[b][k] - p[a][k] for p in paired])}" for label, k in metrics
            ]
            speed = [p[b]["pairs_per_s"] / p[a]["pairs_per_s"] for p in paired]
            lines += [
                "",
                f"{b} minus {a}, paired by seed ({len(paired)}): " + ", ".join(diff) + "; "
                f"pairs/s ratio {b}/{a} {_num(speed, '.2f')}.",
            ]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _signed(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{v.mean():+.4f}" + (
        f" (per seed {', '.join(f'{x:+.4f}' for x in v)})" if v.size > 1 else ""
    )


def header(args) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cfg = configs(0, quick=args.quick)["published"]
    s, w = cfg.sgns, cfg.walk
    return (
        f"`experiments/preset_compare.py`{' --quick' if args.quick else ''}, {now}, "
        f"{platform.node()} ({os.cpu_count()} CPUs, jax {jax.__version__}, one CPU device). "
        f"DeepWalk, preset `published`: {cfg.rounds} rounds of {w.walks_per_node} walk of "
        f"{w.walk_length} per node, window {s.window}, d {s.dim}, {s.negatives} negatives, "
        f"sample {s.sample}, lr {s.lr} ({s.lr_schedule} decay), init_scale {s.init_scale}, "
        f"batch {s.batch_size}, row_cap {s.row_cap}, interleave {s.interleave}, "
        f"shared_negatives {s.shared_negatives}, sync_every {s.sync_every}. `word2vec-exact`: "
        "the same with row_cap None, interleave 1, shared_negatives 1; `word2vec-spread`: "
        "row_cap None, interleave None (a batch drawn from the whole sync period), "
        "shared_negatives 1. 'train s' = seconds in the trainer's rounds (what "
        "pairs/s divides by); 'loop s' = the round loop with walks (compilation excluded). "
        f"BlogCatalog: node classification at {', '.join(map(str, RATIOS))} training labels, "
        f"{args.shuffles} shuffles each; ca-AstroPh: link prediction on a 50 % edge split of "
        "the run's seed. Values: mean ± std over seeds.\n\n"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["blogcatalog", "ca-astroph"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--shuffles", type=int, default=5, help="random splits per training ratio")
    p.add_argument("--quick", action="store_true", help="2 rounds of walks of 20, one seed")
    p.add_argument("--configs", nargs="+", default=list(PRESETS), choices=PRESETS)
    add_output_args(p)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds = args.seeds[:1]

    rows = load_runs(args)
    done = {(r["dataset"], r["preset"], r["seed"]) for r in rows}
    for dataset in args.datasets:
        graph = load_graph(DataConfig(name=dataset))
        lp = not ev.label_matrix(graph.labels).any()
        for i, seed in enumerate(args.seeds):
            split = ev.link_prediction_split(graph, 0.5, seed=seed) if lp else None
            cfgs = configs(seed, quick=args.quick)
            order = args.configs if i % 2 == 0 else args.configs[::-1]
            for name in order:
                if (dataset, name, seed) in done:
                    continue
                row = run_one(name, cfgs[name], dataset, graph, split, args)
                rows.append(row)
                keys = ("auc_dot", "auc_cosine") if lp else ("micro_0.5", "macro_0.5")
                print(
                    f"{dataset} seed {seed} {name}: train {row['seconds_train']:.1f} s, "
                    f"{row['pairs_per_s'] / 1e6:.2f}M pairs/s, "
                    + ", ".join(f"{k} {row[k]:.4f}" for k in keys)
                    + f", largest row norm {row['max_norm'][-1]:.2f}",
                    flush=True,
                )
                if args.out:  # rewritten after every run, so a long run keeps what it has
                    write(args, rows)
    print(tables(rows))


def write(args, rows: list[dict]) -> None:
    write_runs(args, rows, header(args) + tables(rows) + "\n")


if __name__ == "__main__":
    main()
