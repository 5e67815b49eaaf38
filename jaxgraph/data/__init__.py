"""Graph data: real datasets, synthetic generators, a user's graph files and converters.

* Bundled datasets: :func:`load_dataset` (:mod:`~jaxgraph.data.datasets`), listed in
  :mod:`~jaxgraph.data.registry`.
* :mod:`jaxgraph.data.synthetic`: :func:`dc_sbm` and :func:`rmat`.
* A user's graph file: :func:`read_graph` (:mod:`~jaxgraph.data.files`).
* :mod:`jaxgraph.data.convert`: networkx and jraph converters.
* :mod:`jaxgraph.data.source`: :class:`DataConfig` and :func:`load_graph`, what a run reads.

Importing this package has no side effect and does not import networkx or jraph.
"""

from jaxgraph.data.adjacency import from_scipy
from jaxgraph.data.cache import default_data_dir
from jaxgraph.data.convert import from_jraph, from_networkx, to_jraph, to_networkx
from jaxgraph.data.datasets import load_dataset, row_normalize
from jaxgraph.data.edgelist import from_edge_list
from jaxgraph.data.errors import DatasetError, GraphFileError
from jaxgraph.data.fetch import fetch_wheel
from jaxgraph.data.files import (
    GRAPH_FORMATS,
    detect_format,
    load_graph_file,
    random_split_if_missing,
    read_graph,
    register_format,
)
from jaxgraph.data.npz import read_npz
from jaxgraph.data.pyg import from_pyg_npz, save_pyg_npz
from jaxgraph.data.registry import (
    DATASETS,
    DatasetInfo,
    dataset_info,
    dataset_table,
    format_dataset_info,
    raw_files,
)
from jaxgraph.data.source import SYNTHETIC, DataConfig, load_graph
from jaxgraph.data.splits import planetoid_split, random_split
from jaxgraph.data.synthetic import dc_sbm, rmat

__all__ = [
    "DATASETS",
    "SYNTHETIC",
    "DataConfig",
    "load_graph",
    "GRAPH_FORMATS",
    "DatasetError",
    "DatasetInfo",
    "GraphFileError",
    "dataset_info",
    "dataset_table",
    "dc_sbm",
    "default_data_dir",
    "detect_format",
    "fetch_wheel",
    "format_dataset_info",
    "from_edge_list",
    "from_jraph",
    "from_networkx",
    "from_pyg_npz",
    "from_scipy",
    "load_dataset",
    "load_graph_file",
    "planetoid_split",
    "random_split",
    "random_split_if_missing",
    "raw_files",
    "read_graph",
    "read_npz",
    "register_format",
    "rmat",
    "row_normalize",
    "save_pyg_npz",
    "to_jraph",
    "to_networkx",
]
