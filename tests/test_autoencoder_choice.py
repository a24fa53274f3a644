"""The autoencoder's training keeps the linear model when that replays a held-out bake better
(training/autoencoder, step 6): the latent search judges shapes, the choice judges replays.
The scene is bench/shen.py's ``pins`` bar (its clamp swung and turned, pokes), shared, not
copied."""

from __future__ import annotations

import re

import numpy as np
import pytest
from neural_rom.core import registry
from neural_rom.core.data.modelfile import load_model
from neural_rom.training.autoencoder import keep_better

from .bench_modules import load_bench

bench_shen = load_bench("shen")
FRAMES = 20


@pytest.fixture(scope="module")
def swing(tmp_path_factory):
    out = tmp_path_factory.mktemp("choice")
    return bench_shen.bake_pins(out / "b", variants=4, frames=FRAMES), out


def _numbers(sentence: str) -> list[float]:
    return [float(v) for v in re.findall(r"([0-9.]+) mm", sentence)]


@pytest.mark.parametrize("seed", [0, 1])
def test_linear_replaying_better_is_kept_and_said_with_both_numbers(swing, seed):
    """The default latent search (a small network, few epochs) on the swung bar: the linear
    model at its defaults replays the held-out bake better, so it is the file at ``out``, the
    record is the linear method's, and ``choice`` says so with both replay errors. Trained
    through the worker's train job, as the panel and the CLI train (it named the record
    after the job's method, autoencoder, so the model box showed a linear model as one)."""
    from neural_rom.training import worker

    paths, out = swing
    path = out / f"ae{seed}.nrmodel"
    s = registry.get("autoencoder").values(
        dict(hidden=[16, 16], epochs=60, patience=60, max_cubature=30, cubature_poses=30, seed=seed)
    )
    job = {"method": "autoencoder", "bakes": [str(p) for p in paths], "out": str(path)}
    res = worker.run({**job, "settings": dict(s), "device": "cpu"})
    lin, ae = res["linear_rollout_max_error_m"], res["autoencoder_rollout_max_error_m"]
    print(f"seed {seed}: {res['choice']} ({res['train_seconds']:.1f} s)")
    assert lin < ae, res["choice"]
    assert res["method"] == "linear" and load_model(path).method == "linear"
    assert res["rollout_max_error_m"] == lin and res["model"] == str(path)
    assert res["choice"].startswith("Linear is the better choice for this asset")
    np.testing.assert_allclose(_numbers(res["choice"]), [ae * 1000, lin * 1000], rtol=5e-3)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.stem}.")]


def test_an_autoencoder_replaying_better_is_kept(tmp_path):
    """Records as the two trainers return them: the autoencoder's replay (20 mm) beats the
    linear model's (30 mm), so its file stays, the linear temporary goes, and the sentence
    gives both; a tie keeps the autoencoder too; without a replay nothing is said."""
    ae_file, lin_file = tmp_path / "m.nrmodel", tmp_path / ".m.1234.tmp.nrmodel"
    roll = {"bake": "swing_v003"}
    for lin_error in (0.030, 0.020):
        ae_file.write_bytes(b"autoencoder")
        lin_file.write_bytes(b"linear")
        ae = {"method": "autoencoder", "model": str(ae_file), "dofs": 3, "rollout": roll,
              "rollout_max_error_m": 0.020, "warnings": []}  # fmt: skip
        lin = {"method": "linear", "model": str(lin_file), "dofs": 8, "rollout": roll,
               "rollout_max_error_m": lin_error, "warnings": []}  # fmt: skip
        kept = keep_better(ae, lin)
        assert kept["method"] == "autoencoder" and ae_file.read_bytes() == b"autoencoder"
        assert not lin_file.exists()
        assert kept["choice"].startswith("The autoencoder is kept")
        assert _numbers(kept["choice"]) == [20.0, lin_error * 1000]
    lin_file.write_bytes(b"linear")
    kept = keep_better({**ae, "rollout": {}, "rollout_max_error_m": None}, lin)
    assert "choice" not in kept and not lin_file.exists()
