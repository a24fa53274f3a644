"""Register and unregister everything the extension adds to Blender, in dependency order.

Order: preferences, properties (classes, then the ``Object.neural_rom`` /
``Scene.neural_rom_scene`` pointers), operators, panels, the job runner (operators and
status bar), the frame handlers (:mod:`..addon.frames`: frame change, load, save; a
muted Cloth modifier is given back on save, load and unregister), the ``neural_rom``
command-line command.
:func:`unregister` undoes exactly what :func:`register` did, in reverse, so both can run
any number of times. A failure while registering undoes the steps already done and is
raised, never swallowed: a half-registered add-on is worse than a clear error.

With the PyPI ``bpy`` (Blender as a Python module, ``bpy.app.binary_path == ""``) nothing
disables the extension at exit, and Blender frees its data with our classes still
registered and segfaults. :func:`register` therefore adds an :mod:`atexit` hook there that
unregisters whatever is still registered. Inside Blender the hook is not added: Blender
disables extensions itself before it frees anything.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable

import bpy

CLI_COMMAND = "neural_rom"

# Undo actions of the steps register() completed, in the order they were done.
_undo: list[tuple[str, Callable[[], None]]] = []
# The handle bpy.utils.register_cli_command returned (None when not registered).
cli_handle = None
# Whether the at-exit unregister hook of the PyPI bpy is installed.
_atexit_hook = False


def _register_classes(name: str, classes) -> None:
    done = []
    try:
        for cls in classes:
            bpy.utils.register_class(cls)
            done.append(cls)
    except Exception:
        for cls in reversed(done):
            bpy.utils.unregister_class(cls)
        raise

    def undo() -> None:
        for cls in reversed(done):
            if getattr(cls, "is_registered", True):
                bpy.utils.unregister_class(cls)

    _undo.append((f"{name} classes", undo))


def _step(name: str, do: Callable[[], None], undo: Callable[[], None]) -> None:
    do()
    _undo.append((name, undo))


def _steps():
    """The registration steps; modules are imported here so a fresh register() sees
    reloaded modules."""
    from ..addon import frames, prefs, props
    from . import cli, operators, panels
    from .operators import jobs

    def register_cli() -> None:
        global cli_handle
        cli_handle = bpy.utils.register_cli_command(CLI_COMMAND, cli.cli_handler)

    def unregister_cli() -> None:
        global cli_handle
        handle, cli_handle = cli_handle, None
        if handle is not None:
            bpy.utils.unregister_cli_command(handle)

    return [
        ("preferences", lambda: _register_classes("preferences", prefs.CLASSES), None),
        ("property classes", lambda: _register_classes("properties", props.CLASSES), None),
        ("properties", props.register_properties, props.unregister_properties),
        ("operators", lambda: _register_classes("operators", operators.CLASSES), None),
        ("panels", lambda: _register_classes("panels", panels.CLASSES), None),
        ("job runner", lambda: _register_classes("jobs", jobs.CLASSES), None),
        ("job status bar", jobs.register_ui, jobs.unregister_ui),
        ("frame handlers", frames.register_handlers, frames.unregister_handlers),
        ("command line", register_cli, unregister_cli),
    ]


def is_registered() -> bool:
    return bool(_undo)


def _unregister_at_exit() -> None:
    if _undo:
        unregister()


def register() -> None:
    """Register the extension (after unregistering a previous registration)."""
    global _atexit_hook
    if _undo:
        unregister()
    if not bpy.app.binary_path and not _atexit_hook:
        atexit.register(_unregister_at_exit)
        _atexit_hook = True
    try:
        for name, do, undo in _steps():
            if undo is None:
                do()  # registers classes and records its own undo
            else:
                _step(name, do, undo)
    except Exception as exc:
        try:
            unregister()
        except Exception as undo_exc:  # noqa: BLE001 (the registration error is the one to see)
            exc.add_note(f"and undoing the partial registration failed too: {undo_exc!r}")
        raise


def unregister() -> None:
    """Undo every completed registration step, newest first.

    Every step is attempted even if one fails; the first failure is raised at the end.
    """
    first_error: Exception | None = None
    while _undo:
        name, undo = _undo.pop()
        try:
            undo()
        except Exception as exc:  # noqa: BLE001 (undo every step, raise the first failure)
            if first_error is None:
                first_error = exc
                first_error.add_note(f"while unregistering Neural ROM {name}")
    if first_error is not None:
        raise first_error
