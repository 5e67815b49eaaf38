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
import importlib.util
import time

import jax
import numpy as np

from jaxgraph.cli import emulate_cpu_devices
from jaxgraph.data import load_dataset
from jaxgraph.embed import evaluate as ev
from jaxgraph.embed import retrieval as rt
from jaxgraph.embed.feedback import FeedbackConfig
from jaxgraph.embed.run import EmbedConfig, cpu_config, embed, save_json
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.walks import WalkConfig, out_csr, random_walks, walk_throughput
from jaxgraph.mesh import make_mesh

# Feedback variants compared with the baseline (name -> feedback rule).
VARIANTS = {
    "felog": FeedbackConfig(),  # the paper's rule: raw cosine, mu = 0.65, from round 0
    "felog-public": FeedbackConfig(warmup_rounds=2, stop_ratio=0.7),  # the public code's rule
    "felog-centered": FeedbackConfig(center=True),
    "felog-centered-w2": FeedbackConfig(center=True, warmup_rounds=2),
    # Lower thresholds on the centred similarity retire more nodes per round.
    **{
        f"felog-centered-mu{mu}": FeedbackConfig(center=True, mu=mu) for mu in (0.3, 0.4, 0.5, 0.55)
    },
    # The frontier recomputed over all nodes every round (retired nodes can come back).
    **{
        f"felog-centered-mu{mu}-react": FeedbackConfig(center=True, mu=mu, reactivate=True)
        for mu in (0.5, 0.6)
    },
}


def _configs(args) -> dict[str, EmbedConfig]:
    walk = WalkConfig(args.walker, args.walk_length, args.walks_per_node, p=args.p, q=args.q)
    base = cpu_config(args.walker, walk=walk, rounds=args.rounds, seed=args.seed)
    sgns = dataclasses.replace(
        base.sgns, window=args.window, dim=args.dim, lr_schedule=args.lr_schedule
    )
    base = base.replace(sgns=sgns)
    out = {args.walker: base}
    for name in args.variants:
        out[name] = base.replace(method="felog", feedback=VARIANTS[name])
    return out


def _time_matched(base, curve, seconds):
    """``(round, quality)`` of the last baseline round that ended within ``seconds``."""
    ends = np.array([base.elapsed[r] for r in range(len(curve))])
    fits = np.flatnonzero(ends <= seconds * 1.05)
    r = int(fits[-1]) if fits.size else 0
    return r, curve[r]


def quality_curve(res, score) -> list[float]:
    """The quality ``score(syn0)`` after every round of ``res`` (from its snapshots)."""
    return [score(res.snapshots[r]) for r in range(len(res.rounds))]


def time_to_quality(res, curve, target):
    """Time to quality: ``{"round", "seconds", "pairs"}`` of the first round of ``res`` whose
    quality reaches ``target`` (seconds from the start of the round loop to the end of that
    round; pairs trained up to then), or None if no round does."""
    hit = np.flatnonzero(np.asarray(curve) >= target)
    if not hit.size:
        return None
    r = int(hit[0])
    return {
        "round": r,
        "seconds": res.elapsed[r],
        "pairs": sum(x.pairs for x in res.rounds[: r + 1]),
    }


def against_baseline(reach, base_reach, gensim_seconds=None):
    """``reach`` (:func:`time_to_quality`) with its speed-ups over the baseline's own time and
    pairs to that quality, and its time over gensim's (None without a gensim row)."""
    if reach is None:
        return None
    return {
        **reach,
        "speedup": base_reach["seconds"] / reach["seconds"],
        "pairs_speedup": base_reach["pairs"] / reach["pairs"],
        "vs_gensim": None if gensim_seconds is None else reach["seconds"] / gensim_seconds,
    }


def reach_cell(reach) -> str:
    """A table cell for :func:`against_baseline`'s result."""
    if reach is None:
        return "not reached"
    return (
        f"{reach['seconds']:.1f}s r{reach['round']} "
        f"{reach['speedup']:.2f}x/{reach['pairs_speedup']:.2f}x"
    )


def round_series(res) -> dict:
    """Per-round end times and pairs of a run, for the JSON rows."""
    return {
        "elapsed_per_round": [res.elapsed[r] for r in range(len(res.rounds))],
        "pairs_per_round": [r.pairs for r in res.rounds],
    }


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
    """Node classification. Every method keeps a snapshot after each round, so the table gives
    each method's time to the baseline's final Micro-F1 at 50 % and the baseline's Micro-F1
    after the same time as each run."""
    g = load_dataset("blogcatalog")
    ratios = (0.1, 0.5, 0.9)
    print(f"\n== BlogCatalog node classification ({g.num_nodes} nodes, {g.num_edges // 2} edges)")

    def micro50(emb):
        nc = ev.node_classification(emb, g.labels, train_ratios=(0.5,), shuffles=args.shuffles)
        return nc[0.5]["micro"]["mean"]

    runs = {}
    for name, cfg in _configs(args).items():
        res = embed(
            cfg.replace(parts=mesh.size), g, mesh=mesh, snapshot_rounds=tuple(range(cfg.rounds))
        )
        nc = ev.node_classification(res.syn0, g.labels, train_ratios=ratios, shuffles=args.shuffles)
        runs[name] = (res, nc, quality_curve(res, micro50))
    base, _, base_curve = runs[args.walker]
    target = base_curve[-1]  # the curves' protocol (the table's 50 % column splits differ)
    base_reach = time_to_quality(base, base_curve, target)
    header = (
        f"{'method':<18} {'rounds':>6} {'time s':>7} {'speedup':>7} {'tokens':>10} {'pairs':>11} "
        + " ".join(f"{'Mi/Ma@' + str(int(r * 100)):>13}" for r in ratios)
        + f" {'to base Mi@50 (time/pairs speed-up)':>36} {'base@same-time Mi@50':>21}"
    )
    print(header)
    rows = []
    for name, (res, nc, curve) in runs.items():
        cells = " ".join(
            f"{nc[r]['micro']['mean']:.3f}/{nc[r]['macro']['mean']:.3f}" for r in ratios
        )
        reach = against_baseline(time_to_quality(res, curve, target), base_reach)
        matched = ""
        row = {
            "method": name,
            **res.summary(),
            "f1": {str(r): nc[r] for r in ratios},
            "speedup": base.seconds / res.seconds,
            "active_per_round": [x.active for x in res.rounds],
            "micro@50_per_round": curve,
            **round_series(res),
            "to_baseline_quality": reach,
        }
        if name != args.walker:
            r, q = _time_matched(base, base_curve, res.seconds)
            matched = f"{q:.3f} (r{r})"
            row["baseline_same_time"] = {"round": r, "micro@50": q}
        print(
            f"{name:<18} {len(res.rounds):>6} {res.seconds:>7.1f} "
            f"{base.seconds / res.seconds:>6.2f}x {res.tokens:>10,} {res.pairs:>11,} {cells} "
            f"{reach_cell(reach):>36} {matched:>21}"
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
        print(
            f"{'method':<22} {'time s':>15} {'speedup':>13} {'AUC dot':>13} {'Hit@10':>13} "
            f"{'to base AUC: speed-up':>21} {'pairs ratio':>13} {'/ gensim time':>13} reached"
        )

        def stat(values):
            values = [v for v in values if v is not None]
            return f"{np.mean(values):.3f} ± {np.std(values):.3f}" if values else "-"

        for name in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == name]
            reach = [r.get("to_baseline_quality") for r in mine]
            got = [x for x in reach if x]
            print(
                f"{name:<22} {stat([r['seconds'] for r in mine]):>15} "
                f"{stat([r['speedup'] for r in mine]):>13} "
                f"{stat([r['auc']['dot'] for r in mine]):>13} "
                f"{stat([r.get('retrieval', {}).get('hit@10') for r in mine]):>13} "
                f"{stat([x['speedup'] for x in got]):>21} "
                f"{stat([x['pairs_speedup'] for x in got]):>13} "
                f"{stat([x['vs_gensim'] for x in got]):>13} {len(got)}/{len(mine)}"
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
        f"{'to base AUC (time/pairs speed-up)':>34} {'base@same-time AUC':>19}"
    )

    def auc(emb):
        return ev.link_prediction_auc(split, emb, "dot")

    runs = {}
    for name, cfg in _configs(args).items():
        cfg = cfg.replace(rounds=args.lp_rounds)
        res = embed(
            cfg.replace(parts=mesh.size),
            split.train_graph,
            mesh=mesh,
            snapshot_rounds=tuple(range(cfg.rounds)),
        )
        runs[name] = (res, quality_curve(res, auc))
    base, base_curve = runs[args.walker]
    target = base_curve[-1]
    base_reach = time_to_quality(base, base_curve, target)
    gen = None
    if args.gensim_workers > 0:
        cfg = _configs(args)[args.walker].replace(rounds=args.lp_rounds)
        gen = gensim_row(
            split.train_graph, cfg, args.lp_rounds, args.seed, args.gensim_workers, args.repeats
        )
    rows = []
    for name, (res, curve) in runs.items():
        aucs = {s: ev.link_prediction_auc(split, res.syn0, s, res.syn1) for s in ev.SCORES}
        ret = rt.edge_retrieval(res.syn0, split, ks=(10,))
        reach = against_baseline(
            time_to_quality(res, curve, target), base_reach, gen and gen["seconds"]
        )
        matched = ""
        row = {"method": name, "seed": args.seed, **res.summary(), "auc": aucs, "retrieval": ret}
        row["active_per_round"] = [x.active for x in res.rounds]
        row["speedup"] = base.seconds / res.seconds
        row["auc_per_round"] = curve
        row.update(round_series(res))
        row["to_baseline_quality"] = reach
        if name != args.walker:
            r, q = _time_matched(base, base_curve, res.seconds)
            matched = f"{q:.3f} (r{r})"
            row["baseline_same_time"] = {"round": r, "auc_dot": q}
        print(
            f"{name:<18} {len(res.rounds):>6} {res.seconds:>7.1f} "
            f"{base.seconds / res.seconds:>6.2f}x {res.tokens:>10,} {res.pairs:>11,} "
            f"{aucs['dot']:>8.3f} {aucs['cosine']:>8.3f} {aucs['dot_context']:>9.3f} "
            f"{ret['hit@10']:>7.3f} {ret['mrr@10']:>7.3f} "
            f"{reach_cell(reach):>34} {matched:>19}"
        )
        rows.append(row)
    if gen is not None:
        syn0 = gen.pop("syn0")
        gen["seed"] = args.seed
        gen["speedup"] = base.seconds / gen["seconds"]
        gen["auc"] = {"dot": auc(syn0), "cosine": ev.link_prediction_auc(split, syn0, "cosine")}
        rows.append(gen)
        print(
            f"{gen['method']:<18} {gen['rounds']:>6} {gen['seconds']:>7.1f} "
            f"{base.seconds / gen['seconds']:>6.2f}x {gen['tokens']:>10,} {'':>11} "
            f"{gen['auc']['dot']:>8.3f} {gen['auc']['cosine']:>8.3f}"
        )
        print(
            "  time to the baseline's AUC over gensim's time: "
            + ", ".join(
                f"{r['method']} {r['to_baseline_quality']['vs_gensim']:.2f}"
                for r in rows
                if r.get("to_baseline_quality")
            )
        )
    _print_rounds({k: v[0] for k, v in runs.items()}, args.walker)
    return rows


def trainer_vs_gensim(args, mesh, results):
    """One pass of our trainer and of gensim over the same walks, ``--repeats`` times each,
    interleaved (JAX, gensim, JAX, ...) so that both see the same drift in machine speed; the
    table gives the median and the fastest pass. Quality is read after the first pass of each."""
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
        f"sample {cfg.sample:g}, one pass; {args.repeats} interleaved repeats)"
    )
    have_gensim = importlib.util.find_spec("gensim") is not None
    if not have_gensim:
        print("gensim is not installed (pip install gensim): timing our trainer alone")
    sentences = gensim_sentences([walks]) if have_gensim else None
    ours, theirs, pairs = [], [], 0
    f1 = {}
    for rep in range(args.repeats):
        tr = SkipGramTrainer(g.num_nodes, cfg, mesh, seed=args.seed)
        tr.compile()
        st = tr.train_round(walks, 0)
        ours.append(st.seconds)
        pairs = st.pairs
        if rep == 0:
            emb = tr.embeddings()[0]
            f1["jax"] = ev.node_classification(emb, g.labels, train_ratios=(0.5,), shuffles=1)
        if have_gensim:
            emb, _, secs = gensim_skipgram(
                sentences, cfg, g.num_nodes, args.gensim_workers, args.seed
            )
            theirs.append(secs)
            if rep == 0:
                f1["gensim"] = ev.node_classification(
                    emb, g.labels, train_ratios=(0.5,), shuffles=1
                )
    # gensim does not count pairs; its sub-sampling and window rule are word2vec's, like ours,
    # so the expected number of pairs of this corpus is the same: use ours.
    rows = {"jax": (ours, f"jaxgraph (JAX, {jax.device_count()} CPU device(s))")}
    if theirs:
        rows["gensim"] = (theirs, f"gensim Word2Vec ({args.gensim_workers} workers)")
    print(
        f"{'trainer':<32} {'median s':>8} {'min s':>6} {'pairs':>12} {'pairs/s (median)':>17} "
        f"{'Mi@50':>6}"
    )
    row = {"repeats": args.repeats, "pairs": pairs, "gensim_workers": args.gensim_workers}
    for name, (secs, label) in rows.items():
        med = float(np.median(secs))
        micro = f1[name][0.5]["micro"]["mean"]
        row[name] = {
            "seconds": secs,
            "median_s": med,
            "pairs_per_s": pairs / med,
            "micro@50": micro,
        }
        print(
            f"{label:<32} {med:>8.2f} {min(secs):>6.2f} {pairs:>12,} {pairs / med:>17,.0f} "
            f"{micro:>6.3f}"
        )
    if theirs:
        print(f"  jax / gensim pairs/s (medians): {np.median(theirs) / np.median(ours):.2f}")
    results["trainer_vs_gensim"] = row


def gensim_sentences(corpus) -> list[list[str]]:
    """The walks of ``corpus`` (a list of :class:`Walks`) as gensim's token lists."""
    return [[str(v) for v in row] for walks in corpus for row in walks.to_lists()]


def gensim_skipgram(sentences, sgns, num_nodes, workers, seed):
    """One pass of gensim's ``Word2Vec`` (skip-gram) over ``sentences``
    (:func:`gensim_sentences`) with the trainer's objective (negative sampling, or hierarchical
    softmax as ``hs=1, negative=0``), window, dimension, negatives, sub-sampling and initial
    learning rate (``sgns``), ``workers`` threads.

    Returns:
      ``(syn0 f32[N, d], seconds to build the vocabulary, seconds to train)``; nodes absent
      from the walks keep zero vectors.

    Raises:
      ImportError: gensim is not installed (an optional benchmark dependency).
    """
    from gensim.models import Word2Vec

    model = Word2Vec(
        vector_size=sgns.dim,
        window=sgns.window,
        sg=1,
        hs=int(sgns.objective == "hierarchical"),
        negative=0 if sgns.objective == "hierarchical" else sgns.negatives,
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


def gensim_row(graph, cfg, rounds, seed, workers, repeats=1):
    """DeepWalk with gensim's ``Word2Vec`` (``workers`` threads) on the walks of ``rounds``
    rounds of the baseline's walker (the same walks as :func:`jaxgraph.embed.run.embed`'s
    baseline), trained in one pass with the same window, dimension, negatives, sub-sampling and
    initial learning rate. Time = walks + vocabulary + training (the conversion of walks to
    gensim's token lists is excluded), with vocabulary + training the median of ``repeats``
    separate trainings (``gensim_seconds`` lists them). None without gensim."""
    if importlib.util.find_spec("gensim") is None:
        print("gensim is not installed (pip install gensim): no gensim row")
        return None
    csr = out_csr(graph)
    starts = np.flatnonzero(np.diff(csr[0]) > 0)
    t0 = time.perf_counter()
    corpus = [random_walks(csr, starts, cfg.walk, seed=seed, round_index=r) for r in range(rounds)]
    t_walks = time.perf_counter() - t0
    sentences = gensim_sentences(corpus)
    trainings, syn0 = [], None
    for _ in range(repeats):
        emb, t_vocab, t_train = gensim_skipgram(sentences, cfg.sgns, graph.num_nodes, workers, seed)
        trainings.append(t_vocab + t_train)
        syn0 = emb if syn0 is None else syn0  # evaluated: the first training
    seconds = t_walks + float(np.median(trainings))
    tokens = sum(w.num_tokens for w in corpus)
    nan = float("nan")
    return {
        "method": f"gensim ({workers} threads)",
        "rounds": rounds,
        "seconds": seconds,
        "gensim_seconds": trainings,
        "tokens": tokens,
        "pairs": None,
        "bytes_host_to_device": 0,
        "bytes_raw": 4 * tokens,
        "bytes_sync": 0,
        "busy_host": nan,
        "busy_device": nan,
        "syn0": syn0,
    }


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


def emulate_devices_for(parts: int) -> None:
    """Emulates as many CPU devices as the run needs, unless ``XLA_FLAGS`` already says: one for
    a one-replica run (XLA's CPU runtime runs a one-device program about twice as slowly on a
    host split into 8 devices), else 8. Call before JAX's first device query."""
    emulate_cpu_devices(1 if parts == 1 else 8)


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
    ap.add_argument(
        "--lr-schedule",
        choices=("round", "linear", "global"),
        default="round",
        help="round: alpha_0 e^(-0.1 r) per round; linear: also decays within each round; "
        "global: one linear decay over all rounds (word2vec's)",
    )
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
    ap.add_argument("--repeats", type=int, default=3, help="timed passes of each trainer")
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
        args.shuffles, args.repeats = 1, 1
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    emulate_devices_for(args.parts)
    mesh = make_mesh(args.parts)
    # What trains the pairs: on "cpu" (a CPU host's default) nothing is copied to a device.
    results = {"args": vars(args), "kernel": _configs(args)[args.walker].sgns.kernel_in_use()}
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
