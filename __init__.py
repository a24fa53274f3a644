"""Neural ROM: reduced-order and neural deformable simulation for Blender.

bpy is imported only inside register()/unregister(), so ``neural_rom.core`` and
``neural_rom.training`` import outside Blender. Subpackages load on first attribute access,
so a script using the PyPI ``bpy`` can write ``import bpy, neural_rom`` and then
``neural_rom.addon.cli.main([...])``.
"""

import importlib

_SUBPACKAGES = ("addon", "core", "operators", "panels", "training")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    from .addon import registration

    registration.register()


def unregister() -> None:
    from .addon import registration

    registration.unregister()
