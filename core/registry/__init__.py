"""The method registry: one record per reduced-model method, and everything that loops over it.

A method is three things (DESIGN.md, "Methods plug in through one registry"):

* its **runtime**, a module of :mod:`core.methods` (numpy + scipy) holding the simulator
  class, the model-file writer and a module-level ``METHOD``: a :class:`Method` record;
* its **trainer**, named in the record by module path (``"training.linear:train"``,
  relative to the package) and imported lazily in the worker, or given as a callable;
* the **record** itself: identifier, label, description, the settings description
  (:class:`Setting`: type, default, range, unit, help), the loader (model file ->
  simulator), whether training needs torch, and which frame inputs the method takes.

Model loading (:func:`load_simulator`), the worker's train job, comparison, the panel's
Train menu and settings, the CLI's ``train`` options and the model box all loop over
:func:`methods`; nothing else branches on a method's name.

Built-in records are found by listing :mod:`core.methods` (every module there with a
``METHOD``), so adding a method adds files and touches no list. A method defined outside the
package (a studio's own, or a test's) calls :func:`register`; the record remembers the file
that registered it (``origin``) so a worker process can import that file and find the same
record.

Settings are validated by value here and only here (:meth:`Method.validate`): the panel, the
CLI and the worker all call it, so a bad value is refused with the field's name and range
before any job starts. The same setting name means the same thing in every method (``k`` is
the size of a method's PCA/POD basis wherever it appears); :func:`register` refuses a record
that gives a shared name another type or unit.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import math
import pkgutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CacheError, NeuralRomError

#: Frame inputs a method can take (:class:`core.sim.FrameInputs` fields, plus what the model
#: can do beyond one frame). A record lists the ones it takes in ``inputs`` and the ones a
#: frame must carry in ``requires``.
INPUTS = {
    "forces": "external forces per vertex (pokes, replayed forces)",
    "pin_targets": "animated pins (the pinned vertices follow their object's animation)",
    "colliders": "analytic colliders (planes, spheres, capsules)",
    "sliders": "latent sliders (one value per latent coordinate)",
    "markers": "marker targets (positions and weights) for inverse control",
    "reference_frame": "a driving reference frame (an object's or a bone's transform)",
    "other_mesh": "a mesh other than the one it was trained on (same object family)",
}

#: Inputs of bakes that a model must take to be trained on them at all (a model that keeps
#: its pins where they were while the bakes swing them learns shapes it cannot play back).
BAKE_INPUTS_NEEDED = frozenset({"pin_targets"})

KINDS = ("int", "float", "bool", "enum", "int_list")

#: Training data a method can learn from. A record lists the kinds it takes in ``trains_on``;
#: the panel offers an object only the methods that train on what it has, and the train job
#: refuses the others with a message naming what the method needs.
BAKE_KINDS = {
    "fem": "full-space FEM bakes of the object's tets (Bake)",
    "cloth": "bakes of Blender's own cloth solver on a surface mesh (Cloth Bake)",
    "face": "a face file: skin, skull, jaw and the sculpted shape keys (Face Set-up)",
}


@dataclass(frozen=True)
class Setting:
    """One training setting of a method: what the panel shows, the CLI parses and the
    trainer receives.

    Attributes
    ----------
    name : identifier (a Python name; the CLI option is ``--name-with-dashes``)
    kind : "int", "float", "bool", "enum" or "int_list" (a list of ints, e.g. layer widths)
    default : the value when none is given; None only with ``auto``
    label : shown in the panel
    help : one sentence a user understands (the panel's tooltip and the CLI's help)
    unit : "" or an SI unit ("m", "s", "Pa", ...)
    minimum, maximum : inclusive bounds (None: unbounded); for int_list, of each entry
    soft_maximum : where the panel's slider ends (None: ``maximum``)
    items : the choices of an enum, as (identifier, label, help); an enum with items "on"
        and "off" (a tri-state that was a bool: "auto", "on", "off") also takes True / False
    auto : None is allowed and means "choose automatically"; the panel and the CLI write
        it as 0 (numbers) and say so in the help
    advanced : shown under the panel's Advanced fold (always on the CLI)
    """

    name: str
    kind: str
    default: Any
    label: str
    help: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    soft_maximum: float | None = None
    items: tuple = ()
    auto: bool = False
    advanced: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"setting {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.kind == "enum" and not self.items:
            raise ValueError(f"setting {self.name}: an enum needs items")
        if self.default is None and not self.auto:
            raise ValueError(f"setting {self.name}: default None needs auto=True")
        if self.default is not None:
            self.check(self.default)

    @property
    def range_text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.kind == "enum":
            return "one of " + ", ".join(i[0] for i in self.items)
        if self.kind == "bool":
            return "true or false"
        lo, hi = self.minimum, self.maximum
        each = "each " if self.kind == "int_list" else ""
        if lo is not None and hi is not None:
            text = f"{each}between {_num(lo)} and {_num(hi)}{unit}"
        elif lo is not None:
            text = f"{each}at least {_num(lo)}{unit}"
        elif hi is not None:
            text = f"{each}at most {_num(hi)}{unit}"
        else:
            text = f"any number{unit}"
        return text + (" (0 chooses it automatically)" if self.auto else "")

    def check(self, value: Any) -> Any:
        """``value`` converted to this setting's type; NeuralRomError naming the field and
        its range when it does not fit."""
        if value is None or (self.auto and self.kind in ("int", "float") and _is_zero(value)):
            if self.auto:
                return None
            raise NeuralRomError(f"Setting {self.name} needs a value ({self.range_text}).")
        bad = NeuralRomError(f"Setting {self.name} = {value!r} is not valid: {self.range_text}.")
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            if isinstance(value, int | float) and value in (0, 1):
                return bool(value)
            raise bad
        if self.kind == "enum":
            names = [i[0] for i in self.items]
            if isinstance(value, bool) and {"on", "off"} <= set(names):
                return "on" if value else "off"  # a former bool setting's old values
            if value not in names:
                raise bad
            return str(value)
        if self.kind == "int_list":
            if isinstance(value, str):
                parts = [p for p in value.replace(",", " ").split() if p]
            elif isinstance(value, Iterable):
                parts = list(value)
            else:
                raise bad
            if not parts:
                raise bad
            return [self._number(p, int, bad) for p in parts]
        return self._number(value, int if self.kind == "int" else float, bad)

    def _number(self, value: Any, typ: type, bad: NeuralRomError):
        if isinstance(value, bool):
            raise bad
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise bad from None
        if not math.isfinite(v) or (typ is int and v != int(v)):
            raise bad
        if (self.minimum is not None and v < self.minimum) or (
            self.maximum is not None and v > self.maximum
        ):
            raise bad
        return int(v) if typ is int else v

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["items"] = [list(i) for i in self.items]
        return d


def _num(v: float) -> str:
    return f"{v:g}"


def _is_zero(value: Any) -> bool:
    try:
        return not isinstance(value, bool) and float(value) == 0.0
    except (TypeError, ValueError):
        return False


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
    setup_cost : the seconds its training takes beside its time budget (its PCA, cubature,
        rollout, the job's start), as a multiple of the linear method's whole training:
        what Compare Methods sets aside for it (:func:`.methodcompare.estimate_cost`)
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
        fn = _resolve(self.trainer)
        return functools.partial(_resolve("training.run:call"), self, fn) if takes_run(fn) else fn

    def run_function(self) -> Callable:
        """The trainer as ``train(run)``: itself, or a trainer of the old signature called
        with the run's fields (``training.run:legacy``)."""
        fn = _resolve(self.trainer)
        return fn if takes_run(fn) else _resolve("training.run:legacy")(fn)

    def onnx_function(self) -> Callable | None:
        """The ONNX graph builder (see ``onnx``), or None."""
        return None if self.onnx is None else _resolve(self.onnx)


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


def _resolve(ref: str | Callable) -> Callable:
    """A callable, or ``"module:function"`` (relative to the package when it starts with
    ``training`` or ``core``) imported now."""
    if callable(ref):
        return ref
    module, _, func = ref.partition(":")
    if module.split(".")[0] in ("training", "core"):  # inside this package
        module = f"{_PACKAGE}.{module}"
    return getattr(importlib.import_module(module), func)


#: "neural_rom", or "bl_ext.<repository>.neural_rom" inside Blender
_PACKAGE = __name__.rsplit(".", 2)[0]
_REGISTRY: dict[str, Method] = {}
_BUILTINS_LOADED = False


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    from .. import methods as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        record = getattr(mod, "METHOD", None)
        if isinstance(record, Method):
            register(record, origin="")


def register(record: Method, *, origin: str | None = None) -> Method:
    """Add a method (or replace one of the same name from the same origin).

    ``origin`` defaults to the file of the caller's module, which a worker imports to find
    the record; built-ins have ``""``. Raises ValueError when a setting shares a name with
    another method's setting but not its kind or unit (one name, one concept).
    """
    if origin is None:
        caller = inspect.currentframe().f_back
        origin = str(Path(caller.f_code.co_filename).resolve())
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
    for listener in list(_LISTENERS):
        listener()
    return record


def unregister(name: str) -> None:
    """Remove a method registered with :func:`register` (tests, a plug-in being disabled)."""
    if _REGISTRY.pop(name, None) is not None:
        for listener in list(_LISTENERS):
            listener()


_LISTENERS: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever a method is registered or removed (the add-on rebuilds
    its per-method properties)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def remove_listener(listener: Callable[[], None]) -> None:
    if listener in _LISTENERS:
        _LISTENERS.remove(listener)


def methods() -> list[Method]:
    """Every method this version can train and run, in menu order."""
    _load_builtins()
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
    _load_builtins()
    if name not in _REGISTRY and origin:
        _import_origin(origin)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise NeuralRomError(
            f"Unknown method {name!r}; this version of Neural ROM knows {', '.join(names())}."
        ) from None


def _import_origin(origin: str) -> None:
    path = Path(origin)
    if not path.is_file():
        raise NeuralRomError(f"The file that defines this method is gone: {origin}.")
    mod_name = f"_neural_rom_method_{abs(hash(str(path)))}"
    if mod_name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)


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
    settings : :class:`core.sim.SimSettings` overriding the time step stored in the model
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

    _load_builtins()
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
