"""Result files shared by the experiment scripts."""

from __future__ import annotations

import csv
from pathlib import Path


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
