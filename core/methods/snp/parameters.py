"""What a trained Subspace Neural Physics model holds: the encoder of the external state
(:class:`ExternalEncoder`), the parameters (:class:`SNPParameters`) and eq. (1) of Holden
2019 (:func:`initial_model`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import SimulationError
from ...kinds.cloth.source import rigid
from ...reduced.nnet import MLP
from .features import COLLIDER_FEATURES, FAR_DIAGONALS, FRAME_FEATURES
from .sweep import CONTACT_FEATURES


@dataclass
class ExternalEncoder:
    """External features ``f`` (e,) -> network input ``w`` (v,): clip to the training range
    (sec. 8.1), standardize, keep the features that varied, rotate by their PCA (sec. 5.1).

    Attributes
    ----------
    lo, hi : (e,) clipping range
    mean, sd : (e,) statistics of the training features (sd 1 where a feature is dropped)
    keep : (e',) indices of the features that varied
    V : (v, e') PCA rows of the standardized kept features
    """

    lo: np.ndarray
    hi: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    keep: np.ndarray
    V: np.ndarray

    def __post_init__(self) -> None:
        self.keep = np.asarray(self.keep, dtype=np.int64)
        V = np.asarray(self.V, dtype=np.float64)
        # (0, 0) when no feature varied (a static ground, no pins): the network sees the state
        self.V = V if V.ndim == 2 else V.reshape(-1, len(self.keep))
        # w = V_s f_keep - offset, one product per frame
        self._Vs = self.V / np.asarray(self.sd, float)[self.keep]
        self._offset = self._Vs @ np.asarray(self.mean, float)[self.keep]

    @property
    def size(self) -> int:
        return int(self.V.shape[0])

    def encode(self, f: np.ndarray) -> np.ndarray:
        """``w`` (v,) or (F, v) of features ``f`` (e,) or (F, e)."""
        f = np.minimum(np.maximum(f, self.lo), self.hi)
        return f[..., self.keep] @ self._Vs.T - self._offset

    def to_arrays(self, prefix: str = "external.") -> dict:
        return {
            prefix + k: np.asarray(getattr(self, k))
            for k in ("lo", "hi", "mean", "sd", "keep", "V")
        }

    @classmethod
    def from_arrays(cls, a: dict, prefix: str = "external.") -> ExternalEncoder:
        return cls(**{k: a[prefix + k] for k in ("lo", "hi", "mean", "sd", "keep", "V")})


@dataclass
class SNPParameters:
    """Everything a trained model holds (the model file's arrays and metadata).

    Attributes
    ----------
    X : (n, 3) rest positions (m, world as baked)
    mean : (n, 3) mean pose ``y_mu`` in the reference frame (m)
    U : (3n, u) orthonormal PCA basis
    alpha, beta : (u,) the initial model (eq. 1-2)
    z_lo, z_hi : (u,) output clipping range (sec. 8.1)
    scale : ``s``, m (see the module docstring)
    encoder : the external state's encoder
    net : the residual network Phi (in: 2u + v, out: u); None runs eq. (1) alone
    sizes : (c, 2) radius and half length of each collider slot, m
    kinds : the collider kind of each slot
    pinned : (p,) pinned vertices, whose rigid motion is the reference frame
    triangles : (t, 3) surface triangles (a cloth's faces, fanned), or None
    reference_rest : (4, 4) rigid world transform of the driving reference frame at rest (a
        cloth's owner, :mod:`core.clothbake`), or None: the frame is the pins' rigid motion.
        With it the frame of a step is ``M_t M_rest^-1`` for the frame's
        ``FrameInputs.reference_frame`` ``M_t`` (its scale divided out)
    input_scale : (u,) per-mode scales of the network's state inputs (``z / input_scale``;
        the ``mode_scaling`` setting), or None: ``scale`` for every mode
    contact : the features end with each collider's contact features
        (:func:`contact_features`; the ``contact_features`` setting)
    frame_origin : (3,) rest coordinates of the point whose velocity and acceleration are
        the frame's features (:func:`frame_features`; the rest centre), or None: the frame's
        origin (models trained before it was added)
    normal_mean, normal_basis : (3n,), (3n, u) float32: the linear normal model (sec. 6.3),
        vertex normals in the reference frame ``n_mu + Q z`` before normalizing, or None
    """

    X: np.ndarray
    mean: np.ndarray
    U: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    z_lo: np.ndarray
    z_hi: np.ndarray
    scale: float
    encoder: ExternalEncoder
    net: MLP | None
    sizes: np.ndarray
    kinds: list
    pinned: np.ndarray
    reference_rest: np.ndarray | None = None
    triangles: np.ndarray | None = None
    normal_mean: np.ndarray | None = None
    normal_basis: np.ndarray | None = None
    frame_origin: np.ndarray | None = None
    input_scale: np.ndarray | None = None
    contact: bool = False

    def __post_init__(self) -> None:
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        n = len(self.X)
        self.mean = np.ascontiguousarray(self.mean, dtype=np.float64).reshape(n, 3)
        self.U = np.ascontiguousarray(self.U, dtype=np.float64)
        if self.U.ndim != 2 or self.U.shape[0] != 3 * n:
            raise SimulationError(f"Basis has shape {self.U.shape}; expected ({3 * n}, u).")
        u = self.U.shape[1]
        for name in ("alpha", "beta", "z_lo", "z_hi"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64).reshape(u))
        self.sizes = np.asarray(self.sizes, dtype=np.float64).reshape(-1, 2)
        self.pinned = np.asarray(self.pinned, dtype=np.int64).reshape(-1)
        self.kinds = [str(k) for k in self.kinds]
        self.scale = float(self.scale)
        if self.reference_rest is not None:
            self.reference_rest = rigid(np.asarray(self.reference_rest).reshape(4, 4))
        if self.triangles is not None:
            self.triangles = np.asarray(self.triangles, dtype=np.int64).reshape(-1, 3)
        if self.frame_origin is not None:
            self.frame_origin = np.asarray(self.frame_origin, dtype=np.float64).reshape(3)
        if self.input_scale is not None:
            self.input_scale = np.asarray(self.input_scale, dtype=np.float64).reshape(u)
        if (self.normal_mean is None) != (self.normal_basis is None):
            raise SimulationError("The linear normal model needs both its mean and its basis.")
        if self.normal_basis is not None:
            # float32: a product of the basis' size per frame, at half the memory traffic
            self.normal_mean = np.ascontiguousarray(self.normal_mean, np.float32).reshape(-1)
            self.normal_basis = np.ascontiguousarray(self.normal_basis, np.float32)
            if self.normal_basis.shape != self.U.shape or len(self.normal_mean) != 3 * n:
                raise SimulationError(
                    f"The linear normal model has shape {self.normal_basis.shape} and "
                    f"{len(self.normal_mean)} means; the basis is {self.U.shape}."
                )
        if self.net is not None and (
            self.net.in_dim != 2 * u + self.encoder.size or self.net.out_dim != u
        ):
            raise SimulationError(
                f"The network takes {self.net.in_dim} inputs and gives {self.net.out_dim}; "
                f"a model of {u} modes and {self.encoder.size} external coordinates needs "
                f"{2 * u + self.encoder.size} and {u}."
            )

    @property
    def u(self) -> int:
        return int(self.U.shape[1])

    @property
    def n_features(self) -> int:
        per = COLLIDER_FEATURES + (CONTACT_FEATURES if self.contact else 0)
        return FRAME_FEATURES + per * len(self.sizes)

    def far_transform(self) -> np.ndarray:
        """The (4, 4) transform, in the reference frame, of a collider the frame lacks."""
        M = np.eye(4)
        lo, hi = self.X.min(0), self.X.max(0)
        M[:3, 3] = 0.5 * (lo + hi) + np.array([0.0, 0.0, FAR_DIAGONALS * np.linalg.norm(hi - lo)])
        return M

    def to_arrays(self) -> tuple[dict, dict]:
        arrays = {
            "X": self.X,
            "mean": self.mean,
            "U": self.U,
            "alpha": self.alpha,
            "beta": self.beta,
            "z_lo": self.z_lo,
            "z_hi": self.z_hi,
            "collider_sizes": self.sizes,
            "pinned": self.pinned,
            **self.encoder.to_arrays(),
        }
        if self.reference_rest is not None:
            arrays["reference_rest"] = self.reference_rest
        if self.triangles is not None:
            arrays["triangles"] = self.triangles
        if self.frame_origin is not None:
            arrays["frame_origin"] = self.frame_origin
        if self.input_scale is not None:
            arrays["input_scale"] = self.input_scale
        if self.normal_basis is not None:
            arrays["normal_mean"] = self.normal_mean
            arrays["normal_basis"] = self.normal_basis
        meta = {"scale": self.scale, "collider_kinds": self.kinds, "network": None}
        if self.contact:
            meta["contact_features"] = True
        if self.net is not None:
            net_arrays, meta["network"] = self.net.to_arrays(prefix="net.")
            arrays.update(net_arrays)
        return arrays, meta

    @classmethod
    def from_arrays(cls, a: dict, meta: dict) -> SNPParameters:
        net = None if meta.get("network") is None else MLP.from_arrays(a, meta["network"])
        return cls(
            X=a["X"],
            mean=a["mean"],
            U=a["U"],
            alpha=a["alpha"],
            beta=a["beta"],
            z_lo=a["z_lo"],
            z_hi=a["z_hi"],
            scale=meta["scale"],
            encoder=ExternalEncoder.from_arrays(a),
            net=net,
            sizes=a["collider_sizes"],
            kinds=meta["collider_kinds"],
            pinned=a["pinned"],
            reference_rest=a.get("reference_rest"),
            triangles=a.get("triangles"),
            normal_mean=a.get("normal_mean"),
            normal_basis=a.get("normal_basis"),
            frame_origin=a.get("frame_origin"),
            input_scale=a.get("input_scale"),
            contact=bool(meta.get("contact_features", False)),
        )


def initial_model(z1: np.ndarray, z2: np.ndarray, alpha: np.ndarray, beta: np.ndarray):
    """``z_bar = alpha z_{t-1} + beta (z_{t-1} - z_{t-2})``, eq. (1) of Holden 2019."""
    return alpha * z1 + beta * (z1 - z2)
