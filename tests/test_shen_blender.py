"""The Shen 2021 method through the add-on as a user runs it headless: it is in the Train
menu (the registry's method list), ``train --method shen`` trains it in the worker with its
own options, ``simulate`` plays it into a PC2 with its Mesh Cache modifier, and ``compare``
replays the held-out bake in the worker with the same numbers as core.compare's replay."""

from __future__ import annotations

import json

import numpy as np

from . import test_cli as base
from .blender_fixtures import addon  # noqa: F401 (pytest fixture)


def test_shen_trains_simulates_and_compares_headless(addon, tmp_path, capsys):
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.data.pc2 import read_pc2

    cli = base.cli()
    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    obj = base.make_ball(bpy, frames=4)
    obj.neural_rom.scenario = "random_pokes"
    obj.neural_rom.model_method = "shen"  # an item of the Train menu's method list
    bpy.context.scene.frame_end = 5
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    assert cli.main(["tetrahedralize", "--save"]) == 0
    assert cli.main(["bake", "--variants", "2", "--save"]) == 0
    bpy.ops.wm.read_factory_settings(use_empty=True)  # the CLI opens the file itself

    argv = ["train", "--file", str(blend), "-o", "Ball", "--method", "shen", "--k", "4"]
    argv += ["--n-p", "2", "--latent-dim", "1", "--hidden", "8,8", "--epochs", "20"]
    argv += ["--max-cubature", "20", "--device", "cpu", "--save"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    print(out)
    assert "training Ball: shen on 2 bake(s)" in out and "Ball: 3 DOFs" in out
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    m = bpy.data.objects["Ball"].neural_rom.model
    assert m.method == "shen" and m.k == 3
    meta = load_model(bpy.path.abspath(m.path)).metadata
    assert (meta["n_p"], meta["n_z"], meta["k"]) == (2, 1, 4)

    pc2 = tmp_path / "out" / "ball_reduced.pc2"
    assert cli.main(["simulate", "--file", str(blend), "--out", str(pc2), "--save"]) == 0
    assert "Ball: wrote 5 frames to" in capsys.readouterr().out
    frames, start, _ = read_pc2(pc2)
    n_render = len(bpy.data.objects["Ball"].data.vertices)
    assert frames.shape == (5, n_render, 3) and start == 1 and np.isfinite(frames).all()
    assert np.abs(frames[-1] - frames[0]).max() > 1e-4  # it moved (gravity, no ground)
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    mod = bpy.data.objects["Ball"].modifiers["Neural ROM Simulation"]
    assert bpy.path.abspath(mod.filepath) == str(pc2)

    report = tmp_path / "compare.json"
    assert cli.main(["compare", "--file", str(blend), "--json", str(report)]) == 0
    printed = capsys.readouterr().out
    print(printed)
    assert "comparing Ball (shen model) with the bakes its model held out" in printed
    [row] = json.loads(report.read_text())["bakes"]
    assert row["role"] == "held out" and row["frames"] == 5
    assert 0.0 < row["max_error_m"] < 0.5 and row["step_ms"] > 0.0
    assert 0.0 < row["closest_shape_max_error_m"] < 0.5
