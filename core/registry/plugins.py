"""What the method and kind records share: ``"module:function"`` references resolved when
needed, the file a record registered outside the package came from (``origin``), and the
listeners told of every change."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import NeuralRomError

#: "neural_rom", or "bl_ext.<repository>.neural_rom" inside Blender
PACKAGE = __name__.rsplit(".", 3)[0]

#: called with no argument whenever a method or a data kind is registered or removed
LISTENERS: list[Callable[[], None]] = []


def resolve(ref: str | Callable) -> Callable:
    """A callable, or ``"module:function"`` (relative to the package when it starts with
    ``training``, ``core`` or ``addon``) imported now."""
    if callable(ref):
        return ref
    module, _, func = ref.partition(":")
    if module.split(".")[0] in ("training", "core", "addon"):  # inside this package
        module = f"{PACKAGE}.{module}"
    return getattr(importlib.import_module(module), func)


class Builtins:
    """The records of the package's own modules, registered once, on first use: each module
    or subpackage of ``package`` (``"core.methods"``) imported, and its ``attribute`` passed
    to ``register`` where it is a ``record_type``, in the order of ``key`` (default: by
    module name)."""

    def __init__(self, package: str, attribute: str, record_type: type, register, key=None):
        self.package, self.attribute, self.record_type = package, attribute, record_type
        self.register, self.key = register, key
        self.loaded = False

    def load(self) -> None:
        if self.loaded:
            return
        self.loaded = True  # first: registering may ask for the records again
        package = importlib.import_module(f"{PACKAGE}.{self.package}")
        found = []
        for info in pkgutil.iter_modules(package.__path__):
            mod = importlib.import_module(f"{package.__name__}.{info.name}")
            record = getattr(mod, self.attribute, None)
            if isinstance(record, self.record_type):
                found.append(record)
        for record in sorted(found, key=self.key) if self.key else found:
            self.register(record, origin="")


def caller_file(depth: int = 2) -> str:
    """The file of the function ``depth`` frames up (a record's default ``origin``)."""
    frame = inspect.currentframe()
    for _ in range(depth):
        frame = frame.f_back
    return str(Path(frame.f_code.co_filename).resolve())


def import_origin(origin: str, what: str = "method") -> None:
    """Import the file that registers a record (once per process), so a worker finds a
    record registered outside the package."""
    path = Path(origin)
    if not path.is_file():
        raise NeuralRomError(f"The file that defines this {what} is gone: {origin}.")
    mod_name = f"_neural_rom_method_{abs(hash(str(path)))}"
    if mod_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)


def find(table: dict, name: str, origin: str | None, what: str, known: Callable[[], list]):
    """``table[name]``; with ``origin`` (a file path), that file imported first when ``name``
    is not there yet (a worker finding a record registered outside the package). Raises
    NeuralRomError naming the ``known()`` records when there is none."""
    if name not in table and origin:
        import_origin(origin, what)
    try:
        return table[name]
    except KeyError:
        raise NeuralRomError(
            f"Unknown {what} {name!r}; this version of Neural ROM knows {', '.join(known())}."
        ) from None


def notify() -> None:
    for listener in list(LISTENERS):
        listener()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever a method or a data kind is registered or removed (the
    add-on rebuilds its per-method properties)."""
    if listener not in LISTENERS:
        LISTENERS.append(listener)


def remove_listener(listener: Callable[[], None]) -> None:
    if listener in LISTENERS:
        LISTENERS.remove(listener)
