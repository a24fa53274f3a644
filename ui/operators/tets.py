"""Tetrahedralize selected meshes; show or hide a tet preview."""

from __future__ import annotations

import bpy
from bpy.props import BoolProperty

from ...addon import jobs
from ...addon.kinds.fem import preview, tets
from ...core.errors import JobCancelled, NeuralRomError
from ._common import active_object, fail


def _candidates(context) -> list[bpy.types.Object]:
    return [
        o
        for o in context.selected_objects
        if o.type == "MESH" and o.neural_rom.role != "COLLIDER" and not o.neural_rom.preview_of
    ]


class NEURAL_ROM_OT_tetrahedralize(bpy.types.Operator):
    """Tetrahedralize the selected meshes (or a cage around open / non-manifold ones) in
    background processes, one per object; Esc cancels"""

    bl_idname = "neural_rom.tetrahedralize"
    bl_label = "Tetrahedralize"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context):
        return bool(_candidates(context))

    def execute(self, context):
        objs = _candidates(context)
        if not objs:
            return fail(
                self, "Select one or more mesh objects to tetrahedralize (colliders are skipped)."
            )
        busy = [o.name for o in objs if jobs.active_jobs(o.name)]
        if busy:
            return fail(self, f"'{busy[0]}' already has a job running; wait for it or cancel it.")
        specs = []
        try:  # every object checked (and its surface written) before any job starts
            for obj in objs:
                specs.append((obj.name, tets.make_tet_job(obj)))
        except NeuralRomError as e:
            for _, job in specs:
                tets.discard_tet_job(job)
            return fail(self, str(e))
        infos = {}
        for name, job in specs:

            def done(result: dict, name=name, job=job) -> None:
                target = bpy.data.objects.get(name)  # by name: an undo invalidates the object
                if target is not None:
                    info = tets.on_tet_done(target, job, result)
                    if info is not None:
                        infos[name] = info

            try:
                jobs.start_job(context, job, owner=name, on_done=done)
            except JobCancelled as e:  # background run: nothing of that object changed
                self.report({"WARNING"}, str(e))
                return {"FINISHED"}
            except NeuralRomError as e:
                tets.discard_tet_job(job)
                return fail(self, f"Tetrahedralizing '{name}' failed: {e}")
        if not bpy.app.background:
            self.report({"INFO"}, f"Tetrahedralizing {len(specs)} object(s) in the background")
            return {"FINISHED"}
        for name, info in infos.items():
            for w in info["warnings"]:
                self.report({"WARNING"}, f"{name}: {w}")
        text = ", ".join(
            f"{name}: {i['n_tets']} tets" + (" (cage)" if i["embedded"] else "")
            for name, i in infos.items()
        )
        self.report({"INFO"}, f"Tetrahedralized {text}")
        return {"FINISHED"}


class NEURAL_ROM_OT_preview_tets(bpy.types.Operator):
    """Show the active object's tets as a wireframe object (optionally cut away in half)"""

    bl_idname = "neural_rom.preview_tets"
    bl_label = "Preview Tets"
    bl_options = {"REGISTER", "UNDO"}

    cutaway: BoolProperty(
        name="Cut Away",
        default=False,
        description="Keep only the tets beyond the centre along local X, to see inside",
    )

    @classmethod
    def poll(cls, context):
        obj = active_object(context)
        return obj is not None and bool(getattr(obj.neural_rom, "tets_path", ""))

    def execute(self, context):
        obj = active_object(context)
        if obj is None or not obj.neural_rom.tets_path:
            return fail(self, "The active object has no tets; run Tetrahedralize first.")
        try:
            prev = preview.build_preview(obj, cutaway=self.cutaway)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Tet preview '{prev.name}' ({obj.neural_rom.tets_count} tets)")
        return {"FINISHED"}


class NEURAL_ROM_OT_clear_preview(bpy.types.Operator):
    """Remove the active object's tet preview"""

    bl_idname = "neural_rom.clear_preview"
    bl_label = "Remove Tet Preview"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        obj = active_object(context)
        if obj is None:
            return fail(self, "No active object.")
        if obj.neural_rom.preview_of:  # the preview itself is active
            obj = bpy.data.objects.get(obj.neural_rom.preview_of) or obj
        if not preview.remove_preview(obj):
            return fail(self, f"'{obj.name}' has no tet preview.")
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_tetrahedralize, NEURAL_ROM_OT_preview_tets, NEURAL_ROM_OT_clear_preview)
