"""Triangle surfaces: the checks that decide whether TetGen may see one, closest points on
triangles, and procedural closed surfaces (box, icosphere).

TetGen is never handed a surface that :func:`check_surface` rejects: a failed TetGen run on a
self-intersecting surface corrupts the C heap of the process it runs in (we have seen
"corrupted size vs. prev_size" aborts on the *next* allocation), which inside Blender means a
crash with unsaved work. Validation first, with a message that says how to repair the mesh.
Units are SI: positions in metres, volumes in m^3.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.spatial import cKDTree

from ..errors import MeshError
from .tetmesh import as_faces, as_points, bbox_diagonal, first_indices, unique_rows

__all__ = [
    "box_surface",
    "check_surface",
    "closest_points_on_triangles",
    "enclosed_volume",
    "icosphere",
]

_FIX_CAGE = (
    "or simulate it through an embedding cage instead (tetrahedralize_embedded; in Blender "
    "'Use Embedding Cage'), which works for open and non-manifold render meshes"
)


def enclosed_volume(V, F) -> float:
    """Signed volume enclosed by a closed triangle surface (divergence theorem), m^3.

    Parameters
    ----------
    V : (n, 3) float array
        Vertex positions, metres.
    F : (k, 3) int array
        Triangles; positive volume when they are oriented outward (counter-clockwise seen from
        outside).
    """
    V = np.asarray(V, dtype=np.float64)
    F = np.asarray(F, dtype=np.int64)
    a, b, c = V[F[:, 0]], V[F[:, 1]], V[F[:, 2]]
    # shift to the centroid: the sum is translation invariant for closed surfaces, and
    # cancellation is smaller near the origin
    o = V.mean(0) if len(V) else np.zeros(3)
    return float(np.einsum("ij,ij->", a - o, np.cross(b - o, c - o)) / 6.0)


def _edge_topology(F: np.ndarray):
    """Half-edges (3k, 2), undirected unique edges, half-edge -> edge map and edge counts."""
    he = F[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    edges, inv, cnt = unique_rows(np.sort(he, axis=1))
    return he, edges, inv, cnt


def _flipped_faces(F: np.ndarray, he: np.ndarray, inv: np.ndarray, cnt: np.ndarray):
    """Faces whose orientation disagrees with most of their connected patch.

    Orientation is propagated across manifold edges (parity along a BFS tree); in each
    component the smaller parity class is reported. Only runs on the error path.
    """
    k = len(F)
    order = np.argsort(inv, kind="stable")
    starts = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    two = np.flatnonzero(cnt == 2)
    h1, h2 = order[starts[two]], order[starts[two] + 1]
    f1, f2 = h1 // 3, h2 // 3
    flip = (he[h1, 0] == he[h2, 0]).astype(np.int8)  # same direction = inconsistent pair
    g = sp.coo_matrix((flip + 1, (f1, f2)), shape=(k, k)).tocsr()  # weights 1/2 (0 is "no edge")
    g = (g + g.T).tocsr()
    _, labels = csgraph.connected_components(g, directed=False)
    f_bad = f1[flip == 1]
    _, first = np.unique(labels[f_bad], return_index=True)
    parity = np.zeros(k, dtype=np.int8)
    flipped = [np.zeros(0, np.int64)]
    for root in f_bad[first].tolist():  # only the components with a flipped face
        bfs, pred = csgraph.breadth_first_order(g, root, directed=False, return_predecessors=True)
        nodes = bfs[1:]
        w = (np.asarray(g[nodes, pred[nodes]]).ravel() - 1) % 2  # 1: orientation flips
        for node, p, wi in zip(nodes.tolist(), pred[nodes].tolist(), w.tolist(), strict=True):
            parity[node] = parity[p] ^ wi  # error path only: an O(k) loop is fine here
        ones = bfs[parity[bfs] == 1]
        zeros = bfs[parity[bfs] == 0]
        flipped.append(ones if len(ones) <= len(zeros) else zeros)
    return np.sort(np.concatenate(flipped))


def check_surface(V, F, *, min_area: float = 1e-12, self_intersections: bool = True) -> None:
    """Check that a triangle surface can be tetrahedralized; raise :class:`MeshError` if not.

    Checks, all vectorized: NaN/inf coordinates, face indices, too few faces, faces with a
    repeated vertex, zero-area faces, duplicate (coincident) vertices, loose vertices, duplicate
    faces, open boundary edges, non-manifold edges (> 2 faces), inconsistent orientation,
    no enclosed volume, and self-intersections (hierarchical-grid broad phase + vectorized
    triangle-triangle tests; ~100K faces check in about a second). The message lists every
    problem found with counts, the first offending indices, and how to fix it.

    Parameters
    ----------
    V : (n, 3) float array
        Vertex positions, metres.
    F : (k, 3) int array
        Triangles.
    min_area : float
        A face is degenerate when its area is below ``min_area * diag**2`` (``diag``: the
        bounding-box diagonal); coincident vertices are those closer than ``1e-9 * diag``.
    self_intersections : bool
        Run the (slowest) self-intersection test.
    """
    V = as_points(V, "V")
    F = as_faces(F, len(V))
    if len(F) < 4:
        raise MeshError(
            f"The surface has {len(F)} faces; a closed surface needs at least 4. "
            "Select the object's mesh, not an empty or a curve, and apply its modifiers."
        )
    diag = bbox_diagonal(V)
    if diag <= 0:
        raise MeshError("All vertices coincide: the surface has no extent.")

    problems: list[str] = []

    # ---- per-face geometry
    rep = (F[:, 0] == F[:, 1]) | (F[:, 1] == F[:, 2]) | (F[:, 2] == F[:, 0])
    a, b, c = V[F[:, 0]], V[F[:, 1]], V[F[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    zero = (area <= min_area * diag**2) & ~rep
    if rep.any():
        problems.append(
            f"{int(rep.sum())} degenerate faces use the same vertex twice (first faces: "
            f"{first_indices(np.flatnonzero(rep))}). Fix: Mesh > Clean Up > Degenerate Dissolve, "
            "then Merge by Distance."
        )
    if zero.any():
        problems.append(
            f"{int(zero.sum())} zero-area (degenerate) faces, area below {min_area:g} x "
            f"bbox diagonal^2 (first faces: {first_indices(np.flatnonzero(zero))}). Fix: Mesh > Clean "
            "Up > Degenerate Dissolve (or Merge by Distance)."
        )

    # ---- vertices
    pairs = cKDTree(V).query_pairs(r=1e-9 * diag, output_type="ndarray")
    if len(pairs):
        problems.append(
            f"{len(pairs)} pairs of duplicate (coincident) vertices (first pairs: {first_indices(pairs)}): "
            "the surface is split along seams. Fix: Mesh > Clean Up > Merge by Distance."
        )
    used = np.zeros(len(V), dtype=bool)
    used[F.ravel()] = True
    if not used.all():
        loose = np.flatnonzero(~used)
        problems.append(
            f"{len(loose)} loose vertices not used by any face (first: {first_indices(loose)}). "
            "Fix: Mesh > Clean Up > Delete Loose."
        )

    # ---- faces and edges
    _, finv, fcnt = unique_rows(np.sort(F, axis=1))
    dup_face = fcnt[finv] > 1
    if dup_face.any():
        problems.append(
            f"{int(dup_face.sum())} faces are duplicates of another face on the same vertices "
            f"(first faces: {first_indices(np.flatnonzero(dup_face))}). Fix: Mesh > Clean Up > Merge by "
            "Distance, or select the doubled faces and delete them."
        )
    he, edges, einv, ecnt = _edge_topology(F)
    open_e = edges[ecnt == 1]
    nonman = edges[ecnt > 2]
    if len(open_e):
        problems.append(
            f"{len(open_e)} open boundary edges (first vertex pairs: {first_indices(open_e)}): the surface "
            "has holes, so it does not enclose a volume. Fix: close the holes (select the "
            "boundary with Select > Select All by Trait > Non Manifold, then F or Grid Fill), "
            + _FIX_CAGE
            + "."
        )
    if len(nonman):
        problems.append(
            f"{len(nonman)} non-manifold edges shared by more than two faces (first vertex pairs: "
            f"{first_indices(nonman)}). Fix: separate the parts meeting there or dissolve the extra "
            "faces (Select > Select All by Trait > Non Manifold), " + _FIX_CAGE + "."
        )
    # orientation across manifold edges: the two half-edges must run in opposite directions
    order = np.argsort(einv, kind="stable")
    starts = np.concatenate([[0], np.cumsum(ecnt)[:-1]])
    two = np.flatnonzero(ecnt == 2)
    same_dir = he[order[starts[two]], 0] == he[order[starts[two] + 1], 0]
    if same_dir.any():
        flipped = _flipped_faces(F, he, einv, ecnt)
        problems.append(
            f"inconsistent orientation: {int(same_dir.sum())} edges join faces whose normals point "
            f"opposite ways; {len(flipped)} faces look flipped against their neighbours (first "
            f"faces: {first_indices(flipped)}). Fix: Mesh > Normals > Recalculate Outside (Shift+N)."
        )

    # ---- enclosed volume (only meaningful on a closed, consistently oriented surface)
    if not problems:
        vol = enclosed_volume(V, F)
        if abs(vol) <= 1e-9 * diag**3:
            problems.append(
                "the surface encloses no volume (it is flat or folded onto itself). Give the "
                "object thickness (Solidify modifier), " + _FIX_CAGE + "."
            )

    # ---- self-intersections
    if self_intersections:
        valid = ~(rep | zero | dup_face)
        hits = _self_intersecting_pairs(V, F, valid, diag)
        if len(hits):
            problems.append(
                f"{len(hits)} pairs of faces intersect each other (self-intersections; first face "
                f"pairs: {first_indices(hits)}). Fix: find them with the 3D-Print Toolbox 'Intersections' "
                "check; separate overlapping parts into their own objects, or join them with a "
                "Boolean Union (Exact), or move the vertex that pokes through back; "
                + _FIX_CAGE
                + "."
            )

    if problems:
        raise MeshError(
            f"The surface ({len(V)} vertices, {len(F)} faces) cannot be tetrahedralized:\n  - "
            + "\n  - ".join(problems)
        )


# ---- self-intersection test -----------------------------------------------------------------


def _box_pairs(lo: np.ndarray, hi: np.ndarray, pad: float) -> np.ndarray:
    """Pairs (i < j) of overlapping axis-aligned boxes, (p, 2) int64.

    Hierarchical uniform grid: boxes are binned by size into levels with cell size
    ``base * 2**level`` >= box size, so a box spans at most 2 cells per axis; in each level a box
    is paired with every box of its level or a smaller one sharing a cell. No O(k^2) anywhere
    as long as boxes are not piled up in one place.
    """
    k = len(lo)
    if k < 2:
        return np.zeros((0, 2), np.int64)
    lo = lo - pad
    hi = hi + pad
    ext = (hi - lo).max(1)
    base = float(np.median(ext))
    base = max(base, float(ext.max()) * 2.0**-20, 1e-300)
    level = np.ceil(np.log2(np.maximum(ext, base) / base)).astype(np.int64)
    origin = lo.min(0)
    out = []
    for lev in np.unique(level):
        cell = base * 2.0**lev
        idx = np.flatnonzero(level <= lev)
        i0 = np.floor((lo[idx] - origin) / cell).astype(np.int64)
        i1 = np.floor((hi[idx] - origin) / cell).astype(np.int64)
        cnt = i1 - i0 + 1
        tot = cnt.prod(1)
        ent = np.repeat(idx, tot)
        local = np.arange(int(tot.sum()), dtype=np.int64) - np.repeat(np.cumsum(tot) - tot, tot)
        c = np.repeat(cnt, tot, axis=0)
        cidx = np.repeat(i0, tot, axis=0)
        cidx[:, 2] += local % c[:, 2]
        cidx[:, 1] += (local // c[:, 2]) % c[:, 1]
        cidx[:, 0] += local // (c[:, 2] * c[:, 1])
        dims = cidx.max(0) + 1
        key = (cidx[:, 0] * dims[1] + cidx[:, 1]) * dims[2] + cidx[:, 2]
        guest = level[ent] != lev
        order = np.lexsort((guest, key))  # owners first within each cell
        key, ent, guest = key[order], ent[order], guest[order]
        n_e = len(key)
        new_group = np.r_[True, key[1:] != key[:-1]]
        gid = np.cumsum(new_group) - 1
        ends = np.r_[np.flatnonzero(new_group)[1:], n_e]
        pos = np.arange(n_e)
        npart = np.where(guest, 0, ends[gid] - pos - 1)
        first = np.repeat(pos, npart)
        off = np.arange(int(npart.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(npart) - npart, npart
        )
        a, b = ent[first], ent[first + 1 + off]
        out.append(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1))
    P = np.concatenate(out)
    P = np.unique(P[:, 0] * k + P[:, 1])
    P = np.stack([P // k, P % k], axis=1)
    ov = ((lo[P[:, 0]] <= hi[P[:, 1]]) & (lo[P[:, 1]] <= hi[P[:, 0]])).all(1)
    return P[ov]


def _dot(a, b):
    return np.einsum("...k,...k->...", a, b)


def _orient2(a, b, c):
    """2-D orientation (twice the signed area) of (a, b, c), arrays (..., 2)."""
    return (b[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (b[..., 1] - a[..., 1]) * (
        c[..., 0] - a[..., 0]
    )


def _segments_hit_triangles(A, B, dB, nAu, eps, tol_area):
    """Does any edge of triangle B cross triangle A? (non-coplanar pairs)

    A, B : (p, 3, 3) vertices; dB : (p, 3) signed distances of B's vertices to A's plane;
    nAu : (p, 3) unit normal of A.
    """
    hit = np.zeros(len(A), dtype=bool)
    for i in range(3):
        j = (i + 1) % 3
        dp, dq = dB[:, i], dB[:, j]
        den = dp - dq
        cross = (dp * dq <= 0) & (np.abs(den) > eps)
        t = np.where(cross, dp / np.where(cross, den, 1.0), 0.0)
        x = B[:, i] + t[:, None] * (B[:, j] - B[:, i])
        inside = cross.copy()
        for m in range(3):
            u, v = A[:, (m + 1) % 3] - x, A[:, (m + 2) % 3] - x
            inside &= _dot(np.cross(u, v), nAu) >= -tol_area
        hit |= inside
    return hit


def _coplanar_overlap(A, B, nAu, tol_area):
    """Interior overlap of coplanar triangle pairs (may share one vertex), (p,) bool."""
    ax = np.argmax(np.abs(nAu), axis=1)
    keep = np.array([[1, 2], [0, 2], [0, 1]])[ax]  # drop the dominant normal axis
    A2 = np.take_along_axis(A, keep[:, None, :], axis=2)
    B2 = np.take_along_axis(B, keep[:, None, :], axis=2)
    tol = tol_area[:, None] if np.ndim(tol_area) else tol_area
    hit = np.zeros(len(A), dtype=bool)

    def strictly_inside(T2, P2):  # P2 (p, q, 2) points vs triangles T2 (p, 3, 2)
        s = np.sign(_orient2(T2[:, 0], T2[:, 1], T2[:, 2]))[:, None]
        t0, t1, t2 = T2[:, None, 0], T2[:, None, 1], T2[:, None, 2]
        return (
            (s * _orient2(t0, t1, P2) > tol)
            & (s * _orient2(t1, t2, P2) > tol)
            & (s * _orient2(t2, t0, P2) > tol)
        ).any(1)

    pts_b = np.concatenate([B2, B2.mean(1, keepdims=True)], axis=1)
    pts_a = np.concatenate([A2, A2.mean(1, keepdims=True)], axis=1)
    hit |= strictly_inside(A2, pts_b) | strictly_inside(B2, pts_a)
    tol1 = tol[:, 0] if np.ndim(tol) else tol
    for i in range(3):
        p1, p2 = A2[:, i], A2[:, (i + 1) % 3]
        for j in range(3):
            q1, q2 = B2[:, j], B2[:, (j + 1) % 3]
            o1, o2 = _orient2(p1, p2, q1), _orient2(p1, p2, q2)
            o3, o4 = _orient2(q1, q2, p1), _orient2(q1, q2, p2)
            hit |= (((o1 > tol1) & (o2 < -tol1)) | ((o1 < -tol1) & (o2 > tol1))) & (
                ((o3 > tol1) & (o4 < -tol1)) | ((o3 < -tol1) & (o4 > tol1))
            )
    return hit


def _tri_pairs_intersect(V: np.ndarray, Fa: np.ndarray, Fb: np.ndarray) -> np.ndarray:
    """Which triangle pairs intersect beyond the vertices/edge they share, (p,) bool.

    * no shared vertex: an edge of one triangle crosses the other (Moller-style segment
      tests; touching counts), or a coplanar overlap;
    * one shared vertex s: the line where the planes meet leaves s into both triangles
      (both wedges at s contain the same direction), or a coplanar overlap;
    * a shared edge: the two faces are folded flat onto each other.
    """
    p = len(Fa)
    eq = Fa[:, :, None] == Fb[:, None, :]
    s = eq.sum((1, 2))
    o = V[Fa[:, 0]][:, None, :]
    A, B = V[Fa] - o, V[Fb] - o
    L = np.maximum(
        np.linalg.norm(A - A[:, [1, 2, 0]], axis=2).max(1),
        np.linalg.norm(B - B[:, [1, 2, 0]], axis=2).max(1),
    )
    nA = np.cross(A[:, 1] - A[:, 0], A[:, 2] - A[:, 0])
    nB = np.cross(B[:, 1] - B[:, 0], B[:, 2] - B[:, 0])
    nAu = nA / np.linalg.norm(nA, axis=1, keepdims=True)
    nBu = nB / np.linalg.norm(nB, axis=1, keepdims=True)
    dB = _dot(B - A[:, :1], nAu[:, None, :])
    dA = _dot(A - B[:, :1], nBu[:, None, :])
    eps = 1e-10 * L
    tol_area = 1e-12 * L**2
    copl = (np.abs(dB) <= eps[:, None]).all(1) & (np.abs(dA) <= eps[:, None]).all(1)
    hit = np.zeros(p, dtype=bool)

    m = (s == 0) & ~copl
    sep = (
        (dB > eps[:, None]).all(1)
        | (dB < -eps[:, None]).all(1)
        | (dA > eps[:, None]).all(1)
        | (dA < -eps[:, None]).all(1)
    )
    m &= ~sep
    if m.any():
        hit[m] = _segments_hit_triangles(
            A[m], B[m], dB[m], nAu[m], eps[m], tol_area[m]
        ) | _segments_hit_triangles(B[m], A[m], dA[m], nBu[m], eps[m], tol_area[m])

    m = (s == 1) & ~copl
    if m.any():
        e = eq[m].reshape(-1, 9).argmax(1)
        ia, ib = e // 3, e % 3
        rot = np.arange(3)[None, :]
        Ar = np.take_along_axis(A[m], ((ia[:, None] + rot) % 3)[:, :, None], axis=1)
        Br = np.take_along_axis(B[m], ((ib[:, None] + rot) % 3)[:, :, None], axis=1)
        u = np.cross(nAu[m], nBu[m])
        u /= np.linalg.norm(u, axis=1, keepdims=True)

        def wedge(Tr, nu):
            e1 = Tr[:, 1] - Tr[:, 0]
            e2 = Tr[:, 2] - Tr[:, 0]
            e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
            e2 /= np.linalg.norm(e2, axis=1, keepdims=True)
            return _dot(np.cross(u, e2), nu), _dot(np.cross(e1, u), nu)

        aA, bA = wedge(Ar, nAu[m])
        aB, bB = wedge(Br, nBu[m])
        tau = 1e-9
        plus = (aA > tau) & (bA > tau) & (aB > tau) & (bB > tau)
        minus = (aA < -tau) & (bA < -tau) & (aB < -tau) & (bB < -tau)
        hit[m] = plus | minus

    m = (s <= 1) & copl
    if m.any():
        hit[m] = _coplanar_overlap(A[m], B[m], nAu[m], tol_area[m])

    m = s == 2
    if m.any():
        ia = np.argmin(eq[m].any(2), axis=1)  # A's vertex not shared
        ib = np.argmin(eq[m].any(1), axis=1)  # B's vertex not shared
        r = np.arange(int(m.sum()))
        Am, Bm = A[m], B[m]
        a_op, b_op = Am[r, ia], Bm[r, ib]
        p0, q0 = Am[r, (ia + 1) % 3], Am[r, (ia + 2) % 3]
        flat = np.abs(dB[m][r, ib]) <= eps[m]
        same_side = _dot(np.cross(q0 - p0, a_op - p0), np.cross(q0 - p0, b_op - p0)) > 0
        hit[m] = flat & same_side
    return hit


def _self_intersecting_pairs(V, F, valid, diag, chunk: int = 200_000) -> np.ndarray:
    ids = np.flatnonzero(valid)
    if len(ids) < 2:
        return np.zeros((0, 2), np.int64)
    tri = V[F[ids]]
    pairs = _box_pairs(tri.min(1), tri.max(1), pad=1e-9 * diag)
    hits = []
    for s0 in range(0, len(pairs), chunk):
        P = pairs[s0 : s0 + chunk]
        h = _tri_pairs_intersect(V, F[ids[P[:, 0]]], F[ids[P[:, 1]]])
        hits.append(P[h])
    if not hits:
        return np.zeros((0, 2), np.int64)
    return ids[np.concatenate(hits)]


def merge_close_vertices(V, F, tol: float) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A surface with its vertices closer than ``tol`` metres merged (each cluster into its
    first vertex), the faces that collapse with them dropped, and pairs of faces on the same
    three vertices (a fin of zero thickness left between two merged sheets) dropped.

    What a Boolean through a ring of vertices leaves (vertices a hair apart, edges of zero
    length, faces of zero area) and TetGen would fill with slivers or with a tiny tet size
    around them. Returns ``(V2 (n2, 3), F2 (k2, 3), merged, dropped)``: the new surface
    (unused vertices removed), how many vertices went into others and how many faces were
    dropped. The result is not checked: pass it to :func:`check_surface`.
    """
    V = as_points(V, "V")
    F = as_faces(F, len(V))
    pairs = cKDTree(V).query_pairs(float(tol), output_type="ndarray")
    n = len(V)
    if len(pairs):
        g = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
        _, label = csgraph.connected_components(g, directed=False)
    else:
        label = np.arange(n)
    first = np.full(label.max() + 1, n)
    np.minimum.at(first, label, np.arange(n))
    G = first[label][F]
    keep = (G[:, 0] != G[:, 1]) & (G[:, 1] != G[:, 2]) & (G[:, 2] != G[:, 0])
    key = np.sort(G, axis=1)
    _, inverse, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    keep &= count[inverse.reshape(-1)] == 1
    G = G[keep]
    used = np.unique(G)
    new = np.full(n, -1, np.int64)
    new[used] = np.arange(len(used))
    return V[used], new[G], int(n - len(np.unique(first[label]))), int(len(F) - len(G))


# --------------------------------------------------------------------------------------------
# closest points (used to embed points outside a tet mesh)
# --------------------------------------------------------------------------------------------


def closest_points_on_triangles(P, A, B, C):
    """Closest points on triangles (A, B, C) to points P, all (p, 3) (Ericson, RTCD 5.1.5)."""
    ab, ac, ap = B - A, C - A, P - A
    d1, d2 = _dot(ab, ap), _dot(ac, ap)
    bp = P - B
    d3, d4 = _dot(ab, bp), _dot(ac, bp)
    cp = P - C
    d5, d6 = _dot(ab, cp), _dot(ac, cp)
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    with np.errstate(divide="ignore", invalid="ignore"):
        den = va + vb + vc
        v = vb / den
        w = vc / den
        res = A + ab * v[:, None] + ac * w[:, None]  # interior
        # edge regions (later assignments take precedence over earlier ones where they apply)
        e_bc = (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0)
        wbc = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        res = np.where(e_bc[:, None], B + (C - B) * wbc[:, None], res)
        e_ac = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        wac = d2 / (d2 - d6)
        res = np.where(e_ac[:, None], A + ac * wac[:, None], res)
        e_ab = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        vab = d1 / (d1 - d3)
        res = np.where(e_ab[:, None], A + ab * vab[:, None], res)
        # vertex regions
        res = np.where(((d6 >= 0) & (d5 <= d6))[:, None], C, res)
        res = np.where(((d3 >= 0) & (d4 <= d3))[:, None], B, res)
        res = np.where(((d1 <= 0) & (d2 <= 0))[:, None], A, res)
    return res


# --------------------------------------------------------------------------------------------
# procedural shapes (tests, demos; there is no Blender in core)
# --------------------------------------------------------------------------------------------


def box_surface(
    size=(1.0, 1.0, 1.0), divisions=(1, 1, 1), center=(0.0, 0.0, 0.0)
) -> tuple[np.ndarray, np.ndarray]:
    """Closed, outward-oriented triangulated box surface.

    Parameters
    ----------
    size : (3,) floats
        Edge lengths (lx, ly, lz), metres.
    divisions : (3,) ints
        Grid cells along each edge.
    center : (3,) floats
        Box centre, metres.

    Returns
    -------
    V : (n, 3) float64, F : (4 (nx ny + ny nz + nz nx), 3) int64
    """
    size = np.asarray(size, dtype=np.float64).reshape(3)
    div = np.asarray(divisions, dtype=np.int64).reshape(3)
    if (size <= 0).any() or (div < 1).any():
        raise MeshError(f"box_surface needs positive sizes and divisions, got {size}, {div}.")
    npts = div + 1
    quads = []
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        u, v = np.meshgrid(np.arange(div[b]), np.arange(div[c]), indexing="ij")
        u, v = u.ravel(), v.ravel()
        for side in (0, div[a]):
            corners = []
            for du, dv in ((0, 0), (1, 0), (1, 1), (0, 1)):  # eb x ec = ea: outward at the max side
                g = np.zeros((len(u), 3), dtype=np.int64)
                g[:, a], g[:, b], g[:, c] = side, u + du, v + dv
                corners.append(g)
            q = np.stack(corners, axis=1)
            quads.append(q if side else q[:, ::-1])
    Q = np.concatenate(quads)
    key = (Q[..., 0] * npts[1] + Q[..., 1]) * npts[2] + Q[..., 2]
    ukey, inv = np.unique(key.ravel(), return_inverse=True)
    G = np.stack([ukey // (npts[1] * npts[2]), (ukey // npts[2]) % npts[1], ukey % npts[2]], 1)
    V = np.asarray(center, dtype=np.float64) - size / 2 + G * (size / div)
    q = inv.reshape(-1, 4)
    F = np.concatenate([q[:, [0, 1, 2]], q[:, [0, 2, 3]]]).astype(np.int64)
    return V, F


def icosphere(radius: float = 1.0, subdivisions: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Closed, outward-oriented icosphere.

    Parameters
    ----------
    radius : float
        Radius of the circumscribed sphere, metres (vertices lie on it).
    subdivisions : int
        Loop-style 1-to-4 splits of the icosahedron: 20 * 4**s faces.

    Returns
    -------
    V : (10 * 4**s + 2, 3) float64, F : (20 * 4**s, 3) int64
    """
    t = (1.0 + 5.0**0.5) / 2.0
    V = np.array(
        [
            [-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0],
            [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
            [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1],
        ],
        dtype=np.float64,
    )  # fmt: skip
    F = np.array(
        [
            [0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11],
            [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8],
            [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
            [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1],
        ],
        dtype=np.int64,
    )  # fmt: skip
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    for _ in range(int(subdivisions)):
        e = np.sort(F[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
        edges, inv = np.unique(e, axis=0, return_inverse=True)
        mid = V[edges].mean(1)
        mid /= np.linalg.norm(mid, axis=1, keepdims=True)
        m = len(V) + inv.reshape(-1, 3)  # midpoints of edges (0,1), (1,2), (2,0)
        V = np.concatenate([V, mid])
        a, b, c = F[:, 0], F[:, 1], F[:, 2]
        m01, m12, m20 = m[:, 0], m[:, 1], m[:, 2]
        F = np.concatenate(
            [
                np.stack([a, m01, m20], 1),
                np.stack([b, m12, m01], 1),
                np.stack([c, m20, m12], 1),
                np.stack([m01, m12, m20], 1),
            ]
        )
    return V * float(radius), F
