"""The method registry: settings validated by value in one place, built-ins found by listing
core/methods, one name per concept, model files loaded by the method they name, and every
runtime following the simulator protocol."""

import numpy as np
import pytest
from neural_rom.core import registry
from neural_rom.core.data.modelfile import save_model
from neural_rom.core.engine.protocol import FrameInputs, Markers, Simulator
from neural_rom.core.errors import CacheError, NeuralRomError, SimulationError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.methods.linear import LinearSimulation
from neural_rom.core.methods.linear import save as save_linear
from neural_rom.core.physics.fem import Material
from neural_rom.core.physics.sim import SimSettings
from neural_rom.core.registry import Method, Setting

K = Setting("k", "int", None, "Modes", "basis size", minimum=1, maximum=50, auto=True)
TOL = Setting("tolerance", "float", 0.01, "Tolerance", "error", unit="m", minimum=0.0)
HIDDEN = Setting("hidden", "int_list", [8, 8], "Hidden", "widths", minimum=1, maximum=64)
ACT = Setting(
    "activation", "enum", "elu", "Act", "act", items=(("elu", "ELU", ""), ("tanh", "Tanh", ""))
)
FLAG = Setting("rollout", "bool", True, "Rollout", "replay")


def test_builtins_are_found_by_listing_core_methods_linear_first():
    names = registry.names()
    assert names[:2] == ["linear", "autoencoder"]
    lin, ae = registry.get("linear"), registry.get("autoencoder")
    assert not lin.needs_torch and ae.needs_torch
    assert {"forces", "pin_targets", "colliders"} <= lin.inputs
    # one name per concept: the basis size is "k" in every method with a PCA/POD basis
    assert lin.setting("k") == ae.setting("k")
    assert lin.setting("tolerance").unit == ae.setting("tolerance").unit == "m"
    # the PCA baseline comparisons train at other methods' DOFs: one record, with a "k"
    assert registry.baseline() is lin and [m for m in registry.methods() if m.baseline] == [lin]


def test_setting_check_converts_and_refuses_with_name_and_range():
    assert K.check(0) is None and K.check(None) is None  # 0 = automatic
    assert K.check(12) == 12 and K.check(12.0) == 12 and K.check("7") == 7
    for bad in (-3, 51, 2.5, "x", True, float("nan")):
        with pytest.raises(NeuralRomError, match=r"k = .* between 1 and 50 .*0 chooses"):
            K.check(bad)
    assert TOL.check(0.003) == 0.003
    with pytest.raises(NeuralRomError, match=r"tolerance = -1 .*at least 0 m"):
        TOL.check(-1)
    assert HIDDEN.check("32, 16") == [32, 16] == HIDDEN.check([32.0, 16])
    for bad in ("", "8, 0", [8, 65], "a, b", 3):
        with pytest.raises(NeuralRomError, match="hidden"):
            HIDDEN.check(bad)
    assert ACT.check("tanh") == "tanh"
    with pytest.raises(NeuralRomError, match="one of elu, tanh"):
        ACT.check("swish")
    assert FLAG.check("false") is False and FLAG.check(1) is True
    with pytest.raises(NeuralRomError, match="true or false"):
        FLAG.check("maybe")


def test_a_setting_without_auto_needs_a_value_and_a_valid_default():
    with pytest.raises(ValueError, match="auto"):
        Setting("k", "int", None, "Modes", "size")
    with pytest.raises(NeuralRomError):
        Setting("k", "int", 0, "Modes", "size", minimum=1)
    with pytest.raises(NeuralRomError, match="needs a value"):
        TOL.check(None)


def test_validate_fills_defaults_and_names_unknown_fields():
    lin = registry.get("linear")
    v = lin.validate({"k": 8, "seed": 3})
    assert v["k"] == 8 and v["seed"] == 3 and v["max_cubature"] == 500 and v["tolerance"] is None
    assert set(v) == {s.name for s in lin.settings}
    with pytest.raises(
        NeuralRomError, match=r"latent_dim: not a setting of the Linear.*k, tolerance"
    ):
        lin.validate({"latent_dim": 2})
    with pytest.raises(NeuralRomError, match=r"k = -3 is not valid: between 1 and 2000"):
        lin.validate({"k": -3})
    # the autoencoder takes the same k and its own settings
    ae = registry.get("autoencoder").validate({"k": 4, "hidden": "16,16", "latent_dim": 2})
    assert (ae["k"], ae["hidden"], ae["latent_dim"], ae["activation"]) == (4, [16, 16], 2, "elu")


def _toy(name="toy", settings=(K,), load=lambda model, **_: None, **kw):
    return Method(
        name=name,
        label="Toy",
        description="a toy",
        settings=settings,
        load=load,
        trainer="tests.nowhere:train",
        **kw,
    )


def test_register_refuses_one_name_for_two_concepts_and_unregisters():
    bad = Setting("k", "float", 1.0, "Stiffness", "another k", unit="Pa")
    with pytest.raises(ValueError, match="use another name for another concept"):
        registry.register(_toy(settings=(bad,)))
    assert "toy" not in registry.names()
    seen = []
    registry.on_change(lambda: seen.append(1))
    try:
        rec = registry.register(_toy())
        assert rec.origin.endswith("test_registry.py")
        assert (
            registry.names()[-1] == "toy"
            and registry.job_fields(rec)["method_origin"] == rec.origin
        )
        assert registry.job_fields(registry.get("linear")) == {"method": "linear"}
        assert registry.job_fields_of("toy") == registry.job_fields(rec)
        assert registry.job_fields_of("no_such_method") == {}  # the worker names the known
    finally:
        registry.unregister("toy")
        registry._LISTENERS.clear()
    assert "toy" not in registry.names() and len(seen) == 2
    with pytest.raises(NeuralRomError, match="knows linear, autoencoder"):
        registry.get("toy")


def test_a_method_record_checks_its_inputs():
    with pytest.raises(ValueError, match="unknown inputs"):
        _toy(inputs={"telepathy"})
    with pytest.raises(ValueError, match="requires inputs it does not take"):
        _toy(inputs={"forces"}, requires={"markers"})
    needs = _toy(inputs={"forces", "markers"}, requires={"markers"})
    with pytest.raises(SimulationError, match="needs marker targets"):
        registry.check_inputs(needs, FrameInputs(forces=np.zeros((1, 3))))
    registry.check_inputs(needs, FrameInputs(markers=Markers([0], [[0, 0, 1.0]])))
    registry.check_inputs(registry.get("linear"), None)  # takes everything it needs: nothing
    with pytest.raises(SimulationError, match="one position and one weight"):
        Markers([0, 1], [[0, 0, 0]])


def test_the_setting_that_keeps_the_baseline_is_a_record_flag():
    # Compare Methods turns it off by the record (issue 29), naming no setting itself
    assert [m.name for m in registry.methods() if m.keeps_baseline_setting] == ["autoencoder"]
    ae = registry.get("autoencoder")
    assert ae.setting(ae.keeps_baseline_setting).kind == "bool"
    assert _toy().keeps_baseline_setting == ""
    with pytest.raises(ValueError, match="keeps_baseline_setting 'keep' is not one of its"):
        _toy(keeps_baseline_setting="keep")


def _linear_model(tmp_path):
    X, T = grid_tetmesh((0.3, 0.1, 0.1), (3, 1, 1))
    from neural_rom.core.physics.fem import mass_matrix
    from neural_rom.core.reduced.cubature import Cubature
    from neural_rom.core.reduced.subspace import modal_basis

    mat = Material(youngs_modulus=1e5, poisson_ratio=0.3, density=1000.0)
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    from neural_rom.core.physics.fem import TetFEM

    mass = np.asarray(mass_matrix(X, T, mat.density, lumped=True))
    sub = modal_basis(TetFEM(X, T, mat), mass, pinned, 4)
    cub = Cubature(np.arange(len(T)), np.ones(len(T)), {})
    verts = np.arange(len(X))
    path = save_linear(
        tmp_path / "m.nrmodel",
        mesh_hash="h",
        T=T,
        subspace=sub,
        cubature=cub,
        contact=(verts, mass),
        material=mat,
        settings=SimSettings(),
    )
    return path, X


def test_the_runtimes_are_named_after_their_methods_and_keep_their_former_names():
    # issue 29: one name per concept; scripts and plug-ins that import the former class names
    # (core.methods.linear.ReducedSimulation, core.methods.autoencoder.LatentSimulation) and
    # the pins' frame's (core.reduced.pose.PinFrame, FrameMixin) get the same classes
    from neural_rom.core.methods import autoencoder, linear
    from neural_rom.core.reduced import pose

    assert linear.ReducedSimulation is linear.LinearSimulation
    assert autoencoder.LatentSimulation is autoencoder.AutoencoderSimulation
    assert pose.PinFrame is pose.PinPose and pose.FrameMixin is pose.PoseMixin


def test_load_simulator_by_the_method_the_file_names(tmp_path):
    path, X = _linear_model(tmp_path)
    sim, model = registry.load_simulator(path, expect_mesh_hash="h")
    assert model.method == "linear" and isinstance(sim, LinearSimulation)
    assert isinstance(sim, Simulator)  # the protocol, checked structurally
    np.testing.assert_array_equal(sim.rest_positions(), X)
    # the closest shape of a shape in the basis is itself; of rest, rest
    sim.step(FrameInputs())
    x = sim.positions()
    np.testing.assert_allclose(sim.closest_shape(x), x, atol=1e-12)
    np.testing.assert_allclose(sim.closest_shape(X), X, atol=1e-12)
    # start_from then positions reproduces a pose in the basis
    sim.start_from(x, np.zeros_like(x))
    np.testing.assert_allclose(sim.positions(), x, atol=1e-12)

    other = save_model(
        tmp_path / "o.nrmodel", method="telepathy", mesh_hash="h", arrays={"X": X}, metadata={}
    )
    with pytest.raises(CacheError, match=r"'telepathy' model.*knows linear, autoencoder.*update"):
        registry.load_simulator(other)
    broken = save_model(
        tmp_path / "b.nrmodel", method="linear", mesh_hash="h", arrays={"X": X}, metadata={}
    )
    with pytest.raises(CacheError, match="lacks .*retrain"):
        registry.load_simulator(broken)


def test_every_builtin_runtime_follows_the_protocol():
    for m in registry.methods():
        cls = m.load.__annotations__.get("return")
        assert cls is not None, m.name
        mod = __import__(m.load.__module__, fromlist=[cls])
        runtime = getattr(mod, cls)
        for attr in (
            "rest_positions",
            "positions",
            "reset",
            "step",
            "get_state",
            "set_state",
            "start_from",
            "closest_shape",
        ):
            assert callable(getattr(runtime, attr, None)), (m.name, attr)


def test_methods_declare_what_they_train_on():
    with pytest.raises(ValueError, match="trains_on"):
        _toy(trains_on={"telepathy"})
    with pytest.raises(ValueError, match="trains_on"):
        _toy(trains_on=set())
    assert _toy().trains_on == {"fem"}  # the default: full-space bakes
    fem = [m.name for m in registry.methods_for("fem")]
    assert "linear" in fem and "snp" in fem and "active" not in fem
    assert [m.name for m in registry.methods_for("cloth")] == ["snp"]
    assert [m.name for m in registry.methods_for("face")] == ["active"]
    with pytest.raises(ValueError, match="unknown training data kind"):
        registry.methods_for("clay")
    registry.get("linear").check_trains_on("fem")  # no error
    with pytest.raises(NeuralRomError, match=r"trains on a face file.*not on full-space"):
        registry.get("active").check_trains_on("fem")
    with pytest.raises(NeuralRomError, match=r"not on bakes of Blender's own cloth.*: Subspace"):
        registry.get("linear").check_trains_on("cloth")


def test_load_simulator_on_another_mesh_only_for_methods_that_run_there(tmp_path):
    path, X = _linear_model(tmp_path)
    X2, T2 = grid_tetmesh((0.3, 0.1, 0.1), (6, 2, 2))
    assert not registry.get("linear").other_mesh and registry.get("licrom").other_mesh
    with pytest.raises(CacheError, match=r"runs only on the mesh it was trained on.*LiCROM"):
        registry.load_simulator(path, mesh=(X2, T2))
    with pytest.raises(CacheError, match="another mesh"):  # the hash still guards the rest
        registry.load_simulator(path, expect_mesh_hash="not h")
    seen = {}

    def load(model, *, settings=None, colliders=None, mesh=None):
        seen["mesh"] = mesh
        return "sim"

    rec = registry.register(_toy("anymesh", load=load, inputs={"other_mesh"}))
    try:
        other = save_model(
            tmp_path / "a.nrmodel", method="anymesh", mesh_hash="h", arrays={"X": X}, metadata={}
        )
        # another mesh: the training mesh's hash is not the target's, and is not asked for
        sim, model = registry.load_simulator(other, expect_mesh_hash="target", mesh=(X2, T2))
        assert sim == "sim" and seen["mesh"][0] is X2 and rec.other_mesh
        with pytest.raises(CacheError, match="another mesh"):  # no mesh: the hash is checked
            registry.load_simulator(other, expect_mesh_hash="target")
    finally:
        registry.unregister("anymesh")


# Stored names: tests/data/legacy/registry_records.json, written before the redesign of #29
# (tests/legacy_surfaces.py). Model files store a method's name and its settings by name,
# .blend files store method_settings.<method>.<setting> and enum settings as identifiers.
#: what files and scripts depend on; the rest (labels, help, units, order) by the second test
KEPT_SETTING = ("name", "kind", "default", "items", "minimum", "maximum", "auto")
KEPT_METHOD = ("inputs", "requires", "trains_on", "needs_torch", "other_mesh", "baseline")


def _records():
    import json
    from pathlib import Path

    from .legacy_surfaces import registry_records

    path = Path(__file__).parent / "data" / "legacy" / "registry_records.json"
    return json.loads(path.read_text(encoding="utf-8")), registry_records()


def _ids(setting):
    """A setting's stored identity: the items by identifier (labels and help may change)."""
    return {k: [i[0] for i in setting[k]] if k == "items" else setting[k] for k in KEPT_SETTING}


def test_every_stored_method_and_setting_keeps_its_name_kind_default_and_range():
    stored, live = _records()
    changed = [
        f"{table}: {sorted(set(stored['tables'][table]) - set(live['tables'][table]))} gone"
        for table in ("INPUTS", "BAKE_KINDS", "KINDS")
        if set(stored["tables"][table]) - set(live["tables"][table])
    ]
    for name, record in stored["methods"].items():
        now = live["methods"].get(name)
        if now is None:
            changed.append(f"method {name!r} is gone")
            continue
        changed += [
            f"{name}.{f}: {record[f]!r} -> {now[f]!r}" for f in KEPT_METHOD if record[f] != now[f]
        ]
        settings = {s["name"]: _ids(s) for s in now["settings"]}
        for s in map(_ids, record["settings"]):
            if s["name"] not in settings:
                changed.append(f"{name}: setting {s['name']!r} is gone")
                continue
            changed += [
                f"{name}.{s['name']}.{k}: {s[k]!r} -> {settings[s['name']][k]!r}"
                for k in KEPT_SETTING
                if s[k] != settings[s["name"]][k]
            ]
    assert not changed, (
        f"a stored method, setting, default or range changed: {changed}; model files store "
        "method and setting names, .blend files method_settings.<method>.<setting> and enum "
        "items by identifier: a renamed or narrowed one breaks files already on disk"
    )


def test_the_registry_records_are_the_stored_ones_help_texts_included():
    stored, live = _records()
    diffs = [
        f"table {t} changed" for t in stored["tables"] if stored["tables"][t] != live["tables"][t]
    ]
    diffs += [f"new method {n!r}" for n in sorted(set(live["methods"]) - set(stored["methods"]))]
    for name, record in stored["methods"].items():
        now = live["methods"].get(name, record)  # a method gone: the first test names it
        diffs += [f"{name}.{f} changed" for f in record if f != "settings" and record[f] != now[f]]
        was = {s["name"]: s for s in record["settings"]}
        for s in now["settings"]:
            old = was.get(s["name"])
            diffs += (
                [f"{name}: new setting {s['name']!r}"]
                if old is None
                else [f"{name}.{s['name']}.{k} {old[k]!r} -> {s[k]!r}" for k in s if s[k] != old[k]]
            )
    assert not diffs, (
        f"the registry differs from its stored records: {diffs[:30]}; if the change is "
        "deliberate (a new method or setting, a reworded help), rewrite the snapshot with "
        "`.venv/bin/python tests/data/legacy/make_legacy.py --surfaces` and say so in the commit"
    )
