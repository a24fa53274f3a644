"""Interactive poke: click-drag on a simulated object in the 3D Viewport pulls the
vertices near the clicked point towards the mouse while the reduced simulation runs."""

from __future__ import annotations

import bpy
import numpy as np
from bpy.props import FloatProperty

from ...addon import frames, simulate
from ...core.errors import NeuralRomError
from ...core.physics.poke import poke_weights
from ._common import active_deformable, fail


class NEURAL_ROM_OT_poke(bpy.types.Operator):
    """Click and drag on the object to pull it while the reduced simulation runs; Esc or
    right-click ends"""

    bl_idname = "neural_rom.poke"
    bl_label = "Poke"
    bl_options = {"REGISTER", "UNDO"}

    radius: FloatProperty(
        name="Radius",
        default=0.2,
        min=1e-4,
        soft_max=2.0,
        unit="LENGTH",
        description="Vertices within this distance of the clicked point are pulled (m)",
    )
    stiffness: FloatProperty(
        name="Stiffness",
        default=500.0,
        min=0.0,
        soft_max=1e5,
        description="Spring from the grabbed point to the mouse (N/m)",
    )
    max_force: FloatProperty(
        name="Max Force", default=1000.0, min=0.0, description="Largest pull, newtons (0: none)"
    )

    @classmethod
    def poll(cls, context):
        obj = active_deformable(context)
        return obj is not None and bool(obj.neural_rom.model.path)

    def invoke(self, context, event):
        obj = active_deformable(context)
        if obj is None or not obj.neural_rom.model.path:
            return fail(self, "The active object has no trained model; run Train first.")
        area = getattr(context, "area", None)
        if area is None or area.type != "VIEW_3D" or context.region_data is None:
            return fail(self, "Poke works in a 3D Viewport: run it with the mouse over one.")
        try:
            if not obj.neural_rom.simulate:
                simulate.start_simulation(obj, context.scene)
        except NeuralRomError as e:
            return fail(self, str(e))
        self._name = obj.name
        self._grab = None  # (idx, w, depth point)
        wm = context.window_manager
        self._timer = wm.event_timer_add(
            1.0 / max(context.scene.render.fps, 1), window=context.window
        )
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def _ray(self, context, event):
        from bpy_extras import view3d_utils

        region, rv3d = context.region, context.region_data
        xy = (event.mouse_region_x, event.mouse_region_y)
        origin = view3d_utils.region_2d_to_origin_3d(region, rv3d, xy)
        direction = view3d_utils.region_2d_to_vector_3d(region, rv3d, xy)
        return region, rv3d, xy, origin, direction

    def modal(self, context, event):
        obj = bpy.data.objects.get(self._name)
        if obj is None or not obj.neural_rom.simulate or event.type in {"ESC", "RIGHTMOUSE"}:
            return self._end(context)
        if event.type == "LEFTMOUSE" and event.value == "PRESS":
            _, _, _, origin, direction = self._ray(context, event)
            mw_inv = obj.matrix_world.inverted()
            ok, loc, _n, _i = obj.ray_cast(mw_inv @ origin, mw_inv.to_3x3() @ direction)
            if not ok:
                return {"RUNNING_MODAL"}
            hit = np.array(obj.matrix_world @ loc)
            d = simulate.driver(obj, context.scene)
            idx, w = poke_weights(d.sim.positions(), hit, self.radius)
            self._grab = (idx, w, hit)
            simulate.set_poke(self._name, idx, w, hit, self.stiffness, self.max_force or None)
            return {"RUNNING_MODAL"}
        if event.type == "LEFTMOUSE" and event.value == "RELEASE":
            self._grab = None
            simulate.clear_poke(self._name)
            return {"RUNNING_MODAL"}
        if event.type == "MOUSEMOVE" and self._grab is not None:
            from bpy_extras import view3d_utils

            region, rv3d, xy, _, _ = self._ray(context, event)
            target = view3d_utils.region_2d_to_location_3d(region, rv3d, xy, self._grab[2].tolist())
            idx, w, _ = self._grab
            simulate.set_poke(
                self._name, idx, w, np.array(target), self.stiffness, self.max_force or None
            )
            return {"RUNNING_MODAL"}
        if event.type == "TIMER":
            frames.advance(context.scene)  # the frame handler steps the model
            return {"RUNNING_MODAL"}
        return {"PASS_THROUGH"}

    def _end(self, context):
        simulate.clear_poke(self._name)
        if getattr(self, "_timer", None) is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None
        return {"FINISHED"}


CLASSES = (NEURAL_ROM_OT_poke,)
