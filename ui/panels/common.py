"""What the sidebar's panels share: the active object, the Deformable one, the sidebar's
place (View3D > N > Neural ROM), and the base classes of the Deformable object's boxes."""

from __future__ import annotations

from . import kinds


def active(context):
    obj = getattr(context, "object", None)
    if obj is None and getattr(context, "view_layer", None) is not None:
        obj = context.view_layer.objects.active
    return obj


def deformable(context):
    obj = active(context)
    if obj is not None and obj.type == "MESH" and obj.neural_rom.role == "DEFORMABLE":
        return obj
    return None


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


class Sidebar:
    """Where every panel sits: View3D > Sidebar (N) > Neural ROM."""

    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Neural ROM"


class DeformableSub(Sidebar):
    """A stage's box under the main panel for the active Deformable mesh, when :meth:`shows`
    says: by default when the object's data kind shows the stage (:func:`.kinds.stages`: a
    cloth has no tets, FEM bakes or scenario; a face trains on its face file)."""

    bl_parent_id = "NEURAL_ROM_PT_main"
    #: the stage the box is of (a name in the kinds' STAGES)
    stage = ""

    @classmethod
    def poll(cls, context):
        obj = deformable(context)
        return obj is not None and cls.shows(obj)

    @classmethod
    def shows(cls, obj) -> bool:
        """Whether the panel shows for the Deformable mesh ``obj``."""
        listed = kinds.stages(obj.neural_rom.training_data_kind())
        return listed is None or cls.stage in listed
