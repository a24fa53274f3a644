"""Per-object and per-scene settings (``Object.neural_rom``, ``Scene.neural_rom_scene``).

What the user sets (role, material, tets, simulation, scenario) and what the stages
record (tet and bake paths, hashes, statistics) live on the object, so they are saved in
the .blend, undone with it and copied with the object. Paths are stored Blender-relative
(``//neural_rom/...``) when the cache directory is, so a project folder moves intact.

- :mod:`.object`: the object's group (role, collider, bakes, model, the flat aliases) and
  the scene's;
- :mod:`.stages`: the FEM pipeline's groups, one per stage (material, simulation, tets,
  bake), declared once in :data:`.stages.STAGES`;
- :mod:`.bake`, :mod:`.model`: a bake record, a scenario parameter, the cloth bake's
  settings; the trained model;
- :mod:`.methods`: the Train menu and the settings groups generated from the registry;
- :mod:`.migrate`: an older file's flat settings moved into the stage groups on load.
"""

from __future__ import annotations

import bpy
from bpy.props import PointerProperty

from ...core import registry
from ..kinds.face.props import NEURAL_ROM_PG_face
from . import migrate
from .bake import NEURAL_ROM_PG_bake, NEURAL_ROM_PG_cloth, NEURAL_ROM_PG_scenario_param
from .methods import (
    NEURAL_ROM_PG_method_settings,
    chosen_method,
    method_items,
    property_value,
    remove_method_properties,
    setting_property,
    sync_method_properties,
)
from .model import NEURAL_ROM_PG_model
from .object import (
    COLLIDER_ITEMS,
    LAYOUT_VERSION,
    ROLE_ITEMS,
    NEURAL_ROM_PG_object,
    NEURAL_ROM_PG_scene,
)
from .stages import (
    EMBEDDING_ITEMS,
    FIELD_STAGE,
    MATERIAL_ITEMS,
    SCENARIO_ITEMS,
    STAGES,
    reset_scenario_params,
)

__all__ = [
    "CLASSES",
    "COLLIDER_ITEMS",
    "EMBEDDING_ITEMS",
    "FIELD_STAGE",
    "LAYOUT_VERSION",
    "MATERIAL_ITEMS",
    "ROLE_ITEMS",
    "SCENARIO_ITEMS",
    "STAGES",
    "NEURAL_ROM_PG_bake",
    "NEURAL_ROM_PG_cloth",
    "NEURAL_ROM_PG_face",
    "NEURAL_ROM_PG_method_settings",
    "NEURAL_ROM_PG_model",
    "NEURAL_ROM_PG_object",
    "NEURAL_ROM_PG_scenario_param",
    "NEURAL_ROM_PG_scene",
    "chosen_method",
    "method_items",
    "migrate",
    "property_value",
    "register_properties",
    "remove_method_properties",
    "reset_scenario_params",
    "setting_property",
    "sync_method_properties",
    "unregister_properties",
]

CLASSES = (
    NEURAL_ROM_PG_face,
    NEURAL_ROM_PG_scenario_param,
    NEURAL_ROM_PG_bake,
    NEURAL_ROM_PG_cloth,
    NEURAL_ROM_PG_model,
    NEURAL_ROM_PG_method_settings,
    *STAGES.values(),
    NEURAL_ROM_PG_object,
    NEURAL_ROM_PG_scene,
)


def _on_methods_changed() -> None:
    sync_method_properties()


def register_properties() -> None:
    sync_method_properties()
    registry.on_change(_on_methods_changed)
    bpy.types.Object.neural_rom = PointerProperty(type=NEURAL_ROM_PG_object)
    bpy.types.Scene.neural_rom_scene = PointerProperty(type=NEURAL_ROM_PG_scene)
    migrate.migrate_file()  # the file already open (later files: the load handler)


def unregister_properties() -> None:
    registry.remove_listener(_on_methods_changed)
    remove_method_properties()
    for owner, name in ((bpy.types.Scene, "neural_rom_scene"), (bpy.types.Object, "neural_rom")):
        if hasattr(owner, name):
            delattr(owner, name)
