"""Atomic orbax checkpoints of the full train state, with exact resume.

One orbax step directory per checkpoint (``CheckpointManager``, steps ``ckpt_<epoch:06d>``)::

    <directory>/ckpt_000003/
        state/   orbax PyTree item: every leaf of the state as ``{"leaf00000": ...}`` in tree
                 order; PRNG keys as their ``jax.random.key_data``
        meta/    orbax JSON item: FORMAT_VERSION, the epoch, each leaf's tree path
                 (``jax.tree_util.keystr``), shape, dtype, key implementation and checksum,
                 the run's configuration and the loop's best-validation record, and a SHA-256

Atomicity is orbax's (a temporary directory renamed when complete). OCDBT does not checksum
large array chunks, so each leaf carries a sharding-independent checksum (:func:`_checksums`);
before orbax restores anything, every saved array is read once through tensorstore and checked
(:func:`_validated`), so that a damaged or foreign checkpoint raises one :class:`CheckpointError`
naming the path (an orbax restore failing midway prints tracebacks from its event loop).

Multi-process runs: every process calls every function here (they hold collectives) and writes
or reads its own shards; the directory must be on a file system all processes see.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.atomic import CheckpointError
from jaxgraph.mesh import place

FORMAT_VERSION = 2
_PREFIX = "ckpt"
_NAME = re.compile(rf"^{_PREFIX}_(\d{{6}})$")
_OLD_NAME = re.compile(rf"^{_PREFIX}_(\d{{6}})\.npz$")  # format 1 (a single .npz per checkpoint)
_MIX = 0x9E3779B97F4A7C15  # odd: every word of a leaf gets a distinct odd weight


def _manager(directory: Path):
    """A synchronous ``CheckpointManager`` over ``directory`` with steps ``ckpt_<epoch:06d>``;
    creating it (on every process) removes temporary directories left by a killed save."""
    import orbax.checkpoint as ocp  # slow to import; only runs that checkpoint pay it

    options = ocp.CheckpointManagerOptions(
        step_prefix=_PREFIX,
        step_format_fixed_length=6,
        enable_async_checkpointing=False,
        cleanup_tmp_directories=True,
        save_root_metadata=False,
    )
    # orbax needs absolute paths.
    return ocp.CheckpointManager(
        directory.absolute(), options=options, item_names=("state", "meta")
    )


def _unreadable(path: Path, e: BaseException) -> CheckpointError:
    """The error for a checkpoint orbax or tensorstore cannot read, with the first line of the
    root cause of ``e`` (without tensorstore's dump of its spec)."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = str(e).split(" [tensorstore_spec=")[0].split(" See full TensorStore details")[0]
    lines = text.strip().splitlines()
    reason = f"{type(e).__name__}: {lines[0][:300] if lines else ''}"
    return CheckpointError(
        f"checkpoint {path} is unreadable or truncated ({reason}); delete it to start over"
    )


def _restore(path: Path, **items):
    """Restores the named items (``ocp.args``) of the step directory ``path``; anything orbax
    or tensorstore cannot read is a :class:`CheckpointError`."""
    import orbax.checkpoint as ocp

    if not (path / "_CHECKPOINT_METADATA").is_file() and not (path / "meta").is_dir():
        raise CheckpointError(f"checkpoint {path} is unreadable or truncated: not a checkpoint")
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
            return ckptr.restore(path.absolute(), args=ocp.args.Composite(**items))
    except Exception as e:  # orbax and tensorstore raise many types; all mean "unreadable"
        raise _unreadable(path, e) from e


def _is_key(x) -> bool:
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _leaf_paths(tree) -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def _digest(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def _partial_checksum(data: np.ndarray, index: tuple[slice, ...], shape: tuple[int, ...]) -> int:
    """``sum_i word_i * weight(global position_i) mod 2**32`` over the block ``data`` found at
    ``index`` of an array of ``shape``: the blocks of a partition add up to the checksum of the
    whole array, whatever the partition (sharding)."""
    flat = np.zeros((), np.int64)
    for n, sl in zip(shape, index, strict=True):  # global row-major positions of the block
        start, stop, _ = sl.indices(n)
        flat = flat[..., None] * n + np.arange(start, stop, dtype=np.int64)
    data, flat = np.ascontiguousarray(data).reshape(-1), flat.reshape(-1)
    size = data.dtype.itemsize
    if size % 4 == 0:
        k = size // 4
        words = data.view(np.uint32)
        flat = (flat[:, None] * k + np.arange(k)).reshape(-1)
    else:
        words = data.view(f"u{size}")
    weights = flat.astype(np.uint64) * np.uint64(_MIX) | np.uint64(1)
    return int(np.sum(words.astype(np.uint64) * weights, dtype=np.uint64)) % 2**32


def _checksums(leaves: list) -> list[int]:
    """The checksum of every leaf (host or device arrays, any sharding; key data, not keys).
    A collective: every process calls it for the same leaves in the same order."""
    sums, remote = [], []
    for leaf in leaves:
        if not isinstance(leaf, jax.Array):
            a = np.asarray(leaf)
            sums.append(_partial_checksum(a, tuple(slice(None) for _ in a.shape), a.shape))
            remote.append(False)
            continue
        total = 0
        for shard in leaf.addressable_shards:
            if shard.replica_id == 0:  # count each block once, on the process holding replica 0
                total += _partial_checksum(np.asarray(shard.data), shard.index, leaf.shape)
        sums.append(total % 2**32)
        remote.append(not leaf.is_fully_addressable)
    if any(remote):
        from jax.experimental import multihost_utils

        parts = multihost_utils.process_allgather(np.asarray(sums, np.uint32))
        sums = [
            sum(int(p) for p in parts[:, i]) % 2**32 if r else s
            for i, (s, r) in enumerate(zip(sums, remote, strict=True))
        ]
    return sums


def save_checkpoint(directory: str | Path, epoch: int, state, header: dict[str, Any]) -> Path:
    """Writes ``state`` as the orbax step ``directory/ckpt_<epoch>`` atomically (replacing one
    of the same epoch); returns its path. Every process calls it and writes its own shards."""
    import orbax.checkpoint as ocp

    directory = Path(directory)
    names, values, keys = [], [], []
    for name, leaf in _leaf_paths(state):
        keys.append(str(jax.random.key_impl(leaf)) if _is_key(leaf) else None)
        if _is_key(leaf):
            leaf = jax.random.key_data(leaf)
        names.append(name)
        values.append(leaf if isinstance(leaf, jax.Array) else np.asarray(leaf))
    meta = {
        **header,
        "format_version": FORMAT_VERSION,
        "epoch": int(epoch),
        "leaf_paths": names,
        "leaf_shapes": [list(a.shape) for a in values],
        "leaf_dtypes": [str(a.dtype) for a in values],
        "leaf_keys": keys,
        "leaf_checksums": _checksums(values),
    }
    meta["sha256"] = _digest(meta)
    # orbax cannot store empty arrays: their shape and dtype in the meta item say everything.
    arrays = {f"leaf{i:05d}": v for i, v in enumerate(values) if np.size(v)}
    with _manager(directory) as manager:
        if int(epoch) in manager.all_steps():
            manager.delete(int(epoch))
        manager.save(
            int(epoch),
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)
            ),
            force=True,  # the loop decides when to save, not orbax's interval policy
        )
    return directory / f"{_PREFIX}_{int(epoch):06d}"


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint with the highest epoch in ``directory``, or ``None``.

    Raises:
      CheckpointError: if ``directory`` holds only checkpoints of the old ``.npz`` format.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _NAME.match(p.name)))
    if not found:
        if any(_OLD_NAME.match(p.name) for p in directory.iterdir()):
            raise CheckpointError(
                f"{directory} holds checkpoints of format 1 (ckpt_*.npz), which this version "
                f"(format {FORMAT_VERSION}, orbax) cannot resume; delete them to start over"
            )
        return None
    return directory / f"{_PREFIX}_{found[-1]:06d}"


def read_header(path: str | Path) -> dict[str, Any]:
    """The JSON item of the checkpoint at ``path``: what ``save_checkpoint`` got as ``header``,
    plus ``format_version``, ``epoch`` and the leaves' paths, shapes, dtypes and checksums.

    Raises:
      CheckpointError: if the checkpoint is unreadable, altered or of another format version.
    """
    import orbax.checkpoint as ocp

    path = Path(path)
    meta = _restore(path, meta=ocp.args.JsonRestore()).meta
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        version = meta.get("format_version") if isinstance(meta, dict) else None
        raise CheckpointError(
            f"checkpoint {path} has format version {version}, expected {FORMAT_VERSION}"
        )
    if meta.get("sha256") != _digest({k: v for k, v in meta.items() if k != "sha256"}):
        raise CheckpointError(f"checkpoint {path} is corrupt: its header was altered")
    return meta


def _empty(target: jax.ShapeDtypeStruct):
    """An empty leaf (orbax stores none) in the target's sharding, or as a NumPy array."""
    value = np.zeros(target.shape, target.dtype)
    return value if target.sharding is None else place(value, target.sharding)


def _array_spec(path: Path) -> Callable[[str], dict[str, Any]]:
    """``key -> tensorstore spec`` of the arrays of the ``state`` item, as orbax wrote them
    (its ``_METADATA`` says whether through OCDBT and in which zarr format). Also parses the
    per-process array metadata that an orbax restore reads concurrently."""
    state = path.absolute() / "state"
    try:
        flags = json.loads((state / "_METADATA").read_text())
        for f in sorted((state / "array_metadatas").glob("*")):
            json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise _unreadable(path, e) from e
    driver = "zarr3" if flags.get("use_zarr3") else "zarr"
    if flags.get("use_ocdbt", True):
        return lambda key: {
            "driver": driver,
            "kvstore": {"driver": "ocdbt", "base": f"file://{state}/", "path": f"{key}/"},
        }
    return lambda key: {"driver": driver, "kvstore": {"driver": "file", "path": f"{state / key}/"}}


def _validated(path: Path, meta: dict[str, Any], picked: list[int]) -> Iterator[np.ndarray]:
    """The saved leaves ``picked`` (indices), each read whole through tensorstore's synchronous
    API, one at a time, and checked against its shape, dtype and checksum."""
    import tensorstore as ts

    spec = None
    for i in picked:
        shape, dtype = tuple(meta["leaf_shapes"][i]), jnp.dtype(meta["leaf_dtypes"][i])
        if not math.prod(shape):
            yield np.zeros(shape, dtype)
            continue
        spec = spec or _array_spec(path)
        try:
            store = ts.open(spec(f"leaf{i:05d}"), open=True, read=True).result()
            value = np.asarray(store.read().result())
        except Exception as e:  # tensorstore reports every failure as a ValueError
            raise _unreadable(path, e) from e
        full = tuple(slice(None) for _ in shape)
        if (
            value.shape != shape
            or value.dtype != dtype
            or _partial_checksum(value, full, shape) != meta["leaf_checksums"][i]
        ):
            raise CheckpointError(
                f"checkpoint {path} is corrupt: leaf {meta['leaf_paths'][i]} differs from what "
                "was saved (checksum); delete it to start over"
            )
        yield value


def read_leaves(path: str | Path, prefix: str = "") -> dict[str, np.ndarray]:
    """The saved leaves whose tree path starts with ``prefix`` (e.g. ``".comm_state"``), by
    path, as NumPy arrays (PRNG keys as their key data), verified: for state whose shapes only
    the checkpoint knows. Only these leaves are read (whole, on every process)."""
    path = Path(path)
    meta = read_header(path)
    picked = [i for i, name in enumerate(meta["leaf_paths"]) if name.startswith(prefix)]
    values = _validated(path, meta, picked)
    return {meta["leaf_paths"][i]: v for i, v in zip(picked, values, strict=True)}


def restore_checkpoint(path: str | Path, template) -> tuple[Any, dict[str, Any]]:
    """``(state, header)``: the checkpoint at ``path`` loaded into the structure and shardings
    of ``template`` (each process reads only its shards); a :class:`CheckpointError` if it is
    unreadable or altered, or its leaves differ from the template's."""
    import orbax.checkpoint as ocp

    path = Path(path)
    header = read_header(path)
    leaves = _leaf_paths(template)
    names = [p for p, _ in leaves]
    if header["leaf_paths"] != names:
        missing = sorted(set(names) ^ set(header["leaf_paths"]))
        raise CheckpointError(
            f"checkpoint {path} does not match this run's state: leaves differ at {missing[:3]}"
            " (a different model, optimizer or method?)"
        )
    targets = {}
    for i, (name, leaf) in enumerate(leaves):
        expect = jax.random.key_data(leaf) if _is_key(leaf) else leaf
        if not isinstance(expect, jax.Array):
            expect = np.asarray(expect)
        shape, dtype = expect.shape, expect.dtype
        saved = (tuple(header["leaf_shapes"][i]), jnp.dtype(header["leaf_dtypes"][i]))
        if saved != (shape, dtype):
            raise CheckpointError(
                f"checkpoint {path}: leaf {name} has shape {saved[0]} {saved[1]}, this run "
                f"expects {shape} {dtype}"
            )
        sharding = expect.sharding if isinstance(expect, jax.Array) else None
        targets[f"leaf{i:05d}"] = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    for _ in _validated(path, header, list(range(len(targets)))):
        pass  # one leaf in memory at a time
    stored = {k: t for k, t in targets.items() if t.size}
    state = _restore(path, state=ocp.args.StandardRestore(stored)).state if stored else {}
    values = [state[k] if t.size else _empty(t) for k, t in targets.items()]
    restored = [
        jax.random.wrap_key_data(v, impl=jax.random.key_impl(leaf)) if _is_key(leaf) else v
        for v, (_, leaf) in zip(values, leaves, strict=True)
    ]
    treedef = jax.tree_util.tree_structure(template)
    return jax.tree_util.tree_unflatten(treedef, restored), header
