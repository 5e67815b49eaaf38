"""Atomic checkpoints of the full train state, with exact resume.

A checkpoint is one ``.npz`` file: every leaf of the state pytree (gathered to the host) under
its tree path, plus a JSON header with the format version, the epoch, the run's configuration
and the control layer's own state (best-validation bookkeeping). It is written to a temporary
file in the same directory, flushed and fsynced, then renamed over the final name, so a killed
run leaves either the previous checkpoint or the new one, never a partial file.

Multi-process runs: every process gathers the leaves, process 0 writes; on resume every process
reads the file, so the checkpoint directory must be on a file system all processes see.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxgraph.atomic import atomic_write
from jaxgraph.mesh import place, to_host

FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt_(\d{6})\.npz$")


class CheckpointError(RuntimeError):
    """A checkpoint is unreadable or does not match the run that loads it."""


def _leaf_paths(tree) -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def save_checkpoint(directory: str | Path, epoch: int, state, header: dict[str, Any]) -> Path:
    """Writes ``state`` as ``directory/ckpt_<epoch>.npz`` atomically; returns the path.

    In a multi-process run every process must call this (leaves sharded over several
    processes are all-gathered, a collective); only process 0 writes the file.
    """
    directory = Path(directory)
    final = directory / f"ckpt_{epoch:06d}.npz"
    arrays = {}
    for i, (_, leaf) in enumerate(_leaf_paths(state)):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        arrays[f"leaf{i:05d}"] = to_host(leaf) if isinstance(leaf, jax.Array) else np.asarray(leaf)
    if jax.process_index() != 0:
        return final
    directory.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "epoch": int(epoch),
        "leaf_paths": [p for p, _ in _leaf_paths(state)],
        **header,
    }
    arrays["__header__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    atomic_write(final, lambda f: np.savez(f, **arrays))
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint with the highest epoch in ``directory``, or ``None``."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name)))
    return found[-1][1] if found else None


def read_header(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f, np.load(f) as data:
            return json.loads(bytes(data["__header__"]).decode())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(
            f"checkpoint {path} is unreadable or truncated ({e}); delete it to start over"
        ) from e


def read_leaves(path: str | Path, prefix: str = "") -> dict[str, np.ndarray]:
    """The saved leaves whose tree path starts with ``prefix`` (e.g. ``".comm_state"``), by
    path, as NumPy arrays: for state whose shapes only the checkpoint knows."""
    header = read_header(path)
    try:
        with open(path, "rb") as f, np.load(f) as data:
            return {
                name: data[f"leaf{i:05d}"]
                for i, name in enumerate(header["leaf_paths"])
                if name.startswith(prefix)
            }
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint {path} is unreadable or truncated ({e})") from e


def restore_checkpoint(path: str | Path, template) -> tuple[Any, dict[str, Any]]:
    """Loads the checkpoint at ``path`` into the structure and shardings of ``template``.

    Returns:
      ``(state, header)``.

    Raises:
      CheckpointError: if the file is unreadable or its leaves differ from the template's
        (names the first mismatching leaf).
    """
    header = read_header(path)
    if header.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {header.get('format_version')}, "
            f"expected {FORMAT_VERSION}"
        )
    leaves = _leaf_paths(template)
    names = [p for p, _ in leaves]
    if header["leaf_paths"] != names:
        missing = sorted(set(names) ^ set(header["leaf_paths"]))
        raise CheckpointError(
            f"checkpoint {path} does not match this run's state: leaves differ at {missing[:3]}"
            " (a different model, optimizer or method?)"
        )
    restored = []
    try:
        with open(path, "rb") as f, np.load(f) as data:
            for i, (name, leaf) in enumerate(leaves):
                value = data[f"leaf{i:05d}"]
                is_key = jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
                expect = jax.random.key_data(leaf) if is_key else leaf
                if value.shape != expect.shape or value.dtype != expect.dtype:
                    raise CheckpointError(
                        f"checkpoint {path}: leaf {name} has shape {value.shape} "
                        f"{value.dtype}, this run expects {expect.shape} {expect.dtype}"
                    )
                value = place(value, leaf.sharding)  # this process's shards only
                if is_key:
                    value = jax.random.wrap_key_data(value, impl=jax.random.key_impl(leaf))
                restored.append(value)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint {path} is unreadable or truncated ({e})") from e
    treedef = jax.tree_util.tree_structure(template)
    return jax.tree_util.tree_unflatten(treedef, restored), header
