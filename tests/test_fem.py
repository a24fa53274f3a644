"""Tests of core.fem: derivatives against finite differences, invariances, patch test,
small-strain limit, mass, assembly, materials and error messages."""

import itertools
import json

import numpy as np
import pytest
import scipy.sparse as sp
from neural_rom.core.errors import MaterialError, MeshError
from neural_rom.core.physics import fem

MODELS = fem.MODELS


# ------------------------------------------------------------------------------ meshes


def grid_mesh(k=2, h=0.5):
    """(k+1)^3 vertices, 6 positively oriented tets per cube (Kuhn split)."""
    r = np.arange(k + 1)
    X = np.stack(np.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3) * h
    cubes = np.stack(np.meshgrid(*(np.arange(k),) * 3, indexing="ij"), -1).reshape(-1, 3)

    def vid(c):
        return (c[:, 0] * (k + 1) + c[:, 1]) * (k + 1) + c[:, 2]

    tets = []
    for perm in itertools.permutations(range(3)):
        corner = np.zeros(3, dtype=int)
        path = [vid(cubes + corner)]
        for ax in perm:
            corner[ax] = 1
            path.append(vid(cubes + corner))
        tets.append(np.stack(path, 1))
    T = np.concatenate(tets)
    P = X[T]
    neg = np.linalg.det(P[:, 1:] - P[:, :1]) < 0
    T[neg] = T[neg][:, [0, 2, 1, 3]]
    return X, T


REF_TET = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]) * 0.3


def rotation(rng):
    q = rng.standard_normal(4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def soup_mesh(rng):
    """Disjoint tets with chosen deformation gradients: generic, pure rotation, rotated
    stretch, inverted (det F < 0, well separated singular values), compressed."""
    Q1, Q2 = rotation(rng), rotation(rng)
    Fs = [
        np.eye(3) + 0.3 * rng.standard_normal((3, 3)),
        Q1,
        Q1 @ np.diag([1.3, 0.8, 1.1]) @ Q2,
        Q2 @ np.diag([1.2, 0.9, -0.4]) @ Q1,
        np.diag([0.7, 0.8, 0.75]),
    ]
    X, x, T = [], [], []
    for i, F in enumerate(Fs):
        Xe = REF_TET + np.array([i, 0, 0])
        X.append(Xe)
        x.append(Xe @ F.T + rng.standard_normal(3))
        T.append(np.arange(4) + 4 * i)
    return np.concatenate(X), np.concatenate(x), np.array(T)


def material(model, rng=None, m=None):
    if rng is None:
        return fem.Material(1e4, 0.35, 1000.0, model=model)
    return fem.Material(
        rng.uniform(5e3, 2e4, m), rng.uniform(0.1, 0.45, m), rng.uniform(900, 1100, m), model
    )


def random_actions(rng, m, scale=0.2):
    return scale * rng.standard_normal((m, 6))


def make_fem(model, X, T, rng, actions=True):
    f = fem.TetFEM(X, T, material(model, rng, T.shape[0]))
    if model == "shape_targeting" and actions:
        f.set_actions(random_actions(rng, T.shape[0]))
    return f


def cases(rng):
    Xs, xs, Ts = soup_mesh(rng)
    Xg, Tg = grid_mesh(2)
    xg = Xg + 0.08 * rng.standard_normal(Xg.shape)
    return [(Xs, xs, Ts), (Xg, xg, Tg)]


# ------------------------------------------------------------------------------ derivatives


def fd_gradient(f, x, h):
    g = np.zeros(x.size)
    xf = x.ravel().copy()
    for i in range(x.size):
        xf[i] += h
        ep = f(xf.reshape(x.shape))
        xf[i] -= 2 * h
        em = f(xf.reshape(x.shape))
        xf[i] += h
        g[i] = (ep - em) / (2 * h)
    return g.reshape(x.shape)


def fd_jacobian(f, x, h):
    xf = x.ravel().copy()
    cols = []
    for i in range(x.size):
        xf[i] += h
        gp = f(xf.reshape(x.shape)).ravel()
        xf[i] -= 2 * h
        gm = f(xf.reshape(x.shape)).ravel()
        xf[i] += h
        cols.append((gp - gm) / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("model", MODELS)
def test_gradient_matches_finite_differences(model, rng):
    for X, x, T in cases(rng):
        f = make_fem(model, X, T, rng)
        g = f.gradient(x)
        g_fd = fd_gradient(f.energy, x, 1e-6)
        assert np.abs(g - g_fd).max() <= 1e-6 * np.abs(g).max()
        assert np.abs(g).max() > 1.0  # a real test: forces are not trivially zero


@pytest.mark.parametrize("model", MODELS)
def test_hessian_matches_finite_differences(model, rng):
    for X, x, T in cases(rng):
        f = make_fem(model, X, T, rng)
        H = f.hessian(x, project=False).toarray()
        H_fd = fd_jacobian(f.gradient, x, 1e-6)
        assert np.abs(H - H_fd).max() <= 1e-6 * np.abs(H).max()
        assert np.abs(H - H.T).max() <= 1e-10 * np.abs(H).max()


@pytest.mark.parametrize("model", MODELS)
def test_fused_and_element_apis_agree(model, rng):
    X, x, T = cases(rng)[1]
    f = make_fem(model, X, T, rng)
    E, g, H = f.energy_gradient_hessian(x, project=True)
    assert np.isclose(E, f.energy(x), rtol=1e-12)
    np.testing.assert_allclose(g, f.gradient(x), rtol=1e-12, atol=1e-12 * np.abs(g).max())
    np.testing.assert_allclose(H.toarray(), f.hessian(x).toarray(), atol=1e-12 * abs(H).max())
    # Cubature: weighted subset sums.
    sub = np.array([0, 3, 7, 20, 31])
    w = rng.uniform(0.5, 3.0, sub.size)
    Es, gs, Hs = f.energy_gradient_hessian(x, elements=sub, weights=w, project=False)
    assert np.isclose(Es, (w * f.element_energy(x)[sub]).sum(), rtol=1e-12)
    ge = f.element_gradients(x, sub) * w[:, None, None]
    g_ref = np.zeros_like(x)
    np.add.at(g_ref, T[sub], ge)
    np.testing.assert_allclose(gs, g_ref, atol=1e-12 * np.abs(g_ref).max())
    He = f.element_hessians(x, sub, project=False) * w[:, None, None]
    np.testing.assert_allclose(
        Hs.toarray(), naive_assembly(T[sub], He, X.shape[0]).toarray(), atol=1e-9
    )
    assert Hs.nnz == H.nnz  # same pattern, so a solver can reuse its symbolic analysis
    Eg, gg = f.energy_gradient(x, elements=sub, weights=w)
    assert Eg == pytest.approx(Es) and np.allclose(gg, gs)
    # element gradients sum to the global gradient
    g_sum = np.zeros_like(x)
    np.add.at(g_sum, T, f.element_gradients(x))
    np.testing.assert_allclose(g_sum, g, atol=1e-12 * np.abs(g).max())


def test_action_derivatives_match_finite_differences(rng):
    for X, x, T in cases(rng):
        f = make_fem("shape_targeting", X, T, rng)
        a0 = f.actions.copy()

        def energy_of_a(a, f=f, x=x):
            f.set_actions(a)
            return f.energy(x)

        def gradient_of_a(a, f=f, x=x):
            f.set_actions(a)
            return f.gradient(x)

        ga_fd = fd_gradient(energy_of_a, a0, 1e-6)
        Hxa_fd = fd_jacobian(gradient_of_a, a0, 1e-6)
        f.set_actions(a0)
        ga = f.action_gradient(x)
        Hxa = f.mixed_hessian(x)
        assert Hxa.shape == (3 * X.shape[0], 6 * T.shape[0])
        assert np.abs(ga - ga_fd).max() <= 1e-6 * np.abs(ga).max()
        assert np.abs(Hxa.toarray() - Hxa_fd).max() <= 1e-6 * abs(Hxa).max()


def test_action_api_rejects_other_models(rng):
    X, x, T = cases(rng)[1]
    f = make_fem("corotated", X, T, rng)
    with pytest.raises(ValueError, match="shape_targeting"):
        f.action_gradient(x)
    with pytest.raises(ValueError, match="shape_targeting"):
        f.set_actions(np.zeros((T.shape[0], 6)))


# ------------------------------------------------------------------------------ projection


def dF_dx(B):
    """The 9 x 12 matrix D with vec(F) = D x_e (row-major F, local DOF 3 v + axis)."""
    D = np.zeros((3, 3, 4, 3))
    for d in range(3):
        D[d, :, :, d] = B.T
    return D.reshape(9, 12)


@pytest.mark.parametrize("model", MODELS)
def test_projected_hessian_is_psd_and_exact_projection(model, rng):
    soup, (Xg, xg, Tg) = cases(rng)
    for X, x, T in (soup, (Xg, 1.3 * xg - 0.2 * Xg, Tg)):
        f = make_fem(model, X, T, rng)
        Hp = f.element_hessians(x, project=True)
        Hu = f.element_hessians(x, project=False)
        scale = np.abs(Hu).max()
        assert np.linalg.eigvalsh(Hp).min() >= -1e-8 * scale
        assert np.linalg.eigvalsh(f.hessian(x).toarray()).min() >= -1e-8 * scale
        assert np.linalg.eigvalsh(Hu).min() < -1e-3 * scale  # the test state needs projecting
        # Independent reference: project the 9 x 9 dPsi2/dF2 (by finite differences of P)
        # with a dense eigendecomposition, then map with D.
        for j in range(T.shape[0]):
            D = dF_dx(f.B[j])
            HF = np.linalg.pinv(D.T) @ Hu[j] @ np.linalg.pinv(D)  # D has full row rank
            HF = 0.5 * (HF + HF.T)
            w, Q = np.linalg.eigh(HF)
            ref = D.T @ (Q * np.maximum(w, 0)) @ Q.T @ D
            np.testing.assert_allclose(Hp[j], ref, atol=1e-7 * scale)


@pytest.mark.parametrize("model", MODELS)
def test_projection_is_identity_where_psd(model, rng):
    X, T = grid_mesh(2)
    f = make_fem(model, X, T, rng, actions=False)
    Q = rotation(rng)
    states = [X, X @ Q.T + 1.0]
    if model != "shape_targeting":
        states.append(1.02 * X)  # mild uniform stretch: all eigenvalues positive
    for x in states:
        Hu = f.element_hessians(x, project=False)
        assert np.linalg.eigvalsh(Hu).min() >= -1e-9 * np.abs(Hu).max()
        np.testing.assert_allclose(
            f.element_hessians(x, project=True), Hu, atol=1e-10 * np.abs(Hu).max()
        )


# ------------------------------------------------------------------------------ invariances


@pytest.mark.parametrize("model", MODELS)
def test_rotation_invariance(model, rng):
    for X, x, T in cases(rng):
        f = make_fem(model, X, T, rng)
        Q = rotation(rng)
        xr = x @ Q.T + rng.standard_normal(3)
        E, g = f.energy(x), f.gradient(x)
        assert f.energy(xr) == pytest.approx(E, rel=1e-10)
        np.testing.assert_allclose(f.gradient(xr), g @ Q.T, atol=1e-9 * np.abs(g).max())
        # Hessian rotates too: H(Qx) = Qb H(x) Qb^T
        Qb = sp.kron(sp.eye(X.shape[0]), Q).toarray()
        H = f.hessian(x, project=False).toarray()
        np.testing.assert_allclose(
            f.hessian(xr, project=False).toarray(), Qb @ H @ Qb.T, atol=1e-8 * np.abs(H).max()
        )


@pytest.mark.parametrize("model", MODELS)
def test_rest_and_rigid_motion_cost_nothing(model, rng):
    X, T = grid_mesh(2)
    f = make_fem(model, X, T, rng, actions=False)
    scale = f.mu.max() * f.volume.sum()
    Q = rotation(rng)
    for x in (X, X @ Q.T + rng.standard_normal(3)):
        assert abs(f.energy(x)) <= 1e-12 * scale
        assert np.abs(f.gradient(x)).max() <= 1e-10 * f.mu.max() * 0.25


def test_shape_targeting_rest_shape_is_the_target(rng):
    """With the same action everywhere, x = Q S X + c is stress-free (S = I: ARAP rest)."""
    X, T = grid_mesh(2)
    b = np.array([0.2, 0.05, -0.1, -0.15, 0.08, 0.1])
    f = fem.TetFEM(X, T, material("shape_targeting"), actions=np.tile(b, (T.shape[0], 1)))
    S = fem.actions_to_shape_targets(b)
    np.testing.assert_allclose(S, S.T)
    Q = rotation(rng)
    x = X @ (Q @ S).T + 0.5
    assert abs(f.energy(x)) <= 1e-12 * f.mu[0] * f.volume.sum()
    assert np.abs(f.gradient(x)).max() <= 1e-9 * f.mu[0]
    assert np.abs(f.action_gradient(x)).max() <= 1e-9 * f.mu[0]
    assert f.energy(X) > 1e-3 * f.mu[0] * f.volume.sum()  # the undeformed mesh is now stressed


@pytest.mark.parametrize("model", MODELS)
def test_patch_test_affine_deformation(model, rng):
    """Under x = A X + c the stress is uniform, so element forces cancel at interior vertices."""
    k = 3
    X, T = grid_mesh(k, h=0.2)
    f = fem.TetFEM(X, T, material(model))  # homogeneous material
    if model == "shape_targeting":
        f.set_actions(np.tile(random_actions(rng, 1), (T.shape[0], 1)))
    A = np.eye(3) + 0.3 * rng.standard_normal((3, 3))
    x = X @ A.T + rng.standard_normal(3)
    g = f.gradient(x)
    interior = np.all((X > 1e-9) & (X < k * 0.2 - 1e-9), axis=1)
    assert interior.sum() == (k - 1) ** 3
    typical = np.abs(f.element_gradients(x)).max()
    assert typical > 1e-2
    assert np.abs(g[interior]).max() <= 1e-12 * typical
    assert np.abs(g.sum(0)).max() <= 1e-12 * typical  # net force of a closed body is zero


@pytest.mark.parametrize("model", ["stable_neohookean", "corotated"])
def test_small_strain_matches_linear_elasticity(model, rng):
    """P(I + eps) = 2 mu sym(eps) + lam tr(eps) I + O(eps^2): stress errors drop 100x when
    the strain drops 10x."""
    E, nu = 2e4, 0.3
    mat = fem.Material(E, nu, 1000.0, model)
    mu, lam = mat.lame(1)
    f = fem.TetFEM(REF_TET, np.arange(4)[None], mat)
    G = rng.standard_normal((3, 3))
    errs = []
    for s in (1e-3, 1e-4):
        eps = s * G
        x = REF_TET @ (np.eye(3) + eps).T
        # P from the gradient: g = W B P^T -> P = (g^T B)(B^T B)^-1 / W
        ge = f.element_gradients(x)[0]
        Bm = f.B[0]
        P = np.linalg.solve(Bm.T @ Bm, Bm.T @ ge).T / f.volume[0]
        sym = 0.5 * (eps + eps.T)
        sigma = 2 * mu[0] * sym + lam[0] * np.trace(eps) * np.eye(3)
        assert np.abs(P - sigma).max() < 0.05 * np.abs(sigma).max()
        errs.append(np.abs(P - sigma).max())
        # and the energy is the linear-elastic one to leading order
        W_lin = mu[0] * (sym * sym).sum() + 0.5 * lam[0] * np.trace(eps) ** 2
        assert f.energy(x) / f.volume[0] == pytest.approx(W_lin, rel=20 * s)
    assert errs[1] < errs[0] / 50


def test_stable_neohookean_inverted_and_collapsed_elements_are_finite(rng):
    f = fem.TetFEM(REF_TET, np.arange(4)[None], material("stable_neohookean"))
    for F in (np.diag([1.0, 1.0, -1.0]), np.zeros((3, 3)), np.diag([1.0, 1.0, 0.0])):
        x = REF_TET @ F.T
        E, g, H = f.energy_gradient_hessian(x)
        assert np.isfinite(E) and np.isfinite(g).all() and np.isfinite(H.toarray()).all()
        assert E > 0
    # the inverted element is pushed back: moving the apex along -grad increases det F
    x = REF_TET @ np.diag([1.0, 1.0, -0.5]).T
    g = f.gradient(x)
    assert g[3, 2] < 0


@pytest.mark.parametrize("lapack_only", [False, True])
def test_signed_svd_is_a_rotation_factorization(lapack_only, rng, monkeypatch):
    if lapack_only:  # exercise the fallback path on every matrix
        monkeypatch.setattr(fem, "_SVD_FALLBACK_RATIO", np.inf)
    Q1, Q2 = rotation(rng), rotation(rng)
    special = [
        np.eye(3),
        Q1,  # repeated singular values
        Q1 @ np.diag([2.0, 2.0, 0.5]) @ Q2,
        Q1 @ np.diag([1.0, 1.0, -1.0]) @ Q2,  # inverted with a repeated pair
        np.outer(rng.standard_normal(3), rng.standard_normal(3)),  # rank one
        np.zeros((3, 3)),
    ]
    # nearly flat, possibly inverted elements: Gram-Schmidt on F V alone loses ~1e-9 here
    for s1 in (1e-5, 1e-7, 1e-9):
        for s2 in (s1, 0.3 * s1, -s1, -0.1 * s1, 0.0):
            special += [rotation(rng) @ np.diag([1.0, s1, s2]) @ rotation(rng) for _ in range(10)]
    F = np.concatenate([np.stack(special), rng.standard_normal((200, 3, 3))])
    U, s, V = fem.signed_svd(F)
    scale = np.abs(F).max((1, 2), keepdims=True) + 1e-300
    np.testing.assert_allclose(
        (U * s[:, None, :]) @ V.transpose(0, 2, 1) / scale, F / scale, atol=1e-12
    )
    eye = np.broadcast_to(np.eye(3), F.shape)
    np.testing.assert_allclose(U.transpose(0, 2, 1) @ U, eye, atol=1e-12)
    np.testing.assert_allclose(V.transpose(0, 2, 1) @ V, eye, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(U), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(V), 1.0, atol=1e-12)
    assert np.all(s[:, 0] >= s[:, 1]) and np.all(s[:, 1] >= np.abs(s[:, 2]) - 1e-12)
    np.testing.assert_allclose(np.abs(s), np.linalg.svd(F, compute_uv=False), atol=1e-12)
    det = np.linalg.det(F)
    clear = np.abs(det) > 1e-9 * scale[:, 0, 0] ** 3
    assert np.all(np.sign(s.prod(1))[clear] == np.sign(det)[clear])


# ------------------------------------------------------------------------------ mass


def test_mass_matrices(rng):
    X, T = grid_mesh(2)
    X = X + 0.05 * rng.standard_normal(X.shape)
    rho = rng.uniform(500, 1500, T.shape[0])
    _, W = fem.rest_data(X, T)
    m_l = fem.mass_matrix(X, T, rho, lumped=True)
    assert m_l.shape == (X.shape[0],)
    assert m_l.sum() == pytest.approx((rho * W).sum(), rel=1e-12)
    M = fem.mass_matrix(X, T, rho, lumped=False)
    assert sp.isspmatrix_csr(M) and M.shape == (3 * X.shape[0],) * 2
    v = np.tile([0.3, -1.2, 2.0], X.shape[0])
    np.testing.assert_allclose(M @ v, np.repeat(m_l, 3) * v, rtol=1e-12)
    Md = M.toarray()
    np.testing.assert_allclose(Md, Md.T)
    assert np.linalg.eigvalsh(Md).min() > 0
    # kinetic energy of a rigid translation is 1/2 m |v|^2
    assert 0.5 * v @ (M @ v) == pytest.approx(0.5 * (rho * W).sum() * (0.09 + 1.44 + 4), rel=1e-12)
    # a scalar density works too
    assert fem.mass_matrix(X, T, 1000.0).sum() == pytest.approx(1000.0 * W.sum())


# ------------------------------------------------------------------------------ geometry


def test_rest_data_and_deformation_gradient(rng):
    X, T = grid_mesh(2, h=0.5)
    Dm_inv, W = fem.rest_data(X, T)
    assert W.sum() == pytest.approx(1.0)  # a unit cube
    A = rng.standard_normal((3, 3))
    F = fem.deformation_gradient(X @ A.T + 3.0, T, Dm_inv)
    np.testing.assert_allclose(F, np.broadcast_to(A, F.shape), atol=1e-12)


def test_rest_data_rejects_degenerate_and_inverted_tets():
    X, T = grid_mesh(2)
    Xbad = np.concatenate([X, [[0.1, 0.1, 0.1]]])
    flat = np.array([[0, 1, 2, 27]])  # vertices 0, 1, 2 lie on the x = 0 line with 27 off it
    Xbad[27] = [0.0, 0.0, 0.7]  # colinear with 0, 1, 2 -> zero volume
    Tbad = np.concatenate([T, flat, flat])
    with pytest.raises(MeshError, match=r"2 zero-volume tet\(s\).*48, 49.*re-tetrahedralize"):
        fem.rest_data(Xbad, Tbad)
    Tinv = T.copy()
    Tinv[[3, 5]] = Tinv[[3, 5]][:, [0, 2, 1, 3]]
    with pytest.raises(MeshError, match=r"2 inverted tet\(s\) \(first indices \[3, 5\]\)"):
        fem.TetFEM(X, Tinv, material("corotated"))
    with pytest.raises(MeshError, match="swap the last two"):
        fem.rest_data(X, T[:, [0, 1, 3, 2]])
    with pytest.raises(MeshError, match="indices"):
        fem.rest_data(X, T + 100)


# ------------------------------------------------------------------------------ assembly


def naive_assembly(T, He, n):
    dofs = (3 * T[:, :, None] + np.arange(3)).reshape(-1, 12)
    r = np.repeat(dofs, 12, axis=1).ravel()
    c = np.tile(dofs, (1, 12)).ravel()
    return sp.coo_matrix((He.ravel(), (r, c)), shape=(3 * n, 3 * n)).tocsr()


def test_hessian_assembler_matches_coo(rng):
    X, T0 = grid_mesh(3)
    n = X.shape[0] + 2  # two isolated vertices still get a diagonal slot
    T = rng.permutation(T0)
    T = T[:, rng.permutation(4)]  # any local vertex order
    He = rng.standard_normal((T.shape[0], 12, 12))
    asm = fem.HessianAssembler(T, n)
    A = asm.assemble(He)
    ref = naive_assembly(T, He, n)
    assert A.has_sorted_indices
    np.testing.assert_allclose(A.toarray(), ref.toarray(), atol=1e-12)
    assert (A - ref).nnz == 0 or abs(A - ref).max() < 1e-12
    pat = asm.pattern
    assert pat.nnz == asm.nnz and np.all(pat.data == 0)
    # exact pattern: vertex pairs sharing a tet (and the diagonal), 9 entries each
    pairs = {(a, b) for t in T for a in t for b in t} | {(i, i) for i in range(n)}
    assert asm.nnz == 9 * len(pairs)
    # subsets, diagonal and data additions
    sub = np.array([2, 5, 11])
    d = rng.uniform(1, 2, 3 * n)
    M = fem.mass_matrix(X, T0, 1000.0, lumped=False)
    M = sp.block_diag([M, sp.csr_matrix((6, 6))]).tocsr()
    B = asm.assemble(He[sub], elements=sub, add_diagonal=d, add_data=asm.data_from_matrix(M))
    ref_b = naive_assembly(T[sub], He[sub], n) + sp.diags(d) + M
    np.testing.assert_allclose(B.toarray(), ref_b.toarray(), atol=1e-12)
    # assembled matrices do not share index arrays (in-place scipy edits stay local)
    A.eliminate_zeros()
    np.testing.assert_allclose(asm.assemble(He).toarray(), ref.toarray(), atol=1e-12)
    with pytest.raises(ValueError, match="pattern"):
        asm.data_from_matrix(sp.csr_matrix(([1.0], ([0], [3 * n - 1])), shape=asm.shape))


# ------------------------------------------------------------------------------ materials


def test_material_validation_messages():
    good = fem.Material(1e4, 0.3, 1000.0)
    good.validate()
    bad = [
        (fem.Material(-1.0, 0.3, 1000.0), "Young's modulus = -1 is out of range.*> 0 Pa"),
        (fem.Material(1e4, 0.5, 1000.0), "Poisson ratio = 0.5 .*between -1 and 0.5"),
        (fem.Material(1e4, -1.0, 1000.0), "Poisson ratio"),
        (fem.Material(1e4, 0.3, 0.0), "Density = 0 .*> 0 kg/m\\^3"),
        (fem.Material(1e4, 0.3, 1000.0, "neo"), "Unknown material model 'neo'.*corotated"),
        (fem.Material(1e4, np.array([0.3, np.nan]), 1000.0), "NaN.*element 1"),
        (fem.Material(np.array([1e4, 0.0]), 0.3, 1000.0), "at element 1"),
    ]
    for mat, msg in bad:
        with pytest.raises(MaterialError, match=msg):
            mat.validate()
    with pytest.raises(MaterialError, match="3 per-element values but the mesh has 2"):
        fem.Material(np.ones(3), 0.3, 1.0).lame(2)
    with pytest.raises(MaterialError, match="Unknown material preset 'steel'.*rubber"):
        fem.Material.preset("steel")
    with pytest.raises(MaterialError, match="unknown keys \\['colour'\\]"):
        fem.Material.from_dict(
            {"youngs_modulus": 1.0, "poisson_ratio": 0.3, "density": 1.0, "colour": "red"}
        )


def test_material_lame_presets_and_json_round_trip():
    mat = fem.Material(2.6e4, 0.3, 1000.0, "corotated")
    mu, lam = mat.lame(3)
    assert mu.shape == (3,)
    np.testing.assert_allclose(mu, 1e4)
    np.testing.assert_allclose(lam, 2.6e4 * 0.3 / (1.3 * 0.4))
    for name in fem.PRESETS:
        for model in MODELS:
            m = fem.Material.preset(name, model=model)
            assert m.model == model
            assert fem.Material.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    per_elem = fem.Material(np.array([1e4, 2e4]), np.array([0.2, 0.4]), np.array([900.0, 1e3]))
    d = json.loads(json.dumps(per_elem.to_dict()))
    assert d["youngs_modulus"] == [1e4, 2e4]
    back = fem.Material.from_dict(d)
    assert back == per_elem and back.model == "stable_neohookean"
    assert back != mat


def test_element_terms_is_the_weighted_one_pass_of_the_public_parts():
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.physics.fem import Material, TetFEM

    X, T = grid_tetmesh((0.3, 0.1, 0.1), (3, 1, 1))
    fem = TetFEM(X, T, Material(youngs_modulus=1e5, poisson_ratio=0.4, density=1000.0))
    rng = np.random.default_rng(2)
    x = X + 0.02 * rng.normal(size=X.shape)
    w = rng.uniform(0.5, 2.0, len(T))
    e, ge, He = fem.element_terms(x, w, hessians=True, project=False)
    assert e == pytest.approx(float(w @ fem.element_energy(x)), rel=1e-12)
    np.testing.assert_allclose(ge, w[:, None, None] * fem.element_gradients(x), rtol=1e-12)
    np.testing.assert_allclose(
        He, w[:, None, None] * fem.element_hessians(x, project=False), rtol=1e-10, atol=1e-9
    )
    assert fem.element_terms(x)[2] is None
