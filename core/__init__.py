"""Physics core of Neural ROM: numpy + scipy only (no bpy, no torch).

Meshing (:mod:`.mesh`), FEM energies (:mod:`.fem`), time integration (:mod:`.sim`),
colliders (:mod:`.colliders`), training scenarios (:mod:`.scenarios`), bake caches
(:mod:`.cache`) and the bake driver (:mod:`.bake`).
"""
