"""Compare with Bake: the reduced model replays a bake's scenario on the object while a
ghost object ("<name> (full space)") plays the full-space bake beside it (or over it), and
the per-vertex error colours the object, frame by frame.

The replay and the errors are :mod:`..core.compare` (the same replay as training's
validation rollout). What is compared is kept on the object as an ID property
(:data:`PROP`: the bake, the ghost, the error summary), so it saves with the .blend and
undo takes it back; the replayed frames are kept in memory (:data:`_results`) and
replayed again when missing (a reloaded file) or stale (a new model, a re-bake).

Per frame (:func:`on_frame_change`, called by the one frame handler in
:mod:`.playback`): the reduced render positions go into the object, the bake's into the
ghost, and the error into two point attributes of the object's mesh: ``nrom_error``
(float, metres, for shaders) and ``nrom_error_color`` (a blue -> red ramp scaled to the
largest error over all frames; Viewport Shading > Color > Attribute shows it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import bpy
import numpy as np

from ..core.errors import CacheError, NeuralRomError, SimulationError
from . import bakes, paths, simulate, tets
from . import blender_mesh as bm

GHOST_SUFFIX = " (full space)"
ERROR_ATTRIBUTE = "nrom_error"
COLOR_ATTRIBUTE = "nrom_error_color"
PROP = "nrom_compare"  # on the compared object
GHOST_PROP = "nrom_ghost_of"  # on the ghost: the compared object's name
GHOST_GAP = 1.2  # side by side: the ghost sits this many object widths along local +X

# blue -> cyan -> green -> yellow -> red, at error / max error = 0, .25, .5, .75, 1
_RAMP = np.array(
    [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
)


@dataclass
class Comparison:
    """A replayed bake: world render positions of both sides and their distances."""

    key: tuple
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


def _key(obj: bpy.types.Object, rec) -> tuple:
    s = obj.neural_rom
    path = paths.load_path(s.model.path) if s.model.path else None
    try:
        st = os.stat(path) if path is not None else None
        stamp = (st.st_mtime_ns, st.st_size) if st else None
    except OSError:
        stamp = None
    return (
        str(path),
        stamp,
        s.model.mesh_hash,
        str(paths.load_path(rec.path)),
        rec.mesh_hash,
        int(rec.frames),
        int(rec.frame_start),
        s.tets_hash,
        s.source_hash,
    )


def compute(obj: bpy.types.Object, scene: bpy.types.Scene, bake_path: str | None = None):
    """Replay a bake of ``obj`` (default: the active one) with its reduced model.

    Changes nothing. Raises the stages' own "re-bake" / "re-train" errors when the bake or
    the model no longer fits the object, and a :class:`CacheError` when they belong to
    different placements of the mesh.
    """
    from ..core.bake import BakeSpec, setup_scenario
    from ..core.compare import error_stats, replay_bake, vertex_errors

    rec = bakes.find_bake(obj, bake_path)
    rm = bakes.RenderMap(obj, rec)  # stale, missing, foreign bake: "re-bake"
    d = simulate.Driver(obj, scene)  # no model, stale or foreign model: "re-train"
    cache = rm.cache
    if d.model.mesh_hash != cache.mesh_hash:
        raise CacheError(
            f"Bake '{rec.name}' simulates '{obj.name}' at another placement than its model was "
            "trained on (the object moved in between); re-bake, or re-train on this bake."
        )
    spec = BakeSpec.from_dict(cache.meta["spec"])
    _, driver = setup_scenario(np.asarray(cache.X), np.asarray(cache.T), spec)
    try:
        P = replay_bake(d.sim, cache, driver)
    except SimulationError as e:
        raise SimulationError(
            f"The model of '{obj.name}' cannot replay bake '{rec.name}': {e}"
        ) from e
    reduced = np.stack([tets.render_world(d.tets, p) for p in P])
    full = np.stack([rm.world(k) for k in range(len(P))])
    errors = vertex_errors(reduced, full)
    return Comparison(
        _key(obj, rec), int(rec.frame_start), reduced, full, errors, error_stats(errors)
    )


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
    """The object's replayed comparison, replayed again when missing or stale."""
    info = obj.get(PROP)
    if info is None:
        raise NeuralRomError(f"'{obj.name}' is not compared with a bake; run Compare first.")
    bake_path = info.get("bake_path") or None
    rec = bakes.find_bake(obj, bake_path)
    c = _results.get(obj.name)
    if c is None or c.key != _key(obj, rec):
        c = compute(obj, scene, bake_path)
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
) -> Comparison:
    """Replay the active bake (or ``bake_path``) with the reduced model and show both.

    Parameters
    ----------
    placement : "SIDE" (the ghost one object width and a bit along local +X) or "OVERLAY"
    display : "WIRE" or "TRANSPARENT" (the ghost drawn solid with alpha 0.35)

    Everything is checked and replayed before the scene changes. Playback and simulation
    of ``obj`` are stopped: the comparison drives its vertices.
    """
    scene = scene or paths.scene_of(obj)
    if placement not in ("SIDE", "OVERLAY"):
        raise NeuralRomError(f"Unknown placement {placement!r}: use SIDE or OVERLAY.")
    if display not in ("WIRE", "TRANSPARENT"):
        raise NeuralRomError(f"Unknown ghost display {display!r}: use WIRE or TRANSPARENT.")
    if obj.type != "MESH":
        raise NeuralRomError(f"'{obj.name}' is not a mesh.")
    if obj.data.shape_keys is not None:
        raise NeuralRomError(
            f"'{obj.name}' has shape keys, which override the vertex positions the comparison "
            "writes; remove them (or compare on a copy without them)."
        )
    name = obj.name + GHOST_SUFFIX
    taken = bpy.data.objects.get(name)
    if taken is not None and taken.get(GHOST_PROP) != obj.name:
        raise NeuralRomError(
            f"An object named '{name}' already exists and is not a comparison ghost; rename it."
        )
    rec = bakes.find_bake(obj, bake_path)
    c = compute(obj, scene, bake_path)  # raises before anything changes
    s = obj.neural_rom
    if s.simulate:
        simulate.stop_simulation(obj)
    if s.playback:
        bakes.stop_playback(obj)
    bm.store_rest(obj.data)
    ghost = _make_ghost(obj, placement, display)
    st = c.stats
    obj[PROP] = {
        "bake": rec.name,
        "bake_path": rec.path,
        "ghost": ghost.name,
        "placement": placement,
        "display": display,
        "frames": int(st["frames"]),
        "max_error": st["max"],
        "mean_error": st["mean"],
        "rms_error": st["rms"],
    }
    _results[obj.name] = c
    apply_frame(obj, scene)
    return c


def clear_comparison(obj: bpy.types.Object) -> bool:
    """Remove the ghost and the error attributes and put the rest shape back. Returns
    whether there was anything to clear."""
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
    return found


def on_frame_change(scene: bpy.types.Scene) -> None:
    """Show the current frame of every comparison (playback and simulation, when turned on
    again, own the object's vertices: its comparison waits)."""
    if simulate._busy:
        return
    # listed first: a failure removes its ghost from scene.objects (ghosts have no PROP)
    for obj in [o for o in scene.objects if o.get(PROP) is not None]:
        if obj.type != "MESH" or obj.mode == "EDIT":
            continue
        s = obj.neural_rom
        if s.playback or s.simulate:
            continue
        try:
            apply_frame(obj, scene)
        except Exception as e:  # noqa: BLE001 (one object's failure must not stop the others)
            simulate.frame_failed(obj, "Comparison", e, clear_comparison)
        else:
            simulate.frame_done(obj, "Comparison")
