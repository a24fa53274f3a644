"""Analytic colliders (plane, sphere, capsule) and their penalty contact energy.

A collider is a shape in its own frame plus a world transform (a 4x4 matrix, as Blender's
``matrix_world``), which may change every frame. Contact is a one-sided quadratic penalty
on the signed distance of the mesh's surface vertices::

    C(x) = sum_i  kappa * m_i / 2 * max(0, d_hat - phi(x_i))^2

with ``phi`` the signed distance to the collider surface (positive outside), ``m_i`` the
lumped vertex mass and ``kappa`` a stiffness in 1/s^2, so the same stiffness behaves the
same for light and heavy objects. Its Hessian is taken in Gauss-Newton form
(``kappa m_i grad(phi) grad(phi)^T`` on active vertices), which is positive semi-definite
even where the exact Hessian of a curved collider is not. Friction is not modelled yet;
each collider carries a ``friction`` coefficient so a later friction potential has its input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import NeuralRomError

KINDS = ("plane", "sphere", "capsule")


@dataclass
class Collider:
    """One analytic collider.

    Parameters
    ----------
    kind : {"plane", "sphere", "capsule"}
        Plane: the local XY plane, solid below (local -Z), infinite.
        Sphere: centred at the local origin. Capsule: segment along local Z from
        ``-half_length`` to ``+half_length``, swept by ``radius``.
    radius : float
        Metres, in the collider's local frame (scaled by the transform's largest axis scale).
    half_length : float
        Capsule half segment length, metres (local; scaled by the transform's Z scale).
    transform : (4, 4) float array
        Local-to-world matrix at the current time.
    friction : float
        Coulomb coefficient, stored for a future friction model.
    """

    kind: str
    radius: float = 0.5
    half_length: float = 0.5
    transform: np.ndarray = field(default_factory=lambda: np.eye(4))
    friction: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise NeuralRomError(
                f"Unknown collider kind {self.kind!r}; use one of {', '.join(KINDS)}."
            )
        self.transform = np.asarray(self.transform, dtype=np.float64).reshape(4, 4)
        if not np.all(np.isfinite(self.transform)):
            raise NeuralRomError("Collider transform has non-finite values.")
        if self.kind != "plane" and self.radius <= 0:
            raise NeuralRomError(f"A {self.kind} collider needs a positive radius.")

    def signed_distance(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Signed distance and its gradient at world points.

        Parameters
        ----------
        p : (k, 3) float array
            World positions, metres.

        Returns
        -------
        phi : (k,) float array
            Distance to the surface, positive outside the solid.
        n : (k, 3) float array
            Unit gradient of ``phi`` (outward normal of the closest surface point).
        """
        A = self.transform[:3, :3]
        t = self.transform[:3, 3]
        scales = np.linalg.norm(A, axis=0)
        if self.kind == "plane":
            normal = A[:, 2] / max(scales[2], 1e-300)
            phi = (p - t) @ normal
            return phi, np.broadcast_to(normal, p.shape).copy()
        R = A / np.maximum(scales, 1e-300)
        radius = self.radius * float(scales.max())
        if self.kind == "sphere":
            d = p - t
        else:
            axis = R[:, 2]
            h = self.half_length * float(scales[2])
            s = np.clip((p - t) @ axis, -h, h)
            d = p - (t + s[:, None] * axis)
        r = np.linalg.norm(d, axis=1)
        n = np.zeros_like(d)
        ok = r > 1e-12
        n[ok] = d[ok] / r[ok, None]
        n[~ok] = R[:, 0]  # at the centre any direction is a valid push-out direction
        return r - radius, n

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "radius": float(self.radius),
            "half_length": float(self.half_length),
            "transform": self.transform.tolist(),
            "friction": float(self.friction),
        }


def contact_energy(
    colliders: list[Collider],
    x: np.ndarray,
    vertices: np.ndarray,
    mass: np.ndarray,
    kappa: float,
    d_hat: float = 0.0,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Penalty contact energy, gradient and Gauss-Newton vertex Hessian blocks.

    Parameters
    ----------
    colliders : list of Collider
    x : (n, 3) float array
        Vertex positions, metres.
    vertices : (s,) int array
        Vertices that can touch (the surface vertices).
    mass : (n,) float array
        Lumped vertex masses, kg.
    kappa : float
        Penalty stiffness, 1/s^2.
    d_hat : float
        Contact offset, metres: the penalty starts this far outside the surface.

    Returns
    -------
    E : float
        Joules.
    g : (n, 3) float array
        dE/dx, newtons.
    H : (s, 3, 3) float array
        PSD Hessian blocks of the vertices in ``vertices``.
    """
    g = np.zeros_like(x)
    H = np.zeros((len(vertices), 3, 3))
    E = 0.0
    if not colliders:
        return E, g, H
    p = x[vertices]
    k = kappa * mass[vertices]
    for c in colliders:  # a handful of colliders: the per-vertex work is vectorized
        phi, n = c.signed_distance(p)
        pen = d_hat - phi
        act = pen > 0
        if not act.any():
            continue
        E += float(0.5 * np.sum(k[act] * pen[act] ** 2))
        g[vertices[act]] -= (k[act] * pen[act])[:, None] * n[act]
        H[act] += k[act, None, None] * n[act, :, None] * n[act, None, :]
    return E, g, H


def colliders_from_dicts(items: list[dict], frame: int) -> list[Collider]:
    """Colliders at one frame from bake-spec dicts whose ``transforms`` hold one matrix per frame."""
    out = []
    for d in items:
        tr = np.asarray(d.get("transforms", [np.eye(4)]), dtype=np.float64).reshape(-1, 4, 4)
        out.append(
            Collider(
                kind=d["kind"],
                radius=float(d.get("radius", 0.5)),
                half_length=float(d.get("half_length", 0.5)),
                transform=tr[min(frame, len(tr) - 1)],
                friction=float(d.get("friction", 0.0)),
            )
        )
    return out
