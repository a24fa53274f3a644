"""Render the README pictures: the whole workflow, headless, with the PyPI ``bpy``.

    .venv/bin/python scripts/render_readme.py [--out docs/images] [--samples 24] [--quick]
    .venv/bin/python scripts/render_readme.py --latent DIR/rollout.npz [--latent-frame F]

Builds a scene from a procedural mesh (a soft ball over a studio backdrop), sets the ball
Deformable, tetrahedralizes it and bakes a gravity drop through the extension's own
operators (the bake runs in a worker process, as in Blender), then renders:

- ``drop_workbench.png`` / ``drop_cycles.png``: the ball at several bake frames side by
  side (fall, impact, squash, rebound, rest), Workbench and Cycles (CPU, few samples,
  denoised when Blender has OpenImageDenoise);
- ``tets_cutaway.png``: the render mesh next to its tet mesh cut in half (Workbench).

``--latent DIR/rollout.npz`` renders only ``latent_pca_ae_full.png`` (:func:`latent_picture`):
full space, autoencoder and PCA at one frame of the held-out replay written by
``bench/autoencoder.py --out DIR``, the reduced bars coloured by their distance to full space.

Nothing here is physics: the frames are exactly what viewport playback shows.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _addon():
    """Register the extension (the editable install exposes the repo root as ``neural_rom``)."""
    package = importlib.import_module("neural_rom")
    if not hasattr(package, "register"):  # namespace portion: run the root __init__ into it
        init = ROOT / "__init__.py"
        exec(compile(init.read_text(encoding="utf-8"), str(init), "exec"), package.__dict__)
    package.register()
    return package


# ----------------------------------------------------------------------------- scene


def _material(bpy, name, color, roughness=0.5, coat=0.0, subsurface=0.0):
    mat = bpy.data.materials.new(name)
    mat.diffuse_color = (*color, 1.0)  # Workbench (MATERIAL colour)
    mat.roughness = roughness
    mat.use_nodes = True
    bsdf = mat.node_tree.nodes["Principled BSDF"]
    bsdf.inputs["Base Color"].default_value = (*color, 1.0)
    bsdf.inputs["Roughness"].default_value = roughness
    if "Coat Weight" in bsdf.inputs:
        bsdf.inputs["Coat Weight"].default_value = coat
    if subsurface and "Subsurface Weight" in bsdf.inputs:
        bsdf.inputs["Subsurface Weight"].default_value = subsurface
        bsdf.inputs["Subsurface Radius"].default_value = (0.3, 0.12, 0.08)
        bsdf.inputs["Subsurface Scale"].default_value = 0.05
    return mat


def _backdrop(bpy, width=30.0, depth=16.0, height=8.0, radius=2.0, y_back=2.5):
    """A cyclorama: floor, a quarter-circle cove, a back wall (no horizon line)."""
    from neural_rom.addon.io import mesh as bm

    prof = [(-depth, 0.0), (y_back - radius, 0.0)]
    for a in np.linspace(0, math.pi / 2, 12)[1:]:
        prof.append((y_back - radius + radius * math.sin(a), radius - radius * math.cos(a)))
    prof.append((y_back, height))
    prof = np.array(prof)
    xs = np.array([-width / 2, width / 2])
    V = np.array([(x, y, z) for y, z in prof for x in xs])
    F = []
    for i in range(len(prof) - 1):
        a, b, c, d = 2 * i, 2 * i + 1, 2 * i + 3, 2 * i + 2
        F += [(a, b, c), (a, c, d)]
    me = bm.mesh_from_arrays("Backdrop", V, np.array(F))
    me.shade_smooth()
    obj = bpy.data.objects.new("Backdrop", me)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def _look_at(obj, target):
    from mathutils import Vector

    d = Vector(target) - obj.location
    obj.rotation_euler = d.to_track_quat("-Z", "Y").to_euler()


def _lights(bpy, centre):
    def area(name, loc, energy, size, color=(1, 1, 1)):
        data = bpy.data.lights.new(name, "AREA")
        data.energy, data.size, data.color = energy, size, color
        obj = bpy.data.objects.new(name, data)
        obj.location = loc
        bpy.context.scene.collection.objects.link(obj)
        _look_at(obj, centre)

    cx, cy, cz = centre
    area("Key", (cx - 3.5, cy - 4.0, cz + 5.0), 500, 2.5, (1.0, 0.95, 0.88))
    area("Fill", (cx + 5.0, cy - 3.0, cz + 2.0), 120, 6.0, (0.85, 0.9, 1.0))
    area("Rim", (cx + 1.0, cy + 3.0, cz + 4.0), 350, 3.0)


def build_scene(bpy, tmp: Path, quick: bool):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    _addon()
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp / "readme.blend"))
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 40
    scene.render.fps = 24

    from neural_rom.addon.io import mesh as bm
    from neural_rom.core.geometry import surface as core_surface

    V, F = core_surface.icosphere(0.5, 4 if not quick else 2)
    me = bm.mesh_from_arrays("Ball", V, F)
    me.shade_smooth()
    ball = bpy.data.objects.new("Ball", me)
    ball.location = (0.0, 0.0, 0.5)  # resting on the floor (z = 0)
    scene.collection.objects.link(ball)
    ball.data.materials.append(_material(bpy, "Flesh", (0.8, 0.2, 0.12), 0.35, 0.4, 0.2))

    s = ball.neural_rom
    s.role = "DEFORMABLE"
    s.material_preset = "flesh"
    # a dense render mesh carried by a coarse cage: smooth to look at, quick to simulate
    s.embedding = "ALWAYS"
    s.cage_resolution = 8 if not quick else 6
    s.tet_size = 0.2 if not quick else 0.3
    s.frames = 30 if not quick else 12
    s.variants = 1  # the picture's one drop (scripts/demo.py bakes its own variants)
    s.damping_stiffness = 0.004
    s.scenario = "gravity_drop"
    s.scenario_params["height"].float_value = 0.9
    s.scenario_params["ground"].bool_value = True

    floor = _backdrop(bpy)
    floor.data.materials.append(_material(bpy, "Studio", (0.42, 0.43, 0.45), 0.8))
    bpy.context.view_layer.objects.active = ball
    ball.select_set(True)
    return ball


def run_workflow(bpy, ball) -> None:
    t = time.perf_counter()
    assert bpy.ops.neural_rom.tetrahedralize() == {"FINISHED"}
    s = ball.neural_rom
    print(
        f"tetrahedralized: {s.tets_count} tets, {s.tets_nodes} nodes, "
        f"min dihedral {s.tets_min_dihedral:.1f} deg ({time.perf_counter() - t:.1f} s)"
    )
    t = time.perf_counter()
    assert bpy.ops.neural_rom.bake() == {"FINISHED"}
    rec = s.active_bake_record()
    print(f"baked {rec.frames} frames ({time.perf_counter() - t:.1f} s)")


# ----------------------------------------------------------------------------- pictures


def pick_frames(rm, n_show: int) -> list[int]:
    """Frames that tell the story: start, just before impact, deepest squash, rebound, last."""
    n = rm.n_frames
    lows = np.array([rm.world(k)[:, 2].min() for k in range(n)])
    heights = np.array([rm.world(k)[:, 2].max() - rm.world(k)[:, 2].min() for k in range(n)])
    contact = int(np.argmax(lows < lows.min() + 0.02))
    half_way = 0.5 * (lows[0] + lows.min())
    falling = int(np.argmin(np.abs(lows[: max(contact, 1)] - half_way)))
    squash = int(np.argmin(heights))
    rebound = squash + int(np.argmax(heights[squash:] - heights[squash]))
    picks = [0, max(falling, 1), squash, min(rebound, n - 1), n - 1]
    picks = sorted(dict.fromkeys(picks))
    while len(picks) < n_show:  # fill evenly if some coincide
        gaps = np.diff(picks)
        i = int(np.argmax(gaps))
        picks.insert(i + 1, picks[i] + gaps[i] // 2)
    return picks[:n_show]


def _smooth(obj) -> None:
    """Subdivision on top of the simulated surface, as a user would render it."""
    mod = obj.modifiers.new("Subdivision", "SUBSURF")
    mod.levels = mod.render_levels = 2


def filmstrip(bpy, ball, spacing=1.35) -> tuple[list, tuple, float]:
    """Copies of the ball at several bake frames, side by side along X; hides the original."""
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.fem import bake as bakes

    rm = bakes.render_map(ball)
    frames = pick_frames(rm, 5)
    copies = []
    x0 = -spacing * (len(frames) - 1) / 2
    for i, k in enumerate(frames):
        me = ball.data.copy()
        me.name = f"Ball_f{k}"
        P = rm.world(k)
        P = P - np.array([P[:, 0].mean(), P[:, 1].mean(), 0.0]) + np.array([x0 + i * spacing, 0, 0])
        bm.set_positions(me, P)
        obj = bpy.data.objects.new(me.name, me)
        bpy.context.scene.collection.objects.link(obj)
        _smooth(obj)
        copies.append(obj)
    ball.hide_render = True
    ball.hide_set(True)
    print("filmstrip frames:", frames)
    top = max(float(rm.world(k)[:, 2].max()) for k in frames)
    half_width = spacing * (len(frames) - 1) / 2 + 0.6
    return copies, (0.0, 0.0, 0.5 * top), half_width


def camera(bpy, target, half_width, lens=50.0, elevation_deg=9.0, margin=1.12):
    """A camera whose horizontal field of view holds ``half_width`` (m) either side of target."""
    cam = bpy.data.cameras.new("Camera")
    cam.lens = lens
    cam.sensor_fit = "HORIZONTAL"
    distance = margin * half_width / math.tan(math.atan(0.5 * cam.sensor_width / lens))
    obj = bpy.data.objects.new("Camera", cam)
    bpy.context.scene.collection.objects.link(obj)
    e = math.radians(elevation_deg)
    obj.location = (
        target[0],
        target[1] - distance * math.cos(e),
        target[2] + distance * math.sin(e),
    )
    _look_at(obj, target)
    bpy.context.scene.camera = obj
    return obj


def render(bpy, path: Path, engine: str, samples: int, res=(1600, 640)) -> None:
    scene = bpy.context.scene
    r = scene.render
    r.resolution_x, r.resolution_y = res
    r.resolution_percentage = 100
    r.image_settings.file_format = "PNG"
    r.film_transparent = False
    scene.view_settings.view_transform = "AgX"
    scene.view_settings.look = "AgX - Medium High Contrast"
    world = scene.world or bpy.data.worlds.new("World")
    scene.world = world
    world.color = (0.05, 0.05, 0.055)
    world.use_nodes = True
    world.node_tree.nodes["Background"].inputs["Color"].default_value = (0.08, 0.08, 0.09, 1)
    world.node_tree.nodes["Background"].inputs["Strength"].default_value = 0.6
    if engine == "WORKBENCH":
        r.engine = "BLENDER_WORKBENCH"
        sh = scene.display.shading
        sh.light = "STUDIO"
        sh.color_type = "MATERIAL"
        sh.show_shadows = True
        sh.shadow_intensity = 0.6
        sh.show_cavity = True
        sh.cavity_type = "WORLD"
        sh.show_specular_highlight = True
        scene.display.render_aa = "16"
        scene.view_settings.view_transform = "Standard"
        scene.view_settings.look = "None"
    else:
        r.engine = "CYCLES"
        scene.cycles.device = "CPU"
        scene.cycles.samples = samples
        scene.cycles.use_adaptive_sampling = True
        scene.cycles.max_bounces = 6
        try:
            scene.cycles.use_denoising = True
            scene.cycles.denoiser = "OPENIMAGEDENOISE"
        except (AttributeError, TypeError):
            scene.cycles.use_denoising = False
    r.filepath = str(path)
    t = time.perf_counter()
    bpy.ops.render.render(write_still=True)
    print(f"wrote {path} ({engine}, {time.perf_counter() - t:.1f} s)")


def _edges(bpy, source, name, color, thickness, replace=True):
    """Workbench renders no wireframe overlay: a Wireframe modifier on a copy draws the edges."""
    obj = bpy.data.objects.new(name, source.data.copy())
    bpy.context.scene.collection.objects.link(obj)
    obj.parent = source.parent
    obj.matrix_world = source.matrix_world.copy()
    mod = obj.modifiers.new("Wire", "WIREFRAME")
    mod.thickness = thickness
    mod.use_replace = replace
    obj.data.materials.clear()
    obj.data.materials.append(_material(bpy, name, color, 0.6))
    return obj


def tets_picture(bpy, hide, out: Path) -> None:
    """Left: a closed sphere's tets, cut in half. Right: Suzanne (open, non-manifold)
    inside the tetrahedralized cage that carries her."""
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.fem import preview
    from neural_rom.core.geometry import surface as core_surface

    for o in hide:
        o.hide_render = True
    scene = bpy.context.scene

    V, F = core_surface.icosphere(0.5, 3)
    sphere = bpy.data.objects.new("Sphere", bm.mesh_from_arrays("Sphere", V, F))
    scene.collection.objects.link(sphere)
    sphere.location = (-0.8, 0.0, 0.5)
    sphere.rotation_euler = (0.0, 0.0, math.radians(62))  # the cut face towards the camera
    sphere.neural_rom.embedding = "NEVER"
    sphere.neural_rom.tet_size = 0.12

    bpy.ops.mesh.primitive_monkey_add(size=0.9, location=(0.85, 0.0, 0.5))
    monkey = bpy.context.object
    monkey.data.shade_smooth()
    _smooth(monkey)
    monkey.data.materials.append(_material(bpy, "Monkey", (0.8, 0.2, 0.12), 0.35))
    monkey.neural_rom.cage_resolution = 10

    for o in (sphere, monkey):
        for other in bpy.context.view_layer.objects:
            other.select_set(False)
        o.select_set(True)
        bpy.context.view_layer.objects.active = o
        assert bpy.ops.neural_rom.tetrahedralize() == {"FINISHED"}
    scene.frame_set(scene.frame_current)

    cut = preview.build_preview(sphere, cutaway=True)
    sphere.hide_render = True
    cut.hide_render = False
    cut.data.materials.append(_material(bpy, "Tets", (0.35, 0.55, 0.85), 0.6))
    bpy.context.view_layer.update()
    _edges(bpy, cut, "TetEdges", (0.04, 0.06, 0.1), 0.005, replace=False)

    cage = preview.build_preview(monkey)
    bpy.context.view_layer.update()
    _edges(bpy, cage, "CageEdges", (0.2, 0.35, 0.6), 0.004)
    cage.hide_render = True

    cam = scene.camera
    cam.location = (0.15, -5.5, 1.8)
    _look_at(cam, (0.15, 0.0, 0.55))
    scene.display.render_aa = "8"
    print(
        f"sphere: {sphere.neural_rom.tets_count} tets; Suzanne's cage: "
        f"{monkey.neural_rom.tets_count} tets"
    )
    render(bpy, out / "tets_cutaway.png", "WORKBENCH", 0, res=(1200, 600))


# ----------------------------------------------------------------------------- latent picture


def colored_object(bpy, name, V, F, rgba, smooth=False):
    """A mesh object with a per-vertex colour attribute (Workbench's Attribute colour)."""
    from neural_rom.addon.io import mesh as bm

    me = bm.mesh_from_arrays(name, V, F)
    me.shade_smooth() if smooth else me.shade_flat()
    rgba = np.broadcast_to(np.asarray(rgba, dtype=np.float32), (len(V), 4))
    c = me.color_attributes.new("Col", "FLOAT_COLOR", "POINT")
    c.data.foreach_set("color", np.ascontiguousarray(rgba).ravel())
    me.color_attributes.active_color = c
    me.color_attributes.render_color_index = me.color_attributes.active_color_index
    obj = bpy.data.objects.new(name, me)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def label(bpy, body, loc, size, rgba, align="CENTER"):
    """Text in the x-z plane, facing the -y camera, as a mesh with a colour attribute (in
    Workbench's Attribute colour mode, which the error colours need, a text curve would
    have no colour)."""
    cu = bpy.data.curves.new("Label", "FONT")
    cu.body = body
    cu.size = size
    cu.align_x = align
    cu.align_y = "CENTER"
    curve = bpy.data.objects.new("LabelCurve", cu)
    bpy.context.scene.collection.objects.link(curve)
    deps = bpy.context.evaluated_depsgraph_get()
    me = bpy.data.meshes.new_from_object(curve.evaluated_get(deps))
    bpy.data.objects.remove(curve)
    n = len(me.vertices)
    c = me.color_attributes.new("Col", "FLOAT_COLOR", "POINT")
    c.data.foreach_set("color", np.tile(np.asarray(rgba, np.float32), n))
    me.color_attributes.active_color = c
    me.color_attributes.render_color_index = me.color_attributes.active_color_index
    obj = bpy.data.objects.new("Label", me)
    obj.location = loc
    obj.rotation_euler = (math.pi / 2, 0.0, 0.0)  # +z (the glyphs' normal) -> -y
    bpy.context.scene.collection.objects.link(obj)
    return obj


def box(lo, hi):
    """Corners (8, 3) and outward triangles (12, 3) of an axis-aligned box."""
    V = np.array([[(hi if k >> a & 1 else lo)[a] for a in range(3)] for k in range(8)], float)
    quads = [(0, 2, 3, 1), (4, 5, 7, 6), (0, 1, 5, 4), (2, 6, 7, 3), (0, 4, 6, 2), (1, 3, 7, 5)]
    F = [(a, b, c) for a, b, c, d in quads] + [(a, c, d) for a, b, c, d in quads]
    return V, np.array(F)


def ribbon(P: np.ndarray, width: float, y: float) -> tuple[np.ndarray, np.ndarray]:
    """A flat strip of ``width`` (m) along the polyline ``P`` (p, 3), drawn in the plane
    ``y`` (facing the -y camera), as vertices (2p, 3) and triangles."""
    xz = P[:, [0, 2]]
    t = np.gradient(xz, axis=0)
    t /= np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    nrm = np.stack([-t[:, 1], t[:, 0]], axis=1) * (0.5 * width)
    side = np.concatenate([xz + nrm, xz - nrm])
    V = np.stack([side[:, 0], np.full(len(side), y), side[:, 1]], axis=1)
    j, p = np.arange(len(P) - 1), len(P)
    F = np.concatenate([np.stack([j, j + 1, j + p + 1], 1), np.stack([j, j + p + 1, j + p], 1)])
    return V, F


def error_legend(bpy, x0, x1, z, vmax, size, text, y=-0.2):
    """The error ramp from ``x0`` to ``x1`` (m) at height ``z``, "0" and ``vmax`` (m, shown in
    mm) at its ends and ``text`` under it, in text of ``size`` (m)."""
    from neural_rom.addon.compare.bake import error_colors

    grey = (0.6, 0.6, 0.62, 1.0)
    s = np.linspace(0.0, 1.0, 65)
    h = size * 0.04 / 0.055
    V = np.concatenate(
        [np.stack([x0 + (x1 - x0) * s, 0 * s + y, z + 0 * s + dz], 1) for dz in (0, h)]
    )
    j = np.arange(64)
    Fq = np.concatenate([np.stack([j, j + 1, j + 66], 1), np.stack([j, j + 66, j + 65], 1)])
    colored_object(bpy, "Legend", V, Fq, error_colors(np.tile(s, 2) * vmax, vmax))
    pad, yl = size * 0.04 / 0.055, y - 0.1
    label(bpy, "0", (x0 - pad, yl, z + 0.5 * h), size, grey, "RIGHT")
    label(bpy, f"{1000 * vmax:g} mm", (x1 + pad, yl, z + 0.5 * h), size, grey, "LEFT")
    label(bpy, text, (0.5 * (x0 + x1), yl, z - size * 0.07 / 0.055), size, grey)


def render_front(bpy, path, xs, zs, width=1600, color_type="VERTEX") -> None:
    """Render the scene seen along +y by an orthographic camera framing ``xs`` = (xmin, xmax)
    and ``zs`` = (zmin, zmax) (m), ``width`` pixels wide, in Workbench (Attribute colours)."""
    scene = bpy.context.scene
    (xmin, xmax), (zmin, zmax) = xs, zs
    cam = bpy.data.cameras.new("Camera")
    cam.type = "ORTHO"
    res = (width, int(round(width * (zmax - zmin) / (xmax - xmin))))
    cam.ortho_scale = xmax - xmin
    cam.sensor_fit = "HORIZONTAL"
    obj = bpy.data.objects.new("Camera", cam)
    obj.location = (0.5 * (xmin + xmax), -10.0, 0.5 * (zmin + zmax))
    obj.rotation_euler = (math.pi / 2, 0.0, 0.0)
    scene.collection.objects.link(obj)
    scene.camera = obj

    rd = scene.render
    rd.engine = "BLENDER_WORKBENCH"
    rd.resolution_x, rd.resolution_y = res
    rd.resolution_percentage = 100
    rd.image_settings.file_format = "PNG"
    rd.film_transparent = False
    world = scene.world or bpy.data.worlds.new("World")
    scene.world = world
    world.color = (0.06, 0.06, 0.07)
    sh = scene.display.shading
    sh.light = "STUDIO"
    sh.color_type = color_type
    sh.show_cavity = False
    sh.show_specular_highlight = False
    scene.display.render_aa = "16"
    scene.view_settings.view_transform = "Standard"
    scene.view_settings.look = "None"
    rd.filepath = str(path)
    bpy.ops.render.render(write_still=True)


def latent_frame(full: np.ndarray, X: np.ndarray) -> int:
    """The frame of the largest full-space displacement (the strongest bend)."""
    return int(np.argmax(np.linalg.norm(full - X[None], axis=2).max(axis=1)))


def latent_picture(bpy, npz: Path, out: Path, frame: int | None = None) -> Path:
    """Full space, autoencoder and PCA at one frame of a held-out rollout, side by side.

    Reads the ``.npz`` of ``bench/autoencoder.py --out DIR`` (``DIR/rollout.npz``: rest ``X``,
    tets ``T``, ``pinned``, per-frame positions ``full``, ``ae``, ``pca``, and ``r``, ``k``).
    The three bars are turned about the clamp axis so that the full-space bend points down,
    and the reduced ones are coloured by each vertex's distance to the full-space position
    (the blue -> red ramp of Compare with Bake). Workbench, Attribute colours.
    """
    from neural_rom.addon.compare.bake import error_colors
    from neural_rom.core.geometry.tetmesh import TetMesh

    bpy.ops.wm.read_factory_settings(use_empty=True)
    with np.load(npz, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    X, T = d["X"], d["T"]
    frame = latent_frame(d["full"], X) if frame is None else int(frame)
    F = TetMesh(X, T).boundary_faces()
    # turn about the clamp axis (x, through the clamped face's centre): the bend points to -z
    c = X[d["pinned"]].mean(axis=0) if len(d["pinned"]) else X.min(axis=0)
    tip = X[:, 0] >= X[:, 0].max() - 1e-9
    dy, dz = (d["full"][frame][tip] - X[tip]).mean(axis=0)[1:]
    th = -math.pi / 2 - math.atan2(dz, dy)
    R = np.array([[1, 0, 0], [0, math.cos(th), -math.sin(th)], [0, math.sin(th), math.cos(th)]])

    def place(P, dx):
        return (P - c) @ R.T + np.array([dx, 0.0, 0.0])

    full = d["full"][frame]
    err = {m: np.linalg.norm(d[m][frame] - full, axis=1) for m in ("ae", "pca")}
    # the bar's long edges (vertices at the corners of its cross-section, along x); the
    # upper and lower ones in the picture draw the full-space outline
    lo_yz, hi_yz = X[:, 1:].min(axis=0), X[:, 1:].max(axis=0)
    edges = []
    for cy in (lo_yz[0], hi_yz[0]):
        for cz in (lo_yz[1], hi_yz[1]):
            on = np.flatnonzero((np.abs(X[:, 1] - cy) < 1e-9) & (np.abs(X[:, 2] - cz) < 1e-9))
            edges.append(on[np.argsort(X[on, 0])])
    height = [float(place(X[chain[:1]], 0.0)[0, 2]) for chain in edges]
    edges = [edges[int(np.argmax(height))], edges[int(np.argmin(height))]]
    top = max(float(e.max()) for e in err.values())
    vmax = float(np.ceil(top * 1000 / 5) * 5 / 1000) or 1e-3  # a round number of mm
    r, k = int(d["r"]), int(d["k"])
    n_tets = len(T)
    dofs = 3 * (len(X) - len(d["pinned"]))
    panels = [
        ("full", "Full space", f"{n_tets:,} tets, {dofs:,} DOFs", None),
        ("ae", "Autoencoder", f"{r} DOFs (latent)", err["ae"]),
        ("pca", "PCA", f"{k} DOFs (modes)", err["pca"]),
    ]
    reach = np.concatenate([place(d[m][frame], 0.0) for m in ("full", "ae", "pca")] + [place(X, 0)])
    lo, hi = reach.min(axis=0), reach.max(axis=0)
    gap = (hi[0] - lo[0]) + 0.45
    white = (0.92, 0.92, 0.92, 1.0)
    grey = (0.6, 0.6, 0.62, 1.0)
    for i, (key, name, sub, e) in enumerate(panels):
        dx = i * gap
        P = place(d[key][frame], dx)
        rgba = (0.78, 0.78, 0.8, 1.0) if e is None else error_colors(e, vmax)
        colored_object(bpy, name, P, F, rgba)
        if e is not None:  # the full-space pose's outline over the reduced one
            ghost = place(full, dx)
            tip_end = np.array([edges[0][-1], edges[1][-1]])
            for n_e, chain in enumerate([*edges, tip_end]):
                V, Fr = ribbon(ghost[chain], 0.008, lo[1] - 0.05)
                colored_object(bpy, f"Outline {name} {n_e}", V, Fr, white)
        wall = box(np.array([-0.04, -0.12, -0.12]), np.array([0.0, 0.12, 0.12]))
        colored_object(bpy, f"Clamp {name}", wall[0] + [dx, 0, 0], wall[1], (0.25,) * 3 + (1,))
        cx = dx + 0.5 * (lo[0] + hi[0])
        label(bpy, name, (cx, -0.3, hi[2] + 0.27), 0.085, white)
        label(bpy, sub, (cx, -0.3, hi[2] + 0.16), 0.06, grey)
        if e is not None:
            label(bpy, f"max error {1000 * e.max():.1f} mm", (cx, -0.3, lo[2] - 0.1), 0.06, grey)
    # colour legend under the reduced panels
    x0, x1 = gap + lo[0] + 0.15, 2 * gap + hi[0] - 0.15
    zl = lo[2] - 0.27
    error_legend(bpy, x0, x1, zl, vmax, 0.055, "distance to full space")
    n_frames, dt = len(d["full"]) - 1, float(d["dt"]) if "dt" in d else 1 / 24
    label(
        bpy,
        f"held-out load, frame {frame} of {n_frames} ({frame * dt:.2f} s); white outline: full space",
        (lo[0] - 0.1, -0.3, zl - 0.07),
        0.055,
        grey,
        "LEFT",
    )

    path = out / "latent_pca_ae_full.png"
    render_front(bpy, path, (lo[0] - 0.3, 2 * gap + hi[0] + 0.3), (zl - 0.15, hi[2] + 0.38))
    print(
        f"wrote {path} (frame {frame}; max error AE {1000 * err['ae'].max():.1f} mm, "
        f"PCA {1000 * err['pca'].max():.1f} mm)"
    )
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "images"))
    ap.add_argument("--samples", type=int, default=24, help="Cycles samples (denoised)")
    ap.add_argument("--quick", action="store_true", help="coarse mesh, few frames, no Cycles")
    ap.add_argument(
        "--latent",
        metavar="NPZ",
        default="",
        help="render only latent_pca_ae_full.png from bench/autoencoder.py --out DIR's rollout.npz",
    )
    ap.add_argument("--latent-frame", type=int, default=None, help="frame (default: largest bend)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    import bpy

    if args.latent:
        latent_picture(bpy, Path(args.latent), out, args.latent_frame)
        return 0

    with tempfile.TemporaryDirectory(prefix="neural_rom_readme_") as tmp:
        ball = build_scene(bpy, Path(tmp), args.quick)
        run_workflow(bpy, ball)
        copies, target, half_width = filmstrip(bpy, ball)
        _lights(bpy, target)
        camera(bpy, target, half_width)
        render(bpy, out / "drop_workbench.png", "WORKBENCH", 0)
        if not args.quick:
            render(bpy, out / "drop_cycles.png", "CYCLES", args.samples)
        tets_picture(bpy, [ball, *copies], out)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Blender's module build can crash while freeing itself at interpreter exit, after
    # every picture is written: leave without that teardown.
    os._exit(code)
