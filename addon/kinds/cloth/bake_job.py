"""The cloth bake job: Blender's own Cloth modifier baked to ``.nrbake`` files.

Two halves, both thin (the format and the random motion are :mod:`core.clothbake`):

- :func:`run`, the worker's ``cloth_bake`` handler. It runs in a background process that
  has ``bpy``: Blender's own binary (``blender --background --factory-startup --python
  worker.py -- <spec>``) or a Python with the PyPI ``bpy`` (the tests). It refuses to run in
  Blender's UI process. Per variant it opens the copy of the user's file named in the spec,
  keyframes the colliders and the cloth's owner (:func:`core.clothbake.motion_plan`), sets
  the cloth's point cache to cover the bake, steps the frames and commits each one.
- :func:`make_job`, in Blender: saves a copy of the open file next to the bakes (the job
  reads that copy, so the user's file and scene stay as they are) and returns the job spec
  for :func:`addon.jobs.start_job`, which runs it with Blender's own binary.
  :func:`make_cloth_bake_job` wraps it with the object's Cloth Bake settings (the panel's
  button and the ``cloth-bake`` command) and :func:`on_cloth_bake_done` records the bakes
  the job wrote on the object, as FEM bakes are (:mod:`.cloth`: what a cloth object is).

What it handles, and what it refuses (with what to do):

* A point cache baked in the file (``is_baked``): freed in the job's copy, since a baked
  cache would replay the old frames instead of answering the new motion.
* Blender's cache frame range: the bake starts at the cache's first frame and the job's
  copy extends the cache's last frame to cover the bake (Blender's cloth does not
  simulate past it); the user's range is recorded in the metadata.
* An outdated cache: setting the range resets it and the job steps every frame from the
  first, so nothing old is ever read.
* Modifiers after the Cloth modifier are muted in the copy (the bake holds the cloth's own
  vertices, the ones Simulate writes); a modifier *before* it that changes the vertex
  count (Subdivision, Remesh, ...) is refused: the cloth then simulates another mesh.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix

from ....core import jobs
from ....core.bake import motion as mo
from ....core.data.cache import BakeCache, BakeWriter
from ....core.errors import CacheError, JobCancelled, NeuralRomError
from ....core.kinds.cloth import source as cb
from ...io import mesh as bm
from ...io.animation import owner_animation, owner_frame, sample_frames

_REFERENCE_CHANNEL = "reference_frame"


# ------------------------------------------------------------------------------------------
# In the job process
# ------------------------------------------------------------------------------------------


def _cloth_modifier(obj) -> tuple[int, object]:
    mods = list(obj.modifiers)
    for i, m in enumerate(mods):
        if m.type == "CLOTH":
            return i, m
    raise cb.ClothBakeError(
        f"'{obj.name}' has no Cloth modifier: add one (Physics > Cloth), or bake it with the "
        "FEM bake instead."
    )


#: Neural ROM collider shapes in the order of the add-on's enum (``addon.props``), for a file
#: read by a job process that has no add-on registered: Blender then keeps the setting as a
#: raw ID property holding the item's index.
_SHAPES = ("plane", "sphere", "capsule")


def collider_setting(o) -> tuple[str, bool]:
    """The collider shape the object's Neural ROM settings give, and whether its role is
    Collider (a shape the user chose). Objects with no such settings (role None, or never
    set up) read as the settings' default, a sphere."""
    try:
        s = o.neural_rom  # the add-on is registered here
        return str(s.collider_shape), s.role == "COLLIDER"
    except AttributeError:
        raw = o.get("neural_rom")
        raw = raw.to_dict() if hasattr(raw, "to_dict") else {}
        index = raw.get("collider_shape", 1)
        shape = _SHAPES[index] if isinstance(index, int) and 0 <= index < 3 else "sphere"
        return shape, raw.get("role", 0) == 2  # ROLE_ITEMS: NONE, DEFORMABLE, COLLIDER


def scene_cloth_colliders(obj, scene) -> tuple[list[list[str]], list[str]]:
    """The colliders Blender's cloth of ``obj`` sees (objects of ``scene`` with a Collision
    modifier), each ``[name, shape]`` with the shape its Neural ROM settings give; and
    warnings for those whose role is not Collider (taken as spheres, the settings'
    default: set their role to Collider to choose their shape)."""
    out, unset = [], []
    for o in scene.objects:
        if o is obj or not any(m.type == "COLLISION" for m in o.modifiers):
            continue
        shape, chosen = collider_setting(o)
        out.append([o.name, shape])
        if not chosen:
            unset.append(o.name)
    warnings = []
    if unset:
        warnings.append(
            f"{', '.join(repr(n) for n in unset)}: a Collision modifier but no Neural ROM "
            "Collider role, so the bake takes it as a sphere of its largest size; set its role "
            "to Collider and pick its shape (sphere, capsule, plane) if it is not a ball."
        )
    return out, warnings


def _scene_colliders(obj, spec: cb.ClothBakeSpec) -> tuple[list[tuple[object, str]], list]:
    """The colliders of the bake: the spec's ``[name, kind]``, or the scene's
    (:func:`scene_cloth_colliders`, with its warnings) when it names none."""
    items, warnings = spec.colliders, []
    if not items:
        items, warnings = scene_cloth_colliders(obj, bpy.context.scene)
    out = []
    for name, kind in items:
        col = bpy.data.objects.get(name)
        if col is None:
            raise cb.ClothBakeError(
                f"Collider '{name}' is not in {Path(spec.blend).name}: save the file, or "
                "pick the colliders again."
            )
        out.append((col, kind))
    return out, warnings


def _owner(obj, spec: cb.ClothBakeSpec):
    """The owner object (None: nothing moves) and the bone of it the cloth hangs from (an
    armature the cloth, or a parent of it, is parented to by a bone), or ""."""
    if spec.owner == "-":
        return None, ""
    if spec.owner:
        owner = bpy.data.objects.get(spec.owner)
        if owner is None:
            raise cb.ClothBakeError(f"Owner object '{spec.owner}' is not in the file.")
    else:
        owner = obj
        while owner.parent is not None:
            owner = owner.parent
    link = obj
    while link is not None and link.parent is not owner:
        link = link.parent
    bone = ""
    if link is not None and link.parent_type == "BONE" and owner.type == "ARMATURE":
        bone = link.parent_bone if owner.pose.bones.get(link.parent_bone) else ""
    return owner, bone


def _moves_with(o, owner) -> bool:
    """Whether ``o`` is ``owner`` or hangs from it (a parent chain up to it)."""
    while o is not None:
        if o is owner:
            return True
        o = o.parent
    return False


def _evaluated_positions(obj) -> np.ndarray:
    """The cloth's vertices (local) as the depsgraph evaluates them now."""
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    return bm.get_positions(ev.data)


def _key_track(scene, owner, bone: str, track: np.ndarray, start: int) -> None:
    """Make the owner's frame follow ``track`` (F, 4, 4) from scene frame ``start`` on, its
    own animation kept: a new empty carries the owner's top-most parent, keyed every frame
    to ``track[f] @ inverse(the frame as the file plays it at start + f)``."""
    root = owner
    while root.parent is not None:
        root = root.parent
    played = sample_frames(scene, owner, bone, range(start, start + len(track)))
    carrier = bpy.data.objects.new("NeuralROM_motion", None)
    scene.collection.objects.link(carrier)
    carrier.rotation_mode = "QUATERNION"
    root.parent = carrier
    root.matrix_parent_inverse.identity()
    prev = None
    for f, (want, was) in enumerate(zip(track, played)):
        W = want @ np.linalg.inv(was)
        loc, rot, _ = Matrix(W.tolist()).decompose()
        if prev is not None:
            rot.make_compatible(prev)
        prev = rot
        carrier.location, carrier.rotation_quaternion = loc, rot
        carrier.keyframe_insert("location", frame=start + f)
        carrier.keyframe_insert("rotation_quaternion", frame=start + f)


def _keyframe(objects: list, plan: dict, owner, start: int, owner_start=None) -> None:
    """Replace the animation of the colliders ``objects`` by the plan's random keys, and
    the owner's by its keys when the plan has them (``offsets`` from ``owner_start``, its
    location and rotation as the file has them at the first frame, read before anything
    was keyed)."""
    for col, keys in zip(objects, plan["colliders"]):
        col.animation_data_clear()
        for f, loc in zip(keys["frames"], keys["locations"]):
            loc = np.asarray(loc, float)
            if col.parent is not None:  # the plan is in world space; location is the parent's
                to_parent = bm.matrix(col.parent) @ np.array(col.matrix_parent_inverse)
                loc = bm.to_local(loc[None], to_parent)[0]
            col.location = tuple(loc)
            col.keyframe_insert("location", frame=start + int(f))
    keys = plan["owner"]
    if owner is not None:
        owner.animation_data_clear()
        loc0, rot0 = owner_start
        for f, off, turn in zip(keys["frames"], keys["offsets"], keys["turns"]):
            owner.location = tuple(loc0 + np.asarray(off))
            owner.rotation_euler = tuple(rot0 + np.asarray(turn))
            owner.keyframe_insert("location", frame=start + int(f))
            owner.keyframe_insert("rotation_euler", frame=start + int(f))


def _prepare(obj, spec: cb.ClothBakeSpec) -> tuple[object, dict, list[str]]:
    """Mute what follows the cloth, refuse what changes its vertex count, free a baked
    cache. Returns the cloth modifier, the user's cache range, and warnings."""
    warnings = []
    index, cloth = _cloth_modifier(obj)
    muted = []
    for m in list(obj.modifiers)[index + 1 :]:
        if m.show_viewport or m.show_render:
            m.show_viewport = m.show_render = False
            muted.append(m.name)
    if muted:
        warnings.append(
            f"Modifiers after the Cloth modifier ({', '.join(muted)}) are left out of the bake: "
            "the model learns the cloth's own vertices and they apply on top at playback."
        )
    if not cloth.show_viewport:
        cloth.show_viewport = True
    n = len(obj.data.vertices)
    got = len(_evaluated_positions(obj))
    if got != n:
        before = [m.name for m in list(obj.modifiers)[:index] if m.show_viewport]
        raise cb.ClothBakeError(
            f"The modifiers before the Cloth modifier of '{obj.name}' ({', '.join(before)}) "
            f"change its vertex count ({n} -> {got}): apply them, or move them after the "
            "Cloth modifier, then bake again."
        )
    pc = cloth.point_cache
    user_range = [int(pc.frame_start), int(pc.frame_end)]
    if pc.is_baked:
        bpy.ops.ptcache.free_bake_all()
        warnings.append(
            "The file's cloth cache was baked; the job freed it in its own copy (your file "
            "keeps its bake)."
        )
    return cloth, {"frame_start": user_range[0], "frame_end": user_range[1]}, warnings


def _bake_variant(spec: cb.ClothBakeSpec, variant: int, meter: jobs.Progress, done0: int):
    bpy.ops.wm.open_mainfile(filepath=str(spec.blend), load_ui=False)
    scene = bpy.context.scene
    obj = bpy.data.objects.get(spec.object)
    if obj is None or obj.type != "MESH":
        raise cb.ClothBakeError(
            f"'{spec.object}' is not a mesh object in {Path(spec.blend).name}: pick the cloth "
            "object and bake again."
        )
    cloth, user_range, warnings = _prepare(obj, spec)
    pc = cloth.point_cache
    start = int(pc.frame_start)
    pc.frame_end = max(int(pc.frame_end), start + spec.frames)  # also resets an outdated cache
    cols, more = _scene_colliders(obj, spec)
    warnings += more
    owner, bone = _owner(obj, spec)
    dt = float(scene.render.fps_base) / float(scene.render.fps)
    g = np.array(scene.gravity, dtype=np.float64) if scene.use_gravity else np.zeros(3)
    g = g * float(cloth.settings.effector_weights.gravity)

    scene.frame_set(start)
    M0 = bm.matrix(obj)
    X = bm.to_world(bm.get_positions(obj.data), M0)
    shapes = [bm.collider_shape(c, kind) for c, kind in cols]
    # the owner's start as the file has it, read before anything is keyed
    owner_start = None
    if owner is not None:
        owner_start = (
            np.array(owner.location, dtype=np.float64),
            np.array(owner.rotation_euler, dtype=np.float64),
        )
    # a collider that is the owner or hangs from it (a torso) moves with the character;
    # the others (a ball) get random keys
    free = [(c, k) for c, k in cols if owner is None or not _moves_with(c, owner)]
    if spec.motion == "file":  # the user's own shot: nothing keyed
        free = []
    plan = cb.motion_plan(
        spec,
        variant,
        X.min(0),
        X.max(0),
        [np.array(c.matrix_world.translation, dtype=np.float64) for c, _ in free],
    )
    for entry, (c, _) in zip(plan["colliders"], free):
        entry["name"] = c.name
    drawn = owner is not None and spec.motion not in ("keys", "file")
    if drawn:
        cloth.show_viewport = False  # sampling and keying step frames: not the cloth
        sources = owner_animation(scene, owner, bone, start)
        if sources:
            src = sources[variant % len(sources)]
            rng = np.random.default_rng([int(spec.seed), int(variant), 1])
            track, draws = mo.perturb(src["track"], spec.frames, rng, dt)
            _key_track(scene, owner, bone, track, start)
            plan["owner"] = {
                "source": src["name"],
                "source_frames": src["frames"],
                "bone": bone,
                "sources": [x["name"] for x in sources],
                **draws,
            }
        elif spec.motion == "animation":
            raise cb.ClothBakeError(
                f"'{owner.name}' has no animation to draw the bakes' motion from: animate it "
                "(or give it actions), or bake with random keys (motion 'keys')."
            )
        else:
            drawn = False
        cloth.show_viewport = True
    if owner is None:
        plan["owner"] = None  # nothing moves it: no keys were played
    elif spec.motion == "file":
        plan["owner"] = {"source": "the file's animation"}  # kept: nothing keyed
    elif not drawn:
        plan["owner"]["source"] = "random keys"
    keyed = owner if plan["owner"] and plan["owner"]["source"] == "random keys" else None
    _keyframe([c for c, _ in free], plan, keyed, start, owner_start)
    pc.frame_start = start  # the keys changed: make sure nothing old is read back
    scene.frame_set(start)  # keying left each keyed object at its last key: evaluate the first
    fv, fs = bm.polygons(obj.data)
    pin_group = cloth.settings.vertex_group_mass
    pinned = (
        bm.vertex_group_indices(obj, pin_group, min_weight=cb.PIN_WEIGHT)
        if pin_group and obj.vertex_groups.get(pin_group) is not None
        else np.zeros(0, np.int64)
    )
    n, c = len(X), len(cols)
    channels = {"positions": (n, 3), "velocities": (n, 3), _REFERENCE_CHANNEL: (4, 4)}
    if c:
        channels["colliders"] = (c, 4, 4)
    metadata = {
        "source": cb.SOURCE,
        "dt": dt,
        "gravity": g.tolist(),
        "frame_start": start,
        "frames": spec.frames,
        "seed": spec.seed,
        "variant": variant,
        "object": obj.name,
        "owner": owner.name if owner is not None else "",
        "owner_bone": bone,
        "owner_start": owner_frame(owner, bone).tolist() if owner is not None else None,
        "colliders": [
            {
                "name": col.name,
                "kind": s["kind"],
                "radius": s["radius"],
                "half_length": s["half_length"],
            }
            for (col, _), s in zip(cols, shapes)
        ],
        "reference_rest": cb.rigid(M0).tolist(),
        "user_cache_range": user_range,
        "cloth_quality": int(cloth.settings.quality),
        "self_collision": bool(cloth.collision_settings.use_self_collision),
        "motion": plan,
        "blend": str(spec.blend),
    }
    path = spec.path(variant)
    writer = BakeWriter(
        path,
        X=X,
        T=np.zeros((0, 4), np.int64),
        channels=channels,
        metadata=metadata,
        mesh_hash=cb.surface_hash(bm.get_positions(obj.data), fv, fs),
        extra_arrays={"face_vertices": fv, "face_sizes": fs, "pinned": pinned},
        overwrite=spec.overwrite,
        durable=spec.durable,
    )
    col_names = [c.name for c, _ in cols]
    prev = X
    t0 = time.perf_counter()
    try:
        for f in range(spec.frames + 1):
            if f:
                scene.frame_set(start + f)
            M = bm.matrix(obj)
            x = bm.to_world(_evaluated_positions(obj), M)
            if not np.all(np.isfinite(x)):
                raise NeuralRomError(
                    f"Blender's cloth gave non-finite positions at frame {start + f}: raise the "
                    "cloth's Quality Steps or slow the colliders down."
                )
            frame = {
                "positions": x,
                "velocities": (x - prev) / dt if f else np.zeros_like(x),
                _REFERENCE_CHANNEL: cb.rigid(M),
            }
            if c:
                frame["colliders"] = np.stack(
                    [
                        bm.collider_transform(o, s["centre"])
                        for o, s in zip((bpy.data.objects[nm] for nm in col_names), shapes)
                    ]
                )
            writer.append(**frame)
            prev = x
            meter.update(done0 + f + 1, f"variant {variant + 1}/{spec.variants}: frame {f}")
            if jobs.should_cancel():
                writer.close("cancelled")
                raise JobCancelled(f"cloth bake cancelled at frame {f} of variant {variant}")
        writer.update_metadata(bake_seconds=time.perf_counter() - t0)
        writer.close("complete")
    except BaseException:
        if not writer.closed:
            writer.close("failed: interrupted")
        raise
    return path, warnings


def run(spec_dict: dict) -> dict:
    """The worker's ``cloth_bake`` handler (see the module docstring).

    With ``processes`` above 1 (0: one per usable core) and more than one variant, the
    variants are shared out between that many child processes
    (:func:`_bake_in_processes`); otherwise this process bakes its shard's variants one
    after another.

    Result: ``paths`` (the bakes with committed frames), ``frames`` (path -> committed
    frames), ``warnings``, ``seconds``, ``processes``.
    """
    if not bpy.app.background:
        raise NeuralRomError(
            "The cloth bake runs in a background Blender, never in Blender's window: start it "
            "from the Neural ROM panel or the cloth-bake command."
        )
    spec = cb.ClothBakeSpec.from_dict(
        {k: v for k, v in spec_dict.items() if k in cb.ClothBakeSpec.__dataclass_fields__}
    )
    if not Path(spec.blend).is_file():
        raise cb.ClothBakeError(f"The file to bake {spec.blend} does not exist: save it first.")
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    mine = spec.shard_variants()
    for v in mine:
        if spec.path(v).exists() and not spec.overwrite:
            raise cb.ClothBakeError(
                f"A bake exists at {spec.path(v)}: pass overwrite, or another name."
            )
    processes = min(spec.processes or jobs.usable_cores(), len(mine))
    if processes > 1:
        return _bake_in_processes(spec, processes, spec_dict.get("cancel_file"))
    meter = jobs.Progress(len(mine) * (spec.frames + 1), min_interval=0.2)
    t0 = time.perf_counter()
    paths, warnings = [], []
    try:
        for i, v in enumerate(mine):
            path, w = _bake_variant(spec, v, meter, i * (spec.frames + 1))
            paths.append(str(path))
            warnings += [x for x in w if x not in warnings]
    except JobCancelled as exc:
        exc.result = _result(spec, time.perf_counter() - t0, warnings, 1)
        raise
    for w in warnings:
        jobs.emit("warning", message=w)
    return _result(spec, time.perf_counter() - t0, warnings, 1)


def _bake_in_processes(spec: cb.ClothBakeSpec, processes: int, cancel_file: str | None) -> dict:
    """Bake the variants in ``processes`` child workers at once, child ``i`` baking the
    variants ``v % processes == i`` (its ``shard``) one after another, as a serial bake
    bakes them: each commits its own ``.nrbake`` frame by frame.

    The children are Blender's own binary in the background when this is Blender
    (``bpy.app.binary_path``), this interpreter otherwise (the PyPI ``bpy``). This worker
    reports one progress (the frames of all the children), forwards their warnings once
    each, and forwards a cancel to each; a child that fails leaves the others running and
    what it committed valid, and the job then fails with its message.
    """
    blender = bool(bpy.app.binary_path)
    python = bpy.app.binary_path if blender else sys.executable
    log_dir = Path(cancel_file).parent if cancel_file else Path(spec.out_dir) / "logs"
    parent_id = Path(cancel_file).name.removesuffix(".cancel") if cancel_file else None
    meter = jobs.Progress(spec.variants * (spec.frames + 1), min_interval=0.2)
    t0 = time.perf_counter()
    running, ended, done = {}, {}, {}
    for i in range(processes):
        child = {
            "kind": "cloth_bake",
            **spec.to_dict(),
            "shard": [i, processes],
            "processes": 1,
        }
        running[i] = jobs.Job.start(
            child,
            python,
            log_dir,
            job_id=f"{parent_id}.p{i}" if parent_id else None,
            check_python=False,
            env=jobs.ONE_THREAD_ENV,
            blender=blender,
        )
        done[i] = 0
    head = f"{spec.variants} variants in {processes} processes"
    warnings: list[str] = []
    cancelling = False
    while running:
        if not cancelling and jobs.should_cancel():
            cancelling = True
            for job in running.values():
                job.cancel()
        for i, job in list(running.items()):
            for event in job.poll():
                if event.get("event") == "progress":
                    done[i] = int(event.get("done", done[i]))
            if job.finished:
                ended[i] = running.pop(i)
                done[i] = max(done[i], job.done_units)
                warnings += [w for w in job.warnings if w not in warnings]
        total = sum(done.values())
        meter.update(total, f"frame {total}/{meter.total} ({head})")
        if running:
            time.sleep(0.05)
    result = _result(spec, time.perf_counter() - t0, warnings, processes)
    failed = [job for _, job in sorted(ended.items()) if job.state == jobs.FAILED]
    if failed:
        message = "; ".join(dict.fromkeys(job.message for job in failed))
        if any(job.crashed for job in failed):
            raise RuntimeError(f"{message} (log: {failed[0].log_path})")
        raise NeuralRomError(message)
    if cancelling or any(job.state == jobs.CANCELLED for job in ended.values()):
        exc = JobCancelled(f"cloth bake cancelled ({len(result['paths'])} bakes with frames)")
        exc.result = result
        raise exc
    for w in warnings:
        jobs.emit("warning", message=w)
    return result


def _result(spec: cb.ClothBakeSpec, seconds: float, warnings: list, processes: int) -> dict:
    frames = {}
    for v in spec.shard_variants():
        p = spec.path(v)
        if p.exists():
            frames[str(p)] = BakeCache.open(p).n_frames
    return {
        "paths": [p for p, n in frames.items() if n > 0],
        "frames": frames,
        "warnings": warnings,
        "seconds": seconds,
        "processes": processes,
    }


# ------------------------------------------------------------------------------------------
# In Blender
# ------------------------------------------------------------------------------------------


def make_job(obj, scene, out_dir: str | Path, **settings) -> dict:
    """The job spec of a cloth bake of ``obj`` (a mesh with a Cloth modifier), after saving
    a copy of the open file into ``out_dir`` for the job to read.

    ``settings`` are :class:`core.clothbake.ClothBakeSpec` fields (frames, variants, seed,
    colliders, owner, ...). Refuses (``ClothBakeError``) an object without a Cloth modifier
    before anything is written.
    """
    _cloth_modifier(obj)
    out_dir = Path(bpy.path.abspath(str(out_dir)))
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / f".{settings.get('name', 'cloth')}.source.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(copy), copy=True, check_existing=False)
    spec = cb.ClothBakeSpec(blend=str(copy), object=obj.name, out_dir=str(out_dir), **settings)
    return {
        "kind": "cloth_bake",
        "runs_in": "blender",
        **spec.to_dict(),
        "log_dir": str(out_dir / "logs"),
    }


def make_cloth_bake_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    frames: int | None = None,
    variants: int | None = None,
    seed: int | None = None,
    owner: str | None = None,
    motion: str | None = None,
    out_dir: str | Path | None = None,
    overwrite: bool = True,
    **extra,
) -> dict:
    """The cloth bake job of ``obj`` (:func:`.clothbake.make_job`) with the object's Cloth
    Bake settings (``obj.neural_rom.cloth``; the arguments override them), recording it on
    the object (``pending_bake``) for :func:`on_cloth_bake_done`.

    Refuses (NeuralRomError, nothing written) an object that is not a mesh with a Cloth
    modifier, or one in Edit Mode. ``extra`` are further
    :class:`core.clothbake.ClothBakeSpec` fields (``collider_box``, ``durable``, ...).
    """
    from ...io.paths import cache_dir
    from . import model as cloth  # Blender's side only: the job process needs none of these

    if obj.type != "MESH" or cloth.cloth_modifier(obj) is None:
        raise NeuralRomError(
            f"'{obj.name}' has no Cloth modifier: add one (Physics > Cloth) to bake its cloth, "
            "or use Bake (FEM) instead."
        )
    if obj.mode == "EDIT":
        raise NeuralRomError(f"'{obj.name}' is in Edit Mode: leave it, then bake its cloth.")
    if obj.neural_rom.simulate or obj.neural_rom.playback:
        raise NeuralRomError(
            f"'{obj.name}' is driven by its model or a bake: stop Simulate / Play Bake first "
            "(the bake reads the mesh as it is)."
        )
    c = obj.neural_rom.cloth
    settings = {
        "frames": int(c.frames if frames is None else frames),
        "variants": int(c.variants if variants is None else variants),
        "seed": int(c.seed if seed is None else seed),
        "owner": str(c.owner if owner is None else owner),
        "motion": str(c.motion if motion is None else motion),
        "overwrite": bool(overwrite),
        **extra,
    }
    settings["name"] = f"cloth_s{settings['seed']}"
    try:
        cb.ClothBakeSpec(blend="-", object=obj.name, out_dir="-", **settings)
    except TypeError as e:
        raise NeuralRomError(f"Unknown cloth bake setting: {e}") from None
    if settings["owner"] not in ("", "-") and bpy.data.objects.get(settings["owner"]) is None:
        raise NeuralRomError(
            f"Owner '{settings['owner']}' is not an object of this file: pick the object the "
            "cloth hangs from, or leave it empty (its top-most parent)."
        )
    out = Path(out_dir) if out_dir else cache_dir(obj) / cloth.BAKES_DIR
    job = make_job(obj, scene, out, **settings)
    obj.neural_rom.pending_bake = json.dumps(
        {
            "kind": cloth.KIND,
            "out_dir": job["out_dir"],
            "name": job["name"],
            "variants": job["variants"],
            "mesh_hash": cloth.surface_hash(obj),
        }
    )
    return job


def on_cloth_bake_done(obj: bpy.types.Object, result: dict) -> list[str]:
    """Record the cloth bakes a finished (or cancelled) job left on disk on ``obj``, like
    :func:`.bakes.on_bake_done` records FEM bakes (a cancelled bake's committed prefix
    included). Returns the recorded paths."""
    from ...io.paths import load_path, scene_of, store_path
    from ..fem.bake import forget
    from . import model as cloth

    s = obj.neural_rom
    pending = json.loads(s.pending_bake) if s.pending_bake else {}
    paths = [Path(p) for p in (result or {}).get("paths", [])]
    if not paths and pending:
        paths = sorted(Path(pending["out_dir"]).glob(f"{pending['name']}_*.nrbake"))
    if s.role == "NONE":  # baked headless: its bakes make it an object of the pipeline
        s.role = "DEFORMABLE"
    recorded, drawn = [], set()
    for p in paths:
        try:
            cache = BakeCache.open(p, expect_mesh_hash=pending.get("mesh_hash") or None)
        except (CacheError, FileNotFoundError):
            continue
        if cache.n_frames == 0 or not cb.is_cloth_bake(cache.meta):
            continue
        rec = next((b for b in s.bakes if load_path(b.path).resolve() == p.resolve()), None)
        if rec is None:
            rec = s.bakes.add()
        rec.name = p.stem
        rec.path = store_path(obj, p)
        rec.kind = cloth.KIND
        rec.variant = int(cache.meta.get("variant", 0))
        rec.frames = cache.n_frames
        rec.frame_start = int(cache.meta.get("frame_start", scene_of(obj).frame_start))
        rec.nbytes = float(cache.nbytes)
        rec.status = cache.status
        rec.scenario = "cloth"
        rec.mesh_hash = rec.source_hash = cache.mesh_hash
        rec.tets_hash = ""
        s.cloth.colliders = json.dumps(
            [[c["name"], c["kind"]] for c in cache.meta.get("colliders", [])]
        )
        drawn.add(drawn_from(cache.meta))
        recorded.append(str(p))
        forget(obj.name)
    if recorded:
        first = Path(recorded[0]).resolve()
        s.active_bake = next(
            i for i, b in enumerate(s.bakes) if load_path(b.path).resolve() == first
        )
    s.cloth.drawn_from = ", ".join(sorted(d for d in drawn if d))
    s.pending_bake = ""
    return recorded


def drawn_from(meta: dict) -> str:
    """What a cloth bake's owner motion was drawn from (its metadata's motion plan): the
    owner and its bone, and "random keys" or the animation's source; "" when nothing
    moved it."""
    plan = (meta.get("motion") or {}).get("owner")
    if not plan:
        return ""
    who = meta.get("owner", "") + (f":{meta['owner_bone']}" if meta.get("owner_bone") else "")
    return f"{who} {plan.get('source', 'random keys')}"
