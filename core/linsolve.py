"""Sparse symmetric positive definite solves for Newton steps.

Chosen by measurement (``bench/solvers.py``, ``bench/README.md``), among libraries with wheels
for Linux, macOS and Windows:

- ``"amg"``: conjugate gradients preconditioned by smoothed-aggregation AMG (pyamg) with the
  six rigid-body modes as near null space. At 80K tets (46K DOFs) it solves in about 1.8 s
  where the best wheel-installable direct factorizations take 7-17 s, and it needs a fifth of
  their memory. Newton tolerates the inexact solve (relative residual ``rtol``): iteration
  counts and converged positions do not change. If CG fails to converge the direct solver
  takes over, so the answer is never worse.
- ``"superlu"``: scipy's SuperLU with symmetric minimum-degree ordering, for small systems
  where a factorization beats the AMG setup.
- ``"auto"``: ``"amg"`` above :data:`AMG_MIN_ROWS` rows when pyamg is installed, else
  ``"superlu"``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

try:  # MIT, wheels for every platform Blender runs on, needs only numpy and scipy
    import pyamg as _pyamg
except ImportError:  # pragma: no cover - depends on the environment
    _pyamg = None

BACKENDS = ("auto", "amg", "superlu")
#: Below this many rows a sparse factorization is faster than building an AMG hierarchy.
AMG_MIN_ROWS = 6000


def rigid_modes(X: np.ndarray) -> np.ndarray:
    """The 6 rigid-body modes of a point set in DOF order ``3 v + axis``.

    Parameters
    ----------
    X : (n, 3) float array

    Returns
    -------
    (3n, 6) float array: 3 translations, 3 infinitesimal rotations about the centroid.
    """
    n = len(X)
    B = np.zeros((3 * n, 6))
    for d in range(3):
        B[d::3, d] = 1.0
    c = X - X.mean(0)
    B[0::3, 3], B[1::3, 3] = -c[:, 1], c[:, 0]
    B[1::3, 4], B[2::3, 4] = -c[:, 2], c[:, 1]
    B[0::3, 5], B[2::3, 5] = c[:, 2], -c[:, 0]
    return B


class SPDSolver:
    """Solves ``A x = b`` for the SPD Newton matrices of one mesh.

    Parameters
    ----------
    X : (n, 3) float array, optional
        Rest positions (the AMG near null space); without them AMG is not used.
    backend : {"auto", "amg", "superlu"}
    rtol : float
        Relative residual at which CG stops.
    """

    def __init__(self, X: np.ndarray | None = None, backend: str = "auto", rtol: float = 1e-4):
        if backend not in BACKENDS:
            raise ValueError(f"Unknown linear solver backend {backend!r}; use one of {BACKENDS}.")
        if backend == "amg" and _pyamg is None:
            raise ImportError("The 'amg' solver needs pyamg: pip install pyamg.")
        self.backend = backend
        self.rtol = rtol
        self.B = None if X is None else rigid_modes(np.asarray(X, dtype=np.float64))
        self.stats = {"solves": 0, "cg_iterations": 0, "fallbacks": 0}

    def choose(self, n_rows: int) -> str:
        if self.backend != "auto":
            return self.backend
        if _pyamg is not None and self.B is not None and n_rows >= AMG_MIN_ROWS:
            return "amg"
        return "superlu"

    def solve(self, A: sp.spmatrix, b: np.ndarray) -> np.ndarray:
        """Solve ``A x = b``; ``A`` is (3n, 3n) in DOF order ``3 v + axis``."""
        self.stats["solves"] += 1
        if (
            self.choose(A.shape[0]) == "amg"
            and self.B is not None
            and self.B.shape[0] == A.shape[0]
        ):
            ml = _pyamg.smoothed_aggregation_solver(
                A.tocsr().tobsr(blocksize=(3, 3)), B=self.B, max_coarse=300, coarse_solver="splu"
            )
            residuals: list = []
            x = ml.solve(b, tol=self.rtol, maxiter=300, accel="cg", residuals=residuals)
            self.stats["cg_iterations"] += len(residuals)
            r = np.linalg.norm(b - A @ x)
            if np.isfinite(r) and r <= 10 * self.rtol * np.linalg.norm(b):
                return x
            self.stats["fallbacks"] += 1
        return _superlu(A, b)


def _superlu(A: sp.spmatrix, b: np.ndarray) -> np.ndarray:
    lu = spla.splu(
        A.tocsc(),
        permc_spec="MMD_AT_PLUS_A",
        diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )
    return lu.solve(np.asarray(b, dtype=np.float64))


def solve_spd(
    A: sp.spmatrix, b: np.ndarray, backend: str = "auto", X: np.ndarray | None = None
) -> np.ndarray:
    """One-off solve of a sparse SPD system (see :class:`SPDSolver`)."""
    return SPDSolver(X, backend).solve(A, b)
