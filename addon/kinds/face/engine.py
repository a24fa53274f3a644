"""A face on the timeline (the one :class:`..driver.Driver`'s engine for a face): each
frame shown is the equilibrium of that frame's inputs, solved from the previous solve (a
quasistatic face has no history to step through); a frame seen again with the same inputs
is not solved again."""

from __future__ import annotations

import bpy
import numpy as np

from ....core.errors import CacheError
from ....core.jobs import face as facejob
from ....core.kinds.face.equilibrium import FaceEquilibrium
from ....core.registry import load_simulator
from . import face


class FaceEngine:
    """The face of one skin object: :meth:`read` a frame's inputs from Blender, its
    :meth:`positions` (the equilibrium), :meth:`show` them.

    Raises (on construction) a :class:`NeuralRomError` saying what to do when the object
    has no face or model, or the model belongs to another face.
    """

    timeline = None  # no history: nothing to step through
    ground_z = None
    adapter = None

    def __init__(self, obj: bpy.types.Object):
        path = face.check_face_model(obj)
        s = obj.neural_rom
        try:
            self.sim, self.model = load_simulator(path, expect_mesh_hash=s.face.mesh_hash)
        except CacheError as e:
            raise CacheError(
                f"The model of '{obj.name}' is not of its face ({e}): it was trained before the "
                "last Set Up Face; train again."
            ) from e
        facejob.face_runtime(self.sim, self.model, obj.name)
        facejob.configure_face(self.sim, face.runtime_options(obj))
        self.threads = facejob.tune_threads(self.sim)  # measured here, kept for every frame
        self.n_sliders = int(np.asarray(self.model.arrays["codes"]).shape[1])
        self.equilibrium = FaceEquilibrium(self.sim)
        self.jaw = None  # (angle, head) the markers solved for the jaw object, or None

    @property
    def cache(self) -> dict:
        """The solved frames (:class:`...core.kinds.face.equilibrium.FaceEquilibrium`)."""
        return self.equilibrium.cache

    @property
    def step_seconds(self) -> list[float]:
        return self.equilibrium.step_seconds

    def reset(self) -> None:
        self.equilibrium.reset()

    def read(self, obj, scene, read_colliders) -> tuple:
        """The frame's inputs read from Blender: the track of the current frame and how
        the face runs (``read_colliders``: see :func:`.face.gather_track`)."""
        track = face.gather_track(
            obj, scene, n_sliders=self.n_sliders, read_colliders=read_colliders
        )
        return track, face.runtime_options(obj)

    def frames_needed(self, frame: int, now, *, pokes=()) -> range:
        return range(0)  # an equilibrium needs no earlier frame

    def positions(self, frame: int, now, earlier=None, *, pokes=()) -> np.ndarray:
        """(s, 3) skin positions (local) at scene ``frame`` for the inputs ``now``
        (:meth:`read`)."""
        track, options = now
        facejob.configure_face(self.sim, options)
        solved = options["jaw"] == "markers"
        if solved:  # the markers turn the jaw: the jaw object's pose is an output, not an input
            track.reference_frame = None
        P, theta, head = self.equilibrium.solve(frame, track, options)
        self.jaw = (theta, head) if solved else None
        return P

    def show(self, obj: bpy.types.Object, P: np.ndarray) -> None:
        """Show the skin positions ``P`` (local) through :data:`.face.MODIFIER`, and turn the
        jaw object to the angle the markers solved (moved with the head)."""
        if self.jaw is not None:
            face.set_jaw_angle(obj, *self.jaw)
        attr = obj.data.attributes.get(face.SIM_ATTRIBUTE)
        if attr is None:
            attr = obj.data.attributes.new(face.SIM_ATTRIBUTE, "FLOAT_VECTOR", "POINT")
        attr.data.foreach_set("vector", np.ascontiguousarray(P, dtype=np.float32).ravel())
        obj.data.update()
