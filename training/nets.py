"""What the learned methods' trainers share on the torch side, in one place each: the MLPs and
their export to :class:`core.nnet.MLP`, the device, the CPU threads, torch checkpoints, and
the one Adam loop :func:`fit` (early stopping on a held-out loss, the learning-rate schedule,
the best weights kept, checkpoints, the deadline and the cancel).

The autoencoder's and Shen's networks train through :func:`fit`. Loops that are not that
loop keep their own bodies on the helpers here: the autoencoder's epoch timing (the same
:func:`minibatch_pass`), Shen's linear warm-up (:func:`minibatch_pass`, no held-out
check), Shen's cubature networks (full batches, float64, one thread, no checkpoints),
LiCROM's field (its time-budget re-plan, the switch to least-squares codes and the head
refit mid-run, a random generator's state in the checkpoint), SNP's rollout (AMSGrad with a
learning rate per step, noise and decoupled decay per window batch) and active faces' fits
(full batch auto-decoder codes, the adjoint of the quasistatic solve).

torch is imported here: the numpy-only trainers (linear) never import this module.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core.data.files import atomic_path
from ..core.errors import JobCancelled, NeuralRomError
from ..core.reduced.nnet import MLP

ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "softplus": nn.Softplus, "relu": nn.ReLU}

# ------------------------------------------------------------------------------------------
# Networks and their export
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
            layers.append(ACTIVATIONS[activation]())
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


def copy64(net: nn.Sequential) -> nn.Sequential:
    """A float64 CPU copy of a network built by :func:`build_mlp`."""
    lin = [m for m in net if isinstance(m, nn.Linear)]
    act = next((type(m) for m in net if not isinstance(m, nn.Linear)), nn.ELU)
    name = next(k for k, v in ACTIVATIONS.items() if v is act)
    out = build_mlp([lin[0].in_features] + [m.out_features for m in lin], name).to(torch.float64)
    out.load_state_dict({k: v.to("cpu", torch.float64) for k, v in net.state_dict().items()})
    return out


class Sin(nn.Module):
    """``sin(omega x)``, the activation of Shen 2021's networks."""

    def __init__(self, omega: float) -> None:
        super().__init__()
        self.omega = float(omega)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.omega * x)


def sin_mlp(sizes: list[int], omega: float) -> nn.Sequential:
    """Linear layers with ``sin(omega .)`` between them (none after the last), initialized
    uniform in ``+- sqrt(3 / fan_in)`` (Shen 2021; training/shen's docstring, point 4)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(a, b)
        bound = math.sqrt(3.0 / a)
        with torch.no_grad():
            lin.weight.uniform_(-bound, bound)
            lin.bias.uniform_(-0.1, 0.1)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(Sin(omega))
    return nn.Sequential(*layers)


def check_export(name: str, got: np.ndarray, ref: np.ndarray, tol: float = 1e-6) -> None:
    """Refuse an exported network whose output ``got`` differs from the trained network's
    ``ref`` (float64) by more than ``tol`` relative to ``1 + max |ref|`` (a bug)."""
    err = float(np.max(np.abs(got - ref), initial=0.0)) / (
        1.0 + float(np.max(np.abs(ref), initial=0.0))
    )
    if not err <= tol:
        raise NeuralRomError(
            f"The exported {name} differs from the trained network by {err:.3g} "
            "(relative): the export is broken; report this as a bug."
        )


def clone_state(net: nn.Module) -> dict:
    """A copy of ``net``'s weights (a state dict of detached clones)."""
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


# ------------------------------------------------------------------------------------------
# Device, threads, determinism, checkpoints
# ------------------------------------------------------------------------------------------


def torch_device(name: str | None):
    """The ``torch.device`` a learned method trains on: ``"auto"`` (CUDA when torch sees a
    GPU, else the CPU), ``"cpu"`` or ``"cuda[:i]"``; a CUDA request without a GPU or another
    name is refused with what to do."""
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


@contextlib.contextmanager
def torch_threads(device, n: int):
    """torch's intra-op CPU threads set to ``n`` inside the block when training on the CPU
    (one thread gives the same arithmetic, so the same model, whatever the core count);
    nothing changes on a GPU."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def deterministic(device):
    """torch's deterministic algorithms on inside the block on the CPU (a resumed run ends
    with the uninterrupted run's weights bit for bit); as they were after it."""
    before = torch.are_deterministic_algorithms_enabled()
    if torch.device(device).type == "cpu":
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def save_torch_checkpoint(path: Path, obj: dict) -> None:
    """Write a training checkpoint (tensors, numbers, strings, lists and dicts of them) with
    ``torch.save`` through :func:`core.files.atomic_path`: a cancel or a crash mid-write leaves
    the previous checkpoint, never a truncated one."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def load_torch_checkpoint(path: Path | None, device) -> dict | None:
    """A checkpoint written by :func:`save_torch_checkpoint`, its tensors on ``device``, or
    None when ``path`` is None or missing. Read with ``weights_only=True``: nothing in the
    file is unpickled beyond tensors and plain containers."""
    if path is None or not Path(path).exists():
        return None
    return torch.load(path, map_location=device, weights_only=True)


# ------------------------------------------------------------------------------------------
# The Adam loop
# ------------------------------------------------------------------------------------------


def minibatch_pass(
    opt: torch.optim.Optimizer,
    perm: torch.Tensor,
    batch_size: int,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
) -> float:
    """One pass of ``opt`` over the samples in the order ``perm``, ``batch_size`` at a time;
    ``loss_of(indices)`` is a batch's loss. Returns the mean loss (weighted by batch sizes)."""
    total = 0.0
    for i in range(0, len(perm), batch_size):
        idx = perm[i : i + batch_size]
        loss = loss_of(idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += float(loss.detach()) * len(idx)
    return total / max(len(perm), 1)


def epoch_order(key: list[int], n: int, device) -> torch.Tensor:
    """The order of the samples in an epoch: a permutation of ``n`` keyed by ``key`` (the
    seed, the network, the epoch), so a resumed run needs no generator state."""
    return torch.as_tensor(np.random.default_rng(key).permutation(n), device=device)


#: Epochs between measurements of the held-out loss (early stopping): each costs about a
#: tenth of an epoch (0.43 against 3.8 ms on the swung bar of bench/autoencoder.py).
CHECK_EVERY = 5
#: A held-out loss is a new best when below the best by this fraction, so the float32 jitter
#: of a loss that has stopped falling does not keep resetting the patience.
MIN_IMPROVEMENT = 1e-4
#: At most one progress message / metric event per this many seconds during the epochs.
THROTTLE_S = 0.5

#: What :func:`fit`'s checkpoint holds besides the weights and Adam's state.
STATE_KEYS = ("epoch", "best", "best_loss", "best_epoch", "train_loss", "val_loss", "stopped")


def fit(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    *,
    epochs: int,
    epoch: Callable[[int], float],
    check: Callable[[], tuple[float, object]],
    patience: int,
    checkpoint: Path | None,
    checkpoint_every: int,
    should_cancel: Callable[[], bool],
    cancelled: str,
    report: Callable[[dict, object], None],
    resumed: Callable[[dict], None] = lambda state: None,
    deadline: float | None = None,
    report_on_check: bool = False,
) -> dict:
    """Train ``model`` with ``opt`` for at most ``epochs`` epochs: early stopping on a held-out
    loss, the best weights kept, checkpoints and resume, a deadline, the cancel; on the CPU
    with torch's deterministic algorithms. The model ends with its best weights.

    Parameters
    ----------
    epoch : ``epoch(e) -> mean training loss``: epoch ``e`` (0-based) done, its learning rate
        set by it (a function of ``e`` alone, so a resumed run follows the same schedule)
    check : ``check() -> (held-out loss, what report gets)``, measured every :data:`CHECK_EVERY`
        epochs, at the last and when the deadline passed; a loss below the best by
        :data:`MIN_IMPROVEMENT` is a new best
    patience : epochs without a new best before the training stops
    checkpoint : the checkpoint file (None: none): read back when it exists (the training
        continues from it), written every ``checkpoint_every`` epochs and at the end
    cancelled : the start of :class:`JobCancelled`'s message ("Training cancelled at epoch
        N of ..." + this + where it resumes)
    report : ``report(state, checked)``: at most every :data:`THROTTLE_S` seconds and at the end
        (with ``report_on_check``, only after an epoch that was checked, and at the end);
        ``checked`` is ``check()``'s second value of this epoch, None when it was not checked
    resumed : called with the state read back from the checkpoint

    Returns
    -------
    The state: ``epoch`` (epochs trained), ``best_loss``, ``best_epoch``, ``train_loss``,
    ``val_loss`` (the last check's), ``stopped`` ("" when it ran all its epochs, "no held-out
    improvement", "time budget"), ``best`` (the best weights) and ``epochs_run`` (epochs
    this call trained).
    """
    device = next(model.parameters()).device
    with deterministic(device):
        st = load_torch_checkpoint(checkpoint, device)
        if st is not None:
            model.load_state_dict(st["model"])
            opt.load_state_dict(st["optimizer"])
            state = {k: st[k] for k in STATE_KEYS if k in st}
            resumed(state)
        else:
            loss, _ = check()
            state = {
                "epoch": 0,
                "best": clone_state(model),
                "best_loss": loss,
                "best_epoch": 0,
                "train_loss": math.nan,
                "val_loss": loss,
                "stopped": "",
            }
        state["epochs_run"] = 0
        last = time.perf_counter()
        first = state["epoch"]
        for e in range(first, epochs if not state["stopped"] else first):
            if should_cancel():
                raise JobCancelled(
                    f"Training cancelled at epoch {e} of {cancelled}"
                    + (" (resumes from the last checkpoint)." if checkpoint else ".")
                )
            state["train_loss"] = epoch(e)
            state["epochs_run"] += 1
            done = state["epoch"] = e + 1
            late = deadline is not None and time.perf_counter() > deadline
            checked = None
            if done % CHECK_EVERY == 0 or done == epochs or late:
                loss, checked = check()
                state["val_loss"] = loss
                if loss < state["best_loss"] * (1.0 - MIN_IMPROVEMENT):
                    state.update(best=clone_state(model), best_loss=loss, best_epoch=done)
                if done - state["best_epoch"] >= patience:
                    state["stopped"] = "no held-out improvement"
                elif late:
                    state["stopped"] = "time budget"
            end = done == epochs or bool(state["stopped"])
            if checkpoint is not None and (done % checkpoint_every == 0 or end):
                kept = {k: state[k] for k in STATE_KEYS if k in state}
                save_torch_checkpoint(
                    checkpoint,
                    {"model": model.state_dict(), "optimizer": opt.state_dict(), **kept},
                )
            now = time.perf_counter()
            due = now - last >= THROTTLE_S and (checked is not None or not report_on_check)
            if due or end:
                last = now
                report(state, checked)
            if state["stopped"]:
                break
        model.load_state_dict(state["best"])
        return state
