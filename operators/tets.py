"""Tetrahedralize selected meshes; show or hide a tet preview."""

from __future__ import annotations

import bpy
from bpy.props import BoolProperty

from ..addon import paths, preview, tets
from ..core.errors import NeuralRomError
from ._common import active_object, fail


def _candidates(context) -> list[bpy.types.Object]:
    return [
        o
        for o in context.selected_objects
        if o.type == "MESH" and o.neural_rom.role != "COLLIDER" and not o.neural_rom.preview_of
    ]


class NEURAL_ROM_OT_tetrahedralize(bpy.types.Operator):
    """Tetrahedralize the selected meshes (or a cage around open / non-manifold ones)"""

    bl_idname = "neural_rom.tetrahedralize"
    bl_label = "Tetrahedralize"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return bool(_candidates(context))

    def execute(self, context):
        objs = _candidates(context)
        if not objs:
            return fail(
                self, "Select one or more mesh objects to tetrahedralize (colliders are skipped)."
            )
        try:
            for obj in objs:  # every cache directory usable before any (long) meshing
                paths.cache_dir(obj)
            # mesh everything first: one bad mesh leaves every object as it was
            results = [tets.compute_tets(obj) for obj in objs]
            infos = [tets.store_tets(obj, r) for obj, r in zip(objs, results)]
        except NeuralRomError as e:
            return fail(self, str(e))
        text = ", ".join(
            f"{o.name}: {i['n_tets']} tets" + (" (cage)" if i["embedded"] else "")
            for o, i in zip(objs, infos)
        )
        for o, i in zip(objs, infos):
            for w in i["warnings"]:
                self.report({"WARNING"}, f"{o.name}: {w}")
        self.report({"INFO"}, f"Tetrahedralized {text}")
        return {"FINISHED"}


class NEURAL_ROM_OT_preview_tets(bpy.types.Operator):
    """Show the active object's tets as a wireframe object (optionally cut away in half)"""

    bl_idname = "neural_rom.preview_tets"
    bl_label = "Preview Tets"
    bl_options = {"REGISTER", "UNDO"}

    cutaway: BoolProperty(
        name="Cut Away",
        default=False,
        description="Keep only the tets beyond the centre along local X, to see inside",
    )

    @classmethod
    def poll(cls, context):
        obj = active_object(context)
        return obj is not None and bool(getattr(obj.neural_rom, "tets_path", ""))

    def execute(self, context):
        obj = active_object(context)
        if obj is None or not obj.neural_rom.tets_path:
            return fail(self, "The active object has no tets; run Tetrahedralize first.")
        try:
            prev = preview.build_preview(obj, cutaway=self.cutaway)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Tet preview '{prev.name}' ({obj.neural_rom.tets_count} tets)")
        return {"FINISHED"}


class NEURAL_ROM_OT_clear_preview(bpy.types.Operator):
    """Remove the active object's tet preview"""

    bl_idname = "neural_rom.clear_preview"
    bl_label = "Remove Tet Preview"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        obj = active_object(context)
        if obj is None:
            return fail(self, "No active object.")
        if obj.neural_rom.preview_of:  # the preview itself is active
            obj = bpy.data.objects.get(obj.neural_rom.preview_of) or obj
        if not preview.remove_preview(obj):
            return fail(self, f"'{obj.name}' has no tet preview.")
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_tetrahedralize, NEURAL_ROM_OT_preview_tets, NEURAL_ROM_OT_clear_preview)
