"""Subspace Neural Physics (Holden et al. 2019): the runtime of the ``snp`` method.

No physics is solved at run time: a network trained on bakes predicts the next state of a
PCA subspace from the two before and the state of what acts on the object (sec. 3, 5).

Positions, in the object's reference frame ``(R, c)`` (``x = R y + c``), are

    y = y_mu + U z            (sec. 5.1; U (3n, u) orthonormal columns, y_mu the mean pose)

so ``z = U^T (y - y_mu)`` (mean-centred PCA, not mass-weighted: the paper's, and the
vertex-error measure it minimizes). The external state of a frame is a feature vector ``f``
(:func:`external_features`): each collider's transform in the reference frame and its size,
gravity in the frame, and the frame's velocity, acceleration, angular velocity and angular
acceleration in it (zero when the frame does not move). It is clipped to the range the
training saw (sec. 8.1), standardized and rotated by its PCA (``w = V (f - f_mu) / f_sd``,
the features that never varied dropped; the paper's ``W = V (Y - y_mu)`` with ``v = e``).
A step is eq. (1) and (3)::

    z_bar = alpha * z_{t-1} + beta * (z_{t-1} - z_{t-2})                        eq. (1)
    z_t   = clip( z_bar + s * Phi([z_bar / s, z_{t-1} / s, w_t]) )              eq. (3)

``alpha``, ``beta`` (u,) are the per-mode least-squares fit of eq. (2), ``Phi`` a ReLU
network (:class:`core.nnet.MLP`, evaluated in float64), ``s`` one scalar (the standard
deviation of the first PCA coordinate over the training frames) that makes the network's
inputs and outputs O(1) whatever the object's size; it folds the paper's unnormalized
network into ours exactly. ``clip`` keeps each coordinate within the range of the training
frames (sec. 8.1), which bounds the output whatever the inputs.

Where we depart from the paper, and why:

* The reference frame of our FEM bakes is the pins' frame (:mod:`core.frame`: a pinned
  object's pins move rigidly with the object's animation), fitted each frame from the pin
  targets; without pins it is the world. Its velocity terms are finite differences of the
  last three poses (``omega = log(R_{t-1}^T R_t) / dt``, in the frame). A model trained on
  Blender's cloth (:mod:`core.clothbake`) is driven by a transform instead: the frame of a
  step is ``M_t M_rest^-1`` with ``M_t`` the frame's ``FrameInputs.reference_frame`` (the
  cloth object's world matrix, its owner's motion included; scale divided out) and
  ``M_rest`` the one its bakes started from (:meth:`SNPSimulation.driven_pose`).
* Render-time push-out (sec. 6.4): :meth:`SNPSimulation.positions` moves the vertices a
  collider holds inside it to its surface (:func:`push_out`); the state stays the
  network's. Normals: a cloth model has the paper's linear normal model (sec. 6.3,
  :func:`linear_normals`: ``n = R (n_mu + Q z)`` normalized, ``Q`` fitted by least squares on
  the training frames' normals), the default of :meth:`SNPSimulation.normals`; recomputing
  them from the triangles (:class:`VertexNormals`) stays available (``normal_model =
  "recomputed"``). On the 2,500-vertex cape of bench/snp_cloth.py the linear model, in
  float32, costs a fraction of the recomputation, and its normals are 1.5 degrees (mean;
  95th percentile 5.0) from the recomputed ones on held-out frames, while the PCA truncation
  itself puts the recomputed normals 4.4 degrees from the bake's. In Blender the mesh's own
  normals are recomputed by Blender when the positions are written, so the frame update
  needs neither.
* A collider the frame lacks (fewer colliders than the model was trained with) is put far
  above the object (:data:`FAR_DIAGONALS` bounding-box diagonals), which the input clipping
  turns into the farthest place above it that training saw: "no collider" means "out of
  reach", not "at its average position", which may be in contact.
* Contact features (the ``contact_features`` setting; automatic: on for soft-body bakes whose
  colliders move, off for Blender cloth bakes): per collider, how it
  swept through the rest shape over the frame (:func:`contact_features`: the mean push-out
  vector, the deepest penetration, the fraction of vertices inside, from
  :data:`SWEEP_SAMPLES` positions between its last transform and this one, or exactly for a
  sphere that only translates). The paper's
  external state is each collider's position at the end of the frame; the block of
  tests/test_snp.py is hit by a sphere of 10 cm radius that moves up to 17 cm a frame and
  touches it for one to three frames, so where it came from is most of the contact. On that
  block (3 bakes trained on, 60 epochs) the held-out error went from 0.915x the initial
  model's to 0.659x; on the block pressed by a sphere that now replaces it (contact lasting
  13 frames on average; training/snp.py) 0.51x against 0.91x without them, over 12 held-out
  bakes. The runtime takes the sweep from the last frame's colliders; a slot
  filled in only one of the two frames does not sweep. A sphere that only translates over
  the frame (the same rotation and scale; the usual collider) sweeps exactly a capsule: its
  features are the capsule's (:func:`_sphere_sweeps`, no sampling), in a third of the array
  calls: the pressed block's step at u = 64 (80 vertices, a held-out bake's 72 frames, min
  of 60 passes, the former and this runtime in one process on one core, load 4.3) 121.5 ->
  87.5 us with contact features, 27-28 us without (the issue's goal of 60 us is met without
  them only: the features cost 60 us, were 94); with the runtime's bounding box, a sweep whose
  capsule's box misses the rest shape's returns at once: 82 -> 78 us (load 2.5); the contact features of one press of
  bench/snp.py's 288-vertex block 150 -> 82 us (load 4). Cost of the sampled sweep: a signed distance per vertex
  within reach of the sweep, per sample and collider: the test block's step (80 vertices, one
  sphere) 26.3 -> 74.5 us (one core, min of 5 passes over a held-out bake the sphere keeps
  hitting; a sweep that stays outside the rest shape's bounding ball costs 8 us, one inside
  it ~70 us; the per-sample Collider of the first version cost 480 us). A batch computes them
  for all its instances and colliders at once (:func:`batch_contact_features`, equal to each
  instance's :func:`contact_features`, the trainer's, to the last bit): 100 instances of
  bench/snp.py's block (288 vertices, one sphere) in one step 6.38 -> 1.13 ms with contact
  features, 0.56 ms without (one core, load 2-2.5; the per-instance loop it replaces).
  The step's fixed costs were most of what was left: the step of one instance whose frame is
  the world (the usual soft body; :meth:`SNPSimulation._world_features`) reads its colliders'
  transforms once as Python floats (the ball, translation and capsule-box tests in scalars,
  the feature vector made an array once) and sweeps the vertices by coordinate (an (n, 3)
  array less a (3,) row runs a 3-long loop per vertex: 5 us a call at 288 vertices); a batch
  gathers its transforms as bytes and culls its translating spheres by the capsule's box.
  The same features to the last bit; the pressed block at u = 64 (A/B against the former code
  in one process, one core, min of 15 passes over a held-out bake, load 2.8): 81.4 -> 48.6 us
  a step (the network 15 of them), 100 instances 1.09 -> 0.86 ms (u = 21: 77.1 -> 44.5 us,
  0.91 -> 0.67 ms).
* The runtime state is ``(z_{t-1}, z_{t-2})``, the poses of the last three frames and the
  colliders (the last ones stay when a frame gives none), so ``get_state``/``set_state``
  continue bit-identically.

Many instances of one model (the paper's 256 bunnies, sec. 8) step as one batch:
:class:`SNPBatch` holds B states and :meth:`SNPSimulation.advance` steps them with one
network pass of B rows (the single simulator is its B = 1 case, one code path). Only the
per-instance bookkeeping (reading each instance's colliders and pins) is a Python loop; the
contact features are vectorized over instances (one instance takes the per-collider loop, the
same bits in fewer array calls).

Speed. The step runs :class:`FoldedStep`: eq. (1), the encoder and ``s`` folded into the
network's first and last layers, one product per layer (on vectors for one instance); a
driver matrix seen before gets its pose from a memo. Measured on one core with the machine
loaded (min of repeated runs): the 2,500-vertex cape's step (u = 64, network 131-96-96-96-64)
95 -> 30-45 us, the folded map alone 15 us; A/B against the previous step in the same runs
2-3x (bench/snp_cloth.py).

The trainer is :mod:`training.snp` (torch); this module is numpy only.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from ...data.modelfile import save_model
from ...engine.protocol import SimulatorBase
from ...errors import CacheError, SimulationError
from ...kinds.cloth.source import rigid
from ...physics.colliders import Collider
from ...physics.sim import FrameInputs, SimSettings, StepReport
from ...reduced.model import SUBSPACE_SETTING, SUBSPACE_SETTINGS, TRAINER_SETTING
from ...reduced.nnet import MLP
from ...reduced.pose import IDENTITY, Pose, fit_pose
from ...registry import Method, Setting

NAME = "snp"

#: Features of one collider: its 3x4 transform in the reference frame (rotation rows, then
#: translation), its radius and its half length (m).
COLLIDER_FEATURES = 14
#: Features of the reference frame: gravity in it (m/s^2), its velocity (m/s), acceleration
#: (m/s^2), angular velocity (rad/s) and angular acceleration (rad/s^2), all in the frame.
FRAME_FEATURES = 15
#: Contact features of one collider (a model trained with ``contact_features``): of the rest
#: shape's vertices inside the volume the collider swept over the frame, the mean push-out
#: vector over all vertices (m, 3), the deepest penetration (m) and the fraction inside.
CONTACT_FEATURES = 5
#: Positions of a collider over a frame (from its last transform to this one, linearly) at
#: which :func:`swept_push_out` takes its penetration: a sphere of radius r moving d per frame
#: is missed by at most ``r - sqrt(r^2 - (d / 6)^2)`` between samples.
SWEEP_SAMPLES = 4
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
    return np.array(_frame_features(poses, g, dt, o))


def _frame_features(
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
    vel = [v * inv_dt for v in _mtv(R0, [c0[0] - c1[0], c0[1] - c1[1], c0[2] - c1[2]])]
    acc = _mtv(R0, [c0[i] - 2.0 * c1[i] + c2[i] for i in range(3)])
    acc = [a * inv_dt * inv_dt for a in acc]
    p0, p1, p2 = poses
    kept = None if memo is None else memo[0]
    if kept is not None and kept[0] is p2 and kept[1] is p1:
        r1 = kept[2]
    else:
        r1 = _rotvec_rows(_mtm(R2, R1))
    r0 = _rotvec_rows(_mtm(R1, R0))
    if memo is not None:
        memo[0] = (p1, p0, r0)
    w0 = [w * inv_dt for w in r0]
    w1 = [w * inv_dt for w in r1]
    dw = [(w0[0] - w1[0]) * inv_dt, (w0[1] - w1[1]) * inv_dt, (w0[2] - w1[2]) * inv_dt]
    return _mtv(R0, g) + vel + acc + w0 + dw


def _mv(A: list, v: list) -> list:
    """``A v`` of a 3 x 3 (rows) and a 3-vector, Python floats."""
    a0, a1, a2 = A
    return [
        a0[0] * v[0] + a0[1] * v[1] + a0[2] * v[2],
        a1[0] * v[0] + a1[1] * v[1] + a1[2] * v[2],
        a2[0] * v[0] + a2[1] * v[1] + a2[2] * v[2],
    ]


def _mtv(A: list, v: list) -> list:
    """``A^T v``, Python floats."""
    a0, a1, a2 = A
    x, y, z = v
    return [
        a0[0] * x + a1[0] * y + a2[0] * z,
        a0[1] * x + a1[1] * y + a2[1] * z,
        a0[2] * x + a1[2] * y + a2[2] * z,
    ]


def _mtm(A: list, B: list) -> list:
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
        t = _mtv(Rp, [M[0][3] - cp[0], M[1][3] - cp[1], M[2][3] - cp[2]])
        Q = _mtm(Rp, [M[0][:3], M[1][:3], M[2][:3]])
        out += (*Q[0], *Q[1], *Q[2], *t, *sz)
    return np.array(out)


def swept_push_out(
    X: np.ndarray, before: np.ndarray, after: np.ndarray, kind: str, size: np.ndarray
) -> np.ndarray:
    """(n, 3) push-out of points ``X`` (n, 3) out of the volume a collider swept over a frame:
    at :data:`SWEEP_SAMPLES` transforms linearly from ``before`` to ``after`` (4, 4), per
    point the deepest penetration's depth times the collider's outward normal there (the
    first sample on a tie); zero outside. All in one frame (the object's reference frame:
    ``X`` its rest shape). The signed distances are :meth:`core.colliders.Collider.
    signed_distance`'s, vectorized over the samples (a Collider per sample cost ~100 us a
    frame).

    Parameters
    ----------
    X : (n, 3) m; before, after : (4, 4) the collider's transforms; kind : its kind
    size : (2,) its radius and half length, m
    """
    out = np.zeros_like(X)
    if kind == "plane":
        idx = None
    else:  # only the points within reach of the sweep's middle (most frames: none)
        t0, t1 = before[:3, 3], after[:3, 3]
        # a blend's column norms are at most the larger end's (the norm is convex)
        sc = np.maximum(
            np.sqrt(_dot3(before[:3, :3].T, before[:3, :3].T)),
            np.sqrt(_dot3(after[:3, :3].T, after[:3, :3].T)),
        )
        reach = float(size[0]) * sc.max() + float(size[1]) * sc[2] * (kind == "capsule")
        reach += 0.5 * math.dist(t0, t1)
        d = X - 0.5 * (t0 + t1)
        idx = np.flatnonzero(_dot3(d, d) < reach * reach)
        if not len(idx):
            return out
    Y = X if idx is None else X[idx]
    s = _SWEEP[:, None, None]
    M = (1.0 - s) * before[:3] + s * after[:3]  # (K, 3, 4)
    A, t = M[:, :, :3], M[:, :, 3]
    scales = np.sqrt(_dot3(A.swapaxes(1, 2), A.swapaxes(1, 2)))  # (K, 3) column norms
    R = A / np.maximum(scales, 1e-300)[:, None, :]
    d = Y[None] - t[:, None]  # (K, m, 3)
    if kind == "plane":
        depth = -_dot3(d, R[:, None, :, 2])
    else:
        if kind == "capsule":
            h = float(size[1]) * scales[:, 2, None]
            d = d - np.clip(_dot3(d, R[:, None, :, 2]), -h, h)[..., None] * R[:, None, :, 2]
        dist = np.sqrt(_dot3(d, d))
        depth = (float(size[0]) * scales.max(axis=1))[:, None] - dist
    best = np.argmax(depth, axis=0)
    cols = np.arange(len(Y))
    deepest = depth[best, cols]
    inside = np.flatnonzero(deepest > 0.0)
    if not len(inside):
        return out
    k = best[inside]
    if kind == "plane":
        N = R[k, :, 2]
    else:
        v = d[k, inside]
        r = dist[k, inside]
        N = v / np.maximum(r, 1e-300)[:, None]
        centre = r <= 1e-12  # at the centre any direction is a valid push-out direction
        N[centre] = R[k[centre], :, 0]
    out[inside if idx is None else idx[inside]] = deepest[inside, None] * N
    return out


#: Where between a collider's last and current transform :func:`swept_push_out` samples it.
_SWEEP = np.linspace(0.0, 1.0, SWEEP_SAMPLES)


def contact_features(
    X: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    kinds: list[str],
    sizes: np.ndarray,
    bound: tuple | None = None,
) -> np.ndarray:
    """(c * 5,) contact features (:data:`CONTACT_FEATURES`) of c colliders moving from
    transforms ``before`` to ``after`` (c, 4, 4), in the reference frame, against the rest
    shape ``X`` (n, 3) (:func:`swept_push_out`): per collider the mean push-out vector over
    the vertices, the deepest penetration and the fraction of vertices inside. Zero for a
    collider that swept past the rest shape.

    Why: the colliders' transforms at the end of a frame (the paper's external state) say
    nothing of where a collider came from or how deep it sits in the object. How deep and
    from where the collider passed through the rest shape is the contact, in numbers that do
    not depend on where on the object it happened: on the block of tests/test_snp.py,
    pressed by a sphere, held-out 0.51x the initial model with them, 0.91x without
    (training/snp.py's docstring).

    A sphere that keeps its rotation and scale over the frame sweeps a capsule: its features
    are the capsule's, exactly (:func:`_sphere_sweeps`); the other colliders are sampled
    (:func:`swept_push_out`).

    ``bound``: ``(centre (3,), radius)`` of a ball holding ``X``, optionally with X's bounding
    box ``(lo, hi)`` (the runtime's, computed once):
    a collider whose sweep stays outside it is skipped with a few scalar operations (most
    frames; the same features: it would push nothing out)."""
    out = np.zeros((len(kinds), CONTACT_FEATURES))
    for i, kind in enumerate(kinds):
        r, h = float(sizes[i][0]), float(sizes[i][1])
        f = _contact_one(X, before[i].tolist(), after[i].tolist(), kind, r, h, bound)
        if f is not None:
            out[i] = f
    return out.reshape(-1)


def _contact_one(X, bl: list, al: list, kind: str, r: float, h: float, bound) -> list | None:
    """The contact features (5 floats) of one collider sweeping from ``bl`` to ``al`` (its
    transforms as nested lists, 4 x 4), or None for zeros: :func:`contact_features`' body,
    which the runtime's step of one instance calls directly (its colliders' transforms read
    once as Python floats: the ball test, the translation test and a translating sphere's
    sweep take scalars, not array calls). A plane is sampled whatever the bound."""
    if kind == "plane":
        return _swept_one(X, np.array(bl), np.array(al), kind, (r, h))
    if bound is not None and _misses(bound, bl, al, r, h):
        return None
    if kind == "sphere" and _translates(bl, al):
        box = bound[2] if bound is not None and len(bound) > 2 else None
        return _sphere_sweep_one(X, bl, al, r, box)
    return _swept_one(X, np.array(bl), np.array(al), kind, (r, h))


def _swept_one(X, before: np.ndarray, after: np.ndarray, kind: str, size) -> list | None:
    """The sampled sweep's features (5 floats, :func:`swept_push_out`), or None for zeros."""
    P = swept_push_out(X, before, after, kind, size)
    depth = np.sqrt(_dot3(P, P))
    if not depth.any():
        return None
    return [*P.mean(axis=0), depth.max(), np.count_nonzero(depth) / len(X)]


def _sweep_misses(bound: tuple, before: np.ndarray, after: np.ndarray, size) -> bool:
    """:func:`_misses` of (4, 4) transforms and a size (2,)."""
    return _misses(bound, before.tolist(), after.tolist(), float(size[0]), float(size[1]))


def _misses(bound: tuple, bl: list, al: list, r: float, h: float) -> bool:
    """Whether a sphere or capsule (radius ``r``, half length ``h``) moving from ``bl`` to
    ``al`` (4 x 4 nested lists) stays outside the ball ``bound`` (centre, radius): the distance
    from the ball's centre to the segment its centre moves along, against the radii and a
    capsule's half length times the larger axis scale (at most sqrt(3) times the largest
    matrix entry), in Python floats."""
    (cx, cy, cz), rb = bound[0], bound[1]
    ax, ay, az = bl[0][3], bl[1][3], bl[2][3]
    ux, uy, uz = al[0][3] - ax, al[1][3] - ay, al[2][3] - az
    wx, wy, wz = cx - ax, cy - ay, cz - az
    uu = ux * ux + uy * uy + uz * uz
    s = 0.0 if uu <= 0.0 else min(max((wx * ux + wy * uy + wz * uz) / uu, 0.0), 1.0)
    dx, dy, dz = wx - s * ux, wy - s * uy, wz - s * uz
    big = max(
        abs(bl[0][0]), abs(bl[0][1]), abs(bl[0][2]),
        abs(bl[1][0]), abs(bl[1][1]), abs(bl[1][2]),
        abs(bl[2][0]), abs(bl[2][1]), abs(bl[2][2]),
        abs(al[0][0]), abs(al[0][1]), abs(al[0][2]),
        abs(al[1][0]), abs(al[1][1]), abs(al[1][2]),
        abs(al[2][0]), abs(al[2][1]), abs(al[2][2]),
    )  # fmt: skip
    reach = (r + h) * (_SQRT3 * big) + rb
    return dx * dx + dy * dy + dz * dz > reach * reach


_SQRT3 = math.sqrt(3.0)


def batch_contact_features(
    X: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    kinds: list[str],
    sizes: np.ndarray,
    bound: tuple | None = None,
) -> np.ndarray:
    """(B, c * 5) :func:`contact_features` of B instances at once: ``before``, ``after``
    (B, c, 4, 4) the colliders' transforms in each instance's reference frame, ``sizes``
    (B, c, 2). What the runtime's step runs (:meth:`SNPSimulation.batch_features`); equal to
    :func:`contact_features` of each instance bit for bit (tests/test_snp.py).

    Vectorized over instances and colliders of a kind: the sweeps that reach the ball
    ``bound`` (:func:`_sweep_misses`, on arrays), then the (sweep, vertex) pairs within reach
    of the sweep's middle (as :func:`swept_push_out`), then the :data:`SWEEP_SAMPLES` signed
    distances of every pair in one pass. The arithmetic is elementwise per pair (the dot
    products written out, no reduction over the batch), so an instance's features do not
    depend on the batch it is in; the per-sweep sums are :func:`numpy.bincount`'s, in vertex
    order as :func:`contact_features`' mean."""
    B, c = before.shape[:2]
    if B == 1:  # one instance: the per-collider loop, the same bits in fewer array calls
        return contact_features(X, before[0], after[0], kinds, sizes[0], bound)[None]
    groups = _kind_groups(tuple(kinds))
    if len(groups) == 1:  # one kind (the common case): every slot at once
        f = _swept_features(
            X,
            before.reshape(-1, 4, 4),
            after.reshape(-1, 4, 4),
            kinds[0],
            sizes.reshape(-1, 2),
            bound,
        )
        return f.reshape(B, -1)
    out = np.zeros((B, c, CONTACT_FEATURES))
    for kind, slots in groups:
        f = _swept_features(
            X,
            before[:, slots].reshape(-1, 4, 4),
            after[:, slots].reshape(-1, 4, 4),
            kind,
            sizes[:, slots].reshape(-1, 2),
            bound,
        )
        out[:, slots] = f.reshape(B, len(slots), CONTACT_FEATURES)
    return out.reshape(B, -1)


@functools.lru_cache(maxsize=64)
def _kind_groups(kinds: tuple) -> tuple:
    """``((kind, slots), ...)``: the collider slots of each kind, in sorted kind order."""
    return tuple((k, [i for i, x in enumerate(kinds) if x == k]) for k in sorted(set(kinds)))


def _dot3(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dot products over the last axis (3), written out: the same sum in the same order
    whatever the shape (a reduction's order may depend on it)."""
    out = a[..., 0] * b[..., 0]
    out += a[..., 1] * b[..., 1]
    out += a[..., 2] * b[..., 2]
    return out


def _swept_features(X, before, after, kind, size, bound) -> np.ndarray:
    """(S, 5) contact features of S sweeps of one kind (:func:`batch_contact_features`)."""
    S, n = len(before), len(X)
    out = np.zeros((S, CONTACT_FEATURES))
    if kind == "plane":
        act = np.arange(S)
    else:
        if bound is None:
            act = np.arange(S)
        elif S <= _SCALAR_SWEEPS:  # a few: in Python floats
            act = [j for j in range(S) if not _sweep_misses(bound, before[j], after[j], size[j])]
        else:  # _sweep_misses on arrays (the same arithmetic)
            centre, rb = bound[0], bound[1]
            t0 = before[:, :3, 3]
            u = after[:, :3, 3] - t0
            w = centre - t0
            uu = _dot3(u, u)
            s = np.clip(_dot3(w, u) / np.where(uu > 0.0, uu, 1.0), 0.0, 1.0)
            s[uu <= 0.0] = 0.0
            dd = w - s[:, None] * u
            scale = _SQRT3 * np.maximum(
                np.abs(before[:, :3, :3]).max(axis=(1, 2)),
                np.abs(after[:, :3, :3]).max(axis=(1, 2)),
            )
            reach = (size[:, 0] + size[:, 1]) * scale + rb
            act = np.flatnonzero(_dot3(dd, dd) <= reach * reach)
        if not len(act):
            return out
        if len(act) < S:
            before, after, size = before[act], after[act], size[act]
    if kind == "sphere":
        rigid = np.all(before[:, :3, :3] == after[:, :3, :3], axis=(1, 2))
        if rigid.any():
            rows = np.asarray(act)[rigid]
            box = bound[2] if bound is not None and len(bound) > 2 else None
            out[rows] = _sphere_sweeps(X, before[rigid], after[rigid], size[rigid, 0], box)
            if rigid.all():
                return out
            general = ~rigid
            act, before, after, size = (
                np.asarray(act)[general],
                before[general],
                after[general],
                size[general],
            )
    if kind == "plane" or len(act) * n <= _ALL_PAIRS:  # every vertex of every sweep
        loc, vert = _all_pairs(len(act), n)
    else:
        t0, t1 = before[:, :3, 3], after[:, :3, 3]
        # a blend's column norms are at most the larger end's (the norm is convex)
        sc = np.sqrt(np.maximum(_colsq(before[:, :3, :3]), _colsq(after[:, :3, :3])))
        reach = size[:, 0] * sc.max(axis=1)
        if kind == "capsule":
            reach += size[:, 1] * sc[:, 2]
        step = t1 - t0
        reach += 0.5 * np.sqrt(_dot3(step, step))
        # |x - mid|^2 < reach^2 by one product (a filter, so its round-off only needs a
        # margin: a vertex it lets through that is out of reach is not pushed out)
        mid = 0.5 * (t0 + t1)
        xx, mm = _dot3(X, X), _dot3(mid, mid)
        d2 = (xx - 2.0 * (mid @ X.T)) + mm[:, None]  # (S', n)
        loc, vert = np.nonzero(d2 < (reach * reach + 1e-9 * mm)[:, None] + 1e-9 * xx)
        if not len(loc):
            return out
    s = _SWEEP[None, :, None, None]
    M = (1.0 - s) * before[:, None, :3] + s * after[:, None, :3]  # (S', K, 3, 4)
    A = M[..., :3]
    scales = np.sqrt(_colsq(A))  # (S', K, 3) column norms
    axis = A[..., 2] / np.maximum(scales[..., 2], 1e-300)[..., None]  # (S', K, 3)
    d = X[vert][:, None] - np.ascontiguousarray(M[..., 3])[loc]  # (P, K, 3)
    if kind == "plane":
        depth = -_dot3(d, axis[loc])
    else:
        if kind == "capsule":
            h = size[loc, 1, None] * scales[loc, :, 2]
            d = d - np.clip(_dot3(d, axis[loc]), -h, h)[..., None] * axis[loc]
        dist = np.sqrt(_dot3(d, d))
        depth = (size[:, 0, None] * scales.max(axis=2))[loc] - dist
    best = np.argmax(depth, axis=1)  # the first sample on a tie
    deepest = depth[:, 0].copy()  # depth[best], exactly (a max over few columns, as columns)
    for j in range(1, depth.shape[1]):
        np.maximum(deepest, depth[:, j], out=deepest)
    inside = np.flatnonzero(deepest > 0.0)
    if not len(inside):
        return out
    k, sw = best[inside], loc[inside]
    if kind == "plane":
        N = axis[sw, k]
    else:
        r = dist[inside, k]
        N = d[inside, k] / np.maximum(r, 1e-300)[:, None]
        centre = r <= 1e-12  # at the centre any direction is a valid push-out direction
        if centre.any():
            N[centre] = (
                A[sw[centre], k[centre], :, 0]
                / np.maximum(scales[sw[centre], k[centre], 0], 1e-300)[:, None]
            )
    push = deepest[inside, None] * N
    norm = np.sqrt(_dot3(push, push))
    # per sweep (sw ascends): the sums in vertex order, as contact_features' mean
    first = np.flatnonzero(sw[1:] != sw[:-1]) + 1
    first = np.concatenate((_ZERO, first)) if len(first) else _ZERO
    rows = np.asarray(act)[sw[first]]
    f = out[rows]
    # one bincount for the three components (reduceat's sums are pairwise, not in order)
    sums = np.bincount((3 * sw[:, None] + _XYZ).reshape(-1), push.reshape(-1), 3 * len(before))
    f[:, :3] = sums.reshape(-1, 3)[sw[first]] / n
    f[:, 3] = np.maximum.reduceat(norm, first)
    f[:, 4] = np.bincount(sw, norm != 0.0, len(before))[sw[first]] / n
    f[f[:, 3] == 0.0] = 0.0  # contact_features: zero unless some push is nonzero
    out[rows] = f
    return out


def _translates(bl: list, al: list) -> bool:
    """Whether a collider kept its rotation and scale over the frame (it only moved): its
    transforms as nested lists, compared as floats."""
    return bl[0][:3] == al[0][:3] and bl[1][:3] == al[1][:3] and bl[2][:3] == al[2][:3]


def _sphere_sweeps(
    X: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    radius: np.ndarray,
    box: tuple | None = None,
) -> np.ndarray:
    """(S, 5) contact features (:func:`contact_features`) of S spheres that only translate
    over the frame, from ``before`` to ``after`` (S, 4, 4) (the same rotation and scale),
    ``radius`` (S,) before scaling: the swept volume is exactly a capsule, so a vertex's
    penetration is the radius less its distance to the segment the centre moved along (no
    sampling), pushed out along that distance's direction (at the segment itself, the
    sphere's first axis). The fast path of spheres, the usual collider: about a third of the
    array calls of :func:`swept_push_out`'s sampled sweep. Elementwise per (sweep, vertex) pair,
    the sums in vertex order (:func:`numpy.bincount`), so a sweep's features do not depend on
    the other sweeps: one sweep broadcasts over the vertices, several gather their pairs,
    with the same bits. ``box``: ``(lo, hi)`` a box holding X (the runtime's ``bound``): the
    sweeps whose capsule's box misses it are zeros without any per-vertex work (most frames of
    a collider near the object, not on it)."""
    S, n = len(before), len(X)
    out = np.zeros((S, CONTACT_FEATURES))
    A = before[:, :3, :3]
    if S == 1:  # every vertex by coordinate, the sweep in floats: faster than gathering pairs
        # whatever the size (at 288 / 1,024 / 5,000 vertices 32 / 38 / 105 us against 101 /
        # 106 / 260 us), the same bits
        f = _sphere_sweep_one(X, before[0].tolist(), after[0].tolist(), float(radius[0]), box)
        if f is not None:
            out[0] = f
        return out
    r = radius * np.sqrt(_colsq(A).max(axis=1))  # (S,) the scaled radius
    t0 = before[:, :3, 3]
    if box is not None:  # _sphere_sweep_one's test of the capsule's box, on arrays
        t1, rr = after[:, :3, 3], r[:, None]
        near = np.all(np.minimum(t0, t1) - rr <= box[1], axis=1)
        near &= np.all(np.maximum(t0, t1) + rr >= box[0], axis=1)
        if not near.all():  # the rest: a sweep's features do not depend on the others'
            near = np.flatnonzero(near)
            if len(near):
                out[near] = _sphere_sweeps(X, before[near], after[near], radius[near])
            return out
    u = after[:, :3, 3] - t0  # (S, 3) the centre's move
    uu = _dot3(u, u)
    uu = np.where(uu > 0.0, uu, 1.0)  # a sphere that did not move: u = 0, s = 0
    if S * n <= _ALL_PAIRS:
        loc, vert = _all_pairs(S, n)
    else:  # the pairs within reach of the segment's middle (a filter; see _swept_features)
        mid = t0 + 0.5 * u
        reach = r + 0.5 * np.sqrt(_dot3(u, u))
        xx, mm = _dot3(X, X), _dot3(mid, mid)
        d2 = (xx - 2.0 * (mid @ X.T)) + mm[:, None]  # (S, n)
        loc, vert = np.nonzero(d2 < (reach * reach + 1e-9 * mm)[:, None] + 1e-9 * xx)
        if not len(loc):
            return out
    w = X[vert] - t0[loc]
    ul = u[loc]
    s = _dot3(w, ul) / uu[loc]
    np.minimum(np.maximum(s, 0.0, out=s), 1.0, out=s)
    d = w - s[:, None] * ul
    r2 = r[loc] * r[loc]
    cand = np.flatnonzero(_dot3(d, d) < r2)
    if not len(cand):
        return out
    sw = loc[cand]
    d = d[cand]
    dist = np.sqrt(_dot3(d, d))
    depth = r[sw] - dist
    inside = depth > 0.0  # sqrt's rounding can leave a vertex on the surface
    if not inside.all():
        d, dist, depth, sw = d[inside], dist[inside], depth[inside], sw[inside]
        if not len(depth):
            return out
    N = d / np.maximum(dist, 1e-300)[:, None]
    centre = dist <= 1e-12  # on the segment any direction is a valid push-out direction
    if centre.any():
        axis = A[:, :, 0] / np.sqrt(_colsq(A)[:, :1])
        N[centre] = axis[sw[centre]]
    push = depth[:, None] * N
    first = np.flatnonzero(sw[1:] != sw[:-1]) + 1
    first = np.concatenate((_ZERO, first)) if len(first) else _ZERO
    rows = sw[first]
    sums = np.bincount((3 * sw[:, None] + _XYZ).reshape(-1), push.reshape(-1), 3 * S)
    out[rows, :3] = sums.reshape(-1, 3)[rows] / n
    out[rows, 3] = np.maximum.reduceat(depth, first)
    out[rows, 4] = np.bincount(sw, minlength=S)[rows] / n
    return out


def _sphere_sweep_one(X: np.ndarray, bl: list, al: list, radius: float, box=None) -> list | None:
    """:func:`_sphere_sweeps` of one sphere, from ``bl`` to ``al`` (its transforms as nested
    lists, 4 x 4), against every vertex: the features (5 floats), or None for zeros. The
    sweep in Python floats, the vertices by broadcasting, in the same operations and order as
    the gathered pairs of :func:`_sphere_sweeps` (Python floats are IEEE doubles), so the
    same bits. ``box``: ``(lo, hi)`` the bounding box of X: a sweep whose capsule's box misses
    it returns None at once (frames near the object but not on it)."""
    (a00, a01, a02, b0), (a10, a11, a12, b1), (a20, a21, a22, b2) = bl[:3]
    c0, c1, c2 = (
        a00 * a00 + a10 * a10 + a20 * a20,
        a01 * a01 + a11 * a11 + a21 * a21,
        a02 * a02 + a12 * a12 + a22 * a22,
    )
    r0 = radius * math.sqrt(max(c0, c1, c2))
    e0, e1, e2 = al[0][3], al[1][3], al[2][3]
    if box is not None:
        (l0, l1, l2), (h0, h1, h2) = box
        if (
            min(b0, e0) - r0 > h0
            or max(b0, e0) + r0 < l0
            or min(b1, e1) - r0 > h1
            or max(b1, e1) + r0 < l1
            or min(b2, e2) - r0 > h2
            or max(b2, e2) + r0 < l2
        ):
            return None
    u0, u1, u2 = e0 - b0, e1 - b1, e2 - b2
    uu = u0 * u0 + u1 * u1 + u2 * u2
    uu = uu if uu > 0.0 else 1.0  # a sphere that did not move: u = 0, s = 0
    # by coordinate (n,): an (n, 3) array less a (3,) row runs a 3-long loop n times, 2-3x
    # slower at these sizes; the same operations on each element
    d0 = X[:, 0] - b0
    d1 = X[:, 1] - b1
    d2 = X[:, 2] - b2
    s = d0 * u0
    s += d1 * u1
    s += d2 * u2
    s /= uu
    np.minimum(np.maximum(s, 0.0, out=s), 1.0, out=s)
    d0 -= s * u0
    d1 -= s * u1
    d2 -= s * u2
    dd = d0 * d0
    dd += d1 * d1
    dd += d2 * d2
    cand = (dd < r0 * r0).nonzero()[0]
    if not len(cand):
        return None
    d = np.empty((len(cand), 3))
    d[:, 0], d[:, 1], d[:, 2] = d0[cand], d1[cand], d2[cand]
    dist = np.sqrt(dd[cand])  # _dot3 of d, elementwise: the same bits
    depth = r0 - dist
    if not depth.min() > 0.0:  # sqrt's rounding can leave a vertex on the surface
        inside = depth > 0.0
        d, dist, depth = d[inside], dist[inside], depth[inside]
        if not len(depth):
            return None
    N = d / np.maximum(dist, 1e-300)[:, None]
    if dist.min() <= 1e-12:  # on the segment any direction is a valid push-out direction
        N[dist <= 1e-12] = np.array((a00, a10, a20)) / math.sqrt(c0)
    push = depth[:, None] * N
    n = len(X)
    # an axis-0 sum adds the rows in order, as _sphere_sweeps' bincount
    return [*(push.sum(axis=0) / n).tolist(), float(depth.max()), len(depth) / n]


_XYZ = np.arange(3)
#: Up to this many (sweep, vertex) pairs :func:`_swept_features` takes them all: the filter of
#: the vertices within reach (a dozen array calls) costs more than it saves (the same features:
#: a vertex out of reach is not inside).
_ALL_PAIRS = 1024


@functools.lru_cache(maxsize=16)
def _all_pairs(S: int, n: int) -> tuple:
    """(sweep, vertex) index pairs of every vertex of S sweeps, sweep-major."""
    loc, vert = np.repeat(np.arange(S), n), np.tile(np.arange(n), S)
    loc.flags.writeable = vert.flags.writeable = False
    return loc, vert


_ZERO = np.zeros(1, dtype=np.int64)


def _colsq(A: np.ndarray) -> np.ndarray:
    """Squared column norms (..., 3) of matrices A (..., 3, 3), summed in row order."""
    out = A[..., 0, :] * A[..., 0, :]
    out += A[..., 1, :] * A[..., 1, :]
    out += A[..., 2, :] * A[..., 2, :]
    return out


#: Up to this many sweeps :func:`_swept_features` tests each against the rest shape's ball in
#: Python floats (about 1 us a sweep, against ~20 us for the array version's calls).
_SCALAR_SWEEPS = 8


def to_frame(transforms: np.ndarray, pose: Pose) -> np.ndarray:
    """(c, 4, 4) world transforms expressed in the frame ``pose``."""
    M = np.asarray(transforms, dtype=np.float64).reshape(-1, 4, 4)
    if pose is IDENTITY or pose.is_identity:
        return M
    inv = np.eye(4)
    inv[:3, :3] = pose.R.T
    inv[:3, 3] = -pose.R.T @ pose.c
    return inv @ M


@dataclass
class ExternalEncoder:
    """External features ``f`` (e,) -> network input ``w`` (v,): clip to the training range
    (sec. 8.1), standardize, keep the features that varied, rotate by their PCA (sec. 5.1).

    Attributes
    ----------
    lo, hi : (e,) clipping range
    mean, sd : (e,) statistics of the training features (sd 1 where a feature is dropped)
    keep : (e',) indices of the features that varied
    V : (v, e') PCA rows of the standardized kept features
    """

    lo: np.ndarray
    hi: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    keep: np.ndarray
    V: np.ndarray

    def __post_init__(self) -> None:
        self.keep = np.asarray(self.keep, dtype=np.int64)
        V = np.asarray(self.V, dtype=np.float64)
        # (0, 0) when no feature varied (a static ground, no pins): the network sees the state
        self.V = V if V.ndim == 2 else V.reshape(-1, len(self.keep))
        # w = V_s f_keep - offset, one product per frame
        self._Vs = self.V / np.asarray(self.sd, float)[self.keep]
        self._offset = self._Vs @ np.asarray(self.mean, float)[self.keep]

    @property
    def size(self) -> int:
        return int(self.V.shape[0])

    def encode(self, f: np.ndarray) -> np.ndarray:
        """``w`` (v,) or (F, v) of features ``f`` (e,) or (F, e)."""
        f = np.minimum(np.maximum(f, self.lo), self.hi)
        return f[..., self.keep] @ self._Vs.T - self._offset

    def to_arrays(self, prefix: str = "external.") -> dict:
        return {
            prefix + k: np.asarray(getattr(self, k))
            for k in ("lo", "hi", "mean", "sd", "keep", "V")
        }

    @classmethod
    def from_arrays(cls, a: dict, prefix: str = "external.") -> ExternalEncoder:
        return cls(**{k: a[prefix + k] for k in ("lo", "hi", "mean", "sd", "keep", "V")})


@dataclass
class SNPParameters:
    """Everything a trained model holds (the model file's arrays and metadata).

    Attributes
    ----------
    X : (n, 3) rest positions (m, world as baked)
    mean : (n, 3) mean pose ``y_mu`` in the reference frame (m)
    U : (3n, u) orthonormal PCA basis
    alpha, beta : (u,) the initial model (eq. 1-2)
    z_lo, z_hi : (u,) output clipping range (sec. 8.1)
    scale : ``s``, m (see the module docstring)
    encoder : the external state's encoder
    net : the residual network Phi (in: 2u + v, out: u); None runs eq. (1) alone
    sizes : (c, 2) radius and half length of each collider slot, m
    kinds : the collider kind of each slot
    pinned : (p,) pinned vertices, whose rigid motion is the reference frame
    triangles : (t, 3) surface triangles (a cloth's faces, fanned), or None
    reference_rest : (4, 4) rigid world transform of the driving reference frame at rest (a
        cloth's owner, :mod:`core.clothbake`), or None: the frame is the pins' rigid motion.
        With it the frame of a step is ``M_t M_rest^-1`` for the frame's
        ``FrameInputs.reference_frame`` ``M_t`` (its scale divided out)
    input_scale : (u,) per-mode scales of the network's state inputs (``z / input_scale``;
        the ``mode_scaling`` setting), or None: ``scale`` for every mode
    contact : the features end with each collider's contact features
        (:func:`contact_features`; the ``contact_features`` setting)
    frame_origin : (3,) rest coordinates of the point whose velocity and acceleration are
        the frame's features (:func:`frame_features`; the rest centre), or None: the frame's
        origin (models trained before it was added)
    normal_mean, normal_basis : (3n,), (3n, u) float32: the linear normal model (sec. 6.3),
        vertex normals in the reference frame ``n_mu + Q z`` before normalizing, or None
    """

    X: np.ndarray
    mean: np.ndarray
    U: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    z_lo: np.ndarray
    z_hi: np.ndarray
    scale: float
    encoder: ExternalEncoder
    net: MLP | None
    sizes: np.ndarray
    kinds: list
    pinned: np.ndarray
    reference_rest: np.ndarray | None = None
    triangles: np.ndarray | None = None
    normal_mean: np.ndarray | None = None
    normal_basis: np.ndarray | None = None
    frame_origin: np.ndarray | None = None
    input_scale: np.ndarray | None = None
    contact: bool = False

    def __post_init__(self) -> None:
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        n = len(self.X)
        self.mean = np.ascontiguousarray(self.mean, dtype=np.float64).reshape(n, 3)
        self.U = np.ascontiguousarray(self.U, dtype=np.float64)
        if self.U.ndim != 2 or self.U.shape[0] != 3 * n:
            raise SimulationError(f"Basis has shape {self.U.shape}; expected ({3 * n}, u).")
        u = self.U.shape[1]
        for name in ("alpha", "beta", "z_lo", "z_hi"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64).reshape(u))
        self.sizes = np.asarray(self.sizes, dtype=np.float64).reshape(-1, 2)
        self.pinned = np.asarray(self.pinned, dtype=np.int64).reshape(-1)
        self.kinds = [str(k) for k in self.kinds]
        self.scale = float(self.scale)
        if self.reference_rest is not None:
            self.reference_rest = rigid(np.asarray(self.reference_rest).reshape(4, 4))
        if self.triangles is not None:
            self.triangles = np.asarray(self.triangles, dtype=np.int64).reshape(-1, 3)
        if self.frame_origin is not None:
            self.frame_origin = np.asarray(self.frame_origin, dtype=np.float64).reshape(3)
        if self.input_scale is not None:
            self.input_scale = np.asarray(self.input_scale, dtype=np.float64).reshape(u)
        if (self.normal_mean is None) != (self.normal_basis is None):
            raise SimulationError("The linear normal model needs both its mean and its basis.")
        if self.normal_basis is not None:
            # float32: a product of the basis' size per frame, at half the memory traffic
            self.normal_mean = np.ascontiguousarray(self.normal_mean, np.float32).reshape(-1)
            self.normal_basis = np.ascontiguousarray(self.normal_basis, np.float32)
            if self.normal_basis.shape != self.U.shape or len(self.normal_mean) != 3 * n:
                raise SimulationError(
                    f"The linear normal model has shape {self.normal_basis.shape} and "
                    f"{len(self.normal_mean)} means; the basis is {self.U.shape}."
                )
        if self.net is not None and (
            self.net.in_dim != 2 * u + self.encoder.size or self.net.out_dim != u
        ):
            raise SimulationError(
                f"The network takes {self.net.in_dim} inputs and gives {self.net.out_dim}; "
                f"a model of {u} modes and {self.encoder.size} external coordinates needs "
                f"{2 * u + self.encoder.size} and {u}."
            )

    @property
    def u(self) -> int:
        return int(self.U.shape[1])

    @property
    def n_features(self) -> int:
        per = COLLIDER_FEATURES + (CONTACT_FEATURES if self.contact else 0)
        return FRAME_FEATURES + per * len(self.sizes)

    def far_transform(self) -> np.ndarray:
        """The (4, 4) transform, in the reference frame, of a collider the frame lacks."""
        M = np.eye(4)
        lo, hi = self.X.min(0), self.X.max(0)
        M[:3, 3] = 0.5 * (lo + hi) + np.array([0.0, 0.0, FAR_DIAGONALS * np.linalg.norm(hi - lo)])
        return M

    def to_arrays(self) -> tuple[dict, dict]:
        arrays = {
            "X": self.X,
            "mean": self.mean,
            "U": self.U,
            "alpha": self.alpha,
            "beta": self.beta,
            "z_lo": self.z_lo,
            "z_hi": self.z_hi,
            "collider_sizes": self.sizes,
            "pinned": self.pinned,
            **self.encoder.to_arrays(),
        }
        if self.reference_rest is not None:
            arrays["reference_rest"] = self.reference_rest
        if self.triangles is not None:
            arrays["triangles"] = self.triangles
        if self.frame_origin is not None:
            arrays["frame_origin"] = self.frame_origin
        if self.input_scale is not None:
            arrays["input_scale"] = self.input_scale
        if self.normal_basis is not None:
            arrays["normal_mean"] = self.normal_mean
            arrays["normal_basis"] = self.normal_basis
        meta = {"scale": self.scale, "collider_kinds": self.kinds, "network": None}
        if self.contact:
            meta["contact_features"] = True
        if self.net is not None:
            net_arrays, meta["network"] = self.net.to_arrays(prefix="net.")
            arrays.update(net_arrays)
        return arrays, meta

    @classmethod
    def from_arrays(cls, a: dict, meta: dict) -> SNPParameters:
        net = None if meta.get("network") is None else MLP.from_arrays(a, meta["network"])
        return cls(
            X=a["X"],
            mean=a["mean"],
            U=a["U"],
            alpha=a["alpha"],
            beta=a["beta"],
            z_lo=a["z_lo"],
            z_hi=a["z_hi"],
            scale=meta["scale"],
            encoder=ExternalEncoder.from_arrays(a),
            net=net,
            sizes=a["collider_sizes"],
            kinds=meta["collider_kinds"],
            pinned=a["pinned"],
            reference_rest=a.get("reference_rest"),
            triangles=a.get("triangles"),
            normal_mean=a.get("normal_mean"),
            normal_basis=a.get("normal_basis"),
            frame_origin=a.get("frame_origin"),
            input_scale=a.get("input_scale"),
            contact=bool(meta.get("contact_features", False)),
        )


def initial_model(z1: np.ndarray, z2: np.ndarray, alpha: np.ndarray, beta: np.ndarray):
    """``z_bar = alpha z_{t-1} + beta (z_{t-1} - z_{t-2})``, eq. (1) of Holden 2019."""
    return alpha * z1 + beta * (z1 - z2)


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
        self._turn: list = [None]  # _frame_features' memo
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

    def _frame_of(self, x: np.ndarray) -> Pose:
        if self._rest_inv is not None:  # driven: the frame is the driver's, not in x
            return self.poses[0]
        return reference_pose(
            self.rest_pins, x[self.p.pinned] if len(self.p.pinned) else None, IDENTITY
        )

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        """The model's closest shape (n, 3) to world positions ``x``: the PCA projection in
        the reference frame of ``x``."""
        x = np.asarray(x, dtype=np.float64)
        pose = self._frame_of(x)
        y = x if pose.is_identity else (x - pose.c) @ pose.R
        return pose.apply(self.decode(self.encode(y)))

    def start_from(self, x: np.ndarray, v: np.ndarray, forces: np.ndarray | None = None) -> None:
        """Start from world positions ``x`` and velocities ``v`` (n, 3): ``z_{t-1}`` encodes
        ``x`` and ``z_{t-2}`` the positions a frame before, ``x - dt v`` (the frame at rest).
        ``forces`` are not an input of this model."""
        self.reset()
        x = np.asarray(x, dtype=np.float64)
        pose = self._frame_of(x)
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
        out = _frame_features(poses, self._still[:3], self.dt, self._origin, self._turn)
        Rp, cp = pose.rows
        for i in range(len(p.sizes)):
            if i < len(cols):
                M = cols[i].transform.tolist()
                r, h = float(cols[i].radius), float(cols[i].half_length)
            else:
                M = _world_matrix(pose, self._far).tolist()
                r, h = self._sizes[i]
            t = _mtv(Rp, [M[0][3] - cp[0], M[1][3] - cp[1], M[2][3] - cp[2]])
            Q = _mtm(Rp, [M[0][:3], M[1][:3], M[2][:3]])
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
            out = _frame_features(poses, self._still[:3], self.dt, self._origin, self._turn)
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
                f = _contact_one(p.X, bl, al, kind, *sizes[i], self._bound)
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


def push_out(x: np.ndarray, colliders: list[Collider], margin: float = 0.0) -> np.ndarray:
    """Render-time push-out (Holden 2019, sec. 6.4): every vertex closer than ``margin`` to
    a collider's surface (inside it: negative distance) moves along the collider's
    distance gradient to ``margin`` outside. The network's state is not changed: only what
    is shown. Returns ``x`` itself when no vertex is inside, else a moved copy.

    Parameters
    ----------
    x : (n, 3) world positions, m; colliders : this frame's colliders; margin : m
    """
    out = x
    for c in colliders:
        if c.kind == "plane":
            idx = np.arange(len(out))
        else:  # only the vertices within reach of the centre: one distance per vertex
            if _clear_of(out, c, margin):
                continue
            A, t = c.transform[:3, :3], c.transform[:3, 3]
            d = out - np.repeat(t[None], len(out), axis=0)  # out - t, its bits, at half its cost
            scales = np.sqrt(np.einsum("ij,ij->j", A, A))
            reach = c.radius * scales.max() + c.half_length * scales[2] + margin
            idx = np.flatnonzero(np.einsum("ij,ij->i", d, d) < reach * reach)
            if not len(idx):
                continue
        phi, n = c.signed_distance(out[idx])
        inside = phi < margin
        if inside.any():
            if out is x:
                out = x.copy()
            out[idx[inside]] += (margin - phi[inside])[:, None] * n[inside]
    return out


def _clear_of(x: np.ndarray, c: Collider, margin: float) -> bool:
    """Whether every point of ``x`` (k, 3) is farther than ``margin`` from the surface of
    sphere or capsule ``c``, by a margin that round-off cannot cross: then :func:`push_out`
    moves none of them and skips their signed distances, and its result keeps its bits (the
    walking cape's 600 vertices, 160 of them within reach of the torso's centre and none
    inside it: 54 -> 14 us a frame, one core, loaded machine). First from the capsule's
    axis as a line, which no point is farther from than from the segment (110 of the cape's
    119 frames end there), then, when a point is near the line, from the segment.
    The collider's axis and sizes are read as Python floats: only this test uses them."""
    (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2) = c.transform[:3].tolist()
    sx = math.sqrt(a0 * a0 + b0 * b0 + c0 * c0)
    sy = math.sqrt(a1 * a1 + b1 * b1 + c1 * c1)
    sz = math.sqrt(a2 * a2 + b2 * b2 + c2 * c2)
    near = c.radius * max(sx, sy, sz) + margin  # from the segment
    if not near > 0.0 or not sz > 0.0:
        return False
    bound = near * (1.0 + _CLEAR_SLACK) + _CLEAR_SLACK
    u0, u1, u2 = a2 / sz, b2 / sz, c2 / sz
    if c.kind != "capsule":  # a sphere: from its centre, the whole test
        e = np.subtract(x, (t0, t1, t2))
        return bool(np.einsum("ij,ij->i", e, e).min() > bound * bound)
    # from the axis line: x - t's parts along two unit vectors across the axis (Duff et al.
    # 2017's orthonormal basis, on Python floats), each one matrix-vector product and a
    # scalar: no (k, 3) broadcasts (the cape's frame 14 -> 9 us; the slack covers the
    # basis' round-off)
    sign = math.copysign(1.0, u2)
    a = -1.0 / (sign + u2)
    b = u0 * u1 * a
    v0, v1, v2 = 1.0 + sign * u0 * u0 * a, sign * b, -sign * u0
    w0, w1, w2 = b, sign + u1 * u1 * a, -u1
    v = np.array(((v0, v1, v2), (w0, w1, w2)))
    e = x @ v[0]
    e -= t0 * v0 + t1 * v1 + t2 * v2
    f = x @ v[1]
    f -= t0 * w0 + t1 * w1 + t2 * w2
    e *= e
    f *= f
    e += f
    if e.min() > bound * bound:
        return True
    d = np.subtract(x, (t0, t1, t2))
    h = c.half_length * sz
    axis = np.array((u0, u1, u2))
    s = d @ axis
    np.minimum(np.maximum(s, -h, out=s), h, out=s)  # np.clip, at a third of its cost
    e = d - s[:, None] * axis
    return bool(np.einsum("ij,ij->i", e, e).min() > bound * bound)


#: Relative (and absolute, m) slack of :func:`_clear_of`: far above the round-off of either
#: distance (1e-15 of it), far below anything a push-out could move.
_CLEAR_SLACK = 1e-9


def linear_normals(mean: np.ndarray, Q: np.ndarray, z: np.ndarray, poses: list[Pose]) -> np.ndarray:
    """(B, n, 3) unit world vertex normals by the linear normal model (Holden 2019, sec. 6.3):
    ``R (n_mu + Q z)`` normalized, in float32, for B states ``z`` (B, u) in the frames
    ``poses``. The least-squares map from the PCA state to the training frames' normals
    (:func:`training.snp.fit_normal_model`); what it costs against recomputing them from the
    triangles, and how far apart the two are, is measured in bench/snp_cloth.py and
    tests/test_snp_cloth.py."""
    z = np.asarray(z, dtype=np.float32)
    N = (z @ Q.T + mean).reshape(len(z), -1, 3)
    for b, pose in enumerate(poses):
        if pose is not IDENTITY and not pose.is_identity:
            N[b] = N[b] @ pose.R.T.astype(np.float32)
    length = np.sqrt(np.einsum("bij,bij->bi", N, N))
    np.maximum(length, np.float32(1e-30), out=length)
    N /= length[..., None]
    return N


class VertexNormals:
    """Area-weighted vertex normals of a triangle mesh, recomputed per frame: the triangles'
    cross products (twice their area times their normal) summed onto their vertices by one
    precomputed sparse product, then normalized.

    Parameters
    ----------
    triangles : (t, 3) int array; n : number of vertices
    """

    def __init__(self, triangles: np.ndarray, n: int) -> None:
        import scipy.sparse as sp

        self.tri = np.ascontiguousarray(triangles, dtype=np.int64).reshape(-1, 3)
        t = len(self.tri)
        rows = self.tri.reshape(-1)
        cols = np.repeat(np.arange(t), 3)
        self.S = sp.csr_matrix((np.ones(3 * t), (rows, cols)), shape=(int(n), t))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        a, b, c = x[self.tri[:, 0]], x[self.tri[:, 1]], x[self.tri[:, 2]]
        N = self.S @ np.cross(b - a, c - a)
        length = np.sqrt(np.einsum("ij,ij->i", N, N))
        return N / np.maximum(length, 1e-300)[:, None]


def _world_matrix(pose: Pose, local: np.ndarray) -> np.ndarray:
    """World transform of a transform ``local`` (4, 4) given in the frame ``pose``."""
    M = np.eye(4)
    M[:3, :3] = pose.R
    M[:3, 3] = pose.c
    return M @ local


def _pose(v) -> Pose:
    pose = Pose.from_list(v)
    return IDENTITY if pose.is_identity else pose  # the fast paths test for IDENTITY itself


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


# ------------------------------------------------------------------------------------------
# Files and the record
# ------------------------------------------------------------------------------------------


def save(
    path: str | Path,
    *,
    params: SNPParameters,
    mesh_hash: str,
    T: np.ndarray,
    material,
    settings: SimSettings,
    metadata: dict | None = None,
) -> Path:
    """Write a Subspace Neural Physics model file.

    Parameters
    ----------
    params : the trained model
    mesh_hash, T : the tet mesh the bakes were made on (T is kept for the record)
    material, settings : the bakes' physics (the time step is the model's)
    metadata : training settings and metrics (JSON-able)
    """
    arrays, meta = params.to_arrays()
    arrays["T"] = np.asarray(T, dtype=np.int64)
    meta.update(
        material=material.to_dict(),
        settings=settings.to_dict(),
        feature_names=feature_names(params.kinds, params.contact),
        **(metadata or {}),
    )
    return save_model(path, method=NAME, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def load(model, *, settings: SimSettings | None = None, colliders=None) -> SNPSimulation:
    """The runtime of an opened Subspace Neural Physics model file. A learned model steps at
    the frame rate it was trained at: another time step is refused."""
    meta = model.metadata
    stored = SimSettings(**meta["settings"])
    if settings is not None and abs(settings.dt - stored.dt) > 1e-9 * stored.dt:
        raise SimulationError(
            f"This Subspace Neural Physics model was trained at {stored.dt:.6g} s per frame and "
            f"cannot step {settings.dt:.6g} s: set the scene's frame rate to "
            f"{1 / stored.dt:.6g} fps, or re-bake and retrain at this one."
        )
    try:
        params = SNPParameters.from_arrays(model.arrays, meta)
    except SimulationError as e:
        raise CacheError(f"{Path(model.path).name}: {e} Retrain the model.") from e
    return SNPSimulation(params, stored, colliders)


def onnx_graph(model, g) -> str:
    """The step of an opened model file as an ONNX graph (:mod:`core.onnxgraph`): eq. (1)
    and (3) as :class:`FoldedStep` runs them, the decode to positions and, for a model with
    the linear normal model, the normals; all in the reference frame. The inputs are the
    model file's own: its number of modes and its external features (their names from the
    file), so a model trained with other inputs exports as they are."""
    p = SNPParameters.from_arrays(model.arrays, model.metadata)
    fold, u, e, n = FoldedStep(p), p.u, len(p.encoder.lo), len(p.X)
    names = list(model.metadata.get("feature_names") or feature_names(p.kinds, p.contact))
    if len(names) != e:
        raise CacheError(
            f"{Path(model.path).name} names {len(names)} external features but its encoder "
            f"takes {e}; the file is corrupt: retrain the model."
        )
    state = "PCA coordinates (m) of the shape in the reference frame"
    z1 = g.input("z_prev", ["B", u], f"z_(t-1): {state}, last frame")
    z2 = g.input("z_prev2", ["B", u], f"z_(t-2): {state}, the frame before")
    f = g.input(
        "features",
        ["B", e],
        "f_t: this frame's external state, raw (SI units, in the reference frame; the "
        "metadata's neural_rom.feature_names says which is which); clipped to the training "
        "range inside the graph",
    )
    # eq. (1) with numpy's order of operations: alpha z1 + beta (z1 - z2)
    z = g.node(
        "Add",
        g.node("Mul", g.const(p.alpha, "alpha"), z1),
        g.node("Mul", g.const(p.beta, "beta"), g.node("Sub", z1, z2)),
    )
    if fold.W:
        fk = g.node("Gather", f, g.const(p.encoder.keep, "keep", integer=True), axis=1)
        fk = g.node("Min", g.node("Max", fk, g.const(fold.lo, "f_lo")), g.const(fold.hi, "f_hi"))
        h = g.node("Concat", z1, z2, fk, axis=1)
        z = g.node("Add", z, g.mlp(h, MLP(fold.W, fold.b, p.net.activations), "phi"))
    z = g.node("Min", g.node("Max", z, g.const(p.z_lo, "z_lo")), g.const(p.z_hi, "z_hi"))
    g.output(z, "z", ["B", u], f"z_t: {state}, this frame; feed it back as z_prev")
    g.affine_positions(
        z,
        p.mean,
        p.U,
        "positions",
        "y_mu + U z_t (m), vertex positions in the reference frame: world = R y + c with the "
        "frame's rotation R and origin c (the identity for an object with no pins and no "
        "driver); the runtime then pushes vertices out of colliders (sec. 6.4)",
    )
    if p.normal_basis is not None:
        N = g.node("MatMul", z, g.const(p.normal_basis.T, "Q_T"))
        N = g.node("Add", N, g.const(p.normal_mean, "normal_mean"))
        N = g.node("Reshape", N, g.const([-1, n, 3], "shape_n3", integer=True))
        length = g.node(
            "Sqrt",
            g.node("ReduceSum", g.node("Mul", N, N), g.const([2], "axis2", integer=True)),
        )
        length = g.node("Max", length, g.const(1e-30, "tiny"))
        g.output(
            g.node("Div", N, length),
            "normals",
            ["B", n, 3],
            "unit vertex normals in the reference frame, by the linear normal model "
            "(sec. 6.3): world = R n",
        )
    g.metadata.update(
        {
            "neural_rom.feature_names": json.dumps(names),
            "neural_rom.z_rest": json.dumps((p.U.T @ (p.X - p.mean).reshape(-1)).tolist()),
            "neural_rom.dt": repr(float(model.metadata["settings"]["dt"])),
            "neural_rom.collider_kinds": json.dumps(p.kinds),
            "neural_rom.collider_sizes": json.dumps(p.sizes.tolist()),
            "neural_rom.frame": "driven"
            if p.reference_rest is not None
            else ("pins" if len(p.pinned) else "world"),
        }
    )
    return (
        "Subspace Neural Physics (Holden 2019) step: z_t from z_(t-1), z_(t-2) and the "
        "frame's external features; start both at neural_rom.z_rest (the rest shape)."
    )


SETTINGS = SUBSPACE_SETTINGS[:3] + (
    Setting(
        "external_modes",
        "int",
        None,
        "External Modes",
        "PCA coordinates of the external "
        "state (colliders, gravity and the reference frame's motion) the network sees; 0 "
        "keeps every feature that varied in the bakes (the paper's v = e)",
        minimum=1,
        maximum=10_000,
        soft_maximum=64,
        auto=True,
        advanced=True,
    ),
    Setting(
        "layers",
        "int",
        4,
        "Layers",
        "Linear layers of the residual network, ReLU between "
        "them (the paper: 10; 4 trains in minutes on a CPU)",
        minimum=1,
        maximum=64,
        soft_maximum=12,
    ),
    Setting(
        "width",
        "int",
        None,
        "Width",
        "Hidden units per layer; 0 uses 1.5 x Modes, the paper's",
        minimum=1,
        maximum=8192,
        soft_maximum=1024,
        auto=True,
    ),
    Setting(
        "window",
        "int",
        32,
        "Window",
        "Frames of each training rollout: the network's "
        "predictions are fed back and the error of the whole window is backpropagated "
        "(sec. 5.4)",
        minimum=3,
        maximum=10_000,
        soft_maximum=128,
    ),
    Setting(
        "noise",
        "float",
        0.01,
        "Noise",
        "Standard deviation of the noise on each window's "
        "first two frames, a fraction of each PCA coordinate's standard deviation (at least "
        "Noise Floor times the first coordinate's)",
        minimum=0.0,
        maximum=10.0,
        advanced=True,
    ),
    Setting(
        "noise_floor",
        "float",
        None,
        "Noise Floor",
        "The noise of a PCA coordinate is Noise times its own standard deviation, or times "
        "this fraction of the first coordinate's where that is larger (1: every coordinate "
        "gets the first's noise; 0: each its own); automatic: 0.1 where the cloth's owner "
        "moves (capes on walking torsos: 16-19 mm held out against 22-23 at 1; a flag swung "
        "and spun on a pole did better at 1, 104 against 113 mm), else 1",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
        auto=True,
    ),
    Setting(
        "epochs",
        "int",
        None,
        "Epochs",
        "Passes over the training windows (the time budget may end them sooner); automatic: "
        "about 3,200 AMSGrad steps in all, at most 100 epochs",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=20000,
        auto=True,
    ),
    Setting(
        "batch_size",
        "int",
        None,
        "Batch Size",
        "Windows per AMSGrad step (the paper: 16); automatic: about 64 steps an epoch, "
        "batches of 8 to 32 windows",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=4096,
        auto=True,
    ),
    Setting(
        "learning_rate",
        "float",
        None,
        "Learning Rate",
        "AMSGrad step size (the paper: 1e-4 over ~100 epochs of 1e5-1e6 frames); automatic: "
        "3e-3 up to 40 PCA modes, 1e-3 above (many modes did not train at 3e-3: the cloth "
        "test's sheet at 60 modes 1.00x alpha/beta, at 1e-3 0.52x)",
        minimum=1e-7,
        maximum=1.0,
        auto=True,
    ),
    Setting(
        "lr_decay",
        "float",
        0.995,
        "Rate Decay",
        "Learning rate multiplier per epoch (the paper: 0.999)",
        minimum=0.5,
        maximum=1.0,
        advanced=True,
    ),
    Setting(
        "weight_decay",
        "float",
        0.0,
        "Weight Decay",
        "Decoupled weight decay (AdamW's): each step pulls the network's weights back towards "
        "their start, i.e. towards the initial model alone, by learning rate x this fraction "
        "of their departure",
        minimum=0.0,
        maximum=1000.0,
        advanced=True,
    ),
    Setting(
        "clip_margin",
        "float",
        0.0,
        "Clip Margin",
        "Inputs and outputs are clipped to the "
        "training range widened by this fraction of it on each side (sec. 8.1: 0)",
        minimum=0.0,
        maximum=10.0,
        advanced=True,
    ),
    Setting(
        "time_budget",
        "float",
        600.0,
        "Time Budget",
        "Most seconds the network training may take; epochs past it are skipped, with a warning",
        unit="s",
        minimum=1.0,
        maximum=1e7,
        soft_maximum=7200.0,
    ),
    Setting(
        "checkpoint_every",
        "int",
        20,
        "Checkpoint Every",
        "Epochs between checkpoints (a cancelled or killed run resumes from the last)",
        minimum=1,
        maximum=1_000_000,
        advanced=True,
    ),
    SUBSPACE_SETTING["validation_fraction"],
    SUBSPACE_SETTING["seed"],
    TRAINER_SETTING["rollout"],
    Setting(
        "keep_best",
        "bool",
        False,
        "Keep Best Epoch",
        "The model keeps the network of the epoch whose rollouts of the held-out bakes erred "
        "least, the initial model alone when none beat it (off: the last epoch's). Off by "
        "default: on the cloth test's unseen 1,000-frame bake the epoch picked by one held-out "
        "bake did worse (0.59x against 0.52x alpha/beta)",
        advanced=True,
    ),
    Setting(
        "warmup_epochs",
        "int",
        0,
        "Warm-up Epochs",
        "The learning rate ramps up linearly, step by step, over this many first epochs (0: "
        "none). 5 helped a hard-swung flag (0.83x and 0.76x against 0.89x and 0.88x alpha/beta, "
        "fewer dead ReLUs) but not the cloth test or the block (0.62x, 0.74x against 0.52x, "
        "0.68x)",
        minimum=0,
        maximum=1000,
        advanced=True,
    ),
    Setting(
        "mode_scaling",
        "bool",
        True,
        "Per-mode Scaling",
        "The network sees each PCA coordinate divided by its own standard deviation over the "
        "training frames (otherwise all by the first mode's, and the small modes' inputs are "
        "tiny against the weight decay)",
        advanced=True,
    ),
    Setting(
        "contact_features",
        "enum",
        "auto",
        "Contact Features",
        "The network also sees, per collider, how deep and from which side it swept through "
        "the rest shape over the frame (a collider's end-of-frame position misses a fast "
        "hit); costs a signed distance per vertex within reach per frame",
        items=(
            (
                "auto",
                "Automatic",
                "On for soft-body (FEM) bakes whose colliders move, off for Blender cloth bakes "
                "and bakes without moving colliders",
            ),
            ("on", "On", "Always (the colliders' sweep is an input of the network)"),
            ("off", "Off", "Never (the colliders' end-of-frame positions only, the paper's)"),
        ),
        advanced=True,
    ),
    Setting(
        "ensemble",
        "int",
        1,
        "Ensemble",
        "Networks trained side by side from different random starts; the model averages "
        "their predictions (saved as one wider network: the step at 64 modes takes 24.5 us "
        "with one, 35.8 with 2, 50.9 with 3). The 2,500-vertex cloth test's sheet: 2 networks "
        "0.52x alpha/beta on two seeds, one 0.59x and 0.54x",
        minimum=1,
        maximum=8,
        advanced=True,
    ),
)

METHOD = Method(
    name=NAME,
    label="Subspace Neural Physics (Holden 2019)",
    description="A network predicts the next PCA state from the last two and the colliders "
    "(no solve at run time: microseconds per frame); trained over rollout windows with "
    "PyTorch. Needs bakes that show the collisions it will meet.",
    settings=SETTINGS,
    load=load,
    trainer="training.snp:train",
    needs_torch=True,
    inputs=frozenset({"colliders", "pin_targets", "reference_frame"}),
    trains_on=frozenset({"fem", "cloth"}),
    onnx=onnx_graph,
    order=20,
    setup_cost=2.0,  # measured 0.9-3.4x linear on a board and a tail (Compare Methods)
)
