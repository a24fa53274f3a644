"""The active-face asset (core/face.py): the demo head's lattice, bones, muscles and shape
keys, the file round trip, and the messages a user gets for bad set-ups."""

import numpy as np
import pytest
from neural_rom.core.errors import MeshError
from neural_rom.core.kinds.face.rig import (
    ShapeKeys,
    check_shape_keys,
    check_tets,
    demo_head,
    demo_muscles,
    ellipsoid_mesh,
    face_rig,
    jaw_transform,
    load_face,
    make_shape_keys,
    muscle_actions,
    save_face,
)
from neural_rom.core.physics.quasistatic import QuasistaticSolver


@pytest.fixture(scope="module")
def rig():
    return demo_head("small")


def test_demo_head_is_a_lattice_with_fixed_skull_and_a_jaw(rig):
    q = rig.mesh().quality()
    height = np.ptp(rig.skin_V[:, 2])
    print(
        f"\nsmall head: {len(rig.X)} nodes, {len(rig.T)} tets, min dihedral "
        f"{q['min_dihedral_deg']:.1f} deg, {len(rig.fixed)} skull nodes, {len(rig.jaw_nodes)} "
        f"jaw nodes, skin {len(rig.skin_V)} vertices, {height * 100:.1f} cm tall; muscle "
        f"elements {np.bincount(rig.muscle[rig.muscle >= 0]).tolist()}"
    )
    assert 2000 <= len(rig.T) <= 5000
    assert q["min_dihedral_deg"] > 35  # Kuhn cubes: no slivers
    assert 0.19 < height < 0.23
    assert rig.skin.n_outside == 0
    assert np.all(np.bincount(rig.muscle[rig.muscle >= 0], minlength=rig.n_muscles) >= 10)
    np.testing.assert_allclose(np.linalg.norm(rig.fiber[rig.muscle >= 0], axis=1), 1.0)
    # the skin is carried exactly at rest
    np.testing.assert_allclose(rig.skin.apply(rig.X), rig.skin_V, atol=1e-12)
    # the hinge: a rigid motion that opens the mouth (the chin goes down)
    M = jaw_transform(rig, 0.3)
    np.testing.assert_allclose(M[:3, :3] @ M[:3, :3].T, np.eye(3), atol=1e-14)
    chin = rig.X[rig.jaw_nodes].min(axis=0) * [0, 1, 0] + [0, 0, -0.07]
    assert (M[:3, :3] @ chin + M[:3, 3])[2] < chin[2]
    bench = demo_head("bench")
    print(f"bench head: {len(bench.T)} tets, {len(bench.skin_V)} skin vertices")
    assert len(bench.T) >= 5000


def test_muscle_actions_contract_along_the_fibre_and_keep_volume(rig):
    a = muscle_actions(rig, np.full(rig.n_muscles, 1.0))
    S = np.zeros((len(a), 3, 3))
    S[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]] = a
    S[:, [1, 2, 2], [0, 0, 1]] = a[:, [1, 2, 4]]
    S += np.eye(3)
    on = rig.muscle >= 0
    stretch = np.einsum("mi,mij,mj->m", rig.fiber[on], S[on], rig.fiber[on])
    np.testing.assert_allclose(stretch, 0.5)
    np.testing.assert_allclose(np.linalg.det(S), 1.0, atol=1e-12)
    assert np.all(a[~on] == 0)


def test_shape_keys_are_equilibria_deterministic_and_round_trip(rig, tmp_path):
    keys = make_shape_keys(rig, 4, held_out=1, seed=3)
    again = make_shape_keys(rig, 4, held_out=1, seed=3)
    np.testing.assert_array_equal(keys.positions, again.positions)
    moved = np.linalg.norm(keys.positions - rig.skin_V, axis=2).max(1)
    print(
        f"\nkeys: largest skin motion per key {np.round(moved * 1000, 1).tolist()} mm, jaw "
        f"{np.round(keys.jaw, 3).tolist()} rad"
    )
    # realistic expressions: 5-20 mm where the face moves (a wide-open jaw a little more)
    assert 0.005 < moved.min() and moved.max() < 0.03
    assert keys.held_out.tolist() == [False, False, False, True]
    assert all(name.startswith(f"key{i:03d}_") for i, name in enumerate(keys.names))
    # each key is the skin of an equilibrium of its muscle actions
    solver = QuasistaticSolver(rig.fem(), rig.constrained)
    eq = solver.solve(muscle_actions(rig, keys.activations[0]), rig.boundary(keys.jaw[0]))
    np.testing.assert_allclose(rig.skin.apply(eq.x), keys.positions[0], atol=1e-6)
    path = save_face(tmp_path / "head.npz", rig, keys)
    rig2, keys2 = load_face(path)
    for name in ("X", "T", "fixed", "jaw_nodes", "muscle", "fiber", "skin_V"):
        np.testing.assert_array_equal(getattr(rig2, name), getattr(rig, name))
    np.testing.assert_array_equal(rig2.skin.bary, rig.skin.bary)
    np.testing.assert_array_equal(keys2.positions, keys.positions)
    assert rig2.muscle_names == rig.muscle_names and keys2.names == keys.names


def _parts():
    skin = ellipsoid_mesh((0, 0, 0), (0.075, 0.09, 0.105), 2)
    skull = ellipsoid_mesh((0, 0.006, 0.026), (0.06, 0.07, 0.066), 1)
    jaw = ellipsoid_mesh((0, 0.0, -0.066), (0.046, 0.046, 0.016), 1)
    return skin, skull, jaw


def test_bad_setups_get_clear_messages(rig):
    skin, skull, jaw = _parts()
    hinge = dict(jaw_pivot=(0, 0.035, -0.045), jaw_axis=(1, 0, 0), spacing=0.02)
    big_skull = (skull[0] * 1.4, skull[1])
    with pytest.raises(MeshError, match="skull pokes through the skin"):
        face_rig(skin, big_skull, jaw, **hinge)
    far_jaw = (jaw[0] + [0, 0, -0.5], jaw[1])
    with pytest.raises(MeshError, match="jaw does not touch the flesh"):
        face_rig(skin, skull, far_jaw, **hinge)
    open_skin = (skin[0], skin[1][:-1])
    with pytest.raises(MeshError, match="skin mesh is not closed"):
        face_rig(open_skin, skull, jaw, **hinge)
    keys = ShapeKeys(
        positions=np.zeros((2, len(rig.skin_V) + 1, 3)),
        jaw=np.zeros(2),
        names=["a", "b"],
        held_out=np.zeros(2, bool),
    )
    with pytest.raises(MeshError, match="same vertex count"):
        check_shape_keys(rig, keys)
    X = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0.5, 0.5, 1e-4]], float)
    with pytest.raises(MeshError, match="sliver"):
        check_tets(X, np.array([[0, 1, 2, 3]]))
    assert len(demo_muscles()) == rig.n_muscles
