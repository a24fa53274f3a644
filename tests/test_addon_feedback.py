"""What the user is told and can take back (PyPI bpy): a frame update that fails stops that
object's mode and says why on the object, in the status bar and in the terminal; only the
operators that change Blender data push undo steps."""

from __future__ import annotations

import pytest

from .blender_fixtures import addon  # noqa: F401 (pytest fixture)

# Operators that change no Blender data of their own: a job launcher (the job records its
# result when it ends, outside the operator), a probe of the job Python (preferences are not
# undone), forgetting in-memory frames.
NO_UNDO = {
    "neural_rom.bake",
    "neural_rom.cloth_bake",
    "neural_rom.train",
    "neural_rom.bake_simulation",
    "neural_rom.compare_bake",
    "neural_rom.check_interpreter",
    "neural_rom.reset_simulation",
    "neural_rom.set_up_face",  # a job: the face is recorded when it ends
    "neural_rom.add_demo_head",  # a job: the objects are made when it ends
    "neural_rom.fit_key",  # a job: the sliders are set when it ends
    "neural_rom.train_family",  # a job: the model is recorded when it ends
    "neural_rom.apply_mesh_edit",  # a job: the swap happens when the tets are made
    "neural_rom.export_onnx",  # writes a file beside the model; the .blend is unchanged
    "neural_rom.compare_methods",  # a job: the methods' table is recorded when it ends
}


def test_only_operators_that_change_blender_data_push_undo_steps(addon):
    from neural_rom.ui import operators

    idnames = {cls.bl_idname for cls in operators.CLASSES}
    assert NO_UNDO <= idnames
    for cls in operators.CLASSES:
        assert "REGISTER" in cls.bl_options, cls.bl_idname
        assert ("UNDO" in cls.bl_options) == (cls.bl_idname not in NO_UNDO), cls.bl_idname


def ball(bpy, name: str):
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=1, radius=0.5)
    obj = bpy.context.object
    obj.name = name
    obj.neural_rom.role = "DEFORMABLE"
    return obj


@pytest.fixture
def status_bar(addon, monkeypatch) -> list:
    """What goes into the status bar: (workspace name, text) per call."""
    calls = []
    monkeypatch.setattr(
        addon.bpy.types.WorkSpace,
        "status_text_set",
        lambda self, text: calls.append((self.name, text)),
    )
    return calls


def start_simulation(obj):
    obj.neural_rom.simulate = True  # as the operator leaves it; the model is missing


def start_playback(obj):
    obj.neural_rom.playback = True  # no bake: Bake was never run


def start_comparison(obj):
    from neural_rom.addon.compare import bake as compare

    bpy = compare.bpy
    ghost = bpy.data.objects.new(obj.name + compare.GHOST_SUFFIX, obj.data.copy())
    ghost[compare.GHOST_PROP] = obj.name
    bpy.context.scene.collection.objects.link(ghost)
    obj[compare.PROP] = {"bake_path": "//gone.nrbake", "ghost": ghost.name}  # bake deleted since


MODES = {
    "Simulation": (start_simulation, "has no trained model; run Train first."),
    "Playback": (start_playback, "has no bake; run Bake first."),
    "Comparison": (start_comparison, "has no bake at //gone.nrbake; bake it or pick one"),
}


def is_on(obj, what: str) -> bool:
    from neural_rom.addon.compare import bake as compare

    return {
        "Simulation": obj.neural_rom.simulate,
        "Playback": obj.neural_rom.playback,
        "Comparison": compare.is_comparing(obj),
    }[what]


@pytest.mark.parametrize("what", list(MODES))
def test_a_failing_frame_update_stops_the_mode_and_says_why(addon, status_bar, capsys, what):
    from neural_rom.addon import simulate
    from neural_rom.addon.compare import bake as compare

    bpy = addon.bpy
    scene = bpy.context.scene
    obj = ball(bpy, "Ball")
    start, cause = MODES[what]
    start(obj)
    assert is_on(obj, what)
    scene.frame_set(2)  # the frame handler runs
    message = obj.get(simulate.FRAME_ERROR)
    assert message.startswith(f"{what} of 'Ball' stopped: ") and cause in message
    assert status_bar == [(w.workspace.name, f"Neural ROM: {message}")
                          for w in bpy.context.window_manager.windows]  # fmt: skip
    assert status_bar  # the PyPI bpy has a window, so this checks something
    assert f"Neural ROM: {message}" in capsys.readouterr().out
    assert not is_on(obj, what)
    if what == "Comparison":  # its ghost went with it
        assert bpy.data.objects.get("Ball" + compare.GHOST_SUFFIX) is None
    # Stopped: the next frames do not fail (or report) again.
    scene.frame_set(3)
    scene.frame_set(4)
    assert len(status_bar) == len(bpy.context.window_manager.windows)
    assert obj.get(simulate.FRAME_ERROR) == message


def test_a_bug_in_one_object_stops_only_that_object_and_shows_its_trace(
    addon, status_bar, capsys, monkeypatch
):
    from neural_rom.addon import simulate

    bpy = addon.bpy
    scene = bpy.context.scene
    a, b = ball(bpy, "A"), ball(bpy, "B")
    for obj in (a, b):
        obj.neural_rom.simulate = True
    updated = []

    def apply_frame(obj, scene, frame=None):
        if obj.name == "A":
            raise ValueError("boom")
        updated.append(obj.name)

    monkeypatch.setattr(simulate, "apply_frame", apply_frame)
    scene.frame_set(2)
    assert updated == ["B"] and b.neural_rom.simulate and not a.neural_rom.simulate
    assert a[simulate.FRAME_ERROR] == (
        "Simulation of 'A' stopped: ValueError: boom (a bug: please report it with the traceback)"
    )
    assert simulate.FRAME_ERROR not in b
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: boom" in err
    # Turned on again and updating: the failure is forgotten.
    a.neural_rom.simulate = True
    monkeypatch.setattr(simulate, "apply_frame", lambda obj, scene, frame=None: None)
    scene.frame_set(3)
    assert simulate.FRAME_ERROR not in a


def test_a_pending_status_message_does_not_hang_the_interpreter_at_exit():
    """The status-bar message's timer is removed with the extension: a bpy timer still
    registered when the PyPI bpy exits hangs the interpreter (it did, for minutes)."""
    import subprocess
    import sys

    code = (
        "import bpy, neural_rom\n"
        "neural_rom.register()\n"
        "from neural_rom.addon import simulate\n"
        "bpy.ops.mesh.primitive_cube_add()\n"
        "simulate.frame_failed(bpy.context.object, 'Simulation', RuntimeError('boom'), "
        "lambda obj: None)\n"
        "assert bpy.app.timers.is_registered(simulate._clear_status_bar)\n"
        "neural_rom.unregister()\n"
        "print('exiting')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "exiting" in r.stdout, r.stderr[-2000:]
