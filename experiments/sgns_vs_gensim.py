"""The skip-gram trainer against gensim's Word2Vec on the same walks, at gensim's settings.

One corpus of DeepWalk walks (``--walks-per-node`` x ``--walk-length``, default 10 x 80) on the
training graph of a link-prediction split (ca-AstroPh, an R-MAT) or on the whole graph
(BlogCatalog, node classification) is trained by both, alternating (jaxgraph, gensim,
jaxgraph, ...), so both see the same drift of the machine:

* **gensim**: ``Word2Vec(sg=1, hs=0)``, one pass, ``--gensim-workers`` threads, window 10,
  d 128, 5 negatives, sub-sampling 1e-3, linear decay from 0.025, ``syn0`` from
  ``U(-1/d, 1/d)`` (gensim 4's range; word2vec's is half of it).
* **jaxgraph**: :class:`~jaxgraph.embed.skipgram.SkipGramTrainer` on ``--parts`` emulated
  devices with the same settings (``--init-scale 1``: gensim 4's initial range); the corpus is
  fed in ``--chunks`` rounds under word2vec's global decay (one linear decay over the whole
  corpus, as gensim), and the quality after each round gives the time to gensim's final
  quality.
* **batch 1** (``--sequential``): word2vec's update one pair at a time
  (:mod:`jaxgraph.embed.sequential`, numba) on exactly jaxgraph's pairs, rates and initial
  range: what the same pair stream scores without batching. Its spread over repeated runs is
  the noise floor of a comparison with gensim (experiments/README.md, "The initial range").

Printed per seed and run: train seconds, pairs/s, loss per pair, the largest row norm, and
quality (dot-product and cosine AUC, dot the headline; Micro-F1 at 50 % labels for
BlogCatalog). gensim does not count pairs; its sub-sampling and window rule are word2vec's, like
ours, so both are divided by our count of the same corpus.

CPU run (ca-AstroPh, 3 seeds, about 25 minutes on 2 cores)::

    python experiments/sgns_vs_gensim.py --dataset ca-astroph --seeds 0 1 2 --parts 2

``--shared-negatives 8`` trains with negatives shared by groups of 8 pairs (about 2x faster on
this CPU; experiments/README.md gives its quality beside per-pair negatives; 32 is faster
still, at a cost on the R-MAT's cosine AUC). ``--interleave``
sets the span of steps whose batches interleave (default 8, as ``SkipGramConfig``; ``none``:
the whole sync period, as the tables before that option).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import time
from pathlib import Path

from jaxgraph.cli import emulate_cpu_devices


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="ca-astroph", help="ca-astroph, blogcatalog or rmat")
    ap.add_argument("--rmat-scale", type=int, default=16)
    ap.add_argument("--walks-per-node", type=int, default=10)
    ap.add_argument("--walk-length", type=int, default=80)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--negatives", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument(
        "--init-scale",
        type=float,
        default=1.0,
        help="syn0 starts on U(-s/d, s/d): 1 as gensim 4 (default), 0.5 as word2vec",
    )
    ap.add_argument("--row-cap", default="4", help="an integer, or none")
    ap.add_argument(
        "--shared-negatives", type=int, default=1, help="pairs per draw of negatives (1: each)"
    )
    ap.add_argument(
        "--interleave", default="8", help="steps whose batches interleave (none: the sync period)"
    )
    ap.add_argument("--sync-every", type=int, default=64, help="steps between replica merges")
    ap.add_argument("--merge", default="sum", help="replica merge (mean, sum or touched)")
    ap.add_argument("--parts", type=int, default=2, help="emulated devices (replicas)")
    ap.add_argument("--pairs", default="host", help="where pairs are built: host or device")
    ap.add_argument("--chunks", type=int, default=5, help="rounds the corpus is fed in")
    ap.add_argument("--gensim-workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--no-gensim", action="store_true", help="time jaxgraph alone")
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="also train word2vec's update one pair at a time on jaxgraph's pairs "
        "(jaxgraph.embed.sequential; about 1.4M pairs/s on one core)",
    )
    ap.add_argument("--out", default="runs/sgns_vs_gensim.json")
    return ap.parse_args(argv)


def main(argv=None):
    args = _args(argv)
    emulate_cpu_devices(args.parts)

    import numpy as np
    from embed_table import gensim_sentences, gensim_skipgram

    from jaxgraph.data import load_dataset
    from jaxgraph.data.synthetic import rmat
    from jaxgraph.embed import evaluate as ev
    from jaxgraph.embed.sequential import train_sequential
    from jaxgraph.embed.sgns import SkipGramConfig
    from jaxgraph.embed.skipgram import SkipGramTrainer
    from jaxgraph.embed.walks import WalkConfig, Walks, out_csr, random_walks
    from jaxgraph.mesh import make_mesh

    sgns = SkipGramConfig(
        dim=args.dim,
        window=args.window,
        negatives=args.negatives,
        batch_size=args.batch_size,
        init_scale=args.init_scale,
        row_cap=None if args.row_cap == "none" else int(args.row_cap),
        shared_negatives=args.shared_negatives,
        interleave=None if args.interleave == "none" else int(args.interleave),
        sync_every=args.sync_every,
        merge=args.merge,
        pairs=args.pairs,
        lr_schedule="global",
        schedule_rounds=args.chunks,
    )
    mesh = make_mesh(args.parts)
    have_gensim = not args.no_gensim and importlib.util.find_spec("gensim") is not None
    if not have_gensim and not args.no_gensim:
        print("gensim is not installed (pip install gensim): timing jaxgraph alone")
    if args.dataset == "rmat":
        s = args.rmat_scale
        graph = rmat(scale=s, num_edges=16 * 2**s, seed=0, name=f"rmat{s}")
    else:
        graph = load_dataset(args.dataset)
    task = "nc" if ev.label_matrix(graph.labels).any() else "lp"
    print(
        f"{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, task {task}; "
        f"{args.walks_per_node} x {args.walk_length} walks, {sgns}; {args.parts} device(s)"
    )

    def quality(syn0, split):
        if task == "lp":
            return {s: ev.link_prediction_auc(split, syn0, s) for s in ("dot", "cosine")}
        nc = ev.node_classification(syn0, graph.labels, train_ratios=(0.5,), shuffles=2)
        return {"micro": nc[0.5]["micro"]["mean"]}

    def headline(q):
        return q["dot"] if task == "lp" else q["micro"]

    results = []
    for seed in args.seeds:
        split = ev.link_prediction_split(graph, 0.5, seed=seed) if task == "lp" else None
        train_graph = split.train_graph if split is not None else graph
        csr = out_csr(train_graph)
        starts = np.flatnonzero(np.diff(csr[0]) > 0)
        walk_cfg = WalkConfig(walk_length=args.walk_length, walks_per_node=args.walks_per_node)
        walks = random_walks(csr, starts, walk_cfg, seed=seed)
        # Round r trains walks r, r + chunks, ... (every node's walks spread over the rounds).
        chunks = [
            Walks(walks.nodes[r :: args.chunks], walks.lengths[r :: args.chunks])
            for r in range(args.chunks)
        ]
        row = {"seed": seed, "tokens": int(walks.num_tokens)}
        # jaxgraph first, then gensim (alternating within a seed).
        tr = SkipGramTrainer(graph.num_nodes, sgns, mesh, seed=seed)
        row["jax_compile_s"] = tr.compile()
        curve, elapsed, pairs, losses, norms = [], 0.0, 0, [], []
        for r, chunk in enumerate(chunks):
            st = tr.train_round(chunk, r)
            elapsed += st.seconds
            pairs += st.pairs
            losses.append(st.loss)
            norms.append(st.max_norm)
            q = quality(tr.input_vectors(), split)  # not timed
            curve.append({"seconds": elapsed, "pairs": pairs, **q})
        row["jax"] = {
            "seconds": elapsed,
            "pairs": pairs,
            "pairs_per_s": pairs / elapsed,
            "loss_per_pair": losses,
            "max_norm": norms,
            "curve": curve,
            **curve[-1],
        }
        if args.sequential:
            t0 = time.perf_counter()
            syn0, _, seq_losses, seq_pairs = train_sequential(
                chunks, graph.num_nodes, sgns, seed=seed
            )
            secs = time.perf_counter() - t0
            row["sequential"] = {
                "seconds": secs,
                "pairs_per_s": sum(seq_pairs) / secs,
                "loss_per_pair": seq_losses,
                "max_norm": float(np.linalg.norm(syn0, axis=1).max()),
                **quality(syn0, split),
            }
        if have_gensim:
            sentences = gensim_sentences([walks])
            syn0, _, secs = gensim_skipgram(
                sentences, sgns, graph.num_nodes, args.gensim_workers, seed
            )
            q = quality(syn0, split)
            norm = float(np.linalg.norm(syn0, axis=1).max())
            row["gensim"] = {"seconds": secs, "pairs_per_s": pairs / secs, "max_norm": norm, **q}
            target = headline(q)
            reach = next((c for c in curve if headline(c) >= target), None)
            row["jax_time_to_gensim_quality"] = None if reach is None else reach["seconds"]
        results.append(row)
        _print_row(row, task)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"args": vars(args), "sgns": dataclasses.asdict(sgns), "runs": results}, indent=1
        )
    )
    print(f"wrote {out}")


def _print_row(row, task):
    keys = ("dot", "cosine") if task == "lp" else ("micro",)
    jax_, seq, gen = row["jax"], row.get("sequential"), row.get("gensim")
    print(f"seed {row['seed']}: {row['tokens']:,} tokens, {jax_['pairs']:,} pairs")
    print(f"  {'run':<10} {'train s':>8} {'pairs/s':>11} " + " ".join(f"{k:>7}" for k in keys))
    for name, r in (("jaxgraph", jax_), ("batch 1", seq), ("gensim", gen)):
        if r is None:
            continue
        print(
            f"  {name:<10} {r['seconds']:>8.1f} {r['pairs_per_s']:>11,.0f} "
            + " ".join(f"{r[k]:>7.4f}" for k in keys)
        )
    print(
        "  jaxgraph loss/pair by round: "
        + ", ".join(f"{x:.3f}" for x in jax_["loss_per_pair"])
        + "; largest row norm: "
        + ", ".join(f"{x:.2f}" for x in jax_["max_norm"])
        + (f" (gensim {gen['max_norm']:.2f})" if gen else "")
    )
    # Quality after every round: a final figure can hide swings between rounds.
    print(
        "  jaxgraph quality by round: "
        + "; ".join(" / ".join(f"{c[k]:.4f}" for k in keys) for c in jax_["curve"])
    )
    if gen:
        reach = row["jax_time_to_gensim_quality"]
        ratio = (
            "not reached"
            if reach is None
            else f"{reach:.1f} s = {reach / gen['seconds']:.2f} x gensim's time"
        )
        print(
            f"  pairs/s over gensim's: {jax_['pairs_per_s'] / gen['pairs_per_s']:.2f}; "
            f"time to gensim's quality: {ratio}"
        )


if __name__ == "__main__":
    main()
