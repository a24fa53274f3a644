"""Vertex normals of a Subspace Neural Physics model: the linear normal model (Holden 2019,
sec. 6.3; :func:`linear_normals`) and the normals of a triangle mesh (:class:`VertexNormals`)."""

from __future__ import annotations

import numpy as np

from ...reduced.pose import IDENTITY, Pose


def linear_normals(mean: np.ndarray, Q: np.ndarray, z: np.ndarray, poses: list[Pose]) -> np.ndarray:
    """(B, n, 3) unit world vertex normals by the linear normal model (Holden 2019, sec. 6.3):
    ``R (n_mu + Q z)`` normalized, in float32, for B states ``z`` (B, u) in the frames
    ``poses``. The least-squares map from the PCA state to the training frames' normals
    (:func:`training.snp.fit_normal_model`); what it costs against recomputing them from the
    triangles, and how far apart the two are, is measured in bench/snp_cloth.py and
    tests/test_snp_cloth.py."""
    z = np.asarray(z, dtype=np.float32)
    N = (z @ Q.T + mean).reshape(len(z), -1, 3)
    for b, pose in enumerate(poses):
        if pose is not IDENTITY and not pose.is_identity:
            N[b] = N[b] @ pose.R.T.astype(np.float32)
    length = np.sqrt(np.einsum("bij,bij->bi", N, N))
    np.maximum(length, np.float32(1e-30), out=length)
    N /= length[..., None]
    return N


class VertexNormals:
    """Area-weighted vertex normals of a triangle mesh, recomputed per frame: the triangles'
    cross products (twice their area times their normal) summed onto their vertices by one
    precomputed sparse product, then normalized.

    Parameters
    ----------
    triangles : (t, 3) int array; n : number of vertices
    """

    def __init__(self, triangles: np.ndarray, n: int) -> None:
        import scipy.sparse as sp

        self.tri = np.ascontiguousarray(triangles, dtype=np.int64).reshape(-1, 3)
        t = len(self.tri)
        rows = self.tri.reshape(-1)
        cols = np.repeat(np.arange(t), 3)
        self.S = sp.csr_matrix((np.ones(3 * t), (rows, cols)), shape=(int(n), t))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        a, b, c = x[self.tri[:, 0]], x[self.tri[:, 1]], x[self.tri[:, 2]]
        N = self.S @ np.cross(b - a, c - a)
        length = np.sqrt(np.einsum("ij,ij->i", N, N))
        return N / np.maximum(length, 1e-300)[:, None]
