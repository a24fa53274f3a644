"""Models that run on other meshes of an object family (:mod:`...addon.family`): train the
active object with the other selected objects' bakes, use another object's model (or a model
file) without retraining, and carry a running simulation across an edit of the mesh."""

from __future__ import annotations

import functools

import bpy
from bpy.props import EnumProperty, StringProperty

from ....addon import training
from ....addon.kinds.family import family, reference
from ....core.errors import NeuralRomError
from .._common import active_deformable, fail, launch_job


def _others(context, obj) -> list:
    """The other selected Deformable meshes."""
    return [
        o
        for o in context.selected_objects
        if o is not obj and o.type == "MESH" and o.neural_rom.role == "DEFORMABLE"
    ]


class NEURAL_ROM_OT_train_family(bpy.types.Operator):
    """Train one model on the bakes of the active object and of the other selected objects
    (variants of one prop), for a method that runs on other meshes; the model is the active
    object's"""

    bl_idname = "neural_rom.train_family"
    bl_label = "Train with Selected"
    bl_options = {"REGISTER"}

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return (
            obj is not None
            and len(obj.neural_rom.bakes) > 0
            and obj.neural_rom.method().other_mesh
            and bool(_others(context, obj))
        )

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        others = _others(context, obj)

        def summary(target):
            m = target.neural_rom.model
            return (
                f"Trained '{target.name}' with {m.family}: {training.model_size(m)}, "
                f"validation error {m.val_error * 1000:.3g} mm"
            )

        return launch_job(
            self,
            context,
            noun="Training",
            gerund="Training",
            make_job=functools.partial(family.make_family_train_job, others=others),
            on_done=training.on_train_done,
            pending="pending_train",
            summary=summary,
        )


def _source_items(self, context):
    """Objects whose model runs on other meshes (an enum callback: Blender keeps the list)."""
    items = [("FILE", "Model File", "Use the model file given as File Path")]
    obj = active_deformable(context) if context is not None else None
    for o in bpy.data.objects:
        m = o.neural_rom.model
        if o is not obj and m.path and not m.applied_from and reference.runs_on_other_meshes(o):
            items.append((o.name, o.name, f"Use the model of '{o.name}'"))
    _source_items.keep = items  # Blender needs the strings to outlive the call
    return items


class NEURAL_ROM_OT_use_model(bpy.types.Operator):
    """Use another object's model (or a model file) on the active object without retraining:
    a model that runs on other meshes is put on this object's own tets"""

    bl_idname = "neural_rom.use_model"
    bl_label = "Use Model"
    bl_options = {"REGISTER", "UNDO"}

    source: EnumProperty(name="From", items=_source_items)
    filepath: StringProperty(name="File Path", subtype="FILE_PATH", default="")

    @classmethod
    def poll(cls, context):
        return active_deformable(context) is not None

    def invoke(self, context, event):
        return context.window_manager.invoke_props_dialog(self)

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        by_file = self.source in ("", "FILE")
        source = None if by_file else bpy.data.objects.get(self.source)
        if not by_file and source is None:
            return fail(self, f"There is no object '{self.source}'.")
        try:
            info = family.apply_model(obj, context.scene, self.filepath or None, source=source)
        except NeuralRomError as e:
            return fail(self, str(e))
        m = obj.neural_rom.model
        where = family.domain_text(m)
        text = f"'{obj.name}' uses {info['path']}" + (f": {where}" if where else "")
        if info["warning"]:
            self.report({"WARNING"}, f"{text}. {info['warning']}")
        else:
            self.report({"INFO"}, text)
        return {"FINISHED"}


class NEURAL_ROM_OT_apply_mesh_edit(bpy.types.Operator):
    """Continue the running simulation on the edited mesh: the new surface is
    tetrahedralized in the background and the motion goes on from the current frame (a
    model that runs on other meshes)"""

    bl_idname = "neural_rom.apply_mesh_edit"
    bl_label = "Apply Mesh Edit"
    bl_options = {"REGISTER"}

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and obj.neural_rom.simulate and obj.mode != "EDIT"

    def execute(self, context):
        obj = active_deformable(context)
        if obj is None:
            return fail(self, "The active object is not Deformable.")
        try:
            info = family.apply_mesh_edit(obj, context.scene, context=context)
        except NeuralRomError as e:
            return fail(self, str(e))
        if info is None:
            self.report({"INFO"}, f"Tetrahedralizing the edited '{obj.name}' (Esc cancels)")
        else:
            self.report({"INFO"}, family.swap_text(obj.name, info))
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_train_family, NEURAL_ROM_OT_use_model, NEURAL_ROM_OT_apply_mesh_edit)
