"""The autoencoder runtime: implicit Euler in the latent space by preconditioned L-BFGS
(:mod:`core.methods.autoencoder`, whose docstring states the objective)."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import scipy.linalg as sla

from ...engine.protocol import FrameInputs, StepReport
from ...errors import SimulationError
from ...physics import fem as _fem
from ...physics.colliders import Collider
from ...physics.sim import SimSettings
from ...reduced.model import (
    SubspaceModel,
    run_frame,
)
from ...reduced.nnet import MLP
from ...reduced.pose import local_colliders

DEFAULT_LBFGS_WINDOW = 8
#: eps of the convergence test |dE/dz| < eps max(|z|, 1) (J per latent unit). Fulton uses 1e-8.
#: Measured on a clamped 0.4 m beam (k = 10, r = 6 ELU decoder, gravity + pokes, 24 frames),
#: L-BFGS iterations per frame and largest vertex distance from the eps = 1e-12 solution:
#: 1e-4: 4.0, 6.5e-8 m; 1e-6: 5.2, 6.0e-10 m; 1e-8: 6.4, 6.3e-12 m; 1e-10: 7.6, 6e-14 m.
DEFAULT_LBFGS_TOL = 1e-6
DEFAULT_MAX_ITERS = 100
_ARMIJO = 1e-4
_HZ_DELTA = 0.1
#: relative rounding noise of E: measured std 2.3e-16, range 1.3e-15 of the sum of the terms'
#: magnitudes on the 8x2x2 beam (192 tets); 1e-14 leaves a margin for larger meshes.
_NOISE = 1e-14
_MAX_BACKTRACKS = 40
#: An accepted step that moves z by less than this fraction of max(|z|, 1) (a few hundred
#: ulps) made no progress E can measure: the step has converged to rounding. Without this
#: the line search kept accepting ~1e-9 steps by rounding luck and ran to max_iters
#: (~3000 objective evaluations, 0.7 s for one frame, on the swung arm of bench/autoencoder.py).
_STALL = 1e-13
#: With colliders, the preconditioner is rebuilt at the current iterate every this many
#: L-BFGS iterations (contacts made during a step change the curvature).
_REFRESH = 10


class AutoencoderSimulation(SubspaceModel):
    """Implicit Euler in an autoencoder's latent space, with cubature (Fulton 2019).

    Follows :class:`.reduced.Simulator`. ``StepReport.newton_iters`` counts **L-BFGS
    iterations** (line searches) for this solver, summed over substeps.

    Parameters
    ----------
    X : (n, 3) float array
        Rest positions, metres (world space).
    T : (m, 4) int array
    material : fem.Material
    U : (3n, k) float array
        PCA outer layer; rows of pinned DOFs must be zero.
    decoder : MLP
        ``phi``: latent (r,) -> PCA coordinates (k,).
    settings : SimSettings
    pinned : (p,) int array
        Pinned vertices: the basis keeps them at rest; ``FrameInputs.pin_targets`` moves
        them rigidly, the whole simulation following in their frame (:mod:`.frame`).
    cubature : (elements (c,), weights (c,)) or None
        None uses every element with weight 1 (exact, for tests and small meshes).
    contact : (vertices (s,), masses (s,)) or None
        Contact sample; None samples the surface with :func:`.reduced.surface_sample`.
    colliders : list of Collider
    encoder : MLP or None
        PCA coordinates (k,) -> latent (r,); the initial guess of :meth:`encode_pose`.
    lbfgs_window : int
        Number of (s, y) pairs L-BFGS keeps (8 in Fulton 2019).
    lbfgs_tol : float
        eps of the convergence test ``|dE/dz| < eps max(|z|, 1)``, in the units of E
        (joules) per latent unit.
    max_iters : int
        L-BFGS iterations per substep before the step is accepted as not converged.
    preconditioner : bool
        Use eq. (15) as the initial inverse Hessian (False: the scaled identity of plain
        L-BFGS, for comparison).

    Attributes
    ----------
    z : (r,) latent state; q : (k,) ``phi(z)``; qdot : (k,) PCA velocity, sqrt(kg) m/s
    M_red : (k, k) ``U^T M U``; K0_red : (k, k) reduced rest stiffness by cubature, N/m per
        unit q^2
    z_rest : (r,) the latent closest to the rest pose (where :meth:`reset` starts)
    evaluations : int
        Objective evaluations so far (each is one decoder forward + VJP and one cubature
        energy/gradient): a cost measure that does not depend on the machine.
    """

    def __init__(
        self,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        U: np.ndarray,
        decoder: MLP,
        settings: SimSettings | None = None,
        *,
        pinned=(),
        cubature: tuple[np.ndarray, np.ndarray] | None = None,
        contact: tuple[np.ndarray, np.ndarray] | None = None,
        colliders: list[Collider] | None = None,
        encoder: MLP | None = None,
        lbfgs_window: int = DEFAULT_LBFGS_WINDOW,
        lbfgs_tol: float = DEFAULT_LBFGS_TOL,
        max_iters: int = DEFAULT_MAX_ITERS,
        preconditioner: bool = True,
    ) -> None:
        self._setup(X, T, material, U, settings, pinned, cubature, contact, colliders)
        k = self.k
        if decoder.out_dim != k:
            raise SimulationError(
                f"The decoder outputs {decoder.out_dim} PCA coordinates but the basis has {k} "
                "columns; the model file is inconsistent: retrain the model."
            )
        if encoder is not None and (encoder.in_dim != k or encoder.out_dim != decoder.in_dim):
            raise SimulationError(
                f"The encoder maps {encoder.in_dim} -> {encoder.out_dim} but the decoder maps "
                f"{decoder.in_dim} -> {k}; the model file is inconsistent: retrain the model."
            )
        self.decoder, self.encoder = decoder, encoder
        self.r = decoder.in_dim
        if int(lbfgs_window) < 1 or not (lbfgs_tol > 0) or int(max_iters) < 1:
            raise SimulationError(
                "L-BFGS needs a window of at least 1, a positive tolerance and at least one "
                f"iteration (got window={lbfgs_window}, tol={lbfgs_tol}, max_iters={max_iters})."
            )
        self.lbfgs_window, self.lbfgs_tol = int(lbfgs_window), float(lbfgs_tol)
        self.max_iters, self.use_preconditioner = int(max_iters), bool(preconditioner)
        self.K0_red = self._elastic_hessian(np.zeros(k))  # K~_0 of eq. (15), by cubature
        self.evaluations = 0
        self.z_rest = self.encode_q(np.zeros(k))
        self.reset()

    # ---------------------------------------------------------------------- state
    def reset(
        self,
        z: np.ndarray | None = None,
        *,
        q: np.ndarray | None = None,
        qdot: np.ndarray | None = None,
        x: np.ndarray | None = None,
        v: np.ndarray | None = None,
    ) -> None:
        """Start at a pose (default: rest), with a velocity (default: zero).

        Give at most one of ``z`` (latent), ``q`` (PCA coordinates) or ``x`` ((n, 3)
        positions, metres); ``q`` and ``x`` are encoded with :meth:`encode_q` /
        :meth:`encode_pose`, so the state starts on the manifold at ``phi(z)``. The velocity is
        ``qdot`` (PCA coordinates per second) or ``v`` ((n, 3) m/s, projected as
        ``U^T M v``).
        """
        if sum(a is not None for a in (z, q, x)) > 1:
            raise SimulationError("Give the initial pose once: as z, as q or as x.")
        if qdot is not None and v is not None:
            raise SimulationError("Give the initial velocity once: as qdot or as v.")
        if x is not None:
            z = self.encode_pose(x)
        elif q is not None:
            z = self.encode_q(q)
        self.z = self.z_rest.copy() if z is None else np.array(z, dtype=float).reshape(self.r)
        self.q = self.decoder.forward(self.z)
        if v is not None:
            qdot = self._project(np.asarray(v, dtype=float))
        self.qdot = np.zeros(self.k) if qdot is None else np.array(qdot, dtype=float)
        if self.qdot.shape != (self.k,):
            raise SimulationError(f"qdot has shape {self.qdot.shape}; expected ({self.k},).")
        self.frame = 0
        self.f_ext = np.zeros(self.k)
        self._reset_frame()

    def get_state(self) -> dict:
        return {"z": self.z.copy(), **super().get_state()}

    def set_state(self, state: dict) -> None:
        z = np.array(state["z"], dtype=float)
        if "q" not in state:  # states saved with the latent alone
            state = {**state, "q": self.decoder.forward(z)}
        super().set_state(state)
        self.z = z

    def positions(self) -> np.ndarray:
        """(n, 3) world positions ``R psi(z) + c = R (X + U phi(z)) + c``, metres (``R, c``:
        the pins' frame, the identity unless pins moved)."""
        return self.world(self.X + (self.U @ self.q).reshape(-1, 3))

    # ------------------------------------------------------------------- encoding
    def _project(self, d: np.ndarray) -> np.ndarray:
        """PCA coordinates ``M~^{-1} U^T M d`` of per-vertex vectors (n, 3) (eq. 6)."""
        if d.shape != self.X.shape:
            raise SimulationError(f"Expected an ({len(self.X)}, 3) array, got {d.shape}.")
        m3 = np.repeat(self.mass, 3)
        return np.linalg.solve(self.M_red, self.U.T @ (m3 * d.ravel()))

    def encode_pose(self, x: np.ndarray, refine: bool = True) -> np.ndarray:
        """The latent of positions ``x`` (n, 3), metres: :meth:`encode_q` of ``U^T M (x - X)``.

        (With the M-orthonormal PCA basis ``M~ = I``; a general basis is solved with ``M~``.)
        """
        return self.encode_q(self._project(np.asarray(x, dtype=float) - self.X), refine)

    def closest_q(self, y: np.ndarray) -> np.ndarray:
        """PCA coordinates of the manifold's closest shape to ``y`` (n, 3) in the pins' frame:
        the refined encoding, decoded."""
        return self.decoder.forward(self.encode_pose(y))

    def encode_q(self, q: np.ndarray, refine: bool = True) -> np.ndarray:
        """The latent ``z`` (r,) whose decoding best matches PCA coordinates ``q`` (k,).

        The encoder's output (Fulton 2019, sec. 4), polished with ``refine`` by damped
        Gauss-Newton on ``|phi(z) - q|^2_{M~}`` so the start state is the manifold's closest
        point rather than the encoder's approximation of it. Without an encoder the fit
        starts at ``z_rest`` (or 0).
        """
        q = np.asarray(q, dtype=float).reshape(self.k)
        if self.encoder is not None:
            z = self.encoder.forward(q)
        else:
            z = getattr(self, "z_rest", np.zeros(self.r)).copy()
        return self._fit(q, z) if (refine or self.encoder is None) else z

    def _fit(self, q: np.ndarray, z: np.ndarray, iters: int = 30) -> np.ndarray:
        """Levenberg-Marquardt on ``1/2 |phi(z) - q|^2_{M~}`` from ``z`` (r JVPs per iteration)."""
        Mr = self.M_red

        def cost(zz):
            d = self.decoder.forward(zz) - q
            return 0.5 * d @ Mr @ d, d

        c, d = cost(z)
        lam = 1e-8
        for _ in range(iters):
            J = self.decoder.jacobian(z)  # (k, r)
            A = J.T @ Mr @ J
            b = J.T @ (Mr @ d)
            if c <= 0 or not np.any(b):
                break
            improved = False
            for _ in range(20):
                Ad = A + lam * (np.diag(np.diag(A)) + 1e-12 * np.trace(A) * np.eye(self.r))
                try:
                    dz = -np.linalg.solve(Ad, b)
                except np.linalg.LinAlgError:
                    lam *= 10
                    continue
                ct, dt = cost(z + dz)
                if np.isfinite(ct) and ct < c:
                    improved = True
                    break
                lam *= 10
            if not improved:
                break
            rel = (c - ct) / max(c, 1e-300)
            z, c, d = z + dz, ct, dt
            lam = max(lam / 10, 1e-12)
            if rel < 1e-12 or c == 0:
                break
        return z

    # --------------------------------------------------------------------- energy
    def _elastic(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Cubature elastic energy (J) and its q-gradient ``U^T dV/dx`` (eq. 17)."""
        x_sub = self.sub_fem.X + self.U_sub @ q
        e, g = self.sub_fem.energy_gradient(x_sub, weights=self.weights)
        return e, self.U_sub.reshape(-1, self.k).T @ g.ravel()

    def _elastic_hessian(self, q: np.ndarray) -> np.ndarray:
        """``sum_e w_e U_e^T H_e U_e`` (k, k) with PSD-projected element Hessians."""
        x_sub = self.sub_fem.X + self.U_sub @ q
        He = self.sub_fem.element_hessians(x_sub, project=True)
        HU = (He * self.weights[:, None, None]) @ self.U_elem
        return self.U_elem.reshape(-1, self.k).T @ HU.reshape(-1, self.k)

    def time_step_objective(
        self,
        h: float | None = None,
        f_ext: np.ndarray | None = None,
        colliders: list[Collider] | None = None,
    ):
        """The objective ``E(z)`` of one step of length ``h`` from the current state.

        Parameters
        ----------
        h : seconds (default: ``dt / substeps``)
        f_ext : (k,) reduced external force ``U^T f`` (default: the current one), N
        colliders : default: the current ones

        Returns
        -------
        fun : callable ``z (r,) -> (E (J), dE/dz (r,), q (k,))``, eq. (12) and eq. (13)
        """
        s = self.settings
        h = s.dt / int(s.substeps) if h is None else float(h)
        f_ext = self.f_ext if f_ext is None else np.asarray(f_ext, dtype=float)
        cols = self.colliders if colliders is None else list(colliders)
        fun = self._objective(h, f_ext, cols)
        return lambda z: fun(np.asarray(z, dtype=float))[:3]

    def _objective(self, h: float, f_ext: np.ndarray, cols, pose=None):
        """``z -> (E, dE/dz, q, |E|-scale)`` of a step into the pin frame ``pose`` (None: it
        stays); the scale (sum of the terms' magnitudes, J) sizes the rounding noise of E
        for the line search."""
        s = self.settings
        q_n = self.q
        # q~ = 2 q_n - q_{n-1} = q_n + h qdot_n unless the pin frame moves (then .frame's)
        q_tilde, q_damp, f_grav, cols = self.step_terms(h, pose, cols)
        f = f_ext + f_grav
        Mr = self.M_red
        D = s.damping_alpha * Mr  # Rayleigh damping, frozen over the step
        # mass damping pulls towards q_d: the linear term (q - q_n) . d_off of
        # alpha/(2h) |q - q_d|^2_M~ expanded about q_n (zero unless the pin frame moves)
        d_off = np.zeros(self.k) if q_damp is q_n else D @ (q_n - q_damp)
        if s.damping_beta > 0:
            D = D + s.damping_beta * self._elastic_hessian(q_n)
        decoder = self.decoder

        def fun(z: np.ndarray):
            self.evaluations += 1
            q = decoder.forward(z)  # eq. (10)
            dq, dn = q - q_tilde, q - q_n
            e_el, g_el = self._elastic(q)
            e_c, g_c, _ = self._contact(q, cols, hessian=False)
            if g_c is None:
                g_c = 0.0
            Mdq, Ddn = Mr @ dq, D @ dn
            terms = (
                0.5 / h**2 * (dq @ Mdq),
                e_el,
                -(f @ q),
                e_c,
                0.5 / h * (dn @ Ddn) + (dn @ d_off) / h,
            )
            g_q = Mdq / h**2 + g_el - f + g_c + (Ddn + d_off) / h
            # eq. (13): J^T of the q-gradient, by ONE vector-Jacobian product
            return sum(terms), decoder.vjp(z, g_q)[1], q, sum(abs(t) for t in terms)

        return fun

    def preconditioner_matrix(self, z: np.ndarray | None = None, h: float | None = None):
        """``H~ = J_z^T [(1/h^2 + alpha/h) M~ + (1 + beta/h) K~_0] J_z`` (r, r), eq. (15).

        The Gauss-Newton Hessian of the step objective at rest, evaluated with the decoder
        Jacobian at ``z`` (default: the current latent).
        """
        s = self.settings
        h = s.dt / int(s.substeps) if h is None else float(h)
        z = self.z if z is None else np.asarray(z, dtype=float)
        A = (1 / h**2 + s.damping_alpha / h) * self.M_red + (1 + s.damping_beta / h) * self.K0_red
        J = self.decoder.jacobian(z)  # (k, r): r JVPs, once per step
        H = J.T @ A @ J
        return 0.5 * (H + H.T)

    # ----------------------------------------------------------------------- step
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame (``settings.substeps`` latent implicit Euler steps).

        ``inputs.forces`` are projected onto the PCA basis; ``inputs.pin_targets`` must be a
        rigid motion of the rest pins (see :mod:`.frame`). ``newton_iters`` of the report counts
        L-BFGS iterations.
        """
        return run_frame(self, inputs, self._implicit_euler, "Latent")

    def _implicit_euler(self, h: float, f_ext: np.ndarray, colliders, pose=None) -> StepReport:
        """One step of eq. (12) into the pin frame ``pose`` (None: it stays) by
        preconditioned L-BFGS (sec. 5.2); updates the state.

        The line search accepts Armijo steps, or, where E changes by less than its rounding
        noise, steps that satisfy Hager & Zhang's approximate Wolfe condition
        ``g(t).p <= (1 - 2 delta) |g.p|`` (delta = 0.1). When even the predicted decrease
        ``-g.p`` is below that noise, E cannot judge a step at all: the full quasi-Newton step
        is taken if it shrinks ``|dE/dz|``, and otherwise the step has converged to rounding
        (``converged`` is True though eps was not reached: ``residual`` tells). So has a
        step whose accepted move of z is below rounding (``_STALL``).
        """
        rep = StepReport(substeps=1)
        t0 = time.perf_counter()
        fun = self._objective(h, f_ext, colliders, pose)
        z = self.z.copy()  # warm start
        e, g, q, e_abs = fun(z)
        rep.timings["derivatives"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        cols_local = local_colliders(colliders, self.pose if pose is None else pose)

        def precondition(z, q):
            """Eq. (15) at z, plus the Gauss-Newton stiffness of the colliders touching at
            q: the penalty is far stiffer than inertia, and without it L-BFGS crawls along
            a contact (100 iterations instead of 4-5 on a beam resting on the ground)."""
            if not self.use_preconditioner:
                return None
            H0 = self.preconditioner_matrix(z, h)
            H_c = self._contact(q, cols_local)[2]
            if H_c is not None and np.any(H_c):
                J = self.decoder.jacobian(z)
                H0 = H0 + J.T @ H_c @ J
            return _cholesky(H0)

        chol = precondition(z, self.q)
        rep.timings["solve"] += time.perf_counter() - t0
        mem: deque = deque(maxlen=self.lbfgs_window)
        rep.converged = False
        for _ in range(self.max_iters + 1):
            if not (np.isfinite(e) and np.all(np.isfinite(g))):
                rep.converged = rep.line_search_ok = False
                return rep
            if np.linalg.norm(g) < self.lbfgs_tol * max(float(np.linalg.norm(z)), 1.0):
                rep.converged = True  # sec. 5.2
                break
            if rep.newton_iters == self.max_iters:
                break
            t0 = time.perf_counter()
            if rep.newton_iters and rep.newton_iters % _REFRESH == 0 and cols_local:
                # slow progress: contacts made during the step change the curvature
                chol = precondition(z, q)
                mem.clear()
            p = -_two_loop(g, mem, chol)
            slope = float(g @ p)
            if not slope < 0:  # a stale pair spoilt the direction: restart from H0
                mem.clear()
                p = -_two_loop(g, mem, chol)
                slope = float(g @ p)
            rep.timings["solve"] += time.perf_counter() - t0
            noise = _NOISE * e_abs
            flat = -slope <= noise  # the predicted decrease is below E's rounding noise
            t0 = time.perf_counter()
            rep.newton_iters += 1
            t, ok = 1.0, False
            for _ in range(_MAX_BACKTRACKS):
                zt = z + t * p
                et, gt, qt, et_abs = fun(zt)
                if np.isfinite(et) and np.all(np.isfinite(gt)):
                    if flat:  # E cannot judge the step: the gradient must shrink
                        if np.linalg.norm(gt) < np.linalg.norm(g):
                            ok = True
                            break
                        if t < 1e-3:
                            break
                    if et <= e + _ARMIJO * t * slope or (
                        et <= e + noise and gt @ p <= -(1 - 2 * _HZ_DELTA) * slope
                    ):
                        ok = True
                        break
                t *= 0.5
            rep.timings["line_search"] += time.perf_counter() - t0
            if not ok:
                if mem:  # retry once from the preconditioner alone
                    mem.clear()
                    continue
                if flat:
                    rep.converged = True  # converged to rounding: no measurable progress left
                    break
                rep.line_search_ok = False
                break
            sv, yv = zt - z, gt - g
            if np.linalg.norm(sv) <= _STALL * max(float(np.linalg.norm(z)), 1.0):
                z, e, g, q, e_abs = zt, et, gt, qt, et_abs
                if mem:  # perhaps a stale pair: one more try from the preconditioner alone
                    mem.clear()
                    continue
                rep.converged = True  # z no longer moves: converged to rounding
                break
            sy = float(sv @ yv)
            if sy > 1e-12 * float(np.linalg.norm(sv) * np.linalg.norm(yv)):  # curvature > 0
                mem.append((sv, yv, 1.0 / sy))
            z, e, g, q, e_abs = zt, et, gt, qt, et_abs
        rep.residual = float(np.linalg.norm(g)) / max(float(np.linalg.norm(z)), 1.0)
        if np.all(np.isfinite(q)) and (rep.converged or rep.line_search_ok):
            self.qdot = (q - self.q) / h
            self.z, self.q = z, q
            self._advance_frame(pose)
        return rep


#: The autoencoder runtime's former name (scripts and plug-ins may use it).
LatentSimulation = AutoencoderSimulation


def _cholesky(H: np.ndarray):
    """Cholesky factor of an SPD (r, r) matrix, with a growing ridge if it is only PSD."""
    ridge = 0.0
    scale = max(float(np.trace(H)) / len(H), 1e-300)
    for _ in range(12):
        try:
            return sla.cho_factor(H + ridge * np.eye(len(H)), lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            ridge = scale * (1e-12 if ridge == 0 else 100 * ridge / scale)
    raise SimulationError(
        "The latent preconditioner is not positive definite (the decoder Jacobian is "
        "degenerate): the model is broken; retrain it."
    )


def _two_loop(g: np.ndarray, mem, chol) -> np.ndarray:
    """L-BFGS two-loop recursion: ``H_k^{-1} g`` with ``H_0^{-1}`` = the preconditioner solve.

    Without a preconditioner ``H_0^{-1} = (s.y / y.y) I`` from the newest pair (identity on
    the first iteration), as in Nocedal & Wright (eq. 7.20).
    """
    d = g.copy()
    alphas = []
    for s, y, rho in reversed(mem):
        a = rho * (s @ d)
        d -= a * y
        alphas.append(a)
    if chol is not None:
        d = sla.cho_solve(chol, d, check_finite=False)
    elif mem:
        s, y, _ = mem[-1]
        d *= (s @ y) / (y @ y)
    for (s, y, rho), a in zip(mem, reversed(alphas), strict=True):
        b = rho * (y @ d)
        d += (a - b) * s
    return d
