"""Shared pytest helpers for tests that drive Blender through the PyPI ``bpy``.

Use in a test module::

    from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)

    def test_something(addon, blend_file):
        bpy = addon.bpy
        ...

``addon`` gives every test a fresh, empty factory-settings file with the extension
registered (and listed in the preferences, so ``AddonPreferences`` work as in Blender),
and unregisters it afterwards. ``blend_file`` saves that file into the test's temporary
folder, so ``//`` cache directories resolve there.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "neural_rom"


def addon_module():
    """The ``neural_rom`` package with its root ``register()``/``unregister()``.

    The editable install maps the repository root as a namespace portion, in which case
    the root ``__init__.py`` has not run: run it into the package module, as Blender's
    import of the extension would.
    """
    package = importlib.import_module(PACKAGE)
    if not hasattr(package, "register"):
        init = ROOT / "__init__.py"
        code = compile(init.read_text(encoding="utf-8"), str(init), "exec")
        exec(code, package.__dict__)  # noqa: S102 (our own file)
    return package


def fresh_file():
    """Load an empty factory-settings file (no add-ons enabled through the preferences)."""
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    return bpy


@pytest.fixture
def addon():
    """Fresh empty file, extension registered; yields ``SimpleNamespace(bpy, package,
    prefs)`` (``prefs``: the extension's AddonPreferences)."""
    with registered() as ns:
        yield ns


@contextmanager
def registered():
    """The ``addon`` fixture's set-up and tear-down, for a module-scoped fixture of its own."""
    bpy = fresh_file()
    package = addon_module()
    from neural_rom.addon import jobs

    # A module that ran jobs without this fixture (the farm's in-process CLI runs, say) may
    # have left its finished jobs behind: every test starts with none.
    for state in jobs.active_jobs():
        jobs._JOBS[state.id].job.wait(timeout=10)
    jobs._JOBS.clear()
    package.register()
    entry = bpy.context.preferences.addons.new()
    entry.module = PACKAGE
    try:
        yield SimpleNamespace(bpy=bpy, package=package, prefs=entry.preferences)
    finally:
        from neural_rom.addon import jobs

        jobs.cancel_job("", force=True)
        for state in jobs.active_jobs():
            jobs._JOBS[state.id].job.wait(timeout=10)
        jobs._JOBS.clear()
        # Looked up again: a test that reset the preferences freed the first entry.
        entry = bpy.context.preferences.addons.get(PACKAGE)
        if entry is not None:
            bpy.context.preferences.addons.remove(entry)
        package.unregister()


@pytest.fixture
def blend_file(addon, tmp_path):
    """Save the fresh file as ``<tmp>/scene.blend`` and return its path."""
    path = tmp_path / "scene.blend"
    addon.bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return path
