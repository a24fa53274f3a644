"""On-disk bake caches: streaming append-then-commit writes, memory-mapped reads, shards.

A *bake* is a full-space simulation of one training scenario, stored frame by frame so
that training can read it (positions and inputs per frame) and users can replay it.
Bakes can be gigabytes, so they are written as a stream of frames and read through
``np.memmap``; a crash or a cancel mid-bake leaves a valid prefix on disk.

Format (schema 1)
-----------------
A bake is a directory, by convention ``<name>.nrbake/``, holding:

``meta.json``
    ``{"format": "neural_rom.bake", "schema": 1, "bake_id": <uuid4 hex>,
    "mesh_hash": <str>, "channels": {<name>: {"dtype": "<f8", "shape": [n, 3]}, ...},
    "extra_arrays": [<name>, ...], "created": <ISO 8601 UTC>, "tool_version": <str>,
    "status": "in_progress" | "complete" | "cancelled" | "failed: <message>",
    "metadata": {<free-form caller JSON: material, dt, scenario, seed, settings>}}``.
    Rewritten atomically (see below) when the status or the caller metadata change.
``mesh.npz``
    ``X`` (n, 3) float64 rest positions [m], ``T`` (m, 4) int64 tets, plus the caller's
    extra arrays (pinned vertex indices, embedding weights, ...). No pickled objects.
``<channel>.bin``
    One raw file per channel: frames appended contiguously, C order, little endian, with
    no header, so frame ``i`` of a channel of per-frame shape ``s`` and dtype ``d`` lives
    at byte offset ``i * prod(s) * d.itemsize``. Per-frame scalars (Newton iterations,
    the time step used) are channels of shape ``()``.
``commit.json``
    ``{"frames": N, "bake_id": ..., "schema": 1, "time": <unix seconds>}``. It is the
    only thing readers trust for the frame count.

Append-then-commit
------------------
:meth:`BakeWriter.append` validates the whole frame first (names, shapes, dtypes, finite
values), then writes every channel's bytes at the offset of frame ``N``, flushes (and by
default fsyncs) them, and only then replaces ``commit.json`` with ``frames = N + 1``:
the JSON is written to a hidden temporary beside it, fsynced and moved over the old one
with ``os.replace`` (atomic on POSIX and Windows), then the directory is fsynced
(:func:`.files.write_atomic`, the package's one atomic write).
So at any instant ``commit.json`` names a count of frames whose bytes are all on disk.

- Bytes past the committed frames (a frame cut in the middle by a crash) are ignored by
  :class:`BakeCache` and truncated away by :meth:`BakeWriter.resume`.
- A channel file *shorter* than the committed frames is truncated (damaged) and raises
  :class:`~.errors.CacheError`.
- Stale temporaries (a crash between writing the temp file and the replace;
  :func:`.files.is_temporary`) are never read; :meth:`BakeWriter.resume` deletes them.
- A new bake is assembled in a hidden sibling directory ``.<name>.creating-<uuid>`` and
  renamed into place, so the bake path either does not exist or holds a valid 0-frame
  bake. ``overwrite=True`` first renames the old bake aside to ``.<name>.old-<uuid>``,
  moves the new one in, then deletes the old one: a crash in between leaves the old
  data in the hidden directory, never a half-deleted bake at the path. A non-empty
  directory that is not a Neural ROM bake is never deleted, even with ``overwrite``.

One writer at a time per bake; any number of readers, including while it is written
(:meth:`BakeCache.refresh` picks up newly committed frames). On POSIX the writer holds an
exclusive ``flock`` on the bake directory (the kernel drops it when the process dies, so a
killed writer never leaves it behind): a second writer (a bake started again while the one
it replaces still finishes its frame) waits up to :data:`WRITER_WAIT_S` for it, then fails
with a :class:`~.errors.CacheError`, and never interleaves its commits with the first's.
Folders the writer cannot create or write raise :class:`~.errors.WriteError`.
"""

from __future__ import annotations

import glob as _glob
import json
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import numpy as np

from ..errors import CacheError, JobCancelled, WriteError
from . import files
from .files import (
    ensure_writable_dir,
    fsync_dir,
    is_temporary,
    json_default,
    tool_version,
    write_atomic,
    write_error,
)

try:
    import fcntl
except ImportError:  # Windows: one writer per bake is the caller's promise there
    fcntl = None

__all__ = [
    "BAKE_SUFFIX",
    "FORMAT",
    "SCHEMA_VERSION",
    "BakeCache",
    "BakeDataset",
    "BakeWriter",
    "Channel",
]

SCHEMA_VERSION = 1
FORMAT = "neural_rom.bake"
BAKE_SUFFIX = ".nrbake"

_META = "meta.json"
_MESH = "mesh.npz"
_COMMIT = "commit.json"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_RESERVED_EXTRA = ("X", "T")

#: Seconds a new writer waits for another process to stop writing the same bake.
WRITER_WAIT_S = 60.0


# --------------------------------------------------------------------------- helpers


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"{what} name {name!r} is not allowed: use letters, digits and '_' "
            "(not starting with a digit, at most 128 characters)"
        )
    return name


def _normalize_dtype(dtype: Any) -> str:
    """Little-endian dtype string of a plain numeric dtype ('<f8', '<i4', '|u1', '|b1')."""
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"not a numpy dtype: {dtype!r}") from e
    if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
        raise ValueError(f"channel dtype must be a plain numeric dtype, got {dt!r}")
    return dt.newbyteorder("<").str


@dataclass(frozen=True)
class Channel:
    """One per-frame array stream of a bake.

    Parameters
    ----------
    name : str
        Channel name; also the file stem ``<name>.bin`` and the keyword of
        :meth:`BakeWriter.append`.
    shape : tuple of int
        Per-frame shape, e.g. ``(n, 3)`` for positions, ``()`` for a scalar.
    dtype : str
        numpy dtype string; normalized to little endian (``"<f8"``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "<f8"

    def __post_init__(self) -> None:
        _check_name(self.name, "channel")
        shape = self.shape
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        try:
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError) as e:
            raise ValueError(f"channel {self.name!r}: shape must be a tuple of ints") from e
        if any(s < 0 for s in shape):
            raise ValueError(f"channel {self.name!r}: negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", _normalize_dtype(self.dtype))

    @property
    def frame_nbytes(self) -> int:
        """Bytes of one frame of this channel."""
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape)}


def _channels_from_arg(channels: Sequence[Channel] | Mapping[str, Any]) -> dict[str, Channel]:
    """Accept ``[Channel, ...]`` or ``{name: shape}`` / ``{name: (shape, dtype)}`` / ``{name: Channel}``."""
    out: dict[str, Channel] = {}
    if isinstance(channels, Mapping):
        items = []
        for name, spec in channels.items():
            if isinstance(spec, Channel):
                ch = spec if spec.name == name else Channel(name, spec.shape, spec.dtype)
            elif (
                isinstance(spec, (tuple, list))
                and len(spec) == 2
                and isinstance(spec[0], (tuple, list))
                and not isinstance(spec[1], (int, np.integer))
            ):
                ch = Channel(name, tuple(spec[0]), spec[1])
            else:
                ch = Channel(name, spec)
            items.append(ch)
    else:
        items = list(channels)
    for ch in items:
        if not isinstance(ch, Channel):
            raise TypeError(f"channels must be Channel objects or a name -> shape dict, got {ch!r}")
        if ch.name in out:
            raise ValueError(f"channel {ch.name!r} is listed twice")
        out[ch.name] = ch
    if not out:
        raise ValueError("a bake needs at least one channel (e.g. positions of shape (n, 3))")
    return out


def _to_json_bytes(obj: Any, what: str) -> bytes:
    try:
        return json.dumps(obj, indent=1, default=json_default).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{what} must be JSON-serializable (numbers, strings, lists, dicts, numpy "
            f"scalars/arrays): {e}"
        ) from e


def _read_json(path: Path, what: str) -> dict:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CacheError(f"cannot read {path}: {e}") from e
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CacheError(f"{what} {path} is corrupt ({e}); the bake is damaged: re-bake it") from e
    if not isinstance(obj, dict):
        raise CacheError(f"{what} {path} is corrupt (not a JSON object); re-bake it")
    return obj


def _read_meta(
    path: Path, *, expect_schema: int | None, expect_mesh_hash: str | None
) -> tuple[dict, dict[str, Channel]]:
    """Read and validate ``meta.json`` of the bake at ``path``."""
    if not path.exists():
        raise CacheError(f"no bake at {path}: bake the scenario first, or check the path")
    if not path.is_dir():
        raise CacheError(
            f"{path} is not a Neural ROM bake (a bake is a directory <name>{BAKE_SUFFIX}/)"
        )
    try:
        meta = _read_json(path / _META, "bake metadata")
    except FileNotFoundError:
        raise CacheError(
            f"{path} is not a Neural ROM bake (no {_META}); point to a <name>{BAKE_SUFFIX} "
            "directory written by the Bake step, or re-bake"
        ) from None
    if meta.get("format") != FORMAT:
        raise CacheError(
            f"{path} is not a Neural ROM bake ({_META} has format {meta.get('format')!r}, "
            f"expected {FORMAT!r})"
        )
    schema = meta.get("schema")
    if not isinstance(schema, int):
        raise CacheError(f"{path / _META} is corrupt (no integer schema version); re-bake")
    if expect_schema is not None and schema != expect_schema:
        if schema > expect_schema:
            how = "it was written by a newer Neural ROM; update the extension to read it"
        else:
            how = "it was written by an older Neural ROM; re-bake it with this version"
        raise CacheError(
            f"bake {path} has schema version {schema}, but this version of Neural ROM "
            f"reads schema version {expect_schema}: {how}"
        )
    h = meta.get("mesh_hash")
    if not isinstance(h, str):
        raise CacheError(f"{path / _META} is corrupt (no mesh hash); re-bake")
    if expect_mesh_hash is not None and h != expect_mesh_hash:
        raise CacheError(
            f"bake {path} belongs to another mesh (hash {h[:12]}.., expected "
            f"{expect_mesh_hash[:12]}..): the mesh changed since the bake; bake it again "
            "for the current mesh"
        )
    table = meta.get("channels")
    if not isinstance(table, dict) or not table:
        raise CacheError(f"{path / _META} is corrupt (no channel table); re-bake")
    channels: dict[str, Channel] = {}
    try:
        for name, spec in table.items():
            channels[name] = Channel(name, tuple(spec["shape"]), spec["dtype"])
    except (KeyError, TypeError, ValueError) as e:
        raise CacheError(f"{path / _META} is corrupt (bad channel table: {e}); re-bake") from e
    for key in ("bake_id", "status"):
        if not isinstance(meta.get(key), str):
            raise CacheError(f"{path / _META} is corrupt (no {key}); re-bake")
    if not isinstance(meta.get("metadata", {}), dict):
        raise CacheError(f"{path / _META} is corrupt (metadata is not an object); re-bake")
    return meta, channels


def _read_commit(path: Path, meta: dict) -> dict:
    try:
        commit = _read_json(path / _COMMIT, "commit record")
    except FileNotFoundError:
        raise CacheError(
            f"bake {path} has no {_COMMIT}: it was not written completely; re-bake it"
        ) from None
    frames = commit.get("frames")
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 0:
        raise CacheError(f"{path / _COMMIT} is corrupt (bad frame count {frames!r}); re-bake")
    if commit.get("bake_id") != meta["bake_id"]:
        raise CacheError(
            f"{path / _COMMIT} belongs to another bake (its id does not match {_META}); files "
            "from different bakes were mixed: re-bake"
        )
    return commit


def _check_channel_sizes(path: Path, channels: Mapping[str, Channel], frames: int) -> dict:
    """Sizes of the channel files; CacheError if one is missing or shorter than committed."""
    sizes = {}
    for ch in channels.values():
        f = path / f"{ch.name}.bin"
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            raise CacheError(
                f"bake {path} is missing the channel file {f.name}; the bake is damaged: re-bake it"
            ) from None
        need = frames * ch.frame_nbytes
        if size < need:
            raise CacheError(
                f"channel file {f} is truncated: it holds {size} bytes but the bake commits "
                f"{frames} frames ({need} bytes); the file was cut (disk full, copy "
                "interrupted?): re-bake"
            )
        sizes[ch.name] = size
    return sizes


class _WriterLock:
    """The exclusive lock of a bake directory's one writer (see the module docstring).

    A file system without ``flock`` (some network mounts) gets no lock rather than no bake.
    """

    def __init__(self, path: Path, wait_s: float | None = None):
        self.fd: int | None = None
        if fcntl is None:
            return
        wait_s = WRITER_WAIT_S if wait_s is None else float(wait_s)
        fd = os.open(path, os.O_RDONLY)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                os.close(fd)
                raise CacheError(
                    f"another process is writing the bake {path} (a bake still running, or "
                    f"one finishing its frame after a cancel) and did not stop within "
                    f"{wait_s:g} s: wait for it or cancel it, then bake again"
                ) from None
            except OSError:
                os.close(fd)
                return
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def _is_empty_dir(p: Path) -> bool:
    return p.is_dir() and not any(p.iterdir())


# --------------------------------------------------------------------------- writer


class BakeWriter:
    """Stream frames of a simulation into a bake directory, committing each one.

    Parameters
    ----------
    path : str or Path
        Bake directory to create (by convention ``<name>.nrbake``).
    X : (n, 3) float array
        Rest positions [m]; stored as float64.
    T : (m, 4) int array
        Tetrahedra; stored as int64.
    channels : list of Channel, or dict name -> shape or (shape, dtype)
        Per-frame arrays every :meth:`append` must provide.
    metadata : dict
        Free-form JSON (material, dt, scenario spec, seed, settings). numpy scalars and
        arrays are converted to JSON numbers and lists.
    mesh_hash : str, optional
        Identity of the mesh; defaults to :func:`mesh_hash` ``(X, T)``.
    extra_arrays : dict name -> array, optional
        Stored in ``mesh.npz`` next to X and T (pinned indices, embedding, ...).
    overwrite : bool
        Replace an existing bake at ``path`` (see the module docstring for how).
    durable : bool
        fsync data and commit records (survives power loss, ~0.2 ms per file on SSD).
        With False a process crash still leaves a valid prefix; a power cut may not.

    Raises
    ------
    CacheError
        ``path`` holds a bake and ``overwrite`` is False, or is not a bake and not empty.
    ValueError
        Bad channels, arrays or metadata.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        X: np.ndarray,
        T: np.ndarray,
        channels: Sequence[Channel] | Mapping[str, Any],
        metadata: Mapping[str, Any],
        mesh_hash: str | None = None,
        extra_arrays: Mapping[str, np.ndarray] | None = None,
        overwrite: bool = False,
        durable: bool = True,
    ) -> None:
        path = Path(path)
        X = np.ascontiguousarray(X, dtype="<f8")
        T = np.ascontiguousarray(T)
        if X.ndim != 2 or X.shape[1] != 3:
            raise ValueError(f"X must have shape (n, 3), got {X.shape}")
        if T.ndim != 2 or T.shape[1] != 4 or T.dtype.kind not in "iu":
            raise ValueError(f"T must be an integer array of shape (m, 4), got {T.dtype} {T.shape}")
        T = T.astype("<i8")
        table = _channels_from_arg(channels)
        extras: dict[str, np.ndarray] = {}
        for name, arr in (extra_arrays or {}).items():
            _check_name(name, "extra array")
            if name in _RESERVED_EXTRA:
                raise ValueError(f"extra array name {name!r} is reserved for the mesh")
            arr = np.asarray(arr)
            if arr.dtype.kind not in "biufcUS":
                raise ValueError(
                    f"extra array {name!r} has dtype {arr.dtype}; only numeric and string "
                    "arrays can be stored (no objects: we never pickle)"
                )
            extras[name] = arr
        if mesh_hash is None:
            mesh_hash = files.mesh_hash(X, T)
        if not isinstance(mesh_hash, str) or not mesh_hash:
            raise ValueError("mesh_hash must be a non-empty string")
        if not isinstance(metadata, Mapping):
            raise TypeError("metadata must be a dict")

        meta = {
            "format": FORMAT,
            "schema": SCHEMA_VERSION,
            "bake_id": uuid.uuid4().hex,
            "mesh_hash": mesh_hash,
            "channels": {name: ch.to_json() for name, ch in table.items()},
            "extra_arrays": list(extras),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "tool_version": tool_version(),
            "status": "in_progress",
            "metadata": dict(metadata),
        }
        meta_bytes = _to_json_bytes(meta, "metadata")
        meta = json.loads(meta_bytes)  # what readers will see (numpy -> plain JSON)

        old: Path | None = None
        if path.exists():
            if _is_empty_dir(path):
                pass
            elif not (path.is_dir() and (path / _META).is_file()):
                raise CacheError(
                    f"{path} exists and is not a Neural ROM bake; refusing to replace it. "
                    "Choose another bake path."
                )
            elif not overwrite:
                raise CacheError(
                    f"a bake already exists at {path}; pass overwrite=True to replace it, or "
                    "BakeWriter.resume() to append to it"
                )
            else:
                old = path
        ensure_writable_dir(path.parent, f"the bake {path.name}")

        token = uuid.uuid4().hex[:12]
        staging = path.parent / f".{path.name}.creating-{token}"
        old_lock = None
        try:
            staging.mkdir()
            with open(staging / _MESH, "wb") as f:
                np.savez(f, X=X, T=T, **extras)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            for ch in table.values():
                with open(staging / f"{ch.name}.bin", "wb") as f:
                    if durable:
                        os.fsync(f.fileno())
            write_atomic(staging / _META, meta_bytes, durable=durable)
            commit = {
                "frames": 0,
                "bake_id": meta["bake_id"],
                "schema": SCHEMA_VERSION,
                "time": time.time(),
            }
            write_atomic(staging / _COMMIT, _to_json_bytes(commit, "commit"), durable=durable)
            if old is not None:
                # not while another process still writes it: it would commit into ours
                old_lock = _WriterLock(old)
                trash = path.parent / f".{path.name}.old-{token}"
                os.rename(old, trash)
                os.rename(staging, path)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                if _is_empty_dir(path):
                    path.rmdir()
                os.rename(staging, path)
            if durable:
                fsync_dir(path.parent)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, WriteError):
                raise
            raise write_error(exc, f"the bake {path}") from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            if old_lock is not None:
                old_lock.release()
        self._init_open(path, meta, table, frames=0, durable=durable)

    def _init_open(
        self,
        path: Path,
        meta: dict,
        table: dict[str, Channel],
        *,
        frames: int,
        durable: bool,
        lock: _WriterLock | None = None,
    ) -> None:
        self.path = path
        self._meta = meta
        self.channels: dict[str, Channel] = table
        self._frames = frames
        self._durable = durable
        self._files = {}
        self._lock = lock
        try:
            if self._lock is None:
                self._lock = _WriterLock(path)
            for name in table:
                # held open for the writer's lifetime, closed by close()/_close_files()
                self._files[name] = open(path / f"{name}.bin", "r+b")  # noqa: SIM115
        except OSError as exc:
            self._close_files()
            raise write_error(exc, f"the bake {path}") from exc
        except BaseException:
            self._close_files()
            raise
        self._closed = False

    @classmethod
    def resume(
        cls,
        path: str | os.PathLike,
        *,
        expect_mesh_hash: str | None = None,
        durable: bool = True,
    ) -> BakeWriter:
        """Reopen a cancelled or crashed bake to append more frames.

        Bytes past the last committed frame (a frame cut by a crash) are truncated away,
        stale temp files are removed, and the status goes back to ``"in_progress"``. A
        writer still running on the bake (in another process) is waited for first, so the
        frames it commits meanwhile count.

        Raises
        ------
        CacheError
            Not a bake, another schema or mesh, a channel file shorter than committed, or
            another writer that does not stop.
        WriteError
            The bake cannot be written (a read-only folder).
        """
        path = Path(path)
        _read_meta(path, expect_schema=SCHEMA_VERSION, expect_mesh_hash=expect_mesh_hash)
        lock = _WriterLock(path)
        try:  # read again under the lock: the writer it waited for may have committed more
            meta, table = _read_meta(
                path, expect_schema=SCHEMA_VERSION, expect_mesh_hash=expect_mesh_hash
            )
            if not (path / _MESH).is_file():
                raise CacheError(f"bake {path} is missing {_MESH}; the bake is damaged: re-bake it")
            frames = _read_commit(path, meta)["frames"]
            sizes = _check_channel_sizes(path, table, frames)
            for stale in filter(is_temporary, path.iterdir()):
                stale.unlink(missing_ok=True)
        except OSError as exc:
            lock.release()
            raise write_error(exc, f"the bake {path}") from exc
        except BaseException:
            lock.release()
            raise
        self = cls.__new__(cls)
        self._init_open(path, meta, table, frames=frames, durable=durable, lock=lock)
        try:
            for name, ch in table.items():
                if sizes[name] != frames * ch.frame_nbytes:
                    f = self._files[name]
                    f.truncate(frames * ch.frame_nbytes)
                    f.flush()
                    if durable:
                        os.fsync(f.fileno())
            self.update_metadata(status="in_progress")
        except BaseException:
            self._close_files()
            raise
        return self

    # ------------------------------------------------------------------ properties

    @property
    def frames(self) -> int:
        """Number of committed frames."""
        return self._frames

    @property
    def mesh_hash(self) -> str:
        return self._meta["mesh_hash"]

    @property
    def status(self) -> str:
        return self._meta["status"]

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ writing

    def _check_open(self) -> None:
        if self._closed:
            raise CacheError(f"the bake writer of {self.path} is closed; use BakeWriter.resume()")

    def _validate(self, arrays: Mapping[str, Any], lead: tuple[int, ...]) -> dict[str, np.ndarray]:
        missing = [n for n in self.channels if n not in arrays]
        unknown = [n for n in arrays if n not in self.channels]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing channels {missing}")
            if unknown:
                parts.append(f"unknown channels {unknown}")
            raise ValueError(
                f"frame {self._frames} of {self.path}: {'; '.join(parts)}; this bake has "
                f"channels {list(self.channels)}"
            )
        out = {}
        for name, ch in self.channels.items():
            a = np.asarray(arrays[name])
            if lead == () and a.shape != ch.shape:
                raise ValueError(
                    f"channel {name!r} expects per-frame shape {ch.shape}, got {a.shape}"
                )
            if lead != () and (a.ndim < 1 or a.shape[1:] != ch.shape):
                raise ValueError(
                    f"channel {name!r} expects shape (frames, *{ch.shape}), got {a.shape}"
                )
            dt = np.dtype(ch.dtype)
            if not np.can_cast(a.dtype, dt, casting="same_kind"):
                raise ValueError(
                    f"channel {name!r} stores {dt} ({dt.name}); got {a.dtype}, which cannot be "
                    "converted without changing its kind"
                )
            with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught below
                a = np.ascontiguousarray(a, dtype=dt)
            out[name] = a
        counts = {a.shape[0] for a in out.values()} if lead != () else {1}
        if len(counts) != 1:
            raise ValueError(
                f"extend: channels have different frame counts "
                f"{ {n: a.shape[0] for n, a in out.items()} }"
            )
        for name, a in out.items():
            if a.dtype.kind in "fc" and not np.isfinite(a).all():
                bad = int(a.size - np.count_nonzero(np.isfinite(a)))
                if lead == ():
                    where = f"frame {self._frames}"
                else:
                    rows = np.flatnonzero(~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1))
                    where = f"frame {self._frames + int(rows[0])}"
                raise CacheError(
                    f"{where} has non-finite values in channel {name!r} ({bad} NaN/inf "
                    "entries); not written. The simulation diverged: reduce the time step or "
                    "stiffness, or check the scenario"
                )
        return out

    def _write(self, arrays: dict[str, np.ndarray], count: int) -> int:
        start = self._frames
        try:
            for name, ch in self.channels.items():
                f = self._files[name]
                f.seek(start * ch.frame_nbytes)
                f.write(arrays[name].reshape(-1).view(np.uint8))
            for f in self._files.values():
                f.flush()
                if self._durable:
                    os.fsync(f.fileno())
            commit = {
                "frames": start + count,
                "bake_id": self._meta["bake_id"],
                "schema": SCHEMA_VERSION,
                "time": time.time(),
            }
            write_atomic(
                self.path / _COMMIT, _to_json_bytes(commit, "commit"), durable=self._durable
            )
        except OSError as e:
            raise CacheError(
                f"could not write frame {start} to bake {self.path}: {e}. Frames 0..{start - 1} "
                "are safe; free disk space and resume the bake"
            ) from e
        self._frames = start + count
        return self._frames

    def append(self, **frame_arrays: Any) -> int:
        """Validate, write and commit one frame; return the committed frame count.

        Parameters
        ----------
        **frame_arrays
            One array per channel, of the channel's per-frame shape. Values are converted
            to the channel dtype when that keeps their kind (int -> float is fine, float ->
            int is refused).

        Raises
        ------
        ValueError
            Missing or unknown channel, wrong shape or dtype kind.
        CacheError
            Non-finite values (nothing is written), an I/O failure, or a closed writer.
        """
        self._check_open()
        arrays = self._validate(frame_arrays, ())
        return self._write(arrays, 1)

    def extend(self, **frames_arrays: Any) -> int:
        """Write and commit several frames at once (arrays with a leading frame axis).

        Same checks as :meth:`append`; all-or-nothing. Returns the committed frame count.
        """
        self._check_open()
        arrays = self._validate(frames_arrays, (-1,))
        count = next(iter(arrays.values())).shape[0]
        if count == 0:
            return self._frames
        return self._write(arrays, count)

    def update_metadata(self, **kv: Any) -> None:
        """Atomically update ``meta.json``.

        ``status=`` sets the bake status (``"complete"``, ``"cancelled"``,
        ``"failed: <message>"``, ...); every other key is merged into the caller metadata.
        """
        self._check_open()
        meta = json.loads(json.dumps(self._meta))
        if "status" in kv:
            status = kv.pop("status")
            if not isinstance(status, str):
                raise ValueError(f"status must be a string, got {status!r}")
            meta["status"] = status
        meta["metadata"].update(kv)
        data = _to_json_bytes(meta, "metadata")
        try:
            write_atomic(self.path / _META, data, durable=self._durable)
        except OSError as e:
            raise CacheError(f"could not update {self.path / _META}: {e}") from e
        self._meta = json.loads(data)

    def _close_files(self) -> None:
        for f in getattr(self, "_files", {}).values():
            try:
                f.close()
            except OSError:
                pass
        self._files = {}
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()  # last: the files are closed, the bake is whole

    def close(self, status: str = "complete") -> None:
        """Record the final status and close the channel files. Idempotent."""
        if self._closed:
            return
        try:
            self.update_metadata(status=status)
        finally:
            self._close_files()
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            status = "complete"
        elif issubclass(exc_type, (JobCancelled, KeyboardInterrupt)):
            status = "cancelled"
        else:
            status = f"failed: {exc or exc_type.__name__}"
        if exc_type is None:
            self.close(status)
        else:
            try:  # never mask the original exception with a close failure
                self.close(status)
            except Exception:  # noqa: BLE001
                self._close_files()
                self._closed = True

    def __del__(self) -> None:
        self._close_files()

    def __repr__(self) -> str:
        return f"BakeWriter({str(self.path)!r}, frames={self._frames}, status={self.status!r})"


# --------------------------------------------------------------------------- reader


class BakeCache:
    """Read-only view of one bake; channels are memory-mapped, so opening is O(1) in size.

    Use :meth:`open`. The frame count is a snapshot of ``commit.json`` taken at open time
    (or at the last :meth:`refresh`).

    Attributes
    ----------
    path : Path
    metadata_full : dict
        The whole ``meta.json``.
    meta : dict
        The caller metadata (material, dt, scenario, seed, ...).
    channels : dict name -> Channel
    """

    def __init__(self, path: Path, meta: dict, channels: dict[str, Channel], frames: int):
        self.path = path
        self.metadata_full = meta
        self.channels = channels
        self._frames = frames
        self._maps: dict[str, np.ndarray] = {}
        self._mesh: dict[str, np.ndarray] | None = None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        *,
        expect_mesh_hash: str | None = None,
        expect_schema: int | None = SCHEMA_VERSION,
    ) -> BakeCache:
        """Open the bake at ``path`` for reading.

        Reads only ``meta.json``, ``commit.json`` and the channel files' sizes.

        Raises
        ------
        CacheError
            Not a bake or missing files, another schema version, another mesh
            (``expect_mesh_hash``), a truncated channel file, or corrupt JSON.
        """
        path = Path(path)
        meta, channels = _read_meta(
            path, expect_schema=expect_schema, expect_mesh_hash=expect_mesh_hash
        )
        if not (path / _MESH).is_file():
            raise CacheError(f"bake {path} is missing {_MESH}; the bake is damaged: re-bake it")
        frames = _read_commit(path, meta)["frames"]
        _check_channel_sizes(path, channels, frames)
        return cls(path, meta, channels, frames)

    def refresh(self) -> int:
        """Re-read ``commit.json`` (frames committed since open, e.g. a bake in progress)."""
        meta, channels = _read_meta(self.path, expect_schema=None, expect_mesh_hash=None)
        if meta["bake_id"] != self.metadata_full["bake_id"]:
            raise CacheError(f"the bake at {self.path} was replaced; open it again")
        frames = _read_commit(self.path, meta)["frames"]
        _check_channel_sizes(self.path, channels, frames)
        self.metadata_full = meta
        if frames != self._frames:
            self._frames = frames
            self._maps.clear()
        return frames

    # ------------------------------------------------------------------ properties

    @property
    def meta(self) -> dict:
        return self.metadata_full.get("metadata", {})

    @property
    def status(self) -> str:
        """``"in_progress"`` (being written, or the writer crashed), ``"complete"``,
        ``"cancelled"`` or ``"failed: <message>"``."""
        return self.metadata_full["status"]

    @property
    def mesh_hash(self) -> str:
        return self.metadata_full["mesh_hash"]

    @property
    def schema(self) -> int:
        return self.metadata_full["schema"]

    @property
    def n_frames(self) -> int:
        return self._frames

    def __len__(self) -> int:
        return self._frames

    def _load_mesh(self) -> dict[str, np.ndarray]:
        if self._mesh is None:
            f = self.path / _MESH
            try:
                with np.load(f, allow_pickle=False) as z:
                    mesh = {k: z[k] for k in z.files}
            except FileNotFoundError:
                raise CacheError(f"bake {self.path} is missing {_MESH}; re-bake it") from None
            except Exception as e:  # zip, format and pickle errors alike
                raise CacheError(f"{f} is corrupt ({e}); re-bake") from e
            X, T = mesh.get("X"), mesh.get("T")
            if (
                X is None
                or T is None
                or X.ndim != 2
                or X.shape[1] != 3
                or T.ndim != 2
                or T.shape[1] != 4
            ):
                raise CacheError(f"{f} is corrupt (no X (n, 3) / T (m, 4) arrays); re-bake")
            self._mesh = mesh
        return self._mesh

    @property
    def X(self) -> np.ndarray:
        """(n, 3) float64 rest positions [m]."""
        return self._load_mesh()["X"]

    @property
    def T(self) -> np.ndarray:
        """(m, 4) int64 tetrahedra."""
        return self._load_mesh()["T"]

    @property
    def extra_names(self) -> list[str]:
        return list(self.metadata_full.get("extra_arrays", []))

    def extra(self, name: str) -> np.ndarray:
        """An extra array stored with the mesh (pinned indices, embedding, ...)."""
        mesh = self._load_mesh()
        if name in _RESERVED_EXTRA or name not in mesh:
            raise CacheError(
                f"bake {self.path} has no extra array {name!r} (it has {self.extra_names}); "
                "re-bake with a version that stores it"
            )
        return mesh[name]

    @property
    def nbytes(self) -> int:
        """Apparent size of all files in the bake directory [bytes]."""
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    # ------------------------------------------------------------------ data

    def channel(self, name: str) -> np.ndarray:
        """Read-only ``np.memmap`` of shape ``(n_frames, *shape)`` of a channel.

        With 0 committed frames (or 0-byte frames) an empty read-only array is returned
        instead, since an empty file cannot be mapped.
        """
        if name not in self.channels:
            raise CacheError(
                f"bake {self.path} has no channel {name!r} (it has {list(self.channels)}); "
                "re-bake with the channel enabled"
            )
        arr = self._maps.get(name)
        if arr is None:
            ch = self.channels[name]
            shape = (self._frames, *ch.shape)
            if self._frames * ch.frame_nbytes == 0:
                arr = np.zeros(shape, dtype=ch.dtype)
                arr.flags.writeable = False
            else:
                arr = np.memmap(self.path / f"{name}.bin", dtype=ch.dtype, mode="r", shape=shape)
            self._maps[name] = arr
        return arr

    def driven_by(self) -> frozenset[str]:
        """The frame inputs (keys of :data:`core.registry.INPUTS`) this bake's scenario
        drives: ``forces`` when any frame pushes, ``pin_targets`` when the pins move from
        their rest positions, ``colliders`` when there are colliders."""
        found = set()
        if "forces" in self.channels and np.any(self.channel("forces")):
            found.add("forces")
        if "pin_targets" in self.channels and "pinned" in self.extra_names:
            rest = self.X[np.asarray(self.extra("pinned"), dtype=np.int64)]
            if np.any(self.channel("pin_targets") != rest):
                found.add("pin_targets")
        if "colliders" in self.channels:
            found.add("colliders")
        return frozenset(found)

    @property
    def positions(self) -> np.ndarray:
        """``channel("positions")``: (n_frames, n, 3) deformed positions [m]."""
        return self.channel("positions")

    def frame(self, i: int) -> dict[str, np.ndarray]:
        """Copies of every channel at frame ``i`` (negative counts from the end)."""
        n = self._frames
        i = int(i)
        if not -n <= i < n:
            raise IndexError(f"frame {i} out of range: bake {self.path} has {n} frames")
        return {name: np.array(self.channel(name)[i]) for name in self.channels}

    def __repr__(self) -> str:
        return (
            f"BakeCache({str(self.path)!r}, frames={self._frames}, status={self.status!r}, "
            f"channels={list(self.channels)})"
        )


# --------------------------------------------------------------------------- dataset


def open_for_training(
    path: str | os.PathLike, mesh_hash: str, *, name: str, noun: str = "Bake", redo: str = "re-bake"
) -> BakeCache:
    """The bake at ``path`` (of the mesh ``mesh_hash``) that a recorded bake ``name`` points
    to, refused with a :class:`.errors.CacheError` saying what to do (``redo``) when it
    cannot be used, is missing or has no frames; ``noun`` names the kind of bake."""
    try:
        cache = BakeCache.open(path, expect_mesh_hash=mesh_hash)
    except CacheError as e:
        raise CacheError(f"{noun} '{name}' cannot be used ({e}); {redo}.") from e
    except FileNotFoundError as e:
        raise CacheError(f"{noun} '{name}' is missing ({path}); {redo}.") from e
    if cache.n_frames == 0:
        raise CacheError(f"{noun} '{name}' has no frames; {redo}.")
    return cache


class BakeDataset:
    """Several bakes of ONE mesh (e.g. farm shards) opened as one dataset.

    Use :meth:`open`. Every bake must share the mesh hash and the channel table.
    """

    def __init__(self, trajectories: list[BakeCache]):
        self.trajectories = trajectories

    @classmethod
    def open(
        cls,
        paths: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        expect_mesh_hash: str | None = None,
    ) -> BakeDataset:
        """Open bakes given as a list of paths, a glob pattern, one bake, or a folder of bakes.

        A string with glob characters is expanded (sorted); a folder that is not itself
        a bake means every ``*.nrbake`` in it (sorted).

        Raises
        ------
        CacheError
            No bake found, a bake that fails :meth:`BakeCache.open`, or a bake whose mesh
            hash or channel table differs from the first one (named in the message).
        """
        if isinstance(paths, (str, os.PathLike)):
            s = os.fspath(paths)
            if _glob.has_magic(s):
                found = sorted(_glob.glob(s))
                if not found:
                    raise CacheError(f"no bakes match {s!r}; bake the scenarios first")
                plist = [Path(p) for p in found]
            elif (Path(s) / _META).exists() or not Path(s).is_dir():
                plist = [Path(s)]
            else:
                plist = sorted(Path(s).glob("*" + BAKE_SUFFIX))
                if not plist:
                    raise CacheError(f"no *{BAKE_SUFFIX} bakes in {s}; bake the scenarios first")
        else:
            plist = [Path(p) for p in paths]
        if not plist:
            raise CacheError("no bakes given: a dataset needs at least one bake")
        trajs: list[BakeCache] = []
        for p in plist:
            c = BakeCache.open(p, expect_mesh_hash=expect_mesh_hash)
            if trajs:
                ref = trajs[0]
                if c.mesh_hash != ref.mesh_hash:
                    raise CacheError(
                        f"bake {p} belongs to another mesh (hash {c.mesh_hash[:12]}..) than "
                        f"{ref.path} (hash {ref.mesh_hash[:12]}..); a dataset holds bakes of "
                        "one mesh: remove it or re-bake it on the current mesh"
                    )
                if c.channels != ref.channels:
                    raise CacheError(
                        f"bake {p} has channels {_table_str(c.channels)} but {ref.path} has "
                        f"{_table_str(ref.channels)}; re-bake it with the same settings"
                    )
            trajs.append(c)
        return cls(trajs)

    @property
    def mesh_hash(self) -> str:
        return self.trajectories[0].mesh_hash

    @property
    def channels(self) -> dict[str, Channel]:
        return self.trajectories[0].channels

    @property
    def n_frames(self) -> int:
        """Total committed frames over all trajectories."""
        return sum(t.n_frames for t in self.trajectories)

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self) -> Iterator[BakeCache]:
        return iter(self.trajectories)

    def __getitem__(self, i: int) -> BakeCache:
        return self.trajectories[i]

    def concatenated(self, name: str, indices: Sequence[int] | None = None) -> np.ndarray:
        """All frames of channel ``name`` stacked over trajectories (a copy in memory).

        Parameters
        ----------
        name : str
        indices : sequence of int, optional
            Trajectories to include (e.g. from :meth:`split`); all by default.

        Returns
        -------
        (total_frames, *shape) array
        """
        idx = range(len(self.trajectories)) if indices is None else indices
        parts = [self.trajectories[int(i)].channel(name) for i in idx]
        if not parts:
            ch = self.channels[name]
            return np.zeros((0, *ch.shape), dtype=ch.dtype)
        return np.concatenate(parts, axis=0)

    def split(
        self, validation_fraction: float = 0.2, seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Split WHOLE trajectories (never frames) into training and validation sets.

        ``round(validation_fraction * k)`` of the ``k`` trajectories go to validation,
        at least one when ``validation_fraction > 0`` and ``k >= 2``, and at least one
        trajectory always stays in training (so with ``k == 1`` validation is empty).

        Returns
        -------
        train, val : int64 arrays of trajectory indices, sorted
        """
        if not 0.0 <= validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
        k = len(self.trajectories)
        n_val = round(validation_fraction * k)
        if validation_fraction > 0 and k >= 2:
            n_val = max(n_val, 1)
        n_val = min(n_val, k - 1)
        perm = np.random.default_rng(seed).permutation(k)
        return np.sort(perm[n_val:]).astype(np.int64), np.sort(perm[:n_val]).astype(np.int64)

    def __repr__(self) -> str:
        return f"BakeDataset({len(self.trajectories)} bakes, {self.n_frames} frames)"


def _table_str(channels: Mapping[str, Channel]) -> str:
    return "{" + ", ".join(f"{c.name}: {c.dtype}{c.shape}" for c in channels.values()) + "}"
