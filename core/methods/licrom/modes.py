"""The bases LiCROM adds to its field: the static modes and their modal derivatives, the six
rigid modes of a floating frame and the body frames they move in (:mod:`core.methods.licrom`)."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ...physics import fem as _fem

STATIC_ACCELERATION = 9.81

#: Static Derivatives' Auto: on when some training frame's second-order static response
#: (its static coordinates ``s`` through the modes' derivatives, ``D (s_i s_j) / 2``) reaches
#: this fraction of its first-order one ``S s`` (mass-weighted norms; training's
#: ``static_reach``). Measured: the hung rings of ``bench/licrom.py --rings`` 0.029-0.090
#: (linear suffices: 0.2x their own linear models), issue 23's keyed tori 0.47-0.79 and
#: cylinders 1.8-27 (they need the derivatives); 0.2 sits 2.2x above the rings and 2.4x below
#: the tori.
DERIVATIVES_AUTO_RATIO = 0.2

#: The static coordinates added to the fitted cubature's poses (the field's codes, which
#: hold the training frames' sag already): uniform in +-this (1: 1 g along each axis). On
#: the ring of issue 23 (960 tets, forces weighed as :func:`stiffness_metric` does not yet)
#: 0.3 replayed 7.9 mm, 1.0 12.8 mm.
STATIC_POSES = 0.3


#: The central differences of :func:`static_modes`' derivatives step each deflection to this
#: share of the mesh's bounding-box diagonal at its largest node displacement.
DERIVATIVE_STEP = 1e-4


#: Largest banded Cholesky (``dofs * bandwidth^2`` flops in the nodes' reverse Cuthill-McKee
#: order) :func:`static_modes` takes before SuperLU: LAPACK's banded factorization solved the
#: 20K-tet bar (bandwidth 455) in 0.21 s and the 20K-tet ring (500) in 0.33 s where SuperLU
#: took 1.0 and 0.51 s (minimum degree; 2.0 and 1.1 s in its default order), at load 18;
#: a compact body's wide band would cost more than SuperLU's fill.
BANDED_FLOPS = 5e9


def _spd_factor(K: sp.spmatrix, T: np.ndarray, dofs: np.ndarray):
    """A solver ``B -> K_ff^-1 B`` (``B`` (len(dofs), c)) for the SPD block ``K_ff`` of ``K``
    (3n, 3n) on the free ``dofs`` (3 per node, ascending) of a mesh with tets ``T``, factored
    once. A banded Cholesky in the
    nodes' reverse Cuthill-McKee order when its cost is under :data:`BANDED_FLOPS` (slender
    bodies, as rings, rods and tentacles are), else one SuperLU factorization (symmetric
    mode, minimum degree on ``A + A^T``). The band is stored in LAPACK's (Fortran) order and
    factored by ``dpbtrf`` itself: scipy's ``cholesky_banded`` copies a C-ordered band first
    (100 ms of 162 on the 20K-tet ring's factorization at load 4 is the factorization)."""
    from scipy.linalg import lapack
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    from scipy.sparse.linalg import splu

    n = int(T.max()) + 1
    rows, cols = T[:, np.repeat(np.arange(4), 4)].ravel(), T[:, np.tile(np.arange(4), 4)].ravel()
    G = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))  # the nodes' graph
    order = (3 * reverse_cuthill_mckee(G, symmetric_mode=True)[:, None] + np.arange(3)).ravel()
    where = np.full(3 * n, -1)
    where[dofs] = np.arange(len(dofs))
    P = where[order]
    P = P[P >= 0]  # the free dofs in that order, as rows of B
    K = sp.csr_matrix(K)
    lower = sp.tril(K[dofs[P]][:, dofs[P]]).tocoo()  # K_ff's lower triangle in that order
    band = int((lower.row - lower.col).max(initial=0))
    if len(P) * float(band + 1) ** 2 <= BANDED_FLOPS:
        ab = np.zeros((band + 1, len(P)), order="F")
        ab[lower.row - lower.col, lower.col] = lower.data
        c, info = lapack.dpbtrf(ab, lower=1, overwrite_ab=1)
        if info == 0:

            def banded(B: np.ndarray) -> np.ndarray:
                X = np.empty_like(B)
                X[P] = lapack.dpbtrs(c, B[P], lower=1)[0]
                return X

            return banded
        # not positive definite in floating point: SuperLU pivots
    lu = splu(
        sp.csc_matrix(K[dofs][:, dofs]), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )  # fmt: skip
    return lambda B: lu.solve(np.ascontiguousarray(B))


def stiffness_metric(U: np.ndarray, K: sp.spmatrix) -> np.ndarray:
    """``W`` (k, j) with ``U W`` stiffness-orthonormal (``W^T U^T K U W = I``), the span of
    ``U`` (3n, k) kept but for directions ``U^T K U`` holds below 1e-10 of its largest
    eigenvalue. Fitted to the reduced forces of ``U W``, a cubature weighs every direction
    by the displacement its force error causes (``K^-1``'s norm), not by the force's size."""
    lam, V = np.linalg.eigh(U.T @ (K @ U))
    keep = lam > 1e-10 * lam.max()
    return V[:, keep] / np.sqrt(lam[keep])


def static_modes(
    X: np.ndarray,
    T: np.ndarray,
    material,
    pinned: np.ndarray,
    accelerations=None,
    K: sp.spmatrix | None = None,
    derivatives: bool = False,
    fem: _fem.TetFEM | None = None,
) -> np.ndarray:
    """The static deflections (3n, c) of the mesh ``(X, T)`` under body accelerations, its
    ``pinned`` nodes held: ``K_ff u_f = M a`` with the rest stiffness ``K`` (unprojected
    elastic Hessian at rest; assembled when None) and the lumped masses, one factorization
    for all the fields (:func:`_spd_factor`). By default the fields are a uniform
    :data:`STATIC_ACCELERATION` along x, y and z (c = 3): with them in the basis, a pinned
    body's sag and swing under gravity and its pins' acceleration are those of full space to
    first order, on any mesh.

    With ``derivatives`` their modal derivatives follow (Barbic and James 2005), c (c + 1) / 2
    more columns, pairs ``i <= j`` in row-major order: the second-order static response
    ``D_ij = -K_ff^-1 d2g[S_i, S_j]`` (``d2g``: the elastic gradient's second derivative at
    rest along the two deflections, by central differences of :meth:`.fem.TetFEM.gradient`
    along each deflection and each pair's sum, :data:`DERIVATIVE_STEP`; 12 gradients for
    c = 3), with the same factorization; a shape
    ``X + S q + D (q_i q_j) / 2`` is then the static response to second order in ``q``.
    They are what a linear basis misses when a pinned body swings far: the
    large rotation about its pins (a keyed cylinder of issue 23, unseen between the trained
    ones: 53.9 mm off its held-out bake with the field and the static modes, exact energy;
    3.8 mm with their derivatives too, its own linear model 6.0).

    accelerations : (c, n, 3) float array, m/s^2, optional
        Other acceleration fields (``bench/dynamics.py``: the pins' frame turning).
    fem : the mesh's :class:`.fem.TetFEM` when the caller has one"""
    X = np.asarray(X, dtype=np.float64)
    T = np.asarray(T, dtype=np.int64)
    n = len(X)
    if accelerations is None:
        accelerations = STATIC_ACCELERATION * np.eye(3)[:, None, :].repeat(n, axis=1)
    A = np.asarray(accelerations, dtype=np.float64)
    fem = _fem.TetFEM(X, T, material) if fem is None else fem
    K = fem.hessian(X, project=False) if K is None else K
    m = _fem.mass_matrix(X, T, material.density, lumped=True)
    free = np.ones(3 * n, bool)
    free[(3 * np.asarray(pinned, np.int64)[:, None] + np.arange(3)).ravel()] = False
    idx = np.flatnonzero(free)
    F = (np.asarray(m)[None, :, None] * A).reshape(len(A), 3 * n).T  # (3n, c)
    solve = _spd_factor(K, T, idx)
    S = np.zeros((3 * n, len(A)))
    S[idx] = solve(np.ascontiguousarray(F[idx]))
    if not derivatives:
        return S
    L = float(np.linalg.norm(X.max(0) - X.min(0))) or 1.0
    g0 = 2.0 * fem.gradient(X)  # zero at rest but for rounding

    def curvature(v: np.ndarray) -> np.ndarray:
        """``d2g[v, v]`` (3n,): the gradient's second difference along ``v``."""
        h = DERIVATIVE_STEP * L / max(float(np.abs(v).max()), 1e-300)
        d = (h * v).reshape(n, 3)
        return (fem.gradient(X + d) + fem.gradient(X - d) - g0).ravel() / h**2

    c = S.shape[1]
    own = [curvature(S[:, i]) for i in range(c)]
    pairs = [(i, j) for i in range(c) for j in range(i, c)]
    G = np.empty((3 * n, len(pairs)))
    for col, (i, j) in enumerate(pairs):
        # d2g[a, b] = (d2g[a + b, a + b] - d2g[a, a] - d2g[b, b]) / 2: one more direction
        G[:, col] = own[i] if i == j else (curvature(S[:, i] + S[:, j]) - own[i] - own[j]) / 2
    D = np.zeros((3 * n, len(pairs)))
    D[idx] = -solve(np.ascontiguousarray(G[idx]))
    return np.hstack([S, D])


def rigid_modes(X: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The six rigid modes (3n, 6) of nodes ``X`` (n, 3): translations along x, y, z (metres
    per unit) and infinitesimal rotations ``e_i x (X - centre)`` about x, y, z (metres per
    radian)."""
    d = np.asarray(X, dtype=np.float64) - np.asarray(centre, dtype=np.float64)
    n = len(d)
    P = np.zeros((n, 3, 6))
    P[:, [0, 1, 2], [0, 1, 2]] = 1.0
    P[:, 1, 3], P[:, 2, 3] = -d[:, 2], d[:, 1]  # e_x x d
    P[:, 0, 4], P[:, 2, 4] = d[:, 2], -d[:, 0]  # e_y x d
    P[:, 0, 5], P[:, 1, 5] = -d[:, 1], d[:, 0]  # e_z x d
    return P.reshape(3 * n, 6)


def rotation(w: np.ndarray) -> np.ndarray:
    """The rotation (3, 3) by the rotation vector ``w`` (3,), radians (Rodrigues; scipy's
    Rotation costs ~0.1 ms a call, more than a small model's step)."""
    a = float(np.linalg.norm(w))
    if a < 1e-300:
        return np.eye(3)
    k = w / a
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(a) * K + (1.0 - math.cos(a)) * (K @ K)


def orthonormal(R: np.ndarray) -> np.ndarray:
    """``R`` (3, 3), a product of rotations, made orthonormal again (one Newton step of the
    polar decomposition, ``R (3 I - R^T R) / 2``), so the frame's rounding does not grow over
    a long run."""
    return R @ (3.0 * np.eye(3) - R.T @ R) / 2.0


def body_frames(X: np.ndarray, x: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best rigid motion of each frame: ``(R (F, 3, 3), c (F, 3))`` minimizing
    ``sum_i m_i |R_f X_i + c_f - x_fi|^2`` (mass-weighted Kabsch about the centre of mass:
    ``R_f`` maps the rest centre of mass ``X_bar`` to the frame's, ``c_f = x_bar_f - R_f X_bar``).

    Parameters
    ----------
    X : (n, 3) rest positions, metres; x : (F, n, 3) or (n, 3) positions, metres
    mass : (n,) lumped masses, kg
    """
    x = np.asarray(x, dtype=np.float64)
    one = x.ndim == 2
    x = x[None] if one else x
    w = np.asarray(mass, dtype=np.float64) / float(np.sum(mass))
    Xb = w @ X
    xb = np.einsum("i,fia->fa", w, x)
    H = np.einsum("i,fia,ib->fab", w, x - xb[:, None], X - Xb)  # (F, 3, 3)
    A, _, Bt = np.linalg.svd(H)
    d = np.sign(np.linalg.det(A @ Bt))
    A[:, :, 2] *= np.where(d == 0, 1.0, d)[:, None]
    R = A @ Bt
    c = xb - np.einsum("fab,b->fa", R, Xb)
    return (R[0], c[0]) if one else (R, c)
