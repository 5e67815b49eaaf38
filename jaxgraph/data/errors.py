"""The errors of :mod:`jaxgraph.data`, one type per kind of input, shared by every reader.

* :class:`GraphFileError`: a user's graph, feature or label file cannot be read.
* :class:`DatasetError`: a bundled dataset cannot be fetched, verified, parsed or read back.
* :data:`NPZ_READ_ERRORS`: what NumPy and SciPy raise on a missing, truncated or corrupt
  ``.npz`` or ``.npy`` file; each reader turns exactly these into its own error type.
"""

from __future__ import annotations

import zipfile
import zlib

__all__ = ["NPZ_READ_ERRORS", "DatasetError", "GraphFileError"]


class GraphFileError(ValueError):
    """A graph file is missing pieces, truncated, corrupt or has a malformed line.

    The message always names the file (and the line, for text files).
    """


class DatasetError(RuntimeError):
    """A dataset cannot be fetched, verified, parsed or read from the cache.

    The message says which file is wrong or missing and where to put it by hand.
    """


NPZ_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
"""Exceptions of ``np.load`` / ``scipy.sparse.load_npz`` on a damaged or missing file."""
