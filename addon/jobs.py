"""Blender side of the job runner: a registry of running jobs, their polling and cancel.

:func:`start_job` launches a :class:`~..core.jobs.Job` (a worker child process). Blender's
process never blocks on it:

- interactively it returns at once; the modal operator ``neural_rom.job_monitor``
  (:mod:`..ui.operators.jobs`, with Cancel and the status bar's progress) polls every job
  on a 0.1 s timer, calls each job's ``on_done`` in Blender's main thread, reports each
  outcome once (info, warning or error), redraws the sidebar and the status bar, and
  cancels every job it monitors on Esc. A persistent ``bpy.app.timers`` tick polls while no
  monitor runs (loading a file ends modal operators) and starts a new monitor;
- with ``bpy.app.background`` (``blender --background``, the PyPI ``bpy``) it runs the
  same worker to completion in the foreground, printing progress lines to stdout.
  Ctrl+C cancels at the next safe point; a second Ctrl+C kills the worker.

``on_done(result)`` is called for jobs that finished (``status == "done"``) and for jobs
that were cancelled (``result["cancelled"]`` is True: what they committed is valid and
listed in the result); a failed job calls nothing and keeps its message (which names the
log) in :func:`last_job`.
"""

from __future__ import annotations

import atexit
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bpy

from ..core import jobs as core_jobs
from ..core.errors import JobCancelled, NeuralRomError
from . import prefs

RUNNING, DONE, FAILED, CANCELLED = (
    core_jobs.RUNNING,
    core_jobs.DONE,
    core_jobs.FAILED,
    core_jobs.CANCELLED,
)

TICK_S = 0.1
_REDRAW_AREAS = {"VIEW_3D", "PROPERTIES", "STATUSBAR"}


@dataclass(frozen=True)
class JobState:
    """A snapshot of one job, for panels and scripts.

    ``status`` is ``"running"``, ``"done"``, ``"failed"`` or ``"cancelled"``; ``progress``
    is 0..1; ``eta_s`` seconds left (None when unknown); ``message`` the latest line (for
    a failure: what went wrong and the log path).
    """

    id: str
    owner: str
    kind: str
    status: str
    progress: float
    message: str
    eta_s: float | None
    log_path: str
    elapsed_s: float
    result: dict | None = None
    warnings: tuple[str, ...] = ()


@dataclass
class _Entry:
    job: core_jobs.Job
    owner: str
    on_done: Callable[[dict], None] | None
    handled: bool = False
    note: str = ""  # set when on_done itself failed
    reported: bool = False

    def state(self) -> JobState:
        job = self.job
        message = job.message if not self.note else f"{job.message}; {self.note}"
        return JobState(
            id=job.id,
            owner=self.owner,
            kind=job.kind,
            status=job.state if not self.note else FAILED,
            progress=float(job.progress),
            message=message,
            eta_s=job.eta_s,
            log_path=str(job.log_path),
            elapsed_s=job.elapsed_s,
            result=job.result,
            warnings=tuple(job.warnings),
        )


_JOBS: dict[str, _Entry] = {}
_monitor_running = False


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


def job_log_dir(spec: dict) -> Path | None:
    """Where a job's log, spec and cancel file go: ``spec["log_dir"]``, else
    ``<out_dir>/logs`` (next to what the job writes), else None (a temp folder)."""
    if spec.get("log_dir"):
        return Path(spec["log_dir"])
    if spec.get("out_dir"):
        return Path(spec["out_dir"]) / "logs"
    return None


def start_job(
    context,
    spec: dict,
    *,
    owner: str,
    on_done: Callable[[dict], None] | None = None,
) -> str:
    """Start a job from a JSON-able ``spec`` for ``owner`` (an object name); returns its id.

    Interactive: returns at once; the job monitor polls it. Background: runs it to the
    end, printing progress, and returns only when it finished.

    Raises
    ------
    NeuralRomError
        The owner already has a running job; the job interpreter lacks numpy/scipy (or
        what ``spec["needs"]`` lists: torch for a method that trains with it); the log
        folder cannot be created (:class:`~..core.jobs.JobError`). In background
        mode also: the job failed (``JobError``, ``crashed`` True for a crash or a
        kill) or was cancelled (:class:`JobCancelled`, after ``on_done`` recorded what
        was committed).
    """
    _check_owner_free(owner)
    python = prefs.job_python(context)
    needs = spec.get("needs")  # what this job's interpreter must import, when it says
    # A job that needs Blender itself (the cloth bake) runs Blender's own binary in
    # --background; the PyPI bpy has no binary, and its Python is the one with bpy.
    in_blender = spec.get("runs_in") == "blender"
    blender = in_blender and bool(bpy.app.binary_path)
    if blender:
        python = bpy.app.binary_path
    if needs is not None and not in_blender:
        core_jobs.check_interpreter(python, tuple(needs))
    job = core_jobs.Job.start(
        spec,
        python,
        job_log_dir(spec),
        check_python=needs is None and not in_blender,
        blender=blender,
    )
    entry = _track(job, owner, on_done)
    if bpy.app.background:
        _run_foreground(entry)
        return job.id
    _ensure_polling(context)
    return job.id


def _check_owner_free(owner: str) -> None:
    for entry in _JOBS.values():
        if entry.owner == owner and entry.job.state == RUNNING:
            raise NeuralRomError(
                f"{owner} already has a running {entry.job.kind} job: wait for it to finish "
                "or cancel it first"
            )


def _track(job: core_jobs.Job, owner: str, on_done: Callable[[dict], None] | None) -> _Entry:
    """Add a started job to the registry (keeping only the latest finished one per owner)."""
    _check_owner_free(owner)
    for job_id in [k for k, e in _JOBS.items() if e.owner == owner and e.job.finished]:
        del _JOBS[job_id]
    entry = _Entry(job=job, owner=owner, on_done=on_done)
    _JOBS[job.id] = entry
    return entry


def active_jobs(owner: str | None = None, *, include_finished: bool = False) -> list[JobState]:
    """Running jobs (of ``owner`` when given), oldest first.

    With ``include_finished``, the last finished job of each owner too (its status says
    how it ended) until the owner starts another one or :func:`clear_finished`.
    """
    return [
        e.state()
        for e in _JOBS.values()
        if (owner is None or e.owner == owner) and (include_finished or not e.job.finished)
    ]


def last_job(owner: str) -> JobState | None:
    """The newest job of ``owner``, running or finished, or None."""
    entries = [e for e in _JOBS.values() if e.owner == owner]
    return entries[-1].state() if entries else None


def get_job(job_id: str) -> JobState | None:
    entry = _JOBS.get(job_id)
    return None if entry is None else entry.state()


def cancel_job(owner_or_id: str = "", *, force: bool = False) -> int:
    """Ask a job (by id), every job of an owner (object name), or with ``""`` every job,
    to stop at its next safe point; returns how many running jobs were asked."""
    if owner_or_id in _JOBS:
        targets = [_JOBS[owner_or_id]]
    else:
        targets = [e for e in _JOBS.values() if not owner_or_id or e.owner == owner_or_id]
    count = 0
    for entry in targets:
        if entry.job.state == RUNNING:
            entry.job.cancel(force=force)
            count += 1
    return count


def clear_finished(owner: str | None = None) -> None:
    """Forget finished jobs (of ``owner`` when given)."""
    for job_id in [
        k
        for k, e in _JOBS.items()
        if e.job.finished and e.handled and (owner is None or e.owner == owner)
    ]:
        del _JOBS[job_id]


def poll_jobs() -> list[JobState]:
    """Drain every job's events; finish the jobs that ended (calling their ``on_done``).

    Returns the jobs that finished during this call. Main thread only.
    """
    finished = []
    for entry in list(_JOBS.values()):
        if entry.handled:
            continue
        entry.job.poll()
        if entry.job.finished:
            _finish(entry)
            finished.append(entry.state())
    return finished


def any_running() -> bool:
    return any(not e.job.finished for e in _JOBS.values())


def take_unreported() -> list[JobState]:
    """Finished jobs not yet shown to the user (each is returned once)."""
    out = []
    for entry in _JOBS.values():
        if entry.handled and not entry.reported:
            entry.reported = True
            out.append(entry.state())
    return out


# ---------------------------------------------------------------------------------------
# Finishing
# ---------------------------------------------------------------------------------------


def _finish(entry: _Entry) -> None:
    if entry.handled:
        return
    entry.handled = True
    job = entry.job
    if job.state in (DONE, CANCELLED) and entry.on_done is not None:
        try:
            entry.on_done(dict(job.result or {}))
        except Exception as exc:  # noqa: BLE001 (any failure of the callback is reported)
            traceback.print_exc()
            entry.note = f"could not record the result on {entry.owner}: {exc}"
    state = entry.state()
    print(f"neural_rom: [{job.kind} {entry.owner}] {state.status}: {state.message}")


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def format_state(state: JobState) -> str:
    """One line: ``bake Cube 42% ETA 0:12 frame 20/48``."""
    eta = format_eta(state.eta_s)
    text = f"{state.kind} {state.owner} {state.progress:.0%}"
    if eta and state.status == RUNNING:
        text += f" ETA {eta}"
    if state.message:
        text += f"  {state.message}"
    return text


class _Printer:
    """Progress lines for background runs, at most a few per second."""

    def __init__(self, entry: _Entry, interval: float = 0.5):
        self.entry = entry
        self.interval = interval
        self.last = -1e9

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        prefix = f"neural_rom: [{self.entry.job.kind} {self.entry.owner}]"
        if kind == "progress":
            now = time.monotonic()
            final = event.get("done") == event.get("total")
            if now - self.last < self.interval and not final:
                return
            self.last = now
            eta = format_eta(event.get("eta_s"))
            print(
                f"{prefix} {100 * float(event.get('fraction') or 0):5.1f}% "
                f"{event.get('message', '')}" + (f"  ETA {eta}" if eta else ""),
                flush=True,
            )
        elif kind == "warning":
            print(f"{prefix} warning: {event.get('message', '')}", flush=True)
        elif kind == "error":
            print(f"{prefix} error: {event.get('message', '')}", flush=True)


def _run_foreground(entry: _Entry) -> None:
    job = entry.job
    printer = _Printer(entry)
    print(f"neural_rom: [{job.kind} {entry.owner}] started (log: {job.log_path})", flush=True)
    try:
        job.wait(interval=TICK_S, on_event=printer)
    except KeyboardInterrupt:
        print(
            f"neural_rom: [{job.kind} {entry.owner}] cancelling at the next safe point "
            "(Ctrl+C again kills the worker)",
            flush=True,
        )
        job.cancel()
        try:
            job.wait(interval=TICK_S, on_event=printer)
        except KeyboardInterrupt:
            job.cancel(force=True)
            job.wait(interval=TICK_S)
    _finish(entry)
    entry.reported = True  # the exception (or the printed lines) tell the user
    if entry.note:
        raise NeuralRomError(entry.note)
    if job.state == FAILED:
        raise core_jobs.JobError(job.message, log_path=str(job.log_path), crashed=job.crashed)
    if job.state == CANCELLED:
        raise JobCancelled(f"{job.kind} of {entry.owner} {job.message}")


# ---------------------------------------------------------------------------------------
# Interactive polling: an app timer (always) and the modal monitor (Esc, status bar)
# ---------------------------------------------------------------------------------------


def _tick() -> float | None:
    """Persistent app timer: polls while no monitor does (a file load ends the monitor)
    and starts a new monitor; stops when no job runs."""
    try:
        if not _monitor_running:
            poll_jobs()
            redraw()
        if not any_running():
            return None
        if not _monitor_running:
            _start_monitor(bpy.context)
    except Exception:  # noqa: BLE001 (a timer that raises is dropped by Blender: keep polling)
        traceback.print_exc()
    return TICK_S * 2.5


def monitor_running() -> bool:
    """Whether the modal monitor (``neural_rom.job_monitor``) is running."""
    return _monitor_running


def set_monitor_running(running: bool) -> None:
    """Called by the monitor as it starts and stops: while it runs, the app timer leaves
    the polling to it."""
    global _monitor_running
    _monitor_running = running


def _ensure_polling(context) -> None:
    if not bpy.app.timers.is_registered(_tick):
        bpy.app.timers.register(_tick, first_interval=TICK_S, persistent=True)
    _start_monitor(context)


def _start_monitor(context) -> bool:
    if _monitor_running or bpy.app.background:
        return _monitor_running
    window = getattr(context, "window", None)
    wm = getattr(context, "window_manager", None) or bpy.context.window_manager
    if window is None and wm is not None and len(wm.windows):
        window = wm.windows[0]
    if window is None:
        return False
    try:
        with context.temp_override(window=window):
            bpy.ops.neural_rom.job_monitor("INVOKE_DEFAULT")
    except (RuntimeError, AttributeError, TypeError):
        return False  # the app timer keeps polling; the monitor is retried on its next tick
    return _monitor_running


def redraw() -> None:
    wm = getattr(bpy.context, "window_manager", None)
    if wm is None:
        return
    for window in wm.windows:
        screen = window.screen
        if screen is None:
            continue
        for area in screen.areas:
            if area.type in _REDRAW_AREAS:
                area.tag_redraw()


def status_text() -> str:
    """The status bar line while jobs run (empty when none)."""
    states = active_jobs()
    if not states:
        return ""
    parts = []
    for s in states:
        eta = format_eta(s.eta_s)
        parts.append(f"{s.kind} {s.owner} {s.progress:.0%}" + (f" (ETA {eta})" if eta else ""))
    return "Neural ROM: " + ", ".join(parts) + "  ·  Esc to cancel"


def stop_polling() -> None:
    """Stop the app timer and cancel every running job (each stops at its next safe point,
    keeping what it committed): the add-on is being unregistered."""
    if bpy.app.timers.is_registered(_tick):
        bpy.app.timers.unregister(_tick)
    cancel_job("")


@atexit.register
def _cancel_on_exit() -> None:
    # Blender quitting: workers stop at their next safe point instead of running on.
    for entry in list(_JOBS.values()):
        try:
            entry.job.cancel()
        except OSError as exc:  # the interpreter is exiting: report, never raise
            print(f"neural_rom: could not cancel {entry.job.id}: {exc}", file=sys.stderr)
