"""Smoke runs of the experiment scripts in their ``--quick`` modes (slow: minutes each).

Each script runs in its own process, as a researcher would start it, and must exit 0 and
write what it promises. Run with ``python -m pytest -m slow tests/test_experiments.py``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

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
    assert set(rows) == {"adaqp", "adaqp λ0.9", "adaqp λ0.99", "random", "2-bit", "4-bit", "8-bit"}
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
    assert records, out


def test_bench_walks_quick():
    out = _run("bench_walks.py", "--quick")
    assert "deepwalk" in out and "node2vec" in out


def test_fabc_table_quick(tmp_path):
    prefix = tmp_path / "fabc"
    out = _run("fabc_table.py", "--quick", "--out", str(prefix))
    rows = json.loads(prefix.with_name("fabc_quick.json").read_text())["rows"]
    assert {r["graph"] for r in rows} == {"cora", "blogcatalog"} and len(rows) == 6
    assert all(r["roundtrip_ok"] and 0 < r["chosen"] <= 1.0 for r in rows), out
    # Eq. 7 predicts the measured ratio of the chosen k exactly (full-length walks, 8 | L).
    assert all(abs(r["chosen"] - r["predicted"]) < 1e-9 for r in rows)


def test_bench_quant_quick():
    out = _run("bench_quant.py", "--quick")
    assert "copy" in out.lower()


def test_gpu_check_quick(tmp_path):
    _run("gpu_check.py", "--quick", "--out", str(tmp_path))
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    kernels = [v for k, v in report.items() if k.startswith(("quantize", "bitmap"))]
    assert kernels and all(v["equal_to_reference"] for v in kernels)


def test_hlo_overlap(tmp_path):
    out = _run("hlo_overlap.py", "--out", str(tmp_path))
    assert "collective-permute" in out
    assert list(tmp_path.glob("summary_*.json"))


def test_embed_table_quick(tmp_path):
    out = tmp_path / "embed.json"
    _run("embed_table.py", "--quick", "--out", str(out))
    assert json.loads(out.read_text())


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
    _run(
        "hasyn_sweep.py",
        # 2000 nodes, walks of 40: about 6 syncs of 64 steps in the round.
        *("--dataset", "sbm", "--nodes", "2000", "--task", "lp", "--lp-rounds", "1"),
        *("--dim", "8", "--seeds", "0", "1"),
        *("--counts", "pending", "--rows", "0", "16", "--full-every", "0"),
        *("--out", str(tmp_path), "--stem", "sweep"),
    )
    results = json.loads((tmp_path / "sweep.json").read_text())
    assert results["metric"] == "AUC (dot)"
    rows = {(r["rows"], r["method"]): r for r in results["summary"]}
    assert sorted(rows) == [(0, "HaSyn"), (0, "RandomSync"), (16, "HaSyn"), (16, "RandomSync")]
    # A fixed budget: both methods merge as many rows, fewer than AllSync.
    assert rows[(16, "HaSyn")]["bytes_share"] == rows[(16, "RandomSync")]["bytes_share"] < 1
    assert all(r["seeds"] == 2 and abs(r["diff_mean"]) < 50 for r in rows.values())
    runs = {tuple(r["key"]): r for r in results["runs"]}
    assert len(runs) == 2 * (1 + 4)  # per seed: AllSync and the four syncs
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
    from jaxgraph.comm.adaptive import AssignConfig, projected_comm_time
    from jaxgraph.comm.costmodel import CostModel
    from jaxgraph.comm.quantized import BitAssignment
    from jaxgraph.partition import build_halo_plan, partition_graph
    from jaxgraph.train import DataConfig, TrainConfig
    from jaxgraph.train.loop import load_graph

    data = DataConfig(name="sbm", num_nodes=400, avg_degree=8, num_features=16, seed=0)
    graph = load_graph(data)
    cfg = TrainConfig(data=data, parts=4, assign=AssignConfig(widths=(2, 4)), epochs=4)
    plan = build_halo_plan(graph, partition_graph(graph, 4, seed=0), num_parts=4)
    random = adaqp_table._assignment_at(cfg.replace(method="quant-random"), plan, 2, 1, [])
    drawn = {
        int(v)
        for rounds in random.fwd
        for b, m in zip(rounds, plan.send_mask, strict=True)
        for v in b[m]
    }
    assert drawn == {2, 4}
    metrics = [{"epoch": e} for e in range(1, 5)]  # no solve logged: the first period only
    got = adaqp_table.projected_times(cfg.replace(method="adaqp"), graph, metrics)
    dims = (graph.num_features, 64)
    cost = CostModel.from_preset("10gbe", 4)
    four = sum(projected_comm_time(plan, BitAssignment.uniform(plan, 2, 4), dims, cost).values())
    assert got["10gbe"] == pytest.approx(four, rel=1e-12)


def test_sgns_vs_gensim_on_a_small_rmat(tmp_path):
    out = tmp_path / "sgns.json"
    text = _run(
        "sgns_vs_gensim.py",
        *("--dataset", "rmat", "--rmat-scale", "10", "--walks-per-node", "2", "--chunks", "2"),
        *("--out", str(out)),
    )
    (run,) = json.loads(out.read_text())["runs"]
    jax_ = run["jax"]
    assert jax_["pairs"] > 0 and len(jax_["curve"]) == 2 and len(jax_["loss_per_pair"]) == 2
    assert all(0.5 < c["dot"] <= 1 and 0.5 < c["cosine"] <= 1 for c in jax_["curve"])
    assert "pairs/s" in text
    if "gensim" in run:  # an optional benchmark dependency
        assert 0.5 < run["gensim"]["dot"] <= 1 and run["gensim"]["pairs_per_s"] > 0
