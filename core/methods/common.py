"""Reduced (subspace) implicit Euler: the per-frame runtime of linear reduced models.

Positions live in a linear subspace ``x = X + U q`` (``U`` is (3n, k), zero on pinned
DOFs). The backward Euler incremental potential of :mod:`.sim` restricted to it
(Fulton et al. 2019, eq. 2 and eq. 8 with ``u = U q``)::

    q_{n+1} = argmin_q  1/(2h^2) |q - q_n - h qdot_n|^2_{M~} + V~(q) - q . U^T f_ext + C~(q) + D~(q)

with ``M~ = U^T M U`` and the elastic energy, its gradient ``U^T g`` and the exact reduced
Hessian ``U^T H U`` evaluated by cubature (``V~ = sum_e w_e V_e``, eq. 17) on a sub-mesh made
only of the cubature elements, so a step never touches the full mesh. Contact is evaluated
on a fixed sample of surface vertices whose masses carry the whole surface's mass. Newton
with a backtracking line search solves it: exact reduced Hessian (projected only where it is
indefinite), dense k x k Cholesky, Hessians refreshed lazily (see ``_backward_euler``).

Every simulator (full space, reduced, learned) follows :class:`Simulator`: ``reset``,
``step(FrameInputs)``, ``positions()``, ``get_state`` / ``set_state``.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np
from scipy.linalg.lapack import dpotrf as _potrf
from scipy.linalg.lapack import dpotrs as _potrs
from scipy.spatial import cKDTree

from . import fem as _fem
from .colliders import Collider, contact_energy
from .errors import SimulationError
from .frame import IDENTITY, FrameMixin, interpolate
from .sim import FrameInputs, SimSettings, StepReport, boundary_vertices

#: A Newton step solved with the last factorized Hessian (a chord step) is taken when it is at
#: most this fraction of the previous step; otherwise the Hessian is recomputed first.
CHORD_RATE = 0.1


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


class SubspaceModel(FrameMixin):
    """What every subspace runtime shares: the basis ``U`` (3n, k), lumped masses, the
    reduced mass matrix and gravity, the cubature sub-mesh, the contact sample, the
    colliders and the pins' frame (:class:`.frame.FrameMixin`).

    Subclasses call :meth:`_setup` with the constructor arguments documented on
    :class:`ReducedSimulation`.
    """

    def _setup(
        self,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        U: np.ndarray,
        settings: SimSettings | None,
        pinned,
        cubature: tuple[np.ndarray, np.ndarray] | None,
        contact: tuple[np.ndarray, np.ndarray] | None,
        colliders: list[Collider] | None,
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
        self._X_sub = self.sub_fem.X
        self._U_sub_flat = np.ascontiguousarray(self.U_sub.reshape(-1, self.k))  # (3v, k)
        self._U_elem_flat = self.U_elem.reshape(-1, self.k)  # (12c, k)
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

    def project_forces(self, forces: np.ndarray) -> np.ndarray:
        """Reduced external force ``U^T f`` of per-vertex forces (n, 3); only loaded rows cost."""
        f = np.asarray(forces, dtype=float).reshape(-1, 3)
        rows = np.flatnonzero(np.any(f != 0, axis=1))
        if rows.size == 0:
            return np.zeros(self.k)
        Ur = self.U.reshape(-1, 3, self.k)[rows]
        return np.einsum("rak,ra->k", Ur, f[rows])

    def _contact(self, q: np.ndarray, colliders, hessian: bool = True):
        """Collider penalty on the contact sample at ``q``: energy (J), reduced gradient (k,)
        and, with ``hessian``, reduced Gauss-Newton Hessian (k, k) (None, None without
        colliders; the Hessian only from touching vertices)."""
        if not colliders:
            return 0.0, None, None
        xs = self.X[self.contact_vertices] + self.U_contact @ q
        idx = np.arange(len(xs))
        e, g, Hb = contact_energy(
            colliders, xs, idx, self.contact_mass, self.kappa, self.settings.contact_offset
        )
        k = self.k
        g_red = self.U_contact.reshape(-1, k).T @ g.ravel()
        if not hessian:
            return e, g_red, None
        active = np.flatnonzero(np.any(Hb != 0, axis=(1, 2)))
        Ua = self.U_contact[active]
        H_red = Ua.reshape(-1, k).T @ (Hb[active] @ Ua).reshape(-1, k)
        return e, g_red, H_red


class ReducedSimulation(SubspaceModel):
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
        Pinned vertices: the basis keeps them at rest; ``FrameInputs.pin_targets`` moves
        them rigidly, the whole simulation following in their frame (:mod:`.frame`).
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
        self._setup(X, T, material, U, settings, pinned, cubature, contact, colliders)
        self.reset()

    # ---------------------------------------------------------------------- state
    def reset(self, q: np.ndarray | None = None, qdot: np.ndarray | None = None) -> None:
        self.q = np.zeros(self.k) if q is None else np.array(q, dtype=float)
        self.qdot = np.zeros(self.k) if qdot is None else np.array(qdot, dtype=float)
        self.frame = 0
        self.f_ext = np.zeros(self.k)
        self._reset_frame()

    def get_state(self) -> dict:
        return {
            "q": self.q.copy(),
            "qdot": self.qdot.copy(),
            "frame": self.frame,
            "f_ext": self.f_ext.copy(),
            "colliders": [c.to_dict() for c in self.colliders],
            **self._frame_state(),
        }

    def set_state(self, state: dict) -> None:
        self.q = np.array(state["q"], dtype=float)
        self.qdot = np.array(state["qdot"], dtype=float)
        self.frame = int(state["frame"])
        self.f_ext = np.array(state["f_ext"], dtype=float)
        self.colliders = [Collider(**c) for c in state["colliders"]]
        self._set_frame_state(state)

    def positions(self) -> np.ndarray:
        """(n, 3) world positions ``R (X + U q) + c``, metres (``R, c``: the pins' frame)."""
        return self.world(self.X + (self.U @ self.q).reshape(-1, 3))

    # --------------------------------------------------------------------- energy
    def _elastic(self, q: np.ndarray, order: int, project: bool = True):
        """Cubature elastic energy (J); with ``order`` >= 1 its reduced gradient (k,), with
        ``order`` 2 its reduced Hessian (k, k) too (element Hessians PSD-projected with
        ``project``), from one pass of the constitutive kernel."""
        x_sub = self._X_sub + (self._U_sub_flat @ q).reshape(-1, 3)
        # one kernel pass gives the energy, the element gradients and (w-scaled) Hessians
        e, ge, He = self.sub_fem.element_terms(x_sub, self.weights, order >= 2, project)
        if order < 1:
            return e, None, None
        g_red = self._U_elem_flat.T @ ge.reshape(-1)
        if order < 2:
            return e, g_red, None
        # sum_e U_e^T (w_e H_e) U_e as two batched matmuls (einsum's naive loops are far slower)
        HU = He @ self.U_elem  # (c, 12, k)
        H_red = self._U_elem_flat.T @ HU.reshape(-1, self.k)
        return e, g_red, H_red

    # ----------------------------------------------------------------------- step
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame (``settings.substeps`` reduced backward Euler steps).

        ``inputs.forces`` are projected onto the basis; ``inputs.pin_targets`` must be a rigid
        motion of the rest pins (see :mod:`.frame`).
        """
        return run_frame(self, inputs, self._backward_euler, "Reduced")

    def _backward_euler(self, h: float, f_ext: np.ndarray, colliders, pose=None) -> StepReport:
        """One reduced backward Euler step into the pin frame ``pose`` (None: it stays):
        Newton on the incremental potential.

        The Newton matrix is the exact reduced Hessian ``M~/h^2 + D~/h + U^T H U`` whenever
        it is positive definite (the mass term usually makes it so), which converges
        quadratically; per-element PSD projection, which keeps every matrix definite but
        slows Newton to a linear rate where elements are compressed or twisted, is the
        fallback when its Cholesky factorization fails.

        The Hessian costs ~5x the energy and gradient (cubature sub-mesh, k = 30), so it is
        refreshed lazily: the trial point of the line search is evaluated without it, the
        next step is first solved with the factorization at hand (a chord step), and the
        Hessian is recomputed only when that step does not shrink by ``CHORD_RATE`` from the
        previous one. Near the solution the chord step stops the iteration at the cost of
        one gradient; far from it the iteration is Newton's.
        """
        s = self.settings
        q_n = self.q
        q_tilde, q_damp, f_grav, colliders = self.step_terms(h, pose, colliders)
        f = f_ext + f_grav
        M_h = self.M_red / h**2
        D_h = self.M_red * (s.damping_alpha / h)  # Rayleigh damping / h, frozen over the step
        # mass damping pulls towards q_d (q_n unless the pin frame moves): the linear term
        # (q - q_n) . d_off of alpha/(2h) |q - q_d|^2_M~ about q_n
        d_off = None if q_damp is q_n else D_h @ (q_n - q_damp)
        if s.damping_beta > 0:
            D_h = D_h + (s.damping_beta / h) * self._elastic(q_n, 2)[2]
        A_0 = M_h + D_h

        def objective(q, order, project=False):
            """Incremental potential; order 1 adds the gradient, 2 the Hessian."""
            Mdq = M_h @ (q - q_tilde)
            Ddn = D_h @ (q - q_n)
            e_el, g_el, H_el = self._elastic(q, order, project)
            e_c, g_c, H_c = self._contact(q, colliders)
            e = 0.5 * (q - q_tilde) @ Mdq + 0.5 * (q - q_n) @ Ddn + e_el - f @ q + e_c
            if d_off is not None:
                e += (q - q_n) @ d_off
                Ddn = Ddn + d_off
            if order < 1:
                return e, None, None
            g = Mdq + Ddn + g_el - f
            if g_c is not None:
                g += g_c
            if order < 2:
                return e, g, None
            A = A_0 + H_el
            if H_c is not None:
                A += H_c
            return e, g, A

        def factor(q, A):
            """(Cholesky factor, True) of the Newton matrix A at q, of its projected version
            when A is indefinite; (matrix, False) when even that fails (round-off)."""
            c, info = _potrf(A, lower=True)
            if info == 0:
                return c, True
            A = objective(q, 2, project=True)[2]
            c, info = _potrf(A, lower=True)
            return (c, True) if info == 0 else (A, False)

        def direction(fac, g):
            M, cholesky = fac
            if cholesky:
                return -_potrs(M, g, lower=True)[0]
            return -np.linalg.lstsq(M, g, rcond=None)[0]

        rep = StepReport(substeps=1)
        tol = s.newton_tol * self.length_scale
        q = q_tilde.copy()

        t0 = time.perf_counter()
        e, g, A = objective(q, 2)
        rep.timings["derivatives"] += time.perf_counter() - t0
        fac = None
        step = last = np.inf
        for _ in range(max(s.max_newton_iters, 1)):
            if not (np.isfinite(e) and np.all(np.isfinite(g))):
                rep.converged = rep.line_search_ok = False
                return rep
            if A is not None:  # the Hessian was (re)computed at q
                if not np.all(np.isfinite(A)):
                    rep.converged = rep.line_search_ok = False
                    return rep
                t0 = time.perf_counter()
                fac = factor(q, A)
                rep.timings["solve"] += time.perf_counter() - t0
            p = direction(fac, g)
            step = float(np.abs(self._U_sub_flat @ p).max()) if len(p) else 0.0
            if A is None and step > tol and step > CHORD_RATE * last:
                # the chord step shrinks too slowly: Newton from here
                t0 = time.perf_counter()
                A = objective(q, 2)[2]
                rep.timings["derivatives"] += time.perf_counter() - t0
                continue
            rep.newton_iters += 1
            if step <= tol:
                q = q + p
                break
            # Armijo backtracking: the full step (nearly always accepted) is evaluated with
            # the gradient, the next iterate's
            t0 = time.perf_counter()
            slope = g @ p
            q_t = q + p
            e_t, g_t, _ = objective(q_t, 1)
            rep.timings["derivatives"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            alpha_ls, ok = 1.0, bool(np.isfinite(e_t) and e_t <= e + 1e-4 * slope)
            if not ok:
                for _ in range(39):
                    alpha_ls *= 0.5
                    q_t = q + alpha_ls * p
                    e_t = objective(q_t, 0)[0]
                    if np.isfinite(e_t) and e_t <= e + 1e-4 * alpha_ls * slope:
                        ok = True
                        break
                if ok:
                    e_t, g_t, _ = objective(q_t, 1)
            rep.timings["line_search"] += time.perf_counter() - t0
            if not ok:
                rep.converged = abs(slope) <= 1e-12 * max(abs(e), 1e-300)
                rep.line_search_ok = rep.converged
                break
            q, e, g, A = q_t, e_t, g_t, None
            # after a backtracked step the Hessian at hand is a poor model: refresh it
            last = step if alpha_ls == 1.0 else 0.0
            if alpha_ls * step <= tol:
                break
        else:
            rep.converged = False
        rep.residual = step / self.length_scale
        if np.all(np.isfinite(q)) and (rep.converged or rep.line_search_ok):
            self.qdot = (q - q_n) / h
            self.q = q
            self._advance_frame(pose)
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


def run_frame(sim, inputs: FrameInputs | None, substep, what: str) -> StepReport:
    """One frame of a subspace simulator: checks the inputs, interpolates the reduced forces
    and the pin targets over ``settings.substeps`` calls of ``substep(h, f_ext, colliders,
    pose)`` (``pose``: the pins' frame at the end of the substep, None when the pins do not
    move), and restores the state if a substep diverges. Shared by the linear and the latent
    (autoencoder) runtimes.
    """
    t0 = time.perf_counter()
    inputs = inputs or FrameInputs()
    s = sim.settings
    n_sub = int(s.substeps)
    poses = [None] * n_sub
    p1 = sim.pin_targets
    if inputs.pin_targets is not None and sim.pinned.size:
        p1 = np.asarray(inputs.pin_targets, dtype=float).reshape(-1, 3)
        p0 = sim.pin_targets
        if not np.array_equal(p1, p0):
            frame = sim.pin_frame()
            end = (
                IDENTITY
                if np.array_equal(p1, frame.rest_pins)
                else frame.fit(p1, sim.pose, sim.frame + 1)
            )
            # substeps move the frame rigidly (screw interpolation), not the targets linearly
            centre = frame.rest_pins.mean(0)
            poses = [interpolate(sim.pose, end, (i + 1) / n_sub, centre) for i in range(n_sub)]
    end = poses[-1] or sim.pose
    forces = inputs.forces
    if forces is not None and not end.is_identity:
        forces = np.asarray(forces, dtype=float).reshape(-1, 3) @ end.R  # into the pin frame
    f1 = sim.f_ext if forces is None else sim.project_forces(forces)
    if not np.all(np.isfinite(f1)):
        raise SimulationError(f"The forces of frame {sim.frame + 1} are not finite.")
    cols = sim.colliders if inputs.colliders is None else list(inputs.colliders)
    saved = sim.get_state()
    report = StepReport()
    h = s.dt / n_sub
    f0 = sim.f_ext
    for i in range(n_sub):
        w = (i + 1) / n_sub
        sub = substep(h, (1 - w) * f0 + w * f1, cols, poses[i])
        report.merge(sub)
        if not (sub.converged or sub.line_search_ok):
            sim.set_state(saved)
            raise SimulationError(
                f"{what} frame {sim.frame + 1} diverged: lower dt, raise substeps or soften "
                "pokes and colliders."
            )
    sim.f_ext, sim.colliders, sim.pin_targets = f1, cols, np.array(p1, dtype=float)
    sim.frame += 1
    report.wall_time = time.perf_counter() - t0
    return report
