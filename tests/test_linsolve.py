"""Newton linear solves: AMG-CG agrees with the direct solver; the fallback catches failures."""

import numpy as np
import pytest
import scipy.sparse as sp
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics import linsolve
from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
from neural_rom.core.physics.sim import SimSettings, Simulation


def newton_matrix(div=(20, 10, 10), moved=0.0):
    """Rest positions and a Newton matrix ``K(x) + M / h^2`` at a random pose; ``moved``
    (m) displaces that pose further (the next Newton iterate's matrix)."""
    X, T = grid_tetmesh((1.0, 0.5, 0.5), div)
    fem = TetFEM(X, T, Material(1e6, 0.45, 1000.0))
    x = X + np.random.default_rng(0).normal(scale=0.01, size=X.shape)
    x += np.random.default_rng(1).normal(scale=moved, size=X.shape) if moved else 0.0
    H = fem.hessian(x, project=True)
    m3 = np.repeat(mass_matrix(X, T, 1000.0), 3)
    return X, (H + sp.diags(m3 * 24.0**2)).tocsr()


def test_rigid_modes_span_the_kernel_of_the_stiffness_at_rest():
    X, T = grid_tetmesh((1.0, 0.3, 0.2), (4, 2, 2))
    K = TetFEM(X, T, Material(1e5, 0.3, 1000.0)).hessian(X, project=False)
    B = linsolve.rigid_modes(X)
    assert np.abs(K @ B).max() < 1e-8 * abs(K).max()
    assert np.linalg.matrix_rank(B) == 6


def test_amg_matches_direct_solve():
    X, A = newton_matrix()
    assert A.shape[0] >= linsolve.AMG_MIN_ROWS
    b = np.random.default_rng(1).normal(size=A.shape[0])
    amg = linsolve.SPDSolver(X, "auto", rtol=1e-8)
    assert amg.choose(A.shape[0]) == "amg"
    x_amg = amg.solve(A, b)
    x_lu = linsolve.SPDSolver(X, "superlu").solve(A, b)
    assert amg.stats["cg_iterations"] > 0 and amg.stats["fallbacks"] == 0
    assert np.linalg.norm(x_amg - x_lu) <= 1e-6 * np.linalg.norm(x_lu)


def test_failed_cg_falls_back_to_the_direct_solver():
    X, A = newton_matrix()
    b = np.ones(A.shape[0])
    s = linsolve.SPDSolver(X, "amg", rtol=1e-30)  # unreachable: CG gives up, SuperLU answers
    x = s.solve(A, b)
    assert s.stats["fallbacks"] == 1
    assert np.linalg.norm(A @ x - b) <= 1e-10 * np.linalg.norm(b)


def test_small_systems_use_superlu_and_unknown_backends_are_named():
    X, T = grid_tetmesh((1, 1, 1), (2, 2, 2))
    assert linsolve.SPDSolver(X).choose(3 * len(X)) == "superlu"
    with pytest.raises(ValueError, match="cholmod"):
        linsolve.SPDSolver(X, "cholmod")


def test_simulation_step_is_the_same_with_amg_and_superlu():
    X, T = grid_tetmesh((1.0, 0.25, 0.25), (24, 6, 6))
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    out = {}
    for backend in ("amg", "superlu"):
        s = SimSettings(dt=1 / 24, linear_solver=backend, newton_tol=1e-7)
        sim = Simulation(X, T, Material(1e6, 0.45, 1000.0), s, pinned=pinned)
        assert sim.solver.choose(3 * len(X)) == backend
        sim.step()
        out[backend] = sim.x
    assert np.abs(out["amg"] - out["superlu"]).max() < 1e-5


def test_a_kept_preconditioner_serves_the_next_nearby_matrix():
    X, A = newton_matrix()
    b = np.random.default_rng(2).normal(size=A.shape[0])
    for backend in ("amg", "superlu"):
        s = linsolve.SPDSolver(X, backend)
        x1 = s.solve(A, b, rtol=1e-8, reuse=True)
        A2 = newton_matrix(moved=1e-3)[1]  # the next Newton iterate's matrix
        x2 = s.solve(A2, b, rtol=1e-8, reuse=True)
        assert s.stats["setups"] == 1, backend  # built once, used twice
        assert np.linalg.norm(A @ x1 - b) <= 1e-7 * np.linalg.norm(b)
        assert np.linalg.norm(A2 @ x2 - b) <= 1e-7 * np.linalg.norm(b)
        s.forget()
        s.solve(A2, b, reuse=True)
        assert s.stats["setups"] == 2, backend


def test_indefinite_matrices_are_reported_when_asked():
    X, A = newton_matrix()
    shift = 2.0 * sp.diags(np.full(A.shape[0], abs(A).max()))  # pushes every eigenvalue < 0
    bad = (A - shift).tocsr()
    b = np.ones(A.shape[0])
    for backend in ("amg", "superlu"):
        with pytest.raises(linsolve.IndefiniteMatrix):
            linsolve.SPDSolver(X, backend).solve(bad, b, reuse=True, maybe_indefinite=True)
        # a definite one is solved as usual
        x = linsolve.SPDSolver(X, backend).solve(A, b, rtol=1e-8, reuse=True, maybe_indefinite=True)
        assert np.linalg.norm(A @ x - b) <= 1e-7 * np.linalg.norm(b)
