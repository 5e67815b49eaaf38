"""The FeLoG system table: end-to-end time, bytes and quality of FeLoG, the DeepWalk baseline
and one ablation per FeLoG component.

Rows (every run on the same walker, trainer and learning-rate schedule):

* ``deepwalk``: feedback off, raw corpus, skip-gram pairs built on the host and moved to the
  devices (word2vec's data path), full-table sync, sequential loop.
* ``felog``: FeeST (active set), FaBC (compressed corpus, decoded on the device, where the
  skip-gram pairs are built: only the compressed corpus and 8 bytes per walk cross), HaSyn
  (hotspot sync) and RiPP (``deterministic`` pipeline, lag 1).
* ``-FeeST`` / ``-FaBC`` / ``-HaSyn`` / ``-RiPP``: ``felog`` without that component (``-FaBC``
  moves the raw walks, still building the pairs on the device; ``-RiPP``
  runs the sequential schedule with the same lag, so its embeddings equal ``felog``'s and only
  the time differs).
* ``gensim``: the baseline's walks trained by gensim's ``Word2Vec`` on the host (optional: only
  when gensim is installed), for the time-to-quality comparison with a tuned CPU trainer.

Columns: time (round loop, compilation excluded), speed-up over ``deepwalk``, tokens, bytes
host -> device for training (the corpus, compressed when FaBC is on, plus the trainer's input:
pair buffers of 12 bytes per pair slot, or walk rows, lengths and stream ids), beside the raw
corpus ``4 T``, bytes one replica all-reduces in syncs, busy fractions of the round loop from
the per-operator trace (host stages: walk, encode, corpus checkpoint; trainer stages: decode,
train, where "train" includes the host pair generation of ``deepwalk``, so it is not device
time alone), and quality:
Micro/Macro-F1 at 50 % labelled (BlogCatalog), link-prediction AUC (dot product) on a 50 % edge
split (ca-AstroPh, R-MAT).

Writes ``felog_table.md``, ``felog_table.json`` and ``felog_utilization.png`` (host/device busy
fraction over time of ``felog`` and ``-RiPP`` on BlogCatalog) to ``--out``.

CPU-sized (2 cores)::

    python experiments/felog_table.py --quick        # a few minutes
    python experiments/felog_table.py                # 10 rounds on BlogCatalog, 6 on ca-AstroPh
    python experiments/felog_table.py --datasets rmat --rmat-scale 20 --walk-length 10 \
        --window 2 --dim 32 --lp-rounds 2 --stem felog_rmat   # 2^20 nodes
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
from embed_table import (  # shared settings
    VARIANTS,
    _configs,
    add_run_arguments,
    against_baseline,
    emulate_devices_for,
    gensim_row,
    quality_curve,
    reach_cell,
    round_series,
    time_to_quality,
)

from jaxgraph.data import load_dataset, rmat
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed.codec import FabcConfig
from jaxgraph.embed.pipeline import DEVICE_OPS, HOST_OPS, PipelineConfig, busy_fractions
from jaxgraph.embed.run import atomic_write_bytes, embed, save_json
from jaxgraph.embed.sync import HotspotSync, RandomSync, sync_bytes
from jaxgraph.mesh import make_mesh

from results_io import sync_rows_arg  # noqa: E402

RIPP = PipelineConfig("deterministic", lag=1)


def felog_config(args, base=None):
    """FeLoG's configuration (device pairs, FaBC, the deterministic one-round pipeline, the
    ``--feedback`` rule) with AllSync, on top of ``base`` (default: the DeepWalk row's)."""
    if base is None:
        base = _configs(argparse.Namespace(**{**vars(args), "variants": []}))["deepwalk"]
    return base.replace(
        method="felog",
        feedback=VARIANTS[args.feedback],
        sgns=dataclasses.replace(base.sgns, pairs="device"),
        compress=FabcConfig(),
        sync=None,
        pipeline=RIPP,
    )


def variants(args):
    """``{row name: EmbedConfig}``."""
    base = _configs(argparse.Namespace(**{**vars(args), "variants": []}))["deepwalk"]
    # Every row trains with the JAX program (FeLoG's pairs are built on the devices), so the
    # baseline moves its host-built pairs to the devices as word2vec's data path does.
    base = base.replace(sgns=dataclasses.replace(base.sgns, kernel="jax"))
    felog = felog_config(args, base).replace(sync=HotspotSync(**sync_options(args)))
    return {
        "deepwalk": base,
        "felog": felog,
        "-FeeST": felog.replace(method="deepwalk"),
        "-FaBC": felog.replace(compress=None),
        "-HaSyn": felog.replace(sync=None),
        "RandomSync": felog.replace(sync=RandomSync(**sync_options(args))),
        "-RiPP": felog.replace(pipeline=PipelineConfig("sequential", lag=1)),
    }


def sync_options(args) -> dict:
    """HaSyn's (and RandomSync's) settings from the command line."""
    return {
        "counts": args.hasyn_counts,
        "full_every": args.full_every or None,
        "num_rows": args.sync_rows or None,
    }


def _row(name, res, dim):
    summary = res.summary()
    return {
        "method": name,
        **summary,
        "bytes_host_to_device": summary["host_to_device_bytes"],
        "bytes_raw": 4 * res.tokens,
        "bytes_sync": sync_bytes(sum(r.sync_rows for r in res.rounds), dim),
        "busy_host": busy_fractions(res.trace, HOST_OPS),
        "busy_device": busy_fractions(res.trace, DEVICE_OPS),
        "active_per_round": [r.active for r in res.rounds],
        "seconds_per_op": {
            op: sum(s.end - s.start for s in res.trace if s.op == op)
            for op in sorted({s.op for s in res.trace})
        },
    }


def run_dataset(name, args, mesh, rounds, results, traces):
    g = (
        rmat(scale=args.rmat_scale, seed=0, name=f"rmat_2^{args.rmat_scale}")
        if name == "rmat"
        else load_dataset(name)
    )
    split = None
    train = g
    if name in ("ca-astroph", "rmat"):  # link prediction
        split = ev.link_prediction_split(g, 0.5, seed=args.seed)
        train = split.train_graph
    print(f"\n== {name} ({g.num_nodes} nodes, {g.num_edges // 2} edges), {rounds} rounds")
    rows = []
    configs = variants(args)
    # Warm-up: numba kernels, the decode kernel, the planned syncs and the device-pair programs
    # (one per walk-row size class, and the active set shrinks) compile on first use; a full
    # untimed FeLoG run meets every size class the timed rows will.
    embed(configs["felog"].replace(rounds=rounds, parts=mesh.size), train, mesh=mesh)
    embed(configs["-FaBC"].replace(rounds=1, parts=mesh.size), train, mesh=mesh)

    def evaluate(row, syn0):
        if split is not None:
            row["auc"] = ev.link_prediction_auc(split, syn0, "dot")
            return row["auc"]
        nc = ev.node_classification(
            syn0, g.labels, train_ratios=(0.5,), shuffles=args.shuffles, seed=args.seed
        )
        row["micro_f1"], row["macro_f1"] = nc[0.5]["micro"]["mean"], nc[0.5]["macro"]["mean"]
        return row["micro_f1"]

    runs = {}
    for row_name, cfg in configs.items():
        res = embed(
            cfg.replace(rounds=rounds, parts=mesh.size),
            train,
            mesh=mesh,
            snapshot_rounds=tuple(range(rounds)),
        )
        row = _row(row_name, res, cfg.sgns.dim)
        evaluate(row, res.syn0)
        row["quality_per_round"] = quality_curve(res, lambda emb: evaluate({}, emb))
        row.update(round_series(res))
        runs[row_name] = res
        rows.append(row)
        traces[(name, row_name)] = res.trace
        print(_line(row, rows[0]["seconds"]), flush=True)
    gen = None
    if args.gensim_workers > 0:
        gen = gensim_row(
            train, configs["deepwalk"], rounds, args.seed, args.gensim_workers, args.repeats
        )
        if gen is not None:
            syn0 = gen.pop("syn0")
            evaluate(gen, syn0)
    # Time to the baseline's final quality (its last round, same evaluation as the curves).
    target = rows[0]["quality_per_round"][-1]
    base_reach = time_to_quality(runs["deepwalk"], rows[0]["quality_per_round"], target)
    for row in rows:
        reach = time_to_quality(runs[row["method"]], row["quality_per_round"], target)
        reach = against_baseline(reach, base_reach, gen and gen["seconds"])
        row["to_baseline_quality"] = reach
        print(f"  {row['method']}: to the baseline's quality {reach_cell(reach)}")
    if gen is not None:
        rows.append(gen)
        print(_line(gen, rows[0]["seconds"]), flush=True)
    results[name] = rows


def _line(row, base_seconds):
    quality = (
        f"AUC {row['auc']:.3f}"
        if "auc" in row
        else f"F1 {row['micro_f1']:.3f}/{row['macro_f1']:.3f}"
    )
    return (
        f"{row['method']:<9} {row['rounds']:>3} rounds {row['seconds']:>7.1f}s "
        f"{base_seconds / row['seconds']:>5.2f}x  h->d {row['bytes_host_to_device'] / 1e6:>7.1f}MB "
        f"(raw {row['bytes_raw'] / 1e6:.1f})  sync {row['bytes_sync'] / 1e6:>8.1f}MB  "
        f"busy host {row['busy_host']:.2f} trainer {row['busy_device']:.2f}  {quality}"
    )


def markdown(results) -> str:
    lines = ["# FeLoG system table", ""]
    for name in ("blogcatalog", "ca-astroph", "rmat"):
        if name not in results:
            continue
        rows = results[name]
        base = rows[0]["seconds"]
        metric = "Micro/Macro-F1 @50%" if name == "blogcatalog" else "AUC (dot)"
        lines += [
            f"## {name}",
            "",
            f"| method | rounds | time s | speed-up | tokens | host->device MB (raw corpus) "
            f"| sync MB | busy host | busy trainer | {metric} "
            "| to the baseline's quality: s (round, speed-up, / gensim's time) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            q = f"{r['auc']:.3f}" if "auc" in r else f"{r['micro_f1']:.3f}/{r['macro_f1']:.3f}"
            reach = r.get("to_baseline_quality")
            if "to_baseline_quality" not in r:  # the gensim row
                to = ""
            elif reach is None:
                to = "not reached"
            else:
                ratio = "" if reach["vs_gensim"] is None else f", {reach['vs_gensim']:.2f}"
                to = f"{reach['seconds']:.1f} (r{reach['round']}, {reach['speedup']:.2f}x{ratio})"
            lines.append(
                f"| {r['method']} | {r['rounds']} | {r['seconds']:.1f} | "
                f"{base / r['seconds']:.2f}x | {r['tokens']:,} | "
                f"{r['bytes_host_to_device'] / 1e6:.1f} ({r['bytes_raw'] / 1e6:.1f}) | "
                f"{r['bytes_sync'] / 1e6:.1f} | {r['busy_host']:.2f} | {r['busy_device']:.2f} "
                f"| {q} | {to} |"
            )
        lines += ["", sync_summary(rows, metric), ""]
    lines.append(f"Settings: `{results['args']}`")
    return "\n".join(lines) + "\n"


def sync_summary(rows, metric) -> str:
    """HaSyn and RandomSync against AllSync (the -HaSyn row): sync bytes and quality."""
    by = {r["method"]: r for r in rows}
    if "-HaSyn" not in by or not by["-HaSyn"]["bytes_sync"]:
        return "No replica syncs (one replica)."

    def quality(r):
        return r["auc"] if "auc" in r else r["micro_f1"]

    full = by["-HaSyn"]
    parts = []
    for name, label in (("felog", "HaSyn"), ("RandomSync", "RandomSync")):
        if name in by:
            r = by[name]
            parts.append(
                f"{label} {r['bytes_sync'] / full['bytes_sync']:.1%} of AllSync's sync bytes "
                f"({r['bytes_sync'] / 1e6:.1f} vs {full['bytes_sync'] / 1e6:.1f} MB), "
                f"{metric} {quality(r) - quality(full):+.3f}"
            )
    return "Sync against AllSync (-HaSyn): " + "; ".join(parts) + "."


def plot(traces, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [
        (k, v) for k, v in traces.items() if k[0] == "blogcatalog" and k[1] in ("felog", "-RiPP")
    ]
    if not shown:
        return
    fig, axes = plt.subplots(len(shown), 1, figsize=(7, 2.2 * len(shown)), sharex=True)
    for ax, ((_, name), trace) in zip(np.atleast_1d(axes), shown, strict=True):
        for ops, label in ((HOST_OPS, "host stages"), (DEVICE_OPS, "trainer")):
            edges, frac = busy_fractions(trace, ops, bins=60)
            ax.step(edges[:-1], frac, where="post", label=label)
        ax.set_ylabel("busy")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"BlogCatalog, {name}", fontsize=9)
        ax.legend(loc="upper right", fontsize=8)
    np.atleast_1d(axes)[-1].set_xlabel("seconds since the first round")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(ap)
    ap.add_argument("--parts", type=int, default=2, help="data-parallel replicas")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--datasets",
        nargs="+",
        default=["blogcatalog", "ca-astroph"],
        help="blogcatalog (node classification), ca-astroph and rmat (link prediction, "
        "--lp-rounds rounds)",
    )
    ap.add_argument("--rmat-scale", type=int, default=20, help="R-MAT with 2^scale nodes")
    ap.add_argument(
        "--feedback",
        default="felog",
        choices=sorted(VARIANTS),
        help="the FeLoG rows' active-set rule (embed_table.VARIANTS; default: the paper's)",
    )
    ap.add_argument(
        "--gensim-workers",
        type=int,
        default=2,
        help="threads of the gensim DeepWalk row (0: no gensim row; needs pip install gensim)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed gensim trainings (median)")
    ap.add_argument(
        "--hasyn-counts",
        choices=("total", "round", "pending"),
        default="total",
        help="HaSyn's hotness: update counts of the whole run, of the current round, or since "
        "each row's last merge",
    )
    ap.add_argument(
        "--sync-rows",
        type=sync_rows_arg,
        default=0,
        help="HaSyn: the M hottest rows per sync, or that share of the nodes if below 1 (0: one "
        "per block of equal count); RandomSync: as many",
    )
    ap.add_argument(
        "--full-every",
        type=int,
        default=32,
        help="HaSyn/RandomSync: every this many periodic syncs merges all rows (0: only the "
        "round-end merge)",
    )
    ap.add_argument("--out", default="experiments/results")
    ap.add_argument("--stem", default=None, help="output file stem (default felog_table)")
    ap.add_argument("--quick", action="store_true", help="3/2 rounds, walks of 10, dim 32")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.lp_rounds, args.walk_length, args.dim = 3, 2, 10, 32
        args.shuffles, args.repeats = 1, 1
    emulate_devices_for(args.parts)
    mesh = make_mesh(args.parts)
    results = {"args": vars(args)}
    traces = {}
    t0 = time.perf_counter()
    unknown = set(args.datasets) - {"blogcatalog", "ca-astroph", "rmat"}
    if unknown:
        raise SystemExit(f"unknown datasets {sorted(unknown)}: blogcatalog, ca-astroph, rmat")
    for name in args.datasets:
        rounds = args.rounds if name == "blogcatalog" else args.lp_rounds
        run_dataset(name, args, mesh, rounds, results, traces)
    results["seconds_total"] = time.perf_counter() - t0
    out = Path(args.out)
    stem = args.stem or ("felog_table_quick" if args.quick else "felog_table")
    save_json(out / f"{stem}.json", results)
    atomic_write_bytes(out / f"{stem}.md", markdown(results).encode())
    plot(traces, out / f"{stem.replace('table', 'utilization')}.png")
    print(f"\ntotal {results['seconds_total']:.0f}s; results in {out}/{stem}.*")


if __name__ == "__main__":
    main()
