"""The sidebar (View3D > N > Neural ROM): the active object's role, settings and stages."""

from __future__ import annotations

import textwrap

import bpy

from ...addon.kinds.family.reference import runs_on_other_meshes
from .family import draw_family_model, draw_family_simulate, draw_family_train
from .jobs import draw_jobs


def _active(context):
    obj = getattr(context, "object", None)
    if obj is None and getattr(context, "view_layer", None) is not None:
        obj = context.view_layer.objects.active
    return obj


def _deformable(context):
    obj = _active(context)
    if obj is not None and obj.type == "MESH" and obj.neural_rom.role == "DEFORMABLE":
        return obj
    return None


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


class _Sidebar:
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Neural ROM"


class _DeformableSub(_Sidebar):
    bl_parent_id = "NEURAL_ROM_PT_main"
    #: Shown for a face too (a face trains on its face file: no tets, bakes or scenario).
    for_faces = False

    @classmethod
    def poll(cls, context):
        obj = _deformable(context)
        return obj is not None and (cls.for_faces or obj.neural_rom.training_data_kind() != "face")


class _FemSub(_DeformableSub):
    """A panel of the FEM pipeline (material, tets, scenario, bake): only for an object that
    trains on FEM bakes (not a cloth, whose data is Blender's own cloth:
    :class:`NEURAL_ROM_PT_cloth_bake`; not a face)."""

    @classmethod
    def poll(cls, context):
        obj = _deformable(context)
        return obj is not None and obj.neural_rom.training_data_kind() == "fem"


class NEURAL_ROM_UL_bakes(bpy.types.UIList):
    """Bakes of an object: name, frames, status."""

    def draw_item(self, context, layout, data, item, icon, active_data, active_propname, index=0):
        row = layout.row(align=True)
        ok = item.status == "complete"
        row.label(text=item.name, icon="FILE_CACHE" if ok else "ERROR")
        row.label(text=f"{item.frames} fr")


class NEURAL_ROM_PT_main(_Sidebar, bpy.types.Panel):
    bl_label = "Neural ROM"
    bl_idname = "NEURAL_ROM_PT_main"

    def draw(self, context):
        layout = self.layout
        obj = _active(context)
        if obj is None:
            layout.label(text="Select an object", icon="INFO")
            layout.operator("neural_rom.add_demo_head", icon="MONKEY")  # an active face to try
            return
        s = obj.neural_rom
        if s.preview_of:
            layout.label(text=f"Tet preview of '{s.preview_of}'", icon="MESH_ICOSPHERE")
            layout.operator("neural_rom.clear_preview", icon="X")
            return
        ghost_of = obj.get("nrom_ghost_of")  # addon.compare.GHOST_PROP
        if ghost_of:
            layout.label(text=f"Full-space bake of '{ghost_of}'", icon="GHOST_ENABLED")
            return
        error = obj.get("nrom_frame_error")  # addon.simulate.FRAME_ERROR
        if error:
            box = layout.box()
            box.alert = True
            for i, line in enumerate(textwrap.wrap(str(error), 48)):
                box.label(text=line, icon="ERROR" if i == 0 else "BLANK1")
        layout.prop(s, "role", expand=True)
        if s.role == "NONE":
            if obj.type == "MESH" and any(m.type == "CLOTH" for m in obj.modifiers):
                layout.label(text="Make it Deformable to bake its cloth", icon="MOD_CLOTH")
            elif obj.type == "MESH":
                layout.label(text="Make it Deformable, or tetrahedralize it:", icon="INFO")
                layout.operator("neural_rom.tetrahedralize", icon="MESH_ICOSPHERE")
            else:
                layout.label(text="Empties and meshes can be colliders.", icon="INFO")
        elif s.role == "COLLIDER":
            draw_collider(layout, obj)
        elif obj.type != "MESH":
            layout.label(text="Only meshes can be deformable.", icon="ERROR")


def draw_collider(layout, obj) -> None:
    from ...addon.io import mesh as bm
    from ...core.errors import NeuralRomError

    s = obj.neural_rom
    col = layout.column()
    col.prop(s, "collider_shape")
    col.prop(s, "collider_friction")
    try:
        shape = bm.collider_shape(obj, s.collider_shape)
    except NeuralRomError as e:
        col.label(text=str(e), icon="ERROR")
        return
    if shape["kind"] == "sphere":
        col.label(text=f"Radius {shape['radius']:.3f} m (from size)")
    elif shape["kind"] == "capsule":
        col.label(text=f"Radius {shape['radius']:.3f} m, half length {shape['half_length']:.3f} m")
    else:
        col.label(text="Local XY plane, solid below (-Z)")
    col.label(text="Its animation drives the bakes' colliders.", icon="INFO")


class NEURAL_ROM_PT_material(_FemSub, bpy.types.Panel):
    bl_label = "Material"
    bl_idname = "NEURAL_ROM_PT_material"

    def draw(self, context):
        s = _deformable(context).neural_rom
        col = self.layout.column()
        col.prop(s, "material_preset")
        if s.material_preset == "custom":
            col.prop(s, "youngs_modulus")
            col.prop(s, "poisson_ratio")
            col.prop(s, "density")
        else:
            try:
                v = s.material_values()
            except (ImportError, KeyError) as e:
                col.label(text=f"Preset unavailable: {e}", icon="ERROR")
                return
            box = col.box()
            box.label(text=f"Young's modulus {v['youngs_modulus']:.3g} Pa")
            box.label(text=f"Poisson ratio {v['poisson_ratio']:.3f}")
            box.label(text=f"Density {v['density']:.0f} kg/m³")


class NEURAL_ROM_PT_tets(_FemSub, bpy.types.Panel):
    bl_label = "Tetrahedralize"
    bl_idname = "NEURAL_ROM_PT_tets"

    def draw(self, context):
        obj = _deformable(context)
        s = obj.neural_rom
        col = self.layout.column()
        col.prop(s, "tet_size")
        col.prop(s, "tet_quality")
        col.prop(s, "embedding")
        if s.embedding != "NEVER":
            col.prop(s, "cage_resolution")
        col.operator("neural_rom.tetrahedralize", icon="MESH_ICOSPHERE")
        if not s.tets_path:
            col.label(text="No tets yet", icon="INFO")
            return
        box = col.box()
        kind = "cage" if s.tets_embedded else "surface"
        box.label(text=f"{s.tets_count} tets, {s.tets_nodes} nodes ({kind})", icon="CHECKMARK")
        box.label(text=f"Radius ratio min {s.tets_quality_min:.2f}, mean {s.tets_quality_mean:.2f}")
        box.label(text=f"Min dihedral {s.tets_min_dihedral:.1f}°")
        row = col.row(align=True)
        row.operator("neural_rom.preview_tets", text="Preview", icon="HIDE_OFF").cutaway = False
        row.operator("neural_rom.preview_tets", text="Cut Away", icon="MOD_BOOLEAN").cutaway = True
        row.operator("neural_rom.clear_preview", text="", icon="X")


class NEURAL_ROM_PT_simulation(_FemSub, bpy.types.Panel):
    bl_label = "Simulation"
    bl_idname = "NEURAL_ROM_PT_simulation"

    def draw(self, context):
        obj = _deformable(context)
        s = obj.neural_rom
        col = self.layout.column()
        col.prop(s, "dt_from_scene")
        if s.dt_from_scene:
            from ...addon.kinds.fem.bake import scene_dt

            col.label(text=f"dt = {scene_dt(context.scene):.4f} s (scene frame rate)")
        else:
            col.prop(s, "dt")
        col.prop(s, "substeps")
        col.prop(s, "damping_mass")
        col.prop(s, "damping_stiffness")
        col.separator()
        col.prop_search(s, "pin_group", obj, "vertex_groups", icon="GROUP_VERTEX")
        if s.pin_group and obj.vertex_groups.get(s.pin_group) is None:
            col.label(text=f"No vertex group '{s.pin_group}'", icon="ERROR")
        col.prop(s, "require_pins")


class NEURAL_ROM_PT_scenario(_FemSub, bpy.types.Panel):
    bl_label = "Training Scenario"
    bl_idname = "NEURAL_ROM_PT_scenario"

    def draw(self, context):
        s = _deformable(context).neural_rom
        col = self.layout.column()
        col.prop(s, "scenario")
        row = col.row(align=True)
        row.prop(s, "frames")
        row.prop(s, "seed")
        col.prop(s, "variants")
        col.prop(s, "bake_motion")
        box = col.box()
        from ...core.bake.scenarios import describe

        if s.bake_motion != "scenario" and s.pin_group:
            box.label(text="Pins: each variant drawn from the animation when it has one,")
            box.label(text="perturbed (speed, stops, amplitude, turns); the scenario on top.")

        # what the bake will do, in words (Blender labels do not wrap: one sentence a line)
        for sentence in describe(s.scenario_dict()).replace("; ", ";. ").split(". "):
            if sentence.strip():
                box.label(text=sentence.strip().rstrip(".") + ".")
        if s.scenario_params_kind != s.scenario:
            box.label(text="Default parameters", icon="INFO")
            box.operator(
                "neural_rom.reset_scenario_params", text="Edit Parameters", icon="PREFERENCES"
            )
            return
        for item in s.scenario_params:
            label = item.name.replace("_", " ").capitalize()
            row = box.row()
            row.prop(item, item.value_attr, text=label)
        box.operator("neural_rom.reset_scenario_params", text="Reset", icon="LOOP_BACK")


class NEURAL_ROM_PT_bake(_FemSub, bpy.types.Panel):
    bl_label = "Bake"
    bl_idname = "NEURAL_ROM_PT_bake"

    def draw(self, context):
        obj = _deformable(context)
        s = obj.neural_rom
        layout = self.layout
        draw_jobs(layout, obj.name, "bake")
        row = layout.row(align=True)
        row.enabled = bool(s.tets_path)
        row.operator("neural_rom.bake", icon="PHYSICS")  # resumes an unfinished bake
        row.operator("neural_rom.bake", text="Start Over", icon="FILE_REFRESH").restart = True
        if not s.tets_path:
            layout.label(text="Tetrahedralize first", icon="INFO")
        layout.template_list("NEURAL_ROM_UL_bakes", "", s, "bakes", s, "active_bake", rows=2)
        rec = s.active_bake_record()
        if rec is not None:
            box = layout.box()
            box.label(
                text=f"{rec.frames} frames from frame {rec.frame_start}, {format_bytes(rec.nbytes)}"
            )
            box.label(
                text=f"Status: {rec.status}",
                icon="CHECKMARK" if rec.status == "complete" else "ERROR",
            )
            if rec.motion:  # the variant's pins drawn from the animation: which, how
                for i, part in enumerate(rec.motion.split(", ")):
                    box.label(text=("Pins: " if i == 0 else "  ") + part, icon="NONE")
                draw_variants_picture(box, obj)
            stale = rec.tets_hash != s.tets_hash or rec.source_hash != s.source_hash
            if stale:
                box.label(text="Stale: the mesh or tets changed, re-bake", icon="ERROR")
            row = layout.row(align=True)
            row.operator("neural_rom.clear_bake", text="Clear", icon="TRASH").all_bakes = False
            row.operator("neural_rom.clear_bake", text="Clear All").all_bakes = True


class NEURAL_ROM_PT_cloth_bake(_DeformableSub, bpy.types.Panel):
    bl_label = "Cloth Bake"
    bl_idname = "NEURAL_ROM_PT_cloth_bake"

    @classmethod
    def poll(cls, context):
        from ...addon.kinds.cloth.model import cloth_modifier, is_cloth

        obj = _deformable(context)
        return super().poll(context) and is_cloth(obj) and cloth_modifier(obj) is not None

    def draw(self, context):
        from .cloth import draw_cloth_bake

        draw_cloth_bake(self.layout, _deformable(context), context)


class NEURAL_ROM_PT_playback(_DeformableSub, bpy.types.Panel):
    bl_label = "Playback and Export"
    bl_idname = "NEURAL_ROM_PT_playback"

    @classmethod
    def poll(cls, context):
        obj = _deformable(context)
        return obj is not None and len(obj.neural_rom.bakes) > 0

    def draw(self, context):
        s = _deformable(context).neural_rom
        col = self.layout.column()
        text = "Stop Playback" if s.playback else "Play Bake"
        icon = "PAUSE" if s.playback else "PLAY"
        col.operator(
            "neural_rom.playback", text=text, icon=icon, depress=s.playback
        ).action = "TOGGLE"
        col.operator("neural_rom.export_pc2", icon="EXPORT")


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
    from ...addon import training
    from ...core import registry

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


def draw_variants_picture(layout, obj) -> None:
    """The picture of the object's drawn variants (:func:`..addon.bakes.variants_picture`),
    when there is one: one row per variant, its turn (blue) and travel (orange) over time."""
    from ...addon.kinds.fem.bake import variants_image_name

    img = bpy.data.images.get(variants_image_name(obj))
    if img is None or img.preview is None:
        return
    layout.label(text="Variants, top to bottom: turn (blue), travel (orange)")
    layout.template_icon(icon_value=img.preview.icon_id, scale=8.0)


def draw_methods_table(layout, obj) -> None:
    """The last Compare Methods' table, one method a line with a "use this row" button on
    each that has a model (the active model's ticked), and its recommendation (kept on the
    object by :func:`..addon.methodcompare.on_compare_methods_done`)."""
    from ...addon.compare.methods import LINES_PROP, ROWS_PROP

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


class NEURAL_ROM_PT_model(_DeformableSub, bpy.types.Panel):
    bl_label = "Reduced Model"
    bl_idname = "NEURAL_ROM_PT_model"
    for_faces = True

    def draw(self, context):
        obj = _deformable(context)
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
            first = "Cloth Bake" if s.training_data_kind() == "cloth" else "Bake"
            layout.label(text=f"{first} first", icon="INFO")
        if not s.model.path:
            layout.label(text="Model: not trained yet", icon="INFO")
            return
        draw_model_result(layout.box(), s)
        layout.operator("neural_rom.clear_model", text="Clear Model", icon="TRASH")


class NEURAL_ROM_PT_simulate(_DeformableSub, bpy.types.Panel):
    bl_label = "Simulate"
    bl_idname = "NEURAL_ROM_PT_simulate"

    @classmethod
    def poll(cls, context):
        obj = _deformable(context)
        return obj is not None and bool(obj.neural_rom.model.path)

    def draw(self, context):
        from ...addon import simulate
        from ...addon.kinds.fem import bake as bakes

        obj = _deformable(context)
        s = obj.neural_rom
        col = self.layout.column()
        text = "Stop Simulation" if s.simulate else "Simulate"
        icon = "PAUSE" if s.simulate else "PLAY"
        row = col.row(align=True)
        row.operator(
            "neural_rom.simulate", text=text, icon=icon, depress=s.simulate
        ).action = "TOGGLE"
        row.operator("neural_rom.reset_simulation", text="", icon="FILE_REFRESH")
        d = simulate._drivers.get(obj.name)
        if s.simulate and d is not None:
            steps = d.step_seconds[-20:]
            ms = 1000 * sum(steps) / len(steps) if steps else 0.0
            col.label(text=f"{len(d.cache)} frames cached, {ms:.2f} ms/step")
            if d.ground_z is not None and not bakes.scene_colliders(obj, context.scene):
                col.label(text=f"Ground plane of the bakes at z = {d.ground_z:.3f} m", icon="INFO")
        draw_family_simulate(col, obj)
        draw_jobs(col, obj.name, "simulate")
        row = col.row(align=True)
        row.operator("neural_rom.bake_simulation", icon="EXPORT")
        row.operator("neural_rom.export_onnx", text="ONNX", icon="EXPORT")


class NEURAL_ROM_PT_compare(_DeformableSub, bpy.types.Panel):
    bl_label = "Compare with Bake"
    bl_idname = "NEURAL_ROM_PT_compare"
    bl_options = {"DEFAULT_CLOSED"}

    @classmethod
    def poll(cls, context):
        obj = _deformable(context)
        return obj is not None and bool(obj.neural_rom.model.path) and len(obj.neural_rom.bakes) > 0

    def draw(self, context):
        draw_compare(self.layout, _deformable(context), context.scene)


def draw_compare(layout, obj, scene) -> None:
    """The reduced model against the selected bake: run, summary, clear."""
    from ...addon.compare import bake as compare

    s = obj.neural_rom
    col = layout.column()
    rec = s.active_bake_record()
    col.label(text=f"Bake: {rec.name if rec is not None else 'none selected'}")
    draw_jobs(col, obj.name, "compare")
    row = col.row(align=True)
    op = row.operator("neural_rom.compare_bake", text="Side by Side", icon="MOD_MIRROR")
    op.placement = "SIDE"
    op = row.operator("neural_rom.compare_bake", text="Overlaid", icon="OVERLAY")
    op.placement = "OVERLAY"
    info = obj.get(compare.PROP)
    if info is None:
        return
    box = col.box()
    box.label(text=f"'{info.get('bake', '')}', {info.get('frames', 0)} frames", icon="CHECKMARK")
    box.label(
        text=f"Max error {info.get('max_error', 0.0) * 1000:.3g} mm, "
        f"mean {info.get('mean_error', 0.0) * 1000:.3g} mm"
    )
    box.label(text=f"RMS error {info.get('rms_error', 0.0) * 1000:.3g} mm")
    closest = info.get("closest_max_error", -1.0)
    if closest >= 0:  # shapes vs dynamics: what the model's space alone cannot reach
        box.label(text=f"Closest shapes: max {closest * 1000:.3g} mm")
    c = compare._results.get(obj.name)
    if c is not None:
        k = c.index(scene.frame_current)
        box.label(
            text=f"Frame {k}: max {c.stats['per_frame_max'][k] * 1000:.3g} mm, "
            f"mean {c.stats['per_frame_mean'][k] * 1000:.3g} mm"
        )
    if s.simulate or s.playback:
        box.label(text="Paused while Simulate or Play Bake is on", icon="INFO")
    box.label(text="Colour: Viewport Shading > Attribute", icon="COLOR")
    col.operator("neural_rom.clear_comparison", text="Clear Comparison", icon="X")


class NEURAL_ROM_PT_cache(_Sidebar, bpy.types.Panel):
    bl_label = "Cache"
    bl_idname = "NEURAL_ROM_PT_cache"
    bl_parent_id = "NEURAL_ROM_PT_main"
    bl_options = {"DEFAULT_CLOSED"}

    def draw(self, context):
        from ...addon.io.paths import cache_base

        col = self.layout.column()
        col.prop(context.scene.neural_rom_scene, "cache_dir")
        col.label(text=f"In effect: {cache_base(context.scene)}")


CLASSES = (
    NEURAL_ROM_UL_bakes,
    NEURAL_ROM_PT_main,
    NEURAL_ROM_PT_material,
    NEURAL_ROM_PT_tets,
    NEURAL_ROM_PT_simulation,
    NEURAL_ROM_PT_scenario,
    NEURAL_ROM_PT_bake,
    NEURAL_ROM_PT_cloth_bake,
    NEURAL_ROM_PT_playback,
    NEURAL_ROM_PT_model,
    NEURAL_ROM_PT_simulate,
    NEURAL_ROM_PT_compare,
    NEURAL_ROM_PT_cache,
)
