"""Shen 2021 runtime (core/methods/shen.py): the Newton matrix of eq. (10) against finite
differences of phi, Newton's convergence rate with and without the third-order term, energy
of undamped free vibration, equality with the linear reduced model when nothing is
nonlinear, state and model-file round trips, animated pins (the linear model's moving frame)."""

import numpy as np
import pytest
from neural_rom.core.data.files import mesh_hash
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.methods.linear import LinearSimulation
from neural_rom.core.methods.shen import ShenSimulation
from neural_rom.core.methods.shen import save as save_shen_model
from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
from neural_rom.core.physics.sim import SimSettings
from neural_rom.core.reduced.nnet import MLP
from neural_rom.core.reduced.subspace import modal_basis
from neural_rom.core.registry import load_simulator

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
    with the decoder reading p, whose S then spans all of r). The state is set directly
    (no stepping history whose rounding path, numpy 1 or 2, one CPU or another, decides
    which root earlier steps took)."""
    sim = p_reading(setup) if sees_p else make(setup)
    rng = np.random.default_rng(2)
    w = np.r_[np.full(sim.n_p, 0.1), np.ones(sim.n_z)]  # z moves most (dz, v, g nonzero)
    sim.reset(r=sim.r + 0.1 * w * rng.normal(size=sim.n), rdot=w * rng.normal(size=sim.n))
    root = newton_iterates(sim, True, sim.r + sim.settings.dt * sim.rdot, 30)[-1]
    assert np.abs(root - sim.r).max() < 1.0  # the step's own root, not a far one
    start = root + 0.003 * np.random.default_rng(0).normal(size=sim.n)
    exact = [float(np.linalg.norm(x - root)) for x in newton_iterates(sim, True, start, 5)]
    inexact = [float(np.linalg.norm(x - root)) for x in newton_iterates(sim, False, start, 5)]
    e0 = float(np.linalg.norm(start - root))
    print(f"start {e0:.1e}; errors, exact matrix:", " ".join(f"{e:.1e}" for e in exact))
    print("errors without S:", " ".join(f"{e:.1e}" for e in inexact))
    quad = [b / a**2 for a, b in zip([e0] + exact, exact) if b > 1e-13]
    rates = [b / a for a, b in zip([e0] + inexact, inexact) if b > 1e-12]
    print("exact e_{k+1} / e_k^2:", " ".join(f"{x:.2f}" for x in quad))
    print("without S e_{k+1} / e_k:", " ".join(f"{x:.2e}" for x in rates))
    # measured (numpy 1.26 and 2.4, AMD EPYC, the same to two digits): exact 4.2e-3 1.5e-4
    # 1.4e-7 1.0e-13 (D(z)), 1.8e-3 2.3e-5 6.3e-9 6e-16 (D(p, z)); without S, after the
    # start's transient (0.82, 0.38), ratios 0.068-0.099 and 0.023-0.033
    assert exact[3] < 1e-12 and max(quad[1:]) < 100
    assert all(x < 0.9 for x in rates) and max(rates[1:]) < 5 * min(rates[1:])
    assert len(rates) == 5 and inexact[3] > 1e3 * exact[3]


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
        red = LinearSimulation(X, T, MAT, Ulin, s, pinned=pinned, cubature=cub)
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
    from neural_rom.core.physics.colliders import ContactPoints
    from neural_rom.core.reduced.cubature import Cubature

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


def swing(X, pinned, frames, amplitude=0.08, angle=0.5):
    """Pin targets (frames, p, 3) of a keyed swing: the pins' rest positions turned about z
    (up to ``angle`` rad) and moved along y (up to ``amplitude`` m), as an animated object
    moves them."""
    out = []
    for i in range(1, frames + 1):
        t = np.sin(np.pi * i / frames)
        a = angle * t
        R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
        out.append(X[pinned] @ R.T + np.array([0.0, amplitude * t, 0.0]))
    return out


def test_animated_pins_follow_the_pins_frame_as_the_linear_model(setup):
    """Animated pins: the pins' moving frame (core.frame: inertial and damping targets,
    gravity and colliders in the frame) enters Shen's step as constant forces, so with a
    linear decoder onto the next modes (H = S = 0) Shen is the linear model on n_p + n_z
    modes whose pins swing and turn, eq. (10) and the variational step (the default where
    the frame moves) alike; a curved decoder follows the same pins, and its positions carry
    the pins to their targets."""
    X, T, pinned, sub, dec = setup
    s = SimSettings(dt=1 / 24, substeps=2, newton_tol=1e-12, damping_alpha=0.5, damping_beta=0.002)
    E = np.zeros((sub.k, 3))
    E[4:7] = np.eye(3)
    lin = MLP([E], [np.zeros(sub.k)], ["identity"])
    targets = swing(X, pinned, 12)
    for variational in (False, True):
        red = LinearSimulation(X, T, MAT, sub.U[:, :7], s, pinned=pinned)
        she = ShenSimulation(
            X, T, MAT, sub.U, 4, lin, s, pinned=pinned, variational=variational,
            frame_variational=variational,
        )  # fmt: skip
        worst = 0.0
        for p in targets:
            red.step(FrameInputs(pin_targets=p))
            assert she.step(FrameInputs(pin_targets=p)).converged
            worst = max(worst, float(np.abs(she.positions() - red.positions()).max()))
        moved = float(np.abs(red.positions() - X).max())
        print(
            f"variational={variational}: {worst:.2e} m from the linear model (moved {moved:.3f} m)"
        )
        # measured 8.4e-10 m (Newton's tolerance, 1e-12 of the size, on 70 mm of motion)
        assert worst < 1e-8 and moved > 0.05
    curved = make(setup, settings=s)
    for p in targets:
        assert curved.step(FrameInputs(pin_targets=p)).converged
        assert np.abs(curved.positions()[pinned] - p).max() < 1e-9  # the fit: 5e-11 m
    state = curved.get_state()  # the frame is part of the state
    again = make(setup, settings=s)
    again.set_state(state)
    curved.step(FrameInputs(pin_targets=targets[0]))
    again.step(FrameInputs(pin_targets=targets[0]))
    np.testing.assert_array_equal(curved.positions(), again.positions())


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_a_stalled_step_is_two_half_steps_or_the_plain_fallback(setup, seed, monkeypatch):
    """With the decoder reading p, a step Newton stalls in is taken as two eq. (10) steps of
    h / 2, the state ``substeps`` 2 reaches, with no variational fallback; when a half
    stalls too, the split is undone and the state is the variational fallback's, as with
    ``split_stalls`` off. The stall is made, not hoped for (which steps crawl depends on
    rounding): a step that may be halved gets one Newton iteration (``_CRAWL_ITERS``), far
    fewer than a poke of 3 N takes from the warm start (4-9 measured), and the halves their
    50; with one iteration for the halves too, they stall as well. (Random decoders: seed 2's
    two plain halves themselves need the fallback at this state, so it proves nothing.)"""
    from neural_rom.core.methods.shen import runtime as shen

    f = pokes(setup[0], 1, seed=seed, scale=3.0)[0]
    dec = sin_decoder(7, setup[3].k, seed=seed)

    def run(max_iters=50, substeps=1, split=True):
        s = SimSettings(dt=1 / 24, substeps=substeps, newton_tol=1e-10, max_newton_iters=max_iters)
        sim = make(setup, decoder=dec, decoder_sees_p=True, settings=s)
        rng = np.random.default_rng(seed)
        w = np.r_[np.full(sim.n_p, 0.1), np.ones(sim.n_z)]
        sim.reset(r=sim.r + 0.1 * w * rng.normal(size=sim.n), rdot=w * rng.normal(size=sim.n))
        sim.split_stalls = split
        sim.f_ext = sim.project_forces(f)  # substeps interpolate from the last frame's force
        rep = sim.step(FrameInputs(forces=f))
        return sim, rep

    monkeypatch.setattr(shen, "_CRAWL_ITERS", 1)
    halves, rep_halves = run(substeps=2, split=False)  # the reference: two plain halves
    assert halves.fallbacks == 0 and halves.splits == 0 and rep_halves.converged
    plain, rep_plain = run(1, split=False)
    split, rep = run()
    gap = float(np.abs(split.r - halves.r).max())
    print(
        f"seed {seed}: halved: {split.splits} split, {split.fallbacks} fallbacks, "
        f"{rep.newton_iters} iterations, |r - r(substeps 2)| = {gap:.1e}; without halving "
        f"(one iteration): {plain.fallbacks} fallback"
    )
    assert split.splits == 1 and split.fallbacks == 0 and rep.converged and gap < 1e-8
    failed, _ = run(1)  # the halves stall too: undone, the fallback's state
    print(f"one iteration at most: splits {failed.splits}, fallbacks {failed.fallbacks}")
    assert failed.splits == 0 and failed.fallbacks == 1 and plain.fallbacks == 1
    assert np.array_equal(failed.r, plain.r) and np.array_equal(failed.rdot, plain.rdot)
