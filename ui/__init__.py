"""The user's entry points, the one layer above addon/: registration, operators, panels and
the command line. Modules load on first attribute access (``neural_rom.ui.cli``), so
importing the package needs nothing."""

from ..addon import submodule_getattr

__getattr__ = submodule_getattr(__name__)
