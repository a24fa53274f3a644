"""The face set-up of a skin object (``Object.neural_rom.face``): the skull and jaw it is
built on, the lattice spacing, what the set-up recorded, and how the face is driven.

See :mod:`.face` (the stages) and :mod:`..core.facejob` (the conventions: the skin's local
space, the jaw's hinge, jaw angles and held-out keys in shape key names).
"""

from __future__ import annotations

import bpy
from bpy.props import (
    BoolProperty,
    EnumProperty,
    FloatProperty,
    FloatVectorProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)

from ...prefs import REL_PATH

DRIVE_ITEMS = (
    (
        "SLIDERS",
        "Sliders",
        "The latent sliders (keyable custom properties of the skin) drive the face",
    ),
    (
        "MARKERS",
        "Markers",
        "Marker empties bound to skin vertices drive the face: each frame the latent that best "
        "matches them (Levenberg-Marquardt)",
    ),
)


def _is_mesh(self, obj) -> bool:
    return obj.type == "MESH"


class NEURAL_ROM_PG_face(bpy.types.PropertyGroup):
    """A face: the skin is the object itself, with its shape keys (the sculpted expressions)."""

    skull: PointerProperty(
        name="Skull",
        type=bpy.types.Object,
        poll=_is_mesh,
        description="Closed mesh of the skull: the flesh nodes inside it stay fixed",
    )
    jaw: PointerProperty(
        name="Jaw",
        type=bpy.types.Object,
        poll=_is_mesh,
        description="Closed mesh of the jaw: the flesh nodes inside it follow it. Its origin "
        "is the hinge and its local X axis the hinge axis (a positive rotation opens the mouth)",
    )
    spacing: FloatProperty(
        name="Lattice Spacing",
        default=0.0,
        min=0.0,
        soft_max=0.1,
        unit="LENGTH",
        precision=4,
        description="Edge of the flesh lattice's cells (m); 0 picks the skin's tallest side / 12",
    )
    drive: EnumProperty(name="Drive", items=DRIVE_ITEMS, default="SLIDERS")
    jaw_drive: EnumProperty(
        name="Jaw",
        items=(
            (
                "MARKERS",
                "From Markers",
                "The markers turn the jaw too: each frame its hinge angle is solved with the "
                "expression (a capture gives markers, not jaw keys)",
            ),
            ("KEYED", "Keyed", "The jaw object's own animation (rotate it about its hinge)"),
        ),
        default="MARKERS",
        description="What opens the jaw when markers drive the face",
    )
    head_from_markers: BoolProperty(
        name="Head From Markers",
        default=False,
        description="The markers move the head too: each frame its rigid motion (6 degrees of "
        "freedom) is solved with the expression and the skin moves with it (a capture whose "
        "performer moves the head; it needs 3 or more markers where the skin moves with the "
        "skull: Add Markers puts 6 there while this is on)",
    )
    solve: EnumProperty(
        name="Solve",
        items=(
            (
                "REDUCED",
                "Reduced",
                "In the subspace of the training equilibria: interactive (a frame whose skin "
                "touches a collider is finished by the full solve)",
            ),
            (
                "FULL",
                "Full",
                "On every flesh node, every frame: the reference, for final bakes (seconds "
                "per frame on a big face)",
            ),
        ),
        default="REDUCED",
    )

    # ---- what Set Up Face recorded
    path: StringProperty(name="Face", subtype="FILE_PATH", options=REL_PATH)
    tets: IntProperty(name="Tets")
    nodes: IntProperty(name="Nodes")
    skull_nodes: IntProperty(name="Skull Nodes")
    jaw_nodes: IntProperty(name="Jaw Nodes")
    keys: IntProperty(name="Shape Keys")
    held_out: IntProperty(name="Held Out")
    used_spacing: FloatProperty(name="Spacing (m)")
    min_dihedral: FloatProperty(name="Min Dihedral (°)")
    mesh_hash: StringProperty(description="Hash of the flesh lattice (its model must match)")
    skin_hash: StringProperty(description="Hash of the skin mesh at set-up")
    jaw_rest: FloatVectorProperty(
        size=16, description="The jaw's matrix in the skin's local space at set-up (row major)"
    )


CLASSES = (NEURAL_ROM_PG_face,)
