"""bench/autoencoder.py's helpers: the rollout .npz (written without pickled objects, read back
exactly, refused when the trajectories do not fit together) and the mesh-resolution option."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from .bench_modules import load_bench

latent = load_bench("autoencoder")


def _scene(frames: int = 4):
    X, T, pins = latent.bar((3, 1, 1))
    rng = np.random.default_rng(0)
    traj = {
        name: X[None] + 0.01 * rng.standard_normal((frames, len(X), 3))
        for name in ("full", "ae", "pca")
    }
    return X, T, pins, traj


def test_rollouts_round_trip_without_pickle(tmp_path):
    X, T, pins, traj = _scene()
    path = latent.write_rollouts(
        tmp_path / "sub" / "rollout.npz", X, T, pins, traj, dt=1 / 24, r=2, k=6
    )
    assert path.is_file()
    with np.load(path, allow_pickle=False) as z:  # every array loads without pickle
        assert all(z[k].dtype.kind != "O" for k in z.files)
    back = latent.read_rollouts(path)
    assert back["names"] == ["full", "ae", "pca"]
    np.testing.assert_array_equal(back["X"], X)
    np.testing.assert_array_equal(back["T"], T)
    np.testing.assert_array_equal(back["pinned"], pins)
    for name, x in traj.items():
        np.testing.assert_array_equal(back[name], x)
    assert (
        float(back["dt"]) == pytest.approx(1 / 24) and int(back["r"]) == 2 and int(back["k"]) == 6
    )
    # the clamped end of the bar: the x = 0 face, (ny+1)(nz+1) vertices
    assert len(pins) == 4 and np.all(X[pins, 0] == 0.0)


def test_rollouts_refuse_mismatched_trajectories(tmp_path):
    X, T, pins, traj = _scene()
    with pytest.raises(ValueError, match="same frames"):
        latent.write_rollouts(tmp_path / "a.npz", X, T, pins, {**traj, "ae": traj["ae"][:-1]})
    with pytest.raises(ValueError, match=r"expected \(F, 16, 3\)"):
        latent.write_rollouts(tmp_path / "b.npz", X, T, pins, {"full": traj["full"][:, :-1]})
    with pytest.raises(ValueError, match="free identifier"):
        latent.write_rollouts(tmp_path / "c.npz", X, T, pins, {"X": traj["full"]})
    with pytest.raises(ValueError, match="at least one"):
        latent.write_rollouts(tmp_path / "d.npz", X, T, pins, {})
    assert not any(tmp_path.iterdir())


def test_divisions_option_meshes_the_20k_bar():
    d = latent._divisions("56,8,8")
    assert d == (56, 8, 8)
    X, T, pins = latent.bar(d)
    assert T.shape == (21504, 4) and X.shape == (57 * 9 * 9, 3)
    assert np.allclose(X.max(0), (1.0, 0.1, 0.1)) and len(pins) == 81
    for bad in ("56,8", "56,0,8", "a,b,c"):
        with pytest.raises(argparse.ArgumentTypeError, match="three positive cell counts"):
            latent._divisions(bad)
