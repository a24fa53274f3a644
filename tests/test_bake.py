"""Scenarios and bakes: determinism, force bookkeeping, cancel/resume, shards."""

from types import SimpleNamespace

import numpy as np
import pytest
from neural_rom.core import bake as bk
from neural_rom.core.bake.scenarios import (
    ScenarioDriver,
    SceneContext,
    default_scenario,
    validate_scenario,
)
from neural_rom.core.data.cache import BakeCache, BakeDataset
from neural_rom.core.errors import JobCancelled, NeuralRomError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics.fem import Material, mass_matrix
from neural_rom.core.physics.sim import boundary_vertices


@pytest.fixture(scope="module")
def mesh():
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    return SimpleNamespace(X=X, T=T)


def ctx_for(mesh, frames=20, pinned=()):
    mass = mass_matrix(mesh.X, mesh.T, 1000.0, lumped=True)
    return SceneContext(
        X=mesh.X,
        surface=boundary_vertices(mesh.T),
        mass=mass,
        pinned=np.asarray(pinned, dtype=np.int64),
        frames=frames,
        dt=1 / 24,
        gravity=np.array([0, 0, -9.81]),
        colliders=[],
    )


def spec(mesh, **kw):
    pinned = np.flatnonzero(mesh.X[:, 0] < 1e-9).tolist()
    base = dict(
        material=Material(youngs_modulus=2e5, poisson_ratio=0.3, density=1000.0).to_dict(),
        scenario=default_scenario("random_pokes"),
        frames=6,
        pinned=pinned,
        seed=7,
    )
    base.update(kw)
    return bk.BakeSpec(**base)


def test_scenario_is_deterministic_by_seed(mesh):
    for kind in ("random_pokes", "keyframed_colliders", "gravity_drop"):
        sc = default_scenario(kind)
        if kind == "gravity_drop":
            sc.update(random_rotation=True, spin=1.0, height=0.1)
        a = ScenarioDriver(sc, ctx_for(mesh), seed=3)
        b = ScenarioDriver(sc, ctx_for(mesh), seed=3)
        c = ScenarioDriver(sc, ctx_for(mesh), seed=4)
        for f in (0, 5, 20):
            np.testing.assert_array_equal(a.inputs(f).forces, b.inputs(f).forces)
            np.testing.assert_array_equal(a.collider_matrices(f), b.collider_matrices(f))
        np.testing.assert_array_equal(a.x0, b.x0)
        differs = (
            not np.array_equal(a.forces, c.forces)
            or not np.array_equal(a.x0, c.x0)
            or not np.array_equal(a.collider_matrices(10), c.collider_matrices(10))
        )
        assert differs, kind


def test_random_pokes_total_force_is_the_requested_strength(mesh):
    ctx = ctx_for(mesh, frames=48)
    sc = validate_scenario({"kind": "random_pokes", "count": 1, "strength": 3.0, "duration": 0.5})
    d = ScenarioDriver(sc, ctx, seed=0)
    totals = np.linalg.norm(d.forces.sum(axis=1), axis=1)
    weight = ctx.mass.sum() * 9.81
    assert abs(totals.max() - 3.0 * weight) < 0.02 * 3.0 * weight  # sin^2 pulse peaks near 1
    assert totals[0] == 0.0 or totals[0] < totals.max()
    touched = np.flatnonzero(np.abs(d.forces).sum(axis=(0, 2)) > 0)
    assert set(touched) <= set(ctx.surface)


def test_replay_forces_preserve_total_force(mesh, tmp_path):
    coarse_X = np.array([[0.0, 0.05, 0.05], [0.4, 0.05, 0.05]])
    rng = np.random.default_rng(0)
    forces = rng.normal(size=(21, 2, 3))
    np.savez(tmp_path / "rec.npz", X=coarse_X, forces=forces)
    d = ScenarioDriver(
        {"kind": "replay_forces", "source": str(tmp_path / "rec.npz")}, ctx_for(mesh), seed=0
    )
    np.testing.assert_allclose(d.forces.sum(axis=1), forces.sum(axis=1), atol=1e-12)


def test_composite_sums_parts(mesh):
    p1 = {"kind": "random_pokes", "count": 2}
    comp = ScenarioDriver(
        {"kind": "composite", "parts": [p1, {"kind": "keyframed_colliders"}]}, ctx_for(mesh), 5
    )
    assert len(comp.collider_dicts) == 1
    assert np.abs(comp.forces).sum() > 0


def test_unknown_scenario_parameter_is_named():
    with pytest.raises(NeuralRomError, match="strenght"):
        validate_scenario({"kind": "random_pokes", "strenght": 2})
    with pytest.raises(NeuralRomError, match="gravity_drop"):
        default_scenario("poke")


def test_same_seed_same_bake(mesh, tmp_path):
    a = BakeCache.open(bk.bake(mesh, spec(mesh), tmp_path / "a.nrbake"))
    b = BakeCache.open(bk.bake(mesh, spec(mesh), tmp_path / "b.nrbake"))
    c = BakeCache.open(bk.bake(mesh, spec(mesh, seed=8), tmp_path / "c.nrbake"))
    assert a.n_frames == 7 and a.status == "complete"
    np.testing.assert_array_equal(a.channel("positions"), b.channel("positions"))
    assert not np.array_equal(a.channel("positions"), c.channel("positions"))
    assert np.all(np.isfinite(a.channel("positions")))
    # something actually moved, pins did not
    pinned = a.extra("pinned")
    assert np.abs(a.channel("positions")[-1] - a.X).max() > 1e-4
    np.testing.assert_allclose(a.channel("positions")[-1][pinned], a.X[pinned])


def test_cancel_keeps_prefix_and_resume_matches_uninterrupted(mesh, tmp_path):
    full = BakeCache.open(bk.bake(mesh, spec(mesh), tmp_path / "full.nrbake"))
    calls = {"n": 0}

    def cancel_after_three():
        calls["n"] += 1
        return calls["n"] > 3

    path = tmp_path / "cut.nrbake"
    with pytest.raises(JobCancelled):
        bk.bake(mesh, spec(mesh), path, should_cancel=cancel_after_three)
    cut = BakeCache.open(path)
    assert cut.status == "cancelled"
    assert cut.n_frames == 4
    np.testing.assert_array_equal(cut.channel("positions"), full.channel("positions")[:4])
    bk.bake(mesh, spec(mesh), path, resume=True)
    done = BakeCache.open(path)
    assert done.n_frames == full.n_frames and done.status == "complete"
    for name in full.channels:  # bit for bit: the resumed frames are the uninterrupted ones
        np.testing.assert_array_equal(done.channel(name), full.channel(name), err_msg=name)


def test_resume_with_other_settings_is_refused(mesh, tmp_path):
    path = tmp_path / "x.nrbake"
    with pytest.raises(JobCancelled):
        bk.bake(mesh, spec(mesh), path, should_cancel=lambda: True)
    with pytest.raises(NeuralRomError, match="other settings"):
        bk.bake(mesh, spec(mesh, seed=99), path, resume=True)


def test_shards_cover_every_variant_once(mesh, tmp_path):
    s = spec(mesh, variants=3, frames=2)
    p0 = bk.bake_variants(mesh, s, tmp_path, "poke", shard=(0, 2))
    p1 = bk.bake_variants(mesh, s, tmp_path, "poke", shard=(1, 2))
    names = sorted(p.name for p in p0 + p1)
    assert names == ["poke_v000.nrbake", "poke_v001.nrbake", "poke_v002.nrbake"]
    ds = BakeDataset.open(str(tmp_path / "poke_v*.nrbake"))
    assert len(ds) == 3 and ds.n_frames == 9
    with pytest.raises(NeuralRomError, match="Shard"):
        bk.bake_variants(mesh, s, tmp_path, "poke", shard=(2, 2))


def test_bake_records_colliders_and_spec_round_trip(mesh, tmp_path):
    s = spec(mesh, scenario=default_scenario("keyframed_colliders"), frames=3)
    assert bk.BakeSpec.from_dict(s.to_dict()) == s
    c = BakeCache.open(bk.bake(mesh, s, tmp_path / "k.nrbake"))
    mats = c.channel("colliders")
    assert mats.shape == (4, 1, 4, 4)
    assert c.meta["scenario"]["kind"] == "keyframed_colliders"


def test_bad_pins_are_refused_before_anything_is_written(mesh, tmp_path):
    s = spec(mesh, pinned=[0, 10_000])
    with pytest.raises(NeuralRomError, match="Pinned vertex"):
        bk.bake(mesh, s, tmp_path / "bad.nrbake")
    assert not (tmp_path / "bad.nrbake").exists()


def test_presses_sink_a_sphere_into_the_surface_at_a_bounded_speed():
    """keyframed_colliders' presses (the soft block of tests/test_snp.py): the sphere comes in
    along the surface normal, sinks at most ``press`` diagonals into the rest shape (it goes
    around the object between presses, never through it), never moves faster than ``speed``,
    and stays in contact for many frames at a time."""
    X, T = grid_tetmesh((0.2, 0.2, 0.3), (3, 3, 4))
    diag = float(np.linalg.norm(X.max(0) - X.min(0)))
    frames, press, speed = 96, 0.15, 1.0
    ctx = SceneContext(
        X=X,
        surface=boundary_vertices(T),
        mass=mass_matrix(X, T, 1000.0, lumped=True),
        pinned=np.flatnonzero(X[:, 2] < 1e-9),
        frames=frames,
        dt=1 / 24,
        gravity=np.array([0, 0, -9.81]),
        colliders=[],
        T=T,
    )
    sc = validate_scenario(
        {"kind": "keyframed_colliders", "keys": 3, "press": press, "speed": speed, "hold": 0.2}
    )
    depths, fastest, runs = [], 0.0, []
    for seed in range(12):
        d = ScenarioDriver(sc, ctx, seed)
        c = np.stack([d.collider_matrices(f)[0, :3, 3] for f in range(frames + 1)])
        r = d.colliders(0)[0].radius
        depth = r - np.linalg.norm(X[None] - c[:, None], axis=2).min(axis=1)  # (F+1,)
        depths.append(depth.max())
        fastest = max(fastest, float(np.linalg.norm(np.diff(c, axis=0), axis=1).max()) * 24)
        touching = np.concatenate([[0], (depth > 0).astype(int), [0]])
        edges = np.flatnonzero(np.diff(touching))
        runs += list(edges[1::2] - edges[::2])
    depths = np.array(depths) / diag
    print(
        f"12 bakes of 3 presses: deepest {depths.min():.3f}-{depths.max():.3f} diagonals "
        f"(press {press}), fastest {fastest:.3f} m/s (speed {speed}), {len(runs)} contacts of "
        f"{np.mean(runs):.1f} frames on average (median {np.median(runs):.0f})"
    )
    assert depths.max() <= press + 1e-9 and depths.min() >= 0.5 * press - 1e-9
    assert fastest <= speed + 1e-9
    assert np.median(runs) >= 8
