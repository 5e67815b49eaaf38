"""FaBC compression ratios: the analogue of FeLoG's Table 6 on the bundled graphs and an R-MAT
graph of a million nodes.

For every graph and walker (DeepWalk; node2vec with a strong return bias, ``p = 0.25, q = 4``,
whose walks backtrack; node2vec exploring outwards, ``p = 4, q = 0.25``) one walk of length
``L`` starts at every node of degree > 0. Reported per corpus:

* the measured ratio ``S(k) / S_0`` (compressed over raw ``4 T`` bytes, Eq. 6) for per-walk top-1,
  top-2 and top-3 and for the ``k`` that Eq. 8 chooses, with Eq. 7's prediction beside it;
* the corpus-wide reading (one hot set for the whole corpus) for the chosen ``k``;
* host encode throughput and device decode throughput (the reference decode on CPU, the Pallas
  kernel where the backend has one), and a full round-trip check ``decode(encode(w)) == w``.

Timings exclude numba and XLA compilation (the top-k encodes warm numba up; the decode is
compiled for the corpus's shape before it is timed).

    python experiments/fabc_table.py --quick    # Cora + BlogCatalog, L = 40
    python experiments/fabc_table.py            # + PubMed, ca-AstroPh, R-MAT 2^20 nodes, L = 80
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from jaxgraph.data import load_dataset, rmat
from jaxgraph.embed.compress import (
    decode_on_device,
    encode,
    frequency_profile,
    ratio_table,
    raw_bytes,
)
from jaxgraph.embed.walks import WalkConfig, Walks, random_walks

WALKERS = {
    "deepwalk": dict(kind="deepwalk"),
    "node2vec p=0.25 q=4": dict(kind="node2vec", p=0.25, q=4.0),
    "node2vec p=4 q=0.25": dict(kind="node2vec", p=4.0, q=0.25),
}


def load(name: str, rmat_scale: int):
    if name == "rmat":
        return rmat(scale=rmat_scale, seed=0, name=f"rmat_2^{rmat_scale}")
    return load_dataset(name)


def measure(walks: Walks) -> dict:
    """Ratios (:func:`ratio_table`, per walk and corpus-wide), the per-walk frequency profile
    and the codec throughput of one corpus."""
    raw = raw_bytes(walks)
    per_walk = ratio_table(walks)
    corpus = ratio_table(walks, ks=(), scope="corpus")
    k = int(per_walk["chosen_k"])
    out: dict = {
        "walks": walks.num_walks,
        "tokens": walks.num_tokens,
        "raw_mb": raw / 1e6,
        "p1_p3": [float(x) for x in frequency_profile(walks)[:3]],
        **{f"top{j}": per_walk[f"top{j}"] for j in (1, 2, 3)},
        "chosen_k": k,
        "chosen": per_walk["chosen"],
        "predicted": per_walk["predicted_chosen"],
        "corpus_chosen_k": int(corpus["chosen_k"]),
        "corpus_chosen": corpus["chosen"],
    }
    t0 = time.perf_counter()
    comp = encode(walks, k)
    out["encode_s"] = time.perf_counter() - t0
    on_device = jax.device_put(comp)
    jax.block_until_ready(on_device)
    decode_on_device(on_device)[0].block_until_ready()  # compile for this shape
    t0 = time.perf_counter()
    nodes, lengths = decode_on_device(on_device)
    nodes.block_until_ready()
    out["decode_s"] = time.perf_counter() - t0
    ref = np.asarray(walks.nodes)
    valid = np.arange(ref.shape[1])[None, :] < np.asarray(walks.lengths)[:, None]
    out["roundtrip_ok"] = bool(
        np.array_equal(np.asarray(lengths), np.asarray(walks.lengths))
        and np.array_equal(np.asarray(nodes)[valid], ref[valid])
    )
    return out


def markdown(rows: list[dict], args) -> str:
    lines = [
        "# FaBC compression ratios (FeLoG Table 6 analogue)",
        "",
        f"One walk of length {args.walk_length} from every node of degree > 0, seed {args.seed}. "
        "Ratios are measured compressed / raw bytes (raw = 4 bytes per token); `k` = Eq. 8's "
        "choice (per-walk ranks), `Eq. 7` = its predicted ratio. `p1..p3` = share of tokens "
        "held by each walk's 1st/2nd/3rd most frequent id. Encode on the host (numba), decode "
        f"on `{jax.default_backend()}` ({jax.devices()[0].device_kind}).",
        "",
        "| graph | nodes | walker | tokens | p1 / p2 / p3 | top-1 | top-2 | top-3 | k | chosen "
        "| Eq. 7 | corpus-wide (k) | encode MB/s | decode MB/s | round trip |",
        "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        p = " / ".join(f"{x:.3f}" for x in r["p1_p3"])
        lines.append(
            f"| {r['graph']} | {r['nodes']:,} | {r['walker']} | {r['tokens']:,} | {p} | "
            f"{r['top1']:.3f} | {r['top2']:.3f} | {r['top3']:.3f} | {r['chosen_k']} | "
            f"{r['chosen']:.3f} | {r['predicted']:.3f} | "
            f"{r['corpus_chosen']:.3f} ({r['corpus_chosen_k']}) | "
            f"{r['raw_mb'] / r['encode_s']:.0f} | {r['raw_mb'] / r['decode_s']:.0f} | "
            f"{'ok' if r['roundtrip_ok'] else 'FAILED'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--datasets", nargs="+", default=["cora", "pubmed", "blogcatalog", "ca-astroph", "rmat"]
    )
    ap.add_argument("--walkers", nargs="+", default=list(WALKERS), choices=list(WALKERS))
    ap.add_argument("--walk-length", type=int, default=80)
    ap.add_argument("--rmat-scale", type=int, default=20, help="R-MAT with 2^scale nodes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="experiments/results/fabc_table")
    ap.add_argument("--quick", action="store_true", help="Cora and BlogCatalog, L = 40")
    args = ap.parse_args(argv)
    if args.quick:
        args.datasets, args.walk_length = ["cora", "blogcatalog"], 40
        args.out += "_quick"
    rows = []
    for name in args.datasets:
        t0 = time.perf_counter()
        g = load(name, args.rmat_scale)
        starts = np.flatnonzero(g.out_degree() > 0)
        print(
            f"{name}: {g.num_nodes:,} nodes, {g.num_edges:,} directed edges "
            f"({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        for walker in args.walkers:
            cfg = WalkConfig(walk_length=args.walk_length, **WALKERS[walker])
            t0 = time.perf_counter()
            walks = random_walks(g, starts, cfg, seed=args.seed)
            walk_s = time.perf_counter() - t0
            row = {"graph": name, "nodes": g.num_nodes, "walker": walker, "walk_s": walk_s}
            row.update(measure(walks))
            rows.append(row)
            print(
                f"  {walker:<20} walks {walk_s:5.1f}s  top1 {row['top1']:.3f} top2 "
                f"{row['top2']:.3f} top3 {row['top3']:.3f}  k={row['chosen_k']} -> "
                f"{row['chosen']:.3f} (Eq.7 {row['predicted']:.3f})  encode "
                f"{row['encode_s']:.2f}s decode {row['decode_s']:.2f}s  round trip "
                f"{'ok' if row['roundtrip_ok'] else 'FAILED'}",
                flush=True,
            )
            del walks
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(markdown(rows, args))
    print(f"wrote {out}.md / .json")
    if not all(r["roundtrip_ok"] for r in rows):
        raise SystemExit("round trip failed")


if __name__ == "__main__":
    main()
