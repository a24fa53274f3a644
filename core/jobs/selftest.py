"""The self-test job (``kind: "selftest"``): a fake job that tests the runner without physics."""

from __future__ import annotations

import os
import sys
import time

from ..errors import JobCancelled, NeuralRomError
from .events import Progress, emit, should_cancel


def run_selftest(spec: dict) -> dict:
    """``kind: "selftest"``: a fake job for testing the runner without physics.

    Spec keys (all optional): ``steps`` (10), ``sleep`` (seconds per step, 0.02),
    ``commit_file`` (a line ``"<step>\\n"`` is appended and fsynced per step: the
    "committed" work), ``crash_at`` (hard exit 70 at that step), ``hang_at`` (sleeps
    forever, ignoring cancels), ``error_at`` (raises a NeuralRomError), ``raise_at``
    (raises a RuntimeError: a bug), ``warn_at`` (emits a warning), ``noise`` (prints to
    stdout, which must land in the log, not break the event stream).
    """
    steps = int(spec.get("steps", 10))
    pause = float(spec.get("sleep", 0.02))
    commit = spec.get("commit_file")
    meter = Progress(steps)
    for i in range(steps):
        if spec.get("hang_at") == i:
            print(f"selftest: hanging at step {i}", file=sys.stderr, flush=True)
            while True:
                time.sleep(1.0)
        if spec.get("crash_at") == i:
            print(f"selftest: simulated crash at step {i}", file=sys.stderr, flush=True)
            os._exit(70)
        if spec.get("error_at") == i:
            raise NeuralRomError(
                f"selftest: simulated user error at step {i}: change the input and retry"
            )
        if spec.get("raise_at") == i:
            raise RuntimeError(f"selftest: simulated bug at step {i}")
        if spec.get("noise"):
            print(f"selftest noise {i} {{not json", flush=True)
        time.sleep(pause)
        if commit:
            with open(commit, "a", encoding="utf-8") as fh:
                fh.write(f"{i}\n")
                fh.flush()
                os.fsync(fh.fileno())
        meter.update(i + 1, f"step {i + 1}/{steps}")
        emit("metric", values={"step": i, "loss": 1.0 / (i + 1)})
        if spec.get("warn_at") == i:
            emit("warning", message=f"selftest: warning at step {i}")
        if should_cancel():
            exc = JobCancelled(f"selftest cancelled after step {i + 1}")
            exc.result = {"committed": i + 1}
            raise exc
    return {"committed": steps, "steps": steps}
