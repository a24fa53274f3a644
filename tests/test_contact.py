"""Contact on the surface the user sees (issue 10): collider contact through contact points
carried by tet nodes (``P = W x``), the render surface of an embedding cage in full space and
in the reduced runtimes, identical results for direct tet meshes, exact derivatives."""

import numpy as np
import pytest
from neural_rom.core import fem, surface
from neural_rom.core.bake import BakeSpec, setup_scenario
from neural_rom.core.cage import tetrahedralize_embedded
from neural_rom.core.colliders import Collider, ContactPoints, contact_energy
from neural_rom.core.errors import SimulationError
from neural_rom.core.grid import grid_tetmesh
from neural_rom.core.methods.common import subspace_arguments, subspace_payload, surface_sample
from neural_rom.core.methods.linear import ReducedSimulation
from neural_rom.core.sim import FrameInputs, SimSettings, Simulation, boundary_vertices

from .test_reduced import full_basis

FLESH = fem.Material.preset("flesh")
FLOOR = [Collider("plane")]


def _random_points(X, T, count, seed):
    """Points at random barycentric coordinates in random tets: (nodes (p, 4), weights (p, 4))."""
    rng = np.random.default_rng(seed)
    tets = rng.integers(len(T), size=count)
    w = rng.dirichlet(np.ones(4), size=count)
    return T[tets], w


def _dense_hessian(points, n, H):
    """``W^T blockdiag(H) W`` through the sparse-pattern scatter, in a dense (3n, 3n) array."""
    N = 3 * n
    data = np.zeros(N * N)
    slots = points.hessian_slots(lambda r, c: r * N + c)
    points.add_hessian(data, slots, H)
    return data.reshape(N, N)


# ----------------------------------------------------------------------- derivatives


def test_embedded_contact_gradient_and_hessian_match_finite_differences():
    X, T = grid_tetmesh((0.4, 0.3, 0.2), (3, 2, 2))
    n = len(X)
    nodes, w = _random_points(X, T, 60, seed=0)
    rng = np.random.default_rng(1)
    points = ContactPoints(nodes, rng.uniform(0.1, 1.0, size=60), w)
    x = X + 0.02 * rng.normal(size=X.shape)
    tilt = np.eye(4)
    tilt[:3, :3] = np.linalg.qr(np.eye(3) + 0.2 * rng.normal(size=(3, 3)))[0]
    tilt[:3, 3] = [0.0, 0.0, 0.1]
    cols = [
        Collider("plane", transform=tilt),
        Collider("sphere", radius=0.12,
                 transform=np.array([[1, 0, 0, 0.2], [0, 1, 0, 0.15], [0, 0, 1, 0.1], [0, 0, 0, 1.0]])),
        Collider("capsule", radius=0.05, half_length=0.1,
                 transform=np.array([[1, 0, 0, 0.4], [0, 1, 0, 0.3], [0, 0, 1, 0.2], [0, 0, 0, 1.0]])),
    ]  # fmt: skip
    kappa = 1e3
    E, g, H = points.energy(cols, x, kappa, d_hat=0.01)
    assert np.count_nonzero(H.reshape(60, -1).any(1)) >= 5  # several points touch
    # gradient: central differences, every DOF (the penalty is C1)
    eps = 1e-6
    fd = np.zeros(3 * n)
    for i in range(3 * n):
        d = np.zeros(3 * n)
        d[i] = eps
        fd[i] = (
            points.energy(cols, x + d.reshape(-1, 3), kappa, 0.01)[0]
            - points.energy(cols, x - d.reshape(-1, 3), kappa, 0.01)[0]
        ) / (2 * eps)
    np.testing.assert_allclose(g.ravel(), fd, rtol=1e-6, atol=1e-7 * np.abs(g).max())
    # gradient is W^T (point gradient): the chain rule written out
    P = points.positions(x)
    _, gp, _ = contact_energy(cols, P, np.arange(60), points.mass, kappa, 0.01)
    W = points.matrix(n).toarray()
    np.testing.assert_allclose(P, W @ x, atol=1e-15)
    np.testing.assert_allclose(g, W.T @ gp, atol=1e-12)
    # Hessian: on a plane the Gauss-Newton form is the exact Hessian; FD of the gradient
    # in a direction that changes no point's contact state
    E, g, H = points.energy(cols[:1], x, kappa, d_hat=0.01)
    Hd = _dense_hessian(points, n, H)
    np.testing.assert_allclose(Hd, Hd.T, atol=1e-12)
    assert np.linalg.eigvalsh(Hd).min() > -1e-9  # PSD
    for _ in range(3):
        d = rng.normal(size=3 * n)
        fd = (
            points.energy(cols[:1], x + 1e-7 * d.reshape(-1, 3), kappa, 0.01)[1]
            - points.energy(cols[:1], x - 1e-7 * d.reshape(-1, 3), kappa, 0.01)[1]
        ).ravel() / 2e-7
        np.testing.assert_allclose(Hd @ d, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
    # and it is W^T blockdiag(H) W
    B = np.zeros((3 * 60, 3 * 60))
    for j in range(60):
        B[3 * j : 3 * j + 3, 3 * j : 3 * j + 3] = H[j]
    W3 = np.kron(W, np.eye(3))
    np.testing.assert_allclose(Hd, W3.T @ B @ W3, atol=1e-9)


# ------------------------------------------------------------- direct meshes: unchanged


def test_vertex_contact_points_are_the_old_vertex_contact_exactly():
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    rng = np.random.default_rng(2)
    x = X + np.array([0, 0, -0.03]) + 0.01 * rng.normal(size=X.shape)
    surf = boundary_vertices(T)
    mass = fem.mass_matrix(X, T, 1000.0, lumped=True)
    cols = [Collider("plane"), Collider("sphere", radius=0.05)]
    E0, g0, H0 = contact_energy(cols, x, surf, mass, 500.0, 0.001)
    pts = ContactPoints.at_vertices(surf, mass[surf])
    assert pts.is_vertices
    E1, g1, H1 = pts.energy(cols, x, 500.0, 0.001)
    assert E1 == E0
    np.testing.assert_array_equal(g1, g0)
    np.testing.assert_array_equal(H1, H0)


def test_four_node_points_at_vertices_reproduce_vertex_contact_in_full_space():
    """The general (embedded) path with one-hot weights equals the vertex path."""
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    X = X + np.array([0, 0, 0.02])
    s = SimSettings(dt=1 / 48, newton_tol=1e-10)
    ref = Simulation(X, T, FLESH, s, colliders=FLOOR)
    surf = ref.surface
    # each surface vertex as the first node of a tet holding it, weights (1, 0, 0, 0)
    tet_of = np.array([np.flatnonzero((T == v).any(1))[0] for v in surf])
    others = np.array([[u for u in T[t] if u != v] for t, v in zip(tet_of, surf)])
    nodes = np.column_stack([surf, others])
    w = np.zeros(nodes.shape)
    w[:, 0] = 1.0
    emb = Simulation(X, T, FLESH, s, colliders=FLOOR,
                     contact=ContactPoints(nodes, ref.mass[surf], w))  # fmt: skip
    assert not emb.contact.is_vertices
    for _ in range(12):
        ref.step()
        emb.step()
    np.testing.assert_allclose(emb.x, ref.x, atol=1e-10)
    assert ref.x[:, 2].min() < 0.002  # it is lying on the floor


def test_a_bake_without_contact_points_keeps_vertex_contact_and_its_spec():
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    spec = BakeSpec()
    assert "contact" not in spec.to_dict()  # specs of bakes made before stay resumable
    sim, _ = setup_scenario(X, T, spec)
    assert sim.contact.is_vertices
    np.testing.assert_array_equal(sim.contact.nodes[:, 0], boundary_vertices(T))
    pts = spec.contact_points(T, sim.mass)
    np.testing.assert_array_equal(pts.mass, sim.contact.mass)


# ------------------------------------------------------------------ embedded render surface


def _ball(cage=None, resolution=4, edge=0.5, subdivisions=2, height=0.05):
    """A 0.5 m icosphere (its bottom ``height`` above the floor z = 0) in an embedding cage."""
    V, F = surface.icosphere(0.5, subdivisions)
    V = V + np.array([0.0, 0.0, 0.5 + height])
    if cage is not None:
        cage = (cage[0] + np.array([0.0, 0.0, 0.5 + height]), cage[1])
    mesh, emb = tetrahedralize_embedded(
        V, F, cage=cage, resolution=resolution, target_edge_length=edge
    )
    mass = fem.mass_matrix(mesh.X, mesh.T, FLESH.density, lumped=True)
    return mesh, emb, emb.contact_points(F, mesh, mass), mass


def _box_cage(half):
    Vc = np.array([[x, y, z] for x in (-half, half) for y in (-half, half) for z in (-half, half)])
    Fc = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                   [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])  # fmt: skip
    return Vc, Fc


def test_render_contact_points_carry_the_body_mass_by_area():
    mesh, emb, pts, mass = _ball()
    assert len(pts) == emb.n_points and not pts.is_vertices
    np.testing.assert_allclose(pts.positions(mesh.X), emb.apply(mesh.X), atol=1e-12)
    np.testing.assert_allclose(pts.mass.sum(), mass.sum(), rtol=1e-12)
    # an icosphere's vertices have nearly equal areas, so nearly equal masses
    assert pts.mass.max() / pts.mass.min() < 1.5
    again = ContactPoints.from_dict(pts.to_dict())
    for a in ("nodes", "weights", "mass"):
        np.testing.assert_array_equal(getattr(again, a), getattr(pts, a))


def test_embedded_ball_touches_the_floor_with_its_render_surface():
    """Before issue 10 the cage's surface touched: the ball stopped a cage padding (37.5 cm
    here) above the floor. Now its lowest render vertex comes down to the floor, sinking as
    far as the penalty's compliance lets it (the default stiffness sinks a direct tet mesh
    of this ball 16 mm); with a stiffer penalty it rests on the floor within 2 mm."""
    mesh, emb, pts, _ = _ball()
    assert emb.apply(mesh.X)[:, 2].min() - mesh.X[:, 2].min() > 0.3  # the cage's padding
    s = SimSettings(dt=1 / 24, damping_beta=0.004)
    lows = []
    sim = Simulation(mesh.X, mesh.T, FLESH, s, colliders=FLOOR, contact=pts)
    for _ in range(16):
        sim.step()
        lows.append(emb.apply(sim.x)[:, 2].min())
    lows = np.array(lows)
    impact = int(np.argmax(lows < 0.002))
    assert lows[0] > 0.02 and 0 < impact < 8  # falls, then reaches the floor (within 2 mm)
    assert lows[impact:].max() < 0.002  # and stays on it
    assert lows.min() > -0.015  # sinking bounded by the default penalty (measured 10 mm)
    assert sim.x[:, 2].min() < -0.25  # the cage passes through the floor: it does not touch
    # the same drop with a 30x stiffer penalty: on the floor within 2 mm at impact and at rest
    stiff = SimSettings(dt=1 / 24, damping_beta=0.004, contact_stiffness=30 * sim.kappa)
    sim = Simulation(mesh.X, mesh.T, FLESH, stiff, colliders=FLOOR, contact=pts)
    lows = np.array([(sim.step(), emb.apply(sim.x)[:, 2].min())[1] for _ in range(16)])
    impact = int(np.argmax(lows < 0.002))
    assert 0 < impact < 8 and np.abs(lows[impact:]).max() < 0.002


def test_reduced_full_basis_with_render_contact_sample_reproduces_full_space():
    """The reduced runtime's contact sample moves by ``U_contact = W U``: with every free DOF
    in the basis and every element it steps as full space does, render surface on the floor."""
    mesh, emb, pts, mass = _ball(cage=_box_cage(0.6), edge=0.8)
    assert mesh.n_vertices < 40  # a coarse cage keeps the full basis small
    s = SimSettings(dt=1 / 24, newton_tol=1e-10, damping_beta=0.004)
    full = Simulation(mesh.X, mesh.T, FLESH, s, colliders=FLOOR, contact=pts)
    U = full_basis(mesh.X, mesh.T, FLESH, np.zeros(0, int))
    red = ReducedSimulation(mesh.X, mesh.T, FLESH, U, s, contact=pts, colliders=FLOOR)
    np.testing.assert_allclose(red.contact_rest, emb.apply(mesh.X), atol=1e-12)
    lows = []
    for _ in range(14):
        full.step()
        red.step()
        np.testing.assert_allclose(red.positions(), full.x, atol=1e-7)
        lows.append(emb.apply(red.positions())[:, 2].min())
    lows = np.array(lows)
    impact = int(np.argmax(lows < 0.002))
    assert lows[0] > 0.02 and 0 < impact < 8 and lows[impact:].max() < 0.002
    assert lows.min() > -0.015


def test_contact_sample_of_render_points_and_model_file_arrays():
    mesh, emb, pts, mass = _ball(subdivisions=3)
    sample = surface_sample(mesh.X, pts, count=100, seed=0)
    assert len(sample) == 100 and sample.weights.shape == (100, 4)
    np.testing.assert_allclose(sample.mass.sum(), pts.mass.sum(), rtol=1e-12)
    # sampled points are render vertices (rest positions among the render surface's)
    P = emb.apply(mesh.X)
    d = np.linalg.norm(sample.positions(mesh.X)[:, None] - P[None], axis=2).min(1)
    assert d.max() < 1e-12
    # the bottom is covered: the sample's lowest point is within 2 cm of the render bottom
    assert sample.positions(mesh.X)[:, 2].min() - P[:, 2].min() < 0.02

    class _Model:  # what subspace_arguments reads of an opened model file
        pass

    def model_of(contact):
        n = len(mesh.X)
        sub = type("S", (), dict(X=mesh.X, U=np.zeros((3 * n, 1)), mass=mass,
                                 pinned=np.zeros(0, np.int64), kind="pod", k=1, info={}))()  # fmt: skip
        cub = type("C", (), dict(elements=np.arange(3), weights=np.ones(3), info={}))()
        arrays, meta = subspace_payload(mesh.T, sub, cub, contact, FLESH, SimSettings())
        m = _Model()
        m.arrays, m.metadata = arrays, meta
        return m

    m = model_of(sample)
    assert m.arrays["contact_vertices"].shape == (100, 4) and "contact_weights" in m.arrays
    back = subspace_arguments(m, None, None)["contact"]
    np.testing.assert_array_equal(back.weights, sample.weights)
    np.testing.assert_array_equal(back.nodes, sample.nodes)
    # vertex contact is written as before (no weights): and a model without weights loads as
    # vertex contact
    surf = boundary_vertices(mesh.T)
    m = model_of((surf, mass[surf]))
    assert m.arrays["contact_vertices"].shape == (len(surf),) and "contact_weights" not in m.arrays
    back = subspace_arguments(m, None, None)["contact"]
    assert back.is_vertices
    np.testing.assert_array_equal(back.nodes[:, 0], surf)


def test_contact_points_of_another_mesh_are_refused():
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    pts = ContactPoints(np.array([[0, 1, 2, 999]]), [1.0], np.full((1, 4), 0.25))
    with pytest.raises(SimulationError, match="another tet mesh. Re-tetrahedralize"):
        Simulation(X, T, FLESH, contact=pts)
    with pytest.raises(SimulationError, match="expected \\(p, a\\)"):
        ContactPoints(np.zeros((2, 4), int), [1.0], np.ones((2, 4)))


def test_reduced_step_inputs_keep_working_with_render_contact():
    """Colliders given per frame reach the render contact sample."""
    mesh, emb, pts, _ = _ball(cage=_box_cage(0.6), edge=0.8, height=0.0)
    U = full_basis(mesh.X, mesh.T, FLESH, np.zeros(0, int))
    red = ReducedSimulation(mesh.X, mesh.T, FLESH, U, SimSettings(dt=1 / 24), contact=pts)
    raised = np.eye(4)
    raised[2, 3] = 0.05  # the floor 5 cm up: render points start 5 cm inside it
    red.step(FrameInputs(colliders=[Collider("plane", transform=raised)]))
    assert emb.apply(red.positions())[:, 2].min() > 0.0  # pushed up


def test_the_scenario_ground_sits_under_the_render_surface_not_the_cage():
    """The gravity drop's ground plane goes where the visible surface rests: the lowest
    render point, not the lowest cage node (which hangs a cage padding lower)."""
    mesh, emb, pts, _ = _ball()
    spec = BakeSpec(material=FLESH.to_dict(), contact=pts.to_dict(), frames=2)
    spec.scenario["ground"] = True
    _, driver = setup_scenario(mesh.X, mesh.T, spec)
    render_bottom = emb.apply(mesh.X)[:, 2].min()
    assert abs(driver.ground_z - render_bottom) < 1e-12
    assert render_bottom - mesh.X[:, 2].min() > 0.3  # the cage's bottom, where it used to be
    # without contact points (a direct tet mesh) the ground stays at the lowest node
    _, plain = setup_scenario(mesh.X, mesh.T, BakeSpec(material=FLESH.to_dict(), frames=2,
                                                       scenario=dict(spec.scenario)))
    assert plain.ground_z == mesh.X[:, 2].min()
