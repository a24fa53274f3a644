"""A cloth object through the add-on (issue 11, the Blender side), with the PyPI bpy: the
panel's Cloth Bake (Blender's cloth in a worker) recorded on the object, the headless train
from those bakes, Simulate driving the mesh (its Cloth modifier muted while it does and given
back after, also on save and on disabling the add-on), Bake Simulation and the headless
simulate (PC2 frames equal to the runtime stepped by hand), Compare with a held-out cloth
bake (panel and headless), and the refusals: an object without a Cloth modifier, a method
that does not train on cloth, a bake and a model of a mesh that changed since.

One small sheet (8 x 8 vertices) under an animated owner, a ball keyed through it; 3 cloth
bakes of 30 frames; a tiny snp model (8 modes, 2 layers, 6 epochs). Module-scoped: the
bake and the training run once.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

from .blender_fixtures import addon_module, fresh_file
from .cloth_scenes import build_sheet

SHEET = 8  # vertices per side
FRAMES, VARIANTS = 30, 3
SIM_END = 20  # frames 1..20 simulated (the scene starts at 1)
TRAIN_ARGS = [
    "--k", "8", "--layers", "2", "--width", "16", "--window", "8", "--epochs", "6",
    "--batch-size", "4", "--validation-fraction", "0.34", "--time-budget", "60",
]  # fmt: skip


def _select(bpy, obj):
    for o in bpy.context.view_layer.objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def _animate(bpy):
    """The user's own animation of the owner and the ball, which Simulate follows (the bake
    job replaces it by random keys in its copy of the file)."""
    owner, ball = bpy.data.objects["Owner"], bpy.data.objects["Ball"]
    for f, x, turn in ((1, 0.0, 0.0), (8, 0.15, 0.3), (SIM_END, -0.1, -0.2)):
        owner.location = (x, 0.0, 1.5)
        owner.rotation_euler = (0.0, 0.0, turn)
        owner.keyframe_insert("location", frame=f)
        owner.keyframe_insert("rotation_euler", frame=f)
    for f, y in ((1, -0.6), (10, 0.0), (SIM_END, -0.4)):
        ball.location = (0.0, y, 1.0)
        ball.keyframe_insert("location", frame=f)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """The sheet file, its cloth baked through the panel's operator; the add-on registered."""
    tmp = tmp_path_factory.mktemp("addon_cloth")
    bpy = fresh_file()
    package = addon_module()
    package.register()
    entry = bpy.context.preferences.addons.new()
    entry.module = "neural_rom"
    build_sheet(tmp / "sheet.blend", n=SHEET)
    _animate(bpy)
    bpy.context.scene.frame_set(1)
    sheet = bpy.data.objects["Sheet"]
    s = sheet.neural_rom
    s.role = "DEFORMABLE"
    s.cloth.frames, s.cloth.variants, s.cloth.seed = FRAMES, VARIANTS, 0
    _select(bpy, sheet)
    bpy.ops.wm.save_mainfile()
    t0 = time.perf_counter()
    assert bpy.ops.neural_rom.cloth_bake() == {"FINISHED"}
    print(f"\ncloth bake: {VARIANTS} x {FRAMES + 1} frames in {time.perf_counter() - t0:.1f} s")
    try:
        yield SimpleNamespace(bpy=bpy, tmp=tmp, sheet=sheet, package=package)
    finally:
        from neural_rom.addon import jobs

        jobs.cancel_job("", force=True)
        jobs._JOBS.clear()
        entry = bpy.context.preferences.addons.get("neural_rom")
        if entry is not None:
            bpy.context.preferences.addons.remove(entry)
        package.unregister()


@pytest.fixture(scope="module")
def trained(scene):
    """The sheet's snp model, trained by the headless ``train`` from its cloth bakes."""
    from neural_rom.ui import cli

    t0 = time.perf_counter()
    code = cli.main(["train", "--object", "Sheet", "--method", "snp", *TRAIN_ARGS])
    assert code == cli.EXIT_OK
    print(f"training (headless train, worker): {time.perf_counter() - t0:.1f} s")
    return scene


def _cloth(scene):
    return scene.sheet.modifiers["Cloth"]


def _by_hand(scene, frames):
    """Local positions (F, n, 3) of the sheet's model stepped by hand from rest at frame 1
    over ``frames``: the ball as a sphere of its bounding box, the sheet's world matrix as
    the reference frame (its owner's motion), read from the scene frame by frame."""
    from neural_rom.addon.io.paths import load_path
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.physics.colliders import Collider
    from neural_rom.core.registry import load_simulator

    bpy, sheet = scene.bpy, scene.sheet
    ball = bpy.data.objects["Ball"]
    sim, _ = load_simulator(load_path(sheet.neural_rom.model.path))
    sim.reset()
    out = []
    for f in frames:
        bpy.context.scene.frame_set(f)
        M = np.array(sheet.matrix_world, dtype=np.float64)
        if f > frames[0]:
            B = np.array(ball.matrix_world, dtype=np.float64)
            bb = np.array([tuple(c) for c in ball.bound_box])
            r = 0.5 * float((bb.max(0) - bb.min(0)).max()) * np.linalg.norm(B[:3, 0])
            T = B.copy()
            T[:3, :3] /= np.linalg.norm(B[:3, :3], axis=0)
            T[:3, 3] = B[:3, :3] @ (0.5 * (bb.max(0) + bb.min(0))) + B[:3, 3]
            sim.step(FrameInputs(colliders=[Collider("sphere", r, 0.0, T)], reference_frame=M))
        x = sim.positions()
        out.append((x - M[:3, 3]) @ np.linalg.inv(M[:3, :3]).T)
    return np.array(out)


def _replay_errors(sheet, rec):
    """(F, n) distances of the model, stepped by hand from rest with a cloth bake's
    colliders and reference frame, from the bake's positions."""
    from neural_rom.addon.io.paths import load_path
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.physics.colliders import Collider
    from neural_rom.core.registry import load_simulator

    bake = BakeCache.open(load_path(rec.path))
    C, R = bake.channel("colliders"), bake.channel("reference_frame")
    x = np.asarray(bake.channel("positions"))
    sim, _ = load_simulator(load_path(sheet.neural_rom.model.path))
    sim.reset()
    y = [sim.positions()]
    for f in range(1, bake.n_frames):
        cols = [
            Collider(c["kind"], c["radius"], c["half_length"], C[f, j])
            for j, c in enumerate(bake.meta["colliders"])
        ]
        sim.step(FrameInputs(colliders=cols, reference_frame=R[f]))
        y.append(sim.positions())
    return np.linalg.norm(np.array(y) - x, axis=-1)


# --------------------------------------------------------------------------------- bakes


def test_cloth_bakes_are_the_objects_bakes(scene):
    from neural_rom.addon import props
    from neural_rom.addon.kinds.cloth import model as cloth
    from neural_rom.addon.kinds.fem.bake import open_bake
    from neural_rom.core import registry

    s = scene.sheet.neural_rom
    recs = list(s.bakes)
    print("recorded:", [(r.name, r.kind, r.frames, r.status) for r in recs])
    assert [r.kind for r in recs] == ["cloth"] * VARIANTS
    assert all(r.frames == FRAMES + 1 and r.status == "complete" for r in recs)
    h = cloth.surface_hash(scene.sheet)
    assert h.startswith("surface:") and all(r.mesh_hash == h for r in recs)
    assert cloth.data_kind(scene.sheet) == "cloth" == s.training_data_kind()
    assert json.loads(s.cloth.colliders) == [["Ball", "sphere"]]
    assert open_bake(scene.sheet, recs[0]).n_frames == FRAMES + 1
    # the Train menu offers only the methods that learn from cloth bakes
    offered = [item[0] for item in props.method_items(s)]
    assert offered == [m.name for m in registry.methods_for("cloth")] and "snp" in offered
    assert s.method().name in offered
    # the sidebar of a cloth: its Cloth Bake box, the model; none of the FEM boxes
    from .test_addon_ui import draw_all, panels, texts

    log = draw_all(scene.bpy, scene.sheet)
    shown = panels(log)
    print("panels:", sorted(shown))
    assert {"NEURAL_ROM_PT_cloth_bake", "NEURAL_ROM_PT_model"} <= shown
    assert not shown & {"NEURAL_ROM_PT_tets", "NEURAL_ROM_PT_bake", "NEURAL_ROM_PT_scenario"}
    assert "Colliders: Ball (sphere)" in texts(log)
    # which motion the bakes drew the owner's from (its own keys: the default Motion, Auto)
    assert s.cloth.drawn_from == "Owner animation"
    assert "Owner motion: Owner animation" in texts(log)
    # the user's file and animation are as they were (the job baked a copy)
    assert scene.bpy.data.objects["Ball"].animation_data.action is not None
    assert _cloth(scene).show_viewport and "nrom_cloth_muted" not in scene.sheet.keys()


def test_play_bake_shows_a_cloth_bake_with_the_cloth_muted(scene):
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.io.paths import load_path
    from neural_rom.addon.kinds.cloth import model as cloth
    from neural_rom.core.data.cache import BakeCache

    bpy, sheet, mod = scene.bpy, scene.sheet, _cloth(scene)
    s = sheet.neural_rom
    s.active_bake = 1
    rec = s.bakes[1]
    x = BakeCache.open(load_path(rec.path)).channel("positions")
    bpy.context.scene.frame_set(1)
    rest = bm.get_positions(sheet.data)
    assert bpy.ops.neural_rom.playback(action="START") == {"FINISHED"}
    assert not mod.show_viewport and cloth.MUTED in sheet.keys()
    bpy.context.scene.frame_set(rec.frame_start + 10)
    M = np.array(sheet.matrix_world)
    want = (x[10] - M[:3, 3]) @ np.linalg.inv(M[:3, :3]).T
    err = float(np.abs(bm.get_positions(sheet.data) - want).max())
    print(f"Play Bake, frame 10 of {rec.name}: {err:.1e} m from the bake")
    assert err < 1e-5
    assert bpy.ops.neural_rom.playback(action="STOP") == {"FINISHED"}
    assert mod.show_viewport and cloth.MUTED not in sheet.keys()
    assert np.array_equal(bm.get_positions(sheet.data), rest)
    bpy.context.scene.frame_set(1)


def test_cloth_bake_takes_the_number_of_processes(scene, monkeypatch):
    """The operator's Processes (0: one per core) reaches the job as the CLI's --processes."""
    from neural_rom.addon import jobs

    started = []
    monkeypatch.setattr(jobs, "start_job", lambda context, job, **kw: started.append(job))
    s = scene.sheet.neural_rom
    try:
        for n in (1, 0):
            assert scene.bpy.ops.neural_rom.cloth_bake(processes=n) == {"FINISHED"}
    finally:
        s.pending_bake = ""  # no job ran: nothing in flight
    assert [job["processes"] for job in started] == [1, 0]


def test_refusals_change_nothing(scene, capsys):
    from neural_rom.addon import training
    from neural_rom.addon.kinds.cloth import bake_job as clothbake
    from neural_rom.core.errors import NeuralRomError
    from neural_rom.ui import cli

    bpy, sheet = scene.bpy, scene.sheet
    before = sheet.neural_rom.pending_train
    # a method that does not learn from cloth bakes: the message names what it needs
    with pytest.raises(NeuralRomError, match="cloth") as e:
        training.make_train_job(sheet, bpy.context.scene, method="linear")
    print("linear:", e.value)
    assert cli.main(["train", "--object", "Sheet", "--method", "linear"]) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err
    print("linear, headless:", err.strip())
    assert "Blender's own cloth solver" in err and "Subspace Neural Physics" in err, err
    assert sheet.neural_rom.pending_train == before and not sheet.neural_rom.model.path
    # an object without a Cloth modifier
    ball = bpy.data.objects["Ball"]
    with pytest.raises(NeuralRomError, match="no Cloth modifier"):
        clothbake.make_cloth_bake_job(ball, bpy.context.scene)
    assert cli.main(["cloth-bake", "--object", "Ball"]) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err
    print("ball:", err.strip())
    assert "no Cloth modifier" in err and not ball.neural_rom.pending_bake
    _select(bpy, ball)
    assert not bpy.ops.neural_rom.cloth_bake.poll()
    _select(bpy, sheet)


# --------------------------------------------------------------------------- train, simulate


def test_train_from_cloth_bakes_headless(trained):
    m = trained.sheet.neural_rom.model
    print(f"model: {m.method}, {m.kind}, {m.k} modes, validation {1e3 * m.val_error:.1f} mm")
    assert m.method == "snp" and m.kind == "cloth" and m.k == 8 and m.bakes == VARIANTS
    assert m.mesh_hash == trained.sheet.neural_rom.bakes[0].mesh_hash
    # the panel's Train menu shows the method the headless train used
    assert trained.sheet.neural_rom.model_method == "snp"


def test_info_prints_what_applies_to_a_cloth(trained, capsys):
    """``info`` on a cloth object: its cloth bake settings, bakes and model, none of the FEM
    pipeline's settings (material, tets, scenario) nor a collider's."""
    from neural_rom.ui import cli

    assert cli.main(["info", "--object", "Sheet"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    print(out)
    assert f"cloth bake: {VARIANTS} variants of {FRAMES} frames, seed 0" in out
    assert f"    bakes: {VARIANTS} (" in out and "snp settings:" in out
    for fem in ("material_preset", "youngs_modulus", "tet_size", "scenario", "dt_from_scene"):
        assert f"    {fem}:" not in out, fem
    assert "collider_shape" not in out and "collider_friction" not in out


def test_simulate_mutes_the_cloth_and_follows_the_runtime(trained):
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.cloth import model as cloth

    bpy, sheet, mod = trained.bpy, trained.sheet, _cloth(trained)
    frames = list(range(1, SIM_END + 1))
    want = _by_hand(trained, frames)
    bpy.context.scene.frame_set(1)
    rest = bm.get_positions(sheet.data)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    assert not mod.show_viewport and not mod.show_render and cloth.MUTED in sheet.keys()
    got = []
    for f in frames:
        bpy.context.scene.frame_set(f)
        got.append(bm.get_positions(sheet.data))
    assert sheet.get("nrom_frame_error") is None
    # the pin group's vertices hang from the owner as Blender's cloth holds them: at rest in
    # the object's space, whatever the network predicts
    pins = [v.index for v in sheet.data.vertices if v.groups]
    pin_err = float(np.abs(np.array(got)[:, pins] - rest[pins]).max())
    print(f"{len(pins)} pinned vertices: {pin_err:.1e} m from rest (object space)")
    assert len(pins) == SHEET and pin_err < 1e-5
    err = float(np.abs(np.array(got) - want).max())
    swing = float(np.linalg.norm(want - want[0], axis=-1).max())
    print(
        f"viewport vs runtime by hand: {err:.2e} m over {len(frames)} frames (moves {swing:.3f} m)"
    )
    assert err < 1e-5 and swing > 0.01  # float32 mesh; the cloth really moves
    bpy.context.scene.frame_set(7)  # scrubbing back: the kept frame
    assert np.abs(bm.get_positions(sheet.data) - want[6]).max() < 1e-5
    assert bpy.ops.neural_rom.simulate(action="STOP") == {"FINISHED"}
    assert mod.show_viewport and mod.show_render and cloth.MUTED not in sheet.keys()
    assert np.array_equal(bm.get_positions(sheet.data), rest)


def test_an_edited_collider_is_a_new_collider_on_the_next_frame(trained):
    """The frame handler keeps what it reads of the colliders between frames (their boxes,
    per bounding box; the recorded specs, per recording): a ball whose mesh is edited while
    the sheet simulates is the bigger ball from then on, as the runtime stepped by hand with
    the edited ball gives it, and the frames it touched are simulated again."""
    from neural_rom.addon.io import mesh as bm

    bpy, sheet = trained.bpy, trained.sheet
    ball = bpy.data.objects["Ball"]
    frames = list(range(1, SIM_END + 1))
    bpy.context.scene.frame_set(1)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    co = np.empty(3 * len(ball.data.vertices))
    ball.data.vertices.foreach_get("co", co)
    try:
        before = []
        for f in frames:
            bpy.context.scene.frame_set(f)
            before.append(bm.get_positions(sheet.data))
        ball.data.vertices.foreach_set("co", 1.5 * co)  # edited in place: the same object
        ball.data.update()
        got = []
        for f in frames:
            bpy.context.scene.frame_set(f)
            got.append(bm.get_positions(sheet.data))
        assert sheet.get("nrom_frame_error") is None
        want = _by_hand(trained, frames)
        err = float(np.abs(np.array(got) - want).max())
        moved = float(np.abs(np.array(got) - np.array(before)).max())
        print(f"after the edit: {err:.2e} m from the runtime by hand; {moved:.3f} m from before")
        assert err < 1e-5 and moved > 1e-3
    finally:
        ball.data.vertices.foreach_set("co", co)
        ball.data.update()
        assert bpy.ops.neural_rom.simulate(action="STOP") == {"FINISHED"}


def test_bake_simulation_and_headless_simulate_write_the_runtime(trained):
    from neural_rom.addon.io import export
    from neural_rom.addon.io import mesh as bm
    from neural_rom.core.data.pc2 import read_pc2
    from neural_rom.ui import cli

    bpy, sheet, tmp = trained.bpy, trained.sheet, trained.tmp
    want = _by_hand(trained, list(range(1, SIM_END + 1)))
    op_path, cli_path = tmp / "op.pc2", tmp / "cli.pc2"
    assert bpy.ops.neural_rom.bake_simulation(
        filepath=str(op_path), frame_start=1, frame_end=SIM_END
    ) == {"FINISHED"}
    code = cli.main(
        ["simulate", "--object", "Sheet", "--frames", f"1:{SIM_END}", "--out", str(cli_path)]
    )
    assert code == cli.EXIT_OK
    a, start, _ = read_pc2(op_path)
    b, _, _ = read_pc2(cli_path)
    err = float(np.abs(a - want).max())
    print(
        f"PC2 vs runtime by hand: {err:.2e} m; panel and headless PC2 equal: {np.array_equal(a, b)}"
    )
    assert start == 1 and a.shape == want.shape and err < 1e-5 and np.array_equal(a, b)
    # the viewport reads each frame's inputs on its own path (core.engine.track.FrameReader), Bake
    # Simulation from a track of every frame: the same mesh, to the bit
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    shown = []
    for f in range(1, SIM_END + 1):
        bpy.context.scene.frame_set(f)
        shown.append(bm.get_positions(sheet.data))
    assert bpy.ops.neural_rom.simulate(action="STOP") == {"FINISHED"}
    assert np.array_equal(np.array(shown, dtype=np.float32), a)
    # the Mesh Cache plays right after the Cloth modifier; nothing muted
    names = [m.name for m in sheet.modifiers]
    assert names.index(export.SIM_MODIFIER_NAME) == names.index("Cloth") + 1
    assert _cloth(trained).show_viewport
    sheet.modifiers.remove(sheet.modifiers[export.SIM_MODIFIER_NAME])


def _former_mesh(sim, M):
    """The mesh the frame handler wrote before it was fused (float32 local positions):
    the decode, the pinned rows placed apart, the push-out and ``np.linalg.inv``'s local."""
    from neural_rom.core.engine.render import to_local
    from neural_rom.core.methods.snp import push_out

    pose = sim.poses[0]
    x = pose.apply(sim.decode(sim.z1))
    if sim._rest_inv is not None and len(sim.p.pinned):
        x[sim.p.pinned] = pose.apply(sim.rest_pins)
    x = push_out(x, sim.colliders)
    return to_local(x, M).astype(np.float32), x


def test_the_shown_frame_is_the_former_path_within_float32(trained):
    """A 100-frame walk played in the viewport: each written mesh within 1e-6 m of what the
    former path (decode, pins, push-out, inverse, cast: :func:`_former_mesh`) gives of the
    same state, and the world positions within 1e-12 m (the state's steps are untouched:
    the shown frame alone was fused)."""
    from neural_rom.addon import simulate
    from neural_rom.addon.io import mesh as bm

    bpy, sheet = trained.bpy, trained.sheet
    scene = bpy.context.scene
    owner, ball = bpy.data.objects["Owner"], bpy.data.objects["Ball"]
    keys = ((60, 0.3, 0.6, -0.2), (100, -0.2, -0.5, -0.7))  # walk on past the shot, turning
    for f, x, turn, y in keys:
        owner.location, owner.rotation_euler = (x, 0.0, 1.5), (0.0, 0.0, turn)
        owner.keyframe_insert("location", frame=f)
        owner.keyframe_insert("rotation_euler", frame=f)
        ball.location = (0.0, y, 1.0)
        ball.keyframe_insert("location", frame=f)
    scene.frame_set(1)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    mesh_err = world_err = 0.0
    states = []
    try:
        for f in range(1, 101):
            scene.frame_set(f)
            sim = simulate._drivers[sheet.name].timeline.sim
            want, x = _former_mesh(sim, bm.matrix(sheet))
            got = bm.get_positions(sheet.data)
            mesh_err = max(mesh_err, float(np.abs(got.astype(np.float64) - want).max()))
            world_err = max(world_err, float(np.abs(sim.positions() - x).max()))
            states.append(sim.z1.copy())
    finally:
        assert bpy.ops.neural_rom.simulate(action="STOP") == {"FINISHED"}
        for f, *_ in keys:
            for obj, paths in ((owner, ("location", "rotation_euler")), (ball, ("location",))):
                for path in paths:
                    obj.keyframe_delete(path, frame=f)
    moved = float(np.abs(np.diff(np.array(states), axis=0)).max())
    print(f"100 frames: mesh vs former path {mesh_err:.2e} m, world {world_err:.2e} m")
    assert mesh_err <= 1e-6 and world_err <= 1e-12 and moved > 1e-3


def test_a_model_file_written_over_while_simulating_drives_it_without_start(trained):
    """A model file replaced outside Blender (a training elsewhere) drives the sheet without
    Start from the start frame, or from Reset, on (until then the frames are the kept
    model's: the file is not stat-ed on the other frames); a model trained in Blender from
    the next frame (its training drops the driver). Each time simulated from rest, as the
    runtime stepped by hand gives it."""
    import json

    from neural_rom.addon import simulate, training
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.io.paths import load_path
    from neural_rom.core.data.modelfile import load_model, save_model

    bpy, sheet = trained.bpy, trained.sheet
    scene = bpy.context.scene
    path = load_path(sheet.neural_rom.model.path)
    original = path.read_bytes()
    frames = list(range(1, 9))
    old = _by_hand(trained, frames)
    m = load_model(path)
    other = {**m.arrays, "alpha": 0.5 * m.arrays["alpha"]}  # another training of the sheet

    def play(first, last):
        for f in range(first, last + 1):
            scene.frame_set(f)
        return bm.get_positions(sheet.data)

    def write_other():
        save_model(path, method=m.method, mesh_hash=m.mesh_hash, arrays=other, metadata=m.metadata)

    record = {}
    scene.frame_set(1)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    try:
        play(1, 6)
        d = simulate._drivers[sheet.name]
        write_other()
        with bm.frame_kept(scene):  # its frames by hand, the start frame among them
            new = _by_hand(trained, frames)
        moved = float(np.abs(new[7] - old[7]).max())
        assert moved > 1e-4
        assert np.abs(play(7, 8) - old[7]).max() < 1e-5  # the kept model's frames
        assert simulate._drivers[sheet.name] is d
        # the start frame reads the file again: the new model, from rest
        assert np.abs(play(1, 8) - new[7]).max() < 1e-5
        assert simulate._drivers[sheet.name] is not d
        d = simulate._drivers[sheet.name]
        path.write_bytes(original)  # back: picked up on Reset, mid-play
        scene.frame_set(5)
        assert simulate._drivers[sheet.name] is d
        assert bpy.ops.neural_rom.reset_simulation() == {"FINISHED"}
        assert simulate._drivers[sheet.name] is not d
        assert np.abs(play(6, 8) - old[7]).max() < 1e-5
        # trained in Blender: the job's end records the model and the next frame is its own
        d = simulate._drivers[sheet.name]
        s = sheet.neural_rom
        record.update(
            (p.identifier, getattr(s.model, p.identifier))
            for p in s.model.bl_rna.properties
            if p.identifier not in ("rna_type", "name")
        )
        write_other()
        s.pending_train = json.dumps(
            {"method": s.model.method, "kind": "cloth", "mesh_hash": s.model.mesh_hash}
        )
        assert training.on_train_done(sheet, {"model": str(path), "method": m.method})
        scene.frame_set(4)
        assert simulate._drivers[sheet.name] is not d
        assert np.abs(play(5, 8) - new[7]).max() < 1e-5
        assert sheet.get("nrom_frame_error") is None
    finally:
        path.write_bytes(original)
        assert bpy.ops.neural_rom.simulate(action="STOP") == {"FINISHED"}
        for name, value in record.items():  # the model as the fixture trained it
            setattr(sheet.neural_rom.model, name, value)


def test_export_onnx_button_writes_the_step_with_its_linear_normals(trained):
    """The panel's ONNX button on the sheet's snp model (a cloth model: it has the linear
    normal model): onnxruntime's step from rest gives the runtime's state, positions and
    normals (tests/test_onnx_export.py checks the rollout)."""
    ort = pytest.importorskip("onnxruntime", reason="the exported file is checked in onnxruntime")
    from neural_rom.addon.io.paths import load_path
    from neural_rom.core.methods.snp import linear_normals
    from neural_rom.core.reduced.pose import IDENTITY
    from neural_rom.core.registry import load_simulator

    bpy, sheet, tmp = trained.bpy, trained.sheet, trained.tmp
    _select(bpy, sheet)
    path = tmp / "sheet.onnx"
    assert bpy.ops.neural_rom.export_onnx(filepath=str(path)) == {"FINISHED"}
    sim, _ = load_simulator(load_path(sheet.neural_rom.model.path))
    p = sim.p
    z = np.stack([sim.z1, sim.z1 + 0.1 * (p.z_hi - p.z_lo)])
    f = np.stack([p.encoder.lo, p.encoder.hi])
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in s.get_outputs()] == ["z", "positions", "normals"]
    feeds = {"z_prev": z, "z_prev2": z[::-1], "features": f}
    got = s.run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    want_z = sim.predict_features(z, z[::-1], f)
    want_y = p.mean + (want_z @ p.U.T).reshape(2, -1, 3)
    want_n = linear_normals(p.normal_mean, p.normal_basis, want_z, [IDENTITY] * 2)
    errs = [float(np.abs(g - w).max()) for g, w in zip(got, (want_z, want_y, want_n))]
    print("ONNX button, float32 vs runtime (z, positions m, normals):", errs)
    assert max(errs) < 1e-5


def test_compare_with_a_held_out_cloth_bake(trained):
    from neural_rom.addon.compare import bake as compare
    from neural_rom.addon.kinds.cloth import model as cloth
    from neural_rom.ui import cli

    bpy, sheet, tmp = trained.bpy, trained.sheet, trained.tmp
    s = sheet.neural_rom
    roles = compare.bake_roles(sheet)
    print("roles:", roles)
    held = [name for name, role in roles.items() if role == compare.HELD_OUT]
    assert len(held) == 1
    s.active_bake = next(i for i, r in enumerate(s.bakes) if r.name == held[0])
    assert bpy.ops.neural_rom.compare_bake(placement="SIDE") == {"FINISHED"}
    info = dict(sheet[compare.PROP])
    print(
        f"held-out {held[0]}: max {1e3 * info['max_error']:.1f} mm, mean "
        f"{1e3 * info['mean_error']:.1f} mm, closest shapes max "
        f"{1e3 * info['closest_max_error']:.1f} mm"
    )
    assert info["bake"] == held[0] and info["frames"] == FRAMES + 1
    # the errors are those of the model stepped by hand with the bake's recorded colliders
    # and reference frame (the accuracy itself is tests/test_snp_cloth.py's)
    err = _replay_errors(sheet, s.bakes[s.active_bake])
    print(f"by hand: max {1e3 * err.max():.1f} mm, mean {1e3 * err.mean():.1f} mm")
    assert abs(err.max() - info["max_error"]) < 1e-9 and abs(err.mean() - info["mean_error"]) < 1e-9
    assert 0 < info["closest_max_error"] <= info["max_error"]
    # what train printed and the panel shows as the model's error is this replay (the
    # trainer replayed the one held-out bake), the closest shapes beside it as the floor
    from neural_rom.addon import training

    m = s.model
    # (the panel's properties are float32; the replay's mean is over the stepped frames,
    # compare's over frame 0 too)
    assert abs(m.rollout_error - info["max_error"]) < 1e-6 * info["max_error"]
    stepped = err[1:].mean()
    assert abs(m.rollout_mean_error - stepped) < 1e-6 * stepped
    assert abs(m.projection_error - info["closest_max_error"]) < 1e-6 * info["max_error"]
    summary = training.error_summary(m)
    print("train's summary:", summary)
    assert summary.startswith(f"held-out replay error {1000 * info['max_error']:.3g} mm max")
    assert f"closest shapes, the floor: {1000 * info['closest_max_error']:.3g} mm max" in summary
    assert not _cloth(trained).show_viewport  # the comparison drives the mesh
    bpy.context.scene.frame_set(12)
    colours = sheet.data.color_attributes.get(compare.COLOR_ATTRIBUTE)
    assert colours is not None and len(colours.data) == len(sheet.data.vertices)
    assert bpy.ops.neural_rom.clear_comparison() == {"FINISHED"}
    assert _cloth(trained).show_viewport and cloth.MUTED not in sheet.keys()
    # headless: the same bake (the held-out one by default), the same numbers
    out = tmp / "compare.json"
    assert cli.main(["compare", "--object", "Sheet", "--json", str(out)]) == cli.EXIT_OK
    rows = json.loads(out.read_text())["bakes"]
    assert [r["bake"] for r in rows] == held
    assert abs(rows[0]["max_error_m"] - info["max_error"]) < 1e-9


def test_compare_methods_on_a_cloth_compares_what_trains_on_cloth(trained):
    """Compare Methods on the sheet (issue 25): snp, the method that trains on cloth bakes,
    trained and replayed on the held-out cloth bake; every other method listed with the
    reason; ``--use none`` leaves the object's model as it was."""
    from neural_rom.addon.io.paths import load_path
    from neural_rom.core import registry
    from neural_rom.ui import cli

    sheet, tmp = trained.sheet, trained.tmp
    before = sheet.neural_rom.model.path
    stamp = load_path(before).stat().st_mtime_ns
    out = tmp / "methods.json"
    argv = ["compare-methods", "--object", "Sheet", "--budget", "60", "--use", "none"]
    assert cli.main([*argv, "--json", str(out), *TRAIN_ARGS]) == cli.EXIT_OK
    table = json.loads(out.read_text())["objects"][0]
    rows = {r["method"]: r for r in table["rows"]}
    assert list(rows) == registry.names()
    snp = rows.pop("snp")
    print(f"compare-methods on the sheet: snp {1e3 * snp['mean_m']:.1f} mm mean")
    assert snp["status"] == "done" and snp["frames"] == FRAMES + 1
    assert len(snp["replays"]) == 1  # the one bake of 3 held out (validation 0.34)
    assert 0 < snp["closest_max_m"] <= snp["max_m"] and snp["memory_bytes"] > 0
    assert snp["pca_max_m"] is None  # the PCA baseline trains on FEM bakes only
    for name, row in rows.items():
        assert row["status"] == "refused", name
        assert "not on bakes of Blender's own cloth solver" in row["reason"] or (
            "face file" in row["reason"]
        )
    assert sheet.neural_rom.model.path == before  # the object's model, its file untouched
    assert load_path(before).stat().st_mtime_ns == stamp


def test_a_saved_file_and_a_disabled_add_on_give_the_cloth_back(trained):
    from neural_rom.addon.kinds.cloth import model as cloth

    bpy, sheet, tmp = trained.bpy, trained.sheet, trained.tmp
    mod = _cloth(trained)
    mod.show_render = False  # the user's own setting comes back as it was
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    assert not mod.show_viewport
    copy = tmp / "saved_while_simulating.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(copy), copy=True)
    assert not mod.show_viewport  # muted again after the write
    with bpy.data.libraries.load(str(copy)) as (_src, dst):
        dst.objects = ["Sheet"]
    saved = dst.objects[0]
    on_disk = saved.modifiers["Cloth"]
    print("on disk:", on_disk.show_viewport, on_disk.show_render)
    assert on_disk.show_viewport and not on_disk.show_render  # as the user had it
    assert saved.neural_rom.simulate  # ... and reopened with the add-on, muted again
    bpy.data.objects.remove(saved)
    trained.package.unregister()  # disabling the add-on mid-simulation
    try:
        assert mod.show_viewport and not mod.show_render and cloth.MUTED not in sheet.keys()
    finally:
        trained.package.register()
    sheet.neural_rom.simulate = False
    from neural_rom.addon.io import mesh as bm

    bm.restore_rest(sheet.data)
    mod.show_render = True


def test_a_changed_mesh_refuses_its_bakes_and_model(trained):
    from neural_rom.addon import simulate, training
    from neural_rom.core.errors import CacheError
    from neural_rom.ui import cli

    bpy, sheet = trained.bpy, trained.sheet
    co = sheet.data.vertices[5].co.copy()
    sheet.data.vertices[5].co.z += 0.01
    try:
        with pytest.raises(CacheError, match="cloth-bake it again") as e:
            training.make_train_job(sheet, bpy.context.scene)
        print("stale bake:", e.value)
        with pytest.raises(CacheError, match="edited after its model was trained"):
            simulate.start_simulation(sheet, bpy.context.scene)
        assert not sheet.neural_rom.simulate and _cloth(trained).show_viewport
        assert cli.main(["simulate", "--object", "Sheet"]) == cli.EXIT_USER_ERROR
    finally:
        sheet.data.vertices[5].co = co


def test_a_file_reopened_while_simulating_mutes_its_cloth_again(trained):
    """Last: it opens the copy saved mid-simulation (test_a_saved_file_...) in place of the
    module's file."""
    from neural_rom.addon import simulate
    from neural_rom.addon.kinds.cloth import model as cloth

    bpy = trained.bpy
    bpy.ops.wm.open_mainfile(filepath=str(trained.tmp / "saved_while_simulating.blend"))
    sheet = bpy.data.objects["Sheet"]
    mod = sheet.modifiers["Cloth"]
    assert sheet.neural_rom.simulate and not mod.show_viewport and cloth.MUTED in sheet.keys()
    bpy.context.scene.frame_set(3)  # the model drives it again
    assert sheet.get("nrom_frame_error") is None
    simulate.stop_simulation(sheet)
    assert mod.show_viewport and not mod.show_render  # as the user had it
    assert cloth.MUTED not in sheet.keys()


def test_a_cancelled_cloth_bake_records_its_committed_frames(trained):
    """Esc on a cloth bake: what was committed is recorded (status "cancelled")."""
    import threading

    from neural_rom.addon import jobs

    bpy = trained.bpy
    sheet = bpy.data.objects["Sheet"]  # the file the test before opened
    _select(bpy, sheet)
    s = sheet.neural_rom
    s.cloth.frames, s.cloth.variants, s.cloth.seed = 3000, 1, 7

    def cancel_when_going():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for entry in list(jobs._JOBS.values()):
                if not entry.job.finished and entry.job.done_units >= 5:
                    entry.job.cancel()
                    return
            time.sleep(0.01)

    watcher = threading.Thread(target=cancel_when_going, daemon=True)
    watcher.start()
    assert bpy.ops.neural_rom.cloth_bake() == {"FINISHED"}  # a cancel is a warning
    watcher.join()
    rec = next(r for r in s.bakes if r.name == "cloth_s7_000")
    print(f"cancelled cloth bake: {rec.frames} frames recorded, status {rec.status}")
    assert rec.kind == "cloth" and rec.status == "cancelled" and 5 <= rec.frames < 3001
    assert not s.pending_bake
