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
