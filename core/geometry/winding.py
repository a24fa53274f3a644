"""Generalized winding numbers of a triangle mesh (Jacobson, Kavan & Sorkine-Hornung 2013),
fast by a tree of triangle clusters (Barill et al. 2018): inside/outside that does not hinge
on where the query points lie.

``w(q) = sum_t Omega_t(q) / 4 pi``, ``Omega_t`` the signed solid angle of triangle ``t`` seen
from ``q`` (Van Oosterom & Strackee 1983, eq. (6) of Jacobson 2013):

    tan(Omega / 2) = det[a b c] / (|a||b||c| + (a.b)|c| + (b.c)|a| + (c.a)|b|),

``a, b, c`` the corners relative to ``q``. For a closed, outward-oriented mesh ``w`` is 1
inside and 0 outside, exactly, wherever ``q`` lies: on a mirror plane, over a pole where many
triangles meet, on the line of an edge (the cases where a ray's crossing count is ambiguous).
For an open or imperfect mesh it degrades gracefully (a small hole changes ``w`` near the
hole only). "Inside" is ``w > 1/2``.

Far clusters take the dipole term of Barill et al. (2018, eq. (9), first order): the sum of
their triangles' area-weighted normals ``N`` at their area centroid ``c``,
``w ~ N . (c - q) / (4 pi |c - q|^3)``, when ``|c - q| > BETA r`` (``r`` the cluster's
radius about ``c``); the tree is traversed level by level for all points at once. A point
whose approximate ``w`` falls within :data:`AMBIGUOUS` of 1/2 is summed again exactly, so the
approximation never decides a classification close to the threshold.
Units: any (the winding number is dimensionless).
"""

from __future__ import annotations

import numpy as np

from .tetmesh import as_faces, as_points

__all__ = ["inside_mesh", "winding_numbers"]

#: A cluster is far from a point beyond this many cluster radii (Barill et al. use 2).
BETA = 2.0
#: Triangles per leaf cluster.
LEAF = 8
#: Points whose approximate winding number is within this of 1/2 are summed exactly.
AMBIGUOUS = 0.25
#: Point-triangle pairs per vectorized chunk (memory: about 200 bytes a pair).
CHUNK = 400_000


def _solid_angles(Q: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Signed solid angles (k,) of triangles (A, B, C) (k, 3) seen from points Q (k, 3)."""
    a, b, c = A - Q, B - Q, C - Q
    la = np.sqrt(np.einsum("ij,ij->i", a, a))
    lb = np.sqrt(np.einsum("ij,ij->i", b, b))
    lc = np.sqrt(np.einsum("ij,ij->i", c, c))
    det = np.einsum("ij,ij->i", a, np.cross(b, c))
    den = (
        la * lb * lc
        + np.einsum("ij,ij->i", a, b) * lc
        + np.einsum("ij,ij->i", b, c) * la
        + np.einsum("ij,ij->i", c, a) * lb
    )
    return 2.0 * np.arctan2(det, den)


def _exact_pairs(P, V, F, pts, tris, out) -> None:
    """``out[pts] += Omega(P[pts], F[tris]) / 4 pi`` over the pairs, in chunks."""
    for s in range(0, len(pts), CHUNK):
        p, t = pts[s : s + CHUNK], tris[s : s + CHUNK]
        f = F[t]
        om = _solid_angles(P[p], V[f[:, 0]], V[f[:, 1]], V[f[:, 2]])
        out += np.bincount(p, om, minlength=len(out)) / (4.0 * np.pi)


class _Tree:
    """Binary tree of triangle clusters (split at the median centroid along the widest axis),
    with each node's area-weighted normal sum ``N``, area centroid ``c`` and radius ``r``."""

    def __init__(self, V: np.ndarray, F: np.ndarray, leaf: int = LEAF) -> None:
        tri = V[F]
        cen = tri.mean(1)
        an = 0.5 * np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])  # area * normal
        area = np.linalg.norm(an, axis=1)
        order = np.arange(len(F))
        # nodes are contiguous ranges of ``order``, built breadth first (a node's children
        # come after it)
        starts, stops, left = [0], [len(F)], []
        i = 0
        while i < len(starts):
            s0, s1 = starts[i], stops[i]
            if s1 - s0 <= leaf:
                left.append(-1)
            else:
                idx = order[s0:s1]
                c = cen[idx]
                axis = int(np.argmax(c.max(0) - c.min(0)))
                half = (s1 - s0) // 2
                part = np.argpartition(c[:, axis], half)
                order[s0:s1] = idx[part]
                left.append(len(starts))
                starts += [s0, s0 + half]
                stops += [s0 + half, s1]
            i += 1
        self.order = order
        self.start, self.stop = np.array(starts), np.array(stops)
        self.left = np.array(left)  # -1 for a leaf; the right child is left + 1
        # per-node moments by prefix sums over the ordered triangles
        cs = lambda a: np.concatenate([np.zeros((1,) + a.shape[1:]), np.cumsum(a, 0)])  # noqa: E731
        A = cs(area[order])
        N = cs(an[order])
        M = cs(area[order, None] * cen[order])
        node_area = A[self.stop] - A[self.start]
        self.N = N[self.stop] - N[self.start]
        self.c = (M[self.stop] - M[self.start]) / np.maximum(node_area, 1e-300)[:, None]
        # radius: the farthest corner of the node's triangles from its centroid
        self.r = np.zeros(len(starts))
        corners = tri[order]  # (k, 3, 3)
        for n in range(len(starts)):  # once per node (set-up, not per point)
            d = corners[starts[n] : stops[n]] - self.c[n]
            self.r[n] = np.sqrt(np.einsum("ijk,ijk->ij", d, d).max())


def winding_numbers(P, V, F, *, exact: bool = False) -> np.ndarray:
    """The generalized winding number of the triangle mesh (V, F) at each point of ``P``.

    Parameters
    ----------
    P : (p, 3) float array
        Query points.
    V : (n, 3) float array
    F : (k, 3) int array
        The mesh (outward-oriented: 1 inside a closed mesh).
    exact : bool
        Sum every triangle for every point (p k solid angles) instead of the cluster tree.

    Returns
    -------
    (p,) float array: 1 inside, 0 outside a closed mesh; fractional near an open one's holes.
    Points within :data:`AMBIGUOUS` of 1/2 are exact whatever ``exact`` says.
    """
    P = as_points(P, "P")
    V = as_points(V, "V")
    F = as_faces(F, len(V))
    p, k = len(P), len(F)
    w = np.zeros(p)
    if not p or not k:
        return w
    if exact or k <= 4 * LEAF:
        pts = np.repeat(np.arange(p), k)
        _exact_pairs(P, V, F, pts, np.tile(np.arange(k), p), w)
        return w
    tree = _Tree(V, F)
    # level-synchronous traversal: pairs (point, node) still to resolve
    pts, nodes = np.arange(p), np.zeros(p, np.int64)
    leaf_pts, leaf_nodes = [], []
    while len(pts):
        d = tree.c[nodes] - P[pts]
        dist = np.sqrt(np.einsum("ij,ij->i", d, d))
        far = dist > BETA * tree.r[nodes]
        if far.any():
            dn, fn = d[far], nodes[far]
            w += np.bincount(
                pts[far],
                np.einsum("ij,ij->i", tree.N[fn], dn) / (4.0 * np.pi * dist[far] ** 3),
                minlength=p,
            )
        near = ~far
        pts, nodes = pts[near], nodes[near]
        leaf = tree.left[nodes] < 0
        leaf_pts.append(pts[leaf])
        leaf_nodes.append(nodes[leaf])
        pts, nodes = pts[~leaf], tree.left[nodes[~leaf]]
        pts, nodes = np.concatenate([pts, pts]), np.concatenate([nodes, nodes + 1])
    lp, ln = np.concatenate(leaf_pts), np.concatenate(leaf_nodes)
    _exact_pairs(P, V, F, *_expand(tree, lp, ln), w)
    unsure = np.flatnonzero(np.abs(w - 0.5) < AMBIGUOUS)
    if len(unsure):
        w[unsure] = 0.0
        sub = np.zeros(len(unsure))
        pts = np.repeat(np.arange(len(unsure)), k)
        _exact_pairs(P[unsure], V, F, pts, np.tile(np.arange(k), len(unsure)), sub)
        w[unsure] = sub
    return w


def _expand(tree: _Tree, pts: np.ndarray, nodes: np.ndarray):
    """(point, triangle) pairs of (point, leaf node) pairs."""
    cnt = tree.stop[nodes] - tree.start[nodes]
    rep = np.repeat(np.arange(len(pts)), cnt)
    off = np.arange(len(rep)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return pts[rep], tree.order[tree.start[nodes][rep] + off]


def inside_mesh(P, V, F) -> np.ndarray:
    """Which points of ``P`` (p, 3) lie inside the triangle mesh (V, F): winding number
    above 1/2 (:func:`winding_numbers`). (p,) bool array."""
    return winding_numbers(P, V, F) > 0.5
