"""Face jobs run by the worker for the Blender side of active faces (Srinivasan et al. 2021):
set up a face from meshes, build the procedural demo head, and play a trained face over a
timeline to a PC2.

Blender gathers arrays and writes them with the job; nothing here imports bpy, and nothing
heavy (the flesh lattice, the demo's simulated expressions, the model's solves) runs in
Blender's process.

Conventions the Blender side and these jobs share (``addon/face.py``):

* Everything is in the **skin object's local space** (metres): the skin, its shape keys, the
  skull and the jaw (their meshes mapped into it), the hinge, markers and colliders. The face
  moves with its object; a skin object with a scale other than 1 is refused (the flesh's
  stiffness is in pascals of metres).
* The **jaw hinge** is the jaw object's origin and its local X axis: rotating the jaw about it
  by a positive angle opens the mouth.
* A **shape key's jaw angle** is written in its name, ``jaw<degrees>`` (``smile_jaw20``,
  ``pucker jaw12.5``); no such token: the jaw is closed. A key whose name holds ``heldout``
  is held out of training (to measure how the fit generalizes). Blender's shape keys hold no
  custom properties, so the name is where a sculptor can see and edit both.

Files (``<cache dir>/<object>/``): ``face.npz`` (:func:`core.face.save_face`, written beside
and renamed over, so a failed set-up leaves the previous face), ``face.job/inputs.npz`` (the
set-up's meshes, ``allow_pickle=False``).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import JobCancelled, MeshError, NeuralRomError
from .events import Progress, frames_job

INPUTS_FILE = "inputs.npz"
FACE_FILE = "face.npz"
#: Lattice cells along the skin's tallest side when the spacing is automatic (the demo head:
#: 21 cm at 18 mm, about 4K tets).
AUTO_CELLS = 12

_JAW = re.compile(r"jaw\s*=?\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_HELD_OUT = re.compile(r"held[\s_-]?out", re.IGNORECASE)


def key_jaw_angle(name: str) -> float:
    """The jaw angle (radians) a shape key's name gives (``jaw20`` -> 20 degrees; 0 without)."""
    m = _JAW.search(name)
    return math.radians(float(m.group(1))) if m else 0.0


def key_held_out(name: str) -> bool:
    """Whether a shape key's name marks it held out of training (``heldout``, ``held_out``)."""
    return bool(_HELD_OUT.search(name))


def key_name(label: str, jaw: float, held_out: bool) -> str:
    """A shape key name that :func:`key_jaw_angle` and :func:`key_held_out` read back
    (``label`` with any jaw token replaced by the angle to 0.01 degree)."""
    base = _JAW.sub("", label).strip("_ ")
    name = f"{base}_jaw{math.degrees(jaw):.2f}"
    return name + ("_heldout" if held_out else "")


def auto_spacing(skin_V: np.ndarray) -> float:
    """The lattice spacing (m) when the user leaves it automatic: the skin's tallest side
    over :data:`AUTO_CELLS`."""
    return float(np.ptp(np.asarray(skin_V, float), axis=0).max()) / AUTO_CELLS


def _save_face_atomic(out: Path, rig, keys) -> Path:
    from ..kinds.face.rig import save_face

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.npz")
    try:
        save_face(tmp, rig, keys)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def face_stats(rig, keys) -> dict:
    """What the panel shows of a face (JSON-able)."""
    q = rig.mesh().element_quality()
    return {
        "tets": int(len(rig.T)),
        "nodes": int(len(rig.X)),
        "skull_nodes": int(len(rig.fixed)),
        "jaw_nodes": int(len(rig.jaw_nodes)),
        "skin_vertices": int(len(rig.skin_V)),
        "keys": int(len(keys)) if keys is not None else 0,
        "held_out": int(np.sum(keys.held_out)) if keys is not None else 0,
        "min_dihedral_deg": float(q["min_dihedral_deg"].min()),
        "mesh_hash": rig.mesh().hash(),
    }


def setup_face(spec: dict, *, progress: Callable[[int, str], None] | None = None) -> dict:
    """Build a face from the meshes Blender gathered and write the face file.

    Spec keys: ``inputs`` (npz: ``skin_V``, ``skin_F``, ``skull_V``, ``skull_F``, ``jaw_V``,
    ``jaw_F``, ``jaw_pivot`` (3,), ``jaw_axis`` (3,), ``key_positions`` (K, s, 3); all in the
    skin's local space, metres), ``key_names`` (K names: jaw angles and held-out flags, see the
    module docstring), ``spacing`` (m; 0: :func:`auto_spacing`), ``out`` (the face file),
    ``record`` (what the host records once the face is written; returned as it came).

    Returns :func:`face_stats` and ``path``, ``spacing``, ``seconds``, ``record``.

    Raises
    ------
    MeshError
        An open mesh, a skull through the skin, a jaw off the flesh, slivers, keys of another
        vertex count (the messages of :func:`core.face.face_rig`); nothing is written.
    """
    from ..kinds.face.rig import ShapeKeys, check_shape_keys, face_rig

    t0 = time.perf_counter()
    say = progress or (lambda done, message: None)
    with np.load(spec["inputs"], allow_pickle=False) as z:
        a = {k: z[k] for k in z.files}
    names = [str(n) for n in spec.get("key_names", [])]
    P = a.get("key_positions", np.zeros((0, len(a["skin_V"]), 3)))
    if len(names) != len(P):
        raise NeuralRomError(
            f"The set-up job has {len(P)} shape keys but {len(names)} names: run Set Up Face again."
        )
    spacing = float(spec.get("spacing") or 0.0) or auto_spacing(a["skin_V"])
    say(1, f"flesh lattice at {spacing * 1000:.1f} mm")
    rig = face_rig(
        (a["skin_V"], a["skin_F"]),
        (a["skull_V"], a["skull_F"]),
        (a["jaw_V"], a["jaw_F"]),
        jaw_pivot=a["jaw_pivot"],
        jaw_axis=a["jaw_axis"],
        spacing=spacing,
    )
    keys = None
    if len(P):
        keys = ShapeKeys(
            positions=np.asarray(P, float),
            jaw=np.array([key_jaw_angle(n) for n in names]),
            names=names,
            held_out=np.array([key_held_out(n) for n in names], bool),
        )
        check_shape_keys(rig, keys)
    say(2, f"{len(rig.T)} tets; writing the face")
    path = _save_face_atomic(Path(spec["out"]), rig, keys)
    return {
        **face_stats(rig, keys),
        "path": str(path),
        "spacing": spacing,
        "seconds": time.perf_counter() - t0,
        "record": spec.get("record", {}),
    }


def demo_face(spec: dict, *, progress: Callable[[int, str], None] | None = None) -> dict:
    """The procedural demo head (:func:`core.face.demo_head`) with ``keys`` simulated
    expressions (``held_out`` of them held out, ``seed``), written as a face file ``out``.

    Spec keys: ``out``, ``size`` ("small" or "bench"), ``keys``, ``held_out``, ``seed``.
    Returns :func:`face_stats` and ``path``, ``seconds``.
    """
    from ..kinds.face.rig import SPACING, demo_head, make_shape_keys

    t0 = time.perf_counter()
    say = progress or (lambda done, message: None)
    count, held = int(spec.get("keys", 16)), int(spec.get("held_out", 4))
    if count - held < 2:
        raise NeuralRomError(
            f"The demo head needs at least 2 training keys ({count} keys, {held} held out)."
        )
    say(1, "demo head")
    rig = demo_head(str(spec.get("size", "small")))
    say(2, f"simulating {count} expressions")
    keys = make_shape_keys(rig, count, held_out=held, seed=int(spec.get("seed", 0)))
    path = _save_face_atomic(Path(spec["out"]), rig, keys)
    return {
        **face_stats(rig, keys),
        "path": str(path),
        "spacing": float(SPACING[str(spec.get("size", "small"))]),
        "seconds": time.perf_counter() - t0,
    }


def simulate_face_to_pc2(
    spec: dict,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> dict:
    """Play a face model over a track and write its skin (the object's local space) as a PC2.

    Spec keys: ``name``, ``model``, ``expect_mesh_hash`` (the face's flesh), ``method`` /
    ``method_origin``, ``inputs`` (:func:`core.engine.track.write_track`: sliders or markers, the
    jaw as ``reference_frame`` and colliders, all in the skin's local space), ``out``,
    ``frame_start`` .. ``frame_end``, ``solve`` and ``jaw`` (:func:`configure_face`). Each frame is solved with the frame's inputs, from the
    previous frame's state, as the viewport does. The PC2 is renamed into place once complete.

    Returns ``path``, ``frames``, ``frame_start``, ``step_ms``, ``threads`` (the BLAS threads
    its frames ran on, :func:`tune_threads`).
    """
    from ..data.pc2 import PC2Writer
    from .simulate import load_model_for, track_frames

    name = str(spec.get("name", "the face"))
    track, first, last = track_frames(spec)
    f0 = track.frame0
    sim = configure_face(face_runtime(*load_model_for(spec), name), spec)
    threads = tune_threads(sim)
    out = Path(spec["out"])
    sim.reset()
    seconds = []
    with PC2Writer(out, len(sim.skin_positions()), start_frame=first, sample_rate=1.0) as w:
        for k in range(first - f0, last - f0 + 1):
            if should_cancel is not None and should_cancel():
                raise JobCancelled(
                    f"Bake Simulation of '{name}' cancelled at frame {f0 + k}: {out.name} was "
                    "not changed"
                )
            t = time.perf_counter()
            sim.step(track.inputs(k))
            seconds.append(time.perf_counter() - t)
            w.write(sim.skin_positions())
            if progress is not None:
                progress(k - (first - f0) + 1, last - first + 1)
    return {
        "path": str(out),
        "frames": last - first + 1,
        "frame_start": first,
        "step_ms": 1000.0 * float(np.mean(seconds)) if seconds else 0.0,
        "threads": threads,
    }


__all__ = [
    "AUTO_CELLS",
    "FACE_FILE",
    "INPUTS_FILE",
    "MeshError",
    "auto_spacing",
    "configure_face",
    "demo_face",
    "face_runtime",
    "face_stats",
    "fit_key",
    "key_held_out",
    "key_jaw_angle",
    "key_name",
    "setup_face",
    "simulate_face_to_pc2",
    "tune_threads",
]


def configure_face(sim, options: dict):
    """Set a face runtime's ``mode`` from ``options["solve"]`` ("reduced" or "full") and its
    ``jaw_from_markers`` from ``options["jaw"]`` ("markers": marker frames solve the jaw's
    hinge angle; "keyed": the jaw is each frame's reference frame) and its
    ``head_from_markers`` from ``options["head"]`` ("markers": marker frames solve the head's
    rigid motion; "fixed": the head stays where the skin is); a missing option keeps
    the runtime's. Returns ``sim``."""
    if options.get("solve"):
        sim.mode = str(options["solve"])
    if options.get("jaw"):
        if options["jaw"] not in ("markers", "keyed"):
            raise NeuralRomError(f"jaw must be 'markers' or 'keyed', not {options['jaw']!r}")
        sim.jaw_from_markers = options["jaw"] == "markers"
    if options.get("head"):
        if options["head"] not in ("markers", "fixed"):
            raise NeuralRomError(f"head must be 'markers' or 'fixed', not {options['head']!r}")
        sim.head_from_markers = options["head"] == "markers"
    return sim


def tune_threads(sim) -> int | None:
    """Have a face runtime measure the BLAS thread count its frames solve fastest on
    (``pick_threads``, where it has one) and keep it; returns the count (None: left as the
    process runs them)."""
    pick = getattr(sim, "pick_threads", None)
    return pick()["threads"] if pick is not None else None


def face_runtime(sim, model, name: str):
    """``sim``, checked to be a face runtime by the registry: its model's method trains on a
    face (the face kind's record, ``DataKind.trained_by``). A face runtime (:class:`.methods.active.ActiveFace` and any
    method registered with ``trains_on={"face"}``) has ``skin_positions()``,
    ``fit_latent(...)``, ``mode`` ("reduced" or "full") and ``jaw_from_markers``.

    Raises NeuralRomError saying what to do for a model of another kind of data.
    """
    from .. import registry
    from ..kinds.face import KIND

    method = registry.get(model.method)
    if not KIND.trained_by(method):
        raise NeuralRomError(
            f"The model of '{name}' is a {method.label} model, not a face "
            "model: train it on the face (Set Up Face, then Train)."
        )
    return sim


def fit_key(spec: dict) -> dict:
    """Fit a face model's latent code to a sculpted key's whole skin (eq. 17 with every skin
    vertex a marker; Levenberg-Marquardt from the zero code, full solve): what the sliders
    must be to show that key, held out of training or not.

    Spec keys: ``model``, ``expect_mesh_hash``, ``method`` / ``method_origin``, ``inputs``
    (npz: ``targets`` (s, 3) skin positions, ``jaw`` (4, 4) the key's jaw transform, both in
    the skin's local space), ``iterations`` (default 30).

    Returns ``z`` (the code), ``mean_error_m`` and ``max_error_m`` (the fitted skin against
    the key), ``iterations``.
    """
    from .simulate import load_model_for

    sim = face_runtime(*load_model_for(spec), str(spec.get("name", "the face")))
    with np.load(spec["inputs"], allow_pickle=False) as z:
        targets, jaw = z["targets"], z["jaw"]
    sim.reset()
    code, x, _, it = sim.fit_latent(
        targets, jaw=jaw, mode="full", pull=0.0, iters=int(spec.get("iterations", 30))
    )
    d = np.linalg.norm(sim.model.skin_of(x, code, jaw) - targets, axis=1)
    return {
        "z": np.asarray(code, float).tolist(),
        "mean_error_m": float(d.mean()),
        "max_error_m": float(d.max()),
        "iterations": int(it),
    }


def _face_meter(steps: int):
    meter = Progress(steps)
    return lambda done, message: meter.update(done, message)


def run_face_setup(spec: dict) -> dict:
    """``kind: "face_setup"``: a face (flesh lattice between skin and skull, the jaw, the
    shape keys) built from the meshes the add-on gathered and written as a face file
    (:func:`setup_face`); a failure writes nothing."""
    return setup_face(spec, progress=_face_meter(2))


def run_face_demo(spec: dict) -> dict:
    """``kind: "face_demo"``: the procedural demo head and its simulated expressions written
    as a face file (:func:`demo_face`)."""
    return demo_face(spec, progress=_face_meter(2))


def run_face_simulate(spec: dict) -> dict:
    """``kind: "face_simulate"``: Bake Simulation of a face, its skin written as a PC2
    (:func:`simulate_face_to_pc2`); a cancel leaves the previous PC2."""
    return frames_job(simulate_face_to_pc2, spec, "simulated")


def run_face_fit_key(spec: dict) -> dict:
    """``kind: "face_fit_key"``: a face model's latent code fitted to a sculpted key
    (:func:`fit_key`); writes nothing."""
    return fit_key(spec)
