"""Walk throughput on a bundled graph: DeepWalk and node2vec, walks/s and tokens/s.

    python experiments/bench_walks.py --dataset blogcatalog --walks-per-node 10 --walk-length 80

Compilation (numba, cached on disk after the first run) is excluded; the best of ``--repeats``
runs is reported, with the numba thread count.
"""

from __future__ import annotations

import argparse

import numba

from jaxgraph.data import load_dataset
from jaxgraph.embed.walks import WalkConfig, walk_throughput


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="blogcatalog")
    ap.add_argument("--walks-per-node", type=int, default=10)
    ap.add_argument("--walk-length", type=int, default=80)
    ap.add_argument("--p", type=float, default=0.25)
    ap.add_argument("--q", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="Cora, 2 walks per node, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.dataset, args.walks_per_node, args.repeats = "cora", 2, 1
    g = load_dataset(args.dataset)
    print(f"{g!r}; numba threads: {numba.get_num_threads()}")
    cols = ("walks", "tokens", "seconds", "walks/s", "tokens/s")
    print(f"{'walker':<22} " + " ".join(f"{c:>10}" for c in cols))
    for kind, p, q in (
        ("deepwalk", 1.0, 1.0),
        ("node2vec", 1.0, 1.0),
        ("node2vec", args.p, args.q),
    ):
        cfg = WalkConfig(kind, args.walk_length, args.walks_per_node, p, q)
        r = walk_throughput(g, cfg, repeats=args.repeats)
        name = kind if kind == "deepwalk" else f"node2vec p={p:g} q={q:g}"
        print(
            f"{name:<22} {int(r['walks']):>10,} {int(r['tokens']):>10,} {r['seconds']:>10.2f} "
            f"{r['walks_per_s']:>10,.0f} {r['tokens_per_s']:>10,.0f}"
        )


if __name__ == "__main__":
    main()
