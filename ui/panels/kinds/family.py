"""Panel parts of models that run on other meshes (:mod:`...addon.family`), drawn by the
Reduced Model and Simulate panels."""

from __future__ import annotations

from ....addon.kinds.family import family, reference


def draw_family_train(layout, obj) -> None:
    """Train with the other selected objects (a method that runs on other meshes) and Use
    Model (another object's, or a file)."""
    row = layout.row(align=True)
    if obj.neural_rom.method().other_mesh:
        row.operator("neural_rom.train_family", icon="OUTLINER_OB_GROUP_INSTANCE")
    row.operator("neural_rom.use_model", icon="LINKED")


def draw_family_model(box, obj) -> None:
    """Where the model comes from and where the mesh lies against its training domain."""
    m = obj.neural_rom.model
    if m.family:
        box.label(text=f"Trained with {m.family}")
    if m.applied_from:
        box.label(text=f"Model of {m.applied_from}", icon="LINKED")
    where = family.domain_text(m)
    if where:
        box.label(text=where, icon="ERROR" if m.domain_warning else "CHECKMARK")
        if m.domain_warning:
            box.label(text="Motion is extrapolated there: train on shapes like this one")


def draw_family_simulate(col, obj) -> None:
    """Apply Mesh Edit while a model that runs on other meshes simulates."""
    if not (obj.neural_rom.simulate and reference.runs_on_other_meshes(obj)):
        return
    if family.edit_pending(obj):
        col.label(text="Mesh edited: apply it to continue on it", icon="INFO")
    col.operator("neural_rom.apply_mesh_edit", icon="MOD_BOOLEAN")
