"""The README demo: a reduced model predicts a drop it never saw, headless, with the PyPI ``bpy``.

    .venv/bin/python scripts/demo.py [--out out] [--quick] [--variants N] [--k K]

Builds the example scene (a soft ball of flesh, a dense render mesh carried by a coarse
embedding cage, on a floor), then, through the extension's own operators, as the buttons do:

1. tetrahedralizes the ball's cage (in a worker process),
2. bakes ``--variants`` full-space drops (default 4; the gravity-drop scenario's defaults:
   per variant a different height and downward push), in parallel worker processes,
3. holds the last variant out and trains a linear reduced model (POD + optimized cubature)
   on the others (in a worker),
4. simulates the held-out drop with the reduced model from its initial state and its
   inputs (gravity, the floor), frame by frame, and measures the distance of every render
   vertex to the full-space bake it never saw.

It saves ``out/demo.blend`` (bakes and model under ``out/neural_rom/``, relative paths;
open it in Blender 4.2+ with the extension installed and scrub the timeline: the ball
replays the held-out drop with the reduced model, coloured by its error, beside a wire
ghost playing the bake) and renders ``out/demo.png`` with Workbench: the bake on top, the
reduced simulation below at the same frames, coloured by the distance to the bake.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import render_readme as rr

FLESH = (0.80, 0.42, 0.36, 1.0)
WHITE = (0.92, 0.92, 0.92, 1.0)
GREY = (0.62, 0.62, 0.65, 1.0)
FLOOR = (0.30, 0.30, 0.32, 1.0)


def story_frames(P: np.ndarray, n_show: int = 5, touch: float = 0.005) -> list[int]:
    """Frames that tell the drop: start, first touch of the floor (z = 0), deepest squash,
    rebound, last; evenly filled where some coincide. ``P`` (frames, v, 3) m."""
    low = P[:, :, 2].min(axis=1)
    height = P[:, :, 2].max(axis=1) - low
    n = len(P)
    touching = np.flatnonzero(low < touch)
    contact = int(touching[0]) if len(touching) else int(np.argmin(low))
    squash = int(np.argmin(height))
    rebound = squash + int(np.argmax(height[squash:]))
    picks = sorted(dict.fromkeys([0, contact, squash, rebound, n - 1]))
    while len(picks) < n_show:
        gaps = np.diff(picks)
        i = int(np.argmax(gaps))
        picks.insert(i + 1, picks[i] + gaps[i] // 2)
    return picks[:n_show]


def hold_out(ball, rec) -> dict:
    """Take a bake record off the object's list (training uses every listed bake); returns
    its fields for :func:`put_back`."""
    fields = {k: getattr(rec, k) for k in rec.bl_rna.properties.keys() if k != "rna_type"}
    s = ball.neural_rom
    s.bakes.remove(next(i for i, r in enumerate(s.bakes) if r.path == rec.path))
    return fields


def put_back(ball, fields: dict):
    rec = ball.neural_rom.bakes.add()
    for k, v in fields.items():
        setattr(rec, k, v)
    return rec


def replay_ms(ball, scene, rec) -> float:
    """Milliseconds per reduced step replaying ``rec`` (the step alone: no mesh writes)."""
    from neural_rom.addon import simulate
    from neural_rom.addon.kinds.fem import bake as bakes
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.engine.replay import replay_bake

    cache = bakes.open_bake(ball, rec)
    d = simulate.Driver(ball, scene)
    _, driver = replay_scenario(cache)
    seconds: list[float] = []
    replay_bake(d.sim, cache, driver, step_seconds=seconds)
    return 1000.0 * float(np.median(seconds))


def picture(bpy, F, full, reduced, frames, dt, vmax, text, out: Path) -> Path:
    """Two rows at the same frames, orthographic from the front: the bake (top) and the
    reduced simulation coloured by each vertex's distance to it (bottom). Workbench,
    Attribute colours (labels included, see ``render_readme.label``)."""
    from neural_rom.addon.compare.bake import error_colors

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    hi = np.max([P.max(axis=0) for P in (*full, *reduced)], axis=0)
    width = float(max(P[:, 0].max() - P[:, 0].min() for P in full))
    gap = width + 0.35
    row_h = float(hi[2]) + 0.75  # floor at z = 0 in both rows
    x0 = -gap * (len(frames) - 1) / 2

    def place(P, i, row):  # centred in its column, the floor of its row at z = -row * row_h
        c = P[:, :2].mean(axis=0)
        return P - np.array([c[0], c[1], 0.0]) + np.array([x0 + i * gap, 0.0, -row * row_h])

    def obj(name, V, rgba):
        o = rr.colored_object(bpy, name, V, F, rgba)
        o.data.shade_smooth()
        return o

    xl, xr = x0 - 0.5 * gap, x0 + (len(frames) - 0.5) * gap
    for row in (0, 1):
        slab = rr.box(np.array([xl, -0.6, -0.05]), np.array([xr, 0.6, 0.0]))
        rr.colored_object(bpy, f"Floor {row}", slab[0] + [0, 0, -row * row_h], slab[1], FLOOR)
    for i, k in enumerate(frames):
        obj(f"Full f{k}", place(full[k], i, 0), FLESH)
        e = np.linalg.norm(reduced[k] - full[k], axis=1)
        obj(f"Reduced f{k}", place(reduced[k], i, 1), error_colors(e, vmax))
        cx = x0 + i * gap
        rr.label(bpy, f"max {1000 * e.max():.1f} mm", (cx, -0.9, -row_h - 0.17), 0.075, GREY)
        rr.label(bpy, f"frame {k}", (cx, -0.9, -row_h - 0.37), 0.1, WHITE)
        rr.label(bpy, f"{k * dt:.2f} s", (cx, -0.9, -row_h - 0.52), 0.07, GREY)
    top = float(hi[2])
    rr.label(bpy, text["full"], (xl, -0.9, top + 0.22), 0.1, WHITE, "LEFT")
    rr.label(bpy, text["full_sub"], (xl, -0.9, top + 0.07), 0.07, GREY, "LEFT")
    rr.label(bpy, text["reduced"], (xl, -0.9, top - row_h + 0.22), 0.1, WHITE, "LEFT")
    rr.label(bpy, text["reduced_sub"], (xl, -0.9, top - row_h + 0.07), 0.07, GREY, "LEFT")

    # colour legend along the bottom
    zl = -row_h - 0.8
    x1, x2 = xr - 2.6, xr - 0.5
    s = np.linspace(0.0, 1.0, 65)
    V = np.concatenate(
        [np.stack([x1 + (x2 - x1) * s, 0 * s - 0.8, zl + 0 * s + h], 1) for h in (0, 0.06)]
    )
    j = np.arange(64)
    Fq = np.concatenate([np.stack([j, j + 1, j + 66], 1), np.stack([j, j + 66, j + 65], 1)])
    rr.colored_object(bpy, "Legend", V, Fq, error_colors(np.tile(s, 2) * vmax, vmax))
    rr.label(bpy, "0", (x1 - 0.06, -0.9, zl + 0.03), 0.07, GREY, "RIGHT")
    rr.label(bpy, f"{1000 * vmax:.0f} mm", (x2 + 0.06, -0.9, zl + 0.03), 0.07, GREY, "LEFT")
    rr.label(bpy, "distance to the bake", (x1 - 0.45, -0.9, zl + 0.03), 0.07, GREY, "RIGHT")
    rr.label(bpy, text["footer"], (xl, -0.9, zl + 0.03), 0.07, GREY, "LEFT")

    xmin, xmax = xl - 0.1, xr + 0.1
    zmin, zmax = zl - 0.2, top + 0.42
    cam = bpy.data.cameras.new("Camera")
    cam.type = "ORTHO"
    cam.ortho_scale = xmax - xmin
    cam.sensor_fit = "HORIZONTAL"
    co = bpy.data.objects.new("Camera", cam)
    co.location = (0.5 * (xmin + xmax), -10.0, 0.5 * (zmin + zmax))
    co.rotation_euler = (math.pi / 2, 0.0, 0.0)
    scene.collection.objects.link(co)
    scene.camera = co

    rd = scene.render
    rd.engine = "BLENDER_WORKBENCH"
    rd.resolution_x = 1600
    rd.resolution_y = int(round(1600 * (zmax - zmin) / (xmax - xmin)))
    rd.resolution_percentage = 100
    rd.image_settings.file_format = "PNG"
    world = scene.world or bpy.data.worlds.new("World")
    scene.world = world
    world.color = (0.06, 0.06, 0.07)
    sh = scene.display.shading
    sh.light = "STUDIO"
    sh.color_type = "VERTEX"
    sh.show_cavity = False
    sh.show_specular_highlight = False
    scene.display.render_aa = "8"
    scene.view_settings.view_transform = "Standard"
    scene.view_settings.look = "None"
    path = out / "demo.png"
    rd.filepath = str(path)
    t = time.perf_counter()
    bpy.ops.render.render(write_still=True)
    print(f"rendered {path} ({time.perf_counter() - t:.1f} s)")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(rr.ROOT / "out"))
    ap.add_argument("--quick", action="store_true", help="coarser mesh and fewer frames")
    ap.add_argument("--variants", type=int, default=4, help="bakes; the last is held out")
    ap.add_argument(
        "--k",
        type=int,
        default=0,
        help="modes of the linear model (default: chosen by its tolerance)",
    )
    args = ap.parse_args(argv)
    if args.variants < 2:
        ap.error("--variants must be at least 2: one to hold out, the rest to train on")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import bpy
    from neural_rom.addon.compare import bake as compare

    t0 = time.perf_counter()
    ball = rr.build_scene(bpy, out, args.quick)
    s = ball.neural_rom
    # the scenario's own defaults: a drop height sized from the ball, a push per variant;
    # the floor is a scene collider (an empty, plane) at the render mesh's bottom, z = 0
    s.scenario_params["height"].float_value = -1.0
    s.scenario_params["ground"].bool_value = False
    s.variants = args.variants
    floor = bpy.data.objects.new("Floor Collider", None)
    floor.empty_display_type = "PLAIN_AXES"
    bpy.context.scene.collection.objects.link(floor)
    floor.neural_rom.role = "COLLIDER"
    floor.neural_rom.collider_shape = "plane"
    bpy.context.view_layer.objects.active = ball
    bpy.ops.wm.save_as_mainfile(filepath=str(out / "demo.blend"))
    rr.run_workflow(bpy, ball)  # tetrahedralize + bake the variants

    scene = bpy.context.scene
    held = hold_out(ball, s.bakes[len(s.bakes) - 1])
    t = time.perf_counter()
    if args.k:  # otherwise the default: grown until the bakes are within tolerance
        s.method_settings.linear.k = args.k
    assert bpy.ops.neural_rom.train() == {"FINISHED"}
    m = s.model
    print(
        f"trained a {m.method} model on {m.bakes} bakes: {m.k} modes, {m.cubature} cubature "
        f"elements ({time.perf_counter() - t:.1f} s)"
    )
    rec = put_back(ball, held)
    s.active_bake = len(s.bakes) - 1

    c = compare.start_comparison(ball, scene, placement="SIDE", bake_path=rec.path)
    ms = replay_ms(ball, scene, rec)
    err = c.errors  # (frames, render vertices) m
    worst = int(np.argmax(err.max(axis=1)))
    size = float(np.ptp(c.full[0][:, 0]))  # the ball's diameter
    lowest = c.full[:, :, 2].min(axis=1)
    print(
        f"held-out variant {rec.variant} (never trained on), {len(err) - 1} frames: largest "
        f"vertex distance to the bake {1000 * err.max():.1f} mm at frame {worst} "
        f"({100 * err.max() / size:.2f}% of the ball's {size:.2f} m diameter), mean "
        f"{1000 * err.mean():.2f} mm; {ms:.1f} ms per reduced step"
    )
    print(
        f"lowest render vertex: bake {1000 * lowest.min():+.1f} mm, reduced "
        f"{1000 * c.reduced[:, :, 2].min():+.1f} mm (floor at 0)"
    )
    scene.frame_set(scene.frame_start)
    bpy.ops.wm.save_as_mainfile(filepath=str(out / "demo.blend"))
    print(f"saved {out / 'demo.blend'}")

    from neural_rom.addon.io import mesh as bm

    F = bm.triangles(ball.data)
    frames = story_frames(c.full)
    dt = 1.0 / scene.render.fps
    vmax = max(1e-3, math.ceil(1000 * err.max() / 5) * 5 / 1000)  # a round number of mm
    text = {
        "full": f"Full space: the bake (variant {rec.variant}, never trained on)",
        "full_sub": f"{s.tets_count:,} cage tets, {3 * s.tets_nodes:,} DOFs: a full FEM solve every frame",
        "reduced": f"Reduced model, {m.k} modes: simulated from the same start",
        "reduced_sub": (
            f"{m.cubature} cubature tets, {ms:.1f} ms per frame, "
            f"trained on the other {m.bakes} drops; colour: distance to the bake"
        ),
        "footer": (
            f"largest vertex error over all {len(err) - 1} frames: {1000 * err.max():.1f} mm "
            f"on a {size:.2f} m ball ({100 * err.max() / size:.2f}%), mean {1000 * err.mean():.1f} mm"
        ),
    }
    picture(bpy, F, c.full, c.reduced, frames, dt, vmax, text, out)
    print(f"whole demo {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
