"""Compare the reduced model with a full-space bake (ghost object + per-vertex error)."""

from __future__ import annotations

import bpy
from bpy.props import EnumProperty, FloatProperty, IntProperty, StringProperty

from ...addon.compare import bake as compare
from ...addon.compare import methods as methodcompare
from ...addon.compare.methods import ROWS_PROP
from ...core.errors import NeuralRomError
from ._common import active_deformable, fail, launch_job


class NEURAL_ROM_OT_compare_bake(bpy.types.Operator):
    """Replay the selected bake's scenario with the reduced model in a background process,
    then show the bake beside it as a ghost object and colour the object by the per-vertex
    error; Esc cancels"""

    bl_idname = "neural_rom.compare_bake"
    bl_label = "Compare with Bake"
    bl_options = {"REGISTER"}  # the job shows the comparison when it ends; no undo step

    placement: EnumProperty(
        name="Ghost",
        items=(
            ("SIDE", "Side by Side", "The bake plays beside the object, along its local X"),
            ("OVERLAY", "Overlaid", "The bake plays over the object"),
        ),
        default="SIDE",
    )
    display: EnumProperty(
        name="Display",
        items=(
            ("WIRE", "Wire", "Draw the ghost as a wireframe"),
            ("TRANSPARENT", "Transparent", "Draw the ghost solid and semi-transparent"),
        ),
        default="WIRE",
    )

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and bool(obj.neural_rom.model.path) and len(obj.neural_rom.bakes) > 0

    def execute(self, context):
        made, shown = {}, []

        def make_job(obj, scene) -> dict:
            made["job"] = compare.make_compare_job(
                obj, scene, placement=self.placement, display=self.display
            )
            return made["job"]

        def done(obj, result: dict) -> None:
            c = compare.on_compare_done(obj, made["job"], result)
            if c is not None:
                shown.append(c)

        def summary(obj) -> str:
            if not shown:
                return f"Compare with Bake of '{obj.name}' showed nothing"
            st = shown[0].stats
            closest = obj.get(compare.PROP, {}).get("closest_max_error", -1.0)
            shapes = f" (closest shapes {closest * 1000:.3g} mm)" if closest >= 0 else ""
            return (
                f"Reduced vs full space over {st['frames']} frames: max error "
                f"{st['max'] * 1000:.3g} mm, mean {st['mean'] * 1000:.3g} mm{shapes}"
            )

        return launch_job(
            self,
            context,
            noun="Compare with Bake",
            gerund="Comparing",
            make_job=make_job,
            on_done=done,
            summary=summary,
        )


class NEURAL_ROM_OT_clear_comparison(bpy.types.Operator):
    """Remove the full-space ghost and the error colours, and put the rest shape back"""

    bl_idname = "neural_rom.clear_comparison"
    bl_label = "Clear Comparison"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and compare.is_comparing(obj)

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        if not compare.clear_comparison(obj):
            return fail(self, f"'{obj.name}' has no comparison to clear.")
        return {"FINISHED"}


class NEURAL_ROM_OT_compare_methods(bpy.types.Operator):
    """Train every method the object's bakes allow in a background process, replay the
    bakes training held out with each, and show which to use (its model becomes the
    object's); Esc cancels and keeps the methods finished, a re-run resumes after them"""

    bl_idname = "neural_rom.compare_methods"
    bl_label = "Compare Methods"
    bl_options = {"REGISTER"}

    budget: FloatProperty(
        name="Time Budget",
        default=600.0,
        min=10.0,
        soft_max=7200.0,
        subtype="TIME_ABSOLUTE",
        unit="TIME_ABSOLUTE",
        description="Seconds of wall time for the whole comparison's training, planned "
        "across the methods (each one's fixed cost first, the rest in proportion to what it "
        "needs) and the cores",
    )
    processes: IntProperty(
        name="Processes",
        default=0,
        min=0,
        soft_max=8,
        description="Trainings at once, each in its own process with one thread (0: one per "
        "core; 1: one after another with every thread)",
    )
    methods: StringProperty(
        name="Methods",
        description="Only these methods, comma-separated (empty: every method)",
        options={"SKIP_SAVE"},
    )

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and len(obj.neural_rom.bakes) > 1

    def invoke(self, context, event):
        return context.window_manager.invoke_props_dialog(self)

    def execute(self, context):
        made = {}

        def make_job(obj, scene) -> dict:
            only = [m.strip() for m in self.methods.split(",") if m.strip()] or None
            made["job"] = methodcompare.make_compare_methods_job(
                obj, scene, budget_s=self.budget, only=only, processes=self.processes
            )
            return made["job"]

        def done(obj, result: dict) -> None:
            methodcompare.on_compare_methods_done(obj, made["job"], result)

        def summary(obj) -> str:
            table = methodcompare.read_table(obj) or {}
            return (table.get("recommendation") or {}).get("reason", "Compare Methods ended")

        return launch_job(
            self,
            context,
            noun="Compare Methods",
            gerund="Comparing methods",
            make_job=make_job,
            on_done=done,
            summary=summary,
        )


class NEURAL_ROM_OT_use_compared_method(bpy.types.Operator):
    """Make this method's model of the last Compare Methods the object's model (its row of
    the table)"""

    bl_idname = "neural_rom.use_compared_method"
    bl_label = "Use This Row"
    bl_options = {"REGISTER", "UNDO"}

    method: StringProperty(name="Method", description="The method whose model to use")

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and bool(obj.get(ROWS_PROP))

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            methodcompare.use_row(obj, self.method)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"'{obj.name}' now uses its {self.method} model")
        return {"FINISHED"}


CLASSES = (
    NEURAL_ROM_OT_compare_bake,
    NEURAL_ROM_OT_clear_comparison,
    NEURAL_ROM_OT_compare_methods,
    NEURAL_ROM_OT_use_compared_method,
)
