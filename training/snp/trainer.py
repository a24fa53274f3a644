"""Subspace Neural Physics' trainer, ``train(run)`` (:mod:`training.snp`'s docstring has the
method): data, PCA, the initial model, the network, its export checked against torch, the
held-out measures and the model file."""

from __future__ import annotations

import functools
import time
from dataclasses import replace

import numpy as np
import torch

from ...core.data.files import ensure_writable_dir
from ...core.errors import NeuralRomError
from ...core.methods.snp import (
    SNPParameters,
    SNPSimulation,
)
from ...core.methods.snp import save as save_snp_model
from ..nets import (
    copy64,
    to_numpy_mlp,
    torch_device,
    torch_threads,
)
from ..run import TrainingRun
from .data import (
    Sequence,
    cloth_triangles,
    fit_external_encoder,
    fit_initial_model,
    fit_normal_model,
    frame_origin,
    load_sequences,
    mean_centred_pca,
    normal_angles,
    open_run_bakes,
    reference_rest,
    wants_contact,
)
from .network import NetTrainer, noise_floor, rollout

# torch CPU threads: windows of a few small matrices gain nothing from more, and one thread
# gives the same arithmetic (and model) whatever the core count (training/autoencoder).
_CPU_THREADS = 1
# The exported network must reproduce the float64 torch rollout to this (relative).
_VERIFY_TOL = 1e-6


def train(run: TrainingRun) -> dict:
    """Train a Subspace Neural Physics model from bakes of one mesh and write it to
    ``run.out``; the registry's trainer entry point (``core.methods.snp.METHOD``).

    Returns
    -------
    The result record of :meth:`.run.TrainingRun.finish` with this method's metrics:
    ``pca_max_error_train_m``/``_val_m``, ``external_modes``, ``learning_rate`` and
    ``contact_features`` (as chosen, :func:`learning_rate`, :func:`wants_contact`),
    ``network`` (layer sizes),
    ``epochs_trained``, ``train_loss``, ``stopped``, ``network_seconds`` and, over the
    held-out bakes rolled out in the subspace, the mean vertex errors of the model
    (``heldout_mean_error_m``), of the initial model alone (``initial_model_mean_error_m``)
    and of the PCA projection (``projection_mean_error_m``, the floor).
    """
    ensure_writable_dir(run.out.parent, "the model")
    dev = torch_device(run.device)
    run.device = str(dev)
    s = run.settings
    b = open_run_bakes(run)
    sim_settings = b.sim_settings
    dt = float(sim_settings.dt)
    contact = wants_contact(s, b.ds)
    seqs, kinds, sizes = load_sequences(run, contact)
    train_seqs = [q for q in seqs if q.bake in set(b.train.tolist())]
    val_seqs = [q for q in seqs if q.bake in set(b.val.tolist())]
    run.check_cancel("Training cancelled before the basis was computed.")

    # 2. PCA
    diag = float(np.linalg.norm(b.X.max(0) - b.X.min(0)))
    tol = s.tolerance if s.tolerance is not None else 0.01 * diag
    run.say(0.05, "PCA of the bake positions")
    Y_train = np.concatenate([q.y for q in train_seqs])

    def compute():
        mean, U, info = mean_centred_pca(Y_train, k=s.k, tolerance=tol, max_k=s.max_k)
        return {"mean": mean, "U": U, "rank": np.array(info["rank"])}

    basis, _ = run.checkpoints.stage("snp_basis", compute, to_arrays=dict, from_arrays=dict)
    mean, U = basis["mean"], basis["U"]
    u = U.shape[1]
    if s.k is not None and u < s.k:
        run.warnings.append(
            f"The bakes span only {u} PCA modes; the model has {u}, not the {s.k} asked for."
        )
    n = len(b.X)

    def encode(y):
        return (y - mean).reshape(len(y), -1) @ U

    Z = [encode(q.y) for q in train_seqs]
    Z_val = [encode(q.y) for q in val_seqs]
    err_train = _max_projection_error(Y_train, mean, U)
    err_val = max(_max_projection_error(q.y, mean, U) for q in val_seqs) if val_seqs else err_train
    run.emit({"k": u, "pca_max_error_train_m": err_train, "pca_max_error_val_m": err_val})
    run.say(0.1, f"PCA: {u} modes, max vertex error {1000 * err_val:.3g} mm on held-out frames")

    # 3-4. initial model, external encoder, ranges
    alpha, beta = fit_initial_model(Z)
    encoder = fit_external_encoder(
        np.concatenate([q.features for q in train_seqs]), s.external_modes, s.clip_margin
    )
    W = [encoder.encode(q.features) for q in train_seqs]
    W_val = [encoder.encode(q.features) for q in val_seqs]
    Zc = np.concatenate(Z)
    z_lo, z_hi = Zc.min(0), Zc.max(0)
    z_lo, z_hi = z_lo - s.clip_margin * (z_hi - z_lo), z_hi + s.clip_margin * (z_hi - z_lo)
    scale = float(Zc[:, 0].std()) or 1.0
    # per-mode input scales: each mode's standard deviation (floored at 1e-3 s: a mode that
    # hardly moved is not blown up), so the network sees every mode at O(1)
    in_scale = np.maximum(Zc.std(0), 1e-3 * scale) if s.mode_scaling else None
    floor = noise_floor(s, train_seqs)
    run.emit({"external_modes": encoder.size})

    # 5. the network
    run.say(0.12, f"network: windows of {s.window} frames")
    t_net = time.perf_counter()
    with torch_threads(dev, _CPU_THREADS):
        trainer = NetTrainer(
            s,
            Z,
            W,
            Z_val,
            W_val,
            alpha,
            beta,
            scale,
            z_lo,
            z_hi,
            dt,
            n,
            dev,
            run.checkpoints,
            run.should_cancel,
            run.emit,
            lambda done, total, msg: run.say(0.12 + 0.7 * done / max(total, 1), msg),
            in_scale=in_scale,
            noise_floor=floor,
        )
        run.emit({"learning_rate": trainer.lr, "contact_features": contact, "noise_floor": floor})
        net_t, state = trainer.fit(deadline=time.perf_counter() + s.time_budget)
    network_seconds = time.perf_counter() - t_net
    if state["stopped"] == "time budget":
        run.warnings.append(
            f"The time budget ({s.time_budget:g} s) ended the training after "
            f"{state['epoch']} of {trainer.epochs} epochs; raise Time Budget for a better model."
        )

    # 6. export, check, measure
    net = to_numpy_mlp(net_t, "relu")
    params = SNPParameters(
        X=b.X,
        mean=mean,
        U=U,
        alpha=alpha,
        beta=beta,
        z_lo=z_lo,
        z_hi=z_hi,
        scale=scale,
        encoder=encoder,
        net=net,
        sizes=sizes,
        kinds=kinds,
        pinned=b.pinned,
        reference_rest=reference_rest(b.ds),
        triangles=cloth_triangles(b.ds),
        frame_origin=frame_origin(b.X),
        input_scale=in_scale,
        contact=contact,
    )
    check = (Z_val or Z)[0], (val_seqs or train_seqs)[0].features
    _verify_export(net_t, params, *check)
    measures = heldout_errors(params, val_seqs, dt) if val_seqs else {}
    if params.triangles is not None:  # a surface: the linear normal model (sec. 6.3)
        run.say(0.84, "linear normal model")
        n_mu, Q = fit_normal_model([q.y for q in train_seqs], mean, U, params.triangles)
        params = replace(params, normal_mean=n_mu, normal_basis=Q)
        angles = normal_angles(params, [q.y for q in (val_seqs or train_seqs)])
        measures["normal_angle_mean_deg"] = float(angles.mean())
        measures["normal_angle_p95_deg"] = float(np.percentile(angles, 95))
    run.emit(measures)
    # no held-out bakes (validation fraction 0): only the normal model's angles are measured
    held = measures.get("heldout_mean_error_m")
    if held is not None and held >= measures["initial_model_mean_error_m"]:
        run.warnings.append(
            "On the held-out bakes the network does no better than its initial model alone "
            f"({1e3 * held:.3g} against "
            f"{1e3 * measures['initial_model_mean_error_m']:.3g} mm mean vertex error): bake "
            "more variants, or train more epochs."
        )
    save = functools.partial(save_snp_model, params=params)
    return run.finish(
        run.out,
        save,
        k=u,
        dofs=u,
        max_error_val_m=err_val,
        # a cloth bake is replayed from rest with its recorded colliders and frame, as
        # compare replays it (core.compare.rollout_metrics): the model's own error
        rollout=s.rollout,
        at=0.85,
        stiffening=False,  # its advice (modes, cubature) is about solved subspace dynamics
        metrics={
            "pca_max_error_train_m": err_train,
            "pca_max_error_val_m": err_val,
            "external_modes": encoder.size,
            "network": list(net.sizes),
            "epochs_trained": state["epoch"],
            "best_epoch": state["best_epoch"] if s.keep_best and val_seqs else None,
            "epochs": trainer.epochs,
            "batch_size": trainer.batch,
            "learning_rate": trainer.lr,
            "contact_features": contact,
            "train_loss": state["losses"][-1] if state["losses"] else None,
            "stopped": state["stopped"],
            "windows": int(len(trainer.windows)),
            "network_seconds": network_seconds,
            "dead_units": state["dead_units"],
            **measures,
        },
    )


def _max_projection_error(Y: np.ndarray, mean: np.ndarray, U: np.ndarray) -> float:
    A = (Y - mean).reshape(len(Y), -1)
    R = (A - (A @ U) @ U.T).reshape(Y.shape)
    return float(np.sqrt(np.max(np.einsum("fvi,fvi->fv", R, R), initial=0.0)))


def latent_rollout(sim: SNPSimulation, z0: np.ndarray, z1: np.ndarray, F: np.ndarray):
    """(L, u) PCA coordinates of a rollout of the runtime's step (``predict_features``, the
    arithmetic :meth:`SNPSimulation.step` runs) from ``z0, z1`` over the external features
    ``F`` (L, e); the first two rows are ``z0``, ``z1``."""
    out = np.empty((len(F), len(z0)))
    out[0], out[1] = z0, z1
    F = np.asarray(F, dtype=np.float64)
    for t in range(2, len(F)):
        out[t] = sim.predict_features(out[None, t - 1], out[None, t - 2], F[None, t])[0]
    return out


def heldout_errors(params: SNPParameters, seqs: list[Sequence], dt: float) -> dict:
    """Mean vertex errors (m) over the held-out sequences' predicted frames (2 onwards, i.e.
    bake frames 1 onwards) of the model, of the initial model alone (eq. 1) and of the PCA
    projection (the floor), each rolled out from the sequence's first two states."""

    sims = {
        "heldout_mean_error_m": SNPSimulation(params),
        "initial_model_mean_error_m": SNPSimulation(replace(params, net=None)),
    }
    sums = dict.fromkeys([*sims, "projection_mean_error_m"], 0.0)
    count = 0
    for q in seqs:
        z = (q.y - params.mean).reshape(len(q.y), -1) @ params.U
        target = q.y[2:]
        for key, sim in sims.items():
            zr = latent_rollout(sim, z[0], z[1], q.features)[2:]
            y = params.mean + (zr @ params.U.T).reshape(target.shape)
            sums[key] += float(np.linalg.norm(y - target, axis=-1).sum())
        proj = params.mean + (z[2:] @ params.U.T).reshape(target.shape)
        sums["projection_mean_error_m"] += float(np.linalg.norm(proj - target, axis=-1).sum())
        count += target.shape[0] * target.shape[1]
    return {k: v / max(count, 1) for k, v in sums.items()}


def _verify_export(net_t, params: SNPParameters, z: np.ndarray, f: np.ndarray) -> None:
    """The exported runtime's rollout (its folded step) over the features ``f`` equals the
    torch network's in float64 (else a bug)."""
    w = params.encoder.encode(f)
    net64 = copy64(net_t)
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
    with torch.no_grad():
        ref = rollout(
            net64,
            t(z[None, 0]),
            t(z[None, 1]),
            t(w[None]),
            t(params.alpha),
            t(params.beta),
            params.scale,
            t(params.z_lo),
            t(params.z_hi),
            in_scale=None if params.input_scale is None else t(params.input_scale),
        )[0].numpy()
    got = latent_rollout(SNPSimulation(params), z[0], z[1], f)
    err = float(np.abs(got - ref).max(initial=0.0)) / (params.scale + float(np.abs(ref).max()))
    if not err <= _VERIFY_TOL:
        raise NeuralRomError(
            f"The exported network's rollout differs from the trained one by {err:.3g} "
            "(relative): the export is broken; report this as a bug."
        )
