"""The one protocol every simulator follows, so Blender has one driver for all of them, and
what goes in and out of a frame: :class:`FrameInputs` (with :class:`Markers`) and
:class:`StepReport` (``core.sim`` re-exports the three, its old home).

A simulator (full space, a subspace runtime, a learned one) has:

* ``frame`` — frames stepped since the last reset;
* ``rest_positions()`` and ``positions()`` — (n, 3) world positions, metres;
* ``reset()`` — back to rest at frame 0;
* ``step(inputs)`` — one frame driven by :class:`FrameInputs` (forces, pin targets,
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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..errors import SimulationError

if TYPE_CHECKING:
    from ..physics.colliders import Collider


@dataclass
class FrameInputs:
    """What drives one frame.

    Attributes
    ----------
    forces : (n, 3) float array or None
        External force per vertex at the end of the frame, newtons.
    pin_targets : (k, 3) float array or None
        Positions of the pinned vertices at the end of the frame, metres; None keeps them.
    colliders : list of Collider or None
        Colliders at the end of the frame; None keeps the previous ones.
    sliders : (r,) float array or None
        Latent slider values (methods with a latent space an artist drives directly).
    markers : Markers or None
        Marker targets for inverse control (positions and weights).
    reference_frame : (4, 4) float array or None
        The driving reference frame at the end of the frame (an object's or a bone's
        world matrix, metres); methods that simulate relative to a moving frame take it.

    A method ignores an input it does not take and refuses a frame that lacks one it needs
    (its registry record lists both: :func:`core.registry.check_inputs`).
    """

    forces: np.ndarray | None = None
    pin_targets: np.ndarray | None = None
    colliders: list[Collider] | None = None
    sliders: np.ndarray | None = None
    markers: Markers | None = None
    reference_frame: np.ndarray | None = None


@dataclass
class Markers:
    """Marker targets of one frame: where chosen points of the body should be.

    Attributes
    ----------
    vertices : (p,) int array
        Vertices (of the simulated mesh) the markers are attached to.
    positions : (p, 3) float array
        Target world positions, metres.
    weights : (p,) float array
        Relative importance of each marker (>= 0).
    """

    vertices: np.ndarray
    positions: np.ndarray
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.vertices = np.asarray(self.vertices, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(self.positions, dtype=np.float64).reshape(-1, 3)
        p = len(self.vertices)
        self.weights = (
            np.ones(p) if self.weights is None else np.asarray(self.weights, float).reshape(-1)
        )
        if len(self.positions) != p or len(self.weights) != p:
            raise SimulationError(
                f"Markers need one position and one weight per vertex; got {p} vertices, "
                f"{len(self.positions)} positions and {len(self.weights)} weights."
            )
        if np.any(self.weights < 0) or not np.all(np.isfinite(self.positions)):
            raise SimulationError("Marker weights must be >= 0 and positions finite.")


@dataclass
class StepReport:
    """What a step did.

    Attributes
    ----------
    newton_iters : int
        Newton iterations (linear solves).
    substeps : int
        Backward Euler steps tried, failed ones included.
    retries : int
        Times a step was split because it failed.
    converged, line_search_ok : bool
    residual : float
        Last Newton step, a fraction of the rest bounding-box diagonal (largest over the
        substeps).
    force_residual : float
        Full space: the largest unbalanced force on a free vertex at the accepted positions,
        a fraction of that vertex's weight ``m_i |gravity|`` (largest over the substeps).
    cg_iterations, setups : int
        Full space: CG iterations, and AMG hierarchies or factorizations built.
    timings : dict
        Seconds: ``derivatives`` (energy, gradient, Hessian), ``solve`` (linear solves, of
        which ``setup`` builds preconditioners and ``cg`` iterates), ``line_search``.
    wall_time : float
        Seconds for the whole step.
    """

    newton_iters: int = 0
    substeps: int = 0
    retries: int = 0
    converged: bool = True
    residual: float = 0.0
    force_residual: float = 0.0
    line_search_ok: bool = True
    cg_iterations: int = 0
    setups: int = 0
    timings: dict = field(
        default_factory=lambda: {"derivatives": 0.0, "solve": 0.0, "line_search": 0.0}
    )
    wall_time: float = 0.0

    def merge(self, other: StepReport) -> None:
        self.newton_iters += other.newton_iters
        self.substeps += other.substeps
        self.retries += other.retries
        self.cg_iterations += other.cg_iterations
        self.setups += other.setups
        self.converged &= other.converged
        self.line_search_ok &= other.line_search_ok
        self.residual = max(self.residual, other.residual)
        self.force_residual = max(self.force_residual, other.force_residual)
        for k, v in other.timings.items():
            self.timings[k] = self.timings.get(k, 0.0) + v


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
