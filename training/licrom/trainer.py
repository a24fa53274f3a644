"""LiCROM's trainer, ``train(run)`` (:mod:`training.licrom`'s docstring has the method): the
field and its encoder, the time-budget plan, least-squares codes and the head refit, the
static modes and derivatives, cubature, the model file."""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...core.data.files import ensure_writable_dir
from ...core.errors import NeuralRomError
from ...core.methods.licrom import (
    DERIVATIVES_AUTO_RATIO,
    FRAME_FLOATING,
    FRAME_WORLD,
    PIN_TOLERANCE,
    REFERENCE_OBJECT,
    REFERENCE_WORLD,
    Domain,
    Field,
    LicromSimulation,
    PinPoints,
    static_modes,
)
from ...core.methods.licrom import save as save_licrom_model
from ...core.reduced.cubature import Cubature
from ...core.reduced.subspace import mass_weighted_pod
from ..nets import (
    build_mlp,
    load_torch_checkpoint,
    save_torch_checkpoint,
    to_numpy_mlp,
    torch_device,
    torch_threads,
)
from ..run import TrainingRun, even_indices
from .data import Mesh, bake_entries, open_family, primary_bakes

#: Seconds between streamed metrics.
_THROTTLE_S = 1.0

#: Latent codes of training frames kept in the model file: the poses each mesh's fitted
#: cubature is fitted to (a seeded sample when there are more frames).
CUBATURE_CODES = 256


# ------------------------------------------------------------------------------------------
# Networks
# ------------------------------------------------------------------------------------------


class PointNet(nn.Module):
    """PointNet encoder (Qi 2017) without the input transform: (B, P, 6) -> (B, r)."""

    def __init__(self, r: int, activation: str) -> None:
        super().__init__()
        self.point = build_mlp([6, 64, 128], activation)
        self.act = self.point[1].__class__()
        self.head = build_mlp([128, 64, r], activation)

    def forward(self, pts: torch.Tensor) -> torch.Tensor:
        h = self.act(self.point(pts))  # (B, P, 128)
        return self.head(h.max(dim=1).values)


class _Data:
    """Training frames of every mesh as tensors: normalized nodes, sampling probabilities
    (lumped mass) and normalized displacements per mesh, the (mesh, frame) list, and for the
    points inside the elements the tets, their volume shares and a fixed volume sample (the
    refit's)."""

    def __init__(
        self,
        meshes,
        frames_by_mesh,
        center,
        scale,
        u_scale,
        dev,
        volume_share: float = 0.0,
        pool: int = 4096,
        seed: int = 0,
    ) -> None:
        self.X = [
            torch.tensor((m.X_ref - center) / scale, dtype=torch.float32, device=dev)
            for m in meshes
        ]
        self.p = [
            torch.tensor(m.mass / m.mass.sum(), dtype=torch.float32, device=dev) for m in meshes
        ]
        self.U = [
            torch.tensor(f / u_scale, dtype=torch.float32, device=dev) for f in frames_by_mesh
        ]
        self.index = np.array(
            [(mi, j) for mi, f in enumerate(frames_by_mesh) for j in range(len(f))], np.int64
        ).reshape(-1, 2)
        self.volume_share = float(volume_share)
        self.T = [torch.tensor(m.T, dtype=torch.int64, device=dev) for m in meshes]
        self.vol = []
        for m in meshes:
            v = np.abs(np.linalg.det(m.X[m.T[:, 1:]] - m.X[m.T[:, :1]]))
            self.vol.append(torch.tensor(v / v.sum(), dtype=torch.float32, device=dev))
        # a fixed volume sample per mesh (tets by volume, uniform barycentric coordinates)
        rng = np.random.default_rng([seed, 7])
        self.pool = []
        for mi in range(len(meshes)):
            v = self.vol[mi].double().cpu().numpy()
            t = rng.choice(len(v), size=pool, p=v / v.sum())
            b = rng.dirichlet(np.ones(4), size=pool)
            self.pool.append(
                (torch.tensor(t, device=dev), torch.tensor(b, dtype=torch.float32, device=dev))
            )

    def _inside(self, mi: int, t: torch.Tensor, b: torch.Tensor, frames=None):
        """Points at tets ``t`` (s,) and barycentric coordinates ``b`` (s, 4) of mesh ``mi``:
        their normalized positions (s, 3) and the frames' displacements (F, s, 3), linearly
        interpolated in each tet (the finite-element field)."""
        nodes = self.T[mi][t]  # (s, 4)
        Xs = torch.einsum("sk,skd->sd", b, self.X[mi][nodes])
        U = self.U[mi] if frames is None else self.U[mi][frames]
        return Xs, torch.einsum("sk,fskd->fsd", b, U[:, nodes])

    def points(self, mi: int):
        """Every point the closed-form refit weighs on mesh ``mi``: ``(X (s, 3), w (s,),
        U (F, s, 3))``; the nodes weighted by lumped mass and the volume sample, shared by
        ``volume_share``; weights sum to 1."""
        v = self.volume_share
        if v <= 0.0:
            return self.X[mi], self.p[mi], self.U[mi]
        Xv, Uv = self._inside(mi, *self.pool[mi])
        wv = torch.full((len(Xv),), v / len(Xv), device=Xv.device)
        if v >= 1.0:
            return Xv, wv, Uv
        return (
            torch.cat([self.X[mi], Xv]),
            torch.cat([(1 - v) * self.p[mi], wv]),
            torch.cat([self.U[mi], Uv], dim=1),
        )

    def batch(self, rows: np.ndarray, points: int, gen: torch.Generator):
        """``(X (B, P, 3), u (B, P, 3), w (B, P))`` of frames ``rows`` of :attr:`index`. A
        share ``volume_share`` of the points lies inside the elements (a tet drawn by volume,
        uniform barycentric coordinates: the displacement interpolated linearly, as the
        finite-element field is), weighted equally; the rest are nodes: a mesh with at most
        that many nodes gives all of them (in random order, padded with zero weights),
        weighted by lumped mass, a larger one nodes drawn by mass (with replacement), weighted
        equally. Each frame's weights sum to 1; the inside points come first."""
        Pv = int(round(self.volume_share * points))
        Pn = points - Pv
        Xs, us, ws = [], [], []
        for mi, j in self.index[rows]:
            dev = self.p[mi].device
            X_parts, u_parts, w_parts = [], [], []
            if Pv:
                t = torch.multinomial(self.vol[mi], Pv, replacement=True, generator=gen)
                e = -torch.log(torch.rand(Pv, 4, generator=gen, device=dev).clamp_min(1e-12))
                Xv, Uv = self._inside(mi, t, e / e.sum(1, keepdim=True), frames=[int(j)])
                X_parts.append(Xv)
                u_parts.append(Uv[0])
                w_parts.append(torch.full((Pv,), (Pv / points) / Pv, device=dev))
            if Pn:
                share = Pn / points
                n = len(self.p[mi])
                if n <= Pn:
                    idx = torch.randperm(n, generator=gen, device=dev)
                    w = self.p[mi][idx]
                    pad = Pn - n
                    if pad:
                        idx = torch.cat([idx, idx[torch.arange(pad, device=idx.device) % n]])
                        w = torch.cat([w, torch.zeros(pad, device=w.device)])
                else:
                    idx = torch.multinomial(self.p[mi], Pn, replacement=True, generator=gen)
                    w = torch.full((Pn,), 1.0 / Pn, device=dev)
                X_parts.append(self.X[mi][idx])
                u_parts.append(self.U[mi][j][idx])
                w_parts.append(share * w)
            Xs.append(torch.cat(X_parts))
            us.append(torch.cat(u_parts))
            ws.append(torch.cat(w_parts))
        return torch.stack(Xs), torch.stack(us), torch.stack(ws)


def _ls_codes(W: torch.Tensor, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Weighted least-squares codes (B, r) of displacements u (B, P, 3) on field values
    W (B, P, 3, r) with point weights w (B, P): what the runtime's ``latent_of`` computes."""
    B, P, _, r = W.shape
    A = W.reshape(B, 3 * P, r)
    wA = A * w.repeat_interleave(3, dim=1)[..., None]
    G = wA.transpose(1, 2) @ A
    G = G + 1e-6 * G.diagonal(dim1=1, dim2=2).mean(-1)[:, None, None] * torch.eye(
        r, device=W.device
    )
    return torch.linalg.solve(G, wA.transpose(1, 2) @ u.reshape(B, 3 * P, 1))[..., 0]


def refit_head(field: nn.Sequential, data: _Data, r: int) -> float:
    """Set the field's last layer to the best rank-``r`` subspace of its features (closed
    form; the hidden layers stay): every training frame is fitted in the span of the
    features ``phi(X)`` (and 1) by mass-weighted least squares, and the codes' leading ``r``
    directions in the metric ``G = Phi^T M Phi`` (pooled over the meshes by frame count)
    become the modes. On one mesh this is the optimal last layer (Eckart-Young in the feature
    span). Returns the share of the frames' mass-weighted energy the span cannot represent."""
    body, head = field[:-1], field[-1]
    with torch.no_grad():
        Gs, Cs, counts, resid, energy = [], [], [], 0.0, 0.0
        for mi in range(len(data.X)):
            if len(data.U[mi]) == 0:
                continue
            Xm, wm, Um = data.points(mi)
            Phi = torch.cat(
                [body(Xm), torch.ones(len(Xm), 1, device=Xm.device)], dim=1
            ).double()  # (n, h+1)
            m = wm.double()[:, None]
            G = Phi.T @ (m * Phi)
            G = G + 1e-10 * G.diagonal().mean() * torch.eye(len(G), dtype=G.dtype, device=G.device)
            U = Um.double()  # (F, n, 3)
            rhs = torch.einsum("nh,fna->fha", m * Phi, U)
            C = torch.linalg.solve(G, rhs)  # (F, h+1, 3)
            R = U - torch.einsum("nh,fha->fna", Phi, C)
            resid += float((m[None] * R**2).sum())
            energy += float((m[None] * U**2).sum())
            Gs.append(G * len(U))
            Cs.append(C)
            counts.append(len(U))
        G = sum(Gs) / sum(counts)
        L = torch.linalg.cholesky(G)  # G = L L^T
        C = torch.cat(Cs)  # (F, h+1, 3)
        Y = torch.einsum("hk,fha->fak", L, C).reshape(len(C), -1)  # whitened, (F, 3(h+1))
        V = torch.linalg.svd(Y.T, full_matrices=False)[0][:, :r]  # (3(h+1), r)
        V = V.reshape(3, -1, r)  # (a, k, j)
        A = torch.linalg.solve_triangular(
            L.T, V.permute(1, 0, 2).reshape(len(G), -1), upper=True
        ).reshape(len(G), 3, r)  # (h+1, a, j)
        A = A * (float(torch.linalg.svd(Y, full_matrices=False)[1][0]) / math.sqrt(len(C)))
        head.weight.copy_(A[:-1].permute(1, 2, 0).reshape(3 * r, -1).to(head.weight.dtype))
        head.bias.copy_(A[-1].reshape(3 * r).to(head.bias.dtype))
    return resid / energy if energy > 0 else 0.0


def projection_loss(field: nn.Sequential, data: _Data, r: int) -> float:
    """Mass-weighted least-squares projection error of every training frame on the field's
    basis at its mesh's nodes (normalized units, summed over frames)."""
    total = 0.0
    with torch.no_grad():
        for mi in range(len(data.X)):
            if len(data.U[mi]) == 0:
                continue
            Xm, wm, Um = data.points(mi)
            n = len(Xm)
            W = field(Xm).double().reshape(1, n, 3, r)
            U = Um.double()
            w = wm.double()[None].expand(len(U), n)
            q = _ls_codes(W.expand(len(U), n, 3, r), U, w)
            R = U - torch.einsum("bpar,fr->fpa", W, q)
            total += float((w[..., None] * R**2).sum())
    return total


#: Epochs timed before the run plans its schedule into the time budget (:func:`planned_epochs`).
_PLAN_AFTER = 3
#: The share of the time budget a plan fills (the rest: the closing refit, rounding, load).
_PLAN_SHARE = 0.9


def planned_epochs(per_epoch: float, budget: float, before: int, total: int) -> int:
    """How many epochs in all (at most ``total``) fit ``budget`` seconds of network training at
    ``per_epoch`` seconds each, ``before`` of them already run by an earlier (resumed) run
    outside this budget's clock. Cutting the epochs at the budget instead would stop the
    paper's schedule before its learning-rate drops (a 1,370-tet ring at the defaults stopped
    at epoch 848 of 1,500, still at the first rate)."""
    return int(min(total, before + max(1, math.floor(_PLAN_SHARE * budget / per_epoch))))


def _split_plan(fit: int, epochs: int, projection: int, done: int) -> tuple[int, int]:
    """(field epochs, projection epochs) of a plan of ``fit`` epochs, in the settings' ratio,
    never fewer field epochs than the ``done`` already run plus one."""
    field = max(done + 1, round(fit * epochs / (epochs + projection)))
    return field, max(fit - field, 0)


def _lr_factor(epoch: int, epochs: int) -> float:
    """The paper's schedule: 1, then / 5 after a third of the epochs, / 50 after two thirds."""
    if epoch < epochs / 3:
        return 1.0
    return 0.2 if epoch < 2 * epochs / 3 else 0.02


# ------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------


def projection_errors(U: np.ndarray, u: np.ndarray, mass: np.ndarray) -> tuple[float, float]:
    """``(sum_f |u_f - U q_f|^2_M, max vertex error)`` of the mass-weighted least-squares
    projection of frames ``u`` (F, n, 3) onto basis ``U`` (3n, r)."""
    m3 = np.repeat(mass, 3)
    D = u.reshape(len(u), -1).T  # (3n, F)
    G = U.T @ (m3[:, None] * U)
    Q = np.linalg.lstsq(G, U.T @ (m3[:, None] * D), rcond=None)[0]
    R = D - U @ Q
    total = float(np.sum(m3[:, None] * R**2))
    vmax = float(np.sqrt((R.reshape(-1, 3, len(u)) ** 2).sum(1)).max()) if R.size else 0.0
    return total, vmax


def training_codes(
    bases: list[np.ndarray],
    frames_by_mesh: list[np.ndarray],
    meshes: list[Mesh],
    seed: int,
    count: int = CUBATURE_CODES,
    avoid: tuple[int, ...] = (),
) -> np.ndarray:
    """The latent codes (c, r) of the training frames, the mass-weighted least-squares fit of
    each frame on its mesh's basis (what the runtime's ``latent_of`` computes); at most
    ``count`` of them, a seeded sample, ``c`` bumped off the sizes in ``avoid`` (the meshes'
    node counts: no array of a model has one as a dimension). The runtime fits each mesh's
    cubature to the reduced forces of these poses (:mod:`core.methods.licrom`)."""
    Q = []
    for U, u, m in zip(bases, frames_by_mesh, meshes):
        if len(u):
            m3 = np.repeat(m.mass, 3)
            G = U.T @ (m3[:, None] * U)
            rhs = U.T @ (m3[:, None] * u.reshape(len(u), -1).T)
            Q.append(np.linalg.lstsq(G, rhs, rcond=None)[0].T)
    Q = np.concatenate(Q) if Q else np.zeros((0, bases[0].shape[1]))
    # drop the rest frames (no force to fit) and keep a seeded sample
    Q = Q[np.linalg.norm(Q, axis=1) > 0]
    keep = min(count, len(Q))
    while keep in avoid and keep > 1:
        keep -= 1
    pick = np.sort(np.random.default_rng([int(seed), 2]).choice(len(Q), keep, replace=False))
    return np.ascontiguousarray(Q[pick], dtype=np.float64)


def static_reach(meshes: list[Mesh], frames_by_mesh: list[np.ndarray], material) -> dict:
    """How far the training frames of pinned meshes go past the static modes' linear range:
    each frame's static coordinates ``s`` (3,), the mass-weighted least-squares fit of its
    displacement on the mesh's three :func:`static_modes` (units of the 1 g sag), and the
    second-order static response they imply, ``D (s_i s_j) / 2`` with the modes' derivatives
    ``D``, against the first-order one ``S s`` (mass-weighted norms). Returns
    ``{"static_g": max |s|, "second_order": max ratio}`` over the frames (0 for no pinned
    frames): what the Static Derivatives setting's Auto decides on
    (:data:`DERIVATIVES_AUTO_RATIO`)."""
    peak_s = peak_ratio = 0.0
    for m, u in zip(meshes, frames_by_mesh):
        if not len(u) or not m.pinned.size:
            continue
        SD = static_modes(m.X, m.T, material, m.pinned, derivatives=True)
        S, D = SD[:, :3], SD[:, 3:]
        m3 = np.repeat(m.mass, 3)
        gram_s, gram_d = S.T @ (m3[:, None] * S), D.T @ (m3[:, None] * D)
        s = np.linalg.solve(gram_s, S.T @ (m3[:, None] * u.reshape(len(u), -1).T)).T
        i, j = np.triu_indices(3)
        pq = s[:, i] * s[:, j] * np.where(i == j, 0.5, 1.0)  # D's pairs, row-major i <= j
        first = np.einsum("fa,ab,fb->f", s, gram_s, s)
        second = np.einsum("fa,ab,fb->f", pq, gram_d, pq)
        moved = first > 0
        peak_s = max(peak_s, float(np.linalg.norm(s, axis=1).max()))
        if moved.any():
            peak_ratio = max(peak_ratio, float(np.sqrt(second[moved] / first[moved]).max()))
    return {"static_g": peak_s, "second_order": peak_ratio}


def derivatives_choice(
    setting: str, static: bool, meshes: list[Mesh], frames_by_mesh, material, metrics: dict
) -> tuple[bool, str]:
    """Whether the model adds the static modes' derivatives (the ``static_derivatives``
    setting: "on", "off" or "auto"), and a sentence saying so and why. They need the static
    modes and every mesh pinned. Auto measures :func:`static_reach` on the training frames
    (into ``metrics``: ``static_second_order``, ``static_coordinates_g``) and turns them on
    from :data:`DERIVATIVES_AUTO_RATIO`."""
    pinned = all(m.pinned.size for m in meshes)
    if not (static and pinned):
        return False, "Static Derivatives off: they need Static Modes on a pinned body."
    if setting != "auto":
        on = setting == "on"
        return on, f"Static Derivatives {'on' if on else 'off'} (the setting)."
    reach = static_reach(meshes, frames_by_mesh, material)
    ratio = reach["second_order"]
    metrics.update(static_second_order=ratio, static_coordinates_g=reach["static_g"])
    on = ratio >= DERIVATIVES_AUTO_RATIO
    past = "swing past" if on else "stay within"
    return on, (
        f"Static Derivatives {'on' if on else 'off'} (automatic): the training bakes {past} "
        f"the static modes' linear range (second-order static response up to {ratio:.2g} "
        f"of the first-order one, threshold {DERIVATIVES_AUTO_RATIO:g}; static coordinates "
        f"up to {reach['static_g']:.2g} g)."
    )


# ------------------------------------------------------------------------------------------
# The trainer
# ------------------------------------------------------------------------------------------


def train(run: TrainingRun) -> dict:
    """Train a LiCROM model on bakes of one or several meshes of an object family and write it
    to ``run.out``; the registry's trainer entry point (``core.methods.licrom.METHOD``).

    Bakes of different meshes are one training set (they must share material, time step and
    gravity). Whole bakes are held out for validation. ``run.expect_mesh_hash``: the target mesh,
    whose bakes the model is replayed on and opened on by default (one of the bakes must be
    of it).

    Returns
    -------
    The result record of :meth:`.run.TrainingRun.finish` with LiCROM's metrics:
    ``meshes``, ``epochs_done``, ``train_loss``, ``projection_ratio_to_pod`` (the field's
    mass-weighted projection error over POD's of the same size on the primary mesh's training
    frames; at least 1 by Eckart-Young), ``pod_error_sq``, ``field_error_sq``,
    ``max_error_val_m`` (largest vertex error of the field's projection on held-out frames).
    """
    ensure_writable_dir(run.out.parent, "the model")
    values = run.settings
    r = int(values["latent_dim"])
    seed = int(values["seed"])
    fam = open_family(run.data, values["validation_fraction"], seed, run.expect_mesh_hash)
    caches, meshes, mesh_of, train_i, val_i, primary, material, all_ds = fam
    by_object = bake_entries(run.data)[1][0] is not None
    dev = torch_device(run.device)
    run.device = str(dev)
    run.use_bakes(primary_bakes(*fam), keyed_on=all_ds)
    run.say(0.02, f"{len(caches)} bakes of {len(meshes)} meshes")
    # a free body's field is trained in its body frame; a pinned one in the pins' frame
    floating = bool(values["floating_frame"]) and not any(m.pinned.size for m in meshes)

    # ---- frames, spread evenly over the training bakes
    per_bake = max(1, values["max_frames"] // max(len(train_i), 1))
    frames_by_mesh = [[] for _ in meshes]
    for g in train_i:
        m = meshes[mesh_of[g]]
        frames_by_mesh[mesh_of[g]].append(
            m.displacements(caches[g], even_indices(caches[g].n_frames, per_bake), floating)
        )
    frames_by_mesh = [
        np.concatenate(f) if f else np.zeros((0, len(m.X), 3))
        for f, m in zip(frames_by_mesh, meshes)
    ]
    val_frames = [
        (
            mesh_of[g],
            meshes[mesh_of[g]].displacements(
                caches[g], even_indices(caches[g].n_frames, per_bake), floating
            ),
        )
        for g in val_i
    ]
    allX = np.concatenate([m.X_ref for m in meshes])
    lo, hi = allX.min(0), allX.max(0)
    center, scale = (lo + hi) / 2, float((hi - lo).max() / 2) or 1.0
    all_u = np.concatenate([f.reshape(-1, 3) for f in frames_by_mesh])
    u_scale = float(np.sqrt(np.mean(all_u**2))) or 1.0
    diag = float(np.linalg.norm(hi - lo))

    # ---- networks
    torch.manual_seed(seed)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    act = values["activation"]
    with torch_threads(dev, 1):
        field = build_mlp([3, *values["hidden"], 3 * r], act).to(dev)
        encoder = PointNet(r, act).to(dev)
        data = _Data(
            meshes,
            frames_by_mesh,
            center,
            scale,
            u_scale,
            dev,
            volume_share=float(values["volume_share"]),
            seed=seed,
        )
        opt = torch.optim.Adam(
            [*field.parameters(), *encoder.parameters()], lr=values["learning_rate"]
        )
        epochs, proj_epochs = int(values["epochs"]), int(values["projection_epochs"])
        total = epochs + proj_epochs
        state = {"epoch": 0, "train_loss": float("nan")}
        f = run.checkpoints.file("licrom", ".pt")
        st = load_torch_checkpoint(f, dev)
        if st is not None:
            field.load_state_dict(st["field"])
            encoder.load_state_dict(st["encoder"])
            if int(st["epoch"]) > epochs:  # in the least-squares phase: the field's optimizer
                opt = torch.optim.Adam([*field.parameters()], lr=values["learning_rate"])
            opt.load_state_dict(st["optimizer"])
            gen.set_state(st["generator"].cpu())
            state = {"epoch": int(st["epoch"]), "train_loss": float(st["train_loss"])}
            if "plan_epochs" in st:  # the schedule the run planned into its time budget
                epochs, proj_epochs = int(st["plan_epochs"]), int(st["plan_projection"])
                total = epochs + proj_epochs
            run.say(0.05, f"resumed at epoch {state['epoch']}")
        # no more points than the largest mesh has nodes (a small mesh gives all of its own)
        P = min(int(values["points_per_frame"]), max(len(m.X) for m in meshes))
        E = min(int(values["encoder_points"]), P)
        B = int(values["batch_size"])
        F = len(data.index)
        if F == 0:
            raise NeuralRomError("The training bakes have no frames; bake some and try again.")
        t_train = time.perf_counter()
        budget = float(values["time_budget"])
        last = 0.0
        stopped = None
        first = state["epoch"]
        planned = 0  # the epochs asked, once the run planned fewer into the budget
        while state["epoch"] < total:
            e = state["epoch"]
            projection = e >= epochs
            if e == epochs:  # the best last layer for the features, then least-squares codes
                refit_head(field, data, r)
                opt = torch.optim.Adam([*field.parameters()], lr=values["learning_rate"])
            lr = values["learning_rate"] * (0.02 if projection else _lr_factor(e, epochs))
            for group in opt.param_groups:
                group["lr"] = lr
            perm = np.random.default_rng([seed, e]).permutation(F)  # the same after a resume
            losses = []
            for s0 in range(0, F, B):
                Xb, ub, wb = data.batch(perm[s0 : s0 + B], P, gen)
                nb = len(Xb)
                W = field(Xb.reshape(-1, 3)).reshape(nb, P, 3, r)
                if projection:
                    q = _ls_codes(W, ub, wb)
                else:
                    q = encoder(torch.cat([Xb[:, :E], ub[:, :E]], dim=-1))
                pred = torch.einsum("bpar,br->bpa", W, q)
                loss = (wb[..., None] * (pred - ub) ** 2).sum() / (3 * nb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
            state = {"epoch": e + 1, "train_loss": float(np.mean(losses))}
            done = state["epoch"]
            elapsed = time.perf_counter() - t_train
            if done - first >= _PLAN_AFTER and done < epochs:  # re-planned as timings come
                fit = planned_epochs(elapsed / (done - first), budget, first, total)
                if fit < total:  # the whole schedule, compressed into the budget
                    planned = planned or total
                    epochs, proj_epochs = _split_plan(fit, epochs, proj_epochs, done)
                    total = epochs + proj_epochs
            if done < total and elapsed / done * total > budget and elapsed > budget:
                stopped = "time budget"
            end = done == total or stopped is not None or run.should_cancel()
            if f is not None and (done % values["checkpoint_every"] == 0 or end):
                save_torch_checkpoint(
                    f,
                    {
                        "field": field.state_dict(),
                        "encoder": encoder.state_dict(),
                        "optimizer": opt.state_dict(),
                        "generator": gen.get_state(),
                        "plan_epochs": torch.tensor(epochs),
                        "plan_projection": torch.tensor(proj_epochs),
                        **{k: torch.tensor(v) for k, v in state.items()},
                    },
                )
            now = time.perf_counter()
            if now - last >= _THROTTLE_S or end:
                last = now
                run.emit(
                    {
                        "epoch": done,
                        "train_loss": state["train_loss"],
                        "train_rms_m": math.sqrt(state["train_loss"]) * u_scale,
                    }
                )
                run.say(
                    0.05 + 0.7 * done / total,
                    f"epoch {done}/{total}{' (least-squares codes)' if projection else ''}: "
                    f"rms {math.sqrt(state['train_loss']) * u_scale * 1000:.3g} mm",
                )
            run.check_cancel(f"Training cancelled at epoch {done} (checkpointed).")
            if stopped:
                run.warnings.append(
                    f"Training stopped after {done} of {total} epochs: the time budget "
                    f"({budget:g} s) ran out; raise Time Budget for a closer fit."
                )
                break
        if planned:
            run.warnings.append(
                f"Training planned {total} of {planned} epochs to fit the time budget "
                f"({budget:g} s; the learning rate dropped at the same fractions); raise Time "
                "Budget for a closer fit."
            )
        if state["epoch"] >= epochs:  # keep the closed-form head where it fits better
            before = {k: v.clone() for k, v in field.state_dict().items()}
            loss_before = projection_loss(field, data, r)
            span_residual = refit_head(field, data, r)
            if projection_loss(field, data, r) > loss_before:
                field.load_state_dict(before)
        else:
            span_residual = refit_head(field, data, r)
        train_seconds = time.perf_counter() - t_train

        # ---- export, checked against torch
        net = to_numpy_mlp(field, act)
        test = torch.tensor(data.X[primary][:64].cpu().numpy(), dtype=torch.float64)
        ref = field.double()(test.to(dev)).detach().cpu().numpy()
        field.float()
        export_error = float(np.abs(net.forward(test.numpy()) - ref).max())
    fld = Field(net, center, scale, u_scale)
    pins = PinPoints.of_meshes([(m.X_ref, m.T, m.pinned) for m in meshes], PIN_TOLERANCE * diag)
    domain = Domain.of_meshes(
        [(m.X_ref, m.T) for m in meshes], seed=seed, avoid=tuple(len(m.X) for m in meshes)
    )

    # ---- metrics: projection vs POD on the primary mesh, held-out projection error
    run.say(0.78, "measuring the field's basis against POD")
    metrics = {
        "meshes": len(meshes),
        "epochs_done": state["epoch"],
        "epochs_planned": epochs + proj_epochs,
        "train_loss": state["train_loss"],
        "network_seconds": train_seconds,
        "export_max_abs_error": export_error,
        "latent_dim": r,
        "feature_span_residual": span_residual,
    }

    def basis_of(m: Mesh) -> np.ndarray:
        U = fld.basis(m.X_ref)
        U.reshape(len(m.X), 3, r)[m.pinned] = 0.0
        return U

    pm = meshes[primary]
    u_p = frames_by_mesh[primary]
    if len(u_p) == 0:  # the primary mesh has only held-out bakes: compare on the first mesh
        pm, u_p = meshes[0], frames_by_mesh[0]
    field_sq, field_max = projection_errors(basis_of(pm), u_p, pm.mass)
    try:
        pod = mass_weighted_pod(u_p, pm.mass, pm.pinned, k=min(r, len(u_p)))
        pod_sq, pod_max = projection_errors(pod.U, u_p, pm.mass)
    except NeuralRomError:  # the frames span fewer than r directions: POD is exact
        pod_sq = pod_max = None
    metrics.update(
        field_error_sq=field_sq,
        pod_error_sq=pod_sq,
        projection_ratio_to_pod=field_sq / pod_sq if pod_sq else None,
        field_max_error_train_m=field_max,
        pod_max_error_train_m=pod_max,
    )
    static = bool(values["static_modes"]) and pm.pinned.size > 0
    derivatives, why = derivatives_choice(
        values["static_derivatives"], static, meshes, frames_by_mesh, material, metrics
    )
    run.say(0.79, why)

    def runtime_basis(m: Mesh) -> np.ndarray:
        """The basis the runtime puts on ``m``: with the static modes' derivatives, the
        field's and the mesh's :func:`static_modes` with them (the codes are then the
        frames' own static coordinates, which the cubature's poses need: a swung cylinder
        of issue 23 reaches 2-3.6 g of sag, where random ones of 0.3 g left a trained
        member 19 mm off its bake and these 9.9 mm)."""
        U = basis_of(m)
        if not derivatives or not m.pinned.size:
            return U
        S = static_modes(m.X, m.T, material, m.pinned, derivatives=True)
        return np.hstack([U, S])

    codes = training_codes(
        [runtime_basis(m) for m in meshes],
        frames_by_mesh,
        meshes,
        seed,
        avoid=tuple(len(m.X) for m in meshes),
    )
    metrics["cubature_codes"] = len(codes)
    # the rule the runtime fits on the primary mesh (its static modes too), reported (size,
    # error) as other methods'
    cubature = None
    if values["cubature"] == "fitted" and values["cubature_vertices"] > 0:
        runtime = LicromSimulation(
            fld,
            pm.X,
            pm.T,
            material,
            pins=pins,
            pinned=pm.pinned,
            cubature_vertices=values["cubature_vertices"],
            seed=seed,
            origin=pm.origin,
            codes=codes,
            cubature_target=values["cubature_target"],
            max_cubature=values["max_cubature"],
            cubature_poses=values["cubature_poses"],
            static=static,
            static_derivatives=derivatives,
        )
        if runtime.cubature_info.get("method") == "optimized":
            cubature = Cubature(runtime.elements, runtime.weights, dict(runtime.cubature_info))
    val_max = field_max
    if val_frames:
        val_max = max(
            projection_errors(basis_of(meshes[mi]), u, meshes[mi].mass)[1] for mi, u in val_frames
        )
    run.emit(
        {"projection_ratio_to_pod": metrics["projection_ratio_to_pod"], "max_error_val_m": val_max}
    )

    b = run.bakes
    mesh_bake = b.heldout_bake() or b.ds[0]
    save = functools.partial(save_licrom_model, field=fld, domain=domain, pins=pins, codes=codes)
    result = run.finish(
        run.out,
        save,
        k=r + 3 * static + 6 * derivatives,
        dofs=r + 3 * static + 6 * derivatives,
        max_error_val_m=val_max,
        cubature=cubature,
        metrics=metrics,
        metadata={
            "mesh_bake": str(Path(mesh_bake.path).resolve()),
            "mesh_bake_origin": [float(v) for v in meshes[primary].origin],
            "reference": REFERENCE_OBJECT if by_object else REFERENCE_WORLD,
            "frame": FRAME_FLOATING if floating else FRAME_WORLD,
            "bakes": [str(c.path) for c in caches],
            "train_trajectories": [int(i) for i in train_i],
            "validation_trajectories": [int(i) for i in val_i],
            "static_derivatives": derivatives,
        },
        rollout=bool(values["rollout"]),
        at=0.85,
    )
    return {**result, "choice": why}
