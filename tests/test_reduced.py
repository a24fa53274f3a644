"""Reduced backward Euler: exactness with the full basis, cubature plumbing, contact, protocol."""

import numpy as np
import pytest
from neural_rom.core.colliders import Collider
from neural_rom.core.errors import SimulationError
from neural_rom.core.fem import Material, mass_matrix
from neural_rom.core.grid import grid_tetmesh
from neural_rom.core.reduced import ReducedSimulation, surface_sample
from neural_rom.core.sim import FrameInputs, SimSettings, Simulation


def full_basis(X, T, mat, pinned):
    """An M-orthonormal basis of every free DOF: the subspace is the whole space."""
    n = len(X)
    m3 = np.repeat(mass_matrix(X, T, mat.density, lumped=True), 3)
    free = np.ones(3 * n, dtype=bool)
    free[(3 * np.asarray(pinned)[:, None] + np.arange(3)).ravel()] = False
    cols = np.flatnonzero(free)
    U = np.zeros((3 * n, len(cols)))
    U[cols, np.arange(len(cols))] = 1.0 / np.sqrt(m3[cols])
    return U


def setup(pinned=True, div=(4, 1, 1)):
    X, T = grid_tetmesh((0.4, 0.1, 0.1), div)
    mat = Material(youngs_modulus=5e4, poisson_ratio=0.4, density=1000.0)
    p = np.flatnonzero(X[:, 0] < 1e-9) if pinned else np.zeros(0, dtype=int)
    return X, T, mat, p


def test_full_basis_without_cubature_reproduces_full_space_steps():
    X, T, mat, pinned = setup()
    s = SimSettings(dt=1 / 24, newton_tol=1e-10, damping_alpha=0.5, damping_beta=0.002)
    full = Simulation(X, T, mat, s, pinned=pinned)
    red = ReducedSimulation(X, T, mat, full_basis(X, T, mat, pinned), s, pinned=pinned)
    rng = np.random.default_rng(0)
    for _frame in range(6):
        f = np.zeros_like(X)
        f[-4:] = rng.normal(scale=0.5, size=(4, 3))
        full.step(FrameInputs(forces=f))
        red.step(FrameInputs(forces=f))
        np.testing.assert_allclose(red.positions(), full.x, atol=1e-8)
    assert np.abs(full.x - X).max() > 1e-2  # a real, large motion


def test_full_basis_contact_matches_full_space():
    X, T, mat, _ = setup(pinned=False)
    X = X + np.array([0, 0, 0.02])
    s = SimSettings(dt=1 / 48, newton_tol=1e-10)
    ground = [Collider("plane")]
    full = Simulation(X, T, mat, s, colliders=ground)
    surf = full.surface
    red = ReducedSimulation(
        X,
        T,
        mat,
        full_basis(X, T, mat, np.zeros(0, int)),
        s,
        contact=(surf, full.mass[surf]),
        colliders=ground,
    )
    for _ in range(12):
        full.step()
        red.step()
    np.testing.assert_allclose(red.positions(), full.x, atol=1e-7)
    assert full.x[:, 2].min() < 0.005  # it reached the ground


def test_truncated_basis_with_cubature_subset_runs_and_returns_to_rest():
    X, T, mat, pinned = setup(div=(8, 2, 2))
    U = full_basis(X, T, mat, pinned)
    # a crude 12-vector subspace: lowest-frequency combinations via a few power iterations
    rng = np.random.default_rng(1)
    B = U @ rng.normal(size=(U.shape[1], 12))
    m3 = np.repeat(mass_matrix(X, T, mat.density), 3)
    L = np.linalg.cholesky(B.T @ (m3[:, None] * B))  # M-orthonormalize, keeping zero pinned rows
    Ub = np.linalg.solve(L, B.T).T
    els = np.arange(0, len(T), 3)
    w = np.full(len(els), 3.0)
    s = SimSettings(dt=1 / 24, gravity=(0, 0, 0), damping_alpha=3.0)
    red = ReducedSimulation(X, T, mat, Ub, s, pinned=pinned, cubature=(els, w))
    red.reset(qdot=rng.normal(scale=0.5, size=12))
    for _ in range(80):
        red.step()
    assert np.abs(red.positions() - X).max() < 1e-3 * red.length_scale
    assert red.sub_fem.n_elements == len(els)


def test_protocol_state_round_trip_and_bad_pins():
    X, T, mat, pinned = setup()
    red = ReducedSimulation(
        X, T, mat, full_basis(X, T, mat, pinned), SimSettings(dt=0.03), pinned=pinned
    )
    red.step()
    st = red.get_state()
    red.step()
    a = red.positions()
    red.set_state(st)
    red.step()
    np.testing.assert_array_equal(red.positions(), a)
    with pytest.raises(SimulationError, match="pinned"):
        red.step(FrameInputs(pin_targets=X[pinned] + 0.1))
    U = full_basis(X, T, mat, np.zeros(0, int))
    with pytest.raises(SimulationError, match="pinned DOFs"):
        ReducedSimulation(X, T, mat, U, pinned=pinned)


def test_surface_sample_carries_all_surface_mass():
    X, T, mat, _ = setup(div=(8, 3, 3))
    from neural_rom.core.sim import boundary_vertices

    surf = boundary_vertices(T)
    mass = mass_matrix(X, T, mat.density)
    idx, w = surface_sample(X, surf, mass, count=20, seed=0)
    assert len(idx) == 20 and set(idx) <= set(surf)
    assert abs(w.sum() - mass[surf].sum()) < 1e-12
    idx2, _ = surface_sample(X, surf, mass, count=20, seed=0)
    np.testing.assert_array_equal(idx, idx2)
