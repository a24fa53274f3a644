"""Cloth: a Blender cloth bake read as training data."""

from __future__ import annotations

from ...registry.kinds import DataKind

ADAPTER = "core.kinds.cloth.adapter:ClothAdapter"
#: its data job runs Blender's cloth solver in Blender ``--background`` (addon/clothbake.py)
DESCRIPTION = "bakes of Blender's own cloth solver on a surface mesh (Cloth Bake)"
HANDLER = "core.jobs.cloth:run_cloth_bake"
KIND = DataKind(
    "cloth", "Cloth", DESCRIPTION, data_job="cloth_bake", handler=HANDLER, adapter=ADAPTER, order=10
)
