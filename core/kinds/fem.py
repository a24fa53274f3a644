"""FEM: full-space bakes of an object's tets, the training data of most methods.

An object's tets (Tetrahedralize) are baked by the full-space solver over the scenario's
variants (:mod:`core.bake`); a frame is stepped from the one before, driven by its pins'
animation, the colliders and pokes, and its render mesh rides on the tets (its surface
vertices, or the points of an embedding in a cage).
"""

from __future__ import annotations

from ..registry.kinds import DataKind

#: a mesh object's frames: its colliders and pins read, its render mesh on the tets
ADAPTER = "core.engine.engine:MeshAdapter"
DESCRIPTION = "full-space FEM bakes of the object's tets (Bake)"
HANDLER = "core.jobs.bake:run_bake"
KIND = DataKind(
    "fem", "FEM", DESCRIPTION, adapter=ADAPTER, data_job="bake", handler=HANDLER, order=0
)
