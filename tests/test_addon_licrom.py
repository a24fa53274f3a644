"""A model that runs on other meshes (LiCROM) in Blender, through the operators and the
headless CLI: trained on two objects' bakes at once (placed apart: each in the reference
space relative to its origin), used on a third object without retraining (its own tets, the
domain reported, a far bigger one warned about), simulated, scrubbed, baked to PC2 and
compared; a mesh edit during Simulate (a cut) tetrahedralized in the worker and swapped in
mid-run; and the refusals (a method that runs only on its own mesh).

The scene is built and trained once per module (tiny bars, a small field, 40 epochs) and
copied for each test."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from scipy.spatial import cKDTree

from . import test_cli as base
from .blender_fixtures import addon  # noqa: F401 (pytest fixture)

SIZE = (0.5, 0.1, 0.1)
TINY = [
    "--latent-dim", "4", "--hidden", "16,16,16,32", "--epochs", "40", "--points-per-frame", "96",
    "--encoder-points", "48", "--batch-size", "4", "--cubature-vertices", "20",
    "--no-rollout", "--device", "cpu",
    # Auto turns Static Derivatives on for these bars; the swaps below are of the field and
    # the static modes (test_licrom swaps with the derivatives too)
    "--static-derivatives", "off",
]  # fmt: skip


def cli():
    return base.cli()


def make_bar(bpy, name, location, length=SIZE[0], scale=1.0):
    """A box bar along x from its pinned end at local x = -0.25 m to -0.25 + ``length``,
    0.1 x 0.1 m (all of it times ``scale``), poked: coarse tets, 6 frames."""
    import bmesh

    bpy.ops.mesh.primitive_cube_add(size=1.0, location=location)
    obj = bpy.context.object
    obj.name = name
    b = bmesh.new()
    b.from_mesh(obj.data)
    bmesh.ops.subdivide_edges(b, edges=b.edges[:], cuts=2, use_grid_fill=True)
    b.to_mesh(obj.data)
    b.free()
    co = np.empty(3 * len(obj.data.vertices), dtype=np.float64)
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    co = np.stack([-0.25 + (co[:, 0] + 0.5) * length, co[:, 1] * SIZE[1], co[:, 2] * SIZE[2]], 1)
    co = (co * scale).astype(np.float32)
    obj.data.vertices.foreach_set("co", co.ravel())
    obj.data.update()
    group = obj.vertex_groups.new(name="pin")
    group.add([int(i) for i in np.flatnonzero(co[:, 0] < -0.249 * scale)], 1.0, "REPLACE")
    s = obj.neural_rom
    s.role = "DEFORMABLE"
    s.tet_size = 0.05 * scale
    s.frames = 6
    s.variants = 2
    s.scenario = "random_pokes"
    s.pin_group = "pin"
    return obj


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return {"dir": tmp_path_factory.mktemp("licrom_family")}


def open_trained(addon, store, tmp_path):
    """A copy of the module's trained scene opened: BarA (the model's owner, trained with
    BarB's bakes), BarB one metre along y, BarC (a shorter bar, unseen) two metres along
    y, BarD (BarA scaled by 2) three metres along y; BarC and BarD tetrahedralized."""
    bpy = addon.bpy
    if "blend" not in store:
        build(bpy, store["dir"])
        store["blend"] = store["dir"] / "family.blend"
    shutil.copytree(store["dir"], tmp_path / "scene", dirs_exist_ok=True)
    path = tmp_path / "scene" / "family.blend"
    bpy.ops.wm.open_mainfile(filepath=str(path))
    return bpy, path


def build(bpy, folder):
    from .test_addon_train import bake_in_process, select_only

    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "family.blend"))
    scene = bpy.context.scene
    bars = [
        make_bar(bpy, "BarA", (0.0, 0.0, 1.0)),
        make_bar(bpy, "BarB", (0.0, 1.0, 1.0)),
        make_bar(bpy, "BarC", (0.0, 2.0, 1.0), length=0.4),
        make_bar(bpy, "BarD", (0.0, 3.0, 1.0), scale=2.0),
    ]
    for obj in bars:
        select_only(bpy, obj)
        assert bpy.ops.neural_rom.tetrahedralize() == {"FINISHED"}
    for obj in bars[:2]:
        bake_in_process(obj, scene)
    bpy.ops.wm.save_mainfile()
    argv = ["train", "--object", "BarA", "--with", "BarB", "--method", "licrom", *TINY, "--save"]
    assert cli().main(argv) == 0


# ------------------------------------------------------------------------------ training


def test_train_with_other_objects_bakes(addon, store, tmp_path, capsys):
    """``train --with`` trains one model on both objects' bakes, recorded on the --object
    with its family; the field's reference space is relative to each object's origin (the
    two bars, a metre apart, overlap there); the Train with Selected operator offers it and
    refuses a method that runs only on its own mesh."""
    from neural_rom.addon.kinds.family import family
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.errors import NeuralRomError

    bpy, _ = open_trained(addon, store, tmp_path)
    a, b = bpy.data.objects["BarA"], bpy.data.objects["BarB"]
    m = a.neural_rom.model
    print(f"model: {m.method}, {m.k} DOFs, {m.bakes} bakes, family {m.family!r}")
    assert m.method == "licrom" and m.family == "BarB" and m.bakes == 4
    assert a.neural_rom.model_method == "licrom"  # the panel shows what train --method chose
    assert not b.neural_rom.model.path  # recorded on the owner only
    model = load_model(bpy.path.abspath(m.path))
    assert model.metadata["reference"] == "object_origin" and len(model.metadata["bakes"]) == 4
    y = model.arrays["domain_samples"][:, 1]
    print(f"domain sample y: {y.min():.3f} .. {y.max():.3f} m")
    assert y.min() > -0.06 and y.max() < 0.06  # both bars about their own origins
    # the operator: offered with another selected Deformable, for a method with other_mesh
    for o in bpy.context.view_layer.objects:
        o.select_set(o.name in ("BarA", "BarB"))
    bpy.context.view_layer.objects.active = a
    a.neural_rom.model_method = "licrom"
    assert bpy.ops.neural_rom.train_family.poll()
    a.neural_rom.model_method = "linear"
    assert not bpy.ops.neural_rom.train_family.poll()
    with pytest.raises(NeuralRomError, match="runs only on the mesh it was trained on"):
        family.make_family_train_job(a, bpy.context.scene, [b])
    assert not a.neural_rom.pending_train
    # the CLI: a method without other_mesh, and --with for several objects, exit 2
    argv = ["train", "--object", "BarA", "--with", "BarB", "--method", "linear"]
    assert cli().main(argv) == 2
    assert "runs only on the mesh it was trained on" in capsys.readouterr().err
    argv = ["train", "--object", "BarA", "--object", "BarB", "--with", "BarC"]
    assert cli().main(argv) == 2
    assert "one --object" in capsys.readouterr().err
    assert a.neural_rom.model.method == "licrom"  # nothing changed


# -------------------------------------------------------------------- another object


def test_use_model_on_another_object_simulate_bake_compare(addon, store, tmp_path, capsys):
    """Use Model puts BarA's model on the unseen BarC (its own tets): the domain is reported
    (inside), Simulate steps and scrubs it, the pinned end stays put; ``simulate
    --model-of`` bakes it to a PC2 of BarC's vertex count; Compare with Bake replays BarB's
    bake with the model on BarB."""
    from neural_rom.addon import simulate
    from neural_rom.core.data.pc2 import read_pc2

    from .test_addon_train import select_only

    bpy, path = open_trained(addon, store, tmp_path)
    scene = bpy.context.scene
    c = bpy.data.objects["BarC"]
    select_only(bpy, c)
    assert bpy.ops.neural_rom.use_model(source="BarA") == {"FINISHED"}
    m = c.neural_rom.model
    print(f"BarC: {m.domain_outside:.1%} outside, up to {m.domain_distance * 1000:.3g} mm")
    assert m.applied_from == "BarA" and m.domain_outside == 0.0 and not m.domain_warning
    rest = np.array([v.co[:] for v in c.data.vertices])
    pinned = rest[:, 0] < -0.249
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    seen = {}
    for f in (1, 4, 8, 4, 8):
        scene.frame_set(f)
        seen.setdefault(f, []).append(np.array([v.co[:] for v in c.data.vertices]))
    d = simulate._drivers["BarC"]
    sag = float(np.abs(seen[8][0] - rest).max())
    print(f"BarC at frame 8: moved {sag * 1000:.3g} mm; {len(d.cache)} frames cached")
    assert sag > 1e-3
    assert np.array_equal(seen[4][0], seen[4][1]) and np.array_equal(seen[8][0], seen[8][1])
    assert np.abs(seen[8][0][pinned] - rest[pinned]).max() < 1e-6
    bpy.ops.neural_rom.simulate(action="STOP")
    bpy.ops.wm.save_mainfile()
    # headless: the model of BarA on BarC, baked to a PC2 of BarC's vertices
    out = tmp_path / "barc.pc2"
    argv = ["simulate", "--object", "BarC", "--model-of", "BarA", "--frames", "1:8"]
    assert cli().main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    print(text)
    assert "BarC: uses" in text and "0.0% outside" in text
    frames = read_pc2(out)[0]
    assert frames.shape == (8, len(c.data.vertices), 3)
    print(f"PC2 frame 8 vs the viewport's: {np.abs(frames[-1] - seen[8][0]).max():.2e} m")
    assert np.abs(frames[-1] - seen[8][0]).max() < 1e-4
    # Compare with Bake on BarB (its own bakes) with the family's model put on it
    argv = ["compare", "--object", "BarB", "--bake", "all"]
    assert cli().main(["simulate", "--object", "BarB", "--model-of", "BarA", "--frames",
                       "1:2", "--save"]) == 0  # fmt: skip
    code = cli().main(argv)
    got = capsys.readouterr()
    print(got.out, got.err)
    assert code == 0
    text = got.out
    assert text.count("dynamics (the model's replay)") == 2
    # the project was copied: BarB's bakes are still known as ones the model trained on,
    # though BarA's bakes have the same file names
    assert "(trained on)" in text and "not trained on" not in text


def test_refusals_and_the_out_of_domain_warning(addon, store, tmp_path, capsys):
    """A model that runs only on its own mesh is refused on another object (and Apply Mesh
    Edit with it); a bar twice the size is warned about (share and distance), from the
    operator and the CLI; a refusal changes nothing."""
    from neural_rom.addon.kinds.family import family

    from .test_addon_train import select_only, train_in_process

    bpy, _ = open_trained(addon, store, tmp_path)
    scene = bpy.context.scene
    b, c, dd = (bpy.data.objects[n] for n in ("BarB", "BarC", "BarD"))
    b.neural_rom.model_method = "linear"
    b.neural_rom.method_settings.linear.k = 3
    train_in_process(b, scene)
    select_only(bpy, c)
    before = c.neural_rom.model.path
    assert bpy.ops.neural_rom.use_model.poll()
    with pytest.raises(RuntimeError, match="runs only on the mesh it was trained on"):
        bpy.ops.neural_rom.use_model(
            source="FILE", filepath=bpy.path.abspath(b.neural_rom.model.path)
        )
    assert c.neural_rom.model.path == before == ""
    argv = ["simulate", "--object", "BarC", "--model-of", "BarB", "--frames", "1:2"]
    assert cli().main(argv) == 2
    assert "runs only on the mesh it was trained on" in capsys.readouterr().err
    # Apply Mesh Edit with a linear model running
    select_only(bpy, b)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    with pytest.raises(Exception, match="cannot continue on an edited mesh"):
        family.apply_mesh_edit(b, scene)
    bpy.ops.neural_rom.simulate(action="STOP")
    # twice the size: warned, with the share and the distance
    select_only(bpy, dd)
    assert bpy.ops.neural_rom.use_model(source="BarA") == {"FINISHED"}
    m = dd.neural_rom.model
    print(f"BarD: {m.domain_outside:.1%} outside, up to {m.domain_distance * 1000:.3g} mm")
    assert m.domain_outside > 0.3 and m.domain_distance > 0.05
    assert "outside the domain" in m.domain_warning
    argv = ["simulate", "--object", "BarD", "--model-of", "BarA", "--frames", "1:2"]
    assert cli().main([*argv, "--out", str(tmp_path / "bard.pc2")]) == 0
    err = capsys.readouterr().err
    print(err)
    assert "warning: BarD:" in err and "outside the domain" in err


# ------------------------------------------------------------------------ mesh edits


def cut_tip(bpy, obj, x):
    """Cut the bar at local ``x`` and close the cut with triangles (a boolean-like edit on
    the displayed, deformed mesh; the saved rest positions ride along as a point
    attribute)."""
    import bmesh

    bm_ = bmesh.new()
    bm_.from_mesh(obj.data)
    geom = bm_.verts[:] + bm_.edges[:] + bm_.faces[:]
    res = bmesh.ops.bisect_plane(
        bm_, geom=geom, plane_co=(x, 0, 0), plane_no=(1, 0, 0), clear_outer=True
    )
    cut_edges = [e for e in res["geom_cut"] if isinstance(e, bmesh.types.BMEdge)]
    cap = bmesh.ops.holes_fill(bm_, edges=cut_edges, sides=0)["faces"]
    # Blender splits an n-gon by its current (here deformed) positions, so its triangles
    # change between poses and with them the surface's hash: a triangulated cap keeps both
    bmesh.ops.triangulate(bm_, faces=cap)
    bm_.to_mesh(obj.data)
    bm_.free()
    obj.data.update()


def test_mesh_edit_during_simulate_continues_on_the_new_mesh(addon, store, tmp_path):
    """BarA simulates to frame 6; its tip is cut off (the mesh edited under Simulate); the
    frame handler leaves the edited mesh alone; Apply Mesh Edit tetrahedralizes the new
    surface in the worker and swaps: the motion continues from frame 6 (no energy added),
    later frames run on the new mesh, scrubbing back shows the new mesh, the pinned end
    stays put, and Bake Simulation bakes the edited mesh's vertex count."""
    from neural_rom.addon import simulate
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.family import family

    from .test_addon_train import select_only

    bpy, _ = open_trained(addon, store, tmp_path)
    scene = bpy.context.scene
    a = bpy.data.objects["BarA"]
    select_only(bpy, a)
    rest = bm.rest_positions(a.data)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    for f in range(2, 7):
        scene.frame_set(f)
    d = simulate._drivers["BarA"]
    ke_before, q_before = d.sim.kinetic_energy(), d.sim.q.copy()
    n_before, nodes_before = len(a.data.vertices), d.n_nodes
    # what the saved .blend needs, and a Bake Simulation's Mesh Cache of the uncut bar
    from neural_rom.addon.io.export import SIM_MODIFIER_NAME, wire_mesh_cache
    from neural_rom.core.data.pc2 import write_pc2

    old_tets = bpy.path.abspath(a.neural_rom.tets_path)
    old_bytes = open(old_tets, "rb").read()
    write_pc2(tmp_path / "old.pc2", [rest.astype(np.float32)], start_frame=1)
    wire_mesh_cache(a, tmp_path / "old.pc2", 1, SIM_MODIFIER_NAME)
    cut_tip(bpy, a, 0.15)
    assert len(a.data.vertices) != n_before and family.edit_pending(a)
    scene.frame_set(7)
    scene.frame_set(6)  # left alone, not stopped
    assert a.neural_rom.simulate and "nrom_frame_error" not in a
    assert bpy.ops.neural_rom.apply_mesh_edit() == {"FINISHED"}
    # the new tets beside the old ones, which the saved .blend still finds; the stale cache off
    assert bpy.path.abspath(a.neural_rom.tets_path) != old_tets
    assert open(old_tets, "rb").read() == old_bytes
    assert not a.modifiers[SIM_MODIFIER_NAME].show_viewport
    d2 = simulate._drivers["BarA"]
    ke_after = d2.sim.kinetic_energy()
    print(
        f"swap at frame 6: {nodes_before} -> {d2.n_nodes} nodes, kinetic energy "
        f"{ke_before:.3e} -> {ke_after:.3e} J, {d2.timeline.mesh} swap(s)"
    )
    assert d2 is d and d2.timeline.mesh == 1 and d2.n_nodes != nodes_before
    assert ke_after <= ke_before * (1 + 1e-12)
    assert np.array_equal(d2.sim.q, q_before)  # the state goes on: not back to rest
    shown = np.array([v.co[:] for v in a.data.vertices])
    print(
        f"frame 6 on the new mesh: {np.abs(shown - bm.rest_positions(a.data)).max() * 1000:.3g} mm from rest"
    )
    assert np.abs(shown - bm.rest_positions(a.data)).max() > 1e-3
    assert not family.edit_pending(a)
    n = len(a.data.vertices)
    rest2 = bm.rest_positions(a.data)
    pinned = rest2[:, 0] < -0.249
    for f in (7, 10, 3, 10):
        scene.frame_set(f)
        co = np.array([v.co[:] for v in a.data.vertices])
        assert co.shape == (n, 3)
        print(f"frame {f}: pinned move {np.abs(co[pinned] - rest2[pinned]).max():.1e} m")
        assert np.abs(co[pinned] - rest2[pinned]).max() < 1e-6
    # the cut was made on the deformed mesh: its rest positions are interpolated near 0.15
    assert rest2[:, 0].max() < 0.17 and rest[:, 0].max() > 0.24
    # Bake Simulation after the edit: the edited mesh from rest, one vertex count
    from neural_rom.core.data.pc2 import read_pc2

    out = tmp_path / "cut.pc2"
    bpy.ops.neural_rom.simulate(action="STOP")
    assert bpy.ops.neural_rom.bake_simulation(filepath=str(out), frame_start=1, frame_end=4) == {
        "FINISHED"
    }
    assert read_pc2(out)[0].shape == (4, n, 3)


def test_a_boolean_hole_applied_mid_simulate(addon, store, tmp_path):
    """BarA simulates to frame 14 and back to 6; a cylinder is cut through it there with
    Blender's exact Boolean (the modifier applied on the mesh as shown, deformed) and Apply
    Mesh Edit continues on the holed mesh. The rest shape is the edit's own: no vertex rests
    at the origin (the cutter's vertices come with no rest position), the kept vertices
    keep theirs, every vertex maps through the frame's deformation to where it was shown,
    and the rest mesh is the Boolean of the rest bar moved by the hole's rigid motion (to a
    tenth of the hole's displacement: what is left is the bar's strain there).
    Against full space continued on the holed tets from frame 6 (its state carried over),
    the error is at most 2x the run's without the hole (the swap's time: bench/licrom.py)."""
    from neural_rom.addon import simulate
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.family import family
    from neural_rom.core.geometry.embedding import embed_points
    from neural_rom.core.geometry.tetmesh import TetMesh
    from neural_rom.core.physics.sim import Simulation

    from .test_addon_train import select_only

    bpy, _ = open_trained(addon, store, tmp_path)
    scene = bpy.context.scene
    a = bpy.data.objects["BarA"]
    select_only(bpy, a)
    rest0 = bm.rest_positions(a.data)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    K, F = 6, 14
    for f in range(2, F + 1):
        scene.frame_set(f)
    d = simulate._drivers["BarA"]
    plain = {f: d.positions_at(f, a, scene) for f in range(1, F + 1)}
    scene.frame_set(K)
    M = bm.matrix(a)
    t0, pinned0 = d.tets, d.sim.pinned.copy()
    X0 = bm.to_world(np.asarray(t0.mesh.X), M)
    full = Simulation(X0, t0.mesh.T, d.sim.material, d.sim.settings, pinned=pinned0)
    e0, at_k = 0.0, None
    for f in range(2, F + 1):
        full.step()
        if f == K:
            at_k = full.get_state()
        if f > K:
            e0 = max(e0, float(np.linalg.norm(plain[f] - full.x, axis=1).max()))
    # the cut, on the mesh as shown at frame 6: a cylinder through the bar along y
    shown = bm.get_positions(a.data)
    near = np.abs(shown[:, 0] - 0.06) < 0.03
    # the rest bar moved rigidly as the bar has moved around the hole (Kabsch), kept to make
    # the Boolean of it below
    at_hole = np.abs(np.asarray(t0.mesh.X)[:, 0] - 0.06) < 0.04
    P, Q = np.asarray(t0.mesh.X)[at_hole], bm.to_local(plain[K], M)[at_hole]
    u, _, vt = np.linalg.svd((P - P.mean(0)).T @ (Q - Q.mean(0)))
    Rk = (u @ np.diag([1, 1, np.linalg.det(u @ vt)]) @ vt).T
    tk = Q.mean(0) - P.mean(0) @ Rk.T
    shift = Q.mean(0) - P.mean(0)
    ref = bpy.data.objects.new("RestBar", a.data.copy())
    bm.set_positions(ref.data, rest0 @ Rk.T + tk)
    bpy.context.collection.objects.link(ref)
    ref.matrix_world = a.matrix_world
    bpy.ops.mesh.primitive_cylinder_add(
        vertices=16, radius=0.03, depth=0.3, location=(0.06, 0.0, 1.0 + shown[near, 2].mean()),
        rotation=(np.pi / 2, 0.0, 0.0),
    )  # fmt: skip
    cutter = bpy.context.object
    for obj in (ref, a):
        mod = obj.modifiers.new("Hole", "BOOLEAN")
        mod.object, mod.operation, mod.solver = cutter, "DIFFERENCE", "EXACT"
    select_only(bpy, a)
    bpy.ops.object.modifier_apply(modifier="Hole")
    n_cut = len(a.data.vertices)
    carried = bm.rest_positions(a.data)
    at_origin = int(np.sum(np.linalg.norm(carried, axis=1) < 1e-9))
    print(f"the Boolean: {len(rest0)} -> {n_cut} vertices, {at_origin} carry rest (0, 0, 0)")
    assert family.edit_pending(a)
    edited_shown = bm.get_positions(a.data)
    info = family.apply_mesh_edit(a, scene)  # what the operator runs; here to its end
    print(family.swap_text("BarA", info))
    rest = bm.rest_positions(a.data)
    assert len(rest) == n_cut
    assert np.linalg.norm(rest, axis=1).min() > 0.02  # the bar's centre is inside it
    # the kept vertices keep their rest positions; every vertex maps through frame 6's
    # deformation of the old tets to where it was shown
    old = np.linalg.norm(carried, axis=1) > 1e-9
    kept = float(np.abs(rest[old] - carried[old]).max())
    emb = embed_points(rest, TetMesh(np.asarray(t0.mesh.X), t0.mesh.T))
    mapped = float(np.abs(bm.to_local(emb.apply(plain[K]), M) - edited_shown).max())
    # the Boolean of the rest bar (the same cutter, the bar moved by the hole's rigid
    # motion), up to the deformation left there
    deps = bpy.context.evaluated_depsgraph_get()
    target = bm.get_positions(bpy.data.meshes.new_from_object(ref.evaluated_get(deps)))
    target = (target - tk) @ Rk
    gap = max(
        float(cKDTree(target).query(rest)[0].max()), float(cKDTree(rest).query(target)[0].max())
    )
    d2 = simulate._drivers["BarA"]
    print(
        f"rest: kept vertices off by {kept:.1e} m, shown vs mapped {mapped:.1e} m, "
        f"{gap * 1000:.3g} mm from the rest bar's Boolean (the hole moved {np.linalg.norm(shift) * 1000:.3g} mm)"
    )
    assert kept < 1e-6 and mapped < 1e-5 and gap < 0.1 * np.linalg.norm(shift)
    # against full space continued on the holed tets from frame 6
    t1 = d2.tets
    X1 = bm.to_world(np.asarray(t1.mesh.X), M)
    carry = embed_points(X1, TetMesh(X0, t0.mesh.T))
    full2 = Simulation(X1, t1.mesh.T, d.sim.material, d.sim.settings, pinned=d2.sim.pinned)
    full2.reset(x=carry.apply(at_k["x"]), v=carry.apply(at_k["v"]))
    e1 = 0.0
    for f in range(K + 1, F + 1):
        full2.step()
        e1 = max(e1, float(np.linalg.norm(d2.positions_at(f, a, scene) - full2.x, axis=1).max()))
    print(
        f"vs full space, frames {K + 1}..{F}: no hole {e0 * 1000:.3g} mm, hole {e1 * 1000:.3g} mm"
    )
    assert e1 <= 2.0 * e0
