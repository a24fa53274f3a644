"""The linear model file: :func:`save`, :func:`load` and the basis's ONNX graph
(:mod:`core.methods.linear`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...data.modelfile import save_model
from ...physics import fem as _fem
from ...physics.colliders import ContactPoints
from ...physics.sim import SimSettings
from ...reduced.cubature import Cubature
from ...reduced.model import subspace_arguments, subspace_payload
from ...reduced.onnx import ONNX_POSITIONS
from ...reduced.subspace import Subspace
from .runtime import LinearSimulation

NAME = "linear"


def save(
    path: str | Path,
    *,
    mesh_hash: str,
    T: np.ndarray,
    subspace: Subspace,
    cubature: Cubature,
    contact: ContactPoints | tuple[np.ndarray, np.ndarray],
    material: _fem.Material,
    settings: SimSettings,
    metadata: dict | None = None,
) -> Path:
    """Write a linear (POD/modal + cubature) model file.

    Parameters
    ----------
    path : target ``.nrmodel`` file (written atomically)
    mesh_hash : hash of the tet mesh (world space, as baked) the model belongs to
    T : (m, 4) int array
    subspace, cubature : the trained basis and cubature rule
    contact : ContactPoints or (vertices (s,), masses (s,)): the contact sample
    material, settings : the physics the model steps with
    metadata : training settings and metrics (JSON-able)
    """
    arrays, meta = subspace_payload(T, subspace, cubature, contact, material, settings)
    meta.update(metadata or {})
    return save_model(path, method=NAME, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def load(model, *, settings: SimSettings | None = None, colliders=None) -> LinearSimulation:
    """The runtime of an opened linear model file."""
    return LinearSimulation(**subspace_arguments(model, settings, colliders))


def onnx_graph(model, g) -> str:
    """The basis of an opened linear model file as an ONNX graph (:mod:`core.onnxgraph`):
    reduced coordinates ``q`` -> positions, one MatMul. The dynamics (Newton on the
    cubature energy) are not a network step and stay in the runtime."""
    X, U = model.arrays["X"], model.arrays["U"]
    q = g.input("q", ["B", U.shape[1]], "q: reduced coordinates (m), the weights of the basis")
    g.affine_positions(q, X, U, "positions", ONNX_POSITIONS)
    return "Linear (POD) model's basis: positions = X + U q."
