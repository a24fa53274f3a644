"""The Reduced Model panel: the Train menu and the method's settings, Train and Compare
Methods, the last comparison's table, and what the trained model reports."""

from __future__ import annotations

import bpy

from ...addon import training
from ...addon.compare.methods import LINES_PROP, ROWS_PROP
from ...addon.kinds.family.reference import runs_on_other_meshes
from ...core import registry
from . import kinds
from .common import DeformableSub, deformable
from .jobs import draw_jobs
from .kinds.family import draw_family_model, draw_family_train


def draw_method_settings(layout, s) -> None:
    """The Train menu and the chosen method's settings (its generated property group), the
    advanced ones under a fold."""
    layout.prop(s, "model_method")
    method = s.method()
    group = s.method_group(method)
    if group is None:
        return
    col = layout.column()
    for setting in method.settings:
        if not setting.advanced:
            col.prop(group, setting.name)
    advanced = [setting for setting in method.settings if setting.advanced]
    if advanced:
        header, body = layout.panel("NEURAL_ROM_training_advanced", default_closed=True)
        header.label(text="Advanced")
        if body is not None:
            col = body.column()
            for setting in advanced:
                col.prop(group, setting.name)


def dynamics_hint(record) -> str:
    """The warning for a replay over 3x the closest shapes (the dynamics, not the shapes,
    limit the accuracy), naming only the levers the method's record has: a Subspace Neural
    Physics model has no cubature to lower."""
    names = {x.name for x in record.settings} if record is not None else set()
    levers = ["more modes"] if names & {"k", "latent_dim"} else []
    if "cubature_target" in names:
        levers.append("a lower cubature target")
    if record is not None and record.needs_torch:
        levers.append("more training bakes")
    return "Dynamics limit accuracy" + (": try " + ", ".join(levers) if levers else "")


def draw_model_result(box, s) -> None:
    """What a trained model reports, the same fields for every method."""
    m = s.model
    known = {r.name: r for r in registry.methods()}
    label = known[m.method].label if m.method in known else f"{m.method} (not installed)"
    box.label(text=label, icon="CHECKMARK")
    box.label(text=f"{m.method}: {training.model_size(m)}")
    if m.rollout_error >= 0:  # the model's own error: its replay of a held-out bake
        mean = f", {m.rollout_mean_error * 1000:.3g} mean" if m.rollout_mean_error >= 0 else ""
        box.label(text=f"Held-out replay error {m.rollout_error * 1000:.3g} mm max{mean}")
        box.label(text=f"{m.step_ms:.2f} ms/step")
        if m.projection_error >= 0:
            mean = (
                f", {m.projection_mean_error * 1000:.3g} mean"
                if m.projection_mean_error >= 0
                else ""
            )
            box.label(text=f"Closest shapes (floor) {m.projection_error * 1000:.3g} mm max{mean}")
            if m.rollout_error > 3 * m.projection_error and m.rollout_error > 0:
                box.label(text=dynamics_hint(known.get(m.method)), icon="ERROR")
        if m.choice:
            box.label(text=m.choice, icon="INFO")
    if m.bakes:  # a face's model fits its shape keys: its Face box shows the fit
        box.label(text=f"Held-out shape error {m.val_error * 1000:.3g} mm")
    what = f"on {m.bakes} bake(s) " if m.bakes else ""
    box.label(text=f"Trained {what}in {m.train_seconds:.1f} s ({m.device})")
    draw_family_model(box, s.id_data)
    if runs_on_other_meshes(s.id_data):
        pass  # runs on any tets of the object: never stale
    elif m.tets_hash != s.tets_hash or m.source_hash != s.source_hash:
        box.label(text="Stale: the mesh or tets changed, re-bake and re-train", icon="ERROR")


def draw_methods_table(layout, obj) -> None:
    """The last Compare Methods' table, one method a line with a "use this row" button on
    each that has a model (the active model's ticked), and its recommendation (kept on the
    object by :func:`..addon.methodcompare.on_compare_methods_done`)."""
    lines = obj.get(LINES_PROP)
    if not lines:
        return
    methods = list(obj.get(ROWS_PROP) or [])
    active = obj.neural_rom.model.method if obj.neural_rom.model.path else ""
    box = layout.box()
    for i, line in enumerate(lines):
        method = methods[i] if i < len(methods) else ""
        if not method:
            box.label(text=str(line), icon="CHECKMARK" if i == len(lines) - 1 else "NONE")
            continue
        row = box.row(align=True)
        row.label(text=str(line))
        icon = "CHECKBOX_HLT" if method == active else "CHECKBOX_DEHLT"
        row.operator("neural_rom.use_compared_method", text="", icon=icon).method = method


class NEURAL_ROM_PT_model(DeformableSub, bpy.types.Panel):
    bl_label = "Reduced Model"
    bl_idname = "NEURAL_ROM_PT_model"
    stage = "model"

    def draw(self, context):
        obj = deformable(context)
        s = obj.neural_rom
        layout = self.layout
        draw_jobs(layout, obj.name, "train")
        draw_method_settings(layout, s)
        can_train = len(s.bakes) > 0 or bool(s.face.path)  # a face trains on its face file
        row = layout.row(align=True)
        row.enabled = can_train
        row.operator("neural_rom.train", icon="NETWORK_DRIVE")
        row.operator("neural_rom.compare_methods", text="Compare Methods", icon="SORTSIZE")
        draw_family_train(layout, obj)
        draw_methods_table(layout, obj)
        if not can_train:
            first = kinds.data_step(s.training_data_kind())
            layout.label(text=f"{first} first", icon="INFO")
        if not s.model.path:
            layout.label(text="Model: not trained yet", icon="INFO")
            return
        draw_model_result(layout.box(), s)
        layout.operator("neural_rom.clear_model", text="Clear Model", icon="TRASH")
