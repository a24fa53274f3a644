"""The arithmetic of a face's inputs on the host's side (core/faceinputs.py), without
Blender: the skin's rigid frame, the jaw hinge and its reference frame, slider ranges,
marker spreading, and frames gathered into a track that is the same in any placement of
the whole scene."""

import numpy as np
import pytest
from neural_rom.core.engine.render import to_local
from neural_rom.core.engine.track import read_track, write_track
from neural_rom.core.errors import MeshError, NeuralRomError
from neural_rom.core.kinds.face import inputs as fi
from neural_rom.core.physics.colliders import Collider


def _rigid(seed: int) -> np.ndarray:
    """A random rotation (det +1) and translation as a (4, 4) matrix."""
    rng = np.random.default_rng(seed)
    Q, R = np.linalg.qr(rng.normal(size=(3, 3)))
    Q = Q * np.sign(np.diag(R))
    if np.linalg.det(Q) < 0:
        Q[:, 0] = -Q[:, 0]
    M = np.eye(4)
    M[:3, :3], M[:3, 3] = Q, rng.normal(size=3)
    return M


def test_check_rigid_passes_a_rigid_frame_and_refuses_a_scale():
    S = _rigid(0)
    assert np.array_equal(fi.check_rigid(S.tolist(), "Face"), S)
    scaled = S @ np.diag([1.1, 1.0, 1.0, 1.0])
    with pytest.raises(MeshError, match=r"'Face' is scaled by \[1.1, 1.0, 1.0\].*Apply > Scale"):
        fi.check_rigid(scaled, "Face")


def test_hinge_rotation_opens_about_x():
    a, b = 0.3, -0.12
    Rx = fi.hinge_rotation(a)
    print(f"\nRx(0.3) e_y = {Rx[:3, 1].round(4).tolist()}")
    assert np.allclose(Rx[:3, :3].T @ Rx[:3, :3], np.eye(3), atol=1e-15)
    assert np.isclose(np.linalg.det(Rx), 1.0)
    assert np.allclose(Rx[:3, 0], [1, 0, 0])  # the hinge axis stays
    assert np.allclose(Rx[:3, 1], [0, np.cos(a), np.sin(a)])  # +y turns towards +z
    assert np.allclose(fi.hinge_rotation(a) @ fi.hinge_rotation(b), fi.hinge_rotation(a + b))


def test_jaw_frames_round_trip_and_fix_the_hinge():
    S, R = _rigid(1), _rigid(2)
    theta = 0.35
    pivot, axis = fi.jaw_hinge(R.ravel())
    assert np.allclose(pivot, R[:3, 3]) and np.isclose(np.linalg.norm(axis), 1.0)
    F = fi.jaw_reference(R, theta)
    # set the jaw in the world as Blender would, read it back as a frame's input
    back = fi.jaw_relative(np.linalg.inv(S), fi.jaw_world(S, R, theta), R)
    err = np.abs(back - F).max()
    print(f"\njaw set then read back: max |difference| {err:.2e}")
    assert err < 1e-12
    assert np.allclose(fi.jaw_reference(R, 0.0), np.eye(4), atol=1e-12)
    # a rotation about the hinge: points on the hinge line stay, others turn by theta
    on_hinge = pivot + 0.07 * axis
    assert np.allclose(F[:3, :3] @ on_hinge + F[:3, 3], on_hinge, atol=1e-12)
    off = pivot + R[:3, 1] * 0.05
    moved = F[:3, :3] @ off + F[:3, 3]
    cos = np.dot(moved - pivot, off - pivot) / 0.05**2
    assert np.isclose(np.linalg.norm(moved - pivot), 0.05) and np.isclose(cos, np.cos(theta))


def test_slider_ranges_and_training_keys_by_hand():
    codes = np.array([[0.0, 2.0], [1.0, 2.0], [-1.0, 2.0]])
    lo, hi = fi.slider_ranges(codes)
    # spread 2 -> pad 1.001; a constant coordinate still gets +-0.001
    assert np.allclose(lo, [-2.001, 1.999]) and np.allclose(hi, [2.001, 2.001])
    held = [False, True, False, False, True, False]
    assert fi.training_keys(held, 3).tolist() == [0, 2, 3]
    assert fi.training_keys(held, 4).tolist() == [0, 2, 3, 5]


def test_front_half_layout_reaches_the_ends_of_the_front_and_is_seeded():
    x = np.linspace(0.0, 1.0, 11)
    front = np.c_[x, -np.ones(11), np.zeros(11)]  # local -y: the front of the face
    back = np.c_[x, np.ones(11), np.zeros(11)]
    V = np.vstack([front, back, [[0.5, 1.0, 0.0]]])  # one more behind: the median is +1
    F = np.zeros((0, 3), np.int64)  # the front half needs no normals

    def layout(count, seed):
        return fi.marker_layout(V, F, count, seed, "FRONT")

    pick = layout(4, seed=4)
    print(f"\nfarthest-point picks {pick.tolist()} at x {V[pick, 0].tolist()}")
    assert np.all(pick < 11)  # front only
    # each pick is a front vertex farthest from the picks before it
    for i in range(1, len(pick)):
        d = np.linalg.norm(front[:, None] - front[pick[:i]][None], axis=2).min(1)
        assert np.isclose(d[pick[i]], d.max())
    assert np.array_equal(pick, layout(4, seed=4))
    with pytest.raises(NeuralRomError, match="only 11 vertices to put 12 markers"):
        layout(12, seed=0)


def _frame(G: np.ndarray, k: int) -> dict:
    """Frame ``k`` of a scene (skin, jaw, a sphere, three markers) placed by the rigid ``G``."""
    S = G @ _rigid(10)
    R = _rigid(11)
    jaw = S @ R @ fi.hinge_rotation(0.1 * k)
    sphere = G @ _rigid(20 + k)
    markers = np.array([[0.1, 0.0, 0.2], [0.0, -0.1, 0.0], [0.05, 0.05, 0.1 * k]])
    markers = markers @ G[:3, :3].T + G[:3, 3]
    col = Collider("sphere", radius=0.04, transform=sphere, friction=0.3)
    return fi.frame_inputs(
        S, [col], name="Face", jaw=jaw, jaw_rest=R.ravel(), sliders=[0.5 * k], markers=markers
    )


def test_a_track_is_in_the_skins_space_whatever_the_placement(tmp_path):
    rows = [_frame(np.eye(4), k) for k in range(3)]
    moved = [_frame(_rigid(5), k) for k in range(3)]
    tr = fi.face_track(7, rows, marker_vertices=[3, 1, 4], marker_weights=[1.0, 0.5, 1.0])
    tm = fi.face_track(7, moved, marker_vertices=[3, 1, 4], marker_weights=[1.0, 0.5, 1.0])
    a, b = tr.to_arrays(), tm.to_arrays()
    err = max(np.abs(np.asarray(a[k], float) - b[k]).max() for k in a if k != "collider_kind")
    print(f"\ntrack of the scene moved rigidly: max |difference| {err:.2e}")
    assert err < 1e-12
    assert len(tr) == 3 and tr.frame0 == 7
    S = _rigid(10)
    # the jaw opened 0.1 k about its hinge; the sphere and the markers in the skin's space
    assert np.allclose(tr.reference_frame[2], fi.jaw_reference(_rigid(11), 0.2), atol=1e-12)
    assert np.allclose(tr.collider_transform[1, 0], np.linalg.inv(S) @ _rigid(21))
    inputs = tr.inputs(2)
    assert np.allclose(inputs.markers.positions[2], to_local(np.array([[0.05, 0.05, 0.2]]), S))
    assert inputs.markers.weights.tolist() == [1.0, 0.5, 1.0] and inputs.sliders[0] == 1.0
    assert inputs.colliders[0].kind == "sphere" and inputs.colliders[0].friction == 0.3
    # the signature: equal after a file round trip, different when one slider moves
    again = read_track(write_track(tmp_path / "t.npz", tr))
    assert fi.track_signature(again) == fi.track_signature(tr)
    tr.sliders[1, 0] += 1e-9
    assert fi.track_signature(again) != fi.track_signature(tr)


def test_a_track_without_jaw_markers_or_colliders_has_just_sliders():
    S = _rigid(3)
    rows = [fi.frame_inputs(S, [], name="Face", sliders=[1.0, 2.0])]
    tr = fi.face_track(1, rows)
    assert tr.reference_frame is None and tr.marker_vertices is None
    assert tr.collider_kind.shape == (1, 0) and tr.sliders.tolist() == [[1.0, 2.0]]
    assert np.array_equal(tr.object_matrix[0], np.eye(4))


def test_marker_layout_puts_markers_on_the_face_denser_where_the_keys_move():
    # the head: a UV sphere head; Add Markers spread 24 markers over the whole front
    # half (10 on the face, the rest on the crown and under the chin)
    from .test_winding import uv_sphere

    V, F = uv_sphere(0.1, 48, 24, scale=(0.7, 0.95, 1.0))
    mouth, eyes = (
        np.array([0, -0.085, -0.04]),
        np.array([[0.03, -0.08, 0.03], [-0.03, -0.08, 0.03]]),
    )
    keys = []
    for c, amp in ((mouth, 0.006), (eyes[0], 0.003), (eyes[1], 0.003)):
        bump = np.exp(-np.sum((V - c) ** 2, axis=1) / (2 * 0.015**2))
        keys.append(V + amp * bump[:, None] * [0, 0, 1])
    keys = np.array(keys)
    n = fi.vertex_normals(V, F)
    np.testing.assert_allclose(np.einsum("ij,ij->i", n, V / np.linalg.norm(V, axis=1)[:, None])
                               > 0.9, True)  # fmt: skip
    region = fi.face_region(V, F)
    chin = V[region, 2].min()
    brow = chin + fi.BROW * (V[:, 2].max() - chin)
    near = lambda pick: int((np.linalg.norm(V[pick] - mouth, axis=1) < 0.03).sum())  # noqa: E731
    counts = {}
    for layout in ("FACE", "EVEN", "FRONT"):
        pick = fi.marker_layout(V, F, 24, seed=0, layout=layout, keys=keys)
        assert len(set(pick.tolist())) == 24
        on_face = (n[pick, 1] < -np.cos(np.radians(fi.FRONT_DEG))) & (V[pick, 2] <= brow + 1e-12)
        counts[layout] = (int(on_face.sum()), near(pick))
        if layout != "FRONT":
            assert on_face.all()  # none on the crown, none under the chin
    print(f"\n24 markers (on the face, within 3 cm of the mouth): {counts}")
    assert counts["FRONT"][0] < 20  # the old layout: the front half of the head
    assert counts["FACE"][1] >= 1.5 * counts["EVEN"][1]  # denser where the keys move
    np.testing.assert_array_equal(
        fi.marker_layout(V, F, 24, seed=0, keys=keys), fi.marker_layout(V, F, 24, 0, keys=keys)
    )
    with pytest.raises(NeuralRomError, match="Unknown marker layout 'RING': pick one of FACE"):
        fi.marker_layout(V, F, 4, 0, "RING")


def test_head_from_markers_gets_markers_where_the_skin_moves_with_the_skull():
    # a UV sphere head whose keys move the mouth and the brows: with Head From Markers on,
    # Add Markers adds 6 markers where the keys hardly move the skin, spread off any line;
    # face markers alone, or rigid ones on a line, are refused saying what to do
    from .test_winding import uv_sphere

    V, F = uv_sphere(0.1, 48, 24, scale=(0.7, 0.95, 1.0))
    keys = []
    for c, amp in (((0, -0.085, -0.04), 0.006), ((0, -0.08, 0.05), 0.004)):
        bump = np.exp(-np.sum((V - c) ** 2, axis=1) / (2 * 0.03**2))
        keys.append(V + amp * bump[:, None] * [0, 0, 1])
    keys = np.array(keys)
    motion = np.linalg.norm(keys - V, axis=2).max(0)
    rigid = fi.rigid_region(V, keys)
    assert motion[rigid].max() <= fi.RIGID_MOTION * motion.max()
    assert 0.3 * len(V) < len(rigid) < len(V)
    pick = fi.marker_layout(V, F, 24, 0, keys=keys, rigid=fi.RIGID_MARKERS)
    assert len(set(pick.tolist())) == 24 + fi.RIGID_MARKERS
    np.testing.assert_array_equal(pick[:24], fi.marker_layout(V, F, 24, 0, keys=keys))
    assert np.isin(pick[24:], rigid).all()
    assert fi.head_markers_problem(V, keys, pick) is None
    face_only = fi.head_markers_problem(V, keys, pick[:24])
    assert "0 of the 24 markers are there" in face_only
    assert "Add Markers with Head From Markers on" in face_only
    # four rigid-region markers across the crown along the mid-line (within 1 mm of a line)
    back = rigid[np.abs(V[rigid, 0]) < 1e-9]
    assert len(back) >= 4
    assert "lie on one line" in fi.head_markers_problem(V, keys, back[:4])
    off = rigid[np.argmax(np.abs(V[rigid, 0]))]  # a side of the head: off that line
    assert fi.head_markers_problem(V, keys, np.append(back[:2], off)) is None
    # without keys: the skin above the brow
    top = fi.rigid_region(V, None)
    assert V[top, 2].min() > V[:, 2].min() + fi.BROW * np.ptp(V[:, 2])


class _Quasistatic:
    """A stand-in face runtime: its equilibrium depends only on the sliders (and on the solve
    it starts from, as a warm start would not), and it counts its solves."""

    def __init__(self):
        self.solves, self.theta = 0, 0.0

    def reset(self):
        self.theta = 0.0

    def step(self, inputs):
        self.solves += 1
        self.P = np.outer(np.arange(4.0), inputs.sliders)[:, :3]
        self.theta = float(inputs.sliders.sum())

    def skin_positions(self):
        return self.P.copy()

    def head_transform(self):
        return np.eye(4) * self.theta


def test_a_face_frame_is_solved_once_per_inputs_and_again_when_they_change():
    # issue 29: the face kind's equilibrium (core.kinds.face.equilibrium) is core's, the
    # Blender driver only reads inputs and shows the result.
    from neural_rom.core.kinds.face.equilibrium import FaceEquilibrium

    sim = _Quasistatic()
    eq = FaceEquilibrium(sim)
    S = _rigid(3)

    def track(values):
        return fi.face_track(1, [fi.frame_inputs(S, [], name="Face", sliders=values)])

    options = {"jaw": "sliders", "head": "object"}
    P5, theta5, head5 = eq.solve(5, track([1.0, 2.0, 3.0]), options)
    assert sim.solves == 1 and theta5 == 6.0 and head5 is None
    assert np.array_equal(P5[2], [2.0, 4.0, 6.0])
    # the same frame, the same inputs: from the cache (scrubbing back and forth)
    eq.solve(9, track([0.0, 1.0, 0.0]), options)
    again, theta, _ = eq.solve(5, track([1.0, 2.0, 3.0]), options)
    assert sim.solves == 2 and theta == 6.0 and np.array_equal(again, P5)
    # one slider moved by 1e-9, or other options: solved again
    eq.solve(5, track([1.0, 2.0, 3.0 + 1e-9]), options)
    assert sim.solves == 3
    _, _, head = eq.solve(5, track([1.0, 2.0, 3.0 + 1e-9]), {**options, "head": "markers"})
    assert sim.solves == 4 and np.allclose(head, np.eye(4) * 6.0, rtol=0, atol=1e-8)
    assert len(eq.step_seconds) == 4 and sorted(eq.cache) == [5, 9]
    eq.reset()
    assert eq.cache == {} and sim.theta == 0.0
