"""Meshing: surface validation, tetrahedralization, embedding cages, point embedding and tet-mesh I/O.

Everything here is numpy + scipy, with ``tetgen`` (the pyvista TetGen wrapper) and ``meshio``
imported lazily where they are needed. Units are SI: positions in metres, volumes in m^3.

The pipeline a Blender object goes through::

    surface (V, F) --check_surface--> ok --tetrahedralize--> TetMesh
    open / non-manifold render mesh --build_cage--> watertight cage --tetrahedralize--> TetMesh
                                                       + embed_points(render vertices) --> Embedding

TetGen is never handed a surface that :func:`check_surface` rejects: a failed TetGen run on a
self-intersecting surface corrupts the C heap of the process it runs in (we have seen
"corrupted size vs. prev_size" aborts on the *next* allocation), which inside Blender means a
crash with unsaved work. Validation first, with a message that says how to repair the mesh.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import math
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy import ndimage
from scipy.sparse import csgraph
from scipy.spatial import cKDTree

from .cache import mesh_hash
from .errors import MeshError

__all__ = [
    "Embedding",
    "TetMesh",
    "box_surface",
    "build_cage",
    "check_surface",
    "embed_points",
    "enclosed_volume",
    "icosphere",
    "read_tetmesh",
    "regular_tet_volume",
    "tetrahedralize",
    "tetrahedralize_embedded",
    "write_tetmesh",
]

# Outward faces of a positively oriented tet (x0, x1, x2, x3): row i is the face opposite vertex i.
_TET_FACES = np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]], dtype=np.int64)
# The six edges of a tet, and for each the pair of faces (by opposite vertex) that meet on it.
_TET_EDGES = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]], dtype=np.int64)
_EDGE_FACE_PAIRS = np.array([[2, 3], [1, 3], [1, 2], [0, 3], [0, 2], [0, 1]], dtype=np.int64)

_STDOUT_LOCK = threading.Lock()
_SHOW = 5  # how many offending indices an error message lists
_NPZ_FORMAT = "neural_rom.tetmesh"
_NPZ_VERSION = 1
# point-data array carrying n_surface_inputs through .msh/.vtu/.vtk
_SURFACE_MARKER = "neural_rom_surface_input"


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _first(a, n: int = _SHOW) -> str:
    """Render the first few rows of an index array for an error message."""
    a = np.asarray(a)
    items = [tuple(int(v) for v in r) if np.ndim(r) else int(r) for r in a[:n]]
    more = ", ..." if len(a) > n else ""
    return ", ".join(str(i) for i in items) + more


def _bbox_diag(V: np.ndarray) -> float:
    if len(V) == 0:
        return 0.0
    return float(np.linalg.norm(V.max(0) - V.min(0)))


def _as_points(P, name: str = "V") -> np.ndarray:
    try:
        P = np.asarray(P, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise MeshError(f"{name} must be an (n, 3) array of coordinates in metres: {exc}") from None
    if P.ndim != 2 or P.shape[1] != 3:
        raise MeshError(f"{name} must have shape (n, 3), got {P.shape}.")
    bad = ~np.isfinite(P).all(1)
    if bad.any():
        raise MeshError(
            f"{name} has {int(bad.sum())} vertices with NaN or infinite coordinates "
            f"(first: {_first(np.flatnonzero(bad))}). Fix the modifier, driver or transform that "
            "produced them (apply it and look for exploding values), then try again."
        )
    return P


def _as_faces(F, n_vertices: int) -> np.ndarray:
    F = np.asarray(F)
    if F.size == 0:
        F = F.reshape(0, 3)
    if F.ndim != 2 or F.shape[1] != 3:
        raise MeshError(
            f"F must be an (k, 3) array of triangle vertex indices, got shape {F.shape}. "
            "Triangulate quads and n-gons first (Blender: Ctrl+T, or a Triangulate modifier)."
        )
    if not np.issubdtype(F.dtype, np.integer) and not np.all(np.mod(F, 1) == 0):
        raise MeshError("F must hold integer vertex indices.")
    F = F.astype(np.int64)
    if F.size and (F.min() < 0 or F.max() >= n_vertices):
        bad = np.flatnonzero(((F < 0) | (F >= n_vertices)).any(1))
        raise MeshError(
            f"{len(bad)} faces index vertices outside 0..{n_vertices - 1} "
            f"(first faces: {_first(bad)}). The face and vertex arrays do not belong together."
        )
    return F


def _unique_rows(A: np.ndarray):
    """Unique rows of an integer array with inverse map and counts."""
    if len(A) == 0:
        return A.reshape(0, A.shape[1]), np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, inv, cnt = np.unique(A, axis=0, return_inverse=True, return_counts=True)
    return u, inv.reshape(-1), cnt


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


def regular_tet_volume(edge_length: float) -> float:
    """Volume of the regular tetrahedron with the given edge (m -> m^3): ``l^3 / (6 sqrt 2)``."""
    return float(edge_length) ** 3 / (6.0 * math.sqrt(2.0))


def _tet_edge_vectors(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Ds = [x1-x0, x2-x0, x3-x0] as columns, shape (m, 3, 3)."""
    x0 = X[T[:, 0]]
    return np.stack([X[T[:, 1]] - x0, X[T[:, 2]] - x0, X[T[:, 3]] - x0], axis=2)


def _tet_det(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """det(Ds) = 6 * signed volume, shape (m,)."""
    x0 = X[T[:, 0]]
    a, b, c = X[T[:, 1]] - x0, X[T[:, 2]] - x0, X[T[:, 3]] - x0
    return np.einsum("ij,ij->i", a, np.cross(b, c))


def _degenerate(X: np.ndarray, T: np.ndarray, det: np.ndarray) -> np.ndarray:
    """Tets flat to rounding, judged against their own size (meshes can span many scales)."""
    lmax = np.linalg.norm(X[T[:, _TET_EDGES[:, 1]]] - X[T[:, _TET_EDGES[:, 0]]], axis=2).max(1)
    return np.abs(det) <= 1e-12 * lmax**3


def _orient_positive(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Swap two vertices of every negatively oriented tet; raise on degenerate ones."""
    det = _tet_det(X, T)
    degenerate = _degenerate(X, T, det)
    if degenerate.any():
        raise MeshError(
            f"{int(degenerate.sum())} of {len(T)} tetrahedra have zero volume (first: "
            f"{_first(np.flatnonzero(degenerate))}). Re-tetrahedralize with a quality bound "
            "(tetrahedralize(..., quality=1.5)) or repair the volume mesh in the tool that made it."
        )
    T = T.copy()
    neg = det < 0
    T[neg] = T[neg][:, [0, 2, 1, 3]]
    return T


def _drop_unused(X: np.ndarray, T: np.ndarray, keep_first: int = 0):
    """Remove nodes no tet uses (keeping order); returns X, T and the old->new map (-1: dropped)."""
    used = np.zeros(len(X), dtype=bool)
    used[T.ravel()] = True
    used[:keep_first] = True
    if used.all():
        return X, T, np.arange(len(X))
    new = np.full(len(X), -1, dtype=np.int64)
    new[used] = np.arange(int(used.sum()))
    return X[used], new[T], new


# --------------------------------------------------------------------------------------------
# TetMesh
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class TetMesh:
    """A linear tetrahedral mesh.

    Parameters
    ----------
    X : (n, 3) float64 array
        Rest positions of the nodes, metres. Stored as a read-only copy.
    T : (m, 4) int64 array
        Node indices of each tet, positively oriented: ``det([x1-x0, x2-x0, x3-x0]) > 0``.
        Stored as a read-only copy.
    n_surface_inputs : int
        When > 0, nodes ``0 .. n_surface_inputs-1`` are exactly the vertices of the surface
        the mesh was built from, in the same order (so a watertight render mesh maps one to one).
    """

    X: np.ndarray
    T: np.ndarray
    n_surface_inputs: int = 0

    def __post_init__(self):
        X = _as_points(self.X, "TetMesh.X") + 0.0  # a copy, with -0.0 folded into 0.0 for the hash
        T = np.array(self.T, copy=True)
        if T.ndim != 2 or T.shape[1] != 4:
            raise MeshError(f"TetMesh.T must have shape (m, 4), got {T.shape}.")
        if len(T) == 0:
            raise MeshError(
                "The tet mesh has no tetrahedra. Tetrahedralize a closed surface "
                "(tetrahedralize) or an embedding cage (tetrahedralize_embedded) first."
            )
        if not np.issubdtype(T.dtype, np.integer):
            raise MeshError(f"TetMesh.T must hold integer node indices, got {T.dtype}.")
        T = T.astype(np.int64)
        if T.min() < 0 or T.max() >= len(X):
            raise MeshError(
                f"TetMesh.T indexes nodes outside 0..{len(X) - 1}: the node and tet arrays "
                "do not belong together."
            )
        ns = int(self.n_surface_inputs)
        if not 0 <= ns <= len(X):
            raise MeshError(f"n_surface_inputs={ns} is outside 0..{len(X)}.")
        X.setflags(write=False)
        T.setflags(write=False)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "T", T)
        object.__setattr__(self, "n_surface_inputs", ns)

    def __repr__(self) -> str:
        return (
            f"TetMesh(n_vertices={self.n_vertices}, n_elements={self.n_elements}, "
            f"n_surface_inputs={self.n_surface_inputs}, hash={self.hash()[:12]})"
        )

    @property
    def n_vertices(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_elements(self) -> int:
        return int(self.T.shape[0])

    # ---- topology ---------------------------------------------------------------------------

    @cached_property
    def _boundary(self):
        """(faces (k,3) outward, owner tet (k,), local face index (k,)) of the boundary."""
        m = self.n_elements
        faces = self.T[:, _TET_FACES].reshape(-1, 3)  # (4m, 3), outward oriented
        _, inv, cnt = _unique_rows(np.sort(faces, axis=1))
        once = cnt[inv] == 1
        idx = np.flatnonzero(once)
        bf = faces[idx]
        bf.setflags(write=False)
        owner = idx // 4
        local = idx % 4
        if len(idx) == 0 and m:
            raise MeshError("The tet mesh has no boundary: its faces do not pair up.")
        return bf, owner, local

    def boundary_faces(self) -> np.ndarray:
        """Surface triangles, (k, 3) int64, oriented outward (counter-clockwise from outside)."""
        return self._boundary[0]

    def boundary_face_tets(self) -> np.ndarray:
        """The tet owning each row of :meth:`boundary_faces`, (k,) int64."""
        return self._boundary[1]

    def surface_vertices(self) -> np.ndarray:
        """Sorted indices of the nodes on the boundary, (s,) int64."""
        return np.unique(self.boundary_faces())

    # ---- geometry ---------------------------------------------------------------------------

    def volumes(self) -> np.ndarray:
        """Rest volume of each tet, (m,) float64, m^3."""
        return _tet_det(self.X, self.T) / 6.0

    def element_quality(self) -> dict[str, np.ndarray]:
        """Per-tet quality measures, each an (m,) array.

        Returns
        -------
        dict with
            ``volume`` (m^3); ``radius_ratio`` = 3 r_in / R_circ (1 for the regular tet, 0 for
            a flat one); ``radius_edge_ratio`` = R_circ / shortest edge (sqrt(6)/4 ~ 0.612 for the
            regular tet; the quantity TetGen's ``-q`` bounds); ``min_dihedral_deg`` and
            ``max_dihedral_deg`` (70.53 deg for the regular tet).
        """
        X, T = self.X, self.T
        x = X[T]  # (m, 4, 3)
        a, b, c = x[:, 1] - x[:, 0], x[:, 2] - x[:, 0], x[:, 3] - x[:, 0]
        bxc, cxa, axb = np.cross(b, c), np.cross(c, a), np.cross(a, b)
        det = np.einsum("ij,ij->i", a, bxc)
        # circumcentre offset from x0: (|a|^2 bxc + |b|^2 cxa + |c|^2 axb) / (2 det)
        num = (
            (a * a).sum(1)[:, None] * bxc
            + (b * b).sum(1)[:, None] * cxa
            + (c * c).sum(1)[:, None] * axb
        )
        fx = x[:, _TET_FACES]  # (m, 4, 3, 3)
        n = np.cross(fx[:, :, 1] - fx[:, :, 0], fx[:, :, 2] - fx[:, :, 0])  # 2 * area vectors
        nn = np.linalg.norm(n, axis=2)  # (m, 4) = 2 * face areas
        e = x[:, _TET_EDGES[:, 1]] - x[:, _TET_EDGES[:, 0]]
        lmin = np.linalg.norm(e, axis=2).min(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            R = np.linalg.norm(num, axis=1) / (2.0 * np.abs(det))
            r_in = np.abs(det) / nn.sum(1)  # r = 3V / sum(A) = |det| / sum(2A)
            ni, nj = _EDGE_FACE_PAIRS[:, 0], _EDGE_FACE_PAIRS[:, 1]
            cos = -np.einsum("mek,mek->me", n[:, ni], n[:, nj]) / (nn[:, ni] * nn[:, nj])
            dihedral = np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))
            radius_ratio = np.where(np.isfinite(R), 3.0 * r_in / R, 0.0)
            radius_edge = R / lmin
        return {
            "volume": det / 6.0,
            "radius_ratio": radius_ratio,
            "radius_edge_ratio": radius_edge,
            "min_dihedral_deg": dihedral.min(1),
            "max_dihedral_deg": dihedral.max(1),
        }

    def quality(self) -> dict[str, float]:
        """Summary of :meth:`element_quality`: what a user needs to judge a tet mesh.

        Keys: ``n_vertices``, ``n_elements``, ``volume`` (total, m^3), ``min_volume``,
        ``max_volume``, ``min_radius_ratio``, ``mean_radius_ratio``, ``max_radius_edge_ratio``,
        ``mean_radius_edge_ratio``, ``min_dihedral_deg``, ``max_dihedral_deg``.
        """
        q = self.element_quality()
        v = q["volume"]
        return {
            "n_vertices": self.n_vertices,
            "n_elements": self.n_elements,
            "volume": float(v.sum()),
            "min_volume": float(v.min()),
            "max_volume": float(v.max()),
            "min_radius_ratio": float(q["radius_ratio"].min()),
            "mean_radius_ratio": float(q["radius_ratio"].mean()),
            "max_radius_edge_ratio": float(q["radius_edge_ratio"].max()),
            "mean_radius_edge_ratio": float(q["radius_edge_ratio"].mean()),
            "min_dihedral_deg": float(q["min_dihedral_deg"].min()),
            "max_dihedral_deg": float(q["max_dihedral_deg"].max()),
        }

    # ---- identity ---------------------------------------------------------------------------

    @cached_property
    def _hash(self) -> str:
        return mesh_hash(self.X, self.T)

    def hash(self) -> str:
        """Hex SHA-256 of the exact float64 node positions and int64 tets.

        This is the mesh identity that bake caches and models record (it *is*
        :func:`.cache.mesh_hash`); it survives a round trip through :func:`write_tetmesh` /
        :func:`read_tetmesh` and changes with any coordinate. ``n_surface_inputs`` is not part
        of it (it does not change the physics).
        """
        return self._hash


# --------------------------------------------------------------------------------------------
# Embedding
# --------------------------------------------------------------------------------------------


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
# surface validation
# --------------------------------------------------------------------------------------------

_FIX_CAGE = (
    "or simulate it through an embedding cage instead (tetrahedralize_embedded; in Blender "
    "'Use Embedding Cage'), which works for open and non-manifold render meshes"
)


def _edge_topology(F: np.ndarray):
    """Half-edges (3k, 2), undirected unique edges, half-edge -> edge map and edge counts."""
    he = F[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    edges, inv, cnt = _unique_rows(np.sort(he, axis=1))
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
    V = _as_points(V, "V")
    F = _as_faces(F, len(V))
    if len(F) < 4:
        raise MeshError(
            f"The surface has {len(F)} faces; a closed surface needs at least 4. "
            "Select the object's mesh, not an empty or a curve, and apply its modifiers."
        )
    diag = _bbox_diag(V)
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
            f"{_first(np.flatnonzero(rep))}). Fix: Mesh > Clean Up > Degenerate Dissolve, "
            "then Merge by Distance."
        )
    if zero.any():
        problems.append(
            f"{int(zero.sum())} zero-area (degenerate) faces, area below {min_area:g} x "
            f"bbox diagonal^2 (first faces: {_first(np.flatnonzero(zero))}). Fix: Mesh > Clean "
            "Up > Degenerate Dissolve (or Merge by Distance)."
        )

    # ---- vertices
    pairs = cKDTree(V).query_pairs(r=1e-9 * diag, output_type="ndarray")
    if len(pairs):
        problems.append(
            f"{len(pairs)} pairs of duplicate (coincident) vertices (first pairs: {_first(pairs)}): "
            "the surface is split along seams. Fix: Mesh > Clean Up > Merge by Distance."
        )
    used = np.zeros(len(V), dtype=bool)
    used[F.ravel()] = True
    if not used.all():
        loose = np.flatnonzero(~used)
        problems.append(
            f"{len(loose)} loose vertices not used by any face (first: {_first(loose)}). "
            "Fix: Mesh > Clean Up > Delete Loose."
        )

    # ---- faces and edges
    _, finv, fcnt = _unique_rows(np.sort(F, axis=1))
    dup_face = fcnt[finv] > 1
    if dup_face.any():
        problems.append(
            f"{int(dup_face.sum())} faces are duplicates of another face on the same vertices "
            f"(first faces: {_first(np.flatnonzero(dup_face))}). Fix: Mesh > Clean Up > Merge by "
            "Distance, or select the doubled faces and delete them."
        )
    he, edges, einv, ecnt = _edge_topology(F)
    open_e = edges[ecnt == 1]
    nonman = edges[ecnt > 2]
    if len(open_e):
        problems.append(
            f"{len(open_e)} open boundary edges (first vertex pairs: {_first(open_e)}): the surface "
            "has holes, so it does not enclose a volume. Fix: close the holes (select the "
            "boundary with Select > Select All by Trait > Non Manifold, then F or Grid Fill), "
            + _FIX_CAGE
            + "."
        )
    if len(nonman):
        problems.append(
            f"{len(nonman)} non-manifold edges shared by more than two faces (first vertex pairs: "
            f"{_first(nonman)}). Fix: separate the parts meeting there or dissolve the extra "
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
            f"faces: {_first(flipped)}). Fix: Mesh > Normals > Recalculate Outside (Shift+N)."
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
                f"pairs: {_first(hits)}). Fix: find them with the 3D-Print Toolbox 'Intersections' "
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


# --------------------------------------------------------------------------------------------
# tetrahedralization
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _native_stdout_to(log: list):
    """Send what native code prints on fd 1 into ``log`` instead of the terminal.

    TetGen's wrapper prints progress ("parsing switches", "success") with printf; in the worker
    process that would interleave with the JSON-lines event stream, and in Blender it is noise.
    POSIX only (on Windows the extension's C runtime cannot be flushed from here; output then
    simply goes to the console).
    """
    with _STDOUT_LOCK:  # fd 1 is process-wide: one redirection at a time
        try:
            fflush = ctypes.CDLL(None).fflush if os.name == "posix" else None
            saved = os.dup(1) if fflush is not None else None
        except (OSError, AttributeError):  # no libc symbol, or no fd 1 (a detached process)
            fflush = saved = None
        if saved is None:
            yield log
            return
        fflush.argtypes = [ctypes.c_void_p]
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        fflush(None)
        try:
            with tempfile.TemporaryFile() as tmp:
                os.dup2(tmp.fileno(), 1)
                try:
                    yield log
                finally:
                    fflush(None)
                    os.dup2(saved, 1)
                    tmp.seek(0)
                    log.append(tmp.read().decode("utf-8", "replace"))
        finally:
            os.close(saved)


def _match_inputs(X: np.ndarray, V: np.ndarray) -> np.ndarray | None:
    """Index of the node equal to each input vertex, or None if any is missing."""
    nV = len(V)
    if len(X) >= nV and np.array_equal(X[:nV], V):
        return np.arange(nV)  # TetGen keeps input points first, in order
    d, j = cKDTree(X).query(V, k=1)
    if (d > 0).any() or len(np.unique(j)) != nV:
        return None
    return j.astype(np.int64)


def tetrahedralize(
    V,
    F,
    *,
    max_volume: float | None = None,
    target_edge_length: float | None = None,
    quality: float | None = 1.5,
    min_dihedral: float | None = 10.0,
    keep_surface: bool = True,
    check: bool = True,
    max_elements: int = 5_000_000,
) -> TetMesh:
    """Fill a closed surface with tetrahedra (TetGen constrained Delaunay + quality refinement).

    Parameters
    ----------
    V : (n, 3) float array
        Surface vertices, metres.
    F : (k, 3) int array
        Surface triangles (closed, manifold, consistently oriented, not self-intersecting).
    max_volume : float, optional
        Largest allowed tet volume, m^3 (TetGen ``-a``).
    target_edge_length : float, optional
        Target edge length, m; becomes ``max_volume = l^3 / (6 sqrt 2)`` (the regular tet's
        volume). With both given the smaller volume wins.
    quality : float or None
        Largest allowed radius-edge ratio R / l_min (TetGen ``-q``); > 1.0, 1.2-2.0 is typical
        (regular tet: 0.612). None disables quality refinement.
    min_dihedral : float, optional
        Smallest allowed dihedral angle in degrees (TetGen ``-q#/#``); keep it below ~20.
        The default, 10, removes the slivers a radius-edge bound alone lets through (they
        make the stiffness matrix ill-conditioned); None disables it.
    keep_surface : bool
        Do not split the boundary (TetGen ``-Y``): the surface of the tet mesh is exactly
        ``F``. Because TetGen may not refine tets that lean on an unsplittable boundary triangle,
        ``max_volume`` and ``quality`` then hold only as far as the surface resolution allows;
        remesh the surface finer or pass ``keep_surface=False`` where they must hold everywhere.
    check : bool
        Run :func:`check_surface` first (strongly recommended: TetGen crashes the process on
        some invalid inputs).
    max_elements : int
        Refuse settings whose ``max_volume`` would ask for more tets than this.

    Returns
    -------
    TetMesh
        Positively oriented tets, no unused nodes. The input vertices are nodes
        ``0 .. len(V)-1`` in input order (``n_surface_inputs = len(V)``) whenever TetGen kept
        them all, which it always does with ``keep_surface``.
    """
    V = _as_points(V, "V")
    F = _as_faces(F, len(V))
    if check:
        check_surface(V, F)
    elif len(F) < 4:
        raise MeshError(f"The surface has {len(F)} faces; a closed surface needs at least 4.")

    if quality is not None and not (quality > 1.0):
        raise MeshError(
            f"quality={quality} is not a valid radius-edge bound: use a value above 1.0 "
            "(1.2-2.0 is typical; smaller values mean better tets and more of them)."
        )
    if min_dihedral is not None and not (0.0 <= min_dihedral <= 30.0):
        raise MeshError(
            f"min_dihedral={min_dihedral} degrees is out of range: use 0-30 (TetGen rarely "
            "terminates above ~20 degrees)."
        )
    vols = []
    if max_volume is not None:
        if not (max_volume > 0):
            raise MeshError(f"max_volume={max_volume} must be positive (m^3).")
        vols.append(float(max_volume))
    if target_edge_length is not None:
        if not (target_edge_length > 0):
            raise MeshError(f"target_edge_length={target_edge_length} must be positive (m).")
        vols.append(regular_tet_volume(target_edge_length))
    vmax = min(vols) if vols else None
    if vmax is not None:
        estimate = abs(enclosed_volume(V, F)) / vmax
        if estimate > max_elements:
            raise MeshError(
                f"max_volume={vmax:.3g} m^3 would ask for about {estimate:.3g} tets (limit "
                f"{max_elements}). Use a larger max volume / edge length; the object may also be "
                "in the wrong units (apply its scale: Ctrl+A > Scale)."
            )

    import tetgen  # lazy: only needed here

    kw = {
        "plc": True,
        "quality": quality is not None or min_dihedral is not None,
        "minratio": float(quality) if quality is not None else 2.0,
        "mindihedral": float(min_dihedral) if min_dihedral is not None else 0.0,
        "nobisect": bool(keep_surface),
        "fixedvolume": vmax is not None,  # TetGen ignores maxvolume without it ("-a#")
        "maxvolume": float(vmax) if vmax is not None else -1.0,
        # TetGen's final vertex smoothing moves nodes after refinement and breaks the volume and
        # radius-edge bounds by ~10 %; without it the bounds hold.
        "smooth_maxiter": 0,
        "quiet": True,
        "verbose": 0,
    }
    log: list[str] = []
    try:
        with _native_stdout_to(log):
            gen = tetgen.TetGen(V, F.astype(np.int32))
            nodes, elems = gen.tetrahedralize(**kw)[:2]
    except (RuntimeError, ValueError) as exc:
        text = str(exc)
        said = " ".join(line.strip() for line in "".join(log).splitlines() if line.strip())
        said = said.replace("parsing switches", "").replace("success", "").strip()
        hint = (
            "Run check_surface on it to see why, repair it, or use an embedding cage "
            "(tetrahedralize_embedded)."
        )
        if "self-intersect" in text.lower():
            hint = (
                "Find the intersecting faces with the 3D-Print Toolbox 'Intersections' check and "
                "separate or union the overlapping parts, or use an embedding cage "
                "(tetrahedralize_embedded). Save your work: a failed TetGen run can leave this "
                "process unstable."
            )
        raise MeshError(
            f"TetGen could not tetrahedralize the surface: {text}"
            + (f" (TetGen said: {said})" if said else "")
            + f". {hint}"
        ) from None

    X = np.asarray(nodes, dtype=np.float64)
    T = np.asarray(elems, dtype=np.int64)
    if T.ndim != 2 or T.shape[1] != 4 or len(T) == 0:
        raise MeshError(
            "TetGen returned no tetrahedra: the surface does not enclose a volume it can fill. "
            "Run check_surface on it, or use an embedding cage (tetrahedralize_embedded)."
        )
    T = _orient_positive(X, T)

    match = _match_inputs(X, V)
    if match is None:
        if keep_surface:
            raise MeshError(
                "TetGen merged or dropped some input vertices, so the render mesh cannot map one "
                "to one onto the tet mesh. Merge by Distance and Delete Loose, then try again."
            )
        X, T, _ = _drop_unused(X, T)
        return TetMesh(X, T, 0)
    rest = np.ones(len(X), dtype=bool)
    rest[match] = False
    perm = np.concatenate([match, np.flatnonzero(rest)])
    inv = np.empty(len(X), dtype=np.int64)
    inv[perm] = np.arange(len(X))
    X, T = X[perm], inv[T]
    X, T, _ = _drop_unused(X, T, keep_first=len(V))
    mesh = TetMesh(X, T, len(V))
    if keep_surface and len(mesh.boundary_faces()) != len(F):
        warnings.warn(
            f"TetGen split the boundary ({len(mesh.boundary_faces())} boundary triangles for "
            f"{len(F)} input faces) despite keep_surface; render faces no longer coincide with "
            "tet faces (vertices still do).",
            stacklevel=2,
        )
    return mesh


# --------------------------------------------------------------------------------------------
# point embedding
# --------------------------------------------------------------------------------------------


def _bary_in(P, x0, Dinv, tets):
    """Barycentric coordinates of points P (..., 3) in tets (...,): (..., 4)."""
    l123 = np.einsum("...ij,...j->...i", Dinv[tets], P - x0[tets])
    return np.concatenate([1.0 - l123.sum(-1, keepdims=True), l123], axis=-1)


def _closest_on_triangles(P, A, B, C):
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
    P = _as_points(P, "P")
    X, T = mesh.X, mesh.T
    r, m = len(P), mesh.n_elements
    x0 = X[T[:, 0]]
    Ds = _tet_edge_vectors(X, T)
    valid = ~_degenerate(X, T, _tet_det(X, T))
    Dinv = np.zeros_like(Ds)
    Dinv[valid] = np.linalg.inv(Ds[valid])
    diag = max(_bbox_diag(X), 1e-300)

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
            cl = _closest_on_triangles(Qk, tri[cf, 0], tri[cf, 1], tri[cf, 2])
            dk = np.linalg.norm(cl - Qk, axis=1).reshape(-1, kk).min(1)
            # any face closer than dk has its centroid within dk + frad: exact candidates
            own, cand = _ragged(ftree.query_ball_point(Q, r=dk + frad))
            cl = _closest_on_triangles(Q[own], tri[cand, 0], tri[cand, 1], tri[cand, 2])
            d = np.linalg.norm(cl - Q[own], axis=1)
            j = _segment_argmax(own, -d, len(pts))
            tt = owner_tet[cand[j]]
            tet[pts] = tt
            bary[pts] = _bary_in(Q, x0, Dinv, tt)
            dist[pts] = d[j]

    return Embedding(tet=tet, bary=bary, nodes=T[tet], n_nodes=mesh.n_vertices, distance=dist)


# --------------------------------------------------------------------------------------------
# embedding cage
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _bad_vertex_configs() -> np.ndarray:
    """For each of the 256 solid/empty patterns of the 8 voxels around a grid vertex: does the
    voxel boundary fail to be a manifold disk there?

    Voxel (dx, dy, dz) in {0,1}^3 is bit ``4 dx + 2 dy + dz``. The surface near the vertex is a
    disk iff the solid and the empty voxels are each face-connected within the block and no
    2x2 face of the block is a checkerboard (which would be a non-manifold grid edge).
    """
    bad = np.zeros(256, dtype=bool)
    nbrs = [[v ^ (1 << b) for b in range(3)] for v in range(8)]
    faces = []
    for axis in range(3):
        for val in (0, 1):
            cyc = []
            for u, w in ((0, 0), (0, 1), (1, 1), (1, 0)):
                d = [0, 0, 0]
                d[axis], d[(axis + 1) % 3], d[(axis + 2) % 3] = val, u, w
                cyc.append(4 * d[0] + 2 * d[1] + d[2])
            faces.append(cyc)

    def connected(members):
        if not members:
            return True
        seen, stack = {members[0]}, [members[0]]
        while stack:
            v = stack.pop()
            for w in nbrs[v]:
                if w in members and w not in seen:
                    seen.add(w)
                    stack.append(w)
        return len(seen) == len(members)

    for code in range(256):
        S = [v for v in range(8) if code >> v & 1]
        E = [v for v in range(8) if not code >> v & 1]
        if not S or not E:
            continue
        checker = any(
            (code >> f[0] & 1) == (code >> f[2] & 1) != (code >> f[1] & 1) == (code >> f[3] & 1)
            for f in faces
        )
        bad[code] = checker or not connected(S) or not connected(E)
    return bad


def _make_manifold(S: np.ndarray, max_iter: int = 100) -> np.ndarray:
    """Fill voxels until the boundary of the solid set ``S`` is a 2-manifold everywhere."""
    table = _bad_vertex_configs()
    for _ in range(max_iter):
        Sp = np.pad(S, 1)
        nx, ny, nz = Sp.shape
        code = np.zeros((nx - 1, ny - 1, nz - 1), dtype=np.uint8)
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    code |= Sp[dx : nx - 1 + dx, dy : ny - 1 + dy, dz : nz - 1 + dz].astype(
                        np.uint8
                    ) << np.uint8(4 * dx + 2 * dy + dz)
        bad = table[code]
        if not bad.any():
            return S
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    Sp[dx : nx - 1 + dx, dy : ny - 1 + dy, dz : nz - 1 + dz] |= bad
        S = Sp  # grew by one layer each side: keeps an empty margin for the next round
    raise MeshError(
        "Could not build a manifold embedding cage; try another cage resolution."
    )  # pragma: no cover - the fill is monotone and converges in a few rounds


def _voxel_boundary(S: np.ndarray):
    """Outward-oriented quads (q, 4) of grid-point indices bounding solid voxels, and the
    grid-point integer coordinates (g, 3). Grid point (i, j, k) is voxel (i, j, k)'s min corner."""
    Sp = np.pad(S, 1)  # grid point g of Sp is g - 1 of S
    quads = []
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[a], hi[a] = slice(0, -1), slice(1, None)
        s0, s1 = Sp[tuple(lo)], Sp[tuple(hi)]
        eb, ec = np.eye(3, dtype=np.int64)[b], np.eye(3, dtype=np.int64)[c]
        for mask, outward in ((s0 & ~s1, True), (~s0 & s1, False)):
            g = np.stack(np.nonzero(mask), axis=1).astype(np.int64)
            g[:, a] += 1  # the face lies on grid plane i+1 along axis a
            q = np.stack([g, g + eb, g + eb + ec, g + ec], axis=1)  # normal +e_a
            quads.append(q if outward else q[:, ::-1])
    Q = np.concatenate(quads)
    dims = np.array(Sp.shape, dtype=np.int64) + 1
    key = (Q[..., 0] * dims[1] + Q[..., 1]) * dims[2] + Q[..., 2]
    ukey, inv = np.unique(key.ravel(), return_inverse=True)
    G = np.stack([ukey // (dims[1] * dims[2]), (ukey // dims[2]) % dims[1], ukey % dims[2]], 1)
    return inv.reshape(-1, 4), G - 1


def _sample_surface(V: np.ndarray, F: np.ndarray, spacing: float) -> np.ndarray:
    """Points on the triangles no farther than ``spacing`` apart (plus the vertices)."""
    out = [V]
    if len(F) == 0:
        return V
    tri = V[F]
    emax = np.linalg.norm(tri - tri[:, [1, 2, 0]], axis=2).max(1)
    nsub = np.maximum(1, np.ceil(emax / spacing)).astype(np.int64)
    for n in np.unique(nsub):
        if n == 1:
            continue  # the vertices already are the samples
        i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        ok = i + j <= n
        w1, w2 = i[ok] / n, j[ok] / n
        w = np.stack([1 - w1 - w2, w1, w2], axis=1)  # (s, 3)
        t = tri[nsub == n]
        out.append(np.einsum("sk,tkd->tsd", w, t).reshape(-1, 3))
    return np.concatenate(out)


def build_cage(
    V, F, *, resolution: int = 24, padding: float = 0.02, smooth: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A watertight, manifold, outward-oriented triangle cage around any render mesh.

    The render surface (open, non-manifold, with loose parts, or just points) is voxelized,
    the voxel shell is dilated, the enclosed inside is filled (flood fill of the outside from
    the border), voxels are added until the solid's boundary is a 2-manifold everywhere (no
    edge- or corner-only contacts), and the boundary is emitted as voxel-face quads split in
    two triangles. Every render vertex ends up inside, at least one voxel from the cage surface.

    Parameters
    ----------
    V : (n, 3) float array
        Render vertices, metres.
    F : (k, 3) int array
        Render triangles (may be empty: the vertices are then a point cloud).
    resolution : int
        Voxels along the longest side of the bounding box.
    padding : float
        Minimum clearance between the render mesh and the cage, as a fraction of the bounding
        box diagonal; the shell is dilated by ``max(1 voxel, padding * diag)``.
    smooth : int
        Taubin smoothing iterations (lambda 0.5, mu -0.53) to round off the voxel stair-steps;
        0 keeps the exact voxel surface (always valid). Smoothing can shrink thin parts: the
        result is re-validated by :func:`tetrahedralize_embedded`.

    Returns
    -------
    Vc : (p, 3) float64 array
    Fc : (q, 3) int64 array
    """
    V = _as_points(V, "V")
    F = _as_faces(F, len(V))
    if len(V) == 0:
        raise MeshError("The render mesh has no vertices: nothing to build a cage around.")
    if int(resolution) < 2:
        raise MeshError(f"resolution={resolution}: use at least 2 voxels (16-64 is typical).")
    resolution = int(resolution)
    lo, hi = V.min(0), V.max(0)
    ext = hi - lo
    diag = float(np.linalg.norm(ext))
    if diag <= 0:
        raise MeshError("All render vertices coincide: a cage needs an object with some extent.")
    h = float(ext.max()) / resolution
    grow = max(1, math.ceil(padding * diag / h - 1e-9))
    margin = grow + 2
    n_in = np.floor(ext / h).astype(np.int64) + 1
    dims = n_in + 2 * margin
    # centre the grid on the object so the stair-steps are symmetric
    origin = (lo + hi) / 2 - dims * h / 2

    S = _sample_surface(V, F, 0.5 * h)
    idx = np.floor((S - origin) / h).astype(np.int64)
    idx = np.clip(idx, 0, dims - 1)
    grid = np.zeros(tuple(dims), dtype=bool)
    grid[idx[:, 0], idx[:, 1], idx[:, 2]] = True
    shell = ndimage.binary_dilation(grid, structure=np.ones((3, 3, 3), bool), iterations=grow)
    solid = ndimage.binary_fill_holes(shell)
    solid = _make_manifold(solid)
    pad = (solid.shape[0] - dims[0]) // 2  # _make_manifold may have padded the array
    quads, G = _voxel_boundary(solid)
    Vc = origin + (G - pad) * h
    Fc = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]]).astype(np.int64)

    if smooth:
        n = len(Vc)
        e = np.concatenate([Fc[:, [0, 1]], Fc[:, [1, 2]], Fc[:, [2, 0]]])
        A = sp.coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)).tocsr()
        A = ((A + A.T) > 0).astype(np.float64)
        Wm = sp.diags(1.0 / np.asarray(A.sum(1)).ravel()) @ A
        for _ in range(int(smooth)):
            for f in (0.5, -0.53):
                Vc = Vc + f * (Wm @ Vc - Vc)
    return Vc, Fc


def tetrahedralize_embedded(
    V,
    F,
    *,
    cage: tuple | None = None,
    resolution: int = 24,
    padding: float = 0.02,
    smooth: int = 0,
    **tet_kwargs,
) -> tuple[TetMesh, Embedding]:
    """Tetrahedralize an embedding cage and carry the render mesh by barycentric coordinates.

    For render meshes that cannot be tetrahedralized directly (open, non-manifold, several
    loose parts, self-intersecting, or just too dense).

    Parameters
    ----------
    V : (n, 3) float array
        Render vertices, metres.
    F : (k, 3) int array
        Render triangles (only used to build the cage).
    cage : (Vc, Fc), optional
        A closed cage surface given by the user; built with :func:`build_cage` when None.
    resolution, padding, smooth
        Passed to :func:`build_cage`.
    **tet_kwargs
        Passed to :func:`tetrahedralize` (``max_volume``, ``quality``, ...); for the cage
        ``keep_surface`` defaults to False and ``min_dihedral`` to 10 degrees.

    Returns
    -------
    mesh : TetMesh
        The tetrahedralized cage.
    embedding : Embedding
        Render vertex ``i`` is ``embedding.apply(x)[i]``.
    """
    V = _as_points(V, "V")
    if cage is None:
        Vc, Fc = build_cage(V, F, resolution=resolution, padding=padding, smooth=smooth)
    else:
        Vc, Fc = cage
    # The cage surface is no render surface, so let TetGen split it, and ask for a dihedral
    # bound: the many coplanar voxel faces otherwise leave flat slivers along the cage.
    tet_kwargs.setdefault("keep_surface", False)
    tet_kwargs.setdefault("min_dihedral", 10.0)
    mesh = tetrahedralize(Vc, Fc, **tet_kwargs)
    emb = embed_points(V, mesh)
    if emb.n_outside:
        far = float(emb.distance.max())
        if far > 1e-3 * _bbox_diag(mesh.X):
            warnings.warn(
                f"{emb.n_outside} render vertices lie outside the cage (up to {far:.3g} m); they "
                "follow by extrapolation. Enlarge the cage (padding) to enclose them.",
                stacklevel=2,
            )
    return mesh, emb


# --------------------------------------------------------------------------------------------
# I/O
# --------------------------------------------------------------------------------------------


def _meshio_module(suffix: str):
    import meshio  # lazy: only needed for file I/O

    return {".msh": meshio.gmsh, ".vtu": meshio.vtu, ".vtk": meshio.vtk}.get(suffix)


_SUPPORTED = ".npz, .msh (Gmsh 4.1), .vtu, .vtk"


def _atomic_target(path: Path) -> Path:
    return path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")


def write_tetmesh(path, mesh: TetMesh) -> None:
    """Write a tet mesh: ``.npz`` (ours, keeps ``n_surface_inputs`` and the hash), or through
    meshio ``.msh`` (Gmsh 4.1 binary), ``.vtu``, ``.vtk``. Coordinates are written as float64
    exactly. The file appears atomically (written beside it, then renamed).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    tmp = _atomic_target(path)
    try:
        if suffix == ".npz":
            with open(tmp, "wb") as f:
                np.savez(
                    f,
                    format=np.array(_NPZ_FORMAT),
                    version=np.array(_NPZ_VERSION, dtype=np.int64),
                    X=np.asarray(mesh.X),
                    T=np.asarray(mesh.T),
                    n_surface_inputs=np.array(mesh.n_surface_inputs, dtype=np.int64),
                    hash=np.array(mesh.hash()),
                )
        else:
            mod = _meshio_module(suffix)
            if mod is None:
                raise MeshError(f"Cannot write '{path.name}': use one of {_SUPPORTED}.")
            import meshio

            marker = (np.arange(mesh.n_vertices) < mesh.n_surface_inputs).astype(np.int32)
            m = meshio.Mesh(
                np.asarray(mesh.X),
                [("tetra", np.asarray(mesh.T))],
                point_data={_SURFACE_MARKER: marker},
            )
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod.write(str(tmp), m)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def read_tetmesh(path) -> TetMesh:
    """Read a tet mesh written by :func:`write_tetmesh` or by another tool (Gmsh, TetGen via
    meshio, ...). Tets are re-oriented positively and unused nodes (e.g. Gmsh geometry points)
    dropped; quadratic ``tetra10`` cells keep their corner nodes. ``n_surface_inputs`` survives
    ``.npz`` and, through a point-data marker, our own ``.msh``/``.vtu``/``.vtk``.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"No tet mesh file at '{path}'. Check the path (relative to the .blend?).")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            # our own file handle: np.load leaks its handle when the zip is truncated
            with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as d:
                if "X" not in d or "T" not in d:
                    raise MeshError(
                        f"'{path.name}' is not a Neural ROM tet mesh (no X/T arrays); "
                        "re-export it with write_tetmesh."
                    )
                X, T = np.array(d["X"]), np.array(d["T"])
                ns = int(d["n_surface_inputs"]) if "n_surface_inputs" in d else 0
                stored = str(d["hash"]) if "hash" in d else None
        except MeshError:
            raise
        except Exception as exc:  # noqa: BLE001 - zipfile, pickle refusal, truncation: all "bad file"
            raise MeshError(
                f"Cannot read '{path.name}' ({type(exc).__name__}: {exc}); the file is truncated "
                "or not an .npz written by write_tetmesh. Re-export it."
            ) from None
        if len(T) == 0:
            raise MeshError(f"'{path.name}' holds no tetrahedra. Tetrahedralize the surface first.")
        mesh = TetMesh(X, T, ns)
        if stored is not None and stored != mesh.hash():
            raise MeshError(
                f"'{path.name}' is corrupted: its content does not match the hash stored with it. "
                "Re-export it."
            )
        return mesh

    mod = _meshio_module(suffix)
    if mod is None:
        raise MeshError(f"Cannot read '{path.name}': use one of {_SUPPORTED}.")
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = mod.read(str(path))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - meshio even calls sys.exit() on bad files
        raise MeshError(
            f"Cannot read '{path.name}' as {suffix[1:]} ({type(exc).__name__}: {exc}). "
            "Is the file complete and in that format?"
        ) from None
    blocks = []
    for cb in m.cells:
        if cb.type in ("tetra", "tetra10"):  # tetra10: keep the corner nodes
            blocks.append(np.asarray(cb.data)[:, :4])
    if not blocks:
        kinds = sorted({cb.type for cb in m.cells}) or ["none"]
        raise MeshError(
            f"'{path.name}' has no tetrahedra (cell types: {', '.join(kinds)}). It is a surface "
            "or another kind of mesh: tetrahedralize it first (tetrahedralize), or export the "
            "volume cells from the tool that made it."
        )
    X = np.asarray(m.points, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 3:
        raise MeshError(f"'{path.name}' has {X.shape[1]}-D points; a tet mesh needs 3-D points.")
    T = np.concatenate(blocks).astype(np.int64)
    if T.min() < 0 or T.max() >= len(X):
        raise MeshError(f"'{path.name}' has tets that index missing nodes; the file is corrupted.")
    T = _orient_positive(X, T)
    ns = 0
    marker = m.point_data.get(_SURFACE_MARKER)
    X, T, new = _drop_unused(X, T)
    if marker is not None:
        marker = np.asarray(marker).reshape(-1)
        if len(marker) == len(new):
            kept = marker[new >= 0] != 0
            k = int(kept.sum())
            if kept[:k].all():  # the marker is a prefix: the first k nodes are surface inputs
                ns = k
    return TetMesh(X, T, ns)


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
