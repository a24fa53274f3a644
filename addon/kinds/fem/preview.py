"""The tet preview: a wireframe (or cut-away) object showing an object's tets, parented to
it and not rendered."""

from __future__ import annotations

import bpy
import numpy as np

from ....core.errors import NeuralRomError
from ...io import mesh as bm
from .tets import load_tets

PREVIEW_SUFFIX = "_tets"


def _unique_faces(T: np.ndarray) -> np.ndarray:
    faces = np.concatenate([T[:, [0, 2, 1]], T[:, [0, 1, 3]], T[:, [0, 3, 2]], T[:, [1, 2, 3]]])
    _, first = np.unique(np.sort(faces, axis=1), axis=0, return_index=True)
    return faces[np.sort(first)]


def build_preview(obj: bpy.types.Object, *, cutaway: bool = False) -> bpy.types.Object:
    """A wireframe object showing the tets of ``obj`` (parented to it, not rendered).

    With ``cutaway`` only the tets whose centroid lies at or beyond the mesh's centre
    along local X are kept, and the preview is drawn solid with its edges, so the
    interior of the tet mesh shows at the cut.
    """
    tets = load_tets(obj, check_fresh=False)
    X = np.asarray(tets.mesh.X)
    T = np.asarray(tets.mesh.T)
    if cutaway:
        centroid = X[T].mean(axis=1)
        cx = 0.5 * (X[:, 0].min() + X[:, 0].max())
        T = T[centroid[:, 0] >= cx]
    F = _unique_faces(T)
    name = obj.name + PREVIEW_SUFFIX
    prev = bpy.data.objects.get(name)
    if prev is not None and prev.neural_rom.preview_of != obj.name:
        raise NeuralRomError(
            f"An object named '{name}' already exists and is not a tet preview; rename it."
        )
    if prev is None:
        me = bm.mesh_from_arrays(name, X, F)
        prev = bpy.data.objects.new(name, me)
        for coll in obj.users_collection:
            coll.objects.link(prev)
    else:
        bm.mesh_from_arrays(name, X, F, mesh=prev.data)
    prev.neural_rom.preview_of = obj.name
    prev.parent = obj
    prev.matrix_parent_inverse.identity()
    prev.hide_render = True
    prev.display_type = "SOLID" if cutaway else "WIRE"
    prev.show_wire = True
    prev.show_all_edges = True
    return prev


def remove_preview(obj: bpy.types.Object) -> bool:
    prev = bpy.data.objects.get(obj.name + PREVIEW_SUFFIX)
    if prev is None or prev.neural_rom.preview_of != obj.name:
        return False
    me = prev.data
    bpy.data.objects.remove(prev)
    if me is not None and me.users == 0:
        bpy.data.meshes.remove(me)
    return True
