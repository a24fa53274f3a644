"""Models that run on other meshes of an object family (a method whose record takes
``"other_mesh"``, :attr:`..core.registry.Method.other_mesh`: LiCROM): training on several
objects' bakes at once, putting a trained model on another object, and carrying a running
simulation across an edit of its mesh.

All of them see the meshes in the model's reference space, each object's relative to its
own origin (:mod:`.reference`).

Where the model is recorded. Training with other objects records the model on the active
object only (its cache directory holds the file; the others are listed in
``model.family``): one file, one owner that retrains or clears it. The other objects use it
through :func:`apply_model` (the panel's Use Model, the CLI's ``simulate --model``), which
records the same file on them with ``model.applied_from`` set: clearing it there forgets
it without deleting the owner's file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import bpy
import numpy as np

from ....core import registry
from ....core.errors import CacheError, NeuralRomError
from ....core.geometry.embedding import pull_back
from ... import jobs, simulate, training
from ...io import mesh as bm
from ...io.paths import load_path, scene_of, store_path
from ...simulate import stop_simulation
from ...training import clear_model_record
from ..fem.tets import (
    discard_tet_job,
    load_tets,
    make_tet_job,
    on_tet_done,
    pins_name,
    world_mesh_hash,
)
from .reference import (
    bake_entries,
    mesh_edit_pending,
    model_record,
    world_mesh,
)

# ------------------------------------------------------------------------------------------
# Training on several objects


def _other_mesh_method(method, what: str):
    if not method.other_mesh:
        takers = [m.label for m in registry.methods() if m.other_mesh]
        raise NeuralRomError(
            f"Cannot {what}: the {method.label} method runs only on the mesh it was trained "
            "on, so it trains on one object's bakes; methods that learn one model for "
            f"several objects: {', '.join(takers) or 'none'}."
        )


def make_family_train_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    others: list,
    *,
    method: str | None = None,
    settings: dict | None = None,
    device: str | None = None,
) -> dict:
    """The train job of ``obj``'s model on its bakes and the bakes of ``others`` (objects of
    the same family), for a method that runs on other meshes.

    Everything is checked first (the method, each object's role, tets and bakes: fresh, one
    placement per object); the model goes to ``obj``'s cache directory and is recorded on
    ``obj`` (:func:`.training.on_train_done`), its family listed. Returns the job spec of
    :func:`.training.make_train_job` with the others' bakes added.
    """
    record = registry.get(method) if method else obj.neural_rom.method()
    others = [o for o in others if o is not obj]
    if not others:
        raise NeuralRomError(
            f"Training '{obj.name}' with other objects needs at least one other object with "
            "bakes (select them, the one to own the model active)."
        )
    _other_mesh_method(record, f"train '{obj.name}' with {', '.join(o.name for o in others)}")
    entries = []
    for other in others:
        if other.type != "MESH" or other.neural_rom.role != "DEFORMABLE":
            raise NeuralRomError(
                f"'{other.name}' is not a Deformable mesh; set its Neural ROM role to "
                "Deformable, tetrahedralize and bake it, or leave it out."
            )
        paths, _ = training.object_bakes(other, scene)
        entries += bake_entries(other, scene, paths)
    spec = training.make_train_job(obj, scene, method=method, settings=settings, device=device)
    spec["bakes"] = list(spec["bakes"]) + entries
    s = obj.neural_rom
    pending = json.loads(s.pending_train)
    pending["family"] = [o.name for o in others]
    pending["bakes"] = len(spec["bakes"])
    s.pending_train = json.dumps(pending)
    return spec


# ------------------------------------------------------------------------------------------
# A model on another object


def model_of(source: bpy.types.Object) -> Path:
    """The model file of ``source`` (refused with what to do when it has none)."""
    if not source.neural_rom.model.path:
        raise NeuralRomError(f"'{source.name}' has no trained model; train it first.")
    return load_path(source.neural_rom.model.path)


def apply_model(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    path: str | Path | None = None,
    *,
    source: bpy.types.Object | None = None,
) -> dict:
    """Put the model file ``path`` (or ``source``'s model) on ``obj`` without retraining:
    the model runs on ``obj``'s own tets.

    Checks first (``obj`` a Deformable mesh with fresh tets, the file there, its method one
    that runs on other meshes) and loads the model on the tets once, as Simulate will (the
    field evaluated at the nodes, no step), to report where the mesh lies against the
    training domain; then records it on ``obj`` (a running simulation is stopped first).

    Returns
    -------
    dict: ``path``, ``method``, ``share_outside`` and ``max_distance_m`` (None for a method
    that reports no domain), ``warning`` (the message past the threshold, else "").
    """

    if source is not None:
        path = model_of(source)
    if path is None:
        raise NeuralRomError("Pick a model file or an object whose model to use.")
    path = Path(bpy.path.abspath(str(path)))
    if obj.type != "MESH" or obj.neural_rom.role != "DEFORMABLE":
        raise NeuralRomError(
            f"'{obj.name}' is not a Deformable mesh; set its Neural ROM role to Deformable and "
            "tetrahedralize it."
        )
    if not path.is_file():
        raise NeuralRomError(f"The model file {path} does not exist; train it first.")
    tets = load_tets(obj)  # none or stale: "tetrahedralize"
    try:
        with warnings.catch_warnings():  # the domain report is shown below, not printed
            warnings.simplefilter("ignore")
            sim, model = registry.load_simulator(path, mesh=world_mesh(obj, scene, tets))
    except CacheError as e:  # a method that runs only on its own mesh, or a bad file
        raise NeuralRomError(f"Cannot use it on '{obj.name}': {e}") from None
    record = registry.get(model.method)
    report = getattr(sim, "domain_report", None)
    warning = report.message() if report is not None and report.warn else ""
    pins = pin_warning(obj, sim)
    warning = " ".join(w for w in (pins, warning) if w)
    s = obj.neural_rom
    if s.simulate:
        stop_simulation(obj)
    clear_model_record(obj)
    m = s.model
    m.path = store_path(obj, path)
    m.method = record.name
    m.k = int(getattr(sim, "k", 0) or model.metadata.get("latent_dim", 0) or 0)
    m.cubature = len(getattr(sim, "elements", ()))
    m.val_error = float(model.metadata.get("max_error_val_m") or 0.0)
    m.mesh_hash = world_mesh_hash(obj, scene)
    m.tets_hash = s.tets_hash
    m.source_hash = s.source_hash
    m.applied_from = source.name if source is not None else str(path)
    if report is not None:
        m.domain_outside = float(report.share_outside)
        m.domain_distance = float(report.max_distance_m)
    m.domain_warning = warning
    return {
        "path": str(path),
        "method": record.name,
        "share_outside": None if report is None else float(report.share_outside),
        "max_distance_m": None if report is None else float(report.max_distance_m),
        "warning": warning,
    }


def pin_warning(obj: bpy.types.Object, sim) -> str:
    """What ``sim`` (a model put on ``obj``'s mesh) says of ``obj``'s pins against those of
    the model's family, naming its pin group; "" when they match (or the method has no such
    report)."""
    report = getattr(sim, "pin_report", None)
    return report.message(pins_name(obj)) if report is not None and report.warn else ""


def domain_text(m) -> str | None:
    """``"0.0% outside the training domain (up to 12 mm)"`` of a model's properties, or None
    when unknown."""
    if m.domain_outside < 0:
        return None
    return (
        f"{m.domain_outside:.1%} outside the training domain "
        f"(up to {m.domain_distance * 1000:.3g} mm)"
    )


# ------------------------------------------------------------------------------------------
# Mesh edits during Simulate


def apply_mesh_edit(obj: bpy.types.Object, scene: bpy.types.Scene, *, context=None) -> dict | None:
    """Continue ``obj``'s running simulation on its edited mesh (a cut, a hole, deleted
    faces, a remesh: the rest surface changed since it was tetrahedralized).

    The edit was made on the mesh as shown (deformed): its rest shape is the edit's own,
    each vertex pulled back through the deformation of the frame shown
    (:func:`edited_rest`), so a Boolean's, a Bisect's or a knife's new vertices rest where
    the edit put them on the body. It is tetrahedralized by the worker's tetrahedralize
    job with the object's Tet Size, into new files beside the tets the saved .blend
    records (:func:`.tets.store_tets`' ``keep_files``); a Mesh Cache modifier playing a
    cache of the old vertex count is turned off (:func:`mute_stale_caches`). When the job
    ends the tets are stored on the object and the simulation swaps to them at the frame
    the edit was made on (:func:`swap_to_tets`): ``q`` and its velocity are kept, the
    motion goes on. Checked first: Simulate on, a
    model that runs on other meshes, a running driver, an edit to apply.

    Returns
    -------
    In ``--background`` the job runs to its end first: :func:`swap_to_tets`' dict.
    Interactively the job runs in the background and None is returned.
    """

    s = obj.neural_rom
    if not s.simulate:
        raise NeuralRomError(
            f"Simulate is off for '{obj.name}': an edit made before simulating needs only "
            "Tetrahedralize (a model that runs on other meshes runs on the new tets)."
        )
    rec = model_record(obj)
    if rec is None or not rec.other_mesh:
        label = rec.label if rec is not None else f"'{s.model.method}'"
        takers = ", ".join(m.label for m in registry.methods() if m.other_mesh)
        raise NeuralRomError(
            f"The {label} model of '{obj.name}' runs only on the mesh it was trained on, so "
            "its simulation cannot continue on an edited mesh: stop Simulate, re-tetrahedralize, "
            f"re-bake and re-train, or use a method that runs on other meshes ({takers})."
        )
    if simulate._drivers.get(obj.name) is None:
        raise NeuralRomError(
            f"'{obj.name}' has no running simulation to continue; stop and start Simulate "
            "after tetrahedralizing the edited mesh."
        )
    if obj.mode == "EDIT":
        raise NeuralRomError(f"Leave Edit Mode on '{obj.name}' first (Tab), then apply.")
    if bm.surface_hash(obj) == s.source_hash:
        raise NeuralRomError(
            f"'{obj.name}' has not been edited since it was tetrahedralized: nothing to apply."
        )
    d = simulate._drivers[obj.name]
    rest = edited_rest(obj, scene, d)
    # the rest shape shown while the worker meshes it: Blender splits quads and n-gons by the
    # current positions, so the surface (and its hash) is the rest one only at rest
    bm.replace_rest(obj.data, rest)
    muted = mute_stale_caches(obj)
    frame = int(getattr(d, "shown", scene.frame_current))  # the frame the edit was made on
    job = make_tet_job(obj)
    name, info = obj.name, {}

    def done(result: dict) -> None:
        target = bpy.data.objects.get(name)  # by name: an undo invalidates the old object
        if target is None:
            discard_tet_job(job)
            return
        # beside the tets the saved .blend records, which it needs until the user saves
        if on_tet_done(target, job, result, keep_files=True) is None:
            return  # cancelled: the old tets and the simulation stay
        info.update(swap_to_tets(target, scene_of(target), frame), muted=muted)

    try:
        jobs.start_job(context or bpy.context, job, owner=name, on_done=done)
    except BaseException:
        discard_tet_job(job)
        raise
    return info or None


def edited_rest(obj: bpy.types.Object, scene: bpy.types.Scene, driver) -> np.ndarray:
    """The rest shape (n, 3), local metres, of ``obj``'s mesh edited during Simulate
    (``driver``: its :class:`.simulate.Driver`).

    The edit was made on the mesh as shown, deformed at the frame the driver last showed:
    each vertex is pulled back through that frame's deformation of the tets
    (:func:`..core.embedding.pull_back`, the inverse of the piecewise-linear map). A vertex
    whose carried rest position (the saved rest attribute, which Blender keeps on the
    vertices an edit keeps and interpolates on those it splits) agrees with that to 0.1% of
    the mesh's size keeps it exactly; the others (a Boolean's vertices from its cutter,
    which come with none: the origin) take the pulled-back one.
    """
    frame = int(getattr(driver, "shown", scene.frame_current))
    P = driver.positions_at(frame, obj, scene)
    t = driver.tets
    x = bm.to_local(P, bm.matrix(obj))
    X = np.asarray(t.mesh.X, dtype=np.float64)
    rest, _ = pull_back(bm.get_positions(obj.data), x, X, t.mesh.T)
    if bm.has_rest(obj.data):
        carried = bm.rest_positions(obj.data)
        size = float(np.linalg.norm(X.max(0) - X.min(0)))
        keep = np.linalg.norm(carried - rest, axis=1) <= 1e-3 * size
        rest[keep] = carried[keep]
    return rest


def mute_stale_caches(obj: bpy.types.Object) -> list[str]:
    """Turn off ``obj``'s Mesh Cache modifiers that play a PC2 of another vertex count than
    its (edited) mesh (Bake Simulation's, left from before the edit: Blender would print
    "Vertex count mismatch" every frame). Returns their names."""
    from ....core.data.pc2 import read_pc2

    n, muted = len(obj.data.vertices), []
    for mod in obj.modifiers:
        if mod.type != "MESH_CACHE" or mod.cache_format != "PC2" or not mod.show_viewport:
            continue
        try:
            r = read_pc2(bpy.path.abspath(mod.filepath), mmap=True)[0].shape[1]
        except (OSError, CacheError):
            continue  # Blender says what is wrong with a cache that cannot be read
        if r != n:
            mod.show_viewport = mod.show_render = False
            muted.append(mod.name)
    return muted


def swap_to_tets(obj: bpy.types.Object, scene: bpy.types.Scene, frame: int) -> dict:
    """Swap ``obj``'s running simulation to its (new) stored tets at ``frame``
    (:meth:`..core.framecache.Timeline.swap_mesh`), rebuild the render mapping and record
    the tets on the model; then show the frame. A failure stops the simulation and says why.

    Returns a dict: ``frame``, ``seconds`` (the swap), ``vertices``, ``elements``,
    ``kinetic_before`` and ``kinetic_after`` (J), ``share_outside``, ``max_distance_m``,
    ``pin_warning`` ("" when the edited mesh's pin group matches the model's family).
    """
    d = simulate._drivers.get(obj.name)
    if d is None or not obj.neural_rom.simulate:
        raise NeuralRomError(f"The simulation of '{obj.name}' stopped before the swap.")
    t = load_tets(obj)
    X, T, _, pinned = world_mesh(obj, scene, t)
    rep = d.timeline.swap_mesh(frame, X, T, pinned)
    d.use_tets(t)
    d.n_nodes = len(X)
    held = np.asarray(d.sim.pinned, dtype=np.int64)
    d.pins_local = np.asarray(t.mesh.X, dtype=np.float64)[held] if held.size else None
    s = obj.neural_rom
    m = s.model
    m.tets_hash = s.tets_hash
    m.source_hash = s.source_hash
    m.mesh_hash = world_mesh_hash(obj, scene)
    dom = rep.domain
    pins = pin_warning(obj, d.sim)
    if dom is not None:
        m.domain_outside = float(dom.share_outside)
        m.domain_distance = float(dom.max_distance_m)
        m.domain_warning = " ".join(w for w in (pins, dom.message() if dom.warn else "") if w)
    d.key = simulate.driver_key(obj, scene)
    simulate.apply_frame(obj, scene, frame)
    return {
        "frame": int(frame),
        "seconds": float(rep.seconds),
        "vertices": int(rep.vertices),
        "elements": int(rep.elements),
        "kinetic_before": float(rep.kinetic_before),
        "kinetic_after": float(rep.kinetic_after),
        "share_outside": None if dom is None else float(dom.share_outside),
        "max_distance_m": None if dom is None else float(dom.max_distance_m),
        "pin_warning": pins,
    }


def swap_text(name: str, info: dict) -> str:
    """One line a user reads about a swap (:func:`swap_to_tets`' dict)."""
    text = (
        f"'{name}' continues on its edited mesh from frame {info['frame']}: "
        f"{info['vertices']} nodes, {info['elements']} tets, swapped in "
        f"{info['seconds'] * 1000:.0f} ms"
    )
    if info.get("share_outside"):
        text += f"; {info['share_outside']:.1%} of it outside the training domain"
    if info.get("pin_warning"):
        text += f". {info['pin_warning']}"
    for name in info.get("muted", ()):
        text += (
            f". Its '{name}' modifier played a cache of the mesh before the edit and is "
            "turned off: Bake Simulation again for the edited mesh"
        )
    return text


def edit_pending(obj: bpy.types.Object) -> bool:
    """Whether ``obj``'s running simulation waits for :func:`apply_mesh_edit`
    (:func:`.reference.mesh_edit_pending`)."""
    return mesh_edit_pending(obj, simulate._drivers.get(obj.name))
