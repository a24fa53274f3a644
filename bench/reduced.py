"""Reduced (linear subspace + cubature) step against the full-space step, same mesh and scenario.

Problem: the 4:1:1 bar of ``bench/fullspace.py`` (clamped at x = 0, stable Neo-Hookean,
E = 1 MPa, nu = 0.45, rho = 1000 kg/m^3, h = 1/24 s) hit by a scripted poke at its free end.

* ``full``: :class:`neural_rom.core.sim.Simulation` (Newton, AMG-CG solves).
* ``reduced``: :class:`neural_rom.core.methods.linear.ReducedSimulation` with a ``--modes``-vector basis
  of the 8 lowest linear vibration modes plus their modal derivatives (Barbic & James 2005,
  :func:`neural_rom.core.subspace.modal_derivatives`; linear modes alone lock under the large
  sag of this soft bar) and optimized cubature (An et al. 2008, at most ``--cubature``
  elements, relative error target 0.05) fitted on the full-space frames projected into the
  basis, as training fits it on bakes (so the error column is in-sample). The basis is
  data-free so the benchmark needs no long bake; a POD basis of the same size costs the same
  per step.

Both run the same frames with the same forces in one process pinned to one core; the table
prints time per step, Newton iterations, and full / reduced; ``pins ms`` is the reduced step
with the clamp swinging and sliding (animated pins: the moving frame of :mod:`core.frame`).

Usage::

    python bench/reduced.py [--sizes 20k,80k] [--modes 30] [--cubature 300] [--frames 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# One BLAS thread, set before numpy loads: main() pins the process to one core
# (common.pin_this_process), and a pool sized for every core would time-share it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

YOUNG, POISSON, DENSITY = 1.0e6, 0.45, 1000.0
DT = 1.0 / 24.0


def poke_forces(X: np.ndarray, mass: np.ndarray, frames: int) -> np.ndarray:
    """(frames+1, n, 3): a third of the body weight pushing the free end sideways, then released."""
    tip = X[:, 0] >= X[:, 0].max() - 0.05 * (X[:, 0].max() - X[:, 0].min())
    F = np.zeros((frames + 1,) + X.shape)
    w = mass[tip] / mass[tip].sum()
    push = 0.3 * mass.sum() * 9.81
    for f in range(1, frames + 1):
        on = 1.0 if f <= frames // 2 else 0.0
        F[f, tip, 1] = on * push * w
    return F


def run(n_tets: int, modes: int, max_cubature: int, frames: int) -> dict:
    from neural_rom.core.cubature import optimized_cubature
    from neural_rom.core.fem import Material, TetFEM, mass_matrix
    from neural_rom.core.methods.linear import ReducedSimulation
    from neural_rom.core.sim import FrameInputs, SimSettings, Simulation
    from neural_rom.core.subspace import modal_basis, modal_derivatives

    X, T = common.bar_for_tets(n_tets)
    pins = common.pinned_end(X)
    mat = Material(YOUNG, POISSON, DENSITY)
    s = SimSettings(dt=DT, gravity=(0.0, 0.0, -9.81))
    mass = mass_matrix(X, T, DENSITY)
    forces = poke_forces(X, mass, frames)

    t0 = time.perf_counter()
    fem = TetFEM(X, T, mat)
    base = modal_basis(fem, mass, pins, k=min(8, modes))
    sub = modal_derivatives(fem, base, mass, count=max(modes - base.k, 0))
    t_basis = time.perf_counter() - t0
    full = Simulation(X, T, mat, s, pinned=pins, fem=fem)
    full_t, full_it, frames_x = [], [], []
    for f in range(1, frames + 1):
        r = full.step(FrameInputs(forces=forces[f]))
        full_t.append(r.wall_time)
        full_it.append(r.newton_iters)
        frames_x.append(full.x.copy())
    # cubature fitted on the full-space frames projected into the basis, as training does on bakes
    poses = sub.project(np.asarray(frames_x))
    t0 = time.perf_counter()
    cub = optimized_cubature(fem, sub.U, poses, target=0.05, max_elements=max_cubature)
    t_cub = time.perf_counter() - t0

    red = ReducedSimulation(X, T, mat, sub.U, s, pinned=pins, cubature=(cub.elements, cub.weights))
    red_it, err = [], []
    for f in range(1, frames + 1):
        r = red.step(FrameInputs(forces=forces[f]))
        red_it.append(r.newton_iters)
        err.append(float(np.linalg.norm(red.positions() - frames_x[f - 1], axis=1).max()))
    # the reduced step is microseconds-to-milliseconds: time more of them for a stable mean
    t0 = time.perf_counter()
    reps = 50
    for _ in range(reps):
        red.step(FrameInputs(forces=forces[1]))
    red_mean = (time.perf_counter() - t0) / reps
    decode = common_time(lambda: red.positions(), 50)
    # the same steps with the clamp swinging (turning about z, sliding in y): the pins' moving
    # frame (core.frame) adds its inertial terms to every step
    moving = ReducedSimulation(
        X, T, mat, sub.U, s, pinned=pins, cubature=(cub.elements, cub.weights)
    )
    centre = X[pins].mean(0)
    paths = []
    for f in range(1, reps + 1):
        a = 0.5 * np.sin(f / 8)
        R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
        paths.append((X[pins] - centre) @ R.T + centre + [0.0, 0.1 * np.sin(f / 6), 0.0])
    moving_it = []
    t0 = time.perf_counter()
    for P in paths:
        moving_it.append(moving.step(FrameInputs(forces=forces[1], pin_targets=P)).newton_iters)
    moving_mean = (time.perf_counter() - t0) / reps
    return {
        "tets": len(T),
        "vertices": len(X),
        "modes": sub.k,
        "cubature": len(cub),
        "cubature_train": cub.info.get("train_rel_error"),
        "basis_s": t_basis,
        "cubature_s": t_cub,
        "full_step_s": float(np.mean(full_t)),
        "full_iters": float(np.mean(full_it)),
        "reduced_step_s": red_mean,
        "reduced_iters": float(np.mean(red_it)),
        "moving_pins_step_s": moving_mean,
        "moving_pins_iters": float(np.mean(moving_it)),
        "decode_s": decode,
        "max_error_m": max(err),
    }


def common_time(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20k,80k")
    ap.add_argument("--modes", type=int, default=30)
    ap.add_argument("--cubature", type=int, default=300)
    ap.add_argument("--frames", type=int, default=6)
    args = ap.parse_args(argv)
    common.pin_this_process()
    print(
        f"Bar 4:1:1 clamped, poked at its free end; stable Neo-Hookean E={YOUNG:g} Pa nu={POISSON}; "
        f"h=1/24 s; {args.modes} modes, <= {args.cubature} cubature elements; one core.\n"
    )
    print(
        f"{'tets':>7}{'verts':>7}{'k':>4}{'cub':>5}{'full s/step':>12}{'it':>5}{'reduced ms':>11}{'it':>5}"
        f"{'decode ms':>10}{'full/red':>9}{'max err mm':>11}{'pins ms':>9}{'it':>5}"
    )
    for n in common.parse_sizes(args.sizes):
        r = run(n, args.modes, args.cubature, args.frames)
        print(
            f"{r['tets']:>7}{r['vertices']:>7}{r['modes']:>4}{r['cubature']:>5}{r['full_step_s']:>12.3f}"
            f"{r['full_iters']:>5.1f}{1000 * r['reduced_step_s']:>11.2f}{r['reduced_iters']:>5.1f}"
            f"{1000 * r['decode_s']:>10.2f}{r['full_step_s'] / r['reduced_step_s']:>9.0f}x"
            f"{1000 * r['max_error_m']:>11.1f}{1000 * r['moving_pins_step_s']:>9.2f}"
            f"{r['moving_pins_iters']:>5.1f}",
            flush=True,
        )
        print(
            f"        setup: modal basis {r['basis_s']:.1f} s, cubature {r['cubature_s']:.1f} s "
            f"(force error {r['cubature_train']:.3f} on the {args.frames} full-space frames it was fitted to)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
