"""The cloth bake job: Blender's own cloth solver (the PyPI bpy in a worker process) baked to
.nrbake files under seeded random collider and owner motion (core/clothbake.py,
addon/clothbake.py)."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from neural_rom.core import jobs
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.kinds.cloth import source as cb

from .cloth_scenes import build_sheet

PY = sys.executable


def bake(tmp, blend, *, timeout=120, **spec):
    spec = {
        "kind": "cloth_bake",
        "blend": str(blend),
        "object": "Sheet",
        "out_dir": str(tmp / "bakes"),
        **spec,
    }
    job = jobs.Job.start(spec, PY, tmp / "logs", check_python=False)
    job.wait(timeout=timeout)
    return job


def cancel_after(job, units):
    """Cancel ``job`` once it reported ``units`` frames done (or after a minute), and wait."""
    deadline = time.monotonic() + 60
    while job.done_units < units and time.monotonic() < deadline and not job.finished:
        job.poll()
        time.sleep(0.02)
    job.cancel()
    job.wait(timeout=60)


# ------------------------------------------------------------------------- no bpy


def test_motion_plan_is_seeded_and_starts_where_things_are():
    spec = cb.ClothBakeSpec(blend="x.blend", object="S", out_dir=".", frames=100, seed=4)
    lo, hi = np.array([-0.5, 0.0, 1.0]), np.array([0.5, 0.0, 2.0])
    start = [np.array([0.0, -0.6, 1.0])]
    a = cb.motion_plan(spec, 0, lo, hi, start)
    assert a == cb.motion_plan(spec, 0, lo, hi, start)  # same seed and variant: same keys
    b = cb.motion_plan(spec, 1, lo, hi, start)
    assert a["colliders"][0]["locations"][1] != b["colliders"][0]["locations"][1]
    keys = np.array(a["colliders"][0]["frames"])
    gaps = np.diff(keys)[:-1]
    print("collider keys", keys.tolist())
    assert keys[0] == 0 and keys[-1] == 100 and gaps.min() >= 8 and gaps.max() <= 30
    locs = np.array(a["colliders"][0]["locations"])
    assert np.allclose(locs[0], start[0])  # starts where the user put it
    diag = np.linalg.norm(hi - lo)
    box = 0.5 * (hi - lo) + 0.25 * diag
    assert np.all(np.abs(locs[1:] - 0.5 * (lo + hi)) <= box + 1e-12)
    owner = a["owner"]
    assert np.allclose(owner["offsets"][0], 0) and np.allclose(owner["turns"][0], 0)
    assert np.abs(owner["turns"]).max() <= 0.4


def test_surface_hash_is_the_vertices_and_faces():
    V = np.random.default_rng(0).normal(size=(6, 3))
    fv, fs = np.array([0, 1, 2, 3, 2, 3, 4, 5, 1]), np.array([4, 3, 2])
    h = cb.surface_hash(V, fv, fs)
    assert h.startswith("surface:") and h == cb.surface_hash(V.copy(), fv, fs)
    assert h != cb.surface_hash(V + 1e-12, fv, fs)
    assert h != cb.surface_hash(V, fv[[1, 0, 2, 3, 4, 5, 6, 7, 8]], fs)
    assert h != cb.surface_hash(V, fv, np.array([3, 4, 2]))  # same indices, other faces
    with pytest.raises(ValueError, match="add up"):
        cb.surface_hash(V, fv, np.array([4, 3]))


def test_spec_refuses_bad_settings_with_what_to_do():
    with pytest.raises(cb.ClothBakeError, match="at least 2 frames"):
        cb.ClothBakeSpec(blend="x", object="S", out_dir=".", frames=1)
    with pytest.raises(cb.ClothBakeError, match="sphere, capsule or plane"):
        cb.ClothBakeSpec(blend="x", object="S", out_dir=".", colliders=[["Ball", "cube"]])
    with pytest.raises(cb.ClothBakeError, match="key_gap"):
        cb.ClothBakeSpec(blend="x", object="S", out_dir=".", key_gap=(5, 2))
    with pytest.raises(cb.ClothBakeError, match="Unknown cloth bake setting"):
        cb.ClothBakeSpec.from_dict({"blend": "x", "object": "S", "out_dir": ".", "frame": 3})
    with pytest.raises(cb.ClothBakeError, match='no "blend"'):
        cb.ClothBakeSpec.from_dict({"object": "S", "out_dir": "."})
    with pytest.raises(cb.ClothBakeError, match="one per CPU core"):
        cb.ClothBakeSpec(blend="x", object="S", out_dir=".", processes=-1)
    with pytest.raises(cb.ClothBakeError, match="0 <= i < N"):
        cb.ClothBakeSpec(blend="x", object="S", out_dir=".", shard=[2, 2])
    spec = cb.ClothBakeSpec(blend="x", object="S", out_dir=".", variants=7, shard=[1, 3])
    assert spec.shard_variants() == [1, 4]
    assert cb.ClothBakeSpec.from_dict(spec.to_dict()) == spec  # JSON round trip


def test_blender_command_runs_the_worker_in_background_blender():
    cmd = cb.blender_command("/opt/blender/blender", "/ext/worker.py", "/tmp/j.spec.json")
    assert cmd[:3] == ["/opt/blender/blender", "--background", "--factory-startup"]
    assert cmd[-4:] == ["--python", "/ext/worker.py", "--", "/tmp/j.spec.json"]


# ------------------------------------------------------------------------- with bpy


@pytest.fixture(scope="module")
def sheet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cloth")
    return build_sheet(tmp / "sheet.blend", n=12)


@pytest.fixture(scope="module")
def baked(sheet, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clothbake")
    t0 = time.perf_counter()
    job = bake(tmp, sheet, name="s", frames=40, variants=2, seed=3, processes=1)
    print(f"cloth bake, 2 variants x 41 frames of 144 vertices: {time.perf_counter() - t0:.2f} s")
    assert job.state == jobs.DONE, job.message
    return tmp, job


def test_cloth_bake_writes_world_positions_pins_frames_and_colliders(baked):
    tmp, job = baked
    paths = job.result["paths"]
    assert len(paths) == 2 and job.heavy_modules == ["bpy"]
    first = None
    for path in paths:
        b = BakeCache.open(path)
        meta = b.meta
        assert b.status == "complete" and b.n_frames == 41 and cb.is_cloth_bake(meta)
        assert b.T.shape == (0, 4) and b.X.shape == (144, 3)
        assert meta["owner"] == "Owner" and meta["colliders"][0]["name"] == "Ball"
        assert abs(meta["colliders"][0]["radius"] - 0.15) < 1e-6
        dt = meta["dt"]
        x = np.asarray(b.channel("positions"))
        v = np.asarray(b.channel("velocities"))
        R = np.asarray(b.channel("reference_frame"))
        C = np.asarray(b.channel("colliders"))
        np.testing.assert_allclose(x[0], b.X)
        np.testing.assert_allclose(v[1:], np.diff(x, axis=0) / dt, rtol=0, atol=1e-9)
        # the mesh hash is the local mesh's: the sheet sits 1.5 m up, its data at z <= 0
        fv, fs = b.extra("face_vertices"), b.extra("face_sizes")
        assert fs.tolist() == [4] * 121 and b.mesh_hash == cb.surface_hash(
            b.X - [0.0, 0.0, 1.5], fv, fs
        )
        # the pinned row hangs from the owner: still in the reference frame, to float32
        pin = b.extra("pinned")
        M0 = np.array(meta["reference_rest"])
        rel = R @ np.linalg.inv(M0)
        y = np.einsum("fji,fnj->fni", rel[:, :3, :3], x - rel[:, None, :3, 3])
        pin_drift = np.abs(y[:, pin] - b.X[pin]).max()
        moved = np.abs(R[:, :3, 3] - R[0, :3, 3]).max()
        swing = np.abs(y - b.X).max()
        print(
            f"{b.path.name}: owner moved {moved:.3f} m, pins drift {pin_drift:.2g} m in its "
            f"frame, cloth deforms {swing:.3f} m"
        )
        assert len(pin) == 12 and pin_drift < 1e-5 and moved > 0.05 and swing > 0.05
        # the collider is at its planned keys (the uv sphere is centred on its origin)
        plan = meta["motion"]["colliders"][0]
        np.testing.assert_allclose(C[plan["frames"], 0, :3, 3], plan["locations"], atol=1e-5)
        if first is None:
            first = x
        else:
            assert np.abs(x - first).max() > 0.05  # the variants differ


def test_cloth_bake_is_seeded(baked, sheet):
    """The same seed gives the same random keys exactly, and the same cloth to float32
    round-off: Blender's cloth is not bit-reproducible from run to run once the ball is in
    contact (its collision threads; 1,001-frame bakes of tests/test_snp_cloth.py moved 0.2 mm
    on average between two runs), so the positions are compared to a tolerance."""
    tmp, job = baked
    again = bake(tmp / "again", sheet, name="s", frames=40, variants=1, seed=3)
    assert again.state == jobs.DONE, again.message
    first, second = (BakeCache.open(j.result["paths"][0]) for j in (job, again))
    assert first.meta["motion"] == second.meta["motion"]
    a, b = (np.asarray(c.channel("positions")) for c in (first, second))
    print("max difference of two bakes of one seed", np.abs(a - b).max())
    assert np.abs(a - b).max() < 1e-4


def test_cloth_bake_in_processes_bakes_what_one_process_bakes(baked, sheet):
    """Variants shared out between two child processes (each its own .nrbake, committed
    frame by frame) are the variants one process bakes: the same random keys exactly, the
    same cloth to Blender's round-off (see the test above)."""
    tmp, job = baked
    t0 = time.perf_counter()
    par = bake(tmp / "par", sheet, name="s", frames=40, variants=3, seed=3, processes=2)
    print(f"3 variants x 41 frames in 2 processes: {time.perf_counter() - t0:.2f} s")
    assert par.state == jobs.DONE, par.message
    assert par.result["processes"] == 2 and len(par.result["paths"]) == 3
    logs = sorted(p.name for p in (tmp / "par" / "logs").glob("*.p[01].log"))
    assert len(logs) == 2  # one log per child
    worst = 0.0
    for serial, parallel in zip(job.result["paths"], par.result["paths"]):
        a, b = BakeCache.open(serial), BakeCache.open(parallel)
        assert b.status == "complete" and b.n_frames == a.n_frames == 41
        assert a.meta["motion"] == b.meta["motion"] and a.meta["variant"] == b.meta["variant"]
        for c in ("colliders", "reference_frame"):
            assert np.array_equal(a.channel(c), b.channel(c))
        worst = max(
            worst, np.abs(np.asarray(a.channel("positions")) - b.channel("positions")).max()
        )
    print(f"largest difference to the one-process bakes: {worst:.2g} m")
    assert worst < 1e-4
    third = BakeCache.open(par.result["paths"][2])
    first = BakeCache.open(par.result["paths"][0])
    assert third.meta["variant"] == 2 and third.n_frames == 41
    assert third.meta["motion"] != first.meta["motion"]


def test_cancelled_bake_in_processes_keeps_each_variants_prefix(sheet, tmp_path):
    job = jobs.Job.start(
        {
            "kind": "cloth_bake",
            "blend": str(sheet),
            "object": "Sheet",
            "out_dir": str(tmp_path / "bakes"),
            "frames": 3000,
            "variants": 2,
            "processes": 2,
            "durable": False,
        },
        PY,
        tmp_path / "logs",
        check_python=False,
    )
    cancel_after(job, 40)
    assert job.state == jobs.CANCELLED, job.message
    counts = []
    for v in range(2):
        b = BakeCache.open(tmp_path / "bakes" / f"cloth_{v:03d}.nrbake")
        assert b.status == "cancelled" and job.result["frames"][str(b.path)] == b.n_frames
        assert np.all(np.isfinite(np.asarray(b.channel("positions"))))
        counts.append(b.n_frames)
    print(f"cancelled after {counts} committed frames")
    assert min(counts) >= 1 and sum(counts) >= 40 and max(counts) < 3001


def test_cloth_bake_refuses_a_modifier_that_changes_the_vertex_count(tmp_path):
    blend = build_sheet(tmp_path / "sub.blend", n=6, before="SUBSURF")
    job = bake(tmp_path, blend, frames=5)
    assert job.state == jobs.FAILED
    assert "change its vertex count" in job.message and "Before" in job.message
    assert "apply them, or move them after the Cloth modifier" in job.message
    assert not (tmp_path / "bakes" / "cloth_000.nrbake").exists()


def test_cloth_bake_mutes_modifiers_after_the_cloth(tmp_path):
    blend = build_sheet(tmp_path / "after.blend", n=6, after="SUBSURF")
    job = bake(tmp_path, blend, frames=5)
    assert job.state == jobs.DONE, job.message
    assert any("After" in w and "left out" in w for w in job.warnings)
    assert BakeCache.open(job.result["paths"][0]).channel("positions").shape == (6, 36, 3)


def test_cancelled_cloth_bake_keeps_a_valid_prefix(sheet, tmp_path):
    spec = {
        "kind": "cloth_bake",
        "blend": str(sheet),
        "object": "Sheet",
        "out_dir": str(tmp_path / "bakes"),
        "frames": 3000,
    }
    job = jobs.Job.start(spec, PY, tmp_path / "logs", check_python=False)
    cancel_after(job, 20)
    assert job.state == jobs.CANCELLED, job.message
    b = BakeCache.open(tmp_path / "bakes" / "cloth_000.nrbake")
    print(f"cancelled after {b.n_frames} committed frames")
    assert b.status == "cancelled" and 20 <= b.n_frames < 3001
    assert job.result["frames"][str(b.path)] == b.n_frames
    assert np.all(np.isfinite(np.asarray(b.channel("positions"))))


def test_cli_cloth_bake(sheet, tmp_path):
    import bpy
    from neural_rom.addon import jobs as addon_jobs
    from neural_rom.ui import cli

    out = tmp_path / "cli"
    argv = [
        "cloth-bake",
        "--file",
        str(sheet),
        "--object",
        "Sheet",
        "--frames",
        "6",
        "--variants",
        "1",
        "--out",
        str(out),
    ]
    try:
        assert cli.main([*argv, "--seed", "2"]) == cli.EXIT_OK
        b = BakeCache.open(out / "cloth_s2_000.nrbake")
        assert b.n_frames == 7 and b.meta["seed"] == 2
        # recorded on the object, as the panel's Cloth Bake records them
        recs = bpy.data.objects["Sheet"].neural_rom.bakes
        assert [(r.name, r.kind, r.frames) for r in recs] == [("cloth_s2_000", "cloth", 7)]
        stamp = (out / "cloth_s2_000.nrbake" / "meta.json").stat().st_mtime_ns
        assert cli.main([*argv, "--seed", "2"]) == cli.EXIT_USER_ERROR  # exists: refused
        assert (out / "cloth_s2_000.nrbake" / "meta.json").stat().st_mtime_ns == stamp
    finally:
        addon_jobs.clear_finished()  # the job list is the process's: leave it empty


def test_a_baked_point_cache_is_freed_in_the_job_not_in_the_file(tmp_path):
    import bpy

    blend = build_sheet(tmp_path / "baked.blend", n=6)
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    cloth = next(m for m in bpy.data.objects["Sheet"].modifiers if m.type == "CLOTH")
    cloth.point_cache.frame_end = 12
    bpy.ops.ptcache.bake_all(bake=True)
    assert cloth.point_cache.is_baked
    bpy.ops.wm.save_mainfile()
    job = bake(tmp_path, blend, frames=20, seed=5)
    assert job.state == jobs.DONE, job.message
    assert any("was baked" in w for w in job.warnings)
    b = BakeCache.open(job.result["paths"][0])
    # the cache range (1..12) was extended to the bake's 21 frames, which all moved
    x = np.asarray(b.channel("positions"))
    assert b.n_frames == 21 and b.meta["user_cache_range"] == {"frame_start": 1, "frame_end": 12}
    assert np.abs(x[20] - x[12]).max() > 1e-4
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    cloth = next(m for m in bpy.data.objects["Sheet"].modifiers if m.type == "CLOTH")
    assert cloth.point_cache.is_baked  # the user's file keeps its bake
