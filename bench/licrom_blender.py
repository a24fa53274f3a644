"""LiCROM in Blender: what a model of several objects costs where the user waits for it.

The scene (built here, headless, through the add-on's own stages): two box bars 0.5 x 0.1 x
0.1 m placed a metre apart (BarA, BarB), pinned at one end, tetrahedralized coarsely and
given ``--variants`` random-poke bakes each; one LiCROM model trained on both at once
(``make_family_train_job``, in process; latent 20 and the default network, ``--epochs``).
Then, timed:

* **Use Model**: BarA's model put on a third bar (BarC, 0.4 m, unseen) tetrahedralized at
  ``--tet-size`` (about 20K tets by default): the one load of the model on its tets (field at
  the nodes, masses, cubature, domain report) that :func:`addon.family.apply_model` does;
* **Apply Mesh Edit**: BarA simulated to frame 6, its tip cut off (bisected, the cut capped),
  Tet Size set to ``--tet-size``, Apply Mesh Edit: the whole call (the worker's TetGen
  included: a child process), and of it the swap in Blender's process
  (``LicromSimulation.swap_mesh``: field, masses, cubature) and the rest of
  :func:`addon.family.swap_to_tets` (render mapping, the frame written);
* the next frame after the swap, and the mean of 10 frames after it.

The issue's goal: a mesh swap in Blender in under a second at 20K tets.

Results (this machine: 2 cores shared with other jobs, load average 8-9; defaults):

* scene: BarA 708 tets and BarB, 2 bakes each (9.8 s); the model of both, r = 20, 100 epochs,
  62.2 s;
* Use Model on BarC (20,004 tets, 3,954 nodes): 650 ms, 0.0% outside the training domain;
* Apply Mesh Edit on BarA (cut, 19,876 tets, 3,959 nodes): 3.24 s in all, of which TetGen in
  the worker 2.46 s and the swap in Blender 779 ms (``swap_mesh`` 600 ms, render mapping and
  frame 179 ms): the goal is met, under load; kinetic energy 6.6e-4 -> 2.8e-4 J (the tip that
  was cut off carried part of it);
* the next frame 136 ms, then 109 ms a frame at 20K tets (the frame change, the step with 200
  cubature vertices, the render mesh written).

With the cubature fitted on each mesh (the default since; 16 poses, target 0.01) the swap
fits a rule on the new mesh, which costs about half of ``swap_mesh``; the surface's boundary
search was made 4x faster at the same time (``core.sim.boundary_vertices``). Three runs, load
average 9-10 (the same scene; training 34-46 s):

| run | Use Model ms | swap in Blender ms | of it swap_mesh ms | TetGen s | frames after, ms |
|---|---:|---:|---:|---:|---:|
| fitted, old boundary search | 973 | 1047 | 1023 | 1.49 | 5.8 |
| fitted | 635 | 641 | 626 | 1.27 | 3.1 |
| fitted | 878 | 842 | 828 | 1.48 | 4.5 |

so the swap stays under the second at 20K tets (19,970 tets, 3,970 nodes), under load, and a
frame after it costs 3-6 ms instead of 109 ms (tens of fitted elements instead of the
elements of 200 random vertices); kinetic energy 8.2e-4 -> 3.4e-4 J at the cut.

With Static Modes (the default since: the mesh's rest stiffness and its banded Cholesky on
every swap; the timing hook passes the pinned nodes), one run at load 5-6, ``--epochs 40``:
Use Model on BarC (20,004 tets) 1,102 ms; Apply Mesh Edit on BarA (cut, 20,272 tets, 4,019
nodes) 1.88 s in all, TetGen in the worker 0.86 s, the swap in Blender 1,018 ms (``swap_mesh``
1,009 ms), then 3.8-5 ms a frame. The same swap in core at load 3.4: 775-821 ms (static modes
430-460 ms, cubature 225-251 ms for 136 elements): over the issue's second in Blender at
that load.

Usage (the venv's Python with the PyPI ``bpy``)::

    python bench/licrom_blender.py [--tet-size 0.015] [--epochs 100] [--variants 2]
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
from blender_frame import register_addon


def make_bar(bpy, name, location, length=0.5, tet_size=0.05):
    """A box bar along x from its pinned end at local x = -0.25 m, 0.1 x 0.1 m."""
    import bmesh

    bpy.ops.mesh.primitive_cube_add(size=1.0, location=location)
    obj = bpy.context.object
    obj.name = name
    b = bmesh.new()
    b.from_mesh(obj.data)
    bmesh.ops.subdivide_edges(b, edges=b.edges[:], cuts=2, use_grid_fill=True)
    b.to_mesh(obj.data)
    b.free()
    co = np.empty(3 * len(obj.data.vertices))
    obj.data.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    co = np.stack([-0.25 + (co[:, 0] + 0.5) * length, co[:, 1] * 0.1, co[:, 2] * 0.1], 1)
    obj.data.vertices.foreach_set("co", co.astype(np.float32).ravel())
    obj.data.update()
    obj.vertex_groups.new(name="pin").add(
        [int(i) for i in np.flatnonzero(co[:, 0] < -0.249)], 1.0, "REPLACE"
    )
    s = obj.neural_rom
    s.role, s.tet_size, s.frames, s.scenario, s.pin_group = (
        "DEFORMABLE",
        tet_size,
        24,
        "random_pokes",
        "pin",
    )
    return obj


def select_only(bpy, obj):
    for o in bpy.context.view_layer.objects:
        o.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def cut_tip(obj, x):
    import bmesh

    b = bmesh.new()
    b.from_mesh(obj.data)
    res = bmesh.ops.bisect_plane(
        b, geom=b.verts[:] + b.edges[:] + b.faces[:], plane_co=(x, 0, 0), plane_no=(1, 0, 0),
        clear_outer=True,
    )  # fmt: skip
    edges = [e for e in res["geom_cut"] if isinstance(e, bmesh.types.BMEdge)]
    cap = bmesh.ops.holes_fill(b, edges=edges, sides=0)["faces"]
    bmesh.ops.triangulate(b, faces=cap)
    b.to_mesh(obj.data)
    b.free()
    obj.data.update()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tet-size", type=float, default=0.015)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--variants", type=int, default=2)
    args = ap.parse_args()
    bpy = register_addon()
    from neural_rom.addon import simulate, training
    from neural_rom.addon.kinds.family import family
    from neural_rom.addon.kinds.fem import bake as bakes
    from neural_rom.core import bake
    from neural_rom.core.data import meshfile
    from neural_rom.training.worker import run

    folder = Path(tempfile.mkdtemp(prefix="licrom_blender_"))
    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "licrom_bench.blend"))
    scene = bpy.context.scene
    a = make_bar(bpy, "BarA", (0.0, 0.0, 1.0))
    b = make_bar(bpy, "BarB", (0.0, 1.0, 1.0))
    c = make_bar(bpy, "BarC", (0.0, 2.0, 1.0), length=0.4, tet_size=args.tet_size)
    for obj in (a, b, c):
        select_only(bpy, obj)
        assert bpy.ops.neural_rom.tetrahedralize() == {"FINISHED"}
    t0 = time.perf_counter()
    for obj in (a, b):
        obj.neural_rom.variants = args.variants
        job = bakes.make_bake_job(obj, scene)
        paths = bake.bake_variants(
            meshfile.read_tetmesh(job["mesh"]),
            bake.BakeSpec.from_dict(job["spec"]),
            job["out_dir"],
            job["name"],
        )
        bakes.on_bake_done(obj, {"paths": [str(p) for p in paths]})
    t_bake = time.perf_counter() - t0
    a.neural_rom.model_method = "licrom"
    spec = family.make_family_train_job(
        a, scene, [b], settings={"epochs": args.epochs, "rollout": False}, device="cpu"
    )
    t0 = time.perf_counter()
    assert training.on_train_done(a, run(spec))
    t_train = time.perf_counter() - t0
    m = a.neural_rom.model
    print(
        f"scene: BarA {a.neural_rom.tets_count} tets and BarB, {args.variants} bakes each "
        f"({t_bake:.1f} s); one model of both, r = {m.k}, {args.epochs} epochs: {t_train:.1f} s"
    )

    select_only(bpy, c)
    t0 = time.perf_counter()
    info = family.apply_model(c, scene, source=a)
    t_use = time.perf_counter() - t0
    print(
        f"Use Model on BarC ({c.neural_rom.tets_count} tets, {c.neural_rom.tets_nodes} nodes): "
        f"{t_use * 1000:.0f} ms; {family.domain_text(c.neural_rom.model)}"
    )

    select_only(bpy, a)
    assert bpy.ops.neural_rom.simulate(action="START") == {"FINISHED"}
    for f in range(2, 7):
        scene.frame_set(f)
    cut_tip(a, 0.15)
    a.neural_rom.tet_size = args.tet_size
    from neural_rom.core.methods.licrom import LicromSimulation

    spent = {}
    swap = LicromSimulation.swap_mesh

    def timed_swap(self, X, T, pinned=None):
        t = time.perf_counter()
        try:
            return swap(self, X, T, pinned)
        finally:
            spent["swap"] = time.perf_counter() - t

    to_tets = family.swap_to_tets

    def timed_to_tets(*aa, **kw):
        t = time.perf_counter()
        try:
            return to_tets(*aa, **kw)
        finally:
            spent["to_tets"] = time.perf_counter() - t

    LicromSimulation.swap_mesh, family.swap_to_tets = timed_swap, timed_to_tets
    try:
        t0 = time.perf_counter()
        info = family.apply_mesh_edit(a, scene)
        t_all = time.perf_counter() - t0
    finally:
        LicromSimulation.swap_mesh, family.swap_to_tets = swap, to_tets
    t0 = time.perf_counter()
    scene.frame_set(7)
    t_next = time.perf_counter() - t0
    t0 = time.perf_counter()
    for f in range(8, 18):
        scene.frame_set(f)
    t_mean = (time.perf_counter() - t0) / 10
    d = simulate._drivers["BarA"]
    print(
        f"Apply Mesh Edit on BarA (cut, {info['elements']} tets, {info['vertices']} nodes): "
        f"{t_all:.2f} s in all, of which TetGen in the worker {t_all - spent['to_tets']:.2f} s "
        f"and the swap in Blender {spent['to_tets'] * 1000:.0f} ms (swap_mesh "
        f"{spent['swap'] * 1000:.0f} ms, render map and frame "
        f"{(spent['to_tets'] - spent['swap']) * 1000:.0f} ms); kinetic energy "
        f"{info['kinetic_before']:.3e} -> {info['kinetic_after']:.3e} J"
    )
    print(
        f"next frame {t_next * 1000:.0f} ms, then {t_mean * 1000:.1f} ms a frame "
        f"({len(d.cache)} frames cached)"
    )
    print(f"(files in {folder})")


if __name__ == "__main__":
    main()
