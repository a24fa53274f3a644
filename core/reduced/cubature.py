"""Cubature: a few weighted elements stand in for the whole mesh in a reduced simulation.

A reduced model with a linear (outer) subspace ``u = U q`` (``U`` a ``(3n, k)`` basis acting
on displacements) needs the reduced elastic force ``U^T g(x)`` with ``g = dE/dx`` every
Newton or L-BFGS iteration. Summing over all ``m`` elements costs as much as a full step, so
the sum is replaced by a cubature over a small element set ``S`` with weights ``w >= 0``
(Fulton et al. 2019, eq. 17; An, Kim and James 2008)::

    U^T g(x) = sum_e U_e^T g_e(x)  ~=  sum_{e in S} w_e U_e^T g_e(x)

where ``U_e`` are the 12 rows of ``U`` of element ``e``'s vertices and ``g_e`` its energy
gradient on them. The same weights are reused for the energy, ``E ~= sum_{e in S} w_e E_e``
(Fulton 2019, sec. 5.3: "re-using the weights ... also provided a good approximation").
Note ``g`` is the energy gradient: the internal force is ``-g``; the sign does not change
the fit.

Two schemes:

* :func:`optimized_cubature` — An et al. 2008, sec. 4: greedy element selection with
  non-negative least squares (NNLS) weights fitted to the reduced forces of training poses.
  Defaults follow Fulton 2019, sec. 5.3: relative error target 0.05, at most 500 elements.
  With ``validation_fraction`` (and ``groups``: the trajectory of each pose) it holds out
  part of the training poses and adds elements until their error meets the target too, so
  the target holds on poses the fit never saw, not only on the fitted ones.
* :func:`random_cubature` — uniformly random elements with equal weights ``m / count``
  (LiCROM, Chang et al. 2023, sec. 4-5): an unbiased estimate of the sum, needing no
  training poses, for meshes the model never saw.

Fitting problem and normalization
---------------------------------
For ``P`` training poses the fit is ``A w ~= b`` with ``b`` the stacked reduced forces
``(P k,)`` and column ``e`` of ``A`` the stacked ``U_e^T g_e`` of element ``e``. As An et
al. do, each pose's block of rows (``k`` rows) is divided by the norm of that pose's exact
reduced force ``||b_p||``, so that strongly deformed poses (large forces) do not dominate
the fit and every pose asks for the same *relative* accuracy. Poses whose reduced force is
zero (e.g. the rest pose) carry no information and are left out. The reported relative
error is therefore::

    err = sqrt( mean_p ||A_p w - b_p||^2 / ||b_p||^2 )

(:func:`cubature_error`), and ``||A w - b|| / ||b||`` of the normalized system equals it.

Poses are deformed positions ``(n, 3)``; the cubature is fitted at exactly the positions
given. A reduced simulation only visits poses in its subspace, so callers usually pass the
subspace reconstructions of their training frames (``X + U U^T M (x - X)`` for the
M-orthonormal bases of :mod:`.subspace`, i.e. ``Subspace.project``) rather than the raw frames.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import nnls

from ..data.files import json_default
from ..errors import CacheError, JobCancelled, NeuralRomError

__all__ = [
    "Cubature",
    "cubature_error",
    "optimized_cubature",
    "random_cubature",
    "reduced_element_forces",
    "reduced_forces",
]

#: Progress callback ``(done, total, info)``, the same shape as :mod:`.bake`'s.
Progress = Callable[[int, int, dict], None]

# Budget (floats) for one block of candidate columns (candidates x poses x max(k, 12)):
# 4M float64 = 32 MB, so scoring never materializes the (P k) x m matrix.
_BLOCK_FLOATS = 4_000_000

# A new column whose component orthogonal to the selected ones is below this fraction of its
# norm adds (almost) nothing to the span (duplicate / dependent element) and is excluded; it
# would only make the NNLS system ill-conditioned.
_DEPENDENT_TOL = 1e-6

# Selection stops ("stalled") after this many consecutive iterations that did not lower the
# error: the sampled elements lie in the span of the selected ones, or NNLS gives them zero
# weight. It happens once the fit is as good as the training forces allow (far below any
# useful target) and keeps the loop from scoring the whole mesh one element at a time.
_MAX_STALLS = 20


# --------------------------------------------------------------------------------------------
# The cubature
# --------------------------------------------------------------------------------------------


@dataclass
class Cubature:
    """Cubature elements and weights.

    Attributes
    ----------
    elements : (c,) int64 array
        Sorted, unique element (tet) indices.
    weights : (c,) float64 array
        Non-negative weights, dimensionless (multiplying each element's energy, gradient and
        Hessian). All-ones over all elements is the exact sum.
    info : dict
        JSON-serializable provenance: ``method`` (``"optimized"``, ``"random"``), and for
        optimized cubature ``target``, ``train_rel_error``, ``heldout_rel_error`` (when
        held-out poses were given), ``validation_rel_error`` (when validation poses were
        held out), ``iterations``, ``seconds``, ``converged``, ``stopped``.
    """

    elements: np.ndarray
    weights: np.ndarray
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.elements = np.asarray(self.elements, dtype=np.int64)
        self.weights = np.asarray(self.weights, dtype=np.float64)
        if self.elements.ndim != 1 or self.elements.shape != self.weights.shape:
            raise ValueError(
                f"cubature elements and weights must be 1-D arrays of one length, got shapes "
                f"{self.elements.shape} and {self.weights.shape}"
            )

    def __len__(self) -> int:
        return int(self.elements.size)

    def validate(self, n_elements: int | None = None) -> None:
        """Raise :class:`CacheError` unless weights are finite and >= 0, elements unique and,
        when ``n_elements`` is given, in ``[0, n_elements)``."""
        if not np.all(np.isfinite(self.weights)) or np.any(self.weights < 0):
            raise CacheError(
                "Cubature weights must be finite and non-negative; the model file is corrupt. "
                "Recompute the cubature (retrain the model)."
            )
        if np.unique(self.elements).size != self.elements.size:
            raise CacheError(
                "Cubature elements repeat; the model file is corrupt. Recompute the cubature."
            )
        if (
            n_elements is not None
            and self.elements.size
            and (self.elements.min() < 0 or self.elements.max() >= n_elements)
        ):
            raise CacheError(
                f"Cubature element indices run to {int(self.elements.max())} but the mesh has "
                f"{n_elements} tets: the model belongs to another mesh. Retrain the model on "
                "this mesh or re-tetrahedralize with the settings it was trained with."
            )

    def to_arrays(self, prefix: str = "cubature_") -> dict[str, np.ndarray]:
        """Plain arrays for an ``.npz`` model file (no pickle: info is a JSON string)."""
        return {
            f"{prefix}elements": self.elements.copy(),
            f"{prefix}weights": self.weights.copy(),
            f"{prefix}info": np.array(json.dumps(self.info, sort_keys=True, default=json_default)),
        }

    @classmethod
    def from_arrays(
        cls, arrays: Any, prefix: str = "cubature_", n_elements: int | None = None
    ) -> Cubature:
        """Inverse of :meth:`to_arrays`; ``arrays`` is a mapping (e.g. an ``np.load`` result
        opened with ``allow_pickle=False``). Raises :class:`CacheError` on missing or
        malformed entries, and on indices beyond ``n_elements`` when it is given."""
        keys = [f"{prefix}elements", f"{prefix}weights", f"{prefix}info"]
        missing = [k for k in keys if k not in arrays]
        if missing:
            raise CacheError(
                f"The model file has no cubature (missing {', '.join(missing)}). "
                "Retrain the model to recompute it."
            )
        elements = np.asarray(arrays[keys[0]])
        weights = np.asarray(arrays[keys[1]])
        if elements.ndim != 1 or weights.shape != elements.shape:
            raise CacheError(
                f"Cubature arrays have shapes {elements.shape} and {weights.shape}, expected two "
                "1-D arrays of one length; the model file is corrupt. Retrain the model."
            )
        if not np.issubdtype(elements.dtype, np.integer):
            raise CacheError(
                f"Cubature elements have dtype {elements.dtype}, expected integers; the model file "
                "is corrupt. Retrain the model."
            )
        try:
            info = json.loads(str(np.asarray(arrays[keys[2]])[()]))
        except (TypeError, ValueError) as exc:
            raise CacheError(
                f"Cubature info is not valid JSON ({exc}); retrain the model."
            ) from exc
        cub = cls(elements.astype(np.int64), weights.astype(np.float64), dict(info))
        cub.validate(n_elements)
        return cub


# --------------------------------------------------------------------------------------------
# Reduced forces
# --------------------------------------------------------------------------------------------


def _check_basis(fem, U: np.ndarray) -> np.ndarray:
    U = np.asarray(U, dtype=np.float64)
    n3 = 3 * fem.n_vertices
    if U.ndim != 2 or U.shape[0] != n3:
        raise ValueError(f"basis U must have shape ({n3}, k) for this mesh, got {U.shape}")
    if not np.all(np.isfinite(U)):
        raise ValueError("basis U contains NaN or inf")
    return U


def _check_poses(fem, poses: np.ndarray, name: str = "poses") -> np.ndarray:
    x = np.asarray(poses, dtype=np.float64)
    n = fem.n_vertices
    if x.shape == (n, 3):
        x = x[None]
    if x.ndim != 3 or x.shape[1:] != (n, 3):
        raise ValueError(f"{name} must have shape (P, {n}, 3), got {np.shape(poses)}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contain NaN or inf")
    return x


def _element_basis(fem, U: np.ndarray, elements: np.ndarray) -> np.ndarray:
    """``U_e``: the basis rows of each element's 12 DOFs, ``(c, 12, k)`` (DOF ``3 v + axis``)."""
    k = U.shape[1]
    return U.reshape(fem.n_vertices, 3, k)[fem.T[elements]].reshape(len(elements), 12, k)


def _columns(fem, Ue: np.ndarray, poses: np.ndarray, elements: np.ndarray, scale=None):
    """Reduced element forces ``U_e^T g_e(x_p)`` as ``(c, P, k)``, optionally times ``scale[p]``."""
    P = poses.shape[0]
    c = len(elements)
    G = np.empty((c, P, 12))
    for p in range(P):  # loop over poses only; each call is vectorized over the elements
        G[:, p, :] = fem.element_gradients(poses[p], elements).reshape(c, 12)
    if scale is not None:
        G *= scale[None, :, None]
    return G @ Ue  # (c, P, 12) @ (c, 12, k) -> (c, P, k)


def _blocks(count: int, P: int, k: int) -> int:
    return max(1, min(count, _BLOCK_FLOATS // max(1, P * max(k, 12))))


def reduced_element_forces(
    fem, U: np.ndarray, poses: np.ndarray, elements: np.ndarray | None = None
) -> np.ndarray:
    """Per-element reduced forces ``U_e^T g_e(x)`` of every pose, ``(P, k, c)`` in newtons
    (times the units of ``U``; ``g`` is the energy gradient, i.e. minus the internal force).

    Parameters
    ----------
    fem : fem.TetFEM
    U : (3n, k) float array
        Subspace basis (DOF order ``3 * vertex + axis``).
    poses : (P, n, 3) or (n, 3) float array
        Deformed positions, metres.
    elements : (c,) int array, optional
        Elements (columns) to evaluate; all ``m`` by default.

    Returns
    -------
    (P, k, c) float array
        Summing over the last axis with all elements gives :func:`reduced_forces`.
    """
    U = _check_basis(fem, U)
    x = _check_poses(fem, poses)
    e = np.arange(fem.n_elements) if elements is None else np.asarray(elements, dtype=np.int64)
    if e.ndim != 1 or (e.size and (e.min() < 0 or e.max() >= fem.n_elements)):
        raise ValueError(f"elements must be a 1-D array of indices in [0, {fem.n_elements})")
    P, k = x.shape[0], U.shape[1]
    out = np.empty((P, k, e.size))
    step = _blocks(e.size, P, k)
    for s in range(0, e.size, step):
        block = e[s : s + step]
        out[:, :, s : s + step] = _columns(fem, _element_basis(fem, U, block), x, block).transpose(
            1, 2, 0
        )
    return out


def reduced_forces(fem, U: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Exact reduced forces ``U^T g(x)`` over all elements, ``(P, k)``.

    Parameters
    ----------
    fem : fem.TetFEM
    U : (3n, k) float array
    poses : (P, n, 3) or (n, 3) float array
    """
    U = _check_basis(fem, U)
    x = _check_poses(fem, poses)
    return np.stack([U.T @ fem.gradient(xp).ravel() for xp in x])


def _cubature_forces(fem, U: np.ndarray, cub: Cubature, poses: np.ndarray) -> np.ndarray:
    """``sum_e w_e U_e^T g_e(x)`` for every pose, ``(P, k)``."""
    if len(cub) == 0:
        return np.zeros((poses.shape[0], U.shape[1]))
    return reduced_element_forces(fem, U, poses, cub.elements) @ cub.weights


def _relative_error(approx: np.ndarray, exact: np.ndarray, floor: float) -> float:
    """``sqrt(mean_p ||approx_p - exact_p||^2 / ||exact_p||^2)`` over poses with exact != 0."""
    norms = np.linalg.norm(exact, axis=1)
    keep = norms > _zero_force_threshold(norms, floor)
    if not np.any(keep):
        return 0.0 if np.allclose(approx, 0.0) else float("inf")
    rel = np.linalg.norm(approx[keep] - exact[keep], axis=1) / norms[keep]
    return float(np.sqrt(np.mean(rel**2)))


def _zero_force_threshold(norms: np.ndarray, floor: float) -> float:
    return max(1e-12 * float(norms.max(initial=0.0)), floor)


def _force_floor(fem, U: np.ndarray) -> float:
    """Reduced force of a strain of about 1e-10 (shear modulus x area x basis scale), N:
    below it a pose counts as undeformed (round-off of the rest pose is ~1e-16 of it)."""
    area = float(np.sum(fem.volume)) ** (2.0 / 3.0)
    basis = float(np.linalg.norm(U, axis=0).max(initial=0.0))
    return 1e-10 * float(np.mean(fem.mu)) * area * basis + np.finfo(float).tiny


def cubature_error(fem, U: np.ndarray, cub: Cubature, poses: np.ndarray) -> float:
    """Relative reduced-force error of a cubature over poses (normalized per pose).

    ``sqrt(mean_p ||F~_p - F_p||^2 / ||F_p||^2)`` with ``F_p = U^T g(x_p)`` exact and ``F~_p``
    the cubature sum; poses with zero reduced force are skipped (see the module docstring).

    Parameters
    ----------
    fem : fem.TetFEM
    U : (3n, k) float array
    cub : Cubature
    poses : (P, n, 3) or (n, 3) float array

    Returns
    -------
    float
        0 is exact; 0.05 is Fulton 2019's target.
    """
    U = _check_basis(fem, U)
    x = _check_poses(fem, poses)
    exact = reduced_forces(fem, U, x)
    return _relative_error(_cubature_forces(fem, U, cub, x), exact, _force_floor(fem, U))


# --------------------------------------------------------------------------------------------
# Optimized cubature (An, Kim, James 2008)
# --------------------------------------------------------------------------------------------


class _IncrementalQR:
    """Thin QR of the selected columns, grown one column at a time (Gram-Schmidt with one
    re-orthogonalization), so each NNLS solve is on the small triangular system
    ``min ||R w - Q^T b||`` (equivalent to ``min ||A w - b||`` over ``w >= 0``)."""

    def __init__(self, b: np.ndarray, capacity: int) -> None:
        self.b = b
        self.Q = np.empty((b.size, capacity))
        self.R = np.zeros((capacity, capacity))
        self.qb = np.empty(capacity)
        self.c = 0

    def add(self, a: np.ndarray) -> bool:
        """Append column ``a``; False (and no change) when it is dependent on the others."""
        c = self.c
        Q = self.Q[:, :c]
        h = Q.T @ a
        v = a - Q @ h
        h2 = Q.T @ v
        v -= Q @ h2
        h += h2
        rho = float(np.linalg.norm(v))
        if rho <= _DEPENDENT_TOL * float(np.linalg.norm(a)) or rho == 0.0:
            return False
        self.Q[:, c] = v / rho
        self.R[:c, c] = h
        self.R[c, c] = rho
        self.qb[c] = self.Q[:, c] @ self.b
        self.c = c + 1
        return True

    def drop_last(self) -> None:
        self.c -= 1
        self.R[:, self.c] = 0.0

    def solve(self) -> tuple[np.ndarray, np.ndarray] | None:
        """NNLS weights of the current columns and the residual ``b - A w``; None when the
        active-set iterations do not converge (an ill-conditioned set)."""
        c = self.c
        R = self.R[:c, :c]
        # The unconstrained least-squares weights, when none is negative, are the NNLS
        # solution (R has full rank: dependent columns are refused): a triangular solve
        # instead of the active-set iterations, which cost most of a fit of 100+ elements.
        w = solve_triangular(R, self.qb[:c])
        if np.all(w >= 0.0):
            return w, self.b - self.Q[:, :c] @ self.qb[:c]
        try:
            w, _ = nnls(R, self.qb[:c], maxiter=50 * c + 100)
        except RuntimeError:
            return None
        r = self.b - self.Q[:, :c] @ (R @ w)
        return w, r


def optimized_cubature(
    fem,
    U: np.ndarray,
    train_poses: np.ndarray,
    *,
    target: float = 0.05,
    max_elements: int = 500,
    candidates: int | None = None,
    seed: int = 0,
    heldout_poses: np.ndarray | None = None,
    validation_fraction: float = 0.0,
    groups: np.ndarray | None = None,
    refit: bool = True,
    pool: int | None = None,
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> Cubature:
    """Optimized cubature after An, Kim and James 2008 (sec. 4), as used by Fulton 2019 (sec. 5.3).

    Greedy selection: starting from an empty set with residual ``r = b``, each iteration
    draws ``candidates`` random unselected elements, scores each by the alignment of its
    normalized column with the residual, ``a_e . r / ||a_e||``, adds the best, and re-solves
    the non-negative least squares ``min_{w >= 0} ||A_S w - b||`` on the selected columns
    (:func:`scipy.optimize.nnls`). It stops when the relative error (per-pose normalized, see
    the module docstring) reaches ``target`` or ``max_elements`` elements are selected.

    **Validation stopping.** The training error alone says little about poses the fit never
    saw: on the swung bar of ``bench/autoencoder.py`` (k = 30) a rule that meets 0.05 on its training
    poses errs 0.077 on held-out bakes. With ``validation_fraction > 0`` a seeded share of the
    training poses is left out of the fit (whole trajectories when ``groups`` says which pose
    belongs to which), the relative error of the current weights on them is tracked every
    iteration, and selection goes on until that *validation* error meets ``target`` too. With
    ``refit`` the weights of the chosen elements are then re-solved on all the poses (fitted
    and validation), which lowers the error on unseen poses a little more.

    Columns are computed on demand for the candidates only (memory ``O(P k (candidates +
    max_elements))``), never the full ``(P k) x m`` matrix, so it scales to meshes of 100K
    tets; the cost is about ``iterations x P x candidates`` element-gradient evaluations.

    Parameters
    ----------
    fem : fem.TetFEM
    U : (3n, k) float array
        Linear subspace basis (for nonlinear models, the outer PCA layer; Fulton 2019).
    train_poses : (P, n, 3) float array
        Deformed positions to fit, metres (usually subspace reconstructions of baked frames).
    target : float
        Relative reduced-force error at which selection stops (Fulton 2019: 0.05); with a
        validation share, both the fitted and the validation poses must meet it.
    max_elements : int
        Upper bound on the number of cubature elements (Fulton 2019: 500).
    candidates : int, optional
        Random candidates scored per iteration; ``min(m, 1000)`` by default. Fewer is
        faster and slightly less greedy.
    seed : int
        Seed of the candidate draws and of the validation split: the result is deterministic
        given the seed.
    heldout_poses : (H, n, 3) float array, optional
        Poses not used at all (neither fit nor stopping); their relative error is reported
        as ``info["heldout_rel_error"]``.
    validation_fraction : float
        Share of ``train_poses`` held out to decide when to stop, in ``[0, 1)``; 0 (default)
        stops on the training error alone, as An et al. do. At least one pose (group) is
        held out and at least one is fitted.
    groups : (P,) int array, optional
        Trajectory (bake) of each training pose. With a validation share, whole groups are
        held out (about ``validation_fraction`` of them): frames of one trajectory are
        nearly alike, so poses held out between fitted neighbours would flatter the rule.
        With fewer than two groups, poses are held out at random instead.
    refit : bool
        With a validation share, re-solve the weights of the chosen elements on all poses.
    pool : int, optional
        Select from one seeded draw of ``pool`` elements whose columns are computed once
        (memory ``P k pool``) and scored all together every iteration, instead of
        ``candidates`` fresh elements per iteration: ``P x pool`` element gradients in all
        instead of ``iterations x P x candidates``, for a fit that must be quick (LiCROM fits
        each mesh's cubature when the mesh is loaded, :mod:`.methods.licrom`). The pool is
        a uniform sample, so it stands for the mesh as the per-iteration draws do.
    progress : callable(done, total, info), optional
        Called after each iteration with ``total = max_elements`` and ``info`` holding
        ``rel_error`` and ``elements`` (and ``validation_rel_error`` with a validation share).
    should_cancel : callable() -> bool, optional
        Polled every iteration; True raises :class:`JobCancelled`.

    Returns
    -------
    Cubature
        ``info["converged"]`` says whether the target was met (by the validation error too,
        when there is one); ``info["stopped"]`` is ``"target"``, ``"max_elements"``,
        ``"stalled"`` (20 iterations in a row without progress on the fitted poses: the new
        elements are dependent on the selected ones or get zero weight) or ``"exhausted"``
        (no element left that could lower the error). With a validation share, ``info`` also
        has ``validation_rel_error`` (of the weights fitted without those poses, i.e. an
        honest estimate), ``validation_poses`` (how many have a non-zero force),
        ``validation_indices`` (into ``train_poses``), ``validation`` (``"groups"`` or
        ``"poses"``) and ``refit`` (False when the refit was skipped: it would have raised
        the error of the fitted poses above the target); ``train_rel_error`` is that of the
        final weights on the fitted poses, the validation error that of the weights before
        the refit (after it, those poses are no longer unseen). Zero-weight elements are
        dropped, so ``len(result) <= max_elements``.

    Raises
    ------
    NeuralRomError
        If every training pose has zero reduced force (nothing to fit).
    JobCancelled
        If ``should_cancel`` returned True.
    """
    t0 = time.perf_counter()
    U = _check_basis(fem, U)
    x = _check_poses(fem, train_poses, "train_poses")
    if not (np.isfinite(target) and target >= 0):
        raise ValueError(f"target must be a non-negative relative error, got {target}")
    max_elements = int(max_elements)
    if max_elements < 1:
        raise ValueError(f"max_elements must be at least 1, got {max_elements}")
    if not (0.0 <= float(validation_fraction) < 1.0):
        raise ValueError(f"validation_fraction must lie in [0, 1), got {validation_fraction}")
    m, k = fem.n_elements, U.shape[1]
    n_cand = min(m, 1000) if candidates is None else int(candidates)
    if n_cand < 1:
        raise ValueError(f"candidates must be at least 1, got {candidates}")
    max_elements = min(max_elements, m)
    floor = _force_floor(fem, U)

    # Validation split, before the zero-force filter so that groups stay whole.
    val_mode, xv, val_idx = None, x[:0], np.zeros(0, dtype=np.int64)
    if validation_fraction > 0 and len(x) >= 2:
        fit_mask, val_mode = _validation_split(len(x), validation_fraction, groups, seed)
        val_idx = np.flatnonzero(~fit_mask)
        x, xv = x[fit_mask], x[~fit_mask]

    # Exact reduced forces; poses normalized per block (An et al. 2008).
    F = reduced_forces(fem, U, x)
    norms = np.linalg.norm(F, axis=1)
    keep = norms > _zero_force_threshold(norms, floor)
    if not np.any(keep):
        raise NeuralRomError(
            "Every training pose has zero reduced elastic force (the object never deforms "
            "in the subspace), so there is nothing to fit a cubature to. Bake scenarios that "
            "deform the object, or check that the basis U matches these poses."
        )
    x, scale = x[keep], 1.0 / norms[keep]
    P = x.shape[0]
    b = (F[keep] * scale[:, None]).ravel()  # (P k,), pose-major like the columns
    b_norm = float(np.linalg.norm(b))
    val = _Validation(fem, U, xv, max_elements, floor) if len(xv) else None
    if val is not None and val.V == 0:
        val = None  # every validation pose is undeformed: nothing to check against

    rng = np.random.default_rng(seed)
    available = np.ones(m, dtype=bool)  # not selected and not excluded
    columns, pool_size = None, None if pool is None else int(pool)
    if pool_size is not None:
        if pool_size < 1:
            raise ValueError(f"pool must be at least 1, got {pool}")
        drawn = np.sort(rng.choice(m, size=min(pool_size, m), replace=False))
        available[:] = False
        available[drawn] = True
        columns = _PoolColumns(fem, U, x, scale, drawn)
    qr = _IncrementalQR(b, max_elements)
    selected: list[int] = []
    w = np.zeros(0)
    r = b.copy()
    err = 1.0
    val_err = 1.0 if val is not None else 0.0
    iterations = 0
    stalls = 0  # consecutive iterations that did not lower the error
    stopped = "target" if max(err, val_err) <= target else ""
    while not stopped:
        if should_cancel is not None and should_cancel():
            raise JobCancelled(
                f"Cubature optimization cancelled after {len(selected)} elements "
                f"(relative error {err:.3g})."
            )
        if len(selected) >= max_elements:
            stopped = "max_elements"
            break
        if stalls >= _MAX_STALLS:
            stopped = "stalled"
            break
        pool = np.flatnonzero(available)
        if pool.size == 0:
            stopped = "exhausted"
            break
        if columns is not None:
            cand = pool
            best, col = columns.best(available, r)
        else:
            cand = rng.choice(pool, size=min(n_cand, pool.size), replace=False)
            best, col = _best_candidate(fem, U, x, scale, cand, r.reshape(P, k))
        iterations += 1
        stalls += 1
        if best < 0:
            # No sampled element can lower the error at this residual (which only changes
            # when an element is added): none of them is worth scoring again.
            available[cand] = False
            continue
        available[best] = False
        if not qr.add(col):
            continue  # in the span of the selected columns
        solved = qr.solve()
        if solved is None:
            qr.drop_last()  # NNLS did not converge: keep the previous fit, skip the element
            continue
        selected.append(best)
        w, r = solved
        new_err = float(np.linalg.norm(r)) / b_norm
        if new_err < err * (1.0 - 1e-9):
            stalls = 0
        err = new_err
        report = {"rel_error": err, "elements": len(selected)}
        if val is not None:
            val.add(best)
            val_err = val.error(w)
            report["validation_rel_error"] = val_err
        if progress is not None:
            progress(len(selected), max_elements, report)
        if max(err, val_err) <= target:
            stopped = "target"

    elements = np.asarray(selected, dtype=np.int64)
    refitted = False
    if val is not None and refit and len(elements):
        solved = _refit(fem, U, x, scale, b, val, elements)
        # kept unless it costs the fitted poses the target they met (``converged`` stays true
        # of the final weights)
        if solved is not None and solved[1] <= max(err, target):
            (w, err), refitted = solved, True
    positive = w > 0
    elements, w = elements[positive], w[positive]
    order = np.argsort(elements)
    info: dict[str, Any] = {
        "method": "optimized",
        "target": float(target),
        "train_rel_error": err,
        "converged": max(err, val_err) <= target,
        "stopped": stopped,
        "iterations": iterations,
        "max_elements": max_elements,
        "candidates": n_cand,
        "pool": pool_size,
        "seed": int(seed),
        "train_poses": int(P),
        "k": int(k),
        "n_elements": int(m),
    }
    if val is not None:
        info.update(
            validation=val_mode,
            validation_rel_error=val_err,
            validation_poses=int(val.V),
            validation_indices=[int(i) for i in val_idx],
            refit=refitted,
        )
    cub = Cubature(elements[order], w[order], info)
    if heldout_poses is not None:
        info["heldout_rel_error"] = cubature_error(fem, U, cub, heldout_poses)
    info["seconds"] = time.perf_counter() - t0
    return cub


def _validation_split(
    P: int, fraction: float, groups: np.ndarray | None, seed: int
) -> tuple[np.ndarray, str]:
    """Mask of the poses to fit (False: validation) and ``"groups"`` or ``"poses"``.

    Whole groups are held out when there are at least two; otherwise single poses. At least
    one group (pose) is held out and at least one fitted. Seeded, independent of the
    candidate draws."""
    rng = np.random.default_rng([int(seed), 1])
    fit = np.ones(P, dtype=bool)
    if groups is not None:
        g = np.asarray(groups).reshape(-1)
        if g.shape != (P,):
            raise ValueError(f"groups must give one id per training pose ({P}), got {g.shape}")
        ids = np.unique(g)
        if ids.size >= 2:
            n_val = min(max(1, int(round(fraction * ids.size))), ids.size - 1)
            fit[np.isin(g, rng.choice(ids, size=n_val, replace=False))] = False
            return fit, "groups"
    n_val = min(max(1, int(round(fraction * P))), P - 1)
    fit[rng.choice(P, size=n_val, replace=False)] = False
    return fit, "poses"


class _Validation:
    """The error of the current weights on validation poses, updated one element at a time:
    their normalized columns for the selected elements, ``(V k, c)``."""

    def __init__(self, fem, U: np.ndarray, xv: np.ndarray, capacity: int, floor: float) -> None:
        F = reduced_forces(fem, U, xv)
        norms = np.linalg.norm(F, axis=1)
        keep = norms > _zero_force_threshold(norms, floor)
        self.fem, self.U = fem, U
        self.x, self.scale = xv[keep], 1.0 / norms[keep]
        self.V = int(self.x.shape[0])
        self.b = (F[keep] * self.scale[:, None]).ravel()
        self.b_norm = float(np.linalg.norm(self.b)) or 1.0
        self.A = np.empty((self.b.size, capacity))
        self.c = 0

    def add(self, e: int) -> None:
        el = np.array([e])
        col = _columns(self.fem, _element_basis(self.fem, self.U, el), self.x, el, self.scale)
        self.A[:, self.c] = col[0].ravel()
        self.c += 1

    def error(self, w: np.ndarray) -> float:
        return float(np.linalg.norm(self.A[:, : self.c] @ w - self.b)) / self.b_norm


def _refit(fem, U, x, scale, b, val: _Validation, elements: np.ndarray):
    """NNLS weights of ``elements`` on the fitted (normalized forces ``b``) and the validation
    poses together, and their relative error on the fitted poses; None if NNLS does not
    converge."""
    A = np.concatenate(
        [
            reduced_element_forces(fem, U, x, elements) * scale[:, None, None],
            val.A[:, : val.c].reshape(val.V, U.shape[1], -1),
        ]
    ).reshape(-1, len(elements))
    Q, R = np.linalg.qr(A)  # NNLS on the small triangular system, as in _IncrementalQR
    try:
        w_all, _ = nnls(R, Q.T @ np.concatenate([b, val.b]), maxiter=50 * len(elements) + 100)
    except RuntimeError:
        return None
    r_fit = A[: b.size] @ w_all - b
    return w_all, float(np.linalg.norm(r_fit) / np.linalg.norm(b))


class _PoolColumns:
    """The normalized columns of a fixed pool of elements, ``(pool, P k)``, computed once, so
    that scoring every pooled element against a residual is one matrix-vector product."""

    def __init__(self, fem, U: np.ndarray, x: np.ndarray, scale: np.ndarray, elements) -> None:
        P, k = x.shape[0], U.shape[1]
        self.elements = elements
        self.A = np.empty((len(elements), P * k))
        step = _blocks(len(elements), P, k)
        for s in range(0, len(elements), step):
            block = elements[s : s + step]
            C = _columns(fem, _element_basis(fem, U, block), x, block, scale)
            self.A[s : s + step] = C.reshape(len(block), P * k)
        norm = np.linalg.norm(self.A, axis=1)
        self.inv_norm = np.where(norm > 0, 1.0 / np.where(norm > 0, norm, 1.0), 0.0)

    def best(self, available: np.ndarray, r: np.ndarray) -> tuple[int, np.ndarray | None]:
        """As :func:`_best_candidate`, over the pooled elements still ``available`` (a mask
        over all elements)."""
        score = (self.A @ r) * self.inv_norm
        score[~available[self.elements]] = -np.inf
        i = int(np.argmax(score))
        if not score[i] > 0.0:
            return -1, None
        return int(self.elements[i]), self.A[i].copy()


def _best_candidate(fem, U, x, scale, cand, R):
    """Index of the candidate whose normalized column best aligns with the residual
    ``R`` (``(P, k)``) and that column flattened to ``(P k,)``; ``-1`` if none has a positive
    alignment."""
    P, k = R.shape
    best, best_score, best_col = -1, 0.0, None
    step = _blocks(cand.size, P, k)
    for s in range(0, cand.size, step):
        block = cand[s : s + step]
        C = _columns(fem, _element_basis(fem, U, block), x, block, scale)  # (c, P, k)
        flat = C.reshape(len(block), P * k)
        norm = np.linalg.norm(flat, axis=1)
        dots = flat @ R.ravel()
        score = np.where(norm > 0, dots / np.where(norm > 0, norm, 1.0), 0.0)
        i = int(np.argmax(score))
        if score[i] > best_score:
            best, best_score, best_col = int(block[i]), float(score[i]), flat[i].copy()
    return best, best_col


# --------------------------------------------------------------------------------------------
# Random cubature (LiCROM)
# --------------------------------------------------------------------------------------------


def random_cubature(fem_or_volumes: Any, count: int, *, seed: int = 0) -> Cubature:
    """Uniformly random elements with equal weights ``m / count`` (LiCROM, Chang et al. 2023).

    Elements are drawn uniformly without replacement, so each element is in the set with
    probability ``count / m`` and ``sum_{e in S} (m / count) f_e`` is an unbiased estimate of
    ``sum_e f_e`` for any per-element quantity (energy, reduced force); the weights sum to
    ``m``. As in LiCROM the weights are equal: element volumes already enter through
    ``E_e = W_e Psi(F_e)``, so volume-proportional sampling is not used.

    Parameters
    ----------
    fem_or_volumes : fem.TetFEM or (m,) float array
        The mesh (only its element count is used) or its per-element rest volumes.
    count : int
        Number of elements, ``1 <= count``; capped at ``m`` (all elements, weights 1).
    seed : int

    Returns
    -------
    Cubature
        Sorted elements; ``info`` has ``method="random"``, ``count``, ``seed``.
    """
    if hasattr(fem_or_volumes, "n_elements"):
        m = int(fem_or_volumes.n_elements)
    else:
        vol = np.asarray(fem_or_volumes)
        if vol.ndim != 1:
            raise ValueError(
                f"expected a TetFEM or an (m,) array of volumes, got shape {vol.shape}"
            )
        m = int(vol.size)
    count = int(count)
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if m < 1:
        raise ValueError("the mesh has no elements")
    count = min(count, m)
    rng = np.random.default_rng(seed)
    elements = np.sort(rng.choice(m, size=count, replace=False)).astype(np.int64)
    weights = np.full(count, m / count)
    return Cubature(elements, weights, {"method": "random", "count": count, "seed": int(seed)})
