"""Autoencoder (Fulton 2019) training: export to numpy, determinism, the coarse-to-fine
latent-size search, early stopping, the time budget and its estimate, the comparison with
PCA (and the fallback to it), checkpoint resume, and a train job through the real worker."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from neural_rom.core import bake as bk
from neural_rom.core import registry
from neural_rom.core.data.modelfile import load_model
from neural_rom.core.errors import JobCancelled, NeuralRomError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics.fem import Material
from neural_rom.core.reduced.nnet import MLP
from neural_rom.training.autoencoder import (
    pca_layers,
    plan_training,
    search_latent_size,
    search_worst_case,
)
from neural_rom.training.autoencoder.trainer import _AE
from neural_rom.training.nets import to_numpy_mlp

# tiny networks and few epochs: the file must stay fast on two busy cores
TINY = dict(
    k=6,
    latent_dim=3,
    hidden=[16, 16],
    epochs=30,
    checkpoint_every=10,
    max_cubature=30,
    cubature_poses=20,
    rollout=False,
    pca_fallback=False,  # these tests look at the network (30 epochs: PCA-3 beats it)
)


@pytest.fixture(scope="module")
def bakes(tmp_path_factory):
    d = tmp_path_factory.mktemp("bakes")
    X, T = grid_tetmesh((0.5, 0.1, 0.1), (10, 2, 2))
    spec = bk.BakeSpec(
        material=Material(youngs_modulus=2e5, poisson_ratio=0.4, density=1000.0).to_dict(),
        scenario={"kind": "random_pokes", "count": 3, "strength": 1.5, "duration": 0.4},
        frames=30,
        pinned=np.flatnonzero(X[:, 0] < 1e-9).tolist(),
        damping=(0.5, 0.0),
        seed=11,
        variants=4,
    )
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, d, "pokes")
    return SimpleNamespace(paths=paths, X=X, T=T)


@pytest.fixture(scope="module")
def reference(bakes, tmp_path_factory):
    """One uninterrupted tiny training run (with checkpoints)."""
    d = tmp_path_factory.mktemp("ref")
    metrics = []
    res = registry.get("autoencoder").trainer_function()(
        bakes.paths,
        d / "ref.nrmodel",
        registry.get("autoencoder").values(dict(**TINY)),
        checkpoint_dir=d / "ckpt",
        metric=metrics.append,
    )
    return SimpleNamespace(res=res, model=load_model(d / "ref.nrmodel"), metrics=metrics)


def _weights(model):
    return {k: v for k, v in model.arrays.items() if k.startswith(("enc_", "dec_"))}


# --------------------------------------------------------------------------- export


def test_numpy_export_equals_torch_forward_jvp_vjp():
    torch.manual_seed(3)
    ae = _AE(7, 3, [20, 12], "elu").double()
    s_in, s_out = 0.37, 2.5  # the input/output scales fold into the first/last layers
    enc = to_numpy_mlp(ae.encoder, "elu", in_scale=s_in)
    dec = to_numpy_mlp(ae.decoder, "elu", out_scale=s_out)
    assert enc.activations == ("elu", "elu", "identity")
    assert (enc.sizes, dec.sizes) == ((7, 20, 12, 3), (3, 12, 20, 7))
    rng = np.random.default_rng(0)
    q = rng.normal(size=(50, 7))
    with torch.no_grad():
        z_t = ae.encoder(torch.tensor(q / s_in)).numpy()
        q_t = s_out * ae.decoder(torch.tensor(z_t)).numpy()
    np.testing.assert_allclose(enc.forward(q), z_t, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dec.forward(z_t), q_t, rtol=0, atol=1e-12)

    def phi(z):
        return s_out * ae.decoder(z)

    for z in rng.normal(size=(5, 3)) * 2.0:  # both ELU branches are visited
        J = torch.autograd.functional.jacobian(phi, torch.tensor(z)).numpy()  # (7, 3)
        v, u = rng.normal(size=3), rng.normal(size=7)
        y, Jv = dec.jvp(z, v)
        _, JTu = dec.vjp(z, u)
        np.testing.assert_allclose(y, phi(torch.tensor(z)).detach().numpy(), atol=1e-12)
        np.testing.assert_allclose(Jv, J @ v, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(JTu, J.T @ u, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dec.jacobian(z), J, rtol=1e-10, atol=1e-12)


def test_settings_refuse_unknown_keys_and_bad_values():
    # the registry record is the one validation: it names the field and the valid ones
    with pytest.raises(NeuralRomError, match="latent_size: not a setting of the Autoencoder"):
        registry.get("autoencoder").values({"latent_size": 4})
    with pytest.raises(NeuralRomError, match="activation"):
        registry.get("autoencoder").values(dict(activation="swish"))
    s = registry.get("autoencoder").values({"latent_dim": 4, "hidden": [8, 8]})
    assert s.latent_dim == 4 and s.hidden == [8, 8] and s.batch_size == 256


def test_settings_are_the_records_values_read_only():
    """A trainer's settings (``run.settings``, :meth:`Method.values`) are the record's: the
    same names in the same order, the same defaults, read-only, and no device (the device
    is the job's)."""
    from neural_rom.core.methods.autoencoder import METHOD

    values = METHOD.values()
    assert list(values) == [s.name for s in METHOD.settings]
    assert dict(values) == METHOD.defaults()
    with pytest.raises(AttributeError, match="read-only"):
        values.latent_dim = 3
    with pytest.raises(NeuralRomError, match="device: not a setting of the Autoencoder"):
        METHOD.values({"device": "cpu"})
    # 0 means "choose automatically" on the panel and the CLI, as in the record
    assert METHOD.values(dict(latent_dim=0)).latent_dim is None


# --------------------------------------------------------------------------- training


def test_model_file_layout_and_reconstruction(bakes, reference):
    m, res = reference.model, reference.res
    assert m.method == "autoencoder"
    meta = m.metadata
    assert meta["latent_dim"] == 3 and meta["k"] == 6
    assert meta["lbfgs"] == {"window": 8, "tolerance": 1e-8, "max_iters": 100}
    for name in ("X", "T", "U", "mass", "pinned", "cubature_elements", "contact_vertices"):
        assert name in m.arrays
    # the cubature stopped on held-out training trajectories too (validation stopping)
    v = res["cubature_validation_rel_error"]
    assert v is not None and (v <= 0.05 + 1e-9 or len(m.arrays["cubature_elements"]) >= 30)
    enc = MLP.from_arrays(m.arrays, meta["encoder"])
    dec = MLP.from_arrays(m.arrays, meta["decoder"])
    assert enc.sizes == (6, 16, 16, 3) and dec.sizes == (3, 16, 16, 6)
    # psi(enc(U^T M (x - X))) = X + U phi(z) reproduces the reported training error
    from neural_rom.core.data.cache import BakeCache

    U, X, mass = m.arrays["U"], m.arrays["X"], m.arrays["mass"]
    x = np.concatenate([BakeCache.open(bakes.paths[i]).channel("positions") for i in (0, 1)])
    q = (x - X).reshape(len(x), -1) @ (np.repeat(mass, 3)[:, None] * U)
    x_hat = X + (dec.forward(enc.forward(q)) @ U.T).reshape(x.shape)
    err = np.linalg.norm(x - x_hat, axis=2).max()
    assert err > 0 and res["ae_max_error_train_m"] >= res["pca_max_error_train_m"]
    # metrics were streamed per epoch: losses and the held-out max vertex error
    epochs = [e for e in reference.metrics if "epoch" in e]
    assert epochs and epochs[-1]["epoch"] == 30
    assert {"train_loss", "val_loss", "val_max_error_m"} <= set(epochs[-1])
    assert res["rollout"] == {"skipped": "turned off in the settings"}
    # the result record's common keys (training/run.py), the same in the file
    assert res["method"] == "autoencoder" and res["device"] == "cpu"
    assert (res["k"], res["dofs"]) == (6, 3)
    assert res["max_error_val_m"] == res["ae_max_error_val_m"]
    assert res["rollout_max_error_m"] is None and res["step_ms"] is None
    assert res["cubature_elements"] == len(m.arrays["cubature_elements"])
    assert meta["metrics"] == {k: v for k, v in res.items() if k not in ("model", "warnings")}
    assert meta["training"] == dict(registry.get("autoencoder").values(TINY))


def test_training_is_deterministic_by_seed(bakes, reference, tmp_path):
    registry.get("autoencoder").trainer_function()(
        bakes.paths, tmp_path / "a.nrmodel", registry.get("autoencoder").values(dict(**TINY))
    )
    a = _weights(load_model(tmp_path / "a.nrmodel"))
    ref = _weights(reference.model)
    assert a.keys() == ref.keys()
    for k in ref:
        np.testing.assert_array_equal(a[k], ref[k])
    registry.get("autoencoder").trainer_function()(
        bakes.paths,
        tmp_path / "b.nrmodel",
        registry.get("autoencoder").values(dict(**TINY, seed=1)),
    )
    b = _weights(load_model(tmp_path / "b.nrmodel"))
    assert not np.array_equal(b["dec_W0"], ref["dec_W0"])


def test_cancel_then_resume_gives_the_uninterrupted_weights(bakes, reference, tmp_path):
    out, ckpt = tmp_path / "c.nrmodel", tmp_path / "ckpt"
    calls = {"n": 0}

    def cancel_mid_training():
        calls["n"] += 1
        return calls["n"] > 18  # 2 checks before the epochs, then one per epoch: epoch 16

    with pytest.raises(JobCancelled, match="epoch 16"):
        registry.get("autoencoder").trainer_function()(
            bakes.paths,
            out,
            registry.get("autoencoder").values(dict(**TINY)),
            checkpoint_dir=ckpt,
            should_cancel=cancel_mid_training,
        )
    assert not out.exists() and list(ckpt.glob("ae_*_r003.pt"))
    messages = []
    registry.get("autoencoder").trainer_function()(
        bakes.paths,
        out,
        registry.get("autoencoder").values(dict(**TINY)),
        checkpoint_dir=ckpt,
        progress=lambda f, m: messages.append(m),
    )
    assert any("resumed at epoch 10" in m for m in messages), messages
    assert any("PCA basis of 6 modes from checkpoint" in m for m in messages)
    got, ref = _weights(load_model(out)), _weights(reference.model)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])


_RUN = """
import json, sys
from neural_rom.core import registry

train = registry.get("autoencoder").trainer_function()
bakes, out, ckpt, settings = json.loads(sys.argv[1])
res = train(bakes, out, settings, device="cpu", checkpoint_dir=ckpt,
            progress=lambda f, m: print("progress", m, flush=True))
print("result", json.dumps({k: res[k] for k in ("epochs_run", "latent_dim")}), flush=True)
"""


def test_killed_training_resumes_from_its_checkpoints_and_ends_bit_identical(bakes, tmp_path):
    """SIGKILL at a random instant after the first network checkpoint, then start again: the
    second run reads back the finished stages, continues the network it was training from its
    last checkpoint (fewer epochs than a whole run) and writes the uninterrupted run's weights,
    bit for bit. Search (sizes 1, 2, 3), early stopping and the final network all resume."""
    import json
    import random
    import signal
    import subprocess
    import sys
    import time

    settings = {
        **TINY,
        "latent_dim": None,
        "latent_tolerance": 1e-6,  # never met: the search trains 1, 2 and 3
        "max_latent_dim": 3,
        "search_epochs": 300,
        "epochs": 600,
        "patience": 60,  # networks stop early too (560 of 1500 epochs measured)
    }
    script = tmp_path / "run.py"
    script.write_text(_RUN)

    def start(out, ckpt):
        args = json.dumps([[str(p) for p in bakes.paths], str(out), str(ckpt), settings])
        return subprocess.Popen(
            [sys.executable, str(script), args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def first_network_checkpoint(proc, ckpt):
        while not list(ckpt.glob("ae_*.pt")):
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.005)
        return time.perf_counter()

    def finish(proc):
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
        result = next(line for line in out.splitlines() if line.startswith("result "))
        return out, json.loads(result[len("result ") :])

    # the uninterrupted run, timed from its first network checkpoint to its model file
    ref = start(tmp_path / "ref.nrmodel", tmp_path / "ref_ckpt")
    t = first_network_checkpoint(ref, tmp_path / "ref_ckpt")
    while not (tmp_path / "ref.nrmodel").exists() and ref.poll() is None:
        time.sleep(0.005)
    span = time.perf_counter() - t
    ref_log, ref_res = finish(ref)
    # the same run killed at a random instant of that span, then started again
    ckpt, out = tmp_path / "ckpt", tmp_path / "resumed.nrmodel"
    delay = random.uniform(0.0, 0.8 * span)
    proc = start(out, ckpt)
    first_network_checkpoint(proc, ckpt)
    time.sleep(delay)
    assert proc.poll() is None, f"finished before the kill ({delay:.2f} of {span:.2f} s)"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    log, res = finish(start(out, ckpt))
    why = f"killed {delay:.2f} s after the first checkpoint (of {span:.2f} s)\n{log}"
    assert "PCA basis of 6 modes from checkpoint" in log, why
    assert "from checkpoint" not in ref_log
    # it did only the rest: fewer epochs than the whole run
    assert res["epochs_run"] < ref_res["epochs_run"], (res, ref_res, why)
    # a network continued from its checkpoint, or one finished before the kill was read back
    resumed = [m for m in log.splitlines() if m.startswith("progress latent") and "checkpoint" in m]
    assert resumed or res["epochs_run"] == 0, why
    assert res["latent_dim"] == ref_res["latent_dim"]
    got, want = _weights(load_model(out)), _weights(load_model(tmp_path / "ref.nrmodel"))
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k}; {why}")


def test_latent_size_search_doubles_then_bisects():
    """Coarse to fine: 1, 2, 4, 8 (the first within tolerance), then bisection 6, 5."""
    errors = {1: 0.9, 2: 0.5, 3: 0.3, 4: 0.2, 5: 0.08, 6: 0.06, 7: 0.04, 8: 0.03, 9: 0.01}
    tried = []

    def fit(r):
        tried.append(r)
        return f"model{r}", errors[r], {"train_loss": r}

    r, model, searched = search_latent_size(1, 9, fit, target=0.1)
    assert (r, model, tried) == (5, "model5", [1, 2, 4, 8, 6, 5])
    assert [e["max_error_val_m"] for e in searched] == [0.9, 0.5, 0.2, 0.03, 0.06, 0.08]
    assert searched[0] == {"latent_dim": 1, "max_error_val_m": 0.9, "train_loss": 1}
    # the last doubling is capped at hi; none meets the target: the most accurate tried
    tried.clear()
    r, model, _ = search_latent_size(3, 7, fit, target=0.001)
    assert (r, tried) == (7, [3, 6, 7])
    # met at the first size: one training
    tried.clear()
    assert search_latent_size(4, 9, fit, target=0.5)[0] == 4 and tried == [4]
    # the deadline ends the search with what it has (checked between trainings)
    tried.clear()
    r, _, _ = search_latent_size(1, 9, fit, target=0.1, stop=lambda: len(tried) >= 2)
    assert (r, tried) == (2, [1, 2])


def test_search_worst_case_counts_doubling_then_bisection():
    # 1, 2, 4, 8, 16, 32, 57 (7 sizes), then bisection of (32, 57): ceil(log2 25) = 5 more
    assert search_worst_case(1, 57) == 12
    assert search_worst_case(3, 3) == 1
    assert search_worst_case(1, 2) == 2  # 1, 2: nothing left to bisect
    assert search_worst_case(1, 4) == 4  # 1, 2, 4, then 3


def test_plan_fits_the_time_budget():
    # 10 ms an epoch, 12 networks worst case, 2000 epochs: the full search is 240 s
    p = plan_training(2000, None, 12, 0.01, 300.0)
    assert (p.search_epochs, p.epochs, p.cut, p.reuse_search) == (2000, 2000, False, True)
    assert p.estimate_s == pytest.approx(240.0) and p.wanted_s == pytest.approx(240.0)
    # 120 s: the final network keeps 2000 epochs (20 s), the search shares 100 s: 833 each
    p = plan_training(2000, None, 12, 0.01, 120.0)
    assert (p.search_epochs, p.epochs, p.cut, p.reuse_search) == (833, 2000, False, False)
    assert p.estimate_s == pytest.approx(0.01 * (12 * 833 + 2000)) and p.estimate_s <= 120
    # 40 s: below 2000 + 12 * 500 epochs, both are scaled: f = 4000 / 8000
    p = plan_training(2000, None, 12, 0.01, 40.0)
    assert (p.search_epochs, p.epochs, p.cut) == (250, 1000, True)
    assert p.estimate_s == pytest.approx(40.0) and p.wanted_s == pytest.approx(240.0)
    # an explicit search length is scaled with the final one
    p = plan_training(2000, 300, 12, 0.01, 28.0)  # wants 12 * 300 + 2000 epochs = 56 s
    assert (p.search_epochs, p.epochs, p.cut) == (150, 1000, True)
    # a given latent size: one network; a tiny budget stops at the floor (50 epochs)
    p = plan_training(2000, None, 0, 0.01, 5.0)
    assert (p.search_epochs, p.epochs, p.searches, p.cut) == (500, 500, 0, True)
    assert plan_training(2000, None, 0, 0.01, 0.1).epochs == 50
    assert plan_training(30, None, 0, 0.01, 0.1).epochs == 30  # never more than asked


def test_pca_layers_are_pca_truncated_to_r():
    enc, dec = pca_layers(6, 2)
    q = np.random.default_rng(0).normal(size=(5, 6))
    np.testing.assert_array_equal(enc.forward(q), q[:, :2])
    np.testing.assert_array_equal(dec.forward(q[:, :2]), np.c_[q[:, :2], np.zeros((5, 4))])


def test_latent_search_end_to_end(bakes, tmp_path):
    # a tolerance met by any network: the search stops at latent_start
    s = registry.get("autoencoder").values(
        dict(**{**TINY, "latent_dim": None, "latent_start": 2}, latent_tolerance=10.0)
    )
    res = registry.get("autoencoder").trainer_function()(bakes.paths, tmp_path / "s.nrmodel", s)
    assert res["latent_dim"] == 2 and [e["latent_dim"] for e in res["latent_search"]] == [2]
    # the final error is measured on the exported decoder, shifted so the rest shape is exact,
    # so it differs from the search's (torch, unshifted) error, but not by an order of magnitude
    final, searched = res["ae_max_error_val_m"], res["latent_search"][0]["max_error_val_m"]
    assert np.isfinite(final) and 0.1 * searched < final < 10 * searched
    # below the PCA error (the floor) nothing can meet it: every size up to the cap is tried
    s = registry.get("autoencoder").values(
        dict(
            **{**TINY, "latent_dim": None, "max_latent_dim": 2, "epochs": 10}, latent_tolerance=1e-6
        )
    )
    res = registry.get("autoencoder").trainer_function()(bakes.paths, tmp_path / "t.nrmodel", s)
    assert [e["latent_dim"] for e in res["latent_search"]] == [1, 2]
    assert any("below the PCA error" in w for w in res["warnings"])
    assert any("No latent size up to 2" in w for w in res["warnings"])
    best = min(res["latent_search"], key=lambda e: e["max_error_val_m"])
    assert res["latent_dim"] == best["latent_dim"]


def test_early_stopping_keeps_the_best_held_out_weights():
    """A network that overfits (held-out data unlike the training data) stops ``patience``
    epochs after its best held-out loss and returns the weights of that epoch."""
    from neural_rom.training.autoencoder.trainer import _Trainer
    from neural_rom.training.run import Checkpoints

    rng = np.random.default_rng(0)
    q_train = rng.normal(size=(64, 6)) * [3, 2, 1, 0.5, 0.2, 0.1]
    q_check = rng.normal(size=(32, 6))  # another distribution: the held-out loss turns up
    s = registry.get("autoencoder").values(
        dict(hidden=[32, 32], learning_rate=1e-2, patience=20, batch_size=16)
    )
    t = _Trainer(
        s,
        q_train,
        q_check,
        torch.device("cpu"),
        Checkpoints(None, "x"),
        lambda: False,
        lambda v: None,
    )
    model, hist = t.fit(2, 2000, phase="final", progress=lambda *a: None, max_error=lambda q: 0.0)
    assert hist["stopped"] == "no held-out improvement", hist
    assert hist["epochs_trained"] - hist["best_epoch"] >= 20 and hist["epochs_trained"] < 2000
    assert hist["best_val_loss"] < hist["val_loss"]
    loss, _ = t._check_loss(model)
    assert loss * t.scale**2 == pytest.approx(hist["best_val_loss"], rel=1e-6)
    assert t.epochs_run == hist["epochs_trained"]


def test_estimate_is_reported_before_training_and_the_budget_cuts_epochs(bakes, tmp_path):
    events = []
    s = registry.get("autoencoder").values(
        dict(**{**TINY, "epochs": 1_000_000, "time_budget": 1.0})
    )
    res = registry.get("autoencoder").trainer_function()(
        bakes.paths,
        tmp_path / "b.nrmodel",
        s,
        progress=lambda f, m: events.append(("progress", m)),
        metric=lambda v: events.append(("metric", v)),
    )
    first_epoch = next(i for i, (kind, v) in enumerate(events) if kind == "metric" and "epoch" in v)
    estimate = [i for i, (kind, v) in enumerate(events) if kind == "metric" and "estimate_s" in v]
    said = [m for kind, m in events if kind == "progress" and "network training about" in m]
    assert estimate and estimate[0] < first_epoch and said, events[:12]
    assert events[estimate[0]][1]["time_budget_s"] == 1.0
    # a million epochs would take far longer than a second: cut (to at least the floor, 50)
    assert 50 <= res["epochs"] < 1_000_000 and res["estimate_s"] <= max(1.0, 50 * 0.1)
    assert any("over the time budget of 1 s" in w for w in res["warnings"]), res["warnings"]
    assert res["epochs_trained"] <= res["epochs"]


def test_a_network_worse_than_pca_falls_back_to_pca_with_a_warning(bakes, tmp_path):
    """Thirty epochs leave the network far less accurate than PCA with as many modes: the
    model holds PCA truncated to r instead, runs, and says so; without the fallback it keeps
    the network and says so too."""
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.registry import load_simulator

    out = tmp_path / "f.nrmodel"
    res = registry.get("autoencoder").trainer_function()(
        bakes.paths, out, registry.get("autoencoder").values(dict(**{**TINY, "pca_fallback": True}))
    )
    assert res["fallback"] == "pca"
    assert res["network_max_error_val_m"] > res["pca_r_max_error_val_m"]
    assert res["ae_max_error_val_m"] == pytest.approx(res["pca_r_max_error_val_m"], rel=1e-9)
    assert any(
        "less accurate on held-out bakes than PCA with 3 modes" in w
        and "uses those 3 PCA modes" in w
        for w in res["warnings"]
    ), res["warnings"]
    m = load_model(out)
    assert MLP.from_arrays(m.arrays, m.metadata["decoder"]).sizes == (3, 6)
    sim, _ = load_simulator(out)
    for _ in range(3):
        sim.step(FrameInputs())
    assert np.isfinite(sim.positions()).all()
    res = registry.get("autoencoder").trainer_function()(
        bakes.paths, tmp_path / "g.nrmodel", registry.get("autoencoder").values(dict(**TINY))
    )
    assert res["fallback"] is None
    assert any("the saved network is worse than a linear space" in w for w in res["warnings"])


# --------------------------------------------------------------------------- worker


def test_train_job_through_the_worker_process(bakes, tmp_path):
    from neural_rom.core.engine.protocol import FrameInputs
    from neural_rom.core.jobs import Job
    from neural_rom.core.registry import load_simulator

    out = tmp_path / "job.nrmodel"
    job = Job.start(
        {
            "kind": "train",
            "method": "autoencoder",
            "bakes": [str(p) for p in bakes.paths],
            "out": str(out),
            "settings": {**TINY, "rollout": True, "lbfgs_max_iters": 30, "keep_linear": False},
            "device": "auto",
        },
        log_dir=tmp_path,
    )
    job.wait(timeout=300)
    assert job.state == "done", (job.error, job.log_tail())
    assert job.result["method"] == "autoencoder" and job.result["device"] == "cpu"
    assert job.result["latent_dim"] == 3 and out.exists()
    assert {"epoch", "train_loss", "val_loss"} <= set(job.metrics)  # streamed per epoch
    roll = job.result["rollout"]
    assert roll["frames"] == 30 and np.isfinite(roll["max_error_m"]), roll
    sim, model = load_simulator(out)
    assert model.method == "autoencoder"
    for _ in range(3):
        sim.step(FrameInputs())
    assert np.isfinite(sim.positions()).all()


def test_exported_decoder_maps_the_encoded_rest_to_rest_exactly():
    """phi(enc(0)) = 0: the rest shape carries no stress, so a model left alone stays put."""
    import torch
    from neural_rom.training.autoencoder.trainer import _export

    torch.manual_seed(0)
    model = _AE(6, 2, [8, 8], "elu")
    q = np.random.default_rng(0).normal(size=(20, 6))
    enc, dec = _export(model, "elu", 1.0, q)
    z0 = enc.forward(np.zeros(6))
    np.testing.assert_allclose(dec.forward(z0), 0.0, atol=1e-12)
