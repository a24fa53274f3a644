"""A LiCROM family's pins are its objects' pin groups, through the headless CLI: Blender's
cone hung from its base cap (an n-gon that TetGen fills with nodes of its own, which the
bakes leave free), two lengths trained together (the held-out rollout runs), compared on
both (the model pins what the bakes pinned), put on an unseen length (its pinned base held
in the point cache) and on a member pinned at its tip instead (told so, by name).

One module-scoped scene: cones of 8 vertices a ring, 2 bakes of 6 frames each, a tiny field.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from . import test_cli as base
from .blender_fixtures import addon  # noqa: F401 (pytest fixture)

TINY = [
    "--latent-dim", "4", "--hidden", "16,16,16,32", "--epochs", "30", "--points-per-frame", "96",
    "--encoder-points", "48", "--batch-size", "4", "--cubature-vertices", "20", "--device", "cpu",
]  # fmt: skip


def make_cone(bpy, name, x, depth, pin="base"):
    """Blender's cone (8 vertices, radii 0.08 / 0.02 m) hung tip down from its base at the
    object's origin, ``x`` metres along x; pin group ``Pins``: the base ring (or the tip's)."""
    bpy.ops.mesh.primitive_cone_add(
        vertices=8, radius1=0.08, radius2=0.02, depth=depth, location=(x, 0.0, 1.0)
    )
    obj = bpy.context.object
    obj.name = name
    co = np.array([v.co[:] for v in obj.data.vertices])
    co[:, 2] = -(co[:, 2] + depth / 2)  # base at z = 0, tip at -depth
    obj.data.vertices.foreach_set("co", co.astype(np.float32).ravel())
    obj.data.update()
    z = co[:, 2]
    held = np.flatnonzero(z > -1e-6) if pin == "base" else np.flatnonzero(z < -depth + 1e-6)
    obj.vertex_groups.new(name="Pins").add([int(i) for i in held], 1.0, "REPLACE")
    s = obj.neural_rom
    s.role = "DEFORMABLE"
    s.pin_group = "Pins"
    s.tet_size = 0.04
    s.frames = 6
    s.variants = 2
    return obj


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return {"dir": tmp_path_factory.mktemp("licrom_pins")}


def trained_scene(bpy, store):
    """The trained scene's path (built on first use): C30 (the model's owner) trained with
    C45; C38 unseen; CTip unseen and pinned at its tip."""
    from .test_addon_train import bake_in_process

    path = store["dir"] / "cones.blend"
    if "built" not in store:
        bpy.ops.wm.save_as_mainfile(filepath=str(path))
        cones = [
            make_cone(bpy, "C30", 0.0, 0.3),
            make_cone(bpy, "C45", 0.5, 0.45),
            make_cone(bpy, "C38", 1.0, 0.375),
            make_cone(bpy, "CTip", 1.5, 0.375, pin="tip"),
        ]
        bpy.ops.wm.save_mainfile()
        assert base.cli().main(["tetrahedralize", "--save"]) == 0
        for obj in cones[:2]:
            bake_in_process(obj, bpy.context.scene)
        bpy.ops.wm.save_mainfile()
        argv = ["train", "--object", "C30", "--with", "C45", "--method", "licrom", *TINY]
        assert base.cli().main([*argv, "--save"]) == 0
        store["built"] = True
    bpy.ops.wm.open_mainfile(filepath=str(path))
    return path


def test_family_pinned_at_a_cap_tetgen_filled_trains_compares_and_simulates(
    addon, store, tmp_path, capsys
):
    """The cones' base caps carry TetGen nodes the bakes left free; the model pins exactly
    the pin group's nodes on each: the held-out rollout ran (no "skipped"), Compare with Bake
    replays both members' bakes (exit 0), and an unseen length simulates with its base held."""
    from neural_rom.addon.kinds.fem.tets import load_tets
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    trained_scene(bpy, store)
    owner = bpy.data.objects["C30"]
    for name in ("C30", "C45"):
        t = load_tets(bpy.data.objects[name])
        X = np.asarray(t.mesh.X)
        cap = np.flatnonzero(np.abs(X[:, 2]) < 1e-6)
        print(f"{name}: {len(X)} nodes, {len(cap)} on the base cap, 8 pinned")
        assert len(cap) > 8  # TetGen's own nodes on the pinned face
    model = load_model(bpy.path.abspath(owner.neural_rom.model.path))
    metrics = model.metadata["metrics"]
    print("warnings:", model.metadata["warnings"], "rollout:", metrics.get("rollout"))
    assert not any("skipped" in w for w in model.metadata["warnings"])
    assert metrics["rollout_max_error_m"] is not None
    # compare on the owner and on the other trained member (the family's model put on it)
    out = tmp_path / "c30.json"
    assert base.cli().main(["compare", "--object", "C30", "--bake", "all", "--json", str(out)]) == 0
    argv = ["simulate", "--object", "C45", "--model-of", "C30", "--frames", "1:2", "--save"]
    assert base.cli().main(argv) == 0
    assert base.cli().main(["compare", "--object", "C45", "--bake", "all"]) == 0
    text = capsys.readouterr().out
    print(text)
    assert text.count("dynamics (the model's replay)") == 4  # two bakes of each
    replays = json.loads(out.read_text())
    print(json.dumps(replays)[:400])
    # the unseen length: its pins match the family's, its base held in the point cache
    pc2 = tmp_path / "c38.pc2"
    argv = ["simulate", "--object", "C38", "--model-of", "C30", "--frames", "1:6"]
    assert base.cli().main([*argv, "--out", str(pc2)]) == 0
    got = capsys.readouterr()
    assert "Pin group" not in got.err
    c = bpy.data.objects["C38"]
    rest = np.array([v.co[:] for v in c.data.vertices])
    frames = read_pc2(pc2)[0]
    held = np.abs(rest[:, 2]) < 1e-6
    moved = np.abs(frames[:, held] - rest[held]).max()
    tip = np.abs(frames[-1] - rest).max()
    print(f"C38: pinned base moved {moved:.1e} m, the cone {tip * 1000:.3g} mm")
    assert moved < 1e-6 and tip > 1e-4  # it sags (0.45 mm measured) about a base held still


def test_a_member_pinned_elsewhere_is_told_by_name(addon, store, capsys):
    """CTip, the unseen length pinned at its tip: Use Model and ``simulate --model-of`` say
    that its pin group holds nodes far from where the family was pinned and leaves the
    family's pinned points free, naming the group and the object."""
    bpy = addon.bpy
    scene = trained_scene(bpy, store)
    argv = ["simulate", "--object", "CTip", "--model-of", "C30", "--frames", "1:2", "--save"]
    assert base.cli().main(argv) == 0
    err = capsys.readouterr().err
    print(err)
    assert "Pin group 'Pins' of 'CTip' holds 8 of its 8 pinned nodes farther than" in err
    assert "leaves 8 of the 8 points the family held free" in err
    bpy.ops.wm.open_mainfile(filepath=str(scene))
    assert "Pin group 'Pins' of 'CTip'" in bpy.data.objects["CTip"].neural_rom.model.domain_warning
