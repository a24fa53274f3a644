"""The object's and the scene's settings (``Object.neural_rom``, ``Scene.neural_rom_scene``).

What the user sets (role, material, tets, simulation, scenario) and what the stages record
(tet and bake paths, hashes, statistics) live on the object, so they are saved in the .blend,
undone with it and copied with the object. The FEM pipeline's fields live in its stage
groups (:mod:`.stages`) and keep their flat names here as aliases.
"""

from __future__ import annotations

import bpy
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)

from ...core import registry
from ...core.bake.scenarios import default_scenario
from ...core.physics import fem
from ..kinds import kind_of
from ..kinds.face.props import NEURAL_ROM_PG_face
from ..prefs import REL_PATH
from .bake import NEURAL_ROM_PG_bake, NEURAL_ROM_PG_cloth
from .methods import (
    NEURAL_ROM_PG_method_settings,
    chosen_method,
    get_method_number,
    method_items,
    property_value,
    set_method_number,
)
from .model import NEURAL_ROM_PG_model
from .stages import FIELD_STAGE, STAGES

ROLE_ITEMS = (
    ("NONE", "None", "Not simulated"),
    ("DEFORMABLE", "Deformable", "A soft body: tetrahedralized, baked and played back"),
    ("COLLIDER", "Collider", "An analytic collider whose animation drives the bakes"),
)

COLLIDER_ITEMS = (
    ("plane", "Plane", "The object's local XY plane, solid below (local -Z)"),
    ("sphere", "Sphere", "A sphere fitting the object's largest dimension (or empty size)"),
    ("capsule", "Capsule", "A capsule along local Z: radius from X/Y, length from Z"),
)

#: The layout of the object's settings a file stores: 1 since the FEM fields moved into
#: their stage groups (:mod:`.migrate` moves an older file's on load).
LAYOUT_VERSION = 1


class NEURAL_ROM_PG_object(bpy.types.PropertyGroup):
    """Neural ROM settings and stage state of one object."""

    role: EnumProperty(name="Role", items=ROLE_ITEMS, default="NONE")
    version: IntProperty(
        default=LAYOUT_VERSION,
        description="Layout of these settings (:data:`LAYOUT_VERSION`; written on load, "
        "after an older file's settings moved into the stage groups)",
        options={"HIDDEN"},
    )

    # ---- the FEM pipeline, one group per stage (flat aliases below the class)
    material: PointerProperty(type=STAGES["material"])
    simulation: PointerProperty(type=STAGES["simulation"])
    tets: PointerProperty(type=STAGES["tets"])
    bake: PointerProperty(type=STAGES["bake"])

    # ---- collider role
    collider_shape: EnumProperty(name="Shape", items=COLLIDER_ITEMS, default="sphere")
    collider_friction: FloatProperty(name="Friction", default=0.0, min=0.0, soft_max=2.0)

    # ---- stage state: bakes
    bakes: CollectionProperty(type=NEURAL_ROM_PG_bake)
    active_bake: IntProperty(name="Active Bake")
    pending_bake: StringProperty(
        description="JSON record of the bake job in flight", options={"HIDDEN"}
    )
    pending_train: StringProperty(
        description="JSON record of the training job in flight", options={"HIDDEN"}
    )
    cloth: PointerProperty(type=NEURAL_ROM_PG_cloth)

    # ---- reduced model: training settings (generated from the method registry)
    model_method: EnumProperty(
        name="Method",
        items=method_items,
        get=get_method_number,
        set=set_method_number,
        description="The reduced-model method Train uses",
    )
    model_method_name: StringProperty(description="The chosen method, by name", options={"HIDDEN"})
    method_settings: PointerProperty(type=NEURAL_ROM_PG_method_settings)

    # ---- face set-up (addon/face.py): a skin with shape keys over a skull and a jaw
    face: PointerProperty(type=NEURAL_ROM_PG_face)

    # ---- reduced model: result and simulation
    model: PointerProperty(type=NEURAL_ROM_PG_model)
    simulate: BoolProperty(
        name="Simulate",
        description="The mesh follows the reduced simulation as the timeline moves",
    )

    # ---- playback / preview
    playback: BoolProperty(
        name="Playback", description="The mesh follows the active bake as the timeline moves"
    )
    preview_of: StringProperty(description="On a tet preview object: the object it previews")

    #: The settings of the FEM pipeline (its stage groups and their fields, :mod:`.stages`):
    #: an object whose data is Blender's cloth or a face file has none (:meth:`applies`).
    FEM_SETTINGS = frozenset(STAGES) | frozenset(FIELD_STAGE)
    #: The settings of a collider (the role's box).
    COLLIDER_SETTINGS = frozenset(("collider_shape", "collider_friction"))

    def applies(self, name: str) -> bool:
        """Whether setting ``name`` applies to the object as it is now: to a collider its role
        and :data:`COLLIDER_SETTINGS`; to any other object all but those, the FEM pipeline's
        (:data:`FEM_SETTINGS`) only when it trains on FEM bakes (:meth:`training_data_kind`:
        not a cloth, not a face)."""
        if self.role == "COLLIDER":
            return name == "role" or name in self.COLLIDER_SETTINGS
        if name in self.COLLIDER_SETTINGS:
            return False
        return name not in self.FEM_SETTINGS or kind_of(self.id_data).stages

    def flat_properties(self):
        """The RNA properties of these settings, each stage group's fields in its group's
        place (read them by their flat names, through the aliases), e.g. for a listing."""
        for prop in self.bl_rna.properties:
            if prop.identifier in STAGES:
                group = getattr(self, prop.identifier).bl_rna.properties
                yield from (p for p in group if p.identifier not in ("rna_type", "name"))
            else:
                yield prop

    def material_values(self) -> dict:
        """Young's modulus (Pa), Poisson ratio and density (kg/m^3) in effect."""
        if self.material_preset != "custom":
            p = fem.PRESETS[self.material_preset]
            return {k: float(p[k]) for k in ("youngs_modulus", "poisson_ratio", "density")}
        return {
            "youngs_modulus": float(self.youngs_modulus),
            "poisson_ratio": float(self.poisson_ratio),
            "density": float(self.density),
        }

    def scenario_dict(self) -> dict:
        """The scenario as core.scenarios takes it: defaults overlaid with the edited values."""
        d = default_scenario(self.scenario)
        if self.scenario_params_kind == self.scenario:
            for p in self.scenario_params:
                if p.name in d:
                    d[p.name] = p.get()
        return d

    def training_data_kind(self) -> str:
        """What the object trains on (a key of :data:`core.registry.BAKE_KINDS`): the first
        kind whose record claims it (:func:`..kinds.kind_of`): "face" once Set Up Face
        recorded a face, "cloth" for a mesh whose bakes are (or will be) Blender's cloth
        (:func:`.cloth.data_kind`), a plug-in kind's, else "fem" (its bakes)."""
        return kind_of(self.id_data).name

    def method(self):
        """The registry record of the chosen method."""
        return chosen_method(self)

    def method_group(self, method=None):
        """The property group of ``method``'s settings (a name or a record; default the
        chosen one), or None when it has none."""
        name = getattr(method, "name", method) or self.method().name
        return getattr(self.method_settings, name, None)

    def method_values(self, method=None) -> dict:
        """The values the object holds for ``method``'s settings, unvalidated (0 for
        automatic, layer widths as text)."""
        method = self._record(method)
        group = self.method_group(method)
        if group is None:
            return {}
        return {s.name: property_value(group, s) for s in method.settings}

    def model_settings(self, method=None) -> dict:
        """The training settings of ``method`` (default the chosen one) from its property
        group, validated by the method (:meth:`core.registry.Method.validate`): a bad value
        raises NeuralRomError naming the field and its range."""
        method = self._record(method)
        return method.validate(self.method_values(method))

    def _record(self, method):
        if method is None:
            return self.method()
        return registry.get(method) if isinstance(method, str) else method

    def active_bake_record(self):
        """The selected bake record, or None."""
        if 0 <= self.active_bake < len(self.bakes):
            return self.bakes[self.active_bake]
        return None


def _alias(stage: str, name: str) -> property:
    """``obj.neural_rom.<name>`` reads and writes ``obj.neural_rom.<stage>.<name>``."""

    def get(self):
        return getattr(getattr(self, stage), name)

    def set(self, value) -> None:
        setattr(getattr(self, stage), name, value)

    return property(get, set, doc=f"The same as ``{stage}.{name}``")


for _name, _stage in FIELD_STAGE.items():
    setattr(NEURAL_ROM_PG_object, _name, _alias(_stage, _name))


class NEURAL_ROM_PG_scene(bpy.types.PropertyGroup):
    """Scene-wide settings."""

    cache_dir: StringProperty(
        name="Cache Directory",
        subtype="DIR_PATH",
        options=REL_PATH,
        default="",
        description="Where tets and bakes are written; empty uses the add-on preference (default //neural_rom/)",
    )
