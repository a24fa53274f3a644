"""Subspace Neural Physics on Blender's own cloth (issue 11): a pinned sheet hit by a
keyframed sphere, baked by Blender's cloth solver (the PyPI bpy, in the cloth bake job),
trained on whole bakes and measured on a held-out bake of 1,000 frames replayed through the
runtime as Simulate drives it (colliders and the reference frame per frame).

The sheet is the issue's: 50 x 50 = 2,500 vertices, 10 training bakes of 321 frames (the
cloth bake job, two processes) and the held-out bake of 1,001 frames baked beside the
training (one thread); k = 24, 40 epochs of 32 windows, an ensemble of 2 networks
(``ensemble``, exported as one wider network). Measured (held-out error over the initial
model alone's; the cloth moves 42 mm on average, the initial model errs 49-52 mm, the PCA
floor 5.8-5.9 mm): training seeds 0 / 1 / 2 0.521 / 0.524 / 0.578 (0.52x in this test's own
run: 25.6 mm, 4.3x the floor, twice the same). The module took 164 s (bakes 83 s, training
75 s beside the held-out bake; load 2.5), and 274 s with the machine loaded by other
sessions (load 2-5: bakes 160 s, training 108 s).

How it got there (training/snp's docstring has the rest). Blender's own chaos floor on this
scene: the held-out bake re-baked with the ball's keys moved by 0.1 mm differs from it by
4.1 mm on average, at cloth quality 6 by 6.3 mm (0.08x and 0.12x the initial model's
error), so the bound is the network's generalization, not the data's noise. The former
configuration, 20 bakes of 161 frames and one network, gave 0.58-0.69x by seed, epochs and
bakes (0.577 / 0.627 / 0.662 with these seeds), and the levers tried on it stayed inside that
spread or did worse: weight averaging 0.606, noise on every fed-back state 0.599 (0.05:
2.62), cosine decay 0.788, 10 layers 0.831, 80 epochs 0.638, window 64 0.618, an ensemble of
3 0.673 / 0.553 / 0.597. What moved it was the shape of the data: the same frames baked as 10
bakes of 320 (a bake starts at rest, its first contact 7-98 frames in, where the held-out
replay is mostly cloth disturbed for hundreds of frames) 0.591 / 0.544, and with the ensemble of 2 above; 3 networks 0.570 /
0.510 / 0.488 at 1.5-2x the training time; 5 bakes of 640 frames 0.89 / 3.5 (too few paths).
The former 12 x 12 sheet (20 bakes of 161 frames, one network) gave 0.52x.

This held-out bake (seed 1000) is one of the easier paths: two more unseen 1,000-frame bakes
(seeds 1001, 1002; the same models, training seeds 0 / 1) gave 0.732 / 0.772 and 0.751 /
0.690 with this configuration, against 0.964 / 0.764 and 0.848 / 0.869 for 20 bakes of 161
frames and one network (3 networks: 0.861 and 0.637 with seed 1). Over the three paths
and two seeds the mean ratio is 0.665 against 0.775: the configuration helps everywhere,
but the issue's 0.6x holds on this path, not on every path. What would take it further is
more long bakes: 20 of 320 frames (twice this test's bakes and about 2.5x its training,
over this file's budget of 4 minutes) gave 23.4, 28.4 and 28.8 mm on the three paths with
2 networks (this configuration: 25.6, 31.3 and 37.8 mm).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
import pytest
from neural_rom.core import jobs, registry
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.errors import SimulationError
from neural_rom.core.methods.snp import SNPSimulation
from neural_rom.core.physics.colliders import Collider
from neural_rom.core.reduced.pose import IDENTITY

from .cloth_scenes import build_sheet, replay

SHEET = 50  # vertices per side: 2,500, the size
# 10 bakes of 320 frames rather than 20 of 160 (the same frames to bake): a bake starts
# at rest, and the held-out 1,000 frames are mostly cloth disturbed for hundreds of frames
# (see the docstring)
TRAIN_BAKES, TRAIN_FRAMES, HELD_FRAMES = 10, 320, 1000
# the ball pokes the sheet from the front (the sheet hangs in y = 0, z in [0.5, 1.5] m)
BOX = [[-0.6, -0.45, 0.4], [0.6, 0.05, 1.6]]
# The linear normal model against recomputed normals (degrees), on the held-out bake's
# 1,000 frames: measured mean 1.28, 95th percentile 4.44 (max 134); the trainer's measure on
# held-out projections 1.29 / 4.87 (the 12 x 12 sheet: 0.69 / 2.32, 0.55 / 1.88; the former
# 20 short bakes' single network on this sheet: 2.06 / 6.69). Bounds about 1.5x those.
NORMAL_MEAN_DEG, NORMAL_P95_DEG = 2.0, 7.0
SETTINGS = {"k": 24, "epochs": 40, "batch_size": 32, "validation_fraction": 0.05, "seed": 0}
SETTINGS |= {"ensemble": 2, "time_budget": 600}


def cloth_bake(tmp, blend, name, frames, variants, seed, processes=0):
    """Start the cloth bake job (``processes`` 0: one per core); ``finish`` waits for it."""
    spec = {
        "kind": "cloth_bake",
        "blend": str(blend),
        "object": "Sheet",
        "out_dir": str(tmp),
        "name": name,
        "frames": frames,
        "variants": variants,
        "seed": seed,
        "owner": "-",
        "collider_box": BOX,
        "durable": False,  # a test's bakes need not survive a power cut
        "processes": processes,
    }
    return jobs.Job.start(spec, sys.executable, tmp / "logs", check_python=False)


def finish(job):
    job.wait(timeout=600)
    assert job.state == jobs.DONE, job.message
    return job.result["paths"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("snp_cloth")
    blend = build_sheet(tmp / "sheet.blend", n=SHEET)
    t0 = time.perf_counter()
    train = finish(cloth_bake(tmp, blend, "train", TRAIN_FRAMES, TRAIN_BAKES, 0))
    t_bake = time.perf_counter() - t0
    # the held-out bake (one long variant, one process) on the core training (one thread)
    # leaves free
    held_job = cloth_bake(tmp, blend, "held", HELD_FRAMES, 1, 1000)
    t0 = time.perf_counter()
    result = registry.get("snp").trainer_function()(
        train, tmp / "cloth.nrmodel", SETTINGS, checkpoint_dir=None
    )
    t_train = time.perf_counter() - t0
    held = finish(held_job)[0]
    t_held = time.perf_counter() - t0
    print(
        f"\n{SHEET * SHEET} vertices: Blender cloth bakes {TRAIN_BAKES} x {TRAIN_FRAMES + 1} "
        f"frames in {t_bake:.1f} s; training {t_train:.1f} s ({result['epochs_trained']} "
        f"epochs, network {result['network']}), the held-out bake of {HELD_FRAMES + 1} frames "
        f"beside it done at {t_held:.1f} s"
    )
    return result, BakeCache.open(held)


def test_cloth_heldout_rollout_beats_the_initial_model(trained):
    result, held = trained
    model = registry.load_simulator(result["model"])[0]
    assert isinstance(model, SNPSimulation) and model.p.reference_rest is not None
    initial = SNPSimulation(replace(model.p, net=None), model.settings)
    x = np.asarray(held.channel("positions"))
    t0 = time.perf_counter()
    y = replay(model, held)
    step_ms = 1e3 * (time.perf_counter() - t0) / held.n_frames
    y0 = replay(initial, held)
    # the PCA floor: each frame's projection on the basis
    p = model.p
    proj = p.mean + (((x - p.mean).reshape(len(x), -1) @ p.U) @ p.U.T).reshape(x.shape)

    def err(a):
        return float(np.linalg.norm(a[1:] - x[1:], axis=-1).mean())

    e, e0, floor = err(y), err(y0), err(proj)
    swing = float(np.linalg.norm(x - held.X, axis=-1).mean())
    print(
        f"held-out {held.n_frames} frames (cloth moves {1e3 * swing:.1f} mm from rest on "
        f"average): model {1e3 * e:.2f} mm, initial model alone {1e3 * e0:.2f} mm "
        f"({e / e0:.2f}x), PCA floor {1e3 * floor:.2f} mm ({e / floor:.1f}x the floor); "
        f"replay {step_ms:.3f} ms/frame"
    )
    model.push_out = False
    e_raw = err(replay(model, held))
    print(f"without the render-time push-out (sec. 6.4): {1e3 * e_raw:.2f} mm")
    diag = float(np.linalg.norm(held.X.max(0) - held.X.min(0)))
    assert np.all(np.isfinite(y)) and np.abs(y - x).max() < diag  # bounded over 1,000 frames
    assert e <= e_raw
    # The goal is 0.6x: measured 0.521x (training seed 1: 0.524x, seed 2: 0.578x).
    # Blender's cloth in contact has not always been bit-reproducible from run to run (the
    # ratio moved by about 0.02 on the 12 x 12 sheet); the bound holds with that margin and
    # more. The floor: measured 4.3x (4.4-4.9x by seed).
    assert e <= 0.6 * e0
    assert e <= 8.0 * floor


def angles_deg(a, b):
    """Angles (degrees) between unit vectors a and b (..., 3)."""
    return np.degrees(np.arccos(np.clip(np.einsum("...i,...i->...", a, b), -1.0, 1.0)))


def test_linear_normal_model_looks_like_recomputed_normals(trained):
    """The paper's linear normal model (sec. 6.3) on the held-out bake as Simulate plays it:
    its normals against the normals recomputed from the positions shown (no push-out, which
    leaves normals alone), frame by frame; and the trainer's own measure on projections."""
    result, held = trained
    model = registry.load_simulator(result["model"])[0]
    assert model.normal_model == "linear" and model.p.normal_basis.dtype == np.float32
    model.push_out = False
    C = np.asarray(held.channel("colliders"))
    R = np.asarray(held.channel("reference_frame"))
    shapes = held.meta["colliders"]
    model.reset()
    angles = []
    for f in range(1, held.n_frames):
        cols = [
            Collider(c["kind"], c["radius"], c["half_length"], C[f, j])
            for j, c in enumerate(shapes)
        ]
        model.step(FrameInputs(colliders=cols, reference_frame=R[f]))
        lin = model.normals()
        assert lin.dtype == np.float32 and np.allclose(np.linalg.norm(lin, axis=1), 1, atol=1e-5)
        angles.append(angles_deg(lin, model.normals(model.positions())))
    a = np.concatenate(angles)
    print(
        f"linear normal model vs recomputed on {held.n_frames - 1} held-out frames: mean "
        f"{a.mean():.2f}, 95th percentile {np.percentile(a, 95):.2f}, max {a.max():.1f} "
        f"degrees; the trainer's measure on held-out projections: mean "
        f"{result['normal_angle_mean_deg']:.2f}, 95th percentile "
        f"{result['normal_angle_p95_deg']:.2f} degrees"
    )
    assert a.mean() < NORMAL_MEAN_DEG and np.percentile(a, 95) < NORMAL_P95_DEG
    assert result["normal_angle_mean_deg"] < NORMAL_MEAN_DEG
    model.normal_model = "recomputed"
    np.testing.assert_array_equal(model.normals(), model.normals(model.positions()))


def test_cloth_model_uses_the_collider_in_contact(trained):
    result, held = trained
    model = registry.load_simulator(result["model"])[0]
    x = np.asarray(held.channel("positions"))
    C = np.asarray(held.channel("colliders"))
    r = held.meta["colliders"][0]["radius"]
    contact = np.linalg.norm(x - C[:, :1, :3, 3], axis=-1).min(1) < r + 0.03
    y = replay(model, held)
    y_far = replay(model, held, colliders=False)
    change = np.linalg.norm(y - y_far, axis=-1).max(1)
    first = int(np.flatnonzero(contact)[0])
    print(
        f"{contact.sum()} contact frames; zeroing the collider input moves the cloth by up to "
        f"{1e3 * change[contact].max():.1f} mm in contact (the first contact frame {first}: "
        f"{1e3 * change[first]:.2f} mm)"
    )
    assert contact.sum() > 20 and change[contact].max() > 0.05


# ------------------------------------------------------------------ runtime pieces, no bpy


def test_push_out_moves_only_the_vertices_inside_a_collider_to_its_surface():
    from neural_rom.core.methods.snp import push_out

    M = np.eye(4)
    M[:3, 3] = [0.1, 0.2, 0.3]
    ball = Collider("sphere", 0.5, 0.0, M)
    rng = np.random.default_rng(0)
    x = M[:3, 3] + rng.normal(size=(200, 3)) * 0.5
    d = np.linalg.norm(x - M[:3, 3], axis=1)
    y = push_out(x, [ball])
    dy = np.linalg.norm(y - M[:3, 3], axis=1)
    inside = d < 0.5
    print(f"{inside.sum()} of 200 points inside, moved to radius {dy[inside].min():.12f}..")
    assert inside.sum() > 20 and np.allclose(dy[inside], 0.5, atol=1e-12)
    assert np.array_equal(y[~inside], x[~inside])  # outside: untouched
    # along the radius: the direction from the centre is kept
    u, v = x[inside] - M[:3, 3], y[inside] - M[:3, 3]
    assert np.allclose(np.cross(u, v), 0, atol=1e-12)
    clear = x[~inside]
    assert push_out(clear, [ball]) is clear  # nothing inside: no copy
    ground = Collider("plane", 0.0, 0.0, np.eye(4))
    y = push_out(np.array([[0.0, 0.0, -0.2], [1.0, 2.0, 0.1]]), [ground], margin=0.01)
    assert np.allclose(y, [[0.0, 0.0, 0.01], [1.0, 2.0, 0.1]])


def test_the_push_out_and_the_driven_frame_fast_paths_keep_their_bits(monkeypatch):
    """Two per-frame shortcuts change no bit: the push-out's test that every vertex is clear
    of a sphere or capsule (then no signed distance is taken) against the push-out without
    it, over turned, unevenly scaled colliders, margins 0 and 1 cm and points that straddle
    the surfaces; and one driver matrix's frame on Python floats against the array path a
    batch takes (scaled, sheared, Blender's float32 matrices)."""
    from neural_rom.core.methods.snp import sweep as snp
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(4)
    moved = 0
    for trial in range(300):
        kind = ("sphere", "capsule")[trial % 2]
        M = np.eye(4)
        M[:3, :3] = Rotation.random(random_state=trial).as_matrix() @ np.diag(
            rng.uniform(0.5, 2.0, 3) if trial % 3 else np.ones(3)
        )
        M[:3, 3] = rng.normal(size=3)
        c = Collider(kind, rng.uniform(0.05, 0.3), rng.uniform(0.0, 0.3), M)
        x = M[:3, 3] + rng.normal(scale=rng.uniform(0.1, 1.0), size=(int(rng.integers(1, 200)), 3))
        margin = (0.0, 0.01)[trial % 4 == 0]
        fast = snp.push_out(x, [c], margin)
        with monkeypatch.context() as m:
            m.setattr(snp, "_clear_of", lambda *args: False)  # every reach: signed distances
            slow = snp.push_out(x, [c], margin)
        assert fast.tobytes() == slow.tobytes() and (fast is x) == (slow is x)
        moved += fast is not x
    assert 50 < moved < 250  # both cases, many times
    # beyond a capsule's ends, on its axis: near the line, clear of the segment
    c = Collider("capsule", 0.1, 0.2, np.eye(4))
    ends = np.array([[0.0, 0.0, 0.35], [0.0, 0.0, -0.4], [0.3, 0.0, 0.0]])
    assert snp._clear_of(ends, c, 0.0) and snp.push_out(ends, [c]) is ends
    assert not snp._clear_of(ends, c, 0.06)  # 5 cm from the end cap
    assert not snp._clear_of(ends + [0.0, 0.0, -0.1], c, 0.0)  # 25 cm up the axis: inside
    # the axis line's test (two unit vectors across the axis) for axes along +z, -z (its
    # basis' two branches), x and turned ones: a ring round the middle 0.1% beyond the
    # reach is clear of the line, 0.1% within it is not
    theta = np.linspace(0.0, 2.0 * np.pi, 37)
    turns = [np.eye(3), np.diag([1.0, -1.0, -1.0]), np.array([[0, 0, 1], [0, 1, 0], [-1, 0, 0.0]])]
    for R in turns + [Rotation.random(random_state=s).as_matrix() for s in range(6)]:
        M = np.eye(4)
        M[:3, :3], M[:3, 3] = R, rng.normal(size=3)
        c = Collider("capsule", 0.1, 0.2, M)
        ring = np.stack([np.cos(theta), np.sin(theta), np.zeros_like(theta)], axis=1) @ R.T
        for margin in (0.0, 0.01):
            reach = 0.1 + margin
            assert snp._clear_of(M[:3, 3] + 1.001 * reach * ring, c, margin)
            assert not snp._clear_of(M[:3, 3] + 0.999 * reach * ring, c, margin)

    sim = SNPSimulation(driven_params(rng))
    for trial in range(300):
        M = np.eye(4)
        M[:3, :3] = Rotation.random(random_state=trial).as_matrix() * rng.uniform(0.3, 3.0, 3)
        M[:3, :3] += rng.normal(scale=0.1, size=(3, 3)) * (trial % 2)
        M[:3, 3] = rng.normal(scale=3.0, size=3)
        M = M.astype(np.float32).astype(np.float64)
        sim._driven.clear()
        (one,) = sim.driven_poses([M], [IDENTITY])
        sim._driven.clear()
        two = sim.driven_poses([M, M + 1.0], [IDENTITY, IDENTITY])[0]  # the array path
        assert one.R.tobytes() == two.R.tobytes() and one.c.tobytes() == two.c.tobytes()


def test_recomputed_normals_of_a_sphere_are_radial():
    from neural_rom.core.kinds.cloth.source import triangulate
    from neural_rom.core.methods.snp import VertexNormals

    # a UV sphere: rings of quads, fanned into triangles
    rings, seg = 24, 48
    th = np.linspace(0, np.pi, rings + 1)[1:-1]
    ph = np.linspace(0, 2 * np.pi, seg, endpoint=False)
    V = np.concatenate(
        [
            [[0, 0, 1]],
            np.stack(
                [
                    np.outer(np.sin(th), np.cos(ph)),
                    np.outer(np.sin(th), np.sin(ph)),
                    np.repeat(np.cos(th)[:, None], seg, 1),
                ],
                axis=-1,
            ).reshape(-1, 3),
            [[0, 0, -1]],
        ]
    )
    idx = 1 + np.arange((rings - 1) * seg).reshape(rings - 1, seg)
    quads = np.stack(
        [idx[:-1], idx[1:], np.roll(idx[1:], -1, 1), np.roll(idx[:-1], -1, 1)], axis=-1
    ).reshape(-1, 4)
    caps_top = np.stack([np.zeros(seg, int), idx[0], np.roll(idx[0], -1)], 1)
    caps_bot = np.stack([np.full(seg, len(V) - 1), np.roll(idx[-1], -1), idx[-1]], 1)
    fv = np.concatenate([quads.ravel(), caps_top.ravel(), caps_bot.ravel()])
    fs = np.concatenate([np.full(len(quads), 4), np.full(2 * seg, 3)])
    tri = triangulate(fv, fs)
    assert len(tri) == 2 * len(quads) + 2 * seg
    N = VertexNormals(tri, len(V))(2.0 * V + [1.0, 2.0, 3.0])  # scaled and moved
    err = np.degrees(np.arccos(np.clip(np.einsum("ij,ij->i", N, V), -1, 1))).max()
    print(f"largest angle between recomputed and exact normals: {err:.3f} degrees")
    assert np.allclose(np.linalg.norm(N, axis=1), 1) and err < 2.0


def driven_params(rng, n=5, u=3):
    """A small driven model (no network, z held: alpha 1, beta 0) resting 1.5 m up."""
    from neural_rom.core.methods.snp import ExternalEncoder, SNPParameters

    X = rng.normal(size=(n, 3))
    U = np.linalg.qr(rng.normal(size=(3 * n, u)))[0]
    e = 15
    enc = ExternalEncoder(
        np.full(e, -1e9),
        np.full(e, 1e9),
        np.zeros(e),
        np.ones(e),
        np.zeros(0, np.int64),
        np.zeros((0, 0)),
    )
    M0 = np.eye(4)
    M0[:3, 3] = [0.0, 0.0, 1.5]
    return SNPParameters(
        X=X,
        mean=X,
        U=U,
        alpha=np.ones(u),
        beta=np.zeros(u),
        z_lo=-np.ones(u),
        z_hi=np.ones(u),
        scale=1.0,
        encoder=enc,
        net=None,
        sizes=np.zeros((0, 2)),
        kinds=[],
        pinned=np.zeros(0, np.int64),
        reference_rest=M0,
    )


def test_driven_instances_in_one_batch_move_as_single_simulators():
    from neural_rom.core.methods.snp import SNPBatch
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(2)
    p = driven_params(rng)
    B, frames = 4, 12
    batch = SNPBatch(p, B)
    singles = [SNPSimulation(p) for _ in range(B)]
    worst = 0.0
    for f in range(frames):
        inputs = []
        for i in range(B):
            M = np.eye(4)
            M[:3, :3] = Rotation.from_rotvec(rng.normal(size=3) * 0.3).as_matrix()
            M[:3, 3] = rng.normal(size=3)
            inputs.append(None if (i + f) % 5 == 0 else FrameInputs(reference_frame=M))
        batch.step(inputs)
        for s, inp in zip(singles, inputs):
            s.step(inp)
        worst = max(
            worst,
            max(
                float(np.abs(batch.positions()[i] - s.positions()).max())
                for i, s in enumerate(singles)
            ),
        )
    print(f"{B} driven instances over {frames} frames: batch vs single {worst:.2g} m")
    assert worst <= 1e-12


def test_a_driven_model_moves_rigidly_with_its_reference_frame():
    rng = np.random.default_rng(1)
    p = driven_params(rng)
    X, M0 = p.X, p.reference_rest
    sim = SNPSimulation(p)
    from scipy.spatial.transform import Rotation

    M = np.eye(4)
    M[:3, :3] = Rotation.from_rotvec([0.3, -0.2, 0.5]).as_matrix() * 2.0  # a scale: ignored
    M[:3, 3] = [1.0, -2.0, 3.0]
    sim.step(FrameInputs(reference_frame=M))
    R = M[:3, :3] / 2.0
    rel_R, rel_c = R, M[:3, 3] - R @ M0[:3, 3]
    np.testing.assert_allclose(sim.positions(), X @ rel_R.T + rel_c, atol=1e-12)
    sim.step(FrameInputs())  # no transform this frame: the frame stays
    np.testing.assert_allclose(sim.positions(), X @ rel_R.T + rel_c, atol=1e-12)
    sim.step(FrameInputs(reference_frame=M0))  # back where it rests: the world, exactly
    assert sim.poses[0].is_identity and np.array_equal(sim.positions(), X)
    with pytest.raises(SimulationError, match="finite 4x4"):
        sim.step(FrameInputs(reference_frame=np.full((4, 4), np.nan)))


def test_normal_model_fit_is_the_least_squares_map_and_round_trips(tmp_path):
    """fit_normal_model equals a direct least-squares solve of the frames' normals on
    [1, z] (bake by bake accumulation is the same normal equations), and the model applies
    it: a batch's normals equal single simulators', through a saved and loaded file."""
    from neural_rom.core.kinds.cloth.source import triangulate
    from neural_rom.core.methods.snp import SNPBatch, VertexNormals, linear_normals
    from neural_rom.training.snp import fit_normal_model, mean_centred_pca

    rng = np.random.default_rng(3)
    side = 6
    g = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2)
    X = np.concatenate([0.1 * g, np.zeros((len(g), 1))], axis=1)
    idx = np.arange(side * side).reshape(side, side)
    quads = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], -1).reshape(-1)
    tri = triangulate(quads, np.full(len(quads) // 4, 4))
    # three "bakes" of a sheet waving: sums of smooth bumps with random amplitudes
    t = np.arange(40)[:, None]
    bumps = [np.sin(X[:, 0] * k) * np.cos(X[:, 1] * (k + 1)) for k in range(1, 6)]
    seqs = []
    for _ in range(3):
        a = rng.normal(size=(5,)) * 0.05
        w = rng.uniform(0.1, 0.5, size=5)
        h = (np.sin(t * w) * a) @ np.array(bumps)  # (40, n)
        seqs.append(X + h[..., None] * [0.0, 0.0, 1.0] + 0.001 * rng.normal(size=(40, len(X), 3)))
    mean, U, _ = mean_centred_pca(np.concatenate(seqs), k=8)
    n_mu, Q = fit_normal_model(seqs, mean, U, tri)
    vn = VertexNormals(tri, len(X))
    Z = np.concatenate([(y - mean).reshape(len(y), -1) @ U for y in seqs])
    N = np.concatenate([np.stack([vn(f) for f in y]).reshape(len(y), -1) for y in seqs])
    A = np.concatenate([np.ones((len(Z), 1)), Z], axis=1)
    sol = np.linalg.lstsq(A, N, rcond=None)[0]
    err = max(np.abs(n_mu - sol[0]).max(), np.abs(Q - sol[1:].T).max())
    fitted = linear_normals(n_mu.astype(np.float32), Q.astype(np.float32), Z, [IDENTITY] * len(Z))
    ang = angles_deg(fitted, N.reshape(len(Z), -1, 3) / 1.0)
    print(
        f"normal model vs direct least squares: {err:.2e}; mean angle to the true normals "
        f"{ang.mean():.2f} degrees"
    )
    assert err < 1e-9 and ang.mean() < 2.0  # measured 0.78 degrees

    p = driven_params(rng, n=len(X), u=8)
    p = replace(p, X=X, mean=mean, U=U, triangles=tri, normal_mean=n_mu, normal_basis=Q)
    from neural_rom.core.methods.snp import SNPParameters

    arrays, meta = p.to_arrays()
    q = SNPParameters.from_arrays(arrays, meta)
    assert np.array_equal(q.normal_basis, p.normal_basis) and q.normal_basis.dtype == np.float32
    batch = SNPBatch(q, 3)
    batch.z1 = Z[[0, 50, 100]]
    single = SNPSimulation(q)
    for b in range(3):
        single.z1 = Z[[0, 50, 100][b]]
        assert np.abs(batch.normals()[b] - single.normals()).max() < 1e-6
    with pytest.raises(SimulationError, match="both"):
        replace(p, normal_basis=None)


# ------------------------------------------------------- training levers (issue 11), no bpy


def toy_trainer(tmp_path, **settings):
    """A NetTrainer on 3 random sequences of 40 frames (u = 4, v = 3), seeded."""
    import torch
    from neural_rom.training.run import Checkpoints
    from neural_rom.training.snp import NetTrainer

    rng = np.random.default_rng(5)
    Z = [np.cumsum(rng.normal(size=(40, 4)), 0) * 0.01 for _ in range(3)]
    W = [rng.normal(size=(40, 3)) for _ in range(3)]
    s = registry.get("snp").values(dict(window=8, epochs=2, batch_size=16, **settings))
    return NetTrainer(
        s,
        Z,
        W,
        [],
        [],
        np.ones(4),
        np.full(4, 0.9),
        0.02,
        np.full(4, -1.0),
        np.full(4, 1.0),
        1 / 24,
        10,
        torch.device("cpu"),
        Checkpoints(None, "toy"),
        lambda: False,
        lambda event: None,
        lambda done, total, msg: None,
        in_scale=np.array([0.02, 0.01, 0.005, 0.002]),
    )


def test_ensemble_rolls_out_each_member_and_merges_to_their_mean():
    """An Ensemble's members roll out on their own (each feeds back its own prediction), and
    its merged network (block-diagonal) computes the mean of the members' outputs: what the
    runtime evaluates, exported as one MLP."""
    import torch
    from neural_rom.training.nets import build_mlp
    from neural_rom.training.snp import Ensemble, rollout

    torch.manual_seed(0)
    u, v, K, B, S = 4, 3, 3, 5, 9
    nets = [build_mlp([2 * u + v, 7, 7, u], "relu").double() for _ in range(K)]
    ens = Ensemble(nets).double()
    g = torch.Generator().manual_seed(1)
    z0, z1 = (
        torch.randn(B, u, generator=g, dtype=torch.float64),
        torch.randn(B, u, generator=g, dtype=torch.float64),
    )
    w = torch.randn(B, S, v, generator=g, dtype=torch.float64)
    args = (
        torch.full((u,), 1.0, dtype=torch.float64),
        torch.full((u,), 0.8, dtype=torch.float64),
        0.5,
    )
    lim = (torch.full((u,), -9.0, dtype=torch.float64), torch.full((u,), 9.0, dtype=torch.float64))
    with torch.no_grad():
        joint = rollout(ens, z0.expand(K, B, u), z1.expand(K, B, u), w, *args, *lim)
        alone = torch.stack([rollout(n, z0, z1, w, *args, *lim) for n in nets])
        x = torch.randn(B, 2 * u + v, generator=g, dtype=torch.float64)
        merged = ens.merged()(x)
        mean = torch.stack([n(x) for n in nets]).mean(0)
    e1, e2 = float((joint - alone).abs().max()), float((merged - mean).abs().max())
    print(f"ensemble rollout vs members alone {e1:.1e}; merged vs members' mean {e2:.1e}")
    assert joint.shape == (K, B, S, u) and e1 < 1e-12 and e2 < 1e-12
    assert [m.out_features for m in ens.merged() if isinstance(m, torch.nn.Linear)] == [21, 21, u]


def test_rate_decays_per_epoch_after_a_linear_warm_up(tmp_path):
    """The learning rate: ``lr_decay`` an epoch (the paper's), ramped linearly step by step
    over the first ``warmup_epochs`` epochs."""
    steps = 7
    e = toy_trainer(tmp_path, learning_rate=1e-2, lr_decay=0.5)
    assert e.rate(0, 0, steps) == pytest.approx(1e-2) and e.rate(1, 3, steps) == pytest.approx(5e-3)
    w = toy_trainer(tmp_path, learning_rate=1e-2, lr_decay=0.5, warmup_epochs=2)
    rates = [w.rate(ep, k, steps) for ep in range(3) for k in range(steps)]
    assert rates[0] == pytest.approx(1e-2 / 14) and rates[6] == pytest.approx(1e-2 / 2)
    assert rates[13] == pytest.approx(5e-3) and rates[14] == pytest.approx(2.5e-3)
