"""Compare with Bake as a worker job: a model replays a bake's scenario out of Blender's
process, and the per-vertex errors against the bake are measured there.

The add-on checks what it can without the model (the bake still fits the object, the
model file is there) and starts the job; the worker (:func:`compare_with_bake`) loads the
model through the registry, replays the bake (:func:`.compare.replay_bake`, the replay
training's validation uses), maps both sides to the render mesh and writes the result
file; the add-on shows it (:func:`read_result`: the ghost, the error attributes).

The result file (``<cache dir>/<object>/compare/<bake>.npz``, written atomically, so a
cancel or a crash leaves the previous comparison as it was; read with
``allow_pickle=False``): ``reduced`` and ``full`` (F, r, 3) float32, world render
positions (m) of the model and of the bake; ``errors`` (F, r) float32, their distance (m);
``per_frame_max``, ``per_frame_mean``, ``per_frame_rms`` (F,) float64 and ``max``,
``mean``, ``rms`` float64 (m, over float64 positions); ``key``, the add-on's identity of
what was compared (a JSON string), so a result that no longer fits is recognised.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..data.files import ensure_writable_dir, write_npz
from ..engine.render import read_render_map
from ..errors import CacheError, JobCancelled, SimulationError
from ..geometry.embedding import render_positions
from ..kinds.cloth.source import is_cloth_bake, replay_cloth_bake
from .events import frames_job
from .simulate import load_model_for

_STATS = ("max", "mean", "rms", "per_frame_max", "per_frame_mean", "per_frame_rms")


def compare_with_bake(
    spec: dict,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> dict:
    """Replay a bake with an object's model; write the errors against the bake.

    Parameters
    ----------
    spec : dict
        ``name`` (the object), ``model``, ``expect_mesh_hash``, ``method`` /
        ``method_origin`` (as :func:`.simulate.simulate_to_pc2`), ``tets``, ``embedding``,
        ``bake`` (the bake folder) and ``bake_name``, ``bake_mesh_hash`` (the world mesh
        it recorded), ``out`` (the result ``.npz``) and ``key`` (a string stored with it);
        ``memory_steps`` (optional, Compare Methods): also measure the runtime's memory
        over loading the model and that many steps (:func:`runtime_memory`);
        ``closest_only`` (optional, Compare Methods' PCA at equal DOFs): no replay, the
        model's closest shapes stand in for it (a FEM bake and a model with closest
        shapes; else the replay as without it): the file's ``reduced`` and every error
        are theirs, ``step_ms`` is 0.
    progress : ``progress(done, total)`` after every frame replayed.
    should_cancel : checked before every step; True stops with :class:`JobCancelled`,
        ``out`` as it was.

    Returns
    -------
    dict: ``path``, ``frames``, ``max``, ``mean``, ``rms`` (m, the replay's per-vertex
    errors over every frame and render vertex), ``step_ms`` (median wall time of a reduced
    step: a burst of other work on the machine moves a mean), ``diagonal`` (m, of the render mesh's bounding box at rest) and
    ``closest_max``, ``closest_mean``, ``closest_rms`` (m, the errors of the model's
    closest shapes to the bake's frames, :func:`.compare.closest_shapes`: the linear PCA
    projection; None for a model without closest shapes); with ``memory_steps``,
    ``memory`` (:func:`runtime_memory`).

    Raises
    ------
    CacheError
        The bake or the model is missing, stale or foreign, or they belong to different
        placements of the mesh.
    SimulationError
        The model cannot replay the bake (time step) or diverged.
    """
    from ..bake import replay_scenario
    from ..engine.replay import closest_shapes, error_stats, replay_bake, vertex_errors

    name = str(spec.get("name", "the object"))
    bake_name = str(spec.get("bake_name") or Path(spec["bake"]).stem)
    out = Path(spec["out"])
    ensure_writable_dir(out.parent, "the comparison")
    cache, spec = _open_bake(spec)
    sim, model = load_model_for(spec)
    # a model put on the object's tets (``mesh_matrix``) runs on the object's world mesh
    runs_on = spec.get("expect_mesh_hash") if spec.get("mesh_matrix") else model.mesh_hash
    if runs_on != cache.mesh_hash:
        raise CacheError(
            f"Bake '{bake_name}' simulates '{name}' at another placement than its model was "
            "trained on (the object moved in between); re-bake, or re-train on this bake."
        )
    _, n_surface, emb = read_render_map(spec, len(sim.rest_positions()))
    seconds: list[float] = []
    cloth_shapes: list | None = None
    has_shapes = callable(getattr(sim, "closest_shape", None))
    closest_only = bool(spec.get("closest_only")) and has_shapes and not is_cloth_bake(cache.meta)
    try:
        if closest_only:  # the shapes alone: no dynamics (the PCA models' cubature is a stub)
            x = np.asarray(cache.channel("positions"), dtype=np.float64)[: int(cache.n_frames)]
            P = closest_shapes(sim, x)
        elif is_cloth_bake(cache.meta):  # Blender's cloth: its recorded colliders and frame
            # a driven model's closest shapes are taken in the frame of each step, on the way
            cloth_shapes = [] if has_shapes else None
            P = replay_cloth_bake(
                sim,
                cache,
                cancel=should_cancel,
                step_seconds=seconds,
                progress=progress,
                closest=cloth_shapes,
            )
        else:
            _, driver = replay_scenario(cache)
            P = replay_bake(
                sim, cache, driver, cancel=should_cancel, step_seconds=seconds, progress=progress
            )
    except SimulationError as e:
        raise SimulationError(f"The model of '{name}' cannot replay bake '{bake_name}': {e}") from e
    reduced = render_positions(P, n_surface, emb)
    x_full = np.asarray(cache.channel("positions"), dtype=np.float64)[: len(P)]
    full = render_positions(x_full, n_surface, emb)
    errors = vertex_errors(reduced, full)
    stats = error_stats(errors)
    rest = render_positions(np.asarray(cache.X), n_surface, emb)
    diagonal = float(np.linalg.norm(rest.max(axis=0) - rest.min(axis=0))) if len(rest) else 0.0
    # The same frames' closest shapes: what the model can represent at best (its shapes),
    # against which the replay's error (its dynamics) is judged.
    shapes = None
    if closest_only:
        shapes = stats
    elif cloth_shapes is not None:
        shapes = error_stats(vertex_errors(np.asarray(cloth_shapes), full))
    elif has_shapes:
        shapes = error_stats(
            vertex_errors(render_positions(closest_shapes(sim, x_full), n_surface, emb), full)
        )
    write_npz(
        out,
        {
            "reduced": reduced.astype(np.float32),
            "full": full.astype(np.float32),
            "errors": errors.astype(np.float32),
            "key": np.array(str(spec.get("key", ""))),
            **{k: np.asarray(stats[k], dtype=np.float64) for k in _STATS},
        },
    )
    memory = None
    if spec.get("memory_steps"):  # after the timed replay: tracing slows what it traces
        memory = runtime_memory(spec, cache, int(spec["memory_steps"]))
    return {
        **({"memory": memory} if memory else {}),
        "path": str(out),
        "frames": int(stats["frames"]),
        "max": stats["max"],
        "mean": stats["mean"],
        "rms": stats["rms"],
        "step_ms": 1000.0 * float(np.median(seconds)) if seconds else 0.0,
        "diagonal": diagonal,
        **{f"closest_{k}": shapes[k] if shapes else None for k in ("max", "mean", "rms")},
    }


def _open_bake(spec: dict) -> tuple:
    """The bake of a compare job ``spec`` (a :class:`.cache.BakeCache`) and the spec to load
    its model with: a model put on the object's tets (``mesh_matrix``) replays the bake
    pinned as the bake was.

    Raises
    ------
    CacheError
        The bake is missing, or not of the mesh ``bake_mesh_hash``; re-bake.
    """
    from ..data.cache import BakeCache

    bake_name = str(spec.get("bake_name") or Path(spec["bake"]).stem)
    try:
        cache = BakeCache.open(spec["bake"], expect_mesh_hash=spec.get("bake_mesh_hash") or None)
    except FileNotFoundError as e:
        raise CacheError(f"Bake '{bake_name}' is missing ({spec['bake']}); re-bake.") from e
    except CacheError as e:
        raise CacheError(f"Bake '{bake_name}' cannot be used ({e}); re-bake.") from e
    if spec.get("mesh_matrix") is not None and "pinned" in cache.extra_names:
        spec = {**spec, "pinned": np.asarray(cache.extra("pinned"), dtype=np.int64).tolist()}
    return cache, spec


def _step_inputs(cache, steps: int) -> tuple[list, tuple | None]:
    """The frame inputs of the bake ``cache``'s first ``steps`` steps, as its replay gives
    them (:func:`.compare.replay_bake`, :func:`.clothbake.replay_cloth_bake`), and the
    state they start from (``start_from``'s arguments; None: ``reset``)."""
    from ..bake import replay_scenario
    from ..engine.protocol import FrameInputs
    from ..physics.colliders import Collider

    steps = max(1, min(int(steps), int(cache.n_frames) - 1))
    if is_cloth_bake(cache.meta):
        shapes = cache.meta.get("colliders") or []
        C = np.asarray(cache.channel("colliders"), dtype=np.float64) if shapes else None
        R = np.asarray(cache.channel("reference_frame"), dtype=np.float64)
        inputs = [
            FrameInputs(
                colliders=[
                    Collider(c["kind"], float(c["radius"]), float(c["half_length"]), C[f, j])
                    for j, c in enumerate(shapes)
                ],
                reference_frame=R[f],
            )
            for f in range(1, steps + 1)
        ]
        return inputs, None
    _, driver = replay_scenario(cache)
    inputs = []
    for f in range(1, steps + 1):
        inp = driver.inputs(f)
        inputs.append(
            FrameInputs(forces=inp.forces, colliders=inp.colliders, pin_targets=inp.pin_targets)
        )
    return inputs, (driver.x0, driver.v0, driver.forces[0])


def _restart(sim, start: tuple | None) -> None:
    if start is None:
        sim.reset()
    else:
        sim.start_from(*start)


def runtime_memory(spec: dict, cache, steps: int = 10) -> dict:
    """What the model takes at runtime, as Simulate runs it: the peak of the memory Python
    and numpy allocate (``tracemalloc``: numpy reports its array buffers to it) while the
    model file is loaded and ``steps`` frames of the bake ``cache`` are stepped (the step's
    working memory on top of the loaded arrays), not the file's size. Allocations native
    code makes itself (a sparse LU's factors inside SuperLU) are not seen.

    Returns
    -------
    dict: ``peak_bytes`` (load and steps), ``loaded_bytes`` (held after the load: the
    model's arrays), ``steps``.
    """
    import tracemalloc

    inputs, start = _step_inputs(cache, steps)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sim, _ = load_model_for(spec)
        loaded = tracemalloc.get_traced_memory()[0] - base
        _restart(sim, start)
        for inp in inputs:
            sim.step(inp)
            sim.positions()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return {"peak_bytes": int(peak), "loaded_bytes": int(loaded), "steps": len(inputs)}


#: Compare Methods' step timing (:func:`step_times`): rounds in which every model replays
#: the first :data:`STEP_FRAMES` frames of a held-out bake in turn.
STEP_ROUNDS = 5
STEP_FRAMES = 48


def step_times(
    specs: list[dict],
    *,
    rounds: int = STEP_ROUNDS,
    frames: int = STEP_FRAMES,
    should_cancel: Callable[[], bool] | None = None,
) -> list[float]:
    """Milliseconds per step of the model of each compare job spec of ``specs`` (each on its
    own bake), measured so that a method's number does not depend on when it ran: every
    model is loaded first, then :func:`interleaved_step_ms` replays the bakes' first
    ``frames`` frames in ``rounds`` rounds, the models taking turns.

    Raises
    ------
    CacheError
        A bake or a model is missing or foreign (as :func:`compare_with_bake`).
    JobCancelled
        ``should_cancel`` said so between two replays.
    """
    runs = []
    for spec in specs:
        cache, spec = _open_bake(spec)
        sim, _ = load_model_for(spec)
        runs.append((sim, *_step_inputs(cache, frames)))
    return interleaved_step_ms(runs, rounds=rounds, should_cancel=should_cancel)


def interleaved_step_ms(
    runs: list[tuple], *, rounds: int, should_cancel: Callable[[], bool] | None = None
) -> list[float]:
    """Each run's step time (ms): in every round each ``(sim, inputs, start)`` of ``runs``
    replays ``inputs`` from ``start`` (None: ``sim.reset()``) in turn, the first to go
    rotating from round to round; a run's time is the least over the rounds of its round's
    median step (each step's own ``wall_time``, as :func:`.compare.replay_bake` times it).

    Why: timed one after another, each model met whatever else the machine ran in its own
    minute, and a method's ms/step moved 2-4x from one comparison to the next (a jelly's
    Shen and LiCROM: 2.43 vs 1.43 ms, then 4.18 vs 11.3). Taking turns puts every model
    in the same minutes; the least round drops the rounds another job slowed, the median
    within it the single steps.
    """
    best = [math.inf] * len(runs)
    for r in range(max(1, int(rounds))):
        for k in range(len(runs)):
            i = (r + k) % len(runs)
            if should_cancel is not None and should_cancel():
                raise JobCancelled("Cancelled while timing the models' steps.")
            sim, inputs, start = runs[i]
            _restart(sim, start)
            seconds = []
            for inp in inputs:
                seconds.append(float(getattr(sim.step(inp), "wall_time", 0.0)))
                sim.positions()
            best[i] = min(best[i], float(np.median(seconds)) if seconds else 0.0)
    return [1000.0 * b for b in best]


def read_result(path: str | Path) -> dict:
    """The arrays of a result file (see the module docstring): ``reduced``, ``full``,
    ``errors``, ``key`` (str) and ``stats`` (as :func:`.compare.error_stats`).

    Raises
    ------
    CacheError
        The file is missing or not a comparison; compare again.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in ("reduced", "full", "errors")}
            out["key"] = str(z["key"])
            stats = {k: z[k] for k in _STATS}
    except (OSError, ValueError, KeyError) as e:
        raise CacheError(
            f"The comparison {path} cannot be read ({e}); run Compare with Bake again."
        ) from e
    for k in ("max", "mean", "rms"):
        stats[k] = float(stats[k])
    stats["frames"] = len(out["errors"])
    out["stats"] = stats
    return out


def run_compare(spec: dict) -> dict:
    """``kind: "compare"``: Compare with Bake, a model replaying a bake and its errors
    against it written to a result file (:func:`compare_with_bake`); a
    cancel or a crash leaves the previous result.

    Spec keys: see :func:`compare_with_bake`. Result: ``path``,
    ``frames``, ``max``, ``mean``, ``rms``, ``step_ms``, ``diagonal``, ``closest_max``,
    ``closest_mean``, ``closest_rms``; cancelled: ``written`` False.
    """
    return frames_job(compare_with_bake, spec, "replayed")
