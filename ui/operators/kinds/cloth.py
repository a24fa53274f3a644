"""Cloth Bake: the active object's Cloth modifier baked by Blender's own cloth solver in a
background Blender (:mod:`...addon.cloth`, :mod:`...addon.clothbake`)."""

from __future__ import annotations

import functools

import bpy
from bpy.props import IntProperty

from ....addon.kinds.cloth import bake_job as clothbake
from ....addon.kinds.cloth import model as cloth
from .._common import active_deformable, launch_job


class NEURAL_ROM_OT_cloth_bake(bpy.types.Operator):
    """Bake the active object's cloth with Blender's cloth solver in a background Blender,
    the colliders and the object it hangs from moved to random keys (one bake per variant);
    Esc cancels and keeps the committed frames"""

    bl_idname = "neural_rom.cloth_bake"
    bl_label = "Cloth Bake"
    bl_options = {"REGISTER"}  # the job records the bakes when it ends; no undo step to start it

    processes: IntProperty(
        name="Processes",
        default=0,
        min=0,
        soft_max=64,
        description="Variants baked at once, each in its own background Blender (0: one per "
        "CPU core)",
        options={"SKIP_SAVE"},
    )

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and cloth.cloth_modifier(obj) is not None

    def execute(self, context):
        def summary(obj):
            recs = [r for r in obj.neural_rom.bakes if r.kind == cloth.KIND]
            frames = sum(r.frames for r in recs)
            return f"Cloth-baked '{obj.name}': {len(recs)} bake(s), {frames} frames"

        return launch_job(
            self,
            context,
            noun="Cloth Bake",
            gerund="Cloth-baking",
            make_job=functools.partial(clothbake.make_cloth_bake_job, processes=self.processes),
            on_done=clothbake.on_cloth_bake_done,
            pending="pending_bake",
            summary=summary,
        )


CLASSES = (NEURAL_ROM_OT_cloth_bake,)
