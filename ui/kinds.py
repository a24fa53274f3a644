"""The UI's side of the data kinds: a kind's own command-line and sidebar modules are named
after it (``ui/cli/kinds/<kind>.py``, ``ui/panels/kinds/<kind>.py``); the stage modules ask
them, through :func:`hook`, for what is the kind's instead of branching on its name."""

from __future__ import annotations

import importlib

from ..addon import kinds as addon_kinds
from ..core import registry

PACKAGE = __package__.rpartition(".")[0]

#: "<package>.<kind>" -> its module, or None where there is none (panels ask on every redraw)
_FOUND: dict = {}


def module(package: str, kind: str):
    """The module ``<package>.<kind>`` of the registered data kind ``kind`` (imported), or
    None when the kind is not registered or has none there."""
    if kind not in {k.name for k in registry.kinds()}:
        return None
    name = f"{package}.{kind}"
    if name not in _FOUND:
        try:
            _FOUND[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            _FOUND[name] = None
    return _FOUND[name]


def hook(package: str, kind: str, name: str, default=None):
    """The attribute ``name`` of the kind's module in ``package`` (see :func:`module`), or
    ``default`` when there is none."""
    return getattr(module(package, kind), name, default)


# ------------------------------------------------------------------ the kinds' records
# A kind's record (:class:`..addon.kinds.BlenderKind`) may name its box and its commands
# itself (a plug-in's, anywhere), beside the modules named after it here.


def _import(name: str):
    """The module ``name``; ``ui.``, ``addon.``, ``core.`` and ``training.`` ones are this
    package's."""
    if name.split(".")[0] in ("ui", "addon", "core", "training"):
        name = f"{PACKAGE}.{name}"
    return importlib.import_module(name)


def panel(obj):
    """``draw(layout, obj, context)`` of the box that a plug-in kind's record names for
    ``obj`` (:attr:`..addon.kinds.BlenderKind.panel`), or None (a built-in kind's boxes are
    panels of their own)."""
    record = addon_kinds.kind_of(obj)
    if not record.panel or not record.origin:
        return None
    module, _, function = record.panel.partition(":")
    return getattr(_import(module), function)


def cli_modules() -> list:
    """The command modules the kinds' records name (:attr:`..addon.kinds.BlenderKind.cli`),
    in the records' order."""
    return [_import(k.cli) for k in addon_kinds.records() if k.cli]
