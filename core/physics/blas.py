"""The BLAS thread count of this process, read and set at run time (no environment variable,
no restart), for per-frame solves that run fastest on fewer threads than the BLAS starts.

numpy's and scipy's wheels each bundle an OpenBLAS (``numpy.libs``, ``scipy.libs`` or
``.dylibs``) whose thread count is the C function ``openblas_set_num_threads``, its name
decorated per build (``scipy_`` in front, ``64_`` or ``_64`` behind: the symbol suffixes of
the 64-bit integer builds). :func:`blas_threads` sets every one found; a BLAS without that
function (Accelerate, MKL) is left alone, and :func:`blas_libraries` is then empty. This is
what ``threadpoolctl`` does for OpenBLAS, in the few lines we need.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

__all__ = ["blas_libraries", "blas_threads", "fastest_threads", "get_blas_threads"]


@lru_cache(maxsize=1)
def blas_libraries() -> tuple:
    """The OpenBLAS libraries numpy and scipy bundle: ``(path, get, set)`` per library, the
    ctypes functions that read and set its thread count."""
    dirs = []
    for mod in ("numpy", "scipy"):
        try:
            pkg = Path(__import__(mod).__file__).parent
        except ImportError:
            continue
        dirs += [pkg.parent / f"{mod}.libs", pkg / ".dylibs", pkg.parent / f"{mod}_libs"]
    found = []
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.iterdir()):
            if "openblas" not in path.name.lower():
                continue
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:
                continue
            funcs = _functions(lib)
            if funcs is not None:
                found.append((str(path), *funcs))
    return tuple(found)


def _functions(lib):
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                get.restype, set_.argtypes = ctypes.c_int, [ctypes.c_int]
                return get, set_
    return None


def get_blas_threads() -> list[int]:
    """The thread count of each library of :func:`blas_libraries`."""
    return [int(get()) for _, get, _ in blas_libraries()]


@contextmanager
def blas_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` BLAS threads in every OpenBLAS found (None: as they
    are), and put the counts back after."""
    libs = blas_libraries() if count else ()
    before = [int(get()) for _, get, _ in libs]
    for _, _, set_ in libs:
        set_(int(count))
    try:
        yield
    finally:
        for (_, _, set_), n in zip(libs, before, strict=True):
            set_(n)


def fastest_threads(run: Callable[[], object], counts=None, repeats: int = 3) -> dict:
    """The thread count among ``counts`` (default: 1 and what the BLAS runs now, when more)
    under which ``run()`` takes least time: each count ``repeats`` times, interleaved, the
    best time of each (the least disturbed by other processes).

    Returns ``{"threads": best count or None (no OpenBLAS found: nothing to choose),
    "seconds": {count: best seconds}}``.
    """
    now = max(get_blas_threads() or [1])
    counts = sorted(set(counts or (1, now)))
    if not blas_libraries() or len(counts) < 2:
        return {"threads": None, "seconds": {}}
    best = {c: float("inf") for c in counts}
    for _ in range(repeats):
        for c in counts:
            with blas_threads(c):
                t = time.perf_counter()
                run()
                best[c] = min(best[c], time.perf_counter() - t)
    return {"threads": min(best, key=best.get), "seconds": best}
