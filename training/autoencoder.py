"""Training of the autoencoder latent-space model of Fulton et al. 2019 (sections 4 and 5.3).

Pipeline (one model per mesh and physics setup); stages 1, 4 (cubature) and the end are
:mod:`.common`'s, the rest is this method's:

1. Mass-weighted PCA of the bake displacements (:func:`.common.pod_basis`): ``U`` (3n, k),
   M-orthonormal, so the PCA coordinates ``q = U^T M (x - X)`` (eq. 6 with our
   M-orthonormal ``U``) are the outer linear layer of the network.
2. An autoencoder in PCA coordinates: encoder ``q (k) -> z (r)`` and decoder
   ``phi: z (r) -> q (k)``, MLPs with ELU hidden layers and linear (identity) output
   layers, trained with Adam on the loss of eq. 7, ``mean_i ||phi(enc(q_i)) - q_i||^2``.
   Because ``U`` is M-orthonormal this is the mass-weighted reconstruction error of the
   displacements (restricted to the PCA span). The full decode is ``psi(z) = X + U phi(z)``.
   Every network trains with **early stopping**: after each epoch the same loss is measured
   on the held-out bakes (the training frames when none is held out); training stops after
   ``patience`` epochs without a new best, and the best weights are kept.
   Exported to torch-free :class:`core.nnet.MLP` networks (float64), checked against torch.
3. The latent size ``r`` (``latent_dim``, or searched when it is None), **coarse to fine**
   (:func:`search_latent_size`): Fulton's sec. 4.3 grows ``r`` one at a time, every size
   trained fully (sizes 1 to 57 at 2,000 epochs took 21 minutes); here networks of
   ``r = latent_start, 2 latent_start, 4 latent_start, ...`` (at most ``max_latent_dim``) train
   until one is within the latent tolerance on held-out bakes, then bisection between the
   last size that missed it and the first that met it: ``O(log r)`` networks, not ``r``.
   Search networks train ``search_epochs``, by default as many as the time budget allows up
   to ``epochs`` (then the chosen one is the final network; else the chosen size trains again
   for ``epochs``). A briefly trained network is less accurate than a fully trained one, so a
   short search errs towards a larger ``r``, not a less accurate model.
   **Cost first** (:class:`TrainingPlan`): a few epochs are timed, the worst case (the
   longest search, then the final network) is estimated and reported ("about N minutes")
   before any network trains, and when it exceeds ``time_budget`` the epochs are cut to fit
   it, with a warning. A deadline stops a network that still runs late (keeping its best
   weights), so the network training never takes much more than the budget.
   **Never silently worse than PCA**: the result is compared on the held-out bakes with PCA
   truncated to ``r`` (a linear space of as many coordinates) and with the whole PCA layer
   (``k``). A network less accurate than PCA-``r`` is replaced by PCA (``pca_fallback``: a
   linear decoder, run by the same latent runtime) with ``r`` modes, or the fewest within the
   latent tolerance; either case is a warning, as is a result far above its PCA layer.
4. Optimized cubature on the PCA basis ``U`` fitted on PCA-projected training poses (sec. 5.3)
   (:func:`.common.fit_cubature`).
5. A held-out rollout with :mod:`core.methods.autoencoder` and the model file (method
   ``"autoencoder"``, :meth:`.common.TrainingRun.finish`).
6. **Never silently worse than the linear model** (``keep_linear``, :func:`keep_better`):
   the linear model of the same bakes at its default settings (the same split; it trains in
   seconds) replays the same held-out bake; when it replays better (a smaller largest vertex
   error) it replaces the autoencoder at ``out`` and the result is its record. Either way the
   result's ``choice`` says which was kept, in one sentence with both replay errors: the
   latent search judges the network's shapes, not its dynamics, and on an animated pinned
   bar it chose 2 latents that replayed at 272 mm against the linear model's 16.3 mm.

Resume. The checkpoints (:class:`.common.Checkpoints`) are the PCA basis, the plan, every
network every ``checkpoint_every`` epochs and when it ends (its weights, Adam's state, the
epoch, the best weights so far with their held-out loss and epoch, why it stopped), and the
cubature; each is written atomically, so a run killed at any instant leaves the previous
one. Started again with the same bakes and settings, a run reads back the stages it finished
(a finished network is not trained again) and continues the network it was training from its
last checkpoint: it does only the rest. The epochs draw nothing from a random generator (the
batch order of epoch ``e`` of latent size ``r`` is a permutation keyed by ``(seed, r, e)``, and
the learning rate is a function of the epoch), so there is no generator state to save, and on
the CPU (deterministic algorithms) the resumed run ends with the uninterrupted run's weights
bit for bit. Two things depend on the machine's speed and so are not reproduced: the plan when
the budget cuts it (read back from its checkpoint by a resumed run, so resuming follows it) and
a deadline that stops a network; both are warnings.

torch is imported here and only here (never in ``core``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core import registry
from ..core.errors import JobCancelled, NeuralRomError
from ..core.files import temporary_path
from ..core.methods.autoencoder import NAME
from ..core.methods.autoencoder import save as save_autoencoder_model
from ..core.nnet import MLP
from ..core.subspace import Subspace
from . import nets
from .common import Checkpoints, Report, TrainingRun, even_indices, fit_cubature, pod_basis
from .nets import build_mlp, check_export, copy64, to_numpy_mlp, torch_device, torch_threads

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
# The fewest epochs a cut plan gives a search network / the final network.
_MIN_SEARCH_EPOCHS, _MIN_EPOCHS = 20, 50

# Progress fractions of the stages.
_P_BASIS, _P_AE, _P_CUB, _P_ROLL = 0.05, 0.15, 0.75, 0.9


@dataclass
class AutoencoderSettings:
    """Typed settings of an autoencoder model: the fields, defaults and checks of the
    method's registry record (``core.methods.autoencoder.METHOD.settings``). The device is
    not a setting: it is the job's (``train(..., device=...)``).

    Attributes
    ----------
    k, tolerance, max_k : the PCA layer (:func:`.common.pod_basis`; Fulton 2019 sec. 4.3)
    latent_dim : int or None
        Latent size ``r``; None searches the smallest size whose max per-vertex
        reconstruction error ``|x - X - U phi(enc(q))|`` on the held-out bakes (training
        frames when none is held out) is within the latent tolerance, coarse to fine
        (:func:`search_latent_size`).
    latent_tolerance : float or None
        Metres. Default: twice the PCA tolerance (Fulton's 3 mm PCA / 6 mm latent), or twice
        the PCA error reached when ``k`` is given. A target below the PCA error (the
        floor: the decoder's output lies in the PCA span) cannot be met.
    latent_start : int
        The search's first size (then doubled).
    max_latent_dim : int or None
        Largest ``r`` the search tries (default ``k``). When none meets the tolerance the
        most accurate one is kept, with a warning.
    hidden : list of int
        Hidden layer widths of encoder and decoder (the decoder mirrors them).
    activation : str
        Hidden activation, ``"elu"`` (Fulton 2019, sec. 4.3); output layers are linear.
    epochs : int
        Most epochs of the final network (fewer when early stopping or the budget ends it).
    search_epochs : int or None
        Most epochs of each network the latent-size search trains; None: as many as the
        time budget allows, up to ``epochs`` (:func:`plan_training`).
    patience : int
        Early stopping: epochs without a better held-out loss before a network stops.
    time_budget : float
        Seconds the network training (search and final network) may take; the epochs are cut
        to fit the estimate (:class:`TrainingPlan`), and a deadline stops what runs late.
    batch_size, learning_rate, weight_decay : Adam training (sec. 4.4: 256, 1e-3).
    lr_schedule : str
        ``"constant"`` (Fulton's plain Adam) or ``"cosine"``: the learning rate decays from
        ``learning_rate`` to 1% of it over a network's epochs (a function of the epoch alone,
        so a resumed run follows the same schedule); it lowers the max vertex error markedly
        at the same epoch count.
    checkpoint_every : int
        Epochs between checkpoints (when a checkpoint directory is given).
    pca_fallback : bool
        Save PCA truncated to ``r`` (a linear decoder) when the network is less accurate than
        it on held-out bakes.
    cubature_target, max_cubature, cubature_poses, cubature_validation : optimized cubature
        on ``U`` (sec. 5.3; :func:`.common.fit_cubature`).
    max_frames, validation_fraction, seed : the frames and the split (:mod:`.common`).
    lbfgs_window, lbfgs_tolerance, lbfgs_max_iters : the runtime's L-BFGS (sec. 5.2:
        window 8, ``|grad E| < eps max(|z|, 1)`` with ``eps = 1e-8``), stored in the model.
    rollout : bool
        Replay a held-out bake with the latent runtime and report its error (costs one
        reduced simulation of that bake).
    """

    k: int | None = None
    tolerance: float | None = None
    max_k: int = 60
    latent_dim: int | None = None
    latent_tolerance: float | None = None
    latent_start: int = 1
    max_latent_dim: int | None = None
    hidden: list = field(default_factory=lambda: [100, 100])
    activation: str = "elu"
    epochs: int = 2000
    search_epochs: int | None = None
    patience: int = 200
    time_budget: float = 300.0
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    lr_schedule: str = "cosine"
    checkpoint_every: int = 100
    pca_fallback: bool = True
    cubature_target: float = 0.05
    max_cubature: int = 500
    cubature_poses: int = 200
    cubature_validation: float = 0.2
    max_frames: int = 2000
    validation_fraction: float = 0.2
    seed: int = 0
    lbfgs_window: int = 8
    lbfgs_tolerance: float = 1e-8
    lbfgs_max_iters: int = 100
    rollout: bool = True
    keep_linear: bool = True

    def __post_init__(self) -> None:
        self.__dict__.update(registry.get(NAME).validate(asdict(self)))

    @classmethod
    def from_dict(cls, d: dict | None) -> AutoencoderSettings:
        """Settings checked by value against the method's registry record."""
        return cls(**registry.get(NAME).validate(d))


# ------------------------------------------------------------------------------------------
# The plan: the cost before anything trains
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingPlan:
    """The epochs of a run's networks, sized to the time budget before any trains
    (checkpoint stage ``plan``: a resumed run follows the plan of the run it continues).

    Attributes
    ----------
    search_epochs : most epochs of each search network
    epochs : most epochs of the final network
    searches : most networks the latent-size search can train (its worst case,
        :func:`search_worst_case`; 0 when the latent size is given)
    epoch_s : seconds per epoch (training and the held-out loss), timed on this machine
    estimate_s : seconds of the worst case as planned
    wanted_s : seconds of the worst case with the epochs of the settings (every search
        network trained ``epochs`` when ``search_epochs`` is automatic)
    cut : the budget cut epochs the settings ask for (the final network's, or an explicit
        ``search_epochs``)
    """

    search_epochs: int
    epochs: int
    searches: int
    epoch_s: float
    estimate_s: float
    wanted_s: float
    cut: bool

    @property
    def reuse_search(self) -> bool:
        """The search networks train as long as the final one, so the chosen size's search
        network is the final network (not trained again)."""
        return self.searches > 0 and self.search_epochs >= self.epochs

    def to_arrays(self) -> dict:
        return {f.name: np.array(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_arrays(cls, d: dict) -> TrainingPlan:
        return cls(**{f.name: d[f.name].item() for f in fields(cls)})


def plan_training(
    epochs: int,
    search_epochs: int | None,
    searches: int,
    epoch_s: float,
    time_budget: float,
) -> TrainingPlan:
    """Epochs that fit ``time_budget`` seconds at ``epoch_s`` seconds per epoch.

    The worst case is ``searches`` networks of ``search_epochs`` epochs, then one of
    ``epochs`` (none when the search networks are as long: the chosen one is kept).

    * ``search_epochs`` None (automatic): every search network gets ``epochs`` when that
      fits the budget; else the final network keeps ``epochs`` and the search networks
      share the rest, when that gives each at least a quarter of ``epochs`` (fewer rank the
      sizes poorly: on the swung bar of ``bench/latent.py`` 300 of 2,000 epochs left
      r = 2 at 74 mm, against 25 mm fully trained); else both are scaled down to fit.
    * ``search_epochs`` given (at most ``epochs``): over the budget, both counts are scaled
      by ``time_budget / worst case``.

    No network gets fewer than :data:`_MIN_SEARCH_EPOCHS` / :data:`_MIN_EPOCHS` (or the
    settings' own counts when smaller), so a tiny budget can be exceeded (the deadline of
    :func:`train` still holds to the plan's estimate).
    """
    E, S, t = int(epochs), int(searches), float(epoch_s)
    n = time_budget / t if t > 0 else math.inf  # epochs the budget affords

    def floor_s(x: float) -> int:
        return max(min(E, _MIN_SEARCH_EPOCHS), int(x))

    def floor_e(x: float) -> int:
        return max(min(E, _MIN_EPOCHS), int(x))

    def cost(se: int, e: int) -> float:
        return t * (S * se + (0 if S and se >= e else e))

    if S == 0:
        se = e = E if E <= n else floor_e(n)
        wanted = cost(E, E)
        cut = e < E
    elif search_epochs is None:
        wanted = cost(E, E)
        if S * E <= n:
            se = e = E
        elif E + S * E / 4 <= n:
            se, e = floor_s((n - E) / S), E
        else:
            f = n / (E + S * E / 4)
            se, e = floor_s(E / 4 * f), floor_e(E * f)
        cut = e < E
    else:
        se, e = min(int(search_epochs), E), E
        wanted = cost(se, e)
        if wanted > time_budget:
            f = time_budget / wanted
            same = se == e  # keep "the search network is the final one"
            se, e = floor_s(se * f), floor_e(e * f)
            se = e if same else min(se, e)
        cut = cost(se, e) < wanted
    return TrainingPlan(se, e, S, t, cost(se, e), wanted, bool(cut))


def _duration(seconds: float) -> str:
    """'about 40 seconds', 'about 3 minutes'."""
    if seconds < 90:
        return f"about {max(seconds, 1):.0f} seconds"
    return f"about {seconds / 60:.0f} minutes"


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


def train(
    bakes,
    out: str | Path,
    settings: dict | None = None,
    *,
    device: str = "auto",
    expect_mesh_hash: str | None = None,
    checkpoint_dir: str | Path | None = None,
    progress: Report | None = None,
    should_cancel: Callable[[], bool] | None = None,
    metric: Callable[[dict], None] | None = None,
) -> dict:
    """Train an autoencoder latent-space model from bakes of one mesh and write it to ``out``;
    the registry's trainer entry point (``core.methods.autoencoder.METHOD``).

    Whole trajectories are held out for validation. Checkpoints (PCA basis, plan, every
    network every ``checkpoint_every`` epochs, cubature) go to ``checkpoint_dir``; a run
    cancelled or killed part-way resumes from them when the bakes and settings are the same,
    does only the rest, and ends with the same weights as an uninterrupted run (see the
    module docstring).

    Parameters
    ----------
    settings : the method's settings (:class:`AutoencoderSettings` fields)
    device : torch device (``"cpu"``, ``"cuda"``, ``"auto"``)
    should_cancel : polled between stages and epochs; True raises :class:`JobCancelled`
    metric : ``metric(dict)`` of training metrics: the estimate (``estimate_s``), per-epoch
        losses (at most ~2 per second), each network's held-out error, the comparison with PCA

    The other parameters are :meth:`.common.TrainingRun.start`'s.

    Returns
    -------
    The result record of :meth:`.common.TrainingRun.finish`, with ``latent_dim``, the PCA and
    autoencoder errors (m; ``pca_r_max_error_val_m`` is PCA truncated to ``latent_dim``), the
    latent-size search, the plan (``estimate_s``, ``time_budget_s``), the final network's
    epochs and why it stopped, ``fallback`` ("pca" when PCA-r replaced the network) and
    ``epochs_run`` (epochs this run trained: a resumed run counts only its own). With
    ``keep_linear`` and a held-out replay, :func:`keep_better`'s record: the linear model's
    when it replays better (its file at ``out``), with ``choice`` either way.
    """
    dev = torch_device(device)
    run = TrainingRun.start(
        NAME,
        bakes,
        settings,
        device=str(dev),
        expect_mesh_hash=expect_mesh_hash,
        checkpoint_dir=checkpoint_dir,
        progress=progress,
        should_cancel=should_cancel,
        metric=metric,
    )
    s = AutoencoderSettings(**run.settings)
    warnings = run.warnings
    train_x, train_groups, val_x = run.bakes.training_frames(s.max_frames)
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
        out,
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
        linear = _train_linear(run, bakes, out, s, expect_mesh_hash)
    except JobCancelled:
        raise
    except NeuralRomError as e:  # the autoencoder stays; say why nothing was compared
        result["warnings"].append(f"The linear model of these bakes did not train ({e}).")
        return result
    return keep_better(result, linear)


def _train_linear(run: TrainingRun, bakes, out, s: AutoencoderSettings, mesh_hash) -> dict:
    """The linear model of ``bakes`` at its default settings and this run's split (so it
    replays the same held-out bake), written to a temporary beside ``out``; its record."""
    from . import linear

    split = {"validation_fraction": s.validation_fraction, "seed": s.seed}
    return linear.train(
        bakes,
        temporary_path(out),
        split,
        expect_mesh_hash=mesh_hash,
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


def train_autoencoder(
    bakes, out: str | Path, settings: AutoencoderSettings | None = None, **job
) -> dict:
    """:func:`train` with typed settings (scripts, tests, benchmarks)."""
    return train(bakes, out, asdict(settings or AutoencoderSettings()), **job)


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


def _latent_sizes(s: AutoencoderSettings, k: int, pca_tol, pca_err_val: float, warnings):
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


def _plan(run: TrainingRun, s: AutoencoderSettings, trainer, searches: int, r: int):
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
        f"autoencoder: network training {_duration(plan.estimate_s)} ({work}, "
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
            f"{_duration(plan.wanted_s)}, over the time budget of {s.time_budget:g} s: cut to "
            f"{plan.epochs} epochs"
            + (f" (search networks: {plan.search_epochs})" if plan.searches else "")
            + f", {_duration(plan.estimate_s)}. Raise Time Budget for a more accurate model "
            "(the cut depends on this machine's speed)."
        )
    return plan


def search_latent_size(
    lo: int,
    hi: int,
    fit: Callable,
    target: float,
    *,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[int, object, list[dict]]:
    """The smallest latent size in ``lo .. hi`` whose error meets ``target``, coarse to fine.

    Doubling ``r = lo, 2 lo, 4 lo, ...`` (the last one ``hi``) until one meets ``target``,
    then bisection between the last size that missed it and the first that met it. With
    errors that fall as ``r`` grows this finds the smallest size (Fulton 2019 sec. 4.3 tries
    every one) with ``O(log(hi / lo))`` trainings.

    Parameters
    ----------
    lo, hi : the sizes searched (``1 <= lo <= hi``)
    fit : ``fit(r) -> (model, max_error_m, history_dict)`` trains one latent size
    target : metres
    stop : polled between trainings; True ends the search with what it has (the deadline)

    Returns
    -------
    r, model, searched
        The smallest size tried that met ``target`` (the most accurate one tried when none
        did), its model, and one dict per size tried, in order (``latent_dim``,
        ``max_error_val_m`` and the history).
    """
    searched: list[dict] = []
    models: dict[int, tuple[object, float]] = {}

    def meets(r: int) -> bool:
        model, err, hist = fit(r)
        models[r] = (model, err)
        searched.append({"latent_dim": r, "max_error_val_m": err, **hist})
        return err <= target

    miss = met = None
    r = lo
    while True:
        if meets(r):
            met = r
            break
        miss = r
        if r >= hi or stop():
            break
        r = min(2 * r, hi)
    while met is not None and miss is not None and met - miss > 1 and not stop():
        mid = (miss + met) // 2
        if meets(mid):
            met = mid
        else:
            miss = mid
    if met is None:
        met = min(models, key=lambda r: models[r][1])
    return met, models[met][0], searched


def search_worst_case(lo: int, hi: int) -> int:
    """Most trainings :func:`search_latent_size` does between ``lo`` and ``hi``: the largest
    count over every size where the error could first meet the target (each outcome of the
    bisection is one of these)."""

    def trainings(first: int) -> int:
        def fit(r):
            return None, 0.0 if r >= first else 1.0, {}

        return len(search_latent_size(lo, hi, fit, 0.5)[2])

    return max(trainings(first) for first in range(lo, hi + 2))  # hi + 1: none meets it


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


def _learning_rate(s: AutoencoderSettings, epoch: int, epochs: int) -> float:
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
