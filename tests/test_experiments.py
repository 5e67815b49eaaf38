"""Smoke runs of the experiment scripts in their ``--quick`` modes (slow: minutes each).

Each script runs in its own process, as a researcher would start it, and must exit 0 and
write what it promises. Run with ``python -m pytest -m slow tests/test_experiments.py``.
"""

from __future__ import annotations

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


def test_bench_data_quick():
    out = _run("bench_data.py", "--quick", "--json")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert records, out


def test_bench_walks_quick():
    out = _run("bench_walks.py", "--quick")
    assert "deepwalk" in out and "node2vec" in out


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
    assert names == ["deepwalk", "felog", "-FeeST", "-FaBC", "-HaSyn", "-RiPP"]
    assert (tmp_path / "felog_table_quick.md").exists()
    assert (tmp_path / "felog_utilization_quick.png").exists()
