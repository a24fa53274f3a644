"""Subspace Neural Physics (Holden et al. 2019): the initial model's fit, the window loss and
its gradient through the whole rollout, the torch-free runtime against the torch rollout,
state save/restore, clipping, and a soft block pressed by a sphere (our FEM bakes): the
held-out rollout of whole bakes against the initial model alone and the PCA floor.
"""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from neural_rom.core import bake as bk  # noqa: E402
from neural_rom.core import registry  # noqa: E402
from neural_rom.core.data.cache import BakeCache  # noqa: E402
from neural_rom.core.engine.protocol import FrameInputs  # noqa: E402
from neural_rom.core.engine.replay import closest_shapes, replay_bake  # noqa: E402
from neural_rom.core.errors import JobCancelled, SimulationError  # noqa: E402
from neural_rom.core.geometry.grid import grid_tetmesh  # noqa: E402
from neural_rom.core.methods.snp import METHOD, SNPBatch, SNPSimulation  # noqa: E402
from neural_rom.core.physics.colliders import Collider  # noqa: E402
from neural_rom.core.physics.fem import Material  # noqa: E402
from neural_rom.core.physics.sim import SimSettings  # noqa: E402
from neural_rom.training.nets import build_mlp  # noqa: E402
from neural_rom.training.snp import fit_initial_model, rollout, window_loss  # noqa: E402

from .bench_modules import load_bench  # noqa: E402

DT = 1.0 / 24.0
# The block's model: the defaults (contact features automatic: on for these soft-body bakes
# with a moving collider; learning rate automatic: 3e-3 at u = 18) but 40 epochs (the
# automatic 100 overfit four bakes) and two of the six bakes held out, whole.
SETTINGS = registry.get("snp").values(dict(epochs=40, validation_fraction=1 / 3))
# Measured on the block below (216 tets, pressed by a sphere: bench/snp.py's PRESSES, 6 bakes
# of 72 frames, 4 trained on, SETTINGS, batches of 8, u = 18; 10-17 s of training on one core,
# load 2-6): held-out mean vertex error 2.659 mm with the network, 6.178 mm with the initial
# model alone (eq. 1): 0.430x (per bake 0.447x and 0.409x); 0.319 mm for the PCA projection
# (the floor), 8.3x. The pair is easier than most: the same four training bakes judged on 12
# other bakes of the scene give 0.510x (per bake 0.43-0.71, median 0.50), and without contact features
# 0.911x over those 12 (training/snp's docstring has the table). Bounds: the 0.6x
# and 10x the floor (training is deterministic on one thread).
RATIO_INITIAL = 0.60
FLOOR_FACTOR = 10.0
# Colliders ten times farther out, spun and removed: largest displacement 14.2 mm against the
# bakes' 72.4 mm. Bound: never beyond what the bakes showed.
BOUNDED_FACTOR = 1.0
# Zeroing the collider input moves the prediction by 9.09 mm (median of 16 contact frames).
CONTACT_CHANGE_M = 3e-3
# In the frame whose sweep differs most from a sphere that stayed where it ended (26 mm deep
# into the rest block; the sphere moves at most 4 cm a frame), the sweep moves the prediction
# by 4.90 mm.
SWEEP_CHANGE_M = 2e-3


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------
# The initial model (eq. 1-2)
# ------------------------------------------------------------------------------------------


def damped(r, theta, z0, z1, length):
    """Samples of damped oscillators ``r^t cos(theta t + phi)``: they obey
    ``z_t = 2 r cos(theta) z_{t-1} - r^2 z_{t-2}``, i.e. eq. (1) with ``beta = r^2`` and
    ``alpha = 2 r cos(theta) - r^2``."""
    z = [np.asarray(z0, float), np.asarray(z1, float)]
    for _ in range(length - 2):
        z.append(2 * r * np.cos(theta) * z[-1] - r**2 * z[-2])
    return np.array(z)


def test_initial_model_is_the_least_squares_fit_and_recovers_damped_oscillators():
    r, theta = np.array([0.97, 0.9, 0.995]), np.array([0.3, 0.7, 0.05])
    a = [
        damped(r, theta, [1.0, 0.5, -0.2], [0.9, 0.6, -0.1], 60),
        damped(r, theta, [-1.0, 2.0, 0.3], [-0.5, 1.5, 0.35], 40),
    ]
    alpha, beta = fit_initial_model(a)
    # exact recovery: the two bakes are never paired across their boundary (pairing them
    # would break the recurrence at the seam)
    np.testing.assert_allclose(alpha, 2 * r * np.cos(theta) - r**2, atol=1e-10)
    np.testing.assert_allclose(beta, r**2, atol=1e-10)
    # with noise: the same as a direct least-squares solve of eq. (2), mode by mode
    rng = np.random.default_rng(0)
    noisy = [z + 0.01 * rng.normal(size=z.shape) for z in a]
    alpha, beta = fit_initial_model(noisy)
    for m in range(3):
        A = np.concatenate([np.stack([z[1:-1, m], z[1:-1, m] - z[:-2, m]], 1) for z in noisy])
        t = np.concatenate([z[2:, m] for z in noisy])
        np.testing.assert_allclose([alpha[m], beta[m]], np.linalg.pinv(A) @ t, rtol=1e-10)


# ------------------------------------------------------------------------------------------
# The window loss and its gradient (Algorithm 1)
# ------------------------------------------------------------------------------------------


def _window_problem(seed=0, u=4, v=3, S=12, B=3):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = build_mlp([2 * u + v, 8, 8, u], "relu").double()
    z = torch.randn(B, S, u, generator=g, dtype=torch.float64).cumsum(1) * 0.1
    w = torch.randn(B, S, v, generator=g, dtype=torch.float64)
    alpha = torch.full((u,), 0.98, dtype=torch.float64)
    beta = torch.full((u,), 0.8, dtype=torch.float64)
    big = torch.full((u,), 1e6, dtype=torch.float64)
    return net, z, w, (alpha, beta, 0.5, -big, big)


def _loss(net, z, w, args, detach=False):
    pred = rollout(net, z[:, 0], z[:, 1], w, *args, detach=detach)
    return window_loss(pred, z, args[2], DT)


def test_window_loss_gradient_matches_finite_differences_in_float64():
    net, z, w, args = _window_problem()
    params = list(net.parameters())
    loss = _loss(net, z, w, args)
    grads = torch.autograd.grad(loss, params)
    rng = np.random.default_rng(1)
    d = [torch.as_tensor(rng.normal(size=p.shape)) for p in params]
    analytic = sum(float((g * e).sum()) for g, e in zip(grads, d))
    eps = 1e-6

    def at(sign):
        with torch.no_grad():
            for p, e in zip(params, d):
                p.add_(sign * eps * e)
            value = float(_loss(net, z, w, args))
            for p, e in zip(params, d):
                p.sub_(sign * eps * e)
        return value

    numeric = (at(1) - at(-1)) / (2 * eps)
    assert abs(numeric - analytic) <= 1e-6 * abs(analytic), (numeric, analytic)


def test_the_gradient_flows_through_the_whole_window():
    """Cutting the rollout between frames leaves the loss as it is but changes the gradient:
    training backpropagates through the fed-back predictions, it does not teacher-force."""
    net, z, w, args = _window_problem(seed=2)
    params = list(net.parameters())
    full, cut = _loss(net, z, w, args), _loss(net, z, w, args, detach=True)
    assert float(full.detach()) == float(cut.detach())
    g_full = torch.cat([g.ravel() for g in torch.autograd.grad(full, params)])
    g_cut = torch.cat([g.ravel() for g in torch.autograd.grad(cut, params)])
    assert float((g_full - g_cut).norm()) > 0.05 * float(g_full.norm())


# ------------------------------------------------------------------------------------------
# A soft block pressed by a sphere: our FEM bakes
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    d = tmp_path_factory.mktemp("snp")
    X, T = grid_tetmesh((0.2, 0.2, 0.3), (3, 3, 4))
    spec = load_bench("snp").block_spec(X, frames=72, variants=6)  # pressed by a sphere
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, d, "block")
    out = d / "block.nrmodel"
    res = registry.get("snp").trainer_function()(paths, out, SETTINGS, checkpoint_dir=d / "ckpt")
    sim, model = registry.load_simulator(out)
    return SimpleNamespace(paths=paths, X=X, T=T, res=res, out=out, sim=sim, model=model, dir=d)


def heldout(block, i=0):
    """The i-th held-out bake and its scenario driver."""
    from neural_rom.core.bake import BakeSpec, setup_scenario

    val = block.model.metadata["validation_trajectories"]
    cache = BakeCache.open(block.paths[val[i]])
    _, driver = setup_scenario(block.X, block.T, BakeSpec.from_dict(cache.meta["spec"]))
    return cache, driver


def mean_error(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1).mean())


def test_heldout_rollout_beats_the_initial_model_near_the_pca_floor(block):
    """The held-out bakes replayed through the model file as a user loads it: the network
    improves on eq. (1) alone and stays within a stated factor of the PCA floor."""
    val = block.model.metadata["validation_trajectories"]
    errors = {"snp": [], "initial": [], "floor": [], "pushed": []}
    for i in range(len(val)):
        cache, driver = heldout(block, i)
        full = np.asarray(cache.positions)
        pushed = mean_error(replay_bake(block.sim, cache, driver)[1:], full[1:])
        block.sim.push_out = False  # the trainer's measure has no render-time push-out
        try:
            snp = replay_bake(block.sim, cache, driver)
        finally:
            block.sim.push_out = True
        alone = SNPSimulation(replace(block.sim.p, net=None), block.sim.settings)
        alone.push_out = False
        initial = replay_bake(alone, cache, driver)
        errors["snp"].append(mean_error(snp[1:], full[1:]))
        errors["initial"].append(mean_error(initial[1:], full[1:]))
        errors["floor"].append(mean_error(closest_shapes(block.sim, full[1:]), full[1:]))
        errors["pushed"].append(pushed)
        print(
            f"held-out bake {val[i]}: model {1e3 * errors['snp'][-1]:.3f} mm, initial model "
            f"{1e3 * errors['initial'][-1]:.3f} mm "
            f"({errors['snp'][-1] / errors['initial'][-1]:.3f}x), PCA floor "
            f"{1e3 * errors['floor'][-1]:.3f} mm"
        )
    # the bakes have the same length: the mean over their frames is the mean of their means
    e_snp, e_init, e_floor, pushed = (float(np.mean(errors[k])) for k in errors)
    print(
        f"{len(val)} held-out bakes: model {1e3 * e_snp:.3f} mm, initial model "
        f"{1e3 * e_init:.3f} mm ({e_snp / e_init:.3f}x), PCA floor {1e3 * e_floor:.3f} mm "
        f"({e_snp / e_floor:.1f}x); training {block.res['train_seconds']:.1f} s; with the "
        f"render-time push-out (sec. 6.4) {1e3 * pushed:.3f} mm"
    )
    assert pushed <= e_snp
    # the trainer's own measure (latent rollouts) is the same replay
    res = block.res
    assert res["heldout_mean_error_m"] == pytest.approx(e_snp, rel=1e-9)
    assert res["initial_model_mean_error_m"] == pytest.approx(e_init, rel=1e-9)
    assert res["projection_mean_error_m"] == pytest.approx(e_floor, rel=1e-9)
    assert e_snp < RATIO_INITIAL * e_init
    assert e_snp < FLOOR_FACTOR * e_floor
    assert res["method"] == "snp" and res["rollout"]["frames"] == 72
    # chosen automatically: a soft body pressed by a moving sphere, 18 modes
    assert res["contact_features"] is True and block.sim.p.contact
    assert res["k"] == 18 and res["learning_rate"] == 3e-3
    # no advice about modes and cubature, which a learned model without a solve has not
    assert not [w for w in res["warnings"] if "cubature" in w]


def torch_copy(mlp):
    """The model's network as a float64 torch module."""
    net = build_mlp(list(mlp.sizes), "relu").double()
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for m, W, b in zip(linears, mlp.W, mlp.b):
            m.weight.copy_(torch.as_tensor(W))
            m.bias.copy_(torch.as_tensor(b))
    return net


def ping_pong(driver, frames):
    """The held-out bake's colliders played forward and back for ``frames`` frames."""
    F = len(driver.forces)
    cycle = list(range(F)) + list(range(F - 2, 0, -1))
    return [driver.colliders(cycle[t % len(cycle)]) for t in range(1, frames + 1)]


def test_runtime_reproduces_the_torch_rollout_over_500_frames(block):
    _, driver = heldout(block)
    p = block.sim.p
    sim = SNPSimulation(p, block.sim.settings)
    z_start = (sim.z2.copy(), sim.z1.copy())
    W, Z = [], []
    for cols in ping_pong(driver, 500):
        poses = (sim.poses[0],) * 3  # no pins move: the frame stays the world
        W.append(p.encoder.encode(sim.features(cols, poses, sim.colliders)))
        sim.step(FrameInputs(colliders=cols))
        Z.append(sim.z1)
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    w = torch.cat([t(W[:1]), t(W[:1]), t(W)])[None]  # two leading frames: the start state
    with torch.no_grad():
        ref = rollout(
            torch_copy(p.net),
            t(z_start[0])[None],
            t(z_start[1])[None],
            w,
            t(p.alpha),
            t(p.beta),
            p.scale,
            t(p.z_lo),
            t(p.z_hi),
            in_scale=None if p.input_scale is None else t(p.input_scale),
        )[0, 2:].numpy()
    err = np.abs(np.array(Z) - ref).max() / np.abs(ref).max()
    print(f"numpy runtime against float64 torch over 500 frames: {err:.2e} relative")
    assert err < 1e-9


def test_state_restores_bit_identically_mid_run(block):
    _, driver = heldout(block)
    frames = ping_pong(driver, 80)
    sim = SNPSimulation(block.sim.p, block.sim.settings)
    for cols in frames[:40]:
        sim.step(FrameInputs(colliders=cols))
    state = copy.deepcopy(sim.get_state())
    kept = sim.get_state()  # kept as handed out, the way the frame cache keeps it

    def rest_of_run(s):
        out = []
        for cols in frames[40:]:
            s.step(FrameInputs(colliders=cols))
            out.append(s.positions())
        return np.array(out)

    first = rest_of_run(sim)
    sim.z1[:], sim.z2[:] = np.nan, np.nan  # the steps, and the simulator's arrays changed
    assert all(np.array_equal(kept[k], state[k]) for k in ("z1", "z2"))  # change no kept state
    sim.set_state(state)
    np.testing.assert_array_equal(rest_of_run(sim), first)
    other, _ = registry.load_simulator(block.out)  # a fresh simulator continues the same
    other.set_state(copy.deepcopy(state))
    np.testing.assert_array_equal(rest_of_run(other), first)


def test_a_batch_steps_like_separate_simulators_and_restores_each_instance(block):
    """Six instances with their own inputs (shifted and resized spheres, a frame without
    colliders, no collider at all, a swinging clamp, which moves the reference frame) in one
    network pass per frame give what six simulators give, over 50 frames; each instance's
    state moves between the batch and a single simulator."""
    _, driver = heldout(block)
    p, settings = block.sim.p, block.sim.settings
    B, frames = 6, 50
    base = ping_pong(driver, frames)
    rest = p.X[p.pinned]
    centre = rest.mean(0)

    def moved(cols, dx, scale):
        out = []
        for c in cols:
            M = np.array(c.transform)
            M[:3, 3] += dx
            out.append(Collider(c.kind, radius=scale * c.radius, transform=M))
        return out

    def inputs(b, t):
        if b == 3 and t % 2:
            return FrameInputs()  # keeps the last colliders
        if b == 4:
            return FrameInputs(colliders=[])  # the slot gets the far collider
        if b == 5:
            a = 0.3 * np.sin(t / 6)
            R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
            pins = (rest - centre) @ R.T + centre + [0.02 * np.sin(t / 5), 0.0, 0.0]
            return FrameInputs(colliders=base[t], pin_targets=pins)
        return FrameInputs(colliders=moved(base[t], [0.01 * b, -0.005 * b, 0.0], 1 + 0.1 * b))

    batch = SNPBatch(p, B, settings)
    singles = [SNPSimulation(p, settings) for _ in range(B)]
    worst, saved, after = 0.0, None, []
    for t in range(frames):
        ins = [inputs(b, t) for b in range(B)]
        batch.step(ins)
        for sim, i in zip(singles, ins):
            sim.step(i)
        x = batch.positions()
        worst = max(worst, max(np.abs(x[b] - s.positions()).max() for b, s in enumerate(singles)))
        if t == 24:
            saved = [copy.deepcopy(batch.get_state(b)) for b in range(B)]
        if t > 24:
            after.append(x)
    print(f"batch of {B} against {B} simulators over {frames} frames: {worst:.1e} m")
    assert worst <= 1e-12
    # the inputs matter: the instances went different ways
    spread = np.linalg.norm(x - x[0], axis=-1).max(axis=1)
    assert np.all(spread[1:] > 1e-4), spread
    assert batch.poses[5][0] is not batch.poses[0][0]  # the swinging clamp moved its frame

    # a fresh batch restored instance by instance continues bit-identically
    again = SNPBatch(p, B, settings)
    for b in reversed(range(B)):
        again.set_state(b, saved[b])
    replay = []
    for t in range(25, frames):
        again.step([inputs(b, t) for b in range(B)])
        replay.append(again.positions())
    np.testing.assert_array_equal(np.array(replay), np.array(after))
    # and an instance's state continues in a single simulator
    single = SNPSimulation(p, settings)
    single.set_state(copy.deepcopy(saved[5]))
    for t in range(25, frames):
        single.step(inputs(5, t))
    assert np.abs(single.positions() - after[-1][5]).max() <= 1e-12
    assert single.get_state()["frame"] == again.get_state(5)["frame"] == frames


def test_inputs_far_outside_the_training_range_stay_bounded(block):
    """Colliders moved ten times as far from the block as in training, spun, and removed:
    the clipping of sec. 8.1 keeps the block within what training saw."""
    _, driver = heldout(block)
    centre = 0.5 * (block.X.min(0) + block.X.max(0))
    seen = max(
        np.linalg.norm(np.asarray(BakeCache.open(p).positions) - block.X, axis=-1).max()
        for p in block.paths
    )
    sim = SNPSimulation(block.sim.p, block.sim.settings)
    worst = 0.0
    rng = np.random.default_rng(0)
    for t, cols in enumerate(ping_pong(driver, 300)):
        far = []
        for c in cols:
            M = np.array(c.transform)
            M[:3, 3] = centre + 10.0 * (M[:3, 3] - centre)
            M[:3, :3] = np.linalg.qr(rng.normal(size=(3, 3)))[0]
            far.append(Collider(c.kind, radius=10 * c.radius, transform=M))
        sim.step(FrameInputs(colliders=far if t % 50 < 45 else []))
        x = sim.positions()
        assert np.all(np.isfinite(x))
        worst = max(worst, float(np.linalg.norm(x - block.X, axis=-1).max()))
    print(f"largest displacement {1e3 * worst:.1f} mm; the bakes' {1e3 * seen:.1f} mm")
    assert worst <= BOUNDED_FACTOR * seen


def test_the_network_uses_the_colliders_during_contact(block):
    """Setting the collider input to zero (the training mean) changes the prediction in the
    frames where the sphere touches the block: the network reads it."""
    cache, driver = heldout(block)
    full = np.asarray(cache.positions)
    p = block.sim.p
    sim = SNPSimulation(p, block.sim.settings)
    sim.start_from(driver.x0, driver.v0)
    changes, touching = [], []
    for f in range(1, len(full)):
        cols = driver.colliders(f)
        sphere = cols[0]
        gap = np.linalg.norm(full[f] - sphere.transform[:3, 3], axis=1).min() - sphere.radius
        w = p.encoder.encode(sim.features(cols, (sim.poses[0],) * 3, sim.colliders))
        z_with = sim.predict(sim.z1, sim.z2, w)
        z_zero = sim.predict(sim.z1, sim.z2, np.zeros_like(w))
        change = np.linalg.norm(sim.decode(z_with) - sim.decode(z_zero), axis=1).max()
        (touching if gap < 0 else changes).append(change)
        sim.step(FrameInputs(colliders=cols))
    print(
        f"{len(touching)} contact frames: the prediction moves by "
        f"{1e3 * np.median(touching):.2f} mm (median) when the collider input is zeroed"
    )
    assert len(touching) >= 5
    assert np.median(touching) > CONTACT_CHANGE_M


def test_model_plays_without_torch_and_refuses_another_frame_rate(block, tmp_path):
    cache, driver = heldout(block)
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np\n"
        "from neural_rom.core.registry import load_simulator\n"
        "from neural_rom.core.bake import BakeSpec, setup_scenario\n"
        "from neural_rom.core.data.cache import BakeCache\n"
        "from neural_rom.core.engine.replay import replay_bake\n"
        f"c = BakeCache.open({str(cache.path)!r})\n"
        "_, d = setup_scenario(np.asarray(c.X), np.asarray(c.T), BakeSpec.from_dict(c.meta['spec']))\n"
        f"sim, _ = load_simulator({str(block.out)!r})\n"
        f"np.save({str(tmp_path / 'child.npy')!r}, replay_bake(sim, c, d))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sim, _ = registry.load_simulator(block.out)
    np.testing.assert_array_equal(np.load(tmp_path / "child.npy"), replay_bake(sim, cache, driver))
    with pytest.raises(SimulationError, match="trained at 0.0416667 s per frame.*fps"):
        registry.load_simulator(block.out, settings=SimSettings(dt=1 / 30))


def test_training_resumes_from_its_checkpoint_to_the_same_model(block, tmp_path):
    # keep_best: the best epoch's weights and error travel in the checkpoint too
    s = registry.get("snp").values(
        dict(epochs=6, checkpoint_every=2, rollout=False, window=16, keep_best=True)
    )
    whole = registry.get("snp").trainer_function()(
        block.paths, tmp_path / "a.nrmodel", s, checkpoint_dir=tmp_path / "a"
    )
    calls = []

    def cancel_at_epoch_5():
        calls.append(1)
        return len(calls) > 5  # one check before the basis, then one per epoch

    with pytest.raises(JobCancelled, match="epoch 4"):
        registry.get("snp").trainer_function()(
            block.paths,
            tmp_path / "b.nrmodel",
            s,
            checkpoint_dir=tmp_path / "b",
            should_cancel=cancel_at_epoch_5,
        )
    resumed = registry.get("snp").trainer_function()(
        block.paths, tmp_path / "b.nrmodel", s, checkpoint_dir=tmp_path / "b"
    )
    assert resumed["epochs_trained"] == whole["epochs_trained"] == 6
    assert resumed["best_epoch"] == whole["best_epoch"]
    a, _ = registry.load_simulator(whole["model"])
    b, _ = registry.load_simulator(resumed["model"])
    for Wa, Wb in zip(a.p.net.W + a.p.net.b, b.p.net.W + b.p.net.b):
        np.testing.assert_array_equal(Wa, Wb)


def forced_oscillators(sequences=24, length=40, u=4, seed=0):
    """PCA-like coordinates of damped oscillators driven through a saturating function of a
    random-walk external input: eq. (1) cannot explain the forcing, the network can."""
    rng = np.random.default_rng(seed)
    r, theta = 0.95, 0.3
    gain = np.outer(np.ones(2), np.arange(1, u + 1) / u)
    Z, W = [], []
    for _ in range(sequences):
        w = np.cumsum(rng.normal(size=(length, 2)), axis=0) * 0.3
        z = np.zeros((length, u))
        z[1] = 0.1 * rng.normal(size=u)
        for t in range(2, length):
            z[t] = 2 * r * np.cos(theta) * z[t - 1] - r**2 * z[t - 2] + 0.05 * np.tanh(w[t] @ gain)
        Z.append(z)
        W.append(w)
    return Z, W


def net_trainer(settings, Z, W, Z_val=(), W_val=(), noise_floor=1.0):
    """The trainer's network stage (``NetTrainer``) on coordinates ``Z`` and inputs ``W``
    (held out: ``Z_val``, ``W_val``), with no checkpoints."""
    from neural_rom.training.snp import NetTrainer, fit_initial_model

    alpha, beta = fit_initial_model(Z)
    Zc = np.concatenate(Z)
    return NetTrainer(
        settings, Z, W, list(Z_val), list(W_val), alpha, beta, float(Zc[:, 0].std()),
        Zc.min(0), Zc.max(0), DT, 10, torch.device("cpu"),
        SimpleNamespace(file=lambda *a: None), lambda: False, lambda values: None,
        lambda *a: None, in_scale=Zc.std(0), noise_floor=noise_floor,
    )  # fmt: skip


def train_network(Z, W, settings):
    """The trainer's network stage alone on coordinates ``Z`` and inputs ``W``: the network,
    its largest hidden weight, and its windows' rollout error over eq. (1)'s alone."""
    trainer = net_trainer(settings, Z, W)
    net, _ = trainer.fit(deadline=float("inf"))
    hidden = [m.weight for m in net if isinstance(m, torch.nn.Linear)][:-1]
    largest = max(float(w.detach().abs().max()) for w in hidden)
    with torch.no_grad():
        z, w = trainer.Zw, trainer.Ww
        pred = rollout(net, z[:, 0], z[:, 1], w, *trainer._args(), in_scale=trainer.in_scale)
        alone = rollout(None, z[:, 0], z[:, 1], w, *trainer._args())
    ratio = float((pred - z)[:, 2:].abs().mean() / (alone - z)[:, 2:].abs().mean())
    return largest, ratio, len(trainer.windows)


def test_training_noise_follows_each_modes_spread_above_the_floor():
    """``noise_floor`` 1 gives every mode the first mode's noise (the former rule, drawn
    bit for bit as before: ``noise`` times ``s``); 0 each mode its own spread's share; in
    between, the small modes get the floor's share of the first's. Automatic: 0.1 where the
    reference frame moves in a training sequence, else 1."""
    from neural_rom.core.reduced.pose import IDENTITY, Pose
    from neural_rom.training.snp import Sequence, noise_floor, noise_scales

    _, W = forced_oscillators(sequences=6, u=4)
    rng = np.random.default_rng(0)  # coordinates whose spread falls with the mode, as PCA's
    Z = [rng.normal(size=(len(w), 4)) * [1.0, 0.3, 0.05, 0.01] for w in W]
    std = np.concatenate(Z).std(0)
    for floor in (1.0, 0.0, 0.5):
        got = net_trainer(
            registry.get("snp").values(dict(noise=0.02)), Z, W, noise_floor=floor
        ).noise_sd
        want = 0.02 * np.minimum(np.maximum(std, floor * std[0]), std[0])
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_array_equal(got, noise_scales(np.concatenate(Z), 0.02, floor))
    # floor 1: exactly the former ``noise * s`` for every mode (``s``: the first mode's spread)
    s = float(np.concatenate(Z)[:, 0].std())
    assert np.all(
        net_trainer(registry.get("snp").values(dict(noise=0.02)), Z, W).noise_sd == 0.02 * s
    )
    still = Sequence(Z[0], W[0], [IDENTITY] * len(Z[0]), 0)
    walks = Sequence(Z[1], W[1], [IDENTITY, Pose(np.eye(3), np.array([0.0, 0.1, 0.0]))], 1)
    assert noise_floor(registry.get("snp").values(), [still]) == 1.0
    assert noise_floor(registry.get("snp").values(), [still, walks]) == 0.1
    assert noise_floor(registry.get("snp").values(dict(noise_floor=0.3)), [still, walks]) == 0.3


@pytest.mark.parametrize("keep_best", [True, False])
def test_keep_best_returns_the_epoch_with_the_least_held_out_rollout_error(keep_best):
    """A learning rate far too high (0.05) makes the held-out rollout error jump from epoch to
    epoch; with ``keep_best`` the trainer returns the epoch whose held-out rollouts erred
    least (the initial model alone, epoch 0, when none beat it), otherwise the last one."""
    Z, W = forced_oscillators(sequences=24)
    s = registry.get("snp").values(
        dict(epochs=8, batch_size=8, window=8, learning_rate=0.05, keep_best=keep_best)
    )
    trainer = net_trainer(s, Z[:18], W[:18], Z[18:], W[18:])
    seen = []
    measure = trainer.validation_rms
    trainer.validation_rms = lambda net: seen.append(measure(net)) or seen[-1]
    net, state = trainer.fit(deadline=float("inf"))
    final = measure(net)
    print(f"keep_best {keep_best}: held-out rollout rms by epoch {np.round(seen, 5)}, "
          f"returned {final:.5f} (epoch {state['best_epoch']})")  # fmt: skip
    if keep_best:
        assert len(seen) == 9  # the initial model, then every epoch
        assert final == min(seen) and state["best_epoch"] == int(np.argmin(seen))
        assert final <= seen[0]
        assert max(seen) > 1.2 * min(seen)  # the epochs did differ: the choice mattered
    else:
        assert final == seen[-1]  # the last epoch's (measured at the end, whatever the throttle)


def test_a_strong_weight_decay_pulls_to_the_initial_model_and_never_kills_the_network(
    monkeypatch,
):
    """Many windows an epoch (24 sequences of windows of 8: 792 windows, 99 steps an epoch)
    and a strong weight decay (1). Adam's own weight decay (an L2 term added to the gradient,
    then normalized: each hidden weight shrinks by about the learning rate a step while the
    zero last layer gives it no loss gradient) pulled every weight to zero, so the model was
    eq. (1) alone (20 bakes of the block of bench/snp.py --accuracy, the flag of 20 cloth
    bakes: weights ~1e-40). The trainer's decoupled decay pulls towards the initial weights
    (a random hidden layer and a zero last layer, i.e. Phi = 0) by a fraction an epoch, so
    the network stays alive and still learns the forcing."""
    Z, W = forced_oscillators()
    s = registry.get("snp").values(dict(epochs=10, batch_size=8, window=8, weight_decay=1.0))
    largest, ratio, n = train_network(Z, W, s)
    print(
        f"{n} windows, weight decay 1: largest hidden weight {largest:.3f}, rollout error "
        f"{ratio:.3f}x eq. (1) alone"
    )
    assert largest > 0.1 and ratio < 0.8
    # the former optimizer on the same problem: what this test catches
    adam = torch.optim.Adam
    monkeypatch.setattr(
        torch.optim, "Adam", lambda params, **kw: adam(params, **kw, weight_decay=1.0)
    )
    dead, dead_ratio, _ = train_network(
        Z, W, registry.get("snp").values({**s, "weight_decay": 0.0})
    )
    print(f"Adam's coupled weight decay 1: largest hidden weight {dead:.1e}, {dead_ratio:.3f}x")
    assert dead < 1e-6 and dead_ratio > 0.99


def test_record_settings_and_registration():
    from neural_rom.core.errors import NeuralRomError

    assert registry.get("snp") is METHOD and METHOD.needs_torch
    assert METHOD.inputs == {"colliders", "pin_targets", "reference_frame"} and not METHOD.requires
    assert list(METHOD.values()) == [s.name for s in METHOD.settings]
    assert dict(METHOD.values()) == METHOD.defaults()
    assert METHOD.setting("k") == registry.get("linear").setting("k")
    with pytest.raises(NeuralRomError, match="window = 2 is not valid"):
        registry.get("snp").values(dict(window=2))


def test_automatic_contact_features_and_learning_rate():
    """Contact features "auto": on for soft-body bakes where a collider moves, off for Blender
    cloth bakes (whatever their colliders do) and where no collider moves; "on" / "off" and
    a former bool setting's True / False choose. The automatic learning rate: 3e-3 up to 40
    PCA modes, 1e-3 above; a given one is kept."""
    from neural_rom.core.errors import NeuralRomError
    from neural_rom.core.kinds.cloth.source import SOURCE
    from neural_rom.training.snp import LR_MODES, learning_rate, wants_contact

    def bake(moves, cloth=False, colliders=True):
        M = np.tile(np.eye(4), (5, 1, 1, 1))
        if moves:
            M[3, 0, 2, 3] += 0.01
        channels = {"colliders": M} if colliders else {}
        meta = {"source": SOURCE} if cloth else {"spec": {}}
        return SimpleNamespace(meta=meta, channels=channels, channel=channels.__getitem__)

    auto = registry.get("snp").values()
    assert auto.contact_features == "auto" and auto.learning_rate is None
    cases = {
        "soft body, a collider moves in one bake": ([bake(False), bake(True)], True),
        "soft body, static colliders": ([bake(False), bake(False)], False),
        "soft body, no colliders": ([bake(False, colliders=False)], False),
        "cloth, a collider moves": ([bake(True, cloth=True)], False),
    }
    for name, (ds, expected) in cases.items():
        print(f"{name}: contact features {wants_contact(auto, ds)}")
        assert wants_contact(auto, ds) is expected
        assert wants_contact(registry.get("snp").values(dict(contact_features="on")), ds) is True
        assert wants_contact(registry.get("snp").values(dict(contact_features="off")), ds) is False
    # the setting was a bool: old settings keep their meaning
    assert registry.get("snp").values(dict(contact_features=True)).contact_features == "on"
    assert registry.get("snp").values(dict(contact_features=False)).contact_features == "off"
    with pytest.raises(NeuralRomError, match="one of auto, on, off"):
        registry.get("snp").values(dict(contact_features="sometimes"))
    rates = {u: learning_rate(auto, u) for u in (1, 18, 24, LR_MODES, LR_MODES + 1, 49, 60)}
    print("automatic learning rate by modes:", rates)
    assert all(r == (3e-3 if u <= LR_MODES else 1e-3) for u, r in rates.items())
    assert learning_rate(registry.get("snp").values(dict(learning_rate=3e-4)), 60) == 3e-4
    assert (
        registry.get("snp").values(dict(learning_rate=0)).learning_rate is None
    )  # 0: automatic, as the panel says


def test_reference_frame_features_are_its_motion_in_the_frame():
    """Gravity, velocity, acceleration, angular velocity and angular acceleration of a moving
    reference frame, expressed in it (zero, and gravity as it is, for the world)."""
    from neural_rom.core.methods.snp import frame_features
    from neural_rom.core.reduced.pose import IDENTITY, Pose
    from scipy.spatial.transform import Rotation

    g = np.array([0.0, 0.0, -9.81])
    still = frame_features((IDENTITY,) * 3, g, DT)
    np.testing.assert_array_equal(still, np.concatenate([g, np.zeros(12)]))
    # turning about z at a constant 0.5 rad/s^2 from 1 rad/s, moving along x with 2 m/s^2
    angle = [0.0, 1.0 * DT + 0.25 * DT**2, 2.0 * DT + 1.0 * DT**2]  # t = 0, 1, 2 frames
    c = [np.array([x, 0.0, 0.0]) for x in (0.0, DT**2, 4 * DT**2)]
    poses = [Pose(Rotation.from_rotvec([0, 0, a]).as_matrix(), p) for a, p in zip(angle, c)]
    f = frame_features((poses[2], poses[1], poses[0]), g, DT)
    Rt = poses[2].R.T
    np.testing.assert_allclose(f[:3], Rt @ g, atol=1e-12)
    np.testing.assert_allclose(f[3:6], Rt @ (c[2] - c[1]) / DT, atol=1e-12)
    np.testing.assert_allclose(f[6:9], Rt @ np.array([2.0, 0.0, 0.0]), atol=1e-9)
    w1, w2 = (angle[1] - angle[0]) / DT, (angle[2] - angle[1]) / DT
    np.testing.assert_allclose(f[9:12], [0, 0, w2], atol=1e-12)
    np.testing.assert_allclose(f[12:15], [0, 0, (w2 - w1) / DT], atol=1e-9)
    # the same turn about the point o (an owner 1.5 m up): o does not move, so with o as the
    # features' origin velocity and acceleration are zero while the frame origin's are not
    o = np.array([0.2, -0.1, 1.5])
    about = [Pose(q.R, o - q.R @ o) for q in poses]
    hist = (about[2], about[1], about[0])
    at_o, at_0 = frame_features(hist, g, DT, o), frame_features(hist, g, DT)
    print(
        f"turning about o: |acc| at o {np.abs(at_o[6:9]).max():.1e}, at the origin "
        f"{np.linalg.norm(at_0[6:9]):.3f} m/s^2"
    )
    np.testing.assert_allclose(at_o[3:9], 0.0, atol=1e-9)
    np.testing.assert_array_equal(at_o[9:], at_0[9:])
    assert np.linalg.norm(at_0[6:9]) > 0.1  # measured 0.258 m/s^2


def test_a_scene_whose_external_state_never_changes_trains_and_plays(tmp_path):
    """A drop onto a static ground with nothing pinned (the demo's scene): no external
    feature varies, so the network sees the state alone (0 external coordinates). It trained
    into a reshape error before (found by training the demo ball from the CLI)."""
    X, T = grid_tetmesh((0.2, 0.2, 0.2), (2, 2, 2))
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=3e4, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario=bk.default_scenario("gravity_drop"),
        frames=12,
        seed=5,
        variants=3,
        contact_stiffness=None,
    )
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, tmp_path, "drop")
    out = tmp_path / "drop.nrmodel"
    res = registry.get("snp").trainer_function()(
        paths, out, registry.get("snp").values(dict(epochs=4, window=8))
    )
    sim, _ = registry.load_simulator(out)
    assert sim.p.encoder.size == 0 and res["dofs"] > 0
    assert res["contact_features"] is False and not sim.p.contact  # no collider moves
    cache = BakeCache.open(paths[0])
    _, driver = bk.replay_scenario(cache)
    P = replay_bake(sim, cache, driver)
    assert P.shape == (cache.n_frames, len(X), 3) and np.all(np.isfinite(P))
    # it falls as the bake does (the drop starts 3.9 cm up): the model is not stuck in place
    z, z_bake = P[:, :, 2].mean(1), np.asarray(cache.channel("positions"))[:, :, 2].mean(1)
    fall = z_bake[0] - z_bake.min()
    print("fall", fall, "model", z[0] - z.min(), "centre error", np.abs(z - z_bake).max())
    assert fall > 0.02 and z[0] - z.min() > 0.5 * fall
    assert np.abs(z - z_bake).max() < 0.5 * fall


def test_rotation_log_matches_scipy_from_zero_to_a_half_turn():
    """The closed-form log map of the frame features against scipy's conversion, over random
    axes at angles from 1e-12 rad to just under pi (the scipy branch past 170 degrees)."""
    from neural_rom.core.methods.snp.features import _rotvec
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(4)
    worst = 0.0
    for angle in [0.0, 1e-12, 1e-8, 1e-4, 0.1, 1.0, 2.0, 2.9, 3.0, 3.1, 3.14159]:
        for _ in range(20):
            axis = rng.normal(size=3)
            w = axis / np.linalg.norm(axis) * angle
            R = Rotation.from_rotvec(w).as_matrix()
            got = _rotvec(R)
            err = np.linalg.norm(got - Rotation.from_matrix(R).as_rotvec())
            worst = max(worst, err / max(angle, 1e-12) if angle < 1e-3 else err)
    print(f"log map: worst error {worst:.2e} (relative below 1e-3 rad)")
    assert worst < 1e-9
    assert np.array_equal(_rotvec(np.eye(3)), np.zeros(3))


def test_the_folded_step_is_eq3_with_per_mode_scales_and_matches_torch():
    """FoldedStep (eq. 1, the encoder and the scales folded into the network) gives what
    predict's eq. (3) as written gives, with a scalar scale and with per-mode input scales
    (mode_scaling), one instance and a batch; and the torch rollout with the same per-mode
    scales over 200 frames."""
    from neural_rom.core.methods.snp import ExternalEncoder, SNPParameters
    from neural_rom.core.reduced.nnet import MLP
    from neural_rom.training.snp import latent_rollout

    rng = np.random.default_rng(5)
    n, u, e = 7, 5, 15 + 14
    keep = np.array([3, 4, 9, 16, 17, 18])  # not contiguous
    V = np.linalg.qr(rng.normal(size=(len(keep), len(keep))))[0][:4]
    enc = ExternalEncoder(
        np.full(e, -2.0), np.full(e, 2.0), rng.normal(size=e), rng.uniform(0.5, 2, e), keep, V
    )
    sizes = [2 * u + 4, 9, 9, u]
    mlp = MLP(
        [0.3 * rng.normal(size=(b, a)) for a, b in zip(sizes[:-1], sizes[1:])],
        [0.1 * rng.normal(size=b) for b in sizes[1:]],
        ["relu", "relu", "identity"],
    )
    X = rng.normal(size=(n, 3))
    base = SNPParameters(
        X=X, mean=X, U=np.linalg.qr(rng.normal(size=(3 * n, u)))[0],
        alpha=rng.uniform(0.9, 1, u), beta=rng.uniform(0.5, 0.9, u),
        z_lo=-np.full(u, 3.0), z_hi=np.full(u, 3.0), scale=0.7, encoder=enc, net=mlp,
        sizes=np.array([[0.1, 0.0]]), kinds=["sphere"], pinned=np.zeros(0, np.int64),
    )  # fmt: skip
    worst = 0.0
    for p in (base, replace(base, input_scale=rng.uniform(0.05, 1.0, u))):
        sim = SNPSimulation(p)
        z1, z2, f = rng.normal(size=(6, u)), rng.normal(size=(6, u)), 3 * rng.normal(size=(6, e))
        ref = sim.predict(z1, z2, enc.encode(f))
        worst = max(worst, np.abs(sim.predict_features(z1, z2, f) - ref).max())
        worst = max(worst, np.abs(sim.predict_features(z1[:1], z2[:1], f[:1]) - ref[:1]).max())
    F = rng.normal(size=(200, e))
    z0 = rng.normal(size=u) * 0.3
    got = latent_rollout(sim, z0, z0, F)
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    net = build_mlp(sizes, "relu").double()
    with torch.no_grad():
        for m, W, b in zip([m for m in net if isinstance(m, torch.nn.Linear)], mlp.W, mlp.b):
            m.weight.copy_(t(W))
            m.bias.copy_(t(b))
        want = rollout(
            net, t(z0)[None], t(z0)[None], t(enc.encode(F))[None], t(p.alpha), t(p.beta),
            p.scale, t(p.z_lo), t(p.z_hi), in_scale=t(p.input_scale),
        )[0].numpy()  # fmt: skip
    err = np.abs(got - want).max()
    print(f"folded vs eq. (3): {worst:.1e}; numpy vs torch over 200 frames: {err:.1e}")
    assert worst < 1e-12 and err < 1e-10 and np.abs(got).max() > 0.1


# ------------------------------------------------------------------------------------------
# Contact features (the ``contact_features`` setting)
# ------------------------------------------------------------------------------------------


def test_swept_push_out_is_the_capsule_a_moving_sphere_sweeps_to_sampling():
    """A sphere of radius r moving from a to b sweeps a capsule: each point's push-out depth
    lies between the exact capsule depth ``r - |p - segment|`` and what the nearest of the
    SWEEP_SAMPLES positions (spacing D) must reach, ``r - sqrt(|p - segment|^2 + (D/2)^2)``;
    a still sphere gives exactly its penetration along its normal; a plane moving down pushes
    out what lies below its last position."""
    from neural_rom.core.methods.snp import SWEEP_SAMPLES, contact_features, swept_push_out

    rng = np.random.default_rng(2)
    P = rng.uniform(-0.3, 0.3, size=(4000, 3))
    r, a, b = 0.1, np.array([-0.2, 0.0, 0.05]), np.array([0.15, 0.05, -0.05])
    before, after = np.eye(4), np.eye(4)
    before[:3, 3], after[:3, 3] = a, b
    size = np.array([r, 0.0])
    push = swept_push_out(P, before, after, "sphere", size)
    depth = np.linalg.norm(push, axis=1)
    ab = b - a
    s = np.clip((P - a) @ ab / (ab @ ab), 0.0, 1.0)
    dist = np.linalg.norm(P - (a + s[:, None] * ab), axis=1)
    spacing = np.linalg.norm(ab) / (SWEEP_SAMPLES - 1)
    exact = np.maximum(r - dist, 0.0)
    least = np.maximum(r - np.sqrt(dist**2 + (spacing / 2) ** 2), 0.0)
    inside = exact > 0
    print(
        f"{inside.sum()} of {len(P)} points in the swept capsule; sampled depth short of the "
        f"exact by at most {1e3 * (exact - depth).max():.2f} mm (spacing {1e3 * spacing:.0f} mm)"
    )
    assert inside.sum() > 100
    assert np.all(depth <= exact + 1e-12) and np.all(depth >= least - 1e-12)
    assert np.all(depth[~inside] == 0.0)
    # still: the sphere's own penetration, along its outward normal
    still = swept_push_out(P, after, after, "sphere", size)
    d = P - b
    want = (
        np.maximum(r - np.linalg.norm(d, axis=1), 0.0)[:, None]
        * d
        / np.linalg.norm(d, axis=1)[:, None]
    )
    np.testing.assert_allclose(still, want, atol=1e-12)
    # a plane (solid below local z = 0) moving from z = -0.25 to z = 0.1
    lo, hi = np.eye(4), np.eye(4)
    lo[2, 3], hi[2, 3] = -0.25, 0.1
    plane = swept_push_out(P, lo, hi, "plane", np.zeros(2))
    np.testing.assert_allclose(plane[:, 2], np.maximum(0.1 - P[:, 2], 0.0), atol=1e-12)
    assert not plane[:, :2].any()
    # the features: mean push-out, deepest, fraction inside; zero for a sweep that misses. A
    # sphere that only translates takes the exact capsule (the fast path), one that turns too
    # the sampled sweep
    f = contact_features(P, before[None], after[None], ["sphere"], size[None])
    q = P - (a + s[:, None] * ab)
    capsule = exact[:, None] * q / dist[:, None]
    want = [*capsule.mean(0), exact.max(), inside.mean()]
    np.testing.assert_allclose(f, want, rtol=1e-12, atol=1e-15)
    turned = after.copy()
    turned[:3, :3] = [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    f = contact_features(P, before[None], turned[None], ["sphere"], size[None])
    push = swept_push_out(P, before, turned, "sphere", size)
    depth = np.linalg.norm(push, axis=1)
    np.testing.assert_allclose(f, [*push.mean(0), depth.max(), (depth > 0).mean()], rtol=1e-12)
    far = after.copy()
    far[:3, 3] = [0.0, 0.0, 5.0]
    assert not contact_features(P, far[None], far[None], ["sphere"], size[None]).any()


def test_the_sweep_of_the_collider_reaches_the_network(block):
    """The block's model has contact features (the sweep of each frame's colliders from the
    frame before, against the rest shape; the runtime keeps the last colliders and the
    trainer reads the bake's frames: test_heldout_rollout_... replays it as measured). In the
    frame whose sweep goes deepest into the block, replacing the sweep by a sphere that did not
    move changes the contact features and the prediction."""
    from neural_rom.core.methods.snp import COLLIDER_FEATURES, FRAME_FEATURES
    from neural_rom.core.reduced.pose import IDENTITY as IDENT

    sim, model = block.sim, block.model
    p = sim.p
    assert p.contact and len(model.metadata["feature_names"]) == p.n_features == 15 + 19
    cache, driver = heldout(block)
    full = np.asarray(cache.positions)
    at = FRAME_FEATURES + COLLIDER_FEATURES  # the first collider's contact features

    def feats(f, moving=True):
        before = driver.colliders(f - 1) if moving else None
        return sim.features(driver.colliders(f), (IDENT,) * 3, before)

    # the frame whose sweep differs most from a sphere that stayed where it ended (the
    # deepest frames are rests, where the two are the same)
    moved = [np.abs(feats(f)[at:] - feats(f, False)[at:]).max() for f in range(1, len(full))]
    f = 1 + int(np.argmax(moved))
    depth = feats(f)[at + 3]
    z1 = p.U.T @ (full[f - 1] - p.mean).reshape(-1)
    z2 = p.U.T @ (full[max(f - 2, 0)] - p.mean).reshape(-1)

    def predict(features):
        return sim.decode(sim.predict_features(z1[None], z2[None], features[None])[0])

    change = np.linalg.norm(predict(feats(f)) - predict(feats(f, moving=False)), axis=1).max()
    print(
        f"frame {f}: the sphere swept {1e3 * depth:.1f} mm deep into the rest block; "
        f"without the sweep the prediction moves by {1e3 * change:.2f} mm"
    )
    assert depth > 0.01 and not np.array_equal(feats(f)[at:], feats(f, False)[at:])
    assert change > SWEEP_CHANGE_M


def test_batched_contact_features_are_each_instances_bit_for_bit():
    """The runtime's contact features of B instances at once (:func:`batch_contact_features`,
    vectorized over instances and colliders) are each instance's :func:`contact_features` (the
    trainer's, a loop over colliders) to the last bit, with and without the rest shape's
    bounding ball and box (which cull sweeps, changing no feature): rotated and scaled
    spheres, spheres that only translate, capsules and planes, still and far sweeps, a vertex
    at a sampled centre and one on a translating sphere's path; and an instance's features do
    not depend on its batch (150 at once or in twos: each path of the vectorized code)."""
    from neural_rom.core.methods.snp import (
        SWEEP_SAMPLES,
        batch_contact_features,
        contact_features,
    )
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(5)
    X = rng.uniform(-0.1, 0.1, size=(80, 3)) * [1.0, 1.0, 1.5]
    centre = 0.5 * (X.min(0) + X.max(0))
    bound = (centre, float(np.linalg.norm(X - centre, axis=1).max()))
    box = (X.min(0).tolist(), X.max(0).tolist())  # the runtime's bound has the box too
    kinds = ["sphere", "capsule", "plane", "sphere"]
    B, c = 150, len(kinds)

    def transforms():
        M = np.tile(np.eye(4), (B, c, 1, 1))
        R = Rotation.random(B * c, random_state=rng).as_matrix().reshape(B, c, 3, 3)
        M[..., :3, :3] = R * rng.uniform(0.7, 1.4, size=(B, c, 1, 3))
        M[..., :3, 3] = rng.uniform(-0.3, 0.3, size=(B, c, 3))
        return M

    before, after = transforms(), transforms()
    after[::3] = before[::3]  # still
    after[1::7, :, :3, 3] = before[1::7, :, :3, 3] = 5.0  # far
    sizes = np.stack([rng.uniform(0.02, 0.15, (B, c)), rng.uniform(0.0, 0.1, (B, c))], axis=-1)
    sizes[:, 0, 1] = 0.0
    # instance 2's first sphere has a sample centred on a vertex (the push-out's fallback axis)
    k = 1
    s = k / (SWEEP_SAMPLES - 1)
    before[2, 0, :3, 3] = X[0] - s * (after[2, 0, :3, 3] - X[0]) / (1.0 - s)
    # spheres that only translate (the exact capsule's fast path) in a quarter of the
    # instances; instance 5's first one passes through vertex 1 (its fallback axis)
    after[1::4, :, :3, :3] = before[1::4, :, :3, :3]
    before[5, 0, :3, 3] = 2.0 * X[1] - after[5, 0, :3, 3]
    full = None  # the features without culling (the trainer's)
    for bd in (None, bound, (*bound, box)):
        batched = batch_contact_features(X, before, after, kinds, sizes, bd)
        single = np.array(
            [contact_features(X, before[b], after[b], kinds, sizes[b], bd) for b in range(B)]
        )
        # in twos: the small batches' paths (each sweep tested in Python floats, every vertex)
        twos = np.concatenate(
            [
                batch_contact_features(
                    X, before[b : b + 2], after[b : b + 2], kinds, sizes[b : b + 2], bd
                )
                for b in range(0, B, 2)
            ]
        )
        touched = np.count_nonzero(single.reshape(B, c, -1)[..., 3], axis=0)
        print(
            f"bound {bd is not None}: {B} instances x {c} colliders, sweeps touching the rest "
            f"shape per collider {touched.tolist()}; batched - per instance: "
            f"{np.abs(batched - single).max():.1e}"
        )
        assert np.all(touched > 10)
        np.testing.assert_array_equal(batched, single)
        np.testing.assert_array_equal(twos, single)
        # culling by the ball and the box skips work, never changes a feature
        full = single if full is None else full
        assert single.tobytes() == full.tobytes()
    assert single[2, 3] > 0.0 and single[5, 3] > 0.0  # the centred vertices are inside
    # a batch of one kind takes the one-group path: the same features
    sphere = [i for i, k in enumerate(kinds) if k == "sphere"]
    np.testing.assert_array_equal(
        batch_contact_features(
            X, before[:, sphere], after[:, sphere], ["sphere"] * 2, sizes[:, sphere], bound
        ),
        single.reshape(B, c, -1)[:, sphere].reshape(B, -1),
    )


def test_one_instances_features_are_the_trainers_and_a_batchs_bit_for_bit(block):
    """The step of one instance whose frame is the world reads its colliders as Python floats
    (``SNPSimulation._world_features``, the fast path of the usual soft body) and culls a
    sweep by the rest shape's ball and box before any per-vertex work: its features are the
    trainer's (:func:`external_features`, no culling) and the general path's (a batch of two)
    to the last bit, on sweeps far from the block (outside its ball), near it (inside the
    ball, the capsule's box clear of the block's, or overlapping it with no vertex inside),
    into it, turning (the sampled sweep), one whose previous slot was empty (no sweep: where
    it is), one that goes (the far collider), and in a frame equal to the world but not its
    object."""
    from neural_rom.core.methods.snp import CONTACT_FEATURES, external_features
    from neural_rom.core.methods.snp.sweep import _misses
    from neural_rom.core.reduced.pose import IDENTITY as IDENT
    from neural_rom.core.reduced.pose import Pose

    sim = block.sim
    p = sim.p
    X = p.X
    r = float(p.sizes[0][0])
    lo, hi = X.min(0), X.max(0)
    mid = 0.5 * (lo + hi)

    def sphere(at, turn=0.0):
        M = np.eye(4)
        M[:3, 3] = at
        M[:2, :2] = [[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]]
        return Collider("sphere", radius=r, half_length=0.0, transform=M)

    top = np.array([mid[0], mid[1], hi[2]])
    corner = hi + (r + 2e-3) / np.sqrt(3.0)  # the corner vertex just outside the sphere
    cases = {  # name: (previous, this frame's colliders)
        "far": ([sphere(mid + [0.0, 0.0, 2.0])], [sphere(mid + [0.1, 0.0, 2.0])]),
        "near, box clear": (
            [sphere(top + [-0.05, 0.0, r + 0.01])],
            [sphere(top + [0.05, 0.0, r + 0.01])],
        ),
        "near, box overlaps": ([sphere(corner + [0.0, 0.0, 0.03])], [sphere(corner)]),
        "pressing in": (
            [sphere(top + [0.0, 0.01, r - 0.01])],
            [sphere(top + [0.0, 0.0, r - 0.04])],
        ),
        "through a vertex": ([sphere(2.0 * X[5] - top)], [sphere(top)]),
        "turning": (
            [sphere(top + [0.0, 0.0, r - 0.03])],
            [sphere(top + [0.0, 0.0, r - 0.04], 0.3)],
        ),
        "appears": ([], [sphere(top + [0.0, 0.0, r - 0.04])]),
        "goes": ([sphere(top + [0.0, 0.0, r - 0.04])], []),
    }
    frames = {"world": (IDENT,) * 3, "equal to the world": (Pose(np.eye(3), np.zeros(3)),) * 3}
    bound = sim._bound
    for (fname, poses), (name, (prev, cols)) in itertools.product(frames.items(), cases.items()):
        one = sim.features(cols, poses, prev)
        two = sim.batch_features([cols, cols], [poses] * 2, [prev, prev])
        contact = one[-CONTACT_FEATURES:]
        where = "no sweep"
        if prev and cols:
            b, a = prev[0].transform.tolist(), cols[0].transform.tolist()
            where = "outside the ball" if _misses(bound, b, a, r, 0.0) else "inside the ball"
            mats = np.array([c.transform for c in cols])
            trainer = external_features(
                mats,
                p.sizes,
                (IDENT,) * 3,
                sim.gravity,
                sim.dt,
                p.frame_origin,
                (X, np.array([c.transform for c in prev]), p.kinds),
            )
            assert one.tobytes() == trainer.tobytes(), (name, fname)
        print(
            f"{fname}, {name} ({where}): depth {1e3 * contact[3]:.1f} mm, "
            f"{contact[4] * len(X):.0f} vertices inside"
        )
        assert one.tobytes() == two[0].tobytes() == two[1].tobytes(), (name, fname)
        if name in ("far", "near, box clear", "near, box overlaps", "goes"):
            assert not contact.any(), name
        if name in ("pressing in", "through a vertex", "turning", "appears"):
            assert contact[3] > 0.0 and contact[4] > 0.0, name
        if name == "far":
            assert where == "outside the ball"
        if name.startswith("near"):
            assert where == "inside the ball"


def _oscillator_trainer(settings, sequences=12):
    """The trainer's network stage on :func:`forced_oscillators` (no held-out sequences)."""
    return net_trainer(settings, *forced_oscillators(sequences=sequences))


def test_warm_up_ramps_the_learning_rate_step_by_step():
    """``warmup_epochs`` 2: the learning rate of step j (from 0) of the first two epochs is
    ``(j + 1) / (2 x steps an epoch)`` of the decayed rate, then the decayed rate itself."""
    s = registry.get("snp").values(
        dict(epochs=3, batch_size=64, window=8, warmup_epochs=2, learning_rate=1e-2)
    )
    trainer = _oscillator_trainer(s)
    net = trainer.network()
    trainer.anchor = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.Adam(net.parameters(), lr=s.learning_rate, amsgrad=True)
    seen = []
    step = opt.step
    opt.step = lambda: seen.append(opt.param_groups[0]["lr"]) or step()
    for epoch in range(3):
        trainer.epoch(net, opt, epoch)
    n = -(-len(trainer.windows) // s.batch_size)
    want = [1e-2 * s.lr_decay**e * min(1.0, (e * n + j + 1) / (2 * n))
            for e in range(3) for j in range(n)]  # fmt: skip
    print(f"{n} steps an epoch, learning rates {np.round(seen, 5)}")
    np.testing.assert_allclose(seen, want, rtol=1e-12)
