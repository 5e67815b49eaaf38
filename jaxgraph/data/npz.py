"""NumPy archives and arrays of a user's files, read without unpickling anything; every error
of a damaged file becomes a :class:`~jaxgraph.data.errors.GraphFileError` naming the file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from jaxgraph.data.errors import NPZ_READ_ERRORS, GraphFileError

__all__ = ["load_npy", "npz_keys", "read_npz"]


@contextlib.contextmanager
def _open_npz(path: Path) -> Iterator[np.lib.npyio.NpzFile]:
    """The open archive; errors while it is open, reading included, name ``path``."""
    try:
        # np.load leaks its file handle when the zip is corrupt; own the handle instead.
        with open(path, "rb") as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise GraphFileError(f"{path}: a single .npy array, not an .npz archive")
            with z:
                yield z
    except FileNotFoundError as exc:
        raise GraphFileError(f"{path}: no such file") from exc
    except GraphFileError:
        raise
    except NPZ_READ_ERRORS as exc:
        raise GraphFileError(
            f"{path}: cannot read as an .npz archive (truncated or corrupt?): {exc}"
        ) from exc


def read_npz(path, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Reads the arrays of an ``.npz`` archive (all, or only ``keys``), refusing pickles;
    ``GraphFileError`` if it is missing, not an archive, damaged, or lacks one of ``keys``."""
    path = Path(path)
    with _open_npz(path) as z:
        missing = [k for k in keys or () if k not in z.files]
        if missing:
            raise GraphFileError(f"{path}: missing array(s) {missing} (has {sorted(z.files)})")
        return {k: np.asarray(z[k]) for k in (z.files if keys is None else keys)}


def npz_keys(path: Path) -> set[str]:
    """The names of the arrays of an ``.npz`` archive (none is read)."""
    with _open_npz(path) as z:
        return set(z.files)


def load_npy(path: Path) -> np.ndarray:
    """A single ``.npy`` array, refusing pickles."""
    try:
        with open(path, "rb") as f:
            arr = np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise GraphFileError(f"{path}: no such file") from None
    except NPZ_READ_ERRORS as exc:
        raise GraphFileError(f"{path}: cannot read as a .npy array ({exc})") from exc
    if not isinstance(arr, np.ndarray):
        raise GraphFileError(f"{path}: an .npz archive, expected a single .npy array")
    return arr
