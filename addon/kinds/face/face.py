"""Active faces in Blender (Srinivasan et al. 2021): set up a face from a skin with shape
keys, a skull and a jaw; train on it; drive it with latent sliders or marker empties.

The stages, in the order a user meets them (the operators in ``operators/face.py`` and the
command line call these functions):

1. **Set Up Face** (:func:`make_setup_job`, :func:`on_setup_done`): the skin (the object
   itself: its rest mesh and its shape keys, the sculpted expressions), the skull and the jaw
   (closed meshes picked in the Face box) are gathered in the skin's local space and a worker
   builds the flesh lattice between them and writes the face file
   (:func:`..core.facejob.setup_face`). The face file is what Train fits
   (:func:`make_face_train_job`: the training data kind "face",
   :func:`..core.registry.methods_for`). **Add Demo Head** (:func:`make_demo_job`) has a
   worker build the procedural head and its simulated expressions, then makes the three
   objects and records the face.
2. **Drive** (:class:`.engine.FaceEngine` under the one :class:`...driver.Driver`, the
   viewport; :func:`make_face_simulation_job`, Bake Simulation): every frame's inputs are
   read from Blender into a :class:`..core.simjob.Track` (:func:`gather_track`), in the
   skin's local space: the latent
   sliders (keyable custom properties ``nrom_latent_1`` ... of the skin, made when a model
   that takes sliders is recorded, :func:`make_sliders`), or the markers (empties bound to
   skin vertices, :func:`add_markers`), the jaw's transform relative to its rest as the
   ``reference_frame``, and the scene's colliders. The viewport solves the current frame
   (a quasistatic face has no history to step through: each frame is the equilibrium of its
   inputs) and shows the skin through a Geometry Nodes modifier that reads the solved
   positions from a point attribute, so the shape keys stay untouched; Bake Simulation steps
   the same inputs in a worker (:func:`..core.facejob.simulate_face_to_pc2`) and a Mesh
   Cache modifier plays the PC2 over the shape keys.

Conventions (the skin's local space, the hinge, jaw angles and held-out flags in shape key
names): :mod:`..core.facejob`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import bpy
import numpy as np

from ....core import registry
from ....core.data.files import job_folder, write_npz
from ....core.data.modelfile import load_model
from ....core.engine.track import Track, write_track
from ....core.errors import CacheError, MeshError, NeuralRomError
from ....core.jobs import face as facejob
from ....core.jobs.simulate import TRACK_FILE
from ....core.kinds.face import inputs as fi
from ...io import mesh as bm
from ...io.paths import cache_base, cache_dir, load_path, store_path
from ..fem import bake as bakes

SLIDER_PREFIX = "nrom_latent_"
#: Custom properties of a marker empty: the skin object it drives, the skin vertex, a weight.
MARKER_OF = "nrom_marker_of"
MARKER_VERTEX = "nrom_marker_vertex"
MARKER_WEIGHT = "nrom_marker_weight"
#: The simulated skin, in the skin's local space, read by :data:`MODIFIER`'s node group.
SIM_ATTRIBUTE = "nrom_face_position"
MODIFIER = "Neural ROM Face"
NODE_GROUP = "Neural ROM Face"
JOB_STEM = "face"  # face-<8 hex>.job: a face job's gathered inputs, until it ends
#: What Train reported of a face fit, on the skin (mm), for the panel.
FIT_PROP = "nrom_face_fit"


def claims(obj) -> bool:
    """Whether ``obj`` trains on its face (:class:`..BlenderKind`): Set Up Face recorded one."""
    return bool(obj.neural_rom.face.path)


def is_face(obj) -> bool:
    """Whether Set Up Face recorded a face on ``obj``."""
    s = getattr(obj, "neural_rom", None)
    return s is not None and obj.type == "MESH" and bool(s.face.path)


# --------------------------------------------------------------------------------------
# Set up


def _in_skin_space(obj: bpy.types.Object, other: bpy.types.Object, S_inv: np.ndarray):
    """(V, F) of ``other``'s rest mesh in ``obj``'s local space."""
    V, F = bm.surface(other, world=True)
    return bm.to_world(V, S_inv), F


def shape_keys(obj: bpy.types.Object) -> tuple[np.ndarray, list[str]]:
    """The sculpted expressions: every shape key but the reference (Basis), as absolute local
    positions (K, s, 3) and names."""
    keys = obj.data.shape_keys
    if keys is None:
        return np.zeros((0, len(obj.data.vertices), 3)), []
    out, names = [], []
    for kb in keys.key_blocks:
        if kb == keys.reference_key:
            continue
        co = np.empty(3 * len(kb.data), dtype=np.float32)
        kb.data.foreach_get("co", co)
        out.append(co.reshape(-1, 3).astype(np.float64))
        names.append(kb.name)
    return np.array(out).reshape(len(out), -1, 3), names


def make_setup_job(obj: bpy.types.Object, scene=None, *, spacing: float | None = None) -> dict:
    """The worker job that builds the face of ``obj`` (JSON-able); the object is not changed.

    Checks first what needs no lattice: a mesh skin with shape keys, a skull and a jaw that
    are meshes other than the skin, a skin without scale. Writes the meshes (skin-local) into
    the job folder. ``spacing`` (m) overrides the object's Lattice Spacing.
    """
    if obj.type != "MESH":
        raise MeshError(f"'{obj.name}' is not a mesh: the skin of a face is a mesh object.")
    f = obj.neural_rom.face
    for role, other in (("skull", f.skull), ("jaw", f.jaw)):
        if other is None:
            raise MeshError(f"Pick the {role} of '{obj.name}' in its Face box first.")
        if other == obj:
            raise MeshError(f"The {role} of '{obj.name}' is the skin itself: pick the {role} mesh.")
    if f.skull == f.jaw:
        raise MeshError("The skull and the jaw are the same object: pick two meshes.")
    S_inv = np.linalg.inv(fi.check_rigid(bm.matrix(obj), obj.name))
    skin_V, skin_F = bm.surface(obj, world=False)
    P, names = shape_keys(obj)
    if not names:
        raise MeshError(
            f"'{obj.name}' has no shape keys to fit: sculpt the expressions as shape keys (a "
            "Basis and one key per expression; 'jaw20' in a key's name opens the jaw 20 degrees)."
        )
    skull_V, skull_F = _in_skin_space(obj, f.skull, S_inv)
    jaw_V, jaw_F = _in_skin_space(obj, f.jaw, S_inv)
    J = S_inv @ bm.matrix(f.jaw)  # the jaw's rest, skin-local
    pivot, axis = fi.jaw_hinge(J)
    folder = job_folder(cache_dir(obj), JOB_STEM)
    folder.mkdir(parents=True, exist_ok=True)

    inputs = folder / facejob.INPUTS_FILE
    write_npz(
        inputs,
        {
            "skin_V": skin_V,
            "skin_F": skin_F,
            "skull_V": skull_V,
            "skull_F": skull_F,
            "jaw_V": jaw_V,
            "jaw_F": jaw_F,
            "jaw_pivot": pivot,
            "jaw_axis": axis,
            "key_positions": P,
        },
    )
    return {
        "kind": "face_setup",
        "name": obj.name,
        # what the object records once the face is written (echoed back by the job's result:
        # nothing is written on the object before, so a refused set-up changes nothing)
        "record": {"jaw_rest": J.ravel().tolist(), "skin_hash": bm.surface_hash(obj)},
        "inputs": str(inputs),
        "key_names": names,
        "spacing": float(f.spacing if spacing is None else spacing),
        "out": str(cache_dir(obj) / facejob.FACE_FILE),
        "folder": str(folder),
        "log_dir": str(cache_dir(obj) / "logs"),
    }


def discard_job(job: dict) -> None:
    shutil.rmtree(job["folder"], ignore_errors=True)


def on_setup_done(obj: bpy.types.Object, result: dict) -> bool:
    """Record the face a finished set-up wrote (a cancelled one records nothing) and make the
    skin Deformable. A model of an older face is kept but no longer drives the object (its
    flesh differs: re-train)."""
    f = obj.neural_rom.face
    if not result or result.get("cancelled") or not result.get("path"):
        return False
    record = result.get("record") or {}
    f.path = store_path(obj, result["path"])
    f.tets, f.nodes = int(result["tets"]), int(result["nodes"])
    f.skull_nodes, f.jaw_nodes = int(result["skull_nodes"]), int(result["jaw_nodes"])
    f.keys, f.held_out = int(result["keys"]), int(result["held_out"])
    f.used_spacing = float(result.get("spacing", 0.0))
    f.min_dihedral = float(result["min_dihedral_deg"])
    f.mesh_hash = str(result["mesh_hash"])
    obj.neural_rom.role = "DEFORMABLE"  # a face is: Train and Simulate take it (the CLI's too)
    if record:
        f.jaw_rest = record["jaw_rest"]
        f.skin_hash = record["skin_hash"]
    return True  # a running simulation rebuilds its driver: its key holds the face's hash


def check_face(obj: bpy.types.Object) -> Path:
    """The face file of ``obj``, refused with what to do when it is missing or the skin was
    edited since Set Up Face."""
    f = obj.neural_rom.face
    if not f.path:
        raise NeuralRomError(f"'{obj.name}' has no face: pick its skull and jaw and Set Up Face.")
    path = load_path(f.path)
    if not path.is_file():
        raise CacheError(
            f"The face file of '{obj.name}' is missing ({path}): run Set Up Face again (or "
            "check that the cache folder moved with the .blend)."
        )
    if f.skin_hash and f.skin_hash != bm.surface_hash(obj):
        raise CacheError(
            f"The skin of '{obj.name}' was edited after Set Up Face (its shape keys must have "
            "the vertex count and order of the face): run Set Up Face again."
        )
    return path


def training_data(obj: bpy.types.Object, scene, method, kind: str) -> tuple[list, int, str]:
    """What a train job reads for a face (its :attr:`..BlenderKind.training_data`): its
    face file (missing, or the skin edited since Set Up Face: refused here), no bakes."""
    return [str(check_face(obj))], 0, obj.neural_rom.face.mesh_hash


def check_face_model(obj: bpy.types.Object) -> Path:
    """The model file of ``obj``'s face (:func:`check_face` first), refused with what to do
    when there is none or it is missing; it is not loaded."""
    check_face(obj)
    s = obj.neural_rom
    if not s.model.path:
        raise NeuralRomError(f"'{obj.name}' has no trained model; run Train first.")
    path = load_path(s.model.path)
    if not path.is_file():
        raise CacheError(f"The model of '{obj.name}' is missing ({path}); train again.")
    return path


# --------------------------------------------------------------------------------------
# Demo head


def make_demo_job(
    scene: bpy.types.Scene,
    *,
    name: str = "Face",
    size: str = "small",
    keys: int = 16,
    held_out: int = 4,
    seed: int = 0,
) -> dict:
    """The worker job that builds the procedural demo head with ``keys`` simulated
    expressions into ``<cache dir>/<name>/face.npz``."""
    base = cache_base(scene)
    if base.startswith("//") and not bpy.data.filepath:
        raise NeuralRomError(
            f"Save the .blend file first: the cache directory '{base}' is relative to it."
        )
    folder = Path(bpy.path.abspath(base)) / bpy.path.clean_name(name)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "kind": "face_demo",
        "name": name,
        "size": size,
        "keys": int(keys),
        "held_out": int(held_out),
        "seed": int(seed),
        "out": str(folder / facejob.FACE_FILE),
        "log_dir": str(folder / "logs"),
    }


def _mesh_object(scene, name: str, V, F, collection) -> bpy.types.Object:
    obj = bpy.data.objects.new(name, bm.mesh_from_arrays(name, V, F))
    collection.objects.link(obj)
    return obj


def build_demo_objects(scene: bpy.types.Scene, name: str, result: dict) -> bpy.types.Object:
    """The skin (with its shape keys), skull and jaw of a demo face file, the face recorded
    on the skin; returns the skin. The jaw's origin is the hinge (rotate it about its X axis
    to open the mouth)."""
    from ....core.kinds.face.rig import load_face

    rig, keys = load_face(result["path"])
    coll = bpy.data.collections.new(name)
    scene.collection.children.link(coll)
    skin = _mesh_object(scene, name, rig.skin_V, rig.skin_F, coll)
    skull = _mesh_object(scene, f"{name} Skull", rig.bones["skull_V"], rig.bones["skull_F"], coll)
    pivot = np.asarray(rig.jaw_pivot, float)
    jaw = _mesh_object(scene, f"{name} Jaw", rig.bones["jaw_V"] - pivot, rig.bones["jaw_F"], coll)
    jaw.location = pivot
    for o in (skull, jaw):
        o.display_type = "WIRE"
    skin.shape_key_add(name="Basis", from_mix=False)
    for P, label, angle, held in zip(
        keys.positions, keys.names, keys.jaw, keys.held_out, strict=True
    ):
        kb = skin.shape_key_add(name=facejob.key_name(label, float(angle), bool(held)))
        kb.data.foreach_set("co", np.asarray(P, np.float32).ravel())
    s = skin.neural_rom
    s.face.skull, s.face.jaw = skull, jaw
    s.face.spacing = float(result.get("spacing", 0.0))
    record = {
        "jaw_rest": np.array(jaw.matrix_basis).ravel().tolist(),
        "skin_hash": bm.surface_hash(skin),
    }
    on_setup_done(skin, {**result, "record": record})
    return skin


# --------------------------------------------------------------------------------------
# Sliders (made when a model that takes them is recorded, :func:`.training.on_train_done`)


def slider_names(count: int) -> list[str]:
    return [f"{SLIDER_PREFIX}{i + 1}" for i in range(count)]


def make_sliders(obj: bpy.types.Object, model_path, result: dict | None = None) -> list[str]:
    """One keyable float custom property per latent coordinate of the model at
    ``model_path`` on ``obj`` (``nrom_latent_1`` ...), their soft range the spread of the
    training keys' codes; an existing slider keeps its value and keys, a slider beyond the
    latent size is removed. Returns the names."""
    codes = np.asarray(load_model(model_path).arrays["codes"], float)
    names = slider_names(codes.shape[1])
    lo, hi = fi.slider_ranges(codes)
    for i, name in enumerate(names):
        if name not in obj.keys():
            obj[name] = 0.0
        obj.id_properties_ui(name).update(
            soft_min=float(lo[i]),
            soft_max=float(hi[i]),
            description=f"Latent coordinate {i + 1} of the face (keyable: I over the field)",
        )
    for key in list(obj.keys()):
        if key.startswith(SLIDER_PREFIX) and key not in names:
            del obj[key]
    if result is not None:
        obj[FIT_PROP] = {
            **{
                k: 1000.0 * float(result[k])  # millimetres, under the result's names
                for k in (
                    "train_error_m",
                    "skin_train_error_m",
                    "warm_error_m",
                    "max_error_val_m",
                    "held_out_mean_error_m",
                    "held_out_pca_mean_error_m",
                )
                if result.get(k) is not None
            },
            "latent": int(codes.shape[1]),
        }
    return names


def fit_lines(obj: bpy.types.Object) -> list[str]:
    """What Train measured of a face's fit, in words (the Face box and ``train`` say these):
    the training keys' mean skin error (the skin shown at their codes, and the flesh's
    equilibria), and the held-out keys' (each key's code refitted to
    its skin): their mean vertex error, the largest vertex error of any of them, and the
    mean of the PCA of the training keys with as many dimensions as the latent code beside
    it."""
    fit = obj.get(FIT_PROP) or {}
    lines = []
    if "skin_train_error_m" in fit:  # the skin shown; the flesh's equilibria beside it
        lines.append(
            f"Training keys: {fit['skin_train_error_m']:.3g} mm mean skin error at their "
            f"codes (the flesh's equilibria {fit.get('train_error_m', 0.0):.3g} mm)"
        )
    elif "train_error_m" in fit:
        lines.append(f"Training keys: {fit['train_error_m']:.3g} mm mean skin error")
    if "max_error_val_m" in fit:
        lines.append(
            f"Held-out keys: {fit.get('held_out_mean_error_m', 0.0):.3g} mm mean, largest "
            f"vertex {fit['max_error_val_m']:.3g} mm (PCA-{fit.get('latent', 0)} of the "
            f"keys: {fit.get('held_out_pca_mean_error_m', 0.0):.3g} mm mean)"
        )
    elif fit:
        lines.append("No key held out ('heldout' in a key's name measures the fit)")
    return lines


def slider_values(obj: bpy.types.Object, count: int) -> np.ndarray:
    return np.array([float(obj.get(n, 0.0)) for n in slider_names(count)])


def training_codes(obj: bpy.types.Object) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The latent codes of the training keys (N, d), their names and jaw angles (rad): the
    face file's keys not held out, in order."""
    from ....core.kinds.face.rig import load_face

    codes = np.asarray(load_model(load_path(obj.neural_rom.model.path)).arrays["codes"], float)
    _, keys = load_face(check_face(obj))
    train = fi.training_keys(keys.held_out, len(codes))
    return codes, [keys.names[i] for i in train], np.asarray(keys.jaw, float)[train]


def set_jaw_angle(obj: bpy.types.Object, angle: float, head=None) -> None:
    """Put the jaw of ``obj``'s face at ``angle`` (rad) about its hinge (its local X axis
    through its origin at set-up), with the skin where it is now (moved by the head's motion
    ``head``, a (4, 4) skin-local matrix, when the markers solve it)."""
    f = obj.neural_rom.face
    if f.jaw is None:
        return
    from mathutils import Matrix

    S = bm.matrix(obj) if head is None else bm.matrix(obj) @ np.asarray(head, float)
    f.jaw.matrix_world = Matrix(fi.jaw_world(S, f.jaw_rest, angle).tolist())


def set_pose(obj: bpy.types.Object, z: np.ndarray, angle: float) -> None:
    """Set the sliders of ``obj`` to the latent code ``z`` (d,) and its jaw to ``angle`` (rad)."""
    for name, v in zip(slider_names(len(z)), z, strict=True):
        obj[name] = float(v)
    set_jaw_angle(obj, angle)


def pose_from_key(obj: bpy.types.Object, index: int) -> str:
    """Set the sliders to the code of training key ``index`` and the jaw to its angle;
    returns the key's name."""
    codes, names, jaw = training_codes(obj)
    if not 0 <= index < len(codes):
        raise NeuralRomError(
            f"The model has {len(codes)} training keys; pick one of 0..{len(codes) - 1}."
        )
    set_pose(obj, codes[index], float(jaw[index]))
    return names[index]


def make_fit_key_job(obj: bpy.types.Object, scene=None, *, key_name: str = "") -> dict:
    """The worker job that fits the sliders to a shape key (default: the active one), held
    out of training or not (:func:`..core.facejob.fit_key`); the object is not changed."""

    s = obj.neural_rom
    model = check_face_model(obj)
    keys = obj.data.shape_keys
    name = key_name or (obj.active_shape_key.name if obj.active_shape_key else "")
    kb = keys.key_blocks.get(name) if keys is not None else None
    if kb is None or kb == keys.reference_key:
        raise NeuralRomError(
            f"Pick a shape key of '{obj.name}' to fit (not the Basis): make it the active one "
            "in Object Data > Shape Keys."
        )
    co = np.empty(3 * len(kb.data), dtype=np.float32)
    kb.data.foreach_get("co", co)
    angle = facejob.key_jaw_angle(name)
    folder = job_folder(cache_dir(obj), JOB_STEM)
    folder.mkdir(parents=True, exist_ok=True)
    inputs = folder / "fit_key.npz"
    write_npz(
        inputs,
        {
            "targets": co.reshape(-1, 3).astype(np.float64),
            "jaw": fi.jaw_reference(s.face.jaw_rest, angle),
        },
    )
    return {
        "kind": "face_fit_key",
        "name": obj.name,
        "model": str(model),
        "expect_mesh_hash": s.face.mesh_hash,
        **registry.job_fields_of(s.model.method),
        "inputs": str(inputs),
        "key": name,
        "jaw_angle": angle,
        "folder": str(folder),
        "log_dir": str(cache_dir(obj) / "logs"),
    }


#: The last key the sliders were fitted to, on the skin: name, mean and max error (mm).
FIT_KEY_PROP = "nrom_face_fit_key"


def on_fit_key_done(obj: bpy.types.Object, job: dict, result: dict) -> dict | None:
    """Set the sliders to the fitted code and the jaw to the key's angle."""
    if not result or result.get("cancelled") or "z" not in result:
        return None
    set_pose(obj, np.asarray(result["z"], float), float(job["jaw_angle"]))
    obj[FIT_KEY_PROP] = {
        "key": job["key"],
        "mean_mm": 1000.0 * float(result["mean_error_m"]),
        "max_mm": 1000.0 * float(result["max_error_m"]),
    }
    return result


# --------------------------------------------------------------------------------------
# Markers


def markers_of(obj: bpy.types.Object, scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The marker empties bound to ``obj``'s skin, by name."""
    return sorted((o for o in scene.objects if o.get(MARKER_OF) == obj.name), key=lambda o: o.name)


def add_markers(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    count: int = 30,
    seed: int = 0,
    vertices=None,
    size: float = 0.004,
    layout: str = "FACE",
    rigid: int | None = None,
) -> list[bpy.types.Object]:
    """Marker empties bound to skin vertices (``vertices``; default the selected vertices of
    the skin, else ``count`` placed by ``layout``, :func:`..core.faceinputs.marker_layout`:
    by default on the face between brow and chin, denser where the shape keys move it, and
    ``rigid`` more where the skin moves with the skull, by default
    :data:`..core.faceinputs.RIGID_MARKERS` when Head From Markers is on, else none), at
    the vertices' rest positions, in a collection "<skin> Markers". Animate them (or
    constrain them to a tracked point) and set Drive to Markers.

    A skin has one set: placed by the layout only while it has no markers (a second set
    would double every marker; refused, saying what to do, nothing changed); on given or
    selected vertices, only those without a marker get one.

    Raises NeuralRomError (nothing added) for a second set or vertices that all have one."""
    V = bm.rest_positions(obj.data)
    if vertices is None:
        sel = np.zeros(len(obj.data.vertices), dtype=bool)
        obj.data.vertices.foreach_get("select", sel)
        vertices = np.flatnonzero(sel) if 0 < sel.sum() < len(sel) else None
    have = {int(m[MARKER_VERTEX]) for m in markers_of(obj, scene)}
    if vertices is None and have:
        raise NeuralRomError(
            f"'{obj.name}' has {len(have)} markers already (collection '{obj.name} "
            "Markers'): delete them to place a new set, or select skin vertices to add "
            "markers there."
        )
    if vertices is not None:
        vertices = [int(v) for v in np.asarray(vertices).reshape(-1) if int(v) not in have]
        if not vertices:
            raise NeuralRomError(
                f"Every vertex picked has a marker of '{obj.name}' already: select others."
            )
    if vertices is None:
        _, F = bm.surface(obj, world=False)
        if rigid is None:
            rigid = fi.RIGID_MARKERS if obj.neural_rom.face.head_from_markers else 0
        vertices = fi.marker_layout(V, F, count, seed, layout, keys=shape_keys(obj)[0], rigid=rigid)
    vertices = np.asarray(vertices, dtype=np.int64)
    if vertices.size == 0 or vertices.min() < 0 or vertices.max() >= len(V):
        raise NeuralRomError(f"Marker vertices must be skin vertices 0..{len(V) - 1}.")
    name = f"{obj.name} Markers"
    coll = bpy.data.collections.get(name)
    if coll is None:
        coll = bpy.data.collections.new(name)
        scene.collection.children.link(coll)
    W = bm.to_world(V[vertices], bm.matrix(obj))
    out = []
    for v, p in zip(vertices, W, strict=True):
        e = bpy.data.objects.new(f"{obj.name} Marker {int(v)}", None)
        e.empty_display_type = "SPHERE"
        e.empty_display_size = size
        e.location = p
        e[MARKER_OF] = obj.name
        e[MARKER_VERTEX] = int(v)
        e[MARKER_WEIGHT] = 1.0
        coll.objects.link(e)
        out.append(e)
    return out


# --------------------------------------------------------------------------------------
# Inputs of a frame


def _now(obj, colliders, markers, n_sliders: int, read_colliders) -> dict:
    """One frame's inputs read from Blender, in the skin's local space
    (:func:`..core.faceinputs.frame_inputs`)."""
    f = obj.neural_rom.face
    return fi.frame_inputs(
        bm.matrix(obj),
        read_colliders(colliders),
        name=obj.name,
        jaw=None if f.jaw is None else bm.matrix(f.jaw),
        jaw_rest=f.jaw_rest,
        sliders=slider_values(obj, n_sliders) if f.drive == "SLIDERS" else None,
        markers=(
            np.array([m.matrix_world.translation for m in markers])
            if f.drive == "MARKERS"
            else None
        ),
    )


def gather_track(
    obj, scene, frames: range | None = None, *, n_sliders: int, read_colliders
) -> Track:
    """The inputs of ``frames`` (default: the current frame alone) as a
    :class:`..core.simjob.Track` in the skin's local space, sampled as
    :func:`..io.mesh.sample` does (the current frame is restored).

    ``read_colliders(objects)`` gives the core colliders of collider objects now (world;
    :func:`.simulate.collider_inputs`: the layer above passes it in).
    """
    colliders = bakes.scene_colliders(obj, scene)
    f = obj.neural_rom.face
    markers = markers_of(obj, scene) if f.drive == "MARKERS" else []
    if f.drive == "MARKERS" and not markers:
        raise NeuralRomError(
            f"'{obj.name}' is driven by markers but has none: Add Markers (or set Drive to "
            "Sliders)."
        )
    if f.drive == "MARKERS" and f.head_from_markers:
        why = fi.head_markers_problem(
            bm.rest_positions(obj.data),
            shape_keys(obj)[0],
            [int(m[MARKER_VERTEX]) for m in markers],
        )
        if why:
            raise NeuralRomError(f"'{obj.name}': {why}")
    name = obj.name
    if frames is None:
        rows = [_now(obj, colliders, markers, n_sliders, read_colliders)]
        frame0 = scene.frame_current
    else:
        marker_names = [m.name for m in markers]
        col_names = [c.name for c in colliders]

        def read():
            return _now(
                bpy.data.objects[name],
                [bpy.data.objects[n] for n in col_names],
                [bpy.data.objects[n] for n in marker_names],
                n_sliders,
                read_colliders,
            )

        rows = bm.sample(scene, frames, read)
        frame0 = frames[0]
    return fi.face_track(
        frame0,
        rows,
        marker_vertices=[int(m[MARKER_VERTEX]) for m in markers],
        marker_weights=[float(m.get(MARKER_WEIGHT, 1.0)) for m in markers],
    )


def runtime_options(obj: bpy.types.Object) -> dict:
    """How the face of ``obj`` runs (:func:`..core.facejob.configure_face`): its solve
    ("reduced", "full") and whether the markers turn the jaw."""
    f = obj.neural_rom.face
    return {
        "solve": f.solve.lower(),
        "jaw": "markers" if f.drive == "MARKERS" and f.jaw_drive == "MARKERS" else "keyed",
        "head": "markers" if f.drive == "MARKERS" and f.head_from_markers else "fixed",
    }


# --------------------------------------------------------------------------------------
# The viewport


def _node_group() -> bpy.types.NodeTree:
    """Set Position from :data:`SIM_ATTRIBUTE` where it exists."""
    ng = bpy.data.node_groups.get(NODE_GROUP)
    if ng is not None:
        return ng
    ng = bpy.data.node_groups.new(NODE_GROUP, "GeometryNodeTree")
    ng.interface.new_socket("Geometry", in_out="INPUT", socket_type="NodeSocketGeometry")
    ng.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    gi, go = ng.nodes.new("NodeGroupInput"), ng.nodes.new("NodeGroupOutput")
    sp = ng.nodes.new("GeometryNodeSetPosition")
    na = ng.nodes.new("GeometryNodeInputNamedAttribute")
    na.data_type = "FLOAT_VECTOR"
    na.inputs["Name"].default_value = SIM_ATTRIBUTE
    ng.links.new(gi.outputs[0], sp.inputs["Geometry"])
    ng.links.new(na.outputs["Attribute"], sp.inputs["Position"])
    ng.links.new(na.outputs["Exists"], sp.inputs["Selection"])
    ng.links.new(sp.outputs["Geometry"], go.inputs[0])
    return ng


def show_simulation(obj: bpy.types.Object) -> None:
    """Add the modifier that shows the simulated skin (first in the stack)."""
    mod = obj.modifiers.get(MODIFIER)
    if mod is None or mod.type != "NODES":
        mod = obj.modifiers.new(MODIFIER, "NODES")
    mod.node_group = _node_group()
    idx = obj.modifiers.find(mod.name)
    if idx > 0:
        obj.modifiers.move(idx, 0)


def hide_simulation(obj: bpy.types.Object) -> None:
    """Remove the modifier and the simulated positions: the shape keys show again."""
    mod = obj.modifiers.get(MODIFIER)
    if mod is not None:
        obj.modifiers.remove(mod)
    attr = obj.data.attributes.get(SIM_ATTRIBUTE)
    if attr is not None:
        obj.data.attributes.remove(attr)


def shown_positions(obj: bpy.types.Object) -> np.ndarray:
    """(s, 3) local positions of the evaluated skin (what the viewport shows)."""
    dg = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(dg)
    me = ev.to_mesh()
    try:
        co = np.empty(3 * len(me.vertices), dtype=np.float32)
        me.vertices.foreach_get("co", co)
    finally:
        ev.to_mesh_clear()
    return co.reshape(-1, 3).astype(np.float64)


# --------------------------------------------------------------------------------------
# Bake Simulation


def make_face_simulation_job(
    obj, scene, path: Path, folder: Path, *, start: int, end: int, read_colliders
) -> dict:
    """The worker job that plays the face over frames ``start..end`` (checked by
    :func:`.export.make_simulation_job`) from the scene's start frame and writes the skin (local) as
    a PC2 at ``path``, its gathered inputs in ``folder``: the Bake Simulation job of
    :func:`.export.make_simulation_job` for a face (``read_colliders``: see
    :func:`gather_track`)."""

    s = obj.neural_rom
    model = check_face_model(obj)
    n_sliders = int(np.asarray(load_model(model).arrays["codes"]).shape[1])
    f0 = int(scene.frame_start)
    track = gather_track(
        obj,
        scene,
        range(f0, end + 1),
        n_sliders=n_sliders,
        read_colliders=read_colliders,
    )
    inputs = write_track(folder / TRACK_FILE, track)
    return {
        "kind": "face_simulate",
        "name": obj.name,
        **runtime_options(obj),
        "model": str(model),
        "expect_mesh_hash": s.face.mesh_hash,
        **registry.job_fields_of(s.model.method),
        "inputs": str(inputs),
        "out": str(path),
        "frame_start": start,
        "frame_end": end,
        "folder": str(folder),
        "log_dir": str(cache_dir(obj) / "logs"),
    }
