"""The bakes: the list of an object's bakes, the Training Scenario and Bake panels, and
Playback and Export (play a bake, export it as a PC2)."""

from __future__ import annotations

import bpy

from ...addon.kinds.fem.bake import variants_image_name
from ...core.bake.scenarios import describe
from .common import DeformableSub, deformable, format_bytes
from .jobs import draw_jobs


class NEURAL_ROM_UL_bakes(bpy.types.UIList):
    """Bakes of an object: name, frames, status."""

    def draw_item(self, context, layout, data, item, icon, active_data, active_propname, index=0):
        row = layout.row(align=True)
        ok = item.status == "complete"
        row.label(text=item.name, icon="FILE_CACHE" if ok else "ERROR")
        row.label(text=f"{item.frames} fr")


class NEURAL_ROM_PT_scenario(DeformableSub, bpy.types.Panel):
    bl_label = "Training Scenario"
    bl_idname = "NEURAL_ROM_PT_scenario"
    stage = "scenario"

    def draw(self, context):
        s = deformable(context).neural_rom
        col = self.layout.column()
        col.prop(s.bake, "scenario")
        row = col.row(align=True)
        row.prop(s.bake, "frames")
        row.prop(s.bake, "seed")
        col.prop(s.bake, "variants")
        col.prop(s.bake, "bake_motion")
        box = col.box()
        if s.bake_motion != "scenario" and s.pin_group:
            box.label(text="Pins: each variant drawn from the animation when it has one,")
            box.label(text="perturbed (speed, stops, amplitude, turns); the scenario on top.")

        # what the bake will do, in words (Blender labels do not wrap: one sentence a line)
        for sentence in describe(s.scenario_dict()).replace("; ", ";. ").split(". "):
            if sentence.strip():
                box.label(text=sentence.strip().rstrip(".") + ".")
        if s.scenario_params_kind != s.scenario:
            box.label(text="Default parameters", icon="INFO")
            box.operator(
                "neural_rom.reset_scenario_params", text="Edit Parameters", icon="PREFERENCES"
            )
            return
        for item in s.scenario_params:
            label = item.name.replace("_", " ").capitalize()
            row = box.row()
            row.prop(item, item.value_attr, text=label)
        box.operator("neural_rom.reset_scenario_params", text="Reset", icon="LOOP_BACK")


class NEURAL_ROM_PT_bake(DeformableSub, bpy.types.Panel):
    bl_label = "Bake"
    bl_idname = "NEURAL_ROM_PT_bake"
    stage = "bake"

    def draw(self, context):
        obj = deformable(context)
        s = obj.neural_rom
        layout = self.layout
        draw_jobs(layout, obj.name, "bake")
        row = layout.row(align=True)
        row.enabled = bool(s.tets_path)
        row.operator("neural_rom.bake", icon="PHYSICS")  # resumes an unfinished bake
        row.operator("neural_rom.bake", text="Start Over", icon="FILE_REFRESH").restart = True
        if not s.tets_path:
            layout.label(text="Tetrahedralize first", icon="INFO")
        layout.template_list("NEURAL_ROM_UL_bakes", "", s, "bakes", s, "active_bake", rows=2)
        rec = s.active_bake_record()
        if rec is not None:
            box = layout.box()
            box.label(
                text=f"{rec.frames} frames from frame {rec.frame_start}, {format_bytes(rec.nbytes)}"
            )
            box.label(
                text=f"Status: {rec.status}",
                icon="CHECKMARK" if rec.status == "complete" else "ERROR",
            )
            if rec.motion:  # the variant's pins drawn from the animation: which, how
                for i, part in enumerate(rec.motion.split(", ")):
                    box.label(text=("Pins: " if i == 0 else "  ") + part, icon="NONE")
                draw_variants_picture(box, obj)
            stale = rec.tets_hash != s.tets_hash or rec.source_hash != s.source_hash
            if stale:
                box.label(text="Stale: the mesh or tets changed, re-bake", icon="ERROR")
            row = layout.row(align=True)
            row.operator("neural_rom.clear_bake", text="Clear", icon="TRASH").all_bakes = False
            row.operator("neural_rom.clear_bake", text="Clear All").all_bakes = True


def draw_variants_picture(layout, obj) -> None:
    """The picture of the object's drawn variants (:func:`..addon.bakes.variants_picture`),
    when there is one: one row per variant, its turn (blue) and travel (orange) over time."""
    img = bpy.data.images.get(variants_image_name(obj))
    if img is None or img.preview is None:
        return
    layout.label(text="Variants, top to bottom: turn (blue), travel (orange)")
    layout.template_icon(icon_value=img.preview.icon_id, scale=8.0)


class NEURAL_ROM_PT_playback(DeformableSub, bpy.types.Panel):
    bl_label = "Playback and Export"
    bl_idname = "NEURAL_ROM_PT_playback"
    stage = "playback"

    @classmethod
    def shows(cls, obj) -> bool:
        return len(obj.neural_rom.bakes) > 0

    def draw(self, context):
        s = deformable(context).neural_rom
        col = self.layout.column()
        text = "Stop Playback" if s.playback else "Play Bake"
        icon = "PAUSE" if s.playback else "PLAY"
        col.operator(
            "neural_rom.playback", text=text, icon=icon, depress=s.playback
        ).action = "TOGGLE"
        col.operator("neural_rom.export_pc2", icon="EXPORT")
