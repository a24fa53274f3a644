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
     :class:`core.reduced.pose.PoseMixin`'s inertial and damping targets (centrifugal, Coriolis and
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

from ...registry import Method
from .cubature import (
    CUBATURE_POSES,
    CUBATURE_TARGET,
    fitted_cubature,
    inclusion_probability,
    mesh_seed,
    random_cubature,
)
from .field import (
    DOMAIN_SAMPLES,
    DOMAIN_WARNING_SHARE,
    FRAME_FLOATING,
    FRAME_WORLD,
    PIN_TOLERANCE,
    REFERENCE_OBJECT,
    REFERENCE_WORLD,
    Domain,
    DomainReport,
    Field,
    OutOfDomainWarning,
    PinPoints,
    PinReport,
    PinWarning,
)
from .modes import (
    DERIVATIVES_AUTO_RATIO,
    STATIC_ACCELERATION,
    body_frames,
    rigid_modes,
    static_modes,
    stiffness_metric,
)
from .runtime import LicromSimulation, SwapReport
from .schema import NAME, load, load_on_mesh, save
from .settings import SETTINGS

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

__all__ = [
    "CUBATURE_POSES",
    "CUBATURE_TARGET",
    "DERIVATIVES_AUTO_RATIO",
    "DOMAIN_SAMPLES",
    "DOMAIN_WARNING_SHARE",
    "FRAME_FLOATING",
    "FRAME_WORLD",
    "METHOD",
    "NAME",
    "PIN_TOLERANCE",
    "REFERENCE_OBJECT",
    "REFERENCE_WORLD",
    "SETTINGS",
    "STATIC_ACCELERATION",
    "Domain",
    "DomainReport",
    "Field",
    "LicromSimulation",
    "OutOfDomainWarning",
    "PinPoints",
    "PinReport",
    "PinWarning",
    "SwapReport",
    "body_frames",
    "fitted_cubature",
    "inclusion_probability",
    "load",
    "load_on_mesh",
    "mesh_seed",
    "random_cubature",
    "rigid_modes",
    "save",
    "static_modes",
    "stiffness_metric",
]
