"""Cloth objects in Blender: a mesh with a Cloth modifier as the object of the cloth pipeline
(Cloth Bake -> Train -> Simulate, Bake Simulation, Compare with Bake), next to the FEM one.

An object's training data has a kind (:data:`core.registry.BAKE_KINDS`): its bake records
say which (``rec.kind``), and an object with a Cloth modifier, no tets and no bakes yet is a
cloth object (:func:`data_kind`). A model remembers the kind it learnt from
(``model.kind``), which is what Simulate, Bake Simulation and Compare look at
(:func:`is_cloth_model`).

What differs from the FEM pipeline, and lives here:

* **Bakes** (:func:`.clothbake.make_cloth_bake_job`, :func:`.clothbake.on_cloth_bake_done`):
  the cloth bake job (Blender's own binary in ``--background``) writes to
  ``<cache dir>/<object>/cloth_bakes/cloth_s<seed>_<variant>.nrbake``; its bakes are
  recorded on the object like FEM bakes, with the mesh hash of the cloth's surface
  (:func:`core.clothbake.surface_hash`: its local vertices and faces). A bake whose hash is
  not the mesh's any more is refused with "cloth-bake it again" (:func:`open_cloth_bake`).
* **Simulate** (:class:`.part.ClothPart`): no tets: the model's vertices are the mesh's; the
  frame's inputs are the colliders the bakes recorded (by name, with the shapes they were
  baked as, :func:`colliders`) and the object's own world matrix as the reference frame
  (its owner's motion, a parent's or a bone's, is in it), as the bake recorded them. The
  pinned vertices the bakes recorded (the Cloth modifier's pin group, those Blender holds
  fixed) hang rigidly from that frame (:meth:`core.methods.snp.SNPSimulation.positions`).
* **The Cloth modifier is muted while the model drives the mesh** (simulation, playback of a
  bake, a comparison) and restored as it was when the last of them stops (:func:`hold`,
  :func:`release`: the modifier's own viewport and render switches, recorded on the object
  in :data:`MUTED`). A saved file never has it muted by us (the save handlers restore it for
  the write and mute it again after); a file opened with nothing driving the object gets it
  back (:func:`on_load`, called by the one load handler in :mod:`..frames`); disabling the
  add-on restores every one (:func:`release_all`).
  Bake Simulation's Mesh Cache modifier goes right after the Cloth modifier, so the cached
  frames show over Blender's cloth without muting it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import bpy
import numpy as np

from ....core.data.cache import open_for_training
from ....core.engine.track import Track
from ....core.errors import CacheError, NeuralRomError
from ....core.kinds.cloth import source as cb
from ...io import mesh as bm
from ...io.paths import load_path

KIND = "cloth"
BAKES_DIR = "cloth_bakes"
#: ID property on an object whose Cloth modifier we muted: ``{"modifier", "show_viewport",
#: "show_render"}``, what it was before.
MUTED = "nrom_cloth_muted"


# ------------------------------------------------------------------------------------------
# What an object is
# ------------------------------------------------------------------------------------------


def cloth_modifier(obj: bpy.types.Object):
    """The object's (first) Cloth modifier, or None."""
    if obj is None or obj.type != "MESH":
        return None
    return next((m for m in obj.modifiers if m.type == "CLOTH"), None)


def data_kind(obj: bpy.types.Object) -> str:
    """The kind of training data ``obj`` has or will have (a key of
    :data:`core.registry.BAKE_KINDS`): its bakes' kind; without bakes, "cloth" for a mesh
    with a Cloth modifier and no tets, else "fem"."""
    s = obj.neural_rom
    kinds = {rec.kind or "fem" for rec in s.bakes}
    if len(kinds) == 1:
        return kinds.pop()
    # no bakes, or both kinds (cloth bakes made after tets, or the other way round)
    return KIND if cloth_modifier(obj) is not None and not s.tets_path else "fem"


def claims(obj: bpy.types.Object) -> bool:
    """Whether ``obj`` trains on Blender's cloth (:class:`..BlenderKind`): :func:`data_kind`."""
    return data_kind(obj) == KIND


def is_cloth(obj: bpy.types.Object) -> bool:
    return obj is not None and obj.type == "MESH" and data_kind(obj) == KIND


def is_cloth_model(obj: bpy.types.Object) -> bool:
    """True when the object's model learnt from cloth bakes (it drives the mesh's own
    vertices, no tets)."""
    return obj is not None and obj.neural_rom.model.kind == KIND


def surface_hash(obj: bpy.types.Object) -> str:
    """:func:`core.clothbake.surface_hash` of the mesh's rest vertices (local) and faces:
    what its cloth bakes and its model record."""
    return cb.surface_hash(bm.rest_positions(obj.data), *bm.polygons(obj.data))


def model_mesh(obj: bpy.types.Object, scene: bpy.types.Scene) -> tuple[None, str]:
    """``(None, mesh_hash)`` a model of the object's cloth bakes runs on (its
    :attr:`..BlenderKind.model_mesh`): the mesh's own vertices, no tets."""
    return None, surface_hash(obj)


# ------------------------------------------------------------------------------------------
# Cloth bakes
# ------------------------------------------------------------------------------------------


def open_cloth_bake(obj: bpy.types.Object, rec):
    """Open a recorded cloth bake, refusing with "cloth-bake it again" one whose mesh is
    not the object's any more (:func:`surface_hash`), or that is missing or empty
    (:func:`..core.cache.open_for_training`)."""
    if is_stale(obj, rec):
        raise CacheError(
            f"'{obj.name}' was edited after cloth bake '{rec.name}' was made (its vertices or "
            "faces changed); cloth-bake it again."
        )
    path = load_path(rec.path)
    return open_for_training(
        path, rec.mesh_hash, name=rec.name, noun="Cloth bake", redo="cloth-bake again"
    )


def is_stale(obj: bpy.types.Object, rec) -> bool:
    """Whether a cloth bake record no longer fits the mesh (the panel's warning)."""
    return obj.type != "MESH" or surface_hash(obj) != rec.mesh_hash


# ------------------------------------------------------------------------------------------
# Simulate: the frame's inputs
# ------------------------------------------------------------------------------------------


def collider_specs(obj: bpy.types.Object) -> list[tuple[str, str]]:
    """(name, kind) of the colliders the object's cloth bakes recorded, in their order (the
    model's collider slots)."""
    return list(_specs(obj.neural_rom.cloth.colliders))


@functools.lru_cache(maxsize=64)
def _specs(text: str) -> tuple:
    """:func:`collider_specs` of the recorded JSON, parsed once (the frame handler asks it
    twice a frame; another recording is another text)."""
    return tuple((str(n), str(k)) for n, k in json.loads(text)) if text else ()


def colliders(obj: bpy.types.Object) -> list[bpy.types.Object]:
    """The collider objects of the object's cloth bakes, in the model's slot order; a
    collider that is no longer in the file is left out (the model then sees it out of
    reach)."""
    out = []
    for name, _ in collider_specs(obj):
        col = bpy.data.objects.get(name)
        if col is not None:
            out.append(col)
    return out


def baked_kinds(obj, cols: list) -> list[str]:
    """The shape each collider object of ``cols`` was baked as (its model slot's)."""
    baked = dict(collider_specs(obj))
    return [baked.get(col.name, "sphere") for col in cols]


def track(obj, cols: list, mats: np.ndarray, frame0: int = 0) -> Track:
    """The inputs of a cloth object's frames (:class:`core.simjob.Track`), as its cloth bakes
    recorded them: each collider sized as the kind it was baked as and placed by
    :func:`.blender_mesh.collider_transform`, the object's world matrix as the reference
    frame.

    Parameters
    ----------
    cols : the collider objects (:func:`colliders`)
    mats : (F, 1 + colliders, 4, 4) world matrices per frame, the object's first
    """
    mats = np.asarray(mats, dtype=np.float64)
    kind, radius, half, transform = bm.collider_frames(cols, baked_kinds(obj, cols), mats)
    return Track(
        frame0,
        mats[:, 0],
        kind,
        radius,
        half,
        np.zeros(len(cols)),
        transform,
        reference_frame=cb.rigid(mats[:, 0]),
    )


def check_model(obj: bpy.types.Object) -> tuple[Path, str]:
    """What can be checked of a cloth object's model without loading it: (model path, the
    surface hash it must have). Raises a NeuralRomError saying what to do."""
    s = obj.neural_rom
    if not s.model.path:
        raise NeuralRomError(f"'{obj.name}' has no trained model; run Train first.")
    if cloth_modifier(obj) is None and MUTED not in obj.keys():
        raise NeuralRomError(
            f"'{obj.name}' has no Cloth modifier any more; its cloth model drives a cloth: "
            "add the Cloth modifier back."
        )
    h = surface_hash(obj)
    if s.model.mesh_hash and s.model.mesh_hash != h:
        raise CacheError(
            f"'{obj.name}' was edited after its model was trained (its vertices or faces "
            "changed); cloth-bake it again and re-train."
        )
    path = load_path(s.model.path)
    if not path.is_file():
        raise CacheError(
            f"The model of '{obj.name}' is missing ({path}); train again (or check that the "
            "cache folder moved with the .blend)."
        )
    return path, h


# ------------------------------------------------------------------------------------------
# The Cloth modifier while the model drives the mesh
# ------------------------------------------------------------------------------------------


def driven(obj: bpy.types.Object) -> bool:
    """Whether something of ours writes the object's vertices (simulation, playback of a
    bake, a comparison)."""
    s = obj.neural_rom
    return bool(s.simulate or s.playback or obj.get("nrom_compare") is not None)  # compare.PROP


def hold(obj: bpy.types.Object) -> None:
    """Mute the Cloth modifier of a cloth object (viewport and render), remembering how it
    was (:data:`MUTED`); nothing for other objects or when it is already ours."""
    if MUTED in obj.keys():
        _mute(obj)  # ours already (the user may have switched it back on meanwhile)
        return
    if not (is_cloth(obj) or is_cloth_model(obj)):
        return
    mod = cloth_modifier(obj)
    if mod is None:
        return
    obj[MUTED] = {
        "modifier": mod.name,
        "show_viewport": bool(mod.show_viewport),
        "show_render": bool(mod.show_render),
    }
    _mute(obj)


def _mute(obj: bpy.types.Object) -> None:
    mod = obj.modifiers.get(str(obj[MUTED].get("modifier", "")))
    if mod is not None:
        mod.show_viewport = mod.show_render = False


def _restore(obj: bpy.types.Object, info) -> None:
    mod = obj.modifiers.get(str(info.get("modifier", "")))
    if mod is not None:
        mod.show_viewport = bool(info.get("show_viewport", True))
        mod.show_render = bool(info.get("show_render", True))


def release(obj: bpy.types.Object, *, force: bool = False) -> bool:
    """Give the Cloth modifier back as it was when :func:`hold` muted it, once nothing
    drives the object any more (``force``: now). Returns whether it was given back."""
    info = obj.get(MUTED) if obj is not None else None
    if info is None or (not force and driven(obj)):
        return False
    _restore(obj, info)
    del obj[MUTED]
    return True


def place_after_cloth(obj: bpy.types.Object, name: str) -> None:
    """Move modifier ``name`` right after the object's Cloth modifier (a Mesh Cache of the
    model's frames then shows over Blender's cloth)."""
    mod = cloth_modifier(obj)
    if mod is None or obj.modifiers.get(name) is None:
        return
    cloth_at = obj.modifiers.find(mod.name)
    at = obj.modifiers.find(name)
    # taken out of the stack first: from before the Cloth modifier it lands on its index
    obj.modifiers.move(at, cloth_at + 1 if at > cloth_at else cloth_at)


def _muted_objects() -> list:
    return [o for o in bpy.data.objects if MUTED in o.keys()]


def on_save_pre() -> None:
    """Before a save (:func:`..frames.on_save_pre`): the file on disk never has a cloth muted
    by us (opened without the add-on, it is whole)."""
    for obj in _muted_objects():
        _restore(obj, obj[MUTED])


def on_save_post() -> None:
    """After a save (:func:`..frames.on_save_post`): muted again."""
    for obj in _muted_objects():
        _mute(obj)


def on_load() -> None:
    """After a file is opened (called by :func:`..frames.on_load`): a cloth saved while
    driven is muted again while it still is; otherwise it is whole."""
    for obj in _muted_objects():
        if driven(obj):
            _mute(obj)
        else:
            release(obj, force=True)


def release_all() -> None:
    """Give every Cloth modifier muted by us back (disabling the add-on:
    :func:`..frames.unregister_handlers`)."""
    for obj in _muted_objects():
        release(obj, force=True)
