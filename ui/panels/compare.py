"""The Compare with Bake panel: the model's replay of the selected bake beside it, and its
errors."""

from __future__ import annotations

import bpy

from ...addon.compare import bake as compare
from .common import DeformableSub, deformable
from .jobs import draw_jobs


class NEURAL_ROM_PT_compare(DeformableSub, bpy.types.Panel):
    bl_label = "Compare with Bake"
    bl_idname = "NEURAL_ROM_PT_compare"
    stage = "compare"
    bl_options = {"DEFAULT_CLOSED"}

    @classmethod
    def shows(cls, obj) -> bool:
        return bool(obj.neural_rom.model.path) and len(obj.neural_rom.bakes) > 0

    def draw(self, context):
        draw_compare(self.layout, deformable(context), context.scene)


def draw_compare(layout, obj, scene) -> None:
    """The reduced model against the selected bake: run, summary, clear."""
    s = obj.neural_rom
    col = layout.column()
    rec = s.active_bake_record()
    col.label(text=f"Bake: {rec.name if rec is not None else 'none selected'}")
    draw_jobs(col, obj.name, "compare")
    row = col.row(align=True)
    op = row.operator("neural_rom.compare_bake", text="Side by Side", icon="MOD_MIRROR")
    op.placement = "SIDE"
    op = row.operator("neural_rom.compare_bake", text="Overlaid", icon="OVERLAY")
    op.placement = "OVERLAY"
    info = obj.get(compare.PROP)
    if info is None:
        return
    box = col.box()
    box.label(text=f"'{info.get('bake', '')}', {info.get('frames', 0)} frames", icon="CHECKMARK")
    box.label(
        text=f"Max error {info.get('max_error', 0.0) * 1000:.3g} mm, "
        f"mean {info.get('mean_error', 0.0) * 1000:.3g} mm"
    )
    box.label(text=f"RMS error {info.get('rms_error', 0.0) * 1000:.3g} mm")
    closest = info.get("closest_max_error", -1.0)
    if closest >= 0:  # shapes vs dynamics: what the model's space alone cannot reach
        box.label(text=f"Closest shapes: max {closest * 1000:.3g} mm")
    c = compare._results.get(obj.name)
    if c is not None:
        k = c.index(scene.frame_current)
        box.label(
            text=f"Frame {k}: max {c.stats['per_frame_max'][k] * 1000:.3g} mm, "
            f"mean {c.stats['per_frame_mean'][k] * 1000:.3g} mm"
        )
    if s.simulate or s.playback:
        box.label(text="Paused while Simulate or Play Bake is on", icon="INFO")
    box.label(text="Colour: Viewport Shading > Attribute", icon="COLOR")
    col.operator("neural_rom.clear_comparison", text="Clear Comparison", icon="X")
