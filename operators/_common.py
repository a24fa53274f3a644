"""Helpers shared by the operators."""

from __future__ import annotations

import bpy


def active_object(context) -> bpy.types.Object | None:
    """The active object (``context.object`` is missing in some headless contexts)."""
    obj = getattr(context, "object", None)
    if obj is None and context.view_layer is not None:
        obj = context.view_layer.objects.active
    return obj


def active_deformable(context) -> bpy.types.Object | None:
    obj = active_object(context)
    if obj is not None and obj.type == "MESH" and obj.neural_rom.role == "DEFORMABLE":
        return obj
    return None


def fail(op: bpy.types.Operator, message: str) -> set[str]:
    """Report an error and cancel (the one way operators fail)."""
    op.report({"ERROR"}, message)
    return {"CANCELLED"}
