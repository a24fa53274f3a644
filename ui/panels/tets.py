"""The Tetrahedralize panel: the tet settings, the button, what it built, the preview."""

from __future__ import annotations

import bpy

from .common import DeformableSub, deformable


class NEURAL_ROM_PT_tets(DeformableSub, bpy.types.Panel):
    bl_label = "Tetrahedralize"
    bl_idname = "NEURAL_ROM_PT_tets"
    stage = "tets"

    def draw(self, context):
        obj = deformable(context)
        s = obj.neural_rom
        col = self.layout.column()
        col.prop(s.tets, "tet_size")
        col.prop(s.tets, "tet_quality")
        col.prop(s.tets, "embedding")
        if s.embedding != "NEVER":
            col.prop(s.tets, "cage_resolution")
        col.operator("neural_rom.tetrahedralize", icon="MESH_ICOSPHERE")
        if not s.tets_path:
            col.label(text="No tets yet", icon="INFO")
            return
        box = col.box()
        kind = "cage" if s.tets_embedded else "surface"
        box.label(text=f"{s.tets_count} tets, {s.tets_nodes} nodes ({kind})", icon="CHECKMARK")
        box.label(text=f"Radius ratio min {s.tets_quality_min:.2f}, mean {s.tets_quality_mean:.2f}")
        box.label(text=f"Min dihedral {s.tets_min_dihedral:.1f}°")
        row = col.row(align=True)
        row.operator("neural_rom.preview_tets", text="Preview", icon="HIDE_OFF").cutaway = False
        row.operator("neural_rom.preview_tets", text="Cut Away", icon="MOD_BOOLEAN").cutaway = True
        row.operator("neural_rom.clear_preview", text="", icon="X")
