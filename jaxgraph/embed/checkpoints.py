"""The embedding loop's checkpoint files: each round's corpus and the train state.

After every round the corpus (``corpus_<r>.ckpt``, :func:`write_checkpoint`: a magic tag, a
JSON header with SHA-256 digests, then the arrays) and the train state (the orbax step
``state_<r>/``, :func:`write_state`) are written atomically. A truncated, altered or foreign
file raises :class:`~jaxgraph.atomic.CheckpointError` naming it; :func:`latest_state` finds the
last complete round to resume after.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import zipfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jaxgraph.atomic import CheckpointError, atomic_write_bytes
from jaxgraph.embed.compress import CompressedWalks
from jaxgraph.embed.walks import Walks

MAGIC = b"JGEMBCKPT1"
_STATE = re.compile(r"^state_(\d{6})$")


def write_checkpoint(path: str | Path, arrays: dict[str, np.ndarray], header: dict) -> None:
    """Writes ``MAGIC + header JSON + newline + npz`` atomically; the header records the
    payload's length and SHA-256."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    payload = buf.getvalue()
    meta = {**header, "payload_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    atomic_write_bytes(path, MAGIC + json.dumps(meta).encode() + b"\n" + payload)


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Reads a file of :func:`write_checkpoint`, verified: a missing, truncated or altered file
    raises :class:`CheckpointError` naming it."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} cannot be read: {e}") from e
    if not data.startswith(MAGIC) or b"\n" not in data:
        raise CheckpointError(f"checkpoint {path} is not an embedding checkpoint or is truncated")
    head, payload = data[len(MAGIC) :].split(b"\n", 1)
    try:
        meta = json.loads(head.decode())
        expect_len, expect_sha = int(meta["payload_bytes"]), str(meta["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} has a damaged header ({e})") from e
    if len(payload) != expect_len:
        raise CheckpointError(
            f"checkpoint {path} is truncated or padded: payload {len(payload)} bytes, "
            f"header says {expect_len}"
        )
    if hashlib.sha256(payload).hexdigest() != expect_sha:
        raise CheckpointError(f"checkpoint {path} is corrupt: SHA-256 of the payload differs")
    try:
        with np.load(io.BytesIO(payload)) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"checkpoint {path} has an unreadable payload ({e})") from e
    return arrays, meta


def corpus_path(directory: Path, r: int) -> Path:
    return directory / f"corpus_{r:06d}.ckpt"


def state_path(directory: Path, r: int) -> Path:
    return directory / f"state_{r:06d}"


def latest_state(directory: str | Path) -> Path | None:
    """The state checkpoint of the highest round in ``directory``, or None; raises
    :class:`CheckpointError` if ``directory`` holds only state files of the old format."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _STATE.match(p.name)))
    if found:
        return state_path(directory, found[-1])
    if any(directory.glob("state_*.ckpt")):
        raise CheckpointError(
            f"{directory} holds state checkpoints of an older format (state_*.ckpt), which "
            "cannot be resumed; delete them to start over"
        )
    return None


def _state_manager(directory: Path, keep: int):
    """A synchronous orbax ``CheckpointManager`` over ``directory`` with steps
    ``state_<round:06d>``, keeping the newest ``keep``."""
    import orbax.checkpoint as ocp  # slow to import

    options = ocp.CheckpointManagerOptions(
        step_prefix="state",
        step_format_fixed_length=6,
        enable_async_checkpointing=False,
        cleanup_tmp_directories=True,
        save_root_metadata=False,
        preservation_policy=ocp.checkpoint_managers.LatestN(keep),
    )
    names = ("state", "meta")  # orbax needs absolute paths:
    return ocp.CheckpointManager(directory.absolute(), options=options, item_names=names)


def _digest(meta: dict) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def _array_digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def write_state(
    directory: Path, r: int, arrays: dict[str, np.ndarray], header: dict, keep: int = 2
) -> Path:
    """Writes ``arrays`` and ``header`` as the orbax step ``state_<r>`` of ``directory``
    (atomically; an existing step ``r`` is replaced), keeping the newest ``keep`` steps.

    The step holds two items: ``state/``, the arrays (an orbax PyTree), and ``meta/``, a JSON
    item with the header, each array's shape, dtype and SHA-256, and a SHA-256 of itself.
    """
    import orbax.checkpoint as ocp

    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    spec = lambda a: {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": _array_digest(a)}
    meta = {**header, "arrays": {k: spec(a) for k, a in arrays.items()}}
    meta["sha256"] = _digest(meta)
    stored = {k: a for k, a in arrays.items() if a.size}  # orbax stores no empty array
    with _state_manager(directory, keep) as manager:
        if r in manager.all_steps():
            manager.delete(r)
        manager.save(
            r,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(stored), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )
    return state_path(directory, r)


def _reason(e: BaseException) -> str:
    """The first line of the root cause of an orbax/tensorstore error."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = str(e).split(" [tensorstore_spec=")[0].split(" See full TensorStore details")[0]
    lines = text.strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def _read_array(path: Path, key: str) -> np.ndarray:
    """The array ``key`` of the ``state`` item of the orbax step ``path``, read whole through
    tensorstore's synchronous API (an orbax restore reads arrays concurrently; when one read
    fails, the others complete into its closed event loop and print tracebacks)."""
    import tensorstore as ts

    state = path.absolute() / "state"
    flags = json.loads((state / "_METADATA").read_text())
    driver = "zarr3" if flags.get("use_zarr3") else "zarr"
    if flags.get("use_ocdbt", True):
        kvstore = {"driver": "ocdbt", "base": f"file://{state}/", "path": f"{key}/"}
    else:
        kvstore = {"driver": "file", "path": f"{state / key}/"}
    store = ts.open({"driver": driver, "kvstore": kvstore}, open=True, read=True).result()
    return np.asarray(store.read().result())


def read_state(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Reads a step of :func:`write_state`, verified (the arrays one by one, :func:`_read_array`):
    one that is missing, truncated, altered or not a state raises :class:`CheckpointError`."""
    import orbax.checkpoint as ocp

    path = Path(path)
    if not (path / "meta").is_dir():
        raise CheckpointError(f"checkpoint {path} is not an embedding state or is truncated")
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
            items = ocp.args.Composite(meta=ocp.args.JsonRestore())
            meta = ckptr.restore(path.absolute(), args=items).meta
    except Exception as e:  # orbax raises many types; all mean unreadable
        raise CheckpointError(f"checkpoint {path} is truncated or unreadable ({_reason(e)})") from e
    if not isinstance(meta, dict) or meta.get("sha256") != _digest(
        {k: v for k, v in meta.items() if k != "sha256"}
    ):
        raise CheckpointError(f"checkpoint {path} has a damaged header")
    arrays = {}
    for k, spec in meta["arrays"].items():
        shape, dtype = tuple(spec["shape"]), jnp.dtype(spec["dtype"])
        try:
            a = _read_array(path, k) if math.prod(shape) else np.zeros(shape, dtype)
        except Exception as e:  # tensorstore reports every failure as a ValueError today
            raise CheckpointError(
                f"checkpoint {path} is truncated or unreadable ({_reason(e)})"
            ) from e
        if a.shape != shape or a.dtype != dtype or _array_digest(a) != spec["sha256"]:
            raise CheckpointError(f"checkpoint {path} is corrupt: SHA-256 of array {k} differs")
        arrays[k] = a
    return arrays, meta


_FABC_ARRAYS = ("hot_ids", "bitmaps", "residual", "lengths")


def corpus_arrays(payload: Walks | CompressedWalks) -> tuple[dict[str, np.ndarray], dict]:
    if isinstance(payload, CompressedWalks):
        arrays = {k: np.asarray(getattr(payload, k)) for k in _FABC_ARRAYS}
        return arrays, {"kind": "fabc", "walk_length": payload.walk_length}
    return {"nodes": payload.nodes, "lengths": payload.lengths}, {"kind": "raw"}


def corpus_from(arrays: dict[str, np.ndarray], meta: dict) -> Walks | CompressedWalks:
    if meta["kind"] == "fabc":
        return CompressedWalks(*(arrays[k] for k in _FABC_ARRAYS), int(meta["walk_length"]))
    return Walks(arrays["nodes"], arrays["lengths"])
