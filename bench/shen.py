"""Shen 2021 (high-order differentiable autoencoder) against full space, PCA at the same DOFs
and Fulton 2019's autoencoder on the same data: DOFs, ms per step, Newton iterations, time in
the decoder derivatives, held-out replay and closest-shape errors, speed ratio, training time.

Scenes, each a set of bakes split into training and held-out bakes by whole trajectory
(fraction 0.2, seed 0, as training splits them):

* ``swing``: the swung arm of ``bench/autoencoder.py`` (a clamped bar bent up to ~90 degrees in
  every direction by a turning body load; heavily damped, near its quasi-static shapes);
* ``pins``: a bar whose clamp an animated object swings 0.2 m and turns 0.8 rad while pokes
  push it (:func:`bake_pins`, 240 tets, 5 bakes of 30 frames; the scene of
  ``tests/test_shen_pins.py``): the pins' moving frame, where every Shen step is the
  variational one (``frame_variational``), so its three Shen rows agree. Measured at 3 + 2,
  300 epochs (load ~20, step times inflated): replay / closest shapes Shen 232.6 / 36.9 mm,
  PCA-5 331.6 / 53.1, Fulton at latent 5 587.5 / 94.6; 11.3 / 0.74 / 2.6 ms a step;
* ``whip``: a thin clamped bar (1 m x 0.04 m x 0.04 m, E = 3 MPa, nu = 0.45, rho = 1000 kg/m^3,
  light Rayleigh damping alpha = 0.5 1/s, beta = 0.002 s, h = 1/48 s, no gravity) whose tip is
  pulled hard in a random direction of the y-z plane (a force ramped over ``PULL`` frames, then
  dropped) and released: it whips back and forth (the paper's Fig. 10), so the velocity-
  dependent fictitious force of the curved subspace matters.

For each scene: Shen with ``n_p + n_z`` DOFs (``core.methods.shen``), the same model
stepped without the fictitious force, PCA with ``n_p + n_z`` modes (``core.methods.linear``),
Fulton's autoencoder with latent size ``n_p + n_z`` on the same PCA layer
(``core.methods.autoencoder``) and, with ``--full``, full space (Newton) on the held-out
bake for the speed ratio. Replay errors are the largest vertex distance from the bake over
every held-out bake and frame; closest-shape errors the largest distance of each model's
closest shape (its :meth:`closest_shape`) over the held-out frames.

Usage::

    python bench/shen.py [--scene swing,whip,pins] [--np 4] [--nz 2] [--epochs 3000]
                         [--divisions 10,2,2] [--whip-divisions 40,2,2] [--variants 8]
                         [--frames 72] [--full] [--no-fulton] [--out DIR]
    python bench/shen.py --speed 56,8,8 [--np 10] [--nz 5]
    python bench/shen.py --cubature MODEL --bakes DIR [--add 10] [--spread 4]

Bakes already in ``--out DIR/<scene>/bakes`` (a previous run's) are reused.
``--speed`` times one step of each model on the 21,504-tet swung arm (:func:`speed`: the
sizes of trained models, random weights), the issue's speed goal (>= 30x full space at
10 + 5 DOFs, decoder derivatives < 2 ms per step).
``--cubature`` compares, on a trained Shen model's subspace (:func:`cubature_table`), the
greedy cubature, the neural weights ``W`` on its elements, the elements the selection network
``S`` picks with NNLS weights and with ``W`` (:mod:`training.shen.cubature`), beside the
paper's Table 1, and replays the held-out bakes with each rule.
One process, one thread (BLAS and torch), torch on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import autoencoder  # noqa: E402
import common  # noqa: E402

WHIP_SIZE = (1.0, 0.04, 0.04)
WHIP_YOUNG, WHIP_POISSON, WHIP_DENSITY = 3.0e6, 0.45, 1000.0
WHIP_DAMPING = (0.5, 0.002)
WHIP_DT = 1.0 / 48.0
#: frames the tip force ramps up over before it drops to zero
PULL = 8
#: tip force range (N, total over the tip face)
PULL_FORCE = (6.0, 12.0)


def whip_load(X: np.ndarray, frames: int, seed: int) -> np.ndarray:
    """Tip force (frames+1, n, 3), N: a random y-z direction, magnitude in ``PULL_FORCE``,
    ramped linearly over ``PULL`` frames, then zero (released)."""
    rng = np.random.default_rng(seed)
    tip = np.flatnonzero(X[:, 0] >= X[:, 0].max() - 1e-9)
    ang = rng.uniform(-np.pi, np.pi)
    mag = rng.uniform(*PULL_FORCE)
    f = np.zeros((frames + 1, len(X), 3))
    ramp = np.clip(np.arange(frames + 1) / PULL, 0.0, 1.0) * (np.arange(frames + 1) <= PULL)
    direction = np.array([0.0, np.cos(ang), np.sin(ang)])
    f[:, tip, :] = (ramp * mag / len(tip))[:, None, None] * direction
    return f


def bake_whip(
    out_dir, *, divisions=(40, 2, 2), variants: int = 8, frames: int = 72, seed: int = 2000
) -> list[Path]:
    """Bake ``variants`` whip bakes (tip pulled and released) into ``out_dir``."""
    from neural_rom.core.bake import BakeSpec, bake
    from neural_rom.core.physics.fem import Material

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    X, T = common.bar_mesh(*divisions, size=WHIP_SIZE)
    pins = common.pinned_end(X)
    mat = Material(WHIP_YOUNG, WHIP_POISSON, WHIP_DENSITY)
    paths = []
    for v in range(variants):
        src = out_dir / f"pull{v:03d}.npz"
        np.savez(src, X=X, forces=whip_load(X, frames, seed + v))
        spec = BakeSpec(
            material=mat.to_dict(),
            scenario={"kind": "replay_forces", "source": str(src)},
            frames=frames,
            dt=WHIP_DT,
            gravity=(0.0, 0.0, 0.0),
            pinned=pins.tolist(),
            damping=WHIP_DAMPING,
            seed=v,
        )
        paths.append(
            bake(autoencoder._Mesh(X, T), spec, out_dir / f"whip_v{v:03d}.nrbake", overwrite=True)
        )
    return paths


def pin_swing(X: np.ndarray, pinned: np.ndarray, frames: int) -> np.ndarray:
    """Pin targets (frames + 1, p, 3) of an animated object: the clamped end turns 0.8 rad
    about z while sliding 0.2 m along y, eased in and out."""
    centre = X[pinned].mean(0)
    path = []
    for f in range(frames + 1):
        s = 0.5 - 0.5 * np.cos(np.pi * f / frames)
        a = 0.8 * s
        R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
        path.append((X[pinned] - centre) @ R.T + centre + s * np.array([0.0, 0.2, 0.0]))
    return np.array(path)


def bake_pins(out_dir, *, divisions=(10, 2, 2), variants: int = 5, frames: int = 30) -> list[Path]:
    """The ``pins`` scene: a 0.5 m bar (E = 200 kPa, nu = 0.4, rho = 1000 kg/m^3, mass
    damping 0.5 1/s, gravity) clamped at x = 0, its clamp swung by :func:`pin_swing` while
    two random pokes a bake push it; ``variants`` bakes differ in the pokes."""
    from types import SimpleNamespace

    from neural_rom.core import bake as bk
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.physics.fem import Material

    X, T = grid_tetmesh((0.5, 0.1, 0.1), tuple(divisions))
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=2e5, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario={"kind": "random_pokes", "count": 2, "strength": 1.0, "duration": 0.4},
        frames=frames,
        pinned=pinned.tolist(),
        pin_targets=pin_swing(X, pinned, frames).tolist(),
        damping=(0.5, 0.0),
        seed=5,
        variants=variants,
    )
    return bk.bake_variants(SimpleNamespace(X=X, T=T), spec, out_dir, "swing")


def heldout(paths):
    """(dataset, held-out trajectory indices, held-out positions (G, n, 3))."""
    ds, _, xv, va = autoencoder.split_frames(paths)
    return ds, va, xv


def closest_error(sim, xv: np.ndarray, every: int = 1) -> float:
    """Largest vertex distance (m) between frames ``xv`` (G, n, 3) and the model's closest
    shapes to them."""
    worst = 0.0
    for x in xv[::every]:
        worst = max(worst, float(np.linalg.norm(sim.closest_shape(x) - x, axis=1).max()))
    return worst


def replay(make_sim, ds, va) -> dict:
    """:func:`autoencoder.rollout` of every held-out bake with a fresh simulator: the largest error,
    and per step the mean ms, Newton iterations, ms evaluating the Newton system (decoder and
    forces, ``derivatives``) and of that in the decoder's derivatives (``decoder``)."""
    rolls = [autoencoder.rollout(make_sim(), ds[int(i)]) for i in va]
    return {
        "err": max(r["err"] for r in rolls),
        "step_ms": float(np.mean([r["step_ms"] for r in rolls])),
        "iters": float(np.mean([r["iters"] for r in rolls])),
        "derivatives_ms": float(np.mean([r["phases"].get("derivatives", 0.0) for r in rolls])),
        "decoder_ms": float(np.mean([r["phases"].get("decoder", 0.0) for r in rolls])),
    }


def compare(
    paths,
    work: Path,
    n_p: int,
    n_z: int,
    *,
    k: int = 30,
    epochs: int = 3000,
    patience: int = 600,
    fulton: bool = True,
    max_cubature: int = 100,
    closest_every: int = 1,
    variational: bool = True,
    **shen_kw,
) -> dict:
    """Train Shen (n_p + n_z), PCA (n_p + n_z modes) and Fulton (latent n_p + n_z) on
    ``paths``; replay every held-out bake with each (Shen also without the fictitious force)
    and measure closest-shape errors on the held-out frames."""
    import torch
    from neural_rom.core import registry
    from neural_rom.core.registry import load_simulator

    torch.set_num_threads(1)
    work = Path(work)
    ds, va, xv = heldout(paths)
    dofs = n_p + n_z
    out: dict = {
        "n_p": n_p,
        "n_z": n_z,
        "dofs": dofs,
        "heldout_bakes": len(va),
        "max_disp_m": float(np.linalg.norm(xv - np.asarray(ds[0].X), axis=-1).max()),
    }
    t0 = time.perf_counter()
    res = registry.get("shen").trainer_function()(
        paths,
        work / "shen.nrmodel",
        registry.get("shen").values(
            dict(
                k=k,
                n_p=n_p,
                latent_dim=n_z,
                epochs=epochs,
                patience=patience,
                max_cubature=max_cubature,
                batch_size=64,
                rollout=False,
                **shen_kw,
            )
        ),
        device="cpu",
    )
    out["shen_train_s"] = time.perf_counter() - t0
    out["shen_encoder_err"] = res["max_error_val_m"]
    out["shen_epochs"] = res["epochs_trained"]
    out["shen_cubature"] = res["cubature_elements"]
    path = work / "shen.nrmodel"
    sim = load_simulator(path)[0]
    out["shen_closest"] = closest_error(sim, xv, closest_every)
    out["shen"] = replay(lambda: load_simulator(path)[0], ds, va)

    def no_fict():
        s = load_simulator(path)[0]
        s.fictitious = False
        return s

    out["shen_nofict"] = replay(no_fict, ds, va)

    def variational_step():
        s = load_simulator(path)[0]
        s.variational = True
        return s

    if variational:
        out["shen_variational"] = replay(variational_step, ds, va)
    t0 = time.perf_counter()
    lin = registry.get("linear").trainer_function()(
        [str(p) for p in paths],
        work / "pca.nrmodel",
        registry.get("linear").values(dict(k=dofs, max_cubature=max_cubature)),
    )
    out["pca_train_s"] = time.perf_counter() - t0
    out["pca_cubature"] = lin["cubature_elements"]
    pca_path = work / "pca.nrmodel"
    out["pca_closest"] = closest_error(load_simulator(pca_path)[0], xv, closest_every)
    out["pca"] = replay(lambda: load_simulator(pca_path)[0], ds, va)
    if fulton:
        t0 = time.perf_counter()
        ae = autoencoder.train_ae(
            paths,
            work / "ae.nrmodel",
            dofs,
            min(epochs, 2000),
            batch_size=64,
            max_cubature=max_cubature,
            pca_fallback=False,
        )
        out["fulton_encoder_err"] = ae["ae_max_error_val_m"]
        out["fulton_train_s"] = time.perf_counter() - t0
        ae_path = work / "ae.nrmodel"
        out["fulton_closest"] = closest_error(load_simulator(ae_path)[0], xv, closest_every)
        out["fulton"] = replay(lambda: load_simulator(ae_path)[0], ds, va)
    return out


def report(name: str, r: dict) -> str:
    rows = [
        ("Shen", "shen", "shen_closest"),
        ("Shen, no fictitious force", "shen_nofict", "shen_closest"),
        ("Shen manifold, variational", "shen_variational", "shen_closest"),
        ("PCA", "pca", "pca_closest"),
        ("Fulton", "fulton", "fulton_closest"),
        ("full space", "full", None),
    ]
    lines = [
        f"{name}: {r['dofs']} DOFs (n_p {r['n_p']} + n_z {r['n_z']}), largest "
        f"displacement {1000 * r['max_disp_m']:.0f} mm, {r['heldout_bakes']} held-out bakes",
        f"  {'model':28s} {'replay mm':>10s} {'closest mm':>11s} {'ms/step':>8s} "
        f"{'iters':>6s} {'decoder ms':>10s} {'x full':>7s}",
    ]
    full_ms = r.get("full", {}).get("step_ms")
    for label, key, ckey in rows:
        if key not in r:
            continue
        m = r[key]
        closest = f"{1000 * r[ckey]:11.1f}" if ckey else f"{'':>11s}"
        ratio = f"{full_ms / m['step_ms']:7.1f}" if full_ms else f"{'':>7s}"
        lines.append(
            f"  {label:28s} {1000 * m['err']:10.1f} {closest} {m['step_ms']:8.2f} "
            f"{m['iters']:6.2f} {m.get('decoder_ms', 0):10.2f} {ratio}"
        )
    lines.append(
        f"  training s: Shen {r['shen_train_s']:.0f}, PCA {r['pca_train_s']:.1f}"
        + (f", Fulton {r['fulton_train_s']:.0f}" if "fulton_train_s" in r else "")
    )
    return "\n".join(lines)


def random_decoder(
    n_z: int, k: int, hidden=(32,) * 6, act: str = "sin", scale: float = 0.02, seed: int = 0
):
    """A random decoder of the trained architecture (``hidden`` sin layers, the trainer's
    initialization), outputs of size ``scale``, ``D(0) = 0``: for timings, where only the
    sizes matter."""
    from neural_rom.core.reduced.nnet import MLP

    rng = np.random.default_rng(seed)
    sizes = [n_z, *hidden, k]
    W = [rng.uniform(-1, 1, size=(o, i)) * np.sqrt(3.0 / i) for i, o in zip(sizes[:-1], sizes[1:])]
    b = [rng.uniform(-0.1, 0.1, size=o) for o in sizes[1:]]
    W[-1] *= scale
    acts = [act] * len(hidden) + ["identity"]
    b[-1] = b[-1] - MLP(W, b, acts).forward(np.zeros(n_z))
    return MLP(W, b, acts)


def speed(
    divisions=(56, 8, 8),
    n_p: int = 10,
    n_z: int = 5,
    k: int = 30,
    frames: int = 12,
    cubature: int = 150,
    full: bool = True,
) -> dict:
    """Step times on the swung arm at ``divisions`` (56, 8, 8: 21,504 tets): full space
    (Newton), PCA with ``n_p + n_z`` modes, Fulton's latent runtime (latent ``n_p + n_z`` on a
    ``k``-mode PCA layer), Shen (``n_p + n_z`` on the same layer) with and without the
    fictitious force. The reduced models share a ``k``-mode vibration basis, ``cubature``
    random elements (weights: the volume they stand for) and decoders of the trained sizes
    with random weights: the cost of a step depends on these sizes, not on what was learnt
    (the accuracy is measured by :func:`compare` on smaller meshes). The load is the scene's
    turning body load; ms per step are means over ``frames`` frames after the first."""
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.methods.autoencoder import AutoencoderSimulation
    from neural_rom.core.methods.linear import LinearSimulation
    from neural_rom.core.methods.shen import ShenSimulation
    from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
    from neural_rom.core.physics.sim import SimSettings, Simulation
    from neural_rom.core.reduced.subspace import modal_basis

    X, T, pins = autoencoder.bar(divisions)
    mat = Material(autoencoder.YOUNG, autoencoder.POISSON, autoencoder.DENSITY)
    st = SimSettings(
        dt=autoencoder.DT,
        gravity=(0.0, 0.0, 0.0),
        damping_alpha=autoencoder.DAMPING[0],
        damping_beta=autoencoder.DAMPING[1],
    )
    mass = mass_matrix(X, T, autoencoder.DENSITY)
    load = autoencoder.swing_load(mass, frames, seed=7, keys=1)
    out: dict = {"tets": len(T), "vertices": len(X), "dofs": n_p + n_z, "k": k}

    def timed(sim, label):
        times, reps = [], []
        for f in range(1, frames + 1):
            t0 = time.perf_counter()
            rep = sim.step(FrameInputs(forces=load[f]))
            times.append(time.perf_counter() - t0)
            reps.append(rep)
        m = {
            "step_ms": 1000 * float(np.mean(times[1:])),
            "iters": float(np.mean([r.newton_iters for r in reps[1:]])),
            "derivatives_ms": 1000
            * float(np.mean([r.timings.get("derivatives", 0.0) for r in reps[1:]])),
            "decoder_ms": 1000 * float(np.mean([r.timings.get("decoder", 0.0) for r in reps[1:]])),
        }
        print(
            f"  {label:28s} {m['step_ms']:9.2f} ms/step {m['iters']:5.2f} iters "
            f"{m['decoder_ms']:7.2f} ms in decoder derivatives",
            flush=True,
        )
        return m

    if full:
        out["full"] = timed(Simulation(X, T, mat, st, pinned=pins), "full space")
    t0 = time.perf_counter()
    sub = modal_basis(TetFEM(X, T, mat), mass, pins, k=k)
    out["basis_s"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    els = np.sort(rng.choice(len(T), cubature, replace=False))
    cub = (els, np.full(cubature, len(T) / cubature))
    dofs = n_p + n_z
    out["pca"] = timed(
        LinearSimulation(X, T, mat, sub.U[:, :dofs], st, pinned=pins, cubature=cub), f"PCA {dofs}"
    )
    out["fulton"] = timed(
        AutoencoderSimulation(
            X,
            T,
            mat,
            sub.U,
            random_decoder(dofs, k, hidden=(100, 100), act="elu"),
            st,
            pinned=pins,
            cubature=cub,
        ),
        f"Fulton {dofs} (on {k})",
    )
    dec = random_decoder(n_z, k)
    for label, fict in ((f"Shen {n_p}+{n_z}", True), (f"Shen {n_p}+{n_z}, no fictitious", False)):
        key = "shen" if fict else "shen_nofict"
        out[key] = timed(
            ShenSimulation(
                X, T, mat, sub.U, n_p, dec, st, pinned=pins, cubature=cub, fictitious=fict
            ),
            label,
        )
    # the decoder that reads p too (u = U p + D(p, z), the trainer's default)
    dec_p = random_decoder(n_p + n_z, k)
    out["shen_p"] = timed(
        ShenSimulation(
            X, T, mat, sub.U, n_p, dec_p, st, pinned=pins, cubature=cub, decoder_sees_p=True
        ),
        f"Shen {n_p}+{n_z}, D(p, z)",
    )
    # the decoder work of one Newton iteration (jet with dz, v and S, then g^T H), best of
    # many repetitions: robust to other jobs on the machine, unlike the step means above
    from neural_rom.core.methods.shen.hocs import jet

    for key, net, n_in in (("shen", dec, n_z), ("shen_p", dec_p, n_p + n_z)):
        rng = np.random.default_rng(1)
        z, dz, v = (0.1 * rng.normal(size=n_in) for _ in range(3))
        g = rng.normal(size=k)
        best = np.inf
        for _ in range(300):
            t0 = time.perf_counter()
            jet(net, z, dz, v).left_hessian(g)
            best = min(best, time.perf_counter() - t0)
        out[key]["decoder_iter_us"] = 1e6 * best
        out[key]["decoder_step_ms"] = 1e3 * best * out[key]["iters"]
        print(
            f"  {key}: decoder work per Newton iteration (best of 300): {1e6 * best:.0f} us; x "
            f"{out[key]['iters']:.2f} iterations = {out[key]['decoder_step_ms']:.2f} ms per step"
        )
    out["decoder_iter_us"] = out["shen"]["decoder_iter_us"]
    out["decoder_step_ms"] = out["shen"]["decoder_step_ms"]
    if full:
        for key in ("pca", "fulton", "shen", "shen_nofict", "shen_p"):
            out[key]["speedup"] = out["full"]["step_ms"] / out[key]["step_ms"]
    return out


#: Shen et al. 2021, Table 1 (Armadillo, 38K elements): relative cubature error in percent,
#: neural [5 elements a round] and greedy, at 20 / 50 / 100 / 200 elements
PAPER_TABLE1 = {20: (60.3, 66.6), 50: (37.1, 47.1), 100: (22.3, 31.2), 200: (15.7, 19.2)}


def cubature_table(
    model,
    paths,
    counts=(20, 50, 100, 200),
    poses: int = 150,
    epochs: int = 300,
    add: int = 10,
    spread: int = 4,
    replay_counts=(20, 50, 100),
) -> tuple[list[dict], dict]:
    """Greedy (optimized) against neural cubature (:mod:`training.shen.cubature`: ``W`` on the
    greedy's elements, ``S``'s elements with NNLS weights and with ``W``) on the forces of a
    trained Shen model's subspace: relative reduced-force error on the held-out bakes' frames
    as the model reproduces them, at each element count; at ``replay_counts`` the held-out
    replay error of the model with each rule (:func:`cubature_replays`). Returns the rows of
    :func:`training.shen.cubature.compare_cubatures` (with ``replay``) and the replays of
    the model's own rule and of every element (the reference)."""
    from neural_rom.core.data.cache import BakeDataset
    from neural_rom.core.physics.fem import TetFEM
    from neural_rom.core.registry import load_simulator
    from neural_rom.training.run import even_indices
    from neural_rom.training.shen.cubature import compare_cubatures

    sim = load_simulator(model)[0]
    ds = BakeDataset.open([str(p) for p in paths])
    tr, va = ds.split(0.2, 0)

    def frames(ids):
        x = np.concatenate([ds[int(i)].channel("positions") for i in ids])
        g = np.concatenate([np.full(ds[int(i)].n_frames, int(i)) for i in ids])
        pick = even_indices(len(x), poses)
        shapes = np.stack(
            [
                sim.X
                + (
                    sim.U
                    @ sim.coordinates(
                        sim.encode_q(
                            sim.U.T @ (np.repeat(sim.mass, 3) * (xi - sim.X).ravel()), refine=False
                        )
                    )
                ).reshape(-1, 3)
                for xi in x[pick]
            ]
        )
        return shapes, g[pick]

    xt, gt = frames(tr)
    xh, _ = frames(va)
    fem = TetFEM(sim.X, np.asarray(ds[0].T), autoencoder._material(ds[0]))
    rows = compare_cubatures(
        fem, sim.U, sim.mass, xt, gt, xh, counts, epochs=epochs, add=add, spread=spread
    )
    for r in rows:
        if r["count"] in replay_counts:
            r["replay"] = cubature_replays(model, ds, va, r["rules"])
    m = len(ds[0].T)
    own = (sim.elements, sim.weights)
    reference = cubature_replays(
        model, ds, va, {"model's": own, "all elements": (np.arange(m), np.ones(m))}
    )
    return rows, reference


class _PoseWeights:
    """A Shen simulator whose cubature weights a :class:`training.shen.cubature.WeightNet`
    sets from the pose ``c_n`` at the start of each step (lagged by the step: the Newton
    matrix does not see ``dw/dc``), times ``scale``; everything else is the simulator's."""

    def __init__(self, sim, net, scale: float = 1.0) -> None:
        self.sim, self.net, self.scale = sim, net, scale

    def __getattr__(self, name):
        return getattr(self.sim, name)

    def step(self, inputs):
        import torch

        with torch.no_grad():
            w = self.net(torch.as_tensor(self.sim.q[None])).numpy()[0]
        self.sim.weights = self.scale * w
        return self.sim.step(inputs)


#: Relative changes of the cubature weights each replay is repeated with: the whip's replay
#: error moved by far more than the forces do (42 mm with single-threaded BLAS, 252 mm with
#: several threads for the same model) until a crawling Newton step was halved instead of
#: left to end on whichever root rounding picked (``core.methods.shen``, ``_CRAWL_ITERS``:
#: 42.1 mm at each of these now); a rule is still judged by the range over these.
REPLAY_PERTURBATIONS = (0.0, 1e-9, -1e-9)


def cubature_replays(model, ds, va, rules: dict) -> dict:
    """Largest held-out replay error (m) of the model with each cubature rule in ``rules``
    (name -> (elements, weights (c,) or a WeightNet)), once for each of
    ``REPLAY_PERTURBATIONS`` of the weights: ``err`` is the list of them, ``iters`` the mean
    Newton iterations a step."""
    import dataclasses

    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.methods import shen as shen_method

    base = load_model(model)

    def make(el, w):
        arrays = {**base.arrays, "cubature_elements": el, "cubature_weights": w}
        return shen_method.load(dataclasses.replace(base, arrays=arrays))

    out = {}
    for name, (el, w) in rules.items():
        errs, iters = [], []
        for eps in REPLAY_PERTURBATIONS:
            if isinstance(w, np.ndarray):
                r = replay(lambda el=el, w=w, eps=eps: make(el, w * (1 + eps)), ds, va)
            else:
                r = replay(
                    lambda el=el, w=w, eps=eps: _PoseWeights(
                        make(el, np.ones(len(el))), w, 1 + eps
                    ),
                    ds,
                    va,
                )
            errs.append(r["err"])
            iters.append(r["iters"])
        out[name] = {"elements": len(el), "err": errs, "iters": float(np.mean(iters))}
    return out


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(","))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scene", default="swing,whip")
    ap.add_argument("--np", type=int, default=4, dest="n_p")
    ap.add_argument("--nz", type=int, default=2, dest="n_z")
    ap.add_argument("--epochs", type=int, default=3000)
    ap.add_argument("--divisions", type=_ints, default=(10, 2, 2))
    ap.add_argument("--whip-divisions", type=_ints, default=(40, 2, 2))
    ap.add_argument("--variants", type=int, default=8)
    ap.add_argument("--frames", type=int, default=72)
    ap.add_argument("--full", action="store_true", help="time full space on a held-out bake")
    ap.add_argument("--no-fulton", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--speed",
        default=None,
        type=_ints,
        metavar="NX,NY,NZ",
        help="only the step-time comparison on a bar of these divisions (56,8,8: 21,504 tets)",
    )
    ap.add_argument(
        "--cubature",
        default=None,
        metavar="MODEL",
        help="only the greedy / neural cubature table for a trained Shen model "
        "(with --bakes: its bakes)",
    )
    ap.add_argument("--bakes", default=None, help="folder of the model's bakes (*.nrbake)")
    ap.add_argument(
        "--add", type=int, default=10, help="elements S adds a round (--cubature; paper: 5, 10)"
    )
    ap.add_argument(
        "--spread", type=int, default=4, help="face rings between a round's picks (--cubature)"
    )
    args = ap.parse_args(argv)
    common.pin_this_process()
    if args.cubature:
        rows, reference = cubature_table(
            args.cubature,
            sorted(Path(args.bakes).glob("*.nrbake")),
            add=args.add,
            spread=args.spread,
        )
        print(
            "  held-out relative force error, percent (training poses in brackets); greedy: its elements"
            " (it may stop short); W: pose-dependent weights; S: the selection network"
        )
        print(
            f"  {'count':>5s} {'greedy':>16s} {'greedy+W':>16s} {'S+NNLS':>16s} {'S+W':>16s}"
            f"   paper: neural[5] / greedy"
        )
        for r in rows:
            cells = [
                f"{100 * r[n]:6.2f}% ({100 * r[n + '_train']:.2f}%)"
                for n in ("greedy", "neural", "selected", "s_neural")
            ]
            paper = PAPER_TABLE1.get(r["count"])
            print(
                f"  {r['count']:5d} "
                + " ".join(f"{c:>16s}" for c in cells)
                + (f"   {paper[0]:.1f}% / {paper[1]:.1f}%" if paper else "")
                + f"   [greedy {r['elements']} el., {r['greedy_seconds']:.1f} s; S {r['selected_seconds']:.1f} s;"
                f" W best epochs {r['neural_best_epoch']} / {r['s_neural_best_epoch']}]",
                flush=True,
            )
        print(f"  held-out replay error, mm, at weights x (1 + {REPLAY_PERTURBATIONS})")
        for r in [{"count": None, "replay": reference}, *rows]:
            for name, rp in r.get("replay", {}).items():
                errs = " / ".join(f"{1000 * e:.1f}" for e in rp["err"])
                at = f"{r['count']:4d} elements" if r["count"] else "   reference"
                print(
                    f"  {at}, {name:>12s} ({rp['elements']:3d} el.): {errs} mm, "
                    f"{rp['iters']:.2f} Newton iterations a step",
                    flush=True,
                )
        return 0
    if args.speed:
        r = speed(args.speed, args.n_p, args.n_z)
        for key in ("pca", "fulton", "shen", "shen_nofict", "shen_p"):
            if "speedup" in r[key]:
                print(f"  {key}: {r[key]['speedup']:.0f}x faster than full space")
        return 0
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nrom_shen_"))
    results = {}
    for scene in args.scene.split(","):
        d = work / scene
        t0 = time.perf_counter()
        kept = sorted((d / "bakes").glob("*.nrbake"))
        if kept:  # a previous run's bakes in --out DIR: reused
            paths = kept
        elif scene == "swing":
            paths = autoencoder.bake_scene(
                d / "bakes",
                divisions=args.divisions,
                variants=args.variants,
                frames=args.frames,
                keys=2,
            )
        elif scene == "whip":
            paths = bake_whip(
                d / "bakes",
                divisions=args.whip_divisions,
                variants=args.variants,
                frames=args.frames,
            )
        elif scene == "pins":
            paths = bake_pins(d / "bakes")
        else:
            raise SystemExit(f"Unknown scene {scene!r}: swing, whip or pins.")
        bake_s = time.perf_counter() - t0
        r = compare(paths, d, args.n_p, args.n_z, epochs=args.epochs, fulton=not args.no_fulton)
        r["bake_s"] = bake_s
        ds, va, _ = heldout(paths)
        r["tets"] = len(ds[0].T)
        if args.full:
            f = autoencoder.full_rollout(ds[int(va[0])])
            r["full"] = {
                "err": 0.0,
                "step_ms": f["step_ms"],
                "iters": f["iters"],
                "derivatives_ms": f["phases"].get("derivatives", 0.0),
            }
        print(report(f"{scene} ({r['tets']} tets)", r), flush=True)
        results[scene] = r
    (work / "shen_bench.json").write_text(json.dumps(results, indent=1, default=float))
    print(f"results: {work / 'shen_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
