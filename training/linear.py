"""Training of the linear reduced model: mass-weighted POD + optimized cubature.

numpy + scipy only (the baseline every learned method is compared with), but it goes
through the same worker, checkpoints and model files as the learned methods; everything
but the order of its two stages is :mod:`.common`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import registry
from ..core.files import ensure_writable_dir
from ..core.methods.linear import NAME
from ..core.methods.linear import save as save_linear_model
from .common import Report, TrainingRun, fit_cubature, pod_basis


@dataclass
class LinearSettings:
    """Typed settings of a linear model: the fields, defaults and checks of the method's
    registry record (``core.methods.linear.METHOD.settings``, where each is described)."""

    k: int | None = None
    tolerance: float | None = None
    max_k: int = 60
    cubature_target: float = 0.05
    max_cubature: int = 500
    cubature_poses: int = 200
    cubature_validation: float = 0.2
    max_frames: int = 2000
    validation_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        self.__dict__.update(registry.get(NAME).validate(asdict(self)))

    @classmethod
    def from_dict(cls, d: dict | None) -> LinearSettings:
        """Settings checked by value against the method's registry record."""
        return cls(**registry.get(NAME).validate(d))


def train(
    bakes,
    out: str | Path,
    settings: dict | None = None,
    *,
    device: str = "cpu",
    expect_mesh_hash: str | None = None,
    checkpoint_dir: str | Path | None = None,
    progress: Report | None = None,
    should_cancel: Callable[[], bool] | None = None,
    metric: Callable[[dict], None] | None = None,
) -> dict:
    """Train a linear model from bakes of one mesh and write it to ``out``; the registry's
    trainer entry point (``core.methods.linear.METHOD``). numpy on the CPU whatever
    ``device`` says.

    Whole trajectories are held out for validation (never frames of a trajectory that is
    also trained on). Checkpoints (basis, then cubature) go to ``checkpoint_dir``; a run
    cancelled after one resumes from it when the bakes and settings are the same.

    Returns
    -------
    The result record of :meth:`.common.TrainingRun.finish`, with the POD's errors
    ``pod_max_error_train_m`` and ``pod_max_error_val_m``.

    Raises
    ------
    WriteError
        The folder of ``out`` (or ``checkpoint_dir``) cannot be written: said before training.
    """
    ensure_writable_dir(Path(out).parent, "the model")
    run = TrainingRun.start(
        NAME,
        bakes,
        settings,
        device="cpu",
        expect_mesh_hash=expect_mesh_hash,
        checkpoint_dir=checkpoint_dir,
        progress=progress,
        should_cancel=should_cancel,
        metric=metric,
    )
    s = LinearSettings(**run.settings)
    train_x, train_groups, val_x = run.bakes.training_frames(s.max_frames)
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
        out,
        save,
        k=sub.k,
        dofs=sub.k,
        max_error_val_m=err_val,
        cubature=cub,
        at=0.8,
        metrics={"pod_max_error_train_m": err_train, "pod_max_error_val_m": err_val},
    )


def train_linear(bakes, out: str | Path, settings: LinearSettings | None = None, **job) -> dict:
    """:func:`train` with typed settings (scripts, tests, benchmarks)."""
    return train(bakes, out, asdict(settings or LinearSettings()), **job)
