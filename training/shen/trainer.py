"""Shen 2021's trainer, ``train(run)`` (:mod:`training.shen`'s docstring has the pipeline):
the PCA basis and its room, the sin networks (:func:`training.nets.fit`), their export with
the filter folded in, cubature, the model file."""

from __future__ import annotations

import functools
import time

import numpy as np
import torch
from torch import nn

from ...core.errors import NeuralRomError
from ...core.methods.shen import save as save_shen_model
from ...core.physics import fem as _fem
from ...core.reduced.nnet import MLP
from ...core.reduced.subspace import mass_weighted_pod
from .. import nets
from ..nets import check_export, sin_mlp, torch_device, torch_threads
from ..run import TrainingRun
from ..stages import fit_cubature, pod_basis

_VERIFY_TOL = 1e-6
#: n_p when it is not given: the paper's typical 10, at most half the PCA modes.
_DEFAULT_NP = 10
#: Energy floor of the pose weights, a fraction of the median training-pose energy.
_ENERGY_FLOOR = 0.1
_CPU_THREADS = 1


class _DAE(nn.Module):
    """Encoder ``c_tail -> z`` and decoder ``z -> c_tail`` in scaled PCA coordinates; with
    ``n_p`` > 0 (``decoder_sees_p``) both also read the scaled linear coordinates ``p``:
    ``[p; c_tail] -> z`` and ``[p; z] -> c_tail``. ``forward`` takes ``[p; c_tail]``."""

    def __init__(self, m: int, n_z: int, hidden: list[int], omega: float, n_p: int = 0) -> None:
        super().__init__()
        self.n_p = int(n_p)
        self.encoder = sin_mlp([self.n_p + m, *hidden, n_z], omega)
        self.decoder = sin_mlp([self.n_p + n_z, *reversed(hidden), m], omega)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        if not self.n_p:
            return self.decoder(self.encoder(c))
        z = self.encoder(c)
        return self.decoder(torch.cat([c[:, : self.n_p], z], dim=1))


def to_numpy(
    net: nn.Sequential,
    omega: float,
    *,
    in_scale=1.0,
    out_scale: float = 1.0,
    pad_in: int = 0,
    pad_out: int = 0,
) -> MLP:
    """A float64 :class:`core.nnet.MLP` of a :func:`sin_mlp`: ``omega`` folded into the layers
    before each sin, the input divided by ``in_scale`` (a number or one per input), the
    output times ``out_scale``, and
    ``pad_in`` zero input columns / ``pad_out`` zero output rows in front (the PCA filter)."""
    lins = [m for m in net if isinstance(m, nn.Linear)]
    W = [m.weight.detach().to("cpu", torch.float64).numpy().copy() for m in lins]
    b = [m.bias.detach().to("cpu", torch.float64).numpy().copy() for m in lins]
    acts = ["sin"] * (len(lins) - 1) + ["identity"]
    for i in range(len(lins) - 1):
        W[i] *= omega
        b[i] *= omega
    W[0] = W[0] / in_scale
    W[-1], b[-1] = W[-1] * out_scale, b[-1] * out_scale
    if pad_in:
        W[0] = np.concatenate([np.zeros((W[0].shape[0], pad_in)), W[0]], axis=1)
    if pad_out:
        W[-1] = np.concatenate([np.zeros((pad_out, W[-1].shape[1])), W[-1]], axis=0)
        b[-1] = np.concatenate([np.zeros(pad_out), b[-1]])
    return MLP(W, b, acts)


def pose_weights(fem: _fem.TetFEM, x: np.ndarray) -> np.ndarray:
    """``1 / max(V(x_i), floor)`` normalized to mean 1 (F,): sec. 6.1's weighting."""
    e = np.array([fem.energy(xi) for xi in x])
    floor = _ENERGY_FLOOR * max(float(np.median(e)), 1e-300)
    w = 1.0 / np.maximum(e, floor)
    return w / w.mean()


def train(run: TrainingRun) -> dict:
    """Train a Shen 2021 model from bakes of one mesh and write it to ``run.out``; the
    registry's trainer entry point (``core.methods.shen.METHOD``); the run as
    :func:`training.autoencoder.train`'s.

    Returns
    -------
    The result record of :meth:`.run.TrainingRun.finish` with ``n_p``, ``latent_dim``, the
    held-out largest vertex errors of this model's shapes (``max_error_val_m``, encoder round
    trip), of PCA at ``n_p + n_z`` modes (``pca_same_dofs_max_error_val_m``) and at ``n_p``,
    the latent search and the network's epochs.
    """
    dev = torch_device(run.device)
    run.device = str(dev)
    s = run.settings
    b = run.open_bakes()
    train_x, groups, val_x = b.training_frames(s.max_frames)
    check_x = val_x if len(val_x) else train_x
    run.check_cancel("Training cancelled before the PCA basis was computed.")

    sub, pca_tol = pod_basis(run, train_x, val_x, label="PCA", span=(0.05, 0.1))
    budget = None  # the DOFs the linear method takes at the tolerance (k not given)
    if s.k is None:
        sub, budget, n_p_tol = _room(sub, pca_tol, train_x, val_x, b, s.max_k)
    k = sub.k
    if s.n_p is not None:
        n_p = s.n_p
    elif budget is not None:
        n_p = n_p_tol
    else:
        n_p = min(_DEFAULT_NP, k // 2)
    if not 1 <= n_p < k:
        raise NeuralRomError(
            f"Linear Coordinates n_p = {n_p} needs a PCA basis with more modes (it has {k}): "
            "raise Modes or lower Linear Coordinates."
        )
    m = k - n_p
    c_train, c_check = sub.encode(train_x), sub.encode(check_x)
    run.emit({"k": k, "n_p": n_p})

    fem = _fem.TetFEM(b.X, b.T, b.material)
    w = pose_weights(fem, train_x) if s.pose_weighting else np.ones(len(train_x))
    target = s.latent_tolerance
    hi = min(s.max_latent_dim or (max(budget - n_p, 1) if budget is not None else m), m)
    if s.latent_dim is not None:
        sizes = [s.latent_dim]
    elif budget is not None and target is None:
        sizes = [hi]  # the linear model's DOFs: the nonlinear part has to beat it there
    else:
        if target is None:  # twice the PCA basis's error
            target = 2.0 * sub.reconstruction_error(check_x)
        sizes = _doubling(hi)
    if s.latent_dim is not None and s.latent_dim > m:
        raise NeuralRomError(
            f"Latent Size {s.latent_dim} exceeds the {m} PCA modes beyond n_p = {n_p}: raise "
            "Modes or lower Latent Size."
        )
    trainer = _Trainer(s, c_train, c_check, n_p, w, dev, run)
    deadline = time.perf_counter() + s.time_budget
    searched = []
    best = None
    with torch_threads(dev, _CPU_THREADS):
        for i, n_z in enumerate(sizes):
            model, hist = trainer.fit(
                n_z, deadline, (0.1 + 0.6 * i / len(sizes), 0.1 + 0.6 * (i + 1) / len(sizes))
            )
            enc, dec = trainer.export(model, n_p)
            err = _shape_error(sub, check_x, c_check, n_p, enc, dec, s.decoder_sees_p)
            searched.append({"latent_dim": n_z, "max_error_val_m": err, **hist})
            run.emit({"latent_dim": n_z, "latent_max_error_val_m": err})
            if best is None or err < best[0]:
                best = (err, n_z, enc, dec, hist)
            if target is not None and err <= target:
                best = (err, n_z, enc, dec, hist)
                break
            if hist["stopped"] == "time budget":
                run.warnings.append(
                    "The time budget ended the network training; raise Time "
                    "Budget for a more accurate model."
                )
                break
    err, n_z, encoder, decoder, hist = best
    if target is not None and err > target:
        run.warnings.append(
            f"No latent size up to {sizes[-1]} reached the latent tolerance "
            f"{target * 1000:.3g} mm (the most accurate, n_z = {n_z}, is kept)."
        )
    pca_same = sub.truncated(min(n_p + n_z, k)).reconstruction_error(check_x)
    pca_np = sub.truncated(n_p).reconstruction_error(check_x)
    run.say(
        0.7,
        f"n_p = {n_p}, n_z = {n_z}: max vertex error {err * 1000:.3g} mm held out "
        f"(PCA with {n_p + n_z} modes {pca_same * 1000:.3g} mm)",
    )
    if err > pca_same:
        run.warnings.append(
            f"The nonlinear model's shapes ({err * 1000:.3g} mm) are less accurate than PCA "
            f"with as many coordinates ({pca_same * 1000:.3g} mm) on held-out bakes: train "
            "longer, or use the linear method."
        )
    run.check_cancel("Training cancelled after the autoencoder (checkpointed).")

    # cubature on the shapes this model makes of the training poses
    sees_p = s.decoder_sees_p
    c_hat = _reconstruct(c_train, n_p, encoder, decoder, sees_p)
    shapes = sub.decode(c_hat)
    val_shapes = (
        sub.decode(_reconstruct(sub.encode(val_x), n_p, encoder, decoder, sees_p))
        if len(val_x)
        else val_x
    )
    cub = fit_cubature(run, sub, shapes, groups, val_shapes, project=False, span=(0.7, 0.85))

    save = functools.partial(
        save_shen_model,
        subspace=sub,
        n_p=n_p,
        cubature=cub,
        contact=run.contact_sample(),
        decoder=decoder,
        encoder=encoder,
        decoder_sees_p=s.decoder_sees_p,
    )
    return run.finish(
        run.out,
        save,
        k=k,
        dofs=n_p + n_z,
        max_error_val_m=err,
        cubature=cub,
        rollout=s.rollout,
        at=0.85,
        metrics={
            "n_p": n_p,
            "latent_dim": n_z,
            "pca_same_dofs_max_error_val_m": pca_same,
            "pca_np_max_error_val_m": pca_np,
            "pca_max_error_val_m": sub.reconstruction_error(check_x),
            "latent_tolerance_m": target,
            "latent_search": searched,
            "epochs_trained": hist["epochs_trained"],
            "best_epoch": hist["best_epoch"],
            "stopped": hist["stopped"],
            "epochs_run": trainer.epochs_run,
        },
    )


def _room(sub, tol: float, train_x, val_x, b, max_k: int):
    """The PCA basis of a model sized by a tolerance (``k`` not given), with the room the
    nonlinear part needs, the DOF budget and ``n_p``.

    ``sub`` is the basis the tolerance sized (the linear method's, ``k_tol`` modes). The
    decoder's output needs room beyond the modes it replaces, so the basis is widened to
    ``min(2 k_tol, max_k)`` modes (at most the training frames). ``n_p``: the fewest modes
    whose largest vertex error on the training and held-out frames is within twice the
    tolerance, at most ``k_tol - 1``: the rigid and near-rigid motion of a free body (its
    first PCA modes) stays linear, the rest of the tolerance is the decoder's.

    Returns ``(basis, k_tol, n_p)``.
    """
    k_tol = sub.k
    k_room = min(2 * k_tol, int(max_k), len(train_x))
    if k_room > k_tol:
        try:
            sub = mass_weighted_pod(
                train_x - b.X, b.mass, b.pinned, k=k_room, X=b.X, max_k=int(max_k)
            )
        except NeuralRomError:  # fewer independent frames than that: keep the basis
            pass
    ks = range(1, min(k_tol, sub.k) + 1)
    err = sub.error_curve(train_x, ks)
    if len(val_x):
        err = np.maximum(err, sub.error_curve(val_x, ks))
    within = np.flatnonzero(err <= 2.0 * tol)
    n_p = int(ks[within[0]]) if len(within) else k_tol
    n_p = max(1, min(n_p, k_tol - 1, sub.k - 1))
    return sub, k_tol, n_p


def _doubling(hi: int) -> list[int]:
    sizes, n = [], 1
    while n < hi:
        sizes.append(n)
        n *= 2
    return sizes + [hi]


def _reconstruct(
    c: np.ndarray, n_p: int, encoder: MLP, decoder: MLP, sees_p: bool = False
) -> np.ndarray:
    """``c(r)`` of the encoded coordinates (F, k): ``[p; 0] + D^(E(c))`` (``D^(p, E(c))``
    with ``sees_p``)."""
    z = encoder.forward(c)
    out = decoder.forward(np.concatenate([c[:, :n_p], z], axis=1) if sees_p else z)
    out[:, :n_p] = c[:, :n_p]
    return out


def _shape_error(sub, x, c, n_p, encoder, decoder, sees_p: bool = False) -> float:
    """Largest vertex error (m) of the encoded-decoded shapes of ``x`` (F, n, 3)."""
    worst = 0.0
    for i in range(0, len(x), 256):
        rec = sub.decode(_reconstruct(c[i : i + 256], n_p, encoder, decoder, sees_p))
        d = x[i : i + 256] - rec
        worst = max(worst, float(np.sqrt(np.max(np.einsum("fvi,fvi->fv", d, d), initial=0.0))))
    return worst


class _Trainer:
    """Adam on the pose-weighted loss for one network at a time, with early stopping on the
    held-out loss, the paper's learning-rate steps, checkpoints and resume."""

    def __init__(self, s, c_train, c_check, n_p, w, device, run: TrainingRun):
        """``c_train``, ``c_check``: PCA coordinates (F, k). The networks' targets are the
        tail ``c[:, n_p:]`` divided by its RMS (``scale``); their inputs that tail, after
        the linear coordinates ``p`` divided by the RMS of |p| (``p_scale``) when the decoder
        reads ``p`` (``n_in`` = n_p of them, else none)."""
        self.s, self.device, self.run = s, device, run
        self.dtype = torch.float32
        self.n_p, self.n_in = n_p, (n_p if s.decoder_sees_p else 0)
        tail, tail_check = c_train[:, n_p:], c_check[:, n_p:]
        rms = float(np.sqrt(np.mean(np.sum(tail**2, axis=1)))) if len(tail) else 1.0
        self.scale = rms if rms > 0 else 1.0
        p = c_train[:, : self.n_in]
        # one scale for all of p (the RMS of |p|), not one per coordinate: the small modes'
        # coordinates stay small inputs, so the decoder varies little along them (per
        # coordinate, the swung arm's closest shapes were 13.9 mm, 11.5 with one scale, and a
        # poked test bar took up to 41 Newton iterations a step, 2 fallbacks: no more than 9)
        ps = float(np.sqrt(np.mean(np.sum(p**2, axis=1)))) if len(p) else 1.0
        self.p_scale = np.full(self.n_in, ps if ps > 0 else 1.0)
        self.m = tail.shape[1]
        as_t = functools.partial(torch.as_tensor, dtype=self.dtype, device=device)

        def inputs(c, t):
            return np.concatenate([c[:, : self.n_in] / self.p_scale, t / self.scale], axis=1)

        self.c_train = as_t(tail / self.scale)
        self.c_check = as_t(tail_check / self.scale)
        self.x_train = as_t(inputs(c_train, tail))
        self.x_check = as_t(inputs(c_check, tail_check))
        self.w = as_t(w)
        self.epochs_run = 0

    def _fresh(self, n_z: int):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.s.seed)
            model = _DAE(self.m, n_z, self.s.hidden, self.s.omega, self.n_in)
        model = model.to(device=self.device, dtype=self.dtype)
        return model, torch.optim.Adam(model.parameters(), lr=self.s.learning_rate)

    def _lr(self, epoch: int) -> float:
        """Sec. 6.1: 20% less after 300 epochs and another 20% after 3,000."""
        return (
            self.s.learning_rate * (0.8 if epoch >= 300 else 1.0) * (0.8 if epoch >= 3000 else 1.0)
        )

    def _warmup(self, model, n_z: int):
        """``linear_warmup`` epochs fitting the network to PCA at ``n_p + n_z`` modes (the
        target: the coordinates with all but the first ``n_z`` of the tail zeroed), so the
        training starts from (nearly) the linear subspace of equal DOFs and early stopping
        keeps it unless the nonlinear fit does better on held-out bakes. A fresh Adam."""
        s = self.s
        opt = torch.optim.Adam(model.parameters(), lr=s.learning_rate)
        target = self.c_train.clone()
        target[:, n_z:] = 0.0
        N = len(self.c_train)
        model.train()
        for epoch in range(s.linear_warmup):
            perm = nets.epoch_order([s.seed, n_z, epoch, 1], N, self.device)
            nets.minibatch_pass(
                opt,
                perm,
                s.batch_size,
                lambda idx: ((model(self.x_train[idx]) - target[idx]) ** 2).sum(1).mean(),
            )
        return torch.optim.Adam(model.parameters(), lr=s.learning_rate)

    @torch.no_grad()
    def check_loss(self, model) -> float:
        model.eval()
        return float(((model(self.x_check) - self.c_check) ** 2).sum(1).mean())

    def _epoch(self, model, opt, n_z: int, epoch: int) -> float:
        """One pass of Adam over the training frames; the mean loss (normalized units)."""
        s = self.s
        for g in opt.param_groups:
            g["lr"] = self._lr(epoch)
        model.train()
        perm = nets.epoch_order([s.seed, n_z, epoch], len(self.c_train), self.device)

        def loss_of(idx):
            batch, wb = self.c_train[idx], self.w[idx]
            # pose-weighted squared error (sec. 6.1), M-weighted via the PCA basis
            out = model(self.x_train[idx])
            return (wb * ((out - batch) ** 2).sum(1)).sum() / wb.sum()

        return nets.minibatch_pass(opt, perm, s.batch_size, loss_of)

    def fit(self, n_z: int, deadline: float, span: tuple[float, float]):
        s, run = self.s, self.run
        with nets.deterministic(self.device):
            model, opt = self._fresh(n_z)
            f = run.checkpoints.file("shen_net", f"_nz{n_z:03d}.pt")
            if s.linear_warmup and (f is None or not f.exists()):
                opt = self._warmup(model, n_z)

            def report(state, _):
                run.emit(
                    {
                        "latent_dim": n_z,
                        "epoch": state["epoch"],
                        "train_loss": state["train_loss"] * self.scale**2,
                        "best_val_loss": state["best_loss"] * self.scale**2,
                    }
                )
                run.say(
                    span[0] + (span[1] - span[0]) * state["epoch"] / s.epochs,
                    f"latent {n_z}: epoch {state['epoch']}/{s.epochs}",
                )

            state = nets.fit(
                model,
                opt,
                epochs=s.epochs,
                epoch=lambda e: self._epoch(model, opt, n_z, e),
                check=lambda: (self.check_loss(model), None),
                patience=s.patience,
                checkpoint=f,
                checkpoint_every=s.checkpoint_every,
                should_cancel=run.should_cancel,
                cancelled=f"latent size {n_z}",
                report=report,
                deadline=deadline,
            )
        self.epochs_run += state["epochs_run"]
        return model, {
            "epochs_trained": state["epoch"],
            "best_epoch": state["best_epoch"],
            "best_val_loss": state["best_loss"] * self.scale**2,
            "stopped": state["stopped"],
        }

    def export(self, model: _DAE, n_p: int) -> tuple[MLP, MLP]:
        """Encoder (k -> n_z) and decoder (n_z -> k, or n_p + n_z -> k when it reads ``p``)
        as float64 numpy networks with the filter folded in (zero columns / rows for the
        first ``n_p`` coordinates; the encoder of ``D(p, z)`` reads ``p``), checked against
        torch in float64, the decoder shifted so that ``D^(E(0)) = 0`` (rest)."""
        om, n_in = self.s.omega, self.n_in
        if n_in:
            enc_in = np.concatenate([self.p_scale, np.full(self.m, self.scale)])
            enc = to_numpy(model.encoder, om, in_scale=enc_in)
        else:
            enc = to_numpy(model.encoder, om, in_scale=self.scale, pad_in=n_p)
        n_z = enc.out_dim
        dec_in = np.concatenate([self.p_scale, np.ones(n_z)]) if n_in else 1.0
        dec = to_numpy(model.decoder, om, in_scale=dec_in, out_scale=self.scale, pad_out=n_p)
        x = self.x_check[:256].to("cpu", torch.float64)
        with torch.no_grad():
            m64 = _DAE(self.m, n_z, self.s.hidden, om, n_in).to(torch.float64)
            m64.load_state_dict(
                {k: v.to("cpu", torch.float64) for k, v in model.state_dict().items()}
            )
            z_t = m64.encoder(x).numpy()
            y_t = m64.decoder(torch.cat([x[:, :n_in], torch.as_tensor(z_t)], 1)).numpy()
            y_t = y_t * self.scale
        xn = x.numpy()
        p = xn[:, :n_in] * self.p_scale
        full = np.concatenate(
            [p if n_in else np.zeros((len(xn), n_p)), xn[:, n_in:] * self.scale], axis=1
        )
        z_in = np.concatenate([p, z_t], axis=1)
        check_export("encoder", enc.forward(full), z_t, _VERIFY_TOL)
        check_export("decoder", dec.forward(z_in)[:, n_p:], y_t, _VERIFY_TOL)
        z0 = enc.forward(np.zeros(enc.in_dim))
        dec.b[-1] = dec.b[-1] - dec.forward(np.concatenate([np.zeros(n_in), z0]))
        return enc, dec
