"""The errors of :mod:`jaxgraph.data`, one type per kind of input, shared by every reader."""

from __future__ import annotations

import zipfile
import zlib

__all__ = ["NPZ_READ_ERRORS", "DatasetError", "GraphFileError"]


class GraphFileError(ValueError):
    """A user's graph, feature or label file is missing pieces, truncated, corrupt or has a
    malformed line; the message names the file (and the line, for text files)."""


class DatasetError(RuntimeError):
    """A bundled dataset cannot be fetched, verified, parsed or read from the cache; the
    message says which file is wrong or missing and where to put it by hand."""


NPZ_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
"""Exceptions of ``np.load`` / ``scipy.sparse.load_npz`` on a damaged or missing file."""
