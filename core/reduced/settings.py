"""The training settings the subspace methods share (:class:`core.registry.Setting` records):
the basis and cubature settings of every method with a PCA/POD basis
(:data:`SUBSPACE_SETTINGS`), the trainer settings several learned methods share word for word
(:data:`TRAINER_SETTINGS`) and the network settings they share by name, kind, label and range
(:data:`NETWORK_SETTINGS`, each method giving its own default and help with :func:`network`).
A method's record composes them in its own order; the panel and the CLI show them as one.
"""

from __future__ import annotations

import dataclasses

from ..registry import Setting

#: Hidden activations of the learned methods' networks (output layers are linear).
HIDDEN_ACTIVATIONS = ("elu", "tanh", "softplus", "relu")

#: Training settings of every method with a PCA/POD basis and cubature (one name per concept:
#: ``k`` is the basis size wherever it appears).
SUBSPACE_SETTINGS = (
    Setting(
        "k",
        "int",
        None,
        "Modes",
        "Size of the PCA/POD basis; 0 grows it until the "
        "largest vertex error on the bakes is under Tolerance (Fulton 2019, sec. 4.3)",
        minimum=1,
        maximum=2000,
        soft_maximum=200,
        auto=True,
    ),
    Setting(
        "tolerance",
        "float",
        None,
        "Tolerance",
        "Largest vertex error the basis may "
        "leave on the bakes when Modes is 0; 0 uses 1% of the bounding-box diagonal",
        unit="m",
        minimum=0.0,
        soft_maximum=0.1,
        auto=True,
    ),
    Setting(
        "max_k",
        "int",
        60,
        "Max Modes",
        "Upper bound on the basis size when it is chosen by Tolerance",
        minimum=1,
        maximum=2000,
        soft_maximum=200,
    ),
    Setting(
        "cubature_target",
        "float",
        0.05,
        "Cubature Target",
        "Relative reduced-force error the cubature may make on held-out poses (An et al. 2008)",
        minimum=1e-4,
        maximum=1.0,
    ),
    Setting(
        "max_cubature",
        "int",
        500,
        "Max Cubature",
        "At most this many cubature elements",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=5000,
    ),
    Setting(
        "cubature_poses",
        "int",
        200,
        "Cubature Poses",
        "Training poses the cubature is fitted on, evenly spaced over the training frames",
        minimum=1,
        maximum=100_000,
        soft_maximum=2000,
        advanced=True,
    ),
    Setting(
        "cubature_validation",
        "float",
        0.2,
        "Cubature Validation",
        "Share of the training trajectories left out of the cubature fit to check it",
        minimum=0.0,
        maximum=0.9,
        advanced=True,
    ),
    Setting(
        "max_frames",
        "int",
        2000,
        "Max Frames",
        "Frames used for training (sampled evenly when the bakes have more)",
        minimum=1,
        maximum=10_000_000,
        soft_maximum=20000,
        advanced=True,
    ),
    Setting(
        "validation_fraction",
        "float",
        0.2,
        "Validation",
        "Share of whole bakes held out to measure the model on data it never saw",
        minimum=0.0,
        maximum=0.9,
    ),
    Setting(
        "seed",
        "int",
        0,
        "Seed",
        "Seed of every random choice of the training (the same seed gives the same model)",
        minimum=0,
        maximum=2**31 - 1,
    ),
)

#: The settings of :data:`SUBSPACE_SETTINGS` by name, for a method that takes some of them.
SUBSPACE_SETTING = {s.name: s for s in SUBSPACE_SETTINGS}

#: Trainer settings that several learned methods share word for word (name, default, range,
#: help); a method lists the ones it has (``TRAINER_SETTING["rollout"]``) in its own order.
TRAINER_SETTINGS = (
    Setting(
        "batch_size",
        "int",
        256,
        "Batch Size",
        "Frames per Adam step",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=4096,
    ),
    Setting(
        "learning_rate", "float", 1e-3, "Learning Rate", "Adam step size", minimum=1e-7, maximum=1.0
    ),
    Setting(
        "checkpoint_every",
        "int",
        100,
        "Checkpoint Every",
        "Epochs between checkpoints (a cancelled or killed run resumes from the last)",
        minimum=1,
        maximum=1_000_000,
        advanced=True,
    ),
    Setting(
        "rollout",
        "bool",
        True,
        "Held-out Rollout",
        "Replay a held-out bake with the model after training and report its error",
        advanced=True,
    ),
)
TRAINER_SETTING = {s.name: s for s in TRAINER_SETTINGS}

#: The network settings the learned methods share by name, kind, label and range: the latent
#: size and its search, the layers and the training loop's length. A method takes one with
#: :func:`network`, giving its own help (and default) where its network differs.
NETWORK_SETTINGS = (
    Setting(
        "latent_dim",
        "int",
        None,
        "Latent Size",
        "Latent coordinates r; 0 searches the smallest size that meets Latent Tolerance",
        minimum=1,
        maximum=1000,
        soft_maximum=64,
        auto=True,
    ),
    Setting(
        "latent_tolerance",
        "float",
        None,
        "Latent Tolerance",
        "Largest vertex error the model may leave on held-out bakes when Latent Size is 0",
        unit="m",
        minimum=0.0,
        soft_maximum=0.1,
        auto=True,
    ),
    Setting(
        "max_latent_dim",
        "int",
        None,
        "Max Latent Size",
        "Largest latent size the search tries",
        minimum=1,
        maximum=1000,
        auto=True,
        advanced=True,
    ),
    Setting(
        "hidden",
        "int_list",
        [100, 100],
        "Hidden Layers",
        "Widths of the hidden layers",
        minimum=1,
        maximum=4096,
    ),
    Setting(
        "activation",
        "enum",
        "elu",
        "Activation",
        "Hidden activation; output layers are linear",
        items=tuple(
            (a, a.upper() if a != "softplus" else "Softplus", "") for a in HIDDEN_ACTIVATIONS
        ),
        advanced=True,
    ),
    Setting(
        "epochs",
        "int",
        2000,
        "Epochs",
        "Most passes over the training frames",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=20000,
    ),
    Setting(
        "patience",
        "int",
        200,
        "Patience",
        "Early stopping: stop after this many passes without a lower error on held-out "
        "bakes, keeping the best weights",
        minimum=1,
        maximum=1_000_000,
        soft_maximum=5000,
        advanced=True,
    ),
    Setting(
        "time_budget",
        "float",
        300.0,
        "Time Budget",
        "Most seconds the network training may take",
        unit="s",
        minimum=1.0,
        maximum=1e7,
        soft_maximum=7200.0,
    ),
)
NETWORK_SETTING = {s.name: s for s in NETWORK_SETTINGS}


def network(name: str, help: str | None = None, **changes) -> Setting:
    """The shared network setting ``name`` (:data:`NETWORK_SETTINGS`, or
    :data:`TRAINER_SETTINGS`) with a method's own ``help`` and other fields (``default=``,
    ``auto=``...)."""
    base = NETWORK_SETTING.get(name) or TRAINER_SETTING[name]
    if help is not None:
        changes["help"] = help
    return dataclasses.replace(base, **changes)
