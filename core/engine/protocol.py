"""The one protocol every simulator follows, so Blender has one driver for all of them.

A simulator (full space, a subspace runtime, a learned one) has:

* ``frame`` — frames stepped since the last reset;
* ``rest_positions()`` and ``positions()`` — (n, 3) world positions, metres;
* ``reset()`` — back to rest at frame 0;
* ``step(inputs)`` — one frame driven by :class:`core.sim.FrameInputs` (forces, pin targets,
  colliders, latent sliders, markers, a driving reference frame: each method takes the ones
  its registry record lists, ignores the others and refuses a frame that lacks one it needs);
* ``get_state()`` / ``set_state(state)`` — a state that restores bit-identically (scrubbing,
  frame caches). ``get_state`` returns fresh arrays (copies, never the simulator's own),
  which the caller may keep as they are: the frame cache keeps them without copying again,
  so a later step must not change a state handed out; nor may a simulator write into a
  state given to ``set_state`` (the cache hands the same state to it again and again);
* ``start_from(x, v, forces)`` — the closest state to a full-space state (comparing with a
  bake that starts moved or moving); a model that can only start at rest says so;
* ``closest_shape(x)`` — the model's closest shape to a pose: what it can represent at
  best, against which a rollout's error tells shapes from dynamics.

:class:`SimulatorBase` gives the defaults a model without a better answer can use.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import SimulationError
from ..physics.sim import FrameInputs, StepReport


@runtime_checkable
class Simulator(Protocol):
    """The protocol Blender's frame driver and the comparison use for every model."""

    frame: int

    def rest_positions(self) -> np.ndarray: ...

    def positions(self) -> np.ndarray: ...

    def reset(self) -> None: ...

    def step(self, inputs: FrameInputs | None = None) -> StepReport: ...

    def get_state(self) -> dict: ...

    def set_state(self, state: dict) -> None: ...

    def start_from(
        self, x: np.ndarray, v: np.ndarray, forces: np.ndarray | None = None
    ) -> None: ...

    def closest_shape(self, x: np.ndarray) -> np.ndarray: ...


class SimulatorBase:
    """Defaults for :class:`Simulator` methods a model may not do better."""

    def start_from(self, x: np.ndarray, v: np.ndarray, forces: np.ndarray | None = None) -> None:
        """Reset to rest; refuse a start state that is not the rest state at rest."""
        self.reset()
        rest = np.asarray(self.rest_positions(), dtype=np.float64)
        scale = float(np.linalg.norm(rest.max(0) - rest.min(0))) or 1.0
        x, v = np.asarray(x, dtype=np.float64), np.asarray(v, dtype=np.float64)
        if np.abs(x - rest).max() > 1e-9 * scale or np.abs(v).max() > 0:
            raise SimulationError(
                "This model can only start at rest, but the bake starts moved or moving; "
                "compare it with a bake whose scenario starts at rest."
            )
