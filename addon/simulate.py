"""Interactive reduced simulation: a ``frame_change_post`` handler drives every object
whose Simulate is on from its trained model, with the scene's colliders and pokes.

Scrubbing works like Blender's point cache, in memory (:class:`.framecache.FrameCache`):
the start frame is the rest state; every simulated frame is kept (state + positions);
going back restores a kept frame; going forward simulates from the newest kept frame
before the target. A frame whose inputs changed since it was simulated (a collider moved,
a poke) is simulated again, with every frame after it. A new model, material, tets,
start frame, frame rate or set of colliders rebuilds the driver (:func:`driver_key`);
Reset forgets the frames.

The per-frame work is the reduced step (k x k Newton solves on the cubature sub-mesh),
``U q`` for the positions, the embedding and one ``foreach_set``. A model that stopped
fitting its object turns that object's simulation off and says why (:func:`frame_failed`),
rather than raising inside Blender's frame change.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bpy
import numpy as np

from ..core.errors import CacheError, NeuralRomError
from . import bakes, export, paths, tets
from . import blender_mesh as bm
from .framecache import FrameCache, inputs_digest

# Set while a driver samples other frames (scene.frame_set re-enters the handlers).
_busy = False
# Running pokes, per object name: (grabbed node indices, weights, target (3,) m,
# stiffness N/m, max force N); see operators/poke.py.
_pokes: dict[str, tuple] = {}


def set_poke(name: str, idx, w, target, stiffness: float, max_force: float | None = None) -> None:
    _pokes[name] = (np.asarray(idx), np.asarray(w), np.asarray(target, float), stiffness, max_force)


def clear_poke(name: str) -> None:
    _pokes.pop(name, None)


def scene_colliders(obj: bpy.types.Object, scene: bpy.types.Scene) -> list[bpy.types.Object]:
    return bakes.scene_colliders(obj, scene)


def collider_inputs(colliders: list[bpy.types.Object], mats: np.ndarray | None = None) -> list:
    """core Colliders of the scene's collider objects (at ``mats``, default: now), sized
    and placed the way :func:`bakes.make_bake_job` samples them."""
    from ..core.colliders import Collider

    out = []
    for j, c in enumerate(colliders):
        m = bm.matrix(c) if mats is None else mats[j]
        shape = bm.collider_shape(c, c.neural_rom.collider_shape, m)
        out.append(
            Collider(
                kind=shape["kind"],
                radius=shape["radius"] if shape["kind"] != "plane" else 0.5,
                half_length=shape["half_length"],
                transform=bm.collider_transform(c, shape["centre"], m),
                friction=float(c.neural_rom.collider_friction),
            )
        )
    return out


def _digest(colliders: list, forces: np.ndarray | None, pins: np.ndarray | None = None) -> str:
    arr = np.array(
        [[c.radius, c.half_length, c.friction, *c.transform.ravel()] for c in colliders]
    ).reshape(len(colliders), 19)
    return inputs_digest(arr, forces, pins)


def driver_key(obj: bpy.types.Object, scene: bpy.types.Scene) -> tuple:
    """What the simulated frames depend on, besides the per-frame inputs."""
    s = obj.neural_rom
    path = paths.load_path(s.model.path) if s.model.path else None
    try:
        st = os.stat(path) if path is not None else None
        stamp = (st.st_mtime_ns, st.st_size) if st else None
    except OSError:
        stamp = None
    cols = tuple((c.name, c.neural_rom.collider_shape) for c in scene_colliders(obj, scene))
    return (
        str(path),
        stamp,
        s.tets_hash,
        s.model.mesh_hash,
        int(scene.frame_start),
        bakes.scene_dt(scene),
        tuple(sorted(s.material_values().items())),
        cols,
    )


class Driver:
    """The reduced simulation of one object, its frame cache and its render mapping.

    Raises (on construction) a :class:`NeuralRomError` saying what to do when the object
    has no model, the model is missing or belongs to another mesh, or the mesh changed.
    """

    def __init__(self, obj: bpy.types.Object, scene: bpy.types.Scene):
        from ..core.registry import load_simulator

        s = obj.neural_rom
        if not s.model.path:
            raise NeuralRomError(f"'{obj.name}' has no trained model; run Train first.")
        self.name = obj.name
        self.tets = tets.load_tets(obj)  # missing or edited: re-tetrahedralize
        if s.model.tets_hash and s.model.tets_hash != s.tets_hash:
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
        mesh_hash = tets.world_mesh_hash(obj, scene)
        try:
            self.sim, self.model = load_simulator(path, expect_mesh_hash=mesh_hash)
        except CacheError as e:
            raise CacheError(
                f"The model of '{obj.name}' cannot drive it: {e}. (Moving the object after "
                "baking also changes its mesh: put it back, or re-bake and re-train.)"
            ) from e
        rest = self.sim.rest_positions()
        n_render = len(tets.render_world(self.tets, rest))
        if n_render != len(obj.data.vertices):
            raise CacheError(
                f"The model of '{obj.name}' has {n_render} render vertices but the mesh has "
                f"{len(obj.data.vertices)}; re-tetrahedralize, re-bake and re-train."
            )
        self.n_nodes = len(rest)
        # pinned tet nodes in object space: they follow the object's animation, as in a bake
        pinned = np.asarray(getattr(self.sim, "pinned", ()), dtype=np.int64)
        self.pins_local = (
            np.asarray(self.tets.mesh.X, dtype=np.float64)[pinned] if pinned.size else None
        )
        self.frame_start = int(scene.frame_start)
        self.key = driver_key(obj, scene)
        self.cache = FrameCache(self.key)
        self.step_seconds: list[float] = []
        self.reset(scene, obj)

    # ------------------------------------------------------------------ inputs
    def inputs(self, obj, scene, mats: np.ndarray | None = None):
        """Colliders, poke forces and pin targets of the frame now, or with the world
        matrices ``mats`` ((1 + colliders, 4, 4): the object's, then its colliders')."""
        colliders = collider_inputs(scene_colliders(obj, scene), None if mats is None else mats[1:])
        forces = None
        poke = _pokes.get(self.name)
        if poke is not None:
            from .framecache import poke_forces

            idx, w, target, k, fmax = poke
            forces = poke_forces(self.sim.positions(), idx, w, target, k, fmax)
        pins = None
        if self.pins_local is not None:
            pins = bm.to_world(self.pins_local, bm.matrix(obj) if mats is None else mats[0])
        return colliders, forces, pins

    # ----------------------------------------------------------------- frames
    def reset(self, scene=None, obj=None) -> None:
        """Forget every simulated frame; the start frame is the rest state."""
        self.sim.reset()
        self.cache.invalidate()
        digest = ""
        if scene is not None and obj is not None:
            digest = _digest(*self.inputs(obj, scene))
        self.cache.put(self.frame_start, self.sim.get_state(), self.sim.positions(), digest)

    def positions_at(
        self,
        frame: int,
        obj,
        scene,
        sample: Callable[[int, int, object, object], np.ndarray | None] | None = None,
    ) -> np.ndarray:
        """(n, 3) world tet-node positions at scene ``frame``, simulating what is missing.

        Without ``sample``, the frame's colliders and pins are the scene's now, and the
        frames stepped on the way are sampled with :func:`blender_mesh.sample_matrices` when
        the object or a collider is animated. ``sample(first, last, obj, scene)`` instead
        gives the matrices of the object and its colliders for frames first..last
        ((count, 1 + colliders, 4, 4)).
        """
        from ..core.sim import FrameInputs

        frame = int(frame)
        if frame <= self.frame_start:
            return self.cache.get(self.frame_start).positions
        if sample is None:
            now = self.inputs(obj, scene)
        else:
            now = self.inputs(obj, scene, sample(frame, frame, obj, scene)[0])
        hit = self.cache.get(frame)
        if hit is not None and hit.inputs == _digest(*now):
            self.sim.set_state(hit.state)
            return hit.positions
        self.cache.invalidate(frame)  # inputs changed there: this frame and later are stale
        first = self.cache.latest_at_or_before(frame - 1)
        self.sim.set_state(self.cache.get(first).state)
        mats = None
        if frame - 1 > first:
            mats = (sample or self._sample)(first + 1, frame - 1, obj, scene)
        for f in range(first + 1, frame + 1):
            if f == frame:
                cols, forces, pins = now
            else:
                cols, forces, pins = self.inputs(
                    obj, scene, None if mats is None else mats[f - first - 1]
                )
            t0 = time.perf_counter()
            self.sim.step(FrameInputs(forces=forces, colliders=cols, pin_targets=pins))
            self.step_seconds.append(time.perf_counter() - t0)
            self.cache.put(
                f, self.sim.get_state(), self.sim.positions(), _digest(cols, forces, pins)
            )
        return self.cache.get(frame).positions

    @staticmethod
    def _sample(first: int, last: int, obj, scene) -> np.ndarray | None:
        global _busy
        objs = [obj, *scene_colliders(obj, scene)]
        if not any(bm.is_animated(o) for o in objs):
            return None
        _busy, was = True, _busy
        try:
            return bm.sample_matrices(scene, objs, range(first, last + 1))
        finally:
            _busy = was

    def local(self, P: np.ndarray, matrix_world: np.ndarray) -> np.ndarray:
        """Render-mesh local positions of (n, 3) world tet-node positions."""
        if self.tets.embedding is not None:
            # barycentric rows sum to 1, so the affine map commutes with the embedding:
            # transform the (few) cage nodes rather than the (many) render vertices
            return tets.render_world(self.tets, bm.to_local(P, matrix_world))
        return bm.to_local(tets.render_world(self.tets, P), matrix_world)


_drivers: dict[str, Driver] = {}


def forget(name: str | None = None) -> None:
    if name is None:
        _drivers.clear()
        _pokes.clear()
    else:
        _drivers.pop(name, None)


def driver(obj: bpy.types.Object, scene: bpy.types.Scene) -> Driver:
    """The object's driver, rebuilt when what its frames depend on changed."""
    d = _drivers.get(obj.name)
    if d is not None and d.key == driver_key(obj, scene):
        return d
    d = Driver(obj, scene)
    _drivers[obj.name] = d
    return d


def apply_frame(
    obj: bpy.types.Object, scene: bpy.types.Scene, frame: int | None = None
) -> np.ndarray:
    """Write the simulated frame (default: the current one) into the mesh; returns the
    (n, 3) world tet-node positions."""
    d = driver(obj, scene)
    P = d.positions_at(scene.frame_current if frame is None else frame, obj, scene)
    bm.set_positions(obj.data, d.local(P, bm.matrix(obj)))
    return P


def start_simulation(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> Driver:
    """Make the mesh follow its reduced simulation as the timeline moves.

    Validates the model first, then saves the rest shape and shows the current frame.
    """
    scene = scene or paths.scene_of(obj)
    if obj.type != "MESH":
        raise NeuralRomError(f"'{obj.name}' is not a mesh.")
    if obj.data.shape_keys is not None:
        raise NeuralRomError(
            f"'{obj.name}' has shape keys, which override the vertex positions the simulation "
            "writes; use Bake Simulation instead (its Mesh Cache modifier plays over shape keys)."
        )
    _drivers.pop(obj.name, None)
    d = driver(obj, scene)  # raises before anything changes
    if obj.neural_rom.playback:
        bakes.stop_playback(obj)
    bm.store_rest(obj.data)
    obj.neural_rom.simulate = True
    apply_frame(obj, scene)
    return d


def stop_simulation(obj: bpy.types.Object) -> None:
    """Stop the simulation and put the rest shape back."""
    obj.neural_rom.simulate = False
    clear_poke(obj.name)
    _drivers.pop(obj.name, None)
    if obj.type == "MESH":
        bm.restore_rest(obj.data)


def reset_simulation(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> None:
    """Forget the simulated frames (the next frame change simulates from rest)."""
    scene = scene or paths.scene_of(obj)
    d = _drivers.get(obj.name)
    if d is not None:
        d.reset(scene, obj)
    if obj.neural_rom.simulate:
        apply_frame(obj, scene)


# --------------------------------------------------------------------------------------
# Bake the reduced simulation to PC2


def default_sim_pc2_path(obj: bpy.types.Object) -> Path:
    return paths.cache_dir(obj) / f"{bpy.path.clean_name(obj.name)}_reduced.pc2"


def export_simulation_pc2(
    obj: bpy.types.Object,
    path: str | os.PathLike | None = None,
    *,
    frame_start: int | None = None,
    frame_end: int | None = None,
    scene: bpy.types.Scene | None = None,
) -> tuple[Path, dict]:
    """Simulate ``frame_start..frame_end`` (default: the scene range) from rest at the
    scene's start frame and write the render mesh as a PC2 (local space), wired to a
    Mesh Cache modifier. Simulation, if on, is stopped: the modifier shows the result.

    Returns (path, stats) with ``frames`` and ``step_ms`` (mean reduced step, ms).
    """
    from ..core.pc2 import write_pc2

    scene = scene or paths.scene_of(obj)
    start = int(scene.frame_start if frame_start is None else frame_start)
    end = int(scene.frame_end if frame_end is None else frame_end)
    if end < start:
        raise NeuralRomError(f"Frame range {start}..{end} is empty; the end must be >= the start.")
    if start < scene.frame_start:
        raise NeuralRomError(
            f"The simulation starts at rest at the scene's start frame {scene.frame_start}; "
            f"pick a start frame >= {scene.frame_start}."
        )
    d = Driver(obj, scene)  # a fresh one: the viewport's pokes and cache are not baked
    _pokes_saved = _pokes.pop(obj.name, None)
    path = (
        Path(bpy.path.abspath(os.fspath(path))) if path is not None else default_sim_pc2_path(obj)
    )
    if path.suffix.lower() != ".pc2":
        path = path.with_suffix(".pc2")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot create {path.parent} ({e.strerror or e}); pick another path."
        ) from e
    cols = scene_colliders(obj, scene)
    animated = bm.is_animated(obj) or any(bm.is_animated(c) for c in cols)
    global _busy
    if animated:
        _busy, was = True, _busy
        try:
            mats = bm.sample_matrices(scene, [obj, *cols], range(scene.frame_start, end + 1))
        finally:
            _busy = was
    else:
        mats = np.broadcast_to(
            np.stack([bm.matrix(o) for o in [obj, *cols]]),
            (end + 1 - scene.frame_start, 1 + len(cols), 4, 4),
        )
    f0 = scene.frame_start

    def sample(first, last, _obj, _scene):
        return np.asarray(mats[first - f0 : last - f0 + 1])

    def frames() -> Iterator[np.ndarray]:
        for f in range(start, end + 1):
            P = d.positions_at(f, obj, scene, sample=sample)
            yield d.local(P, mats[f - f0, 0])

    try:
        write_pc2(path, frames(), start_frame=start, sample_rate=1.0)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot write {path} ({e.strerror or e}); pick a writable path."
        ) from e
    finally:
        if _pokes_saved is not None:
            _pokes[obj.name] = _pokes_saved
    if obj.neural_rom.simulate:
        stop_simulation(obj)
    if obj.neural_rom.playback:
        bakes.stop_playback(obj)
    export.wire_mesh_cache(obj, path, start, export.SIM_MODIFIER_NAME)
    steps = d.step_seconds
    return path, {
        "frames": end - start + 1,
        "step_ms": 1000.0 * float(np.mean(steps)) if steps else 0.0,
    }


# --------------------------------------------------------------------------------------
# Frame change (called by playback.on_frame_change, the one frame handler)

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


def on_frame_change(scene: bpy.types.Scene) -> None:
    """Drive every object whose Simulate is on to the scene's current frame."""
    if _busy:
        return
    for obj in scene.objects:
        s = getattr(obj, "neural_rom", None)
        if s is None or not s.simulate or obj.type != "MESH" or obj.mode == "EDIT":
            continue
        try:
            apply_frame(obj, scene)
        except Exception as e:  # noqa: BLE001 (one object's failure must not stop the others)
            frame_failed(obj, "Simulation", e, stop_simulation)
        else:
            frame_done(obj, "Simulation")
