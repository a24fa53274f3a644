"""Autoencoder latent space (Fulton et al. 2019) against PCA on one scene: accuracy per DOF,
step time, solver iterations, training time.

Scene ("swung arm"): a 1 m x 0.1 m x 0.1 m bar clamped at x = 0 (stable Neo-Hookean,
E = 30 MPa, nu = 0.45, rho = 1000 kg/m^3, Rayleigh damping alpha = 10 1/s, beta = 0.01 s,
h = 1/24 s, no gravity) carries a body load ``m_i a(t)`` (like gravity, but its direction
turns): ``a(t)`` eases (smoothstep) between random keys, ``|a|`` up to 100 g, direction
anywhere in the y-z plane, keys about 0.8 s (two first-mode periods) apart, so the bar
bends up to ~90 degrees in every direction and stays near its quasi-static shapes. Those
shapes form a 2-D nonlinear manifold (load direction and magnitude), like Fulton's
catapult; PCA needs several modes per bending direction plus the shortening that comes with
large bending. Each variant is a bake of the ``replay_forces`` scenario (the load written to
an .npz). Variants are split into training and held-out bakes by whole trajectory
(:meth:`core.cache.BakeDataset.split`, fraction 0.2, seed 0: what training uses).

Reported, all on the held-out bakes:

* the largest per-vertex error of PCA with ``k = 0..30`` modes (mass-weighted projection)
  and of the autoencoder with ``r = 1..8`` latents on a 30-mode PCA layer
  (the autoencoder trainer, one run per ``r``);
* for each ``r``, the smallest PCA ``k`` with an error at most the autoencoder's: ``r / k``
  is the acceptance number of the issue (<= 40%);
* one held-out rollout each of full space (:class:`core.sim.Simulation`, Newton), the
  autoencoder model (:class:`core.methods.autoencoder.AutoencoderSimulation`, preconditioned L-BFGS), the PCA
  model of the matched ``k`` (:class:`core.methods.linear.LinearSimulation`, Newton) and the same
  PCA model solved by L-BFGS (``AutoencoderSimulation`` with an identity decoder over the PCA
  basis, the paper's Fig. 9 comparison): ms per step, solver iterations per step, rollout
  error against the bake;
* the ratio full-space step time / autoencoder step time (the issue's goal: >= 30x at ~20K
  tets), the cubature size of each model, and the training times on the CPU (the
  autoencoder's split into PCA, network epochs and cubature).

Usage::

    python bench/autoencoder.py [--variants 10] [--frames 96] [--keys 3] [--epochs 600]
                           [--latents 1-8] [--divisions 16,2,2] [--out DIR] [--keep]
                           [--profile] [--bakes DIR] [--defaults]
    python bench/autoencoder.py --pins [--np 3] [--nz 2] [--epochs 600] [--out DIR]

``--divisions 56,8,8`` meshes the bar with 21,504 tets (the issue's ~20K; a full-space
step then takes a few seconds, so bake fewer variants: ``--variants 6 --frames 48 --keys 2``).
``--out DIR`` keeps the work directory and writes ``DIR/rollout.npz`` (:func:`write_rollouts`:
the held-out rollout of full space, autoencoder and PCA, per frame, for
``scripts/render_readme.py --latent``). ``--profile`` runs the autoencoder rollout once
more under cProfile and prints where its step time goes. ``--bakes DIR`` trains and times on
the bakes of a previous ``--out`` run instead of baking again. ``--defaults`` trains only the
autoencoder a user gets with the default settings (:func:`train_defaults`) and prints its
time, the estimate it announced, its latent size and its held-out errors against PCA with as
many modes and with the whole PCA layer.

``--pins`` runs the animated-pin case instead: ``bench/shen.py``'s ``pins`` scene (a bar whose
clamp an animated object swings 0.2 m and turns 0.8 rad while pokes push it; its
:func:`bake_pins`, shared), the linear model (PCA), the autoencoder and Shen at equal DOFs
(``--np`` + ``--nz``; ``bench/shen.py``'s :func:`compare`): held-out replay and closest-shape
errors and ms per step, in one run; then the autoencoder at its default settings, whose
training compares its replay with the default linear model's and keeps the better one
(:func:`pins_case`).

One process, one thread (OpenBLAS / OMP / MKL and torch), torch on the CPU.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

# One BLAS thread, set before numpy loads (fair timings; see bench/linear.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

YOUNG, POISSON, DENSITY = 3.0e7, 0.45, 1000.0
DAMPING = (10.0, 0.01)  # Rayleigh alpha (1/s), beta (s)
DT = 1.0 / 24.0
LOAD_G = 100.0  # largest body load, in g
PCA_LAYER = 30


class _Mesh:
    def __init__(self, X: np.ndarray, T: np.ndarray) -> None:
        self.X, self.T = X, T


def bar(divisions: tuple[int, int, int] = (16, 2, 2)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 1 x 0.1 x 0.1 m bar: rest positions (n, 3), tets (m, 4), clamped vertices (x = 0)."""
    X, T = common.bar_mesh(*divisions, size=(1.0, 0.1, 0.1))
    return X, T, common.pinned_end(X)


def swing_load(mass: np.ndarray, frames: int, seed: int, keys: int = 3) -> np.ndarray:
    """Body load ``m_i a(t)`` (frames+1, n, 3), N: ``a`` eases between random keys in y-z.

    Keys are evenly spaced (``keys`` of them between a zero load at frame 0 and a zero load
    at the last frame); each key is a direction in the y-z plane and a magnitude in
    [0.2, 1] x ``LOAD_G`` g. The load vector, not its angle, is interpolated (smoothstep).
    """
    rng = np.random.default_rng(seed)
    kf = np.round(np.linspace(0, frames, keys + 2)).astype(int)
    ang = rng.uniform(-np.pi, np.pi, len(kf))
    amp = rng.uniform(0.2, 1.0, len(kf))
    amp[0] = amp[-1] = 0.0
    f = np.arange(frames + 1)
    seg = np.clip(np.searchsorted(kf, f, side="right") - 1, 0, len(kf) - 2)
    s = np.clip((f - kf[seg]) / (kf[seg + 1] - kf[seg]), 0.0, 1.0)
    s = s * s * (3.0 - 2.0 * s)
    vy, vz = amp * np.cos(ang), amp * np.sin(ang)
    acc = np.zeros((frames + 1, 3))
    acc[:, 1] = (1 - s) * vy[seg] + s * vy[seg + 1]
    acc[:, 2] = (1 - s) * vz[seg] + s * vz[seg + 1]
    return mass[None, :, None] * (9.81 * LOAD_G * acc)[:, None, :]


def bake_scene(
    out_dir: str | Path,
    *,
    divisions: tuple[int, int, int] = (16, 2, 2),
    variants: int = 10,
    frames: int = 96,
    keys: int = 3,
    seed: int = 1000,
) -> list[Path]:
    """Bake ``variants`` swung-arm bakes (variant ``v`` uses load seed ``seed + v``) into ``out_dir``."""
    from neural_rom.core.bake import BakeSpec, bake
    from neural_rom.core.physics.fem import Material, mass_matrix

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    X, T, pins = bar(divisions)
    mass = mass_matrix(X, T, DENSITY)
    mat = Material(YOUNG, POISSON, DENSITY)
    paths = []
    for v in range(variants):
        src = out_dir / f"load{v:03d}.npz"
        np.savez(src, X=X, forces=swing_load(mass, frames, seed + v, keys))
        spec = BakeSpec(
            material=mat.to_dict(),
            scenario={"kind": "replay_forces", "source": str(src)},
            frames=frames,
            dt=DT,
            gravity=(0.0, 0.0, 0.0),
            pinned=pins.tolist(),
            damping=DAMPING,
            seed=v,
        )
        paths.append(bake(_Mesh(X, T), spec, out_dir / f"swing_v{v:03d}.nrbake", overwrite=True))
    return paths


def split_frames(paths: list[Path]):
    """(dataset, train positions (F, n, 3), held-out positions, held-out trajectory indices)."""
    from neural_rom.core.data.cache import BakeDataset

    ds = BakeDataset.open([str(p) for p in paths])
    tr, va = ds.split(0.2, 0)  # the split training uses (validation_fraction, seed)
    xt = np.concatenate([ds[int(i)].channel("positions") for i in tr])
    xv = np.concatenate([ds[int(i)].channel("positions") for i in va])
    return ds, xt, xv, va


def pca_curve(ds, xt: np.ndarray, xv: np.ndarray, k_max: int = PCA_LAYER) -> np.ndarray:
    """Held-out max per-vertex error (m) of mass-weighted PCA with k = 0..k_max modes."""
    from neural_rom.core.physics.fem import mass_matrix
    from neural_rom.core.reduced.subspace import mass_weighted_pod

    X, T = np.asarray(ds[0].X), np.asarray(ds[0].T)
    pinned = np.asarray(ds[0].extra("pinned"))
    sub = mass_weighted_pod(xt - X, mass_matrix(X, T, DENSITY), pinned, k=k_max, X=X)
    return sub.error_curve(xv, range(k_max + 1))


def smallest_k(curve: np.ndarray, err: float) -> int | None:
    """Smallest k whose PCA error is at most ``err`` (None when even k_max is worse)."""
    ok = np.flatnonzero(curve <= err)
    return int(ok[0]) if ok.size else None


def train_ae(paths, out: Path, r: int, epochs: int, batch_size: int = 32, **kw) -> dict:
    """One autoencoder of latent size r on the PCA layer (no held-out rollout), CPU."""
    from neural_rom.core import registry

    s = registry.get("autoencoder").values(
        dict(
            k=PCA_LAYER,
            latent_dim=r,
            epochs=epochs,
            batch_size=batch_size,
            rollout=False,
            max_cubature=kw.pop("max_cubature", 150),
            **kw,
        )
    )
    marks: dict[str, float] = {}

    def progress(frac: float, msg: str) -> None:  # stage boundaries, from the messages
        for stage, prefix in (("pca", "PCA:"), ("net", "autoencoder:"), ("end", "writing")):
            if msg.startswith(prefix):
                marks.setdefault(stage, time.perf_counter())

    t0 = time.perf_counter()
    res = registry.get("autoencoder").trainer_function()(
        [str(p) for p in paths], out, s, device="cpu", progress=progress
    )
    res["wall_s"] = time.perf_counter() - t0
    if len(marks) == 3:  # seconds: loading + PCA, network epochs, export + cubature
        res["stage_s"] = {
            "pca": marks["pca"] - t0,
            "net": marks["net"] - marks["pca"],
            "cubature": marks["end"] - marks["net"],
        }
    return res


def train_defaults(paths, out: Path, settings: dict | None = None) -> dict:
    """The autoencoder as a user gets it: default settings (latent size searched within the
    time budget, early stopping, PCA fallback, held-out rollout), CPU, with ``settings``
    changed (``{"keep_linear": False}``: the autoencoder's own record even where the linear
    model replays better). Returns the result record with ``wall_s`` and the progress line
    that carried the estimate (``estimate``)."""
    from neural_rom.core import registry

    train = registry.get("autoencoder").trainer_function()

    said: list[str] = []
    t0 = time.perf_counter()
    res = train(
        [str(p) for p in paths],
        out,
        dict(settings or {}),
        device="cpu",
        progress=lambda f, m: said.append(m),
    )
    res["wall_s"] = time.perf_counter() - t0
    res["estimate"] = next((m for m in said if "network training about" in m), "")
    return res


def print_defaults(res: dict) -> None:
    """One summary of :func:`train_defaults`: time, latent size, errors against PCA."""
    mm = 1000.0
    if "latent_dim" not in res:  # keep_linear kept the linear model: its record, the choice
        print(f"defaults: {res['wall_s']:.1f} s; {res.get('choice', '')}")
        return
    print(
        f"defaults: {res['wall_s']:.1f} s ({res['estimate']}); k = {res['k']}, "
        f"r = {res['latent_dim']} of {[e['latent_dim'] for e in res['latent_search']]}; "
        f"held-out max vertex error {mm * res['ae_max_error_val_m']:.1f} mm (network "
        f"{mm * res['network_max_error_val_m']:.1f}, PCA r {mm * res['pca_r_max_error_val_m']:.1f},"
        f" PCA k {mm * res['pca_max_error_val_m']:.1f}); fallback {res['fallback']}; rollout "
        f"{mm * (res['rollout_max_error_m'] or float('nan')):.1f} mm, {res['step_ms']:.1f} ms/step"
    )
    for w in res["warnings"]:
        print("  warning:", w)


def pins_case(work: Path, n_p: int, n_z: int, epochs: int) -> dict:
    """The animated-pin case (see the module docstring): ``bench/shen.py``'s comparison at
    ``n_p + n_z`` DOFs on its ``pins`` bakes, with ``defaults``: :func:`train_defaults`'s
    record (the model it kept and its ``choice``)."""
    import shen  # bench/shen.py: the scene and the equal-DOF comparison, not copied

    work = Path(work) / "pins"
    paths = sorted((work / "bakes").glob("*.nrbake")) or shen.bake_pins(work / "bakes")
    r = shen.compare(paths, work, n_p, n_z, epochs=epochs, variational=False)
    r["defaults"] = train_defaults(paths, work / "default.nrmodel")
    r["report"] = shen.report("pins (animated pins, equal DOFs)", r)
    return r


def print_pins(r: dict) -> None:
    d = r["defaults"]
    print(r["report"])
    print(
        f"defaults: kept {d['method']} ({d['dofs']} DOFs) after {d['wall_s']:.1f} s; "
        f"{d.get('choice', 'no comparison')}"
    )
    for w in d["warnings"]:
        print("  warning:", w)


def write_rollouts(
    path: str | Path,
    X: np.ndarray,
    T: np.ndarray,
    pinned: np.ndarray,
    trajectories: dict[str, np.ndarray],
    **scalars: float,
) -> Path:
    """Write rollouts of one scene to an ``.npz`` (no pickled objects: numeric arrays only).

    Parameters
    ----------
    path : the ``.npz`` file
    X : (n, 3) float array
        Rest positions, metres.
    T : (m, 4) int array
        Tets.
    pinned : (p,) int array
        Clamped vertices.
    trajectories : name -> (F, n, 3) float array
        Positions per frame, metres (frame 0 = the start), e.g. ``full``, ``ae``, ``pca``;
        every trajectory has the same ``F``. Names must be Python identifiers and not one of
        ``X``, ``T``, ``pinned``, ``names``.
    **scalars : numbers stored as 0-d arrays (``dt``, ``r``, ``k``, ...)

    Returns
    -------
    Path of the file written. Read it with :func:`read_rollouts`.
    """
    X = np.asarray(X, dtype=np.float64)
    T = np.asarray(T, dtype=np.int64)
    if X.ndim != 2 or X.shape[1] != 3 or T.ndim != 2 or T.shape[1] != 4:
        raise ValueError(f"Expected X (n, 3) and T (m, 4), got {X.shape} and {T.shape}.")
    if not trajectories:
        raise ValueError("No trajectories to write: give at least one, e.g. full=...")
    reserved = {"X", "T", "pinned", "names", *scalars}
    arrays: dict[str, np.ndarray] = {}
    frames = None
    for name, x in trajectories.items():
        x = np.asarray(x, dtype=np.float64)
        if not name.isidentifier() or name in reserved:
            raise ValueError(f"Trajectory name {name!r} is not a free identifier; rename it.")
        if x.ndim != 3 or x.shape[1:] != X.shape:
            raise ValueError(f"Trajectory {name!r} has shape {x.shape}; expected (F, {len(X)}, 3).")
        if frames is not None and len(x) != frames:
            raise ValueError(
                f"Trajectory {name!r} has {len(x)} frames, the others {frames}: write "
                "rollouts of the same frames."
            )
        frames = len(x)
        arrays[name] = x
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        X=X,
        T=T,
        pinned=np.asarray(pinned, dtype=np.int64),
        names=np.array(list(arrays), dtype=str),
        **arrays,
        **{k: np.asarray(v, dtype=np.float64) for k, v in scalars.items()},
    )
    return path


def read_rollouts(path: str | Path) -> dict[str, np.ndarray]:
    """Everything :func:`write_rollouts` wrote (``names`` as a list of str)."""
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    out["names"] = [str(n) for n in out["names"]]
    return out


def _mean_timings(reports) -> dict:
    """Per-step mean of the StepReport timing buckets, ms."""
    keys = sorted({k for r in reports for k in r.timings})
    return {k: 1000 * float(np.mean([r.timings.get(k, 0.0) for r in reports])) for k in keys}


def rollout(sim, cache, record: list | None = None) -> dict:
    """Replay a bake with ``sim``: ms per step, solver iterations per step, max vertex error (m).

    ``record`` (a list) receives the positions (n, 3) of frame 0 and of every step.
    Also reported: the slowest step (``max_ms``), the mean time per step in each solver
    phase (``phases``, ms) and, for a latent model, the objective evaluations per step
    (``evals``).
    """
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.engine.protocol import FrameInputs

    _, driver = replay_scenario(cache)
    full = cache.channel("positions")
    sim.start_from(driver.x0, driver.v0, driver.forces[0])
    if record is not None:
        record.append(np.array(sim.positions()))
    times, reports, err = [], [], 0.0
    evals0 = getattr(sim, "evaluations", 0)
    for f in range(1, cache.n_frames):
        inp = driver.inputs(f)
        t0 = time.perf_counter()
        rep = sim.step(
            FrameInputs(forces=inp.forces, colliders=inp.colliders, pin_targets=inp.pin_targets)
        )
        times.append(time.perf_counter() - t0)
        reports.append(rep)
        x = sim.positions()
        err = max(err, float(np.linalg.norm(x - full[f], axis=1).max()))
        if record is not None:
            record.append(np.array(x))
    return {
        "step_ms": 1000 * float(np.mean(times)),
        "max_ms": 1000 * float(np.max(times)),
        "iters": float(np.mean([r.newton_iters for r in reports])),
        "err": err,
        "phases": _mean_timings(reports),
        "evals": (getattr(sim, "evaluations", 0) - evals0) / len(times),
    }


def profile_rollout(sim, cache, top: int = 14) -> str:
    """cProfile of :func:`rollout` (the functions with the largest own time, as text)."""
    prof = cProfile.Profile()
    prof.enable()
    rollout(sim, cache)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def full_rollout(cache) -> dict:
    """Full-space Newton re-run of the bake: time and iterations (the error, to the bake
    itself, only checks the re-run is the same simulation)."""
    from neural_rom.core.bake import replay_scenario

    sim, driver = replay_scenario(cache)
    sim.reset(driver.x0, driver.v0)
    sim.forces = driver.forces[0].copy()
    full = cache.channel("positions")
    times, reports, err = [], [], 0.0
    for f in range(1, cache.n_frames):
        t0 = time.perf_counter()
        rep = sim.step(driver.inputs(f))
        times.append(time.perf_counter() - t0)
        reports.append(rep)
        err = max(err, float(np.linalg.norm(sim.x - full[f], axis=1).max()))
    return {
        "step_ms": 1000 * float(np.mean(times)),
        "max_ms": 1000 * float(np.max(times)),
        "iters": float(np.mean([r.newton_iters for r in reports])),
        "err": err,
        "phases": _mean_timings(reports),
    }


def run(args) -> dict:
    import torch

    torch.set_num_threads(1)
    from neural_rom.core import registry
    from neural_rom.core.methods.autoencoder import AutoencoderSimulation
    from neural_rom.core.reduced.nnet import MLP
    from neural_rom.core.registry import load_simulator

    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nrom_latent_"))
    res: dict = {"work": str(work)}
    t0 = time.perf_counter()
    if args.bakes:  # a previous run's bakes (its --out DIR/bakes): no baking
        paths = sorted(Path(args.bakes).glob("swing_v*.nrbake"))
        if not paths:
            raise SystemExit(
                f"No swing_v*.nrbake in {args.bakes}: give a previous --out DIR/bakes."
            )
    else:
        paths = bake_scene(
            work / "bakes",
            divisions=args.divisions,
            variants=args.variants,
            frames=args.frames,
            keys=args.keys,
        )
    res["bake_s"] = time.perf_counter() - t0
    if args.defaults:
        res["defaults"] = train_defaults(paths, work / "defaults.nrmodel")
        if not args.out and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return res
    ds, xt, xv, va = split_frames(paths)
    X = np.asarray(ds[0].X)
    res["mesh"] = (len(X), len(ds[0].T))
    res["free_dofs"] = 3 * (len(X) - len(np.asarray(ds[0].extra("pinned"))))
    res["frames"] = (len(xt), len(xv))
    res["max_disp"] = float(np.linalg.norm(xv - X, axis=-1).max())
    curve = pca_curve(ds, xt, xv)
    res["pca_curve"] = curve
    ae = {}
    for r in args.latents:
        m = train_ae(paths, work / f"ae_r{r}.nrmodel", r, args.epochs)
        ae[r] = {
            "err": m["ae_max_error_val_m"],
            "train_err": m["ae_max_error_train_m"],
            "k": smallest_k(curve, m["ae_max_error_val_m"]),
            "train_s": m["train_seconds"],
            "stage_s": m.get("stage_s"),
            "cubature": m["cubature_elements"],
            "model": m["model"],
        }
        print(
            f"  r={r}: held-out {1000 * ae[r]['err']:.1f} mm, train {1000 * ae[r]['train_err']:.1f} mm,"
            f" PCA k={ae[r]['k']}, {ae[r]['train_s']:.0f} s",
            flush=True,
        )
    res["ae"] = ae
    # headline: the smallest ratio r/k over the latent sizes tried
    ratios = {r: r / a["k"] for r, a in ae.items() if a["k"]}
    best = min(ratios, key=lambda r: (ratios[r], r))
    res["best"] = best
    k = ae[best]["k"]
    held = ds[int(va[0])]
    # rollouts on a held-out bake: full, AE (L-BFGS), PCA k (Newton), PCA k (L-BFGS)
    res["roll_frames"] = int(held.n_frames) - 1
    res["full"] = full_rollout(held)
    sim_ae, _ = load_simulator(ae[best]["model"])
    rec: dict[str, list] = {"ae": [], "pca": []}
    res["ae_roll"] = rollout(sim_ae, held, rec["ae"])
    t1 = time.perf_counter()
    lin = registry.get("linear").trainer_function()(
        [str(p) for p in paths],
        work / f"pca_k{k}.nrmodel",
        registry.get("linear").values(dict(k=k, max_cubature=150)),
    )
    res["pca_train_s"] = time.perf_counter() - t1
    sim_pca, _ = load_simulator(lin["model"])
    res["pca_roll"] = rollout(sim_pca, held, rec["pca"])
    res["cubature"] = {"ae": len(sim_ae.elements), "pca": len(sim_pca.elements)}
    ident = MLP([np.eye(sim_pca.k)], [np.zeros(sim_pca.k)], ["identity"])
    lbfgs = AutoencoderSimulation(
        sim_pca.X,
        np.asarray(held.T),
        _material(held),
        sim_pca.U,
        ident,
        sim_pca.settings,
        pinned=sim_pca.pinned,
        cubature=(sim_pca.elements, sim_pca.weights),
        contact=sim_pca.contact,
        lbfgs_window=sim_ae.lbfgs_window,
        lbfgs_tol=sim_ae.lbfgs_tol,
        max_iters=sim_ae.max_iters,
    )
    res["pca_lbfgs_roll"] = rollout(lbfgs, held)
    res["pca_k"] = k
    if args.profile:
        res["profile"] = profile_rollout(sim_ae, held)
    if args.out:
        res["npz"] = str(
            write_rollouts(
                work / "rollout.npz",
                np.asarray(held.X),
                np.asarray(held.T),
                np.asarray(held.extra("pinned")),
                {"full": held.channel("positions"), **{n: np.stack(x) for n, x in rec.items()}},
                dt=DT,
                r=best,
                k=k,
                tets=len(held.T),
                ms_full=res["full"]["step_ms"],
                ms_ae=res["ae_roll"]["step_ms"],
                ms_pca=res["pca_roll"]["step_ms"],
            )
        )
    if not args.out and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return res


def _material(cache):
    from neural_rom.core.physics.fem import Material

    return Material.from_dict(cache.meta["spec"]["material"])


def _divisions(text: str) -> tuple[int, int, int]:
    try:
        d = tuple(int(t) for t in text.split(","))
    except ValueError:
        d = ()
    if len(d) != 3 or min(d) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give three positive cell counts along x, y, z, like 56,8,8."
        )
    return d


def _latents(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(t) for t in text.split(",")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", type=int, default=10)
    ap.add_argument("--frames", type=int, default=96)
    ap.add_argument("--keys", type=int, default=3, help="load keys per bake (between zeros)")
    ap.add_argument("--epochs", type=int, default=600)
    ap.add_argument("--latents", type=_latents, default=_latents("1-8"))
    ap.add_argument(
        "--divisions",
        type=_divisions,
        default=(16, 2, 2),
        help="hex cells along x,y,z (6 tets each); 56,8,8 gives 21,504 tets",
    )
    ap.add_argument(
        "--out", default="", help="work directory (kept), with rollout.npz; default: temporary"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    ap.add_argument("--profile", action="store_true", help="cProfile the autoencoder rollout")
    ap.add_argument(
        "--bakes",
        default="",
        help="reuse the bakes of a previous run (its --out DIR/bakes); the scene options are "
        "then only labels",
    )
    ap.add_argument(
        "--defaults",
        action="store_true",
        help="only train the autoencoder with its default settings and report its time and "
        "errors against PCA",
    )
    ap.add_argument(
        "--pins",
        action="store_true",
        help="the animated-pin case: linear, autoencoder and Shen at --np + --nz DOFs on "
        "bench/shen.py's pins scene, then the autoencoder's defaults and their choice",
    )
    ap.add_argument("--np", type=int, default=3, dest="n_p", help="--pins: Shen's n_p")
    ap.add_argument("--nz", type=int, default=2, dest="n_z", help="--pins: Shen's n_z")
    args = ap.parse_args(argv)
    common.pin_this_process()
    if args.pins:
        import torch

        torch.set_num_threads(1)
        work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nrom_latent_"))
        print_pins(pins_case(work, args.n_p, args.n_z, args.epochs))
        return 0
    print(
        f"Swung arm: 1 x 0.1 x 0.1 m bar clamped at x = 0, E={YOUNG:g} Pa nu={POISSON}, "
        f"damping {DAMPING}, body load up to {LOAD_G:g} g turning in y-z; h=1/24 s; "
        f"{'x'.join(map(str, args.divisions))} cells; "
        f"{args.variants} variants x {args.frames} frames, {args.keys} keys; AE: PCA layer {PCA_LAYER}, "
        f"{args.epochs} epochs, batch 32; one thread.\n",
        flush=True,
    )
    r = run(args)
    if "defaults" in r:
        print_defaults(r["defaults"])
        return 0
    n, m = r["mesh"]
    print(
        f"\nmesh {n} vertices / {m} tets; bake {r['bake_s']:.0f} s; frames train {r['frames'][0]}, "
        f"held-out {r['frames'][1]}; held-out max displacement {r['max_disp']:.2f} m"
    )
    c = r["pca_curve"]
    print("\nPCA, held-out max vertex error (mm):")
    print("  " + "  ".join(f"k={k}:{1000 * c[k]:.1f}" for k in range(2, len(c))))
    print(
        f"\n{'r':>3}{'AE held-out mm':>16}{'AE train mm':>13}{'PCA k same err':>16}{'r/k':>7}{'train s':>9}"
    )
    for lat, a in r["ae"].items():
        ratio = f"{lat / a['k']:.0%}" if a["k"] else "-"
        print(
            f"{lat:>3}{1000 * a['err']:>16.1f}{1000 * a['train_err']:>13.1f}"
            f"{(a['k'] if a['k'] is not None else '>30'):>16}{ratio:>7}{a['train_s']:>9.1f}"
        )
    b, k = r["best"], r["pca_k"]
    print(
        f"\nBest: AE r = {b} vs PCA k = {k} at {1000 * r['ae'][b]['err']:.1f} mm: r/k = {b / k:.0%}"
    )
    print(f"\nRollout of one held-out bake ({r['roll_frames']} steps), one thread:")
    print(f"{'solver':<34}{'DOFs':>6}{'ms/step':>10}{'iters/step':>12}{'rollout err mm':>16}")
    rows = [
        ("full space (Newton)", r["free_dofs"], r["full"]),
        (f"AE r={b} (L-BFGS, eq. 15 precond.)", b, r["ae_roll"]),
        (f"PCA k={k} (Newton)", k, r["pca_roll"]),
        (f"PCA k={k} (L-BFGS, identity dec.)", k, r["pca_lbfgs_roll"]),
    ]
    for name, dofs, x in rows:
        print(
            f"{name:<34}{dofs:>6}{x['step_ms']:>10.2f}{x['iters']:>12.1f}{1000 * x['err']:>16.1f}"
        )
    print("\nms per step by phase (derivatives / solve / line search), slowest step:")
    for name, _, x in rows:
        ph = x["phases"]
        ev = f"; {x['evals']:.1f} objective evaluations" if x.get("evals") else ""
        print(
            f"  {name:<34}{ph.get('derivatives', 0):.2f} / {ph.get('solve', 0):.2f} / "
            f"{ph.get('line_search', 0):.2f}; slowest {x['max_ms']:.1f} ms{ev}"
        )
    full_ms, ae_ms = r["full"]["step_ms"], r["ae_roll"]["step_ms"]
    print(
        f"\nfull space / AE step time: {full_ms / ae_ms:.0f}x at {m} tets (goal >= 30x at ~20K); "
        f"cubature elements: AE {r['cubature']['ae']}, PCA {r['cubature']['pca']}"
    )
    st = r["ae"][b].get("stage_s")
    split = (
        f" (load + PCA {st['pca']:.1f}, network {st['net']:.1f}, export + cubature "
        f"{st['cubature']:.1f})"
        if st
        else ""
    )
    print(
        f"Training on the CPU, one thread: AE r={b} {r['ae'][b]['train_s']:.1f} s{split}; "
        f"PCA k={k} model (POD + cubature) {r['pca_train_s']:.1f} s"
    )
    if "profile" in r:
        print(f"\nProfile of the AE rollout ({r['roll_frames']} steps, own time):\n")
        print(r["profile"])
    if "npz" in r:
        print(f"\nrollouts written to {r['npz']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
