"""bpy Panels and UI lists (View3D > Sidebar > Neural ROM), one module per stage, the data
kinds' boxes in ``kinds/``.

Blender orders a parent's sub-panels as they are registered and keeps each panel's
collapse state by its ``bl_idname``: ``CLASSES`` is the sidebar's order, top to bottom.
"""

from . import bake, compare, main, material, model, simulate, tets
from .kinds import cloth, face, plugin

CLASSES = (
    bake.NEURAL_ROM_UL_bakes,
    main.NEURAL_ROM_PT_main,
    material.NEURAL_ROM_PT_material,
    tets.NEURAL_ROM_PT_tets,
    material.NEURAL_ROM_PT_simulation,
    bake.NEURAL_ROM_PT_scenario,
    bake.NEURAL_ROM_PT_bake,
    cloth.NEURAL_ROM_PT_cloth_bake,
    plugin.NEURAL_ROM_PT_kind,
    bake.NEURAL_ROM_PT_playback,
    model.NEURAL_ROM_PT_model,
    simulate.NEURAL_ROM_PT_simulate,
    compare.NEURAL_ROM_PT_compare,
    main.NEURAL_ROM_PT_cache,
    face.NEURAL_ROM_PT_face,
)
