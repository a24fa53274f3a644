"""Reduced (subspace) implicit Euler: backward Euler in a linear subspace with cubature.

Positions live in a linear subspace ``x = X + U q`` (``U`` is (3n, k), zero on pinned
DOFs). The backward Euler incremental potential of :mod:`core.physics.sim` restricted to it
(Fulton et al. 2019, eq. 2 and eq. 8 with ``u = U q``)::

    q_{n+1} = argmin_q  1/(2h^2) |q - q_n - h qdot_n|^2_{M~} + V~(q) - q . U^T f_ext + C~(q) + D~(q)

with ``M~ = U^T M U`` and the elastic energy, its gradient ``U^T g`` and the exact reduced
Hessian ``U^T H U`` evaluated by cubature (``V~ = sum_e w_e V_e``, eq. 17) on a sub-mesh made
only of the cubature elements, so a step never touches the full mesh. Contact is evaluated
on a fixed sample of surface vertices whose masses carry the whole surface's mass. Newton
with a backtracking line search solves it: exact reduced Hessian (projected only where it is
indefinite), dense k x k Cholesky, Hessians refreshed lazily (see ``_backward_euler``).

It follows :class:`core.simulator.Simulator`; what it shares with the other subspace
runtimes lives in :mod:`.model`. A method whose dynamics are those of a linear subspace
steps with this class or extends it.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.linalg.lapack import dpotrf as _potrf
from scipy.linalg.lapack import dpotrs as _potrs

from ..engine.protocol import FrameInputs, StepReport
from ..physics import fem as _fem
from ..physics.colliders import Collider, ContactPoints
from ..physics.sim import SimSettings
from .model import SubspaceModel, run_frame

#: A Newton step solved with the last factorized Hessian (a chord step) is taken when it is at
#: most this fraction of the previous step; otherwise the Hessian is recomputed first.
CHORD_RATE = 0.1


class SubspaceSimulation(SubspaceModel):
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
    contact : ContactPoints, (vertices (s,), masses (s,)), or None
        Contact sample (the render surface's points for an embedded object); None samples
        the tet surface's vertices with :func:`surface_sample`.
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
        contact: ContactPoints | tuple[np.ndarray, np.ndarray] | None = None,
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

    def positions(self) -> np.ndarray:
        """(n, 3) world positions ``R (X + U q) + c``, metres (``R, c``: the pins' frame)."""
        return self.world(self.X + (self.U @ self.q).reshape(-1, 3))

    # --------------------------------------------------------------------- energy
    def _elastic(self, q: np.ndarray, order: int, project: bool = True):
        """:meth:`elastic_terms`, element Hessians PSD-projected unless ``project`` is False."""
        return self.elastic_terms(q, order, project)

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
