"""The bpy glue of Neural ROM. Modules load on first attribute access
(``neural_rom.addon.jobs``), so importing the package needs nothing."""

import importlib


def submodule_getattr(package: str):
    """A package's ``__getattr__`` that imports ``<package>.<name>`` on first access (the
    UI layer's package uses it too)."""

    def __getattr__(name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return importlib.import_module(f".{name}", package)
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__


__getattr__ = submodule_getattr(__name__)
