"""The ``linear`` method (POD + cubature): its runtime is backward Euler in the linear subspace
of the bakes, :class:`core.reduced.integrator.SubspaceSimulation` (Fulton et al. 2019, eq. 2
and eq. 8 with ``u = U q``; that module's docstring says how a step is solved).

It follows :class:`core.simulator.Simulator`; what it shares with the other subspace
runtimes lives in :mod:`core.reduced`. Its trainer is :mod:`training.linear`.
"""

from ...reduced.model import SUBSPACE_INPUTS
from ...registry import Method
from .runtime import LinearSimulation, ReducedSimulation
from .schema import NAME, load, onnx_graph, save
from .settings import SETTINGS

METHOD = Method(
    name=NAME,
    label="Linear (POD + cubature)",
    description="Linear subspace of the bakes (mass-weighted POD) with optimized cubature; "
    "Newton in the subspace. Fast to train (numpy), the baseline every method is measured "
    "against.",
    settings=SETTINGS,
    load=load,
    trainer="training.linear:train",
    needs_torch=False,
    inputs=SUBSPACE_INPUTS,
    onnx=onnx_graph,
    order=0,
    baseline=True,
)

__all__ = [
    "METHOD",
    "NAME",
    "SETTINGS",
    "LinearSimulation",
    "ReducedSimulation",
    "load",
    "onnx_graph",
    "save",
]
