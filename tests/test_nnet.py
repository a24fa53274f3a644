"""core.nnet: the numpy MLP runtime against finite differences, torch autograd and the complex step."""

import itertools

import numpy as np
import pytest
import torch
from neural_rom.core.errors import CacheError
from neural_rom.core.reduced.nnet import ACTIVATIONS, MLP

torch.set_num_threads(1)
# torch.func imports torch.jit.script, which warns about its own deprecation
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")

SIZES = (5, 16, 12, 7)


def make_net(act: str, sizes=SIZES, seed: int = 0, last: str = "identity") -> MLP:
    rng = np.random.default_rng(seed)
    Ws, bs = [], []
    for n_in, n_out in itertools.pairwise(sizes):
        Ws.append(rng.normal(size=(n_out, n_in)) / np.sqrt(n_in))
        bs.append(0.3 * rng.normal(size=n_out))
    acts = [act] * (len(sizes) - 2) + [last]
    return MLP(Ws, bs, acts)


class _Sin(torch.nn.Module):
    def forward(self, z):
        return torch.sin(z)


_TORCH_ACT = {
    "identity": torch.nn.Identity,
    "relu": torch.nn.ReLU,
    "elu": torch.nn.ELU,
    "sin": _Sin,
    "tanh": torch.nn.Tanh,
    "softplus": torch.nn.Softplus,
}


def to_torch(net: MLP) -> torch.nn.Sequential:
    layers = []
    for W, b, a in zip(net.W, net.b, net.activations, strict=True):
        lin = torch.nn.Linear(W.shape[1], W.shape[0], dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(W))
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin, _TORCH_ACT[a]()]
    return torch.nn.Sequential(*layers)


def preactivations(net: MLP, x: np.ndarray) -> list[np.ndarray]:
    """Pre-activation z of every layer, computed the slow obvious way."""
    out, h = [], np.asarray(x, dtype=float)
    for W, b, f in zip(net.W, net.b, net._f, strict=True):
        z = h @ W.T + b
        out.append(z)
        h = f(z)
    return out


def central_jacobian(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    cols = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = eps
        cols.append((f(x + e) - f(x - e)) / (2 * eps))
    return np.stack(cols, axis=-1)


def away_from_kinks(net: MLP, X: np.ndarray, margin: float = 1e-3) -> bool:
    zs = preactivations(net, X)
    return all(
        np.abs(z).min() > margin
        for z, a in zip(zs, net.activations, strict=True)
        if a in ("relu", "elu")
    )


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_forward_jvp_vjp_jacobian_match_torch_autograd(act):
    net = make_net(act)
    tnet = to_torch(net)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, net.in_dim))
    V = rng.normal(size=X.shape)
    U = rng.normal(size=(6, net.out_dim))
    assert away_from_kinks(net, X)

    tX = torch.from_numpy(X)
    with torch.no_grad():
        ty = tnet(tX).numpy()
    np.testing.assert_allclose(net.forward(X), ty, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(net(X[2]), ty[2], rtol=1e-13, atol=1e-13)

    # forward mode: torch.func.jvp, batched and one point
    ty2, tJv = torch.func.jvp(tnet, (tX,), (torch.from_numpy(V),))
    y, Jv = net.jvp(X, V)
    np.testing.assert_allclose(y, ty2.detach().numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(Jv, tJv.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(net.jvp(X[3], V[3])[1], Jv[3], rtol=1e-13, atol=1e-14)

    # reverse mode: torch backward of <u, f(x)>
    tXg = tX.clone().requires_grad_(True)
    (tnet(tXg) * torch.from_numpy(U)).sum().backward()
    y, JTu = net.vjp(X, U)
    np.testing.assert_allclose(y, ty, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(JTu, tXg.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(net.vjp(X[4], U[4])[1], JTu[4], rtol=1e-13, atol=1e-14)

    # dense Jacobian vs torch's
    tJ = torch.autograd.functional.jacobian(tnet, tX[0]).numpy()
    np.testing.assert_allclose(net.jacobian(X[0]), tJ, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("sizes", [(5, 16, 12, 7), (9, 20, 3)])  # out > in and out < in
def test_derivatives_match_central_differences(act, sizes):
    net = make_net(act, sizes=sizes, seed=2)
    rng = np.random.default_rng(3)
    x = rng.normal(size=net.in_dim)
    assert away_from_kinks(net, x, margin=1e-4)
    J_fd = central_jacobian(net.forward, x)
    J = net.jacobian(x)
    assert J.shape == (net.out_dim, net.in_dim)
    scale = np.abs(J).max()
    np.testing.assert_allclose(J, J_fd, atol=1e-8 * scale, rtol=0)
    v, u = rng.normal(size=net.in_dim), rng.normal(size=net.out_dim)
    np.testing.assert_allclose(net.jvp(x, v)[1], J_fd @ v, atol=1e-8 * scale * np.abs(v).sum())
    np.testing.assert_allclose(net.vjp(x, u)[1], u @ J_fd, atol=1e-8 * scale * np.abs(u).sum())
    # the adjoint identity u.(J v) == (J^T u).v holds to rounding
    assert u @ net.jvp(x, v)[1] == pytest.approx(net.vjp(x, u)[1] @ v, rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("act", ["identity", "sin", "tanh", "softplus", "elu", "relu"])
def test_complex_step_equals_jvp_to_machine_precision(act):
    # Shen 2021 sec. 3.1: J v = Im f(x + i h v) / h with no subtractive cancellation
    net = make_net(act, seed=4)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(8, net.in_dim))
    V = rng.normal(size=X.shape)
    # elu and relu are analytic only off Re z = 0; the tiny imaginary part never switches branch
    assert away_from_kinks(net, X, margin=1e-12)
    h = 1e-20
    Yc = net.forward(X + 1j * h * V)
    assert Yc.dtype == np.complex128
    y, Jv = net.jvp(X, V)
    np.testing.assert_allclose(Yc.imag / h, Jv, rtol=1e-12, atol=1e-12 * np.abs(Jv).max())
    # Re f(x + ihv) = f(x) + O(h^2): f(x) up to the rounding of a differently blocked matmul
    np.testing.assert_allclose(Yc.real, y, rtol=1e-13, atol=1e-14)
    # and per point through a 1-D input
    np.testing.assert_allclose(
        net.forward(X[0] + 1j * h * V[0]).imag / h, Jv[0], rtol=1e-12, atol=1e-14
    )


def test_complex_step_activations_are_analytic_continuations():
    # at a genuinely complex point, compare with the closed forms (np.where picks on Re z)
    z = np.array([0.7 + 0.4j, -1.3 + 0.9j, 2.5 - 3.0j, -40.0 + 1.0j, 40.0 - 2.0j])
    one = lambda a: MLP([np.eye(5)], [np.zeros(5)], [a]).forward(z)
    np.testing.assert_allclose(one("sin"), np.sin(z), rtol=1e-15)
    np.testing.assert_allclose(one("tanh"), np.tanh(z), rtol=1e-15)
    np.testing.assert_allclose(one("softplus"), np.log(1 + np.exp(z)), rtol=1e-13)
    elu = np.where(z.real > 0, z, np.exp(z) - 1)
    np.testing.assert_allclose(one("elu"), elu, rtol=1e-15)
    np.testing.assert_allclose(one("relu"), np.where(z.real > 0, z, 0), rtol=0)
    # no overflow from the branch not taken, and no warnings
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        big = np.array([800.0, -800.0])
        net = lambda a: MLP([np.eye(2)], [np.zeros(2)], [a])
        np.testing.assert_allclose(net("softplus").forward(big), [800.0, 0.0], atol=1e-300)
        np.testing.assert_allclose(net("elu").forward(big), [800.0, -1.0])
        _, d = net("softplus").jvp(big, np.ones(2))
        np.testing.assert_allclose(d, [1.0, 0.0], atol=1e-300)
        _, d = net("elu").jvp(big + 0j, np.ones(2))
        np.testing.assert_allclose(d, [1.0, 0.0], atol=1e-300)


def test_relu_and_elu_derivatives_at_the_kink_follow_torch():
    # the kink value is a convention; ours is torch's (relu'(0) = 0, elu'(0) = 1)
    for act, expect in (("relu", 0.0), ("elu", 1.0)):
        net = MLP([np.eye(1)], [np.zeros(1)], [act])
        assert net.jvp(np.zeros(1), np.ones(1))[1][0] == expect
        assert net.vjp(np.zeros(1), np.ones(1))[1][0] == expect
        t = torch.zeros(1, dtype=torch.float64, requires_grad=True)
        _TORCH_ACT[act]()(t).sum().backward()
        assert t.grad.item() == expect


def test_many_directions_at_one_point_and_batch_shapes():
    net = make_net("elu", seed=6)
    rng = np.random.default_rng(7)
    x = rng.normal(size=net.in_dim)
    J = net.jacobian(x)
    V = rng.normal(size=(4, net.in_dim))
    U = rng.normal(size=(3, net.out_dim))
    y, JV = net.jvp(x, V)  # K tangents at one point
    assert y.shape == (net.out_dim,) and JV.shape == (4, net.out_dim)
    np.testing.assert_allclose(JV, V @ J.T, rtol=1e-13, atol=1e-14)
    y, JTU = net.vjp(x, U)
    assert JTU.shape == (3, net.in_dim)
    np.testing.assert_allclose(JTU, U @ J, rtol=1e-13, atol=1e-14)
    # single-layer networks and integer inputs
    lin = MLP([np.arange(6.0).reshape(2, 3)], [np.ones(2)], ["identity"])
    np.testing.assert_array_equal(lin.forward(np.array([1, 0, 2])), [5.0, 14.0])
    np.testing.assert_array_equal(lin.jacobian(np.zeros(3)), np.arange(6.0).reshape(2, 3))


def test_float32_weights_are_evaluated_in_float64():
    net = make_net("tanh", seed=8)
    arrays, meta = net.to_arrays(prefix="dec.", dtype=np.float32)
    assert all(a.dtype == np.float32 for a in arrays.values())
    net32 = MLP.from_arrays(arrays, meta)
    assert all(W.dtype == np.float64 for W in net32.W)
    x = np.random.default_rng(9).normal(size=net.in_dim).astype(np.float32)
    y = net32.forward(x)
    assert y.dtype == np.float64
    # float64 evaluation of the float32-rounded weights, to float64 accuracy
    ref = to_torch(net32)(torch.from_numpy(x.astype(np.float64))).detach().numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-13, atol=1e-13)


def test_to_arrays_from_arrays_round_trip_is_exact():
    net = make_net("softplus", sizes=(4, 8, 8, 8, 3), seed=10, last="sin")
    arrays, meta = net.to_arrays(prefix="decoder.")
    assert sorted(arrays) == sorted([f"decoder.{k}{i}" for k in "Wb" for i in range(4)])
    assert meta == {
        "kind": "mlp",
        "prefix": "decoder.",
        "sizes": [4, 8, 8, 8, 3],
        "activations": ["softplus"] * 3 + ["sin"],
    }
    import json

    meta = json.loads(json.dumps(meta))  # it is JSON
    back = MLP.from_arrays(arrays, meta)
    assert back.sizes == net.sizes and back.activations == net.activations
    for a, b in zip(net.W + net.b, back.W + back.b, strict=True):
        np.testing.assert_array_equal(a, b)
    x = np.linspace(-1, 1, 4)
    np.testing.assert_array_equal(back.forward(x), net.forward(x))
    # the caller's arrays are copied, not aliased
    arrays["decoder.W0"][:] = 0
    np.testing.assert_array_equal(back.forward(x), net.forward(x))
    assert "4 -> 8 -> 8 -> 8 -> 3" in repr(net) and net.n_params == 4 * 8 + 8 + 2 * (72) + 8 * 3 + 3


def test_from_arrays_rejects_incomplete_or_inconsistent_networks():
    arrays, meta = make_net("relu", seed=11).to_arrays(prefix="enc.")
    with pytest.raises(CacheError, match=r"'enc\.W1' is missing.*re-export or retrain"):
        MLP.from_arrays({k: v for k, v in arrays.items() if k != "enc.W1"}, meta)
    with pytest.raises(CacheError, match="not an MLP description"):
        MLP.from_arrays(arrays, {**meta, "kind": "siren"})
    with pytest.raises(CacheError, match="layer sizes"):
        MLP.from_arrays(arrays, {**meta, "sizes": [5, 16, 12, 8]})
    with pytest.raises(CacheError, match="unknown activation 'gelu'"):
        MLP.from_arrays(arrays, {**meta, "activations": ["relu", "gelu", "identity"]})
    bad = dict(arrays)
    bad["enc.W1"] = arrays["enc.W1"][:, :-1]
    with pytest.raises(CacheError, match="takes 15 inputs but layer 0 has 16 outputs"):
        MLP.from_arrays(bad, meta)


def test_constructor_and_input_errors_say_what_to_fix():
    W, b = np.ones((3, 2)), np.zeros(3)
    with pytest.raises(ValueError, match="unknown activation 'swish'.*use one of"):
        MLP([W], [b], ["swish"])
    with pytest.raises(ValueError, match="one of each per layer"):
        MLP([W, W], [b], ["relu"])
    with pytest.raises(ValueError, match=r"bias 0 must have shape \(3,\)"):
        MLP([W], [np.zeros(2)], ["relu"])
    with pytest.raises(ValueError, match="non-finite"):
        MLP([W * np.nan], [b], ["relu"])
    with pytest.raises(ValueError, match="at least one layer"):
        MLP([], [], [])
    net = MLP([W], [b], ["tanh"])
    with pytest.raises(ValueError, match=r"x must have shape \(2,\) or \(B, 2\), got \(3,\)"):
        net.forward(np.zeros(3))
    with pytest.raises(ValueError, match="one row per point"):
        net.jvp(np.zeros((4, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"u must have shape \(3,\)"):
        net.vjp(np.zeros(2), np.zeros(2))
    with pytest.raises(TypeError, match="numeric"):
        net.forward(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="one point"):
        net.jacobian(np.zeros((2, 2)))
