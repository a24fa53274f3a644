"""The one frame-handler module: what Blender runs when the frame changes, a file opens or
a file is saved, and the only place that adds or removes the add-on's ``bpy.app.handlers``.

Per frame (:func:`on_frame_change`), in one pass over the scene's objects:

1. bake playback writes the cached frame into every object whose Playback is on
   (:func:`.kinds.fem.bake.apply_frame`: one memmap read, the embedding, one ``foreach_set``);
2. every object whose Simulate is on is driven from its trained model
   (:func:`.simulate.apply_frame`);
3. every comparison shows its frame (:func:`.compare.bake.apply_frame`), unless playback or
   the simulation own the object's vertices.

A frame set by the add-on's own sampling of Blender (:func:`.io.mesh.sample`: the frames a
simulation steps through, a bake's or a job's inputs) is not the user's: the handler stays
out while :func:`.io.mesh.sampling` says so (the re-entry guard, here only). One object's
failure stops that object's mode and says why (:func:`.simulate.frame_failed`), rather than
raising inside Blender's frame change.

On load an older file's settings move into their stage groups (:mod:`.props.migrate`),
then the open bakes, drivers and comparisons of the previous file are forgotten and a
cloth muted by us is muted again while driven; around a save every muted cloth is whole in
the file (:mod:`.kinds.cloth.model`).
"""

from __future__ import annotations

import bpy
from bpy.app.handlers import persistent

from . import props, simulate
from .compare import bake as compare
from .io import mesh as bm
from .kinds.cloth import model as cloth
from .kinds.family import reference
from .kinds.fem import bake as bakes


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph=None) -> None:
    if bm.sampling():
        return  # the add-on sets frames to read Blender: not the user's frame
    # one pass over the scene's objects finds what each mode updates (three passes cost
    # ~3 us a frame on the cape of bench/snp_cloth.py); each mode's own checks follow
    played, driven, compared = [], [], []
    for obj in scene.objects:
        s = getattr(obj, "neural_rom", None)
        if s is None:
            continue
        if s.playback:
            played.append(obj)
        if s.simulate:
            driven.append(obj)
        if obj.get(compare.PROP) is not None:
            compared.append(obj)
    play(scene, played)
    simulate_objects(scene, driven)
    show_comparisons(scene, compared)


def play(scene: bpy.types.Scene, objects: list) -> None:
    """Write the bake frame into each of ``objects`` (their Playback is on)."""
    for obj in objects:
        if obj.type != "MESH" or obj.mode == "EDIT":
            continue  # edit mode keeps its own copy of the mesh: writing it would be lost
        try:
            bakes.apply_frame(obj, scene.frame_current)
        except Exception as e:  # noqa: BLE001 (one object's failure must not stop the others)
            simulate.frame_failed(obj, "Playback", e, bakes.stop_playback)
        else:
            simulate.frame_done(obj, "Playback")


def simulate_objects(scene: bpy.types.Scene, objects: list | None = None) -> None:
    """Drive each of ``objects`` (default: the scene's objects whose Simulate is on) to the
    scene's current frame."""
    if objects is None:
        objects = [o for o in scene.objects if getattr(o, "neural_rom", None) is not None]
    for obj in objects:
        s = obj.neural_rom
        if not s.simulate or obj.type != "MESH" or obj.mode == "EDIT":
            continue
        if reference.mesh_edit_pending(obj, simulate._drivers.get(obj.name)):
            continue  # an edited mesh waits for Apply Mesh Edit (addon/kinds/family)
        try:
            simulate.apply_frame(obj, scene)
        except Exception as e:  # noqa: BLE001 (one object's failure must not stop the others)
            simulate.frame_failed(obj, "Simulation", e, simulate.stop_simulation)
        else:
            simulate.frame_done(obj, "Simulation")


def show_comparisons(scene: bpy.types.Scene, objects: list | None = None) -> None:
    """Show the current frame of each comparison (playback and simulation, when turned on
    again, own the object's vertices: its comparison waits). ``objects``: the scene's
    objects with a comparison (default: listed here)."""
    # listed first: a failure removes its ghost from scene.objects (ghosts have no PROP)
    if objects is None:
        objects = [o for o in scene.objects if o.get(compare.PROP) is not None]
    for obj in objects:
        if obj.get(compare.PROP) is None or obj.type != "MESH" or obj.mode == "EDIT":
            continue
        s = obj.neural_rom
        if s.playback or s.simulate:
            continue
        try:
            compare.apply_frame(obj, scene)
        except Exception as e:  # noqa: BLE001 (one object's failure must not stop the others)
            simulate.frame_failed(obj, "Comparison", e, compare.clear_comparison)
        else:
            simulate.frame_done(obj, "Comparison")


def advance(scene: bpy.types.Scene) -> None:
    """Move the timeline on one frame, the handlers running (a poke's steps)."""
    scene.frame_set(scene.frame_current + 1)


def _forget() -> None:
    bakes.forget()
    simulate.forget()
    compare.forget()


@persistent
def on_load(_filepath=None) -> None:
    props.migrate.migrate_file()  # an older file's settings into their stage groups, first
    # bakes and embeddings of the previous file must not be reused by name
    _forget()
    cloth.on_load()  # a Cloth modifier muted by us: again while driven, else given back


@persistent
def on_save_pre(*_args) -> None:
    cloth.on_save_pre()  # the file on disk never has a cloth muted by us


@persistent
def on_save_post(*_args) -> None:
    cloth.on_save_post()


_HANDLERS = (
    (bpy.app.handlers.frame_change_post, on_frame_change),
    (bpy.app.handlers.load_post, on_load),
    (bpy.app.handlers.save_pre, on_save_pre),
    (bpy.app.handlers.save_post, on_save_post),
)

#: where these handlers lived before issue #29 (relative to the package): a registration of
#: an older version in the same Blender session is replaced, not doubled
_OLD_MODULES = ("addon.playback", "addon.cloth")  # move29: keep
_PACKAGE = __name__.rpartition(".addon.")[0]


def _same(h, fn) -> bool:
    """``h`` is ``fn`` of this or an earlier import of the add-on (a reload, an older
    version's module): matched by module and name, not by identity."""
    module = getattr(h, "__module__", None)
    ours = module == fn.__module__ or module in {f"{_PACKAGE}.{m}" for m in _OLD_MODULES}
    return ours and getattr(h, "__name__", None) == fn.__name__


def register_handlers() -> None:
    unregister_handlers(restore=False)
    for handlers, fn in _HANDLERS:
        handlers.append(fn)


def unregister_handlers(*, restore: bool = True) -> None:
    """Remove the handlers, forget what the frames kept and (disabling the add-on, not
    re-registering) give every muted cloth back."""
    for handlers, fn in _HANDLERS:
        for h in [h for h in handlers if _same(h, fn)]:
            handlers.remove(h)
    _forget()
    if restore:
        cloth.release_all()


CLASSES: tuple = ()
