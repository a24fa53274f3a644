"""The box of a data kind registered outside the package: the draw function its Blender
record names (:attr:`...addon.kinds.BlenderKind.panel`), under the main panel for the active
Deformable mesh it claims. The built-in kinds' boxes are panels of their own (cloth.py,
face.py)."""

from __future__ import annotations

import bpy

from ... import kinds
from ..common import DeformableSub, deformable


class NEURAL_ROM_PT_kind(DeformableSub, bpy.types.Panel):
    bl_label = "Data"
    bl_idname = "NEURAL_ROM_PT_kind"
    stage = "kind"

    @classmethod
    def shows(cls, obj) -> bool:
        return kinds.panel(obj) is not None

    def draw(self, context):
        obj = deformable(context)
        kinds.panel(obj)(self.layout, obj, context)


CLASSES = (NEURAL_ROM_PT_kind,)
