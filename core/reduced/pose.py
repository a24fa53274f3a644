"""A rigid reference frame that carries the pins of a subspace model.

A subspace model keeps its pinned DOFs at zero (``U`` has zero rows there), so by itself it
cannot move its pins. Pins in Blender move rigidly: they follow the object's own animation
(location and rotation). A subspace simulation therefore runs in the frame of the pins::

    x = R y + c,    y = X + U q

with ``(R, c)`` the rigid motion that takes the rest positions of the pinned vertices to
their targets this step, fitted by Kabsch. The elastic energy is invariant under
``(R, c)`` and the lumped mass norm under ``R``, so backward Euler in world space,

    x_{n+1} = argmin 1/(2h^2) |x - (2 x_n - x_{n-1})|^2_M + alpha/(2h) |x - x_n|^2_M + V(x) - f.x,

is exactly, in the frame of step ``n+1``,

    q_{n+1} = argmin 1/(2h^2) |q - q~|^2_{M~} + alpha/(2h) |q - q_d|^2_{M~} + V~(q) - (U^T M R^T g + U^T R^T f).q

where ``M~ q~ = U^T M (R^T (2 x_n - x_{n-1} - c) - X)`` and ``M~ q_d = U^T M (R^T (x_n - c) - X)``
are the inertial and damping targets. The frame's acceleration and rotation (centrifugal,
Coriolis, Euler forces) all enter through ``q~``; with ``Q = R^T R_n`` they cost nine k x k
products per step::

    U^T M (I (x) Q) (X + U q) = sum_ij Q_ij (g_ij + G_ij q),
    G_ij = U^T M (I (x) E_ij) U,  g_ij = U^T M (I (x) E_ij) X,

precomputed once (``E_ij`` the 3x3 unit matrix, ``I (x) Q`` applying ``Q`` to every vertex).
Stiffness-proportional damping acts on ``q - q_n`` in the moving frame, so it damps
deformation, not the rigid motion the pins impose. Colliders and external forces are taken
into the frame; positions go back out with ``R y + c``.

With pins at rest the frame is the identity and the runtimes take their plain path, so a
model without animated pins behaves exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.linalg as sla
from scipy.spatial.transform import Rotation

from ..errors import SimulationError
from ..physics.colliders import Collider

#: Pin targets may deviate from a rigid motion of the rest pins by this fraction of the
#: object's size (single-precision matrices from Blender are rigid to ~1e-7).
RIGID_TOLERANCE = 1e-4
_EYE3 = np.eye(3)


@dataclass(frozen=True)
class Pose:
    """A rigid motion ``x = R y + c``: rotation (3, 3) and translation (3,), metres."""

    R: np.ndarray = field(default_factory=lambda: np.eye(3))
    c: np.ndarray = field(default_factory=lambda: np.zeros(3))

    @cached_property
    def is_identity(self) -> bool:
        # asked several times a frame of each pose (a step keeps the last three): once each
        return bool((np.asarray(self.R) == _EYE3).all() and not np.any(self.c))

    @cached_property
    def rows(self) -> tuple[tuple, tuple]:
        """``(R, c)`` as Python floats (tuples, R by rows): what the per-frame feature code reads of
        each of the last three poses (a pose is read on three frames: converted once)."""
        R = tuple(tuple(r) for r in np.asarray(self.R, float).tolist())
        return R, tuple(np.asarray(self.c, float).tolist())

    def apply(self, y: np.ndarray) -> np.ndarray:
        """World positions of frame positions ``y`` (n, 3): :func:`transform_points`, the
        transposed rotation made contiguous once per pose (a pose moves a frame's positions
        and its pins, on three frames)."""
        if self.is_identity:
            return y
        if isinstance(y, np.ndarray) and y.ndim == 2 and len(y) >= 16:
            out = y @ self._Rt  # transform_points' product and sum, the same bits
            out += np.repeat(self._c_row, len(out), axis=0)
            return out
        return transform_points(y, self.R, self.c)

    @cached_property
    def _Rt(self) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(self.R).T)

    @cached_property
    def _c_row(self) -> np.ndarray:
        return np.asarray(self.c)[None]

    def to_list(self) -> list:
        R, c = self.rows  # converted once per pose (a simulator's state lists it each frame)
        return [[list(r) for r in R], list(c)]

    @classmethod
    def from_list(cls, v) -> Pose:
        return cls(np.array(v[0], dtype=float).reshape(3, 3), np.array(v[1], dtype=float))


IDENTITY = Pose()


def transform_points(y: np.ndarray, A: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``y @ A.T + t``: points ``y`` (n, 3) (or (3,)) through the linear map ``A`` (3, 3)
    and the translation ``t`` (3,), bit for bit that expression at about half its cost on
    the frame path (numpy 1.26: a transposed 3x3 operand, and a (3,) row broadcast over
    (n, 3), each take 2-3x a plain loop; 25 -> 13 us for 2,500 points, the same bits over
    3,000 random cases). A single point is the expression itself: numpy multiplies a
    (1, 3) operand another way, whose last bit differs."""
    y = np.asarray(y)
    if y.ndim != 2 or len(y) < 16:
        return y @ np.asarray(A).T + t
    out = y @ np.ascontiguousarray(np.asarray(A).T)
    out += np.repeat(np.asarray(t)[None], len(out), axis=0)
    return out


def interpolate(a: Pose, b: Pose, w: float, centre: np.ndarray | None = None) -> Pose:
    """The pose a fraction ``w`` of the way from ``a`` to ``b``: the rotation slerped (the
    relative rotation turned by ``w`` of its angle about its axis), and the image of the rest
    point ``centre`` (the pins' centroid; default the origin) moved along the straight line, as
    linearly interpolated pin targets move their centroid."""
    if w >= 1.0:
        return b
    if w <= 0.0:
        return a
    x = np.zeros(3) if centre is None else np.asarray(centre, dtype=float)
    # slerp: the relative rotation to the power w (Slerp's own formula, without building a
    # Slerp object, which costs ~5x more per call; this runs every substep)
    R = (Rotation.from_matrix(b.R @ a.R.T) ** w).as_matrix() @ a.R
    p = (1 - w) * (a.R @ x + a.c) + w * (b.R @ x + b.c)
    return Pose(R, p - R @ x)


def fit_pose(rest: np.ndarray, targets: np.ndarray, guess: Pose = IDENTITY) -> tuple[Pose, float]:
    """The rigid motion that best takes ``rest`` points to ``targets`` (Kabsch, unweighted: the
    SVD of the centred points' 3 x 3 covariance, a reflection turned into a rotation).

    Parameters
    ----------
    rest, targets : (p, 3) float arrays, metres
    guess : pose used where the points do not determine the rotation (one point, or points
        on a line: the spin about that line is kept from ``guess``, so the frame never
        turns by itself)

    Returns
    -------
    pose : :class:`Pose`
    residual : float
        Largest distance between ``R rest + c`` and ``targets``, metres.
    """
    P = np.asarray(targets, dtype=float).reshape(-1, 3)
    X = np.asarray(rest, dtype=float).reshape(-1, 3)
    xb, pb = X.mean(0), P.mean(0)
    Xc, Pc = X - xb, P - pb
    # A faint pull towards the guess settles the directions the points leave free: the guess
    # maps the unit axes e_i to its columns, three extra pairs of weight 1e-9 x the spread.
    spread = float(np.sum(Xc * Xc)) + float(np.sum(Pc * Pc))
    pull = 1e-9 * max(spread, 1e-300)
    # argmin_R sum_i |Pc_i - R Xc_i|^2 + pull sum_j |G e_j - R e_j|^2 over rotations: with
    # H = Pc^T Xc + pull G = U S V^T, R = U D V^T, D = diag(1, 1, det(U V^T)) (what
    # Rotation.align_vectors solves, without its ~70 us of overhead for these few points)
    U, _, Vt = np.linalg.svd(Pc.T @ Xc + pull * np.asarray(guess.R, dtype=float))
    if np.linalg.det(U @ Vt) < 0:
        U[:, 2] = -U[:, 2]
    R = U @ Vt
    c = pb - R @ xb
    residual = float(np.abs(X @ R.T + c - P).max()) if len(P) else 0.0
    return Pose(R, c), residual


class PinPose:
    """The reduced terms of the pins' moving frame for a basis ``U`` (see the module doc).

    Parameters
    ----------
    X : (n, 3) rest positions, metres
    U : (3n, k) basis, zero on pinned DOFs
    mass : (n,) lumped masses, kg
    pinned : (p,) pinned vertices
    M_red : (k, k) ``U^T M U``
    """

    def __init__(self, X, U, mass, pinned, M_red) -> None:
        self.X = np.asarray(X, dtype=float)
        n = len(self.X)
        self.k = k = U.shape[1]
        self.rest_pins = self.X[np.asarray(pinned, dtype=np.int64)]
        L = float(np.linalg.norm(self.X.max(0) - self.X.min(0))) if n else 1.0
        self.tolerance = RIGID_TOLERANCE * (L if L > 0 else 1.0)
        Um = np.asarray(mass, dtype=float)[:, None, None] * U.reshape(n, 3, k)  # M U (n, 3, k)
        self._MU = Um
        self._U = U.reshape(n, 3, k)
        self._G = None  # (3, 3, k, k), on first use
        self.gX = np.einsum("vik,vj->ijk", Um, self.X)  # (3, 3, k): g_ij
        self.T = Um.sum(0).T  # (k, 3): U^T M (1 (x) e_i)
        self.UMX = np.einsum("iik->k", self.gX)  # U^T M X
        self._chol = sla.cho_factor(np.asarray(M_red, dtype=float), lower=True)

    @property
    def G(self) -> np.ndarray:
        if self._G is None:  # n 9 k^2 flops once: only models whose pins move pay it
            MU, U = self._MU, self._U
            self._G = np.array([[MU[:, i].T @ U[:, j] for j in range(3)] for i in range(3)])
            self._MU = self._U = None
        return self._G

    def fit(self, targets: np.ndarray, guess: Pose, frame: int) -> Pose:
        """The pose of pin targets (p, 3); refuses targets that bend or stretch the pins."""
        targets = np.asarray(targets, dtype=float).reshape(-1, 3)
        if targets.shape != self.rest_pins.shape:
            raise SimulationError(
                f"Pin targets have shape {targets.shape}, expected {self.rest_pins.shape}."
            )
        if not np.all(np.isfinite(targets)):
            raise SimulationError(f"The pin targets of frame {frame} are not finite.")
        pose, residual = fit_pose(self.rest_pins, targets, guess)
        if residual > self.tolerance:
            raise SimulationError(
                f"At frame {frame} the pin targets stretch or bend the pinned vertices by "
                f"{residual * 1e3:.3g} mm; a reduced model moves its pins only rigidly (as the "
                "object's location and rotation move them). Do not animate the object's scale "
                "while it is pinned, or simulate in full space."
            )
        return pose

    def _frame_map(self, Q: np.ndarray, q: np.ndarray) -> np.ndarray:
        """``U^T M (I (x) Q)(X + U q)`` (k,)."""
        k = self.k
        return Q.ravel() @ (self.gX.reshape(9, k) + self.G.reshape(9 * k, k).dot(q).reshape(9, k))

    def targets(self, h, q_n, qdot_n, prev: Pose, now: Pose, new: Pose):
        """Inertial and damping targets ``(q~, q_d)`` (k,) of a step of ``h`` seconds from the
        state ``q_n, qdot_n`` (frame ``now``, previous step's frame ``prev``) into ``new``."""
        Rt = new.R.T
        q_prev = q_n - h * qdot_n
        a_n = self._frame_map(Rt @ now.R, q_n)
        a_p = self._frame_map(Rt @ prev.R, q_prev)
        b_inertia = 2 * a_n - a_p + self.T @ (Rt @ (2 * now.c - prev.c - new.c)) - self.UMX
        b_damp = a_n + self.T @ (Rt @ (now.c - new.c)) - self.UMX
        sol = sla.cho_solve(self._chol, np.stack([b_inertia, b_damp], axis=1))
        return sol[:, 0], sol[:, 1]

    def gravity(self, g: np.ndarray, pose: Pose) -> np.ndarray:
        """``U^T M (1 (x) R^T g)`` (k,), N."""
        return self.T @ (pose.R.T @ np.asarray(g, dtype=float))


def local_colliders(colliders: list[Collider], pose: Pose) -> list[Collider]:
    """Colliders moved into the frame of ``pose`` (their world transforms premultiplied by
    the inverse pose)."""
    if pose.is_identity or not colliders:
        return colliders
    inv = np.eye(4)
    inv[:3, :3] = pose.R.T
    inv[:3, 3] = -pose.R.T @ pose.c
    return [
        Collider(
            kind=c.kind,
            radius=c.radius,
            half_length=c.half_length,
            transform=inv @ c.transform,
            friction=c.friction,
        )
        for c in colliders
    ]


def to_pin_frame(x: np.ndarray, X: np.ndarray, pinned) -> np.ndarray:
    """Positions (F, n, 3) in the frame of their pins: ``R_f^T (x_f - c_f)`` per frame.

    Frames whose pinned vertices are at rest are returned unchanged; this is what a subspace
    model is trained on when its bakes move the pins.

    Raises
    ------
    SimulationError
        A frame moves the pins non-rigidly (beyond :data:`RIGID_TOLERANCE`).
    """
    x = np.asarray(x, dtype=float)
    pinned = np.asarray(pinned, dtype=np.int64)
    if not pinned.size or len(x) == 0:
        return x
    rest = np.asarray(X, dtype=float)[pinned]
    L = float(np.linalg.norm(X.max(0) - X.min(0))) or 1.0
    out = x.copy()
    pose = IDENTITY
    for f in range(len(x)):
        p = x[f, pinned]
        if np.array_equal(p, rest):
            continue
        pose, residual = fit_pose(rest, p, pose)
        if residual > RIGID_TOLERANCE * L:
            raise SimulationError(
                f"Bake frame {f} moves the pinned vertices non-rigidly ({residual * 1e3:.3g} mm "
                "off a rigid motion); reduced models follow pins only rigidly: bake with pins "
                "that move as the object's location and rotation."
            )
        out[f] = (x[f] - pose.c) @ pose.R
    return out


class PoseMixin:
    """The moving pin frame of a subspace simulator (``SubspaceSimulation``,
    ``AutoencoderSimulation``): state, per-step targets and world positions.

    Needs ``X``, ``U``, ``mass``, ``pinned``, ``M_red``, ``f_gravity``, ``settings``.
    """

    _pin_frame: PinPose | None = None

    def _reset_frame(self) -> None:
        self.pose = self.pose_prev = IDENTITY
        self.pin_targets = self.X[self.pinned].copy()

    def pin_frame(self) -> PinPose:
        if self._pin_frame is None:
            self._pin_frame = PinPose(self.X, self.U, self.mass, self.pinned, self.M_red)
        return self._pin_frame

    def _frame_state(self) -> dict:
        if self.pose.is_identity and self.pose_prev.is_identity:
            return {}
        return {
            "pose": self.pose.to_list(),
            "pose_prev": self.pose_prev.to_list(),
            "pin_targets": self.pin_targets.tolist(),
        }

    def _set_frame_state(self, state: dict) -> None:
        self._reset_frame()
        if "pose" in state:
            self.pose = Pose.from_list(state["pose"])
            self.pose_prev = Pose.from_list(state["pose_prev"])
            self.pin_targets = np.array(state["pin_targets"], dtype=float).reshape(-1, 3)

    def pose_of(self, x: np.ndarray) -> Pose:
        """The pins' pose in positions ``x`` (n, 3): the pose of their pinned vertices."""
        x = np.asarray(x, dtype=float)
        if not self.pinned.size or np.array_equal(x[self.pinned], self.X[self.pinned]):
            return IDENTITY
        return self.pin_frame().fit(x[self.pinned], IDENTITY, 0)

    def frame_of(self, x: np.ndarray) -> Pose:
        """:meth:`pose_of`'s former name (scripts may call it)."""
        return self.pose_of(x)

    def place_frame(self, pose: Pose) -> None:
        """Put the frame at ``pose``, at rest (after ``reset``): the pins at their rest
        positions moved by ``pose``."""
        self.pose = self.pose_prev = pose
        self.pin_targets = pose.apply(self.X[self.pinned])

    def world(self, y: np.ndarray) -> np.ndarray:
        """World positions of frame positions ``y`` (n, 3)."""
        return self.pose.apply(y)

    def step_terms(self, h: float, new: Pose | None, colliders):
        """``(q~, q_d, f_gravity, colliders)`` of a step of ``h`` s into pose ``new`` (None:
        the frame stays): inertial and damping targets (k,), reduced gravity (k,), N, and the
        colliders in the new frame."""
        new = self.pose if new is None else new
        if new.is_identity and self.pose.is_identity and self.pose_prev.is_identity:
            return self.q + h * self.qdot, self.q, self.f_gravity, colliders
        pf = self.pin_frame()
        q_tilde, q_damp = pf.targets(h, self.q, self.qdot, self.pose_prev, self.pose, new)
        g = pf.gravity(self.settings.gravity, new)
        return q_tilde, q_damp, g, local_colliders(colliders, new)

    def _advance_frame(self, new: Pose | None) -> None:
        """After an accepted step into ``new``."""
        new = self.pose if new is None else new
        self.pose_prev, self.pose = self.pose, new


#: Former names (issue 29: "frame" is a timeline frame; the pins' rigid motion is a pose).
PinFrame = PinPose
FrameMixin = PoseMixin
