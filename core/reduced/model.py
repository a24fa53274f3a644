"""What the subspace runtimes share: the basis, masses, cubature sub-mesh, contact sample and
pins' frame (:class:`SubspaceModel`), the frame loop with substeps and pin interpolation
(:func:`run_frame`), the closest-shape and start-from-a-pose maps the comparison needs, and
the arrays every subspace model file has (:func:`subspace_payload` / :func:`subspace_arguments`).

The shared settings records are in :mod:`.settings`, the decoder's ONNX graph in :mod:`.onnx`;
their names stay importable from here, as this module was ``core.methods.common``, which
plug-ins import. The runtimes built on this module: :mod:`.integrator` (backward Euler in a
linear subspace: the linear method, LiCROM), :mod:`core.methods.autoencoder` (Fulton 2019,
L-BFGS in latent space) and :mod:`core.methods.shen`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from ..data.modelfile import save_model
from ..engine.protocol import FrameInputs, SimulatorBase, StepReport
from ..errors import SimulationError
from ..physics import fem as _fem
from ..physics.colliders import Collider, ContactPoints, penalty_stiffness
from ..physics.sim import SimSettings, boundary_vertices, lerp_colliders
from .cubature import Cubature
from .onnx import ONNX_POSITIONS as ONNX_POSITIONS
from .onnx import onnx_decoder_graph as onnx_decoder_graph
from .pose import IDENTITY, PoseMixin, interpolate
from .settings import SUBSPACE_SETTING as SUBSPACE_SETTING
from .settings import SUBSPACE_SETTINGS as SUBSPACE_SETTINGS
from .settings import TRAINER_SETTING as TRAINER_SETTING
from .settings import TRAINER_SETTINGS as TRAINER_SETTINGS
from .subspace import Subspace

#: Frame inputs every subspace runtime takes.
SUBSPACE_INPUTS = frozenset({"forces", "pin_targets", "colliders"})


def subspace_payload(
    T, subspace: Subspace, cubature: Cubature, contact, material, settings: SimSettings
) -> tuple[dict, dict]:
    """Arrays and metadata every subspace model file has: basis, cubature, contact, physics.

    Parameters
    ----------
    T : (m, 4) int array
    subspace, cubature : the trained basis and cubature rule
    contact : ContactPoints, or (vertices (s,), masses (s,)): the contact sample
    material, settings : the physics the model steps with

    The contact sample is stored as ``contact_vertices`` (s,) and ``contact_mass`` (s,) when
    its points are vertices (as every model before embedded contact), and as
    ``contact_vertices`` (s, a), ``contact_weights`` (s, a) and ``contact_mass`` when they are
    carried by several nodes each (an embedded render surface).
    """
    contact = as_contact_points(contact)
    arrays = {
        "X": subspace.X,
        "T": np.asarray(T, dtype=np.int64),
        "U": subspace.U,
        "mass": subspace.mass,
        "pinned": subspace.pinned,
        "cubature_elements": cubature.elements,
        "cubature_weights": cubature.weights,
        "contact_vertices": contact.nodes[:, 0] if contact.is_vertices else contact.nodes,
        "contact_mass": contact.mass,
    }
    if not contact.is_vertices:
        arrays["contact_weights"] = contact.weights
    meta = {
        "material": material.to_dict(),
        "settings": settings.to_dict(),
        "subspace": {"kind": subspace.kind, "k": subspace.k, "info": subspace.info},
        "cubature": cubature.info,
    }
    return arrays, meta


def save_subspace_model(
    path: str | Path,
    method: str,
    *,
    mesh_hash: str,
    T: np.ndarray,
    subspace: Subspace,
    cubature: Cubature,
    contact: ContactPoints | tuple[np.ndarray, np.ndarray],
    material: _fem.Material,
    settings: SimSettings,
    arrays: dict | None = None,
    metadata: dict | None = None,
) -> Path:
    """Write a subspace model file of ``method``: what every subspace model holds
    (:func:`subspace_payload`), then the method's own ``arrays`` and ``metadata``.

    Parameters
    ----------
    path : target ``.nrmodel`` file (written atomically)
    method : the registered name the file records (the method that loads it)
    mesh_hash : hash of the tet mesh (world space, as baked) the model belongs to
    T : (m, 4) int array
    subspace, cubature : the trained basis and cubature rule
    contact : ContactPoints or (vertices (s,), masses (s,)): the contact sample
    material, settings : the physics the model steps with
    arrays : the method's own arrays (a decoder's weights)
    metadata : JSON-able extras merged into the file's metadata (training settings, metrics)
    """
    payload, meta = subspace_payload(T, subspace, cubature, contact, material, settings)
    payload.update(arrays or {})
    meta.update(metadata or {})
    return save_model(path, method=method, mesh_hash=mesh_hash, arrays=payload, metadata=meta)


def subspace_arguments(model, settings: SimSettings | None, colliders) -> dict:
    """The constructor arguments of a subspace runtime from an opened model file (the
    inverse of :func:`subspace_payload`); ``settings`` overrides the stored time step (and
    the stored contact stiffness only when it sets one)."""
    a, meta = model.arrays, model.metadata
    stored = SimSettings(**meta["settings"])
    if settings is not None and settings.contact_stiffness is None:
        # a new time step keeps the contact the model was trained with
        settings = dataclasses.replace(settings, contact_stiffness=stored.contact_stiffness)
    return {
        "X": a["X"],
        "T": a["T"],
        "material": _fem.Material.from_dict(meta["material"]),
        "U": a["U"],
        "settings": settings or stored,
        "pinned": a["pinned"],
        "cubature": (a["cubature_elements"], a["cubature_weights"]),
        # a model without weights (every model before embedded contact) has vertex contact
        "contact": ContactPoints(
            a["contact_vertices"], a["contact_mass"], a.get("contact_weights")
        ),
        "colliders": colliders,
    }


def as_contact_points(contact) -> ContactPoints:
    """A :class:`ContactPoints` from itself or from a ``(vertices (s,), masses (s,))`` pair."""
    if isinstance(contact, ContactPoints):
        return contact
    return ContactPoints.at_vertices(contact[0], contact[1])


def surface_sample(
    X: np.ndarray, points: ContactPoints, count: int = 512, seed: int = 0
) -> ContactPoints:
    """A farthest-point sample of contact points, with their masses gathered.

    Parameters
    ----------
    X : (n, 3) float array
        Rest node positions, metres.
    points : ContactPoints
        The points that can touch: a tet mesh's surface vertices or an embedded render
        surface's points (:meth:`.bake.BakeSpec.contact_points`).
    count : int
        Sample size (all points when there are fewer).

    Returns
    -------
    ContactPoints
        The sampled points (nodes and weights as in ``points``); each carries the mass of
        the points nearest to it at rest, so the masses sum to those of ``points``.
    """
    if len(points) <= count:
        return points
    P = points.positions(np.asarray(X, dtype=np.float64))
    chosen = farthest_points(P, count, seed)
    owner = cKDTree(P[chosen]).query(P)[1]
    mass = np.bincount(owner, weights=points.mass, minlength=len(chosen))
    return ContactPoints(points.nodes[chosen], mass, points.weights[chosen])


def farthest_points(P: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """Indices (count,) of a farthest-point sample of points ``P`` (s, 3), starting from a
    seeded random point; all of them when ``count >= s``."""
    if count >= len(P):
        return np.arange(len(P))
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(len(P)))]
    d = np.linalg.norm(P - P[chosen[0]], axis=1)
    for _ in range(count - 1):  # O(count * s): a precomputation, not per frame
        i = int(np.argmax(d))
        chosen.append(i)
        d = np.minimum(d, np.linalg.norm(P - P[i], axis=1))
    return np.array(chosen)


class SubspaceModel(PoseMixin, SimulatorBase):
    """What every subspace runtime shares: the basis ``U`` (3n, k), lumped masses, the
    reduced mass matrix and gravity, the cubature sub-mesh, the contact sample, the
    colliders and the pins' frame (:class:`core.reduced.pose.PoseMixin`).

    Subclasses call :meth:`_setup` with the constructor arguments documented on
    :class:`.integrator.SubspaceSimulation`.
    """

    def get_state(self) -> dict:
        """The reduced coordinates ``q``, their velocity, the frame, the last reduced forces,
        the colliders and the pins' frame (subclasses add what else they carry)."""
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

    def _setup(
        self,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        U: np.ndarray,
        settings: SimSettings | None,
        pinned,
        cubature: tuple[np.ndarray, np.ndarray] | None,
        contact: ContactPoints | tuple[np.ndarray, np.ndarray] | None,
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
        # contact sample: its points P = W x move by U_contact = W U (p, 3, k)
        if contact is None:
            surface = boundary_vertices(T)
            contact = surface_sample(self.X, ContactPoints.at_vertices(surface, mass[surface]))
        self.contact = as_contact_points(contact)
        self.contact.check(n)
        self.contact_mass = self.contact.mass
        self.contact_rest = self.contact.positions(self.X)
        self.U_contact = np.ascontiguousarray(self.contact.carry(self.U.reshape(n, 3, self.k)))
        self._U_contact_flat = self.U_contact.reshape(-1, self.k)  # (3p, k), a view
        self.colliders = list(colliders or [])
        L = float(np.linalg.norm(self.X.max(0) - self.X.min(0)))
        self.length_scale = L if L > 0 else 1.0
        gn = float(np.linalg.norm(g)) or 9.81
        # the bakes' stiffness when the model file stores it (SimSettings.to_dict), else the
        # rest rule full space used: the same contact in both
        self.kappa = (
            float(self.settings.contact_stiffness)
            if self.settings.contact_stiffness is not None
            else penalty_stiffness(self.length_scale, gn)
        )

    def elastic_terms(self, q: np.ndarray, order: int, project: bool):
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

    def project_forces(self, forces: np.ndarray) -> np.ndarray:
        """Reduced external force ``U^T f`` of per-vertex forces (n, 3); only loaded rows cost."""
        f = np.asarray(forces, dtype=float).reshape(-1, 3)
        rows = np.flatnonzero(np.any(f != 0, axis=1))
        if rows.size == 0:
            return np.zeros(self.k)
        Ur = self.U.reshape(-1, 3, self.k)[rows]
        return np.einsum("rak,ra->k", Ur, f[rows])

    # ------------------------------------------------------ protocol: poses <-> states
    def rest_positions(self) -> np.ndarray:
        """(n, 3) rest positions, metres (world space, as baked)."""
        return self.X.copy()

    def _in_pin_frame(self, x: np.ndarray, v: np.ndarray | None = None):
        """World positions (and velocities) in the pins' frame fitted to ``x``, and the frame
        (None when the pins are at rest)."""
        pose = self.pose_of(x)
        if pose is None or pose.is_identity:
            return x, v, None
        return (x - pose.c) @ pose.R, (None if v is None else v @ pose.R), pose

    def closest_q(self, y: np.ndarray) -> np.ndarray:
        """Reduced coordinates (k,) of the model's closest shape to positions ``y`` (n, 3) in
        the pins' frame: the mass-weighted projection ``(U^T M U)^{-1} U^T M (y - X)``."""
        m3 = np.repeat(self.mass, 3)
        return np.linalg.solve(self.M_red, self.U.T @ (m3 * (y - self.X).ravel()))

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        """The model's closest shape (n, 3) to world positions ``x`` (n, 3), metres, taken in
        the pins' frame of ``x``."""
        y, _, pose = self._in_pin_frame(np.asarray(x, dtype=np.float64))
        shape = self.X + (self.U @ self.closest_q(y)).reshape(-1, 3)
        return shape if pose is None else pose.apply(shape)

    def start_from(self, x: np.ndarray, v: np.ndarray, forces: np.ndarray | None = None) -> None:
        """Reset to the closest state to full-space positions ``x`` and velocities ``v``
        (n, 3): mass-weighted projections of ``x - X`` and ``v`` onto the basis, in the pins'
        frame of ``x`` (a latent model encodes them onto its manifold in ``reset``);
        ``forces`` (n, 3), N, world axes, are the external forces the first step ramps from
        (taken into the pins' frame, as :func:`run_frame` takes each frame's)."""
        x = np.asarray(x, dtype=np.float64)
        y, w, pose = self._in_pin_frame(x, np.asarray(v, dtype=np.float64))
        m3 = np.repeat(self.mass, 3)
        rhs = self.U.T @ np.stack([m3 * (y - self.X).ravel(), m3 * w.ravel()], axis=1)
        q, qdot = np.linalg.solve(self.M_red, rhs).T
        self.reset(q=q, qdot=qdot)
        if pose is not None:
            self.place_frame(pose)
        if forces is not None:
            forces = np.asarray(forces, dtype=float).reshape(-1, 3)
            self.f_ext = self.project_forces(forces if pose is None else forces @ pose.R)

    def _contact(self, q: np.ndarray, colliders, hessian: bool = True):
        """Collider penalty on the contact sample at ``q``: energy (J), reduced gradient (k,)
        and, with ``hessian``, reduced Gauss-Newton Hessian (k, k) (None, None without
        colliders; zeros when nothing touches). The points move by ``U_contact = W U``, so
        ``g = U_contact^T dC/dp`` and ``H = U_contact^T H_p U_contact``
        (:class:`.ContactPoints`).

        Only touching points cost beyond their positions: a point ``j`` touching a collider
        with normal ``n_j`` adds the rank-one block ``kappa m_j n_j n_j^T``, so with the rows
        ``b_j = n_j^T U_j`` (k,) of the touching points the reduced terms are
        ``g = -B^T (kappa m pen)`` and ``H = B^T diag(kappa m) B``: one (a, k) product per
        collider instead of the (p, 3, 3) blocks and (3a, k) products of the point Hessian
        (:func:`.colliders.contact_energy`, the same sums; ``tests/test_contact.py``
        checks both agree to rounding).
        """
        if not colliders:
            return 0.0, None, None
        # a Newton loop asks again at the point it has just evaluated (the linear runtime's
        # Hessian after a chord step, a trial point accepted): one result is kept, keyed by
        # everything it depends on (the colliders by value: they may be changed in place)
        key = (
            q.tobytes(),
            self.kappa,
            self.settings.contact_offset,
            tuple((c.kind, c.radius, c.half_length, c.transform.tobytes()) for c in colliders),
        )
        memo = getattr(self, "_contact_memo", None)
        if memo is not None and memo[0] == key and (memo[3] is not None or not hessian):
            return memo[1], memo[2].copy(), (memo[3].copy() if hessian else None)
        e, g_red, H_red = self._contact_terms(q, colliders, hessian)
        self._contact_memo = (key, e, g_red.copy(), None if H_red is None else H_red.copy())
        return e, g_red, H_red

    def _contact_terms(self, q: np.ndarray, colliders, hessian: bool):
        """:meth:`_contact`'s sums over the touching points (colliders given).

        A plane's distances are linear in ``q``: ``phi = (P0 - t) . n + (n^T U_contact) q``,
        so with the rows ``n^T U_j`` (p, k) of its normal kept (a floor's normal does not
        change) it costs a (p, k) product a call and its touching rows are ``B`` as they are;
        the other colliders take the points' positions (a (3p, k) product, once a call).
        """
        k = self.k
        Uc = self.U_contact  # (p, 3, k)
        d_hat = self.settings.contact_offset
        xs = None
        e = 0.0
        g_red = np.zeros(k)
        H_red = np.zeros((k, k)) if hessian else None
        for c in colliders:  # a handful of colliders; the per-point work is vectorized
            if c.kind == "plane":
                normal = c.plane_normal()
                rows, rest = self._plane_rows(normal)
                phi = rest - float(c.transform[:3, 3] @ normal) + rows @ q
                act = np.flatnonzero(phi < d_hat)
                if not act.size:
                    continue
                pen = d_hat - phi[act]
                B = rows[act]  # rows n^T U_j, (a, k)
            else:
                if xs is None:
                    xs = self.contact_rest + (self._U_contact_flat @ q).reshape(-1, 3)
                act, pen, n = c.touching(xs, d_hat)
                if not act.size:
                    continue
                B = np.einsum("aik,ai->ak", Uc[act], n)  # rows n_j^T U_j, (a, k)
            km = self.kappa * self.contact_mass[act]
            f = km * pen
            e += 0.5 * float(f @ pen)
            g_red -= f @ B
            if hessian:
                Bs = np.sqrt(km)[:, None] * B
                H_red += Bs.T @ Bs  # B^T diag(km) B, symmetric to the last bit (syrk)
        return e, g_red, H_red

    def _plane_rows(self, normal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(n^T U_j (p, k), P0 . n (p,))`` of a plane normal, kept for the last few normals
        (a floor's is the same every call; a tilting plane's changes every frame)."""
        cache = self.__dict__.setdefault("_plane_cache", {})
        key = normal.tobytes()
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= 4:
                cache.pop(next(iter(cache)))
            rows = np.ascontiguousarray(np.einsum("pik,i->pk", self.U_contact, normal))
            hit = cache[key] = (rows, self.contact_rest @ normal)
        return hit


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
    """One frame of a subspace simulator: checks the inputs, interpolates the reduced forces,
    the pin targets and the collider transforms over ``settings.substeps`` calls of
    ``substep(h, f_ext, colliders, pose)`` (``pose``: the pins' frame at the end of the
    substep, None when the pins do not move; colliders as :func:`core.physics.sim.lerp_colliders`
    moves them, like the full-space step), and restores the state if a substep diverges.
    Shared by the linear and the latent (autoencoder) runtimes.
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
    f0, c0 = sim.f_ext, sim.colliders
    for i in range(n_sub):
        w = (i + 1) / n_sub
        # colliders move between frames as in full space (core.physics.sim.lerp_colliders)
        sub = substep(h, (1 - w) * f0 + w * f1, lerp_colliders(c0, cols, w), poses[i])
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
