"""``jaxgraph partition``: a graph, its partition and the partition report, as one job."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from jaxgraph.configfile import check_int
from jaxgraph.data.source import DataConfig


@dataclasses.dataclass(frozen=True)
class PartitionJob:
    """``jaxgraph partition``: partition a graph and print the partition report.

    Attributes:
      data: the graph (default cora).
      parts: the number of parts.
      method: the partitioner: metis, random or contiguous.
      seed: seeds the random partitioner and a synthetic graph.
      heatmap: save the pair-volume heatmap to this .png file.
      out: write each node's part to this .csv file (node id, part), keyed by the graph's ids.
    """

    data: DataConfig = DataConfig()
    parts: int = 8
    method: Literal["metis", "random", "contiguous"] = "metis"
    seed: int = 0
    heatmap: str | None = None
    out: str | None = None

    def check_outputs(self) -> None:
        """Checks the output paths (:func:`check_output_file`) before any work."""
        for option in ("out", "heatmap"):
            if getattr(self, option):
                check_output_file(getattr(self, option), f"--{option}")

    def __post_init__(self):
        check_int("parts", self.parts, 1)
        object.__setattr__(self, "data", self.data.with_default("cora"))


def check_output_file(path: str, option: str) -> Path:
    """An output file's path, checked before any work: its directory exists and it is not
    itself a directory."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file name")
    if not out.parent.is_dir():
        raise ValueError(f"{option} {path}: directory {out.parent} does not exist")
    return out


def run_partition(job: PartitionJob) -> None:
    """Partitions ``job``'s graph, prints the partition report, and writes the heatmap and the
    parts file it asks for."""
    from jaxgraph.atomic import atomic_write_text
    from jaxgraph.data.source import load_graph
    from jaxgraph.mesh import make_mesh
    from jaxgraph.partition import partition_graph, partition_report

    graph = load_graph(job.data, seed=job.seed)
    if job.parts > graph.num_nodes:
        raise ValueError(
            f"--parts {job.parts} exceeds the {graph.num_nodes} nodes of {graph.name!r}"
        )
    make_mesh(job.parts)  # the plan targets this many devices
    parts = partition_graph(graph, job.parts, method=job.method, seed=job.seed)
    report = partition_report(graph, parts)
    print(f"{graph!r}\n{job.method} partition into {job.parts} parts\n")
    print(report.format())
    if job.heatmap is not None:
        report.save_heatmap(Path(job.heatmap))
        print(f"\npair-volume heatmap written to {job.heatmap}")
    if job.out is not None:
        rows = "".join(
            f"{i},{p}\n" for i, p in zip(graph.ids.tolist(), parts.tolist(), strict=True)
        )
        atomic_write_text(Path(job.out), "node,part\n" + rows)
        print(f"parts of {graph.num_nodes} nodes written to {job.out}")


__all__ = ["PartitionJob", "check_output_file", "run_partition"]
