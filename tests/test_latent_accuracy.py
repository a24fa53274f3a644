"""Issue 5 acceptance: the autoencoder (Fulton 2019) reaches PCA's held-out max per-vertex
error with at most 40% of PCA's degrees of freedom, on a small version of the swung-arm
scene of bench/autoencoder.py (a clamped bar bent up to ~90 degrees in every direction of the y-z
plane by a turning body load: a 2-D nonlinear manifold, like the paper's catapult).
Issue 10: the default settings find such a latent size within their time budget."""

from __future__ import annotations

import numpy as np
import pytest

from .bench_modules import load_bench

latent = load_bench("autoencoder")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    out = tmp_path_factory.mktemp("swing")
    return latent.bake_scene(out, divisions=(10, 2, 2), variants=8, frames=72, keys=2)


def test_autoencoder_needs_at_most_40_percent_of_pca_dofs(paths, tmp_path):
    ds, xt, xv, held = latent.split_frames(paths)
    X = np.asarray(ds[0].X)
    assert np.linalg.norm(xv - X, axis=-1).max() > 0.5  # large bending, not a linear regime
    curve = latent.pca_curve(ds, xt, xv)
    r = 2
    m = latent.train_ae(paths, tmp_path / "ae.nrmodel", r, epochs=800, max_cubature=40)
    err = m["ae_max_error_val_m"]
    k = latent.smallest_k(curve, err)
    table = " ".join(f"{j}:{1000 * e:.1f}" for j, e in enumerate(curve[:12]))
    msg = (
        f"AE r={r}: held-out max vertex error {1000 * err:.1f} mm; PCA needs k={k} for it "
        f"(r/k = {r / k if k else 0:.0%}); PCA held-out mm by k: {table}"
    )
    print(msg)
    assert k is not None and r / k <= 0.40, msg
    # and at equal DOFs the autoencoder is far more accurate than PCA
    assert curve[r] > 3 * err, msg

    # The latent dynamics replay a held-out bake (a load sequence it never saw). The r/k
    # claim above is about shapes; in dynamics the 2-DOF manifold is much stiffer than the
    # bar (its equilibria sit off the true ones), so the replay error is many times its
    # closest-shape error, and which motion it takes depends on the trained network: 298 mm
    # (numpy 1.26, two threads), 406 mm (numpy 2.4), 520 mm (one BLAS thread), each replay
    # the same to the bit under weights x (1 +- 1e-9), against 576 mm for PCA-2's replay,
    # 25 mm for PCA-6's and 704 mm for a bar that stays at rest (``still``). So the replay
    # bound is a smoke bound: the model moves with the bar (under 0.9 x the error of
    # standing still), not a measure of its accuracy.
    from neural_rom.core import registry
    from neural_rom.core.engine.replay import rollout_metrics
    from neural_rom.core.registry import load_simulator

    roll = rollout_metrics(lambda d: load_simulator(tmp_path / "ae.nrmodel")[0], ds[int(held[0])])
    pca = registry.get("linear").trainer_function()(
        paths, tmp_path / "pca.nrmodel", registry.get("linear").values(dict(k=k, max_cubature=40))
    )
    pca_roll = pca["rollout"]
    print("AE r=2 held-out replay:", roll, f"\nPCA k={k} held-out replay:", pca_roll)
    assert roll["frames"] == 72 and pca_roll["bake"] == roll["bake"]
    still = float(np.linalg.norm(ds[int(held[0])].positions - X, axis=-1).max())
    assert roll["max_error_m"] < 0.9 * still, (roll, still)
    assert roll["projection_max_error_m"] < 0.02, roll
    assert pca_roll["max_error_m"] < 0.04, pca_roll


def test_defaults_find_a_small_latent_size_in_bounded_time(paths, tmp_path):
    """Default settings, as a user trains: the latent size is searched coarse to fine (sizes
    1, 2, 4, then 3) within the time budget, the estimate is announced before any network
    trains, and the model beats PCA with as many modes without falling back to it.
    Measured on two shared cores: 30-68 s in all, by their load (the old sweep of r = 1, 2, 3
    at 2,000 epochs each: 26-48 s; it tried every size up to k where none met the tolerance),
    r = 3, 13-14 mm held out against 28.2 mm for PCA with 3 modes and 9.4 mm with the whole
    PCA layer (k = 6)."""
    from neural_rom.core.methods.autoencoder import METHOD
    from neural_rom.training.autoencoder import search_worst_case

    # the latent search itself: whether the linear model is kept in its place where it
    # replays better (keep_linear, on by default) is tests/test_autoencoder_choice.py's
    res = latent.train_defaults(paths, tmp_path / "defaults.nrmodel", {"keep_linear": False})
    latent.print_defaults(res)
    assert "network training about" in res["estimate"] and res["estimate_s"] > 0
    k, r = res["k"], res["latent_dim"]
    assert k == 6 and r <= 3, res["latent_search"]
    assert len(res["latent_search"]) <= search_worst_case(1, k) == 5
    assert res["fallback"] is None, res["warnings"]
    assert res["ae_max_error_val_m"] <= res["latent_tolerance_m"]
    assert res["ae_max_error_val_m"] < 0.7 * res["pca_r_max_error_val_m"]
    # the budget bounds the network training; this bound only catches a run that ignores it
    budget = METHOD.setting("time_budget").default
    assert res["estimate_s"] <= budget and res["train_seconds"] < budget
