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


def toggle_items(running: str) -> tuple:
    """Items of the ``action`` property of a start/stop operator."""
    return (
        ("TOGGLE", "Toggle", f"Start when stopped, stop when {running}"),
        ("START", "Start", ""),
        ("STOP", "Stop", "Stop and restore the rest shape"),
    )


def run_toggle(op: bpy.types.Operator, context, is_running, start, stop) -> set[str]:
    """Start or stop a per-object mode (playback, simulation) from ``op.action``.

    ``is_running(obj)`` says whether it is on; ``start(obj, scene)`` may raise a
    NeuralRomError, which becomes the operator's error report.
    """
    from ..core.errors import NeuralRomError

    obj = active_deformable(context)
    if obj is None:
        return fail(op, "The active object is not Deformable.")
    if not (op.action == "START" or (op.action == "TOGGLE" and not is_running(obj))):
        stop(obj)
        return {"FINISHED"}
    try:
        start(obj, context.scene)
    except NeuralRomError as e:
        return fail(op, str(e))
    return {"FINISHED"}
