"""Which graph a run reads (:class:`DataConfig`: a bundled dataset, a synthetic generator or a
graph file of the user's own), and the one function that reads it (:func:`load_graph`)."""

from __future__ import annotations

import dataclasses

from jaxgraph.configfile import check, check_int, is_real
from jaxgraph.graph import Graph
from jaxgraph.options import flag

SYNTHETIC = ("sbm", "rmat")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The graph of a run.

    Attributes:
      name: a bundled dataset (``jaxgraph datasets``) or a generator (``sbm``: degree-corrected
        SBM with class-dependent features; ``rmat``); None: the command's default.
      graph: a graph file or directory of your own instead (PyG ``.npz``, an edge list, a SciPy
        ``.npz`` adjacency, an OGB directory; :func:`jaxgraph.data.read_graph`).
      format: the graph file's format (pyg, edgelist, scipy, ogb or a registered one; default:
        from the file).
      directed: whether the file's edges are directed (needed where the file cannot say).
      features: a feature file beside an edge list (.npy in node-id order, or an id-keyed table).
      labels: a label file beside an edge list (a table of node id and label).
      num_nodes: the size of a synthetic graph.
      avg_degree: the mean degree of a synthetic graph.
      num_features: the feature width of a synthetic graph.
      num_classes: the classes of a synthetic graph.
      homophily: the share of an sbm graph's edges inside a class.
      seed: draws a synthetic graph and a missing split (None: the command's: the run's
        seed for ``embed``, 0 for ``train``).
    """

    name: str | None = flag("--dataset", None)
    graph: str | None = None
    format: str | None = None
    directed: bool | None = flag("--directed", None, negative="--undirected")
    features: str | None = None
    labels: str | None = None
    num_nodes: int = flag("--nodes", 10_000)
    avg_degree: float = 20.0
    num_features: int = 128
    num_classes: int = 8
    homophily: float = 0.7
    seed: int | None = flag("--data-seed", None)

    def __post_init__(self):
        check_int("data.num_nodes", self.num_nodes, 1)
        d, h = self.avg_degree, self.homophily
        check("data.avg_degree", is_real(d) and d > 0, d, "a finite number > 0")
        check_int("data.num_features", self.num_features, 0)
        check_int("data.num_classes", self.num_classes, 1)
        check("data.homophily", is_real(h) and 0 <= h <= 1, h, "in [0, 1]")
        if self.seed is not None:
            check_int("data.seed", self.seed, 0, what=" or None")
        if self.graph is None:
            for field in ("format", "directed", "features", "labels"):
                if getattr(self, field) is not None:
                    raise ValueError(f"data.{field} applies to a graph file (data.graph) only")
            if self.name == "sbm":
                n, c = self.num_nodes, self.num_classes
                at_least = f"at least data.num_classes = {c} for an sbm graph"
                check("data.num_nodes", n >= c, n, at_least)
        elif self.name is not None:
            raise ValueError(
                f"data.name ({self.name!r}) and data.graph ({self.graph!r}) name two graphs; "
                "give one"
            )

    def with_default(self, name: str) -> DataConfig:
        """This description, naming ``name`` (a command's default) if it names no graph."""
        if self.graph is None and self.name is None:
            return dataclasses.replace(self, name=name)
        return self


def load_graph(data: DataConfig, *, seed: int = 0, split: bool = False) -> Graph:
    """The graph ``data`` names; with ``split``, a labelled graph file without a split gets a
    seeded random one. ``sbm`` and ``rmat`` are drawn from ``data.seed`` (None: ``seed``).

    Raises:
      ValueError: an unknown dataset, or a file that cannot be read (the message names it).
    """
    from jaxgraph.data.datasets import load_dataset
    from jaxgraph.data.files import load_graph_file
    from jaxgraph.data.registry import DATASETS
    from jaxgraph.data.synthetic import dc_sbm, rmat

    seed = seed if data.seed is None else data.seed
    if data.graph is not None:
        return load_graph_file(
            data.graph,
            format=data.format,
            directed=data.directed,
            features=data.features,
            labels=data.labels,
            split_seed=seed if split else None,
        )
    name = data.name
    if name == "sbm":
        return dc_sbm(
            data.num_nodes,
            data.num_classes,
            data.avg_degree,
            num_features=data.num_features,
            homophily=data.homophily,
            seed=seed,
        )
    if name == "rmat":
        return rmat(
            data.num_nodes,
            int(data.num_nodes * data.avg_degree),
            seed=seed,
            num_features=data.num_features,
            num_classes=data.num_classes,
        )
    if name is None or name.lower().replace("_", "-") not in DATASETS:
        raise ValueError(
            f"unknown dataset {name!r}; choose one of {', '.join(DATASETS + SYNTHETIC)}"
        )
    return load_dataset(name, seed=seed)
