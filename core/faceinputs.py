"""The arithmetic of an active face's inputs (Srinivasan et al. 2021) on the host's side:
what ``addon/face.py`` computes from the values it reads out of Blender, with no bpy, so
that it is tested here without Blender.

* **The skin's local space** (:func:`check_rigid`): a face is simulated in metres of its
  skin object's local space, so the skin's ``matrix_world`` ``S`` must be rigid; every
  world value read from the host (the jaw, markers, colliders) is mapped by ``S⁻¹``.
* **The jaw** (:func:`hinge_rotation`, :func:`jaw_hinge`, :func:`jaw_reference`,
  :func:`jaw_world`, :func:`jaw_relative`): the jaw object's matrix at set-up, in the skin's
  space, is its rest ``R``; its hinge is ``R``'s origin and local X axis. The face's
  ``reference_frame`` is the jaw relative to rest, ``J R⁻¹`` (``J`` the jaw now, skin-local);
  opened by ``θ`` about the hinge, ``J = R Rx(θ)``, so the frame is ``R Rx(θ) R⁻¹``.
* **Sliders** (:func:`slider_ranges`, :func:`training_keys`): one per latent coordinate,
  their soft range the training keys' codes padded by half their spread.
* **Markers** (:func:`spread_vertices`): skin vertices spread by farthest-point sampling.
* **A frame's inputs and a track** (:func:`frame_inputs`, :func:`face_track`,
  :func:`track_signature`): one frame's values mapped into the skin's space, frames
  stacked into a :class:`.simjob.Track`, and the bytes that say whether two tracks are
  the same inputs (the viewport solves a frame again only when they change).

Conventions shared with the face jobs (shape key names, the hinge): :mod:`.facejob`.
"""

from __future__ import annotations

import numpy as np

from .errors import MeshError, NeuralRomError
from .simjob import Track, to_world


def check_rigid(S: np.ndarray, name: str) -> np.ndarray:
    """The skin's ``matrix_world`` ``S`` (4, 4) as float64, refused when it scales.

    Raises :class:`.errors.MeshError` naming the scale and what to do: the face's physics
    is in metres of the skin's local space.
    """
    S = np.asarray(S, dtype=np.float64).reshape(4, 4)
    scale = np.linalg.norm(S[:3, :3], axis=0)
    if not np.allclose(scale, 1.0, atol=1e-4):
        raise MeshError(
            f"'{name}' is scaled by {np.round(scale, 4).tolist()}: the face is simulated in "
            "the skin's own metres. Apply the scale (Object > Apply > Scale) and set it up again."
        )
    return S


def hinge_rotation(angle: float) -> np.ndarray:
    """(4, 4) rotation by ``angle`` (rad) about the local X axis: the jaw about its hinge."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def _rest(jaw_rest) -> np.ndarray:
    return np.asarray(jaw_rest, dtype=np.float64).reshape(4, 4)


def jaw_hinge(jaw_rest) -> tuple[np.ndarray, np.ndarray]:
    """The hinge of a jaw at rest ``jaw_rest`` (4, 4, skin-local): its pivot (3,) and unit
    axis (3,), the matrix's origin and local X axis."""
    R = _rest(jaw_rest)
    return R[:3, 3].copy(), R[:3, 0] / np.linalg.norm(R[:3, 0])


def jaw_reference(jaw_rest, angle: float) -> np.ndarray:
    """The face's reference frame (4, 4; skin-local, relative to rest) when the jaw is open
    ``angle`` rad about its hinge, ``R Rx(θ) R⁻¹``: what
    :meth:`.methods.active.ActiveModel.boundary` takes."""
    R = _rest(jaw_rest)
    return R @ hinge_rotation(angle) @ np.linalg.inv(R)


def jaw_world(S: np.ndarray, jaw_rest, angle: float) -> np.ndarray:
    """The jaw's ``matrix_world`` (4, 4) open ``angle`` rad about its hinge, the skin at
    ``S``: ``S R Rx(θ)``."""
    return np.asarray(S, dtype=np.float64) @ _rest(jaw_rest) @ hinge_rotation(angle)


def jaw_relative(S_inv: np.ndarray, J_world: np.ndarray, jaw_rest) -> np.ndarray:
    """The face's reference frame (4, 4) of a jaw at ``J_world``, the skin's inverse world
    matrix ``S_inv``: ``S⁻¹ J R⁻¹``. The inverse of :func:`jaw_world` up to the frame:
    ``jaw_relative(S⁻¹, jaw_world(S, R, θ), R) == jaw_reference(R, θ)``."""
    return S_inv @ np.asarray(J_world, dtype=np.float64) @ np.linalg.inv(_rest(jaw_rest))


def slider_ranges(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Soft minimum and maximum (d,) of each latent slider: the training keys' codes (N, d)
    padded on each side by half their spread (and 1e-3, so a constant code has a range)."""
    codes = np.asarray(codes, dtype=np.float64)
    lo, hi = codes.min(0), codes.max(0)
    pad = 0.5 * (hi - lo) + 1e-3
    return lo - pad, hi + pad


def training_keys(held_out, n_codes: int) -> np.ndarray:
    """Indices of the face file's keys that are the model's ``n_codes`` training codes, in
    order: the keys not held out (``held_out``: (K,) bools)."""
    return np.flatnonzero(~np.asarray(held_out, bool))[:n_codes]


def spread_vertices(V: np.ndarray, count: int, seed: int, front: bool = True) -> np.ndarray:
    """``count`` indices of skin vertices ``V`` (n, 3) spread by farthest-point sampling from
    a seeded start, over the front half of the face (local -y, below the median) when
    ``front``."""
    V = np.asarray(V, float)
    pool = np.flatnonzero(V[:, 1] < np.median(V[:, 1])) if front else np.arange(len(V))
    if count > len(pool):
        raise NeuralRomError(f"The skin has only {len(pool)} vertices to put {count} markers on.")
    rng = np.random.default_rng(seed)
    pick = [int(pool[rng.integers(len(pool))])]
    d = np.linalg.norm(V[pool] - V[pick[0]], axis=1)
    for _ in range(count - 1):
        j = int(np.argmax(d))
        pick.append(int(pool[j]))
        d = np.minimum(d, np.linalg.norm(V[pool] - V[pool[j]], axis=1))
    return np.array(pick)


def frame_inputs(
    S: np.ndarray,
    colliders: list,
    *,
    name: str,
    jaw=None,
    jaw_rest=None,
    sliders=None,
    markers=None,
) -> dict:
    """One frame's inputs in the skin's local space, from what the host read in world space.

    Parameters
    ----------
    S : (4, 4) the skin's ``matrix_world`` (rigid, :func:`check_rigid`; ``name`` for its
        message).
    colliders : the :class:`.colliders.Collider` list of the frame (world transforms).
    jaw : (4, 4) the jaw's ``matrix_world`` or None; with ``jaw_rest`` (16,) or (4, 4).
    sliders : (r,) slider values or None.
    markers : (p, 3) marker positions (world) or None.

    Returns a row of :func:`face_track`: ``jaw`` (:func:`jaw_relative`) and ``markers``
    skin-local, the colliders' ``kind``, ``radius``, ``half``, ``friction`` and skin-local
    ``transform`` lists, ``sliders``.
    """
    S_inv = np.linalg.inv(check_rigid(S, name))
    return {
        "jaw": None if jaw is None else jaw_relative(S_inv, jaw, jaw_rest),
        "kind": [c.kind for c in colliders],
        "radius": [c.radius for c in colliders],
        "half": [c.half_length for c in colliders],
        "friction": [c.friction for c in colliders],
        "transform": [S_inv @ c.transform for c in colliders],
        "sliders": None if sliders is None else np.asarray(sliders, dtype=np.float64),
        "markers": None if markers is None else to_world(np.asarray(markers, float), S_inv),
    }


def face_track(
    frame0: int, rows: list[dict], *, marker_vertices=None, marker_weights=None
) -> Track:
    """The :class:`.simjob.Track` of consecutive frames' :func:`frame_inputs` rows, the
    first at scene frame ``frame0``: the object matrix is the identity (everything is
    already in the skin's space); the sliders, or the markers (bound to skin vertices
    ``marker_vertices`` (p,) with ``marker_weights`` (p,)), and the jaw's reference frame
    where the rows have them. The colliders' friction is the first row's."""
    n, c = len(rows), len(rows[0]["kind"])
    tr = Track(
        frame0,
        np.broadcast_to(np.eye(4), (n, 4, 4)),
        np.array([r["kind"] for r in rows], dtype="<U8").reshape(n, c),
        np.array([r["radius"] for r in rows]).reshape(n, c),
        np.array([r["half"] for r in rows]).reshape(n, c),
        np.array(rows[0]["friction"]).reshape(c),
        np.array([r["transform"] for r in rows]).reshape(n, c, 4, 4),
    )
    if rows[0]["sliders"] is not None:
        tr.sliders = np.array([r["sliders"] for r in rows])
    if rows[0]["markers"] is not None:
        tr.marker_vertices = np.asarray(marker_vertices, dtype=np.int64)
        tr.marker_weights = np.asarray(marker_weights, dtype=np.float64)
        tr.marker_positions = np.array([r["markers"] for r in rows])
    if rows[0]["jaw"] is not None:
        tr.reference_frame = np.array([r["jaw"] for r in rows])
    return tr


def track_signature(track: Track) -> bytes:
    """The bytes of every array of ``track``: equal exactly when the inputs are equal."""
    return b"".join(np.ascontiguousarray(a).tobytes() for a in track.to_arrays().values())
