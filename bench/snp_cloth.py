"""Subspace Neural Physics on Blender's own cloth: Blender's cloth step against the learned
step on the same sheet and inputs, the decode, normals, push-out, the whole Blender frame
update and 100 capes in one batched step (issue 11's goals).

Problem: a 1 m x 1 m sheet of ``--side`` x ``--side`` vertices (2,500 by default) hanging
from its top row (the Cloth modifier's pin group), Blender's cloth at quality 5, poked from
the front by a keyframed sphere of radius 0.15 m (``tests/cloth_scenes.py``; the owner does
not move), 24 fps. The bench

1. times Blender's cloth step (``scene.frame_set`` of the next frame: the cloth solver and
   the depsgraph update, the ball keyed to move through the sheet) with and without
   self-collision, in this process (the PyPI ``bpy``);
2. bakes ``--variants`` seeded bakes of ``--frames`` frames with the cloth bake job and
   trains a model on them (``--k`` modes, ``--epochs`` epochs; the timing does not depend on
   how well it is trained, the accuracy is printed for the record);
3. times, on one core (:func:`common.pin_this_process`), the model's step, the decode
   (positions, no push-out), the render-time push-out, the normals (recomputed from the
   triangles, and the paper's linear normal model the trainer fits, in float32), the whole Blender frame update (step + decode + push-out + writing the positions
   into the mesh, :func:`addon.blender_mesh.set_positions`) and ``--instances`` instances in
   one batched step.

Results after the folded step and the linear normal model (default run, the shared machine
loaded by other sessions, load average 10-11: Blender's cloth ran 5x slower than on a quiet
machine, so its ratios below are inflated; our times are the fastest of 5 block means):
Blender's cloth 201.9 ms a frame, 3,257 ms with self-collision; the model's step 31.9 us (the
issue's goal <= 60 us; 6,327x Blender's cloth under that load); decode 66.1 us, push-out 74.4
us, normals recomputed 1,892 us against 59.9 us for the linear normal model (float32; its
normals 1.51 degrees from the recomputed ones on held-out frames, 95th percentile 4.96);
whole Blender frame update 1.15 ms (0.36 ms quiet before, when the machine was not loaded);
100 instances in one batched step 1.95 ms, their linear normals in one product 28.6 ms;
model file 6.2 MiB (the normal model's float32 basis added 1.9 MiB); 6 bakes x 121 frames in
170 s, training 53 s. The step A/B against the previous code on the same model, interleaved
runs under the same load: 130-170 -> 44-83 us (min of 30 blocks of 200 steps).

Results on a quiet machine before (default run, 77 s): Blender's cloth 38.2 ms a frame, 490
ms with self-collision; the model's step 120 us (318x; 4,078x with self-collision); decode 111
us, push-out 111 us, normals recomputed 323 us against 163 us for a product of the basis'
size (a stand-in for the linear normal model); whole Blender frame update 0.356 ms; 100
instances in one batched step 0.702 ms; 6 bakes x 121 frames in 32 s, training 7.8 s.

Earlier results (default run, 2,500 vertices, u = 64, network 131-96-96-96-64, the shared 2-core
machine loaded by 3 other sessions, load average 5-8: the microsecond timings moved 3-6x
between runs, so read them as upper bounds until a run on a quiet machine): Blender's cloth
97-126 ms a frame (38 ms measured once at load 0.1), with self-collision 1.0-2.0 s; the model's
step 139-908 us (three runs; 57 us for the FEM block of bench/snp.py on a quiet machine), so
244-912x Blender's cloth and 4,900-10,300x with self-collision; decode 208-511 us, push-out
92-459 us, normals recomputed 0.5-2.4 ms against 0.3-0.5 ms for the linear normal model's
product; whole Blender frame update 0.52-2.1 ms; 100 instances in one batched step 2.1-17 ms;
model file 4.2 MiB. Data: 6 bakes x 121 frames in 117-133 s, training 19-29 s (20 epochs);
with so little data the model (63 mm) is worse than its initial model (42 mm; PCA floor
3.8 mm): see tests/test_snp_cloth.py for what 20 bakes give.

Accuracy on three unseen paths (the test's configuration; about 8 minutes on 2 cores)::

    python bench/snp_cloth.py --variants 10 --frames 320 --k 24 --epochs 40 \
        --validation-fraction 0.05 --setting ensemble=2 --heldout-frames 1000 \
        --heldout-seeds 1000,1001,1002

measured on the same scene and settings before this option existed (training seeds 0 / 1,
load 2-5): 0.521 / 0.524x the initial model on the test's path
(seed 1000), 0.732 / 0.772x and 0.751 / 0.690x on seeds 1001 and 1002 (20 bakes of 160 frames
and one network: 0.577 / 0.627x, 0.964 / 0.764x, 0.848 / 0.869x); ``--variants 20`` with 2
networks: 23.4, 28.4 and 28.8 mm on the three paths (training/snp's docstring). This
command itself (training seed 0, load about 3): 25.47 / 37.46 / 33.88 mm, 0.518 / 0.877 /
0.672x (mean 0.689x), 4.3-5.7x the PCA floor, all bounded: off the test's path the ratio
varies a lot from one training to the next.

The walking character (``--scene cape``, issue 30): a 20 x 30 cape (0.5 x 0.75 m, Blender's
default cloth at quality 5) hung behind a cylinder torso that is its owner and a capsule
collider, walking 1 m/s and turning 60 degrees (``tests/cloth_scenes.build_cape``), baked at
the defaults (each variant drawn from the walk, perturbed). Besides the timings it prints the
accuracy table (:func:`character_table`) of the trainer's held-out variants and of three
motions of the file replayed as it plays them (``motion: file``): the walk itself, the torso
running 2.5 m/s and stopping within 0.33 s, and a whole turn in 1 s on the spot. Each row has
Blender's own chaos floor (the same motion re-baked with the cloth 1e-4 heavier), the closest
shapes, the alpha/beta model alone and a cape glued to the owner, and says which of the
issue's goals it meets (mean <= 3x the larger floor, <= 0.5x glued; max < 15% of the
diagonal). The whole Blender frame is ``scene.frame_set`` with the add-on's Simulate driving
the cape (its frame handler reads the torso, steps, writes the mesh; Blender evaluates the
scene), against ``frame_set`` with Blender's cloth, each frame's fastest of 5 runs.

Run with ``--scene cape --variants 10 --frames 120 --k 60 --epochs 30`` (load 13, one core
pinned, the automatic noise floor 0.1): Blender's cloth 34.2 ms a frame; the model's step
29.6 us with the owner walking and the capsule (goal <= 60 us at u <= 64; 1,154x Blender's
cloth, goal >= 300x); decode 23.6 us, push-out 38.0 us; the frame update in core 0.238 ms;
the whole Blender frame 1.67 ms, 20.5x (goal >= 40x), measured then as the fastest of 3
runs' means, which bursts of the other sessions' work inflated; as each frame's fastest of 5
runs (now), in a smaller run at the same load (``--variants 4 --frames 24 --k 12 --epochs 2
--cloth-frames 30``; its step 28.8 us), 0.233 ms against Blender's cloth's 51.7 ms, 222x,
Blender's own frame with the cloth muted 0.031 ms. Blender's cloth is timed in one run, which
the load inflates more: the ratio wants a quiet machine. Quiet (2026-11-29), the same command:
Blender's cloth 7.4-8.7 ms, the step 26.6-28.0 us (280-311x); the whole frame 0.23-0.24 ms
(32-37x) with the torso left out of the object's recorded colliders (the bench recorded none,
so the frame read no collider), and 0.344 ms, 21.7x, once the bench records them as Cloth
Bake does (goal 40x: not met; the handler's collider inputs 64 us, mesh write 28 us, driver
check 15 us, step 32 us a frame). 10 bakes x 121 frames in 51.6 s,
training 50.2 s. After the frame handler's one-frame path (issue 30; the same command, load
8.6-10, 2026-11-29): the step 25.1 us, the whole frame 0.278 ms (0.255-0.271 ms in runs of the
frame alone, against 0.363-0.381 ms for the code before in the same minutes), Blender's cloth
16.4 ms at that load: 59x as printed, 27-34x against the quiet machine's cloth; the accuracy
table below to the digit (the frames are bit for bit the former ones). Accuracy (mm):

=====================  ===========  =====  ===========  =======  =====  =====  ==========
bake, from rest        mean (max)   %diag  chaos (max)  closest  a/b    glued  goals met
=====================  ===========  =====  ===========  =======  =====  =====  ==========
held-out variant 4     31.2 (253)   28     2.57 (50)    2.20     98.2   134.7  0.5x glued
held-out variant 6     35.9 (354)   39     0.80 (36)    2.81     91.6   132.8  0.5x glued
the file's walk        10.1 (105)   12     0.02 (4)     0.60     52.1   79.8   glued, max
run to stop            42.9 (319)   35     0.83 (50)    1.17     97.3   99.2   0.5x glued
whole turn in 1 s      119.4 (988)  110    28.7 (160)   6.97     142.7  117.0  none
=====================  ===========  =====  ===========  =======  =====  =====  ==========

So 12-37x the closest shapes (goal 3x: not met; Blender's chaos, 0.02-2.6 mm, is lower
still, except on the spin, which is chaotic: 28.7 mm, the model 4.2x that), 0.13-0.43x glued
(met but on the spin, a motion no variant of a walk contains, where the model is no better
than glued), max 12-110% of the diagonal (met on the walk only). training/snp has what was
tried (noise, data, width, window, epochs, the owner's actions) and why the network is what limits. Before
the noise floor (same scene, load 9): held-out 34.4 / 44.0 mm, max 28 / 45%. The step before
the folded features (same model and inputs, interleaved runs in one session, load 9): 58.9
-> 27.8 us at best (the moving frame's features in numpy's small-array calls).

The frame ratio wants a quiet machine: ``.venv/bin/python bench/snp_cloth.py --scene cape
--variants 10 --frames 120 --k 60 --epochs 30``, its line ``WHOLE BLENDER FRAME``.

Usage (a Python with torch and the PyPI bpy: the repository's .venv)::

    python bench/snp_cloth.py [--scene sheet|cape] [--side 50] [--variants 6] [--frames 120] [--k 64]
                              [--epochs 20] [--seed 0] [--validation-fraction 0.2]
                              [--heldout-frames 0] [--heldout-seeds 1000,...]
                              [--setting NAME=VALUE ...]
                              [--instances 100] [--reps 200] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import common  # noqa: E402
from cloth_scenes import build_cape, build_sheet, character_accuracy, replay  # noqa: E402

BOX = [[-0.6, -0.45, 0.4], [0.6, 0.05, 1.6]]
CAPE = (20, 30)  # vertices across and down
MOTIONS = ("walk", "run_stop", "spin")  # the file's own motions replayed (tests/cloth_scenes)


def blender_cloth_step(blend: Path, self_collision: bool, frames: int) -> float:
    """Mean seconds of Blender's cloth step on the sheet, the ball moving through it."""
    import bpy

    bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    scene = bpy.context.scene
    sheet = bpy.data.objects["Sheet"]
    cloth = next(m for m in sheet.modifiers if m.type == "CLOTH")
    cloth.collision_settings.use_self_collision = self_collision
    cloth.point_cache.frame_end = frames + 1
    ball = bpy.data.objects["Ball"]
    for f, y in ((1, -0.6), (frames // 2, 0.05), (frames, -0.6)):
        ball.location = (0.0, y, 1.0)
        ball.keyframe_insert("location", frame=f)
    return _frame_seconds(scene, sheet, frames)


def blender_cape_step(blend: Path, frames: int) -> float:
    """Mean seconds of Blender's cloth step on the walking character's cape, the file's own
    walk and turn (``--scene cape``)."""
    import bpy

    bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    scene = bpy.context.scene
    cape = bpy.data.objects["Cape"]
    next(m for m in cape.modifiers if m.type == "CLOTH").point_cache.frame_end = frames + 1
    return _frame_seconds(scene, cape, frames)


def _frame_seconds(scene, obj, frames: int, reset=None, rounds: int = 1) -> float:
    """Mean seconds of ``scene.frame_set`` of frames 2 .. ``frames`` with ``obj`` evaluated;
    over ``rounds`` runs from frame 1 (``reset()`` before each), each frame's fastest (on a
    shared machine a burst of other work inflates some frames of one run, not the same frames
    of every run)."""
    import bpy

    times = np.full((rounds, frames - 1), np.inf)
    for r in range(rounds):
        scene.frame_set(1)
        if reset is not None:
            reset()
        for f in range(2, frames + 1):
            t0 = time.perf_counter()
            scene.frame_set(f)
            obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
            times[r, f - 2] = time.perf_counter() - t0
    return float(times.min(0).mean())


def per_call(fn, reps: int, blocks: int = 5) -> float:
    """Seconds per call: the fastest of ``blocks`` blocks' means (``reps`` calls in all), so
    that other processes on a shared machine inflate it less than a plain mean."""
    fn(0)
    n = max(reps // blocks, 1)
    best = float("inf")
    for k in range(blocks):
        t0 = time.perf_counter()
        for t in range(k * n, (k + 1) * n):
            fn(t)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def run(args, workdir: Path) -> dict:
    from neural_rom.core import jobs, registry
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.methods.snp import SNPBatch, VertexNormals, push_out
    from neural_rom.core.physics.colliders import Collider

    cape = args.scene == "cape"
    if cape:  # a 20 x 30 cape on a walking, turning torso (owner and capsule collider)
        blend = build_cape(workdir / "cape.blend", n=CAPE, frames=args.frames)
        cloth_s = blender_cape_step(blend, args.cloth_frames)
        cloth_self_s = float("nan")
        spec = {"object": "Cape", "name": "cape"}  # the defaults: motion from the walk
    else:
        blend = build_sheet(workdir / "sheet.blend", n=args.side)
        cloth_s = blender_cloth_step(blend, False, args.cloth_frames)
        cloth_self_s = blender_cloth_step(blend, True, args.cloth_frames)
        spec = {"object": "Sheet", "name": "sheet", "owner": "-", "collider_box": BOX}
    spec = {
        "kind": "cloth_bake",
        "blend": str(blend),
        "out_dir": str(workdir / "bakes"),
        "frames": args.frames,
        "variants": args.variants,
        "seed": 0,
        **spec,
    }
    t0 = time.perf_counter()
    job = jobs.Job.start(spec, sys.executable, workdir / "logs", check_python=False)
    job.wait(timeout=3600)
    if job.state != jobs.DONE:
        raise SystemExit(f"cloth bake failed: {job.message}")
    bake_s = time.perf_counter() - t0
    paths = job.result["paths"]
    held_jobs = []  # baked beside the training, which takes one core
    for seed in args.heldout_seeds if args.heldout_frames else []:
        held_spec = {**spec, "name": f"held{seed}", "frames": args.heldout_frames, "variants": 1}
        held_jobs.append(
            jobs.Job.start(
                {**held_spec, "seed": seed}, sys.executable, workdir / "logs", check_python=False
            )
        )
    out = workdir / f"{spec['name']}.nrmodel"
    res = registry.get("snp").trainer_function()(
        paths,
        out,
        registry.get("snp").values(
            dict(
                k=args.k,
                epochs=args.epochs,
                batch_size=32,
                validation_fraction=args.validation_fraction,
                seed=args.seed,
                time_budget=3600,
                **dict(settings_arg(a) for a in args.setting),
            )
        ),
        checkpoint_dir=None,
    )
    sim, model = registry.load_simulator(out)
    p = sim.p
    accuracy = {}
    for seed, held_job in zip(args.heldout_seeds, held_jobs):
        held_job.wait(timeout=3600)
        if held_job.state != jobs.DONE:
            raise SystemExit(f"held-out cloth bake failed: {held_job.message}")
        one = heldout_accuracy(sim, BakeCache.open(held_job.result["paths"][0]))
        accuracy.setdefault("heldout", []).append({"seed": seed, **one})

    if cape:  # held-out variants, then the user's walk, a run-to-stop and a spin
        val = model.metadata["validation_trajectories"]
        bakes, twins = cape_bakes(spec, val, workdir)
        accuracy["character"] = character_accuracy(
            sim, [BakeCache.open(paths[i]) for i in val] + bakes, twins
        )
        sim.reset()
    common.pin_this_process()
    held = BakeCache.open(paths[model.metadata["validation_trajectories"][0]])
    C = np.asarray(held.channel("colliders"))
    R = np.asarray(held.channel("reference_frame"))
    shapes = held.meta["colliders"]
    F = held.n_frames
    inputs = [
        FrameInputs(
            colliders=[
                Collider(c["kind"], c["radius"], c["half_length"], C[f, j])
                for j, c in enumerate(shapes)
            ],
            reference_frame=R[f],
        )
        for f in range(F)
    ]
    cycle = list(range(1, F)) + list(range(F - 2, 1, -1))
    order = [cycle[t % len(cycle)] for t in range(args.reps + 1)]
    step_s = per_call(lambda t: sim.step(inputs[order[t]]), args.reps)
    sim.push_out = False
    decode_s = per_call(lambda t: sim.positions(), args.reps)
    sim.push_out = True
    x = sim.positions()
    pushout_s = per_call(lambda t: push_out(x, sim.colliders), args.reps)
    normals = VertexNormals(p.triangles, len(p.X))
    normals_s = per_call(lambda t: normals(x), args.reps)
    assert sim.normal_model == "linear"
    sim.reset()
    linear_normals_s = per_call(lambda t: sim.normals(), args.reps)

    import bpy
    from neural_rom.addon.io import mesh as bm

    bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    mesh = bpy.data.objects[spec["object"]].data

    def frame_update(t):
        sim.step(inputs[order[t]])
        bm.set_positions(mesh, sim.positions())

    frame_s = per_call(frame_update, args.reps)
    # the whole Blender frame: frame_set with Simulate on (the add-on's frame handler reads
    # the inputs, steps, writes the mesh; Blender evaluates the scene), as Blender's cloth
    # was timed
    blender_frame_s, idle_frame_s = (
        simulate_frame_seconds(blend, spec["object"], out, args.cloth_frames, shapes)
        if cape
        else (float("nan"), float("nan"))
    )

    batch = SNPBatch(p, args.instances, sim.settings)
    starts = [
        [cycle[(3 * b + t) % len(cycle)] for t in range(args.reps + 1)]
        for b in range(args.instances)
    ]
    batch_s = per_call(lambda t: batch.step([inputs[s[t]] for s in starts]), args.reps)
    batch_normals_s = per_call(lambda t: batch.normals(), max(args.reps // 10, 5))
    net = p.net
    return {
        "scene": args.scene,
        "vertices": len(p.X),
        "modes": p.u,
        "external": p.encoder.size,
        "net_sizes": list(net.sizes) if net is not None else [],
        "bakes": len(paths),
        "frames": args.frames,
        "bake_s": bake_s,
        "epochs": res["epochs_trained"],
        "train_s": res["train_seconds"],
        "network_s": res["network_seconds"],
        "heldout_mm": 1e3 * res["heldout_mean_error_m"],
        "initial_mm": 1e3 * res["initial_model_mean_error_m"],
        "floor_mm": 1e3 * res["projection_mean_error_m"],
        "blender_cloth_s": cloth_s,
        "blender_cloth_self_s": cloth_self_s,
        "step_s": step_s,
        "decode_s": decode_s,
        "pushout_s": pushout_s,
        "normals_s": normals_s,
        "linear_normals_s": linear_normals_s,
        "frame_update_s": frame_s,
        "blender_frame_s": blender_frame_s,
        "idle_frame_s": idle_frame_s,
        "instances": args.instances,
        "batch_step_s": batch_s,
        "batch_normals_s": batch_normals_s,
        "normal_angle_mean_deg": res.get("normal_angle_mean_deg"),
        "normal_angle_p95_deg": res.get("normal_angle_p95_deg"),
        "file_bytes": out.stat().st_size,
        "array_bytes": sum(np.asarray(a).nbytes for a in model.arrays.values()),
        **accuracy,
    }


def cape_bakes(spec: dict, held: list[int], workdir: Path) -> tuple[list, list]:
    """The cape's bakes of the file's own motions (the walk, and the same cape on a torso
    that runs and stops, and one that spins: ``motion: file``), and a twin of each of them and
    of the ``held`` variants of the training bake: the same motion re-baked with the cloth's
    mass 1e-4 heavier (Blender's own chaos floor). Returns (shots, twins of ``held`` + shots),
    :class:`core.cache.BakeCache` each."""
    from neural_rom.core import jobs
    from neural_rom.core.data.cache import BakeCache

    frames, n = spec["frames"], CAPE
    started = []

    def start(blend, name, **kw):
        s = {**spec, "blend": str(blend), "name": name, "processes": 1, **kw}
        started.append(jobs.Job.start(s, sys.executable, workdir / "logs", check_python=False))

    twin = build_cape(workdir / "twin.blend", n=n, frames=frames, mass_scale=1 + 1e-4)
    for v in held:
        start(twin, "twin", shard=[v, spec["variants"]])
    for motion in MOTIONS:
        for name, scale in ((motion, 1.0), (f"{motion}_twin", 1 + 1e-4)):
            blend = build_cape(
                workdir / f"{name}.blend", n=n, frames=frames, motion=motion, mass_scale=scale
            )
            start(blend, name, variants=1, motion="file")
    opened = []
    for job in started:
        job.wait(timeout=3600)
        if job.state != jobs.DONE:
            raise SystemExit(f"cloth bake failed: {job.message}")
        opened.append(BakeCache.open(job.result["paths"][0]))
    twins, shots = opened[: len(held)], opened[len(held) :]
    return shots[::2], twins + shots[1::2]


def simulate_frame_seconds(
    blend: Path, name: str, model: Path, frames: int, colliders: list[dict]
) -> tuple[float, float]:
    """Mean seconds of ``scene.frame_set`` of frames 2 .. ``frames`` with the add-on's
    Simulate driving object ``name`` by ``model`` (its Cloth modifier muted), the fastest of
    5 runs from rest (each frame's fastest): the whole Blender frame, timed as
    :func:`blender_cape_step` times Blender's cloth; and the same with nothing driving it and
    the cloth muted (Blender's own share of every frame). ``colliders``: the bakes' recorded
    colliders (``meta["colliders"]``), recorded on the object as the add-on's Cloth Bake
    does, so the frame reads and pushes out of them (without it the torso was no input)."""
    import bpy
    from blender_frame import register_addon

    register_addon()
    from neural_rom.addon import simulate, training
    from neural_rom.addon.kinds.cloth import model as cloth

    bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    scene, obj = bpy.context.scene, bpy.data.objects[name]
    obj.neural_rom.role = "DEFORMABLE"
    if not training.on_train_done(obj, {"model": str(model), "method": "snp"}):
        raise SystemExit(f"the model {model} was not recorded on {name}")
    obj.neural_rom.model.kind = "cloth"
    obj.neural_rom.cloth.colliders = json.dumps([[c["name"], c["kind"]] for c in colliders])
    if len(cloth.colliders(obj)) != len(colliders):
        raise SystemExit(f"the colliders {colliders} are not all objects of {blend}")
    scene.frame_set(1)
    simulate.start_simulation(obj, scene)
    ours = _frame_seconds(scene, obj, frames, lambda: simulate.reset_simulation(obj, scene), 5)
    if not obj.neural_rom.simulate or obj.get("nrom_frame_error"):
        raise SystemExit(f"Simulate stopped: {obj.get('nrom_frame_error')}")
    simulate.stop_simulation(obj)
    next(m for m in obj.modifiers if m.type == "CLOTH").show_viewport = False
    return ours, _frame_seconds(scene, obj, frames, rounds=5)


def settings_arg(text: str) -> tuple[str, object]:
    """``name=value`` of ``--setting``: the value read as JSON where it parses (numbers,
    true/false), else as a string (``contact_features=on``)."""
    name, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"--setting wants name=value, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def heldout_accuracy(sim, held) -> dict:
    """tests/test_snp_cloth.py's measures of a model ``sim`` on a held-out bake replayed from
    rest (:func:`cloth_scenes.replay`): mean vertex errors (m) of the model, of its initial
    model alone (eq. 1) and of the PCA projection (the floor), and the largest change of the
    prediction in contact when the collider input is zeroed."""
    from dataclasses import replace as dc_replace

    from neural_rom.core.methods.snp import SNPSimulation

    x = np.asarray(held.channel("positions"))
    p = sim.p

    def err(a):
        return float(np.linalg.norm(a[1:] - x[1:], axis=-1).mean())

    sim.push_out = True
    y = replay(sim, held)
    y0 = replay(SNPSimulation(dc_replace(p, net=None), sim.settings), held)
    proj = p.mean + (((x - p.mean).reshape(len(x), -1) @ p.U) @ p.U.T).reshape(x.shape)
    C = np.asarray(held.channel("colliders"))
    r = held.meta["colliders"][0]["radius"]
    contact = np.linalg.norm(x - C[:, :1, :3, 3], axis=-1).min(1) < r + 0.03
    change = np.linalg.norm(y - replay(sim, held, colliders=False), axis=-1).max(1)
    diag = float(np.linalg.norm(held.X.max(0) - held.X.min(0)))
    return {
        "heldout_frames": int(held.n_frames),
        "heldout_swing_mm": 1e3 * float(np.linalg.norm(x - held.X, axis=-1).mean()),
        "heldout_model_mm": 1e3 * err(y),
        "heldout_initial_mm": 1e3 * err(y0),
        "heldout_floor_mm": 1e3 * err(proj),
        "heldout_bounded": bool(np.all(np.isfinite(y)) and np.abs(y - x).max() < diag),
        "contact_frames": int(contact.sum()),
        "collider_zero_change_mm": 1e3 * float(change[contact].max()) if contact.any() else 0.0,
    }


def report(r: dict) -> str:
    us = 1e6
    lines = [
        f"{r['scene']}: {r['vertices']} vertices, {r['modes']} modes, {r['external']} external "
        f"coordinates, network {r['net_sizes']}",
        f"data: {r['bakes']} Blender cloth bakes x {r['frames'] + 1} frames in "
        f"{r['bake_s']:.1f} s; training {r['train_s']:.1f} s ({r['epochs']} epochs, network "
        f"{r['network_s']:.1f} s)",
        f"held-out mean vertex error: model {r['heldout_mm']:.2f} mm, initial model "
        f"{r['initial_mm']:.2f} mm, PCA floor {r['floor_mm']:.2f} mm",
        f"Blender cloth step (quality 5): {r['blender_cloth_s'] * 1e3:.2f} ms, with "
        f"self-collision {r['blender_cloth_self_s'] * 1e3:.2f} ms (nan: not timed)",
        f"model step {r['step_s'] * us:.1f} us (goal <= 60 us at u = 64), "
        f"{r['blender_cloth_s'] / r['step_s']:.0f}x faster than Blender's cloth "
        f"({r['blender_cloth_self_s'] / r['step_s']:.0f}x with self-collision; goal >= 300x)",
        f"decode {r['decode_s'] * us:.1f} us, push-out {r['pushout_s'] * us:.1f} us, normals "
        f"recomputed {r['normals_s'] * us:.1f} us vs linear normal model "
        f"{r['linear_normals_s'] * us:.1f} us (float32; held-out angle to recomputed: mean "
        f"{r['normal_angle_mean_deg']:.2f}, 95th percentile {r['normal_angle_p95_deg']:.2f} "
        f"degrees)",
        f"frame update in core (step, decode, push-out, mesh write) "
        f"{r['frame_update_s'] * 1e3:.3f} ms (goal < 1 ms); "
        f"{r['blender_cloth_s'] / r['frame_update_s']:.0f}x faster than Blender's cloth",
        f"WHOLE BLENDER FRAME (--scene cape; frame_set with Simulate on: the add-on's frame "
        f"handler and Blender's scene update) {r['blender_frame_s'] * 1e3:.3f} ms against "
        f"Blender's cloth frame {r['blender_cloth_s'] * 1e3:.2f} ms: "
        f"{r['blender_cloth_s'] / r['blender_frame_s']:.1f}x (goal >= 40x); Blender's own "
        f"frame with the cloth muted and nothing driving it {r['idle_frame_s'] * 1e3:.3f} ms",
        f"{r['instances']} instances in one batched step: {r['batch_step_s'] * 1e3:.3f} ms "
        f"(goal < 2 ms); their linear normals in one product {r['batch_normals_s'] * 1e3:.2f} ms",
        f"model file {r['file_bytes'] / 1024:.0f} KiB, arrays {r['array_bytes'] / 1024:.0f} KiB",
    ]
    if "character" in r:
        lines.append(character_table(r["character"]))
    for h in r.get("heldout", []):
        e, e0, fl = h["heldout_model_mm"], h["heldout_initial_mm"], h["heldout_floor_mm"]
        lines.append(
            f"held-out bake (seed {h['seed']}) of {h['heldout_frames']} frames from rest (the "
            f"cloth moves {h['heldout_swing_mm']:.1f} mm): model {e:.2f} mm, initial model alone "
            f"{e0:.2f} mm ({e / e0:.3f}x; goal <= 0.6x), PCA floor {fl:.2f} mm ({e / fl:.1f}x "
            f"the floor), bounded {h['heldout_bounded']}; collider input zeroed: up to "
            f"{h['collider_zero_change_mm']:.1f} mm in {h['contact_frames']} contact frames"
        )
    if len(r.get("heldout", [])) > 1:
        ratios = [h["heldout_model_mm"] / h["heldout_initial_mm"] for h in r["heldout"]]
        lines.append(f"held-out ratio over {len(ratios)} paths: mean {np.mean(ratios):.3f}x")
    return "\n".join(lines)


def character_table(rows: list[dict]) -> str:
    """The cape's accuracy table (mm; :func:`cloth_scenes.character_accuracy`'s rows): per
    bake replayed from rest, the model's mean and max, Blender's own chaos floor (a twin of
    the bake 1e-4 heavier), the closest shapes, the alpha/beta model alone and a cape glued to
    the owner, and the issue's goals: mean <= 3x the larger floor and <= 0.5x glued, max <
    15% of the diagonal."""
    head = (
        f"{'bake (from rest)':<22}{'mean':>7}{'max':>6}{'%diag':>6}{'chaos':>7}{'(max)':>6}"
        f"{'closest':>8}{'a/b':>7}{'glued':>7}{'x floor':>8}{'x glued':>8}  goals"
    )
    out = [head]
    for h in rows:
        mm = {k: 1e3 * v for k, v in h.items() if k.endswith("_m")}
        floor = max(mm["floor_mean_m"], mm.get("chaos_mean_m", 0.0))
        pct = 100 * h["max_m"] / h["diagonal_m"]
        met = [
            mm["mean_m"] <= 3 * floor,
            mm["mean_m"] <= 0.5 * mm["glued_mean_m"],
            pct < 15,
        ]
        out.append(
            f"{h['bake']:<22}{mm['mean_m']:7.1f}{mm['max_m']:6.0f}{pct:6.0f}"
            f"{mm.get('chaos_mean_m', float('nan')):7.2f}{mm.get('chaos_max_m', float('nan')):6.0f}"
            f"{mm['floor_mean_m']:8.2f}{mm['alone_mean_m']:7.1f}{mm['glued_mean_m']:7.1f}"
            f"{mm['mean_m'] / floor:8.1f}{mm['mean_m'] / mm['glued_mean_m']:8.2f}  "
            + " ".join("met" if m else "NOT" for m in met)
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--scene",
        choices=("sheet", "cape"),
        default="sheet",
        help="sheet: the poked sheet; cape: a 20 x 30 cape on a torso (owner and capsule "
        "collider) walking 1 m/s and turning 60 degrees, baked at the defaults (motion drawn "
        "from the walk), with the accuracy table of its held-out bakes",
    )
    ap.add_argument("--side", type=int, default=50, help="vertices per side of the sheet")
    ap.add_argument("--variants", type=int, default=6, help="bakes (one in five held out)")
    ap.add_argument("--frames", type=int, default=120, help="frames per bake")
    ap.add_argument("--cloth-frames", type=int, default=60, help="Blender cloth frames timed")
    ap.add_argument("--k", type=int, default=64, help="PCA modes")
    ap.add_argument("--epochs", type=int, default=20, help="training epochs")
    ap.add_argument("--seed", type=int, default=0, help="training seed")
    ap.add_argument(
        "--validation-fraction", type=float, default=0.2, help="bakes held out of the training"
    )
    ap.add_argument(
        "--heldout-frames",
        type=int,
        default=0,
        help="also bake held-out bakes of this many frames (--heldout-seeds) and measure the "
        "model on each as tests/test_snp_cloth.py does on seed 1000 (0: no)",
    )
    ap.add_argument(
        "--heldout-seeds",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[1000],
        help="seeds of the held-out bakes, comma-separated (1000: the test's; 1000,1001,1002: "
        "three unseen paths)",
    )
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another SNPSettings field for the training (repeatable), e.g. ensemble=3",
    )
    ap.add_argument("--instances", type=int, default=100, help="instances of the batch")
    ap.add_argument("--reps", type=int, default=200, help="frames timed per measurement")
    ap.add_argument("--json", help="also write the raw results to this JSON file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="snp_cloth_bench_") as d:
        r = run(args, Path(d))
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
