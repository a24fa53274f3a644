"""A body prepared for baking in one call: its tet mesh, its material and the points that
touch colliders.

A tet mesh that *is* the object bakes as it is: its material everywhere, its boundary
vertices touch colliders. An object simulated through an embedding cage
(:func:`.cage.tetrahedralize_embedded`) needs three more steps, which the add-on's bake, the
command line and the Python API all take through :func:`prepare_body`:

1. the fraction of each cage tet that the render mesh fills (:func:`.cage.fill_fractions`),
2. the cage's material scaled by it (:func:`.cage.embedded_material`): the padding carries
   no mass or stiffness, so the body weighs what the render mesh holds, not the cage
   (a 1 m ball's resolution-4 cage weighs 8.2 times the ball, its resolution-8 one 3.7),
3. the render surface's vertices as the contact points (:meth:`.Embedding.contact_points`),
   carrying that mass by area: the render surface rests on a ground, not the cage, whose
   bottom lies a voxel or more below it (the scenario's ground goes under the render
   surface too, :attr:`.scenarios.SceneContext.bottom_z`).

Without them a 1 m ball in a resolution-8 cage, dropped on the floor, comes to rest with its
render surface 184 mm above it (the cage's bottom on it); prepared, 0.2-0.5 mm into it, the
penalty's sinking (tests/test_prepare_body.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import MeshError
from ..geometry.cage import embedded_material, fill_fractions
from ..geometry.embedding import Embedding
from ..geometry.tetmesh import TetMesh
from ..physics.colliders import ContactPoints
from ..physics.fem import Material, mass_matrix

__all__ = ["PreparedBody", "prepare_body"]


@dataclass(frozen=True, eq=False)
class PreparedBody:
    """A body ready to bake (:func:`prepare_body`).

    Attributes
    ----------
    mesh : TetMesh
        The tets the bake simulates (metres), as given.
    material : fem.Material
        The material the bake uses: per tet (density and Young's modulus scaled by
        :attr:`fill`) for a closed render mesh in a cage, else the one given.
    contact : ContactPoints or None
        The points that touch colliders: the render surface's for an embedded body, None
        for a tet mesh that is the object (its boundary vertices,
        :meth:`.bake.BakeSpec.contact_points`).
    fill : (m,) float array or None
        The fraction of each tet inside the render mesh; None without an embedding or for
        an open render mesh (no inside: it keeps the whole cage's material).
    """

    mesh: TetMesh
    material: Material
    contact: ContactPoints | None = None
    fill: np.ndarray | None = None

    def spec_fields(self) -> dict:
        """``material`` and ``contact`` for :class:`.bake.BakeSpec` (JSON-able):
        ``BakeSpec(**body.spec_fields(), frames=48, ...)``."""
        return {
            "material": self.material.to_dict(),
            "contact": None if self.contact is None else self.contact.to_dict(),
        }


def prepare_body(
    mesh: TetMesh,
    material: Material,
    embedding: Embedding | None = None,
    render_faces=None,
) -> PreparedBody:
    """Prepare a body for baking: the material its tets carry and the points that touch
    colliders (the module docstring lists the steps).

    Parameters
    ----------
    mesh : TetMesh
        The tets to bake, at rest, in the space the bake runs in (metres; the add-on's
        world space).
    material : fem.Material
        The object's material (one value, or one per tet).
    embedding : Embedding, optional
        The render mesh's vertices carried by ``mesh`` (a cage's,
        :func:`.cage.tetrahedralize_embedded`); None when ``mesh`` is the object itself.
    render_faces : (k, 3) int array
        The render mesh's triangles (indices into the embedded vertices); required with
        ``embedding``.

    Returns
    -------
    PreparedBody

    Raises
    ------
    MeshError
        An embedding without its render faces, or one that belongs to another tet mesh.
    MaterialError
        A per-tet material of another length than ``mesh``'s tets (an embedded body).
    """
    if embedding is None:
        return PreparedBody(mesh, material)
    if render_faces is None:
        raise MeshError(
            "An embedded body needs its render mesh's triangles (render_faces): the render "
            "surface, not the cage, touches colliders. Pass the faces the embedding's "
            "vertices were embedded with."
        )
    if embedding.n_nodes != mesh.n_vertices:
        raise MeshError(
            f"The embedding is carried by {embedding.n_nodes} tet nodes but the tet mesh has "
            f"{mesh.n_vertices}: it belongs to another tet mesh. Re-embed the render mesh "
            "(cage.tetrahedralize_embedded)."
        )
    # the cage's padding carries no mass or stiffness: only the render mesh's inside (an
    # open render mesh has no inside and keeps the whole cage's)
    fill = fill_fractions(mesh, embedding.apply(mesh.X), render_faces)
    if fill is not None:
        material = embedded_material(material, fill)
    mass = mass_matrix(mesh.X, mesh.T, material.density, lumped=True)
    contact = embedding.contact_points(render_faces, mesh, mass)
    return PreparedBody(mesh, material, contact, fill)
