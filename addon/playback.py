"""Viewport playback of bakes: a ``frame_change_post`` handler that writes the cached frame
into every object whose playback is on, then drives every object whose reduced
simulation is on (:func:`.simulate.on_frame_change`).

The per-frame work is one memmap read, the embedding (a sparse matrix product) and one
``foreach_set``; the open bake and embedding are kept between frames
(:func:`bakes.render_map`). A bake that stopped fitting its object (edited mesh, new
tets, deleted files) turns that object's playback off and says why
(:func:`.simulate.frame_failed`), rather than raising inside Blender's frame change.
"""

from __future__ import annotations

import bpy
from bpy.app.handlers import persistent

from . import simulate
from .compare import bake as compare
from .kinds.cloth import model as cloth
from .kinds.fem import bake as bakes


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph=None) -> None:
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
    for obj in played:
        if obj.type != "MESH" or obj.mode == "EDIT":
            continue  # edit mode keeps its own copy of the mesh: writing it would be lost
        try:
            bakes.apply_frame(obj, scene.frame_current)
        except Exception as e:  # noqa: BLE001 (one object's failure must not stop the others)
            simulate.frame_failed(obj, "Playback", e, bakes.stop_playback)
        else:
            simulate.frame_done(obj, "Playback")
    simulate.on_frame_change(scene, driven)
    compare.on_frame_change(scene, compared)


@persistent
def on_load(_filepath=None) -> None:
    # bakes and embeddings of the previous file must not be reused by name
    bakes.forget()
    simulate.forget()
    compare.forget()
    cloth.on_load()  # a Cloth modifier muted by us: again while driven, else given back


_HANDLERS = (
    (bpy.app.handlers.frame_change_post, on_frame_change),
    (bpy.app.handlers.load_post, on_load),
)


def _same(h, fn) -> bool:
    # match by module and name, so a handler from an earlier import (reload) is replaced too
    return (
        getattr(h, "__module__", None) == fn.__module__
        and getattr(h, "__name__", None) == fn.__name__
    )


def register_handlers() -> None:
    unregister_handlers()
    for handlers, fn in _HANDLERS:
        handlers.append(fn)


def unregister_handlers() -> None:
    for handlers, fn in _HANDLERS:
        for h in [h for h in handlers if _same(h, fn)]:
            handlers.remove(h)
    bakes.forget()
    simulate.forget()
    compare.forget()


CLASSES: tuple = ()
