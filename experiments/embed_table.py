"""The embedding table: feedback (FeLoG) on vs off, and our trainer against gensim.

* BlogCatalog, node classification (Micro/Macro-F1, one-vs-rest logistic regression).
* ca-AstroPh, link prediction on a 50 % edge split (AUC; FAISS edge retrieval).
* Walk throughput, and SGNS pairs/s of the JAX trainer vs gensim's ``Word2Vec`` on the same walks
  (gensim is an optional benchmark dependency: ``pip install gensim``).

For every method: time (walks + training + feedback, compilation excluded and shown apart),
rounds, tokens and pairs trained, quality, and the speed-up over the DeepWalk baseline. The
baseline keeps a snapshot after every round, so the table also shows the quality the baseline
had reached after the same time as each feedback run ("baseline at equal time").

CPU-sized (2 cores, about 10 minutes)::

    python experiments/embed_table.py
    python experiments/embed_table.py --quick        # a one-minute smoke run

The defaults are smaller than the paper's (one walk of 40 nodes per node and round, window 5,
10 rounds; DeepWalk's published setting is 10 walks of 80 nodes, window 10).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402

from jaxgraph.data import load_dataset  # noqa: E402
from jaxgraph.embed import evaluate as ev  # noqa: E402
from jaxgraph.embed.feedback import FeedbackConfig  # noqa: E402
from jaxgraph.embed.run import EmbedConfig, cpu_config, embed, save_json  # noqa: E402
from jaxgraph.embed.skipgram import SkipGramTrainer  # noqa: E402
from jaxgraph.embed.walks import WalkConfig, out_csr, random_walks, walk_throughput  # noqa: E402
from jaxgraph.mesh import make_mesh  # noqa: E402

# Feedback variants compared with the baseline (name -> feedback rule).
VARIANTS = {
    "felog": FeedbackConfig(),  # the paper's rule: raw cosine, mu = 0.65, from round 0
    "felog-public": FeedbackConfig(warmup_rounds=2, stop_ratio=0.7),  # the public code's rule
    "felog-centered": FeedbackConfig(center=True),
    "felog-centered-w2": FeedbackConfig(center=True, warmup_rounds=2),
    # Lower thresholds on the centred similarity retire more nodes per round.
    **{f"felog-centered-mu{mu}": FeedbackConfig(center=True, mu=mu) for mu in (0.3, 0.4, 0.5)},
}


def _configs(args) -> dict[str, EmbedConfig]:
    walk = WalkConfig(args.walker, args.walk_length, args.walks_per_node, p=args.p, q=args.q)
    base = cpu_config(args.walker, walk=walk, rounds=args.rounds, seed=args.seed)
    base = base.replace(sgns=dataclasses.replace(base.sgns, window=args.window, dim=args.dim))
    out = {args.walker: base}
    for name in args.variants:
        out[name] = base.replace(method="felog", feedback=VARIANTS[name])
    return out


def _time_matched(base_logs, snapshots, seconds):
    """The last baseline round whose cumulative time is within ``seconds``."""
    elapsed = np.cumsum([r.seconds for r in base_logs])
    fits = np.flatnonzero(elapsed <= seconds * 1.05)
    r = int(fits[-1]) if fits.size else 0
    return r, snapshots[r]


def _print_rounds(runs, baseline):
    for name, res in runs.items():
        if name != baseline:
            print(
                f"  {name}: active per round {[x.active for x in res.rounds]}, "
                f"stop: {res.stop_reason}"
            )
    print(
        "  compile before the first round: "
        + ", ".join(f"{n} {r.seconds_compile:.1f}s" for n, r in runs.items())
        + " (programs compiled earlier in the process are reused)"
    )


def blogcatalog(args, mesh, results):
    g = load_dataset("blogcatalog")
    ratios = (0.1, 0.5, 0.9)
    print(f"\n== BlogCatalog node classification ({g.num_nodes} nodes, {g.num_edges // 2} edges)")
    runs = {}
    for name, cfg in _configs(args).items():
        snap = tuple(range(cfg.rounds)) if name == args.walker else ()
        res = embed(g, cfg, mesh, snapshot_rounds=snap)
        nc = ev.node_classification(res.syn0, g.labels, train_ratios=ratios, shuffles=args.shuffles)
        runs[name] = (res, nc)
    base, base_nc = runs[args.walker]
    header = (
        f"{'method':<18} {'rounds':>6} {'time s':>7} {'speedup':>7} {'tokens':>10} {'pairs':>11} "
        + " ".join(f"{'Mi/Ma@' + str(int(r * 100)):>13}" for r in ratios)
        + f" {'base@same-time Mi@50':>21}"
    )
    print(header)
    rows = []
    for name, (res, nc) in runs.items():
        cells = " ".join(
            f"{nc[r]['micro']['mean']:.3f}/{nc[r]['macro']['mean']:.3f}" for r in ratios
        )
        matched = ""
        row = {
            "method": name,
            **res.summary(),
            "f1": {str(r): nc[r] for r in ratios},
            "speedup": base.seconds / res.seconds,
            "active_per_round": [x.active for x in res.rounds],
        }
        if name != args.walker:
            r, emb = _time_matched(base.rounds, base.snapshots, res.seconds)
            m = ev.node_classification(emb, g.labels, train_ratios=(0.5,), shuffles=args.shuffles)
            matched = f"{m[0.5]['micro']['mean']:.3f} (r{r})"
            row["baseline_same_time"] = {"round": r, "micro@50": m[0.5]["micro"]["mean"]}
        print(
            f"{name:<18} {len(res.rounds):>6} {res.seconds:>7.1f} "
            f"{base.seconds / res.seconds:>6.2f}x {res.tokens:>10,} {res.pairs:>11,} {cells} "
            f"{matched:>21}"
        )
        rows.append(row)
    _print_rounds({k: v[0] for k, v in runs.items()}, args.walker)
    results["blogcatalog"] = rows


def astroph(args, mesh, results):
    """Link prediction, one edge split and training seed per ``--lp-seeds`` entry; with several
    seeds a summary of means and standard deviations follows the per-seed tables."""
    g = load_dataset("ca-astroph")
    rows = []
    for seed in args.lp_seeds:
        rows += _astroph_one(argparse.Namespace(**{**vars(args), "seed": seed}), g, mesh)
    results["ca-astroph"] = rows
    if len(args.lp_seeds) > 1:
        print(f"\n== ca-AstroPh over seeds {args.lp_seeds}: mean ± std")
        print(f"{'method':<18} {'time s':>13} {'speedup':>13} {'AUC dot':>15} {'Hit@10':>15}")
        for name in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == name]

            def stat(values):
                return f"{np.mean(values):.3f} ± {np.std(values):.3f}"

            print(
                f"{name:<18} {stat([r['seconds'] for r in mine]):>13} "
                f"{stat([r['speedup'] for r in mine]):>13} "
                f"{stat([r['auc']['dot'] for r in mine]):>15} "
                f"{stat([r['retrieval']['hit@10'] for r in mine]):>15}"
            )


def _astroph_one(args, g, mesh) -> list[dict]:
    split = ev.link_prediction_split(g, 0.5, seed=args.seed)
    print(
        f"\n== ca-AstroPh link prediction ({g.num_nodes} nodes, {g.num_edges // 2} edges; "
        f"{split.test_pos.shape[0]:,} held-out edges, as many non-edges; split seed {args.seed})"
    )
    print(
        f"{'method':<18} {'rounds':>6} {'time s':>7} {'speedup':>7} {'tokens':>10} {'pairs':>11} "
        f"{'AUC dot':>8} {'AUC cos':>8} {'AUC s0.s1':>9} {'Hit@10':>7} {'MRR@10':>7} "
        f"{'base@same-time AUC':>19}"
    )
    rows = []
    runs = {}
    base = None
    for name, cfg in _configs(args).items():
        cfg = cfg.replace(rounds=args.lp_rounds)
        snap = tuple(range(cfg.rounds)) if name == args.walker else ()
        res = embed(split.train_graph, cfg, mesh, snapshot_rounds=snap)
        base = base or res
        aucs = {s: ev.link_prediction_auc(split, res.syn0, s, res.syn1) for s in ev.SCORES}
        ret = ev.edge_retrieval(res.syn0, split, ks=(10,))
        matched = ""
        row = {"method": name, "seed": args.seed, **res.summary(), "auc": aucs, "retrieval": ret}
        row["active_per_round"] = [x.active for x in res.rounds]
        runs[name] = res
        row["speedup"] = base.seconds / res.seconds
        if name != args.walker:
            r, emb = _time_matched(base.rounds, base.snapshots, res.seconds)
            auc = ev.link_prediction_auc(split, emb, "dot")
            matched = f"{auc:.3f} (r{r})"
            row["baseline_same_time"] = {"round": r, "auc_dot": auc}
        print(
            f"{name:<18} {len(res.rounds):>6} {res.seconds:>7.1f} "
            f"{base.seconds / res.seconds:>6.2f}x {res.tokens:>10,} {res.pairs:>11,} "
            f"{aucs['dot']:>8.3f} {aucs['cosine']:>8.3f} {aucs['dot_context']:>9.3f} "
            f"{ret['hit@10']:>7.3f} {ret['mrr@10']:>7.3f} {matched:>19}"
        )
        rows.append(row)
    _print_rounds(runs, args.walker)
    return rows


def trainer_vs_gensim(args, mesh, results):
    g = load_dataset("blogcatalog")
    cfg = cpu_config("deepwalk").sgns
    cfg = dataclasses.replace(cfg, window=args.window, dim=args.dim)
    walks = random_walks(
        out_csr(g),
        np.arange(g.num_nodes),
        WalkConfig(walk_length=args.walk_length, walks_per_node=args.gensim_walks),
        seed=args.seed,
    )
    print(
        f"\n== SGNS trainer vs gensim on the same walks (BlogCatalog, {walks.num_walks:,} walks, "
        f"{walks.num_tokens:,} tokens; d={cfg.dim}, window {cfg.window}, K={cfg.negatives}, "
        f"sample {cfg.sample:g}, one pass)"
    )
    tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=args.seed)
    tr.compile()
    st = tr.train_round(walks, 0)
    ours = {"seconds": st.seconds, "pairs": st.pairs, "pairs_per_s": st.pairs / st.seconds}
    nc_ours = ev.node_classification(tr.embeddings()[0], g.labels, train_ratios=(0.5,), shuffles=1)
    ours["micro@50"] = nc_ours[0.5]["micro"]["mean"]
    row = {"jax": ours}
    print(f"{'trainer':<28} {'seconds':>8} {'pairs':>12} {'pairs/s':>10} {'Mi@50':>6}")
    print(
        f"{'jaxgraph (JAX, CPU)':<28} {st.seconds:>8.1f} {st.pairs:>12,} "
        f"{ours['pairs_per_s']:>10,.0f} {ours['micro@50']:>6.3f}"
    )
    try:
        emb, _, secs = gensim_skipgram([walks], cfg, g.num_nodes, args.gensim_workers, args.seed)
    except ImportError:
        print("gensim is not installed (pip install gensim): skipping the gensim comparison")
        results["trainer_vs_gensim"] = row
        return
    nc = ev.node_classification(emb, g.labels, train_ratios=(0.5,), shuffles=1)
    # gensim does not count pairs; its sub-sampling and window rule are word2vec's, like ours,
    # so the expected number of pairs of this corpus is the same: use ours.
    gen = {"seconds": secs, "pairs_est": st.pairs, "pairs_per_s": st.pairs / secs}
    gen["micro@50"] = nc[0.5]["micro"]["mean"]
    gen["workers"] = args.gensim_workers
    row["gensim"] = gen
    print(
        f"{f'gensim Word2Vec ({args.gensim_workers} workers)':<28} "
        f"{secs:>8.1f} {st.pairs:>12,} {gen['pairs_per_s']:>10,.0f} {gen['micro@50']:>6.3f}"
    )
    print(f"  jax / gensim pairs/s: {ours['pairs_per_s'] / gen['pairs_per_s']:.2f}")
    results["trainer_vs_gensim"] = row


def gensim_skipgram(corpus, sgns, num_nodes, workers, seed):
    """One pass of gensim's ``Word2Vec`` (skip-gram, negative sampling) over the walks of
    ``corpus`` (a list of :class:`Walks`) with the trainer's window, dimension, negatives,
    sub-sampling and initial learning rate (``sgns``), ``workers`` threads.

    Returns:
      ``(syn0 f32[N, d], seconds to build the vocabulary, seconds to train)``; nodes absent
      from the walks keep zero vectors.

    Raises:
      ImportError: gensim is not installed (an optional benchmark dependency).
    """
    from gensim.models import Word2Vec

    sentences = [[str(v) for v in row] for walks in corpus for row in walks.to_lists()]
    model = Word2Vec(
        vector_size=sgns.dim,
        window=sgns.window,
        sg=1,
        hs=0,
        negative=sgns.negatives,
        sample=sgns.sample,
        min_count=0,
        alpha=sgns.lr,
        workers=workers,
        seed=seed,
    )
    t0 = time.perf_counter()
    model.build_vocab(sentences)
    t1 = time.perf_counter()
    model.train(sentences, total_examples=len(sentences), epochs=1)
    t2 = time.perf_counter()
    syn0 = np.zeros((num_nodes, sgns.dim), np.float32)
    for v in range(num_nodes):
        if str(v) in model.wv.key_to_index:
            syn0[v] = model.wv[str(v)]
    return syn0, t1 - t0, t2 - t1


def walk_speed(args, results):
    g = load_dataset("blogcatalog")
    print("\n== Walks on BlogCatalog (10 walks x 80 nodes per node)")
    rows = {}
    for name, cfg in (
        ("deepwalk", WalkConfig("deepwalk", 80, 10)),
        ("node2vec p=0.25 q=4", WalkConfig("node2vec", 80, 10, 0.25, 4.0)),
    ):
        r = walk_throughput(g, cfg, repeats=2)
        rows[name] = r
        print(
            f"{name:<22} {int(r['walks']):,} walks in {r['seconds']:.2f}s: "
            f"{r['walks_per_s']:,.0f} walks/s, {r['tokens_per_s']:,.0f} tokens/s"
        )
    results["walks"] = rows


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The round, walk, trainer and evaluation options shared with ``felog_table.py``."""
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--lp-rounds", type=int, default=6, help="rounds on ca-AstroPh")
    ap.add_argument("--walk-length", type=int, default=40)
    ap.add_argument("--walks-per-node", type=int, default=1, help="per round")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--shuffles", type=int, default=2)
    ap.add_argument("--walker", choices=("deepwalk", "node2vec"), default="deepwalk")
    ap.add_argument("--p", type=float, default=1.0, help="node2vec return parameter")
    ap.add_argument("--q", type=float, default=1.0, help="node2vec in-out parameter")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(ap)
    ap.add_argument(
        "--variants",
        nargs="*",
        default=["felog", "felog-public", "felog-centered", "felog-centered-w2"],
    )
    ap.add_argument("--gensim-walks", type=int, default=1, help="walks per node for gensim")
    ap.add_argument("--gensim-workers", type=int, default=2)
    ap.add_argument("--parts", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--lp-seeds", type=int, nargs="+", default=None, help="link-prediction seeds (--seed)"
    )
    ap.add_argument("--skip", nargs="*", default=[], help="blogcatalog, astroph, gensim, walks")
    ap.add_argument("--out", default="runs/embed_table.json")
    ap.add_argument("--quick", action="store_true", help="3 rounds, short walks")
    args = ap.parse_args(argv)
    args.lp_seeds = args.lp_seeds or [args.seed]
    if args.quick:
        args.rounds, args.lp_rounds, args.walk_length, args.dim = 3, 2, 10, 32
        args.shuffles = 1
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    mesh = make_mesh(args.parts)
    results = {"args": vars(args)}
    t0 = time.perf_counter()
    if "walks" not in args.skip:
        walk_speed(args, results)
    if "gensim" not in args.skip:
        trainer_vs_gensim(args, mesh, results)
    if "blogcatalog" not in args.skip:
        blogcatalog(args, mesh, results)
    if "astroph" not in args.skip:
        astroph(args, mesh, results)
    results["seconds_total"] = time.perf_counter() - t0
    save_json(args.out, results)
    print(f"\ntotal {results['seconds_total']:.0f}s; results in {args.out}")


if __name__ == "__main__":
    main()
