"""The headless ``compare`` command: a trained model replays bakes in the worker (the panel's
Compare with Bake job) and the printed and ``--json`` numbers are core.compare's replay of
the same bake; by default the bakes the model held out; refusals say what to do, exit 2
and change nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from . import test_cli as base
from .blender_fixtures import addon  # noqa: F401 (pytest fixture)


def cli():
    return base.cli()


@pytest.fixture
def trained_ball(addon, tmp_path, capsys):
    """A saved ball (no embedding) with 2 random-poke bakes of 4 frames and a linear model
    of 3 modes trained on one, the other held out; the messages before each stage exist
    are checked on the way."""
    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    obj = base.make_ball(bpy, frames=4)
    obj.neural_rom.scenario = "random_pokes"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    assert cli().main(["tetrahedralize", "--save"]) == 0
    assert cli().main(["compare"]) == 2
    assert "error: 'Ball' has no bake; run Bake first." in capsys.readouterr().err
    assert cli().main(["bake", "--variants", "2", "--save"]) == 0
    assert cli().main(["compare"]) == 2
    assert "error: 'Ball' has no trained model; run Train first." in capsys.readouterr().err
    argv = ["train", "--k", "3", "--max-cubature", "20", "--device", "cpu", "--save"]
    assert cli().main(argv) == 0
    capsys.readouterr()
    return blend


def replay(bpy, name: str, bake: str) -> dict:
    """core.compare's replay of bake ``bake`` with the object's model, in this process:
    the render vertices' errors (the ball's render vertices are its first tet nodes) and
    those of the model's closest shapes, with the rest diagonal."""
    from neural_rom.core.bake import BakeSpec, setup_scenario
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.engine.replay import (
        closest_shapes,
        error_stats,
        replay_bake,
        vertex_errors,
    )
    from neural_rom.core.registry import load_simulator

    obj = bpy.data.objects[name]
    s = obj.neural_rom
    [rec] = [r for r in s.bakes if r.name == bake]
    cache = BakeCache.open(bpy.path.abspath(rec.path))
    sim, _ = load_simulator(bpy.path.abspath(s.model.path))
    _, driver = setup_scenario(cache.X, cache.T, BakeSpec.from_dict(cache.meta["spec"]))
    r = len(obj.data.vertices)
    P = replay_bake(sim, cache, driver)[:, :r]
    full = np.asarray(cache.channel("positions"), dtype=np.float64)
    best = closest_shapes(sim, full)[:, :r]
    rest = np.asarray(cache.X)[:r]
    return {
        "dynamics": error_stats(vertex_errors(P, full[:, :r])),
        "shapes": error_stats(vertex_errors(best, full[:, :r])),
        "diagonal": float(np.linalg.norm(rest.max(0) - rest.min(0))),
    }


def held_out(bpy, name: str) -> list[str]:
    """The names of the bakes the model file says were held out."""
    from neural_rom.core.data.modelfile import read_metadata

    meta = read_metadata(bpy.path.abspath(bpy.data.objects[name].neural_rom.model.path))
    held = [meta["bakes"][i] for i in meta["validation_trajectories"]]
    return [Path(p).stem for p in held]


def test_compare_help_text(capsys):
    assert cli().main(["compare", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--bake NAME", "--json PATH", "--file PATH", "--object NAME", "held out"):
        assert text in out
    assert "closest shapes" in out and "linear PCA projection" in out and "--save" not in out
    assert cli().main(["--help"]) == 0
    assert "compare --object Body --bake all --json" in capsys.readouterr().out


def test_compare_prints_and_writes_the_replay_of_the_held_out_bake(addon, trained_ball, capsys):
    bpy = addon.bpy
    tmp = trained_ball.parent
    before = trained_ball.read_bytes()
    out = tmp / "report" / "ball.json"
    bpy.ops.wm.read_factory_settings(use_empty=True)  # the CLI opens the file itself
    assert cli().main(["compare", "--file", str(trained_ball), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    [held] = held_out(bpy, "Ball")
    assert (
        f"comparing Ball (linear model) with the bakes its model held out from training: {held}"
        in printed
    )
    report = json.loads(out.read_text())
    [row] = report["bakes"]
    assert report["file"] == str(trained_ball)
    assert (row["object"], row["bake"], row["role"], row["frames"]) == ("Ball", held, "held out", 5)

    ref = replay(bpy, "Ball", held)
    d = ref["diagonal"]
    assert row["diagonal_m"] == pytest.approx(d, abs=1e-9) and 0.9 < d < 1.8  # ball of radius 0.5
    for stat in ("max", "mean", "rms"):
        for key, side in (("", "dynamics"), ("closest_shape_", "shapes")):
            m = ref[side][stat]
            assert row[f"{key}{stat}_error_m"] == pytest.approx(m, abs=1e-9), (key, stat)
            assert row[f"{key}{stat}_error_pct"] == pytest.approx(100 * m / d, abs=1e-9)
    assert ref["dynamics"]["max"] > 1e-5 and ref["shapes"]["max"] > 1e-7  # not trivially 0
    assert row["step_ms"] > 0.0
    dyn, shapes = ref["dynamics"], ref["shapes"]
    assert (
        f"Ball: bake {held} (held out), 5 frames, diagonal {d:.4g} m, "
        f"{row['step_ms']:.3g} ms per step" in printed
    )
    assert (
        f"dynamics (the model's replay): max {dyn['max'] * 1000:.4g} mm "
        f"({100 * dyn['max'] / d:.3g}%), mean {dyn['mean'] * 1000:.4g} mm" in printed
    )
    assert (
        f"shapes (closest shapes, linear PCA projection): max {shapes['max'] * 1000:.4g} mm"
        in printed
    )
    assert trained_ball.read_bytes() == before  # the .blend is not changed

    # --bake all: the bake trained on too; --bake NAME: that one
    assert cli().main(["compare", "--bake", "all", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["bakes"]
    assert sorted(r["role"] for r in rows) == ["held out", "trained on"]
    [trained] = [r["bake"] for r in rows if r["role"] == "trained on"]
    assert cli().main(["compare", "--object", "Ball", "--bake", trained]) == 0
    assert f"Ball: bake {trained} (trained on)" in capsys.readouterr().out
    ref = replay(bpy, "Ball", trained)
    [row] = [r for r in rows if r["bake"] == trained]
    assert row["max_error_m"] == pytest.approx(ref["dynamics"]["max"], abs=1e-9)


def test_compare_refusals_say_what_to_do_and_change_nothing(addon, trained_ball, capsys):
    bpy = addon.bpy
    out = trained_ball.parent / "ball.json"
    before = trained_ball.read_bytes()
    results = trained_ball.parent / "neural_rom" / "Ball" / "compare"
    names = sorted(r.name for r in bpy.data.objects["Ball"].neural_rom.bakes)

    assert cli().main(["compare", "--bake", "nope", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        f"error: 'Ball' has no bake named 'nope'; its bakes are {', '.join(names)} "
        "(or pass --bake all)." in err
    )
    assert cli().main(["compare", "--object", "Sphere"]) == 2
    assert "no object named 'Sphere'" in capsys.readouterr().err

    model = bpy.path.abspath(bpy.data.objects["Ball"].neural_rom.model.path)
    kept = model + ".kept"
    os.replace(model, kept)
    assert cli().main(["compare", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: The model of 'Ball' is missing ({model}); train again" in err
    os.replace(kept, model)

    # the object moved after training: the worker refuses the model (the panel's job and
    # message), before it writes anything
    ball = bpy.data.objects["Ball"]
    ball.location.x += 0.5
    bpy.context.view_layer.update()
    assert cli().main(["compare", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: The model of 'Ball' cannot drive it" in err and "re-train" in err
    ball.location.x -= 0.5
    bpy.context.view_layer.update()

    # the mesh edited after baking and training: the panel's "re-tetrahedralize"
    bpy.data.objects["Ball"].data.vertices[0].co.z += 0.01
    assert cli().main(["compare", "--bake", "all"]) == 2
    assert "re-tetrahedralize" in capsys.readouterr().err

    assert not out.exists() and not list(results.glob("*.npz"))  # nothing was written
    assert trained_ball.read_bytes() == before
