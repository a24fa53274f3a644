"""What an active-face model file holds (:class:`ActiveModel`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...data.files import mesh_hash
from ...geometry.embedding import Embedding
from ...physics.fem import Material
from ...reduced.nnet import MLP


@dataclass(eq=False)
class ActiveModel:
    """What an active-face model file holds.

    Attributes
    ----------
    X, T : rest nodes (n, 3) and tets (m, 4) of the flesh
    material : Material (shape targeting)
    fixed, jaw_nodes : (f,), (j,) int arrays: skull and jaw nodes
    jaw_pivot, jaw_axis : (3,) the hinge (for a jaw angle instead of a transform)
    skin : Embedding of the skin vertices
    decoder : MLP, latent (d,) -> actions (6 m,)
    codes : (N, d) the training shapes' latent codes (slider ranges, defaults; with a blend
        of keys each refitted through it, so a key's code shows the key)
    lift : (3 f_free, 3 j) the jaw lift ``G``
    U : (3 f_free, r) the reduced basis on the free DOFs
    cub_elements, cub_weights : (k,) the reduced solve's cubature (empty: every element)
    jaw_scale : the decoder's last input is the jaw angle (rad) times ``jaw_scale``; 0: the
        decoder takes the code alone (models before the jaw input)
    detail : (3 s, d + 2) the skin's detail layer: per skin vertex offsets linear in the
        code, the jaw's hinge angle (rad) and a constant, ``D [z, angle, 1]``, added to the
        embedded flesh (empty: none). Fitted to what the physical equilibria leave of the
        training keys, so the skin's space contains what the keys span; contact, the jaw's
        turn and volume stay the solve's
    blend : (3 s, d + 2) the skin's linear part ``L [z, angle, 1]`` (empty: none). When
        present the skin shown is that blend of the keys plus the physics' change from
        contact, ``P (chi_c - chi_0)`` (the equilibrium with the colliders minus the one
        without, both at the code and the jaw): with nothing touching it is exactly linear
        in the code and the jaw angle and contains the keys' span (a held-out blend of the
        keys is reproduced as by a PCA of them), and the flesh is solved only on frames
        where something touches it. Fitted by least squares to the training keys and the
        rest face at their codes (:func:`fit_detail` with no flesh). The detail layer is
        then unused
    """

    X: np.ndarray
    T: np.ndarray
    material: Material
    fixed: np.ndarray
    jaw_nodes: np.ndarray
    jaw_pivot: np.ndarray
    jaw_axis: np.ndarray
    skin: Embedding
    decoder: MLP
    codes: np.ndarray
    lift: np.ndarray
    U: np.ndarray
    cub_elements: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cub_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    jaw_scale: float = 0.0
    detail: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    blend: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    @property
    def blends(self) -> bool:
        """Whether the skin is the keys' blend plus contact (:attr:`blend`)."""
        return bool(self.blend.size)

    @property
    def latent_dim(self) -> int:
        return self.decoder.in_dim - (1 if self.jaw_scale else 0)

    @property
    def constrained(self) -> np.ndarray:
        return np.concatenate([self.fixed, self.jaw_nodes])

    def _hinge_cross(self) -> np.ndarray:
        """The cross-product matrix (3, 3) of the unit hinge axis."""
        a = self.jaw_axis / np.linalg.norm(self.jaw_axis)
        return np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])

    def jaw_matrix(self, angle: float) -> np.ndarray:
        K = self._hinge_cross()
        R = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * (K @ K)
        M = np.eye(4)
        M[:3, :3], M[:3, 3] = R, self.jaw_pivot - R @ self.jaw_pivot
        return M

    def boundary(self, jaw=None) -> np.ndarray:
        """Constrained positions (c, 3) for a jaw 4x4 transform or angle (None: closed)."""
        M = (
            np.eye(4)
            if jaw is None
            else (self.jaw_matrix(float(jaw)) if np.ndim(jaw) == 0 else np.asarray(jaw, float))
        )
        J = self.X[self.jaw_nodes] @ M[:3, :3].T + M[:3, 3]
        return np.concatenate([self.X[self.fixed], J])

    def boundary_rate(self, angle: float) -> np.ndarray:
        """``d boundary / d angle`` (c, 3) of the jaw opened ``angle`` rad about its hinge
        (zero on the skull's rows): ``K R (X - pivot)``, ``K`` the hinge axis' cross matrix."""
        K = self._hinge_cross()
        R = self.jaw_matrix(angle)[:3, :3]
        out = np.zeros((len(self.fixed) + len(self.jaw_nodes), 3))
        out[len(self.fixed) :] = (self.X[self.jaw_nodes] - self.jaw_pivot) @ (K @ R).T
        return out

    def jaw_angle(self, jaw=None) -> float:
        """The hinge angle (rad) of a jaw 4x4 transform (its rotation about ``jaw_axis``), an
        angle, or None (closed)."""
        if jaw is None:
            return 0.0
        if np.ndim(jaw) == 0:
            return float(jaw)
        R = np.asarray(jaw, float)[:3, :3]
        a = self.jaw_axis / np.linalg.norm(self.jaw_axis)
        s = 0.5 * a @ np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
        return float(np.arctan2(s, 0.5 * (np.trace(R) - 1.0)))

    def decoder_input(self, z, jaw=None) -> np.ndarray:
        """The decoder's input: the code, and the scaled jaw angle when the model takes it."""
        z = np.asarray(z, float).reshape(-1)
        if not self.jaw_scale:
            return z
        return np.append(z, self.jaw_scale * self.jaw_angle(jaw))

    def actions(self, z: np.ndarray, jaw=None) -> np.ndarray:
        """Per-element actions (m, 6) of code ``z`` with the jaw at ``jaw`` (transform, angle
        or None: closed)."""
        return self.decoder.forward(self.decoder_input(z, jaw)).reshape(-1, 6)

    def detail_input(self, z, jaw=None) -> np.ndarray:
        """The detail layer's input ``[z, angle, 1]`` (d + 2,) of code ``z`` and ``jaw``."""
        return np.concatenate([np.asarray(z, float).reshape(-1), [self.jaw_angle(jaw), 1.0]])

    def detail_offsets(self, z, jaw=None) -> np.ndarray | float:
        """The detail layer's skin offsets (s, 3) of code ``z`` and ``jaw`` (0 without one)."""
        if not self.detail.size:
            return 0.0
        return (self.detail @ self.detail_input(z, jaw)).reshape(-1, 3)

    def detail_rates(self, rows=None) -> np.ndarray:
        """``d offsets / d (z, angle)`` (3 s, d + 1) of the detail layer (its rows ``rows``
        of the flattened skin when given; zeros without a layer)."""
        if not self.detail.size:
            n = 3 * self.skin.matrix.shape[0] if rows is None else len(rows)
            return np.zeros((n, self.latent_dim + 1))
        D = self.detail if rows is None else self.detail[rows]
        return D[:, :-1]

    def blend_skin(self, z, jaw=None, rows=None) -> np.ndarray:
        """The skin's linear part ``L [z, angle, 1]`` (s, 3) (its rows ``rows`` of the
        flattened skin, flat, when given)."""
        L = self.blend if rows is None else self.blend[rows]
        out = L @ self.detail_input(z, jaw)
        return out if rows is not None else out.reshape(-1, 3)

    def skin_of(self, x, z, jaw=None) -> np.ndarray:
        """The skin (s, 3) of flesh nodes ``x`` solved for code ``z`` and ``jaw`` without
        contact: the embedded flesh plus the detail layer, or the keys' blend
        (:attr:`blend`; ``x`` unused)."""
        if self.blends:
            return self.blend_skin(z, jaw)
        return self.skin.apply(x) + self.detail_offsets(z, jaw)

    def hash(self) -> str:
        return mesh_hash(self.X, self.T)
