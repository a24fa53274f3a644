"""Render vertices carried by a tet mesh: barycentric :class:`Embedding` and vectorized point
location (:func:`embed_points`). Units are SI: positions in metres.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

from ..errors import MeshError
from ..physics.colliders import ContactPoints
from .surface import closest_points_on_triangles
from .tetmesh import TetMesh, as_faces, as_points, bbox_diagonal, degenerate_tets

__all__ = ["Embedding", "embed_points"]


@dataclass(frozen=True, eq=False, repr=False)
class Embedding:
    """Render vertices carried by the tets of a :class:`TetMesh` (barycentric interpolation).

    A render position is ``p = sum_k bary[k] * x[nodes[k]]``: exact for any affine deformation of
    the tet mesh, and exact at rest.

    Parameters
    ----------
    tet : (r,) int64 array
        The tet each point is carried by.
    bary : (r, 4) float64 array
        Barycentric coordinates in that tet; rows sum to 1. For a point outside the mesh they are
        the *extrapolated* (unclamped) coordinates in the tet owning the closest boundary face, so
        some are negative.
    nodes : (r, 4) int64 array
        ``T[tet]``: the node indices the coordinates refer to.
    n_nodes : int
        Number of nodes of the tet mesh (columns of :attr:`matrix`).
    distance : (r,) float64 array
        How far outside the tet mesh each point lies, metres (0 inside).
    """

    tet: np.ndarray
    bary: np.ndarray
    nodes: np.ndarray
    n_nodes: int
    distance: np.ndarray | None = None

    def __post_init__(self):
        tet = np.asarray(self.tet, dtype=np.int64).reshape(-1)
        r = len(tet)
        bary = np.asarray(self.bary, dtype=np.float64)
        nodes = np.asarray(self.nodes, dtype=np.int64)
        dist = np.zeros(r) if self.distance is None else np.asarray(self.distance, np.float64)
        n = int(self.n_nodes)
        if bary.shape != (r, 4) or nodes.shape != (r, 4) or dist.shape != (r,):
            raise MeshError(
                f"Embedding arrays disagree: tet {tet.shape}, bary {bary.shape}, nodes "
                f"{nodes.shape}, distance {dist.shape}. Re-embed the render mesh."
            )
        if r and (nodes.min() < 0 or nodes.max() >= n):
            raise MeshError(
                f"Embedding refers to nodes outside 0..{n - 1}: it belongs to another tet mesh. "
                "Re-embed the render mesh."
            )
        for name, arr in (("tet", tet), ("bary", bary), ("nodes", nodes), ("distance", dist)):
            arr = arr.copy()
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "n_nodes", n)

    def __repr__(self) -> str:
        return f"Embedding(n_points={self.n_points}, n_nodes={self.n_nodes}, n_outside={self.n_outside})"

    @property
    def n_points(self) -> int:
        return int(self.tet.shape[0])

    @property
    def n_outside(self) -> int:
        """How many points lie outside the tet mesh (carried by extrapolation)."""
        return int((self.distance > 0).sum())

    @cached_property
    def matrix(self) -> sp.csr_matrix:
        """(r, n) sparse interpolation matrix W: render positions = ``W @ x``."""
        r = self.n_points
        rows = np.repeat(np.arange(r, dtype=np.int64), 4)
        return sp.csr_matrix(
            (self.bary.ravel(), (rows, self.nodes.ravel())), shape=(r, self.n_nodes)
        )

    def apply(self, x) -> np.ndarray:
        """Render positions for tet node positions.

        Parameters
        ----------
        x : (n, d) or (..., n, d) float array
            Node positions (or any per-node field), e.g. (n, 3) metres or (frames, n, 3).

        Returns
        -------
        (r, d) or (..., r, d) float64 array
        """
        x = np.asarray(x, dtype=np.float64)
        if x.shape[-2] != self.n_nodes:
            raise MeshError(
                f"apply() got {x.shape[-2]} node positions, the embedding expects {self.n_nodes}: "
                "the positions come from another tet mesh."
            )
        return np.einsum("rk,...rkd->...rd", self.bary, x[..., self.nodes, :])

    def contact_points(self, F, mesh: TetMesh, mass: np.ndarray) -> ContactPoints:
        """The render surface as the points that touch colliders (:class:`.ContactPoints`).

        Each render vertex with faces is a contact point carried by its tet's barycentric
        coordinates. It carries the share of the body's mass (all of ``mass``) that its area
        (a third of its triangles' areas, at rest) has of the render surface: the penalty's
        stiffness per unit area, ``kappa M / A``, is then a property of the object, not of how
        finely the cage or the render mesh is divided. (The surface vertices of a direct tet
        mesh carry their lumped masses, which shrink as the tets get finer.) Measured on a
        0.5 m flesh ball resting on a plane, cage resolution 6: 5.5 mm rest penetration, against
        8.2 mm with the cage surface nodes' mass spread the same way and 16 mm for the surface
        vertices of a direct tet mesh (0.1 m tets), all with the penalty's rest rule
        (``g / (1e-4 L)``); bakes now size it from the scenario's fastest impact
        (:func:`.colliders.penalty_stiffness`), which holds the demo ball within 1 mm.

        Parameters
        ----------
        F : (t, 3) int array
            Render triangles.
        mesh : TetMesh
            The tet mesh the embedding belongs to (rest positions, metres).
        mass : (n,) float array
            Lumped node masses of ``mesh``, kg.
        """
        F = as_faces(F, self.n_points)
        if mesh.n_vertices != self.n_nodes or len(mass) != self.n_nodes:
            raise MeshError(
                f"contact_points() got a tet mesh of {mesh.n_vertices} nodes and {len(mass)} "
                f"masses; the embedding has {self.n_nodes}. Re-embed the render mesh."
            )
        P = self.apply(mesh.X)
        tri = P[F]
        area = 0.5 * np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
        share = np.bincount(F.ravel(), weights=np.repeat(area / 3.0, 3), minlength=self.n_points)
        keep = np.flatnonzero(share > 0)
        if not keep.size:
            raise MeshError("The render mesh has no faces of positive area: nothing can touch.")
        total = float(np.sum(mass))
        return ContactPoints(self.nodes[keep], share[keep] / share.sum() * total, self.bary[keep])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The embedding as plain arrays, for ``np.savez`` (read back with :meth:`from_arrays`)."""
        return {
            "tet": np.array(self.tet),
            "bary": np.array(self.bary),
            "nodes": np.array(self.nodes),
            "n_nodes": np.array(self.n_nodes, dtype=np.int64),
            "distance": np.array(self.distance),
        }

    @classmethod
    def from_arrays(cls, arrays) -> Embedding:
        """Inverse of :meth:`to_arrays` (accepts a dict or an open ``np.load`` archive)."""
        missing = [k for k in ("tet", "bary", "nodes", "n_nodes") if k not in arrays]
        if missing:
            raise MeshError(
                f"Embedding data is missing {missing}: the file was not written by "
                "Embedding.to_arrays. Re-embed the render mesh."
            )
        dist = arrays.get("distance", None)
        return cls(
            tet=np.asarray(arrays["tet"]),
            bary=np.asarray(arrays["bary"]),
            nodes=np.asarray(arrays["nodes"]),
            n_nodes=int(np.asarray(arrays["n_nodes"])),
            distance=None if dist is None else np.asarray(dist),
        )


# --------------------------------------------------------------------------------------------
# point location
# --------------------------------------------------------------------------------------------


def render_positions(P, n_surface: int, embedding: Embedding | None = None) -> np.ndarray:
    """(..., r, 3) render-vertex positions of (..., n, 3) tet-node positions ``P``: the
    points of ``embedding`` (one sparse product for all frames), or without one the first
    ``n_surface`` nodes (a direct tet mesh keeps the render vertices first, in order)."""
    P = np.asarray(P, dtype=np.float64)
    if embedding is None:
        return P[..., :n_surface, :]
    W = embedding.matrix
    if P.ndim == 2:
        return np.asarray(W @ P)
    lead, n = P.shape[:-2], P.shape[-2]
    cols = np.moveaxis(P.reshape(-1, n, 3), 1, 0).reshape(n, -1)  # (n, frames * 3)
    out = np.asarray(W @ cols).reshape(W.shape[0], -1, 3)
    return np.moveaxis(out, 0, 1).reshape(*lead, W.shape[0], 3)


def _tet_edge_vectors(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Ds = [x1-x0, x2-x0, x3-x0] as columns, shape (m, 3, 3)."""
    x0 = X[T[:, 0]]
    return np.stack([X[T[:, 1]] - x0, X[T[:, 2]] - x0, X[T[:, 3]] - x0], axis=2)


def _bary_in(P, x0, Dinv, tets):
    """Barycentric coordinates of points P (..., 3) in tets (...,): (..., 4)."""
    l123 = np.einsum("...ij,...j->...i", Dinv[tets], P - x0[tets])
    return np.concatenate([1.0 - l123.sum(-1, keepdims=True), l123], axis=-1)


def _best_candidates(P, cand, x0, Dinv, valid, chunk=32768):
    """For points P (r,3) and candidate tets cand (r,k): best tet (largest min-bary) and its bary."""
    r = cand.shape[0]
    best = np.empty(r, dtype=np.int64)
    bary = np.empty((r, 4))
    score = np.empty(r)
    for s0 in range(0, r, chunk):
        c = cand[s0 : s0 + chunk]
        b = _bary_in(P[s0 : s0 + chunk, None, :], x0, Dinv, c)  # (q, k, 4)
        mn = np.where(valid[c], b.min(-1), -np.inf)
        j = mn.argmax(1)
        q = np.arange(len(c))
        best[s0 : s0 + chunk] = c[q, j]
        bary[s0 : s0 + chunk] = b[q, j]
        score[s0 : s0 + chunk] = mn[q, j]
    return best, bary, score


def _ragged(lists) -> tuple[np.ndarray, np.ndarray]:
    """Flatten a list of index lists into (owner, value) arrays."""
    lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    owner = np.repeat(np.arange(len(lists)), lens)
    if not len(owner):
        return owner, np.zeros(0, np.int64)
    return owner, np.concatenate([np.asarray(x, dtype=np.int64) for x in lists])


def _segment_argmax(owner, score, n):
    """For grouped values: index (into score) of the max of each group; -1 for empty groups."""
    order = np.lexsort((-score, owner))
    first = np.r_[True, owner[order][1:] != owner[order][:-1]]
    res = np.full(n, -1, dtype=np.int64)
    res[owner[order][first]] = order[first]
    return res


def embed_points(P, mesh: TetMesh, *, inside_tol: float = 1e-10) -> Embedding:
    """Barycentric coordinates of points in a tet mesh (vectorized point location).

    * A point inside (or on) the mesh gets the tet containing it: candidates are the tets with
      the nearest centroids (cKDTree), widened to every tet whose centroid is within the
      largest centroid-vertex distance when those miss, so the search is exact.
    * A point exactly at a node gets the one-hot coordinates of that node (exact).
    * A point outside gets the *extrapolated* (unclamped) barycentric coordinates in the tet
      owning the closest boundary face, and ``distance`` > 0. They still sum to one, reproduce
      the point exactly at rest and follow any affine deformation exactly; far outside, the
      extrapolation amplifies the deformation of that tet, so keep render vertices inside.

    Parameters
    ----------
    P : (r, 3) float array
        Points, metres.
    mesh : TetMesh
    inside_tol : float
        A point is inside a tet when its smallest barycentric coordinate is >= -inside_tol.
    """
    P = as_points(P, "P")
    X, T = mesh.X, mesh.T
    r, m = len(P), mesh.n_elements
    x0 = X[T[:, 0]]
    Ds = _tet_edge_vectors(X, T)
    valid = ~degenerate_tets(X, T)
    Dinv = np.zeros_like(Ds)
    Dinv[valid] = np.linalg.inv(Ds[valid])
    diag = max(bbox_diagonal(X), 1e-300)

    tet = np.full(r, -1, dtype=np.int64)
    bary = np.zeros((r, 4))
    dist = np.zeros(r)

    # points at nodes: exact one-hot
    dn, nn = cKDTree(X).query(P, k=1)
    at = dn <= 1e-12 * diag
    if at.any():
        ids, first = np.unique(T.ravel(), return_index=True)
        node_tet = np.full(len(X), -1, dtype=np.int64)
        node_local = np.zeros(len(X), dtype=np.int64)
        node_tet[ids], node_local[ids] = first // 4, first % 4
        at &= node_tet[nn] >= 0
        idx = np.flatnonzero(at)
        tet[idx] = node_tet[nn[idx]]
        bary[idx, node_local[nn[idx]]] = 1.0

    # inside points: nearest centroids first, then an exact ball search for the misses
    C = X[T].mean(1)
    tree = cKDTree(C)
    todo = np.flatnonzero(tet < 0)
    for k in (8, 32):
        if len(todo) == 0:
            break
        k = min(k, m)
        _, cand = tree.query(P[todo], k=k)
        cand = cand.reshape(len(todo), k)
        best, b, score = _best_candidates(P[todo], cand, x0, Dinv, valid)
        ok = score >= -inside_tol
        tet[todo[ok]], bary[todo[ok]] = best[ok], b[ok]
        todo = todo[~ok]
    # (points outside the bounding box cannot be inside: skip them; batches bound the memory)
    lo, hi = X.min(0) - 1e-9 * diag, X.max(0) + 1e-9 * diag
    near = todo[((P[todo] >= lo) & (P[todo] <= hi)).all(1)]
    if len(near):
        rmax = float(np.linalg.norm(X[T] - C[:, None, :], axis=2).max()) * (1 + 1e-9)
        for s0 in range(0, len(near), 1024):
            pts = near[s0 : s0 + 1024]
            owner, cand = _ragged(tree.query_ball_point(P[pts], r=rmax))
            if not len(cand):
                continue
            b = _bary_in(P[pts][owner], x0, Dinv, cand)
            score = np.where(valid[cand], b.min(-1), -np.inf)
            j = _segment_argmax(owner, score, len(pts))
            ok = (j >= 0) & (score[np.maximum(j, 0)] >= -inside_tol)
            tet[pts[ok]], bary[pts[ok]] = cand[j[ok]], b[j[ok]]
        todo = todo[tet[todo] < 0]

    # outside points: closest boundary face, exact (ball search bounded by the best of k)
    if len(todo):
        bf, owner_tet = mesh.boundary_faces(), mesh.boundary_face_tets()
        tri = X[bf]
        fc = tri.mean(1)
        frad = float(np.linalg.norm(tri - fc[:, None, :], axis=2).max()) * (1 + 1e-9)
        ftree = cKDTree(fc)
        kk = min(16, len(bf))
        for s0 in range(0, len(todo), 1024):
            pts = todo[s0 : s0 + 1024]
            Q = P[pts]
            _, cf = ftree.query(Q, k=kk)
            Qk = np.repeat(Q, kk, axis=0)
            cf = cf.reshape(-1)
            cl = closest_points_on_triangles(Qk, tri[cf, 0], tri[cf, 1], tri[cf, 2])
            dk = np.linalg.norm(cl - Qk, axis=1).reshape(-1, kk).min(1)
            # any face closer than dk has its centroid within dk + frad: exact candidates
            own, cand = _ragged(ftree.query_ball_point(Q, r=dk + frad))
            cl = closest_points_on_triangles(Q[own], tri[cand, 0], tri[cand, 1], tri[cand, 2])
            d = np.linalg.norm(cl - Q[own], axis=1)
            j = _segment_argmax(own, -d, len(pts))
            tt = owner_tet[cand[j]]
            tet[pts] = tt
            bary[pts] = _bary_in(Q, x0, Dinv, tt)
            dist[pts] = d[j]

    return Embedding(tet=tet, bary=bary, nodes=T[tet], n_nodes=mesh.n_vertices, distance=dist)


def pull_back(P, x, X, T) -> tuple[np.ndarray, np.ndarray]:
    """Rest positions of points ``P`` (r, 3) given in a deformed tet mesh: the inverse of the
    piecewise-linear deformation ``X -> x``. Each point's barycentric coordinates in the
    deformed tet that holds it (:func:`embed_points`; extrapolated from the closest boundary
    tet for a point outside) are applied to the rest nodes.

    Parameters
    ----------
    P : (r, 3) float array, points in the deformed configuration, metres
    x : (n, 3) float array, deformed node positions, metres
    X : (n, 3) float array, rest node positions, metres
    T : (m, 4) int array

    Returns
    -------
    rest : (r, 3) float64, the points' rest positions
    distance : (r,) float64, how far outside the deformed mesh each point lay, metres
    """
    emb = embed_points(P, TetMesh(np.asarray(x, dtype=np.float64), np.asarray(T, np.int64)))
    return emb.apply(np.asarray(X, dtype=np.float64)), np.asarray(emb.distance, dtype=np.float64)
