"""Smoke runs of the experiment scripts in their ``--quick`` modes (slow: minutes each).

Each script runs in its own process, as a researcher would start it, and must exit 0 and
write what it promises. Run with ``python -m pytest -m slow tests/test_experiments.py``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"

pytestmark = pytest.mark.slow


def _run(script: str, *args: str, timeout: float = 900) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(EXPERIMENTS / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_accuracy_table_quick(tmp_path):
    out = tmp_path / "acc.md"
    _run("accuracy_table.py", "--quick", "--out", str(out))
    text = out.read_text()
    assert "| cora | 1 |" in text and "| cora | 8 |" in text


def test_adaqp_table_quick(tmp_path):
    prefix = tmp_path / "adaqp"
    _run("adaqp_table.py", "--quick", "--out", str(prefix))
    rows = prefix.with_suffix(".csv").read_text().splitlines()
    assert len(rows) == 1 + 3  # header + vanilla, quant-4, adaqp
    assert prefix.with_suffix(".md").exists()
    # A resumed grid with every run already in the CSV trains nothing and keeps them all.
    out = _run("adaqp_table.py", "--quick", "--resume", "--out", str(prefix))
    assert "resuming: 3 runs" in out and ": acc " not in out  # no run trained
    assert prefix.with_suffix(".csv").read_text().splitlines() == rows


def test_adaqp_gradient_error_quick(tmp_path):
    prefix = tmp_path / "grad"
    _run("adaqp_gradient_error.py", "--quick", "--out", str(prefix))
    with prefix.with_suffix(".csv").open() as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    assert set(rows) == {
        "adaqp",
        "adaqp λ0.9",
        "adaqp λ0.99",
        "adaqp squares",  # the seed's sum-of-squares message weight, same traces
        "random",
        "2-bit",
        "4-bit",
        "8-bit",
    }
    err = {m: float(r["rel_error"]) for m, r in rows.items()}
    # The program's variance term at work: a larger λ buys a smaller error, and the default
    # λ 0.5 beats random widths (4x on this run) while moving fewer bytes.
    assert err["adaqp λ0.99"] < err["adaqp λ0.9"] / 10 < err["adaqp"] / 20
    assert err["adaqp"] < err["random"] / 2
    nbytes = {m: float(r["bytes_vs_vanilla"]) for m, r in rows.items()}
    assert nbytes["adaqp"] < nbytes["random"]
    # Stochastic rounding's variance scales as 1 / (2^b - 1)^2: 9x from 2 to 4 bits, 289x
    # from 4 to 8 (the gradient error follows, within the spread of 8 keys).
    assert err["8-bit"] < err["4-bit"] / 20 < err["2-bit"] / 40
    for r in rows.values():  # unbiased: the 8-key mean's error is about 1/8 of one key's
        assert float(r["mean_bias"]) < 3 * float(r["unbiased_share"])
    assert prefix.with_suffix(".md").exists()


def test_bench_data_quick():
    out = _run("bench_data.py", "--quick", "--json")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    names = [r.get("generator") or r["partition"] for r in records]
    assert names == [
        "dc_sbm",
        "dc_sbm_n50000_c5 metis P=8",
        "dc_sbm_n50000_c5 halo plan P=8",
        "dc_sbm_n50000_c5 random P=8",
        "rmat",
        "pubmed metis P=8",
        "pubmed random P=8",
    ]
    sbm, metis, _, random, rmat, pub_metis, pub_random = records
    # --quick: 50,000 nodes and at most 1,000,000 directed edges (dc_sbm draws N * deg / 2
    # pairs and drops repeats and self-loops, about 5 % of them at this size).
    for gen, features in ((sbm, 32), (rmat, 0)):
        assert gen["nodes"] == 50_000 and gen["features"] == features
        assert 0 < gen["directed_edges"] <= 1_000_000
        assert gen["mean_degree"] == pytest.approx(gen["directed_edges"] / 50_000, abs=0.005)
        assert gen["max_degree"] >= gen["mean_degree"]
    assert sbm["directed_edges"] > 0.9e6
    pubmed_edges = 2 * 44_324  # directed, as datasets.py documents
    for part, edges in (
        (metis, sbm["directed_edges"]),
        (random, sbm["directed_edges"]),
        (pub_metis, pubmed_edges),
        (pub_random, pubmed_edges),
    ):
        assert part["cut_fraction"] == pytest.approx(part["edge_cut"] / edges, abs=5e-5)
        assert part["balance"] >= 1.0
        assert 0 <= part["remote_ratio_mean"] <= part["remote_ratio_max"] <= 1
        assert 0 < part["halo_rows"] <= part["ring_padded_rows"]
    # A random assignment to P = 8 parts cuts each edge with probability 7/8. Over >= 44k
    # undirected edges (each listed in both directions) the cut fraction's standard error is
    # below sqrt(7/8 * 1/8 / 44e3) = 0.0016, so 0.01 is six of them.
    for part in (random, pub_random):
        assert part["cut_fraction"] == pytest.approx(7 / 8, abs=0.01)
    # METIS beats the random baseline on the cut and on the halo it implies.
    for good, base in ((metis, random), (pub_metis, pub_random)):
        assert good["edge_cut"] < base["edge_cut"] and good["halo_rows"] < base["halo_rows"]
    # ru_maxrss is the peak of the process so far: it never decreases.
    rss = [r["maxrss_gib"] for r in records if "maxrss_gib" in r]
    assert rss == sorted(rss) and rss[0] > 0


def test_bench_walks_quick():
    out = _run("bench_walks.py", "--quick")
    count = r"\s+([\d,.]+)"
    row = re.compile(r"^jaxgraph (deepwalk|node2vec p=\S+ q=\S+)" + count * 5 + "$")
    rows = {}
    for m in filter(None, (row.match(line) for line in out.splitlines())):
        walks, tokens, _, walks_s, tokens_s = (float(v.replace(",", "")) for v in m.groups()[1:])
        rows[m.group(1)] = walks, tokens, walks_s, tokens_s
    assert list(rows) == ["deepwalk", "node2vec p=1 q=1", "node2vec p=0.25 q=4"], out
    # --quick: Cora (2,708 nodes, none isolated), 2 walks per node of length 80; Cora is
    # undirected, so no walk meets a dead end and each holds 80 tokens.
    for walks, tokens, walks_s, tokens_s in rows.values():
        assert walks == 2 * 2708 and tokens == 80 * walks
        # Both rates share one time: their quotient is tokens per walk (up to the rounding of
        # walks/s to an integer).
        assert walks_s > 0 and tokens_s / walks_s == pytest.approx(80, rel=1 / walks_s)
    # PecanPy beside each walker it has a mode for: its rows (the same walks and tokens), or
    # the reason it did not run (it needs numpy < 2, so it is usually not importable here).
    loop = re.compile(r"^  PecanPy (\w+) walk loop" + count * 5 + "$")
    ran = {m.group(1): m.groups()[1:3] for m in map(loop.match, out.splitlines()) if m}
    for mode in ("FirstOrderUnweighted", "PreComp", "SparseOTF"):
        if mode in ran:
            assert [float(v.replace(",", "")) for v in ran[mode]] == [2 * 2708, 80 * 2 * 2708]
        else:
            assert f"  PecanPy {mode}: not run (" in out, out


def test_fabc_table_quick(tmp_path):
    prefix = tmp_path / "fabc"
    _run("fabc_table.py", "--quick", "--out", str(prefix))
    rows = json.loads(prefix.with_name("fabc_quick.json").read_text())["rows"]
    walkers = ["deepwalk", "node2vec p=0.25 q=4", "node2vec p=4 q=0.25"]
    assert [(r["graph"], r["walker"]) for r in rows] == [
        (g, w) for g in ("cora", "blogcatalog") for w in walkers
    ]
    # --quick: one walk of L = 40 from each node (no isolated node in either graph), so T = 40 N
    # and Eq. 7 holds with the per-rank cost c = (4 + ceil(L / 8)) / (4 L).
    length = 40
    c = (4 + length // 8) / (4 * length)
    for r in rows:
        assert r["walks"] == r["nodes"] == {"cora": 2708, "blogcatalog": 10312}[r["graph"]]
        assert r["tokens"] == length * r["walks"]
        assert r["raw_mb"] == pytest.approx(4 * r["tokens"] / 1e6, rel=1e-12)
        assert r["roundtrip_ok"]
        p = r["p1_p3"]
        assert 1 >= p[0] >= p[1] >= p[2] >= 0
        g = [1.0] + [1 - sum(p[:k]) + k * c for k in (1, 2, 3)]
        assert [r[f"top{k}"] for k in (1, 2, 3)] == pytest.approx(g[1:], abs=1e-9)
        # Eq. 8: rank i is taken while p(i) >= c + 0.1 g(i - 1); the ratio is then g(k).
        k = r["chosen_k"]
        assert all(p[i] >= c + 0.1 * g[i] for i in range(min(k, 3)))
        if k < 3:
            assert p[k] < c + 0.1 * g[k]
        if k <= 3:
            assert r["chosen"] == pytest.approx(g[k], abs=1e-9)
        assert abs(r["chosen"] - r["predicted"]) < 1e-9
        # Each rank taken cuts the ratio by >= 10 %: (0, 1] and at most 0.9^k.
        assert 0 < r["chosen"] <= 0.9**k + 1e-12
        if r["walker"] == "deepwalk":  # one corpus-wide hot set never pays on DeepWalk walks
            assert r["corpus_chosen_k"] == 0 and r["corpus_chosen"] == 1.0
    # Backtracking walks on sparse Cora (median degree 3) compress; BlogCatalog's (mean
    # degree 65) do not (FaBC's module docstring).
    by = {(r["graph"], r["walker"]): r for r in rows}
    assert by[("cora", "node2vec p=0.25 q=4")]["chosen_k"] >= 1
    assert all(by[("blogcatalog", w)]["chosen"] == 1.0 for w in walkers)


def test_bench_quant_quick():
    out = _run("bench_quant.py", "--quick")
    assert re.search(r"on cpu .*; backends: reference;", out), out
    num = r"\s+([\d.]+)"
    row = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d)\s+reference" + num * 8 + r"$")
    rows = [[float(v) for v in m.groups()] for m in map(row.match, out.splitlines()) if m]
    # --quick: N = 100k rows, D in {128, 602}, b in {2, 4, 8}, the reference backend on CPU.
    assert [(n, d, b) for n, d, b, *_ in rows] == [
        (100_000, d, b) for d in (128, 602) for b in (2, 4, 8)
    ], out
    for n, d, b, q_ms, q_gbs, dq_ms, dq_gbs, copy_gbs, q_copy, dq_copy, smaller in rows:
        # The message: ceil(N b / 8) bytes of codes per column plus an fp32 scale and lo per
        # row, against 4 N D bytes of f32.
        dense, message = 4 * n * d, -(-int(n) * int(b) // 8) * d + 8 * n
        assert smaller == pytest.approx(dense / message, abs=0.05)
        assert 1 < smaller < 32 / b
        # GB/s = (block + message) bytes / time, and the copy ratios are the two rates'
        # quotients (each printed rounded: the tolerances are the roundings).
        for ms, gbs in ((q_ms, q_gbs), (dq_ms, dq_gbs)):
            assert ms > 0 and gbs == pytest.approx(
                (dense + message) / (ms * 1e6), abs=0.05 + gbs * 0.005 / ms
            )
        assert copy_gbs > 0
        for ratio, gbs in ((q_copy, q_gbs), (dq_copy, dq_gbs)):
            rounding = 0.005 + ratio * (0.05 / gbs + 0.05 / copy_gbs)
            assert ratio == pytest.approx(gbs / copy_gbs, abs=rounding)


def test_gpu_check_quick(tmp_path):
    _run("gpu_check.py", "--quick", "--out", str(tmp_path))
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    kernels = [v for k, v in report.items() if k.startswith(("quantize", "bitmap"))]
    assert kernels and all(v["equal_to_reference"] for v in kernels)


def test_hlo_overlap(tmp_path):
    """The script's CPU finding, from its summary and recounted in the HLO it wrote: a GCN
    step on the emulated 8-device mesh exchanges its halo in 3 ring exchanges (layer 1 and 2
    forward, layer 2's input gradient backward; the features need none) of P - 1 = 7
    collective-permutes each, all synchronous (XLA:CPU has no -start/-done pairs), so no
    compute is scheduled inside any of them. The GPU schedule (async pairs with the local
    aggregation between start and done) is read by ``gpu_check.py`` on a GPU."""
    _run("hlo_overlap.py", "--out", str(tmp_path))
    (summary_path,) = tmp_path.glob("summary_*.json")
    summary = json.loads(summary_path.read_text())
    parts = 8
    assert (summary["backend"], summary["method"], summary["parts"]) == ("cpu", "vanilla", parts)
    assert summary_path.name == f"summary_gcn_vanilla_cpu_p{parts}.json"
    permutes = 3 * (parts - 1)
    reports = {r["variant"]: r for r in summary["reports"]}
    assert list(reports) == ["split", "unsplit"]
    for variant, r in reports.items():
        assert r["scheduled"] and r["sync_permutes"] == permutes
        assert r["async_pairs"] == r["marked_sync"] == r["pairs_with_compute"] == 0
        assert r["compute_between"] == r["scatters_between"] == []
        text = (tmp_path / f"train_step_gcn_vanilla_{variant}_cpu_p{parts}.hlo.txt").read_text()
        assert "is_scheduled=true" in text.split("\n", 1)[0]
        assert "collective-permute-start" not in text and "async-start" not in text
        # Every permute moves one ring round: all 8 devices send, each by the same shift.
        shifts = []
        for pairs in re.findall(r" collective-permute\(.*?source_target_pairs=\{(.*?)\}\}", text):
            st = [tuple(map(int, x.split(","))) for x in pairs.strip("{").split("},{")]
            assert sorted(s for s, _ in st) == sorted(t for _, t in st) == list(range(parts))
            (shift,) = {(t - s) % parts for s, t in st}
            shifts.append(shift)
        assert sorted(shifts) == sorted(list(range(1, parts)) * 3)


def test_embed_table_quick(tmp_path):
    out = tmp_path / "embed.json"
    _run("embed_table.py", "--quick", "--out", str(out))
    results = json.loads(out.read_text())
    # --quick: 3 rounds (2 on ca-AstroPh) of one walk of 10 nodes per active node.
    args = results["args"]
    assert (args["rounds"], args["lp_rounds"], args["walk_length"], args["dim"]) == (3, 2, 10, 32)
    blog_nodes = 10312  # no isolated node: a walk starts at each, none stops early
    assert list(results["walks"]) == ["deepwalk", "node2vec p=0.25 q=4"]
    for walks in results["walks"].values():  # 10 walks of 80 nodes per node
        assert walks["walks"] == 10 * blog_nodes and walks["tokens"] == 80 * walks["walks"]
        assert walks["tokens_per_s"] / walks["walks_per_s"] == pytest.approx(80, rel=1e-12)
    vs = results["trainer_vs_gensim"]
    assert vs["pairs"] > 0
    for trainer in {"jax", "gensim"} & set(vs):  # gensim is an optional dependency
        assert vs[trainer]["pairs_per_s"] == pytest.approx(vs["pairs"] / vs[trainer]["median_s"])
        assert 0 <= vs[trainer]["micro@50"] <= 1
    on_host = results["kernel"] == "cpu"
    assert on_host == (jax.default_backend() == "cpu")  # the default kernel on a CPU host
    methods = ["deepwalk", "felog", "felog-public", "felog-centered", "felog-centered-w2"]
    # Walks start at every node with an edge: all of BlogCatalog's; all of ca-AstroPh's but
    # the one with only a self-loop (the edge split never isolates a node).
    tables = {
        "blogcatalog": (3, "micro@50_per_round", blog_nodes),
        "ca-astroph": (2, "auc_per_round", 18772 - 1),
    }
    for table, (rounds, curve_key, starts) in tables.items():
        rows = {r["method"]: r for r in results[table]}
        assert list(rows)[: len(methods)] == methods
        base = rows["deepwalk"]
        # The baseline is the reference of every ratio: 1 against itself, and it reaches its
        # own final quality at the first round whose quality is as high.
        assert base["speedup"] == 1.0 and "baseline_same_time" not in base
        reach = base["to_baseline_quality"]
        curve = base[curve_key]
        first = next(i for i, q in enumerate(curve) if q >= curve[-1])
        assert reach["round"] == first and reach["speedup"] == reach["pairs_speedup"] == 1.0
        assert base["active_per_round"] == [starts] * rounds
        for name in methods:
            r = rows[name]
            assert r["rounds"] == len(r["active_per_round"]) == len(r[curve_key]) <= rounds
            assert r["speedup"] == pytest.approx(base["seconds"] / r["seconds"], rel=1e-12)
            assert all(0 <= q <= 1 for q in r[curve_key])
            # Counts: a walk per active node and round, 10 tokens each; pairs add up.
            assert r["walks"] == sum(r["active_per_round"]) and r["tokens"] == 10 * r["walks"]
            assert sum(r["pairs_per_round"]) == r["pairs"] > 0
            assert r["elapsed_per_round"] == sorted(r["elapsed_per_round"])
            assert r["elapsed_per_round"][-1] <= r["seconds"]
            # Feedback retires nodes and never adds walks: no more tokens nor bytes than the
            # baseline (the CPU kernel trains the pairs where they are built: no bytes).
            assert r["active_per_round"][0] == starts
            assert r["tokens"] <= base["tokens"]
            if on_host:
                assert r["host_to_device_bytes"] == 0
            else:
                assert 0 < r["host_to_device_bytes"] <= base["host_to_device_bytes"]
    blog = {r["method"]: r for r in results["blogcatalog"]}
    # The paper's rule retires most BlogCatalog nodes within 3 rounds: fewer tokens and bytes.
    assert blog["felog"]["tokens"] < blog["deepwalk"]["tokens"]
    if not on_host:
        assert blog["felog"]["host_to_device_bytes"] < blog["deepwalk"]["host_to_device_bytes"]
    for r in blog.values():
        for ratio in r["f1"].values():
            assert all(0 <= ratio[avg]["mean"] <= 1 for avg in ("micro", "macro"))
    lp = {r["method"]: r for r in results["ca-astroph"]}
    # n = 99,025 held-out edges and as many non-edges: under chance an AUC's standard error
    # is sqrt((2n + 1) / (12 n^2)) < 0.0013, so 0.51 is > 7 of them above 0.5.
    for name in methods:
        auc = lp[name]["auc"]
        assert all(0 <= v <= 1 for v in auc.values())
        assert auc["dot"] == lp[name]["auc_per_round"][-1]  # the last snapshot is the result
        assert auc["dot"] > 0.51
    gensim = [r for r in results["ca-astroph"] if r["method"].startswith("gensim")]
    for r in gensim:  # the baseline's walks, trained by gensim
        assert r["tokens"] == lp["deepwalk"]["tokens"] and r["bytes_raw"] == 4 * r["tokens"]
        assert all(0 <= v <= 1 for v in r["auc"].values())


def test_felog_table_quick(tmp_path):
    _run("felog_table.py", "--quick", "--out", str(tmp_path))
    results = json.loads((tmp_path / "felog_table_quick.json").read_text())
    names = [r["method"] for r in results["blogcatalog"]]
    assert names[:7] == ["deepwalk", "felog", "-FeeST", "-FaBC", "-HaSyn", "RandomSync", "-RiPP"]
    assert names[7:] in ([], ["gensim (2 threads)"])  # the gensim row needs gensim
    rows = {r["method"]: r for r in results["blogcatalog"]}
    # The selective syncs move fewer rows than AllSync (-HaSyn), which merges every row.
    for name in ("felog", "RandomSync"):
        assert 0 < rows[name]["bytes_sync"] < rows["-HaSyn"]["bytes_sync"]
    assert "of AllSync's sync bytes" in (tmp_path / "felog_table_quick.md").read_text()
    # DeepWalk moves its pairs (>= 12 bytes each); FeLoG's rows build theirs on the device.
    assert rows["deepwalk"]["bytes_host_to_device"] >= 12 * rows["deepwalk"]["pairs"]
    for name in ("felog", "-FaBC", "-FeeST"):
        assert rows[name]["bytes_host_to_device"] < 6 * rows[name]["tokens"]
    assert (tmp_path / "felog_table_quick.md").exists()
    assert (tmp_path / "felog_utilization_quick.png").exists()


def test_hasyn_sweep_pairs_each_sync_with_allsync(tmp_path):
    from jaxgraph.data import load_graph
    from jaxgraph.embed import EmbedConfig
    from jaxgraph.embed.evaluate import link_prediction_split

    nodes, dim, rows_per_sync = 2000, 8, 16
    _run(
        "hasyn_sweep.py",
        # 2000 nodes, walks of 40: a few periodic syncs of 64 steps, then the round-end merge.
        *("--dataset", "sbm", "--nodes", str(nodes), "--task", "lp", "--lp-rounds", "1"),
        *("--dim", str(dim), "--seeds", "0", "1"),
        *("--counts", "pending", "--rows", "0", str(rows_per_sync), "--full-every", "0"),
        *("--out", str(tmp_path), "--stem", "sweep"),
    )
    results = json.loads((tmp_path / "sweep.json").read_text())
    assert results["metric"] == "AUC (dot)"
    runs = {tuple(r["key"]): r for r in results["runs"]}
    setting = ("pending", 0)
    assert sorted(runs, key=str) == sorted(
        [
            (s, *key)
            for s in (0, 1)
            for key in [("AllSync", None, None, None)]
            + [(m, *setting, n) for n in (0, rows_per_sync) for m in ("HaSyn", "RandomSync")]
        ],
        key=str,
    )
    graph = load_graph(dataclasses.replace(EmbedConfig().data, name="sbm", num_nodes=nodes))
    summary = {(r["rows"], r["method"]): r for r in results["summary"]}
    assert sorted(summary) == [(0, "HaSyn"), (0, "RandomSync"), (16, "HaSyn"), (16, "RandomSync")]
    diffs = {key: [] for key in summary}
    for seed in (0, 1):
        base = runs[(seed, "AllSync", None, None, None)]
        syncs = base["syncs"]
        assert syncs >= 2  # at least one periodic sync for HaSyn and RandomSync to choose
        # Byte counts from the configured sizes (4-byte floats, both tables): AllSync merges
        # all 2N rows at every sync; M = 16 merges 2M rows at each periodic sync and all 2N
        # at the round end.
        assert base["sync_bytes"] == syncs * 2 * nodes * dim * 4
        n_test = link_prediction_split(graph, 0.5, seed=seed).test_pos.shape[0]
        auc = base["quality"]
        # AllSync learned: under chance the AUC's standard error over n edges and n non-edges
        # is sqrt((2n + 1) / (12 n^2)), about 0.006 here; 0.55 is > 8 of them above 0.5.
        assert 0.55 < auc <= 1
        # The paired difference's tolerance. An AUC estimated from n positives and n negatives
        # has variance at most A (1 - A) / n (the Birnbaum-Klose / van Dantzig bound), and the
        # standard deviation of a difference is at most the sum of both, whatever their
        # correlation: sd(diff) <= 2 sqrt(A (1 - A) / n). With n = 4531 held-out edges and
        # A = 0.75 that is 1.3 points. A sync rule that leaves the expected AUC unchanged
        # stays within 3 of them (3.9 points) with probability > 99.7 % under the normal
        # approximation of the AUC (> 8/9 by Chebyshev's inequality alone).
        tolerance = 100 * 3 * 2 * np.sqrt(auc * (1 - auc) / n_test)
        for num_rows, method in summary:
            r = runs[(seed, method, *setting, num_rows)]
            assert r["syncs"] == syncs  # same schedule; only the rows merged differ
            assert 0 <= r["quality"] <= 1
            diff = 100 * (r["quality"] - auc)
            assert abs(diff) <= tolerance
            diffs[(num_rows, method)].append(diff)
            share = r["sync_bytes"] / base["sync_bytes"]
            # A partial sync moves more than the round-end merge alone, less than AllSync.
            assert 1 / syncs < share < 1
            if num_rows:
                rows_moved = (syncs - 1) * 2 * rows_per_sync + 2 * nodes
                assert r["sync_bytes"] == rows_moved * dim * 4
    for key, row in summary.items():
        assert row["seeds"] == 2
        assert row["diff_mean"] == pytest.approx(np.mean(diffs[key]), abs=1e-9)
        assert row["within_1pt"] == sum(d >= -1 for d in diffs[key])
        shares = [
            runs[(s, key[1], *setting, key[0])]["sync_bytes"]
            / runs[(s, "AllSync", None, None, None)]["sync_bytes"]
            for s in (0, 1)
        ]
        assert row["bytes_share"] == pytest.approx(np.mean(shares), abs=1e-12)
    # A fixed budget: both methods merge as many rows.
    assert summary[(16, "HaSyn")]["bytes_share"] == summary[(16, "RandomSync")]["bytes_share"]
    assert "| pending | round end only | 16 | HaSyn |" in (tmp_path / "sweep.md").read_text()


def test_adaqp_table_merges_earlier_runs(tmp_path):
    """``--from-csv`` builds one table from partial grids: a run present in two files counts
    once (the later file wins), and every row reports how many seeds it averages."""
    header = (
        "dataset,model,parts,method,seed,lam,group_size,period,test_acc,bytes_per_epoch,"
        "median_epoch_time,wall_time,assign_overhead_share,assign_solve_share,"
        "assign_solve_time,assign_rejit_time,proj_10gbe,proj_pcie3x16,last_widths"
    )
    first = tmp_path / "a.csv"
    first.write_text(
        header + "\n"
        "cora,gcn,8,vanilla,0,0.5,100,40,80.0,100.0,0.1,20,0,0,0,0,0.001,0.0001,\n"
        "cora,gcn,8,quant-8,0,0.5,100,40,79.0,25.0,0.1,20,0,0,0,0,0.001,0.0001,\n"
    )
    second = tmp_path / "b.csv"  # lacks the newer lookahead column too
    second.write_text(
        header + "\n"
        "cora,gcn,8,vanilla,0,0.5,100,40,81.0,100.0,0.1,20,0,0,0,0,0.001,0.0001,\n"
        "cora,gcn,8,vanilla,1,0.5,100,40,83.0,100.0,0.1,20,0,0,0,0,0.001,0.0001,\n"
    )
    prefix = tmp_path / "merged"
    _run("adaqp_table.py", "--from-csv", str(first), str(second), "--out", str(prefix))
    lines = prefix.with_suffix(".md").read_text().splitlines()
    vanilla = next(line for line in lines if "| vanilla |" in line)
    quant = next(line for line in lines if "| quant-8 |" in line)
    assert "| 2 | 82.0 ± 1.4 | 1.000 |" in vanilla  # seeds 0 (from b.csv) and 1
    assert "| 1 | 79.0 ± 0.0 | 0.250 |" in quant  # 25 bytes against Vanilla's 100
    assert len(prefix.with_suffix(".csv").read_text().splitlines()) == 1 + 3


def test_bench_compile_quick():
    out = _run("bench_compile.py", "--quick", "--json")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["method"] for r in records] == ["vanilla", "quant-random"]
    # One ppermute per ring round and exchange, whatever the number of widths: 3 x 7.
    assert all(r["collective_permutes"] == 21 for r in records)


def test_sancus_table_quick_two_seeds(tmp_path):
    args = ["--quick", "--methods", "cagnet", "sancus-e1", "pipegcn", "--seeds", "0", "1"]
    _run("sancus_table.py", *args, "--out", str(tmp_path / "sancus"))
    with open(tmp_path / "sancus.csv") as f:
        runs = list(csv.DictReader(f))
    assert sorted((r["method"], r["seed"]) for r in runs) == sorted(
        (m, s) for m in ("cagnet", "sancus-e1-w10", "pipegcn") for s in ("0", "1")
    )
    table = (tmp_path / "sancus.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| cora")]
    assert len(rows) == 3  # one row per method, the means over both seeds
    assert all(line.split("|")[5].strip() == "2" and "±" in line for line in rows)
    for suffix in (".png", "_schedule.png"):
        assert (tmp_path / f"sancus{suffix}").exists()


def test_adaqp_table_projects_the_widths_the_run_used():
    """The projected communication time of a run follows its candidate widths: random draws
    from ``assign.widths`` and an adaqp run's first period at :func:`first_width`."""
    sys.path.insert(0, str(EXPERIMENTS))
    try:
        import adaqp_table
    finally:
        sys.path.remove(str(EXPERIMENTS))
    from jaxgraph.comm.adaptive import AssignConfig
    from jaxgraph.comm.costmodel import CostModel
    from jaxgraph.comm.projection import projected_comm_time
    from jaxgraph.partition import build_halo_plan, partition_graph
    from jaxgraph.partition.buckets import BitAssignment
    from jaxgraph.train import AdaQP, DataConfig, Quantized, TrainConfig
    from jaxgraph.train.loop import load_graph

    data = DataConfig(name="sbm", num_nodes=400, avg_degree=8, num_features=16, seed=0)
    graph = load_graph(data)
    cfg = TrainConfig(data=data, parts=4, epochs=4)
    plan = build_halo_plan(graph, partition_graph(graph, 4, seed=0), num_parts=4)
    quant_random = cfg.replace(method=Quantized("random", widths=(2, 4)))
    random = adaqp_table._assignment_at(quant_random, plan, 2, 1, [])
    drawn = {
        int(v)
        for rounds in random.fwd
        for b, m in zip(rounds, plan.send_mask, strict=True)
        for v in b[m]
    }
    assert drawn == {2, 4}
    metrics = [{"epoch": e} for e in range(1, 5)]  # no solve logged: the first period only
    adaqp = cfg.replace(method=AdaQP(assign=AssignConfig(widths=(2, 4))))
    got = adaqp_table.projected_times(adaqp, graph, metrics)
    dims = (graph.num_features, 64)
    cost = CostModel.from_preset("10gbe", 4)
    four = sum(projected_comm_time(plan, BitAssignment.uniform(plan, 2, 4), dims, cost).values())
    assert got["10gbe"] == pytest.approx(four, rel=1e-12)


def test_sgns_vs_gensim_on_a_small_rmat(tmp_path):
    out = tmp_path / "sgns.json"
    text = _run(
        "sgns_vs_gensim.py",
        *("--dataset", "rmat", "--rmat-scale", "10", "--walks-per-node", "2", "--chunks", "2"),
        *("--sequential", "--out", str(out)),
    )
    (run,) = json.loads(out.read_text())["runs"]
    jax_ = run["jax"]
    assert jax_["pairs"] > 0 and len(jax_["curve"]) == 2 and len(jax_["loss_per_pair"]) == 2
    # The batch-1 reference on the same pairs. On this small R-MAT word2vec's cosine AUC falls
    # below chance (gensim 0.42, batch 1 0.42-0.45), its dot AUC does not (0.74-0.78).
    seq = run["sequential"]
    assert 0.6 < seq["dot"] <= 1 and 0 <= seq["cosine"] <= 1 and len(seq["loss_per_pair"]) == 2
    assert "batch 1" in text
    # About 5,000 held-out edges: under chance a dot AUC's standard error is below 0.006, so
    # 0.55 is 8 of them above 0.5. The cosine follows word2vec's below chance (0.48 against
    # batch 1's 0.42 after the second round).
    assert all(0.55 < c["dot"] <= 1 and 0 <= c["cosine"] <= 1 for c in jax_["curve"])
    assert abs(jax_["curve"][-1]["cosine"] - seq["cosine"]) < 0.1
    assert "pairs/s" in text
    per_round = next(line for line in text.splitlines() if "quality by round" in line)
    assert per_round.count(";") == 1  # two rounds, each with its dot / cosine AUC
    if "gensim" in run:  # an optional benchmark dependency
        assert 0.5 < run["gensim"]["dot"] <= 1 and run["gensim"]["pairs_per_s"] > 0
        # Both are word2vec's update on the same walks: they score alike.
        for k in ("dot", "cosine"):
            assert abs(seq[k] - run["gensim"][k]) < 0.1, k


def test_sgns_profile_times_each_program_of_a_round(tmp_path):
    out = tmp_path / "profile.json"
    text = _run(
        "sgns_profile.py",
        *("--dataset", "rmat", "--rmat-scale", "12", "--dim", "16", "--sync-every", "4"),
        *("--out", str(out)),
    )
    runs = json.loads(out.read_text())["runs"]
    allsync, whole, one = runs["2 devices"], runs["2 devices, every row merged"], runs["1 device"]
    # The same tables (merging only the trained input rows of syn0 is exact), fewer rows moved.
    assert allsync["loss_per_pair"] == whole["loss_per_pair"]
    assert allsync["pairs"] == whole["pairs"] == one["pairs"] > 0
    assert allsync["syncs"] == whole["syncs"] == whole["merge_periodic"]["calls"] + 1 > 10
    assert whole["sync_rows"] == whole["syncs"] * 2 * 4096
    assert allsync["merge_input_rows"]["calls"] > 0 and allsync["sync_rows"] < whole["sync_rows"]
    assert one["syncs"] == 1  # one replica: the round-end merge only
    assert one["merge_periodic"]["calls"] == one["merge_input_rows"]["calls"] == 0
    for r in (allsync, whole, one):
        timed = sum(r[k]["seconds"] for k in r if isinstance(r[k], dict))
        assert 0 < timed + r["pairs_on_host_s"] <= r["seconds"] + 1e-6
        assert r["train"]["calls"] >= r["steps"] / 4
    assert "ceiling, 2 devices' training chunks alone (no merges)" in text
    assert "ceiling, 2 x one device's (no merges)" in text


def test_composition_table_quick(tmp_path):
    """The composed methods' rows: the baselines at ratio 1, 4-bit broadcasts and 4-bit stale
    halos below their unquantized versions' bytes, accuracies in range."""
    methods = ["cagnet-q4", "sancus", "sancus-q4", "pipegcn-q4"]
    _run("composition_table.py", "--quick", "--methods", *methods, "--out", str(tmp_path / "c"))
    with open(tmp_path / "c.csv") as f:
        runs = {r["method"]: r for r in csv.DictReader(f)}
    assert set(runs) == {"cagnet", "vanilla", *methods}
    nbytes = {m: float(r["bytes_per_epoch"]) for m, r in runs.items()}
    assert nbytes["cagnet-q4"] < 0.2 * nbytes["cagnet"]  # 4-bit codes + row parameters
    assert nbytes["sancus-q4"] < nbytes["sancus"] < nbytes["cagnet"]
    assert nbytes["pipegcn-q4"] < 0.2 * nbytes["vanilla"]
    assert all(0 <= float(r["test_acc"]) <= 100 for r in runs.values())
    table = (tmp_path / "c.md").read_text()
    rows = {line.split("|")[3].strip(): line for line in table.splitlines() if "| cora |" in line}
    assert rows["cagnet"].split("|")[9].strip() == "1.000"
    assert rows["vanilla"].split("|")[9].strip() == "1.000"


def test_sancus_stale_phase_quick(tmp_path):
    """CAGNET and Sancus Δ_H 0.03 with a 10-epoch warm-up: the best epoch, where it falls, the
    bytes relative to CAGNET; a resumed run trains nothing."""
    prefix = tmp_path / "stale"
    _run("sancus_stale_phase.py", "--quick", "--out", str(prefix))
    runs = json.loads(prefix.with_suffix(".json").read_text())["runs"]
    assert {r["method"] for r in runs} == {"cagnet", "sancus-h0.03-w10"}
    for r in runs:
        assert 0 <= r["best_epoch"] < 40 and 0 < r["test_at_best"] <= 100
    sancus = next(r for r in runs if r["method"] != "cagnet")
    assert "| sancus-h0.03-w10 |" in prefix.with_suffix(".md").read_text()
    # Skipped broadcasts move fewer bytes than CAGNET's every-epoch broadcasts.
    assert 0 < sancus["bytes_vs_cagnet"] < 1
    out = _run("sancus_stale_phase.py", "--quick", "--resume", "--out", str(prefix))
    assert "resuming: 2 runs" in out and "P=4 seed" not in out  # no run trained


def test_preset_compare_quick(tmp_path):
    """The published preset beside word2vec's update on BlogCatalog: every configuration
    trains the same pairs and is scored; the .md carries the paired differences."""
    prefix = tmp_path / "presets"
    _run(
        "preset_compare.py",
        "--quick",
        "--datasets",
        "blogcatalog",
        "--shuffles",
        "1",
        "--out",
        str(prefix),
    )
    runs = json.loads(prefix.with_suffix(".json").read_text())["runs"]
    assert {r["preset"] for r in runs} == {"published", "word2vec-exact", "word2vec-spread"}
    assert len({r["pairs"] for r in runs}) == 1
    for r in runs:
        assert 0.1 < r["micro_0.5"] < 1 and np.isfinite(r["loss_per_pair"]).all()
    text = prefix.with_suffix(".md").read_text()
    assert "word2vec-spread minus published, paired by seed (1)" in text


def test_sgns_cpu_kernel_times_two_one_thread_processes_at_once():
    text = _run(
        "sgns_cpu_kernel.py",
        *("--nodes", "1000", "--shared", "1", "--pairs", "100000", "--repeats", "1"),
        *("--no-jax", "--no-gensim", "--concurrent"),
    )
    header, _, row = text.strip().splitlines()[-3:]
    assert header.split(" | ")[-1] == "kernel 1 thread, each of 2 processes at once |"
    cells = [c.strip() for c in row.strip("| ").split(" | ")]
    assert cells[:2] == ["1,000", "1"] and int(cells[2].replace(",", "")) >= 100_000
    # One thread, two threads, then each process's rate (millions of pairs/s, all > 0).
    rates = [float(v) for v in cells[3:5]] + [float(v) for v in cells[5].split(", ")]
    assert len(rates) == 4 and all(r > 0 for r in rates)
