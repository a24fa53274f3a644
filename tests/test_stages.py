"""The stages (addon/paths.py, tets.py, bakes.py, export.py, preview.py) and
addon/blender_mesh.py with the PyPI bpy: cache paths, tets, bake
jobs (collider animation, pins), bake records, playback, PC2 export, staleness."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)


def _bm():
    from neural_rom.addon.io import mesh as blender_mesh

    return blender_mesh


def make_ball(bpy, name="Ball", location=(0.0, 0.0, 1.0), radius=0.5):
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=radius, location=location)
    obj = bpy.context.object
    obj.name = name
    obj.neural_rom.role = "DEFORMABLE"
    obj.neural_rom.tet_size = 0.3
    return obj


def run_bake(obj, scene, **kw):
    """Bake the object's job in-process (what the worker does) and record it."""
    from neural_rom.addon.kinds.fem.bake import make_bake_job, on_bake_done
    from neural_rom.core import bake
    from neural_rom.core.data import meshfile

    job = make_bake_job(obj, scene, **kw)
    tm = meshfile.read_tetmesh(job["mesh"])
    spec = bake.BakeSpec.from_dict(job["spec"])
    paths = bake.bake_variants(tm, spec, job["out_dir"], job["name"], overwrite=True)
    on_bake_done(obj, {"paths": [str(p) for p in paths]})
    return job, paths


# ------------------------------------------------------------------------ cache paths


def test_cache_dir_needs_a_saved_file_when_relative(addon):
    from neural_rom.addon.io.paths import cache_dir

    bpy = addon.bpy
    obj = make_ball(bpy)
    with pytest.raises(Exception, match="Save the .blend file first"):
        cache_dir(obj)


def test_cache_dir_relative_to_blend_and_stored_relative(addon, blend_file):
    from neural_rom.addon.io.paths import cache_dir, store_path

    bpy = addon.bpy
    obj = make_ball(bpy, name="My Ball")
    d = cache_dir(obj)
    assert d == blend_file.parent / "neural_rom" / bpy.path.clean_name("My Ball")
    assert d.is_dir()
    assert store_path(obj, d / "x.npz").startswith("//neural_rom/")


def test_cache_dir_unwritable_is_a_clear_error(addon, tmp_path):
    from neural_rom.addon.io.paths import cache_dir

    bpy = addon.bpy
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    bpy.context.scene.neural_rom_scene.cache_dir = str(blocker / "cache")
    obj = make_ball(bpy)
    with pytest.raises(Exception, match="Cannot write to the cache directory"):
        cache_dir(obj)


def test_cache_dir_from_preferences(addon, tmp_path):
    from neural_rom.addon.io.paths import cache_dir

    addon.prefs.cache_dir = str(tmp_path / "prefcache")
    obj = make_ball(addon.bpy)
    assert cache_dir(obj) == tmp_path / "prefcache" / "Ball"


# ------------------------------------------------------------------------ mesh I/O


def test_mesh_round_trip_and_rest_attribute(addon):
    bm = _bm()
    V = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    F = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    me = bm.mesh_from_arrays("tet", V, F)
    assert not me.validate()  # nothing to fix
    np.testing.assert_allclose(bm.get_positions(me), V)
    np.testing.assert_array_equal(np.sort(bm.triangles(me), axis=1), np.sort(F, axis=1))
    bm.store_rest(me)
    bm.set_positions(me, V + 1.0)
    np.testing.assert_allclose(bm.rest_positions(me), V)  # rest survives deformation
    bm.restore_rest(me)
    np.testing.assert_allclose(bm.get_positions(me), V)
    assert not bm.has_rest(me)
    with pytest.raises(Exception, match="re-bake"):
        bm.set_positions(me, np.zeros((5, 3)))


def test_vertex_group_indices_and_missing_group(addon):
    bpy = addon.bpy
    bpy.ops.mesh.primitive_cube_add()
    obj = bpy.context.object
    vg = obj.vertex_groups.new(name="pins")
    vg.add([0, 3, 5], 1.0, "REPLACE")
    vg.add([6], 0.2, "REPLACE")  # below the 0.5 threshold
    np.testing.assert_array_equal(_bm().vertex_group_indices(obj, "pins"), [0, 3, 5])
    with pytest.raises(Exception, match="Pin group 'nope' does not exist.*'pins'"):
        _bm().vertex_group_indices(obj, "nope")


def test_collider_shapes_from_empties_and_meshes(addon):
    bpy = addon.bpy
    bm = _bm()
    bpy.ops.object.empty_add(type="SPHERE", location=(1, 2, 3))
    e = bpy.context.object
    e.empty_display_size = 0.4
    e.scale = (2.0, 2.0, 2.0)
    bpy.context.view_layer.update()
    s = bm.collider_shape(e, "sphere")
    assert s["radius"] == pytest.approx(0.8)
    bpy.ops.mesh.primitive_cylinder_add(radius=0.25, depth=2.0, location=(0, 0, 0))
    cyl = bpy.context.object
    bpy.context.view_layer.update()
    c = bm.collider_shape(cyl, "capsule")
    assert c["radius"] == pytest.approx(0.25, rel=1e-5)
    assert c["half_length"] == pytest.approx(0.75, rel=1e-5)
    # the rigid transform keeps rotation and position, drops the scale
    cyl.scale = (3.0, 3.0, 3.0)
    cyl.location = (0.5, 0, 0)
    bpy.context.view_layer.update()
    M = bm.collider_transform(cyl, np.zeros(3))
    np.testing.assert_allclose(M[:3, :3], np.eye(3), atol=1e-6)
    np.testing.assert_allclose(M[:3, 3], [0.5, 0, 0], atol=1e-6)
    assert bm.collider_shape(cyl, "sphere")["radius"] == pytest.approx(3.0, rel=1e-5)
    # the boxes are kept per bounding box (the frame handler reads them every frame): an
    # edited mesh or display size is a new box
    co = np.empty(3 * len(cyl.data.vertices))
    cyl.data.vertices.foreach_get("co", co)
    cyl.data.vertices.foreach_set("co", 2.0 * co)
    cyl.data.update()
    e.empty_display_size = 0.1
    bpy.context.view_layer.update()
    assert bm.collider_shape(cyl, "sphere")["radius"] == pytest.approx(6.0, rel=1e-5)
    assert bm.collider_shape(cyl, "capsule")["radius"] == pytest.approx(1.5, rel=1e-5)
    assert bm.collider_shape(e, "sphere")["radius"] == pytest.approx(0.2)


# ------------------------------------------------------------------------ tetrahedralize


def test_tetrahedralize_cube_keeps_surface_and_stores_relative(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.tets import load_tets, tetrahedralize_object

    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0.0, 0.0, 2.0))
    cube = bpy.context.object
    cube.neural_rom.embedding = "NEVER"
    info = tetrahedralize_object(cube)
    s = cube.neural_rom
    assert s.role == "DEFORMABLE"
    assert not s.tets_embedded and s.tets_surface == 8
    assert s.tets_path == "//neural_rom/Cube/tets.npz"
    assert info["n_tets"] == s.tets_count > 0
    assert s.tets_quality_min > 0
    tets = load_tets(cube)
    # local space: the first nodes are the cube's own vertices
    np.testing.assert_allclose(tets.mesh.X[:8], _bm().get_positions(cube.data), atol=1e-6)


def test_monkey_goes_through_the_cage(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.tets import load_tets, tetrahedralize_object

    bpy.ops.mesh.primitive_monkey_add()
    monkey = bpy.context.object
    monkey.neural_rom.cage_resolution = 8
    monkey.neural_rom.embedding = "NEVER"
    with pytest.raises(Exception, match="cage"):
        tetrahedralize_object(monkey)
    assert monkey.neural_rom.tets_path == "" and monkey.neural_rom.role == "NONE"
    assert not (blend_file.parent / "neural_rom" / "Suzanne" / "tets.npz").exists()
    monkey.neural_rom.embedding = "AUTO"
    tetrahedralize_object(monkey)
    s = monkey.neural_rom
    assert s.tets_embedded and s.embedding_path.startswith("//neural_rom/")
    tets = load_tets(monkey)
    # the embedding reproduces the render mesh from the rest cage
    np.testing.assert_allclose(
        tets.embedding.apply(tets.mesh.X), _bm().get_positions(monkey.data), atol=1e-5
    )


def test_settings_survive_save_reload_and_a_moved_folder(addon, blend_file, tmp_path):
    bpy = addon.bpy
    from neural_rom.addon.io.paths import load_path
    from neural_rom.addon.kinds.fem.bake import find_bake, open_bake
    from neural_rom.addon.kinds.fem.tets import load_tets, tetrahedralize_object

    obj = make_ball(bpy)
    obj.neural_rom.material_preset = "jelly"
    obj.neural_rom.scenario = "random_pokes"
    obj.neural_rom.scenario_params["count"].int_value = 7
    obj.neural_rom.frames = 2
    obj.neural_rom.variants = 1
    tetrahedralize_object(obj)
    run_bake(obj, bpy.context.scene)
    bpy.ops.wm.save_mainfile()
    moved = tmp_path / "moved"
    shutil.copytree(blend_file.parent, moved, ignore=shutil.ignore_patterns("moved"))
    shutil.rmtree(blend_file.parent / "neural_rom")  # only the moved copy has the caches
    bpy.ops.wm.open_mainfile(filepath=str(moved / "scene.blend"))
    obj = bpy.data.objects["Ball"]
    s = obj.neural_rom
    assert s.material_preset == "jelly" and s.scenario_dict()["count"] == 7
    assert load_path(s.tets_path) == moved / "neural_rom" / "Ball" / "tets.npz"
    load_tets(obj)
    cache = open_bake(obj, find_bake(obj))
    assert cache.n_frames == 3


# ------------------------------------------------------------------------ bake jobs


def test_bake_job_samples_collider_animation_and_restores_frame(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import make_bake_job
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    scene = bpy.context.scene
    obj = make_ball(bpy)
    obj.neural_rom.frames = 4
    obj.neural_rom.variants = 1
    tetrahedralize_object(obj)
    bpy.ops.object.empty_add(type="SPHERE", location=(0, 0, 3))
    coll = bpy.context.object
    coll.neural_rom.role = "COLLIDER"
    coll.neural_rom.collider_shape = "sphere"
    coll.empty_display_size = 0.25
    for f, z in ((1, 3.0), (5, 1.0)):
        coll.location.z = z
        coll.keyframe_insert("location", frame=f)
    scene.frame_start = 1
    scene.frame_set(3)
    job = make_bake_job(obj, scene)
    assert scene.frame_current == 3  # restored
    assert job["kind"] == "bake" and job["shard"] == [0, 1]
    spec = job["spec"]
    (c,) = spec["colliders"]
    assert c["kind"] == "sphere" and c["radius"] == pytest.approx(0.25)
    T = np.array(c["transforms"])
    assert T.shape == (5, 4, 4)
    # the collider's world z at every scene frame 1..5, as the timeline evaluates it
    want = []
    for f in range(1, 6):
        scene.frame_set(f)
        want.append(coll.matrix_world.translation.z)
    np.testing.assert_allclose(T[:, 2, 3], want, atol=1e-6)
    assert T[0, 2, 3] == pytest.approx(3.0) and T[-1, 2, 3] == pytest.approx(1.0)
    assert spec["dt"] == pytest.approx(1 / scene.render.fps)
    assert spec["gravity"] == pytest.approx([0, 0, -9.81])
    from neural_rom.core.data import meshfile

    tm = meshfile.read_tetmesh(job["mesh"])  # world-space rest mesh at the start frame
    np.testing.assert_allclose(tm.X.mean(0), np.array(obj.matrix_world.translation), atol=0.05)
    json.dumps(job)  # JSON-able


def test_pins_animated_with_the_object(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import make_bake_job
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    scene = bpy.context.scene
    bpy.ops.mesh.primitive_cube_add(size=1.0)
    obj = bpy.context.object
    obj.neural_rom.role = "DEFORMABLE"
    obj.neural_rom.embedding = "NEVER"
    obj.neural_rom.frames = 3
    obj.neural_rom.variants = 1
    top = [v.index for v in obj.data.vertices if v.co.z > 0]
    obj.vertex_groups.new(name="top").add(top, 1.0, "REPLACE")
    obj.neural_rom.pin_group = "top"
    tetrahedralize_object(obj)
    job = make_bake_job(obj, scene)
    assert sorted(job["spec"]["pinned"]) == sorted(top)
    assert job["spec"]["pin_targets"] is None  # not animated: held at rest
    obj.location.x = 0.0
    obj.keyframe_insert("location", frame=1)
    obj.location.x = 3.0
    obj.keyframe_insert("location", frame=4)
    # Motion Auto on a pinned, animated object: each variant draws its pins from the
    # animation in the worker (tests/test_drawn_motion.py), so no single track is sent
    job = make_bake_job(obj, scene)
    assert job["spec"]["pin_targets"] is None and job["spec"]["motion"]["sources"]
    # Motion Scenario: the pins follow the animation as it plays
    job = make_bake_job(obj, scene, motion="scenario")
    assert "motion" not in job["spec"]  # none drawn (a spec without one, as before)
    P = np.array(job["spec"]["pin_targets"])
    assert P.shape == (4, 4, 3)
    np.testing.assert_allclose(P[-1] - P[0], np.tile([3.0, 0, 0], (4, 1)), atol=1e-6)


def test_pin_errors_name_the_group(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import make_bake_job
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    obj = make_ball(bpy)
    tetrahedralize_object(obj)
    obj.neural_rom.pin_group = "Handle"
    with pytest.raises(Exception, match="Pin group 'Handle' does not exist"):
        make_bake_job(obj, bpy.context.scene)
    obj.neural_rom.pin_group = ""
    obj.neural_rom.require_pins = True
    with pytest.raises(Exception, match="no pin group"):
        make_bake_job(obj, bpy.context.scene)
    obj.neural_rom.require_pins = False
    obj.neural_rom.scenario = "keyframed_colliders"
    obj.neural_rom.scenario_params["move_pins"].bool_value = True
    with pytest.raises(Exception, match="move_pins"):
        make_bake_job(obj, bpy.context.scene)
    assert obj.neural_rom.pending_bake == ""


def test_bake_job_refuses_an_edited_mesh(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import make_bake_job
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    obj = make_ball(bpy)
    tetrahedralize_object(obj)
    obj.data.vertices[0].co.x += 0.1
    with pytest.raises(Exception, match="re-tetrahedralize"):
        make_bake_job(obj, bpy.context.scene)


# ------------------------------------------------------------------------ playback, export


def _transformed_ball(bpy):
    obj = make_ball(bpy, location=(0.3, -0.2, 1.5))
    obj.rotation_euler = (0.3, 0.2, 0.1)
    obj.scale = (1.2, 1.2, 1.2)
    obj.neural_rom.frames = 3
    obj.neural_rom.variants = 1
    obj.neural_rom.scenario = "random_pokes"
    obj.neural_rom.scenario_params["strength"].float_value = 20.0
    bpy.context.view_layer.update()
    return obj


def _expected_local(obj, cache, k, embedding=None, n_surface=None):
    from neural_rom.addon.io import mesh as bm

    P = np.asarray(cache.channel("positions")[k])
    R = embedding.apply(P) if embedding is not None else P[:n_surface]
    return bm.to_local(R, bm.matrix(obj))


def test_playback_writes_cached_frames_in_local_space(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import find_bake, open_bake
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    scene = bpy.context.scene
    obj = _transformed_ball(bpy)
    obj.neural_rom.embedding = "NEVER"
    tetrahedralize_object(obj)
    run_bake(obj, scene)
    rec = find_bake(obj)
    assert rec.frames == 4 and rec.frame_start == scene.frame_start and rec.status == "complete"
    rest = _bm().get_positions(obj.data)
    cache = open_bake(obj, rec)
    bpy.ops.neural_rom.playback(action="START")
    n = obj.neural_rom.tets_surface
    for k in (2, 3, 1, 0):
        scene.frame_set(scene.frame_start + k)
        np.testing.assert_allclose(
            _bm().get_positions(obj.data), _expected_local(obj, cache, k, n_surface=n), atol=1e-5
        )
    assert not np.allclose(_expected_local(obj, cache, 3, n_surface=n), rest, atol=1e-4)
    scene.frame_set(scene.frame_start + 50)  # past the end: holds the last frame
    np.testing.assert_allclose(
        _bm().get_positions(obj.data), _expected_local(obj, cache, 3, n_surface=n), atol=1e-5
    )
    # the rest shape is still what the stages read, and stopping restores it
    assert _bm().surface_hash(obj) == obj.neural_rom.source_hash
    bpy.ops.neural_rom.playback(action="STOP")
    np.testing.assert_allclose(_bm().get_positions(obj.data), rest, atol=1e-6)


def test_playback_through_the_embedding(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import find_bake, open_bake, start_playback, stop_playback
    from neural_rom.addon.kinds.fem.tets import load_tets, tetrahedralize_object

    scene = bpy.context.scene
    obj = _transformed_ball(bpy)
    obj.neural_rom.embedding = "ALWAYS"
    obj.neural_rom.cage_resolution = 6
    tetrahedralize_object(obj)
    assert obj.neural_rom.tets_embedded
    run_bake(obj, scene)
    cache = open_bake(obj, find_bake(obj))
    emb = load_tets(obj).embedding
    start_playback(obj, scene)
    scene.frame_set(scene.frame_start + 2)
    np.testing.assert_allclose(
        _bm().get_positions(obj.data), _expected_local(obj, cache, 2, embedding=emb), atol=1e-5
    )
    stop_playback(obj)


def test_stale_bake_refused_and_scene_unchanged(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.io.export import export_pc2
    from neural_rom.addon.kinds.fem.bake import start_playback
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    scene = bpy.context.scene
    obj = make_ball(bpy)
    obj.neural_rom.frames = 1
    obj.neural_rom.variants = 1
    tetrahedralize_object(obj)
    run_bake(obj, scene)
    obj.data.vertices[0].co.z += 0.05  # edit after the bake
    before = _bm().get_positions(obj.data)
    with pytest.raises(Exception, match="re-bake"):
        start_playback(obj, scene)
    with pytest.raises(Exception, match="re-bake"):
        export_pc2(obj)
    assert not obj.neural_rom.playback and not _bm().has_rest(obj.data)
    assert "Neural ROM Cache" not in obj.modifiers
    np.testing.assert_array_equal(_bm().get_positions(obj.data), before)
    # re-tetrahedralizing does not revive the old bake either: its tets changed
    tetrahedralize_object(obj)
    with pytest.raises(Exception, match="re-bake"):
        start_playback(obj, scene)


def test_export_pc2_wires_a_mesh_cache_modifier(addon, blend_file):
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    from neural_rom.addon.io.export import export_pc2
    from neural_rom.addon.kinds.fem.bake import find_bake, open_bake
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    scene = bpy.context.scene
    obj = _transformed_ball(bpy)
    obj.neural_rom.embedding = "NEVER"
    tetrahedralize_object(obj)
    obj.modifiers.new("Subsurf", "SUBSURF")
    run_bake(obj, scene)
    cache = open_bake(obj, find_bake(obj))
    path = export_pc2(obj)
    assert path == blend_file.parent / "neural_rom" / "Ball" / "Ball.pc2"
    frames, start, rate = read_pc2(path)
    assert frames.shape == (4, len(obj.data.vertices), 3)
    assert (start, rate) == (scene.frame_start, 1.0)
    mod = obj.modifiers[0]
    assert mod.name == "Neural ROM Cache" and mod.type == "MESH_CACHE"
    assert mod.cache_format == "PC2" and mod.filepath == "//neural_rom/Ball/Ball.pc2"
    obj.modifiers.remove(obj.modifiers["Subsurf"])
    n = obj.neural_rom.tets_surface
    for k in (0, 2, 3):
        scene.frame_set(scene.frame_start + k)
        ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        got = np.array([v.co[:] for v in ev.data.vertices])
        np.testing.assert_allclose(got, _expected_local(obj, cache, k, n_surface=n), atol=1e-5)
    export_pc2(obj)  # again: the modifier is updated, not duplicated
    assert sum(m.type == "MESH_CACHE" for m in obj.modifiers) == 1


def test_clear_bakes_deletes_only_bakes(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.bake import clear_bakes
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    obj = make_ball(bpy)
    obj.neural_rom.frames = 1
    obj.neural_rom.variants = 2
    tetrahedralize_object(obj)
    _, paths = run_bake(obj, bpy.context.scene)
    assert len(obj.neural_rom.bakes) == 2 and all(p.is_dir() for p in paths)
    obj.neural_rom.active_bake = 1
    assert clear_bakes(obj) == 1
    assert paths[0].is_dir() and not paths[1].exists()
    assert clear_bakes(obj, all_bakes=True) == 1
    assert not paths[0].exists() and len(obj.neural_rom.bakes) == 0
    with pytest.raises(Exception, match="no bakes"):
        clear_bakes(obj)


def test_preview_and_cutaway(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.kinds.fem.preview import build_preview, remove_preview
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    obj = make_ball(bpy)
    tetrahedralize_object(obj)
    full = build_preview(obj)
    n_full = len(full.data.polygons)
    assert full.parent == obj and full.display_type == "WIRE" and full.hide_render
    assert len(full.data.vertices) == obj.neural_rom.tets_nodes
    cut = build_preview(obj, cutaway=True)
    assert cut == full and 0 < len(cut.data.polygons) < n_full
    assert remove_preview(obj) and obj.name + "_tets" not in bpy.data.objects


def test_animated_object_plays_back_in_place(addon, blend_file):
    """Bake positions are world space: playback and export use each frame's matrix_world."""
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    from neural_rom.addon.io.export import export_pc2
    from neural_rom.addon.kinds.fem.bake import find_bake, open_bake, start_playback, stop_playback
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    bm = _bm()
    scene = bpy.context.scene
    obj = make_ball(bpy)
    obj.neural_rom.frames = 3
    obj.neural_rom.variants = 1
    obj.neural_rom.embedding = "NEVER"
    for f, x in ((1, 0.0), (4, 2.0)):
        obj.location.x = x
        obj.keyframe_insert("location", frame=f)
    scene.frame_set(1)
    tetrahedralize_object(obj)
    run_bake(obj, scene)
    cache = open_bake(obj, find_bake(obj))
    n = obj.neural_rom.tets_surface
    start_playback(obj, scene)
    for k in (1, 3):
        scene.frame_set(1 + k)
        want = bm.to_local(np.asarray(cache.channel("positions")[k])[:n], bm.matrix(obj))
        np.testing.assert_allclose(bm.get_positions(obj.data), want, atol=1e-5)
    stop_playback(obj)
    frames, _, _ = read_pc2(export_pc2(obj))
    for k in range(4):
        scene.frame_set(1 + k)
        want = bm.to_local(np.asarray(cache.channel("positions")[k])[:n], bm.matrix(obj))
        np.testing.assert_allclose(frames[k], want, atol=1e-5)


def test_shape_keys_refuse_playback_but_export(addon, blend_file):
    bpy = addon.bpy
    from neural_rom.addon.io.export import export_pc2
    from neural_rom.addon.kinds.fem.bake import start_playback
    from neural_rom.addon.kinds.fem.tets import tetrahedralize_object

    obj = make_ball(bpy)
    obj.neural_rom.frames = 1
    obj.neural_rom.variants = 1
    tetrahedralize_object(obj)
    run_bake(obj, bpy.context.scene)
    obj.shape_key_add(name="Basis")
    with pytest.raises(Exception, match="shape keys"):
        start_playback(obj)
    assert not obj.neural_rom.playback
    export_pc2(obj)
    assert obj.modifiers[0].type == "MESH_CACHE"


def test_tetgen_never_runs_in_blenders_process(addon, blend_file, monkeypatch):
    """Tetrahedralize is a worker job: the meshers are out of reach here and it still works."""
    from neural_rom.addon.kinds.fem.tets import JOB_STEM, load_tets, tetrahedralize_object
    from neural_rom.core.geometry import cage, mesher
    from neural_rom.core.jobs import tetrahedralize as tetjob

    def refuse(*a, **k):
        raise AssertionError("TetGen ran in Blender's process")

    for module, name in ((mesher, "tetrahedralize"), (cage, "tetrahedralize_embedded"),
                         (tetjob, "mesh_surface")):  # fmt: skip
        monkeypatch.setattr(module, name, refuse)
    obj = make_ball(addon.bpy)
    info = tetrahedralize_object(obj)
    assert info["n_tets"] == obj.neural_rom.tets_count > 0
    load_tets(obj)
    assert not list(
        (blend_file.parent / "neural_rom" / "Ball").glob(f"{JOB_STEM}*.job")
    )  # cleaned up


@pytest.mark.skipif(os.name != "posix", reason="a shell wrapper stands in for the crash")
def test_a_crashing_tetrahedralize_leaves_the_object_as_it_was(addon, blend_file, tmp_path):
    import stat
    import sys

    from neural_rom.addon.kinds.fem.tets import JOB_STEM, load_tets, tetrahedralize_object
    from neural_rom.core.jobs import JobError

    bpy = addon.bpy
    obj = make_ball(bpy)  # selected and active
    tetrahedralize_object(obj)
    s = obj.neural_rom
    before = (s.tets_path, s.tets_hash, s.tets_count, s.source_hash)
    fake = tmp_path / "python"  # the worker segfaults, as native code (TetGen) may
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *worker.py*) exec {sys.executable} -c "{crash}";; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    addon.prefs.python_path = str(fake)
    s.tet_size = 0.2
    with pytest.raises(JobError, match="crashed") as e:
        tetrahedralize_object(obj)
    assert e.value.crashed
    with pytest.raises(RuntimeError, match="Tetrahedralizing 'Ball' failed: .*crashed"):
        bpy.ops.neural_rom.tetrahedralize()
    assert (s.tets_path, s.tets_hash, s.tets_count, s.source_hash) == before
    load_tets(obj)  # the old tets are still the object's
    assert not list((blend_file.parent / "neural_rom" / "Ball").glob(f"{JOB_STEM}*.job"))
