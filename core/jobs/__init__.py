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
"""

from __future__ import annotations

import collections
import json
import math
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..data.files import json_default
from ..errors import NeuralRomError

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_CRASH",
    "EXIT_OK",
    "EXIT_USER_ERROR",
    "ONE_THREAD_ENV",
    "Job",
    "JobError",
    "Progress",
    "PYTHON_ENV",
    "check_interpreter",
    "default_python",
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

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USER_ERROR = 2
EXIT_CANCELLED = 3

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

#: Python packages each job kind needs in the job interpreter (numpy is always needed); a
#: train job needs torch too when its method's record says so (:func:`requirements`).
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "bake": ("numpy", "scipy"),
    "train": ("numpy", "scipy"),
    "simulate": ("numpy", "scipy"),
    "compare": ("numpy", "scipy"),
    "compare_methods": ("numpy", "scipy"),
    "selftest": ("numpy",),
}


class JobError(NeuralRomError):
    """A job could not start, or its worker failed.

    Attributes
    ----------
    log_path : str or None
        The worker's log (its stderr), when there is one.
    crashed : bool
        True when the worker died or hit a bug (exit code 1, killed), False for an error
        the user can act on (bad input, missing interpreter, ...).
    """

    def __init__(self, message: str, *, log_path: str | None = None, crashed: bool = False):
        super().__init__(message)
        self.log_path = log_path
        self.crashed = crashed


# ---------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------

_out = None  # the text stream events go to (the worker's real stdout)
_out_lock = threading.Lock()
_cancel_file: str | None = None
_cancel_flag = False


def init_worker(cancel_file: str | os.PathLike | None = None) -> None:
    """Set up a worker process: events on the real stdout, everything else to the log.

    File descriptor 1 is kept (duplicated) for the event stream, then pointed at stderr
    so prints from any library, Python or C, land in the log instead of corrupting the
    stream. SIGINT (and SIGBREAK on Windows) become a cancel request instead of a
    KeyboardInterrupt at an arbitrary point.

    Parameters
    ----------
    cancel_file : path or None
        The parent asks for a cancel by creating this file.
    """
    global _out, _cancel_file, _cancel_flag
    _cancel_file = os.fspath(cancel_file) if cancel_file else None
    _cancel_flag = False
    try:
        sys.stdout.flush()
        fd = os.dup(1)
        _out = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    except (OSError, AttributeError, ValueError):  # no usable stdout: events go nowhere
        _out = None
    for name in ("SIGINT", "SIGBREAK"):
        if hasattr(signal, name):
            try:
                signal.signal(getattr(signal, name), _on_signal)
            except ValueError:  # not the main thread
                pass


def _on_signal(signum, frame) -> None:
    request_cancel()


def request_cancel() -> None:
    """Make :func:`should_cancel` return True in this process."""
    global _cancel_flag
    _cancel_flag = True


def should_cancel() -> bool:
    """True once the parent asked this worker to stop (cancel file, signal or lost parent)."""
    if _cancel_flag:
        return True
    return _cancel_file is not None and os.path.exists(_cancel_file)


def _event_default(obj: Any) -> Any:
    # An event never fails the job: what the package's encoder cannot encode goes as its repr.
    try:
        return json_default(obj)
    except TypeError:
        return repr(obj)


def emit(kind: str, /, **fields: Any) -> None:
    """Write one event (a JSON object on one line) to the event stream, flushed.

    Before :func:`init_worker` (a handler run in-process, in a test) events go to
    ``sys.stdout``. A broken pipe means the parent is gone: the job cancels itself at
    its next safe point rather than computing for nobody.
    """
    record = {"event": kind, "time": time.time(), **fields}
    line = json.dumps(record, default=_event_default) + "\n"
    stream = _out if _out is not None else sys.stdout
    with _out_lock:
        try:
            stream.write(line)
            stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            request_cancel()


class Progress:
    """Progress events with an ETA, for a job of ``total`` units (frames, epochs, ...).

    The rate is measured from the first :meth:`update` on, so start-up work (loading,
    factorizations) does not inflate the estimate.

    Parameters
    ----------
    total : int
        Number of units of work.
    min_interval : float
        Seconds between two emitted events; updates in between are dropped, except the
        last one (``done == total``).
    """

    def __init__(self, total: int, *, min_interval: float = 0.0):
        self.total = max(int(total), 0)
        self.min_interval = float(min_interval)
        self._t0: float | None = None
        self._done0 = 0
        self._last_emit = -math.inf

    def eta(self, done: int) -> float | None:
        """Seconds left, or None before there is a rate to extrapolate."""
        now = time.monotonic()
        if self._t0 is None or done <= self._done0:
            return None
        rate = (now - self._t0) / (done - self._done0)
        return max(self.total - done, 0) * rate

    def update(self, done: int, message: str = "", **extra: Any) -> None:
        """Emit a ``progress`` event for ``done`` of :attr:`total` units."""
        now = time.monotonic()
        if self._t0 is None:
            self._t0, self._done0 = now, int(done)
        if done < self.total and now - self._last_emit < self.min_interval:
            return
        self._last_emit = now
        fraction = 1.0 if self.total == 0 else min(max(done / self.total, 0.0), 1.0)
        emit(
            "progress",
            done=int(done),
            total=self.total,
            fraction=fraction,
            eta_s=self.eta(done),
            message=message or f"{done}/{self.total}",
            **extra,
        )


# ---------------------------------------------------------------------------------------
# Interpreter probe
# ---------------------------------------------------------------------------------------

_PROBE_MARK = "NEURAL_ROM_PROBE:"
_PROBE = r"""
import importlib, json, sys
out = {"python": sys.version.split()[0], "executable": sys.executable}
for name in ("numpy", "scipy"):
    try:
        out[name] = getattr(importlib.import_module(name), "__version__", "unknown")
    except Exception:
        out[name] = None
out["torch"], out["cuda"] = None, None
if CHECK_TORCH:
    try:
        torch = importlib.import_module("torch")  # in the probed child, never in core
        out["torch"] = torch.__version__
        out["cuda"] = bool(torch.cuda.is_available())
    except Exception:
        pass
else:
    try:
        import importlib.metadata, importlib.util
        if importlib.util.find_spec("torch") is not None:
            out["torch"] = importlib.metadata.version("torch")
    except Exception:
        pass
sys.stdout.write("MARK" + json.dumps(out) + "\n")
"""

# Successful probes only (a missing package may be installed a minute later), for a while.
_probe_cache: dict[tuple, tuple[float, dict]] = {}
_PROBE_TTL_S = 300.0


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


#: Environment variable naming the job interpreter where nothing closer does (the add-on's
#: preferences, the CLI's ``--python``): a Python 3.11 + torch trainer for Blender 5's Python
#: 3.13, which has no CPU torch build, or a farm's shared environment.
PYTHON_ENV = "NEURAL_ROM_PYTHON"


def default_python() -> str:
    """The job interpreter when none is given: ``$NEURAL_ROM_PYTHON`` if set, else the
    interpreter running this code (in Blender, Blender's bundled Python)."""
    return os.environ.get(PYTHON_ENV) or sys.executable


def requirements(spec: dict) -> tuple[str, ...]:
    """What the interpreter of the job ``spec`` must import: ``spec["needs"]`` when it
    says, else :data:`REQUIREMENTS` of its kind, with torch for a train job whose method's
    registry record ``needs_torch`` (the linear method trains with numpy and scipy)."""
    if spec.get("needs") is not None:
        return tuple(spec["needs"])
    kind = str(spec.get("kind", ""))
    needs = REQUIREMENTS.get(kind, ("numpy",))
    if kind == "train" and spec.get("method"):
        from .. import registry

        try:
            method = registry.get(str(spec["method"]))
        except NeuralRomError:
            return needs  # the worker says which methods it knows
        if method.needs_torch:
            needs = (*needs, "torch")
    return needs


def probe_interpreter(
    python: str | os.PathLike, *, check_torch: bool = False, timeout: float = 60.0
) -> dict:
    """What a job interpreter can import, from a tiny ``python -c`` script.

    Parameters
    ----------
    python : path
        The interpreter to probe.
    check_torch : bool
        Import torch and ask for CUDA (seconds); otherwise only its installed version
        is looked up and ``cuda`` is None.
    timeout : float
        Seconds before the probe is abandoned.

    Returns
    -------
    dict
        ``python`` (version), ``executable``, ``numpy``, ``scipy``, ``torch`` (version
        strings, None when missing), ``cuda`` (bool, None when not checked) and
        ``error`` (None, or why the interpreter could not be run). Probes that found
        everything they looked for are cached for a few minutes per interpreter path.
    """
    python = os.fspath(python)
    try:
        mtime = os.stat(python).st_mtime_ns
    except OSError:
        mtime = None
    key = (python, mtime, bool(check_torch))
    cached = _probe_cache.get(key)
    if cached is not None and time.monotonic() - cached[0] < _PROBE_TTL_S:
        return dict(cached[1])
    result = {
        "python": None,
        "executable": python,
        "numpy": None,
        "scipy": None,
        "torch": None,
        "cuda": None,
        "error": None,
    }
    code = _PROBE.replace("CHECK_TORCH", repr(bool(check_torch))).replace("MARK", _PROBE_MARK)
    try:
        proc = subprocess.run(
            [python, "-c", code],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=timeout,
            env=_child_env(python),
            **_popen_platform_kwargs(),
        )
    except FileNotFoundError:
        result["error"] = "no such file"
        return result
    except PermissionError:
        result["error"] = "not executable"
        return result
    except subprocess.TimeoutExpired:
        result["error"] = f"did not answer within {timeout:g} s"
        return result
    except OSError as exc:
        result["error"] = exc.strerror or str(exc)
        return result
    found = None
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith(_PROBE_MARK):
            try:
                found = json.loads(line[len(_PROBE_MARK) :])
            except ValueError:
                found = None
    if found is None:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        result["error"] = f"exit code {proc.returncode}" + (f": {' | '.join(tail)}" if tail else "")
        return result
    result.update({k: found.get(k) for k in ("python", "numpy", "scipy", "torch", "cuda")})
    result["executable"] = found.get("executable") or python
    wanted = ("numpy", "scipy", "torch") if check_torch else ("numpy", "scipy")
    if mtime is not None and all(result[name] is not None for name in wanted):
        _probe_cache[key] = (time.monotonic(), dict(result))
    return result


def check_interpreter(python: str | os.PathLike, needs: tuple[str, ...] = ("numpy",)) -> dict:
    """Probe ``python`` and raise :class:`JobError` if it cannot run a job needing ``needs``.

    Returns the probe dict (see :func:`probe_interpreter`).
    """
    python = os.fspath(python)
    info = probe_interpreter(python, check_torch=False)
    fix = (
        "set Preferences > Neural ROM > Job Python (or the command line's --python, or "
        f"${PYTHON_ENV})"
    )
    if info["error"] is not None:
        raise JobError(
            f"the job interpreter {python} could not be run ({info['error']}): {fix} to a "
            "Python with numpy and scipy, or clear it to use Blender's own"
        )
    missing = [name for name in ("numpy", *needs) if info.get(name) is None]
    if missing:
        name = missing[0]
        install = "numpy/scipy" if name in ("numpy", "scipy") else name
        raise JobError(
            f"the job interpreter {python} has no {name}: {fix}, or install {install} there"
        )
    return info


# ---------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------


def worker_path() -> Path:
    """``worker.py`` at the extension root (next to ``__init__.py``)."""
    return Path(__file__).resolve().parents[2] / "worker.py"


def _popen_platform_kwargs() -> dict:
    if os.name == "nt":  # no console window; own group so CTRL_BREAK reaches only it
        flags = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        flags |= getattr(subprocess, "CREATE_NO_WINDOW", 0)
        return {"creationflags": flags}
    return {}


def _same_interpreter(python: str) -> bool:
    try:
        return os.path.samefile(python, sys.executable)
    except OSError:
        return False


def extension_wheel_dirs(
    package_dir: str | os.PathLike | None = None,
    version: tuple[int, int] | None = None,
) -> list[str]:
    """Blender's site-packages for extension wheels that serve this package, where it exists.

    Blender installs the wheels an extension zip ships (scipy, tetgen, meshio, ...) into
    ``<extensions>/.local/lib/python<X>.<Y>/site-packages`` and puts that folder on its own
    ``sys.path``. Installed, this package sits at ``<extensions>/<repository>/<id>/``, so the
    folder is found from here too: the fallback for when Blender's ``sys.path`` lacks it
    (it adds the folder only once it exists). Only under a folder named ``extensions``
    (Blender's user extensions folder): a checkout at ``~/src/neural_rom`` must not hand a
    job ``~/.local/lib/python3.11/site-packages``, which Blender's Python ignores.

    Parameters
    ----------
    package_dir : path or None
        The extension's root folder; default: the one this module belongs to (as
        imported: a symbolic link into the extensions folder counts as installed).
    version : (int, int) or None
        Python ``(major, minor)`` the wheels were installed for; default: this interpreter's.

    Returns
    -------
    list of str
        The folder, when the package is installed as an extension and the folder exists;
        otherwise an empty list.
    """
    if package_dir is None:
        package_dir = Path(os.path.abspath(__file__)).parents[2]
    extensions = Path(package_dir).parent.parent
    if extensions.name != "extensions":
        return []
    major, minor = version if version is not None else sys.version_info[:2]
    site = extensions / ".local" / "lib" / f"python{major}.{minor}" / "site-packages"
    return [str(site)] if site.is_dir() else []


def _child_env(python: str) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"
    if _same_interpreter(python):
        # Blender adds folders to sys.path at run time (the extensions' wheels, user
        # modules) that its bundled Python does not know on its own: pass them on, and
        # the extensions' wheel folder even where this process's sys.path lacks it. Only
        # for the same interpreter: another Python must not see binaries built for this
        # one. Not Blender's scripts/modules, whose pure-Python bpy needs Blender itself.
        paths = [
            p
            for p in (*sys.path, *extension_wheel_dirs())
            if p and os.path.isdir(p) and not os.path.isfile(os.path.join(p, "bpy", "__init__.py"))
        ]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


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
                    env={**_child_env(self.python), **(extra_env or {})},
                    close_fds=True,
                    **_popen_platform_kwargs(),
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
