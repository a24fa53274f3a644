"""Bakes started again and bakes in parallel, through the real worker: a bake killed with
SIGKILL at random instants and started again, and the variants of a bake baked in
parallel processes (their parent or one of them killed), equal an uninterrupted serial bake
bit for bit; a bake or a linear training pointed at a folder that cannot be written ends in
the project's :class:`WriteError` saying what to do.

Bit for bit means every channel of every frame, compared with ``np.array_equal``: a bake
is deterministic given its spec, and resuming restores the frame-level state the next
frame depends on (positions, velocities and the previous velocities of the predictor).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import re
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from neural_rom.core import bake as bk
from neural_rom.core import jobs
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.data.meshfile import write_tetmesh
from neural_rom.core.errors import NeuralRomError, WriteError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.geometry.tetmesh import TetMesh
from neural_rom.core.physics.fem import Material

PY = sys.executable
#: A frame of this mesh takes 5-11 ms since the fast steps of issue 10 (30-60 ms before):
#: the killed bake has 400 frames, 2-4.5 s, long enough to be killed at three random
#: instants, short enough for a test.
SHAPE, CELLS = (0.4, 0.1, 0.1), (8, 2, 2)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    X, T = grid_tetmesh(SHAPE, CELLS)
    write_tetmesh(root / "tets.npz", TetMesh(X, T, 0))
    pinned = np.flatnonzero(X[:, 0] < 1e-9).tolist()

    def spec(**kw) -> bk.BakeSpec:
        base = dict(
            material=Material(youngs_modulus=2e5, poisson_ratio=0.3, density=1000.0).to_dict(),
            scenario=bk.default_scenario("random_pokes"),
            frames=60,
            pinned=pinned,
            seed=11,
        )
        return bk.BakeSpec(**{**base, **kw})

    return SimpleNamespace(root=root, mesh=SimpleNamespace(X=X, T=T), spec=spec)


def job_spec(setup, spec: bk.BakeSpec, out: Path, **extra) -> dict:
    return {
        "kind": "bake",
        "mesh": str(setup.root / "tets.npz"),
        "spec": spec.to_dict(),
        "out_dir": str(out),
        "name": "b",
        **extra,
    }


def reference(setup, spec: bk.BakeSpec, out: Path) -> list[Path]:
    """The uninterrupted bake, serial, in this process."""
    return bk.bake_variants(setup.mesh, spec, out, "b")


def assert_bit_identical(ref: list[Path], out: Path) -> None:
    for path in ref:
        a, b = BakeCache.open(path), BakeCache.open(out / path.name)
        assert b.status == "complete" and b.n_frames == a.n_frames
        assert sorted(b.channels) == sorted(a.channels)
        for name in a.channels:
            assert np.array_equal(a.channel(name), b.channel(name)), (path.name, name)


def committed(path: Path) -> int:
    return BakeCache.open(path).n_frames if path.exists() else 0


def wait_until(job: jobs.Job, test, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        job.poll()
        assert job.state == jobs.RUNNING, job.message
        assert time.monotonic() < deadline, f"timed out: {job!r}"
        time.sleep(0.01)


def test_a_bake_killed_at_random_instants_and_started_again_equals_an_uninterrupted_one(
    setup, tmp_path
):
    spec = setup.spec(frames=400)
    ref = reference(setup, spec, tmp_path / "ref")
    out, path = tmp_path / "out", tmp_path / "out" / "b_v000.nrbake"
    rng = np.random.default_rng(20240611)
    before = 0
    for _ in range(3):
        job = jobs.Job.start(job_spec(setup, spec, out), PY, tmp_path / "logs")
        # a random instant after this run committed a frame of its own
        wait_until(job, lambda b=before: committed(path) > b)
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(job.pid, signal.SIGKILL)
        assert job.wait(timeout=30) == jobs.FAILED
        now = committed(path)
        assert before < now < spec.frames + 1, "the kill must land inside the bake"
        if before:  # the run started after the last kill resumed, and said so
            assert f"b_v000.nrbake resumes at frame {before}" in job.log_tail(200)
        before = now
    events = []
    job = jobs.Job.start(job_spec(setup, spec, out), PY, tmp_path / "logs")
    assert job.wait(timeout=120, on_event=events.append) == jobs.DONE, job.message
    assert job.result["resumed"] == {str(path): before}
    first = next(e for e in events if e["event"] == "progress")
    assert first["message"] == f"resumes at frame {before}" and first["done"] == before
    assert_bit_identical(ref, out)


def test_a_complete_bake_started_again_is_kept_and_restart_bakes_it_again(setup, tmp_path):
    spec = setup.spec(frames=3)
    out, path = tmp_path / "out", tmp_path / "out" / "b_v000.nrbake"
    job = jobs.Job.start(job_spec(setup, spec, out), PY, tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.DONE, job.message
    stamp = (path / "commit.json").stat().st_mtime_ns
    job = jobs.Job.start(job_spec(setup, spec, out), PY, tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.DONE and job.result["kept"] == [str(path)]
    assert "b_v000.nrbake is kept: it is complete (4 frames)" in job.log_tail(50)
    assert (path / "commit.json").stat().st_mtime_ns == stamp
    job = jobs.Job.start(job_spec(setup, spec, out, restart=True), PY, tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.DONE and job.result["kept"] == []
    assert (path / "commit.json").stat().st_mtime_ns != stamp
    assert BakeCache.open(path).n_frames == 4


def test_another_spec_or_mesh_cannot_resume_and_says_why(setup, tmp_path):
    spec = setup.spec(frames=4)
    path = bk.bake(setup.mesh, spec, tmp_path / "x.nrbake")
    other = setup.spec(frames=4, seed=12)
    assert bk.resume_point(setup.mesh, other, path).action == "mismatch"
    with pytest.raises(NeuralRomError, match=r"other settings \(seed\).*Start Over / --restart"):
        bk.bake(setup.mesh, other, path, resume=True)
    moved = SimpleNamespace(X=setup.mesh.X + 1.0, T=setup.mesh.T)
    with pytest.raises(NeuralRomError, match="another tet mesh"):
        bk.bake(moved, spec, path, resume=True)
    said = []
    bk.bake(setup.mesh, other, path, resume=True, overwrite=True, say=said.append)
    assert said == ["x.nrbake starts over: it was baked with other settings (seed)"]
    assert BakeCache.open(path).meta["seed"] == 12
    point = bk.resume_point(setup.mesh, other, path)
    assert (point.action, point.frames) == ("complete", 5)


def test_parallel_variants_equal_serial_ones_and_survive_killed_processes(setup, tmp_path):
    """Three variants in two processes: the parent worker is SIGKILLed (its children stop
    after their frame), then one child is (the others go on); each start resumes; the
    result equals the serial bake of the same seed bit for bit."""
    spec = setup.spec(variants=3, frames=30)
    ref = reference(setup, spec, tmp_path / "ref")
    out, logs = tmp_path / "out", tmp_path / "logs"
    paths = [out / p.name for p in ref]

    job = jobs.Job.start(job_spec(setup, spec, out, processes=2), PY, logs)
    wait_until(job, lambda: sum(map(committed, paths)) >= 10)
    os.kill(job.pid, signal.SIGKILL)
    assert job.wait(timeout=30) == jobs.FAILED

    # Started again at once: the orphaned children still finish their frame, and the
    # writer's lock keeps the new ones off their bakes until they stopped.
    events = []
    job = jobs.Job.start(job_spec(setup, spec, out, processes=2), PY, logs)
    child = re.compile(r"variant (\d+): worker pid (\d+)")
    wait_until(job, lambda: len(child.findall(job.log_tail(400))) >= 2)
    k, pid = next((int(k), int(p)) for k, p in child.findall(job.log_tail(400)))
    environ = Path(f"/proc/{pid}/environ")  # Linux: each child runs one BLAS thread
    if environ.exists():
        assert {b"OMP_NUM_THREADS=1", b"OPENBLAS_NUM_THREADS=1", b"MKL_NUM_THREADS=1"} <= set(
            environ.read_bytes().split(b"\0")
        )
    wait_until(job, lambda: committed(paths[k]) >= 2)
    os.kill(pid, signal.SIGKILL)
    assert job.wait(timeout=120, on_event=events.append) == jobs.FAILED
    assert job.crashed and f"variant {k}: the job worker crashed (killed by signal SIGKILL)" in (
        job.message
    )
    assert "every committed frame is kept" in job.message
    others = [p for j, p in enumerate(paths) if j != k]
    assert all(BakeCache.open(p).status == "complete" for p in others)  # they went on
    assert 2 <= committed(paths[k]) < spec.frames + 1
    progress = [e for e in events if e["event"] == "progress"]
    assert {e["total"] for e in progress} == {3 * (spec.frames + 1)}  # one bar for all
    assert [e["done"] for e in progress] == sorted(e["done"] for e in progress)
    assert "3 variants in 2 processes" in progress[-1]["message"]
    assert any(e["event"] == "metric" and "variant" in e["values"] for e in events)

    job = jobs.Job.start(job_spec(setup, spec, out, processes=2), PY, logs)
    assert job.wait(timeout=120) == jobs.DONE, job.message
    assert list(job.result["resumed"]) == [str(paths[k])]
    assert sorted(job.result["kept"]) == sorted(map(str, others))
    assert job.result["paths"] == [str(p) for p in paths]
    assert_bit_identical(ref, out)


def test_cancel_reaches_every_child_and_keeps_their_frames(setup, tmp_path):
    spec = setup.spec(variants=2, frames=400)
    out = tmp_path / "out"
    job = jobs.Job.start(job_spec(setup, spec, out, processes=2), PY, tmp_path / "logs")
    paths = [bk.variant_path(out, "b", k) for k in range(2)]
    wait_until(job, lambda: min(map(committed, paths)) >= 2)
    job.cancel()
    assert job.wait(timeout=60) == jobs.CANCELLED, job.message
    for path in paths:
        cache = BakeCache.open(path)
        assert cache.status == "cancelled" and 2 <= cache.n_frames < 401
        assert job.result["frames"][str(path)] == cache.n_frames
    assert job.result["paths"] == [str(p) for p in paths]


# ---------------------------------------------------------------------------------------
# Folders that cannot be written. The tests run as root here, and root writes through
# permission bits, so a chmod proves nothing: a path under a regular file fails for
# anyone, and a read-only file system (EROFS, what a read-only mount answers even root) is
# simulated by refusing every creation under one folder at the os level.
# ---------------------------------------------------------------------------------------

FIX = "choose a folder you can write to"


@pytest.fixture()
def read_only(tmp_path, monkeypatch):
    """A folder whose contents cannot be created or written (EROFS), like a read-only mount."""
    folder = tmp_path / "ro"
    folder.mkdir()
    root = str(folder)

    def refuse(path):
        if os.fspath(path).startswith(root):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    real_mkdir, real_os_open, real_open = os.mkdir, os.open, builtins.open

    def mkdir(path, *a, **kw):
        refuse(path)
        return real_mkdir(path, *a, **kw)

    def os_open(path, flags, *a, **kw):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real_os_open(path, flags, *a, **kw)

    def open_(file, mode="r", *a, **kw):
        if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+"):
            refuse(file)
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    return folder


@pytest.fixture()
def under_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    return tmp_path / "notes.txt" / "cache"


@pytest.mark.parametrize("where", ["read_only", "under_a_file"])
def test_a_bake_into_a_folder_that_cannot_be_written_says_what_to_do(setup, where, request):
    folder = request.getfixturevalue(where)
    spec = setup.spec(frames=2)
    with pytest.raises(WriteError, match=f"cannot write the bake x.nrbake to .*{FIX}"):
        bk.bake(setup.mesh, spec, folder / "x.nrbake")
    with pytest.raises(WriteError, match=f"cannot write bakes to .*{FIX}"):
        bk.bake_variants(setup.mesh, spec, folder / "bakes", "b")
    assert isinstance(WriteError("x"), OSError)  # code catching OSError still catches it


@pytest.mark.parametrize("where", ["read_only", "under_a_file"])
def test_a_linear_training_into_a_folder_that_cannot_be_written_says_so_before_training(
    setup, tmp_path, where, request
):
    from neural_rom.core import registry

    bakes = reference(setup, setup.spec(frames=6, variants=2), tmp_path / "bakes")
    folder = request.getfixturevalue(where)
    calls = []
    with pytest.raises(WriteError, match=f"cannot write the model to .*{FIX}"):
        registry.get("linear").trainer_function()(
            bakes, folder / "m.nrmodel", progress=lambda *a: calls.append(a)
        )
    assert calls == []  # refused before any work
    with pytest.raises(WriteError, match=f"cannot write training checkpoints to .*{FIX}"):
        registry.get("linear").trainer_function()(
            bakes, tmp_path / "m.nrmodel", checkpoint_dir=folder / "ckpt"
        )


def test_an_atomic_write_into_a_read_only_folder_is_a_write_error(read_only):
    from neural_rom.core.data.files import write_atomic, write_npz

    with pytest.raises(WriteError, match="cannot write the file .*m.npz \\(Read-only"):
        write_npz(read_only / "m.npz", {"a": np.zeros(2)})
    with pytest.raises(WriteError, match="Read-only file system"):
        write_atomic(read_only / "x.json", b"{}")
    assert list(read_only.iterdir()) == []
