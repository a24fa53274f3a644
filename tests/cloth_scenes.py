"""Cloth scenes for the tests, built with the PyPI ``bpy`` and saved to a .blend.

A square sheet of ``n x n`` vertices hangs in the world XZ plane from its top row (the
pin group ``pin`` of its Cloth modifier), under an empty ``Owner`` it is parented to; a
UV sphere ``Ball`` with a Collision modifier waits in front of it. :func:`replay` plays a
cloth bake's inputs through a model (tests/test_snp_cloth.py, bench/snp_cloth.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def build_sheet(
    path: str | Path,
    n: int = 12,
    *,
    size: float = 1.0,
    ball_radius: float = 0.15,
    quality: int = 5,
    parent: bool = True,
    before: str | None = None,
    after: str | None = None,
) -> Path:
    """Save the sheet scene to ``path`` and return it.

    ``before``/``after``: the type of a modifier put before/after the Cloth modifier
    (``"SUBSURF"`` changes the vertex count).
    """
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    bpy.ops.mesh.primitive_grid_add(
        x_subdivisions=n - 1, y_subdivisions=n - 1, size=size, location=(0, 0, 0)
    )
    sheet = bpy.context.active_object
    sheet.name = "Sheet"
    mesh = sheet.data
    co = np.empty(3 * len(mesh.vertices))
    mesh.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    hung = np.stack([co[:, 0], np.zeros(len(co)), co[:, 1] - co[:, 1].max()], axis=1)
    mesh.vertices.foreach_set("co", hung.ravel())
    mesh.update()
    top = np.flatnonzero(hung[:, 2] > -1e-9)
    group = sheet.vertex_groups.new(name="pin")
    group.add([int(i) for i in top], 1.0, "REPLACE")
    if before:
        sheet.modifiers.new("Before", before)
    cloth = sheet.modifiers.new("Cloth", "CLOTH")
    cloth.settings.vertex_group_mass = "pin"
    cloth.settings.quality = quality
    if after:
        sheet.modifiers.new("After", after)
    if parent:
        bpy.ops.object.empty_add(location=(0, 0, 1.5))
        owner = bpy.context.active_object
        owner.name = "Owner"
        sheet.parent = owner
        sheet.location = (0, 0, 0)
    else:
        sheet.location = (0, 0, 1.5)
    bpy.ops.mesh.primitive_uv_sphere_add(
        radius=ball_radius, location=(0, -0.6, 1.0), segments=16, ring_count=8
    )
    ball = bpy.context.active_object
    ball.name = "Ball"
    ball.modifiers.new("Collision", "COLLISION")
    scene.frame_start, scene.frame_end = 1, 250
    path = Path(path)
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return path


def replay(sim, bake, *, colliders=True):
    """World positions (F, n, 3) of the simulator ``sim`` driven by the cloth bake's colliders
    and reference frame, from rest, as Simulate drives it; ``colliders`` False puts every
    collider at the world origin instead (the collider input zeroed: the sheet hangs 0.5 m
    above it, out of reach)."""
    from neural_rom.core.colliders import Collider
    from neural_rom.core.sim import FrameInputs

    C = np.asarray(bake.channel("colliders"))
    R = np.asarray(bake.channel("reference_frame"))
    shapes = bake.meta["colliders"]
    far = np.eye(4)
    sim.reset()
    out = [sim.positions()]
    for f in range(1, bake.n_frames):
        cols = [
            Collider(c["kind"], c["radius"], c["half_length"], C[f, j] if colliders else far)
            for j, c in enumerate(shapes)
        ]
        sim.step(FrameInputs(colliders=cols, reference_frame=R[f]))
        out.append(sim.positions())
    return np.array(out)
