"""Training stages of an object: the train job, recording its result, clearing the model.

Shared by the Train operator and the command line. Like the other stages (:mod:`.tets`,
:mod:`.bakes`), everything is validated first and the scene changed last.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import bpy

from ..core import registry
from ..core.errors import NeuralRomError
from . import kinds, simulate
from .io.paths import cache_dir, load_path, store_path
from .kinds.face.face import make_sliders
from .kinds.fem.bake import object_bakes as object_bakes
from .prefs import get_preferences

MODELS_DIR = "models"


def training_settings(obj: bpy.types.Object, method, overrides: dict | None = None) -> dict:
    """The settings ``obj`` trains ``method`` (a registry record) with: its property group on
    the object, ``overrides`` on top, validated by the method.

    Raises NeuralRomError naming the object, the method, and the field that is unknown or out
    of range (with its range).
    """
    values = {**obj.neural_rom.method_values(method), **(overrides or {})}
    try:
        return method.validate(values)
    except NeuralRomError as e:
        raise NeuralRomError(f"Cannot train '{obj.name}' with {method.label}: {e}") from None


def job_needs(method) -> list[str]:
    """What the job interpreter must import to train ``method``: numpy and scipy, and torch
    only for a method whose training needs it."""
    return ["numpy", "scipy", *(["torch"] if method.needs_torch else [])]


def make_train_job(
    obj: bpy.types.Object,
    scene: bpy.types.Scene,
    *,
    method: str | None = None,
    settings: dict | None = None,
    device: str | None = None,
) -> dict:
    """The worker job that trains a reduced model of ``obj`` on all its bakes, or on its face
    file once Set Up Face recorded one (:meth:`..addon.props.NEURAL_ROM_PG_object.training_data_kind`;
    the method must train on that kind of data), JSON-able.

        ``method`` (a registered method's name) overrides the panel's choice; the settings are
        that method's property group on the object, overridden by ``settings`` and validated by
        the method (a bad or unknown field is refused with its name and range).
        ``device`` (auto, cpu, cuda) overrides the add-on preference. Every setting and bake is
        checked (fresh, same world mesh) before anything is written; what is being trained is
        recorded on the object (``pending_train``) for :func:`on_train_done`.

        Returns
        -------
        dict: ``kind`` "train", :func:`core.registry.job_fields` (``method``, and
        ``method_origin`` for a method registered outside the package), ``needs`` (what the job
        interpreter must import), ``bakes`` (abs paths), ``out`` (abs .nrmodel), ``settings``,
        ``device``, ``mesh_hash``, ``log_dir``.
    """
    s = obj.neural_rom
    if s.role != "DEFORMABLE":
        raise NeuralRomError(
            f"'{obj.name}' is not deformable; set its Neural ROM role to Deformable."
        )
    record = registry.get(method) if method else s.method()  # unknown: names the known ones
    kind = s.training_data_kind()  # "fem", "cloth": its bakes; "face": its face file
    try:
        record.check_trains_on(kind)
    except NeuralRomError as e:
        raise NeuralRomError(f"Cannot train '{obj.name}': {e}") from None
    values = training_settings(obj, record, settings)
    if device is None:
        device = str(get_preferences().device).lower()
    if device not in ("auto", "cpu", "cuda"):
        raise NeuralRomError(f"Unknown training device {device!r}: use auto, cpu or cuda.")
    bakes, n_bakes, mesh_hash = kinds.get(kind).train_data(obj, scene, record)
    folder = cache_dir(obj) / MODELS_DIR
    folder.mkdir(exist_ok=True)
    out = folder / f"{record.name}.nrmodel"
    s.pending_train = json.dumps(
        {
            "out": str(out),
            "method": record.name,
            "mesh_hash": mesh_hash,
            "tets_hash": s.tets_hash,
            "source_hash": s.source_hash,
            "bakes": n_bakes,
            "kind": kind,
        }
    )
    return {
        "kind": "train",
        **registry.job_fields(record),
        "needs": job_needs(record),
        "bakes": bakes,
        "out": str(out),
        "settings": values,
        "device": device,
        "mesh_hash": mesh_hash,
        "log_dir": str(folder / "logs"),
    }


def on_train_done(obj: bpy.types.Object, result: dict) -> bool:
    """Record the model a finished training job wrote on ``obj``, and make its method the
    panel's Train menu choice (a headless ``train --method`` or a family training chose it);
    a model of another method than the one trained is renamed after it
    (:func:`named_for_its_method`); a cancelled job (no model written) records nothing.
    Returns whether a model was recorded."""
    s = obj.neural_rom
    pending = json.loads(s.pending_train) if s.pending_train else {}
    s.pending_train = ""
    result = result or {}
    path = result.get("model")
    if not path or result.get("cancelled") or not Path(path).is_file():
        return False
    rollout = result.get("rollout") or {}
    path = named_for_its_method(Path(path), pending.get("method"), result.get("method"))
    clear_model_record(obj)
    m = s.model
    m.path = store_path(obj, path)
    m.family = ", ".join(pending.get("family", []))
    m.method = str(result.get("method", pending.get("method", "")))
    m.k = result_dofs(result)
    # a value a method does not have (no cubature, no rollout) may be missing or None
    m.cubature = int(_number(result.get("cubature_elements"), 0))
    m.val_error = result_validation_error(result)
    m.rollout_error = _number(rollout.get("max_error_m"), -1.0)
    m.projection_error = _number(rollout.get("projection_max_error_m"), -1.0)
    m.rollout_mean_error = _number(rollout.get("vertex_mean_error_m"), -1.0)
    m.projection_mean_error = _number(rollout.get("projection_mean_error_m"), -1.0)
    m.step_ms = _number(rollout.get("step_ms"), 0.0)
    m.choice = str(result.get("choice") or "")
    m.train_seconds = _number(result.get("train_seconds"), 0.0)
    m.device = str(result.get("device", ""))
    m.mesh_hash = str(pending.get("mesh_hash", ""))
    m.tets_hash = str(pending.get("tets_hash", s.tets_hash))
    m.source_hash = str(pending.get("source_hash", s.source_hash))
    m.bakes = int(pending.get("bakes", 0))
    m.kind = str(pending.get("kind", "fem"))
    if m.method:
        s.model_method_name = m.method
    _forget_drivers(obj.name)
    record = next((r for r in registry.methods() if r.name == m.method), None)
    if record is not None and "sliders" in record.inputs:  # one keyable slider per latent
        make_sliders(obj, path, result)
    return True


def named_for_its_method(path: Path, trained: str | None, kept: str | None) -> Path:
    """The model file ``path`` of a training of method ``trained``, renamed after the method
    of the model it holds when that is another (``kept``): the autoencoder's training keeps
    the default linear model when it replays better (``keep_linear``) and writes it where the
    job put the autoencoder, ``models/autoencoder.nrmodel``, which becomes
    ``models/linear_kept.nrmodel``. Any other path (one the job did not name after the
    method) is left as it is."""
    if not trained or not kept or kept == trained or path.stem != trained:
        return path
    honest = path.with_name(f"{kept}_kept{path.suffix}")
    path.replace(honest)  # one folder: an atomic rename
    return honest


def model_size(m) -> str:
    """``"8 DOFs, 18 cubature elements"`` of a trained model's properties (the cubature only
    for a method that solves with one)."""
    text = f"{m.k} DOFs"
    return text + (f", {m.cubature} cubature elements" if m.cubature > 0 else "")


def error_summary(m) -> str:
    """The model's error as ``train`` prints it and the Train button reports it: its replay
    of a held-out bake (max and mean vertex error) with the closest shapes' error on the
    same frames beside it, as the floor; a model without a replay (a face's fit) its
    held-out shape error."""
    if m.rollout_error >= 0:
        text = f"held-out replay error {1000 * m.rollout_error:.3g} mm max"
        if m.rollout_mean_error >= 0:
            text += f", {1000 * m.rollout_mean_error:.3g} mm mean"
        if m.projection_error >= 0:
            text += f" (closest shapes, the floor: {1000 * m.projection_error:.3g} mm max"
            if m.projection_mean_error >= 0:
                text += f", {1000 * m.projection_mean_error:.3g} mm mean"
            text += ")"
        return text
    kind = kinds.get(m.kind) or kinds.get("fem")  # a model of before kinds: fem's
    return f"{kind.error_label} {1000 * m.val_error:.3g} mm"


def report_line(m) -> str:
    """What the Train button reports: the model's size and :func:`error_summary`, then the
    training's choice of model when it made one (``choice``: which model it kept over
    another, with both replay errors)."""
    text = f"{model_size(m)}, {error_summary(m)}"
    return f"{text}. {m.choice}" if m.choice else text


def _number(value, default: float) -> float:
    return default if value is None else float(value)


def result_dofs(result: dict) -> int:
    """Reduced degrees of freedom a trainer reports: ``dofs``; from a trainer that does not
    report it yet, its latent size, else its basis size."""
    return int(result.get("dofs") or result.get("latent_dim") or result.get("k") or 0)


def result_validation_error(result: dict) -> float:
    """Largest vertex error of the model's shapes on held-out bakes, metres:
    ``max_error_val_m``; from a trainer that does not report it yet, its final stage's
    (the last ``*_max_error_val_m`` it reports)."""
    if result.get("max_error_val_m") is not None:
        return float(result["max_error_val_m"])
    staged = [v for k, v in result.items() if k.endswith("_max_error_val_m") and v is not None]
    return float(staged[-1]) if staged else 0.0


def _forget_drivers(name: str | None = None) -> None:
    simulate.forget(name)


def clear_model(obj: bpy.types.Object, *, delete_file: bool = True) -> None:
    """Forget the object's model (stopping its simulation) and delete the model file."""
    s = obj.neural_rom
    if not s.model.path:
        raise NeuralRomError(f"'{obj.name}' has no model to clear.")
    if s.simulate:
        simulate.stop_simulation(obj)
    path = load_path(s.model.path)
    applied = bool(s.model.applied_from)  # another object's file: not this one's to delete
    clear_model_record(obj)
    _forget_drivers(obj.name)
    if delete_file and not applied and path.suffix == ".nrmodel" and path.is_file():
        path.unlink()
        ckpt = path.parent / (path.stem + ".checkpoints")
        if ckpt.is_dir():
            shutil.rmtree(ckpt, ignore_errors=True)


def clear_model_record(obj: bpy.types.Object) -> None:
    """Forget what ``obj`` records of its model (every property back to its default)."""
    m = obj.neural_rom.model
    for prop in m.bl_rna.properties:
        if prop.identifier not in ("rna_type", "name"):
            m.property_unset(prop.identifier)
