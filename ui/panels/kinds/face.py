"""The Face box of the sidebar: the skin's skull and jaw, Set Up Face, what it built, and
how the trained face is driven (sliders, markers)."""

from __future__ import annotations

import bpy

from ....addon.kinds.face import face
from ..jobs import draw_jobs

#: the stage boxes a face shows besides its Face box and those that show whatever the kind
#: (it trains on its face file: no tets, bakes or scenario)
STAGES = ("model",)


def _skin(context):
    """The active object when it is a Deformable mesh (a skin can be set up as a face)."""
    obj = getattr(context, "object", None)
    if obj is not None and obj.type == "MESH" and obj.neural_rom.role == "DEFORMABLE":
        return obj
    return None


def draw_face(layout, obj, scene) -> None:
    f = obj.neural_rom.face
    draw_jobs(layout, obj.name)
    col = layout.column()
    col.prop(f, "skull")
    col.prop(f, "jaw")
    col.prop(f, "spacing")
    col.operator("neural_rom.set_up_face", icon="USER")
    if not f.path:
        col.label(text="Shape keys are the expressions;", icon="INFO")
        col.label(text="'jaw20' in a name: jaw 20° open,")
        col.label(text="'heldout': kept out of training")
        layout.operator("neural_rom.add_demo_head", icon="MONKEY")
        return
    box = layout.box()
    box.label(
        text=f"{f.tets} tets, {f.nodes} nodes ({f.used_spacing * 1000:.1f} mm)", icon="CHECKMARK"
    )
    box.label(text=f"Skull {f.skull_nodes} nodes, jaw {f.jaw_nodes} nodes")
    box.label(text=f"{f.keys} shape keys, {f.held_out} held out")
    if obj.neural_rom.model.path:
        for line in face.fit_lines(obj):
            box.label(text=line)
    if not obj.neural_rom.model.path:
        return
    col = layout.column()
    col.prop(f, "drive", expand=True)
    col.prop(f, "solve", expand=True)
    if f.drive == "SLIDERS":
        names = [k for k in obj.keys() if k.startswith(face.SLIDER_PREFIX)]
        for name in sorted(names, key=lambda n: int(n[len(face.SLIDER_PREFIX) :])):
            col.prop(obj, f'["{name}"]', text=f"Latent {name[len(face.SLIDER_PREFIX) :]}")
        col.operator("neural_rom.pose_from_key", icon="SHAPEKEY_DATA")
        col.operator("neural_rom.fit_key", text="Fit Sliders to Active Key", icon="SHAPEKEY_DATA")
        fitted = obj.get(face.FIT_KEY_PROP)
        if fitted:
            col.label(text=f"'{fitted['key']}': {fitted['mean_mm']:.3g} mm mean error")
    else:
        col.prop(f, "jaw_drive", expand=True)
        col.prop(f, "head_from_markers")
        markers = face.markers_of(obj, scene)
        col.label(text=f"{len(markers)} markers", icon="EMPTY_AXIS")
    col.operator_menu_enum(
        "neural_rom.add_markers", "layout", text="Add Markers", icon="EMPTY_AXIS"
    )


class NEURAL_ROM_PT_face(bpy.types.Panel):
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Neural ROM"
    bl_parent_id = "NEURAL_ROM_PT_main"
    bl_label = "Face"
    bl_idname = "NEURAL_ROM_PT_face"
    bl_options = {"DEFAULT_CLOSED"}

    @classmethod
    def poll(cls, context):
        return _skin(context) is not None

    def draw(self, context):
        draw_face(self.layout, _skin(context), context.scene)


CLASSES = (NEURAL_ROM_PT_face,)
