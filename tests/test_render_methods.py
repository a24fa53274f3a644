"""scripts/render_methods.py, the README pictures of the learned methods: its arguments, its
layout maths, and the data half of one picture (the whip of issue 12) at ``--quick`` scale,
without rendering (the renders take about 10 s each and need nothing the data does not)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "render_methods.py"


def _load():
    spec = importlib.util.spec_from_file_location("render_methods", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


rm = _load()


@pytest.fixture(scope="module", autouse=True)
def torch_threads_restored():
    """The script runs torch on one thread; the tests after these keep their setting."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_arguments_and_a_picture_for_every_method():
    a = rm.parse_args(["--only", "shen", "--only", "face", "--quick", "--data-only"])
    assert a.only == ["shen", "face"] and a.quick and a.data_only and not a.render_only
    assert rm.parse_args([]).only is None  # every method
    with pytest.raises(SystemExit):
        rm.parse_args(["--data-only", "--render-only"])
    with pytest.raises(SystemExit):
        rm.parse_args(["--only", "pca"])
    assert set(rm.DATA) == set(rm.PICTURE) == set(rm.PICTURES) == set(rm.METHODS)


def test_view_is_a_rotation_and_the_legend_top_a_round_number():
    R = rm.view(-28.0, 6.0)
    assert np.allclose(R @ R.T, np.eye(3), atol=1e-15) and math.isclose(np.linalg.det(R), 1.0)
    assert np.allclose(rm.view(0.0, 0.0), np.eye(3))
    # the top of the object tips towards the camera (which looks along +y)
    assert rm.view(0.0, 30.0)[1] @ [0, 0, 1] < 0
    for e, top in ((0.00031, 0.0004), (0.0042, 0.005), (0.204, 0.25), (0.02, 0.02), (0.011, 0.015)):
        assert math.isclose(rm.nice_max(e), top), (e, rm.nice_max(e))


def test_whip_data_at_quick_scale(tmp_path):
    """The whip's data half: bakes, three trained models, a held-out replay of each; what is
    written is what the picture shows (numeric arrays, each model's frame beside full
    space's, the clamp held)."""
    assert rm.main(["--only", "shen", "--quick", "--data-only", "--out", str(tmp_path)]) == 0
    npz = tmp_path / "shen_whip.npz"
    d = rm.load_npz(npz)  # allow_pickle=False: numbers and strings only
    size = npz.stat().st_size
    X, F, full = d["X"], d["F"], d["full"]
    frame = int(d["frame"])
    errs = {m: np.linalg.norm(d[m] - full, axis=1) for m in ("pca", "fulton", "shen")}
    bend = float(np.linalg.norm(full - X, axis=1).max())
    print(
        f"{size / 1024:.0f} KiB; frame {frame} of {int(d['frames'])}: tip moved {1000 * bend:.0f} "
        "mm; max error "
        + ", ".join(
            f"{m} {1000 * e.max():.1f} mm (bake {1000 * float(d[m + '_bake_max']):.1f})"
            for m, e in errs.items()
        )
        + f"; {float(d['seconds']):.1f} s"
    )
    assert size < 2 * 1024 * 1024 and bool(d["quick"])
    assert F.ndim == 2 and F.shape[1] == 3 and F.max() < len(X)
    assert frame > 8  # after the release (bench/shen.py's PULL frames)
    pinned = d["pinned"]
    assert len(pinned) > 0
    for m in ("full", "pca", "fulton", "shen"):
        assert d[m].shape == X.shape and np.all(np.isfinite(d[m]))
        assert np.abs(d[m][pinned] - X[pinned]).max() < 1e-6  # the clamp holds in every model
    assert bend > 0.05  # the frame shown is a real bend, not the rest shape
    for m, e in errs.items():  # the shown frame is one of the replay's frames
        assert e.max() <= float(d[m + "_bake_max"]) * (1 + 1e-5) + 1e-6
