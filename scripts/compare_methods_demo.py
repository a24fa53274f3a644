"""Which method for my asset? Compare Methods on a tail that swings, headless, with the PyPI ``bpy``.

    .venv/bin/python scripts/compare_methods_demo.py [--out out] [--budget 120] [--picture PATH]

Builds ``<out>/tail.blend`` as an artist would (a cylinder pinned at its top, keyed to swing
and turn, default settings), then runs the CLI: ``tetrahedralize``, ``bake`` (4 variants of
48 frames, each drawn from the swing), ``compare-methods --budget`` (every method, the
budget shared by the learned ones), and prints the table. The picture (``--picture``,
default ``<out>/compare_methods.png``) shows one held-out frame per method coloured by its
distance to the bake (the blue -> red ramp of Compare with Bake), the bake beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "scripts",):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def build(bpy, path: Path) -> None:
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.mesh.primitive_cylinder_add(vertices=16, radius=0.08, depth=1.2, location=(0, 0, -0.6))
    obj = bpy.context.object
    obj.name = "Tail"
    group = obj.vertex_groups.new(name="Root")
    group.add([v.index for v in obj.data.vertices if v.co.z > 0.55], 1.0, "REPLACE")
    bpy.context.scene.cursor.location = (0.0, 0.0, 0.0)
    bpy.ops.object.origin_set(type="ORIGIN_CURSOR")  # it swings about its root
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 72
    for f, a, turn in ((1, 0, 0), (18, 40, 20), (36, -35, 45), (54, 30, 70), (72, 0, 90)):
        obj.rotation_euler = (math.radians(a), 0.0, math.radians(turn))
        obj.keyframe_insert("rotation_euler", frame=f)
    s = obj.neural_rom
    s.role, s.pin_group = "DEFORMABLE", "Root"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))


def picture(bpy, obj_name: str, table: dict, folder: Path, path: Path) -> None:
    """One held-out frame per method that replayed, coloured by its error, the bake first."""
    import render_methods as rm

    obj = bpy.data.objects[obj_name]
    obj.data.calc_loop_triangles()
    F = np.array([t.vertices[:] for t in obj.data.loop_triangles], dtype=np.int64)
    rows = [r for r in table["rows"] if r["status"] == "done"]
    bake = Path(rows[0]["replays"][0]["path"]).name.split("_", 1)[1]  # <method>_<bake>.npz
    runs = {r["method"]: np.load(folder / f"{r['method']}_{bake}") for r in rows}
    full = runs[rows[0]["method"]]["full"].astype(np.float64)
    # the frame the bake moves furthest from its start: where the methods part ways
    frame = int(np.argmax(np.linalg.norm(full - full[0], axis=2).max(axis=1)))
    R = rm.view(90.0, 8.0)
    # the tail's cylinder has two rings: measure on a finer mesh of it (rm.refine)
    W, F = rm.refine(F, len(full[frame]), 4)
    base = W @ full[frame]
    shapes = {m: W @ np.asarray(z["reduced"][frame], dtype=np.float64) for m, z in runs.items()}
    errors = {m: np.linalg.norm(P - base, axis=1) for m, P in shapes.items()}
    vmax = rm.nice_max(max(e.max() for e in errors.values()))
    panels = [rm.Panel("Bake", f"held out, frame {frame}", parts=[rm.Part(base @ R.T, F)])]
    for r in rows:
        P = shapes[r["method"]]
        panels.append(
            rm.Panel(
                r["method"],
                f"{r['dofs']} DOFs, {r['step_ms']:.2g} ms/step",
                f"{1000 * r['mean_m']:.3g} mm mean",
                [rm.error_part(P @ R.T, F, errors[r["method"]], vmax)],
                True,
            )
        )
    caption = [table["recommendation"]["reason"]]
    rm.compose(bpy, panels, path, caption, vmax, "distance to the bake")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out")
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--picture", type=Path)
    args = ap.parse_args(argv)
    import bpy
    from neural_rom.ui import cli

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    blend = out / "tail.blend"
    t0 = time.perf_counter()
    cli.main(["info"])  # registers the extension
    build(bpy, blend)
    for argv_ in (
        ["tetrahedralize", "--save"],
        ["bake", "--save"],
        ["compare-methods", "--budget", f"{args.budget:g}", "--restart", "--save"],
    ):
        code = cli.main([argv_[0], "--file", str(blend), *argv_[1:]])
        if code:
            return code
    from neural_rom.addon.compare import methods as methodcompare

    obj = bpy.data.objects["Tail"]
    table = methodcompare.read_table(obj)
    folder = methodcompare.folder_of(obj)
    print(json.dumps(table["recommendation"]))
    print(f"compare-methods demo: {time.perf_counter() - t0:.0f} s")
    picture(bpy, "Tail", table, folder, (args.picture or out / "compare_methods.png").resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
