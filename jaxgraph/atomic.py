"""Atomic file writes: a reader sees the old file or the new one, never a partial one.

:func:`atomic_write` writes a temporary file in the target's directory, fsyncs it, renames it
over the target (``os.replace``, atomic on POSIX) and fsyncs the directory, so that the rename
itself survives a crash. Every writer of the library goes through it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class CheckpointError(RuntimeError):
    """A checkpoint (of a training run or an embedding run) is unreadable, altered, of another
    format version, or does not match the run that loads it."""


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Calls ``write(fileobj)`` on a temporary file next to ``path``, then renames it to
    ``path`` (creating the parent directory); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600 files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """``data`` written to ``path`` atomically (:func:`atomic_write`)."""
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """``text`` (UTF-8) written to ``path`` atomically (:func:`atomic_write`)."""
    return atomic_write_bytes(path, text.encode())
