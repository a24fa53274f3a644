"""Training of LiCROM (Chang et al. 2023): a neural displacement field and a PointNet encoder,
trained jointly on frames of bakes of several meshes of one object family.

The training set (sec. 3) is every frame of every training bake as a point cloud of
reference positions ``X_i`` and displacements ``u_i`` (in the pins' frame); the meshes may
differ in resolution, connectivity and shape. The loss is eq. (4)::

    L = sum_j sum_i | W(X_i) P(S(X^j, u^j)) - u_i^j |^2

with ``W`` the field (an MLP 3 -> 3r, ``hidden`` widths, 5 layers with ELU: widths 60, 60,
60, 256 by default, the paper's 60 everywhere but the last hidden layer, see below), ``P`` a PointNet encoder (a shared per-point MLP 6 -> 64 -> 128, max pooling, an
MLP 128 -> 64 -> r; no input transform net, as the paper) and ``S`` the subsampling of
``encoder_points`` of the ``points_per_frame`` points each frame contributes to the loss.
Where we depart from the paper, each measured on the bakes of tests/test_licrom.py:

* Points are drawn with probability proportional to their lumped mass (with replacement), so
  the loss is a Monte-Carlo estimate of the mass-weighted L2 norm over the body, the same for
  a coarse and a fine mesh of one shape (the paper draws vertices uniformly, which weighs the
  finely meshed parts of a body more); a mesh with at most ``points_per_frame`` nodes gives
  all of them, weighted by mass (the exact norm).
* Points inside the elements (``volume_share``, 1 by default): a tet drawn by volume, uniform
  barycentric coordinates, the displacement interpolated linearly (the finite-element field
  itself), so the loss and the closed-form refit are the L2 norm of the field over the body,
  not only at the training nodes. With the 256-wide last layer fitted at the nodes alone the
  field fits the training nodes better than the space between them: the p = 4 superellipsoid
  of the tests replayed a held-out drop to 0.71 mm on its training mesh but 2.53 mm on a mesh
  with 3.2x the tets (3.5x); with volume points 1.45 mm and 1.82 mm (1.26x).
* Adam with the paper's schedule (learning rate divided by 5 after a third of the epochs and
  by 10 more after two thirds). The encoder only serves to find an embedding (Fig. 4): at the
  end the field's last layer is replaced by the best rank-r map of its hidden features in
  closed form (:func:`refit_head`: every training frame fitted in the features' span, then
  the mass-weighted POD of those fits), which is optimal for the features on one mesh. On
  the 99-node test bar (r = 6, 20 epochs) this took the projection error from 13.9x POD's
  (encoder codes, then 200 epochs of gradient descent on least-squares codes) to 1.007x.
  The refit can only pick modes from the span of the last hidden layer's features, so that
  layer is 256 wide by default (cheap: one layer): on the 10x2x2 test bar at r = 20 (100
  epochs, four bakes) the paper's 60 features gave 535x POD's projection error and a held-out
  poke replay of 2.87 mm against POD's 0.91 mm (3.2x); 128 features 10x and 0.90 mm; 256
  features 1.07x and 0.91 mm (1.00x POD), training 23 s instead of 19 s (these with points
  at the nodes only, ``volume_share`` 0). With the default volume points the field must also
  fit between the nodes, which the nodal projection does not credit: 60 features 1578x and
  4.62 mm (5.1x POD), 256 features 571x and 1.71 mm (1.9x POD).
  ``projection_epochs`` more passes on least-squares codes (what the runtime computes,
  :meth:`core.methods.licrom.LicromSimulation.latent_of`) may follow; on the two-mesh test
  family they changed nothing (12.54x vs 12.56x POD on the notched bar), so the default is 0.
* A ``time_budget``: from its third epoch on the run times its epochs and, when the whole
  schedule would not fit, plans fewer (shrinking the plan as timings come, while the field
  trains), with the learning-rate drops at the same fractions (:func:`planned_epochs`, with
  a warning); a run that still overruns is cut.
* A free body (no training mesh has pins) is trained in its body frame when
  ``floating_frame`` is on (the default): each frame's best rigid motion, a mass-weighted
  Kabsch fit about the centre of mass, is taken out of its displacements, so the field, its
  projection metrics and the cubature codes are the body's deformation alone; the model
  records ``frame: floating`` and the runtime adds six rigid modes in a moving frame
  (:mod:`core.methods.licrom`). A pinned body is trained in its pins' frame as before.

The exported model holds the field (numpy :class:`core.nnet.MLP`), its normalization, a volume
sample of the training domain, the pinned points and the least-squares latent codes of up to
:data:`CUBATURE_CODES` training frames, the poses each mesh's cubature is fitted to when the
model is put on it (:mod:`core.methods.licrom`); the encoder is not exported. Checkpoints every ``checkpoint_every`` epochs (torch state,
``weights_only`` on load) let a cancelled or killed run resume.
"""

from .data import Mesh, bake_entries, open_family
from .trainer import derivatives_choice, planned_epochs, projection_errors, train

__all__ = [
    "Mesh",
    "bake_entries",
    "derivatives_choice",
    "open_family",
    "planned_epochs",
    "projection_errors",
    "train",
]
