"""Compare Methods' lanes: two trainings at once with one thread each, against the same two
one after another with every thread (issue 25).

    python bench/compare_lanes.py [--methods autoencoder,shen] [--epochs 150]
                                  [--bakes 'DIR/*.nrbake'] [--out DIR]

Bakes a pinned rubber bar poked at random (4 variants of 48 frames, about 400 nodes) unless
``--bakes`` names bakes, then trains each method with a fixed number of epochs (no latent
search, no time budget cut) as the comparison does: a train job in a child worker. First
one after another with the threads the machine gives (torch's and the BLAS's default), then
all at once, each with :data:`core.jobs.ONE_THREAD_ENV`. Prints each training's wall time
and the two totals; their ratio (one run, so the machine's load cancels) is what
``compare-methods --processes`` rests on. Say the load (``uptime``) with the numbers.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def bakes(folder: Path) -> list[str]:
    import numpy as np
    from neural_rom.core import bake
    from neural_rom.core.geometry import grid
    from neural_rom.core.geometry.tetmesh import TetMesh
    from neural_rom.core.physics import fem

    X, T = grid.grid_tetmesh((0.8, 0.16, 0.16), (10, 2, 2))
    pinned = np.where(X[:, 0] < 1e-9)[0]
    spec = bake.BakeSpec(
        material=fem.Material.preset("rubber").to_dict(),
        scenario=bake.default_scenario("random_pokes"),
        frames=48,
        pinned=pinned.tolist(),
        seed=4,
        variants=4,
    )
    return [str(p) for p in bake.bake_variants(TetMesh(X, T), spec, folder, "bar")]


def train_spec(method: str, paths: list[str], out: Path, epochs: int) -> dict:
    from neural_rom.core import registry
    from neural_rom.core.data.cache import BakeCache

    names = {s.name for s in registry.get(method).settings}
    settings = {"epochs": epochs, "time_budget": 1e6}
    if "latent_dim" in names and method != "licrom":
        settings["latent_dim"] = 3  # no latent-size search: the same epochs every run
    if "rollout" in names:
        settings["rollout"] = False
    return {
        "kind": "train",
        "method": method,
        "bakes": paths,
        "out": str(out / f"{method}.nrmodel"),
        "mesh_hash": BakeCache.open(paths[0]).mesh_hash,
        "settings": settings,
        "device": "cpu",
        "needs": ["numpy", "scipy", "torch"],
    }


def run(specs: list[dict], log_dir: Path, at_once: bool) -> dict:
    from neural_rom.core import jobs

    env = jobs.ONE_THREAD_ENV if at_once else None
    walls, results, started = {}, {}, time.perf_counter()
    if at_once:
        running = {s["method"]: jobs.Job.start(s, sys.executable, log_dir, env=env) for s in specs}
        t0 = {m: time.perf_counter() for m in running}
        while running:
            for m, job in list(running.items()):
                job.poll()
                if job.finished:
                    assert job.state == jobs.DONE, job.message
                    walls[m] = time.perf_counter() - t0[m]
                    results[m] = job.result
                    del running[m]
            time.sleep(0.05)
    else:
        for s in specs:
            t0 = time.perf_counter()
            job = jobs.Job.start(s, sys.executable, log_dir, env=env)
            assert job.wait() == jobs.DONE, job.message
            walls[s["method"]] = time.perf_counter() - t0
            results[s["method"]] = job.result
    return {"walls": walls, "results": results, "total": time.perf_counter() - started}


def _epochs(result: dict) -> str:
    done = [result.get(k) for k in ("epochs_done", "epochs_trained", "epochs") if result.get(k)]
    return f"{done[0]} epochs" if done else "epochs ?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="autoencoder,shen")
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--bakes", help="a glob of .nrbake files of one mesh (default: baked here)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs (the ratio of each)")
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="compare_lanes_"))
    out.mkdir(parents=True, exist_ok=True)
    paths = sorted(glob.glob(args.bakes)) if args.bakes else bakes(out / "bakes")
    methods = [m for m in args.methods.split(",") if m]
    print(f"load {os.getloadavg()[0]:.1f}, {len(paths)} bakes, {args.epochs} epochs, {methods}")
    ratios = []
    for rep in range(args.repeat):
        totals = {}
        order = (False, True) if rep % 2 == 0 else (True, False)  # the load drifts: alternate
        for at_once in order:
            label = "at once, 1 thread each" if at_once else "one after another, default threads"
            folder = out / f"{'at_once' if at_once else 'sequential'}_{rep}"
            folder.mkdir(exist_ok=True)
            specs = [train_spec(m, paths, folder, args.epochs) for m in methods]
            r = run(specs, folder / "logs", at_once)
            each = ", ".join(
                f"{m} {s:.1f} s ({_epochs(r['results'][m])}, "
                f"{r['results'][m].get('threads')} threads)"
                for m, s in r["walls"].items()
            )
            print(f"{label}: {r['total']:.1f} s ({each}), load {os.getloadavg()[0]:.1f}")
            totals[at_once] = r["total"]
        ratios.append(totals[True] / totals[False])
        print(f"at once / one after another: {ratios[-1]:.2f}")
    print(f"ratios {', '.join(f'{x:.2f}' for x in ratios)}; median {float(np.median(ratios)):.2f}")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
