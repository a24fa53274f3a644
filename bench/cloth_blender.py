"""Per-frame cost in Blender of a cape driven by its Subspace Neural Physics model (issue 11),
against Blender's own cloth on the same sheet: the whole frame update through the add-on.

The scene (tests/cloth_scenes.py): a 1 m sheet of ``--side`` x ``--side`` vertices (50: 2,500)
hanging from its top row under an empty it is parented to, a ball with a Collision modifier
in front; the owner and the ball are keyed by hand (the ball swings through the sheet). The
add-on's own stages make the model: Cloth Bake (``--variants`` bakes of ``--bake-frames``
frames, Blender's cloth in a worker), then the train job in this process (``--k`` modes,
``--epochs`` epochs: the fit's quality does not change the frame's cost).

Then the timeline is stepped one frame at a time through ``scene.frame_set``, as playback
does, three ways, the fastest of ``--rounds`` rounds each:

* **blender**: the Cloth modifier on, its point cache freed first (Blender's cloth steps
  every frame; quality as the scene has it, 5);
* **model**: Simulate on (the Cloth modifier muted by the add-on), split by timing wrappers
  on the real call path: ``driver`` (is the object's driver still good: ``driver_key``, the
  collider objects), ``inputs`` (:meth:`ClothDriver.inputs`: the matrices, the colliders'
  shapes, the :class:`core.engine.track.Track`, and the frame's digest), ``step``, ``decode``
  (positions with the push-out and the pins, the frame cache), ``write`` (to local space, the
  mesh write), ``blender`` (the rest of ``frame_set``: Blender's frame change and depsgraph
  evaluation of the written mesh, and the handlers' own bookkeeping);
* **empty**: neither (the Cloth modifier muted by hand, Simulate off): what ``frame_set`` of
  the keyed scene costs anyway, the floor.

Each is timed by the wall clock and, in alternate rounds, by this process's CPU time (which
time-sharing with other jobs inflates less; it counts Blender's threads too). The ratios are
the whole frames, what each costs beyond the floor, and Blender's cloth step (its frame less
the floor) against the model's step.

Usage (the venv's Python with the PyPI ``bpy``)::

    python bench/cloth_blender.py [--side 50] [--frames 60] [--k 64] [--workdir DIR]
                                  [--blend FILE --object NAME]

A cape on a walking character (issue 30; ``--blend cape.blend --object Cape``: the 0.6 x 0.9
m, 600-vertex cape on a capsule torso walking 1 m/s and turning, cloth-baked and trained by
the CLI at the defaults, 60 modes; 60 frames, fastest of 3 rounds, load 9), wall / CPU ms a
frame: Blender's cloth 14.3 / 7.6; nothing simulated 0.031; the model through Simulate
**0.390 / 0.388** (driver 0.023, inputs 0.086, step 0.051, decode 0.086, write 0.024,
Blender's rest 0.120): whole frames 37x, Blender's cloth step 280x the model's in the frame
(670x in bench/snp_cloth.py's pinned measure); a second run minutes later at the same load,
fastest of 5 rounds: 11.5 against 0.519 ms, 22x (CPU time 17x). The issue's goal of 40x is
not shown at that load (a 600-vertex cape makes Blender's cloth cheap).

Measured (2026-11-24, one core of this 2-core machine shared with two other sessions, load
average 3.2; 2,500 vertices, u = 64, 60 frames, fastest of 3 rounds), wall / CPU ms a frame:
Blender's cloth (quality 5) 56.3 / 51.1; nothing simulated 0.067 / 0.067; the model through
Simulate **0.88 / 0.83** (driver 0.04, inputs 0.17, step 0.17, decode with push-out and pins
0.22, write 0.06, Blender's rest of the frame 0.21): whole frames 64x faster, 69x beyond the
floor, Blender's cloth step 323x the model's (411x by CPU time). The frame path before this
version, patched back into the same process and run in alternate rounds on the same scene
(so under the same load, 2.3; 16 rounds each, main thread CPU time): 1.00 -> 0.82 ms (min),
1.11 -> 0.89 ms (median), the driven vertex positions identical bit for bit. Where it went:
the timeline no longer restores the frame it just stepped (SNP's ``set_state``, 20-30 us),
the inputs (141 -> 61 us hot: collider shapes vectorized, boxes and recorded specs kept, the
matrices in one conversion), points through a matrix and the push-out's broad phase at
half their cost (core.frame.transform_points), ``driver_key`` 14 -> 9 us. The earlier figure
of 2.9 ms was measured at load 9. What remains is mostly memory: the decode reads the 3.8 MB
float64 basis every frame (70 us hot, 160-220 us when other jobs share the caches), and
Blender's own evaluation of the written mesh.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
from blender_frame import ROOT, Timers, register_addon


def build(bpy, folder: Path, args):
    """The keyed sheet, cloth-baked through the operator and trained in process."""
    sys.path.insert(0, str(ROOT))
    from neural_rom.addon import training
    from neural_rom.training.worker import run

    from tests.cloth_scenes import build_sheet

    build_sheet(folder / "cloth_bench.blend", n=args.side)
    owner, ball = bpy.data.objects["Owner"], bpy.data.objects["Ball"]
    end = args.frames + 2
    for f, x, turn in ((1, 0.0, 0.0), (end // 2, 0.15, 0.3), (end, -0.1, -0.2)):
        owner.location, owner.rotation_euler = (x, 0.0, 1.5), (0.0, 0.0, turn)
        owner.keyframe_insert("location", frame=f)
        owner.keyframe_insert("rotation_euler", frame=f)
    for f, y in ((1, -0.6), (end // 2, 0.0), (end, -0.4)):
        ball.location = (0.0, y, 1.0)
        ball.keyframe_insert("location", frame=f)
    bpy.context.scene.frame_end = end + 1
    sheet = bpy.data.objects["Sheet"]
    s = sheet.neural_rom
    s.role = "DEFORMABLE"
    s.cloth.frames, s.cloth.variants = args.bake_frames, args.variants
    bpy.context.view_layer.objects.active = sheet
    bpy.ops.wm.save_mainfile()
    t0 = time.perf_counter()
    if bpy.ops.neural_rom.cloth_bake() != {"FINISHED"}:
        raise SystemExit("The cloth bake failed (see above).")
    t1 = time.perf_counter()
    s.model_method_name = "snp"
    g = s.method_settings.snp
    g.k, g.epochs, g.validation_fraction, g.rollout = args.k, args.epochs, 0.0, False
    spec = training.make_train_job(sheet, bpy.context.scene, device="cpu")
    if not training.on_train_done(sheet, run(spec)):
        raise SystemExit("Training wrote no model.")
    t2 = time.perf_counter()
    print(
        f"sheet: {len(sheet.data.vertices)} vertices; cloth bake {args.variants} x "
        f"{args.bake_frames + 1} frames {t1 - t0:.1f} s; model {s.model.k} modes, trained "
        f"{t2 - t1:.1f} s"
    )
    return sheet


def _run(bpy, frames: int) -> tuple[float, float]:
    """ms per frame of stepping the timeline frame by frame: (wall, this process's CPU)."""
    scene = bpy.context.scene
    t0, c0 = time.perf_counter(), time.process_time()
    for f in range(2, frames + 2):
        scene.frame_set(f)
    return (
        1000.0 * (time.perf_counter() - t0) / frames,
        1000.0 * (time.process_time() - c0) / frames,
    )


def measure_blender(bpy, sheet, frames: int, rounds: int, *, cloth_on: bool) -> tuple:
    """ms per frame of ``frame_set`` with Blender's cloth stepping (or muted), fastest round:
    (wall, CPU)."""
    mod = sheet.modifiers["Cloth"]
    mod.show_viewport = cloth_on
    wall = cpu = float("inf")
    for _ in range(rounds):
        bpy.context.scene.frame_set(1)
        mod.point_cache.frame_end = mod.point_cache.frame_end  # resets the (unbaked) cache
        mod.settings.mass = mod.settings.mass  # ... and so does a settings change
        w, c = _run(bpy, frames)
        wall, cpu = min(wall, w), min(cpu, c)
    mod.show_viewport = True
    return wall, cpu


#: The parts of a frame with Simulate on, in the order the handler meets them.
PARTS = ("driver", "inputs", "step", "decode", "write", "blender")


def measure_model(bpy, sheet, frames: int, rounds: int) -> dict:
    """ms per frame with Simulate on, by part (:data:`PARTS`), of the fastest round: wall
    clock and CPU time (``{"wall": {...}, "cpu": {...}}``, each with its ``total``)."""
    from neural_rom.addon import simulate
    from neural_rom.addon.io import mesh as bm
    from neural_rom.core.engine import timeline as framecache

    scene = bpy.context.scene
    scene.frame_set(1)
    d = simulate.start_simulation(sheet, scene)
    if sheet.modifiers["Cloth"].show_viewport:
        raise SystemExit("Simulate did not mute the Cloth modifier.")
    for f in (2, 3):  # warm-up
        scene.frame_set(f)
    best = {}
    for r in range(2 * rounds):  # wall and CPU clocks in alternate rounds
        clock = (time.perf_counter, time.process_time)[r % 2]
        scene.frame_set(1)
        simulate.reset_simulation(sheet, scene)
        t = Timers(clock)
        t.wrap(simulate, "driver_key", "driver")  # is the object's driver still good?
        t.wrap(d.part, "colliders", "driver")  # whose inputs the colliders are
        t.wrap(d, "inputs", "inputs")
        t.wrap(framecache, "frame_digest", "inputs")
        t.wrap(d.sim, "step", "step")
        t.wrap(d.sim, "positions", "decode")  # with the push-out and the pins
        t.wrap(d.cache, "put", "decode")
        t.wrap(bm, "set_positions", "write")
        t.wrap(d, "local", "write")
        n = len(d.step_seconds)
        wall, cpu = _run(bpy, frames)
        t.restore()
        if len(d.step_seconds) - n != frames or not sheet.neural_rom.simulate:
            raise SystemExit("The simulation did not step every frame (see above).")
        total = (wall, cpu)[r % 2]
        parts = {k: 1000.0 * t.total[k] / frames for k in PARTS[:-1]}
        parts["blender"] = total - sum(parts.values())  # frame_set less the parts above
        parts["total"] = total
        which = ("wall", "cpu")[r % 2]
        if which not in best or total < best[which]["total"]:
            best[which] = parts
    simulate.stop_simulation(sheet)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", type=int, default=50, help="vertices per side of the sheet")
    ap.add_argument("--bake-frames", type=int, default=40)
    ap.add_argument("--variants", type=int, default=3)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3, help="report the fastest of these runs")
    ap.add_argument(
        "--workdir", help="keep the built scene here and reuse it on the next run (skips the bake)"
    )
    ap.add_argument(
        "--blend",
        help="measure this saved file's cloth object (--object) and its trained model instead "
        "of building the sheet (e.g. a cape on a walking character, cloth-baked and trained "
        "with the CLI)",
    )
    ap.add_argument("--object", default="Sheet", help="the cloth object of --blend")
    args = ap.parse_args(argv)
    common.pin_this_process()
    bpy = register_addon()
    with tempfile.TemporaryDirectory(prefix="nrom_cloth_") as tmp:
        folder = Path(args.workdir) if args.workdir else Path(tmp)
        blend = folder / "cloth_bench.blend"
        if args.blend:  # the user's own file, its model trained
            bpy.ops.wm.open_mainfile(filepath=str(Path(args.blend).resolve()))
            sheet = bpy.data.objects[args.object]
            print(
                f"{args.blend}: {len(sheet.data.vertices)} vertices, {sheet.neural_rom.model.k} modes"
            )
        elif args.workdir and blend.is_file():  # reuse a scene built before
            bpy.ops.wm.open_mainfile(filepath=str(blend))
            sheet = bpy.data.objects["Sheet"]
            print(
                f"reusing {blend}: {len(sheet.data.vertices)} vertices, {sheet.neural_rom.model.k} modes"
            )
        else:
            folder.mkdir(parents=True, exist_ok=True)
            sheet = build(bpy, folder, args)
            bpy.ops.wm.save_mainfile()
        blender = measure_blender(bpy, sheet, args.frames, args.rounds, cloth_on=True)
        empty = measure_blender(bpy, sheet, args.frames, args.rounds, cloth_on=False)
        model = measure_model(bpy, sheet, args.frames, args.rounds)
    q = sheet.modifiers["Cloth"].settings.quality
    print(
        f"\nms per frame over {args.frames} frames (fastest of {args.rounds} rounds), one core; "
        f"load average {os.getloadavg()[0]:.1f}:"
    )
    print(f"{'':42s}{'wall':>9s}{'CPU':>9s}")
    print(f"  Blender's cloth (quality {q}), frame_set:{blender[0]:11.3f}{blender[1]:9.3f}")
    print(f"  nothing simulated, frame_set (floor):   {empty[0]:11.3f}{empty[1]:9.3f}")
    w, c = model["wall"], model["cpu"]
    print(f"  the model (Simulate), frame_set:        {w['total']:11.3f}{c['total']:9.3f}")
    for k in PARTS:
        print(f"    {k:38s}{w[k]:9.3f}{c[k]:9.3f}")
    for name, i, m in (("wall", 0, w), ("CPU", 1, c)):
        ours, theirs = m["total"] - empty[i], blender[i] - empty[i]
        print(
            f"{name}: beyond what frame_set costs anyway, Blender's cloth {theirs:.3f} ms, the "
            f"model {ours:.3f} ms: {theirs / max(ours, 1e-9):.0f}x; whole frames "
            f"{blender[i] / m['total']:.0f}x; Blender's cloth step against the model's "
            f"{theirs / max(m['step'], 1e-9):.0f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
