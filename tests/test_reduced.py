"""Reduced backward Euler: exactness with the full basis, cubature plumbing, contact, protocol."""

import numpy as np
import pytest
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.errors import SimulationError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.methods.linear import LinearSimulation
from neural_rom.core.physics.colliders import Collider, ContactPoints
from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
from neural_rom.core.physics.sim import SimSettings, Simulation
from neural_rom.core.reduced.model import surface_sample
from neural_rom.core.reduced.subspace import modal_basis


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
    red = LinearSimulation(X, T, mat, full_basis(X, T, mat, pinned), s, pinned=pinned)
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
    red = LinearSimulation(
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
    red = LinearSimulation(X, T, mat, Ub, s, pinned=pinned, cubature=(els, w))
    red.reset(qdot=rng.normal(scale=0.5, size=12))
    for _ in range(80):
        red.step()
    assert np.abs(red.positions() - X).max() < 1e-3 * red.length_scale
    assert red.sub_fem.n_elements == len(els)


def test_protocol_state_round_trip_and_bad_pins():
    X, T, mat, pinned = setup()
    red = LinearSimulation(
        X, T, mat, full_basis(X, T, mat, pinned), SimSettings(dt=0.03), pinned=pinned
    )
    red.step()
    st = red.get_state()
    red.step()
    a = red.positions()
    red.set_state(st)
    red.step()
    np.testing.assert_array_equal(red.positions(), a)
    with pytest.raises(SimulationError, match="only rigidly"):
        red.step(FrameInputs(pin_targets=1.5 * X[pinned] + 0.1))
    U = full_basis(X, T, mat, np.zeros(0, int))
    with pytest.raises(SimulationError, match="pinned DOFs"):
        LinearSimulation(X, T, mat, U, pinned=pinned)


def test_surface_sample_carries_all_surface_mass():
    X, T, mat, _ = setup(div=(8, 3, 3))
    from neural_rom.core.physics.sim import boundary_vertices

    surf = boundary_vertices(T)
    mass = mass_matrix(X, T, mat.density)
    points = ContactPoints.at_vertices(surf, mass[surf])
    sample = surface_sample(X, points, count=20, seed=0)
    idx = sample.nodes[:, 0]
    assert len(sample) == 20 and sample.is_vertices and set(idx) <= set(surf)
    assert abs(sample.mass.sum() - mass[surf].sum()) < 1e-12
    again = surface_sample(X, points, count=20, seed=0)
    np.testing.assert_array_equal(idx, again.nodes[:, 0])


def crude_subspace(X, T, mat, pinned, k, seed):
    """A random k-vector M-orthonormal subspace that keeps pinned DOFs at zero."""
    U = full_basis(X, T, mat, pinned)
    B = U @ np.random.default_rng(seed).normal(size=(U.shape[1], k))
    m3 = np.repeat(mass_matrix(X, T, mat.density), 3)
    L = np.linalg.cholesky(B.T @ (m3[:, None] * B))
    return np.linalg.solve(L, B.T).T


def test_reduced_gradient_and_exact_hessian_match_finite_differences():
    X, T, mat, pinned = setup(div=(6, 2, 2))
    U = crude_subspace(X, T, mat, pinned, 8, seed=2)
    els = np.arange(1, len(T), 4)
    red = LinearSimulation(X, T, mat, U, pinned=pinned, cubature=(els, np.full(len(els), 4.0)))
    q = np.random.default_rng(3).normal(scale=0.05, size=8)  # a large, non-linear pose
    e, g, H = red._elastic(q, 2, project=False)
    e1, g1, H1 = red._elastic(q, 1)
    assert e1 == e and H1 is None and red._elastic(q, 0)[1] is None
    np.testing.assert_array_equal(g1, g)
    eps = 1e-6
    I = np.eye(8)
    g_fd = [
        (red._elastic(q + eps * d, 0)[0] - red._elastic(q - eps * d, 0)[0]) / (2 * eps) for d in I
    ]
    np.testing.assert_allclose(g_fd, g, rtol=1e-6, atol=1e-9 * np.abs(g).max())
    H_fd = np.array(
        [(red._elastic(q + eps * d, 1)[1] - red._elastic(q - eps * d, 1)[1]) / (2 * eps) for d in I]
    )
    np.testing.assert_allclose(H_fd, H, rtol=1e-5, atol=1e-7 * np.abs(H).max())
    # the projected Hessian is PSD and differs only where elements are indefinite
    Hp = red._elastic(q, 2, project=True)[2]
    assert np.linalg.eigvalsh(Hp).min() > -1e-9 * np.abs(Hp).max()


def test_indefinite_hessian_falls_back_to_projection_and_matches_full_space():
    """A bar squashed to 40% of its length: the exact Hessian of the inverted-ish elements
    is indefinite, Newton switches to the projected one and still lands on the full-space
    step."""
    X, T, mat, _ = setup()
    s = SimSettings(dt=0.05, gravity=(0, 0, 0), newton_tol=1e-11)
    U = full_basis(X, T, mat, np.zeros(0, int))
    m3 = np.repeat(mass_matrix(X, T, mat.density), 3)
    x0 = X * np.array([0.4, 1.0, 1.0])
    full = Simulation(X, T, mat, s)
    full.x = x0.copy()
    red = LinearSimulation(X, T, mat, U, s)
    red.reset(q=np.sqrt(m3) * (x0 - X).ravel())
    projected = []
    elastic = red._elastic

    def spy(q, order, project=True):
        if order == 2:
            projected.append(project)
        return elastic(q, order, project)

    red._elastic = spy
    for _ in range(3):
        full.step()
        assert red.step().converged
        np.testing.assert_allclose(red.positions(), full.x, atol=1e-8)
    assert any(projected) and not all(projected)
    assert np.abs(full.x - x0).max() > 0.1  # it sprang back a long way


def test_lazy_hessian_newton_stays_within_the_tolerance():
    """Chord steps (the last factorized Hessian) replace most Hessian evaluations; the
    frames stay within newton_tol of a tightly converged run."""
    X, T, mat, pinned = setup(div=(8, 2, 2))
    modes = modal_basis(TetFEM(X, T, mat), mass_matrix(X, T, mat.density), pinned, k=12)
    U = modes.U
    els = np.arange(0, len(T), 3)
    cub = (els, np.full(len(els), 3.0))
    rng = np.random.default_rng(4)
    forces = np.zeros((16,) + X.shape)
    forces[:8, -6:] = rng.normal(scale=2.0, size=(8, 6, 3))
    runs = {}
    for tol in (1e-6, 1e-12):
        s = SimSettings(dt=1 / 24, newton_tol=tol)
        red = LinearSimulation(X, T, mat, U, s, pinned=pinned, cubature=cub)
        hessians = []
        elastic = red._elastic
        red._elastic = lambda q, order, project=True, e=elastic, h=hessians: (
            h.append(order == 2) or e(q, order, project)
        )
        iters, out = 0, []
        for f in forces:
            iters += red.step(FrameInputs(forces=f)).newton_iters
            out.append(red.positions())
        runs[tol] = (np.array(out), iters, sum(hessians))
    (a, iters, n_hess), (b, _, _) = runs[1e-6], runs[1e-12]
    assert np.abs(a - X).max() > 0.02  # real motion
    assert np.abs(a - b).max() < 1e-6 * red.length_scale
    assert n_hess < iters  # some steps were chord steps
