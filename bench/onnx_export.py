"""An exported model in ONNX Runtime against the numpy runtime: the round trip and the step.

    python bench/onnx_export.py MODEL.nrmodel --bake BAKE.nrbake [--frames 500] [--reps 300]

For a Subspace Neural Physics model: the numpy runtime steps ``--frames`` frames from the
bake's start with the bake's inputs played forward and back (its colliders and pins), recording the features each
step computed; ONNX Runtime then rolls the exported step out closed-loop (its own state fed
back) over the same features, in float32 and float64, and the largest differences of the
state and the positions are printed. Then the time of one step (batch 1) and of 100
instances at once: the numpy runtime's folded step (what ``SNPSimulation.step`` runs after
the features) against ``InferenceSession.run`` of the exported graph, one thread each, min of
``--reps`` calls, A/B in one process. For the other methods (a decoder or a basis): random
coordinates decoded by both, and the time of one decode.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# one BLAS thread, set before numpy loads (onnxruntime gets one thread per session below)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import pin_this_process  # noqa: E402


def best(fn, reps: int) -> float:
    fn()
    out = np.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def session(path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def snp_round_trip(sim, bake: Path, frames: int):
    """(start, features (F, e), z (F, u), local positions (F, n, 3)) of the runtime's own
    rollout of the bake's inputs played forward and back."""
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.engine.protocol import FrameInputs

    driver = replay_scenario(BakeCache.open(bake))[1]
    F = len(driver.forces)
    cycle = list(range(1, F)) + list(range(F - 2, 0, -1))
    feats = []
    folded = sim._folded  # the step after the features: record what it is given

    def recording(z1, z2, f):
        feats.append(np.array(f[0]))
        return folded(z1, z2, f)

    sim.start_from(driver.x0, driver.v0)  # the bake's own start (a drop starts in the air)
    sim._folded = recording
    start = (sim.z1.copy(), sim.z2.copy())
    Z, Y = [], []
    for t in range(frames):
        f = cycle[t % len(cycle)]
        inp = driver.inputs(f)
        sim.step(FrameInputs(colliders=inp.colliders, pin_targets=inp.pin_targets))
        Z.append(sim.z1.copy())
        Y.append(sim.decode(sim.z1))
    sim._folded = folded
    return start, np.array(feats), np.array(Z), np.array(Y)


def timings(sim, s, z1, z2, f, B: int, reps: int) -> None:
    """Print the step of B instances: numpy's folded step against onnxruntime's graph."""
    z1, z2, f = (np.repeat(a[None], B, 0) for a in (z1, z2, f))
    feeds = {"z_prev": z1, "z_prev2": z2, "features": f}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    U_T, mean = sim.p.U.T, sim.p.mean.ravel()
    t_np = best(lambda: sim._folded(z1, z2, f), reps)
    t_np_y = best(lambda: sim._folded(z1, z2, f) @ U_T + mean, reps)
    t_ort = best(lambda: s.run(["z"], feeds), reps)
    t_ort_y = best(lambda: s.run(["z", "positions"], feeds), reps)
    print(
        f"  B = {B}: step numpy {t_np * 1e6:.1f} us, onnxruntime {t_ort * 1e6:.1f} us "
        f"({t_ort / t_np:.2f}x); with the positions numpy {t_np_y * 1e6:.1f} us, "
        f"onnxruntime {t_ort_y * 1e6:.1f} us ({t_ort_y / t_np_y:.2f}x)"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--bake", help="a bake of the model's object (snp: its inputs are replayed)")
    ap.add_argument("--frames", type=int, default=500)
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args(argv)
    pin_this_process()
    from neural_rom.core import registry
    from neural_rom.core.data.onnx import export_onnx

    sim, model = registry.load_simulator(args.model)
    tmp = Path(tempfile.mkdtemp())
    paths = {p: tmp / f"model_{p}.onnx" for p in ("float32", "float64")}
    infos = {p: export_onnx(args.model, path, precision=p) for p, path in paths.items()}
    print(
        f"{Path(args.model).name}: {model.method}, inputs "
        + ", ".join(f"{v['name']} {v['shape']}" for v in infos["float32"]["inputs"])
    )
    if model.method == "snp":
        if not args.bake:
            ap.error("an snp model needs --bake (its colliders and pins are replayed)")
        start, feats, Z, Y = snp_round_trip(sim, Path(args.bake), args.frames)
        print(
            f"runtime rollout: {len(Z)} frames, largest displacement from rest "
            f"{np.abs(Y - sim.p.X).max() * 1e3:.1f} mm"
        )
        for p, dtype in (("float32", np.float32), ("float64", np.float64)):
            s = session(paths[p])
            z1, z2 = (a[None].astype(dtype) for a in start)
            dz = dy = 0.0
            for f, zr, yr in zip(feats, Z, Y):
                z, y = s.run(
                    ["z", "positions"],
                    {"z_prev": z1, "z_prev2": z2, "features": f[None].astype(dtype)},
                )
                z2, z1 = z1, z
                dz, dy = max(dz, np.abs(z[0] - zr).max()), max(dy, np.abs(y[0] - yr).max())
            print(
                f"  onnxruntime {p}: max |dz| {dz:.2e} ({dz / np.abs(Z).max():.1e} of max |z|), "
                f"max |dy| {dy:.2e} m over {len(Z)} frames"
            )
        s = session(paths["float32"])
        for B in (1, 100):
            timings(sim, s, Z[-1], Z[-2], feats[-1], B, args.reps)
        return 0
    latent = infos["float64"]["inputs"][0]
    width = latent["shape"][1]
    rng = np.random.default_rng(0)
    R = rng.uniform(-1, 1, (200, width)) * 0.05
    from neural_rom.core.data.modelfile import load_model

    a = load_model(args.model).arrays
    X, U = np.asarray(a["X"]), np.asarray(a["U"])
    if model.method == "linear":
        ref = X + (R @ U.T).reshape(len(R), -1, 3)
        for p, dtype in (("float32", np.float32), ("float64", np.float64)):
            (got,) = session(paths[p]).run(["positions"], {latent["name"]: R.astype(dtype)})
            print(f"  onnxruntime {p}: max |dy| {np.abs(got - ref).max():.2e} m over 200 q")
        s = session(paths["float32"])
        q = R[:1]
        t_np = best(lambda: X + (U @ q[0]).reshape(-1, 3), args.reps)
        t_ort = best(
            lambda: s.run(["positions"], {latent["name"]: q.astype(np.float32)}), args.reps
        )
        print(
            f"  decode numpy {t_np * 1e6:.1f} us, onnxruntime {t_ort * 1e6:.1f} us "
            f"({t_ort / t_np:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
