"""An object family: one model trained on several objects' FEM bakes and put on other
objects of the family (a method that takes ``"other_mesh"``: LiCROM).

Its data is FEM bakes (it extends ``fem``): the bakes and models record ``"fem"``, and a
.blend never stores ``"family"``.
"""

from __future__ import annotations

from ..registry.kinds import DataKind

#: a mesh object's frames: its colliders and pins read, its render mesh on the tets
ADAPTER = "core.engine.engine:MeshAdapter"
DESCRIPTION = "FEM bakes of several objects, one model for the family (Train with Others)"
KIND = DataKind("family", "Family", DESCRIPTION, adapter=ADAPTER, extends="fem", order=30)
