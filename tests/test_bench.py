"""The benchmark helpers: test meshes, size parsing, memory probes, the case runner, and a
tiny run of our side of bench/fullspace.py (pbatoolkit and pyamg are not needed here)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from .bench_modules import BENCH, load_bench

common = load_bench("common")


def _faces(T):
    f = np.concatenate([T[:, [1, 2, 3]], T[:, [0, 2, 3]], T[:, [0, 1, 3]], T[:, [0, 1, 2]]])
    return np.unique(np.sort(f, axis=1), axis=0, return_counts=True)[1]


@pytest.mark.parametrize("cells", [(1, 1, 1), (4, 2, 3), (8, 2, 2)])
def test_bar_mesh_fills_the_box_with_positive_conforming_tets(cells):
    nx, ny, nz = cells
    size = (2.0, 0.5, 0.75)
    X, T = common.bar_mesh(nx, ny, nz, size)
    assert X.shape == ((nx + 1) * (ny + 1) * (nz + 1), 3)
    assert T.shape == (6 * nx * ny * nz, 4)
    vol = np.linalg.det(X[T[:, 1:]] - X[T[:, :1]]) / 6.0
    assert np.all(vol > 0)
    assert np.isclose(vol.sum(), np.prod(size), rtol=1e-12)
    # conforming: every face is shared by two tets except the box's boundary triangles
    counts = _faces(T)
    assert set(np.unique(counts)) <= {1, 2}
    assert np.sum(counts == 1) == 4 * (nx * ny + ny * nz + nx * nz)
    assert np.all(X.min(0) == 0) and np.allclose(X.max(0), size)


def test_bar_for_tets_sizes_and_pins():
    got = {n: common.bar_for_tets(n) for n in (5000, 20000, 80000)}
    assert {n: T.shape[0] for n, (_, T) in got.items()} == {5000: 5184, 20000: 17496, 80000: 81000}
    X, _ = got[5000]
    assert np.allclose(X.max(0), (1.0, 0.25, 0.25))  # 4:1:1 bar
    pins = common.pinned_end(X)
    assert pins.size == 7 * 7 and np.all(X[pins, 0] == 0.0)
    free = common.free_dofs(X.shape[0], pins)
    assert free.size == 3 * (X.shape[0] - pins.size)
    assert not np.isin(free // 3, pins).any()


def test_parse_sizes():
    assert common.parse_sizes("5k,20k,80k") == [5000, 20000, 80000]
    assert common.parse_sizes(" 1.5k , 300,1M") == [1500, 300, 1000000]
    with pytest.raises(SystemExit, match="tet counts like 5k"):
        common.parse_sizes("5k,lots")


_PEAK_PROBE = """
import json, sys
import json
import subprocess
import sys

import numpy as np
sys.path.insert(0, sys.argv[1])
import common
big = np.ones(120 * 1024 * 1024 // 8)  # 120 MiB, touched, then freed: a peak to forget
del big
reset = common.reset_peak_rss()
before, rss0 = common.peak_rss_mib(), common.rss_mib()
a = np.ones(40 * 1024 * 1024 // 8)  # 40 MiB, touched
print(json.dumps(dict(reset=reset, before=before, rss0=rss0, rss1=common.rss_mib(),
                      after=common.peak_rss_mib())))
"""


def test_peak_rss_sees_a_fresh_allocation():
    # In a fresh interpreter: a test process's own history (and a kernel that ignores the
    # reset, as on some CI machines) must not decide the outcome.
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_PROBE, str(BENCH)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["rss1"] - r["rss0"] > 35  # the allocation is resident
    assert r["after"] >= r["rss1"] - 1  # the peak is never below what is resident now
    if r["reset"]:  # the mark forgot the freed 120 MiB, and sees the new 40 MiB
        assert r["before"] - r["rss0"] < 5
        assert r["after"] - r["before"] > 35
    else:  # not reset: the mark still holds the freed 120 MiB peak
        assert r["before"] - r["rss0"] > 100


def test_run_case_reports_a_failing_worker_with_its_message():
    r = common.run_case(str(BENCH / "fullspace.py"), ["ours", "100", "1", "no_such_solver"])
    assert "error" in r and "no_such_solver" in r["error"]


def test_fullspace_ours_one_step_centre_of_mass_falls_less_than_free_fall():
    fullspace = load_bench("fullspace")
    r = fullspace.run_ours(100, 1, "superlu")
    (step,) = r["steps"]
    assert r["tets"] == 192 and step["converged"] and step["iters"] >= 1
    assert step["wall"] >= step["derivatives"] + step["solve"]
    # One backward Euler step from rest: M (x1 - x0) / h^2 = M g + f_int(x1), and the internal
    # forces on the free vertices sum to the upward pull of the clamp, so the centre of mass
    # falls, but by at most the free-fall distance g h^2 (the tip alone may fall further: a
    # hinged rod's tip accelerates at 3g/2).
    g_h2 = 9.81 * fullspace.DT**2
    assert 0.0 < -r["com"][2] < g_h2
    assert -r["tip"][2] > -r["com"][2]  # the free end falls the most
    s = fullspace.summarize(r)
    assert np.isclose(s["iter"] * step["iters"], step["wall"])
    assert set(r["kernels"]) >= {"energy", "energy_gradient", "hessian_proj", "assembly", "all"}


def test_snp_bench_tiny_run_times_every_row_and_the_batch_agrees():
    """bench/snp.py end to end at a tiny size (72 tets, 3 bakes of 12 frames, 2 epochs): every
    timing is there, the batched step matches the single ones, the memory adds up."""
    pytest.importorskip("torch")
    import tempfile

    snp = load_bench("snp")
    with tempfile.TemporaryDirectory() as tmp:
        r = snp.run(48, variants=3, frames=12, epochs=2, instances=4, reps=5, workdir=tmp)
    assert r["tets"] == 72 and r["bakes"] == 3 and r["epochs"] == 2 and r["instances"] == 4
    for key in ("full_step_s", "step_s", "decode_s", "batch_step_s", "singles_step_s"):
        assert 0.0 < r[key] < 10.0, key
    assert r["batch_vs_singles_m"] <= 1e-12
    assert r["basis_bytes"] == 8 * 3 * r["vertices"] * r["modes"]
    assert r["basis_bytes"] + r["net_bytes"] < r["array_bytes"] < r["file_bytes"]
    text = snp.report(r)
    assert "4 instances, one batched step" in text and "memory: model file" in text
