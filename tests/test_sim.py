"""Backward Euler and quasistatics: analytic solutions, conservation laws, robustness."""

import numpy as np
import pytest
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.errors import SimulationError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics.colliders import Collider, contact_energy
from neural_rom.core.physics.fem import Material, deformation_gradient
from neural_rom.core.physics.sim import SimSettings, Simulation, boundary_vertices


def bar(div=(8, 2, 2), size=(1.0, 0.125, 0.125)):
    return grid_tetmesh(size, div)


def soft(E=1e5, nu=0.3, rho=1000.0, model="stable_neohookean"):
    return Material(youngs_modulus=E, poisson_ratio=nu, density=rho, model=model)


def test_free_fall_matches_discrete_backward_euler():
    X, T = bar((2, 1, 1))
    s = SimSettings(dt=0.01, gravity=(0, 0, -9.81), newton_tol=1e-10)
    sim = Simulation(X, T, soft(), s)
    N = 10
    for _ in range(N):
        sim.step()
    # v_{k+1} = v_k + h g, x_{k+1} = x_k + h v_{k+1}  =>  z_N = z_0 - g h^2 N (N+1) / 2
    expected = X[:, 2] - 9.81 * 0.01**2 * N * (N + 1) / 2
    np.testing.assert_allclose(sim.x[:, 2], expected, atol=1e-9)
    np.testing.assert_allclose(sim.x[:, :2], X[:, :2], atol=1e-9)
    np.testing.assert_allclose(sim.v[:, 2], -9.81 * 0.01 * N, atol=1e-7)


def test_linear_momentum_is_conserved_without_gravity_pins_or_damping():
    X, T = bar((4, 2, 2))
    sim = Simulation(X, T, soft(), SimSettings(dt=0.01, gravity=(0, 0, 0), newton_tol=1e-10))
    rng = np.random.default_rng(1)
    sim.reset(v=rng.normal(scale=0.5, size=X.shape))  # a non-rigid velocity field
    p0 = sim.momentum()
    for _ in range(20):
        sim.step()
    np.testing.assert_allclose(sim.momentum(), p0, atol=1e-8 * (1 + np.abs(p0).max()))
    assert sim.fem.energy(sim.x) > 0  # it really deformed


def test_damping_makes_energy_decay_monotonically_and_faster():
    X, T = bar((6, 2, 2))
    rng = np.random.default_rng(2)
    v0 = rng.normal(scale=0.3, size=X.shape)

    def run(alpha, beta):
        s = SimSettings(dt=1 / 60, gravity=(0, 0, 0), damping_alpha=alpha, damping_beta=beta)
        sim = Simulation(X, T, soft(), s)
        sim.reset(v=v0)
        energies = [sim.kinetic_energy() + sim.fem.energy(sim.x)]
        for _ in range(30):
            sim.step()
            energies.append(sim.kinetic_energy() + sim.fem.energy(sim.x))
        return np.array(energies)

    plain = run(0.0, 0.0)
    damped = run(2.0, 0.01)
    assert np.all(np.diff(damped) <= 1e-12 * damped[0])
    assert damped[-1] < 0.5 * plain[-1]


def test_cantilever_tip_deflection_converges_to_beam_theory():
    L, a = 1.0, 0.1
    E, rho, g = 1e8, 1000.0, 9.81  # tip deflection 1.5% of L: the linear-theory regime
    q = rho * g * a * a
    I = a**4 / 12
    analytic = q * L**4 / (8 * E * I)  # Euler-Bernoulli cantilever under its own weight
    errors = []
    for k in (1, 2, 4):
        X, T = grid_tetmesh((L, a, a), (10 * k, k, k))
        pinned = np.flatnonzero(X[:, 0] < 1e-9)
        mat = Material(youngs_modulus=E, poisson_ratio=0.0, density=rho)
        sim = Simulation(X, T, mat, SimSettings(gravity=(0, 0, -g), newton_tol=1e-9), pinned=pinned)
        sim.solve_quasistatic()
        tip = X[:, 0] > L - 1e-9
        deflection = -np.mean(sim.x[tip, 2] - X[tip, 2])
        errors.append(abs(deflection - analytic) / analytic)
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.2, errors  # linear tets are stiff in bending; refinement closes the gap


def test_pins_follow_their_targets_exactly():
    X, T = bar((4, 1, 1))
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    sim = Simulation(X, T, soft(), SimSettings(dt=0.02), pinned=pinned)
    target = X[pinned] + np.array([0.0, 0.05, 0.02])
    sim.step(FrameInputs(pin_targets=target))
    np.testing.assert_allclose(sim.x[pinned], target, atol=1e-12)
    assert np.all(np.isfinite(sim.x))


def test_substeps_equal_smaller_frames():
    X, T = bar((4, 1, 1))
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    a = Simulation(X, T, soft(), SimSettings(dt=0.04, substeps=2, newton_tol=1e-11), pinned=pinned)
    b = Simulation(X, T, soft(), SimSettings(dt=0.02, substeps=1, newton_tol=1e-11), pinned=pinned)
    a.step()
    b.step()
    b.step()
    np.testing.assert_allclose(a.x, b.x, atol=1e-9)


def test_inverted_mesh_recovers():
    X, T = bar((4, 2, 2))
    sim = Simulation(X, T, soft(), SimSettings(dt=1 / 30, gravity=(0, 0, 0), damping_alpha=4.0))
    x_inv = X.copy()
    x_inv[:, 2] = -x_inv[:, 2]  # a mirror image: every tet inverted
    sim.reset(x=x_inv)
    J = np.linalg.det(deformation_gradient(sim.x, T, sim.fem.Dm_inv))
    assert np.all(J < 0)
    for _ in range(60):
        sim.step()
    J = np.linalg.det(deformation_gradient(sim.x, T, sim.fem.Dm_inv))
    assert np.all(J > 0.5), J.min()
    assert sim.fem.energy(sim.x) < 1e-3 * sim.fem.energy(x_inv)


def test_resting_on_ground_plane():
    X, T = bar((4, 1, 1), size=(0.4, 0.1, 0.1))
    X = X + np.array([0, 0, 0.05])
    ground = Collider("plane")
    s = SimSettings(dt=1 / 48, damping_alpha=5.0)
    sim = Simulation(X, T, soft(E=1e6), s, colliders=[ground])
    for _ in range(60):
        sim.step()
    L = sim.length_scale
    assert sim.x[:, 2].min() > -1e-3 * L  # the penalty lets the contact sink a little
    assert sim.x[:, 2].min() < 1e-3 * L  # it did land
    assert np.linalg.norm(sim.v, axis=1).max() < 0.05


def test_sphere_and_capsule_distance_gradients_match_finite_differences():
    rng = np.random.default_rng(3)
    M = np.eye(4)
    M[:3, :3] = np.linalg.qr(rng.normal(size=(3, 3)))[0] * 1.5
    M[:3, 3] = [0.1, -0.2, 0.3]
    p = rng.normal(size=(20, 3))
    for c in (
        Collider("sphere", radius=0.4, transform=M),
        Collider("capsule", radius=0.3, half_length=0.5, transform=M),
        Collider("plane", transform=M),
    ):
        phi, n = c.signed_distance(p)
        eps = 1e-6
        for a in range(3):
            d = np.zeros(3)
            d[a] = eps
            fd = (c.signed_distance(p + d)[0] - c.signed_distance(p - d)[0]) / (2 * eps)
            np.testing.assert_allclose(n[:, a], fd, atol=1e-6)
    # contact energy gradient against finite differences
    mass = rng.uniform(0.5, 1.5, size=20)
    cols = [Collider("sphere", radius=1.0, transform=M)]
    verts = np.arange(20)
    E, g, _ = contact_energy(cols, p, verts, mass, 100.0)
    assert E > 0
    eps = 1e-6
    for i in range(3):
        for a in range(3):
            q = p.copy()
            q[i, a] += eps
            Ep = contact_energy(cols, q, verts, mass, 100.0)[0]
            q[i, a] -= 2 * eps
            Em = contact_energy(cols, q, verts, mass, 100.0)[0]
            assert abs((Ep - Em) / (2 * eps) - g[i, a]) < 1e-5 * max(1, abs(g[i, a]))


def test_non_finite_input_is_refused_and_state_kept():
    X, T = bar((2, 1, 1))
    sim = Simulation(X, T, soft())
    sim.step()
    before = sim.get_state()
    f = np.zeros_like(X)
    f[0, 0] = np.nan
    with pytest.raises(SimulationError, match="not finite"):
        sim.step(FrameInputs(forces=f))
    np.testing.assert_array_equal(sim.x, before["x"])
    assert sim.frame == before["frame"]


def test_unconverged_steps_are_retried_with_smaller_dt():
    X, T = bar((4, 1, 1))
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    s = SimSettings(dt=0.2, max_newton_iters=2, newton_tol=1e-12, max_retries=2)
    sim = Simulation(X, T, soft(E=1e4), s, pinned=pinned)
    rep = sim.step()
    assert rep.retries == 2
    assert rep.substeps >= 4
    assert np.all(np.isfinite(sim.x))


def test_state_round_trip_reproduces_the_future():
    X, T = bar((4, 1, 1))
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    sim = Simulation(X, T, soft(), SimSettings(dt=0.03), pinned=pinned)
    sim.step()
    state = sim.get_state()
    sim.step()
    x2 = sim.x.copy()
    sim.set_state(state)
    sim.step()
    np.testing.assert_array_equal(sim.x, x2)


def test_boundary_vertices_of_a_grid_are_its_faces():
    X, T = grid_tetmesh((1, 1, 1), (3, 3, 3))
    b = boundary_vertices(T)
    on_face = np.any((X < 1e-9) | (X > 1 - 1e-9), axis=1)
    np.testing.assert_array_equal(np.sort(b), np.flatnonzero(on_face))


def test_grid_tets_are_positive_and_fill_the_box():
    X, T = grid_tetmesh((2.0, 1.0, 0.5), (3, 2, 2))
    D = X[T[:, 1:]] - X[T[:, :1]]
    vol = np.linalg.det(D) / 6
    assert np.all(vol > 0)
    assert abs(vol.sum() - 1.0) < 1e-12
