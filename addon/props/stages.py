"""The FEM pipeline's settings and what its stages record, one property group per stage
(``Object.neural_rom.material``, ``.simulation``, ``.tets``, ``.bake``).

:data:`STAGES` declares them once: the object's group points at each, reads and writes their
fields under the flat names they had before (``obj.neural_rom.frames`` is
``obj.neural_rom.bake.frames``), and :meth:`.object.NEURAL_ROM_PG_object.applies` and
:mod:`.migrate` take the field names from the groups. Enum items are stored as indices:
never reorder or insert items.
"""

from __future__ import annotations

import bpy
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    StringProperty,
)

from ...core.bake.scenarios import default_scenario
from ...core.physics import fem
from ..prefs import REL_PATH
from .bake import NEURAL_ROM_PG_scenario_param

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


def _material_update(self, context) -> None:
    # Switching to Custom starts from the preset that was shown, so values are never blank.
    if self.material_preset != "custom":
        p = fem.PRESETS[self.material_preset]
        self["youngs_modulus"] = float(p["youngs_modulus"])
        self["poisson_ratio"] = float(p["poisson_ratio"])
        self["density"] = float(p["density"])


def _scenario_update(self, context) -> None:
    reset_scenario_params(self)


def reset_scenario_params(settings) -> None:
    """Fill ``settings.scenario_params`` with the defaults of ``settings.scenario`` (the
    object's settings or their ``bake`` group)."""
    settings.scenario_params.clear()
    for key, value in default_scenario(settings.scenario).items():
        if key == "kind":
            continue
        item = settings.scenario_params.add()
        item.name = key
        item.set(value)
    settings.scenario_params_kind = settings.scenario


class NEURAL_ROM_PG_material(bpy.types.PropertyGroup):
    """The body's material (the Material panel)."""

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


class NEURAL_ROM_PG_simulation(bpy.types.PropertyGroup):
    """Time step, damping and pins (the Simulation panel)."""

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
    pin_group: StringProperty(
        name="Pin Group",
        description="Vertex group whose vertices are held in place (or follow the object's animation)",
    )
    require_pins: BoolProperty(
        name="Require Pins",
        default=False,
        description="Refuse to bake without a non-empty pin group (a pinned rig that must not fall)",
    )


class NEURAL_ROM_PG_tets(bpy.types.PropertyGroup):
    """The Tetrahedralize settings, and what the last Tetrahedralize recorded."""

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

    # ---- what Tetrahedralize recorded
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


class NEURAL_ROM_PG_bake_settings(bpy.types.PropertyGroup):
    """The Training Scenario: what the next Bake simulates."""

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


#: The FEM pipeline's stage groups: attribute of ``Object.neural_rom`` -> its group, in the
#: panels' order. Each field keeps its flat name on the object's group (an alias).
STAGES = {
    "material": NEURAL_ROM_PG_material,
    "simulation": NEURAL_ROM_PG_simulation,
    "tets": NEURAL_ROM_PG_tets,
    "bake": NEURAL_ROM_PG_bake_settings,
}


def stage_fields(group) -> tuple[str, ...]:
    """The field names a stage group declares, in order."""
    return tuple(group.__annotations__)


#: flat name -> the stage that holds it (``"frames" -> "bake"``)
FIELD_STAGE = {name: stage for stage, group in STAGES.items() for name in stage_fields(group)}
