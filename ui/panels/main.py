"""The sidebar's main panel (the active object's role; a collider's shape) and the Cache
panel (where every object's files go)."""

from __future__ import annotations

import textwrap

import bpy

from ...addon.io import mesh as bm
from ...addon.io.paths import cache_base
from ...core.errors import NeuralRomError
from .common import Sidebar, active


class NEURAL_ROM_PT_main(Sidebar, bpy.types.Panel):
    bl_label = "Neural ROM"
    bl_idname = "NEURAL_ROM_PT_main"

    def draw(self, context):
        layout = self.layout
        obj = active(context)
        if obj is None:
            layout.label(text="Select an object", icon="INFO")
            layout.operator("neural_rom.add_demo_head", icon="MONKEY")  # an active face to try
            return
        s = obj.neural_rom
        if s.preview_of:
            layout.label(text=f"Tet preview of '{s.preview_of}'", icon="MESH_ICOSPHERE")
            layout.operator("neural_rom.clear_preview", icon="X")
            return
        ghost_of = obj.get("nrom_ghost_of")  # addon.compare.GHOST_PROP
        if ghost_of:
            layout.label(text=f"Full-space bake of '{ghost_of}'", icon="GHOST_ENABLED")
            return
        error = obj.get("nrom_frame_error")  # addon.simulate.FRAME_ERROR
        if error:
            box = layout.box()
            box.alert = True
            for i, line in enumerate(textwrap.wrap(str(error), 48)):
                box.label(text=line, icon="ERROR" if i == 0 else "BLANK1")
        layout.prop(s, "role", expand=True)
        if s.role == "NONE":
            if obj.type == "MESH" and any(m.type == "CLOTH" for m in obj.modifiers):
                layout.label(text="Make it Deformable to bake its cloth", icon="MOD_CLOTH")
            elif obj.type == "MESH":
                layout.label(text="Make it Deformable, or tetrahedralize it:", icon="INFO")
                layout.operator("neural_rom.tetrahedralize", icon="MESH_ICOSPHERE")
            else:
                layout.label(text="Empties and meshes can be colliders.", icon="INFO")
        elif s.role == "COLLIDER":
            draw_collider(layout, obj)
        elif obj.type != "MESH":
            layout.label(text="Only meshes can be deformable.", icon="ERROR")


def draw_collider(layout, obj) -> None:
    s = obj.neural_rom
    col = layout.column()
    col.prop(s, "collider_shape")
    col.prop(s, "collider_friction")
    try:
        shape = bm.collider_shape(obj, s.collider_shape)
    except NeuralRomError as e:
        col.label(text=str(e), icon="ERROR")
        return
    if shape["kind"] == "sphere":
        col.label(text=f"Radius {shape['radius']:.3f} m (from size)")
    elif shape["kind"] == "capsule":
        col.label(text=f"Radius {shape['radius']:.3f} m, half length {shape['half_length']:.3f} m")
    else:
        col.label(text="Local XY plane, solid below (-Z)")
    col.label(text="Its animation drives the bakes' colliders.", icon="INFO")


class NEURAL_ROM_PT_cache(Sidebar, bpy.types.Panel):
    bl_label = "Cache"
    bl_idname = "NEURAL_ROM_PT_cache"
    bl_parent_id = "NEURAL_ROM_PT_main"
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        col = self.layout.column()
        col.prop(context.scene.neural_rom_scene, "cache_dir")
        col.label(text=f"In effect: {cache_base(context.scene)}")
