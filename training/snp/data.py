"""Subspace Neural Physics' data: the bakes as sequences in the reference frame, their
external features, the automatic choices (contact features, learning rate), the PCA, the
initial model (eq. 1-2), the external encoder and the normal model (sec. 6.3); cloth bakes
opened for training (:mod:`training.snp`'s docstring has the method)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.bake import BakeSpec, setup_scenario
from ...core.data.cache import BakeDataset
from ...core.errors import NeuralRomError
from ...core.kinds.cloth.source import is_cloth_bake, rigid, triangulate
from ...core.methods.snp import (
    CONSTANT_FEATURE,
    ExternalEncoder,
    SNPParameters,
    VertexNormals,
    external_features,
    reference_pose,
)
from ...core.physics.fem import Material
from ...core.reduced.pose import IDENTITY, Pose
from ..run import TrainingBakes, TrainingRun, split

# Singular values of a PCA below this fraction of the largest are round-off.
_RANK_RTOL = 1e-7


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------


@dataclass
class Sequence:
    """One bake in the reference frame, with the state before its first frame prepended.

    Attributes
    ----------
    y : (L, n, 3) positions in the reference frame, m (``L`` = frames + 1)
    features : (L, e) external features
    poses : the reference frame of each of the L frames
    bake : index of the bake in the dataset
    """

    y: np.ndarray
    features: np.ndarray
    poses: list
    bake: int


def collider_slots(cache) -> tuple[list[str], np.ndarray]:
    """Kinds and (c, 2) radius / half length of the colliders of a bake, in the order of its
    ``colliders`` channel (the scenario's scene colliders, generated ones, its ground; a
    cloth bake's metadata lists them)."""
    if is_cloth_bake(cache.meta):
        cols = cache.meta.get("colliders") or []
        return [c["kind"] for c in cols], np.array(
            [[c["radius"], c["half_length"]] for c in cols], dtype=np.float64
        ).reshape(-1, 2)
    X, T = np.asarray(cache.X, float), np.asarray(cache.T)
    _, driver = setup_scenario(X, T, BakeSpec.from_dict(cache.meta["spec"]))
    cols = driver.colliders(0)
    return [c.kind for c in cols], np.array([[c.radius, c.half_length] for c in cols]).reshape(
        -1, 2
    )


def reference_rest(ds) -> np.ndarray | None:
    """The driving frame's rigid transform at rest of cloth bakes (the first bake's: every
    bake's frames are expressed relative to it), None for FEM bakes (the pins' frame)."""
    meta = ds[0].meta
    return np.asarray(meta["reference_rest"], dtype=np.float64) if is_cloth_bake(meta) else None


def cloth_triangles(ds) -> np.ndarray | None:
    """The surface triangles of cloth bakes (their faces, fanned), None for FEM bakes."""
    c = ds[0]
    if not is_cloth_bake(c.meta):
        return None
    return triangulate(c.extra("face_vertices"), c.extra("face_sizes"))


def driven_poses(cache, rest: np.ndarray) -> list[Pose]:
    """The reference frame of each frame of a bake with a ``reference_frame`` channel:
    ``M_t M_rest^-1`` (what :meth:`SNPSimulation.driven_pose` computes at run time)."""
    M = np.asarray(cache.channel("reference_frame"), dtype=np.float64)
    rel = rigid(M) @ np.linalg.inv(rest)
    eye = np.eye(4)
    return [
        IDENTITY if np.allclose(r, eye, rtol=0, atol=1e-12) else Pose(r[:3, :3], r[:3, 3])
        for r in rel
    ]


def frame_origin(X: np.ndarray) -> np.ndarray:
    """The point whose motion is the reference frame's velocity and acceleration features:
    the centre of the rest bounding box (:func:`core.methods.snp.frame_features`)."""
    return 0.5 * (X.min(0) + X.max(0))


#: The automatic learning rate (:func:`learning_rate`): 3e-3 up to this many PCA modes, 1e-3
#: above.
LR_MODES = 40


def learning_rate(s, u: int) -> float:
    """The AMSGrad step size: the setting, or automatic: 3e-3 for at most :data:`LR_MODES`
    modes, 1e-3 for more. With per-mode scaling, many modes at 3e-3 did not train (the
    pressed block's 16 bakes, u = 49: 0.788x the initial model, 1e-3 0.387x; the flag, u =
    60: 0.886x, 1e-3 0.872x), where few did best at 3e-3 (the cloth test's sheet, u = 24:
    0.52x, 1e-3 0.59x; the block's 8 bakes, u = 34, 0.466x, 1e-3 0.470x); the cloth test's
    sheet at the automatic 60 modes: 3e-3 0.997x, 1e-3 0.521x. See the module docstring."""
    if s.learning_rate is not None:
        return float(s.learning_rate)
    return 3e-3 if u <= LR_MODES else 1e-3


def wants_contact(s, ds) -> bool:
    """Whether the model gets contact features: the setting "on" / "off", or "auto": on for
    soft-body (FEM) bakes with a collider that moves in some bake, off for Blender cloth
    bakes (a ball through a hanging sheet: 0.55x the initial model with them, 0.52x without,
    and the step 3x slower) and where no collider moves (the sweep is always the same)."""
    if s.contact_features != "auto":
        return s.contact_features == "on"
    if is_cloth_bake(ds[0].meta):
        return False
    for cache in ds:
        if "colliders" in cache.channels:
            mats = np.asarray(cache.channel("colliders"), dtype=np.float64)
            if mats.size and np.ptp(mats, axis=0).max() > 0.0:
                return True
    return False


def load_sequences(
    run: TrainingRun, contact: bool = False
) -> tuple[list[Sequence], list[str], np.ndarray]:
    """Every bake of the run as a :class:`Sequence` (see the module docstring), and the
    collider slots (kinds, sizes (c, 2)) every bake shares. The reference frame is the
    pins' rigid motion, or for cloth bakes the driving transform of their
    ``reference_frame`` channel (:func:`driven_poses`). ``contact``: the features end with
    the colliders' contact features (:func:`core.methods.snp.contact_features`, the sweep
    from each frame's colliders to the next's against the rest shape).

    Raises NeuralRomError when the bakes have different colliders (one model takes one set).
    """
    b = run.bakes
    spec = b.spec
    dt, g = float(spec.dt), np.asarray(spec.gravity, dtype=float)
    rest_pins = b.X[b.pinned]
    rest = reference_rest(b.ds)
    origin = frame_origin(b.X)
    kinds, sizes, seqs = None, None, []
    for i, cache in enumerate(b.ds):
        k, sz = collider_slots(cache)
        if kinds is None:
            kinds, sizes = k, sz
        elif k != kinds or not np.allclose(sz, sizes):
            raise NeuralRomError(
                f"Bake {Path(cache.path).name} has other colliders ({', '.join(k) or 'none'}) "
                f"than {Path(b.ds[0].path).name} ({', '.join(kinds) or 'none'}); a Subspace "
                "Neural Physics model takes one set of colliders: bake every variant with the "
                "same ones."
            )
        x = np.asarray(cache.channel("positions"), dtype=np.float64)
        v0 = np.asarray(cache.channel("velocities")[0], dtype=np.float64)
        F = len(x)
        targets = (
            np.asarray(cache.channel("pin_targets"), dtype=np.float64)
            if "pin_targets" in cache.channels
            else None
        )
        mats = (
            np.asarray(cache.channel("colliders"), dtype=np.float64)
            if "colliders" in cache.channels
            else np.zeros((F, 0, 4, 4))
        )
        poses, pose = [], IDENTITY
        if rest is not None:
            poses = driven_poses(cache, rest)
        for f in range(F if rest is None else 0):
            pose = reference_pose(rest_pins, None if targets is None else targets[f], pose)
            poses.append(pose)
        poses = [poses[0]] + poses  # the state before frame 0: at rest in frame 0's pose
        xs = np.concatenate([(x[0] - dt * v0)[None], x])
        mats = np.concatenate([mats[:1], mats])
        y = np.empty_like(xs)
        feats = []
        for j, p in enumerate(poses):
            y[j] = xs[j] if p.is_identity else (xs[j] - p.c) @ p.R
            hist = (p, poses[max(j - 1, 0)], poses[max(j - 2, 0)])
            sweep = (b.X, mats[max(j - 1, 0)], k) if contact else None
            feats.append(external_features(mats[j], sizes, hist, g, dt, origin, sweep))
        seqs.append(Sequence(y, np.array(feats), poses, i))
    return seqs, kinds or [], sizes if sizes is not None else np.zeros((0, 2))


# ------------------------------------------------------------------------------------------
# The linear parts
# ------------------------------------------------------------------------------------------


def mean_centred_pca(
    Y: np.ndarray,
    *,
    k: int | None = None,
    tolerance: float | None = None,
    max_k: int = 60,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Mean-centred PCA of poses (sec. 5.1): ``z = U^T (y - y_mu)``.

    Parameters
    ----------
    Y : (F, n, 3) positions, m
    k : number of modes ``u`` (at most the data's rank); None chooses it by ``tolerance``
    tolerance : largest vertex error (m) the basis may leave on ``Y`` when ``k`` is None: the
        fewest modes meeting it (bisection), at most ``max_k``

    Returns
    -------
    mean : (n, 3); U : (3n, u) orthonormal columns; info : ``rank``, ``max_error_m``
    """
    F, n, _ = Y.shape
    mean = Y.mean(axis=0)
    A = (Y - mean).reshape(F, -1)
    _, S, Vt = np.linalg.svd(A, full_matrices=False)
    rank = int(np.sum(S > _RANK_RTOL * S[0])) if len(S) and S[0] > 0 else 0
    if rank == 0:
        raise NeuralRomError(
            "The bakes do not move (every frame is the same pose): nothing to learn. Bake "
            "scenarios in which the colliders reach the object."
        )

    def worst(u: int) -> float:
        R = (A - (A @ Vt[:u].T) @ Vt[:u]).reshape(F, n, 3)
        return float(np.sqrt(np.max(np.einsum("fvi,fvi->fv", R, R))))

    if k is not None:
        u = min(int(k), rank)
    else:
        lo, hi = 1, min(int(max_k), rank)
        if worst(hi) > tolerance:
            lo = hi
        while lo < hi:
            mid = (lo + hi) // 2
            if worst(mid) <= tolerance:
                hi = mid
            else:
                lo = mid + 1
        u = lo
    U = np.ascontiguousarray(Vt[:u].T)
    return mean, U, {"rank": rank, "max_error_m": worst(u)}


def fit_initial_model(sequences: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``alpha``, ``beta`` (u,) of eq. (2), Holden 2019: per mode ``m`` the least-squares
    solution of ``z_{t,m} = alpha_m z_{t-1,m} + beta_m (z_{t-1,m} - z_{t-2,m})`` over every
    ``t >= 2`` of every sequence (the pseudo-inverse: minimum norm where a mode never moves).

    Parameters
    ----------
    sequences : list of (L_i, u) PCA coordinates of whole bakes
    """
    rows = [(z[1:-1], z[1:-1] - z[:-2], z[2:]) for z in sequences if len(z) >= 3]
    if not rows:
        raise NeuralRomError("Bakes of at least two frames are needed to fit the dynamics.")
    a, b, t = (np.concatenate(r) for r in zip(*rows))
    u = a.shape[1]
    alpha, beta = np.empty(u), np.empty(u)
    for m in range(u):
        A = np.stack([a[:, m], b[:, m]], axis=1)
        alpha[m], beta[m] = np.linalg.lstsq(A, t[:, m], rcond=None)[0]
    return alpha, beta


def fit_external_encoder(
    features: np.ndarray, modes: int | None = None, margin: float = 0.0
) -> ExternalEncoder:
    """The encoder of the external state (:class:`core.methods.snp.ExternalEncoder`).

    Parameters
    ----------
    features : (N, e) training frames' features
    modes : PCA coordinates kept (None: all the varying features span, the paper's v = e)
    margin : the clipping range is the training range widened by this fraction of it
    """
    f = np.asarray(features, dtype=np.float64)
    lo, hi = f.min(0), f.max(0)
    lo, hi = lo - margin * (hi - lo), hi + margin * (hi - lo)
    mean, sd = f.mean(0), f.std(0)
    keep = np.flatnonzero(sd > CONSTANT_FEATURE * (1.0 + np.abs(mean)))
    sd = np.where(np.isin(np.arange(len(sd)), keep), sd, 1.0)
    if len(keep):
        fs = (f[:, keep] - mean[keep]) / sd[keep]
        _, S, Vt = np.linalg.svd(fs, full_matrices=False)
        rank = int(np.sum(S > _RANK_RTOL * S[0])) if S[0] > 0 else 0
        V = Vt[: rank if modes is None else min(int(modes), rank)]
    else:
        V = np.zeros((0, 0))
    return ExternalEncoder(lo, hi, mean, sd, keep, V)


def fit_normal_model(
    sequences: list[np.ndarray], mean: np.ndarray, U: np.ndarray, triangles: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The linear normal model of Holden 2019, sec. 6.3: ``n_mu`` (3n,) and ``Q`` (3n, u) with
    ``Q = (N - n_mu) Z^+`` over the training frames, ``N`` their area-weighted vertex normals
    (:class:`core.methods.snp.VertexNormals`) in the reference frame and ``Z`` their PCA
    coordinates: the least-squares map from the state to the normals. Accumulated bake by
    bake (``Z^T Z`` and ``Z^T N``), so the frames' normals are never held all at once.

    Parameters
    ----------
    sequences : per training bake (L_i, n, 3) positions in the reference frame
    mean, U : the PCA (n, 3) mean and (3n, u) basis; triangles : (t, 3) the surface
    """
    vn = VertexNormals(triangles, len(mean))
    u = U.shape[1]
    G, H, zs, ns, count = np.zeros((u, u)), np.zeros((u, U.shape[0])), np.zeros(u), 0.0, 0
    for y in sequences:
        Z = (y - mean).reshape(len(y), -1) @ U
        N = np.stack([vn(f) for f in y]).reshape(len(y), -1)
        G += Z.T @ Z
        H += Z.T @ N
        zs += Z.sum(0)
        ns = ns + N.sum(0)
        count += len(y)
    z_mu, n_mu = zs / count, ns / count
    # centred normal equations: (Z - z_mu)^T (Z - z_mu) Q^T = (Z - z_mu)^T (N - n_mu)
    Gc = G - count * np.outer(z_mu, z_mu)
    Hc = H - count * np.outer(z_mu, n_mu)
    Qt = np.linalg.lstsq(Gc, Hc, rcond=None)[0]
    n_mu = n_mu - z_mu @ Qt  # the intercept at z = 0
    return n_mu, np.ascontiguousarray(Qt.T)


def normal_angles(params: SNPParameters, sequences: list[np.ndarray]) -> np.ndarray:
    """Angles (degrees, one per vertex and frame) between the linear normal model's normals
    and the normals recomputed from the decoded positions, of the frames' PCA projections:
    what showing the linear model's normals changes against recomputing them."""
    from ...core.methods.snp import linear_normals

    vn = VertexNormals(params.triangles, len(params.X))
    out = []
    for y in sequences:
        Z = (y - params.mean).reshape(len(y), -1) @ params.U
        lin = linear_normals(params.normal_mean, params.normal_basis, Z, [IDENTITY] * len(Z))
        for z, a in zip(Z, lin, strict=True):
            r = vn(params.mean + (params.U @ z).reshape(-1, 3))
            out.append(np.einsum("ij,ij->i", r, a.astype(np.float64)))
    return np.degrees(np.arccos(np.clip(np.concatenate(out), -1.0, 1.0)))


def open_cloth_bakes(ds: BakeDataset, validation_fraction: float, seed: int) -> TrainingBakes:
    """Cloth bakes (:mod:`core.clothbake`) opened for training as
    :func:`.run.open_bakes` opens FEM bakes: the time step and gravity of their metadata
    (one physics: refused when they differ), no tets, the pinned vertices, the split."""
    first = ds[0].meta
    for t in ds:
        m = t.meta
        if not is_cloth_bake(m):
            raise NeuralRomError(
                f"Bake {Path(t.path).name} is a FEM bake and {Path(ds[0].path).name} a cloth "
                "bake of Blender's: train one model from bakes of one source."
            )
        if abs(m["dt"] - first["dt"]) > 1e-12 or not np.allclose(m["gravity"], first["gravity"]):
            raise NeuralRomError(
                f"Bake {Path(t.path).name} has another frame rate or gravity than "
                f"{Path(ds[0].path).name}; train one model per physics setup."
            )
    X = np.asarray(ds[0].X, dtype=np.float64)
    pinned = np.asarray(ds[0].extra("pinned"), dtype=np.int64)
    spec = BakeSpec(
        frames=int(first["frames"]),
        dt=float(first["dt"]),
        gravity=tuple(float(g) for g in first["gravity"]),
        pinned=pinned.tolist(),
    )
    material = Material.from_dict(spec.material)
    mass = np.full(len(X), 1.0 / max(len(X), 1))  # not used by this method
    no_tets = np.zeros((0, 4), np.int64)
    return TrainingBakes(
        ds, spec, material, X, no_tets, pinned, mass, *split(ds, validation_fraction, seed)
    )


def open_run_bakes(run: TrainingRun) -> TrainingBakes:
    """The run's bakes opened and split (:meth:`.run.TrainingRun.open_bakes`) for FEM bakes;
    cloth bakes (they have no FEM scenario) by :func:`open_cloth_bakes`."""
    ds = BakeDataset.open(run.data, expect_mesh_hash=run.expect_mesh_hash)
    if not any(is_cloth_bake(t.meta) for t in ds):
        return run.open_bakes()
    s = run.settings
    b = run.use_bakes(open_cloth_bakes(ds, s.validation_fraction, s.seed))
    run.say(0.02, "loading bakes")
    return b
