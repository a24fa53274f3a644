"""The settings of the active-face method."""

from __future__ import annotations

from ...reduced.settings import SUBSPACE_SETTING
from ...registry import Setting

SETTINGS = (
    Setting(
        "latent_dim",
        "int",
        12,
        "Latent Size",
        "Latent codes per expression (one slider each)",
        minimum=1,
        maximum=256,
        soft_maximum=64,
    ),
    Setting(
        "decoder",
        "enum",
        "linear",
        "Decoder",
        "How the latent code makes the muscles' actions",
        items=(
            (
                "linear",
                "Linear",
                "Actions linear in the code (and the jaw angle): generalizes best from a "
                "few dozen sculpted keys",
            ),
            ("mlp", "MLP", "The paper's MLP with the hidden layers below"),
        ),
    ),
    Setting(
        "hidden",
        "int_list",
        [64],
        "Hidden Layers",
        "Widths of the MLP decoder's hidden layers",
        minimum=1,
        maximum=8192,
        advanced=True,
    ),
    Setting(
        "warm_epochs",
        "int",
        400,
        "Warm-Start Epochs",
        "Epochs fitting the MLP decoder to the approximate target actions (sec. 5.1; "
        "the linear decoder is fitted by least squares)",
        minimum=0,
        maximum=100_000,
        soft_maximum=5000,
    ),
    Setting(
        "epochs",
        "int",
        30,
        "Epochs",
        "End-to-end epochs through the quasistatic simulation (sec. 5.2)",
        minimum=0,
        maximum=100_000,
        soft_maximum=500,
    ),
    Setting(
        "jaw_input",
        "bool",
        False,
        "Jaw Input",
        "The decoder also takes the jaw angle (the jaw itself is always the solve's "
        "boundary): fits the training keys closer, generalizes no better",
        advanced=True,
    ),
    Setting(
        "skin",
        "enum",
        "blend",
        "Skin",
        "What the skin shown is",
        items=(
            (
                "blend",
                "Blend of Keys + Contact",
                "The keys' blend, linear in the code and the jaw angle (any blend of the "
                "training keys as a PCA of them gives it), plus the physics' change where "
                "a collider touches (two full solves on those frames only)",
            ),
            (
                "physics",
                "Physical Equilibrium",
                "The flesh's equilibrium every frame (plus the detail layer below): the "
                "jaw's turn, volume and sliding are the physics' everywhere",
            ),
        ),
    ),
    Setting(
        "detail",
        "bool",
        True,
        "Skin Detail",
        "With the Physical Equilibrium skin: a per-vertex layer linear in the code and the jaw angle, fitted to what the "
        "physical fit leaves of the training keys and of blends of pairs of them: the skin "
        "comes closer to blends of the keys; contact, the jaw's turn and volume stay the "
        "physics'",
        advanced=True,
    ),
    Setting(
        "basis",
        "int",
        40,
        "Reduced Basis",
        "Size of the reduced quasistatic basis",
        minimum=1,
        maximum=2000,
        soft_maximum=200,
    ),
    SUBSPACE_SETTING["seed"],
)
