"""The autoencoder settings records (:mod:`core.methods.autoencoder`)."""

from __future__ import annotations

from ...reduced.settings import SUBSPACE_SETTINGS, TRAINER_SETTING, network
from ...registry import Setting
from .runtime import DEFAULT_LBFGS_WINDOW, DEFAULT_MAX_ITERS

SETTINGS = SUBSPACE_SETTINGS[:3] + (
    network(
        "latent_dim",
        "Latent coordinates r; 0 searches the smallest size that meets Latent Tolerance "
        "(sizes doubled, then bisected)",
    ),
    network(
        "latent_tolerance",
        "Largest vertex error the autoencoder may leave on held-out bakes when Latent Size is "
        "0; 0 uses twice the basis Tolerance (Fulton's 3 mm PCA / 6 mm latent)",
    ),
    Setting(
        "latent_start",
        "int",
        1,
        "Latent Start",
        "First latent size the search tries (then doubles)",
        minimum=1,
        maximum=1000,
        advanced=True,
    ),
    network("max_latent_dim", "Largest latent size the search tries; 0 uses the basis size"),
    network(
        "hidden",
        "Widths of the hidden layers of the encoder (the decoder mirrors them), e.g. 100, 100",
    ),
    network("activation", "Hidden activation (Fulton 2019 uses ELU); output layers are linear"),
    network(
        "epochs",
        "Most passes over the training frames for the final network (early stopping or the "
        "time budget may end it sooner)",
    ),
    Setting(
        "search_epochs",
        "int",
        None,
        "Search Epochs",
        "Most passes each network of the "
        "latent size search gets; 0: as many as the time budget allows, up to Epochs (the "
        "chosen network is then kept as it is)",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=5000,
        auto=True,
        advanced=True,
    ),
    network(
        "patience",
        "Early stopping: a network stops after this many passes without a lower error on "
        "held-out bakes, keeping its best weights",
    ),
    network(
        "time_budget",
        "Most seconds the network training may take (latent size search and final network): "
        "the time is estimated first and the passes are cut to fit, with a warning; cubature "
        "and the rollout come on top",
    ),
    TRAINER_SETTING["batch_size"],
    TRAINER_SETTING["learning_rate"],
    Setting(
        "weight_decay",
        "float",
        0.0,
        "Weight Decay",
        "Adam weight decay",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
    ),
    Setting(
        "lr_schedule",
        "enum",
        "cosine",
        "Schedule",
        "Learning rate schedule: constant "
        "(Fulton's plain Adam) or cosine decay to 1% over the epochs",
        items=(("constant", "Constant", ""), ("cosine", "Cosine", "")),
        advanced=True,
    ),
    TRAINER_SETTING["checkpoint_every"],
    Setting(
        "pca_fallback",
        "bool",
        True,
        "PCA Fallback",
        "When the trained network is less "
        "accurate on held-out bakes than PCA with as many coordinates, save those PCA "
        "modes instead (with a warning either way)",
        advanced=True,
    ),
    *SUBSPACE_SETTINGS[3:],
    Setting(
        "lbfgs_window",
        "int",
        DEFAULT_LBFGS_WINDOW,
        "L-BFGS Window",
        "Correction pairs the runtime's L-BFGS keeps (Fulton 2019 sec. 5.2: 8)",
        minimum=1,
        maximum=100,
        advanced=True,
    ),
    Setting(
        "lbfgs_tolerance",
        "float",
        1e-8,
        "L-BFGS Tolerance",
        "Convergence test |dE/dz| < eps max(|z|, 1) of the runtime",
        minimum=1e-16,
        maximum=1.0,
        advanced=True,
    ),
    Setting(
        "lbfgs_max_iters",
        "int",
        DEFAULT_MAX_ITERS,
        "L-BFGS Iterations",
        "Most L-BFGS iterations per time step",
        minimum=1,
        maximum=100_000,
        advanced=True,
    ),
    TRAINER_SETTING["rollout"],
    Setting(
        "keep_linear",
        "bool",
        True,
        "Keep Linear When Better",
        "After the held-out rollout, train the linear model of the same bakes at its defaults "
        "(seconds) and keep it instead when it replays the held-out bake better, saying so "
        "with both errors",
        advanced=True,
    ),
)
