"""Sparse symmetric positive definite solves for Newton steps.

Chosen by measurement (``bench/solvers.py``, ``bench/README.md``), among libraries with wheels
for Linux, macOS and Windows:

- ``"amg"``: conjugate gradients preconditioned by smoothed-aggregation AMG (pyamg) with the
  six rigid-body modes as near null space. At 80K tets (46K DOFs) it solves in about 1.8 s
  where the best wheel-installable direct factorizations take 7-17 s, and it needs a fifth of
  their memory. Newton tolerates the inexact solve (relative residual ``rtol``). If CG fails to
  converge the direct solver takes over, so the answer is never worse.
- ``"superlu"``: scipy's SuperLU with symmetric minimum-degree ordering, for small systems
  where a factorization beats the AMG setup.
- ``"auto"``: ``"amg"`` above :data:`AMG_MIN_ROWS` rows when pyamg is installed, else
  ``"superlu"``.

Reusing a preconditioner (``solve(..., reuse=True)``). The Newton matrices of one frame differ
little from each other, so the preconditioner built for the first one (an AMG hierarchy or a
SuperLU factorization) preconditions CG on the later ones: it costs CG iterations, not a
set-up (at 20K tets an AMG set-up costs as much as 25 CG iterations; a hierarchy kept from the
frame's first Newton matrix needs 26-41 iterations to 1e-4 in an impact frame where a fresh
one needs 15-19, and about as many in most frames). While CG converges
within :data:`REUSE_EXTRA_ITERS` iterations more than a fresh preconditioner would need, it
is kept; past that it is rebuilt on the current matrix and CG goes on from where it stopped.
:meth:`SPDSolver.forget` drops it; the integrator calls it at the start of every frame, so a
frame's result depends only on the state it starts from (a resumed bake equals an
uninterrupted one). Kept hierarchies are built lean (:data:`LEAN_AMG`); a solve without
``reuse`` builds the hierarchy of the solver before issue 10, for comparison.

Matrices that may be indefinite (``maybe_indefinite``: the integrator's exact, unprojected
Newton matrices) raise :class:`IndefiniteMatrix` instead of being answered: CG reports
negative curvature, a fresh hierarchy that does not converge in
:data:`INDEFINITE_MAX_ITERS` iterations counts as indefinite, and a SuperLU factorization
with a non-positive pivot is one (Sylvester's law of inertia).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

try:  # MIT, wheels for every platform Blender runs on, needs only numpy and scipy
    import pyamg as _pyamg
    from pyamg.krylov import cg as _pcg
except ImportError:  # pragma: no cover - depends on the environment
    _pyamg = None

BACKENDS = ("auto", "amg", "superlu")
#: Below this many rows a sparse factorization is faster than building an AMG hierarchy.
AMG_MIN_ROWS = 6000
#: CG iterations a kept preconditioner may take beyond what a fresh one would need before it
#: is rebuilt: what a new set-up costs in CG iterations (measured in bench/bake.py's bakes at
#: 5K and 20K tets: a lean AMG set-up 0.155 s against 6.3 ms a preconditioned iteration; a
#: SuperLU factorization 50-100 ms against 2 ms).
REUSE_EXTRA_ITERS = {"amg": 25, "superlu": 25}
#: Hierarchy options of the lean set-up, measured on Newton matrices of bench/bake.py at 20K
#: tets: no smoothing of the near null space before aggregation (half the set-up time, the
#: same CG iteration counts); degree-3 Chebyshev smoothing (the same CG iterations as
#: pyamg's symmetric block Gauss-Seidel sweeps at 5.4 ms per iteration instead of 6.6 ms;
#: one forward and one backward sweep were 10% slower per frame); energy-minimizing
#: prolongation smoothing (15-19 CG iterations to 1e-4 where Jacobi smoothing needs 23-32,
#: also with a hierarchy kept from an earlier Newton matrix; the set-up costs twice as much,
#: 0.12 s, which the reuse amortizes: 36% fewer CG iterations per frame).
LEGACY_AMG = {"max_coarse": 300, "coarse_solver": "splu"}
LEAN_AMG = {
    "max_coarse": 300,
    "coarse_solver": "splu",
    "improve_candidates": None,
    "smooth": "energy",
    "presmoother": ("chebyshev", {"degree": 3}),
    "postsmoother": ("chebyshev", {"degree": 3}),
}
#: CG iterations a fresh hierarchy gets on a matrix that may be indefinite before it is
#: declared so (a definite Newton matrix needs 5-15 at 5K-80K tets).
INDEFINITE_MAX_ITERS = 60


class IndefiniteMatrix(ArithmeticError):
    """CG met negative curvature (``p^T A p < 0``): the matrix is not positive definite."""


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
        Relative residual ``|b - A x| / |b|`` at which CG stops, unless a solve asks for
        another.
    lean : bool
        Build AMG hierarchies without smoothing the near null space first
        (``improve_candidates=None``): half the set-up time at 20K tets for the same CG
        iteration counts. False is the hierarchy of the solver before issue 10.

    Attributes
    ----------
    stats : dict
        ``solves``, ``setups`` (hierarchies or factorizations built), ``cg_iterations``,
        ``fallbacks`` (CG failures answered by SuperLU), ``setup_s`` and ``cg_s`` (seconds).
    """

    def __init__(
        self,
        X: np.ndarray | None = None,
        backend: str = "auto",
        rtol: float = 1e-4,
        lean: bool = True,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"Unknown linear solver backend {backend!r}; use one of {BACKENDS}.")
        if backend == "amg" and _pyamg is None:
            raise ImportError("The 'amg' solver needs pyamg: pip install pyamg.")
        self.backend = backend
        self.rtol = rtol
        self.lean = lean
        self.B = None if X is None else rigid_modes(np.asarray(X, dtype=np.float64))
        self.stats = {
            "solves": 0,
            "setups": 0,
            "cg_iterations": 0,
            "fallbacks": 0,
            "setup_s": 0.0,
            "cg_s": 0.0,
        }
        self._prec = None  # kept preconditioner: (kind, object, LinearOperator, rate)

    def choose(self, n_rows: int) -> str:
        if self.backend != "auto":
            return self.backend
        if _pyamg is not None and self.B is not None and n_rows >= AMG_MIN_ROWS:
            return "amg"
        return "superlu"

    def forget(self) -> None:
        """Drop the kept preconditioner: the next solve builds a fresh one."""
        self._prec = None

    def solve(
        self,
        A: sp.spmatrix,
        b: np.ndarray,
        rtol: float | None = None,
        reuse: bool = False,
        maybe_indefinite: bool = False,
    ) -> np.ndarray:
        """Solve ``A x = b``; ``A`` is (3n, 3n) SPD in DOF order ``3 v + axis``.

        Parameters
        ----------
        rtol : float, optional
            Relative residual for CG (default: the solver's ``rtol``). A fresh SuperLU
            factorization solves exactly whatever ``rtol``.
        reuse : bool
            Precondition with the kept preconditioner while it converges fast enough (see the
            module docstring), and keep the one built now for the next solves.
        maybe_indefinite : bool
            ``A`` may be indefinite: raise :class:`IndefiniteMatrix` when CG meets negative
            curvature or does not converge in :data:`INDEFINITE_MAX_ITERS` iterations with a
            fresh hierarchy, instead of answering with SuperLU (only with ``reuse`` and AMG;
            a factorization solves an indefinite matrix too).

        Raises
        ------
        IndefiniteMatrix
        """
        self.stats["solves"] += 1
        rtol = self.rtol if rtol is None else float(rtol)
        b = np.asarray(b, dtype=np.float64)
        kind = self.choose(A.shape[0])
        use_amg = kind == "amg" and self.B is not None and self.B.shape[0] == A.shape[0]
        if not use_amg and not reuse:
            return self._direct(A, b)
        A = A.tocsr()
        if not reuse:  # the solver before issue 10: a fresh hierarchy per solve
            return self._fresh_amg(A, b, rtol)
        x0 = None
        if self._prec is not None and self._prec[4] == A.shape:
            kind_kept, _, M, rate, _ = self._prec
            # keep it while its extra CG iterations cost less than a new set-up would (a
            # fixed count per kind, not a timing: a frame's result must not depend on load)
            fresh = math.ceil(math.log(rtol) / math.log(rate))
            limit = fresh + REUSE_EXTRA_ITERS[kind_kept]
            x, info, ok, _ = self._cg(A, b, M, rtol, limit, None)
            if ok:
                return x
            if info < 0 and maybe_indefinite:
                # the kept preconditioner came from a definite matrix, so the curvature
                # CG met is this matrix's
                raise IndefiniteMatrix("CG met negative curvature.")
            x0 = x if info >= 0 and np.all(np.isfinite(x)) else None
        self._prec = None
        if not use_amg:
            lu = self._factor(A)
            if lu is None:  # pragma: no cover - singular matrix
                self.stats["fallbacks"] += 1
                return _superlu(A, b)
            if maybe_indefinite and not _definite(lu):
                raise IndefiniteMatrix("The factorization has non-positive pivots.")
            M = spla.LinearOperator(A.shape, matvec=lu.solve, dtype=np.float64)
            self._prec = ("superlu", lu, M, 1e-3, A.shape)
            return lu.solve(b)
        ml, M = self._hierarchy(A)
        maxiter = INDEFINITE_MAX_ITERS if maybe_indefinite else 300
        x, info, ok, its = self._cg(A, b, M, rtol, maxiter, x0)
        if not ok and maybe_indefinite:
            raise IndefiniteMatrix("CG met negative curvature or stalled.")
        if not ok:
            self.stats["fallbacks"] += 1
            return _superlu(A, b)
        # CG's convergence factor per iteration with a fresh hierarchy, for the reuse limit
        rate = min(max(rtol ** (1.0 / max(its, 1)), 1e-3), 0.9)
        self._prec = ("amg", ml, M, rate, A.shape)
        return x

    def _hierarchy(self, A):
        t0 = time.perf_counter()
        options = LEAN_AMG if self.lean else LEGACY_AMG
        # pyamg estimates spectral radii from np.random's global stream: seeded here (and the
        # caller's stream restored) so the same matrix gives the same hierarchy in every run
        state = np.random.get_state()
        np.random.seed(0)
        try:
            ml = _pyamg.smoothed_aggregation_solver(A.tobsr(blocksize=(3, 3)), B=self.B, **options)
        finally:
            np.random.set_state(state)
        self.stats["setups"] += 1
        self.stats["setup_s"] += time.perf_counter() - t0
        return ml, ml.aspreconditioner(cycle="V")

    def _fresh_amg(self, A, b, rtol):
        ml, _ = self._hierarchy(A)
        t0 = time.perf_counter()
        residuals: list = []
        x = ml.solve(b, tol=rtol, maxiter=300, accel="cg", residuals=residuals)
        self.stats["cg_iterations"] += len(residuals)
        self.stats["cg_s"] += time.perf_counter() - t0
        r = np.linalg.norm(b - A @ x)
        if np.isfinite(r) and r <= 10 * rtol * np.linalg.norm(b):
            return x
        self.stats["fallbacks"] += 1
        return _superlu(A, b)

    def _cg(self, A, b, M, rtol, maxiter, x0):
        """Preconditioned CG: (x, converged to ``rtol``, iterations)."""
        t0 = time.perf_counter()
        residuals: list = []
        # negative curvature is reported by info < 0; pyamg also warns (with an "always"
        # filter of its own), so its warnings are recorded and dropped
        with warnings.catch_warnings(record=True):
            x, info = _pcg(A, b, x0=x0, tol=rtol, maxiter=maxiter, M=M, residuals=residuals)
        its = max(len(residuals) - 1, 0)
        self.stats["cg_iterations"] += its
        self.stats["cg_s"] += time.perf_counter() - t0
        r = np.linalg.norm(b - A @ x)  # the true residual: CG's recursive one can drift
        ok = info == 0 and bool(np.isfinite(r) and r <= 10 * rtol * np.linalg.norm(b))
        return x, info, ok, its

    def _direct(self, A, b):
        t0 = time.perf_counter()
        x = _superlu(A, b)
        self.stats["setups"] += 1
        self.stats["setup_s"] += time.perf_counter() - t0
        return x

    def _factor(self, A):
        t0 = time.perf_counter()
        try:
            lu = _splu(A)
        except RuntimeError:  # pragma: no cover - singular matrix
            return None
        self.stats["setups"] += 1
        self.stats["setup_s"] += time.perf_counter() - t0
        return lu


def _splu(A: sp.spmatrix):
    return spla.splu(
        A.tocsc(),
        permc_spec="MMD_AT_PLUS_A",
        diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )


def _definite(lu) -> bool:
    """Whether the factorized matrix is positive definite: with SymmetricMode and no
    pivoting the row and column permutations are equal, so the pivots (U's diagonal) have
    the signs of its eigenvalues (Sylvester's law of inertia)."""
    if not np.array_equal(lu.perm_r, lu.perm_c):  # pragma: no cover - pivoting happened
        return False
    return bool(np.all(lu.U.diagonal() > 0))


def _superlu(A: sp.spmatrix, b: np.ndarray) -> np.ndarray:
    return _splu(A).solve(np.asarray(b, dtype=np.float64))


def solve_spd(
    A: sp.spmatrix, b: np.ndarray, backend: str = "auto", X: np.ndarray | None = None
) -> np.ndarray:
    """One-off solve of a sparse SPD system (see :class:`SPDSolver`)."""
    return SPDSolver(X, backend).solve(A, b)
