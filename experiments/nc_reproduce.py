"""BlogCatalog node classification beside the published tables: jaxgraph, gensim on the same
walks, and the figures of OpenNE, the node2vec paper and CogDL.

Each *variant* names one setting of one engine:

* ``jaxgraph``: :func:`jaxgraph.embed.embed` on one device from a preset
  (:data:`jaxgraph.embed.job.PRESETS`) with the variant's changes;
* ``gensim``: ``Word2Vec(sg=1)`` on walks drawn by jaxgraph's walker with the run's seed
  (the walks a jaxgraph run of the same seed trains on), with the variant's objective
  (``hs``, ``negative``) and passes (``epochs``), 2 threads, word2vec's linear decay from 0.025.

Every embedding is scored by :func:`jaxgraph.embed.evaluate.node_classification` (one-vs-rest
L2 logistic regression, C = 1, liblinear, the top-k labels of each test node with k its true
label count: the protocol of DeepWalk's and OpenNE's scoring code) at 10/50/90 % labels with
``--shuffles`` splits, and, as a protocol check, the same on L2-normalised rows.

    python experiments/nc_reproduce.py --variants g-ns1 g-ns5 --seeds 0 \\
        --out experiments/results/nc/blogcatalog --resume
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from jaxgraph.data import DataConfig, load_graph
from jaxgraph.embed import embed
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed.job import preset
from jaxgraph.embed.walks import WalkConfig, out_csr, random_walks

from results_io import add_output_args, load_runs, write_runs

RATIOS = (0.1, 0.5, 0.9)

# name: (engine, method, settings)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    # the presets of the reproduction table, and gensim on the same walks in one pass
    "deepwalk openne": ("jaxgraph", "deepwalk", dict(preset="openne")),
    "deepwalk openne, gensim": (
        "gensim",
        "deepwalk",
        dict(hs=0, negative=5, epochs=1, walks_per_node=5),
    ),
    "node2vec openne": ("jaxgraph", "node2vec", dict(preset="openne")),
    "node2vec openne, gensim": (
        "gensim",
        "node2vec",
        dict(hs=0, negative=5, epochs=1, walks_per_node=5, p=0.25, q=0.25),
    ),
    "deepwalk published": ("jaxgraph", "deepwalk", {}),
    "node2vec published": ("jaxgraph", "node2vec", dict(walk=dict(p=0.25, q=0.25))),
    # gensim on jaxgraph's walks (10 rounds of one walk of 80 per node, window 10, d 128)
    "g-ns1": ("gensim", "deepwalk", dict(hs=0, negative=5, epochs=1)),
    "g-ns5": ("gensim", "deepwalk", dict(hs=0, negative=5, epochs=5)),
    "g-hs1": ("gensim", "deepwalk", dict(hs=1, negative=0, epochs=1)),
    "g-hs5": ("gensim", "deepwalk", dict(hs=1, negative=0, epochs=5)),
    "g-hsns5": ("gensim", "deepwalk", dict(hs=1, negative=5, epochs=5)),
    "g-n2v-ns1": ("gensim", "node2vec", dict(hs=0, negative=5, epochs=1, p=0.25, q=0.25)),
    "g-n2v-ns5": ("gensim", "node2vec", dict(hs=0, negative=5, epochs=5, p=0.25, q=0.25)),
    # jaxgraph on one device: presets and their changes (x5: five walks per node per round,
    # the tokens of gensim's five passes)
    "j-published": ("jaxgraph", "deepwalk", {}),
    "j-ns5": ("jaxgraph", "deepwalk", dict(walk=dict(walks_per_node=5))),
    "j-w2v5": ("jaxgraph", "deepwalk", dict(preset="word2vec", walk=dict(walks_per_node=5))),
    "j-hs1": ("jaxgraph", "deepwalk", dict(sgns=dict(objective="hierarchical"))),
    "j-hs5": (
        "jaxgraph",
        "deepwalk",
        dict(walk=dict(walks_per_node=5), sgns=dict(objective="hierarchical")),
    ),
    "j-n2v": ("jaxgraph", "node2vec", dict(walk=dict(p=0.25, q=0.25))),
    "j-n2v-ns5": ("jaxgraph", "node2vec", dict(walk=dict(p=0.25, q=0.25, walks_per_node=5))),
}


def walks_of(graph, method: str, settings: dict, rounds: int, seed: int) -> list[list[str]]:
    """The walks a jaxgraph run of ``seed`` trains on (10 rounds of ``walks_per_node`` walks of
    80 per node), as gensim's sentences."""
    kind = "node2vec" if method == "node2vec" else "deepwalk"
    walk = {k: settings[k] for k in ("p", "q", "walks_per_node") if k in settings}
    cfg = WalkConfig(kind=kind, walk_length=80, **walk)
    csr = out_csr(graph)
    starts = np.flatnonzero(np.diff(csr[0]) > 0)
    out = []
    for r in range(rounds):
        w = random_walks(csr, starts, cfg, seed=seed, round_index=r)
        out += [[str(v) for v in row] for row in w.to_lists()]
    return out


def gensim_embedding(graph, method: str, settings: dict, seed: int) -> tuple[np.ndarray, float]:
    from gensim.models import Word2Vec

    sentences = walks_of(graph, method, settings, 10, seed)
    t0 = time.perf_counter()
    model = Word2Vec(
        sentences,
        vector_size=128,
        window=10,
        sg=1,
        hs=settings["hs"],
        negative=settings["negative"],
        sample=1e-3,
        min_count=0,
        alpha=0.025,
        epochs=settings["epochs"],
        workers=2,
        seed=seed,
    )
    seconds = time.perf_counter() - t0
    syn0 = np.zeros((graph.num_nodes, 128), np.float32)
    for v in range(graph.num_nodes):
        if str(v) in model.wv.key_to_index:
            syn0[v] = model.wv[str(v)]
    return syn0, seconds


def jaxgraph_embedding(graph, method: str, settings: dict, seed: int) -> tuple[np.ndarray, float]:
    settings = dict(settings)
    cfg = preset(settings.pop("preset", "published"), method).replace(seed=seed)
    walk = settings.pop("walk", {})
    sgns = settings.pop("sgns", {})
    cfg = cfg.replace(
        walk=dataclasses.replace(cfg.walk, **walk),
        sgns=dataclasses.replace(cfg.sgns, **sgns),
        **settings,
    )
    result = embed(cfg, graph)
    return result.syn0, result.seconds


def scores(syn0: np.ndarray, labels, shuffles: int, seed: int) -> dict[str, float]:
    out = {}
    normed = syn0 / np.maximum(np.linalg.norm(syn0, axis=1, keepdims=True), 1e-12)
    for tag, x in (("", syn0), ("l2_", normed)):
        nc = ev.node_classification(x, labels, train_ratios=RATIOS, shuffles=shuffles, seed=seed)
        for ratio in RATIOS:
            for kind in ("micro", "macro"):
                out[f"{tag}{kind}_{ratio}"] = nc[ratio][kind]["mean"]
    return out


def table(rows: list[dict]) -> str:
    head = "| variant | seeds | train s | " + " | ".join(
        f"Micro / Macro @{int(r * 100)}%" for r in RATIOS
    )
    lines = [head + " | L2-normalised @50% |", "|---" * (4 + len(RATIOS)) + "|"]
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name]

        def mean(key, mine=mine):
            return np.mean([r[key] for r in mine])

        cells = [f"{mean(f'micro_{r}'):.4f} / {mean(f'macro_{r}'):.4f}" for r in RATIOS]
        l2 = f"{mean('l2_micro_0.5'):.4f} / {mean('l2_macro_0.5'):.4f}"
        lines.append(
            f"| {name} | {len(mine)} | {mean('seconds'):.0f} | " + " | ".join(cells) + f" | {l2} |"
        )
    return "\n".join(lines) + "\n"


# (source, ratio, metric, figure): the published figures for BlogCatalog; CogDL scores
# L2-normalised rows, so its figure is set beside ours on normalised rows too.
PUBLISHED = {
    "deepwalk": [
        ("OpenNE README", 0.5, "micro", 0.385),
        ("OpenNE README", 0.5, "macro", 0.238),
        ("node2vec paper, Table 2", 0.5, "macro", 0.211),
        ("CogDL task README", 0.9, "micro", 0.427),
    ],
    "node2vec": [
        ("OpenNE README", 0.5, "micro", 0.404),
        ("OpenNE README", 0.5, "macro", 0.264),
        ("node2vec paper, Table 2", 0.5, "macro", 0.258),
        ("CogDL task README", 0.9, "micro", 0.423),
    ],
}


def _stat(rows: list[dict], key: str) -> str:
    v = np.array([r[key] for r in rows])
    return f"{v.mean():.4f}" + (f" ± {v.std():.4f}" if v.size > 1 else "")


def verdicts(rows: list[dict]) -> str:
    """Per published figure: our preset's score (mean ± std over seeds), gensim's on the same
    walks, and whether ours reaches the figure."""
    head = "| method | figure | published | ours (openne) | gensim, same walks | verdict |"
    lines = [head, "|---|---|---|---|---|---|"]
    for method, figures in PUBLISHED.items():
        ours = [r for r in rows if r["variant"] == f"{method} openne"]
        theirs = [r for r in rows if r["variant"] == f"{method} openne, gensim"]
        if not ours:
            continue
        for source, ratio, metric, figure in figures:
            keys = [f"{metric}_{ratio}"] + ([f"l2_{metric}_{ratio}"] if "CogDL" in source else [])
            for key in keys:
                mean = np.mean([r[key] for r in ours])
                verdict = "reached" if mean >= figure else f"below by {figure - mean:.4f}"
                tag = " (L2-normalised rows)" if key.startswith("l2_") else ""
                g = _stat(theirs, key) if theirs else "-"
                lines.append(
                    f"| {method} | {source}: {metric.capitalize()}-F1 @{int(ratio * 100)}%{tag} "
                    f"| {figure:.3f} | {_stat(ours, key)} | {g} | {verdict} |"
                )
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--shuffles", type=int, default=5)
    add_output_args(ap)
    args = ap.parse_args(argv)
    graph = load_graph(DataConfig(name="blogcatalog"))
    rows = load_runs(args)
    done = {(r["variant"], r["seed"]) for r in rows}
    for seed in args.seeds:
        for name in args.variants:
            if (name, seed) in done:
                continue
            engine, method, settings = VARIANTS[name]
            make = gensim_embedding if engine == "gensim" else jaxgraph_embedding
            syn0, seconds = make(graph, method, settings, seed)
            t0 = time.perf_counter()
            row = {"variant": name, "engine": engine, "method": method, "seed": seed}
            row |= {"settings": settings, "seconds": seconds}
            row |= scores(syn0, graph.labels, args.shuffles, seed)
            row["seconds_eval"] = time.perf_counter() - t0
            rows.append(row)
            print(
                f"{name} seed {seed}: {seconds:.0f} s, eval {row['seconds_eval']:.0f} s, "
                f"micro/macro @50% {row['micro_0.5']:.4f} / {row['macro_0.5']:.4f}",
                flush=True,
            )
            if args.out:
                write_runs(args, rows, table(rows) + "\n" + verdicts(rows))
    print(table(rows))
    print(verdicts(rows))


if __name__ == "__main__":
    main()
