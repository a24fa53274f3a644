"""The ``linear`` method (POD + cubature): its runtime is backward Euler in the linear subspace
of the bakes, :class:`core.reduced.integrator.SubspaceSimulation` (Fulton et al. 2019, eq. 2
and eq. 8 with ``u = U q``; that module's docstring says how a step is solved).

It follows :class:`core.simulator.Simulator`; what it shares with the other subspace
runtimes lives in :mod:`core.reduced`. Its trainer is :mod:`training.linear`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...data.modelfile import save_model
from ...physics import fem as _fem
from ...physics.colliders import ContactPoints
from ...physics.sim import SimSettings
from ...reduced.cubature import Cubature
from ...reduced.integrator import SubspaceSimulation
from ...reduced.model import (
    ONNX_POSITIONS,
    SUBSPACE_INPUTS,
    SUBSPACE_SETTINGS,
    subspace_arguments,
    subspace_payload,
)
from ...reduced.subspace import Subspace
from ...registry import Method

NAME = "linear"


class LinearSimulation(SubspaceSimulation):
    """The ``linear`` method's runtime: :class:`SubspaceSimulation` with the basis and
    cubature of a linear model file."""


#: The linear runtime's former name (tests, benchmarks and scripts use it).
ReducedSimulation = LinearSimulation


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


METHOD = Method(
    name=NAME,
    label="Linear (POD + cubature)",
    description="Linear subspace of the bakes (mass-weighted POD) with optimized cubature; "
    "Newton in the subspace. Fast to train (numpy), the baseline every method is measured "
    "against.",
    settings=SUBSPACE_SETTINGS,
    load=load,
    trainer="training.linear:train",
    needs_torch=False,
    inputs=SUBSPACE_INPUTS,
    onnx=onnx_graph,
    order=0,
    baseline=True,
)
