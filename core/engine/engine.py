"""One simulator on the host's timeline, one call a frame: the frame engine.

The host (Blender's frame handler, a job stepping a track, a test) reads what a frame needs
once, as data its kind's frame adapter understands (``now``: the matrices of the object and
its colliders, a row of a :class:`.track.Track`, ...), and asks the :class:`Engine`

1. which earlier frames it will step on the way (:meth:`Engine.frames_needed`), whose data
   the host reads next (Blender: ``scene.frame_set`` on each, only when something moves);
2. the frame (:meth:`Engine.frame`): the render mesh's local positions, after the adapter
   turned each frame's data into :class:`.protocol.FrameInputs`, the :class:`.timeline.Timeline`
   simulated what is missing or stale, and the adapter mapped the positions to the render
   mesh.

Nothing here calls back into the host. A data kind's adapter (``DataKind.adapter``) is any
object with ``inputs(now) -> FrameInputs`` and ``render(P, now) -> (r, 3) positions``
(:class:`FrameAdapter`); :class:`MeshAdapter` is the one of a mesh object (fem, family,
cloth), on its colliders' :class:`.track.FrameReader` or a track's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..physics.poke import Poke
from .protocol import FrameInputs
from .render import render_local
from .timeline import Timeline
from .track import FrameReader, Track


class FrameAdapter(Protocol):
    """A data kind's map between the host's frame data and the simulator (module
    docstring)."""

    def inputs(self, now: Any) -> FrameInputs: ...

    def render(self, P: np.ndarray, now: Any) -> np.ndarray: ...


class Reading(NamedTuple):
    """One frame read from the host: the world matrices of the object and its colliders
    ((1 + colliders, 4, 4), the object's first), each collider's box (half extents (3,),
    centre (3,), local, unscaled) and friction; what :meth:`.track.FrameReader.inputs`
    takes."""

    mats: np.ndarray
    boxes: list
    friction: list | None = None


class TrackRow(NamedTuple):
    """Frame ``k`` of a gathered :class:`.track.Track`."""

    track: Track
    k: int


@dataclass
class MeshAdapter:
    """The frame adapter of a mesh object (fem, family, cloth).

    Attributes
    ----------
    pins_local : (p, 3) the pinned nodes in the object's local space (they follow its
        matrix), or None
    ground_z : world height (m) of the ground plane the model was trained with, used when a
        frame has no collider, or None
    n_surface : the render vertices are the first ``n_surface`` nodes ...
    embedding : ... or the points of this :class:`.embedding.Embedding`
    reader : reads a :class:`Reading` (set by the host for its colliders: :meth:`reader_for`)
    plane_radius, reference_frame : the kind's :class:`.track.FrameReader` settings
    """

    pins_local: np.ndarray | None = None
    ground_z: float | None = None
    n_surface: int = 0
    embedding: Any = None
    reader: FrameReader | None = None
    plane_radius: float | None = 0.5
    reference_frame: bool = False

    @classmethod
    def for_model(cls, sim, model, render_map: tuple, **kind) -> MeshAdapter:
        """The adapter of ``sim`` (its pinned nodes) and ``model`` (its ground) on the
        object's ``render_map`` (:func:`.render.read_render_map`: local nodes, surface
        count, embedding); ``kind``: the kind's reader settings."""
        X_local, n_surface, embedding = render_map
        pinned = np.asarray(getattr(sim, "pinned", ()), dtype=np.int64)
        g = model.metadata.get("ground_z")
        return cls(
            pins_local=X_local[pinned] if pinned.size and X_local is not None else None,
            ground_z=None if g is None else float(g),
            n_surface=int(n_surface),
            embedding=embedding,
            **kind,
        )

    def reader_for(self, kinds: list[str], names: list[str]) -> FrameReader:
        """Read the frames of colliders of these shapes and names from now on."""
        self.reader = FrameReader(
            kinds, names, plane_radius=self.plane_radius, reference_frame=self.reference_frame
        )
        return self.reader

    def inputs(self, now: Reading | TrackRow) -> FrameInputs:
        if isinstance(now, TrackRow):
            return now.track.inputs(now.k, pins_local=self.pins_local, ground_z=self.ground_z)
        return self.reader.inputs(
            now.mats, now.boxes, now.friction, pins_local=self.pins_local, ground_z=self.ground_z
        )

    def render(self, P: np.ndarray, now: Reading | TrackRow) -> np.ndarray:
        M = now.track.object_matrix[now.k] if isinstance(now, TrackRow) else now.mats[0]
        return render_local(P, M, self.n_surface, self.embedding)


class Engine:
    """A simulator on the host's frame numbers, driven through its kind's frame adapter
    (see the module docstring).

    Parameters
    ----------
    sim : a :class:`.protocol.Simulator` (reset to rest here)
    adapter : the kind's :class:`FrameAdapter`
    frame_start : the frame that shows the rest state
    key : what the kept frames depend on (the host compares it to start over)
    max_frames : frames kept in memory at most

    Its :attr:`timeline` (:class:`.timeline.Timeline`) keeps the simulated frames.
    """

    def __init__(
        self, sim, adapter: FrameAdapter, frame_start: int, *, key=None, max_frames: int = 10000
    ):
        self.sim, self.adapter, self.key = sim, adapter, key
        self.timeline = Timeline(sim, frame_start, max_frames=max_frames)
        self._now: tuple | None = None  # (now, its inputs): one conversion a frame

    @property
    def step_seconds(self) -> list[float]:
        """Wall time of every step taken, seconds."""
        return self.timeline.step_seconds

    def _inputs(self, now) -> FrameInputs:
        if self._now is None or self._now[0] is not now:
            self._now = (now, self.adapter.inputs(now))
        return self._now[1]

    def frames_needed(self, frame: int, now, *, pokes: Sequence[Poke] = ()) -> range:
        """The earlier frames :meth:`frame` will step on the way to ``frame`` (``now``: its
        data), whose data the host reads and passes as ``earlier``; empty when none."""
        return self.timeline.missing(frame, self._inputs(now), pokes=pokes)

    def positions(
        self, frame: int, now, earlier: Sequence | None = None, *, pokes: Sequence[Poke] = ()
    ) -> np.ndarray:
        """(n, 3) world positions of the simulated nodes at ``frame`` (``earlier``: the data
        of the frames :meth:`frames_needed` named, in order; None: they are ``now``'s)."""
        inputs = self._inputs(now)
        self._now = None
        before = None if earlier is None else [self.adapter.inputs(e) for e in earlier]
        return self.timeline.positions_at(frame, inputs, pokes=pokes, earlier=before)

    def frame(
        self, frame: int, now, earlier: Sequence | None = None, *, pokes: Sequence[Poke] = ()
    ) -> np.ndarray:
        """The render mesh's local positions at ``frame``: :meth:`positions` through the
        adapter."""
        return self.adapter.render(self.positions(frame, now, earlier, pokes=pokes), now)

    def reset(self) -> None:
        """Forget every simulated frame; the start frame is the rest state."""
        self.timeline.reset()

    def swap_mesh(self, frame: int, X: np.ndarray, T: np.ndarray, pinned=None):
        """Continue on another mesh (:meth:`.timeline.Timeline.swap_mesh`)."""
        return self.timeline.swap_mesh(frame, X, T, pinned)
