"""Operators, panels and preferences with the PyPI bpy (background mode, no UI regions).

Panels are drawn into a recording stand-in for ``UILayout`` that checks every call against
Blender's own RNA description of UILayout (function names, keyword names, required
arguments) and every property / operator / UI list the panels reference, so a typo fails
here instead of in a user's sidebar.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)

# ----------------------------------------------------------------------------- helpers


class Recorder:
    """Stand-in for bpy.types.UILayout that validates and records calls."""

    CONTAINERS = {"row", "column", "box", "split", "column_flow", "grid_flow", "menu_pie"}

    def __init__(self, log: list):
        object.__setattr__(self, "_log", log)

    def __setattr__(self, name, value):
        import bpy

        assert name in bpy.types.UILayout.bl_rna.properties, f"UILayout has no property {name!r}"

    def __getattr__(self, name):
        import bpy

        fn = bpy.types.UILayout.bl_rna.functions.get(name)
        assert fn is not None, f"UILayout has no function {name!r}"
        params = [p for p in fn.parameters if not p.is_output]
        names = [p.identifier for p in params]

        def call(*args, **kwargs):
            assert len(args) <= len(names), f"{name}: too many positional arguments"
            bound = dict(zip(names, args))
            assert not set(bound) & set(kwargs), f"{name}: argument given twice"
            bound.update(kwargs)
            unknown = set(bound) - set(names)
            assert not unknown, f"UILayout.{name}() has no argument(s) {unknown}"
            missing = [p.identifier for p in params if p.is_required and p.identifier not in bound]
            assert not missing, f"UILayout.{name}() misses {missing}"
            self._log.append((name, bound))
            return _check(name, bound, self._log)

        return call


class OperatorProps:
    """What ``layout.operator()`` returns: accepts only the operator's own properties."""

    def __init__(self, idname: str, rna):
        object.__setattr__(self, "_idname", idname)
        object.__setattr__(self, "_rna", rna)

    def __setattr__(self, name, value):
        assert name in self._rna.properties, f"{self._idname} has no property {name!r}"


def _check(name: str, a: dict, log: list):
    import bpy

    if name in Recorder.CONTAINERS:
        return Recorder(log)
    if name == "panel":  # a fold: (header, body), drawn open
        return Recorder(log), Recorder(log)
    if name == "prop" and a["property"].startswith('["'):  # a custom property (face sliders)
        assert a["property"][2:-2] in a["data"].keys(), f"no custom property {a['property']!r}"
    elif name == "prop":
        assert a["property"] in a["data"].bl_rna.properties, f"no property {a['property']!r}"
    elif name == "prop_search":
        assert a["property"] in a["data"].bl_rna.properties
        assert a["search_property"] in a["search_data"].bl_rna.properties
    elif name == "operator":
        module, fn = a["operator"].split(".")
        rna = getattr(getattr(bpy.ops, module), fn).get_rna_type()  # KeyError when unregistered
        return OperatorProps(a["operator"], rna)
    elif name == "template_list":
        assert hasattr(bpy.types, a["listtype_name"]), (
            f"UI list {a['listtype_name']} not registered"
        )
        assert a["propname"] in a["dataptr"].bl_rna.properties
        assert a["active_propname"] in a["active_dataptr"].bl_rna.properties
    elif name == "label":
        assert isinstance(a.get("text", ""), str)
    elif name == "progress":
        assert 0.0 <= a.get("factor", 0.0) <= 1.0
    return None


def draw_all(bpy, obj) -> list:
    """Poll and draw every sidebar panel (and the bake list) for ``obj``; returns the calls."""
    from neural_rom.ui import panels
    from neural_rom.ui.panels.bake import NEURAL_ROM_UL_bakes

    ctx = SimpleNamespace(
        object=obj,
        scene=bpy.context.scene,
        view_layer=bpy.context.view_layer,
        preferences=bpy.context.preferences,
    )
    log: list = []
    for cls in panels.CLASSES:
        if issubclass(cls, bpy.types.Panel):
            if hasattr(cls, "poll") and not cls.poll(ctx):
                continue
            log.append(("panel", {"id": cls.bl_idname}))
            cls.draw(SimpleNamespace(layout=Recorder(log)), ctx)
    if obj is not None and obj.neural_rom.role == "DEFORMABLE":
        for i, item in enumerate(obj.neural_rom.bakes):
            NEURAL_ROM_UL_bakes.draw_item(
                None, ctx, Recorder(log), obj.neural_rom, item, 0, obj.neural_rom, "active_bake", i
            )
    return log


def texts(log) -> str:
    return "\n".join(a.get("text", "") or "" for n, a in log if n in ("label", "operator", "prop"))


def panels(log) -> set:
    return {a["id"] for n, a in log if n == "panel" and "id" in a}  # not UILayout.panel folds


def ball(bpy, name="Ball", frames=2):
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0, 0, 1))
    obj = bpy.context.object
    obj.name = name
    obj.neural_rom.role = "DEFORMABLE"
    obj.neural_rom.tet_size = 0.3
    obj.neural_rom.frames = frames
    obj.neural_rom.variants = 1  # one bake per Bake (the default bakes 4)
    return obj


def select_only(bpy, *objs):
    for o in bpy.context.view_layer.objects:
        o.select_set(False)
    for o in objs:
        o.select_set(True)
    bpy.context.view_layer.objects.active = objs[0]


# ----------------------------------------------------------------------------- operators


def test_operators_are_named_and_undoable(addon):
    from neural_rom.ui import operators

    bpy = addon.bpy
    assert len(operators.CLASSES) >= 9
    for cls in operators.CLASSES:
        assert cls.bl_idname.startswith("neural_rom."), cls
        assert "REGISTER" in cls.bl_options, cls  # UNDO only where Blender data changes
        module, fn = cls.bl_idname.split(".")
        getattr(getattr(bpy.ops, module), fn).get_rna_type()  # registered


def test_tetrahedralize_operator_cube_and_monkey(addon, blend_file):
    bpy = addon.bpy
    bpy.ops.mesh.primitive_cube_add(location=(-2, 0, 0))
    cube = bpy.context.object
    bpy.ops.mesh.primitive_monkey_add(location=(2, 0, 0))
    monkey = bpy.context.object
    monkey.neural_rom.cage_resolution = 8
    select_only(bpy, cube, monkey)
    assert bpy.ops.neural_rom.tetrahedralize() == {"FINISHED"}
    assert cube.neural_rom.role == monkey.neural_rom.role == "DEFORMABLE"
    assert not cube.neural_rom.tets_embedded and cube.neural_rom.tets_surface == 8
    assert monkey.neural_rom.tets_embedded  # open, non-manifold: through the cage
    for o in (cube, monkey):
        assert (blend_file.parent / "neural_rom" / o.name / "tets.npz").is_file()
        assert o.neural_rom.tets_count > 0 and o.neural_rom.tets_min_dihedral > 0
    # preview, cut away, remove
    select_only(bpy, monkey)
    assert bpy.ops.neural_rom.preview_tets(cutaway=True) == {"FINISHED"}
    prev = bpy.data.objects["Suzanne_tets"]
    assert prev.neural_rom.preview_of == "Suzanne"
    assert bpy.ops.neural_rom.clear_preview() == {"FINISHED"}
    assert "Suzanne_tets" not in bpy.data.objects


def test_tetrahedralize_failure_changes_nothing(addon, blend_file):
    bpy = addon.bpy
    bpy.ops.mesh.primitive_cube_add(location=(-2, 0, 0))
    cube = bpy.context.object
    bpy.ops.mesh.primitive_monkey_add(location=(2, 0, 0))
    monkey = bpy.context.object
    monkey.neural_rom.embedding = "NEVER"
    select_only(bpy, cube, monkey)
    with pytest.raises(
        RuntimeError, match="'Suzanne' is not a closed manifold.*Embedding to 'Auto' or 'Always'"
    ):
        bpy.ops.neural_rom.tetrahedralize()
    # all or nothing: the good cube was not tetrahedralized either
    for o in (cube, monkey):
        assert o.neural_rom.tets_path == "" and o.neural_rom.role == "NONE"
    assert not list((blend_file.parent / "neural_rom").rglob("tets.npz"))


def test_unsaved_file_and_unwritable_cache_dir(addon, tmp_path):
    bpy = addon.bpy
    obj = ball(bpy)
    select_only(bpy, obj)
    with pytest.raises(RuntimeError, match="Save the .blend file first"):
        bpy.ops.neural_rom.tetrahedralize()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bpy.context.scene.neural_rom_scene.cache_dir = str(blocker / "sub")
    with pytest.raises(RuntimeError, match="Cannot write to the cache directory"):
        bpy.ops.neural_rom.tetrahedralize()
    assert obj.neural_rom.tets_path == ""


def test_bake_operator_missing_pin_group(addon, blend_file):
    bpy = addon.bpy
    obj = ball(bpy)
    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    obj.neural_rom.pin_group = "Anchor"
    with pytest.raises(RuntimeError, match="Pin group 'Anchor' does not exist"):
        bpy.ops.neural_rom.bake()
    assert len(obj.neural_rom.bakes) == 0 and obj.neural_rom.pending_bake == ""


def test_bake_play_export_clear_through_the_operators(addon, blend_file):
    """The whole workflow, the bake in a real worker process (run to completion in
    background mode)."""
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    scene = bpy.context.scene
    obj = ball(bpy)
    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    assert bpy.ops.neural_rom.bake() == {"FINISHED"}
    s = obj.neural_rom
    assert len(s.bakes) == 1
    rec = s.bakes[0]
    assert (
        rec.frames == 3 and rec.status == "complete" and rec.path.startswith("//neural_rom/Ball/")
    )
    assert rec.nbytes > 0

    rest = np.array([v.co[:] for v in obj.data.vertices])
    assert bpy.ops.neural_rom.playback() == {"FINISHED"} and s.playback
    scene.frame_set(scene.frame_start + 2)
    moved = np.array([v.co[:] for v in obj.data.vertices])
    assert np.abs(moved - rest).max() > 1e-3  # it fell under gravity
    assert bpy.ops.neural_rom.playback() == {"FINISHED"} and not s.playback
    np.testing.assert_allclose([v.co[:] for v in obj.data.vertices], rest, atol=1e-6)

    out = blend_file.parent / "export" / "ball.pc2"
    assert bpy.ops.neural_rom.export_pc2(filepath=str(out)) == {"FINISHED"}
    frames, start, _ = read_pc2(out)
    assert frames.shape == (3, len(obj.data.vertices), 3) and start == scene.frame_start
    mod = obj.modifiers["Neural ROM Cache"]
    assert mod.cache_format == "PC2" and bpy.path.abspath(mod.filepath) == str(out)

    bake_dir = bpy.path.abspath(rec.path)
    assert bpy.ops.neural_rom.clear_bake(all_bakes=True) == {"FINISHED"}
    assert len(s.bakes) == 0
    import os

    assert not os.path.exists(bake_dir)


def test_playback_operator_refuses_a_stale_bake(addon, blend_file):
    from neural_rom.addon.kinds.fem.bake import make_bake_job, on_bake_done
    from neural_rom.core import bake
    from neural_rom.core.data import meshfile

    bpy = addon.bpy
    obj = ball(bpy, frames=1)
    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    job = make_bake_job(obj, bpy.context.scene)
    paths = bake.bake_variants(
        meshfile.read_tetmesh(job["mesh"]),
        bake.BakeSpec.from_dict(job["spec"]),
        job["out_dir"],
        job["name"],
    )
    on_bake_done(obj, {"paths": [str(p) for p in paths]})
    obj.data.vertices[3].co.x += 0.02
    with pytest.raises(RuntimeError, match="re-bake"):
        bpy.ops.neural_rom.playback()
    with pytest.raises(RuntimeError, match="re-bake"):
        bpy.ops.neural_rom.export_pc2(filepath=str(blend_file.parent / "x.pc2"))
    assert not obj.neural_rom.playback and "Neural ROM Cache" not in obj.modifiers
    assert not (blend_file.parent / "x.pc2").exists()


# ----------------------------------------------------------------------------- properties


def test_material_presets_and_custom(addon):
    from neural_rom.core.physics.fem import PRESETS

    bpy = addon.bpy
    obj = ball(bpy)
    s = obj.neural_rom
    for key in PRESETS:
        s.material_preset = key
        assert s.material_values() == pytest.approx(PRESETS[key])
    s.material_preset = "jelly"
    s.material_preset = "custom"  # starts from the preset shown before
    assert s.youngs_modulus == pytest.approx(PRESETS["jelly"]["youngs_modulus"])
    s.youngs_modulus = 12345.0
    assert s.material_values()["youngs_modulus"] == pytest.approx(12345.0)


def test_the_driver_key_sees_what_the_frames_depend_on(addon):
    """Simulate's driver is rebuilt when its key changes: the material in effect (a preset,
    or the custom values), the start frame, the frame rate, the colliders; a custom value
    not in effect, or the current frame, leaves it."""
    from neural_rom.addon import simulate

    bpy = addon.bpy
    obj, scene = ball(bpy), bpy.context.scene
    s = obj.neural_rom
    s.material_preset = "rubber"
    key = simulate.driver_key(obj, scene)
    s.youngs_modulus = 2.0 * s.youngs_modulus  # not in effect under a preset
    scene.frame_set(scene.frame_start + 3)
    assert simulate.driver_key(obj, scene) == key
    changed = []
    for change in (
        lambda: setattr(s, "material_preset", "jelly"),
        lambda: setattr(s, "material_preset", "custom"),
        lambda: setattr(s, "poisson_ratio", 0.3 if s.poisson_ratio != 0.3 else 0.35),
        lambda: setattr(s, "density", 2.0 * s.density),
        lambda: setattr(scene, "frame_start", scene.frame_start + 1),
        lambda: setattr(scene.render, "fps", 2 * scene.render.fps),
        lambda: setattr(scene.render, "fps_base", 1.001),
    ):
        change()
        new = simulate.driver_key(obj, scene)
        changed.append(new != key)
        key = new
    assert all(changed), changed
    bpy.ops.object.empty_add(type="PLAIN_AXES", location=(0, 0, -1))
    bpy.context.object.neural_rom.role = "COLLIDER"
    assert simulate.driver_key(obj, scene) != key


def test_scenario_parameters(addon):
    from neural_rom.core.bake.scenarios import default_scenario

    bpy = addon.bpy
    obj = ball(bpy)
    s = obj.neural_rom
    assert s.scenario_dict() == default_scenario("gravity_drop")
    s.scenario = "random_pokes"  # fills the parameters
    assert {p.name for p in s.scenario_params} == set(default_scenario("random_pokes")) - {"kind"}
    s.scenario_params["force"].float_value = 25.0
    s.scenario_params["count"].int_value = 9
    d = s.scenario_dict()
    assert d["kind"] == "random_pokes" and d["force"] == 25.0 and d["count"] == 9
    assert d["radius"] == 0.15  # float32 storage does not leak into the spec
    assert bpy.ops.neural_rom.reset_scenario_params() == {"FINISHED"}
    assert s.scenario_dict() == default_scenario("random_pokes")
    s.scenario = "gravity_drop"
    s.scenario_params["initial_velocity"].string_value = "[1, 0, 0]"
    assert s.scenario_dict()["initial_velocity"] == [1, 0, 0]


# ----------------------------------------------------------------------------- panels


def test_panels_draw_for_every_role(addon, blend_file):
    bpy = addon.bpy
    log = draw_all(bpy, None)
    assert "Select an object" in texts(log)

    obj = ball(bpy)
    obj.neural_rom.role = "NONE"
    log = draw_all(bpy, obj)
    assert panels(log) == {"NEURAL_ROM_PT_main", "NEURAL_ROM_PT_cache"}

    # a frame handler's failure (addon.simulate.FRAME_ERROR) is shown at the top of the panel
    obj["nrom_frame_error"] = "Simulation of 'Ball' stopped: the model file is gone; retrain it."
    assert "Simulation of 'Ball' stopped: the model file is" in texts(draw_all(bpy, obj))
    del obj["nrom_frame_error"]
    assert "stopped" not in texts(draw_all(bpy, obj))

    obj.neural_rom.role = "DEFORMABLE"
    log = draw_all(bpy, obj)
    assert {"NEURAL_ROM_PT_material", "NEURAL_ROM_PT_tets", "NEURAL_ROM_PT_scenario"} <= panels(log)
    assert "NEURAL_ROM_PT_playback" not in panels(log)  # nothing to play yet
    assert "No tets yet" in texts(log)
    obj.neural_rom.material_preset = "custom"
    obj.neural_rom.scenario = "random_pokes"
    obj.neural_rom.pin_group = "missing"
    obj.neural_rom.dt_from_scene = False
    log = draw_all(bpy, obj)
    assert "No vertex group 'missing'" in texts(log)
    assert any(n == "prop" and a["property"] == "youngs_modulus" for n, a in log)
    assert any(n == "prop" and a["data"].name == "count" for n, a in log)  # scenario params
    obj.neural_rom.pin_group = ""

    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    from neural_rom.addon.kinds.fem.bake import (
        make_bake_job,
        on_bake_done,
        start_playback,
        stop_playback,
    )
    from neural_rom.addon.kinds.fem.preview import build_preview
    from neural_rom.core import bake
    from neural_rom.core.data import meshfile

    job = make_bake_job(obj, bpy.context.scene)
    paths = bake.bake_variants(
        meshfile.read_tetmesh(job["mesh"]),
        bake.BakeSpec.from_dict(job["spec"]),
        job["out_dir"],
        job["name"],
    )
    on_bake_done(obj, {"paths": [str(p) for p in paths]})
    start_playback(obj)
    log = draw_all(bpy, obj)
    assert {"NEURAL_ROM_PT_bake", "NEURAL_ROM_PT_playback"} <= panels(log)
    t = texts(log)
    assert f"{obj.neural_rom.tets_count} tets" in t and "3 frames" in t and "Stop Playback" in t
    assert any(n == "template_list" for n, _ in log)
    stop_playback(obj)

    # a tet preview object
    build_preview(obj)
    log = draw_all(bpy, bpy.data.objects["Ball_tets"])
    assert "Tet preview of 'Ball'" in texts(log)

    # colliders: an empty and a mesh, every shape
    bpy.ops.object.empty_add(type="SPHERE")
    empty = bpy.context.object
    bpy.ops.mesh.primitive_cylinder_add()
    cyl = bpy.context.object
    for o in (empty, cyl):
        o.neural_rom.role = "COLLIDER"
        for shape in ("plane", "sphere", "capsule"):
            o.neural_rom.collider_shape = shape
            log = draw_all(bpy, o)
            assert panels(log) == {"NEURAL_ROM_PT_main", "NEURAL_ROM_PT_cache"}
            assert "drives the bakes" in texts(log)
    empty.scale = (0.0, 0.0, 0.0)
    bpy.context.view_layer.update()
    empty.neural_rom.collider_shape = "sphere"
    assert "zero size" in texts(draw_all(bpy, empty))


def test_preferences_and_interpreter_check(addon):
    from neural_rom.addon.prefs import draw_preferences

    bpy = addon.bpy
    p = addon.prefs
    assert p.cache_dir == "//neural_rom/" and p.device == "AUTO" and p.python_path == ""
    log: list = []
    draw_preferences(Recorder(log), p)
    assert any(n == "operator" and a["operator"] == "neural_rom.check_interpreter" for n, a in log)

    assert bpy.ops.neural_rom.check_interpreter() == {"FINISHED"}
    # The job Python's own versions (numpy 1 on Blender 4's line, 2 on Blender 5's).
    from neural_rom.addon.prefs import job_python
    from neural_rom.core.jobs import probe_interpreter

    found = probe_interpreter(job_python())
    assert f"numpy {found['numpy']}, scipy {found['scipy']}, " in p.last_check, p.last_check
    assert "CUDA" in p.last_check
    p.python_path = "/nonexistent/python3"
    with pytest.raises(RuntimeError, match="cannot run"):
        bpy.ops.neural_rom.check_interpreter()
    assert "cannot run" in p.last_check


def test_a_collision_object_the_bake_ignores_is_named_in_a_warning(addon, blend_file):
    """A ground set up for Blender's own physics (a Collision modifier, role None) is not
    part of an FEM bake (its shape is unknown): Bake says so and still starts; once it is a
    Collider the bake uses it and the warning is gone."""
    from neural_rom.addon.kinds.fem.bake import make_bake_job

    bpy = addon.bpy
    obj = ball(bpy, frames=1)
    bpy.ops.mesh.primitive_plane_add(size=4, location=(0, 0, -1))
    ground = bpy.context.object
    ground.name = "Ground"
    ground.modifiers.new("Collision", "COLLISION")
    select_only(bpy, obj)
    bpy.ops.neural_rom.tetrahedralize()
    job = make_bake_job(obj, bpy.context.scene)
    assert len(job["warnings"]) == 1
    assert "'Ground'" in job["warnings"][0] and "Collider" in job["warnings"][0]
    assert job["spec"]["colliders"] == []
    ground.neural_rom.role = "COLLIDER"
    ground.neural_rom.collider_shape = "plane"
    job = make_bake_job(obj, bpy.context.scene)
    assert job["warnings"] == [] and [c["kind"] for c in job["spec"]["colliders"]] == ["plane"]


def test_the_dynamics_hint_names_only_the_levers_a_method_has(addon):
    """A replay over 3x the closest shapes warns with the method's own levers: the linear
    model's modes and cubature, never cubature for Subspace Neural Physics (it has none)."""
    from neural_rom.core import registry
    from neural_rom.ui.panels.model import dynamics_hint

    linear, snp = dynamics_hint(registry.get("linear")), dynamics_hint(registry.get("snp"))
    assert linear == "Dynamics limit accuracy: try more modes, a lower cubature target"
    assert "cubature" not in snp and "more modes" in snp and "more training bakes" in snp
    assert dynamics_hint(None) == "Dynamics limit accuracy"
