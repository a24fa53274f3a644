"""The parent side of a job: :class:`Job` launches a worker and reads its events.

:meth:`Job.start` writes the spec next to the log and launches ``[python, <extension
root>/worker.py, <job>.spec.json]``; a reader thread parses the worker's stdout (the event
protocol of :mod:`core.jobs`), so :meth:`Job.poll` never blocks and Blender's UI stays live.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .events import EXIT_CANCELLED, EXIT_CRASH, EXIT_OK, EXIT_USER_ERROR
from .interpreters import (
    JobError,
    check_interpreter,
    child_env,
    default_python,
    popen_platform_kwargs,
    requirements,
)

#: Environment of a worker that must use one core: the BLAS/OpenMP thread pools numpy and
#: scipy may start (OpenBLAS, MKL, Accelerate, OpenMP) each get one thread. For workers
#: running side by side, one per core (the variants of a bake), where more would only
#: compete for the same cores.
ONE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}

#: Job states, in :attr:`Job.state`.
RUNNING, DONE, FAILED, CANCELLED = "running", "done", "failed", "cancelled"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def worker_path() -> Path:
    """``worker.py`` at the extension root (next to ``__init__.py``)."""
    return Path(__file__).resolve().parents[2] / "worker.py"


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


_EOF = object()


def _read_events(stream, sink: queue.Queue) -> None:
    """Reader thread: parse the worker's stdout line by line into ``sink``."""
    try:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                event = json.loads(line)
                if not isinstance(event, dict) or "event" not in event:
                    raise ValueError
            except ValueError:
                event = {"event": "output", "message": line}
            sink.put(event)
    except (OSError, ValueError):
        pass
    finally:
        sink.put(_EOF)


class Job:
    """A job running in a worker process, seen from the parent (Blender).

    Create with :meth:`start`; call :meth:`poll` regularly (it never blocks) or
    :meth:`wait`. Attributes are updated by :meth:`poll` from the worker's events.

    Attributes
    ----------
    id : str
    kind : str
        ``spec["kind"]``.
    state : str
        ``"running"``, ``"done"``, ``"failed"`` or ``"cancelled"``.
    progress : float
        0..1.
    message : str
        The latest human-readable message (progress, warning, error, outcome).
    eta_s : float or None
        Seconds left, from the worker's progress events.
    result : dict or None
        The ``done`` event's result (also set for a cancelled job).
    error : dict or None
        The worker's ``error`` event.
    warnings : list of str
    metrics : dict
        Latest value of each metric.
    returncode : int or None
    heavy_modules : list of str or None
        Which of bpy and torch the worker had imported when it finished.
    log_path, spec_path, cancel_path : Path
    """

    #: Seconds a cancelled worker gets to reach a safe point before it is killed
    #: (``spec["cancel_timeout_s"]`` overrides it for a job).
    cancel_timeout_s = 120.0
    #: Seconds to wait for the event stream to close after the worker exited.
    eof_grace_s = 2.0

    def __init__(self, *, job_id: str, spec: dict, python: str, log_dir: Path):
        self.id = job_id
        self.kind = str(spec.get("kind", ""))
        self.spec = spec
        if spec.get("cancel_timeout_s") is not None:  # a job with no safe point: killed sooner
            self.cancel_timeout_s = float(spec["cancel_timeout_s"])
        self.python = python
        self.log_dir = log_dir
        self.log_path = log_dir / f"{job_id}.log"
        self.spec_path = log_dir / f"{job_id}.spec.json"
        self.cancel_path = log_dir / f"{job_id}.cancel"
        self.state = RUNNING
        self.progress = 0.0
        self.done_units = 0
        self.total_units = 0
        self.message = "starting"
        self.eta_s: float | None = None
        self.result: dict | None = None
        self.error: dict | None = None
        self.warnings: list[str] = []
        self.metrics: dict = {}
        self.returncode: int | None = None
        self.heavy_modules: list[str] | None = None
        self.started_at = time.time()
        self.finished_at: float | None = None
        self.cancel_requested = False
        self._cancel_t: float | None = None
        self._killed = False
        self._got_done = False
        self._eof = False
        self._exit_t: float | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=20)
        self._queue: queue.Queue = queue.Queue()
        self._proc: subprocess.Popen | None = None
        self.blender = False

    # -- starting ---------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        spec: dict,
        python: str | os.PathLike | None = None,
        log_dir: str | os.PathLike | None = None,
        *,
        job_id: str | None = None,
        check_python: bool = True,
        env: dict[str, str] | None = None,
        blender: bool = False,
    ) -> Job:
        """Write the spec next to the log and launch the worker on it.

        Parameters
        ----------
        spec : dict
            JSON-able job description; ``spec["kind"]`` picks the worker's handler.
            ``cancel_file`` is added.
        python : path or None
            Job interpreter; None is :func:`default_python`.
        log_dir : path or None
            Folder for ``<id>.log``, ``<id>.spec.json`` and ``<id>.cancel`` (created);
            None is ``<tmp>/neural_rom_jobs``.
        job_id : str or None
            Defaults to ``<kind>-<time>-<random>``.
        check_python : bool
            Probe the interpreter first (see :func:`check_interpreter`).
        env : dict or None
            Variables set in the worker's environment on top of the usual ones (for
            example :data:`ONE_THREAD_ENV`).
        blender : bool
            ``python`` is Blender's own binary: the worker runs as ``blender --background
            --factory-startup --python worker.py -- <spec>`` (the cloth bake, which needs
            Blender itself); the interpreter is not probed.

        Raises
        ------
        JobError
            The interpreter lacks what the job needs, the folder cannot be created, or
            the process cannot be launched.
        """
        kind = str(spec.get("kind", ""))
        if not kind:
            raise JobError('the job spec has no "kind": this is a bug in the caller')
        python = os.fspath(python) if python else default_python()
        if check_python and not blender:
            check_interpreter(python, requirements(spec))
        if log_dir is None:
            log_dir = Path(tempfile.gettempdir()) / "neural_rom_jobs"
        log_dir = Path(log_dir)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobError(
                f"cannot create the job folder {log_dir} ({exc.strerror or exc}): check the "
                "Neural ROM cache directory (scene settings) and that the disk is writable"
            ) from exc
        if job_id is None:
            job_id = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        job = cls(job_id=job_id, spec=dict(spec), python=python, log_dir=log_dir)
        job.spec["cancel_file"] = str(job.cancel_path)
        job.blender = bool(blender)
        job._launch(env)
        return job

    def _launch(self, extra_env: dict[str, str] | None = None) -> None:
        worker = worker_path()
        try:
            self.cancel_path.unlink(missing_ok=True)
            self.spec_path.write_text(json.dumps(self.spec, indent=1), encoding="utf-8")
            with open(self.log_path, "ab") as log:  # the child keeps its own handle
                log.write(
                    f"--- neural_rom job {self.id}: {self.python} {worker} {self.spec_path}\n".encode()
                )
                log.flush()
                if self.blender:
                    from ..kinds.cloth.source import blender_command

                    command = blender_command(self.python, str(worker), str(self.spec_path))
                else:
                    command = [self.python, str(worker), str(self.spec_path)]
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env={**child_env(self.python), **(extra_env or {})},
                    close_fds=True,
                    **popen_platform_kwargs(),
                )
        except OSError as exc:
            raise JobError(
                f"could not start the job worker with {self.python} ({exc.strerror or exc}): "
                "set Preferences > Neural ROM > Python, or check the disk is writable"
            ) from exc
        threading.Thread(
            target=_read_events,
            args=(self._proc.stdout, self._queue),
            name=f"neural_rom-{self.id}",
            daemon=True,
        ).start()

    # -- watching ---------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return None if self._proc is None else self._proc.pid

    @property
    def finished(self) -> bool:
        return self.state != RUNNING

    @property
    def elapsed_s(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    def poll(self) -> list[dict]:
        """Take the events that arrived since the last call; never blocks.

        Returns the events (dicts, see the module docstring) in order. When the worker
        has exited, the job's final state is set.
        """
        events = []
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                break
            if event is _EOF:
                self._eof = True
                continue
            self._apply(event)
            events.append(event)
        if self.state == RUNNING and self._proc is not None:
            rc = self._proc.poll()
            if rc is None:
                if (
                    self._cancel_t is not None
                    and time.monotonic() - self._cancel_t > self.cancel_timeout_s
                ):
                    self._kill()
            else:
                now = time.monotonic()
                if self._exit_t is None:
                    self._exit_t = now
                # A grandchild may hold the pipe open: do not wait for its EOF forever.
                if self._eof or now - self._exit_t > self.eof_grace_s:
                    self._finish(rc)
        return events

    def _apply(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "progress":
            self.done_units = int(event.get("done", 0))
            self.total_units = int(event.get("total", 0))
            fraction = event.get("fraction")
            if fraction is None and self.total_units:
                fraction = self.done_units / self.total_units
            self.progress = float(min(max(fraction or 0.0, 0.0), 1.0))
            self.eta_s = event.get("eta_s")
            self.message = str(event.get("message") or f"{self.done_units}/{self.total_units}")
        elif kind == "metric":
            values = event.get("values")
            if isinstance(values, dict):
                self.metrics.update(values)
        elif kind == "warning":
            self.warnings.append(str(event.get("message", "")))
            self.message = f"warning: {event.get('message', '')}"
        elif kind == "error":
            self.error = event
            self.message = str(event.get("message", "error"))
        elif kind == "done":
            self._got_done = True
            self.heavy_modules = event.get("heavy_modules")
            result = event.get("result")
            self.result = result if isinstance(result, dict) else {"value": result}
        elif kind == "output":
            self._output.append(str(event.get("message", "")))

    def _finish(self, rc: int) -> None:
        self.returncode = rc
        self.finished_at = time.time()
        if self._eof and self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()  # the reader thread has ended
        try:
            self.cancel_path.unlink(missing_ok=True)
        except OSError:
            pass
        log = str(self.log_path)
        cancelled = bool(self.result and self.result.get("cancelled"))
        if self._got_done and (cancelled or rc == EXIT_CANCELLED):
            self.state = CANCELLED
            self.result = {**(self.result or {}), "cancelled": True}
            self.message = "cancelled: what was committed before the cancel is kept"
        elif self._got_done and self.error is None:
            # The result was reported (and committed); a failure while the interpreter
            # shut down after that does not undo it.
            self.state = DONE
            self.progress = 1.0
            self.eta_s = 0.0
            self.message = f"done in {self.elapsed_s:.1f} s"
            if rc != EXIT_OK:
                self.warnings.append(
                    f"the worker {_describe_exit(rc)} after finishing (log: {log})"
                )
        elif self.cancel_requested:
            # Stopped (or was killed) before it could report: still a cancel, not a crash.
            self.state = CANCELLED
            self.result = {"cancelled": True}
            how = "was terminated" if self._killed else f"stopped ({_describe_exit(rc)})"
            self.message = (
                f"cancelled: the worker {how} before reporting; committed work is kept (log: {log})"
            )
        elif self.error is not None and rc in (EXIT_USER_ERROR, EXIT_CRASH):
            self.state = FAILED
            self.message = f"{self.error.get('message', 'error')} (log: {log})"
        else:
            self.state = FAILED
            tail = self.log_tail(8)
            why = _describe_exit(rc) if rc != 0 else "exited without finishing"
            self.message = f"the job worker crashed ({why}); see the log {log}" + (
                f"\nlast lines of the log:\n{tail}" if tail else ""
            )
        if self.state != DONE:
            self.eta_s = None

    @property
    def crashed(self) -> bool:
        """True for a failure that is not a reported user error (a bug, a kill, a crash)."""
        return self.state == FAILED and not (
            self.error is not None and self.returncode == EXIT_USER_ERROR
        )

    def log_tail(self, n: int = 20) -> str:
        """The last ``n`` lines of the worker's log."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(size - 16384, 0))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-n:])

    # -- control ----------------------------------------------------------------------

    def cancel(self, *, force: bool = False) -> None:
        """Ask the worker to stop at its next safe point (or kill it now with ``force``).

        What it committed stays valid. A worker that does not stop within
        :attr:`cancel_timeout_s` is killed by :meth:`poll`.
        """
        if self.state != RUNNING or self._proc is None:
            return
        self.cancel_requested = True
        if self._cancel_t is None:
            self._cancel_t = time.monotonic()
            self.message = "cancelling at the next safe point"
        try:
            self.cancel_path.touch()
        except OSError:
            pass
        if force:
            self._kill()
        elif os.name != "nt" and self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGINT)
            except OSError:
                pass

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self.cancel_requested = True
            self._killed = True
            try:
                self._proc.kill()
            except OSError:
                pass

    def wait(
        self,
        timeout: float | None = None,
        *,
        interval: float = 0.05,
        on_event: Callable[[dict], None] | None = None,
    ) -> str:
        """Poll until the job finishes or ``timeout`` seconds pass; returns :attr:`state`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for event in self.poll():
                if on_event is not None:
                    on_event(event)
            if self.state != RUNNING:
                return self.state
            if deadline is not None and time.monotonic() >= deadline:
                return self.state
            time.sleep(interval)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.state} {self.progress:.0%} {self.message!r}>"
