"""A user's own graph files, end to end through the command line: each format trains (where it
has features and labels), embeds and partitions, and every output comes back keyed by the
node ids of the user's file."""

import csv
import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp

from jaxgraph.cli import main

N = 48  # two planted communities of 24 nodes


def _graph(seed=0):
    """Undirected edges ``(i, j)``, i < j, of a two-block graph, features and labels."""
    rng = np.random.default_rng(seed)
    labels = np.repeat([0, 1], N // 2)
    same = labels[:, None] == labels[None, :]
    upper = np.triu(rng.random((N, N)) < np.where(same, 0.3, 0.02), k=1)
    ring = np.arange(N - 1)  # a path through all nodes keeps the graph connected
    upper[ring, ring + 1] = True
    src, dst = np.nonzero(upper)
    feats = rng.normal(size=(N, 6)).astype(np.float32) + labels[:, None]
    return src, dst, feats, labels


def _pyg(tmp_path):
    src, dst, feats, labels = _graph()
    path = tmp_path / "two_blocks.npz"
    both = np.stack([np.r_[src, dst], np.r_[dst, src]])
    np.savez(path, edge_index=both, x=feats, y=labels)
    return [str(path)], [str(i) for i in range(N)], True


def _edge_list(tmp_path):
    """String ids whose sorted order is not the numeric one, a comment and a weight column."""
    src, dst, feats, labels = _graph()
    name = [f"user-{(i * 7) % N}" for i in range(N)]
    rows = "".join(f"{name[s]}\t{name[d]}\t1.0\n" for s, d in zip(src, dst, strict=True))
    path = tmp_path / "friends.tsv"
    path.write_text("# who knows whom\n" + rows)
    order = sorted(range(N), key=lambda i: name[i])  # .npy rows follow the sorted ids
    np.save(tmp_path / "x.npy", feats[order])
    (tmp_path / "y.tsv").write_text("".join(f"{name[i]}\t{'ab'[labels[i]]}\n" for i in range(N)))
    argv = [str(path), "--undirected", "--features", str(tmp_path / "x.npy")]
    return [*argv, "--labels", str(tmp_path / "y.tsv")], name, True


def _scipy(tmp_path):
    src, dst, _, _ = _graph()
    adj = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(N, N))
    path = tmp_path / "adjacency.npz"
    sp.save_npz(path, (adj + adj.T).tocsr())
    return [str(path)], [str(i) for i in range(N)], False


def _ogb(tmp_path):
    src, dst, feats, labels = _graph()
    raw = tmp_path / "ogbn-blocks" / "raw"
    raw.mkdir(parents=True)

    def gz(name, rows):
        (raw.parent / name).parent.mkdir(parents=True, exist_ok=True)
        (raw.parent / name).write_bytes(gzip.compress("".join(rows).encode()))

    gz("raw/edge.csv.gz", [f"{s},{d}\n" for s, d in zip(src, dst, strict=True)])
    gz("raw/num-node-list.csv.gz", [f"{N}\n"])
    gz("raw/node-feat.csv.gz", [",".join(f"{v:.6f}" for v in row) + "\n" for row in feats])
    gz("raw/node-label.csv.gz", [f"{y}\n" for y in labels])
    perm = np.random.default_rng(1).permutation(N)
    for part, rows in (("train", perm[:24]), ("valid", perm[24:36]), ("test", perm[36:])):
        gz(f"split/random/{part}.csv.gz", [f"{i}\n" for i in rows])
    return [str(raw.parent), "--undirected"], [str(i) for i in range(N)], True


@pytest.mark.parametrize("write", [_pyg, _edge_list, _scipy, _ogb], ids=lambda f: f.__name__[1:])
def test_graph_file_trains_embeds_and_partitions(write, tmp_path, capsys):
    graph_args, ids, labelled = write(tmp_path)
    graph = ["--graph", *graph_args]

    if labelled:
        run = tmp_path / "run"
        argv = ["train", *graph, "--parts", "2", "--epochs", "3", "--hidden", "8"]
        assert main([*argv, "--no-progress", "--workdir", str(run)]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["epochs"] == 3 and summary["parts"] == 2
        assert summary["num_nodes"] == N
        assert 0.0 <= summary["test_at_best"] <= 1.0

    out = tmp_path / "emb"
    argv = ["embed", *graph, "--method", "deepwalk", "--parts", "1", "--rounds", "1"]
    argv += ["--walks-per-node", "2", "--walk-length", "8", "--window", "3", "--dim", "8"]
    assert main([*argv, "--task", "none", "--out", str(out)]) == 0
    capsys.readouterr()
    rows = np.load(out / "embedding.npy")
    nodes = (out / "nodes.txt").read_text().splitlines()
    assert rows.shape == (N, 8) and np.isfinite(rows).all()
    assert sorted(nodes) == sorted(ids)  # row i is the user's node nodes[i]

    parts_csv = tmp_path / "parts.csv"
    assert main(["partition", *graph, "--parts", "2", "--out", str(parts_csv)]) == 0
    capsys.readouterr()
    with parts_csv.open() as f:
        table = {row["node"]: int(row["part"]) for row in csv.DictReader(f)}
    assert sorted(table) == sorted(ids) and set(table.values()) == {0, 1}
    # METIS on two planted blocks: most of each community's nodes share a part.
    src, dst, _, labels = _graph()
    by_id = {ids[i]: labels[i] for i in range(N)}
    agree = sum(table[k] == by_id[k] for k in table) / N
    assert max(agree, 1 - agree) > 0.8, agree
