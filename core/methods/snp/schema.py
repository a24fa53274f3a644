"""The model file of a Subspace Neural Physics model: :func:`save`, :func:`load` and its ONNX
graph (:func:`onnx_graph`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...data.modelfile import save_model
from ...errors import CacheError, SimulationError
from ...physics.sim import SimSettings
from ...reduced.nnet import MLP
from .features import feature_names
from .parameters import SNPParameters
from .runtime import FoldedStep, SNPSimulation

NAME = "snp"


# ------------------------------------------------------------------------------------------
# Files and the record
# ------------------------------------------------------------------------------------------


def save(
    path: str | Path,
    *,
    params: SNPParameters,
    mesh_hash: str,
    T: np.ndarray,
    material,
    settings: SimSettings,
    metadata: dict | None = None,
) -> Path:
    """Write a Subspace Neural Physics model file.

    Parameters
    ----------
    params : the trained model
    mesh_hash, T : the tet mesh the bakes were made on (T is kept for the record)
    material, settings : the bakes' physics (the time step is the model's)
    metadata : training settings and metrics (JSON-able)
    """
    arrays, meta = params.to_arrays()
    arrays["T"] = np.asarray(T, dtype=np.int64)
    meta.update(
        material=material.to_dict(),
        settings=settings.to_dict(),
        feature_names=feature_names(params.kinds, params.contact),
        **(metadata or {}),
    )
    return save_model(path, method=NAME, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def load(model, *, settings: SimSettings | None = None, colliders=None) -> SNPSimulation:
    """The runtime of an opened Subspace Neural Physics model file. A learned model steps at
    the frame rate it was trained at: another time step is refused."""
    meta = model.metadata
    stored = SimSettings(**meta["settings"])
    if settings is not None and abs(settings.dt - stored.dt) > 1e-9 * stored.dt:
        raise SimulationError(
            f"This Subspace Neural Physics model was trained at {stored.dt:.6g} s per frame and "
            f"cannot step {settings.dt:.6g} s: set the scene's frame rate to "
            f"{1 / stored.dt:.6g} fps, or re-bake and retrain at this one."
        )
    try:
        params = SNPParameters.from_arrays(model.arrays, meta)
    except SimulationError as e:
        raise CacheError(f"{Path(model.path).name}: {e} Retrain the model.") from e
    return SNPSimulation(params, stored, colliders)


def onnx_graph(model, g) -> str:
    """The step of an opened model file as an ONNX graph (:mod:`core.onnxgraph`): eq. (1)
    and (3) as :class:`FoldedStep` runs them, the decode to positions and, for a model with
    the linear normal model, the normals; all in the reference frame. The inputs are the
    model file's own: its number of modes and its external features (their names from the
    file), so a model trained with other inputs exports as they are."""
    p = SNPParameters.from_arrays(model.arrays, model.metadata)
    fold, u, e, n = FoldedStep(p), p.u, len(p.encoder.lo), len(p.X)
    names = list(model.metadata.get("feature_names") or feature_names(p.kinds, p.contact))
    if len(names) != e:
        raise CacheError(
            f"{Path(model.path).name} names {len(names)} external features but its encoder "
            f"takes {e}; the file is corrupt: retrain the model."
        )
    state = "PCA coordinates (m) of the shape in the reference frame"
    z1 = g.input("z_prev", ["B", u], f"z_(t-1): {state}, last frame")
    z2 = g.input("z_prev2", ["B", u], f"z_(t-2): {state}, the frame before")
    f = g.input(
        "features",
        ["B", e],
        "f_t: this frame's external state, raw (SI units, in the reference frame; the "
        "metadata's neural_rom.feature_names says which is which); clipped to the training "
        "range inside the graph",
    )
    # eq. (1) with numpy's order of operations: alpha z1 + beta (z1 - z2)
    z = g.node(
        "Add",
        g.node("Mul", g.const(p.alpha, "alpha"), z1),
        g.node("Mul", g.const(p.beta, "beta"), g.node("Sub", z1, z2)),
    )
    if fold.W:
        fk = g.node("Gather", f, g.const(p.encoder.keep, "keep", integer=True), axis=1)
        fk = g.node("Min", g.node("Max", fk, g.const(fold.lo, "f_lo")), g.const(fold.hi, "f_hi"))
        h = g.node("Concat", z1, z2, fk, axis=1)
        z = g.node("Add", z, g.mlp(h, MLP(fold.W, fold.b, p.net.activations), "phi"))
    z = g.node("Min", g.node("Max", z, g.const(p.z_lo, "z_lo")), g.const(p.z_hi, "z_hi"))
    g.output(z, "z", ["B", u], f"z_t: {state}, this frame; feed it back as z_prev")
    g.affine_positions(
        z,
        p.mean,
        p.U,
        "positions",
        "y_mu + U z_t (m), vertex positions in the reference frame: world = R y + c with the "
        "frame's rotation R and origin c (the identity for an object with no pins and no "
        "driver); the runtime then pushes vertices out of colliders (sec. 6.4)",
    )
    if p.normal_basis is not None:
        N = g.node("MatMul", z, g.const(p.normal_basis.T, "Q_T"))
        N = g.node("Add", N, g.const(p.normal_mean, "normal_mean"))
        N = g.node("Reshape", N, g.const([-1, n, 3], "shape_n3", integer=True))
        length = g.node(
            "Sqrt",
            g.node("ReduceSum", g.node("Mul", N, N), g.const([2], "axis2", integer=True)),
        )
        length = g.node("Max", length, g.const(1e-30, "tiny"))
        g.output(
            g.node("Div", N, length),
            "normals",
            ["B", n, 3],
            "unit vertex normals in the reference frame, by the linear normal model "
            "(sec. 6.3): world = R n",
        )
    g.metadata.update(
        {
            "neural_rom.feature_names": json.dumps(names),
            "neural_rom.z_rest": json.dumps((p.U.T @ (p.X - p.mean).reshape(-1)).tolist()),
            "neural_rom.dt": repr(float(model.metadata["settings"]["dt"])),
            "neural_rom.collider_kinds": json.dumps(p.kinds),
            "neural_rom.collider_sizes": json.dumps(p.sizes.tolist()),
            "neural_rom.frame": "driven"
            if p.reference_rest is not None
            else ("pins" if len(p.pinned) else "world"),
        }
    )
    return (
        "Subspace Neural Physics (Holden 2019) step: z_t from z_(t-1), z_(t-2) and the "
        "frame's external features; start both at neural_rom.z_rest (the rest shape)."
    )
