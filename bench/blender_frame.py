"""Per-frame cost of a reduced simulation in Blender, for a ~20K-vertex render mesh.

The scene: a UV sphere of ``--verts`` render vertices (radius 0.5 m), hanging from its top
cap (a pin group), embedded in a coarse tet cage by the add-on's Tetrahedralize (Embedding
'Always', ``--cage`` cells along the longest side), baked in process with the add-on's bake
(random pokes) and trained in process with the add-on's train (linear POD, ``--k`` modes, at
most ``--cubature`` cubature elements): the model a user gets from the three buttons.

Then Simulate is started and the timeline is stepped one frame at a time, as playback does,
through ``scene.frame_set`` (the frame handler runs ``simulate.apply_frame``, Blender then
evaluates the depsgraph). Each frame is timed whole and split into its parts, measured on
the real call path by timing wrappers around:

* ``driver``: finding the object's driver (:func:`simulate.driver_key`)
* ``inputs``: the frame's inputs read from Blender (colliders, pins) and their digest
* ``step``: :meth:`LinearSimulation.step` (Newton on the cubature sub-mesh)
* ``decode``: ``X + U q`` of the tet nodes and the frame cache copy
* ``embed``: tet nodes -> render vertices (:func:`tets.render_world`) and to local space
* ``write``: :func:`blender_mesh.set_positions` (float32, the ``position`` attribute's
  ``foreach_set``, ``mesh.update``)
* ``blender``: the rest of ``frame_set`` (Blender's own frame change and depsgraph update)

Usage (the venv's Python with the PyPI ``bpy``)::

    python bench/blender_frame.py [--verts 20000] [--frames 50] [--k 30] [--cubature 300]
                                  [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# One BLAS thread, set before numpy loads: main() pins the process to one core
# (common.pin_this_process), and a pool sized for every core would time-share it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

ROOT = Path(__file__).resolve().parent.parent


def register_addon():
    """Empty factory file with the extension registered (as tests/blender_fixtures.py does)."""
    sys.path.insert(0, str(ROOT))
    from tests.blender_fixtures import addon_module, fresh_file

    bpy = fresh_file()
    package = addon_module()
    package.register()
    entry = bpy.context.preferences.addons.new()
    entry.module = "neural_rom"
    return bpy


def build(bpy, folder: Path, args) -> object:
    """The hanging sphere, tetrahedralized, baked and trained; returns the object."""
    from neural_rom.addon import training
    from neural_rom.addon.kinds.fem import bake as bakes
    from neural_rom.addon.kinds.fem import tets
    from neural_rom.core import bake
    from neural_rom.core.data import meshfile
    from neural_rom.training.worker import run

    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "frame_bench.blend"))
    # UV sphere: segments * (rings - 1) + 2 vertices
    rings = max(3, round(np.sqrt(args.verts / 2.0)))
    segments = max(3, round((args.verts - 2) / (rings - 1)))
    bpy.ops.mesh.primitive_uv_sphere_add(
        segments=segments, ring_count=rings, radius=0.5, location=(0.0, 0.0, 1.0)
    )
    obj = bpy.context.object
    obj.name = "Sphere"
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    top = np.flatnonzero(co.reshape(-1, 3)[:, 2] > 0.45)
    group = obj.vertex_groups.new(name="pins")
    group.add(top.tolist(), 1.0, "REPLACE")
    s = obj.neural_rom
    s.role = "DEFORMABLE"
    s.embedding = "ALWAYS"
    s.cage_resolution = args.cage
    s.pin_group = "pins"
    s.scenario = "random_pokes"
    s.frames = args.bake_frames
    s.variants = args.variants
    s.method_settings.linear.k = args.k
    s.method_settings.linear.max_cubature = args.cubature
    for o in bpy.context.view_layer.objects:
        o.select_set(o is obj)
    bpy.context.view_layer.objects.active = obj
    scene = bpy.context.scene
    t0 = time.perf_counter()
    info = tets.tetrahedralize_object(obj)
    t1 = time.perf_counter()
    job = bakes.make_bake_job(obj, scene)
    paths = bake.bake_variants(
        meshfile.read_tetmesh(job["mesh"]),
        bake.BakeSpec.from_dict(job["spec"]),
        job["out_dir"],
        job["name"],
    )
    bakes.on_bake_done(obj, {"paths": [str(p) for p in paths]})
    t2 = time.perf_counter()
    if not training.on_train_done(obj, run(training.make_train_job(obj, scene))):
        raise SystemExit("Training wrote no model.")
    t3 = time.perf_counter()
    print(
        f"render mesh {len(obj.data.vertices)} vertices; cage {info['n_nodes']} nodes, "
        f"{info['n_tets']} tets; model k={s.model.k}, {s.model.cubature} cubature elements"
    )
    print(
        f"setup: tetrahedralize {t1 - t0:.1f} s, bake {args.variants * args.bake_frames} frames "
        f"{t2 - t1:.1f} s, train {t3 - t2:.1f} s"
    )
    return obj


class Timers:
    """Wrap functions so that every call adds its wall time to a named bucket (``clock``:
    ``time.process_time`` for this process's CPU time, which time-sharing with other jobs
    inflates less)."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.total = defaultdict(float)
        self.calls = defaultdict(int)
        self._undo = []

    def wrap(self, owner, attr: str, bucket: str) -> None:
        fn, clock = getattr(owner, attr), self.clock

        def timed(*a, **kw):
            t0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                self.total[bucket] += clock() - t0
                self.calls[bucket] += 1

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, fn))

    def restore(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            setattr(owner, attr, fn)
        self._undo.clear()


def measure(bpy, obj, frames: int, rounds: int = 3) -> dict:
    """Step the timeline frame by frame with ``frame_set``, from rest, ``rounds`` times;
    mean ms per frame, by part, of the fastest round (the machine is shared)."""
    from neural_rom.addon import simulate
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.fem import tets
    from neural_rom.core.engine import timeline as framecache

    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames + 1
    scene.frame_set(1)
    d = simulate.start_simulation(obj, scene)
    for f in (2, 3):  # warm-up: the first frames pay one-off costs (imports, caches)
        scene.frame_set(f)
    best = None
    for _ in range(rounds):
        scene.frame_set(1)
        simulate.reset_simulation(obj, scene)  # forget the frames: simulate them again
        t = Timers()
        t.wrap(simulate, "driver_key", "driver")
        t.wrap(d, "inputs", "inputs")
        t.wrap(framecache, "frame_digest", "inputs")
        t.wrap(d.sim, "step", "step")
        t.wrap(d.sim, "positions", "decode")
        t.wrap(d.cache, "put", "decode")
        t.wrap(tets, "render_world", "embed")
        t.wrap(bm, "to_local", "embed")
        t.wrap(bm, "set_positions", "write")
        iters, step = [], d.sim.step

        def counted(*a, step=step, iters=iters, **kw):
            r = step(*a, **kw)
            iters.append(r.newton_iters)
            return r

        d.sim.step = counted  # t.restore() puts the plain method back
        n_steps = len(d.step_seconds)
        t0 = time.perf_counter()
        for f in range(2, frames + 2):
            scene.frame_set(f)
        wall = time.perf_counter() - t0
        t.restore()
        if not obj.neural_rom.simulate:
            raise SystemExit("The simulation stopped during the benchmark (see above).")
        if len(d.step_seconds) - n_steps != frames:
            raise SystemExit(f"{len(d.step_seconds) - n_steps} of {frames} frames were simulated.")
        # the parts do not nest: step is inside positions_at, embed inside Driver.local
        parts = {k: 1000.0 * v / frames for k, v in t.total.items()}
        parts["blender"] = 1000.0 * wall / frames - sum(parts.values())
        parts["total"] = 1000.0 * wall / frames
        parts["iters"] = float(np.mean(iters))
        if best is None or parts["total"] < best["total"]:
            best = parts
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--verts", type=int, default=20000)
    ap.add_argument("--cage", type=int, default=12, help="cage cells along the longest side")
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--cubature", type=int, default=300)
    ap.add_argument("--bake-frames", type=int, default=24)
    ap.add_argument("--variants", type=int, default=4)
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3, help="report the fastest of these runs")
    ap.add_argument(
        "--workdir", help="keep the built scene here and reuse it on the next run (skips the bake)"
    )
    args = ap.parse_args(argv)
    common.pin_this_process()
    bpy = register_addon()
    with tempfile.TemporaryDirectory(prefix="nrom_frame_") as tmp:
        folder = Path(args.workdir) if args.workdir else Path(tmp)
        blend = folder / "frame_bench.blend"
        if args.workdir and blend.is_file():  # reuse a scene built before
            bpy.ops.wm.open_mainfile(filepath=str(blend))
            obj = bpy.data.objects["Sphere"]
            s = obj.neural_rom
            print(
                f"reusing {blend}: render mesh {len(obj.data.vertices)} vertices; cage "
                f"{s.tets_nodes} nodes, {s.tets_count} tets; model k={s.model.k}, "
                f"{s.model.cubature} cubature elements"
            )
        else:
            folder.mkdir(parents=True, exist_ok=True)
            obj = build(bpy, folder, args)
            bpy.ops.wm.save_mainfile()
        r = measure(bpy, obj, args.frames, args.rounds)
    order = ("driver", "inputs", "step", "decode", "embed", "write", "blender")
    print(
        f"\nms per frame, mean of {args.frames} frames from rest (scene.frame_set, one core, "
        f"fastest of {args.rounds} runs); {r['iters']:.1f} Newton iterations per step:"
    )
    print("".join(f"{k:>9}" for k in order) + f"{'total':>9}")
    print("".join(f"{r.get(k, 0.0):>9.2f}" for k in order) + f"{r['total']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
