"""Bake Simulation as a worker job: a trained model stepped over the timeline and written
as a PC2 point cache of the render mesh, out of Blender's process.

The add-on gathers what every frame needs from Blender into arrays, a :class:`Track` (the
object's world matrix, which carries its pins, and the colliders' kind, size and
transform per frame; sliders, markers and a driving reference frame where they are
gathered), and writes it with the job (:func:`write_track`). The worker
(:func:`simulate_to_pc2`) loads the model through the registry, steps it from rest at the
track's first frame with :meth:`Track.inputs` (the same inputs the viewport driver builds
for a frame, :mod:`addon.simulate`), and streams the render mesh in the object's local
space into a PC2 written beside its destination and renamed over it only once complete
(:class:`.pc2.PC2Writer`): a cancel, an error or a crash leaves the previous cache as it
was.

Files, in the job folder (``<cache dir>/<object>/simulate.job/``): ``inputs.npz`` (the
track, read with ``allow_pickle=False``). The PC2 goes where the user asked.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..data.files import ensure_writable_dir, write_npz
from ..errors import CacheError, JobCancelled, NeuralRomError
from ..reduced.pose import transform_points
from .events import frames_job

TRACK_FILE = "inputs.npz"


@dataclass
class Track:
    """The inputs of consecutive frames, as the host gathered them.

    Frame ``k`` of the track is scene frame ``frame0 + k``; frame 0 is the rest state.

    Attributes
    ----------
    frame0 : int
        The scene frame of track frame 0.
    object_matrix : (F, 4, 4) float array
        The simulated object's ``matrix_world``; its pinned nodes follow it.
    collider_kind : (F, C) str array
        ``"plane"``, ``"sphere"`` or ``"capsule"``, per frame and collider.
    collider_radius, collider_half_length : (F, C) float arrays, metres.
    collider_friction : (C,) float array.
    collider_transform : (F, C, 4, 4) float array, rigid world matrices.
    sliders : (F, r) float array or None.
    reference_frame : (F, 4, 4) float array or None.
    marker_vertices : (p,) int array or None; with ``marker_positions`` (F, p, 3) float
        array (world metres) and ``marker_weights`` (p,) float array.
    """

    frame0: int
    object_matrix: np.ndarray
    collider_kind: np.ndarray
    collider_radius: np.ndarray
    collider_half_length: np.ndarray
    collider_friction: np.ndarray
    collider_transform: np.ndarray
    sliders: np.ndarray | None = None
    reference_frame: np.ndarray | None = None
    marker_vertices: np.ndarray | None = None
    marker_positions: np.ndarray | None = None
    marker_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.frame0 = int(self.frame0)
        self.object_matrix = np.asarray(self.object_matrix, dtype=np.float64).reshape(-1, 4, 4)
        n = len(self.object_matrix)
        self.collider_kind = np.asarray(self.collider_kind, dtype=str).reshape(n, -1)
        c = self.collider_kind.shape[1]
        self.collider_radius = np.asarray(self.collider_radius, dtype=np.float64).reshape(n, c)
        self.collider_half_length = np.asarray(self.collider_half_length, np.float64).reshape(n, c)
        self.collider_friction = np.asarray(self.collider_friction, dtype=np.float64).reshape(c)
        self.collider_transform = np.asarray(self.collider_transform, np.float64).reshape(
            n, c, 4, 4
        )
        for name in ("sliders", "reference_frame", "marker_positions"):  # per frame
            a = getattr(self, name)
            if a is not None and len(a) != n:
                raise NeuralRomError(
                    f"the job's {name} has {len(a)} frames but its matrices {n}: gather "
                    "every input over the same frames"
                )

    def __len__(self) -> int:
        return len(self.object_matrix)

    def colliders(self, k: int) -> list:
        """The :class:`.colliders.Collider` list of track frame ``k``."""
        from ..physics.colliders import Collider

        return [
            Collider(
                kind=str(self.collider_kind[k, j]),
                radius=float(self.collider_radius[k, j]),
                half_length=float(self.collider_half_length[k, j]),
                transform=self.collider_transform[k, j],
                friction=float(self.collider_friction[j]),
            )
            for j in range(self.collider_kind.shape[1])
        ]

    def inputs(
        self, k: int, *, pins_local: np.ndarray | None = None, ground_z: float | None = None
    ):
        """The :class:`.sim.FrameInputs` of track frame ``k``.

        Parameters
        ----------
        pins_local : (p, 3) float array or None
            The pinned nodes in the object's local space: their targets are these carried
            by the object's matrix.
        ground_z : float or None
            World height (m) of the ground plane the model was trained with; used when
            the frame has no collider of its own.
        """
        from ..physics.sim import FrameInputs, Markers

        M = self.object_matrix[k]
        pins = None if pins_local is None else to_world(pins_local, M)
        cols = self.colliders(k)
        if not cols and ground_z is not None:
            cols = [ground_plane(ground_z)]
        markers = None
        if self.marker_vertices is not None:
            markers = Markers(self.marker_vertices, self.marker_positions[k], self.marker_weights)
        return FrameInputs(
            colliders=cols,
            pin_targets=pins,
            sliders=None if self.sliders is None else self.sliders[k],
            markers=markers,
            reference_frame=None if self.reference_frame is None else self.reference_frame[k],
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = np.asarray(value)
        return out

    @classmethod
    def from_arrays(cls, arrays) -> Track:
        known = {f.name for f in fields(cls)}
        values = {k: arrays[k] for k in arrays if k in known}
        values["frame0"] = int(values["frame0"])
        return cls(**values)


class FrameReader:
    """The inputs of the frame being shown, from the host's world matrices read once: what
    :meth:`Track.inputs` of a one-frame track gives, to the last bit (a test checks it), at
    a fraction of its cost, for the viewport's frame handler (the walking cape's frame: a
    one-frame track with its colliders cost 64 us of a 0.34 ms frame).

    The colliders' sizes and places are :func:`.colliders.box_colliders`' arithmetic, on
    Python floats where it is elementwise (numpy's calls on arrays this small cost about a
    microsecond each) and with numpy's own product where BLAS rounds (a collider's centre
    through its matrix).

    Parameters
    ----------
    kinds : the shape each collider is taken as ("plane", "sphere", "capsule")
    names : what to call the colliders in an error (default "1", "2", ...)
    plane_radius : the radius a plane is given (None: 0, as :func:`.colliders.box_colliders`)
    reference_frame : the frame's reference frame is the object's matrix, rigid
        (:func:`.clothbake.rigid`; a cloth's owner), else none
    """

    def __init__(
        self,
        kinds: list[str],
        names: list[str] | None = None,
        *,
        plane_radius: float | None = None,
        reference_frame: bool = False,
    ) -> None:
        from ..physics.colliders import KINDS

        self.kinds = [str(k) for k in kinds]
        for kind in self.kinds:
            if kind not in KINDS:
                raise NeuralRomError(
                    f"Unknown collider shape {kind!r}; use plane, sphere or capsule."
                )
        self.names = [str(j + 1) for j in range(len(self.kinds))] if names is None else names
        self.plane_radius = 0.0 if plane_radius is None else float(plane_radius)
        self.reference_frame = bool(reference_frame)
        self._no_friction = [0.0] * len(self.kinds)

    def inputs(
        self,
        mats: np.ndarray,
        boxes: list,
        friction=None,
        *,
        pins_local: np.ndarray | None = None,
        ground_z: float | None = None,
    ):
        """The :class:`.sim.FrameInputs` of one frame.

        Parameters
        ----------
        mats : (1 + colliders, 4, 4) world matrices, the object's first
        boxes : per collider its box's ``(half extents (3,), centre (3,))``, local, unscaled
        friction : (colliders,) friction coefficients (default 0)
        pins_local, ground_z : as :meth:`Track.inputs` takes them
        """
        from ..physics.colliders import Collider
        from ..physics.sim import FrameInputs

        mats = np.asarray(mats, dtype=np.float64)
        rows = mats.tolist()
        friction = self._no_friction if friction is None else friction
        cols = []
        for j, kind in enumerate(self.kinds):
            (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2), _ = rows[1 + j]
            # split_scale: the columns' lengths, summed row by row as numpy's reduce does
            sx = math.sqrt(a0 * a0 + b0 * b0 + c0 * c0)
            sy = math.sqrt(a1 * a1 + b1 * b1 + c1 * c1)
            sz = math.sqrt(a2 * a2 + b2 * b2 + c2 * c2)
            dx, dy, dz = max(sx, 1e-12), max(sy, 1e-12), max(sz, 1e-12)
            hx, hy, hz = (float(v) for v in boxes[j][0])
            hx, hy, hz = hx * sx, hy * sy, hz * sz
            half_length = 0.0
            if kind == "sphere":
                radius = max(hx, hy, hz)
            elif kind == "capsule":
                radius = max(hx, hy)
                half_length = max(hz - radius, 0.0)
            else:
                radius = self.plane_radius
            if kind != "plane" and not radius > 0:
                raise NeuralRomError(
                    f"Collider '{self.names[j]}' has zero size; scale it up or use a larger "
                    "empty display size."
                )
            # a centred box (a primitive's) at a place off the axes' planes: the centre's
            # product is zeros and the place its translation, whatever the zeros' signs
            # (4 of the reader's 10 us); else numpy's product below, for its bits
            centred = not any(boxes[j][1]) and t0 != 0.0 and t1 != 0.0 and t2 != 0.0
            T = np.array(
                [
                    [a0 / dx, a1 / dy, a2 / dz, t0],
                    [b0 / dx, b1 / dy, b2 / dz, t1],
                    [c0 / dx, c1 / dy, c2 / dz, t2],
                    [0.0, 0.0, 0.0, 1.0],
                ]
            )
            if not centred:
                # the centre through the matrix: box_colliders' product, its operands' layout
                A = mats[None, 1 + j, :3, :3]
                centre = np.asarray(boxes[j][1], dtype=np.float64).reshape(1, 3)
                T[:3, 3] = (centre @ A.transpose(0, 2, 1))[0, 0] + mats[1 + j, :3, 3]
            cols.append(Collider(kind, radius, half_length, T, float(friction[j])))
        if not cols and ground_z is not None:
            cols = [ground_plane(ground_z)]
        M = mats[0]
        reference = None
        if self.reference_frame:  # clothbake.rigid: the axis scales divided out
            (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2), bottom = rows[0]
            dx = max(math.sqrt(a0 * a0 + b0 * b0 + c0 * c0), 1e-12)
            dy = max(math.sqrt(a1 * a1 + b1 * b1 + c1 * c1), 1e-12)
            dz = max(math.sqrt(a2 * a2 + b2 * b2 + c2 * c2), 1e-12)
            reference = np.array(
                [
                    [a0 / dx, a1 / dy, a2 / dz, t0],
                    [b0 / dx, b1 / dy, b2 / dz, t1],
                    [c0 / dx, c1 / dy, c2 / dz, t2],
                    bottom,
                ]
            )
        return FrameInputs(
            colliders=cols,
            pin_targets=None if pins_local is None else to_world(pins_local, M),
            reference_frame=reference,
        )


def write_track(path: str | Path, track: Track) -> Path:
    """Write a track (atomically) for a worker to read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_npz(path, track.to_arrays())
    return path


def read_track(path: str | Path) -> Track:
    """Read a track written by :func:`write_track`.

    Raises
    ------
    CacheError
        The file is missing or not a track.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            return Track.from_arrays({k: z[k] for k in z.files})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CacheError(
            f"The job's inputs {path} cannot be read ({e}); run Bake Simulation again."
        ) from e


def ground_plane(z: float):
    """A ground plane collider at world height ``z`` (m), solid below."""
    from ..physics.colliders import Collider

    M = np.eye(4)
    M[2, 3] = z
    return Collider("plane", transform=M)


def to_world(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(n, 3) points through a (4, 4) matrix."""
    m = np.asarray(matrix, dtype=np.float64)
    return transform_points(points, m[:3, :3], m[:3, 3])


def to_local(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(n, 3) world points through the inverse of a (4, 4) local-to-world matrix."""
    return to_world(points, np.linalg.inv(np.asarray(matrix, dtype=np.float64)))


def to_local_shown(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(n, 3) float32 local positions of (n, 3) world points: :func:`to_local` for a mesh
    write, within float32's rounding of it (the walking cape's frame: 8 -> 3 us). The
    3x3 inverse is its adjugate on Python floats (``np.linalg.inv`` of a 4x4 cost 4 us), the
    product in float64, then one cast; a singular or non-finite matrix goes to
    :func:`to_local` (which raises as it did)."""
    (a, b, c, tx), (d, e, f, ty), (g, h, i, tz) = np.asarray(matrix, np.float64)[:3].tolist()
    A, B, C = e * i - f * h, f * g - d * i, d * h - e * g
    det = a * A + b * B + c * C
    if not (det != 0.0 and math.isfinite(det)):
        return to_local(points, matrix).astype(np.float32)
    s = 1.0 / det
    # the inverse's transpose (the product's right operand), rows: its columns
    inv_t = np.array(
        [
            [A * s, B * s, C * s],
            [(c * h - b * i) * s, (a * i - c * g) * s, (b * g - a * h) * s],
            [(b * f - c * e) * s, (c * d - a * f) * s, (a * e - b * d) * s],
        ]
    )
    out = np.asarray(points, dtype=np.float64) @ inv_t
    out -= (tx, ty, tz) @ inv_t
    return out.astype(np.float32)


def render_local(
    P: np.ndarray, matrix_world: np.ndarray, n_surface: int, embedding=None
) -> np.ndarray:
    """(r, 3) render-vertex local positions of (n, 3) world tet-node positions ``P``: the
    first ``n_surface`` nodes (float32, :func:`to_local_shown`), or the points of
    ``embedding`` (:class:`.embedding.Embedding`)."""
    if embedding is not None:
        # barycentric rows sum to 1, so the affine map commutes with the embedding:
        # transform the (few) cage nodes rather than the (many) render vertices
        return embedding.matrix @ to_local(P, matrix_world)
    return to_local_shown(np.asarray(P)[:n_surface], matrix_world)  # float32: as written


def load_model_for(spec: dict):
    """The simulator and model of a job spec's ``model`` (its method found through the
    registry, from ``method_origin`` for a method registered outside the package), refused
    with what to do when it is not the model of the mesh ``expect_mesh_hash``. With
    ``mesh_matrix`` (a model that runs on other meshes) it is put on the job's ``tets``
    placed in the world by that (4, 4) matrix, with its translation as the object's origin
    and ``pinned`` (the nodes the object's pin group holds; absent: the model's choice).

    Returns (simulator, model).
    """
    from .. import registry

    name = str(spec.get("name", "the object"))
    if spec.get("method") and spec.get("method_origin"):
        registry.get(spec["method"], origin=spec["method_origin"])
    path = Path(spec["model"])
    if not path.is_file():
        raise CacheError(
            f"The model of '{name}' is missing ({path}); train again (or check that the cache "
            "folder moved with the .blend)."
        )
    if spec.get("mesh_matrix") is not None:  # a model put on the object's own tets
        from ..data.meshfile import read_tetmesh

        M = np.asarray(spec["mesh_matrix"], dtype=np.float64).reshape(4, 4)
        tm = read_tetmesh(spec["tets"])
        pinned = spec.get("pinned")
        pinned = None if pinned is None else np.asarray(pinned, dtype=np.int64)
        where = {"mesh": (to_world(np.asarray(tm.X, np.float64), M), tm.T, M[:3, 3], pinned)}
    else:
        where = {"expect_mesh_hash": spec.get("expect_mesh_hash")}
    try:
        return registry.load_simulator(path, **where)
    except CacheError as e:
        raise CacheError(
            f"The model of '{name}' cannot drive it: {e}. (Moving the object after baking also "
            "changes its mesh: put it back, or re-bake and re-train.)"
        ) from e


def read_render_map(spec: dict, n_nodes: int | None = None):
    """``(X_local, n_surface, embedding)`` of a job spec's ``tets`` and ``embedding`` files:
    the object's local tet nodes and how the render mesh rides on them. A spec without
    ``tets`` is of a model whose ``n_nodes`` vertices are the mesh's own (a cloth model):
    ``(None, n_nodes, None)``."""
    from ..data.meshfile import read_tetmesh
    from ..geometry.embedding import Embedding

    if not spec.get("tets"):
        return None, int(n_nodes or 0), None
    mesh = read_tetmesh(spec["tets"])
    emb = None
    if spec.get("embedding"):
        with np.load(spec["embedding"], allow_pickle=False) as z:
            emb = Embedding.from_arrays({k: z[k] for k in z.files})
    return np.asarray(mesh.X, dtype=np.float64), int(mesh.n_surface_inputs), emb


def simulate_to_pc2(
    spec: dict,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> dict:
    """Step an object's model over the frames of a track and write its render mesh as a PC2.

    Parameters
    ----------
    spec : dict
        ``name`` (the object), ``model`` (the model file), ``expect_mesh_hash`` (of the
        world tet mesh the model must belong to), ``method`` / ``method_origin``
        (:func:`.registry.job_fields`), ``tets`` and ``embedding`` (the object's local tet
        mesh and embedding files, ``""`` for none), ``inputs`` (:func:`write_track`),
        ``out`` (the ``.pc2``), ``frame_start`` .. ``frame_end`` (the scene frames
        written, at or after the track's ``frame0``).
    progress : ``progress(done, total)`` after every frame stepped.
    should_cancel : checked before every step; True stops with :class:`JobCancelled`
        and ``out`` as it was.

    Returns
    -------
    dict: ``path``, ``frames`` (written), ``frame_start``, ``step_ms`` (mean step, ms).

    Raises
    ------
    CacheError
        The model is missing, of another mesh or unreadable.
    NeuralRomError
        The frame range is not covered by the track.
    """
    from ..data.pc2 import PC2Writer

    name = str(spec.get("name", "the object"))
    track, first, last = track_frames(spec)
    f0 = track.frame0
    out = Path(spec["out"])
    ensure_writable_dir(out.parent, "the point cache", "pick another path")
    sim, model = load_model_for(spec)
    X_local, n_surface, emb = read_render_map(spec, len(sim.rest_positions()))
    if X_local is not None and len(sim.rest_positions()) != len(X_local):
        raise CacheError(
            f"The model of '{name}' has {len(sim.rest_positions())} nodes but its tets "
            f"{len(X_local)}; re-bake and re-train."
        )
    pinned = np.asarray(getattr(sim, "pinned", ()), dtype=np.int64)
    pins_local = X_local[pinned] if pinned.size and X_local is not None else None
    g = model.metadata.get("ground_z")
    ground_z = None if g is None else float(g)
    n_render = int(emb.n_points) if emb is not None else n_surface

    def local(k: int) -> np.ndarray:
        return render_local(sim.positions(), track.object_matrix[k], n_surface, emb)

    total = last - f0
    seconds: list[float] = []
    sim.reset()  # the rest state at frame0, as the viewport's timeline starts
    with PC2Writer(out, n_render, start_frame=first, sample_rate=1.0) as writer:
        if first == f0:
            writer.write(local(0))
        for f in range(f0 + 1, last + 1):
            if should_cancel is not None and should_cancel():
                raise JobCancelled(
                    f"Bake Simulation of '{name}' cancelled at frame {f}: {out.name} was not "
                    "changed"
                )
            k = f - f0
            inputs = track.inputs(k, pins_local=pins_local, ground_z=ground_z)
            t0 = time.perf_counter()
            sim.step(inputs)
            seconds.append(time.perf_counter() - t0)
            if f >= first:
                writer.write(local(k))
            if progress is not None:
                progress(k, total)
    return {
        "path": str(out),
        "frames": last - first + 1,
        "frame_start": first,
        "step_ms": 1000.0 * float(np.mean(seconds)) if seconds else 0.0,
    }


def track_frames(spec: dict) -> tuple[Track, int, int]:
    """The track of a job that plays frames (``spec["inputs"]``, :func:`write_track`) and its
    scene frames ``frame_start`` .. ``frame_end``, checked to lie in the track.

    Raises
    ------
    CacheError
        The track cannot be read.
    NeuralRomError
        The frames are not all in the track.
    """
    track = read_track(spec["inputs"])
    first, last = int(spec["frame_start"]), int(spec["frame_end"])
    f0 = track.frame0
    if not (f0 <= first <= last < f0 + len(track)):
        raise NeuralRomError(
            f"Frames {first}..{last} are not in the gathered inputs ({f0}..{f0 + len(track) - 1}); "
            "run Bake Simulation again."
        )
    return track, first, last


def run_simulate(spec: dict) -> dict:
    """``kind: "simulate"``: Bake Simulation, a model stepped over the frames the add-on
    gathered and written as a PC2 (:func:`simulate_to_pc2`). The PC2 is
    renamed into place only once complete: a cancel or a crash leaves the previous one.

    Spec keys: see :func:`simulate_to_pc2`. Result: ``path``, ``frames``,
    ``frame_start``, ``step_ms``; cancelled: ``path`` and ``written`` False.
    """
    return frames_job(simulate_to_pc2, spec, "simulated")
