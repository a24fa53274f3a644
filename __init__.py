"""Neural ROM: reduced-order and neural deformable simulation for Blender.

bpy is imported only inside register()/unregister(), so ``neural_rom.core`` and
``neural_rom.training`` import outside Blender. Subpackages load on first attribute access,
so a script using the PyPI ``bpy`` can write ``import bpy, neural_rom`` and then
``neural_rom.ui.cli.main([...])`` (``neural_rom.addon.cli.main``, its old name, too).
"""

import importlib

from .addon._moved import MOVED as _ADDON_MOVED
from .core._moved import install as _install_aliases
from .ui._moved import MOVED as _UI_MOVED

_SUBPACKAGES = ("addon", "core", "training", "ui")

# the UI's and the add-on's old module names (neural_rom.operators, neural_rom.addon.cli,
# neural_rom.addon.blender_mesh, ...) as the same module objects as the new ones
# (ui/_moved.py, addon/_moved.py)
_install_aliases(__name__, {**_UI_MOVED, **_ADDON_MOVED})


def __getattr__(name: str):
    if name in _SUBPACKAGES or name in _UI_MOVED:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    from .ui import registration

    registration.register()


def unregister() -> None:
    from .ui import registration

    registration.unregister()
