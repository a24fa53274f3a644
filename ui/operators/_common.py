"""Helpers shared by the operators."""

from __future__ import annotations

import bpy

from ...addon import jobs
from ...core.errors import JobCancelled, NeuralRomError


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


def browse_for_file(op: bpy.types.Operator, context, default_path, name: str) -> set[str]:
    """Open the file browser on ``op.filepath``, first set, when empty, to the active
    Deformable's default file (``default_path(obj)``; ``<object><name>`` when there is none
    or it has none)."""
    obj = active_deformable(context)
    if not op.filepath and obj is not None:
        op.filepath = bpy.path.clean_name(obj.name) + name
        if default_path is not None:
            try:
                op.filepath = str(default_path(obj))
            except NeuralRomError:
                pass  # no cache folder yet (an unsaved file): the object's name
    context.window_manager.fileselect_add(op)
    return {"RUNNING_MODAL"}


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


def launch_job(
    op,
    context,
    *,
    noun: str,
    gerund: str,
    make_job,
    on_done,
    summary,
    pending: str | None = None,
    discard=None,
):
    """Start a worker job for the active object: the one path of Bake, Train, Bake
    Simulation and Compare with Bake.

    ``make_job(obj, scene)`` builds the job spec (NeuralRomError -> error report, nothing
    changed; its ``warnings`` are reported and the job starts); ``on_done(obj, result)`` records the result; ``pending`` names the object
    setting that marks a job in flight (cleared if the start fails); ``discard(job)``
    removes the job's own files once it ended or failed to start; ``summary(obj)`` is the
    report of a background (blocking) run.
    """
    obj = active_deformable(context)
    if obj is None:
        return fail(op, "The active object is not Deformable; set its Neural ROM role first.")
    name = obj.name
    if any(j.status == "running" for j in jobs.active_jobs(name)):
        return fail(op, f"'{name}' already has a job running; wait for it or cancel it.")
    try:
        job = make_job(obj, context.scene)
    except NeuralRomError as e:
        return fail(op, str(e))
    for warning in job.get("warnings") or ():
        op.report({"WARNING"}, warning)

    def done(result: dict) -> None:
        try:
            target = bpy.data.objects.get(name)  # by name: an undo invalidates the old object
            if target is not None:
                on_done(target, result)
        finally:
            if discard is not None:
                discard(job)

    try:
        jobs.start_job(context, job, owner=name, on_done=done)
    except JobCancelled as e:  # background run: what was committed is recorded
        op.report({"WARNING"}, str(e))
        return {"FINISHED"}
    except NeuralRomError as e:
        target = bpy.data.objects.get(name)
        if target is not None and pending is not None:
            setattr(target.neural_rom, pending, "")
        if discard is not None:
            discard(job)
        return fail(op, f"{noun} of '{name}' failed: {e}")
    if bpy.app.background:
        op.report({"INFO"}, summary(bpy.data.objects[name]))
    else:
        op.report({"INFO"}, f"{gerund} '{name}' in the background (Esc cancels)")
    return {"FINISHED"}
