"""The face kind's part of the one Driver (:mod:`...driver`)."""

from __future__ import annotations

import bpy
import numpy as np

from ...driver import Driver, FramePart, collider_inputs
from . import face
from .engine import FaceEngine


class FacePart(FramePart):
    """An active face: each frame the equilibrium of its sliders or markers
    (:class:`.kinds.face.face.FaceEngine`), shown through a modifier."""

    name = "face"

    @staticmethod
    def claims(obj: bpy.types.Object) -> bool:
        return face.is_face(obj)

    #: its own Bake Simulation job (the face plays from its sliders or markers)
    simulation_job = staticmethod(face.make_face_simulation_job)

    def load(self, obj, scene) -> tuple:
        engine = FaceEngine(obj)
        return engine.sim, engine.model, None, engine

    def now(self, d: Driver, obj, scene, colliders: list, mats=None):
        """The face's inputs now (``mats`` is not needed: it reads its own)."""
        return d.engine.read(obj, scene, collider_inputs)

    def write(self, d: Driver, obj, P: np.ndarray, matrix: np.ndarray | None) -> None:
        d.engine.show(obj, P)

    over_shape_keys = True

    def show(self, obj) -> None:
        face.show_simulation(obj)

    def hide(self, obj) -> None:
        face.hide_simulation(obj)
