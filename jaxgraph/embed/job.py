"""``jaxgraph embed``: the presets a run starts from (:data:`PRESETS`), the job (an
:class:`EmbedJob`: a run, its evaluation and its outputs) and :func:`run_job`, which trains,
evaluates and writes the files. The run itself is :func:`jaxgraph.embed.run.embed`.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Literal

from jaxgraph.configfile import check, check_int
from jaxgraph.data.source import load_graph
from jaxgraph.embed.rounds import RoundLog
from jaxgraph.embed.run import (
    EmbedConfig,
    Method,
    cpu_config,
    embed,
    gpu_config,
    load_embed_config,
    published_config,
    save_json,
    save_nodes,
    save_npy,
    save_round_log,
    walk_kind,
)

PRESETS: dict[str, str] = {
    "published": "DeepWalk's published run (10 rounds of one walk of 80 per node, window 10, "
    "d 128, 5 negatives, sample 1e-3, lr 0.025 decayed linearly over the run) in steps of "
    "1,024 pairs, syn0 starting at gensim 4's range, with three changes to word2vec's update: "
    "a row's updates within a step are capped at 4 times one (row_cap 4), a step draws its "
    "pairs from 8 steps' stretch of the walks (interleave 8) and every 4 pairs of a step share "
    "one draw of 5 negatives (shared_negatives 4)",
    "word2vec": "the published run with word2vec's update: no row cap, every pair its own 5 "
    "negatives, a step's pairs drawn from the whole sync period (interleave none; consecutive "
    "pairs, interleave 1, diverge on hub-heavy graphs)",
    "cpu": "walks of 40, window 5, lr 0.025 times exp(-0.1 r) in round r, otherwise published",
    "gpu": "the published run in steps of 16,384 pairs per device, negatives shared by 8 "
    "pairs, row cap 16",
    "openne": "the published run on OpenNE's corpus for node classification (10 walks of 80 "
    "per node trained in 5 passes, gensim's default: here 5 walks per node in each of 10 "
    "rounds); node2vec at p = q = 0.25",
}


def preset(name: str, method: Method = "felog") -> EmbedConfig:
    """The defaults of a run by name (:data:`PRESETS` says what each sets)."""
    if name == "word2vec":
        cfg = published_config(method)
        sgns = dataclasses.replace(cfg.sgns, row_cap=None, shared_negatives=1, interleave=None)
        return cfg.replace(sgns=sgns)
    if name == "openne":
        cfg = published_config(method)
        pq = dict(p=0.25, q=0.25) if method == "node2vec" else {}
        return cfg.replace(walk=dataclasses.replace(cfg.walk, walks_per_node=5, **pq))
    makers = {"published": published_config, "cpu": cpu_config, "gpu": gpu_config}
    if name not in makers:
        raise ValueError(f"unknown --preset {name!r}; expected one of {', '.join(PRESETS)}")
    return makers[name](method)


def base_config(
    method: Method | None = None, *, preset_name: str | None = None, config: str | None = None
) -> EmbedConfig:
    """The config a command line starts from: ``config``'s file, else the preset
    ``preset_name``'s (default ``published``); ``method`` replaces the file's method, and its
    walker with the one the method needs."""
    if config is None:
        return preset(preset_name or "published", method or "felog")
    if preset_name is not None:
        raise ValueError("give --preset or --config, not both (a config file sets every default)")
    cfg = load_embed_config(config)
    if method is not None and method != cfg.method:
        walk = dataclasses.replace(cfg.walk, kind=walk_kind(method))
        cfg = cfg.replace(method=method, walk=walk)
    return cfg


@dataclasses.dataclass(frozen=True)
class EmbedJob:
    """``jaxgraph embed``: a run, its evaluation and its outputs.

    Attributes:
      config: the run (:class:`EmbedConfig`).
      task: the evaluation: auto (nc where the graph has labels, else lp), lp (link
        prediction on a held-out half of the edges), nc (node classification) or none.
      train_ratios: the shares of labelled nodes the node classifier trains on.
      shuffles: the random splits per train ratio.
      retrieval: also report FAISS Hit/MRR/nDCG@K.
      out: write embedding.npy (row i: node i of nodes.txt, the graph's own ids), context.npy,
        nodes.txt, rounds.jsonl and eval.json to this directory.
      quiet: print no per-round progress.
    """

    config: EmbedConfig = EmbedConfig()
    task: Literal["auto", "lp", "nc", "none"] = "auto"
    train_ratios: tuple[float, ...] = (0.1, 0.5, 0.9)
    shuffles: int = 2
    retrieval: bool = False
    out: str | None = None
    quiet: bool = False

    def __post_init__(self):
        check("task", self.task in ("auto", "lp", "nc", "none"), self.task, "auto, lp, nc or none")
        check_int("shuffles", self.shuffles, 1)
        ratios = self.train_ratios
        ok = bool(ratios) and all(isinstance(r, int | float) and 0.0 < r < 1.0 for r in ratios)
        check("train_ratios", ok, ratios, "numbers in (0, 1), e.g. 0.1 0.5")
        if self.out:
            out = Path(self.out)
            if out.exists() and not out.is_dir():
                raise ValueError(f"--out {out} is a file; give a directory for the outputs")
            if blocked := next((d for d in out.parents if d.exists() and not d.is_dir()), None):
                raise ValueError(f"--out {out}: {blocked} is a file, not a directory")


def run_job(job: EmbedJob) -> dict[str, Any]:
    """The ``jaxgraph embed`` command: train, evaluate, write the files of ``job.out`` (see
    :class:`EmbedJob`); returns the summary."""
    from jaxgraph.distributed import is_primary
    from jaxgraph.embed import evaluate as ev
    from jaxgraph.embed import retrieval as rt

    cfg, ratios = job.config, job.train_ratios
    graph = load_graph(cfg.data, seed=cfg.seed)
    if graph.num_edges == 0:
        raise ValueError(f"graph {graph.name!r} has no edges: nothing to walk on")
    task = job.task
    if task == "auto":
        task = "nc" if ev.label_matrix(graph.labels).any() else "lp"
    if task == "nc" and not ev.label_matrix(graph.labels).any():
        raise ValueError(f"--task nc needs node labels; {graph.name!r} has none")
    split = ev.link_prediction_split(graph, 0.5, seed=cfg.seed) if task == "lp" else None
    if task == "nc" and (walks := cfg.walk.walks_per_node * cfg.rounds) <= 10:
        logging.getLogger("jaxgraph").info(
            "node classification of embeddings trained on %d walk%s per node; --preset openne "
            "trains 50 (BlogCatalog Micro/Macro-F1 at 50 %% labels +0.04/+0.07, "
            "experiments/results/nc/)",
            walks,
            "" if walks == 1 else "s",
        )

    def progress(r: RoundLog):
        if not job.quiet:
            print(
                f"round {r.round}: active {r.active}, walks {r.walks}, pairs {r.pairs}, "
                f"loss/pair {r.loss:.4f}, max row norm {r.max_norm:.3g}, {r.seconds:.2f}s, "
                f"next active {r.next_active}",
                flush=True,
            )

    result = embed(cfg, graph if split is None else split.train_graph, log=progress)
    syn0, syn1 = result.syn0, result.syn1
    evaluation: dict[str, Any] = {"task": task}
    if task == "lp":
        # The headline is the dot product, the score that DeepWalk, GraphVite and
        # PyTorch-BigGraph rank links by; cosine is reported beside it.
        evaluation["headline"] = "auc_dot"
        for score in ev.SCORES:
            evaluation[f"auc_{score}"] = ev.link_prediction_auc(split, syn0, score, syn1)
        if job.retrieval:
            evaluation["retrieval"] = rt.edge_retrieval(syn0, split)
    elif task == "nc":
        nc = ev.node_classification(
            syn0, graph.labels, train_ratios=ratios, shuffles=job.shuffles, seed=cfg.seed
        )
        evaluation["node_classification"] = {str(k): v for k, v in nc.items()}
        if job.retrieval:
            evaluation["retrieval"] = rt.label_retrieval(syn0, graph.labels, seed=cfg.seed)
    summary = {
        "dataset": graph.name,
        "method": cfg.method,
        "parts": cfg.parts,
        **result.summary(),
        "evaluation": evaluation,
    }
    if job.out and is_primary():
        out = Path(job.out)
        save_npy(out / "embedding.npy", syn0)
        save_nodes(out / "nodes.txt", graph.ids)
        save_npy(out / "context.npy", syn1)
        save_round_log(out / "rounds.jsonl", result.rounds)
        save_json(out / "eval.json", {**summary, "config": cfg.to_dict()})
    return summary
