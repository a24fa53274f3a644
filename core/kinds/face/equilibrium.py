"""A face's frames on the timeline: each frame is the quasistatic equilibrium of that
frame's inputs alone (the face kind's ``stepping="equilibrium"``), solved warm from the
previous solve; a frame seen again with the same inputs is not solved again.

This is the face's counterpart of :class:`..engine.timeline.Timeline` (which steps a frame
from the one before): the host (Blender's one Driver) reads a frame's track and options,
configures the runtime for them, and calls :meth:`FaceEquilibrium.solve` once; nothing
here calls back into the host.
"""

from __future__ import annotations

import time

import numpy as np

from ...engine.track import Track
from .inputs import track_signature


class FaceEquilibrium:
    """The solved frames of one face runtime ``sim`` (an active-faces simulator), keyed by
    scene frame and checked against the frame's inputs.

    ``step_seconds`` lists the time of each solve (a cached frame adds none).
    """

    def __init__(self, sim):
        self.sim = sim
        self.cache: dict[int, tuple] = {}
        self.step_seconds: list[float] = []

    def reset(self) -> None:
        """Forget every solved frame and put the runtime back at rest."""
        self.cache.clear()
        self.sim.reset()

    def solve(
        self, frame: int, track: Track, options: dict
    ) -> tuple[np.ndarray, float, np.ndarray | None]:
        """``(P, theta, head)`` at scene ``frame`` for the one-frame ``track`` and the runtime
        ``options`` (as :func:`core.jobs.face.configure_face` takes them, already applied to
        the runtime): the skin's positions (s, 3), the jaw angle the solve holds, and the
        head transform the markers solved for (``None`` unless ``options["head"]`` is
        ``"markers"``). A frame solved before with the same inputs and options is returned
        from the cache without a solve."""
        sig = track_signature(track) + repr(sorted(options.items())).encode()
        hit = self.cache.get(int(frame))
        if hit is not None and hit[0] == sig:
            return hit[1], hit[2], hit[3]
        t0 = time.perf_counter()
        self.sim.step(track.inputs(0))
        self.step_seconds.append(time.perf_counter() - t0)
        P, theta = self.sim.skin_positions(), float(self.sim.theta)
        head = self.sim.head_transform() if options.get("head") == "markers" else None
        self.cache[int(frame)] = (sig, P, theta, head)
        return P, theta, head
