"""Compare the reduced model with a full-space bake (ghost object + per-vertex error)."""

from __future__ import annotations

import bpy
from bpy.props import EnumProperty

from ..addon import compare
from ..core.errors import NeuralRomError
from ._common import active_deformable, fail


class NEURAL_ROM_OT_compare_bake(bpy.types.Operator):
    """Replay the selected bake's scenario with the reduced model, show the bake beside it
    as a ghost object and colour the object by the per-vertex error"""

    bl_idname = "neural_rom.compare_bake"
    bl_label = "Compare with Bake"
    bl_options = {"REGISTER", "UNDO"}

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
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable; set its Neural ROM role first.")
        try:
            c = compare.start_comparison(
                obj, context.scene, placement=self.placement, display=self.display
            )
        except NeuralRomError as e:
            return fail(self, str(e))
        st = c.stats
        self.report(
            {"INFO"},
            f"Reduced vs full space over {st['frames']} frames: max error "
            f"{st['max'] * 1000:.3g} mm, mean {st['mean'] * 1000:.3g} mm",
        )
        return {"FINISHED"}


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


CLASSES = (NEURAL_ROM_OT_compare_bake, NEURAL_ROM_OT_clear_comparison)
