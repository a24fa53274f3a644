"""Latent-space dynamics (Fulton 2019, sec. 5): exactness with a linear decoder, eq. (13) by
finite differences, the eq. (15) preconditioner, return to rest, state and model-file round
trips, and the preconditioner's effect on L-BFGS iterations."""

import numpy as np
import pytest
from neural_rom.core.data.files import mesh_hash
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.errors import CacheError, SimulationError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.methods.autoencoder import AutoencoderSimulation
from neural_rom.core.methods.autoencoder import save as save_autoencoder_model
from neural_rom.core.methods.linear import LinearSimulation
from neural_rom.core.physics.colliders import Collider
from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
from neural_rom.core.physics.sim import SimSettings, boundary_vertices
from neural_rom.core.reduced.cubature import Cubature
from neural_rom.core.reduced.nnet import MLP
from neural_rom.core.reduced.subspace import Subspace, modal_basis
from neural_rom.core.registry import load_simulator

MAT = Material(youngs_modulus=5e4, poisson_ratio=0.4, density=1000.0)


def beam(pinned=True, div=(8, 2, 2), k=10):
    """A 0.4 m beam, clamped at x = 0, with its k lowest vibration modes as the PCA layer."""
    X, T = grid_tetmesh((0.4, 0.1, 0.1), div)
    p = np.flatnonzero(X[:, 0] < 1e-9) if pinned else np.zeros(0, dtype=np.int64)
    mass = mass_matrix(X, T, MAT.density)
    sub = modal_basis(TetFEM(X, T, MAT), mass, p, k=k)
    return X, T, p, sub


def linear_decoder(k):
    return MLP([np.eye(k)], [np.zeros(k)], ["identity"])


def elu_decoder(r, k, width=24, seed=0):
    """A random ELU decoder (identity last layer), shifted so that phi(0) = 0."""
    rng = np.random.default_rng(seed)
    sizes = [r, width, width, k]
    W = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in zip(sizes[:-1], sizes[1:], strict=True)]
    b = [0.3 * rng.normal(size=o) for o in sizes[1:]]
    acts = ["elu", "elu", "identity"]
    b[-1] = b[-1] - MLP(W, b, acts).forward(np.zeros(r))
    return MLP(W, b, acts)


def pokes(X, frames, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(frames):
        f = np.zeros_like(X)
        f[-4:] = rng.normal(scale=scale, size=(4, 3))
        out.append(f)
    return out


def test_linear_decoder_step_equals_reduced_simulation():
    """phi = identity makes eq. (12) the linear reduced step: same positions as Newton."""
    X, T, pinned, sub = beam()
    s = SimSettings(dt=1 / 24, substeps=2, newton_tol=1e-12, damping_alpha=0.5, damping_beta=0.002)
    els = np.arange(0, len(T), 2)
    cub = (els, np.full(len(els), 2.0))
    red = LinearSimulation(X, T, MAT, sub.U, s, pinned=pinned, cubature=cub)
    lat = AutoencoderSimulation(
        X, T, MAT, sub.U, linear_decoder(sub.k), s, pinned=pinned, cubature=cub, lbfgs_tol=1e-10
    )
    np.testing.assert_array_equal(lat.z_rest, np.zeros(sub.k))
    for f in pokes(X, 6):
        red.step(FrameInputs(forces=f))
        rep = lat.step(FrameInputs(forces=f))
        assert rep.converged and rep.substeps == 2 and rep.newton_iters >= 2
        np.testing.assert_allclose(
            lat.positions(), red.positions(), rtol=0, atol=1e-9
        )  # both converge to ~1e-10 m, from different iterates
    assert np.abs(red.positions() - X).max() > 0.05  # a large motion, not rest


def test_linear_decoder_contact_equals_reduced_simulation():
    """A free beam (rigid + elastic modes) falls onto a ground plane: contact terms agree."""
    X, T, _, sub = beam(pinned=False, div=(4, 1, 1), k=6)
    X = X + np.array([0.0, 0.0, 0.02])
    surf = boundary_vertices(T)
    contact = (surf, sub.mass[surf])
    s = SimSettings(dt=1 / 48, newton_tol=1e-12)
    ground = [Collider("plane")]
    red = LinearSimulation(X, T, MAT, sub.U, s, contact=contact, colliders=ground)
    lat = AutoencoderSimulation(
        X, T, MAT, sub.U, linear_decoder(sub.k), s, contact=contact, colliders=ground,
        lbfgs_tol=1e-10,
    )  # fmt: skip
    iters = 0
    for _ in range(12):
        red.step()
        rep = lat.step()
        assert rep.converged
        iters += rep.newton_iters
        np.testing.assert_allclose(lat.positions(), red.positions(), rtol=0, atol=1e-10)
    assert red.positions()[:, 2].min() < 0.005  # it reached the ground
    # the colliders' stiffness in the preconditioner: 4-5 L-BFGS iterations per resting step
    # (without it every step in contact ran to the 100-iteration cap)
    assert iters < 80, iters


def test_energy_gradient_matches_central_differences():
    """eq. (13) through one VJP, with inertia, gravity, pokes, damping and contact active."""
    X, T, pinned, sub = beam()
    dec = elu_decoder(4, sub.k, seed=3)
    s = SimSettings(dt=1 / 24, damping_alpha=0.7, damping_beta=0.003)
    floor = Collider("plane", transform=np.array(
        [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.005], [0, 0, 0, 1]], dtype=float
    ))  # fmt: skip
    lat = AutoencoderSimulation(X, T, MAT, sub.U, dec, s, pinned=pinned, colliders=[floor])
    rng = np.random.default_rng(1)
    lat.reset(z=0.05 * rng.normal(size=4), qdot=0.1 * rng.normal(size=sub.k))
    fun = lat.time_step_objective(f_ext=lat.project_forces(pokes(X, 1, scale=2.0)[0]))
    z = lat.z + 0.05 * rng.normal(size=4)
    e, g, q = fun(z)
    np.testing.assert_allclose(q, dec.forward(z))
    xs = lat.contact_rest + lat.U_contact @ q
    assert (xs[:, 2] < 0.005).sum() > 0  # some vertices are inside the collider
    eps = 1e-6
    fd = np.array([(fun(z + eps * d)[0] - fun(z - eps * d)[0]) / (2 * eps) for d in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8 * np.abs(g).max())
    d = rng.normal(size=4)
    dd = (fun(z + eps * d)[0] - fun(z - eps * d)[0]) / (2 * eps)
    assert abs(dd - g @ d) <= 1e-6 * abs(g @ d)


def test_preconditioner_is_spd_and_is_the_rest_hessian():
    """H~ of eq. (15) (plus inertia and damping) is SPD, and for phi = identity at rest it
    is the exact Hessian of E there (finite differences of the gradient)."""
    X, T, pinned, sub = beam()
    s = SimSettings(dt=1 / 24, gravity=(0, 0, 0), damping_alpha=0.5, damping_beta=0.002)
    dec = elu_decoder(5, sub.k, seed=2)
    lat = AutoencoderSimulation(X, T, MAT, sub.U, dec, s, pinned=pinned)
    rng = np.random.default_rng(0)
    for _ in range(3):
        H = lat.preconditioner_matrix(0.3 * rng.normal(size=5))
        np.testing.assert_array_equal(H, H.T)
        assert np.linalg.eigvalsh(H).min() > 1e-8 * np.linalg.eigvalsh(H).max() > 0
    lin = AutoencoderSimulation(X, T, MAT, sub.U, linear_decoder(sub.k), s, pinned=pinned)
    fun = lin.time_step_objective()
    eps = 1e-6
    H_fd = np.array([(fun(eps * d)[1] - fun(-eps * d)[1]) / (2 * eps) for d in np.eye(sub.k)])
    H = lin.preconditioner_matrix()
    np.testing.assert_allclose(H_fd, H, rtol=1e-6, atol=1e-7 * np.abs(H).max())
    np.testing.assert_allclose(lin.M_red, np.eye(sub.k), atol=1e-12)  # M-orthonormal U


def test_returns_to_rest_without_forces():
    X, T, pinned, sub = beam()
    dec = elu_decoder(4, sub.k, seed=5)
    s = SimSettings(dt=1 / 24, gravity=(0, 0, 0), damping_alpha=4.0)
    lat = AutoencoderSimulation(X, T, MAT, sub.U, dec, s, pinned=pinned)
    np.testing.assert_allclose(lat.positions(), X, atol=1e-12)  # phi(0) = 0: rest is z = 0
    lat.reset(z=np.array([0.1, -0.08, 0.05, 0.1]))
    start = np.abs(lat.positions() - X).max()
    for _ in range(60):
        assert lat.step().converged
    assert start > 0.01
    assert np.abs(lat.positions() - X).max() < 1e-4 * start


def test_state_round_trip_reproduces_the_future():
    X, T, pinned, sub = beam()
    lat = AutoencoderSimulation(
        X, T, MAT, sub.U, elu_decoder(4, sub.k, seed=1), SimSettings(), pinned=pinned
    )
    F = pokes(X, 4, seed=2)
    lat.step(FrameInputs(forces=F[0]))
    lat.step(FrameInputs(forces=F[1]))
    state = lat.get_state()
    for f in F[2:]:
        lat.step(FrameInputs(forces=f))
    a, za = lat.positions(), lat.z.copy()
    lat.set_state(state)
    assert lat.frame == 2
    for f in F[2:]:
        lat.step(FrameInputs(forces=f))
    np.testing.assert_array_equal(lat.positions(), a)
    np.testing.assert_array_equal(lat.z, za)


def test_encode_pose_and_reset_from_positions():
    X, T, pinned, sub = beam()
    dec = elu_decoder(4, sub.k, seed=4)
    lat = AutoencoderSimulation(X, T, MAT, sub.U, dec, SimSettings(), pinned=pinned)
    z_true = np.array([0.2, -0.1, 0.05, 0.15])
    x = X + (sub.U @ dec.forward(z_true)).reshape(-1, 3)
    # no encoder: Gauss-Newton fit of phi(z) to U^T M (x - X) from z_rest
    np.testing.assert_allclose(dec.forward(lat.encode_pose(x)), dec.forward(z_true), atol=1e-10)
    v = (sub.U @ np.linspace(-1, 1, sub.k)).reshape(-1, 3)
    lat.reset(x=x, v=v)
    np.testing.assert_allclose(lat.positions(), x, atol=1e-10)
    np.testing.assert_allclose(lat.qdot, np.linspace(-1, 1, sub.k), atol=1e-12)
    # an exact linear encoder/decoder pair: the encoder alone is the answer
    k = sub.k
    q = np.linspace(0.1, -0.1, k)
    lin = AutoencoderSimulation(
        X, T, MAT, sub.U, linear_decoder(k), SimSettings(), pinned=pinned,
        encoder=linear_decoder(k),
    )  # fmt: skip
    np.testing.assert_allclose(lin.encode_pose(X + (sub.U @ q).reshape(-1, 3), refine=False), q)
    with pytest.raises(SimulationError, match="once"):
        lin.reset(z=q, x=X)


def test_errors_say_what_to_do():
    X, T, pinned, sub = beam(div=(4, 1, 1), k=4)
    lat = AutoencoderSimulation(X, T, MAT, sub.U, linear_decoder(4), SimSettings(), pinned=pinned)
    with pytest.raises(SimulationError, match="only rigidly"):
        lat.step(FrameInputs(pin_targets=1.5 * X[pinned] + 0.1))
    lat.step(FrameInputs(pin_targets=X[pinned]))  # pins at rest are fine
    with pytest.raises(SimulationError, match="retrain"):
        AutoencoderSimulation(X, T, MAT, sub.U, linear_decoder(5), pinned=pinned)
    with pytest.raises(SimulationError, match="retrain"):
        AutoencoderSimulation(
            X, T, MAT, sub.U, linear_decoder(4), pinned=pinned, encoder=elu_decoder(4, 3)
        )
    U_free = beam(pinned=False, div=(4, 1, 1), k=4)[3].U
    with pytest.raises(SimulationError, match="pinned DOFs"):
        AutoencoderSimulation(X, T, MAT, U_free, linear_decoder(U_free.shape[1]), pinned=pinned)
    bad = np.zeros_like(X)
    bad[-1] = np.nan
    with pytest.raises(SimulationError, match="not finite"):
        lat.step(FrameInputs(forces=bad))


def test_model_file_round_trip(tmp_path):
    X, T, pinned, sub = beam()
    r = 4
    dec = elu_decoder(r, sub.k, seed=6)
    enc = elu_decoder(sub.k, r, seed=7)
    els = np.arange(0, len(T), 3)
    cub = Cubature(els, np.full(len(els), 3.0), {"method": "test"})
    surf = boundary_vertices(T)
    s = SimSettings(dt=1 / 30, damping_alpha=0.3)
    h = mesh_hash(X, T)
    path = save_autoencoder_model(
        tmp_path / "ae.nrmodel", mesh_hash=h, T=T,
        subspace=Subspace(X, sub.U, sub.mass, pinned, kind="pod"), cubature=cub,
        contact=(surf, sub.mass[surf]), material=MAT, settings=s, decoder=dec, encoder=enc,
        metadata={"training": {"epochs": 1}, "metrics": {"val": 0.1},
                  "lbfgs": {"window": 5, "tolerance": 1e-7, "max_iters": 50}},
    )  # fmt: skip
    sim, model = load_simulator(path, expect_mesh_hash=h)
    assert isinstance(sim, AutoencoderSimulation) and model.method == "autoencoder"
    meta = model.metadata
    assert (meta["latent_dim"], meta["k"], meta["training"]) == (r, sub.k, {"epochs": 1})
    assert (sim.lbfgs_window, sim.lbfgs_tol, sim.max_iters) == (5, 1e-7, 50)
    assert {"dec_W0", "enc_W2", "U", "cubature_weights"} <= set(model.arrays)
    direct = AutoencoderSimulation(
        X, T, MAT, sub.U, dec, s, pinned=pinned, cubature=(els, cub.weights),
        contact=(surf, sub.mass[surf]), encoder=enc, lbfgs_window=5, lbfgs_tol=1e-7,
        max_iters=50,
    )  # fmt: skip
    np.testing.assert_array_equal(sim.z_rest, direct.z_rest)
    for f in pokes(X, 3, seed=3):
        sim.step(FrameInputs(forces=f))
        direct.step(FrameInputs(forces=f))
        np.testing.assert_array_equal(sim.positions(), direct.positions())
    with pytest.raises(CacheError):
        load_simulator(path, expect_mesh_hash="0" * 64)


def test_preconditioner_cuts_lbfgs_iterations():
    """Eq. (15) against the scaled identity of plain L-BFGS, same decoder and frames.

    Measured here (8x2x2 beam, k = 10, r = 6, width 24, 10 frames, gravity + pokes, eps =
    1e-6): 9.3 vs 25.3 L-BFGS iterations per frame (max 11 vs 30); with a width-100 decoder
    over 24 frames 5.2 vs 20.6. Both land on the same positions.
    """
    X, T, pinned, sub = beam()
    dec = elu_decoder(6, sub.k, seed=1)
    s = SimSettings(dt=1 / 24, damping_alpha=0.5, damping_beta=0.002)
    F = pokes(X, 10, seed=0, scale=1.0)
    iters, pos = {}, {}
    for pre in (True, False):
        lat = AutoencoderSimulation(
            X, T, MAT, sub.U, dec, s, pinned=pinned, preconditioner=pre, max_iters=500
        )
        iters[pre] = [lat.step(FrameInputs(forces=f)).newton_iters for f in F]
        pos[pre] = lat.positions()
    assert np.mean(iters[True]) * 2 < np.mean(iters[False]), iters
    assert max(iters[True]) <= 12
    np.testing.assert_allclose(pos[True], pos[False], atol=1e-7)
    assert np.abs(pos[True] - X).max() > 1e-3
