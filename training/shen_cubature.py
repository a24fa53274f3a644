"""Neural cubature (Shen et al. 2021, sec. 5) against the optimized (greedy) cubature on the
forces of a Shen subspace: an experiment, not (yet) a runtime feature.

The optimized cubature (:func:`core.cubature.optimized_cubature`, An et al. 2008) picks
elements greedily and fits fixed non-negative weights ``w`` so that ``sum_e w_e V_e^T g_e(x)``
matches the reduced force ``V^T g(x)`` on training poses. Shen et al. argue that on a curved
subspace fixed weights are the wrong model and predict *pose-dependent* weights with a network
``W`` whose last layer is squared (non-negative), the elements chosen by a graph network ``S``
(sec. 5.1-5.2).

What is implemented here, and where it departs from the paper:

* the weight network ``W``: the pose's PCA coordinates ``c`` (k,) (the paper feeds ``r`` through
  the frozen decoder to ``u``; ``c`` is ``u`` in the PCA basis) -> four sin layers -> one value
  per selected element, ``w_e(c) = (sqrt(w0_e) + y_e(c))^2`` with ``w0`` the greedy NNLS
  weights and the last layer initialized to zero: the network starts *at* the greedy rule
  and is trained to lower the relative force error of the training poses
  (``sqrt(mean_p |A_p w(c_p) - b_p|^2 / |b_p|^2)``, the normalization of
  :mod:`core.cubature`), with Adam and early stopping on a validation share of the
  training trajectories;
* the selection: the greedy's elements. The paper's GCN selection network ``S`` is not
  implemented; with the same elements the comparison isolates what the pose-dependent weights
  bring.

:func:`compare_cubatures` reports the relative error on held-out poses at each element count
(the paper's Table 1 reports 20/50/100/200); the runtime keeps the greedy rule unless the
neural one wins there (see the report of ``bench/shen.py --cubature``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..core.cubature import optimized_cubature, reduced_element_forces, reduced_forces


class WeightNet(nn.Module):
    """``c (k) -> w (c_el)``: sin MLP, squared output around the greedy weights."""

    def __init__(
        self, k: int, w0: np.ndarray, width: int = 64, layers: int = 4, scale: float = 1.0
    ) -> None:
        super().__init__()
        sizes = [k] + [width] * layers + [len(w0)]
        mods: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            lin = nn.Linear(a, b)
            with torch.no_grad():
                bound = math.sqrt(3.0 / a)
                lin.weight.uniform_(-bound, bound)
                lin.bias.zero_()
                if i == len(sizes) - 2:  # start at the greedy rule
                    lin.weight.zero_()
            mods.append(lin)
            if i < len(sizes) - 2:
                mods.append(_Sin())
        self.net = nn.Sequential(*mods)
        self.register_buffer("sqrt_w0", torch.as_tensor(np.sqrt(w0)))
        self.scale = float(scale)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return (self.sqrt_w0 + self.sqrt_w0.mean() * self.net(c / self.scale)) ** 2


class _Sin(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)


def _normalized(fem, V, poses, elements):
    """(A (P, k, c), b (P, k)) divided by each pose's |b_p| (poses with b = 0 dropped)."""
    A = reduced_element_forces(fem, V, poses, elements)
    b = reduced_forces(fem, V, poses)
    nb = np.linalg.norm(b, axis=1)
    keep = nb > 1e-12 * nb.max(initial=0.0)
    return A[keep] / nb[keep, None, None], b[keep] / nb[keep, None], keep


def relative_error(A: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    """``sqrt(mean_p |A_p w_p - b_p|^2)`` of normalized systems; ``w`` (c,) or (P, c)."""
    pred = A @ w if w.ndim == 1 else np.einsum("pkc,pc->pk", A, w)
    return float(np.sqrt(np.mean(np.sum((pred - b) ** 2, axis=1))))


def train_weight_net(
    A,
    b,
    c,
    A_val,
    b_val,
    c_val,
    w0,
    *,
    epochs: int = 400,
    lr: float = 1e-3,
    seed: int = 0,
    patience: int = 100,
) -> tuple[WeightNet, dict]:
    """Fit a :class:`WeightNet` on normalized systems ``A`` (P, k, e), ``b`` (P, k) with pose
    coordinates ``c`` (P, k); early stopping on the validation systems. float64, CPU, one
    thread (a network this small only loses from more)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_weight_net(A, b, c, A_val, b_val, c_val, w0, epochs, lr, seed, patience)
    finally:
        torch.set_num_threads(before)


def _train_weight_net(A, b, c, A_val, b_val, c_val, w0, epochs, lr, seed, patience):
    torch.manual_seed(seed)
    scale = float(np.sqrt(np.mean(np.sum(c**2, axis=1)))) or 1.0
    net = WeightNet(c.shape[1], w0, scale=scale).to(torch.float64)
    t = {
        n: torch.as_tensor(v) for n, v in dict(A=A, b=b, c=c, Av=A_val, bv=b_val, cv=c_val).items()
    }
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    def loss(Ax, bx, cx):
        w = net(cx)
        return ((torch.einsum("pkc,pc->pk", Ax, w) - bx) ** 2).sum(1).mean()

    with torch.no_grad():
        best = float(loss(t["Av"], t["bv"], t["cv"]))
    best_state, best_epoch = {k: v.clone() for k, v in net.state_dict().items()}, 0
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        for idx in np.array_split(rng.permutation(len(A)), max(1, len(A) // 32)):
            i = torch.as_tensor(idx)
            lo = loss(t["A"][i], t["b"][i], t["c"][i])
            opt.zero_grad()
            lo.backward()
            opt.step()
        with torch.no_grad():
            v = float(loss(t["Av"], t["bv"], t["cv"]))
        if v < best * (1 - 1e-4):
            best, best_epoch = v, epoch + 1
            best_state = {k: vv.clone() for k, vv in net.state_dict().items()}
        elif epoch + 1 - best_epoch >= patience:
            break
    net.load_state_dict(best_state)
    return net, {"best_epoch": best_epoch, "val_rel_error": math.sqrt(best)}


def compare_cubatures(
    fem,
    V: np.ndarray,
    mass: np.ndarray,
    train_poses: np.ndarray,
    train_groups: np.ndarray,
    held_poses: np.ndarray,
    counts=(20, 50, 100, 200),
    *,
    epochs: int = 400,
    seed: int = 0,
) -> list[dict]:
    """Relative reduced-force error on ``held_poses`` of the greedy cubature and of the neural
    weights on its elements, at each element count.

    Parameters
    ----------
    fem : core.fem.TetFEM
    V : (3n, k) PCA basis of the model (the forces are ``V^T g``), M-orthonormal
    mass : (n,) lumped vertex masses, kg (the coordinates ``c = V^T M (x - X)``)
    train_poses, held_poses : (P, n, 3), (H, n, 3) poses of the subspace (metres)
    train_groups : (P,) trajectory of each training pose (the validation split keeps whole
        trajectories out)

    Returns
    -------
    list of dicts: ``elements``, ``greedy`` and ``neural`` held-out relative errors, the
    training errors, the network's best epoch.
    """
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        groups = np.unique(train_groups)
        rng = np.random.default_rng(seed)
        val_g = rng.choice(groups, max(1, len(groups) // 5), replace=False)
        is_val = np.isin(train_groups, val_g)
        out = []
        for count in counts:
            cub = optimized_cubature(
                fem, V, train_poses, target=1e-9, max_elements=count, seed=seed, groups=train_groups
            )
            el, w0 = cub.elements, cub.weights
            A, b, keep = _normalized(fem, V, train_poses, el)
            Ah, bh, keep_h = _normalized(fem, V, held_poses, el)
            c_all = _coords(fem, V, mass, train_poses)[keep]
            c_h = _coords(fem, V, mass, held_poses)[keep_h]
            v = is_val[keep]
            net, info = train_weight_net(
                A[~v], b[~v], c_all[~v], A[v], b[v], c_all[v], w0, epochs=epochs, seed=seed
            )
            with torch.no_grad():
                w_h = net(torch.as_tensor(c_h)).numpy()
                w_t = net(torch.as_tensor(c_all)).numpy()
            out.append(
                {
                    "elements": len(el),
                    "greedy": relative_error(Ah, bh, w0),
                    "neural": relative_error(Ah, bh, w_h),
                    "greedy_train": relative_error(A, b, w0),
                    "neural_train": relative_error(A, b, w_t),
                    **info,
                }
            )
        return out
    finally:
        torch.set_num_threads(torch_threads)


def _coords(fem, V: np.ndarray, mass: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """PCA coordinates ``V^T M (x - X)`` (P, k) of poses (P, n, 3)."""
    d = (poses - fem.X).reshape(len(poses), -1)
    return (d * np.repeat(mass, 3)) @ V
