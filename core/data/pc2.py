"""PC2 point caches (the format Blender's Mesh Cache modifier reads), without bpy.

Layout (little endian)::

    char[12]  b"POINTCACHE2\\0"
    int32     version (1)
    int32     number of points r
    float32   start frame
    float32   sample rate (frames between samples)
    int32     number of samples k
    float32   k * r * 3 positions (x, y, z), sample-major

Writes stream sample by sample, so an export of any length never sits in memory, and the
file is written next to its final path and renamed into place only once complete: a
crash or a cancel never leaves a truncated cache where the Mesh Cache modifier looks.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Self

import numpy as np

from ..errors import CacheError
from .files import replace_file

MAGIC = b"POINTCACHE2\0"
VERSION = 1
_HEADER = struct.Struct("<12siiffi")
HEADER_SIZE = _HEADER.size  # 32 bytes


class PC2Writer:
    """Append samples to a PC2 file one at a time.

    Parameters
    ----------
    path : path of the final ``.pc2`` file (its folder must exist).
    n_points : number of points r in every sample.
    start_frame : scene frame of the first sample.
    sample_rate : frames between two samples (1.0 = one sample per frame).

    Use as a context manager; :meth:`close` patches the sample count into the header
    and moves the file into place. An exception inside the ``with`` block discards the
    partial file and leaves any previous file at ``path`` untouched.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        n_points: int,
        *,
        start_frame: float = 1,
        sample_rate: float = 1.0,
    ) -> None:
        if n_points <= 0:
            raise ValueError(f"a PC2 cache needs at least one point, got n_points={n_points}")
        if not sample_rate > 0:
            raise ValueError(f"sample_rate must be > 0 frames, got {sample_rate}")
        self.path = Path(path)
        self.n_points = int(n_points)
        self.start_frame = float(start_frame)
        self.sample_rate = float(sample_rate)
        self.n_samples = 0
        self._tmp = self.path.with_name(self.path.name + ".partial")
        self._fh = open(self._tmp, "wb")  # noqa: SIM115 (closed by close()/abort())
        self._fh.write(self._header(0))

    def _header(self, n_samples: int) -> bytes:
        return _HEADER.pack(
            MAGIC, VERSION, self.n_points, self.start_frame, self.sample_rate, n_samples
        )

    def write(self, positions: np.ndarray) -> None:
        """Append one sample. ``positions`` : (r, 3) float array (any float dtype)."""
        p = np.asarray(positions)
        if p.shape != (self.n_points, 3):
            raise ValueError(
                f"PC2 sample {self.n_samples} has shape {p.shape}, expected ({self.n_points}, 3)"
            )
        self._fh.write(np.ascontiguousarray(p, dtype="<f4").tobytes())
        self.n_samples += 1

    def close(self) -> Path:
        """Finish the file: write the sample count and rename it into place."""
        if self._fh.closed:
            return self.path
        self._fh.seek(0)
        self._fh.write(self._header(self.n_samples))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        replace_file(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Discard the partial file."""
        if not self._fh.closed:
            self._fh.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_pc2(
    path: str | os.PathLike,
    frames: np.ndarray | Iterable[np.ndarray],
    start_frame: float = 1,
    sample_rate: float = 1.0,
    *,
    n_points: int | None = None,
) -> Path:
    """Write a PC2 cache.

    Parameters
    ----------
    path : output ``.pc2`` path.
    frames : (k, r, 3) float array, or any iterable of (r, 3) arrays (a generator
        streams: only one sample is in memory at a time).
    start_frame : scene frame of the first sample.
    sample_rate : frames between samples.
    n_points : r, only needed when ``frames`` is an empty iterable.

    Returns
    -------
    The path written.
    """
    it = iter(frames)
    first = next(it, None)
    if first is None:
        if n_points is None:
            raise ValueError("write_pc2 got no frames; pass n_points to write an empty cache")
    else:
        n_points = np.shape(first)[0]
    with PC2Writer(path, n_points, start_frame=start_frame, sample_rate=sample_rate) as w:
        if first is not None:
            w.write(first)
            for sample in it:
                w.write(sample)
    return Path(path)


def read_pc2(path: str | os.PathLike, *, mmap: bool = False) -> tuple[np.ndarray, float, float]:
    """Read a PC2 cache.

    Returns
    -------
    frames : (k, r, 3) float32 array (a read-only memmap when ``mmap``).
    start_frame : float, scene frame of the first sample.
    sample_rate : float, frames between samples.

    Raises
    ------
    CacheError
        when the file is not a PC2 cache or is shorter than its header says.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE or head[:12] != MAGIC:
        raise CacheError(f"{path} is not a PC2 point cache (bad header); re-export it.")
    _, version, r, start, rate, k = _HEADER.unpack(head)
    if version != VERSION or r < 0 or k < 0:
        raise CacheError(
            f"{path}: unsupported PC2 header (version {version}, {r} points, {k} samples); "
            "re-export it."
        )
    expected = HEADER_SIZE + 12 * r * k
    if size < expected:
        raise CacheError(
            f"{path} is truncated: {size} bytes for {k} samples of {r} points "
            f"({expected} expected); re-export it."
        )
    if mmap and r * k > 0:
        frames = np.memmap(path, dtype="<f4", mode="r", offset=HEADER_SIZE, shape=(k, r, 3))
    else:
        frames = np.fromfile(path, dtype="<f4", count=3 * r * k, offset=HEADER_SIZE)
        frames = frames.reshape(k, r, 3)
    return frames, float(start), float(rate)
