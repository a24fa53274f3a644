"""Active faces (Srinivasan et al. 2021): a learned actuation driven by sliders or markers.

The model (trained by :mod:`training.active`) is a decoder ``a = pi_theta(z)`` from a latent
code ``z`` (a few numbers) to per-element shape-targeting actions (eq. 4, 9), and the flesh it
actuates: the quasistatic equilibrium ``chi(a)`` (eq. 5) with the skull fixed and the jaw's
nodes where the jaw's transform puts them (:mod:`core.quasistatic`).

Each frame (:class:`ActiveFace.step`):

* **sliders**: ``z`` is the slider values (one per latent coordinate);
* **markers**: ``z`` minimizes ``sum_k w_k ||p_k(chi(pi(z))) - m_k||^2 + rho ||z - z_prev||^2``
  (eq. 17 with a small pull ``rho`` to the previous frame's code, which keeps an under-marked
  face from drifting). We solve it by **Levenberg-Marquardt** on the reduced problem: the
  Jacobian ``dp/dz = -P U (U^T H U)^-1 U^T (d2E/dx da) (da/dz)`` comes from the implicit
  function theorem (eq. 10-11) at the current equilibrium, so each iteration is one reduced
  solve and one small dense system. By default a frame first tries the joint iteration on
  the code and the equilibrium (:meth:`ActiveFace.fit_markers_sqp`: one element pass per
  iteration instead of a converged reduced solve per trial), LM when it does not converge. On the bench head (8.3K tets, 30 markers) LM reaches in
  3 iterations (0.26 s) a cost that the paper's Adam (lr 0.1) needs 144 iterations (7.2 s)
  to come within 5% of (``bench/active.py``);
* the **jaw** is ``reference_frame``, its 4x4 transform relative to rest (identity: closed);
* **colliders** press the embedded skin (penalty, :mod:`core.quasistatic`); the reduced
  subspace (expressions) cannot dent a cheek, so a reduced frame that touches a collider is
  finished by the full solve (``contact="full"``).

The **skin shown** (the ``skin`` setting): by default the keys' blend ``L [z, angle, 1]``
(:attr:`ActiveModel.blend`, linear in the code and the jaw's hinge angle, so any blend of the
training keys is reproduced as a PCA of them reproduces it) plus the physics' change from
contact, ``P (chi_c - chi_0)``: the equilibrium with the colliders touching minus the one
without, two full solves on the frames where the blend touches a collider and none on the
others. A marker frame is then a linear least squares in the code and the angle (Gauss-Newton
with the head's motion), the contact's rates joining it in contact
(:meth:`ActiveFace.contact_skin_rates`). ``skin="physics"`` shows the flesh's equilibrium
every frame, with the detail layer; what follows is its runtime.

Two solves: the **full** quasistatic solve (Newton on every free node: the reference and
for final bakes; the paper's runtime) and the **reduced** one, ``x = X + G u_jaw + U q``:
``G`` the linear-elastic lift of the jaw's displacement into the flesh (``-K_ff^-1 K_fc`` at
rest), ``U`` a POD basis of the training equilibria and their latent tangents ``dx/dz`` with
that lift removed; Newton in ``q`` on the exact energy of every element (the elements' kernel
is a few milliseconds; the solve is ``r x r``). ``solve = "reduced"`` by default.

Every frame reports the equilibrium residual (largest free-node force over ``mu h^2``;
``StepReport.force_residual``): at most the solve tolerance for the full solve; for the
reduced one, the reduced residual (``U^T g``) is at the tolerance and the full one is what
the subspace leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla

from ...data.files import mesh_hash
from ...data.modelfile import save_model
from ...engine.protocol import SimulatorBase
from ...errors import SimulationError
from ...geometry.embedding import Embedding
from ...physics.fem import Material, TetFEM
from ...physics.quasistatic import QuasistaticSolver
from ...physics.sim import FrameInputs, Markers, StepReport
from ...reduced.nnet import MLP
from ...registry import Method, Setting

NAME = "active"


@dataclass(eq=False)
class ActiveModel:
    """What an active-face model file holds.

    Attributes
    ----------
    X, T : rest nodes (n, 3) and tets (m, 4) of the flesh
    material : Material (shape targeting)
    fixed, jaw_nodes : (f,), (j,) int arrays: skull and jaw nodes
    jaw_pivot, jaw_axis : (3,) the hinge (for a jaw angle instead of a transform)
    skin : Embedding of the skin vertices
    decoder : MLP, latent (d,) -> actions (6 m,)
    codes : (N, d) the training shapes' latent codes (slider ranges, defaults; with a blend
        of keys each refitted through it, so a key's code shows the key)
    lift : (3 f_free, 3 j) the jaw lift ``G``
    U : (3 f_free, r) the reduced basis on the free DOFs
    cub_elements, cub_weights : (k,) the reduced solve's cubature (empty: every element)
    jaw_scale : the decoder's last input is the jaw angle (rad) times ``jaw_scale``; 0: the
        decoder takes the code alone (models before the jaw input)
    detail : (3 s, d + 2) the skin's detail layer: per skin vertex offsets linear in the
        code, the jaw's hinge angle (rad) and a constant, ``D [z, angle, 1]``, added to the
        embedded flesh (empty: none). Fitted to what the physical equilibria leave of the
        training keys, so the skin's space contains what the keys span; contact, the jaw's
        turn and volume stay the solve's
    blend : (3 s, d + 2) the skin's linear part ``L [z, angle, 1]`` (empty: none). When
        present the skin shown is that blend of the keys plus the physics' change from
        contact, ``P (chi_c - chi_0)`` (the equilibrium with the colliders minus the one
        without, both at the code and the jaw): with nothing touching it is exactly linear
        in the code and the jaw angle and contains the keys' span (a held-out blend of the
        keys is reproduced as by a PCA of them), and the flesh is solved only on frames
        where something touches it. Fitted by least squares to the training keys and the
        rest face at their codes (:func:`fit_detail` with no flesh). The detail layer is
        then unused
    """

    X: np.ndarray
    T: np.ndarray
    material: Material
    fixed: np.ndarray
    jaw_nodes: np.ndarray
    jaw_pivot: np.ndarray
    jaw_axis: np.ndarray
    skin: Embedding
    decoder: MLP
    codes: np.ndarray
    lift: np.ndarray
    U: np.ndarray
    cub_elements: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cub_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    jaw_scale: float = 0.0
    detail: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    blend: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    @property
    def blends(self) -> bool:
        """Whether the skin is the keys' blend plus contact (:attr:`blend`)."""
        return bool(self.blend.size)

    @property
    def latent_dim(self) -> int:
        return self.decoder.in_dim - (1 if self.jaw_scale else 0)

    @property
    def constrained(self) -> np.ndarray:
        return np.concatenate([self.fixed, self.jaw_nodes])

    def _hinge_cross(self) -> np.ndarray:
        """The cross-product matrix (3, 3) of the unit hinge axis."""
        a = self.jaw_axis / np.linalg.norm(self.jaw_axis)
        return np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])

    def jaw_matrix(self, angle: float) -> np.ndarray:
        K = self._hinge_cross()
        R = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * (K @ K)
        M = np.eye(4)
        M[:3, :3], M[:3, 3] = R, self.jaw_pivot - R @ self.jaw_pivot
        return M

    def boundary(self, jaw=None) -> np.ndarray:
        """Constrained positions (c, 3) for a jaw 4x4 transform or angle (None: closed)."""
        M = (
            np.eye(4)
            if jaw is None
            else (self.jaw_matrix(float(jaw)) if np.ndim(jaw) == 0 else np.asarray(jaw, float))
        )
        J = self.X[self.jaw_nodes] @ M[:3, :3].T + M[:3, 3]
        return np.concatenate([self.X[self.fixed], J])

    def boundary_rate(self, angle: float) -> np.ndarray:
        """``d boundary / d angle`` (c, 3) of the jaw opened ``angle`` rad about its hinge
        (zero on the skull's rows): ``K R (X - pivot)``, ``K`` the hinge axis' cross matrix."""
        K = self._hinge_cross()
        R = self.jaw_matrix(angle)[:3, :3]
        out = np.zeros((len(self.fixed) + len(self.jaw_nodes), 3))
        out[len(self.fixed) :] = (self.X[self.jaw_nodes] - self.jaw_pivot) @ (K @ R).T
        return out

    def jaw_angle(self, jaw=None) -> float:
        """The hinge angle (rad) of a jaw 4x4 transform (its rotation about ``jaw_axis``), an
        angle, or None (closed)."""
        if jaw is None:
            return 0.0
        if np.ndim(jaw) == 0:
            return float(jaw)
        R = np.asarray(jaw, float)[:3, :3]
        a = self.jaw_axis / np.linalg.norm(self.jaw_axis)
        s = 0.5 * a @ np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
        return float(np.arctan2(s, 0.5 * (np.trace(R) - 1.0)))

    def decoder_input(self, z, jaw=None) -> np.ndarray:
        """The decoder's input: the code, and the scaled jaw angle when the model takes it."""
        z = np.asarray(z, float).reshape(-1)
        if not self.jaw_scale:
            return z
        return np.append(z, self.jaw_scale * self.jaw_angle(jaw))

    def actions(self, z: np.ndarray, jaw=None) -> np.ndarray:
        """Per-element actions (m, 6) of code ``z`` with the jaw at ``jaw`` (transform, angle
        or None: closed)."""
        return self.decoder.forward(self.decoder_input(z, jaw)).reshape(-1, 6)

    def detail_input(self, z, jaw=None) -> np.ndarray:
        """The detail layer's input ``[z, angle, 1]`` (d + 2,) of code ``z`` and ``jaw``."""
        return np.concatenate([np.asarray(z, float).reshape(-1), [self.jaw_angle(jaw), 1.0]])

    def detail_offsets(self, z, jaw=None) -> np.ndarray | float:
        """The detail layer's skin offsets (s, 3) of code ``z`` and ``jaw`` (0 without one)."""
        if not self.detail.size:
            return 0.0
        return (self.detail @ self.detail_input(z, jaw)).reshape(-1, 3)

    def detail_rates(self, rows=None) -> np.ndarray:
        """``d offsets / d (z, angle)`` (3 s, d + 1) of the detail layer (its rows ``rows``
        of the flattened skin when given; zeros without a layer)."""
        if not self.detail.size:
            n = 3 * self.skin.matrix.shape[0] if rows is None else len(rows)
            return np.zeros((n, self.latent_dim + 1))
        D = self.detail if rows is None else self.detail[rows]
        return D[:, :-1]

    def blend_skin(self, z, jaw=None, rows=None) -> np.ndarray:
        """The skin's linear part ``L [z, angle, 1]`` (s, 3) (its rows ``rows`` of the
        flattened skin, flat, when given)."""
        L = self.blend if rows is None else self.blend[rows]
        out = L @ self.detail_input(z, jaw)
        return out if rows is not None else out.reshape(-1, 3)

    def skin_of(self, x, z, jaw=None) -> np.ndarray:
        """The skin (s, 3) of flesh nodes ``x`` solved for code ``z`` and ``jaw`` without
        contact: the embedded flesh plus the detail layer, or the keys' blend
        (:attr:`blend`; ``x`` unused)."""
        if self.blends:
            return self.blend_skin(z, jaw)
        return self.skin.apply(x) + self.detail_offsets(z, jaw)

    def hash(self) -> str:
        return mesh_hash(self.X, self.T)


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


def save(path: str | Path, model: ActiveModel, metadata: dict | None = None) -> Path:
    """Write an active-face model file (torch-free)."""
    dec_arrays, dec_meta = model.decoder.to_arrays("decoder.")
    arrays = {
        "X": model.X,
        "T": model.T,
        "fixed": model.fixed,
        "jaw_nodes": model.jaw_nodes,
        "jaw_pivot": model.jaw_pivot,
        "jaw_axis": model.jaw_axis,
        "codes": model.codes,
        "lift": model.lift,
        "U": model.U,
        "cub_elements": model.cub_elements,
        "cub_weights": model.cub_weights,
        "jaw_scale": np.array(float(model.jaw_scale)),
        "detail": model.detail,
        "blend": model.blend,
        **dec_arrays,
        **{f"skin.{k}": v for k, v in model.skin.to_arrays().items()},
    }
    meta = {"material": model.material.to_dict(), "decoder": dec_meta, **(metadata or {})}
    return save_model(path, method=NAME, mesh_hash=model.hash(), arrays=arrays, metadata=meta)


def model_from_file(model) -> ActiveModel:
    """The :class:`ActiveModel` of an opened model file (:class:`core.modelfile.Model`)."""
    a, meta = model.arrays, model.metadata
    return ActiveModel(
        X=a["X"],
        T=a["T"],
        material=Material.from_dict(meta["material"]),
        fixed=a["fixed"],
        jaw_nodes=a["jaw_nodes"],
        jaw_pivot=a["jaw_pivot"],
        jaw_axis=a["jaw_axis"],
        skin=Embedding.from_arrays({k[5:]: v for k, v in a.items() if k.startswith("skin.")}),
        decoder=MLP.from_arrays(a, meta["decoder"]),
        codes=a["codes"],
        lift=a["lift"],
        U=a["U"],
        cub_elements=a["cub_elements"],
        cub_weights=a["cub_weights"],
        jaw_scale=float(a["jaw_scale"]) if "jaw_scale" in a else 0.0,
        detail=a["detail"] if "detail" in a else np.zeros((0, 0)),
        blend=a["blend"] if "blend" in a else np.zeros((0, 0)),
    )


def levenberg_marquardt(
    residual_jacobian,
    z0,
    *,
    iters: int = 6,
    damping: float = 1e-3,
    tol: float = 1e-10,
    rtol: float = 1e-3,
    J0=None,
):
    """Minimize ``||r(z)||^2`` from ``z0``; ``residual_jacobian(z) -> (r, jacobian)`` with
    ``jacobian()`` computing ``J`` (only called at accepted points).

    Returns ``(z, cost, iterations, J)``. The damping adapts (x0.3 on success, x10 on
    failure); a step is kept only when it lowers the cost; it stops when a step lowers the
    cost by less than ``rtol`` of it (a frame warm-started from the previous one stops after
    one or two) or the gradient is below ``tol``.

    With ``J0`` (a Jacobian from a nearby point, e.g. the previous frame's) no exact Jacobian
    is computed while the steps succeed: ``J`` is corrected by Broyden's rank-one secant
    update after every trial; the first rejected step computes the exact one and goes on
    with it (the cost is always the true one, so the result is never worse than the start).
    """
    z = np.asarray(z0, float).copy()
    r, jac = residual_jacobian(z)
    exact = J0 is None
    J = jac() if exact else np.array(J0, float)
    cost = float(r @ r)
    lam = damping
    it = 0
    while it < iters:
        it += 1
        A = J.T @ J
        g = J.T @ r
        if np.abs(g).max() <= tol * max(cost, 1e-300) ** 0.5:
            break
        for _ in range(8):
            step = -sla.solve(
                A + lam * (np.diag(np.diag(A)) + 1e-12 * np.trace(A) * np.eye(len(z))),
                g,
                assume_a="pos",
            )
            r2, jac2 = residual_jacobian(z + step)
            c2 = float(r2 @ r2)
            if not exact:  # the secant condition J step = r2 - r, whatever the outcome
                J = J + np.outer(r2 - r - J @ step, step) / (step @ step)
            if c2 < cost:
                small = cost - c2 < rtol * cost
                z, r, cost, jac = z + step, r2, c2, jac2
                if exact:
                    J = jac()
                lam *= 0.3
                break
            if not exact:  # the secant model misled: the exact Jacobian at z, same damping
                J, exact = jac(), True
                A, g = J.T @ J, J.T @ r
                continue
            lam *= 10.0
        else:
            break
        if small:  # converged: the last step bought less than rtol of the cost
            break
    return z, cost, it, J


def _cross(y: np.ndarray) -> np.ndarray:
    """Cross-product matrices (..., 3, 3) of vectors (..., 3)."""
    K = np.zeros((*y.shape[:-1], 3, 3))
    K[..., 0, 1], K[..., 0, 2], K[..., 1, 2] = -y[..., 2], y[..., 1], -y[..., 0]
    K[..., 1, 0], K[..., 2, 0], K[..., 2, 1] = y[..., 2], -y[..., 1], y[..., 0]
    return K


def _rotation(w: np.ndarray) -> np.ndarray:
    """``exp([w]x)`` (3, 3) of a rotation vector ``w`` (rad)."""
    a = float(np.linalg.norm(w))
    K = _cross(np.asarray(w, float))
    if a < 1e-12:
        return np.eye(3) + K
    return np.eye(3) + np.sin(a) / a * K + (1 - np.cos(a)) / a**2 * (K @ K)


def head_matrix(h) -> np.ndarray:
    """The head's rigid motion (4, 4) of its 6 parameters ``h``: a rotation vector (rad) and
    a translation (m); a point ``p`` of the face goes to ``R p + c``."""
    h = np.asarray(h, float)
    M = np.eye(4)
    M[:3, :3], M[:3, 3] = _rotation(h[:3]), h[3:]
    return M


def head_unmoved(h, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points ``t`` (p, 3) taken back into the face's frame by the head's motion ``h`` (6,),
    ``R^T (t - c)``, and their rates ``d / dh`` (p, 3, 6): ``-R^T`` for the translation;
    ``R(-w) [y]x J_r(-w)`` for the rotation (``y = t - c``, ``J_r`` the right Jacobian of
    the rotation vector)."""
    h = np.asarray(h, float)
    w = h[:3]
    R = _rotation(w)
    y = np.asarray(t, float).reshape(-1, 3) - h[3:]
    out = y @ R  # R^T y per point
    a = float(np.linalg.norm(w))
    K = _cross(-w)
    if a < 1e-8:
        Jr = np.eye(3) - 0.5 * K
    else:
        Jr = np.eye(3) - (1 - np.cos(a)) / a**2 * K + (a - np.sin(a)) / a**3 * (K @ K)
    rates = np.zeros((len(y), 3, 6))
    rates[:, :, :3] = np.einsum("ij,pjk,kl->pil", R.T, _cross(y), Jr)
    rates[:, :, 3:] = -R.T
    return out, rates


class ActiveFace(SimulatorBase):
    """The runtime of an active-face model (see the module docstring).

    Parameters
    ----------
    model : ActiveModel
    solve : "reduced" or "full"
    tol : relative force residual of each solve
    colliders : initial colliders
    marker_pull : ``rho`` of the marker fit (pull to the previous code), m^2 per unit code
    marker_iters, marker_rtol : Levenberg-Marquardt iterations per marker frame at most, and
        the relative cost decrease under which it stops (a frame starts from the previous
        frame's code, so one or two iterations usually do)
    marker_jacobian : "broyden" (a marker frame starts from the previous frame's Jacobian of
        the markers with respect to the code and corrects it by secant updates; the exact one
        only after a rejected step) or "exact" (at every accepted step)
    head_from_markers : a marker frame solves the head's rigid motion (6 parameters,
        :func:`head_matrix`) with the code: the markers of a capture whose performer moves
        the head; the skin (:meth:`skin_positions`) moves with it
    jaw_from_markers : a marker frame solves the jaw's hinge angle with the code (the markers
        alone drive the whole face, as a performance capture gives them); the frame's
        ``reference_frame`` (the jaw keyed by hand) is then ignored. Off: the jaw is the
        frame's ``reference_frame``
    threads : BLAS threads of a frame's solve (None: as the process runs them);
        :meth:`pick_threads` measures the fastest
    marker_solver : "sqp" (reduced solve: the code and the equilibrium by one joint Newton /
        Gauss-Newton iteration, :meth:`fit_markers_sqp`, Levenberg-Marquardt when it does not
        converge) or "lm" (Levenberg-Marquardt, each trial a converged reduced solve)
    contact : "full" (reduced solve: a frame whose skin touches a collider is finished by
        the full solve from the reduced one: the subspace of expressions cannot dent a
        cheek, on the small head it put the skin 3.6 mm on average from the full solve's,
        6.7 mm deep in the sphere) or "reduced" (the penalty forces projected on the
        subspace only)
    """

    def __init__(
        self,
        model: ActiveModel,
        *,
        solve: str = "reduced",
        tol: float = 1e-6,
        colliders=None,
        marker_pull: float = 1e-8,
        marker_iters: int = 3,
        marker_rtol: float = 1e-2,
        marker_jacobian: str = "broyden",
        marker_solver: str = "sqp",
        contact: str = "full",
        jaw_from_markers: bool = False,
        head_from_markers: bool = False,
        threads: int | None = None,
    ) -> None:
        if solve not in ("reduced", "full"):
            raise SimulationError(f"solve must be 'reduced' or 'full', not {solve!r}")
        self.model = model
        self.mode = solve
        self.tol = tol
        self.marker_pull = marker_pull
        self.marker_iters = marker_iters
        self.marker_rtol = marker_rtol
        if marker_jacobian not in ("broyden", "exact"):
            raise SimulationError(
                f"marker_jacobian must be 'broyden' or 'exact', not {marker_jacobian!r}"
            )
        self.marker_jacobian = marker_jacobian
        if marker_solver not in ("sqp", "lm"):
            raise SimulationError(f"marker_solver must be 'sqp' or 'lm', not {marker_solver!r}")
        self.marker_solver = marker_solver
        if contact not in ("full", "reduced"):
            raise SimulationError(f"contact must be 'full' or 'reduced', not {contact!r}")
        self.contact = contact
        self.jaw_from_markers = bool(jaw_from_markers)
        self.head_from_markers = bool(head_from_markers)
        self.threads = threads
        self._marker_J = None
        self.fem = TetFEM(model.X, model.T, model.material)
        self.qs = QuasistaticSolver(self.fem, model.constrained, surface=model.skin.matrix)
        self.free = self.qs.free
        nfix = len(model.fixed)
        self.jaw_rows = np.arange(nfix, nfix + len(model.jaw_nodes))
        n3 = 3 * len(model.X)
        self.Ufull = np.zeros((n3, model.U.shape[1]))
        self.Ufull[self.free] = model.U
        self.colliders = list(colliders or [])
        self._setup_reduced()
        self.frame = 0
        self.reset()

    def _setup_reduced(self) -> None:
        m = self.model
        e = np.asarray(m.cub_elements, np.int64)
        dec = m.decoder
        if len(e):
            self.sub = TetFEM(m.X, m.T[e], m.material)
            self.w = np.asarray(m.cub_weights, float)
            rows = (6 * e[:, None] + np.arange(6)).ravel()
            self.sub_decoder = MLP(
                dec.W[:-1] + [dec.W[-1][rows]], dec.b[:-1] + [dec.b[-1][rows]], dec.activations
            )
        else:
            e = np.arange(len(m.T))
            self.sub, self.w, self.sub_decoder = self.fem, np.ones(len(e)), dec
        dofs = (3 * m.T[e][:, :, None] + np.arange(3)).reshape(-1, 12)
        self.Ue = self.Ufull[dofs]  # (k, 12, r)
        self.Uflat = np.ascontiguousarray(self.Ue.reshape(-1, self.Ue.shape[2]))
        self.SU = (self.qs.P3 @ self.Ufull).reshape(-1, 3, self.Ufull.shape[1])

    def reduced_terms(self, x, colliders, need_hess: bool):
        """Reduced energy (J), gradient (r,) and Hessian (r, r) (exact; cubature when the
        model has one) at positions ``x`` with the current actions."""
        E, ge, He = self.sub.element_terms(x, weights=self.w, hessians=need_hess, project=False)
        Uf = self.Uflat  # (12 k, r): one GEMM each instead of k small products
        gr = ge.reshape(-1) @ Uf
        Hr = Uf.T @ np.matmul(He, self.Ue).reshape(Uf.shape) if need_hess else None
        if colliders:
            Ec, gp, Hp = self.qs.surface_terms(
                self.model.skin.matrix @ x + self.qs.surface_offset, colliders, None, need_hess
            )
            E += Ec
            gr += np.einsum("sar,sa->r", self.SU, gp)
            if need_hess:
                act = np.flatnonzero(np.abs(Hp).sum((1, 2)) > 0)
                SUa = self.SU[act]
                Hr += np.einsum("sar,sab,sbt->rt", SUa, Hp[act], SUa)
        return E, gr, Hr

    def _touching(self) -> bool:
        """Whether a skin vertex is inside a collider."""
        if not self.colliders:
            return False
        p = self.model.skin_of(self.x, self.z, self.jaw)
        return any(float(c.signed_distance(p)[0].min()) < 0.0 for c in self.colliders)

    def reduced_energy(self, x, colliders) -> float:
        E = float(self.sub.element_energy(x) @ self.w)
        if colliders:
            p = self.model.skin.matrix @ x + self.qs.surface_offset
            E += self.qs.surface_terms(p, colliders, None, False)[0]
        return E

    # ------------------------------------------------------------------ protocol

    def rest_positions(self) -> np.ndarray:
        return self.model.X.copy()

    def positions(self) -> np.ndarray:
        """The flesh's nodes (n, 3) of the current frame. With a blend of the keys the flesh
        is solved only where something touches; on other frames it is solved here, when
        asked (the runtime's solve, no colliders)."""
        if self.model.blends and not self._x_valid:
            if self.mode == "full":
                self.x = self.solve_full(self.z, self.jaw, colliders=[]).x
            else:
                self.x, self.q, _, _ = self.solve_reduced(self.z, self.jaw, colliders=[])
            self._x_valid = True
        return self.x.copy()

    def head_transform(self) -> np.ndarray:
        """The head's rigid motion (4, 4) the markers solved (identity when they do not)."""
        return head_matrix(self.head)

    def skin_positions(self) -> np.ndarray:
        """(s, 3) skin vertex positions of the current frame (the detail layer's included,
        moved by the head's motion when the markers solve it; with a blend of the keys,
        :attr:`ActiveModel.blend`, the blend plus the contact's change)."""
        if self.model.blends:
            P = self._skin if self._skin is not None else self.model.blend_skin(self.z, self.jaw)
        else:
            P = self.model.skin_of(self.x, self.z, self.jaw)
        if not self.head.any():
            return P
        M = head_matrix(self.head)
        return P @ M[:3, :3].T + M[:3, 3]

    def reset(self) -> None:
        self.frame = 0
        self.z = np.zeros(self.model.latent_dim)
        self.jaw = np.eye(4)
        self.theta = self.fitted_theta = 0.0  # the hinge angle (rad) the markers solved
        self.head = np.zeros(6)  # the head's motion the markers solved (head_matrix)
        self.fitted_head = None
        self.q = np.zeros(self.model.U.shape[1])
        self.x = self.model.X.copy()
        self.residual = 0.0
        self._marker_J = None
        self._skin = None  # a blend of keys: the frame's skin (None: the blend alone)
        self._x_valid = True  # a blend of keys: whether x is this frame's flesh
        self._x0 = self._xc = None  # the last contact solves' equilibria (warm starts)

    def get_state(self) -> dict:
        return {
            "frame": self.frame,
            "z": self.z.copy(),
            "jaw": self.jaw.copy(),
            "theta": self.theta,
            "head": self.head.copy(),
            "q": self.q.copy(),
            "x": self.x.copy(),
            "skin": None if self._skin is None else self._skin.copy(),
            "x_valid": self._x_valid,
        }

    def set_state(self, state: dict) -> None:
        self.frame = int(state["frame"])
        self.z, self.jaw = np.array(state["z"], float), np.array(state["jaw"], float)
        self.theta = float(state.get("theta", 0.0))
        self.head = np.array(state.get("head", np.zeros(6)), float)
        self.q, self.x = np.array(state["q"], float), np.array(state["x"], float)
        self._skin, self._x_valid = state.get("skin"), bool(state.get("x_valid", True))

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        """The model's closest equilibrium to node positions ``x`` (a latent fit to the
        skin of ``x``, closed jaw)."""
        skin = self.model.skin.apply(np.asarray(x, float))
        z = self.fit_latent(skin, jaw=None, mode="full")[0]
        return self.solve_full(z, None).x

    # ------------------------------------------------------------------ solves

    def solve_full(self, z, jaw, x0=None, colliders=None):
        """Full quasistatic solve for code ``z`` and jaw transform/angle ``jaw`` (colliders
        touch the skin shown: the flesh's with the detail layer's offsets)."""
        self.qs.surface_offset = self.model.detail_offsets(z, jaw)
        return self.qs.solve(
            self.model.actions(z, jaw),
            self.model.boundary(jaw),
            x0=self.x if x0 is None else x0,
            colliders=self.colliders if colliders is None else colliders,
            tol=self.tol,
        )

    def solve_reduced(self, z, jaw, q0=None, colliders=None, max_iters: int = 20):
        """Reduced quasistatic solve: ``(x, q, iterations, reduced residual)``."""
        m = self.model
        colliders = self.colliders if colliders is None else colliders
        self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, jaw)).reshape(-1, 6))
        if colliders:  # they touch the skin shown
            self.qs.surface_offset = m.detail_offsets(z, jaw)
        base = self._base(jaw)
        U = self.Ufull
        q = (self.q if q0 is None else q0).copy()
        scale = self.qs.force_scale
        res = np.inf
        it = 0
        for it in range(max_iters + 1):
            x = base + (U @ q).reshape(-1, 3)
            E, gr, Hr = self.reduced_terms(x, colliders, True)
            res = float(np.abs(gr).max() / scale) if gr.size else 0.0
            if res < self.tol or it == max_iters:
                self._last = (x, Hr)  # the Jacobian of a marker fit reuses it
                break
            try:
                d = -sla.solve(Hr, gr, assume_a="sym")
                if gr @ d >= 0:
                    raise np.linalg.LinAlgError
            except (np.linalg.LinAlgError, ValueError):
                w, V = np.linalg.eigh(Hr)
                d = -(V / np.maximum(w, 1e-8 * np.abs(w).max())) @ (V.T @ gr)
            step = 1.0
            # close to an equilibrium the exact Newton step is taken without a line search
            # (quadratic convergence; saves an element pass per iteration)
            for _ in range(20 if res > 1e-3 else 0):
                xt = base + (U @ (q + step * d)).reshape(-1, 3)
                Et = self.reduced_energy(xt, colliders)
                if Et <= E + 1e-4 * step * (gr @ d) or abs(Et - E) < 1e-14 * abs(E):
                    break
                step *= 0.5
            q = q + step * d
        return x, q, it, res

    def reduced_jacobian(self, x, z, jaw=None):
        """``dq/dz`` (r, d) at the reduced equilibrium ``x`` for code ``z`` and jaw ``jaw``
        (transform, angle or None: closed; the decoder's jaw input)."""
        last = getattr(self, "_last", None)
        if last is not None and last[0] is x:
            Hr = last[1]
        else:
            Hr = self.reduced_terms(x, self.colliders, True)[2]
        M = self.sub.mixed_hessian(x)  # (3n, 6k)
        UtM = (M.T @ self.Ufull).T * np.repeat(self.w, 6)  # (r, 6k)
        d = len(np.asarray(z).reshape(-1))
        Jd = self.sub_decoder.jacobian(self.model.decoder_input(z, jaw))[:, :d]  # (6k, d)
        B = UtM @ Jd
        F = self._detail_force_rate(x, z, jaw, self.colliders)
        if F is not None:
            B = B + self.Ufull.T @ F
        return -sla.solve(Hr, B, assume_a="sym")

    def _detail_force_rate(self, x, z, jaw, colliders):
        """``d g / dz`` (3 n, d) through the detail layer in contact: the colliders press the
        skin shown, ``P x + D [z, angle, 1]``, so the code moves the skin they touch (None
        without colliders or a layer)."""
        m, qs = self.model, self.qs
        if not colliders or not m.detail.size:
            return None
        d = len(np.asarray(z).reshape(-1))
        p = m.skin.apply(x) + m.detail_offsets(z, jaw)
        Hp = qs.surface_terms(p, colliders, None, True)[2]
        o = np.einsum("sab,sbk->sak", Hp, m.detail[:, :d].reshape(len(p), 3, d))
        return qs.P3.T @ o.reshape(-1, d)

    def full_jacobian(self, x, z, colliders=None, jaw=None):
        """``dx/dz`` (n, 3, d) at the full equilibrium ``x`` for code ``z`` and jaw ``jaw``."""
        qs = self.qs
        qs.surface_offset = self.model.detail_offsets(z, jaw)
        lu = spla.splu(qs.hessian(x, colliders, None))
        M = self.fem.mixed_hessian(x)[qs.free]
        d = len(np.asarray(z).reshape(-1))
        Jd = self.model.decoder.jacobian(self.model.decoder_input(z, jaw))[:, :d]
        B = np.asarray(M @ Jd)
        F = self._detail_force_rate(x, z, jaw, colliders)
        if F is not None:
            B = B + F[qs.free]
        out = np.zeros((3 * len(x), Jd.shape[1]))
        out[qs.free] = -lu.solve(B)
        return out.reshape(len(x), 3, -1)

    # ------------------------------------------------------------------ blend of keys

    def touches(self, skin) -> bool:
        """Whether a skin vertex of ``skin`` (s, 3) lies inside a collider."""
        return any(float(c.signed_distance(skin)[0].min()) < 0.0 for c in self.colliders)

    def contact_skin(self, z, jaw):
        """The skin (s, 3) of a blend of keys (:attr:`ActiveModel.blend`) for code ``z`` and
        ``jaw`` with the colliders: ``L [z, angle, 1] + P (chi_c - chi_0)``, ``chi_0`` the
        full equilibrium without colliders and ``chi_c`` the one with them touching the skin
        shown (its offset ``L [z, angle, 1] - P chi_0``), each warm-started from the last
        contact frame's. Returns ``(skin, chi_0, chi_c (an Equilibrium), offset)``."""
        m, qs = self.model, self.qs
        lin = m.blend_skin(z, jaw)
        act, bnd = m.actions(z, jaw), m.boundary(jaw)
        qs.surface_offset = 0.0
        x0 = qs.solve(act, bnd, x0=self._x0, tol=self.tol).x
        offset = lin - m.skin.apply(x0)
        qs.surface_offset = offset
        xc0 = self._xc if self._xc is not None else x0
        eq = qs.solve(act, bnd, x0=xc0, colliders=self.colliders, tol=self.tol)
        self._x0, self._xc = x0, eq.x
        return lin + m.skin.apply(eq.x - x0), x0, eq, offset

    def contact_skin_rates(self, z, jaw, x0, xc, offset, with_angle: bool) -> np.ndarray:
        """``d skin / d (z[, angle])`` (3 s, d [+ 1]) of :meth:`contact_skin` at its
        equilibria ``x0`` (no colliders) and ``xc`` (the colliders touching with ``offset``):
        ``L_y + P (dchi_c - dchi_0)``, each equilibrium's rate by the implicit function
        theorem on the exact Hessian; ``chi_c``'s includes the offset's rate ``L_y - P
        dchi_0`` through the penalty's Hessian."""
        m, qs = self.model, self.qs
        k = len(z) + (1 if with_angle else 0)
        Ly = m.blend[:, :k]
        qs.surface_offset = 0.0
        d0 = self._equilibrium_rates(x0, z, jaw, with_angle, [], None)
        do = Ly - qs.P3 @ d0
        qs.surface_offset = offset
        dc = self._equilibrium_rates(xc, z, jaw, with_angle, self.colliders, do)
        return Ly + qs.P3 @ (dc - d0)

    def _equilibrium_rates(self, x, z, jaw, with_angle, colliders, offset_rate) -> np.ndarray:
        """``dx / d (z[, angle])`` (3 n, d [+ 1]) at the full equilibrium ``x`` of code ``z``
        and ``jaw`` (the jaw's nodes turn with the angle; ``offset_rate`` (3 s, k): the rate
        of the skin offset the colliders touch)."""
        m, qs, fem = self.model, self.qs, self.fem
        d = len(z)
        fem.set_actions(m.actions(z, jaw))
        H = fem.hessian(x, project=False)
        Hx = qs.extra_terms(x, colliders, None, True)[2]
        H = (H if Hx is None else H + Hx).tocsr()
        Jd = m.decoder.jacobian(m.decoder_input(z, jaw))
        M = fem.mixed_hessian(x)
        F = np.asarray(M @ Jd[:, :d])
        out = np.zeros((x.size, d + (1 if with_angle else 0)))
        if with_angle:
            b = np.zeros_like(x)
            b[m.constrained] = m.boundary_rate(m.jaw_angle(jaw))
            out[:, d] = b.ravel()
            Fa = H @ b.ravel()
            if m.jaw_scale:
                Fa = Fa + M @ (Jd[:, d] * m.jaw_scale)
            F = np.column_stack([F, Fa])
        if offset_rate is not None and colliders:
            p = m.skin.apply(x) + qs.surface_offset
            Hp = qs.surface_terms(p, colliders, None, True)[2]
            o = np.einsum("sab,sbk->sak", Hp, offset_rate.reshape(len(p), 3, -1))
            F = F + qs.P3.T @ o.reshape(-1, F.shape[1])
        free = qs.free
        out[free] = -spla.splu(H[free][:, free].tocsc()).solve(F[free])
        return out

    def _fit_blend(self, targets, vertices, weights, jaw, z0, pull, iters, rtol, theta0, head0):
        """:meth:`fit_latent` for a blend of keys: the skin ``L [z, angle, 1]`` is linear in
        the code and the angle (a linear least squares; the head's motion, when solved, by
        Gauss-Newton); where it touches a collider the contact's change and its rates
        (:meth:`contact_skin_rates`) join it. Leaves the fitted skin in ``_skin`` and the
        contact's equilibrium (or None) in ``_fit_eq``."""
        m = self.model
        rows = None
        if vertices is not None:
            rows = (3 * np.asarray(vertices)[:, None] + np.arange(3)).ravel()
        t = np.asarray(targets, float).reshape(-1, 3)
        w = np.ones(len(t)) if weights is None else np.asarray(weights, float)
        sw = np.repeat(np.sqrt(w), 3)
        d = len(z0)
        solve_jaw, solve_head = theta0 is not None, head0 is not None
        v0 = np.append(z0, float(theta0)) if solve_jaw else np.asarray(z0, float)
        nv = len(v0)
        if solve_head:
            v0 = np.append(v0, np.asarray(head0, float))
        sr = np.sqrt(pull)
        state = {}

        def rj(v):
            z = v[:d]
            jv = m.jaw_matrix(float(v[d])) if solve_jaw else jaw
            skin = m.blend_skin(z, jv)
            touch = bool(self.colliders) and self.touches(skin)
            eq = None
            if touch:
                skin, x0, eq, offset = self.contact_skin(z, jv)
            p = skin.reshape(-1) if rows is None else skin.reshape(-1)[rows]
            tv, t_rate = head_unmoved(v[nv:], t) if solve_head else (t, None)
            r = np.concatenate([sw * (p - tv.reshape(-1)), sr * (v - v0)])
            state.update(v=v.copy(), skin=skin, eq=eq)

            def jacobian():
                if touch:
                    Jp = self.contact_skin_rates(z, jv, x0, eq.x, offset, solve_jaw)
                    Jp = Jp if rows is None else Jp[rows]
                else:
                    Jp = m.blend[:, :nv] if rows is None else m.blend[rows, :nv]
                if solve_head:
                    Jp = np.column_stack([Jp, -t_rate.reshape(-1, 6)])
                return np.vstack([sw[:, None] * Jp, sr * np.eye(len(v))])

            return r, jacobian

        v, cost, it, _ = levenberg_marquardt(rj, v0, iters=iters, damping=1e-9, rtol=rtol)
        if not np.array_equal(state["v"], v):  # the last trial was a rejected step
            rj(v)
        z = v[:d]
        self.fitted_head = v[nv:].copy() if solve_head else None
        if solve_jaw:
            self.fitted_theta = float(v[d])
        self._skin, self._fit_eq = state["skin"], state["eq"]
        x = self.x if state["eq"] is None else state["eq"].x
        return z, x, cost, it

    # ------------------------------------------------------------------ inverse control

    def _base(self, jaw):
        """Node positions (n, 3) of the zero reduced coordinate with the jaw at ``jaw``: the
        constrained nodes on their boundary, the free ones lifted by ``G``."""
        m = self.model
        bnd = m.boundary(jaw)
        ujaw = (bnd[self.jaw_rows] - m.X[m.jaw_nodes]).ravel()
        base = m.X.copy()
        base.ravel()[self.free] += m.lift @ ujaw
        base[m.constrained] = bnd
        return base

    def _base_rate(self, theta: float) -> np.ndarray:
        """``d base / d theta`` (n, 3) of the jaw opened ``theta`` rad (:meth:`_base`)."""
        m = self.model
        rate = m.boundary_rate(theta)
        out = np.zeros_like(m.X)
        out.ravel()[self.free] = m.lift @ rate[self.jaw_rows].ravel()
        out[m.constrained] = rate
        return out

    def _jaw_force_rate(self, x, z, theta: float, dx: np.ndarray, gr: np.ndarray, eps=1e-6):
        """``d gr / d theta`` (r,) at fixed reduced coordinates: the reduced force's change
        when the jaw turns (its nodes and the lift move by ``dx`` per radian; a decoder that
        takes the jaw changes the actions too), by a forward difference of one gradient pass
        (``eps`` rad: the force is smooth, the difference agrees with a central one to
        1e-7 relative on the small head)."""
        m = self.model
        if m.jaw_scale:
            self.sub.set_actions(
                self.sub_decoder.forward(m.decoder_input(z, theta + eps)).reshape(-1, 6)
            )
        g2 = self.reduced_terms(x + eps * dx, self.colliders, False)[1]
        if m.jaw_scale:
            self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, theta)).reshape(-1, 6))
        return (g2 - gr) / eps

    def fit_markers_sqp(
        self, targets, vertices, weights=None, jaw=None, iters: int = 8, theta=None, head=None
    ):
        """Eq. (17) on the reduced problem by Newton / Gauss-Newton iterations on the code and
        the equilibrium together (SQP): each iteration is one pass over the cubature elements
        (reduced gradient and Hessian) and two small solves, where a Levenberg-Marquardt
        iteration needs a converged reduced solve (two or three passes, and line-search
        energies) per trial. The linearized equilibrium ``Hr dq + Br dz = -gr`` gives
        ``dq = a + Jq dz``; ``dz`` minimizes the linearized marker cost plus
        ``rho ||z - z_prev||^2``. ``Br = U^T (d2E/dx da) (da/dz)`` (a mixed-Hessian pass) is
        computed at the frame's first iteration only (a chord method: the equilibrium is
        still solved by exact Newton, the code's step uses a slightly stale sensitivity). It
        stops at an equilibrium (reduced residual below ``tol``) whose last code step
        changed the linearized cost by less than ``marker_rtol`` of it. On the small head
        (linear decoder, 30 markers, 48 frames between held-out keys) 5.6 element passes a
        frame (4.4 with Hessians, 1.1 mixed) instead of Levenberg-Marquardt's 14.8 (9.7
        with Hessians, 4.1 line-search energies, 1.0 mixed): CPU time per frame 30.9 ->
        14.3 ms, skin error 0.1194 vs 0.1192 mm (``bench/active.py``).

        With ``theta`` (the previous frame's hinge angle, rad) the jaw's angle is an unknown
        too: ``x = base(theta) + U q``, the markers move with ``base`` directly
        (``S dbase/dtheta``) and through the equilibrium (``Hr dq = -Bt dtheta``, ``Bt`` the
        reduced force's rate, :meth:`_jaw_force_rate`, one gradient pass an iteration); the
        same pull ``rho`` holds it to the previous frame's angle. ``jaw`` is then ignored.

        With ``head`` (the previous frame's head motion, 6 parameters of :func:`head_matrix`)
        the head's rigid motion is an unknown too: the markers are taken back into the face's
        frame by it (:func:`head_unmoved`, its rates a column each), held to the previous
        frame's by ``rho``; the fitted motion is left in ``fitted_head``.

        Returns ``(z, x, q, cost, iterations, reduced residual, converged, theta)``
        (``theta`` None without); not converged (a far jump, an indefinite reduced Hessian):
        the caller falls back to :meth:`fit_latent`.
        """
        m = self.model
        v = np.asarray(vertices)
        w = np.ones(len(v)) if weights is None else np.asarray(weights, float)
        sw = np.repeat(np.sqrt(w), 3)
        t_in = np.asarray(targets, float).reshape(-1, 3)
        t = t_in.reshape(-1)
        solve_head = head is not None
        h_prev = np.asarray(head, float) if solve_head else np.zeros(6)
        h = h_prev.copy()
        Jm = sw[:, None] * self.SU[v].reshape(-1, self.SU.shape[2])  # (3p, r)
        S = m.skin.matrix[v]
        rows = (3 * v[:, None] + np.arange(3)).ravel()
        Dm = sw[:, None] * m.detail_rates(rows)  # the detail layer's marker rates (3p, d + 1)
        Dfull = m.detail[rows] if m.detail.size else None
        z_prev = self.z.copy()
        rho = self.marker_pull
        d = len(z_prev)
        solve_jaw = theta is not None
        th_prev = float(theta) if solve_jaw else 0.0
        th = th_prev
        if not solve_jaw:
            base = self._base(jaw)
        scale = self.qs.force_scale
        wrep = np.repeat(self.w, 6)
        z, q = z_prev.copy(), self.q.copy()
        small, res_prev = False, np.inf
        for it in range(iters + 1):
            if solve_jaw:
                jaw = m.jaw_matrix(th)
                base = self._base(jaw)
            self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, jaw)).reshape(-1, 6))
            if self.colliders:  # they touch the skin shown
                self.qs.surface_offset = m.detail_offsets(z, jaw)
            x = base + (self.Ufull @ q).reshape(-1, 3)
            _, gr, Hr = self.reduced_terms(x, self.colliders, True)
            res = float(np.abs(gr).max() / scale)
            if solve_head:
                t, t_rate = head_unmoved(h, t_in)
                t = t.ravel()
            rm = sw * ((S @ x).ravel() - t)
            if Dfull is not None:
                rm += sw * (Dfull @ m.detail_input(z, jaw))
            pull = float((z - z_prev) @ (z - z_prev)) + (th - th_prev) ** 2
            pull += float((h - h_prev) @ (h - h_prev))
            cost = float(rm @ rm) + rho * pull
            if not np.isfinite(res) or res > 1.0 or res > max(10.0 * res_prev, 0.1):
                break  # far from an equilibrium, or diverging: no step without a line search
                # (from an equilibrium, 1e-7, a step of the code or the jaw may leave 1e-3..3e-2)
            res_prev = res
            if (res < self.tol and small) or it == iters:
                break
            if it == 0:  # a chord method: the frame's first Br serves its later iterations
                Jd = self.sub_decoder.jacobian(m.decoder_input(z, jaw))[:, :d]
                Br = ((self.sub.mixed_hessian(x).T @ self.Ufull).T * wrep) @ Jd  # (r, d)
                F = self._detail_force_rate(x, z, jaw, self.colliders)
                if F is not None:  # the layer moves the skin the colliders press
                    Br = Br + self.Ufull.T @ F
            B, G0 = Br, None
            if solve_jaw:  # the jaw's column: its rate changes with the angle, so every time
                dx = self._base_rate(th)
                B = np.column_stack([Br, self._jaw_force_rate(x, z, th, dx, gr)])
                G0 = sw * (S @ dx).ravel()  # the markers ride on the lifted jaw directly
            try:
                cf = sla.cho_factor(Hr)
            except np.linalg.LinAlgError:
                break
            a = -sla.cho_solve(cf, gr)
            Jq = -sla.cho_solve(cf, B)
            c = rm + Jm @ a
            G = Jm @ Jq
            G[:, :d] += Dm[:, :d]
            if solve_jaw:
                G[:, -1] += G0 + Dm[:, d]
            off = np.append(z - z_prev, th - th_prev)[: G.shape[1]]
            if solve_head:  # the head moves the markers, not the flesh
                G = np.column_stack([G, -sw[:, None] * t_rate.reshape(-1, 6)])
                off = np.append(off, h - h_prev)
            k = G.shape[1]
            A = G.T @ G + rho * np.eye(k)
            dv = -sla.solve(A, G.T @ c + rho * off, assume_a="pos")
            pred = float(np.sum((c + G @ dv) ** 2)) + rho * float((off + dv) @ (off + dv))
            small = abs(float(c @ c) + rho * float(off @ off) - pred) < (
                self.marker_rtol * max(pred, 1e-300)
            )
            nq = Jq.shape[1]
            z, q = z + dv[:d], q + a + Jq @ dv[:nq]
            if solve_jaw:
                th = th + float(dv[d])
            if solve_head:
                h = h + dv[nq:]
        ok = res < self.tol and small
        self.fitted_head = h if solve_head else None
        return z, x, q, cost, it, res, ok, (th if solve_jaw else None)

    def fit_latent(
        self,
        targets,
        *,
        vertices=None,
        weights=None,
        jaw=None,
        mode=None,
        z0=None,
        pull=None,
        iters=None,
        theta0=None,
        head0=None,
    ):
        """Eq. (17): the code whose equilibrium's skin best matches ``targets``.

        Parameters
        ----------
        targets : (p, 3) positions of skin vertices ``vertices`` (all skin vertices when None)
        weights : (p,) marker weights
        mode : "reduced" or "full" (the runtime's solve by default)
        pull : ``rho``, the pull toward ``z0`` (m^2 per unit code)
        theta0 : the jaw's hinge angle (rad) to start from when the fit solves it too (the
            same pull holds it there, per radian); ``jaw`` is then ignored and the fitted
            angle is left in ``fitted_theta``
        head0 : the head's motion (6 parameters, :func:`head_matrix`) to start from when the
            fit solves it too (the targets are taken back into the face's frame by it; the
            same pull holds it there); the fitted motion is left in ``fitted_head``

        Returns ``(z, x, cost, iterations)``.
        """
        m = self.model
        if m.blends:
            z0 = self.z if z0 is None else np.asarray(z0, float)
            return self._fit_blend(
                targets,
                vertices,
                weights,
                jaw,
                z0,
                self.marker_pull if pull is None else pull,
                iters or self.marker_iters,
                self.marker_rtol if iters is None else 1e-6,
                theta0,
                head0,
            )
        mode = mode or self.mode
        S = m.skin.matrix
        rows = None
        if vertices is not None:
            S = S[np.asarray(vertices)]
            rows = (3 * np.asarray(vertices)[:, None] + np.arange(3)).ravel()
        Dm = m.detail_rates(rows)  # (3p, d + 1)
        Dfull = (m.detail if rows is None else m.detail[rows]) if m.detail.size else None
        w = np.ones(S.shape[0]) if weights is None else np.asarray(weights, float)
        sw = np.sqrt(w)[:, None]
        t = np.asarray(targets, float).reshape(-1, 3)
        z0 = self.z if z0 is None else np.asarray(z0, float)
        d = len(z0)
        solve_jaw = theta0 is not None
        v0 = np.append(z0, float(theta0)) if solve_jaw else z0
        solve_head = head0 is not None
        nv = len(v0)  # the code and the angle: what the flesh answers
        if solve_head:
            v0 = np.append(v0, np.asarray(head0, float))
        rho = self.marker_pull if pull is None else pull
        state = {"x": self.x, "q": self.q, "z": None}

        def rj(v):
            z = v[:d]
            jv = m.jaw_matrix(float(v[d])) if solve_jaw else jaw
            if mode == "full":
                x = self.solve_full(z, jv, x0=state["x"]).x
            else:
                x, q, _, res = self.solve_reduced(z, jv, q0=state["q"])
                state["q"], state["res"] = q, res
            state["x"], state["z"] = x, v.copy()
            p = S @ x
            if Dfull is not None:
                p = p + (Dfull @ m.detail_input(z, jv)).reshape(-1, 3)
            tv, t_rate = head_unmoved(v[nv:], t) if solve_head else (t, None)
            r = np.concatenate([(sw * (p - tv)).ravel(), np.sqrt(rho) * (v - v0)])

            def jacobian():  # only at accepted steps
                if mode == "full":
                    Jx = self.full_jacobian(x, z, self.colliders, jv)  # (n, 3, d)
                else:
                    Jx = (self.Ufull @ self.reduced_jacobian(x, z, jv)).reshape(len(x), 3, -1)
                if solve_jaw:
                    Jx = np.concatenate([Jx, self._jaw_jacobian(x, z, float(v[d]), mode)], 2)
                Jp = (S @ Jx.reshape(len(x), -1)).reshape(S.shape[0], 3, -1)
                Jp = Jp + Dm[:, : Jp.shape[2]].reshape(Jp.shape)
                if solve_head:
                    Jp = np.concatenate([Jp, -t_rate], 2)
                return np.concatenate(
                    [(sw[:, :, None] * Jp).reshape(-1, len(v)), np.sqrt(rho) * np.eye(len(v))]
                )

            return r, jacobian

        # marker frames reuse the previous frame's Jacobian (Broyden-updated) when the
        # markers are the same vertices with the same weights
        key = (
            mode,
            solve_jaw,
            solve_head,
            S.shape[0],
            hash(np.asarray(vertices).tobytes()) if vertices is not None else None,
            hash(w.tobytes()),
            rho,
        )
        J0 = None
        if (
            iters is None
            and self.marker_jacobian == "broyden"
            and self._marker_J is not None
            and self._marker_J[0] == key
        ):
            J0 = self._marker_J[1]
        v, cost, it, J = levenberg_marquardt(
            rj,
            v0,
            iters=iters or self.marker_iters,
            rtol=self.marker_rtol if iters is None else 1e-6,
            J0=J0,
        )
        self._marker_J = (key, J)
        z = v[:d]
        self.fitted_head = v[nv:].copy() if solve_head else None
        if solve_jaw:
            self.fitted_theta = float(v[d])
            jaw = m.jaw_matrix(self.fitted_theta)
        if not np.array_equal(state["z"], v):  # the last trial was a rejected step
            if mode == "full":
                state["x"] = self.solve_full(z, jaw, x0=state["x"]).x
            else:
                state["x"], state["q"], _, state["res"] = self.solve_reduced(z, jaw, q0=state["q"])
        if mode != "full":
            self.q = state["q"]
            self._fit_res = state["res"]
        return z, state["x"], cost, it

    def _jaw_jacobian(self, x, z, theta: float, mode: str) -> np.ndarray:
        """``dx/dtheta`` (n, 3, 1) at the equilibrium ``x`` of code ``z`` with the jaw open
        ``theta`` rad: the jaw's nodes turn, the free nodes answer (the reduced solve: the lift
        and ``U dq``, ``Hr dq = -d gr/d theta``; the full one: ``H dx_f = -d g_f/d theta``)."""
        m = self.model
        if mode == "full":
            qs, eps = self.qs, 1e-6
            dx = np.zeros_like(x)
            dx[m.constrained] = m.boundary_rate(theta)
            actions = m.actions(z, theta)
            g = qs.gradient(x, self.colliders).ravel()[qs.free]
            if m.jaw_scale:
                qs.fem.set_actions(m.actions(z, theta + eps))
            g2 = qs.gradient(x + eps * dx, self.colliders).ravel()[qs.free]
            qs.fem.set_actions(actions)
            lu = spla.splu(qs.hessian(x, self.colliders, None))
            dx.ravel()[qs.free] = -lu.solve((g2 - g) / eps)
            return dx[:, :, None]
        self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, theta)).reshape(-1, 6))
        self.qs.surface_offset = m.detail_offsets(z, theta)
        _, gr, Hr = self.reduced_terms(x, self.colliders, True)
        dx = self._base_rate(theta)
        dq = -sla.solve(Hr, self._jaw_force_rate(x, z, theta, dx, gr), assume_a="sym")
        return (dx + (self.Ufull @ dq).reshape(-1, 3))[:, :, None]

    # ------------------------------------------------------------------ frame

    def pick_threads(self, counts=None) -> dict:
        """Set :attr:`threads` to the BLAS thread count under which this face's frames solve
        fastest, measured here (:func:`core.blas.fastest_threads`): a slider frame and a marker
        frame (30 skin vertices at a training key's equilibrium, the jaw as the runtime
        drives it), from rest, each count three times, the state put back after (the reduced
        solve only: the full one is left as the process runs it). Small faces
        solve fastest on one thread (the BLAS's thread start-up outweighs the small products)
        and a busy machine makes it worse; the measurement, not the size, decides.

        Returns :func:`core.blas.fastest_threads`'s ``{"threads", "seconds"}``."""
        from ...physics.blas import fastest_threads

        m = self.model
        if self.mode != "reduced":  # seconds a frame, sparse factorizations: nothing to gain
            return {"threads": None, "seconds": {}}
        state, threads = self.get_state(), self.threads
        z = m.codes[min(1, len(m.codes) - 1)]
        skin = m.skin.apply(self.solve_reduced(z, None, q0=np.zeros_like(self.q))[0])
        v = np.linspace(0, len(skin) - 1, min(30, len(skin))).astype(np.int64)
        self.threads = None

        def frames():
            self.reset()
            self.step(FrameInputs(sliders=z))
            self.reset()
            self.step(FrameInputs(markers=Markers(v, skin[v])))

        try:
            found = fastest_threads(frames, counts)
        finally:
            self.set_state(state)
            self._marker_J = None
        self.threads = found["threads"] or threads
        return found

    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        from ...physics.blas import blas_threads

        with blas_threads(self.threads):
            return self._step(inputs)

    def _step(self, inputs: FrameInputs | None = None) -> StepReport:
        import time

        t0 = time.perf_counter()
        inputs = inputs or FrameInputs()
        if inputs.colliders is not None:
            self.colliders = list(inputs.colliders)
        if inputs.reference_frame is not None:
            self.jaw = np.asarray(inputs.reference_frame, float).reshape(4, 4)
        rep = StepReport()
        if self.model.blends:
            return self._step_blend(inputs, rep, t0)
        if inputs.markers is not None:
            mk: Markers = inputs.markers
            theta = self.theta if self.jaw_from_markers else None
            head = self.head if self.head_from_markers else None
            ok = False
            if self.mode == "reduced" and self.marker_solver == "sqp":
                z, x, q, _, rep.newton_iters, res, ok, th = self.fit_markers_sqp(
                    mk.positions, mk.vertices, mk.weights, self.jaw, theta=theta, head=head
                )
                if ok:
                    self.z, self.q, self._fit_res = z, q, res
            if not ok:
                self.z, x, _, its = self.fit_latent(
                    mk.positions,
                    vertices=mk.vertices,
                    weights=mk.weights,
                    jaw=self.jaw,
                    theta0=theta,
                    head0=head,
                )
                rep.newton_iters += its
                th = self.fitted_theta if theta is not None else None
            if th is not None:  # the markers turned the jaw
                self.theta, self.jaw = th, self.model.jaw_matrix(th)
            if head is not None:  # and moved the head
                self.head = np.array(self.fitted_head, float)
        elif inputs.sliders is not None:
            z = np.zeros(self.model.latent_dim)
            s = np.asarray(inputs.sliders, float).reshape(-1)[: len(z)]
            z[: len(s)] = s
            self.z = z
        if inputs.markers is not None and self.mode == "reduced":
            # the fit ended on the equilibrium of its code: no second solve
            self.x = x
            rep.residual = self._fit_res
            rep.converged = rep.residual < self.tol
        elif self.mode == "full":
            eq = self.solve_full(self.z, self.jaw)
            self.x, rep.residual, rep.converged = eq.x, eq.residual, eq.converged
            rep.newton_iters += eq.iterations
        else:
            self.x, self.q, it, res = self.solve_reduced(self.z, self.jaw)
            rep.residual, rep.converged = res, res < self.tol
            rep.newton_iters += it
        if self.mode == "reduced" and self.contact == "full" and self._touching():
            t1 = time.perf_counter()
            eq = self.solve_full(self.z, self.jaw, x0=self.x)
            self.x, rep.residual, rep.converged = eq.x, eq.residual, eq.converged
            rep.newton_iters += eq.iterations
            rep.timings["contact_full_solve"] = time.perf_counter() - t1
        rep.force_residual = rep.residual
        self.frame += 1
        rep.wall_time = time.perf_counter() - t0
        return rep

    def _step_blend(self, inputs: FrameInputs, rep: StepReport, t0: float) -> StepReport:
        """A frame of a blend of keys: the code (sliders, or markers by :meth:`_fit_blend`),
        the skin ``L [z, angle, 1]``, and where it touches a collider the contact's change
        (two full solves); the flesh is left unsolved otherwise (:meth:`positions`)."""
        import time

        m = self.model
        eq = None
        if inputs.markers is not None:
            mk: Markers = inputs.markers
            theta = self.theta if self.jaw_from_markers else None
            head = self.head if self.head_from_markers else None
            self.z, _, _, rep.newton_iters = self._fit_blend(
                mk.positions,
                mk.vertices,
                mk.weights,
                self.jaw,
                self.z,
                self.marker_pull,
                self.marker_iters,
                self.marker_rtol,
                theta,
                head,
            )
            eq = self._fit_eq
            if theta is not None:  # the markers turned the jaw
                self.theta = self.fitted_theta
                self.jaw = m.jaw_matrix(self.theta)
            if head is not None:  # and moved the head
                self.head = np.array(self.fitted_head, float)
        else:
            if inputs.sliders is not None:
                z = np.zeros(m.latent_dim)
                s = np.asarray(inputs.sliders, float).reshape(-1)[: len(z)]
                z[: len(s)] = s
                self.z = z
            self._skin = m.blend_skin(self.z, self.jaw)
            if self.colliders and self.touches(self._skin):
                t1 = time.perf_counter()
                self._skin, _, eq, _ = self.contact_skin(self.z, self.jaw)
                rep.timings["contact_full_solve"] = time.perf_counter() - t1
        self._x_valid = eq is not None
        if eq is not None:
            self.x = eq.x
            rep.residual, rep.converged = eq.residual, eq.converged
            rep.newton_iters += eq.iterations
        else:
            rep.residual, rep.converged = 0.0, True
            self._x0 = self._xc = None  # a later touch starts from rest
        rep.force_residual = rep.residual
        self.frame += 1
        rep.wall_time = time.perf_counter() - t0
        return rep


def play(
    face: ActiveFace,
    *,
    sliders: np.ndarray | None = None,
    markers: np.ndarray | None = None,
    marker_vertices: np.ndarray | None = None,
    jaw: np.ndarray | None = None,
    pc2: str | Path | None = None,
    start_frame: float = 1,
) -> tuple[np.ndarray, list[StepReport]]:
    """Play an animation headless (and bake the skin to PC2).

    Parameters
    ----------
    sliders : (F, d) latent slider values per frame, or
    markers : (F, p, 3) marker positions per frame, with ``marker_vertices`` (p,) skin
        vertices they are bound to
    jaw : (F,) jaw angles (rad) or (F, 4, 4) jaw transforms; closed when None
    pc2 : write the skin frames to this PC2 file

    Returns ``(skin (F, s, 3), reports)``.
    """
    if (sliders is None) == (markers is None):
        raise SimulationError("Play an active face from sliders or from markers (one of them).")
    F = len(sliders) if sliders is not None else len(markers)
    if jaw is not None and len(jaw) != F:
        raise SimulationError(f"The jaw animation has {len(jaw)} frames, the drive has {F}.")
    face.reset()
    skins, reps = [], []
    for f in range(F):
        J = None if jaw is None else jaw[f]
        if J is not None and np.ndim(J) == 0:
            J = face.model.jaw_matrix(float(J))
        inp = FrameInputs(reference_frame=J)
        if sliders is not None:
            inp.sliders = sliders[f]
        else:
            inp.markers = Markers(marker_vertices, markers[f])
        reps.append(face.step(inp))
        skins.append(face.skin_positions())
    skins = np.array(skins)
    if pc2 is not None:
        from ...data.pc2 import write_pc2

        write_pc2(pc2, skins, start_frame=start_frame)
    return skins, reps


def load(model, *, settings=None, colliders=None) -> ActiveFace:
    """The runtime of an opened active-face model file."""
    return ActiveFace(model_from_file(model), colliders=colliders)


METHOD = Method(
    name=NAME,
    label="Active face (Srinivasan 2021)",
    description="A face whose muscles are learned per-element actuations fit to sculpted "
    "shape keys through a differentiable quasistatic simulation; driven by latent sliders or "
    "by markers (Levenberg-Marquardt), with the jaw and colliders as inputs.",
    settings=(
        Setting(
            "latent_dim",
            "int",
            12,
            "Latent Size",
            "Latent codes per expression (one slider each)",
            minimum=1,
            maximum=256,
            soft_maximum=64,
        ),
        Setting(
            "decoder",
            "enum",
            "linear",
            "Decoder",
            "How the latent code makes the muscles' actions",
            items=(
                (
                    "linear",
                    "Linear",
                    "Actions linear in the code (and the jaw angle): generalizes best from a "
                    "few dozen sculpted keys",
                ),
                ("mlp", "MLP", "The paper's MLP with the hidden layers below"),
            ),
        ),
        Setting(
            "hidden",
            "int_list",
            [64],
            "Hidden Layers",
            "Widths of the MLP decoder's hidden layers",
            minimum=1,
            maximum=8192,
            advanced=True,
        ),
        Setting(
            "warm_epochs",
            "int",
            400,
            "Warm-Start Epochs",
            "Epochs fitting the MLP decoder to the approximate target actions (sec. 5.1; "
            "the linear decoder is fitted by least squares)",
            minimum=0,
            maximum=100_000,
            soft_maximum=5000,
        ),
        Setting(
            "epochs",
            "int",
            30,
            "Epochs",
            "End-to-end epochs through the quasistatic simulation (sec. 5.2)",
            minimum=0,
            maximum=100_000,
            soft_maximum=500,
        ),
        Setting(
            "jaw_input",
            "bool",
            False,
            "Jaw Input",
            "The decoder also takes the jaw angle (the jaw itself is always the solve's "
            "boundary): fits the training keys closer, generalizes no better",
            advanced=True,
        ),
        Setting(
            "skin",
            "enum",
            "blend",
            "Skin",
            "What the skin shown is",
            items=(
                (
                    "blend",
                    "Blend of Keys + Contact",
                    "The keys' blend, linear in the code and the jaw angle (any blend of the "
                    "training keys as a PCA of them gives it), plus the physics' change where "
                    "a collider touches (two full solves on those frames only)",
                ),
                (
                    "physics",
                    "Physical Equilibrium",
                    "The flesh's equilibrium every frame (plus the detail layer below): the "
                    "jaw's turn, volume and sliding are the physics' everywhere",
                ),
            ),
        ),
        Setting(
            "detail",
            "bool",
            True,
            "Skin Detail",
            "With the Physical Equilibrium skin: a per-vertex layer linear in the code and the jaw angle, fitted to what the "
            "physical fit leaves of the training keys and of blends of pairs of them: the skin "
            "comes closer to blends of the keys; contact, the jaw's turn and volume stay the "
            "physics'",
            advanced=True,
        ),
        Setting(
            "basis",
            "int",
            40,
            "Reduced Basis",
            "Size of the reduced quasistatic basis",
            minimum=1,
            maximum=2000,
            soft_maximum=200,
        ),
        Setting(
            "seed",
            "int",
            0,
            "Seed",
            "Seed of every random choice of the training (the same seed gives the same model)",
            minimum=0,
            maximum=2**31 - 1,
        ),
    ),
    load=load,
    trainer="training.active:train",
    needs_torch=True,
    inputs=frozenset({"sliders", "markers", "colliders", "reference_frame"}),
    trains_on=frozenset({"face"}),
    order=60,
)
