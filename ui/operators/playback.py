"""Play a bake back in the viewport; export it as a PC2 point cache."""

from __future__ import annotations

import bpy
from bpy.props import EnumProperty, StringProperty

from ...addon.io import export
from ...addon.kinds.fem import bake as bakes
from ...addon.prefs import REL_PATH
from ...core.errors import NeuralRomError
from ._common import active_deformable, browse_for_file, fail, run_toggle, toggle_items


class NEURAL_ROM_OT_playback(bpy.types.Operator):
    """Make the mesh follow the selected bake as the timeline moves (or stop)"""

    bl_idname = "neural_rom.playback"
    bl_label = "Play Bake"
    bl_options = {"REGISTER", "UNDO"}

    action: EnumProperty(name="Action", items=toggle_items("playing"), default="TOGGLE")

    @classmethod
    def poll(cls, context):
        return active_deformable(context) is not None

    def execute(self, context):
        return run_toggle(
            self,
            context,
            lambda obj: obj.neural_rom.playback,
            bakes.start_playback,
            bakes.stop_playback,
        )


class NEURAL_ROM_OT_export_pc2(bpy.types.Operator):
    """Write the selected bake as a PC2 point cache and add a Mesh Cache modifier that plays it"""

    bl_idname = "neural_rom.export_pc2"
    bl_label = "Export PC2"
    bl_options = {"REGISTER", "UNDO"}

    filepath: StringProperty(name="File Path", subtype="FILE_PATH", options=REL_PATH, default="")
    filter_glob: StringProperty(default="*.pc2", options={"HIDDEN"})

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and len(obj.neural_rom.bakes) > 0

    def invoke(self, context, event):
        return browse_for_file(self, context, export.default_pc2_path, ".pc2")

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            path = export.export_pc2(obj, self.filepath or None)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Wrote {path} and the '{export.MODIFIER_NAME}' modifier")
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_playback, NEURAL_ROM_OT_export_pc2)
