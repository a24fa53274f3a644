"""ONNX export (core/onnxgraph.py): onnxruntime on the exported graph against the numpy
runtime. A Subspace Neural Physics model trained on a small pressed block rolls out 500
frames closed-loop in onnxruntime (its own state fed back) beside the runtime's own step; the
autoencoder's and Shen's decoders and the linear basis map random coordinates to the
runtime's positions; a cloth-like model's linear normals; the refusals (a method without a
graph, onnx missing) say what to do.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX export is checked where onnx is installed")
ort = pytest.importorskip("onnxruntime", reason="the export is checked against onnxruntime")

from neural_rom.core import bake as bk  # noqa: E402
from neural_rom.core import registry  # noqa: E402
from neural_rom.core.data.files import mesh_hash  # noqa: E402
from neural_rom.core.data.modelfile import save_model  # noqa: E402
from neural_rom.core.data.onnx import OPSET, export_onnx  # noqa: E402
from neural_rom.core.engine.protocol import FrameInputs  # noqa: E402
from neural_rom.core.errors import NeuralRomError  # noqa: E402
from neural_rom.core.geometry.grid import grid_tetmesh  # noqa: E402
from neural_rom.core.methods import autoencoder, linear, shen, snp  # noqa: E402
from neural_rom.core.physics.sim import SimSettings, boundary_vertices  # noqa: E402
from neural_rom.core.reduced.cubature import Cubature  # noqa: E402
from neural_rom.core.reduced.nnet import MLP  # noqa: E402
from neural_rom.core.reduced.pose import IDENTITY  # noqa: E402
from neural_rom.core.reduced.subspace import Subspace  # noqa: E402

from .bench_modules import load_bench  # noqa: E402
from .test_latent import MAT, beam, elu_decoder  # noqa: E402

# The bar: onnxruntime reproduces the numpy runtime to 1e-5 (m, and PCA coordinates
# in m) over a 500-frame rollout. Measured on the block below in float32: see the test.
TOL_FLOAT32 = 1e-5
# float64 graphs: the same products in another order (BLAS vs onnxruntime's kernels)
TOL_FLOAT64 = 1e-11


def session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    """An snp model of a soft block pressed by a sphere (bench/snp.py's scene, smaller: 4
    bakes of 40 frames, 20 epochs; contact features on, as the automatic setting picks)."""
    pytest.importorskip("torch", reason="training the snp model needs torch (the 3.11 line)")
    from neural_rom.core import registry

    d = tmp_path_factory.mktemp("onnx_snp")
    X, T = grid_tetmesh((0.2, 0.2, 0.3), (2, 2, 3))
    spec = load_bench("snp").block_spec(X, frames=40, variants=4)
    paths = bk.bake_variants(SimpleNamespace(X=X, T=T), spec, d, "block")
    out = d / "block.nrmodel"
    registry.get("snp").trainer_function()(
        paths,
        out,
        registry.get("snp").values(dict(epochs=20, validation_fraction=0.25)),
        checkpoint_dir=None,
    )
    sim, model = registry.load_simulator(out)
    return SimpleNamespace(X=X, T=T, out=out, sim=sim, model=model, paths=paths)


def runtime_rollout(block, frames=500):
    """The numpy runtime's own step over ``frames`` frames of the held-out bake's colliders
    played forward and back: per frame the raw features it computed, z and the positions
    in the frame."""
    from neural_rom.core.bake import BakeSpec, setup_scenario
    from neural_rom.core.data.cache import BakeCache

    cache = BakeCache.open(block.paths[-1])
    _, driver = setup_scenario(block.X, block.T, BakeSpec.from_dict(cache.meta["spec"]))
    F = len(driver.forces)
    cycle = list(range(F)) + list(range(F - 2, 0, -1))
    sim = snp.SNPSimulation(block.sim.p, block.sim.settings)
    start = (sim.z1.copy(), sim.z2.copy())
    feats, Z, Y = [], [], []
    for t in range(1, frames + 1):
        cols = driver.colliders(cycle[t % len(cycle)])
        feats.append(sim.features(cols, (sim.poses[0],) * 3, sim.colliders))
        sim.step(FrameInputs(colliders=cols))
        Z.append(sim.z1.copy())
        Y.append(sim.decode(sim.z1))
    return start, np.array(feats), np.array(Z), np.array(Y)


def onnx_rollout(path, start, feats):
    s = session(path)
    dtype = np.float32 if "float32" in str(path) else np.float64
    z1, z2 = (a[None].astype(dtype) for a in start)
    Z, Y = [], []
    for f in feats:
        z, y = s.run(
            ["z", "positions"], {"z_prev": z1, "z_prev2": z2, "features": f[None].astype(dtype)}
        )
        z2, z1 = z1, z
        Z.append(z[0])
        Y.append(y[0])
    return np.array(Z, dtype=np.float64), np.array(Y, dtype=np.float64)


def test_snp_step_in_onnxruntime_reproduces_the_runtime_over_500_frames(block, tmp_path):
    start, feats, Z, Y = runtime_rollout(block)
    assert np.abs(Y - block.X).max() > 5e-3  # the sphere presses: a motion, not rest
    assert feats.shape[1] == len(block.model.metadata["feature_names"])
    for precision, tol in (("float32", TOL_FLOAT32), ("float64", TOL_FLOAT64)):
        path = tmp_path / f"block_{precision}.onnx"
        info = export_onnx(block.out, path, precision=precision)
        assert [v["name"] for v in info["inputs"]] == ["z_prev", "z_prev2", "features"]
        assert [v["name"] for v in info["outputs"]] == ["z", "positions"]  # no normal model
        m = onnx.load(str(path))
        assert m.opset_import[0].version == OPSET and m.ir_version == 8
        props = {p.key: p.value for p in m.metadata_props}
        assert (
            json.loads(props["neural_rom.feature_names"]) == block.model.metadata["feature_names"]
        )
        np.testing.assert_allclose(json.loads(props["neural_rom.z_rest"]), start[0], atol=1e-15)
        Zo, Yo = onnx_rollout(path, start, feats)
        dz, dy = np.abs(Zo - Z).max(), np.abs(Yo - Y).max()
        print(f"{precision}: 500 frames closed loop, max |dz| {dz:.2e}, max |dy| {dy:.2e} m")
        assert dz < tol and dy < tol


def test_snp_normals_output_is_the_linear_normal_model(block, tmp_path):
    """A model with the linear normal model (a cloth's; here the block's with a random one)
    exports its normals: unit, in the frame, equal to :func:`linear_normals`."""
    p = block.sim.p
    rng = np.random.default_rng(0)
    n3 = 3 * len(p.X)
    p2 = replace(p, normal_mean=rng.normal(size=n3), normal_basis=rng.normal(size=(n3, p.u)))
    arrays, meta = p2.to_arrays()
    arrays["T"] = block.T
    meta = {**block.model.metadata, **meta}
    src = save_model(
        tmp_path / "normals.nrmodel", method="snp", mesh_hash="x", arrays=arrays, metadata=meta
    )
    path = tmp_path / "normals.onnx"
    info = export_onnx(src, path)
    assert [v["name"] for v in info["outputs"]] == ["z", "positions", "normals"]
    p2 = snp.SNPParameters.from_arrays(arrays, meta)
    z = p.z_lo + (p.z_hi - p.z_lo) * rng.random((8, p.u))
    f = np.tile(p.encoder.mean, (8, 1))
    s = session(path)
    zo, No = s.run(
        ["z", "normals"],
        {
            "z_prev": z.astype(np.float32),
            "z_prev2": z.astype(np.float32),
            "features": f.astype(np.float32),
        },
    )
    ref = snp.linear_normals(p2.normal_mean, p2.normal_basis, zo, [IDENTITY] * 8)
    np.testing.assert_allclose(np.linalg.norm(No, axis=-1), 1.0, atol=1e-6)
    assert np.abs(No - ref).max() < 1e-5


def _latents(rng, lo, hi, count=200):
    return lo + (hi - lo) * rng.random((count, len(lo)))


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    """Model files of the three subspace methods on a clamped beam (random networks: the
    export does not care how they were trained)."""
    d = tmp_path_factory.mktemp("onnx_dec")
    X, T, pinned, sub = beam(k=8)
    h = mesh_hash(X, T)
    els = np.arange(0, len(T), 3)
    common = dict(
        mesh_hash=h,
        T=T,
        subspace=Subspace(X, sub.U, sub.mass, pinned, kind="pod"),
        cubature=Cubature(els, np.full(len(els), 3.0), {"method": "test"}),
        contact=(boundary_vertices(T), sub.mass[boundary_vertices(T)]),
        material=MAT,
        settings=SimSettings(),
    )
    r = 3
    dec = elu_decoder(r, sub.k, seed=1)
    # Shen: sin and tanh layers (its runtime needs derivatives of every order)
    rng = np.random.default_rng(2)
    n_p, n_z = 3, 2
    sizes = [n_p + n_z, 16, 16, sub.k]
    W = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in zip(sizes[:-1], sizes[1:])]
    b = [0.1 * rng.normal(size=o) for o in sizes[1:]]
    sdec = MLP(W, b, ["sin", "tanh", "identity"])
    return SimpleNamespace(
        X=X,
        k=sub.k,
        linear=linear.save(d / "lin.nrmodel", **common),
        ae=autoencoder.save(d / "ae.nrmodel", decoder=dec, encoder=None, **common),
        shen=shen.save(
            d / "shen.nrmodel", n_p=n_p, decoder=sdec, encoder=None, decoder_sees_p=True, **common
        ),
        shen_nop=shen.save(
            d / "shen_nop.nrmodel",
            n_p=n_p,
            decoder=MLP([W[0][:, n_p:], W[1], W[2]], b, ["softplus", "tanh", "identity"]),
            encoder=None,
            **common,
        ),
    )


@pytest.mark.parametrize("which", ["linear", "ae", "shen", "shen_nop"])
def test_decoder_graphs_give_the_runtimes_positions(decoders, which, tmp_path):
    path = tmp_path / f"{which}.onnx"
    src = getattr(decoders, which)
    info = export_onnx(src, path, precision="float64")
    sim, _ = registry.load_simulator(src)
    latent = info["inputs"][0]
    width = latent["shape"][1]
    rng = np.random.default_rng(3)
    R = _latents(rng, -np.ones(width), np.ones(width)) * (0.05 if which == "linear" else 1.0)
    ref = []
    for r in R:
        if which == "linear":
            sim.reset(q=r)
        elif which == "ae":
            sim.reset(z=r)
        else:
            sim.reset(r)
        ref.append(sim.positions())
    ref = np.array(ref)
    assert np.abs(ref - decoders.X).max() > 1e-2
    s = session(path)
    (got,) = s.run(["positions"], {latent["name"]: R})
    err64 = np.abs(got - ref).max()
    export_onnx(src, tmp_path / "f32.onnx")
    (got32,) = session(tmp_path / "f32.onnx").run(
        ["positions"], {latent["name"]: R.astype(np.float32)}
    )
    err32 = np.abs(got32 - ref).max()
    print(f"{which}: float64 {err64:.2e} m, float32 {err32:.2e} m over {len(R)} latents")
    assert err64 < TOL_FLOAT64 and err32 < TOL_FLOAT32


def test_a_method_without_a_graph_is_refused_naming_the_ones_that_export(tmp_path):
    record = registry.Method(
        name="no_graph_test",
        label="No Graph",
        description="a test method",
        settings=(),
        load=lambda model, **kw: None,
        trainer=lambda *a, **k: {},
    )
    registry.register(record)
    try:
        src = save_model(
            tmp_path / "m.nrmodel",
            method="no_graph_test",
            mesh_hash="x",
            arrays={"a": np.zeros(1)},
            metadata={},
        )
        with pytest.raises(NeuralRomError, match="no network step or decoder") as e:
            export_onnx(src, tmp_path / "m.onnx")
        assert "Subspace Neural Physics" in str(e.value) and not (tmp_path / "m.onnx").exists()
    finally:
        registry.unregister("no_graph_test")


def test_without_onnx_the_message_says_what_to_install(decoders, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    with pytest.raises(NeuralRomError, match="pip install onnx"):
        export_onnx(decoders.linear, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
