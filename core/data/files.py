"""What every file the package writes shares: the atomic write (and its errors), the JSON
encoder, the mesh identity and the tool version. One implementation of each, used by bake
caches, model files, tet-mesh files, the add-on's stored arrays and the job event stream.

Atomic writes
-------------
A file is written to a hidden temporary beside its destination, ``.<stem>.<8 hex>.tmp<suffix>``
(same folder, so the rename never crosses a file system; same suffix, so writers that pick a
format by extension, like ``np.savez``, write the file asked for), then moved over the
destination with ``os.replace``, which is atomic on POSIX and Windows. A reader sees the old
file or the new one, never a mix; a crash leaves at most a temporary that
:func:`is_temporary` recognizes. ``durable=True`` also fsyncs the file before the rename and
the folder after it, so the new content survives a power cut once the call returns.

Folders that cannot be written
------------------------------
A write the file system refuses (read-only, no permission, disk full, a file where a folder
should be) raises :class:`~.errors.WriteError` (a ``NeuralRomError`` and an ``OSError``)
naming what was written and what to do, never the raw ``OSError`` from deep inside. Jobs
call :func:`ensure_writable_dir` on their destinations before their long work, so the
refusal comes first, not after the work.

Job folders
-----------
A job's request and result live in a folder of its own, ``<stem>-<8 hex>.job`` beside what it
writes (:func:`job_folder`), so two Blender processes working on one object (two instances
of a file, two farm tasks on one folder) never delete or read each other's half-written
inputs; the add-on removes the folder when it has stored the result, and
:func:`job_folder` sweeps the ones a killed Blender left more than a week ago.

No numpy at import time: :mod:`.jobs` (which imports no numpy either) uses the JSON encoder,
so numpy is imported inside :func:`write_npz` and :func:`mesh_hash` only.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import WriteError

__all__ = [
    "atomic_path",
    "ensure_writable_dir",
    "fsync_dir",
    "is_temporary",
    "json_default",
    "mesh_hash",
    "replace_file",
    "temporary_path",
    "tool_version",
    "write_atomic",
    "write_error",
    "write_npz",
]

_TEMP_RE = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp(\.[^.]+)?$")


# --------------------------------------------------------------------------------------------
# atomic writes
# --------------------------------------------------------------------------------------------


def temporary_path(dest: str | os.PathLike) -> Path:
    """A fresh hidden temporary path beside ``dest`` with the same suffix (see the module doc)."""
    dest = Path(dest)
    return dest.with_name(f".{dest.stem}.{uuid.uuid4().hex[:8]}.tmp{dest.suffix}")


STALE_JOB_FOLDER_S = 7 * 86400.0  # a job folder left this long ago is a killed Blender's


def job_folder(parent: str | os.PathLike, stem: str) -> Path:
    """A fresh folder name ``<parent>/<stem>-<8 hex>.job`` for one job's files (not created),
    after removing the ``<stem>-*.job`` folders there untouched for a week (see the module
    doc)."""
    parent = Path(parent)
    now = time.time()
    for old in parent.glob(f"{stem}-*.job"):
        try:
            if now - old.stat().st_mtime > STALE_JOB_FOLDER_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # another process removed it first
    return parent / f"{stem}-{uuid.uuid4().hex[:8]}.job"


def is_temporary(path: str | os.PathLike) -> bool:
    """True for a temporary an interrupted write left behind (ours, or any ``*.tmp``)."""
    name = Path(path).name
    return name.endswith(".tmp") or _TEMP_RE.match(name) is not None


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename in it) to disk; a no-op where folders cannot be
    opened (Windows)."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """``os.replace(src, dst)``, retried briefly on Windows, where it fails while a reader
    has ``dst`` open for a moment."""
    for attempt in range(50):
        try:
            os.replace(src, dst)
            return
        except PermissionError:
            if os.name == "posix" or attempt == 49:
                raise
            time.sleep(0.01)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)  # Windows commits only handles opened for writing
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, *, durable: bool = False) -> Iterator[Path]:
    """Write a file atomically: yield a temporary path, move it over ``dest`` on success.

    >>> with atomic_path("model.npz") as tmp:  # doctest: +SKIP
    ...     np.savez(tmp, a=a)

    When the block raises, ``dest`` keeps its old content (or stays absent) and the temporary
    is removed. ``durable`` fsyncs the file before the rename and the folder after it.
    A write the file system refuses (a read-only folder, no permission, a full disk) raises
    :class:`~.errors.WriteError` naming ``dest``.
    """
    dest = Path(dest)
    tmp = temporary_path(dest)
    try:
        yield tmp
        if durable:
            _fsync_file(tmp)
        replace_file(tmp, dest)
        if durable:
            fsync_dir(dest.parent)
    except WriteError:
        raise
    except OSError as exc:
        raise write_error(exc, f"the file {dest}") from exc
    finally:
        with contextlib.suppress(OSError):  # on a read-only folder even this fails
            tmp.unlink(missing_ok=True)


def write_error(exc: OSError, what: str, fix: str = "") -> WriteError:
    """The :class:`~.errors.WriteError` for ``exc``, raised while writing ``what``: says why
    in the file system's words and what to do."""
    why = exc.strerror or str(exc) or type(exc).__name__
    if not fix and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        fix = "free disk space, or choose a folder on another disk"
    fix = fix or (
        "choose a folder you can write to (the Neural ROM cache directory in the scene "
        "settings, or the path you passed)"
    )
    return WriteError(f"cannot write {what} ({why}): {fix}")  # ``exc`` as its __cause__


def ensure_writable_dir(folder: str | os.PathLike, what: str = "", fix: str = "") -> Path:
    """Create ``folder`` (and its parents) and prove that a file can be created in it.

    A job calls this before its long work, so a read-only destination fails in a second,
    not after the work. The proof is a real file, created and deleted: permission bits do
    not tell (root writes anyway; a read-only file system refuses even root).

    Parameters
    ----------
    folder : path
    what : str
        What goes there, for the message (``"the bake"``); default: the folder itself.
    fix : str
        What to do instead, for the message; default: choose a writable folder.

    Raises
    ------
    WriteError
    """
    folder = Path(folder)
    what = f"{what} to {folder}" if what else f"to {folder}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise write_error(exc, what, fix) from exc
    return folder


def write_atomic(dest: str | os.PathLike, data: bytes, *, durable: bool = False) -> None:
    """Replace ``dest`` with ``data`` atomically (see :func:`atomic_path`)."""
    with atomic_path(dest, durable=durable) as tmp:
        tmp.write_bytes(data)


def write_npz(dest: str | os.PathLike, arrays: Mapping[str, Any], *, durable: bool = False) -> None:
    """``np.savez`` (uncompressed) of ``arrays`` to ``dest`` atomically, under exactly that
    name (see :func:`atomic_path`). Store numeric arrays only: we read with
    ``allow_pickle=False``."""
    import numpy as np  # here, not at the top: see the module docstring

    with atomic_path(dest, durable=durable) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


def json_default(obj: Any) -> Any:
    """The package's JSON encoder, for ``json.dumps(..., default=json_default)``.

    numpy scalars and arrays become Python numbers and (nested) lists, paths strings, sets
    sorted lists. Anything else raises ``TypeError`` as ``json.dumps`` expects.
    """
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy, without importing it here
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        try:
            return sorted(obj)
        except TypeError:  # mixed types: any order is still valid JSON
            return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# --------------------------------------------------------------------------------------------
# identities
# --------------------------------------------------------------------------------------------


def mesh_hash(X, T) -> str:
    """Identity of a tet mesh: SHA-256 of its float64 rest positions, then its int64 tets.

    Bake caches and model files record it and refuse a mesh whose hash differs;
    ``TetMesh.hash()`` is this function.

    Parameters
    ----------
    X : (n, 3) float array
        Rest positions, metres; hashed as little-endian float64, C order.
    T : (m, 4) int array
        Tetrahedra (node indices); hashed as little-endian int64, C order.

    Returns
    -------
    str
        64 hex digits.
    """
    import numpy as np  # here, not at the top: see the module docstring

    X = np.asarray(X)
    T = np.asarray(T)
    if X.ndim != 2 or X.shape[1] != 3:
        raise ValueError(f"mesh_hash: X must have shape (n, 3), got {X.shape}")
    if T.ndim != 2 or T.shape[1] != 4:
        raise ValueError(f"mesh_hash: T must have shape (m, 4), got {T.shape}")
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(X, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(T, dtype="<i8").tobytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def tool_version() -> str:
    """The extension's version, recorded in every file it writes ("unknown" if not found)."""
    manifest = Path(__file__).resolve().parents[2] / "blender_manifest.toml"
    # In Blender the extension is not pip-installed: its manifest is the source of truth.
    try:
        import tomllib

        with open(manifest, "rb") as f:
            return str(tomllib.load(f)["version"])
    except (OSError, ValueError, KeyError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("neural_rom")
        except PackageNotFoundError:
            return "unknown"
