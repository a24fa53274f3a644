"""The LiCROM settings records (:mod:`core.methods.licrom`)."""

from __future__ import annotations

import dataclasses

from ...reduced.settings import SUBSPACE_SETTING, TRAINER_SETTING, network
from ...registry import Setting
from .cubature import CUBATURE_POSES, CUBATURE_TARGET
from .modes import DERIVATIVES_AUTO_RATIO

SOLVERS = ("newton", "gradient")
CUBATURES = ("fitted", "random")

SETTINGS = (
    network(
        "latent_dim",
        "Latent coordinates r: the number of displacement fields (Chang 2023 uses 20)",
        default=20,
        auto=False,
    ),
    network(
        "hidden",
        "Widths of the field "
        "network's hidden layers (the paper: 4 of width 60; the last is widened to 256 here, "
        "for the closed-form last layer picks the modes from its span)",
        default=[60, 60, 60, 256],
    ),
    network("activation", "Hidden activation of the field and the encoder (the paper: ELU)"),
    network(
        "epochs",
        "Passes over the training frames (the learning "
        "rate drops 5x after a third, 10x more after two thirds, as the paper)",
        default=1500,
    ),
    network(
        "time_budget",
        "Most seconds the network training may take; the epochs are cut to fit, with a warning",
        default=600.0,
    ),
    network("batch_size", "Frames per Adam step (the paper: 16)", default=16),
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
