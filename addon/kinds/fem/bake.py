"""An object's bakes: the bake job (what the worker simulates), recording what it wrote,
finding and opening a bake (refusing a stale one with "re-bake"), mapping its frames to the
render mesh, showing it in the viewport (playback), and clearing it.

Each step validates everything it can first and changes the scene last, so a failure
leaves the scene as it was. A bake simulates in WORLD space (its rest mesh is the tet mesh
placed at the scene's start frame, written next to the bake); playback maps its positions
back to local space with the object's current inverse ``matrix_world``. Each bake record
keeps the ``source_hash`` and ``tets_hash`` it was baked from plus the hash of the world
mesh it simulated; a mismatch means the bake no longer belongs to the mesh.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import bpy
import numpy as np

from ....core import bake as core_bake
from ....core.bake.motion import Perturbation, describe_draws, name_salt, plot_variants
from ....core.bake.scenarios import validate_scenario
from ....core.data.cache import BakeCache, open_for_training
from ....core.data.files import mesh_hash as cache_mesh_hash
from ....core.data.meshfile import write_tetmesh
from ....core.errors import CacheError, NeuralRomError
from ....core.geometry.embedding import render_positions
from ....core.geometry.tetmesh import TetMesh
from ....core.physics import fem
from ...io import mesh as bm
from ...io.animation import owner_animation
from ...io.paths import cache_dir, load_path, scene_of, store_path
from ..cloth import model as cloth
from ..cloth.model import open_cloth_bake
from ..family.reference import bake_entries
from .tets import load_tets, pinned_nodes

BAKES_DIR = "bakes"


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


def scene_colliders(obj: bpy.types.Object, scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The collider objects of ``scene`` that act on ``obj`` (tet previews excluded)."""
    return [
        o
        for o in scene.objects
        if o is not obj and o.neural_rom.role == "COLLIDER" and not o.neural_rom.preview_of
    ]


def ignored_collision_objects(
    obj: bpy.types.Object, scene: bpy.types.Scene
) -> list[bpy.types.Object]:
    """Objects of ``scene`` with a Collision modifier (Blender's own physics sees them) whose
    Neural ROM role is not Collider: an FEM bake does not know their shape, so it ignores
    them, and the user is told (a ground plane set up for Blender's soft body or cloth)."""
    return [
        o
        for o in scene.objects
        if o is not obj
        and o.neural_rom.role == "NONE"
        and not o.neural_rom.preview_of
        and any(m.type == "COLLISION" for m in getattr(o, "modifiers", ()))
    ]


def scene_dt(scene: bpy.types.Scene) -> float:
    """Seconds per frame of ``scene``."""
    return float(scene.render.fps_base) / float(scene.render.fps)


def make_bake_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    seed: int | None = None,
    variants: int | None = None,
    shard: tuple[int, int] = (0, 1),
    restart: bool = False,
    processes: int = 0,
    motion: str | None = None,
) -> dict:
    """The worker job that bakes ``obj``'s scenario (JSON-able).

    Samples the colliders' and the object's ``matrix_world`` at every frame of the bake
    range (``scene.frame_start`` .. ``+ frames``; the current frame is restored), writes
    the world-space rest tet mesh next to the bakes, and records what is being baked on
    the object (``pending_bake``) for :func:`on_bake_done`.

    The worker resumes each variant's unfinished bake of the same mesh and settings after
    its last committed frame, keeps a complete one, and starts over one baked with other
    settings or on another mesh; ``restart`` bakes every variant from frame 0. Variants
    bake in ``processes`` worker processes at once (0: one per CPU core).

    ``motion`` (default: the object's Motion setting, ``bake_motion``) says how the pins
    move: "animation" draws each variant's from the object's animation (:func:`drawn_motion`),
    "scenario" has them follow the animation as it plays in every variant, "auto" the first
    when the object is pinned and animated.

    Returns
    -------
    dict: ``kind`` "bake", ``mesh`` (abs path of the world tets .npz), ``spec``
    (``BakeSpec.to_dict()``), ``out_dir``, ``name``, ``shard`` [i, N], ``restart``,
    ``overwrite``, ``processes`` (see ``core.jobs.bake.run_bake``), ``warnings`` (for the user,
    not the worker: objects with a Collision modifier the bake ignores).
    """
    from ....core.bake.prepare import prepare_body

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
    _pins(obj, s, scenario)
    n_nodes = len(tets.mesh.X)
    pinned = pinned_nodes(obj, tets)
    folder = cache_dir(obj)

    frames = int(s.frames)
    start = int(scene.frame_start)
    colliders = scene_colliders(obj, scene)
    mats = bm.sample_matrices(scene, [obj, *colliders], range(start, start + frames + 1))
    # sizes at the start frame (a collider's scale is not animated in the simulation)
    shapes = [
        bm.collider_shape(c, c.neural_rom.collider_shape, mats[0, j])
        for j, c in enumerate(colliders, start=1)
    ]
    X_local = np.asarray(tets.mesh.X, dtype=np.float64)
    X_world = bm.to_world(X_local, mats[0, 0])
    drawn = drawn_motion(obj, scene, s.bake_motion if motion is None else motion, start)
    pin_targets = None
    if drawn is not None:
        drawn["pins"] = X_world[pinned].tolist()
    elif len(pinned) and not np.allclose(mats[:, 0], mats[0, 0]):
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
    world = TetMesh(X_world, tets.mesh.T, tets.mesh.n_surface_inputs)
    # an embedded body's render surface, not the cage, touches colliders
    faces = None if tets.embedding is None else bm.surface(obj, world=False)[1]
    body = prepare_body(world, material, tets.embedding, faces)
    spec = core_bake.BakeSpec(
        **body.spec_fields(),
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
        motion=drawn,
    )
    spec.validate(n_nodes)

    out_dir = folder / BAKES_DIR
    out_dir.mkdir(exist_ok=True)
    name = f"{s.scenario}_s{spec.seed}"
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
    warnings = [
        f"'{o.name}' has a Collision modifier but its Neural ROM role is None, so the bake "
        "ignores it; set its role to Collider (and its Shape, e.g. Plane for a ground) to "
        "bake against it"
        for o in ignored_collision_objects(obj, scene)
    ]
    return {
        "kind": "bake",
        "warnings": warnings,
        "mesh": str(mesh_path),
        "spec": spec.to_dict(),
        "out_dir": str(out_dir),
        "name": name,
        "shard": [int(shard[0]), int(shard[1])],
        "restart": bool(restart),
        "overwrite": True,  # what cannot be resumed is baked again, as the user asked
        "processes": max(int(processes), 0),
    }


#: Probability that a drawn variant plays a stretch of the animation backwards.
FEM_REVERSE = 0.5

#: How a bake moves the pins (the object's ``bake_motion``; ``bake --motion``).
MOTIONS = ("auto", "animation", "scenario")


def drawn_motion(obj: bpy.types.Object, scene: bpy.types.Scene, mode: str, start: int):
    """The motion ``obj``'s bake variants draw their pins from (:attr:`core.bake.BakeSpec.motion`
    without ``pins``), or None when the pins follow the animation as it plays (``mode``
    "scenario", or "auto" on an object without pins or animation).

    The source is the object's rigid world frame (its own animation, its parents', the bone
    it hangs from) over the animation in the file from the bake's first frame ``start`` on
    (action and NLA strips), then over each other action made for it
    (:func:`.animation.owner_animation`). The scene's current frame is kept.

    Raises NeuralRomError (nothing changed) for an unknown mode, or for "animation" on an
    object without pins or without animation.
    """

    if mode not in MOTIONS:
        raise NeuralRomError(f"Unknown bake motion {mode!r}: use {', '.join(MOTIONS)}.")
    if mode == "scenario":
        return None
    s = obj.neural_rom
    pinned = bool(s.pin_group) and len(bm.vertex_group_indices(obj, s.pin_group)) > 0
    if not pinned:
        if mode == "animation":
            raise NeuralRomError(
                f"'{obj.name}' has no pins, so its animation moves nothing in the bake; pick a "
                "Pin Group (the vertices that follow the animation) or bake with Motion Auto."
            )
        return None
    with bm.frame_kept(scene):
        sources = owner_animation(scene, obj, "", start)
    if not sources:
        if mode == "animation":
            raise NeuralRomError(
                f"'{obj.name}' has no animation to draw the bakes' motion from: key it (or a "
                "parent, or the bone it hangs from), or bake with Motion Auto."
            )
        return None
    return {
        "sources": [
            {"name": x["name"], "frames": list(x["frames"]), "track": x["track"].tolist()}
            for x in sources
        ],
        # a swing may also turn back early (a walk, the cloth's, never walks backwards)
        "perturbation": Perturbation(reverse=FEM_REVERSE).to_dict(),
        # two objects baked with one seed draw different variants
        "salt": name_salt(obj.name),
    }


def on_bake_done(obj: bpy.types.Object, result: dict) -> list[str]:
    """Record the bakes a finished (or cancelled) job left on disk on ``obj``.

    ``result`` is the worker's result (``paths`` of the bakes written); without it the
    bakes of the pending job are found on disk. Every bake with committed frames is
    recorded, a cancelled bake's prefix included. Returns the recorded paths.
    """
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
        rec.frame_start = int(pending.get("frame_start", scene_of(obj).frame_start))
        rec.nbytes = float(cache.nbytes)
        rec.status = cache.status
        rec.scenario = pending.get("scenario", cache.meta.get("scenario", {}).get("kind", ""))
        rec.motion = motion_text(cache.meta.get("spec", {}).get("motion"))
        rec.mesh_hash = cache.mesh_hash
        rec.tets_hash = pending.get("tets_hash", s.tets_hash)
        rec.source_hash = pending.get("source_hash", s.source_hash)
        recorded.append(str(p))
        forget(obj.name)
    if recorded:
        first = load_path(store_path(obj, recorded[0]))
        s.active_bake = next(i for i, b in enumerate(s.bakes) if load_path(b.path) == first)
        variants_picture(obj)
    s.pending_bake = ""
    return recorded


#: The picture of an object's drawn variants (:func:`variants_picture`), in its cache folder.
VARIANTS_PICTURE = "variants.png"


def variants_image_name(obj: bpy.types.Object) -> str:
    return f"Neural ROM variants {obj.name}"


def variants_picture(obj: bpy.types.Object) -> Path | None:
    """Draw the motions of ``obj``'s bakes drawn from its animation
    (:func:`core.motion.plot_variants`: one row per variant, in the bake list's order) to
    ``<cache dir>/<object>/variants.png`` and into an image the Bake panel shows; None (and
    no picture) when no bake of it draws its motion."""

    tracks = []
    for rec in obj.neural_rom.bakes:
        try:
            meta = BakeCache.open(load_path(rec.path)).meta
        except (CacheError, OSError):
            continue
        track = ((meta.get("spec") or {}).get("motion") or {}).get("track")
        if track is not None:
            tracks.append(np.asarray(track, dtype=np.float64))
    if not tracks:
        return None
    rgb = plot_variants(tracks)
    H, W = rgb.shape[:2]
    rgba = np.concatenate([rgb, np.ones((H, W, 1))], axis=2)[::-1]  # Blender's rows: bottom up
    path = cache_dir(obj) / VARIANTS_PICTURE
    path.parent.mkdir(parents=True, exist_ok=True)
    name = variants_image_name(obj)
    img = bpy.data.images.get(name)
    if img is not None and tuple(img.size) != (W, H):
        bpy.data.images.remove(img)
        img = None
    if img is None:
        img = bpy.data.images.new(name, W, H, alpha=False)
    img.pixels.foreach_set(rgba.astype(np.float32).ravel())
    img.filepath_raw = str(path)
    img.file_format = "PNG"
    img.save()
    img.preview_ensure()
    return path


def motion_text(record: dict | None) -> str:
    """What a variant's drawn motion was (:func:`core.motion.describe_draws`), "" for none."""
    if not record or "speed" not in record:
        return ""
    return describe_draws(record)


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
    if rec.kind == "cloth":  # a bake of the mesh itself, by Blender's cloth: no tets
        return open_cloth_bake(obj, rec)
    s = obj.neural_rom
    if bm.surface_hash(obj) != s.source_hash or rec.source_hash != s.source_hash:
        raise CacheError(
            f"'{obj.name}' was edited after bake '{rec.name}' was made; re-tetrahedralize and re-bake."
        )
    if rec.tets_hash != s.tets_hash:
        raise CacheError(
            f"'{obj.name}' was re-tetrahedralized after bake '{rec.name}' was made; re-bake."
        )
    return open_for_training(load_path(rec.path), rec.mesh_hash, name=rec.name)


class RenderMap:
    """Bake frame -> render-mesh vertex positions in the object's local space."""

    def __init__(self, obj: bpy.types.Object, rec):
        self.cache = open_bake(obj, rec)
        if rec.kind == "cloth":  # the bake holds the mesh's own vertices
            self.embedding, self.n_surface = None, len(self.cache.X)
        else:
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
        return render_positions(self.positions[k], self.n_surface, self.embedding)

    def local(self, k: int, matrix_world: np.ndarray) -> np.ndarray:
        return bm.to_local(self.world(k), matrix_world)


# Open bakes and embeddings, per object name, reused frame to frame by playback.


# Open bakes and embeddings, per object name, reused frame to frame by playback.
_render_maps: dict[str, tuple[tuple, RenderMap]] = {}


def forget(name: str | None = None) -> None:
    """Close the open bakes of object ``name`` (default: of every object)."""
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
    forget(obj.name)
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


def start_playback(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> None:
    """Make the mesh follow its active bake as the timeline moves.

    Validates the bake first, then saves the rest shape and shows the current frame.
    """
    scene = scene or scene_of(obj)
    if obj.data.shape_keys is not None:
        raise NeuralRomError(
            f"'{obj.name}' has shape keys, which override the vertex positions playback writes; "
            "use Export PC2 instead (its Mesh Cache modifier plays over shape keys)."
        )
    rm = render_map(obj)  # raises before anything changes
    # One mode drives the vertices at a time. The simulation drives only objects whose
    # Simulate is on and starts afresh when it is turned on again, and the rest shape it
    # saved is the one playback keeps: turning the flag off is all it takes (and bakes
    # need not import the simulation, which imports them).
    obj.neural_rom.simulate = False
    bm.store_rest(obj.data)
    obj.neural_rom.playback = True

    cloth.hold(obj)  # a cloth object's Cloth modifier is muted while the bake drives it
    apply_frame(obj, scene.frame_current, rm)


def stop_playback(obj: bpy.types.Object) -> None:
    """Stop following the bake and put the rest shape back."""
    obj.neural_rom.playback = False
    if obj.type == "MESH":
        bm.restore_rest(obj.data)

    cloth.release(obj)


def apply_frame(obj: bpy.types.Object, scene_frame: int, rm: RenderMap | None = None) -> int:
    """Write the bake frame shown at ``scene_frame`` into the mesh. Returns the cache frame."""
    rm = rm or render_map(obj)
    k = rm.index(scene_frame)
    bm.set_positions(obj.data, rm.local(k, bm.matrix(obj)))
    return k


def object_bakes(
    obj: bpy.types.Object, scene: bpy.types.Scene, kind: str = "fem"
) -> tuple[list[str], str]:
    """``(paths, mesh_hash)``: the absolute paths of ``obj``'s bakes of ``kind`` ("fem" or
    "cloth") and the hash of the world mesh they simulate, each bake checked (tets fresh;
    bakes fresh, not empty, all of one placement of the object), refused with what to do."""
    s = obj.neural_rom
    if not any((rec.kind or "fem") == kind for rec in s.bakes):
        first = "Cloth Bake" if kind == "cloth" else "Bake"
        raise NeuralRomError(f"'{obj.name}' has no bakes to train on; run {first} first.")
    if kind == "fem":
        load_tets(obj)  # edited mesh or missing tets: refuse before opening bakes
    paths, hashes = [], set()
    for rec in s.bakes:
        if (rec.kind or "fem") != kind:
            continue  # bakes of the other kind (FEM bakes of a cloth object)
        cache = open_bake(obj, rec)  # stale, missing or empty: "re-bake"
        paths.append(str(load_path(rec.path).resolve()))
        hashes.add(cache.mesh_hash)
    if len(hashes) > 1:
        raise NeuralRomError(
            f"The bakes of '{obj.name}' simulate the mesh at different placements (it was moved "
            "between bakes); clear the old bakes or re-bake them all, then train."
        )
    return paths, hashes.pop()


def training_data(obj: bpy.types.Object, scene, method, kind: str) -> tuple[list, int, str]:
    """What a train job of ``method`` reads for ``obj`` (the default
    :attr:`..BlenderKind.training_data`): its bakes of ``kind`` (:func:`object_bakes`), for
    a method whose field spans a space shared with other objects (fem's) each with its
    placement (:func:`..family.reference.bake_entries`)."""
    paths, mesh_hash = object_bakes(obj, scene, kind)
    bakes = paths
    if method.other_mesh and kind == "fem":  # a field over a space shared with other objects
        bakes = bake_entries(obj, scene, paths)
    return bakes, len(paths), mesh_hash
