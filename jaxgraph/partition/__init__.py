"""Graph partitioning and the host-side plans of the distributed programs.

- :func:`partition_graph`: node -> part assignment (METIS, random, contiguous).
- :func:`partition_report`: edge cut, balance, pair volumes and ring payloads of a partition.
- :func:`build_halo_plan`: padded per-device arrays for ring-scheduled halo exchange.
- :func:`build_block_row_plan`: 1D block-row split of the normalised adjacency.

Everything here runs on the host with NumPy.
"""

from jaxgraph.partition.blockrow import BlockRowPlan, build_block_row_plan
from jaxgraph.partition.halo import HaloPlan, build_halo_plan
from jaxgraph.partition.partitioners import METHODS, check_parts, partition_graph
from jaxgraph.partition.report import PartitionReport, partition_report

__all__ = [
    "METHODS",
    "BlockRowPlan",
    "HaloPlan",
    "PartitionReport",
    "build_block_row_plan",
    "build_halo_plan",
    "check_parts",
    "partition_graph",
    "partition_report",
]
