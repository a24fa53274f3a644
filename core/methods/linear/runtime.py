"""The linear runtime: :class:`core.reduced.integrator.SubspaceSimulation` on the basis and
cubature of a linear model file (:mod:`core.methods.linear`)."""

from __future__ import annotations

from ...reduced.integrator import SubspaceSimulation


class LinearSimulation(SubspaceSimulation):
    """The ``linear`` method's runtime: :class:`SubspaceSimulation` with the basis and
    cubature of a linear model file."""


#: The linear runtime's former name (scripts and plug-ins may use it).
ReducedSimulation = LinearSimulation
