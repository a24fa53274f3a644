"""Active faces (Srinivasan 2021): fit, accuracy against the baselines the issue names, and
runtime speed, on the procedural demo head (core/face.py), one run pinned to one core.

Steps: build the head (``--size bench``: over 5K tets) and ``--keys`` shape keys (our own
simulation of expressions (smile, frown, pucker, ...) and jaw angles, the last ``--held-out``
held out);
fit it (:func:`training.active.fit`, ``--epochs`` end-to-end epochs); then measure

* training-shape error: end to end, and the warm-start decoder alone (sec. 5.1);
* held-out error after refitting only the latent code (eq. 17, whole skin, full solve,
  Levenberg-Marquardt), for the end-to-end and the warm-start decoders, against surface PCA
  of the training keys with as many dimensions (its best: the orthogonal projection), on all
  held-out keys and on those with a large jaw opening (> 0.15 rad);
* markers (``--markers`` skin vertices, seeded): the full-skin error of the marker fit
  (reduced solve) against the whole-skin fit and against PCA fitted to the same markers
  (ridge least squares);
* the equilibrium residual of every runtime frame (full solve: free-node force over
  ``mu h^2``; reduced: the reduced residual, and the full residual the subspace leaves);
* timings: decoder, full solve, reduced solve, adjoint, slider fps and marker fps (full and
  reduced) over a ``--frames`` animation (codes and jaw blended between keys; markers
  blended between held-out keys), seconds per training epoch; Adam (lr 0.1, the paper's
  runtime) against LM on one marker frame.

Results with the linear decoder (the default since 52f4481), small head (4,092 tets, 642 skin
vertices), 24 training + 6 held-out keys (realistic: 22-40% fibre contraction, jaw 15-25 deg
in 5 of the 6 held-out keys; rest 4.63 mm mean skin motion, up to 25 mm), latent 8, 300
warm-start and 8 end-to-end epochs, ``--frames 24``, load average 8-10 (timings
pessimistic):

* training 226 s in all (19.6 s per end-to-end epoch); training skin error 0.0697 mm;
* held out, code refitted on the whole skin: 0.0897 mm (warm start alone 0.0908; surface
  PCA-8 0.0992): 10% better than PCA; the 5 jaw-open keys 0.0893 vs PCA-8 0.0966 (8%);
  30 markers 0.0951 mm (1.06x the whole-skin fit; PCA-8 on the same markers 0.1022);
  latent 10 (``exp`` run, same keys): 0.0788 vs PCA-10 0.0872, jaw open 0.0778 vs 0.0842.
  The MLP decoder (before) on the same keys: 0.0996 (warm start 0.0986), markers 0.111;
* sliders reduced 34.7 fps (28.8 ms), within 0.039 mm of the full solve (1.6 fps);
* markers reduced: the joint code-and-equilibrium iteration (SQP, default) 19.4 fps (51 ms,
  3.6 iterations, error 0.1187 mm) vs Levenberg-Marquardt 12.2 fps (82 ms, 2.2 iterations,
  0.1198 mm), same run (wall clock at load 8-10); full solve 0.30 fps. Interleaved A/B in
  one process, CPU time per frame (48 frames between held-out keys, 3 rounds, load ~9):
  LM 30.9 ms (32 fps) -> SQP 14.3 ms (70 fps), 2.2x, error 0.1194 vs 0.1192 mm, element
  passes a frame 14.8 -> 5.6 (with Hessians 9.7 -> 4.4, line-search energies 4.1 -> 0.1,
  mixed 1.0 -> 1.1; a pass is 2 ms on the 339 cubature elements);
* contact: the reduced subspace cannot dent a cheek (a 3 cm sphere 2.2 cm into it: skin
  4.3 mm from the full solve's on average, 6.3 mm inside the sphere); such frames are
  finished by the full solve (``contact="full"``, tests/test_active.py).

Before (MLP decoder, 4 end-to-end epochs, load 4-7): held out 0.0996 mm vs PCA-8 0.0992 (a
tie); markers reduced 9.7 -> 17.7 fps (CPU, load ~2) with the Broyden Jacobian reuse and the
GEMM reduced terms.

Bench head with the linear decoder and the SQP markers (2026-11-24, one full run, this shared
2-core machine at load average 10-11, so times are pessimistic): 8,292 tets, 2,562 skin
vertices, 21 cm tall, 40 training + 8 held-out keys (5 of them with the jaw open; rest 3.95
mm mean skin motion), latent 12, 400 warm-start and 8 end-to-end epochs, ``--frames 24``:

* training 648 s in all (the goal: under 30 minutes; 54 s per end-to-end epoch); training
  skin error 0.0466 mm end to end (0.0709 at the first end-to-end epoch);
* held out, code refitted on the whole skin: 0.0448 mm (warm-start decoder 0.0447) vs
  surface PCA-12 0.0772 (0.58x); the 5 jaw-open keys 0.0386 vs 0.0775 (0.50x); 30 markers
  0.0701 mm (1.56x the whole-skin fit; PCA-12 on the same markers 0.0944);
* sliders: reduced 62 fps (16.1 ms) vs full 0.9 fps, within 0.074 mm of the full solve;
* markers: reduced, SQP 32.0 fps (31.2 ms, 4.2 iterations, error 0.0717 mm) vs
  Levenberg-Marquardt 16.2 fps (61.8 ms, 2.8 iterations, 0.0718 mm), full solve 0.16 fps;
  LM 4 iterations 0.13 s vs Adam (lr 0.1) 179 iterations 2.8 s to come within 5% of LM's
  cost: the 24 fps goals are met on a face over 5K tets;
* residuals: full solve at most 8.8e-7 (tolerance 1e-6), reduced sliders 1.3e-8 (the full
  residual they leave: up to 0.037), reduced marker frames 9.9e-7.

Before (MLP decoder, the mild keys made before a6ad923, 15 epochs, load 4-7): training 1,428
s; held out 0.035 mm vs PCA-12 0.028; sliders 25.7 fps, markers 9.4 fps.

Threads and the jaw solved from the markers (2026-11-29, bench head 8,292 tets, a model of 16
keys (4 held out, latent 12, 150 warm-start and 2 end-to-end epochs; ``--model`` runs, timings
only), 30 markers where Add Markers puts them, 24 frames between the held-out keys (jaw 0-23
deg), load average 7-9, the two runs back to back):

* one thread (one core): sliders reduced 144 fps; markers reduced 57.9 fps with the jaw keyed
  (0.144 mm), **34.5 fps with the jaw solved** (0.135 mm, 4.1 iterations, the angle within
  0.85 deg of the keys'), LM 30.2 fps;
* two threads (two cores): sliders 50.1 fps; markers 23.5 fps keyed, 10.4 fps jaw solved:
  2.9-3.3x slower, which is why the runtime measures the faster count
  (:meth:`core.methods.active.ActiveFace.pick_threads`) instead of taking the process's.

The skin as the keys' blend plus contact (the default since 2026-11-29; ``--skin physics``:
the equilibrium, as above), the same 16-key model settings, one thread, load average 4-7:
training 48 s (the blend's least squares after the rest face's code, 10 s, instead of the
detail layer's pair blends); held out, code refitted on the whole skin, 0.0708 mm against
surface PCA-12's 0.0907 (these keys are simulated, no blends of the training keys; a blend of
them comes out as PCA gives it, tests/test_active.py); 30 markers 0.0859 mm (PCA-12 on the
same markers 0.104); **markers with the jaw solved 2,026 fps** (0.49 ms, 2 iterations, the
angle within 0.61 deg, skin 0.0695 mm from the held-out keys' blends) and 6,704 fps keyed:
with nothing touching a marker frame is a linear least squares (the flesh is solved only on
frames where a collider touches: two full solves). ``--model`` runs of that model back to back
at load 9-10: one thread sliders 2,610 fps, markers 1,340 fps keyed and 669 fps with the jaw
solved (1.49 ms); two threads 250 (a few slow frames), 2,077 and 1,067 fps.

Usage::

    python bench/active.py [--size bench] [--keys 48] [--held-out 8] [--epochs 15]
                           [--markers 30] [--frames 48] [--threads 1] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# ``--threads N`` BLAS threads (default one), set before numpy starts its pool; with one the
# process is pinned to one core (bench/common.py's pin_this_process), with more to as many
_THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = str(_THREADS)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from neural_rom.bench.common import pin_this_process  # noqa: E402
from neural_rom.core.engine.protocol import FrameInputs, Markers  # noqa: E402
from neural_rom.core.kinds.face.rig import demo_head, make_shape_keys  # noqa: E402
from neural_rom.core.methods.active import ActiveFace  # noqa: E402


def _err(P, T):
    return float(np.linalg.norm(P - T, axis=-1).mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="bench", choices=("small", "bench"))
    p.add_argument("--keys", type=int, default=48)
    p.add_argument("--held-out", type=int, default=8)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--warm-epochs", type=int, default=400)
    p.add_argument("--latent", type=int, default=12)
    p.add_argument("--decoder", default="linear", choices=("linear", "mlp"))
    p.add_argument("--jaw-input", action="store_true", help="the jaw angle as a decoder input")
    p.add_argument(
        "--skin",
        default="blend",
        choices=("blend", "physics"),
        help="the skin shown: the keys' blend plus contact (default) or the equilibrium",
    )
    p.add_argument("--markers", type=int, default=30)
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--threads", type=int, default=1, help="BLAS threads (and cores) to run on")
    p.add_argument("--out", type=Path, default=Path("/tmp/neural_rom_bench_active"))
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--model",
        type=Path,
        help="skip the fit: time and measure this model "
        "file (trained by a previous run on the same keys): timings only",
    )
    a = p.parse_args(argv)
    if a.threads == 1:
        pin_this_process()
    elif hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[-a.threads :]))
    import torch

    torch.set_num_threads(a.threads)
    from neural_rom.training.active import fit
    from neural_rom.training.run import TrainingRun

    R: dict = {}
    t = time.perf_counter()
    rig = demo_head(a.size)
    keys = make_shape_keys(rig, a.keys, held_out=a.held_out, seed=0)
    R["mesh"] = {
        "tets": len(rig.T),
        "nodes": len(rig.X),
        "skin_vertices": len(rig.skin_V),
        "height_m": float(np.ptp(rig.skin_V[:, 2])),
        "keys": a.keys,
        "held_out": a.held_out,
        "keys_seconds": time.perf_counter() - t,
    }
    print(json.dumps(R["mesh"]), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    settings = {
        "latent_dim": a.latent,
        "epochs": a.epochs,
        "warm_epochs": a.warm_epochs,
        "decoder": a.decoder,
        "jaw_input": a.jaw_input,
        "skin": a.skin,
    }
    if a.model:
        from neural_rom.core.registry import load_simulator

        res = {"model": load_simulator(a.model)[0].model, "warm_decoder": None}
    else:
        t = time.perf_counter()
        res = fit(
            TrainingRun.create(
                "active",
                (rig, keys),
                a.out / "face.nrmodel",
                settings,
                progress=lambda f, m: print(
                    f"  [{time.perf_counter() - t:7.1f} s] {m}", flush=True
                ),
            )
        )
        R["training"] = {
            "seconds": time.perf_counter() - t,
            "seconds_per_epoch": res["seconds_per_epoch"],
            "epochs": a.epochs,
            "train_error_m": res["train_error_m"],
            "warm_error_m": res["warm_error_m"],
            "basis": res["k"],
            "cubature_elements": res["cubature_elements"],
            "cubature_error": res["cubature_error"],
        }
        print(json.dumps(R["training"]), flush=True)
    model = res["model"]
    tr, ho = np.flatnonzero(~keys.held_out), np.flatnonzero(keys.held_out)
    full = ActiveFace(model, solve="full")
    red = ActiveFace(model)
    d = model.latent_dim

    # ---- held out: refit the code only (whole skin), e2e vs warm start vs surface PCA
    from neural_rom.core.methods.active import ActiveModel

    full_warm = None
    if res["warm_decoder"] is not None and not model.blends:  # the physical skin's
        warm = ActiveModel(**{**model.__dict__, "decoder": res["warm_decoder"]})
        full_warm = ActiveFace(warm, solve="full")
    D = (keys.positions[tr] - rig.skin_V).reshape(len(tr), -1)
    mean = D.mean(0)
    _, _, Vt = np.linalg.svd(D - mean, full_matrices=False)
    B = Vt[:d].T  # surface PCA with as many dimensions as the latent
    from neural_rom.core.kinds.face.inputs import marker_layout

    # where Add Markers puts them: the face, denser where the keys move it
    mv = marker_layout(rig.skin_V, rig.skin_F, a.markers, 0, keys=keys.positions[tr])
    rows = (3 * mv[:, None] + np.arange(3)).ravel()
    out = []
    for j in ho if not a.model else []:  # with --model: timings only
        tgt, jaw = keys.positions[j], model.jaw_matrix(keys.jaw[j])
        z, x, _, _ = full.fit_latent(tgt, jaw=jaw, z0=np.zeros(d), pull=1e-10, iters=12)
        e2e = _err(model.skin_of(x, z, jaw), tgt)  # the skin shown: the detail layer's too
        xw = None
        if full_warm is not None:
            _, xw, _, _ = full_warm.fit_latent(tgt, jaw=jaw, z0=np.zeros(d), pull=1e-10, iters=12)
        dj = (tgt - rig.skin_V).ravel() - mean
        pca = _err((rig.skin_V.ravel() + mean + B @ (B.T @ dj)).reshape(-1, 3), tgt)
        Bm = B[rows]
        c = np.linalg.solve(Bm.T @ Bm + 1e-8 * np.eye(B.shape[1]), Bm.T @ dj[rows])
        pca_m = _err((rig.skin_V.ravel() + mean + B @ c).reshape(-1, 3), tgt)
        red.reset()
        rep = red.step(FrameInputs(markers=Markers(mv, tgt[mv]), reference_frame=jaw))
        mk = _err(red.skin_positions(), tgt)
        out.append(
            {
                "key": int(j),
                "jaw": float(keys.jaw[j]),
                "rest_m": _err(rig.skin_V, tgt),
                "e2e_m": e2e,
                "warm_m": None if xw is None else _err(rig.skin.apply(xw), tgt),
                "pca_m": pca,
                "markers_m": mk,
                "pca_markers_m": pca_m,
                "marker_iters": rep.newton_iters,
            }
        )
        print(json.dumps(out[-1]), flush=True)
    R["held_out"] = out
    summ = {}
    for name, sel in (("all", [True] * len(out)), ("jaw_open", [o["jaw"] > 0.15 for o in out])):
        sub = [o for o, s in zip(out, sel, strict=True) if s]
        if sub:
            summ[name] = {
                k: float(np.mean([o[k] for o in sub]))
                for k in ("rest_m", "e2e_m", "warm_m", "pca_m", "markers_m", "pca_markers_m")
                if sub[0][k] is not None
            }
            summ[name]["count"] = len(sub)
    R["held_out_mean"] = summ
    print(json.dumps(summ), flush=True)

    # ---- timings: one frame's pieces
    z0 = model.codes[0]
    reps = 20
    t = time.perf_counter()
    for _ in range(reps):
        model.actions(z0)
    R["decoder_ms"] = (time.perf_counter() - t) / reps * 1000
    xk = full.solve_full(z0, keys.jaw[tr[0]], x0=model.X).x
    t = time.perf_counter()
    full.qs.adjoint(xk, np.ones_like(xk) * 1e-3)
    R["adjoint_ms"] = (time.perf_counter() - t) * 1000

    # ---- slider animation: codes and jaw blended between training keys
    F = a.frames
    ks = tr[: max(2, F // 12 + 1)]
    s_frames = []
    for f in range(F):
        u = f / (F - 1) * (len(ks) - 1)
        i0 = min(int(u), len(ks) - 2)
        w = u - i0
        zi = (1 - w) * model.codes[i0] + w * model.codes[i0 + 1]
        ji = (1 - w) * keys.jaw[ks[i0]] + w * keys.jaw[ks[i0 + 1]]
        s_frames.append((zi, model.jaw_matrix(ji)))
    stats = {}
    skins = {}
    for name, sim in (("full", full), ("reduced", red)):
        sim.reset()
        res_f, times, sk, full_res = [], [], [], []
        for zi, M in s_frames:
            t = time.perf_counter()
            rep = sim.step(FrameInputs(sliders=zi, reference_frame=M))
            times.append(time.perf_counter() - t)
            res_f.append(rep.residual)
            sk.append(sim.skin_positions())
            if name == "reduced":
                full_res.append(full.qs.residual(sim.positions(), model.actions(zi, M)))
        skins[name] = np.array(sk)
        stats[name] = {
            "fps": 1.0 / float(np.mean(times)),
            "ms_mean": 1000 * float(np.mean(times)),
            "ms_max": 1000 * float(np.max(times)),
            "residual_max": float(max(res_f)),
        }
        if full_res:
            stats[name]["full_residual_of_reduced_max"] = float(max(full_res))
    gap = np.linalg.norm(skins["full"] - skins["reduced"], axis=-1)
    stats["reduced_vs_full_max_m"] = float(gap.max())
    stats["reduced_vs_full_mean_m"] = float(gap.mean())
    R["sliders"] = stats
    print(json.dumps({"sliders": stats}), flush=True)

    # ---- marker animation: marker positions blended between held-out keys
    m_frames = []
    for f in range(F):
        u = f / (F - 1) * (len(ho) - 1)
        i0 = min(int(u), len(ho) - 2)
        w = u - i0
        P = (1 - w) * keys.positions[ho[i0]] + w * keys.positions[ho[i0 + 1]]
        ji = (1 - w) * keys.jaw[ho[i0]] + w * keys.jaw[ho[i0 + 1]]
        m_frames.append((P, model.jaw_matrix(ji)))
    mstats = {}
    red_lm = ActiveFace(model, marker_solver="lm")
    red_jaw = ActiveFace(model, jaw_from_markers=True)  # the markers turn the jaw too
    for name, sim in (
        ("full", full),
        ("reduced", red),
        ("reduced_lm", red_lm),
        ("reduced_jaw_solved", red_jaw),
    ):
        if name == "full":
            frames = m_frames[:: max(1, F // 8)]  # the full solve is slow: a sample
        else:
            frames = m_frames
        sim.reset()
        times, errs, iters, res_f, jaw_err = [], [], [], [], []
        for P, M in frames:
            t = time.perf_counter()
            rep = sim.step(FrameInputs(markers=Markers(mv, P[mv]), reference_frame=M))
            times.append(time.perf_counter() - t)
            errs.append(_err(sim.skin_positions(), P))
            iters.append(rep.newton_iters)
            jaw_err.append(abs(sim.model.jaw_angle(sim.jaw) - sim.model.jaw_angle(M)))
            res_f.append(rep.residual)
        mstats[name] = {
            "fps": 1.0 / float(np.mean(times)),
            "ms_mean": 1000 * float(np.mean(times)),
            "skin_error_mean_m": float(np.mean(errs)),
            "frames": len(frames),
            "iterations_mean": float(np.mean(iters)),
            "residual_max": float(max(res_f)),
            "jaw_error_max_deg": float(np.degrees(max(jaw_err))),
        }
    R["threads"] = a.threads
    R["markers"] = mstats
    print(json.dumps({"markers": mstats}), flush=True)

    if a.json:
        a.json.write_text(json.dumps(R, indent=1))
    if model.blends:  # a marker frame is a linear least squares: no Adam to compare
        return 0
    # ---- Adam (lr 0.1, the paper) against LM on one marker frame (reduced solve)
    P, M = m_frames[F // 2]
    red.reset()
    t = time.perf_counter()
    z_lm, _, cost_lm, it_lm = red.fit_latent(P[mv], vertices=mv, jaw=M, z0=np.zeros(d), iters=20)
    t_lm = time.perf_counter() - t
    S = model.skin.matrix[mv]
    z = np.zeros(d)
    mom, vel = np.zeros(d), np.zeros(d)
    q = np.zeros(model.U.shape[1])
    t = time.perf_counter()
    it_adam, cost = 0, np.inf
    for it_adam in range(1, 501):
        x, q, _, _ = red.solve_reduced(z, M, q0=q)
        r = (S @ x - P[mv]).ravel()
        cost = float(r @ r) + red.marker_pull * float(z @ z)
        if cost <= 1.05 * cost_lm:
            break
        dq = red.reduced_jacobian(x, z, M)
        J = (S @ (red.Ufull @ dq).reshape(len(x), -1)).reshape(-1, d)
        g = 2 * J.T @ r + 2 * red.marker_pull * z
        mom = 0.9 * mom + 0.1 * g
        vel = 0.999 * vel + 0.001 * g * g
        z = z - 0.1 * (mom / (1 - 0.9**it_adam)) / (np.sqrt(vel / (1 - 0.999**it_adam)) + 1e-8)
    R["lm_vs_adam"] = {
        "lm_iterations": it_lm,
        "lm_seconds": t_lm,
        "lm_cost": cost_lm,
        "adam_iterations": it_adam,
        "adam_seconds": time.perf_counter() - t,
        "adam_cost": cost,
    }
    print(json.dumps({"lm_vs_adam": R["lm_vs_adam"]}), flush=True)
    if a.json:
        a.json.write_text(json.dumps(R, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
