"""Physics core of Neural ROM: numpy + scipy only (no bpy, no torch), nested by concept.

- :mod:`.geometry`: tet meshes, surfaces, the mesher, the voxel cage and the embedding.
- :mod:`.physics`: FEM energies, time integration, colliders, linear solvers, quasistatics.
- :mod:`.data`: what we write and read: bake caches, model files, mesh files, PC2, ONNX.
- :mod:`.bake`: the bake driver (:class:`~.bake.BakeSpec`, :func:`~.bake.bake_variants`)
  and its training scenarios and drawn motion.
- :mod:`.engine`: the simulator protocol, the timeline (frame cache) and the replay of a bake.
- :mod:`.reduced`: what the subspace methods share (subspace, cubature, networks, pose).
- :mod:`.methods`: one package per method (its record, runtime and model file).
- :mod:`.kinds`: what a data kind (cloth, face) brings to core.
- :mod:`.jobs`: the job runner and events, one module per job kind.
- :mod:`.registry`: the method records.

The flat names of before (``core.fem``, ``core.cache``, ...) still import, as the same module
objects (:mod:`._moved`).
"""

from . import _moved

_moved.install(__name__)


def __getattr__(name: str):
    return _moved.getattr_of(__name__, name)
