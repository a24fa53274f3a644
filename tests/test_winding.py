"""Inside/outside by generalized winding numbers (core/winding.py): the cases a ray's crossing
count gets wrong (points on mirror planes, over a pole where many triangles meet), the cluster
tree against the exact sum, open meshes, and a symmetric head whose skull sits on the mirror
plane setting up."""

import numpy as np
import pytest
from neural_rom.core.geometry.cage import inside_render_mesh
from neural_rom.core.geometry.surface import icosphere
from neural_rom.core.geometry.winding import AMBIGUOUS, inside_mesh, winding_numbers
from neural_rom.core.kinds.face.rig import face_rig


def uv_sphere(radius=0.1, segments=32, rings=16, center=(0, 0, 0), scale=(1, 1, 1)):
    """Blender's UV sphere: poles on z, a vertex ring every 360/segments deg (so vertices and
    edges lie on the planes x = 0 and y = 0), outward quads split into triangles."""
    th = np.linspace(0, np.pi, rings + 1)[1:-1]
    ph = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    T, P = np.meshgrid(th, ph, indexing="ij")
    V = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1).reshape(-1, 3)
    V = np.vstack([[0, 0, 1], V, [0, 0, -1]])
    n, F = segments, []
    ring = lambda r, s: 1 + r * n + s % n  # noqa: E731
    for s in range(n):
        F.append([0, ring(0, s), ring(0, s + 1)])
        F.append([len(V) - 1, ring(rings - 2, s + 1), ring(rings - 2, s)])
        for r in range(rings - 2):
            a, b, c, d = ring(r, s), ring(r + 1, s), ring(r + 1, s + 1), ring(r, s + 1)
            F += [[a, b, c], [a, c, d]]
    return V * radius * np.asarray(scale) + np.asarray(center), np.array(F)


def test_icosphere_inside_a_uv_sphere_on_the_mirror_planes():
    # the case: the axis rays miscounted 8 of 162 vertices and the origin
    V, F = uv_sphere(0.1)
    Q, _ = icosphere(0.05, 2)
    assert len(Q) == 162 and np.sum(np.abs(Q) < 1e-12) > 0  # vertices on the mirror planes
    P = np.vstack([Q, [[0, 0, 0]]])
    np.testing.assert_allclose(winding_numbers(P, V, F, exact=True), 1.0, atol=1e-12)
    assert np.all(np.abs(winding_numbers(P, V, F) - 1.0) < 0.5 * AMBIGUOUS)  # the fast sum
    assert inside_render_mesh(P, V, F).all()
    # points on the mirror planes outside it, and on the planes through its poles
    out = np.array([[0, 0, 0.15], [0, 0.2, 0], [0.101, 0, 0], [0, 0, -0.1001]])
    assert not inside_mesh(out, V, F).any()
    # every point of a grid whose lines lie on the mirror planes, against the exact sphere
    # (the polygon is inside the sphere by at most 1 - cos(pi / 16) of the radius: skip there)
    g = np.linspace(-0.12, 0.12, 25)
    G = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    r = np.linalg.norm(G, axis=1)
    sure = (r < 0.1 * np.cos(np.pi / 16) - 1e-9) | (r > 0.1 + 1e-9)
    np.testing.assert_array_equal(inside_mesh(G[sure], V, F), r[sure] < 0.1)


def test_cluster_tree_agrees_with_the_exact_sum():
    V, F = uv_sphere(0.1, 48, 24, scale=(0.8, 1.0, 1.2))
    rng = np.random.default_rng(3)
    P = rng.uniform(-0.13, 0.13, (3000, 3))
    fast = winding_numbers(P, V, F)
    exact = winding_numbers(P, V, F, exact=True)
    err = np.abs(fast - exact)
    print(f"\n{len(F)} triangles: cluster tree vs exact, max |w| error {err.max():.3g}")
    # the dipole term's error stays well under the band that is summed exactly
    assert err.max() < 0.5 * AMBIGUOUS
    np.testing.assert_array_equal(fast > 0.5, exact > 0.5)
    np.testing.assert_allclose(exact, np.round(exact), atol=1e-9)  # closed: 0 or 1


def test_open_mesh_degrades_gracefully():
    # a sphere with a hole (its top cap gone): still 1 deep inside, 0 far outside, and
    # between the two only near the hole
    V, F = uv_sphere(0.1)
    top = np.all(V[F][:, :, 2] > 0.09, axis=1)
    w = winding_numbers([[0, 0, -0.05], [0, 0, 0.0], [0, 0, 0.3], [0.3, 0, 0]], V, F[~top])
    assert w[0] > 0.95 and w[1] > 0.9 and abs(w[2]) < 0.05 and abs(w[3]) < 0.01


def test_reversed_orientation_is_minus_one():
    V, F = icosphere(1.0, 2)
    w = winding_numbers([[0, 0, 0], [0.5, 0.2, 0.1]], V, F[:, ::-1], exact=True)
    np.testing.assert_allclose(w, -1.0, atol=1e-12)


@pytest.mark.parametrize("shift", [0.0, 1e-4])
def test_symmetric_head_with_the_skull_on_the_mirror_plane_sets_up(shift):
    # UV spheres modelled symmetric about x = 0, as artists do: the skull's vertices on the
    # mirror plane must count as inside the skin (the refusal), moved or not
    skin = uv_sphere(0.1, scale=(0.7, 0.95, 1.0))
    skull = uv_sphere(0.1, 16, 8, center=(shift, 0.005, 0.03), scale=(0.5, 0.6, 0.5))
    jaw = uv_sphere(0.1, 16, 8, center=(0, -0.01, -0.06), scale=(0.4, 0.45, 0.15))
    rig = face_rig(skin, skull, jaw, jaw_pivot=(0, 0.03, -0.045), jaw_axis=(1, 0, 0),
                   spacing=0.02)  # fmt: skip
    assert len(rig.fixed) > 0 and len(rig.jaw_nodes) > 0 and rig.skin.n_outside == 0
    # the lattice nodes sorted into skull and jaw lie in them, and symmetric ones alike
    assert inside_mesh(rig.X[rig.fixed], *skull).all()
    assert inside_mesh(rig.X[rig.jaw_nodes], *jaw).all()
    if shift == 0.0:
        mirrored = rig.X[rig.fixed] * [-1, 1, 1]
        d = np.linalg.norm(mirrored[:, None] - rig.X[rig.fixed][None], axis=2).min(1)
        assert d.max() < 1e-9  # the skull's nodes are as symmetric as the head
