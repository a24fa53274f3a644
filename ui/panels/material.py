"""The FEM body's physics: the Material and Simulation panels (time step, damping, pins)."""

from __future__ import annotations

import bpy

from ...addon.kinds.fem.bake import scene_dt
from .common import DeformableSub, deformable


class NEURAL_ROM_PT_material(DeformableSub, bpy.types.Panel):
    bl_label = "Material"
    bl_idname = "NEURAL_ROM_PT_material"
    stage = "material"

    def draw(self, context):
        s = deformable(context).neural_rom
        col = self.layout.column()
        col.prop(s.material, "material_preset")
        if s.material_preset == "custom":
            col.prop(s.material, "youngs_modulus")
            col.prop(s.material, "poisson_ratio")
            col.prop(s.material, "density")
        else:
            try:
                v = s.material_values()
            except (ImportError, KeyError) as e:
                col.label(text=f"Preset unavailable: {e}", icon="ERROR")
                return
            box = col.box()
            box.label(text=f"Young's modulus {v['youngs_modulus']:.3g} Pa")
            box.label(text=f"Poisson ratio {v['poisson_ratio']:.3f}")
            box.label(text=f"Density {v['density']:.0f} kg/m³")


class NEURAL_ROM_PT_simulation(DeformableSub, bpy.types.Panel):
    bl_label = "Simulation"
    bl_idname = "NEURAL_ROM_PT_simulation"
    stage = "simulation"

    def draw(self, context):
        obj = deformable(context)
        s = obj.neural_rom
        col = self.layout.column()
        col.prop(s.simulation, "dt_from_scene")
        if s.dt_from_scene:
            col.label(text=f"dt = {scene_dt(context.scene):.4f} s (scene frame rate)")
        else:
            col.prop(s.simulation, "dt")
        col.prop(s.simulation, "substeps")
        col.prop(s.simulation, "damping_mass")
        col.prop(s.simulation, "damping_stiffness")
        col.separator()
        col.prop_search(s.simulation, "pin_group", obj, "vertex_groups", icon="GROUP_VERTEX")
        if s.pin_group and obj.vertex_groups.get(s.pin_group) is None:
            col.label(text=f"No vertex group '{s.pin_group}'", icon="ERROR")
        col.prop(s.simulation, "require_pins")
