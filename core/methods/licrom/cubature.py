"""The cubature of a LiCROM runtime on a mesh: random vertices or weights fitted to the
reduced forces of the model's latent codes, cached per process (:mod:`core.methods.licrom`)."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from ...data.files import mesh_hash as _mesh_hash
from ...physics import fem as _fem
from ...reduced.cubature import Cubature, optimized_cubature

#: Elements of each mesh whose reduced forces the fitted cubature's greedy selection scores
#: (one seeded draw, their columns computed once: ``optimized_cubature(pool=...)``).
CUBATURE_POOL = 2000

#: The fitted cubature's relative reduced-force error on its poses. On the bench's bar family
#: (bench/licrom.py, r = 20) 0.05 left the training bar's replay at 12.8 mm against 4.14 mm
#: with the exact energy; 0.01 gave 3.4 mm (83 elements), as close as cubature can get. With
#: Static Modes (forces weighed in a stiffness-orthonormal basis) 0.003: the ring family of
#: issue 23 replayed 2.47 / 0.43 / 0.54 / 0.38 mm (trained 50, 70 mm; unseen 60, 90 mm; the
#: exact energy 0.19 / 0.04 / 0.16 / 0.18), 0.01 4.94 / 0.92 / 1.07 / 0.58 mm.
CUBATURE_TARGET = 0.003

#: Latent codes the fitted cubature is fitted to on each mesh. The exact reduced forces of
#: each pose cost a full-mesh gradient, most of a fit on a big mesh: 16 poses fit the 20K-tet
#: bar in 0.55 s under load 9 (32: 0.99 s) with replays as close to the exact energy's.
CUBATURE_POSES = 16

#: Fitted rules kept per process (:func:`fitted_cubature`'s result for one basis, mesh and
#: material), so going back to a mesh (a reset after a swap, a model loaded again) is free.
_FITTED_CACHE: dict = {}
_FITTED_CACHE_SIZE = 8


def mesh_seed(seed: int, X: np.ndarray, T: np.ndarray) -> int:
    """The cubature seed of a mesh: ``seed`` mixed with the mesh's hash (a mesh keeps its
    cubature across runs; two meshes do not share their random draws)."""
    h = int(_mesh_hash(np.asarray(X, np.float64), np.asarray(T, np.int64))[:12], 16)
    return int(np.random.SeedSequence([int(seed), h]).generate_state(1)[0])


def inclusion_probability(n: int, m: int) -> float:
    """Probability that a tet is touched by ``m`` distinct vertices drawn uniformly from ``n``:
    ``1 - C(n-4, m) / C(n, m) = 1 - prod_{j<4} (n - m - j) / (n - j)``."""
    if m >= n - 3:
        return 1.0
    return 1.0 - math.prod((n - m - j) / (n - j) for j in range(4))


def random_cubature(T: np.ndarray, n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random vertex cubature: ``m`` distinct vertices drawn uniformly (``seed``), every element
    incident to one, each weighted ``1 / pi`` (:func:`inclusion_probability`), which makes
    ``sum_e w_e V_e(x)`` an unbiased estimate of ``V(x)`` (Horvitz-Thompson).

    Returns
    -------
    elements : (c,) int array; weights : (c,) float array
    """
    T = np.asarray(T, dtype=np.int64)
    m = int(min(max(m, 1), n))
    picked = np.zeros(n, dtype=bool)
    picked[np.random.default_rng(seed).choice(n, size=m, replace=False)] = True
    elements = np.flatnonzero(picked[T].any(axis=1))
    return elements, np.full(len(elements), 1.0 / inclusion_probability(n, m))


def fitted_cubature(
    X: np.ndarray,
    T: np.ndarray,
    material: _fem.Material,
    U: np.ndarray,
    codes: np.ndarray,
    *,
    target: float = CUBATURE_TARGET,
    max_elements: int = 500,
    poses: int = CUBATURE_POSES,
    pool: int = CUBATURE_POOL,
    seed: int = 0,
    basis_key: bytes | None = None,
    fem: _fem.TetFEM | None = None,
    metric: np.ndarray | None = None,
) -> Cubature:
    """Cubature fitted on a mesh to its basis (An et al. 2008, :func:`.cubature.optimized_cubature`):
    non-negative element weights whose reduced forces match the exact ``U^T g(x)`` at the poses
    ``x = X + U q`` of ``poses`` of the latent ``codes`` (evenly spaced over them), to the
    relative error ``target`` or with ``max_elements`` elements. Candidates come from one
    seeded draw of ``pool`` elements (their columns computed once), which keeps the fit
    within a mesh swap's time.

    Parameters
    ----------
    X : (n, 3) float array, metres; T : (m, 4) int array
    U : (3n, r) float array, the field's basis on the mesh (pinned rows zero)
    codes : (c, r) float array, latent codes of training frames (the model file's
        ``cubature_codes``)

    ``fem``: the mesh's :class:`.fem.TetFEM` when the caller has one; ``metric`` (k, j): fit
    the forces of the basis ``U @ metric`` (the same poses; see :func:`stiffness_metric`).

    The result is kept (a few per process) under a digest of everything it depends on, so
    a mesh loaded again gets it back at once (``info["cached"]``). ``basis_key`` (bytes that
    determine ``U``: the field's weights and the pins) stands for ``U`` in that digest when
    given: a basis evaluated again need not repeat its last bits (BLAS kernels may round
    differently with the arrays' alignment), and the rule would then be fitted again.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    T = np.ascontiguousarray(T, dtype=np.int64)
    U = np.ascontiguousarray(U, dtype=np.float64)
    codes = np.ascontiguousarray(codes, dtype=np.float64)
    h = hashlib.blake2b(digest_size=16)
    for a in (X, T, codes) + ((U,) if basis_key is None else ()):
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    if basis_key is not None:
        h.update(str(U.shape).encode())
        h.update(basis_key)
    if metric is not None:  # with a basis key, a function of the basis and the mesh
        metric = np.ascontiguousarray(metric, dtype=np.float64)
        h.update(str(metric.shape).encode())
        h.update(b"metric" if basis_key is not None else metric.tobytes())
    h.update(json.dumps([material.to_dict(), target, max_elements, poses, pool, seed]).encode())
    key = h.hexdigest()
    if key in _FITTED_CACHE:
        c = _FITTED_CACHE.pop(key)  # the most recently used goes last, evicted last
        _FITTED_CACHE[key] = c
        return Cubature(c.elements.copy(), c.weights.copy(), {**c.info, "cached": True})
    pick = np.unique(np.linspace(0, len(codes) - 1, min(int(poses), len(codes))).round())
    x = X[None] + (codes[pick.astype(np.int64)] @ U.T).reshape(len(pick), len(X), 3)
    fem = _fem.TetFEM(X, T, material) if fem is None else fem
    c = optimized_cubature(
        fem,
        U if metric is None else U @ metric,
        x,
        target=target,
        max_elements=max_elements,
        pool=pool,
        seed=seed,
    )
    c.info["cached"] = False
    while len(_FITTED_CACHE) >= _FITTED_CACHE_SIZE:
        _FITTED_CACHE.pop(next(iter(_FITTED_CACHE)))
    _FITTED_CACHE[key] = c
    return Cubature(c.elements.copy(), c.weights.copy(), dict(c.info))
