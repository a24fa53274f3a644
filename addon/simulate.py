"""Interactive reduced simulation: the one frame handler (:func:`.frames.on_frame_change`)
drives every object whose Simulate is on from its trained model, with the scene's colliders,
pins and pokes.

The per-frame path reads straight through (:func:`.frames.simulate_objects` ->
:func:`apply_frame`):

1. Blender gathers the frame's inputs once (:func:`apply_frame` reads the world matrices of
   the object and its colliders, :meth:`Driver.inputs` their boxes, and the running poke,
   :func:`set_poke`);
2. core steps: :class:`..core.framecache.Timeline` scrubs like Blender's point cache, in
   memory (going back restores a kept frame, going forward steps the frames in between,
   sampled from Blender first, a frame whose inputs changed is simulated again with every
   frame after it);
3. Blender writes the mesh once (:meth:`Driver.local`, one ``foreach_set``).

Core turns what Blender read into :class:`..core.sim.FrameInputs`: for the frame shown by a
:class:`..core.simjob.FrameReader` (no track built each frame), for Bake Simulation's job
from :func:`gather_inputs`' :class:`..core.simjob.Track` of every frame; the two give the
same inputs to the bit, so the viewport and the baked cache play the same frames. Sliders,
markers and a driving reference frame are fields of the track; :func:`gather_inputs` is
where they are gathered when a method takes them. A new model, material, tets, start frame,
frame rate or set of colliders rebuilds the driver (:func:`driver_key`; a model file
replaced outside Blender is noticed within :data:`STAMP_SECONDS` or on the start frame);
Reset forgets the frames. A model that
stopped fitting its object turns that object's simulation off and says why
(:func:`frame_failed`), rather than raising inside Blender's frame change.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import bpy
import numpy as np

from ..core.engine.protocol import FrameInputs
from ..core.engine.render import render_local, to_local_shown
from ..core.engine.timeline import Timeline
from ..core.engine.track import FrameReader, Track
from ..core.errors import CacheError, NeuralRomError
from ..core.physics.poke import Poke
from .io import mesh as bm
from .io import paths
from .kinds.cloth import model as cloth
from .kinds.family import reference
from .kinds.family.reference import runs_on_other_meshes
from .kinds.fem import bake as bakes
from .kinds.fem import tets

# Running pokes, per object name (see operators/poke.py).
_pokes: dict[str, Poke] = {}


def set_poke(name: str, idx, w, target, stiffness: float, max_force: float | None = None) -> None:
    """Pull the vertices ``idx`` (weights ``w``, summing to 1) of object ``name`` towards
    ``target`` (3,) m with a spring of ``stiffness`` N/m, at most ``max_force`` N, from the
    next frame on (:class:`..core.poke.Poke`)."""
    _pokes[name] = Poke(
        np.asarray(idx),
        np.asarray(w, dtype=np.float64),
        np.asarray(target, float).reshape(3),
        float(stiffness),
        max_force,
    )


def clear_poke(name: str) -> None:
    _pokes.pop(name, None)


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
    object here (:class:`Driver`) or in a job (Bake Simulation, Compare with Bake).

    Returns (model path, the hash of the world tet mesh the model must belong to,
    :class:`.tets.Tets`). Raises a :class:`NeuralRomError` saying what to do when the
    object has no model, the model is missing, or the mesh or its tets changed.
    """
    s = obj.neural_rom
    if s.model.kind == "cloth":  # the mesh's own vertices: no tets
        return (*cloth.check_model(obj), None)
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
    from ..core import registry

    s = obj.neural_rom
    if model is None:
        path, mesh_hash, t = check_model(obj, scene)
        method = s.model.method
        placement = reference.job_fields(obj, scene)
    else:
        path, method = model
        if s.training_data_kind() == "cloth":  # the mesh's own vertices: no tets
            t, mesh_hash = None, cloth.surface_hash(obj)
        else:
            t = tets.load_tets(obj)
            mesh_hash = tets.world_mesh_hash(obj, scene)
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
    """The collider objects that are the model's inputs: the scene's colliders, or for a
    cloth model the ones its cloth bakes recorded (:func:`.cloth.colliders`)."""
    if obj.neural_rom.model.kind == "cloth":
        return cloth.colliders(obj)
    return bakes.scene_colliders(obj, scene)


#: Seconds a model file's stamp (its modification time and size) is trusted while the timeline
#: plays: a file replaced outside Blender (a training on the farm, a copy) drives the object
#: from the next frame after at most this long, and at once on the start frame, on Start and
#: on Reset; a training in Blender drops the driver itself (:func:`forget`). The stamp was
#: a ``stat`` every frame: 15 us of the walking cape's 0.34 ms.
STAMP_SECONDS = 0.5
# model path -> (time.monotonic() of the stat, stamp)
_stamps: dict = {}


def model_stamp(path, *, fresh: bool = True):
    """``(mtime_ns, size)`` of the model file ``path`` (None: no such file), stat-ed again
    when ``fresh`` or when the last reading is older than :data:`STAMP_SECONDS`."""
    now = time.monotonic()
    kept = _stamps.get(path)
    if not fresh and kept is not None and now - kept[0] < STAMP_SECONDS:
        return kept[1]
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    _stamps[path] = (now, stamp)
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


class Driver:
    """The reduced simulation of one object on the scene's timeline
    (:class:`..core.framecache.Timeline`) and its render mapping.

    Raises (on construction) a :class:`NeuralRomError` saying what to do when the object
    has no model, the model is missing or belongs to another mesh, or the mesh changed.
    """

    def __init__(self, obj: bpy.types.Object, scene: bpy.types.Scene):
        from ..core.registry import load_simulator

        self.name = obj.name
        path, mesh_hash, self.tets = check_model(obj, scene)
        try:
            self.sim, self.model = load_simulator(
                path, **reference.load_arguments(obj, scene, self.tets, mesh_hash)
            )
        except CacheError as e:
            raise CacheError(
                f"The model of '{obj.name}' cannot drive it: {e}. (Moving the object after "
                "baking also changes its mesh: put it back, or re-bake and re-train.)"
            ) from e
        rest = self.sim.rest_positions()
        self.n_nodes = len(rest)
        # pinned tet nodes in object space: they follow the object's animation, as in a bake
        pinned = np.asarray(getattr(self.sim, "pinned", ()), dtype=np.int64)
        self.pins_local = (
            np.asarray(self.tets.mesh.X, dtype=np.float64)[pinned] if pinned.size else None
        )
        # the ground plane the bakes had (world z, m), which the model learnt to land on;
        # used when the scene has no collider of its own
        g = self.model.metadata.get("ground_z")
        self.ground_z = None if g is None else float(g)
        self.frame_start = int(scene.frame_start)
        self.key = driver_key(obj, scene)
        self.timeline = Timeline(self.sim, self.frame_start)

    @property
    def cache(self):
        """The simulated frames (:class:`..core.framecache.FrameCache`)."""
        return self.timeline.cache

    @property
    def step_seconds(self) -> list[float]:
        return self.timeline.step_seconds

    # ------------------------------------------------------------------ inputs
    def inputs(self, obj, colliders: list, mats: np.ndarray | None = None) -> FrameInputs:
        """The frame's inputs, read from Blender once: the ``colliders`` (objects) and the
        pin targets, at the world matrices ``mats`` ((1 + colliders, 4, 4): the object's,
        then its colliders'), default: now. :meth:`..core.simjob.Track.inputs` of the frame
        as :func:`gather_inputs` gathers it (Bake Simulation's), to the bit, without
        building the track (:class:`..core.simjob.FrameReader`)."""
        m = bm.matrices([obj, *colliders]) if mats is None else mats
        boxes = [bm.collider_box(col) for col in colliders]
        return self._reader(obj, colliders).inputs(
            m, boxes, self._friction(colliders), pins_local=self.pins_local, ground_z=self.ground_z
        )

    def _reader(self, obj, colliders: list) -> FrameReader:
        """The :class:`..core.simjob.FrameReader` of these colliders (kept while their
        names and shapes stay: the driver's key has them)."""
        kinds = [col.neural_rom.collider_shape for col in colliders]
        key = (tuple(col.name for col in colliders), tuple(kinds))
        if getattr(self, "_read", (None,))[0] != key:
            # a plane has no size: core.colliders.Collider's default (gather_inputs)
            self._read = key, FrameReader(kinds, list(key[0]), plane_radius=0.5)
        return self._read[1]

    @staticmethod
    def _friction(colliders: list) -> list[float]:
        return [float(col.neural_rom.collider_friction) for col in colliders]

    # ----------------------------------------------------------------- frames
    def reset(self) -> None:
        """Forget every simulated frame; the start frame is the rest state."""
        self.timeline.reset()

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
        """(n, 3) world tet-node positions at scene ``frame``, simulating what is missing.

        Without ``sample``, the frame's colliders and pins are the scene's now, and the
        frames stepped on the way are sampled (:func:`.io.mesh.sample_matrices`) when the object
        or a collider is animated. ``sample(first, last)`` instead gives the matrices of the
        object and its colliders for frames first..last ((count, 1 + colliders, 4, 4)).
        ``colliders`` are the scene's collider objects (default: looked up); ``pokes``
        default to the object's running poke; ``mats`` the world matrices of the object and
        its colliders now when the caller read them ((1 + colliders, 4, 4)).
        """
        frame = int(frame)
        if colliders is None:
            colliders = frame_colliders(obj, scene)
        if pokes is None:
            pokes = (_pokes[self.name],) if self.name in _pokes else ()
        if sample is not None:
            mats = sample(frame, frame)[0]
        now = self.inputs(obj, colliders, mats)
        # the frames stepped on the way are sampled first: core never calls back into Blender
        need, earlier = self.timeline.missing(frame, now, pokes=pokes), None
        if need:
            sample = sample or self._sampler(obj, scene, colliders)
            mats = sample(need.start, need.stop - 1)
            earlier = None if mats is None else [self.inputs(obj, colliders, m) for m in mats]
        return self.timeline.positions_at(frame, now, pokes=pokes, earlier=earlier)

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
        """Render-mesh local positions of (n, 3) world tet-node positions."""
        t = self.tets
        return render_local(P, matrix_world, int(t.mesh.n_surface_inputs), t.embedding)

    def write(self, obj, P: np.ndarray, matrix: np.ndarray | None = None) -> None:
        """Write the frame's (n, 3) world tet-node positions ``P`` into the mesh (``matrix``:
        the object's world matrix now, when the caller has it)."""
        bm.set_positions(obj.data, self.local(P, bm.matrix(obj) if matrix is None else matrix))


class ClothDriver(Driver):
    """:class:`.simulate.Driver` of a cloth model: the mesh's own vertices (no tets), the
    colliders its bakes recorded, its world matrix as the reference frame."""

    def __init__(self, obj: bpy.types.Object, scene: bpy.types.Scene):
        from ..core.registry import load_simulator

        self.name = obj.name
        path, mesh_hash = cloth.check_model(obj)
        try:
            self.sim, self.model = load_simulator(path, expect_mesh_hash=mesh_hash)
        except CacheError as e:
            raise CacheError(f"The model of '{obj.name}' cannot drive it: {e}.") from e
        self.n_nodes = len(self.sim.rest_positions())
        if self.n_nodes != len(obj.data.vertices):
            raise CacheError(
                f"The model of '{obj.name}' has {self.n_nodes} vertices but the mesh "
                f"{len(obj.data.vertices)}; cloth-bake it again and re-train."
            )
        self.tets = None
        self.pins_local = None
        self.ground_z = None
        self.frame_start = int(scene.frame_start)
        self.key = driver_key(obj, scene)
        self.timeline = Timeline(self.sim, self.frame_start)

    def _reader(self, obj, colliders: list) -> FrameReader:
        """:meth:`Driver._reader` of a cloth: :func:`.cloth.track`'s (the colliders as its
        bakes recorded them, the object's rigid world matrix as the reference frame), kept
        while the recording and the colliders' names stay (their kinds follow from these)."""
        key = (obj.neural_rom.cloth.colliders, tuple(col.name for col in colliders))
        if getattr(self, "_read", (None,))[0] != key:
            kinds = cloth.baked_kinds(obj, colliders)
            self._read = key, FrameReader(kinds, list(key[1]), reference_frame=True)
        return self._read[1]

    @staticmethod
    def _friction(colliders: list) -> None:
        return None  # a cloth bake records none

    def local(self, P: np.ndarray, matrix_world: np.ndarray) -> np.ndarray:
        return to_local_shown(P, matrix_world)  # float32, as the mesh takes it


_drivers: dict[str, Driver] = {}


def forget(name: str | None = None) -> None:
    """Drop the driver of ``name`` (None: every driver and poke, and a pending status-bar
    message: a timer still registered when the PyPI bpy exits hangs the interpreter)."""
    if name is None:
        _drivers.clear()
        _pokes.clear()
        _stamps.clear()
        if bpy.app.timers.is_registered(_clear_status_bar):
            bpy.app.timers.unregister(_clear_status_bar)
            _status_bar(None)
    else:
        _drivers.pop(name, None)


def _let_go_of_stopped() -> None:
    """Drop the drivers and pokes of objects that no longer simulate (another mode turned
    Simulate off, the object was deleted or renamed)."""
    for name in list(_drivers):
        obj = bpy.data.objects.get(name)
        if obj is None or not obj.neural_rom.simulate:
            _drivers.pop(name, None)
            _pokes.pop(name, None)


def driver(obj: bpy.types.Object, scene: bpy.types.Scene, colliders: list | None = None) -> Driver:
    """The object's driver, rebuilt when what its frames depend on changed
    (``colliders``: the scene's collider objects, when the caller has them)."""
    d = _drivers.get(obj.name)
    # the model file's stamp as kept, but on the start frame (playing from the start)
    fresh = d is None or scene.frame_current == scene.frame_start
    if d is not None and d.key == driver_key(obj, scene, colliders, fresh=fresh):
        return d
    _let_go_of_stopped()
    from .kinds.face import face

    if face.is_face(obj):
        d = face.FaceDriver(
            obj, scene, key=driver_key(obj, scene, colliders), read_colliders=collider_inputs
        )
    elif obj.neural_rom.model.kind == "cloth":
        d = ClothDriver(obj, scene)
    else:
        d = Driver(obj, scene)
    _drivers[obj.name] = d
    return d


def apply_frame(
    obj: bpy.types.Object, scene: bpy.types.Scene, frame: int | None = None
) -> np.ndarray:
    """Write the simulated frame (default: the current one) into the mesh; returns the
    (n, 3) world tet-node positions."""
    colliders = frame_colliders(obj, scene)
    d = driver(obj, scene, colliders)
    frame = scene.frame_current if frame is None else frame
    mats = bm.matrices([obj, *colliders])  # read once: the inputs and the mesh's placement
    P = d.positions_at(frame, obj, scene, colliders=colliders, mats=mats)
    d.write(obj, P, mats[0])
    d.shown = int(frame)
    return P


def start_simulation(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> Driver:
    """Make the mesh follow its reduced simulation as the timeline moves.

    Validates the model first, then saves the rest shape and shows the current frame.
    """
    from .kinds.face import face

    scene = scene or paths.scene_of(obj)
    if obj.type != "MESH":
        raise NeuralRomError(f"'{obj.name}' is not a mesh.")
    if obj.data.shape_keys is not None and not face.is_face(obj):
        raise NeuralRomError(
            f"'{obj.name}' has shape keys, which override the vertex positions the simulation "
            "writes; use Bake Simulation instead (its Mesh Cache modifier plays over shape keys)."
        )
    _drivers.pop(obj.name, None)
    clear_poke(obj.name)
    d = driver(obj, scene)  # raises before anything changes
    if obj.neural_rom.playback:
        bakes.stop_playback(obj)
    if face.is_face(obj):  # shown by a modifier: the shape keys stay as they are
        face.show_simulation(obj)
    else:
        bm.store_rest(obj.data)
    obj.neural_rom.simulate = True
    cloth.hold(obj)  # a cloth object's Cloth modifier is muted while the model drives it
    try:
        apply_frame(obj, scene)
    except BaseException:  # nothing left half on: the rest shape and the cloth come back
        stop_simulation(obj)
        raise
    return d


def stop_simulation(obj: bpy.types.Object) -> None:
    """Stop the simulation and put the rest shape back."""
    obj.neural_rom.simulate = False
    clear_poke(obj.name)
    _drivers.pop(obj.name, None)
    from .kinds.face import face

    if face.is_face(obj):
        face.hide_simulation(obj)
    elif obj.type == "MESH":
        bm.restore_rest(obj.data)
    cloth.release(obj)


def reset_simulation(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> None:
    """Forget the simulated frames (the next frame change simulates from rest)."""
    scene = scene or paths.scene_of(obj)
    _stamps.clear()  # a model file replaced meanwhile drives it from now on
    d = _drivers.get(obj.name)
    if d is not None:
        d.reset()
    if obj.neural_rom.simulate:
        apply_frame(obj, scene)


# --------------------------------------------------------------------------------------
# A frame that failed (the modes of the one frame handler, addon/frames.py)

# ID property on an object whose frame update failed: what went wrong and what to do.
# Shown under Object Properties > Custom Properties; removed when the object updates again.
FRAME_ERROR = "nrom_frame_error"
# How long the failure stays in the status bar, seconds.
STATUS_SECONDS = 10.0


def _status_bar(text: str | None) -> None:
    """Show ``text`` in the status bar of every window (None: give it back to Blender)."""
    wm = getattr(bpy.context, "window_manager", None)
    for window in wm.windows if wm is not None else ():
        workspace = window.workspace
        if workspace is not None:
            workspace.status_text_set(text)


def _clear_status_bar() -> None:
    _status_bar(None)  # returns None: a one-shot timer


def frame_failed(
    obj: bpy.types.Object, what: str, error: Exception, stop: Callable[[bpy.types.Object], object]
) -> str:
    """Stop driving ``obj`` after its frame update raised ``error``, and tell the user.

    ``what`` names the mode ("Simulation", "Playback", "Comparison"); ``stop(obj)`` turns
    it off, so it does not fail again on every frame. The message ("Simulation of 'Cube'
    stopped: <error>", which says what to do) goes on the object (:data:`FRAME_ERROR`),
    into the status bar for :data:`STATUS_SECONDS` and to the terminal. An error that is
    not a :class:`NeuralRomError` or ``OSError`` is a bug: its traceback is printed too.
    Returns the message.
    """
    import traceback

    if not isinstance(error, NeuralRomError | OSError):
        traceback.print_exception(error)
        error = f"{type(error).__name__}: {error} (a bug: please report it with the traceback)"
    message = f"{what} of '{obj.name}' stopped: {error}"
    print(f"Neural ROM: {message}")
    try:
        stop(obj)
    except Exception:  # noqa: BLE001 (the mode's flag is off first; the rest is best effort)
        traceback.print_exc()
    obj[FRAME_ERROR] = message
    try:
        _status_bar(f"Neural ROM: {message}")
        if bpy.app.timers.is_registered(_clear_status_bar):
            bpy.app.timers.unregister(_clear_status_bar)
        bpy.app.timers.register(_clear_status_bar, first_interval=STATUS_SECONDS)
    except (AttributeError, RuntimeError, ValueError):  # no UI: the terminal line stays
        pass
    return message


def frame_done(obj: bpy.types.Object, what: str) -> None:
    """``what`` updated ``obj``: forget an earlier failure of that mode (another mode's
    stays: a comparison shown again after a failed simulation must not hide why)."""
    if str(obj.get(FRAME_ERROR, "")).startswith(f"{what} of "):
        del obj[FRAME_ERROR]
