"""The linear method's settings: the basis and cubature settings every subspace method shares
(:mod:`core.methods.linear`)."""

from ...reduced.settings import SUBSPACE_SETTINGS

SETTINGS = SUBSPACE_SETTINGS
