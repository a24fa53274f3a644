"""The per-frame step of a Subspace Neural Physics model: :class:`FoldedStep` (the network's
map with its constant products folded), :class:`SNPSimulation` (one instance) and
:class:`SNPBatch` (B instances in one network pass)."""

from __future__ import annotations

import math
import time

import numpy as np

from ...engine.protocol import FrameInputs, SimulatorBase, StepReport
from ...errors import SimulationError
from ...physics.colliders import Collider
from ...physics.sim import SimSettings
from ...reduced.pose import IDENTITY, Pose
from .features import (
    COLLIDER_FEATURES,
    FRAME_FEATURES,
    collider_features,
    frame_features,
    frame_features_list,
    mtm,
    mtv,
    reference_pose,
    to_frame,
)
from .normals import VertexNormals, linear_normals
from .parameters import SNPParameters, initial_model
from .sweep import CONTACT_FEATURES, batch_contact_features, contact_one, push_out


class FoldedStep:
    """Eq. (1) and (3) with every constant product folded into the network's first and last
    layers, the map of :meth:`SNPSimulation.predict` at a third of its cost (the step's
    arithmetic ran ~40 us a frame at u = 64, most of it small array operations).

    The network's input ``[z_bar / s, z_{t-1} / s, w]`` is linear in ``(z_{t-1}, z_{t-2},
    f_k)``, with ``z_bar = (alpha + beta) z_{t-1} - beta z_{t-2}`` and ``w = V_s f_k -
    offset`` (:class:`ExternalEncoder`; ``f_k`` the kept features, clipped), so the first
    layer ``W_1 x + b_1`` is ``[A_1 A_2 A_3] [z_{t-1}; z_{t-2}; f_k] + b_1'`` with

        A_1 = (W_zbar diag(alpha + beta) + W_z1) / s,   A_2 = -W_zbar diag(beta) / s,
        A_3 = W_w V_s,                                  b_1' = b_1 - W_w offset,

    and the last layer is scaled by ``s``: one product per layer, and only the features the
    encoder keeps are read. Equal to :meth:`SNPSimulation.predict` to round-off (the
    trainer's export check compares it with the float64 torch rollout).
    """

    def __init__(self, p: SNPParameters) -> None:
        enc = p.encoder
        self.keep = enc.keep
        k = self.keep
        if len(k) and np.array_equal(k, np.arange(k[0], k[0] + len(k))):
            self.keep = slice(int(k[0]), int(k[0]) + len(k))  # contiguous: a view, not a copy
        self.lo, self.hi = np.asarray(enc.lo, float)[k], np.asarray(enc.hi, float)[k]
        self.alpha, self.beta, self.z_lo, self.z_hi = p.alpha, p.beta, p.z_lo, p.z_hi
        self.W: list[np.ndarray] = []
        self.Wt: list[np.ndarray] = []
        self.b: list[np.ndarray] = []
        self.f: list = []
        if p.net is None:
            return
        u, s, net = p.u, p.scale, p.net
        W, b = [np.asarray(a, float) for a in net.W], [np.asarray(a, float) for a in net.b]
        Wzb, Wz1, Ww = W[0][:, :u], W[0][:, u : 2 * u], W[0][:, 2 * u :]
        si = s if p.input_scale is None else p.input_scale  # per column of the state inputs
        first = np.hstack(
            [(Wzb * (p.alpha + p.beta) + Wz1) / si, -(Wzb * p.beta) / si, Ww @ enc._Vs]
        )
        b[0] = b[0] - Ww @ enc._offset
        W[0] = first
        W[-1], b[-1] = s * W[-1], s * b[-1]
        self.W = [np.ascontiguousarray(a) for a in W]
        self.Wt = [a.T for a in self.W]  # rows of a batch multiply as h @ W^T
        self.b = b
        self.f = [None if a == "relu" else f for a, f in zip(net.activations, net._f, strict=True)]
        self._zero = {len(a): np.zeros(len(a)) for a in b}

    def __call__(self, z1: np.ndarray, z2: np.ndarray, f: np.ndarray) -> np.ndarray:
        """``z_t`` (B, u) from ``z_{t-1}``, ``z_{t-2}`` (B, u) and features ``f`` (B, e).
        One instance runs on vectors (matrix-vector products; elementwise operations on
        (1, m) rows cost about twice those on vectors at these sizes), B on rows."""
        if len(z1) == 1:
            return self._step(z1[0], z2[0], f[0], self.W)[None]
        return self._step(z1, z2, f, self.Wt)

    def _step(self, z1, z2, f, mats):
        z = initial_model(z1, z2, self.alpha, self.beta)
        if mats:
            fk = f[..., self.keep]  # a slice where the kept features are contiguous: a view
            fk = np.minimum(np.maximum(fk, self.lo), self.hi)
            h = np.concatenate([z1, z2, fk], axis=-1)
            one = h.ndim == 1
            for W, b, act in zip(mats, self.b, self.f, strict=True):
                h = np.dot(W, h) if one else np.dot(h, W)
                h += b
                if act is None:  # relu, in place: 0.4 us, against 0.9 for np.maximum(h, 0.0)
                    np.maximum(h, self._zero[len(b)], out=h)
                else:
                    h = act(h)
            z += h
        np.maximum(z, self.z_lo, out=z)
        return np.minimum(z, self.z_hi, out=z)


# ------------------------------------------------------------------------------------------
# The simulator
# ------------------------------------------------------------------------------------------


class SNPSimulation(SimulatorBase):
    """The per-frame step of a Subspace Neural Physics model (see the module docstring).

    Parameters
    ----------
    params : the trained model
    settings : the time step (and gravity) the model was trained at
    colliders : the colliders before the first frame
    """

    def __init__(
        self,
        params: SNPParameters,
        settings: SimSettings | None = None,
        colliders: list[Collider] | None = None,
    ) -> None:
        self.p = params
        self.settings = settings or SimSettings()
        self.dt = float(self.settings.dt)
        self.gravity = np.asarray(self.settings.gravity, dtype=np.float64)
        self.rest_pins = self.p.X[self.p.pinned]
        self._rest_inv = (
            None if self.p.reference_rest is None else np.linalg.inv(self.p.reference_rest)
        )
        if self._rest_inv is not None:  # as _driven_one reads it
            self._rest_rows = (self._rest_inv[:3, :3].tolist(), self._rest_inv[:3, 3].tolist())
        # what positions() shows in one product: the PCA basis and mean with a driven cloth's
        # pinned rows held at their rest places (they hang rigidly from its frame, as
        # Blender's do): no pins placed apart each frame (4 of the cape's 36 us)
        self._show_U, self._show_mean = self.p.U, self.p.mean.reshape(-1)
        if self._rest_inv is not None and len(self.p.pinned):
            rows = (3 * np.asarray(self.p.pinned)[:, None] + np.arange(3)).reshape(-1)
            self._show_U, self._show_mean = self._show_U.copy(), self._show_mean.copy()
            self._show_U[rows] = 0.0
            self._show_mean[rows] = self.rest_pins.reshape(-1)
        self._far = self.p.far_transform()
        centre = 0.5 * (self.p.X.min(0) + self.p.X.max(0))  # a ball holding the rest shape
        lo, hi = self.p.X.min(axis=0), self.p.X.max(axis=0)
        slack = _BOX_SLACK * (1.0 + float(np.linalg.norm(hi - lo)))
        self._bound = (
            centre,
            float(np.linalg.norm(self.p.X - centre, axis=1).max()),
            ((lo - slack).tolist(), (hi + slack).tolist()),
        )
        self._folded = FoldedStep(self.p)
        # what _world_features reads each frame, as Python floats
        self._still = [*self.gravity.tolist(), *[0.0] * (FRAME_FEATURES - 3)]
        o = self.p.frame_origin
        self._origin = None if o is None else np.asarray(o, float).tolist()
        self._turn: list = [None]  # frame_features_list's memo
        self._far_world = _world_matrix(IDENTITY, self._far).tolist()
        self._far_bytes = _world_matrix(IDENTITY, self._far).tobytes()
        self._sizes = [(float(r), float(h)) for r, h in np.asarray(self.p.sizes, float)]
        self._driven: dict[bytes, Pose] = {}  # driver matrix -> pose (see driven_poses)
        self._initial_colliders = list(colliders or [])
        self._normals = None
        #: ``"linear"``: :meth:`normals` by the linear normal model where the model has one
        #: (sec. 6.3; faster at about the same look, see :func:`linear_normals`);
        #: ``"recomputed"``: from the triangles of the positions
        self.normal_model = "linear" if params.normal_basis is not None else "recomputed"
        #: render-time push-out of vertices inside colliders (sec. 6.4) in :meth:`positions`
        self.push_out = True
        self.reset()

    # ------------------------------------------------------------------------- state
    def reset(self) -> None:
        """Back to rest at frame 0 (the rest pose's PCA coordinates, not moving)."""
        z = self.encode(self.p.X)
        self.z1, self.z2 = z, z.copy()
        self.poses = (IDENTITY, IDENTITY, IDENTITY)
        self.colliders = list(self._initial_colliders)
        self.frame = 0

    def get_state(self) -> dict:
        return {
            "z1": self.z1.copy(),
            "z2": self.z2.copy(),
            "poses": [p.to_list() for p in self.poses],
            "colliders": [c.to_dict() for c in self.colliders],
            "frame": self.frame,
        }

    def set_state(self, state: dict) -> None:
        self.z1 = np.array(state["z1"], dtype=np.float64)
        self.z2 = np.array(state["z2"], dtype=np.float64)
        self.poses = tuple(_pose(p) for p in state["poses"])
        self.colliders = [Collider(**c) for c in state["colliders"]]
        self.frame = int(state["frame"])

    # ------------------------------------------------------------- poses <-> states
    def rest_positions(self) -> np.ndarray:
        return self.p.X.copy()

    def encode(self, y: np.ndarray) -> np.ndarray:
        """PCA coordinates (u,) of positions ``y`` (n, 3) in the reference frame."""
        return self.p.U.T @ (np.asarray(y, dtype=np.float64) - self.p.mean).reshape(-1)

    def decode(self, z: np.ndarray) -> np.ndarray:
        """Positions (n, 3) in the reference frame of PCA coordinates ``z`` (u,)."""
        return self.p.mean + (self.p.U @ z).reshape(-1, 3)

    def positions(self) -> np.ndarray:
        """(n, 3) world positions ``R (y_mu + U z) + c``, metres, with the vertices inside a
        collider moved out to its surface (:func:`push_out`, sec. 6.4) unless
        :attr:`push_out` is False."""
        y = self._show_U @ self.z1
        y += self._show_mean
        x = self.poses[0].apply(y.reshape(-1, 3))
        return push_out(x, self.colliders) if self.push_out else x

    def normals(self, x: np.ndarray | None = None) -> np.ndarray:
        """(n, 3) unit vertex normals, world. Of the current state by the linear normal model
        (sec. 6.3, :func:`linear_normals`) when the model has one and :attr:`normal_model` is
        ``"linear"`` (the default then); else, or for given positions ``x``, recomputed from
        the model's triangles (:class:`VertexNormals`) of ``x`` (default :meth:`positions`).
        A model without triangles (a FEM model) has neither and raises SimulationError."""
        p = self.p
        if x is None and self.normal_model == "linear" and p.normal_basis is not None:
            return linear_normals(p.normal_mean, p.normal_basis, self.z1[None], [self.poses[0]])[0]
        if self._normals is None:
            if p.triangles is None:
                raise SimulationError(
                    "This Subspace Neural Physics model has no surface triangles (a FEM "
                    "model): its normals are the render mesh's, computed by Blender."
                )
            self._normals = VertexNormals(p.triangles, len(p.X))
        return self._normals(self.positions() if x is None else x)

    def _pose_of(self, x: np.ndarray) -> Pose:
        if self._rest_inv is not None:  # driven: the frame is the driver's, not in x
            return self.poses[0]
        return reference_pose(
            self.rest_pins, x[self.p.pinned] if len(self.p.pinned) else None, IDENTITY
        )

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        """The model's closest shape (n, 3) to world positions ``x``: the PCA projection in
        the reference frame of ``x``."""
        x = np.asarray(x, dtype=np.float64)
        pose = self._pose_of(x)
        y = x if pose.is_identity else (x - pose.c) @ pose.R
        return pose.apply(self.decode(self.encode(y)))

    def start_from(self, x: np.ndarray, v: np.ndarray, forces: np.ndarray | None = None) -> None:
        """Start from world positions ``x`` and velocities ``v`` (n, 3): ``z_{t-1}`` encodes
        ``x`` and ``z_{t-2}`` the positions a frame before, ``x - dt v`` (the frame at rest).
        ``forces`` are not an input of this model."""
        self.reset()
        x = np.asarray(x, dtype=np.float64)
        pose = self._pose_of(x)
        prev = x - self.dt * np.asarray(v, dtype=np.float64)
        if not pose.is_identity:
            x, prev = (x - pose.c) @ pose.R, (prev - pose.c) @ pose.R
        self.z1, self.z2 = self.encode(x), self.encode(prev)
        self.poses = (pose, pose, pose)

    # -------------------------------------------------------------------------- step
    def driven_pose(self, M: np.ndarray | None, guess: Pose) -> Pose:
        """The reference frame of a model driven by a transform (``reference_rest`` set):
        ``M M_rest^-1`` with ``M`` (4, 4) the driver's world matrix (scale divided out);
        ``guess`` (the last pose) when the frame gives none."""
        return self.driven_poses([M], [guess])[0]

    def driven_poses(self, Ms: list, guesses: list[Pose]) -> list[Pose]:
        """:meth:`driven_pose` of B instances at once (one product for all of them: this
        runs per frame and per instance). A matrix seen before gets its pose from a small
        memo (an owner that does not move sends the same matrix every frame: 19 -> 1 us);
        the arithmetic is elementwise, so a pose does not depend on the batch it came in."""
        out = list(guesses)
        memo = self._driven
        todo, keys = [], []
        for i, M in enumerate(Ms):
            if M is None:
                continue
            M = np.asarray(M, dtype=np.float64)
            key = M.tobytes()
            pose = memo.get(key)
            if pose is None:
                todo.append(i)
                keys.append((key, M))
            else:
                out[i] = pose
        if not todo:
            return out
        if len(todo) == 1:  # one instance (the usual): Python floats, the same bits
            pose = self._driven_one(keys[0][1])
            if pose is not None:
                if len(memo) + 1 > _DRIVEN_MEMO:
                    memo.clear()
                out[todo[0]] = memo[keys[0][0]] = pose
                return out
        if any(M.shape != (4, 4) for _, M in keys) or not all(
            np.isfinite(M).all() for _, M in keys
        ):
            bad = next(M.shape for _, M in keys if M.shape != (4, 4) or not np.isfinite(M).all())
            raise SimulationError(
                f"The reference frame's transform must be a finite 4x4 matrix, got shape {bad}."
            )
        M = np.array([M for _, M in keys])
        L = M[:, :3, :3]
        A = L / np.sqrt((L * L).sum(axis=1))[:, None, :]  # rigid(M)
        Ri, ci = self._rest_inv[:3, :3], self._rest_inv[:3, 3]
        R = (A[:, :, :, None] * Ri[None, None, :, :]).sum(axis=2)  # A @ Ri, elementwise
        c = M[:, :3, 3] + (A * ci[None, None, :]).sum(axis=2)
        same = (np.abs(R - _EYE3).max(axis=(1, 2)) <= 1e-12) & (np.abs(c).max(axis=1) <= 1e-12)
        if len(memo) + len(todo) > _DRIVEN_MEMO:
            memo.clear()
        for k, (i, (key, _)) in enumerate(zip(todo, keys, strict=True)):
            out[i] = memo[key] = IDENTITY if same[k] else Pose(R[k], c[k])
        return out

    def _driven_one(self, M: np.ndarray) -> Pose | None:
        """:meth:`driven_poses` of one matrix ``M`` (4, 4) on Python floats, each product and
        sum in the order numpy's reductions over three take them (the same bits, which a test
        checks; 8 -> 3 us a frame of a moving owner); None for a matrix that is not a finite
        4 x 4 of non-zero axes (the array path then refuses it or gives numpy's answer)."""
        if M.shape != (4, 4):
            return None
        m = M.tolist()
        if not all(math.isfinite(v) for row in m for v in row):
            return None
        (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2), _ = m
        nx = math.sqrt(a0 * a0 + b0 * b0 + c0 * c0)
        ny = math.sqrt(a1 * a1 + b1 * b1 + c1 * c1)
        nz = math.sqrt(a2 * a2 + b2 * b2 + c2 * c2)
        if not (nx > 0.0 and ny > 0.0 and nz > 0.0):
            return None
        A = ((a0 / nx, a1 / ny, a2 / nz), (b0 / nx, b1 / ny, b2 / nz), (c0 / nx, c1 / ny, c2 / nz))
        Ri, ci = self._rest_rows
        R = [[r0 * Ri[0][j] + r1 * Ri[1][j] + r2 * Ri[2][j] for j in range(3)] for r0, r1, r2 in A]
        c = [t + (r0 * ci[0] + r1 * ci[1] + r2 * ci[2]) for t, (r0, r1, r2) in zip((t0, t1, t2), A)]
        same = all(
            abs(R[i][j] - (1.0 if i == j else 0.0)) <= 1e-12 for i in range(3) for j in range(3)
        ) and all(abs(v) <= 1e-12 for v in c)
        return IDENTITY if same else Pose(np.array(R), np.array(c))

    def features(
        self,
        colliders: list[Collider],
        poses: tuple[Pose, Pose, Pose],
        previous: list[Collider] | None = None,
    ) -> np.ndarray:
        """The external features (e,) of a frame (:func:`external_features`): the colliders
        fill the model's slots in order; a slot the list leaves empty gets a collider out of
        reach (:data:`FAR_DIAGONALS`), extra colliders are not seen. ``previous``: the
        colliders of the frame before (a contact model's sweep, :func:`contact_features`;
        None: these, not moving)."""
        return self.batch_features([colliders], [poses], None if previous is None else [previous])[
            0
        ]

    def _slots(self, colliders: list[list[Collider]], poses: list[Pose]):
        """(B, c, 4, 4) world transforms (read-only) and (B, c, 2) sizes of the model's
        collider slots. Gathered as bytes and floats, then made arrays once: ``np.array`` of
        B * c (4, 4) arrays discovers each one's shape (27 us at 100 of them, against 7 us);
        a Collider's transform is a float64 (4, 4) array (:class:`core.colliders.Collider`)."""
        c, B = len(self.p.sizes), len(colliders)
        mats, sizes = [], []
        for cols, pose in zip(colliders, poses, strict=True):
            for i in range(c):
                if i < len(cols):
                    col = cols[i]
                    mats.append(col.transform.tobytes())
                    sizes += (col.radius, col.half_length)
                else:
                    far = _world_matrix(pose, self._far) if pose is not IDENTITY else None
                    mats.append(self._far_bytes if far is None else far.tobytes())
                    sizes += self._sizes[i]
        mats = np.frombuffer(b"".join(mats)).reshape(B, c, 4, 4)
        return mats, np.array(sizes, dtype=np.float64).reshape(B, c, 2)

    def batch_features(
        self,
        colliders: list[list[Collider]],
        poses: list[tuple[Pose, Pose, Pose]],
        previous: list[list[Collider]] | None = None,
    ) -> np.ndarray:
        """(B, e) external features of B instances' frames, each as :meth:`features` (the
        same arithmetic as :func:`external_features`, the trainer's; instances whose frame is
        the world are copied into place together)."""
        c, B = len(self.p.sizes), len(colliders)
        if B == 1 and _world(poses[0][0]) and _world(poses[0][1]):
            return self._world_features(
                colliders[0], poses[0], None if previous is None else previous[0]
            )[None]
        if B == 1 and not self.p.contact and not _world(poses[0][0]):
            return self._moving_features(colliders[0], poses[0])[None]
        mats, sizes = self._slots(colliders, [ps[0] for ps in poses])
        f = np.zeros((B, self.p.n_features))
        f[:, :3] = self.gravity  # frame_features of a frame that stays the world
        moved = []  # the instances whose frame is not the world
        for b, ps in enumerate(poses):
            if not (ps[0] is IDENTITY and ps[1] is IDENTITY and ps[2] is IDENTITY):
                f[b, :FRAME_FEATURES] = frame_features(
                    ps, self.gravity, self.dt, self.p.frame_origin
                )
                if not _world(ps[0]):
                    moved.append(b)
        end = FRAME_FEATURES + COLLIDER_FEATURES * c
        f[:, FRAME_FEATURES:end] = np.concatenate(
            [mats[:, :, :3, :3].reshape(B, c, 9), mats[:, :, :3, 3], sizes], axis=2
        ).reshape(B, -1)
        for b in moved:
            f[b, FRAME_FEATURES:end] = collider_features(mats[b], sizes[b], poses[b][0])
        if self.p.contact:
            after = mats
            if moved:
                after = mats.copy()
                for b in moved:
                    after[b] = to_frame(mats[b], poses[b][0])
            # a slot sweeps only when a collider filled it in both frames: one that
            # appears or goes (the far collider) did not pass through the object
            rows, prev = [], []  # gathered, then converted once (as _slots)
            for b in range(B if previous is not None else 0):
                for i in range(min(len(previous[b]), len(colliders[b]), c)):
                    rows.append(b * c + i)
                    prev.append(previous[b][i].transform.tobytes())
            before = after
            if rows:
                prev = np.frombuffer(b"".join(prev)).reshape(-1, 4, 4)
                turned = [j for j, r in enumerate(rows) if not _world(poses[r // c][1])]
                if turned:
                    prev = prev.copy()
                    for j in turned:
                        prev[j] = to_frame(prev[j], poses[rows[j] // c][1])[0]
                if len(rows) == B * c:  # every slot sweeps (rows are 0 .. B c - 1)
                    before = prev.reshape(B, c, 4, 4)
                else:
                    before = after.copy()
                    before.reshape(B * c, 4, 4)[rows] = prev
            f[:, end:] = batch_contact_features(
                self.p.X, before, after, self.p.kinds, sizes, self._bound
            )
        return f

    def _moving_features(self, cols: list[Collider], poses: tuple[Pose, Pose, Pose]) -> np.ndarray:
        """(e,) :meth:`batch_features` of one instance without contact features whose frame
        moved (a cape on a walking character): the same numbers (:func:`frame_features`,
        then each slot as :func:`collider_features` takes it into the frame), in Python
        floats made an array once, where the general path's small arrays cost ~40 us."""
        p, pose = self.p, poses[0]
        out = frame_features_list(poses, self._still[:3], self.dt, self._origin, self._turn)
        Rp, cp = pose.rows
        for i in range(len(p.sizes)):
            if i < len(cols):
                M = cols[i].transform.tolist()
                r, h = float(cols[i].radius), float(cols[i].half_length)
            else:
                M = _world_matrix(pose, self._far).tolist()
                r, h = self._sizes[i]
            t = mtv(Rp, [M[0][3] - cp[0], M[1][3] - cp[1], M[2][3] - cp[2]])
            Q = mtm(Rp, [M[0][:3], M[1][:3], M[2][:3]])
            out += (*Q[0], *Q[1], *Q[2], *t, r, h)
        return np.array(out)

    def _world_features(
        self, cols: list[Collider], poses: tuple[Pose, Pose, Pose], previous: list | None
    ) -> np.ndarray:
        """(e,) :meth:`batch_features` of one instance whose frame was the world this frame
        and the last (a FEM model whose pins stay put, the usual soft body): the same numbers,
        read from the colliders as Python floats and made an array once, where the general
        path's arrays of (1, c, 4, 4) cost ~1 us a call (the step's fixed overhead)."""
        p = self.p
        ps0, ps1, ps2 = poses
        if ps0 is IDENTITY and ps1 is IDENTITY and ps2 is IDENTITY:
            out = list(self._still)  # frame_features of a frame that stays the world
        else:
            out = frame_features_list(poses, self._still[:3], self.dt, self._origin, self._turn)
        c = len(p.sizes)
        mats, sizes = [], []
        for i in range(c):
            if i < len(cols):
                t = cols[i].transform.tolist()
                r, h = float(cols[i].radius), float(cols[i].half_length)
            else:
                t = self._far_world
                r, h = self._sizes[i]
            r0, r1, r2 = t[0], t[1], t[2]
            out += (*r0[:3], *r1[:3], *r2[:3], r0[3], r1[3], r2[3], r, h)
            mats.append(t)
            sizes.append((r, h))
        if p.contact:
            # a slot sweeps only when a collider filled it in both frames (batch_features)
            swept = 0 if previous is None else min(len(previous), len(cols), c)
            for i, kind in enumerate(p.kinds):
                al = mats[i]
                bl = previous[i].transform.tolist() if i < swept else al
                f = contact_one(p.X, bl, al, kind, *sizes[i], self._bound)
                out += _NO_CONTACT if f is None else f
        return np.array(out)

    def predict(self, z1: np.ndarray, z2: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``z_t`` (u,) or (B, u) from ``z_{t-1}``, ``z_{t-2}`` and the encoded external input
        ``w_t``: eq. (1), eq. (3), clipped to the training range (sec. 8.1), as written (the
        reference; :meth:`predict_features` is the same map folded, which the step runs)."""
        p = self.p
        z_bar = initial_model(z1, z2, p.alpha, p.beta)
        if p.net is not None:
            s = p.scale
            si = s if p.input_scale is None else p.input_scale
            z_bar = z_bar + s * p.net.forward(np.concatenate([z_bar / si, z1 / si, w], axis=-1))
        return np.minimum(np.maximum(z_bar, p.z_lo), p.z_hi)

    def predict_features(self, z1: np.ndarray, z2: np.ndarray, f: np.ndarray) -> np.ndarray:
        """``z_t`` (B, u) from ``z_{t-1}``, ``z_{t-2}`` (B, u) and the raw external features
        ``f`` (B, e): :meth:`predict` of ``w = encoder.encode(f)``, with the constant
        products folded into the network (:class:`FoldedStep`); what :meth:`advance` runs."""
        return self._folded(z1, z2, f)

    def advance(
        self,
        z1: np.ndarray,
        z2: np.ndarray,
        poses: list[tuple[Pose, Pose, Pose]],
        colliders: list[list[Collider]],
        inputs: list[FrameInputs | None],
    ) -> tuple[np.ndarray, list, list]:
        """One frame of B instances in one network pass: ``z_t`` (B, u) from ``z_{t-1}``,
        ``z_{t-2}`` (B, u), each instance's last poses and colliders and its frame's inputs;
        with the instances' new poses and colliders. The one step of :meth:`step` (B = 1)
        and of :class:`SNPBatch`."""
        new_poses, new_cols = [], []
        inputs = [inp or _NO_INPUTS for inp in inputs]
        driven = None
        if self._rest_inv is not None:
            driven = self.driven_poses(
                [inp.reference_frame for inp in inputs], [ps[0] for ps in poses]
            )
        for b, (ps, cols, inp) in enumerate(zip(poses, colliders, inputs, strict=True)):
            if driven is not None:
                pose = driven[b]
            else:
                pose = reference_pose(self.rest_pins, inp.pin_targets, ps[0])
            new_poses.append((pose, ps[0], ps[1]))
            new_cols.append(cols if inp.colliders is None else list(inp.colliders))
        z = self._folded(z1, z2, self.batch_features(new_cols, new_poses, colliders))
        if not math.isfinite(np.add.reduce(z, axis=None)):  # the clipping keeps an inf finite
            raise SimulationError(
                f"Frame {self.frame + 1} of the Subspace Neural Physics model is not finite; "
                "the model file is damaged: retrain it."
            )
        return z, new_poses, new_cols

    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """One frame: the colliders (the last ones when the frame has none) and the pins'
        rigid motion (the reference frame) of ``inputs``; forces are not an input."""
        t0 = time.perf_counter()
        z, (poses,), (cols,) = self.advance(
            self.z1[None], self.z2[None], [self.poses], [self.colliders], [inputs]
        )
        self.z2, self.z1 = self.z1, z[0]
        self.poses, self.colliders = poses, cols
        self.frame += 1
        return StepReport(substeps=1, wall_time=time.perf_counter() - t0)


_NO_INPUTS = FrameInputs()
#: The runtime's box of the rest shape (:func:`_sphere_sweep_one`, :func:`_sphere_sweeps`) is
#: this times (1 + its diagonal in metres) larger on each side: a sweep it culls is clear of
#: every vertex by far more than the round-off of the distances it spares (which could put a
#: vertex on the boundary a few ulps inside).
_BOX_SLACK = 1e-9
_NO_CONTACT = (0.0,) * CONTACT_FEATURES


def _world(pose: Pose) -> bool:
    """Whether a pose is the world's (the IDENTITY object or equal to it)."""
    return pose is IDENTITY or pose.is_identity


#: Driver matrices whose poses :meth:`SNPSimulation.driven_poses` remembers (then forgets all).
_DRIVEN_MEMO = 1024
_EYE3 = np.eye(3)


class SNPBatch:
    """B instances of one model stepped together: one network pass of B rows per frame (the
    paper's 256 bunnies, sec. 8). Each instance has its own colliders, pins and state; an
    instance's state is a :meth:`SNPSimulation.get_state` dict, so it moves between a batch
    and a single simulator and continues the same (to round-off: a matrix product of B rows
    is not summed in the order of one row's).

    Parameters
    ----------
    params : the trained model
    count : B, the number of instances
    settings : the time step (and gravity) the model was trained at
    colliders : the colliders before the first frame, the same for every instance
    """

    def __init__(
        self,
        params: SNPParameters,
        count: int,
        settings: SimSettings | None = None,
        colliders: list[Collider] | None = None,
    ) -> None:
        if count < 1:
            raise SimulationError(f"A batch needs at least one instance, not {count}.")
        self.model = SNPSimulation(params, settings, colliders)
        self.count = int(count)
        self.reset()

    def reset(self) -> None:
        """Every instance back to rest at frame 0."""
        m = self.model
        m.reset()
        self.z1 = np.repeat(m.z1[None], self.count, axis=0)  # (B, u)
        self.z2 = self.z1.copy()
        self.poses = [m.poses] * self.count
        self.colliders = [list(m.colliders) for _ in range(self.count)]
        self.frames = np.zeros(self.count, dtype=np.int64)

    def get_state(self, i: int) -> dict:
        """Instance ``i``'s state, as :meth:`SNPSimulation.get_state` gives it."""
        return {
            "z1": self.z1[i].copy(),
            "z2": self.z2[i].copy(),
            "poses": [p.to_list() for p in self.poses[i]],
            "colliders": [c.to_dict() for c in self.colliders[i]],
            "frame": int(self.frames[i]),
        }

    def set_state(self, i: int, state: dict) -> None:
        """Instance ``i`` continues from ``state`` (this batch's or a single simulator's)."""
        self.z1[i] = np.asarray(state["z1"], dtype=np.float64)
        self.z2[i] = np.asarray(state["z2"], dtype=np.float64)
        self.poses[i] = tuple(_pose(p) for p in state["poses"])
        self.colliders[i] = [Collider(**c) for c in state["colliders"]]
        self.frames[i] = int(state["frame"])

    def step(self, inputs: list[FrameInputs | None] | None = None) -> StepReport:
        """One frame of every instance: ``inputs[i]`` drives instance ``i`` as
        :meth:`SNPSimulation.step` takes it (None: nothing changes for it)."""
        t0 = time.perf_counter()
        inputs = [None] * self.count if inputs is None else list(inputs)
        if len(inputs) != self.count:
            raise SimulationError(
                f"{len(inputs)} frame inputs for a batch of {self.count} instances."
            )
        self.model.frame = int(self.frames.max())
        z, self.poses, self.colliders = self.model.advance(
            self.z1, self.z2, self.poses, self.colliders, inputs
        )
        self.z2, self.z1 = self.z1, z
        self.frames += 1
        return StepReport(substeps=1, wall_time=time.perf_counter() - t0)

    def positions(self) -> np.ndarray:
        """(B, n, 3) world positions of every instance, metres."""
        m = self.model  # its shown basis (pins held at rest), as SNPSimulation.positions
        y = (self.z1 @ m._show_U.T + m._show_mean).reshape(self.count, -1, 3)
        for b, ps in enumerate(self.poses):
            if ps[0] is not IDENTITY:
                y[b] = ps[0].apply(y[b])
            if self.model.push_out and self.colliders[b]:
                y[b] = push_out(y[b], self.colliders[b])
        return y

    def normals(self) -> np.ndarray:
        """(B, n, 3) unit world vertex normals of every instance: one product of the linear
        normal model for all of them where the model has one (sec. 6.3), else recomputed from
        the triangles of :meth:`positions` (:meth:`SNPSimulation.normals`)."""
        m = self.model
        p = m.p
        if m.normal_model == "linear" and p.normal_basis is not None:
            return linear_normals(
                p.normal_mean, p.normal_basis, self.z1, [ps[0] for ps in self.poses]
            )
        return np.array([m.normals(x) for x in self.positions()])


def _world_matrix(pose: Pose, local: np.ndarray) -> np.ndarray:
    """World transform of a transform ``local`` (4, 4) given in the frame ``pose``."""
    M = np.eye(4)
    M[:3, :3] = pose.R
    M[:3, 3] = pose.c
    return M @ local


def _pose(v) -> Pose:
    pose = Pose.from_list(v)
    return IDENTITY if pose.is_identity else pose  # the fast paths test for IDENTITY itself
