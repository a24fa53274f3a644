"""Full-space implicit simulation of a tet mesh.

Backward Euler is solved as the minimization of the incremental potential (Fulton et al.
2019, eq. 8)::

    x_{n+1} = argmin_x  1/(2h^2) ||x - x_n - h v_n||_M^2 + V(x) - f_ext . x + C(x) + D(x)

with ``V`` the elastic energy (:mod:`.fem`), ``f_ext`` gravity plus external forces,
``C`` the collider penalty (:mod:`.colliders`) and ``D`` the Rayleigh damping potential
``1/(2h) (x - x_n)^T (alpha M + beta K_n) (x - x_n)`` whose gradient is the damping force
``-(alpha M + beta K_n) v``. Newton's method with a backtracking line search minimizes it
(exact Hessians while definite, per-element PSD-projected ones otherwise); pinned vertices
are Dirichlet constraints. The quasistatic mode (active models) minimizes the same potential
without the inertia and damping terms.

Newton stops when the positions of the step are known to ``newton_tol`` times the rest
bounding-box diagonal ``L``, by either of two estimates of their error:

- the unbalanced force: the gradient ``g`` of the incremental potential is the force each
  vertex still lacks, and ``h^2 |g_i| / m_i`` is how far it moves the vertex against its own
  inertia in one step. Where the Newton matrix is at least ``M / h^2`` (elastic and contact
  Hessians positive semi-definite), ``h^2 |g|_{M^-1}`` bounds the error in the mass norm; the
  per-vertex form is exact where inertia dominates and conservative where stiffness helps.
  In units of weight it reads ``|g_i| / (m_i |gravity|) <= newton_tol L / (|gravity| h^2)``:
  0.0035% of each vertex's weight for a 0.6 m object at 24 frames/s with the default
  ``newton_tol = 1e-6``.
  It is checked before a Hessian is built, so a step the predictor already got right (free
  flight) costs one gradient.
- the Newton step: near the solution it is the error itself (quadratic convergence), when it
  was solved accurately enough (:data:`ETA_CONVERGED`).

:class:`StepReport` records ``force_residual``, the largest unbalanced force on a free vertex
at the accepted positions as a fraction of its weight, and bakes store it per frame.

Fast steps (issue 10, measured in ``bench/bake.py``; each is a :class:`SimSettings` field, so
the solver before it stays reachable as :meth:`SimSettings.legacy`):

- ``predictor``: Newton starts from the lower-energy of ``x + h v`` and ``x + h v + h^2 a``,
  ``a`` the last frame's mean acceleration (exact in free flight, wrong right after a bounce).
- ``exact_hessian``: the per-element PSD projection slows Newton to a linear rate wherever
  elements are compressed (9 iterations a frame instead of 5 on a poked rubber bar); the
  exact Hessian converges quadratically and, with the mass term, is usually definite. The
  first iteration (the predictor, where compression is largest) stays projected; after it
  the exact matrix is used while CG finds it definite (:class:`.linsolve.IndefiniteMatrix`),
  the projection for the rest of the step after two indefinite ones.
- ``linear_rtol=None``: CG stops at Eisenstat-Walker tolerances (:data:`FORCING`); a Newton
  step stops Newton only if it was solved to :data:`ETA_CONVERGED`.
- ``reuse_preconditioner``: the AMG hierarchy (or SuperLU factor) of the frame's first Newton
  matrix preconditions its later solves while CG converges (:mod:`.linsolve`).
- ``force_check``: the force test above, before each Hessian.
- ``adaptive_substeps``: a substep that fails is split in two from where it failed; the
  whole frame was redone with twice as many substeps before.

Everything a frame reuses is built within the frame (AMG's random spectral estimates
seeded), so a frame is a function of the state it starts from and its inputs:
:meth:`Simulation.get_state` / :meth:`~Simulation.set_state` continue bit-identically and a
resumed bake equals an uninterrupted one.

If a step fails at the smallest substep (``max_retries`` halvings) with a line search that
found no descent, the state is left as it was and :class:`SimulationError` is raised, so a
bad step never leaks NaNs into a bake.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

# a frame's data live with the simulator protocol; core.sim.FrameInputs (the README's) and
# core.sim.StepReport (plug-ins') are these
from ..engine.protocol import FrameInputs, Markers, StepReport  # noqa: F401
from ..errors import SimulationError
from . import fem as _fem
from .colliders import Collider, ContactPoints, penalty_stiffness
from .linsolve import IndefiniteMatrix, SPDSolver

PREDICTORS = ("extrapolate", "inertia")

#: Eisenstat-Walker forcing terms (choice 2 of Eisenstat & Walker 1996, SIAM J. Sci. Comput.
#: 17(1), eq. 2.6 with its safeguard 2.7): CG's relative residual for Newton iteration k is
#: ``gamma (|g_k| / |g_{k-1}|)^alpha``, clipped to ``[min, max]``; ``first`` for k = 0.
#: ``max`` 0.1 and ``first`` 1e-2: a Newton iteration costs as much as ~10 CG iterations at
#: 20K tets, so a sloppier solve that costs a Newton iteration more is a loss; ``min`` 1e-4:
#: once Newton converges quadratically the ratio asks for 1e-6 and below, while the last step
#: only needs ETA_CONVERGED to be trusted (the floor saves 4% of the CG iterations and 9% of
#: the AMG set-ups of bench/bake.py at 20K tets, with the same Newton iterations).
FORCING = {"gamma": 0.9, "alpha": 2.0, "first": 1e-2, "min": 1e-4, "max": 0.1}
#: The Newton step stops Newton only when it was solved at least this accurately: a looser
#: CG solve underestimates the step in the soft modes (stopping on it at newton_tol 1e-5
#: left trajectory errors of 6.5e-5 of the diagonal against 1.2e-6 with this guard).
ETA_CONVERGED = 1e-3
#: Newton iterations of a step whose exact Newton matrix is indefinite before the step uses
#: projected Hessians only (one indefinite iterate, far from the solution, is common).
INDEFINITE_STRIKES = 2


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
        Accuracy asked of each step's positions, a fraction of the rest bounding-box
        diagonal: Newton stops when the unbalanced force or the Newton step says the
        positions are within it (module docstring).
    max_newton_iters : int
    max_retries : int
        How many times a failing step may be split in two.
    contact_stiffness : float or None
        Penalty stiffness, 1/s^2; None picks the rest rule ``g / (1e-4 L)``
        (:func:`.colliders.penalty_stiffness`): a vertex resting under its own weight sinks
        0.01% of the object size ``L``; the vertices that carry the weight of the whole body
        sink proportionally more (about 0.1% for a slab). It does not size impacts (a point
        arriving at ``v`` sinks about ``v / sqrt(kappa)``): a bake sets it from the fastest
        impact of its scenario (:func:`.bake.impact_speed`), and model files store it.
    contact_offset : float
        Metres; the penalty starts this far outside collider surfaces.
    linear_solver : {"auto", "amg", "superlu"}
        See :mod:`.linsolve`: AMG-preconditioned CG for large meshes, SuperLU for small ones.
    predictor : {"extrapolate", "inertia"}
        Where Newton starts: ``x + h v + h^2 a`` with ``a`` the mean acceleration of the
        previous frame (exact in free flight), or ``x + h v`` (the solver before issue 10).
    linear_rtol : float or None
        Relative residual at which CG stops; None chooses it per Newton iteration
        (Eisenstat-Walker, see :data:`FORCING`). The solver before issue 10: 1e-4.
    reuse_preconditioner : bool
        Keep the AMG hierarchy (or factorization) of the frame's first Newton matrix for its
        later solves while CG converges; False builds one per Newton iteration.
    force_check : bool
        Stop Newton on the unbalanced force too (checked before each Hessian); False stops
        on the Newton step alone.
    adaptive_substeps : bool
        Split only the substep that failed (and keep that size for the rest of the frame);
        False redoes the whole frame with twice the substeps.
    exact_hessian : bool
        Newton matrices with the exact elastic Hessian after the first iteration while CG
        finds them positive definite (the mass term usually makes them so), the per-element
        PSD projection for the rest of the step once they are not; False projects always.
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
    predictor: str = "extrapolate"
    linear_rtol: float | None = None
    reuse_preconditioner: bool = True
    force_check: bool = True
    adaptive_substeps: bool = True
    exact_hessian: bool = True

    @classmethod
    def legacy(cls, **kwargs) -> SimSettings:
        """The full-space solver before issue 10 (benchmarks and regression tests compare
        against it): inertial predictor, CG to 1e-4, an AMG hierarchy per Newton iteration,
        the Newton step as the only stopping test, whole-frame retries."""
        base = {
            "predictor": "inertia",
            "linear_rtol": 1e-4,
            "reuse_preconditioner": False,
            "force_check": False,
            "adaptive_substeps": False,
            "exact_hessian": False,
        }
        return cls(**{**base, **kwargs})

    def to_dict(self) -> dict:
        """The time-step and contact settings a model file stores (JSON-able)."""
        d = {
            "dt": float(self.dt),
            "substeps": int(self.substeps),
            "gravity": [float(g) for g in self.gravity],
            "damping_alpha": float(self.damping_alpha),
            "damping_beta": float(self.damping_beta),
            "newton_tol": float(self.newton_tol),
            "max_newton_iters": int(self.max_newton_iters),
        }
        # contact as the bakes had it; absent (model files before issue 10, or bakes with the
        # rest rule) the runtime takes the rest rule from the model's own size, as they did
        if self.contact_stiffness is not None:
            d["contact_stiffness"] = float(self.contact_stiffness)
        if self.contact_offset:
            d["contact_offset"] = float(self.contact_offset)
        return d

    def validate(self) -> None:
        if not (self.dt > 0 and np.isfinite(self.dt)):
            raise SimulationError(f"Time step must be positive, got dt={self.dt}.")
        if int(self.substeps) < 1:
            raise SimulationError(f"Substeps must be at least 1, got {self.substeps}.")
        if self.damping_alpha < 0 or self.damping_beta < 0:
            raise SimulationError("Rayleigh damping coefficients must be non-negative.")
        if not (self.newton_tol > 0):
            raise SimulationError("Newton tolerance must be positive.")
        if self.predictor not in PREDICTORS:
            raise SimulationError(
                f"Unknown predictor {self.predictor!r}; use one of {', '.join(PREDICTORS)}."
            )
        if self.linear_rtol is not None and not (0 < self.linear_rtol < 1):
            raise SimulationError(
                f"linear_rtol must lie in (0, 1) or be None, got {self.linear_rtol}."
            )


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
    key = np.sort(faces, axis=1).astype(np.int64)
    n = int(key.max(initial=0)) + 1
    # one int64 per face (below 2^21 nodes): a 1-D unique, 4x faster than one over rows
    # (0.27 -> 0.07 s at 20K tets), which a LiCROM mesh swap waits for
    if n < 2**21:
        key = (key[:, 0] * n + key[:, 1]) * n + key[:, 2]
        _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    else:
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
            float(self.settings.contact_stiffness)
            if self.settings.contact_stiffness is not None
            else penalty_stiffness(self.length_scale, g)
        )
        self._mask: _DirichletMask | None = None
        self.solver = SPDSolver(
            self.X,
            self.settings.linear_solver,
            rtol=self.settings.linear_rtol or 1e-4,
            lean=self.settings.reuse_preconditioner,
        )
        if self.solver.B is not None:
            self.solver.B[self.fixed_dofs] = 0.0  # pinned DOFs are identity rows, not free motion
        self._block_slots: np.ndarray | None = None
        # weight of each vertex for the force test; 9.81 without gravity (as kappa)
        self._weight = self.mass * g
        self.reset()

    # ----------------------------------------------------------------------------- state
    def reset(self, x: np.ndarray | None = None, v: np.ndarray | None = None) -> None:
        """Back to rest (or to the given positions/velocities), frame 0."""
        self.x = self.X.copy() if x is None else np.array(x, dtype=np.float64)
        self.v = np.zeros_like(self.x) if v is None else np.array(v, dtype=np.float64)
        self.v_prev = self.v.copy()  # velocity a frame ago: the predictor's acceleration
        self.frame = 0
        self.forces = np.zeros_like(self.x)
        self.pin_targets = self.x[self.pinned].copy()

    def get_state(self) -> dict:
        """A copy of everything :meth:`set_state` needs to continue exactly from here."""
        return {
            "x": self.x.copy(),
            "v": self.v.copy(),
            "v_prev": self.v_prev.copy(),
            "frame": self.frame,
            "forces": self.forces.copy(),
            "pin_targets": self.pin_targets.copy(),
            "colliders": [c.to_dict() for c in self.colliders],
        }

    def set_state(self, state: dict) -> None:
        self.x = np.array(state["x"], dtype=np.float64)
        self.v = np.array(state["v"], dtype=np.float64)
        # without it (a state saved before issue 10) the first predictor is x + h v
        self.v_prev = np.array(state.get("v_prev", state["v"]), dtype=np.float64)
        self.frame = int(state["frame"])
        self.forces = np.array(state["forces"], dtype=np.float64)
        self.pin_targets = np.array(state["pin_targets"], dtype=np.float64)
        self.colliders = [Collider(**c) for c in state["colliders"]]

    # ------------------------------------------------------------------------- stepping
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame (``settings.substeps`` backward Euler steps).

        Pin targets, forces and collider transforms are interpolated linearly from the
        previous frame's values to ``inputs`` across the substeps (:func:`lerp_colliders`;
        the subspace runtimes interpolate them the same way).

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
        # the mean acceleration of the last frame, for every substep of this one: a function
        # of the frame-level state, which a bake stores (v_prev is its previous velocity)
        accel = (self.v - self.v_prev) / s.dt if s.predictor == "extrapolate" else None
        self.solver.forget()  # nothing reused crosses a frame boundary
        try:
            if s.adaptive_substeps:
                self._advance_adaptive(s.dt, f1, p1, c1, accel, report)
            else:
                self._advance(s.dt, f1, p1, c1, accel, depth=0, report=report)
        except SimulationError:
            self.set_state(saved)
            raise
        self.v_prev = saved["v"]
        self.forces, self.pin_targets, self.colliders = f1.copy(), p1.copy(), c1
        self.frame += 1
        report.wall_time = time.perf_counter() - t0
        return report

    def _substep(self, h, w, f1, p1, c1, accel, last_try) -> StepReport:
        """One backward Euler step of ``h`` s to the fraction ``w`` of the frame."""
        f0, p0, c0 = self.forces, self.pin_targets, self.colliders
        return self._backward_euler(
            h,
            (1 - w) * f0 + w * f1,
            (1 - w) * p0 + w * p1,
            lerp_colliders(c0, c1, w),
            accel,
            accept_unconverged=last_try,
        )

    def _diverged(self, h) -> SimulationError:
        return SimulationError(
            f"Frame {self.frame + 1} diverged even with the time step cut to {h:.3g} s: "
            "lower dt or raise substeps, soften pokes or colliders, or check the material "
            "(very stiff or nearly incompressible materials need smaller steps)."
        )

    def _advance(self, dt, f1, p1, c1, accel, depth, report) -> None:
        """Integrate one frame in ``substeps * 2**depth`` backward Euler steps; a failed
        substep redoes the whole frame with twice as many (the solver before issue 10)."""
        n_sub = int(self.settings.substeps) * (2**depth)
        last_try = depth >= self.settings.max_retries
        x_start, v_start = self.x.copy(), self.v.copy()
        h = dt / n_sub
        for k in range(n_sub):
            sub = self._substep(h, (k + 1) / n_sub, f1, p1, c1, accel, last_try)
            report.merge(sub)
            if sub.converged:
                continue
            if last_try and sub.line_search_ok:
                continue  # finite and descending, just not to tolerance: kept and flagged
            if last_try:
                raise self._diverged(h)
            self.x, self.v = x_start, v_start
            report.retries += 1
            report.converged = True
            report.line_search_ok = True
            self._advance(dt, f1, p1, c1, accel, depth + 1, report)
            return

    def _advance_adaptive(self, dt, f1, p1, c1, accel, report) -> None:
        """Integrate one frame in substeps that are halved from where a step fails.

        The frame is ``substeps * 2**max_retries`` ticks of the smallest substep; a substep
        spans ``2**level`` ticks. A failed substep is retried at half its size from where it
        started, and the rest of the frame keeps that size: the substeps already taken stand
        (the solver before issue 10 redid the whole frame with twice as many), and the next
        frame starts again at the nominal ``dt / substeps``. Growing back within the frame was
        measured and dropped: on the issue's 2K-tet jelly pokes a frame hard at the nominal
        size is hard throughout, and each failed regrowth burned a whole Newton solve (28% more
        iterations than whole-frame retries). At the smallest size a step that is finite and
        descending but short of the tolerance is kept and flagged, as in :meth:`_advance`.
        """
        s = self.settings
        top = int(s.max_retries)
        ticks = int(s.substeps) << top
        size, pos = 1 << top, 0
        converged, line_search_ok = True, True
        while pos < ticks:
            h = dt * size / ticks
            last_try = size == 1
            sub = self._substep(h, (pos + size) / ticks, f1, p1, c1, accel, last_try)
            # this substep's flags are kept only if the substep is
            ok_c, ok_ls = report.converged, report.line_search_ok
            report.merge(sub)
            report.converged, report.line_search_ok = ok_c, ok_ls
            if sub.converged or (last_try and sub.line_search_ok):
                converged &= sub.converged
                line_search_ok &= sub.line_search_ok
                pos += size
                continue
            if last_try:
                raise self._diverged(h)
            size //= 2
            report.retries += 1
        report.converged, report.line_search_ok = converged, line_search_ok

    def _backward_euler(
        self, h, forces, pin_targets, colliders, accel=None, accept_unconverged=False
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

        def objective(x, order, project=True):
            """Incremental potential (J); ``order`` 1 adds its gradient (3n,) (N), 2 the
            Newton matrix too (its elastic Hessian PSD-projected per element with
            ``project``)."""
            dx = (x - x_tilde).ravel()
            dn = (x - x_n).ravel()
            if order >= 2:
                e_el, g_el, H = self.fem.energy_gradient_hessian(x, project=project)
            elif order == 1:
                (e_el, g_el), H = self.fem.energy_gradient(x), None
            else:
                e_el, g_el, H = self.fem.energy(x), None, None
            e_c, g_c, Hc = self.contact.energy(colliders, x, self.kappa, s.contact_offset)
            e = 0.5 / h**2 * dx @ (m3 * dx) + e_el - np.sum(f_ext * x) + e_c
            e += 0.5 * alpha / h * dn @ (m3 * dn)
            if K_damp is not None:
                e += 0.5 * s.damping_beta / h * dn @ (K_damp @ dn)
            if order < 1:
                return e, None, None
            g = (m3 * dx) / h**2 + g_el.ravel() - f_ext.ravel() + g_c.ravel()
            g += alpha / h * m3 * dn
            if K_damp is not None:
                g += s.damping_beta / h * (K_damp @ dn)
            if order < 2:
                return e, g, None
            A = H
            if K_damp is not None:
                A.data += (s.damping_beta / h) * K_damp.data  # same assembler, same pattern
            diag = m3 * (1.0 / h**2 + alpha / h)
            A = self._add_diagonal_and_blocks(A, diag, Hc)
            return e, g, A

        x0 = x_tilde.copy()
        x0[self.pinned] = pin_targets
        if accel is not None:
            # the extrapolation is exact in free flight but overshoots after an impact (the
            # last frame's acceleration was the bounce): start from the lower potential
            x1 = x_tilde + h * h * accel
            x1[self.pinned] = pin_targets
            if objective(x1, 0)[0] < objective(x0, 0)[0]:
                x0 = x1
        x, rep = self._newton(objective, x0, h=h)
        if rep.converged or (accept_unconverged and rep.line_search_ok and np.all(np.isfinite(x))):
            self.v = (x - x_n) / h
            self.x = x
        return rep

    def solve_quasistatic(
        self, inputs: FrameInputs | None = None, x0: np.ndarray | None = None
    ) -> StepReport:
        """Minimize ``V(x) - f . x + C(x)`` (no inertia): the static equilibrium.

        Needs pins or colliders, otherwise rigid motions make the problem singular.
        Sets ``x`` to the equilibrium and ``v`` to zero. Newton stops on its step alone
        (the force test needs the inertia of a time step).
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

        def objective(x, order, project=True):
            if order >= 2:
                e_el, g_el, H = self.fem.energy_gradient_hessian(x, project=project)
            elif order == 1:
                (e_el, g_el), H = self.fem.energy_gradient(x), None
            else:
                e_el, g_el, H = self.fem.energy(x), None, None
            e_c, g_c, Hc = self.contact.energy(self.colliders, x, self.kappa, s.contact_offset)
            e = e_el - np.sum(f_ext * x) + e_c
            if order < 1:
                return e, None, None
            g = g_el.ravel() - f_ext.ravel() + g_c.ravel()
            if order < 2:
                return e, g, None
            return e, g, self._add_diagonal_and_blocks(H, reg * self.mass_dofs, Hc)

        start = self.x.copy() if x0 is None else np.array(x0, dtype=np.float64)
        start[self.pinned] = self.pin_targets
        self.solver.forget()
        x, rep = self._newton(objective, start, max_iters=max(s.max_newton_iters, 100))
        if not np.all(np.isfinite(x)):
            raise SimulationError("The quasistatic solve produced non-finite positions.")
        self.x, self.v = x, np.zeros_like(x)
        return rep

    # --------------------------------------------------------------------------- Newton
    def _newton(self, objective, x0, max_iters=None, h=None) -> tuple[np.ndarray, StepReport]:
        """Minimize ``objective`` from ``x0`` (n, 3) by Newton's method with Armijo
        backtracking; ``h`` (s) enables the force test (module docstring).

        ``objective(x, order, project)`` returns the energy, with ``order`` >= 1 the gradient
        (3n,) and with ``order`` 2 the Newton matrix. With the force test the gradient is
        evaluated at every iterate (an eighth of a Hessian's cost), which also gives the
        Eisenstat-Walker ratio and the reported residual.
        """
        s = self.settings
        max_iters = max_iters or s.max_newton_iters
        rep = StepReport(substeps=1)
        L = self.length_scale
        tol = s.newton_tol * L
        free_dofs = np.repeat(self.free, 3)
        force_test = s.force_check and h is not None
        reuse = s.reuse_preconditioner
        eta = FORCING["first"] if s.linear_rtol is None else s.linear_rtol
        stats0 = dict(self.solver.stats)
        x, e, g = x0, None, None
        step = np.inf
        project = not s.exact_hessian
        strikes = 0
        g_norm_prev = None

        def finish(x, g, converged=True, ok=True):
            """Record the residual at ``x`` (its gradient ``g``, evaluated if None)."""
            if g is None and np.all(np.isfinite(x)):
                g = objective(x, 1)[1]
            if g is not None:
                g[~free_dofs] = 0.0
            rep.converged, rep.line_search_ok = converged, ok
            rep.residual = step / L if np.isfinite(step) else np.inf
            rep.force_residual = self._force_residual(g) if g is not None else np.inf
            st = self.solver.stats
            rep.cg_iterations = st["cg_iterations"] - stats0["cg_iterations"]
            rep.setups = st["setups"] - stats0["setups"]
            rep.timings["setup"] = st["setup_s"] - stats0["setup_s"]
            rep.timings["cg"] = st["cg_s"] - stats0["cg_s"]
            return x, rep

        def bad(values):
            return not np.all(np.isfinite(values))

        def newton_matrix(x, project):
            """Energy, gradient (zero on pinned DOFs) and Newton matrix at ``x``."""
            t0 = time.perf_counter()
            e, g, A = objective(x, 2, project)
            rep.timings["derivatives"] += time.perf_counter() - t0
            g[~free_dofs] = 0.0
            if self._mask is None or not self._mask.matches(A):
                self._mask = _DirichletMask(A, self.fixed_dofs)
            return e, g, self._mask.apply(A)

        def direction(A, g, check):
            """The Newton direction; None when ``A`` (an exact matrix, ``check``) is not
            definite or gives no descent."""
            t0 = time.perf_counter()
            try:
                p = -self.solver.solve(A, g, rtol=eta, reuse=reuse, maybe_indefinite=check)
            except IndefiniteMatrix:
                p = None
            rep.timings["solve"] += time.perf_counter() - t0
            if p is not None and not np.all(np.isfinite(p)):
                return p if not check else None
            if p is not None and check and not g @ p < 0:
                p = None
            return p

        def forcing(g):
            nonlocal eta, g_norm_prev
            if s.linear_rtol is None:  # Eisenstat-Walker: once per iterate
                g_norm = float(np.linalg.norm(g))
                if g_norm_prev is not None:
                    eta = _forcing(eta, g_norm / max(g_norm_prev, 1e-300))
                g_norm_prev = g_norm

        if force_test:
            t0 = time.perf_counter()
            e, g, _ = objective(x, 1)
            rep.timings["derivatives"] += time.perf_counter() - t0
        it = 0
        while it < max_iters:
            eta_set = False
            if g is not None:  # known at x: from the start or the line search
                if not np.isfinite(e) or bad(g):
                    step = np.inf
                    return finish(x, None, False, False)
                g[~free_dofs] = 0.0
                # the inertial displacement of the unbalanced force (module docstring)
                if force_test and h * h * self._max_accel(g) <= tol:
                    step = 0.0 if not np.isfinite(step) else step
                    return finish(x, g)
                forcing(g)
                eta_set = True
            # the first iterate, the predictor, is where exact matrices are indefinite (resting
            # contact compresses the bottom): projected there, so the frame's preconditioner
            # is built on a definite matrix instead of being thrown away with the exact one
            first = project or it == 0
            e, g, A = newton_matrix(x, first)
            if not np.isfinite(e) or bad(g):
                step = np.inf
                return finish(x, None, False, False)
            if not eta_set:
                forcing(g)
            p = direction(A, g, not first)
            if p is None and not project:
                # the exact matrix is indefinite here (often only far from the solution: tried
                # again next iteration), projected for the rest of the step after
                # INDEFINITE_STRIKES such iterations
                strikes += 1
                project = strikes >= INDEFINITE_STRIKES
                e, g, A = newton_matrix(x, True)
                p = direction(A, g, False)
            if p is None or bad(p):
                step = np.inf
                return finish(x, None, False, False)
            it += 1
            rep.newton_iters += 1
            step = float(np.max(np.abs(p))) if p.size else 0.0
            if step <= tol and eta <= ETA_CONVERGED:
                x = x + p.reshape(-1, 3)
                return finish(x, None)
            if step <= tol:
                # a loose solve underestimates the step in the soft modes: take it and check
                # again with the tighter solve the drop in the gradient will ask for
                x = x + p.reshape(-1, 3)
                e, g, _ = objective(x, 1)
                continue
            t0 = time.perf_counter()
            slope = g @ p
            alpha, accepted, g_t = 1.0, False, None
            for _ in range(40):
                xt = x + alpha * p.reshape(-1, 3)
                # with the force test the full step, nearly always accepted, brings its
                # gradient: the next iterate's
                et, g_t, _ = objective(xt, 1 if (force_test and alpha == 1.0) else 0)
                if np.isfinite(et) and et <= e + 1e-4 * alpha * slope:
                    accepted = True
                    break
                alpha *= 0.5
            rep.timings["line_search"] += time.perf_counter() - t0
            if not accepted and not project:
                project, g = True, None  # again from here, projected
                continue
            if not accepted:
                # no decrease possible: at round-off level this is convergence, else failure
                rel = abs(slope) / max(abs(e), 1e-300)
                return finish(x, None, rel < 1e-12, rel < 1e-12)
            x = xt
            if force_test and g_t is None:
                g_t = objective(x, 1)[1]
            e, g = et, g_t
            if alpha * step <= tol:
                # backtracked to a step below the tolerance: round-off decides the energy
                step = alpha * step
                return finish(x, g)
        return finish(x, g, False, True)

    def _max_accel(self, g: np.ndarray) -> float:
        """Largest ``|g_i| / m_i`` over free vertices, m/s^2 (``g`` (3n,), zero on pins)."""
        a = np.linalg.norm(g.reshape(-1, 3), axis=1)[self.free] / self.mass[self.free]
        return float(a.max()) if a.size else 0.0

    def _force_residual(self, g: np.ndarray) -> float:
        """Largest unbalanced force on a free vertex over its weight (``g`` (3n,))."""
        if not np.all(np.isfinite(g)):
            return np.inf
        f = np.linalg.norm(g.reshape(-1, 3), axis=1)[self.free] / self._weight[self.free]
        return float(f.max()) if f.size else 0.0

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


def _forcing(eta_prev: float, ratio: float) -> float:
    """Eisenstat-Walker forcing term from the previous one and ``|g_k| / |g_{k-1}|``."""
    f = FORCING
    eta = f["gamma"] * ratio ** f["alpha"]
    safeguard = f["gamma"] * eta_prev ** f["alpha"]
    if safeguard > 0.1:  # eq. 2.7: do not drop the tolerance abruptly while it is loose
        eta = max(eta, safeguard)
    return float(min(max(eta, f["min"]), f["max"]))


def lerp_colliders(c0: list[Collider], c1: list[Collider], w: float) -> list[Collider]:
    """The colliders a fraction ``w`` of the way from ``c0`` to ``c1``: transforms
    interpolated linearly, entry by entry (what every integrator sees between frames).
    Lists of different lengths (a collider appeared or vanished) give ``c1``."""
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
