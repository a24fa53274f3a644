"""The one Driver: an object's trained model on the scene's timeline, whatever its data
kind, and what it checks and reads of Blender.

A :class:`Driver` runs the model through a frame engine (:class:`..core.engine.Engine` on
the kind's frame adapter; a face: its equilibrium, :class:`.kinds.face.face.FaceEngine`),
one call a frame (:meth:`Driver.positions_at`):

1. Blender's reading of the frame, once (the world matrices of the object and its
   colliders, their boxes; a face: its sliders, markers and jaw);
2. the earlier frames the engine names (:meth:`..core.engine.Engine.frames_needed`),
   sampled from Blender first (:func:`.io.mesh.sample_matrices`) when something moves: core
   never calls back into Blender;
3. the positions, which :meth:`Driver.write` puts into the mesh once.

What differs between the kinds is a :class:`FramePart` each (how the model is checked and
loaded, what a frame reads, how the mesh is written), picked in order by what the object
is (:func:`parts`, from the kinds' records, :mod:`.kinds`: a face, a cloth model, a
plug-in's, else a tet mesh: fem and its families).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import bpy
import numpy as np

from ..core import registry
from ..core.engine.engine import Engine, MeshAdapter, Reading
from ..core.engine.render import render_local
from ..core.engine.track import FrameReader, Track
from ..core.errors import CacheError, NeuralRomError
from ..core.physics.poke import Poke
from ..core.registry import load_simulator
from . import kinds
from .io import mesh as bm
from .io import paths
from .kinds.family import reference
from .kinds.family.reference import runs_on_other_meshes
from .kinds.fem import bake as bakes
from .kinds.fem import tets

# Running pokes, per object name (see operators/poke.py).
running_pokes: dict[str, Poke] = {}


def set_poke(name: str, idx, w, target, stiffness: float, max_force: float | None = None) -> None:
    """Pull the vertices ``idx`` (weights ``w``, summing to 1) of object ``name`` towards
    ``target`` (3,) m with a spring of ``stiffness`` N/m, at most ``max_force`` N, from the
    next frame on (:class:`..core.poke.Poke`)."""
    running_pokes[name] = Poke(
        np.asarray(idx),
        np.asarray(w, dtype=np.float64),
        np.asarray(target, float).reshape(3),
        float(stiffness),
        max_force,
    )


def clear_poke(name: str) -> None:
    running_pokes.pop(name, None)


def gather_inputs(colliders: list[bpy.types.Object], mats: np.ndarray, frame0: int = 0) -> Track:
    """The per-frame inputs read from Blender, as arrays (:class:`..core.simjob.Track`):
    the object's matrix (which carries its pins) and the colliders sized and placed the way
    :func:`.bakes.make_bake_job` samples them.

    Parameters
    ----------
    colliders : the scene's collider objects.
    mats : (F, 1 + colliders, 4, 4) world matrices per frame, the object's first.
    frame0 : the scene frame of ``mats[0]``.
    """
    mats = np.asarray(mats, dtype=np.float64)
    kinds = [col.neural_rom.collider_shape for col in colliders]
    kind, radius, half, transform = bm.collider_frames(colliders, kinds, mats)
    radius[kind == "plane"] = 0.5  # a plane has no size: core.colliders.Collider's default
    friction = np.array([float(col.neural_rom.collider_friction) for col in colliders])
    return Track(frame0, mats[:, 0], kind, radius, half, friction, transform)


def _now(obj, colliders: list) -> np.ndarray:
    """(1, 1 + colliders, 4, 4): the current world matrices (``obj`` may be None)."""
    if obj is None:
        return np.concatenate([np.eye(4)[None], bm.matrices(colliders)])[None]
    return bm.matrices([obj, *colliders])[None]


def collider_inputs(colliders: list[bpy.types.Object], mats: np.ndarray | None = None) -> list:
    """core Colliders of the scene's collider objects (at ``mats``, (colliders, 4, 4),
    default: now)."""
    if mats is None:
        m = _now(None, colliders)
    else:
        m = np.concatenate([np.eye(4)[None], np.asarray(mats)])[None]
    return gather_inputs(colliders, m).colliders(0)


def check_model(obj: bpy.types.Object, scene: bpy.types.Scene) -> tuple:
    """What can be checked of an object's model without loading it, before it drives the
    object here (:class:`Driver`) or in a job (Bake Simulation, Compare with Bake), as its
    kind's part checks it (:meth:`FramePart.check`).

    Returns (model path, the hash of the mesh the model must belong to, :class:`.tets.Tets`
    or None: a cloth's own vertices). Raises a :class:`NeuralRomError` saying what to do
    when the object has no model, the model is missing, or the mesh or its tets changed.
    """
    return part_of(obj).check(obj, scene)


def check_tet_model(obj: bpy.types.Object, scene: bpy.types.Scene) -> tuple:
    """:func:`check_model` of a model on the object's tets (fem, family, a face's)."""
    s = obj.neural_rom
    if not s.model.path:
        raise NeuralRomError(f"'{obj.name}' has no trained model; run Train first.")
    t = tets.load_tets(obj)  # missing or edited: re-tetrahedralize
    # a model that runs on other meshes runs on any tets of the object (addon/family.py)
    if s.model.tets_hash and s.model.tets_hash != s.tets_hash and not runs_on_other_meshes(obj):
        raise CacheError(
            f"'{obj.name}' was re-tetrahedralized after its model was trained; re-bake and "
            "re-train."
        )
    path = paths.load_path(s.model.path)
    if not path.is_file():
        raise CacheError(
            f"The model of '{obj.name}' is missing ({path}); train again (or check that the "
            "cache folder moved with the .blend)."
        )
    n_render = int(t.embedding.n_points) if t.embedding is not None else t.mesh.n_surface_inputs
    if n_render != len(obj.data.vertices):
        raise CacheError(
            f"The model of '{obj.name}' has {n_render} render vertices but the mesh has "
            f"{len(obj.data.vertices)}; re-tetrahedralize, re-bake and re-train."
        )
    return path, tets.world_mesh_hash(obj, scene), t


def model_job_fields(
    obj: bpy.types.Object, scene: bpy.types.Scene, model: tuple[str, str] | None = None
) -> dict:
    """The part of a job spec that lets a worker load and map the object's model
    (:func:`..core.simjob.load_model_for`, :func:`..core.simjob.read_render_map`), after
    :func:`check_model`; or, with ``model`` ``(path, method)``, a model of the object's
    bakes that is not (yet) recorded on it (Compare Methods trains one per method)."""
    s = obj.neural_rom
    if model is None:
        path, mesh_hash, t = check_model(obj, scene)
        method = s.model.method
        placement = reference.job_fields(obj, scene)
    else:
        path, method = model
        t, mesh_hash = kinds.kind_of(obj).mesh_of_model(obj, scene)  # t None: the mesh's own
        other = registry.get(method).other_mesh
        placement = reference.job_fields(obj, scene, other_mesh=other)
    fields = {
        "name": obj.name,
        "model": str(path),
        "expect_mesh_hash": mesh_hash,
        # none: the model's vertices are the mesh's (a cloth model)
        "tets": str(paths.load_path(s.tets_path)) if t is not None else "",
        "embedding": str(paths.load_path(s.embedding_path))
        if t is not None and s.tets_embedded
        else "",
    }
    # a method registered outside the package: the worker imports its file
    fields.update(registry.job_fields_of(method))
    fields.update(placement)
    return fields


def frame_colliders(obj: bpy.types.Object, scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The collider objects that are the model's inputs (:meth:`FramePart.colliders` of the
    part that drives the object)."""
    return part_of(obj).colliders(obj, scene)


# model path -> its stamp (modification time and size) when last stat-ed: on Start, on Reset
# and on the start frame (:func:`driver`), never on the other frames
model_stamps: dict = {}


def model_stamp(path, *, fresh: bool = True):
    """``(mtime_ns, size)`` of the model file ``path`` (None: no such file), stat-ed again
    when ``fresh`` (Start, Reset, the start frame) or never read, else as last read. A model
    trained in Blender drops its object's driver itself (:func:`forget`), so it drives the
    object from the next frame; a file replaced outside Blender (a training on the farm, a
    copy) from the start frame, Start or Reset on. The stamp was a ``stat`` every frame (15
    us of the walking cape's 0.34 ms), then every 0.5 s."""
    kept = model_stamps.get(path, model_stamps)
    if not fresh and kept is not model_stamps:
        return kept
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    model_stamps[path] = stamp
    return stamp


def driver_key(
    obj: bpy.types.Object, scene: bpy.types.Scene, colliders=None, *, fresh: bool = True
) -> tuple:
    """What the simulated frames depend on, besides the per-frame inputs (``colliders``:
    the scene's collider objects, when the caller has them; ``fresh``: the model file's
    stamp read now, else as :func:`model_stamp` kept it). The frame handler compares it
    every frame: each property read once, the material as set (a preset's name, else its
    values), not :meth:`material_values`' dict (9.5 -> 5.2 us of the walking cape's frame)."""
    s = obj.neural_rom
    model = s.model
    stored = model.path
    path = paths.load_path(stored) if stored else None
    stamp = None if path is None else model_stamp(path, fresh=fresh)
    if colliders is None:
        colliders = frame_colliders(obj, scene)
    preset = s.material_preset
    render = scene.render
    return (
        str(path),
        stamp,
        s.tets_hash,
        model.mesh_hash,
        s.face.mesh_hash,
        scene.frame_start,
        render.fps_base / render.fps,  # bakes.scene_dt
        (s.youngs_modulus, s.poisson_ratio, s.density) if preset == "custom" else preset,
        tuple((c.name, c.neural_rom.collider_shape) for c in colliders),
    )


# --------------------------------------------------------------------------------------
# The kinds' parts of a driver


class FramePart:
    """What a data kind brings to a :class:`Driver` (the tet mesh's part; the others in
    their kinds' packages: :mod:`.kinds.cloth.part`, :mod:`.kinds.face.part`): ``check``
    and ``load`` check and load the model, ``show``/``hide`` prepare and restore the mesh
    around a simulation, ``now`` reads a frame from Blender, ``write`` puts the positions
    into the mesh."""

    name = "fem"

    @staticmethod
    def claims(obj: bpy.types.Object) -> bool:
        return True

    #: a job spec of its own for Bake Simulation (:func:`.io.export.make_simulation_job`),
    #: ``simulation_job(obj, scene, path, folder, start=, end=, read_colliders=)``; None:
    #: the model's (:func:`model_job_fields`)
    simulation_job = None

    @staticmethod
    def colliders(obj: bpy.types.Object, scene: bpy.types.Scene) -> list[bpy.types.Object]:
        """The collider objects that are the model's inputs: the scene's."""
        return bakes.scene_colliders(obj, scene)

    #: whether its frames show over the mesh's shape keys (a face's modifier)
    over_shape_keys = False

    def check(self, obj, scene) -> tuple:
        """:func:`check_model` of the kind."""
        return check_tet_model(obj, scene)

    def track(self, obj, colliders: list, mats: np.ndarray, frame0: int) -> Track:
        """The inputs of frames ``frame0``.. (``mats``: (F, 1 + colliders, 4, 4) world
        matrices, the object's first), as a simulation job reads them
        (:func:`gather_inputs`)."""
        return gather_inputs(colliders, mats, frame0)

    def show(self, obj) -> None:
        """Before the first frame is written: the rest shape kept (:func:`.io.mesh.store_rest`)."""
        bm.store_rest(obj.data)

    def hide(self, obj) -> None:
        """When the simulation stops: the rest shape back."""
        if obj.type == "MESH":
            bm.restore_rest(obj.data)

    def load(self, obj, scene) -> tuple:
        """``(sim, model, tets, engine)`` of the object's model."""
        path, mesh_hash, t = self.check(obj, scene)
        try:
            sim, model = load_simulator(path, **reference.load_arguments(obj, scene, t, mesh_hash))
        except CacheError as e:
            raise CacheError(
                f"The model of '{obj.name}' cannot drive it: {e}. (Moving the object after "
                "baking also changes its mesh: put it back, or re-bake and re-train.)"
            ) from e
        X = np.asarray(t.mesh.X, dtype=np.float64)
        adapter = MeshAdapter.for_model(sim, model, (X, t.mesh.n_surface_inputs, t.embedding))
        return sim, model, t, Engine(sim, adapter, int(scene.frame_start))

    def reader(self, d: Driver, obj, colliders: list) -> FrameReader:
        """The colliders' :class:`..core.simjob.FrameReader` (kept while their names and
        shapes stay: the driver's key has them)."""
        kinds = [col.neural_rom.collider_shape for col in colliders]
        key = (tuple(col.name for col in colliders), tuple(kinds))
        if d.read_key != key:
            d.read_key = key
            d.engine.adapter.reader_for(kinds, list(key[0]))
        return d.engine.adapter.reader

    @staticmethod
    def friction(colliders: list) -> list[float] | None:
        return [float(col.neural_rom.collider_friction) for col in colliders]

    def now(self, d: Driver, obj, scene, colliders: list, mats=None) -> Reading:
        """The frame read from Blender: the matrices ``mats`` ((1 + colliders, 4, 4), the
        object's first; default: now) and the colliders' boxes."""
        self.reader(d, obj, colliders)
        m = bm.matrices([obj, *colliders]) if mats is None else mats
        return Reading(m, [bm.collider_box(col) for col in colliders], self.friction(colliders))

    def write(self, d: Driver, obj, P: np.ndarray, matrix: np.ndarray | None) -> None:
        bm.set_positions(obj.data, d.local(P, bm.matrix(obj) if matrix is None else matrix))


#: part class -> its one instance (a part keeps no state: the driver does)
_PARTS: dict = {}


def parts() -> list[FramePart]:
    """The kinds' parts, in the order their records are asked (:func:`.kinds.records`:
    a face, a cloth model, a plug-in's, fem's last)."""
    found = []
    for k in kinds.records():
        cls = k.part_class()
        if cls is not None and cls not in _PARTS:
            _PARTS[cls] = cls()
        if cls is not None and _PARTS[cls] not in found:
            found.append(_PARTS[cls])
    return found


def part_of(obj: bpy.types.Object) -> FramePart:
    """The part that drives ``obj``: the first that claims it."""
    return next(p for p in parts() if p.claims(obj))


class Driver:
    """The model of one object on the scene's timeline and its map to the mesh, whatever
    its kind (:func:`part_of`).

    Raises (on construction) a :class:`NeuralRomError` saying what to do when the object
    has no model, the model is missing or belongs to another mesh, or the mesh changed.
    """

    def __init__(self, obj: bpy.types.Object, scene: bpy.types.Scene, *, key=None):
        self.name = obj.name
        self.part = part_of(obj)
        self.sim, self.model, self.tets, self.engine = self.part.load(obj, scene)
        self.n_nodes = len(self.sim.rest_positions())
        self.frame_start = int(scene.frame_start)
        if key is None:  # its key with its own kind's colliders
            key = driver_key(obj, scene, self.part.colliders(obj, scene))
        self.key = key
        self.read_key = None  # what the engine's collider reader was made for

    @property
    def timeline(self):
        """The simulated frames (:class:`..core.framecache.Timeline`)."""
        return self.engine.timeline

    @property
    def cache(self):
        """The simulated frames (:class:`..core.framecache.FrameCache`; a face: its solved
        frames)."""
        return self.engine.cache if self.engine.timeline is None else self.engine.timeline.cache

    @property
    def step_seconds(self) -> list[float]:
        return self.engine.step_seconds

    @property
    def pins_local(self):
        """(p, 3) the pinned tet nodes in object space (they follow its animation)."""
        return getattr(self.engine.adapter, "pins_local", None)

    @pins_local.setter
    def pins_local(self, value) -> None:
        self.engine.adapter.pins_local = value

    @property
    def ground_z(self) -> float | None:
        """The ground plane the bakes had (world z, m), which the model learnt to land on;
        used when the scene has no collider of its own."""
        return getattr(self.engine.adapter, "ground_z", None)

    def use_tets(self, t) -> None:
        """Map to the render mesh through the tets ``t`` from now on (a mesh swap)."""
        self.tets = t
        a = self.engine.adapter
        a.n_surface, a.embedding = int(t.mesh.n_surface_inputs), t.embedding

    def inputs(self, obj, colliders: list, mats: np.ndarray | None = None, scene=None):
        """The frame as Blender shows it now (or at the matrices ``mats``), as the kind
        reads it (:meth:`FramePart.now`)."""
        return self.part.now(self, obj, scene, colliders, mats)

    def reset(self) -> None:
        """Forget every simulated frame; the start frame is the rest state."""
        self.engine.reset()

    def positions_at(
        self,
        frame: int,
        obj,
        scene,
        sample: Callable[[int, int], np.ndarray | None] | None = None,
        *,
        colliders: list | None = None,
        pokes: tuple[Poke, ...] | None = None,
        mats: np.ndarray | None = None,
    ) -> np.ndarray:
        """(n, 3) positions at scene ``frame`` (world tet nodes; a face: local skin),
        simulating what is missing.

        Without ``sample``, the frame's colliders and pins are the scene's now, and the
        frames stepped on the way are sampled (:func:`.io.mesh.sample_matrices`) when the
        object or a collider is animated. ``sample(first, last)`` instead gives the matrices
        of the object and its colliders for frames first..last ((count, 1 + colliders, 4,
        4)). ``colliders`` are the scene's collider objects (default: looked up); ``pokes``
        default to the object's running poke; ``mats`` the world matrices of the object and
        its colliders now when the caller read them ((1 + colliders, 4, 4)).
        """
        frame = int(frame)
        if colliders is None:
            colliders = self.part.colliders(obj, scene)
        if pokes is None:
            pokes = (running_pokes[self.name],) if self.name in running_pokes else ()
        if sample is not None:
            mats = sample(frame, frame)[0]
        now = self.inputs(obj, colliders, mats, scene)
        # the frames stepped on the way are sampled first: core never calls back into Blender
        need, earlier = self.engine.frames_needed(frame, now, pokes=pokes), None
        if need:
            sample = sample or self._sampler(obj, scene, colliders)
            mats = sample(need.start, need.stop - 1)
            if mats is not None:
                earlier = [self.inputs(obj, colliders, m, scene) for m in mats]
        return self.engine.positions(frame, now, earlier, pokes=pokes)

    @staticmethod
    def _sampler(obj, scene, colliders: list) -> Callable[[int, int], np.ndarray | None]:
        """The matrices of frames first..last, sampled only when something is animated."""
        objs = [obj, *colliders]

        def sample(first: int, last: int) -> np.ndarray | None:
            if not any(bm.is_animated(o) for o in objs):
                return None  # every frame in between is the scene now
            return bm.sample_matrices(scene, objs, range(first, last + 1))

        return sample

    def local(self, P: np.ndarray, matrix_world: np.ndarray) -> np.ndarray:
        """Render-mesh local positions of (n, 3) world tet-node positions (a tet mesh's or a
        cloth's driver)."""
        a = self.engine.adapter
        return render_local(P, matrix_world, a.n_surface, a.embedding)

    def write(self, obj, P: np.ndarray, matrix: np.ndarray | None = None) -> None:
        """Write the frame's positions ``P`` into the mesh (``matrix``: the object's world
        matrix now, when the caller has it)."""
        self.part.write(self, obj, P, matrix)
