"""Reduced (subspace) implicit Euler: the per-frame runtime of linear reduced models.

Positions live in a linear subspace ``x = X + U q`` (``U`` is (3n, k), zero on pinned
DOFs). The backward Euler incremental potential of :mod:`.sim` restricted to it
(Fulton et al. 2019, eq. 2 and eq. 8 with ``u = U q``)::

    q_{n+1} = argmin_q  1/(2h^2) |q - q_n - h qdot_n|^2_{M~} + V~(q) - q . U^T f_ext + C~(q) + D~(q)

with ``M~ = U^T M U`` and the elastic energy, its gradient ``U^T g`` and the exact reduced
Hessian ``U^T H U`` evaluated by cubature (``V~ = sum_e w_e V_e``, eq. 17) on a sub-mesh made
only of the cubature elements, so a step never touches the full mesh. Contact is evaluated
on a fixed sample of surface vertices whose masses carry the whole surface's mass. Newton
with a backtracking line search solves it; the k x k systems are dense.

Every simulator (full space, reduced, learned) follows :class:`Simulator`: ``reset``,
``step(FrameInputs)``, ``positions()``, ``get_state`` / ``set_state``.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np
from scipy.spatial import cKDTree

from . import fem as _fem
from .colliders import Collider, contact_energy
from .errors import SimulationError
from .sim import FrameInputs, SimSettings, StepReport, boundary_vertices


class Simulator(Protocol):
    """The one protocol Blender's frame driver uses for every model."""

    frame: int

    def reset(self) -> None: ...

    def step(self, inputs: FrameInputs | None = None) -> StepReport: ...

    def positions(self) -> np.ndarray: ...

    def get_state(self) -> dict: ...

    def set_state(self, state: dict) -> None: ...


def surface_sample(
    X: np.ndarray, surface: np.ndarray, mass: np.ndarray, count: int = 512, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A farthest-point sample of surface vertices for contact, with mass weights.

    Parameters
    ----------
    X : (n, 3) float array
    surface : (s,) int array
        Surface vertex indices.
    mass : (n,) float array
        Lumped vertex masses, kg.
    count : int
        Sample size (all surface vertices when there are fewer).

    Returns
    -------
    idx : (c,) int array
        Sampled vertices.
    weights : (c,) float array
        Masses, kg: each sampled vertex carries the mass of the surface vertices nearest
        to it, so the weights sum to the surface mass.
    """
    surface = np.asarray(surface, dtype=np.int64)
    if len(surface) <= count:
        return surface.copy(), mass[surface].astype(float)
    P = X[surface]
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(len(P)))]
    d = np.linalg.norm(P - P[chosen[0]], axis=1)
    for _ in range(count - 1):  # O(count * s): a precomputation, not per frame
        i = int(np.argmax(d))
        chosen.append(i)
        d = np.minimum(d, np.linalg.norm(P - P[i], axis=1))
    chosen = np.array(chosen)
    owner = cKDTree(P[chosen]).query(P)[1]
    weights = np.bincount(owner, weights=mass[surface], minlength=len(chosen))
    return surface[chosen], weights


class ReducedSimulation:
    """Backward Euler in a linear subspace with cubature.

    Parameters
    ----------
    X : (n, 3) float array
        Rest positions, metres (world space).
    T : (m, 4) int array
    material : fem.Material
    U : (3n, k) float array
        Basis; rows of pinned DOFs must be zero.
    settings : SimSettings
    pinned : (p,) int array
        Pinned vertices (held at rest: the basis cannot move them).
    cubature : (elements (c,), weights (c,)) or None
        None uses every element with weight 1 (exact, for testing and small meshes).
    contact : (vertices (s,), masses (s,)) or None
        Contact sample; None samples the surface with :func:`surface_sample`.
    colliders : list of Collider
    """

    def __init__(
        self,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        U: np.ndarray,
        settings: SimSettings | None = None,
        pinned=(),
        cubature: tuple[np.ndarray, np.ndarray] | None = None,
        contact: tuple[np.ndarray, np.ndarray] | None = None,
        colliders: list[Collider] | None = None,
    ) -> None:
        self.settings = settings or SimSettings()
        self.settings.validate()
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        T = np.ascontiguousarray(T, dtype=np.int64)
        n = len(self.X)
        self.U = np.ascontiguousarray(U, dtype=np.float64)
        if self.U.ndim != 2 or self.U.shape[0] != 3 * n:
            raise SimulationError(f"Basis has shape {self.U.shape}; expected ({3 * n}, k).")
        self.k = self.U.shape[1]
        self.pinned = np.unique(np.asarray(pinned, dtype=np.int64))
        if self.pinned.size:
            rows = (3 * self.pinned[:, None] + np.arange(3)).ravel()
            if np.abs(self.U[rows]).max() > 0:
                raise SimulationError(
                    "The basis moves pinned vertices; pinned DOFs must be zero in U."
                )
        material.validate()
        mass = np.asarray(_fem.mass_matrix(self.X, T, material.density, lumped=True))
        self.mass = mass
        m3 = np.repeat(mass, 3)
        self.M_red = self.U.T @ (m3[:, None] * self.U)  # eq. (11)
        g = np.asarray(self.settings.gravity, dtype=float)
        self.f_gravity = self.U.T @ (m3 * np.tile(g, n))
        # sub-mesh of the cubature elements
        if cubature is None:
            elements = np.arange(len(T))
            weights = np.ones(len(T))
        else:
            elements = np.asarray(cubature[0], dtype=np.int64)
            weights = np.asarray(cubature[1], dtype=np.float64)
            if elements.shape != weights.shape or np.any(weights < 0):
                raise SimulationError(
                    "Cubature needs matching element and non-negative weight arrays."
                )
        self.elements, self.weights = elements, weights
        verts, inv = np.unique(T[elements].ravel(), return_inverse=True)
        self.sub_vertices = verts
        T_sub = inv.reshape(-1, 4)
        self.sub_fem = _fem.TetFEM(
            self.X[verts], T_sub, _slice_material(material, elements, len(T))
        )
        self.U_sub = self.U.reshape(n, 3, self.k)[verts]  # (v, 3, k)
        self.U_elem = self.U_sub[T_sub].reshape(len(elements), 12, self.k)  # (c, 12, k)
        # contact sample
        if contact is None:
            contact = surface_sample(self.X, boundary_vertices(T), mass)
        self.contact_vertices = np.asarray(contact[0], dtype=np.int64)
        self.contact_mass = np.asarray(contact[1], dtype=np.float64)
        self.U_contact = self.U.reshape(n, 3, self.k)[self.contact_vertices]
        self.colliders = list(colliders or [])
        L = float(np.linalg.norm(self.X.max(0) - self.X.min(0)))
        self.length_scale = L if L > 0 else 1.0
        gn = float(np.linalg.norm(g)) or 9.81
        self.kappa = (
            self.settings.contact_stiffness
            if self.settings.contact_stiffness is not None
            else gn / (1e-4 * self.length_scale)
        )
        self.reset()

    # ---------------------------------------------------------------------- state
    def reset(self, q: np.ndarray | None = None, qdot: np.ndarray | None = None) -> None:
        self.q = np.zeros(self.k) if q is None else np.array(q, dtype=float)
        self.qdot = np.zeros(self.k) if qdot is None else np.array(qdot, dtype=float)
        self.frame = 0
        self.f_ext = np.zeros(self.k)

    def get_state(self) -> dict:
        return {
            "q": self.q.copy(),
            "qdot": self.qdot.copy(),
            "frame": self.frame,
            "f_ext": self.f_ext.copy(),
            "colliders": [c.to_dict() for c in self.colliders],
        }

    def set_state(self, state: dict) -> None:
        self.q = np.array(state["q"], dtype=float)
        self.qdot = np.array(state["qdot"], dtype=float)
        self.frame = int(state["frame"])
        self.f_ext = np.array(state["f_ext"], dtype=float)
        self.colliders = [Collider(**c) for c in state["colliders"]]

    def positions(self) -> np.ndarray:
        """(n, 3) positions ``X + U q``, metres."""
        return self.X + (self.U @ self.q).reshape(-1, 3)

    def project_forces(self, forces: np.ndarray) -> np.ndarray:
        """Reduced external force ``U^T f`` of per-vertex forces (n, 3); only loaded rows cost."""
        f = np.asarray(forces, dtype=float).reshape(-1, 3)
        rows = np.flatnonzero(np.any(f != 0, axis=1))
        if rows.size == 0:
            return np.zeros(self.k)
        Ur = self.U.reshape(-1, 3, self.k)[rows]
        return np.einsum("rak,ra->k", Ur, f[rows])

    # --------------------------------------------------------------------- energy
    def _elastic(self, q: np.ndarray, need_hessian: bool):
        x_sub = self.sub_fem.X + self.U_sub @ q
        if not need_hessian:
            return self.sub_fem.energy_gradient(x_sub, weights=self.weights)[0], None, None
        e, g = self.sub_fem.energy_gradient(x_sub, weights=self.weights)
        He = self.sub_fem.element_hessians(x_sub, project=True)  # (c, 12, 12)
        k = self.k
        g_red = self.U_sub.reshape(-1, k).T @ g.ravel()
        # sum_e w_e U_e^T H_e U_e as two batched matmuls (einsum's naive loops are far slower)
        HU = (He * self.weights[:, None, None]) @ self.U_elem  # (c, 12, k)
        H_red = self.U_elem.reshape(-1, k).T @ HU.reshape(-1, k)
        return e, g_red, H_red

    def _contact(self, q: np.ndarray, colliders):
        if not colliders:
            return 0.0, np.zeros(self.k), np.zeros((self.k, self.k))
        xs = self.X[self.contact_vertices] + self.U_contact @ q
        idx = np.arange(len(xs))
        e, g, Hb = contact_energy(
            colliders, xs, idx, self.contact_mass, self.kappa, self.settings.contact_offset
        )
        k = self.k
        g_red = self.U_contact.reshape(-1, k).T @ g.ravel()
        active = np.flatnonzero(
            np.any(Hb != 0, axis=(1, 2))
        )  # only touching vertices add stiffness
        Ua = self.U_contact[active]
        H_red = Ua.reshape(-1, k).T @ (Hb[active] @ Ua).reshape(-1, k)
        return e, g_red, H_red

    # ----------------------------------------------------------------------- step
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame (``settings.substeps`` reduced backward Euler steps).

        ``inputs.forces`` are projected onto the basis; ``inputs.pin_targets`` must stay at
        rest (a linear basis with fixed pinned DOFs cannot move pins).
        """
        t0 = time.perf_counter()
        inputs = inputs or FrameInputs()
        s = self.settings
        if inputs.pin_targets is not None and self.pinned.size:
            p = np.asarray(inputs.pin_targets, dtype=float).reshape(-1, 3)
            if np.abs(p - self.X[self.pinned]).max() > 1e-9 * self.length_scale:
                raise SimulationError(
                    "This reduced model keeps pinned vertices at rest; animated pins need a model "
                    "trained with them moving (full-space bakes play them back)."
                )
        f1 = self.f_ext if inputs.forces is None else self.project_forces(inputs.forces)
        if not np.all(np.isfinite(f1)):
            raise SimulationError(f"The forces of frame {self.frame + 1} are not finite.")
        cols = self.colliders if inputs.colliders is None else list(inputs.colliders)
        saved = self.get_state()
        report = StepReport()
        n_sub = int(s.substeps)
        h = s.dt / n_sub
        f0 = self.f_ext
        for i in range(n_sub):
            w = (i + 1) / n_sub
            sub = self._backward_euler(h, (1 - w) * f0 + w * f1, cols)
            report.merge(sub)
            if not (sub.converged or sub.line_search_ok):
                self.set_state(saved)
                raise SimulationError(
                    f"Reduced frame {self.frame + 1} diverged: lower dt, raise substeps or soften "
                    "pokes and colliders."
                )
        self.f_ext, self.colliders = f1, cols
        self.frame += 1
        report.wall_time = time.perf_counter() - t0
        return report

    def _backward_euler(self, h: float, f_ext: np.ndarray, colliders) -> StepReport:
        s = self.settings
        q_n, qd_n = self.q, self.qdot
        q_tilde = q_n + h * qd_n
        Mr = self.M_red
        f = f_ext + self.f_gravity
        alpha, beta = s.damping_alpha, s.damping_beta
        D = alpha * Mr  # Rayleigh damping matrix, frozen over the step
        if beta > 0:
            D = D + beta * self._elastic(q_n, True)[2]

        def objective(q, need_hessian):
            dq, dn = q - q_tilde, q - q_n
            e_el, g_el, H_el = self._elastic(q, need_hessian)
            e_c, g_c, H_c = self._contact(q, colliders)
            e = 0.5 / h**2 * dq @ Mr @ dq + e_el - f @ q + e_c + 0.5 / h * dn @ D @ dn
            if not need_hessian:
                return e, None, None
            g = Mr @ dq / h**2 + g_el - f + g_c + D @ dn / h
            A = Mr / h**2 + H_el + H_c + D / h
            return e, g, A

        rep = StepReport(substeps=1)
        q = q_tilde.copy()
        tol = s.newton_tol * self.length_scale
        for _ in range(max(s.max_newton_iters, 1)):
            t0 = time.perf_counter()
            e, g, A = objective(q, True)
            rep.timings["derivatives"] += time.perf_counter() - t0
            if not (np.isfinite(e) and np.all(np.isfinite(g))):
                rep.converged = rep.line_search_ok = False
                return rep
            t0 = time.perf_counter()
            try:
                p = -np.linalg.solve(A, g)
            except np.linalg.LinAlgError:
                p = -np.linalg.lstsq(A, g, rcond=None)[0]
            rep.timings["solve"] += time.perf_counter() - t0
            rep.newton_iters += 1
            step = (
                float(np.abs(self.U_sub @ p).max()) if len(self.U_sub) else float(np.abs(p).max())
            )
            if step <= tol:
                q = q + p
                break
            t0 = time.perf_counter()
            slope = g @ p
            alpha_ls, ok = 1.0, False
            for _ in range(40):
                et = objective(q + alpha_ls * p, False)[0]
                if np.isfinite(et) and et <= e + 1e-4 * alpha_ls * slope:
                    ok = True
                    break
                alpha_ls *= 0.5
            rep.timings["line_search"] += time.perf_counter() - t0
            if not ok:
                rep.converged = abs(slope) <= 1e-12 * max(abs(e), 1e-300)
                rep.line_search_ok = rep.converged
                break
            q = q + alpha_ls * p
            if alpha_ls * step <= tol:
                break
        else:
            rep.converged = False
        rep.residual = step / self.length_scale
        if np.all(np.isfinite(q)) and (rep.converged or rep.line_search_ok):
            self.qdot = (q - q_n) / h
            self.q = q
        return rep


def _slice_material(material: _fem.Material, elements: np.ndarray, m: int) -> _fem.Material:
    """The material of a subset of elements (per-element parameters follow the subset)."""

    def pick(v):
        a = np.asarray(v, dtype=float)
        return float(a) if a.ndim == 0 else np.broadcast_to(a, (m,))[elements]

    return _fem.Material(
        youngs_modulus=pick(material.youngs_modulus),
        poisson_ratio=pick(material.poisson_ratio),
        density=pick(material.density),
        model=material.model,
    )
