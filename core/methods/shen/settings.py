"""The Shen 2021 settings records (:mod:`core.methods.shen`)."""

from __future__ import annotations

import dataclasses

from ...reduced.settings import SUBSPACE_SETTING, SUBSPACE_SETTINGS, TRAINER_SETTING, network
from ...registry import Setting

SETTINGS = SUBSPACE_SETTINGS[:3] + (
    Setting(
        "n_p",
        "int",
        None,
        "Linear Coordinates",
        "PCA modes simulated as they are (the "
        "paper's n_p); 0: with Modes 0, the fewest PCA modes within twice Tolerance (a free "
        "body's rigid and near-rigid motion), else 10 or half the Modes when fewer than 20",
        minimum=1,
        maximum=1000,
        soft_maximum=64,
        auto=True,
    ),
    network(
        "latent_dim",
        "Nonlinear coordinates n_q of the decoder in the PCA complement; 0 searches the "
        "smallest that meets Latent Tolerance, or without one and with Modes 0 takes the "
        "linear model's DOFs less n_p",
    ),
    network(
        "latent_tolerance",
        "Largest vertex error the model may leave on held-out bakes when Latent Size is 0; "
        "0: with Modes 0 no search (see Latent Size), else twice the PCA basis's error",
    ),
    network(
        "max_latent_dim",
        "Largest latent size the search tries; 0: with Modes 0 the modes the linear model "
        "would take beyond n_p (no more DOFs than it), else the PCA modes beyond n_p",
    ),
    network(
        "hidden",
        "Widths of the hidden sin layers of the decoder (the encoder mirrors them); the paper "
        "uses 6-10 layers",
        default=[32] * 6,
    ),
    Setting(
        "omega",
        "float",
        1.0,
        "Sin Frequency",
        "omega of the sin activations, "
        "folded into the weights: larger fits wilder poses but wiggles between them "
        "(the paper's Fig. 2)",
        minimum=0.01,
        maximum=30.0,
        advanced=True,
    ),
    Setting(
        "pose_weighting",
        "bool",
        False,
        "Pose Weighting",
        "Weight each training "
        "pose's loss by the inverse of its elastic energy (Shen 2021 sec. 6.1): poses "
        "near rest are fitted best, the largest poses worst (off: every pose alike, "
        "the more accurate model on held-out bakes)",
        advanced=True,
    ),
    Setting(
        "linear_warmup",
        "int",
        100,
        "Linear Warm-up",
        "Epochs fitting the network to "
        "PCA at equal DOFs before the training proper, so it starts from the linear "
        "subspace (0: none)",
        minimum=0,
        maximum=1_000_000,
        advanced=True,
    ),
    Setting(
        "decoder_sees_p",
        "bool",
        True,
        "Decoder Reads p",
        "The nonlinear part depends on the linear coordinates too, u = U p + D(p, z) "
        "(the shapes a large bend brings with it follow p); off: the paper's D(z)",
        advanced=True,
    ),
    network(
        "epochs",
        "Most passes over the training frames (early stopping or the time budget may end it "
        "sooner)",
    ),
    network("patience", default=300),
    network("time_budget"),
    TRAINER_SETTING["batch_size"],
    network(
        "learning_rate",
        "Adam step size (the paper: 1e-3, cut by 20% after 300 and 3,000 epochs)",
    ),
    TRAINER_SETTING["checkpoint_every"],
    # a finer cubature than the linear method's: the module docstring, "Cubature"
    dataclasses.replace(SUBSPACE_SETTING["cubature_target"], default=0.01),
    *SUBSPACE_SETTINGS[4:],
    TRAINER_SETTING["rollout"],
)
