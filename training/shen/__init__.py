"""Training of the high-order differentiable autoencoder of Shen et al. 2021 (sec. 3.4-3.6,
6.1).

Pipeline (stages 1, 5 and the end are :mod:`.stages`' and :mod:`.run`'s):

1. Mass-weighted PCA of the bake displacements (:func:`.stages.pod_basis`): ``V`` (3n, k),
   M-orthonormal; PCA coordinates ``c = V^T M (x - X)``. Its first ``n_p`` columns are the
   linear subspace ``U`` of the paper, the rest (modes ``n_p + 1 .. k``) the room the
   nonlinear part lives in.
2. The autoencoder on the filtered coordinates ``c_tail = c[n_p:]`` (the filter
   ``I - U U^T M`` at the encoder input and the decoder output, in PCA coordinates; Fig. 3):
   encoder ``c_tail -> z`` (n_z) and decoder ``z -> c_tail``, ``len(hidden)`` sin layers
   each (the paper: 6-10 layers of one width) and linear in/out layers. It is exported with
   zero rows/columns for the first ``n_p`` coordinates, which *is* the filter folded into
   the networks (:func:`core.hocs.filtered_decoder`), so ``u = U p + P D(z)``.
   With ``decoder_sees_p`` (the default) the decoder also reads ``p`` and the encoder the
   whole ``c``: ``[p; c_tail] -> z``, ``[p; z] -> c_tail`` (u = U p + D(p, z)), ``p`` divided
   by the RMS of ``|p|`` (one scale for all of it; per coordinate the small modes become
   large inputs: closest shapes 13.9 against 11.5 mm, and up to 41 Newton iterations a
   step on a poked test bar). Exported with the ``p`` columns of the decoder's first
   layer, the filter at its output only. What it changes (whole bakes held out, closest
   shape / replay, mm): swung arm 3 + 1 11.5 / 176.9 against ``D(z)``'s 22.3 / 297 (PCA-4
   28.0 / 451.0); whip 3 + 2 (3,000 epochs) 2.1 / 42.2 against 5.2 / 291 (PCA-5 12.4 /
   473.3); the free body of ``tests/test_shen_contact.py`` 0.86 / 8.0 against 1.47 / 10.8.
   The shapes of a bend follow its size and direction (``p``): a few latent coordinates
   alone cannot tell the bends of a turning load apart (more training swings, longer
   training, held-out selection of the epoch, a larger network did not close that gap).
3. Loss: the pose-weighted squared error ``sum_i w_i |D(E(c_i)) - c_i|^2 / sum_i w_i``, which is
   the mass-weighted displacement error (``V`` is M-orthonormal), with ``w_i = 1 / V(x_i)``,
   the inverse elastic energy of the bake pose (sec. 6.1: poses near rest are fitted best).
   The energy is floored at 10% of the median so near-rest frames do not take all the weight
   (a frame at rest has ``V = 0``). It is OFF by default (``pose_weighting``): it fits the
   near-rest poses at the cost of the large ones, where the largest vertex error and the
   replays are decided. Measured (``bench/shen.py`` scenes, 3 + 2 DOFs, 6 x 32 at omega 1,
   whole bakes held out, closest shape / replay in mm): swung arm with the weighting
   25.4 / 410 (best held-out epoch 10 of 110), without 18.2 / 231 (PCA-5 18.0 / 215);
   whip (1,000 epochs) 8.3 / 663 (2 Newton fallbacks) with it, 5.9 / 464 (none) without
   (PCA-5 10.9 / 473).
   Linear warm-up (``linear_warmup`` = 100 epochs, :meth:`_Trainer._warmup`): the network is
   first fitted to PCA at ``n_p + n_z`` modes, so the training starts from the linear
   subspace of equal DOFs and early stopping (whose first candidate is the warmed-up
   network) keeps it unless the nonlinear fit does better on held-out bakes. On the swung
   arm the held-out loss is lowest within 5-70 epochs (the six training swings generalize
   little), so where the training starts decides: 3 + 2 closest / replay 18.0 / 220 mm with
   it (300 epochs: 17.7 / 221) against 18.2 / 231 without; 3 + 1 22.3 / 297 against
   24.3 / 323 (PCA-4 28.0 / 451); whip 3 + 2 6.4 / 400 against 5.9 / 464 (PCA-5 10.9 / 473),
   no Newton fallbacks in any of these replays. Whip with the bench's 3,000 epochs (patience
   600; 40 cubature elements): 5.2 / 291 mm, 0.47x / 0.62x PCA-5 (before: 8.5 / 442).
4. Sin activations and their initialization (Fig. 2's wiggly manifold is what a badly scaled
   sin network gives): the coordinates are divided by their RMS, so the network sees O(1)
   inputs, and every layer's weights are uniform in ``+- sqrt(3 / fan_in)`` (variance
   ``1 / fan_in``: pre-activations of order one through the depth) with the frequency
   ``omega`` = 1 rather than SIREN's 30. Measured on an initial 6 x 32 network along
   ``[-1, 1]`` (3 seeds), the roughness ``mean |y''| / mean |y'|``: 1.9-3.2 with this bound,
   5.7-8.7 with SIREN's hidden-layer bound ``sqrt(6 / fan_in)``, ~350 with omega = 30
   (``tests/test_shen_training.py``): the network starts as a smooth function at the data's
   scale and becomes only as curved as the data asks. The defaults, 6 layers of 32 at
   ``omega = 1``, against 8 x 64 at ``omega = 0.5`` (``bench/shen.py``, whole bakes held out,
   replay / closest-shape error): whip at 3 + 2 DOFs 442 / 8.5 mm against 479 / 18.2 mm (PCA-5
   473 / 12.4); swung arm at 3 + 1 (``tests/test_shen_accuracy.py``) 360 / 26.5 against
   403 / 27.8 (PCA-4 451 / 28.0). The larger network won only on one held-out swing bake at
   3 + 2 (138 / 8.1 against PCA-5's 215 / 13.4); and ``omega = 2`` (6 x 32) gave 526 / 16.5
   there, the wiggly space of Fig. 2 in motion. Decoder work of a Newton iteration at
   10 + 5 DOFs: 205 us (8 x 64: 327 us).
   Adam at ``learning_rate``, cut by 20% after 300 and again after 3,000 epochs (sec. 6.1),
   full early stopping on the held-out bakes' loss (the best weights are kept).
5. The latent size ``n_z``: given, or the smallest of 1, 2, 4, ... (at most
   ``max_latent_dim``) whose held-out largest vertex error is under ``latent_tolerance``.
   With ``k`` not given (the defaults, :func:`_room`): the basis the tolerance sizes has
   the linear model's ``k_tol`` modes; it is widened to ``2 k_tol`` so the decoder has room
   beyond the modes it replaces, ``n_p`` is the fewest modes within twice the tolerance (a
   free body's rigid and near-rigid motion: the first PCA modes of a drop are its
   translations), and ``n_z = k_tol - n_p`` (or, when ``latent_tolerance`` is given, the
   smallest of 1, 2, 4, ... up to that which meets it): the linear model's DOFs. Before
   (``n_p`` half the tolerance basis, ``n_z`` to twice the tolerance in it), the demo's
   ball (``scripts/demo.py``, 4 drops, 1 held out) took 3 + 2 DOFs of a 7-mode basis with
   shapes worse than PCA-5 (32.9 against 28.7 mm) and a held-out replay of 65 mm (render
   mesh; the linear model 23 mm at 7 DOFs); now 5 + 2 of 14 modes, shapes 22.2 mm against
   PCA-7's 23.6, replay 15.6 mm (``tests/test_shen_contact.py`` checks the same on a small
   dropped cube). That is one split of the four drops (seed 0 holds out drop 2); the two
   others measured hold out drops 0 and 3 (seeds 1, 2), where 5 + 2 replays 23.5 and
   18.1 mm against the linear model's 18.1 and 14.3 mm at 7 DOFs (shapes 8.0 and 8.3 mm
   against PCA-7's ~21): better shapes, worse motion after the bounce (the mean error
   drifts to ~10 mm in flight, the linear model's stays under 4 mm). With 5 + 1 (the
   smallest latent size within the tolerance, 6 DOFs) they were 29.7 and 19.3 mm; a finer
   cubature (1%, 86 elements) or omega 0.5 did not help (21.6, 19.1 mm on drop 3). The
   variational step's problem has several minima there: the Newton matrix alone (exact if
   positive definite else Gauss-Newton; eigenvalues clamped; their absolute values) moves
   the drop-3 replay between 28 and 44 mm.
6. Cubature (:func:`.stages.fit_cubature`) fitted to the forces of this subspace: on the
   training poses as the model reproduces them (``X + V c(r)``), reduced by ``V`` (the
   columns of ``J~`` lie in span ``V``).
7. The model file (:mod:`core.methods.shen`) and a held-out rollout (:meth:`.run.TrainingRun.finish`).

Checkpoints: the basis, each network every ``checkpoint_every`` epochs (weights, Adam, the
best weights and their epoch) and the cubature; a cancelled or killed run resumes from them.
The epoch order is a permutation keyed by ``(seed, n_z, epoch)``, so a resumed run on the CPU
ends with the uninterrupted run's weights.

torch is imported here (never in ``core``).
"""

from .trainer import pose_weights, to_numpy, train

__all__ = ["pose_weights", "to_numpy", "train"]
