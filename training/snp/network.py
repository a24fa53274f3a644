"""Subspace Neural Physics' network: the rollout in the subspace (Algorithm 1), the window
loss, noise and the schedule, the ensemble, and :class:`NetTrainer` (AMSGrad with checkpoints,
resume and a time budget; :mod:`training.snp`'s docstring has the method)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from ...core.errors import JobCancelled
from ..nets import (
    build_mlp,
    clone_state,
    load_torch_checkpoint,
    save_torch_checkpoint,
)
from .data import Sequence, learning_rate

# At most one progress message / metric event per this many seconds during the epochs.
_THROTTLE_S = 0.5


# ------------------------------------------------------------------------------------------
# The network and its rollout
# ------------------------------------------------------------------------------------------


def rollout(
    net: Callable,
    z0: torch.Tensor,
    z1: torch.Tensor,
    w: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    z_lo: torch.Tensor,
    z_hi: torch.Tensor,
    *,
    detach: bool = False,
    in_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Predicted PCA coordinates over a window, the predictions fed back (Algorithm 1): the
    runtime's step (:meth:`core.methods.snp.SNPSimulation.predict`) in torch.

    Parameters
    ----------
    net : the residual network (or None: eq. 1 alone)
    z0, z1 : (B, u) the window's first two states (m)
    w : (B, S, v) the external input of every frame of the window
    alpha, beta, z_lo, z_hi : (u,); scale : ``s`` (m)
    detach : cut the gradient between frames (teacher-forcing-like; tests only)
    in_scale : (u,) per-mode scales of the network's state inputs (None: ``scale``)

    Returns
    -------
    (B, S, u): ``z0``, ``z1``, then the S - 2 predictions; (K, B, S, u) for ``z0``, ``z1``
    of shape (K, B, u), each of an :class:`Ensemble`'s K members rolled out on its own
    """
    out = [z0, z1]
    prev2, prev = z0, z1
    si = scale if in_scale is None else in_scale
    for i in range(2, w.shape[1]):
        z_bar = alpha * prev + beta * (prev - prev2)  # eq. (1)
        if net is not None:
            wi = w[:, i]
            if z_bar.dim() > wi.dim():  # an ensemble's members: (K, B, u) states
                wi = wi.expand(*z_bar.shape[:-1], wi.shape[-1])
            x = torch.cat([z_bar / si, prev / si, wi], dim=-1)
            z_bar = z_bar + scale * net(x)  # eq. (3)
        z = torch.minimum(torch.maximum(z_bar, z_lo), z_hi)  # sec. 8.1
        out.append(z)
        prev2, prev = prev, z
        if detach:
            prev2, prev = prev2.detach(), prev.detach()
    return torch.stack(out, dim=-2)


def noise_scales(Z: np.ndarray, noise: float, floor: float) -> np.ndarray:
    """(u,) standard deviations of the noise on a window's first two frames, per PCA mode:
    ``noise`` times the mode's own standard deviation over the training frames ``Z`` (N, u),
    at least ``floor`` times the first mode's and at most the first's (``floor`` 1: every
    mode gets the first's noise, the former rule; see the module docstring)."""
    Z = np.asarray(Z)
    first = float(Z[:, 0].std()) or 1.0  # the trainer's ``s``, to the bit
    return noise * np.clip(Z.std(0), floor * first, first)


#: The automatic noise floor (:func:`noise_floor`) where the reference frame moves.
MOVING_NOISE_FLOOR = 0.1


def noise_floor(s, sequences: list[Sequence]) -> float:
    """The noise floor of :func:`noise_scales`: the setting, or automatic:
    :data:`MOVING_NOISE_FLOOR` where the reference frame moves in some training sequence
    (cloth on a walking character: the bench's cape 19.2 mm held-out mean against 23.0 at
    1, a hero's cape through the CLI 16.2 against 21.5; but a flag swung and spun on a pole
    113 against 104), else 1, every mode the first's noise (the poked sheet of
    tests/test_snp_cloth.py, owner still: 0.52x the alpha/beta model at 1, 0.56-0.59x at
    0.1). See the module docstring."""
    if s.noise_floor is not None:
        return float(s.noise_floor)
    moving = any(not p.is_identity for q in sequences for p in q.poses)
    return MOVING_NOISE_FLOOR if moving else 1.0


def window_loss(pred: torch.Tensor, target: torch.Tensor, scale: float, dt: float) -> torch.Tensor:
    """Algorithm 1's loss: mean absolute error of positions and of velocities over frames
    2..S-1 of the windows, in units of ``scale`` (pred, target: (B, S, u))."""
    p, t = pred / scale, target / scale  # pred may have a leading members dim: (K, B, S, u)
    pos = (p[..., 2:, :] - t[..., 2:, :]).abs().mean()
    vel = ((p[..., 2:, :] - p[..., 1:-1, :]) - (t[..., 2:, :] - t[..., 1:-1, :])).abs().mean() / dt
    return pos + vel


#: Automatic batch size: about this many AMSGrad steps an epoch, between the bounds below.
STEPS_PER_EPOCH = 64
BATCH_RANGE = (8, 32)
#: Automatic epochs: about this many AMSGrad steps in all, at most MAX_EPOCHS.
TOTAL_STEPS = 3200
MAX_EPOCHS = 100


def schedule(n_windows: int, batch_size: int | None, epochs: int | None) -> tuple[int, int]:
    """The batch size and the number of epochs, each given or automatic (None).

    Automatic: batches of ``n_windows / STEPS_PER_EPOCH`` windows within :data:`BATCH_RANGE`,
    and as many epochs as make :data:`TOTAL_STEPS` steps, at most :data:`MAX_EPOCHS`.
    Measured (held-out mean vertex error over the initial model alone's, no weight decay):
    a flag of 20 Blender cloth bakes (2,096 windows) at the former 400 epochs of batches of
    8 stopped at 226 epochs by the 600 s budget, 1.01x; batches of 32: 13 epochs 0.85x (44 s),
    40 epochs 0.91x; the sheet of tests/test_snp_cloth.py (2,470 windows, batches of 32):
    11 epochs 0.62x, 40 epochs 0.52x; the block of tests/test_snp.py (57 windows, batches of
    8), which overfits: 100 epochs 0.91x, 400 epochs (weight decay 1) 1.34x. So: ~40-50
    epochs of batches of 32 on a few thousand windows, 100 epochs of 8 on a few dozen."""
    if batch_size is None:
        lo, hi = BATCH_RANGE
        batch_size = min(hi, max(lo, n_windows // STEPS_PER_EPOCH))
    if epochs is None:
        steps = max(1, -(-n_windows // batch_size))
        epochs = min(MAX_EPOCHS, max(1, -(-TOTAL_STEPS // steps)))
    return int(batch_size), int(epochs)


def windows(lengths: list[int], size: int) -> np.ndarray:
    """(N, 2) (sequence, start) of every window of ``size`` frames inside one sequence."""
    out = [(i, s) for i, n in enumerate(lengths) for s in range(n - size + 1)]
    return np.array(out, dtype=np.int64).reshape(-1, 2)


class Ensemble(torch.nn.Module):
    """K ReLU MLPs of the same sizes trained side by side (the ``ensemble`` setting): their
    layers stacked, ``(K, B, in) -> (K, B, out)`` with one batched product a layer, so K small
    networks cost the training about what one does. :meth:`merged` is the one MLP whose output
    is the members' mean: the first layer's rows stacked, the hidden layers block-diagonal,
    the last layer's columns side by side over K; the runtime evaluates it as any network.

    Parameters
    ----------
    nets : K networks built by :func:`build_mlp` with the same sizes
    """

    def __init__(self, nets: list[torch.nn.Sequential]) -> None:
        super().__init__()
        lins = [[m for m in n if isinstance(m, torch.nn.Linear)] for n in nets]
        self.W = torch.nn.ParameterList(
            torch.nn.Parameter(torch.stack([ls[j].weight.detach() for ls in lins]))
            for j in range(len(lins[0]))
        )
        self.b = torch.nn.ParameterList(
            torch.nn.Parameter(torch.stack([ls[j].bias.detach() for ls in lins]))
            for j in range(len(lins[0]))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for j, (W, b) in enumerate(zip(self.W, self.b, strict=True)):
            x = torch.baddbmm(b[:, None, :], x, W.transpose(1, 2))
            if j < len(self.W) - 1:
                x = torch.relu(x)
        return x

    @torch.no_grad()
    def merged(self) -> torch.nn.Sequential:
        """The one network (:func:`build_mlp`'s layout) computing the members' mean output."""
        K = self.W[0].shape[0]
        sizes = [self.W[0].shape[2]] + [K * W.shape[1] for W in self.W[:-1]] + [self.W[-1].shape[1]]
        net = build_mlp(sizes, "relu").to(self.W[0])
        lins = [m for m in net if isinstance(m, torch.nn.Linear)]
        last = len(lins) - 1
        for j, (lin, W, b) in enumerate(zip(lins, self.W, self.b, strict=True)):
            if j == 0:
                lin.weight.copy_(W.reshape(-1, W.shape[2]))
            elif j < last:
                lin.weight.copy_(torch.block_diag(*W))
            else:
                lin.weight.copy_(torch.cat(list(W), dim=1) / K)
            lin.bias.copy_(b.mean(0) if j == last else b.reshape(-1))
        return net


class NetTrainer:
    """AMSGrad on Algorithm 1's window loss, with checkpoints, resume and a time budget.

    Parameters
    ----------
    s : the settings; Z : per training sequence (L_i, u) PCA coordinates; W : per training
    sequence (L_i, v) external inputs; Z_val, W_val : the held-out sequences (may be empty)
    """

    def __init__(
        self,
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
        n_vertices,
        device,
        checkpoints,
        cancel,
        emit,
        progress,
        in_scale=None,
        noise_floor=1.0,
    ):
        self.s, self.dt, self.scale = s, float(dt), float(scale)
        self.noise_sd = noise_scales(np.concatenate(Z), s.noise, noise_floor)
        self.lr = learning_rate(s, Z[0].shape[1])
        self.n_vertices = int(n_vertices)
        self.device, self.dtype = device, torch.float32
        self.size = min([s.window] + [len(z) for z in Z])
        self.windows = windows([len(z) for z in Z], self.size)
        self.batch, self.epochs = schedule(len(self.windows), s.batch_size, s.epochs)

        def t(a):
            return torch.as_tensor(np.asarray(a), dtype=self.dtype, device=device)

        # every window's frames, gathered once: (N, S, u) and (N, S, v)
        idx = self.windows
        self.Zw = t(np.stack([Z[i][j : j + self.size] for i, j in idx]))
        self.Ww = t(np.stack([W[i][j : j + self.size] for i, j in idx]))
        self.val = [(t(z), t(w)) for z, w in zip(Z_val, W_val)]
        self.alpha, self.beta, self.z_lo, self.z_hi = t(alpha), t(beta), t(z_lo), t(z_hi)
        self.in_scale = None if in_scale is None else t(in_scale)
        self.u, self.v = Z[0].shape[1], W[0].shape[1]
        self.checkpoints, self.cancel, self.emit, self.progress = (
            checkpoints,
            cancel,
            emit,
            progress,
        )

    def network(self) -> torch.nn.Sequential:
        s, u = self.s, self.u
        width = s.width or max(1, int(round(1.5 * u)))
        sizes = [2 * u + self.v] + [width] * (s.layers - 1) + [u]
        nets = []
        for i in range(s.ensemble):  # member 0 is the single network of the same seed
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(s.seed if i == 0 else s.seed + 1_000_003 * i)
                net = build_mlp(sizes, "relu")
                last = [m for m in net if isinstance(m, torch.nn.Linear)][-1]
                torch.nn.init.zeros_(last.weight)  # start from the initial model (Phi = 0)
                torch.nn.init.zeros_(last.bias)
            nets.append(net)
        net = nets[0] if s.ensemble == 1 else Ensemble(nets)
        return net.to(device=self.device, dtype=self.dtype)

    @staticmethod
    def plain(net) -> torch.nn.Sequential:
        """The network as one MLP (an :class:`Ensemble` merged)."""
        return net.merged() if isinstance(net, Ensemble) else net

    def _args(self):
        return self.alpha, self.beta, self.scale, self.z_lo, self.z_hi

    def epoch(self, net, opt, epoch: int) -> float:
        s, N = self.s, len(self.windows)
        steps = -(-N // self.batch)
        rng = np.random.default_rng([s.seed, epoch])
        perm = rng.permutation(N)
        total = 0.0
        for step, start in enumerate(range(0, N, self.batch)):
            b = perm[start : start + self.batch]
            lr = self.rate(epoch, step, steps)
            for g in opt.param_groups:
                g["lr"] = lr
            z, w = self.Zw[b], self.Ww[b]
            noise = torch.as_tensor(
                rng.normal(0.0, 1.0, size=(2, len(b), self.u)) * self.noise_sd,
                dtype=self.dtype,
                device=self.device,
            )
            z0, z1 = z[:, 0] + noise[0], z[:, 1] + noise[1]
            if s.ensemble > 1:  # every member from the same start, rolled out on its own
                z0, z1 = z0.expand(s.ensemble, *z0.shape), z1.expand(s.ensemble, *z1.shape)
            pred = rollout(net, z0, z1, w, *self._args(), in_scale=self.in_scale)
            loss = window_loss(pred, z, self.scale, self.dt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            # AdamW's decoupled decay: ``lr * weight_decay`` of the departure from the
            # initial model a step. Each AMSGrad step moves a weight by about ``lr``, so the
            # departure settles near ``1 / weight_decay`` whatever the steps an epoch.
            self.decay(net, lr * s.weight_decay)
            total += float(loss.detach()) * len(b)
        return total / max(N, 1)

    def rate(self, epoch: int, step: int, steps: int) -> float:
        """The learning rate of a step: ``lr_decay`` an epoch (the paper's), times the linear
        warm-up over the first ``warmup_epochs`` epochs, step by step."""
        s = self.s
        ramp = (epoch * steps + step + 1) / (s.warmup_epochs * steps) if s.warmup_epochs else 1.0
        return float(self.lr * s.lr_decay**epoch * min(1.0, ramp))

    @torch.no_grad()
    def forced_inputs(self, windows: slice = slice(None)) -> torch.Tensor:
        """(n (S - 2), 2u + v) the network's inputs ``[z_bar, z_{t-1}, w_t]`` of every frame
        ``t >= 2`` of the training windows (those of ``windows``), from the bakes' own frames
        (teacher-forced)."""
        z, w = self.Zw[windows], self.Ww[windows]
        si = self.scale if self.in_scale is None else self.in_scale
        prev2, prev = z[:, :-2], z[:, 1:-1]
        z_bar = self.alpha * prev + self.beta * (prev - prev2)
        return torch.cat([z_bar / si, prev / si, w[:, 2:]], dim=-1).reshape(-1, 2 * self.u + self.v)

    @torch.no_grad()
    def activity(self, net) -> list[torch.Tensor]:
        """Per hidden layer, (width,) bool: whether each ReLU is positive on at least one
        network input of the training windows (:meth:`forced_inputs`)."""
        active = None
        for start in range(0, len(self.windows), 1024):  # bounded memory on large sets
            x, seen = self.forced_inputs(slice(start, start + 1024)), []
            for m in list(net)[:-1]:
                x = m(x)
                if isinstance(m, torch.nn.ReLU):
                    seen.append((x > 0).any(dim=0))
            active = seen if active is None else [a | b for a, b in zip(active, seen)]
        return active or []

    def dead_units(self, net) -> list[float]:
        """Per hidden layer, the share of its ReLUs never active over the training windows."""
        return [float((~a).float().mean()) for a in self.activity(net)]

    @torch.no_grad()
    def decay(self, net, shrink: float) -> None:
        """Decoupled weight decay (AdamW's, Loshchilov & Hutter 2019) towards the initial
        model: ``p <- p - shrink (p - p_0)`` with ``p_0`` the initial weights, whose zero last
        layer is the initial model alone, so the pull is towards ``Phi = 0`` and never to a
        dead network (the hidden layers are pulled back to their random start, not to 0)."""
        if shrink > 0.0:
            for p, p0 in zip(net.parameters(), self.anchor, strict=True):
                p.sub_(p - p0, alpha=shrink)

    @torch.no_grad()
    def validation_rms(self, net) -> float | None:
        """RMS vertex distance (m) between the held-out bakes rolled out in the subspace and
        their PCA projections (the network's share of the error), None without any."""
        if not self.val:
            return None
        net = self.plain(net)
        sq, count = 0.0, 0
        for z, w in self.val:
            pred = rollout(
                net, z[None, 0], z[None, 1], w[None], *self._args(), in_scale=self.in_scale
            )[0]
            sq += float(((pred[2:] - z[2:]) ** 2).sum())
            count += len(z) - 2
        return float(np.sqrt(sq / max(count * self.n_vertices, 1)))

    def fit(self, deadline: float) -> tuple[torch.nn.Sequential, dict]:
        s = self.s
        net = self.network()
        # the initial model's weights, the weight decay's anchor (the same seeded network on a
        # resume: it is not checkpointed)
        self.anchor = [p.detach().clone() for p in net.parameters()]
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, amsgrad=True)
        f = self.checkpoints.file("snp_net", ".pt")
        keep = s.keep_best and bool(self.val)
        state = {"epoch": 0, "losses": [], "stopped": "", "best_epoch": 0, "best_val": None}
        best = clone_state(net) if keep else None
        if keep:  # epoch 0: the initial model alone (the network's last layer is zero)
            state["best_val"] = self.validation_rms(net)
        st = load_torch_checkpoint(f, self.device)
        if st is not None:
            net.load_state_dict(st["model"])
            opt.load_state_dict(st["optimizer"])
            state = {
                "epoch": int(st["epoch"]),
                "losses": list(st["losses"]),
                "stopped": str(st["stopped"]),
                "best_epoch": int(st.get("best_epoch", 0)),
                "best_val": st.get("best_val"),
            }
            if keep and "best" in st and st.get("best_val") is not None:
                best = st["best"]
            elif keep:  # a checkpoint without a best: the initial model's stands
                state["best_epoch"], state["best_val"] = 0, self.validation_rms(self.network())
            self.progress(state["epoch"], self.epochs, f"network resumed at epoch {state['epoch']}")
        det = torch.are_deterministic_algorithms_enabled()
        if self.device.type == "cpu":
            torch.use_deterministic_algorithms(True)
        last = time.perf_counter()
        try:
            for epoch in range(state["epoch"], self.epochs if not state["stopped"] else 0):
                if self.cancel():
                    raise JobCancelled(
                        f"Training cancelled at epoch {epoch}"
                        + (" (resumes from the last checkpoint)." if f else ".")
                    )
                state["losses"].append(self.epoch(net, opt, epoch))
                done = state["epoch"] = epoch + 1
                val = self.validation_rms(net) if keep else None
                if keep and val < state["best_val"]:
                    best, state["best_val"], state["best_epoch"] = clone_state(net), val, done
                if time.perf_counter() > deadline and done < self.epochs:
                    state["stopped"] = "time budget"
                end = done == self.epochs or bool(state["stopped"])
                if f is not None and (done % s.checkpoint_every == 0 or end):
                    save_torch_checkpoint(
                        f,
                        {
                            "model": net.state_dict(),
                            "optimizer": opt.state_dict(),
                            **({"best": best} if keep else {}),
                            **state,
                        },
                    )
                now = time.perf_counter()
                if now - last >= _THROTTLE_S or end:
                    last = now
                    if not keep:
                        val = self.validation_rms(net)
                    self.emit(
                        {
                            "epoch": done,
                            "train_loss": state["losses"][-1],
                            **({"val_rollout_rms_m": val} if val is not None else {}),
                        }
                    )
                    self.progress(
                        done,
                        self.epochs,
                        f"network: epoch {done}/{self.epochs}"
                        + (f" (stopped: {state['stopped']})" if state["stopped"] else ""),
                    )
                if state["stopped"]:
                    break
        finally:
            torch.use_deterministic_algorithms(det)
        if keep:
            net.load_state_dict(best)
        net = self.plain(net)
        state["dead_units"] = self.dead_units(net)
        return net, state
