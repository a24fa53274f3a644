"""The reference space of a model that runs on other meshes (a method whose record takes
``"other_mesh"``: LiCROM), shared by the train job, the loaders and the frame handler; the
stages built on it (training several objects at once, using a model on another object, mesh
edits during Simulate) are :mod:`.family`'s.

Bakes simulate in world space (:mod:`.bakes`). Such a model learns a field over a reference
space shared by every mesh of its family, so that variants of a prop placed side by side in
a scene are one family: each object's meshes enter that space relative to its own origin
(``matrix_world``'s translation at the scene's start frame, where its bakes start:
:func:`reference_origin`). Axes and scale stay the world's, so gravity and the colliders mean
the same for every member, and a member scaled by 2 is a bigger shape (reported outside the
training domain), not the same shape. Every train job of such a method sends each bake with
its object's origin (:func:`bake_entries`); every load puts the model on the object's own
tets placed at the start frame, with that origin (:func:`load_arguments`,
:func:`job_fields`), whether the object is the one it was trained on or not.
"""

from __future__ import annotations

import bpy
import numpy as np

from ....core import registry
from ....core.errors import NeuralRomError
from ...io import mesh as bm
from ..fem.tets import load_tets, pinned_nodes, start_matrix


def reference_origin(obj: bpy.types.Object, scene: bpy.types.Scene) -> np.ndarray:
    """(3,) world position of ``obj``'s origin at the scene's start frame, metres: where the
    model's reference space has its origin for this object's meshes."""
    return np.asarray(start_matrix(obj, scene)[:3, 3], dtype=np.float64)


def bake_entries(obj: bpy.types.Object, scene: bpy.types.Scene, paths: list[str]) -> list[dict]:
    """The train job's entries of ``obj``'s bakes ``paths``: ``{"path", "origin"}``."""
    origin = [float(v) for v in reference_origin(obj, scene)]
    return [{"path": str(p), "origin": origin} for p in paths]


def model_record(obj: bpy.types.Object):
    """The registry record of the method of ``obj``'s model (None when unknown here)."""
    try:
        return registry.get(obj.neural_rom.model.method)
    except NeuralRomError:
        return None


def runs_on_other_meshes(obj: bpy.types.Object) -> bool:
    """Whether ``obj``'s model is of a method that runs on other meshes."""
    rec = model_record(obj)
    return rec is not None and rec.other_mesh


def world_mesh(obj: bpy.types.Object, scene: bpy.types.Scene, tets=None) -> tuple:
    """``(X, T, origin, pinned)``: ``obj``'s tets placed at the scene's start frame (world,
    metres), its reference origin and the nodes its pin group holds
    (:func:`.tets.pinned_nodes`, as its bakes pin them), as
    :func:`..core.registry.load_simulator` takes a mesh."""
    tets = tets or load_tets(obj)
    M = start_matrix(obj, scene)
    X = bm.to_world(np.asarray(tets.mesh.X, dtype=np.float64), M)
    T = np.asarray(tets.mesh.T, dtype=np.int64)
    return X, T, np.asarray(M[:3, 3], dtype=np.float64), pinned_nodes(obj, tets)


def load_arguments(obj: bpy.types.Object, scene: bpy.types.Scene, tets, mesh_hash: str) -> dict:
    """Keywords of :func:`..core.registry.load_simulator` for ``obj``'s model: its own
    tets (``mesh``) for a method that runs on other meshes, else the mesh hash the model
    must have been trained on."""
    if runs_on_other_meshes(obj):
        return {"mesh": world_mesh(obj, scene, tets)}
    return {"expect_mesh_hash": mesh_hash}


def job_fields(
    obj: bpy.types.Object, scene: bpy.types.Scene, *, other_mesh: bool | None = None
) -> dict:
    """What a worker job spec needs to put ``obj``'s model on its tets
    (:func:`..core.simjob.load_model_for`), for a method that runs on other meshes
    (``other_mesh``; default: whether the object's recorded model's does):
    ``mesh_matrix``, the start-frame matrix placing the job's ``tets`` in the world, and
    ``pinned``, the nodes its pin group holds."""
    if not (runs_on_other_meshes(obj) if other_mesh is None else other_mesh):
        return {}
    return {
        "mesh_matrix": start_matrix(obj, scene).tolist(),
        "pinned": [int(i) for i in pinned_nodes(obj, load_tets(obj))],
    }


def mesh_edit_pending(obj: bpy.types.Object, driver) -> bool:
    """Whether ``obj`` simulates (``driver``: its :class:`.simulate.Driver`, or None) a model
    that runs on other meshes and its mesh was edited (another vertex count than the running
    simulation's render mesh): the frame handler then leaves it alone until Apply Mesh Edit
    (:func:`.family.apply_mesh_edit`) swaps to the new mesh."""
    t = getattr(driver, "tets", None)  # none: a cloth's own vertices, or no driver yet
    if t is None or not runs_on_other_meshes(obj):
        return False
    n = int(t.embedding.n_points) if t.embedding is not None else int(t.mesh.n_surface_inputs)
    return n != len(obj.data.vertices)
