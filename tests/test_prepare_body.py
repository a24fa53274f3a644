"""A body prepared for baking in one call (core/prepare.py): the README's cage route drops a
1 m ball whose render surface, not its cage, lands on the floor; the add-on's bake job
prepares an embedded body through the same call, with the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from neural_rom.core import bake
from neural_rom.core.bake import setup_scenario
from neural_rom.core.bake.prepare import prepare_body
from neural_rom.core.data import cache
from neural_rom.core.errors import MeshError
from neural_rom.core.geometry import cage, mesher, surface
from neural_rom.core.physics import fem

from .blender_fixtures import addon, blend_file  # noqa: F401 (pytest fixtures)

RUBBER = fem.Material.preset("rubber")
FRAMES = 24  # the drop lands by frame 9 and rests from frame 14


@pytest.fixture(scope="module")
def cage_ball():
    """The README's cage route: a 1 m icosphere (its block's V, F) in a resolution-8 cage."""
    V, F = surface.icosphere(radius=0.5, subdivisions=2)
    tets, emb = cage.tetrahedralize_embedded(V, F, resolution=8)
    return V, F, tets, emb


@pytest.fixture(scope="module")
def prepared(cage_ball):
    V, F, tets, emb = cage_ball
    return prepare_body(tets, RUBBER, emb, F)


def _rest_gaps(tets, emb, spec, folder):
    """Bake ``spec``'s gravity drop; (lowest render point above the scenario's ground per
    frame, m) of each variant, (frames+1,) each."""
    ground = setup_scenario(tets.X, tets.T, bake.variant_spec(spec, 0))[1].ground_z
    out = []
    for path in bake.bake_variants(tets, spec, folder, "drop"):
        P = np.asarray(cache.BakeCache.open(path).channel("positions"))
        out.append(emb.apply(P)[..., 2].min(1) - ground)
    return out


def test_the_readme_cage_route_lands_the_render_surface_on_the_floor(cage_ball, prepared, tmp_path):
    """Before prepare_body, the README's cage route baked with the cage's material and the
    cage touching the ground: the ground went under the cage, 187.5 mm below the ball (a
    voxel of 125 mm plus the padding), and the ball came to rest 184.2-186.1 mm above the
    floor (seeds 1, 2; frames 14-24). Prepared, the render surface touches the ground, which
    lies under it: the ball lands by frame 9 and rests 0.16-0.46 mm into the floor (frames
    14-24, six variants of seeds 1, 3, 5), its deepest frame of the impact 0.9-1.2 mm: the
    penalty's sinking, which the bake sizes to at most about 2 mm on impact
    (``colliders.penalty_stiffness``). Margins: within 3 mm of the floor at rest and on
    impact; 150 mm for the cage's offset before."""
    V, F, tets, emb = cage_ball
    spec = bake.BakeSpec(**prepared.spec_fields(), frames=FRAMES, seed=1, variants=2)
    for gaps in _rest_gaps(tets, emb, spec, tmp_path / "prepared"):
        assert gaps[0] > 0.3, "the drop starts above the floor"
        rest = gaps[14:]
        assert np.all(np.abs(rest) < 3e-3), f"render surface at rest {1e3 * rest} mm off the floor"
        assert gaps.min() > -3e-3, "the impact sinks less than 3 mm"
    # the route as it was: the cage's material, the cage's bottom on the ground
    old = bake.BakeSpec(material=RUBBER.to_dict(), frames=FRAMES, seed=1)
    (gaps,) = _rest_gaps(tets, emb, old, tmp_path / "cage")
    assert np.all(gaps[14:] > 0.15), "without prepare_body the cage holds the ball up"


def test_a_prepared_cage_weighs_the_ball_and_a_direct_mesh_is_as_given(cage_ball, prepared):
    """The cage's tets weigh what the ball fills (not the cage's padding) and its render
    vertices carry that mass as contact points; a tet mesh that is the object keeps its
    material and its boundary vertices (contact None)."""
    V, F, tets, emb = cage_ball
    body = prepared
    assert body.mesh is tets and body.fill.shape == (tets.n_elements,)
    mass = fem.mass_matrix(tets.X, tets.T, body.material.density).sum()
    ball = surface.enclosed_volume(V, F) * float(RUBBER.density)
    assert mass == pytest.approx(ball, rel=0.02)  # the void floor adds 1e-3 of the padding
    # the whole cage weighs 3.7 times the ball (2078 kg against 557)
    assert fem.mass_matrix(tets.X, tets.T, float(RUBBER.density)).sum() > 3 * mass
    assert body.contact.mass.sum() == pytest.approx(mass, rel=1e-12)
    np.testing.assert_allclose(body.contact.positions(tets.X), V, atol=1e-12)
    fields = body.spec_fields()
    assert len(fields["material"]["density"]) == tets.n_elements
    assert len(fields["contact"]["nodes"]) == len(V)

    direct = mesher.tetrahedralize(V, F, target_edge_length=0.3)
    plain = prepare_body(direct, RUBBER)
    assert plain.material is RUBBER and plain.contact is None and plain.fill is None
    assert plain.spec_fields() == {"material": RUBBER.to_dict(), "contact": None}


def test_an_embedding_without_its_faces_or_of_another_mesh_is_refused(cage_ball):
    V, F, tets, emb = cage_ball
    with pytest.raises(MeshError, match="render_faces"):
        prepare_body(tets, RUBBER, emb)
    other = mesher.tetrahedralize(V, F, target_edge_length=0.3)
    with pytest.raises(MeshError, match="Re-embed the render mesh"):
        prepare_body(other, RUBBER, emb, F)


def test_the_add_on_bake_job_prepares_the_body_through_core(addon, blend_file):
    """The add-on's bake job (the Bake button, the command line's ``bake``) holds what
    prepare_body makes of the world tets it writes, the object's material, its embedding
    and its triangles, to the bit: a closed render mesh (per-tet material) and an open one
    (Suzanne: the cage's material, the render surface's contact points)."""
    bpy = addon.bpy
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds.fem.bake import make_bake_job
    from neural_rom.addon.kinds.fem.tets import load_tets, tetrahedralize_object
    from neural_rom.core.data import meshfile

    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0.3, -0.2, 1.5))
    ball = bpy.context.object
    ball.rotation_euler, ball.scale = (0.3, 0.2, 0.1), (1.2, 1.2, 1.2)
    bpy.ops.mesh.primitive_monkey_add(location=(2.0, 0.0, 1.0))
    monkey = bpy.context.object
    bpy.context.view_layer.update()
    for obj, per_tet in ((ball, True), (monkey, False)):
        s = obj.neural_rom
        s.role, s.embedding, s.cage_resolution, s.frames = "DEFORMABLE", "ALWAYS", 6, 2
        s.tet_size = 0.6  # the cage's own tets: a few hundred
        tetrahedralize_object(obj)
        job = make_bake_job(obj, bpy.context.scene)
        world = meshfile.read_tetmesh(job["mesh"])
        faces = bm.surface(obj, world=False)[1]
        material = fem.Material(**s.material_values())
        expect = prepare_body(world, material, load_tets(obj).embedding, faces).spec_fields()
        assert isinstance(job["spec"]["material"]["density"], list) is per_tet
        assert job["spec"]["material"] == expect["material"]
        got, want = job["spec"]["contact"], expect["contact"]
        assert got.keys() == want.keys() and len(got["nodes"]) == len(bm.surface(obj)[0])
        for key in want:
            np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]))
