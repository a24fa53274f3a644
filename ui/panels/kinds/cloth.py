"""The Cloth Bake panel of the sidebar (a Deformable mesh with a Cloth modifier): the
settings of Blender's cloth bake, its button, its running job and the selected bake."""

from __future__ import annotations

import bpy

from ....addon.kinds.cloth import model as cloth
from ..common import DeformableSub, deformable
from ..jobs import draw_jobs

#: the stage boxes a cloth shows besides those that show whatever the kind (no tets, FEM
#: bakes or scenario: its data is Blender's own cloth)
STAGES = ("cloth_bake", "model")
#: the button that makes a cloth's training data
DATA_STEP = "Cloth Bake"


def draw_cloth_bake(layout, obj, context) -> None:
    """The Cloth Bake panel of a Deformable mesh with a Cloth modifier."""
    s = obj.neural_rom
    c = s.cloth
    col = layout.column()
    row = col.row(align=True)
    row.prop(c, "frames")
    row.prop(c, "seed")
    col.prop(c, "variants")
    col.prop_search(c, "owner", bpy.data, "objects", icon="OBJECT_DATA")
    col.prop(c, "motion")
    mod = cloth.cloth_modifier(obj)
    if mod is not None:
        pc = mod.point_cache
        col.label(
            text=f"Starts at cache frame {pc.frame_start}, quality {mod.settings.quality}",
            icon="MOD_CLOTH",
        )
    draw_jobs(layout, obj.name, "cloth_bake")
    layout.operator("neural_rom.cloth_bake", icon="MOD_CLOTH")
    layout.template_list("NEURAL_ROM_UL_bakes", "", s, "bakes", s, "active_bake", rows=2)
    rec = s.active_bake_record()
    if rec is None:
        layout.label(text="No cloth bakes yet", icon="INFO")
        return
    box = layout.box()
    box.label(text=f"{rec.frames} frames from frame {rec.frame_start} ({rec.kind})")
    box.label(
        text=f"Status: {rec.status}", icon="CHECKMARK" if rec.status == "complete" else "ERROR"
    )
    if rec.kind == cloth.KIND and cloth.is_stale(obj, rec):
        box.label(text="Stale: the mesh changed, cloth-bake again", icon="ERROR")
    names = [n for n, _ in cloth.collider_specs(obj)]
    kinds = [f"{n} ({k})" for n, k in cloth.collider_specs(obj)]
    box.label(text="Colliders: " + (", ".join(kinds) if names else "none"))
    if c.drawn_from:
        box.label(text=f"Owner motion: {c.drawn_from}")
    if obj.get(cloth.MUTED) is not None:
        box.label(text="Cloth modifier muted while the model drives it", icon="INFO")
    row = layout.row(align=True)
    row.operator("neural_rom.clear_bake", text="Clear", icon="TRASH").all_bakes = False
    row.operator("neural_rom.clear_bake", text="Clear All").all_bakes = True


class NEURAL_ROM_PT_cloth_bake(DeformableSub, bpy.types.Panel):
    bl_label = "Cloth Bake"
    bl_idname = "NEURAL_ROM_PT_cloth_bake"
    stage = "cloth_bake"

    @classmethod
    def shows(cls, obj) -> bool:
        return super().shows(obj) and cloth.is_cloth(obj) and cloth.cloth_modifier(obj) is not None

    def draw(self, context):
        draw_cloth_bake(self.layout, deformable(context), context)


CLASSES = (NEURAL_ROM_PT_cloth_bake,)
