"""Old module paths of core, kept working after issue #29 nested it by concept.

``neural_rom.core.fem`` is now ``neural_rom.core.physics.fem``; scripts, plug-ins and the
README's older examples import the old names. :class:`AliasFinder` answers an import of an
old name (or of a module under it) with the module object of the new one, imported once:
``import neural_rom.core.fem`` and ``import neural_rom.core.physics.fem`` give the same
object, so a monkeypatch through either name is seen by both. The finder is keyed on this
package's own name, so it works wherever the package is loaded (``neural_rom``,
``bl_ext.<repository>.neural_rom`` inside Blender, the worker's copy).

``MOVED`` maps old -> new, relative to ``core``. Names that stayed where they were but became
packages (``core.bake``, ``core.jobs``, ``core.registry``, ``core.methods.<m>``) need no entry:
the package's ``__init__`` holds the old module's body.

Which old names are public and permanent (:data:`PUBLIC`, :data:`PUBLIC_ROOT`): the plug-in
API (``core.sim.StepReport``, ``core.simulator.SimulatorBase``; ``core.registry`` never
moved), the README's Python API before issue 29 (``from neural_rom.core import bake, cache,
fem, mesher, surface``, ``cage``, ``core.sim.FrameInputs``) and the command line's old name,
``neural_rom.addon.cli.main`` (:mod:`ui._moved`: farm templates of earlier releases, the
README's headless use before, scripts). They stay for good. The other entries keep older
scripts and monkeypatch targets working; the package, its tests (but those of the aliases
themselves), bench and scripts use the new names only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# move29: skip-file (the codemod leaves the old names of this table alone)
MOVED = {
    "tetmesh": "geometry.tetmesh",
    "surface": "geometry.surface",
    "mesher": "geometry.mesher",
    "cage": "geometry.cage",
    "embedding": "geometry.embedding",
    "winding": "geometry.winding",
    "grid": "geometry.grid",
    "fem": "physics.fem",
    "sim": "physics.sim",
    "colliders": "physics.colliders",
    "linsolve": "physics.linsolve",
    "blas": "physics.blas",
    "quasistatic": "physics.quasistatic",
    "poke": "physics.poke",
    "files": "data.files",
    "cache": "data.cache",
    "modelfile": "data.modelfile",
    "meshfile": "data.meshfile",
    "pc2": "data.pc2",
    "onnxgraph": "data.onnx",
    "scenarios": "bake.scenarios",
    "motion": "bake.motion",
    "simulator": "engine.protocol",
    "framecache": "engine.timeline",
    "compare": "engine.replay",
    "subspace": "reduced.subspace",
    "cubature": "reduced.cubature",
    "nnet": "reduced.nnet",
    "frame": "reduced.pose",
    "methods.common": "reduced.model",
    "hocs": "methods.shen.hocs",
    "clothbake": "kinds.cloth.source",
    "face": "kinds.face.rig",
    "faceinputs": "kinds.face.inputs",
    "tetjob": "jobs.tetrahedralize",
    "simjob": "jobs.simulate",
    "comparejob": "jobs.compare",
    "facejob": "jobs.face",
    "methodcompare": "jobs.compare_methods",
    "prepare": "bake.prepare",
}

#: The public, permanent old names of core (module docstring), relative to ``core``.
PUBLIC = ("cache", "cage", "fem", "mesher", "sim", "simulator", "surface")
#: ... and of the UI layer, relative to the package root (:mod:`ui._moved`).
PUBLIC_ROOT = ("addon.cli",)


class AliasLoader(importlib.abc.Loader):
    """Loads an old name by importing the new one and handing back that module object."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return None  # a placeholder the import system discards in exec_module

    def exec_module(self, module) -> None:
        # the import system returns what sys.modules holds under the old name afterwards, so
        # the placeholder is replaced by the real module (whose __spec__ stays its own)
        sys.modules[module.__name__] = importlib.import_module(self.target)


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``<prefix>.<old>[.<rest>]`` for each old name of ``table``."""

    def __init__(self, prefix: str, table: dict[str, str]):
        self.prefix = prefix + "."
        self.table = table

    def new_name(self, fullname: str) -> str | None:
        if not fullname.startswith(self.prefix):
            return None
        parts = fullname[len(self.prefix) :].split(".")
        for i in range(len(parts), 0, -1):
            new = self.table.get(".".join(parts[:i]))
            if new is not None:
                return self.prefix + ".".join([new, *parts[i:]])
        return None

    def find_spec(self, fullname, path=None, target=None):
        new = self.new_name(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, AliasLoader(new))


def install(package: str, table: dict[str, str] = MOVED) -> AliasFinder:
    """Put the finder for ``package``'s old names first on ``sys.meta_path`` (replacing one
    a previous load of the same package left there)."""
    finder = AliasFinder(package, table)
    sys.meta_path[:] = [
        f
        for f in sys.meta_path
        if not (type(f).__name__ == "AliasFinder" and getattr(f, "prefix", None) == finder.prefix)
    ]
    sys.meta_path.insert(0, finder)
    return finder


def getattr_of(package: str, name: str, table: dict[str, str] = MOVED):
    """A package ``__getattr__`` that imports an old module name on attribute access
    (``neural_rom.core.fem`` without importing it first)."""
    if name in table:
        return importlib.import_module(f"{package}.{name}")
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
