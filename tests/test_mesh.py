"""Tests for the meshing modules (core.tetmesh, surface, mesher, embedding, cage, meshfile):
tetrahedralization, surface validation, cages, embedding, I/O, hashing."""

import numpy as np
import pytest
from neural_rom.core.data.files import mesh_hash
from neural_rom.core.data.meshfile import read_tetmesh, write_tetmesh
from neural_rom.core.errors import MeshError
from neural_rom.core.geometry.cage import (
    _make_manifold,
    _voxel_boundary,
    build_cage,
    tetrahedralize_embedded,
)
from neural_rom.core.geometry.embedding import Embedding, embed_points, render_positions
from neural_rom.core.geometry.mesher import tetrahedralize
from neural_rom.core.geometry.surface import (
    _box_pairs,
    _self_intersecting_pairs,
    _tri_pairs_intersect,
    box_surface,
    check_surface,
    closest_points_on_triangles,
    enclosed_volume,
    icosphere,
)
from neural_rom.core.geometry.tetmesh import TetMesh, orient_positive, regular_tet_volume

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _canon(F):
    """Faces as a set of oriented triples, rotated so the smallest index comes first."""
    F = np.asarray(F)
    r = np.argmin(F, axis=1)
    rot = np.stack([F[np.arange(len(F)), (r + i) % 3] for i in range(3)], axis=1)
    return set(map(tuple, rot.tolist()))


def _sorted_set(F):
    return set(map(tuple, np.sort(np.asarray(F), axis=1).tolist()))


def _grid_plane(n=10, size=1.0):
    u, v = np.meshgrid(np.linspace(0, size, n + 1), np.linspace(0, size, n + 1), indexing="ij")
    V = np.stack([u.ravel(), v.ravel(), 0.1 * np.sin(3 * u.ravel()) * v.ravel()], axis=1)
    idx = np.arange((n + 1) ** 2).reshape(n + 1, n + 1)
    q = np.stack([idx[:-1, :-1], idx[1:, :-1], idx[1:, 1:], idx[:-1, 1:]], -1).reshape(-1, 4)
    return V, np.concatenate([q[:, [0, 1, 2]], q[:, [0, 2, 3]]])


def _open_box():
    """A box missing its whole +z side (like a cup)."""
    V, F = box_surface(size=(1.0, 0.8, 0.6), divisions=(3, 3, 2))
    top = (V[F][:, :, 2] > 0.3 - 1e-12).all(1)
    assert top.sum() == 18
    return V, F[~top]


def _check_raises(V, F, *words):
    with pytest.raises(MeshError) as ei:
        check_surface(V, F)
    msg = str(ei.value)
    for w in words:
        assert w.lower() in msg.lower(), msg
    return msg


@pytest.fixture(scope="module")
def box():
    return box_surface(size=(1.0, 2.0, 3.0), divisions=(2, 3, 4))


@pytest.fixture(scope="module")
def sphere():
    return icosphere(0.5, 2)


# ---------------------------------------------------------------------------------------------
# procedural shapes
# ---------------------------------------------------------------------------------------------


def test_box_surface_is_closed_outward_with_exact_volume(box):
    V, F = box
    assert F.shape == (4 * (2 * 3 + 3 * 4 + 4 * 2), 3)
    assert np.allclose(V.min(0), [-0.5, -1.0, -1.5]) and np.allclose(V.max(0), [0.5, 1.0, 1.5])
    assert enclosed_volume(V, F) == pytest.approx(6.0, rel=1e-14)
    check_surface(V, F)
    # every normal points away from the centre (outward)
    n = np.cross(V[F[:, 1]] - V[F[:, 0]], V[F[:, 2]] - V[F[:, 0]])
    assert (np.einsum("ij,ij->i", n, V[F].mean(1)) > 0).all()


def test_icosphere_counts_radius_and_volume():
    for s in range(4):
        V, F = icosphere(2.0, s)
        assert V.shape == (10 * 4**s + 2, 3) and F.shape == (20 * 4**s, 3)
        assert np.allclose(np.linalg.norm(V, axis=1), 2.0)
        check_surface(V, F)
    # inscribed polyhedron: volume below the sphere's, converging to it
    vols = [enclosed_volume(*icosphere(1.0, s)) for s in range(4)]
    assert all(np.diff(vols) > 0)
    assert vols[-1] == pytest.approx(4 / 3 * np.pi, rel=1e-2) and vols[-1] < 4 / 3 * np.pi


# ---------------------------------------------------------------------------------------------
# tetrahedralize
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["box", "sphere"])
def test_tetrahedralize_keeps_surface_and_volume(shape, box, sphere):
    V, F = box if shape == "box" else sphere
    mesh = tetrahedralize(V, F)
    vol = mesh.volumes()
    assert (vol > 0).all()  # positively oriented
    # divergence theorem: the tets fill exactly the enclosed volume
    assert vol.sum() == pytest.approx(enclosed_volume(V, F), rel=1e-9)
    # keep_surface: input vertices are the first nodes, in order, bit for bit
    assert mesh.n_surface_inputs == len(V)
    assert np.array_equal(mesh.X[: len(V)], V)
    # ... and the boundary is exactly the input triangles, with the same (outward) orientation
    bf = mesh.boundary_faces()
    assert _sorted_set(bf) == _sorted_set(F)
    assert _canon(bf) == _canon(F)
    assert np.array_equal(mesh.surface_vertices(), np.arange(len(V)))
    assert mesh.T.dtype == np.int64 and mesh.X.dtype == np.float64
    # no unused nodes
    assert np.array_equal(np.unique(mesh.T), np.arange(mesh.n_vertices))


def test_tetrahedralize_prints_nothing(capfd, sphere):
    tetrahedralize(*sphere)
    out, _ = capfd.readouterr()
    assert out == ""  # TetGen's printf chatter must not reach the worker's JSON-lines stdout


def test_max_volume_and_quality_bounds():
    V, F = box_surface(divisions=(3, 3, 3))
    coarse = tetrahedralize(V, F, keep_surface=False)
    mesh = tetrahedralize(V, F, max_volume=2e-3, quality=1.4, keep_surface=False)
    q = mesh.quality()
    assert q["max_volume"] <= 2e-3 * (1 + 1e-9)
    assert q["max_radius_edge_ratio"] <= 1.4 * (1 + 1e-6)
    assert q["volume"] == pytest.approx(1.0, rel=1e-9)
    assert 500 <= mesh.n_elements <= 3000 and mesh.n_elements > coarse.n_elements
    # the input vertices still come first, even where TetGen split the boundary
    assert np.array_equal(mesh.X[: len(V)], V) and mesh.n_surface_inputs == len(V)
    # target edge length -> volume of the regular tet with that edge
    edge = 0.2
    vmax = edge**3 / (6 * np.sqrt(2))
    assert regular_tet_volume(edge) == pytest.approx(vmax)
    m2 = tetrahedralize(V, F, target_edge_length=edge, keep_surface=False)
    assert m2.volumes().max() <= vmax * (1 + 1e-9)


@pytest.mark.parametrize("quality", [1.3, 2.0])
def test_radius_edge_bound_with_kept_surface(quality):
    V, F = icosphere(1.0, 3)
    mesh = tetrahedralize(V, F, quality=quality)
    ratio = mesh.element_quality()["radius_edge_ratio"]
    assert ratio.max() <= quality * (1 + 1e-6)
    assert _sorted_set(mesh.boundary_faces()) == _sorted_set(F)


def test_tetrahedralize_rejects_bad_settings(box):
    V, F = box
    with pytest.raises(MeshError, match="above 1.0"):
        tetrahedralize(V, F, quality=0.9)
    with pytest.raises(MeshError, match="positive"):
        tetrahedralize(V, F, max_volume=-1.0)
    with pytest.raises(MeshError, match="tets"):
        tetrahedralize(V, F, max_volume=1e-9)  # would be ~6e9 tets
    with pytest.raises(MeshError, match="0-30"):
        tetrahedralize(V, F, min_dihedral=45)


def test_invalid_surface_never_reaches_tetgen(monkeypatch, box):
    import tetgen

    def boom(*a, **k):
        raise AssertionError("TetGen must not see an invalid surface")

    monkeypatch.setattr(tetgen, "TetGen", boom)
    V, F = box
    with pytest.raises(MeshError, match="open boundary"):
        tetrahedralize(V, F[:-1])
    Vb, Fb = box_surface(center=(0.3, 0.3, 0.3))
    with pytest.raises(MeshError, match="intersect"):
        tetrahedralize(np.vstack([V, Vb]), np.vstack([F, Fb + len(V)]))


# ---------------------------------------------------------------------------------------------
# TetMesh measures, identity and validation
# ---------------------------------------------------------------------------------------------


def test_quality_of_reference_tets():
    s = np.sqrt(8 / 9), np.sqrt(2 / 9), np.sqrt(2 / 3)
    Xr = np.array([[0, 0, 1], [s[0], 0, -1 / 3], [-s[1], s[2], -1 / 3], [-s[1], -s[2], -1 / 3]])
    Xc = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=float)
    reg = TetMesh(Xr, [[0, 1, 2, 3]]).element_quality()
    if reg["volume"][0] < 0:
        reg = TetMesh(Xr, [[0, 2, 1, 3]]).element_quality()
    assert reg["radius_ratio"][0] == pytest.approx(1.0, rel=1e-12)
    assert reg["radius_edge_ratio"][0] == pytest.approx(np.sqrt(6) / 4, rel=1e-12)
    assert reg["min_dihedral_deg"][0] == pytest.approx(np.degrees(np.arccos(1 / 3)), rel=1e-12)
    assert reg["max_dihedral_deg"][0] == pytest.approx(np.degrees(np.arccos(1 / 3)), rel=1e-12)
    corner = TetMesh(Xc, [[0, 1, 2, 3]])
    q = corner.element_quality()
    assert corner.volumes()[0] == pytest.approx(1 / 6)
    # R = sqrt(3)/2, shortest edge 1, r_in = 3V / sum(A) = 0.5 / (1.5 + sqrt(3)/2)
    r_in = 0.5 / (1.5 + np.sqrt(3) / 2)
    assert q["radius_edge_ratio"][0] == pytest.approx(np.sqrt(3) / 2, rel=1e-12)
    assert q["radius_ratio"][0] == pytest.approx(3 * r_in / (np.sqrt(3) / 2), rel=1e-12)
    assert q["max_dihedral_deg"][0] == pytest.approx(90.0, rel=1e-12)
    assert q["min_dihedral_deg"][0] == pytest.approx(
        np.degrees(np.arccos(1 / np.sqrt(3))), rel=1e-12
    )
    assert corner.quality()["n_elements"] == 1
    # a single tet's boundary is its four faces, oriented outward
    bf = corner.boundary_faces()
    n = np.cross(Xc[bf[:, 1]] - Xc[bf[:, 0]], Xc[bf[:, 2]] - Xc[bf[:, 0]])
    assert (np.einsum("ij,ij->i", n, Xc[bf].mean(1) - Xc.mean(0)) > 0).all()


def test_hash_identity(sphere):
    mesh = tetrahedralize(*sphere)
    h = mesh.hash()
    assert len(h) == 64 and int(h, 16) >= 0
    assert h == mesh_hash(mesh.X, mesh.T)  # the one identity bake caches check against
    assert TetMesh(mesh.X.copy(), mesh.T.copy(), 0).hash() == h  # n_surface_inputs excluded
    X = mesh.X.copy()
    X[7, 1] = np.nextafter(X[7, 1], np.inf)  # one ulp of one coordinate
    assert TetMesh(X, mesh.T).hash() != h
    T = mesh.T.copy()
    T[0] = T[0, [1, 2, 0, 3]]  # same tet, other vertex order: another mesh
    assert TetMesh(mesh.X, T).hash() != h
    # -0.0 and 0.0 are the same coordinate
    Xz = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    Xn = Xz.copy()
    Xn[0] = -0.0
    assert TetMesh(Xz, [[0, 1, 2, 3]]).hash() == TetMesh(Xn, [[0, 1, 2, 3]]).hash()


def test_tetmesh_validation_and_read_only():
    X = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    with pytest.raises(MeshError, match="no tetrahedra"):
        TetMesh(X, np.zeros((0, 4), int))
    with pytest.raises(MeshError, match="outside"):
        TetMesh(X, [[0, 1, 2, 4]])
    with pytest.raises(MeshError, match=r"\(m, 4\)"):
        TetMesh(X, [[0, 1, 2]])
    with pytest.raises(MeshError, match="NaN"):
        TetMesh(np.where(X == 1, np.nan, X), [[0, 1, 2, 3]])
    mesh = TetMesh(X, [[0, 1, 2, 3]])
    with pytest.raises(ValueError):
        mesh.X[0, 0] = 5.0  # the identity (hash) must not drift under a cache
    X[1, 0] = 2.0
    assert mesh.X[1, 0] == 1.0  # it owns a copy


# ---------------------------------------------------------------------------------------------
# check_surface
# ---------------------------------------------------------------------------------------------


def test_check_surface_open_mesh(box):
    V, F = box
    msg = _check_raises(V, F[1:], "3 open boundary edges", "embedding cage")
    assert "tetrahedralize_embedded" in msg


def test_check_surface_non_manifold_edge():
    V, F = box_surface()
    a, b = 0, 1  # the box edge x = y = -0.5
    assert np.allclose(V[[a, b], :2], -0.5)
    fin = np.vstack([V, [[-1.5, -1.5, 0.0]]])  # a fin sticking out of that edge
    msg = _check_raises(fin, np.vstack([F, [[a, b, 8]]]), "non-manifold", "embedding cage")
    assert "1 non-manifold edges" in msg and "(0, 1)" in msg
    assert "intersect" not in msg  # the fin is outside: no false self-intersection


def test_check_surface_zero_area_face():
    V, F = box_surface(divisions=(2, 2, 2))
    c = int(np.flatnonzero(np.all(np.isclose(V, [0, 0, 0.5]), axis=1))[0])  # centre of +z side
    f = int(np.flatnonzero((F == c).any(1))[0])
    a, b = [i for i in F[f] if i != c]
    V = V.copy()
    V[c] = (V[a] + V[b]) / 2  # face (a, b, c) collapses onto its edge
    _check_raises(V, F, "zero-area", f"faces: {f}", "Degenerate Dissolve")


def test_check_surface_self_intersections(box):
    V, F = box_surface(divisions=(2, 2, 2))
    Vb, Fb = box_surface(divisions=(2, 2, 2), center=(0.4, 0.3, 0.2))
    VV, FF = np.vstack([V, Vb]), np.vstack([F, Fb + len(V)])
    msg = _check_raises(VV, FF, "intersect", "Boolean", "embedding cage")
    pairs = _self_intersecting_pairs(VV, FF, np.ones(len(FF), bool), 2.0)
    assert len(pairs) and f"{len(pairs)} pairs of faces intersect" in msg
    assert ((pairs[:, 0] < len(F)) != (pairs[:, 1] < len(F))).all()  # each pair mixes the boxes
    # a vertex pushed through the other side of a sphere
    Vs, Fs = icosphere(1.0, 3)
    Vs = Vs.copy()
    Vs[5] *= -1.3
    _check_raises(Vs, Fs, "intersect")


def test_check_surface_flipped_face(box):
    V, F = box
    F = F.copy()
    F[17] = F[17, ::-1]
    msg = _check_raises(V, F, "inconsistent orientation", "Recalculate Outside")
    assert "1 faces look flipped" in msg and "first faces: 17)" in msg


def test_check_surface_nan_duplicates_loose_and_size(box):
    V, F = box
    Vn = V.copy()
    Vn[3, 2] = np.nan
    _check_raises(Vn, F, "NaN", "(first: 3)")
    # split seam: a copy of vertex 0 used by one of its faces
    f = int(np.flatnonzero((F == 0).any(1))[0])
    Vd = np.vstack([V, V[:1]])
    Fd = F.copy()
    Fd[f][Fd[f] == 0] = len(V)
    _check_raises(Vd, Fd, "duplicate (coincident) vertices", "Merge by Distance", "open")
    _check_raises(np.vstack([V, [[9.0, 9, 9]]]), F, "1 loose vertices", "Delete Loose")
    _check_raises(V, F[:3], "at least 4")
    _check_raises(V, np.vstack([F, F[:1]]), "duplicates of another face")
    with pytest.raises(MeshError, match="outside"):
        check_surface(V, np.vstack([F, [[0, 1, len(V)]]]))


def test_check_surface_accepts_touching_but_valid_geometry():
    # two separate boxes one gap apart and a concave L-shaped solid: all valid
    V1, F1 = box_surface(divisions=(2, 2, 2))
    V2, F2 = box_surface(divisions=(2, 2, 2), center=(1.001, 0, 0))
    check_surface(np.vstack([V1, V2]), np.vstack([F1, F2 + len(V1)]))
    S = np.zeros((4, 4, 4), bool)
    S[1:3, 1:3, 1] = True
    S[1, 1:3, 2] = True
    quads, G = _voxel_boundary(S)
    Fq = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    check_surface(G.astype(float), Fq)


def test_tri_pair_narrow_phase_cases():
    V = np.array(
        [
            [0, 0, 0], [1, 0, 0], [0, 1, 0],  # 0-2: triangle in z=0
            [0.2, 0.2, -1], [0.2, 0.2, 1], [1, 1, 1],  # 3-5: pierces it
            [0.2, 0.2, 0.5], [0.3, 0.2, 1], [0.2, 0.3, 1],  # 6-8: above it
            [0.1, 0.1, 0], [2, 0.1, 0], [0.1, 2, 0],  # 9-11: coplanar overlap
            [0.3, 0.3, 0.5], [0.5, 0.2, -0.5],  # 12, 13: with vertex 0 -> crosses through
            [-1, 0.5, 0.5], [-1, -0.5, 0.5],  # 14, 15: with vertex 0 -> outside, no hit
            [0.3, 0.3, 0.0],  # 16: with edge (0, 1) -> folded flat onto the triangle
            [0.3, -0.5, 0.0],  # 17: with edge (0, 1) -> flat but on the other side: fine
        ],
        dtype=float,
    )  # fmt: skip
    Fa = np.array([[0, 1, 2]] * 7)
    Fb = np.array(
        [[3, 4, 5], [6, 7, 8], [9, 10, 11], [0, 12, 13], [0, 14, 15], [1, 0, 16], [1, 0, 17]]
    )
    hit = _tri_pairs_intersect(V, Fa, Fb)
    assert hit.tolist() == [True, False, True, True, False, True, False]
    # symmetric in the pair order
    assert _tri_pairs_intersect(V, Fb, Fa).tolist() == hit.tolist()


def test_closest_point_on_triangles_beats_dense_sampling(rng):
    A, B, C = rng.standard_normal((3, 60, 3))
    P = 2 * rng.standard_normal((60, 3))
    d = np.linalg.norm(closest_points_on_triangles(P, A, B, C) - P, axis=1)
    u, v = np.meshgrid(np.linspace(0, 1, 81), np.linspace(0, 1, 81))
    keep = u + v <= 1
    S = (
        A[:, None]
        + u[keep][None, :, None] * (B - A)[:, None]
        + v[keep][None, :, None] * (C - A)[:, None]
    )
    sampled = np.linalg.norm(S - P[:, None], axis=2).min(1)
    assert (d <= sampled + 1e-12).all()  # never farther than any point of the triangle
    assert (sampled - d <= 0.02 * np.linalg.norm(B - A, axis=1).max()).all()  # and on it


def test_box_pairs_match_brute_force(rng):
    lo = rng.random((300, 3))
    size = np.where(rng.random((300, 1)) < 0.1, 0.3, 0.03) * rng.random((300, 3))
    hi = lo + size
    P = _box_pairs(lo, hi, pad=0.0)
    ov = ((lo[:, None] <= hi[None]) & (lo[None] <= hi[:, None])).all(2)
    i, j = np.nonzero(np.triu(ov, 1))
    assert set(map(tuple, P.tolist())) == set(zip(i.tolist(), j.tolist()))


# ---------------------------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------------------------


def test_embed_points_inside_at_nodes_and_outside(rng):
    V, F = box_surface(divisions=(2, 2, 2))
    mesh = tetrahedralize(V, F, max_volume=5e-3, keep_surface=False)
    inside = rng.uniform(-0.45, 0.45, size=(200, 3))
    # face, face, corner and edge regions of the box
    outside = np.array([[0.7, 0.1, 0.0], [0.0, -0.8, 0.2], [0.6, 0.6, 0.6], [0.7, 0.7, 0.05]])
    nodes = mesh.X[[0, 5, mesh.n_vertices - 1]]
    P = np.vstack([inside, nodes, outside])
    emb = embed_points(P, mesh)
    assert np.allclose(emb.bary.sum(1), 1.0, atol=1e-14, rtol=0)
    assert np.abs(emb.matrix @ mesh.X - P).max() < 1e-12
    assert np.abs(emb.apply(mesh.X) - P).max() < 1e-12
    assert (emb.bary[:200] >= -1e-10).all() and (emb.distance[:203] == 0).all()
    # a point at a node is that node, exactly
    for row, node in zip(range(200, 203), [0, 5, mesh.n_vertices - 1]):
        assert emb.matrix[row].toarray().ravel().tolist() == np.eye(mesh.n_vertices)[node].tolist()
    # outside points: distance to the box, extrapolated coordinates
    expect = [0.2, 0.3, np.sqrt(3 * 0.1**2), np.sqrt(2 * 0.2**2)]
    assert emb.distance[203:] == pytest.approx(expect, rel=1e-9)
    assert emb.n_outside == 4 and (emb.bary[203:].min(1) < 0).all()
    # barycentric interpolation is exact for affine fields, inside and outside
    A = np.eye(3) + 0.3 * rng.standard_normal((3, 3))
    b = rng.standard_normal(3)
    assert np.abs(emb.apply(mesh.X @ A.T + b) - (P @ A.T + b)).max() < 1e-9
    # batched frames
    frames = np.stack([mesh.X, mesh.X * 2.0])
    out = emb.apply(frames)
    assert out.shape == (2, len(P), 3) and np.allclose(out[1], 2 * P)


def test_embed_points_exact_search_beyond_nearest_centroids(rng):
    # one big tet, and 40 small tets crowded around a point p inside it (not containing p):
    # the 32 nearest centroids all miss, so the exact ball search must find the big tet
    big = np.array([[0.0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10]])
    p = np.array([1.0, 1.0, 1.0])
    small = p + 0.05 + 0.3 * rng.random((40, 1, 3)) + 0.02 * np.eye(4, 3)[None]
    X = np.vstack([big, small.reshape(-1, 3)])
    T = np.vstack([[0, 1, 2, 3], 4 + np.arange(160).reshape(40, 4)])
    mesh = TetMesh(X, orient_positive(X, T))
    emb = embed_points(p[None], mesh)
    assert emb.tet[0] == 0 and emb.n_outside == 0
    assert np.allclose(emb.bary[0], [0.7, 0.1, 0.1, 0.1], atol=1e-14)


@pytest.mark.parametrize("scale", [1e-4, 1e3])
def test_tetrahedralize_is_scale_invariant(scale, sphere):
    V, F = sphere
    mesh = tetrahedralize(V * scale, F)
    ref = tetrahedralize(V, F)
    assert abs(mesh.n_elements - ref.n_elements) <= 0.1 * ref.n_elements  # TetGen rounds
    assert mesh.volumes().sum() == pytest.approx(enclosed_volume(V, F) * scale**3, rel=1e-9)
    emb = embed_points(mesh.X[:10] * 0.5, mesh)
    assert np.abs(emb.apply(mesh.X) - mesh.X[:10] * 0.5).max() < 1e-12 * scale


def test_embedding_arrays_round_trip(tmp_path, sphere):
    mesh = tetrahedralize(*sphere)
    P = 0.3 * np.random.default_rng(1).standard_normal((50, 3))
    emb = embed_points(P, mesh)
    np.savez(tmp_path / "e.npz", **emb.to_arrays())
    with np.load(tmp_path / "e.npz", allow_pickle=False) as d:
        back = Embedding.from_arrays(d)
    for k in ("tet", "bary", "nodes", "distance"):
        assert np.array_equal(getattr(back, k), getattr(emb, k))
    assert back.n_nodes == mesh.n_vertices
    assert (back.matrix != emb.matrix).nnz == 0
    with pytest.raises(MeshError, match="missing"):
        Embedding.from_arrays({"tet": emb.tet})
    with pytest.raises(MeshError, match="another tet mesh"):
        emb.apply(np.zeros((3, 3)))


# ---------------------------------------------------------------------------------------------
# embedding cage
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["open_box", "grid_plane"])
def test_cage_for_open_meshes(kind, rng):
    V, F = _open_box() if kind == "open_box" else _grid_plane()
    with pytest.raises(MeshError, match="open boundary"):
        check_surface(V, F)
    Vc, Fc = build_cage(V, F, resolution=12)
    check_surface(Vc, Fc)  # watertight, manifold, oriented, no self-intersections
    assert enclosed_volume(Vc, Fc) > 0  # outward
    mesh, emb = tetrahedralize_embedded(V, F, resolution=12)
    assert mesh.n_elements < 20000
    assert (mesh.volumes() > 0).all()
    assert mesh.volumes().sum() == pytest.approx(enclosed_volume(Vc, Fc), rel=1e-9)
    assert emb.n_points == len(V) and emb.n_outside == 0
    assert np.allclose(emb.bary.sum(1), 1.0, atol=1e-14, rtol=0)
    assert (emb.bary >= -1e-10).all()
    assert np.abs(emb.matrix @ mesh.X - V).max() < 1e-9
    A = np.eye(3) + 0.2 * rng.standard_normal((3, 3))
    b = rng.standard_normal(3)
    assert np.abs(emb.apply(mesh.X @ A.T + b) - (V @ A.T + b)).max() < 1e-9


def test_cage_for_non_manifold_and_user_cage(rng):
    # two boxes sharing one edge only: non-manifold, but a cage wraps it
    V1, F1 = box_surface(divisions=(2, 2, 2))
    V2, F2 = box_surface(divisions=(2, 2, 2), center=(1.0, 1.0, 0.0))
    V = np.vstack([V1, V2])
    F = np.vstack([F1, F2 + len(V1)])
    mesh, emb = tetrahedralize_embedded(V, F, resolution=10)
    assert emb.n_outside == 0 and np.abs(emb.apply(mesh.X) - V).max() < 1e-9
    # a cage given by the user
    cage = box_surface(size=(3, 3, 2), center=(0.5, 0.5, 0.0), divisions=(2, 2, 2))
    mesh2, emb2 = tetrahedralize_embedded(V, F, cage=cage)
    assert np.array_equal(mesh2.X[: len(cage[0])], cage[0])
    assert np.abs(emb2.apply(mesh2.X) - V).max() < 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_voxel_cage_is_manifold_for_random_voxel_sets(seed):
    r = np.random.default_rng(seed)
    S = r.random((6, 6, 6)) < 0.35  # edge- and corner-only contacts everywhere
    S = _make_manifold(S)
    quads, G = _voxel_boundary(S)
    F = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    check_surface(G.astype(float) * 0.1, F)
    assert enclosed_volume(G.astype(float), F) == pytest.approx(S.sum(), rel=1e-12)


def test_smoothed_cage_still_embeds(sphere):
    V, F = sphere
    mesh, emb = tetrahedralize_embedded(V, F, resolution=10, smooth=3)
    assert np.abs(emb.matrix @ mesh.X - V).max() < 1e-9
    assert np.allclose(emb.bary.sum(1), 1.0, atol=1e-14, rtol=0)


# ---------------------------------------------------------------------------------------------
# I/O
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", [".npz", ".msh", ".vtu", ".vtk"])
def test_io_round_trip(tmp_path, ext, sphere):
    mesh = tetrahedralize(*sphere)
    path = tmp_path / f"mesh{ext}"
    write_tetmesh(path, mesh)
    back = read_tetmesh(path)
    assert np.array_equal(back.X, mesh.X) and np.array_equal(back.T, mesh.T)
    assert back.n_surface_inputs == mesh.n_surface_inputs == len(sphere[0])
    assert back.hash() == mesh.hash()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_read_reorients_and_drops_unused_nodes(tmp_path):
    import meshio

    X = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [5, 5, 5]])
    meshio.vtu.write(str(tmp_path / "a.vtu"), meshio.Mesh(X, [("tetra", np.array([[0, 2, 1, 3]]))]))
    mesh = read_tetmesh(tmp_path / "a.vtu")
    assert mesh.n_vertices == 4 and mesh.volumes()[0] == pytest.approx(1 / 6)
    assert mesh.n_surface_inputs == 0


def test_read_errors(tmp_path, sphere):
    import meshio

    V, F = sphere
    meshio.vtu.write(str(tmp_path / "surf.vtu"), meshio.Mesh(V, [("triangle", F)]))
    with pytest.raises(MeshError, match="no tetrahedra.*triangle"):
        read_tetmesh(tmp_path / "surf.vtu")
    (tmp_path / "junk.msh").write_text("not a mesh\n")
    with pytest.raises(MeshError, match="Cannot read"):  # meshio would sys.exit() here
        read_tetmesh(tmp_path / "junk.msh")
    with pytest.raises(MeshError, match="No tet mesh file"):
        read_tetmesh(tmp_path / "missing.vtu")
    mesh = tetrahedralize(V, F)
    with pytest.raises(MeshError, match="use one of"):
        write_tetmesh(tmp_path / "m.obj", mesh)
    # tampered .npz: the stored hash no longer matches
    good = tmp_path / "m.npz"
    write_tetmesh(good, mesh)
    with np.load(good, allow_pickle=False) as d:
        arrays = {k: d[k] for k in d.files}
    arrays["X"] = arrays["X"] + 1e-6
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(MeshError, match="corrupted"):
        read_tetmesh(tmp_path / "bad.npz")
    # an object array would need pickle: refused, as a MeshError
    np.savez(tmp_path / "pkl.npz", X=np.array([None, 1], dtype=object), T=np.zeros((1, 4), int))
    with pytest.raises(MeshError, match="Cannot read"):
        read_tetmesh(tmp_path / "pkl.npz")
    (tmp_path / "trunc.npz").write_bytes(good.read_bytes()[:100])
    with pytest.raises(MeshError, match="Cannot read"):
        read_tetmesh(tmp_path / "trunc.npz")


def test_render_positions_of_frames_equal_the_embedding_applied_frame_by_frame(box):
    V, F = box
    mesh, emb = tetrahedralize_embedded(V, F, resolution=4)
    P = np.random.default_rng(0).normal(size=(5, 2, len(mesh.X), 3))
    ref = np.stack([[emb.apply(p) for p in row] for row in P])
    np.testing.assert_allclose(render_positions(P, len(V), emb), ref, atol=1e-14)
    np.testing.assert_allclose(render_positions(P[1, 0], len(V), emb), ref[1, 0], atol=1e-14)
    # a direct tet mesh: its first len(V) nodes are the render vertices
    np.testing.assert_array_equal(render_positions(P, len(V)), P[..., : len(V), :])
