"""Reduced (linear subspace + cubature) step against the full-space step, same mesh and scenario.

Problem: the 4:1:1 bar of ``bench/fullspace.py`` (clamped at x = 0, stable Neo-Hookean,
E = 1 MPa, nu = 0.45, rho = 1000 kg/m^3, h = 1/24 s) hit by a scripted poke at its free end.

* ``full``: :class:`neural_rom.core.physics.sim.Simulation` (Newton, AMG-CG solves).
* ``reduced``: :class:`neural_rom.core.methods.linear.LinearSimulation` with a ``--modes``-vector basis
  of the 8 lowest linear vibration modes plus their modal derivatives (Barbic & James 2005,
  :func:`neural_rom.core.reduced.subspace.modal_derivatives`; linear modes alone lock under
  the large sag of this soft bar) and optimized cubature (An et al. 2008, at most ``--cubature``
  elements, relative error target 0.05) fitted on the full-space frames projected into the
  basis, as training fits it on bakes (so the error column is in-sample). The basis is
  data-free so the benchmark needs no long bake; a POD basis of the same size costs the same
  per step.

Both run the same frames with the same forces in one process pinned to one core; the table
prints time per step, Newton iterations, and full / reduced; ``pins ms`` is the reduced step
with the clamp swinging and sliding (animated pins: the moving frame of :mod:`core.frame`).

Usage::

    python bench/linear.py [--sizes 20k,80k] [--modes 30] [--cubature 300] [--frames 6]
    python bench/linear.py --contact [MODEL,MODEL...] [--bake BAKE] [--runs 7]

``--contact``: the cost of collider contact in the reduced step (:func:`contact`). Each model
replays ``BAKE`` (a drop onto the floor) ``--runs`` times with its contact as it is
(``SubspaceModel._contact``: the touching points' rank-one rows) and with the
straightforward formula it replaced (:func:`straightforward_contact`: every point's gradient
and 3x3 block carried through ``U_contact``), alternating, and prints the median ms per step
and the mean ms per step of each (the median of the runs; a drop's steps are bimodal, the
falling ones cheap, so the mean is the frame budget's number), the time in contact per step
and per call, and the largest difference of the replayed positions. The README demo's models and bakes
are the case in point (``bash scripts/demo.sh``: the 1 m ball, 512 embedded contact points, a
floor); without MODEL a small scene is baked and trained on the spot (a soft 20 cm cube
dropped four times, a linear model on three drops, the fourth replayed).
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
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.methods.linear import LinearSimulation
    from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
    from neural_rom.core.physics.sim import SimSettings, Simulation
    from neural_rom.core.reduced.cubature import optimized_cubature
    from neural_rom.core.reduced.subspace import modal_basis, modal_derivatives

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

    red = LinearSimulation(X, T, mat, sub.U, s, pinned=pins, cubature=(cub.elements, cub.weights))
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
    moving = LinearSimulation(
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


def straightforward_contact(sim, q: np.ndarray, colliders, hessian: bool = True):
    """The reduced contact as it was written before it cost only its touching points (the
    baseline of :func:`contact`): every point's position, signed distance, normal, gradient
    and 3x3 Gauss-Newton block, then ``g = U_contact^T g_p`` over all points and
    ``H = U_a^T (H_a U_a)`` over the touching ones."""
    if not colliders:
        return 0.0, None, None
    xs = sim.contact_rest + sim.U_contact @ q
    mass, d_hat = sim.kappa * sim.contact_mass, sim.settings.contact_offset
    g = np.zeros_like(xs)
    Hb = np.zeros((len(xs), 3, 3))
    e = 0.0
    for c in colliders:
        phi, n = c.signed_distance(xs)
        pen = d_hat - phi
        act = pen > 0
        if not act.any():
            continue
        e += float(0.5 * np.sum(mass[act] * pen[act] ** 2))
        g[act] -= (mass[act] * pen[act])[:, None] * n[act]
        Hb[act] += mass[act, None, None] * n[act, :, None] * n[act, None, :]
    k = sim.k
    g_red = sim.U_contact.reshape(-1, k).T @ g.ravel()
    if not hessian:
        return e, g_red, None
    active = np.flatnonzero(np.any(Hb != 0, axis=(1, 2)))
    Ua = sim.U_contact[active]
    return e, g_red, Ua.reshape(-1, k).T @ (Hb[active] @ Ua).reshape(-1, k)


def drop_scene(out) -> tuple[list, str]:
    """A small contact scene baked and trained here: a soft 20 cm cube (3x3x3 cells, E = 3 kPa)
    dropped four times on the ground (the gravity-drop scenario, seed 3), a linear model with
    its default settings on three drops; returns ([model path], the fourth drop's bake)."""
    from types import SimpleNamespace

    from neural_rom.core import bake as bk
    from neural_rom.core import registry
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.physics.fem import Material

    X, T = grid_tetmesh((0.2, 0.2, 0.2), (3, 3, 3))
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=3e3, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario={"kind": "gravity_drop"},
        frames=40,
        seed=3,
        variants=4,
    )
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, out, "drop")
    model = os.path.join(out, "linear.nrmodel")
    registry.get("linear").trainer_function()(paths[:3], model, registry.get("linear").values())
    return [model], str(paths[3])


def contact(model_path: str, bake_path: str, runs: int) -> dict:
    """Replays of ``bake_path`` by the model at ``model_path``, ``runs`` times each with its
    contact and with :func:`straightforward_contact`, alternating (the same load on both):
    median ms per step, ms in contact per step, us per contact call (every call of the
    replay timed again on its own), and the largest position difference between the two."""
    from neural_rom.core import registry
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.engine.replay import replay_bake

    model = load_model(model_path)
    cache = BakeCache.open(bake_path)
    res = {"fast": [], "straightforward": []}
    calls, out = [], {}
    for run in range(runs):
        for name in res:
            sim = registry.get(model.method).load(model)
            fn = sim._contact
            if name == "straightforward":
                fn = lambda q, c, h, sim=sim: straightforward_contact(sim, q, c, h)  # noqa: E731
            spent = [0.0, 0]
            keep = run == 0 and name == "fast"  # every call of one replay, timed again below

            def timed(q, cols, hessian=True, fn=fn, spent=spent, keep=keep):
                if keep:
                    calls.append((q.copy(), cols, hessian))
                t0 = time.perf_counter()
                r = fn(q, cols, hessian)
                spent[0] += time.perf_counter() - t0
                spent[1] += 1
                return r

            sim._contact = timed
            secs = []
            out[name] = replay_bake(sim, cache, replay_scenario(cache)[1], step_seconds=secs)
            res[name].append(
                (float(np.median(secs)), spent[0] / len(secs), spent[1] / len(secs), np.mean(secs))
            )
    sim = registry.get(model.method).load(model)
    fns = {
        "fast": sim._contact,
        "straightforward": lambda q, c, h: straightforward_contact(sim, q, c, h),
    }
    per_call = {}
    for name, fn in fns.items():
        ts = []
        for _ in range(3):
            for q, cols, h in calls:
                t0 = time.perf_counter()
                fn(q, cols, h)
                ts.append(time.perf_counter() - t0)
        per_call[name] = float(np.median(ts))
    touching = sum(1 for q, cols, h in calls if sim._contact(q, cols, False)[0] > 0)
    r = {
        "method": model.method,
        "k": sim.k,
        "points": len(sim.contact),
        "frames": len(out["fast"]) - 1,
        "calls_per_step": float(np.median([x[2] for x in res["fast"]])),
        "touching_share": touching / max(len(calls), 1),
        "max_diff_m": float(np.abs(out["fast"] - out["straightforward"]).max()),
    }
    for name, v in res.items():
        r[f"{name}_step_s"] = float(np.median([x[0] for x in v]))
        r[f"{name}_mean_step_s"] = float(np.median([x[3] for x in v]))
        r[f"{name}_contact_s"] = float(np.median([x[1] for x in v]))
        r[f"{name}_call_s"] = per_call[name]
    return r


def contact_main(models: str, bake: str | None, runs: int) -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nr_contact_") as tmp:
        if models:
            paths = [m for m in models.split(",") if m]
            if not bake:
                raise SystemExit("--contact MODEL needs --bake BAKE (a drop the model replays)")
        else:
            print("no model given: baking and training a small drop scene (a 20 cm cube) ...")
            paths, bake = drop_scene(tmp)
        print(
            f"Contact in the reduced step: replays of {os.path.basename(bake.rstrip('/'))}, "
            f"{runs} runs each way, alternating; one core, one BLAS thread; load average "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
        )
        print(
            f"{'method':>8}{'k':>4}{'points':>7}{'calls':>6}{'touch':>6}"
            f"{'step ms':>9}{'before':>8}{'mean ms':>9}{'before':>8}{'ratio':>6}"
            f"{'contact ms':>11}{'before':>8}"
            f"{'call us':>8}{'before':>8}{'ratio':>6}{'diff m':>9}"
        )
        for p in paths:
            r = contact(p, bake, runs)
            f, b = "fast", "straightforward"
            print(
                f"{r['method']:>8}{r['k']:>4}{r['points']:>7}{r['calls_per_step']:>6.1f}"
                f"{100 * r['touching_share']:>5.0f}%{1e3 * r[f + '_step_s']:>9.2f}"
                f"{1e3 * r[b + '_step_s']:>8.2f}{1e3 * r[f + '_mean_step_s']:>9.2f}"
                f"{1e3 * r[b + '_mean_step_s']:>8.2f}"
                f"{r[b + '_mean_step_s'] / r[f + '_mean_step_s']:>6.2f}"
                f"{1e3 * r[f + '_contact_s']:>11.3f}{1e3 * r[b + '_contact_s']:>8.3f}"
                f"{1e6 * r[f + '_call_s']:>8.1f}{1e6 * r[b + '_call_s']:>8.1f}"
                f"{r[b + '_call_s'] / r[f + '_call_s']:>6.2f}{r['max_diff_m']:>9.1e}",
                flush=True,
            )
    return 0


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
    ap.add_argument(
        "--contact",
        nargs="?",
        const="",
        default=None,
        metavar="MODELS",
        help="time contact in the reduced step instead (comma-separated model files; none: "
        "a small drop scene built here)",
    )
    ap.add_argument("--bake", default=None, help="the bake the --contact models replay")
    ap.add_argument("--runs", type=int, default=7, help="replays each way with --contact")
    args = ap.parse_args(argv)
    common.pin_this_process()
    if args.contact is not None:
        return contact_main(args.contact, args.bake, args.runs)
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
