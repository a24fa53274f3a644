"""Long jobs in a child process that streams JSON-lines events (no bpy).

Blender never runs a bake or a training in its own process: :meth:`Job.start` launches
``[python, <extension root>/worker.py, <job>.spec.json]`` and the worker reports what it
does as one JSON object per line on its standard output. The parent parses that stream
on a reader thread, so :meth:`Job.poll` never blocks and Blender's UI stays live.

Event protocol (worker -> parent), one JSON object per line, each with ``"event"`` (the
kind) and ``"time"`` (Unix seconds):

==========  ===============================================================
``started`` ``pid``, ``kind``, ``python``: the worker is up.
``progress`` ``done``, ``total``, ``fraction`` (0..1), ``eta_s`` (seconds or null),
            ``message``.
``metric``  ``values``: a dict of named numbers (losses, Newton iterations, ...).
``warning`` ``message``.
``error``   ``message``, ``type`` (the exception class name).
``done``    ``result``: a JSON dict; ``result["cancelled"]`` is true when the job
            stopped at a safe point on request (what it committed stays valid).
==========  ===============================================================

Worker exit codes (see ``worker.py``): :data:`EXIT_OK` 0, :data:`EXIT_CRASH` 1 (an
unexpected exception: traceback in the log), :data:`EXIT_USER_ERROR` 2 (a
:class:`~.errors.NeuralRomError`, message in the ``error`` event), :data:`EXIT_CANCELLED`
3 (after a ``done`` event with ``cancelled``).

Cancellation: the parent writes the cancel file named in the spec (``spec["cancel_file"]``)
and, on POSIX, also sends SIGINT; the worker turns both into :func:`should_cancel`
returning True, which long loops check at their safe points (after each committed frame).
The file is the Windows-safe path; the signal only makes the request arrive sooner. A
worker whose parent died (its stdout pipe is broken) cancels itself the same way.

Everything written by a worker outside the event stream (prints, warnings, tracebacks,
C-level output) goes to the job's log file: the worker's stderr.

The package by side: :mod:`.events` (the worker's: the event stream, progress, cancel
polling), :mod:`.runner` (the parent's: :class:`Job`), :mod:`.interpreters` (which Python
runs a job, and with what), and one module per job kind (:data:`JOBS` names each kind's
handler, which ``worker.py`` runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import NeuralRomError
from ..registry.kinds import data_job_handler, kinds
from ..registry.plugins import resolve
from .events import (
    EXIT_CANCELLED,
    EXIT_CRASH,
    EXIT_OK,
    EXIT_USER_ERROR,
    Progress,
    emit,
    init_worker,
    request_cancel,
    should_cancel,
)
from .interpreters import (
    PYTHON_ENV,
    REQUIREMENTS,
    JobError,
    check_interpreter,
    default_python,
    extension_wheel_dirs,
    probe_interpreter,
    requirements,
)
from .runner import (
    CANCELLED,
    DONE,
    FAILED,
    ONE_THREAD_ENV,
    RUNNING,
    Job,
    usable_cores,
    worker_path,
)

__all__ = [
    "CANCELLED",
    "JOBS",
    "OWN_JOBS",
    "DONE",
    "EXIT_CANCELLED",
    "EXIT_CRASH",
    "EXIT_OK",
    "EXIT_USER_ERROR",
    "FAILED",
    "ONE_THREAD_ENV",
    "REQUIREMENTS",
    "RUNNING",
    "Job",
    "JobError",
    "Progress",
    "PYTHON_ENV",
    "check_interpreter",
    "default_python",
    "handler",
    "emit",
    "extension_wheel_dirs",
    "init_worker",
    "probe_interpreter",
    "request_cancel",
    "requirements",
    "usable_cores",
    "should_cancel",
    "worker_path",
]

#: The jobs that make no data kind's data: job kind (a spec's ``"kind"``) -> its handler,
#: ``"module:function"`` under the package root. A handler is ``handler(spec: dict) -> dict``
#: (a JSON-able result); it reports through :mod:`.events` and raises
#: :class:`~..errors.JobCancelled` (with an optional ``result``: what was committed) at a
#: safe point when :func:`should_cancel` says so. ``worker.py`` imports a handler's module
#: only when its kind runs, so a bake never imports torch (a train job's
#: ``training.worker`` imports it when the method needs it).
OWN_JOBS: dict[str, str] = {
    "tetrahedralize": "core.jobs.tetrahedralize:run_tetrahedralize",
    "train": "core.jobs.train:run_train",
    "simulate": "core.jobs.simulate:run_simulate",
    "compare": "core.jobs.compare:run_compare",
    "compare_methods": "core.jobs.compare_methods:run_compare_methods",
    "face_demo": "core.jobs.face:run_face_demo",
    "face_simulate": "core.jobs.face:run_face_simulate",
    "face_fit_key": "core.jobs.face:run_face_fit_key",
    "selftest": "core.jobs.selftest:run_selftest",
}


class _JobTable(Mapping):
    """Job kind -> ``"module:function"`` of every job the worker runs: the built-in data
    kinds' data jobs, each its record's ``handler`` (``bake``, ``cloth_bake``,
    ``face_setup``: :mod:`core.kinds`), then :data:`OWN_JOBS`. One table, read from the
    records, so the two never drift."""

    def _table(self) -> dict[str, str]:
        data = {
            k.data_job: k.handler
            for k in kinds()
            if k.data_job and not k.origin and isinstance(k.handler, str)
        }
        return {**data, **OWN_JOBS}

    def __getitem__(self, kind: str) -> str:
        return self._table()[kind]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return repr(self._table())


#: Job kind -> its handler (:class:`_JobTable`, a live view of the kind records and
#: :data:`OWN_JOBS`).
JOBS: Mapping[str, str] = _JobTable()


def handler(kind: str, spec: Mapping | None = None) -> Callable[[dict], dict]:
    """The handler of the job kind ``kind``: the one a data kind's record names, when
    ``spec`` is its data job (``data_kind``, ``kind_origin``:
    :func:`~..registry.data_job_handler`), else :data:`JOBS`'.

    Raises
    ------
    NeuralRomError
        No job kind of that name (the message lists the known ones).
    """
    own = data_job_handler(spec) if spec is not None else None
    if own is not None:
        return own
    ref = JOBS.get(kind)
    if ref is None:
        known = ", ".join(sorted(JOBS))
        raise NeuralRomError(f"unknown job kind {kind!r} (known: {known})")
    return resolve(ref)
