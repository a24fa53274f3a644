"""core.poke: the one model of a poke the viewport's interactive poke and the scripted
``random_pokes`` scenario share: a region with weights summing to 1, a total force spread
by weight (a spring to the mouse, or a prescribed pulse)."""

import numpy as np
import pytest
from neural_rom.core.physics.poke import (
    Poke,
    poke_forces,
    poke_weights,
    share,
    spread,
    spring_force,
)


def test_poke_force_is_a_spring_spread_by_weight():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (200, 3))
    centre = np.array([0.2, 0.0, 0.1])
    idx, w = poke_weights(X, centre, 0.5)
    d = np.linalg.norm(X - centre, axis=1)
    np.testing.assert_array_equal(np.sort(idx), np.flatnonzero(d < 0.5))
    assert w.sum() == pytest.approx(1.0) and np.all(w > 0)
    # nearer vertices pull harder
    order = np.argsort(d[idx])
    assert w[order[0]] >= w[order[-1]]
    target = centre + np.array([0.0, 0.0, 0.3])
    f = poke_forces(X, idx, w, target, stiffness=100.0)
    p = w @ X[idx]
    np.testing.assert_allclose(f.sum(axis=0), 100.0 * (target - p), rtol=1e-12)  # total = k (t - p)
    off = np.setdiff1d(np.arange(200), idx)
    assert np.all(f[off] == 0)
    np.testing.assert_allclose(f[idx], w[:, None] * f[idx].sum(0), atol=1e-12)
    capped = poke_forces(X, idx, w, target, stiffness=100.0, max_force=2.0)
    assert np.linalg.norm(capped.sum(0)) == pytest.approx(2.0)
    # no vertex within reach: the nearest one is grabbed
    idx1, w1 = poke_weights(X, np.array([5.0, 5.0, 5.0]), 0.1)
    assert idx1.tolist() == [int(np.argmin(np.linalg.norm(X - 5.0, axis=1)))] and w1[0] == 1.0
    with pytest.raises(ValueError, match="radius must be positive"):
        poke_weights(X, centre, 0.0)
    # the Poke the frame driver keeps is the same spring
    np.testing.assert_array_equal(Poke(idx, w, target, 100.0, 2.0).forces(X), capped)


def test_mass_weights_among_candidates_give_the_region_one_acceleration():
    """The scripted pokes' region: surface vertices only, weights proportional to mass, so
    a total force F accelerates every grabbed vertex by F / (region mass)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (300, 3))
    mass = rng.uniform(0.5, 2.0, 300)
    surface = np.flatnonzero(np.abs(X).max(axis=1) > 0.8)
    centre = X[surface[0]]
    idx, w = poke_weights(X, centre, 0.6, candidates=surface, mass=mass)
    inside = surface[np.linalg.norm(X[surface] - centre, axis=1) < 0.6]
    np.testing.assert_array_equal(np.sort(idx), np.sort(inside))
    np.testing.assert_allclose(w, mass[idx] / mass[idx].sum(), rtol=1e-12)
    F = np.array([1.0, -2.0, 0.5])
    f = spread(len(X), idx, w, F)
    np.testing.assert_allclose(f.sum(axis=0), F, rtol=1e-12)
    accel = f[idx] / mass[idx, None]
    np.testing.assert_allclose(accel, np.broadcast_to(F / mass[idx].sum(), accel.shape), rtol=1e-12)
    # a series of total forces (one per frame) spreads frame by frame
    series = np.outer(np.sin(np.linspace(0, np.pi, 5)) ** 2, F)
    fs = spread(len(X), idx, w, series)
    assert fs.shape == (5, 300, 3)
    np.testing.assert_allclose(fs.sum(axis=1), series, atol=1e-12)
    np.testing.assert_array_equal(fs[:, idx], share(w, series))


def test_spring_force_is_zero_at_the_target_and_linear_in_the_pull():
    X = np.array([[0.0, 0, 0], [1.0, 0, 0], [0.0, 1, 0]])
    idx, w = np.array([0, 1]), np.array([0.25, 0.75])
    p = w @ X[idx]
    np.testing.assert_array_equal(spring_force(X, idx, w, p, 10.0), 0.0)
    np.testing.assert_allclose(spring_force(X, idx, w, p + [0, 0, 0.2], 10.0), [0, 0, 2.0])
    np.testing.assert_allclose(spring_force(X, idx, w, p + [0, 0, 0.4], 10.0), [0, 0, 4.0])
