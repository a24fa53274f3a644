"""LiCROM (Chang 2023): a field model trained on bakes of meshes, run on other meshes and across
mesh swaps; checked against POD (Eckart-Young) and full space.

Every model here is small (latent size 6, 30 epochs: seconds on one core) and shared by the
module; torch runs on one thread."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from neural_rom.core import bake as bk
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.data.modelfile import load_model
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.engine.replay import replay_bake
from neural_rom.core.errors import CacheError, JobCancelled, NeuralRomError, SimulationError
from neural_rom.core.geometry import mesher, surface
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.geometry.tetmesh import drop_unused_nodes
from neural_rom.core.methods import licrom
from neural_rom.core.physics.fem import Material, TetFEM
from neural_rom.core.physics.sim import SimSettings, Simulation
from neural_rom.core.reduced.nnet import MLP
from neural_rom.core.reduced.subspace import mass_weighted_pod
from neural_rom.core.registry import get, load_simulator
from neural_rom.training.licrom import projection_errors
from scipy.spatial.transform import Rotation

MATERIAL = Material(youngs_modulus=1e6, poisson_ratio=0.25, density=1000.0)
SIZE = (0.5, 0.1, 0.1)
R = 6
train = get("licrom").trainer_function()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def bar(divisions):
    X, T = grid_tetmesh(SIZE, divisions)
    return SimpleNamespace(X=X, T=T, pinned=np.flatnonzero(X[:, 0] < 1e-9))


def spec(mesh, scenario, frames=24, seed=0, variants=1):
    return bk.BakeSpec(
        material=MATERIAL.to_dict(),
        scenario=scenario,
        frames=frames,
        pinned=mesh.pinned.tolist(),
        damping=(0.5, 0.0),
        seed=seed,
        variants=variants,
    )


POKES = {"kind": "random_pokes", "count": 3, "strength": 1.5, "duration": 0.4}


def _notch(X, T, x0=0.3, x1=0.4, z0=0.04):
    """The mesh without the tets whose centroid lies in ``x0 < x < x1, z > z0`` (a cut from the
    top), its unused nodes dropped: (X, T, old->new node map)."""
    c = X[T].mean(1)
    keep = ~((c[:, 0] > x0) & (c[:, 0] < x1) & (c[:, 2] > z0))
    return drop_unused_nodes(X, T[keep])


@pytest.fixture(scope="module")
def bakes(tmp_path_factory):
    """A family of two meshes: a coarse pinned bar (99 nodes, 240 tets) and the same bar with a
    notch cut from the top (the paper trains on meshes with voids, Fig. 10): a sag and pokes
    of each."""
    d = tmp_path_factory.mktemp("licrom_bar")
    coarse = bar((10, 2, 2))
    Xn, Tn, new = _notch(coarse.X, coarse.T)
    notched = SimpleNamespace(X=Xn, T=Tn, pinned=new[coarse.pinned])
    sag = {"kind": "gravity_drop", "jitter": 0.5}
    plain = bk.bake_variants(coarse, spec(coarse, sag, seed=3), d, "sag")
    plain += bk.bake_variants(coarse, spec(coarse, POKES, seed=11, variants=3), d, "pokes")
    cut = bk.bake_variants(notched, spec(notched, sag, seed=4), d, "notch_sag")
    cut += bk.bake_variants(notched, spec(notched, POKES, seed=5), d, "notch_pokes")
    return SimpleNamespace(plain=plain, cut=cut, mesh=coarse, notched=notched, dir=d)


def _train(bakes, paths, name, **settings):
    out = bakes.dir / f"{name}.nrmodel"
    res = train(
        paths,
        out,
        {
            "latent_dim": R,
            "epochs": 30,
            "projection_epochs": 0,
            "cubature_vertices": 40,
            # the bar deflects 40% of its length, where Auto turns them on: these tests are
            # of the field with its static modes (test_static_derivatives_* of the others)
            "static_derivatives": "off",
            **settings,
        },
        device="cpu",
        checkpoint_dir=bakes.dir / f"ckpt_{name}",
    )
    print(name, json.dumps({k: v for k, v in res.items() if k != "rollout"}, default=str))
    return SimpleNamespace(res=res, out=out, paths=paths, mesh=bakes.mesh, dir=bakes.dir)


@pytest.fixture(scope="module")
def trained(bakes):
    """LiCROM of the bar alone (four bakes, one poke bake held out)."""
    return _train(bakes, bakes.plain, "bar", validation_fraction=0.25)


@pytest.fixture(scope="module")
def family(bakes):
    """LiCROM of the bar and the notched bar together (nothing held out)."""
    return _train(bakes, bakes.plain + bakes.cut, "family", validation_fraction=0.0, rollout=False)


def test_model_file_holds_a_field_not_a_basis(trained):
    """No array of the file has the training mesh's node count as a dimension; no encoder (the
    field, its domain, its pins and the latent codes (c, r) the cubature is fitted to)."""
    m = load_model(trained.out)
    n = len(trained.mesh.X)
    shapes = {k: v.shape for k, v in m.arrays.items()}
    print(shapes)
    assert not [k for k, s in shapes.items() if n in s or 3 * n in s]
    assert all(k.startswith(("field", "domain", "pin", "cubature_codes")) for k in shapes)
    assert shapes["cubature_codes"][1] == R
    assert m.metadata["latent_dim"] == R and m.method == "licrom"
    # a pinned body's field lives in its pins' frame: no floating frame
    assert m.metadata["frame"] == licrom.FRAME_WORLD
    assert not licrom.load_on_mesh(trained.out, trained.mesh.X, trained.mesh.T).floating


def test_decoding_is_linear_in_q(trained):
    sim = licrom.load_on_mesh(trained.out, trained.mesh.X, trained.mesh.T)
    rng = np.random.default_rng(0)
    q1, q2 = rng.normal(size=sim.k), rng.normal(size=sim.k)

    def disp(q):
        sim.reset(q=q)
        return sim.positions() - sim.X

    err = np.abs(disp(q1 + 2 * q2) - disp(q1) - 2 * disp(q2)).max()
    print(f"linearity defect {err:.2e} m")
    assert err < 1e-12


def test_projection_error_between_pod_and_twice_pod(trained):
    """Eckart-Young: on the training mesh the field's basis cannot beat POD of the same size
    (mass-weighted, the same frames); it should be within 2x."""
    res = trained.res
    print(
        f"field {res['field_error_sq']:.4g}, POD {res['pod_error_sq']:.4g}, ratio "
        f"{res['projection_ratio_to_pod']:.4f}"
    )
    assert 0.999 <= res["projection_ratio_to_pod"] <= 2.0
    # the same measured independently on every frame of the training bakes
    meta = load_model(trained.out).metadata
    X, T = trained.mesh.X, trained.mesh.T
    caches = [BakeCache.open(trained.paths[i]) for i in meta["train_trajectories"]]
    assert len(caches) == 3
    u = np.concatenate([b.channel("positions") for b in caches]) - X
    sim = licrom.load_on_mesh(trained.out, X, T, static=False)  # the field's basis alone
    pod = mass_weighted_pod(u, sim.mass, trained.mesh.pinned, k=R)
    e_field = projection_errors(sim.U, u, sim.mass)[0]
    e_pod = projection_errors(pod.U, u, sim.mass)[0]
    print(f"all frames: ratio {e_field / e_pod:.4f}")
    assert 0.999 <= e_field / e_pod <= 2.0


def test_pinned_region_stays_put_on_every_mesh(trained):
    """Pins are boxes of reference space: on the training mesh and a finer one, the nodes on
    the pinned face do not move while the bar is poked."""
    for div in ((10, 2, 2), (20, 4, 4)):
        m = bar(div)
        sim = licrom.load_on_mesh(trained.out, m.X, m.T)
        assert np.array_equal(sim.pinned, m.pinned)
        f = np.zeros_like(m.X)
        f[np.argmax(m.X[:, 0])] = [0.0, 3.0, 5.0]
        for _ in range(10):
            sim.step(FrameInputs(forces=f))
        x = sim.positions()
        moved = np.abs(x[m.pinned] - m.X[m.pinned]).max()
        tip = np.abs(x - m.X).max()
        print(f"{div}: pinned move {moved:.1e} m, tip {tip * 1000:.3g} mm")
        assert moved == 0.0 and tip > 1e-3


def test_random_cubature_is_unbiased():
    """Random vertex cubature with inverse-inclusion weights: the energy averaged over seeds is
    within 1% of the exact one; the inclusion probability matches its closed form."""
    m = bar((12, 3, 3))
    fem = TetFEM(m.X, m.T, MATERIAL)
    x = m.X.copy()
    x[:, 2] += 0.2 * (m.X[:, 0] / 0.5) ** 2 * 0.5  # a bend
    x[:, 1] += 0.02 * np.sin(8 * m.X[:, 0])
    Ve = fem.element_energy(x)
    exact = Ve.sum()
    n, count = len(m.X), 2000
    est, hits = [], np.zeros(len(m.T))
    for seed in range(count):
        el, w = licrom.random_cubature(m.T, n, 20, seed)
        est.append(float(w @ Ve[el]))
        hits[el] += 1
    mean = float(np.mean(est))
    pi = licrom.inclusion_probability(n, 20)
    print(
        f"exact {exact:.5g} J, mean of {count} {mean:.5g} J ({mean / exact - 1:+.3%}), "
        f"single draws spread {np.std(est) / exact:.1%}; pi {pi:.4f} vs {hits.mean() / count:.4f}"
    )
    assert abs(mean / exact - 1) < 0.01
    assert abs(hits.mean() / count - pi) < 0.01
    # seeded per mesh: the same mesh and seed give the same cubature, another mesh another
    a = licrom.mesh_seed(0, m.X, m.T)
    assert a == licrom.mesh_seed(0, m.X, m.T) != licrom.mesh_seed(0, m.X * 1.01, m.T)


def test_scaled_shape_is_reported_out_of_domain(trained):
    X, T = trained.mesh.X, trained.mesh.T
    fine = bar((20, 4, 4))
    for Xm, Tm in ((X, T), (fine.X, fine.T)):
        sim = licrom.load_on_mesh(trained.out, Xm, Tm)
        print("inside:", sim.domain_report)
        assert sim.domain_report.share_outside == 0.0 and not sim.warnings
    with pytest.warns(licrom.OutOfDomainWarning, match="outside the domain"):
        sim = licrom.load_on_mesh(trained.out, 2.0 * X, T)
    rep = sim.domain_report
    print("scaled by 2:", rep)
    assert rep.share_outside > 0.5 and rep.max_distance_m > 0.2


def test_registry_load_runs_on_the_recorded_mesh(trained):
    """load_simulator opens the model on the mesh of the bake it records; without that bake
    it says how to put the model on a mesh."""
    sim, model = load_simulator(trained.out)
    assert isinstance(sim, licrom.LicromSimulation)
    assert "other_mesh" in get("licrom").inputs
    roll = trained.res["rollout"]
    print("held-out rollout", {k: roll.get(k) for k in ("max_error_m", "step_ms", "frames")})
    assert roll["frames"] == 24
    meta = dict(model.metadata, mesh_bake=str(trained.dir / "gone.nrbake"))
    with pytest.raises(CacheError, match="load_on_mesh"):
        licrom.load(type(model)(**{**model.__dict__, "metadata": meta}))
    with pytest.raises(SimulationError, match="tets"):
        licrom.load_on_mesh(trained.out, trained.mesh.X, trained.mesh.T[:, :3])


def _interpolation(Xc, Tc, Xf):
    """The finite-element interpolation (nf, nc) from the tet mesh (Xc, Tc) to points Xf (each
    point in the tet where its smallest barycentric coordinate is largest)."""
    A = Xc[Tc]
    inv = np.linalg.inv(np.transpose(A[:, 1:] - A[:, :1], (0, 2, 1)))
    P = np.zeros((len(Xf), len(Xc)))
    for i, x in enumerate(Xf):
        lam = np.einsum("mij,mj->mi", inv, x - A[:, 0])
        b = np.concatenate([1.0 - lam.sum(1, keepdims=True), lam], axis=1)
        t = int(np.argmax(b.min(1)))
        P[i, Tc[t]] = b[t]
    return P


BLOCK = (0.15, 0.1, 0.1)


def end_face_load(X, frames, seed, pull=500.0, torque=7.5):
    """Forces (frames + 1, n, 3) on a grid box's end face ``x = max``: a traction (trapezoid
    weights of the face's grid, so any grid of the box gets the same resultant) pulling or
    pushing along x and twisting about the box's axis, on and off in smooth random pulses
    (seeded): newtons and newton-metres."""
    rng = np.random.default_rng(seed)
    end = np.flatnonzero(X[:, 0] > X[:, 0].max() - 1e-9)

    def trapezoid(v):
        edge = (np.abs(v - v.min()) < 1e-9) | (np.abs(v - v.max()) < 1e-9)
        return np.where(edge, 0.5, 1.0)

    w = trapezoid(X[end, 1]) * trapezoid(X[end, 2])
    r = X[end] - np.array([0.0, BLOCK[1] / 2, BLOCK[2] / 2])
    r[:, 0] = 0.0
    twist = np.cross([1.0, 0.0, 0.0], r) * w[:, None] / (w * (r**2).sum(1)).sum()
    F = np.zeros((frames + 1, len(X), 3))
    t = 0
    while t <= frames:
        n = int(rng.integers(4, 8))
        a, tq = rng.uniform(-1.0, 1.0, 2) * (pull, torque)
        s = np.sin(np.linspace(0.0, np.pi, n))[: frames + 1 - t]
        F[t : t + len(s), end, 0] += a * s[:, None] * (w / w.sum())
        F[t : t + len(s), end] += tq * s[:, None, None] * twist
        t += n
    return F


#: The seed of the held-out load of :func:`resolution_check` (the training loads are 0, 1, ...).
HELD_LOAD = 9


def resolution_check(
    d, train_divs, replay_divs, frames=16, bakes=2, reference=None, **settings
) -> list[dict]:
    """The issue's resolution check on the stocky bar ``BLOCK`` (pinned at x = 0), pulled and
    twisted at its free end (:func:`end_face_load`, the same traction on every grid): LiCROM
    trained on ``bakes`` loads of each grid of ``train_divs`` (latent 6, 30 epochs unless
    ``settings`` say otherwise), a held-out load replayed on each grid of ``replay_divs``, each
    replay measured against its own mesh's full-space bake of the load. The exact energy (no
    random cubature draw), so the field alone is judged. Bakes are kept in ``d`` and reused.

    Returns one row per replayed mesh, lengths in metres: ``grid``, ``tets``, ``amplitude``
    (largest displacement of the full-space bake), ``gap`` (the first training grid's full-space
    bake interpolated onto this mesh's nodes against this mesh's own: the discretization
    difference that mesh's bakes cannot show), ``replay`` (the largest vertex error of the
    model's replay), ``projection`` (of this mesh's own full-space motion on the field's basis
    here: the best the basis can do) and ``carried`` (the same for the first training grid's
    motion interpolated onto this mesh: what the field carries between that grid's nodes).
    With a ``reference`` grid (the finest, standing in for the converged motion) also
    ``to_reference`` (the replay against the reference grid's full-space bake interpolated onto
    this mesh's nodes) and ``full_to_reference`` (this mesh's own full-space bake against it:
    its discretization error)."""

    def block(div):
        X, T = grid_tetmesh(BLOCK, div)
        return SimpleNamespace(X=X, T=T, pinned=np.flatnonzero(X[:, 0] < 1e-9), div=tuple(div))

    def bake(m, seed):
        name = f"{'x'.join(map(str, m.div))}_{seed}"
        if not (d / f"{name}.nrbake").exists():
            np.savez(d / f"{name}.npz", X=m.X, forces=end_face_load(m.X, frames, seed))
            scene = {"kind": "replay_forces", "source": str(d / f"{name}.npz")}
            bk.bake(m, spec(m, scene, frames=frames), d / f"{name}.nrbake")
        return d / f"{name}.nrbake"

    trained = [block(div) for div in train_divs]
    coarse = trained[0]
    paths = [bake(m, s) for m in trained for s in range(bakes)]
    name = "block_" + "+".join("x".join(map(str, m.div)) for m in trained)
    model = _train(SimpleNamespace(dir=d, mesh=coarse), paths, name, validation_fraction=0.0,
                   rollout=False, cubature_vertices=0, **settings)  # fmt: skip
    x_c = BakeCache.open(bake(coarse, HELD_LOAD)).channel("positions")

    def err(x, ref):
        return float(np.linalg.norm(x - ref, axis=2).max())

    def projected(U, mesh, x):
        u = (x - mesh.X).reshape(len(x), -1).T
        return (U @ np.linalg.lstsq(U, u, rcond=None)[0]).T.reshape(x.shape) + mesh.X

    ref = None
    if reference is not None:
        ref = block(reference)
        x_ref = BakeCache.open(bake(ref, HELD_LOAD)).channel("positions")
    rows = []
    for mesh in [block(div) for div in replay_divs]:
        cache = BakeCache.open(bake(mesh, HELD_LOAD))
        x = cache.channel("positions")
        x_cf = np.einsum("fc,tca->tfa", _interpolation(coarse.X, coarse.T, mesh.X), x_c)
        _, driver = bk.replay_scenario(cache)
        sim = licrom.load_on_mesh(model.out, mesh.X, mesh.T, cubature_vertices=0)
        y = replay_bake(sim, cache, driver)
        r = {
            "grid": mesh.div,
            "tets": len(mesh.T),
            "trained": mesh.div in [m.div for m in trained],
            "amplitude": err(x, mesh.X),
            "gap": err(x_cf, x),
            "replay": err(y, x),
            "projection": err(projected(sim.U, mesh, x), x),
            "carried": err(projected(sim.U, mesh, x_cf), x_cf),
        }
        if ref is not None:
            x_rm = x_ref
            if ref.div != mesh.div:
                x_rm = np.einsum("fc,tca->tfa", _interpolation(ref.X, ref.T, mesh.X), x_ref)
            r["to_reference"], r["full_to_reference"] = err(y, x_rm), err(x, x_rm)
        rows.append(r)
        print(
            f"{name} on {'x'.join(map(str, mesh.div))} ({r['tets']} tets"
            f"{', trained' if r['trained'] else ''}): amplitude {r['amplitude'] * 1000:.3g} mm, "
            f"full-space gap to {'x'.join(map(str, coarse.div))} {r['gap'] * 1000:.3g} mm "
            f"({r['gap'] / r['amplitude']:.1%}); replay {r['replay'] * 1000:.3g} mm; projection "
            f"{r['projection'] * 1000:.3g} mm, its motion carried {r['carried'] * 1000:.3g} mm"
        )
    return rows


@pytest.fixture(scope="module")
def block_dir(tmp_path_factory):
    """Bakes of the stocky bar's grids, shared by the resolution tests."""
    return tmp_path_factory.mktemp("licrom_block")


def test_finer_mesh_from_one_coarse_mesh(block_dir):
    """Trained on one coarse grid of the stocky bar (8x6x6, 1,728 tets), a held-out
    pull-and-twist replayed on the 12x9x9 grid (3.4x the tets) against that mesh's own
    full-space bake. The two meshes' full-space bakes differ by 8.5% of the motion, 2.9x the
    model's coarse error (linear tets converge to first order under a twist: ``python
    bench/licrom.py --resolution`` measures 34% at 4x3x3 -> 12x9x9, 15% at 8x6x6 -> 24x18x18,
    4.7% at 12x9x9 -> 18x13x13). Bakes of one mesh show only that mesh's motion, so on a finer
    mesh the model takes up part of the gap, not all of it (its error is 0.36-0.74x the gap
    on the bench's meshes), whatever the model (latent 6 or 12, volume points or not, a
    curvature penalty on the field: within 5%). The issue's bound (1.5x the coarse error) then
    holds only where the gap is small against the coarse error: 1.14x on this load, 1.31-1.74x
    in six runs on other loads and grids, 2.3x at 8x6x6 -> 24x18x18 (27x the tets). Asserted:
    the fine replay is nearer the fine mesh's physics than the coarse mesh's physics is (under
    0.75x the gap), and the field carries the coarse motion between the coarse nodes (within
    1.5x of its projection error there). Measured as the issue means it, both replays against
    one reference motion (the finest full-space mesh here, 12x9x9, interpolated onto the
    coarse nodes), the fine replay errs 0.35x the coarse one (0.42 against 1.21 mm, of which
    the coarse mesh's own full space is 1.08 mm off): the issue's 1.5x holds."""
    c, f = resolution_check(block_dir, [(8, 6, 6)], [(8, 6, 6), (12, 9, 9)], reference=(12, 9, 9))
    print(
        f"one mesh: fine replay {f['replay'] / c['replay']:.2f}x the coarse, "
        f"{f['replay'] / f['gap']:.2f}x the gap ({f['gap'] / c['replay']:.1f}x the coarse error)"
    )
    print(
        f"against the finest full-space mesh (12x9x9): coarse replay "
        f"{c['to_reference'] * 1000:.3g} mm (its own full space {c['full_to_reference'] * 1000:.3g}"
        f" mm), fine replay {f['to_reference'] * 1000:.3g} mm: "
        f"{f['to_reference'] / c['to_reference']:.2f}x"
    )
    assert f["tets"] >= 3 * c["tets"]
    assert f["replay"] <= 0.75 * f["gap"]
    assert f["carried"] <= 1.5 * c["projection"]
    assert f["to_reference"] <= 1.5 * c["to_reference"]


def test_finer_mesh_from_two_coarse_meshes(block_dir):
    """The resolution check in the form the paper trains (several resolutions of one object):
    trained on the 4x3x3 and 8x6x6 grids of the stocky bar, a held-out pull-and-twist replayed
    on the unseen 6x4x4 grid in between errs at most 1.5x the training grids' mean (1.20x here;
    0.82-1.43x on three other loads), each against its own mesh's full-space bake, though those
    differ by 17-27% of the motion: one model serves every resolution between its training
    grids. Beyond the finer one, what sets the error is the gap to it, as with one grid: on the
    12x9x9 grid (3.4x the tets of 8x6x6) 0.61 mm, 0.56x the 8x6x6 -> 12x9x9 gap, 1.35x the
    8x6x6 error (the issue's 1.5x here, but 1.19-1.89x over four loads, so bounded at 2x and
    stated), where the 8x6x6 model alone gives 0.42 mm (sharing the field with 4x3x3 costs
    about 20% on 8x6x6: 0.45 against 0.37 mm; ``bench/licrom.py --resolution``). Against the
    4x3x3 physics it follows the finer mesh's (under a quarter of that gap; the 4x3x3 model
    alone: 0.56x)."""
    c, m, f, between = resolution_check(
        block_dir,
        [(4, 3, 3), (8, 6, 6)],
        [(4, 3, 3), (8, 6, 6), (12, 9, 9), (6, 4, 4)],
        reference=(12, 9, 9),
    )
    trained = (c["replay"] + m["replay"]) / 2
    print(
        "against the finest full-space mesh (12x9x9): "
        + ", ".join(
            f"{'x'.join(map(str, r['grid']))} replay {r['to_reference'] * 1000:.3g} mm (its own "
            f"full space {r['full_to_reference'] * 1000:.3g} mm)"
            for r in (c, between, m, f)
        )
    )
    print(
        f"two meshes: 12x9x9 {f['replay'] / m['replay']:.2f}x the 8x6x6 error, "
        f"{f['replay'] / c['replay']:.2f}x the 4x3x3's, {f['replay'] / f['gap']:.2f}x its gap "
        f"to 4x3x3; unseen 6x4x4 {between['replay'] / trained:.2f}x the training grids' mean"
    )
    assert f["tets"] >= 3 * m["tets"]
    assert between["replay"] <= 1.5 * trained  # an unseen resolution between the trained ones
    assert f["replay"] <= 0.25 * f["gap"]  # it follows the fine mesh's physics, not 4x3x3's
    assert f["replay"] <= 2.0 * m["replay"]  # 3.4x the tets beyond the finest training grid


@pytest.mark.parametrize("derivatives", [False, True])
def test_mesh_swap_continues_like_full_space(family, derivatives):
    """A notch cut at frame 8: against full space with the same elements removed at the same
    frame, the swapped run's error is at most 2x the error without a hole; the kinetic
    energy does not jump up at the swap; the pins stay put. With Static Derivatives (whose
    uncut run is 10x closer to full space: 0.14 mm against 1.4) the static block is refitted
    to the shape at the nodes the meshes share; carried as it was, the cut run ended 18x
    the uncut one."""
    trained = family
    X, T, pinned = trained.mesh.X, trained.mesh.T, trained.mesh.pinned
    X2, T2, new = _notch(X, T)
    print(f"notch: {len(T) - len(T2)} of {len(T)} tets, {len(X) - len(X2)} nodes")
    assert 0 < len(T) - len(T2) < len(T) // 4
    F, K = 30, 8

    def run(swap: bool):
        red = licrom.load_on_mesh(
            trained.out, X, T, cubature_vertices=0, static_derivatives=derivatives
        )
        full = Simulation(X, T, MATERIAL, red.settings, pinned=pinned)
        errs, jump = [], None
        for f in range(F):
            if swap and f == K:
                keep = new >= 0
                full2 = Simulation(X2, T2, MATERIAL, red.settings, pinned=new[pinned])
                full2.reset(x=full.x[keep], v=full.v[keep])
                full = full2
                rep = red.swap_mesh(X2, T2)
                jump = rep
            full.step()
            red.step()
            errs.append(np.linalg.norm(red.positions() - full.x, axis=1).max())
            assert np.abs(red.positions()[red.pinned] - red.X[red.pinned]).max() == 0.0
        return max(errs), jump

    e0, _ = run(False)
    e1, rep = run(True)
    print(
        f"no swap {e0 * 1000:.3g} mm, notch at frame {K}: {e1 * 1000:.3g} mm "
        f"(ratio {e1 / e0:.2f}); kinetic {rep.kinetic_before:.4g} -> {rep.kinetic_after:.4g} J, "
        f"swap {rep.seconds * 1000:.3g} ms"
    )
    assert e1 <= 2.0 * e0
    assert rep.kinetic_after <= rep.kinetic_before


def superellipsoid(p: float, edge: float = 0.06, scale: float = 1.0):
    """A tet mesh of ``|x|^p + |y|^p + |z|^p <= 0.1^p`` m (p = 2: a ball, large p: a cube),
    an icosphere pushed radially onto the surface, filled by TetGen (tets of about ``edge``)."""
    V, F = surface.icosphere(1.0, 2)
    r = (np.abs(V) ** p).sum(1) ** (-1.0 / p)
    t = mesher.tetrahedralize(
        V * r[:, None] * 0.1 * scale, F, target_edge_length=edge, keep_surface=False
    )
    return SimpleNamespace(X=np.asarray(t.X), T=np.asarray(t.T), pinned=np.zeros(0, np.int64))


SOFT = Material(youngs_modulus=2e5, poisson_ratio=0.25, density=1000.0)
DROP = {"kind": "gravity_drop", "jitter": 0.5}
TRAIN_P, UNSEEN_P = (2, 4, 10), (3, 6)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """Superellipsoids dropped on the ground (the paper's Figs. 5 and 7): a model trained on
    exponents 2, 4 and 10 (two drops each), and the error of a held-out drop replayed on
    those, on the unseen exponents 3 and 6 and on the p = 4 shape meshed with three times as
    many tets."""
    d = tmp_path_factory.mktemp("licrom_shapes")
    meshes = {p: superellipsoid(p) for p in TRAIN_P + UNSEEN_P}
    meshes["4 fine"] = superellipsoid(4, edge=0.06 / 1.6)

    def drop(m, seed, variants=1):
        return bk.BakeSpec(
            material=SOFT.to_dict(),
            scenario=DROP,
            frames=16,
            seed=seed,
            damping=(0.5, 0.0),
            variants=variants,
        )

    paths = []
    for p in TRAIN_P:
        paths += bk.bake_variants(meshes[p], drop(meshes[p], p, 2), d, f"train_{p}")
    out = d / "shapes.nrmodel"
    res = train(
        paths,
        out,
        {
            "latent_dim": 10,
            "epochs": 60,
            "projection_epochs": 0,
            "validation_fraction": 0.0,
            "cubature_vertices": 0,
            "rollout": False,
        },
        device="cpu",
    )
    assert res["meshes"] == 3
    assert load_model(out).metadata["frame"] == licrom.FRAME_FLOATING  # free bodies, the default
    errors, rigid, reports, drivers = {}, {}, {}, {}
    for p, m in meshes.items():
        cache = BakeCache.open(bk.bake(m, drop(m, 100), d / f"held_{p}.nrbake".replace(" ", "_")))
        _, driver = bk.replay_scenario(cache)
        sim = licrom.load_on_mesh(out, m.X, m.T, colliders=driver.colliders(0))
        assert sim.floating and sim.k == 10 + 6
        x = replay_bake(sim, cache, driver)
        full = cache.channel("positions")
        errors[p] = float(np.linalg.norm(x - full, axis=2).max())
        rigid[p] = rigid_removed_error(m.X, sim.mass, x, full)
        reports[p], drivers[p] = sim.domain_report, driver
        print(
            f"p={p}: {len(m.T)} tets, held-out drop error {errors[p] * 1000:.3g} mm, "
            f"{rigid[p] * 1000:.3g} mm with each frame's rigid motion taken out (squash "
            f"{np.ptp(full[:, :, 2], axis=1).min() * 1000:.3g} of "
            f"{np.ptp(m.X[:, 2]) * 1000:.3g} mm tall; turned "
            f"{turn_degrees(m.X, sim.mass, full[-1]):.1f} deg, the replay "
            f"{turn_degrees(m.X, sim.mass, x[-1]):.1f})"
        )
    return SimpleNamespace(
        out=out, meshes=meshes, errors=errors, rigid=rigid, reports=reports, drivers=drivers
    )


def side_by_side(sim, full, frames: int, inputs=lambda f: None):
    """(x, ref) (frames, n, 3): the positions of ``sim`` and of the full-space ``full`` after
    each of ``frames`` steps taken together, frame ``f`` driven by ``inputs(f)``."""
    x, ref = [], []
    for f in range(frames):
        sim.step(inputs(f))
        full.step(inputs(f))
        x.append(sim.positions())
        ref.append(full.x.copy())
    return np.array(x), np.array(ref)


def poke(forces: np.ndarray, frames: int):
    """The frame inputs of ``forces`` held for the first ``frames`` frames, then let go."""
    gone = np.zeros_like(forces)
    return lambda f: FrameInputs(forces=forces if f < frames else gone)


def rigid_removed_error(X, mass, x, ref) -> float:
    """Largest vertex distance (m) between positions ``x`` and ``ref`` (F, n, 3) once each
    frame's best rigid motion is taken out of both (mass-weighted Kabsch onto the rest nodes
    ``X``): the error in the shape alone."""
    (Ra, ca), (Rb, cb) = licrom.body_frames(X, x, mass), licrom.body_frames(X, ref, mass)
    ya = np.einsum("fia,fab->fib", x - ca[:, None], Ra)
    yb = np.einsum("fia,fab->fib", ref - cb[:, None], Rb)
    return float(np.linalg.norm(ya - yb, axis=2).max())


def turn_degrees(X, mass, x, ref=None) -> float:
    """The angle (degrees) of the best rigid rotation of the rest nodes ``X`` onto positions
    ``x`` (n, 3), or from their best rotation onto ``ref`` to that onto ``x``."""
    R = licrom.body_frames(X, x, mass)[0]
    if ref is not None:
        R = R @ licrom.body_frames(X, ref, mass)[0].T
    return float(np.degrees(Rotation.from_matrix(R).magnitude()))


def test_unseen_shapes_of_a_family(shapes):
    """The unseen exponents' error is at most 2x the training exponents'; a shape scaled by 2
    is warned about (share and distance reported)."""
    seen = np.mean([shapes.errors[p] for p in TRAIN_P])
    unseen = np.mean([shapes.errors[p] for p in UNSEEN_P])
    print(
        f"training shapes {seen * 1000:.3g} mm, unseen {unseen * 1000:.3g} mm: {unseen / seen:.2f}x"
    )
    assert unseen <= 2.0 * seen
    # the same in the shapes alone (the ball's roll, which no model here follows closely,
    # weighs on the training shapes' mean above)
    seen = np.mean([shapes.rigid[p] for p in TRAIN_P])
    unseen = np.mean([shapes.rigid[p] for p in UNSEEN_P])
    print(f"rigid motion taken out: {seen * 1000:.3g} mm, unseen {unseen * 1000:.3g} mm: "
          f"{unseen / seen:.2f}x")  # fmt: skip
    assert unseen <= 2.0 * seen
    assert all(r.share_outside == 0.0 for r in shapes.reports.values())
    big = superellipsoid(4, scale=2.0)
    with pytest.warns(licrom.OutOfDomainWarning):
        sim = licrom.load_on_mesh(shapes.out, big.X, big.T)
    print("scaled by 2:", sim.domain_report)
    assert sim.domain_report.share_outside > 0.5


def test_finer_mesh_replays_like_the_training_mesh(shapes):
    """Trained on a coarse mesh of the p = 4 shape, a held-out drop on a mesh with three times
    as many tets: its error is at most 1.5x the coarse mesh's."""
    coarse, fine = shapes.errors[4], shapes.errors["4 fine"]
    n_c, n_f = len(shapes.meshes[4].T), len(shapes.meshes["4 fine"].T)
    print(
        f"{n_c} tets {coarse * 1000:.3g} mm, {n_f} tets {fine * 1000:.3g} mm: {fine / coarse:.2f}x"
    )
    assert n_f >= 2.5 * n_c
    assert fine <= 1.5 * coarse


def spun(shapes, p, axis, spin=8.0, frames=16, mesh=None):
    """The start of the held-out drop of shape ``p`` (its lift and fall speed) set spinning at
    ``spin`` rad/s about ``axis`` through the centre of mass, on ``mesh`` (default the
    shape's own): the model and full space, each from that state; with the ground."""
    m, driver = shapes.meshes[p], shapes.drivers[p]
    mesh = mesh or m
    ground = driver.colliders(0)
    sim = licrom.load_on_mesh(shapes.out, mesh.X, mesh.T, colliders=ground)
    full = Simulation(mesh.X, mesh.T, SOFT, sim.settings, colliders=ground)
    x0 = mesh.X + (driver.x0 - m.X).mean(0)
    spin = spin * np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    v0 = driver.v0.mean(0) + np.cross(spin, x0 - sim.mass @ x0 / sim.mass.sum())
    full.reset(x=x0.copy(), v=v0.copy())
    sim.start_from(x0, v0)
    return sim, full


def test_spinning_free_bodies_are_followed(shapes):
    """A free body's field is trained in its body frame and six rigid modes move the frame
    (core.methods.licrom), so a body turning far more than its training drops did (< 15
    degrees) is followed: the rounded cube (p = 4) and the cube (p = 10) dropped spinning at
    8 rad/s about the vertical (177 degrees in 16 frames). Against full space from the same
    state, the frame follows the turn to under a degree (0.76 and 0.82 measured) and the replay
    errs within 4x its error with each frame's rigid motion taken out (the shape's own error:
    2.19x and 3.24x; 1.67 and 1.91 mm). A field trained in world space cannot turn the body
    (bench/licrom.py --floating: errors of 238 and 264 mm)."""
    for p in (4, 10):
        axis = (0, 0, 1)
        m = shapes.meshes[p]
        sim, full = spun(shapes, p, axis)
        x, ref = side_by_side(sim, full, 16)
        err = float(np.linalg.norm(x - ref, axis=2).max())
        shape = rigid_removed_error(m.X, sim.mass, x, ref)
        turn = turn_degrees(m.X, sim.mass, ref[-1])
        off = max(turn_degrees(m.X, sim.mass, a, b) for a, b in zip(x, ref))
        print(
            f"p={p} spun about {axis}: turned {turn:.1f} deg, the model's frame {off:.2f} deg "
            f"off at most; replay {err * 1000:.3g} mm, shape alone {shape * 1000:.3g} mm: "
            f"{err / shape:.2f}x"
        )
        assert turn > 150.0
        assert off < 1.0 and err <= 4.0 * shape


def test_poked_free_bodies_turn_as_full_space(shapes):
    """Pokes on a free body (the forces of a Blender poke: fixed in world axes while the body
    turns under them): the rounded cube and the ball, in flight, pushed at one end with 40 N
    for 8 frames, then let go. The centre of mass follows full space to rounding (the
    translation modes are exact), the frame follows the turn (136 and 48 degrees) to under 2
    degrees (0.15 and 1.6 measured), and the replay errs within 2x the shape's own error.
    Before the frame was solved again when a step's forces turned it further than its inertia
    predicted, the cube turned at half full space's rate (a linear rotation mode stretches
    the body by its angle squared over two, and the stretch's elastic energy resisted): 366
    mm."""
    for p in (4, 2):
        m = shapes.meshes[p]
        sim = licrom.load_on_mesh(shapes.out, m.X, m.T)
        full = Simulation(m.X, m.T, SOFT, sim.settings)
        F = np.zeros_like(m.X)
        tip = np.flatnonzero(m.X[:, 0] > m.X[:, 0].max() - 0.02)
        F[tip] = [0.0, 40.0 / len(tip), 20.0 / len(tip)]
        x, ref = side_by_side(sim, full, 16, poke(F, 8))
        err = float(np.linalg.norm(x - ref, axis=2).max())
        shape = rigid_removed_error(m.X, sim.mass, x, ref)
        turn = turn_degrees(m.X, sim.mass, ref[-1])
        off = max(turn_degrees(m.X, sim.mass, a, b) for a, b in zip(x, ref))
        cm = np.abs(np.einsum("n,fna->fa", sim.mass / sim.mass.sum(), x - ref)).max()
        print(
            f"p={p} poked: turned {turn:.1f} deg, frame {off:.2f} deg off at most, centre of mass "
            f"{cm:.1e} m off; replay {err * 1000:.3g} mm, shape alone {shape * 1000:.3g} mm"
        )
        assert turn > 40.0 and off < 2.0 and cm < 1e-9
        assert err <= 2.0 * shape


def test_free_body_continues_across_a_mesh_swap(shapes):
    """The spinning rounded cube swapped to its 3.2x-finer mesh at frame 6, and back: the
    kinetic energy does not rise at a swap, the frame does not jump, and the motion goes on
    as a run on the new mesh from the start (the field is one field on both). A swap to a
    mesh with pinned nodes is refused and changes nothing."""
    coarse, fine = shapes.meshes[4], shapes.meshes["4 fine"]
    for a, b in ((coarse, fine), (fine, coarse)):
        run, _ = spun(shapes, 4, (0, 0, 1), mesh=a)
        ref, _ = spun(shapes, 4, (0, 0, 1), mesh=b)
        for _ in range(6):
            run.step()
            ref.step()
        pose = run.pose_of(run.positions())
        rep = run.swap_mesh(b.X, b.T)
        jump = np.abs(run.pose_of(run.positions()).R - pose.R).max()
        gaps = []
        for _ in range(6):
            run.step()
            ref.step()
            gaps.append(np.linalg.norm(run.positions() - ref.positions(), axis=1).max())
        print(
            f"{len(a.T)} -> {len(b.T)} tets: kinetic {rep.kinetic_before:.4g} -> "
            f"{rep.kinetic_after:.4g} J, frame moved {jump:.1e}, then {max(gaps) * 1000:.3g} mm "
            f"from the run on {len(b.T)} tets"
        )
        assert rep.kinetic_after <= rep.kinetic_before
        assert jump < 1e-3 and max(gaps) < 1e-3
    # a free body's state has six rigid coordinates a pinned mesh has not: refused, unchanged
    before = run.get_state()
    with pytest.raises(SimulationError, match="pinned"):
        run.swap_mesh(coarse.X, coarse.T, pinned=np.flatnonzero(coarse.X[:, 2] < -0.09))
    assert run.floating and np.array_equal(run.get_state()["q"], before["q"])


def test_body_frames_take_out_exactly_the_rigid_motion():
    """Mass-weighted Kabsch: a deformed ball moved rigidly gives back that motion (to
    rounding), and the displacement left in its body frame has no rigid part: no net mass
    moment (sum m u = 0) and no first moment of rotation about the centre of mass
    (sum m (X - X_cm) x u = 0), i.e. it is mass-orthogonal to :func:`licrom.rigid_modes`."""
    from neural_rom.core.physics.fem import mass_matrix

    m = superellipsoid(2)
    mass = mass_matrix(m.X, m.T, SOFT.density, lumped=True)
    rng = np.random.default_rng(3)
    y = m.X + 0.01 * np.sin(7 * m.X[:, [1, 2, 0]]) + 0.005 * rng.normal(size=m.X.shape)
    R = Rotation.from_rotvec([0.4, -1.9, 0.7]).as_matrix()
    c = np.array([0.3, -0.2, 1.1])
    R_y, c_y = licrom.body_frames(m.X, y, mass)  # the deformation's own (small) rigid part
    R_f, c_f = licrom.body_frames(m.X, y @ R.T + c, mass)
    off = np.abs(R_f - R @ R_y).max(), np.abs(c_f - (R @ c_y + c)).max()
    u = (y @ R.T + c - c_f) @ R_f - m.X
    cm = mass @ m.X / mass.sum()
    P = licrom.rigid_modes(m.X, cm)
    moment = np.abs(P.T @ (np.repeat(mass, 3) * u.ravel())).max()
    print(f"pose recovered to {max(off):.1e}; rigid moments of the body-frame displacement "
          f"{moment:.1e} (of {np.abs(u).max():.2g} m)")  # fmt: skip
    assert max(off) < 1e-12 and moment < 1e-12


def test_floating_frame_reproduces_full_space_in_the_bodys_own_shapes():
    """The floating frame's kinematics are exact: with a basis that holds a trajectory's
    body-frame shapes (their POD, 4 modes, standing in for the field), the runtime replays a
    ball thrown spinning at 21 rad/s (50 degrees a frame; its own 12 frames, a metre of
    motion) as full space does, to well under a micrometre."""
    from neural_rom.core.physics.fem import mass_matrix

    m = superellipsoid(2)
    settings = SimSettings(damping_alpha=0.0)
    mass = mass_matrix(m.X, m.T, SOFT.density, lumped=True)
    full = Simulation(m.X, m.T, SOFT, settings)
    v0 = np.cross([3.0, 20.0, 5.0], m.X - mass @ m.X / mass.sum()) + [0.3, 0.0, 1.0]
    full.reset(x=m.X.copy(), v=v0.copy())
    x = [m.X]
    for _ in range(12):
        full.step()
        x.append(full.x.copy())
    x = np.array(x)
    R, c = licrom.body_frames(m.X, x, mass)
    u = np.einsum("fia,fab->fib", x - c[:, None], R) - m.X
    pod = mass_weighted_pod(u[1:], mass, np.zeros(0, np.int64), k=4)
    field = SimpleNamespace(basis=lambda X: pod.U.copy(), r=4, center=np.zeros(3))
    sim = licrom.LicromSimulation(field, m.X, m.T, SOFT, settings, cubature_vertices=0,
                                  floating=True)  # fmt: skip
    sim.start_from(m.X, v0)
    err = 0.0
    for f in range(1, 13):
        sim.step()
        err = max(err, float(np.linalg.norm(sim.positions() - x[f], axis=1).max()))
    reach = np.linalg.norm(x - m.X, axis=2).max()
    print(f"{reach:.3g} m of motion, turned {turn_degrees(m.X, mass, x[-1]):.0f} deg at the "
          f"end; replay {err:.2e} m from full space")  # fmt: skip
    assert reach > 0.5 and err < 1e-6


def test_floating_state_restores_bit_identically(shapes):
    """A spinning free body's state (latent, velocity and the frame's last two poses) saved
    mid-run and restored continues bit for bit as the run that never stopped."""
    sim, _ = spun(shapes, 4, (0.3, 0.0, 1.0))
    for _ in range(4):
        sim.step()
    saved = sim.get_state()
    assert "pose" in saved and "pose_prev" in saved
    for _ in range(4):
        sim.step()
    a = sim.positions()
    sim.set_state(saved)
    for _ in range(4):
        sim.step()
    print(f"restored run vs the uninterrupted one: {np.abs(sim.positions() - a).max():.1e} m")
    assert np.array_equal(sim.positions(), a)


def test_cancelled_training_resumes_to_the_same_model(bakes, tmp_path):
    """A run cancelled after its first checkpoint resumes from it and ends with the model of
    an uninterrupted run (same field weights, bit for bit on the CPU)."""
    settings = {
        "latent_dim": 4,
        "epochs": 6,
        "projection_epochs": 4,
        "checkpoint_every": 3,
        "validation_fraction": 0.0,
        "rollout": False,
    }
    whole = train(bakes.plain, tmp_path / "whole.nrmodel", settings, device="cpu")

    def cancel_after_first_checkpoint():
        return any((tmp_path / "ck").glob("licrom_*.pt"))

    with pytest.raises(JobCancelled, match="epoch 3"):
        train(
            bakes.plain,
            tmp_path / "cut.nrmodel",
            settings,
            device="cpu",
            checkpoint_dir=tmp_path / "ck",
            should_cancel=cancel_after_first_checkpoint,
        )
    said = []
    resumed = train(
        bakes.plain,
        tmp_path / "cut.nrmodel",
        settings,
        device="cpu",
        checkpoint_dir=tmp_path / "ck",
        progress=lambda f, m: said.append(m),
    )
    assert any("resumed at epoch 3" in m for m in said)
    a, b = (
        load_model(tmp_path / "whole.nrmodel").arrays,
        load_model(tmp_path / "cut.nrmodel").arrays,
    )
    diff = max(float(np.abs(a[k] - b[k]).max()) for k in a if k.startswith("field"))
    print(
        f"resumed vs whole: field weights differ by {diff:.1e}; ratio to POD "
        f"{whole['projection_ratio_to_pod']:.4f} vs {resumed['projection_ratio_to_pod']:.4f}"
    )
    assert diff == 0.0


def test_gradient_scheme_converges_to_the_newton_step(trained):
    """The paper's gradient steps (eq. 9-10) are a stable iteration on the same incremental
    potential: with enough of them a frame lands on the Newton solution; with the default 10
    the frame is what the paper's scheme gives (bounded, not converged)."""
    X, T = trained.mesh.X, trained.mesh.T
    f = np.zeros_like(X)
    f[np.argmax(X[:, 0])] = [0.0, 2.0, 4.0]
    # the field's basis alone, as the paper's (the static modes lie close to the field's
    # span, and the mass-preconditioned steps crawl along the directions they nearly share)
    kw = {"cubature_vertices": 0, "static": False}
    newton = licrom.load_on_mesh(trained.out, X, T, **kw)
    many = licrom.load_on_mesh(trained.out, X, T, solver="gradient", **kw)
    many.gradient_iterations = 3000
    few = licrom.load_on_mesh(trained.out, X, T, solver="gradient", **kw)
    for sim in (newton, many, few):
        for _ in range(3):
            sim.step(FrameInputs(forces=f))
    d_many = np.abs(many.positions() - newton.positions()).max()
    d_few = np.abs(few.positions() - newton.positions()).max()
    moved = np.abs(newton.positions() - X).max()
    print(
        f"tip {moved * 1000:.3g} mm; 3000 gradient steps {d_many:.2e} m from Newton, "
        f"10 steps {d_few * 1000:.3g} mm"
    )
    assert d_many < 1e-6 and d_few < moved


def test_bad_inputs_are_refused_and_change_nothing(trained, bakes, tmp_path):
    sim = licrom.load_on_mesh(trained.out, trained.mesh.X, trained.mesh.T)
    sim.step(FrameInputs(forces=np.ones_like(trained.mesh.X)))
    before = sim.get_state()
    with pytest.raises(SimulationError, match="tets"):
        sim.swap_mesh(trained.mesh.X, trained.mesh.T + len(trained.mesh.X))
    assert len(sim.X) == len(trained.mesh.X)
    assert all(np.array_equal(before[k], sim.get_state()[k]) for k in ("q", "qdot"))
    with pytest.raises(SimulationError, match="solver"):
        licrom.load_on_mesh(trained.out, trained.mesh.X, trained.mesh.T, solver="adam")
    # bakes of another physics are not one training set
    stiff = bar((10, 2, 2))
    other = bk.BakeSpec(
        material=Material(youngs_modulus=5e6, poisson_ratio=0.25, density=1000.0).to_dict(),
        scenario={"kind": "gravity_drop", "jitter": 0.0},
        frames=2,
        pinned=stiff.pinned.tolist(),
    )
    odd = bk.bake(stiff, other, tmp_path / "stiff.nrbake")
    with pytest.raises(NeuralRomError, match="one model per physics"):
        train([bakes.plain[0], odd], tmp_path / "x.nrmodel", {"epochs": 1}, device="cpu")
    assert not (tmp_path / "x.nrmodel").exists()


def test_objects_placed_apart_share_a_reference_space(bakes):
    """Bakes of two objects placed apart (the bar at its place, the notched bar one metre
    along y), each given its object's origin: the model's field, domain and pins live relative
    to those origins, so the notched bar is inside the domain where it stands (given its
    origin), pinned at its own end, and its motion is the same as the same mesh at the
    reference place; without the origin it is reported far outside."""
    t = np.array([0.0, 1.0, 0.0])
    moved = SimpleNamespace(X=bakes.notched.X + t, T=bakes.notched.T, pinned=bakes.notched.pinned)
    sag = {"kind": "gravity_drop", "jitter": 0.5}
    d = bakes.dir / "apart"
    far = bk.bake_variants(moved, spec(moved, sag, seed=4), d, "moved_sag")
    far += bk.bake_variants(moved, spec(moved, POKES, seed=5), d, "moved_pokes")
    entries = [{"path": str(p), "origin": [0.0, 0.0, 0.0]} for p in bakes.plain]
    entries += [{"path": str(p), "origin": t.tolist()} for p in far]
    m = _train(bakes, entries, "apart", validation_fraction=0.0, rollout=False)
    meta = load_model(m.out).metadata
    assert meta["reference"] == licrom.REFERENCE_OBJECT
    # the domain sample is the union of the two meshes relative to their origins: within the
    # bar's box, not a metre away
    samples = load_model(m.out).arrays["domain_samples"]
    print("domain sample y range", samples[:, 1].min(), samples[:, 1].max())
    assert samples[:, 1].max() <= SIZE[1] + 1e-9
    sim, _ = load_simulator(m.out, mesh=(moved.X, moved.T, t))
    print("placed with its origin:", sim.domain_report)
    assert sim.domain_report.share_outside == 0.0
    assert np.array_equal(sim.pinned, moved.pinned)
    # the random cubature is seeded by each mesh's hash (a moved mesh draws another): compare
    # the dynamics with the exact energy
    sim = licrom.load_on_mesh(m.out, moved.X, moved.T, origin=t, cubature_vertices=0)
    home = licrom.load_on_mesh(m.out, bakes.notched.X, bakes.notched.T, cubature_vertices=0)
    f = np.zeros_like(moved.X)
    f[np.argmax(moved.X[:, 0])] = [0.0, 3.0, 5.0]
    for _ in range(5):
        sim.step(FrameInputs(forces=f))
        home.step(FrameInputs(forces=f))
    gap = np.abs((sim.positions() - t) - home.positions()).max()
    print(f"moved vs home: {gap:.2e} m after 5 steps")
    assert gap < 1e-9
    with pytest.warns(licrom.OutOfDomainWarning):
        lost, _ = load_simulator(m.out, mesh=(moved.X, moved.T))
    print("without its origin:", lost.domain_report)
    assert lost.domain_report.share_outside > 0.9
    # a list mixing bakes with and without origins is refused before anything is written
    with pytest.raises(NeuralRomError, match="origin"):
        train([*entries[:1], str(far[0])], bakes.dir / "mixed.nrmodel", {"epochs": 1})
    assert not (bakes.dir / "mixed.nrmodel").exists()


@pytest.mark.parametrize("static", [False, True])
def test_timeline_continues_across_a_mesh_swap(trained, static):
    """The frame cache across a swap (what Apply Mesh Edit does in Blender): the bar sags for
    6 frames on its coarse mesh, swaps to a 2x finer one at frame 6, and goes on; the frames
    after the swap are forgotten and simulated on the new mesh, the earlier ones are shown on
    it from their latent states. With the field alone the swap frame does not move at the
    coarse nodes and the continued run stays with a run that never swapped; with Static
    Modes the static coordinates are each mesh's own sag under 1 g, so the swap frame moves
    by exactly the two meshes' sag difference at them (the finer mesh is more compliant:
    full space sags it 50% more)."""
    from neural_rom.core.engine.timeline import Timeline
    from scipy.spatial import cKDTree

    coarse, fine = trained.mesh, bar((20, 4, 4))
    kw = {"cubature_vertices": 0, "static": static}
    run = Timeline(licrom.load_on_mesh(trained.out, coarse.X, coarse.T, **kw), 1)
    ref = Timeline(licrom.load_on_mesh(trained.out, coarse.X, coarse.T, **kw), 1)
    for f in range(2, 9):
        run.positions_at(f)
        ref.positions_at(f)
    q3 = run.cache.get(3).state["q"].copy()
    ke = run.sim.kinetic_energy()
    run.positions_at(6)
    rep = run.swap_mesh(6, fine.X, fine.T)
    print(f"swap: {rep.seconds * 1000:.1f} ms, kinetic {rep.kinetic_before:.3e} -> "
          f"{rep.kinetic_after:.3e} J")  # fmt: skip
    assert run.mesh == 1 and run.cache.frames == [1, 2, 3, 4, 5, 6]
    assert rep.kinetic_after <= rep.kinetic_before * (1 + 1e-12) and ke > 0
    P3 = run.positions_at(3)
    sim = run.sim
    assert P3.shape == fine.X.shape
    assert np.allclose(P3, sim.world(fine.X + (sim.U @ q3).reshape(-1, 3)), atol=1e-12)
    # the swap frame: the same q on a field evaluated at the same points where the meshes
    # share nodes, so the same positions there (the motion does not jump)
    # the swap frame: the same q on a field evaluated at the same points where the meshes
    # share nodes, so the field's part of the motion does not jump; the static coordinates
    # are each mesh's own sag under 1 g (the finer mesh is more compliant), so that part
    # moves by exactly the difference of the two meshes' sags at the state's coordinates
    at = cKDTree(fine.X).query(coarse.X)[1]
    q6 = run.cache.get(6).state["q"]
    before = ref.sim
    assert run.sim.k == before.k == R + 3 * static
    sags = (sim.U[:, R:] @ q6[R:]).reshape(-1, 3)[at] - (before.U[:, R:] @ q6[R:]).reshape(-1, 3)
    jump = run.positions_at(6)[at] - ref.positions_at(6)
    print(f"frame 6 at the coarse nodes after the swap: {np.abs(jump).max() * 1000:.3g} mm from "
          f"before, the meshes' sags at its static coordinates differ by "
          f"{np.abs(sags).max() * 1000:.3g} mm")  # fmt: skip
    assert np.abs(jump - sags).max() < 1e-12 and (np.abs(sags).max() > 1e-3) == static
    if static:
        return
    P8 = run.positions_at(8)
    assert P8.shape == fine.X.shape and run.cache.get(8).mesh == 1
    gap = np.abs(P8[at] - ref.positions_at(8)).max()
    sag = np.abs(ref.positions_at(8) - coarse.X).max()
    print(f"frame 8 at the coarse nodes: {gap * 1000:.3g} mm from the run that never swapped "
          f"(sag {sag * 1000:.3g} mm)")  # fmt: skip
    assert sag > 1e-3 and gap < 0.25 * sag


def test_a_tight_time_budget_plans_the_whole_schedule(bakes, tmp_path, monkeypatch):
    """With too little time for the epochs asked, the run times its first epochs and plans
    fewer, with the learning-rate drops at the same fractions, and runs the plan to its end
    (not cut at the budget before the drops). A fake clock (every reading 10 ms later) makes the timings, and so the plan, the same on every
    machine."""
    from neural_rom.training.licrom import trainer

    clock = iter(np.arange(1, 1e7) * 0.01)
    monkeypatch.setattr(trainer.time, "perf_counter", lambda: float(next(clock)))
    lrs = []
    factor = trainer._lr_factor
    monkeypatch.setattr(
        trainer, "_lr_factor", lambda e, n: lrs.append(factor(e, n)) or factor(e, n)
    )
    settings = {"latent_dim": 4, "epochs": 400, "projection_epochs": 0, "time_budget": 1.0,
                "validation_fraction": 0.0, "rollout": False, "checkpoint_every": 5}  # fmt: skip
    res = train(bakes.plain, tmp_path / "planned.nrmodel", settings, device="cpu")
    planned, done = res["epochs_planned"], res["epochs_done"]
    print(f"400 epochs asked, {planned} planned, {done} run; learning-rate factors "
          f"{sorted(set(lrs), reverse=True)}; {res['warnings']}")  # fmt: skip
    assert trainer._PLAN_AFTER < planned < 400 and done == planned
    assert sorted(set(lrs), reverse=True) == [1.0, 0.2, 0.02]  # the schedule's three rates
    assert any("planned" in w and "Time Budget" in w for w in res["warnings"])
    assert not any("ran out" in w for w in res["warnings"])
    # the plan is what fits: its epochs take about the budget's share on this clock
    assert trainer.planned_epochs(0.02, 1.0, 0, 400) == 45
    assert trainer._split_plan(45, 300, 100, 3) == (34, 11)
    assert trainer._split_plan(45, 300, 100, 40) == (41, 4)  # never fewer than the done


# ------------------------------------------------------------------------------ pins


def _cone(depth, n=8, r0=0.08, r1=0.02, edge=0.05):
    """A truncated cone hanging from its base cap at z = 0 (``n`` vertices per ring, the base
    ring first), tetrahedralized as the add-on does (TetGen may split the surface), and its
    pin group: the base ring's vertices."""
    a = 2 * np.pi * np.arange(n) / n
    ring = np.stack([np.cos(a), np.sin(a), np.zeros(n)], 1)
    V = np.concatenate([ring * [r0, r0, 0], ring * [r1, r1, 0] - [0, 0, depth]])
    F = [[i, (i + 1) % n, n + i] for i in range(n)]
    F += [[(i + 1) % n, n + (i + 1) % n, n + i] for i in range(n)]
    F += [[0, i + 1, i] for i in range(1, n - 1)] + [[n, n + i, n + i + 1] for i in range(1, n - 1)]
    m = mesher.tetrahedralize(V, np.array(F), keep_surface=False, target_edge_length=edge)
    return SimpleNamespace(X=np.asarray(m.X), T=np.asarray(m.T), pinned=np.arange(n))


def test_pins_are_the_pin_groups_points_on_every_member():
    """A family of cones pinned at their base ring, whose TetGen meshes put other nodes on the
    base cap (which the bakes leave free): on each trained mesh the model pins exactly its
    ring, not the cap's other nodes (a box around the pins held them too: "Pin targets have
    shape (8, 3), expected (23, 3)"); an unseen length pinned at its base matches the family;
    one pinned at its tip instead is told how far off its pins are, and which of the
    family's points it leaves free; given pins are used as given."""
    short, long_, unseen = _cone(0.3), _cone(0.45), _cone(0.375, edge=0.04)
    pins = licrom.PinPoints.of_meshes(
        [(m.X, m.T, m.pinned) for m in (short, long_)], licrom.PIN_TOLERANCE * 0.5
    )
    for m in (short, long_, unseen):
        cap = np.flatnonzero(np.abs(m.X[:, 2]) < 1e-9)
        print(f"{len(m.X)} nodes: {len(cap)} on the base cap, {len(m.pinned)} pinned")
        assert len(cap) > len(m.pinned)  # TetGen's nodes on the pinned face
        assert np.array_equal(pins.select(m.X), m.pinned)
        rep = pins.check(m.X, m.pinned)
        assert not rep.warn and rep.far == 0 and rep.free == 0
    tip = np.flatnonzero(np.abs(unseen.X[:, 2] + 0.375) < 1e-9)
    rep = pins.check(unseen.X, tip)
    print(rep.message("Pin group 'Tip' of 'Cone'"))
    assert rep.warn and rep.far == len(tip) and rep.free == 8
    assert rep.far_distance_m > 0.3
    assert rep.message("Pin group 'Tip' of 'Cone'").startswith("Pin group 'Tip' of 'Cone' holds")
    assert "Pin the same region" in rep.message()
    # the runtime: the given pins are the pinned nodes, and the report is warned about
    rng = np.random.default_rng(0)  # any field: only which nodes are pinned is checked
    W = [rng.normal(size=(8, 3)), rng.normal(size=(6, 8))]
    field = licrom.Field(
        MLP(W, [np.zeros(8), np.zeros(6)], ["tanh", "identity"]), np.zeros(3), 0.5, 0.01
    )
    with pytest.warns(licrom.PinWarning, match="farther than"):
        sim = licrom.LicromSimulation(
            field, unseen.X, unseen.T, MATERIAL, pins=pins, pinned=tip, cubature_vertices=0
        )
    assert np.array_equal(sim.pinned, tip) and sim.pin_report.far == len(tip)
    sim = licrom.LicromSimulation(field, short.X, short.T, MATERIAL, pins=pins, cubature_vertices=0)
    assert np.array_equal(sim.pinned, short.pinned) and not sim.pin_report.warn


def test_static_modes_give_a_pinned_body_full_spaces_sag(trained):
    """With Static Modes the mesh's own sag under 1 g along x, y and z joins the field's basis
    (k = r + 3, the pins held). Rayleigh-Ritz: the subspace's linear static sag under
    gravity (``U^T K U q = U^T f``) is then full space's to rounding, on the training bar and
    on a finer remesh, where the field's basis alone is stiffer (its compliance ``f . u`` is
    smaller: a basis without the static deflection sags less); and it follows full space's
    30 frames from rest no worse than the field alone (exact energy)."""
    from scipy.sparse.linalg import spsolve

    for div in ((10, 2, 2), (20, 4, 4)):
        m = bar(div)
        free = np.ones(3 * len(m.X), bool)
        free[(3 * m.pinned[:, None] + np.arange(3)).ravel()] = False
        K = TetFEM(m.X, m.T, MATERIAL).hessian(m.X, project=False).tocsc()
        compliance = {}
        for static in (False, True):
            red = licrom.load_on_mesh(trained.out, m.X, m.T, cubature_vertices=0, static=static)
            f = (red.mass[:, None] * np.asarray(red.settings.gravity)[None]).ravel()
            u = np.zeros_like(f)
            u[free] = spsolve(K[free][:, free], f[free])
            U = red.U
            u_red = U @ np.linalg.solve(U.T @ (K @ U), U.T @ f)
            compliance[static] = (float(f @ u_red), float(f @ u), red.k)
            off = np.abs(u_red - u).max() / np.abs(u).max()
            print(f"{div} static modes {static}: k {red.k}, sag {np.abs(u_red).max() * 1000:.4g} "
                  f"mm against full space's {np.abs(u).max() * 1000:.4g} (off {off:.1e})")  # fmt: skip
            if static:
                assert off < 1e-8
        (c_field, c_full, k_field), (c_static, _, k_static) = compliance[False], compliance[True]
        assert k_static == k_field + 3
        assert c_field < c_full * (1 - 1e-6) and abs(c_static - c_full) < 1e-9 * c_full
    m = trained.mesh
    errs = {}
    for static in (False, True):
        red = licrom.load_on_mesh(trained.out, m.X, m.T, cubature_vertices=0, static=static)
        errs[static] = _from_rest_error(red, m)
        assert np.abs(red.positions()[m.pinned] - m.X[m.pinned]).max() == 0.0
    print(f"30 frames from rest: field {errs[False] * 1000:.3g} mm, with static modes "
          f"{errs[True] * 1000:.3g} mm")  # fmt: skip
    assert errs[True] <= errs[False]


def test_static_modes_banded_solve_is_superlus_and_falls_back(monkeypatch):
    """The static modes' solve (:func:`licrom.modes._spd_factor`): LAPACK's banded Cholesky on the
    band stored in its own order, in the nodes' RCM order, gives SuperLU's and a plain sparse
    solve's deflections to 1e-10 (relative, each mode), on a slender bar pinned at one end
    and on the same bar with both ends pinned; a block that is not positive definite (the
    stiffness shifted past its smallest eigenvalue) is solved by SuperLU, to 1e-9."""
    from scipy.sparse import identity
    from scipy.sparse.linalg import eigsh, spsolve

    m = bar((12, 2, 2))
    both = np.flatnonzero(np.isclose(m.X[:, 0], 0.0) | np.isclose(m.X[:, 0], SIZE[0]))
    for pinned in (m.pinned, both):
        K = TetFEM(m.X, m.T, MATERIAL).hessian(m.X, project=False)
        banded = licrom.static_modes(m.X, m.T, MATERIAL, pinned, K=K)
        with monkeypatch.context() as patch:
            patch.setattr(licrom.modes, "BANDED_FLOPS", 0.0)  # every band too costly: SuperLU
            lu = licrom.static_modes(m.X, m.T, MATERIAL, pinned, K=K)
        free = np.ones(3 * len(m.X), bool)
        free[(3 * pinned[:, None] + np.arange(3)).ravel()] = False
        f = banded[free]
        ref = spsolve(K.tocsc()[free][:, free], (K @ banded)[free])
        for other in (lu[free], ref):
            off = np.linalg.norm(f - other, axis=0) / np.linalg.norm(other, axis=0)
            assert off.max() < 1e-10, off
        assert np.abs(banded[~free]).max() == 0.0 and np.abs(f).max() > 1e-4
    idx = np.flatnonzero(free)
    Kf = K.tocsc()[idx][:, idx]
    low = eigsh(Kf, k=1, sigma=0, which="LM", return_eigenvectors=False)[0]
    shifted = K - 1.5 * low * identity(K.shape[0])  # indefinite on the free dofs
    b = np.random.default_rng(0).standard_normal((len(idx), 2))
    x = licrom.modes._spd_factor(shifted, m.T, idx)(b)
    ref = spsolve(shifted.tocsc()[idx][:, idx], b)
    assert np.linalg.norm(x - ref) < 1e-9 * np.linalg.norm(ref)


def _from_rest_error(red, m, frames: int = 30) -> float:
    """The largest vertex distance (m) of ``red``'s run from rest on the pinned mesh ``m``
    from full space's over ``frames`` frames (the same settings)."""
    full = Simulation(m.X, m.T, MATERIAL, red.settings, pinned=m.pinned)
    err = 0.0
    for _ in range(frames):
        red.step()
        full.step()
        err = max(err, float(np.linalg.norm(red.positions() - full.x, axis=1).max()))
    return err


def _reduced_static_sag(sim) -> np.ndarray:
    """Displacements (n, 3) of the reduced static equilibrium under the settings' gravity
    (Newton on ``E(q) - f_g . q`` with the runtime's own elastic energy: its cubature and
    its rest-stiffness correction)."""
    q = np.zeros(sim.k)
    for _ in range(50):
        _, g, H = sim._elastic(q, 2, project=False)
        dq = -np.linalg.solve(H, g - sim.f_gravity)
        q += dq
        if np.abs(sim.U @ dq).max() < 1e-12:
            break
    return (sim.U @ q).reshape(-1, 3)


def _full_static_sag(X, T, pinned, gravity) -> np.ndarray:
    """Displacements (n, 3) of full space's static equilibrium under ``gravity`` (Newton with
    the exact Hessian on the free DOFs, halved steps while the energy rises)."""
    from neural_rom.core.physics.fem import mass_matrix
    from scipy.sparse.linalg import spsolve

    fem = TetFEM(X, T, MATERIAL)
    f = np.asarray(mass_matrix(X, T, MATERIAL.density, lumped=True))[:, None] * gravity
    free = np.ones(3 * len(X), bool)
    free[(3 * pinned[:, None] + np.arange(3)).ravel()] = False
    x = X.copy()

    def potential(x):
        return fem.energy(x) - float(np.sum(f * (x - X)))

    for _ in range(50):
        _, g, H = fem.energy_gradient_hessian(x, project=False)
        r = (g - f).ravel()[free]
        d = np.zeros(3 * len(X))
        d[free] = -spsolve(H.tocsc()[free][:, free], r)
        d = d.reshape(-1, 3)
        a, e0 = 1.0, potential(x)
        while potential(x + a * d) > e0 and a > 1e-4:
            a *= 0.5
        x = x + a * d
        if np.abs(a * d).max() < 1e-12:
            break
    return x - X


def test_static_derivatives_are_the_second_order_static_response():
    """Static Derivatives: ``D_ij`` of :func:`licrom.static_modes` is the second-order term of
    full space's nonlinear static response to the body loads ``s (e_i + e_j)`` g (Newton to
    1e-12 m): ``(u(s a) + u(-s a)) / s^2 -> sum_ij a_i a_j D_ij`` as ``s -> 0``, with the
    O(s^2) remainder (the estimate's error falls about 4x when ``s`` halves), on a cantilever
    bar loaded across (z) and across both ways (y + z) at tip deflections of 1-2% of its
    length; and ``(u(s a) - u(-s a)) / 2 s`` is ``S a`` to the same order."""
    m = bar((10, 2, 2))
    SD = licrom.static_modes(m.X, m.T, MATERIAL, m.pinned, derivatives=True)
    assert SD.shape == (3 * len(m.X), 9)
    S, D = SD[:, :3], SD[:, 3:]
    col = {pair: c for c, pair in enumerate((i, j) for i in range(3) for j in range(i, 3))}
    for a in (np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0])):
        second = sum(a[i] * a[j] * (1 if i == j else 2) * D[:, c] for (i, j), c in col.items())
        errs = []
        for s in (0.2, 0.1):
            g = s * licrom.STATIC_ACCELERATION * a
            up, um = (_full_static_sag(m.X, m.T, m.pinned, sign * g).ravel() for sign in (1, -1))
            first = np.abs((up - um) / (2 * s) - S @ a).max() / np.abs(S @ a).max()
            errs.append(np.abs((up + um) / s**2 - second).max() / np.abs(second).max())
            print(f"a {a}, s {s}: tip {np.abs(up).max() * 1000:.3g} mm, second-order term off "
                  f"{errs[-1]:.2e}, first-order {first:.2e}")  # fmt: skip
            assert first < 2e-3
        assert errs[1] < 5e-3 and errs[1] < 0.4 * errs[0]


def test_static_derivatives_follow_full_space_closer(bakes, trained):
    """Static Derivatives: the same field with its static modes and their six derivatives
    (k = r + 9) follows full space from rest (30 frames, exact energy) closer than with the
    static modes alone; a model trained with the setting keeps the training frames' static
    coordinates in its codes (c, r + 9), the cubature is fitted to them as they are, and its
    held-out replay with that cubature stays within 2x of the exact energy's."""
    m = trained.mesh
    errs = {}
    for derivatives in (False, True):
        red = licrom.load_on_mesh(
            trained.out, m.X, m.T, cubature_vertices=0, static_derivatives=derivatives
        )
        assert red.k == R + 3 + 6 * derivatives
        errs[derivatives] = _from_rest_error(red, m)
    print(f"30 frames from rest: static modes {errs[False] * 1000:.3g} mm, with their "
          f"derivatives {errs[True] * 1000:.3g} mm")  # fmt: skip
    assert errs[True] < 0.5 * errs[False]
    model = _train(bakes, bakes.plain[:-1], "derivatives", validation_fraction=0.0,
                   static_derivatives="auto", rollout=False)  # fmt: skip
    # Auto turns them on: the bar's pokes deflect it 40% of its length (second-order static
    # response 2.5x the first-order one; threshold 0.2); the trainer says so and records it
    assert model.res["choice"].startswith("Static Derivatives on (automatic)")
    assert model.res["static_second_order"] > 5 * licrom.DERIVATIVES_AUTO_RATIO
    stored = load_model(model.out)
    codes = stored.arrays["cubature_codes"]
    assert codes.shape[1] == R + 9 and model.res["k"] == R + 9
    assert stored.metadata["static_derivatives"] is True
    held = BakeCache.open(bakes.plain[-1])  # a poke bake not trained on
    x = np.asarray(held.channel("positions"))
    out = {}
    for name, kw in (("fitted", {}), ("exact", {"cubature_vertices": 0})):
        sim = licrom.load_on_mesh(model.out, m.X, m.T, **kw)
        assert sim.k == R + 9
        _, driver = bk.replay_scenario(held)
        out[name] = float(np.linalg.norm(replay_bake(sim, held, driver) - x, axis=2).max())
        if name == "fitted":
            assert sim.cubature_info["converged"] and len(sim.elements) < len(m.T)
    print(f"held-out replay: fitted cubature {out['fitted'] * 1000:.3g} mm, exact "
          f"{out['exact'] * 1000:.3g} mm")  # fmt: skip
    assert out["fitted"] <= 2.0 * out["exact"]


def test_static_sag_is_full_spaces_on_a_trained_and_an_unseen_mesh(trained):
    """Static Modes (the default): the reduced static equilibrium under a tenth of gravity,
    with the fitted cubature the runtime uses (its forces weighed in a stiffness-orthonormal
    basis), is full space's nonlinear one within 2% of the sag (measured 0.1-0.9%; the tip
    sags 1-2% of the bar's length) on the training bar, on a 2x finer remesh and on a bar
    notched where no training mesh was; the field alone is more than 4x farther off on each
    (5-47% measured). Under full gravity the bar sags 15% of its length and the linear
    static modes miss the geometric nonlinearity of an unseen mesh: 11% (remesh) and 20%
    (notch) off with the exact energy, 0.8% on the training bar."""
    import dataclasses

    coarse = bar((10, 2, 2))
    Xn, Tn, new = _notch(coarse.X, coarse.T, x0=0.1, x1=0.2)
    meshes = {
        "trained": trained.mesh,
        "remesh": bar((20, 4, 4)),
        "unseen notch": SimpleNamespace(X=Xn, T=Tn, pinned=new[coarse.pinned]),
    }
    gravity = np.array([0.0, 0.0, -0.981])
    settings = dataclasses.replace(
        licrom.load_on_mesh(trained.out, coarse.X, coarse.T).settings, gravity=tuple(gravity)
    )
    for name, m in meshes.items():
        full, offs = _full_static_sag(m.X, m.T, m.pinned, gravity), {}
        for static in (True, False):
            sim = licrom.load_on_mesh(
                trained.out, m.X, m.T, pinned=m.pinned, static=static, settings=settings
            )
            assert sim.cubature_info.get("method") == "optimized"
            u = _reduced_static_sag(sim)
            offs[static] = np.abs(u - full).max() / np.abs(full).max()
            print(f"{name}: static modes {static}, k {sim.k}, {len(sim.elements)} cubature "
                  f"elements: sag {np.abs(u).max() * 1000:.3g} mm against full space's "
                  f"{np.abs(full).max() * 1000:.3g} mm (off {offs[static]:.2%})")  # fmt: skip
        assert offs[True] < 0.02 and offs[True] < 0.25 * offs[False]


def _swung(mesh, turn: float, frames: int = 24) -> list:
    """Pin targets (frames + 1, p, 3) swinging ``mesh``'s pins about y through the origin,
    ``turn`` radians either way once a second."""
    a = turn * np.sin(2 * np.pi * np.arange(frames + 1) / 24.0)
    R = Rotation.from_rotvec(a[:, None] * np.array([0.0, 1.0, 0.0])).as_matrix()
    return np.einsum("fab,pb->fpa", R, mesh.X[mesh.pinned]).tolist()


def test_static_derivatives_auto_turns_them_on_for_a_swung_bar_off_for_a_stiff_one(tmp_path):
    """Static Derivatives' Auto (training's ``derivatives_choice``): the bar swung 0.6 rad
    either way by its keyed pins reaches a second-order static response 0.62 of its
    first-order one (measured), on at threshold 0.2; the same bar 100x stiffer sagging under
    gravity stays at 0.0005, off. Margins: 2x either way (measured 3.1x and 390x). "on" /
    "off" are obeyed, and a body without pins or without static modes gets none. Models trained before Auto keep their
    recorded setting (a bool, or none: off)."""
    from neural_rom.training.licrom import derivatives_choice, open_family

    soft = bar((10, 2, 2))
    stiff = Material(youngs_modulus=1e8, poisson_ratio=0.25, density=1000.0)
    swing = spec(soft, {"kind": "gravity_drop", "jitter": 0.0})
    swing.pin_targets = _swung(soft, 0.6)
    sag = spec(soft, {"kind": "gravity_drop", "jitter": 0.5})
    sag.material = stiff.to_dict()
    made = {
        "swung": bk.bake_variants(soft, swing, tmp_path, "swung"),
        "stiff": bk.bake_variants(soft, sag, tmp_path, "stiff"),
    }
    chosen = {}
    for name, paths in made.items():
        caches, meshes, *_, material, _ = open_family(paths, 0.0, 0, None)
        m = meshes[0]
        frames = [m.displacements(caches[0], np.arange(caches[0].n_frames))]
        metrics = {}
        chosen[name] = derivatives_choice("auto", True, meshes, frames, material, metrics)
        print(name, chosen[name][1])
        ratio = metrics["static_second_order"]
        if name == "swung":
            assert ratio > 2 * licrom.DERIVATIVES_AUTO_RATIO
        else:
            assert ratio < 0.5 * licrom.DERIVATIVES_AUTO_RATIO
        for setting in ("on", "off"):
            on, why = derivatives_choice(setting, True, meshes, frames, material, {})
            assert on == (setting == "on") and "(the setting)" in why
        assert derivatives_choice("on", False, meshes, frames, material, {})[0] is False
    assert chosen["swung"][0] and "on (automatic)" in chosen["swung"][1]
    assert not chosen["stiff"][0] and "off (automatic)" in chosen["stiff"][1]
    free = SimpleNamespace(pinned=np.zeros(0, np.int64))
    on, why = derivatives_choice("on", True, [free], [np.zeros((1, 1, 3))], None, {})
    assert not on and "pinned" in why
    # models trained before Auto: their recorded bool (or nothing: off)
    of = licrom.schema._derivatives_of
    assert of({"training": {"static_derivatives": True}})
    assert not of({"training": {"static_derivatives": False}}) and not of({"training": {}})
    assert of({"training": {"static_derivatives": "auto"}, "static_derivatives": True})
    assert not of({"training": {"static_derivatives": "auto"}, "static_derivatives": False})
