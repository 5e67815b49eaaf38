"""HaSyn's bytes-versus-quality trade-off, paired by seed.

Quality is the dot-product link-prediction AUC on a graph without labels (ca-AstroPh, R-MAT:
embeddings trained on the training half of the edges) or node classification Micro-F1 at a 50 %
training ratio on a labelled graph (BlogCatalog). For every seed, which fixes the edge split, the
walks and the trainer's draws, the script runs AllSync (every row merged at every sync) and, for
every setting of ``--counts`` x ``--full-every`` x ``--rows``, HaSyn and RandomSync (as many
rows, drawn uniformly). ``--rows 0`` is the seed's rule (one row per block of equal count);
``--rows M`` merges the ``M`` hottest rows per sync. Every run is FeLoG's configuration of
``felog_table.py`` (device pairs, FaBC, the deterministic one-round pipeline); only the table
sync differs. Reported per setting: sync bytes as a share of AllSync's, and the quality
difference to AllSync's run of the same seed in points (mean, standard deviation, and the seeds
within one point).

    PYTHONPATH=experiments python experiments/hasyn_sweep.py --seeds 0 1 2 \
        --counts round pending --full-every 0 --rows 0 1280 --out experiments/results

Writes ``<stem>.json`` (every run) and ``<stem>.md`` (the summary table).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from pathlib import Path

import numpy as np
from embed_table import VARIANTS, add_run_arguments, emulate_devices_for
from felog_table import felog_config

from jaxgraph.data import load_graph, rmat
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed.run import EmbedConfig, atomic_write_bytes, embed, save_json
from jaxgraph.embed.sync import HotspotSync, RandomSync, sync_bytes
from jaxgraph.mesh import make_mesh

from results_io import sync_rows_arg  # noqa: E402

ALLSYNC = ("AllSync", None, None, None)  # a run's key: (seed, *ALLSYNC) for the baseline


def sweep_config(args, seed, rounds):
    """``felog_table.py``'s FeLoG configuration with AllSync, for ``seed`` and ``rounds``."""
    return felog_config(argparse.Namespace(**{**vars(args), "seed": seed})).replace(rounds=rounds)


def run_one(train, score, cfg, mesh, dim):
    t0 = time.perf_counter()
    res = embed(cfg.replace(parts=mesh.size), train, mesh=mesh)
    rows = sum(r.sync_rows for r in res.rounds)
    return {
        "quality": score(res.syn0),
        "sync_bytes": sync_bytes(rows, dim),
        "syncs": sum(r.syncs for r in res.rounds),
        "seconds": time.perf_counter() - t0,
    }


def summarize(runs, settings, seeds) -> list[dict]:
    """Per (setting, method): bytes share and paired quality differences against AllSync."""
    out = []
    for (counts, full_every, num_rows), method in itertools.product(
        settings, ("HaSyn", "RandomSync")
    ):
        share, diff = [], []
        for s in seeds:
            base = runs[(s, *ALLSYNC)]
            r = runs[(s, method, counts, full_every, num_rows)]
            share.append(r["sync_bytes"] / base["sync_bytes"])
            diff.append(100 * (r["quality"] - base["quality"]))
        diff = np.asarray(diff)
        out.append(
            {
                "counts": counts,
                "full_every": full_every,
                "rows": num_rows,
                "method": method,
                "bytes_share": float(np.mean(share)),
                "bytes_share_max": float(np.max(share)),
                "diff_mean": float(diff.mean()),
                "diff_std": float(diff.std(ddof=1)) if diff.size > 1 else 0.0,
                "within_1pt": int((diff >= -1.0).sum()),
                "seeds": len(seeds),
            }
        )
    return out


def markdown(args, runs, summary, seeds, metric) -> str:
    base = [runs[(s, *ALLSYNC)]["quality"] for s in seeds]
    spread = f" ± {np.std(base, ddof=1):.4f}" if len(seeds) > 1 else ""
    lines = [
        f"# HaSyn sweep: {args.dataset}",
        "",
        f"AllSync {metric}: {np.mean(base):.4f}{spread} over seeds {seeds}.",
        "",
        "| hotness counts | full merge every | rows per sync | method | sync bytes / AllSync | "
        f"{metric} − AllSync (points, mean ± std) | seeds within 1 point |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for row in summary:
        every = row["full_every"] or "round end only"
        rows = row["rows"] or "one per block"
        lines.append(
            f"| {row['counts']} | {every} | {rows} | {row['method']} | "
            f"{100 * row['bytes_share']:.1f} % "
            f"(max {100 * row['bytes_share_max']:.1f} %) | {row['diff_mean']:+.2f} ± "
            f"{row['diff_std']:.2f} | {row['within_1pt']} / {row['seeds']} |"
        )
    lines += ["", f"Settings: `{vars(args)}`", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(ap)
    ap.add_argument("--dataset", default="ca-astroph", help="a bundled dataset, sbm or rmat")
    ap.add_argument("--nodes", type=int, default=2000, help="nodes of --dataset sbm")
    ap.add_argument("--rmat-scale", type=int, default=20, help="--dataset rmat: 2^scale nodes")
    ap.add_argument(
        "--task",
        choices=("auto", "lp", "nc"),
        default="auto",
        help="lp: link-prediction AUC; nc: node classification F1; auto: nc on labelled graphs",
    )
    ap.add_argument("--parts", type=int, default=2, help="data-parallel replicas")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--feedback", default="felog", choices=sorted(VARIANTS))
    ap.add_argument(
        "--counts", nargs="+", choices=("total", "round", "pending"), default=["pending"]
    )
    ap.add_argument(
        "--full-every",
        type=int,
        nargs="+",
        default=[0],
        help="periodic syncs between full merges (0: only the round-end merge)",
    )
    ap.add_argument(
        "--rows",
        type=sync_rows_arg,
        nargs="+",
        default=[0],
        help="HaSyn rows per sync: the M hottest, or that share of the nodes if below 1 (0: one "
        "per block of equal count)",
    )
    ap.add_argument("--out", default="experiments/results")
    ap.add_argument("--stem", default="hasyn_sweep")
    args = ap.parse_args()
    if min(args.rounds, args.lp_rounds) < 1:
        raise SystemExit(f"rounds must be >= 1, got {args.rounds} / {args.lp_rounds}")
    emulate_devices_for(args.parts)
    mesh = make_mesh(args.parts)
    if args.dataset == "rmat":
        g = rmat(scale=args.rmat_scale, seed=0, name=f"rmat_2^{args.rmat_scale}")
    else:
        data = EmbedConfig().data
        g = load_graph(dataclasses.replace(data, name=args.dataset, num_nodes=args.nodes))
    settings = list(itertools.product(args.counts, args.full_every, args.rows))
    runs = {}
    classify = g.labels is not None and bool(ev.label_matrix(g.labels).any())
    if args.task == "nc" and not classify:
        raise SystemExit(f"--task nc needs node labels; {args.dataset} has none")
    classify = classify and args.task != "lp"
    metric = "Micro-F1 (50 %)" if classify else "AUC (dot)"
    for seed in args.seeds:
        if classify:
            train = g

            def score(syn0, seed=seed):
                nc = ev.node_classification(
                    syn0, g.labels, train_ratios=(0.5,), shuffles=args.shuffles, seed=seed
                )
                return float(nc[0.5]["micro"]["mean"])
        else:
            split = ev.link_prediction_split(g, 0.5, seed=seed)
            train = split.train_graph

            def score(syn0, split=split):
                return float(ev.link_prediction_auc(split, syn0, "dot"))

        cfg = sweep_config(args, seed, args.rounds if classify else args.lp_rounds)
        if seed == args.seeds[0]:  # compile outside the recorded runs
            embed(cfg.replace(parts=mesh.size), train, mesh=mesh)
        runs[(seed, *ALLSYNC)] = run_one(train, score, cfg, mesh, args.dim)
        for counts, full_every, num_rows in settings:
            options = {
                "counts": counts,
                "full_every": full_every or None,
                "num_rows": num_rows or None,
            }
            for method, sync in (("HaSyn", HotspotSync), ("RandomSync", RandomSync)):
                r = run_one(train, score, cfg.replace(sync=sync(**options)), mesh, args.dim)
                runs[(seed, method, counts, full_every, num_rows)] = r
        for key, r in runs.items():
            if key[0] == seed:
                print(
                    f"seed {seed} {key[1:]}: {metric} {r['quality']:.4f}, "
                    f"sync {r['sync_bytes'] / 2**20:.1f} MB in {r['syncs']} syncs, "
                    f"{r['seconds']:.1f} s",
                    flush=True,
                )
    summary = summarize(runs, settings, args.seeds)
    out = Path(args.out)
    save_json(
        out / f"{args.stem}.json",
        {
            "args": vars(args),
            "metric": metric,
            "summary": summary,
            "runs": [{"key": list(k), **v} for k, v in runs.items()],
        },
    )
    text = markdown(args, runs, summary, args.seeds, metric)
    atomic_write_bytes(out / f"{args.stem}.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()
