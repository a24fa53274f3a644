"""The bake job (``kind: "bake"``): the variants of a FEM bake, in this worker or in one
child worker per variant at once (:func:`_bake_in_processes`), resumable after a cancel or
a crash (no bpy, no torch: a bake's ``heavy_modules`` is empty)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..bake import BakeSpec, bake_variants, resume_point, variant_path, variant_spec
from ..data import files
from ..data.cache import BakeCache
from ..data.meshfile import read_tetmesh
from ..errors import JobCancelled, NeuralRomError
from .events import Progress, emit, log, should_cancel
from .runner import CANCELLED, FAILED, ONE_THREAD_ENV, Job, usable_cores


def _committed(paths: list[Path], mesh_hash: str | None) -> list[dict]:
    """Frames committed in each bake file that exists (the part a cancel or crash keeps)."""
    out = []
    for path in paths:
        if not path.exists():
            continue
        try:
            bake = BakeCache.open(path, expect_mesh_hash=mesh_hash)
            out.append({"path": str(path), "n_frames": int(bake.n_frames), "status": bake.status})
        except Exception as exc:  # noqa: BLE001 (an unreadable bake is reported, not fatal)
            out.append({"path": str(path), "n_frames": 0, "status": f"unreadable: {exc}"})
    return out


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
    for key in ("mesh", "spec", "out_dir", "name"):
        if key not in spec:
            raise NeuralRomError(f'the bake job spec has no "{key}": re-create the job')
    mesh_path = Path(spec["mesh"])
    if not mesh_path.is_file():
        raise NeuralRomError(
            f"no tet mesh at {mesh_path}: run Tetrahedralize on the object first, "
            "or check that the cache directory was not moved"
        )
    mesh = read_tetmesh(mesh_path)
    bake_spec = BakeSpec.from_dict(spec["spec"])
    bake_spec.validate(len(mesh.X))
    out_dir = Path(spec["out_dir"])
    name = str(spec["name"])
    shard = tuple(int(v) for v in spec.get("shard", (0, 1)))
    if len(shard) != 2 or shard[1] < 1 or not (0 <= shard[0] < shard[1]):
        raise NeuralRomError(f"shard {shard} is invalid: use [i, N] with 0 <= i < N")
    restart = bool(spec.get("restart", False))
    mine = [k for k in range(int(bake_spec.variants)) if k % shard[1] == shard[0]]
    paths = [variant_path(out_dir, name, k) for k in mine]
    mesh_hash = files.mesh_hash(mesh.X, mesh.T)
    files.ensure_writable_dir(out_dir, "bakes")

    # What each variant keeps, said up front (progress and log) and in the result.
    resumed, kept = {}, []
    for k, path in zip(mine, paths):
        if restart:
            if path.exists():
                log(f"{path.name} starts over (restart)")
            continue
        point = resume_point(mesh, variant_spec(bake_spec, k), path)
        if point.action == "resume":
            resumed[k] = point.frames
            log(f"{path.name} resumes at frame {point.frames} ({point.reason})")
        elif point.action == "complete":
            kept.append(str(path))
            log(f"{path.name} is kept: {point.reason}")
        elif point.action == "mismatch":
            log(f"{path.name} cannot be resumed: {point.reason}")

    processes = int(spec.get("processes") or 0)
    if processes <= 0:
        processes = usable_cores()
    processes = max(1, min(processes, len(mine)))
    extra = {"resumed": {str(variant_path(out_dir, name, k)): f for k, f in resumed.items()}}
    extra.update(kept=kept, processes=processes)
    if processes > 1:
        return _bake_in_processes(spec, mine, paths, resumed, processes, mesh_hash, extra)

    frames_each = int(bake_spec.frames) + 1
    meter = Progress(len(mine) * frames_each)
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
            emit("metric", values=numbers)

    try:
        written = bake_variants(
            mesh,
            bake_spec,
            out_dir,
            name,
            shard=shard,
            progress=progress,
            should_cancel=should_cancel,
            overwrite=restart or bool(spec.get("overwrite", False)),
            resume=not restart,
            say=log,
        )
    except JobCancelled as exc:
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
    thread (:data:`.runner.ONE_THREAD_ENV`): the processes share the cores rather than
    fight over them. This worker reports one progress (the frames of all the children),
    forwards their metrics and warnings, and forwards a cancel to each; a child that fails
    leaves the others running and what it committed valid. Children whose parent died
    cancel themselves at their next frame (their event pipe breaks), and the bake
    writer's lock keeps a bake started again off their files until they stopped.
    """
    variants = int(spec["spec"]["variants"])
    shard = [int(v) for v in spec.get("shard", (0, 1))]
    frames_each = int(spec["spec"]["frames"]) + 1
    cancel_file = spec.get("cancel_file")
    log_dir = Path(cancel_file).parent if cancel_file else Path(spec["out_dir"]) / "logs"
    parent_id = Path(cancel_file).name.removesuffix(".cancel") if cancel_file else None
    meter = Progress(len(mine) * frames_each)
    done = {k: resumed.get(k, 0) for k in mine}
    waiting, running, ended = list(mine), {}, {}
    cancelling = False
    head = f"{len(mine)} variants in {processes} processes"
    if resumed:
        head += "; " + _resume_message(resumed, True)
    last = sum(done.values())
    meter.update(last, f"frame {last}/{meter.total} ({head})")
    while waiting or running:
        if not cancelling and should_cancel():
            cancelling = True
            log("cancel: asking every variant to stop after its current frame")
            for job in running.values():
                job.cancel()
        while waiting and not cancelling and len(running) < processes:
            k = waiting.pop(0)
            child = {key: v for key, v in spec.items() if key != "cancel_file"}
            child.update(shard=[k, variants], processes=1)
            job = Job.start(
                child,
                sys.executable,
                log_dir,
                job_id=f"{parent_id}.v{k:03d}" if parent_id else None,
                check_python=False,
                env=ONE_THREAD_ENV,
            )
            running[k] = job
            log(f"variant {k}: worker pid {job.pid}, log {job.log_path}")
        for k, job in list(running.items()):
            for event in job.poll():
                kind = event.get("event")
                if kind == "progress":
                    done[k] = int(event.get("done", done[k]))
                elif kind == "metric" and isinstance(event.get("values"), dict):
                    emit("metric", values={**event["values"], "variant": k})
                elif kind == "warning":
                    emit("warning", message=f"variant {k}: {event.get('message', '')}")
            if job.finished:
                ended[k] = running.pop(k)
                done[k] = max(done[k], job.done_units)
                log(f"variant {k}: {job.state}: {job.message}")
        total_done = sum(done.values())
        if total_done != last:
            last = total_done
            meter.update(total_done, f"frame {total_done}/{meter.total} ({head})")
        if waiting or running:
            time.sleep(0.05)

    failed = {k: job for k, job in sorted(ended.items()) if job.state == FAILED}
    stopped = cancelling or any(job.state == CANCELLED for job in ended.values())
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
        raise NeuralRomError(message)
    if stopped:
        exc = JobCancelled(f"bake cancelled ({len(result['paths'])} bakes with frames)")
        exc.result = result
        raise exc
    result = _bake_result(paths, mesh_hash, spec, shard, **extra)
    result["paths"] = [str(p) for p in paths]
    return result
