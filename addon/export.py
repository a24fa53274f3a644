"""Point caches that play anywhere: a bake, or the reduced simulation stepped over a frame
range, written as a PC2 of the render mesh (local space, sampled under an animated
transform) and wired to a Mesh Cache modifier."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import bpy
import numpy as np

from ..core.errors import NeuralRomError
from . import blender_mesh as bm
from . import simulate
from .bakes import RenderMap, find_bake, scene_colliders, stop_playback
from .paths import cache_dir, scene_of, store_path

MODIFIER_NAME = "Neural ROM Cache"
SIM_MODIFIER_NAME = "Neural ROM Simulation"


def default_pc2_path(obj: bpy.types.Object) -> Path:
    return cache_dir(obj) / f"{bpy.path.clean_name(obj.name)}.pc2"


def export_pc2(
    obj: bpy.types.Object,
    path: str | os.PathLike | None = None,
    *,
    bake_path: str | os.PathLike | None = None,
) -> Path:
    """Write a bake as a PC2 point cache of the render mesh (local space) and wire it to a
    Mesh Cache modifier (added first in the stack, or updated).

    The object's ``matrix_world`` is sampled per frame when it is animated, so the cache
    plays back in place under an animated transform. Playback, if on, is stopped: the
    modifier now shows the bake.
    """
    from ..core.pc2 import write_pc2

    rec = find_bake(obj, bake_path)
    rm = RenderMap(obj, rec)
    path = Path(bpy.path.abspath(os.fspath(path))) if path is not None else default_pc2_path(obj)
    if path.suffix.lower() != ".pc2":
        path = path.with_suffix(".pc2")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot create {path.parent} ({e.strerror or e}); pick another path."
        ) from e
    scene = scene_of(obj)
    n = rm.n_frames
    if bm.is_animated(obj):
        mats = bm.sample_matrices(scene, [obj], range(rm.frame_start, rm.frame_start + n))[:, 0]
    else:
        mats = np.broadcast_to(bm.matrix(obj), (n, 4, 4))

    def frames() -> Iterator[np.ndarray]:
        for k in range(n):
            yield rm.local(k, mats[k])

    try:
        write_pc2(path, frames(), start_frame=rm.frame_start, sample_rate=1.0)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot write {path} ({e.strerror or e}); pick a writable path."
        ) from e

    if obj.neural_rom.playback:
        stop_playback(obj)
    wire_mesh_cache(obj, path, rm.frame_start, MODIFIER_NAME)
    return path


def wire_mesh_cache(obj: bpy.types.Object, path: Path, frame_start: int, name: str) -> None:
    """Add (or update) a Mesh Cache modifier ``name`` playing the PC2 at ``path`` from
    ``frame_start``, first in the stack."""
    mod = obj.modifiers.get(name)
    if mod is None or mod.type != "MESH_CACHE":
        mod = obj.modifiers.new(name, "MESH_CACHE")
    mod.cache_format = "PC2"
    mod.filepath = store_path(obj, path)
    mod.time_mode = "FRAME"
    mod.play_mode = "SCENE"
    mod.frame_start = float(frame_start)  # cache sample 0 at this scene frame
    mod.frame_scale = 1.0
    mod.deform_mode = "OVERWRITE"
    mod.forward_axis, mod.up_axis = "POS_Y", "POS_Z"  # Blender's own axes: no conversion
    idx = obj.modifiers.find(mod.name)
    if idx > 0:
        obj.modifiers.move(idx, 0)


def default_sim_pc2_path(obj: bpy.types.Object) -> Path:
    return cache_dir(obj) / f"{bpy.path.clean_name(obj.name)}_reduced.pc2"


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

    scene = scene or scene_of(obj)
    start = int(scene.frame_start if frame_start is None else frame_start)
    end = int(scene.frame_end if frame_end is None else frame_end)
    if end < start:
        raise NeuralRomError(f"Frame range {start}..{end} is empty; the end must be >= the start.")
    if start < scene.frame_start:
        raise NeuralRomError(
            f"The simulation starts at rest at the scene's start frame {scene.frame_start}; "
            f"pick a start frame >= {scene.frame_start}."
        )
    d = simulate.Driver(obj, scene)  # a fresh one: the viewport's pokes and cache are not baked
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
    f0 = scene.frame_start
    if bm.is_animated(obj) or any(bm.is_animated(c) for c in cols):
        mats = simulate.sample_matrices(scene, [obj, *cols], range(f0, end + 1))
    else:
        mats = np.broadcast_to(
            np.stack([bm.matrix(o) for o in [obj, *cols]]), (end + 1 - f0, 1 + len(cols), 4, 4)
        )

    def sample(first: int, last: int) -> np.ndarray:
        return np.asarray(mats[first - f0 : last - f0 + 1])

    def frames() -> Iterator[np.ndarray]:
        for f in range(start, end + 1):
            P = d.positions_at(f, obj, scene, sample, colliders=cols, pokes=())
            yield d.local(P, mats[f - f0, 0])

    try:
        write_pc2(path, frames(), start_frame=start, sample_rate=1.0)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot write {path} ({e.strerror or e}); pick a writable path."
        ) from e
    if obj.neural_rom.simulate:
        simulate.stop_simulation(obj)
    if obj.neural_rom.playback:
        stop_playback(obj)
    wire_mesh_cache(obj, path, start, SIM_MODIFIER_NAME)
    steps = d.step_seconds
    return path, {
        "frames": end - start + 1,
        "step_ms": 1000.0 * float(np.mean(steps)) if steps else 0.0,
    }
