"""Train a reduced model in a background job; clear it; simulate with it (viewport driver,
reset, bake to PC2); export it to ONNX."""

from __future__ import annotations

import functools

import bpy
from bpy.props import BoolProperty, EnumProperty, IntProperty, StringProperty

from ...addon import simulate, training
from ...addon.io import export
from ...addon.prefs import REL_PATH
from ...core.errors import NeuralRomError
from ._common import active_deformable, browse_for_file, fail, launch_job, run_toggle, toggle_items


def _has_model(context) -> bool:
    obj = active_deformable(context)
    return obj is not None and bool(obj.neural_rom.model.path)


class NEURAL_ROM_OT_train(bpy.types.Operator):
    """Train a reduced model on all the active object's bakes in a background process"""

    bl_idname = "neural_rom.train"
    bl_label = "Train"
    bl_options = {"REGISTER"}  # the job records the model when it ends; no undo step to start it

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and (len(obj.neural_rom.bakes) > 0 or bool(obj.neural_rom.face.path))

    def execute(self, context):
        def summary(obj):
            m = obj.neural_rom.model
            text = f"Trained '{obj.name}': {training.model_size(m)}"
            if not m.bakes:  # a face: fitted to its shape keys, no bake held out
                return text
            return f"Trained '{obj.name}': {training.report_line(m)}"

        return launch_job(
            self,
            context,
            noun="Training",
            gerund="Training",
            make_job=training.make_train_job,
            on_done=training.on_train_done,
            pending="pending_train",
            summary=summary,
        )


class NEURAL_ROM_OT_clear_model(bpy.types.Operator):
    """Forget the active object's model and delete its file"""

    bl_idname = "neural_rom.clear_model"
    bl_label = "Clear Model"
    bl_options = {"REGISTER", "UNDO"}

    delete_file: BoolProperty(
        name="Delete File", default=True, description="Delete the .nrmodel file (cannot be undone)"
    )

    @classmethod
    def poll(cls, context):
        return _has_model(context)

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(self, event)

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            training.clear_model(obj, delete_file=self.delete_file)
        except NeuralRomError as e:
            return fail(self, str(e))
        return {"FINISHED"}


class NEURAL_ROM_OT_simulate(bpy.types.Operator):
    """Drive the mesh from its reduced model as the timeline moves (or stop)"""

    bl_idname = "neural_rom.simulate"
    bl_label = "Simulate"
    bl_options = {"REGISTER", "UNDO"}

    action: EnumProperty(name="Action", items=toggle_items("running"), default="TOGGLE")

    @classmethod
    def poll(cls, context):
        return _has_model(context)

    def execute(self, context):
        return run_toggle(
            self,
            context,
            lambda obj: obj.neural_rom.simulate,
            simulate.start_simulation,
            simulate.stop_simulation,
        )


class NEURAL_ROM_OT_reset_simulation(bpy.types.Operator):
    """Forget the simulated frames: the timeline is simulated again from rest"""

    bl_idname = "neural_rom.reset_simulation"
    bl_label = "Reset Simulation"
    bl_options = {"REGISTER"}  # forgets in-memory frames only: nothing to undo

    @classmethod
    def poll(cls, context):
        return _has_model(context)

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            simulate.reset_simulation(obj, context.scene)
        except NeuralRomError as e:
            return fail(self, str(e))
        return {"FINISHED"}


class NEURAL_ROM_OT_bake_simulation(bpy.types.Operator):
    """Simulate the frame range with the reduced model in a background process and write
    it as a PC2 point cache played by a Mesh Cache modifier; Esc cancels"""

    bl_idname = "neural_rom.bake_simulation"
    bl_label = "Bake Simulation"
    bl_options = {"REGISTER"}  # the job wires the cache when it ends; no undo step to start it

    filepath: StringProperty(name="File Path", subtype="FILE_PATH", options=REL_PATH, default="")
    filter_glob: StringProperty(default="*.pc2", options={"HIDDEN"})
    frame_start: IntProperty(name="Start", default=-1, description="-1: the scene's start frame")
    frame_end: IntProperty(name="End", default=-1, description="-1: the scene's end frame")

    @classmethod
    def poll(cls, context):
        return _has_model(context)

    def invoke(self, context, event):
        return browse_for_file(self, context, export.default_sim_pc2_path, "_reduced.pc2")

    def execute(self, context):
        stats: dict = {}

        def done(obj, result: dict) -> None:
            stats.update(export.on_simulation_done(obj, result) or {})

        def summary(obj) -> str:
            if not stats:
                return f"Bake Simulation of '{obj.name}' wrote nothing"
            return (
                f"Wrote {stats['frames']} frames to {stats['path']} ({stats['step_ms']:.2f} ms "
                f"per step) and the '{export.SIM_MODIFIER_NAME}' modifier"
            )

        return launch_job(
            self,
            context,
            noun="Bake Simulation",
            gerund="Simulating",
            make_job=functools.partial(
                export.make_simulation_job,
                path=self.filepath or None,
                frame_start=None if self.frame_start < 0 else self.frame_start,
                frame_end=None if self.frame_end < 0 else self.frame_end,
            ),
            on_done=done,
            discard=export.discard_simulation_job,
            summary=summary,
        )


class NEURAL_ROM_OT_export_onnx(bpy.types.Operator):
    """Write the trained model's network step, decoder or basis as an ONNX file for game
    engines and Houdini (needs the onnx package in Blender's Python)"""

    bl_idname = "neural_rom.export_onnx"
    bl_label = "Export ONNX"
    bl_options = {"REGISTER"}  # writes a file only

    filepath: StringProperty(name="File Path", subtype="FILE_PATH", options=REL_PATH, default="")
    filter_glob: StringProperty(default="*.onnx", options={"HIDDEN"})

    @classmethod
    def poll(cls, context):
        return _has_model(context)

    def invoke(self, context, event):
        return browse_for_file(self, context, None, ".onnx")

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            info = export.export_onnx(obj, context.scene, self.filepath or None)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Wrote {info['path']} (ONNX opset {info['opset']})")
        return {"FINISHED"}


CLASSES = (
    NEURAL_ROM_OT_train,
    NEURAL_ROM_OT_clear_model,
    NEURAL_ROM_OT_simulate,
    NEURAL_ROM_OT_reset_simulation,
    NEURAL_ROM_OT_export_onnx,
    NEURAL_ROM_OT_bake_simulation,
)
