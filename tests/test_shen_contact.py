"""Shen 2021 with its defaults on a free body in contact (issue 12: what a user meets first,
the README demo's ball dropped on the floor), small: a soft 20 cm cube dropped on the
ground, four bakes, one held out. Against the linear model trained on the same bakes with
its defaults: Shen's DOFs at most the linear model's, its shapes no worse than PCA at equal
DOFs, its held-out replay no worse than the linear model's, and its Newton iterations
bounded in contact with no fallback.

Measured (shared 2-core machine): linear 4 DOFs, replay max 31.5 mm, 2.9 Newton iterations a
step (8 at most); Shen 3 + 1 DOFs with the decoder reading p (``D(p, z)``, the default),
shapes 0.86 mm against PCA-4's 1.66 mm, replay 8.0 mm, 5.1 iterations a step (33 at most,
in the first contact step), no fallback; with the paper's ``D(z)`` 1.47 mm, 10.8 mm, 5.6
iterations a step (20 at most). The largest count is that of one step's variational
minimization, which has several minima in contact (``core/methods/shen.py``: "In
contact"); the bound is 40 (it was 25 with ``D(z)``), the mean bound is unchanged. Before (n_p and the latent size from twice
the tolerance in the tolerance's own basis, Newton on phi with the |phi|^2 merit in
contact): 2 + 1 DOFs, 14.5 iterations a step, 60 at most, 8 variational fallbacks. With
the cubature target 0.01 (Shen's default since; was 0.05): shapes 0.72 mm, replay 4.0 mm
(6.5 at 0.05 in the same run's conditions), 4.6 iterations a step (23 at most).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from neural_rom.core import bake as bk
from neural_rom.core import registry
from neural_rom.core.bake import replay_scenario
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.engine.replay import replay_bake
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics.fem import Material
from neural_rom.core.registry import load_simulator


@pytest.fixture(scope="module")
def drops(tmp_path_factory):
    d = tmp_path_factory.mktemp("drops")
    X, T = grid_tetmesh((0.2, 0.2, 0.2), (3, 3, 3))
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=3e3, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario={"kind": "gravity_drop"},
        frames=40,
        seed=3,
        variants=4,
    )
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, d, "drop")
    return SimpleNamespace(paths=paths, dir=d)


def replay(path, bake):
    """Held-out replay: largest vertex error (m), Newton iterations of each step, the
    simulator."""
    sim, _ = load_simulator(path)
    cache = BakeCache.open(bake)
    _, driver = replay_scenario(cache)
    iters = []
    step = sim.step

    def counted(inputs):
        rep = step(inputs)
        iters.append(rep.newton_iters)
        return rep

    sim.step = counted
    out = replay_bake(sim, cache, driver)
    full = np.asarray(cache.channel("positions")[: len(out)])
    return float(np.linalg.norm(out - full, axis=-1).max()), iters, sim


def test_defaults_on_a_dropped_body(drops):
    d = drops.dir
    lin = registry.get("linear").trainer_function()(
        drops.paths, d / "linear.nrmodel", registry.get("linear").values()
    )
    she = registry.get("shen").trainer_function()(
        drops.paths, d / "shen.nrmodel", registry.get("shen").values(dict(epochs=300)), device="cpu"
    )
    bake = str(d / lin["rollout"]["bake"])
    assert she["rollout"]["bake"] == lin["rollout"]["bake"]  # the same held-out drop
    lin_err, lin_iters, _ = replay(d / "linear.nrmodel", bake)
    she_err, she_iters, sim = replay(d / "shen.nrmodel", bake)
    contact = sim.variational_steps
    print(
        f"linear: {lin['dofs']} DOFs, replay {lin_err * 1000:.2f} mm, Newton iterations "
        f"mean {np.mean(lin_iters):.2f} max {max(lin_iters)}\n"
        f"shen: {she['n_p']} + {she['latent_dim']} DOFs, shapes {she['max_error_val_m'] * 1000:.3f}"
        f" mm (PCA at equal DOFs {she['pca_same_dofs_max_error_val_m'] * 1000:.3f} mm), "
        f"replay {she_err * 1000:.2f} mm, Newton iterations mean {np.mean(she_iters):.2f} max "
        f"{max(she_iters)}, {contact} of {len(she_iters)} steps in contact, fallbacks "
        f"{sim.fallbacks}, trained in {she['train_seconds']:.1f} s"
    )
    assert she["dofs"] <= lin["dofs"], "more DOFs than the linear model takes"
    assert she["max_error_val_m"] <= she["pca_same_dofs_max_error_val_m"], "shapes worse than PCA"
    assert she_err <= lin_err, "held-out replay worse than the linear model's"
    assert contact >= len(she_iters) // 2  # the drop is in contact most of the time
    assert sim.fallbacks == 0
    assert np.mean(she_iters) <= 2.5 * np.mean(lin_iters) and max(she_iters) <= 40
