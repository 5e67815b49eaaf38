#!/usr/bin/env python
"""Pairs/s of the compiled CPU SGNS kernel beside the JAX program and gensim, on the same pairs.

Pairs come from one DeepWalk walk (length 80) per node of an R-MAT graph with ``N`` nodes
(``--nodes``; 65,536 is ``rmat(scale=16)``) at word2vec's sub-sampling (1e-3) and window
(10): the first walks whose pairs reach ``--pairs``, packed as the trainer packs them into
chunks of ``sync_every = 64`` steps of ``B = 1024`` pairs (the last chunk padded with weight
0). Settings: ``d = 128``, ``K = 5``, row cap 4, interleave 8, shared negatives ``G`` in
``--shared``. Timed, each after a warm-up, median of ``--repeats`` passes from fresh tables:

* **jax**: :func:`jaxgraph.embed.programs.train_program` on one CPU device, chunk by chunk
  (buffers placed per chunk, as the trainer does);
* **kernel**: :func:`jaxgraph.embed.cpu_sgns.train_chunk` with 1 and 2 numba threads;
* **gensim** (if importable): ``Word2Vec(sg=1, hs=0, negative=5, window=10, workers=2)``, one
  pass over the same walks (vocabulary built untimed). gensim does not count pairs: its pairs/s
  divides the kernel's pair count of the same walks by its seconds.

With ``--concurrent``, also the rate per core with both cores busy: the kernel on one thread
and gensim with one worker, each timed in two processes started at once (each process's
pairs/s; the trainer's copies on two cores meet the same contention for the caches and memory).

Prints a markdown table of millions of pairs per second and the load average before the run
(on a shared machine, compare numbers within one run only).

    python experiments/sgns_cpu_kernel.py            # about 2M pairs per timing
    python experiments/sgns_cpu_kernel.py --quick    # about 0.5M pairs per timing (~1-2 min)
    python experiments/sgns_cpu_kernel.py --shared 1 --no-jax --concurrent
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10_000, 65_536])
    ap.add_argument("--shared", type=int, nargs="+", default=[1, 8], help="values of G")
    ap.add_argument("--pairs", type=int, default=2_000_000, help="pairs per timed pass")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="--pairs 500000")
    ap.add_argument("--no-jax", action="store_true", help="skip the JAX program")
    ap.add_argument("--no-gensim", action="store_true", help="skip gensim")
    ap.add_argument(
        "--concurrent",
        action="store_true",
        help="also one-thread kernel and one-worker gensim, two processes at once",
    )
    ap.add_argument("--engine", choices=("kernel", "gensim"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.pairs = 500_000
    return args


DIM = 128
WINDOW = 10
NEGATIVES = 5
BATCH = 1024
SYNC_EVERY = 64
ROW_CAP = 4
SPAN = 8  # interleave
SAMPLE = 1e-3
LR = 0.025


def corpus(num_nodes: int, pairs: int, seed: int = 0):
    """The walks and pairs of the benchmark: ``(walks, inputs, outputs, counts)`` with the
    first walks whose pairs reach ``pairs`` (all of them if fewer)."""
    import numpy as np

    from jaxgraph.data import rmat
    from jaxgraph.embed import _hostrng as hr
    from jaxgraph.embed.corpus import (
        corpus_counts,
        keep_probability,
        pairs_per_walk,
        skipgram_pairs,
    )
    from jaxgraph.embed.walks import WalkConfig, Walks, out_csr, random_walks

    graph = rmat(num_nodes=num_nodes, num_features=0, num_classes=2, seed=seed)
    csr = out_csr(graph)
    starts = np.flatnonzero(np.diff(csr[0]) > 0)
    walks = random_walks(csr, starts, WalkConfig(walk_length=80, walks_per_node=1), seed=seed)
    counts = corpus_counts(walks, num_nodes)
    keep = keep_probability(counts, SAMPLE)
    key = hr.round_key(seed, hr.PURPOSE_PAIRS, 0)
    ids = np.arange(walks.num_walks)
    per_walk = pairs_per_walk(walks, ids, keep, WINDOW, key)
    take = int(np.searchsorted(np.cumsum(per_walk), pairs)) + 1
    sub = Walks(walks.nodes[:take], walks.lengths[:take])
    inputs, outputs = skipgram_pairs(sub, ids[:take], keep, WINDOW, key, per_walk[:take])
    return sub, inputs, outputs, counts


def chunks(inputs, outputs):
    """``(inputs int32[C, S, B], outputs, weights f32[C, S, B], steps int[C])``."""
    import numpy as np

    size = SYNC_EVERY * BATCH
    c = -(-inputs.size // size)
    x_in, x_out = (np.zeros((c, SYNC_EVERY, BATCH), np.int32) for _ in range(2))
    x_w = np.zeros((c, SYNC_EVERY, BATCH), np.float32)
    x_in.reshape(-1)[: inputs.size] = inputs
    x_out.reshape(-1)[: outputs.size] = outputs
    x_w.reshape(-1)[: inputs.size] = 1.0
    steps = np.minimum(SYNC_EVERY, -(-(inputs.size - size * np.arange(c)) // BATCH))
    return x_in, x_out, x_w, steps


def _median_time(run, repeats):
    run(warm_up=True)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(warm_up=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _init(num_nodes, seed=0):
    """Tables as the trainer's host replicas hold them: page-aligned, so rows start cache
    lines."""
    import numpy as np

    from jaxgraph.embed._kernel_args import page_aligned

    rng = np.random.default_rng(seed)
    half = 0.5 / DIM
    syn0 = page_aligned((num_nodes, DIM))
    syn0[...] = rng.uniform(-half, half, (num_nodes, DIM))
    return syn0, page_aligned((num_nodes, DIM), fill=0)


def time_kernel(num_nodes, data, table, share, threads, repeats):
    """Median seconds of a pass of :func:`cpu_sgns.train_chunk` over every chunk."""
    import numpy as np

    from jaxgraph.embed.cpu_sgns import train_chunk

    x_in, x_out, x_w, steps = data
    lrs = np.full(SYNC_EVERY, LR, np.float32)

    def run(warm_up):
        syn0, syn1 = _init(num_nodes)
        for c in range(1 if warm_up else len(steps)):
            buffers = (x_in[c], x_out[c], x_w[c], lrs, int(steps[c]), 0x5EED, *table)
            options = (NEGATIVES, share, SPAN, ROW_CAP, threads)
            train_chunk(syn0, syn1, *buffers, *options, first_step=c * SYNC_EVERY)

    return _median_time(run, repeats)


def time_jax(num_nodes, data, table, share, repeats):
    """Median seconds of a pass of ``train_program`` (one CPU device) over every chunk."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxgraph.embed.programs import train_program
    from jaxgraph.embed.sgns import NegativeTable, Tables
    from jaxgraph.mesh import make_mesh

    mesh = make_mesh(1)
    axis = mesh.axis_names[0]
    shard, rep = NamedSharding(mesh, P(axis)), NamedSharding(mesh, P())
    program = train_program(mesh, axis, NEGATIVES, ROW_CAP, share, SPAN)
    x_in, x_out, x_w, steps = data
    lr = jax.device_put(np.full(SYNC_EVERY, LR, np.float32), rep)
    output = NegativeTable(*(jax.device_put(a, rep) for a in table))
    key = jax.device_put(jax.random.key(0), rep)

    def run(warm_up):
        syn0, syn1 = _init(num_nodes)
        tables = Tables(*(jax.device_put(t[None], shard) for t in (syn0, syn1)))
        for c in range(1 if warm_up else len(steps)):
            buffers = (jax.device_put(a[c][None], shard) for a in (x_in, x_out, x_w))
            scalars = (jax.device_put(np.int32(v), rep) for v in (steps[c], c * SYNC_EVERY))
            tables, loss = program(tables, *buffers, lr, *scalars, key, output)
        jax.block_until_ready((tables, loss))

    return _median_time(run, repeats)


def time_gensim(walks, workers, repeats):
    """Median seconds of gensim's ``Word2Vec.train`` (one pass) over the walks, after an
    untimed pass; each pass builds its vocabulary untimed."""
    from gensim.models import Word2Vec

    sentences = [[str(v) for v in row] for row in walks.to_lists()]
    options = dict(vector_size=DIM, window=WINDOW, sg=1, hs=0, negative=NEGATIVES)
    options.update(sample=SAMPLE, min_count=0, alpha=LR, workers=workers, seed=0)
    seconds = []
    for _ in range(repeats + 1):
        model = Word2Vec(**options)
        model.build_vocab(sentences)
        t0 = time.perf_counter()
        model.train(sentences, total_examples=len(sentences), epochs=1)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds[1:])


def _one_engine(args) -> None:
    """``--engine``: one timing of the one-thread kernel or one-worker gensim on the first of
    ``--nodes`` and ``--shared``, printed as a JSON line (a process of ``--concurrent``)."""
    from jaxgraph.embed.corpus import alias_table, negative_weights

    n, share = args.nodes[0], args.shared[0]
    walks, inputs, outputs, counts = corpus(n, args.pairs)
    if args.engine == "gensim":
        seconds = time_gensim(walks, 1, args.repeats)
    else:
        table = alias_table(negative_weights(counts))
        seconds = time_kernel(n, chunks(inputs, outputs), table, share, 1, args.repeats)
    print(json.dumps({"pairs": int(inputs.size), "seconds": seconds}))


def concurrent(engine: str, num_nodes: int, share: int, args) -> list[float]:
    """Pairs/s of each of two processes timing ``engine`` (one thread) at once."""
    command = [sys.executable, __file__, "--engine", engine, "--nodes", str(num_nodes)]
    command += ["--shared", str(share), "--pairs", str(args.pairs)]
    command += ["--repeats", str(args.repeats)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [proc.communicate(timeout=3600)[0] for proc in procs]  # both end before any check
    if any(proc.returncode for proc in procs):
        codes = [proc.returncode for proc in procs]
        raise SystemExit(f"{' '.join(command)} exited with {codes}")
    lines = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    return [line["pairs"] / line["seconds"] for line in lines]


def main(argv=None):
    args = _args(argv)
    if args.engine:
        return _one_engine(args)
    import numba

    from jaxgraph.embed.corpus import alias_table, negative_weights

    have_gensim = not args.no_gensim and importlib.util.find_spec("gensim") is not None
    threads = [t for t in (1, 2) if t <= numba.config.NUMBA_NUM_THREADS]
    load = os.getloadavg()
    print(f"load average before the run: {load[0]:.2f} ({os.cpu_count()} cores)")
    header = ["N", "G", "pairs"]
    header += [] if args.no_jax else ["jax (1 CPU device)"]
    header += [f"kernel {t} thread{'s' * (t > 1)}" for t in threads]
    header += ["gensim 2 workers"] if have_gensim else []
    engines = ["kernel"] + (["gensim"] if have_gensim else []) if args.concurrent else []
    header += [f"{e} 1 thread, each of 2 processes at once" for e in engines]
    rows = []
    for n in args.nodes:
        walks, inputs, outputs, counts = corpus(n, args.pairs)
        data = chunks(inputs, outputs)
        table = alias_table(negative_weights(counts))
        gensim_s = time_gensim(walks, 2, args.repeats) if have_gensim else None
        for share in args.shared:
            cells = [f"{n:,}", str(share), f"{inputs.size:,}"]
            seconds = [] if args.no_jax else [time_jax(n, data, table, share, args.repeats)]
            seconds += [time_kernel(n, data, table, share, t, args.repeats) for t in threads]
            seconds += [] if gensim_s is None else [gensim_s]
            cells += [f"{inputs.size / s / 1e6:.2f}" for s in seconds]
            for engine in engines:
                cells.append(
                    ", ".join(f"{r / 1e6:.2f}" for r in concurrent(engine, n, share, args))
                )
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    print(f"\nMillions of pairs per second (median of {args.repeats}, after a warm-up).")
    if have_gensim:
        print("gensim: the kernel's pair count of the same walks over gensim's train seconds.")
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
