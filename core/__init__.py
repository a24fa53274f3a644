"""Physics core of Neural ROM: numpy + scipy only (no bpy, no torch).

Meshing (:mod:`.tetmesh`, :mod:`.surface`, :mod:`.mesher`, :mod:`.embedding`, :mod:`.cage`,
:mod:`.meshfile`), what every file we write shares (:mod:`.files`), FEM energies
(:mod:`.fem`), time integration (:mod:`.sim`), colliders (:mod:`.colliders`), training
scenarios (:mod:`.scenarios`), bake caches (:mod:`.cache`) and the bake driver (:mod:`.bake`).
"""
