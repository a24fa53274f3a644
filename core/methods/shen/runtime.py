"""The Shen 2021 runtime: Newton on eq. (10) in the curved subspace, its halved steps and the
variational fallback (:mod:`core.methods.shen`, whose docstring derives and measures them)."""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg as sla

from ...engine.protocol import FrameInputs, StepReport
from ...errors import SimulationError
from ...physics import fem as _fem
from ...physics.colliders import Collider, ContactPoints
from ...physics.sim import SimSettings
from ...reduced.model import (
    SubspaceModel,
    run_frame,
)
from ...reduced.nnet import MLP
from ...reduced.pose import interpolate
from .hocs import jet

#: Armijo constant of the merit line search.
_ARMIJO = 1e-4
_MAX_BACKTRACKS = 30
#: Levenberg-Marquardt tries (lam x10 each) of the fallback.
_LM_TRIES = 12
#: Times a stalled step is halved (two eq. (10) steps of h / 2) before the variational step.
_MAX_SPLITS = 1
#: Newton iterations after which a step that may still be halved is judged stalled: a crawl
#: ends on whichever root rounding picks (module docstring, "Newton"); 6-20 measured alike.
_CRAWL_ITERS = 12


class ShenSimulation(SubspaceModel):
    """Implicit Euler in ``r = [p; z]`` on a PCA + filtered-decoder subspace (Shen 2021).

    Parameters
    ----------
    X : (n, 3) float array
        Rest positions, metres.
    T : (m, 4) int array
    material : fem.Material
    U : (3n, k) float array
        The PCA basis ``V`` (M-orthonormal, zero on pinned DOFs); its first ``n_p`` columns
        are the linear part.
    n_p : int
        Linear coordinates.
    decoder : MLP or None
        ``D``: (n_z,) -> (k,) PCA coordinates, smooth activations; filtered here (its first
        ``n_p`` outputs are dropped). None: no nonlinear coordinates (a linear model).
    encoder : MLP or None
        (k,) -> (n_z,), the initial guess of :meth:`encode_q` (filtered here).
    settings, pinned, cubature, contact, colliders
        As :class:`core.reduced.integrator.SubspaceSimulation`.
    fictitious : bool
        Keep the fictitious force ``M~ H^[dz, dz]`` (False: Fulton 2019's equations).
    third : bool
        Put the third-order term ``S^`` in the Newton matrix (False: inexact Newton).
    variational : bool
        Step every frame with the position-based incremental potential of
        :meth:`_variational_step` (the stall fallback) instead of eq. (10): the comparison
        of ``bench/shen.py`` (module docstring, "Measured").
    contact_variational : bool
        Take the variational step in the steps where the collider penalty acts (module
        docstring, "In contact").
    decoder_sees_p : bool
        The decoder reads ``[p; z]`` ((n_p + n_z,) -> (k,)): ``c = E_p p + D^(p, z)``, and
        the encoder reads ``p`` too (not filtered at its input).
    frame_variational : bool
        Take the variational step in the steps where the pins' frame moves (module
        docstring, "Animated pins").

    Attributes
    ----------
    r, rdot : (n_p + n_z,) generalized coordinates and velocity; q, qdot : (k,) the basis
        coordinates ``c(r)`` and ``J~ rdot`` (the other subspace runtimes' ``q``)
    evaluations : decoder jets so far (each is one Newton iteration's derivative work)
    fallbacks : steps Newton on ``phi`` stalled in and the variational step was taken
    split_stalls : halve a step Newton stalls in (two eq. (10) steps of ``h / 2``) before
        taking the variational step; the default where the decoder reads ``p`` (module
        docstring, "Newton")
    splits : stalled steps taken as two half steps
    variational_steps : steps taken by the variational step from the start (in contact, or
        every step with ``variational``)
    """

    def __init__(
        self,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        U: np.ndarray,
        n_p: int,
        decoder: MLP | None,
        settings: SimSettings | None = None,
        *,
        pinned=(),
        cubature: tuple[np.ndarray, np.ndarray] | None = None,
        contact: ContactPoints | tuple[np.ndarray, np.ndarray] | None = None,
        colliders: list[Collider] | None = None,
        encoder: MLP | None = None,
        fictitious: bool = True,
        third: bool = True,
        variational: bool = False,
        contact_variational: bool = True,
        decoder_sees_p: bool = False,
        frame_variational: bool = True,
    ) -> None:
        self._setup(X, T, material, U, settings, pinned, cubature, contact, colliders)
        k = self.k
        n_p = int(n_p)
        if not 0 <= n_p <= k:
            raise SimulationError(f"n_p = {n_p} linear coordinates but the basis has {k} columns.")
        self.n_p = n_p
        sees_p = bool(decoder_sees_p) and decoder is not None
        if sees_p and decoder.in_dim <= n_p:
            raise SimulationError(
                f"The decoder reads {decoder.in_dim} coordinates, not n_p = {n_p} linear ones "
                "and at least one latent one; the model file is inconsistent: retrain the model."
            )
        #: the decoder reads ``r[d0:]``: all of ``r`` (``D(p, z)``) or ``z`` (``D(z)``)
        self._d0 = 0 if sees_p else n_p
        self.decoder_sees_p = sees_p
        if decoder is not None:
            if decoder.out_dim != k:
                raise SimulationError(
                    f"The decoder outputs {decoder.out_dim} PCA coordinates but the basis has "
                    f"{k} columns; the model file is inconsistent: retrain the model."
                )
            W, b = list(decoder.W), list(decoder.b)
            W[-1], b[-1] = W[-1].copy(), b[-1].copy()
            W[-1][:n_p], b[-1][:n_p] = 0.0, 0.0  # the filter F = I - E_p E_p^T
            decoder = MLP(W, b, decoder.activations)
            jet(decoder, np.zeros(decoder.in_dim))  # refuses activations without S
        if encoder is not None:
            if (
                decoder is None
                or encoder.in_dim != k
                or encoder.out_dim != decoder.in_dim - (n_p if sees_p else 0)
            ):
                raise SimulationError(
                    "The encoder does not match the decoder and the basis; the model file is "
                    "inconsistent: retrain the model."
                )
            if not sees_p:  # the filter at the encoder's input (D(p, z)'s encoder reads p)
                W = list(encoder.W)
                W[0] = W[0].copy()
                W[0][:, :n_p] = 0.0
                encoder = MLP(W, encoder.b, encoder.activations)
        self.decoder, self.encoder = decoder, encoder
        self.n_z = 0 if decoder is None else decoder.in_dim - (n_p if sees_p else 0)
        self.n = n_p + self.n_z
        self.fictitious, self.third = bool(fictitious), bool(third)
        self.variational = bool(variational)
        self.contact_variational = bool(contact_variational)
        self.frame_variational = bool(frame_variational)
        self.variational_steps = 0
        self.evaluations = 0
        self.fallbacks = 0
        self.splits = 0
        self.energy_rejections = 0
        self.energy_clamps = 0
        # a stalled step is halved (two eq. (10) steps of h / 2) where the decoder reads p
        self.split_stalls = bool(self.n_z) and self._d0 == 0
        self.z_rest = self.encode_q(np.zeros(k))[n_p:]
        self.reset()

    # ------------------------------------------------------------------ the map c(r)
    def coordinates(self, r: np.ndarray) -> np.ndarray:
        """``c(r) = E_p p + D^(z)`` or ``E_p p + D^(p, z)`` (k,), the PCA coordinates of
        generalized ``r``."""
        c = np.zeros(self.k)
        c[: self.n_p] = r[: self.n_p]
        if self.n_z:
            c += self.decoder.forward(r[self._d0 :])
        return c

    def tangent(self, r: np.ndarray) -> np.ndarray:
        """``J~ = dc/dr`` (k, n)."""
        Jt = np.zeros((self.k, self.n))
        Jt[: self.n_p, : self.n_p] = np.eye(self.n_p)
        if self.n_z:
            Jt[:, self._d0 :] += self.decoder.jacobian(r[self._d0 :])
        return Jt

    # ---------------------------------------------------------------------- state
    def reset(
        self,
        r: np.ndarray | None = None,
        *,
        q: np.ndarray | None = None,
        qdot: np.ndarray | None = None,
        rdot: np.ndarray | None = None,
    ) -> None:
        """Start at a pose (default: rest) with a velocity (default: zero).

        Give at most one of ``r`` (generalized) or ``q`` (PCA coordinates, encoded onto the
        subspace by :meth:`encode_q`), and at most one of ``rdot`` or ``qdot`` (PCA
        velocities, the least-squares ``J~^+ qdot`` in the ``M~`` metric).
        """
        if r is not None and q is not None:
            raise SimulationError("Give the initial pose once: as r or as q.")
        if rdot is not None and qdot is not None:
            raise SimulationError("Give the initial velocity once: as rdot or as qdot.")
        if q is not None:
            r = self.encode_q(q)
        if r is None:
            r = np.concatenate([np.zeros(self.n_p), self.z_rest])
        self.r = np.array(r, dtype=float).reshape(self.n)
        self.q = self.coordinates(self.r)
        Jt = self.tangent(self.r)
        if qdot is not None:
            qdot = np.asarray(qdot, dtype=float).reshape(self.k)
            A = Jt.T @ self.M_red
            rdot = np.linalg.lstsq(A @ Jt, A @ qdot, rcond=None)[0]
        self.rdot = np.zeros(self.n) if rdot is None else np.array(rdot, dtype=float)
        self.qdot = Jt @ self.rdot
        self.frame = 0
        self.f_ext = np.zeros(self.k)
        self._reset_frame()

    def get_state(self) -> dict:
        return {"r": self.r.copy(), "rdot": self.rdot.copy(), **super().get_state()}

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.r = np.array(state["r"], dtype=float)
        self.rdot = np.array(state["rdot"], dtype=float)

    def positions(self) -> np.ndarray:
        """(n, 3) world positions ``X + V c(r)``, metres."""
        return self.world(self.X + (self.U @ self.q).reshape(-1, 3))

    def energy(self) -> float:
        """Kinetic + elastic (cubature) + gravity potential of the current state, J (no
        contact): what undamped free motion must not gain."""
        e_el = self._elastic(self.q, 0)[0]
        return 0.5 * self.qdot @ self.M_red @ self.qdot + e_el - self.f_gravity @ self.q

    # ------------------------------------------------------------------- encoding
    def encode_q(self, q: np.ndarray, refine: bool = True) -> np.ndarray:
        """Generalized ``r`` (n,) whose ``c(r)`` is closest to PCA coordinates ``q`` (k,) in
        the ``M~`` metric: ``p`` is read off (the linear part is M-orthogonal to the rest),
        ``z`` starts at the encoder's output and is polished by Levenberg-Marquardt (with
        ``D(p, z)`` on ``p`` and ``z`` together: ``p`` then moves the decoder's part too)."""
        q = np.asarray(q, dtype=float).reshape(self.k)
        p = q[: self.n_p]
        if not self.n_z:
            return p.copy()
        z = (
            self.encoder.forward(q)
            if self.encoder is not None
            else (getattr(self, "z_rest", np.zeros(self.n_z)).copy())
        )
        r = np.concatenate([p, z])
        if refine or self.encoder is None:
            r = self._fit(q, r)
        return r

    def closest_q(self, y: np.ndarray) -> np.ndarray:
        """PCA coordinates of the subspace's closest shape to ``y`` (n, 3) (pins' frame)."""
        return self.coordinates(self.encode_q(super().closest_q(y)))

    def _fit(self, q: np.ndarray, r: np.ndarray, iters: int = 30) -> np.ndarray:
        """Levenberg-Marquardt on ``1/2 |c(r) - q|^2_{M~}`` over ``r[d0:]`` (``z``, or all of
        ``r`` with ``D(p, z)``) from ``r``."""
        d0, Mr = self._d0, self.M_red
        r = r.copy()

        def cost(x):
            rr = np.concatenate([r[:d0], x])
            d = self.coordinates(rr) - q
            return 0.5 * d @ Mr @ d, d

        x = r[d0:]
        c, d = cost(x)
        lam = 1e-8
        for _ in range(iters):
            J = self.tangent(np.concatenate([r[:d0], x]))[:, d0:]
            A, b = J.T @ Mr @ J, J.T @ (Mr @ d)
            if c <= 0 or not np.any(b):
                break
            for _ in range(20):
                Ad = A + lam * (np.diag(np.diag(A)) + 1e-12 * np.trace(A) * np.eye(len(x)))
                dx = -np.linalg.lstsq(Ad, b, rcond=None)[0]
                ct, dt = cost(x + dx)
                if np.isfinite(ct) and ct < c:
                    break
                lam *= 10
            else:
                break
            rel = (c - ct) / max(c, 1e-300)
            x, c, d = x + dx, ct, dt
            lam = max(lam / 10, 1e-12)
            if rel < 1e-12:
                break
        return np.concatenate([r[:d0], x])

    # --------------------------------------------------------------------- forces
    def _elastic(self, q: np.ndarray, order: int, project: bool = False):
        """Cubature elastic energy (J), reduced force ``V^T df/du`` (k,) and, with ``order``
        2, the reduced stiffness (k, k): exact by default (the Newton matrix of ``phi`` is
        LU-solved, indefinite is fine), from PSD-projected element Hessians with
        ``project`` (the variational step's minimization); :meth:`elastic_terms`."""
        return self.elastic_terms(q, order, project)

    def residual_function(
        self,
        h: float | None = None,
        f_ext: np.ndarray | None = None,
        colliders: list[Collider] | None = None,
    ):
        """``r -> (phi (n,), dphi/dr (n, n))`` of one step of ``h`` s from the current state
        (the tests' handle on the Newton system)."""
        s = self.settings
        h = s.dt / int(s.substeps) if h is None else float(h)
        f_ext = self.f_ext if f_ext is None else np.asarray(f_ext, dtype=float)
        system = self._system(
            h, f_ext + self.f_gravity, self.colliders if colliders is None else list(colliders)
        )
        return lambda r: system(np.asarray(r, dtype=float), True)[:2]

    def _damping(self) -> np.ndarray:
        """``D~ = alpha M~ + beta K~+(c_n)`` (k, k): Rayleigh damping frozen over the step,
        with the PSD-projected stiffness at the step's start (as the linear runtime's)."""
        s = self.settings
        D = s.damping_alpha * self.M_red
        if s.damping_beta > 0:
            x_sub = self._X_sub + (self._U_sub_flat @ self.q).reshape(-1, 3)
            He = self.sub_fem.element_terms(x_sub, self.weights, True, True)[2]
            D = D + s.damping_beta * self._U_elem_flat.T @ (He @ self.U_elem).reshape(-1, self.k)
        return D

    def _system(self, h: float, f: np.ndarray, cols, D: np.ndarray | None = None):
        """``(r, jacobian) -> (phi, A or None, c, timings)`` of a step of ``h`` with reduced
        external force ``f`` (gravity and the pins' frame included) and damping ``D``
        (default :meth:`_damping`)."""
        r_n, rdot_n, c_n = self.r, self.rdot, self.q
        n_p, n, Mr = self.n_p, self.n, self.M_red
        D = self._damping() if D is None else D
        fict, third, dec, d0 = self.fictitious, self.third, self.decoder, self._d0

        def system(r: np.ndarray, jacobian: bool):
            t0 = time.perf_counter()
            a = r - r_n - h * rdot_n
            dz = (r - r_n)[d0:]
            Jt = np.zeros((self.k, n))
            Jt[:n_p, :n_p] = np.eye(n_p)
            c = np.zeros(self.k)
            c[:n_p] = r[:n_p]
            Hdd = None
            if self.n_z:
                z = r[d0:]
                v = a[d0:] + (2.0 * dz if fict else 0.0)
                jt = jet(
                    dec,
                    z,
                    dz if fict else None,
                    v if jacobian else None,
                    third=third and fict and jacobian,
                )
                self.evaluations += 1
                c += jt.y
                Jt[:, d0:] += jt.J
                Hdd = jt.Hdd if fict else None
            t_der = time.perf_counter() - t0
            e_el, f_int, K = self._elastic(c, 2 if jacobian else 1)
            _, g_c, H_c = self._contact(c, cols, hessian=jacobian)
            F = f_int - f + D @ (c - c_n) / h
            if g_c is not None:
                F = F + g_c
            acc = Jt @ a if Hdd is None else Jt @ a + Hdd
            g = Mr @ acc + h * h * F
            phi = Jt.T @ g
            if not jacobian:
                return phi, None, c, t_der
            Kt = K + D / h
            if H_c is not None:
                Kt = Kt + H_c
            A = Jt.T @ (Mr + h * h * Kt) @ Jt
            if self.n_z:
                t1 = time.perf_counter()
                curv = jt.Hv if jt.Sdd is None else jt.Hv + jt.Sdd
                A[:, d0:] += Jt.T @ (Mr @ curv)
                A[d0:, d0:] += jt.left_hessian(g)
                t_der += time.perf_counter() - t1
            return phi, A, c, t_der

        return system

    # ----------------------------------------------------------------------- step
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame (``settings.substeps`` implicit Euler steps in ``r``).

        ``inputs.forces`` are projected onto ``V``; colliders move as in full space; pin
        targets move the pins' frame (module docstring, "Animated pins").
        """
        return run_frame(self, inputs, self._implicit_euler, "Shen")

    def _implicit_euler(
        self, h: float, f_ext: np.ndarray, colliders, pose=None, depth: int = 0
    ) -> StepReport:
        """One implicit Euler step into the pins' frame ``pose`` (None: it stays): Newton on
        ``phi`` with the merit line search and the Levenberg-Marquardt step where Newton's
        fails; a step Newton stalls in, or whose root would gain energy, is halved or taken
        by the variational step, and no step gains energy (module docstring, "Energy");
        updates the state."""
        s = self.settings
        rep = StepReport(substeps=1)
        # the pins' frame: its inertial and mass-damping targets differ from c_n + h qdot_n
        # and c_n by forces constant over the step (frame.py's q~, q_d), folded into f
        # (stiffness damping acts on c - c_n in the frame, as the linear runtime's)
        q_tilde, q_damp, f_grav, cols = self.step_terms(h, pose, colliders)
        f = (
            f_ext
            + f_grav
            + self.M_red @ (q_tilde - self.q - h * self.qdot) / (h * h)
            + (s.damping_alpha / h) * (self.M_red @ (q_damp - self.q))
        )
        D = self._damping()
        e0, e_scale = self._step_energy(self.q, self.qdot, f, cols)
        tol = s.newton_tol * self.length_scale
        new = self.pose if pose is None else pose
        moving = not (new.is_identity and self.pose.is_identity and self.pose_prev.is_identity)
        if (
            self.variational
            or (self.frame_variational and moving)
            or (self.contact_variational and self._touching(h, cols))
        ):
            self.variational_steps += 1
            t0 = time.perf_counter()
            r, c, conv, ok, rep.newton_iters, step = self._variational_step(h, f, cols, tol, D)
            rep.timings["line_search"] += time.perf_counter() - t0
            rep.converged, rep.line_search_ok = conv, ok
            rep.residual = step / self.length_scale
            if ok and np.all(np.isfinite(r)):
                self._accept(r, c, h, pose, e0, e_scale, f, cols)
            return rep
        system = self._system(h, f, cols, D)
        rep.timings["decoder"] = 0.0  # the decoder's derivatives (jet, left contraction)
        rep.converged = False
        can_split = self.split_stalls and depth < _MAX_SPLITS
        iters = min(_CRAWL_ITERS, s.max_newton_iters) if can_split else s.max_newton_iters
        r, c, step = self._newton(system, self.r + h * self.rdot, tol, rep, iters)  # warm start
        if rep.converged and self._step_energy(c, (c - self.q) / h, f, cols)[0] > e0 + e_scale:
            # a root that gains energy: a far root of phi (the decoder's curvature makes
            # several), not implicit Euler's dissipative step
            rep.converged = False
            self.energy_rejections += 1
        if not rep.converged and can_split:
            # Newton stalled: the step moves r too far for eq. (10)'s expansion (see the
            # module docstring). Two implicit Euler steps of h / 2 on eq. (10) instead, kept
            # when both converge with no variational step anywhere in them
            saved = (self.r, self.rdot, self.q, self.qdot, self.pose, self.pose_prev)
            counts = (self.fallbacks, self.splits, self.energy_clamps)
            mid = None
            if pose is not None:  # halfway along the frame's screw motion (as run_frame)
                mid = interpolate(self.pose, pose, 0.5, self.pin_frame().rest_pins.mean(0))
            split_ok = True
            for half_pose in (mid, pose):
                half = self._implicit_euler(h / 2, f_ext, colliders, half_pose, depth + 1)
                rep.merge(half)
                if not half.converged or self.fallbacks > counts[0]:
                    split_ok = False
                    break
            if split_ok:
                rep.converged = rep.line_search_ok = True
                rep.substeps = 1
                self.splits += 1
                return rep
            self.r, self.rdot, self.q, self.qdot, self.pose, self.pose_prev = saved
            self.fallbacks, self.splits, self.energy_clamps = counts
            rep.substeps = 1
        if not rep.converged:
            # Newton stalled at the smallest step: take the variational step instead
            t0 = time.perf_counter()
            r, c, conv, ok, iters, step = self._variational_step(h, f, cols, tol, D)
            rep.timings["line_search"] += time.perf_counter() - t0
            rep.newton_iters += iters
            self.fallbacks += 1
            rep.converged, rep.line_search_ok = conv, ok
        rep.residual = step / self.length_scale
        if np.all(np.isfinite(r)) and (rep.converged or rep.line_search_ok):
            self._accept(r, c, h, pose, e0, e_scale, f, cols)
        return rep

    def _step_energy(self, c: np.ndarray, qdot: np.ndarray, f: np.ndarray, cols):
        """``(E, rounding)``: the step's energy ``|qdot|^2_{M~} / 2 + V(c) + C(c) - f.c``, J
        (elastic by cubature, collider penalty, constant reduced force ``f`` of the step),
        and the rounding it may carry (1e-12 of its terms' magnitudes)."""
        kinetic = 0.5 * qdot @ self.M_red @ qdot
        e_el = self._elastic(c, 0)[0]
        e_c = self._contact(c, cols, hessian=False)[0]
        work = float(f @ c)
        return kinetic + e_el + e_c - work, 1e-12 * (kinetic + abs(e_el) + e_c + abs(work))

    def _accept(self, r, c, h: float, pose, e0: float, e_scale: float, f, cols) -> None:
        """Take ``r`` (``c = c(r)``) as the step's end; where its energy exceeds the step's
        start ``e0`` (a variational step on a curved or non-convex potential may), the
        velocity is scaled down to ``e0``: the minimizer's potential is at most ``e0``
        (:meth:`_variational_step` starts no higher than ``r_n``), so a scale in [0, 1]
        always exists (``energy_clamps`` counts these steps)."""
        rdot, qdot = (r - self.r) / h, (c - self.q) / h
        e1 = self._step_energy(c, qdot, f, cols)[0]
        if e1 > e0 + e_scale:
            kinetic = 0.5 * qdot @ self.M_red @ qdot
            scale = np.sqrt(max(e0 - (e1 - kinetic), 0.0) / kinetic) if kinetic > 0 else 0.0
            rdot, qdot = scale * rdot, scale * qdot
            self.energy_clamps += 1
        self.r, self.rdot, self.q, self.qdot = r, rdot, c, qdot
        self._advance_frame(pose)

    def _newton(self, system, r: np.ndarray, tol: float, rep: StepReport, max_iters: int):
        """Newton on ``phi`` from ``r`` (the merit line search, the Levenberg-Marquardt step
        where Newton's fails); sets ``rep.converged``. Returns ``(r, c(r), last step (m))``:
        not converged when Newton stalled (three Levenberg-Marquardt steps in a row) or ran
        out of iterations."""
        c = None
        t0 = time.perf_counter()
        phi, A, c, t_dec = system(r, True)
        rep.timings["derivatives"] += time.perf_counter() - t0
        rep.timings["decoder"] += t_dec
        m = 0.5 * phi @ phi
        step = np.inf
        lm_run = 0  # consecutive Levenberg-Marquardt steps: Newton has stalled at 3
        for _ in range(max(int(max_iters), 1)):
            if not (np.isfinite(m) and np.all(np.isfinite(A))):
                break
            t0 = time.perf_counter()
            try:
                d = -sla.lu_solve(sla.lu_factor(A, check_finite=False), phi, check_finite=False)
                ok_dir = bool(np.all(np.isfinite(d)))
            except (np.linalg.LinAlgError, ValueError):
                ok_dir = False
            rep.timings["solve"] += time.perf_counter() - t0
            rep.newton_iters += 1
            t0 = time.perf_counter()
            accepted, full_step = False, (None, None, None, 0.0)
            if ok_dir:
                step = self._displacement(r, d)
                if step <= tol:
                    r = r + d
                    c = self.coordinates(r)
                    rep.converged = True
                    rep.timings["line_search"] += time.perf_counter() - t0
                    break
                t = 1.0
                for _ in range(_MAX_BACKTRACKS):
                    # the full step (nearly always taken) is evaluated with the matrix, which
                    # the next iteration then needs: one decoder pass per iteration, not two
                    full_step = system(r + t * d, t == 1.0)
                    phi_t, t_dec = full_step[0], full_step[3]
                    rep.timings["decoder"] += t_dec
                    m_t = 0.5 * phi_t @ phi_t
                    if np.isfinite(m_t) and m_t <= (1.0 - 2.0 * _ARMIJO * t) * m:
                        accepted = True
                        break
                    t *= 0.5
            reuse = accepted and t == 1.0  # full_step holds the system at the new iterate
            lm_run = 0 if accepted else lm_run + 1
            if not accepted:  # Levenberg-Marquardt on the merit: always a descent direction
                G, b = A.T @ A, A.T @ phi
                lam, t = 1e-6, 1.0
                for _ in range(_LM_TRIES):
                    d = -np.linalg.lstsq(G + lam * np.diag(np.diag(G)), b, rcond=None)[0]
                    phi_t = system(r + d, False)[0]
                    m_t = 0.5 * phi_t @ phi_t
                    if np.isfinite(m_t) and m_t < m:
                        accepted = True
                        break
                    lam *= 10
            rep.timings["line_search"] += time.perf_counter() - t0
            if not accepted or lm_run >= 3:
                break  # stalled: the caller halves the step or takes the variational one
            step = self._displacement(r, t * d)
            r = r + t * d
            if reuse:
                phi, A, c = full_step[:3]
            else:
                t0 = time.perf_counter()
                phi, A, c, t_dec = system(r, True)
                rep.timings["derivatives"] += time.perf_counter() - t0
                rep.timings["decoder"] += t_dec
            m = 0.5 * phi @ phi
            if step <= tol:
                rep.converged = True
                break
        if c is None:
            c = self.coordinates(r)
        return r, c, step

    def _touching(self, h: float, cols) -> bool:
        """Whether the collider penalty acts now or at the warm start ``r + h rdot``: the
        steps that take :meth:`_variational_step` (``contact_variational``)."""
        if not cols:
            return False
        for c in (self.q, self.coordinates(self.r + h * self.rdot)):
            if self._contact(c, cols, hessian=False)[0] > 0:
                return True
        return False

    def _variational_step(self, h: float, f: np.ndarray, cols, tol: float, D: np.ndarray):
        """The fallback and the contact step: minimize the implicit Euler incremental
        potential over ``r``,

        ``E(r) = |c(r) - c_n - h qdot_n|^2_{M~} / (2 h^2) + V(c) - f.c + C(c)
        + (c - c_n)^T D~ (c - c_n) / (2h)``

        (Fulton 2019's step, without the fictitious force), by Newton with the exact Hessian
        ``J~^T (M~/h^2 + K) J~ + diag(0, g^T H^)`` (the Gauss-Newton matrix with
        PSD-projected element Hessians where it is not positive definite:
        :func:`_newton_direction`) and Armijo backtracking, at most three times
        ``max_newton_iters`` iterations. E is bounded below, so this always makes progress:
        a step that runs out of iterations with E lowered is usable (as the linear runtime's
        Newton at its limit).

        Returns ``(r, c(r), converged, usable, iterations, last step (m))``.
        """
        s = self.settings
        c_tilde, c_n = self.q + h * self.qdot, self.q
        Mr, n_p, dec = self.M_red, self.n_p, self.decoder

        def energy(r, order):
            c = self.coordinates(r)
            e_el, g_el, K = self._elastic(c, order and 2)
            e_c, g_c, H_c = self._contact(c, cols, hessian=order > 0)
            dq, dn = c - c_tilde, c - c_n
            e = 0.5 * dq @ Mr @ dq / h**2 + e_el - f @ c + e_c + 0.5 * dn @ D @ dn / h
            if not order:
                return e, None, None, c
            g = Mr @ dq / h**2 + g_el - f + D @ dn / h + (0.0 if g_c is None else g_c)
            Jt = np.zeros((self.k, self.n))
            Jt[:n_p, :n_p] = np.eye(n_p)
            rest = Mr / h**2 + D / h + (0.0 if H_c is None else H_c)
            if self.n_z:
                jt = jet(dec, r[self._d0 :])
                Jt[:, self._d0 :] += jt.J
            H = Jt.T @ (rest + K) @ Jt
            if self.n_z:
                H[self._d0 :, self._d0 :] += jt.left_hessian(g)  # the manifold's curvature

            def gauss_newton():  # J~^T (M~/h^2 + K+ + D~/h + H_c) J~, K+ PSD-projected
                Kp = self._elastic(c, 2, project=True)[2]
                return Jt.T @ (rest + Kp) @ Jt

            return e, Jt.T @ g, (0.5 * (H + H.T), gauss_newton), c

        # from the warm start, or from r_n where that is lower: E(r_n) is the step's energy
        # at its start, so the minimizer's potential never exceeds it (what the energy
        # guard of _implicit_euler relies on)
        r = self.r + h * self.rdot
        if energy(self.r, 0)[0] < energy(r, 0)[0]:
            r = self.r.copy()
        e, g, H, c = energy(r, 1)
        e0 = e
        step, iters = np.inf, 0
        for iters in range(1, 3 * max(int(s.max_newton_iters), 1) + 1):
            if not (np.isfinite(e) and np.all(np.isfinite(g))):
                return r, c, False, False, iters, step
            d = _newton_direction(*H, g)
            step = self._displacement(r, d)
            if step <= tol:
                r = r + d
                return r, self.coordinates(r), True, True, iters, step
            slope, t = float(g @ d), 1.0
            for _ in range(_MAX_BACKTRACKS):
                # the full step (nearly always taken) is evaluated with its derivatives
                trial = energy(r + t * d, 1 if t == 1.0 else 0)
                if np.isfinite(trial[0]) and trial[0] <= e + _ARMIJO * t * slope:
                    break
                t *= 0.5
            else:  # no decrease E can measure: converged to rounding
                return r, c, True, True, iters, step
            r = r + t * d
            e, g, H, c = trial if t == 1.0 else energy(r, 1)
            if t * step <= tol:
                return r, c, True, True, iters, t * step
        return r, c, False, bool(e < e0), iters, step

    def _displacement(self, r: np.ndarray, d: np.ndarray) -> float:
        """Largest vertex move (m) on the cubature sub-mesh of the step ``d`` from ``r``, to
        first order (``V J~ d``)."""
        dc = np.zeros(self.k)
        dc[: self.n_p] = d[: self.n_p]
        if self.n_z:
            dc += self.decoder.jvp(r[self._d0 :], d[self._d0 :])[1]
        return float(np.abs(self._U_sub_flat @ dc).max())


def _newton_direction(H: np.ndarray, gauss_newton, g: np.ndarray) -> np.ndarray:
    """``-H^{-1} g`` with the exact Hessian ``H`` where it is positive definite, else with
    the Gauss-Newton matrix ``gauss_newton()`` (positive definite: PSD-projected element
    Hessians, no curvature term; a ridge only if rounding breaks that): a descent direction.
    A ridge on ``H`` instead (before) took 8.3 iterations a step, 26 at most, on a ball's
    contact with the floor; this 6.3 and 11."""
    try:
        return -sla.cho_solve(sla.cho_factor(H), g)
    except np.linalg.LinAlgError:
        pass
    H_gn = gauss_newton()
    ridge, scale = 0.0, max(float(np.trace(H_gn)) / len(g), 1e-300)
    while True:
        try:
            return -sla.cho_solve(sla.cho_factor(H_gn + ridge * np.eye(len(g))), g)
        except np.linalg.LinAlgError:
            ridge = 1e-12 * scale if ridge == 0 else 10 * ridge
