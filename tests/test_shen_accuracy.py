"""Issue 12 acceptance, small: on the swung arm of bench/autoencoder.py (a clamped bar bent up to
~90 degrees in every direction by a turning body load; whole bakes held out), Shen 2021 with
n_p + n_z = 3 + 1 DOFs against PCA with 4 modes: held-out replay and closest-shape errors,
and the effect of dropping the fictitious force. The whip and Fulton's model are in
bench/shen.py (too slow for the suite)."""

from __future__ import annotations

import pytest

from .bench_modules import load_bench

latent = load_bench("autoencoder")
bench_shen = load_bench("shen")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    out = tmp_path_factory.mktemp("swing")
    return latent.bake_scene(out, divisions=(10, 2, 2), variants=8, frames=72, keys=2)


def test_shen_against_pca_at_equal_dofs_on_the_swung_arm(paths, tmp_path):
    """Measured with the default network (6 x 32 sin, omega 1, 100 epochs of linear
    warm-up, no pose weighting) and the decoder reading p (u = U p + D(p, z), the default):
    closest shapes 11.5 mm against PCA-4's 28.0 mm (0.41x: the issue's 0.7x goal is met),
    replay 176.9 mm against 451.0 mm (0.39x). The fictitious force changes the replay by less
    than 0.1 mm on this heavily damped, near quasi-static scene. With the paper's D(z) the
    same training gave 22.3 / 297 mm (0.80x / 0.66x; without the fictitious force 436 mm), so
    what limited the closest shapes was the decoder's input: one latent coordinate cannot
    tell apart the bends of a turning load (the shortening and higher modes follow the
    direction and size of the bend, i.e. p), the encoder, capacity and optimizer were not
    (per coordinate input scaling of p: 13.9 mm; one scale for |p|: 11.5 mm)."""
    r = bench_shen.compare(
        paths,
        tmp_path,
        3,
        1,
        epochs=300,
        patience=100,
        fulton=False,
        max_cubature=40,
        closest_every=3,
        variational=False,
    )
    print(bench_shen.report("swung arm (240 tets)", r))
    shen, pca, nofict = r["shen"], r["pca"], r["shen_nofict"]
    print(
        f"replay {shen['err'] * 1000:.3f} mm, without the fictitious force "
        f"{nofict['err'] * 1000:.3f} mm; closest/PCA {r['shen_closest'] / r['pca_closest']:.3f}, "
        f"replay/PCA {shen['err'] / pca['err']:.3f}"
    )
    assert r["shen_closest"] <= 0.7 * r["pca_closest"], "issue 12's goal: 0.7x PCA's shapes"
    assert r["shen_closest"] <= 0.5 * r["pca_closest"], "closest shapes regressed (0.41x)"
    assert shen["err"] <= 0.5 * pca["err"], "replay error regressed (0.39x PCA's)"
    assert shen["err"] <= 1.02 * nofict["err"], "the fictitious force made the replay worse"
