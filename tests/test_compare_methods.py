"""Compare Methods (issue 25, item 2): every method of the registry on one object's bakes,
one table, a recommendation; refusals with reasons; resume after a cancel.

One tiny asset (a pinned bar keyed to swing, its bakes drawn from the swing), two methods
trained (linear, and the autoencoder for a few epochs), the others listed as not asked
for or refused: the table's numbers are each model's own ``compare`` to 1e-9.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from neural_rom.core import registry
from neural_rom.core.errors import JobCancelled
from neural_rom.core.jobs import compare_methods as mc

from .blender_fixtures import registered

ASKED = ("linear", "autoencoder")
QUICK = ["--epochs", "4", "--search-epochs", "2", "--max-frames", "40"]


def _cli(*argv) -> int:
    from neural_rom.ui import cli

    return cli.main(list(argv))


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """The bar tetrahedralized, baked (3 variants of 16 frames, drawn from its swing) and
    compared through the CLI; yields what the tests need, the extension unregistered after."""
    with registered() as ns:
        bpy = ns.bpy
        folder = tmp_path_factory.mktemp("methods")
        blend = folder / "bar.blend"
        bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0.0, 0.0, -0.5))
        obj = bpy.context.object
        obj.name = "Bar"
        obj.scale = (0.15, 0.15, 1.0)
        bpy.ops.object.transform_apply(scale=True)
        bpy.context.scene.cursor.location = (0.0, 0.0, 0.0)
        bpy.ops.object.origin_set(type="ORIGIN_CURSOR")
        group = obj.vertex_groups.new(name="Top")
        group.add([v.index for v in obj.data.vertices if v.co.z > -0.01], 1.0, "REPLACE")
        for f, a in ((1, 0.0), (8, 0.5), (16, -0.4), (24, 0.0)):
            obj.rotation_euler = (a, 0.0, 0.0)
            obj.keyframe_insert("rotation_euler", frame=f)
        s = obj.neural_rom
        s.role, s.pin_group = "DEFORMABLE", "Top"
        s.frames, s.variants = 16, 3
        bpy.ops.wm.save_as_mainfile(filepath=str(blend))
        assert _cli("tetrahedralize", "--tet-size", "0.12", "--save") == 0
        assert _cli("bake", "--processes", "1", "--save") == 0
        out = folder / "methods.json"
        argv = ["compare-methods", "--budget", "20", "--json", str(out), "--save"]
        argv += [a for m in ASKED for a in ("--method", m)] + QUICK
        assert _cli(*argv) == 0
        yield {"bpy": bpy, "obj": bpy.data.objects["Bar"], "json": out, "folder": folder}


def _plan(obj, **kw):
    from neural_rom.addon.compare import methods as methodcompare
    from neural_rom.ui.cli import build_parser, given_settings

    args = build_parser().parse_args(["compare-methods", *QUICK])
    return methodcompare.make_compare_methods_job(
        obj,
        obj.users_scene[0],
        budget_s=20.0,
        settings=given_settings(args),
        only=list(ASKED),
        **kw,
    )


def _train_in_process(spec, progress=None):
    from neural_rom.core.jobs.train import run_train

    return run_train(spec, progress)


def _compare_in_process(spec):
    from neural_rom.core.jobs.compare import compare_with_bake

    return compare_with_bake(spec)


def test_every_method_is_listed_with_a_reason_or_numbers(compared):
    table = json.loads(compared["json"].read_text())["objects"][0]
    rows = {r["method"]: r for r in table["rows"]}
    assert list(rows) == registry.names()  # every method, in the registry's order
    for name, row in rows.items():
        if name in ASKED:
            assert row["status"] == mc.DONE, row
            assert row["dofs"] >= 1 and row["mean_m"] > 0 and row["max_m"] >= row["mean_m"]
            assert 0 < row["mean_pct"] < 100 and row["step_ms"] > 0
            assert row["pca_max_m"] is not None  # a linear model of as many DOFs
            model = (
                compared["folder"] / "neural_rom" / "Bar" / "compare_methods" / f"{name}.nrmodel"
            )
            assert row["model_bytes"] == model.stat().st_size
            # the runtime's memory: the loaded arrays, then a step's working memory on top
            assert 0 < row["memory_loaded_bytes"] <= row["memory_bytes"]
        elif name == "active":  # a face method: refused, saying what it trains on
            assert row["status"] == mc.REFUSED and "face file" in row["reason"]
        else:
            assert row["status"] == mc.REFUSED and "not asked for" in row["reason"]
    linear = rows["linear"]  # PCA at linear's own size is linear's own closest shapes
    n = compared["obj"].neural_rom.tets_nodes
    assert n > 20
    assert linear["memory_loaded_bytes"] >= 3 * n * linear["dofs"] * 8  # its float64 basis
    # two methods on two cores: trained at once, each in its own process on one thread
    from neural_rom.core.jobs import usable_cores

    assert table["lanes"] == min(usable_cores(), len(ASKED))
    if table["lanes"] > 1:
        for name in ASKED:
            assert table["models"][name]["result"]["threads"] == 1
    # ... though the PCA model has one cubature element and is not replayed: its basis alone
    assert linear["pca_max_m"] == pytest.approx(linear["closest_max_m"], rel=1e-9)
    assert linear["pca_mean_m"] == pytest.approx(linear["closest_mean_m"], rel=1e-9)
    state = mc.read_state(
        compared["folder"] / "neural_rom" / "Bar" / "compare_methods" / mc.STATE_FILE
    )
    pca = state[mc.BASELINE][str(linear["dofs"])]
    assert [r["step_ms"] for r in pca["replays"]] == [0.0] * len(pca["replays"])
    rec = table["recommendation"]
    assert rec["method"] in ASKED and rows[rec["method"]]["label"] in rec["reason"]
    assert compared["obj"].neural_rom.model.method == rec["method"]


def test_the_bake_drew_its_variants_picture(compared):
    """The bar's 3 drawn variants: their picture in the cache, one 40-pixel row each, and the
    image the Bake panel shows holds it."""
    from neural_rom.addon.kinds.fem import bake as bakes

    obj = compared["obj"]
    path = compared["folder"] / "neural_rom" / "Bar" / bakes.VARIANTS_PICTURE
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = compared["bpy"].data.images[bakes.variants_image_name(obj)]
    assert tuple(img.size) == (240, 3 * 40) and img.filepath_raw == str(path)


def test_table_numbers_are_each_methods_own_compare(compared):
    """A re-run keeps both methods (nothing trains again); each one's model, recorded on the
    object, replayed by the ``compare`` command gives the table's numbers to 1e-9."""
    from neural_rom.addon.compare import methods as methodcompare

    obj = compared["obj"]
    job = _plan(obj)

    def no_training(spec):
        raise AssertionError(f"{spec['method']} trained again")

    result = mc.run_comparison(job, train=no_training, compare=_compare_in_process)
    assert sorted(result["kept"]) == sorted(ASKED) and result["trained"] == []
    rows = {r["method"]: r for r in result["rows"]}
    for method in ASKED:
        methodcompare.use_method(obj, job, result, method)
        out = compared["folder"] / f"compare_{method}.json"
        assert _cli("compare", "--object", "Bar", "--json", str(out)) == 0
        own = json.loads(out.read_text())["bakes"]
        replays = rows[method]["replays"]
        assert [b["frames"] for b in own] == [r["frames"] for r in replays]
        for b, r in zip(own, replays):
            for ours, theirs in (("max", "max_error_m"), ("mean", "mean_error_m")):
                assert r[ours] == pytest.approx(b[theirs], rel=1e-9, abs=1e-12)
            assert r["closest_max"] == pytest.approx(b["closest_shape_max_error_m"], rel=1e-9)
        assert rows[method]["max_m"] == pytest.approx(max(b["max_error_m"] for b in own), rel=1e-9)


def test_a_state_file_from_before_issue_29_is_read(compared):
    """State files written before issue 29 keep the baseline at equal DOFs under "pca": a
    re-run reads it there and trains nothing again, the baseline's models included; the
    autoencoder is planned without keeping the linear model (its record's
    ``keeps_baseline_setting``), the table being that comparison."""
    obj = compared["obj"]
    job = _plan(obj)
    plan = {e["method"]: e for e in job["methods"]}
    assert plan["autoencoder"]["train"]["settings"]["keep_linear"] is False
    assert Path(job[mc.BASELINE]["train"]["out"]).name == mc.BASELINE_FILE == "pca.nrmodel"
    path = Path(job["state"])
    state = json.loads(path.read_text(encoding="utf-8"))
    assert mc.OLD_BASELINE not in state and state[mc.BASELINE]
    state["pca"] = state.pop(mc.BASELINE)  # as an earlier version wrote it
    path.write_text(json.dumps(state, indent=1), encoding="utf-8")

    def no_training(spec):
        raise AssertionError(f"{spec['out']} trained again")

    result = mc.run_comparison(job, train=no_training, compare=_compare_in_process)
    assert sorted(result["kept"]) == sorted(ASKED) and result["trained"] == []
    for row in result["rows"]:
        if row["method"] in ASKED:  # the baseline's closest shapes, read from "pca"
            assert row["pca_max_m"] is not None and row["pca_mean_m"] is not None
    linear = next(r for r in result["rows"] if r["method"] == "linear")
    assert linear["pca_max_m"] == pytest.approx(linear["closest_max_m"], rel=1e-9)


def test_a_cancelled_comparison_keeps_what_it_finished_and_resumes(compared):
    pytest.importorskip("torch", reason="trains the autoencoder in this process")
    obj = compared["obj"]
    folder = Path(compared["folder"]) / "neural_rom" / "Bar" / "compare_methods"
    assert any(folder.glob("*.checkpoints"))
    job = _plan(obj, restart=True, processes=1)  # forgotten: both train again, in turn
    # from the start: a training resuming from its last checkpoint made the same model again
    assert not any(folder.glob("*.checkpoints")) and not (folder / mc.STATE_FILE).exists()
    calls = []

    def cancel_second(spec, progress=None):
        calls.append(spec["method"])
        if spec["method"] == "autoencoder":
            raise JobCancelled("cancelled by the test")
        return _train_in_process(spec, progress)

    with pytest.raises(JobCancelled, match="re-run resumes") as info:
        mc.run_comparison(job, train=cancel_second, compare=_compare_in_process)
    assert info.value.result["trained"] == ["linear"] and calls == ["linear", "autoencoder"]
    state = mc.read_state(job["state"])
    # trained, its replays (after every training, with nothing else running) not yet run
    assert state["methods"]["linear"]["status"] == mc.TRAINED
    assert "autoencoder" not in state["methods"]
    model = state["methods"]["linear"]["model"]
    stamp = state["methods"]["linear"]["stamp"]

    calls.clear()
    again = _plan(obj)
    said = []
    result = mc.run_comparison(
        again, train=_count(calls), compare=_compare_in_process, say=lambda *a: said.append(a)
    )
    assert result["kept"] == ["linear"] and result["trained"] == ["autoencoder"]
    # the autoencoder's own progress (its trainer's messages) moved the comparison's bar
    own = [f for f, m in said if m.startswith("training Autoencoder") and m[-8:] != "starting"]
    assert len({f for f in own if 0 < f < mc.TRAINING}) >= 3, said
    assert {r["method"]: r["status"] for r in result["rows"]}["linear"] == mc.DONE
    # linear not trained again (the PCA of the autoencoder's size is, to its own file)
    assert calls[0] == "autoencoder.nrmodel" and "linear.nrmodel" not in calls
    assert mc._stamp(model) == stamp


def _count(calls):
    def train(spec, progress=None):
        calls.append(Path(spec["out"]).name)
        return _train_in_process(spec, progress)

    return train


def test_refusals_change_nothing(compared):
    from neural_rom.addon.compare import methods as methodcompare
    from neural_rom.core.errors import NeuralRomError

    obj = compared["obj"]
    before = obj.neural_rom.model.path
    assert _cli("compare-methods", "--object", "Bar", "--budget", "0") == 2
    with pytest.raises(
        NeuralRomError, match="Unknown method .pod.; this version of Neural ROM knows linear"
    ):
        methodcompare.make_compare_methods_job(obj, obj.users_scene[0], budget_s=10.0, only=["pod"])
    assert obj.neural_rom.model.path == before


def test_the_panel_button_runs_the_comparison_and_shows_the_table(compared):
    """Compare Methods from the panel (blocking in the background), linear only: kept from
    the last comparison; the table's lines land on the object for the Reduced Model panel,
    which draws them."""
    from neural_rom.ui.panels.model import draw_methods_table

    bpy, obj = compared["bpy"], compared["obj"]
    for o in bpy.context.view_layer.objects:
        o.select_set(o is obj)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.neural_rom.compare_methods(budget=20.0, methods="linear") == {"FINISHED"}
    lines = list(obj["neural_rom_methods"])
    assert len(lines) == len(registry.names()) + 1 and lines[-1].startswith("Use ")
    assert any(line.startswith("Linear") and "DOFs, replay" in line for line in lines)

    class Layout:  # what draw_methods_table calls
        def __init__(self):
            self.labels, self.buttons = [], []

        def box(self):
            return self

        def row(self, align=False):
            return self

        def label(self, text="", icon="NONE"):
            self.labels.append(text)

        def operator(self, idname, text="", icon="NONE"):
            self.buttons.append((idname, icon))
            return self.buttons_props.setdefault(len(self.buttons), type("Props", (), {})())

    layout = Layout()
    layout.buttons_props = {}
    draw_methods_table(layout, obj)
    assert layout.labels == lines
    # one "use this row" button on each row with a model, the active model's ticked
    done = [m for m in obj["neural_rom_methods_rows"] if m]
    assert [p.method for p in layout.buttons_props.values()] == done
    ticked = [
        p.method
        for i, p in layout.buttons_props.items()
        if layout.buttons[i - 1][1] == "CHECKBOX_HLT"
    ]
    assert ticked == [obj.neural_rom.model.method]


def test_use_makes_a_rows_model_the_objects(compared):
    """``--use <method>`` and the panel's "use this row" button make that row's model the
    object's (the comparison kept, nothing trained again); a row without a model is refused
    saying why, and changes nothing."""
    from neural_rom.addon.compare import methods as methodcompare
    from neural_rom.core.errors import NeuralRomError

    bpy, obj = compared["bpy"], compared["obj"]
    argv = ["compare-methods", "--object", "Bar", "--budget", "20", *QUICK]
    argv += [a for m in ASKED for a in ("--method", m)]
    for method in ("autoencoder", "linear"):
        assert _cli(*argv, "--use", method) == 0
        assert obj.neural_rom.model.method == method
        assert obj.neural_rom.model.path.endswith(f"{method}.nrmodel")
    before = obj.neural_rom.model.path
    assert _cli(*argv, "--use", "shen") == 2  # not asked for: refused before any job
    with pytest.raises(NeuralRomError, match="has no shen model .not asked for"):
        methodcompare.use_row(obj, "shen")
    assert obj.neural_rom.model.path == before
    for o in bpy.context.view_layer.objects:
        o.select_set(o is obj)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.neural_rom.use_compared_method(method="autoencoder") == {"FINISHED"}
    assert obj.neural_rom.model.method == "autoencoder"


def test_the_users_shot_is_replayed_never_trained_on(compared):
    """A bake of the animation as it plays (``bake --motion scenario``), named as the shot:
    linear trains on the 3 drawn bakes only and replays the shot, its numbers the model's
    own ``compare`` of that bake to 1e-9. (Last: it adds a bake to the object.)"""
    from neural_rom.core.data.modelfile import read_metadata

    obj = compared["obj"]
    assert _cli("bake", "--motion", "scenario", "--variants", "1", "--seed", "7") == 0
    shot = "gravity_drop_s7_v000"
    assert shot in [b.name for b in obj.neural_rom.bakes]
    out = compared["folder"] / "shot.json"
    argv = ["compare-methods", "--method", "linear", "--shot", shot, "--json", str(out)]
    assert _cli(*argv) == 0
    (row,) = [r for r in json.loads(out.read_text())["objects"][0]["rows"] if r["status"] == "done"]
    assert row["method"] == "linear" and row["shot_mean_m"] > 0
    assert [r["role"] for r in row["replays"]] == ["held out"]
    given = read_metadata(obj.neural_rom.model.path and _abs(obj.neural_rom.model.path))["bakes"]
    assert len(given) == 3 and not any(shot in str(p) for p in given)
    own = compared["folder"] / "shot_compare.json"
    assert _cli("compare", "--object", "Bar", "--bake", shot, "--json", str(own)) == 0
    (b,) = json.loads(own.read_text())["bakes"]
    (r,) = row["shot_replays"]
    assert r["mean"] == pytest.approx(b["mean_error_m"], rel=1e-9)
    assert r["max"] == pytest.approx(b["max_error_m"], rel=1e-9)


def _abs(path: str) -> str:
    from neural_rom.addon.io.paths import load_path

    return str(load_path(path))
