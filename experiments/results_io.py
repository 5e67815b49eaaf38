"""Result files shared by the experiment scripts."""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
from pathlib import Path

import jax


def write_csv(rows: list[dict], path: Path) -> None:
    """``rows`` as a CSV at ``path``: one column per key seen in any row, in first-seen order
    (rows of different methods may carry different fields)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def read_csv(path: Path, *, ints=(), texts=()) -> list[dict]:
    """Rows of a CSV written by :func:`write_csv`, typed: the ``ints`` columns as int, the
    ``texts`` columns as str, ``True``/``False`` as bool and every other column as float
    (an empty cell -- a field the row's method does not have -- is left out)."""
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = {}
            for k, v in raw.items():
                if k in texts:
                    row[k] = v
                elif v == "":
                    continue
                elif k in ints:
                    row[k] = int(v)
                elif v in ("True", "False"):
                    row[k] = v == "True"
                else:
                    row[k] = float(v)
            rows.append(row)
    return rows


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--out PREFIX`` (writes ``PREFIX.json`` and ``PREFIX.md``) and ``--resume``."""
    parser.add_argument("--out", type=Path, help="output prefix: <out>.json, <out>.md")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already in <out>.json and train only the missing ones",
    )


def load_runs(args: argparse.Namespace) -> list[dict]:
    """The runs of ``<args.out>.json`` when ``--resume`` is given and the file exists, else
    none."""
    if not (args.resume and args.out):
        return []
    path = args.out.with_name(args.out.name + ".json")
    if not path.exists():
        return []
    rows = json.loads(path.read_text())["runs"]
    print(f"resuming: {len(rows)} runs already done", flush=True)
    return rows


def write_runs(args: argparse.Namespace, rows: list[dict], markdown: str) -> None:
    """``<args.out>.json`` (the script's settings, jax version, host and every run) and
    ``<args.out>.md`` (``markdown``), each replaced atomically, so an interrupted grid keeps
    what it had."""
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    meta = {"settings": settings, "jax": jax.__version__, "host": platform.node()}
    body = json.dumps({**meta, "runs": rows}, indent=1, default=str)
    _atomic_write(args.out.with_name(args.out.name + ".json"), body)
    _atomic_write(args.out.with_name(args.out.name + ".md"), markdown)


def sync_rows_arg(text: str) -> int | float | None:
    """``--sync-rows`` read as ``jaxgraph embed`` reads it: a row count (``1280``), a share of
    the nodes (``0.068``) or ``none``."""
    from jaxgraph.options import convert

    return convert(text, int | float | None, "--sync-rows")
