"""The two comparisons: a model against a bake (:mod:`.bake`, the old ``addon.compare``)
and the methods against each other (:mod:`.methods`).

``neural_rom.addon.compare`` was one module before issue #29 and is this package now: its
names still read through the package (``addon.compare.error_colors``), lazily, from
:mod:`.bake`; patch them on :mod:`.bake` itself."""

import importlib


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in ("bake", "methods"):
        return importlib.import_module(f".{name}", __name__)
    return getattr(importlib.import_module(".bake", __name__), name)
