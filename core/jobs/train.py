"""The train job (``kind: "train"``), run by ``training.worker`` (which imports torch when
the method needs it), in this worker or in a child worker with one thread
(:func:`train_in_child`, Compare Methods' lanes)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import JobCancelled, NeuralRomError
from ..registry.plugins import PACKAGE, resolve
from .events import emit, log, should_cancel
from .runner import CANCELLED, DONE, ONE_THREAD_ENV, Job


def run_train(spec: dict, progress=None) -> dict:
    """``kind: "train"``: delegated to ``training.worker.run`` (imports torch lazily);
    ``progress(fraction, message)``, when given, takes the training's progress instead of
    this job's events (Compare Methods' lanes)."""
    try:
        run = resolve("training.worker:run")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"{PACKAGE}.training"):
            raise NeuralRomError(
                "this version of Neural ROM cannot train yet: update the extension"
            ) from exc
        raise NeuralRomError(
            f"training needs the Python package {exc.name!r}: install it in the job "
            "interpreter (Preferences > Neural ROM > Python)"
        ) from exc
    return run(spec, progress=progress)


def train_in_child(train_spec: dict, parent: dict, progress=None) -> dict:
    """Run the train job ``train_spec`` in a child worker with one BLAS and torch thread
    (:data:`.runner.ONE_THREAD_ENV`), waiting for it; this worker's cancel is forwarded to
    it, its progress to ``progress(fraction, message)``. Returns its result; raises :class:`JobCancelled` when it was cancelled, a
    NeuralRomError with its message when it failed (a RuntimeError when it crashed)."""
    cancel_file = parent.get("cancel_file")
    log_dir = Path(cancel_file).parent if cancel_file else Path(parent.get("log_dir") or ".")
    parent_id = Path(cancel_file).name.removesuffix(".cancel") if cancel_file else "compare"
    child = {k: v for k, v in train_spec.items() if k != "cancel_file"}
    job = Job.start(
        child,
        sys.executable,
        log_dir,
        job_id=f"{parent_id}.{child.get('method', 'train')}",
        check_python=False,
        env=ONE_THREAD_ENV,
    )
    log(f"{child.get('method')}: training in worker pid {job.pid}, log {job.log_path}")
    while not job.finished:
        if should_cancel() and not job.cancel_requested:
            job.cancel()
        for event in job.poll():
            if event.get("event") == "warning":
                emit("warning", message=f"{child.get('method')}: {event.get('message', '')}")
            elif event.get("event") == "progress" and progress is not None:
                progress(float(event.get("fraction") or 0.0), str(event.get("message", "")))
        time.sleep(0.1)
    if job.state == DONE:
        return job.result or {}
    if job.state == CANCELLED:
        raise JobCancelled(f"{child.get('method')}: training cancelled")
    if job.crashed:
        raise RuntimeError(job.message)
    raise NeuralRomError(job.message)
