"""Blender mesh data <-> numpy, vertex groups -> pinned indices, collider shapes and animation.

Every bulk transfer goes through ``foreach_get`` / ``foreach_set``: no Python loop over
vertices or faces except where Blender offers nothing else (vertex-group weights).

Rest shape. Playback deforms an object's own mesh in place, so before the first frame
is written the rest positions are saved to a hidden point attribute (``REST_ATTRIBUTE``).
Everything that reads "the mesh" for tetrahedralizing, hashing or baking reads the rest
positions, so a played-back (deformed) mesh is never taken for a new rest shape, and
stopping playback puts the rest shape back.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from contextlib import contextmanager
from itertools import chain

import bpy
import numpy as np

from ...core.engine.render import to_local, to_world  # noqa: F401 (this module's callers use them)
from ...core.errors import NeuralRomError
from ...core.physics.colliders import box_colliders, split_scale

REST_ATTRIBUTE = ".neural_rom_rest"


# --------------------------------------------------------------------------------------
# Positions and triangles


def get_positions(mesh: bpy.types.Mesh) -> np.ndarray:
    """Current vertex positions, (n, 3) float64, object local space."""
    co = np.empty(3 * len(mesh.vertices), dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3).astype(np.float64)


def set_positions(mesh: bpy.types.Mesh, positions: np.ndarray) -> None:
    """Overwrite vertex positions with (n, 3) local-space ``positions`` (metres)."""
    p = np.ascontiguousarray(positions, dtype=np.float32).reshape(-1)
    if p.size != 3 * len(mesh.vertices):
        raise NeuralRomError(
            f"Mesh '{mesh.name}' has {len(mesh.vertices)} vertices but {p.size // 3} positions "
            "were given; the bake belongs to another version of the mesh: re-bake."
        )
    # The "position" attribute takes a float32 buffer as one copy; MeshVertex.co goes
    # through RNA per vertex (3.7 ms against 7 us for 20K vertices, Blender 4.5).
    mesh.attributes["position"].data.foreach_set("vector", p)
    mesh.update()


def has_rest(mesh: bpy.types.Mesh) -> bool:
    return REST_ATTRIBUTE in mesh.attributes


def store_rest(mesh: bpy.types.Mesh) -> None:
    """Save the current positions as the rest shape, unless a rest shape is already saved."""
    if has_rest(mesh):
        return
    co = np.empty(3 * len(mesh.vertices), dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    attr = mesh.attributes.new(REST_ATTRIBUTE, "FLOAT_VECTOR", "POINT")
    attr.data.foreach_set("vector", co)


def restore_rest(mesh: bpy.types.Mesh) -> None:
    """Put the saved rest shape back into the vertices and forget it."""
    if not has_rest(mesh):
        return
    mesh.vertices.foreach_set("co", _rest_flat(mesh))
    mesh.attributes.remove(mesh.attributes[REST_ATTRIBUTE])
    mesh.update()


def replace_rest(mesh: bpy.types.Mesh, rest: np.ndarray) -> None:
    """Make (n, 3) local ``rest`` the mesh's rest shape and show it (an edited mesh's)."""
    if has_rest(mesh):
        mesh.attributes.remove(mesh.attributes[REST_ATTRIBUTE])
    set_positions(mesh, rest)
    store_rest(mesh)


def _rest_flat(mesh: bpy.types.Mesh) -> np.ndarray:
    co = np.empty(3 * len(mesh.vertices), dtype=np.float32)
    mesh.attributes[REST_ATTRIBUTE].data.foreach_get("vector", co)
    return co


def rest_positions(mesh: bpy.types.Mesh) -> np.ndarray:
    """Rest positions, (n, 3) float64, local space (the saved rest shape during playback)."""
    if has_rest(mesh):
        return _rest_flat(mesh).reshape(-1, 3).astype(np.float64)
    return get_positions(mesh)


def polygons(mesh: bpy.types.Mesh) -> tuple[np.ndarray, np.ndarray]:
    """The faces as they are: ``(face_vertices, face_sizes)``, int64, the vertex indices of
    every polygon one after another and its vertex count (what
    :func:`core.clothbake.surface_hash` and a cloth bake record)."""
    sizes = np.empty(len(mesh.polygons), dtype=np.int32)
    mesh.polygons.foreach_get("loop_total", sizes)
    fv = np.empty(len(mesh.loops), dtype=np.int32)
    mesh.loops.foreach_get("vertex_index", fv)
    return fv.astype(np.int64), sizes.astype(np.int64)


def triangles(mesh: bpy.types.Mesh) -> np.ndarray:
    """Triangulation of every polygon, (t, 3) int64 vertex indices (Blender's own, so
    n-gons split the way the viewport draws them)."""
    mesh.calc_loop_triangles()
    tri = np.empty(3 * len(mesh.loop_triangles), dtype=np.int32)
    mesh.loop_triangles.foreach_get("vertices", tri)
    return tri.reshape(-1, 3).astype(np.int64)


def matrix(obj: bpy.types.Object) -> np.ndarray:
    """The object's current ``matrix_world`` as a (4, 4) float64 array."""
    # the rows' floats chained: 2 us, against 8 for np.array of the mathutils Matrix
    return np.fromiter(chain.from_iterable(obj.matrix_world), np.float64, 16).reshape(4, 4)


def matrices(objs: list) -> np.ndarray:
    """The objects' current ``matrix_world`` as a (len(objs), 4, 4) float64 array (one
    conversion: the frame handler reads them every frame)."""
    rows = chain.from_iterable(chain.from_iterable(o.matrix_world for o in objs))
    return np.fromiter(rows, np.float64, 16 * len(objs)).reshape(-1, 4, 4)


def surface(obj: bpy.types.Object, *, world: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The object's rest surface.

    The base mesh (before modifiers) is used: playback writes into that same mesh, so
    the simulated vertices and the displayed vertices are the same set, and modifiers
    such as Subdivision Surface apply on top of the simulation.

    Returns
    -------
    V : (n, 3) float64, world space at the current frame when ``world`` else local, metres.
    F : (t, 3) int64 triangles.
    """
    if obj.type != "MESH":
        raise NeuralRomError(
            f"'{obj.name}' is a {obj.type.lower()}, not a mesh; select a mesh object."
        )
    V = rest_positions(obj.data)
    F = triangles(obj.data)
    if len(F) == 0:
        raise NeuralRomError(
            f"Mesh '{obj.name}' has no faces; only meshes with faces can be simulated."
        )
    return (to_world(V, matrix(obj)) if world else V), F


def surface_hash(obj: bpy.types.Object) -> str:
    """SHA-1 of the rest shape (local positions as float32) and its triangles: changes when
    the mesh is edited, not when the object is moved."""
    V, F = surface(obj, world=False)
    h = hashlib.sha1()
    h.update(np.ascontiguousarray(V, dtype="<f4").tobytes())
    h.update(np.ascontiguousarray(F, dtype="<i8").tobytes())
    return h.hexdigest()


def mesh_from_arrays(
    name: str, V: np.ndarray, F: np.ndarray, *, mesh: bpy.types.Mesh | None = None
) -> bpy.types.Mesh:
    """Build (or rebuild ``mesh`` in place) a triangle mesh from (n, 3) V and (t, 3) F."""
    V = np.asarray(V, dtype=np.float32).reshape(-1, 3)
    F = np.asarray(F, dtype=np.int32).reshape(-1, 3)
    if mesh is None:
        mesh = bpy.data.meshes.new(name)
    else:
        mesh.clear_geometry()
    mesh.vertices.add(len(V))
    mesh.vertices.foreach_set("co", V.ravel())
    mesh.loops.add(F.size)
    mesh.loops.foreach_set("vertex_index", F.ravel())
    mesh.polygons.add(len(F))
    mesh.polygons.foreach_set("loop_start", np.arange(0, F.size, 3, dtype=np.int32))
    mesh.polygons.foreach_set("loop_total", np.full(len(F), 3, dtype=np.int32))
    mesh.update(calc_edges=True)
    return mesh


# --------------------------------------------------------------------------------------
# Vertex groups


def vertex_group_indices(
    obj: bpy.types.Object, name: str, *, min_weight: float = 0.5
) -> np.ndarray:
    """Indices of the vertices in vertex group ``name`` with weight >= ``min_weight``.

    Raises NeuralRomError naming the group when the object has no such group.
    """
    vg = obj.vertex_groups.get(name)
    if vg is None:
        have = ", ".join(f"'{g.name}'" for g in obj.vertex_groups) or "none"
        raise NeuralRomError(
            f"Pin group '{name}' does not exist on '{obj.name}' (vertex groups: {have}); "
            "create it in Object Data > Vertex Groups or pick another pin group."
        )
    gi = vg.index
    # Blender keeps vertex-group weights per vertex with no bulk accessor: one pass, once
    # per bake, never per frame.
    idx = [
        v.index
        for v in obj.data.vertices
        for g in v.groups
        if g.group == gi and g.weight >= min_weight
    ]
    return np.asarray(idx, dtype=np.int64)


# --------------------------------------------------------------------------------------
# Colliders


def collider_box(obj: bpy.types.Object) -> tuple[np.ndarray, np.ndarray]:
    """Half extents (3,) and centre (3,) of the box a collider object is fitted to, local
    (unscaled): an empty's ``empty_display_size`` along each axis; a mesh's (anything with a
    bounding box's) local bounding box."""
    if obj.type == "EMPTY":
        return _box((float(obj.empty_display_size),))
    # read every frame: the 8 corners in one copy (0.3 us; 2.3 as tuples of their items)
    obj.bound_box.foreach_get(_CORNERS)
    return _box(tuple(_CORNERS.tolist()))


_CORNERS = np.empty(24, dtype=np.float32)  # a bounding box's corners as Blender keeps them


@functools.lru_cache(maxsize=64)
def _box(corners: tuple) -> tuple[np.ndarray, np.ndarray]:
    """:func:`collider_box` of an empty's display size ``(size,)`` or of a bounding box's 8
    corners (24 coordinates), kept for the next frame (read-only arrays): the frame handler
    asks it of every collider every frame, and an edited collider has other corners."""
    if len(corners) == 1:
        half, centre = np.full(3, corners[0]), np.zeros(3)
    else:
        bb = np.array(corners, dtype=np.float64).reshape(8, 3)
        half, centre = (
            0.5 * (bb.max(axis=0) - bb.min(axis=0)),
            0.5 * (bb.min(axis=0) + bb.max(axis=0)),
        )
    half.flags.writeable = centre.flags.writeable = False
    return half, centre


def collider_shape(obj: bpy.types.Object, kind: str, m: np.ndarray | None = None) -> dict:
    """Size and local centre of an analytic collider approximating ``obj``
    (:func:`collider_box` fitted by :func:`core.colliders.box_colliders`), scaled by the
    world scale of ``m`` (default: the current ``matrix_world``).

    Returns
    -------
    dict with kind, radius (m), half_length (m), centre (3,) local-space offset.
    """
    half, centre = collider_box(obj)
    m = matrix(obj) if m is None else np.asarray(m, dtype=np.float64)
    _, radius, half_length, _ = box_colliders(
        [kind], half[None], centre[None], m[None, None], [obj.name]
    )
    return {
        "kind": kind,
        "radius": float(radius[0, 0]),
        "half_length": float(half_length[0, 0]),
        "centre": centre.copy(),
    }


def collider_transform(
    obj: bpy.types.Object, centre: np.ndarray, m: np.ndarray | None = None
) -> np.ndarray:
    """Rigid world matrix of a collider whose shape is centred at local ``centre``."""
    m = matrix(obj) if m is None else m
    rigid, _ = split_scale(m)
    rigid[:3, 3] = to_world(np.asarray(centre, dtype=np.float64)[None], m)[0]
    return rigid


def collider_frames(cols: list, kinds: list[str], mats: np.ndarray) -> tuple:
    """The colliders ``cols`` as analytic shapes over frames
    (:func:`core.colliders.box_colliders` of their :func:`collider_box`).

    Parameters
    ----------
    kinds : the shape each collider is taken as ("plane", "sphere", "capsule")
    mats : (F, 1 + colliders, 4, 4) world matrices per frame, the simulated object's first

    Returns
    -------
    kind (F, C) str, radius and half_length (F, C) float (m), transform (F, C, 4, 4) rigid.
    """
    mats = np.asarray(mats, dtype=np.float64)
    boxes = [collider_box(col) for col in cols]
    half = np.array([b[0] for b in boxes]).reshape(-1, 3)
    centre = np.array([b[1] for b in boxes]).reshape(-1, 3)
    return box_colliders(kinds, half, centre, mats[:, 1:], [col.name for col in cols])


# how many samplings are setting the scene's frames now (frames.py's handlers stay out)
_sampling = 0


def sampling() -> bool:
    """Whether the add-on is setting the scene's frames to read Blender (:func:`frame_kept`):
    those frame changes are not the user's, and the frame handlers stay out of them."""
    return _sampling > 0


@contextmanager
def frame_kept(scene: bpy.types.Scene):
    """Set frames on ``scene`` inside (:func:`sample`, :mod:`.animation`): the frame handlers
    stay out meanwhile (:func:`sampling`), and the current frame and subframe come back
    afterwards, even when something fails."""
    global _sampling
    current, sub = scene.frame_current, scene.frame_subframe
    _sampling += 1
    try:
        yield
    finally:
        try:
            scene.frame_set(current, subframe=sub)
        finally:
            _sampling -= 1


def sample(scene: bpy.types.Scene, frames, read: Callable[[], object]) -> list:
    """``read()`` at each frame of ``frames``, set on the scene (so drivers, constraints and
    parents are evaluated the way the viewport shows them), in :func:`frame_kept`."""
    out = []
    with frame_kept(scene):
        for f in frames:
            scene.frame_set(int(f))
            out.append(read())
    return out


def sample_matrices(
    scene: bpy.types.Scene, objects: list[bpy.types.Object], frames: range
) -> np.ndarray:
    """``matrix_world`` of every object at every frame of ``frames`` (:func:`sample`).

    Returns
    -------
    (len(frames), len(objects), 4, 4) float64 array.
    """
    out = np.empty((len(frames), len(objects), 4, 4))
    names = [o.name for o in objects]

    def read() -> list:
        # objects can be re-fetched after a frame change that rebuilds data; by name is safe
        return [np.array(bpy.data.objects[name].matrix_world, dtype=np.float64) for name in names]

    for i, row in enumerate(sample(scene, frames, read)):
        for j, m in enumerate(row):
            out[i, j] = m
    return out


def is_animated(obj: bpy.types.Object) -> bool:
    """True when the object's world matrix may change over time (own or parent animation,
    constraints or drivers)."""
    o = obj
    while o is not None:
        if o.animation_data is not None and (o.animation_data.action or o.animation_data.drivers):
            return True
        if len(o.constraints):
            return True
        o = o.parent
    return False
