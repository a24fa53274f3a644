"""Cloth scenes for the tests, built with the PyPI ``bpy`` and saved to a .blend.

A square sheet of ``n x n`` vertices hangs in the world XZ plane from its top row (the
pin group ``pin`` of its Cloth modifier), under an empty ``Owner`` it is parented to; a
UV sphere ``Ball`` with a Collision modifier waits in front of it. :func:`replay` plays a
cloth bake's inputs through a model (tests/test_snp_cloth.py, bench/snp_cloth.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _hung_grid(name: str, a: int, b: int, size: float, sx: float = 1.0, sz: float = 1.0):
    """A grid of ``a x b`` vertices (``size`` m) hung in the object's XZ plane from its top
    row (at z = 0), scaled by ``sx`` across and ``sz`` down, with the pin group ``pin`` of
    that row; the new active object."""
    import bpy

    bpy.ops.mesh.primitive_grid_add(
        x_subdivisions=a - 1, y_subdivisions=b - 1, size=size, location=(0, 0, 0)
    )
    obj = bpy.context.active_object
    obj.name = name
    mesh = obj.data
    co = np.empty(3 * len(mesh.vertices))
    mesh.vertices.foreach_get("co", co)
    co = co.reshape(-1, 3)
    hung = np.stack([sx * co[:, 0], np.zeros(len(co)), sz * (co[:, 1] - co[:, 1].max())], axis=1)
    mesh.vertices.foreach_set("co", hung.ravel())
    mesh.update()
    group = obj.vertex_groups.new(name="pin")
    group.add([int(i) for i in np.flatnonzero(hung[:, 2] > -1e-9)], 1.0, "REPLACE")
    return obj


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
    sheet = _hung_grid("Sheet", n, n, size)
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
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.physics.colliders import Collider

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


def build_cape(
    path: str | Path,
    n: tuple[int, int] = (6, 9),
    *,
    bone: bool = False,
    frames: int = 48,
    speed: float = 1.0,
    turn: float = np.pi / 3,
    quality: int = 5,
    motion: str = "walk",
    mass_scale: float = 1.0,
) -> Path:
    """Save a cape on a walking, turning character to ``path`` and return it.

    A cylinder ``Torso`` (radius 0.15 m, 0.6 m tall, a Collision modifier, its Neural ROM
    role Collider with the shape *capsule*, set as the raw ID properties the add-on reads)
    walks ``speed`` m/s along its heading and turns by ``turn`` and back over ``frames``
    frames from frame 1, keyed every 8 frames. A ``Cape`` of ``n = (across, down)``
    vertices, 0.5 x 0.75 m, hangs behind it from its top row (pin group ``pin``) with
    Blender's default Cloth settings. With ``bone`` the character is an armature ``Rig``
    whose bone ``Spine`` carries the torso and the cape (both parented to the bone): the
    armature object walks and the bone sways in the pose; else the cape is parented to the
    torso, which is the cloth's owner and a collider at once.

    ``motion`` (:func:`_gait`): "walk" (the above), "run_stop" (runs 2.5 ``speed`` m/s
    straight ahead, stops within 0.33 s and stands) or "spin" (stands, turns a whole turn
    in 1 s and stands). ``mass_scale`` scales the cloth's vertex mass (1 + 1e-4: an
    imperceptible change, to measure Blender's own chaos on the scene).
    """
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames + 1
    bpy.ops.mesh.primitive_cylinder_add(radius=0.15, depth=0.6, location=(0, 0, 1.2))
    torso = bpy.context.active_object
    torso.name = "Torso"
    torso.modifiers.new("Collision", "COLLISION")
    torso["neural_rom"] = {"role": 2, "collider_shape": 2}  # Collider, capsule
    a, b = n
    cape = _hung_grid("Cape", a, b, 1.0, 0.5, 0.75)
    cape.location = (0.0, -0.2, 1.45)
    cloth = cape.modifiers.new("Cloth", "CLOTH")
    cloth.settings.vertex_group_mass = "pin"
    cloth.settings.quality = quality
    cloth.settings.mass *= mass_scale
    bpy.context.view_layer.update()

    def parent(child, to, bone_name=""):
        world = child.matrix_world.copy()
        child.parent = to
        if bone_name:
            child.parent_type = "BONE"
            child.parent_bone = bone_name
        bpy.context.view_layer.update()
        child.matrix_world = world

    walker = torso
    if bone:
        arm = bpy.data.armatures.new("Rig")
        rig = bpy.data.objects.new("Rig", arm)
        scene.collection.objects.link(rig)
        bpy.context.view_layer.objects.active = rig
        bpy.ops.object.mode_set(mode="EDIT")
        eb = arm.edit_bones.new("Spine")
        eb.head, eb.tail = (0, 0, 0.9), (0, 0, 1.5)
        bpy.ops.object.mode_set(mode="OBJECT")
        parent(torso, rig, "Spine")
        parent(cape, rig, "Spine")
        walker = rig
        spine = rig.pose.bones["Spine"]
        spine.rotation_mode = "XYZ"
        for f in range(1, frames + 2, 8):
            spine.rotation_euler = (0.08 * np.sin(0.5 * f), 0.0, 0.1 * np.sin(0.3 * f))
            spine.keyframe_insert("rotation_euler", frame=f)
    else:
        parent(cape, torso)
    start = np.array(walker.location, dtype=float)
    for f, (pos, heading) in _gait(motion, frames, speed, turn, 1.0 / scene.render.fps, start):
        walker.location, walker.rotation_euler = tuple(pos), (0.0, 0.0, heading)
        walker.keyframe_insert("location", frame=f)
        walker.keyframe_insert("rotation_euler", frame=f)
    scene.frame_set(1)
    path = Path(path)
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    return path


def _gait(motion: str, frames: int, speed: float, turn: float, dt: float, start: np.ndarray):
    """The keys ``(frame, (position (3,), heading rad))`` of :func:`build_cape`'s walker,
    from frame 1 to ``frames + 1``."""
    if motion == "walk":  # keyed every 8 frames, the heading swinging out and back
        heading, pos = 0.0, start
        for f in range(1, frames + 2, 8):
            yield f, (pos, heading)
            heading = turn * np.sin(np.pi * (f + 7) / frames)
            pos = pos + 8 * dt * speed * np.array([-np.sin(heading), np.cos(heading), 0.0])
    elif motion == "run_stop":  # from rest to a run in 8 frames, the stop in 8 more
        stop = max(frames // 2, 17)
        v = 2.5 * speed
        yield 1, (start, 0.0)
        yield 9, (start + [0.0, 0.5 * v * 8 * dt, 0.0], 0.0)
        run = start + [0.0, v * (stop - 9 + 4) * dt, 0.0]
        yield stop, (run, 0.0)
        yield stop + 8, (run + [0.0, 0.5 * v * 8 * dt, 0.0], 0.0)
        if frames + 1 > stop + 8:
            yield frames + 1, (run + [0.0, 0.5 * v * 8 * dt, 0.0], 0.0)
    elif motion == "spin":  # a whole turn in 24 frames (1 s) from frame 9, keyed every 4
        for f in range(1, frames + 2, 4):
            yield f, (start, 2 * np.pi * min(max((f - 9) / 24, 0.0), 1.0))
    else:
        raise ValueError(f"motion {motion!r}: walk, run_stop or spin")


def character_accuracy(sim, bakes: list, twins: list | None = None) -> list[dict]:
    """Per bake replayed from rest as Simulate plays it (bench/snp_cloth.py ``--scene cape``,
    tests/test_cloth_character.py): the model's max
    and mean vertex error, the closest shapes' (the floor), the alpha/beta model alone's
    (eq. 1, the network off) and a cape glued to its owner's (the rest shape carried by the
    reference frame), metres. ``twins``: per bake, the same motion re-baked with an
    imperceptible change (:func:`build_cape`'s ``mass_scale``), or None; its mean and max
    distance from the bake is Blender's own chaos floor (``chaos_mean_m``, ``chaos_max_m``)."""
    from dataclasses import replace as dc_replace

    from neural_rom.core.kinds.cloth.source import replay_cloth_bake
    from neural_rom.core.methods.snp import SNPSimulation

    alone = SNPSimulation(dc_replace(sim.p, net=None), sim.settings)
    rows = []
    for b, twin in zip(bakes, twins or [None] * len(bakes), strict=True):
        x = np.asarray(b.channel("positions"), dtype=np.float64)
        X = np.asarray(b.X, dtype=np.float64)
        closest: list = []
        y = replay_cloth_bake(sim, b, closest=closest)
        y0 = replay_cloth_bake(alone, b)
        R = np.asarray(b.channel("reference_frame"), dtype=np.float64)
        rel = R @ np.linalg.inv(np.asarray(b.meta["reference_rest"], dtype=np.float64))
        glued = np.einsum("fij,nj->fni", rel[:, :3, :3], X) + rel[:, None, :3, 3]
        e, ec, e0, eg = (np.linalg.norm(a - x, axis=-1) for a in (y, np.array(closest), y0, glued))
        row = {
            "bake": b.path.name,
            "frames": int(b.n_frames),
            "diagonal_m": float(np.linalg.norm(X.max(0) - X.min(0))),
            "max_m": float(e.max()),
            "mean_m": float(e.mean()),
            "floor_mean_m": float(ec.mean()),
            "alone_mean_m": float(e0.mean()),
            "glued_mean_m": float(eg.mean()),
        }
        if twin is not None:
            chaos = np.linalg.norm(np.asarray(twin.channel("positions")) - x, axis=-1)
            row.update(chaos_mean_m=float(chaos.mean()), chaos_max_m=float(chaos.max()))
        rows.append(row)
    return rows
