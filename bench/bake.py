"""Whole bakes: frames per second of the full-space solver before and after issue 10.

Problem: a 0.5 m x 0.25 m x 0.25 m rubber block (``core.grid.grid_for_tet_count``, 2:1:1;
Y = 1 MPa, nu = 0.45, rho = 1100 kg/m^3) dropped from 0.15 m onto a ground plane, and poked
four times (sin^2 pulses of one body weight, 337 N, on random surface regions, 0.5 s each,
spread over the bake): free
flight, impact, bouncing contact and pokes, baked through :func:`core.bake.bake` (cache
writes included), h = 1/24 s, one substep, Newton tolerance 1e-6 of the diagonal (the
default).

Solvers (:class:`core.sim.SimSettings`):

* ``before``: :meth:`SimSettings.legacy` - the solver before issue 10 (inertial predictor,
  PSD-projected Hessians, an AMG hierarchy or SuperLU factorization per Newton iteration,
  CG to 1e-4, Newton stopped by its step alone, whole-frame retries).
* ``after``: the defaults (extrapolated predictor, exact Hessians while definite, the
  frame's preconditioner reused, Eisenstat-Walker CG tolerances, the force test, adaptive
  substeps).
* ``reference``: the defaults with Newton to 1e-10 of the diagonal and CG to 1e-10 (the
  tight-tolerance trajectory both are measured against; with exact Hessians it converges
  quadratically, so it costs little more than ``after``).

Each bake runs in a fresh process: ``1 core`` pins it to one CPU with one BLAS/OpenMP
thread; ``all cores`` leaves threads and affinity alone; ``variants`` runs the "after"
bake once per core at the same time, one thread each, as a bake job runs its variants
(:func:`worker._bake_in_processes`), and counts their frames over the wall time of all:
the throughput a user gets from a bake of several variants, compared with one variant at a
time on one core before. "max dx" is the largest distance
of any vertex at any frame from the reference bake, over the rest bounding-box diagonal.

Usage::

    python bench/bake.py [--sizes 5k,20k,80k] [--frames 100] [--frames-80k 24]
                         [--cores 1,all,variants] [--json F]

``--frames-80k`` caps the frames of the 80K bake (the "before" solver takes about 6 s a
frame there); every other size bakes ``--frames``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

SOLVERS = ("before", "after", "reference")
REFERENCE_TOL = 1e-10


def scene(n_tets: int, frames: int):
    """The block's tet mesh (X, T) and the bake spec of the benchmark."""
    from neural_rom.core import bake
    from neural_rom.core.geometry import grid
    from neural_rom.core.physics import fem

    X, T = grid.grid_for_tet_count(n_tets, aspect=(2.0, 1.0, 1.0), length=0.5)
    material = fem.Material.preset("rubber")
    weight = float(material.density) * 0.5 * 0.25 * 0.25 * 9.81
    drop = {"height": 0.15, "ground": True, "jitter": 0.0}
    pokes = {"force": weight, "count": 4, "duration": 0.5}
    scenario = {
        "kind": "composite",
        "parts": [_part("gravity_drop", drop), _part("random_pokes", pokes)],
    }
    spec = bake.BakeSpec(
        material=material.to_dict(),
        scenario=scenario,
        frames=frames,
        seed=3,
    )
    return X, T, spec


def _part(kind: str, values: dict) -> dict:
    """A scenario part with ``values`` set where the kind has such a parameter (the scenario
    parameters evolve; the benchmark pins the ones that decide its physics)."""
    from neural_rom.core import bake

    part = bake.default_scenario(kind)
    part.update({k: v for k, v in values.items() if k in part})
    return part


def settings_of(solver: str) -> dict:
    """The SimSettings fields a solver changes from a bake's own."""
    from neural_rom.core.physics.sim import SimSettings

    if solver == "before":
        legacy, default = SimSettings.legacy(), SimSettings()
        return {
            f.name: getattr(legacy, f.name)
            for f in dataclasses.fields(SimSettings)
            if getattr(legacy, f.name) != getattr(default, f.name)
        }
    if solver == "reference":
        return {"newton_tol": REFERENCE_TOL, "linear_rtol": REFERENCE_TOL}
    return {}


def worker(solver: str, n_tets: int, frames: int, out: str) -> dict:
    """Bake one case in this process; positions go to ``out`` (.npy), timings are returned."""
    from neural_rom.core import bake as bake_mod
    from neural_rom.core.bake import BakeSpec
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.geometry.grid import grid_tetmesh  # noqa: F401  (import cost outside timing)
    from neural_rom.core.physics.sim import Simulation

    X, T, spec = scene(n_tets, frames)
    overrides = settings_of(solver)

    class Spec(BakeSpec):
        def sim_settings(self):
            return dataclasses.replace(super().sim_settings(), **overrides)

    totals: dict = {"frames": 0, "newton": 0, "cg": 0, "setups": 0, "substeps": 0}
    timings: dict = {}

    class Measured(Simulation):
        def step(self, inputs=None):
            rep = super().step(inputs)
            totals["frames"] += 1
            totals["newton"] += rep.newton_iters
            totals["cg"] += rep.cg_iterations
            totals["setups"] += rep.setups
            totals["substeps"] += rep.substeps
            totals["residual"] = max(totals.get("residual", 0.0), rep.force_residual)
            for k, v in rep.timings.items():
                timings[k] = timings.get(k, 0.0) + v
            return rep

    bake_mod.Simulation = Measured
    s = Spec(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(BakeSpec)})
    mesh = type("Mesh", (), {"X": X, "T": T})
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        path = bake_mod.bake(mesh, s, Path(tmp) / "b.nrbake")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        np.save(out, np.asarray(BakeCache.open(path).channel("positions")))
    return {"tets": len(T), "wall": wall, "cpu": cpu, **totals, "timings": timings}


def run(solver: str, n: int, frames: int, cores: str, out: str) -> dict:
    """One case in a fresh process; ``cores`` "1" pins it to one CPU and one thread."""
    env = dict(os.environ)
    if cores == "1":
        for var in common.THREAD_VARS:
            env[var] = "1"
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", solver, str(n), str(frames), cores, out],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def run_variants(solver: str, n: int, frames: int, out: str) -> dict:
    """As a bake job runs its variants: one process per core at once, one BLAS thread each
    (:func:`worker._bake_in_processes`); the bakes' frames over the wall time of them all."""
    env = dict(os.environ)
    for var in common.THREAD_VARS:
        env[var] = "1"
    p = os.cpu_count() or 1
    outs = [out] + [f"{out[:-4]}_{i}.npy" for i in range(1, p)]
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", solver, str(n), str(frames), "variants", o],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for o in outs
    ]
    done = [pr.communicate() for pr in procs]
    wall = time.perf_counter() - t0
    rs = []
    for pr, (so, se) in zip(procs, done):
        lines = [ln for ln in so.splitlines() if ln.startswith("{")]
        if pr.returncode != 0 or not lines:
            tail = (se or so).strip().splitlines()[-8:]
            return {"error": f"exit {pr.returncode}: " + " | ".join(tail)}
        rs.append(json.loads(lines[-1]))
    r = dict(rs[0])
    for key in ("frames", "newton", "cg", "setups", "substeps", "cpu"):
        r[key] = sum(x[key] for x in rs)
    r["timings"] = {k: sum(x["timings"].get(k, 0.0) for x in rs) / p for k in rs[0]["timings"]}
    r.update(wall=wall, processes=p)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5k,20k,80k", help="tet counts, e.g. 5k,20k,80k")
    ap.add_argument("--frames", type=int, default=100, help="frames per bake (default 100)")
    ap.add_argument(
        "--frames-80k", type=int, default=24, help="frames of bakes above 50K tets (default 24)"
    )
    ap.add_argument(
        "--cores",
        default="1,all,variants",
        help="'1' (one core, one thread), 'all' (threads and affinity left alone), 'variants' "
        "(the 'after' solver baking one variant per core at once, as a bake job does); "
        "comma-separated, default all three",
    )
    ap.add_argument("--json", help="also write the raw results to this JSON file")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        solver, n, frames, cores, out = args.worker
        if cores == "1":
            common.pin_this_process()
        print(json.dumps(worker(solver, int(n), int(frames), out)))
        return 0
    cores_list = [c.strip() for c in args.cores.split(",") if c.strip()]
    t_start = time.perf_counter()
    print(
        f"Rubber block 2:1:1, 0.5 m, dropped 0.15 m onto the ground and poked 4 times; "
        f"h = 1/24 s; {os.cpu_count()} cores here. Load average at start: "
        f"{os.getloadavg()[0]:.2f}.\n"
    )
    hdr = (
        f"{'tets':>6} {'frames':>6} {'solver':<9} {'cores':>5} {'frames/s':>9} {'s/frame':>8}"
        f" {'cpu s/fr':>8}"
        f" {'Newton/fr':>9} {'CG/fr':>6} {'setups/fr':>9} {'deriv':>6} {'setup':>6} {'cg':>6}"
        f" {'ls':>5} {'max dx':>8} {'speed-up':>8}"
    )
    print(
        hdr + "\n(cpu: process CPU time, all threads; deriv, setup, cg, ls: wall s/frame;"
        " max dx: vs reference, / diagonal)"
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in common.parse_sizes(args.sizes):
            frames = args.frames if n <= 50_000 else min(args.frames, args.frames_80k)
            cases = [("reference", "all")] + [
                (solver, c)
                for c in cores_list
                for solver in (("after",) if c == "variants" else ("before", "after"))
            ]
            traj, rows, fps = {}, [], {}
            for solver, cores in cases:
                out = os.path.join(tmp, f"{solver}_{cores}_{n}.npy")
                if cores == "variants":
                    r = run_variants(solver, n, frames, out)
                else:
                    r = run(solver, n, frames, cores, out)
                r.update(solver=solver, cores=cores, requested=n, frames_planned=frames)
                results.append(r)
                if "error" in r:
                    print(f"{n:>6} {frames:>6} {solver:<9} {cores:>5} FAILED: {r['error'][:300]}")
                    continue
                traj[solver, cores] = np.load(out)
                fps[solver, cores] = r["frames"] / r["wall"]
                rows.append(r)
            ref = traj.get(("reference", "all"))
            for r in rows:
                key = (r["solver"], r["cores"])
                x = traj[key]
                dx = np.nan
                if ref is not None:
                    X0 = ref[0]
                    diag = float(np.linalg.norm(X0.max(0) - X0.min(0)))
                    dx = float(np.linalg.norm(x - ref, axis=2).max() / diag)
                r["max_dx"] = dx
                f = max(r["frames"], 1)
                t = r["timings"]
                # parallel variants are compared with the solver before on one core
                before = fps.get(("before", "1" if r["cores"] == "variants" else r["cores"]))
                up = f"{fps[key] / before:7.2f}x" if r["solver"] == "after" and before else ""
                r["speedup"] = fps[key] / before if r["solver"] == "after" and before else None
                print(
                    f"{r['tets']:>6} {r['frames']:>6} {r['solver']:<9} {r['cores']:>5}"
                    f" {fps[key]:9.2f} {r['wall'] / f:8.3f} {r['cpu'] / f:8.3f}"
                    f" {r['newton'] / f:9.2f}"
                    f" {r['cg'] / f:6.1f} {r['setups'] / f:9.2f}"
                    f" {t.get('derivatives', 0) / f:6.3f} {t.get('setup', 0) / f:6.3f}"
                    f" {t.get('cg', 0) / f:6.3f} {t.get('line_search', 0) / f:5.3f}"
                    f" {dx:8.1e} {up:>8}",
                    flush=True,
                )
    print(
        f"\n(total {time.perf_counter() - t_start:.0f} s; load average now "
        f"{os.getloadavg()[0]:.2f})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
