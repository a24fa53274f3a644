"""Active faces: set up a face (worker), add the demo head (worker), add marker empties, pose
the sliders from a training key. The stages are in :mod:`...addon.face`."""

from __future__ import annotations

import bpy
from bpy.props import EnumProperty, IntProperty, StringProperty

from ....addon import jobs
from ....addon.kinds.face import face
from ....core.errors import NeuralRomError
from ....core.kinds.face.inputs import MARKER_LAYOUTS
from .._common import active_deformable, active_object, fail, launch_job


def _face_skin(context):
    obj = active_deformable(context)
    return obj if obj is not None and face.is_face(obj) else None


class NEURAL_ROM_OT_set_up_face(bpy.types.Operator):
    """Build the face of the active skin (its shape keys are the expressions) over the
    picked skull and jaw in a background process: the flesh lattice between skin and skull,
    skull nodes fixed, jaw nodes following the jaw"""

    bl_idname = "neural_rom.set_up_face"
    bl_label = "Set Up Face"
    bl_options = {"REGISTER"}  # the job records the face when it ends

    @classmethod
    def poll(cls, context):
        return active_deformable(context) is not None

    def execute(self, context):
        def summary(obj):
            f = obj.neural_rom.face
            return (
                f"Face of '{obj.name}': {f.tets} tets, {f.skull_nodes} skull and {f.jaw_nodes} "
                f"jaw nodes, {f.keys} shape keys ({f.held_out} held out)"
            )

        return launch_job(
            self,
            context,
            noun="Set Up Face",
            gerund="Setting up the face of",
            make_job=face.make_setup_job,
            on_done=face.on_setup_done,
            discard=face.discard_job,
            summary=summary,
        )


class NEURAL_ROM_OT_add_demo_head(bpy.types.Operator):
    """Add the procedural demo head (skin with simulated expressions as shape keys, skull,
    hinged jaw), built in a background process, its face set up"""

    bl_idname = "neural_rom.add_demo_head"
    bl_label = "Add Demo Head"
    bl_options = {"REGISTER"}

    name: StringProperty(name="Name", default="Face")
    keys: IntProperty(name="Shape Keys", default=16, min=3, soft_max=64)
    held_out: IntProperty(name="Held Out", default=4, min=0, soft_max=16)
    seed: IntProperty(name="Seed", default=0, min=0)
    size: EnumProperty(
        name="Size",
        items=(
            ("small", "Small", "About 4K tets"),
            ("bench", "Bench", "About 8K tets (the benchmark's head)"),
        ),
        default="small",
    )

    def execute(self, context):
        if bpy.data.objects.get(self.name) is not None:
            return fail(self, f"An object named '{self.name}' exists: pick another name.")
        try:
            job = face.make_demo_job(
                context.scene,
                name=self.name,
                size=self.size,
                keys=self.keys,
                held_out=self.held_out,
                seed=self.seed,
            )
        except NeuralRomError as e:
            return fail(self, str(e))
        scene_name, name = context.scene.name, self.name

        def done(result: dict) -> None:
            if result and not result.get("cancelled"):
                face.build_demo_objects(bpy.data.scenes[scene_name], name, result)

        try:
            jobs.start_job(context, job, owner=name, on_done=done)
        except NeuralRomError as e:
            return fail(self, f"Add Demo Head failed: {e}")
        self.report({"INFO"}, f"Building the demo head '{name}'")
        return {"FINISHED"}


class NEURAL_ROM_OT_add_markers(bpy.types.Operator):
    """Add marker empties bound to skin vertices (the selected ones, else placed by the
    layout: on the face between brow and chin, denser where the shape keys move it, and with
    Head From Markers on, 6 more where the skin moves with the skull); animate them and set
    Drive to Markers"""

    bl_idname = "neural_rom.add_markers"
    bl_label = "Add Markers"
    bl_options = {"REGISTER", "UNDO"}

    count: IntProperty(name="Count", default=30, min=1, soft_max=200)
    seed: IntProperty(name="Seed", default=0, min=0)
    layout: EnumProperty(name="Layout", items=MARKER_LAYOUTS, default="FACE")

    @classmethod
    def poll(cls, context):
        return _face_skin(context) is not None

    def execute(self, context):
        obj = _face_skin(context)
        if obj is None:
            return fail(self, "The active object has no face: Set Up Face first.")
        try:
            made = face.add_markers(
                obj, context.scene, count=self.count, seed=self.seed, layout=self.layout
            )
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Added {len(made)} markers to '{obj.name}'")
        return {"FINISHED"}


class NEURAL_ROM_OT_pose_from_key(bpy.types.Operator):
    """Set the latent sliders to the fitted code of a training shape key"""

    bl_idname = "neural_rom.pose_from_key"
    bl_label = "Pose from Key"
    bl_options = {"REGISTER", "UNDO"}

    index: IntProperty(name="Training Key", default=0, min=0)

    @classmethod
    def poll(cls, context):
        obj = _face_skin(context)
        return obj is not None and bool(obj.neural_rom.model.path)

    def execute(self, context):
        obj = active_object(context)
        try:
            name = face.pose_from_key(obj, self.index)
        except NeuralRomError as e:
            return fail(self, str(e))
        self.report({"INFO"}, f"Sliders of '{obj.name}' set to the code of '{name}'")
        return {"FINISHED"}


class NEURAL_ROM_OT_fit_key(bpy.types.Operator):
    """Fit the latent sliders (and put the jaw) to a shape key, held out of training or not,
    in a background process: the face the model makes closest to that sculpt"""

    bl_idname = "neural_rom.fit_key"
    bl_label = "Fit Sliders to Key"
    bl_options = {"REGISTER"}  # a job: the sliders are set when it ends

    key_name: StringProperty(name="Shape Key", default="", description="Empty: the active one")

    @classmethod
    def poll(cls, context):
        obj = _face_skin(context)
        return obj is not None and bool(obj.neural_rom.model.path)

    def execute(self, context):
        fitted: dict = {}

        def make(obj, scene):
            job = face.make_fit_key_job(obj, scene, key_name=self.key_name)
            fitted["job"] = job
            return job

        def done(obj, result):
            fitted["result"] = face.on_fit_key_done(obj, fitted["job"], result)

        def summary(obj):
            info = obj.get(face.FIT_KEY_PROP) or {}
            return (
                f"Sliders of '{obj.name}' fitted to '{info.get('key', '?')}': mean skin error "
                f"{info.get('mean_mm', 0.0):.3g} mm, max {info.get('max_mm', 0.0):.3g} mm"
            )

        return launch_job(
            self,
            context,
            noun="Fit Sliders to Key",
            gerund="Fitting the sliders of",
            make_job=make,
            on_done=done,
            discard=face.discard_job,
            summary=summary,
        )


CLASSES = (
    NEURAL_ROM_OT_set_up_face,
    NEURAL_ROM_OT_add_demo_head,
    NEURAL_ROM_OT_add_markers,
    NEURAL_ROM_OT_pose_from_key,
    NEURAL_ROM_OT_fit_key,
)
