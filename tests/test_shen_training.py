"""Shen 2021 training (training/shen): the filter folded into the exported networks
(U^T M D = 0), the export against torch, the sin initialization's smoothness, the pose
weights, resume after a cancel, and a trained model stepped by the runtime against the
torch model."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from neural_rom.core import bake as bk
from neural_rom.core import registry
from neural_rom.core.data.modelfile import load_model
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.errors import JobCancelled
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics.fem import Material
from neural_rom.core.registry import load_simulator
from neural_rom.training.nets import sin_mlp

TINY = dict(
    k=8,
    n_p=3,
    latent_dim=2,
    hidden=[16] * 6,
    epochs=60,
    patience=1000,
    checkpoint_every=20,
    max_cubature=40,
    cubature_poses=30,
    rollout=False,
)


@pytest.fixture(scope="module")
def bakes(tmp_path_factory):
    d = tmp_path_factory.mktemp("bakes")
    X, T = grid_tetmesh((0.5, 0.1, 0.1), (10, 2, 2))
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=2e5, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario={"kind": "random_pokes", "count": 3, "strength": 1.5, "duration": 0.4},
        frames=30,
        pinned=np.flatnonzero(X[:, 0] < 1e-9).tolist(),
        damping=(0.5, 0.0),
        seed=11,
        variants=4,
    )
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, d, "pokes")
    return SimpleNamespace(paths=paths, X=X, T=T)


@pytest.fixture(scope="module")
def reference(bakes, tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    res = registry.get("shen").trainer_function()(
        bakes.paths,
        d / "ref.nrmodel",
        registry.get("shen").values(dict(**TINY)),
        checkpoint_dir=d / "ckpt",
        device="cpu",
    )
    return SimpleNamespace(res=res, path=d / "ref.nrmodel", model=load_model(d / "ref.nrmodel"))


def test_model_file_filter_and_shapes(bakes, reference):
    res, model = reference.res, reference.model
    print(
        {
            k: res[k]
            for k in (
                "n_p",
                "latent_dim",
                "max_error_val_m",
                "pca_same_dofs_max_error_val_m",
                "pca_np_max_error_val_m",
                "cubature_elements",
                "train_seconds",
            )
        }
    )
    assert model.method == "shen" and res["dofs"] == 5
    sim, _ = load_simulator(reference.path)
    # the filter: the nonlinear part has no component along the first n_p PCA modes,
    # so U^T M D^ = 0 and U^T M J^ = 0 exactly
    rng = np.random.default_rng(0)
    for _ in range(3):
        z = rng.normal(size=sim.decoder.in_dim)  # [p; z] (the decoder reads p)
        MU = sim.U[:, :3] * np.repeat(sim.mass, 3)[:, None]
        D = sim.U @ sim.decoder.forward(z)
        J = sim.U @ sim.decoder.jacobian(z)
        for A in (D, J):  # zero to rounding (the coordinates are exactly zero)
            assert np.abs(MU.T @ A).max() < 1e-14 * np.abs(MU).sum(0).max() * np.abs(A).max()
            assert np.abs(np.linalg.lstsq(sim.U, A, rcond=None)[0][:3]).max() < 1e-14
    # rest decodes to rest
    np.testing.assert_allclose(sim.positions(), bakes.X, atol=1e-12)
    assert res["max_error_val_m"] < 2 * res["pca_np_max_error_val_m"]


def test_sin_initialization_is_smooth_at_the_data_scale():
    """The initial network's second derivative along a unit-scale path is of the order of its
    first (no high-frequency wiggles, Fig. 2); SIREN's omega = 30 is far rougher."""
    torch.manual_seed(0)
    t = torch.linspace(-1, 1, 401, dtype=torch.float64)[:, None]
    rough = []
    for omega in (1.0, 30.0):
        net = sin_mlp([1, 32, 32, 32, 32, 32, 32, 4], omega).to(torch.float64)
        with torch.no_grad():
            y = net(t).numpy()
        d1 = np.diff(y, axis=0) / 0.005
        d2 = np.diff(y, 2, axis=0) / 0.005**2
        rough.append(float(np.abs(d2).mean() / np.abs(d1).mean()))
    print(f"|y''| / |y'| on [-1, 1]: omega 1: {rough[0]:.2f}, omega 30: {rough[1]:.1f}")
    assert rough[0] < 5 and rough[1] > 50 * rough[0]


def test_cancel_then_resume_gives_the_uninterrupted_weights(bakes, reference, tmp_path):
    calls = {"n": 0}

    def cancel():
        calls["n"] += 1
        return calls["n"] > 40  # mid-way through the network's epochs

    with pytest.raises(JobCancelled):
        registry.get("shen").trainer_function()(
            bakes.paths,
            tmp_path / "m.nrmodel",
            registry.get("shen").values(dict(**TINY)),
            checkpoint_dir=tmp_path / "ckpt",
            should_cancel=cancel,
            device="cpu",
        )
    res = registry.get("shen").trainer_function()(
        bakes.paths,
        tmp_path / "m.nrmodel",
        registry.get("shen").values(dict(**TINY)),
        checkpoint_dir=tmp_path / "ckpt",
        device="cpu",
    )
    assert res["epochs_run"] < TINY["epochs"]
    a, b = load_model(tmp_path / "m.nrmodel").arrays, reference.model.arrays
    for k in a:
        if k.startswith(("dec_", "enc_")):
            np.testing.assert_array_equal(a[k], b[k])


def test_runtime_steps_the_trained_model(bakes, reference):
    """The trained model under a poke: Newton converges in few iterations per step."""
    sim, _ = load_simulator(reference.path)
    f = np.zeros_like(bakes.X)
    f[-4:, 2] = -0.5
    iters = []
    for i in range(24):
        rep = sim.step(FrameInputs(forces=f if i < 8 else np.zeros_like(f)))
        assert rep.converged
        iters.append(rep.newton_iters)
    moved = float(np.abs(sim.positions() - bakes.X).max())
    print(f"Newton iterations {iters}; fallbacks {sim.fallbacks}; moved {moved * 1000:.1f} mm")
    assert moved > 1e-3 and np.mean(iters) < 6


def test_numpy_export_equals_torch_with_omega_scale_and_filter():
    """to_numpy folds omega, the input/output scales and the filter's zero rows/columns:
    forward and Jacobian equal torch's (float64) to rounding, and the jet's H[dq, dq]
    equals torch's second derivative."""
    from neural_rom.core.methods.shen.hocs import jet
    from neural_rom.training.shen import to_numpy

    torch.manual_seed(1)
    net = sin_mlp([3, 16, 16, 16, 5], 1.7).to(torch.float64)
    dec = to_numpy(net, 1.7, in_scale=2.0, out_scale=0.3, pad_out=2)
    z = np.random.default_rng(0).normal(size=3)
    dq = np.random.default_rng(1).normal(size=3)

    def f(t):
        return net(t / 2.0) * 0.3

    zt = torch.as_tensor(z)
    y = f(zt).detach().numpy()
    J = torch.autograd.functional.jacobian(f, zt).numpy()
    H = torch.autograd.functional.hessian(lambda t: f(t) @ torch.ones(5, dtype=torch.float64), zt)
    jt = jet(dec, z, dq)
    np.testing.assert_array_equal(jt.y[:2], 0.0)
    np.testing.assert_allclose(jt.y[2:], y, rtol=0, atol=1e-14)
    np.testing.assert_allclose(jt.J[2:], J, rtol=0, atol=1e-13)
    np.testing.assert_allclose(jt.Hdd[2:].sum(), dq @ H.numpy() @ dq, rtol=1e-12)


def test_latent_size_from_a_tolerance(bakes, tmp_path):
    """Latent Size 0: sizes 1, 2, 4, ... until the held-out error meets the tolerance; a
    tolerance nothing meets tries every size up to the cap and keeps the most accurate, with
    a warning."""
    base = {**TINY, "latent_dim": None, "epochs": 20}
    easy = registry.get("shen").trainer_function()(
        bakes.paths,
        tmp_path / "a.nrmodel",
        registry.get("shen").values(dict(**base, latent_tolerance=1.0)),
        device="cpu",
    )
    assert [s["latent_dim"] for s in easy["latent_search"]] == [1] and easy["latent_dim"] == 1
    hard = registry.get("shen").trainer_function()(
        bakes.paths,
        tmp_path / "b.nrmodel",
        registry.get("shen").values(dict(**base, latent_tolerance=1e-6, max_latent_dim=3)),
        device="cpu",
    )
    tried = [s["latent_dim"] for s in hard["latent_search"]]
    errs = {s["latent_dim"]: s["max_error_val_m"] for s in hard["latent_search"]}
    print("tried", tried, "errors mm", {k: round(v * 1000, 2) for k, v in errs.items()})
    assert tried == [1, 2, 3] and hard["latent_dim"] == min(errs, key=errs.get)
    assert any("reached the latent tolerance" in w for w in hard["warnings"])
