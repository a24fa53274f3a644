"""Differentiable quasistatic solve of an actuated body (Srinivasan et al. 2021, sec. 3).

The equilibrium ``chi(a) = argmin_{x in C} E(x, a)`` (eq. 1, 5) of the shape-targeting energy
``E(x, a) = sum_j W_j mu ||F_j - R_j S_j(a)||^2`` (eq. 3-4, :mod:`core.fem`) plus, optionally,

* penalty contact of the embedded surface points with analytic colliders
  ``E_c = kappa/2 sum_p max(0, -phi(p))^2`` (:mod:`core.colliders`'s signed distances);
* zero-rest-length "targeting springs" pulling the embedded surface points to given
  positions ``E_s = k/2 ||P x - t||^2`` (sec. 5.1, the volumetric extrapolation of a target
  surface that gives the approximate target actions).

``C`` fixes the constrained nodes (skull nodes at rest, jaw nodes where the jaw's transform
puts them): the unknowns are the free nodes only.

Backward pass (eq. 10-13): at an equilibrium ``g(x, a) = dE/dx = 0`` on the free DOFs, so
``H dx/da = -d2E/dx da`` and ``dL/da = -(H^-1 dL/dx)^T d2E/dx da``. ``H`` is the **exact**
Hessian of the energy (``TetFEM.hessian(project=False)``): the PSD-projected one used by
many forward solvers is only a descent matrix, and its adjoint misses the gradient by the
size of the clamped eigenvalues (``tests/test_quasistatic.py`` shows it failing the finite
difference check the exact one passes at 1e-5). The contact term's Hessian is exact too:
for a sphere the normal turns with the point, which adds ``-kappa pen (I - n n^T) / r``.

Newton in the forward solve uses the exact Hessian when its factorization gives a descent
direction and the projected one otherwise, with a backtracking line search on the energy,
until the largest free-node force is below ``tol`` times the force scale ``mu h^2``
(``h`` the mean element size): a relative residual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..errors import SimulationError
from .colliders import Collider
from .fem import TetFEM

__all__ = ["Equilibrium", "QuasistaticSolver", "polar_actions"]


@dataclass
class Equilibrium:
    """One quasistatic solve's result.

    Attributes
    ----------
    x : (n, 3) float array
        Node positions, metres.
    iterations : int
        Newton iterations.
    residual : float
        Largest free-node force over the force scale (dimensionless).
    converged : bool
    """

    x: np.ndarray
    iterations: int
    residual: float
    converged: bool


def polar_actions(F: np.ndarray) -> np.ndarray:
    """Actions ``b`` (eq. 4) of the symmetric polar factor of each ``F``: ``F = R S``,
    ``S = V Sigma V^T`` (sec. 5.1, approximate shape targets). ``(m, 3, 3) -> (m, 6)``.

    An inverted element keeps ``S`` positive definite (the sign goes to ``R``'s reflection,
    which the energy's ``min over R`` ignores).
    """
    _, s, Vt = np.linalg.svd(F)
    S = (Vt.transpose(0, 2, 1) * np.abs(s)[:, None, :]) @ Vt
    b = S[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]].copy()
    b[:, [0, 3, 5]] -= 1.0
    return b


class QuasistaticSolver:
    """Equilibria of a shape-targeting body and their adjoint gradients.

    Parameters
    ----------
    fem : TetFEM
        A ``"shape_targeting"`` body; its actions are set by each solve.
    constrained : (c,) int array
        Nodes whose positions are given (skull, jaw).
    surface : (s, n) sparse matrix, optional
        Embedded surface points ``p = surface @ x`` (the skin): where colliders and
        targeting springs act.
    contact_stiffness : float
        Penalty stiffness per surface point, N/m.
    """

    def __init__(
        self,
        fem: TetFEM,
        constrained: np.ndarray,
        surface: sp.spmatrix | None = None,
        contact_stiffness: float | None = None,
    ) -> None:
        if fem.model != "shape_targeting":
            raise SimulationError(
                f"The quasistatic face solve needs the 'shape_targeting' material, not "
                f"{fem.model!r}."
            )
        self.fem = fem
        n = fem.n_vertices
        self.constrained = np.asarray(constrained, dtype=np.int64).reshape(-1)  # targets' order
        c = self.constrained
        if c.size and (c.min() < 0 or c.max() >= n or len(np.unique(c)) != len(c)):
            raise SimulationError("Constrained node indices lie outside the mesh or repeat.")
        free = np.ones(n, bool)
        free[self.constrained] = False
        self.free_nodes = np.flatnonzero(free)
        self.free = (3 * self.free_nodes[:, None] + np.arange(3)).ravel()
        self.surface = None if surface is None else sp.csr_matrix(surface)
        self.P3 = None if surface is None else sp.kron(self.surface, sp.eye(3), format="csr")
        h = float(np.cbrt(fem.volume.mean()))
        self.length_scale = h
        self.force_scale = float(fem.mu.mean()) * h * h
        if contact_stiffness is None:
            contact_stiffness = 300.0 * float(fem.mu.mean()) * h
        self.contact_stiffness = float(contact_stiffness)
        #: (s, 3) or 0: offsets added to the surface points before contact and springs (a
        #: face's skin detail layer: the skin that touches is the skin shown)
        self.surface_offset = 0.0

    # ------------------------------------------------------------------ energy terms

    def surface_terms(self, p: np.ndarray, colliders, springs, need_hess: bool):
        """Contact + spring energy (J) at surface points ``p`` (s, 3), its gradient (s, 3)
        and exact Hessian blocks (s, 3, 3) (None without ``need_hess``)."""
        E = 0.0
        gp = np.zeros_like(p)
        Hp = np.zeros((len(p), 3, 3)) if need_hess else None
        if springs is not None:
            t, k = springs
            d = p - t
            E += 0.5 * k * float((d * d).sum())
            gp += k * d
            if need_hess:
                Hp[:, [0, 1, 2], [0, 1, 2]] += k
        kap = self.contact_stiffness
        for c in colliders or ():
            phi, nrm = c.signed_distance(p)
            pen = -phi
            act = pen > 0
            if not act.any():
                continue
            E += 0.5 * kap * float((pen[act] ** 2).sum())
            gp[act] -= kap * pen[act, None] * nrm[act]
            if need_hess:
                nn = nrm[act, :, None] * nrm[act, None, :]
                Hp[act] += kap * nn
                if c.kind == "sphere":  # the normal turns with the point (exact Hessian)
                    r = np.linalg.norm(p[act] - c.transform[:3, 3], axis=1)
                    Hp[act] -= (kap * pen[act] / np.maximum(r, 1e-12))[:, None, None] * (
                        np.eye(3) - nn
                    )
        return E, gp, Hp

    def extra_terms(self, x, colliders, springs, need_hess: bool):
        """Contact + spring energy (J), gradient (3n,) and exact Hessian (3n, 3n) CSR or
        None, at positions ``x`` (3n,) or (n, 3)."""
        x = np.asarray(x, float).reshape(-1, 3)
        n3 = 3 * self.fem.n_vertices
        if self.surface is None or (not colliders and springs is None):
            return 0.0, np.zeros(n3), None
        p = self.surface @ x + self.surface_offset
        E, gp, Hp = self.surface_terms(p, colliders, springs, need_hess)
        g = self.P3.T @ gp.ravel()
        H = (self.P3.T @ _block_diag(Hp) @ self.P3).tocsr() if need_hess else None
        return E, g, H

    def energy(self, x, colliders=None, springs=None) -> float:
        """Total energy (J) at positions ``x`` (n, 3) with the current actions."""
        x = np.asarray(x, float).reshape(-1, 3)
        return self.fem.energy(x) + self.extra_terms(x, colliders, springs, False)[0]

    def gradient(self, x, colliders=None, springs=None) -> np.ndarray:
        """``dE/dx`` (n, 3) in newtons (constrained nodes included)."""
        x = np.asarray(x, float).reshape(-1, 3)
        g = self.fem.gradient(x).ravel() + self.extra_terms(x, colliders, springs, False)[1]
        return g.reshape(-1, 3)

    def residual(self, x, actions=None, colliders=None, springs=None) -> float:
        """Largest free-node force over the force scale ``mu h^2`` (0 at an equilibrium)."""
        if actions is not None:
            self.fem.set_actions(actions)
        g = self.gradient(x, colliders, springs).ravel()[self.free]
        return float(np.abs(g).max() / self.force_scale) if g.size else 0.0

    def hessian(self, x, colliders=None, springs=None, project: bool = False) -> sp.csr_matrix:
        """Free-DOF Hessian (exact unless ``project``)."""
        x = np.asarray(x, float).reshape(-1, 3)
        H = self.fem.hessian(x, project=project)
        Hx = self.extra_terms(x, colliders, springs, True)[2]
        if Hx is not None:
            H = H + Hx
        return H[self.free][:, self.free].tocsc()

    # ------------------------------------------------------------------ forward

    def solve(
        self,
        actions: np.ndarray,
        targets: np.ndarray,
        x0: np.ndarray | None = None,
        colliders: list[Collider] | None = None,
        springs: tuple[np.ndarray, float] | None = None,
        tol: float = 1e-8,
        max_iters: int = 60,
    ) -> Equilibrium:
        """Equilibrium for ``actions`` (m, 6) with the constrained nodes at ``targets`` (c, 3).

        Parameters
        ----------
        x0 : (n, 3) float array, optional
            Start (the previous frame's equilibrium); the rest shape by default.
        colliders : list of Collider, optional
        springs : ((s, 3) target surface positions, stiffness N/m), optional
        tol : float
            Relative force residual to reach (see :meth:`residual`).

        Raises SimulationError when Newton cannot decrease the energy at all.
        """
        fem = self.fem
        fem.set_actions(actions)
        targets = np.asarray(targets, float).reshape(-1, 3)
        if targets.shape != (len(self.constrained), 3):
            raise SimulationError(
                f"The quasistatic solve needs {len(self.constrained)} constrained positions, "
                f"got {targets.shape[0]}."
            )
        x = (fem.X if x0 is None else np.asarray(x0, float)).reshape(-1, 3).copy()
        x[self.constrained] = targets
        free = self.free
        self.last_lu = None  # the last exact-Hessian factorization (for the adjoint)
        E = self.energy(x, colliders, springs)
        res = np.inf
        for it in range(max_iters + 1):
            g = self.gradient(x, colliders, springs).ravel()[free]
            res = float(np.abs(g).max() / self.force_scale) if g.size else 0.0
            if res < tol or it == max_iters:
                break
            d = None
            for project in (False, True):
                try:
                    lu = spla.splu(self.hessian(x, colliders, springs, project))
                    d = -lu.solve(g)
                except RuntimeError:  # singular
                    d = None
                if d is not None and np.all(np.isfinite(d)) and g @ d < 0:
                    self.last_lu = None if project else lu
                    break
                d = None
            if d is None:
                d = -g / (np.abs(g).max() / self.length_scale * 10.0)
            step, ok = 1.0, False
            while step > 1e-10:
                xt = x.copy()
                xt.ravel()[free] += step * d
                Et = self.energy(xt, colliders, springs)
                if Et <= E + 1e-4 * step * (g @ d) or (
                    abs(Et - E) <= 1e-13 * max(abs(E), 1e-300) and step == 1.0
                ):
                    ok = True
                    break
                step *= 0.5
            if not ok:
                break  # no decrease possible: at the precision floor
            x, E = xt, Et
        return Equilibrium(x=x, iterations=it, residual=res, converged=res < tol)

    # ------------------------------------------------------------------ backward

    def adjoint(
        self,
        x: np.ndarray,
        dL_dx: np.ndarray,
        colliders: list[Collider] | None = None,
        springs: tuple[np.ndarray, float] | None = None,
        project: bool = False,
        lu=None,
    ) -> np.ndarray:
        """``dL/da`` (m, 6) at the equilibrium ``x`` of the current actions, eq. (13).

        Parameters
        ----------
        dL_dx : (n, 3) float array
            Gradient of the loss with respect to the node positions (constrained ones are
            ignored: they do not depend on the actions).
        project : bool
            Use the PSD-projected Hessian instead of the exact one (wrong; for the test
            that shows it).
        lu : a factorization of the exact Hessian near ``x`` (the solve's last Newton step,
            :attr:`last_lu`): the adjoint system is solved by iterative refinement on it (two
            steps, to 1e-10 of the right-hand side; a new factorization when they do not
            reach it), which saves one sparse factorization per equilibrium.
        """
        x = np.asarray(x, float).reshape(-1, 3)
        rhs = np.asarray(dL_dx, float).ravel()[self.free]
        H = self.hessian(x, colliders, springs, project)
        lam = None
        if lu is not None and not project:
            lam = lu.solve(rhs)
            for _ in range(2):
                r = rhs - H @ lam
                if np.linalg.norm(r) <= 1e-10 * np.linalg.norm(rhs):
                    break
                lam = lam + lu.solve(r)
            if np.linalg.norm(rhs - H @ lam) > 1e-10 * np.linalg.norm(rhs):
                lam = None
        if lam is None:
            lam = spla.splu(H).solve(rhs)
        M = self.fem.mixed_hessian(x)[self.free]  # d2E / dx_free da, (f, 6m)
        return -(M.T @ lam).reshape(-1, 6)

    def jacobian_product(self, x, da, colliders=None, springs=None) -> np.ndarray:
        """``dx/da @ da`` (n, 3): the equilibrium's first-order change for an action change
        ``da`` (m, 6) (constrained nodes do not move)."""
        x = np.asarray(x, float).reshape(-1, 3)
        M = self.fem.mixed_hessian(x)[self.free]
        dx = np.zeros(3 * self.fem.n_vertices)
        lu = spla.splu(self.hessian(x, colliders, springs))
        dx[self.free] = -lu.solve(M @ np.asarray(da, float).ravel())
        return dx.reshape(-1, 3)


def _block_diag(Hp: np.ndarray) -> sp.csr_matrix:
    """Block-diagonal CSR of (s, 3, 3) blocks."""
    s = len(Hp)
    rows = np.repeat(np.arange(3 * s).reshape(s, 3), 3, axis=1).ravel()
    cols = np.tile(np.arange(3 * s).reshape(s, 3), (1, 3)).ravel()
    return sp.csr_matrix((Hp.reshape(-1), (rows, cols)), shape=(3 * s, 3 * s))
