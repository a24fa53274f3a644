"""The job runner's user interface: the modal monitor (polls the jobs on a timer, reports
each outcome once, Esc cancels them), the Cancel button's operator, and the status bar's
progress bars. The jobs themselves, their polling and the app timer that restarts the
monitor are :mod:`...addon.jobs`'s."""

from __future__ import annotations

import bpy

from ...addon import jobs


def draw_status_progress(header, context) -> None:
    """Appended to the status bar (every window and workspace): a progress bar per
    running job and the Esc hint.

    Not ``WorkSpace.status_text_set``: that text belongs to one workspace, goes stale
    in a workspace the user leaves mid-job, and hides Blender's key hints for the
    whole job.
    """
    states = jobs.active_jobs()
    if not states:
        return
    layout = header.layout
    layout.label(text="Neural ROM (Esc cancels):")
    for s in states:
        eta = jobs.format_eta(s.eta_s)
        layout.progress(
            factor=s.progress,
            type="BAR",
            text=f"{s.kind} {s.owner} {s.progress:.0%}" + (f" · {eta}" if eta else ""),
        )


class NEURAL_ROM_OT_job_monitor(bpy.types.Operator):
    """Watch running Neural ROM jobs: progress in the status bar, Esc cancels them"""

    bl_idname = "neural_rom.job_monitor"
    bl_label = "Neural ROM Job Monitor"
    bl_options = {"INTERNAL"}

    @classmethod
    def poll(cls, context):
        # Background Blender has no window: start_job runs jobs in the foreground there.
        return not bpy.app.background and context.window is not None

    def invoke(self, context, event):
        if jobs.monitor_running() or bpy.app.background or context.window is None:
            return {"CANCELLED"}
        wm = context.window_manager
        self._timer = wm.event_timer_add(jobs.TICK_S, window=context.window)
        wm.modal_handler_add(self)
        jobs.set_monitor_running(True)
        jobs.redraw()
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC" and event.value == "PRESS" and jobs.any_running():
            count = jobs.cancel_job("")
            self.report(
                {"WARNING"}, f"Neural ROM: cancelling {count} job(s) at the next safe point"
            )
            return {"RUNNING_MODAL"}
        if event.type == "TIMER":
            jobs.poll_jobs()
            for state in jobs.take_unreported():
                self._report(state)
            jobs.redraw()
            if not jobs.any_running():
                self._stop(context)
                return {"FINISHED"}
        return {"PASS_THROUGH"}

    def cancel(self, context):
        # Blender ends modal operators on file load and window close; jobs keep running
        # and the app timer starts a new monitor.
        self._stop(context)

    def _report(self, state: jobs.JobState) -> None:
        if state.status == jobs.FAILED:
            self.report(
                {"ERROR"}, f"Neural ROM {state.kind} of {state.owner} failed: {state.message}"
            )
        elif state.status == jobs.CANCELLED:
            self.report({"WARNING"}, f"Neural ROM {state.kind} of {state.owner} {state.message}")
        else:
            self.report({"INFO"}, f"Neural ROM {state.kind} of {state.owner} {state.message}")

    def _stop(self, context) -> None:
        jobs.set_monitor_running(False)
        timer = getattr(self, "_timer", None)
        if timer is not None:
            try:
                context.window_manager.event_timer_remove(timer)
            except (RuntimeError, ReferenceError):
                pass
            self._timer = None
        jobs.redraw()


class NEURAL_ROM_OT_cancel_job(bpy.types.Operator):
    """Stop the job at its next safe point; what it already committed stays valid"""

    bl_idname = "neural_rom.cancel_job"
    bl_label = "Cancel Job"
    bl_options = {"INTERNAL"}

    job: bpy.props.StringProperty(
        name="Job",
        description="Job id or owner (object name); empty cancels every running job",
        default="",
        options={"SKIP_SAVE"},
    )

    def execute(self, context):
        count = jobs.cancel_job(self.job)
        if count == 0:
            what = f"for {self.job}" if self.job else ""
            self.report({"WARNING"}, f"No running Neural ROM job {what}".strip())
            return {"CANCELLED"}
        self.report({"INFO"}, f"Cancelling {count} Neural ROM job(s) at the next safe point")
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_job_monitor, NEURAL_ROM_OT_cancel_job)


# ---------------------------------------------------------------------------------------
# Registration hooks (called by ui/registration.py)
# ---------------------------------------------------------------------------------------


def _statusbar_header():
    try:
        from bl_ui.space_statusbar import STATUSBAR_HT_header
    except ImportError:
        return None
    return STATUSBAR_HT_header


def _remove_status_draw(header) -> None:
    # By module and name, so a draw function left by an earlier import (script reload)
    # goes too.
    funcs = getattr(header.draw, "_draw_funcs", None) or []
    for fn in [f for f in funcs if _same_function(f, draw_status_progress)]:
        header.remove(fn)


def _same_function(a, b) -> bool:
    return (
        getattr(a, "__module__", None) == b.__module__
        and getattr(a, "__name__", None) == b.__name__
    )


def register_ui() -> None:
    """Add the status bar progress bars."""
    header = _statusbar_header()
    if header is not None:
        _remove_status_draw(header)
        header.append(draw_status_progress)


def unregister_ui() -> None:
    """Remove the status bar draw function, then stop the job runner's app timer and cancel
    running jobs (each stops at its next safe point, keeping what it committed)."""
    header = _statusbar_header()
    if header is not None:
        _remove_status_draw(header)
    jobs.stop_polling()
