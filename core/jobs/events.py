"""The worker side of a job: its event stream, progress and cancel polling.

What runs inside the child (``worker.py`` and each job kind's handler): :func:`init_worker`
takes the real stdout for the event stream, :func:`emit` writes one event (the protocol in
:mod:`core.jobs`), :class:`Progress` adds an ETA, and :func:`should_cancel` says when the
parent asked the job to stop at its next safe point. No bpy, no torch.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..data.files import json_default
from ..errors import JobCancelled

#: The worker's exit codes (``worker.py``; the module docstring of :mod:`core.jobs`).
EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USER_ERROR = 2
EXIT_CANCELLED = 3


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


def log(message: str) -> None:
    """A line in the job's log (the worker's stderr), not an event."""
    print(f"neural_rom bake: {message}", file=sys.stderr, flush=True)


def frame_meter(what: str) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` that reports frames with an ETA."""
    meter = Progress(0)

    def progress(done: int, total: int) -> None:
        meter.total = int(total)
        meter.update(int(done), f"{what} frame {done}/{total}")

    return progress


def frames_job(run: Callable[..., dict], spec: dict, what: str) -> dict:
    """``run(spec, progress=, should_cancel=)`` with per-frame progress; a cancel's result
    says the file ``spec["out"]`` was not written (the previous one stays)."""
    try:
        return run(spec, progress=frame_meter(what), should_cancel=should_cancel)
    except JobCancelled as exc:
        exc.result = {"path": str(spec.get("out", "")), "written": False}
        raise
