"""The external state of a Subspace Neural Physics model (Holden 2019): the reference
frame (:func:`reference_pose`), its motion in it (:func:`frame_features`), the colliders in it
(:func:`collider_features`) and the feature vector of a frame (:func:`external_features`)."""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial.transform import Rotation

from ...errors import SimulationError
from ...reduced.pose import IDENTITY, Pose, fit_pose
from .sweep import contact_features

#: Features of one collider: its 3x4 transform in the reference frame (rotation rows, then
#: translation), its radius and its half length (m).
COLLIDER_FEATURES = 14
#: Features of the reference frame: gravity in it (m/s^2), its velocity (m/s), acceleration
#: (m/s^2), angular velocity (rad/s) and angular acceleration (rad/s^2), all in the frame.
FRAME_FEATURES = 15


#: A missing collider is placed this many rest bounding-box diagonals above the object.
FAR_DIAGONALS = 10.0
#: A feature whose standard deviation over the training frames is at most this fraction of
#: (1 + |its mean|) never varied: it is dropped from the network's input (float round-off of
#: a constant feature is ~1e-16 of it).
CONSTANT_FEATURE = 1e-9


# ------------------------------------------------------------------------------------------
# The external state
# ------------------------------------------------------------------------------------------


def reference_pose(rest_pins: np.ndarray, targets: np.ndarray | None, guess: Pose) -> Pose:
    """The reference frame of a pinned object: the rigid motion of its pins (Kabsch, as
    :func:`core.frame.to_pin_frame` fits it); the identity while the pins are at rest, and
    ``guess`` (the last pose) when ``targets`` is None or there are no pins."""
    if targets is None or len(rest_pins) == 0:
        return guess
    targets = np.asarray(targets, dtype=np.float64).reshape(-1, 3)
    if targets.shape != rest_pins.shape:
        raise SimulationError(
            f"Pin targets have shape {targets.shape}, expected {rest_pins.shape}."
        )
    # at rest: the same bytes (0.1 us; per instance, per frame), else the same values (2 us;
    # array_equal less its checks: a -0.0 for a 0.0)
    if targets.tobytes() == rest_pins.tobytes() or (targets == rest_pins).all():
        return IDENTITY
    if not np.all(np.isfinite(targets)):
        raise SimulationError("The pin targets are not finite.")
    return fit_pose(rest_pins, targets, guess)[0]


def frame_features(
    poses: tuple[Pose, Pose, Pose],
    gravity: np.ndarray,
    dt: float,
    origin: np.ndarray | None = None,
) -> np.ndarray:
    """(15,) features of the reference frame at frame t (:data:`FRAME_FEATURES`).

    Parameters
    ----------
    poses : the frame's poses at t, t-1, t-2 (world from frame)
    gravity : (3,) m/s^2, world
    dt : seconds per frame
    origin : (3,) the point of the frame (its rest coordinates) whose velocity and
        acceleration are the features: a model's :attr:`SNPParameters.frame_origin`, the
        object's rest centre; None: the frame's origin (the world origin at rest), whose
        motion mixes the frame's turning with its lever arm to the object
    """
    p0, p1, p2 = poses
    if p0 is IDENTITY and p1 is IDENTITY and p2 is IDENTITY:  # the common case, fast
        return np.concatenate([np.asarray(gravity, float), np.zeros(12)])
    g = np.asarray(gravity, float).tolist()
    o = None if origin is None else np.asarray(origin, float).tolist()
    return np.array(frame_features_list(poses, g, dt, o))


def frame_features_list(
    poses: tuple[Pose, Pose, Pose], g: list, dt: float, o: list | None, memo: list | None = None
) -> list:
    """:func:`frame_features` as a list, gravity ``g`` and origin ``o`` as Python floats.
    ``memo``: a one-item list that keeps the last turn between two poses (this frame's turn
    from t-2 to t-1 is the last frame's from t-1 to t: computed once)."""
    # Python floats on 3-vectors and 3 x 3 matrices: a moving frame's features every frame
    # (numpy's calls on arrays this small cost ~1 us each); each pose converted once
    (R0, c0), (R1, c1), (R2, c2) = (p.rows for p in poses)
    cs = [c0, c1, c2]
    if o is not None:
        cs = [_add(_mv(R, o), c) for R, c in zip((R0, R1, R2), cs)]
    c0, c1, c2 = cs
    inv_dt = 1.0 / dt
    vel = [v * inv_dt for v in mtv(R0, [c0[0] - c1[0], c0[1] - c1[1], c0[2] - c1[2]])]
    acc = mtv(R0, [c0[i] - 2.0 * c1[i] + c2[i] for i in range(3)])
    acc = [a * inv_dt * inv_dt for a in acc]
    p0, p1, p2 = poses
    kept = None if memo is None else memo[0]
    if kept is not None and kept[0] is p2 and kept[1] is p1:
        r1 = kept[2]
    else:
        r1 = _rotvec_rows(mtm(R2, R1))
    r0 = _rotvec_rows(mtm(R1, R0))
    if memo is not None:
        memo[0] = (p1, p0, r0)
    w0 = [w * inv_dt for w in r0]
    w1 = [w * inv_dt for w in r1]
    dw = [(w0[0] - w1[0]) * inv_dt, (w0[1] - w1[1]) * inv_dt, (w0[2] - w1[2]) * inv_dt]
    return mtv(R0, g) + vel + acc + w0 + dw


def _mv(A: list, v: list) -> list:
    """``A v`` of a 3 x 3 (rows) and a 3-vector, Python floats."""
    a0, a1, a2 = A
    return [
        a0[0] * v[0] + a0[1] * v[1] + a0[2] * v[2],
        a1[0] * v[0] + a1[1] * v[1] + a1[2] * v[2],
        a2[0] * v[0] + a2[1] * v[1] + a2[2] * v[2],
    ]


def mtv(A: list, v: list) -> list:
    """``A^T v``, Python floats."""
    a0, a1, a2 = A
    x, y, z = v
    return [
        a0[0] * x + a1[0] * y + a2[0] * z,
        a0[1] * x + a1[1] * y + a2[1] * z,
        a0[2] * x + a1[2] * y + a2[2] * z,
    ]


def mtm(A: list, B: list) -> list:
    """``A^T B`` of two 3 x 3 (rows), Python floats (unrolled: three a frame)."""
    (a00, a01, a02), (a10, a11, a12), (a20, a21, a22) = A
    (b00, b01, b02), (b10, b11, b12), (b20, b21, b22) = B
    return [
        [a00 * b00 + a10 * b10 + a20 * b20, a00 * b01 + a10 * b11 + a20 * b21,
         a00 * b02 + a10 * b12 + a20 * b22],
        [a01 * b00 + a11 * b10 + a21 * b20, a01 * b01 + a11 * b11 + a21 * b21,
         a01 * b02 + a11 * b12 + a21 * b22],
        [a02 * b00 + a12 * b10 + a22 * b20, a02 * b01 + a12 * b11 + a22 * b21,
         a02 * b02 + a12 * b12 + a22 * b22],
    ]  # fmt: skip


def _add(a: list, b: list) -> list:
    return [a[0] + b[0], a[1] + b[1], a[2] + b[2]]


def _rotvec_rows(R: list) -> list:
    """:func:`_rotvec` of a 3 x 3 rotation given as rows of Python floats."""
    v = [R[2][1] - R[1][2], R[0][2] - R[2][0], R[1][0] - R[0][1]]
    c = 0.5 * (R[0][0] + R[1][1] + R[2][2] - 1.0)
    if c < _COS_FALLBACK:
        return Rotation.from_matrix(np.array(R)).as_rotvec().tolist()
    s = 0.5 * math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
    if s < 1e-300:
        return [0.0, 0.0, 0.0]
    k = math.atan2(s, c) / (2.0 * s)
    return [v[0] * k, v[1] * k, v[2] * k]


def _rotvec(R: np.ndarray) -> np.ndarray:
    """``log(R)`` as a rotation vector: closed form (angle ``atan2(|v| / 2, (tr R - 1) / 2)``
    about ``v``, the axial vector of ``R - R^T``), accurate from zero up to near a half turn;
    scipy's general conversion only past 170 degrees, where ``v`` vanishes. The closed form is
    ~20x faster than scipy's, which cost ~57 us twice per frame of a moving reference frame."""
    return np.array(_rotvec_rows(np.asarray(R, dtype=np.float64).tolist()))


#: Below this cosine of the angle (170 degrees) :func:`_rotvec` uses scipy's conversion.
_COS_FALLBACK = math.cos(math.radians(170.0))


def collider_features(transforms: np.ndarray, sizes: np.ndarray, pose: Pose) -> np.ndarray:
    """(c * 14,) features of colliders (:data:`COLLIDER_FEATURES`) in the frame ``pose``:
    per collider its rotation (row-major), translation, radius and half length.

    Parameters
    ----------
    transforms : (c, 4, 4) world transforms
    sizes : (c, 2) radius and half length of each, m
    """
    T = np.asarray(transforms, dtype=np.float64).reshape(-1, 4, 4)
    sizes = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
    if pose is IDENTITY or pose.is_identity:
        return np.concatenate([T[:, :3, :3].reshape(-1, 9), T[:, :3, 3], sizes], axis=1).reshape(-1)
    # Python floats (as frame_features): a few colliders a frame in a moving frame
    Rp, cp = pose.R.tolist(), pose.c.tolist()
    out = []
    for M, sz in zip(T.tolist(), sizes.tolist()):
        t = mtv(Rp, [M[0][3] - cp[0], M[1][3] - cp[1], M[2][3] - cp[2]])
        Q = mtm(Rp, [M[0][:3], M[1][:3], M[2][:3]])
        out += (*Q[0], *Q[1], *Q[2], *t, *sz)
    return np.array(out)


def to_frame(transforms: np.ndarray, pose: Pose) -> np.ndarray:
    """(c, 4, 4) world transforms expressed in the frame ``pose``."""
    M = np.asarray(transforms, dtype=np.float64).reshape(-1, 4, 4)
    if pose is IDENTITY or pose.is_identity:
        return M
    inv = np.eye(4)
    inv[:3, :3] = pose.R.T
    inv[:3, 3] = -pose.R.T @ pose.c
    return inv @ M


def external_features(
    transforms: np.ndarray,
    sizes: np.ndarray,
    poses: tuple[Pose, Pose, Pose],
    gravity: np.ndarray,
    dt: float,
    origin: np.ndarray | None = None,
    contact: tuple | None = None,
) -> np.ndarray:
    """The external state ``f`` (15 + 14 c,) of one frame: the reference frame's
    (:func:`frame_features`), then each collider's (:func:`collider_features`), in the frame
    ``poses[0]``; with ``contact``, then each collider's :func:`contact_features` (15 + 19 c,).
    The trainer computes it here; the runtime (:meth:`SNPSimulation.batch_features`) the same.

    Parameters
    ----------
    transforms : (c, 4, 4) collider world transforms at the end of the frame
    sizes : (c, 2) their radius and half length, m
    poses : reference frame at t, t-1, t-2
    gravity : (3,) m/s^2, world; dt : s; origin : see :func:`frame_features`
    contact : ``(X, before, kinds)``: the rest shape (n, 3), the colliders' world transforms
        at the end of the frame before (c, 4, 4, in the frame ``poses[1]``) and their kinds
    """
    parts = [
        frame_features(poses, gravity, dt, origin),
        collider_features(transforms, sizes, poses[0]),
    ]
    if contact is not None:
        X, before, kinds = contact
        parts.append(
            contact_features(
                X, to_frame(before, poses[1]), to_frame(transforms, poses[0]), kinds, sizes
            )
        )
    return np.concatenate(parts)


def feature_names(kinds: list[str], contact: bool = False) -> list[str]:
    """Names of the features of :func:`external_features` (the model file records them)."""
    names = [
        f"{what}_{a}"
        for what in (
            "gravity",
            "velocity",
            "acceleration",
            "angular_velocity",
            "angular_acceleration",
        )
        for a in "xyz"
    ]
    for i, kind in enumerate(kinds):
        names += [f"collider{i}_{kind}_R{r}{c}" for r in range(3) for c in range(3)]
        names += [f"collider{i}_{kind}_t{a}" for a in "xyz"]
        names += [f"collider{i}_{kind}_radius", f"collider{i}_{kind}_half_length"]
    if contact:
        for i, kind in enumerate(kinds):
            names += [f"collider{i}_{kind}_push_out_{a}" for a in "xyz"]
            names += [f"collider{i}_{kind}_depth", f"collider{i}_{kind}_inside"]
    return names
