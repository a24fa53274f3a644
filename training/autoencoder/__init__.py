"""Training of the autoencoder latent-space model of Fulton et al. 2019 (sections 4 and 5.3).

Pipeline (one model per mesh and physics setup); stages 1, 4 (cubature) and the end are
:mod:`.run`'s and :mod:`.stages`', the rest is this method's:

1. Mass-weighted PCA of the bake displacements (:func:`.stages.pod_basis`): ``U`` (3n, k),
   M-orthonormal, so the PCA coordinates ``q = U^T M (x - X)`` (eq. 6 with our
   M-orthonormal ``U``) are the outer linear layer of the network.
2. An autoencoder in PCA coordinates: encoder ``q (k) -> z (r)`` and decoder
   ``phi: z (r) -> q (k)``, MLPs with ELU hidden layers and linear (identity) output
   layers, trained with Adam on the loss of eq. 7, ``mean_i ||phi(enc(q_i)) - q_i||^2``.
   Because ``U`` is M-orthonormal this is the mass-weighted reconstruction error of the
   displacements (restricted to the PCA span). The full decode is ``psi(z) = X + U phi(z)``.
   Every network trains with **early stopping**: after each epoch the same loss is measured
   on the held-out bakes (the training frames when none is held out); training stops after
   ``patience`` epochs without a new best, and the best weights are kept.
   Exported to torch-free :class:`core.nnet.MLP` networks (float64), checked against torch.
3. The latent size ``r`` (``latent_dim``, or searched when it is None), **coarse to fine**
   (:func:`search_latent_size`): Fulton's sec. 4.3 grows ``r`` one at a time, every size
   trained fully (sizes 1 to 57 at 2,000 epochs took 21 minutes); here networks of
   ``r = latent_start, 2 latent_start, 4 latent_start, ...`` (at most ``max_latent_dim``) train
   until one is within the latent tolerance on held-out bakes, then bisection between the
   last size that missed it and the first that met it: ``O(log r)`` networks, not ``r``.
   Search networks train ``search_epochs``, by default as many as the time budget allows up
   to ``epochs`` (then the chosen one is the final network; else the chosen size trains again
   for ``epochs``). A briefly trained network is less accurate than a fully trained one, so a
   short search errs towards a larger ``r``, not a less accurate model.
   **Cost first** (:class:`TrainingPlan`): a few epochs are timed, the worst case (the
   longest search, then the final network) is estimated and reported ("about N minutes")
   before any network trains, and when it exceeds ``time_budget`` the epochs are cut to fit
   it, with a warning. A deadline stops a network that still runs late (keeping its best
   weights), so the network training never takes much more than the budget.
   **Never silently worse than PCA**: the result is compared on the held-out bakes with PCA
   truncated to ``r`` (a linear space of as many coordinates) and with the whole PCA layer
   (``k``). A network less accurate than PCA-``r`` is replaced by PCA (``pca_fallback``: a
   linear decoder, run by the same latent runtime) with ``r`` modes, or the fewest within the
   latent tolerance; either case is a warning, as is a result far above its PCA layer.
4. Optimized cubature on the PCA basis ``U`` fitted on PCA-projected training poses (sec. 5.3)
   (:func:`.stages.fit_cubature`).
5. A held-out rollout with :mod:`core.methods.autoencoder` and the model file (method
   ``"autoencoder"``, :meth:`.run.TrainingRun.finish`).
6. **Never silently worse than the linear model** (``keep_linear``, :func:`keep_better`):
   the linear model of the same bakes at its default settings (the same split; it trains in
   seconds) replays the same held-out bake; when it replays better (a smaller largest vertex
   error) it replaces the autoencoder at ``out`` and the result is its record. Either way the
   result's ``choice`` says which was kept, in one sentence with both replay errors: the
   latent search judges the network's shapes, not its dynamics, and on an animated pinned
   bar it chose 2 latents that replayed at 272 mm against the linear model's 16.3 mm.

Resume. The checkpoints (:class:`.run.Checkpoints`) are the PCA basis, the plan, every
network every ``checkpoint_every`` epochs and when it ends (its weights, Adam's state, the
epoch, the best weights so far with their held-out loss and epoch, why it stopped), and the
cubature; each is written atomically, so a run killed at any instant leaves the previous
one. Started again with the same bakes and settings, a run reads back the stages it finished
(a finished network is not trained again) and continues the network it was training from its
last checkpoint: it does only the rest. The epochs draw nothing from a random generator (the
batch order of epoch ``e`` of latent size ``r`` is a permutation keyed by ``(seed, r, e)``, and
the learning rate is a function of the epoch), so there is no generator state to save, and on
the CPU (deterministic algorithms) the resumed run ends with the uninterrupted run's weights
bit for bit. Two things depend on the machine's speed and so are not reproduced: the plan when
the budget cuts it (read back from its checkpoint by a resumed run, so resuming follows it) and
a deadline that stops a network; both are warnings.

torch is imported here and only here (never in ``core``).
"""

from .plan import TrainingPlan, plan_training, search_latent_size, search_worst_case
from .trainer import keep_better, pca_layers, train

__all__ = [
    "TrainingPlan",
    "keep_better",
    "pca_layers",
    "plan_training",
    "search_latent_size",
    "search_worst_case",
    "train",
]
