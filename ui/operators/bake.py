"""Bake the active object's scenario in a background job; clear bakes; reset scenario parameters."""

from __future__ import annotations

import functools

import bpy
from bpy.props import BoolProperty, IntProperty

from ...addon import props
from ...addon.kinds.fem import bake as bakes
from ...core.errors import NeuralRomError
from ._common import active_deformable, fail, launch_job


class NEURAL_ROM_OT_bake(bpy.types.Operator):
    """Simulate the active object's training scenario in background processes, one per
    variant; an unfinished bake with the same settings resumes after its last frame"""

    bl_idname = "neural_rom.bake"
    bl_label = "Bake"
    bl_options = {"REGISTER"}  # the job records the bake when it ends; no undo step to start it

    restart: BoolProperty(
        name="Start Over",
        default=False,
        description="Bake every variant from the first frame, replacing what is on disk, "
        "instead of resuming unfinished bakes and keeping complete ones",
        options={"SKIP_SAVE"},  # the Bake button must not inherit the last Start Over
    )
    processes: IntProperty(
        name="Processes",
        default=0,
        min=0,
        soft_max=64,
        description="Variants baked at once, each in its own process (0: one per CPU core)",
        options={"SKIP_SAVE"},
    )

    @classmethod
    def poll(cls, context):
        return active_deformable(context) is not None

    def execute(self, context):
        def summary(obj):
            rec = obj.neural_rom.active_bake_record()
            return f"Baked '{obj.name}': {rec.frames if rec else 0} frames"

        return launch_job(
            self,
            context,
            noun="Bake",
            gerund="Baking",
            make_job=functools.partial(
                bakes.make_bake_job, restart=self.restart, processes=self.processes
            ),
            on_done=bakes.on_bake_done,
            pending="pending_bake",
            summary=summary,
        )


class NEURAL_ROM_OT_clear_bake(bpy.types.Operator):
    """Forget the selected bake (or all) and delete its files"""

    bl_idname = "neural_rom.clear_bake"
    bl_label = "Clear Bake"
    bl_options = {"REGISTER", "UNDO"}

    all_bakes: BoolProperty(name="All Bakes", default=False)
    delete_files: BoolProperty(
        name="Delete Files",
        default=True,
        description="Delete the bake directories from disk (cannot be undone)",
    )

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and len(obj.neural_rom.bakes) > 0

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(self, event)

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            n = bakes.clear_bakes(obj, all_bakes=self.all_bakes, delete_files=self.delete_files)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Cleared {n} bake(s) of '{obj.name}'")
        return {"FINISHED"}


class NEURAL_ROM_OT_reset_scenario_params(bpy.types.Operator):
    """Set the scenario's parameters to their defaults"""

    bl_idname = "neural_rom.reset_scenario_params"
    bl_label = "Reset Scenario Parameters"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return active_deformable(context) is not None

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            props.reset_scenario_params(obj.neural_rom)
        except NeuralRomError as e:
            return fail(self, str(e))
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_bake, NEURAL_ROM_OT_clear_bake, NEURAL_ROM_OT_reset_scenario_params)
