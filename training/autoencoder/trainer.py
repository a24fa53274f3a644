"""The autoencoder's trainer, ``train(run)`` (:mod:`training.autoencoder`'s docstring has the
pipeline): the PCA layer, the networks (:func:`training.nets.fit`), their export and the
comparison with PCA, cubature, the model file, and the linear model kept when it replays
better."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...core import registry
from ...core.data.files import temporary_path
from ...core.errors import JobCancelled, NeuralRomError
from ...core.methods.autoencoder import save as save_autoencoder_model
from ...core.reduced.nnet import MLP
from ...core.reduced.subspace import Subspace
from .. import nets
from ..nets import build_mlp, check_export, copy64, to_numpy_mlp, torch_device, torch_threads
from ..run import Checkpoints, TrainingRun, even_indices
from ..stages import fit_cubature, pod_basis
from .plan import TrainingPlan, duration, plan_training, search_latent_size, search_worst_case

# Frames per block when full-space errors are evaluated (bounds temporary memory).
_BLOCK = 256
# Training poses the exported networks are compared with torch on.
_VERIFY_POSES = 256
_VERIFY_TOL = 1e-6
# torch CPU threads the networks train with. Networks this small gain nothing from more
# (2,000 frames, k = 60, hidden 100, 100: 21.8 ms an epoch with one thread, 21.3 with two)
# and lose much when the cores are busy (93 frames, k = 6, hidden 16, 16, on two cores shared
# with another job: 66 ms with two threads, 1.3 ms with one); and the arithmetic depends on
# the thread count (tests/test_latent_accuracy.py's r = 2 network: 14.4 mm held out with two
# threads, 16.9 mm with one), so with one the same seed gives the same model whatever the
# number of cores.
_CPU_THREADS = 1
# Epochs timed for the estimate, after one warm-up epoch (the first is slower: allocation).
_PROBE_EPOCHS = 5


# Progress fractions of the stages.
_P_BASIS, _P_AE, _P_CUB, _P_ROLL = 0.05, 0.15, 0.75, 0.9


# ------------------------------------------------------------------------------------------
# Networks
# ------------------------------------------------------------------------------------------


class _AE(nn.Module):
    def __init__(self, k: int, r: int, hidden: list[int], activation: str) -> None:
        super().__init__()
        self.encoder = build_mlp([k, *hidden, r], activation)
        self.decoder = build_mlp([r, *reversed(hidden), k], activation)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(q))


# ------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------


def train(run: TrainingRun) -> dict:
    """Train an autoencoder latent-space model from bakes of one mesh and write it to
    ``run.out``; the registry's trainer entry point (``core.methods.autoencoder.METHOD``).

    Whole trajectories are held out for validation. Checkpoints (PCA basis, plan, every
    network every ``checkpoint_every`` epochs, cubature) go to ``run.checkpoint_dir``; a run
    cancelled or killed part-way resumes from them when the bakes and settings are the same,
    does only the rest, and ends with the same weights as an uninterrupted run (see the
    module docstring).

    ``run.device``: a torch device (``"cpu"``, ``"cuda"``, ``"auto"``); ``run.should_cancel``
    is polled between stages and epochs; ``run.metric`` gets the estimate (``estimate_s``),
    per-epoch losses (at most ~2 per second), each network's held-out error and the
    comparison with PCA.

    Returns
    -------
    The result record of :meth:`.run.TrainingRun.finish`, with ``latent_dim``, the PCA and
    autoencoder errors (m; ``pca_r_max_error_val_m`` is PCA truncated to ``latent_dim``), the
    latent-size search, the plan (``estimate_s``, ``time_budget_s``), the final network's
    epochs and why it stopped, ``fallback`` ("pca" when PCA-r replaced the network) and
    ``epochs_run`` (epochs this run trained: a resumed run counts only its own). With
    ``keep_linear`` and a held-out replay, :func:`keep_better`'s record: the linear model's
    when it replays better (its file at ``out``), with ``choice`` either way.
    """
    dev = torch_device(run.device)
    run.device = str(dev)
    s = run.settings
    train_x, train_groups, val_x = run.open_bakes().training_frames(s.max_frames)
    warnings = run.warnings
    check_x = val_x if len(val_x) else train_x
    run.check_cancel("Training cancelled before the PCA basis was computed.")

    # 1. PCA basis (the outer linear layer, eq. 6) -----------------------------------------
    sub, pca_tol = pod_basis(run, train_x, val_x, label="PCA", span=(_P_BASIS, _P_AE))
    pca_err_train = sub.reconstruction_error(train_x)
    pca_err_val = sub.reconstruction_error(check_x)
    run.emit(
        {
            "k": sub.k,
            "pca_max_error_train_m": pca_err_train,
            "pca_max_error_val_m": pca_err_val,
        }
    )
    run.say(_P_AE, f"PCA: {sub.k} modes, max vertex error {pca_err_val * 1000:.3g} mm held out")
    run.check_cancel("Training cancelled after the PCA basis (checkpointed).")

    # 2.-3. autoencoder in PCA coordinates (eq. 7), latent size coarse to fine --------------
    frames = _Frames(sub, train_x, check_x, held_out=len(val_x) > 0)
    lo, hi, target = _latent_sizes(s, sub.k, pca_tol, pca_err_val, warnings)
    trainer = _Trainer(
        s, frames.q_train, frames.q_check, dev, run.checkpoints, run.should_cancel, run.emit
    )
    with torch_threads(dev, _CPU_THREADS):
        plan = _plan(run, s, trainer, 0 if target is None else search_worst_case(lo, hi), hi)
        r, model, searched, final = _train_networks(run, s, trainer, plan, frames, lo, hi, target)

    # export to numpy (checked against torch), then compared with PCA at r and at k
    encoder, decoder = _export(model, s.activation, trainer.scale, frames.q_train)
    missed = target is not None and all(e["max_error_val_m"] > target for e in [*searched, final])
    if missed:
        warnings.append(
            f"No latent size up to {hi} reached the latent tolerance {target * 1000:.3g} mm "
            f"in the search (the most accurate, r = {r}, is kept)."
        )
    cmp = _against_pca(s, frames, r, encoder, decoder, pca_err_val, target, warnings)
    encoder, decoder, r = cmp.pop("encoder"), cmp.pop("decoder"), cmp["latent_dim"]
    run.emit(cmp)
    run.say(
        _P_CUB,
        f"autoencoder: r = {r}, max vertex error {cmp['ae_max_error_val_m'] * 1000:.3g} mm "
        f"(PCA with {r} modes {cmp['pca_r_max_error_val_m'] * 1000:.3g} mm, with {sub.k} "
        f"{pca_err_val * 1000:.3g} mm)" + (" - PCA fallback" if cmp["fallback"] else ""),
    )
    run.check_cancel("Training cancelled after the autoencoder (checkpointed).")

    # 4. cubature on the PCA layer U (Fulton 2019, sec. 5.3) --------------------------------
    cub = fit_cubature(run, sub, train_x, train_groups, val_x, project=True, span=(_P_CUB, _P_ROLL))

    # 5. held-out rollout and the model file ------------------------------------------------
    save = functools.partial(
        save_autoencoder_model,
        subspace=sub,
        cubature=cub,
        contact=run.contact_sample(),
        decoder=decoder,
        encoder=encoder,
    )
    result = run.finish(
        run.out,
        save,
        k=sub.k,
        dofs=r,
        max_error_val_m=cmp["ae_max_error_val_m"],
        cubature=cub,
        rollout=s.rollout,
        at=_P_ROLL,
        metrics={
            **cmp,
            "pca_max_error_train_m": pca_err_train,
            "pca_max_error_val_m": pca_err_val,
            "latent_tolerance_m": target,
            "latent_search": searched,
            "final_train_loss": final.get("train_loss"),
            "final_val_loss": final.get("val_loss"),
            "epochs": plan.epochs,
            "search_epochs": plan.search_epochs if plan.searches else None,
            "epochs_trained": final.get("epochs_trained"),
            "best_epoch": final.get("best_epoch"),
            "stopped": final.get("stopped"),
            "estimate_s": plan.estimate_s,
            "time_budget_s": s.time_budget,
            "epochs_run": trainer.epochs_run,
        },
        metadata={
            "lbfgs": {
                "window": s.lbfgs_window,
                "tolerance": s.lbfgs_tolerance,
                "max_iters": s.lbfgs_max_iters,
            }
        },
    )
    if not s.keep_linear or result.get("rollout_max_error_m") is None:
        return result
    run.say(1.0, "training the linear model of the same bakes to compare replays")
    try:
        linear = _train_baseline(run)
    except JobCancelled:
        raise
    except NeuralRomError as e:  # the autoencoder stays; say why nothing was compared
        result["warnings"].append(f"The linear model of these bakes did not train ({e}).")
        return result
    return keep_better(result, linear)


def _train_baseline(run: TrainingRun) -> dict:
    """The linear model (:func:`core.registry.baseline`) of the run's bakes at its default
    settings and this run's split (so it replays the same held-out bake), written to a
    temporary beside the model; its record."""
    s = run.settings
    return registry.baseline().trainer_function()(
        run.data,
        temporary_path(run.out),
        {"validation_fraction": s.validation_fraction, "seed": s.seed},
        expect_mesh_hash=run.expect_mesh_hash,
        should_cancel=run.should_cancel,
    )


def keep_better(result: dict, linear: dict) -> dict:
    """The record of the model kept: the autoencoder's (``result``, written at
    ``result["model"]``) unless the linear model (``linear``, written at ``linear["model"]``) replays the
    same held-out bake with a smaller largest vertex error; then the linear file replaces it.
    The kept record gets ``choice``, one sentence with both replay errors, and both errors
    (``linear_rollout_max_error_m``, ``autoencoder_rollout_max_error_m``); a kept linear
    record carries both runs' warnings and training times. Without both replays of the same
    bake the autoencoder is kept and nothing is said."""
    ae, lin = result.get("rollout_max_error_m"), linear.get("rollout_max_error_m")
    tmp = Path(linear["model"])
    bakes = [(r.get("rollout") or {}).get("bake") for r in (result, linear)]
    if lin is None or ae is None or bakes[0] != bakes[1]:
        tmp.unlink(missing_ok=True)
        return result
    both = (
        f"the autoencoder ({_dofs(result)}) replays the held-out bake at {ae * 1000:.3g} mm, "
        f"the default linear model ({_dofs(linear)}) at {lin * 1000:.3g} mm"
    )
    if lin < ae:
        tmp.replace(result["model"])
        choice = f"Linear is the better choice for this asset, so the linear model is kept: {both}."
        warnings = list(result.get("warnings") or [])
        warnings += [w for w in linear.get("warnings") or [] if w not in warnings]
        kept = {**linear, "model": result["model"], "warnings": warnings}
        kept["train_seconds"] = result.get("train_seconds", 0.0) + linear.get("train_seconds", 0.0)
    else:
        tmp.unlink(missing_ok=True)
        choice = f"The autoencoder is kept: {both}."
        kept = dict(result)
    return {
        **kept,
        "choice": choice,
        "linear_rollout_max_error_m": lin,
        "autoencoder_rollout_max_error_m": ae,
    }


def _dofs(record: dict) -> str:
    n = int(record["dofs"])
    return f"{n} DOF" if n == 1 else f"{n} DOFs"


@dataclass
class _Frames:
    """The frames errors are measured on and their PCA coordinates.

    Attributes
    ----------
    train_x : (F, n, 3) training positions (m); check_x : (G, n, 3) held-out positions
        (the training ones when ``held_out`` is False); q_train (F, k), q_check (G, k)
    """

    sub: Subspace
    train_x: np.ndarray
    check_x: np.ndarray
    held_out: bool

    def __post_init__(self) -> None:
        self.q_train = self.sub.encode(self.train_x)
        self.q_check = self.sub.encode(self.check_x)

    @property
    def where(self) -> str:
        return "held-out bakes" if self.held_out else "the training frames (none is held out)"

    def errors(self, encoder: MLP, decoder: MLP) -> tuple[float, float]:
        """Largest vertex error (m) of ``X + U phi(enc(q))`` on the training and the check
        frames."""
        return (
            _max_error(self.train_x, self.sub, decoder.forward(encoder.forward(self.q_train))),
            _max_error(self.check_x, self.sub, decoder.forward(encoder.forward(self.q_check))),
        )


def _latent_sizes(s, k: int, pca_tol, pca_err_val: float, warnings):
    """``(lo, hi, target)``: the latent sizes to search and the tolerance (m); target None
    when the size is given (``lo = hi``)."""
    if s.latent_dim is not None:
        if s.latent_dim > k:
            warnings.append(f"latent_dim {s.latent_dim} exceeds the PCA size {k}; using {k}.")
        r = min(int(s.latent_dim), k)
        return r, r, None
    target = s.latent_tolerance
    if target is None:
        target = 2.0 * (pca_tol if pca_tol is not None else pca_err_val)
    if target <= pca_err_val:
        warnings.append(
            f"The latent tolerance {target * 1000:.3g} mm is below the PCA error "
            f"{pca_err_val * 1000:.3g} mm, which no autoencoder on this basis can beat: "
            "raise latent_tolerance or lower tolerance."
        )
    hi = min(int(s.max_latent_dim or k), k)
    return min(int(s.latent_start), hi), hi, target


def _train_networks(run, s, trainer, plan: TrainingPlan, frames: _Frames, lo, hi, target):
    """The networks of the plan: the search (when ``target`` is given) and the final one,
    within the deadlines of the time budget. Returns ``(r, model, searched, final)``:
    ``final`` is the final network's history and held-out error (``max_error_val_m``)."""
    t0 = time.perf_counter()
    final_deadline = t0 + max(s.time_budget, plan.estimate_s)  # a cut plan's floors may exceed it
    # the search leaves the final network its estimated time
    search_deadline = final_deadline - (0.0 if plan.reuse_search else plan.epochs * plan.epoch_s)
    total = plan.searches * plan.search_epochs + (0 if plan.reuse_search else plan.epochs)
    finished = [0]  # planned epochs of the networks done (the progress bar)

    def fit(r: int, epochs: int, phase: str, deadline: float):
        base = finished[0]

        def epoch_progress(done, _, msg):
            run.say(_P_AE + (_P_CUB - _P_AE) * min((base + done) / max(total, 1), 1.0), msg)

        model, hist = trainer.fit(
            r,
            epochs,
            phase=phase,
            progress=epoch_progress,
            max_error=lambda qh: _max_error(frames.check_x, frames.sub, qh),
            deadline=deadline,
        )
        finished[0] += epochs
        err = _max_error(frames.check_x, frames.sub, _predict(model, frames.q_check, trainer))
        run.emit({"latent_dim": r, "latent_max_error_val_m": err, "search": phase == "search"})
        return model, err, {"latent_dim": r, "max_error_val_m": err, **hist}

    searched: list[dict] = []
    if target is None:
        r = lo
        model, _, final = fit(r, plan.epochs, "final", final_deadline)
    else:
        r, model, searched = search_latent_size(
            lo,
            hi,
            lambda r: fit(r, plan.search_epochs, "search", search_deadline),
            target,
            stop=lambda: time.perf_counter() > search_deadline,
        )
        if plan.reuse_search:
            final = next(e for e in searched if e["latent_dim"] == r)
        else:
            model, _, final = fit(r, plan.epochs, "final", final_deadline)
    late = next((e for e in [*searched, final] if e["stopped"] == "time budget"), None)
    if late is not None:
        run.warnings.append(
            f"The time budget ({s.time_budget:g} s) ran out while the network of latent size "
            f"{late['latent_dim']} trained (epoch {late['epochs_trained']}); it keeps its best "
            "weights so far. Raise Time Budget: a run the deadline stops depends on the "
            "machine's speed."
        )
    return r, model, searched, final


def _against_pca(s, frames: _Frames, r: int, encoder, decoder, pca_err_val, target, warnings):
    """Compare the exported network with PCA at ``r`` modes (as many coordinates) and at
    ``k`` (its PCA layer) on the check frames, and warn about a network worse than either.

    With ``pca_fallback``, PCA-r (its first ``r`` modes) replaces a network less accurate than
    it. Not fewer modes, though fewer may meet the latent tolerance: on the poked bar of
    tests/test_training_autoencoder.py with the default settings, 14 modes instead of 16 met
    it too (7.8 mm on held-out shapes, 8.7 mm with 16) but replayed the held-out bake 67 mm
    off instead of 30 mm.

    Returns
    -------
    dict: ``latent_dim`` (``r``), ``ae_max_error_train_m`` and
    ``ae_max_error_val_m`` (the model's), ``pca_r_max_error_val_m`` (PCA with ``latent_dim``
    modes), ``network_max_error_val_m`` (the network's, fallback or not),
    ``fallback`` (None or "pca"), and the ``encoder`` and ``decoder`` kept.
    """
    sub = frames.sub
    ae_train, ae_val = frames.errors(encoder, decoder)
    net_val = ae_val
    pca_r = sub.truncated(r).reconstruction_error(frames.check_x) if r < sub.k else pca_err_val
    fallback = None
    if ae_val > pca_r:
        what = (
            f"The autoencoder with {r} latent coordinates is less accurate on {frames.where} "
            f"than PCA with {r} modes ({ae_val * 1000:.3g} mm against {pca_r * 1000:.3g} mm)"
        )
        if s.pca_fallback:
            fallback = "pca"
            encoder, decoder = pca_layers(sub.k, r)
            ae_train, ae_val = frames.errors(encoder, decoder)
            warnings.append(
                f"{what}, so the model uses those {r} PCA modes instead (a linear decoder: the "
                "latent space gains nothing here). More bakes (a "
                "network generalizes poorly from few), more Epochs or Time Budget may help; or "
                "use the linear method."
            )
        else:
            warnings.append(
                f"{what}: the saved network is worse than a linear space of as many "
                "coordinates. Turn PCA Fallback on, train longer, bake more, or use the linear "
                "method."
            )
    limit = target if target is not None else 2.0 * pca_err_val
    if ae_val > limit:
        warnings.append(
            f"The model's error on {frames.where} is {ae_val * 1000:.3g} mm with {r} latent "
            f"coordinates, against {pca_err_val * 1000:.3g} mm for its PCA layer alone "
            f"({sub.k} modes, the linear method's shapes)"
            + (f" and the latent tolerance {target * 1000:.3g} mm" if target is not None else "")
            + ". Train longer (Epochs, Time Budget), raise Max Latent Size, or use the linear "
            "method."
        )
    return {
        "encoder": encoder,
        "decoder": decoder,
        "latent_dim": r,
        "ae_max_error_train_m": ae_train,
        "ae_max_error_val_m": ae_val,
        "pca_r_max_error_val_m": pca_r,
        "network_max_error_val_m": net_val,
        "fallback": fallback,
    }


def _plan(run: TrainingRun, s, trainer, searches: int, r: int):
    """The run's :class:`TrainingPlan` (checkpoint stage ``plan``), its estimate reported
    before any network trains: a progress line, a metric, and a warning when the budget cut
    the epochs. ``r``: the latent size the epochs are timed with (the largest, the worst)."""

    def compute() -> TrainingPlan:
        run.say(_P_AE, "timing a few epochs to estimate the training time")
        epoch_s = trainer.time_epochs(r)
        return plan_training(s.epochs, s.search_epochs, searches, epoch_s, s.time_budget)

    plan, _ = run.checkpoints.stage(
        "plan", compute, to_arrays=TrainingPlan.to_arrays, from_arrays=TrainingPlan.from_arrays
    )
    work = (
        f"at most {plan.searches} latent sizes of {plan.search_epochs} epochs"
        + ("" if plan.reuse_search else f", then {plan.epochs} epochs")
        if plan.searches
        else f"{plan.epochs} epochs"
    )
    run.say(
        _P_AE,
        f"autoencoder: network training {duration(plan.estimate_s)} ({work}, "
        f"{plan.epoch_s * 1000:.3g} ms per epoch; early stopping may end it sooner); "
        "cubature and the rollout follow",
    )
    run.emit(
        {
            "estimate_s": plan.estimate_s,
            "time_budget_s": s.time_budget,
            "epoch_s": plan.epoch_s,
            "planned_epochs": plan.epochs,
            "planned_search_epochs": plan.search_epochs if plan.searches else None,
            "planned_searches": plan.searches,
        }
    )
    if plan.cut:
        run.warnings.append(
            f"With the epochs of the settings the network training would take "
            f"{duration(plan.wanted_s)}, over the time budget of {s.time_budget:g} s: cut to "
            f"{plan.epochs} epochs"
            + (f" (search networks: {plan.search_epochs})" if plan.searches else "")
            + f", {duration(plan.estimate_s)}. Raise Time Budget for a more accurate model "
            "(the cut depends on this machine's speed)."
        )
    return plan


def pca_layers(k: int, r: int) -> tuple[MLP, MLP]:
    """Encoder ``q -> q[:r]`` and decoder ``z -> (z, 0)``: PCA truncated to its first ``r``
    modes as an autoencoder (linear, one layer each), which the latent runtime runs as it is.

    Returns
    -------
    encoder (k -> r), decoder (r -> k) : :class:`core.nnet.MLP`
    """
    E = np.eye(r, k)
    return (
        MLP([E], [np.zeros(r)], ["identity"]),
        MLP([E.T.copy()], [np.zeros(k)], ["identity"]),
    )


def _max_error(x: np.ndarray, sub: Subspace, q_hat: np.ndarray) -> float:
    """max over frames and vertices of ``|x - (X + U q_hat)|`` (m); x (F, n, 3), q_hat (F, k)."""
    worst = 0.0
    for i in range(0, len(x), _BLOCK):
        r = x[i : i + _BLOCK] - sub.decode(np.asarray(q_hat[i : i + _BLOCK], np.float64))
        worst = max(worst, float(np.sqrt(np.max(np.einsum("fvi,fvi->fv", r, r), initial=0.0))))
    return worst


@torch.no_grad()
def _predict(model: _AE, q: np.ndarray, trainer: _Trainer) -> np.ndarray:
    """Round trip ``phi(enc(q))`` in PCA coordinates (float64 numpy), via torch."""
    if len(q) == 0:
        return np.zeros_like(q)
    qn = torch.as_tensor(q / trainer.scale, dtype=trainer.dtype, device=trainer.device)
    return model(qn).to("cpu", torch.float64).numpy() * trainer.scale


class _Trainer:
    """Adam on eq. 7 for one network at a time, with early stopping, checkpoints and resume.

    The PCA coordinates are divided by one scalar ``scale`` (their RMS) so Adam sees O(1)
    numbers whatever the mesh's mass and size; one scalar keeps the loss proportional to
    eq. 7 (the mass-weighted error), and it folds exactly into the first and last linear
    layers at export. ``q_check`` (the held-out coordinates, or the training ones when none
    is held out) is what early stopping watches.

    Attributes
    ----------
    epochs_run : epochs this process trained (a resumed network counts only the rest)
    """

    def __init__(self, s, q_train, q_check, device, checkpoints: Checkpoints, cancel, emit):
        self.s = s
        self.device = device
        self.dtype = torch.float32
        rms = float(np.sqrt(np.mean(np.sum(q_train**2, axis=1)))) if len(q_train) else 1.0
        self.scale = rms if rms > 0 else 1.0
        self.k = q_train.shape[1]
        self.q_train = torch.as_tensor(q_train / self.scale, dtype=self.dtype, device=device)
        self.q_check = torch.as_tensor(q_check / self.scale, dtype=self.dtype, device=device)
        self.checkpoints, self.cancel, self.emit = checkpoints, cancel, emit
        self.epochs_run = 0

    def _fresh(self, r: int) -> tuple[_AE, torch.optim.Optimizer]:
        s = self.s
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s.seed)
            model = _AE(self.k, r, s.hidden, s.activation).to(device=self.device, dtype=self.dtype)
        opt = torch.optim.Adam(model.parameters(), lr=s.learning_rate, weight_decay=s.weight_decay)
        return model, opt

    def _epoch(self, model: _AE, opt, r: int, epoch: int, epochs: int) -> float:
        """One pass of Adam over the training frames; the mean loss (normalized units)."""
        s = self.s
        for g in opt.param_groups:
            g["lr"] = _learning_rate(s, epoch, epochs)
        model.train()
        # a permutation per (seed, r, epoch): no generator state to checkpoint
        perm = nets.epoch_order([s.seed, r, epoch], len(self.q_train), self.device)

        def loss_of(idx):
            batch = self.q_train[idx]
            # eq. (7), Fulton 2019: squared error in PCA coordinates
            return ((model(batch) - batch) ** 2).sum(dim=1).mean()

        return nets.minibatch_pass(opt, perm, s.batch_size, loss_of)

    @torch.no_grad()
    def _check_loss(self, model: _AE) -> tuple[float, torch.Tensor]:
        """Loss of eq. 7 on ``q_check`` (normalized units) and the prediction."""
        model.eval()
        pred = model(self.q_check)
        return float(((pred - self.q_check) ** 2).sum(1).mean()), pred

    def time_epochs(self, r: int) -> float:
        """Seconds per epoch (training, and its share of the held-out loss) of a network of
        latent size ``r``: the median of a few epochs after a warm-up one, on a network
        thrown away."""
        model, opt = self._fresh(r)
        times = []
        for epoch in range(_PROBE_EPOCHS + 1):
            t = time.perf_counter()
            self._epoch(model, opt, r, epoch, _PROBE_EPOCHS + 1)
            t1 = time.perf_counter()
            self._check_loss(model)
            times.append(t1 - t + (time.perf_counter() - t1) / nets.CHECK_EVERY)
        return float(np.median(times[1:]))

    def fit(
        self,
        r: int,
        epochs: int,
        *,
        phase: str,
        progress: Callable[[int, int, str], None],
        max_error: Callable[[np.ndarray], float],
        deadline: float | None = None,
    ) -> tuple[_AE, dict]:
        """A network of latent size ``r`` trained for at most ``epochs`` epochs from the seed's
        initial weights, resumed from its checkpoint when there is one.

        It stops early after ``patience`` epochs without a better loss on ``q_check``, or at
        ``deadline`` (``time.perf_counter()``); the best weights are returned.

        Parameters
        ----------
        phase : "search" or "final": names the checkpoint (``ae_search_*`` / ``ae_*``)
        progress : ``progress(done, epochs, message)``
        max_error : largest vertex error (m) of PCA coordinates (F, k), for the metrics

        Returns
        -------
        (model, history) : history has ``train_loss``, ``val_loss`` (the last epoch's and
        the last check's, eq. 7 in PCA units), ``best_val_loss`` (the returned weights'),
        ``epochs_trained``, ``best_epoch``, ``stopped`` ("" when it ran all
        its epochs, "no held-out improvement", "time budget")
        """
        model, opt = self._fresh(r)
        f = self.checkpoints.file("ae" if phase == "final" else f"ae_{phase}", f"_r{r:03d}.pt")
        tag = f"latent {r}{' (search)' if phase == 'search' else ''}"
        sq2 = self.scale**2

        def resumed(state):
            progress(
                state["epoch"],
                epochs,
                f"{tag}: resumed at epoch {state['epoch']} from checkpoint"
                if state["epoch"] < epochs and not state["stopped"]
                else f"{tag}: trained ({state['epoch']} epochs) from checkpoint",
            )

        def report(state, pred):
            self.emit(
                {
                    "latent_dim": r,
                    "epoch": state["epoch"],
                    "train_loss": state["train_loss"] * sq2,
                    "val_loss": state["val_loss"] * sq2,
                    "val_max_error_m": max_error(
                        pred.to("cpu", torch.float64).numpy() * self.scale
                    ),
                }
            )
            progress(
                state["epoch"],
                epochs,
                f"latent {r}: epoch {state['epoch']}/{epochs}"
                + (f" (stopped: {state['stopped']})" if state["stopped"] else ""),
            )

        state = nets.fit(
            model,
            opt,
            epochs=epochs,
            epoch=lambda e: self._epoch(model, opt, r, e, epochs),
            check=lambda: self._check_loss(model),
            patience=self.s.patience,
            checkpoint=f,
            checkpoint_every=self.s.checkpoint_every,
            should_cancel=self.cancel,
            cancelled=f"latent size {r}",
            report=report,
            resumed=resumed,
            deadline=deadline,
            report_on_check=True,
        )
        self.epochs_run += state["epochs_run"]
        return model, {
            "train_loss": state["train_loss"] * sq2,
            "val_loss": state["val_loss"] * sq2,
            "best_val_loss": state["best_loss"] * sq2,
            "epochs_trained": state["epoch"],
            "best_epoch": state["best_epoch"],
            "stopped": state["stopped"],
        }


def _learning_rate(s, epoch: int, epochs: int) -> float:
    """The learning rate of ``epoch`` of a network trained ``epochs`` epochs."""
    if s.lr_schedule == "constant":
        return s.learning_rate
    t = epoch / max(epochs - 1, 1)
    return s.learning_rate * (0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * t)))


def _export(model: _AE, activation: str, scale: float, q_train: np.ndarray) -> tuple[MLP, MLP]:
    """Encoder ``q -> z`` and decoder ``z -> q`` as float64 numpy MLPs, checked against torch."""
    encoder = to_numpy_mlp(model.encoder, activation, in_scale=scale)
    decoder = to_numpy_mlp(model.decoder, activation, out_scale=scale)
    q = q_train[even_indices(len(q_train), _VERIFY_POSES)]
    enc64 = copy64(model.encoder)
    dec64 = copy64(model.decoder)
    with torch.no_grad():
        z_t = enc64(torch.as_tensor(q / scale, dtype=torch.float64)).numpy()
        q_t = dec64(torch.as_tensor(z_t, dtype=torch.float64)).numpy() * scale
    check_export("encoder", encoder.forward(q), z_t, _VERIFY_TOL)
    check_export("decoder", decoder.forward(z_t), q_t, _VERIFY_TOL)
    # Make rest exact: q = 0 is the rest shape, so shift the decoder's output so that
    # phi(enc(0)) = 0. Otherwise the rest pose would carry elastic stress and an object left
    # alone would drift, and the first simulated frame would jump away from the mesh.
    z0 = encoder.forward(np.zeros(encoder.in_dim))
    decoder.b[-1] = decoder.b[-1] - decoder.forward(z0)
    return encoder, decoder
