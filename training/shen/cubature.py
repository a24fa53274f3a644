"""Neural cubature (Shen et al. 2021, sec. 5) against the optimized (greedy) cubature on the
forces of a Shen subspace: an experiment, not (yet) a runtime feature.

The optimized cubature (:func:`core.cubature.optimized_cubature`, An et al. 2008) picks
elements greedily and fits fixed non-negative weights ``w`` so that ``sum_e w_e V_e^T g_e(x)``
matches the reduced force ``V^T g(x)`` on training poses. Shen et al. argue that on a curved
subspace fixed weights are the wrong model and predict *pose-dependent* weights with a network
``W`` whose last layer is squared (non-negative), the elements chosen by a graph network ``S``
(sec. 5.1-5.2).

What is implemented here, and where it departs from the paper:

* the weight network ``W`` (sec. 5.2): the pose's PCA coordinates ``c`` (k,) (the paper feeds
  ``r`` through the frozen decoder to ``u``; ``c`` is ``u`` in the PCA basis) -> four sin
  layers -> one value per cubature element, ``w_e(c) = (sqrt(w0_e) + y_e(c))^2`` with ``w0``
  the NNLS weights of the set and the last layer initialized to zero: the network starts *at*
  the fixed-weight rule (a squared output started at zero would have no gradient) and is
  trained to lower the relative force error of the training poses
  (``sqrt(mean_p |A_p w(c_p) - b_p|^2 / |b_p|^2)``, the normalization of :mod:`core.cubature`),
  with Adam and early stopping on a validation share of the training trajectories;
* the selection network ``S`` (sec. 5.1, :class:`SelectionNet`): a GCN on the *element*
  graph (tets sharing a face; the paper's graph is the mesh's vertices, but it scores
  elements), whose input is the displacement ``u`` (each element carries its four vertices'
  12 components), two graph convolutions of eight channels with ``sin`` (eq. 19 with
  ``c_ij = sqrt(d_i d_j)``, the element itself counted in its neighbourhood), two FC layers
  and a softmax over the candidate elements;
* ``S`` and ``W`` trained together (:func:`neural_cubature`, Fig. 6): ``C`` starts as a
  farthest-point sample; each round ``W`` is trained on ``C`` (15 epochs), the residual of its
  weights (eq. 20) is ``S``'s target, ``S`` is trained 15 epochs (its parameters kept from
  round to round, Fig. 8) and adds the ``K`` candidates of highest mean score. Eq. (21) as
  printed does not say how ``S``'s scores enter its loss; we read it as the scores acting as
  weights on the candidates: ``L_S = |f_bar - alpha sum_e s_e f_e|^2 / |f_bar|^2`` with
  ``alpha >= 0`` the least-squares scale of the batch (:func:`selection_loss`), so ``S`` learns
  which candidates explain what the current rule misses (the greedy's criterion, for many
  elements at once). Measured departures: ``S``'s learning rate 1e-2 (at the paper's 1e-3
  15 epochs of our ~150 poses, 60 Adam steps a round where the paper's 20,000 poses give
  thousands, hardly move it: 0.44 / 0.44 / 0.43 / 0.34 held-out error at 20/50/100/200 on
  the whip against 0.44 / 0.44 / 0.43 / 0.054), and ``spread``: no two of a round's picks
  within that many face rings (4 by default), because ``S``'s scores are smooth over the
  graph and its top ``K`` are neighbours that add nothing new (30 of the 50 elements within
  4 cm of the clamp; with spread 4: 0.43 / 0.29 / 0.057 / 0.030).

:func:`compare_cubatures` reports the relative error on held-out poses at each element count
(the paper's Table 1 reports 20/50/100/200) for the greedy rule, ``W`` on the greedy's
elements, ``S``'s elements with NNLS weights and ``S + W``; ``bench/shen.py --cubature``
prints it beside the paper's Table 1 with held-out replays of a Shen model with each rule.
The outcome on the whip of ``bench/shen.py`` (``Measured`` below): the greedy rule wins, so
the runtime keeps it and this module stays an experiment.

Measured (``bench/shen.py --cubature``: the whip's 960 tets, 3 + 2 DOFs on k = 30 PCA
modes, 148 training and 144 held-out poses; held-out relative force error, percent)
--------------------------------------------------------------------------------------
=====  ======  ========  ==============  ===========  ==========  ==========================
count  greedy  greedy+W  S+NNLS          S+W          FPS+NNLS    paper neural[5] / greedy
=====  ======  ========  ==============  ===========  ==========  ==========================
20     7.72    8.82      43.4 (44.4)     42.7 (46.7)  21.1        60.3 / 66.6
50     1.29    1.06      29.2 (44.0)     24.2 (47.2)  5.04        37.1 / 47.1
100    0.20    0.18      5.74 (42.6)     4.81 (45.4)  1.88        22.3 / 31.2
200    0.01    0.01      3.00 (5.37)     2.75 (4.89)  0.59        15.7 / 19.2
=====  ======  ========  ==============  ===========  ==========  ==========================

(greedy: 20, 46, 90, 186 elements, it stops when no element lowers the error; S with
``add`` 10 and ``spread`` 4, in brackets the paper's plain top-10; FPS+NNLS: farthest-point
elements with NNLS weights; with the paper's better ``K`` = 5, spread 4: S+NNLS 72.5 /
72.1 / 15.3 / 1.75, S+W 78.0 / 69.1 / 11.5 / 1.59.) ``S`` selects worse than a
farthest-point sample of the same size: it learns where the force is (the clamp) and its smooth scores pick neighbours there.
The batch selection itself costs accuracy even with a perfect score: adding the 5 (10)
candidates with the largest NNLS weights on the residual each round (what ``L_S`` asks
``S`` to approximate) errs 8.5 (17.1) / 2.9 (3.1) / 0.50 (0.67) / 0.02 (0.06) percent, so no
``S`` that picks several elements a round can match the one-at-a-time greedy here. ``W`` on
the greedy's elements wins only where the error is already about 1 percent (46 and 90
elements) and loses at 20; on the trainer's own rule (34 elements, target 5 percent) it
gives 3.59 against 3.78 percent.

Held-out replays of the Shen model with each rule (largest error over the two held-out bakes,
mm, at the weights times 1, 1 + 1e-9 and 1 - 1e-9): 20 elements greedy 63.3 (all three),
greedy+W 141.7, S+NNLS 561.7, S+W 232.5; 46-50: 49.8, 41.7, 110.3, 99.0; 90-100: 57.4, 56.5,
201.2 / 105.5 / 201.3, 89.0; every element 57.4; the model's own 34 elements 42.1 / 42.1 /
280.0. A replay tells apart only rules whose force errors differ by far more than a few
percent: at the release of the tip (frame 10) Newton on eq. (10) has two roots 15 mm apart
and a rounding-sized change of the weights picks the other one (37 against 29 iterations,
both converged), which is 42 against 280 mm at the end; ``W`` trained from the model's own
weights with its initial state kept (the same weights to rounding) replays 220 mm. So the
replays confirm that ``S``'s sets are worse (43 percent force error: 562 mm) and that ``W``
at 20 elements is worse, and cannot show a gain from ``W`` at 46-90 elements.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import nnls
from torch import nn

from ...core.reduced.cubature import optimized_cubature, reduced_element_forces, reduced_forces
from ...core.reduced.model import farthest_points
from ..nets import Sin


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
                mods.append(Sin(1.0))
        self.net = nn.Sequential(*mods)
        self.register_buffer("sqrt_w0", torch.as_tensor(np.sqrt(w0)))
        self.scale = float(scale)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        return (self.sqrt_w0 + self.sqrt_w0.mean() * self.net(c / self.scale)) ** 2


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


def element_graph(T: np.ndarray) -> torch.Tensor:
    """Normalized adjacency ``A^ = D^{-1/2} (A + I) D^{-1/2}`` (m, m) of the element graph:
    tets are neighbours when they share a face (eq. 19's ``1 / c_ij = 1 / sqrt(d_i d_j)``,
    ``d_i`` counting the element itself), as a sparse torch tensor (float64)."""
    T = np.asarray(T, dtype=np.int64)
    m = len(T)
    faces = np.sort(T[:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3), axis=1)
    owner = np.repeat(np.arange(m), 4)
    _, inv, cnt = np.unique(faces, axis=0, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    inner = cnt[inv] == 2
    order = np.argsort(inv[inner], kind="stable")
    pairs = owner[inner][order].reshape(-1, 2)  # the two tets of each interior face
    rows = np.concatenate([pairs[:, 0], pairs[:, 1], np.arange(m)])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0], np.arange(m)])
    deg = np.bincount(rows, minlength=m).astype(np.float64)
    vals = 1.0 / np.sqrt(deg[rows] * deg[cols])
    return torch.sparse_coo_tensor(
        torch.as_tensor(np.stack([rows, cols])),
        torch.as_tensor(vals),
        (m, m),
        check_invariants=True,
    ).coalesce()


def element_features(T: np.ndarray, X: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """S's input (P, m, 12): the displacements ``u`` of each element's four vertices (the
    paper's input is the full-space ``u``; on the element graph each node carries its own
    vertices' share of it), divided by their root mean square over the poses."""
    u = (np.asarray(poses) - X)[:, np.asarray(T)].reshape(len(poses), len(T), 12)
    return u / (float(np.sqrt(np.mean(u**2))) or 1.0)


class SelectionNet(nn.Module):
    """``S`` (sec. 5.1): two graph convolutions of eight channels with ``sin`` (eq. 19,
    ``h' = sin(A^ h Gamma)``), then two FC layers, one score per element; a softmax over the
    candidate (non-cubature) elements turns the scores into probabilities ``s`` (P, m)."""

    def __init__(self, adjacency: torch.Tensor, features: int = 12, channels: int = 8) -> None:
        super().__init__()
        self.adjacency = adjacency
        self.gamma = nn.ModuleList(
            [nn.Linear(features, channels, bias=False), nn.Linear(channels, channels, bias=False)]
        )
        self.fc = nn.Sequential(nn.Linear(channels, channels), Sin(1.0), nn.Linear(channels, 1))
        with torch.no_grad():
            for lin in [*self.gamma, self.fc[0], self.fc[2]]:
                bound = math.sqrt(3.0 / lin.in_features)
                lin.weight.uniform_(-bound, bound)
                if lin.bias is not None:
                    lin.bias.zero_()

    def forward(self, h: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """``h`` (P, m, f) element features, ``candidates`` (m,) bool -> ``s`` (P, m)."""
        P, m, _ = h.shape
        for gamma in self.gamma:  # eq. (19), all poses in one sparse product
            hg = gamma(h)  # (P, m, c)
            c = hg.shape[2]
            mixed = torch.sparse.mm(self.adjacency, hg.permute(1, 0, 2).reshape(m, P * c))
            h = torch.sin(mixed.reshape(m, P, c).permute(1, 0, 2))
        logits = self.fc(h)[..., 0]
        return torch.softmax(logits.masked_fill(~candidates, -torch.inf), dim=1)


def selection_loss(s: torch.Tensor, A: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``L_S`` (eq. 21 as we read it): how much of the cubature residual ``f_bar`` (P, k) (eq.
    20) the scored candidates explain, ``|f_bar - alpha sum_e s_e f_e|^2 / |f_bar|^2`` summed
    over the poses, ``A`` (P, k, m) the element forces, ``alpha >= 0`` the one least-squares
    scale of the batch (the scores are probabilities, the residual has a size)."""
    pred = torch.einsum("pkm,pm->pk", A, s)
    alpha = torch.clamp((pred * residual).sum() / (pred * pred).sum().clamp_min(1e-300), min=0)
    return ((residual - alpha * pred) ** 2).sum() / (residual**2).sum().clamp_min(1e-300)


def _nnls_weights(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fixed non-negative weights (c,) of normalized systems ``A`` (P, k, c), ``b`` (P, k)."""
    return nnls(A.reshape(-1, A.shape[2]), b.ravel())[0]


def neural_cubature(
    A: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    features: np.ndarray,
    adjacency: torch.Tensor,
    centroids: np.ndarray,
    is_val: np.ndarray,
    counts=(20, 50, 100, 200),
    *,
    add: int = 10,
    epochs: int = 15,
    lr: float = 1e-3,
    s_epochs: int | None = None,
    s_lr: float | None = 1e-2,
    spread: int = 4,
    start: int | None = None,
    seed: int = 0,
) -> list[dict]:
    """Grow a cubature set by the paper's alternation of ``S`` and ``W`` (sec. 5, Fig. 6).

    ``C`` starts as ``add`` farthest-point elements (the paper's Voronoi samples). Each round:
    ``W`` (:class:`WeightNet`, started at the NNLS weights of ``C``) is trained ``epochs`` on
    the training poses; the residual ``f_bar`` of its weights (eq. 20) is what ``S`` trains
    on (``epochs``, :func:`selection_loss`, its parameters kept from round to round as in
    Fig. 8); ``S``'s probabilities averaged over the training poses pick the ``add`` best
    candidates. At each size in ``counts`` the set is recorded with its NNLS weights.

    Parameters
    ----------
    A, b : (P, k, m), (P, k) normalized element forces of every element and exact forces
    c : (P, k) pose coordinates (``W``'s input)
    features : (P, m, f) ``S``'s input (:func:`element_features`)
    adjacency : (m, m) :func:`element_graph`
    centroids : (m, 3) rest element centroids (the farthest-point start)
    is_val : (P,) bool, the poses ``W`` validates on (whole trajectories)
    add : elements ``S`` adds a round (the paper's ``K``: 5, 10, 20 tested)
    epochs, lr : ``W``'s epochs a round and learning rate (the paper's 15, 1e-3)
    s_epochs, s_lr : ``S``'s (``None``: ``W``'s; 1e-2 by default, module docstring)
    spread : no two picks of a round within this many face rings (0: the plain top ``add``)
    start : size of the farthest-point start (``None``: ``add``)

    Returns
    -------
    list of dicts: ``elements`` (count,), ``w0`` (NNLS weights), ``seconds`` since the start
    and ``s_loss`` (``S``'s last loss).
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    m = A.shape[2]
    counts = sorted(int(n) for n in counts if int(n) <= m)
    chosen = np.zeros(m, dtype=bool)
    chosen[farthest_points(centroids, min(add if start is None else start, counts[0]), seed)] = True
    S = SelectionNet(adjacency, features.shape[2]).to(torch.float64)
    opt = torch.optim.Adam(S.parameters(), lr=lr if s_lr is None else s_lr)
    tA, tf = torch.as_tensor(A), torch.as_tensor(features)
    out, t0, s_loss = [], time.perf_counter(), float("nan")
    while True:
        el = np.flatnonzero(chosen)
        w0 = _nnls_weights(A[:, :, el], b)
        if len(el) in counts:
            out.append(
                {"elements": el, "w0": w0, "seconds": time.perf_counter() - t0, "s_loss": s_loss}
            )
        if len(el) >= counts[-1]:
            return out
        Ael = A[:, :, el]
        net, _ = train_weight_net(
            Ael[~is_val],
            b[~is_val],
            c[~is_val],
            Ael[is_val],
            b[is_val],
            c[is_val],
            w0,
            epochs=epochs,
            lr=lr,
            seed=seed,
            patience=epochs,
        )
        with torch.no_grad():
            w = net(torch.as_tensor(c)).numpy()
        residual = torch.as_tensor(b - np.einsum("pkc,pc->pk", Ael, w))  # eq. (20)
        cand = torch.as_tensor(~chosen)
        for _ in range(epochs if s_epochs is None else s_epochs):
            for idx in np.array_split(rng.permutation(len(A)), max(1, len(A) // 32)):
                i = torch.as_tensor(idx)
                loss = selection_loss(S(tf[i], cand), tA[i], residual[i])
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            s = S(tf, cand)
            s_loss = float(selection_loss(s, tA, residual))
            score = s.mean(0).numpy()
        # the next size in counts is met exactly
        room = min(add, next(n for n in counts if n > len(el)) - len(el))
        score[chosen] = -np.inf
        chosen[_top(score, room, adjacency, spread)] = True


def _top(score: np.ndarray, count: int, adjacency: torch.Tensor, spread: int) -> np.ndarray:
    """The ``count`` highest scores; with ``spread`` > 0 no two of them within ``spread``
    face-neighbour rings of each other (while candidates are left)."""
    order = np.argsort(-score, kind="stable")
    if spread <= 0:
        return order[:count]
    idx = adjacency.indices().numpy()
    m = len(score)
    ring = sp.csr_matrix((np.ones(idx.shape[1]), (idx[0], idx[1])), shape=(m, m))
    blocked = ~np.isfinite(score)
    picked: list[int] = []
    for e in order:
        if len(picked) == count or not np.isfinite(score[e]):
            break
        if blocked[e]:
            continue
        picked.append(int(e))
        near = np.zeros(m, dtype=bool)
        near[e] = True
        for _ in range(spread):
            near = near | (ring @ near > 0)
        blocked |= near
    if len(picked) < count:  # too few far apart: fill with the best of the rest
        taken = set(picked)
        rest = [int(e) for e in order if np.isfinite(score[e]) and int(e) not in taken]
        picked += rest[: count - len(picked)]
    return np.asarray(picked, dtype=np.int64)


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
    add: int = 10,
    spread: int = 4,
) -> list[dict]:
    """Relative reduced-force error on ``held_poses`` of the greedy cubature, of the neural
    weights ``W`` on its elements, of the elements ``S`` selects (:func:`neural_cubature`)
    with NNLS weights and with ``W``, at each element count.

    Parameters
    ----------
    fem : core.fem.TetFEM
    V : (3n, k) PCA basis of the model (the forces are ``V^T g``), M-orthonormal
    mass : (n,) lumped vertex masses, kg (the coordinates ``c = V^T M (x - X)``)
    train_poses, held_poses : (P, n, 3), (H, n, 3) poses of the subspace (metres)
    train_groups : (P,) trajectory of each training pose (the validation split keeps whole
        trajectories out)
    add, spread : :func:`neural_cubature`'s

    Returns
    -------
    list of dicts, one per count: ``elements`` (the greedy's: it may stop short of the
    count), ``greedy``, ``neural`` (greedy + W), ``selected`` (S + NNLS), ``s_neural``
    (S + W) held-out relative errors, the same on the training poses (``*_train``),
    ``best_epoch`` of each W, the seconds of each selection, and the rules themselves
    (``rules``: name -> (elements, weights or WeightNet)) for replays.
    """
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        groups = np.unique(train_groups)
        rng = np.random.default_rng(seed)
        val_g = rng.choice(groups, max(1, len(groups) // 5), replace=False)
        is_val = np.isin(train_groups, val_g)
        # every element's forces, once (S scores the whole mesh)
        A_all, b, keep = _normalized(fem, V, train_poses, None)
        Ah_all, bh, keep_h = _normalized(fem, V, held_poses, None)
        c_all = _coords(fem, V, mass, train_poses)[keep]
        c_h = _coords(fem, V, mass, held_poses)[keep_h]
        v = is_val[keep]
        T = np.asarray(fem.T)
        sel = neural_cubature(
            A_all,
            b,
            c_all,
            element_features(T, fem.X, train_poses[keep]),
            element_graph(T),
            fem.X[T].mean(axis=1),
            v,
            counts,
            add=add,
            spread=spread,
            seed=seed,
        )
        s_seconds = {len(r["elements"]): r["seconds"] for r in sel}
        s_rules = {len(r["elements"]): r for r in sel}
        out = []
        for count in counts:
            t1 = time.perf_counter()
            cub = optimized_cubature(
                fem, V, train_poses, target=1e-9, max_elements=count, seed=seed, groups=train_groups
            )
            g_seconds = time.perf_counter() - t1
            row = {"count": count, "elements": len(cub.elements), "rules": {}}
            for name, el, w0, secs in (
                ("greedy", cub.elements, cub.weights, g_seconds),
                ("selected", s_rules[count]["elements"], s_rules[count]["w0"], s_seconds[count]),
            ):
                A, Ah = A_all[:, :, el], Ah_all[:, :, el]
                net, info = train_weight_net(
                    A[~v], b[~v], c_all[~v], A[v], b[v], c_all[v], w0, epochs=epochs, seed=seed
                )
                with torch.no_grad():
                    w_h = net(torch.as_tensor(c_h)).numpy()
                    w_t = net(torch.as_tensor(c_all)).numpy()
                neural = "neural" if name == "greedy" else "s_neural"
                row.update(
                    {
                        name: relative_error(Ah, bh, w0),
                        neural: relative_error(Ah, bh, w_h),
                        f"{name}_train": relative_error(A, b, w0),
                        f"{neural}_train": relative_error(A, b, w_t),
                        f"{neural}_best_epoch": info["best_epoch"],
                        f"{name}_seconds": secs,
                    }
                )
                row["rules"][name] = (el, w0)
                row["rules"][neural] = (el, net)
            out.append(row)
        return out
    finally:
        torch.set_num_threads(torch_threads)


def _coords(fem, V: np.ndarray, mass: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """PCA coordinates ``V^T M (x - X)`` (P, k) of poses (P, n, 3)."""
    d = (poses - fem.X).reshape(len(poses), -1)
    return (d * np.repeat(mass, 3)) @ V
