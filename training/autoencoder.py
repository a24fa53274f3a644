"""Training of the autoencoder latent-space model of Fulton et al. 2019 (sections 4 and 5.3).

Pipeline (one model per mesh and physics setup); stages 1, 3 (cubature) and the end are
:mod:`.common`'s, the rest is this method's:

1. Mass-weighted PCA of the bake displacements (:func:`.common.pod_basis`): ``U`` (3n, k),
   M-orthonormal, so the PCA coordinates ``q = U^T M (x - X)`` (eq. 6 with our
   M-orthonormal ``U``) are the outer linear layer of the network.
2. An autoencoder in PCA coordinates: encoder ``q (k) -> z (r)`` and decoder
   ``phi: z (r) -> q (k)``, MLPs with ELU hidden layers and linear (identity) output
   layers, trained with Adam on the loss of eq. 7, ``mean_i ||phi(enc(q_i)) - q_i||^2``.
   Because ``U`` is M-orthonormal this is the mass-weighted reconstruction error of the
   displacements (restricted to the PCA span). The full decode is ``psi(z) = X + U phi(z)``.
   With ``latent_dim=None`` the latent size ``r`` grows from ``latent_start`` until the
   largest per-vertex error on held-out bakes is within the latent tolerance (sec. 4.3).
   Exported to torch-free :class:`core.nnet.MLP` networks (float64), checked against torch.
3. Optimized cubature on the PCA basis ``U`` fitted on PCA-projected training poses (sec. 5.3)
   (:func:`.common.fit_cubature`).
4. A held-out rollout with :mod:`core.methods.autoencoder` and the model file (method
   ``"autoencoder"``, :meth:`.common.TrainingRun.finish`).

torch is imported here and only here (never in ``core``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core import registry
from ..core.errors import JobCancelled, NeuralRomError
from ..core.files import atomic_path
from ..core.methods.autoencoder import NAME
from ..core.methods.autoencoder import save as save_autoencoder_model
from ..core.nnet import MLP
from ..core.subspace import Subspace
from .common import Checkpoints, Report, TrainingRun, even_indices, fit_cubature, pod_basis

# At most one progress message / metric event per this many seconds during the epochs.
_THROTTLE_S = 0.5
# Frames per block when full-space errors are evaluated (bounds temporary memory).
_BLOCK = 256
# Training poses the exported networks are compared with torch on.
_VERIFY_POSES = 256
_VERIFY_TOL = 1e-6

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
        Latent size ``r``; None searches it: ``r = latent_start, latent_start + 1, ...``
        until the max per-vertex reconstruction error ``|x - X - U phi(enc(q))|`` on the
        held-out bakes (training frames when none is held out) is within the latent tolerance.
    latent_tolerance : float or None
        Metres. Default: twice the PCA tolerance (Fulton's 3 mm PCA / 6 mm latent), or twice
        the PCA error reached when ``k`` is given. A target below the PCA error (the
        floor: the decoder's output lies in the PCA span) cannot be met.
    latent_start : int
    max_latent_dim : int or None
        Largest ``r`` the search tries (default ``k``). When none meets the tolerance the
        most accurate one is kept, with a warning.
    hidden : list of int
        Hidden layer widths of encoder and decoder (the decoder mirrors them).
    activation : str
        Hidden activation, ``"elu"`` (Fulton 2019, sec. 4.3); output layers are linear.
    epochs, batch_size, learning_rate, weight_decay : Adam training (sec. 4.4: 256, 1e-3).
    lr_schedule : str
        ``"constant"`` (Fulton's plain Adam) or ``"cosine"``: the learning rate decays from
        ``learning_rate`` to 1% of it over the epochs (a function of the epoch alone, so a
        resumed run follows the same schedule); it lowers the max vertex error markedly at
        the same epoch count.
    checkpoint_every : int
        Epochs between checkpoints (when a checkpoint directory is given).
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
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    lr_schedule: str = "cosine"
    checkpoint_every: int = 100
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

    def __post_init__(self) -> None:
        self.__dict__.update(registry.get(NAME).validate(asdict(self)))

    @classmethod
    def from_dict(cls, d: dict | None) -> AutoencoderSettings:
        """Settings checked by value against the method's registry record."""
        return cls(**registry.get(NAME).validate(d))


_ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "softplus": nn.Softplus, "relu": nn.ReLU}


# ------------------------------------------------------------------------------------------
# Networks
# ------------------------------------------------------------------------------------------


def build_mlp(sizes: list[int], activation: str = "elu") -> nn.Sequential:
    """``Linear -> act -> ... -> Linear``: hidden activations, linear (identity) output layer.

    Parameters
    ----------
    sizes : [in, hidden..., out]
    """
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(_ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def to_numpy_mlp(
    net: nn.Sequential, activation: str, in_scale: float = 1.0, out_scale: float = 1.0
) -> MLP:
    """The float64 :class:`core.nnet.MLP` computing ``out_scale * net(x / in_scale)``.

    The scales fold exactly into the first and last (linear) layers.
    """
    linears = [m for m in net if isinstance(m, nn.Linear)]
    W = [m.weight.detach().to("cpu", torch.float64).numpy().copy() for m in linears]
    b = [m.bias.detach().to("cpu", torch.float64).numpy().copy() for m in linears]
    W[0] = W[0] / in_scale
    W[-1] = W[-1] * out_scale
    b[-1] = b[-1] * out_scale
    return MLP(W, b, [activation] * (len(W) - 1) + ["identity"])


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

    Whole trajectories are held out for validation. Checkpoints (PCA basis, network and
    optimizer every ``checkpoint_every`` epochs, cubature) go to ``checkpoint_dir``; a run
    cancelled part-way resumes from them when the bakes and settings are the same, and
    ends with the same weights as an uninterrupted run.

    Parameters
    ----------
    settings : the method's settings (:class:`AutoencoderSettings` fields)
    device : torch device (``"cpu"``, ``"cuda"``, ``"auto"``)
    should_cancel : polled between stages and epochs; True raises :class:`JobCancelled`
    metric : ``metric(dict)`` of training metrics (per-epoch losses, at most ~2 per second)

    The other parameters are :meth:`.common.TrainingRun.start`'s.

    Returns
    -------
    The result record of :meth:`.common.TrainingRun.finish`, with ``latent_dim``, the PCA and
    autoencoder errors (m), the latent-size search and the final losses.
    """
    dev = _torch_device(device)
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

    # 2. autoencoder in PCA coordinates (eq. 7), latent size by tolerance (sec. 4.3) --------
    q_train = sub.encode(train_x)
    q_val = sub.encode(val_x) if len(val_x) else np.zeros((0, sub.k))
    q_check = q_val if len(val_x) else q_train
    if s.latent_dim is not None:
        candidates = [min(int(s.latent_dim), sub.k)]
        if s.latent_dim > sub.k:
            warnings.append(
                f"latent_dim {s.latent_dim} exceeds the PCA size {sub.k}; using {sub.k}."
            )
        target = None
    else:
        target = s.latent_tolerance
        if target is None:
            target = 2.0 * (pca_tol if pca_tol is not None else pca_err_val)
        if target <= pca_err_val:
            warnings.append(
                f"The latent tolerance {target * 1000:.3g} mm is below the PCA error "
                f"{pca_err_val * 1000:.3g} mm, which no autoencoder on this basis can beat: "
                "raise latent_tolerance or lower tolerance."
            )
        top = min(int(s.max_latent_dim or sub.k), sub.k)
        candidates = list(range(min(int(s.latent_start), top), top + 1))
    n_cand = len(candidates)

    trainer = _Trainer(s, q_train, q_val, dev, run.checkpoints, run.should_cancel, run.emit)

    def fit(r: int):
        ci = candidates.index(r)
        lo = _P_AE + (_P_CUB - _P_AE) * ci / n_cand
        hi = _P_AE + (_P_CUB - _P_AE) * (ci + 1) / n_cand

        def epoch_progress(done, total, msg):
            run.say(lo + (hi - lo) * done / max(total, 1), msg)

        model, hist = trainer.train(r, epoch_progress, lambda qh: _max_error(check_x, sub, qh))
        err = _max_error(check_x, sub, _predict(model, q_check, trainer))
        run.emit({"latent_dim": r, "latent_max_error_val_m": err, "search": target is not None})
        return model, err, hist

    r, model, searched = search_latent_size(candidates, fit, target)
    entry = next(e for e in searched if e["latent_dim"] == r)
    if target is not None and entry["max_error_val_m"] > target:
        warnings.append(
            f"No latent size up to {candidates[-1]} reached the latent tolerance "
            f"{target * 1000:.3g} mm; kept r = {r} ({entry['max_error_val_m'] * 1000:.3g} mm). "
            "Train longer (epochs), raise latent_tolerance or max_latent_dim."
        )
    run.say(
        _P_CUB, f"autoencoder: r = {r}, max vertex error {entry['max_error_val_m'] * 1000:.3g} mm"
    )

    # export to numpy, checked against torch
    encoder, decoder = _export(model, s.activation, trainer.scale, q_train)
    ae_err_train = _max_error(train_x, sub, decoder.forward(encoder.forward(q_train)))
    ae_err_val = _max_error(check_x, sub, decoder.forward(encoder.forward(q_check)))
    # PCA of the latent size alone: what the latent space buys over a linear space of r DOFs
    pca_r_err = sub.truncated(r).reconstruction_error(check_x) if r < sub.k else pca_err_val
    run.check_cancel("Training cancelled after the autoencoder (checkpointed).")

    # 3. cubature on the PCA layer U (Fulton 2019, sec. 5.3) --------------------------------
    cub = fit_cubature(run, sub, train_x, train_groups, val_x, project=True, span=(_P_CUB, _P_ROLL))

    # 4. held-out rollout and the model file ------------------------------------------------
    save = functools.partial(
        save_autoencoder_model,
        subspace=sub,
        cubature=cub,
        contact=run.contact_sample(),
        decoder=decoder,
        encoder=encoder,
    )
    return run.finish(
        out,
        save,
        k=sub.k,
        dofs=r,
        max_error_val_m=ae_err_val,
        cubature=cub,
        rollout=s.rollout,
        at=_P_ROLL,
        metrics={
            "latent_dim": r,
            "pca_max_error_train_m": pca_err_train,
            "pca_max_error_val_m": pca_err_val,
            "pca_r_max_error_val_m": pca_r_err,
            "ae_max_error_train_m": ae_err_train,
            "ae_max_error_val_m": ae_err_val,
            "latent_tolerance_m": target,
            "latent_search": searched,
            "final_train_loss": entry.get("train_loss"),
            "final_val_loss": entry.get("val_loss"),
            "epochs": s.epochs,
        },
        metadata={
            "lbfgs": {
                "window": s.lbfgs_window,
                "tolerance": s.lbfgs_tolerance,
                "max_iters": s.lbfgs_max_iters,
            }
        },
    )


def train_autoencoder(
    bakes, out: str | Path, settings: AutoencoderSettings | None = None, **job
) -> dict:
    """:func:`train` with typed settings (scripts, tests, benchmarks)."""
    return train(bakes, out, asdict(settings or AutoencoderSettings()), **job)


def search_latent_size(
    candidates: list[int], fit: Callable, target: float | None
) -> tuple[int, object, list[dict]]:
    """Grow the latent size until the error meets ``target`` (Fulton 2019, sec. 4.3).

    Parameters
    ----------
    candidates : latent sizes in the order they are tried
    fit : ``fit(r) -> (model, max_error_m, history_dict)`` trains one latent size
    target : metres, or None to train only ``candidates[0]``

    Returns
    -------
    r, model, searched
        The first ``r`` whose error is ``<= target`` (the most accurate one tried when none
        is), its model, and one dict per size tried (``latent_dim``, ``max_error_val_m`` and
        the history).
    """
    searched: list[dict] = []
    best = None
    for r in candidates if target is not None else candidates[:1]:
        model, err, hist = fit(r)
        searched.append({"latent_dim": r, "max_error_val_m": err, **hist})
        if best is None or err < best[2]:
            best = (r, model, err)
        if target is not None and err <= target:
            best = (r, model, err)
            break
    return best[0], best[1], searched


def _torch_device(name: str) -> torch.device:
    name = (name or "auto").lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NeuralRomError(
            "Training device is CUDA, but torch sees no CUDA GPU: install a CUDA build of torch "
            "or set the device to Auto or CPU."
        )
    if name != "cpu" and not name.startswith("cuda"):
        raise NeuralRomError(f"Unknown training device {name!r}: use auto, cpu or cuda.")
    return torch.device(name)


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
    """Adam on eq. 7 for one latent size at a time, with checkpoints and resume.

    The PCA coordinates are divided by one scalar ``scale`` (their RMS) so Adam sees O(1)
    numbers whatever the mesh's mass and size; one scalar keeps the loss proportional to
    eq. 7 (the mass-weighted error), and it folds exactly into the first and last linear
    layers at export.
    """

    def __init__(self, s, q_train, q_val, device, checkpoints: Checkpoints, cancel, emit):
        self.s = s
        self.device = device
        self.dtype = torch.float32
        rms = float(np.sqrt(np.mean(np.sum(q_train**2, axis=1)))) if len(q_train) else 1.0
        self.scale = rms if rms > 0 else 1.0
        self.k = q_train.shape[1]
        self.q_train = torch.as_tensor(q_train / self.scale, dtype=self.dtype, device=device)
        self.q_val = (
            torch.as_tensor(q_val / self.scale, dtype=self.dtype, device=device)
            if len(q_val)
            else None
        )
        self.checkpoints, self.cancel, self.emit = checkpoints, cancel, emit

    def _file(self, r: int) -> Path | None:
        return self.checkpoints.file("ae", f"_r{r:03d}.pt")

    def train(self, r: int, progress, max_error) -> tuple[_AE, dict]:
        s, dev = self.s, self.device
        det = torch.are_deterministic_algorithms_enabled()
        if dev.type == "cpu":
            torch.use_deterministic_algorithms(True)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(s.seed)
                model = _AE(self.k, r, s.hidden, s.activation).to(device=dev, dtype=self.dtype)
            opt = torch.optim.Adam(
                model.parameters(), lr=s.learning_rate, weight_decay=s.weight_decay
            )
            start, hist = 0, {"train_loss": None, "val_loss": None}
            f = self._file(r)
            if f is not None and f.exists():
                state = torch.load(f, map_location=dev, weights_only=True)
                model.load_state_dict(state["model"])
                opt.load_state_dict(state["optimizer"])
                start = int(state["epoch"])
                progress(start, s.epochs, f"latent {r}: resumed at epoch {start} from checkpoint")
            return model, self._loop(model, opt, r, start, f, progress, max_error, hist)
        finally:
            torch.use_deterministic_algorithms(det)

    def _loop(self, model, opt, r, start, f, progress, max_error, hist) -> dict:
        s = self.s
        N = len(self.q_train)
        last = time.perf_counter()
        sq2 = self.scale**2
        for epoch in range(start, s.epochs):
            if self.cancel():
                raise JobCancelled(
                    f"Training cancelled at epoch {epoch} of latent size {r}"
                    + (" (resumes from the last checkpoint)." if f else ".")
                )
            for g in opt.param_groups:
                g["lr"] = _learning_rate(s, epoch)
            model.train()
            # a permutation per (seed, r, epoch): no generator state to checkpoint
            perm = torch.as_tensor(
                np.random.default_rng([s.seed, r, epoch]).permutation(N), device=self.device
            )
            total = 0.0
            for i in range(0, N, s.batch_size):
                batch = self.q_train[perm[i : i + s.batch_size]]
                # eq. (7), Fulton 2019: squared error in PCA coordinates
                loss = ((model(batch) - batch) ** 2).sum(dim=1).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(batch)
            hist["train_loss"] = total / N * sq2
            done = epoch + 1
            now = time.perf_counter()
            if f is not None and (done % s.checkpoint_every == 0 or done == s.epochs):
                _torch_save(
                    f,
                    {
                        "model": model.state_dict(),
                        "optimizer": opt.state_dict(),
                        "epoch": done,
                    },
                )
            if now - last >= _THROTTLE_S or done == s.epochs:
                last = now
                values = {"latent_dim": r, "epoch": done, "train_loss": hist["train_loss"]}
                if self.q_val is not None:
                    model.eval()
                    with torch.no_grad():
                        qv = self.q_val
                        pred = model(qv)
                        hist["val_loss"] = float(((pred - qv) ** 2).sum(1).mean()) * sq2
                        values["val_loss"] = hist["val_loss"]
                        values["val_max_error_m"] = max_error(
                            pred.to("cpu", torch.float64).numpy() * self.scale
                        )
                self.emit(values)
                progress(done, s.epochs, f"latent {r}: epoch {done}/{s.epochs}")
        return dict(hist)


def _learning_rate(s: AutoencoderSettings, epoch: int) -> float:
    if s.lr_schedule == "constant":
        return s.learning_rate
    t = epoch / max(s.epochs - 1, 1)
    return s.learning_rate * (0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * t)))


def _torch_save(path: Path, obj) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _export(model: _AE, activation: str, scale: float, q_train: np.ndarray) -> tuple[MLP, MLP]:
    """Encoder ``q -> z`` and decoder ``z -> q`` as float64 numpy MLPs, checked against torch."""
    encoder = to_numpy_mlp(model.encoder, activation, in_scale=scale)
    decoder = to_numpy_mlp(model.decoder, activation, out_scale=scale)
    q = q_train[even_indices(len(q_train), _VERIFY_POSES)]
    enc64 = _copy64(model.encoder)
    dec64 = _copy64(model.decoder)
    with torch.no_grad():
        z_t = enc64(torch.as_tensor(q / scale, dtype=torch.float64)).numpy()
        q_t = dec64(torch.as_tensor(z_t, dtype=torch.float64)).numpy() * scale
    z_np = encoder.forward(q)
    q_np = decoder.forward(z_t)
    for name, a, b in (("encoder", z_np, z_t), ("decoder", q_np, q_t)):
        err = float(np.max(np.abs(a - b), initial=0.0)) / (
            1.0 + float(np.max(np.abs(b), initial=0.0))
        )
        if not err <= _VERIFY_TOL:
            raise NeuralRomError(
                f"The exported {name} differs from the trained network by {err:.3g} "
                "(relative): the export is broken; report this as a bug."
            )
    # Make rest exact: q = 0 is the rest shape, so shift the decoder's output so that
    # phi(enc(0)) = 0. Otherwise the rest pose would carry elastic stress and an object left
    # alone would drift, and the first simulated frame would jump away from the mesh.
    z0 = encoder.forward(np.zeros(encoder.in_dim))
    decoder.b[-1] = decoder.b[-1] - decoder.forward(z0)
    return encoder, decoder


def _copy64(net: nn.Sequential) -> nn.Sequential:
    sizes = [m.in_features for m in net if isinstance(m, nn.Linear)]
    sizes.append([m for m in net if isinstance(m, nn.Linear)][-1].out_features)
    act = next((type(m) for m in net if not isinstance(m, nn.Linear)), nn.ELU)
    name = next(k for k, v in _ACTIVATIONS.items() if v is act)
    out = build_mlp(sizes, name).to(torch.float64)
    out.load_state_dict({k: v.to("cpu", torch.float64) for k, v in net.state_dict().items()})
    return out
