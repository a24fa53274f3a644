"""The object's settings by stage (``addon/props/``): the FEM fields live in one group per
stage, keep their flat names as aliases for scripts, and a file saved before the groups
(the Blender 4.5 legacy .blend) has its flat values moved into them on load, unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("bpy", reason="the property groups need the PyPI bpy (scripts/setup_env.sh)")

from .blender_fixtures import registered  # noqa: E402

LEGACY = Path(__file__).parent / "data" / "legacy"
#: objects of the legacy scene whose settings were set (values stored flat)
STORED = json.loads((LEGACY / "scene_values.json").read_text(encoding="utf-8"))["values"]


@pytest.fixture(scope="module")
def legacy():
    with registered() as ns:
        ns.bpy.ops.wm.open_mainfile(filepath=str(LEGACY / "scene.blend"))
        yield ns


def _param_rows(params) -> list:
    fields = ("name", "value_type", "float_value", "int_value", "bool_value", "string_value")
    return [tuple(getattr(p, f) for f in fields) for p in params]


def _flat_values(bpy):
    """owner:name -> value of every stored flat FEM field, read at its stage group."""
    from neural_rom.addon.props import FIELD_STAGE

    out = {}
    for path, want in STORED.items():
        owner, _, attrs = path.partition(":")
        parts = attrs.split(".")
        if owner == "Scene" or len(parts) != 2 or parts[0] != "neural_rom":
            continue
        name = parts[1].split("[")[0]
        if name in FIELD_STAGE:
            out[path] = (owner, FIELD_STAGE[name], name, want)
    return out


def test_a_legacy_files_flat_settings_are_moved_into_their_stage_groups(legacy):
    """Every stored FEM value reads back at its group's path, no flat key is left in the
    file's ID properties, each object records the layout, and a second migration moves
    nothing and changes nothing."""
    from neural_rom.addon.props import FIELD_STAGE, LAYOUT_VERSION, migrate

    bpy = legacy.bpy
    moved = _flat_values(bpy)
    assert len(moved) >= 30, f"the legacy scene stores only {len(moved)} flat FEM values"
    for path, (owner, stage, name, want) in moved.items():
        got = getattr(getattr(bpy.data.objects[owner].neural_rom, stage), name)
        if hasattr(got, "__len__") and not isinstance(got, str):
            continue  # a collection: its items are checked through the flat path below
        assert got == want, f"{path}: stored {want!r}, {stage}.{name} reads {got!r}"
    for obj in bpy.data.objects:
        raw = set(obj.neural_rom.keys())
        assert not raw & set(FIELD_STAGE), f"{obj.name}: flat keys left {raw & set(FIELD_STAGE)}"
        if raw:
            assert obj.neural_rom.version == LAYOUT_VERSION
    body = bpy.data.objects["Body"].neural_rom
    params = _param_rows(body.bake.scenario_params)
    assert len(params) == 3 and _param_rows(body.scenario_params) == params
    assert migrate.migrate_file() == 0
    assert _param_rows(body.bake.scenario_params) == params
    for path, (owner, _stage, name, want) in moved.items():
        got = getattr(bpy.data.objects[owner].neural_rom, name)
        assert hasattr(got, "__len__") and not isinstance(got, str) or got == want, path


def test_the_flat_names_read_and_write_the_stage_groups(legacy):
    """``obj.neural_rom.frames = 24`` (scripts, the README, the farm) is
    ``obj.neural_rom.bake.frames``; an enum takes its identifier; a wrong type is refused
    with Blender's own message; a string path names the group; :meth:`applies` knows the
    groups and their fields."""
    bpy = legacy.bpy
    obj = bpy.data.objects.new("Alias", bpy.data.meshes.new("Alias"))
    s = obj.neural_rom
    s.frames, s.tet_size, s.scenario, s.pin_group = 24, 0.05, "random_pokes", "Pins"
    assert (s.bake.frames, s.tets.tet_size, s.bake.scenario, s.simulation.pin_group) == (
        24,
        pytest.approx(0.05),
        "random_pokes",
        "Pins",
    )
    # the scenario's update ran on its group: parameters filled for the new scenario
    assert s.scenario_params_kind == "random_pokes" and len(s.scenario_params) > 0
    s.material.material_preset = "jelly"
    assert s.material_preset == "jelly" and s.material_values()["density"] == s.density
    with pytest.raises(TypeError, match="expected an int"):
        s.frames = "many"
    assert s.bake.frames == 24
    # what names a property by a string takes the group's path (README "Files on disk")
    assert obj.path_resolve("neural_rom.bake.frames") == 24
    assert obj.keyframe_insert("neural_rom.bake.frames", frame=1)
    with pytest.raises(ValueError, match="could not be resolved"):
        obj.path_resolve("neural_rom.frames")
    assert s.applies("bake") and s.applies("frames") and s.applies("tets_path")
    s.role = "COLLIDER"
    assert not s.applies("frames") and not s.applies("material") and s.applies("collider_shape")
    bpy.data.objects.remove(obj)


def test_a_moved_file_saves_and_reads_back_unchanged(legacy, tmp_path):
    """Saved after the move and opened again, the file reads every stored value back."""
    bpy = legacy.bpy
    want = {p: v for p, (*_, v) in _flat_values(bpy).items()}
    path = tmp_path / "moved.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    bpy.ops.wm.open_mainfile(filepath=str(path))
    for p, v in want.items():
        owner, _, attrs = p.partition(":")
        got = getattr(bpy.data.objects[owner].neural_rom, attrs.split(".")[1])
        assert hasattr(got, "__len__") and not isinstance(got, str) or got == v, p
