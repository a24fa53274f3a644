"""Bake Simulation as a worker job: a trained model stepped over the timeline and written
as a PC2 point cache of the render mesh, out of Blender's process.

The add-on gathers what every frame needs from Blender into arrays, a :class:`Track` (the
object's world matrix, which carries its pins, and the colliders' kind, size and
transform per frame; sliders, markers and a driving reference frame where they are
gathered), and writes it with the job (:func:`write_track`). The worker
(:func:`simulate_to_pc2`) loads the model through the registry, steps it from rest at the
track's first frame with :meth:`Track.inputs` (the same inputs the viewport driver builds
for a frame, :mod:`addon.simulate`), and streams the render mesh in the object's local
space into a PC2 written beside its destination and renamed over it only once complete
(:class:`.pc2.PC2Writer`): a cancel, an error or a crash leaves the previous cache as it
was.

Files, in the job folder (``<cache dir>/<object>/simulate.job/``): ``inputs.npz`` (the
track, read with ``allow_pickle=False``). The PC2 goes where the user asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..data.files import ensure_writable_dir
from ..engine.engine import MeshAdapter, TrackRow
from ..engine.render import read_render_map, render_local, to_local, to_local_shown, to_world
from ..engine.track import FrameReader, Track, ground_plane, read_track, write_track
from ..errors import CacheError, JobCancelled, NeuralRomError
from .events import frames_job

#: what moved to core.engine (track, render) and stays importable here
__all__ = [
    "TRACK_FILE",
    "FrameReader",
    "Track",
    "ground_plane",
    "load_model_for",
    "read_render_map",
    "read_track",
    "render_local",
    "run_simulate",
    "simulate_to_pc2",
    "to_local",
    "to_local_shown",
    "to_world",
    "track_frames",
    "write_track",
]

TRACK_FILE = "inputs.npz"


def load_model_for(spec: dict):
    """The simulator and model of a job spec's ``model`` (its method found through the
    registry, from ``method_origin`` for a method registered outside the package), refused
    with what to do when it is not the model of the mesh ``expect_mesh_hash``. With
    ``mesh_matrix`` (a model that runs on other meshes) it is put on the job's ``tets``
    placed in the world by that (4, 4) matrix, with its translation as the object's origin
    and ``pinned`` (the nodes the object's pin group holds; absent: the model's choice).

    Returns (simulator, model).
    """
    from .. import registry

    name = str(spec.get("name", "the object"))
    if spec.get("method") and spec.get("method_origin"):
        registry.get(spec["method"], origin=spec["method_origin"])
    path = Path(spec["model"])
    if not path.is_file():
        raise CacheError(
            f"The model of '{name}' is missing ({path}); train again (or check that the cache "
            "folder moved with the .blend)."
        )
    if spec.get("mesh_matrix") is not None:  # a model put on the object's own tets
        from ..data.meshfile import read_tetmesh

        M = np.asarray(spec["mesh_matrix"], dtype=np.float64).reshape(4, 4)
        tm = read_tetmesh(spec["tets"])
        pinned = spec.get("pinned")
        pinned = None if pinned is None else np.asarray(pinned, dtype=np.int64)
        where = {"mesh": (to_world(np.asarray(tm.X, np.float64), M), tm.T, M[:3, 3], pinned)}
    else:
        where = {"expect_mesh_hash": spec.get("expect_mesh_hash")}
    try:
        return registry.load_simulator(path, **where)
    except CacheError as e:
        raise CacheError(
            f"The model of '{name}' cannot drive it: {e}. (Moving the object after baking also "
            "changes its mesh: put it back, or re-bake and re-train.)"
        ) from e


def simulate_to_pc2(
    spec: dict,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> dict:
    """Step an object's model over the frames of a track and write its render mesh as a PC2.

    Parameters
    ----------
    spec : dict
        ``name`` (the object), ``model`` (the model file), ``expect_mesh_hash`` (of the
        world tet mesh the model must belong to), ``method`` / ``method_origin``
        (:func:`.registry.job_fields`), ``tets`` and ``embedding`` (the object's local tet
        mesh and embedding files, ``""`` for none), ``inputs`` (:func:`write_track`),
        ``out`` (the ``.pc2``), ``frame_start`` .. ``frame_end`` (the scene frames
        written, at or after the track's ``frame0``).
    progress : ``progress(done, total)`` after every frame stepped.
    should_cancel : checked before every step; True stops with :class:`JobCancelled`
        and ``out`` as it was.

    Returns
    -------
    dict: ``path``, ``frames`` (written), ``frame_start``, ``step_ms`` (mean step, ms).

    Raises
    ------
    CacheError
        The model is missing, of another mesh or unreadable.
    NeuralRomError
        The frame range is not covered by the track.
    """
    from ..data.pc2 import PC2Writer

    name = str(spec.get("name", "the object"))
    track, first, last = track_frames(spec)
    f0 = track.frame0
    out = Path(spec["out"])
    ensure_writable_dir(out.parent, "the point cache", "pick another path")
    sim, model = load_model_for(spec)
    X_local, n_surface, emb = read_render_map(spec, len(sim.rest_positions()))
    if X_local is not None and len(sim.rest_positions()) != len(X_local):
        raise CacheError(
            f"The model of '{name}' has {len(sim.rest_positions())} nodes but its tets "
            f"{len(X_local)}; re-bake and re-train."
        )
    adapter = MeshAdapter.for_model(sim, model, (X_local, n_surface, emb))
    n_render = int(emb.n_points) if emb is not None else n_surface

    def local(k: int) -> np.ndarray:
        return adapter.render(sim.positions(), TrackRow(track, k))

    total = last - f0
    seconds: list[float] = []
    sim.reset()  # the rest state at frame0, as the viewport's timeline starts
    with PC2Writer(out, n_render, start_frame=first, sample_rate=1.0) as writer:
        if first == f0:
            writer.write(local(0))
        for f in range(f0 + 1, last + 1):
            if should_cancel is not None and should_cancel():
                raise JobCancelled(
                    f"Bake Simulation of '{name}' cancelled at frame {f}: {out.name} was not "
                    "changed"
                )
            k = f - f0
            inputs = adapter.inputs(TrackRow(track, k))
            t0 = time.perf_counter()
            sim.step(inputs)
            seconds.append(time.perf_counter() - t0)
            if f >= first:
                writer.write(local(k))
            if progress is not None:
                progress(k, total)
    return {
        "path": str(out),
        "frames": last - first + 1,
        "frame_start": first,
        "step_ms": 1000.0 * float(np.mean(seconds)) if seconds else 0.0,
    }


def track_frames(spec: dict) -> tuple[Track, int, int]:
    """The track of a job that plays frames (``spec["inputs"]``, :func:`write_track`) and its
    scene frames ``frame_start`` .. ``frame_end``, checked to lie in the track.

    Raises
    ------
    CacheError
        The track cannot be read.
    NeuralRomError
        The frames are not all in the track.
    """
    track = read_track(spec["inputs"])
    first, last = int(spec["frame_start"]), int(spec["frame_end"])
    f0 = track.frame0
    if not (f0 <= first <= last < f0 + len(track)):
        raise NeuralRomError(
            f"Frames {first}..{last} are not in the gathered inputs ({f0}..{f0 + len(track) - 1}); "
            "run Bake Simulation again."
        )
    return track, first, last


def run_simulate(spec: dict) -> dict:
    """``kind: "simulate"``: Bake Simulation, a model stepped over the frames the add-on
    gathered and written as a PC2 (:func:`simulate_to_pc2`). The PC2 is
    renamed into place only once complete: a cancel or a crash leaves the previous one.

    Spec keys: see :func:`simulate_to_pc2`. Result: ``path``, ``frames``,
    ``frame_start``, ``step_ms``; cancelled: ``path`` and ``written`` False.
    """
    return frames_job(simulate_to_pc2, spec, "simulated")
