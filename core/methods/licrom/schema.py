"""The LiCROM model file: :func:`save`, and :func:`load` / :func:`load_on_mesh`, the runtime on
the mesh of the bake the model records or on any other (:mod:`core.methods.licrom`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ...data.modelfile import Model, load_model, save_model
from ...errors import CacheError
from ...physics import fem as _fem
from ...physics.colliders import Collider
from ...physics.sim import SimSettings
from .cubature import CUBATURE_POSES, CUBATURE_TARGET
from .field import FRAME_FLOATING, FRAME_WORLD, REFERENCE_OBJECT, Domain, Field, PinPoints
from .runtime import LicromSimulation

NAME = "licrom"


# ------------------------------------------------------------------------------------------
# Model files
# ------------------------------------------------------------------------------------------


def save(
    path: str | Path,
    *,
    mesh_hash: str,
    T: np.ndarray | None = None,
    field: Field,
    domain: Domain,
    pins: PinPoints,
    material: _fem.Material,
    settings: SimSettings,
    metadata: dict | None = None,
    codes: np.ndarray | None = None,
) -> Path:
    """Write a LiCROM model file: the field network and its normalization, the domain sample
    and the pinned points, the physics. ``T`` (the training mesh) is accepted for the common
    trainer interface and not stored: the model belongs to no mesh. ``mesh_hash`` names the
    mesh of the bake recorded as ``mesh_bake`` in ``metadata`` (the default mesh)."""
    arrays, net_meta = field.to_arrays()
    arrays["domain_samples"] = np.asarray(domain.samples, dtype=np.float64)
    arrays["pin_points"] = np.asarray(pins.points, dtype=np.float64).reshape(-1, 3)
    arrays["pin_member"] = np.asarray(pins.member, dtype=np.int64).reshape(-1)
    arrays["pin_faces"] = np.asarray(pins.faces, dtype=np.float64).reshape(-1, 3, 3)
    arrays["pin_face_member"] = np.asarray(pins.face_member, dtype=np.int64).reshape(-1)
    if codes is not None:
        codes = np.asarray(codes, dtype=np.float64)  # (c, r), or (c, r + 9): see train
        arrays["cubature_codes"] = codes.reshape(-1, codes.shape[1] if codes.ndim == 2 else field.r)
    meta = {
        "field": net_meta,
        "latent_dim": field.r,
        "domain_tolerance_m": float(domain.tolerance),
        "pin_tolerance_m": float(pins.tolerance),
        "pin_spacing_m": float(pins.spacing),
        "material": material.to_dict(),
        "settings": settings.to_dict(),
    }
    meta.update(metadata or {})
    return save_model(path, method=NAME, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def _parts(model: Model):
    a, meta = model.arrays, model.metadata
    field = Field.from_arrays(a, meta["field"])
    domain = Domain(np.asarray(a["domain_samples"]), float(meta["domain_tolerance_m"]))
    if "pin_points" not in a:
        if np.asarray(a.get("pin_boxes", np.zeros(0))).size:
            raise CacheError(
                f"{Path(model.path).name} is a LiCROM model from before pins were the pin "
                "group's points (it pins every node in a box around them); retrain it."
            )
        pins = PinPoints.none()
    else:
        pins = PinPoints(
            np.asarray(a["pin_points"], dtype=np.float64).reshape(-1, 3),
            np.asarray(a["pin_member"], dtype=np.int64).reshape(-1),
            float(meta["pin_tolerance_m"]),
            float(meta.get("pin_spacing_m", 0.0)),
            np.asarray(a["pin_faces"], dtype=np.float64).reshape(-1, 3, 3),
            np.asarray(a["pin_face_member"], dtype=np.int64).reshape(-1),
        )
    codes = np.asarray(a["cubature_codes"]) if "cubature_codes" in a else None
    return field, domain, pins, codes


def load_on_mesh(
    model: Model | str | Path,
    X: np.ndarray,
    T: np.ndarray,
    *,
    settings: SimSettings | None = None,
    colliders: list[Collider] | None = None,
    pins: PinPoints | None = None,
    pinned: np.ndarray | None = None,
    material: _fem.Material | None = None,
    cubature_vertices: int | None = None,
    solver: str | None = None,
    seed: int | None = None,
    origin: np.ndarray | None = None,
    cubature: str | None = None,
    cubature_target: float | None = None,
    cubature_poses: int | None = None,
    invariant_rotation: bool | None = None,
    static: bool | None = None,
    static_derivatives: bool | None = None,
) -> LicromSimulation:
    """A LiCROM model (a file or an opened :class:`Model`) on the mesh ``(X, T)``, which need
    not be one it was trained on. Keywords left None take the model's values (its training
    settings, its pins, its material). ``pinned`` (p,): the mesh's pinned nodes (its pin
    group; None: the nodes at the model's pinned points), checked against the model's pins
    (:class:`LicromSimulation`). ``origin`` (3,): the origin of the object ``X``
    belongs to, in ``X``'s space; used by a model trained relative to its objects' origins
    (``reference`` :data:`REFERENCE_OBJECT`) and ignored by one trained in world space.
    ``cubature``: "fitted" (fitted on this mesh to the model's training codes) or "random"
    (``cubature_vertices`` random vertices); ``cubature_vertices=0`` gives the exact energy.
    ``invariant_rotation``, ``static``, ``static_derivatives``: see :class:`LicromSimulation` (None: the model's
    setting; a model trained before Static Modes has none)."""
    if not isinstance(model, Model):
        model = load_model(model)
    if model.method != NAME:
        raise CacheError(f"{Path(model.path).name} holds a {model.method!r} model, not LiCROM.")
    field, domain, stored_pins, codes = _parts(model)
    meta = model.metadata
    train = meta.get("training", {})
    stored = SimSettings(**meta["settings"])
    if settings is not None and settings.contact_stiffness is None:
        settings = dataclasses.replace(settings, contact_stiffness=stored.contact_stiffness)
    return LicromSimulation(
        field,
        X,
        T,
        material or _fem.Material.from_dict(meta["material"]),
        settings or stored,
        pins=stored_pins if pins is None else pins,
        pinned=pinned,
        domain=domain,
        cubature_vertices=train.get("cubature_vertices", 200)
        if cubature_vertices is None
        else cubature_vertices,
        seed=train.get("seed", 0) if seed is None else seed,
        solver=solver or train.get("solver", "newton"),
        gradient_iterations=train.get("gradient_iterations", 10),
        colliders=colliders,
        origin=origin if meta.get("reference") == REFERENCE_OBJECT else None,
        cubature=cubature or train.get("cubature", "fitted"),
        codes=codes,
        cubature_target=train.get("cubature_target", CUBATURE_TARGET)
        if cubature_target is None
        else cubature_target,
        max_cubature=train.get("max_cubature", 500),
        cubature_poses=train.get("cubature_poses", CUBATURE_POSES)
        if cubature_poses is None
        else cubature_poses,
        floating=meta.get("frame", FRAME_WORLD) == FRAME_FLOATING,
        invariant_rotation=bool(train.get("invariant_rotation", False))
        if invariant_rotation is None
        else invariant_rotation,
        static=bool(train.get("static_modes", False)) if static is None else static,
        static_derivatives=_derivatives_of(meta)
        if static_derivatives is None
        else static_derivatives,
    )


def _derivatives_of(meta: dict) -> bool:
    """Whether a model's runtime adds the static modes' derivatives: the trainer's choice
    (``static_derivatives`` in its metadata, Auto resolved), else (a model trained before
    Auto) its training setting, a bool or "on" / "off"."""
    if "static_derivatives" in meta:
        return bool(meta["static_derivatives"])
    return meta.get("training", {}).get("static_derivatives", False) in (True, "on")


def load(
    model: Model,
    *,
    settings: SimSettings | None = None,
    colliders=None,
    mesh: tuple | None = None,
) -> LicromSimulation:
    """The runtime of an opened LiCROM model on ``mesh``, ``(X, T)``, ``(X, T, origin)`` or
    ``(X, T, origin, pinned)`` (``origin``: the mesh's object origin; ``pinned``: its pinned
    nodes, None: those at the model's pinned points; see :func:`load_on_mesh`); without one,
    on the mesh of the bake the model records (``mesh_bake``: the bake its training
    replayed), pinned as that bake was."""
    origin = pinned = None
    if mesh is not None and len(mesh) >= 3:
        origin = mesh[2]
        pinned = mesh[3] if len(mesh) > 3 else None
        mesh = mesh[:2]
    if mesh is None:
        from ...data.cache import BakeCache

        bake = model.metadata.get("mesh_bake")
        if not bake or not Path(bake).exists():
            raise CacheError(
                f"{Path(model.path).name} is a LiCROM model: it runs on any mesh of its object, "
                "but needs one. The bake it was trained on is gone; put the model on a mesh with "
                "core.methods.licrom.load_on_mesh (in Blender: simulate the target object)."
            )
        cache = BakeCache.open(bake)
        mesh = (np.asarray(cache.X, float), np.asarray(cache.T, np.int64))
        origin = model.metadata.get("mesh_bake_origin")
        if "pinned" in cache.extra_names:
            pinned = np.asarray(cache.extra("pinned"), dtype=np.int64)
    return load_on_mesh(
        model,
        mesh[0],
        mesh[1],
        settings=settings,
        colliders=colliders,
        origin=origin,
        pinned=pinned,
    )
