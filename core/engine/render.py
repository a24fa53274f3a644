"""Positions to the render mesh: world tet-node positions to the object's local render
vertices (its surface nodes, or the points of an embedding in a cage), and the local/world
transforms a frame's inputs and its mesh write use.
"""

from __future__ import annotations

import math

import numpy as np

from ..reduced.pose import transform_points


def to_world(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(n, 3) points through a (4, 4) matrix."""
    m = np.asarray(matrix, dtype=np.float64)
    return transform_points(points, m[:3, :3], m[:3, 3])


def to_local(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(n, 3) world points through the inverse of a (4, 4) local-to-world matrix."""
    return to_world(points, np.linalg.inv(np.asarray(matrix, dtype=np.float64)))


def to_local_shown(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(n, 3) float32 local positions of (n, 3) world points: :func:`to_local` for a mesh
    write, within float32's rounding of it (the walking cape's frame: 8 -> 3 us). The
    3x3 inverse is its adjugate on Python floats (``np.linalg.inv`` of a 4x4 cost 4 us), the
    product in float64, then one cast; a singular or non-finite matrix goes to
    :func:`to_local` (which raises as it did)."""
    (a, b, c, tx), (d, e, f, ty), (g, h, i, tz) = np.asarray(matrix, np.float64)[:3].tolist()
    A, B, C = e * i - f * h, f * g - d * i, d * h - e * g
    det = a * A + b * B + c * C
    if not (det != 0.0 and math.isfinite(det)):
        return to_local(points, matrix).astype(np.float32)
    s = 1.0 / det
    # the inverse's transpose (the product's right operand), rows: its columns
    inv_t = np.array(
        [
            [A * s, B * s, C * s],
            [(c * h - b * i) * s, (a * i - c * g) * s, (b * g - a * h) * s],
            [(b * f - c * e) * s, (c * d - a * f) * s, (a * e - b * d) * s],
        ]
    )
    out = np.asarray(points, dtype=np.float64) @ inv_t
    out -= (tx, ty, tz) @ inv_t
    return out.astype(np.float32)


def render_local(
    P: np.ndarray, matrix_world: np.ndarray, n_surface: int, embedding=None
) -> np.ndarray:
    """(r, 3) render-vertex local positions of (n, 3) world tet-node positions ``P``: the
    first ``n_surface`` nodes (float32, :func:`to_local_shown`), or the points of
    ``embedding`` (:class:`.embedding.Embedding`)."""
    if embedding is not None:
        # barycentric rows sum to 1, so the affine map commutes with the embedding:
        # transform the (few) cage nodes rather than the (many) render vertices
        return embedding.matrix @ to_local(P, matrix_world)
    return to_local_shown(np.asarray(P)[:n_surface], matrix_world)  # float32: as written


def read_render_map(spec: dict, n_nodes: int | None = None):
    """``(X_local, n_surface, embedding)`` of a job spec's ``tets`` and ``embedding`` files:
    the object's local tet nodes and how the render mesh rides on them. A spec without
    ``tets`` is of a model whose ``n_nodes`` vertices are the mesh's own (a cloth model):
    ``(None, n_nodes, None)``."""
    from ..data.meshfile import read_tetmesh
    from ..geometry.embedding import Embedding

    if not spec.get("tets"):
        return None, int(n_nodes or 0), None
    mesh = read_tetmesh(spec["tets"])
    emb = None
    if spec.get("embedding"):
        with np.load(spec["embedding"], allow_pickle=False) as z:
            emb = Embedding.from_arrays({k: z[k] for k in z.files})
    return np.asarray(mesh.X, dtype=np.float64), int(mesh.n_surface_inputs), emb
