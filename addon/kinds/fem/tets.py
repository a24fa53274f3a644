"""Tetrahedralize an object and keep its tets: a worker job meshes the surface (TetGen
never runs in Blender's process: :mod:`..core.tetjob`), the result is stored in the
object's cache directory and recorded on the object when the job ends well, loaded back
(refusing stale or foreign tets), and tet-node positions are mapped to the render mesh.

Spaces. Tet meshes are stored in the object's LOCAL space (``tets.npz``: moving the
object does not make them stale) but built from the world-space surface, so Tet Size is
in world metres. A bake simulates in WORLD space: its rest mesh is the tet mesh placed
with ``matrix_world`` at the scene's start frame (:func:`start_matrix`).

Staleness. ``source_hash`` (the rest surface when tetrahedralized) and ``tets_hash``
(the local tet mesh) are recorded on the object; bakes and models keep the ones they were
made from, and refuse with "re-tetrahedralize" / "re-bake" on a mismatch.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from ....core.data.files import atomic_path, job_folder, mesh_hash
from ....core.data.meshfile import read_tetmesh, write_tetmesh
from ....core.errors import CacheError, MeshError, NeuralRomError
from ....core.geometry.embedding import Embedding, render_positions
from ....core.geometry.surface import check_surface
from ....core.geometry.tetmesh import TetMesh
from ....core.jobs.tetrahedralize import read_result, write_request
from ... import jobs
from ...io import mesh as bm
from ...io.paths import cache_dir, load_path, store_path

TETS_FILE = "tets.npz"
EMBEDDING_FILE = "embedding.npz"
AUTO_TET_SIZE_DIVISOR = 12.0  # Tet Size 0: bounding-box diagonal / this
JOB_STEM = "tets"  # tets-<8 hex>.job: the worker's request and result (core.tetjob), until stored
# TetGen has no safe point to stop at: a cancelled job is killed after this many seconds
CANCEL_TIMEOUT_S = 2.0


@dataclass
class TetResult:
    """A computed (not yet stored) tet mesh of one object."""

    obj_name: str
    mesh: TetMesh  # local space
    embedding: object | None  # core.embedding.Embedding, or None when the surface is the mesh
    quality: dict
    source_hash: str
    warnings: list[str] = field(default_factory=list)  # the mesher's, for the user


class _Settings:
    """Attribute view of ``obj.neural_rom`` with some values overridden (from the CLI)."""

    def __init__(self, base, overrides: dict):
        self._base, self._over = base, overrides

    def __getattr__(self, name):
        if name in self._over:
            return self._over[name]
        return getattr(self._base, name)


def _settings(obj: bpy.types.Object, settings=None):
    if settings is None:
        return obj.neural_rom
    if isinstance(settings, dict):
        return _Settings(obj.neural_rom, settings)
    return settings


def make_tet_job(obj: bpy.types.Object, *, settings=None) -> dict:
    """The worker job that tetrahedralizes ``obj`` (or a cage around it), JSON-able.

    Checks what needs no TetGen first (a mesh, a non-zero scale, a writable cache
    directory, a closed manifold surface unless Embedding allows a cage), then writes the
    world-space surface for the worker (:func:`..core.tetjob.write_request`); the object
    is not changed. Tet Size is in world metres; the tets come back in local space.

    Returns
    -------
    dict: ``kind`` "tetrahedralize", ``name``, ``folder`` (the job folder), ``embedded``,
    ``target_edge_length`` (m), ``quality``, ``cage_resolution``, ``source_hash``,
    ``log_dir``, ``cancel_timeout_s`` (TetGen has no safe point: a cancel kills it).
    """
    s = _settings(obj, settings)
    if obj.type != "MESH":
        raise MeshError(f"'{obj.name}' is not a mesh; only mesh objects can be tetrahedralized.")
    V, F = bm.surface(obj, world=True)
    M = bm.matrix(obj)
    if abs(np.linalg.det(M[:3, :3])) < 1e-12:
        raise MeshError(f"'{obj.name}' has a zero scale; give it a non-zero scale and try again.")
    edge = float(s.tet_size)
    if edge <= 0:  # auto: a few thousand tets whatever the surface resolution
        edge = float(np.linalg.norm(V.max(0) - V.min(0))) / AUTO_TET_SIZE_DIVISOR
    embedded = s.embedding == "ALWAYS"
    if not embedded:
        try:
            check_surface(V, F)
        except MeshError as e:
            if s.embedding == "NEVER":
                raise MeshError(
                    f"'{obj.name}' is not a closed manifold surface, and its Embedding is "
                    "'Never': set Embedding to 'Auto' or 'Always' to simulate it through a "
                    f"cage, or make the mesh closed and manifold. Details: {e}"
                ) from e
            embedded = True
    folder = cache_dir(obj)
    job_dir = job_folder(folder, JOB_STEM)
    write_request(job_dir, V, F, M)
    return {
        "kind": "tetrahedralize",
        "name": obj.name,
        "folder": str(job_dir),
        "embedded": embedded,
        "target_edge_length": edge,
        "quality": float(s.tet_quality),
        "cage_resolution": int(s.cage_resolution),
        "source_hash": bm.surface_hash(obj),
        "log_dir": str(folder / "logs"),
        "cancel_timeout_s": CANCEL_TIMEOUT_S,
    }


def discard_tet_job(job: dict) -> None:
    """Remove the files of a tetrahedralize job (its request and any result)."""
    shutil.rmtree(job["folder"], ignore_errors=True)


def on_tet_done(
    obj: bpy.types.Object, job: dict, result: dict, *, keep_files: bool = False
) -> dict | None:
    """Store the tets a finished job left (:func:`store_tets`, ``keep_files`` passed on)
    and remove the job files.

    A cancelled job (``result`` empty or ``cancelled``) stores nothing: the object keeps
    its old tets. Returns :func:`store_tets`' info, or None.
    """
    try:
        if not result or result.get("cancelled"):
            return None
        r = read_result(Path(job["folder"]))
        tets = TetResult(obj.name, r.mesh, r.embedding, r.quality, job["source_hash"], r.warnings)
        return store_tets(obj, tets, keep_files=keep_files)
    finally:
        discard_tet_job(job)


def store_tets(obj: bpy.types.Object, result: TetResult, *, keep_files: bool = False) -> dict:
    """Write a computed tet mesh to the object's cache directory and record it.

    ``keep_files``: write it beside the files the object records now (named by the mesh's
    hash) instead of over them, so a .blend saved before still finds its tets (a mesh edit
    during Simulate, which the user may not save)."""
    folder = cache_dir(obj)
    tets_path = folder / TETS_FILE
    emb_path = folder / EMBEDDING_FILE
    if keep_files:
        tag = result.mesh.hash()[:12]
        tets_path = tets_path.with_name(f"{tets_path.stem}_{tag}.npz")
        emb_path = emb_path.with_name(f"{emb_path.stem}_{tag}.npz")
    write_tetmesh(tets_path, result.mesh)  # atomic
    if result.embedding is not None:
        arrays = result.embedding.to_arrays()
        with atomic_path(emb_path) as tmp:
            np.savez(tmp, **arrays)
    elif not keep_files:
        emb_path.unlink(missing_ok=True)
    # open bakes need no forgetting: they are keyed by tets_hash and source_hash
    s = obj.neural_rom
    if s.role == "NONE":
        s.role = "DEFORMABLE"
    q = result.quality
    s.tets_path = store_path(obj, tets_path)
    s.embedding_path = store_path(obj, emb_path) if result.embedding is not None else ""
    s.tets_nodes = len(result.mesh.X)
    s.tets_count = len(result.mesh.T)
    s.tets_surface = int(result.mesh.n_surface_inputs)
    s.tets_quality_min = float(q.get("min_radius_ratio", 0.0))
    s.tets_quality_mean = float(q.get("mean_radius_ratio", 0.0))
    s.tets_min_dihedral = float(q.get("min_dihedral_deg", 0.0))
    s.tets_embedded = result.embedding is not None
    s.tets_hash = result.mesh.hash()
    s.source_hash = result.source_hash
    return {
        "path": str(tets_path),
        "n_tets": len(result.mesh.T),
        "n_nodes": len(result.mesh.X),
        "embedded": result.embedding is not None,
        "quality": q,
        "warnings": list(result.warnings),
    }


def tetrahedralize_object(obj: bpy.types.Object, *, settings=None, context=None) -> dict | None:
    """Tetrahedralize ``obj`` in a worker and store the tets (and embedding) in its cache
    directory: the headless command's and the tests' one call.

    Parameters
    ----------
    obj : a mesh object.
    settings : None (use ``obj.neural_rom``), a dict overriding some of its fields
        (``tet_size``, ``tet_quality``, ``embedding``, ``cage_resolution``), or any object
        with those attributes.

    Returns
    -------
    In ``--background`` the job runs to the end first (a failure raises its
    :class:`..core.jobs.JobError`): a dict with ``path`` (absolute tets.npz), ``n_tets``,
    ``n_nodes``, ``embedded``, ``quality``, ``warnings``. Interactively the job runs in the
    background and None is returned; the tets are stored when it ends.
    """
    job = make_tet_job(obj, settings=settings)
    name, info = obj.name, {}

    def done(result: dict) -> None:
        target = bpy.data.objects.get(name)  # by name: an undo invalidates the old object
        if target is not None:
            info.update(on_tet_done(target, job, result) or {})

    try:
        jobs.start_job(context or bpy.context, job, owner=name, on_done=done)
    except BaseException:
        discard_tet_job(job)
        raise
    return info or None


@dataclass
class Tets:
    """An object's stored tet mesh (local space) and embedding."""

    mesh: TetMesh
    embedding: object | None


def load_tets(obj: bpy.types.Object, *, check_fresh: bool = True) -> Tets:
    """Read the object's tet mesh, refusing when it is missing or stale."""
    s = obj.neural_rom
    if not s.tets_path:
        raise NeuralRomError(f"'{obj.name}' has no tets yet; run Tetrahedralize first.")
    path = load_path(s.tets_path)
    if not path.is_file():
        raise NeuralRomError(
            f"The tets of '{obj.name}' are missing ({path}); run Tetrahedralize again "
            "(or check that the cache folder moved with the .blend)."
        )
    if check_fresh and bm.surface_hash(obj) != s.source_hash:
        raise MeshError(
            f"'{obj.name}' was edited after it was tetrahedralized; re-tetrahedralize, then re-bake."
        )
    tm = read_tetmesh(path)
    if tm.hash() != s.tets_hash:
        raise CacheError(
            f"The tets file {path} is not the one '{obj.name}' recorded; re-tetrahedralize, then re-bake."
        )
    emb = None
    if s.tets_embedded:
        epath = load_path(s.embedding_path)
        if not epath.is_file():
            raise NeuralRomError(
                f"The embedding of '{obj.name}' is missing ({epath}); re-tetrahedralize."
            )
        with np.load(epath, allow_pickle=False) as z:
            emb = Embedding.from_arrays({k: z[k] for k in z.files})
    return Tets(tm, emb)


def embedding_nodes(emb, render_idx: np.ndarray) -> np.ndarray:
    """Tet nodes that carry the render vertices ``render_idx`` of an embedding: the nodes
    of their enclosing tets with a weight in them, sorted (a vertex at a node, as on a
    repaired surface's tets, is carried by that node alone). Pinning them holds those
    render vertices exactly."""
    if len(render_idx) == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.asarray(render_idx, dtype=np.int64)
    nodes, weight = np.asarray(emb.nodes)[idx], np.asarray(emb.bary)[idx]
    return np.unique(nodes[np.abs(weight) > 1e-12]).astype(np.int64)


def pinned_nodes(obj: bpy.types.Object, tets: Tets) -> np.ndarray:
    """The tet nodes ``obj``'s pin group holds, sorted: its vertices with weight >= 0.5 (the
    tet nodes carrying them, for a mesh in a cage). What its bakes pin, and what a model put
    on it pins (on its own mesh, another of its family, an edited one). Raises
    NeuralRomError naming a pin group the object does not have."""
    group = obj.neural_rom.pin_group
    idx = bm.vertex_group_indices(obj, group) if group else np.zeros(0, np.int64)
    return embedding_nodes(tets.embedding, idx) if tets.embedding is not None else np.sort(idx)


def pins_name(obj: bpy.types.Object) -> str:
    """How a message names ``obj``'s pins: "Pin group 'Pins' of 'Ring'"."""
    group = obj.neural_rom.pin_group
    return f"Pin group '{group}' of '{obj.name}'" if group else f"'{obj.name}' (no pin group)"


def render_world(tets: Tets, P: np.ndarray) -> np.ndarray:
    """(r, 3) render-vertex world positions of (n, 3) tet-node positions ``P``."""
    return render_positions(P, int(tets.mesh.n_surface_inputs), tets.embedding)


def start_matrix(obj: bpy.types.Object, scene: bpy.types.Scene) -> np.ndarray:
    """``matrix_world`` of ``obj`` at the scene's start frame (where bakes start)."""
    if bm.is_animated(obj) and scene.frame_current != scene.frame_start:
        return bm.sample_matrices(scene, [obj], range(scene.frame_start, scene.frame_start + 1))[
            0, 0
        ]
    return bm.matrix(obj)


def world_mesh_hash(obj: bpy.types.Object, scene: bpy.types.Scene) -> str:
    """Hash of the world-space tet mesh a bake made now would simulate (and a model of this
    object must have been trained on): the tets placed at the start frame."""
    tets = load_tets(obj)
    X_world = bm.to_world(np.asarray(tets.mesh.X, dtype=np.float64), start_matrix(obj, scene))
    return mesh_hash(X_world, tets.mesh.T)


def model_mesh(obj: bpy.types.Object, scene: bpy.types.Scene) -> tuple[Tets, str]:
    """``(tets, mesh_hash)`` a model of the object's FEM bakes runs on (its
    :attr:`..BlenderKind.model_mesh`): its tets and world mesh."""
    return load_tets(obj), world_mesh_hash(obj, scene)
