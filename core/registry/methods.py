"""The method records: one :class:`Method` per reduced-model method, and everything that loops
over them (see the package docstring)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CacheError, NeuralRomError
from .inputs import BAKE_INPUTS_NEEDED, INPUTS
from .kinds import BAKE_KINDS
from .plugins import Builtins, caller_file, find, notify, resolve
from .settings import Setting


@dataclass
class Method:
    """The registry record of one method (see the module docstring).

    Attributes
    ----------
    name : identifier, stored in model files ("linear")
    label, description : for the Train menu and ``--help``
    settings : the training settings, in the order the panel shows them
    load : ``load(model, *, settings, colliders) -> Simulator``; ``model`` is the opened
        :class:`core.modelfile.Model` (already checked against the mesh)
    trainer : ``"module:function"`` relative to the package (``"training.linear:train"``)
        or an absolute module path, imported lazily in the worker; or a callable:
        ``train(run)`` with ``run`` a ``training.run.TrainingRun`` whose ``settings`` are
        :meth:`values` (checked once, by the worker), or of the older signature
        ``trainer(bakes, out, settings, *, expect_mesh_hash, checkpoint_dir, progress,
        should_cancel, metric, device)`` with ``settings`` the dict :meth:`validate`
        returned; it returns a JSON-able result dict.
    needs_torch : training needs PyTorch in the job interpreter
    inputs : the frame inputs it takes (keys of :data:`INPUTS`); others are ignored
    requires : the frame inputs every frame must carry (a subset of ``inputs``)
    trains_on : the training data it learns from (keys of :data:`BAKE_KINDS`)
    onnx : the model's ONNX graph (:mod:`core.onnxgraph`), or None when its runtime is no
        fixed array program: ``onnx(model, graph) -> doc`` adds the inputs, nodes and outputs
        of the opened model file to the :class:`core.onnxgraph.OnnxGraph` and returns the
        graph's description; a callable or ``"module:function"``, as ``trainer``
    order : position in menus (built-ins: linear first)
    baseline : the PCA baseline the other methods are measured against (one method: the
        linear one); its ``k`` setting is its DOFs, so a comparison trains it at each other
        method's DOFs (:func:`baseline`)
    keeps_baseline_setting : the name of its bool setting that keeps the baseline's model in
        place of its own when that replays better (the autoencoder's ``keep_linear``), or
        "": Compare Methods sets it off, the table being that comparison
    setup_cost : the seconds its training takes beside its time budget (its PCA, cubature,
        rollout, the job's start), as a multiple of the linear method's whole training:
        what Compare Methods sets aside for it (:func:`core.jobs.compare_methods.estimate_cost`)
    origin : the file that defined the record (set by :func:`register`)
    """

    name: str
    label: str
    description: str
    settings: tuple[Setting, ...]
    load: Callable
    trainer: str | Callable
    needs_torch: bool = False
    inputs: frozenset = frozenset()
    requires: frozenset = frozenset()
    trains_on: frozenset = frozenset({"fem"})
    onnx: str | Callable | None = None
    order: int = 100
    baseline: bool = False
    keeps_baseline_setting: str = ""
    setup_cost: float = 1.0
    origin: str = ""
    _by_name: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.inputs, self.requires = frozenset(self.inputs), frozenset(self.requires)
        unknown = (self.inputs | self.requires) - set(INPUTS)
        if unknown:
            raise ValueError(f"method {self.name}: unknown inputs {sorted(unknown)}")
        if not self.requires <= self.inputs:
            raise ValueError(f"method {self.name}: requires inputs it does not take")
        self.trains_on = frozenset(self.trains_on)
        if not self.trains_on or not self.trains_on <= set(BAKE_KINDS):
            raise ValueError(
                f"method {self.name}: trains_on {sorted(self.trains_on)} is not a non-empty "
                f"subset of {sorted(BAKE_KINDS)}"
            )
        self._by_name = {s.name: s for s in self.settings}
        if len(self._by_name) != len(self.settings):
            raise ValueError(f"method {self.name}: two settings share a name")
        if self.keeps_baseline_setting and self.keeps_baseline_setting not in self._by_name:
            raise ValueError(
                f"method {self.name}: keeps_baseline_setting {self.keeps_baseline_setting!r} "
                "is not one of its settings"
            )

    @property
    def other_mesh(self) -> bool:
        """Whether a model of this method runs on a mesh it was not trained on."""
        return "other_mesh" in self.inputs

    def check_trains_on(self, kind: str) -> None:
        """Refuse training data of ``kind`` (a key of :data:`BAKE_KINDS`) that this method
        does not learn from, saying what it needs and which methods take what there is."""
        if kind in self.trains_on:
            return
        takers = [m.label for m in methods_for(kind)]
        raise NeuralRomError(
            f"The {self.label} method trains on "
            + " or ".join(BAKE_KINDS[k] for k in sorted(self.trains_on))
            + f", not on {BAKE_KINDS.get(kind, kind)}"
            + (f"; methods that do: {', '.join(takers)}." if takers else ".")
        )

    def check_bake_inputs(self, inputs) -> None:
        """Refuse bakes driven by inputs this method cannot take (``inputs``: keys of
        :data:`INPUTS`, :meth:`core.cache.BakeCache.driven_by`) before any training: a model
        that cannot follow the bakes' animated pins would be trained for nothing. Names the
        methods that take them."""
        missing = sorted((set(inputs) & BAKE_INPUTS_NEEDED) - self.inputs)
        if not missing:
            return
        takers = [
            m.label for m in methods() if set(missing) <= m.inputs and self.trains_on & m.trains_on
        ]
        raise NeuralRomError(
            f"The bakes have {', '.join(INPUTS[k] for k in missing)}, which the {self.label} "
            "method cannot follow; nothing was trained. "
            + (f"Train {' or '.join(takers)} instead" if takers else "No method takes them")
            + ", or bake with the pins still."
        )

    def setting(self, name: str) -> Setting:
        return self._by_name[name]

    def defaults(self) -> dict:
        return {s.name: s.default for s in self.settings}

    def validate(self, values: Mapping | None = None) -> dict:
        """Every setting of the method, ``values`` checked by value and defaults filled in.

        Raises NeuralRomError naming an unknown field (with the valid ones) or a value out
        of its range (with the range).
        """
        values = dict(values or {})
        unknown = set(values) - set(self._by_name)
        if unknown:
            raise NeuralRomError(
                f"{', '.join(sorted(unknown))}: not a setting of the {self.label} method; its "
                f"settings are {', '.join(self._by_name)}."
            )
        return {
            s.name: s.check(values[s.name]) if s.name in values else s.default
            for s in self.settings
        }

    def values(self, values: Mapping | None = None) -> Values:
        """:meth:`validate`'s settings as a read-only :class:`Values` (a trainer's
        ``run.settings``)."""
        return Values(self.validate(values))

    def trainer_function(self) -> Callable:
        """The trainer as ``trainer(bakes, out, settings, **job)`` (the README's call, and
        the old plug-in signature), imported now (in the worker: torch is imported here, not
        before). A trainer ``train(run)`` (:func:`takes_run`) is called through
        ``training.run:call``, which checks the settings and builds its run."""
        fn = resolve(self.trainer)
        return functools.partial(resolve("training.run:call"), self, fn) if takes_run(fn) else fn

    def run_function(self) -> Callable:
        """The trainer as ``train(run)``: itself, or a trainer of the old signature called
        with the run's fields (``training.run:legacy``)."""
        fn = resolve(self.trainer)
        return fn if takes_run(fn) else resolve("training.run:legacy")(fn)

    def onnx_function(self) -> Callable | None:
        """The ONNX graph builder (see ``onnx``), or None."""
        return None if self.onnx is None else resolve(self.onnx)


class Values(Mapping):
    """A method's checked settings, read-only: ``v["k"]`` or ``v.k``."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._values:
            raise AttributeError(name)
        return self._values[name]

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"settings are read-only ({name})")

    def __repr__(self) -> str:
        return f"Values({self._values!r})"


def takes_run(trainer: Callable) -> bool:
    """Whether ``trainer`` is ``train(run)`` (one parameter, ``run``), not the old
    ``train(bakes, out, settings, **job)``."""
    try:
        return list(inspect.signature(trainer).parameters) == ["run"]
    except (TypeError, ValueError):
        return False


_REGISTRY: dict[str, Method] = {}


def register(record: Method, *, origin: str | None = None) -> Method:
    """Add a method (or replace one of the same name from the same origin).

    ``origin`` defaults to the file of the caller's module, which a worker imports to find
    the record; built-ins have ``""``. Raises ValueError when a setting shares a name with
    another method's setting but not its kind or unit (one name, one concept).
    """
    if origin is None:
        origin = caller_file()
    for other in _REGISTRY.values():
        if other.name == record.name:
            continue
        for s in record.settings:
            o = other._by_name.get(s.name)
            if o is not None and (o.kind != s.kind or o.unit != s.unit):
                raise ValueError(
                    f"method {record.name}: setting {s.name} is a {s.kind} in {s.unit or 'no unit'}"
                    f" but {other.name}'s {s.name} is a {o.kind} in {o.unit or 'no unit'}; "
                    "use another name for another concept"
                )
    record.origin = origin
    _REGISTRY[record.name] = record
    notify()
    return record


_BUILTINS = Builtins("core.methods", "METHOD", Method, register)


def unregister(name: str) -> None:
    """Remove a method registered with :func:`register` (tests, a plug-in being disabled)."""
    if _REGISTRY.pop(name, None) is not None:
        notify()


def methods() -> list[Method]:
    """Every method this version can train and run, in menu order."""
    _BUILTINS.load()
    return sorted(_REGISTRY.values(), key=lambda m: (m.order, m.name))


def baseline() -> Method:
    """The PCA baseline record (:attr:`Method.baseline`): what "PCA at equal DOFs" trains."""
    found = [m for m in methods() if m.baseline]
    if len(found) != 1:
        raise RuntimeError(f"expected one baseline method, found {[m.name for m in found]}")
    return found[0]


def methods_for(kind: str) -> list[Method]:
    """The methods that train on data of ``kind`` (a key of :data:`BAKE_KINDS`), in menu
    order."""
    if kind not in BAKE_KINDS:
        raise ValueError(f"unknown training data kind {kind!r}; known: {sorted(BAKE_KINDS)}")
    return [m for m in methods() if kind in m.trains_on]


def names() -> list[str]:
    return [m.name for m in methods()]


def get(name: str, *, origin: str | None = None) -> Method:
    """The record of ``name``. With ``origin`` (a file path), import that file first when the
    method is not known yet (a worker finding a method registered outside the package).

    Raises NeuralRomError naming the known methods when there is none.
    """
    _BUILTINS.load()
    return find(_REGISTRY, name, origin, "method", names)


def job_fields(method: Method) -> dict:
    """What a job spec carries so a worker finds ``method``: its name and, for a method
    registered outside the package, the file that registers it."""
    return {"method": method.name, **({"method_origin": method.origin} if method.origin else {})}


def job_fields_of(name: str) -> dict:
    """:func:`job_fields` of the method called ``name``, or none when no method of that name
    is registered here: the worker then says which methods it knows."""
    try:
        return job_fields(get(name))
    except NeuralRomError:
        return {}


def check_inputs(method: Method, inputs) -> None:
    """Refuse a frame that lacks an input the method needs (SimulationError-style message)."""
    if inputs is None:
        missing = method.requires
    else:
        missing = {k for k in method.requires if getattr(inputs, k, None) is None}
    if missing:
        from ..errors import SimulationError

        raise SimulationError(
            f"The {method.label} model needs {', '.join(INPUTS[k] for k in sorted(missing))} "
            "every frame; set them up (see the panel's Simulate box) and try again."
        )


def load_simulator(
    path: str | Path,
    *,
    expect_mesh_hash: str | None = None,
    colliders: list | None = None,
    settings=None,
    mesh: tuple | None = None,
):
    """A simulator for the model file at ``path``, by the method the file names.

    Parameters
    ----------
    expect_mesh_hash : refuse a model of another mesh (:class:`CacheError` says what to do);
        not checked when ``mesh`` is given to a method that runs on other meshes
    colliders : initial colliders (list of :class:`core.colliders.Collider`)
    settings : :class:`core.physics.sim.SimSettings` overriding the time step stored in the model
    mesh : ``(X, T)``, rest positions (n, 3) and tets (m, 4), of a mesh other than the one the
        model was trained on, for a method that takes ``"other_mesh"``
        (:attr:`Method.other_mesh`); a model of another method is refused. ``(X, T, origin)``
        also gives the origin (3,) of the object the mesh belongs to, for a model trained
        on several objects relative to their origins (the add-on passes it always)

    Returns
    -------
    (simulator, model) : a :class:`core.simulator.Simulator` and the loaded
    :class:`core.modelfile.Model`
    """
    from ..data.modelfile import load_model, read_method

    _BUILTINS.load()
    if mesh is not None:
        # the method decides whether the mesh hash matters: read it before the arrays
        with_mesh = _REGISTRY.get(read_method(path))
        if with_mesh is not None and not with_mesh.other_mesh:
            raise CacheError(
                f"{Path(path).name} holds a {with_mesh.label} model, which runs only on the mesh "
                "it was trained on: train a model for this object, or use a method that runs on "
                "other meshes (" + ", ".join(m.label for m in methods() if m.other_mesh) + ")."
            )
        if with_mesh is not None:
            expect_mesh_hash = None
    model = load_model(path, expect_mesh_hash=expect_mesh_hash)
    record = _REGISTRY.get(model.method)
    if record is None:
        raise CacheError(
            f"{Path(path).name} holds a {model.method!r} model, which this version of Neural ROM "
            f"cannot run (it knows {', '.join(names())}): update the extension, or retrain the "
            "model with one of those methods."
        )
    extra = {"mesh": mesh} if mesh is not None else {}
    try:
        sim = record.load(model, settings=settings, colliders=colliders, **extra)
    except KeyError as e:
        raise CacheError(
            f"{Path(path).name} lacks {e.args[0]!r}, which a {record.label} model has; the file "
            "is corrupt or was written by another tool: retrain the model."
        ) from e
    return sim, model
