"""The UI's side of the data kinds: a kind's own command-line and sidebar modules are named
after it (``ui/cli/kinds/<kind>.py``, ``ui/panels/kinds/<kind>.py``); the stage modules ask
them, through :func:`hook`, for what is the kind's instead of branching on its name."""

from __future__ import annotations

import importlib

from ..core import registry

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
