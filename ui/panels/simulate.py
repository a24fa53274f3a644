"""The Simulate panel: play the model with the timeline, reset it, bake it to a PC2, export
it as ONNX."""

from __future__ import annotations

import bpy

from ...addon import simulate
from ...addon.kinds.fem import bake as bakes
from .common import DeformableSub, deformable
from .jobs import draw_jobs
from .kinds.family import draw_family_simulate


class NEURAL_ROM_PT_simulate(DeformableSub, bpy.types.Panel):
    bl_label = "Simulate"
    bl_idname = "NEURAL_ROM_PT_simulate"
    stage = "simulate"

    @classmethod
    def shows(cls, obj) -> bool:
        return bool(obj.neural_rom.model.path)

    def draw(self, context):
        obj = deformable(context)
        s = obj.neural_rom
        col = self.layout.column()
        text = "Stop Simulation" if s.simulate else "Simulate"
        icon = "PAUSE" if s.simulate else "PLAY"
        row = col.row(align=True)
        row.operator(
            "neural_rom.simulate", text=text, icon=icon, depress=s.simulate
        ).action = "TOGGLE"
        row.operator("neural_rom.reset_simulation", text="", icon="FILE_REFRESH")
        d = simulate._drivers.get(obj.name)
        if s.simulate and d is not None:
            steps = d.step_seconds[-20:]
            ms = 1000 * sum(steps) / len(steps) if steps else 0.0
            col.label(text=f"{len(d.cache)} frames cached, {ms:.2f} ms/step")
            if d.ground_z is not None and not bakes.scene_colliders(obj, context.scene):
                col.label(text=f"Ground plane of the bakes at z = {d.ground_z:.3f} m", icon="INFO")
        draw_family_simulate(col, obj)
        draw_jobs(col, obj.name, "simulate")
        row = col.row(align=True)
        row.operator("neural_rom.bake_simulation", icon="EXPORT")
        row.operator("neural_rom.export_onnx", text="ONNX", icon="EXPORT")
