"""The tet mesh: :class:`TetMesh` (topology, geometry, quality, identity) and the array checks
every meshing module shares.

Meshing is split by concern; the pipeline a Blender object goes through::

    surface (V, F) --surface.check_surface--> ok --mesher.tetrahedralize--> TetMesh
    open / non-manifold render mesh --cage.build_cage--> watertight cage --mesher--> TetMesh
                                      + embedding.embed_points(render vertices) --> Embedding
    TetMesh <--meshfile.write_tetmesh / read_tetmesh--> .npz, .msh, .vtu, .vtk

Everything here is numpy + scipy. Units are SI: positions in metres, volumes in m^3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..data.files import mesh_hash
from ..errors import MeshError

__all__ = [
    "TetMesh",
    "as_faces",
    "as_points",
    "bbox_diagonal",
    "degenerate_tets",
    "drop_unused_nodes",
    "first_indices",
    "orient_positive",
    "regular_tet_volume",
    "unique_rows",
]

# Outward faces of a positively oriented tet (x0, x1, x2, x3): row i is the face opposite vertex i.
_TET_FACES = np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]], dtype=np.int64)
# The six edges of a tet, and for each the pair of faces (by opposite vertex) that meet on it.
_TET_EDGES = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]], dtype=np.int64)
_EDGE_FACE_PAIRS = np.array([[2, 3], [1, 3], [1, 2], [0, 3], [0, 2], [0, 1]], dtype=np.int64)

_SHOW = 5  # how many offending indices an error message lists

# --------------------------------------------------------------------------------------------
# array checks shared by the meshing modules
# --------------------------------------------------------------------------------------------


def first_indices(a, n: int = _SHOW) -> str:
    """Render the first few rows of an index array for an error message."""
    a = np.asarray(a)
    items = [tuple(int(v) for v in r) if np.ndim(r) else int(r) for r in a[:n]]
    more = ", ..." if len(a) > n else ""
    return ", ".join(str(i) for i in items) + more


def bbox_diagonal(V: np.ndarray) -> float:
    """Length of the bounding-box diagonal of points ``V`` (n, 3), metres; 0 for no points."""
    if len(V) == 0:
        return 0.0
    return float(np.linalg.norm(V.max(0) - V.min(0)))


def as_points(P, name: str = "V") -> np.ndarray:
    """``P`` as an (n, 3) float64 array of finite coordinates; :class:`MeshError` (naming
    ``name``) otherwise."""
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
            f"(first: {first_indices(np.flatnonzero(bad))}). Fix the modifier, driver or transform that "
            "produced them (apply it and look for exploding values), then try again."
        )
    return P


def as_faces(F, n_vertices: int) -> np.ndarray:
    """``F`` as a (k, 3) int64 array of triangles indexing ``0 .. n_vertices-1``;
    :class:`MeshError` otherwise."""
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
            f"(first faces: {first_indices(bad)}). The face and vertex arrays do not belong together."
        )
    return F


def unique_rows(A: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique rows of an integer (p, c) array, the inverse map (p,) and the counts."""
    if len(A) == 0:
        return A.reshape(0, A.shape[1]), np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, inv, cnt = np.unique(A, axis=0, return_inverse=True, return_counts=True)
    return u, inv.reshape(-1), cnt


def regular_tet_volume(edge_length: float) -> float:
    """Volume of the regular tetrahedron with the given edge (m -> m^3): ``l^3 / (6 sqrt 2)``."""
    return float(edge_length) ** 3 / (6.0 * math.sqrt(2.0))


def _tet_det(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """det(Ds) = 6 * signed volume, shape (m,)."""
    x0 = X[T[:, 0]]
    a, b, c = X[T[:, 1]] - x0, X[T[:, 2]] - x0, X[T[:, 3]] - x0
    return np.einsum("ij,ij->i", a, np.cross(b, c))


def degenerate_tets(X: np.ndarray, T: np.ndarray, det: np.ndarray | None = None) -> np.ndarray:
    """Which tets are flat to rounding, (m,) bool, judged against their own size (meshes can
    span many scales). ``det``: their :func:`_tet_det` when already computed."""
    if det is None:
        det = _tet_det(X, T)
    lmax = np.linalg.norm(X[T[:, _TET_EDGES[:, 1]]] - X[T[:, _TET_EDGES[:, 0]]], axis=2).max(1)
    return np.abs(det) <= 1e-12 * lmax**3


def orient_positive(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Tets ``T`` (m, 4) with two vertices of every negatively oriented one swapped;
    :class:`MeshError` on degenerate ones."""
    det = _tet_det(X, T)
    degenerate = degenerate_tets(X, T, det)
    if degenerate.any():
        raise MeshError(
            f"{int(degenerate.sum())} of {len(T)} tetrahedra have zero volume (first: "
            f"{first_indices(np.flatnonzero(degenerate))}). Re-tetrahedralize with a quality bound "
            "(tetrahedralize(..., quality=1.5)) or repair the volume mesh in the tool that made it."
        )
    T = T.copy()
    neg = det < 0
    T[neg] = T[neg][:, [0, 2, 1, 3]]
    return T


def drop_unused_nodes(
    X: np.ndarray, T: np.ndarray, keep_first: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        X = as_points(self.X, "TetMesh.X") + 0.0  # a copy, with -0.0 folded into 0.0 for the hash
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
        _, inv, cnt = unique_rows(np.sort(faces, axis=1))
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
        :func:`.files.mesh_hash`); it survives a round trip through
        :func:`.meshfile.write_tetmesh` / :func:`.meshfile.read_tetmesh` and changes with any
        coordinate. ``n_surface_inputs`` is not part
        of it (it does not change the physics).
        """
        return self._hash
