"""Shen 2021 runtime (core/methods/shen.py): the Newton matrix of eq. (10) against finite
differences of phi, Newton's convergence rate with and without the third-order term, energy
of undamped free vibration, equality with the linear reduced model when nothing is
nonlinear, state and model-file round trips, refusal of animated pins."""

import numpy as np
import pytest
from neural_rom.core.errors import SimulationError
from neural_rom.core.fem import Material, TetFEM, mass_matrix
from neural_rom.core.files import mesh_hash
from neural_rom.core.grid import grid_tetmesh
from neural_rom.core.methods.linear import ReducedSimulation
from neural_rom.core.methods.shen import ShenSimulation
from neural_rom.core.methods.shen import save as save_shen_model
from neural_rom.core.nnet import MLP
from neural_rom.core.registry import load_simulator
from neural_rom.core.sim import FrameInputs, SimSettings
from neural_rom.core.subspace import modal_basis

MAT = Material(youngs_modulus=5e4, poisson_ratio=0.4, density=1000.0)


def beam(k=10):
    """A 0.4 m beam clamped at x = 0, its k lowest vibration modes as the PCA basis V."""
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (8, 2, 2))
    p = np.flatnonzero(X[:, 0] < 1e-9)
    mass = mass_matrix(X, T, MAT.density)
    sub = modal_basis(TetFEM(X, T, MAT), mass, p, k=k)
    return X, T, p, sub


def sin_decoder(n_z, k, width=16, depth=3, scale=0.02, gain=1.0, seed=0):
    """A random sin decoder (identity last layer), D(0) = 0: outputs of size ``scale`` (PCA
    units), first-layer weights ``gain`` times the usual (more curvature)."""
    rng = np.random.default_rng(seed)
    sizes = [n_z] + [width] * depth + [k]
    W = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in zip(sizes[:-1], sizes[1:], strict=True)]
    W[0] *= gain
    W[-1] *= scale
    b = [0.3 * rng.normal(size=o) for o in sizes[1:]]
    acts = ["sin"] * depth + ["identity"]
    b[-1] = b[-1] - MLP(W, b, acts).forward(np.zeros(n_z))
    return MLP(W, b, acts)


def pokes(X, frames, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(frames):
        f = np.zeros_like(X)
        f[-4:] = rng.normal(scale=scale, size=(4, 3))
        out.append(f)
    return out


@pytest.fixture(scope="module")
def setup():
    X, T, pinned, sub = beam()
    return X, T, pinned, sub, sin_decoder(3, sub.k)


def make(setup, **kw):
    X, T, pinned, sub, dec = setup
    s = kw.pop("settings", SimSettings(dt=1 / 24, substeps=1, newton_tol=1e-10))
    return ShenSimulation(
        X, T, MAT, sub.U, kw.pop("n_p", 4), kw.pop("decoder", dec), s, pinned=pinned, **kw
    )


def moving_state(sim, seed=1):
    """A moving state away from rest (so a_z, dz, v and g are all nonzero): four poked
    frames."""
    for f in pokes(sim.X, 4, seed=seed, scale=3.0):
        assert sim.step(FrameInputs(forces=f)).converged


@pytest.mark.parametrize("sees_p", [False, True])
def test_newton_matrix_matches_finite_differences_of_phi(setup, sees_p):
    """dphi/dr (non-symmetric: fictitious force and g^T H) against central differences, with
    damping (alpha, beta), gravity and a poke; and the printed eq. (11) sign is worse. With
    ``sees_p`` the decoder reads p too (u = U p + D(p, z)): the curvature terms then span
    all of r."""
    s = SimSettings(dt=1 / 24, damping_alpha=0.3, damping_beta=0.004)
    curved = sin_decoder(3 + (4 if sees_p else 0), setup[3].k, gain=3.0, scale=0.05)
    for fict in (True, False):
        sim = make(setup, settings=s, fictitious=fict, decoder=curved, decoder_sees_p=sees_p)
        assert sim.n == 7
        moving_state(sim)
        f = sim.project_forces(pokes(sim.X, 1)[0])
        res = sim.residual_function(f_ext=f)
        rng = np.random.default_rng(2)
        r = (
            sim.r
            + sim.settings.dt * sim.rdot
            + 0.1 * np.abs(sim.rdot).max() * rng.normal(size=sim.n) / 24
        )
        phi, A = res(r)
        eps = 1e-6
        fd = np.stack(
            [(res(r + eps * e)[0] - res(r - eps * e)[0]) / (2 * eps) for e in np.eye(sim.n)], 1
        )
        err = np.abs(A - fd).max() / np.abs(fd).max()
        asym = np.abs(A - A.T).max() / np.abs(A).max()
        print(f"sees_p={sees_p} fictitious={fict}: |A - FD| / |A| = {err:.2e}, asym {asym:.2e}")
        assert err < 1e-7
        assert asym > 1e-6  # genuinely non-symmetric: an LU solve is needed


def newton_iterates(sim, third, r, count):
    """Plain Newton iterates (no line search) of one step's phi from ``r``."""
    sim.third = third
    res = sim.residual_function()
    out = []
    for _ in range(count):
        phi, A = res(r)
        r = r - np.linalg.solve(A, phi)
        out.append(r)
    return out


def p_reading(setup, **kw):
    """The runtime with a decoder that reads p too (u = U p + D(p, z)), n_p = 4, n_z = 3."""
    return make(setup, decoder=sin_decoder(7, setup[3].k), decoder_sees_p=True, **kw)


@pytest.mark.parametrize("sees_p", [False, True])
def test_newton_converges_quadratically_and_linearly_without_the_third_order_term(setup, sees_p):
    """From the same start near the root: e_{k+1} <= C e_k^2 with the exact matrix; without
    S a constant ratio e_{k+1} / e_k (linear), so S is what makes the matrix exact (also
    with the decoder reading p, whose S then spans all of r)."""
    sim = p_reading(setup) if sees_p else make(setup)
    moving_state(sim, seed=1)
    root = newton_iterates(sim, True, sim.r + sim.settings.dt * sim.rdot, 12)[-1]
    start = root + 0.003 * np.random.default_rng(0).normal(size=sim.n)
    exact = [float(np.linalg.norm(x - root)) for x in newton_iterates(sim, True, start, 5)]
    inexact = [float(np.linalg.norm(x - root)) for x in newton_iterates(sim, False, start, 5)]
    e0 = float(np.linalg.norm(start - root))
    print(f"start {e0:.1e}; errors, exact matrix:", " ".join(f"{e:.1e}" for e in exact))
    print("errors without S:", " ".join(f"{e:.1e}" for e in inexact))
    quad = [b / a**2 for a, b in zip([e0] + exact, exact) if b > 1e-13]
    rates = [b / a for a, b in zip([e0] + inexact, inexact)]
    print("exact e_{k+1} / e_k^2:", " ".join(f"{x:.2f}" for x in quad))
    print("without S e_{k+1} / e_k:", " ".join(f"{x:.2e}" for x in rates))
    # quadratic: from 5 mm-ish to rounding in four iterations; linear without S: a constant
    # ratio once the start's transient is gone (the state is the fallback's minimizer, so
    # the constants depend on the variational step: thresholds with margin, not exact)
    # (the first ratio is the start's transient: 80 for D(z), 107 for D(p, z), then 16 / 1.9
    # and 1.1 / 1.2)
    assert exact[3] < 1e-12 and max(quad[1:]) < 100
    assert all(x < 0.9 for x in rates) and max(rates[2:]) < 5 * min(rates[2:])
    assert inexact[3] > 1e3 * exact[3]


def test_step_converges_and_returns_to_rest(setup):
    sim = make(setup, settings=SimSettings(dt=1 / 24, damping_alpha=2.0, gravity=(0, 0, 0)))
    iters = []
    for f in pokes(sim.X, 8, scale=1.0):
        rep = sim.step(FrameInputs(forces=f))
        assert rep.converged
        iters.append(rep.newton_iters)
    moved = float(np.abs(sim.positions() - sim.X).max())
    for _ in range(150):
        sim.step(FrameInputs(forces=np.zeros_like(sim.X)))
    back = float(np.abs(sim.positions() - sim.X).max())
    print(
        f"Newton iterations per step {iters}; moved {moved * 1000:.1f} mm, "
        f"after 150 free frames {back * 1000:.3f} mm"
    )
    assert moved > 0.01 and back < 1e-3 * moved and max(iters) <= 8


def test_undamped_free_vibration_does_not_gain_energy(setup):
    """Poked for 10 frames, then 200 free frames without damping or gravity: the energy
    (kinetic + elastic) never rises from one step to the next (implicit Euler dissipates)."""
    for fict, sees_p in ((True, False), (False, False), (True, True)):
        kw = dict(settings=SimSettings(dt=1 / 60, gravity=(0, 0, 0)), fictitious=fict)
        sim = p_reading(setup, **kw) if sees_p else make(setup, **kw)
        for f in pokes(sim.X, 10, scale=3.0):
            assert sim.step(FrameInputs(forces=f)).converged
        e, iters = [sim.energy()], []
        for _ in range(200):
            rep = sim.step(FrameInputs(forces=np.zeros_like(sim.X)))
            assert rep.converged
            e.append(sim.energy())
            iters.append(rep.newton_iters)
        e = np.array(e)
        print(
            f"fictitious={fict}, D(p, z) {sees_p}: energy {e[0]:.4f} J -> {e[-1]:.4f} J after 200 steps, largest "
            f"rise between steps {np.max(np.diff(e)) / e[0]:.1e} of the start; Newton "
            f"iterations mean {np.mean(iters):.2f}, max {max(iters)}"
        )
        assert np.all(np.diff(e) <= 1e-9 * e[0])
        assert e[-1] < 0.5 * e[0]


def test_without_nonlinear_coordinates_it_is_the_linear_model(setup):
    """decoder None (n_z = 0): the linear reduced model on the first n_p modes; a linear
    decoder onto the next modes: the linear model on n_p + n_z modes (H = S = 0)."""
    X, T, pinned, sub, _ = setup
    s = SimSettings(dt=1 / 24, substeps=2, newton_tol=1e-12, damping_alpha=0.5, damping_beta=0.002)
    els = np.arange(0, len(T), 2)
    cub = (els, np.full(len(els), 2.0))
    E = np.zeros((sub.k, 3))
    E[4:7] = np.eye(3)
    cases = [(None, sub.U[:, :4]), (MLP([E], [np.zeros(sub.k)], ["identity"]), sub.U[:, :7])]
    for (dec, Ulin), variational in [(c, v) for c in cases for v in (False, True)]:
        red = ReducedSimulation(X, T, MAT, Ulin, s, pinned=pinned, cubature=cub)
        she = ShenSimulation(
            X, T, MAT, sub.U, 4, dec, s, pinned=pinned, cubature=cub, variational=variational
        )
        worst = 0.0
        for f in pokes(X, 6):
            red.step(FrameInputs(forces=f))
            assert she.step(FrameInputs(forces=f)).converged
            worst = max(worst, float(np.abs(she.positions() - red.positions()).max()))
        print(
            f"n_z = {she.n_z}, variational={variational}: largest distance from the linear "
            f"model {worst:.2e} m"
        )
        assert worst < 1e-9
        assert np.abs(red.positions() - X).max() > 0.01


def test_state_round_trip_and_model_file(setup, tmp_path):
    X, T, pinned, sub, dec = setup
    from neural_rom.core.colliders import ContactPoints
    from neural_rom.core.cubature import Cubature

    sim = make(setup)
    for f in pokes(X, 3):
        sim.step(FrameInputs(forces=f))
    state = sim.get_state()
    fs = pokes(X, 4, seed=5)
    for f in fs:
        sim.step(FrameInputs(forces=f))
    a = sim.positions()
    sim.set_state(state)
    for f in fs:
        sim.step(FrameInputs(forces=f))
    np.testing.assert_array_equal(sim.positions(), a)

    cub = Cubature(np.arange(len(T)), np.ones(len(T)), {})
    surf = np.unique(T.ravel())[:20]
    path = save_shen_model(
        tmp_path / "m.nrmodel",
        mesh_hash=mesh_hash(X, T),
        T=T,
        subspace=sub,
        n_p=4,
        cubature=cub,
        contact=ContactPoints.at_vertices(surf, np.ones(len(surf))),
        material=MAT,
        settings=SimSettings(dt=1 / 24),
        decoder=dec,
        encoder=None,
    )
    loaded, model = load_simulator(path, expect_mesh_hash=mesh_hash(X, T))
    assert isinstance(loaded, ShenSimulation) and model.method == "shen"
    assert (loaded.n_p, loaded.n_z) == (4, 3)


def test_animated_pins_are_refused(setup):
    sim = make(setup)
    targets = sim.X[sim.pinned] + np.array([0.0, 0.0, 0.05])
    with pytest.raises(SimulationError, match="animated pins"):
        sim.step(FrameInputs(pin_targets=targets))
    assert sim.frame == 0


def test_a_stalled_step_is_two_half_steps_or_the_plain_fallback(setup):
    """With the decoder reading p, a step Newton stalls in (a hard poke) is taken as two
    eq. (10) steps of h / 2, the state ``substeps`` 2 reaches, with no variational fallback;
    when a half stalls too (one Newton iteration allowed), the split is undone and the state
    is the variational fallback's, as with ``split_stalls`` off."""
    f = pokes(setup[0], 4, seed=1, scale=10.0)
    base = p_reading(setup)
    for fi in f[:3]:
        assert base.step(FrameInputs(forces=fi)).converged
    state = base.get_state()

    def run(max_iters=50, substeps=1, split=True, constant_force=False):
        s = SimSettings(dt=1 / 24, substeps=substeps, newton_tol=1e-10, max_newton_iters=max_iters)
        sim = p_reading(setup, settings=s)
        sim.set_state(state)
        sim.split_stalls = split
        if constant_force:  # substeps interpolate the force from the last frame's; a split not
            sim.f_ext = sim.project_forces(f[3])
        rep = sim.step(FrameInputs(forces=f[3]))
        return sim, rep

    plain, rep_plain = run(split=False)
    split, rep = run()
    halves, _ = run(substeps=2, constant_force=True)
    gap = float(np.abs(split.r - halves.r).max())
    print(
        f"without halving: {plain.fallbacks} fallback, {rep_plain.newton_iters} iterations; "
        f"halved: {split.splits} split, {split.fallbacks} fallbacks, {rep.newton_iters} "
        f"iterations, |r - r(substeps 2)| = {gap:.1e}"
    )
    assert plain.fallbacks == 1 and plain.splits == 0
    assert split.splits == 1 and split.fallbacks == 0 and rep.converged and gap < 1e-8
    failed, _ = run(1)  # the halves stall too: undone, the fallback's state
    plain, _ = run(1, split=False)
    print(f"one iteration at most: splits {failed.splits}, fallbacks {failed.fallbacks}")
    assert failed.splits == 0 and failed.fallbacks == 1 and plain.fallbacks == 1
    assert np.array_equal(failed.r, plain.r) and np.array_equal(failed.rdot, plain.rdot)
