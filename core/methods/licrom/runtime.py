"""The LiCROM runtime: backward Euler in the span of the neural field evaluated on a mesh, and
its mesh swap (:mod:`core.methods.licrom`)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve, eigh
from scipy.spatial import cKDTree

from ...engine.protocol import FrameInputs, StepReport
from ...errors import NeuralRomError, SimulationError
from ...physics import fem as _fem
from ...physics.colliders import Collider
from ...physics.sim import SimSettings
from ...reduced.integrator import SubspaceSimulation
from ...reduced.model import run_frame
from ...reduced.pose import Pose
from .cubature import (
    CUBATURE_POOL,
    CUBATURE_POSES,
    CUBATURE_TARGET,
    fitted_cubature,
    mesh_seed,
    random_cubature,
)
from .field import Domain, DomainReport, Field, OutOfDomainWarning, PinPoints, PinWarning
from .modes import (
    STATIC_POSES,
    body_frames,
    orthonormal,
    rigid_modes,
    rotation,
    static_modes,
    stiffness_metric,
)
from .settings import CUBATURES, SOLVERS

#: A floating frame's substep is solved again in the frame its solution turned to while the
#: rotation modes' part of it exceeds this many radians (a linear rotation by ``w`` stretches
#: the body by ``w^2 / 2``; the elastic energy of that stretch resisted a torque's turn: a
#: couple on the rounded cube turned it 5.4 degrees in one frame where full space turns it
#: 10), at most :data:`FRAME_SOLVES` solves.
FRAME_TURN = 0.01
FRAME_SOLVES = 4


#: Types of a floating frame's held forces in a state: loaded rows, their forces in world
#: axes (r, 3), N, and their reduced force when they were given (k,).
HELD_TYPES = (np.int64, np.float64, np.float64)


# ------------------------------------------------------------------------------------------
# The runtime
# ------------------------------------------------------------------------------------------


@dataclass
class SwapReport:
    """What a mesh swap did: seconds it took, kinetic energy before and after (J; after is
    never more), the new mesh's nodes, elements and cubature elements, its domain report and
    how its cubature was made (``method``: "optimized" (fitted), "random" or "exact";
    ``seconds``; for a fitted one :class:`.cubature.Cubature`'s ``info``, with ``cached``)."""

    seconds: float
    kinetic_before: float
    kinetic_after: float
    vertices: int
    elements: int
    cubature_elements: int
    domain: DomainReport
    cubature: dict = dataclasses.field(default_factory=dict)


class LicromSimulation(SubspaceSimulation):
    """Backward Euler in the span of a neural field evaluated on a mesh.

    Parameters
    ----------
    field : Field
    X : (n, 3) float array, rest positions of the mesh it runs on (metres, the model's space)
    T : (m, 4) int array
    material : fem.Material
    settings : SimSettings
    pins : PinPoints, the model's pins (None: none)
    pinned : (p,) int array, the mesh's pinned nodes (its pin group); None: the nodes at the
        model's pinned points (:meth:`PinPoints.select`). Either way they are checked against
        the model's pins (:attr:`pin_report`, warned about) and the basis is zero there
    domain : Domain to report the mesh against (None: not checked)
    cubature : "fitted" (default): weights fitted on each mesh to the reduced forces of the
        ``codes`` (:func:`fitted_cubature`; without codes, as "random" with a warning);
        "random": :func:`random_cubature` on ``cubature_vertices`` vertices
    codes : (c, r) float array, latent codes of training frames (the fitted cubature's poses)
    cubature_target, max_cubature, cubature_poses : the fitted cubature's relative force
        error, most elements and poses (:func:`fitted_cubature`)
    cubature_vertices : vertices of the random cubature (0: every element, exact, in either
        mode)
    seed : seed of the cubature (mixed with each mesh's hash)
    solver : "newton" (default) or "gradient" (the paper's scheme)
    gradient_iterations : steps of the gradient scheme per substep
    colliders : list of Collider
    origin : (3,) float array, metres: the point of ``X``'s space that is the reference
        space's origin (the field, its pins and its domain are evaluated at ``X - origin``;
        the simulation itself runs in ``X``'s space); None: zero
    floating : the field was trained in the body frame (:data:`FRAME_FLOATING`): on a mesh
        with no pinned node the basis gets six rigid modes (:func:`rigid_modes`, about the
        training domain's centre) and their motion is moved into the frame after every step
        (see the module doc); ``q`` is then (r + 6,)
    invariant_rotation : with a floating frame, evaluate the elastic energy through
        :meth:`_rotation_invariance` (the ``invariant_rotation`` setting), so the internal
        forces keep the reduced angular momentum
    static : on a mesh with pinned nodes, the mesh's three :func:`static_modes` join the
        field's basis (the ``static_modes`` setting); ``q`` is then (r + 3,), the same
        coordinates on every mesh (the sag of that mesh under 1 g along x, y, z)
    static_derivatives : with ``static``, the static modes' six modal derivatives join them
        (:func:`static_modes`' ``derivatives``; the ``static_derivatives`` setting); ``q``
        is then (r + 9,)
    """

    def __init__(
        self,
        field: Field,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        settings: SimSettings | None = None,
        pins: PinPoints | None = None,
        domain: Domain | None = None,
        cubature_vertices: int = 200,
        seed: int = 0,
        solver: str = "newton",
        gradient_iterations: int = 10,
        colliders: list[Collider] | None = None,
        origin: np.ndarray | None = None,
        cubature: str = "fitted",
        codes: np.ndarray | None = None,
        cubature_target: float = CUBATURE_TARGET,
        max_cubature: int = 500,
        cubature_poses: int = CUBATURE_POSES,
        floating: bool = False,
        invariant_rotation: bool = False,
        pinned: np.ndarray | None = None,
        static: bool = False,
        static_derivatives: bool = False,
    ) -> None:
        if solver not in SOLVERS:
            raise SimulationError(f"Unknown LiCROM solver {solver!r}; use one of {SOLVERS}.")
        if cubature not in CUBATURES:
            raise SimulationError(f"Unknown LiCROM cubature {cubature!r}; use one of {CUBATURES}.")
        self.cubature = cubature
        self.codes = None if codes is None else np.asarray(codes, dtype=np.float64)
        self.cubature_target = float(cubature_target)
        self.max_cubature = int(max_cubature)
        self.cubature_poses = int(cubature_poses)
        self.cubature_info: dict = {}
        self.warnings: list[str] = []
        if cubature == "fitted" and (self.codes is None or len(self.codes) == 0):
            self.cubature = "random"
            self.warnings.append(
                "This LiCROM model carries no latent codes of its training frames (it predates "
                "fitted cubature), so its cubature is random vertices, which gives the body an "
                "uneven stiffness; retrain it for a cubature fitted on each mesh."
            )
        self.field = field
        self.material = material
        self.pins = pins or PinPoints.none()
        self.domain = domain
        self.cubature_vertices = int(cubature_vertices)
        self.seed = int(seed)
        self.solver = solver
        self.gradient_iterations = int(gradient_iterations)
        self.origin = np.zeros(3) if origin is None else np.asarray(origin, np.float64).reshape(3)
        self.floating_field = bool(floating)
        self.invariant_rotation = bool(invariant_rotation)
        self.static = bool(static)
        self.static_derivatives = bool(static_derivatives)
        # the rotations' centre: one point of the model's space, the same on every mesh, so a
        # state carries over a mesh swap (any point spans the same six modes)
        self.rigid_centre = np.asarray(field.center, np.float64) + self.origin
        self._build(X, T, settings, colliders, pinned)
        self.reset()

    def _basis_key(self, pinned: np.ndarray) -> bytes:
        """Bytes that determine the basis on a mesh besides its nodes: the field's weights,
        the origin and the pinned nodes (for :func:`fitted_cubature`'s cache)."""
        h = hashlib.blake2b(digest_size=16)
        arrays, _ = self.field.to_arrays()
        for name in sorted(arrays):
            h.update(name.encode())
            h.update(np.ascontiguousarray(arrays[name]).tobytes())
        h.update(np.ascontiguousarray(self.origin, dtype=np.float64).tobytes())
        h.update(np.ascontiguousarray(pinned, dtype=np.int64).tobytes())
        h.update(b"static" if self.static else b"field")
        h.update(b"derivatives" if self.static_derivatives else b"")
        return h.digest()

    def _build(self, X, T, settings, colliders, pinned=None) -> None:
        """Basis, pins, cubature and everything :meth:`_setup` derives, on mesh ``(X, T)``."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        T = np.ascontiguousarray(T, dtype=np.int64)
        if X.ndim != 2 or X.shape[1] != 3 or T.ndim != 2 or T.shape[1] != 4 or len(T) == 0:
            raise SimulationError("A LiCROM mesh needs nodes (n, 3) and tets (m, 4).")
        if T.min() < 0 or T.max() >= len(X):
            raise SimulationError("The mesh's tets index nodes it does not have.")
        t0 = time.perf_counter()
        X_ref = X - self.origin
        U = self.field.basis(X_ref)
        self.field_seconds = time.perf_counter() - t0
        if pinned is None:
            pinned = self.pins.select(X_ref)
        pinned = np.unique(np.asarray(pinned, dtype=np.int64))
        if pinned.size and (pinned[0] < 0 or pinned[-1] >= len(X)):
            raise SimulationError("The pinned nodes given are not nodes of the mesh.")
        if pinned.size:
            U.reshape(len(X), 3, -1)[pinned] = 0.0
        self.pin_report = self.pins.check(X_ref, pinned) if (self.pins or pinned.size) else None
        if self.pin_report is not None and self.pin_report.warn:
            msg = self.pin_report.message()
            self.warnings.append(msg)
            warnings.warn(msg, PinWarning, stacklevel=3)
        self.domain_report = self.domain.report(X_ref) if self.domain is not None else None
        if self.domain_report is not None and self.domain_report.warn:
            msg = self.domain_report.message()
            self.warnings.append(msg)
            warnings.warn(msg, OutOfDomainWarning, stacklevel=3)
        # the field's coordinates of the codes (a model with Static Derivatives keeps the
        # training frames' static coordinates after them)
        codes = None if self.codes is None else self.codes[:, : U.shape[1]]
        K, self.static_seconds = None, 0.0
        fem = _fem.TetFEM(X, T, self.material)  # shared by the static modes and the cubature
        if self.static and pinned.size:
            # the mesh's own sag: what a field fits only as well as it trained (a ring of the
            # issue's family sagged 9% less than full space with the field alone)
            t0 = time.perf_counter()
            K = fem.hessian(X, project=False)  # the rest stiffness (CSR)
            S = static_modes(
                X, T, self.material, pinned, K=K, derivatives=self.static_derivatives, fem=fem
            )
            U = np.hstack([U, S])
            self.static_seconds = time.perf_counter() - t0
            if codes is not None and self.codes.shape[1] >= U.shape[1]:
                codes = self.codes[:, : U.shape[1]]  # the training frames' own
            elif codes is not None and len(codes):
                # codes of the field alone: the cubature's poses sag a little more, up to
                # 0.3 g along each axis, seeded (codes in the whole basis are the training
                # frames' own coordinates: see training_codes)
                rng = np.random.default_rng([self.seed, 3])
                s = STATIC_POSES * rng.uniform(-1.0, 1.0, (len(codes), 3))
                if self.static_derivatives:  # and bend as far as that sag's second order
                    i, j = np.triu_indices(3)
                    s = np.hstack([s, 0.5 * s[:, i] * s[:, j]])
                codes = np.hstack([codes, s])
        t0 = time.perf_counter()
        cub, self.cubature_info = None, {"method": "exact"}
        if self.cubature_vertices > 0 and self.cubature == "fitted":
            try:
                c = fitted_cubature(
                    X,
                    T,
                    self.material,
                    U,
                    codes,
                    target=self.cubature_target,
                    max_elements=self.max_cubature,
                    poses=self.cubature_poses,
                    pool=CUBATURE_POOL,
                    seed=mesh_seed(self.seed, X, T),
                    basis_key=self._basis_key(pinned),
                    fem=fem,
                    # with the static modes, fitted to the forces in a stiffness-orthonormal
                    # basis of the same span: the sag's large, easy forces would otherwise
                    # meet the target alone and leave the field's part unfitted
                    metric=None if K is None else stiffness_metric(U, K),
                )
                cub, self.cubature_info = (c.elements, c.weights), dict(c.info)
            except NeuralRomError:
                # no pose deforms this mesh (its nodes all pinned, or codes of rest): nothing
                # to fit, and any rule is exact on it
                self.cubature_info = {"fallback": "no pose deforms this mesh"}
        if self.cubature_vertices > 0 and cub is None:
            cub = random_cubature(T, len(X), self.cubature_vertices, mesh_seed(self.seed, X, T))
            self.cubature_info.update(method="random", vertices=self.cubature_vertices)
        self.cubature_info["seconds"] = time.perf_counter() - t0
        self.T = T
        self.r = U.shape[1]
        # a free body of a body-frame field: the rigid modes join the basis in the solve
        self.floating = self.floating_field and not pinned.size
        if self.floating:
            U = np.hstack([U, rigid_modes(X, self.rigid_centre)])
        self._setup(X, T, self.material, U, settings, pinned, cub, None, colliders)
        self._gd = None
        # the contact terms kept for the last q and the plane rows belong to the old basis
        self.__dict__.pop("_contact_memo", None)
        self.__dict__.pop("_plane_cache", None)
        self._moments = self._invariance = None
        if self.floating:
            # mass moments of y = X + U q about the rest centre of mass, linear in q: the
            # Kabsch fit of a predicted pose costs O(9 k) (see _predict_frame)
            w = self.mass / self.mass.sum()
            Xb = w @ self.X
            Uv = self.U.reshape(len(self.X), 3, self.k)
            dX = (self.mass[:, None] * (self.X - Xb)).T  # (3, n)
            S0 = dX @ self.X  # sum_i m_i (X_i - Xb) X_i^T, transposed below
            S = np.einsum("bn,nak->kab", dX, Uv)  # (k, 3, 3): sum_i m_i U_ij (X_i - Xb)^T
            self._moments = (Xb, S0.T, S, np.einsum("n,nak->ak", w, Uv))
            # Z(q) = M~^{-1} U^T M (e x (X - o + U q)) = E_rot + M~^{-1} G q, with
            # G_(l, e), j = sum_i m_i U_il . (e x U_ij) (see _rotation_invariance)
            G = np.empty((self.k, 3, self.k))
            mU = self.mass[:, None, None] * Uv
            for e in range(3):
                eU = np.cross(np.eye(3)[e][None, :, None], Uv, axis=1)  # (n, 3, k)
                G[:, e, :] = np.einsum("nal,naj->lj", mU, eU)
            self._rot_Z0 = np.zeros((self.k, 3))
            self._rot_Z0[self.r + 3 : self.r + 6] = np.eye(3)
            self._M_inv_G = np.linalg.solve(self.M_red, G.reshape(self.k, -1)).reshape(G.shape)

    _held_forces = None

    def reset(self, q: np.ndarray | None = None, qdot: np.ndarray | None = None) -> None:
        super().reset(q, qdot)
        self._held_forces = None

    def set_state(self, state: dict) -> None:
        """:meth:`SubspaceSimulation.set_state`; the pins' targets of a state saved on another
        mesh of the object (another pinned count) are those of this mesh's pinned nodes in
        the state's frame."""
        super().set_state(state)
        if len(self.pin_targets) != len(self.pinned):
            self.pin_targets = self.pose.apply(self.X[self.pinned])
        held = state.get("held_forces")
        self._held_forces = None
        if held is not None and len(held[1]) and max(held[0], default=-1) < len(self.X):
            self._held_forces = tuple(np.array(a, dtype=a_t) for a, a_t in zip(held, HELD_TYPES))

    def get_state(self) -> dict:
        """:meth:`SubspaceSimulation.get_state`, with a floating frame's held forces."""
        state = super().get_state()
        if getattr(self, "_held_forces", None) is not None:
            state["held_forces"] = [np.array(a).tolist() for a in self._held_forces]
        return state

    def project_forces(self, forces: np.ndarray) -> np.ndarray:
        """Reduced external force ``U^T f`` of per-vertex forces (n, 3) given in the frame's
        axes. With a floating frame the forces are also kept in world axes (loaded rows only),
        so each substep takes them into the frame it solves in: a poke keeps its world
        direction while the body turns under it."""
        f = super().project_forces(forces)
        if self.floating:
            F = np.asarray(forces, dtype=float).reshape(-1, 3)
            rows = np.flatnonzero(np.any(F != 0, axis=1))
            self._held_forces = (rows, F[rows] @ self.pose.R.T, f)
        return f

    # ---------------------------------------------------------------------- mesh swaps
    def kinetic_energy(self) -> float:
        """``1/2 qdot^T M~ qdot`` (J) on the current mesh; with a floating frame, the kinetic
        energy of the velocity ``(x_n - x_{n-1}) / h`` the state and the frame's last two
        poses give (the rigid motion included)."""
        if not self.floating or self.pose_prev is self.pose:
            return 0.5 * float(self.qdot @ self.M_red @ self.qdot)
        h = self.settings.dt / self.settings.substeps
        n = len(self.X)
        y = self.X + (self.U @ self.q).reshape(n, 3)
        y_p = self.X + (self.U @ (self.q - h * self.qdot)).reshape(n, 3)
        now, prev = self.pose, self.pose_prev
        v = (y - ((y_p @ prev.R.T + prev.c - now.c) @ now.R)) / h  # in the frame of now
        return 0.5 * float(self.mass @ (v**2).sum(1))

    def _settle_frame(self) -> None:
        """Carry the floating frame's velocity in ``qdot`` (the last pose's image of the
        previous positions projected on the basis) and stop the frame: the motion is the
        same but for the part of the velocity outside the basis."""
        if self.pose_prev is self.pose:
            return
        h = self.settings.dt / self.settings.substeps
        q_p = self.q - h * self.qdot
        z = np.zeros_like(q_p)
        q_p = self.pin_frame().targets(h, q_p, z, self.pose_prev, self.pose_prev, self.pose)[1]
        self.qdot = (self.q - q_p) / h
        self.pose_prev = self.pose

    def _predict_frame(self, h: float) -> Pose:
        """The frame a step of ``h`` s goes into: the best rigid motion (mass-weighted Kabsch
        of the rest mesh) onto the inertial prediction ``2 x_n - x_{n-1}``, from the state's
        mass moments (O(k), no pass over the mesh). Solved in it, the rigid modes only
        correct the prediction, so a fast spin is not linearized over a whole step."""
        Xb, S0, S, Ub = self._moments
        now, prev = self.pose, self.pose_prev
        q_n = self.q
        q_p = q_n - h * self.qdot
        Q = now.R.T @ prev.R
        d = now.R.T @ (prev.c - now.c)
        # H = sum_i m_i x~_i (X_i - Xb)^T with x~ = 2 y_n - (Q y_p + d) in the frame of now
        H = 2.0 * (S0 + np.tensordot(q_n, S, 1)) - Q @ (S0 + np.tensordot(q_p, S, 1))
        A, _, Bt = np.linalg.svd(H)
        if np.linalg.det(A @ Bt) < 0:
            A[:, 2] = -A[:, 2]
        K = A @ Bt
        mean = 2.0 * (Xb + Ub @ q_n) - (Q @ (Xb + Ub @ q_p) + d)
        return Pose(orthonormal(now.R @ K), now.R @ (mean - K @ Xb) + now.c)

    def _turned(self, pose: Pose, q: np.ndarray) -> Pose:
        """``pose`` followed by the rigid part of ``q`` (translation ``t``, rotation vector
        ``w`` about :attr:`rigid_centre` ``o``) as a rigid motion: ``y -> R_w (y - o) + o + t``."""
        r, o = self.r, self.rigid_centre
        t, w = q[r : r + 3], q[r + 3 : r + 6]
        dR = rotation(w)
        return Pose(orthonormal(pose.R @ dR), pose.R @ (o + t - dR @ o) + pose.c)

    def _move_rigid_into_frame(self, q_n: np.ndarray, h: float, frame_n: Pose) -> None:
        """After a step of ``h`` s from ``q_n`` in the frame ``pose`` (the frame stayed), move
        the rigid part of the new ``q`` (translation ``t``, rotation vector ``w`` about
        :attr:`rigid_centre`) into the frame: the new frame is ``pose`` followed by the rigid
        motion ``y -> R_w (y - o) + o + t``, ``q`` the projection of the solved positions in
        it and ``qdot = (q - q_n) / h``, so the frame's last two poses carry the rigid
        velocity and :class:`core.reduced.pose.PoseMixin` the exact inertial terms of its motion."""
        now = self.pose
        new = self._turned(now, self.q)
        z = np.zeros_like(self.q)
        q = self.pin_frame().targets(h, self.q, z, now, now, new)[1]
        self.qdot = (q - q_n) / h
        self.q = q
        self.pose_prev, self.pose = frame_n, new

    def pose_of(self, x: np.ndarray) -> Pose:
        """The frame of world positions ``x`` (n, 3): with a floating frame the best rigid
        motion of the rest mesh onto them (:func:`body_frames`), else the pins' frame."""
        if not self.floating:
            return super().pose_of(x)
        R, c = body_frames(self.X, np.asarray(x, dtype=np.float64), self.mass)
        return Pose(R, c)

    def swap_mesh(
        self, X: np.ndarray, T: np.ndarray, pinned: np.ndarray | None = None
    ) -> SwapReport:
        """Continue on another mesh of the object (a remesh, a cut, a hole, elements removed)
        from the current state: ``q``, ``qdot``, the reduced forces, the colliders and the
        pins' frame are kept; basis, masses, pins and cubature are rebuilt on ``(X, T)``.
        ``qdot`` is scaled down when the new reduced mass would raise the kinetic energy.
        With Static Modes the static coordinates are each mesh's own sag under 1 g, so the
        shape moves at once by the two meshes' sag difference at them (a more compliant mesh
        sags more at the same coordinates).
        ``pinned`` (p,): the new mesh's pinned nodes (its pin group); None: its nodes at the
        rest positions of the pinned nodes now (an edit that kept the pinned vertices).

        Raises SimulationError (and changes nothing) for a mesh that is not a tet mesh.
        """
        t0 = time.perf_counter()
        before = self.kinetic_energy()
        old = self.__dict__.copy()
        state = self.get_state()
        # the displacement and velocity of the old mesh's nodes in the frame
        shape = (self.X, (self.U @ self.q).reshape(-1, 3), (self.U @ self.qdot).reshape(-1, 3))
        if pinned is None and self.pinned.size:
            d = cKDTree(self.X[self.pinned]).query(np.asarray(X, dtype=np.float64))[0]
            pinned = np.flatnonzero(d <= max(self.pins.tolerance, 1e-9))
        try:
            self._build(X, T, self.settings, self.colliders, pinned)
            if self.k != len(state["q"]):
                raise SimulationError(
                    "The new mesh has pinned nodes where the old one had none (or the reverse): "
                    "a free body's state (six rigid coordinates) does not carry over to a "
                    "pinned one. Swap to a mesh pinned as the old one, or start a new run."
                )
        except Exception:
            self.__dict__.update(old)
            raise
        self._pin_frame = None
        self.set_state(state)
        if self.static_derivatives and self.static and self.pinned.size:
            self._keep_shape(*shape)
        self._held_forces = None  # rows of the old mesh; its reduced force is kept
        # the pins' targets are the new pinned nodes where the frame has put them
        self.pin_targets = self.pose.apply(self.X[self.pinned])
        after = self.kinetic_energy()
        if after > before and self.floating:
            # the frame's velocity into qdot (projected: no more energy), where it can scale
            self._settle_frame()
            after = self.kinetic_energy()
        if after > before:
            # a hair under the old energy, so the rounding of the scaled one cannot top it
            scale = math.sqrt(before / after) * (1.0 - 1e-12)
            self.qdot = self.qdot * scale if after > 0 else self.qdot
            after = self.kinetic_energy()
        return SwapReport(
            time.perf_counter() - t0,
            before,
            after,
            len(self.X),
            len(self.T),
            len(self.elements),
            self.domain_report,
            dict(self.cubature_info),
        )

    def _keep_shape(self, X_old: np.ndarray, u_old: np.ndarray, v_old: np.ndarray) -> None:
        """After a swap with Static Derivatives: the static coordinates and their derivatives'
        (the mesh's own block, after the field's) refitted, mass-weighted least squares, to
        the displacement ``u_old`` and velocity ``v_old`` (n_old, 3) the old mesh ``X_old``
        had at the nodes the two meshes share (rest positions within 1e-9 of the mesh's
        size); the field's coordinates are kept. The second-order block would otherwise
        move the shape by the two meshes' second-order terms at once. A mesh sharing fewer
        than four nodes (a remesh) keeps the coordinates as they are."""
        size = float(np.linalg.norm(self.X.max(0) - self.X.min(0))) or 1.0
        d, j = cKDTree(X_old).query(self.X)
        shared = np.flatnonzero(d <= 1e-9 * size)
        if len(shared) < 4:
            return
        f, n = self.field.r, len(self.X)
        block = np.arange(f, self.r)
        Uv = self.U.reshape(n, 3, self.k)[shared]
        w = np.sqrt(self.mass[shared])[:, None, None]
        A = (w * Uv[:, :, block]).reshape(-1, len(block))
        for name, target in (("q", u_old), ("qdot", v_old)):
            c = getattr(self, name).copy()
            rest = Uv[:, :, :f] @ c[:f]  # the field's part at the shared nodes
            b = (w[:, :, 0] * (target[j[shared]] - rest)).ravel()
            c[block] = np.linalg.lstsq(A, b, rcond=None)[0]
            setattr(self, name, c)

    # ------------------------------------------------------------------------- solvers
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame with the Newton solver (default) or the paper's gradient steps;
        with a floating frame, each substep's rigid motion is then moved into the frame."""
        solve = self._gradient_descent if self.solver == "gradient" else self._backward_euler
        if not self.floating:
            return run_frame(self, inputs, solve, "LiCROM")

        n_sub, done = int(self.settings.substeps), [0]

        def substep(h, f_ext, colliders, pose=None):
            start = (self.q, self.qdot, self.pose, self.pose_prev)
            new = self._predict_frame(h)
            if self.invariant_rotation:
                self._invariance = self._rotation_invariance(self.q)
            done[0] += 1
            held = self._held_forces
            iters = 0
            for attempt in range(FRAME_SOLVES):
                f = f_ext
                if held is not None and len(held[0]):
                    # run_frame projected this frame's forces in the frame at its start:
                    # their share of this substep's force is taken in the frame solved in
                    rows, F, f_start = held
                    Ur = self.U.reshape(-1, 3, self.k)[rows]
                    f_new = np.einsum("rak,ra->k", Ur, F @ new.R)
                    f = f_ext + (done[0] / n_sub) * (f_new - f_start)
                rep = solve(h, f, colliders, new)
                iters += rep.newton_iters
                if self.q is start[0]:  # not accepted: run_frame restores and says so
                    return rep
                w = float(np.linalg.norm(self.q[self.r + 3 : self.r + 6]))
                if w <= FRAME_TURN or attempt == FRAME_SOLVES - 1:
                    break
                # the forces turned the body further than its inertia predicted: a turn this
                # large is not linear in the rotation modes, so solve again in the turned frame
                new = self._turned(new, self.q)
                self.q, self.qdot, self.pose, self.pose_prev = start
            rep.newton_iters = iters
            self._move_rigid_into_frame(start[0], h, start[2])
            return rep

        return run_frame(self, inputs, substep, "LiCROM")

    def _gradient_setup(self, h: float):
        """``(cho(M~/h^2), step)`` of the gradient scheme for substep ``h``: the step
        ``1 / (1 + lambda_max(h^2 M~^{-1} K~_rest))`` keeps the iteration stable."""
        if self._gd is None or self._gd[0] != h:
            K = self._elastic(np.zeros(self.k), 2, project=False)[2]
            lam = float(eigh(K, self.M_red, eigvals_only=True)[-1]) * h**2
            self._gd = (h, cho_factor(self.M_red / h**2), 1.0 / (1.0 + max(lam, 0.0)), K)
        return self._gd[1:]

    def _gradient_descent(self, h: float, f_ext: np.ndarray, colliders, pose=None) -> StepReport:
        """The paper's minimization (sec. 5): from the explicit prediction, a fixed number of
        mass-preconditioned gradient steps on the incremental potential (eq. 9-10)."""
        s = self.settings
        cho, a, K0 = self._gradient_setup(h)
        q_tilde, q_damp, f_grav, colliders = self.step_terms(h, pose, colliders)
        f = f_ext + f_grav
        M_h = self.M_red / h**2
        D_h = self.M_red * (s.damping_alpha / h) + K0 * (s.damping_beta / h)
        q = q_tilde.copy()
        rep = StepReport(substeps=1)
        for _ in range(max(self.gradient_iterations, 1)):
            g = M_h @ (q - q_tilde) + D_h @ (q - q_damp) + self._elastic(q, 1)[1] - f
            g_c = self._contact(q, colliders, hessian=False)[1]
            if g_c is not None:
                g = g + g_c
            if not np.all(np.isfinite(g)):  # diverged: run_frame restores and says so
                rep.converged = rep.line_search_ok = False
                return rep
            q = q - a * cho_solve(cho, g)
            rep.newton_iters += 1
        rep.converged = bool(np.all(np.isfinite(q)))
        rep.line_search_ok = rep.converged
        if rep.converged:
            self.qdot = (q - self.q) / h
            self.q = q
            self._advance_frame(pose)
        return rep

    def _elastic(self, q: np.ndarray, order: int, project: bool = True):
        """:meth:`SubspaceSimulation._elastic`; with a floating frame, at ``S q``
        (:meth:`_rotation_invariance`), so the energy does not change along the subspace's
        best image of an infinitesimal rotation of the body's shape at the substep's start."""
        S = self._invariance if self.floating else None
        if S is None:
            return super()._elastic(q, order, project)
        e, g, H = super()._elastic(S @ q, order, project)
        return e, None if g is None else S.T @ g, None if H is None else S.T @ H @ S

    _invariance = None

    def _rotation_invariance(self, q: np.ndarray) -> np.ndarray:
        """The map ``S`` (k, k) the elastic energy is evaluated through in a substep from
        ``q``: it zeroes the rotation coordinates by moving along ``Z``, the mass-weighted
        projections on the basis of the infinitesimal rotations ``e x (y - o)`` of the shape
        ``y = X + U q`` (``S Z = 0``, ``S = I - Z (E^T Z)^{-1} E^T``).

        The rotation modes turn the rest shape (``e x (X - o)``), not the deformed one: a
        linear subspace's internal forces then carry a torque ``-<(e x u)_perp, f>`` (the
        part of ``e x u`` outside the basis), and an impact set a free body spinning (a
        dropped ring yawed at 0.015 degrees a frame on the ground). With the energy
        invariant along ``Z`` the reduced angular momentum ``Z^T M~ qdot`` changes by the
        external torques only."""
        r = self.r
        Z = self._rot_Z0 + self._M_inv_G @ q  # (k, 3)
        E = np.zeros((self.k, 3))
        E[r + 3 : r + 6] = np.eye(3)
        return np.eye(self.k) - Z @ np.linalg.solve(Z[r + 3 : r + 6], E.T)

    # ------------------------------------------------------------- poses <-> states
    def latent_of(self, x: np.ndarray) -> np.ndarray:
        """The latent code (k,) of world positions ``x`` (n, 3) of this mesh: the mass-weighted
        least-squares fit on the basis in the frame of ``x`` (the runtime never needs the
        encoder); ``k = r``, or ``r + 6`` with a floating frame (the rigid coordinates last,
        near zero: the frame is ``x``'s best rigid motion)."""
        y, _, _ = self._in_pin_frame(np.asarray(x, dtype=np.float64))
        return self.closest_q(y)
