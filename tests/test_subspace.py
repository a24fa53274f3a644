"""Tests of core.subspace: mass-weighted POD (exact recovery, tolerance search, Eckart-Young),
modal analysis (generalized eigenpairs, cantilever frequencies vs Euler-Bernoulli, rigid
modes), modal derivatives (symmetry, convergence, large deflections), files and errors."""

import json

import numpy as np
import pytest
import scipy.linalg as sla
from neural_rom.core.errors import CacheError, MeshError, NeuralRomError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics import fem
from neural_rom.core.physics.sim import SimSettings, Simulation
from neural_rom.core.reduced import subspace as ss

RHO = 1000.0
E_BAR = 5.0e6
L_BAR, H_BAR = 1.0, 0.1


def m_gram(S: ss.Subspace) -> np.ndarray:
    return S.U.T @ (np.repeat(S.mass, 3)[:, None] * S.U)


def random_m_basis(rng, mass, r, pinned=()):
    """An M-orthonormal (3n, r) basis of smooth-ish random vectors, zero on pinned DOFs."""
    n = mass.size
    V = rng.standard_normal((3 * n, r))
    V[(3 * np.asarray(pinned, dtype=int)[:, None] + np.arange(3)).ravel()] = 0.0
    return ss.m_orthonormalize(V, np.repeat(mass, 3))


@pytest.fixture(scope="module")
def bar():
    """Cantilever-ready bar 1 m x 0.1 m x 0.1 m, pinned at x = 0."""
    X, T = grid_tetmesh((L_BAR, H_BAR, H_BAR), (20, 2, 2))
    mat = fem.Material(E_BAR, 0.3, RHO)
    F = fem.TetFEM(X, T, mat)
    m = fem.mass_matrix(X, T, RHO)
    pin = np.flatnonzero(X[:, 0] < 1e-9)
    return X, T, mat, F, m, pin


@pytest.fixture(scope="module")
def bar_pose(bar):
    """Large-deflection quasistatic pose of the bar under 2 g (tip drops 0.28 m, 28% of L)."""
    X, T, mat, F, _, pin = bar
    sim = Simulation(X, T, mat, SimSettings(gravity=(0.0, 0.0, -2 * 9.81)), pinned=pin, fem=F)
    sim.solve_quasistatic()
    return sim.x.copy()


@pytest.fixture(scope="module")
def bar_modes(bar):
    _, _, _, F, m, pin = bar
    return ss.modal_basis(F, m, pin, k=6)


# ---------------------------------------------------------------------------------------- POD


def test_pod_recovers_exact_low_rank_data(rng):
    X, T = grid_tetmesh((1.0, 0.5, 0.5), (4, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    n, r = len(X), 5
    pinned = [0, 1, 2]
    B = random_m_basis(rng, m, r, pinned)
    C = rng.standard_normal((40, r)) * np.array([1.0, 0.5, 0.2, 0.1, 0.05]) * 1e-2
    D = (C @ B.T).reshape(-1, n, 3)
    S = ss.mass_weighted_pod(D, m, pinned, tolerance=1e-9, X=X)
    assert S.k == r and S.kind == "pod"
    np.testing.assert_allclose(m_gram(S), np.eye(r), atol=1e-12)
    assert S.reconstruction_error(X + D) < 1e-12
    # same span as the generating basis: projecting B onto U loses nothing
    Pb = S.U @ (S.U.T @ (np.repeat(m, 3)[:, None] * B))
    np.testing.assert_allclose(Pb, B, atol=1e-10)
    # POD coefficients are ordered by singular value
    s = np.array(S.info["singular_values"])
    assert np.all(np.diff(s) <= 0) and s.size == r
    assert S.info["energy_captured"][-1] == pytest.approx(1.0)
    # k given directly gives the same subspace
    S2 = ss.mass_weighted_pod(D, m, pinned, k=r, X=X)
    np.testing.assert_allclose(
        np.abs(S2.U.T @ (np.repeat(m, 3)[:, None] * S.U)), np.eye(r), atol=1e-10
    )


def test_pod_tolerance_search_beyond_the_first_block(rng):
    """k = 45 > 32: the refined block of singular vectors must grow during the search."""
    X, T = grid_tetmesh((1.0, 0.5, 0.5), (4, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    r = 45
    B = random_m_basis(rng, m, r)
    C = rng.standard_normal((80, r)) * 0.9 ** np.arange(r) * 1e-2
    D = (C @ B.T).reshape(-1, len(X), 3)
    S = ss.mass_weighted_pod(D, m, tolerance=1e-10, X=X)
    assert S.k == r
    assert S.reconstruction_error(X + D) < 1e-10
    np.testing.assert_allclose(m_gram(S), np.eye(r), atol=1e-10)
    assert S.truncated(r - 1).reconstruction_error(X + D) > 1e-6


def smooth_displacements(rng, X, F, decay=0.6):
    """Frames of smooth random fields (products of sines) with decaying amplitudes, metres."""
    n = len(X)
    L = X.max(0) - X.min(0)
    D = np.zeros((F, n, 3))
    for j in range(20):
        freq = rng.integers(0, 3, size=3)
        phase = rng.uniform(0, np.pi, size=3)
        field = np.prod(np.sin(np.pi * freq * X / L + phase), axis=1)
        direction = rng.standard_normal(3)
        coeff = rng.standard_normal(F) * 0.02 * decay**j
        D += coeff[:, None, None] * (field[:, None] * direction)[None]
    return D


def test_pod_tolerance_picks_smallest_k_and_holds_on_validation(rng):
    X, T = grid_tetmesh((1.0, 0.4, 0.4), (5, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    D = smooth_displacements(rng, X, 60)
    train, val = D[:40], D[40:]
    tol = 1e-3
    S = ss.mass_weighted_pod(train, m, tolerance=tol, validation=val, X=X)
    assert S.reconstruction_error(X + train) <= tol
    assert S.reconstruction_error(X + val) <= tol
    assert S.info["max_error"] == pytest.approx(S.reconstruction_error(X + train), rel=1e-10)
    assert S.info["max_error_validation"] == pytest.approx(
        S.reconstruction_error(X + val), rel=1e-10
    )
    # smallest: one vector less misses the tolerance on training or validation data
    Sm = S.truncated(S.k - 1)
    assert max(Sm.reconstruction_error(X + train), Sm.reconstruction_error(X + val)) > tol
    # validation can only make the basis larger
    S_train = ss.mass_weighted_pod(train, m, tolerance=tol, X=X)
    assert S_train.k <= S.k
    assert S_train.reconstruction_error(X + train) <= tol
    assert S_train.truncated(S_train.k - 1).reconstruction_error(X + train) > tol


def test_pod_error_decreases_with_k_and_eckart_young(rng):
    X, T = grid_tetmesh((1.0, 0.4, 0.4), (5, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    D = smooth_displacements(rng, X, 50)
    S = ss.mass_weighted_pod(D, m, k=15, X=X)
    curve = S.error_curve(X + D)
    assert curve[0] == pytest.approx(np.sqrt((D**2).sum(-1).max()))
    assert np.all(np.diff(curve) <= 1e-12)
    assert curve[-1] < 0.05 * curve[0]
    # total M-weighted residual of the k-term POD = sum of the discarded s^2 (Eckart-Young)
    s = np.array(S.info["singular_values"])
    m_dof = np.repeat(m, 3)
    total = np.sum(D.reshape(len(D), -1) ** 2 * m_dof)
    sr = np.linalg.svd(D.reshape(len(D), -1) * np.sqrt(m_dof), compute_uv=False)
    np.testing.assert_allclose(s, sr[:15], rtol=1e-10)
    for k in (1, 4, 9, 15):
        Sk = S.truncated(k)
        R = (D - (Sk.project(X + D) - X)).reshape(len(D), -1)
        assert np.sum(R * R * m_dof) == pytest.approx(total - np.sum(s[:k] ** 2), rel=1e-9)
        assert np.sum(R * R * m_dof) == pytest.approx(np.sum(sr[k:] ** 2), rel=1e-9)


def test_pod_many_frames_matches_few_frames_path(rng):
    """F > 3n uses the 3n x 3n Gram matrix, F < 3n the F x F one: same subspace."""
    X, T = grid_tetmesh((1.0, 1.0, 1.0), (1, 1, 1))  # 8 vertices, 24 DOFs
    m = fem.mass_matrix(X, T, RHO)
    D = rng.standard_normal((100, 8, 3)) * np.linspace(1.0, 0.01, 24).reshape(8, 3) * 1e-2
    S_many = ss.mass_weighted_pod(D, m, k=6)
    S_few = ss.mass_weighted_pod(D[:20], m, k=6)
    for S in (S_many, S_few):
        np.testing.assert_allclose(m_gram(S), np.eye(6), atol=1e-12)
    # against a dense reference SVD of M^1/2 D^T
    sq = np.sqrt(np.repeat(m, 3))
    Vr, sr, _ = np.linalg.svd((D.reshape(100, -1) * sq).T, full_matrices=False)
    np.testing.assert_allclose(S_many.info["singular_values"][:6], sr[:6], rtol=1e-10)
    P_ref = (Vr[:, :6] / sq[:, None]) @ (Vr[:, :6] * sq[:, None]).T
    P = S_many.U @ S_many._UtM
    np.testing.assert_allclose(P, P_ref, atol=1e-9)


def test_pod_pinned_vertices_stay_at_rest(rng):
    X, T = grid_tetmesh((1.0, 0.5, 0.5), (4, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    pin = np.flatnonzero(X[:, 0] < 1e-9)
    D = smooth_displacements(rng, X, 30)  # moves the pinned vertices too
    S = ss.mass_weighted_pod(D, m, pin, k=8, X=X)
    pdofs = (3 * pin[:, None] + np.arange(3)).ravel()
    assert np.all(S.U[pdofs] == 0.0)
    q = rng.standard_normal((5, S.k))
    x = S.decode(q)
    assert np.all(x[:, pin] == X[pin])


def test_encode_decode_round_trip_and_shapes(rng):
    X, T = grid_tetmesh((1.0, 0.5, 0.5), (4, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    S = ss.mass_weighted_pod(smooth_displacements(rng, X, 30), m, k=7, X=X)
    q = rng.standard_normal(7)
    assert S.decode(q).shape == (len(X), 3)
    np.testing.assert_allclose(S.encode(S.decode(q)), q, atol=1e-12)
    Q = rng.standard_normal((4, 7))
    xb = S.decode(Q)
    assert xb.shape == (4, len(X), 3)
    np.testing.assert_allclose(S.encode(xb), Q, atol=1e-12)
    np.testing.assert_allclose(S.encode(X), np.zeros(7), atol=1e-15)
    # encode is the M-orthogonal projection: the residual is M-orthogonal to the basis
    x = X + rng.standard_normal(X.shape) * 0.01
    r = (x - S.project(x)).ravel()
    np.testing.assert_allclose(S.U.T @ (np.repeat(m, 3) * r), 0.0, atol=1e-14)
    with pytest.raises(ValueError, match="q must have shape"):
        S.decode(np.zeros(3))
    with pytest.raises(ValueError, match="positions must have shape"):
        S.encode(np.zeros((3, 3)))


def test_pod_errors(rng):
    X, T = grid_tetmesh((1.0, 0.5, 0.5), (2, 1, 1))
    m = fem.mass_matrix(X, T, RHO)
    n = len(X)
    B = random_m_basis(rng, m, 3)
    D = (rng.standard_normal((10, 3)) @ B.T).reshape(-1, n, 3) * 1e-2
    D_noisy = D + rng.standard_normal(D.shape) * 1e-3
    with pytest.raises(NeuralRomError, match=r"cannot be met.*best maximum.*raise max_k"):
        ss.mass_weighted_pod(D_noisy, m, tolerance=1e-9, max_k=4)
    with pytest.raises(NeuralRomError, match="round-off"):
        ss.mass_weighted_pod(D_noisy, m, tolerance=1e-300)
    S = ss.mass_weighted_pod(D_noisy, m, tolerance=1e-9)  # 10 frames: k = 10 is exact
    assert S.k == 10
    with pytest.raises(NeuralRomError, match="only 3 independent"):
        ss.mass_weighted_pod(D, m, k=5)
    with pytest.raises(NeuralRomError, match="never deforms"):
        ss.mass_weighted_pod(np.zeros((4, n, 3)), m, k=1)
    with pytest.raises(ValueError, match="exactly one of k"):
        ss.mass_weighted_pod(D, m)
    with pytest.raises(ValueError, match="exactly one of k"):
        ss.mass_weighted_pod(D, m, k=2, tolerance=1e-3)
    with pytest.raises(MeshError, match="mass"):
        ss.mass_weighted_pod(D, np.zeros(n), k=2)
    with pytest.raises(MeshError, match="out of range"):
        ss.mass_weighted_pod(D, m, [n + 3], k=2)
    bad = D.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(NeuralRomError, match="NaN"):
        ss.mass_weighted_pod(bad, m, k=2)


def test_to_arrays_round_trip_through_npz(tmp_path, rng):
    X, T = grid_tetmesh((1.0, 0.5, 0.5), (4, 2, 2))
    m = fem.mass_matrix(X, T, RHO)
    S = ss.mass_weighted_pod(smooth_displacements(rng, X, 20), m, [0, 1], tolerance=1e-3, X=X)
    d = S.to_arrays()
    arrays = {k: v for k, v in d.items() if isinstance(v, np.ndarray)}
    np.savez(
        tmp_path / "sub.npz",
        **arrays,
        meta=np.array(json.dumps({"kind": d["kind"], "info": d["info"]})),
    )
    with np.load(tmp_path / "sub.npz", allow_pickle=False) as z:
        loaded = {k: z[k] for k in z.files}
    meta = json.loads(loaded.pop("meta").item())
    S2 = ss.Subspace.from_arrays({**loaded, **meta})
    assert S2.kind == "pod" and S2.k == S.k and S2.info == d["info"]
    np.testing.assert_array_equal(S2.U, S.U)
    np.testing.assert_array_equal(S2.pinned, S.pinned)
    q = rng.standard_normal(S.k)
    np.testing.assert_array_equal(S2.decode(q), S.decode(q))
    # kind/info as 0-d string arrays, as np.load returns them
    S3 = ss.Subspace.from_arrays(
        {**arrays, "kind": np.array("pod"), "info": np.array(json.dumps(d["info"]))}
    )
    assert S3.info == d["info"]
    with pytest.raises(CacheError, match="not mass-orthonormal"):
        ss.Subspace.from_arrays({**d, "mass": 2.0 * d["mass"]})
    with pytest.raises(CacheError, match="unreadable"):
        ss.Subspace.from_arrays({k: v for k, v in d.items() if k != "U"})
    with pytest.raises(CacheError, match="unreadable"):
        ss.Subspace.from_arrays({**d, "U": d["U"][:-3]})


# -------------------------------------------------------------------------------------- modal


def test_modal_eigenpairs_and_dense_reference(bar):
    X, _, _, F, m, pin = bar
    S = ss.modal_basis(F, m, pin, k=8)  # 540 free DOFs: the sparse shift-invert path
    assert S.kind == "modal" and S.k == 8 and S.info["n_rigid"] == 0
    K = F.hessian(X, project=False)
    m_dof = np.repeat(m, 3)
    lam = np.array(S.info["eigenvalues"])
    free = np.setdiff1d(np.arange(3 * len(X)), (3 * pin[:, None] + np.arange(3)).ravel())
    KU = (K @ S.U)[free]  # the pinned rows hold the support reactions
    R = KU - (m_dof[:, None] * S.U * lam)[free]
    assert np.max(np.linalg.norm(R, axis=0) / np.linalg.norm(KU, axis=0)) < 1e-8
    np.testing.assert_allclose(m_gram(S), np.eye(8), atol=1e-10)
    np.testing.assert_allclose(S.U.T @ (K @ S.U), np.diag(lam), atol=1e-8 * lam.max())
    assert np.all(S.U[(3 * pin[:, None] + np.arange(3)).ravel()] == 0.0)
    ref = sla.eigh(
        K[free][:, free].toarray(), np.diag(m_dof[free]), eigvals_only=True, subset_by_index=[0, 7]
    )
    np.testing.assert_allclose(lam, ref, rtol=1e-9)
    np.testing.assert_allclose(S.info["frequencies_hz"], np.sqrt(ref) / (2 * np.pi), rtol=1e-9)


def test_cantilever_frequencies_vs_euler_bernoulli():
    """First bending frequency of a clamped-free bar, f1 = 1.875^2/(2 pi) sqrt(EI/(rho A L^4)).

    Measured on this 30 x 4 x 4 grid (2880 tets, nu = 0.3): f/f_EB = 1.109 and 1.184 for the
    two bending modes (linear tets are stiff in bending; the Kuhn split makes the two
    diagonal bending directions differ by ~7%; both converge to 1 as the mesh is refined:
    1.044 / 1.081 at 50 x 6 x 6)."""
    X, T = grid_tetmesh((L_BAR, H_BAR, H_BAR), (30, 4, 4))
    F = fem.TetFEM(X, T, fem.Material(E_BAR, 0.3, RHO))
    m = fem.mass_matrix(X, T, RHO)
    pin = np.flatnonzero(X[:, 0] < 1e-9)
    S = ss.modal_basis(F, m, pin, k=4)
    f = np.array(S.info["frequencies_hz"])
    A, I = H_BAR**2, H_BAR**4 / 12
    f_eb = 1.875**2 / (2 * np.pi) * np.sqrt(E_BAR * I / (RHO * A * L_BAR**4))
    assert 1.0 < f[0] / f_eb < 1.2
    assert 1.0 < f[1] / f_eb < 1.2
    assert (f[1] - f[0]) / f[0] < 0.08  # square section: two near-equal bending frequencies
    # both are transverse bending modes (tip moves in y-z, not along the bar)
    tip = X[:, 0] > L_BAR - 1e-9
    for j in range(2):
        u = S.U[:, j].reshape(-1, 3)[tip].mean(0)
        assert np.hypot(u[1], u[2]) > 20 * abs(u[0])
    # second bending family ~ (4.694/1.875)^2 = 6.27 times the first (Euler-Bernoulli)
    assert f[2] / f[0] == pytest.approx(6.27, rel=0.1)


def test_free_body_rigid_modes_come_first():
    X, T = grid_tetmesh((0.6, 0.4, 0.3), (5, 4, 3))  # 360 DOFs: sparse path
    F = fem.TetFEM(X, T, fem.Material(1e5, 0.3, RHO))
    m = fem.mass_matrix(X, T, RHO)
    S = ss.modal_basis(F, m, k=5)
    assert S.k == 11 and S.info["n_rigid"] == 6 and S.info["n_modes"] == 5
    np.testing.assert_allclose(m_gram(S), np.eye(11), atol=1e-10)
    lam = np.array(S.info["eigenvalues"])
    assert np.all(np.abs(lam[:6]) < 1e-9 * lam[6])
    assert np.all(np.diff(lam[6:]) >= 0) and lam[6] > 0
    K = F.hessian(X, project=False)
    assert np.max(np.abs(K @ S.U[:, :6])) < 1e-8 * np.max(np.abs(K @ S.U[:, 6:]))
    # a translation and an infinitesimal rotation are represented exactly
    c = (m[:, None] * X).sum(0) / m.sum()
    for x in (X + np.array([0.3, -0.2, 1.0]), X + 1e-3 * np.cross([0.2, 0.5, -1.0], X - c)):
        assert S.reconstruction_error(x) < 1e-12
    # include_rigid=False: only the deformation modes
    S_nr = ss.modal_basis(F, m, k=5, include_rigid=False)
    assert S_nr.k == 5 and S_nr.info["n_rigid"] == 0
    np.testing.assert_allclose(S_nr.info["eigenvalues"], lam[6:], rtol=1e-8)
    with pytest.raises(ValueError, match="free body"):
        ss.modal_basis(F, m, [0], k=3, include_rigid=True)


def test_modal_errors():
    X1, T1 = grid_tetmesh((0.5, 0.5, 0.5), (2, 2, 2))
    X = np.concatenate([X1, X1 + [2.0, 0.0, 0.0]])
    T = np.concatenate([T1, T1 + len(X1)])
    F = fem.TetFEM(X, T, fem.Material(1e5, 0.3, RHO))
    m = fem.mass_matrix(X, T, RHO)
    with pytest.raises(MeshError, match="disconnected pieces"):
        ss.modal_basis(F, m, k=3)
    with pytest.raises(NeuralRomError, match="free degrees of freedom"):
        ss.modal_basis(F, m, np.arange(len(X) - 2), k=10)


# ---------------------------------------------------------------------------- modal derivatives


def test_modal_derivatives_are_symmetric_to_second_order(bar, bar_modes):
    X, _, _, F, _, pin = bar
    asym = []
    for eps in (1e-3, 1e-4):
        Pd = ss.modal_derivative_vectors(F, bar_modes, eps=eps)
        assert Pd.shape == (6, 6, 3 * len(X))
        asym.append(np.max(np.abs(Pd - Pd.transpose(1, 0, 2))) / np.max(np.abs(Pd)))
    # dK/dq_i Phi_j is the third derivative of the energy: symmetric in i, j. The finite
    # difference error is O(eps^2): measured 7.4e-4 at 1e-3 and 7.4e-6 at 1e-4.
    assert asym[0] < 2e-3
    assert asym[1] < 2e-5
    assert asym[0] / asym[1] == pytest.approx(100.0, rel=0.2)
    # Phi_ii is the (quadratic) stretch of a bending mode: it solves K Phi = -dK/dq_i Phi_i
    K = F.hessian(X, project=False)
    free = np.setdiff1d(np.arange(3 * len(X)), (3 * pin[:, None] + np.arange(3)).ravel())
    phi = bar_modes.U[:, 0]
    h = 1e-6
    d = (h * phi).reshape(-1, 3)
    dK = (F.hessian(X + d, project=False) - F.hessian(X - d, project=False)) / (2 * h)
    res = (K @ Pd[0, 0] + dK @ phi)[free]
    assert np.linalg.norm(res) < 1e-6 * np.linalg.norm((dK @ phi)[free])


def test_modal_derivatives_capture_large_deflection(bar, bar_modes, bar_pose):
    """Barbič and James 2005: linear modes + derivatives represent large bending far better
    than the same number of linear modes. Measured max per-vertex errors (2 g, tip drop 0.28 m):
    6 modes 18 mm, 12 modes 8.5 mm, 6 modes + 6 derivatives 0.64 mm, + all 21: 0.028 mm."""
    X, _, _, F, m, pin = bar
    x = bar_pose
    tip_drop = X[:, 2].mean() - x[X[:, 0] > L_BAR - 1e-9, 2].mean()
    assert tip_drop > 0.25  # a large deflection
    MD = ss.modal_derivatives(F, bar_modes, m, count=6)
    assert MD.kind == "modal+derivatives" and MD.k == 12 and MD.info["n_derivatives"] == 6
    assert MD.info["derivative_pairs"][0] == [0, 0]
    np.testing.assert_allclose(m_gram(MD), np.eye(12), atol=1e-10)
    np.testing.assert_array_equal(MD.U[:, :6], bar_modes.U)
    assert np.all(MD.U[(3 * pin[:, None] + np.arange(3)).ravel()] == 0.0)
    linear12 = ss.modal_basis(F, m, pin, k=12)
    e6 = bar_modes.reconstruction_error(x)
    e12 = linear12.reconstruction_error(x)
    e_md = MD.reconstruction_error(x)
    assert e_md < 0.25 * e12 < e6
    # all 21 derivatives: even better
    MD_all = ss.modal_derivatives(F, bar_modes)
    assert MD_all.info["n_derivatives"] == 21 and MD_all.reconstruction_error(x) < e_md


def test_modal_derivatives_of_a_free_body():
    X, T = grid_tetmesh((0.8, 0.2, 0.2), (8, 2, 2))
    F = fem.TetFEM(X, T, fem.Material(1e5, 0.3, RHO))
    m = fem.mass_matrix(X, T, RHO)
    modes = ss.modal_basis(F, m, k=4)
    Pd = ss.modal_derivative_vectors(F, modes)
    assert np.all(np.isfinite(Pd))
    m_dof = np.repeat(m, 3)
    R = modes.U[:, :6]
    # the bordered solve makes every derivative M-orthogonal to the rigid modes
    assert (
        np.max(np.abs(R.T @ (m_dof[:, None] * Pd.reshape(-1, 3 * len(X)).T)))
        < 1e-8 * np.abs(Pd).max()
    )
    asym = np.max(np.abs(Pd - Pd.transpose(1, 0, 2))) / np.max(np.abs(Pd))
    assert asym < 1e-5
    # K Phi_00 = -(dK/dq_0 Phi_0) minus its rigid part, at every DOF (no support reactions)
    K = F.hessian(X, project=False)
    phi = modes.U[:, 6]
    h = 1e-6
    d = (h * phi).reshape(-1, 3)
    f = -(F.hessian(X + d, project=False) - F.hessian(X - d, project=False)) @ phi / (2 * h)
    f -= m_dof * (R @ (R.T @ f))
    assert np.linalg.norm(K @ Pd[0, 0] - f) < 1e-6 * np.linalg.norm(f)
    MD = ss.modal_derivatives(F, modes, count=3)
    assert MD.k == 13 and MD.info["n_rigid"] == 6
    np.testing.assert_allclose(m_gram(MD), np.eye(13), atol=1e-10)
    with pytest.raises(ValueError, match="mass differs"):
        ss.modal_derivatives(F, modes, 2 * m)
