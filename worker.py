"""Neural ROM job worker: ``<python> worker.py <job>.spec.json``.

A bootstrap any Python (with numpy) can run as a script. It loads the extension package
from its own folder, whatever the folder is named (``neural_rom``,
``bl_ext.user_default.neural_rom``, a git checkout, ...), reads the job spec and hands
``spec["kind"]`` to its handler in :data:`HANDLERS`. Progress, metrics, warnings, errors
and the result go to stdout as JSON lines (see ``core/jobs.py``); everything else a job
prints goes to stderr, which the parent writes to the job's log.

Exit codes
----------
0  done: a ``done`` event carries the result.
1  crash: an unexpected exception; its traceback is in the log, an ``error`` event names it.
2  user error: a :class:`NeuralRomError` (bad input, diverged simulation, unreadable spec
   or unknown kind); the ``error`` event carries its message.
3  cancelled at a safe point: a ``done`` event with ``{"cancelled": true, ...}`` lists
   what was committed, and that stays valid.

A handler is ``handler(spec: dict) -> dict`` (a JSON-able result). It reports through
``core.jobs`` (:class:`~core.jobs.Progress`, :func:`~core.jobs.emit`) and checks
:func:`~core.jobs.should_cancel` at its safe points, raising :class:`JobCancelled` (with
an optional ``result`` attribute: what was committed). Heavy dependencies (torch for
"train") are imported inside their handler only, so a bake never imports torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

PACKAGE = "neural_rom"
_HERE = Path(__file__).resolve().parent


def _load_package():
    """Import the package this file sits in, under the name :data:`PACKAGE`."""
    module = sys.modules.get(PACKAGE)
    if module is not None and Path(getattr(module, "__file__", "")).resolve().parent == _HERE:
        return module
    spec = importlib.util.spec_from_file_location(
        PACKAGE, _HERE / "__init__.py", submodule_search_locations=[str(_HERE)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return module


def _sub(name: str):
    """``neural_rom.<name>`` of the package loaded by :func:`_load_package`."""
    return importlib.import_module(f"{PACKAGE}.{name}")


# ---------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------


def _committed(paths: list[Path], mesh_hash: str | None) -> list[dict]:
    """Frames committed in each bake file that exists (the part a cancel or crash keeps)."""
    cache = _sub("core.data.cache")
    out = []
    for path in paths:
        if not path.exists():
            continue
        try:
            bake = cache.BakeCache.open(path, expect_mesh_hash=mesh_hash)
            out.append({"path": str(path), "n_frames": int(bake.n_frames), "status": bake.status})
        except Exception as exc:  # noqa: BLE001 (an unreadable bake is reported, not fatal)
            out.append({"path": str(path), "n_frames": 0, "status": f"unreadable: {exc}"})
    return out


def _log(message: str) -> None:
    print(f"neural_rom bake: {message}", file=sys.stderr, flush=True)


def _bake_result(paths: list[Path], mesh_hash: str, spec: dict, shard, **extra) -> dict:
    committed = _committed(paths, mesh_hash)
    return {
        "paths": [c["path"] for c in committed if c["n_frames"] > 0],
        "frames": {c["path"]: c["n_frames"] for c in committed},
        "shard": list(shard),
        "out_dir": str(spec["out_dir"]),
        "name": str(spec["name"]),
        "mesh_hash": mesh_hash,
        **extra,
    }


def run_bake(spec: dict) -> dict:
    """``kind: "bake"``: the variants of a bake (:func:`core.bake.bake_variants`).

    Spec keys: ``mesh`` (tets .npz), ``spec`` (``BakeSpec.to_dict()``), ``out_dir``,
    ``name``, ``shard`` ([i, N], default [0, 1]), ``restart`` (bool, default False: each
    variant's unfinished bake of the same mesh and settings resumes after its last
    committed frame, a complete one is kept; True bakes every variant from frame 0),
    ``overwrite`` (bool, default False: a bake that cannot be resumed, baked with other
    settings or on another mesh, is started over instead of refused), ``processes`` (int,
    default 0: one per usable core; variants baked at once, each in its own worker with
    one BLAS thread, see :func:`_bake_in_processes`; 1 bakes them one after another here).

    Result: ``paths`` (bakes with committed frames), ``frames`` (committed frames per
    file), ``resumed`` (path -> the frame it resumed at), ``kept`` (complete bakes left as
    they were), ``processes``, ``shard``, ``out_dir``, ``name``, ``mesh_hash``.
    """
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    bake, meshfile = _sub("core.bake"), _sub("core.data.meshfile")
    for key in ("mesh", "spec", "out_dir", "name"):
        if key not in spec:
            raise errors.NeuralRomError(f'the bake job spec has no "{key}": re-create the job')
    mesh_path = Path(spec["mesh"])
    if not mesh_path.is_file():
        raise errors.NeuralRomError(
            f"no tet mesh at {mesh_path}: run Tetrahedralize on the object first, "
            "or check that the cache directory was not moved"
        )
    mesh = meshfile.read_tetmesh(mesh_path)
    bake_spec = bake.BakeSpec.from_dict(spec["spec"])
    bake_spec.validate(len(mesh.X))
    out_dir = Path(spec["out_dir"])
    name = str(spec["name"])
    shard = tuple(int(v) for v in spec.get("shard", (0, 1)))
    if len(shard) != 2 or shard[1] < 1 or not (0 <= shard[0] < shard[1]):
        raise errors.NeuralRomError(f"shard {shard} is invalid: use [i, N] with 0 <= i < N")
    restart = bool(spec.get("restart", False))
    mine = [k for k in range(int(bake_spec.variants)) if k % shard[1] == shard[0]]
    paths = [bake.variant_path(out_dir, name, k) for k in mine]
    mesh_hash = _sub("core.data.files").mesh_hash(mesh.X, mesh.T)
    _sub("core.data.files").ensure_writable_dir(out_dir, "bakes")

    # What each variant keeps, said up front (progress and log) and in the result.
    resumed, kept = {}, []
    for k, path in zip(mine, paths):
        if restart:
            if path.exists():
                _log(f"{path.name} starts over (restart)")
            continue
        point = bake.resume_point(mesh, bake.variant_spec(bake_spec, k), path)
        if point.action == "resume":
            resumed[k] = point.frames
            _log(f"{path.name} resumes at frame {point.frames} ({point.reason})")
        elif point.action == "complete":
            kept.append(str(path))
            _log(f"{path.name} is kept: {point.reason}")
        elif point.action == "mismatch":
            _log(f"{path.name} cannot be resumed: {point.reason}")

    processes = int(spec.get("processes") or 0)
    if processes <= 0:
        processes = jobs.usable_cores()
    processes = max(1, min(processes, len(mine)))
    extra = {"resumed": {str(bake.variant_path(out_dir, name, k)): f for k, f in resumed.items()}}
    extra.update(kept=kept, processes=processes)
    if processes > 1:
        return _bake_in_processes(spec, mine, paths, resumed, processes, mesh_hash, extra)

    frames_each = int(bake_spec.frames) + 1
    meter = jobs.Progress(len(mine) * frames_each)
    touched: set[int] = set()  # variants this run wrote to (older files may exist too)
    if resumed:
        done0 = sum(resumed.values())
        meter.update(done0, _resume_message(resumed, len(mine) > 1))

    def progress(done: int, total: int, info: dict | None = None) -> None:
        info = info or {}
        k = int(info.get("variant", mine[0]))
        touched.add(k)
        meter.total = int(total)
        message = f"frame {done}/{total}"
        notes = [f"variant {k}"] if len(paths) > 1 else []
        if k in resumed:
            notes.append(f"resumed at frame {resumed[k]}")
        if notes:
            message += f" ({', '.join(notes)})"
        meter.update(done, message)
        numbers = {
            key: v
            for key, v in info.items()
            if key not in ("variant", "eta_s") and isinstance(v, (int, float))
        }
        if numbers:
            jobs.emit("metric", values=numbers)

    try:
        written = bake.bake_variants(
            mesh,
            bake_spec,
            out_dir,
            name,
            shard=shard,
            progress=progress,
            should_cancel=jobs.should_cancel,
            overwrite=restart or bool(spec.get("overwrite", False)),
            resume=not restart,
            say=_log,
        )
    except errors.JobCancelled as exc:
        mine_touched = [p for k, p in zip(mine, paths) if k in touched or k in resumed]
        exc.result = _bake_result(mine_touched, mesh_hash, spec, shard, **extra)
        raise
    result = _bake_result([Path(p) for p in written], mesh_hash, spec, shard, **extra)
    result["paths"] = [str(p) for p in written]
    return result


def _resume_message(resumed: dict[int, int], several: bool) -> str:
    parts = [
        (f"variant {k} " if several else "") + f"resumes at frame {f}"
        for k, f in sorted(resumed.items())
    ]
    return "; ".join(parts)


def _bake_in_processes(
    spec: dict,
    mine: list[int],
    paths: list[Path],
    resumed: dict[int, int],
    processes: int,
    mesh_hash: str,
    extra: dict,
) -> dict:
    """Bake the variants ``mine`` in up to ``processes`` child workers at once.

    Each child is this worker on the same spec with ``shard`` ``[k, variants]`` (variant
    ``k`` alone), so it bakes exactly what a serial bake bakes for ``k``, with one BLAS
    thread (:data:`core.jobs.ONE_THREAD_ENV`): the processes share the cores rather than
    fight over them. This worker reports one progress (the frames of all the children),
    forwards their metrics and warnings, and forwards a cancel to each; a child that fails
    leaves the others running and what it committed valid. Children whose parent died
    cancel themselves at their next frame (their event pipe breaks), and the bake
    writer's lock keeps a bake started again off their files until they stopped.
    """
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    variants = int(spec["spec"]["variants"])
    shard = [int(v) for v in spec.get("shard", (0, 1))]
    frames_each = int(spec["spec"]["frames"]) + 1
    cancel_file = spec.get("cancel_file")
    log_dir = Path(cancel_file).parent if cancel_file else Path(spec["out_dir"]) / "logs"
    parent_id = Path(cancel_file).name.removesuffix(".cancel") if cancel_file else None
    meter = jobs.Progress(len(mine) * frames_each)
    done = {k: resumed.get(k, 0) for k in mine}
    waiting, running, ended = list(mine), {}, {}
    cancelling = False
    head = f"{len(mine)} variants in {processes} processes"
    if resumed:
        head += "; " + _resume_message(resumed, True)
    last = sum(done.values())
    meter.update(last, f"frame {last}/{meter.total} ({head})")
    while waiting or running:
        if not cancelling and jobs.should_cancel():
            cancelling = True
            _log("cancel: asking every variant to stop after its current frame")
            for job in running.values():
                job.cancel()
        while waiting and not cancelling and len(running) < processes:
            k = waiting.pop(0)
            child = {key: v for key, v in spec.items() if key != "cancel_file"}
            child.update(shard=[k, variants], processes=1)
            job = jobs.Job.start(
                child,
                sys.executable,
                log_dir,
                job_id=f"{parent_id}.v{k:03d}" if parent_id else None,
                check_python=False,
                env=jobs.ONE_THREAD_ENV,
            )
            running[k] = job
            _log(f"variant {k}: worker pid {job.pid}, log {job.log_path}")
        for k, job in list(running.items()):
            for event in job.poll():
                kind = event.get("event")
                if kind == "progress":
                    done[k] = int(event.get("done", done[k]))
                elif kind == "metric" and isinstance(event.get("values"), dict):
                    jobs.emit("metric", values={**event["values"], "variant": k})
                elif kind == "warning":
                    jobs.emit("warning", message=f"variant {k}: {event.get('message', '')}")
            if job.finished:
                ended[k] = running.pop(k)
                done[k] = max(done[k], job.done_units)
                _log(f"variant {k}: {job.state}: {job.message}")
        total_done = sum(done.values())
        if total_done != last:
            last = total_done
            meter.update(total_done, f"frame {total_done}/{meter.total} ({head})")
        if waiting or running:
            time.sleep(0.05)

    failed = {k: job for k, job in sorted(ended.items()) if job.state == jobs.FAILED}
    stopped = cancelling or any(job.state == jobs.CANCELLED for job in ended.values())
    touched = [p for k, p in zip(mine, paths) if k in ended]
    result = _bake_result(touched, mesh_hash, spec, shard, **extra)
    if failed:
        ok = [k for k in ended if k not in failed]
        message = "; ".join(f"variant {k}: {job.message}" for k, job in failed.items())
        message += (
            f". Variants {', '.join(map(str, ok))} went on; every committed frame is kept: "
            "fix the cause and bake again to resume"
            if ok
            else ". Every committed frame is kept: fix the cause and bake again to resume"
        )
        if any(job.crashed for job in failed.values()):
            raise RuntimeError(message)
        raise errors.NeuralRomError(message)
    if stopped:
        exc = errors.JobCancelled(f"bake cancelled ({len(result['paths'])} bakes with frames)")
        exc.result = result
        raise exc
    result = _bake_result(paths, mesh_hash, spec, shard, **extra)
    result["paths"] = [str(p) for p in paths]
    return result


def run_selftest(spec: dict) -> dict:
    """``kind: "selftest"``: a fake job for testing the runner without physics.

    Spec keys (all optional): ``steps`` (10), ``sleep`` (seconds per step, 0.02),
    ``commit_file`` (a line ``"<step>\\n"`` is appended and fsynced per step: the
    "committed" work), ``crash_at`` (hard exit 70 at that step), ``hang_at`` (sleeps
    forever, ignoring cancels), ``error_at`` (raises a NeuralRomError), ``raise_at``
    (raises a RuntimeError: a bug), ``warn_at`` (emits a warning), ``noise`` (prints to
    stdout, which must land in the log, not break the event stream).
    """
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    steps = int(spec.get("steps", 10))
    pause = float(spec.get("sleep", 0.02))
    commit = spec.get("commit_file")
    meter = jobs.Progress(steps)
    for i in range(steps):
        if spec.get("hang_at") == i:
            print(f"selftest: hanging at step {i}", file=sys.stderr, flush=True)
            while True:
                time.sleep(1.0)
        if spec.get("crash_at") == i:
            print(f"selftest: simulated crash at step {i}", file=sys.stderr, flush=True)
            os._exit(70)
        if spec.get("error_at") == i:
            raise errors.NeuralRomError(
                f"selftest: simulated user error at step {i}: change the input and retry"
            )
        if spec.get("raise_at") == i:
            raise RuntimeError(f"selftest: simulated bug at step {i}")
        if spec.get("noise"):
            print(f"selftest noise {i} {{not json", flush=True)
        time.sleep(pause)
        if commit:
            with open(commit, "a", encoding="utf-8") as fh:
                fh.write(f"{i}\n")
                fh.flush()
                os.fsync(fh.fileno())
        meter.update(i + 1, f"step {i + 1}/{steps}")
        jobs.emit("metric", values={"step": i, "loss": 1.0 / (i + 1)})
        if spec.get("warn_at") == i:
            jobs.emit("warning", message=f"selftest: warning at step {i}")
        if jobs.should_cancel():
            exc = errors.JobCancelled(f"selftest cancelled after step {i + 1}")
            exc.result = {"committed": i + 1}
            raise exc
    return {"committed": steps, "steps": steps}


def run_train(spec: dict, progress=None) -> dict:
    """``kind: "train"``: delegated to ``training.worker.run`` (imports torch lazily);
    ``progress(fraction, message)``, when given, takes the training's progress instead of
    this job's events (Compare Methods' lanes)."""
    errors = _sub("core.errors")
    try:
        module = _sub("training.worker")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"{PACKAGE}.training"):
            raise errors.NeuralRomError(
                "this version of Neural ROM cannot train yet: update the extension"
            ) from exc
        raise errors.NeuralRomError(
            f"training needs the Python package {exc.name!r}: install it in the job "
            "interpreter (Preferences > Neural ROM > Python)"
        ) from exc
    return module.run(spec, progress=progress)


def run_cloth_bake(spec: dict) -> dict:
    """``kind: "cloth_bake"``: Blender's cloth baked to .nrbake files
    (``addon.clothbake.run``); this process must have ``bpy`` (Blender itself in
    ``--background``, or a Python with the PyPI ``bpy``)."""
    errors = _sub("core.errors")
    try:
        module = _sub("addon.kinds.cloth.bake_job")
    except ModuleNotFoundError as exc:
        if exc.name != "bpy":
            raise
        raise errors.NeuralRomError(
            "the cloth bake runs in Blender itself (blender --background) or a Python with "
            "the bpy module; this job interpreter has no bpy"
        ) from exc
    return module.run(spec)


def run_tetrahedralize(spec: dict) -> dict:
    """``kind: "tetrahedralize"``: mesh an object's surface, or a cage around it, with
    TetGen (:func:`core.tetjob.mesh_surface`) and leave the tets in the job folder, where the
    add-on stores them when the job ended well (``addon/tets.py``).

    TetGen has no safe point: a cancel is seen before and after it, and a cancel during it
    (or a hang) ends with the parent killing this worker (``cancel_timeout_s``). A crash, a
    kill or a cancel leaves no ``result.json``, so the object keeps what it had.

    Spec keys: ``folder`` (with ``surface.npz``), ``name``, ``embedded``,
    ``target_edge_length`` (m), ``quality``, ``cage_resolution``.
    """
    import numpy as np

    jobs, errors, tetjob = _sub("core.jobs"), _sub("core.errors"), _sub("core.jobs.tetrahedralize")
    folder = Path(spec["folder"])
    name = str(spec["name"])
    meter = jobs.Progress(3)
    with np.load(folder / tetjob.SURFACE_FILE, allow_pickle=False) as z:
        V, F, M = z["V"], z["F"], z["M"]
    what = "a cage around" if spec["embedded"] else "the surface of"
    meter.update(1, f"meshing {what} {name} ({len(V)} vertices)")
    if jobs.should_cancel():
        raise errors.JobCancelled(f"tetrahedralizing {name} cancelled: nothing stored")
    result = tetjob.mesh_surface(
        V,
        F,
        M,
        name=name,
        embedded=bool(spec["embedded"]),
        target_edge_length=float(spec["target_edge_length"]),
        quality=float(spec["quality"]),
        cage_resolution=int(spec["cage_resolution"]),
    )
    for message in result.warnings:
        jobs.emit("warning", message=message)
    if jobs.should_cancel():
        raise errors.JobCancelled(f"tetrahedralizing {name} cancelled: nothing stored")
    meter.update(2, f"writing {len(result.mesh.T)} tets")
    tetjob.write_result(folder, result)
    meter.update(3, f"{len(result.mesh.T)} tets")
    return {
        "n_tets": len(result.mesh.T),
        "n_nodes": len(result.mesh.X),
        "embedded": result.embedding is not None,
        "quality": result.quality,
    }


def _frame_meter(jobs, what: str):
    """A ``progress(done, total)`` that reports frames with an ETA."""
    meter = jobs.Progress(0)

    def progress(done: int, total: int) -> None:
        meter.total = int(total)
        meter.update(int(done), f"{what} frame {done}/{total}")

    return progress


def run_simulate(spec: dict) -> dict:
    """``kind: "simulate"``: Bake Simulation, a model stepped over the frames the add-on
    gathered and written as a PC2 (:func:`core.simjob.simulate_to_pc2`). The PC2 is
    renamed into place only once complete: a cancel or a crash leaves the previous one.

    Spec keys: see :func:`core.simjob.simulate_to_pc2`. Result: ``path``, ``frames``,
    ``frame_start``, ``step_ms``; cancelled: ``path`` and ``written`` False.
    """
    return _frames_job(_sub("core.jobs.simulate").simulate_to_pc2, spec, "simulated")


def run_compare(spec: dict) -> dict:
    """``kind: "compare"``: Compare with Bake, a model replaying a bake and its errors
    against it written to a result file (:func:`core.comparejob.compare_with_bake`); a
    cancel or a crash leaves the previous result.

    Spec keys: see :func:`core.comparejob.compare_with_bake`. Result: ``path``,
    ``frames``, ``max``, ``mean``, ``rms``, ``step_ms``, ``diagonal``, ``closest_max``,
    ``closest_mean``, ``closest_rms``; cancelled: ``written`` False.
    """
    return _frames_job(_sub("core.jobs.compare").compare_with_bake, spec, "replayed")


def run_compare_methods(spec: dict) -> dict:
    """``kind: "compare_methods"``: train every method of the add-on's plan and replay the
    held-out bakes with each model (:func:`core.methodcompare.run_comparison`), through this
    module's train and compare runners; finished methods are kept in the state file, so a
    cancel keeps them and a re-run resumes after them. With ``lanes`` > 1 the plan's lanes
    train at once, each training in a child worker with one thread (:func:`_train_in_child`);
    with one lane they train one after another in this process. The trainings' progress is
    the comparison's (a progress event at most every :data:`COMPARE_PROGRESS_S`)."""
    jobs, comparejob = _sub("core.jobs"), _sub("core.jobs.compare")
    meter = jobs.Progress(1000, min_interval=COMPARE_PROGRESS_S)
    logged: set[str] = set()

    def say(fraction: float, message: str) -> None:
        meter.update(int(1000 * fraction), message)
        stage = message.split(":")[0]  # the log has each stage once, not every epoch
        if stage not in logged:
            logged.add(stage)
            _log(message)

    def compare(c: dict) -> dict:
        return comparejob.compare_with_bake(c, should_cancel=jobs.should_cancel)

    def time_steps(specs: list[dict]) -> list[float]:
        return comparejob.step_times(specs, should_cancel=jobs.should_cancel)

    train = run_train
    if int(spec.get("lanes") or 1) > 1:

        def train(child: dict, progress=None) -> dict:
            return _train_in_child(child, spec, progress)

    return _sub("core.jobs.compare_methods").run_comparison(
        spec,
        train=train,
        compare=compare,
        say=say,
        should_cancel=jobs.should_cancel,
        time_steps=time_steps,
    )


#: Seconds between two of Compare Methods' progress events (its trainings report often).
COMPARE_PROGRESS_S = 0.25


def _train_in_child(train_spec: dict, parent: dict, progress=None) -> dict:
    """Run the train job ``train_spec`` in a child worker with one BLAS and torch thread
    (:data:`core.jobs.ONE_THREAD_ENV`), waiting for it; this worker's cancel is forwarded to
    it, its progress to ``progress(fraction, message)``. Returns its result; raises :class:`JobCancelled` when it was cancelled, a
    NeuralRomError with its message when it failed (a RuntimeError when it crashed)."""
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    cancel_file = parent.get("cancel_file")
    log_dir = Path(cancel_file).parent if cancel_file else Path(parent.get("log_dir") or ".")
    parent_id = Path(cancel_file).name.removesuffix(".cancel") if cancel_file else "compare"
    child = {k: v for k, v in train_spec.items() if k != "cancel_file"}
    job = jobs.Job.start(
        child,
        sys.executable,
        log_dir,
        job_id=f"{parent_id}.{child.get('method', 'train')}",
        check_python=False,
        env=jobs.ONE_THREAD_ENV,
    )
    _log(f"{child.get('method')}: training in worker pid {job.pid}, log {job.log_path}")
    while not job.finished:
        if jobs.should_cancel() and not job.cancel_requested:
            job.cancel()
        for event in job.poll():
            if event.get("event") == "warning":
                jobs.emit("warning", message=f"{child.get('method')}: {event.get('message', '')}")
            elif event.get("event") == "progress" and progress is not None:
                progress(float(event.get("fraction") or 0.0), str(event.get("message", "")))
        time.sleep(0.1)
    if job.state == jobs.DONE:
        return job.result or {}
    if job.state == jobs.CANCELLED:
        raise errors.JobCancelled(f"{child.get('method')}: training cancelled")
    if job.crashed:
        raise RuntimeError(job.message)
    raise errors.NeuralRomError(job.message)


def _frames_job(run, spec: dict, what: str) -> dict:
    """``run(spec, progress=, should_cancel=)`` with per-frame progress; a cancel's result
    says the file ``spec["out"]`` was not written (the previous one stays)."""
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    try:
        return run(spec, progress=_frame_meter(jobs, what), should_cancel=jobs.should_cancel)
    except errors.JobCancelled as exc:
        exc.result = {"path": str(spec.get("out", "")), "written": False}
        raise


def _face_meter(jobs, steps: int):
    meter = jobs.Progress(steps)
    return lambda done, message: meter.update(done, message)


def run_face_setup(spec: dict) -> dict:
    """``kind: "face_setup"``: a face (flesh lattice between skin and skull, the jaw, the
    shape keys) built from the meshes the add-on gathered and written as a face file
    (:func:`core.facejob.setup_face`); a failure writes nothing."""
    jobs = _sub("core.jobs")
    return _sub("core.jobs.face").setup_face(spec, progress=_face_meter(jobs, 2))


def run_face_demo(spec: dict) -> dict:
    """``kind: "face_demo"``: the procedural demo head and its simulated expressions written
    as a face file (:func:`core.facejob.demo_face`)."""
    jobs = _sub("core.jobs")
    return _sub("core.jobs.face").demo_face(spec, progress=_face_meter(jobs, 2))


def run_face_simulate(spec: dict) -> dict:
    """``kind: "face_simulate"``: Bake Simulation of a face, its skin written as a PC2
    (:func:`core.facejob.simulate_face_to_pc2`); a cancel leaves the previous PC2."""
    return _frames_job(_sub("core.jobs.face").simulate_face_to_pc2, spec, "simulated")


def run_face_fit_key(spec: dict) -> dict:
    """``kind: "face_fit_key"``: a face model's latent code fitted to a sculpted key
    (:func:`core.facejob.fit_key`); writes nothing."""
    return _sub("core.jobs.face").fit_key(spec)


#: Job kind -> handler. Import heavy modules inside the handler, never here.
HANDLERS = {
    "bake": run_bake,
    "cloth_bake": run_cloth_bake,
    "tetrahedralize": run_tetrahedralize,
    "train": run_train,
    "simulate": run_simulate,
    "compare": run_compare,
    "compare_methods": run_compare_methods,
    "face_setup": run_face_setup,
    "face_demo": run_face_demo,
    "face_simulate": run_face_simulate,
    "face_fit_key": run_face_fit_key,
    "selftest": run_selftest,
}


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def run(spec: dict) -> int:
    """Run one job spec in this (worker) process; returns the exit code."""
    jobs, errors = _sub("core.jobs"), _sub("core.errors")
    kind = spec.get("kind")
    jobs.emit("started", pid=os.getpid(), kind=kind, python=sys.executable)
    print(
        f"neural_rom worker: kind={kind} pid={os.getpid()} python={sys.executable} package={_HERE}",
        file=sys.stderr,
        flush=True,
    )
    handler = HANDLERS.get(kind)
    try:
        if handler is None:
            known = ", ".join(sorted(HANDLERS))
            raise errors.NeuralRomError(f"unknown job kind {kind!r} (known: {known})")
        result = handler(spec)
    except errors.JobCancelled as exc:
        result = dict(getattr(exc, "result", None) or {})
        result["cancelled"] = True
        jobs.emit("done", result=result)
        print(f"neural_rom worker: cancelled ({exc})", file=sys.stderr, flush=True)
        return jobs.EXIT_CANCELLED
    except errors.NeuralRomError as exc:
        jobs.emit("error", message=str(exc), type=type(exc).__name__)
        print(f"neural_rom worker: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return jobs.EXIT_USER_ERROR
    except Exception as exc:  # noqa: BLE001 (a bug in a handler: exit code 1, traceback in the log)
        traceback.print_exc()
        sys.stderr.flush()
        jobs.emit(
            "error",
            message=f"the job hit an internal error ({type(exc).__name__}: {exc}); "
            "please report it with the log",
            type=type(exc).__name__,
        )
        return jobs.EXIT_CRASH
    # Which heavy modules this job pulled in: a bake must never import torch (or bpy).
    loaded = sorted(name for name in ("bpy", "torch") if name in sys.modules)
    jobs.emit(
        "done",
        result=result if isinstance(result, dict) else {"value": result},
        heavy_modules=loaded,
    )
    return jobs.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # Blender runs us as ``blender ... --python worker.py -- SPEC``
        argv = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else sys.argv[1:]
    if len(argv) != 1:
        print("usage: python worker.py JOB.spec.json", file=sys.stderr)
        return 2
    _load_package()
    jobs = _sub("core.jobs")
    try:
        spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
        problem = None if isinstance(spec, dict) else "the spec is not a JSON object"
    except (OSError, ValueError) as exc:
        problem = str(exc)
    if problem is not None:
        jobs.init_worker()
        jobs.emit(
            "error", message=f"cannot read the job spec {argv[0]}: {problem}", type="JobError"
        )
        return jobs.EXIT_USER_ERROR
    jobs.init_worker(spec.get("cancel_file"))
    return run(spec)


if __name__ == "__main__":
    # The script's folder is the package itself: drop it from sys.path so its
    # subpackages (core, addon, training, ...) do not shadow top-level modules.
    if sys.path and Path(sys.path[0] or ".").resolve() == _HERE:
        del sys.path[0]
    sys.exit(main())
