"""Compare with Bake: the reduced model replays a bake's scenario on the object while a
ghost object ("<name> (full space)") plays the full-space bake beside it (or over it), and
the per-vertex error colours the object, frame by frame.

The replay and the errors run in a worker (:mod:`..core.comparejob`, the same replay as
training's validation rollout, :func:`..core.compare.replay_bake`): Blender checks what it
can without the model and starts the job (:func:`make_compare_job`); the worker writes the
replayed frames and errors to a result file in the object's cache directory
(``compare/<bake>.npz``, atomically); when the job ends well the ghost and the error
attributes are made from it (:func:`on_compare_done`). A cancel, a failure or a crash
leaves the scene and any earlier comparison as they were.

What is compared is kept on the object as an ID property (:data:`PROP`: the bake, the
ghost, the result file, the error summary), so it saves with the .blend and undo takes it
back; the result is kept in memory (:data:`_results`) and read again from its file when
missing (a reloaded file). A result whose model or bake changed since (a new model, a
re-bake) is out of date: the comparison stops and says to compare again.

Per frame (:func:`apply_frame`, called by the one frame handler's
:func:`..frames.show_comparisons`): the reduced render positions go into the object, the
bake's into the ghost, and the error into two point attributes of the object's mesh: ``nrom_error``
(float, metres, for shaders) and ``nrom_error_color`` (a blue -> red ramp scaled to the
largest error over all frames; Viewport Shading > Color > Attribute shows it).

The headless ``compare`` command (:mod:`.cli`) runs the same job without showing it
(``make_compare_job(..., show=False)``) on the bakes :func:`bake_roles` and
:func:`bakes_to_compare` pick from the model file's record of its training split.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import bpy
import numpy as np

from ...core.data.modelfile import read_metadata
from ...core.errors import CacheError, NeuralRomError
from ...core.jobs.compare import read_result
from .. import jobs, simulate
from ..io import mesh as bm
from ..io import paths
from ..kinds.cloth.model import hold, release
from ..kinds.fem import bake as bakes

GHOST_SUFFIX = " (full space)"
ERROR_ATTRIBUTE = "nrom_error"
COLOR_ATTRIBUTE = "nrom_error_color"
PROP = "nrom_compare"  # on the compared object
GHOST_PROP = "nrom_ghost_of"  # on the ghost: the compared object's name
GHOST_GAP = 1.2  # side by side: the ghost sits this many object widths along local +X
RESULT_DIR = "compare"  # in the object's cache directory: one result file per bake
PLACEMENTS = ("SIDE", "OVERLAY")
DISPLAYS = ("WIRE", "TRANSPARENT")

# blue -> cyan -> green -> yellow -> red, at error / max error = 0, .25, .5, .75, 1
_RAMP = np.array(
    [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
)


@dataclass
class Comparison:
    """A replayed bake: world render positions of both sides and their distances."""

    key: str
    frame_start: int  # scene frame of bake frame 0
    reduced: np.ndarray  # (F, r, 3) m, the reduced model
    full: np.ndarray  # (F, r, 3) m, the bake
    errors: np.ndarray  # (F, r) m
    stats: dict  # core.compare.error_stats

    def index(self, scene_frame: int) -> int:
        """Bake frame shown at ``scene_frame`` (held at the ends, like playback)."""
        return int(np.clip(scene_frame - self.frame_start, 0, len(self.errors) - 1))


_results: dict[str, Comparison] = {}


def forget(name: str | None = None) -> None:
    if name is None:
        _results.clear()
    else:
        _results.pop(name, None)


def error_colors(errors: np.ndarray, max_error: float) -> np.ndarray:
    """(r, 4) RGBA of (r,) errors (m) on the blue -> red ramp, red at ``max_error``."""
    e = np.asarray(errors, dtype=np.float64)
    t = np.clip(e / max_error, 0.0, 1.0) if max_error > 0 else np.zeros(len(e))
    stops = np.linspace(0.0, 1.0, len(_RAMP))
    rgb = np.stack([np.interp(t, stops, _RAMP[:, c]) for c in range(3)], axis=1)
    return np.concatenate([rgb, np.ones((len(rgb), 1))], axis=1)


def _key(obj: bpy.types.Object, rec) -> str:
    """What a comparison depends on (the model file and the bake), as a JSON string."""
    s = obj.neural_rom
    path = paths.load_path(s.model.path) if s.model.path else None
    try:
        st = os.stat(path) if path is not None else None
        stamp = [st.st_mtime_ns, st.st_size] if st else None
    except OSError:
        stamp = None
    return json.dumps(
        [
            str(path),
            stamp,
            s.model.mesh_hash,
            str(paths.load_path(rec.path)),
            rec.mesh_hash,
            int(rec.frames),
            int(rec.frame_start),
            s.tets_hash,
            s.source_hash,
        ]
    )


def result_path(obj: bpy.types.Object, rec) -> Path:
    """Where the comparison of ``obj`` with bake ``rec`` is written."""
    return paths.cache_dir(obj) / RESULT_DIR / f"{bpy.path.clean_name(rec.name)}.npz"


def make_compare_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene | None = None,
    *,
    placement: str = "SIDE",
    display: str = "WIRE",
    bake_path: str | None = None,
    show: bool = True,
    model: tuple[str, str] | None = None,
) -> dict:
    """The worker job that replays the active bake (or ``bake_path``) of ``obj`` with its
    reduced model (JSON-able).

    Checks everything it can without loading the model first (the options, the mesh, a
    free ghost name, the bake still fits the object, the model file is there); the worker
    refuses a model of another mesh or placement. Nothing is changed.

    Parameters
    ----------
    placement : "SIDE" (the ghost one object width and a bit along local +X) or "OVERLAY"
    display : "WIRE" or "TRANSPARENT" (the ghost drawn solid with alpha 0.35)
    show : False for a job whose numbers are read but that is not shown (the headless
        ``compare`` command): what only showing needs (no shape keys, a free ghost name)
        is not required
    model : ``(path, method)`` of a model of the object's bakes not recorded on it
        (:func:`.simulate.model_job_fields`; Compare Methods), default the object's

    Returns
    -------
    dict: ``kind`` "compare", the spec of :func:`..core.comparejob.compare_with_bake`,
    ``placement``, ``display``, ``bake_record`` (the bake's stored path) and ``log_dir``.
    """
    scene = scene or paths.scene_of(obj)
    if placement not in PLACEMENTS:
        raise NeuralRomError(f"Unknown placement {placement!r}: use SIDE or OVERLAY.")
    if display not in DISPLAYS:
        raise NeuralRomError(f"Unknown ghost display {display!r}: use WIRE or TRANSPARENT.")
    if obj.type != "MESH":
        raise NeuralRomError(f"'{obj.name}' is not a mesh.")
    if show:
        if obj.data.shape_keys is not None:
            raise NeuralRomError(
                f"'{obj.name}' has shape keys, which override the vertex positions the "
                "comparison writes; remove them (or compare on a copy without them)."
            )
        name = obj.name + GHOST_SUFFIX
        taken = bpy.data.objects.get(name)
        if taken is not None and taken.get(GHOST_PROP) != obj.name:
            raise NeuralRomError(
                f"An object named '{name}' already exists and is not a comparison ghost; rename it."
            )
    rec = bakes.find_bake(obj, bake_path)
    bakes.RenderMap(obj, rec)  # stale, missing, foreign bake: "re-bake"
    fields = simulate.model_job_fields(obj, scene, model)  # no model, stale tets: "re-train"
    return {
        "kind": "compare",
        **fields,
        "bake": str(paths.load_path(rec.path)),
        "bake_name": rec.name,
        "bake_mesh_hash": rec.mesh_hash,
        "bake_record": rec.path,
        "out": str(result_path(obj, rec)),
        "key": _key(obj, rec),
        "placement": placement,
        "display": display,
        "log_dir": str(paths.cache_dir(obj) / "logs"),
    }


#: What a bake was to the object's model (:func:`bake_roles`).
HELD_OUT, TRAINED_ON, NOT_TRAINED_ON = "held out", "trained on", "not trained on"


def _model_split(obj: bpy.types.Object) -> tuple[list[Path], set[int]] | None:
    """The bakes the object's model was trained with (as recorded in the model file:
    ``bakes``) and the indices of those it held out (``validation_trajectories``); None
    when the model file records no split."""
    meta = read_metadata(paths.load_path(obj.neural_rom.model.path))
    given, held = meta.get("bakes"), meta.get("validation_trajectories")
    if not isinstance(given, list) or not isinstance(held, list):
        return None
    return [Path(str(p)) for p in given], {i for i in held if isinstance(i, int)}


def bake_roles(obj: bpy.types.Object) -> dict[str, str] | None:
    """What each of the object's bakes was to its model, by bake name: :data:`HELD_OUT`
    (a validation bake, never trained on), :data:`TRAINED_ON`, or :data:`NOT_TRAINED_ON`
    (baked since, or not given to training). A bake is matched to the model's by path,
    else by file name (the project folder moved). None when the model file records no
    split."""
    return _roles(obj, _model_split(obj))


def _roles(obj: bpy.types.Object, split) -> dict[str, str] | None:
    if split is None:
        return None
    given, held = split
    by_path = {p.resolve(): i for i, p in enumerate(given)}
    names = [p.name for p in given]
    # a moved project: by <object>/bakes/<file> (a model of several objects has bakes of
    # the same file name in each object's folder), else by file name
    tails = [p.parts[-3:] for p in given]
    roles = {}
    for rec in obj.neural_rom.bakes:
        path = paths.load_path(rec.path)
        i = by_path.get(path.resolve())
        if i is None and tails.count(path.parts[-3:]) == 1:
            i = tails.index(path.parts[-3:])
        if i is None and names.count(path.name) == 1:
            i = names.index(path.name)
        roles[rec.name] = NOT_TRAINED_ON if i is None else (HELD_OUT if i in held else TRAINED_ON)
    return roles


def bakes_to_compare(
    obj: bpy.types.Object, scene: bpy.types.Scene | None = None, which: str | None = None
) -> tuple[list[tuple], str]:
    """The bakes of ``obj`` a headless comparison replays, each with its role for the model
    (:func:`bake_roles`, None when unknown), and which ones they are, in words.

    ``which``: a bake's name; ``"all"``; or None: the bakes the model held out from
    training, or every bake when it records none (the words say why).

    Raises a :class:`NeuralRomError` with the panel's message when the object has no bake
    or no usable model (:func:`.simulate.check_model`), or has no bake named ``which``.
    Nothing is changed.
    """
    s = obj.neural_rom
    scene = scene or paths.scene_of(obj)
    if not len(s.bakes):
        raise NeuralRomError(f"'{obj.name}' has no bake; run Bake first.")
    simulate.check_model(obj, scene)  # before the model file is read: the panel's messages
    split = _model_split(obj)
    roles = _roles(obj, split)
    records = list(s.bakes)
    if which not in (None, "all"):
        records = [rec for rec in records if rec.name == which]
        if not records:
            names = ", ".join(rec.name for rec in s.bakes)
            raise NeuralRomError(
                f"'{obj.name}' has no bake named '{which}'; its bakes are {names} "
                "(or pass --bake all)."
            )
        words = f"bake {which}"
    elif which == "all":
        words = "every bake"
    elif roles is None:
        words = "every bake (its model does not record which bakes it held out)"
    elif HELD_OUT in roles.values():
        records = [rec for rec in records if roles[rec.name] == HELD_OUT]
        words = "the bakes its model held out from training"
    elif split[1]:
        words = "every bake (the bakes its model held out are no longer among its bakes)"
    else:
        words = (
            "every bake (its model held none out, so the errors of the bakes it was trained "
            "on are training errors)"
        )
    return [(rec, (roles or {}).get(rec.name)) for rec in records], words


def _read(obj: bpy.types.Object, rec, path: Path) -> Comparison:
    r = read_result(path)
    if r["key"] != _key(obj, rec):
        raise CacheError(
            f"The comparison of '{obj.name}' with bake '{rec.name}' is out of date (the model "
            "or the bake changed since); run Compare with Bake again."
        )
    return Comparison(
        r["key"], int(rec.frame_start), r["reduced"], r["full"], r["errors"], r["stats"]
    )


def on_compare_done(obj: bpy.types.Object, job: dict, result: dict) -> Comparison | None:
    """Show what a finished compare job wrote: the ghost playing the bake, the error
    attributes, the summary on the object (:data:`PROP`). Playback and simulation of ``obj``
    are stopped: the comparison drives its vertices.

    A cancelled job wrote nothing: nothing changes and None is returned.

    Raises
    ------
    CacheError
        The model or the bake changed while the job ran (compare again).
    """
    if not result or result.get("cancelled"):
        return None
    rec = bakes.find_bake(obj, job["bake_record"])
    path = Path(result["path"])
    c = _read(obj, rec, path)  # raises before anything changes
    s = obj.neural_rom
    if s.simulate:
        simulate.stop_simulation(obj)
    if s.playback:
        bakes.stop_playback(obj)
    bm.store_rest(obj.data)
    ghost = _make_ghost(obj, job["placement"], job["display"])

    hold(obj)  # a cloth object's Cloth modifier is muted while the comparison drives it
    st = c.stats
    closest = result.get("closest_max")  # None: a model without closest shapes
    obj[PROP] = {
        "bake": rec.name,
        "bake_path": rec.path,
        "ghost": ghost.name,
        "result": paths.store_path(obj, path),
        "placement": job["placement"],
        "display": job["display"],
        "frames": int(st["frames"]),
        "max_error": st["max"],
        "mean_error": st["mean"],
        "rms_error": st["rms"],
        # the model's closest shapes to the bake's (its PCA projection): the error a perfect
        # replay would still have; the rest of the error is the dynamics'
        "closest_max_error": -1.0 if closest is None else float(closest),
    }
    _results[obj.name] = c
    apply_frame(obj, paths.scene_of(obj))
    return c


def ghost_of(obj: bpy.types.Object) -> bpy.types.Object | None:
    info = obj.get(PROP)
    name = info.get("ghost", "") if info is not None else obj.name + GHOST_SUFFIX
    ghost = bpy.data.objects.get(name)
    if ghost is None or ghost.get(GHOST_PROP) != obj.name:
        return None
    return ghost


def is_comparing(obj: bpy.types.Object) -> bool:
    return obj.get(PROP) is not None


def _make_ghost(obj: bpy.types.Object, placement: str, display: str) -> bpy.types.Object:
    name = obj.name + GHOST_SUFFIX
    me = obj.data.copy()  # its own mesh: the bake's positions are written into it
    me.name = name
    for a in (bm.REST_ATTRIBUTE, ERROR_ATTRIBUTE, COLOR_ATTRIBUTE):
        if a in me.attributes:
            me.attributes.remove(me.attributes[a])
    ghost = bpy.data.objects.get(name)
    if ghost is None:
        ghost = bpy.data.objects.new(name, me)
        for coll in obj.users_collection:
            coll.objects.link(ghost)
    else:
        old = ghost.data
        ghost.data = me
        if old is not None and old.users == 0:
            bpy.data.meshes.remove(old)
    ghost[GHOST_PROP] = obj.name
    ghost.parent = obj  # follows the object; positions are written in its local space
    ghost.matrix_parent_inverse.identity()
    ghost.matrix_basis.identity()
    if placement == "SIDE":
        X = bm.rest_positions(obj.data)
        width = float(X[:, 0].max() - X[:, 0].min()) if len(X) else 0.0
        ghost.location = (GHOST_GAP * width, 0.0, 0.0)
    ghost.hide_render = True
    ghost.hide_select = True
    ghost.show_wire = True
    if display == "WIRE":
        ghost.display_type = "WIRE"
        ghost.color = (1.0, 1.0, 1.0, 1.0)
        ghost.show_transparent = False
    else:  # semi-transparent in Solid mode (Viewport Shading > Color > Object)
        ghost.display_type = "SOLID"
        ghost.color = (0.8, 0.8, 0.8, 0.35)
        ghost.show_transparent = True
    return ghost


def _write_errors(mesh: bpy.types.Mesh, errors: np.ndarray, max_error: float) -> None:
    a = mesh.attributes.get(ERROR_ATTRIBUTE)
    if a is None or a.data_type != "FLOAT" or a.domain != "POINT":
        if a is not None:
            mesh.attributes.remove(a)
        a = mesh.attributes.new(ERROR_ATTRIBUTE, "FLOAT", "POINT")
    a.data.foreach_set("value", np.ascontiguousarray(errors, dtype=np.float32))
    c = mesh.color_attributes.get(COLOR_ATTRIBUTE)
    if c is None or c.data_type != "FLOAT_COLOR" or c.domain != "POINT":
        if c is not None:
            mesh.color_attributes.remove(c)
        c = mesh.color_attributes.new(COLOR_ATTRIBUTE, "FLOAT_COLOR", "POINT")
    c.data.foreach_set("color", error_colors(errors, max_error).astype(np.float32).ravel())
    if mesh.color_attributes.active_color_name != COLOR_ATTRIBUTE:
        mesh.color_attributes.active_color = c
        mesh.color_attributes.render_color_index = mesh.color_attributes.active_color_index
    mesh.update()


def result(obj: bpy.types.Object, scene: bpy.types.Scene) -> Comparison:
    """The object's comparison, read again from its result file when not in memory.

    Raises a :class:`NeuralRomError` saying what to do when the bake is gone, the result
    file is missing, or the model or the bake changed since the comparison was made.
    """
    info = obj.get(PROP)
    if info is None:
        raise NeuralRomError(f"'{obj.name}' is not compared with a bake; run Compare first.")
    bake_path = info.get("bake_path") or None
    rec = bakes.find_bake(obj, bake_path)
    c = _results.get(obj.name)
    if c is None or c.key != _key(obj, rec):
        stored = info.get("result") or ""
        if not stored:
            raise CacheError(
                f"The comparison of '{obj.name}' has no result file; run Compare with Bake again."
            )
        c = _read(obj, rec, paths.load_path(stored))
        _results[obj.name] = c
    return c


def apply_frame(obj: bpy.types.Object, scene: bpy.types.Scene, frame: int | None = None) -> int:
    """Show the compared bake frame at scene ``frame`` (default: the current one): the
    reduced positions and errors on ``obj``, the bake on the ghost. Returns the bake frame."""
    c = result(obj, scene)
    k = c.index(scene.frame_current if frame is None else frame)
    M = bm.matrix(obj)
    # no-op while kept; saved again after Simulate or Play Bake restored it on stopping
    bm.store_rest(obj.data)
    bm.set_positions(obj.data, bm.to_local(c.reduced[k], M))
    _write_errors(obj.data, c.errors[k], c.stats["max"])
    ghost = ghost_of(obj)
    if ghost is not None:
        bm.set_positions(ghost.data, bm.to_local(c.full[k], M))
    return k


def start_comparison(
    obj: bpy.types.Object,
    scene: bpy.types.Scene | None = None,
    *,
    placement: str = "SIDE",
    display: str = "WIRE",
    bake_path: str | None = None,
    context=None,
) -> Comparison | None:
    """Replay the active bake (or ``bake_path``) with the reduced model in a worker
    (:func:`make_compare_job`) and show both when it is done (:func:`on_compare_done`):
    the scripts' and tests' one call.

    Returns the :class:`Comparison` in ``--background``, where the job runs to the end first
    (a failure raises its :class:`..core.jobs.JobError`, a cancel
    :class:`..core.errors.JobCancelled`, the scene as it was); interactively the job runs
    on in the background and None is returned.
    """
    if jobs.active_jobs(obj.name):
        raise NeuralRomError(f"'{obj.name}' already has a job running; wait for it or cancel it.")
    job = make_compare_job(obj, scene, placement=placement, display=display, bake_path=bake_path)
    name, out = obj.name, []

    def done(result: dict) -> None:
        target = bpy.data.objects.get(name)  # by name: an undo invalidates the old object
        if target is not None:
            out.append(on_compare_done(target, job, result))

    jobs.start_job(context or bpy.context, job, owner=name, on_done=done)
    return out[0] if out else None


def clear_comparison(obj: bpy.types.Object) -> bool:
    """Remove the ghost and the error attributes and put the rest shape back. Returns
    whether there was anything to clear. The result file stays (an undo brings the
    comparison back); comparing the same bake again replaces it."""
    ghost = ghost_of(obj)
    found = ghost is not None or is_comparing(obj)
    if ghost is not None:
        me = ghost.data
        bpy.data.objects.remove(ghost)
        if me is not None and me.users == 0:
            bpy.data.meshes.remove(me)
    if obj.type == "MESH":
        me = obj.data
        for a in (ERROR_ATTRIBUTE, COLOR_ATTRIBUTE):
            if a in me.attributes:
                found = True
                me.attributes.remove(me.attributes[a])
        if is_comparing(obj) and not (obj.neural_rom.simulate or obj.neural_rom.playback):
            bm.restore_rest(me)
    if is_comparing(obj):
        del obj[PROP]
    _results.pop(obj.name, None)

    release(obj)
    return found
