"""Reduced model against full space: the one bake replay (core.compare), the per-vertex
errors and their summary; in Blender, Compare with Bake (replayed in a worker job; ghost
object playing the bake, error attributes per frame, clear, reload from the result file, out
of date after a new model) and its refusals (the worker's as the failed job's message). The
job without Blender: tests/test_simjob.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from neural_rom.core import bake as bk
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.engine.replay import error_stats, replay_bake, vertex_errors
from neural_rom.core.errors import JobCancelled, SimulationError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.methods.linear import LinearSimulation
from neural_rom.core.physics import fem
from neural_rom.core.physics.fem import Material
from neural_rom.core.reduced.subspace import mass_weighted_pod

from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)
from .test_addon_train import bake_in_process, ball, mesh_positions, select_only, trained_ball

MATERIAL = Material(youngs_modulus=1e5, poisson_ratio=0.4, density=1000.0)

# ----------------------------------------------------------------------------- core


def _bake(tmp, scenario, *, pinned=True, frames=10, damping=(0.5, 0.0), gravity=(0, 0, -9.81)):
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (6, 2, 2))
    spec = bk.BakeSpec(
        material=MATERIAL.to_dict(),
        scenario=scenario,
        frames=frames,
        gravity=gravity,
        pinned=np.flatnonzero(X[:, 0] < 1e-9).tolist() if pinned else [],
        damping=damping,
        seed=3,
        variants=1,
    )
    path = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, tmp, "b")[0]
    cache = BakeCache.open(path)
    # the variant's own spec (its seed is derived) and the inputs it recorded
    _, driver = bk.replay_scenario(cache)
    return cache, driver


def _full_basis(cache, pinned):
    """An M-orthonormal basis of every free DOF: the reduced model IS the full space."""
    mass = np.asarray(fem.mass_matrix(cache.X, cache.T, MATERIAL.density, lumped=True))
    n = len(cache.X)
    free = np.setdiff1d(np.arange(n), pinned)
    rows = (3 * free[:, None] + np.arange(3)).ravel()
    U = np.zeros((3 * n, len(rows)))
    U[rows, np.arange(len(rows))] = 1.0 / np.sqrt(np.repeat(mass, 3)[rows])
    return U


def _reduced(cache, driver, U):
    return LinearSimulation(
        cache.X,
        cache.T,
        MATERIAL,
        U,
        bk.BakeSpec.from_dict(cache.meta["spec"]).sim_settings(),
        pinned=driver.ctx.pinned,
        contact=(np.zeros(0, np.int64), np.zeros(0)),
    )


POKES = {"kind": "random_pokes", "count": 2, "strength": 1.0, "duration": 0.3}


def test_a_replay_steps_the_inputs_the_bake_recorded_not_regenerated_ones(tmp_path):
    """A bake made before a change of the scenario generator (here: its recorded spec says
    another seed, so the pokes, the collider's path and the start regenerate elsewhere) is
    replayed with what it recorded: the full-space simulation of replay_scenario retraces the
    bake to Newton's tolerance; the regenerated scenario would not."""
    pokes = bk.default_scenario("random_pokes")
    pokes.update(count=2, duration=0.1)
    sphere = bk.default_scenario("keyframed_colliders")
    scenario = {"kind": "composite", "parts": [pokes, sphere]}
    cache, _ = _bake(tmp_path, scenario, frames=8)
    cache.meta["spec"]["seed"] = int(cache.meta["spec"]["seed"]) + 1  # "another generator"
    _, regenerated = bk.setup_scenario(cache.X, cache.T, bk.BakeSpec.from_dict(cache.meta["spec"]))
    sim, driver = bk.replay_scenario(cache)
    recorded = cache.channel("forces")
    assert np.abs(regenerated.forces[: cache.n_frames] - recorded).max() > 1.0  # N: differs
    np.testing.assert_array_equal(driver.forces[: cache.n_frames], recorded)
    np.testing.assert_array_equal(
        np.stack([driver.collider_matrices(f) for f in range(cache.n_frames)]),
        cache.channel("colliders"),
    )
    full = cache.channel("positions")
    sim.reset(driver.x0, driver.v0)
    sim.forces = driver.forces[0].copy()
    sim.pin_targets = driver.pin_targets[0].copy()
    sim.colliders = driver.colliders(0)
    assert sim.kappa == cache.meta["contact_stiffness"]
    diag = float(np.linalg.norm(np.ptp(np.asarray(cache.X), axis=0)))
    for f in range(1, cache.n_frames):
        sim.step(driver.inputs(f))
        assert np.abs(sim.x - full[f]).max() < 1e-4 * diag, f


def test_a_bake_recording_other_colliders_than_its_scenario_is_refused(tmp_path):
    cache, _ = _bake(tmp_path, bk.default_scenario("keyframed_colliders"), frames=3)
    cache.meta["spec"]["scenario"] = bk.default_scenario("random_pokes")
    with pytest.raises(bk.CacheError, match="records 1 collider"):
        bk.replay_scenario(cache)


def test_replay_equals_stepping_by_hand(tmp_path):
    cache, driver = _bake(tmp_path, POKES)
    full = np.asarray(cache.channel("positions"))
    pinned = driver.ctx.pinned
    sub = mass_weighted_pod(full - cache.X, driver.ctx.mass, pinned, k=4, X=cache.X)
    sim = _reduced(cache, driver, sub.U)
    times: list[float] = []
    P = replay_bake(sim, cache, driver, step_seconds=times)
    assert P.shape == (cache.n_frames, len(cache.X), 3) and len(times) == cache.n_frames - 1

    by_hand = _reduced(cache, driver, sub.U)
    by_hand.reset(q=sub.encode(driver.x0), qdot=np.zeros(sub.k))  # pokes start at rest
    by_hand.f_ext = by_hand.project_forces(driver.forces[0])
    ref = [by_hand.positions()]
    for f in range(1, cache.n_frames):
        by_hand.step(FrameInputs(forces=driver.forces[f], colliders=driver.colliders(f)))
        ref.append(by_hand.positions())
    np.testing.assert_allclose(P, np.stack(ref), rtol=0, atol=1e-9)
    # a 4-mode model moves, but is not the bake
    e = error_stats(vertex_errors(P, full))
    assert 0 < e["max"] < 0.5 * np.abs(full - cache.X).max()


@pytest.mark.parametrize(
    "scenario, pinned, gravity",
    [
        (POKES, True, (0, 0, -9.81)),  # pokes, gravity, damping, pins
        # moved and spinning start, no pins: the initial state must be projected exactly
        (
            {"kind": "gravity_drop", "height": 0.2, "random_rotation": True, "spin": 3.0},
            False,
            (0, 0, 0),
        ),
    ],
)
def test_a_full_space_basis_replays_the_bake_exactly(tmp_path, scenario, pinned, gravity):
    """The reduced step with U spanning every free DOF and every element is the full step:
    comparing the bake with its own replay gives zero error."""
    cache, driver = _bake(tmp_path, scenario, pinned=pinned, frames=6, gravity=gravity)
    full = np.asarray(cache.channel("positions"))
    assert np.abs(full - cache.X).max() > 0.02  # something happens
    sim = _reduced(cache, driver, _full_basis(cache, driver.ctx.pinned))
    P = replay_bake(sim, cache, driver)
    st = error_stats(vertex_errors(P, full))
    # equal up to the Newton tolerance of the two solvers (newton_tol on the residual)
    assert st["max"] < 1e-5 * np.abs(full - cache.X).max(), st["per_frame_max"]
    assert np.abs(driver.x0 - cache.X).max() > 0 or pinned  # the drop starts moved


def test_initial_state_is_the_mass_weighted_projection(tmp_path):
    cache, driver = _bake(tmp_path, POKES, frames=4)
    full = np.asarray(cache.channel("positions"))
    sub = mass_weighted_pod(full - cache.X, driver.ctx.mass, driver.ctx.pinned, k=3, X=cache.X)
    sim = _reduced(cache, driver, sub.U)
    q = np.array([0.01, -0.02, 0.005])
    v = (sub.U @ np.array([0.3, 0.1, -0.2])).reshape(-1, 3)
    sim.start_from(sub.decode(q), v)
    np.testing.assert_allclose(sim.q, q, atol=1e-12)
    np.testing.assert_allclose(sim.qdot, [0.3, 0.1, -0.2], atol=1e-12)
    # a position off the subspace lands on its closest subspace point: q = U^T M (x - X)
    x = full[-1]
    sim.start_from(x, np.zeros_like(x))
    np.testing.assert_allclose(sim.q, sub.encode(x), atol=1e-12)


def test_vertex_errors_and_stats_by_hand():
    rng = np.random.default_rng(0)
    full = rng.normal(size=(3, 5, 3))
    st = error_stats(vertex_errors(full, full.copy()))  # a bake against itself
    assert st["max"] == st["mean"] == st["rms"] == 0.0 and st["frames"] == 3
    shifted = full + np.array([3.0, 4.0, 0.0])  # |(3, 4, 0)| = 5 everywhere
    shifted[2, 1] = full[2, 1] + [0.0, 0.0, 13.0]
    e = vertex_errors(shifted, full)
    assert e.shape == (3, 5)
    np.testing.assert_allclose(e[:2], 5.0)
    st = error_stats(e)
    assert st["max"] == pytest.approx(13.0)
    assert st["mean"] == pytest.approx((14 * 5 + 13) / 15)
    assert st["rms"] == pytest.approx(np.sqrt((14 * 25 + 169) / 15))
    np.testing.assert_allclose(st["per_frame_max"], [5, 5, 13])
    np.testing.assert_allclose(st["per_frame_mean"], [5, 5, (4 * 5 + 13) / 5])
    with pytest.raises(ValueError, match=r"both be \(F, r, 3\)"):
        vertex_errors(full[:, :4], full)
    assert error_stats(np.zeros((0, 5)))["max"] == 0.0


def test_replay_refuses_a_model_that_does_not_fit(tmp_path):
    cache, driver = _bake(tmp_path, POKES, frames=4)
    U = _full_basis(cache, driver.ctx.pinned)
    sim = _reduced(cache, driver, U)
    sim.settings.dt *= 2
    with pytest.raises(SimulationError, match="s per frame but the bake was made at"):
        replay_bake(sim, cache, driver)
    sim = _reduced(cache, driver, U)
    with pytest.raises(JobCancelled):
        replay_bake(sim, cache, driver, cancel=lambda: True)
    X2, T2 = grid_tetmesh((0.4, 0.1, 0.1), (4, 2, 2))
    other = LinearSimulation(X2, T2, MATERIAL, np.zeros((3 * len(X2), 1)))
    with pytest.raises(SimulationError, match="vertices but the bake has"):
        replay_bake(other, cache, driver)


# ----------------------------------------------------------------------------- Blender


def _by_hand(bpy, obj, rec):
    """Reduced and full render positions (world) of every bake frame, stepped by hand."""
    from neural_rom.addon.kinds.fem.bake import RenderMap
    from neural_rom.addon.kinds.fem.tets import load_tets, render_world
    from neural_rom.core.registry import load_simulator

    rm = RenderMap(obj, rec)
    cache = rm.cache
    sim, _ = load_simulator(bpy.path.abspath(obj.neural_rom.model.path))
    _, driver = bk.setup_scenario(cache.X, cache.T, bk.BakeSpec.from_dict(cache.meta["spec"]))
    assert np.abs(driver.x0 - sim.X).max() == 0  # random pokes start at rest
    tets = load_tets(obj)
    red = [render_world(tets, sim.positions())]
    for f in range(1, cache.n_frames):
        sim.step(FrameInputs(forces=driver.forces[f], colliders=driver.colliders(f)))
        red.append(render_world(tets, sim.positions()))
    return rm, np.stack(red), np.stack([rm.world(k) for k in range(cache.n_frames)])


def _attr(obj, name):
    a = obj.data.attributes[name]
    out = np.empty(len(obj.data.vertices), dtype=np.float32)
    a.data.foreach_get("value", out)
    return out


def test_compare_bake_ghost_errors_clear_and_reload(addon, blend_file):
    import os

    from neural_rom.addon import jobs, simulate
    from neural_rom.addon.compare import bake as compare
    from neural_rom.addon.io import mesh as bm

    from .test_addon_ui import draw_all, panels, texts

    bpy = addon.bpy
    scene = bpy.context.scene
    obj = trained_ball(bpy)
    rest = mesh_positions(obj)
    rec = obj.neural_rom.active_bake_record()
    rm, red, full = _by_hand(bpy, obj, rec)
    f0 = rec.frame_start  # rec is gone once the file is reopened
    err = np.linalg.norm(red - full, axis=-1)
    assert err[1:].max() > 1e-5  # the 4-mode model is not the bake

    assert bpy.ops.neural_rom.compare_bake() == {"FINISHED"}  # a worker, run to the end here
    assert jobs.last_job("Ball").kind == "compare" and jobs.last_job("Ball").status == "done"
    ghost = bpy.data.objects["Ball (full space)"]
    assert ghost.parent == obj and ghost.display_type == "WIRE" and ghost.location.x > 0.9
    info = obj[compare.PROP]
    result_file = bpy.path.abspath(info["result"])
    assert result_file == str(compare.result_path(obj, rec)) and os.path.isfile(result_file)
    assert info["max_error"] == pytest.approx(err.max(), rel=1e-9)
    assert info["mean_error"] == pytest.approx(err.mean(), rel=1e-9)
    assert info["frames"] == rec.frames == len(err)
    # the closest shapes (the model's PCA projection of each bake frame), on the render mesh
    from neural_rom.addon.kinds.fem.tets import load_tets, render_world
    from neural_rom.core.registry import load_simulator

    sim, _ = load_simulator(bpy.path.abspath(obj.neural_rom.model.path))
    x_full = np.asarray(rm.cache.channel("positions"))
    shapes = np.stack([render_world(load_tets(obj), sim.closest_shape(x)) for x in x_full])
    closest = np.linalg.norm(shapes - full, axis=-1).max()
    assert info["closest_max_error"] == pytest.approx(closest, rel=1e-6)
    assert 0 < closest < err.max()  # 4 modes reach the bake's shapes better than they replay it
    M = bm.matrix(obj)
    for k in (3, 0, rec.frames - 1):
        scene.frame_set(f0 + k)
        np.testing.assert_allclose(mesh_positions(ghost), rm.local(k, M), atol=1e-6)
        np.testing.assert_allclose(mesh_positions(obj), bm.to_local(red[k], M), atol=1e-6)
        np.testing.assert_allclose(_attr(obj, "nrom_error"), err[k], atol=1e-6)
        colors = np.empty(4 * len(rest), dtype=np.float32)
        obj.data.color_attributes["nrom_error_color"].data.foreach_get("color", colors)
        expect = compare.error_colors(err[k], err.max())
        np.testing.assert_allclose(colors.reshape(-1, 4), expect, atol=1e-6)
    # the ramp: blue at no error, red at the largest error of all frames
    np.testing.assert_allclose(
        compare.error_colors(np.array([0.0, 2.0, 9.0]), 2.0)[:, :3],
        [[0, 0, 1], [1, 0, 0], [1, 0, 0]],
    )
    assert obj.data.color_attributes.active_color_name == "nrom_error_color"
    log = draw_all(bpy, obj)
    assert "NEURAL_ROM_PT_compare" in panels(log)
    t = texts(log)
    assert "Max error" in t and "Clear Comparison" in t and f"Frame {rec.frames - 1}: max" in t

    # overlaid and transparent: the same ghost, now over the object, in world space the bake
    assert bpy.ops.neural_rom.compare_bake(placement="OVERLAY", display="TRANSPARENT") == {
        "FINISHED"
    }
    assert [o.name for o in bpy.data.objects if o.name.startswith("Ball (full")] == [ghost.name]
    assert (
        ghost.display_type == "SOLID" and ghost.color[3] < 1 and tuple(ghost.location) == (0, 0, 0)
    )
    scene.frame_set(f0 + 2)
    bpy.context.view_layer.update()
    gw = bm.to_world(mesh_positions(ghost), bm.matrix(ghost))
    np.testing.assert_allclose(gw, full[2], atol=1e-5)

    # Simulate takes the object over (and puts the rest shape back when stopped); the
    # comparison comes back after it, and clearing still restores the rest shape
    simulate.start_simulation(obj, scene)
    scene.frame_set(f0 + 3)
    simulate.stop_simulation(obj)
    scene.frame_set(f0 + 4)
    np.testing.assert_allclose(_attr(obj, "nrom_error"), err[4], atol=1e-6)
    np.testing.assert_allclose(mesh_positions(obj), bm.to_local(red[4], M), atol=1e-6)

    # saved and reopened: the replay is gone from memory and is read from its file on a
    # frame change (no replay in Blender's process)
    bpy.ops.wm.save_mainfile()
    bpy.ops.wm.open_mainfile(filepath=str(blend_file))
    assert compare._results == {}
    obj = bpy.data.objects["Ball"]
    bpy.context.scene.frame_set(f0 + 1)
    np.testing.assert_allclose(_attr(obj, "nrom_error"), err[1], atol=1e-6)

    select_only(bpy, obj)
    assert bpy.ops.neural_rom.clear_comparison() == {"FINISHED"}
    assert (
        "Ball (full space)" not in bpy.data.objects and "Ball (full space)" not in bpy.data.meshes
    )
    assert "nrom_error" not in obj.data.attributes
    assert "nrom_error_color" not in obj.data.color_attributes
    assert compare.PROP not in obj.keys()
    np.testing.assert_allclose(mesh_positions(obj), rest, atol=1e-6)
    assert bpy.ops.neural_rom.clear_comparison.poll() is False
    bpy.context.scene.frame_set(f0 + 3)  # nothing drives it any more
    np.testing.assert_allclose(mesh_positions(obj), rest, atol=1e-6)

    # compared again, then the model changes (re-trained): the comparison is out of date,
    # stops and says to compare again rather than showing another model's errors
    assert bpy.ops.neural_rom.compare_bake() == {"FINISHED"}
    assert compare.is_comparing(obj)
    model = bpy.path.abspath(obj.neural_rom.model.path)
    st = os.stat(model)
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    bpy.context.scene.frame_set(f0 + 2)
    message = obj[simulate.FRAME_ERROR]
    assert message.startswith("Comparison of 'Ball' stopped: The comparison of 'Ball' with bake")
    assert "is out of date" in message and "run Compare with Bake again" in message
    assert not compare.is_comparing(obj) and "Ball (full space)" not in bpy.data.objects
    np.testing.assert_allclose(mesh_positions(obj), rest, atol=1e-6)


def test_compare_refuses_foreign_model_stale_bake_and_a_taken_name(addon, blend_file):
    from neural_rom.addon import jobs
    from neural_rom.addon.compare import bake as compare

    bpy = addon.bpy
    scene = bpy.context.scene
    a = trained_ball(bpy)
    b = ball(bpy, name="Other", location=(3.0, 0.0, 1.0), frames=2)
    b.neural_rom.tet_size = 0.25
    b.neural_rom.variants = 1
    select_only(bpy, b)
    assert bpy.ops.neural_rom.tetrahedralize() == {"FINISHED"}
    bake_in_process(b, scene)
    b.neural_rom.model.path = a.neural_rom.model.path  # someone points it at A's model
    rest = mesh_positions(b)

    def untouched(obj, rest):
        assert "Other (full space)" not in bpy.data.objects
        assert "Ball (full space)" not in bpy.data.objects
        assert "nrom_error" not in obj.data.attributes and "nrom_compare" not in obj.keys()
        np.testing.assert_allclose(mesh_positions(obj), rest)

    # the model is loaded in the worker: its refusal is the failed job's message
    with pytest.raises(RuntimeError, match="Compare with Bake of 'Other' failed: The model of "
                       "'Other' cannot drive it: .*trained for another mesh.*re-train"):  # fmt: skip
        bpy.ops.neural_rom.compare_bake()
    assert jobs.last_job("Other").status == "failed"
    untouched(b, rest)
    # a cancelled job wrote nothing and shows nothing
    job = compare.make_compare_job(b, scene)
    assert compare.on_compare_done(b, job, {"cancelled": True, "written": False}) is None
    untouched(b, rest)

    # an object already called like the ghost is not overwritten
    select_only(bpy, a)
    rest_a = mesh_positions(a)
    taken = bpy.data.objects.new("Ball (full space)", None)
    scene.collection.objects.link(taken)
    with pytest.raises(RuntimeError, match="already exists and is not a comparison ghost"):
        bpy.ops.neural_rom.compare_bake()
    bpy.data.objects.remove(taken)
    untouched(a, rest_a)

    # A edited after its bake: the bake no longer belongs to it
    a.data.vertices[0].co.z += 0.05
    rest_a = mesh_positions(a)
    with pytest.raises(RuntimeError, match="edited after bake .* re-bake"):
        bpy.ops.neural_rom.compare_bake()
    untouched(a, rest_a)


def test_closest_shapes_are_projections_and_the_stiffening_hint():
    """closest_shapes of a linear model is the mass-weighted projection (idempotent on
    shapes in the basis); the hint fires only when a rollout is far worse than them."""
    from neural_rom.core.engine.replay import closest_shapes, stiffening_hint
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.methods.linear import LinearSimulation
    from neural_rom.core.physics.fem import Material, mass_matrix

    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    mat = Material(youngs_modulus=5e4, poisson_ratio=0.4, density=1000.0)
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    rng = np.random.default_rng(0)
    U = rng.normal(size=(3 * len(X), 5))
    U.reshape(len(X), 3, 5)[pinned] = 0.0
    sim = LinearSimulation(X, T, mat, U, pinned=pinned)
    inside = X + (U @ rng.normal(size=(5,))).reshape(-1, 3) * 0.01
    np.testing.assert_allclose(closest_shapes(sim, inside[None])[0], inside, atol=1e-12)
    x = inside + 0.01 * rng.normal(size=X.shape) * (X[:, :1] > 0)  # pins stay put
    p = closest_shapes(sim, x[None])[0]
    m3 = np.repeat(mass_matrix(X, T, mat.density, lumped=True), 3)
    # the residual is M-orthogonal to the basis: the closest shape in the mass norm
    np.testing.assert_allclose(U.T @ (m3 * (x - p).ravel()), 0.0, atol=1e-12)
    assert stiffening_hint(
        {"max_error_m": 0.2, "projection_max_error_m": 0.01, "max_error_rel": 0.2}
    ).startswith("The held-out rollout")
    assert (
        stiffening_hint({"max_error_m": 0.02, "projection_max_error_m": 0.01, "max_error_rel": 0.1})
        is None
    )
    assert stiffening_hint({"max_error_m": 0.2, "max_error_rel": 0.2}) is None
