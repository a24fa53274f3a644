"""The linear model file: :func:`save`, :func:`load` and the basis's ONNX graph
(:mod:`core.methods.linear`)."""

from __future__ import annotations

from pathlib import Path

from ...physics.sim import SimSettings
from ...reduced.model import save_subspace_model, subspace_arguments
from ...reduced.onnx import ONNX_POSITIONS
from .runtime import LinearSimulation

NAME = "linear"


def save(path: str | Path, **model) -> Path:
    """Write a linear (POD/modal + cubature) model file: ``model`` is
    :func:`core.reduced.model.save_subspace_model`'s keywords (``mesh_hash``, ``T``,
    ``subspace``, ``cubature``, ``contact``, ``material``, ``settings``, ``metadata``)."""
    return save_subspace_model(path, NAME, **model)


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
