"""Why a linear model replays worse than its closest shapes (issue 24): per basis and size,
the held-out replay, the closest shapes, and the one-step error.

The one-step error takes the bake's own state at each frame ``f`` (positions and velocity
projected onto the basis, in the pins' frame of frames ``f`` and ``f - 1``, the bake's
forces), makes ONE reduced step with frame ``f + 1``'s inputs, and measures the largest
vertex distance to the closest shape of bake frame ``f + 1``. It is the error the reduced
dynamics make where nothing has accumulated yet; the replay adds the accumulation. With
every frame of a bake in the basis it is zero (``tests/test_frame.py``: the moving frame,
pokes, gravity and damping are exact), so what it shows is the subspace's own force
error: the elastic force of what the basis leaves out, projected onto it.

Every model here uses every element (no cubature), so the cubature is not in the numbers.
Bases, each with ``k`` columns in all:

* ``pca``: the linear method's basis (mass-weighted PCA of the training bakes in the pins'
  frame; the method's default ``k`` is the first row, sized by 1% of the diagonal);
* ``static``: PCA with ``k - 3`` modes and the static deflections under uniform body loads
  along x, y, z (gravity and the pins' acceleration; :func:`core.methods.licrom.static_modes`),
  mass-orthonormalized against it: the classical static-correction remedy for modal
  truncation;
* ``frame``: PCA with ``k - 6`` modes, the three static modes and three more under the pins'
  frame turning about x, y, z (Euler loads ``e_i x (X - c)`` about the pins' centre ``c``).

Measured (2026-11-29, 2-core AMD EPYC, numpy 1.26, load 16-21; no timings), held-out
replay / closest shapes / one step, mm, at the linear method's default ``k`` (first row of
each case) and larger:

================  ===  ====================  ====================  ====================
case               k   pca                   static                frame
================  ===  ====================  ====================  ====================
pins bar           20   21.3 / 3.87 / 10.8    36.7 / 5.09 / 16.1    37.0 / 3.53 / 10.2
(--scene pins,     30   10.3 / 1.48 / 5.93    10.2 / 1.87 / 5.81    11.7 / 2.63 / 7.06
240 tets)          40    6.2 / 1.10 / 2.61     6.1 / 1.09 / 2.96     5.3 / 1.22 / 2.99
                   60    2.0 / 0.62 / 1.57     1.9 / 0.56 / 1.50     2.2 / 0.59 / 1.52
trunk (own         4    49.8 / 8.55 / 18.4   128.8 / 16.6 / 61.9
asset, a keyed      6   13.5 / 1.13 / 6.49    15.0 / 3.41 / 5.56
cone, 778 tets)     8    8.9 / 0.91 / 6.49    12.4 / 0.79 / 4.89    13.0 / 1.97 / 5.96
                   12    0.7 / 0.11 / 0.55     1.2 / 0.20 / 0.84     2.3 / 0.44 / 1.06
board (own          6  144.6 / 7.78 / 43.4   256.1 / 31.1 / 104
asset, a keyed      9   65.6 / 6.39 / 32.2    94.1 / 6.94 / 43.1   150.4 / 16.5 / 101
plank, 4333 tets)  12   81.0 / 5.55 / 30.4    58.0 / 7.42 / 30.1    62.4 / 6.72 / 30.0
                   18   15.7 / 2.56 / 7.31    22.2 / 4.04 / 7.39    49.0 / 4.08 / 16.5
================  ===  ====================  ====================  ====================

The static and frame modes are no lever: at equal DOFs they beat PCA's replay clearly in 3
of 21 cells (board k = 12 both, pins bar k = 40 the frame modes), tie in 3 and lose the rest,
by up to 2.6x. The replay is 3.2-18.6x the closest shapes and the one step alone 2.1-7.2x, so
most of the gap is there before anything accumulates, and more modes shrink both together.
The one step is the reduced force error: the elastic force of the part of the true state the
basis leaves out, projected onto the basis, through which a few millimetres of missing shape
move the next step by tens. Other remedies measured on the trunk, none better than PCA at
equal DOFs: vibration modes (replay 150-160 mm at k = 4-10), the flexibility basis
``K^-1 M U`` (158 mm at 4), the Ritz modes of a larger PCA basis (147 mm at 4), the rest
stiffness condensed onto the basis (diverges), a fitted linear force correction (its fit
explains 1% of the force error; 32 against 13.5 mm at 6). One helped once: PCA in the rest
stiffness's norm (so what the basis leaves out is K-orthogonal to it) replays the trunk at
23.6 against 49.8 mm at k = 4 (2.5x its closest shapes), but the pins bar at 132 against
90.3 mm (k = 12) and the board at 85.0 against 65.6 mm (k = 9). The bodies bend 0.2-1.6 m in
their pins' frame, far from the rest state where the rest stiffness holds.

Usage::

    python bench/dynamics.py [--scene pins | --bakes DIR] [--k K,K,...] [--bases pca,static,frame]

``--bakes DIR``: every ``*.nrbake`` in DIR (an object's ``neural_rom/<object>/bakes``),
split as training splits them (fraction 0.2, seed 0). Without ``--k``: the linear
method's default size and 1.5x, 2x, 3x it. One process, one BLAS thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latent  # noqa: E402
import shen  # noqa: E402

#: The bases a case can be measured with (see the module docstring).
BASES = ("pca", "static", "frame")


def open_case(paths) -> SimpleNamespace:
    """Bakes of one mesh split as training splits them: the mesh, material, pins, masses,
    time stepping, the PCA of the training frames in the pins' frame (as many modes as the
    data spans, at most 80), the linear method's default size ``k0`` and the held-out bakes."""
    from neural_rom.core import fem
    from neural_rom.core.errors import NeuralRomError
    from neural_rom.core.frame import to_pin_frame
    from neural_rom.core.subspace import mass_weighted_pod
    from neural_rom.training.common import physics_of

    ds, xt, xv, va = latent.split_frames(list(paths))
    material, spec = physics_of(ds)
    mat = fem.Material.from_dict(material)
    X, T = np.asarray(ds[0].X, float), np.asarray(ds[0].T, np.int64)
    pinned = np.asarray(ds[0].extra("pinned"), np.int64) if "pinned" in ds[0].extra_names else []
    pinned = np.asarray(pinned, np.int64)
    mass = fem.mass_matrix(X, T, mat.density, lumped=True)
    yt, yv = to_pin_frame(xt, X, pinned), to_pin_frame(xv, X, pinned)
    tol = 0.01 * float(np.linalg.norm(X.max(0) - X.min(0)))
    try:
        sub = mass_weighted_pod(yt - X, mass, pinned, k=min(80, len(yt)), X=X)
    except NeuralRomError as e:  # the data spans fewer directions: all of them
        rank = int(re.search(r"spans only (\d+)", str(e)).group(1))
        sub = mass_weighted_pod(yt - X, mass, pinned, k=rank, X=X)
    try:
        k0 = mass_weighted_pod(yt - X, mass, pinned, tolerance=tol, max_k=60, validation=yv - X).k
    except NeuralRomError:  # too few frames to meet it: every direction (training would refuse)
        k0 = sub.k
    return SimpleNamespace(
        ds=ds, va=va, X=X, T=T, mat=mat, pinned=pinned, mass=mass,
        settings=spec.sim_settings(), sub=sub, k0=k0, xv=xv,
    )  # fmt: skip


def basis(case, k: int, kind: str) -> np.ndarray:
    """The (3n, k) basis ``kind`` (:data:`BASES`) of ``case``, M-orthonormal."""
    from neural_rom.core.methods.licrom import static_modes
    from neural_rom.core.subspace import m_orthonormalize

    extra = {"pca": 0, "static": 3, "frame": 6}[kind]
    U = case.sub.U[:, : k - extra]
    if not extra:
        return U
    a = np.eye(3)[:, None, :].repeat(len(case.X), axis=1)  # uniform, along x, y, z
    if kind == "frame":  # the frame turning about x, y, z through the pins' centre
        d = case.X - case.X[case.pinned].mean(0)
        a = np.concatenate([a, np.cross(np.eye(3)[:, None, :], d[None])])
    S = static_modes(case.X, case.T, case.mat, case.pinned, accelerations=a)
    return np.hstack([U, m_orthonormalize(S, np.repeat(case.mass, 3), against=U)])


def simulator(case, U: np.ndarray):
    """A linear-method runtime on ``U`` with every element (no cubature)."""
    from neural_rom.core.methods.linear import ReducedSimulation

    return ReducedSimulation(
        case.X, case.T, case.mat, U, dataclasses.replace(case.settings), pinned=case.pinned
    )


def one_step_error(make_sim, cache) -> float:
    """Largest vertex distance (m) between one reduced step from bake frame ``f``'s projected
    state and the closest shape of frame ``f + 1``, over the frames of ``cache`` (see the
    module docstring). Needs one substep a frame (the bakes' default)."""
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.sim import FrameInputs

    sim = make_sim()
    if int(sim.settings.substeps) != 1:
        raise SystemExit("one_step_error needs bakes of one substep a frame")
    h = sim.settings.dt
    x = np.asarray(cache.channel("positions"), dtype=float)
    _, driver = replay_scenario(cache)
    poses = [sim.frame_of(xf) for xf in x]
    q = [sim.closest_q((xf - p.c) @ p.R) for xf, p in zip(x, poses, strict=True)]
    worst = 0.0
    for f in range(1, len(x) - 1):
        sim.reset(q=q[f], qdot=(q[f] - q[f - 1]) / h)
        sim.place_frame(poses[f])
        sim.pose_prev = poses[f - 1]
        sim.f_ext = sim.project_forces(np.asarray(driver.forces[f]) @ poses[f].R)
        inp = driver.inputs(f + 1)
        sim.step(
            FrameInputs(forces=inp.forces, colliders=inp.colliders, pin_targets=inp.pin_targets)
        )
        ref = sim.closest_shape(x[f + 1])
        worst = max(worst, float(np.linalg.norm(sim.positions() - ref, axis=1).max()))
    return worst


def measure(case, ks, kinds) -> list[dict]:
    """Per ``k`` and basis kind: replay, closest shapes and one-step errors (m) over the
    held-out bakes, and the seconds it took."""
    rows = []
    for k in ks:
        for kind in kinds:
            if k - {"pca": 0, "static": 3, "frame": 6}[kind] < 1:
                continue
            t0 = time.perf_counter()
            U = basis(case, k, kind)
            caches = [case.ds[int(i)] for i in case.va]
            rows.append(
                {
                    "k": k,
                    "basis": kind,
                    "replay_m": max(latent.rollout(simulator(case, U), c)["err"] for c in caches),
                    "closest_m": shen.closest_error(simulator(case, U), case.xv),
                    "one_step_m": max(
                        one_step_error(lambda U=U: simulator(case, U), c) for c in caches
                    ),
                    "seconds": time.perf_counter() - t0,
                }
            )
            r = rows[-1]
            print(
                f"  k {k:3d} {kind:7s} replay {1000 * r['replay_m']:8.1f}  closest "
                f"{1000 * r['closest_m']:7.2f}  one step {1000 * r['one_step_m']:7.2f} mm  "
                f"(replay {r['replay_m'] / r['closest_m']:.1f}x, one step "
                f"{r['one_step_m'] / r['closest_m']:.1f}x the closest shapes; {r['seconds']:.0f} s)",
                flush=True,
            )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scene", default=None, help="pins: bench/shen.py's swung, poked bar")
    ap.add_argument("--bakes", default=None, help="a folder of *.nrbake of one mesh")
    ap.add_argument("--k", default=None, help="basis sizes, e.g. 4,6,10")
    ap.add_argument("--bases", default="pca,static,frame")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.scene not in (None, "pins"):
        raise SystemExit(f"Unknown scene {args.scene!r}: pins (or --bakes DIR).")
    if args.bakes:
        paths = sorted(Path(args.bakes).glob("*.nrbake"))
    else:
        out = Path(args.out or tempfile.mkdtemp(prefix="nrom_dynamics_"))
        paths = sorted((out / "bakes").glob("*.nrbake")) or shen.bake_pins(out / "bakes")
    case = open_case(paths)
    ks = (
        [int(v) for v in args.k.split(",")]
        if args.k
        else sorted({case.k0, round(1.5 * case.k0), 2 * case.k0, 3 * case.k0})
    )
    print(
        f"{len(case.T)} tets, {len(case.va)} held-out bake(s); the linear method's default k "
        f"{case.k0}; every element (no cubature)"
    )
    measure(case, ks, args.bases.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
