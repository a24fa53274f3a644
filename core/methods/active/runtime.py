"""The runtime of an active face (:class:`ActiveFace`) and headless playback (:func:`play`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.linalg as sla

from ...engine.protocol import FrameInputs, Markers, SimulatorBase, StepReport
from ...errors import SimulationError
from ...physics.fem import TetFEM
from ...physics.quasistatic import QuasistaticSolver
from ...reduced.nnet import MLP
from .markers import MarkerFit, head_matrix
from .model import ActiveModel


class ActiveFace(MarkerFit, SimulatorBase):
    """The runtime of an active-face model (see the package docstring, :mod:`core.methods.active`).

    Parameters
    ----------
    model : ActiveModel
    solve : "reduced" or "full"
    tol : relative force residual of each solve
    colliders : initial colliders
    marker_pull : ``rho`` of the marker fit (pull to the previous code), m^2 per unit code
    marker_iters, marker_rtol : Levenberg-Marquardt iterations per marker frame at most, and
        the relative cost decrease under which it stops (a frame starts from the previous
        frame's code, so one or two iterations usually do)
    marker_jacobian : "broyden" (a marker frame starts from the previous frame's Jacobian of
        the markers with respect to the code and corrects it by secant updates; the exact one
        only after a rejected step) or "exact" (at every accepted step)
    head_from_markers : a marker frame solves the head's rigid motion (6 parameters,
        :func:`head_matrix`) with the code: the markers of a capture whose performer moves
        the head; the skin (:meth:`skin_positions`) moves with it
    jaw_from_markers : a marker frame solves the jaw's hinge angle with the code (the markers
        alone drive the whole face, as a performance capture gives them); the frame's
        ``reference_frame`` (the jaw keyed by hand) is then ignored. Off: the jaw is the
        frame's ``reference_frame``
    threads : BLAS threads of a frame's solve (None: as the process runs them);
        :meth:`pick_threads` measures the fastest
    marker_solver : "sqp" (reduced solve: the code and the equilibrium by one joint Newton /
        Gauss-Newton iteration, :meth:`fit_markers_sqp`, Levenberg-Marquardt when it does not
        converge) or "lm" (Levenberg-Marquardt, each trial a converged reduced solve)
    contact : "full" (reduced solve: a frame whose skin touches a collider is finished by
        the full solve from the reduced one: the subspace of expressions cannot dent a
        cheek, on the small head it put the skin 3.6 mm on average from the full solve's,
        6.7 mm deep in the sphere) or "reduced" (the penalty forces projected on the
        subspace only)
    """

    def __init__(
        self,
        model: ActiveModel,
        *,
        solve: str = "reduced",
        tol: float = 1e-6,
        colliders=None,
        marker_pull: float = 1e-8,
        marker_iters: int = 3,
        marker_rtol: float = 1e-2,
        marker_jacobian: str = "broyden",
        marker_solver: str = "sqp",
        contact: str = "full",
        jaw_from_markers: bool = False,
        head_from_markers: bool = False,
        threads: int | None = None,
    ) -> None:
        if solve not in ("reduced", "full"):
            raise SimulationError(f"solve must be 'reduced' or 'full', not {solve!r}")
        self.model = model
        self.mode = solve
        self.tol = tol
        self.marker_pull = marker_pull
        self.marker_iters = marker_iters
        self.marker_rtol = marker_rtol
        if marker_jacobian not in ("broyden", "exact"):
            raise SimulationError(
                f"marker_jacobian must be 'broyden' or 'exact', not {marker_jacobian!r}"
            )
        self.marker_jacobian = marker_jacobian
        if marker_solver not in ("sqp", "lm"):
            raise SimulationError(f"marker_solver must be 'sqp' or 'lm', not {marker_solver!r}")
        self.marker_solver = marker_solver
        if contact not in ("full", "reduced"):
            raise SimulationError(f"contact must be 'full' or 'reduced', not {contact!r}")
        self.contact = contact
        self.jaw_from_markers = bool(jaw_from_markers)
        self.head_from_markers = bool(head_from_markers)
        self.threads = threads
        self._marker_J = None
        self.fem = TetFEM(model.X, model.T, model.material)
        self.qs = QuasistaticSolver(self.fem, model.constrained, surface=model.skin.matrix)
        self.free = self.qs.free
        nfix = len(model.fixed)
        self.jaw_rows = np.arange(nfix, nfix + len(model.jaw_nodes))
        n3 = 3 * len(model.X)
        self.Ufull = np.zeros((n3, model.U.shape[1]))
        self.Ufull[self.free] = model.U
        self.colliders = list(colliders or [])
        self._setup_reduced()
        self.frame = 0
        self.reset()

    def _setup_reduced(self) -> None:
        m = self.model
        e = np.asarray(m.cub_elements, np.int64)
        dec = m.decoder
        if len(e):
            self.sub = TetFEM(m.X, m.T[e], m.material)
            self.w = np.asarray(m.cub_weights, float)
            rows = (6 * e[:, None] + np.arange(6)).ravel()
            self.sub_decoder = MLP(
                dec.W[:-1] + [dec.W[-1][rows]], dec.b[:-1] + [dec.b[-1][rows]], dec.activations
            )
        else:
            e = np.arange(len(m.T))
            self.sub, self.w, self.sub_decoder = self.fem, np.ones(len(e)), dec
        dofs = (3 * m.T[e][:, :, None] + np.arange(3)).reshape(-1, 12)
        self.Ue = self.Ufull[dofs]  # (k, 12, r)
        self.Uflat = np.ascontiguousarray(self.Ue.reshape(-1, self.Ue.shape[2]))
        self.SU = (self.qs.P3 @ self.Ufull).reshape(-1, 3, self.Ufull.shape[1])

    def reduced_terms(self, x, colliders, need_hess: bool):
        """Reduced energy (J), gradient (r,) and Hessian (r, r) (exact; cubature when the
        model has one) at positions ``x`` with the current actions."""
        E, ge, He = self.sub.element_terms(x, weights=self.w, hessians=need_hess, project=False)
        Uf = self.Uflat  # (12 k, r): one GEMM each instead of k small products
        gr = ge.reshape(-1) @ Uf
        Hr = Uf.T @ np.matmul(He, self.Ue).reshape(Uf.shape) if need_hess else None
        if colliders:
            Ec, gp, Hp = self.qs.surface_terms(
                self.model.skin.matrix @ x + self.qs.surface_offset, colliders, None, need_hess
            )
            E += Ec
            gr += np.einsum("sar,sa->r", self.SU, gp)
            if need_hess:
                act = np.flatnonzero(np.abs(Hp).sum((1, 2)) > 0)
                SUa = self.SU[act]
                Hr += np.einsum("sar,sab,sbt->rt", SUa, Hp[act], SUa)
        return E, gr, Hr

    def _touching(self) -> bool:
        """Whether a skin vertex is inside a collider."""
        if not self.colliders:
            return False
        p = self.model.skin_of(self.x, self.z, self.jaw)
        return any(float(c.signed_distance(p)[0].min()) < 0.0 for c in self.colliders)

    def reduced_energy(self, x, colliders) -> float:
        E = float(self.sub.element_energy(x) @ self.w)
        if colliders:
            p = self.model.skin.matrix @ x + self.qs.surface_offset
            E += self.qs.surface_terms(p, colliders, None, False)[0]
        return E

    # ------------------------------------------------------------------ protocol

    def rest_positions(self) -> np.ndarray:
        return self.model.X.copy()

    def positions(self) -> np.ndarray:
        """The flesh's nodes (n, 3) of the current frame. With a blend of the keys the flesh
        is solved only where something touches; on other frames it is solved here, when
        asked (the runtime's solve, no colliders)."""
        if self.model.blends and not self._x_valid:
            if self.mode == "full":
                self.x = self.solve_full(self.z, self.jaw, colliders=[]).x
            else:
                self.x, self.q, _, _ = self.solve_reduced(self.z, self.jaw, colliders=[])
            self._x_valid = True
        return self.x.copy()

    def head_transform(self) -> np.ndarray:
        """The head's rigid motion (4, 4) the markers solved (identity when they do not)."""
        return head_matrix(self.head)

    def skin_positions(self) -> np.ndarray:
        """(s, 3) skin vertex positions of the current frame (the detail layer's included,
        moved by the head's motion when the markers solve it; with a blend of the keys,
        :attr:`ActiveModel.blend`, the blend plus the contact's change)."""
        if self.model.blends:
            P = self._skin if self._skin is not None else self.model.blend_skin(self.z, self.jaw)
        else:
            P = self.model.skin_of(self.x, self.z, self.jaw)
        if not self.head.any():
            return P
        M = head_matrix(self.head)
        return P @ M[:3, :3].T + M[:3, 3]

    def reset(self) -> None:
        self.frame = 0
        self.z = np.zeros(self.model.latent_dim)
        self.jaw = np.eye(4)
        self.theta = self.fitted_theta = 0.0  # the hinge angle (rad) the markers solved
        self.head = np.zeros(6)  # the head's motion the markers solved (head_matrix)
        self.fitted_head = None
        self.q = np.zeros(self.model.U.shape[1])
        self.x = self.model.X.copy()
        self.residual = 0.0
        self._marker_J = None
        self._skin = None  # a blend of keys: the frame's skin (None: the blend alone)
        self._x_valid = True  # a blend of keys: whether x is this frame's flesh
        self._x0 = self._xc = None  # the last contact solves' equilibria (warm starts)

    def get_state(self) -> dict:
        return {
            "frame": self.frame,
            "z": self.z.copy(),
            "jaw": self.jaw.copy(),
            "theta": self.theta,
            "head": self.head.copy(),
            "q": self.q.copy(),
            "x": self.x.copy(),
            "skin": None if self._skin is None else self._skin.copy(),
            "x_valid": self._x_valid,
        }

    def set_state(self, state: dict) -> None:
        self.frame = int(state["frame"])
        self.z, self.jaw = np.array(state["z"], float), np.array(state["jaw"], float)
        self.theta = float(state.get("theta", 0.0))
        self.head = np.array(state.get("head", np.zeros(6)), float)
        self.q, self.x = np.array(state["q"], float), np.array(state["x"], float)
        self._skin, self._x_valid = state.get("skin"), bool(state.get("x_valid", True))

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        """The model's closest equilibrium to node positions ``x`` (a latent fit to the
        skin of ``x``, closed jaw)."""
        skin = self.model.skin.apply(np.asarray(x, float))
        z = self.fit_latent(skin, jaw=None, mode="full")[0]
        return self.solve_full(z, None).x

    # ------------------------------------------------------------------ solves

    def solve_full(self, z, jaw, x0=None, colliders=None):
        """Full quasistatic solve for code ``z`` and jaw transform/angle ``jaw`` (colliders
        touch the skin shown: the flesh's with the detail layer's offsets)."""
        self.qs.surface_offset = self.model.detail_offsets(z, jaw)
        return self.qs.solve(
            self.model.actions(z, jaw),
            self.model.boundary(jaw),
            x0=self.x if x0 is None else x0,
            colliders=self.colliders if colliders is None else colliders,
            tol=self.tol,
        )

    def solve_reduced(self, z, jaw, q0=None, colliders=None, max_iters: int = 20):
        """Reduced quasistatic solve: ``(x, q, iterations, reduced residual)``."""
        m = self.model
        colliders = self.colliders if colliders is None else colliders
        self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, jaw)).reshape(-1, 6))
        if colliders:  # they touch the skin shown
            self.qs.surface_offset = m.detail_offsets(z, jaw)
        base = self._base(jaw)
        U = self.Ufull
        q = (self.q if q0 is None else q0).copy()
        scale = self.qs.force_scale
        res = np.inf
        it = 0
        for it in range(max_iters + 1):
            x = base + (U @ q).reshape(-1, 3)
            E, gr, Hr = self.reduced_terms(x, colliders, True)
            res = float(np.abs(gr).max() / scale) if gr.size else 0.0
            if res < self.tol or it == max_iters:
                self._last = (x, Hr)  # the Jacobian of a marker fit reuses it
                break
            try:
                d = -sla.solve(Hr, gr, assume_a="sym")
                if gr @ d >= 0:
                    raise np.linalg.LinAlgError
            except (np.linalg.LinAlgError, ValueError):
                w, V = np.linalg.eigh(Hr)
                d = -(V / np.maximum(w, 1e-8 * np.abs(w).max())) @ (V.T @ gr)
            step = 1.0
            # close to an equilibrium the exact Newton step is taken without a line search
            # (quadratic convergence; saves an element pass per iteration)
            for _ in range(20 if res > 1e-3 else 0):
                xt = base + (U @ (q + step * d)).reshape(-1, 3)
                Et = self.reduced_energy(xt, colliders)
                if Et <= E + 1e-4 * step * (gr @ d) or abs(Et - E) < 1e-14 * abs(E):
                    break
                step *= 0.5
            q = q + step * d
        return x, q, it, res

    # ------------------------------------------------------------------ frame

    def pick_threads(self, counts=None) -> dict:
        """Set :attr:`threads` to the BLAS thread count under which this face's frames solve
        fastest, measured here (:func:`core.blas.fastest_threads`): a slider frame and a marker
        frame (30 skin vertices at a training key's equilibrium, the jaw as the runtime
        drives it), from rest, each count three times, the state put back after (the reduced
        solve only: the full one is left as the process runs it). Small faces
        solve fastest on one thread (the BLAS's thread start-up outweighs the small products)
        and a busy machine makes it worse; the measurement, not the size, decides.

        Returns :func:`core.blas.fastest_threads`'s ``{"threads", "seconds"}``."""
        from ...physics.blas import fastest_threads

        m = self.model
        if self.mode != "reduced":  # seconds a frame, sparse factorizations: nothing to gain
            return {"threads": None, "seconds": {}}
        state, threads = self.get_state(), self.threads
        z = m.codes[min(1, len(m.codes) - 1)]
        skin = m.skin.apply(self.solve_reduced(z, None, q0=np.zeros_like(self.q))[0])
        v = np.linspace(0, len(skin) - 1, min(30, len(skin))).astype(np.int64)
        self.threads = None

        def frames():
            self.reset()
            self.step(FrameInputs(sliders=z))
            self.reset()
            self.step(FrameInputs(markers=Markers(v, skin[v])))

        try:
            found = fastest_threads(frames, counts)
        finally:
            self.set_state(state)
            self._marker_J = None
        self.threads = found["threads"] or threads
        return found

    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        from ...physics.blas import blas_threads

        with blas_threads(self.threads):
            return self._step(inputs)

    def _step(self, inputs: FrameInputs | None = None) -> StepReport:
        import time

        t0 = time.perf_counter()
        inputs = inputs or FrameInputs()
        if inputs.colliders is not None:
            self.colliders = list(inputs.colliders)
        if inputs.reference_frame is not None:
            self.jaw = np.asarray(inputs.reference_frame, float).reshape(4, 4)
        rep = StepReport()
        if self.model.blends:
            return self._step_blend(inputs, rep, t0)
        if inputs.markers is not None:
            mk: Markers = inputs.markers
            theta = self.theta if self.jaw_from_markers else None
            head = self.head if self.head_from_markers else None
            ok = False
            if self.mode == "reduced" and self.marker_solver == "sqp":
                z, x, q, _, rep.newton_iters, res, ok, th = self.fit_markers_sqp(
                    mk.positions, mk.vertices, mk.weights, self.jaw, theta=theta, head=head
                )
                if ok:
                    self.z, self.q, self._fit_res = z, q, res
            if not ok:
                self.z, x, _, its = self.fit_latent(
                    mk.positions,
                    vertices=mk.vertices,
                    weights=mk.weights,
                    jaw=self.jaw,
                    theta0=theta,
                    head0=head,
                )
                rep.newton_iters += its
                th = self.fitted_theta if theta is not None else None
            if th is not None:  # the markers turned the jaw
                self.theta, self.jaw = th, self.model.jaw_matrix(th)
            if head is not None:  # and moved the head
                self.head = np.array(self.fitted_head, float)
        elif inputs.sliders is not None:
            z = np.zeros(self.model.latent_dim)
            s = np.asarray(inputs.sliders, float).reshape(-1)[: len(z)]
            z[: len(s)] = s
            self.z = z
        if inputs.markers is not None and self.mode == "reduced":
            # the fit ended on the equilibrium of its code: no second solve
            self.x = x
            rep.residual = self._fit_res
            rep.converged = rep.residual < self.tol
        elif self.mode == "full":
            eq = self.solve_full(self.z, self.jaw)
            self.x, rep.residual, rep.converged = eq.x, eq.residual, eq.converged
            rep.newton_iters += eq.iterations
        else:
            self.x, self.q, it, res = self.solve_reduced(self.z, self.jaw)
            rep.residual, rep.converged = res, res < self.tol
            rep.newton_iters += it
        if self.mode == "reduced" and self.contact == "full" and self._touching():
            t1 = time.perf_counter()
            eq = self.solve_full(self.z, self.jaw, x0=self.x)
            self.x, rep.residual, rep.converged = eq.x, eq.residual, eq.converged
            rep.newton_iters += eq.iterations
            rep.timings["contact_full_solve"] = time.perf_counter() - t1
        rep.force_residual = rep.residual
        self.frame += 1
        rep.wall_time = time.perf_counter() - t0
        return rep

    def _step_blend(self, inputs: FrameInputs, rep: StepReport, t0: float) -> StepReport:
        """A frame of a blend of keys: the code (sliders, or markers by :meth:`_fit_blend`),
        the skin ``L [z, angle, 1]``, and where it touches a collider the contact's change
        (two full solves); the flesh is left unsolved otherwise (:meth:`positions`)."""
        import time

        m = self.model
        eq = None
        if inputs.markers is not None:
            mk: Markers = inputs.markers
            theta = self.theta if self.jaw_from_markers else None
            head = self.head if self.head_from_markers else None
            self.z, _, _, rep.newton_iters = self._fit_blend(
                mk.positions,
                mk.vertices,
                mk.weights,
                self.jaw,
                self.z,
                self.marker_pull,
                self.marker_iters,
                self.marker_rtol,
                theta,
                head,
            )
            eq = self._fit_eq
            if theta is not None:  # the markers turned the jaw
                self.theta = self.fitted_theta
                self.jaw = m.jaw_matrix(self.theta)
            if head is not None:  # and moved the head
                self.head = np.array(self.fitted_head, float)
        else:
            if inputs.sliders is not None:
                z = np.zeros(m.latent_dim)
                s = np.asarray(inputs.sliders, float).reshape(-1)[: len(z)]
                z[: len(s)] = s
                self.z = z
            self._skin = m.blend_skin(self.z, self.jaw)
            if self.colliders and self.touches(self._skin):
                t1 = time.perf_counter()
                self._skin, _, eq, _ = self.contact_skin(self.z, self.jaw)
                rep.timings["contact_full_solve"] = time.perf_counter() - t1
        self._x_valid = eq is not None
        if eq is not None:
            self.x = eq.x
            rep.residual, rep.converged = eq.residual, eq.converged
            rep.newton_iters += eq.iterations
        else:
            rep.residual, rep.converged = 0.0, True
            self._x0 = self._xc = None  # a later touch starts from rest
        rep.force_residual = rep.residual
        self.frame += 1
        rep.wall_time = time.perf_counter() - t0
        return rep


def play(
    face: ActiveFace,
    *,
    sliders: np.ndarray | None = None,
    markers: np.ndarray | None = None,
    marker_vertices: np.ndarray | None = None,
    jaw: np.ndarray | None = None,
    pc2: str | Path | None = None,
    start_frame: float = 1,
) -> tuple[np.ndarray, list[StepReport]]:
    """Play an animation headless (and bake the skin to PC2).

    Parameters
    ----------
    sliders : (F, d) latent slider values per frame, or
    markers : (F, p, 3) marker positions per frame, with ``marker_vertices`` (p,) skin
        vertices they are bound to
    jaw : (F,) jaw angles (rad) or (F, 4, 4) jaw transforms; closed when None
    pc2 : write the skin frames to this PC2 file

    Returns ``(skin (F, s, 3), reports)``.
    """
    if (sliders is None) == (markers is None):
        raise SimulationError("Play an active face from sliders or from markers (one of them).")
    F = len(sliders) if sliders is not None else len(markers)
    if jaw is not None and len(jaw) != F:
        raise SimulationError(f"The jaw animation has {len(jaw)} frames, the drive has {F}.")
    face.reset()
    skins, reps = [], []
    for f in range(F):
        J = None if jaw is None else jaw[f]
        if J is not None and np.ndim(J) == 0:
            J = face.model.jaw_matrix(float(J))
        inp = FrameInputs(reference_frame=J)
        if sliders is not None:
            inp.sliders = sliders[f]
        else:
            inp.markers = Markers(marker_vertices, markers[f])
        reps.append(face.step(inp))
        skins.append(face.skin_positions())
    skins = np.array(skins)
    if pc2 is not None:
        from ...data.pc2 import write_pc2

        write_pc2(pc2, skins, start_frame=start_frame)
    return skins, reps
