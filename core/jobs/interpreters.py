"""Which Python runs a job: the job interpreter, what it must import, and its environment.

The parent side asks these before it launches a worker (:mod:`.runner`): the interpreter
(:func:`default_python`: ``$NEURAL_ROM_PYTHON`` or this one), what the job's kind needs in it
(:func:`requirements`), a probe of what it can import (:func:`probe_interpreter`,
:func:`check_interpreter`), and the environment and flags of a child Python
(:func:`child_env`, :func:`popen_platform_kwargs`, :func:`extension_wheel_dirs`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..errors import NeuralRomError

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
            env=child_env(python),
            **popen_platform_kwargs(),
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


def popen_platform_kwargs() -> dict:
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


def child_env(python: str) -> dict:
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
