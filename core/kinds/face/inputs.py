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
* **Markers** (:func:`marker_layout`): skin vertices on the face region (forward-facing,
  brow to chin), denser where the shape keys move the skin, by weighted farthest-point
  sampling; with ``rigid``, as many more on the skin that moves with the skull
  (:func:`rigid_region`), which tell the head's rigid motion from an expression when the
  markers solve it (:func:`head_markers_problem` says when they cannot).
* **A frame's inputs and a track** (:func:`frame_inputs`, :func:`face_track`,
  :func:`track_signature`): one frame's values mapped into the skin's space, frames
  stacked into a :class:`core.engine.track.Track`, and the bytes that say whether two tracks are
  the same inputs (the viewport solves a frame again only when they change).

Conventions shared with the face jobs (shape key names, the hinge): :mod:`.facejob`.
"""

from __future__ import annotations

import numpy as np

from ...engine.render import to_world
from ...engine.track import Track
from ...errors import MeshError, NeuralRomError


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


#: Marker layouts of :func:`marker_layout` (identifier, label, description): the panel's
#: and the command line's choices.
MARKER_LAYOUTS = (
    (
        "FACE",
        "Face",
        "The front of the face between brow and chin, denser where the shape keys move the "
        "skin (mouth, eyes, brows)",
    ),
    ("EVEN", "Even", "Evenly over the front of the face between brow and chin"),
    ("FRONT", "Front Half", "Evenly over the whole front half of the head"),
)
#: Markers that Add Markers puts on the rigid region (:func:`rigid_region`) when the head's
#: motion is solved from markers: its 6 DOFs need 3 points off one line; 6 spread over the
#: region keep that when a marker is lost.
RIGID_MARKERS = 6
#: The rigid region: skin vertices that the shape keys move by at most this fraction of the
#: most they move any vertex (on the test head 81 of 642 vertices, on the bench head 450 of
#: 2,562: the back and top of the head; the crown's top tenth still moves 19-21%, with the brows).
RIGID_MOTION = 0.02
#: Markers closer than this fraction of the skin's height to one line cannot tell a turn
#: about that line (rms distance to the best line).
LINE_TOL = 0.02
#: Skin facing forward: a vertex normal within this many degrees of -y.
FRONT_DEG = 65.0
#: The face's band: from the chin up to this fraction of the chin-to-crown height (the brow
#: of a human head lies about 2/3 of the way up).
BROW = 0.72


def vertex_normals(V: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Area-weighted unit vertex normals (n, 3) of the triangle mesh (V, F)."""
    V = np.asarray(V, float)
    F = np.asarray(F, np.int64).reshape(-1, 3)
    fn = np.cross(V[F[:, 1]] - V[F[:, 0]], V[F[:, 2]] - V[F[:, 0]])
    N = np.zeros_like(V)
    for k in range(3):
        np.add.at(N, F[:, k], fn)
    return N / np.maximum(np.linalg.norm(N, axis=1, keepdims=True), 1e-300)


def face_region(V: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Skin vertices (indices) on the face: facing forward (local -y, within
    :data:`FRONT_DEG`) and between the chin (the lowest forward-facing vertex) and the brow
    (:data:`BROW` of the way from it to the crown)."""
    V = np.asarray(V, float)
    n = vertex_normals(V, F)
    front = n[:, 1] < -np.cos(np.radians(FRONT_DEG))
    if not front.any():
        return np.zeros(0, np.int64)
    chin = V[front, 2].min()
    brow = chin + BROW * (V[:, 2].max() - chin)
    return np.flatnonzero(front & (V[:, 2] <= brow))


def rigid_region(V: np.ndarray, keys: np.ndarray | None) -> np.ndarray:
    """Skin vertices (indices) that move with the skull: those the shape ``keys`` (K, n, 3)
    move by at most :data:`RIGID_MOTION` of the most they move any vertex. Without keys
    that move the skin, the skin above the brow (:data:`BROW`) behind the face."""
    V = np.asarray(V, float)
    if keys is not None and len(keys):
        motion = np.linalg.norm(np.asarray(keys, float) - V, axis=2).max(0)
        if motion.max() > 0:
            return np.flatnonzero(motion <= RIGID_MOTION * motion.max())
    lo, hi = V[:, 2].min(), V[:, 2].max()
    return np.flatnonzero(V[:, 2] > lo + BROW * (hi - lo))


def head_markers_problem(V: np.ndarray, keys: np.ndarray | None, vertices) -> str | None:
    """Why markers on the skin ``vertices`` cannot tell the head's rigid motion from an
    expression (fewer than 3 on :func:`rigid_region`, or those on one line), else None."""
    V = np.asarray(V, float)
    on = np.intersect1d(np.asarray(vertices, np.int64), rigid_region(V, keys))
    P = V[on] - V[on].mean(0) if len(on) else np.zeros((0, 3))
    s = np.linalg.svd(P, compute_uv=False) if len(on) >= 3 else np.zeros(2)
    height = V[:, 2].max() - V[:, 2].min()
    if len(on) >= 3 and s[1] / np.sqrt(len(on)) > LINE_TOL * height:
        return None
    where = "lie on one line" if len(on) >= 3 else "are there"
    return (
        f"Head From Markers needs at least 3 markers, not on one line, where the skin moves "
        f"with the skull (the back and top of the head, where the shape keys hardly move it); "
        f"{len(on)} of the {len(vertices)} markers {where}. Add Markers with Head From Markers "
        f"on (it puts {RIGID_MARKERS} there), or select such skin vertices and Add Markers, "
        "or turn Head From Markers off."
    )


def marker_layout(
    V: np.ndarray,
    F: np.ndarray,
    count: int,
    seed: int,
    layout: str = "FACE",
    keys: np.ndarray | None = None,
    rigid: int = 0,
) -> np.ndarray:
    """``count`` skin vertices (indices) for markers, by (weighted) farthest-point sampling,
    then ``rigid`` more spread evenly over :func:`rigid_region` (for a head solved from
    markers).

    Parameters
    ----------
    V : (n, 3) rest skin, the skin's local space (the face looks along -y, z up)
    F : (f, 3) its triangles
    layout : one of :data:`MARKER_LAYOUTS`: "FACE" (:func:`face_region`, a vertex's
        distance to the picks weighted by ``0.25 + sqrt(motion)``, ``motion`` its largest
        displacement over the shape ``keys`` (K, n, 3) relative to the largest anywhere, so
        the spacing shrinks where the expressions act), "EVEN" (the face region, unweighted),
        "FRONT" (the front half of the head, local -y of the median)
    """
    V = np.asarray(V, float)
    pick = _layout(V, F, count, seed, layout, keys)
    if rigid > 0:
        pool = np.setdiff1d(rigid_region(V, keys), pick)
        pick = np.concatenate([pick, _farthest_points(V, pool, np.ones(len(V)), rigid, seed)])
    return pick


def _layout(V, F, count: int, seed: int, layout: str, keys) -> np.ndarray:
    """The ``count`` markers of ``layout`` (:func:`marker_layout`)."""
    if layout == "FRONT":
        pool = np.flatnonzero(V[:, 1] < np.median(V[:, 1]))
    elif layout in ("FACE", "EVEN"):
        pool = face_region(V, F)
    else:
        raise NeuralRomError(
            f"Unknown marker layout {layout!r}: pick one of "
            f"{', '.join(m[0] for m in MARKER_LAYOUTS)}."
        )
    weight = np.ones(len(V))
    if layout == "FACE" and keys is not None and len(keys):
        motion = np.linalg.norm(np.asarray(keys, float) - V, axis=2).max(0)
        top = motion[pool].max() if len(pool) else 0.0
        if top > 0:
            weight = 0.25 + np.sqrt(motion / top)
    return _farthest_points(V, pool, weight, count, seed)


def _farthest_points(V, pool, weight, count: int, seed: int) -> np.ndarray:
    """Farthest-point sampling of ``count`` of ``pool``'s vertices from a seeded start, each
    vertex's distance to the picks scaled by its ``weight`` (a vertex weighing twice as much
    ends with picks about half as far apart)."""
    if count > len(pool):
        raise NeuralRomError(f"The skin has only {len(pool)} vertices to put {count} markers on.")
    rng = np.random.default_rng(seed)
    w = weight[pool]
    pick = [int(pool[rng.integers(len(pool))])]
    d = np.linalg.norm(V[pool] - V[pick[0]], axis=1) * w
    for _ in range(count - 1):
        j = int(np.argmax(d))
        pick.append(int(pool[j]))
        d = np.minimum(d, np.linalg.norm(V[pool] - V[pool[j]], axis=1) * w)
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
    """The :class:`core.engine.track.Track` of consecutive frames' :func:`frame_inputs` rows, the
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
