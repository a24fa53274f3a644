"""What the sidebar's panels share: the active object, the Deformable one, the sidebar's
place (View3D > N > Neural ROM), and the base classes of the Deformable object's boxes."""

from __future__ import annotations


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
    """A box under the main panel for the active Deformable mesh, when :meth:`shows` says."""

    bl_parent_id = "NEURAL_ROM_PT_main"
    #: Shown for a face too (a face trains on its face file: no tets, bakes or scenario).
    for_faces = False

    @classmethod
    def poll(cls, context):
        obj = deformable(context)
        return obj is not None and cls.shows(obj)

    @classmethod
    def shows(cls, obj) -> bool:
        """Whether the panel shows for the Deformable mesh ``obj``."""
        return cls.for_faces or obj.neural_rom.training_data_kind() != "face"


class FemSub(DeformableSub):
    """A panel of the FEM pipeline (material, tets, scenario, bake): only for an object that
    trains on FEM bakes (not a cloth, whose data is Blender's own cloth:
    :class:`NEURAL_ROM_PT_cloth_bake`; not a face)."""

    @classmethod
    def shows(cls, obj) -> bool:
        return obj.neural_rom.training_data_kind() == "fem"
