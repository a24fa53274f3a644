"""The frame adapter of a cloth (:mod:`core.engine.engine`): the mesh's own vertices are the
simulated nodes (no tets, no pins), its colliders are read as its bakes recorded them, and
its rigid world matrix is the driving reference frame; no ground plane."""

from __future__ import annotations

from ...engine.engine import MeshAdapter


class ClothAdapter(MeshAdapter):
    """:class:`.engine.engine.MeshAdapter` of a cloth."""

    @classmethod
    def for_model(cls, sim, model, render_map: tuple, **kind) -> ClothAdapter:
        """The adapter of a cloth model of ``render_map[1]`` vertices (the rest is unused)."""
        return cls(n_surface=int(render_map[1]), plane_radius=None, reference_frame=True, **kind)
