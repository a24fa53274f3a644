"""Blender's own cloth as a bake source: the numpy half of the cloth bake job (no bpy).

Most users' cloth already is a Blender Cloth modifier. The cloth bake job
(:mod:`addon.clothbake`, the worker's ``cloth_bake`` kind) runs in a background process
that has ``bpy`` (Blender's own binary in ``--background --factory-startup``, or a Python
with the PyPI ``bpy``), never in Blender's UI process. For each variant it opens a copy of
the user's file, keyframes the colliders and the object the cloth hangs from to random
positions at random times (seeded: :func:`motion_plan`, the paper's section 4 and our
``keyframed_colliders`` scenario), steps the scene frame by frame so Blender's cloth solver
fills its point cache, and appends each frame to a normal ``.nrbake``
(:class:`core.cache.BakeWriter`: one cache format, committed frame by frame, so a cancel
leaves a valid prefix).

A cloth bake is a bake of a surface mesh: ``X`` its rest vertices in world space at the
first frame, ``T`` empty ``(0, 4)``, its faces in the extra arrays ``face_vertices`` and
``face_sizes``, and a mesh hash of the local vertices and faces (:func:`surface_hash`), so
the same mesh placed elsewhere is the same mesh. Channels, per frame:

``positions`` (n, 3)
    World vertex positions the cloth modifier produced (modifiers after it are muted).
``velocities`` (n, 3)
    Backward differences ``(x_t - x_{t-1}) / dt``; zero at the first frame (the cloth
    starts at rest, as Blender's does at the start of its cache).
``colliders`` (c, 4, 4)
    Each collider's rigid world transform (scale split off, centred on its bounding box,
    as Simulate reads colliders: :func:`addon.blender_mesh.collider_transform`); present
    when the scene has colliders.
``reference_frame`` (4, 4)
    The rigid world transform of the cloth object (its parent's motion included): the
    frame its pinned vertices hang from.

The extra array ``pinned`` lists the vertices the Cloth modifier's pin group holds fixed
(weight >= :data:`PIN_WEIGHT`): they follow ``reference_frame`` rigidly.

The metadata (``source: "blender_cloth"``) records the time step, gravity (the scene's,
times the cloth's gravity weight), each collider's name, kind and size, the cloth
object's and its owner's names, the seed and the motion plan, and the point cache range the
user had. A training method tells a cloth bake from a FEM bake by :func:`is_cloth_bake`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ...errors import JobCancelled, NeuralRomError, SimulationError

__all__ = [
    "SOURCE",
    "ClothBakeSpec",
    "blender_command",
    "is_cloth_bake",
    "motion_plan",
    "replay_cloth_bake",
    "rigid",
    "surface_hash",
    "triangulate",
]

#: ``metadata["source"]`` of a bake made by Blender's cloth solver.
SOURCE = "blender_cloth"
#: Pin-group weight from which Blender's cloth holds a vertex fixed to the object (its goal
#: is the weight to the 4th power, pinned from 0.999, ``SOFTGOALSNAP``); a bake's
#: ``pinned`` extra array lists these vertices: they move rigidly with the object (2e-7 m in
#: a test bake), those below are goal springs that sag.
PIN_WEIGHT = 0.999**0.25


#: How a cloth bake moves the owner (:attr:`ClothBakeSpec.motion`).
MOTIONS = ("auto", "animation", "keys", "file")


class ClothBakeError(NeuralRomError):
    """A cloth bake cannot run as set up (no cloth, a vertex count that changes, ...)."""


@dataclass
class ClothBakeSpec:
    """What the cloth bake job does (the job spec's keys; JSON round trip).

    Attributes
    ----------
    blend : the .blend to open (a copy of the user's file: the job never saves it)
    object : the cloth object's name
    out_dir, name : bakes go to ``<out_dir>/<name>_<variant>.nrbake``
    frames : frames simulated after the first (the bake holds ``frames + 1``)
    variants : bakes, each with its own random motion (seed ``seed + variant``)
    seed : the first variant's seed
    colliders : ``[[name, kind], ...]`` (kind: sphere, capsule or plane); empty: every object
        of the scene with a Collision modifier, each with the shape its Neural ROM settings
        give (:func:`addon.clothbake.scene_cloth_colliders`). A collider that is the owner or
        hangs from it (a torso) moves with the owner; the others get random keys
    owner : the object the cloth hangs from, which the job moves; "" means the cloth's
        top-most parent, or the cloth object itself when it has none; "-" moves nothing. When
        the cloth hangs from a bone of an armature owner, the owner's frame is that bone's
    motion : how the owner moves: "animation" draws each variant from the owner's own
        animation in the file (its action and NLA strips as the file plays them, and each
        other action made for it), perturbed with the variant's seed
        (:func:`core.motion.perturb`: time warp, speed changes, stops and starts, stride and
        sway scales, turns), the owner's animation kept under it; "keys" replaces it by
        seeded random keys (:func:`motion_plan`); "auto" (default): "animation" when the
        owner has an animation, else "keys"; "file": nothing keyed, the owner and every
        collider move as the file animates them (a bake of the user's own shot, to compare a
        model with)
    collider_reach : colliders' keys lie in the cloth's bounding box grown by this fraction
        of its diagonal on every side
    collider_box : ``[[x0, y0, z0], [x1, y1, z1]]``, world metres: the colliders' keys lie in
        this box instead (a ball that pokes a cape from the front only); empty: as above
    owner_reach : the owner's keys move it at most this fraction of the cloth's diagonal
    owner_turn : and turn it at most this many radians about each axis
    key_gap : (min, max) frames between two random keys
    overwrite : replace bakes that exist (otherwise they are refused)
    durable : fsync every committed frame (:class:`core.cache.BakeWriter`); False still
        leaves a valid prefix after a crash or a cancel, not after a power cut
    processes : background Blenders baking variants at once (each bakes every
        ``processes``-th variant, one after another: :meth:`shard_variants`); 0: one per
        usable CPU core; 1: every variant in the job's own process. A variant's bake does
        not depend on it: its motion is seeded by the seed and the variant alone. Blender's
        cloth threads its own step too, but not well enough to fill two cores: on the
        2-core test machine two processes baked a 2,500-vertex sheet 1.6x faster than one
        (23 against 38 ms a frame)
    shard : ``[i, N]``: this process bakes the variants ``v`` with ``v % N == i`` (what the
        job gives each of its child processes); ``[0, 1]``: all
    """

    blend: str
    object: str
    out_dir: str
    name: str = "cloth"
    frames: int = 120
    variants: int = 1
    seed: int = 0
    colliders: list = field(default_factory=list)
    owner: str = ""
    motion: str = "auto"
    collider_reach: float = 0.25
    collider_box: list = field(default_factory=list)
    owner_reach: float = 0.25
    owner_turn: float = 0.4
    key_gap: tuple = (8, 30)
    overwrite: bool = False
    durable: bool = True
    processes: int = 0
    shard: tuple = (0, 1)

    def __post_init__(self) -> None:
        if int(self.frames) < 2:
            raise ClothBakeError(f"A cloth bake needs at least 2 frames, got {self.frames}.")
        if int(self.variants) < 1:
            raise ClothBakeError(f"A cloth bake needs at least 1 variant, got {self.variants}.")
        lo, hi = (int(g) for g in self.key_gap)
        if not 1 <= lo <= hi:
            raise ClothBakeError(
                f"key_gap must be (min, max) frames with 1 <= min <= max, got {self.key_gap}."
            )
        for item in self.colliders:
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise ClothBakeError(f"colliders must be [name, kind] pairs, got {item!r}.")
            if item[1] not in ("sphere", "capsule", "plane"):
                raise ClothBakeError(
                    f"Collider '{item[0]}' has shape {item[1]!r}: use sphere, capsule or plane."
                )
        if self.motion not in MOTIONS:
            raise ClothBakeError(
                f"motion must be one of {', '.join(MOTIONS)}, got {self.motion!r}."
            )
        if len(self.collider_box):
            box = np.asarray(self.collider_box, dtype=float)
            if box.shape != (2, 3) or not np.all(np.isfinite(box)) or np.any(box[1] < box[0]):
                raise ClothBakeError(
                    "collider_box must be [[x0, y0, z0], [x1, y1, z1]] with x0 <= x1, y0 <= y1, "
                    f"z0 <= z1 (metres), got {self.collider_box}."
                )
            self.collider_box = box.tolist()
        for key in ("collider_reach", "owner_reach", "owner_turn"):
            v = float(getattr(self, key))
            if not (np.isfinite(v) and v >= 0):
                raise ClothBakeError(f"{key} must be a non-negative number, got {v}.")
        if int(self.processes) < 0:
            raise ClothBakeError(
                f"processes must be 0 (one per CPU core) or more, got {self.processes}."
            )
        i, n = (int(v) for v in self.shard)
        if not 0 <= i < n:
            raise ClothBakeError(f"shard must be [i, N] with 0 <= i < N, got {list(self.shard)}.")
        self.frames, self.variants, self.seed = int(self.frames), int(self.variants), int(self.seed)
        self.key_gap = (lo, hi)
        self.processes, self.shard = int(self.processes), (i, n)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["key_gap"] = list(self.key_gap)
        d["shard"] = list(self.shard)
        d["colliders"] = [list(c) for c in self.colliders]
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> ClothBakeSpec:
        names = set(cls.__dataclass_fields__)
        unknown = set(d) - names
        if unknown:
            raise ClothBakeError(f"Unknown cloth bake setting(s): {', '.join(sorted(unknown))}.")
        for key in ("blend", "object", "out_dir"):
            if not d.get(key):
                raise ClothBakeError(f'The cloth bake job spec has no "{key}": re-create the job.')
        return cls(**dict(d))

    def shard_variants(self) -> list[int]:
        """The variants this process bakes (:attr:`shard`), in order."""
        i, n = self.shard
        return [v for v in range(self.variants) if v % n == i]

    def path(self, variant: int) -> Path:
        """The bake of one variant."""
        return Path(self.out_dir) / f"{self.name}_{variant:03d}.nrbake"


def surface_hash(V: np.ndarray, face_vertices: np.ndarray, face_sizes: np.ndarray) -> str:
    """Identity of a surface mesh: SHA-256 of its float64 vertices, then its faces.

    Parameters
    ----------
    V : (n, 3) float array, the mesh's own (local) vertex coordinates
    face_vertices : (sum(face_sizes),) int array, the faces' vertex indices one after another
    face_sizes : (f,) int array, vertices per face

    Returns
    -------
    str, 64 hex digits, prefixed ``surface:`` so it never equals a tet mesh's hash.
    """
    V = np.ascontiguousarray(V, dtype="<f8")
    if V.ndim != 2 or V.shape[1] != 3:
        raise ValueError(f"surface_hash: V must have shape (n, 3), got {V.shape}")
    fv = np.ascontiguousarray(face_vertices, dtype="<i8").reshape(-1)
    fs = np.ascontiguousarray(face_sizes, dtype="<i8").reshape(-1)
    if int(fs.sum()) != len(fv):
        raise ValueError("surface_hash: face_sizes do not add up to face_vertices")
    h = hashlib.sha256()
    for a in (V, fs, fv):
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return "surface:" + h.hexdigest()


def triangulate(face_vertices: np.ndarray, face_sizes: np.ndarray) -> np.ndarray:
    """(t, 3) triangles of polygons (each fanned from its first vertex), in face order.

    Parameters
    ----------
    face_vertices : (sum(face_sizes),) int array; face_sizes : (f,) int array, each >= 3
    """
    fv = np.asarray(face_vertices, dtype=np.int64).reshape(-1)
    fs = np.asarray(face_sizes, dtype=np.int64).reshape(-1)
    if len(fs) and fs.min() < 3:
        raise ValueError("triangulate: a face has fewer than 3 vertices")
    start = np.concatenate([[0], np.cumsum(fs)[:-1]])
    per = fs - 2
    first = np.repeat(start, per)
    k = np.arange(int(per.sum())) - np.repeat(np.cumsum(per) - per, per)
    return np.stack([fv[first], fv[first + k + 1], fv[first + k + 2]], axis=1)


def rigid(M: np.ndarray) -> np.ndarray:
    """The rigid part (rotation and translation, axis scales divided out) of 4x4 matrices
    ``M`` (..., 4, 4)."""
    M = np.array(M, dtype=np.float64)
    scale = np.linalg.norm(M[..., :3, :3], axis=-2, keepdims=True)
    M[..., :3, :3] = M[..., :3, :3] / np.maximum(scale, 1e-12)
    return M


def _key_frames(rng: np.random.Generator, frames: int, gap: tuple[int, int]) -> np.ndarray:
    keys, f = [0], 0
    while True:
        f += int(rng.integers(gap[0], gap[1] + 1))
        if f >= frames:
            break
        keys.append(f)
    keys.append(frames)
    return np.array(keys)


def motion_plan(
    spec: ClothBakeSpec,
    variant: int,
    lo: np.ndarray,
    hi: np.ndarray,
    collider_starts: list[np.ndarray],
) -> dict:
    """The random keys of one variant (seeded by ``spec.seed + variant``).

    Parameters
    ----------
    lo, hi : (3,) the cloth's world bounding box at the first frame, m
    collider_starts : each collider's world location at the first frame (its first key, so
        it starts where the user put it: out of contact, usually)

    Returns
    -------
    dict: ``colliders``: per collider ``{"frames": (k,), "locations": (k, 3)}`` (world
    locations of the collider's origin); ``owner``: ``{"frames": (k,), "offsets": (k, 3),
    "turns": (k, 3)}`` (location offsets, m, and Euler angle offsets, rad, from where it
    starts). Frames count from the bake's first frame (0). Everything as lists (JSON).
    """
    rng = np.random.default_rng([int(spec.seed), int(variant)])
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    diag = float(np.linalg.norm(hi - lo)) or 1.0
    centre, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    box = half + spec.collider_reach * diag
    if len(spec.collider_box):
        b0, b1 = np.asarray(spec.collider_box, dtype=float)
        centre, box = 0.5 * (b0 + b1), 0.5 * (b1 - b0)
    cols = []
    for start in collider_starts:
        keys = _key_frames(rng, spec.frames, spec.key_gap)
        locs = centre + rng.uniform(-1.0, 1.0, size=(len(keys), 3)) * box
        locs[0] = np.asarray(start, float)
        cols.append({"frames": keys.tolist(), "locations": locs.tolist()})
    keys = _key_frames(rng, spec.frames, spec.key_gap)
    offs = rng.uniform(-1.0, 1.0, size=(len(keys), 3)) * spec.owner_reach * diag
    turns = rng.uniform(-1.0, 1.0, size=(len(keys), 3)) * spec.owner_turn
    offs[0], turns[0] = 0.0, 0.0
    owner = {"frames": keys.tolist(), "offsets": offs.tolist(), "turns": turns.tolist()}
    return {"colliders": cols, "owner": owner, "seed": [int(spec.seed), int(variant)]}


def is_cloth_bake(meta: Mapping) -> bool:
    """True for the metadata (``BakeCache.meta``) of a bake made by Blender's cloth solver."""
    return isinstance(meta, Mapping) and meta.get("source") == SOURCE


def blender_command(blender: str, worker: str, spec_path: str) -> list[str]:
    """The command line of a job run by Blender itself: a background Blender with factory
    settings (no user add-ons or startup file) running the worker script on the spec."""
    return [
        str(blender),
        "--background",
        "--factory-startup",
        "--python-exit-code",
        "1",
        "--python",
        str(worker),
        "--",
        str(spec_path),
    ]


def replay_cloth_bake(
    sim,
    cache,
    *,
    cancel: Callable[[], bool] | None = None,
    step_seconds: list[float] | None = None,
    progress: Callable[[int, int], None] | None = None,
    closest: list | None = None,
) -> np.ndarray:
    """Replay a cloth bake with a model, as Simulate drives it: from the model's rest state
    (``sim.reset()``: a cloth bake starts at rest), each frame stepped with the bake's
    colliders (the shapes its metadata lists, the transforms of its ``colliders`` channel)
    and its ``reference_frame``.

    Parameters
    ----------
    sim : a simulator of the bake's mesh (:class:`core.simulator.SimulatorBase`)
    cache : :class:`core.cache.BakeCache` of a cloth bake (:func:`is_cloth_bake`)
    cancel, step_seconds, progress : as :func:`core.compare.replay_bake`
    closest : when given, the model's closest shape (``sim.closest_shape``) to each of the
        bake's frames is appended to it, taken right after that frame's step: a model driven
        by a reference frame projects in the frame of the step it is at

    Returns
    -------
    (F, n, 3) float array: the model's world positions (m) of the bake's ``F`` frames; frame
    0 is the rest state.
    """
    from ...engine.protocol import FrameInputs
    from ...physics.colliders import Collider

    n_frames, n = int(cache.n_frames), len(cache.X)
    if len(sim.rest_positions()) != n:
        raise SimulationError(
            f"The model has {len(sim.rest_positions())} vertices but the bake has {n}; compare "
            "a model with a bake of the same mesh."
        )
    dt_model = getattr(getattr(sim, "settings", None), "dt", None)
    dt_bake = float(cache.meta["dt"])
    if dt_model is not None and abs(float(dt_model) - dt_bake) > 1e-9 * dt_bake:
        raise SimulationError(
            f"The model steps {float(dt_model):.6g} s per frame but the bake was made at "
            f"{dt_bake:.6g} s per frame; cloth-bake at the model's frame rate or re-train."
        )
    shapes = cache.meta.get("colliders") or []
    C = np.asarray(cache.channel("colliders"), dtype=np.float64) if shapes else None
    R = np.asarray(cache.channel("reference_frame"), dtype=np.float64)
    x = cache.channel("positions")
    shape_of = getattr(sim, "closest_shape", None) if closest is not None else None
    sim.reset()
    out = np.empty((n_frames, n, 3))
    out[0] = sim.positions()
    if shape_of is not None:
        closest.append(shape_of(np.asarray(x[0], dtype=np.float64)))
    for f in range(1, n_frames):
        if cancel is not None and cancel():
            raise JobCancelled("Cancelled while replaying the cloth bake with the model.")
        cols = [
            Collider(c["kind"], float(c["radius"]), float(c["half_length"]), C[f, j])
            for j, c in enumerate(shapes)
        ]
        rep = sim.step(FrameInputs(colliders=cols, reference_frame=R[f]))
        if step_seconds is not None:
            step_seconds.append(float(getattr(rep, "wall_time", 0.0)))
        out[f] = sim.positions()
        if shape_of is not None:
            closest.append(shape_of(np.asarray(x[f], dtype=np.float64)))
        if progress is not None:
            progress(f, n_frames - 1)
    return out
