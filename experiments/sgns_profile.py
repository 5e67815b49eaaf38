#!/usr/bin/env python
"""Where a skip-gram round's time goes on this machine, beside gensim on the same walks.

A round of ``SkipGramTrainer`` (its JAX programs, ``kernel="jax"``; ``cli_vs_gensim.py
--profile`` splits the CPU kernel's run) over ``--walks-per-node`` walks of every node (after one
untimed round on the same walks), at gensim's published settings (window 10, d = 128, 5
negatives) unless told otherwise, with every device program timed as the trainer calls it
(each call waited for): the training chunks (``S`` steps of ``B`` pairs per device), the
periodic merges and the round's closing merge, the host's pair building, and the rest
(buffers, transfers, dispatch). Three trainers run on the same walks:

* ``P`` devices, ``AllSync`` as the trainer runs it (``syn0`` merged at the inputs trained
  since the last merge);
* ``P`` devices merging every row of both tables at every sync (the cost before that);
* one device (its periodic merges are skipped: one replica needs none),

then gensim's ``Word2Vec`` (``--gensim-workers`` threads) on the same walks, whose pairs/s
counts jaxgraph's pairs of them (as ``sgns_vs_gensim.py`` does). The last lines give the
ceilings these parts imply: the ``P`` devices' training program without its merges, and ``P``
copies of one device's (which the replicas do not reach where their tables, ``P`` times one
device's, leave the caches).

    PYTHONPATH=experiments python experiments/sgns_profile.py --dataset rmat --rmat-scale 16
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
    ap.add_argument("--dataset", default="rmat", help="ca-astroph, blogcatalog or rmat")
    ap.add_argument("--rmat-scale", type=int, default=16)
    ap.add_argument("--walks-per-node", type=int, default=1)
    ap.add_argument("--walk-length", type=int, default=80)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--shared-negatives", type=int, default=8)
    ap.add_argument("--sync-every", type=int, default=64)
    ap.add_argument("--parts", type=int, default=2, help="emulated devices")
    ap.add_argument("--gensim-workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="JSON file for the figures")
    return ap.parse_args(argv)


class _Timed:
    """Wraps a trainer program: accumulates the seconds of its calls, each waited for."""

    def __init__(self, program):
        self.program, self.seconds, self.calls = program, 0.0, 0

    def __call__(self, *args):
        import jax

        t0 = time.perf_counter()
        out = jax.block_until_ready(self.program(*args))
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out

    def __getattr__(self, name):
        return getattr(self.program, name)


@dataclasses.dataclass(frozen=True)
class WholeTableSync:
    """AllSync's rule as a plain :class:`~jaxgraph.embed.merge.TableSync`, which the
    trainer runs as given: every row of both tables at every sync."""

    merge: str

    @property
    def needs_anchor(self) -> bool:
        return self.merge != "mean"

    def __call__(self, tables, anchor, *, axis_name):
        from jaxgraph.embed.merge import merge_rows

        return merge_rows(tables, anchor, self.merge, axis_name=axis_name)

    def rows(self, num_nodes: int) -> int:
        return 2 * num_nodes


def profile_round(trainer, walks) -> dict:
    """Trains a round of ``walks`` untimed (the first round of a process runs up to 1.5x
    slower: fresh pages, cold caches), then a second one with every device program of
    ``trainer`` timed."""
    trainer.train_round(walks, 0)
    names = {
        "train": "train",
        "merge_periodic": "periodic_sync",
        "merge_input_rows": "input_rows_sync",
        "merge_full": "full_sync",
    }
    timed = {key: _Timed(getattr(trainer.programs, attr)) for key, attr in names.items()}
    timed = {key: t for key, t in timed.items() if t.program is not None}
    trainer.programs = trainer.programs._replace(**{names[key]: t for key, t in timed.items()})
    st = trainer.train_round(walks, 1)
    parts = {key: {"seconds": t.seconds, "calls": t.calls} for key, t in timed.items()}
    busy = sum(t.seconds for t in timed.values()) + st.seconds_pairs
    return {
        "seconds": st.seconds,
        "pairs": st.pairs,
        "pairs_per_s": st.pairs / st.seconds,
        "steps": st.steps,
        "syncs": st.syncs,
        "sync_rows": st.sync_rows,
        "loss_per_pair": st.loss,
        "pairs_on_host_s": st.seconds_pairs,
        "other_s": st.seconds - busy,
        **parts,
    }


def _print(name, r, num_nodes):
    per = lambda key: (  # noqa: E731
        f"{r[key]['seconds']:6.2f} s in {r[key]['calls']:4d} calls "
        f"({1e3 * r[key]['seconds'] / max(r[key]['calls'], 1):6.1f} ms each)"
    )
    train_rate = r["pairs"] / r["train"]["seconds"]
    print(
        f"{name}: {r['seconds']:.2f} s, {r['pairs_per_s'] / 1e6:.2f}M pairs/s, "
        f"loss/pair {r['loss_per_pair']:.3f}, {r['syncs']} merges of "
        f"{r['sync_rows'] / max(r['syncs'], 1) / num_nodes:.2f} N rows on average"
    )
    print(f"  training chunks  {per('train')}: {train_rate / 1e6:.2f}M pairs/s inside")
    for key in ("merge_periodic", "merge_input_rows", "merge_full"):
        if key in r and r[key]["calls"]:
            print(f"  {key:<16} {per(key)}")
    print(f"  pairs on host    {r['pairs_on_host_s']:6.2f} s;  the rest {r['other_s']:6.2f} s")


def main(argv=None):
    args = _args(argv)
    emulate_cpu_devices(args.parts)

    import numpy as np
    from embed_table import gensim_sentences, gensim_skipgram

    from jaxgraph.data import load_dataset
    from jaxgraph.data.synthetic import rmat
    from jaxgraph.embed.sgns import SkipGramConfig
    from jaxgraph.embed.skipgram import SkipGramTrainer
    from jaxgraph.embed.walks import WalkConfig, out_csr, random_walks
    from jaxgraph.mesh import make_mesh

    if args.dataset == "rmat":
        s = args.rmat_scale
        graph = rmat(scale=s, num_edges=16 * 2**s, seed=0, name=f"rmat{s}")
    else:
        graph = load_dataset(args.dataset)
    csr = out_csr(graph)
    starts = np.flatnonzero(np.diff(csr[0]) > 0)
    walk_cfg = WalkConfig(walk_length=args.walk_length, walks_per_node=args.walks_per_node)
    walks = random_walks(csr, starts, walk_cfg, seed=args.seed)
    cfg = SkipGramConfig(
        dim=args.dim,
        window=args.window,
        init_scale=1.0,
        row_cap=4,
        shared_negatives=args.shared_negatives,
        interleave=8,
        sync_every=args.sync_every,
        merge="sum",
        kernel="jax",  # the device programs this script times
    )
    n = graph.num_nodes
    table_mb = n * args.dim * 4 / 2**20
    print(
        f"{graph.name}: {n:,} nodes ({table_mb:.1f} MiB per table), {walks.num_tokens:,} "
        f"tokens; {cfg}"
    )
    runs = {}
    for name, parts, sync in (
        (f"{args.parts} devices", args.parts, None),
        (f"{args.parts} devices, every row merged", args.parts, WholeTableSync("sum")),
        ("1 device", 1, None),
    ):
        tr = SkipGramTrainer(n, cfg, make_mesh(parts), seed=args.seed, sync=sync)
        tr.compile()
        runs[name] = profile_round(tr, walks)
        _print(name, runs[name], n)
    pairs = runs["1 device"]["pairs"]
    if importlib.util.find_spec("gensim") is not None:
        sentences = gensim_sentences([walks])
        _, _, secs = gensim_skipgram(sentences, cfg, n, args.gensim_workers, args.seed)
        runs["gensim"] = {"seconds": secs, "pairs_per_s": pairs / secs}
        print(
            f"gensim, {args.gensim_workers} threads: {secs:.2f} s, "
            f"{pairs / secs / 1e6:.2f}M pairs/s (jaxgraph's pairs of the same walks)"
        )
    else:
        print("gensim is not installed (pip install gensim): no baseline")
    gensim = runs.get("gensim", {}).get("pairs_per_s")
    over = lambda rate: f" = {rate / gensim:.2f}x gensim's" if gensim else ""  # noqa: E731
    one, many = runs["1 device"], runs[f"{args.parts} devices"]
    for what, rate in (
        (f"{args.parts} devices' training chunks alone", many["pairs"] / many["train"]["seconds"]),
        (f"{args.parts} x one device's", args.parts * one["pairs"] / one["train"]["seconds"]),
    ):
        print(f"ceiling, {what} (no merges): {rate / 1e6:.2f}M pairs/s{over(rate)}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"graph": graph.name, "nodes": n, "tokens": int(walks.num_tokens), **vars(args)}
        meta["out"] = str(args.out)
        args.out.write_text(json.dumps({"settings": meta, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
