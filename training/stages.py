"""The stages trainers share, each checkpointed: the mass-weighted PCA/POD basis
(:func:`pod_basis`) and optimized cubature (:func:`fit_cubature`). The held-out rollout
is :meth:`.run.TrainingRun.finish`'s.

numpy only at import: the linear method trains without torch.
"""

from __future__ import annotations

import json

import numpy as np

from ..core.physics import fem as _fem
from ..core.reduced.cubature import Cubature, optimized_cubature
from ..core.reduced.subspace import Subspace, mass_weighted_pod
from .run import TrainingRun, even_indices


def _subspace_arrays(sub: Subspace) -> dict:
    arr = sub.to_arrays()
    return {k: v for k, v in arr.items() if k not in ("kind", "info")} | {
        "kind": np.array(arr["kind"]),
        "info": np.array(json.dumps(arr["info"])),
    }


def pod_basis(
    run: TrainingRun,
    train_x: np.ndarray,
    val_x: np.ndarray,
    *,
    label: str = "POD",
    span: tuple[float, float] = (0.05, 0.3),
) -> tuple[Subspace, float | None]:
    """The mass-weighted PCA/POD basis of the training frames (checkpoint stage ``basis``).

    Sized by the settings ``k``, else by ``tolerance`` (default 1% of the bounding-box
    diagonal; Fulton 2019 sec. 4.3), at most ``max_k``; the tolerance holds on the held-out
    frames too.

    Parameters
    ----------
    train_x, val_x : (F, n, 3), (G, n, 3) float arrays, positions (m)
    label : what progress messages call the basis ("POD", "PCA")
    span : progress fractions at the start and the end of the stage

    Returns
    -------
    (Subspace, tolerance) : tolerance in metres, None when ``k`` was given without one
    """
    s, b = run.settings, run.bakes
    X = b.X
    tol = s["tolerance"]
    if s["k"] is None and tol is None:
        tol = 0.01 * float(np.linalg.norm(X.max(0) - X.min(0)))

    def compute() -> Subspace:
        run.say(span[0], f"{label} of the bake displacements")
        return mass_weighted_pod(
            train_x - X,
            b.mass,
            b.pinned,
            k=s["k"],
            tolerance=tol if s["k"] is None else None,
            max_k=s["max_k"],
            validation=(val_x - X) if len(val_x) else None,
            X=X,
        )

    sub, resumed = run.checkpoints.stage(
        "basis",
        compute,
        to_arrays=_subspace_arrays,
        from_arrays=lambda d: Subspace.from_arrays(d | {"info": str(d["info"])}),
    )
    if resumed:
        run.say(span[1], f"{label} basis of {sub.k} modes from checkpoint")
    return sub, tol


def fit_cubature(
    run: TrainingRun,
    sub: Subspace,
    train_x: np.ndarray,
    train_groups: np.ndarray,
    val_x: np.ndarray,
    *,
    project: bool,
    span: tuple[float, float],
) -> Cubature:
    """Optimized cubature (An et al. 2008) on the basis ``sub.U`` (checkpoint stage
    ``cubature``).

    Fitted on ``cubature_poses`` training frames to ``cubature_target`` (at most
    ``max_cubature`` elements), stopped on the ``cubature_validation`` share of the training
    trajectories and checked on held-out ones. Streams ``cubature_elements`` and the errors.

    Parameters
    ----------
    train_x, train_groups, val_x : as :meth:`TrainingBakes.training_frames` returns them
    project : fit on the poses projected onto the basis (the shapes a runtime whose positions
        are ``X + U q(z)`` takes), else on the bake poses as they are
    span : progress fractions at the start and the end of the stage
    """
    s, b = run.settings, run.bakes
    lo, hi = span

    def compute() -> Cubature:
        pick = even_indices(len(train_x), s["cubature_poses"])
        poses = train_x[pick]
        held = val_x[even_indices(len(val_x), s["cubature_poses"])] if len(val_x) else None
        if project:
            poses = sub.project(poses)
            held = sub.project(held) if held is not None else None

        def cub_progress(done, total, info=None):
            run.say(lo + (hi - lo) * min(done / max(total, 1), 1.0), f"cubature: {done} elements")

        return optimized_cubature(
            _fem.TetFEM(b.X, b.T, b.material),
            sub.U,
            poses,
            target=s["cubature_target"],
            max_elements=s["max_cubature"],
            seed=s["seed"],
            heldout_poses=held,
            validation_fraction=s["cubature_validation"],
            groups=train_groups[pick],
            progress=cub_progress,
            should_cancel=run.should_cancel,
        )

    cub, resumed = run.checkpoints.stage(
        "cubature",
        compute,
        to_arrays=lambda c: c.to_arrays(),
        from_arrays=lambda d: Cubature.from_arrays(d, n_elements=len(b.T)),
    )
    if resumed:
        run.say(hi, f"cubature of {len(cub)} elements from checkpoint")
    run.emit(
        {
            "cubature_elements": len(cub),
            **{k: v for k, v in cub.info.items() if k.endswith("error")},
        }
    )
    return cub
