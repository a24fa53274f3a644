"""The fits the trainer (:mod:`training.active`) makes of an active face's layers: the detail
layer, the keys' blend and its samples, the jaw's lift, the reduced basis's cubature."""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

from ...physics.fem import TetFEM
from ...physics.quasistatic import QuasistaticSolver
from .model import ActiveModel
from .runtime import ActiveFace


def fit_detail(
    model: ActiveModel, codes, jaws, xs, keys, weights=None, ridge: float = 1e-6
) -> np.ndarray:
    """The detail layer (3 s, d + 2) by weighted least squares (``weights`` (K,), 1 when
    None): the offsets ``D [z_k, angle_k, 1]`` closest to what the equilibria ``xs`` of the
    codes ``codes`` with the jaw at ``jaws`` (rad) leave of their skins ``keys`` (K, s, 3)
    (``xs`` None: the skins themselves, the skin's linear part :attr:`ActiveModel.blend`);
    each input's column lightly ridge-regularized (``ridge`` of its mean square; the
    constant free)."""
    w = np.ones(len(codes)) if weights is None else np.asarray(weights, float)
    Y = np.array([model.detail_input(z, j) for z, j in zip(codes, jaws, strict=True)])
    if xs is None:  # the skin's linear part (the keys' blend, :attr:`ActiveModel.blend`)
        R = np.asarray(keys, float)
    else:
        R = np.array([t - model.skin.apply(x) for t, x in zip(keys, xs, strict=True)])
    Y, R = Y * np.sqrt(w)[:, None], R * np.sqrt(w)[:, None, None]
    A = Y.T @ Y
    k = np.arange(A.shape[0] - 1)
    A[k, k] += ridge * np.maximum(A[k, k], 1e-300)
    return np.linalg.solve(A, Y.T @ R.reshape(len(R), -1)).T


def fit_blend(model: ActiveModel, codes, jaws, keys, rest, rest_code) -> np.ndarray:
    """The skin's linear part :attr:`ActiveModel.blend` (3 s, d + 2): least squares on the
    training keys ``keys`` (K, s, 3) at their codes ``codes`` and jaw angles ``jaws`` (rad)
    and the rest face ``rest`` (s, 3) at ``rest_code`` with the jaw closed. When the keys do
    not open the jaw (no spread in ``jaws``) they say nothing of it: the angle's column is
    then the flesh's own response, ``P dchi/dangle`` of the full equilibrium at the rest
    code (the jaw turned by hand moves the chin as the physics does, linearized)."""
    jaws = np.asarray(jaws, float)
    L = fit_detail(
        model,
        np.vstack([codes, rest_code]),
        np.append(jaws, 0.0),
        None,
        np.concatenate([keys, np.asarray(rest)[None]]),
    )
    if np.ptp(np.append(jaws, 0.0)) <= 1e-9:
        face = ActiveFace(model, solve="full")
        x = face.solve_full(rest_code, 0.0, x0=model.X, colliders=[]).x
        rate = face._equilibrium_rates(x, rest_code, 0.0, True, [], None)[:, -1]
        L[:, len(rest_code)] = face.qs.P3 @ rate
    return L


def blend_samples(model: ActiveModel, codes, jaws, xs, keys, rest, count: int, seed: int = 0):
    """Blends of pairs of training keys for the detail layer's fit: each ``rest + w1 (t_i -
    rest) + w2 (t_j - rest)`` (``w`` drawn in [0.3, 0.8]) with the code blended the same way
    from the rest face's code (the skin ``rest`` fitted, the jaw closed) and the jaw angle
    ``w1 a_i + w2 a_j``; its equilibrium by the full solve (``model`` without a layer), from
    the same blend of the keys' equilibria ``xs`` (from rest: 2.6x the time on own head A).

    Returns ``(codes (count, d), jaw angles (count,), equilibria (count, n, 3), targets
    (count, s, 3))``."""
    rng = np.random.default_rng(seed)
    face = ActiveFace(model, solve="full")
    z_rest = face.fit_latent(rest, jaw=0.0, z0=np.zeros(model.latent_dim), pull=1e-9, iters=12)[0]
    zs, angles, out, ts = [], [], [], []
    for _ in range(count):
        pick = rng.choice(len(codes), 2, replace=False)
        w = rng.uniform(0.3, 0.8, 2)
        z = z_rest + w @ (codes[pick] - z_rest)
        zs.append(z)
        angles.append(float(w @ jaws[pick]))
        x0 = model.X + np.tensordot(w, xs[pick] - model.X, 1)
        out.append(face.solve_full(z, angles[-1], x0=x0).x)
        ts.append(rest + np.tensordot(w, keys[pick] - rest, 1))
    return np.array(zs), np.array(angles), np.array(out), np.array(ts)


def jaw_lift(fem: TetFEM, constrained: np.ndarray, jaw_nodes: np.ndarray) -> np.ndarray:
    """``G = -K_ff^-1 K_fj`` (3 f, 3 j): the rest-stiffness response of the free nodes to a
    unit displacement of each jaw DOF (a linear-elastic extension of the jaw's motion)."""
    solver = QuasistaticSolver(fem, constrained)
    fem.set_actions(np.zeros((fem.n_elements, 6)))
    K = fem.hessian(fem.X, project=False).tocsr()
    jd = (3 * np.asarray(jaw_nodes)[:, None] + np.arange(3)).ravel()
    Kff = K[solver.free][:, solver.free].tocsc()
    Kfj = K[solver.free][:, jd].toarray()
    return -spla.splu(Kff).solve(Kfj)


def fit_cubature(
    model: ActiveModel,
    codes,
    xs,
    *,
    jaws=None,
    candidates: int = 1500,
    poses: int = 16,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Cubature of the reduced solve (An et al. 2008, by NNLS): elements and weights whose
    weighted reduced forces ``sum_e w_e U_e^T g_e`` match every element's on poses around the
    training equilibria ``xs`` (each perturbed in the subspace by half the spread of the
    training coordinates), each pose with its own actions ``pi(z, jaw)`` (``jaws``: the
    training jaw angles, closed when None).

    Returns ``(elements, weights, relative error on poses left out of the fit)``.
    """
    from scipy.optimize import nnls

    rng = np.random.default_rng(seed)
    face = ActiveFace(model, solve="full")
    fem, Ue, U = face.fem, face.Ue, face.Ufull
    m = len(model.T)
    q = np.array([U.T @ (x - model.X).ravel() for x in xs])
    spread = q.std(0) + 1e-12
    pick = rng.permutation(len(xs))[: 2 * poses]
    rows, tot = [], []
    for i in pick:
        fem.set_actions(model.actions(codes[i], None if jaws is None else jaws[i]))
        x = xs[i] + (U @ (0.5 * spread * rng.normal(size=len(spread)))).reshape(-1, 3)
        ge = fem.element_gradients(x).reshape(m, 12)
        f = np.einsum("ker,ke->rk", Ue, ge)  # (r, m): each element's reduced force
        b = f.sum(1)
        nb = np.linalg.norm(b) + 1e-300
        rows.append(f / nb)
        tot.append(b / nb)
    half = max(1, len(rows) // 2)
    cand = np.sort(rng.choice(m, min(candidates, m), replace=False))
    A = np.concatenate(rows[:half])[:, cand]
    w, _ = nnls(A, np.concatenate(tot[:half]), maxiter=50 * len(cand))
    keep = w > 0
    el, wt = cand[keep], w[keep]
    val = rows[half:] or rows[:half]
    bv = tot[half:] or tot[:half]
    err = float(
        np.mean(
            [
                np.linalg.norm(r[:, el] @ wt - b) / np.linalg.norm(b)
                for r, b in zip(val, bv, strict=True)
            ]
        )
    )
    return el, wt, err
