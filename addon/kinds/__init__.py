"""The Blender half of each data kind: fem (tets, bake, preview), cloth, face, family.

One :class:`BlenderKind` record per data kind, keyed by the core record's name
(:class:`..core.registry.DataKind`): which objects it claims, the frame part the one Driver
drives them with (:mod:`..driver`), and the sidebar box and command-line module the ui layer
shows for it. The record names its parts as ``"module:name"`` strings (relative to the
package for ``addon``, ``core`` and ``ui``), imported when first asked, so the add-on never
imports the ui layer and no module of a kind is loaded before it is needed.

A kind defined outside the package (a test's toy, a studio's own) registers a core record
and one of these (:func:`register`); nothing else lists the kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...core.registry.plugins import caller_file, resolve


@dataclass
class BlenderKind:
    """The Blender side of one data kind.

    Attributes
    ----------
    name : the core record's name ("fem", "cloth", "face", "family", a plug-in's)
    claims : ``claims(obj) -> bool``, whether the object's training data is of this kind
        (asked in :attr:`order`, the first that claims it is its kind), or
        ``"module:function"``; None: it claims none itself (family: a way of using fem's)
    part : the :class:`..driver.FramePart` class that drives its objects on the timeline, or
        ``"module:Class"``; None: none of its own. The parts are asked in :attr:`order`
        too, by their own ``claims`` (a cloth model, an active face; fem's, asked last,
        claims any mesh)
    panel : ``"module:function"`` drawing the kind's box in the sidebar,
        ``draw(layout, obj, context)`` ("" when it has none); the ui layer's Kind panel
        draws a plug-in's, the built-in ones have panels of their own (cloth: Cloth Bake,
        face: Face), which keep their place in the sidebar
    cli : the module of its commands (``add_parser(sub, common)``, ``run(args)``), "" when
        it has none
    training_data : ``training_data(obj, scene, method, kind) -> (data, bakes, mesh_hash)``,
        what a train job of ``method`` (a registry record) reads for the object: the job's
        ``bakes`` entries, how many bakes they are (0: none, a face file), the hash of the
        mesh they simulate; or ``"module:function"`` (default: the object's bakes of the
        kind, :func:`.fem.bake.training_data`)
    model_mesh : ``model_mesh(obj, scene) -> (tets, mesh_hash)`` of a model of the
        object's bakes not recorded on it (Compare Methods), tets None when the model's
        vertices are the mesh's own (default: the object's tets, :func:`.fem.tets.model_mesh`)
    stages : whether the FEM pipeline's stage settings apply to its objects
    error_label : how the train report names a model's held-out shape error
    order : the order :attr:`claims` and :attr:`part` are asked in
    origin : the file that registered the record ("" for the built-in ones)
    """

    name: str
    claims: str | Callable | None = None
    part: str | type | None = None
    panel: str = ""
    cli: str = ""
    training_data: str | Callable = "addon.kinds.fem.bake:training_data"
    model_mesh: str | Callable = "addon.kinds.fem.tets:model_mesh"
    stages: bool = False
    error_label: str = "held-out shape error"
    order: int = 100
    origin: str = ""

    def claimed(self, obj) -> bool:
        return self.claims is not None and bool(resolve(self.claims)(obj))

    def part_class(self):
        """The frame part's class, imported now (None: none)."""
        return None if self.part is None else resolve(self.part)

    def train_data(self, obj, scene, method) -> tuple[list, int, str]:
        """:attr:`training_data` of ``obj`` for ``method``, asked now."""
        return resolve(self.training_data)(obj, scene, method, self.name)

    def mesh_of_model(self, obj, scene) -> tuple:
        """:attr:`model_mesh` of ``obj``, asked now."""
        return resolve(self.model_mesh)(obj, scene)


def _any(obj) -> bool:
    return True


#: the built-in kinds, in the order they are asked: an active face, a cloth, then fem
#: (claims any mesh, so asked last); family claims nothing (its objects are fem's)
_BUILTIN = (
    BlenderKind(
        "face",
        "addon.kinds.face.face:claims",
        "addon.kinds.face.part:FacePart",
        cli="ui.cli.kinds.face",
        training_data="addon.kinds.face.face:training_data",
        error_label="held-out keys: largest vertex error",
        order=10,
    ),
    BlenderKind(
        "cloth",
        "addon.kinds.cloth.model:claims",
        "addon.kinds.cloth.part:ClothPart",
        panel="ui.panels.kinds.cloth:draw_cloth_bake",
        cli="ui.cli.kinds.cloth",
        model_mesh="addon.kinds.cloth.model:model_mesh",
        order=20,
    ),
    BlenderKind("family", None, None, panel="", order=30),
    BlenderKind("fem", _any, "addon.driver:FramePart", stages=True, order=1000),
)

_KINDS: dict[str, BlenderKind] = {k.name: k for k in _BUILTIN}


def register(record: BlenderKind, *, origin: str | None = None) -> BlenderKind:
    """Add the Blender side of a data kind (or replace the one of that name); ``origin``
    defaults to the caller's file."""
    record.origin = caller_file() if origin is None else origin
    _KINDS[record.name] = record
    return record


def unregister(name: str) -> None:
    """Remove a record added by :func:`register` (a built-in one comes back)."""
    _KINDS.pop(name, None)
    for k in _BUILTIN:
        _KINDS.setdefault(k.name, k)


def records() -> list[BlenderKind]:
    """Every record, in the order they are asked."""
    return sorted(_KINDS.values(), key=lambda k: (k.order, k.name))


def get(name: str) -> BlenderKind | None:
    """The record of the data kind ``name``, or None when it has no Blender side."""
    return _KINDS.get(name)


def kind_of(obj) -> BlenderKind:
    """The record of the first kind that claims ``obj`` (fem's at the latest)."""
    return next(k for k in records() if k.claimed(obj))
