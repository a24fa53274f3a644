"""Tetrahedralize as a worker job, without Blender: core.tetjob meshes a world surface into
local space, the worker's "tetrahedralize" handler runs it in its own process, and a cancel
during TetGen (which has no safe point) or a crash of the worker leaves no result."""

import os
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from neural_rom.core import jobs
from neural_rom.core.errors import MeshError
from neural_rom.core.jobs import tetrahedralize as tetjob

PY = sys.executable


def box_surface(size=1.0):
    """A closed, outward-oriented cube surface: 8 vertices, 12 triangles."""
    V = size * np.array(
        [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]],
        dtype=float,
    )
    F = np.array(
        [
            [0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4],
            [1, 2, 6], [1, 6, 5], [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7],
        ]
    )  # fmt: skip
    return V, F


def uv_sphere(n: int):
    """A closed UV sphere of radius 1 with about 2 n^2 vertices."""
    th = np.linspace(0, np.pi, n)[1:-1]
    ph = np.linspace(0, 2 * np.pi, 2 * n, endpoint=False)
    ring = np.stack(
        [np.outer(np.sin(th), np.cos(ph)), np.outer(np.sin(th), np.sin(ph)),
         np.outer(np.cos(th), np.ones_like(ph))], axis=-1,
    ).reshape(-1, 3)  # fmt: skip
    V = np.vstack([[0, 0, 1], ring, [0, 0, -1]])
    m, rows, F = len(ph), len(th), []
    for j in range(m):
        F.append([0, 1 + j, 1 + (j + 1) % m])
    for i in range(rows - 1):
        for j in range(m):
            a, b = 1 + i * m + j, 1 + i * m + (j + 1) % m
            F += [[a, a + m, b], [b, a + m, b + m]]
    last, base = len(V) - 1, 1 + (rows - 1) * m
    for j in range(m):
        F.append([base + j, last, base + (j + 1) % m])
    return V, np.array(F)


def placement():
    """A matrix_world: scale 2, rotated about Z, moved."""
    c, s = np.cos(0.3), np.sin(0.3)
    M = np.eye(4)
    M[:3, :3] = 2.0 * np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    M[:3, 3] = [1.0, -2.0, 0.5]
    return M


def job_spec(folder: Path, *, embedded=False, edge=0.3, **kw) -> dict:
    return {
        "kind": "tetrahedralize",
        "name": "Box",
        "folder": str(folder),
        "embedded": embedded,
        "target_edge_length": edge,
        "quality": 2.0,
        "cage_resolution": 6,
        **kw,
    }


def test_mesh_surface_is_stored_in_local_space_and_round_trips(tmp_path):
    V_local, F = box_surface()
    M = placement()
    V = V_local @ M[:3, :3].T + M[:3, 3]
    r = tetjob.mesh_surface(
        V, F, M, name="Box", embedded=False, target_edge_length=0.5, quality=2.0, cage_resolution=6
    )
    assert r.embedding is None and r.mesh.n_surface_inputs == 8
    np.testing.assert_allclose(r.mesh.X[:8], V_local, atol=1e-12)  # the render vertices, local
    assert r.quality["min_radius_ratio"] > 0
    tetjob.write_result(tmp_path, r)
    back = tetjob.read_result(tmp_path)
    assert back.mesh.hash() == r.mesh.hash() and back.embedding is None
    assert back.quality == pytest.approx(r.quality)
    with pytest.raises(MeshError, match="left no result.*run Tetrahedralize again"):
        tetjob.read_result(tmp_path / "empty")


def test_an_open_surface_rides_on_a_cage():
    V, F = box_surface()
    F = F[:-2]  # one face open: not closed
    r = tetjob.mesh_surface(
        V, F, np.eye(4), name="Box", embedded=True, target_edge_length=0.4, quality=2.0,
        cage_resolution=6,
    )  # fmt: skip
    assert r.embedding is not None
    np.testing.assert_allclose(r.embedding.apply(r.mesh.X), V, atol=1e-9)


def test_the_worker_meshes_in_its_own_process(tmp_path):
    V, F = box_surface()
    folder = tmp_path / "tets.job"
    tetjob.write_request(folder, V, F, np.eye(4))
    job = jobs.Job.start(job_spec(folder), PY, tmp_path / "logs")
    assert job.wait(timeout=120) == jobs.DONE, job.message
    assert job.result["n_tets"] > 0 and job.result["embedded"] is False
    r = tetjob.read_result(folder)
    assert len(r.mesh.T) == job.result["n_tets"]
    # a new request forgets the old result: nothing stale is stored
    tetjob.write_request(folder, V, F, np.eye(4))
    assert not (folder / tetjob.RESULT_FILE).exists()


def test_a_cancel_during_tetgen_kills_the_worker_and_stores_nothing(tmp_path):
    """TetGen holds the GIL and has no safe point: the cancel ends in a kill after
    ``cancel_timeout_s``, which is a cancel (not a crash) and leaves no result."""
    V, F = uv_sphere(80)
    folder = tmp_path / "tets.job"
    tetjob.write_request(folder, V, F, np.eye(4))
    job = jobs.Job.start(job_spec(folder, edge=0.02, cancel_timeout_s=1.0), PY, tmp_path / "l")
    deadline = time.monotonic() + 60
    while not job.message.startswith("meshing") and time.monotonic() < deadline:
        job.poll()
        time.sleep(0.05)
    assert job.message.startswith("meshing the surface of Box"), job.message
    time.sleep(0.5)  # inside TetGen (it takes many seconds on this sphere)
    t0 = time.monotonic()
    job.cancel()
    assert job.wait(timeout=30) == jobs.CANCELLED
    assert time.monotonic() - t0 < 10  # killed after the 1 s timeout, not after TetGen
    assert not (folder / tetjob.RESULT_FILE).exists()


@pytest.mark.skipif(os.name != "posix", reason="a shell wrapper stands in for the crash")
def test_a_worker_that_dies_fails_the_job_and_stores_nothing(tmp_path):
    """A native crash (here: SIGKILL while TetGen runs) fails the job as a crash."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *worker.py*) exec timeout -s KILL 2 {PY} "$@";; esac\n'
        f'exec {PY} "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    V, F = uv_sphere(80)
    folder = tmp_path / "tets.job"
    tetjob.write_request(folder, V, F, np.eye(4))
    job = jobs.Job.start(job_spec(folder, edge=0.02), str(fake), tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.FAILED
    assert job.crashed
    assert not (folder / tetjob.RESULT_FILE).exists()


def near_duplicate_box():
    """The unit cube with one face split by a vertex 1e-6 m from its corner (what a Boolean
    through a ring of vertices leaves: a vertex a hair from another, faces of no area)."""
    V, F = box_surface()
    a, b, c = F[0]
    p = V[a] + 1e-6 * ((V[b] - V[a]) + (V[c] - V[a]))
    F = np.vstack([F[1:], [[a, b, 8], [b, c, 8], [c, a, 8]]])
    return np.vstack([V, p]), F


def test_near_duplicate_vertices_are_merged_and_the_mesh_rides_on_the_repair():
    """A vertex a micrometre from another is merged before TetGen (not filled with slivers):
    the tets are those of the clean cube (count within 5%, smallest dihedral no worse), the
    render vertices ride on them exactly at rest, and the user is told what was merged."""
    clean = tetjob.mesh_surface(
        *box_surface(), np.eye(4), name="Box", embedded=False, target_edge_length=0.1,
        quality=1.5, cage_resolution=6,
    )  # fmt: skip
    V, F = near_duplicate_box()
    r = tetjob.mesh_surface(
        V, F, np.eye(4), name="Box", embedded=False, target_edge_length=0.1, quality=1.5,
        cage_resolution=6,
    )  # fmt: skip
    print(
        f"clean {len(clean.mesh.T)} tets ({clean.quality['min_dihedral_deg']:.2f} deg), "
        f"repaired {len(r.mesh.T)} ({r.quality['min_dihedral_deg']:.2f} deg): {r.warnings}"
    )
    assert abs(len(r.mesh.T) / len(clean.mesh.T) - 1) < 0.05
    assert r.quality["min_dihedral_deg"] >= clean.quality["min_dihedral_deg"] - 1e-9
    assert r.quality["volume"] > 1e-9  # no sliver of 1e-19 m^3 as unrepaired
    assert r.embedding is not None
    np.testing.assert_allclose(r.embedding.apply(r.mesh.X), V, atol=1e-12)
    assert "merged 1 vertices" in r.warnings[0] and "Box" in r.warnings[0]


def test_a_degenerate_mesh_is_refused_with_what_to_do(monkeypatch):
    """A surface that merging does not repair (a slab thinner than the merge distance), and
    tets far more numerous than the Tet Size asks, are refused with the object's name and
    what to do in Blender."""
    V, F = box_surface()
    V = V * [1.0, 1.0, 1e-4]  # 0.1 mm thick: its faces merge into one sheet
    with pytest.raises(MeshError, match="'Slab' has 4 vertices within 5 mm.*Merge by Distance"):
        tetjob.mesh_surface(
            V, F, np.eye(4), name="Slab", embedded=False, target_edge_length=0.5, quality=2.0,
            cage_resolution=6,
        )  # fmt: skip
    monkeypatch.setattr(tetjob, "EXPLOSION_FACTOR", 0.0)  # any count past the 1,000 margin
    with pytest.raises(MeshError, match="made .* tets where its Tet Size asks.*raise Tet Size"):
        tetjob.mesh_surface(
            *box_surface(), np.eye(4), name="Box", embedded=False, target_edge_length=0.1,
            quality=2.0, cage_resolution=6,
        )  # fmt: skip


def test_two_jobs_of_one_folder_get_their_own_job_folders_and_a_weeks_leftovers_go(tmp_path):
    """Two Blender processes tetrahedralizing one object write requests side by side (one
    fixed ``tets.job`` let the second delete the first's result: "left no result"); a folder
    a killed Blender left more than a week ago is swept, a fresh one kept."""
    from neural_rom.core.data.files import STALE_JOB_FOLDER_S, job_folder

    V, F = box_surface()
    a, b = job_folder(tmp_path, "tets"), job_folder(tmp_path, "tets")
    assert a != b and a.parent == b.parent == tmp_path and a.name.startswith("tets-")
    tetjob.write_request(a, V, F, np.eye(4))
    tetjob.write_request(b, 2.0 * V, F, np.eye(4))
    ja = jobs.Job.start(job_spec(a), PY, tmp_path / "la")
    jb = jobs.Job.start(job_spec(b), PY, tmp_path / "lb")
    assert ja.wait(timeout=120) == jobs.DONE and jb.wait(timeout=120) == jobs.DONE
    ra, rb = tetjob.read_result(a), tetjob.read_result(b)
    np.testing.assert_allclose(np.ptp(ra.mesh.X, axis=0), 1.0)  # each its own surface
    np.testing.assert_allclose(np.ptp(rb.mesh.X, axis=0), 2.0)
    old = time.time() - STALE_JOB_FOLDER_S - 60
    os.utime(a, (old, old))
    job_folder(tmp_path, "tets")
    assert not a.exists() and b.exists()
    assert job_folder(tmp_path, "face").parent == tmp_path and b.exists()
