#!/usr/bin/env python
"""The whole ``jaxgraph embed`` run on an edge-list file beside gensim's walks + training.

The user's path: a graph as a text edge list with string ids, ``jaxgraph embed --graph FILE
--undirected --method deepwalk --task none --out DIR`` at the published preset on one device
(default options otherwise: the kernel is the CLI's choice), timed as a subprocess from start to
exit (interpreter start, reading the file, walks, training, writing the embedding). Beside it,
alternating in one run (jaxgraph, gensim, jaxgraph, ...), gensim 4's ``Word2Vec(sg=1, hs=0)``
(``hs=1, negative=0`` with ``--objective hierarchical``, which the CLI is given too) with 2
workers at the same settings (window 10, d 128, 5 negatives, sub-sampling 1e-3, one
pass, lr 0.025 decayed linearly) on 10 DeepWalk walks of 80 per node of the same edges, drawn by
``jaxgraph.embed.walks.random_walks`` (numba; the fastest walker at hand, so gensim's side is
timed at its best): walks + token lists + vocabulary + training.

Graphs: the train half of a link-prediction split (seed 0) of ca-AstroPh and of an R-MAT of 2^16
nodes (16 edges per node), scored by dot and cosine AUC on the held-out half; BlogCatalog's
whole graph, scored by Micro-F1 at 50 % labels (5 shuffles). Both engines are scored by the same
code on the embedding they wrote (nodes absent from the file keep zero vectors).

Before the timed runs the CLI runs one round on a 300-node graph twice: first with an empty
numba cache (``NUMBA_CACHE_DIR`` a new folder: the first run after install, when numba compiles
the kernels), then on the package's own cache, which the timed runs load.

    python experiments/cli_vs_gensim.py --out experiments/results/cli_vs_gensim/run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GRAPHS = ("ca-astroph", "rmat16", "blogcatalog")


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=GRAPHS)
    ap.add_argument("--repeats", type=int, default=1, help="alternations per graph")
    ap.add_argument("--gensim-workers", type=int, default=2)
    ap.add_argument(
        "--objective",
        choices=("negative", "hierarchical"),
        default="negative",
        help="the output layer of both (gensim's hs=1, negative=0 for hierarchical)",
    )
    ap.add_argument("--cli-args", default="", help="extra options for jaxgraph embed")
    ap.add_argument(
        "--profile",
        type=int,
        metavar="ROUNDS",
        help="instead: where the time goes in ROUNDS rounds of the CLI run under cProfile, "
        "with the JAX program (--kernel jax) and with the CLI's default kernel",
    )
    ap.add_argument("--out", type=Path, help="output prefix: <out>.json, <out>.md")
    return ap.parse_args(argv)


def _graph(name: str):
    from jaxgraph.data import load_dataset
    from jaxgraph.data.synthetic import rmat

    if name == "rmat16":
        return rmat(scale=16, num_edges=16 * 2**16, num_features=0, seed=0, name="rmat16")
    return load_dataset(name)


def _write_edges(graph, path: Path) -> None:
    """Each undirected edge once, as ``n<u> n<v>`` lines (string ids, as users' files)."""
    src, dst = graph.edges()
    keep = src < dst
    lines = np.char.add(np.char.add("n", src[keep].astype(str)), " n")
    lines = np.char.add(lines, dst[keep].astype(str))
    path.write_text("\n".join(lines.tolist()) + "\n")


def _read_embedding(out: Path, num_nodes: int) -> np.ndarray:
    rows = np.load(out / "embedding.npy")
    ids = [int(line[1:]) for line in (out / "nodes.txt").read_text().split()]
    syn0 = np.zeros((num_nodes, rows.shape[1]), np.float32)
    syn0[ids] = rows
    return syn0


def _run_cli(
    edges: Path, num_nodes: int, extra: str, profile: Path | None = None, env: dict | None = None
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "jaxgraph.cli", "embed", "--graph", str(edges)]
        if profile is not None:
            cmd[1:1] = ["-m", "cProfile", "-o", str(profile)]
        cmd += ["--undirected", "--method", "deepwalk", "--task", "none", "--parts", "1"]
        cmd += ["--out", str(out), "--quiet", *extra.split()]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env or dict(os.environ))
        seconds = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(f"jaxgraph embed failed: {done.stderr[-2000:]}")
        summary = json.loads(done.stdout)
        syn0 = _read_embedding(out, num_nodes)
    return {
        "seconds": seconds,
        "train_seconds": summary["seconds"],
        "pairs": summary["pairs"],
        "syn0": syn0,
    }


def _warm_up(extra: str) -> dict:
    """Seconds of a one-round CLI run on a 300-node graph with an empty numba cache (numba
    compiles every kernel) and with the package's cache (which it also fills for the timed
    runs)."""
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 300, (2, 2000))
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        edges = Path(tmp) / "warm_up.txt"
        edges.write_text("".join(f"n{u} n{v}\n" for u, v in zip(src, dst, strict=True) if u != v))
        for label, cache in (("first_run_s", Path(tmp) / "numba"), ("cached_run_s", None)):
            env = None if cache is None else {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
            run = _run_cli(edges, 300, f"{extra} --rounds 1", env=env)
            seconds[label] = run["seconds"]
    return seconds


def _run_gensim(graph, workers: int, seed: int, objective: str) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from embed_table import gensim_sentences, gensim_skipgram

    from jaxgraph.embed.sgns import SkipGramConfig
    from jaxgraph.embed.walks import WalkConfig, out_csr, random_walks

    start = time.perf_counter()
    csr = out_csr(graph)
    starts = np.flatnonzero(np.diff(csr[0]) > 0)
    walks = random_walks(csr, starts, WalkConfig(walk_length=80, walks_per_node=10), seed=seed)
    walk_s = time.perf_counter() - start
    sentences = gensim_sentences([walks])
    cfg = SkipGramConfig(init_scale=1.0, objective=objective)  # gensim 4's initial range
    syn0, vocab_s, train_s = gensim_skipgram(sentences, cfg, graph.num_nodes, workers, seed)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "walk_seconds": walk_s, "train_seconds": train_s, "syn0": syn0}


def _quality(name, graph, split, syn0) -> dict:
    from jaxgraph.embed import evaluate as ev

    if split is not None:
        return {s: ev.link_prediction_auc(split, syn0, s) for s in ("dot", "cosine")}
    nc = ev.node_classification(syn0, graph.labels, train_ratios=(0.5,), shuffles=5)
    return {"micro": nc[0.5]["micro"]["mean"], "macro": nc[0.5]["macro"]["mean"]}


# Where a profiled run's time goes: (label, file suffix, function), cumulative seconds.
_PARTS = (
    ("walks", "embed/walks.py", "random_walks"),
    ("pairs", "embed/corpus.py", "split_pairs"),
    ("rounds", "embed/skipgram.py", "train_round"),
    ("run", "embed/job.py", "run_job"),
)


def _profile(name: str, edges: Path, num_nodes: int, rounds: int, extra: str) -> list[dict]:
    """The CLI run of ``rounds`` rounds under cProfile with each kernel: seconds in walks, pair
    building, the rest of the rounds (steps, merges, bookkeeping), the rest of the run (reading
    the file, counts, writing) and outside it (interpreter start, imports, the parser)."""
    import pstats

    rows = []
    for kernel in ("jax", "auto"):
        with tempfile.TemporaryDirectory() as tmp:
            prof = Path(tmp) / "prof"
            more = f"{extra} --rounds {rounds} --kernel {kernel}"
            run = _run_cli(edges, num_nodes, more, profile=prof)
            stats = pstats.Stats(str(prof)).stats
        cum = dict.fromkeys((label for label, *_ in _PARTS), 0.0)
        for (file, _, func), (_, _, _, ct, _) in stats.items():
            for label, suffix, name_ in _PARTS:
                if file.endswith(suffix) and func == name_:
                    cum[label] += ct
        row = {"graph": name, "kernel": kernel, "seconds": run["seconds"], "pairs": run["pairs"]}
        row |= {
            "walks_s": cum["walks"],
            "pairs_s": cum["pairs"],
            "steps_merges_s": cum["rounds"] - cum["pairs"],
            "rest_of_run_s": cum["run"] - cum["rounds"] - cum["walks"],
            "outside_s": run["seconds"] - cum["run"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None):
    args = _args(argv)
    from jaxgraph.embed import evaluate as ev

    extra = args.cli_args
    if args.objective != "negative":
        extra = f"--objective {args.objective} {extra}"

    rows = []
    if not args.profile:
        warm = _warm_up(extra)
        rows.append({"graph": "warm-up", "engine": "jaxgraph", **warm})
        print(json.dumps(rows[-1]), flush=True)
    for name in args.graphs:
        graph = _graph(name)
        split = None if name == "blogcatalog" else ev.link_prediction_split(graph, 0.5, seed=0)
        train = graph if split is None else split.train_graph
        with tempfile.TemporaryDirectory() as tmp:
            edges = Path(tmp) / f"{name}.txt"
            _write_edges(train, edges)
            if args.profile:
                rows += _profile(name, edges, graph.num_nodes, args.profile, extra)
                continue
            for rep in range(args.repeats):
                for engine in ("jaxgraph", "gensim"):
                    if engine == "jaxgraph":
                        run = _run_cli(edges, graph.num_nodes, extra)
                    else:
                        run = _run_gensim(train, args.gensim_workers, rep, args.objective)
                    run.update(_quality(name, graph, split, run.pop("syn0")))
                    row = {"graph": name, "repeat": rep, "engine": engine, **run}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    markdown = _profile_table(rows) if args.profile else _table(rows)
    print(markdown)
    if args.out:
        from results_io import write_runs

        write_runs(args, rows, markdown)


def _table(rows) -> str:
    out = [
        "| graph | repeat | jaxgraph CLI s | gensim walks + training s | ratio | jaxgraph pairs/s "
        "(per core) | gensim pairs/s (per core) | quality jaxgraph | quality gensim |",
        "|---|---:|---:|---:|---:|---|---|---|---|",
    ]
    for jr in (r for r in rows if r["engine"] == "jaxgraph" and r["graph"] != "warm-up"):
        gr = next(
            r
            for r in rows
            if r["engine"] == "gensim" and (r["graph"], r["repeat"]) == (jr["graph"], jr["repeat"])
        )
        keys = ("dot", "cosine") if "dot" in jr else ("micro", "macro")
        jp = jr["pairs"] / jr["seconds"]
        gp = jr["pairs"] / gr["seconds"]  # gensim does not count pairs: ours of the same walks
        out.append(
            f"| {jr['graph']} | {jr['repeat']} | {jr['seconds']:.1f} | {gr['seconds']:.1f} | "
            f"{jr['seconds'] / gr['seconds']:.2f} | {jp / 1e6:.2f}M ({jp / 2e6:.2f}M) | "
            f"{gp / 1e6:.2f}M ({gp / 2e6:.2f}M) | {_scores(jr, keys)} | {_scores(gr, keys)} |"
        )
    warm = next((r for r in rows if r["graph"] == "warm-up"), None)
    if warm is not None:
        out.append(
            f"\nOne round on a 300-node graph: {warm['first_run_s']:.1f} s with an empty numba "
            f"cache (the first run after install), {warm['cached_run_s']:.1f} s cached."
        )
    return "\n".join(out)


def _profile_table(rows) -> str:
    out = [
        "| graph | kernel | run s (profiled) | pairs/s | walks s | pair building s | steps and "
        "merges s | rest of the run s | outside the run s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['graph']} | {r['kernel']} | {r['seconds']:.1f} | "
            f"{r['pairs'] / r['seconds'] / 1e6:.2f}M | {r['walks_s']:.1f} | {r['pairs_s']:.1f} | "
            f"{r['steps_merges_s']:.1f} | {r['rest_of_run_s']:.1f} | {r['outside_s']:.1f} |"
        )
    return "\n".join(out)


def _scores(row: dict, keys) -> str:
    return " / ".join(f"{row[k]:.4f}" for k in keys)


if __name__ == "__main__":
    main()
