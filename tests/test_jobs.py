"""The job runner: worker events, cancel, crashes, kills, interpreter checks, and the
Blender-side registry (background mode: the PyPI bpy).

Runner tests use the worker's hidden "selftest" kind (sleeps, emits progress, honours
cancels, crashes or hangs on request) so they do not depend on physics; the end-to-end
bake tests run a real 3-frame bake of a tiny mesh through the same runner.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from neural_rom.core import jobs
from neural_rom.core.errors import JobCancelled, NeuralRomError
from neural_rom.core.jobs import events as worker_side
from neural_rom.core.jobs import interpreters

from .blender_fixtures import ROOT, addon  # noqa: F401 (pytest fixture)

PY = sys.executable


def selftest(tmp_path, **kw) -> jobs.Job:
    spec = {"kind": "selftest", "steps": 10, "sleep": 0.02, **kw}
    return jobs.Job.start(spec, PY, tmp_path / "logs")


def wait_for_progress(job: jobs.Job, done: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while job.done_units < done:
        job.poll()
        assert job.state == jobs.RUNNING, job.message
        assert time.monotonic() < deadline, f"no progress to {done}: {job!r}"
        time.sleep(0.01)


def committed_lines(path: Path) -> list[int]:
    """Every line of a selftest commit file must be a whole integer: the prefix is valid."""
    text = path.read_text()
    assert text == "" or text.endswith("\n")
    return [int(line) for line in text.splitlines()]


def fake_python_without_numpy(
    tmp_path: Path, missing: tuple[str, ...] = ("numpy", "scipy")
) -> Path:
    """An executable 'interpreter' that behaves like Python but cannot import the
    ``missing`` packages while ``<it>.nonumpy`` exists (delete that file to 'install' them)."""
    path = tmp_path / "fake_python"
    path.with_suffix(".nonumpy").touch()
    path.write_text(
        f"#!{PY}\n"
        "import os, runpy, sys\n"
        "class _NoNumpy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {missing!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "if os.path.exists(os.path.splitext(sys.argv[0])[0] + '.nonumpy'):\n"
        "    sys.meta_path.insert(0, _NoNumpy())\n"
        "if sys.argv[1:2] == ['-c']:\n"
        "    code = sys.argv[2]\n"
        "    sys.argv = ['-c', *sys.argv[3:]]\n"
        "    exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})\n"
        "else:\n"
        "    sys.argv = sys.argv[1:]\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------------------------------
# Worker-side helpers (in this process, without init_worker)
# ---------------------------------------------------------------------------------------


def test_emit_writes_one_json_line_per_event_with_numpy_values(capsys):
    jobs.emit("metric", values={"loss": np.float32(0.5), "iters": np.int64(3)}, arr=np.arange(3))
    jobs.emit("warning", message="a\nb")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["event"] == "metric"
    assert first["values"] == {"loss": 0.5, "iters": 3}
    assert first["arr"] == [0, 1, 2]
    assert second == {"event": "warning", "time": second["time"], "message": "a\nb"}


def test_progress_eta_extrapolates_the_rate_measured_since_the_first_update(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr(worker_side.time, "monotonic", lambda: clock[0])
    meter = jobs.Progress(10)
    meter.update(1, "first")  # t0: start-up time before this is not counted
    clock[0] += 2.0
    meter.update(3)  # 2 units in 2 s -> 1 s per unit, 7 left
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["done"] for e in events] == [1, 3]
    assert events[0]["eta_s"] is None and events[0]["message"] == "first"
    assert events[1]["eta_s"] == pytest.approx(7.0)
    assert events[1]["fraction"] == pytest.approx(0.3)
    assert events[1]["message"] == "3/10"


def test_progress_min_interval_drops_updates_but_never_the_last(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(worker_side.time, "monotonic", lambda: clock[0])
    meter = jobs.Progress(4, min_interval=10.0)
    for done in range(1, 5):
        clock[0] += 1.0
        meter.update(done)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["done"] for e in events] == [1, 4]


def test_should_cancel_polls_the_cancel_file(tmp_path, monkeypatch):
    flag = tmp_path / "job.cancel"
    monkeypatch.setattr(worker_side, "_cancel_file", str(flag))
    monkeypatch.setattr(worker_side, "_cancel_flag", False)
    assert not jobs.should_cancel()
    flag.touch()
    assert jobs.should_cancel()


# ---------------------------------------------------------------------------------------
# Interpreter probe
# ---------------------------------------------------------------------------------------


def test_probe_reports_this_interpreters_packages_and_is_cached(monkeypatch):
    import scipy

    info = jobs.probe_interpreter(PY)
    assert info["error"] is None
    assert info["numpy"] == np.__version__
    assert info["scipy"] == scipy.__version__
    assert info["python"] == sys.version.split()[0]
    assert info["cuda"] is None  # not checked without check_torch

    def no_subprocess(*a, **k):
        raise AssertionError("the probe should have been cached")

    monkeypatch.setattr(interpreters.subprocess, "run", no_subprocess)
    assert jobs.probe_interpreter(PY) == info


def test_interpreter_without_numpy_is_refused_with_the_fix(tmp_path):
    fake = fake_python_without_numpy(tmp_path)
    info = jobs.probe_interpreter(fake)
    assert info["error"] is None and info["numpy"] is None and info["scipy"] is None
    assert info["python"] == sys.version.split()[0]
    with pytest.raises(jobs.JobError) as err:
        jobs.Job.start({"kind": "bake"}, fake, tmp_path / "logs")
    assert str(err.value) == (
        f"the job interpreter {fake} has no numpy: set Preferences > Neural ROM > Job Python "
        "(or the command line's --python, or $NEURAL_ROM_PYTHON), or install numpy/scipy there"
    )
    assert not (tmp_path / "logs").exists()  # refused before anything was written
    # Installing numpy/scipy into that interpreter fixes it without restarting Blender.
    fake.with_suffix(".nonumpy").unlink()
    assert jobs.check_interpreter(fake, ("numpy", "scipy"))["numpy"] == np.__version__


def test_missing_interpreter_is_a_clear_error(tmp_path):
    missing = tmp_path / "no" / "python3"
    assert jobs.probe_interpreter(missing)["error"] == "no such file"
    with pytest.raises(
        jobs.JobError,
        match=r"could not be run \(no such file\).*Preferences > Neural ROM > Job Python",
    ):
        jobs.check_interpreter(missing)


def test_jobs_run_with_neural_rom_python_when_no_interpreter_is_given(tmp_path, monkeypatch):
    fake = fake_python_without_numpy(tmp_path, missing=())  # a working Python at another path
    monkeypatch.setenv(jobs.PYTHON_ENV, str(fake))
    assert jobs.default_python() == str(fake)
    job = jobs.Job.start({"kind": "selftest", "steps": 2, "sleep": 0.0}, None, tmp_path / "logs")
    assert job.python == str(fake) and job.wait(timeout=60) == jobs.DONE
    assert f"--- neural_rom job {job.id}: {fake} " in job.log_path.read_text()
    monkeypatch.setenv(jobs.PYTHON_ENV, "")  # set but empty: this interpreter
    assert jobs.default_python() == sys.executable
    monkeypatch.delenv(jobs.PYTHON_ENV)
    assert jobs.default_python() == sys.executable


def test_a_train_job_needs_torch_only_for_a_method_that_trains_with_it(tmp_path):
    from neural_rom.core import registry

    no_torch = fake_python_without_numpy(tmp_path, missing=("torch",))
    for method in registry.methods():
        spec = {"kind": "train", "method": method.name}
        needs = jobs.requirements(spec)
        assert needs[:2] == ("numpy", "scipy") and ("torch" in needs) == method.needs_torch
        if method.needs_torch:
            with pytest.raises(jobs.JobError, match=f"{no_torch} has no torch: set Prefer"):
                jobs.check_interpreter(no_torch, needs)
        else:
            assert jobs.check_interpreter(no_torch, needs)["torch"] is None
    assert not registry.get("linear").needs_torch and registry.get("autoencoder").needs_torch
    # What the spec says it needs wins; an unknown method is left to the worker to name.
    assert jobs.requirements({"kind": "train", "method": "linear", "needs": ["torch"]}) == (
        "torch",
    )
    assert jobs.requirements({"kind": "train", "method": "nonesuch"}) == ("numpy", "scipy")


def test_an_uncreatable_log_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(jobs.JobError, match="cannot create the job folder .*cache directory"):
        jobs.Job.start({"kind": "selftest"}, PY, blocker / "logs")


# ---------------------------------------------------------------------------------------
# The runner with the selftest worker
# ---------------------------------------------------------------------------------------


def test_job_streams_progress_metrics_and_warnings_and_finishes(tmp_path):
    job = selftest(tmp_path, steps=6, warn_at=2, noise=True)
    events = []
    assert job.wait(timeout=30, on_event=events.append) == jobs.DONE
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and kinds[-1] == "done"
    progress = [e for e in events if e["event"] == "progress"]
    assert [e["done"] for e in progress] == [1, 2, 3, 4, 5, 6]
    assert all(e["total"] == 6 for e in progress)
    assert [e["fraction"] for e in progress] == pytest.approx([k / 6 for k in range(1, 7)])
    assert progress[0]["eta_s"] is None and progress[-1]["eta_s"] == pytest.approx(0.0)
    assert all(e["eta_s"] >= 0 for e in progress[1:])
    assert job.metrics == {"step": 5, "loss": pytest.approx(1 / 6)}
    assert job.warnings == ["selftest: warning at step 2"]
    assert job.result == {"committed": 6, "steps": 6}
    assert (job.progress, job.returncode, job.eta_s) == (1.0, 0, 0.0)
    assert job.message.startswith("done in")
    assert job.heavy_modules == []  # the worker imported neither bpy nor torch
    # Prints from the job land in the log, not in the event stream.
    assert "selftest noise 5 {not json" in job.log_path.read_text()
    assert not [e for e in events if e["event"] == "output"]
    assert json.loads(job.spec_path.read_text())["cancel_file"] == str(job.cancel_path)


def test_poll_never_blocks_while_the_worker_is_busy(tmp_path):
    job = selftest(tmp_path, steps=3, sleep=0.5)
    worst = 0.0
    for _ in range(20):
        t = time.perf_counter()
        job.poll()
        worst = max(worst, time.perf_counter() - t)
        time.sleep(0.01)
    assert worst < 0.2  # each worker step sleeps 0.5 s: poll does not wait for it
    job.cancel(force=True)
    job.wait(timeout=10)


def test_cancel_mid_job_stops_at_a_safe_point_and_keeps_the_committed_steps(tmp_path):
    commit = tmp_path / "commit.txt"
    job = selftest(tmp_path, steps=500, sleep=0.01, commit_file=str(commit))
    wait_for_progress(job, 5)
    job.cancel()
    assert job.wait(timeout=20) == jobs.CANCELLED
    assert job.returncode == jobs.EXIT_CANCELLED
    assert job.result["cancelled"] is True
    lines = committed_lines(commit)
    assert 5 <= len(lines) < 500
    assert lines == list(range(len(lines)))
    assert job.result["committed"] == len(lines)  # the report matches what is on disk
    assert "committed" in job.message
    assert not job.cancel_path.exists()


def test_cancel_by_file_alone_works_without_a_signal(tmp_path):
    # Windows has no SIGINT for a child: the cancel file must suffice.
    job = selftest(tmp_path, steps=500, sleep=0.01)
    wait_for_progress(job, 3)
    job.cancel_path.touch()
    assert job.wait(timeout=20) == jobs.CANCELLED
    assert job.returncode == jobs.EXIT_CANCELLED


def test_kill_9_mid_job_fails_with_the_log_path_and_keeps_the_committed_prefix(tmp_path):
    commit = tmp_path / "commit.txt"
    job = selftest(tmp_path, steps=500, sleep=0.01, commit_file=str(commit))
    wait_for_progress(job, 4)
    os.kill(job.pid, signal.SIGKILL)
    assert job.wait(timeout=20) == jobs.FAILED
    assert job.crashed
    assert str(job.log_path) in job.message
    assert "SIGKILL" in job.message
    lines = committed_lines(commit)
    assert len(lines) >= 4 and lines == list(range(len(lines)))


def test_a_hard_crash_reports_the_log_and_its_last_lines(tmp_path):
    job = selftest(tmp_path, steps=5, crash_at=2)
    assert job.wait(timeout=20) == jobs.FAILED
    assert job.crashed and job.returncode == 70
    assert f"see the log {job.log_path}" in job.message
    assert "simulated crash at step 2" in job.message  # the last stderr lines


def test_a_bug_in_the_job_is_a_crash_with_its_traceback_in_the_log(tmp_path):
    job = selftest(tmp_path, steps=5, raise_at=1)
    assert job.wait(timeout=20) == jobs.FAILED
    assert job.crashed and job.returncode == jobs.EXIT_CRASH
    assert "RuntimeError: selftest: simulated bug at step 1" in job.message
    assert str(job.log_path) in job.message
    assert "Traceback (most recent call last)" in job.log_path.read_text()


def test_a_user_error_is_reported_with_its_message(tmp_path):
    job = selftest(tmp_path, steps=5, error_at=3)
    assert job.wait(timeout=20) == jobs.FAILED
    assert not job.crashed and job.returncode == jobs.EXIT_USER_ERROR
    assert job.message.startswith("selftest: simulated user error at step 3: change the input")
    assert job.error["type"] == "NeuralRomError"
    assert job.done_units == 3


def test_unknown_kind_names_the_known_ones(tmp_path):
    job = jobs.Job.start({"kind": "nonsense"}, PY, tmp_path)
    assert job.wait(timeout=20) == jobs.FAILED
    known = ", ".join(sorted(jobs.JOBS))  # every kind the worker runs, by name
    assert {"bake", "train", "simulate", "compare", "tetrahedralize"} <= set(jobs.JOBS)
    assert f"unknown job kind 'nonsense' (known: {known})" in job.message


def test_the_job_table_takes_the_data_jobs_from_the_kind_records(monkeypatch):
    """One table (issue 29): the built-in data kinds' data jobs are what their records'
    ``handler`` names (a record changed, the table follows), none of them also in
    OWN_JOBS; a kind registered outside the package adds none (the worker finds its
    handler through the spec's data_kind and kind_origin)."""
    from neural_rom.core import registry

    built = [k for k in registry.kinds() if k.data_job]
    assert [k.data_job for k in built] == ["bake", "cloth_bake", "face_setup"]
    assert list(jobs.JOBS) == [k.data_job for k in built] + list(jobs.OWN_JOBS)
    for k in built:
        assert jobs.JOBS[k.data_job] == k.handler and k.data_job not in jobs.OWN_JOBS
    monkeypatch.setattr(registry.get_kind("fem"), "handler", "core.jobs.selftest:run_selftest")
    assert jobs.JOBS["bake"] == "core.jobs.selftest:run_selftest"
    monkeypatch.undo()
    clay = registry.DataKind(
        "clay", "Clay", "clay", data_job="clay_bake", handler="core.jobs.selftest:run_selftest"
    )
    registry.register_kind(clay)
    try:
        assert "clay_bake" not in jobs.JOBS and len(jobs.JOBS) == len(built) + len(jobs.OWN_JOBS)
    finally:
        registry.unregister_kind("clay")


def test_the_worker_keeps_its_old_names_of_the_handlers():
    """Scripts that used the handlers where they were before they moved to core/jobs/<kind>.py
    (``worker.run_bake``, ``worker.HANDLERS``) get the same functions; other names stay
    missing."""
    from neural_rom import worker
    from neural_rom.core.jobs.bake import run_bake

    assert worker.run_bake is run_bake
    assert worker.HANDLERS.keys() == jobs.JOBS.keys()
    assert worker.HANDLERS["bake"] is run_bake
    with pytest.raises(AttributeError, match="has no attribute 'run_nonsense'"):
        worker.run_nonsense  # noqa: B018 (the attribute access is the test)


def test_a_hung_worker_is_killed_after_the_cancel_timeout(tmp_path):
    job = selftest(tmp_path, steps=5, hang_at=1)
    job.cancel_timeout_s = 0.5
    wait_for_progress(job, 1)
    time.sleep(0.2)
    job.cancel()
    assert job.wait(timeout=20) == jobs.CANCELLED
    assert "terminated" in job.message
    assert job.result == {"cancelled": True}


def test_worker_boots_from_a_folder_with_any_name(tmp_path):
    copy = tmp_path / "bl_ext.user_default.neural rom copy"
    shutil.copytree(ROOT / "core", copy / "core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("__init__.py", "worker.py"):
        shutil.copy2(ROOT / name, copy / name)
    spec = tmp_path / "job.spec.json"
    spec.write_text(json.dumps({"kind": "selftest", "steps": 2, "sleep": 0}))
    proc = subprocess.run(
        [PY, str(copy / "worker.py"), str(spec)],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[-1]["event"] == "done" and events[-1]["result"]["steps"] == 2
    assert f"package={copy}" in proc.stderr


def test_worker_rejects_a_bad_invocation_and_an_unreadable_spec(tmp_path):
    proc = subprocess.run(
        [PY, str(ROOT / "worker.py")], capture_output=True, check=False, text=True, timeout=60
    )
    assert proc.returncode == 2 and "usage" in proc.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = subprocess.run(
        [PY, str(ROOT / "worker.py"), str(bad)],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    event = json.loads(proc.stdout.splitlines()[-1])
    assert event["event"] == "error" and "cannot read the job spec" in event["message"]


# ---------------------------------------------------------------------------------------
# Real bakes through the runner
# ---------------------------------------------------------------------------------------


def bake_job_spec(tmp_path, *, frames=3, variants=1, seed=0, **extra) -> dict:
    from neural_rom.core import bake as core_bake
    from neural_rom.core.data.meshfile import write_tetmesh
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.geometry.tetmesh import TetMesh
    from neural_rom.core.physics.fem import PRESETS, Material

    X, T = grid_tetmesh((0.3, 0.1, 0.1), (3, 1, 1))
    mesh = TetMesh(X, T, 0)
    mesh_path = tmp_path / "tets.npz"
    write_tetmesh(mesh_path, mesh)
    pinned = np.flatnonzero(X[:, 0] < 1e-9).tolist()
    spec = core_bake.BakeSpec(
        material=Material(**PRESETS["rubber"]).to_dict(),
        scenario=core_bake.default_scenario("random_pokes"),
        frames=frames,
        pinned=pinned,
        seed=seed,
        variants=variants,
    )
    return {
        "kind": "bake",
        "mesh": str(mesh_path),
        "spec": spec.to_dict(),
        "out_dir": str(tmp_path / "bakes"),
        "name": "cube",
        "shard": [0, 1],
        **extra,
    }


def test_a_real_bake_runs_end_to_end_through_the_runner(tmp_path):
    from neural_rom.core.data.cache import BakeCache

    job = jobs.Job.start(bake_job_spec(tmp_path, frames=3), PY, tmp_path / "logs")
    events = []
    assert job.wait(timeout=120, on_event=events.append) == jobs.DONE, job.message
    path = tmp_path / "bakes" / "cube_v000.nrbake"
    assert job.result["paths"] == [str(path)]
    progress = [e for e in events if e["event"] == "progress"]
    assert progress and progress[-1]["fraction"] == pytest.approx(1.0)
    assert job.heavy_modules == []  # a bake never imports torch or bpy
    cache = BakeCache.open(path)
    assert job.result["frames"][str(path)] == cache.n_frames >= 3
    positions = np.asarray(cache.channel("positions"))
    assert positions.shape[0] == cache.n_frames and np.isfinite(positions).all()


def test_kill_9_during_a_real_bake_keeps_its_committed_prefix_readable(tmp_path):
    from neural_rom.core.data.cache import BakeCache

    job = jobs.Job.start(bake_job_spec(tmp_path, frames=400), PY, tmp_path / "logs")
    wait_for_progress(job, 3, timeout=120)
    os.kill(job.pid, signal.SIGKILL)
    assert job.wait(timeout=30) == jobs.FAILED
    assert str(job.log_path) in job.message and "SIGKILL" in job.message
    cache = BakeCache.open(tmp_path / "bakes" / "cube_v000.nrbake")
    assert 3 <= cache.n_frames < 401
    assert np.isfinite(np.asarray(cache.channel("positions"))).all()


def test_cancel_during_a_real_bake_reports_the_committed_frames(tmp_path):
    from neural_rom.core.data.cache import BakeCache

    job = jobs.Job.start(bake_job_spec(tmp_path, frames=400), PY, tmp_path / "logs")
    wait_for_progress(job, 2, timeout=120)
    job.cancel()
    assert job.wait(timeout=60) == jobs.CANCELLED, job.message
    path = tmp_path / "bakes" / "cube_v000.nrbake"
    cache = BakeCache.open(path)
    assert job.result["frames"][str(path)] == cache.n_frames
    assert 2 <= cache.n_frames < 401
    assert job.result["paths"] == [str(path)]


def test_a_bake_of_a_missing_tet_mesh_is_a_user_error(tmp_path):
    spec = bake_job_spec(tmp_path)
    spec["mesh"] = str(tmp_path / "gone.npz")
    job = jobs.Job.start(spec, PY, tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.FAILED
    assert not job.crashed
    assert "no tet mesh at" in job.message and "Tetrahedralize" in job.message


# ---------------------------------------------------------------------------------------
# Blender side (addon/jobs.py); the PyPI bpy runs in background mode
# ---------------------------------------------------------------------------------------


def test_background_start_job_runs_to_the_end_printing_progress(addon, tmp_path, capsys):
    from neural_rom.addon import jobs as addon_jobs

    results = []
    spec = {"kind": "selftest", "steps": 4, "sleep": 0.01, "log_dir": str(tmp_path)}
    job_id = addon_jobs.start_job(addon.bpy.context, spec, owner="Cube", on_done=results.append)
    out = capsys.readouterr().out
    assert results == [{"committed": 4, "steps": 4}]
    assert "[selftest Cube] started (log: " in out
    assert "100.0% step 4/4" in out
    assert addon_jobs.active_jobs() == []
    state = addon_jobs.last_job("Cube")
    assert (state.id, state.status, state.progress) == (job_id, "done", 1.0)
    assert addon_jobs.active_jobs(include_finished=True) == [state]


def test_background_failures_raise_with_the_log_path(addon, tmp_path):
    from neural_rom.addon import jobs as addon_jobs

    called = []
    spec = {"kind": "selftest", "steps": 4, "crash_at": 1, "log_dir": str(tmp_path)}
    with pytest.raises(jobs.JobError) as err:
        addon_jobs.start_job(addon.bpy.context, spec, owner="Cube", on_done=called.append)
    assert err.value.crashed and err.value.log_path in str(err.value)
    assert called == []  # a failed job records nothing
    assert addon_jobs.last_job("Cube").status == "failed"

    spec = {"kind": "selftest", "steps": 4, "error_at": 1, "log_dir": str(tmp_path)}
    with pytest.raises(jobs.JobError, match="simulated user error") as err:
        addon_jobs.start_job(addon.bpy.context, spec, owner="Cube")
    assert not err.value.crashed


def test_background_cancel_records_what_was_committed_then_raises(addon, tmp_path):
    from neural_rom.addon import jobs as addon_jobs

    results = []
    commit = tmp_path / "commit.txt"
    spec = {
        "kind": "selftest",
        "steps": 500,
        "sleep": 0.01,
        "commit_file": str(commit),
        "log_dir": str(tmp_path),
    }

    def cancel_when_started():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if commit.exists() and len(commit.read_text().splitlines()) >= 3:
                addon_jobs.cancel_job("Cube")
                return
            time.sleep(0.01)

    canceller = threading.Thread(target=cancel_when_started)
    canceller.start()
    with pytest.raises(JobCancelled):
        addon_jobs.start_job(addon.bpy.context, spec, owner="Cube", on_done=results.append)
    canceller.join()
    assert results and results[0]["cancelled"] is True
    assert results[0]["committed"] == len(committed_lines(commit)) >= 3
    assert addon_jobs.last_job("Cube").status == "cancelled"


def test_registry_polls_cancels_and_calls_on_done_in_the_polling_thread(addon, tmp_path):
    # The interactive path (what the modal monitor and the app timer run), driven by hand.
    from neural_rom.addon import jobs as addon_jobs
    from neural_rom.ui.operators import jobs as job_ui

    results, threads = [], []

    def on_done(result):
        results.append(result)
        threads.append(threading.get_ident())

    fast = jobs.Job.start({"kind": "selftest", "steps": 3, "sleep": 0.01}, PY, tmp_path)
    slow = jobs.Job.start({"kind": "selftest", "steps": 500, "sleep": 0.01}, PY, tmp_path)
    addon_jobs._track(fast, "Cube", on_done)
    addon_jobs._track(slow, "Suzanne", on_done)
    # One job per object: a second job for a busy object is refused.
    with pytest.raises(NeuralRomError, match="Suzanne already has a running selftest job"):
        addon_jobs.start_job(addon.bpy.context, {"kind": "selftest"}, owner="Suzanne")
    assert {s.owner for s in addon_jobs.active_jobs()} == {"Cube", "Suzanne"}
    text = addon_jobs.status_text()
    assert text.startswith("Neural ROM: ") and "Suzanne" in text and "Esc to cancel" in text
    bars, labels = [], []
    layout = SimpleNamespace(
        progress=lambda **kw: bars.append(kw), label=lambda **kw: labels.append(kw)
    )
    job_ui.draw_status_progress(SimpleNamespace(layout=layout), addon.bpy.context)
    assert labels == [{"text": "Neural ROM (Esc cancels):"}]
    assert [b["type"] for b in bars] == ["BAR", "BAR"]
    assert bars[1]["text"].startswith("selftest Suzanne ") and 0 <= bars[1]["factor"] <= 1

    finished = []
    deadline = time.monotonic() + 30
    while addon_jobs.any_running() and time.monotonic() < deadline:
        finished += addon_jobs.poll_jobs()
        if fast.finished and not slow.cancel_requested and slow.done_units >= 2:
            assert addon_jobs.cancel_job("Suzanne") == 1
        time.sleep(0.01)
    assert [(s.owner, s.status) for s in finished] == [("Cube", "done"), ("Suzanne", "cancelled")]
    assert results[0] == {"committed": 3, "steps": 3}
    assert results[1]["cancelled"] is True and results[1]["committed"] >= 2
    assert threads == [threading.get_ident()] * 2  # Blender's main thread, never the reader
    assert addon_jobs.active_jobs() == [] and addon_jobs.status_text() == ""
    assert addon_jobs.cancel_job("Suzanne") == 0
    # Each outcome is shown to the user once (by the monitor), then kept for the panel.
    assert [s.status for s in addon_jobs.take_unreported()] == ["done", "cancelled"]
    assert addon_jobs.take_unreported() == []
    assert addon_jobs.last_job("Suzanne").status == "cancelled"
    assert addon_jobs._tick() is None  # the app timer stops once nothing runs


def test_on_done_errors_become_the_jobs_message(addon, tmp_path):
    from neural_rom.addon import jobs as addon_jobs

    def broken(result):
        raise KeyError("the object was deleted")

    spec = {"kind": "selftest", "steps": 2, "sleep": 0, "log_dir": str(tmp_path)}
    with pytest.raises(NeuralRomError, match="could not record the result on Cube"):
        addon_jobs.start_job(addon.bpy.context, spec, owner="Cube", on_done=broken)
    assert addon_jobs.last_job("Cube").status == "failed"


def test_cancel_operator_reports_when_nothing_runs(addon, tmp_path):
    from neural_rom.addon import jobs as addon_jobs

    bpy = addon.bpy
    assert bpy.ops.neural_rom.cancel_job(job="Cube") == {"CANCELLED"}
    job = jobs.Job.start({"kind": "selftest", "steps": 500, "sleep": 0.01}, PY, tmp_path)
    addon_jobs._track(job, "Cube", None)
    assert bpy.ops.neural_rom.cancel_job(job="Cube") == {"FINISHED"}
    assert job.wait(timeout=20) == jobs.CANCELLED


def test_the_preferences_interpreter_is_checked_before_starting(addon, tmp_path):
    from neural_rom.addon import jobs as addon_jobs

    fake = fake_python_without_numpy(tmp_path)
    addon.prefs.python_path = str(fake)
    spec = {"kind": "selftest", "log_dir": str(tmp_path / "logs")}
    with pytest.raises(
        jobs.JobError, match=r"has no numpy: set Preferences > Neural ROM > Job Python"
    ):
        addon_jobs.start_job(addon.bpy.context, spec, owner="Cube")
    assert addon_jobs.active_jobs(include_finished=True) == []


def test_the_job_python_is_the_cli_s_then_the_preferences_then_the_environment_s(
    addon, monkeypatch
):
    from neural_rom.addon import prefs

    monkeypatch.delenv(jobs.PYTHON_ENV, raising=False)
    assert prefs.job_python() == sys.executable
    monkeypatch.setenv(jobs.PYTHON_ENV, "/env/bin/python")
    assert prefs.job_python() == "/env/bin/python"
    addon.prefs.python_path = "/prefs/bin/python"
    assert prefs.job_python() == "/prefs/bin/python"
    with prefs.job_python_override("/cli/bin/python"):
        assert prefs.job_python() == "/cli/bin/python"
    with prefs.job_python_override(None):
        assert prefs.job_python() == "/prefs/bin/python"
    assert prefs.job_python() == "/prefs/bin/python"


def test_job_monitor_needs_a_window(addon):
    # Background Blender has no window: the monitor declines and start_job blocks instead.
    with pytest.raises(RuntimeError, match="poll"):
        addon.bpy.ops.neural_rom.job_monitor("INVOKE_DEFAULT")


def test_child_env_passes_this_interpreters_paths_but_not_blenders_bpy_scripts(
    tmp_path, monkeypatch
):
    wheels = tmp_path / "extensions" / ".local" / "site-packages"
    scripts = tmp_path / "scripts" / "modules"
    (scripts / "bpy").mkdir(parents=True)
    (scripts / "bpy" / "__init__.py").write_text("from _bpy import *\n")
    wheels.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(wheels), str(scripts)])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    paths = interpreters.child_env(PY)["PYTHONPATH"].split(os.pathsep)
    assert str(wheels) in paths and str(scripts) not in paths
    other = fake_python_without_numpy(tmp_path)  # another interpreter: nothing is passed
    assert "PYTHONPATH" not in interpreters.child_env(str(other))
    assert interpreters.child_env(PY)["PYTHONUNBUFFERED"] == "1"


def test_job_monitor_modal_esc_cancels_and_timer_reports_the_end(addon, tmp_path):
    """The monitor's modal handler with the events a window sends (PyPI bpy has none): Esc
    asks every running job to stop, timer ticks poll until the job ended, the outcome is
    reported once and the timer is removed; other events pass through."""
    from neural_rom.addon import jobs as addon_jobs
    from neural_rom.ui.operators import jobs as job_ui

    job = jobs.Job.start({"kind": "selftest", "steps": 500, "sleep": 0.01}, PY, tmp_path)
    addon_jobs._track(job, "Cube", None)
    removed, reports = [], []
    ctx = SimpleNamespace(window_manager=SimpleNamespace(event_timer_remove=removed.append))
    op = SimpleNamespace(_timer="timer")
    op.report = lambda kind, msg: reports.append((kind, msg))
    for name in ("modal", "_report", "_stop"):
        setattr(op, name, getattr(job_ui.NEURAL_ROM_OT_job_monitor, name).__get__(op))

    def event(kind, value="PRESS"):
        return SimpleNamespace(type=kind, value=value)

    deadline = time.monotonic() + 20
    while job.done_units < 2 and time.monotonic() < deadline:
        addon_jobs.poll_jobs()
        time.sleep(0.01)
    assert op.modal(ctx, event("MOUSEMOVE", "NOTHING")) == {"PASS_THROUGH"}
    assert op.modal(ctx, event("ESC")) == {"RUNNING_MODAL"}
    assert reports[-1][1] == "Neural ROM: cancelling 1 job(s) at the next safe point"
    out = None
    while time.monotonic() < deadline:
        out = op.modal(ctx, event("TIMER", "NOTHING"))
        if out == {"FINISHED"}:
            break
        time.sleep(0.02)
    assert out == {"FINISHED"} and removed == ["timer"] and op._timer is None
    assert reports[-1][0] == {"WARNING"} and "selftest of Cube" in reports[-1][1]
    assert addon_jobs.last_job("Cube").status == "cancelled"
    assert 2 <= job.done_units < 500  # stopped early
    assert not addon_jobs.any_running()
