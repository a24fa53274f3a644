"""Why a linear model replays worse than its closest shapes (issue 24): per basis and size,
the held-out replay, the closest shapes, and the one-step error.

The one-step error takes the bake's own state at each frame ``f`` (positions and velocity
projected onto the basis, in the pins' frame of frames ``f`` and ``f - 1``, the bake's
forces), makes ONE reduced step with frame ``f + 1``'s inputs, and measures the largest
vertex distance to the closest shape of bake frame ``f + 1``. It is the error the reduced
dynamics make where nothing has accumulated yet; the replay adds the accumulation. With
every frame of a bake in the basis it is zero (``tests/test_frame.py``: the moving frame,
pokes, gravity and damping are exact), so what it shows is the subspace's own force
error: the elastic force of what the basis leaves out, projected onto it.

Every model here uses every element (no cubature), so the cubature is not in the numbers.
Bases, each with ``k`` columns in all:

* ``pca``: the linear method's basis (mass-weighted PCA of the training bakes in the pins'
  frame; the method's default ``k`` is the first row, sized by 1% of the diagonal);
* ``static``: PCA with ``k - 3`` modes and the static deflections under uniform body loads
  along x, y, z (gravity and the pins' acceleration; :func:`core.methods.licrom.static_modes`),
  mass-orthonormalized against it: the classical static-correction remedy for modal
  truncation;
* ``frame``: PCA with ``k - 6`` modes, the three static modes and three more under the pins'
  frame turning about x, y, z (Euler loads ``e_i x (X - c)`` about the pins' centre ``c``);
* ``petrov``: the PCA basis stepped by Petrov-Galerkin (:func:`petrov_galerkin`: the
  full-space residual tested with ``A0^-1 M U``, which for a linear force lands on the
  closest shape of the next state, where Galerkin lands on its projection in the ``A0`` norm);
* ``closure``: the PCA basis with a data-driven closure of the reduced force
  (:func:`closure`: a cubic potential in ``q`` fitted to the training frames' force error).

``--closure`` adds :func:`closure_fit`: the force error's size against the reduced force on
the training and the held-out frames, and the share a fit explains on each.

Measured (2026-11-29, 2-core AMD EPYC, numpy 1.26, load 16-21; no timings), held-out
replay / closest shapes / one step, mm, at the linear method's default ``k`` (first row of
each case) and larger:

================  ===  ====================  ====================  ====================
case               k   pca                   static                frame
================  ===  ====================  ====================  ====================
pins bar           20   21.3 / 3.87 / 10.8    36.7 / 5.09 / 16.1    37.0 / 3.53 / 10.2
(--scene pins,     30   10.3 / 1.48 / 5.93    10.2 / 1.87 / 5.81    11.7 / 2.63 / 7.06
240 tets)          40    6.2 / 1.10 / 2.61     6.1 / 1.09 / 2.96     5.3 / 1.22 / 2.99
                   60    2.0 / 0.62 / 1.57     1.9 / 0.56 / 1.50     2.2 / 0.59 / 1.52
trunk (own         4    49.8 / 8.55 / 18.4   128.8 / 16.6 / 61.9
asset, a keyed      6   13.5 / 1.13 / 6.49    15.0 / 3.41 / 5.56
cone, 778 tets)     8    8.9 / 0.91 / 6.49    12.4 / 0.79 / 4.89    13.0 / 1.97 / 5.96
                   12    0.7 / 0.11 / 0.55     1.2 / 0.20 / 0.84     2.3 / 0.44 / 1.06
board (own          6  144.6 / 7.78 / 43.4   256.1 / 31.1 / 104
asset, a keyed      9   65.6 / 6.39 / 32.2    94.1 / 6.94 / 43.1   150.4 / 16.5 / 101
plank, 4333 tets)  12   81.0 / 5.55 / 30.4    58.0 / 7.42 / 30.1    62.4 / 6.72 / 30.0
                   18   15.7 / 2.56 / 7.31    22.2 / 4.04 / 7.39    49.0 / 4.08 / 16.5
================  ===  ====================  ====================  ====================

The static and frame modes are no lever: at equal DOFs they beat PCA's replay clearly in 3
of 21 cells (board k = 12 both, pins bar k = 40 the frame modes), tie in 3 and lose the rest,
by up to 2.6x. The replay is 3.2-18.6x the closest shapes and the one step alone 2.1-7.2x, so
most of the gap is there before anything accumulates, and more modes shrink both together.
The one step is the reduced force error: the elastic force of the part of the true state the
basis leaves out, projected onto the basis, through which a few millimetres of missing shape
move the next step by tens. Other remedies measured on the trunk, none better than PCA at
equal DOFs: vibration modes (replay 150-160 mm at k = 4-10), the flexibility basis
``K^-1 M U`` (158 mm at 4), the Ritz modes of a larger PCA basis (147 mm at 4), the rest
stiffness condensed onto the basis (diverges), a fitted linear force correction (its fit
explains 1% of the force error; 32 against 13.5 mm at 6). One helped once: PCA in the rest
stiffness's norm (so what the basis leaves out is K-orthogonal to it) replays the trunk at
23.6 against 49.8 mm at k = 4 (2.5x its closest shapes), but the pins bar at 132 against
90.3 mm (k = 12) and the board at 85.0 against 65.6 mm (k = 9). The bodies bend 0.2-1.6 m in
their pins' frame, far from the rest state where the rest stiffness holds.

The reduced force itself (2026-11-29, same machine, load 6-12): ``petrov`` and ``closure``
attack the force error directly, at equal DOFs, on the pins bar and two more bodies keyed
in Blender with default settings and taken through the CLI (a cone antenna 1 m tall pinned
at its base, swayed and bobbed, 13,760 tets; a cylinder tail 0.8 m pinned at its root,
wagged and lifted, 10,413 tets). Held-out replay / one step, mm:

===============  ===  =======  ============  ===============  =================
case              k   closest  pca           petrov           closure
===============  ===  =======  ============  ===============  =================
pins bar          20   3.87     21.3 / 10.8   70.9 / 26.1      (7,247-15,491)
                  30   1.48     10.3 / 5.93   35.7 / 14.7
antenna           6    7.29    118.4 / 49.0  339.1 / 125.6    6,272 / 8,856
                  9    1.92     26.8 / 12.9  195.8 / 57.0     4,883 / 10,460
tail              5    6.17    189.5 / 60.4  374.7 / 79.9     19,418 / 14,493
                  8    0.70      3.5 / 2.23                   6,524 / 7,253
===============  ===  =======  ============  ===============  =================

(In brackets: the replay of a cubic potential without its linear term, fitted with ridge
1e-6-1e-2, by a first version of the closure; the bench's closure with 1,770 monomials at
k = 20 took over 10 minutes and was stopped.) Neither is a lever. Petrov-Galerkin loses by
2.0-7.3x: its test basis leans on the rest stiffness, wrong where the bodies bend (as every
rest-stiffness basis above). The closure
diverges: a potential fitted where the training frames lie has no minimum outside them,
and the force error it should learn is not a function of ``q`` that carries over to another
motion (``--closure``; ``G``: the force error, ``F``: the reduced force, the share of
``|G|^2`` a ridge fit on the training frames explains):

===============  ===  ===============  ==================  ==================
case              k   G/F train, held  linear fit, train   quadratic fit,
                      out              / held out          train / held out
===============  ===  ===============  ==================  ==================
pins bar          20   0.18 / 0.93      0.09 / 0.04        0.93 / -12.2
                  30   0.02 / 0.69      0.07 / -0.09       0.98 / -59
antenna           6    0.98 / 1.00      0.25 / 0.27        0.84 / 0.83
                  9    0.97 / 0.96      0.14 / -0.02       0.85 / 0.25
tail              5    0.99 / 0.99      0.14 / 0.03        0.42 / 0.11
                  8    0.94 / 1.00      0.12 / 0.05        0.63 / 0.35
===============  ===  ===============  ==================  ==================

On the pins bar the training frames lie in the basis (their force error is 0.02-0.18 of the
reduced force) while the held-out bake's is 0.69-0.93 of it: a closure fitted on the
training bakes never sees the error it is meant to remove. On the keyed meshes the force
error is as large as the reduced force even on the training frames, and a fit that
explains 83% of it on the held-out frames (antenna, k = 6) still sends one step from the
bake's own state 8.9 m away. Only more modes help (the tail 189.5 mm at 5, 3.5 at 8), and
the replay stays 5.5-31x the closest shapes at the default size on these assets. Within a
linear subspace at equal DOFs the goal of a replay within 3x the closest shapes is out of
reach; a nonlinear subspace reaches further: Shen at
its defaults, through the CLI, replays the tail at 26.4 against 221 mm (5 DOFs each, 0.12x;
the linear model with its cubature) and the antenna at 23.2 against 149 mm (6 DOFs, 0.16x),
3.2-4.3x the linear model's closest shapes (and the keyed trunk and board of the last
session at 0.30x and 0.51x).

Usage::

    python bench/dynamics.py [--scene pins | --bakes DIR] [--k K,K,...] [--bases pca,petrov,...]
        [--closure]

``--bakes DIR``: every ``*.nrbake`` in DIR (an object's ``neural_rom/<object>/bakes``),
split as training splits them (fraction 0.2, seed 0). Without ``--k``: the linear
method's default size and 1.5x, 2x, 3x it. One process, one BLAS thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time
from itertools import combinations_with_replacement
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import autoencoder  # noqa: E402
import shen  # noqa: E402

#: The bases (and steps) a case can be measured with (see the module docstring).
BASES = ("pca", "static", "frame", "petrov", "closure")
#: Columns each basis kind spends on other than PCA modes.
EXTRA = {"pca": 0, "static": 3, "frame": 6, "petrov": 0, "closure": 0}


def open_case(paths) -> SimpleNamespace:
    """Bakes of one mesh split as training splits them: the mesh, material, pins, masses,
    time stepping, the PCA of the training frames in the pins' frame (as many modes as the
    data spans, at most 80), the linear method's default size ``k0`` and the held-out bakes."""
    from neural_rom.core.errors import NeuralRomError
    from neural_rom.core.physics import fem
    from neural_rom.core.reduced.pose import to_pin_frame
    from neural_rom.core.reduced.subspace import mass_weighted_pod
    from neural_rom.training.run import physics_of

    ds, xt, xv, va = autoencoder.split_frames(list(paths))
    material, spec = physics_of(ds)
    mat = fem.Material.from_dict(material)
    X, T = np.asarray(ds[0].X, float), np.asarray(ds[0].T, np.int64)
    pinned = np.asarray(ds[0].extra("pinned"), np.int64) if "pinned" in ds[0].extra_names else []
    pinned = np.asarray(pinned, np.int64)
    mass = fem.mass_matrix(X, T, mat.density, lumped=True)
    yt, yv = to_pin_frame(xt, X, pinned), to_pin_frame(xv, X, pinned)
    tol = 0.01 * float(np.linalg.norm(X.max(0) - X.min(0)))
    try:
        sub = mass_weighted_pod(yt - X, mass, pinned, k=min(80, len(yt)), X=X)
    except NeuralRomError as e:  # the data spans fewer directions: all of them
        rank = int(re.search(r"spans only (\d+)", str(e)).group(1))
        sub = mass_weighted_pod(yt - X, mass, pinned, k=rank, X=X)
    try:
        k0 = mass_weighted_pod(yt - X, mass, pinned, tolerance=tol, max_k=60, validation=yv - X).k
    except NeuralRomError:  # too few frames to meet it: every direction (training would refuse)
        k0 = sub.k
    return SimpleNamespace(
        ds=ds, va=va, X=X, T=T, mat=mat, pinned=pinned, mass=mass,
        settings=spec.sim_settings(), sub=sub, k0=k0, xv=xv, xt=xt,
    )  # fmt: skip


def basis(case, k: int, kind: str) -> np.ndarray:
    """The (3n, k) basis ``kind`` (:data:`BASES`) of ``case``, M-orthonormal."""
    from neural_rom.core.methods.licrom import static_modes
    from neural_rom.core.reduced.subspace import m_orthonormalize

    extra = EXTRA[kind]
    U = case.sub.U[:, : k - extra]
    if not extra:
        return U
    a = np.eye(3)[:, None, :].repeat(len(case.X), axis=1)  # uniform, along x, y, z
    if kind == "frame":  # the frame turning about x, y, z through the pins' centre
        d = case.X - case.X[case.pinned].mean(0)
        a = np.concatenate([a, np.cross(np.eye(3)[:, None, :], d[None])])
    S = static_modes(case.X, case.T, case.mat, case.pinned, accelerations=a)
    return np.hstack([U, m_orthonormalize(S, np.repeat(case.mass, 3), against=U)])


def simulator(case, U: np.ndarray, kind: str = "pca"):
    """A linear-method runtime on ``U`` with every element (no cubature); ``kind`` "petrov"
    steps it by :func:`petrov_galerkin`, "closure" adds :func:`closure`'s potential."""
    from neural_rom.core.methods.linear import LinearSimulation

    sim = LinearSimulation(
        case.X, case.T, case.mat, U, dataclasses.replace(case.settings), pinned=case.pinned
    )
    if kind == "closure":
        return closure(case, sim)
    return petrov_galerkin(case, sim) if kind == "petrov" else sim


def petrov_galerkin(case, sim):
    """``sim`` stepped by Petrov-Galerkin: the full-space backward Euler residual ``r`` of
    ``x = X + U q`` (inertial and damping targets of the moved state in the new pins' frame,
    gravity, the frame's forces) tested with ``W = A0^-1 M U``, ``A0 = (1/h^2 + a/h) M + K0``
    (``K0`` the rest stiffness, ``a`` the mass damping), solved by Newton with a backtracking
    search on ``|W^T r|`` from the Galerkin step's root (from ``q~`` it finds other roots).
    For a linear force it returns the mass-weighted projection (the closest shape) of the
    next full-space state, where Galerkin returns its projection in the ``A0`` norm. Every
    element, one substep a frame, no stiffness damping, no contact."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    s, U, X = sim.settings, sim.U, case.X
    if int(s.substeps) != 1 or s.damping_beta or len(sim.sub_vertices) != len(X):
        raise SystemExit("petrov needs one substep, no stiffness damping, every element")
    n, k = len(X), sim.k
    h, a = s.dt, s.damping_alpha
    m3 = np.repeat(case.mass, 3)
    A0 = sp.diags((1 / h**2 + a / h) * m3) + sim.sub_fem.hessian(X, project=False)
    free = np.ones(3 * n, bool)
    free[(3 * case.pinned[:, None] + np.arange(3)).ravel()] = False
    W = np.zeros_like(U)  # scaled so that W = U when K0 vanishes (Galerkin)
    W[free] = (1 / h**2 + a / h) * splu(sp.csc_matrix(A0[free][:, free])).solve(
        np.ascontiguousarray((m3[:, None] * U)[free])
    )
    W_elem = W.reshape(n, 3, k)[np.asarray(case.T)].reshape(-1, k)  # every element's 12 rows
    A_mass = (1 / h**2 + a / h) * (W.T @ (m3[:, None] * U))
    forces = {"f": np.zeros((n, 3))}
    project, galerkin = sim.project_forces, sim._backward_euler

    def project_forces(f):
        forces["f"] = np.asarray(f, dtype=float).reshape(-1, 3).copy()
        return project(f)

    def step(h, f_ext, colliders, pose=None):
        new = sim.pose if pose is None else pose
        now, prev, Rt = sim.pose, sim.pose_prev, new.R.T
        y_n = X + (U @ sim.q).reshape(-1, 3)
        y_p = X + (U @ (sim.q - h * sim.qdot)).reshape(-1, 3)
        y_t = 2 * y_n @ (Rt @ now.R).T - y_p @ (Rt @ prev.R).T + Rt @ (2 * now.c - prev.c - new.c)
        y_d = y_n @ (Rt @ now.R).T + Rt @ (now.c - new.c)
        rhs = W.T @ (
            m3 * ((y_t - X).ravel() / h**2 + a * (y_d - X).ravel() / h + np.tile(Rt @ s.gravity, n))
            + forces["f"].ravel()
        )

        def residual(q, jacobian):
            x = X + (U @ q).reshape(-1, 3)
            _, ge, He = sim.sub_fem.element_terms(x, sim.weights, jacobian, False)
            r = A_mass @ q + W_elem.T @ ge.reshape(-1) - rhs
            J = A_mass + W_elem.T @ (He @ sim.U_elem).reshape(-1, k) if jacobian else None
            return r, J

        saved = sim.q, sim.qdot, sim.pose, sim.pose_prev
        rep = galerkin(h, f_ext, colliders, pose)
        q = sim.q
        sim.q, sim.qdot, sim.pose, sim.pose_prev = saved
        r, J = residual(q, True)
        for _ in range(max(s.max_newton_iters, 1)):
            p, t = -np.linalg.solve(J, r), 1.0
            if np.abs(U @ p).max() <= s.newton_tol * sim.length_scale:
                q = q + p
                break
            while t > 1e-6 and np.linalg.norm(residual(q + t * p, False)[0]) > (
                1 - 1e-4 * t
            ) * np.linalg.norm(r):
                t *= 0.5
            q = q + t * p
            rep.newton_iters += 1
            r, J = residual(q, True)
        else:
            rep.converged = False
        sim.qdot, sim.q = (q - sim.q) / h, q
        sim._advance_frame(pose)
        return rep

    sim.project_forces, sim._backward_euler = project_forces, step
    return sim


def force_errors(case, sim, x):
    """Per frame of ``x`` (G, n, 3): the closest shape's coordinates ``q`` (in the pins'
    frame), the reduced force error ``U^T g(y) - U^T g(X + U q)`` (``g`` the elastic gradient
    at the frame ``y`` and at its closest shape) and the reduced force ``U^T g(X + U q)``."""
    from neural_rom.core.reduced.pose import to_pin_frame

    Q, G, F = [], [], []
    for y in to_pin_frame(x, case.X, case.pinned):
        q = sim.closest_q(y)
        _, ge, _ = sim.sub_fem.element_terms(y[sim.sub_vertices], sim.weights, False, False)
        F.append(sim._elastic(q, 1)[1])
        G.append(sim._U_elem_flat.T @ ge.reshape(-1) - F[-1])
        Q.append(q)
    return np.array(Q), np.array(G), np.array(F)


def closure(case, sim, ridge: float = 1e-2):
    """``sim`` with a data-driven closure of its reduced force (operator inference): a cubic
    polynomial potential in ``q`` (features scaled by the training range) whose gradient is
    ridge-fitted (``ridge`` x the mean diagonal) to :func:`force_errors` on the training
    frames, added to the elastic energy, gradient and Hessian (its Hessian PSD-projected
    where the step asks for projection). Conservative, so the Newton step's line search on
    the incremental potential still holds."""
    k = sim.k
    Q, G, _ = force_errors(case, sim, case.xt)
    s = np.abs(Q).max(0) + 1e-300
    P = np.array(  # exponents of every monomial of degree 1-3
        [
            np.bincount(m, minlength=k)
            for d in (1, 2, 3)
            for m in combinations_with_replacement(range(k), d)
        ]
    )
    E = np.eye(k, dtype=int)

    def power(z, A):  # z^A per row of A; rows with a negative exponent have no term
        return np.where(np.all(A >= 0, axis=-1), np.prod(z ** np.maximum(A, 0), axis=-1), 0.0)

    D = np.stack([P[:, j] * power(Q[:, None, :] / s, P - E[j]) / s[j] for j in range(k)], 1)
    A = D.reshape(-1, len(P))
    AtA = A.T @ A
    c = np.linalg.solve(AtA + ridge * np.trace(AtA) / len(AtA) * np.eye(len(P)), A.T @ G.ravel())
    elastic = sim._elastic

    def closed(q, order, project=True):
        e, g, H = elastic(q, order, project)
        z = q / s
        e = e + c @ power(z, P)
        if order >= 1:
            g = g + np.array([(c * P[:, j]) @ power(z, P - E[j]) for j in range(k)]) / s
        if order >= 2:
            Hc = np.array(
                [
                    [
                        (c * P[:, j] * (P[:, i] - (i == j))) @ power(z, P - E[j] - E[i])
                        for i in range(k)
                    ]
                    for j in range(k)
                ]
            ) / np.outer(s, s)
            if project:
                w, V = np.linalg.eigh(Hc)
                Hc = (V * np.maximum(w, 0.0)) @ V.T
            H = H + Hc
        return e, g, H

    sim._elastic = closed
    return sim


def closure_fit(case, k: int, ridge: float = 0.1) -> dict:
    """How far a data-driven closure of the reduced force can go: the reduced force error
    ``G`` (:func:`force_errors`) on the training frames and the held-out ones, beside the
    reduced force ``F``; and the share of ``|G|^2`` that a ridge fit (``ridge`` x the mean
    diagonal) on the training frames explains on both, linear and quadratic in ``q``
    (features scaled by the training range; not constrained to a potential)."""
    sim = simulator(case, basis(case, k, "pca"))
    (Qt, Gt, Ft), (Qv, Gv, Fv) = force_errors(case, sim, case.xt), force_errors(case, sim, case.xv)
    scale = np.abs(Qt).max(0) + 1e-300
    iu = np.triu_indices(k)

    def features(Q, quadratic):
        Z = Q / scale
        cols = [np.ones((len(Z), 1)), Z]
        if quadratic:
            cols.append((Z[:, :, None] * Z[:, None, :])[:, iu[0], iu[1]])
        return np.hstack(cols)

    out = {
        "k": k,
        "G/F train": float(np.linalg.norm(Gt) / np.linalg.norm(Ft)),
        "G/F held out": float(np.linalg.norm(Gv) / np.linalg.norm(Fv)),
    }
    for name, quadratic in (("linear", False), ("quadratic", True)):
        A, B = features(Qt, quadratic), features(Qv, quadratic)
        AtA = A.T @ A
        C = np.linalg.solve(AtA + ridge * np.trace(AtA) / len(AtA) * np.eye(len(AtA)), A.T @ Gt)
        for label, M, G in (("train", A, Gt), ("held out", B, Gv)):
            out[f"{name} R2 {label}"] = float(1 - np.sum((M @ C - G) ** 2) / np.sum(G**2))
    return out


def one_step_error(make_sim, cache) -> float:
    """Largest vertex distance (m) between one reduced step from bake frame ``f``'s projected
    state and the closest shape of frame ``f + 1``, over the frames of ``cache`` (see the
    module docstring). Needs one substep a frame (the bakes' default)."""
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.engine.protocol import FrameInputs

    sim = make_sim()
    if int(sim.settings.substeps) != 1:
        raise SystemExit("one_step_error needs bakes of one substep a frame")
    h = sim.settings.dt
    x = np.asarray(cache.channel("positions"), dtype=float)
    _, driver = replay_scenario(cache)
    poses = [sim.pose_of(xf) for xf in x]
    q = [sim.closest_q((xf - p.c) @ p.R) for xf, p in zip(x, poses, strict=True)]
    worst = 0.0
    for f in range(1, len(x) - 1):
        sim.reset(q=q[f], qdot=(q[f] - q[f - 1]) / h)
        sim.place_frame(poses[f])
        sim.pose_prev = poses[f - 1]
        sim.f_ext = sim.project_forces(np.asarray(driver.forces[f]) @ poses[f].R)
        inp = driver.inputs(f + 1)
        sim.step(
            FrameInputs(forces=inp.forces, colliders=inp.colliders, pin_targets=inp.pin_targets)
        )
        ref = sim.closest_shape(x[f + 1])
        worst = max(worst, float(np.linalg.norm(sim.positions() - ref, axis=1).max()))
    return worst


def measure(case, ks, kinds) -> list[dict]:
    """Per ``k`` and basis kind: replay, closest shapes and one-step errors (m) over the
    held-out bakes, and the seconds it took."""
    rows = []
    for k in ks:
        for kind in kinds:
            if k - EXTRA[kind] < 1:
                continue
            t0 = time.perf_counter()
            U = basis(case, k, kind)
            caches = [case.ds[int(i)] for i in case.va]
            rows.append(
                {
                    "k": k,
                    "basis": kind,
                    "replay_m": max(
                        autoencoder.rollout(simulator(case, U, kind), c)["err"] for c in caches
                    ),
                    "closest_m": shen.closest_error(simulator(case, U), case.xv),
                    "one_step_m": max(
                        one_step_error(lambda U=U, kind=kind: simulator(case, U, kind), c)
                        for c in caches
                    ),
                    "seconds": time.perf_counter() - t0,
                }
            )
            r = rows[-1]
            print(
                f"  k {k:3d} {kind:7s} replay {1000 * r['replay_m']:8.1f}  closest "
                f"{1000 * r['closest_m']:7.2f}  one step {1000 * r['one_step_m']:7.2f} mm  "
                f"(replay {r['replay_m'] / r['closest_m']:.1f}x, one step "
                f"{r['one_step_m'] / r['closest_m']:.1f}x the closest shapes; {r['seconds']:.0f} s)",
                flush=True,
            )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scene", default=None, help="pins: bench/shen.py's swung, poked bar")
    ap.add_argument("--bakes", default=None, help="a folder of *.nrbake of one mesh")
    ap.add_argument("--k", default=None, help="basis sizes, e.g. 4,6,10")
    ap.add_argument("--bases", default="pca,static,frame,petrov")
    ap.add_argument(
        "--closure", action="store_true", help="also the force error and its closure's fit"
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.scene not in (None, "pins"):
        raise SystemExit(f"Unknown scene {args.scene!r}: pins (or --bakes DIR).")
    if args.bakes:
        paths = sorted(Path(args.bakes).glob("*.nrbake"))
    else:
        out = Path(args.out or tempfile.mkdtemp(prefix="nrom_dynamics_"))
        paths = sorted((out / "bakes").glob("*.nrbake")) or shen.bake_pins(out / "bakes")
    case = open_case(paths)
    ks = (
        [int(v) for v in args.k.split(",")]
        if args.k
        else sorted({case.k0, round(1.5 * case.k0), 2 * case.k0, 3 * case.k0})
    )
    print(
        f"{len(case.T)} tets, {len(case.va)} held-out bake(s); the linear method's default k "
        f"{case.k0}; every element (no cubature)"
    )
    measure(case, ks, args.bases.split(","))
    for k in ks if args.closure else ():
        print("  closure " + "  ".join(f"{a} {b:.3g}" for a, b in closure_fit(case, k).items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
