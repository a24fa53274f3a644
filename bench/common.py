"""Shared pieces of the benchmarks: test meshes, case isolation, peak memory.

The benchmarks make their own meshes (a structured bar of tets) so that they depend on
nothing but numpy, and run every measured case in a fresh subprocess pinned to one core:
the machine is shared, both peers then use the same single thread (pbatoolkit's TBB pool,
OpenBLAS and CHOLMOD follow the affinity mask / the thread variables), and the peak
resident memory of one case is not polluted by the previous one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np

#: Hex corners in the order (x, y, z) bits of the local index: corner k = (k&1, k>>1&1, k>>2&1).
_KUHN_TETS = np.array(
    # Kuhn (Freudenthal) split of the unit cube along its 0-7 diagonal: 6 tets whose faces
    # match those of the neighbouring cubes, so the mesh is conforming.
    [[0, 1, 3, 7], [0, 3, 2, 7], [0, 2, 6, 7], [0, 6, 4, 7], [0, 4, 5, 7], [0, 5, 1, 7]]
)

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def bar_mesh(
    nx: int, ny: int, nz: int, size: tuple[float, float, float] = (1.0, 0.25, 0.25)
) -> tuple[np.ndarray, np.ndarray]:
    """Structured tet mesh of a box, each of its ``nx*ny*nz`` hex cells split into 6 tets.

    Parameters
    ----------
    nx, ny, nz : int
        Cells along x, y, z.
    size : (3,) float
        Box extent, metres; the box spans ``[0, size]``.

    Returns
    -------
    X : (n, 3) float array
        Vertex positions, metres, ``n = (nx+1)(ny+1)(nz+1)``.
    T : (6 nx ny nz, 4) int64 array
        Positively oriented tets (``det[x1-x0, x2-x0, x3-x0] > 0``).
    """
    axes = [np.linspace(0.0, s, k + 1) for s, k in zip(size, (nx, ny, nz))]
    X = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    vid = np.arange(X.shape[0]).reshape(nx + 1, ny + 1, nz + 1)
    corners = np.stack(
        [
            vid[i : i + nx, j : j + ny, k : k + nz].ravel()
            for k in (0, 1)
            for j in (0, 1)
            for i in (0, 1)
        ],
        axis=-1,
    )
    T = corners[:, _KUHN_TETS].reshape(-1, 4).astype(np.int64)
    e = X[T[:, 1:]] - X[T[:, :1]]
    flip = np.linalg.det(e) < 0
    T[flip] = T[flip][:, [0, 2, 1, 3]]
    return X, T


def bar_for_tets(target: int) -> tuple[np.ndarray, np.ndarray]:
    """A 4:1:1 bar (1 m x 0.25 m x 0.25 m) with about ``target`` tets (``24 k^3`` of them)."""
    k = max(1, round((target / 24.0) ** (1.0 / 3.0)))
    return bar_mesh(4 * k, k, k)


def parse_sizes(text: str) -> list[int]:
    """``"5k,20k,80k"`` -> ``[5000, 20000, 80000]`` (a plain integer is a tet count too)."""
    out = []
    for tok in text.split(","):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", tok)
        if not m:
            raise SystemExit(f"Cannot read the size {tok!r}: write tet counts like 5k,20k,80k.")
        scale = {"": 1, "k": 1000, "m": 1000000}[m.group(2).lower()]
        out.append(int(float(m.group(1)) * scale))
    return out


def pinned_end(X: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Vertices on the ``x = min x`` face (the clamped end of the bar)."""
    return np.flatnonzero(X[:, 0] <= X[:, 0].min() + tol)


def free_dofs(n_vertices: int, pinned: np.ndarray) -> np.ndarray:
    """Indices of the unpinned DOFs in the interleaved ``(x0, y0, z0, x1, ...)`` layout."""
    free = np.ones(n_vertices, dtype=bool)
    free[pinned] = False
    return np.flatnonzero(np.repeat(free, 3))


# ---------------------------------------------------------------------- memory
def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def rss_mib() -> float:
    """Current resident set size, MiB (Linux; -1 elsewhere)."""
    try:
        return _status_kib("VmRSS") / 1024.0
    except OSError:
        return -1.0


def peak_rss_mib() -> float:
    """Peak resident set size since start or since :func:`reset_peak_rss`, MiB.

    Counts C/C++ allocations too (tracemalloc would see only Python's).
    """
    try:
        return _status_kib("VmHWM") / 1024.0
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux >= 4.0).

    True only when the reset took: some kernels and sandboxes accept the write to
    ``clear_refs`` and keep the old mark, and a peak read after such a "reset" would be the
    process's peak since it started. Callers report which one their number is.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    try:
        return _status_kib("VmHWM") - _status_kib("VmRSS") <= 4 * 1024  # 4 MiB of slack
    except OSError:
        return False


# ------------------------------------------------------------------- isolation
def pin_this_process() -> None:
    """Pin to one core; call before numpy/pbatoolkit create their thread pools."""
    for var in THREAD_VARS:
        os.environ[var] = "1"
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})


def run_case(script: str, args: list[str], timeout: float = 900.0) -> dict:
    """Run ``python script --worker ARGS`` in a fresh process; return the JSON it prints last."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = "1"
    proc = subprocess.run(
        [sys.executable, script, "--worker", *args],
        capture_output=True,
        check=False,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])
