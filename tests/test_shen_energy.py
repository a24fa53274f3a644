"""Shen 2021 runtime on trained networks: undamped free vibration never gains energy,
whatever decoder training produced and whatever the CPU's rounding.

Which root of eq. (10) Newton reaches, and whether a step crawls, depends on the last bits
of the decoder (the training's seed, the BLAS thread count of the cubature fit and of
torch, the CPU's vectorized ``sin``: numpy 1 and 2 differ there, and so do CPUs with and
without AVX-512). So the property is asserted on three training seeds, each trained and
stepped with one and with two BLAS threads (a child process per thread count, the
thread count set by environment variables before numpy starts), and on each model with its
weights perturbed by 1e-9 (another CPU's rounding). The step's guard
(``core/methods/shen.py``, "Energy") rejects a root that gains energy (halving the step,
else the variational step, whose velocity is scaled to the step's start energy if need be).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from .test_shen_whip import child_json

SEEDS = (0, 1, 2)
THREADS = (1, 2)


def bake(out: Path) -> list[Path]:
    """A 0.4 m bar clamped at one end, poked at random (3 bakes of 24 frames)."""
    from types import SimpleNamespace

    from neural_rom.core import bake as bk
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.physics.fem import Material

    X, T = grid_tetmesh((0.4, 0.08, 0.08), (8, 2, 2))
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=1e5, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario={"kind": "random_pokes", "count": 3, "strength": 2.0, "duration": 0.3},
        frames=24,
        pinned=np.flatnonzero(X[:, 0] < 1e-9).tolist(),
        damping=(0.5, 0.0),
        seed=7,
        variants=3,
    )
    return bk.bake_variants(SimpleNamespace(X=X, T=T), spec, out, "pokes")


def free_vibration(sim, frames: int = 120) -> dict:
    """Poke the tip hard for 6 frames, then ``frames`` free frames: energies and counts."""
    from neural_rom.core.engine.protocol import FrameInputs

    rng = np.random.default_rng(3)
    tip = np.flatnonzero(sim.X[:, 0] > sim.X[:, 0].max() - 1e-9)
    for _ in range(6):
        f = np.zeros_like(sim.X)
        f[tip] = rng.normal(scale=8.0, size=(len(tip), 3))
        sim.step(FrameInputs(forces=f))
    e, iters = [sim.energy()], []
    for _ in range(frames):
        rep = sim.step(FrameInputs(forces=np.zeros_like(sim.X)))
        e.append(sim.energy())
        iters.append(rep.newton_iters)
    e = np.array(e)
    return {
        "e0": float(e[0]),
        "e_end": float(e[-1]),
        "rise": float(np.max(np.diff(e))),
        "moved": float(np.abs(sim.positions() - sim.X).max()),
        "iters": float(np.mean(iters)),
        "rejections": sim.energy_rejections,
        "clamps": sim.energy_clamps,
        "fallbacks": sim.fallbacks,
        "splits": sim.splits,
    }


def measure(out: Path, bakes: list[Path]) -> dict:
    """In the child (its BLAS threads set by the parent): train each seed's model and run
    free vibration on it and on its weights x (1 + 1e-9 noise)."""
    import dataclasses

    import torch
    from neural_rom.core import registry
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.methods import shen
    from neural_rom.core.physics.sim import SimSettings

    torch.set_num_threads(int(os.environ["OPENBLAS_NUM_THREADS"]))
    free = SimSettings(dt=1 / 60, gravity=(0.0, 0.0, 0.0), damping_alpha=0.0, damping_beta=0.0)
    results = {}
    for seed in SEEDS:
        path = out / f"shen_{seed}.nrmodel"
        settings = registry.get("shen").values(dict(
            k=8, n_p=3, latent_dim=2, hidden=[16] * 4, epochs=150, patience=1000,
            max_cubature=30, cubature_poses=30, rollout=False, seed=seed, omega=4.0,
        ))  # fmt: skip
        registry.get("shen").trainer_function()(bakes, path, settings, device="cpu")
        model = load_model(path)
        rng = np.random.default_rng(seed)
        noisy = {
            k: v * (1.0 + 1e-9 * rng.standard_normal(v.shape)) if k.startswith("dec_") else v
            for k, v in model.arrays.items()
        }
        for tag, m in (
            ("as trained", model),
            ("x (1 + 1e-9)", dataclasses.replace(model, arrays=noisy)),
        ):
            results[f"seed {seed}, {tag}"] = free_vibration(shen.load(m, settings=free))
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("shen_energy")
    bakes = bake(out / "bakes")
    found = {}
    for threads in THREADS:
        d = out / f"threads_{threads}"
        d.mkdir()
        for k, v in child_json("tests.test_shen_energy", [d, *bakes], threads).items():
            found[f"{threads} thread(s), {k}"] = v
    return found


def test_undamped_free_vibration_never_gains_energy_on_trained_networks(runs):
    """Every model (3 seeds x {1, 2} threads, as trained and perturbed): no step raises
    the energy by more than 1e-9 of the start's (rounding), and the motion is real."""
    for name, r in runs.items():
        print(
            f"{name}: energy {r['e0']:.4f} -> {r['e_end']:.4f} J, largest rise "
            f"{r['rise'] / r['e0']:.1e} of the start; {1000 * r['moved']:.1f} mm from rest; "
            f"Newton {r['iters']:.2f} a step; rejected roots {r['rejections']}, velocity "
            f"scaled {r['clamps']}, fallbacks {r['fallbacks']}, halved {r['splits']}"
        )
    for name, r in runs.items():
        assert r["e0"] > 1e-3, f"{name}: the pokes moved nothing: the test tests nothing"
        assert r["rise"] <= 1e-9 * r["e0"], f"{name} gained energy"
        assert r["e_end"] < r["e0"]


if __name__ == "__main__":  # the fixture's child process
    print(json.dumps(measure(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])))
