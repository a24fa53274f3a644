"""Analytic colliders (plane, sphere, capsule) and their penalty contact energy.

A collider is a shape in its own frame plus a world transform (a 4x4 matrix, as Blender's
``matrix_world``), which may change every frame. Contact is a one-sided quadratic penalty
on the signed distance of the object's contact points::

    C(x) = sum_j  kappa * m_j / 2 * max(0, d_hat - phi(p_j))^2,    p_j = sum_a w_ja x_{i_ja}

with ``phi`` the signed distance to the collider surface (positive outside), ``m_j`` the
mass the point carries and ``kappa`` a stiffness in 1/s^2, so the same stiffness behaves the
same for light and heavy objects. The contact points (:class:`ContactPoints`) are the
surface vertices of a tet mesh that is the object (``p_j = x_j``, ``m_j`` its lumped mass),
or the render surface's vertices embedded in a cage, each carried by the barycentric
weights of its tet (``p = W x``, W sparse with four entries a row): then the surface the
user sees is what touches, not the cage around it. The gradient is ``W^T dC/dp`` and the
Hessian is taken in Gauss-Newton form, ``W^T diag(kappa m_j n_j n_j^T) W`` on touching
points (``n_j = grad(phi)``), which is positive semi-definite even where the exact Hessian
of a curved collider is not. Friction is not modelled yet; each collider carries a
``friction`` coefficient so a later friction potential has its input.

The stiffness (:func:`penalty_stiffness`). A point resting under its own weight sinks
``g / kappa``; one arriving at speed ``v`` sinks about ``v / sqrt(kappa)`` (its kinetic
energy ``m v^2 / 2`` stored in the penalty ``kappa m d^2 / 2``). The rule before issue 10,
``kappa = g / (1e-4 L)``, sized only the first: a 1 m flesh ball dropped 0.9 m (3.9 m/s at
impact) sank 10 mm into the floor. A bake knows the fastest impact its scenario can produce
(:func:`.bake.impact_speed`), so it asks for ``kappa = (v / d)^2`` with the tolerance
``d = min(2 mm, 0.2% of the size of what touches)``, and never less than the rest rule.
Backward Euler sinks less than the energy bound (measured: 0.6 of it on that ball), so the
bound is the rule, with no safety factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import NeuralRomError, SimulationError

KINDS = ("plane", "sphere", "capsule")

#: The rest rule: a point resting under its own weight sinks this fraction of the size ``L``.
REST_SINK = 1e-4
#: The largest penetration an impact may leave: metres, and a fraction of the size of what
#: touches (a 5 cm object may not sink 2 mm).
IMPACT_TOLERANCE = 2e-3
IMPACT_TOLERANCE_FRACTION = 2e-3


def penalty_stiffness(
    length: float,
    gravity: float = 9.81,
    impact_speed: float = 0.0,
    contact_length: float | None = None,
) -> float:
    """Penalty stiffness ``kappa`` (1/s^2) of :func:`contact_energy` (module docstring).

    Parameters
    ----------
    length : float
        ``L``, the rest bounding-box diagonal of the tet mesh, metres.
    gravity : float
        ``|g|``, m/s^2 (9.81 when zero).
    impact_speed : float
        The fastest a contact point can arrive at a collider, m/s; 0 gives the rest rule
        ``g / (REST_SINK L)``, the stiffness of every simulation before issue 10.
    contact_length : float, optional
        Rest bounding-box diagonal of the contact points (an embedded render surface is
        smaller than its cage), metres; ``length`` when None.

    Returns
    -------
    float
        ``max(g / (REST_SINK L), (v / d)^2)`` with ``d = min(IMPACT_TOLERANCE,
        IMPACT_TOLERANCE_FRACTION * contact_length)``: an impact at ``v`` sinks at most
        about ``d``.
    """
    L = float(length) if length > 0 else 1.0
    g = float(gravity) or 9.81
    kappa = g / (REST_SINK * L)
    v = float(impact_speed)
    if v > 0:
        size = L if contact_length is None or contact_length <= 0 else float(contact_length)
        d = min(IMPACT_TOLERANCE, IMPACT_TOLERANCE_FRACTION * size)
        kappa = max(kappa, (v / d) ** 2)
    return kappa


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
        if not np.isfinite(self.transform).all():  # the method: np.all's wrapper costs 2 us
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

    def touching(
        self, p: np.ndarray, d_hat: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The points closer than ``d_hat`` to the surface (or inside): the contact step's
        broad and narrow phase in one, normals only where they are needed.

        Parameters
        ----------
        p : (k, 3) float array
            World positions, metres.
        d_hat : float
            Contact offset, metres.

        Returns
        -------
        idx : (a,) int array
            Indices of the points with ``phi < d_hat``, increasing.
        pen : (a,) float array
            Their penetrations ``d_hat - phi`` (> 0), metres.
        n : (a, 3) float array
            Their unit normals, as :meth:`signed_distance` gives them.
        """
        if self.kind != "plane":
            phi, n = self.signed_distance(p)
            idx = np.flatnonzero(phi < d_hat)
            return idx, d_hat - phi[idx], n[idx]
        # a plane: one dot product a point, no (k, 3) normal array
        normal = self.plane_normal()
        phi = (p - self.transform[:3, 3]) @ normal
        idx = np.flatnonzero(phi < d_hat)
        return idx, d_hat - phi[idx], np.repeat(normal[None], len(idx), axis=0)

    def plane_normal(self) -> np.ndarray:
        """A plane's unit normal (3,), world space (the solid is on its negative side):
        ``phi(p) = (p - t) . normal`` with ``t`` the transform's translation."""
        a = self.transform[:3, 2]
        return a / max(math.sqrt(np.add.reduce(a * a)), 1e-300)  # as signed_distance's

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "radius": float(self.radius),
            "half_length": float(self.half_length),
            "transform": self.transform.tolist(),
            "friction": float(self.friction),
        }


def split_scale(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split 4x4 matrices ``M`` (..., 4, 4) into rigid matrices (rotation and translation,
    (..., 4, 4)) and their 3 axis scales (..., 3): the columns' lengths."""
    M = np.asarray(M, dtype=np.float64)
    L = M[..., :3, :3]
    scale = np.sqrt((L * L).sum(axis=-2))  # np.linalg.norm(L, axis=-2), its bits
    rigid = np.zeros(M.shape)
    rigid[..., :3, :3] = L / np.maximum(scale, 1e-12)[..., None, :]
    rigid[..., :3, 3] = M[..., :3, 3]
    rigid[..., 3, 3] = 1.0
    return rigid, scale


def box_colliders(
    kinds: list[str],
    half_local: np.ndarray,
    centre: np.ndarray,
    mats: np.ndarray,
    names: list[str] | None = None,
) -> tuple:
    """Analytic colliders fitted to boxes over frames: what a host's collider objects are
    as shapes. A sphere fits the largest half extent; a capsule runs along local Z with its
    radius from X and Y and half length ``half_z - radius``; a plane is the local XY plane
    through the centre, solid below. Extents scale with each matrix's axis scales.

    Parameters
    ----------
    kinds : (C,) "plane", "sphere" or "capsule", the shape each box is taken as
    half_local : (C, 3) half extents of each box, local (unscaled), m
    centre : (C, 3) local centre of each box
    mats : (F, C, 4, 4) world matrices of the boxes per frame
    names : (C,) what to call the colliders in an error (default "1", "2", ...)

    Returns
    -------
    kind (F, C) str, radius and half_length (F, C) float (m), transform (F, C, 4, 4) rigid
    (scale divided out) with the box's centre as its origin.
    """
    mats = np.asarray(mats, dtype=np.float64)
    F, C = mats.shape[:2]
    transform, scale = split_scale(mats)
    half = np.asarray(half_local, dtype=np.float64).reshape(C, 3) * scale  # (F, C, 3)
    radius, half_length = np.zeros((F, C)), np.zeros((F, C))
    for j, kind in enumerate(kinds):
        h = half[:, j]
        if kind == "sphere":
            r = h.max(axis=1)
        elif kind == "capsule":
            r = np.maximum(h[:, 0], h[:, 1])
            half_length[:, j] = np.maximum(h[:, 2] - r, 0.0)
        elif kind == "plane":
            continue
        else:
            raise NeuralRomError(f"Unknown collider shape {kind!r}; use plane, sphere or capsule.")
        if not (r > 0).all():
            name = str(j + 1) if names is None else names[j]
            raise NeuralRomError(
                f"Collider '{name}' has zero size; scale it up or use a larger empty display size."
            )
        radius[:, j] = r
    # the centre through each matrix (core.engine.render.to_world of one point, its bits)
    c = np.asarray(centre, dtype=np.float64).reshape(C, 1, 3)
    for j in range(C):  # (1, 3) @ (F, 3, 3) has to_world's bits; a (1, C, 1, 3) operand not
        A = mats[:, j, :3, :3]
        transform[:, j, :3, 3] = (c[j] @ A.transpose(0, 2, 1))[:, 0] + mats[:, j, :3, 3]
    kind = np.empty((F, C), dtype="<U8")
    kind[:] = kinds
    return kind, radius, half_length, transform


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
        act, pen, n = c.touching(p, d_hat)
        if not act.size:
            continue
        ka = k[act]
        E += float(0.5 * np.sum(ka * pen**2))
        g[vertices[act]] -= (ka * pen)[:, None] * n
        H[act] += ka[:, None, None] * n[:, :, None] * n[:, None, :]
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


class ContactPoints:
    """The points of an object that touch colliders, each carried by tet nodes.

    Point ``j`` is ``p_j = sum_a weights[j, a] * x[nodes[j, a]]`` (``P = W x``). With one
    node and weight 1 a point is a tet vertex (direct tet meshes: their surface vertices);
    with the four nodes of a tet and its barycentric coordinates it is an embedded
    render-surface point.

    Parameters
    ----------
    nodes : (p,) or (p, a) int array
        Tet nodes carrying each point (a (p,) array means one node each: vertices).
    weights : (p, a) float array, optional
        Their weights, rows summing to one; None means one node of weight 1 each.
    mass : (p,) float array
        Kilograms each point carries: its penalty is ``kappa * mass`` (module docstring).
    """

    def __init__(self, nodes, mass, weights=None) -> None:
        nodes = np.asarray(nodes, dtype=np.int64)
        if nodes.ndim == 1:
            nodes = nodes[:, None]
        w = np.ones(nodes.shape) if weights is None else np.asarray(weights, dtype=np.float64)
        mass = np.asarray(mass, dtype=np.float64).reshape(-1)
        if nodes.ndim != 2 or w.shape != nodes.shape or mass.shape != (len(nodes),):
            raise SimulationError(
                f"Contact points disagree: nodes {nodes.shape}, weights {w.shape}, mass "
                f"{mass.shape}; expected (p, a), (p, a) and (p,)."
            )
        if np.any(mass < 0) or not np.all(np.isfinite(w)):
            raise SimulationError("Contact points need non-negative masses and finite weights.")
        self.nodes, self.weights, self.mass = nodes, w, mass
        # vertices: one node of weight exactly 1 each, no node twice (the fast, exact path)
        self.is_vertices = bool(
            nodes.shape[1] == 1 and np.all(w == 1.0) and len(np.unique(nodes)) == len(nodes)
        )
        self._W: sp.csr_matrix | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        kind = "vertices" if self.is_vertices else f"{self.nodes.shape[1]}-node points"
        return f"ContactPoints({len(self)} {kind}, mass {self.mass.sum():.4g} kg)"

    @classmethod
    def at_vertices(cls, vertices, mass) -> ContactPoints:
        """Contact on tet vertices ``vertices`` (s,), carrying masses ``mass`` (s,), kg."""
        return cls(np.asarray(vertices, dtype=np.int64).reshape(-1), mass)

    def check(self, n_nodes: int) -> None:
        """Raise :class:`SimulationError` unless every node lies in ``0..n_nodes-1``."""
        if len(self) and (self.nodes.min() < 0 or self.nodes.max() >= n_nodes):
            raise SimulationError(
                f"Contact points refer to nodes outside 0..{n_nodes - 1}: they belong to "
                "another tet mesh. Re-tetrahedralize, then re-bake."
            )

    def matrix(self, n_nodes: int) -> sp.csr_matrix:
        """(p, n) sparse W: point positions ``W @ x``."""
        if self._W is None or self._W.shape[1] != n_nodes:
            p, a = self.nodes.shape
            rows = np.repeat(np.arange(p, dtype=np.int64), a)
            self._W = sp.csr_matrix(
                (self.weights.ravel(), (rows, self.nodes.ravel())), shape=(p, n_nodes)
            )
        return self._W

    def positions(self, x: np.ndarray) -> np.ndarray:
        """(p, 3) point positions of node positions ``x`` (n, 3)."""
        if self.is_vertices:
            return x[self.nodes[:, 0]]
        return self.matrix(len(x)) @ x

    def carry(self, U: np.ndarray) -> np.ndarray:
        """``W U`` of a per-node field ``U`` (n, ...): the same field at the points (p, ...)."""
        if self.is_vertices:
            return U[self.nodes[:, 0]]
        return np.einsum("pa,pa...->p...", self.weights, U[self.nodes])

    def energy(
        self, colliders: list[Collider], x: np.ndarray, kappa: float, d_hat: float = 0.0
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """Penalty energy (J), its gradient ``W^T dC/dp`` (n, 3) (N) and the Gauss-Newton
        blocks ``kappa m_j n_j n_j^T`` (p, 3, 3) of the points (spread to the nodes by
        :meth:`add_hessian`), at node positions ``x`` (n, 3)."""
        P = self.positions(x)
        E, gp, H = contact_energy(colliders, P, np.arange(len(P)), self.mass, kappa, d_hat)
        if self.is_vertices:
            g = np.zeros_like(x)
            g[self.nodes[:, 0]] = gp
        elif H.any():
            g = np.asarray(self.matrix(len(x)).T @ gp)
        else:
            g = np.zeros_like(x)
        return E, g, H

    def hessian_slots(self, slots_of) -> np.ndarray:
        """(p, a, a, 3, 3) positions in a sparse matrix's ``data`` of the node-pair blocks
        ``W^T H W`` adds to, from the assembler's ``slots_of(rows, cols)``."""
        r = 3 * self.nodes[:, :, None, None, None] + np.arange(3)[:, None]
        c = 3 * self.nodes[:, None, :, None, None] + np.arange(3)
        r, c = np.broadcast_arrays(r, c)
        return np.asarray(slots_of(r.ravel(), c.ravel())).reshape(r.shape)

    def add_hessian(self, data: np.ndarray, slots: np.ndarray, H: np.ndarray) -> None:
        """Add ``W^T blockdiag(H) W`` (``H`` (p, 3, 3) from :meth:`energy`) into ``data`` at
        ``slots`` (:meth:`hessian_slots`); only touching points cost."""
        if self.is_vertices:
            # each vertex appears once, so its 9 slots are distinct: no np.add.at needed
            data[slots.reshape(-1)] += H.ravel()
            return
        act = np.flatnonzero(H.reshape(len(H), -1).any(1))
        if not act.size:
            return
        w = self.weights[act]
        vals = (w[:, :, None] * w[:, None, :])[..., None, None] * H[act][:, None, None]
        np.add.at(data, slots[act].ravel(), vals.ravel())

    def to_dict(self) -> dict:
        """JSON-able ``{"nodes", "weights", "mass"}`` (read back with :meth:`from_dict`)."""
        return {
            "nodes": self.nodes.tolist(),
            "weights": self.weights.tolist(),
            "mass": self.mass.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> ContactPoints:
        try:
            return cls(d["nodes"], d["mass"], d["weights"])
        except KeyError as e:
            raise SimulationError(
                f"Contact points without {e}: the bake spec was not written by "
                "ContactPoints.to_dict. Bake it again."
            ) from None
