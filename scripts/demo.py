"""The README demo: the whole workflow headless on a procedural ball, with the PyPI ``bpy``.

    .venv/bin/python scripts/demo.py [--out out] [--quick]

Builds a scene (a soft ball over a studio floor), tetrahedralizes the ball through an
embedding cage, bakes a gravity drop in a worker process (exactly what the Bake button
does), saves ``out/demo.blend`` (with the bake under ``out/neural_rom/``, referenced by
relative paths; open it in Blender 4.2+ with the extension installed and scrub the
timeline) and renders ``out/demo.png`` with Workbench: the ball at several bake frames.
Training and reduced simulation join this script when those stages land.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import render_readme as rr  # noqa: E402  (scene building and pictures are shared)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(rr.ROOT / "out"))
    ap.add_argument("--quick", action="store_true", help="coarser mesh and fewer frames")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    import bpy

    t0 = time.perf_counter()
    ball = rr.build_scene(bpy, out, args.quick)
    bpy.ops.wm.save_as_mainfile(filepath=str(out / "demo.blend"))
    rr.run_workflow(bpy, ball)
    bpy.context.view_layer.objects.active = ball
    assert bpy.ops.neural_rom.playback(action="START") == {"FINISHED"}
    bpy.ops.wm.save_as_mainfile(filepath=str(out / "demo.blend"))
    print(f"saved {out / 'demo.blend'}")
    copies, target, half_width = rr.filmstrip(bpy, ball)
    rr._lights(bpy, target)
    rr.camera(bpy, target, half_width)
    rr.render(bpy, out / "demo.png", "WORKBENCH", 0)
    print(f"rendered {out / 'demo.png'} (whole demo {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the PyPI bpy can crash while freeing itself at exit
