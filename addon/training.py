"""Training stages of an object: the train job, recording its result, clearing the model.

Shared by the Train operator and the command line. Like :mod:`.stages`, everything is
validated first and the scene changed last.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import bpy

from ..core.errors import NeuralRomError
from .prefs import get_preferences
from .stages import cache_dir, load_path, load_tets, open_bake, store_path

MODELS_DIR = "models"


def make_train_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    method: str | None = None,
    settings: dict | None = None,
    device: str | None = None,
) -> dict:
    """The worker job that trains a reduced model of ``obj`` on all its bakes (JSON-able).

    ``settings`` overrides fields of :meth:`props.NEURAL_ROM_PG_object.model_settings`;
    ``device`` (auto, cpu, cuda) overrides the add-on preference. Every bake is checked
    (fresh, same world mesh) before anything is written; what is being trained is recorded
    on the object (``pending_train``) for :func:`on_train_done`.

    Returns
    -------
    dict: ``kind`` "train", ``method``, ``bakes`` (abs paths), ``out`` (abs .nrmodel),
    ``settings``, ``device``, ``mesh_hash``, ``log_dir``.
    """
    from ..core.registry import names

    METHODS = names()

    s = obj.neural_rom
    if s.role != "DEFORMABLE":
        raise NeuralRomError(
            f"'{obj.name}' is not deformable; set its Neural ROM role to Deformable."
        )
    method = method or s.model_method
    if method not in METHODS:
        raise NeuralRomError(
            f"Unknown training method {method!r}; this version trains {', '.join(METHODS)}."
        )
    if device is None:
        device = str(get_preferences().device).lower()
    if device not in ("auto", "cpu", "cuda"):
        raise NeuralRomError(f"Unknown training device {device!r}: use auto, cpu or cuda.")
    if not len(s.bakes):
        raise NeuralRomError(f"'{obj.name}' has no bakes to train on; run Bake first.")
    load_tets(obj)  # edited mesh or missing tets: refuse before opening bakes
    paths, hashes = [], set()
    for rec in s.bakes:
        cache = open_bake(obj, rec)  # stale, missing or empty: "re-bake"
        paths.append(str(load_path(rec.path).resolve()))
        hashes.add(cache.mesh_hash)
    if len(hashes) > 1:
        raise NeuralRomError(
            f"The bakes of '{obj.name}' simulate the mesh at different placements (it was moved "
            "between bakes); clear the old bakes or re-bake them all, then train."
        )
    values = s.model_settings()
    unknown = set(settings or {}) - set(values)
    if unknown:
        raise NeuralRomError(f"Unknown training setting(s): {', '.join(sorted(unknown))}.")
    values.update(settings or {})
    folder = cache_dir(obj) / MODELS_DIR
    folder.mkdir(exist_ok=True)
    out = folder / f"{method}.nrmodel"
    mesh_hash = hashes.pop()
    s.pending_train = json.dumps(
        {
            "out": str(out),
            "method": method,
            "mesh_hash": mesh_hash,
            "tets_hash": s.tets_hash,
            "source_hash": s.source_hash,
            "bakes": len(paths),
        }
    )
    return {
        "kind": "train",
        "method": method,
        "bakes": paths,
        "out": str(out),
        "settings": values,
        "device": device,
        "mesh_hash": mesh_hash,
        "log_dir": str(folder / "logs"),
    }


def on_train_done(obj: bpy.types.Object, result: dict) -> bool:
    """Record the model a finished training job wrote on ``obj``; a cancelled job (no
    model written) records nothing. Returns whether a model was recorded."""
    s = obj.neural_rom
    pending = json.loads(s.pending_train) if s.pending_train else {}
    s.pending_train = ""
    result = result or {}
    path = result.get("model")
    if not path or result.get("cancelled") or not Path(path).is_file():
        return False
    rollout = result.get("rollout") or {}
    m = s.model
    m.path = store_path(obj, path)
    m.method = str(result.get("method", pending.get("method", "")))
    # reduced DOFs: the latent size of a learned model, the basis size of a linear one
    m.k = int(result.get("latent_dim") or result.get("k") or 0)
    m.cubature = int(result.get("cubature_elements", 0))
    m.val_error = float(
        result.get("ae_max_error_val_m") or result.get("pod_max_error_val_m") or 0.0
    )
    m.rollout_error = float(rollout.get("max_error_m", -1.0))
    m.projection_error = float(rollout.get("projection_max_error_m", -1.0))
    m.step_ms = float(rollout.get("step_ms", 0.0))
    m.train_seconds = float(result.get("train_seconds", 0.0))
    m.device = str(result.get("device", ""))
    m.mesh_hash = str(pending.get("mesh_hash", ""))
    m.tets_hash = str(pending.get("tets_hash", s.tets_hash))
    m.source_hash = str(pending.get("source_hash", s.source_hash))
    m.bakes = int(pending.get("bakes", 0))
    _forget_drivers(obj.name)
    return True


def _forget_drivers(name: str | None = None) -> None:
    from . import simulate

    simulate.forget(name)


def clear_model(obj: bpy.types.Object, *, delete_file: bool = True) -> None:
    """Forget the object's model (stopping its simulation) and delete the model file."""
    s = obj.neural_rom
    if not s.model.path:
        raise NeuralRomError(f"'{obj.name}' has no model to clear.")
    if s.simulate:
        from . import simulate

        simulate.stop_simulation(obj)
    path = load_path(s.model.path)
    for prop in s.model.bl_rna.properties:
        if prop.identifier not in ("rna_type", "name"):
            s.model.property_unset(prop.identifier)
    _forget_drivers(obj.name)
    if delete_file and path.suffix == ".nrmodel" and path.is_file():
        path.unlink()
        ckpt = path.parent / (path.stem + ".checkpoints")
        if ckpt.is_dir():
            shutil.rmtree(ckpt, ignore_errors=True)
