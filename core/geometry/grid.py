"""Structured tet meshes of boxes: test beams, benchmark bars and demo shapes."""

from __future__ import annotations

import numpy as np

# Kuhn (Freudenthal) split of the unit cube into 6 tets sharing the diagonal 0-7; corners
# are numbered i + 2 j + 4 k. Neighbouring cubes split their shared faces the same way, so
# the mesh is conforming.
_KUHN = np.array(
    [[0, 1, 3, 7], [0, 3, 2, 7], [0, 2, 6, 7], [0, 6, 4, 7], [0, 4, 5, 7], [0, 5, 1, 7]]
)


def grid_tetmesh(
    size: tuple[float, float, float] = (1.0, 1.0, 1.0),
    divisions: tuple[int, int, int] = (4, 4, 4),
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> tuple[np.ndarray, np.ndarray]:
    """A box of ``6 * nx * ny * nz`` positively oriented tets.

    Parameters
    ----------
    size : (3,) float
        Box extent, metres.
    divisions : (3,) int
        Cells along x, y, z.
    origin : (3,) float
        Minimum corner, metres.

    Returns
    -------
    X : ((nx+1)(ny+1)(nz+1), 3) float array
    T : (6 nx ny nz, 4) int array
    """
    nx, ny, nz = (int(d) for d in divisions)
    if min(nx, ny, nz) < 1:
        raise ValueError("grid_tetmesh needs at least one cell along each axis.")
    axes = [np.linspace(o, o + s, d + 1) for o, s, d in zip(origin, size, (nx, ny, nz))]
    gx, gy, gz = np.meshgrid(*axes, indexing="ij")
    X = np.stack([gx.ravel(), gy.ravel(), gz.ravel()], axis=1)

    def vid(i, j, k):
        return (i * (ny + 1) + j) * (nz + 1) + k

    i, j, k = np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij")
    i, j, k = i.ravel(), j.ravel(), k.ravel()
    corners = np.stack(
        [vid(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1)) for c in range(8)], axis=1
    )
    T = corners[:, _KUHN].reshape(-1, 4)
    # orient positively
    D = X[T[:, 1:]] - X[T[:, :1]]
    neg = np.linalg.det(D) < 0
    T[neg] = T[neg][:, [0, 2, 1, 3]]
    return X, T.astype(np.int64)


def grid_for_tet_count(
    target_tets: int, aspect: tuple[float, float, float] = (4.0, 1.0, 1.0), length: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """A bar of about ``target_tets`` tets with the given aspect ratio, ``length`` metres long."""
    a = np.asarray(aspect, dtype=float)
    cells = target_tets / 6.0
    h = (np.prod(a) / cells) ** (1.0 / 3.0)
    div = np.maximum(1, np.round(a / h)).astype(int)
    size = a / a[0] * length
    return grid_tetmesh(tuple(size), tuple(div))
