"""The headless commands (``--command neural_rom ...``) through ``addon.cli.main``, as a
script using the PyPI bpy calls them: help, argument errors, exit codes, and the
tetrahedralize -> bake (seeds, shards) -> export-pc2 pipeline on a saved .blend."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)


def cli():
    from neural_rom.ui import cli

    return cli


def make_ball(bpy, name="Ball", frames=3):
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0.0, 0.0, 1.0))
    obj = bpy.context.object
    obj.name = name
    obj.neural_rom.role = "DEFORMABLE"
    obj.neural_rom.tet_size = 0.3
    obj.neural_rom.frames = frames
    obj.neural_rom.variants = 1  # one bake per Bake (the default bakes 4)
    return obj


def saved_ball(bpy, path, **kw):
    obj = make_ball(bpy, **kw)
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return obj


def bakes_of(bpy, name="Ball"):
    return [(b.variant, b.frames, b.status) for b in bpy.data.objects[name].neural_rom.bakes]


# ---------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], ["info", "tetrahedralize", "bake", "export-pc2", "exit codes"]),
        (["info", "--help"], ["--object NAME", "--file PATH", "--save"]),
        (
            ["tetrahedralize", "--help"],
            [
                "--tet-size M",
                "--quality Q",
                "--embedding {AUTO,ALWAYS,NEVER}",
                "--cage-resolution N",
            ],
        ),
        (
            ["bake", "--help"],
            [
                "--seed INT",
                "--variants N",
                "--shard i/N",
                "k % N == i",
                "--out DIR",
                "--restart",
                "--processes N",
                "resumes after its last committed frame",
            ],
        ),
        (["export-pc2", "--help"], ["--out PATH", "--bake PATH"]),
        (["export-onnx", "--help"], ["--out PATH", "--precision {float32,float64}", "opset 15"]),
    ],
)
def test_help_of_every_subcommand(argv, expected, capsys):
    assert cli().main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: blender --background FILE.blend --command neural_rom")
    out = " ".join(out.split())  # wherever the lines wrap
    for text in expected:
        assert text in out


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ("3/2", "'3/2': the shard index must be in 0..1 for 2 shards (indices start at 0)"),
        ("2/2", "'2/2': the shard index must be in 0..1 for 2 shards"),
        ("0/0", "'0/0': the shard count N must be at least 1"),
        ("1", "'1' is not i/N: write the shard index and the shard count, e.g. --shard 0/4"),
        ("-1/2", "'-1/2' is not i/N"),
        ("a/b", "'a/b' is not i/N"),
    ],
)
def test_bad_shards_are_user_errors_with_the_fix(shard, message, capsys):
    assert cli().main(["bake", f"--shard={shard}"]) == 2
    err = capsys.readouterr().err
    assert "error: argument --shard: " + message in err


def test_shard_parsing():
    parse = cli().parse_shard
    assert parse("0/1") == (0, 1)
    assert parse(" 3 / 4 ") == (3, 4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], None),
        (["explode"], "invalid choice: 'explode'"),
        (["bake", "--seed", "-3"], "argument --seed: '-3' must be 0 or more"),
        (["bake", "--variants", "0"], "argument --variants: '0' must be 1 or more"),
        (["bake", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_argument_errors_exit_2(argv, message, capsys):
    assert cli().main(argv) == 2
    if message:
        assert message in capsys.readouterr().err


def test_missing_file_unknown_object_no_deformables_unsaved_save(addon, tmp_path, capsys):
    bpy = addon.bpy
    assert cli().main(["info", "--file", str(tmp_path / "nope.blend")]) == 2
    assert (
        "--file " + str(tmp_path / "nope.blend") + ": no such .blend file"
        in capsys.readouterr().err
    )

    bpy.ops.mesh.primitive_cube_add()
    assert cli().main(["bake"]) == 2
    assert (
        "no object in the unsaved file has the Neural ROM role Deformable: pass --object NAME"
        in (capsys.readouterr().err)
    )
    assert cli().main(["tetrahedralize", "--object", "Sphere"]) == 2
    assert "no object named 'Sphere' in the unsaved file (objects: Cube)" in capsys.readouterr().err
    assert cli().main(["info", "--save"]) == 2
    assert (
        "--save: the file has never been saved; pass --file PATH.blend" in capsys.readouterr().err
    )


def test_stage_errors_are_user_errors(addon, capsys):
    # Unsaved file with a relative cache directory: the stage's own message comes through.
    make_ball(addon.bpy)
    assert cli().main(["tetrahedralize"]) == 2
    assert "error: Save the .blend file first" in capsys.readouterr().err


def test_info_prints_the_objects_stages(addon, blend_file, capsys):
    bpy = addon.bpy
    make_ball(bpy)
    bpy.data.objects["Ball"].neural_rom.model_method = "linear"  # chosen in the menu
    bpy.ops.mesh.primitive_cube_add()
    assert cli().main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"neural_rom: file: {blend_file}" in out
    assert "Ball (MESH) role: DEFORMABLE" in out and "Cube (MESH) role: NONE" in out
    assert "    frames: 3" in out and "    youngs_modulus:" in out  # an FEM object's settings
    assert "collider_shape" not in out and "cloth bake:" not in out
    # the method once, by its menu; no hidden bookkeeping (its name behind the menu, jobs)
    assert out.count("    model_method: linear") == 1 and "model_method_name" not in out
    assert "pending_" not in out
    bpy.data.objects["Cube"].neural_rom.role = "COLLIDER"
    assert cli().main(["info", "--object", "Cube"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "    collider_shape: sphere" in out and "frames" not in out and "settings" not in out


# ---------------------------------------------------------------------------------------
# The pipeline on a saved file
# ---------------------------------------------------------------------------------------


def test_tetrahedralize_bake_shards_and_export_pc2_headless(addon, tmp_path, capsys):
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    saved_ball(bpy, blend)
    bpy.ops.wm.read_factory_settings(use_empty=True)  # the CLI opens the file itself

    argv = [
        "tetrahedralize",
        "--file",
        str(blend),
        "--embedding",
        "always",
        "--cage-resolution",
        "5",
    ]
    assert cli().main([*argv, "--save"]) == 0
    out = capsys.readouterr().out
    assert "neural_rom: Ball: " in out and " tets" in out and f"saved {blend}" in out
    assert (tmp_path / "neural_rom" / "Ball" / "tets.npz").is_file()
    assert (tmp_path / "neural_rom" / "Ball" / "embedding.npz").is_file()  # the override held

    # Two farm shards of a 2-variant bake: each bakes its own variant only.
    argv = [
        "bake",
        "--file",
        str(blend),
        "--object",
        "Ball",
        "--seed",
        "3",
        "--variants",
        "2",
        "--save",
    ]
    assert cli().main([*argv, "--shard", "1/2"]) == 0
    out = capsys.readouterr().out
    assert "shard 1/2, seed 3" in out and "100.0% frame 4/4" in out
    bakes_dir = tmp_path / "neural_rom" / "Ball" / "bakes"
    scenario = bpy.data.objects["Ball"].neural_rom.scenario
    assert sorted(p.name for p in bakes_dir.glob("*.nrbake")) == [f"{scenario}_s3_v001.nrbake"]
    assert cli().main([*argv, "--shard", "0/2"]) == 0
    assert sorted(p.name for p in bakes_dir.glob("*.nrbake")) == [
        f"{scenario}_s3_v000.nrbake",
        f"{scenario}_s3_v001.nrbake",
    ]
    # --save kept each shard's record (the second run reopened the first one's file).
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    assert sorted(bakes_of(bpy)) == [(0, 4, "complete"), (1, 4, "complete")]

    pc2 = tmp_path / "out" / "ball.pc2"
    assert cli().main(["export-pc2", "--file", str(blend), "--out", str(pc2), "--save"]) == 0
    frames, _start, rate = read_pc2(pc2)
    assert frames.shape == (4, len(bpy.data.objects["Ball"].data.vertices), 3)
    assert np.isfinite(frames).all() and rate == 1.0
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    mod = bpy.data.objects["Ball"].modifiers[0]
    assert mod.type == "MESH_CACHE" and bpy.path.abspath(mod.filepath) == str(pc2)


def test_export_pc2_of_several_objects_needs_a_folder(addon, blend_file, capsys):
    bpy = addon.bpy
    make_ball(bpy, name="A")
    make_ball(bpy, name="B")
    assert cli().main(["export-pc2", "--out", "x.pc2"]) == 2
    assert (
        "--out names one .pc2 file but several objects are exported: pass a folder"
        in capsys.readouterr().err
    )


def _when_baking(action, timeout=60.0):
    """Run ``action(job)`` from another thread once a bake job committed 2 frames."""
    from neural_rom.addon import jobs

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in list(jobs._JOBS.values()):
                if not entry.job.finished and entry.job.done_units >= 2:
                    action(entry.job)
                    return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_cancelled_bake_exits_3_and_saves_its_committed_frames(addon, tmp_path, capsys):
    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    saved_ball(bpy, blend, frames=400)
    assert cli().main(["tetrahedralize", "--save"]) == 0
    watcher = _when_baking(lambda job: job.cancel())
    assert cli().main(["bake", "--save"]) == 3
    watcher.join()
    assert "neural_rom: cancelled: bake of Ball cancelled" in capsys.readouterr().err
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    [(_variant, frames, status)] = bakes_of(bpy)
    assert 2 <= frames < 401 and status == "cancelled"


def test_a_cancelled_bake_started_again_resumes_and_restart_starts_over(addon, tmp_path, capsys):
    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    saved_ball(bpy, blend, frames=40)
    assert cli().main(["tetrahedralize", "--save"]) == 0
    watcher = _when_baking(lambda job: job.cancel())
    assert cli().main(["bake", "--save"]) == 3
    watcher.join()
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    [(_variant, kept, _status)] = bakes_of(bpy)
    capsys.readouterr()

    assert cli().main(["bake", "--save"]) == 0
    out = capsys.readouterr().out
    assert f"resumes at frame {kept}" in out  # the first progress line says it
    assert f"_s0_v000.nrbake resumed at frame {kept}" in out
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    assert bakes_of(bpy) == [(0, 41, "complete")]

    assert cli().main(["bake", "--restart", "--processes", "1"]) == 0
    out = capsys.readouterr().out
    assert "(restart)" in out and "resume" not in out


def test_killed_worker_exits_1_naming_its_log(addon, tmp_path, capsys):
    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    saved_ball(bpy, blend, frames=400)
    assert cli().main(["tetrahedralize"]) == 0
    watcher = _when_baking(lambda job: os.kill(job.pid, signal.SIGKILL))
    assert cli().main(["bake"]) == 1
    watcher.join()
    err = capsys.readouterr().err
    assert "the job worker crashed (killed by signal SIGKILL); see the log " in err
    log = err.split("see the log ", 1)[1].split()[0]
    assert os.path.isfile(log) and log.startswith(
        str(tmp_path / "neural_rom" / "Ball" / "bakes" / "logs")
    )
    # The committed prefix on disk is still a readable bake.
    from neural_rom.core.data.cache import BakeCache

    [path] = (tmp_path / "neural_rom" / "Ball" / "bakes").glob("*_s0_v000.nrbake")
    cache = BakeCache.open(path)
    assert cache.n_frames >= 2


def test_train_and_simulate_help():
    assert cli().main(["train", "--help"]) == 0
    assert cli().main(["simulate", "--help"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--frames", "9:3"], "the end frame must not be before the start"),
        (["simulate", "--frames", "1-3"], "is not START:END"),
        (["train", "--method", "pca"], "invalid choice: 'pca'"),
        (["train", "--device", "tpu"], "invalid choice: 'tpu'"),
    ],
)
def test_train_and_simulate_argument_errors_exit_2(argv, message, capsys):
    assert cli().main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_tri_state_that_was_a_flag_takes_the_flag_alone():
    """``--static-derivatives`` alone means on, as when it was a flag; auto / on / off given."""
    parse = cli().build_parser().parse_args
    given = cli().given_settings
    assert given(parse(["train", "--static-derivatives"])) == {"static_derivatives": "on"}
    for value in ("auto", "on", "off"):
        args = parse(["train", "--static-derivatives", value])
        assert given(args) == {"static_derivatives": value}
    assert "static_derivatives" not in given(parse(["train"]))


def test_train_and_simulate_headless(addon, tmp_path, capsys):
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    obj = make_ball(bpy, frames=4)
    obj.neural_rom.scenario = "random_pokes"
    bpy.context.scene.frame_end = 6
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    # no model yet: a user error that says what to do
    assert cli().main(["tetrahedralize", "--save"]) == 0
    assert cli().main(["simulate"]) == 2
    assert "has no trained model; run Train first" in capsys.readouterr().err
    assert cli().main(["train"]) == 2
    assert "no bakes to train on; run Bake first" in capsys.readouterr().err
    assert cli().main(["bake", "--variants", "2", "--save"]) == 0
    bpy.ops.wm.read_factory_settings(use_empty=True)  # the CLI opens the file itself

    argv = ["train", "--file", str(blend), "-o", "Ball", "--k", "3", "--max-cubature", "20"]
    missing = tmp_path / "no" / "python3"
    assert cli().main([*argv, "--python", str(missing)]) == 2
    assert f"job interpreter {missing} could not be run (no such file)" in capsys.readouterr().err
    # --python picks the job interpreter (here this Python behind a wrapper that says so).
    trainer = tmp_path / "trainer"
    trainer.write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path / "trainer.log"}\nexec {sys.executable} "$@"\n'
    )
    trainer.chmod(0o755)
    assert cli().main([*argv, "--device", "cpu", "--python", str(trainer), "--save"]) == 0
    assert "worker.py" in (tmp_path / "trainer.log").read_text()
    out = capsys.readouterr().out
    assert "training Ball: linear on 2 bake(s)" in out and "Ball: 3 DOFs" in out
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    m = bpy.data.objects["Ball"].neural_rom.model
    assert m.k == 3 and m.path.startswith("//neural_rom/Ball/models/") and m.device == "cpu"

    pc2 = tmp_path / "out" / "ball_reduced.pc2"
    assert cli().main(["simulate", "--file", str(blend), "--out", str(pc2), "--save"]) == 0
    assert "Ball: wrote 6 frames to" in capsys.readouterr().out
    frames, start, _ = read_pc2(pc2)
    assert frames.shape == (6, len(bpy.data.objects["Ball"].data.vertices), 3) and start == 1
    assert np.abs(frames[-1] - frames[0]).max() > 1e-3 and np.isfinite(frames).all()
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    mod = bpy.data.objects["Ball"].modifiers["Neural ROM Simulation"]
    assert bpy.path.abspath(mod.filepath) == str(pc2)
    # --frames picks the range; several objects need a folder
    assert cli().main(["simulate", "--frames", "2:4", "--out", str(tmp_path / "o2")]) == 0
    frames, start, _ = read_pc2(tmp_path / "o2" / "Ball_reduced.pc2")
    assert frames.shape[0] == 3 and start == 2
    assert cli().main(["simulate", "--frames", "0:4"]) == 2
    assert "pick a start frame >= 1" in capsys.readouterr().err

    # export-onnx: the linear model's basis, q = 0 is the rest mesh (tests/test_onnx_export.py
    # checks the graphs against the runtimes)
    onnx_path = tmp_path / "out" / "ball.onnx"
    code = cli().main(["export-onnx", "--file", str(blend), "--out", str(onnx_path)])
    try:
        import onnxruntime
    except ImportError:
        assert code == 2 and "pip install onnx" in capsys.readouterr().err
        return
    assert code == 0
    out = capsys.readouterr().out
    assert "Ball: wrote" in out and "input q (B x 3)" in out and "output positions" in out
    from neural_rom.core.data.modelfile import load_model

    X = load_model(bpy.path.abspath(bpy.data.objects["Ball"].neural_rom.model.path)).arrays["X"]
    s = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (y,) = s.run(["positions"], {"q": np.zeros((1, 3), np.float32)})
    np.testing.assert_allclose(y[0], X, atol=1e-6)


# ---------------------------------------------------------------------------------------
# The PyPI path: a plain script, no register() of its own
# ---------------------------------------------------------------------------------------

_PLAIN_SCRIPT = """
import sys
import bpy, neural_rom

blend = sys.argv[1]
bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0.0, 0.0, 1.0))
bpy.context.object.name = "Ball"
bpy.ops.wm.save_as_mainfile(filepath=blend)

codes = [neural_rom.ui.cli.main(["info", "--file", blend])]
# cli.main registered the extension: the object's settings exist for the rest of the script.
ball = bpy.data.objects["Ball"]
ball.neural_rom.role = "DEFORMABLE"
ball.neural_rom.tet_size = 0.3
ball.neural_rom.frames = 2
bpy.ops.wm.save_as_mainfile(filepath=blend)
codes.append(neural_rom.ui.cli.main(["tetrahedralize", "--file", blend, "--save"]))
codes.append(
    neural_rom.ui.cli.main(["bake", "--file", blend, "--variants", "1", "--save"])
)
print("codes", codes)
sys.exit(max(codes))
"""


def test_a_plain_pypi_script_runs_the_cli_and_exits_cleanly(tmp_path):
    """``import bpy, neural_rom; neural_rom.ui.cli.main([...])`` as the README shows:
    no ``register()`` of its own, and the interpreter exits 0 (it used to segfault at exit
    with the extension still registered)."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(_PLAIN_SCRIPT)
    blend = tmp_path / "shot.blend"
    run = subprocess.run(
        [sys.executable, str(script), str(blend)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "codes [0, 0, 0]" in out
    assert "internal error" not in out
    assert "Ball (MESH)" in out
    assert (tmp_path / "neural_rom" / "Ball" / "tets.npz").is_file()


def test_registering_by_hand_in_a_plain_script_exits_cleanly(tmp_path):
    """``neural_rom.register()`` without ``unregister()``: the at-exit hook unregisters, and
    registering again (which unregisters first) is fine."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(
        "import bpy, neural_rom\n"
        "neural_rom.register()\n"
        "neural_rom.register()\n"
        "print(bpy.context.object.neural_rom.role)\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "NONE" in run.stdout
