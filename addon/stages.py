"""The per-object stages (tetrahedralize, bake job, bake results, playback, PC2 export),
shared by the operators and the command line.

Each stage validates everything it can first and changes the scene last, so a failure
leaves the scene as it was. Failures are :class:`~..core.errors.NeuralRomError`
subclasses whose messages say what is wrong and what to do.

Spaces. Tet meshes are stored in the object's LOCAL space (``tets.npz``: moving the
object does not make them stale) but built from the world-space surface, so Tet Size is
in world metres. A bake simulates in WORLD space: its rest mesh is the tet mesh placed
with ``matrix_world`` at the scene's start frame, written next to the bake. Playback and
export map bake positions back to local space with the object's current (or per-frame)
inverse ``matrix_world``.

Staleness. ``source_hash`` (the rest surface when tetrahedralized) and ``tets_hash``
(the local tet mesh) are recorded on the object; each bake record keeps the ones it was
baked from plus the hash of the world mesh it simulated. A mismatch means the bake no
longer belongs to the mesh, and playback and export refuse with "re-bake".
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from ..core.cage import tetrahedralize_embedded
from ..core.embedding import Embedding
from ..core.errors import CacheError, MeshError, NeuralRomError
from ..core.files import atomic_path
from ..core.mesher import tetrahedralize
from ..core.meshfile import read_tetmesh, write_tetmesh
from ..core.surface import check_surface
from ..core.tetmesh import TetMesh
from . import blender_mesh as bm
from .prefs import DEFAULT_CACHE_DIR, get_preferences

TETS_FILE = "tets.npz"
EMBEDDING_FILE = "embedding.npz"
BAKES_DIR = "bakes"
MODIFIER_NAME = "Neural ROM Cache"
PREVIEW_SUFFIX = "_tets"


# --------------------------------------------------------------------------------------
# Paths


AUTO_TET_SIZE_DIVISOR = 12.0  # Tet Size 0: bounding-box diagonal / this


def _scene_of(obj: bpy.types.Object) -> bpy.types.Scene:
    scenes = obj.users_scene
    return scenes[0] if scenes else bpy.context.scene


def cache_base(scene: bpy.types.Scene | None = None) -> str:
    """The cache directory setting in effect (scene setting, else preferences), unexpanded."""
    scene = scene or bpy.context.scene
    base = scene.neural_rom_scene.cache_dir if scene is not None else ""
    return base or get_preferences().cache_dir or DEFAULT_CACHE_DIR


def _is_relative(base: str) -> bool:
    return base.startswith("//")


def cache_dir(obj: bpy.types.Object, *, create: bool = True) -> Path:
    """Absolute cache directory of ``obj`` (``<cache dir>/<object name>/``), created and
    checked writable when ``create``.

    Raises
    ------
    NeuralRomError
        The .blend is unsaved and the cache directory is relative to it, or the
        directory cannot be created or written.
    """
    base = cache_base(_scene_of(obj))
    if _is_relative(base) and not bpy.data.filepath:
        raise NeuralRomError(
            f"Save the .blend file first: the cache directory '{base}' is relative to it. "
            "Or set an absolute Cache Directory in the Neural ROM panel or the add-on preferences."
        )
    path = Path(bpy.path.abspath(base)) / bpy.path.clean_name(obj.name)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".write-test-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise NeuralRomError(
                f"Cannot write to the cache directory {path} ({e.strerror or e}). "
                "Pick a writable Cache Directory in the Neural ROM panel or the add-on preferences."
            ) from e
    return path


def store_path(obj: bpy.types.Object, path: str | os.PathLike) -> str:
    """How a path is kept on the object: Blender-relative when the cache directory is."""
    path = os.fspath(path)
    if _is_relative(cache_base(_scene_of(obj))) and bpy.data.filepath:
        try:
            return bpy.path.relpath(path)
        except ValueError:  # another drive on Windows
            return path
    return path


def load_path(path: str) -> Path:
    """Absolute path of a stored (possibly ``//``-relative) path."""
    return Path(bpy.path.abspath(path))


def _replace_atomic(write: Callable[[Path], None], dest: Path) -> None:
    """Write through ``write(tmp)`` then move into place, so ``dest`` is never half written."""
    with atomic_path(dest) as tmp:
        write(tmp)


# --------------------------------------------------------------------------------------
# Tetrahedralize


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


def compute_tets(obj: bpy.types.Object, *, settings=None) -> TetResult:
    """Tetrahedralize ``obj`` (or a cage around it) without changing anything.

    The surface is taken in world space, so Tet Size is in world metres; the result is
    stored in local space.
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
    kw = {"target_edge_length": edge, "quality": float(s.tet_quality)}
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
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if embedded:
                tm, emb = tetrahedralize_embedded(
                    V, F, resolution=int(s.cage_resolution), **kw
                )
            else:  # check_surface ran above
                # boundary may be split (finer tets than the render mesh); the render vertices
                # stay the first nodes, so the render mesh still maps one to one
                tm = tetrahedralize(V, F, keep_surface=False, check=False, **kw)
                emb = None
    except NeuralRomError:
        raise
    except Exception as e:  # the mesher's own failures (tetgen RuntimeError, ...)
        raise MeshError(
            f"Tetrahedralizing '{obj.name}' failed ({e}). Try Embedding 'Always', a larger "
            "Tet Size or a higher Quality bound."
        ) from e
    if emb is None and tm.n_surface_inputs != len(V):
        raise MeshError(
            f"The tets of '{obj.name}' do not keep its vertices as nodes; set Embedding to "
            "'Always' to simulate it through a cage."
        )
    q = tm.quality
    quality = dict(q() if callable(q) else q)
    local = TetMesh(bm.to_local(tm.X, M), tm.T, tm.n_surface_inputs)
    notes = [str(w.message) for w in caught]
    return TetResult(obj.name, local, emb, quality, bm.surface_hash(obj), notes)


def store_tets(obj: bpy.types.Object, result: TetResult) -> dict:
    """Write a computed tet mesh to the object's cache directory and record it."""
    folder = cache_dir(obj)
    tets_path = folder / TETS_FILE
    emb_path = folder / EMBEDDING_FILE
    write_tetmesh(tets_path, result.mesh)  # atomic
    if result.embedding is not None:
        arrays = result.embedding.to_arrays()
        _replace_atomic(lambda p: np.savez(p, **arrays), emb_path)
    else:
        emb_path.unlink(missing_ok=True)
    _forget_caches(obj.name)
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


def tetrahedralize_object(obj: bpy.types.Object, *, settings=None) -> dict:
    """Tetrahedralize ``obj`` and store the tets (and embedding) in its cache directory.

    Parameters
    ----------
    obj : a mesh object.
    settings : None (use ``obj.neural_rom``), a dict overriding some of its fields
        (``tet_size``, ``tet_quality``, ``embedding``, ``cage_resolution``), or any object
        with those attributes.

    Returns
    -------
    dict with ``path`` (absolute tets.npz), ``n_tets``, ``n_nodes``, ``embedded``, ``quality``.
    """
    cache_dir(obj)  # fail on an unusable cache directory before the (long) meshing
    return store_tets(obj, compute_tets(obj, settings=settings))


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
    of their enclosing tets, sorted. Pinning them holds those render vertices exactly."""
    if len(render_idx) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.asarray(emb.nodes)[render_idx]).astype(np.int64)


# --------------------------------------------------------------------------------------
# Bake


def _pins(obj: bpy.types.Object, s, scenario: dict) -> np.ndarray:
    """Pinned render-vertex indices; errors when pins are required but missing."""
    need = bool(s.require_pins) or bool(scenario.get("move_pins", False))
    if not s.pin_group:
        if need:
            why = (
                "the scenario moves pins (move_pins)"
                if scenario.get("move_pins")
                else "Require Pins is on"
            )
            raise NeuralRomError(
                f"'{obj.name}' has no pin group but {why}; pick a vertex group as Pin Group."
            )
        return np.zeros(0, dtype=np.int64)
    idx = bm.vertex_group_indices(obj, s.pin_group)
    if need and len(idx) == 0:
        raise NeuralRomError(
            f"Pin group '{s.pin_group}' on '{obj.name}' has no vertices with weight >= 0.5; "
            "assign the vertices to hold in place."
        )
    return idx


def _colliders(obj: bpy.types.Object, scene: bpy.types.Scene) -> list[bpy.types.Object]:
    return [
        o
        for o in scene.objects
        if o is not obj and o.neural_rom.role == "COLLIDER" and not o.neural_rom.preview_of
    ]


def scene_dt(scene: bpy.types.Scene) -> float:
    return float(scene.render.fps_base) / float(scene.render.fps)


def make_bake_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    seed: int | None = None,
    variants: int | None = None,
    shard: tuple[int, int] = (0, 1),
) -> dict:
    """The worker job that bakes ``obj``'s scenario (JSON-able).

    Samples the colliders' and the object's ``matrix_world`` at every frame of the bake
    range (``scene.frame_start`` .. ``+ frames``; the current frame is restored), writes
    the world-space rest tet mesh next to the bakes, and records what is being baked on
    the object (``pending_bake``) for :func:`on_bake_done`.

    Returns
    -------
    dict: ``kind`` "bake", ``mesh`` (abs path of the world tets .npz), ``spec``
    (``BakeSpec.to_dict()``), ``out_dir``, ``name``, ``shard`` [i, N], ``overwrite``.
    """
    from ..core import bake as core_bake
    from ..core import fem
    from ..core.files import mesh_hash as cache_mesh_hash
    from ..core.scenarios import validate_scenario

    s = obj.neural_rom
    if s.role != "DEFORMABLE":
        raise NeuralRomError(
            f"'{obj.name}' is not deformable; set its Neural ROM role to Deformable."
        )
    tets = load_tets(obj)
    material = fem.Material(**s.material_values())
    material.validate()
    scenario = s.scenario_dict()
    if scenario.get("source"):
        scenario["source"] = bpy.path.abspath(scenario["source"])
    scenario = validate_scenario(scenario)
    pins_render = _pins(obj, s, scenario)
    n_nodes = len(tets.mesh.X)
    if tets.embedding is not None:
        pinned = embedding_nodes(tets.embedding, pins_render)
    else:
        pinned = pins_render
    folder = cache_dir(obj)

    frames = int(s.frames)
    start = int(scene.frame_start)
    colliders = _colliders(obj, scene)
    mats = bm.sample_matrices(scene, [obj, *colliders], range(start, start + frames + 1))
    # sizes at the start frame (a collider's scale is not animated in the simulation)
    shapes = [
        bm.collider_shape(c, c.neural_rom.collider_shape, mats[0, j])
        for j, c in enumerate(colliders, start=1)
    ]
    X_local = np.asarray(tets.mesh.X, dtype=np.float64)
    X_world = bm.to_world(X_local, mats[0, 0])
    pin_targets = None
    if len(pinned) and not np.allclose(mats[:, 0], mats[0, 0]):
        Xp = X_local[pinned]
        pin_targets = (
            Xp @ np.transpose(mats[:, 0, :3, :3], (0, 2, 1)) + mats[:, 0, None, :3, 3]
        ).tolist()
    collider_dicts = []
    for j, (c, shape) in enumerate(zip(colliders, shapes), start=1):
        collider_dicts.append(
            {
                "kind": shape["kind"],
                "radius": shape["radius"],
                "half_length": shape["half_length"],
                "friction": float(c.neural_rom.collider_friction),
                "transforms": [
                    bm.collider_transform(c, shape["centre"], mats[f, j]).tolist()
                    for f in range(frames + 1)
                ],
            }
        )
    gravity = tuple(scene.gravity) if scene.use_gravity else (0.0, 0.0, 0.0)
    spec = core_bake.BakeSpec(
        material=material.to_dict(),
        scenario=scenario,
        frames=frames,
        dt=scene_dt(scene) if s.dt_from_scene else float(s.dt),
        substeps=int(s.substeps),
        gravity=tuple(float(g) for g in gravity),
        pinned=[int(i) for i in pinned],
        pin_targets=pin_targets,
        damping=(float(s.damping_mass), float(s.damping_stiffness)),
        colliders=collider_dicts,
        seed=int(s.seed if seed is None else seed),
        variants=int(s.variants if variants is None else variants),
    )
    spec.validate(n_nodes)

    out_dir = folder / BAKES_DIR
    out_dir.mkdir(exist_ok=True)
    name = f"{s.scenario}_s{spec.seed}"
    world = TetMesh(X_world, tets.mesh.T, tets.mesh.n_surface_inputs)
    mesh_path = out_dir / f"{name}.tets.npz"
    write_tetmesh(mesh_path, world)
    s.pending_bake = json.dumps(
        {
            "out_dir": str(out_dir),
            "name": name,
            "frame_start": start,
            "scenario": s.scenario,
            # the identity bake caches record (core.files.mesh_hash), not TetMesh.hash()
            "mesh_hash": cache_mesh_hash(world.X, world.T),
            "tets_hash": s.tets_hash,
            "source_hash": s.source_hash,
        }
    )
    return {
        "kind": "bake",
        "mesh": str(mesh_path),
        "spec": spec.to_dict(),
        "out_dir": str(out_dir),
        "name": name,
        "shard": [int(shard[0]), int(shard[1])],
        "overwrite": True,
    }


def on_bake_done(obj: bpy.types.Object, result: dict) -> list[str]:
    """Record the bakes a finished (or cancelled) job left on disk on ``obj``.

    ``result`` is the worker's result (``paths`` of the bakes written); without it the
    bakes of the pending job are found on disk. Every bake with committed frames is
    recorded, a cancelled bake's prefix included. Returns the recorded paths.
    """
    from ..core.cache import BakeCache

    s = obj.neural_rom
    pending = json.loads(s.pending_bake) if s.pending_bake else {}
    paths = [Path(p) for p in (result or {}).get("paths", [])]
    if not paths and pending:
        paths = sorted(Path(pending["out_dir"]).glob(f"{pending['name']}_v*.nrbake"))
    recorded = []
    for p in paths:
        try:
            cache = BakeCache.open(p, expect_mesh_hash=pending.get("mesh_hash") or None)
        except CacheError:
            continue
        if cache.n_frames == 0:
            continue
        stored = store_path(obj, p)
        rec = next((b for b in s.bakes if load_path(b.path) == p.resolve()), None)
        if rec is None:
            rec = s.bakes.add()
        rec.name = p.stem
        rec.path = stored
        rec.variant = int(p.stem.rsplit("_v", 1)[-1]) if "_v" in p.stem else 0
        rec.frames = cache.n_frames
        rec.frame_start = int(pending.get("frame_start", _scene_of(obj).frame_start))
        rec.nbytes = float(cache.nbytes)
        rec.status = cache.status
        rec.scenario = pending.get("scenario", cache.meta.get("scenario", {}).get("kind", ""))
        rec.mesh_hash = cache.mesh_hash
        rec.tets_hash = pending.get("tets_hash", s.tets_hash)
        rec.source_hash = pending.get("source_hash", s.source_hash)
        recorded.append(str(p))
        _forget_caches(obj.name)
    if recorded:
        first = load_path(store_path(obj, recorded[0]))
        s.active_bake = next(i for i, b in enumerate(s.bakes) if load_path(b.path) == first)
    s.pending_bake = ""
    return recorded


def find_bake(obj: bpy.types.Object, bake_path: str | os.PathLike | None = None):
    """The bake record at ``bake_path`` (or the active one)."""
    s = obj.neural_rom
    if bake_path is None:
        rec = s.active_bake_record()
        if rec is None:
            raise NeuralRomError(f"'{obj.name}' has no bake; run Bake first.")
        return rec
    want = Path(bpy.path.abspath(os.fspath(bake_path))).resolve()
    for rec in s.bakes:
        if load_path(rec.path).resolve() == want:
            return rec
    raise NeuralRomError(
        f"'{obj.name}' has no bake at {bake_path}; bake it or pick one of its bakes."
    )


def open_bake(obj: bpy.types.Object, rec):
    """Open a recorded bake, refusing with "re-bake" when it no longer fits the mesh."""
    from ..core.cache import BakeCache

    s = obj.neural_rom
    if bm.surface_hash(obj) != s.source_hash or rec.source_hash != s.source_hash:
        raise CacheError(
            f"'{obj.name}' was edited after bake '{rec.name}' was made; re-tetrahedralize and re-bake."
        )
    if rec.tets_hash != s.tets_hash:
        raise CacheError(
            f"'{obj.name}' was re-tetrahedralized after bake '{rec.name}' was made; re-bake."
        )
    path = load_path(rec.path)
    try:
        cache = BakeCache.open(path, expect_mesh_hash=rec.mesh_hash)
    except CacheError as e:
        raise CacheError(f"Bake '{rec.name}' cannot be used ({e}); re-bake.") from e
    except FileNotFoundError as e:
        raise CacheError(f"Bake '{rec.name}' is missing ({path}); re-bake.") from e
    if cache.n_frames == 0:
        raise CacheError(f"Bake '{rec.name}' has no frames; re-bake.")
    return cache


class RenderMap:
    """Bake frame -> render-mesh vertex positions in the object's local space."""

    def __init__(self, obj: bpy.types.Object, rec):
        self.cache = open_bake(obj, rec)
        tets = load_tets(obj)
        self.embedding = tets.embedding
        self.n_surface = int(tets.mesh.n_surface_inputs)
        self.frame_start = int(rec.frame_start)
        self.positions = self.cache.channel("positions")
        n_render = self.n_render()
        if n_render != len(obj.data.vertices):
            raise CacheError(
                f"Bake '{rec.name}' has {n_render} render vertices but '{obj.name}' has "
                f"{len(obj.data.vertices)}; re-tetrahedralize and re-bake."
            )

    def n_render(self) -> int:
        return self.n_surface if self.embedding is None else int(self.embedding.n_points)

    @property
    def n_frames(self) -> int:
        return int(self.cache.n_frames)

    def index(self, scene_frame: int) -> int:
        """Cache frame shown at ``scene_frame`` (held at the ends)."""
        return int(np.clip(scene_frame - self.frame_start, 0, self.n_frames - 1))

    def world(self, k: int) -> np.ndarray:
        """(r, 3) world positions of the render vertices at cache frame ``k`` (m)."""
        P = np.asarray(self.positions[k], dtype=np.float64)
        return self.embedding.apply(P) if self.embedding is not None else P[: self.n_surface]

    def local(self, k: int, matrix_world: np.ndarray) -> np.ndarray:
        return bm.to_local(self.world(k), matrix_world)


# Open bakes and embeddings, per object name, reused frame to frame by playback.
_render_maps: dict[str, tuple[tuple, RenderMap]] = {}


def _forget_caches(name: str | None = None) -> None:
    if name is None:
        _render_maps.clear()
    else:
        _render_maps.pop(name, None)


def render_map(obj: bpy.types.Object) -> RenderMap:
    """The (cached) RenderMap of the object's active bake."""
    rec = find_bake(obj)
    s = obj.neural_rom
    key = (rec.path, rec.mesh_hash, rec.frames, s.tets_hash, s.source_hash)
    hit = _render_maps.get(obj.name)
    if hit is not None and hit[0] == key:
        return hit[1]
    rm = RenderMap(obj, rec)
    _render_maps[obj.name] = (key, rm)
    return rm


def clear_bakes(
    obj: bpy.types.Object, *, all_bakes: bool = False, delete_files: bool = True
) -> int:
    """Forget the active bake (or all of them) and delete their directories.

    Only directories that hold a Neural ROM bake (``meta.json``) are deleted. Stops
    playback first when it shows a bake being cleared. Returns the number cleared.
    """
    s = obj.neural_rom
    if not len(s.bakes):
        raise NeuralRomError(f"'{obj.name}' has no bakes to clear.")
    indices = list(range(len(s.bakes))) if all_bakes else [s.active_bake]
    if not all(0 <= i < len(s.bakes) for i in indices):
        raise NeuralRomError("No bake is selected; select one in the bake list.")
    if s.playback and (all_bakes or s.active_bake in indices):
        stop_playback(obj)
    paths = [load_path(s.bakes[i].path) for i in indices]
    for i in sorted(indices, reverse=True):
        s.bakes.remove(i)
    s.active_bake = min(s.active_bake, max(len(s.bakes) - 1, 0))
    _forget_caches(obj.name)
    if delete_files:
        kept = {load_path(b.path).resolve() for b in s.bakes}
        for p in paths:
            if p.resolve() not in kept and (p / "meta.json").is_file():
                shutil.rmtree(p, ignore_errors=True)
            stem = p.name.rsplit("_v", 1)[0]
            rest = p.parent / f"{stem}.tets.npz"
            if rest.is_file() and not any(k.name.startswith(stem + "_v") for k in kept):
                rest.unlink()
    return len(indices)


# --------------------------------------------------------------------------------------
# Playback


def start_playback(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> None:
    """Make the mesh follow its active bake as the timeline moves.

    Validates the bake first, then saves the rest shape and shows the current frame.
    """
    scene = scene or _scene_of(obj)
    if obj.data.shape_keys is not None:
        raise NeuralRomError(
            f"'{obj.name}' has shape keys, which override the vertex positions playback writes; "
            "use Export PC2 instead (its Mesh Cache modifier plays over shape keys)."
        )
    rm = render_map(obj)  # raises before anything changes
    if obj.neural_rom.simulate:
        from . import simulate

        simulate.stop_simulation(obj)
    bm.store_rest(obj.data)
    obj.neural_rom.playback = True
    apply_frame(obj, scene.frame_current, rm)


def stop_playback(obj: bpy.types.Object) -> None:
    """Stop following the bake and put the rest shape back."""
    obj.neural_rom.playback = False
    if obj.type == "MESH":
        bm.restore_rest(obj.data)


def apply_frame(obj: bpy.types.Object, scene_frame: int, rm: RenderMap | None = None) -> int:
    """Write the bake frame shown at ``scene_frame`` into the mesh. Returns the cache frame."""
    rm = rm or render_map(obj)
    k = rm.index(scene_frame)
    bm.set_positions(obj.data, rm.local(k, bm.matrix(obj)))
    return k


# --------------------------------------------------------------------------------------
# PC2 export


def default_pc2_path(obj: bpy.types.Object) -> Path:
    return cache_dir(obj) / f"{bpy.path.clean_name(obj.name)}.pc2"


def export_pc2(
    obj: bpy.types.Object,
    path: str | os.PathLike | None = None,
    *,
    bake_path: str | os.PathLike | None = None,
) -> Path:
    """Write a bake as a PC2 point cache of the render mesh (local space) and wire it to a
    Mesh Cache modifier (added first in the stack, or updated).

    The object's ``matrix_world`` is sampled per frame when it is animated, so the cache
    plays back in place under an animated transform. Playback, if on, is stopped: the
    modifier now shows the bake.
    """
    from ..core.pc2 import write_pc2

    rec = find_bake(obj, bake_path)
    rm = RenderMap(obj, rec)
    path = Path(bpy.path.abspath(os.fspath(path))) if path is not None else default_pc2_path(obj)
    if path.suffix.lower() != ".pc2":
        path = path.with_suffix(".pc2")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot create {path.parent} ({e.strerror or e}); pick another path."
        ) from e
    scene = _scene_of(obj)
    n = rm.n_frames
    if bm.is_animated(obj):
        mats = bm.sample_matrices(scene, [obj], range(rm.frame_start, rm.frame_start + n))[:, 0]
    else:
        mats = np.broadcast_to(bm.matrix(obj), (n, 4, 4))

    def frames() -> Iterator[np.ndarray]:
        for k in range(n):
            yield rm.local(k, mats[k])

    try:
        write_pc2(path, frames(), start_frame=rm.frame_start, sample_rate=1.0)
    except OSError as e:
        raise NeuralRomError(
            f"Cannot write {path} ({e.strerror or e}); pick a writable path."
        ) from e

    if obj.neural_rom.playback:
        stop_playback(obj)
    wire_mesh_cache(obj, path, rm.frame_start, MODIFIER_NAME)
    return path


# --------------------------------------------------------------------------------------
# Tet preview


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


# --------------------------------------------------------------------------------------
# Train


SIM_MODIFIER_NAME = "Neural ROM Simulation"


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
    from ..core.files import mesh_hash as cache_mesh_hash

    tets = load_tets(obj)
    X_world = bm.to_world(np.asarray(tets.mesh.X, dtype=np.float64), start_matrix(obj, scene))
    return cache_mesh_hash(X_world, tets.mesh.T)


def wire_mesh_cache(obj: bpy.types.Object, path: Path, frame_start: int, name: str) -> None:
    """Add (or update) a Mesh Cache modifier ``name`` playing the PC2 at ``path`` from
    ``frame_start``, first in the stack."""
    mod = obj.modifiers.get(name)
    if mod is None or mod.type != "MESH_CACHE":
        mod = obj.modifiers.new(name, "MESH_CACHE")
    mod.cache_format = "PC2"
    mod.filepath = store_path(obj, path)
    mod.time_mode = "FRAME"
    mod.play_mode = "SCENE"
    mod.frame_start = float(frame_start)  # cache sample 0 at this scene frame
    mod.frame_scale = 1.0
    mod.deform_mode = "OVERWRITE"
    mod.forward_axis, mod.up_axis = "POS_Y", "POS_Z"  # Blender's own axes: no conversion
    idx = obj.modifiers.find(mod.name)
    if idx > 0:
        obj.modifiers.move(idx, 0)


def render_world(tets: Tets, P: np.ndarray) -> np.ndarray:
    """(r, 3) render-vertex world positions of (n, 3) tet-node positions ``P``."""
    P = np.asarray(P, dtype=np.float64)
    if tets.embedding is not None:
        if P.ndim == 2:  # the sparse interpolation matrix: ~6x faster than apply's gather
            return tets.embedding.matrix @ P
        return tets.embedding.apply(P)
    return P[: int(tets.mesh.n_surface_inputs)]
