"""Sparse symmetric positive definite solves for Newton steps.

One small interface, :func:`solve_spd`, so the integrator does not care which library
factors the matrix. The backend is chosen by measurement (see ``bench/README.md``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

try:  # optional, wheels on Linux, macOS and Windows
    import cholespy as _cholespy
except ImportError:  # pragma: no cover - depends on the environment
    _cholespy = None

BACKENDS = ("auto", "cholespy", "superlu")


def available_backends() -> list[str]:
    """Backends importable in this interpreter, fastest first."""
    out = []
    if _cholespy is not None:
        out.append("cholespy")
    out.append("superlu")
    return out


def solve_spd(A: sp.csr_matrix, b: np.ndarray, backend: str = "auto") -> np.ndarray:
    """Solve ``A x = b`` for a sparse SPD matrix.

    Parameters
    ----------
    A : (N, N) scipy.sparse matrix, symmetric positive definite
    b : (N,) float array
    backend : {"auto", "cholespy", "superlu"}

    Returns
    -------
    x : (N,) float array
    """
    if backend == "auto":
        backend = available_backends()[0]
    if backend == "cholespy":
        if _cholespy is None:
            raise ImportError("cholespy is not installed; pip install cholespy or use 'superlu'.")
        A = A.tocoo()
        solver = _cholespy.CholeskySolverD(
            A.shape[0],
            A.row.astype(np.int32),
            A.col.astype(np.int32),
            A.data.astype(np.float64),
            _cholespy.MatrixType.COO,
        )
        rhs = np.ascontiguousarray(b, dtype=np.float64)
        x = np.zeros_like(rhs)
        solver.solve(rhs, x)
        return x
    if backend == "superlu":
        return spla.spsolve(A.tocsc(), b, permc_spec="MMD_AT_PLUS_A")
    raise ValueError(f"Unknown linear solver backend {backend!r}; use one of {BACKENDS}.")
