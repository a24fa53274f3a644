"""Bake Simulation and Compare with Bake as worker jobs, without Blender: core.simjob steps a
model over gathered inputs exactly as stepping it by hand and writes the PC2 only once
complete; core.comparejob writes the replay training's validation uses; the worker's
"simulate" and "compare" handlers run them in their own process with per-frame progress,
a cancel leaves the previous file as it was and a failure is a message saying what to do."""

import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from neural_rom.core import bake as bk
from neural_rom.core import jobs
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.data.files import mesh_hash
from neural_rom.core.data.meshfile import write_tetmesh
from neural_rom.core.data.pc2 import read_pc2, write_pc2
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.engine.render import read_render_map, to_world
from neural_rom.core.engine.replay import replay_bake
from neural_rom.core.engine.track import FrameReader, Track, read_track, write_track
from neural_rom.core.errors import CacheError, JobCancelled
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.geometry.tetmesh import TetMesh
from neural_rom.core.jobs import compare as comparejob
from neural_rom.core.jobs import simulate as simjob
from neural_rom.core.methods.linear import save as save_linear
from neural_rom.core.physics.colliders import Collider
from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
from neural_rom.core.physics.sim import SimSettings
from neural_rom.core.reduced.cubature import Cubature
from neural_rom.core.reduced.subspace import modal_basis
from neural_rom.core.registry import load_simulator

PY = sys.executable
MATERIAL = Material(youngs_modulus=1e5, poisson_ratio=0.4, density=1000.0)


def rigid(angle: float, t) -> np.ndarray:
    """A rotation about Z by ``angle`` and a translation ``t``."""
    c, s = np.cos(angle), np.sin(angle)
    M = np.eye(4)
    M[:3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
    M[:3, 3] = t
    return M


def linear_model(folder, X_world, T, *, settings=None, pinned=None, k=6, name="m"):
    """A linear model of the world mesh (modes of the bar clamped at x = min)."""
    if pinned is None:
        pinned = np.flatnonzero(X_world[:, 0] < X_world[:, 0].min() + 1e-9)
    mass = np.asarray(mass_matrix(X_world, T, MATERIAL.density, lumped=True))
    sub = modal_basis(TetFEM(X_world, T, MATERIAL), mass, pinned, k)
    return save_linear(
        folder / f"{name}.nrmodel",
        mesh_hash=mesh_hash(X_world, T),
        T=T,
        subspace=sub,
        cubature=Cubature(np.arange(len(T)), np.ones(len(T)), {}),
        contact=(np.arange(len(X_world)), mass),
        material=MATERIAL,
        settings=settings or SimSettings(),
    )


@pytest.fixture
def scene(tmp_path):
    """A bar object (local tets, placed by M0 at frame 1), its model, and gathered inputs of
    frames 1..n: the object slides and turns (its clamped end follows) and a sphere sweeps."""
    X_local, T = grid_tetmesh((0.4, 0.1, 0.1), (6, 2, 2))
    n = 9
    mats = np.stack([rigid(0.05 * k, (0.02 * k, 0.0, 1.0)) for k in range(n)])
    X_world = to_world(X_local, mats[0])
    tets = tmp_path / "tets.npz"
    write_tetmesh(tets, TetMesh(X_local, T, len(X_local)))
    model = linear_model(tmp_path, X_world, T)
    sphere = np.stack([rigid(0.0, (0.45 - 0.02 * k, 0.05, 1.05)) for k in range(n)])
    track = Track(
        frame0=1,
        object_matrix=mats,
        collider_kind=np.full((n, 1), "sphere"),
        collider_radius=np.full((n, 1), 0.08),
        collider_half_length=np.zeros((n, 1)),
        collider_friction=np.array([0.2]),
        collider_transform=sphere[:, None],
    )
    inputs = write_track(tmp_path / "simulate.job" / simjob.TRACK_FILE, track)
    spec = {
        "kind": "simulate",
        "name": "Bar",
        "model": str(model),
        "expect_mesh_hash": mesh_hash(X_world, T),
        "tets": str(tets),
        "embedding": "",
        "inputs": str(inputs),
        "out": str(tmp_path / "out" / "bar_reduced.pc2"),
        "frame_start": 3,
        "frame_end": n,
    }
    return SimpleNamespace(spec=spec, X_local=X_local, mats=mats, sphere=sphere, n=n)


def stepped_by_hand(sc, first: int) -> np.ndarray:
    """Local positions of frames ``first..n``: the model stepped from rest with the frame's
    inputs written out in full here, mapped with the frame's inverse matrix."""
    sim, _ = load_simulator(sc.spec["model"])
    sim.reset()
    pins_local = sc.X_local[sim.pinned]
    assert len(pins_local) > 0
    out = []
    for k in range(sc.n):
        if k > 0:
            M = sc.mats[k]
            sim.step(
                FrameInputs(
                    pin_targets=pins_local @ M[:3, :3].T + M[:3, 3],
                    colliders=[Collider("sphere", 0.08, 0.0, sc.sphere[k], 0.2)],
                )
            )
        if k + 1 >= first:
            inv = np.linalg.inv(sc.mats[k])
            out.append(sim.positions() @ inv[:3, :3].T + inv[:3, 3])
    return np.stack(out)


def test_the_job_writes_the_frames_of_the_model_stepped_by_hand(scene):
    calls = []
    result = simjob.simulate_to_pc2(scene.spec, progress=lambda d, t: calls.append((d, t)))
    frames, start, rate = read_pc2(scene.spec["out"])
    ref = stepped_by_hand(scene, first=3)
    assert frames.shape == ref.shape == (7, len(scene.X_local), 3) and (start, rate) == (3, 1)
    np.testing.assert_allclose(frames, ref.astype(np.float32), rtol=0, atol=1e-12)
    assert np.abs(ref[-1] - ref[0]).max() > 1e-3  # the bar swings: something is compared
    assert calls == [(k, 8) for k in range(1, 9)]  # every frame from rest on
    assert result["frames"] == 7 and result["frame_start"] == 3 and result["step_ms"] > 0
    # the pinned end stays on the moving object: in local space, where it started
    sim, _ = load_simulator(scene.spec["model"])
    np.testing.assert_allclose(frames[-1][sim.pinned], scene.X_local[sim.pinned], atol=1e-5)


def test_the_engine_on_the_fem_adapter_shows_the_jobs_frames(scene):
    """The frame engine, driven through the fem kind's adapter the way the viewport does
    (asking which frames it steps on the way, reading them, then the frame), shows the
    frames Bake Simulation writes, however the timeline is scrubbed; the rows go through a
    track (TrackRow) or the colliders' FrameReader (Reading) alike."""
    from neural_rom.core import registry
    from neural_rom.core.engine.engine import Engine, Reading, TrackRow

    simjob.simulate_to_pc2(scene.spec)
    frames, _, _ = read_pc2(scene.spec["out"])  # scene frames 3..9
    track = read_track(scene.spec["inputs"])
    sim, model = load_simulator(scene.spec["model"])
    render_map = read_render_map(scene.spec, len(sim.rest_positions()))
    adapter = registry.get_kind("fem").adapter_class().for_model(sim, model, render_map)
    engine = Engine(sim, adapter, track.frame0)
    needed = []
    for f in (5, 9, 3, 7, 4, 9):
        now = TrackRow(track, f - track.frame0)
        need = engine.frames_needed(f, now)
        needed.append((need.start, need.stop))
        earlier = [TrackRow(track, g - track.frame0) for g in need]
        np.testing.assert_array_equal(engine.frame(f, now, earlier), frames[f - 3])
    assert needed == [(2, 5), (6, 9), (3, 3), (7, 7), (4, 4), (9, 9)]
    assert len(engine.step_seconds) == 8  # each frame stepped once
    # the viewport's reading of each frame (the sphere's box, the matrices): the same frames
    adapter.reader_for(["sphere"], ["Ball"])
    box = (np.full(3, 0.08), np.zeros(3))

    def reading(f: int) -> Reading:
        k = f - track.frame0
        return Reading(np.stack([scene.mats[k], scene.sphere[k]]), [box], [0.2])

    engine.reset()
    assert engine.frames_needed(5, reading(5)) == range(2, 5)
    shown = engine.frame(5, reading(5), [reading(g) for g in range(2, 5)])
    np.testing.assert_array_equal(shown, frames[2])
    assert len(engine.step_seconds) == 8 + 4


def test_the_gathered_inputs_round_trip_and_build_the_frame(tmp_path):
    n = 3
    track = Track(
        frame0=5,
        object_matrix=np.broadcast_to(rigid(0.3, (1, 2, 3)), (n, 4, 4)),
        collider_kind=np.empty((n, 0), dtype=str),
        collider_radius=np.zeros((n, 0)),
        collider_half_length=np.zeros((n, 0)),
        collider_friction=np.zeros(0),
        collider_transform=np.zeros((n, 0, 4, 4)),
        sliders=np.arange(2.0 * n).reshape(n, 2),
        marker_vertices=np.array([4, 7]),
        marker_positions=np.arange(6.0 * n).reshape(n, 2, 3),
        marker_weights=np.array([1.0, 0.5]),
    )
    back = read_track(write_track(tmp_path / "inputs.npz", track))
    assert back.frame0 == 5 and len(back) == n and back.reference_frame is None
    inp = back.inputs(2, pins_local=np.array([[1.0, 0.0, 0.0]]), ground_z=-0.25)
    np.testing.assert_allclose(inp.pin_targets, [[1 + np.cos(0.3), 2 + np.sin(0.3), 3]])
    np.testing.assert_array_equal(inp.sliders, [4.0, 5.0])
    np.testing.assert_array_equal(inp.markers.positions, [[12, 13, 14], [15, 16, 17]])
    np.testing.assert_array_equal(inp.markers.vertices, [4, 7])
    # no collider of its own: the ground the model was trained with
    (ground,) = inp.colliders
    assert ground.kind == "plane" and ground.transform[2, 3] == -0.25
    with pytest.raises(CacheError, match="cannot be read.*run Bake Simulation again"):
        read_track(tmp_path / "gone.npz")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_frame_reader_gives_a_one_frame_tracks_inputs_to_the_bit(seed):
    """The viewport's one-frame path (FrameReader) and the general one (a Track of the frame,
    as Bake Simulation gathers it) build the same FrameInputs, every float's bits: colliders
    turned, scaled unevenly and sheared, boxes off their origin, the owner's frame rigid, pins
    carried; centred boxes (a primitive's, the reader's own path) with signed zeros in the
    translations; and refuse a collider of zero size alike."""
    from neural_rom.core.errors import NeuralRomError
    from neural_rom.core.kinds.cloth.source import rigid as rigid_part
    from neural_rom.core.physics.colliders import box_colliders

    rng = np.random.default_rng(seed)
    kinds = ["capsule", "sphere", "plane", "capsule"]
    pins = rng.normal(size=(5, 3))
    for reference, plane_radius, ground in ((True, None, None), (False, 0.5, -0.3)):
        reader = FrameReader(kinds, plane_radius=plane_radius, reference_frame=reference)
        for i in range(50):
            mats = np.zeros((1 + len(kinds), 4, 4))
            mats[:, :3, :3] = rng.normal(size=(1 + len(kinds), 3, 3))  # scale and shear
            mats[:, :3, 3] = rng.normal(scale=3.0, size=(1 + len(kinds), 3))
            mats[:, 3, 3] = 1.0
            mats = mats.astype(np.float32).astype(np.float64)  # Blender's matrices
            half = rng.uniform(0.05, 0.5, size=(len(kinds), 3))
            centre = rng.normal(scale=0.2, size=(len(kinds), 3))
            if i % 2:  # centred boxes, some zeros negative, and translations with zeros
                centre[:3] = np.where(rng.uniform(size=(3, 3)) < 0.5, 0.0, -0.0)
                mats[1:, :3, 3][rng.uniform(size=(len(kinds), 3)) < 0.4] = 0.0
                mats[1:, :3, 3][rng.uniform(size=(len(kinds), 3)) < 0.2] = -0.0
            fast = reader.inputs(
                mats,
                list(zip(half, centre)),
                rng.uniform(size=4),
                pins_local=None if reference else pins,
                ground_z=ground,
            )
            friction = np.array([c.friction for c in fast.colliders])
            kind, radius, half_length, transform = box_colliders(
                kinds, half, centre, mats[None, 1:]
            )
            if plane_radius is not None:
                radius[kind == "plane"] = plane_radius
            track = Track(
                0,
                mats[None, 0],
                kind,
                radius,
                half_length,
                friction,
                transform,
                reference_frame=rigid_part(mats[None, 0]) if reference else None,
            )
            slow = track.inputs(0, pins_local=None if reference else pins, ground_z=ground)
            for a, b in zip(fast.colliders, slow.colliders, strict=True):
                assert a.to_dict() == b.to_dict()
                assert a.transform.tobytes() == b.transform.tobytes()
            for name in ("reference_frame", "pin_targets"):
                a, b = getattr(fast, name), getattr(slow, name)
                assert (a is None and b is None) or a.tobytes() == b.tobytes()
    # no collider: the ground the model learnt; a collider of zero size: refused by name
    empty = FrameReader([]).inputs(np.eye(4)[None], [], ground_z=-0.25)
    assert [(c.kind, c.transform[2, 3]) for c in empty.colliders] == [("plane", -0.25)]
    flat = FrameReader(["sphere"], ["Ball"])
    with pytest.raises(NeuralRomError, match="'Ball' has zero size; scale it up"):
        flat.inputs(
            np.stack([np.eye(4), np.diag([0.0, 0.0, 0.0, 1.0])]), [(np.ones(3), np.zeros(3))]
        )


def test_a_cancel_or_a_failure_leaves_the_previous_cache(scene, tmp_path):
    out = scene.spec["out"]
    (tmp_path / "out").mkdir()
    write_pc2(out, np.ones((2, 4, 3)), start_frame=7)
    before = open(out, "rb").read()
    asked = []

    def cancel_at_the_fourth_frame():
        asked.append(1)
        return len(asked) >= 4

    with pytest.raises(JobCancelled, match="cancelled at frame 5: bar_reduced.pc2 was not"):
        simjob.simulate_to_pc2(scene.spec, should_cancel=cancel_at_the_fourth_frame)
    assert open(out, "rb").read() == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bar_reduced.pc2"]
    # a model of another mesh: refused with what to do, the cache as it was
    spec = {**scene.spec, "expect_mesh_hash": "0" * 16}
    with pytest.raises(CacheError, match="cannot drive it: .*trained for another mesh"):
        simjob.simulate_to_pc2(spec)
    spec = {**scene.spec, "frame_end": scene.n + 1}
    with pytest.raises(Exception, match=r"Frames 3..10 are not in the gathered inputs \(1..9\)"):
        simjob.simulate_to_pc2(spec)
    assert open(out, "rb").read() == before


def test_the_worker_simulates_with_progress_cancels_and_fails_with_a_message(scene, tmp_path):
    # runs to the end in its own process: per-frame progress with an ETA, numpy only
    job = jobs.Job.start(scene.spec, PY, tmp_path / "logs")
    events = []
    assert job.wait(timeout=120, on_event=events.append) == jobs.DONE, job.message
    progress = [e for e in events if e["event"] == "progress"]
    assert [e["done"] for e in progress] == list(range(1, 9))
    assert progress[-1]["fraction"] == 1.0 and progress[-1]["eta_s"] == 0.0
    assert progress[-1]["message"] == "simulated frame 8/8"
    assert job.heavy_modules == []  # never torch, never bpy
    frames, start, _ = read_pc2(scene.spec["out"])
    np.testing.assert_allclose(frames, stepped_by_hand(scene, 3).astype(np.float32), atol=1e-12)
    before = open(scene.spec["out"], "rb").read()

    # a long run cancelled mid-way: the previous cache is kept, nothing half-written
    n = 4000
    long = Track(
        frame0=1,
        object_matrix=np.broadcast_to(scene.mats[0], (n, 4, 4)),
        collider_kind=np.empty((n, 0), dtype=str),
        collider_radius=np.zeros((n, 0)),
        collider_half_length=np.zeros((n, 0)),
        collider_friction=np.zeros(0),
        collider_transform=np.zeros((n, 0, 4, 4)),
    )
    spec = {
        **scene.spec,
        "inputs": str(write_track(tmp_path / "long" / "inputs.npz", long)),
        "frame_start": 1,
        "frame_end": n,
    }
    job = jobs.Job.start(spec, PY, tmp_path / "logs")
    deadline = time.monotonic() + 60
    while job.done_units < 3:
        job.poll()
        assert job.state == jobs.RUNNING and time.monotonic() < deadline, job.message
        time.sleep(0.01)
    job.cancel()
    assert job.wait(timeout=60) == jobs.CANCELLED, job.message
    assert job.result == {"path": scene.spec["out"], "written": False, "cancelled": True}
    assert open(scene.spec["out"], "rb").read() == before
    assert not list((tmp_path / "out").glob("*.partial"))

    # a model file that is not a model: a user error saying what to do, not a crash
    bad = tmp_path / "bad.nrmodel"
    bad.write_bytes(b"not a model")
    job = jobs.Job.start({**scene.spec, "model": str(bad)}, PY, tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.FAILED
    assert not job.crashed and "The model of 'Bar' cannot drive it" in job.message
    assert str(job.log_path) in job.message
    assert open(scene.spec["out"], "rb").read() == before


# ----------------------------------------------------------------------------- compare


@pytest.fixture
def compared(tmp_path):
    """A pinned bar's bake of random pokes and a 6-mode model of it."""
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (6, 2, 2))
    spec = bk.BakeSpec(
        material=MATERIAL.to_dict(),
        scenario={"kind": "random_pokes", "count": 2, "strength": 1.0, "duration": 0.3},
        frames=8,
        pinned=np.flatnonzero(X[:, 0] < 1e-9).tolist(),
        damping=(0.5, 0.0),
        seed=3,
        variants=1,
    )
    path = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, tmp_path / "bakes", "b")[0]
    cache = BakeCache.open(path)
    settings = bk.BakeSpec.from_dict(cache.meta["spec"]).sim_settings()
    model = linear_model(tmp_path, X, T, settings=settings, pinned=np.array(spec.pinned))
    tets = tmp_path / "tets.npz"
    write_tetmesh(tets, TetMesh(X, T, len(X)))
    job = {
        "kind": "compare",
        "name": "Bar",
        "model": str(model),
        "expect_mesh_hash": cache.mesh_hash,
        "tets": str(tets),
        "embedding": "",
        "bake": str(path),
        "bake_name": "b_v000",
        "bake_mesh_hash": cache.mesh_hash,
        "out": str(tmp_path / "compare" / "b_v000.npz"),
        "key": '["the add-on\'s key"]',
    }
    return SimpleNamespace(spec=job, cache=cache)


def test_the_compare_job_writes_the_replay_and_its_errors(compared):
    cache = compared.cache
    calls = []
    result = comparejob.compare_with_bake(compared.spec, progress=lambda d, t: calls.append(d))
    sim, _ = load_simulator(compared.spec["model"])
    _, driver = bk.setup_scenario(cache.X, cache.T, bk.BakeSpec.from_dict(cache.meta["spec"]))
    P = replay_bake(sim, cache, driver)
    full = np.asarray(cache.channel("positions"))
    r = comparejob.read_result(result["path"])
    assert r["key"] == compared.spec["key"] and calls == list(range(1, cache.n_frames))
    np.testing.assert_array_equal(r["reduced"], P.astype(np.float32))
    np.testing.assert_array_equal(r["full"], full.astype(np.float32))
    err = np.linalg.norm(P - full, axis=-1)
    np.testing.assert_allclose(r["errors"], err, rtol=1e-6)
    assert r["stats"]["max"] == pytest.approx(err.max(), rel=1e-12) == result["max"]
    assert r["stats"]["mean"] == pytest.approx(err.mean(), rel=1e-12)
    np.testing.assert_allclose(r["stats"]["per_frame_max"], err.max(axis=1), rtol=1e-12)
    assert r["stats"]["frames"] == result["frames"] == cache.n_frames and err.max() > 1e-6


def test_a_cancelled_or_refused_comparison_keeps_the_previous_result(compared):
    comparejob.compare_with_bake(compared.spec)
    out = compared.spec["out"]
    before = open(out, "rb").read()
    asked = []
    with pytest.raises(JobCancelled):
        comparejob.compare_with_bake(
            {**compared.spec, "key": "new"}, should_cancel=lambda: asked.append(1) or len(asked) > 3
        )
    with pytest.raises(CacheError, match="at another placement than its model was trained on"):
        other = {**compared.spec, "expect_mesh_hash": None, "key": "new"}
        X, T = np.asarray(compared.cache.X) + [0.0, 0.0, 1.0], np.asarray(compared.cache.T)
        other["model"] = str(linear_model(compared.cache.path.parent.parent, X, T, name="o"))
        comparejob.compare_with_bake(other)
    assert open(out, "rb").read() == before
    # through the worker: a user error with its message, the result as it was
    logs = compared.cache.path.parent.parent / "logs"
    job = jobs.Job.start({**compared.spec, "bake": out + ".gone"}, PY, logs)
    assert job.wait(timeout=60) == jobs.FAILED and not job.crashed
    assert "Bake 'b_v000' cannot be used (no bake at" in job.message and "re-bake" in job.message
    job = jobs.Job.start({**compared.spec, "key": "worker"}, PY, logs)
    assert job.wait(timeout=60) == jobs.DONE, job.message
    assert job.result["frames"] == compared.cache.n_frames
    assert comparejob.read_result(out)["key"] == "worker"
