"""The LiCROM field (a network over reference space), the reference space and frame it was
trained in, the training domain a mesh is reported against and the model's pinned points
(:mod:`core.methods.licrom`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from ...geometry import surface as _surface
from ...reduced.nnet import MLP

#: A mesh with more than this share of its nodes outside the training domain is warned about.
DOMAIN_WARNING_SHARE = 0.01

#: Points of the training domain's volume sample kept in the model file.
DOMAIN_SAMPLES = 4096

#: A node of a mesh within this fraction of the training domain's diagonal of a pinned point of
#: the model is that point (rounding: the same vertex placed again).
PIN_TOLERANCE = 1e-4

#: The model's reference space (``reference`` in its metadata): the bakes' world space, or world
#: space relative to the origin of each object that was baked (several objects trained at
#: once; a model put on a mesh is then given that mesh's object origin, ``mesh=(X, T, o)``).
REFERENCE_WORLD = "world"
REFERENCE_OBJECT = "object_origin"

#: The frame the model's field was trained in (``frame`` in its metadata): the bakes' (pins')
#: frame, or the floating body frame of a free body (each training frame's best rigid motion
#: removed; the runtime adds six rigid modes and moves their motion into the frame).
FRAME_WORLD = "world"
FRAME_FLOATING = "floating"


class PinWarning(UserWarning):
    """A mesh pinned elsewhere than its model's family was (:class:`PinReport`)."""


class OutOfDomainWarning(UserWarning):
    """A LiCROM model was put on a mesh that leaves the domain it was trained on."""


# ------------------------------------------------------------------------------------------
# The field, its domain and its pins
# ------------------------------------------------------------------------------------------


@dataclass
class Field:
    """The neural displacement field ``W(X)`` (eq. 2).

    Attributes
    ----------
    net : MLP mapping normalized points (p, 3) to (p, 3 r): row ``3 a + j`` of a point's
        output is component ``a`` of mode ``j``, in units of ``out_scale``
    center : (3,) float, metres; scale : float, metres (input ``(X - center) / scale``)
    out_scale : float, metres (the field's displacements are ``out_scale * net``)
    """

    net: MLP
    center: np.ndarray
    scale: float
    out_scale: float

    @property
    def r(self) -> int:
        return self.net.out_dim // 3

    def basis(self, X: np.ndarray, chunk: int = 16384) -> np.ndarray:
        """The basis ``U`` (3n, r) of nodes ``X`` (n, 3): ``W(X_i)`` stacked, metres."""
        X = np.asarray(X, dtype=np.float64)
        out = np.empty((len(X), 3 * self.r))
        for s in range(0, len(X), chunk):  # bounded memory on big meshes
            out[s : s + chunk] = self.net.forward((X[s : s + chunk] - self.center) / self.scale)
        return (out * self.out_scale).reshape(len(X) * 3, self.r)

    def to_arrays(self) -> tuple[dict, dict]:
        arrays, meta = self.net.to_arrays(prefix="field.")
        arrays["field_center"] = np.asarray(self.center, dtype=np.float64)
        arrays["field_scale"] = np.array([self.scale, self.out_scale], dtype=np.float64)
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> Field:
        s = np.asarray(arrays["field_scale"], dtype=np.float64)
        return cls(
            MLP.from_arrays(arrays, meta),
            np.asarray(arrays["field_center"]),
            float(s[0]),
            float(s[1]),
        )


@dataclass
class DomainReport:
    """Where a mesh's nodes lie against a model's training domain.

    Attributes
    ----------
    share_outside : share of the nodes farther than ``tolerance_m`` from the domain
    max_distance_m : largest distance of a node to the domain's sample, metres
    tolerance_m : distance beyond which a node is outside, metres
    """

    share_outside: float
    max_distance_m: float
    tolerance_m: float

    @property
    def warn(self) -> bool:
        return self.share_outside > DOMAIN_WARNING_SHARE

    def message(self) -> str:
        return (
            f"{self.share_outside:.1%} of the mesh lies outside the domain the LiCROM model was "
            f"trained on (up to {self.max_distance_m * 1000:.3g} mm away, tolerance "
            f"{self.tolerance_m * 1000:.3g} mm): its motion there is extrapolated. Train on "
            "bakes of shapes that cover this one (same size and placement), or move the object "
            "into the training domain."
        )


@dataclass
class Domain:
    """The training domain: a volume-uniform sample of the training meshes (s, 3), metres,
    and the distance beyond which a point is outside it."""

    samples: np.ndarray
    tolerance: float

    @classmethod
    def of_meshes(
        cls, meshes, count: int = DOMAIN_SAMPLES, seed: int = 0, avoid: tuple[int, ...] = ()
    ) -> Domain:
        """Sample ``count`` points uniformly in the union of the tet meshes ``[(X, T), ...]``
        (each point in a random tet chosen by volume, at random barycentric coordinates);
        ``count`` is bumped past any size in ``avoid`` (the meshes' node counts) so that no
        array of a model has a mesh's node count as a dimension."""
        while count in avoid:
            count += 1
        rng = np.random.default_rng(seed)
        Xs, vols = [], []
        for X, T in meshes:
            X, T = np.asarray(X, float), np.asarray(T, np.int64)
            v = np.abs(np.linalg.det(X[T[:, 1:]] - X[T[:, :1]])) / 6.0
            # each mesh of the family weighs the same: the domain is their union
            vols.append(v / v.sum() / len(meshes))
            Xs.append(X[T])
        P = np.concatenate(vols)
        corners = np.concatenate(Xs)  # (sum m, 4, 3)
        pick = rng.choice(len(P), size=count, p=P / P.sum())
        b = rng.dirichlet(np.ones(4), size=count)
        samples = np.einsum("sa,sad->sd", b, corners[pick])
        d = cKDTree(samples).query(samples, k=2)[0][:, 1]
        # a node of any mesh of the domain is within about the sample spacing of a sample
        tol = 2.0 * float(np.quantile(d, 0.99))
        return cls(samples, tol)

    def report(self, X: np.ndarray) -> DomainReport:
        d = cKDTree(self.samples).query(np.asarray(X, dtype=float))[0]
        return DomainReport(float(np.mean(d > self.tolerance)), float(d.max()), self.tolerance)


@dataclass
class PinReport:
    """How a mesh's pinned nodes match the pinned material points of a model's family.

    Attributes
    ----------
    pinned : the mesh's pinned nodes
    far : of those, how many lie farther than ``spacing_m`` from every pinned point of the
        family (the field moves them: pinning them changes what it learnt)
    far_distance_m : the largest such distance, metres
    free : pinned points of the closest training member (by coverage) with no pinned node
        of the mesh within ``spacing_m`` (the family held them; here they move)
    points : the pinned points of that member
    spacing_m : the distance within which a pin matches, metres (the family's edge length
        at its pins)
    """

    pinned: int
    far: int
    far_distance_m: float
    free: int
    points: int
    spacing_m: float

    @property
    def warn(self) -> bool:
        return self.far > 0 or self.free > 0

    def message(self, subject: str = "The mesh") -> str:
        """What a user reads; ``subject`` names the pins ("Pin group 'Pins' of 'Ring'")."""
        mm = self.spacing_m * 1000
        if self.points == 0:
            return (
                f"{subject} pins {self.pinned} nodes, but the model's family was trained "
                "without pins: pin nothing, or bake this object pinned and train with it."
            )
        parts = []
        if self.far:
            parts.append(
                f"holds {self.far} of its {self.pinned} pinned nodes farther than {mm:.3g} mm "
                f"from where the model's family was pinned (up to "
                f"{self.far_distance_m * 1000:.3g} mm)"
            )
        if self.free:
            parts.append(
                f"leaves {self.free} of the {self.points} points the family held free (no "
                f"pinned node within {mm:.3g} mm)"
            )
        return (
            f"{subject} " + " and ".join(parts) + ": the model learnt motion held where the "
            "family was pinned. Pin the same region as on the meshes it was trained on, or "
            "bake this object and train with it."
        )


@dataclass
class PinPoints:
    """The pins of a model: the rest positions (reference space, metres) of the pinned nodes
    of every training mesh (``points`` (p, 3), ``member`` (p,) the training mesh of each) and
    the surface triangles spanned by them (``faces`` (f, 3, 3): each training mesh's boundary
    triangles whose three nodes are pinned), so the same material points are pinned on a
    mesh that has them (a trained mesh, an edit that kept them), the same pinned surface on
    a remesh of it (:meth:`select`), and a mesh's own pins can be checked (:meth:`check`).

    ``tolerance`` (metres): a node this close to a point is that point (rounding);
    ``spacing`` (metres): how far a mesh's pin may lie from the family's and still match
    (the median edge length at the training meshes' pins: an unseen shape of the family
    moves its pins by a fraction of an edge).
    """

    points: np.ndarray
    member: np.ndarray
    tolerance: float = 0.0
    spacing: float = 0.0
    faces: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3, 3)))
    face_member: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def none(cls) -> PinPoints:
        return cls(np.zeros((0, 3)), np.zeros(0, np.int64))

    @classmethod
    def of_meshes(cls, meshes, tolerance: float) -> PinPoints:
        """The pins of training meshes ``[(X, T, pinned), ...]`` (reference-space nodes
        (n, 3), tets (m, 4), pinned node indices)."""
        points, member, edges, faces, face_member = [], [], [], [], []
        for i, (X, T, pinned) in enumerate(meshes):
            p = np.unique(np.asarray(pinned, dtype=np.int64))
            if not p.size:
                continue
            X, T = np.asarray(X, float), np.asarray(T, np.int64)
            points.append(X[p])
            member.append(np.full(len(p), i, np.int64))
            e = T[:, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]].reshape(-1, 2)
            at = np.isin(e, p).any(1)
            edges.append(np.linalg.norm(X[e[at, 0]] - X[e[at, 1]], axis=1))
            # boundary triangles (faces of one tet only) with three pinned nodes
            tri = np.sort(T[:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3), 1)
            tri, count = np.unique(tri, axis=0, return_counts=True)
            tri = tri[(count == 1) & np.isin(tri, p).all(1)]
            faces.append(X[tri])
            face_member.append(np.full(len(tri), i, np.int64))
        if not points:
            return cls.none()
        spacing = float(np.median(np.concatenate(edges)))
        return cls(
            np.concatenate(points),
            np.concatenate(member),
            float(tolerance),
            spacing,
            np.concatenate(faces).reshape(-1, 3, 3),
            np.concatenate(face_member),
        )

    def __bool__(self) -> bool:
        return len(self.points) > 0

    def select(self, X: np.ndarray) -> np.ndarray:
        """Indices (p,) of the pinned nodes of a mesh ``X`` (n, 3): on a mesh with a node at
        every pinned point of a training mesh (that mesh, an edit that kept its pinned
        vertices, a refinement of it) the nodes at those points and on that mesh's pinned
        triangles (to rounding: not the nodes a tetrahedralization added beside them on a
        pinned face, which that mesh's bakes left free); on another mesh (a remesh, another
        shape) the nodes at a pinned point or on a pinned triangle of any training mesh,
        within a tenth of ``spacing`` (a finer surface's nodes lie off the coarse triangles
        by their sagitta)."""
        X = np.asarray(X, dtype=float)
        if not len(self.points) or not len(X):
            return np.zeros(0, np.int64)
        tree = cKDTree(X)
        d, near = tree.query(self.points)
        at = d <= self.tolerance
        for i in np.unique(self.member):
            mine = self.member == i
            if at[mine].all():
                faces = self.faces[self.face_member == i]
                return _nodes_on(tree, X, faces, self.tolerance, near[mine])
        reach = max(self.tolerance, 0.1 * self.spacing)
        return _nodes_on(tree, X, self.faces, reach, near[at])

    def check(self, X: np.ndarray, pinned) -> PinReport:
        """How the pinned nodes ``pinned`` of a mesh ``X`` (n, 3, reference space) match."""
        P = np.asarray(X, dtype=float)[np.asarray(pinned, dtype=np.int64)]
        if not len(self.points):
            return PinReport(len(P), len(P), 0.0, 0, 0, self.spacing)
        reach = max(self.spacing, self.tolerance)
        far, far_d = 0, 0.0
        if len(P):
            d = cKDTree(self.points).query(P)[0]
            far, far_d = int(np.sum(d > reach)), float(d.max())
        # the training member whose pins these cover best
        best = None
        for i in np.unique(self.member):
            Q = self.points[self.member == i]
            free = int(np.sum(cKDTree(P).query(Q)[0] > reach)) if len(P) else len(Q)
            if best is None or free / len(Q) < best[0] / best[1]:
                best = (free, len(Q))
        return PinReport(len(P), far, far_d if far else 0.0, best[0], best[1], self.spacing)


def _nodes_on(tree, X: np.ndarray, faces: np.ndarray, reach: float, also) -> np.ndarray:
    """Sorted indices of the nodes ``X`` (n, 3) (``tree`` their cKDTree) within ``reach``
    metres of a triangle of ``faces`` (f, 3, 3), together with the nodes ``also``."""
    found = [np.asarray(also, dtype=np.int64).reshape(-1)]
    if len(faces):
        centre = faces.mean(1)
        radius = np.linalg.norm(faces - centre[:, None], axis=2).max(1) + reach
        for f, nodes in enumerate(tree.query_ball_point(centre, radius)):
            if nodes:
                P = X[nodes]
                A, B, C = (np.broadcast_to(faces[f, j], P.shape) for j in range(3))
                c = _surface.closest_points_on_triangles(P, A, B, C)
                found.append(np.asarray(nodes)[np.linalg.norm(P - c, axis=1) <= reach])
    return np.unique(np.concatenate(found))


#: The acceleration of the static modes, m/s^2 (1 g): a mode's coordinate 1 is the sag under
#: gravity along its axis.
