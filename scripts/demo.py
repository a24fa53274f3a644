"""The README demo: the whole workflow headless on a procedural ball, with the PyPI ``bpy``.

    .venv/bin/python scripts/demo.py [--out out] [--quick]

Builds a scene (a soft ball held above a studio floor, the floor a plane Collider), then,
through the extension's own operators, as the buttons do:

1. tetrahedralizes the ball through an embedding cage,
2. bakes a full-space drop in a worker process,
3. trains a linear reduced model (POD + optimized cubature) from the bake in a worker,
4. simulates the drop with the reduced model, frame by frame, as the timeline would.

It saves ``out/demo.blend`` (bake and model under ``out/neural_rom/``, referenced by
relative paths; open it in Blender 4.2+ with the extension installed and scrub the
timeline: the ball follows its reduced simulation) and renders ``out/demo.png`` with
Workbench: the full-space bake (top) and the reduced simulation (bottom) at the same
frames. The model is trained on this one drop, so this shows the pipeline, not
generalization (the tests check held-out bakes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import render_readme as rr


def build(bpy, out: Path, quick: bool):
    ball = rr.build_scene(bpy, out, quick)
    ball.location = (0.0, 0.0, 1.3)  # held above the floor: the drop happens in the scene
    s = ball.neural_rom
    s.scenario_params["height"].float_value = 0.0
    s.scenario_params["ground"].bool_value = False
    ground = bpy.data.objects.new("Ground", None)  # an empty: the plane collider of the floor
    ground.empty_display_type = "PLAIN_AXES"
    bpy.context.scene.collection.objects.link(ground)
    ground.neural_rom.role = "COLLIDER"
    ground.neural_rom.collider_shape = "plane"
    bpy.context.view_layer.objects.active = ball
    return ball


def row(bpy, ball, frames, positions, y, spacing, name):
    from neural_rom.addon import blender_mesh as bm

    x0 = -spacing * (len(frames) - 1) / 2
    out = []
    for i, (k, P) in enumerate(zip(frames, positions)):
        me = ball.data.copy()
        me.name = f"{name}_f{k}"
        P = P - np.array([P[:, 0].mean(), P[:, 1].mean(), 0.0]) + np.array([x0 + i * spacing, y, 0])
        bm.set_positions(me, P)
        obj = bpy.data.objects.new(me.name, me)
        bpy.context.scene.collection.objects.link(obj)
        rr._smooth(obj)
        out.append(obj)
    return out


def stack_png(bpy, paths, out: Path) -> None:
    """Stack PNGs of one width top to bottom into ``out``."""
    images = [bpy.data.images.load(str(p)) for p in paths]
    w = images[0].size[0]
    heights = [im.size[1] for im in images]
    canvas = np.zeros((sum(heights), w, 4), dtype=np.float32)
    y = sum(heights)
    for im, h in zip(images, heights):  # Blender's pixel rows run bottom to top
        px = np.empty(w * h * 4, dtype=np.float32)
        im.pixels.foreach_get(px)
        canvas[y - h : y] = px.reshape(h, w, 4)
        y -= h
    result = bpy.data.images.new("demo", w, sum(heights), alpha=True)
    result.pixels.foreach_set(canvas.ravel())
    result.filepath_raw = str(out)
    result.file_format = "PNG"
    result.save()
    for p in paths:
        Path(p).unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(rr.ROOT / "out"))
    ap.add_argument("--quick", action="store_true", help="coarser mesh and fewer frames")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import bpy
    from neural_rom.addon import bakes, simulate
    from neural_rom.addon.tets import load_tets, render_world

    t0 = time.perf_counter()
    ball = build(bpy, out, args.quick)
    bpy.ops.wm.save_as_mainfile(filepath=str(out / "demo.blend"))
    rr.run_workflow(bpy, ball)  # tetrahedralize + bake

    t = time.perf_counter()
    ball.neural_rom.method_settings.linear.k = 12
    assert bpy.ops.neural_rom.train() == {"FINISHED"}
    m = ball.neural_rom.model
    print(
        f"trained a {m.method} model: {m.k} modes, {m.cubature} cubature elements "
        f"({time.perf_counter() - t:.1f} s)"
    )

    scene = bpy.context.scene
    rm = bakes.render_map(ball)
    frames = rr.pick_frames(rm, 4)
    full = [rm.world(k) for k in frames]
    tets = load_tets(ball)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    driver = simulate.Driver(ball, scene)
    t = time.perf_counter()
    reduced = [
        render_world(tets, driver.positions_at(scene.frame_start + k, ball, scene)) for k in frames
    ]
    steps = max(frames)
    err = max(float(np.linalg.norm(a - b, axis=1).max()) for a, b in zip(full, reduced))
    print(
        f"reduced simulation: {1000 * (time.perf_counter() - t) / max(steps, 1):.1f} ms per frame; "
        f"largest vertex distance to the full-space bake at the shown frames {1000 * err:.0f} mm"
    )
    scene.frame_set(scene.frame_start)
    bpy.ops.wm.save_as_mainfile(filepath=str(out / "demo.blend"))
    print(f"saved {out / 'demo.blend'}")

    spacing = 1.35
    rows = {
        "full": row(bpy, ball, frames, full, 0.0, spacing, "Full"),
        "reduced": row(bpy, ball, frames, reduced, 0.0, spacing, "Reduced"),
    }
    ball.hide_render = True
    half = spacing * (len(frames) - 1) / 2
    top = max(float(P[:, 2].max()) for P in full + reduced)
    target = (0.0, 0.0, 0.5 * (top + 0.35))
    rr._lights(bpy, target)
    rr.camera(bpy, target, half + 0.9)
    parts = []
    for name in ("full", "reduced"):
        for other, objs in rows.items():
            for o in objs:
                o.hide_render = other != name
        rr.render(bpy, out / f"demo_{name}.png", "WORKBENCH", 0, res=(1600, 560))
        parts.append(out / f"demo_{name}.png")
    stack_png(bpy, parts, out / "demo.png")
    print(f"rendered {out / 'demo.png'} (whole demo {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the PyPI bpy can crash while freeing itself at exit
