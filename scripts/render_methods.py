"""Render the README pictures of the learned methods (issues 11-14), headless, with the PyPI ``bpy``.

    .venv/bin/python scripts/render_methods.py [--only snp|walk|shen|licrom|face] [--out docs/images]
                                               [--quick] [--data-only] [--render-only]

Each picture is one scene built at a small, seeded scale with the package's own APIs and the
scene builders of the tests and benches (imported, not copied), a model trained on the CPU
(minutes), and the frames it shows compared with the reference the model never saw:

- ``snp_cloth.png`` (issue 11): a held-out cloth frame, Blender's cloth beside ours: the
  sheet of ``tests/test_snp_cloth.py`` poked by a keyframed ball, a bake never trained on;
- ``snp_walk.png`` (issue 30): a cape on a walking, turning torso (its owner and a capsule
  collider; ``bench/snp_cloth.py --scene cape``), baked at the defaults (motion drawn from the
  walk), a held-out bake replayed from rest: Blender's cloth, ours, and the cape glued to the
  torso;
- ``shen_whip.png`` (issue 12): full space, PCA, Fulton's autoencoder and Shen at one
  frame of a held-out whip bake (``bench/shen.py``'s whip, 3 + 2 DOFs);
- ``licrom_shapes.png`` (issue 13): a superellipsoid the model never saw dropped on the
  ground, and a bar cut mid-run (the run continuing on the cut mesh), each against full space;
- ``face_active.png`` (issue 14): a sculpted key, our fit, a held-out expression refitted,
  and a frame driven by 30 markers (small spheres) on the demo head of ``core/face.py``.

Reduced results are coloured by each vertex's distance to the reference (the blue -> red ramp
of Compare with Bake), the errors measured (mm) are written under them. The frames shown are
written to ``<picture>.npz`` beside the picture (numeric arrays only), so ``--render-only``
renders the picture again from them without training; ``--data-only`` writes the ``.npz``
without rendering (what the test runs, at ``--quick`` scale). ``--quick``: coarse meshes, a
few bakes, a few epochs: a check that everything runs, not a picture for the README.

Torch and BLAS run on one thread; every random choice is seeded.
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one BLAS thread, set before numpy loads (not on import: a test's
    # process and the jobs it starts keep their own settings)
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "scripts", ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

METHODS = ("snp", "walk", "shen", "licrom", "face")
PICTURES = {
    "snp": "snp_cloth",
    "walk": "snp_walk",
    "shen": "shen_whip",
    "licrom": "licrom_shapes",
    "face": "face_active",
}


def _torch_one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _mm(e: float) -> str:
    return f"{1000 * e:.1f}" if e >= 1e-3 else f"{1000 * e:.2f}"


def save_npz(path: Path, **arrays) -> Path:
    """Frames and numbers of one picture, numeric arrays only (no pickled objects); float
    arrays as float32 (the picture needs no more)."""
    out = {}
    for k, v in arrays.items():
        a = np.asarray(v)
        out[k] = a.astype(np.float32) if a.dtype.kind == "f" and a.ndim > 0 else a
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return path


def load_npz(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------- data: snp


def snp_data(work: Path, quick: bool) -> dict:
    """The sheet of tests/test_snp_cloth.py (its bakes, its settings), trained on its training
    bakes; a held-out bake (seed 1000, never trained on) replayed as Simulate drives it."""
    from dataclasses import replace

    from neural_rom.core import registry
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.kinds.cloth.source import triangulate
    from neural_rom.core.methods.snp import SNPSimulation
    from neural_rom.tests import test_snp_cloth as tc
    from neural_rom.tests.cloth_scenes import build_sheet

    _torch_one_thread()
    side, bakes, frames, held_frames = (
        (8, 4, 40, 40) if quick else (tc.SHEET, tc.TRAIN_BAKES, tc.TRAIN_FRAMES, 240)
    )
    settings = {**tc.SETTINGS, "epochs": 2} if quick else tc.SETTINGS
    blend = build_sheet(work / "sheet.blend", n=side)
    t0 = time.perf_counter()
    train = tc.finish(tc.cloth_bake(work, blend, "train", frames, bakes, 0))
    held = BakeCache.open(tc.finish(tc.cloth_bake(work, blend, "held", held_frames, 1, 1000))[0])
    t_bake = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = registry.get("snp").trainer_function()(
        train, work / "cloth.nrmodel", settings, checkpoint_dir=None
    )
    t_train = time.perf_counter() - t0
    model = registry.load_simulator(result["model"])[0]
    initial = SNPSimulation(replace(model.p, net=None), model.settings)
    x = np.asarray(held.channel("positions"))
    y = tc.replay(model, held)
    y0 = tc.replay(initial, held)
    C = np.asarray(held.channel("colliders"))
    ball = held.meta["colliders"][0]
    # the frame shown: the first poke at the sheet's middle: the deepest frame of the first
    # run of frames where the ball is in contact (within 5 cm) with the middle of the sheet
    # (its centre over the middle 60% of the sheet's width and height)
    centre = C[:, 0, :3, 3]
    dist = np.linalg.norm(x - centre[:, None], axis=-1).min(1)
    lo, hi = held.X.min(0), held.X.max(0)
    xz = [0, 2]  # the sheet hangs in the x-z plane
    mid = np.all(np.abs(centre - 0.5 * (lo + hi))[:, xz] <= 0.3 * (hi - lo)[xz], axis=1)
    contact = (dist < ball["radius"] + 0.05) & mid
    push = np.linalg.norm(x - held.X, axis=-1).max(1)
    if contact.any():
        first = int(np.argmax(contact))
        end = first + (int(np.argmin(contact[first:])) or len(x) - first)
        frame = first + int(np.argmax(push[first:end]))
    else:
        frame = len(x) // 2
    mean_err = np.linalg.norm(y[1:] - x[1:], axis=-1).mean()
    mean_err0 = np.linalg.norm(y0[1:] - x[1:], axis=-1).mean()
    print(
        f"snp: {len(held.X)} vertices, {bakes} bakes x {frames + 1} frames baked with the held-out "
        f"one in {t_bake:.0f} s, trained in {t_train:.0f} s; held-out {len(x)} frames: mean error "
        f"{1000 * mean_err:.2f} mm (alpha/beta alone {1000 * mean_err0:.2f} mm); frame {frame}"
    )
    return {
        "X": held.X,
        "F": triangulate(held.extra("face_vertices"), held.extra("face_sizes")),
        "blender": x[frame],
        "ours": y[frame],
        "alpha_beta": y0[frame],
        "ball": C[frame, 0],
        "ball_radius": float(ball["radius"]),
        "frame": frame,
        "frames": len(x) - 1,
        "mean_err": mean_err,
        "mean_err_alpha_beta": mean_err0,
        "bakes": bakes,
        "bake_frames": frames,
        "train_s": t_train,
        "k": settings.k,
    }


def walk_data(work: Path, quick: bool) -> dict:
    """The walking character of ``bench/snp_cloth.py --scene cape``: 10 bakes of 120 frames
    drawn from the torso's walk, 60 modes, 30 epochs; its first held-out bake replayed from
    rest, with a cape glued to the torso beside it (:func:`cloth_scenes.character_accuracy`'s
    measures over the whole bake)."""
    from neural_rom.core import jobs, registry
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.kinds.cloth.source import replay_cloth_bake, triangulate
    from neural_rom.tests.cloth_scenes import build_cape, character_accuracy

    _torch_one_thread()
    n, bakes, frames, epochs = ((6, 9), 3, 24, 2) if quick else ((20, 30), 10, 120, 30)
    blend = build_cape(work / "cape.blend", n=n, frames=frames)
    spec = {"kind": "cloth_bake", "blend": str(blend), "object": "Cape", "name": "walk"}
    spec.update(out_dir=str(work / "bakes"), frames=frames, variants=bakes, seed=0)
    t0 = time.perf_counter()
    job = jobs.Job.start(spec, sys.executable, work / "logs", check_python=False)
    job.wait(timeout=3600)
    if job.state != jobs.DONE:
        raise SystemExit(f"cloth bake failed: {job.message}")
    t_bake = time.perf_counter() - t0
    settings = registry.get("snp").values(
        dict(k=60, epochs=epochs, validation_fraction=0.2, seed=0)
    )
    t0 = time.perf_counter()
    out = work / "cape.nrmodel"
    registry.get("snp").trainer_function()(job.result["paths"], out, settings, checkpoint_dir=None)
    t_train = time.perf_counter() - t0
    sim, model = registry.load_simulator(out)
    held = BakeCache.open(job.result["paths"][model.metadata["validation_trajectories"][0]])
    (row,) = character_accuracy(sim, [held])
    x = np.asarray(held.channel("positions"))
    y = replay_cloth_bake(sim, held)
    R = np.asarray(held.channel("reference_frame"))
    rel = R @ np.linalg.inv(np.asarray(held.meta["reference_rest"]))
    glued = np.einsum("fij,nj->fni", rel[:, :3, :3], held.X) + rel[:, None, :3, 3]
    # the frame shown: where the cape flies furthest from the glued one (a turn or a stop)
    frame = int(np.argmax(np.linalg.norm(x - glued, axis=-1).mean(1)))
    torso = held.meta["colliders"][0]
    print(
        f"walk: {len(held.X)} vertices, {bakes} bakes x {frames + 1} frames in {t_bake:.0f} s, "
        f"trained in {t_train:.0f} s; held-out {held.path.name}: mean {1e3 * row['mean_m']:.1f} "
        f"mm, glued {1e3 * row['glued_mean_m']:.1f} mm; frame {frame}"
    )
    return {
        "X": held.X,
        "F": triangulate(held.extra("face_vertices"), held.extra("face_sizes")),
        "blender": x[frame],
        "ours": y[frame],
        "glued": glued[frame],
        "torso": np.asarray(held.channel("colliders"))[frame, 0],
        "torso_radius": float(torso["radius"]),
        "torso_half_length": float(torso["half_length"]),
        "frame": frame,
        "frames": len(x) - 1,
        "mean_err": row["mean_m"],
        "mean_err_glued": row["glued_mean_m"],
        "mean_err_floor": row["floor_mean_m"],
        "bakes": bakes,
        "bake_frames": frames,
        "train_s": t_train,
        "k": int(sim.p.u),
    }


# ----------------------------------------------------------------------------- data: shen


def shen_data(work: Path, quick: bool) -> dict:
    """bench/shen.py's whip: its bakes, :func:`shen.compare` (Shen 3 + 2 DOFs, PCA-5, Fulton
    with latent 5 on the same data), then one held-out bake replayed by each model."""
    import autoencoder
    import shen as bench_shen
    from neural_rom.core.geometry.tetmesh import TetMesh
    from neural_rom.core.registry import load_simulator

    _torch_one_thread()
    n_p, n_z = 3, 2
    # bench/shen.py's defaults (3,000 epochs, patience 600), but for the closest-shape sample
    divisions, variants, frames, epochs = (
        ((12, 1, 1), 4, 24, 30) if quick else ((40, 2, 2), 8, 72, 3000)
    )
    t0 = time.perf_counter()
    paths = bench_shen.bake_whip(
        work / "bakes", divisions=divisions, variants=variants, frames=frames
    )
    t_bake = time.perf_counter() - t0
    r = bench_shen.compare(
        paths,
        work,
        n_p,
        n_z,
        epochs=epochs,
        patience=max(epochs // 5, 10),
        closest_every=3,
        variational=False,
    )
    print(bench_shen.report(f"whip ({divisions})", r))
    ds, va, _ = bench_shen.heldout(paths)
    held = ds[int(va[0])]
    full = np.asarray(held.channel("positions"))
    traj = {"full": full}
    for name, file in (("pca", "pca.nrmodel"), ("fulton", "ae.nrmodel"), ("shen", "shen.nrmodel")):
        rec: list = []
        autoencoder.rollout(load_simulator(work / file)[0], held, rec)
        traj[name] = np.stack(rec)
    X = np.asarray(held.X)
    # the frame shown: the largest bend after the release
    disp = np.linalg.norm(full - X, axis=-1).max(1)
    frame = bench_shen.PULL + 1 + int(np.argmax(disp[bench_shen.PULL + 1 :]))
    errs = {m: np.linalg.norm(traj[m] - full, axis=-1) for m in ("pca", "fulton", "shen")}
    for m, e in errs.items():
        print(
            f"  {m}: frame {frame} max {1000 * e[frame].max():.1f} mm; bake max {1000 * e.max():.1f}"
        )
    print(f"whip bakes {t_bake:.0f} s")
    return {
        "X": X,
        "F": TetMesh(X, np.asarray(held.T)).boundary_faces(),
        "pinned": np.flatnonzero(X[:, 0] < 1e-9),
        **{m: t[frame] for m, t in traj.items()},
        **{f"{m}_bake_max": e.max() for m, e in errs.items()},
        "frame": frame,
        "frames": len(full) - 1,
        "dt": bench_shen.WHIP_DT,
        "tets": len(held.T),
        "n_p": n_p,
        "n_z": n_z,
        "shen_train_s": r["shen_train_s"],
        "fulton_train_s": r.get("fulton_train_s", 0.0),
        "shen_closest": r["shen_closest"],
        "pca_closest": r["pca_closest"],
        "fulton_closest": r.get("fulton_closest", np.nan),
    }


# ----------------------------------------------------------------------------- data: licrom


def licrom_data(work: Path, quick: bool) -> dict:
    """Two LiCROM models, scenes of tests/test_licrom.py: superellipsoids dropped on the
    ground (trained on exponents 2, 4, 10; the picture drops the unseen exponent 6), and the
    bar with its notched variant (the notch cut at frame 8 of a held-out sag; full space with
    the same elements removed at the same frame beside it)."""
    import licrom as bench_licrom
    from neural_rom.core import bake as bk
    from neural_rom.core import registry
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.engine.replay import replay_bake
    from neural_rom.core.geometry.tetmesh import TetMesh
    from neural_rom.core.methods import licrom
    from neural_rom.core.physics.sim import Simulation
    from neural_rom.tests import test_licrom as tl

    train = registry.get("licrom").trainer_function()
    from scipy.spatial import cKDTree

    _torch_one_thread()
    out: dict = {}
    epochs, frames = (5, 8) if quick else (60, 16)
    # --- a shape of the family never trained on
    d = work / "shapes"
    unseen_p = tl.UNSEEN_P[-1]
    meshes = {p: tl.superellipsoid(p) for p in (*tl.TRAIN_P, unseen_p)}

    def drop(seed, variants=1):
        return bk.BakeSpec(
            material=tl.SOFT.to_dict(),
            scenario=tl.DROP,
            frames=frames,
            seed=seed,
            damping=(0.5, 0.0),
            variants=variants,
        )

    paths = []
    for p in tl.TRAIN_P:
        paths += bk.bake_variants(meshes[p], drop(p, 2), d, f"train_{p}")
    t0 = time.perf_counter()
    train(
        paths,
        d / "shapes.nrmodel",
        {
            "latent_dim": 10,
            "epochs": epochs,
            "projection_epochs": 0,
            "validation_fraction": 0.0,
            "cubature_vertices": 0,
            "rollout": False,
        },
        device="cpu",
    )
    out["shapes_train_s"] = time.perf_counter() - t0
    m = meshes[unseen_p]
    cache = BakeCache.open(bk.bake(m, drop(100), d / "held.nrbake"))
    _, driver = replay_scenario(cache)
    sim = licrom.load_on_mesh(d / "shapes.nrmodel", m.X, m.T, colliders=driver.colliders(0))
    x = replay_bake(sim, cache, driver)
    full = np.asarray(cache.channel("positions"))
    height = np.ptp(full[:, :, 2], axis=1)
    f = int(np.argmin(height))  # the deepest squash
    e = np.linalg.norm(x - full, axis=2)
    planes = [c.transform[2, 3] for c in driver.colliders(f) if c.kind == "plane"]
    out.update(
        shape_ground=planes[0] if planes else full[f][:, 2].min(),
        shape_X=m.X,
        shape_F=TetMesh(m.X, m.T).boundary_faces(),
        shape_full=full[f],
        shape_ours=x[f],
        shape_frame=f,
        shape_p=unseen_p,
        shape_tets=len(m.T),
        shape_bake_max=e.max(),
    )
    print(f"licrom unseen p={unseen_p}: frame {f}, {_mm(e[f].max())} mm; bake max {_mm(e.max())}")
    # --- the bar, cut mid-run
    d = work / "bar"
    coarse = tl.bar((10, 2, 2))
    X2, T2 = bench_licrom.notched(coarse.X, coarse.T, 0.3, 0.4, 0.04)  # the test's notch
    # old node -> new node (-1: removed); the cut keeps the nodes' order and coordinates
    dist, idx = cKDTree(X2).query(coarse.X)
    new = np.where(dist < 1e-12, idx, -1)
    notched = type(coarse)(X=X2, T=T2, pinned=new[coarse.pinned])
    sag = {"kind": "gravity_drop", "jitter": 0.5}
    bar_frames = 8 if quick else 24
    paths = bk.bake_variants(coarse, tl.spec(coarse, sag, bar_frames, seed=3), d, "sag")
    paths += bk.bake_variants(
        coarse, tl.spec(coarse, tl.POKES, bar_frames, seed=11, variants=3), d, "pokes"
    )
    paths += bk.bake_variants(notched, tl.spec(notched, sag, bar_frames, seed=4), d, "notch_sag")
    paths += bk.bake_variants(
        notched, tl.spec(notched, tl.POKES, bar_frames, seed=5), d, "notch_pokes"
    )
    t0 = time.perf_counter()
    train(
        paths,
        d / "family.nrmodel",
        {
            "latent_dim": tl.R,
            "epochs": 5 if quick else 30,
            "projection_epochs": 0,
            "cubature_vertices": 40,
            "validation_fraction": 0.0,
            "rollout": False,
        },
        device="cpu",
    )
    out["bar_train_s"] = time.perf_counter() - t0
    red = licrom.load_on_mesh(d / "family.nrmodel", coarse.X, coarse.T, cubature_vertices=0)
    fullsim = Simulation(coarse.X, coarse.T, tl.MATERIAL, red.settings, pinned=coarse.pinned)
    cut_at, shown = (3, 6) if quick else (8, 20)
    errs = []
    for k in range(shown + 1):
        if k == cut_at:
            keep = new >= 0
            full2 = Simulation(X2, T2, tl.MATERIAL, red.settings, pinned=new[coarse.pinned])
            full2.reset(x=fullsim.x[keep], v=fullsim.v[keep])
            fullsim = full2
            rep = red.swap_mesh(X2, T2)
        fullsim.step()
        red.step()
        errs.append(float(np.linalg.norm(red.positions() - fullsim.x, axis=1).max()))
    out.update(
        cut_X=X2,
        cut_F=TetMesh(X2, T2).boundary_faces(),
        cut_pinned=new[coarse.pinned],
        cut_full=fullsim.x,
        cut_ours=red.positions(),
        cut_at=cut_at,
        cut_frame=shown,
        cut_removed=len(coarse.T) - len(T2),
        cut_tets=len(coarse.T),
        cut_run_max=max(errs),
        cut_swap_ms=1000 * rep.seconds,
        cut_kinetic=[rep.kinetic_before, rep.kinetic_after],
    )
    print(
        f"licrom cut at frame {cut_at}, frame {shown}: {_mm(errs[-1])} mm, run max "
        f"{_mm(max(errs))} mm, swap {1000 * rep.seconds:.1f} ms"
    )
    return out


# ----------------------------------------------------------------------------- data: face


def face_data(work: Path, quick: bool) -> dict:
    """The small demo head of core/face.py and its seeded keys (the last held out), fitted
    by training.active.fit; a training key, its fit, a held-out key refitted (its code
    only, the whole skin) and the same key driven by 30 markers (reduced solve)."""
    from neural_rom.core.engine.protocol import FrameInputs, Markers
    from neural_rom.core.kinds.face.rig import demo_head, make_shape_keys
    from neural_rom.core.methods.active import ActiveFace
    from neural_rom.training.active import fit

    _torch_one_thread()
    n_keys, held_out = (6, 2) if quick else (30, 6)
    settings = (
        {"latent_dim": 4, "hidden": [16], "warm_epochs": 20, "epochs": 1, "basis": 16}
        if quick
        else {"latent_dim": 8, "warm_epochs": 300, "epochs": 4}
    )
    t0 = time.perf_counter()
    rig = demo_head("small")
    keys = make_shape_keys(rig, n_keys, held_out=held_out, seed=0)
    t_keys = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = fit((rig, keys), work / "face.nrmodel", settings)
    t_fit = time.perf_counter() - t0
    model = res["model"]
    full = ActiveFace(model, solve="full")
    red = ActiveFace(model)
    tr, ho = np.flatnonzero(~keys.held_out), np.flatnonzero(keys.held_out)
    motion = np.linalg.norm(keys.positions - rig.skin_V, axis=-1).max(1)
    i = int(np.argmax(motion[tr]))  # the most expressive training key
    jaw = model.jaw_matrix(keys.jaw[tr[i]])
    full.step(FrameInputs(sliders=model.codes[i], reference_frame=jaw))
    fit_skin = full.skin_positions()
    j = ho[int(np.argmax(motion[ho]))]  # the most expressive held-out key
    tgt, jaw_j = keys.positions[j], model.jaw_matrix(keys.jaw[j])
    _, x, _, _ = full.fit_latent(
        tgt, jaw=jaw_j, z0=np.zeros(model.latent_dim), pull=1e-10, iters=12
    )
    held_skin = rig.skin.apply(x)
    mv = np.random.default_rng(0).choice(len(rig.skin_V), 30, replace=False)
    red.reset()
    red.step(FrameInputs(markers=Markers(mv, tgt[mv]), reference_frame=jaw_j))
    marker_skin = red.skin_positions()

    def mean(P, T):
        return float(np.linalg.norm(P - T, axis=-1).mean())

    out = {
        "V": rig.skin_V,
        "F": rig.skin_F,
        "key": keys.positions[tr[i]],
        "fit": fit_skin,
        "held": tgt,
        "held_fit": held_skin,
        "markers": marker_skin,
        "marker_vertices": mv,
        "key_jaw": keys.jaw[tr[i]],
        "held_jaw": keys.jaw[j],
        "key_motion": motion[tr[i]],
        "held_motion": motion[j],
        "fit_err": mean(fit_skin, keys.positions[tr[i]]),
        "held_err": mean(held_skin, tgt),
        "marker_err": mean(marker_skin, tgt),
        "train_err": res["train_error_m"],
        "tets": len(rig.T),
        "keys": n_keys,
        "held_out": held_out,
        "latent": model.latent_dim,
        "fit_s": t_fit,
    }
    print(
        f"face: {len(rig.T)} tets, keys {t_keys:.0f} s, fit {t_fit:.0f} s; key {tr[i]} fit "
        f"{_mm(out['fit_err'])} mm, held-out key {j} {_mm(out['held_err'])} mm, 30 markers "
        f"{_mm(out['marker_err'])} mm (mean skin errors)"
    )
    return out


PICTURE: dict = {}
DATA = {
    "snp": snp_data,
    "walk": walk_data,
    "shen": shen_data,
    "licrom": licrom_data,
    "face": face_data,
}


# ----------------------------------------------------------------------------- pictures

GREY = (0.78, 0.78, 0.8, 1.0)  # a reference shape (no error colours)
DARK = (0.3, 0.3, 0.32, 1.0)  # colliders, clamps, ground
WHITE = (0.92, 0.92, 0.92, 1.0)
TEXT = (0.6, 0.6, 0.62, 1.0)


@dataclass
class Part:
    """One mesh of a panel: vertices (n, 3) in the view frame (the camera looks along +y, z
    up), triangles (t, 3), colour (4,) or per vertex (n, 4)."""

    V: np.ndarray
    F: np.ndarray
    rgba: tuple | np.ndarray = GREY
    smooth: bool = False
    subdivide: int = 0  # levels of a Subdivision modifier (a coarse cloth, drawn smooth)


@dataclass
class Panel:
    title: str
    subtitle: str = ""
    footer: str = ""
    parts: list[Part] = field(default_factory=list)
    errors: bool = False  # coloured by error: the legend spans these panels


def view(azimuth_deg: float, elevation_deg: float) -> np.ndarray:
    """(3, 3) rotation from world to view: turn about z by ``azimuth``, then tip the top
    towards the camera (which looks along +y) by ``elevation``."""
    a, e = math.radians(azimuth_deg), math.radians(elevation_deg)
    Rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    Rx = np.array([[1, 0, 0], [0, math.cos(e), -math.sin(e)], [0, math.sin(e), math.cos(e)]])
    return Rx @ Rz


def nice_max(e: float) -> float:
    """The legend's top: the error rounded up to a round number (1, 1.5, 2, 2.5, 3, 4, 5, 6
    or 8 times a power of ten), m."""
    if e <= 0:
        return 1e-3
    p = 10.0 ** math.floor(math.log10(e))
    return next(p * m for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if p * m >= e * (1 - 1e-9))


def sphere(centre, radius: float, subdivisions: int = 3) -> tuple[np.ndarray, np.ndarray]:
    from neural_rom.core.geometry.surface import icosphere

    V, F = icosphere(radius, subdivisions)
    return V + np.asarray(centre), F


def refine(F: np.ndarray, n: int, levels: int):
    """Split each triangle of ``F`` (over ``n`` vertices) into 4 by its edge midpoints,
    ``levels`` times: returns (W, F2), W a sparse (m, n) matrix of the new vertices as
    averages of the old ones (``W @ V`` places any shape of the mesh on the finer one).
    Errors are then measured at the new vertices, not interpolated in RGB: on a coarse mesh
    (a rod's two rings) a blue root and a yellow tip blend to grey-purple, off the legend."""
    import scipy.sparse as sp

    W = sp.identity(n, format="csr")
    F = np.asarray(F, dtype=np.int64)
    for _ in range(levels):
        e = np.sort(F[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
        edges, inv = np.unique(e, axis=0, return_inverse=True)
        k = len(edges)
        rows = np.repeat(np.arange(k), 2)
        mid = sp.csr_matrix((np.full(2 * k, 0.5), (rows, edges.ravel())), shape=(k, W.shape[0]))
        m = W.shape[0] + inv.reshape(-1, 3)  # midpoints of edges (0,1), (1,2), (2,0)
        a, b, c = F.T
        F = np.concatenate(
            [
                np.stack([a, m[:, 0], m[:, 2]], 1),
                np.stack([m[:, 0], b, m[:, 1]], 1),
                np.stack([m[:, 2], m[:, 1], c], 1),
                np.stack([m[:, 0], m[:, 1], m[:, 2]], 1),
            ]
        )
        W = sp.vstack([W, mid @ W]).tocsr()
    return W, F


def error_part(P, F, err, vmax, smooth=False, subdivide=0) -> Part:
    from neural_rom.addon.compare.bake import error_colors

    return Part(P, F, error_colors(err, vmax), smooth, subdivide)


def error_panel(title, subtitle, P, F, err, vmax, others=(), subdivide=0) -> Panel:
    """A smooth shape ``P`` coloured by its vertex errors ``err``, its max and mean under it,
    beside ``others`` (parts drawn as they are: a collider, the owner)."""
    footer = f"max {_mm(err.max())} mm, mean {_mm(err.mean())} mm"
    return Panel(
        title, subtitle, footer, [error_part(P, F, err, vmax, True, subdivide), *others], True
    )


def compose(bpy, panels: list[Panel], path: Path, caption: list[str], vmax: float, legend: str):
    """Lay ``panels`` out in a row (each at its own width, a shared z), titles above, footers
    under, the error legend under the error panels, the caption lines at the bottom, and
    render them (:func:`render_readme.render_front`)."""
    import render_readme as rr

    bpy.ops.wm.read_factory_settings(use_empty=True)
    boxes = []
    for p in panels:
        P = np.concatenate([part.V for part in p.parts])
        boxes.append((P.min(0), P.max(0)))
    zlo = min(b[0][2] for b in boxes)
    zhi = max(b[1][2] for b in boxes)
    u = max(max(b[1][0] - b[0][0] for b in boxes), zhi - zlo)  # the scene's unit
    width = [max(b[1][0] - b[0][0], 0.9 * u) for b in boxes]
    gap = 0.3 * u
    x, centres = 0.0, []
    for i, (p, (lo, hi)) in enumerate(zip(panels, boxes)):
        cx = x + 0.5 * width[i]
        shift = np.array([cx - 0.5 * (lo[0] + hi[0]), 0.0, 0.0])
        for k, part in enumerate(p.parts):
            obj = rr.colored_object(bpy, f"{i}_{k}", part.V + shift, part.F, part.rgba, part.smooth)
            if part.subdivide:
                mod = obj.modifiers.new("Subdivision", "SUBSURF")
                mod.levels = mod.render_levels = part.subdivide
        y = -2.0 * u
        rr.label(bpy, p.title, (cx, y, zhi + 0.27 * u), 0.085 * u, WHITE)
        if p.subtitle:
            rr.label(bpy, p.subtitle, (cx, y, zhi + 0.15 * u), 0.058 * u, TEXT)
        if p.footer:
            rr.label(bpy, p.footer, (cx, y, zlo - 0.1 * u), 0.058 * u, TEXT)
        centres.append((x, x + width[i]))
        x += width[i] + gap
    xmin, xmax = -0.25 * u, x - gap + 0.25 * u
    z = zlo - 0.27 * u
    err = [c for c, p in zip(centres, panels) if p.errors]
    if err:
        rr.error_legend(
            bpy, err[0][0] + 0.1 * u, err[-1][1] - 0.1 * u, z, vmax, 0.055 * u, legend, y=-1.9 * u
        )
        z -= 0.2 * u
    chars = int(0.92 * (xmax - xmin) / (0.03 * u))  # glyphs of 0.055 u: about 0.03 u wide
    for line in [w for c in caption for w in textwrap.wrap(c, chars)]:
        rr.label(bpy, line, (0.5 * (xmin + xmax), -2.0 * u, z), 0.055 * u, TEXT)
        z -= 0.09 * u
    t0 = time.perf_counter()
    rr.render_front(bpy, path, (xmin, xmax), (z - 0.02 * u, zhi + 0.4 * u))
    print(f"wrote {path} ({time.perf_counter() - t0:.1f} s)")


#: azimuth, elevation (degrees): from the ball's side, across the sheet: the ball, and the
#: sheet pushed back and swinging, in one view
SNP_VIEW = (-60.0, 15.0)


def snp_picture(bpy, d: dict, path: Path) -> None:
    R = view(*SNP_VIEW)
    F = d["F"]
    ball = sphere(d["ball"][:3, 3], float(d["ball_radius"]))
    bp = Part(ball[0] @ R.T, ball[1], DARK, True)
    err = np.linalg.norm(d["ours"] - d["blender"], axis=1)
    err0 = np.linalg.norm(d["alpha_beta"] - d["blender"], axis=1)
    vmax = nice_max(max(err.max(), err0.max()))
    frame, frames = int(d["frame"]), int(d["frames"])
    panels = [
        Panel(
            "Blender's cloth",
            f"held-out bake, frame {frame} of {frames}",
            parts=[Part(d["blender"] @ R.T, F, GREY, True, 2), bp],
        ),
        error_panel(
            "Subspace Neural Physics",
            f"{int(d['k'])} modes + network",
            d["ours"] @ R.T,
            F,
            err,
            vmax,
            [bp],
            2,
        ),
        error_panel(
            "Alpha/beta model alone",
            "the same modes, no network",
            d["alpha_beta"] @ R.T,
            F,
            err0,
            vmax,
            [bp],
            2,
        ),
    ]
    caption = [
        f"A {len(d['X'])}-vertex sheet poked by a keyframed ball, trained on {int(d['bakes'])} "
        f"Blender cloth bakes of {int(d['bake_frames']) + 1} frames in "
        f"{_duration(float(d['train_s']))} on 2 shared CPU cores; the frame shown is the first "
        f"poke at the sheet's middle. The whole held-out rollout of {frames} frames: mean error "
        f"{_mm(float(d['mean_err']))} mm (alpha/beta alone {_mm(float(d['mean_err_alpha_beta']))} mm)."
    ]
    compose(bpy, panels, path, caption, vmax, "distance to Blender's cloth")


PICTURE["snp"] = snp_picture

#: from behind the torso and to its side, a little above: the cape in front of it
WALK_VIEW = (-35.0, 12.0)


def walk_picture(bpy, d: dict, path: Path) -> None:
    T = d["torso"]
    r, h = float(d["torso_radius"]), float(d["torso_half_length"])
    V, F_t = sphere(np.zeros(3), 1.0)
    V = V * [r, r, r + h]  # the capsule drawn as its enclosing ellipsoid
    torso = V @ T[:3, :3].T + T[:3, 3]
    R = view(*WALK_VIEW) @ np.linalg.inv(T[:3, :3])  # the view turns with the torso
    F = d["F"]
    tp = Part(torso @ R.T, F_t, DARK, True)
    err = np.linalg.norm(d["ours"] - d["blender"], axis=1)
    errg = np.linalg.norm(d["glued"] - d["blender"], axis=1)
    vmax = nice_max(max(err.max(), errg.max()))
    frame, frames = int(d["frame"]), int(d["frames"])
    panels = [
        Panel(
            "Blender's cloth",
            f"held-out walk, frame {frame} of {frames}",
            parts=[Part(d["blender"] @ R.T, F, GREY, True, 1), tp],
        ),
        error_panel(
            "Subspace Neural Physics",
            f"{int(d['k'])} modes + network",
            d["ours"] @ R.T,
            F,
            err,
            vmax,
            [tp],
            1,
        ),
        error_panel(
            "Cape glued to the torso",
            "its rest shape carried along",
            d["glued"] @ R.T,
            F,
            errg,
            vmax,
            [tp],
            1,
        ),
    ]
    caption = [
        f"A {len(d['X'])}-vertex cape on a torso (its owner and a capsule collider) walking and "
        f"turning, trained on {int(d['bakes'])} Blender cloth bakes of "
        f"{int(d['bake_frames']) + 1} frames drawn from the walk, in "
        f"{_duration(float(d['train_s']))} on 2 shared CPU cores; the frame shown is where the "
        f"cape flies furthest. The whole held-out bake from rest: mean error "
        f"{_mm(float(d['mean_err']))} mm (glued {_mm(float(d['mean_err_glued']))} mm, closest "
        f"shapes {_mm(float(d['mean_err_floor']))} mm)."
    ]
    compose(bpy, panels, path, caption, vmax, "distance to Blender's cloth")


PICTURE["walk"] = walk_picture


def shen_picture(bpy, d: dict, path: Path) -> None:
    X, F, full = d["X"], d["F"], d["full"]
    # turn about the clamp axis (x) so that the full-space tip points down (-z)
    tip = X[:, 0] >= X[:, 0].max() - 1e-9
    dy, dz = (full[tip] - X[tip]).mean(0)[1:]
    th = -math.pi / 2 - math.atan2(dz, dy)
    R = np.array([[1, 0, 0], [0, math.cos(th), -math.sin(th)], [0, math.sin(th), math.cos(th)]])
    c = np.array(
        [0.0, 0.5 * (X[:, 1].min() + X[:, 1].max()), 0.5 * (X[:, 2].min() + X[:, 2].max())]
    )

    def place(P):
        return (P - c) @ R.T

    h = 2.5 * (X[:, 2].max() - X[:, 2].min())
    clamp = render_box(np.array([-0.03, -h, -h]), np.array([0.0, h, h]))
    stations = np.unique(np.round(X[:, 0], 9))
    rings = [np.flatnonzero(np.abs(X[:, 0] - s) < 1e-9) for s in stations]

    def centreline(P):
        return np.array([P[r].mean(0) for r in rings])

    frame, dt = int(d["frame"]), float(d["dt"])
    errs = {m: np.linalg.norm(d[m] - full, axis=1) for m in ("pca", "fulton", "shen")}
    vmax = nice_max(max(e.max() for e in errs.values()))
    dofs = int(d["n_p"]) + int(d["n_z"])
    ghost = centreline(place(full))
    panels = [
        Panel(
            "Full space",
            f"{int(d['tets']):,} tets, {3 * (len(X) - len(d['pinned'])):,} DOFs",
            parts=[Part(place(full), F, GREY), clamp],
        )
    ]
    for key, title, sub in (
        ("pca", "PCA", f"{dofs} modes"),
        ("fulton", "Fulton 2019", f"autoencoder, latent {dofs}"),
        ("shen", "Shen 2021", f"{int(d['n_p'])} + {int(d['n_z'])} DOFs"),
    ):
        e = errs[key]
        V, Fr = render_ribbon(ghost, 0.006, -0.1)
        panels.append(
            Panel(
                title,
                sub,
                f"max {_mm(e.max())} mm here, {_mm(float(d[key + '_bake_max']))} mm over the bake",
                [error_part(place(d[key]), F, e, vmax), Part(V, Fr, WHITE), clamp],
                True,
            )
        )
    caption = [
        f"A whip (a 1 m bar, 4 cm thick) pulled at its tip and released, a bake held out of "
        f"training: frame {frame} of {int(d['frames'])} ({frame * dt:.2f} s). White line: the "
        f"full-space centre line. Shen trained in {_duration(float(d['shen_train_s']))}, Fulton "
        f"in {_duration(float(d['fulton_train_s']))} (2 shared CPU cores). "
        f"Closest shapes (every third held-out frame): Shen {_mm(float(d['shen_closest']))} mm, PCA "
        f"{_mm(float(d['pca_closest']))} mm, Fulton {_mm(float(d['fulton_closest']))} mm."
    ]
    compose(bpy, panels, path, caption, vmax, "distance to full space")


def render_box(lo, hi) -> Part:
    import render_readme as rr

    V, F = rr.box(lo, hi)
    return Part(V, F, DARK)


def render_ribbon(P, width, y):
    import render_readme as rr

    return rr.ribbon(P, width, y)


PICTURE["shen"] = shen_picture


def licrom_picture(bpy, d: dict, path: Path) -> None:
    Rs = view(-30.0, 15.0)
    Rb = view(-35.0, 25.0)
    es = np.linalg.norm(d["shape_ours"] - d["shape_full"], axis=1)
    ec = np.linalg.norm(d["cut_ours"] - d["cut_full"], axis=1)
    vmax = nice_max(max(es.max(), ec.max()))
    # the ground under the shape (z = 0)
    lo, hi = d["shape_full"].min(0), d["shape_full"].max(0)
    c, w, g = 0.5 * (lo + hi), 0.9 * (hi[0] - lo[0]), float(d["shape_ground"])
    ground = render_box(np.array([c[0] - w, c[1] - w, g - 0.01]), np.array([c[0] + w, c[1] + w, g]))
    ground.V = ground.V @ Rs.T
    cut_at, shown = int(d["cut_at"]), int(d["cut_frame"])
    h = 0.06
    clamp = render_box(np.array([-0.02, -h - 0.05, -h - 0.05]), np.array([0.0, h + 0.05, h + 0.05]))
    clamp.V = (clamp.V + [0, 0.05, 0.05]) @ Rb.T
    sF, cF = d["shape_F"], d["cut_F"]
    sag = float(np.linalg.norm(d["cut_full"] - d["cut_X"], axis=1).max())
    squash = 1 - np.ptp(d["shape_full"][:, 2]) / np.ptp(d["shape_X"][:, 2])
    panels = [
        Panel(
            "Full space",
            f"unseen shape (p = {int(d['shape_p'])}), {int(d['shape_tets'])} tets",
            f"dropped: frame {int(d['shape_frame'])}, {100 * squash:.0f}% squashed",
            [Part(d["shape_full"] @ Rs.T, sF, GREY), ground],
        ),
        Panel(
            "LiCROM",
            "trained on p = 2, 4, 10",
            f"max {_mm(es.max())} mm here, {_mm(float(d['shape_bake_max']))} mm over the drop",
            [error_part(d["shape_ours"] @ Rs.T, sF, es, vmax), ground],
            True,
        ),
        Panel(
            "Full space",
            f"notch cut at frame {cut_at} ({int(d['cut_removed'])} of {int(d['cut_tets'])} tets)",
            f"frame {shown}: moved up to {_mm(sag)} mm",
            [Part(d["cut_full"] @ Rb.T, cF, GREY), clamp],
        ),
        Panel(
            "LiCROM",
            f"mesh swapped at frame {cut_at} ({float(d['cut_swap_ms']):.0f} ms)",
            f"max {_mm(ec.max())} mm here, {_mm(float(d['cut_run_max']))} mm over the run",
            [error_part(d["cut_ours"] @ Rb.T, cF, ec, vmax), clamp],
            True,
        ),
    ]
    ke = d["cut_kinetic"]
    caption = [
        "One field model per family, run on meshes it was not trained on. Left: a superellipsoid "
        f"of an exponent never trained on, at its deepest squash. Right: a clamped bar sagging, a "
        f"notch cut mid-run; kinetic energy at the swap {1000 * float(ke[0]):.2f} -> "
        f"{1000 * float(ke[1]):.2f} mJ."
    ]
    compose(bpy, panels, path, caption, vmax, "distance to full space")


PICTURE["licrom"] = licrom_picture


def motion_colors(D: np.ndarray) -> np.ndarray:
    """(n, 4) grey -> amber by the length of each row of ``D`` (n, 3), amber at the largest
    (a power 0.7 ramp: motion of a few millimetres shows too)."""
    t = np.linalg.norm(D, axis=1)
    t = (t / max(t.max(), 1e-12))[:, None] ** 0.7
    return (1 - t) * np.array(GREY) + t * np.array([0.95, 0.62, 0.18, 1.0])


def face_picture(bpy, d: dict, path: Path) -> None:
    R = view(-35.0, 6.0)
    F = d["F"]
    ek = np.linalg.norm(d["fit"] - d["key"], axis=1)
    eh = np.linalg.norm(d["held_fit"] - d["held"], axis=1)
    em = np.linalg.norm(d["markers"] - d["held"], axis=1)
    vmax = nice_max(max(ek.max(), eh.max(), em.max()))
    size = float(np.ptp(d["V"][:, 2]))
    dots = [sphere(d["held"][i], 0.012 * size, 1) for i in d["marker_vertices"]]
    n = len(dots[0][0])
    MV = np.concatenate([v for v, _ in dots]) @ R.T
    MF = np.concatenate([f + k * n for k, (_, f) in enumerate(dots)])
    panels = [
        Panel(
            "Sculpted key",
            f"amber: skin motion, up to {_mm(float(d['key_motion']))} mm",
            f"jaw open {math.degrees(float(d['key_jaw'])):.0f} deg",
            [Part(d["key"] @ R.T, F, motion_colors(d["key"] - d["V"]), True)],
        ),
        Panel(
            "Our fit",
            "muscle actions from the decoder",
            f"mean {_mm(float(d['fit_err']))} mm, max {_mm(ek.max())} mm",
            [error_part(d["fit"] @ R.T, F, ek, vmax, True)],
            True,
        ),
        Panel(
            "Held-out expression",
            f"code refitted; skin moves up to {_mm(float(d['held_motion']))} mm",
            f"mean {_mm(float(d['held_err']))} mm, max {_mm(eh.max())} mm",
            [error_part(d["held_fit"] @ R.T, F, eh, vmax, True)],
            True,
        ),
        Panel(
            f"{len(d['marker_vertices'])} markers",
            "the held-out expression, marker-driven",
            f"mean {_mm(float(d['marker_err']))} mm, max {_mm(em.max())} mm",
            [error_part(d["markers"] @ R.T, F, em, vmax, True), Part(MV, MF, WHITE, True)],
            True,
        ),
    ]
    caption = [
        f"The demo head ({int(d['tets']):,} tets, {float(size) * 100:.0f} cm tall), "
        f"{int(d['keys']) - int(d['held_out'])} training keys and {int(d['held_out'])} held out, "
        f"latent {int(d['latent'])}, fitted in {_duration(float(d['fit_s']))} on 2 shared CPU cores. "
        "Errors: distance to the shape key's skin (mean over the skin, and the largest)."
    ]
    compose(bpy, panels, path, caption, vmax, "distance to the shape key")


PICTURE["face"] = face_picture


# ----------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=METHODS, action="append", help="one method (repeatable)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "images"))
    ap.add_argument("--quick", action="store_true", help="tiny scenes, a few epochs: a check")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--data-only", action="store_true", help="write the .npz, render nothing")
    group.add_argument(
        "--render-only", action="store_true", help="render from the .npz a previous run wrote"
    )
    ap.add_argument(
        "--work", default=None, help="keep the bakes and models in WORK/<method> (emptied first)"
    )
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or METHODS:
        npz = out / f"{PICTURES[name]}.npz"
        if not args.render_only:
            with tempfile.TemporaryDirectory(prefix=f"neural_rom_{name}_") as tmp:
                work = Path(args.work) / name if args.work else Path(tmp)
                if args.work:  # a fresh start: the bakes of an earlier run are not reused
                    shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True, exist_ok=True)
                t0 = time.perf_counter()
                data = DATA[name](work, args.quick)
                data["seconds"] = time.perf_counter() - t0
                save_npz(npz, **data, quick=args.quick)
        if not args.data_only:
            import bpy

            PICTURE[name](bpy, load_npz(npz), out / f"{PICTURES[name]}.png")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Blender's module build can crash while freeing itself at interpreter exit, after
    # every picture is written: leave without that teardown (as render_readme.py does).
    os._exit(code)
