"""The settings record of the Subspace Neural Physics method (:data:`SETTINGS`)."""

from __future__ import annotations

from ...reduced.settings import SUBSPACE_SETTING, SUBSPACE_SETTINGS, TRAINER_SETTING, network
from ...registry import Setting

SETTINGS = SUBSPACE_SETTINGS[:3] + (
    Setting(
        "external_modes",
        "int",
        None,
        "External Modes",
        "PCA coordinates of the external "
        "state (colliders, gravity and the reference frame's motion) the network sees; 0 "
        "keeps every feature that varied in the bakes (the paper's v = e)",
        minimum=1,
        maximum=10_000,
        soft_maximum=64,
        auto=True,
        advanced=True,
    ),
    Setting(
        "layers",
        "int",
        4,
        "Layers",
        "Linear layers of the residual network, ReLU between "
        "them (the paper: 10; 4 trains in minutes on a CPU)",
        minimum=1,
        maximum=64,
        soft_maximum=12,
    ),
    Setting(
        "width",
        "int",
        None,
        "Width",
        "Hidden units per layer; 0 uses 1.5 x Modes, the paper's",
        minimum=1,
        maximum=8192,
        soft_maximum=1024,
        auto=True,
    ),
    Setting(
        "window",
        "int",
        32,
        "Window",
        "Frames of each training rollout: the network's "
        "predictions are fed back and the error of the whole window is backpropagated "
        "(sec. 5.4)",
        minimum=3,
        maximum=10_000,
        soft_maximum=128,
    ),
    Setting(
        "noise",
        "float",
        0.01,
        "Noise",
        "Standard deviation of the noise on each window's "
        "first two frames, a fraction of each PCA coordinate's standard deviation (at least "
        "Noise Floor times the first coordinate's)",
        minimum=0.0,
        maximum=10.0,
        advanced=True,
    ),
    Setting(
        "noise_floor",
        "float",
        None,
        "Noise Floor",
        "The noise of a PCA coordinate is Noise times its own standard deviation, or times "
        "this fraction of the first coordinate's where that is larger (1: every coordinate "
        "gets the first's noise; 0: each its own); automatic: 0.1 where the cloth's owner "
        "moves (capes on walking torsos: 16-19 mm held out against 22-23 at 1; a flag swung "
        "and spun on a pole did better at 1, 104 against 113 mm), else 1",
        minimum=0.0,
        maximum=1.0,
        advanced=True,
        auto=True,
    ),
    network(
        "epochs",
        "Passes over the training windows (the time budget may end them sooner); automatic: "
        "about 3,200 AMSGrad steps in all, at most 100 epochs",
        default=None,
        auto=True,
    ),
    network(
        "batch_size",
        "Windows per AMSGrad step (the paper: 16); automatic: about 64 steps an epoch, "
        "batches of 8 to 32 windows",
        default=None,
        auto=True,
    ),
    network(
        "learning_rate",
        "AMSGrad step size (the paper: 1e-4 over ~100 epochs of 1e5-1e6 frames); automatic: "
        "3e-3 up to 40 PCA modes, 1e-3 above (many modes did not train at 3e-3: the cloth "
        "test's sheet at 60 modes 1.00x alpha/beta, at 1e-3 0.52x)",
        default=None,
        auto=True,
    ),
    Setting(
        "lr_decay",
        "float",
        0.995,
        "Rate Decay",
        "Learning rate multiplier per epoch (the paper: 0.999)",
        minimum=0.5,
        maximum=1.0,
        advanced=True,
    ),
    Setting(
        "weight_decay",
        "float",
        0.0,
        "Weight Decay",
        "Decoupled weight decay (AdamW's): each step pulls the network's weights back towards "
        "their start, i.e. towards the initial model alone, by learning rate x this fraction "
        "of their departure",
        minimum=0.0,
        maximum=1000.0,
        advanced=True,
    ),
    Setting(
        "clip_margin",
        "float",
        0.0,
        "Clip Margin",
        "Inputs and outputs are clipped to the "
        "training range widened by this fraction of it on each side (sec. 8.1: 0)",
        minimum=0.0,
        maximum=10.0,
        advanced=True,
    ),
    network(
        "time_budget",
        "Most seconds the network training may take; epochs past it are skipped, with a warning",
        default=600.0,
    ),
    Setting(
        "checkpoint_every",
        "int",
        20,
        "Checkpoint Every",
        "Epochs between checkpoints (a cancelled or killed run resumes from the last)",
        minimum=1,
        maximum=1_000_000,
        advanced=True,
    ),
    SUBSPACE_SETTING["validation_fraction"],
    SUBSPACE_SETTING["seed"],
    TRAINER_SETTING["rollout"],
    Setting(
        "keep_best",
        "bool",
        False,
        "Keep Best Epoch",
        "The model keeps the network of the epoch whose rollouts of the held-out bakes erred "
        "least, the initial model alone when none beat it (off: the last epoch's). Off by "
        "default: on the cloth test's unseen 1,000-frame bake the epoch picked by one held-out "
        "bake did worse (0.59x against 0.52x alpha/beta)",
        advanced=True,
    ),
    Setting(
        "warmup_epochs",
        "int",
        0,
        "Warm-up Epochs",
        "The learning rate ramps up linearly, step by step, over this many first epochs (0: "
        "none). 5 helped a hard-swung flag (0.83x and 0.76x against 0.89x and 0.88x alpha/beta, "
        "fewer dead ReLUs) but not the cloth test or the block (0.62x, 0.74x against 0.52x, "
        "0.68x)",
        minimum=0,
        maximum=1000,
        advanced=True,
    ),
    Setting(
        "mode_scaling",
        "bool",
        True,
        "Per-mode Scaling",
        "The network sees each PCA coordinate divided by its own standard deviation over the "
        "training frames (otherwise all by the first mode's, and the small modes' inputs are "
        "tiny against the weight decay)",
        advanced=True,
    ),
    Setting(
        "contact_features",
        "enum",
        "auto",
        "Contact Features",
        "The network also sees, per collider, how deep and from which side it swept through "
        "the rest shape over the frame (a collider's end-of-frame position misses a fast "
        "hit); costs a signed distance per vertex within reach per frame",
        items=(
            (
                "auto",
                "Automatic",
                "On for soft-body (FEM) bakes whose colliders move, off for Blender cloth bakes "
                "and bakes without moving colliders",
            ),
            ("on", "On", "Always (the colliders' sweep is an input of the network)"),
            ("off", "Off", "Never (the colliders' end-of-frame positions only, the paper's)"),
        ),
        advanced=True,
    ),
    Setting(
        "ensemble",
        "int",
        1,
        "Ensemble",
        "Networks trained side by side from different random starts; the model averages "
        "their predictions (saved as one wider network: the step at 64 modes takes 24.5 us "
        "with one, 35.8 with 2, 50.9 with 3). The 2,500-vertex cloth test's sheet: 2 networks "
        "0.52x alpha/beta on two seeds, one 0.59x and 0.54x",
        minimum=1,
        maximum=8,
        advanced=True,
    ),
)
