"""Linear subspaces of a tet mesh: mass-weighted POD of bakes, modal analysis, modal derivatives.

A linear subspace maps reduced coordinates ``q`` (k,) to positions ``x = X + U q``
(Fulton et al. 2019, sec. 3, with ``U`` the PCA basis of eq. 6; Shen et al. 2021, sec. 3.1).

Conventions
-----------
* Positions are ``(n, 3)`` arrays in metres; the flat DOF order is ``3 * vertex + axis``
  (as in :mod:`.fem`).
* ``M`` is the lumped mass on DOFs, ``diag(repeat(mass, 3))`` in kg. Every basis is
  **M-orthonormal**: ``U^T M U = I``. Encoding is therefore the M-orthogonal projection
  ``q = U^T M (x - X)``, the reduced coordinate that minimizes ``||x - X - U q||_M``,
  and ``encode(decode(q)) == q``.
* Pinned vertices have zero rows in ``U``: whatever ``q`` is, they stay at rest.
* The reference state is the rest shape, so ``q = 0`` is the rest pose. The POD is not
  mean-centred (the mean displacement of a bake is not a pose the object rests in).

Three ways to build a basis:

* :func:`mass_weighted_pod` -- PCA of bake displacements, with ``k`` given or chosen by a
  tolerance on the maximum per-vertex reconstruction error (Fulton et al. 2019, sec. 4.3).
* :func:`modal_basis` -- the lowest vibration modes ``K u = lambda M u`` at rest (data free).
* :func:`modal_derivatives` -- adds the modal derivatives of Barbič and James 2005, which
  capture the stretch that large rotations of linear modes lack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..errors import CacheError, MeshError, NeuralRomError
from ..physics.linsolve import rigid_modes as _raw_rigid_modes

__all__ = [
    "KINDS",
    "Subspace",
    "m_orthonormalize",
    "mass_weighted_pod",
    "modal_basis",
    "modal_derivative_vectors",
    "modal_derivatives",
    "rigid_modes",
]

KINDS = ("pod", "modal", "modal+derivatives")

# Singular values below this fraction of the largest are treated as zero: the Gram matrix
# squares the condition number, so smaller ones are round-off.
_RANK_RTOL = 1e-7
# Frames per block when reconstruction errors are evaluated (bounds the temporary memory).
_FRAME_BLOCK = 256


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _check_mass(mass: np.ndarray, n: int | None = None) -> np.ndarray:
    m = np.asarray(mass, dtype=np.float64)
    if m.ndim != 1 or (n is not None and m.shape[0] != n):
        want = f"({n},)" if n is not None else "(n,)"
        raise ValueError(f"mass must be a {want} array of vertex masses (kg), got shape {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        bad = int(np.sum(~(np.isfinite(m) & (m > 0))))
        raise MeshError(
            f"{bad} vertices have zero, negative or non-finite mass. Every vertex must belong to "
            "a tet with positive density: remove unreferenced vertices or fix the material density."
        )
    return m


def _check_pinned(pinned: Any, n: int) -> np.ndarray:
    p = np.unique(np.asarray(pinned, dtype=np.int64).ravel())
    if p.size and (p[0] < 0 or p[-1] >= n):
        raise MeshError(f"Pinned vertex index out of range 0..{n - 1}: check the pin vertex group.")
    return p


def _pinned_dofs(pinned: np.ndarray) -> np.ndarray:
    return (3 * pinned[:, None] + np.arange(3)).ravel()


def m_orthonormalize(
    V: np.ndarray,
    m_dof: np.ndarray,
    against: np.ndarray | None = None,
    drop_tol: float = 1e-6,
    max_new: int | None = None,
) -> np.ndarray:
    """M-orthonormalize columns by Gram-Schmidt with re-orthogonalization, dropping dependent ones.

    Parameters
    ----------
    V : (N, c) float array
        Candidate vectors, processed in column order.
    m_dof : (N,) float array
        Diagonal of the mass matrix ``M`` (kg).
    against : (N, a) float array, optional
        An M-orthonormal basis the new vectors are made M-orthogonal to (not returned).
    drop_tol : float
        A vector is dropped when its M-norm after projection is below ``drop_tol`` times
        its M-norm before.
    max_new : int, optional
        Stop after this many vectors were accepted.

    Returns
    -------
    (N, c') float array with ``Q^T M Q = I`` (and ``against^T M Q = 0``), ``c' <= c``.
    """
    V = np.asarray(V, dtype=np.float64)
    basis = [] if against is None else [against[:, i] for i in range(against.shape[1])]
    out = []
    for j in range(V.shape[1]):
        if max_new is not None and len(out) >= max_new:
            break
        v = V[:, j].copy()
        norm0 = np.sqrt(v @ (m_dof * v))
        if norm0 == 0.0:
            continue
        if basis:
            B = np.stack(basis, axis=1)
            for _ in range(2):  # "twice is enough" (Giraud et al. 2005)
                v -= B @ (B.T @ (m_dof * v))
        norm = np.sqrt(v @ (m_dof * v))
        if norm <= drop_tol * norm0:
            continue
        v /= norm
        basis.append(v)
        out.append(v)
    if not out:
        return np.zeros((V.shape[0], 0))
    return np.stack(out, axis=1)


def rigid_modes(X: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """The 6 rigid modes of a free body, M-orthonormal.

    Three translations and three infinitesimal rotations ``omega x (X - c)`` about the
    coordinate axes through the centre of mass.

    Parameters
    ----------
    X : (n, 3) float array
        Rest positions, metres.
    mass : (n,) float array
        Vertex masses, kg.

    Returns
    -------
    (3n, 6) float array, ``R^T M R = I``.
    """
    X = np.asarray(X, dtype=np.float64)
    m = _check_mass(mass, X.shape[0])
    # Gram-Schmidt against the translations moves the rotation axes to the centre of mass.
    # A body whose vertices are collinear has only 5 rigid modes; m_orthonormalize drops one.
    return m_orthonormalize(_raw_rigid_modes(X), np.repeat(m, 3), drop_tol=1e-8)


def _max_vertex_error(
    D: np.ndarray, C: np.ndarray, U: np.ndarray, row_scale: np.ndarray | None = None
) -> float:
    """max over frames and vertices of ``|row_scale * (D_f - U C_f)|`` per vertex;
    D (F, 3n), C (F, k), U (3n, k), row_scale (3n,) or None."""
    worst = 0.0
    for s in range(0, D.shape[0], _FRAME_BLOCK):
        R = D[s : s + _FRAME_BLOCK] - C[s : s + _FRAME_BLOCK] @ U.T
        if row_scale is not None:
            R *= row_scale
        R = R.reshape(R.shape[0], -1, 3)
        worst = max(worst, float(np.sqrt(np.max(np.einsum("fvi,fvi->fv", R, R), initial=0.0))))
    return worst


# --------------------------------------------------------------------------------------------
# Subspace
# --------------------------------------------------------------------------------------------


@dataclass
class Subspace:
    """A linear subspace ``x = X + U q`` of an ``n``-vertex mesh.

    Attributes
    ----------
    X : (n, 3) float array
        Rest positions, metres.
    U : (3n, k) float array
        Basis, M-orthonormal (``U^T M U = I``), zero on the DOFs of pinned vertices.
        Units: 1/sqrt(kg), so ``q`` is in sqrt(kg) m.
    mass : (n,) float array
        Lumped vertex masses, kg (``M = diag(repeat(mass, 3))``).
    pinned : (p,) int array
        Pinned vertex indices (their rows of ``U`` are zero).
    kind : str
        ``"pod"``, ``"modal"`` or ``"modal+derivatives"``.
    info : dict
        JSON-able facts about how the basis was built (singular values, energy captured,
        per-k max errors, frequencies, ...).
    """

    X: np.ndarray
    U: np.ndarray
    mass: np.ndarray
    pinned: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kind: str = "pod"
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        if self.X.ndim != 2 or self.X.shape[1] != 3:
            raise ValueError(f"X must have shape (n, 3), got {self.X.shape}")
        n = self.X.shape[0]
        self.U = np.ascontiguousarray(self.U, dtype=np.float64)
        if self.U.ndim != 2 or self.U.shape[0] != 3 * n:
            raise ValueError(f"U must have shape ({3 * n}, k), got {self.U.shape}")
        self.mass = _check_mass(self.mass, n)
        self.pinned = _check_pinned(self.pinned, n)
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        self._UtM = (self.U * np.repeat(self.mass, 3)[:, None]).T  # (k, 3n)

    @property
    def k(self) -> int:
        """Number of reduced coordinates."""
        return self.U.shape[1]

    @property
    def n_vertices(self) -> int:
        return self.X.shape[0]

    # ------------------------------------------------------------------ maps
    def decode(self, q: np.ndarray) -> np.ndarray:
        """Positions ``X + U q``.

        Parameters
        ----------
        q : (k,) or (B, k) float array

        Returns
        -------
        (n, 3) or (B, n, 3) float array, metres.
        """
        q = np.asarray(q, dtype=np.float64)
        if q.shape[-1:] != (self.k,) or q.ndim > 2:
            raise ValueError(f"q must have shape ({self.k},) or (B, {self.k}), got {q.shape}")
        u = q @ self.U.T
        return self.X + u.reshape(q.shape[:-1] + (self.n_vertices, 3))

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Reduced coordinates ``q = U^T M (x - X)`` (the M-orthogonal projection).

        Parameters
        ----------
        x : (n, 3) or (B, n, 3) float array
            Positions, metres.

        Returns
        -------
        (k,) or (B, k) float array.
        """
        x = np.asarray(x, dtype=np.float64)
        if x.shape[-2:] != (self.n_vertices, 3) or x.ndim > 3:
            raise ValueError(
                f"positions must have shape ({self.n_vertices}, 3) or (B, {self.n_vertices}, 3), "
                f"got {x.shape}"
            )
        d = (x - self.X).reshape(x.shape[:-2] + (3 * self.n_vertices,))
        return d @ self._UtM.T

    def project(self, x: np.ndarray) -> np.ndarray:
        """``decode(encode(x))``: the closest subspace positions in the M-norm."""
        return self.decode(self.encode(x))

    def reconstruction_error(self, x: np.ndarray) -> float:
        """Largest per-vertex distance (m) between ``x`` and its projection, over all frames.

        Parameters
        ----------
        x : (n, 3) or (B, n, 3) float array
        """
        x = np.asarray(x, dtype=np.float64)
        r = x - self.project(x)
        return float(np.sqrt(np.max(np.sum(r * r, axis=-1), initial=0.0)))

    def error_curve(self, x: np.ndarray, ks: Any = None) -> np.ndarray:
        """Max per-vertex reconstruction error (m) using only the first ``k`` basis vectors.

        Meaningful for ordered bases (POD: by singular value; modal: by frequency).

        Parameters
        ----------
        x : (n, 3) or (B, n, 3) float array
        ks : sequence of int, optional
            Basis sizes, default ``0 .. k``.

        Returns
        -------
        (len(ks),) float array, metres.
        """
        x = np.asarray(x, dtype=np.float64)
        D = (x - self.X).reshape(-1, 3 * self.n_vertices)
        C = D @ self._UtM.T
        ks = range(self.k + 1) if ks is None else ks
        out = []
        for kk in ks:
            kk = int(kk)
            if not 0 <= kk <= self.k:
                raise ValueError(f"basis sizes must be in 0..{self.k}, got {kk}")
            out.append(_max_vertex_error(D, C[:, :kk], self.U[:, :kk]))
        return np.array(out)

    def truncated(self, k: int) -> Subspace:
        """The subspace of the first ``k`` basis vectors (still M-orthonormal)."""
        if not 1 <= k <= self.k:
            raise ValueError(f"k must be in 1..{self.k}, got {k}")
        info = dict(self.info, truncated_from=self.k)
        return Subspace(self.X, self.U[:, :k].copy(), self.mass, self.pinned, self.kind, info)

    # ------------------------------------------------------------------ files
    def to_arrays(self) -> dict:
        """A plain dict for model files: arrays ``X``, ``U``, ``mass``, ``pinned`` plus
        ``kind`` (str) and ``info`` (JSON-able dict). Inverse: :meth:`from_arrays`."""
        return {
            "X": self.X.copy(),
            "U": self.U.copy(),
            "mass": self.mass.copy(),
            "pinned": self.pinned.copy(),
            "kind": self.kind,
            "info": json.loads(json.dumps(self.info)),
        }

    @classmethod
    def from_arrays(cls, d: dict) -> Subspace:
        """Rebuild from :meth:`to_arrays` output (``kind``/``info`` may also be 0-d string
        arrays or JSON text, as they come back from ``np.load``). Raises :class:`CacheError`
        when the data is missing, malformed or not an M-orthonormal basis."""
        try:
            kind = d["kind"]
            kind = str(kind.item() if isinstance(kind, np.ndarray) else kind)
            info = d.get("info", {})
            if isinstance(info, np.ndarray):
                info = info.item()
            if isinstance(info, (str, bytes)):
                info = json.loads(info)
            sub = cls(
                X=np.asarray(d["X"]),
                U=np.asarray(d["U"]),
                mass=np.asarray(d["mass"]),
                pinned=np.asarray(d["pinned"], dtype=np.int64),
                kind=kind,
                info=dict(info),
            )
        except (KeyError, ValueError, TypeError, MeshError) as exc:
            raise CacheError(
                f"The subspace in this model file is unreadable ({exc}). The file is damaged or "
                "from another version: train the model again."
            ) from exc
        if not np.all(np.isfinite(sub.U)):
            raise CacheError("The subspace basis contains NaN or inf: train the model again.")
        G = sub.U.T @ (np.repeat(sub.mass, 3)[:, None] * sub.U)
        if sub.k and np.max(np.abs(G - np.eye(sub.k))) > 1e-6:
            raise CacheError(
                "The subspace basis is not mass-orthonormal for this mesh's masses: the model "
                "belongs to another mesh or material. Train the model again."
            )
        if sub.pinned.size and np.any(sub.U[_pinned_dofs(sub.pinned)] != 0):
            raise CacheError(
                "The subspace moves pinned vertices: the file is damaged; train again."
            )
        return sub


# --------------------------------------------------------------------------------------------
# POD
# --------------------------------------------------------------------------------------------


class _GramSVD:
    """Leading singular triplets of ``A`` (F, N), computed as far as they are needed.

    Eigenvectors of the smaller Gram matrix (``A A^T`` or ``A^T A``, one product) give the
    candidate directions; :meth:`leading` turns the first ``r`` of them into singular
    triplets with one Rayleigh-Ritz step (QR, then the SVD of the thin ``A Q``), which
    restores the orthogonality and accuracy that the Gram matrix loses. Only the leading
    block is refined, so a tolerance met by a small ``k`` costs ``O(F N k)``, not ``O(F N r)``.
    """

    def __init__(self, A: np.ndarray, max_rank: int) -> None:
        self.A = A
        F, N = A.shape
        w, Z = np.linalg.eigh(A @ A.T if F <= N else A.T @ A)
        w, self.Z = w[::-1], Z[:, ::-1]
        s = np.sqrt(np.maximum(w, 0.0))
        self.s_gram = s
        self.rank = 0 if s.size == 0 or s[0] == 0.0 else int(np.sum(s > _RANK_RTOL * s[0]))
        self.rank = min(self.rank, max_rank)

    def leading(self, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``V`` (N, r'), ``s`` (r',), ``C = A V`` (F, r') for ``r' <= min(r, rank)``."""
        A, (F, N) = self.A, self.A.shape
        r = min(r, self.rank)
        if r == 0:
            return np.zeros((N, 0)), np.zeros(0), np.zeros((F, 0))
        Zr = self.Z[:, :r]
        V = (A.T @ Zr) / self.s_gram[:r] if F <= N else Zr
        Q, _ = np.linalg.qr(V)
        Zb, sb, Wt = sla.svd(A @ Q, full_matrices=False)
        keep = sb > _RANK_RTOL * sb[0]
        return Q @ Wt.T[:, keep], sb[keep], (Zb * sb)[:, keep]


def mass_weighted_pod(
    displacements: np.ndarray,
    mass: np.ndarray,
    pinned: Any = (),
    *,
    k: int | None = None,
    tolerance: float | None = None,
    max_k: int | None = None,
    validation: np.ndarray | None = None,
    X: np.ndarray | None = None,
) -> Subspace:
    """Mass-weighted POD (PCA) of displacements, sized by ``k`` or by an error tolerance.

    The basis is ``U = M^{-1/2} V`` with ``V`` the left singular vectors of
    ``M^{1/2} D^T`` (``D`` the frames as rows), so ``U^T M U = I`` and the leading ``k``
    columns minimize the total mass-weighted reconstruction error of the frames. The POD is
    not mean-centred: ``q = 0`` is the rest shape.

    Parameters
    ----------
    displacements : (F, n, 3) float array
        Displacements from rest, ``x - X``, metres (e.g. a bake's positions minus rest).
    mass : (n,) float array
        Lumped vertex masses, kg.
    pinned : (p,) int array
        Pinned vertices; their displacements are zeroed before the SVD and their rows of
        ``U`` are zero.
    k : int, optional
        Basis size. Give either ``k`` or ``tolerance``.
    tolerance : float, optional
        Metres. The smallest ``k`` whose maximum per-vertex reconstruction error
        ``max_{f,v} |u_fv - (U U^T M u_f)_v|`` over the training frames (and the validation
        frames, if given) is ``<= tolerance`` (Fulton et al. 2019, sec. 4.3: grow the basis
        until the threshold is met). ``k`` grows by doubling, then bisection, assuming the
        error decreases with ``k`` as it does in practice.
    max_k : int, optional
        Upper bound on ``k`` (default: the numerical rank of the data).
    validation : (G, n, 3) float array, optional
        Held-out displacements the tolerance must also hold on.
    X : (n, 3) float array, optional
        Rest positions stored in the subspace (zeros if not given: ``decode`` then returns
        displacements).

    Returns
    -------
    Subspace
        ``kind="pod"``; ``info`` holds ``singular_values`` (all retained candidates),
        ``energy_captured`` (fraction of ``sum s^2`` for ``k = 1 ..``), ``max_error`` and
        ``max_error_validation`` at the chosen ``k``, and the ``(k, error)`` pairs that the
        tolerance search evaluated on the final block of singular vectors (``searched_k``,
        ``searched_error``, ``searched_error_validation``). ``singular_values`` lists only
        the refined leading block (at least ``k``).

    Raises
    ------
    NeuralRomError
        When the data is all zero, ``k`` exceeds the rank of the data, or the tolerance
        cannot be met (the message gives the best error reached and what to change).
    """
    D = np.asarray(displacements, dtype=np.float64)
    if D.ndim != 3 or D.shape[2] != 3:
        raise ValueError(f"displacements must have shape (F, n, 3), got {D.shape}")
    F, n, _ = D.shape
    if F == 0:
        raise NeuralRomError("No frames to build a subspace from: bake at least one frame first.")
    if not np.all(np.isfinite(D)):
        raise NeuralRomError(
            "The displacements contain NaN or inf: the bake is damaged, bake it again."
        )
    m = _check_mass(mass, n)
    p = _check_pinned(pinned, n)
    if (k is None) == (tolerance is None):
        raise ValueError("Give exactly one of k (basis size) or tolerance (metres).")
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if tolerance is not None and not (tolerance > 0 and np.isfinite(tolerance)):
        raise ValueError(f"tolerance must be a positive distance in metres, got {tolerance}")
    if max_k is not None and max_k < 1:
        raise ValueError(f"max_k must be >= 1, got {max_k}")
    Xr = np.zeros((n, 3)) if X is None else np.asarray(X, dtype=np.float64)
    if Xr.shape != (n, 3):
        raise ValueError(f"X must have shape ({n}, 3), got {Xr.shape}")

    m_dof = np.repeat(m, 3)
    sqrt_m = np.sqrt(m_dof)
    pdofs = _pinned_dofs(p)
    # Work on the mass-weighted frames A = D M^{1/2} (one copy of the data); per-vertex
    # errors are measured after scaling residuals back by M^{-1/2}.
    inv_sqrt_m = 1.0 / sqrt_m
    A = D.reshape(F, 3 * n) * sqrt_m
    A[:, pdofs] = 0.0
    Av = None
    if validation is not None:
        Dv = np.asarray(validation, dtype=np.float64)
        if Dv.ndim != 3 or Dv.shape[1:] != (n, 3):
            raise ValueError(f"validation must have shape (G, {n}, 3), got {Dv.shape}")
        Av = Dv.reshape(-1, 3 * n) * sqrt_m
        Av[:, pdofs] = 0.0

    limit = 3 * n - pdofs.size
    if max_k is not None:
        limit = min(limit, max_k)
    if k is not None:
        limit = min(limit, k)
    svd = _GramSVD(A, limit)
    if svd.rank == 0:
        raise NeuralRomError(
            "Every displacement is zero (after holding the pinned vertices): the bake never "
            "deforms the object. Bake a scenario with gravity, pokes or colliders."
        )
    errs: dict[int, tuple[float, float | None]] = {}
    block: dict[str, np.ndarray] = {}

    def refine(r: int) -> int:
        """Refine the leading r directions; returns how many there are."""
        V, s, C = svd.leading(r)
        V[pdofs] = 0.0
        block.update(V=V, s=s, C=C, Cv=None if Av is None else Av @ V)
        errs.clear()  # errors belong to one refined block
        return s.size

    def worst(kk: int) -> float:
        if kk not in errs:
            V, C, Cv = block["V"][:, :kk], block["C"][:, :kk], block["Cv"]
            e = _max_vertex_error(A, C, V, inv_sqrt_m)
            ev = None if Av is None else _max_vertex_error(Av, Cv[:, :kk], V, inv_sqrt_m)
            errs[kk] = (e, ev)
        e, ev = errs[kk]
        return e if ev is None else max(e, ev)

    if k is not None:
        if k > svd.rank or refine(k) < k:
            r = svd.rank if k > svd.rank else block["s"].size
            raise NeuralRomError(
                f"The data spans only {r} independent displacement directions, fewer than "
                f"the requested k={k}. Use k <= {r}, or bake more varied frames."
            )
        k_sel = k
    else:
        # Doubling, then bisection between the last failure and the first success; the
        # refined block grows ahead of the search.
        req = min(svd.rank, 32)
        avail, full = refine(req), req == svd.rank
        lo, hi, kk = 0, None, 1  # worst(lo) > tol (0: nothing known), worst(hi) <= tol
        while hi is None:
            if kk > avail and not full:
                req = min(svd.rank, 2 * kk)
                avail, full = refine(req), req == svd.rank
            kk = min(kk, avail)
            if worst(kk) <= tolerance:
                hi = kk
            elif kk < avail or not full:
                lo, kk = kk, 2 * kk
            else:
                best = worst(avail)
                if max_k is not None and avail == max_k:
                    hint = f", or raise max_k (now {max_k})"
                else:
                    hint = " (every direction in the data is already used; the rest is round-off)"
                raise NeuralRomError(
                    f"A tolerance of {tolerance * 1e3:.3g} mm cannot be met: the best maximum "
                    f"per-vertex error is {best * 1e3:.3g} mm with k={avail}. Use a tolerance "
                    f"of at least {best * 1e3:.3g} mm{hint}."
                )
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if worst(mid) <= tolerance:
                hi = mid
            else:
                lo = mid
        k_sel = hi

    worst(k_sel)
    e, ev = errs[k_sel]
    s = block["s"]
    energy = np.cumsum(s**2) / float(np.einsum("ij,ij->", A, A))  # ||A||_F^2 = sum of all s^2
    searched = sorted(errs)
    info = {
        "method": "mass-weighted POD",
        "frames": int(F),
        "singular_values": s.tolist(),
        "energy_captured": energy.tolist(),
        "max_error": e,
        "max_error_validation": ev,
        "tolerance": tolerance,
        "searched_k": searched,
        "searched_error": [errs[i][0] for i in searched],
        "searched_error_validation": [errs[i][1] for i in searched],
    }
    U = block["V"][:, :k_sel] * inv_sqrt_m[:, None]
    return Subspace(Xr.copy(), U, m, p, "pod", info)


# --------------------------------------------------------------------------------------------
# Modal analysis
# --------------------------------------------------------------------------------------------


def _spd_lu(A: sp.spmatrix) -> spla.SuperLU:
    """SuperLU factorization of a sparse SPD matrix (symmetric ordering, no pivoting)."""
    return spla.splu(
        A.tocsc(),
        permc_spec="MMD_AT_PLUS_A",
        diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )


def _statically_determinate_support(X: np.ndarray) -> np.ndarray:
    """6 DOFs that remove the rigid motions of a free body and nothing else.

    All of vertex ``a``; at ``b`` the two axes other than the one ``b - a`` is most aligned
    with; at ``c`` the axis most aligned with the normal of ``abc``. Held there, a body under
    a self-equilibrated load has zero reactions, so the solution is that of the free body
    up to a rigid motion.
    """
    a = int(np.argmax(np.linalg.norm(X - X.mean(0), axis=1)))
    b = int(np.argmax(np.linalg.norm(X - X[a], axis=1)))
    nrm = np.cross(X[b] - X[a], X - X[a])
    c = int(np.argmax(np.linalg.norm(nrm, axis=1)))
    kb = int(np.argmax(np.abs(X[b] - X[a])))
    kc = int(np.argmax(np.abs(nrm[c])))
    return np.array(
        [3 * a, 3 * a + 1, 3 * a + 2, *(3 * b + i for i in range(3) if i != kb), 3 * c + kc]
    )


def _free_dofs(n: int, pinned: np.ndarray) -> np.ndarray:
    free = np.ones(3 * n, dtype=bool)
    free[_pinned_dofs(pinned)] = False
    return np.flatnonzero(free)


def modal_basis(
    fem: Any,
    mass: np.ndarray,
    pinned: Any = (),
    k: int = 10,
    *,
    include_rigid: bool | str = "auto",
    seed: int = 0,
) -> Subspace:
    """Lowest linear vibration modes at rest: ``K u = lambda M u`` on the free DOFs.

    ``K`` is the unprojected Hessian of the elastic energy at rest
    (``fem.hessian(X, project=False)``), ``M`` the lumped mass. The ``k`` lowest non-rigid
    modes come from ``scipy.sparse.linalg.eigsh`` in shift-invert mode around a slightly
    negative shift (so ``K - sigma M`` is positive definite even for a free body).

    With no pinned vertices the 6 rigid modes (3 translations, 3 infinitesimal rotations
    about the coordinate axes through the centre of mass, :func:`rigid_modes`) come first, so
    a free body can fall and spin in the subspace: the basis then has ``6 + k`` columns and
    the non-rigid modes are made exactly M-orthogonal to the rigid ones. Infinitesimal
    rotations stretch the body at large angles; the reduced simulator must handle large
    rotations (e.g. a rotating frame) if it needs them.

    Parameters
    ----------
    fem : fem.TetFEM
        Elastic model of the mesh (rest positions ``fem.X``).
    mass : (n,) float array
        Lumped vertex masses, kg.
    pinned : (p,) int array
        Pinned vertices (zero rows in ``U``).
    k : int
        Number of non-rigid modes.
    include_rigid : bool or "auto"
        "auto": rigid modes exactly when nothing is pinned. True with pinned vertices is an
        error (rigid modes move the pins).
    seed : int
        Seed of ARPACK's start vector (the result is deterministic).

    Returns
    -------
    Subspace
        ``kind="modal"``; ``info`` has ``eigenvalues`` (1/s^2, rigid ones ~0),
        ``frequencies_hz`` (``sqrt(lambda) / 2 pi``) and ``n_rigid``.

    Raises
    ------
    MeshError
        For a free body with more than 6 zero-energy modes (disconnected pieces).
    """
    X = np.asarray(fem.X, dtype=np.float64)
    n = X.shape[0]
    m = _check_mass(mass, n)
    p = _check_pinned(pinned, n)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if include_rigid == "auto":
        include_rigid = p.size == 0
    elif include_rigid and p.size:
        raise ValueError(
            "include_rigid=True needs a free body: rigid modes would move the pinned vertices."
        )
    free = _free_dofs(n, p)
    N = free.size
    n_rigid = 6 if p.size == 0 else 0
    nev = k + n_rigid
    if nev > N:
        raise NeuralRomError(
            f"The mesh has only {N} free degrees of freedom, fewer than the {nev} modes asked "
            f"for. Use k <= {N - n_rigid} or a finer mesh."
        )
    m_dof = np.repeat(m, 3)
    K = fem.hessian(X, project=False).tocsr()
    Kff = K[free][:, free]
    mf = m_dof[free]
    lam_scale = float(np.median(Kff.diagonal() / mf))
    if nev >= N - 1 or N <= 300:
        lam, Phi = sla.eigh(Kff.toarray(), np.diag(mf), subset_by_index=[0, nev - 1])
    else:
        sigma = -1e-6 * lam_scale
        Mff = sp.diags(mf).tocsc()
        lu = _spd_lu(Kff - sigma * Mff)  # SPD: sigma < 0
        OPinv = spla.LinearOperator((N, N), matvec=lu.solve, dtype=np.float64)
        v0 = np.random.default_rng(seed).standard_normal(N)
        lam, Phi = spla.eigsh(
            Kff.tocsc(), k=nev, M=Mff, sigma=sigma, which="LM", v0=v0, OPinv=OPinv
        )
    order = np.argsort(lam)
    lam, Phi = lam[order], Phi[:, order]
    zero_tol = 1e-10 * lam_scale
    U_all = np.zeros((3 * n, nev))
    U_all[free] = Phi
    if n_rigid:
        n_zero = int(np.sum(lam < zero_tol))
        if n_zero > 6:
            raise MeshError(
                f"The free mesh has {n_zero} zero-energy modes instead of 6: it has disconnected "
                "pieces or loose vertices. Tetrahedralize each piece separately or join them."
            )
        R = rigid_modes(X, m)
        # Eigenvectors of distinct eigenvalues are M-orthogonal to the rigid space already;
        # re-orthogonalize against the exact rigid modes to remove round-off.
        Nonrigid = m_orthonormalize(U_all[:, 6:], m_dof, against=R, drop_tol=1e-8)
        lam_nr = lam[6:]
        if include_rigid:
            U = np.concatenate([R, Nonrigid], axis=1)
            lam_r = np.einsum("ij,ij->j", R, K @ R)  # Rayleigh quotients, ~0
            lam_out = np.concatenate([lam_r, lam_nr])
        else:
            U, lam_out, n_rigid = Nonrigid, lam_nr, 0
    else:
        U = m_orthonormalize(U_all, m_dof, drop_tol=1e-8)
        lam_out = lam
    if U.shape[1] != lam_out.size:
        raise NeuralRomError(
            "The modal eigenvectors came out linearly dependent: the eigensolver did not "
            "converge. Try fewer modes or a better-shaped mesh."
        )
    U[_pinned_dofs(p)] = 0.0
    freqs = np.sqrt(np.maximum(lam_out, 0.0)) / (2.0 * np.pi)
    info = {
        "method": "linear modal analysis",
        "eigenvalues": lam_out.tolist(),
        "frequencies_hz": freqs.tolist(),
        "n_rigid": int(n_rigid),
        "n_modes": int(U.shape[1] - n_rigid),
    }
    return Subspace(X.copy(), U, m, p, "modal", info)


# --------------------------------------------------------------------------------------------
# Modal derivatives
# --------------------------------------------------------------------------------------------


def _nonrigid_columns(modes: Subspace) -> np.ndarray:
    n_rigid = int(modes.info.get("n_rigid", 0))
    n_modes = int(modes.info.get("n_modes", modes.k - n_rigid))
    return modes.U[:, n_rigid : n_rigid + n_modes]


def modal_derivative_vectors(fem: Any, modes: Subspace, *, eps: float = 1e-5) -> np.ndarray:
    """All modal derivatives ``Phi_ij = -K^{-1} (dK/dq_i Phi_j)`` (Barbič and James 2005).

    ``dK/dq_i`` is the central difference of the unprojected Hessian along mode ``i``:
    ``(K(X + h_i Phi_i) - K(X - h_i Phi_i)) / (2 h_i)``, with ``h_i`` chosen so the largest
    vertex displacement is ``eps`` times the rest bounding-box diagonal. Pinned DOFs are
    held at zero; for a free body ``K`` is singular and the solve is made unique by
    requiring ``Phi_ij`` to be M-orthogonal to the rigid modes (a bordered system). Not
    symmetrized: ``Phi_ij == Phi_ji`` holds up to the finite-difference error.

    Parameters
    ----------
    fem : fem.TetFEM
    modes : Subspace
        From :func:`modal_basis`; only its non-rigid modes are differentiated.
    eps : float
        Finite-difference step, fraction of the bounding-box diagonal.

    Returns
    -------
    (m, m, 3n) float array, ``m`` the number of non-rigid modes.
    """
    X = modes.X
    n = X.shape[0]
    Phi = _nonrigid_columns(modes)
    mcount = Phi.shape[1]
    if mcount == 0:
        raise ValueError("The subspace has no non-rigid modes to differentiate.")
    L = float(np.linalg.norm(X.max(0) - X.min(0))) or 1.0
    free = _free_dofs(n, modes.pinned)
    rhs = np.zeros((free.size, mcount, mcount))
    for i in range(mcount):
        peak = float(np.max(np.linalg.norm(Phi[:, i].reshape(n, 3), axis=1)))
        h = eps * L / peak
        d = (h * Phi[:, i]).reshape(n, 3)
        dK = (fem.hessian(X + d, project=False) - fem.hessian(X - d, project=False)) / (2.0 * h)
        rhs[:, i, :] = -(dK @ Phi)[free]
    rhs = rhs.reshape(free.size, mcount * mcount)
    K = fem.hessian(X, project=False).tocsr()
    Kff = K[free][:, free]
    m_dof = np.repeat(modes.mass, 3)
    if modes.pinned.size == 0:
        # K is singular on the rigid modes. Make the load self-equilibrated (remove its rigid
        # component), solve with a statically determinate support (zero reactions), then
        # remove the rigid part of the answer: the solution M-orthogonal to rigid motions.
        R = rigid_modes(X, modes.mass)
        rhs = rhs - m_dof[:, None] * (R @ (R.T @ rhs))
        held = np.zeros(3 * n, dtype=bool)
        held[_statically_determinate_support(X)] = True
        sol = np.zeros_like(rhs)
        keep = np.flatnonzero(~held)
        sol[keep] = _spd_lu(K[keep][:, keep]).solve(rhs[keep])
        sol -= R @ (R.T @ (m_dof[:, None] * sol))
    else:
        sol = _spd_lu(Kff).solve(rhs)
    out = np.zeros((3 * n, mcount * mcount))
    out[free] = sol
    return out.T.reshape(mcount, mcount, 3 * n)


def modal_derivatives(
    fem: Any,
    modes: Subspace,
    mass: np.ndarray | None = None,
    *,
    count: int | None = None,
    eps: float = 1e-5,
) -> Subspace:
    """Linear modes plus their modal derivatives (Barbič and James 2005), M-orthonormal.

    The derivatives ``Phi_ij`` for ``i <= j`` (symmetrized, see
    :func:`modal_derivative_vectors`) are appended to the modes in order of increasing
    ``lambda_i lambda_j`` (the lowest, most visible pairs first), M-orthonormalized by
    Gram-Schmidt; near-dependent vectors are dropped. Pinned DOFs stay zero.

    Parameters
    ----------
    fem : fem.TetFEM
    modes : Subspace
        From :func:`modal_basis`.
    mass : (n,) float array, optional
        Vertex masses, kg; defaults to ``modes.mass`` (must match it if given).
    count : int, optional
        How many derivative vectors to add at most (default: all ``m (m + 1) / 2``).
    eps : float
        Finite-difference step of ``dK/dq``, fraction of the bounding-box diagonal.

    Returns
    -------
    Subspace
        ``kind="modal+derivatives"``: the columns of ``modes`` first, then the derivatives;
        ``info`` adds ``n_derivatives`` and ``derivative_pairs``.
    """
    if mass is not None and not np.allclose(_check_mass(mass, modes.n_vertices), modes.mass):
        raise ValueError("mass differs from the masses the modes were computed with.")
    if count is not None and count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    Pd = modal_derivative_vectors(fem, modes, eps=eps)
    mcount = Pd.shape[0]
    n_rigid = int(modes.info.get("n_rigid", 0))
    lam = np.asarray(modes.info.get("eigenvalues", np.ones(modes.k)), dtype=np.float64)
    lam = lam[n_rigid : n_rigid + mcount]
    iu, ju = np.triu_indices(mcount)
    order = np.argsort(lam[iu] * lam[ju], kind="stable")
    iu, ju = iu[order], ju[order]
    cand = 0.5 * (Pd[iu, ju] + Pd[ju, iu])  # (c, 3n)
    m_dof = np.repeat(modes.mass, 3)
    # Gram-Schmidt keeps track of which candidate each new vector came from.
    basis = modes.U
    added, pairs = [], []
    for c, (i, j) in enumerate(zip(iu, ju)):
        if count is not None and len(added) >= count:
            break
        q = m_orthonormalize(cand[c][:, None], m_dof, against=basis, drop_tol=1e-6)
        if q.shape[1]:
            added.append(q[:, 0])
            pairs.append([int(i), int(j)])
            basis = np.concatenate([basis, q], axis=1)
    U = basis
    U[_pinned_dofs(modes.pinned)] = 0.0
    info = dict(modes.info)
    info.update(
        method="linear modes + modal derivatives (Barbic and James 2005)",
        n_derivatives=len(added),
        derivative_pairs=pairs,
        fd_eps=eps,
    )
    return Subspace(modes.X.copy(), U, modes.mass, modes.pinned, "modal+derivatives", info)
