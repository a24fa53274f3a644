"""Registering the extension: everything in, everything out, any number of times."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .blender_fixtures import ROOT, addon_module, fresh_file


def _parts():
    from neural_rom.addon import frames as playback
    from neural_rom.addon import jobs, prefs, props
    from neural_rom.ui import operators, panels, registration
    from neural_rom.ui.operators import jobs as job_ui

    classes = (*prefs.CLASSES, *props.CLASSES, *operators.CLASSES, *panels.CLASSES, *job_ui.CLASSES)
    return classes, jobs, playback, registration


def _status_draws():
    from bl_ui.space_statusbar import STATUSBAR_HT_header

    return [
        f
        for f in getattr(STATUSBAR_HT_header.draw, "_draw_funcs", [])
        if f.__name__ == "draw_status_progress"
    ]


def _our_handlers(bpy):
    lists = (
        bpy.app.handlers.frame_change_post,
        bpy.app.handlers.frame_change_pre,
        bpy.app.handlers.load_post,
        bpy.app.handlers.save_pre,
        bpy.app.handlers.save_post,
    )
    return [
        h
        for handlers in lists
        for h in handlers
        if getattr(h, "__module__", "").startswith("neural_rom")
    ]


def assert_registered(bpy) -> None:
    classes, _jobs, playback, registration = _parts()
    assert registration.is_registered()
    assert all(cls.is_registered for cls in classes)
    assert hasattr(bpy.types.Object, "neural_rom") and hasattr(bpy.types.Scene, "neural_rom_scene")
    assert bpy.ops.neural_rom.job_monitor.idname() == "NEURAL_ROM_OT_job_monitor"
    assert bpy.ops.neural_rom.cancel_job.idname() == "NEURAL_ROM_OT_cancel_job"
    assert registration.cli_handle is not None
    assert len(_status_draws()) == 1
    assert len(_our_handlers(bpy)) == len(playback._HANDLERS)


def assert_unregistered(bpy) -> None:
    classes, jobs, _playback, registration = _parts()
    assert not registration.is_registered()
    assert not any(cls.is_registered for cls in classes)
    assert not hasattr(bpy.types.Object, "neural_rom") and not hasattr(
        bpy.types.Scene, "neural_rom_scene"
    )
    assert registration.cli_handle is None
    assert _status_draws() == []
    assert _our_handlers(bpy) == []
    assert not bpy.app.timers.is_registered(jobs._tick)


def test_register_and_unregister_twice_in_a_row():
    bpy = fresh_file()
    package = addon_module()
    for _ in range(2):
        package.register()
        assert_registered(bpy)
        # The properties work once registered.
        bpy.ops.mesh.primitive_cube_add()
        bpy.context.object.neural_rom.role = "DEFORMABLE"
        package.unregister()
        assert_unregistered(bpy)


def test_register_while_registered_replaces_the_registration():
    bpy = fresh_file()
    package = addon_module()
    package.register()
    try:
        package.register()
        assert_registered(bpy)  # nothing doubled: one status bar draw, one set of handlers
    finally:
        package.unregister()
    assert_unregistered(bpy)
    package.unregister()  # a second unregister is a no-op


def test_registering_replaces_the_handlers_of_an_earlier_version(monkeypatch):
    # Handler identity: the handlers are matched by module and name, so those an earlier
    # import left (a reload) or an older version registered from the modules they lived in
    # before addon/frames.py (addon/playback.py, addon/cloth.py) are replaced, not doubled.
    bpy = fresh_file()
    package = addon_module()
    _, _, frames, _ = _parts()
    old = []
    for module, name, handlers in (
        ("playback", "on_frame_change", bpy.app.handlers.frame_change_post),
        ("playback", "on_load", bpy.app.handlers.load_post),
        ("cloth", "on_save_pre", bpy.app.handlers.save_pre),
        ("cloth", "on_save_post", bpy.app.handlers.save_post),
        ("frames", "on_frame_change", bpy.app.handlers.frame_change_post),
    ):

        def handler(*_args):
            pass

        handler.__module__, handler.__name__ = f"neural_rom.addon.{module}", name
        handlers.append(handler)
        old.append(handler)
    try:
        package.register()
        assert_registered(bpy)  # one of each: the earlier ones are gone
        assert not any(h in hs for h in old for hs, _ in frames._HANDLERS)
    finally:
        package.unregister()
        for hs, _ in frames._HANDLERS:
            for h in [h for h in hs if h in old]:
                hs.remove(h)
    assert_unregistered(bpy)


def test_a_failing_step_undoes_the_steps_before_it_and_is_raised(monkeypatch):
    bpy = fresh_file()
    package = addon_module()
    _, _, playback, _ = _parts()

    def broken():
        raise RuntimeError("handler registration failed")

    monkeypatch.setattr(playback, "register_handlers", broken)
    with pytest.raises(RuntimeError, match="handler registration failed"):
        package.register()
    assert_unregistered(bpy)
    monkeypatch.undo()
    package.register()
    assert_registered(bpy)
    package.unregister()


def test_unregister_cancels_running_jobs(tmp_path):
    from neural_rom.core import jobs as core_jobs

    fresh_file()
    package = addon_module()
    package.register()
    _, jobs, _, _ = _parts()
    job = core_jobs.Job.start(
        {"kind": "selftest", "steps": 500, "sleep": 0.01}, sys.executable, tmp_path
    )
    jobs._track(job, "Cube", None)
    try:
        package.unregister()
        assert job.wait(timeout=20) == core_jobs.CANCELLED
    finally:
        jobs._JOBS.clear()


def test_the_package_imports_without_bpy():
    # Blender imports the extension's __init__ before register(); core and the worker
    # run in Pythons without bpy at all.
    code = (
        "import importlib.util, sys\n"
        f"root = {str(ROOT)!r}\n"
        "spec = importlib.util.spec_from_file_location('neural_rom', root + '/__init__.py',"
        " submodule_search_locations=[root])\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['neural_rom'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "import neural_rom.core.jobs, neural_rom.core.errors\n"
        "assert callable(mod.register) and callable(mod.unregister)\n"
        "assert 'bpy' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=False, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
