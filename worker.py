"""Neural ROM job worker: ``<python> worker.py <job>.spec.json``.

A bootstrap any Python (with numpy) can run as a script. It loads the extension package
from its own folder, whatever the folder is named (``neural_rom``,
``bl_ext.user_default.neural_rom``, a git checkout, ...), reads the job spec and runs the
handler :data:`core.jobs.JOBS` names for ``spec["kind"]``. Progress, metrics, warnings,
errors and the result go to stdout as JSON lines (see ``core/jobs/__init__.py``); everything
else a job prints goes to stderr, which the parent writes to the job's log.

Exit codes
----------
0  done: a ``done`` event carries the result.
1  crash: an unexpected exception; its traceback is in the log, an ``error`` event names it.
2  user error: a :class:`NeuralRomError` (bad input, diverged simulation, unreadable spec
   or unknown kind); the ``error`` event carries its message.
3  cancelled at a safe point: a ``done`` event with ``{"cancelled": true, ...}`` lists
   what was committed, and that stays valid.

A handler is ``handler(spec: dict) -> dict`` (a JSON-able result), in its job kind's module
of ``core/jobs/``; it imports heavy dependencies (torch for "train") only when it runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

PACKAGE = "neural_rom"
_HERE = Path(__file__).resolve().parent


def _load_package():
    """Import the package this file sits in, under the name :data:`PACKAGE`."""
    module = sys.modules.get(PACKAGE)
    if module is not None and Path(getattr(module, "__file__", "")).resolve().parent == _HERE:
        return module
    spec = importlib.util.spec_from_file_location(
        PACKAGE, _HERE / "__init__.py", submodule_search_locations=[str(_HERE)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return module


def _sub(name: str):
    """``neural_rom.<name>`` of the package loaded by :func:`_load_package`."""
    return importlib.import_module(f"{PACKAGE}.{name}")


def __getattr__(name: str):
    """Old names: ``worker.HANDLERS`` and the handlers (``worker.run_bake``, ...), which
    moved to their job kinds' modules in ``core/jobs/``."""
    if name != "HANDLERS" and not name.startswith("run_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    jobs = _sub("core.jobs")
    if name == "HANDLERS":
        return {kind: jobs.resolve(ref) for kind, ref in jobs.JOBS.items()}
    refs = {ref.partition(":")[2]: ref for ref in jobs.JOBS.values()}
    if name not in refs:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return jobs.resolve(refs[name])


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def run(spec: dict) -> int:
    """Run one job spec in this (worker) process; returns the exit code."""
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    kind = spec.get("kind")
    jobs.emit("started", pid=os.getpid(), kind=kind, python=sys.executable)
    print(
        f"neural_rom worker: kind={kind} pid={os.getpid()} python={sys.executable} package={_HERE}",
        file=sys.stderr,
        flush=True,
    )
    try:
        result = jobs.handler(kind, spec)(spec)
    except errors.JobCancelled as exc:
        result = dict(getattr(exc, "result", None) or {})
        result["cancelled"] = True
        jobs.emit("done", result=result)
        print(f"neural_rom worker: cancelled ({exc})", file=sys.stderr, flush=True)
        return jobs.EXIT_CANCELLED
    except errors.NeuralRomError as exc:
        jobs.emit("error", message=str(exc), type=type(exc).__name__)
        print(f"neural_rom worker: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return jobs.EXIT_USER_ERROR
    except Exception as exc:  # noqa: BLE001 (a bug in a handler: exit code 1, traceback in the log)
        traceback.print_exc()
        sys.stderr.flush()
        jobs.emit(
            "error",
            message=f"the job hit an internal error ({type(exc).__name__}: {exc}); "
            "please report it with the log",
            type=type(exc).__name__,
        )
        return jobs.EXIT_CRASH
    # Which heavy modules this job pulled in: a bake must never import torch (or bpy).
    loaded = sorted(name for name in ("bpy", "torch") if name in sys.modules)
    jobs.emit(
        "done",
        result=result if isinstance(result, dict) else {"value": result},
        heavy_modules=loaded,
    )
    return jobs.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # Blender runs us as ``blender ... --python worker.py -- SPEC``
        argv = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else sys.argv[1:]
    if len(argv) != 1:
        print("usage: python worker.py JOB.spec.json", file=sys.stderr)
        return 2
    _load_package()
    jobs = _sub("core.jobs")
    try:
        spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
        problem = None if isinstance(spec, dict) else "the spec is not a JSON object"
    except (OSError, ValueError) as exc:
        problem = str(exc)
    if problem is not None:
        jobs.init_worker()
        jobs.emit(
            "error", message=f"cannot read the job spec {argv[0]}: {problem}", type="JobError"
        )
        return jobs.EXIT_USER_ERROR
    jobs.init_worker(spec.get("cancel_file"))
    return run(spec)


if __name__ == "__main__":
    # The script's folder is the package itself: drop it from sys.path so its
    # subpackages (core, addon, training, ...) do not shadow top-level modules.
    if sys.path and Path(sys.path[0] or ".").resolve() == _HERE:
        del sys.path[0]
    sys.exit(main())
