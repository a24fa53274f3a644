"""Pure-Python parts of the reduced-simulation frame driver (no bpy): the in-memory
frame cache that makes the timeline scrubbable, and the force of an interactive poke.

:class:`FrameCache` works like Blender's point cache, in memory: every simulated frame
keeps the simulator state and the deformed positions, so jumping back restores a frame
without simulating, and jumping forward simulates only from the last cached frame before
the target. Each frame also keeps a digest of the inputs it was simulated with
(colliders, pokes): a frame whose inputs changed since is stale, and so is every frame
after it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass
class CachedFrame:
    """One simulated frame: simulator state, (n, 3) tet-node positions (m, world) and
    the digest of the inputs that produced it."""

    state: dict
    positions: np.ndarray
    inputs: str = ""


class FrameCache:
    """Simulated frames of one object, by scene frame.

    Parameters
    ----------
    key : anything comparable
        What the cached frames depend on (model file, material, start frame, ...); a
        driver compares it with :meth:`matches` and invalidates on a change.
    max_frames : int
        Frames kept at most; the ones farthest from the newest write go first.
    """

    def __init__(self, key=None, max_frames: int = 10000):
        self.key = key
        self.max_frames = int(max_frames)
        self._frames: dict[int, CachedFrame] = {}

    def __len__(self) -> int:
        return len(self._frames)

    def __contains__(self, frame: int) -> bool:
        return int(frame) in self._frames

    @property
    def frames(self) -> list[int]:
        return sorted(self._frames)

    def matches(self, key) -> bool:
        return self.key == key

    def get(self, frame: int) -> CachedFrame | None:
        return self._frames.get(int(frame))

    def put(self, frame: int, state: dict, positions: np.ndarray, inputs: str = "") -> None:
        """Keep frame ``frame`` (copies of the state's arrays and of the positions)."""
        frame = int(frame)
        state = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
        self._frames[frame] = CachedFrame(state, np.array(positions, dtype=np.float64), inputs)
        if len(self._frames) > self.max_frames:
            far = sorted(self._frames, key=lambda f: abs(f - frame), reverse=True)
            for f in far[: len(self._frames) - self.max_frames]:
                del self._frames[f]

    def latest_at_or_before(self, frame: int) -> int | None:
        """The newest cached frame ``<= frame`` (None when there is none)."""
        earlier = [f for f in self._frames if f <= frame]
        return max(earlier) if earlier else None

    def invalidate(self, from_frame: int | None = None, key=None) -> None:
        """Forget every frame (``from_frame`` None) or the frames ``>= from_frame``;
        with ``key``, the cache belongs to that key afterwards."""
        if from_frame is None:
            self._frames.clear()
        else:
            for f in [f for f in self._frames if f >= from_frame]:
                del self._frames[f]
        if key is not None:
            self.key = key


def inputs_digest(*arrays) -> str:
    """A short digest of a frame's inputs (collider transforms, forces; None allowed)."""
    h = hashlib.sha1()
    for a in arrays:
        if a is None:
            h.update(b"-")
            continue
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def poke_weights(X: np.ndarray, centre: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Vertices a poke grabs and their weights.

    Parameters
    ----------
    X : (n, 3) float array
        Vertex positions when the poke starts, metres.
    centre : (3,) float array
        The clicked point, metres.
    radius : float
        Reach of the poke, metres (> 0).

    Returns
    -------
    idx : (g,) int array
        Grabbed vertices (within ``radius``; the nearest vertex when none is).
    w : (g,) float array
        Smooth falloff ``(1 - (d/r)^2)^2``, normalized to sum to 1.
    """
    X = np.asarray(X, dtype=np.float64)
    centre = np.asarray(centre, dtype=np.float64).reshape(3)
    if not radius > 0:
        raise ValueError(f"poke radius must be positive, got {radius}")
    d = np.linalg.norm(X - centre, axis=1)
    idx = np.flatnonzero(d < radius)
    if idx.size == 0:
        idx = np.array([int(np.argmin(d))])
        w = np.ones(1)
    else:
        w = (1.0 - (d[idx] / radius) ** 2) ** 2
        w = np.maximum(w, 1e-12)
    return idx, w / w.sum()


def poke_forces(
    X: np.ndarray,
    idx: np.ndarray,
    w: np.ndarray,
    target: np.ndarray,
    stiffness: float,
    max_force: float | None = None,
) -> np.ndarray:
    """Forces of a spring pulling the grabbed region towards ``target``.

    The grabbed point is the weighted mean ``p = sum_i w_i x_i`` of the grabbed vertices;
    the spring force ``F = stiffness (target - p)`` (clamped to ``max_force`` N) is spread
    over them by weight, ``f_i = w_i F``, so the total force is ``F`` whatever the mesh
    resolution.

    Parameters
    ----------
    X : (n, 3) float array
        Current vertex positions, metres.
    idx, w : from :func:`poke_weights` (``w`` sums to 1)
    target : (3,) float array
        Where the mouse drags the grabbed point, metres.
    stiffness : float
        Spring stiffness, N/m.
    max_force : float or None
        Largest total force, N.

    Returns
    -------
    (n, 3) float array of forces, newtons (zero off the grabbed vertices).
    """
    X = np.asarray(X, dtype=np.float64)
    p = w @ X[idx]
    F = float(stiffness) * (np.asarray(target, dtype=np.float64).reshape(3) - p)
    if max_force is not None:
        norm = float(np.linalg.norm(F))
        if norm > max_force > 0:
            F *= max_force / norm
    f = np.zeros_like(X)
    f[idx] = w[:, None] * F
    return f
