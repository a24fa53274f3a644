"""LiCROM (Chang et al. 2023): a neural displacement field over reference space, with a linear
latent, so one model runs on any mesh of its object and survives mesh changes mid-run.

The kinematics (eq. 2) are a continuous field ``u(X, t) = W(X) q(t)``: ``W`` is a small MLP
(5 layers, ELU, sec. 3.1; width 60 in the paper, its last hidden layer 256 wide here: see
:mod:`training.licrom`) taking a reference point ``X`` (normalized by the training domain's
centre and half-extent) to a (3, r) matrix. Evaluated once at a mesh's
nodes it gives that mesh's basis ``U`` (3n, r), so the dynamics are those of any linear
subspace model: backward Euler (eq. 5, 8)::

    q_{n+1} = argmin_q  1/(2h^2) |q - q_n - h qdot_n|^2_{M~} + V~(q) - q . U^T f_ext + C~(q)

solved by :class:`core.reduced.integrator.SubspaceSimulation` (exact reduced Hessian, Newton
with a line search; it takes a non-orthonormal basis). Where we depart from the paper:

* **Newton by default.** The paper minimizes (5) with a few gradient-descent steps per frame
  (sec. 5, eq. 9-10) and lists Newton on the reduced Hessian as future work. A converged
  Newton step is the default (``solver="newton"``); the paper's scheme is ``solver=
  "gradient"``: ``gradient_iterations`` steps ``q <- q - a (M~/h^2)^{-1} dE/dq``, which is
  eq. (9) (the mass-preconditioned increment at every cubature point) projected by eq. (10)
  with mass weights; ``a = 1 / (1 + lambda_max)`` (``lambda_max`` the largest eigenvalue of
  ``h^2 M~^{-1} K~`` at rest) keeps it stable.
* **Cubature fitted on each mesh** (``cubature="fitted"``, the default). The paper picks ``m``
  random vertices and the elements incident to them, equally weighted. Even unbiased (below),
  one random draw is one fixed, uneven stiffness: on the bench's bar (bench/licrom.py) the
  replay with 100 random vertices erred 24x POD's against 4.1x with the exact energy. So when
  a model is put on a mesh (:func:`load_on_mesh`, :meth:`LicromSimulation.swap_mesh`) the
  basis is evaluated there and non-negative element weights are fitted to its exact reduced
  forces at poses ``X + U q`` (An et al. 2008, :func:`fitted_cubature`): the ``q`` are latent
  codes of training frames the model file carries (``cubature_codes``), so no bake of the new
  mesh is needed. The greedy selection scores one seeded pool of elements whose columns are
  computed once (:data:`CUBATURE_POOL`), which keeps the fit within a mesh swap's time.
  On the bench's family the fitted replays are within 15% of the exact energy's on the
  training bar (3.36 vs 4.14 mm; random: 20.8), its 17.5K-tet remesh and an unseen notch,
  with 75-83 elements where 100 random vertices kept 576-1,898; the fit takes 150-330 ms
  there, 529 ms at 20K tets under load 10-12. A rule is kept per process for each basis and
  mesh, so going back to a mesh is free.
* **Unbiased random cubature** (``cubature="random"``, the paper's scheme, and the fallback
  for a model file without codes). The paper's equal weights are biased for tets. We pick
  ``m`` distinct vertices uniformly (seeded per mesh: the seed and the mesh hash) and keep
  every element touching one; each kept element is weighted by the inverse of its inclusion
  probability ``pi = 1 - C(n-4, m) / C(n, m)`` (Horvitz-Thompson), so the cubature energy is
  an unbiased estimate of the exact one for every pose (:func:`random_cubature`).
* **Pins are the pin group's material points.** A model records the rest positions of the
  pinned nodes of every training mesh (:class:`PinPoints`), not a region around them: on a
  mesh that has those points (a trained mesh, an edit that kept them) exactly those nodes
  are pinned, not the nodes TetGen added between them on a pinned face, which its bakes left
  free (a box around the pins held them too: "Pin targets have shape (15, 3), expected
  (18, 3)"). A mesh of another shape of the family brings its own pinned nodes (its pin
  group: ``pinned``); they are checked against the family's (:meth:`PinPoints.check`): a
  pin farther than an edge from every pinned point of the family, or a pinned point of the
  family with no pin of the mesh within an edge, is reported (:class:`PinReport`) and warned
  about (:class:`PinWarning`). The basis is zero at the pinned nodes, so they stay put to
  rounding on every mesh.
* **The training domain** is recorded as a volume sample of the training meshes (not their
  nodes): a mesh whose nodes lie farther than ``tolerance`` from it is reported
  (:class:`DomainReport`: share and distance) and warned about past
  :data:`DOMAIN_WARNING_SHARE` (:class:`OutOfDomainWarning`).
* **A reference space shared by several objects.** Trained on bakes of several objects at
  once (the add-on's family training), each object's meshes enter the reference space
  relative to its own origin (:data:`REFERENCE_OBJECT`): three variants of a prop placed
  apart in a scene overlap there. A mesh is then put under the model with its object's
  origin (``mesh=(X, T, origin)``); the simulation runs in world space, only the field, its
  pins and its domain see ``X - origin``.
* **Mesh swaps** (:meth:`LicromSimulation.swap_mesh`) keep ``q`` and ``qdot`` (the state is
  the latent, not the mesh: sec. 4), rebuild basis, masses and cubature on the new mesh, and
  scale ``qdot`` down when the new mesh's reduced mass would raise the kinetic energy, so a
  swap never injects energy.

* **A floating frame for free bodies** (``floating_frame``, on by default; the model's
  ``frame`` metadata: :data:`FRAME_FLOATING`). The displacement is linear in ``q``, so a
  field trained in world space follows a finite rotation only in part: the p = 2
  superellipsoid (a ball) of tests/test_licrom.py rolls 14.2 degrees in its held-out drop and
  the world-space field's replay errs 18.9 mm (2.53 mm with each frame's rigid motion taken
  out); spun at 8 rad/s the shapes err 200-264 mm. For a body with no pins the trainer takes
  each training frame's best rigid motion out (mass-weighted Kabsch about the centre of mass,
  :func:`body_frames`), so the field holds deformation only, and the runtime moves in a frame
  ``x = R y + c``, ``y = X + U q``, whose basis is the field's plus six rigid modes
  (:func:`rigid_modes`: translations and infinitesimal rotations about the training domain's
  centre, the same point on every mesh). Each substep (:meth:`LicromSimulation.step`):

  1. predicts the frame: the mass-weighted Kabsch fit of the rest mesh onto the inertial
     prediction ``2 x_n - x_{n-1}``, from the state's mass moments in O(k)
     (:meth:`~LicromSimulation._predict_frame`);
  2. solves backward Euler in that frame, the frame's motion entering exactly through
     :class:`.frame.FrameMixin`'s inertial and damping targets (centrifugal, Coriolis and
     Euler terms included), gravity, forces (held in world axes: a poke keeps its direction
     while the body turns under it) and colliders taken into it; where the solution's
     rotation modes turn the frame by more than :data:`FRAME_TURN` (forces turned the body
     beyond its inertia's prediction), solves again in the turned frame, since a linear
     rotation by ``w`` stretches the body by ``w^2 / 2`` and that stretch's elastic energy
     resists the turn (40 N on one end of the rounded cube turned it at half full space's
     rate, 366 mm off; solved again, 0.73 mm);
  3. moves the rigid part of the solved ``q`` (translation ``t``, rotation vector ``w``) into
     the frame (``y -> R_w (y - o) + o + t``) and projects the positions on the basis there;
     ``qdot = (q - q_n) / h`` between the two frames, so the frame's last two poses carry the
     rigid velocity exactly (:meth:`~LicromSimulation._move_rigid_into_frame`).

  Without step 1 the rigid modes linearize a whole step's turn (a ball spun at 21 rad/s
  kept a fifth of its spin); without step 3 the results were the same to three digits. With
  the body-frame POD of a bake of the ball spinning at 5 rad/s onto the ground (16 modes, the
  bake's own shapes), this runtime replays that bake to 0.23 mm (8 modes: 0.62 mm): the
  frame's kinematics are exact and what is left is the field's. Measured on the tests'
  family (latent 10, 60 epochs, exact energy; ``python bench/licrom.py --floating``; the
  Blender poke's case in its tables too): held-out drops replay at
  1.09 / 0.73 mm on the training shapes p = 4 / 10 (world space: 1.45 / 1.69), 2.14 / 1.24 mm
  on the unseen p = 3 / 6 (2.32 / 1.22), 1.59 mm on the 3.2x-finer p = 4 mesh (1.82); the
  shapes alone (rigid motion taken out) 0.6-1.5 mm (0.95-1.65). The rounded cube spun at 8
  rad/s about the vertical replays at 1.67 mm (world space: 238 mm). What is not followed is
  the ball's rocking on its contact patch: its held-out drop rocks 9 degrees one way and back,
  driven by where its polyhedral surface presses on the ground, and the replay errs 25.8 mm
  (world space: 18.9 mm; the shape alone 1.93 mm against 2.53); with latent 20 and 200
  epochs the floating field errs 12.1 mm and the world-space one 18.4. A ball rolling in
  place (spun about a horizontal axis) presses the ground with patches of its surface no
  training drop pressed: its shape errs 10.5 mm and the contact forces on those patches turn
  it wrongly (35 degrees off, 64 mm). A body in flight poked at one end follows full space
  (the rounded cube and the ball: 0.73 and 2.78 mm, the centre of mass to rounding; the
  world-space field, whose drops never moved sideways: 1.2-1.6 m). A step costs the six more modes and about 0.4 ms for the frame (0.86 against 0.43 ms on the
  rounded cube with its 35 fitted cubature tets; 1.2-1.3x with the exact energy). A mesh swap
  keeps the frame, and only when the new mesh would raise the kinetic energy puts the frame's
  velocity into ``qdot`` (:meth:`~LicromSimulation._settle_frame`) to scale it. A pinned body
  moves in its pins' frame as before.

  **Angular momentum** (issue 13). The rotation modes turn the rest shape (``e x (X - o)``),
  not the deformed one: the infinitesimal rotation of the current shape ``e x (y - o)`` is
  in the subspace only where ``e x U q`` is, and a linear subspace's internal forces then
  carry a torque ``-<(e x u)_perp, f>``. A rubber ring (1,370 tets, latent 20) dropped tilted
  onto frictionless ground left its impact yawing at 0.015 degrees a frame (0.57 degrees off
  full space at frame 48; ``L_z`` 0.034 kg m^2/s against full space's 0.0013; held-out
  replay mean 1.58 mm, max 6.11). The ``invariant_rotation`` setting evaluates the elastic
  energy at ``S q`` (:meth:`~LicromSimulation._rotation_invariance`): along ``Z``, the
  subspace's best image of a rotation of the shape at the substep's start, the energy is
  constant, so backward Euler changes ``Z^T M~ qdot`` (the reduced angular momentum) by the
  external forces only: a bar deforming in free flight keeps zero angular momentum to
  2e-7 kg m^2/s where the default makes 7.9e-3 (tests/test_licrom_spin.py). The ring's
  replay: mean 0.43 mm, max 5.39, 0.14 degrees off at frame 48 (``L_z`` -0.0115). It is off
  by default because contact forces still see the subspace's rotation (not the shape's) and
  because it turned the poked rounded cube of tests/test_licrom.py 1.79 degrees off full
  space (replay 3.97 mm) where the default is 0.15 degrees (0.73 mm). The yaw is the linear
  subspace's, not the frame's: fields trained 120 epochs on the ring's three other drops
  (60 s each) yaw 1.10 degrees by frame 48 in world space (floating frame off: ``L_z`` 0.11,
  mean 4.03 mm), 0.87 with the floating frame (0.063, 2.14 mm) and 0.66 with
  ``invariant_rotation`` (0.054, 1.57 mm): on that field the contact forces' share, the
  torque ``-<(e x y)_perp, f_c>`` of the ground's pressure through the subspace, dominates.

The model file holds the field network and its normalization, the domain sample and the
pinned points: no array has a training mesh's vertex count as a dimension. A model opened without
a mesh runs on the mesh of the bake it records (``mesh_bake``); :func:`load_on_mesh` puts it
on any other. Its trainer is :mod:`training.licrom`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve, eigh
from scipy.spatial import cKDTree

from ...data.files import mesh_hash as _mesh_hash
from ...data.modelfile import Model, load_model, save_model
from ...errors import CacheError, NeuralRomError, SimulationError
from ...geometry import surface as _surface
from ...physics import fem as _fem
from ...physics.colliders import Collider
from ...physics.sim import FrameInputs, SimSettings, StepReport
from ...reduced.cubature import Cubature, optimized_cubature
from ...reduced.integrator import SubspaceSimulation
from ...reduced.model import SUBSPACE_SETTING, TRAINER_SETTING, run_frame
from ...reduced.nnet import MLP
from ...reduced.pose import Pose
from ...registry import Method, Setting

NAME = "licrom"

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

ACTIVATIONS = ("elu", "tanh", "softplus", "relu")
SOLVERS = ("newton", "gradient")
CUBATURES = ("fitted", "random")

#: Elements of each mesh whose reduced forces the fitted cubature's greedy selection scores
#: (one seeded draw, their columns computed once: ``optimized_cubature(pool=...)``).
CUBATURE_POOL = 2000

#: The fitted cubature's relative reduced-force error on its poses. On the bench's bar family
#: (bench/licrom.py, r = 20) 0.05 left the training bar's replay at 12.8 mm against 4.14 mm
#: with the exact energy; 0.01 gave 3.4 mm (83 elements), as close as cubature can get. With
#: Static Modes (forces weighed in a stiffness-orthonormal basis) 0.003: the ring family of
#: issue 23 replayed 2.47 / 0.43 / 0.54 / 0.38 mm (trained 50, 70 mm; unseen 60, 90 mm; the
#: exact energy 0.19 / 0.04 / 0.16 / 0.18), 0.01 4.94 / 0.92 / 1.07 / 0.58 mm.
CUBATURE_TARGET = 0.003

#: Latent codes the fitted cubature is fitted to on each mesh. The exact reduced forces of
#: each pose cost a full-mesh gradient, most of a fit on a big mesh: 16 poses fit the 20K-tet
#: bar in 0.55 s under load 9 (32: 0.99 s) with replays as close to the exact energy's.
CUBATURE_POSES = 16

#: A floating frame's substep is solved again in the frame its solution turned to while the
#: rotation modes' part of it exceeds this many radians (a linear rotation by ``w`` stretches
#: the body by ``w^2 / 2``; the elastic energy of that stretch resisted a torque's turn: a
#: couple on the rounded cube turned it 5.4 degrees in one frame where full space turns it
#: 10), at most :data:`FRAME_SOLVES` solves.
FRAME_TURN = 0.01
FRAME_SOLVES = 4


#: Types of a floating frame's held forces in a state: loaded rows, their forces in world
#: axes (r, 3), N, and their reduced force when they were given (k,).
HELD_TYPES = (np.int64, np.float64, np.float64)

#: Fitted rules kept per process (:func:`fitted_cubature`'s result for one basis, mesh and
#: material), so going back to a mesh (a reset after a swap, a model loaded again) is free.
_FITTED_CACHE: dict = {}
_FITTED_CACHE_SIZE = 8


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
STATIC_ACCELERATION = 9.81

#: Static Derivatives' Auto: on when some training frame's second-order static response
#: (its static coordinates ``s`` through the modes' derivatives, ``D (s_i s_j) / 2``) reaches
#: this fraction of its first-order one ``S s`` (mass-weighted norms; training's
#: ``static_reach``). Measured: the hung rings of ``bench/licrom.py --rings`` 0.029-0.090
#: (linear suffices: 0.2x their own linear models), issue 23's keyed tori 0.47-0.79 and
#: cylinders 1.8-27 (they need the derivatives); 0.2 sits 2.2x above the rings and 2.4x below
#: the tori.
DERIVATIVES_AUTO_RATIO = 0.2

#: The static coordinates added to the fitted cubature's poses (the field's codes, which
#: hold the training frames' sag already): uniform in +-this (1: 1 g along each axis). On
#: the ring of issue 23 (960 tets, forces weighed as :func:`stiffness_metric` does not yet)
#: 0.3 replayed 7.9 mm, 1.0 12.8 mm.
STATIC_POSES = 0.3


#: The central differences of :func:`static_modes`' derivatives step each deflection to this
#: share of the mesh's bounding-box diagonal at its largest node displacement.
DERIVATIVE_STEP = 1e-4


#: Largest banded Cholesky (``dofs * bandwidth^2`` flops in the nodes' reverse Cuthill-McKee
#: order) :func:`static_modes` takes before SuperLU: LAPACK's banded factorization solved the
#: 20K-tet bar (bandwidth 455) in 0.21 s and the 20K-tet ring (500) in 0.33 s where SuperLU
#: took 1.0 and 0.51 s (minimum degree; 2.0 and 1.1 s in its default order), at load 18;
#: a compact body's wide band would cost more than SuperLU's fill.
BANDED_FLOPS = 5e9


def _spd_factor(K: sp.spmatrix, T: np.ndarray, dofs: np.ndarray):
    """A solver ``B -> K_ff^-1 B`` (``B`` (len(dofs), c)) for the SPD block ``K_ff`` of ``K``
    (3n, 3n) on the free ``dofs`` (3 per node, ascending) of a mesh with tets ``T``, factored
    once. A banded Cholesky in the
    nodes' reverse Cuthill-McKee order when its cost is under :data:`BANDED_FLOPS` (slender
    bodies, as rings, rods and tentacles are), else one SuperLU factorization (symmetric
    mode, minimum degree on ``A + A^T``). The band is stored in LAPACK's (Fortran) order and
    factored by ``dpbtrf`` itself: scipy's ``cholesky_banded`` copies a C-ordered band first
    (100 ms of 162 on the 20K-tet ring's factorization at load 4 is the factorization)."""
    from scipy.linalg import lapack
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    from scipy.sparse.linalg import splu

    n = int(T.max()) + 1
    rows, cols = T[:, np.repeat(np.arange(4), 4)].ravel(), T[:, np.tile(np.arange(4), 4)].ravel()
    G = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))  # the nodes' graph
    order = (3 * reverse_cuthill_mckee(G, symmetric_mode=True)[:, None] + np.arange(3)).ravel()
    where = np.full(3 * n, -1)
    where[dofs] = np.arange(len(dofs))
    P = where[order]
    P = P[P >= 0]  # the free dofs in that order, as rows of B
    K = sp.csr_matrix(K)
    lower = sp.tril(K[dofs[P]][:, dofs[P]]).tocoo()  # K_ff's lower triangle in that order
    band = int((lower.row - lower.col).max(initial=0))
    if len(P) * float(band + 1) ** 2 <= BANDED_FLOPS:
        ab = np.zeros((band + 1, len(P)), order="F")
        ab[lower.row - lower.col, lower.col] = lower.data
        c, info = lapack.dpbtrf(ab, lower=1, overwrite_ab=1)
        if info == 0:

            def banded(B: np.ndarray) -> np.ndarray:
                X = np.empty_like(B)
                X[P] = lapack.dpbtrs(c, B[P], lower=1)[0]
                return X

            return banded
        # not positive definite in floating point: SuperLU pivots
    lu = splu(
        sp.csc_matrix(K[dofs][:, dofs]), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )  # fmt: skip
    return lambda B: lu.solve(np.ascontiguousarray(B))


def stiffness_metric(U: np.ndarray, K: sp.spmatrix) -> np.ndarray:
    """``W`` (k, j) with ``U W`` stiffness-orthonormal (``W^T U^T K U W = I``), the span of
    ``U`` (3n, k) kept but for directions ``U^T K U`` holds below 1e-10 of its largest
    eigenvalue. Fitted to the reduced forces of ``U W``, a cubature weighs every direction
    by the displacement its force error causes (``K^-1``'s norm), not by the force's size."""
    lam, V = np.linalg.eigh(U.T @ (K @ U))
    keep = lam > 1e-10 * lam.max()
    return V[:, keep] / np.sqrt(lam[keep])


def static_modes(
    X: np.ndarray,
    T: np.ndarray,
    material,
    pinned: np.ndarray,
    accelerations=None,
    K: sp.spmatrix | None = None,
    derivatives: bool = False,
    fem: _fem.TetFEM | None = None,
) -> np.ndarray:
    """The static deflections (3n, c) of the mesh ``(X, T)`` under body accelerations, its
    ``pinned`` nodes held: ``K_ff u_f = M a`` with the rest stiffness ``K`` (unprojected
    elastic Hessian at rest; assembled when None) and the lumped masses, one factorization
    for all the fields (:func:`_spd_factor`). By default the fields are a uniform
    :data:`STATIC_ACCELERATION` along x, y and z (c = 3): with them in the basis, a pinned
    body's sag and swing under gravity and its pins' acceleration are those of full space to
    first order, on any mesh.

    With ``derivatives`` their modal derivatives follow (Barbic and James 2005), c (c + 1) / 2
    more columns, pairs ``i <= j`` in row-major order: the second-order static response
    ``D_ij = -K_ff^-1 d2g[S_i, S_j]`` (``d2g``: the elastic gradient's second derivative at
    rest along the two deflections, by central differences of :meth:`.fem.TetFEM.gradient`
    along each deflection and each pair's sum, :data:`DERIVATIVE_STEP`; 12 gradients for
    c = 3), with the same factorization; a shape
    ``X + S q + D (q_i q_j) / 2`` is then the static response to second order in ``q``.
    They are what a linear basis misses when a pinned body swings far: the
    large rotation about its pins (a keyed cylinder of issue 23, unseen between the trained
    ones: 53.9 mm off its held-out bake with the field and the static modes, exact energy;
    3.8 mm with their derivatives too, its own linear model 6.0).

    accelerations : (c, n, 3) float array, m/s^2, optional
        Other acceleration fields (``bench/dynamics.py``: the pins' frame turning).
    fem : the mesh's :class:`.fem.TetFEM` when the caller has one"""
    X = np.asarray(X, dtype=np.float64)
    T = np.asarray(T, dtype=np.int64)
    n = len(X)
    if accelerations is None:
        accelerations = STATIC_ACCELERATION * np.eye(3)[:, None, :].repeat(n, axis=1)
    A = np.asarray(accelerations, dtype=np.float64)
    fem = _fem.TetFEM(X, T, material) if fem is None else fem
    K = fem.hessian(X, project=False) if K is None else K
    m = _fem.mass_matrix(X, T, material.density, lumped=True)
    free = np.ones(3 * n, bool)
    free[(3 * np.asarray(pinned, np.int64)[:, None] + np.arange(3)).ravel()] = False
    idx = np.flatnonzero(free)
    F = (np.asarray(m)[None, :, None] * A).reshape(len(A), 3 * n).T  # (3n, c)
    solve = _spd_factor(K, T, idx)
    S = np.zeros((3 * n, len(A)))
    S[idx] = solve(np.ascontiguousarray(F[idx]))
    if not derivatives:
        return S
    L = float(np.linalg.norm(X.max(0) - X.min(0))) or 1.0
    g0 = 2.0 * fem.gradient(X)  # zero at rest but for rounding

    def curvature(v: np.ndarray) -> np.ndarray:
        """``d2g[v, v]`` (3n,): the gradient's second difference along ``v``."""
        h = DERIVATIVE_STEP * L / max(float(np.abs(v).max()), 1e-300)
        d = (h * v).reshape(n, 3)
        return (fem.gradient(X + d) + fem.gradient(X - d) - g0).ravel() / h**2

    c = S.shape[1]
    own = [curvature(S[:, i]) for i in range(c)]
    pairs = [(i, j) for i in range(c) for j in range(i, c)]
    G = np.empty((3 * n, len(pairs)))
    for col, (i, j) in enumerate(pairs):
        # d2g[a, b] = (d2g[a + b, a + b] - d2g[a, a] - d2g[b, b]) / 2: one more direction
        G[:, col] = own[i] if i == j else (curvature(S[:, i] + S[:, j]) - own[i] - own[j]) / 2
    D = np.zeros((3 * n, len(pairs)))
    D[idx] = -solve(np.ascontiguousarray(G[idx]))
    return np.hstack([S, D])


def rigid_modes(X: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The six rigid modes (3n, 6) of nodes ``X`` (n, 3): translations along x, y, z (metres
    per unit) and infinitesimal rotations ``e_i x (X - centre)`` about x, y, z (metres per
    radian)."""
    d = np.asarray(X, dtype=np.float64) - np.asarray(centre, dtype=np.float64)
    n = len(d)
    P = np.zeros((n, 3, 6))
    P[:, [0, 1, 2], [0, 1, 2]] = 1.0
    P[:, 1, 3], P[:, 2, 3] = -d[:, 2], d[:, 1]  # e_x x d
    P[:, 0, 4], P[:, 2, 4] = d[:, 2], -d[:, 0]  # e_y x d
    P[:, 0, 5], P[:, 1, 5] = -d[:, 1], d[:, 0]  # e_z x d
    return P.reshape(3 * n, 6)


def _rotation(w: np.ndarray) -> np.ndarray:
    """The rotation (3, 3) by the rotation vector ``w`` (3,), radians (Rodrigues; scipy's
    Rotation costs ~0.1 ms a call, more than a small model's step)."""
    a = float(np.linalg.norm(w))
    if a < 1e-300:
        return np.eye(3)
    k = w / a
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(a) * K + (1.0 - math.cos(a)) * (K @ K)


def _orthonormal(R: np.ndarray) -> np.ndarray:
    """``R`` (3, 3), a product of rotations, made orthonormal again (one Newton step of the
    polar decomposition, ``R (3 I - R^T R) / 2``), so the frame's rounding does not grow over
    a long run."""
    return R @ (3.0 * np.eye(3) - R.T @ R) / 2.0


def body_frames(X: np.ndarray, x: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best rigid motion of each frame: ``(R (F, 3, 3), c (F, 3))`` minimizing
    ``sum_i m_i |R_f X_i + c_f - x_fi|^2`` (mass-weighted Kabsch about the centre of mass:
    ``R_f`` maps the rest centre of mass ``X_bar`` to the frame's, ``c_f = x_bar_f - R_f X_bar``).

    Parameters
    ----------
    X : (n, 3) rest positions, metres; x : (F, n, 3) or (n, 3) positions, metres
    mass : (n,) lumped masses, kg
    """
    x = np.asarray(x, dtype=np.float64)
    one = x.ndim == 2
    x = x[None] if one else x
    w = np.asarray(mass, dtype=np.float64) / float(np.sum(mass))
    Xb = w @ X
    xb = np.einsum("i,fia->fa", w, x)
    H = np.einsum("i,fia,ib->fab", w, x - xb[:, None], X - Xb)  # (F, 3, 3)
    A, _, Bt = np.linalg.svd(H)
    d = np.sign(np.linalg.det(A @ Bt))
    A[:, :, 2] *= np.where(d == 0, 1.0, d)[:, None]
    R = A @ Bt
    c = xb - np.einsum("fab,b->fa", R, Xb)
    return (R[0], c[0]) if one else (R, c)


def mesh_seed(seed: int, X: np.ndarray, T: np.ndarray) -> int:
    """The cubature seed of a mesh: ``seed`` mixed with the mesh's hash (a mesh keeps its
    cubature across runs; two meshes do not share their random draws)."""
    h = int(_mesh_hash(np.asarray(X, np.float64), np.asarray(T, np.int64))[:12], 16)
    return int(np.random.SeedSequence([int(seed), h]).generate_state(1)[0])


def inclusion_probability(n: int, m: int) -> float:
    """Probability that a tet is touched by ``m`` distinct vertices drawn uniformly from ``n``:
    ``1 - C(n-4, m) / C(n, m) = 1 - prod_{j<4} (n - m - j) / (n - j)``."""
    if m >= n - 3:
        return 1.0
    return 1.0 - math.prod((n - m - j) / (n - j) for j in range(4))


def random_cubature(T: np.ndarray, n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random vertex cubature: ``m`` distinct vertices drawn uniformly (``seed``), every element
    incident to one, each weighted ``1 / pi`` (:func:`inclusion_probability`), which makes
    ``sum_e w_e V_e(x)`` an unbiased estimate of ``V(x)`` (Horvitz-Thompson).

    Returns
    -------
    elements : (c,) int array; weights : (c,) float array
    """
    T = np.asarray(T, dtype=np.int64)
    m = int(min(max(m, 1), n))
    picked = np.zeros(n, dtype=bool)
    picked[np.random.default_rng(seed).choice(n, size=m, replace=False)] = True
    elements = np.flatnonzero(picked[T].any(axis=1))
    return elements, np.full(len(elements), 1.0 / inclusion_probability(n, m))


def fitted_cubature(
    X: np.ndarray,
    T: np.ndarray,
    material: _fem.Material,
    U: np.ndarray,
    codes: np.ndarray,
    *,
    target: float = CUBATURE_TARGET,
    max_elements: int = 500,
    poses: int = CUBATURE_POSES,
    pool: int = CUBATURE_POOL,
    seed: int = 0,
    basis_key: bytes | None = None,
    fem: _fem.TetFEM | None = None,
    metric: np.ndarray | None = None,
) -> Cubature:
    """Cubature fitted on a mesh to its basis (An et al. 2008, :func:`.cubature.optimized_cubature`):
    non-negative element weights whose reduced forces match the exact ``U^T g(x)`` at the poses
    ``x = X + U q`` of ``poses`` of the latent ``codes`` (evenly spaced over them), to the
    relative error ``target`` or with ``max_elements`` elements. Candidates come from one
    seeded draw of ``pool`` elements (their columns computed once), which keeps the fit
    within a mesh swap's time.

    Parameters
    ----------
    X : (n, 3) float array, metres; T : (m, 4) int array
    U : (3n, r) float array, the field's basis on the mesh (pinned rows zero)
    codes : (c, r) float array, latent codes of training frames (the model file's
        ``cubature_codes``)

    ``fem``: the mesh's :class:`.fem.TetFEM` when the caller has one; ``metric`` (k, j): fit
    the forces of the basis ``U @ metric`` (the same poses; see :func:`stiffness_metric`).

    The result is kept (a few per process) under a digest of everything it depends on, so
    a mesh loaded again gets it back at once (``info["cached"]``). ``basis_key`` (bytes that
    determine ``U``: the field's weights and the pins) stands for ``U`` in that digest when
    given: a basis evaluated again need not repeat its last bits (BLAS kernels may round
    differently with the arrays' alignment), and the rule would then be fitted again.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    T = np.ascontiguousarray(T, dtype=np.int64)
    U = np.ascontiguousarray(U, dtype=np.float64)
    codes = np.ascontiguousarray(codes, dtype=np.float64)
    h = hashlib.blake2b(digest_size=16)
    for a in (X, T, codes) + ((U,) if basis_key is None else ()):
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    if basis_key is not None:
        h.update(str(U.shape).encode())
        h.update(basis_key)
    if metric is not None:  # with a basis key, a function of the basis and the mesh
        metric = np.ascontiguousarray(metric, dtype=np.float64)
        h.update(str(metric.shape).encode())
        h.update(b"metric" if basis_key is not None else metric.tobytes())
    h.update(json.dumps([material.to_dict(), target, max_elements, poses, pool, seed]).encode())
    key = h.hexdigest()
    if key in _FITTED_CACHE:
        c = _FITTED_CACHE.pop(key)  # the most recently used goes last, evicted last
        _FITTED_CACHE[key] = c
        return Cubature(c.elements.copy(), c.weights.copy(), {**c.info, "cached": True})
    pick = np.unique(np.linspace(0, len(codes) - 1, min(int(poses), len(codes))).round())
    x = X[None] + (codes[pick.astype(np.int64)] @ U.T).reshape(len(pick), len(X), 3)
    fem = _fem.TetFEM(X, T, material) if fem is None else fem
    c = optimized_cubature(
        fem,
        U if metric is None else U @ metric,
        x,
        target=target,
        max_elements=max_elements,
        pool=pool,
        seed=seed,
    )
    c.info["cached"] = False
    while len(_FITTED_CACHE) >= _FITTED_CACHE_SIZE:
        _FITTED_CACHE.pop(next(iter(_FITTED_CACHE)))
    _FITTED_CACHE[key] = c
    return Cubature(c.elements.copy(), c.weights.copy(), dict(c.info))


# ------------------------------------------------------------------------------------------
# The runtime
# ------------------------------------------------------------------------------------------


@dataclass
class SwapReport:
    """What a mesh swap did: seconds it took, kinetic energy before and after (J; after is
    never more), the new mesh's nodes, elements and cubature elements, its domain report and
    how its cubature was made (``method``: "optimized" (fitted), "random" or "exact";
    ``seconds``; for a fitted one :class:`.cubature.Cubature`'s ``info``, with ``cached``)."""

    seconds: float
    kinetic_before: float
    kinetic_after: float
    vertices: int
    elements: int
    cubature_elements: int
    domain: DomainReport
    cubature: dict = dataclasses.field(default_factory=dict)


class LicromSimulation(SubspaceSimulation):
    """Backward Euler in the span of a neural field evaluated on a mesh.

    Parameters
    ----------
    field : Field
    X : (n, 3) float array, rest positions of the mesh it runs on (metres, the model's space)
    T : (m, 4) int array
    material : fem.Material
    settings : SimSettings
    pins : PinPoints, the model's pins (None: none)
    pinned : (p,) int array, the mesh's pinned nodes (its pin group); None: the nodes at the
        model's pinned points (:meth:`PinPoints.select`). Either way they are checked against
        the model's pins (:attr:`pin_report`, warned about) and the basis is zero there
    domain : Domain to report the mesh against (None: not checked)
    cubature : "fitted" (default): weights fitted on each mesh to the reduced forces of the
        ``codes`` (:func:`fitted_cubature`; without codes, as "random" with a warning);
        "random": :func:`random_cubature` on ``cubature_vertices`` vertices
    codes : (c, r) float array, latent codes of training frames (the fitted cubature's poses)
    cubature_target, max_cubature, cubature_poses : the fitted cubature's relative force
        error, most elements and poses (:func:`fitted_cubature`)
    cubature_vertices : vertices of the random cubature (0: every element, exact, in either
        mode)
    seed : seed of the cubature (mixed with each mesh's hash)
    solver : "newton" (default) or "gradient" (the paper's scheme)
    gradient_iterations : steps of the gradient scheme per substep
    colliders : list of Collider
    origin : (3,) float array, metres: the point of ``X``'s space that is the reference
        space's origin (the field, its pins and its domain are evaluated at ``X - origin``;
        the simulation itself runs in ``X``'s space); None: zero
    floating : the field was trained in the body frame (:data:`FRAME_FLOATING`): on a mesh
        with no pinned node the basis gets six rigid modes (:func:`rigid_modes`, about the
        training domain's centre) and their motion is moved into the frame after every step
        (see the module doc); ``q`` is then (r + 6,)
    invariant_rotation : with a floating frame, evaluate the elastic energy through
        :meth:`_rotation_invariance` (the ``invariant_rotation`` setting), so the internal
        forces keep the reduced angular momentum
    static : on a mesh with pinned nodes, the mesh's three :func:`static_modes` join the
        field's basis (the ``static_modes`` setting); ``q`` is then (r + 3,), the same
        coordinates on every mesh (the sag of that mesh under 1 g along x, y, z)
    static_derivatives : with ``static``, the static modes' six modal derivatives join them
        (:func:`static_modes`' ``derivatives``; the ``static_derivatives`` setting); ``q``
        is then (r + 9,)
    """

    def __init__(
        self,
        field: Field,
        X: np.ndarray,
        T: np.ndarray,
        material: _fem.Material,
        settings: SimSettings | None = None,
        pins: PinPoints | None = None,
        domain: Domain | None = None,
        cubature_vertices: int = 200,
        seed: int = 0,
        solver: str = "newton",
        gradient_iterations: int = 10,
        colliders: list[Collider] | None = None,
        origin: np.ndarray | None = None,
        cubature: str = "fitted",
        codes: np.ndarray | None = None,
        cubature_target: float = CUBATURE_TARGET,
        max_cubature: int = 500,
        cubature_poses: int = CUBATURE_POSES,
        floating: bool = False,
        invariant_rotation: bool = False,
        pinned: np.ndarray | None = None,
        static: bool = False,
        static_derivatives: bool = False,
    ) -> None:
        if solver not in SOLVERS:
            raise SimulationError(f"Unknown LiCROM solver {solver!r}; use one of {SOLVERS}.")
        if cubature not in CUBATURES:
            raise SimulationError(f"Unknown LiCROM cubature {cubature!r}; use one of {CUBATURES}.")
        self.cubature = cubature
        self.codes = None if codes is None else np.asarray(codes, dtype=np.float64)
        self.cubature_target = float(cubature_target)
        self.max_cubature = int(max_cubature)
        self.cubature_poses = int(cubature_poses)
        self.cubature_info: dict = {}
        self.warnings: list[str] = []
        if cubature == "fitted" and (self.codes is None or len(self.codes) == 0):
            self.cubature = "random"
            self.warnings.append(
                "This LiCROM model carries no latent codes of its training frames (it predates "
                "fitted cubature), so its cubature is random vertices, which gives the body an "
                "uneven stiffness; retrain it for a cubature fitted on each mesh."
            )
        self.field = field
        self.material = material
        self.pins = pins or PinPoints.none()
        self.domain = domain
        self.cubature_vertices = int(cubature_vertices)
        self.seed = int(seed)
        self.solver = solver
        self.gradient_iterations = int(gradient_iterations)
        self.origin = np.zeros(3) if origin is None else np.asarray(origin, np.float64).reshape(3)
        self.floating_field = bool(floating)
        self.invariant_rotation = bool(invariant_rotation)
        self.static = bool(static)
        self.static_derivatives = bool(static_derivatives)
        # the rotations' centre: one point of the model's space, the same on every mesh, so a
        # state carries over a mesh swap (any point spans the same six modes)
        self.rigid_centre = np.asarray(field.center, np.float64) + self.origin
        self._build(X, T, settings, colliders, pinned)
        self.reset()

    def _basis_key(self, pinned: np.ndarray) -> bytes:
        """Bytes that determine the basis on a mesh besides its nodes: the field's weights,
        the origin and the pinned nodes (for :func:`fitted_cubature`'s cache)."""
        h = hashlib.blake2b(digest_size=16)
        arrays, _ = self.field.to_arrays()
        for name in sorted(arrays):
            h.update(name.encode())
            h.update(np.ascontiguousarray(arrays[name]).tobytes())
        h.update(np.ascontiguousarray(self.origin, dtype=np.float64).tobytes())
        h.update(np.ascontiguousarray(pinned, dtype=np.int64).tobytes())
        h.update(b"static" if self.static else b"field")
        h.update(b"derivatives" if self.static_derivatives else b"")
        return h.digest()

    def _build(self, X, T, settings, colliders, pinned=None) -> None:
        """Basis, pins, cubature and everything :meth:`_setup` derives, on mesh ``(X, T)``."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        T = np.ascontiguousarray(T, dtype=np.int64)
        if X.ndim != 2 or X.shape[1] != 3 or T.ndim != 2 or T.shape[1] != 4 or len(T) == 0:
            raise SimulationError("A LiCROM mesh needs nodes (n, 3) and tets (m, 4).")
        if T.min() < 0 or T.max() >= len(X):
            raise SimulationError("The mesh's tets index nodes it does not have.")
        t0 = time.perf_counter()
        X_ref = X - self.origin
        U = self.field.basis(X_ref)
        self.field_seconds = time.perf_counter() - t0
        if pinned is None:
            pinned = self.pins.select(X_ref)
        pinned = np.unique(np.asarray(pinned, dtype=np.int64))
        if pinned.size and (pinned[0] < 0 or pinned[-1] >= len(X)):
            raise SimulationError("The pinned nodes given are not nodes of the mesh.")
        if pinned.size:
            U.reshape(len(X), 3, -1)[pinned] = 0.0
        self.pin_report = self.pins.check(X_ref, pinned) if (self.pins or pinned.size) else None
        if self.pin_report is not None and self.pin_report.warn:
            msg = self.pin_report.message()
            self.warnings.append(msg)
            warnings.warn(msg, PinWarning, stacklevel=3)
        self.domain_report = self.domain.report(X_ref) if self.domain is not None else None
        if self.domain_report is not None and self.domain_report.warn:
            msg = self.domain_report.message()
            self.warnings.append(msg)
            warnings.warn(msg, OutOfDomainWarning, stacklevel=3)
        # the field's coordinates of the codes (a model with Static Derivatives keeps the
        # training frames' static coordinates after them)
        codes = None if self.codes is None else self.codes[:, : U.shape[1]]
        K, self.static_seconds = None, 0.0
        fem = _fem.TetFEM(X, T, self.material)  # shared by the static modes and the cubature
        if self.static and pinned.size:
            # the mesh's own sag: what a field fits only as well as it trained (a ring of the
            # issue's family sagged 9% less than full space with the field alone)
            t0 = time.perf_counter()
            K = fem.hessian(X, project=False)  # the rest stiffness (CSR)
            S = static_modes(
                X, T, self.material, pinned, K=K, derivatives=self.static_derivatives, fem=fem
            )
            U = np.hstack([U, S])
            self.static_seconds = time.perf_counter() - t0
            if codes is not None and self.codes.shape[1] >= U.shape[1]:
                codes = self.codes[:, : U.shape[1]]  # the training frames' own
            elif codes is not None and len(codes):
                # codes of the field alone: the cubature's poses sag a little more, up to
                # 0.3 g along each axis, seeded (codes in the whole basis are the training
                # frames' own coordinates: see training_codes)
                rng = np.random.default_rng([self.seed, 3])
                s = STATIC_POSES * rng.uniform(-1.0, 1.0, (len(codes), 3))
                if self.static_derivatives:  # and bend as far as that sag's second order
                    i, j = np.triu_indices(3)
                    s = np.hstack([s, 0.5 * s[:, i] * s[:, j]])
                codes = np.hstack([codes, s])
        t0 = time.perf_counter()
        cub, self.cubature_info = None, {"method": "exact"}
        if self.cubature_vertices > 0 and self.cubature == "fitted":
            try:
                c = fitted_cubature(
                    X,
                    T,
                    self.material,
                    U,
                    codes,
                    target=self.cubature_target,
                    max_elements=self.max_cubature,
                    poses=self.cubature_poses,
                    pool=CUBATURE_POOL,
                    seed=mesh_seed(self.seed, X, T),
                    basis_key=self._basis_key(pinned),
                    fem=fem,
                    # with the static modes, fitted to the forces in a stiffness-orthonormal
                    # basis of the same span: the sag's large, easy forces would otherwise
                    # meet the target alone and leave the field's part unfitted
                    metric=None if K is None else stiffness_metric(U, K),
                )
                cub, self.cubature_info = (c.elements, c.weights), dict(c.info)
            except NeuralRomError:
                # no pose deforms this mesh (its nodes all pinned, or codes of rest): nothing
                # to fit, and any rule is exact on it
                self.cubature_info = {"fallback": "no pose deforms this mesh"}
        if self.cubature_vertices > 0 and cub is None:
            cub = random_cubature(T, len(X), self.cubature_vertices, mesh_seed(self.seed, X, T))
            self.cubature_info.update(method="random", vertices=self.cubature_vertices)
        self.cubature_info["seconds"] = time.perf_counter() - t0
        self.T = T
        self.r = U.shape[1]
        # a free body of a body-frame field: the rigid modes join the basis in the solve
        self.floating = self.floating_field and not pinned.size
        if self.floating:
            U = np.hstack([U, rigid_modes(X, self.rigid_centre)])
        self._setup(X, T, self.material, U, settings, pinned, cub, None, colliders)
        self._gd = None
        # the contact terms kept for the last q and the plane rows belong to the old basis
        self.__dict__.pop("_contact_memo", None)
        self.__dict__.pop("_plane_cache", None)
        self._moments = self._invariance = None
        if self.floating:
            # mass moments of y = X + U q about the rest centre of mass, linear in q: the
            # Kabsch fit of a predicted pose costs O(9 k) (see _predict_frame)
            w = self.mass / self.mass.sum()
            Xb = w @ self.X
            Uv = self.U.reshape(len(self.X), 3, self.k)
            dX = (self.mass[:, None] * (self.X - Xb)).T  # (3, n)
            S0 = dX @ self.X  # sum_i m_i (X_i - Xb) X_i^T, transposed below
            S = np.einsum("bn,nak->kab", dX, Uv)  # (k, 3, 3): sum_i m_i U_ij (X_i - Xb)^T
            self._moments = (Xb, S0.T, S, np.einsum("n,nak->ak", w, Uv))
            # Z(q) = M~^{-1} U^T M (e x (X - o + U q)) = E_rot + M~^{-1} G q, with
            # G_(l, e), j = sum_i m_i U_il . (e x U_ij) (see _rotation_invariance)
            G = np.empty((self.k, 3, self.k))
            mU = self.mass[:, None, None] * Uv
            for e in range(3):
                eU = np.cross(np.eye(3)[e][None, :, None], Uv, axis=1)  # (n, 3, k)
                G[:, e, :] = np.einsum("nal,naj->lj", mU, eU)
            self._rot_Z0 = np.zeros((self.k, 3))
            self._rot_Z0[self.r + 3 : self.r + 6] = np.eye(3)
            self._M_inv_G = np.linalg.solve(self.M_red, G.reshape(self.k, -1)).reshape(G.shape)

    _held_forces = None

    def reset(self, q: np.ndarray | None = None, qdot: np.ndarray | None = None) -> None:
        super().reset(q, qdot)
        self._held_forces = None

    def set_state(self, state: dict) -> None:
        """:meth:`SubspaceSimulation.set_state`; the pins' targets of a state saved on another
        mesh of the object (another pinned count) are those of this mesh's pinned nodes in
        the state's frame."""
        super().set_state(state)
        if len(self.pin_targets) != len(self.pinned):
            self.pin_targets = self.pose.apply(self.X[self.pinned])
        held = state.get("held_forces")
        self._held_forces = None
        if held is not None and len(held[1]) and max(held[0], default=-1) < len(self.X):
            self._held_forces = tuple(np.array(a, dtype=a_t) for a, a_t in zip(held, HELD_TYPES))

    def get_state(self) -> dict:
        """:meth:`SubspaceSimulation.get_state`, with a floating frame's held forces."""
        state = super().get_state()
        if getattr(self, "_held_forces", None) is not None:
            state["held_forces"] = [np.array(a).tolist() for a in self._held_forces]
        return state

    def project_forces(self, forces: np.ndarray) -> np.ndarray:
        """Reduced external force ``U^T f`` of per-vertex forces (n, 3) given in the frame's
        axes. With a floating frame the forces are also kept in world axes (loaded rows only),
        so each substep takes them into the frame it solves in: a poke keeps its world
        direction while the body turns under it."""
        f = super().project_forces(forces)
        if self.floating:
            F = np.asarray(forces, dtype=float).reshape(-1, 3)
            rows = np.flatnonzero(np.any(F != 0, axis=1))
            self._held_forces = (rows, F[rows] @ self.pose.R.T, f)
        return f

    # ---------------------------------------------------------------------- mesh swaps
    def kinetic_energy(self) -> float:
        """``1/2 qdot^T M~ qdot`` (J) on the current mesh; with a floating frame, the kinetic
        energy of the velocity ``(x_n - x_{n-1}) / h`` the state and the frame's last two
        poses give (the rigid motion included)."""
        if not self.floating or self.pose_prev is self.pose:
            return 0.5 * float(self.qdot @ self.M_red @ self.qdot)
        h = self.settings.dt / self.settings.substeps
        n = len(self.X)
        y = self.X + (self.U @ self.q).reshape(n, 3)
        y_p = self.X + (self.U @ (self.q - h * self.qdot)).reshape(n, 3)
        now, prev = self.pose, self.pose_prev
        v = (y - ((y_p @ prev.R.T + prev.c - now.c) @ now.R)) / h  # in the frame of now
        return 0.5 * float(self.mass @ (v**2).sum(1))

    def _settle_frame(self) -> None:
        """Carry the floating frame's velocity in ``qdot`` (the last pose's image of the
        previous positions projected on the basis) and stop the frame: the motion is the
        same but for the part of the velocity outside the basis."""
        if self.pose_prev is self.pose:
            return
        h = self.settings.dt / self.settings.substeps
        q_p = self.q - h * self.qdot
        z = np.zeros_like(q_p)
        q_p = self.pin_frame().targets(h, q_p, z, self.pose_prev, self.pose_prev, self.pose)[1]
        self.qdot = (self.q - q_p) / h
        self.pose_prev = self.pose

    def _predict_frame(self, h: float) -> Pose:
        """The frame a step of ``h`` s goes into: the best rigid motion (mass-weighted Kabsch
        of the rest mesh) onto the inertial prediction ``2 x_n - x_{n-1}``, from the state's
        mass moments (O(k), no pass over the mesh). Solved in it, the rigid modes only
        correct the prediction, so a fast spin is not linearized over a whole step."""
        Xb, S0, S, Ub = self._moments
        now, prev = self.pose, self.pose_prev
        q_n = self.q
        q_p = q_n - h * self.qdot
        Q = now.R.T @ prev.R
        d = now.R.T @ (prev.c - now.c)
        # H = sum_i m_i x~_i (X_i - Xb)^T with x~ = 2 y_n - (Q y_p + d) in the frame of now
        H = 2.0 * (S0 + np.tensordot(q_n, S, 1)) - Q @ (S0 + np.tensordot(q_p, S, 1))
        A, _, Bt = np.linalg.svd(H)
        if np.linalg.det(A @ Bt) < 0:
            A[:, 2] = -A[:, 2]
        K = A @ Bt
        mean = 2.0 * (Xb + Ub @ q_n) - (Q @ (Xb + Ub @ q_p) + d)
        return Pose(_orthonormal(now.R @ K), now.R @ (mean - K @ Xb) + now.c)

    def _turned(self, pose: Pose, q: np.ndarray) -> Pose:
        """``pose`` followed by the rigid part of ``q`` (translation ``t``, rotation vector
        ``w`` about :attr:`rigid_centre` ``o``) as a rigid motion: ``y -> R_w (y - o) + o + t``."""
        r, o = self.r, self.rigid_centre
        t, w = q[r : r + 3], q[r + 3 : r + 6]
        dR = _rotation(w)
        return Pose(_orthonormal(pose.R @ dR), pose.R @ (o + t - dR @ o) + pose.c)

    def _move_rigid_into_frame(self, q_n: np.ndarray, h: float, frame_n: Pose) -> None:
        """After a step of ``h`` s from ``q_n`` in the frame ``pose`` (the frame stayed), move
        the rigid part of the new ``q`` (translation ``t``, rotation vector ``w`` about
        :attr:`rigid_centre`) into the frame: the new frame is ``pose`` followed by the rigid
        motion ``y -> R_w (y - o) + o + t``, ``q`` the projection of the solved positions in
        it and ``qdot = (q - q_n) / h``, so the frame's last two poses carry the rigid
        velocity and :class:`.frame.FrameMixin` the exact inertial terms of its motion."""
        now = self.pose
        new = self._turned(now, self.q)
        z = np.zeros_like(self.q)
        q = self.pin_frame().targets(h, self.q, z, now, now, new)[1]
        self.qdot = (q - q_n) / h
        self.q = q
        self.pose_prev, self.pose = frame_n, new

    def frame_of(self, x: np.ndarray) -> Pose:
        """The frame of world positions ``x`` (n, 3): with a floating frame the best rigid
        motion of the rest mesh onto them (:func:`body_frames`), else the pins' frame."""
        if not self.floating:
            return super().frame_of(x)
        R, c = body_frames(self.X, np.asarray(x, dtype=np.float64), self.mass)
        return Pose(R, c)

    def swap_mesh(
        self, X: np.ndarray, T: np.ndarray, pinned: np.ndarray | None = None
    ) -> SwapReport:
        """Continue on another mesh of the object (a remesh, a cut, a hole, elements removed)
        from the current state: ``q``, ``qdot``, the reduced forces, the colliders and the
        pins' frame are kept; basis, masses, pins and cubature are rebuilt on ``(X, T)``.
        ``qdot`` is scaled down when the new reduced mass would raise the kinetic energy.
        With Static Modes the static coordinates are each mesh's own sag under 1 g, so the
        shape moves at once by the two meshes' sag difference at them (a more compliant mesh
        sags more at the same coordinates).
        ``pinned`` (p,): the new mesh's pinned nodes (its pin group); None: its nodes at the
        rest positions of the pinned nodes now (an edit that kept the pinned vertices).

        Raises SimulationError (and changes nothing) for a mesh that is not a tet mesh.
        """
        t0 = time.perf_counter()
        before = self.kinetic_energy()
        old = self.__dict__.copy()
        state = self.get_state()
        # the displacement and velocity of the old mesh's nodes in the frame
        shape = (self.X, (self.U @ self.q).reshape(-1, 3), (self.U @ self.qdot).reshape(-1, 3))
        if pinned is None and self.pinned.size:
            d = cKDTree(self.X[self.pinned]).query(np.asarray(X, dtype=np.float64))[0]
            pinned = np.flatnonzero(d <= max(self.pins.tolerance, 1e-9))
        try:
            self._build(X, T, self.settings, self.colliders, pinned)
            if self.k != len(state["q"]):
                raise SimulationError(
                    "The new mesh has pinned nodes where the old one had none (or the reverse): "
                    "a free body's state (six rigid coordinates) does not carry over to a "
                    "pinned one. Swap to a mesh pinned as the old one, or start a new run."
                )
        except Exception:
            self.__dict__.update(old)
            raise
        self._pin_frame = None
        self.set_state(state)
        if self.static_derivatives and self.static and self.pinned.size:
            self._keep_shape(*shape)
        self._held_forces = None  # rows of the old mesh; its reduced force is kept
        # the pins' targets are the new pinned nodes where the frame has put them
        self.pin_targets = self.pose.apply(self.X[self.pinned])
        after = self.kinetic_energy()
        if after > before and self.floating:
            # the frame's velocity into qdot (projected: no more energy), where it can scale
            self._settle_frame()
            after = self.kinetic_energy()
        if after > before:
            # a hair under the old energy, so the rounding of the scaled one cannot top it
            scale = math.sqrt(before / after) * (1.0 - 1e-12)
            self.qdot = self.qdot * scale if after > 0 else self.qdot
            after = self.kinetic_energy()
        return SwapReport(
            time.perf_counter() - t0,
            before,
            after,
            len(self.X),
            len(self.T),
            len(self.elements),
            self.domain_report,
            dict(self.cubature_info),
        )

    def _keep_shape(self, X_old: np.ndarray, u_old: np.ndarray, v_old: np.ndarray) -> None:
        """After a swap with Static Derivatives: the static coordinates and their derivatives'
        (the mesh's own block, after the field's) refitted, mass-weighted least squares, to
        the displacement ``u_old`` and velocity ``v_old`` (n_old, 3) the old mesh ``X_old``
        had at the nodes the two meshes share (rest positions within 1e-9 of the mesh's
        size); the field's coordinates are kept. The second-order block would otherwise
        move the shape by the two meshes' second-order terms at once. A mesh sharing fewer
        than four nodes (a remesh) keeps the coordinates as they are."""
        size = float(np.linalg.norm(self.X.max(0) - self.X.min(0))) or 1.0
        d, j = cKDTree(X_old).query(self.X)
        shared = np.flatnonzero(d <= 1e-9 * size)
        if len(shared) < 4:
            return
        f, n = self.field.r, len(self.X)
        block = np.arange(f, self.r)
        Uv = self.U.reshape(n, 3, self.k)[shared]
        w = np.sqrt(self.mass[shared])[:, None, None]
        A = (w * Uv[:, :, block]).reshape(-1, len(block))
        for name, target in (("q", u_old), ("qdot", v_old)):
            c = getattr(self, name).copy()
            rest = Uv[:, :, :f] @ c[:f]  # the field's part at the shared nodes
            b = (w[:, :, 0] * (target[j[shared]] - rest)).ravel()
            c[block] = np.linalg.lstsq(A, b, rcond=None)[0]
            setattr(self, name, c)

    # ------------------------------------------------------------------------- solvers
    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        """Advance one frame with the Newton solver (default) or the paper's gradient steps;
        with a floating frame, each substep's rigid motion is then moved into the frame."""
        solve = self._gradient_descent if self.solver == "gradient" else self._backward_euler
        if not self.floating:
            return run_frame(self, inputs, solve, "LiCROM")

        n_sub, done = int(self.settings.substeps), [0]

        def substep(h, f_ext, colliders, pose=None):
            start = (self.q, self.qdot, self.pose, self.pose_prev)
            new = self._predict_frame(h)
            if self.invariant_rotation:
                self._invariance = self._rotation_invariance(self.q)
            done[0] += 1
            held = self._held_forces
            iters = 0
            for attempt in range(FRAME_SOLVES):
                f = f_ext
                if held is not None and len(held[0]):
                    # run_frame projected this frame's forces in the frame at its start:
                    # their share of this substep's force is taken in the frame solved in
                    rows, F, f_start = held
                    Ur = self.U.reshape(-1, 3, self.k)[rows]
                    f_new = np.einsum("rak,ra->k", Ur, F @ new.R)
                    f = f_ext + (done[0] / n_sub) * (f_new - f_start)
                rep = solve(h, f, colliders, new)
                iters += rep.newton_iters
                if self.q is start[0]:  # not accepted: run_frame restores and says so
                    return rep
                w = float(np.linalg.norm(self.q[self.r + 3 : self.r + 6]))
                if w <= FRAME_TURN or attempt == FRAME_SOLVES - 1:
                    break
                # the forces turned the body further than its inertia predicted: a turn this
                # large is not linear in the rotation modes, so solve again in the turned frame
                new = self._turned(new, self.q)
                self.q, self.qdot, self.pose, self.pose_prev = start
            rep.newton_iters = iters
            self._move_rigid_into_frame(start[0], h, start[2])
            return rep

        return run_frame(self, inputs, substep, "LiCROM")

    def _gradient_setup(self, h: float):
        """``(cho(M~/h^2), step)`` of the gradient scheme for substep ``h``: the step
        ``1 / (1 + lambda_max(h^2 M~^{-1} K~_rest))`` keeps the iteration stable."""
        if self._gd is None or self._gd[0] != h:
            K = self._elastic(np.zeros(self.k), 2, project=False)[2]
            lam = float(eigh(K, self.M_red, eigvals_only=True)[-1]) * h**2
            self._gd = (h, cho_factor(self.M_red / h**2), 1.0 / (1.0 + max(lam, 0.0)), K)
        return self._gd[1:]

    def _gradient_descent(self, h: float, f_ext: np.ndarray, colliders, pose=None) -> StepReport:
        """The paper's minimization (sec. 5): from the explicit prediction, a fixed number of
        mass-preconditioned gradient steps on the incremental potential (eq. 9-10)."""
        s = self.settings
        cho, a, K0 = self._gradient_setup(h)
        q_tilde, q_damp, f_grav, colliders = self.step_terms(h, pose, colliders)
        f = f_ext + f_grav
        M_h = self.M_red / h**2
        D_h = self.M_red * (s.damping_alpha / h) + K0 * (s.damping_beta / h)
        q = q_tilde.copy()
        rep = StepReport(substeps=1)
        for _ in range(max(self.gradient_iterations, 1)):
            g = M_h @ (q - q_tilde) + D_h @ (q - q_damp) + self._elastic(q, 1)[1] - f
            g_c = self._contact(q, colliders, hessian=False)[1]
            if g_c is not None:
                g = g + g_c
            if not np.all(np.isfinite(g)):  # diverged: run_frame restores and says so
                rep.converged = rep.line_search_ok = False
                return rep
            q = q - a * cho_solve(cho, g)
            rep.newton_iters += 1
        rep.converged = bool(np.all(np.isfinite(q)))
        rep.line_search_ok = rep.converged
        if rep.converged:
            self.qdot = (q - self.q) / h
            self.q = q
            self._advance_frame(pose)
        return rep

    def _elastic(self, q: np.ndarray, order: int, project: bool = True):
        """:meth:`SubspaceSimulation._elastic`; with a floating frame, at ``S q``
        (:meth:`_rotation_invariance`), so the energy does not change along the subspace's
        best image of an infinitesimal rotation of the body's shape at the substep's start."""
        S = self._invariance if self.floating else None
        if S is None:
            return super()._elastic(q, order, project)
        e, g, H = super()._elastic(S @ q, order, project)
        return e, None if g is None else S.T @ g, None if H is None else S.T @ H @ S

    _invariance = None

    def _rotation_invariance(self, q: np.ndarray) -> np.ndarray:
        """The map ``S`` (k, k) the elastic energy is evaluated through in a substep from
        ``q``: it zeroes the rotation coordinates by moving along ``Z``, the mass-weighted
        projections on the basis of the infinitesimal rotations ``e x (y - o)`` of the shape
        ``y = X + U q`` (``S Z = 0``, ``S = I - Z (E^T Z)^{-1} E^T``).

        The rotation modes turn the rest shape (``e x (X - o)``), not the deformed one: a
        linear subspace's internal forces then carry a torque ``-<(e x u)_perp, f>`` (the
        part of ``e x u`` outside the basis), and an impact set a free body spinning (a
        dropped ring yawed at 0.015 degrees a frame on the ground). With the energy
        invariant along ``Z`` the reduced angular momentum ``Z^T M~ qdot`` changes by the
        external torques only."""
        r = self.r
        Z = self._rot_Z0 + self._M_inv_G @ q  # (k, 3)
        E = np.zeros((self.k, 3))
        E[r + 3 : r + 6] = np.eye(3)
        return np.eye(self.k) - Z @ np.linalg.solve(Z[r + 3 : r + 6], E.T)

    # ------------------------------------------------------------- poses <-> states
    def latent_of(self, x: np.ndarray) -> np.ndarray:
        """The latent code (k,) of world positions ``x`` (n, 3) of this mesh: the mass-weighted
        least-squares fit on the basis in the frame of ``x`` (the runtime never needs the
        encoder); ``k = r``, or ``r + 6`` with a floating frame (the rigid coordinates last,
        near zero: the frame is ``x``'s best rigid motion)."""
        y, _, _ = self._in_pin_frame(np.asarray(x, dtype=np.float64))
        return self.closest_q(y)


# ------------------------------------------------------------------------------------------
# Model files
# ------------------------------------------------------------------------------------------


def save(
    path: str | Path,
    *,
    mesh_hash: str,
    T: np.ndarray | None = None,
    field: Field,
    domain: Domain,
    pins: PinPoints,
    material: _fem.Material,
    settings: SimSettings,
    metadata: dict | None = None,
    codes: np.ndarray | None = None,
) -> Path:
    """Write a LiCROM model file: the field network and its normalization, the domain sample
    and the pinned points, the physics. ``T`` (the training mesh) is accepted for the common
    trainer interface and not stored: the model belongs to no mesh. ``mesh_hash`` names the
    mesh of the bake recorded as ``mesh_bake`` in ``metadata`` (the default mesh)."""
    arrays, net_meta = field.to_arrays()
    arrays["domain_samples"] = np.asarray(domain.samples, dtype=np.float64)
    arrays["pin_points"] = np.asarray(pins.points, dtype=np.float64).reshape(-1, 3)
    arrays["pin_member"] = np.asarray(pins.member, dtype=np.int64).reshape(-1)
    arrays["pin_faces"] = np.asarray(pins.faces, dtype=np.float64).reshape(-1, 3, 3)
    arrays["pin_face_member"] = np.asarray(pins.face_member, dtype=np.int64).reshape(-1)
    if codes is not None:
        codes = np.asarray(codes, dtype=np.float64)  # (c, r), or (c, r + 9): see train
        arrays["cubature_codes"] = codes.reshape(-1, codes.shape[1] if codes.ndim == 2 else field.r)
    meta = {
        "field": net_meta,
        "latent_dim": field.r,
        "domain_tolerance_m": float(domain.tolerance),
        "pin_tolerance_m": float(pins.tolerance),
        "pin_spacing_m": float(pins.spacing),
        "material": material.to_dict(),
        "settings": settings.to_dict(),
    }
    meta.update(metadata or {})
    return save_model(path, method=NAME, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def _parts(model: Model):
    a, meta = model.arrays, model.metadata
    field = Field.from_arrays(a, meta["field"])
    domain = Domain(np.asarray(a["domain_samples"]), float(meta["domain_tolerance_m"]))
    if "pin_points" not in a:
        if np.asarray(a.get("pin_boxes", np.zeros(0))).size:
            raise CacheError(
                f"{Path(model.path).name} is a LiCROM model from before pins were the pin "
                "group's points (it pins every node in a box around them); retrain it."
            )
        pins = PinPoints.none()
    else:
        pins = PinPoints(
            np.asarray(a["pin_points"], dtype=np.float64).reshape(-1, 3),
            np.asarray(a["pin_member"], dtype=np.int64).reshape(-1),
            float(meta["pin_tolerance_m"]),
            float(meta.get("pin_spacing_m", 0.0)),
            np.asarray(a["pin_faces"], dtype=np.float64).reshape(-1, 3, 3),
            np.asarray(a["pin_face_member"], dtype=np.int64).reshape(-1),
        )
    codes = np.asarray(a["cubature_codes"]) if "cubature_codes" in a else None
    return field, domain, pins, codes


def load_on_mesh(
    model: Model | str | Path,
    X: np.ndarray,
    T: np.ndarray,
    *,
    settings: SimSettings | None = None,
    colliders: list[Collider] | None = None,
    pins: PinPoints | None = None,
    pinned: np.ndarray | None = None,
    material: _fem.Material | None = None,
    cubature_vertices: int | None = None,
    solver: str | None = None,
    seed: int | None = None,
    origin: np.ndarray | None = None,
    cubature: str | None = None,
    cubature_target: float | None = None,
    cubature_poses: int | None = None,
    invariant_rotation: bool | None = None,
    static: bool | None = None,
    static_derivatives: bool | None = None,
) -> LicromSimulation:
    """A LiCROM model (a file or an opened :class:`Model`) on the mesh ``(X, T)``, which need
    not be one it was trained on. Keywords left None take the model's values (its training
    settings, its pins, its material). ``pinned`` (p,): the mesh's pinned nodes (its pin
    group; None: the nodes at the model's pinned points), checked against the model's pins
    (:class:`LicromSimulation`). ``origin`` (3,): the origin of the object ``X``
    belongs to, in ``X``'s space; used by a model trained relative to its objects' origins
    (``reference`` :data:`REFERENCE_OBJECT`) and ignored by one trained in world space.
    ``cubature``: "fitted" (fitted on this mesh to the model's training codes) or "random"
    (``cubature_vertices`` random vertices); ``cubature_vertices=0`` gives the exact energy.
    ``invariant_rotation``, ``static``, ``static_derivatives``: see :class:`LicromSimulation` (None: the model's
    setting; a model trained before Static Modes has none)."""
    if not isinstance(model, Model):
        model = load_model(model)
    if model.method != NAME:
        raise CacheError(f"{Path(model.path).name} holds a {model.method!r} model, not LiCROM.")
    field, domain, stored_pins, codes = _parts(model)
    meta = model.metadata
    train = meta.get("training", {})
    stored = SimSettings(**meta["settings"])
    if settings is not None and settings.contact_stiffness is None:
        settings = dataclasses.replace(settings, contact_stiffness=stored.contact_stiffness)
    return LicromSimulation(
        field,
        X,
        T,
        material or _fem.Material.from_dict(meta["material"]),
        settings or stored,
        pins=stored_pins if pins is None else pins,
        pinned=pinned,
        domain=domain,
        cubature_vertices=train.get("cubature_vertices", 200)
        if cubature_vertices is None
        else cubature_vertices,
        seed=train.get("seed", 0) if seed is None else seed,
        solver=solver or train.get("solver", "newton"),
        gradient_iterations=train.get("gradient_iterations", 10),
        colliders=colliders,
        origin=origin if meta.get("reference") == REFERENCE_OBJECT else None,
        cubature=cubature or train.get("cubature", "fitted"),
        codes=codes,
        cubature_target=train.get("cubature_target", CUBATURE_TARGET)
        if cubature_target is None
        else cubature_target,
        max_cubature=train.get("max_cubature", 500),
        cubature_poses=train.get("cubature_poses", CUBATURE_POSES)
        if cubature_poses is None
        else cubature_poses,
        floating=meta.get("frame", FRAME_WORLD) == FRAME_FLOATING,
        invariant_rotation=bool(train.get("invariant_rotation", False))
        if invariant_rotation is None
        else invariant_rotation,
        static=bool(train.get("static_modes", False)) if static is None else static,
        static_derivatives=_derivatives_of(meta)
        if static_derivatives is None
        else static_derivatives,
    )


def _derivatives_of(meta: dict) -> bool:
    """Whether a model's runtime adds the static modes' derivatives: the trainer's choice
    (``static_derivatives`` in its metadata, Auto resolved), else (a model trained before
    Auto) its training setting, a bool or "on" / "off"."""
    if "static_derivatives" in meta:
        return bool(meta["static_derivatives"])
    return meta.get("training", {}).get("static_derivatives", False) in (True, "on")


def load(
    model: Model,
    *,
    settings: SimSettings | None = None,
    colliders=None,
    mesh: tuple | None = None,
) -> LicromSimulation:
    """The runtime of an opened LiCROM model on ``mesh``, ``(X, T)``, ``(X, T, origin)`` or
    ``(X, T, origin, pinned)`` (``origin``: the mesh's object origin; ``pinned``: its pinned
    nodes, None: those at the model's pinned points; see :func:`load_on_mesh`); without one,
    on the mesh of the bake the model records (``mesh_bake``: the bake its training
    replayed), pinned as that bake was."""
    origin = pinned = None
    if mesh is not None and len(mesh) >= 3:
        origin = mesh[2]
        pinned = mesh[3] if len(mesh) > 3 else None
        mesh = mesh[:2]
    if mesh is None:
        from ...data.cache import BakeCache

        bake = model.metadata.get("mesh_bake")
        if not bake or not Path(bake).exists():
            raise CacheError(
                f"{Path(model.path).name} is a LiCROM model: it runs on any mesh of its object, "
                "but needs one. The bake it was trained on is gone; put the model on a mesh with "
                "core.methods.licrom.load_on_mesh (in Blender: simulate the target object)."
            )
        cache = BakeCache.open(bake)
        mesh = (np.asarray(cache.X, float), np.asarray(cache.T, np.int64))
        origin = model.metadata.get("mesh_bake_origin")
        if "pinned" in cache.extra_names:
            pinned = np.asarray(cache.extra("pinned"), dtype=np.int64)
    return load_on_mesh(
        model,
        mesh[0],
        mesh[1],
        settings=settings,
        colliders=colliders,
        origin=origin,
        pinned=pinned,
    )


SETTINGS = (
    Setting(
        "latent_dim",
        "int",
        20,
        "Latent Size",
        "Latent coordinates r: the number of displacement fields (Chang 2023 uses 20)",
        minimum=1,
        maximum=1000,
        soft_maximum=64,
    ),
    Setting(
        "hidden",
        "int_list",
        [60, 60, 60, 256],
        "Hidden Layers",
        "Widths of the field "
        "network's hidden layers (the paper: 4 of width 60; the last is widened to 256 here, "
        "for the closed-form last layer picks the modes from its span)",
        minimum=1,
        maximum=4096,
    ),
    Setting(
        "activation",
        "enum",
        "elu",
        "Activation",
        "Hidden activation of the field and the encoder (the paper: ELU)",
        items=tuple((a, a.upper() if a != "softplus" else "Softplus", "") for a in ACTIVATIONS),
        advanced=True,
    ),
    Setting(
        "epochs",
        "int",
        1500,
        "Epochs",
        "Passes over the training frames (the learning "
        "rate drops 5x after a third, 10x more after two thirds, as the paper)",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=20000,
    ),
    Setting(
        "time_budget",
        "float",
        600.0,
        "Time Budget",
        "Most seconds the network training may take; the epochs are cut to fit, with a warning",
        unit="s",
        minimum=1.0,
        maximum=1e7,
        soft_maximum=7200.0,
    ),
    Setting(
        "batch_size",
        "int",
        16,
        "Batch Size",
        "Frames per Adam step (the paper: 16)",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=4096,
    ),
    TRAINER_SETTING["learning_rate"],
    Setting(
        "points_per_frame",
        "int",
        1024,
        "Points per Frame",
        "Points of each frame the "
        "loss sees (drawn by lumped mass, so by volume, whatever the mesh)",
        minimum=8,
        maximum=1_000_000,
        soft_maximum=10000,
        advanced=True,
    ),
    Setting(
        "volume_share",
        "float",
        1.0,
        "Volume Share",
        "Share of each frame's points "
        "drawn inside the elements (displacement interpolated linearly, as the "
        "finite-element field is) rather than at the nodes: the field is then fitted "
        "between the nodes too, so a finer mesh's basis has no stray wiggles",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
    ),
    Setting(
        "encoder_points",
        "int",
        512,
        "Encoder Points",
        "Of those, how many the PointNet encoder sees (the paper: 2500)",
        minimum=8,
        maximum=1_000_000,
        soft_maximum=10000,
        advanced=True,
    ),
    Setting(
        "projection_epochs",
        "int",
        0,
        "Projection Epochs",
        "Final passes where the "
        "encoder's code is replaced by the least-squares code the runtime uses (0: the "
        "paper's training alone)",
        minimum=0,
        maximum=1_000_000,
        soft_maximum=5000,
        advanced=True,
    ),
    TRAINER_SETTING["checkpoint_every"],
    Setting(
        "floating_frame",
        "bool",
        True,
        "Floating Frame",
        "For a free body (no pins): train the field in the body frame (each frame's rigid "
        "motion taken out) and simulate with six rigid modes whose motion moves the frame, so "
        "a body that rolls or spins is followed; pinned bodies move in their pins' frame",
        advanced=True,
    ),
    Setting(
        "static_modes",
        "bool",
        True,
        "Static Modes",
        "Pinned bodies: add to the field's basis, on each mesh, that mesh's static sag under "
        "1 g along x, y and z with its pins held (one sparse factorization when the model is "
        "put on a mesh), and fit the cubature to forces weighed by the displacement they "
        "cause. On the ring family of issue 23 (bench/licrom.py --rings) the unseen ring "
        "between the trained ones replays a held-out bake at 0.16x its own linear model "
        "(field alone 2.2x); models trained before it keep the field alone",
        advanced=True,
    ),
    Setting(
        "static_derivatives",
        "enum",
        "auto",
        "Static Derivatives",
        "With Static Modes: add their six modal derivatives too (each mesh's second-order "
        "static response, with the same factorization; 6 more DOFs), which a pinned body "
        "swung far needs: on keyed cylinders of issue 23 the field with the static modes "
        "replayed a trained member 81 mm and an unseen one 55 mm off their held-out bakes "
        "(exact energy 51 / 54), with their derivatives too 9.9 / 7.7. A mesh swap refits "
        "the static block to the shape where the meshes share nodes; a swap to a 20K-tet "
        "mesh takes about twice as long (1.9 s at load 8)",
        items=(
            (
                "auto",
                "Automatic",
                "On when the training bakes swing past the static modes' linear range: the "
                "second-order static response of some training frame's static coordinates "
                f"reaches {DERIVATIVES_AUTO_RATIO:g} of its first-order one (keyed cylinders "
                "and tori of issue 23: 0.47-27, on; the hung rings of bench/licrom.py --rings: "
                "0.03-0.09, off)",
            ),
            ("on", "On", "Always, on pinned bodies"),
            ("off", "Off", "Never (the static modes alone: 6 fewer DOFs, a faster swap)"),
        ),
        advanced=True,
    ),
    Setting(
        "invariant_rotation",
        "bool",
        False,
        "Invariant Rotation",
        "Floating frame only: keep the elastic energy unchanged along the basis's best image "
        "of a rotation of the body's current shape, so internal forces cannot set a free body "
        "spinning (a dropped ring stops yawing); off by default: it turned a poked body 1.8 "
        "degrees off full space where the default is 0.15",
        advanced=True,
    ),
    Setting(
        "cubature",
        "enum",
        "fitted",
        "Cubature",
        "How each mesh's elements are weighted: fitted on the mesh to the field's reduced "
        "forces at training poses (An et al. 2008; default), or the paper's random vertices",
        items=(("fitted", "Fitted", ""), ("random", "Random (paper)", "")),
    ),
    dataclasses.replace(
        SUBSPACE_SETTING["cubature_target"],
        default=CUBATURE_TARGET,
        help="Relative reduced-force error the fitted cubature may make on its poses, on each "
        "mesh (An et al. 2008)",
    ),
    SUBSPACE_SETTING["max_cubature"],
    dataclasses.replace(
        SUBSPACE_SETTING["cubature_poses"],
        default=CUBATURE_POSES,
        help="Training poses the fitted cubature is fitted on, on each mesh when it is loaded "
        "(more: a closer fit, a slower mesh swap)",
    ),
    Setting(
        "cubature_vertices",
        "int",
        200,
        "Cubature Vertices",
        "Random vertices whose elements make the random cubature on each mesh (0: every "
        "element, exact, whatever Cubature says)",
        minimum=0,
        maximum=1_000_000,
        soft_maximum=5000,
    ),
    Setting(
        "solver",
        "enum",
        "newton",
        "Solver",
        "Newton on the reduced Hessian, converged "
        "(default), or the paper's few gradient steps per frame",
        items=(("newton", "Newton", ""), ("gradient", "Gradient (paper)", "")),
    ),
    Setting(
        "gradient_iterations",
        "int",
        10,
        "Gradient Steps",
        "Steps per frame of the gradient solver",
        minimum=1,
        maximum=10_000,
        advanced=True,
    ),
    SUBSPACE_SETTING["max_frames"],
    SUBSPACE_SETTING["validation_fraction"],
    Setting(
        "seed",
        "int",
        0,
        "Seed",
        "Seed of every random choice of the training and of "
        "the runtime's cubature (the same seed gives the same model)",
        minimum=0,
        maximum=2**31 - 1,
    ),
    TRAINER_SETTING["rollout"],
)

METHOD = Method(
    name=NAME,
    label="LiCROM (Chang 2023)",
    description="A neural displacement field over reference space with a linear latent: one "
    "model runs on any mesh of the object (remeshed, refined, cut, another shape of the "
    "family) and the simulation continues when the mesh changes. Trains with PyTorch on "
    "bakes of several meshes.",
    settings=SETTINGS,
    load=load,
    trainer="training.licrom:train",
    needs_torch=True,
    inputs=frozenset({"forces", "pin_targets", "colliders", "other_mesh"}),
    order=40,
    setup_cost=1.5,  # measured 1.0-2.1x linear on a board and a tail (Compare Methods)
)
