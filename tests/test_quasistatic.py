"""The differentiable quasistatic solve (Srinivasan 2021, sec. 3): adjoint gradients against
central finite differences with tightly solved equilibria, the projected Hessian failing that
check, rest actions giving the rest shape, an affine target's actions reproducing it."""

import numpy as np
import pytest
from neural_rom.core.errors import SimulationError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.kinds.face.rig import demo_head, muscle_actions
from neural_rom.core.physics.colliders import Collider
from neural_rom.core.physics.fem import Material, TetFEM
from neural_rom.core.physics.quasistatic import QuasistaticSolver, polar_actions
from neural_rom.core.reduced.nnet import MLP

TIGHT = 1e-11


@pytest.fixture(scope="module")
def face():
    rig = demo_head("small")
    solver = QuasistaticSolver(rig.fem(), rig.constrained, surface=rig.skin_matrix())
    acts = np.zeros(rig.n_muscles)
    acts[[0, 3, 8]] = [0.9, 0.7, 0.8]
    a0 = muscle_actions(rig, acts)
    jaw = rig.boundary(0.25)
    eq = solver.solve(a0, jaw, tol=TIGHT)
    assert eq.converged, eq.residual
    target = rig.skin_V + np.random.default_rng(1).normal(0, 0.002, rig.skin_V.shape)
    return rig, solver, a0, jaw, eq.x, target


def _loss(rig, solver, x, target):
    d = rig.skin.apply(x) - target
    return 0.5 * float((d * d).sum()), (solver.surface.T @ d)


def _fd_check(rig, solver, a0, jaw, x0, target, direction, project=False):
    solver.solve(a0, jaw, x0=x0, tol=TIGHT)
    L0, dLdx = _loss(rig, solver, x0, target)
    grad = solver.adjoint(x0, dLdx, project=project)
    eps = 1e-4
    vals = []
    for s in (1, -1):
        eq = solver.solve(a0 + s * eps * direction, jaw, x0=x0, tol=TIGHT)
        assert eq.converged, eq.residual
        vals.append(_loss(rig, solver, eq.x, target)[0])
    fd = (vals[0] - vals[1]) / (2 * eps)
    ad = float((grad * direction).sum())
    return ad, fd, abs(ad - fd) / abs(fd)


def test_adjoint_matches_central_differences_and_the_projected_hessian_does_not(face):
    rig, solver, a0, jaw, x0, target = face
    rng = np.random.default_rng(0)
    direction = rng.normal(size=a0.shape) * 0.1
    ad, fd, rel = _fd_check(rig, solver, a0, jaw, x0, target, direction)
    _, _, rel_p = _fd_check(rig, solver, a0, jaw, x0, target, direction, project=True)
    print(
        f"\nadjoint {ad:.9e}, central FD {fd:.9e}: relative error {rel:.2e}; "
        f"with the projected Hessian {rel_p:.2e}"
    )
    assert rel < 1e-5
    assert rel_p > 1e-3


def test_latent_gradient_through_a_decoder_matches_finite_differences(face):
    rig, solver, a0, jaw, x0, target = face
    rng = np.random.default_rng(2)
    m6 = a0.size
    dec = MLP(
        [rng.normal(0, 0.5, (8, 3)), rng.normal(0, 0.02, (m6, 8))],
        [np.zeros(8), a0.ravel()],
        ["tanh", "identity"],
    )
    z0 = rng.normal(0, 0.3, 3)

    def loss(z, x_start):
        eq = solver.solve(dec.forward(z).reshape(-1, 6), jaw, x0=x_start, tol=TIGHT)
        return _loss(rig, solver, eq.x, target), eq.x

    # from a start away from the equilibrium: the solve's last Newton factorization (at the
    # iterate before the last) serves the adjoint by iterative refinement
    eq = solver.solve(dec.forward(z0).reshape(-1, 6), jaw, x0=x0, tol=1e-6)
    assert eq.iterations >= 1 and solver.last_lu is not None
    L1 = _loss(rig, solver, eq.x, target)[1]
    reused = solver.adjoint(eq.x, L1, lu=solver.last_lu)
    fresh = solver.adjoint(eq.x, L1)
    gap = np.abs(reused - fresh).max() / np.abs(fresh).max()
    print(f"\nthe adjoint on the solve's last factorization: {gap:.1e} relative to a new one")
    assert gap < 1e-8
    (L0, dLdx), x = loss(z0, x0)
    dLda = solver.adjoint(x, dLdx)
    _, dLdz = dec.vjp(z0, dLda.ravel())
    v = rng.normal(size=3)
    eps = 1e-4
    fd = (loss(z0 + eps * v, x)[0][0] - loss(z0 - eps * v, x)[0][0]) / (2 * eps)
    rel = abs(dLdz @ v - fd) / abs(fd)
    print(f"\nlatent gradient {dLdz @ v:.9e} vs central FD {fd:.9e}: relative {rel:.2e}")
    assert rel < 1e-5


def test_contact_adjoint_with_a_sphere_pressed_into_the_cheek(face):
    rig, solver, a0, jaw, x0, target = face
    cheek = rig.skin_V[np.argmin(rig.skin_V @ np.array([0.6, -0.8, 0.0]))]
    sphere = [
        Collider("sphere", radius=0.03, transform=_at(cheek + 0.022 * np.array([0.6, -0.8, 0.0])))
    ]
    eq = solver.solve(a0, jaw, x0=x0, colliders=sphere, tol=TIGHT)
    assert eq.converged
    p = rig.skin.apply(eq.x)
    phi, _ = sphere[0].signed_distance(p)
    pushed = np.abs(p - rig.skin.apply(x0)).max()
    L0, dLdx = _loss(rig, solver, eq.x, target)
    grad = solver.adjoint(eq.x, dLdx, colliders=sphere)
    d = np.random.default_rng(3).normal(size=a0.shape) * 0.1
    vals = [
        _loss(
            rig,
            solver,
            solver.solve(a0 + s * 1e-4 * d, jaw, x0=eq.x, colliders=sphere, tol=TIGHT).x,
            target,
        )[0]
        for s in (1, -1)
    ]
    fd = (vals[0] - vals[1]) / 2e-4
    rel = abs((grad * d).sum() - fd) / abs(fd)
    print(
        f"\nsphere in the cheek: skin pushed {pushed * 1000:.2f} mm, deepest penetration "
        f"{-phi.min() * 1000:.3f} mm, adjoint vs FD relative {rel:.2e}, residual "
        f"{eq.residual:.1e}"
    )
    assert pushed > 0.003 and -phi.min() < 0.002
    assert rel < 1e-5


def _at(p):
    M = np.eye(4)
    M[:3, 3] = p
    return M


def test_rest_actions_give_the_rest_shape(face):
    rig, solver, *_ = face
    eq = solver.solve(np.zeros((len(rig.T), 6)), rig.boundary(0.0), tol=TIGHT)
    err = np.abs(eq.x - rig.X).max()
    print(f"\nrest actions: {eq.iterations} Newton iterations, max node offset {err:.1e} m")
    assert eq.converged and err < 1e-12


def test_an_affine_targets_actions_reproduce_it():
    X, T = grid_tetmesh((0.1, 0.08, 0.06), (4, 3, 3))
    A = np.array([[1.1, 0.05, 0.0], [0.02, 0.92, 0.03], [0.0, -0.04, 1.05]])
    fem = TetFEM(X, T, Material(3e4, 0.45, 1000.0, model="shape_targeting"))
    Xa = X @ A.T
    F = np.broadcast_to(A, (len(T), 3, 3))
    a = polar_actions(F)
    pinned = np.flatnonzero(X[:, 0] == 0.0)
    solver = QuasistaticSolver(fem, pinned)
    eq = solver.solve(a, Xa[pinned], x0=X, tol=TIGHT)  # start from rest, not the answer
    err = np.abs(eq.x - Xa).max()
    print(f"\naffine target: {eq.iterations} iterations, max node error {err:.1e} m")
    assert eq.converged and err < 1e-10


def test_bad_constraints_are_refused(face):
    rig, solver, a0, *_ = face
    with pytest.raises(SimulationError, match="constrained positions"):
        solver.solve(a0, rig.boundary(0.0)[:-1])
    with pytest.raises(SimulationError, match="outside the mesh or repeat"):
        QuasistaticSolver(rig.fem(), np.array([0, 0]))
