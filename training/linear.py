"""Training of the linear reduced model: mass-weighted POD + optimized cubature.

numpy + scipy only (the baseline every learned method is compared with), but it goes
through the same worker, checkpoints and model files as the learned methods; everything
but the order of its two stages is :mod:`.run`'s and :mod:`.stages`'.
"""

from __future__ import annotations

import functools

from ..core.data.files import ensure_writable_dir
from ..core.methods.linear import save as save_linear_model
from .run import TrainingRun
from .stages import fit_cubature, pod_basis


def train(run: TrainingRun) -> dict:
    """Train a linear model from bakes of one mesh and write it to ``run.out``; the
    registry's trainer entry point (``core.methods.linear.METHOD``). numpy on the CPU
    whatever ``run.device`` says.

    Whole trajectories are held out for validation (never frames of a trajectory that is
    also trained on). Checkpoints (basis, then cubature) go to ``run.checkpoint_dir``; a run
    cancelled after one resumes from it when the bakes and settings are the same.

    Returns
    -------
    The result record of :meth:`.run.TrainingRun.finish`, with the POD's errors
    ``pod_max_error_train_m`` and ``pod_max_error_val_m``.

    Raises
    ------
    WriteError
        The folder of the model (or of the checkpoints) cannot be written: said before
        training.
    """
    ensure_writable_dir(run.out.parent, "the model")
    run.device = "cpu"
    train_x, train_groups, val_x = run.open_bakes().training_frames(run.settings.max_frames)
    run.check_cancel("Training cancelled before the basis was computed.")

    sub, _ = pod_basis(run, train_x, val_x, label="POD", span=(0.05, 0.3))
    err_train = sub.reconstruction_error(train_x)
    err_val = sub.reconstruction_error(val_x) if len(val_x) else err_train
    run.emit({"k": sub.k, "pod_max_error_train_m": err_train, "pod_max_error_val_m": err_val})
    run.say(
        0.3, f"basis: {sub.k} modes, max vertex error {err_val * 1000:.3g} mm on held-out frames"
    )
    run.check_cancel("Training cancelled after the basis (checkpointed).")

    cub = fit_cubature(run, sub, train_x, train_groups, val_x, project=False, span=(0.3, 0.75))
    save = functools.partial(
        save_linear_model, subspace=sub, cubature=cub, contact=run.contact_sample()
    )
    return run.finish(
        run.out,
        save,
        k=sub.k,
        dofs=sub.k,
        max_error_val_m=err_val,
        cubature=cub,
        at=0.8,
        metrics={"pod_max_error_train_m": err_train, "pod_max_error_val_m": err_val},
    )
