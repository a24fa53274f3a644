"""One model of a poke: a force on a region of the body, spread by weight.

A poke grabs the vertices within ``radius`` of a centre, with weights ``w`` that sum to 1,
and applies a total force ``F`` spread by weight, ``f_i = w_i F``, so the total is ``F``
whatever the mesh resolution. Two choices make the two pokes of the extension:

* the weights: a smooth falloff ``(1 - (d/r)^2)^2`` (a hand that grabs harder at its
  centre: the interactive poke of the viewport), or proportional to the vertex masses (a
  load that gives the region one acceleration: the scripted pokes of the ``random_pokes``
  training scenario, Shen et al. 2021, section 6.1);
* the total force: a spring ``F = k (target - p)`` from the region's weighted centre
  ``p = sum_i w_i x_i`` to where the mouse drags it, clamped to a largest force
  (interactive, :func:`spring_force`), or a prescribed ``F(t)`` (scripted: a sin^2 pulse of
  a given magnitude along a random direction, :mod:`.scenarios`).

:class:`Poke` is the interactive one as the frame driver keeps it; :func:`share` and
:func:`spread` turn any total force (or a series of them) into per-vertex forces.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


def poke_weights(
    X: np.ndarray,
    centre: np.ndarray,
    radius: float,
    *,
    candidates: np.ndarray | None = None,
    mass: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Vertices a poke grabs and their weights.

    Parameters
    ----------
    X : (n, 3) float array
        Vertex positions when the poke starts, metres.
    centre : (3,) float array
        The poked point, metres.
    radius : float
        Reach of the poke, metres (> 0).
    candidates : (c,) int array, optional
        Vertices that may be grabbed (for example the surface); default all.
    mass : (n,) float array, optional
        Vertex masses, kg: the weights are proportional to them instead of the smooth
        falloff.

    Returns
    -------
    idx : (g,) int array
        Grabbed vertices (within ``radius``; the nearest candidate when none is).
    w : (g,) float array
        Weights summing to 1: ``(1 - (d/r)^2)^2`` normalized, or ``mass[idx]`` normalized.
    """
    X = np.asarray(X, dtype=np.float64)
    centre = np.asarray(centre, dtype=np.float64).reshape(3)
    if not radius > 0:
        raise ValueError(f"poke radius must be positive, got {radius}")
    pool = np.arange(len(X)) if candidates is None else np.asarray(candidates, dtype=np.int64)
    d = np.linalg.norm(X[pool] - centre, axis=1)
    inside = np.flatnonzero(d < radius)
    if inside.size == 0:
        idx = pool[[int(np.argmin(d))]]
        return idx, np.ones(1)
    idx = pool[inside]
    if mass is not None:
        w = np.asarray(mass, dtype=np.float64)[idx]
    else:
        w = np.maximum((1.0 - (d[inside] / radius) ** 2) ** 2, 1e-12)
    return idx, w / w.sum()


def spring_force(
    X: np.ndarray,
    idx: np.ndarray,
    w: np.ndarray,
    target: np.ndarray,
    stiffness: float,
    max_force: float | None = None,
) -> np.ndarray:
    """(3,) total force of a spring pulling the grabbed region's weighted centre
    ``p = sum_i w_i x_i`` towards ``target``: ``stiffness (target - p)``, newtons, clamped
    to ``max_force`` N when given."""
    p = np.asarray(w) @ np.asarray(X, dtype=np.float64)[idx]
    F = float(stiffness) * (np.asarray(target, dtype=np.float64).reshape(3) - p)
    if max_force is not None:
        norm = float(np.linalg.norm(F))
        if norm > max_force > 0:
            F *= max_force / norm
    return F


def share(w: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Each grabbed vertex's share ``f_i = w_i F`` of a total force: (g, 3), or
    (frames, g, 3) for a (frames, 3) series of ``F``, newtons."""
    F = np.asarray(F, dtype=np.float64)
    return np.asarray(w)[:, None] * F[..., None, :]


def spread(n: int, idx: np.ndarray, w: np.ndarray, F: np.ndarray) -> np.ndarray:
    """Per-vertex forces ``f_i = w_i F`` of a total force ``F`` on the grabbed vertices.

    Parameters
    ----------
    n : number of vertices.
    idx, w : (g,) grabbed vertices and their weights (from :func:`poke_weights`).
    F : (3,) or (frames, 3) float array
        Total force, newtons (one per frame for a series).

    Returns
    -------
    (n, 3) or (frames, n, 3) float array, newtons (zero off the grabbed vertices).
    """
    F = np.asarray(F, dtype=np.float64)
    f = np.zeros((*F.shape[:-1], n, 3))
    f[..., idx, :] = share(w, F)
    return f


def poke_forces(
    X: np.ndarray,
    idx: np.ndarray,
    w: np.ndarray,
    target: np.ndarray,
    stiffness: float,
    max_force: float | None = None,
) -> np.ndarray:
    """(n, 3) forces (N) of a spring poke on vertices at ``X`` (m): :func:`spring_force`
    spread by weight, so the total force is the spring's whatever the mesh resolution."""
    F = spring_force(X, idx, w, target, stiffness, max_force)
    return spread(len(X), idx, w, F)


class Poke(NamedTuple):
    """An interactive poke: grabbed vertices ``idx`` with weights ``w`` (sum 1), pulled by
    a spring of ``stiffness`` N/m towards ``target`` (3,) m, at most ``max_force`` N."""

    idx: np.ndarray
    w: np.ndarray
    target: np.ndarray
    stiffness: float
    max_force: float | None = None

    def forces(self, X: np.ndarray) -> np.ndarray:
        """(n, 3) forces, newtons, on vertices at ``X`` (n, 3) m."""
        return poke_forces(X, self.idx, self.w, self.target, self.stiffness, self.max_force)
