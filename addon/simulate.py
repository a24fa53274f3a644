"""Interactive reduced simulation: the one frame handler (:func:`.frames.on_frame_change`)
drives every object whose Simulate is on from its trained model, with the scene's colliders,
pins and pokes.

The per-frame path reads straight through (:func:`.frames.simulate_objects` ->
:func:`apply_frame`):

1. Blender gathers the frame's inputs once (:func:`apply_frame` reads the world matrices of
   the object and its colliders, the object's :class:`.driver.Driver` their boxes through
   its kind, and the running poke, :func:`set_poke`);
2. core steps (:class:`..core.engine.Engine`): its timeline scrubs like Blender's point
   cache, in memory (going back restores a kept frame, going forward steps the frames in
   between, sampled from Blender first, a frame whose inputs changed is simulated again with
   every frame after it);
3. Blender writes the mesh once (:meth:`.driver.Driver.write`, one ``foreach_set``).

Core turns what Blender read into :class:`..core.sim.FrameInputs`: for the frame shown by a
:class:`..core.simjob.FrameReader` (no track built each frame), for Bake Simulation's job
from :func:`gather_inputs`' :class:`..core.simjob.Track` of every frame; the two give the
same inputs to the bit, so the viewport and the baked cache play the same frames. Sliders,
markers and a driving reference frame are fields of the track; :func:`gather_inputs` is
where they are gathered when a method takes them. A new model, material, tets, start frame,
frame rate or set of colliders rebuilds the driver (:func:`driver_key`; a model file
replaced outside Blender is noticed on the start frame, on Start or on Reset);
Reset forgets the frames. A model that
stopped fitting its object turns that object's simulation off and says why
(:func:`frame_failed`), rather than raising inside Blender's frame change.
"""

from __future__ import annotations

from collections.abc import Callable

import bpy
import numpy as np

from ..core.errors import NeuralRomError
from .driver import (
    Driver,
    clear_poke,
    driver_key,
    model_stamps,
    part_of,
    running_pokes,
)
from .driver import check_model as check_model  # the names of before: scripts, tests, bench
from .driver import collider_inputs as collider_inputs
from .driver import frame_colliders as frame_colliders
from .driver import gather_inputs as gather_inputs
from .driver import model_job_fields as model_job_fields
from .driver import model_stamp as model_stamp
from .driver import set_poke as set_poke
from .io import mesh as bm
from .io import paths
from .kinds.cloth import model as cloth
from .kinds.fem import bake as bakes

# the running pokes and the model files' stamps (driver.py), by their names of before
_pokes = running_pokes
_stamps = model_stamps
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
    d = Driver(obj, scene)  # of the object's kind, its key with that kind's colliders
    _drivers[obj.name] = d
    return d


def apply_frame(
    obj: bpy.types.Object, scene: bpy.types.Scene, frame: int | None = None
) -> np.ndarray:
    """Write the simulated frame (default: the current one) into the mesh; returns the
    (n, 3) world tet-node positions."""
    d = _drivers.get(obj.name)  # its kind resolved when its driver was built, not per frame
    part = part_of(obj) if d is None else d.part
    colliders = part.colliders(obj, scene)
    d = driver(obj, scene, colliders)
    if d.part is not part:  # rebuilt for a model of another kind: that kind's colliders
        colliders = d.part.colliders(obj, scene)
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
    scene = scene or paths.scene_of(obj)
    if obj.type != "MESH":
        raise NeuralRomError(f"'{obj.name}' is not a mesh.")
    part = part_of(obj)
    if obj.data.shape_keys is not None and not part.over_shape_keys:
        raise NeuralRomError(
            f"'{obj.name}' has shape keys, which override the vertex positions the simulation "
            "writes; use Bake Simulation instead (its Mesh Cache modifier plays over shape keys)."
        )
    _drivers.pop(obj.name, None)
    clear_poke(obj.name)
    d = driver(obj, scene)  # raises before anything changes
    if obj.neural_rom.playback:
        bakes.stop_playback(obj)
    part.show(obj)  # a face: shown by a modifier, the shape keys stay as they are
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
    part_of(obj).hide(obj)
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
