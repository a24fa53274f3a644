"""A method is its runtime, its trainer and one registry record: a toy method registered from
this file only (touching no file of the package) appears in the panel's Train menu and
settings box, in the CLI's ``train --help``, trains in the real worker process (which imports
this file from the job's ``method_origin``), loads through ``registry.load_simulator`` and
plays. Also: the CLI trains the method it is told whatever the panel says (issue 9), ``--k``
means the same for every method, and a bad value is refused with the field's name and range
before any job starts.

The toy, "mean shape": its model is the mean of the bakes' positions; it plays by easing from
rest to that shape over ``ramp`` frames.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from neural_rom.core import registry
from neural_rom.core.engine.protocol import SimulatorBase, StepReport
from neural_rom.core.registry import Method, Setting

NAME = "mean_shape"
#: the same toy with a trainer on the run object
NAME_RUN = "mean_shape_run"

# ----------------------------------------------------------------------------- the toy method


class MeanShapeSimulation(SimulatorBase):
    """Eases from rest ``X`` to the mean shape over ``ramp`` frames (one DOF: the blend)."""

    def __init__(self, X: np.ndarray, mean: np.ndarray, ramp: int, gain: float):
        self.X, self.mean = np.asarray(X, dtype=np.float64), np.asarray(mean, dtype=np.float64)
        self.ramp, self.gain = int(ramp), float(gain)
        self.frame = 0

    def rest_positions(self) -> np.ndarray:
        return self.X.copy()

    def positions(self) -> np.ndarray:
        alpha = self.gain * min(1.0, self.frame / self.ramp)
        return self.X + alpha * (self.mean - self.X)

    def reset(self) -> None:
        self.frame = 0

    def step(self, inputs=None) -> StepReport:
        self.frame += 1
        return StepReport(substeps=1)

    def get_state(self) -> dict:
        return {"frame": np.array(self.frame)}

    def set_state(self, state: dict) -> None:
        self.frame = int(state["frame"])

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        d = (self.mean - self.X).ravel()
        alpha = float(d @ (np.asarray(x) - self.X).ravel()) / max(float(d @ d), 1e-300)
        return self.X + np.clip(alpha, 0.0, self.gain) * (self.mean - self.X)


def load(model, *, settings=None, colliders=None) -> MeanShapeSimulation:
    meta = model.metadata
    return MeanShapeSimulation(model.arrays["X"], model.arrays["mean"], meta["ramp"], meta["gain"])


def train(
    bakes, out, settings: dict, *, device="cpu", expect_mesh_hash=None, progress=None, **_ignored
) -> dict:
    """Mean of every frame of the bakes listed by ``settings["bakes_used"]`` (a trainer of
    the older signature, as a studio's plug-in may have one)."""
    return mean_shape(NAME, bakes, out, settings, expect_mesh_hash, progress)


def train_run(run) -> dict:
    """The same on the run object (``train(run)``): the settings checked once, by whoever
    built the run, and read-only."""
    assert isinstance(run.settings, registry.Values)
    with pytest.raises(AttributeError, match="read-only"):
        run.settings.ramp = 1
    return mean_shape(NAME_RUN, run.data, run.out, run.settings, run.expect_mesh_hash, run.progress)


def mean_shape(name, bakes, out, settings, expect_mesh_hash, progress) -> dict:
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.data.modelfile import save_model

    t0 = time.perf_counter()
    caches = [BakeCache.open(p, expect_mesh_hash=expect_mesh_hash) for p in bakes]
    used = [caches[i] for i in settings["bakes_used"] if i < len(caches)] or caches
    frames = np.concatenate([np.asarray(c.positions) for c in used])
    X, mean = np.asarray(used[0].X, dtype=np.float64), frames.mean(axis=0)
    if progress:
        progress(0.5, "mean shape")
    path = save_model(
        out,
        method=name,
        mesh_hash=used[0].mesh_hash,
        arrays={"X": X, "mean": mean},
        metadata={"ramp": settings["ramp"], "gain": settings["gain"], "settings": dict(settings)},
    )
    return {
        "model": str(path),
        "dofs": 1,
        "max_error_val_m": float(np.abs(frames - mean).max()),
        "cubature_elements": 0,
        "train_seconds": time.perf_counter() - t0,
    }


def toy_method() -> Method:
    return Method(
        name=NAME,
        label="Mean Shape (test)",
        description="The mean of the bakes, eased in over a few frames (a test's toy method).",
        settings=(
            Setting(
                "k",
                "int",
                None,
                "Modes",
                "Unused by the toy; shares the name with the subspace methods",
                minimum=1,
                maximum=50,
                auto=True,
            ),
            Setting(
                "ramp",
                "int",
                4,
                "Ramp Frames",
                "Frames to reach the mean shape",
                minimum=1,
                maximum=1000,
            ),
            Setting(
                "gain",
                "float",
                1.0,
                "Gain",
                "Multiplier of the displacement",
                minimum=0.0,
                maximum=10.0,
            ),
            Setting(
                "offset",
                "float",
                0.0,
                "Offset",
                "An unused length",
                unit="m",
                minimum=0.0,
                soft_maximum=1.0,
            ),
            Setting("smooth", "bool", False, "Smooth", "An unused switch", advanced=True),
            Setting(
                "mode",
                "enum",
                "mean",
                "Mode",
                "An unused choice",
                items=(("mean", "Mean", ""), ("median", "Median", "")),
                advanced=True,
            ),
            Setting(
                "bakes_used",
                "int_list",
                [0, 1],
                "Bakes Used",
                "Indices of the bakes averaged, e.g. 0, 1",
                minimum=0,
                maximum=1000,
                advanced=True,
            ),
        ),
        load=load,
        trainer=train,
        needs_torch=False,
        inputs={"forces"},
        order=50,
    )


def toy_run_method() -> Method:
    """The toy with the trainer ``train(run)``."""
    return replace(
        toy_method(), name=NAME_RUN, label="Mean Shape on a Run (test)", trainer=train_run
    )


if not __package__:
    # Imported by path: a worker finding the method from the job's ``method_origin``
    # registers it as a studio's plug-in file would.
    registry.register(toy_method())
    registry.register(toy_run_method())
else:
    from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)
    from .test_addon_train import bake_in_process, ball, mesh_positions, select_only
    from .test_addon_ui import draw_all


@pytest.fixture
def toy(addon):
    """The toy method, registered after the add-on (its properties appear then)."""
    record = registry.register(toy_method())
    assert record.origin == str(Path(__file__).resolve())
    try:
        yield record
    finally:
        registry.unregister(NAME)


def cli():
    from neural_rom.ui import cli

    return cli


# ----------------------------------------------------------------------------- the toy


def test_toy_method_is_found_trains_in_the_worker_and_plays(
    addon, blend_file, toy, capsys, monkeypatch
):
    from neural_rom.addon import props, training
    from neural_rom.core import jobs as core_jobs

    bpy = addon.bpy
    scene = bpy.context.scene
    obj = ball(bpy)
    s = obj.neural_rom

    # the Train menu and the settings box
    assert (NAME, toy.label) in [item[:2] for item in props.method_items()]
    s.model_method = NAME
    assert s.model_method == NAME and s.method() is toy
    group = s.method_settings.mean_shape
    assert (group.k, group.ramp, group.gain, group.smooth, group.mode) == (0, 4, 1.0, False, "mean")
    assert group.bakes_used == "0, 1"
    rna = group.bl_rna.properties
    assert rna["ramp"].hard_min == 1 and rna["ramp"].hard_max == 1000
    assert rna["k"].hard_min == 0  # 0 = automatic
    assert rna["offset"].unit == "LENGTH" and rna["gain"].hard_max == pytest.approx(10.0)
    assert [i.identifier for i in rna["mode"].enum_items] == ["mean", "median"]
    assert "Frames to reach the mean shape" in rna["ramp"].description
    group.ramp, group.bakes_used = 3, "0"
    assert s.model_settings() == {
        "k": None,
        "ramp": 3,
        "gain": 1.0,
        "offset": 0.0,
        "smooth": False,
        "mode": "mean",
        "bakes_used": [0],
    }
    log = draw_all(bpy, obj)
    drawn = {a["property"] for n, a in log if n == "prop" and a["data"] == group}
    assert drawn == {st.name for st in toy.settings}  # the advanced ones under the fold
    assert any(n == "prop" and a["property"] == "model_method" for n, a in log)

    # the CLI's --help
    assert cli().main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert f"{NAME}: {toy.label}" in out and "eased in over a few frames" in out
    assert "--ramp N" in out and "Frames to reach the mean shape" in out and "--bakes-used" in out

    # trains in the worker process (found there through method_origin), numpy only
    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    bake_in_process(obj, scene)
    spec = training.make_train_job(obj, scene)
    assert spec["method"] == NAME and spec["method_origin"] == toy.origin
    assert spec["needs"] == ["numpy", "scipy"] and spec["settings"]["ramp"] == 3
    asked = []
    real_check = core_jobs.check_interpreter
    monkeypatch.setattr(
        core_jobs,
        "check_interpreter",
        lambda python, needs=("numpy",): asked.append(needs) or real_check(python, needs),
    )
    assert bpy.ops.neural_rom.train() == {"FINISHED"}
    assert asked == [("numpy", "scipy")]  # no torch asked for
    m = s.model
    assert m.method == NAME and m.k == 1 and m.val_error > 0 and m.bakes == 2
    path = Path(bpy.path.abspath(m.path))
    assert path.name == f"{NAME}.nrmodel" and path.is_file()
    log = draw_all(bpy, obj)
    texts = [a.get("text", "") for n, a in log if n == "label"]
    assert toy.label in texts and f"{NAME}: 1 DOFs" in texts  # no cubature: not shown

    # loads through the registry and plays
    sim, model = registry.load_simulator(path)
    assert type(sim).__name__ == "MeanShapeSimulation" and model.method == NAME
    assert sim.ramp == 3
    rest = mesh_positions(obj)
    scene.frame_set(1)
    assert bpy.ops.neural_rom.simulate() == {"FINISHED"}
    scene.frame_set(4)
    moved = mesh_positions(obj)
    assert np.all(np.isfinite(moved)) and np.abs(moved - rest).max() > 1e-5
    scene.frame_set(1)
    np.testing.assert_allclose(mesh_positions(obj), rest, atol=1e-6)
    s.simulate = False

    # Bake Simulation plays it in a worker, which finds it through method_origin too
    from neural_rom.addon.io import export
    from neural_rom.core.data.pc2 import read_pc2

    job = export.make_simulation_job(obj, scene)
    assert job["method"] == NAME and job["method_origin"] == toy.origin
    export.discard_simulation_job(job)
    out = blend_file.parent / "toy.pc2"
    assert bpy.ops.neural_rom.bake_simulation(filepath=str(out), frame_end=4) == {"FINISHED"}
    frames, start, _ = read_pc2(out)
    assert start == 1 and len(frames) == 4
    np.testing.assert_allclose(frames[3], moved, atol=1e-5)
    np.testing.assert_allclose(frames[0], rest, atol=1e-6)

    # removed: its properties and menu item go, the panel falls back to the first method
    registry.unregister(NAME)
    assert not hasattr(s.method_settings, NAME)
    assert NAME not in [item[0] for item in props.method_items()]
    assert s.method().name == registry.names()[0]
    draw_all(bpy, obj)
    with pytest.raises(Exception, match="holds a 'mean_shape' model, which this version"):
        registry.load_simulator(path)


# ----------------------------------------------------------------------------- issue 9


def baked_body(bpy, blend: Path):
    """A ball with bakes whose panel says Linear and whose autoencoder settings are small,
    saved to ``blend``; the file is then reset (the CLI opens it itself)."""
    obj = ball(bpy, name="Body", frames=4)
    s = obj.neural_rom
    s.model_method = "linear"
    ae = s.method_settings.autoencoder
    ae.k, ae.latent_dim, ae.hidden, ae.epochs = 3, 2, "16, 16", 30
    ae.batch_size, ae.max_cubature = 32, 40
    ae.keep_linear = False  # these tests look at which method trains, not at which is kept
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))  # the cache folder is next to it
    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    bake_in_process(obj, bpy.context.scene)
    bpy.ops.wm.save_mainfile()
    bpy.ops.wm.read_factory_settings(use_empty=True)


def test_cli_trains_the_method_asked_for_whatever_the_panel_says(addon, tmp_path, capsys):
    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    baked_body(bpy, blend)
    base = ["train", "--file", str(blend), "--object", "Body"]

    # the reproduction of issue 9: the panel says Linear
    assert cli().main([*base, "--method", "autoencoder", "--device", "cpu", "--save"]) == 0
    out = capsys.readouterr().out
    assert "training Body: autoencoder on 2 bake(s)" in out
    s = bpy.data.objects["Body"].neural_rom
    assert s.model_method == "autoencoder"  # the panel shows the method of its model
    assert s.model.method == "autoencoder" and s.model.k == 2  # its own settings: latent 2
    from neural_rom.core.data.modelfile import load_model

    assert load_model(bpy.path.abspath(s.model.path)).metadata["subspace"]["k"] == 3

    # --k means the basis size for both methods; the method chosen last is the panel's
    argv = [*base, "--method", "linear", "--k", "4", "--max-cubature", "20", "--save"]
    assert cli().main(argv) == 0
    assert "Body: 4 DOFs" in capsys.readouterr().out
    s = bpy.data.objects["Body"].neural_rom
    assert s.model.method == "linear" and s.model_method == "linear"
    argv = [*base, "--method", "autoencoder", "--k", "4", "--epochs", "20", "--device", "cpu"]
    assert cli().main([*argv, "--save"]) == 0
    capsys.readouterr()
    m = bpy.data.objects["Body"].neural_rom.model
    meta = load_model(bpy.path.abspath(m.path)).metadata
    assert m.method == "autoencoder" and meta["subspace"]["k"] == 4  # not the object's 3

    # an option the method does not have is refused, naming the method's settings
    assert bpy.data.objects["Body"].neural_rom.model_method == "autoencoder"
    assert cli().main([*base, "--method", "linear", "--latent-dim", "3"]) == 2
    err = capsys.readouterr().err
    assert "--latent-dim: not a setting of the Linear (POD + cubature) method (linear)" in err
    assert "its settings are --k, --tolerance, --max-k" in err


def test_a_bad_value_is_refused_before_any_job_starts(addon, tmp_path, capsys, monkeypatch):
    from neural_rom.addon import jobs

    bpy = addon.bpy
    blend = tmp_path / "shot.blend"
    baked_body(bpy, blend)
    started = []
    monkeypatch.setattr(jobs, "start_job", lambda *a, **k: started.append(a))

    # through the CLI
    base = ["train", "--file", str(blend), "--object", "Body"]
    for argv, field, rng in [
        (["--k", "-3"], "k = -3", "between 1 and 2000 (0 chooses it automatically)"),
        (["--method", "autoencoder", "--hidden", "16,0"], "hidden", "each between 1 and 4096"),
        (["--validation-fraction", "0.95"], "validation_fraction = 0.95", "between 0 and 0.9"),
    ]:
        assert cli().main([*base, *argv]) == 2
        err = capsys.readouterr().err
        assert field in err and rng in err, err
    assert cli().main([*base, "--k", "three"]) == 2
    assert "'three' is not an integer" in capsys.readouterr().err

    # through the property group (and the Train operator)
    obj = bpy.data.objects["Body"]
    s = obj.neural_rom
    select_only(bpy, obj)
    group = s.method_settings.linear
    group.k = -3
    assert group.k == 0  # the field clamps what a user types: 0 is automatic
    group["k"] = -3  # a script (or an older file) can still store it
    with pytest.raises(RuntimeError, match=r"k = -3 is not valid: between 1 and 2000"):
        bpy.ops.neural_rom.train()
    group["k"] = 4
    s.model_method = "autoencoder"
    s.method_settings.autoencoder.hidden = "16, -2"
    with pytest.raises(RuntimeError, match=r"hidden = .*each between 1 and 4096"):
        bpy.ops.neural_rom.train()
    assert started == [] and s.pending_train == "" and not s.model.path
    assert not (tmp_path / "neural_rom" / "Body" / "models").exists()


# ----------------------------------------------------------------------------- train(run)


def test_trainers_on_the_run_and_of_the_old_signature_train_alike(tmp_path, monkeypatch):
    """The worker checks a job's settings once and hands the trainer a run
    (``train(run)``); a plug-in trainer of the older signature gets the run's fields. Both
    also train through the public call ``Method.trainer_function()(bakes, out, settings)``
    to the same model, and a bad value is refused before either trains."""
    from types import SimpleNamespace

    from neural_rom.core import bake as bk
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.errors import NeuralRomError
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.physics.fem import Material
    from neural_rom.training import worker

    X, T = grid_tetmesh((0.2, 0.05, 0.05), (4, 1, 1))
    material = Material(youngs_modulus=2e5, poisson_ratio=0.4, density=1000.0).to_dict()
    pokes = {"kind": "random_pokes", "count": 1, "strength": 1.0, "duration": 0.1}
    pinned = np.flatnonzero(X[:, 0] < 1e-9).tolist()
    spec = bk.BakeSpec(material=material, scenario=pokes, frames=3, pinned=pinned, variants=2)
    paths = [str(p) for p in bk.bake_variants(SimpleNamespace(X=X, T=T), spec, tmp_path, "b")]
    checked = []
    validate = Method.validate
    monkeypatch.setattr(
        Method, "validate", lambda self, v=None: checked.append(self.name) or validate(self, v)
    )
    records = [registry.register(toy_method()), registry.register(toy_run_method())]
    try:
        means = []
        for record in records:
            job = {**registry.job_fields(record), "bakes": paths, "device": "cpu"}
            checked.clear()
            out = tmp_path / f"{record.name}.nrmodel"
            res = worker.run({**job, "out": str(out), "settings": {"ramp": 2, "bakes_used": [1]}})
            assert checked == [record.name]  # once, in the worker
            assert res["method"] == record.name and res["model"] == str(out)
            sim, model = registry.load_simulator(out)
            assert model.method == record.name and sim.ramp == 2
            # the public call (its caller checks the settings, as the README does)
            settings = record.validate({"ramp": 2})
            again = record.trainer_function()(paths, tmp_path / "again.nrmodel", settings)
            means.append(load_model(again["model"]).arrays["mean"])
            with pytest.raises(NeuralRomError, match="ramp = 0 is not valid: between 1 and 1000"):
                worker.run({**job, "out": str(tmp_path / "bad.nrmodel"), "settings": {"ramp": 0}})
            assert not (tmp_path / "bad.nrmodel").exists()
        np.testing.assert_array_equal(means[0], means[1])
    finally:
        registry.unregister(NAME)
        registry.unregister(NAME_RUN)
