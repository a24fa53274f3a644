"""Subspace Neural Physics (Holden et al. 2019): the runtime of the ``snp`` method.

No physics is solved at run time: a network trained on bakes predicts the next state of a
PCA subspace from the two before and the state of what acts on the object (sec. 3, 5).

Positions, in the object's reference frame ``(R, c)`` (``x = R y + c``), are

    y = y_mu + U z            (sec. 5.1; U (3n, u) orthonormal columns, y_mu the mean pose)

so ``z = U^T (y - y_mu)`` (mean-centred PCA, not mass-weighted: the paper's, and the
vertex-error measure it minimizes). The external state of a frame is a feature vector ``f``
(:func:`external_features`): each collider's transform in the reference frame and its size,
gravity in the frame, and the frame's velocity, acceleration, angular velocity and angular
acceleration in it (zero when the frame does not move). It is clipped to the range the
training saw (sec. 8.1), standardized and rotated by its PCA (``w = V (f - f_mu) / f_sd``,
the features that never varied dropped; the paper's ``W = V (Y - y_mu)`` with ``v = e``).
A step is eq. (1) and (3)::

    z_bar = alpha * z_{t-1} + beta * (z_{t-1} - z_{t-2})                        eq. (1)
    z_t   = clip( z_bar + s * Phi([z_bar / s, z_{t-1} / s, w_t]) )              eq. (3)

``alpha``, ``beta`` (u,) are the per-mode least-squares fit of eq. (2), ``Phi`` a ReLU
network (:class:`core.nnet.MLP`, evaluated in float64), ``s`` one scalar (the standard
deviation of the first PCA coordinate over the training frames) that makes the network's
inputs and outputs O(1) whatever the object's size; it folds the paper's unnormalized
network into ours exactly. ``clip`` keeps each coordinate within the range of the training
frames (sec. 8.1), which bounds the output whatever the inputs.

Where we depart from the paper, and why:

* The reference frame of our FEM bakes is the pins' frame (:mod:`core.frame`: a pinned
  object's pins move rigidly with the object's animation), fitted each frame from the pin
  targets; without pins it is the world. Its velocity terms are finite differences of the
  last three poses (``omega = log(R_{t-1}^T R_t) / dt``, in the frame). A model trained on
  Blender's cloth (:mod:`core.clothbake`) is driven by a transform instead: the frame of a
  step is ``M_t M_rest^-1`` with ``M_t`` the frame's ``FrameInputs.reference_frame`` (the
  cloth object's world matrix, its owner's motion included; scale divided out) and
  ``M_rest`` the one its bakes started from (:meth:`SNPSimulation.driven_pose`).
* Render-time push-out (sec. 6.4): :meth:`SNPSimulation.positions` moves the vertices a
  collider holds inside it to its surface (:func:`push_out`); the state stays the
  network's. Normals: a cloth model has the paper's linear normal model (sec. 6.3,
  :func:`linear_normals`: ``n = R (n_mu + Q z)`` normalized, ``Q`` fitted by least squares on
  the training frames' normals), the default of :meth:`SNPSimulation.normals`; recomputing
  them from the triangles (:class:`VertexNormals`) stays available (``normal_model =
  "recomputed"``). On the 2,500-vertex cape of bench/snp_cloth.py the linear model, in
  float32, costs a fraction of the recomputation, and its normals are 1.5 degrees (mean;
  95th percentile 5.0) from the recomputed ones on held-out frames, while the PCA truncation
  itself puts the recomputed normals 4.4 degrees from the bake's. In Blender the mesh's own
  normals are recomputed by Blender when the positions are written, so the frame update
  needs neither.
* A collider the frame lacks (fewer colliders than the model was trained with) is put far
  above the object (:data:`FAR_DIAGONALS` bounding-box diagonals), which the input clipping
  turns into the farthest place above it that training saw: "no collider" means "out of
  reach", not "at its average position", which may be in contact.
* Contact features (the ``contact_features`` setting; automatic: on for soft-body bakes whose
  colliders move, off for Blender cloth bakes): per collider, how it
  swept through the rest shape over the frame (:func:`contact_features`: the mean push-out
  vector, the deepest penetration, the fraction of vertices inside, from
  :data:`SWEEP_SAMPLES` positions between its last transform and this one, or exactly for a
  sphere that only translates). The paper's
  external state is each collider's position at the end of the frame; the block of
  tests/test_snp.py is hit by a sphere of 10 cm radius that moves up to 17 cm a frame and
  touches it for one to three frames, so where it came from is most of the contact. On that
  block (3 bakes trained on, 60 epochs) the held-out error went from 0.915x the initial
  model's to 0.659x; on the block pressed by a sphere that now replaces it (contact lasting
  13 frames on average; training/snp.py) 0.51x against 0.91x without them, over 12 held-out
  bakes. The runtime takes the sweep from the last frame's colliders; a slot
  filled in only one of the two frames does not sweep. A sphere that only translates over
  the frame (the same rotation and scale; the usual collider) sweeps exactly a capsule: its
  features are the capsule's (:func:`_sphere_sweeps`, no sampling), in a third of the array
  calls: the pressed block's step at u = 64 (80 vertices, a held-out bake's 72 frames, min
  of 60 passes, the former and this runtime in one process on one core, load 4.3) 121.5 ->
  87.5 us with contact features, 27-28 us without (the issue's goal of 60 us is met without
  them only: the features cost 60 us, were 94); with the runtime's bounding box, a sweep whose
  capsule's box misses the rest shape's returns at once: 82 -> 78 us (load 2.5); the contact features of one press of
  bench/snp.py's 288-vertex block 150 -> 82 us (load 4). Cost of the sampled sweep: a signed distance per vertex
  within reach of the sweep, per sample and collider: the test block's step (80 vertices, one
  sphere) 26.3 -> 74.5 us (one core, min of 5 passes over a held-out bake the sphere keeps
  hitting; a sweep that stays outside the rest shape's bounding ball costs 8 us, one inside
  it ~70 us; the per-sample Collider of the first version cost 480 us). A batch computes them
  for all its instances and colliders at once (:func:`batch_contact_features`, equal to each
  instance's :func:`contact_features`, the trainer's, to the last bit): 100 instances of
  bench/snp.py's block (288 vertices, one sphere) in one step 6.38 -> 1.13 ms with contact
  features, 0.56 ms without (one core, load 2-2.5; the per-instance loop it replaces).
  The step's fixed costs were most of what was left: the step of one instance whose frame is
  the world (the usual soft body; :meth:`SNPSimulation._world_features`) reads its colliders'
  transforms once as Python floats (the ball, translation and capsule-box tests in scalars,
  the feature vector made an array once) and sweeps the vertices by coordinate (an (n, 3)
  array less a (3,) row runs a 3-long loop per vertex: 5 us a call at 288 vertices); a batch
  gathers its transforms as bytes and culls its translating spheres by the capsule's box.
  The same features to the last bit; the pressed block at u = 64 (A/B against the former code
  in one process, one core, min of 15 passes over a held-out bake, load 2.8): 81.4 -> 48.6 us
  a step (the network 15 of them), 100 instances 1.09 -> 0.86 ms (u = 21: 77.1 -> 44.5 us,
  0.91 -> 0.67 ms).
* The runtime state is ``(z_{t-1}, z_{t-2})``, the poses of the last three frames and the
  colliders (the last ones stay when a frame gives none), so ``get_state``/``set_state``
  continue bit-identically.

Many instances of one model (the paper's 256 bunnies, sec. 8) step as one batch:
:class:`SNPBatch` holds B states and :meth:`SNPSimulation.advance` steps them with one
network pass of B rows (the single simulator is its B = 1 case, one code path). Only the
per-instance bookkeeping (reading each instance's colliders and pins) is a Python loop; the
contact features are vectorized over instances (one instance takes the per-collider loop, the
same bits in fewer array calls).

Speed. The step runs :class:`FoldedStep`: eq. (1), the encoder and ``s`` folded into the
network's first and last layers, one product per layer (on vectors for one instance); a
driver matrix seen before gets its pose from a memo. Measured on one core with the machine
loaded (min of repeated runs): the 2,500-vertex cape's step (u = 64, network 131-96-96-96-64)
95 -> 30-45 us, the folded map alone 15 us; A/B against the previous step in the same runs
2-3x (bench/snp_cloth.py).

The trainer is :mod:`training.snp` (torch); this module is numpy only.
"""

from ...registry import Method
from .features import (
    COLLIDER_FEATURES,
    CONSTANT_FEATURE,
    FAR_DIAGONALS,
    FRAME_FEATURES,
    collider_features,
    external_features,
    feature_names,
    frame_features,
    reference_pose,
    to_frame,
)
from .normals import VertexNormals, linear_normals
from .parameters import ExternalEncoder, SNPParameters, initial_model
from .runtime import FoldedStep, SNPBatch, SNPSimulation
from .schema import NAME, load, onnx_graph, save
from .settings import SETTINGS
from .sweep import (
    CONTACT_FEATURES,
    SWEEP_SAMPLES,
    batch_contact_features,
    contact_features,
    push_out,
    swept_push_out,
)

METHOD = Method(
    name=NAME,
    label="Subspace Neural Physics (Holden 2019)",
    description="A network predicts the next PCA state from the last two and the colliders "
    "(no solve at run time: microseconds per frame); trained over rollout windows with "
    "PyTorch. Needs bakes that show the collisions it will meet.",
    settings=SETTINGS,
    load=load,
    trainer="training.snp:train",
    needs_torch=True,
    inputs=frozenset({"colliders", "pin_targets", "reference_frame"}),
    trains_on=frozenset({"fem", "cloth"}),
    onnx=onnx_graph,
    order=20,
    setup_cost=2.0,  # measured 0.9-3.4x linear on a board and a tail (Compare Methods)
)

__all__ = [
    "COLLIDER_FEATURES",
    "CONSTANT_FEATURE",
    "CONTACT_FEATURES",
    "FAR_DIAGONALS",
    "FRAME_FEATURES",
    "METHOD",
    "NAME",
    "SETTINGS",
    "SWEEP_SAMPLES",
    "ExternalEncoder",
    "FoldedStep",
    "SNPBatch",
    "SNPParameters",
    "SNPSimulation",
    "VertexNormals",
    "batch_contact_features",
    "collider_features",
    "contact_features",
    "external_features",
    "feature_names",
    "frame_features",
    "initial_model",
    "linear_normals",
    "load",
    "onnx_graph",
    "push_out",
    "reference_pose",
    "save",
    "swept_push_out",
    "to_frame",
]
