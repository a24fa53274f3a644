"""The data kinds: one record per kind of training data (fem, cloth, face, family), as
:mod:`.methods` holds one per method.

A kind is what an object trains on and how its frames are driven: the job that makes its
data (``data_job``, run by the worker through ``handler``), the frame adapter that turns a
frame's gathered inputs into a simulator's and its positions into the render mesh
(``adapter``, :mod:`core.engine`), and whether a frame follows from the one before
(``"timeline"``: stepped) or stands alone (``"equilibrium"``: a face's quasistatic solve).

Built-in records are the ``KIND`` of each module or package of :mod:`core.kinds`, so adding
a kind adds files and touches no list. A kind defined outside the package (a test's toy, a
studio's own) calls :func:`register_kind`; the record remembers the file that registered it
(``origin``), which a worker imports to find it (:func:`kind_job_fields`).

A kind that ``extends`` another is a way of using the other's data: a family trains one
model on several objects' FEM bakes, and its bakes and models record ``"fem"``. The kinds
that data is stored as (the others) are :data:`BAKE_KINDS`, the names a method's
``trains_on`` takes, and what ``.blend`` files, bakes and model files store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from .plugins import Builtins, caller_file, find, notify, resolve

STEPPING = ("timeline", "equilibrium")


@dataclass
class DataKind:
    """The registry record of one data kind (see the module docstring).

    Attributes
    ----------
    name : identifier ("fem", "cloth", "face", "family"); the stored kinds' names are in
        .blend files, bakes, model files and methods' ``trains_on``
    label : short, for menus ("Cloth")
    description : the training data, for messages and tooltips ("bakes of Blender's own
        cloth solver on a surface mesh (Cloth Bake)"): :data:`BAKE_KINDS`' text
    data_job : the job kind that makes its training data ("bake", "cloth_bake",
        "face_setup"; "" when it has none of its own)
    handler : the worker's handler of ``data_job``, ``handler(spec) -> dict``: a callable,
        or ``"module:function"`` (relative to the package for ``core``, ``training`` and
        ``addon``), imported in the worker; None: the job table's entry of ``data_job``
        (``core.jobs.JOBS``, which takes the built-in kinds' data jobs from their records)
    adapter : its frame adapter class (:class:`core.engine.engine.FrameAdapter`), or
        ``"module:Class"``; None: none yet (a face's frames are the add-on's face driver's)
    stepping : "timeline" (a frame is stepped from the one before) or "equilibrium" (each
        frame is solved on its own; a frame's result depends only on its inputs)
    extends : the kind whose data it uses and stores ("fem" for "family"), or ""
    order : position in menus
    origin : the file that defined the record (set by :func:`register_kind`)
    """

    name: str
    label: str
    description: str
    data_job: str = ""
    handler: str | Callable | None = None
    adapter: str | type | None = None
    stepping: str = "timeline"
    extends: str = ""
    order: int = 100
    origin: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"data kind {self.name!r}: the name must be an identifier")
        if self.stepping not in STEPPING:
            raise ValueError(
                f"data kind {self.name}: stepping {self.stepping!r} is not one of {STEPPING}"
            )
        if self.handler is not None and not self.data_job:
            raise ValueError(f"data kind {self.name}: a handler needs the data_job it runs")

    @property
    def stored(self) -> str:
        """The kind its data is stored as: its own name, or the kind it extends."""
        return self.extends or self.name

    def trained_by(self, method) -> bool:
        """Whether ``method`` (a :class:`.methods.Method`) learns from this kind's data."""
        return self.stored in method.trains_on

    def handler_function(self) -> Callable | None:
        """The worker's handler of :attr:`data_job`, imported now (None: the worker's own)."""
        return None if self.handler is None else resolve(self.handler)

    def adapter_class(self):
        """The frame adapter class, imported now (None: none)."""
        return None if self.adapter is None else resolve(self.adapter)


_KINDS: dict[str, DataKind] = {}


def register_kind(record: DataKind, *, origin: str | None = None) -> DataKind:
    """Add a data kind (or replace one of the same name).

    ``origin`` defaults to the file of the caller's module, which a worker imports to find
    the record; built-ins have ``""``. Raises ValueError for a kind that extends one not
    registered, or one that itself extends another.
    """
    _BUILTINS.load()
    if record.extends:
        base = _KINDS.get(record.extends)
        if base is None or base.extends:
            raise ValueError(
                f"data kind {record.name}: extends {record.extends!r}, which is not a stored "
                f"kind (known: {sorted(BAKE_KINDS)})"
            )
    record.origin = caller_file() if origin is None else origin
    _KINDS[record.name] = record
    notify()
    return record


#: the kinds of core.kinds, the stored ones first (a kind that extends another needs it)
_BUILTINS = Builtins("core.kinds", "KIND", DataKind, register_kind, key=lambda k: bool(k.extends))


def unregister_kind(name: str) -> None:
    """Remove a data kind registered with :func:`register_kind` (tests, a plug-in being
    disabled)."""
    if _KINDS.pop(name, None) is not None:
        notify()


def kinds() -> list[DataKind]:
    """Every data kind, in menu order."""
    _BUILTINS.load()
    return sorted(_KINDS.values(), key=lambda k: (k.order, k.name))


def get_kind(name: str, *, origin: str | None = None) -> DataKind:
    """The record of ``name``. With ``origin`` (a file path), import that file first when the
    kind is not known yet (a worker finding a kind registered outside the package).

    Raises NeuralRomError naming the known kinds when there is none.
    """
    _BUILTINS.load()
    return find(_KINDS, name, origin, "data kind", lambda: [k.name for k in kinds()])


def kind_job_fields(kind: DataKind) -> dict:
    """What a data job's spec carries so a worker finds ``kind``: its name and, for a kind
    registered outside the package, the file that registers it."""
    return {"data_kind": kind.name, **({"kind_origin": kind.origin} if kind.origin else {})}


def data_job_handler(spec: Mapping) -> Callable | None:
    """The handler of a data job spec (:func:`kind_job_fields`) whose ``kind`` is its data
    kind's ``data_job`` and whose kind names a handler; None otherwise (the worker's own
    table runs it, or refuses it)."""
    name = spec.get("data_kind")
    if not name:
        return None
    kind = get_kind(str(name), origin=spec.get("kind_origin"))
    if kind.data_job != spec.get("kind"):
        return None
    return kind.handler_function()


class _StoredKinds(Mapping):
    """Name -> description of the kinds data is stored as (not the ones that extend
    another), in menu order: what methods' ``trains_on`` takes."""

    def _records(self) -> list[DataKind]:
        return [k for k in kinds() if not k.extends]

    def __getitem__(self, name: str) -> str:
        _BUILTINS.load()
        kind = _KINDS[name]  # KeyError for an unknown kind, as a dict
        if kind.extends:
            raise KeyError(name)
        return kind.description

    def __iter__(self) -> Iterator[str]:
        return iter([k.name for k in self._records()])

    def __len__(self) -> int:
        return len(self._records())

    def __repr__(self) -> str:
        return repr(dict(self))


#: Training data a method can learn from: the stored kinds' names and descriptions, a live
#: view of the records. A method lists the kinds it takes in ``trains_on``; the panel offers
#: an object only the methods that train on what it has, and the train job refuses the
#: others with a message naming what the method needs.
BAKE_KINDS: Mapping[str, str] = _StoredKinds()
