"""core.hocs: decoder derivatives (multidual jet, multicomplex step) against torch autograd,
finite differences and each other; multicomplex arithmetic; the PCA-orthogonal filter."""

import cmath
import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from neural_rom.core.methods.shen import hocs
from neural_rom.core.reduced.nnet import MLP
from neural_rom.core.reduced.subspace import m_orthonormalize

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")

R, K = 4, 7  # latents, outputs
SIZES = (R, 24, 20, 20, 16, K)  # four hidden sin layers, like a (small) Shen decoder
METHODS = ("multidual", "multicomplex")
FIELDS = ("y", "J", "Jd", "Hdd", "Hd", "Sdd", "Hv")


def make_net(act: str = "sin", sizes=SIZES, seed: int = 0) -> MLP:
    rng = np.random.default_rng(seed)
    Ws, bs = [], []
    for n_in, n_out in itertools.pairwise(sizes):
        Ws.append(1.3 * rng.normal(size=(n_out, n_in)) / np.sqrt(n_in))
        bs.append(0.3 * rng.normal(size=n_out))
    return MLP(Ws, bs, [act] * (len(sizes) - 2) + ["identity"])


_TORCH_ACT = {
    "identity": lambda z: z,
    "sin": torch.sin,
    "tanh": torch.tanh,
    "softplus": torch.nn.functional.softplus,
}


def torch_fn(net: MLP):
    Ws = [torch.from_numpy(W) for W in net.W]
    bs = [torch.from_numpy(b) for b in net.b]
    acts = [_TORCH_ACT[a] for a in net.activations]

    def f(x):
        for W, b, a in zip(Ws, bs, acts):
            x = a(W @ x + b)
        return x

    return f


def torch_tensors(net: MLP, q):
    """D, J (k, r), H (k, r, r), S (k, r, r, r) by nested torch.func (reverse, then forward)."""
    f = torch_fn(net)
    jac = torch.func.jacrev(f)
    hess = torch.func.jacfwd(jac)
    third = torch.func.jacfwd(hess)
    x = torch.from_numpy(q)
    return tuple(t(x).numpy() for t in (f, jac, hess, third))


def contract(J, H, S, d, v):
    """The jet's fields from full tensors."""
    return {
        "J": J,
        "Jd": J @ d,
        "Hdd": np.einsum("kij,i,j->k", H, d, d),
        "Hd": np.einsum("kij,j->ki", H, d),
        "Sdd": np.einsum("kijl,j,l->ki", S, d, d),
        "Hv": np.einsum("kij,j->ki", H, v),
    }


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


@pytest.fixture
def point():
    rng = np.random.default_rng(1)
    return rng.normal(size=R), rng.normal(size=R), rng.normal(size=R), rng.normal(size=K)


# ----------------------------------------------------------------- multicomplex arithmetic
def test_complex_sin_at_0_3_plus_0_2i_matches_cmath_and_not_appendix_a():
    z = np.array([[0.3], [0.2]])  # components (1, i)
    s = hocs.multicomplex_sin(z).ravel()
    want = cmath.sin(0.3 + 0.2j)
    assert s[0] == pytest.approx(want.real, abs=1e-16) and s[1] == pytest.approx(
        want.imag, abs=1e-16
    )
    assert s == pytest.approx([0.3015, 0.1923], abs=5e-5)
    # Appendix A's first-order formula, sinh(a) cos(b) + i cosh(a) sinh(b), is another number
    wrong = [np.sinh(0.3) * np.cos(0.2), np.cosh(0.3) * np.sinh(0.2)]
    assert wrong == pytest.approx([0.2985, 0.2105], abs=5e-5)


def test_bicomplex_sin_matches_appendix_a_second_order_formula():
    a, b, c, d = 0.4, -0.7, 1.1, 0.3
    s = hocs.multicomplex_sin(np.array([a, b, c, d])[:, None]).ravel()
    sin, cos, sinh, cosh = np.sin, np.cos, np.sinh, np.cosh
    want = [
        sin(a) * cosh(b) * cosh(c) * cos(d) - cos(a) * sinh(b) * sinh(c) * sin(d),
        sin(a) * cosh(b) * sinh(c) * sin(d) + cos(a) * sinh(b) * cosh(c) * cos(d),
        cos(a) * cosh(b) * sinh(c) * cos(d) + sin(a) * sinh(b) * cosh(c) * sin(d),
        cos(a) * cosh(b) * cosh(c) * sin(d) - sin(a) * sinh(b) * sinh(c) * cos(d),
    ]
    np.testing.assert_allclose(s, want, rtol=1e-14, atol=1e-15)


def test_tricomplex_sin_real_part_is_appendix_a_eq_23_corrected():
    # eq. (23) as printed has 17 terms; the real part has these 16: its 10th term has
    # cosh(h) where sinh(h) belongs and its 12th is extra
    a, b, c, d, e, f, g, h = np.random.default_rng(8).normal(size=8)
    s = hocs.multicomplex_sin(np.array([a, b, c, d, e, f, g, h])[:, None])[0, 0]
    sin, cos, sinh, cosh = np.sin, np.cos, np.sinh, np.cosh
    terms = [
        sin(a) * cosh(b) * cosh(c) * cos(d) * cosh(e) * cos(f) * cos(g) * cosh(h),
        sin(a) * cosh(b) * cosh(c) * cos(d) * sinh(e) * sin(f) * sin(g) * sinh(h),
        sin(a) * cosh(b) * sinh(c) * sin(d) * cosh(e) * cos(f) * sin(g) * sinh(h),
        -sin(a) * cosh(b) * sinh(c) * sin(d) * sinh(e) * sin(f) * cos(g) * cosh(h),
        cos(a) * sinh(b) * cosh(c) * cos(d) * cosh(e) * cos(f) * sin(g) * sinh(h),
        -cos(a) * sinh(b) * cosh(c) * cos(d) * sinh(e) * sin(f) * cos(g) * cosh(h),
        -cos(a) * sinh(b) * sinh(c) * sin(d) * cosh(e) * cos(f) * cos(g) * cosh(h),
        -cos(a) * sinh(b) * sinh(c) * sin(d) * sinh(e) * sin(f) * sin(g) * sinh(h),
        -cos(a) * cosh(b) * sinh(c) * cos(d) * sinh(e) * cos(f) * sin(g) * cosh(h),
        cos(a)
        * cosh(b)
        * sinh(c)
        * cos(d)
        * cosh(e)
        * sin(f)
        * cos(g)
        * sinh(h),  # eq. 23: cosh(h)
        cos(a) * cosh(b) * cosh(c) * sin(d) * sinh(e) * cos(f) * cos(g) * sinh(h),
        cos(a) * cosh(b) * cosh(c) * sin(d) * cosh(e) * sin(f) * sin(g) * cosh(h),
        -sin(a) * sinh(b) * sinh(c) * cos(d) * sinh(e) * cos(f) * cos(g) * sinh(h),
        -sin(a) * sinh(b) * sinh(c) * cos(d) * cosh(e) * sin(f) * sin(g) * cosh(h),
        -sin(a) * sinh(b) * cosh(c) * sin(d) * sinh(e) * cos(f) * sin(g) * cosh(h),
        sin(a) * sinh(b) * cosh(c) * sin(d) * cosh(e) * sin(f) * cos(g) * sinh(h),
    ]
    assert s == pytest.approx(sum(terms), rel=1e-13)
    extra = cos(a) * cosh(b) * cosh(c) * sin(d) * cosh(e) * cos(f) * cos(g) * cosh(h)
    assert abs(s - (sum(terms) + extra)) > 1e-3


def test_multicomplex_units_multiply_as_defined():
    n = 3
    for A, B in itertools.product(range(1 << n), repeat=2):
        x, y = np.zeros((1 << n, 1)), np.zeros((1 << n, 1))
        x[A], y[B] = 1.0, 1.0
        want = np.zeros((1 << n, 1))
        want[A ^ B] = (-1) ** bin(A & B).count("1")
        np.testing.assert_array_equal(hocs.multicomplex_mul(x, y), want)


def test_tricomplex_sin_obeys_pythagoras_at_large_components():
    # sin^2 + cos^2 = 1 with cos z = sin(z + pi/2), O(1) imaginary parts (not a small step)
    x = np.random.default_rng(2).normal(size=(8, 5))
    s = hocs.multicomplex_sin(x)
    shifted = x.copy()
    shifted[0] += np.pi / 2
    c = hocs.multicomplex_sin(shifted)
    one = np.zeros_like(x)
    one[0] = 1.0
    mul = hocs.multicomplex_mul
    np.testing.assert_allclose(mul(s, s) + mul(c, c), one, atol=1e-12)
    # one unit used: the complex numbers
    z = np.zeros((8, 5))
    z[0], z[4] = x[0], x[1]
    w = np.sin(x[0] + 1j * x[1])
    np.testing.assert_allclose(hocs.multicomplex_sin(z)[[0, 4]], [w.real, w.imag], rtol=1e-14)


# ----------------------------------------------------------------- jet against torch
@pytest.mark.parametrize(
    "act, method",
    # no multicomplex softplus: the multidual jet covers it
    [(a, m) for a in ("sin", "tanh") for m in METHODS] + [("softplus", "multidual")],
)
def test_jet_equals_torch_autograd(act, method, point):
    net = make_net(act)
    q, d, v, a = point
    D, J, H, S = torch_tensors(net, q)
    jt = hocs.jet(net, q, d, v, method=method)
    want = contract(J, H, S, d, v)
    assert rel(jt.y, D) < 1e-14
    for name, w in want.items():
        assert rel(getattr(jt, name), w) < 1e-12, name
    assert rel(jt.left_hessian(a), np.einsum("k,kij->ij", a, H)) < 1e-12


def test_both_methods_agree_to_rounding_and_two_steps_agree(point):
    net = make_net()
    q, d, v, a = point
    md = hocs.jet(net, q, d, v)
    for h in (1e-20, 1e-30):
        mc = hocs.jet(net, q, d, v, method="multicomplex", h=h)
        for name in FIELDS:
            assert rel(getattr(mc, name), getattr(md, name)) < 1e-14, (h, name)
        assert rel(mc.left_hessian(a), md.left_hessian(a)) < 1e-14


# ----------------------------------------------------------------- finite differences
#: central differences with eps = 1e-5 on O(1) quantities: truncation ~ eps^2 |f'''| ~ 1e-10,
#: rounding ~ 1e-16 / eps ~ 1e-11; 1e-7 (relative to the largest entry) leaves a wide margin
#: and is far above the 1e-14 the exact methods reach.
FD_EPS, FD_TOL = 1e-5, 1e-7


def central(f, q, u, eps=FD_EPS):
    return (f(q + eps * u) - f(q - eps * u)) / (2 * eps)


def test_each_order_is_the_central_difference_of_the_one_below(point):
    net = make_net()
    q, d, v, a = point
    jt = hocs.jet(net, q, d, v)
    E = np.eye(R)
    J_fd = np.stack([central(net.forward, q, e) for e in E], axis=1)
    assert rel(jt.J, J_fd) < FD_TOL
    assert rel(jt.Jd, central(net.forward, q, d)) < FD_TOL
    assert rel(jt.Hdd, central(lambda x: hocs.jet(net, x, d).Jd, q, d)) < FD_TOL
    # H[., dq] and H[., v]: the change of J along dq and along v
    assert rel(jt.Hd, central(lambda x: hocs.jet(net, x).J, q, d)) < FD_TOL
    assert rel(jt.Hv, central(lambda x: hocs.jet(net, x).J, q, v)) < FD_TOL
    # S[., dq, dq]: the change of H[., dq] along dq ... and column j, of H[dq, dq] along e_j
    assert rel(jt.Sdd, central(lambda x: hocs.jet(net, x, d).Hd, q, d)) < FD_TOL
    S_fd = np.stack([central(lambda x: hocs.jet(net, x, d).Hdd, q, e) for e in E], axis=1)
    assert rel(jt.Sdd, S_fd) < FD_TOL
    # a^T H: the change of the gradient J^T a
    aH_fd = np.stack([central(lambda x: net.vjp(x, a)[1], q, e) for e in E], axis=1)
    assert rel(jt.left_hessian(a), aH_fd) < FD_TOL


# ----------------------------------------------------------------- structure
def test_hessian_and_third_derivative_are_symmetric(point):
    net = make_net()
    q, d, v, a = point
    rng = np.random.default_rng(3)
    u1, u2, u3 = rng.normal(size=(3, R))
    S = [hocs.csfd_derivative(net, q, list(p))[0] for p in itertools.permutations([u1, u2, u3])]
    for s in S[1:]:
        assert rel(s, S[0]) < 1e-13
    H12 = hocs.csfd_derivative(net, q, [u1, u2])[0]
    assert rel(hocs.csfd_derivative(net, q, [u2, u1])[0], H12) < 1e-14
    L = hocs.jet(net, q).left_hessian(a)
    assert np.abs(L - L.T).max() < 1e-13 * np.abs(L).max()
    # the jet's H[e_j, dq] is H[dq, e_j] from the multicomplex step
    jt = hocs.jet(net, q, d)
    for j, e in enumerate(np.eye(R)):
        assert rel(jt.Hd[:, j], hocs.csfd_derivative(net, q, [d, e])[0]) < 1e-13


@pytest.mark.parametrize("method", METHODS)
def test_linear_decoder_has_no_curvature(method, point):
    net = make_net("identity")
    q, d, v, a = point
    jt = hocs.jet(net, q, d, v, method=method)
    W = np.linalg.multi_dot(net.W[::-1])
    assert rel(jt.J, W) < 1e-14
    for name in ("Hdd", "Hd", "Sdd", "Hv"):
        assert not np.any(getattr(jt, name)), name
    assert not np.any(jt.left_hessian(a))


@pytest.mark.parametrize("method", METHODS)
def test_batched_equals_one_at_a_time(method):
    net = make_net()
    rng = np.random.default_rng(4)
    Q, Dq, V = rng.normal(size=(3, 3, R))
    A = rng.normal(size=(3, K))
    batch = hocs.jet(net, Q, Dq, V, method=method)
    L = batch.left_hessian(A)
    for b in range(3):
        one = hocs.jet(net, Q[b], Dq[b], V[b], method=method)
        for name in FIELDS:
            assert rel(getattr(batch, name)[b], getattr(one, name)) < 1e-14, name
        assert rel(L[b], one.left_hessian(A[b])) < 1e-14
    # and every column of the batched-over-j pass is a pass of its own
    q, d = Q[0], Dq[0]
    for j, e in enumerate(np.eye(R)):
        assert rel(batch.J[0][:, j], hocs.csfd_derivative(net, q, [e])[0]) < 1e-14
        assert rel(batch.Sdd[0][:, j], hocs.csfd_derivative(net, q, [e, d, d])[0]) < 1e-13


def test_jet_refuses_kinked_activations_and_bad_shapes():
    with pytest.raises(ValueError, match="sin"):
        hocs.jet(make_net("relu"), np.zeros(R))
    with pytest.raises(ValueError, match="multicomplex continuation"):
        hocs.jet(make_net("softplus"), np.zeros(R), method="multicomplex")
    with pytest.raises(ValueError, match="method"):
        hocs.jet(make_net(), np.zeros(R), method="finite differences")
    with pytest.raises(ValueError, match=r"d must have shape \(4,\)"):
        hocs.jet(make_net(), np.zeros(R), np.zeros(R + 1))


# ----------------------------------------------------------------- the filter
def _basis(n=30, k=9, n_p=4, seed=5):
    rng = np.random.default_rng(seed)
    mass = rng.uniform(0.5, 2.0, size=n)
    V = m_orthonormalize(rng.normal(size=(3 * n, k)), np.repeat(mass, 3))
    return mass, V, V[:, :n_p]


def test_filter_output_is_m_orthogonal_to_the_pca_basis():
    mass, V, U = _basis()
    P = hocs.PcaFilter(U, mass)
    x = np.random.default_rng(6).normal(size=(5, U.shape[0]))
    Px = P(x)
    MU = U * np.repeat(mass, 3)[:, None]
    assert np.abs(Px @ MU).max() < 1e-13 * np.abs(x @ MU).max()
    np.testing.assert_allclose(P(Px), Px, atol=1e-13)  # a projector
    np.testing.assert_allclose(P(x[0]), Px[0], atol=1e-15)  # one vector as a batch row
    assert np.abs(P(U.T)).max() < 1e-13  # the PCA space is filtered out
    # the Euclidean filter of the paper is not M-orthogonal for a non-uniform mass
    Pe = x - (x @ U) @ np.linalg.pinv(U)
    assert np.abs(Pe @ MU).max() > 1e-3 * np.abs(x @ MU).max()


def test_filter_in_pca_coordinates_and_folded_into_the_networks(point):
    mass, V, U = _basis()
    P = hocs.PcaFilter(U, mass)
    F = P.in_coordinates(V)
    np.testing.assert_allclose(F, np.diag([0.0] * 4 + [1.0] * 5), atol=1e-13)
    c = np.random.default_rng(7).normal(size=(3, V.shape[1]))
    np.testing.assert_allclose(c @ F @ V.T, P(c @ V.T), atol=1e-13)  # P V c = V F c
    dec = make_net(sizes=(R, 16, 16, V.shape[1]))
    q, d, v, a = point
    fdec = hocs.filtered_decoder(dec, F)
    jt, jf = hocs.jet(dec, q, d, v), hocs.jet(fdec, q, d, v)
    UtMV = U.T @ (np.repeat(mass, 3)[:, None] * V)
    for name in FIELDS:
        val = getattr(jf, name)
        assert np.abs(UtMV @ val).max() < 1e-13, name  # U^T M D^ = 0, U^T M J^ = 0, ...
        assert rel(val, F @ getattr(jt, name)) < 1e-13, name
    enc = make_net(sizes=(V.shape[1], 16, 16, R))
    np.testing.assert_allclose(hocs.filtered_encoder(enc, F)(c), enc(c @ F), atol=1e-13)


def test_filter_refuses_a_basis_it_cannot_use():
    mass, V, U = _basis()
    with pytest.raises(ValueError, match="not M-orthonormal"):
        hocs.PcaFilter(2.0 * U, mass)
    P = hocs.PcaFilter(U, mass)
    with pytest.raises(ValueError, match="does not contain span"):
        P.in_coordinates(V[:, 2:])


def test_bench_checks_numpy_against_torch_and_times_every_op():
    path = Path(__file__).resolve().parents[1] / "bench" / "hocs.py"
    spec = importlib.util.spec_from_file_location("bench_hocs", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    res = bench.run_case("2x12:3:5", repeat=1, fill=0.0)
    assert res["agree"] < 1e-12
    assert set(res["ops"]) == set(bench.OPS)
    for row in res["ops"].values():
        assert row["torch"] > 0 and all(t > 0 for t in row.values())


def test_eq_10_newton_jacobian_from_the_jet_matches_finite_differences():
    """The module docstring's derivative of phi (eq. 10-12, corrected) on a toy full space.

    u = U p + V c(q) with the filtered decoder c, f_int = K u + u^3 (an energy gradient).
    """
    mass, V, U = _basis(n=10, k=9, n_p=3)
    n_p, rng = U.shape[1], np.random.default_rng(9)
    m = np.repeat(mass, 3)
    N = m.size
    F = hocs.PcaFilter(U, mass).in_coordinates(V)
    dec = hocs.filtered_decoder(make_net(sizes=(R, 16, 16, V.shape[1])), F)
    K0 = rng.normal(size=(N, N))
    K0 = K0 @ K0.T / N
    f_ext = rng.normal(size=N)
    h = 0.05
    r_n, rdot_n = 0.3 * rng.normal(size=(2, n_p + R))

    def parts(r):
        p, q = r[:n_p], r[n_p:]
        dq = q - r_n[n_p:]
        jt = hocs.jet(dec, q, dq, 3 * dq - h * rdot_n[n_p:])
        u = U @ p + V @ jt.y
        Jt = np.hstack([U, V @ jt.J])
        a = r - r_n - h * rdot_n
        g = m * (Jt @ a + V @ jt.Hdd) + h**2 * (K0 @ u + u**3 - f_ext)
        return jt, u, Jt, g

    def phi(r):
        return parts(r)[2].T @ parts(r)[3]

    r = r_n + 0.1 * rng.normal(size=n_p + R)
    jt, u, Jt, g = parts(r)
    A = Jt.T @ ((np.diag(m) + h**2 * (K0 + np.diag(3 * u**2))) @ Jt)
    A[:, n_p:] += Jt.T @ (m[:, None] * (V @ (jt.Hv + jt.Sdd)))
    A[n_p:, n_p:] += jt.left_hessian(V.T @ g)
    A_fd = np.stack([central(phi, r, e) for e in np.eye(n_p + R)], axis=1)
    assert rel(A, A_fd) < FD_TOL
    # eq. 11's sign on h^2 H~^T (f_int - f_ext) is measurably wrong
    A_eq11 = A.copy()
    A_eq11[n_p:, n_p:] -= 2 * h**2 * jt.left_hessian(V.T @ (K0 @ u + u**3 - f_ext))
    assert rel(A_eq11, A_fd) > 1e3 * FD_TOL
    # the Newton matrix is not symmetric (the fictitious-force terms): an LU solve is needed
    assert np.abs(A - A.T).max() > 1e-3 * np.abs(A).max()
