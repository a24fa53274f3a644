"""Per-object and per-scene settings (``Object.neural_rom``, ``Scene.neural_rom_scene``).

What the user sets (role, material, tets, simulation, scenario) and what the stages
record (tet and bake paths, hashes, statistics) live on the object, so they are saved in
the .blend, undone with it and copied with the object. Paths are stored Blender-relative
(``//neural_rom/...``) when the cache directory is, so a project folder moves intact.
"""

from __future__ import annotations

import json
import math
import zlib

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

from .kinds.face.props import NEURAL_ROM_PG_face
from .prefs import REL_PATH

ROLE_ITEMS = (
    ("NONE", "None", "Not simulated"),
    ("DEFORMABLE", "Deformable", "A soft body: tetrahedralized, baked and played back"),
    ("COLLIDER", "Collider", "An analytic collider whose animation drives the bakes"),
)

# Identifiers are core.fem.PRESETS keys, so no translation table is needed.
MATERIAL_ITEMS = (
    ("rubber", "Rubber", "Stiff, nearly incompressible rubber"),
    ("jelly", "Jelly", "Soft, wobbly gel"),
    ("flesh", "Flesh", "Soft tissue"),
    ("cloth_like", "Cloth-like", "Thin, light and floppy"),
    ("custom", "Custom", "Set Young's modulus, Poisson ratio and density by hand"),
)

EMBEDDING_ITEMS = (
    (
        "AUTO",
        "Auto",
        "Tetrahedralize the mesh itself when it is closed and manifold, else a cage around it",
    ),
    ("ALWAYS", "Always", "Always simulate a cage around the mesh (any render mesh, fewer tets)"),
    ("NEVER", "Never", "Tetrahedralize the mesh itself; it must be closed and manifold"),
)

# Identifiers are core.scenarios.SCENARIO_KINDS.
SCENARIO_ITEMS = (
    ("gravity_drop", "Gravity drop", "Falls (optionally lifted, rotated, spinning) and settles"),
    ("random_pokes", "Random pokes", "Scripted random forces on random surface regions"),
    ("keyframed_colliders", "Keyframed colliders", "Colliders and pins move to random keys"),
    ("replay_forces", "Replay forces", "Forces recorded on another bake, replayed on this mesh"),
)

COLLIDER_ITEMS = (
    ("plane", "Plane", "The object's local XY plane, solid below (local -Z)"),
    ("sphere", "Sphere", "A sphere fitting the object's largest dimension (or empty size)"),
    ("capsule", "Capsule", "A capsule along local Z: radius from X/Y, length from Z"),
)


class NEURAL_ROM_PG_scenario_param(bpy.types.PropertyGroup):
    """One scenario parameter; the value lives in the field of its type."""

    # name: the scenario key (PropertyGroup.name)
    value_type: EnumProperty(
        items=(
            ("FLOAT", "Float", ""),
            ("INT", "Integer", ""),
            ("BOOL", "Boolean", ""),
            ("STRING", "String", ""),
            ("JSON", "JSON", "Lists and other values, as JSON text"),
        )
    )
    float_value: FloatProperty(name="Value", precision=4)
    int_value: IntProperty(name="Value")
    bool_value: BoolProperty(name="Value")
    string_value: StringProperty(name="Value")

    @property
    def value_attr(self) -> str:
        return {
            "FLOAT": "float_value",
            "INT": "int_value",
            "BOOL": "bool_value",
        }.get(self.value_type, "string_value")

    def get(self):
        t = self.value_type
        if t == "FLOAT":
            return float(f"{self.float_value:.7g}")  # stored as float32: 0.15, not 0.150000006
        if t == "INT":
            return int(self.int_value)
        if t == "BOOL":
            return bool(self.bool_value)
        if t == "JSON":
            return json.loads(self.string_value)
        return self.string_value

    def set(self, value) -> None:
        if isinstance(value, bool):
            self.value_type, self.bool_value = "BOOL", value
        elif isinstance(value, int):
            self.value_type, self.int_value = "INT", value
        elif isinstance(value, float):
            self.value_type, self.float_value = "FLOAT", value
        elif isinstance(value, str):
            self.value_type, self.string_value = "STRING", value
        else:
            self.value_type, self.string_value = "JSON", json.dumps(value)


class NEURAL_ROM_PG_bake(bpy.types.PropertyGroup):
    """One baked variant on disk and what it was baked from."""

    # name: shown in the list
    path: StringProperty(
        name="Path", subtype="DIR_PATH", options=REL_PATH, description="The .nrbake directory"
    )
    variant: IntProperty(name="Variant")
    frames: IntProperty(name="Frames", description="Committed frames, the initial state included")
    frame_start: IntProperty(
        name="Start Frame", description="Scene frame of the bake's first frame"
    )
    # bakes pass 2 GiB easily; IntProperty is 32-bit
    nbytes: FloatProperty(name="Size", description="Size on disk, bytes")
    status: StringProperty(name="Status")
    scenario: StringProperty(name="Scenario")
    mesh_hash: StringProperty(description="Hash of the world-space tet mesh that was baked")
    tets_hash: StringProperty(description="Hash of the object's tet mesh when it was baked")
    source_hash: StringProperty(description="Hash of the object's mesh when it was baked")
    kind: StringProperty(
        name="Kind",
        default="fem",
        description="The training data it is (core.registry.BAKE_KINDS): fem or cloth",
    )
    motion: StringProperty(
        name="Motion",
        description="What moved its pins, when the bake drew them from the object's animation "
        "(the source and the variant's draws), else empty",
    )


class NEURAL_ROM_PG_cloth(bpy.types.PropertyGroup):
    """Settings of an object's Cloth Bake (Blender's own cloth solver, :mod:`.cloth`)."""

    frames: IntProperty(
        name="Frames",
        default=120,
        min=2,
        soft_max=2000,
        description="Frames per bake after the first",
    )
    variants: IntProperty(
        name="Variants",
        default=16,
        min=1,
        soft_max=64,
        description="Bakes, each with its own motion (the owner's drawn from its animation, "
        "or random keys; the free colliders' random: see Motion). The network "
        "learns only the motions its bakes show: 4 bakes of a poked sheet left it worse than "
        "its initial model alone, 20 made it 0.59x",
    )
    seed: IntProperty(name="Seed", default=0, min=0, description="Seed of the first variant")
    owner: StringProperty(
        name="Owner",
        description="The object the cloth hangs from, which the bakes move at random (empty: "
        "its top-most parent, or the cloth itself; '-': nothing moves)",
    )
    motion: EnumProperty(
        name="Motion",
        items=(
            ("auto", "Auto", "The owner's animation when it has one, else random keys"),
            (
                "animation",
                "Animation",
                "Each variant drawn from the owner's own animation (its action, NLA strips and "
                "other actions made for it), perturbed with the variant's seed: time warps, "
                "speed changes, stops and starts, stride and sway scales, turns",
            ),
            ("keys", "Random Keys", "The owner keyed to random places and turns (seeded)"),
            (
                "file",
                "As Animated",
                "Nothing keyed: the owner and the colliders move as the file animates them (a "
                "bake of your own shot, to compare a model with)",
            ),
        ),
        default="auto",
        description="How the bakes move the owner",
    )
    colliders: StringProperty(
        description="JSON [[name, kind], ...]: the colliders its cloth bakes recorded, in order"
    )
    drawn_from: StringProperty(
        description="The motions its last cloth bakes drew the owner's from (for the panel)"
    )


# --------------------------------------------------------------------------------------
# Training methods: the menu and one property group per method, from the registry

#: Setting units Blender can display natively; other units go into the field's name.
_BLENDER_UNITS = {"m": "LENGTH", "s": "TIME_ABSOLUTE", "kg": "MASS", "rad": "ROTATION"}
_INT32 = (-(2**31), 2**31 - 1)


def _enum_number(name: str) -> int:
    """A stable enum value for a method name (menus change as methods come and go)."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


_METHOD_ITEMS: list = []


def method_items(self=None, context=None) -> list:
    """The Train menu: one item per registered method that trains on what the object has
    (:meth:`NEURAL_ROM_PG_object.training_data_kind`; every method without an object), in
    menu order."""
    from ..core import registry

    known = registry.methods() if self is None else _methods_for(self)
    # Blender keeps only the strings of the latest call alive: keep our own reference.
    global _METHOD_ITEMS
    _METHOD_ITEMS = [(m.name, m.label, m.description, _enum_number(m.name)) for m in known]
    return _METHOD_ITEMS


def _methods_for(settings) -> list:
    """The methods that train on the object's data (every method when none does)."""
    from ..core import registry

    return registry.methods_for(settings.training_data_kind()) or registry.methods()


def _get_method(self) -> int:
    return _enum_number(chosen_method(self).name)


def _set_method(self, value: int) -> None:
    for item in method_items():
        if item[3] == value:
            self.model_method_name = item[0]
            return


def chosen_method(settings):
    """The registry record of the method the object's panel says (the first method that
    trains on the object's data when the stored one is not registered or does not)."""
    from ..core import registry

    name = settings.model_method_name
    known = (
        _methods_for(settings) if hasattr(settings, "training_data_kind") else registry.methods()
    )
    return next((m for m in known if m.name == name), known[0])


def setting_property(setting):
    """The Blender property of one :class:`core.registry.Setting`.

    ``auto`` numbers show 0 for "automatic"; ``int_list`` is a string ("100, 100").
    """
    label = setting.label
    unit = _BLENDER_UNITS.get(setting.unit, "NONE")
    if setting.unit and unit == "NONE":
        label = f"{label} ({setting.unit})"
    kw = {"name": label, "description": f"{setting.help}; {setting.range_text}"}
    kind = setting.kind
    if kind == "bool":
        return BoolProperty(default=bool(setting.default), **kw)
    if kind == "enum":
        items = tuple(
            (str(i[0]), str(i[1]), str(i[2]) if len(i) > 2 else "") for i in setting.items
        )
        return EnumProperty(items=items, default=str(setting.default), **kw)
    if kind == "int_list":
        return StringProperty(default=", ".join(str(v) for v in setting.default or ()), **kw)
    lo, hi = setting.minimum, setting.maximum
    soft_hi = setting.soft_maximum if setting.soft_maximum is not None else hi
    if setting.auto and (lo is None or lo > 0):
        lo = 0  # 0 means "automatic"
    if kind == "int":
        clamp = lambda v: int(min(max(v, _INT32[0]), _INT32[1]))  # noqa: E731
        limits = {"min": lo, "max": hi, "soft_max": soft_hi}
        limits = {k: clamp(v) for k, v in limits.items() if v is not None}
        return IntProperty(default=int(setting.default or 0), **limits, **kw)
    limits = {"min": lo, "max": hi, "soft_max": soft_hi}
    limits = {k: float(v) for k, v in limits.items() if v is not None}
    default = float(setting.default or 0.0)
    ref = abs(default) or abs(float(soft_hi or 1.0)) or 1.0
    precision = int(min(6, max(2, 2 - math.floor(math.log10(ref)))))
    return FloatProperty(default=default, unit=unit, precision=precision, **limits, **kw)


def property_value(group, setting):
    """The value a property group holds for ``setting``, as the method's validation takes
    it (floats rounded back from Blender's float32)."""
    value = getattr(group, setting.name)
    if setting.kind == "float":
        return float(f"{value:.7g}")
    if setting.kind == "int":
        return int(value)
    if setting.kind == "bool":
        return bool(value)
    return str(value)


class NEURAL_ROM_PG_method_settings(bpy.types.PropertyGroup):
    """The training settings of every registered method, one property group each
    (``method_settings.<method name>``), generated by :func:`sync_method_properties`."""


#: method name -> (settings signature, its generated PropertyGroup class)
_METHOD_GROUPS: dict[str, tuple] = {}


def _signature(method) -> str:
    return json.dumps([method.label, [s.to_dict() for s in method.settings]], default=str)


def _group_class(method):
    annotations = {s.name: setting_property(s) for s in method.settings}
    return type(
        f"NEURAL_ROM_PG_method_{method.name}",
        (bpy.types.PropertyGroup,),
        {
            "__annotations__": annotations,
            "__doc__": f"Training settings of the {method.label} method",
            "__module__": __name__,
        },
    )


def _remove_group(name: str) -> None:
    _sig, cls = _METHOD_GROUPS.pop(name)
    if hasattr(NEURAL_ROM_PG_method_settings, name):
        delattr(NEURAL_ROM_PG_method_settings, name)
    if cls.is_registered:
        bpy.utils.unregister_class(cls)


def sync_method_properties() -> None:
    """One property group per registered method, under ``Object.neural_rom.method_settings``:
    added for a new method, rebuilt for a changed one, removed for a removed one. Values
    stored in the .blend survive (they are kept by name)."""
    from ..core import registry

    wanted = {}
    for method in registry.methods():
        if not method.name.isidentifier() or hasattr(bpy.types.PropertyGroup, method.name):
            print(f"Neural ROM: method name {method.name!r} cannot name a property; no panel")
            continue
        wanted[method.name] = method
    for name in [n for n in _METHOD_GROUPS if n not in wanted]:
        _remove_group(name)
    for name, method in wanted.items():
        sig = _signature(method)
        if name in _METHOD_GROUPS:
            if _METHOD_GROUPS[name][0] == sig:
                continue
            _remove_group(name)
        cls = _group_class(method)
        bpy.utils.register_class(cls)
        setattr(NEURAL_ROM_PG_method_settings, name, PointerProperty(type=cls))
        _METHOD_GROUPS[name] = (sig, cls)


def remove_method_properties() -> None:
    for name in list(_METHOD_GROUPS):
        _remove_group(name)


class NEURAL_ROM_PG_model(bpy.types.PropertyGroup):
    """The trained reduced model of an object and what it was trained from."""

    path: StringProperty(
        name="Model", subtype="FILE_PATH", options=REL_PATH, description="The .nrmodel file"
    )
    method: StringProperty(name="Method")
    k: IntProperty(name="DOFs", description="Reduced degrees of freedom (basis size)")
    cubature: IntProperty(name="Cubature", description="Cubature elements")
    val_error: FloatProperty(
        name="Held-out Shape Error (m)",
        description="Largest vertex error of the model's shapes (reconstruction or "
        "projection, no dynamics) on held-out bakes, metres",
    )
    rollout_error: FloatProperty(
        name="Rollout Error (m)",
        description="Largest vertex error of the reduced simulation replaying a held-out "
        "bake (-1: no held-out bake), metres",
        default=-1.0,
    )
    projection_error: FloatProperty(
        name="Closest-Shape Error (m)",
        description="Largest vertex error of the model's closest shapes to the same held-out "
        "frames: the best the model can represent (-1: unknown), metres",
        default=-1.0,
    )
    rollout_mean_error: FloatProperty(
        name="Rollout Mean Error (m)",
        description="Mean vertex error (over every frame and vertex) of that replay (-1: "
        "unknown), metres",
        default=-1.0,
    )
    projection_mean_error: FloatProperty(
        name="Closest-Shape Mean Error (m)",
        description="Mean vertex error of the closest shapes to the same frames (-1: "
        "unknown), metres",
        default=-1.0,
    )
    step_ms: FloatProperty(name="Step (ms)", description="Reduced step time in training")
    choice: StringProperty(
        name="Choice",
        description="Why the training kept this model over another it compared it with "
        "(one sentence with both replay errors; empty when it compared none)",
    )
    train_seconds: FloatProperty(name="Training Time (s)")
    device: StringProperty(name="Device")
    mesh_hash: StringProperty(description="Hash of the world-space tet mesh it was trained on")
    tets_hash: StringProperty(description="Hash of the object's tet mesh when it was trained")
    source_hash: StringProperty(description="Hash of the object's mesh when it was trained")
    bakes: IntProperty(name="Bakes", description="Bakes it was trained on")
    kind: StringProperty(
        default="fem", description="The training data it learnt from: fem or cloth bakes"
    )
    # a model that runs on other meshes of its family (addon/family.py)
    family: StringProperty(description="The other objects whose bakes it was trained on")
    applied_from: StringProperty(
        description="The object (or file) whose model this object uses (empty: its own)"
    )
    domain_outside: FloatProperty(
        description="Share of the tet nodes outside the model's training domain (-1: unknown)",
        default=-1.0,
    )
    domain_distance: FloatProperty(description="Largest distance outside the domain, metres")
    domain_warning: StringProperty(description="The out-of-domain warning, if any")


def _material_update(self, context) -> None:
    # Switching to Custom starts from the preset that was shown, so values are never blank.
    if self.material_preset != "custom":
        from ..core.physics import fem

        p = fem.PRESETS[self.material_preset]
        self["youngs_modulus"] = float(p["youngs_modulus"])
        self["poisson_ratio"] = float(p["poisson_ratio"])
        self["density"] = float(p["density"])


def _scenario_update(self, context) -> None:
    reset_scenario_params(self)


class NEURAL_ROM_PG_object(bpy.types.PropertyGroup):
    """Neural ROM settings and stage state of one object."""

    role: EnumProperty(name="Role", items=ROLE_ITEMS, default="NONE")

    # ---- material
    material_preset: EnumProperty(
        name="Material", items=MATERIAL_ITEMS, default="rubber", update=_material_update
    )
    youngs_modulus: FloatProperty(
        name="Young's Modulus (Pa)",
        default=1e6,
        min=1.0,
        soft_max=1e10,
        precision=0,
        description="Stiffness, pascals",
    )
    poisson_ratio: FloatProperty(
        name="Poisson Ratio",
        default=0.45,
        min=0.0,
        max=0.499,
        precision=3,
        description="Incompressibility, 0 to 0.5 (exclusive)",
    )
    density: FloatProperty(
        name="Density (kg/m³)",
        default=1100.0,
        min=1e-3,
        soft_max=2e4,
        precision=1,
        description="Mass per volume, kg/m^3",
    )

    # ---- pins
    pin_group: StringProperty(
        name="Pin Group",
        description="Vertex group whose vertices are held in place (or follow the object's animation)",
    )
    require_pins: BoolProperty(
        name="Require Pins",
        default=False,
        description="Refuse to bake without a non-empty pin group (a pinned rig that must not fall)",
    )

    # ---- tetrahedralization
    tet_size: FloatProperty(
        name="Tet Size",
        default=0.0,
        min=0.0,
        soft_max=1.0,
        unit="LENGTH",
        precision=3,
        description="Target tet edge length (m); 0 picks 1/12 of the bounding-box diagonal (a few thousand tets)",
    )
    tet_quality: FloatProperty(
        name="Quality",
        default=1.5,
        min=1.05,
        soft_max=3.0,
        precision=2,
        description="Radius-edge ratio bound: lower gives better shaped but more tets",
    )
    embedding: EnumProperty(name="Embedding", items=EMBEDDING_ITEMS, default="AUTO")
    cage_resolution: IntProperty(
        name="Cage Resolution",
        default=24,
        min=4,
        soft_max=128,
        description="Cells along the longest side of the embedding cage",
    )

    # ---- simulation
    dt_from_scene: BoolProperty(
        name="Use Scene Frame Rate",
        default=True,
        description="Step one frame of the scene per bake frame (dt = 1 / fps)",
    )
    dt: FloatProperty(
        name="Time Step (s)",
        default=1.0 / 24.0,
        min=1e-5,
        soft_max=0.1,
        precision=4,
        description="Seconds per bake frame",
    )
    substeps: IntProperty(name="Substeps", default=1, min=1, soft_max=32)
    damping_mass: FloatProperty(
        name="Mass Damping (1/s)",
        default=0.0,
        min=0.0,
        soft_max=10.0,
        description="Rayleigh alpha: damps the motion of the whole body",
    )
    damping_stiffness: FloatProperty(
        name="Stiffness Damping (s)",
        default=0.0,
        min=0.0,
        soft_max=0.1,
        precision=4,
        description="Rayleigh beta: damps fast internal vibration",
    )

    # ---- scenario
    scenario: EnumProperty(
        name="Scenario", items=SCENARIO_ITEMS, default="gravity_drop", update=_scenario_update
    )
    frames: IntProperty(
        name="Frames",
        default=48,
        min=1,
        soft_max=2000,
        description="Frames simulated after the initial state",
    )
    seed: IntProperty(name="Seed", default=0, min=0)
    variants: IntProperty(
        name="Variants",
        default=4,
        min=1,
        soft_max=64,
        description="Randomized bakes of the scenario (seeds derived from Seed). Train holds "
        "whole bakes out to check the model on motion it never saw, which takes 2 or more",
    )
    bake_motion: EnumProperty(
        name="Motion",
        items=(
            (
                "auto",
                "Auto",
                "The object's animation when it is pinned and animated (itself, a parent or "
                "the bone it hangs from), else the scenario's",
            ),
            (
                "animation",
                "Animation",
                "Each variant's pins drawn from the object's animation (its action, NLA strips "
                "and other actions made for it), perturbed with the variant's seed: time warps, "
                "speed changes, stops and starts, stretches backwards, amplitude scales, turns; "
                "the scenario's pokes, pushes and colliders on top",
            ),
            (
                "scenario",
                "As Animated",
                "The pins follow the object's animation as it plays, the same in every "
                "variant; only the scenario differs between variants",
            ),
        ),
        default="auto",
        description="How the bakes move the pins",
    )
    scenario_params: CollectionProperty(type=NEURAL_ROM_PG_scenario_param)
    scenario_params_kind: StringProperty(description="Scenario the parameters were filled for")

    # ---- collider role
    collider_shape: EnumProperty(name="Shape", items=COLLIDER_ITEMS, default="sphere")
    collider_friction: FloatProperty(name="Friction", default=0.0, min=0.0, soft_max=2.0)

    # ---- stage state: tets
    tets_path: StringProperty(name="Tets", subtype="FILE_PATH", options=REL_PATH)
    embedding_path: StringProperty(name="Embedding", subtype="FILE_PATH", options=REL_PATH)
    tets_nodes: IntProperty(name="Nodes")
    tets_count: IntProperty(name="Tets")
    tets_surface: IntProperty(name="Surface Nodes", description="Render vertices when not embedded")
    tets_quality_min: FloatProperty(
        name="Min Radius Ratio", description="1 for a regular tet, 0 for a flat one"
    )
    tets_quality_mean: FloatProperty(name="Mean Radius Ratio")
    tets_min_dihedral: FloatProperty(name="Min Dihedral (°)")
    tets_embedded: BoolProperty(name="Embedded")
    tets_hash: StringProperty()
    source_hash: StringProperty()

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
        get=_get_method,
        set=_set_method,
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

    #: The settings of the FEM pipeline (the Material, Tetrahedralize, Simulation and Training
    #: Scenario boxes, and what Tetrahedralize recorded): an object whose data is Blender's
    #: cloth or a face file has none (:meth:`applies`).
    FEM_SETTINGS = frozenset(
        (
            "material_preset", "youngs_modulus", "poisson_ratio", "density", "pin_group",
            "require_pins", "tet_size", "tet_quality", "embedding", "cage_resolution",
            "dt_from_scene", "dt", "substeps", "damping_mass", "damping_stiffness", "scenario",
            "frames", "seed", "variants", "bake_motion", "scenario_params", "scenario_params_kind",
            "tets_path", "embedding_path", "tets_nodes", "tets_count", "tets_surface",
            "tets_quality_min", "tets_quality_mean", "tets_min_dihedral", "tets_embedded",
            "tets_hash", "source_hash",
        )
    )  # fmt: skip
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
        return name not in self.FEM_SETTINGS or self.training_data_kind() == "fem"

    def material_values(self) -> dict:
        """Young's modulus (Pa), Poisson ratio and density (kg/m^3) in effect."""
        if self.material_preset != "custom":
            from ..core.physics import fem

            p = fem.PRESETS[self.material_preset]
            return {k: float(p[k]) for k in ("youngs_modulus", "poisson_ratio", "density")}
        return {
            "youngs_modulus": float(self.youngs_modulus),
            "poisson_ratio": float(self.poisson_ratio),
            "density": float(self.density),
        }

    def scenario_dict(self) -> dict:
        """The scenario as core.scenarios takes it: defaults overlaid with the edited values."""
        from ..core.bake.scenarios import default_scenario

        d = default_scenario(self.scenario)
        if self.scenario_params_kind == self.scenario:
            for p in self.scenario_params:
                if p.name in d:
                    d[p.name] = p.get()
        return d

    def training_data_kind(self) -> str:
        """What the object trains on (a key of :data:`core.registry.BAKE_KINDS`): "face" once
        Set Up Face recorded a face, "cloth" for a mesh whose bakes are (or will be) Blender's
        cloth (:func:`.cloth.data_kind`), else "fem" (its bakes)."""
        if self.face.path:
            return "face"
        from .kinds.cloth.model import data_kind  # "cloth": a mesh whose data is Blender's cloth

        return data_kind(self.id_data)

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
        from ..core import registry

        if method is None:
            return self.method()
        return registry.get(method) if isinstance(method, str) else method

    def active_bake_record(self):
        """The selected bake record, or None."""
        if 0 <= self.active_bake < len(self.bakes):
            return self.bakes[self.active_bake]
        return None


def reset_scenario_params(settings) -> None:
    """Fill ``settings.scenario_params`` with the defaults of ``settings.scenario``."""
    from ..core.bake.scenarios import default_scenario

    settings.scenario_params.clear()
    for key, value in default_scenario(settings.scenario).items():
        if key == "kind":
            continue
        item = settings.scenario_params.add()
        item.name = key
        item.set(value)
    settings.scenario_params_kind = settings.scenario


class NEURAL_ROM_PG_scene(bpy.types.PropertyGroup):
    """Scene-wide settings."""

    cache_dir: StringProperty(
        name="Cache Directory",
        subtype="DIR_PATH",
        options=REL_PATH,
        default="",
        description="Where tets and bakes are written; empty uses the add-on preference (default //neural_rom/)",
    )


CLASSES = (
    NEURAL_ROM_PG_face,
    NEURAL_ROM_PG_scenario_param,
    NEURAL_ROM_PG_bake,
    NEURAL_ROM_PG_cloth,
    NEURAL_ROM_PG_model,
    NEURAL_ROM_PG_method_settings,
    NEURAL_ROM_PG_object,
    NEURAL_ROM_PG_scene,
)


def _on_methods_changed() -> None:
    sync_method_properties()


def register_properties() -> None:
    from ..core import registry

    sync_method_properties()
    registry.on_change(_on_methods_changed)
    bpy.types.Object.neural_rom = PointerProperty(type=NEURAL_ROM_PG_object)
    bpy.types.Scene.neural_rom_scene = PointerProperty(type=NEURAL_ROM_PG_scene)


def unregister_properties() -> None:
    from ..core import registry

    registry.remove_listener(_on_methods_changed)
    remove_method_properties()
    for owner, name in ((bpy.types.Scene, "neural_rom_scene"), (bpy.types.Object, "neural_rom")):
        if hasattr(owner, name):
            delattr(owner, name)
