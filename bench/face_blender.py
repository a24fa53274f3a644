"""Per-frame cost of an active face (Srinivasan 2021) driven in Blender: sliders and markers.

The scene: the add-on's demo head (Add Demo Head: ``--size`` small, about 4K tets, or bench,
about 8K; ``--keys`` simulated expressions), trained in process with the add-on's train job
(``--latent`` sliders, ``--basis`` reduced basis, ``--warm-epochs`` warm start, no end-to-end
epochs: the fit's quality does not change the frame's cost). Then Simulate is started and the
timeline stepped one frame at a time through ``scene.frame_set``, as playback does, twice:

* **sliders**: the sliders keyed at the training keys' codes, one key every 4 frames, the jaw
  keyed to each key's angle;
* **markers**: ``--markers`` empties (Add Markers) keyed to each key's skin positions.

Each frame is timed whole and split by timing wrappers on the real call path: ``inputs``
(:func:`addon.face.gather_track`: sliders or markers, the jaw, colliders), ``step`` (the
runtime's reduced solve, or the Levenberg-Marquardt marker fit), ``write`` (the skin into the
point attribute the modifier reads) and ``blender`` (the rest of ``frame_set``: the frame
change and the Geometry Nodes evaluation).

Usage (the venv's Python with the PyPI ``bpy``)::

    python bench/face_blender.py [--size small] [--frames 48] [--latent 8] [--basis 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
from blender_frame import Timers, register_addon


def build(bpy, folder: Path, args):
    from neural_rom.addon import training
    from neural_rom.addon.kinds.face import face
    from neural_rom.core.jobs.face import demo_face
    from neural_rom.training.worker import run

    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "face_bench.blend"))
    t0 = time.perf_counter()
    job = face.make_demo_job(bpy.context.scene, name="Face", size=args.size, keys=args.keys)
    skin = face.build_demo_objects(bpy.context.scene, "Face", demo_face(job))
    t1 = time.perf_counter()
    g = skin.neural_rom.method_settings.active
    g.latent_dim, g.basis, g.warm_epochs, g.epochs = args.latent, args.basis, args.warm_epochs, 0
    bpy.context.view_layer.objects.active = skin
    spec = training.make_train_job(skin, bpy.context.scene, device="cpu")
    if not training.on_train_done(skin, run(spec)):
        raise SystemExit("Training wrote no model.")
    t2 = time.perf_counter()
    f = skin.neural_rom.face
    print(
        f"demo head: {f.tets} tets, {len(skin.data.vertices)} skin vertices, {f.keys} keys; "
        f"model: {skin.neural_rom.model.k} latent, {skin.neural_rom.model.cubature} cubature "
        f"elements; build {t1 - t0:.1f} s, train {t2 - t1:.1f} s"
    )
    return skin


def animate(bpy, skin, args) -> None:
    """Sliders and jaw keyed at the training keys, one every 4 frames; markers keyed to the
    keys' skin positions."""
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.face import face
    from neural_rom.core.kinds.face.rig import load_face

    codes, _, jaw = face.training_codes(skin)
    _, keys = load_face(bpy.path.abspath(skin.neural_rom.face.path))
    train = np.flatnonzero(~keys.held_out)
    markers = face.add_markers(skin, bpy.context.scene, count=args.markers, seed=0)
    M = bm.matrix(skin)
    for n, frame in enumerate(range(1, args.frames + 2, 4)):
        i = n % len(codes)
        for name, v in zip(face.slider_names(codes.shape[1]), codes[i], strict=True):
            skin[name] = float(v)
            skin.keyframe_insert(f'["{name}"]', frame=frame)
        face.set_jaw_angle(skin, float(jaw[i]))
        skin.neural_rom.face.jaw.keyframe_insert("rotation_euler", frame=frame)
        P = bm.to_world(keys.positions[train[i]], M)
        for m in markers:
            m.location = P[int(m[face.MARKER_VERTEX])]
            m.keyframe_insert("location", frame=frame)


def measure(bpy, skin, frames: int, drive: str, rounds: int = 2) -> dict:
    from neural_rom.addon import simulate
    from neural_rom.addon.kinds.face import face

    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames + 1
    skin.neural_rom.face.drive = drive
    scene.frame_set(1)
    d = simulate.start_simulation(skin, scene)
    scene.frame_set(2)
    best = None
    for _ in range(rounds):
        d.reset()
        t = Timers()
        t.wrap(face, "gather_track", "inputs")
        t.wrap(d.sim, "step", "step")
        t.wrap(d, "write", "write")
        t0 = time.perf_counter()
        for f in range(2, frames + 2):
            scene.frame_set(f)
        wall = time.perf_counter() - t0
        t.restore()
        if not skin.neural_rom.simulate:
            raise SystemExit("The simulation stopped during the benchmark (see above).")
        parts = {k: 1000.0 * v / frames for k, v in t.total.items()}
        parts["total"] = 1000.0 * wall / frames
        parts["blender"] = parts["total"] - sum(v for k, v in parts.items() if k != "total")
        if best is None or parts["total"] < best["total"]:
            best = parts
    simulate.stop_simulation(skin)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=("small", "bench"), default="small")
    p.add_argument("--keys", type=int, default=12)
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--latent", type=int, default=8)
    p.add_argument("--basis", type=int, default=40)
    p.add_argument("--warm-epochs", type=int, default=200)
    p.add_argument("--markers", type=int, default=30)
    p.add_argument("--workdir", type=Path)
    args = p.parse_args(argv)
    common.pin_this_process()
    bpy = register_addon()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.workdir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        skin = build(bpy, folder, args)
        animate(bpy, skin, args)
        print(f"load: {os.getloadavg()[0]:.1f} (1-minute average)")
        for drive in ("SLIDERS", "MARKERS"):
            r = measure(bpy, skin, args.frames, drive)
            parts = ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "total")
            print(
                f"{drive.lower()}: {r['total']:.2f} ms per frame ({1000 / r['total']:.0f} fps): "
                f"{parts} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
