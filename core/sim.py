"""Full-space implicit simulation of a tet mesh.

Backward Euler is solved as the minimization of the incremental potential (Fulton et al.
2019, eq. 8)::

    x_{n+1} = argmin_x  1/(2h^2) ||x - x_n - h v_n||_M^2 + V(x) - f_ext . x + C(x) + D(x)

with ``V`` the elastic energy (:mod:`.fem`), ``f_ext`` gravity plus external forces,
``C`` the collider penalty (:mod:`.colliders`) and ``D`` the Rayleigh damping potential
``1/(2h) (x - x_n)^T (alpha M + beta K_n) (x - x_n)`` whose gradient is the damping force
``-(alpha M + beta K_n) v``. Newton's method with per-element PSD-projected Hessians and a
backtracking line search minimizes it; pinned vertices are Dirichlet constraints. The
quasistatic mode (active models) minimizes the same potential without the inertia and
damping terms.

A step that does not converge, or produces non-finite values, is retried with the time
step halved (up to ``max_retries`` times); if even that fails the state is left as it was
and :class:`SimulationError` is raised, so a bad step never leaks NaNs into a bake.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from . import fem as _fem
from .colliders import Collider, ContactPoints
from .errors import SimulationError
from .linsolve import SPDSolver


@dataclass
class SimSettings:
    """Integrator settings (SI units).

    Attributes
    ----------
    dt : float
        Frame time step, seconds.
    substeps : int
        Backward Euler steps per frame.
    gravity : (3,) float
        m/s^2, world space (Blender is Z-up).
    damping_alpha : float
        Rayleigh mass-proportional damping, 1/s.
    damping_beta : float
        Rayleigh stiffness-proportional damping, s.
    newton_tol : float
        Newton stops when the largest vertex update is below ``newton_tol`` times the
        rest bounding-box diagonal.
    max_newton_iters : int
    max_retries : int
        How many times a failing step may be split in two.
    contact_stiffness : float or None
        Penalty stiffness, 1/s^2; None picks ``g / (1e-4 L)``: a vertex resting under its
        own weight sinks 0.01% of the object size ``L``; the vertices that carry the
        weight of the whole body sink proportionally more (about 0.1% for a slab).
    contact_offset : float
        Metres; the penalty starts this far outside collider surfaces.
    linear_solver : {"auto", "amg", "superlu"}
        See :mod:`.linsolve`: AMG-preconditioned CG for large meshes, SuperLU for small ones.
    """

    dt: float = 1.0 / 24.0
    substeps: int = 1
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    damping_alpha: float = 0.0
    damping_beta: float = 0.0
    newton_tol: float = 1e-6
    max_newton_iters: int = 30
    max_retries: int = 4
    contact_stiffness: float | None = None
    contact_offset: float = 0.0
    linear_solver: str = "auto"

    def to_dict(self) -> dict:
        """The time-step settings a model file stores (JSON-able)."""
        return {
            "dt": float(self.dt),
            "substeps": int(self.substeps),
            "gravity": [float(g) for g in self.gravity],
            "damping_alpha": float(self.damping_alpha),
            "damping_beta": float(self.damping_beta),
            "newton_tol": float(self.newton_tol),
            "max_newton_iters": int(self.max_newton_iters),
        }

    def validate(self) -> None:
        if not (self.dt > 0 and np.isfinite(self.dt)):
            raise SimulationError(f"Time step must be positive, got dt={self.dt}.")
        if int(self.substeps) < 1:
            raise SimulationError(f"Substeps must be at least 1, got {self.substeps}.")
        if self.damping_alpha < 0 or self.damping_beta < 0:
            raise SimulationError("Rayleigh damping coefficients must be non-negative.")
        if not (self.newton_tol > 0):
            raise SimulationError("Newton tolerance must be positive.")


@dataclass
class FrameInputs:
    """What drives one frame.

    Attributes
    ----------
    forces : (n, 3) float array or None
        External force per vertex at the end of the frame, newtons.
    pin_targets : (k, 3) float array or None
        Positions of the pinned vertices at the end of the frame, metres; None keeps them.
    colliders : list of Collider or None
        Colliders at the end of the frame; None keeps the previous ones.
    sliders : (r,) float array or None
        Latent slider values (methods with a latent space an artist drives directly).
    markers : Markers or None
        Marker targets for inverse control (positions and weights).
    reference_frame : (4, 4) float array or None
        The driving reference frame at the end of the frame (an object's or a bone's
        world matrix, metres); methods that simulate relative to a moving frame take it.

    A method ignores an input it does not take and refuses a frame that lacks one it needs
    (its registry record lists both: :func:`core.registry.check_inputs`).
    """

    forces: np.ndarray | None = None
    pin_targets: np.ndarray | None = None
    colliders: list[Collider] | None = None
    sliders: np.ndarray | None = None
    markers: Markers | None = None
    reference_frame: np.ndarray | None = None


@dataclass
class Markers:
    """Marker targets of one frame: where chosen points of the body should be.

    Attributes
    ----------
    vertices : (p,) int array
        Vertices (of the simulated mesh) the markers are attached to.
    positions : (p, 3) float array
        Target world positions, metres.
    weights : (p,) float array
        Relative importance of each marker (>= 0).
    """

    vertices: np.ndarray
    positions: np.ndarray
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.vertices = np.asarray(self.vertices, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(self.positions, dtype=np.float64).reshape(-1, 3)
        p = len(self.vertices)
        self.weights = (
            np.ones(p) if self.weights is None else np.asarray(self.weights, float).reshape(-1)
        )
        if len(self.positions) != p or len(self.weights) != p:
            raise SimulationError(
                f"Markers need one position and one weight per vertex; got {p} vertices, "
                f"{len(self.positions)} positions and {len(self.weights)} weights."
            )
        if np.any(self.weights < 0) or not np.all(np.isfinite(self.positions)):
            raise SimulationError("Marker weights must be >= 0 and positions finite.")


@dataclass
class StepReport:
    """What a step did: Newton iterations, substeps actually taken, timings (s)."""

    newton_iters: int = 0
    substeps: int = 0
    retries: int = 0
    converged: bool = True
    residual: float = 0.0
    line_search_ok: bool = True
    timings: dict = field(
        default_factory=lambda: {"derivatives": 0.0, "solve": 0.0, "line_search": 0.0}
    )
    wall_time: float = 0.0

    def merge(self, other: StepReport) -> None:
        self.newton_iters += other.newton_iters
        self.substeps += other.substeps
        self.retries += other.retries
        self.converged &= other.converged
        self.line_search_ok &= other.line_search_ok
        self.residual = max(self.residual, other.residual)
        for k, v in other.timings.items():
            self.timings[k] = self.timings.get(k, 0.0) + v


def boundary_vertices(T: np.ndarray) -> np.ndarray:
    """Vertices on the boundary of a tet mesh.

    Parameters
    ----------
    T : (m, 4) int array

    Returns
    -------
    (s,) int array, sorted
    """
    faces = np.concatenate([T[:, [1, 2, 3]], T[:, [0, 3, 2]], T[:, [0, 1, 3]], T[:, [0, 2, 1]]])
    key = np.sort(faces, axis=1)
    _, inv, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    return np.unique(faces[counts[inv.ravel()] == 1])


class _DirichletMask:
    """Turns a full CSR matrix into one with identity rows/columns on pinned DOFs, in place.

    The sparsity pattern of the assembled Hessian never changes, so the positions of the
    entries to clear are found once.
    """

    def __init__(self, A: sp.csr_matrix, fixed_dofs: np.ndarray) -> None:
        self.indptr = A.indptr.copy()
        self.indices = A.indices.copy()
        fixed = np.zeros(A.shape[0], dtype=bool)
        fixed[fixed_dofs] = True
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        self.clear = fixed[rows] | fixed[A.indices]
        self.diag = np.flatnonzero(self.clear & (rows == A.indices) & fixed[rows])

    def matches(self, A: sp.csr_matrix) -> bool:
        return (
            A.indptr.shape == self.indptr.shape
            and A.indices.shape == self.indices.shape
            and np.array_equal(A.indptr, self.indptr)
        )

    def apply(self, A: sp.csr_matrix) -> sp.csr_matrix:
        A.data[self.clear] = 0.0
        A.data[self.diag] = 1.0
        return A


class Simulation:
    """Backward Euler simulation of one tet mesh.

    Parameters
    ----------
    X : (n, 3) float array
        Rest positions, metres (world space).
    T : (m, 4) int array
        Tetrahedra.
    material : fem.Material
    settings : SimSettings
    pinned : (k,) int array
        Vertices held by Dirichlet constraints (at their rest position until a frame's
        ``pin_targets`` moves them).
    colliders : list of Collider
    fem : fem.TetFEM, optional
        A prebuilt elastic model (shares rest data between simulations).
    contact : colliders.ContactPoints, optional
        The points that touch colliders: by default the boundary vertices with their lumped
        masses; an embedded render surface's points (:meth:`.Embedding.contact_points`) make
        the surface the user sees touch, not the cage around it.
    """

    def __init__(
        self,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        settings: SimSettings | None = None,
        pinned: np.ndarray | list[int] = (),
        colliders: list[Collider] | None = None,
        fem: _fem.TetFEM | None = None,
        contact: ContactPoints | None = None,
    ) -> None:
        self.settings = settings or SimSettings()
        self.settings.validate()
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.T = np.ascontiguousarray(T, dtype=np.int64)
        material.validate()
        self.material = material
        self.fem = fem or _fem.TetFEM(self.X, self.T, material)
        n = len(self.X)
        self.mass = np.asarray(_fem.mass_matrix(self.X, self.T, material.density, lumped=True))
        self.mass_dofs = np.repeat(self.mass, 3)
        self.pinned = np.unique(np.asarray(pinned, dtype=np.int64))
        if self.pinned.size and (self.pinned.min() < 0 or self.pinned.max() >= n):
            raise SimulationError(f"Pinned vertex index out of range 0..{n - 1}.")
        self.free = np.ones(n, dtype=bool)
        self.free[self.pinned] = False
        self.fixed_dofs = (3 * self.pinned[:, None] + np.arange(3)).ravel()
        self.surface = boundary_vertices(self.T)
        self.contact = contact or ContactPoints.at_vertices(self.surface, self.mass[self.surface])
        self.contact.check(n)
        self.colliders = list(colliders or [])
        L = float(np.linalg.norm(self.X.max(0) - self.X.min(0)))
        self.length_scale = L if L > 0 else 1.0
        g = float(np.linalg.norm(self.settings.gravity)) or 9.81
        self.kappa = (
            self.settings.contact_stiffness
            if self.settings.contact_stiffness is not None
            else g / (1e-4 * self.length_scale)
        )
        self._mask: _DirichletMask | None = None
        self.solver = SPDSolver(self.X, self.settings.linear_solver)
        if self.solver.B is not None:
            self.solver.B[self.fixed_dofs] = 0.0  # pinned DOFs are identity rows, not free motion
        self._block_slots: np.ndarray | None = None
        self.reset()

    # ----------------------------------------------------------------------------- state
    def reset(self, x: np.ndarray | None = None, v: np.ndarray | None = None) -> None:
        """Back to rest (or to the given positions/velocities), frame 0."""
        self.x = self.X.copy() if x is None else np.array(x, dtype=np.float64)
        self.v = np.zeros_like(self.x) if v is None else np.array(v, dtype=np.float64)
        self.frame = 0
        self.forces = np.zeros_like(self.x)
        self.pin_targets = self.x[self.pinned].copy()

    def get_state(self) -> dict:
        """A copy of everything :meth:`set_state` needs to continue exactly from here."""
        return {
            "x": self.x.copy(),
            "v": self.v.copy(),
            "frame": self.frame,
            "forces": self.forces.copy(),
            "pin_targets": self.pin_targets.copy(),
            "colliders": [c.to_dict() for c in self.colliders],
        }

    def set_state(self, state: dict) -> None:
        self.x = np.array(state["x"], dtype=np.float64)
        self.v = np.array(state["v"], dtype=np.float64)
        self.frame = int(state["frame"])
        self.forces = np.array(state["forces"], dtype=np.float64)
        self.pin_targets = np.array(state["pin_targets"], dtype=np.float64)
        self.colliders = [Collider(**c) for c in state["colliders"]]

    # ------------------------------------------------------------------------- stepping
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame (``settings.substeps`` backward Euler steps).

        Pin targets, forces and collider transforms are interpolated linearly from the
        previous frame's values to ``inputs`` across the substeps.

        Raises
        ------
        SimulationError
            If the step diverges even with the time step halved ``max_retries`` times; the
            state is then unchanged.
        """
        t0 = time.perf_counter()
        inputs = inputs or FrameInputs()
        s = self.settings
        f1 = self.forces if inputs.forces is None else np.asarray(inputs.forces, dtype=np.float64)
        p1 = (
            self.pin_targets
            if inputs.pin_targets is None
            else np.asarray(inputs.pin_targets, dtype=np.float64).reshape(-1, 3)
        )
        if p1.shape != (len(self.pinned), 3):
            raise SimulationError(
                f"Pin targets have shape {p1.shape}, expected ({len(self.pinned)}, 3)."
            )
        c1 = self.colliders if inputs.colliders is None else list(inputs.colliders)
        if len(c1) != len(self.colliders):
            self.colliders = c1  # a collider appeared/disappeared: no interpolation
        for name, arr in (("forces", f1), ("pin targets", p1)):
            if not np.all(np.isfinite(arr)):
                raise SimulationError(f"The {name} of frame {self.frame + 1} are not finite.")
        saved = self.get_state()
        report = StepReport()
        try:
            self._advance(s.dt, f1, p1, c1, depth=0, report=report)
        except SimulationError:
            self.set_state(saved)
            raise
        self.forces, self.pin_targets, self.colliders = f1.copy(), p1.copy(), c1
        self.frame += 1
        report.wall_time = time.perf_counter() - t0
        return report

    def _advance(self, dt, f1, p1, c1, depth, report) -> None:
        """Integrate one frame in ``substeps * 2**depth`` backward Euler steps."""
        n_sub = int(self.settings.substeps) * (2**depth)
        last_try = depth >= self.settings.max_retries
        f0, p0, c0 = self.forces, self.pin_targets, self.colliders
        x_start, v_start = self.x.copy(), self.v.copy()
        h = dt / n_sub
        for k in range(n_sub):
            w = (k + 1) / n_sub
            sub = self._backward_euler(
                h,
                (1 - w) * f0 + w * f1,
                (1 - w) * p0 + w * p1,
                _lerp_colliders(c0, c1, w),
                accept_unconverged=last_try,
            )
            report.merge(sub)
            if sub.converged:
                continue
            if last_try and sub.line_search_ok:
                continue  # finite and descending, just not to tolerance: kept and flagged
            if last_try:
                raise SimulationError(
                    f"Frame {self.frame + 1} diverged even with the time step cut to {h:.3g} s: "
                    "lower dt or raise substeps, soften pokes or colliders, or check the material "
                    "(very stiff or nearly incompressible materials need smaller steps)."
                )
            self.x, self.v = x_start, v_start
            report.retries += 1
            report.converged = True
            report.line_search_ok = True
            self._advance(dt, f1, p1, c1, depth + 1, report)
            return

    def _backward_euler(
        self, h, forces, pin_targets, colliders, accept_unconverged=False
    ) -> StepReport:
        s = self.settings
        x_n, v_n = self.x, self.v
        x_tilde = x_n + h * v_n
        m3 = self.mass_dofs
        f_ext = forces + self.mass[:, None] * np.asarray(s.gravity)[None, :]
        K_damp = None
        if s.damping_beta > 0:
            K_damp = self.fem.hessian(x_n, project=True)
        alpha = s.damping_alpha

        def objective(x, need_hessian):
            dx = (x - x_tilde).ravel()
            dn = (x - x_n).ravel()
            if need_hessian:
                e_el, g_el, H = self.fem.energy_gradient_hessian(x, project=True)
            else:
                e_el, g_el, H = self.fem.energy(x), None, None
            e_c, g_c, Hc = self.contact.energy(colliders, x, self.kappa, s.contact_offset)
            e = 0.5 / h**2 * dx @ (m3 * dx) + e_el - np.sum(f_ext * x) + e_c
            e += 0.5 * alpha / h * dn @ (m3 * dn)
            if K_damp is not None:
                e += 0.5 * s.damping_beta / h * dn @ (K_damp @ dn)
            if not need_hessian:
                return e, None, None
            g = (m3 * dx) / h**2 + g_el.ravel() - f_ext.ravel() + g_c.ravel()
            g += alpha / h * m3 * dn
            A = H
            if K_damp is not None:
                g += s.damping_beta / h * (K_damp @ dn)
                A.data += (s.damping_beta / h) * K_damp.data  # same assembler, same pattern
            diag = m3 * (1.0 / h**2 + alpha / h)
            A = self._add_diagonal_and_blocks(A, diag, Hc)
            return e, g, A

        x0 = x_tilde.copy()
        x0[self.pinned] = pin_targets
        x, rep = self._newton(objective, x0)
        if rep.converged or (accept_unconverged and rep.line_search_ok and np.all(np.isfinite(x))):
            self.v = (x - x_n) / h
            self.x = x
        return rep

    def solve_quasistatic(
        self, inputs: FrameInputs | None = None, x0: np.ndarray | None = None
    ) -> StepReport:
        """Minimize ``V(x) - f . x + C(x)`` (no inertia): the static equilibrium.

        Needs pins or colliders, otherwise rigid motions make the problem singular.
        Sets ``x`` to the equilibrium and ``v`` to zero.
        """
        inputs = inputs or FrameInputs()
        s = self.settings
        if inputs.forces is not None:
            self.forces = np.asarray(inputs.forces, dtype=np.float64)
        if inputs.pin_targets is not None:
            self.pin_targets = np.asarray(inputs.pin_targets, dtype=np.float64).reshape(-1, 3)
        if inputs.colliders is not None:
            self.colliders = list(inputs.colliders)
        if not self.pinned.size and not self.colliders:
            raise SimulationError(
                "A quasistatic solve needs pinned vertices or colliders: a free body has no "
                "unique equilibrium. Add a pin vertex group."
            )
        f_ext = self.forces + self.mass[:, None] * np.asarray(s.gravity)[None, :]
        # A tiny mass-proportional regularization keeps the first Newton steps well posed
        # for colliders-only support; its effect on the solution is below the tolerance.
        reg = (
            1e-10
            * np.max(self.fem.hessian(self.X, project=True).diagonal())
            / max(self.mass.max(), 1e-300)
        )

        def objective(x, need_hessian):
            if need_hessian:
                e_el, g_el, H = self.fem.energy_gradient_hessian(x, project=True)
            else:
                e_el, g_el, H = self.fem.energy(x), None, None
            e_c, g_c, Hc = self.contact.energy(self.colliders, x, self.kappa, s.contact_offset)
            e = e_el - np.sum(f_ext * x) + e_c
            if not need_hessian:
                return e, None, None
            g = g_el.ravel() - f_ext.ravel() + g_c.ravel()
            return e, g, self._add_diagonal_and_blocks(H, reg * self.mass_dofs, Hc)

        start = self.x.copy() if x0 is None else np.array(x0, dtype=np.float64)
        start[self.pinned] = self.pin_targets
        x, rep = self._newton(objective, start, max_iters=max(s.max_newton_iters, 100))
        if not np.all(np.isfinite(x)):
            raise SimulationError("The quasistatic solve produced non-finite positions.")
        self.x, self.v = x, np.zeros_like(x)
        return rep

    # --------------------------------------------------------------------------- Newton
    def _newton(self, objective, x0, max_iters=None) -> tuple[np.ndarray, StepReport]:
        s = self.settings
        max_iters = max_iters or s.max_newton_iters
        rep = StepReport(substeps=1)
        x = x0
        tol = s.newton_tol * self.length_scale
        free_dofs = np.repeat(self.free, 3)
        for _ in range(max_iters):
            t0 = time.perf_counter()
            e, g, A = objective(x, True)
            rep.timings["derivatives"] += time.perf_counter() - t0
            if not (np.isfinite(e) and np.all(np.isfinite(g))):
                rep.converged, rep.residual, rep.line_search_ok = False, np.inf, False
                return x, rep
            g[~free_dofs] = 0.0
            t0 = time.perf_counter()
            if self._mask is None or not self._mask.matches(A):
                self._mask = _DirichletMask(A, self.fixed_dofs)
            A = self._mask.apply(A)
            p = -self.solver.solve(A, g)
            rep.timings["solve"] += time.perf_counter() - t0
            rep.newton_iters += 1
            step = float(np.max(np.abs(p))) if p.size else 0.0
            if not np.isfinite(step):
                rep.converged, rep.residual, rep.line_search_ok = False, np.inf, False
                return x, rep
            if step <= tol:
                rep.residual = step / self.length_scale
                return x + p.reshape(-1, 3), rep
            t0 = time.perf_counter()
            slope = g @ p
            alpha, accepted = 1.0, False
            for _ in range(40):
                xt = x + alpha * p.reshape(-1, 3)
                et, _, _ = objective(xt, False)
                if np.isfinite(et) and et <= e + 1e-4 * alpha * slope:
                    accepted = True
                    break
                alpha *= 0.5
            rep.timings["line_search"] += time.perf_counter() - t0
            if not accepted:
                # no decrease possible: at round-off level this is convergence, else failure
                rel = abs(slope) / max(abs(e), 1e-300)
                if rel < 1e-12:
                    rep.residual = step / self.length_scale
                    return x, rep
                rep.converged, rep.residual, rep.line_search_ok = (
                    False,
                    step / self.length_scale,
                    False,
                )
                return x, rep
            x = xt
            if alpha * step <= tol:
                rep.residual = alpha * step / self.length_scale
                return x, rep
        rep.converged = False
        rep.residual = step / self.length_scale
        return x, rep

    def _add_diagonal_and_blocks(
        self, A: sp.csr_matrix, diag: np.ndarray, blocks: np.ndarray
    ) -> sp.csr_matrix:
        """``A + diag(diag) + W^T blockdiag(blocks) W`` (``blocks`` (p, 3, 3) on the contact
        points, :meth:`.ContactPoints.add_hessian`), in A's (fixed) pattern: a point's nodes
        share a tet, so its node pairs are in the pattern."""
        asm = self.fem.assembler
        if self._block_slots is None:
            self._block_slots = self.contact.hessian_slots(asm.slots_of)
        A.data[asm.diagonal_slots] += diag
        if blocks.size:
            self.contact.add_hessian(A.data, self._block_slots, blocks)
        return A

    # ------------------------------------------------------------------------- energies
    def kinetic_energy(self) -> float:
        return float(0.5 * np.sum(self.mass[:, None] * self.v**2))

    def potential_energy(self) -> float:
        """Elastic plus gravitational potential energy, joules."""
        g = np.asarray(self.settings.gravity)
        return float(self.fem.energy(self.x) - np.sum(self.mass[:, None] * g[None, :] * self.x))

    def momentum(self) -> np.ndarray:
        return np.sum(self.mass[:, None] * self.v, axis=0)


def _lerp_colliders(c0: list[Collider], c1: list[Collider], w: float) -> list[Collider]:
    if len(c0) != len(c1):
        return c1
    out = []
    for a, b in zip(c0, c1):
        out.append(
            Collider(
                kind=b.kind,
                radius=b.radius,
                half_length=b.half_length,
                transform=(1 - w) * a.transform + w * b.transform,
                friction=b.friction,
            )
        )
    return out
