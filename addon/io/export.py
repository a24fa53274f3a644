"""Point caches that play anywhere: a bake, or the reduced simulation stepped over a frame
range, written as a PC2 of the render mesh (local space, sampled under an animated
transform) and wired to a Mesh Cache modifier.

Bake Simulation runs in a worker (:mod:`..core.simjob`): Blender gathers every frame's
inputs and starts the job (:func:`make_simulation_job`); the worker steps the model and
writes the PC2, renamed into place only once complete; the modifier is wired when the job
ends well (:func:`on_simulation_done`). A cancel, a failure or a crash leaves the previous
PC2 and the object as they were."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import bpy
import numpy as np

from ...core.data.files import job_folder
from ...core.engine.track import write_track
from ...core.errors import NeuralRomError
from ...core.jobs.simulate import TRACK_FILE
from .. import jobs, simulate
from ..driver import part_of
from ..kinds.cloth.model import place_after_cloth
from ..kinds.fem.bake import RenderMap, find_bake, stop_playback
from . import mesh as bm
from .paths import cache_dir, scene_of, store_path

MODIFIER_NAME = "Neural ROM Cache"
SIM_MODIFIER_NAME = "Neural ROM Simulation"
SIM_JOB_STEM = "simulate"  # simulate-<8 hex>.job: Bake Simulation's inputs, until it ends


def pc2_destination(obj: bpy.types.Object, path: str | os.PathLike | None, default) -> Path:
    """Where a PC2 of ``obj`` goes: ``path`` (Blender-relative allowed; None:
    ``default(obj)``) with the ``.pc2`` suffix, its folder made; refused with what to do
    when the folder cannot be made."""
    path = Path(bpy.path.abspath(os.fspath(path))) if path is not None else default(obj)
    if path.suffix.lower() != ".pc2":
        path = path.with_suffix(".pc2")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot create {path.parent} ({e.strerror or e}); pick another path."
        ) from e
    return path


def default_pc2_path(obj: bpy.types.Object) -> Path:
    return cache_dir(obj) / f"{bpy.path.clean_name(obj.name)}.pc2"


def export_onnx(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    path: str | os.PathLike | None = None,
    *,
    precision: str = "float32",
) -> dict:
    """Write the object's trained model as an ONNX graph (:mod:`..core.onnxgraph`; default
    ``<cache dir>/<object>.onnx``), after the checks a simulation makes (a model of this
    mesh). Returns the graph's description (inputs, outputs, metadata). Runs here, not in a
    worker: it takes a fraction of a second, and needs the ``onnx`` package in this Python
    (the message says so when it is missing)."""
    from ...core.data.onnx import export_onnx as write_onnx

    model, mesh_hash, _ = simulate.check_model(obj, scene)
    if path is None:
        out = cache_dir(obj) / f"{bpy.path.clean_name(obj.name)}.onnx"
    else:
        out = Path(bpy.path.abspath(os.fspath(path)))
    if out.suffix.lower() != ".onnx":
        out = out.with_suffix(".onnx")
    return write_onnx(model, out, precision=precision, expect_mesh_hash=mesh_hash)


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
    from ...core.data.pc2 import write_pc2

    rec = find_bake(obj, bake_path)
    rm = RenderMap(obj, rec)
    path = pc2_destination(obj, path, default_pc2_path)
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


def make_simulation_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene | None = None,
    path: str | os.PathLike | None = None,
    *,
    frame_start: int | None = None,
    frame_end: int | None = None,
) -> dict:
    """The worker job that simulates ``frame_start..frame_end`` (default: the scene range)
    from rest at the scene's start frame and writes the render mesh as a PC2 (local space)
    at ``path`` (default: :func:`default_sim_pc2_path`), JSON-able.

    Checks the frame range and the model (without loading it), then gathers every frame's
    inputs from the scene start on (:func:`.simulate.gather_inputs`: the object's and the
    colliders' matrices, sampled when animated; the current frame is restored) into the job
    folder (:func:`..core.simjob.write_track`). The viewport's pokes are not baked. The
    object is not changed.

    Returns
    -------
    dict: ``kind`` "simulate", the spec of :func:`..core.simjob.simulate_to_pc2`,
    ``folder`` (the job folder) and ``log_dir``.
    """

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
    own_job = part_of(obj).simulation_job  # a face's, from its sliders or markers
    if own_job is None:  # a kind with its own job checks its own model
        fields = simulate.model_job_fields(obj, scene)  # no model, stale, missing: raises here
    path = pc2_destination(obj, path, default_sim_pc2_path)
    if own_job is not None:
        return own_job(
            obj,
            scene,
            path,
            job_folder(cache_dir(obj), SIM_JOB_STEM),
            start=start,
            end=end,
            read_colliders=simulate.collider_inputs,
        )
    cols = simulate.frame_colliders(obj, scene)
    f0 = int(scene.frame_start)
    if bm.is_animated(obj) or any(bm.is_animated(c) for c in cols):
        mats = bm.sample_matrices(scene, [obj, *cols], range(f0, end + 1))
    else:
        mats = np.broadcast_to(
            np.stack([bm.matrix(o) for o in [obj, *cols]]), (end + 1 - f0, 1 + len(cols), 4, 4)
        )
    folder = job_folder(cache_dir(obj), SIM_JOB_STEM)
    # as its kind reads them (a cloth: its colliders as baked, its own reference frame)
    track = part_of(obj).track(obj, cols, mats, f0)
    inputs = write_track(folder / TRACK_FILE, track)
    return {
        "kind": "simulate",
        **fields,
        "inputs": str(inputs),
        "out": str(path),
        "frame_start": start,
        "frame_end": end,
        "folder": str(folder),
        "log_dir": str(cache_dir(obj) / "logs"),
    }


def discard_simulation_job(job: dict) -> None:
    """Remove a Bake Simulation job's folder (its gathered inputs)."""
    shutil.rmtree(job["folder"], ignore_errors=True)


def on_simulation_done(obj: bpy.types.Object, result: dict) -> dict | None:
    """Wire the PC2 a finished job wrote to the object's Mesh Cache modifier
    (:data:`SIM_MODIFIER_NAME`), stopping Simulate and Play Bake: the modifier shows it.

    A cancelled job wrote nothing (the previous PC2 is as it was): nothing changes, None is
    returned. Otherwise the job's result: ``path``, ``frames``, ``frame_start``, ``step_ms``.
    """
    if not result or result.get("cancelled"):
        return None
    if obj.neural_rom.simulate:
        simulate.stop_simulation(obj)
    if obj.neural_rom.playback:
        stop_playback(obj)
    wire_mesh_cache(obj, Path(result["path"]), int(result["frame_start"]), SIM_MODIFIER_NAME)

    place_after_cloth(obj, SIM_MODIFIER_NAME)  # a cloth's frames show over its Cloth modifier
    return result


def export_simulation_pc2(
    obj: bpy.types.Object,
    path: str | os.PathLike | None = None,
    *,
    frame_start: int | None = None,
    frame_end: int | None = None,
    scene: bpy.types.Scene | None = None,
    context=None,
) -> tuple[Path, dict | None]:
    """Bake the reduced simulation of ``frame_start..frame_end`` to a PC2 in a worker
    (:func:`make_simulation_job`) and wire it to a Mesh Cache modifier when it is written
    (:func:`on_simulation_done`): the headless command's and scripts' one call.

    Returns (path, stats). In ``--background`` the job runs to the end first (a failure
    raises its :class:`..core.jobs.JobError`, a cancel :class:`..core.errors.JobCancelled`
    with the previous PC2 intact) and stats has ``frames`` and ``step_ms`` (mean reduced
    step, ms). Interactively the job runs on in the background and stats is None.
    """
    if jobs.active_jobs(obj.name):
        raise NeuralRomError(f"'{obj.name}' already has a job running; wait for it or cancel it.")
    job = make_simulation_job(obj, scene, path, frame_start=frame_start, frame_end=frame_end)
    name, stats = obj.name, {}

    def done(result: dict) -> None:
        try:
            target = bpy.data.objects.get(name)  # by name: an undo invalidates the old object
            if target is not None:
                stats.update(on_simulation_done(target, result) or {})
        finally:
            discard_simulation_job(job)

    try:
        jobs.start_job(context or bpy.context, job, owner=name, on_done=done)
    except BaseException:
        discard_simulation_job(job)
        raise
    return Path(job["out"]), (stats or None)
