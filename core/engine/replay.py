"""Reduced model against full space: replay a bake's scenario with a reduced simulator and
measure how far each vertex lands from the bake.

One replay for everyone: training's validation rollout and Blender's Compare with Bake
both call :func:`replay_bake`, so the number a model is trained to and the colours a user
sees come from the same frames.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import JobCancelled, SimulationError
from .protocol import FrameInputs


def replay_bake(
    sim,
    cache,
    driver,
    *,
    cancel: Callable[[], bool] | None = None,
    step_seconds: list[float] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Replay a bake's scenario with a reduced simulator.

    Starts from the scenario's initial state (``sim.start_from``) and steps every
    committed frame of the bake with that frame's external forces, colliders and pin
    targets (a reduced model follows pins that move rigidly).

    Parameters
    ----------
    sim : a :class:`.reduced.Simulator` of the bake's (world-space) tet mesh
    cache : :class:`.cache.BakeCache` (only ``n_frames`` and ``mesh`` sizes are read)
    driver : :class:`.scenarios.ScenarioDriver` of the bake
        ``core.bake.replay_scenario(cache)[1]`` (the inputs the bake recorded).
    cancel : called before each step; True raises :class:`JobCancelled`
    step_seconds : when given, the wall time of each step (s) is appended to it
    progress : ``progress(f, F - 1)`` after frame ``f`` was stepped

    Returns
    -------
    (F, n, 3) float array
        Reduced positions (m) of the ``F = cache.n_frames`` bake frames; frame 0 is the
        initial state.

    Raises
    ------
    SimulationError
        The model does not fit the bake (vertex count, time step) or a step diverged.
    """
    n_frames = int(cache.n_frames)
    n = len(driver.x0)
    if len(sim.positions()) != n:
        raise SimulationError(
            f"The model has {len(sim.positions())} vertices but the bake has {n}; compare a "
            "model with a bake of the same mesh."
        )
    dt_model = getattr(getattr(sim, "settings", None), "dt", None)
    dt_bake = float(driver.ctx.dt)
    if dt_model is not None and abs(float(dt_model) - dt_bake) > 1e-9 * dt_bake:
        raise SimulationError(
            f"The model steps {float(dt_model):.6g} s per frame but the bake was made at "
            f"{dt_bake:.6g} s per frame; re-bake at the model's frame rate or re-train."
        )
    if n_frames > len(driver.forces):
        raise SimulationError(
            f"The bake has {n_frames} frames but its scenario only {len(driver.forces)}; re-bake."
        )
    sim.start_from(driver.x0, driver.v0, driver.forces[0])
    out = np.empty((n_frames, n, 3))
    out[0] = sim.positions()
    for f in range(1, n_frames):
        if cancel is not None and cancel():
            raise JobCancelled("Cancelled while replaying the bake with the reduced model.")
        inp = driver.inputs(f)
        rep = sim.step(
            FrameInputs(forces=inp.forces, colliders=inp.colliders, pin_targets=inp.pin_targets)
        )
        if step_seconds is not None:
            step_seconds.append(float(getattr(rep, "wall_time", 0.0)))
        out[f] = sim.positions()
        if progress is not None:
            progress(f, n_frames - 1)
    return out


def vertex_errors(reduced: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Per-frame, per-vertex distance between reduced and full-space positions.

    Parameters
    ----------
    reduced, full : (F, r, 3) float arrays
        Positions, metres.

    Returns
    -------
    (F, r) float array
        ``|reduced - full|``, metres.
    """
    reduced = np.asarray(reduced, dtype=np.float64)
    full = np.asarray(full, dtype=np.float64)
    if reduced.shape != full.shape or reduced.ndim != 3 or reduced.shape[-1] != 3:
        raise ValueError(
            f"reduced and full positions must both be (F, r, 3); got {reduced.shape} and "
            f"{full.shape}"
        )
    return np.linalg.norm(reduced - full, axis=-1)


def error_stats(errors: np.ndarray) -> dict:
    """Summary of per-vertex errors.

    Parameters
    ----------
    errors : (F, r) float array
        Per-frame, per-vertex distances (m), from :func:`vertex_errors`.

    Returns
    -------
    dict
        ``frames`` F; ``max``, ``mean``, ``rms`` over all frames and vertices (m);
        ``per_frame_max``, ``per_frame_mean``, ``per_frame_rms``: (F,) float arrays (m).
        With no frames every number is 0.
    """
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim != 2:
        raise ValueError(f"errors must be (F, r); got {e.shape}")
    if e.size == 0:
        z = np.zeros(len(e))
        return {
            "frames": len(e),
            "max": 0.0,
            "mean": 0.0,
            "rms": 0.0,
            "per_frame_max": z,
            "per_frame_mean": z,
            "per_frame_rms": z,
        }
    return {
        "frames": len(e),
        "max": float(e.max()),
        "mean": float(e.mean()),
        "rms": float(np.sqrt(np.mean(e**2))),
        "per_frame_max": e.max(axis=1),
        "per_frame_mean": e.mean(axis=1),
        "per_frame_rms": np.sqrt(np.mean(e**2, axis=1)),
    }


def closest_shapes(sim, x: np.ndarray) -> np.ndarray:
    """The model's closest shapes (:meth:`core.simulator.Simulator.closest_shape`) to
    full-space positions ``x`` (F, n, 3), metres. Their error is what the model can represent
    at best: a rollout far worse than it means the reduced space stiffens (too few DOFs to
    bend freely)."""
    return np.stack([sim.closest_shape(xf) for xf in np.asarray(x, dtype=np.float64)])


def stiffening_hint(rollout: dict) -> str | None:
    """A warning when a rollout is far worse than the model's closest shapes, else None."""
    best, err = rollout.get("projection_max_error_m"), rollout.get("max_error_m")
    if best is None or err is None or rollout.get("max_error_rel", 0.0) < 0.02:
        return None
    if err <= 3.0 * best:
        return None
    return (
        f"The held-out rollout ends up to {1000 * err:.3g} mm from the bake although the model "
        f"can take shapes within {1000 * best:.3g} mm of it: its dynamics, not its shapes, "
        "limit the accuracy. Usually the reduced object is stiffer than the real one (too few "
        "DOFs to bend freely) or the cubature is too coarse: train with more modes (or a "
        "larger latent size) or a lower cubature target."
    )


def rollout_metrics(make_sim: Callable, cache, *, cancel: Callable[[], bool] | None = None) -> dict:
    """Replay a (held-out) bake's scenario with a reduced simulator; its errors against the bake.

    Parameters
    ----------
    make_sim : callable(driver) -> simulator
        Builds the reduced simulator; ``driver`` is the bake's :class:`scenarios.ScenarioDriver`
        (its ``colliders(0)`` are the initial colliders), or None for a bake of Blender's
        cloth (:func:`.clothbake.is_cloth_bake`, replayed from rest with its recorded
        colliders and reference frame, :func:`.clothbake.replay_cloth_bake`).
    cache : cache.BakeCache

    Returns
    -------
    dict with ``bake``, ``frames``, ``max_error_m``, ``mean_error_m`` (mean of per-frame
    maxima), ``vertex_mean_error_m`` (mean over every frame and vertex, as ``compare``'s),
    ``max_error_rel`` (of the bounding-box diagonal), ``step_ms``,
    ``projection_max_error_m`` and ``projection_mean_error_m`` (the same frames' errors of
    :func:`closest_shapes`, for models that have it: the floor); or ``skipped`` with the
    reason when the reduced simulation diverged.
    """
    from pathlib import Path

    from ..bake import replay_scenario
    from ..kinds.cloth.source import is_cloth_bake, replay_cloth_bake

    X = np.asarray(cache.X, dtype=float)
    cloth = is_cloth_bake(cache.meta)
    driver = None if cloth else replay_scenario(cache)[1]
    sim = make_sim(driver)
    times: list[float] = []
    # a driven model's closest shapes are taken in the frame of each step, on the way
    shapes: list | None = [] if cloth and callable(getattr(sim, "closest_shape", None)) else None
    try:
        if cloth:
            reduced = replay_cloth_bake(
                sim, cache, cancel=cancel, step_seconds=times, closest=shapes
            )
        else:
            reduced = replay_bake(sim, cache, driver, cancel=cancel, step_seconds=times)
    except SimulationError as e:
        return {"skipped": f"the reduced rollout failed: {e}"}
    full = cache.channel("positions")
    # frame 0 is the initial state: the rollout error is that of the stepped frames
    stats = error_stats(vertex_errors(reduced[1:], full[1 : len(reduced)]))
    errs = stats["per_frame_max"]
    diag = float(np.linalg.norm(X.max(0) - X.min(0)))
    out = {
        "bake": Path(cache.path).name,
        "frames": int(len(errs)),
        "max_error_m": stats["max"],
        "mean_error_m": float(errs.mean()) if len(errs) else 0.0,
        "vertex_mean_error_m": stats["mean"],
        "max_error_rel": stats["max"] / diag if diag > 0 else 0.0,
        "step_ms": float(1000 * np.mean(times)) if times else 0.0,
    }
    if len(reduced) > 1:
        target = np.asarray(full[1 : len(reduced)])
        if shapes is not None:
            best = vertex_errors(np.asarray(shapes[1:]), target)
        elif callable(getattr(sim, "closest_shape", None)):
            best = vertex_errors(closest_shapes(sim, target), target)
        else:
            best = None
        if best is not None:
            out["projection_max_error_m"] = float(best.max())
            out["projection_mean_error_m"] = float(best.mean())
    return out
