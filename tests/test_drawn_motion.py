"""FEM bake variants drawn from the user's animation (issue 25, item 1).

A pinned body whose object is keyed to swing: without drawn motion, its variants differ
only by the scenario's random push (a pinned body barely feels it: under 1 mm RMS apart
here); drawn from the swing, each variant is another motion (time warp, stop and start,
a stretch played backwards, amplitude, turn), so the variants are 70-269 mm apart over 30
frames and the one training holds out is a motion no
training variant contains (:func:`core.motion.motion_distance` >= 0.1 from every one).
"""

from __future__ import annotations

import numpy as np
import pytest
from neural_rom.core import bake as B
from neural_rom.core.bake import motion as mo
from neural_rom.core.data.cache import BakeCache, BakeDataset
from neural_rom.core.errors import NeuralRomError
from neural_rom.core.geometry import grid
from neural_rom.core.geometry.tetmesh import TetMesh
from neural_rom.core.physics import fem
from scipy.spatial.transform import Rotation

from .blender_fixtures import addon  # noqa: F401 (pytest fixture)

DT = 1.0 / 24.0
FRAMES = 30
VARIANTS = 3


def _swing(frames: int = 48, degrees: float = 30.0, period: float = 2.0) -> np.ndarray:
    """(frames + 1, 4, 4) a swing about x through the origin, as Blender samples a keyed
    rotation."""
    a = np.radians(degrees) * np.sin(2 * np.pi * np.arange(frames + 1) * DT / period)
    M = np.tile(np.eye(4), (frames + 1, 1, 1))
    M[:, :3, :3] = Rotation.from_euler("x", a[:, None]).as_matrix()
    return M


@pytest.fixture(scope="module")
def hanging_bar(tmp_path_factory):
    """A 1 m rubber bar hanging from its pinned top (144 tets), baked twice, 3 variants of 30
    frames each: pins following the keyed swing as it plays (the scenario's push the only
    difference), and pins drawn from the swing."""
    X, T = grid.grid_tetmesh((0.2, 0.2, 1.0), (2, 2, 6), (-0.1, -0.1, -1.0))
    mesh = TetMesh(X, T)
    pinned = np.where(X[:, 2] > -1e-9)[0]
    track = _swing()
    base = dict(
        material=fem.Material.preset("rubber").to_dict(),
        frames=FRAMES,
        dt=DT,
        pinned=pinned.tolist(),
        seed=5,
        variants=VARIANTS,
    )
    played = np.einsum("fij,pj->fpi", track[: FRAMES + 1, :3, :3], X[pinned])
    motion = {
        "sources": [{"name": "animation", "frames": [1, 49], "track": track.tolist()}],
        "pins": X[pinned].tolist(),
        "perturbation": mo.Perturbation(reverse=0.5).to_dict(),  # as FEM bakes draw
    }
    out = {"mesh": mesh, "pinned": pinned, "motion": motion, "base": base}
    for name, extra in (
        ("played", {"pin_targets": played.tolist()}),
        ("drawn", {"motion": motion}),
    ):
        spec = B.BakeSpec(**base, **extra)
        folder = tmp_path_factory.mktemp(name)
        paths = B.bake_variants(mesh, spec, folder, "bar")
        out[name] = {"spec": spec, "paths": paths, "x": [_positions(p) for p in paths]}
    return out


def _positions(path) -> np.ndarray:
    return np.asarray(BakeCache.open(path).channel("positions"), dtype=np.float64)


def _rms(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum((a - b) ** 2, axis=-1))))


def test_drawn_variants_differ_by_more_than_the_scenarios_push(hanging_bar):
    """Played as animated, the variants differ by the push alone (measured 0.2-0.8 mm RMS
    over the frames); drawn, by their motions (70-269 mm here): at least 20x the push's
    largest difference, and 5 cm."""

    def spread(x):
        return [_rms(x[i], x[j]) for i in range(len(x)) for j in range(i + 1, len(x))]

    played = spread(hanging_bar["played"]["x"])
    drawn = spread(hanging_bar["drawn"]["x"])
    assert min(drawn) > max(20.0 * max(played), 0.05), (played, drawn)


def test_held_out_variant_is_a_motion_no_training_variant_contains(hanging_bar):
    """The bake training holds out (BakeDataset.split, as every trainer splits) is at least
    0.15 (of the motion's RMS body velocity) from every training variant, over time shifts;
    over 20 seeds of 4 variants of 30 frames the closest pair of a seed's variants measured
    0.25-0.60 (0.18-0.75 for a swing twice as fast; 0.12-0.50 without the reversed stretches).
    Checked on the baked variants and on 4 more seeds of 4 variants each."""
    base, motion = hanging_bar["base"], hanging_bar["motion"]
    ds = BakeDataset.open(hanging_bar["drawn"]["paths"])
    train, val = ds.split(0.2, 0)
    assert len(val) == 1
    tracks = [
        np.asarray(BakeCache.open(p).meta["spec"]["motion"]["track"])
        for p in hanging_bar["drawn"]["paths"]
    ]
    for i in train:
        assert mo.motion_distance(tracks[int(val[0])], tracks[int(i)], DT, 1.0) > 0.15
    for seed in (1, 2, 3, 4):
        drawn = [
            np.asarray(mo.draw_pins(motion, FRAMES, DT, seed, k)[1]["track"]) for k in range(4)
        ]
        for i in range(4):
            for j in range(4):
                if i != j:
                    assert mo.motion_distance(drawn[i], drawn[j], DT, 1.0) > 0.15, (seed, i, j)
    assert base["variants"] == VARIANTS


def test_drawn_pins_start_at_rest_and_move_rigidly(hanging_bar):
    """Each variant's pins start where they rest and keep their distances (a rigid motion of
    the swing's frame); the bake records the source and the draws."""
    X = hanging_bar["mesh"].X
    pinned = hanging_bar["pinned"]
    for path in hanging_bar["drawn"]["paths"]:
        cache = BakeCache.open(path)
        targets = np.asarray(cache.channel("pin_targets"))
        np.testing.assert_allclose(targets[0], X[pinned], atol=1e-12)
        d0 = np.linalg.norm(X[pinned][:, None] - X[pinned][None], axis=-1)
        d = np.linalg.norm(targets[:, :, None] - targets[:, None], axis=-1)
        assert np.abs(d - d0).max() < 1e-9
        record = cache.meta["spec"]["motion"]
        assert record["source"] == "animation" and 0.6 <= record["speed"] <= 1.5
        assert "speed" in mo.describe_draws(record)


def test_a_reversed_stretch_plays_the_source_backwards():
    """With a reversal drawn for sure, a steady source (1 m/s along x) goes backwards in the
    middle of the stretch and forwards outside it; without reversals nothing is drawn for
    them (the cloth bake's variants are what they were)."""
    M = np.tile(np.eye(4), (121, 1, 1))
    M[:, 0, 3] = np.arange(121) * DT
    quiet = dict(wobble=0.0, stop=0.0, turn=0.0, stride=(1.0, 1.0), sway=(1.0, 1.0))
    track, draws = mo.perturb(
        M, 60, np.random.default_rng(3), DT, mo.Perturbation(reverse=1.0, **quiet)
    )
    a, b = draws["reverse"]
    vx = np.diff(track[:, 0, 3]) / DT
    mid = (a + b) // 2
    assert vx[mid - 1] < -0.5 * draws["speed"]  # backwards at full speed in the middle
    assert vx[a - 2] > 0 and (b + 1 >= len(vx) or vx[b + 1] > 0)
    assert track[:, 0, 3].min() >= -1e-12  # never before the source's first frame
    plain = mo.perturb(M, 60, np.random.default_rng(3), DT, mo.Perturbation(**quiet))[1]
    again = mo.perturb(M, 60, np.random.default_rng(3), DT, mo.Perturbation(reverse=0, **quiet))
    assert again[1] == plain and plain["reverse"] is None


def test_same_seed_same_bake(hanging_bar, tmp_path):
    """Determinism: variant 1 baked again from the same spec gives the same bits."""
    spec = hanging_bar["drawn"]["spec"]
    again = B.bake(hanging_bar["mesh"], B.variant_spec(spec, 1), tmp_path / "again.nrbake")
    np.testing.assert_array_equal(_positions(again), hanging_bar["drawn"]["x"][1])


def test_two_objects_with_one_seed_draw_different_variants():
    """The object's name is mixed into the seed (:func:`core.motion.name_salt`): one object
    and one seed draw the same bits again; two objects with the same seed and the same
    swing draw different variants (further apart than the 0.15 a held-out variant is from
    the training ones, 0.25-0.60 over 20 seeds); a spec without a salt (baked before it)
    draws by seed and variant alone, as it did."""
    motion = {
        "sources": [{"name": "animation", "frames": [1, 49], "track": _swing().tolist()}],
        "pins": [[0.0, 0.0, 0.0]],
        "perturbation": mo.Perturbation(reverse=0.5).to_dict(),
    }
    assert mo.name_salt("Tentacle") == mo.name_salt("Tentacle") != mo.name_salt("Tentacle.001")
    assert mo.name_salt("Tentacle") == 0xD22CA03B  # the same on every machine and Python

    def track(name, seed, k):
        return np.asarray(
            mo.draw_pins({**motion, "salt": mo.name_salt(name)}, FRAMES, DT, seed, k)[1]["track"]
        )

    for seed in (0, 1, 2):
        for k in range(2):
            np.testing.assert_array_equal(track("Tail", seed, k), track("Tail", seed, k))
            assert (
                mo.motion_distance(track("Tail", seed, k), track("Cape", seed, k), DT, 1.0) > 0.15
            )
    old = np.asarray(mo.draw_pins(motion, FRAMES, DT, 5, 1)[1]["track"])
    rng = np.random.default_rng([5, 1, 1])
    settings = mo.Perturbation(reverse=0.5)
    np.testing.assert_array_equal(old, mo.perturb(_swing(), FRAMES, rng, DT, settings)[0])


def test_the_variants_picture_tells_the_variants_apart():
    """The panel's picture (:func:`core.motion.plot_variants`): one row per variant, its
    curves the variant's turn and travel; the keyed 30-degree swing's turn curve is the
    swing (to 1e-9 degrees); identical variants draw identical rows, drawn ones differ."""
    swing = _swing()
    turn, travel = mo.variant_curves(swing, np.array([1.0, 0, 0]), np.array([0, 0, 1.0]))
    expect = 30.0 * np.sin(2 * np.pi * np.arange(len(swing)) * DT / 2.0)
    np.testing.assert_allclose(turn, expect, atol=1e-9)
    assert np.abs(travel).max() < 1e-12  # it turns in place
    motion = {
        "sources": [{"name": "animation", "frames": [1, 49], "track": swing.tolist()}],
        "pins": [[0.0, 0.0, 0.0]],
        "perturbation": mo.Perturbation(reverse=0.5).to_dict(),
        "salt": mo.name_salt("Bar"),
    }
    tracks = [np.asarray(mo.draw_pins(motion, FRAMES, DT, 3, k)[1]["track"]) for k in range(3)]
    img = mo.plot_variants([*tracks, tracks[0]], width=120, row=30)
    assert img.shape == (4 * 30, 120, 3) and img.min() >= 0 and img.max() <= 1
    rows = [img[30 * i : 30 * (i + 1)] for i in range(4)]
    for r in rows:  # each row draws its turn
        assert np.all(r == mo.PLOT_TURN, axis=2).sum() > 120
    np.testing.assert_array_equal(rows[0], rows[3])
    for i in range(3):
        for j in range(i):
            assert np.any(rows[i] != rows[j])


def test_a_drawn_spec_is_baked_by_variant_and_needs_its_pins():
    base = dict(material=fem.Material.preset("rubber").to_dict(), frames=4, dt=DT)
    motion = {"sources": [{"name": "a", "frames": [1, 3], "track": _swing(3).tolist()}]}
    with pytest.raises(NeuralRomError, match="pick a Pin Group"):
        B.BakeSpec(**base, motion=motion).validate()
    X, T = grid.grid_tetmesh((0.2, 0.2, 0.2), (1, 1, 1))
    spec = B.BakeSpec(**base, pinned=[0], motion={**motion, "pins": [X[0].tolist()]})
    with pytest.raises(NeuralRomError, match="bake_variants"):
        B.setup_scenario(X, T, spec)


# ---------------------------------------------------------------------------- in Blender


def _pinned_cube(bpy, name="Bar"):
    bpy.ops.mesh.primitive_cube_add(size=0.4, location=(0.0, 0.0, 0.0))
    obj = bpy.context.object
    obj.name = name
    group = obj.vertex_groups.new(name="Top")
    group.add([v.index for v in obj.data.vertices if v.co.z > 0], 1.0, "REPLACE")
    obj.neural_rom.role = "DEFORMABLE"
    obj.neural_rom.pin_group = "Top"
    return obj


def _key_swing(target, path, frames=((1, 0.0), (12, 0.5), (24, -0.4), (36, 0.0))):
    for f, a in frames:
        target.rotation_euler = (a, 0.0, 0.0)
        target.keyframe_insert(path, frame=f)


def test_bake_draws_from_the_objects_keys_and_from_a_bones(addon):
    """The source is the object's world frame over its animation: its own keys, or the pose
    of the armature bone it hangs from; the scene's frame is kept."""
    from neural_rom.addon.kinds.fem import bake as bakes

    bpy = addon.bpy
    scene = bpy.context.scene
    scene.frame_start, scene.frame_current = 1, 7
    obj = _pinned_cube(bpy)
    _key_swing(obj, "rotation_euler")
    drawn = bakes.drawn_motion(obj, scene, "auto", 1)
    assert scene.frame_current == 7
    (src,) = drawn["sources"]
    assert src["name"] == "animation" and src["frames"] == [1, 36]
    assert drawn["salt"] == mo.name_salt("Bar")
    scene.frame_set(12)
    np.testing.assert_allclose(src["track"][11], np.array(obj.matrix_world), atol=1e-6)

    bpy.ops.object.armature_add(location=(1.0, 0.0, 0.0))
    rig = bpy.context.object
    other = _pinned_cube(bpy, "Hung")
    other.parent, other.parent_type, other.parent_bone = rig, "BONE", "Bone"
    rig.pose.bones["Bone"].rotation_mode = "XYZ"
    _key_swing(rig.pose.bones["Bone"], "rotation_euler")
    (src,) = bakes.drawn_motion(other, scene, "animation", 1)["sources"]
    track = np.asarray(src["track"])
    scene.frame_set(24)
    M = np.array(other.matrix_world)
    np.testing.assert_allclose(track[23][:3, 3], M[:3, 3], atol=1e-6)
    assert np.abs(track[:, :3, 3] - M[:3, 3]).max() > 0.1  # it moves


def test_bake_motion_refusals_and_the_default_scenario(addon):
    from neural_rom.addon.kinds.fem import bake as bakes

    bpy = addon.bpy
    scene = bpy.context.scene
    still = _pinned_cube(bpy, "Still")
    assert bakes.drawn_motion(still, scene, "auto", 1) is None  # not animated: the scenario
    with pytest.raises(NeuralRomError, match="has no animation to draw"):
        bakes.drawn_motion(still, scene, "animation", 1)
    _key_swing(still, "rotation_euler")
    assert bakes.drawn_motion(still, scene, "scenario", 1) is None
    still.neural_rom.pin_group = ""
    assert bakes.drawn_motion(still, scene, "auto", 1) is None  # no pins: nothing to move
    with pytest.raises(NeuralRomError, match="pick a Pin Group"):
        bakes.drawn_motion(still, scene, "animation", 1)
    with pytest.raises(NeuralRomError, match="use auto, animation, scenario"):
        bakes.drawn_motion(still, scene, "walk", 1)


def test_bake_help_says_what_the_variants_are(addon, capsys):
    from neural_rom.ui import cli

    assert cli.main(["bake", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "each variant's pins are drawn from that animation" in text
    assert "--motion {auto,animation,scenario}" in text
