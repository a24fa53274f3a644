"""High-order complex-step (HOCS) derivatives of a decoder, and the PCA-orthogonal filter.

Shen et al. 2021 ("high-order differentiable autoencoder") simulate in ``r = [p; q]`` with

.. math::  u = U p + \\hat D(q), \\qquad \\hat D = P D, \\qquad P = I - U U^T M,

``U`` (N, n_p) the M-orthonormal PCA basis (``U^T M U = I``), ``D`` the decoder MLP
(:class:`.nnet.MLP`) and ``P`` the filter that keeps the nonlinear part out of the PCA space
(sec. 3.4-3.6, Fig. 3). Their Newton step needs the decoder's first, second and third
derivatives, contracted (sec. 4). This module computes them, exactly to rounding, in a few
batched passes over the network, two ways: the paper's multicomplex step (the reference) and
a multidual "jet" (the fast one, the same numbers without a step size).

What the time step needs (our derivation of eq. 10-12)
-------------------------------------------------------
Write ``J~ = [U, J^]`` (N, n_p + n_q) with ``J^ = dD^/dq``, ``H^[a, b]`` and ``S^[a, b, c]``
the second and third derivatives of ``D^`` applied to directions, ``H^[., b]`` the (N, n_q)
matrix whose column j is ``H^[e_j, b]``. Lagrange's equations of ``T = u'^T M u' / 2`` and
the elastic energy are ``J~^T (M u'' + f_int(u) - f_ext) = 0`` (eq. 6 for both blocks), with
``u'' = J~ r'' + H^[q', q']`` (eq. 5). Implicit Euler, ``r = r_n + h r'``,
``r' = r'_n + h r''``, times ``h^2``:

.. math::

    \\phi(r) = \\tilde J^T M \\tilde J a + \\tilde J^T M \\hat H[\\Delta q, \\Delta q]
              + h^2 \\tilde J^T (f_{int} - f_{ext}),
    \\qquad a = r - r_n - h \\dot r_n, \\quad \\Delta q = q - q_n

(eq. 10, with ``f_fict = M H^[dq, dq]`` of eq. 8). The filter makes ``U^T M J^ = 0`` and
``U^T M H^ = 0``, so ``J~^T M J~ = diag(I, J^T M J^)`` and ``f_fict`` has no ``p`` part. Its
exact Jacobian, ``K = df_int/du``:

.. math::

    \\frac{\\partial\\phi}{\\partial r} = \\tilde J^T (M + h^2 K) \\tilde J
        + \\tilde J^T M \\,[\\,0 \\mid \\hat H[\\cdot, v]
                          + \\hat S[\\cdot, \\Delta q, \\Delta q]\\,]
        + \\operatorname{diag}(0,\\; g^T \\hat H),

.. math::

    v = a_q + 2 \\Delta q = 3 \\Delta q - h \\dot q_n, \\qquad
    g = M \\tilde J a + M \\hat H[\\Delta q, \\Delta q] + h^2 (f_{int} - f_{ext}),

where ``g^T H^`` is the (n_q, n_q) matrix ``sum_n g_n H^_n`` (the left contraction of
sec. 4.4). Any other force of ``u`` (contact, pokes, Rayleigh damping frozen over the step,
``D~ (u - u_n) / h``, as the other runtimes do) enters exactly like ``f_int``: into ``g`` and,
through its derivative in ``u``, into ``K``. The middle term is the paper's ``J~^T M [U, dJ + J]`` with
``dJ = S[., dq, dq] + H[., 3 dq - h q'_n]`` (eq. 12). Where our copy of the paper differs:

* eq. 11 subtracts ``h^2 H~^T (f_int - f_ext)``; differentiating ``+h^2 J~^T (f_int - f_ext)``
  of eq. 10 gives ``+h^2 (f_int - f_ext)^T H~`` (it is inside ``g`` above);
* eq. 10-12 print ``h r_n`` / ``h q_n`` where implicit Euler has the previous *velocity*
  ``h r'_n`` / ``h q'_n`` (possibly a lost dot accent);
* eq. 7 as printed, ``J^T M (J (H.q')q' + J q'') + J^T f_fict + ...``, has the curvature
  acceleration twice (once more as ``f_fict``) and multiplied by an extra ``J``; the
  acceleration is ``H[q', q'] + J q''`` (eq. 5), and after the time discretization its
  curvature part *is* ``f_fict / h^2`` (our first display).

``tests/test_hocs.py`` checks this Jacobian against central differences of ``phi`` on a toy
full space (and that eq. 11's sign is measurably wrong).

So each Newton iteration needs ``D^(q)``, ``J^``, ``H^[dq, dq]``, ``H^[., v]``,
``S^[., dq, dq]`` (all from one forward pass, :func:`jet`) and then ``g^T H^`` (one
backward pass, :meth:`Jet.left_hessian`, once ``g`` is known). The derivatives here are of
the network ``D`` (outputs: its k PCA coordinates); the filter is linear, so
``J^ = P J`` etc.: fold it into the last layer with :func:`filtered_decoder` and every
derivative is filtered at no cost. Dropping ``S`` (``third=False``) gives an inexact Newton
matrix (linear instead of quadratic convergence; the paper mentions quasi-Newton solvers as
the way to avoid ``S``).

The multicomplex step (sec. 4.1, the reference)
-----------------------------------------------
``C^n`` has units ``i_1..i_n``, ``i_k^2 = -1``, commuting; an element is
``sum_A x_A i_A`` over subsets ``A`` of ``{1..n}`` with ``i_A = prod_{k in A} i_k``, stored
here as a real array with a leading axis of ``2^n`` components, component ``A`` at the index
whose bit ``k-1`` is set for ``k in A``. Products: ``i_A i_B = (-1)^{|A & B|} i_{A ^ B}``,
computed recursively as ``(a + b i_n)(c + d i_n) = (ac - bd) + (ad + bc) i_n`` with ``a..d``
in ``C^{n-1}``. A linear layer acts on each component; the bias goes to the real one.
Taylor-expanding ``f(x + N)``, ``N = h sum_k i_k u_k``: a product of units is ``+-i_1...i_n``
only if every unit appears an odd number of times, so the ``i_1...i_n`` component gets
``(1/n!) n! h^n D^n f[u_1..u_n]`` from the order-n term (the n! orders of n distinct units,
sign +), nothing from order n+1 (parity), and ``O(h^{n+2})`` from the rest:

.. math::

    D^n f(x)[u_1, \\dots, u_n] = \\operatorname{Im}_{1\\cdots n}
        f(x + h \\textstyle\\sum_k i_k u_k) / h^n + O(h^2)

with nothing subtracted: at ``h = 1e-20`` the truncation error is ``1e-40`` relative, far below
rounding, and ``h = 1e-30`` gives the same digits (a check finite differences cannot pass).
``h^3`` must stay a normal float64, so ``h >= 1e-100``. Repeating a direction is allowed:
``x + h i_1 e_j + h i_2 dq + h i_3 dq`` gives ``S[e_j, dq, dq]`` (eq. 18) and, in its other
components, ``J e_j`` (``i_1``), ``J dq`` (``i_2``), ``H[e_j, dq]`` (``i_1 i_2``) and
``H[dq, dq]`` (``i_2 i_3``): one ``C^3`` pass of ``n_q`` rows gives five of the six terms.

Activations are evaluated by their *exact* multicomplex continuation, with no derivative
formula: ``sin``, ``cos``, ``sinh``, ``cosh`` of ``z = a + b i_n`` (``a, b`` in ``C^{n-1}``)
follow from the addition theorems (valid for commuting arguments) and ``cos(b i) = cosh b``,
``sin(b i) = i sinh b``, ``cosh(b i) = cos b``, ``sinh(b i) = i sin b``:

.. math::

    \\sin z = \\sin a \\cosh b + i_n \\cos a \\sinh b, \\qquad
    \\cos z = \\cos a \\cosh b - i_n \\sin a \\sinh b,

    \\sinh z = \\sinh a \\cos b + i_n \\cosh a \\sin b, \\qquad
    \\cosh z = \\cosh a \\cos b + i_n \\sinh a \\sin b,

recursing down to real numbers; ``tanh z = sinh z / cosh z`` with
``1 / (a + b i_n) = (a - b i_n) / (a^2 + b^2)``. Appendix A's first-order formula,
``sin(a + bi) = sinh a cos b + i cosh a sinh b``, is wrong (0.2985 + 0.2105i at 0.3 + 0.2i;
the first line above gives sin(0.3 + 0.2i) = 0.3015 + 0.1923i). Its second-order formula
agrees with the recursion; its third-order real part, eq. (23), has 17 terms where the
expansion has 16 (in our copy the 12th is extra and the 10th has ``cosh(h)`` for
``sinh(h)``; ``tests/test_hocs.py`` checks the corrected sum). The idempotent splitting
``f(z) = f(a - i_1 b) e_+ + f(a + i_1 b) e_-``, which would reuse complex ``f``, is not
used: recombining subtracts two numbers that differ by ``O(h)`` and loses all the digits
the step was for. The left contraction
``g^T H`` is the paper's complex-step backpropagation (sec. 4.4): :meth:`.nnet.MLP.vjp` at
``q + i h e_j`` for all ``j`` in one batch, whose imaginary part over ``h`` is row ``j``.

The multidual jet (the fast one)
--------------------------------
With nilpotent units (``eps_k^2 = 0``) the same component *is* ``D^n f[u_1..u_n]``, no ``h``,
and the propagation through an activation ``sigma`` is the chain rule. Since the two
directions after ``e_j`` are both ``dq``, :func:`jet` carries a first-order unit ``e`` (along
``e_j``, one row per ``j``) and a second-order Taylor variable ``t`` (along ``dq``, shared by
the rows), plus a first-order ``s`` (along ``v``), and propagates the coefficients (the
derivatives in ``e``, ``t``, ``s``, not Taylor coefficients) of ``z`` through
``y = sigma(z)`` by Faa di Bruno, ``sigma^(k)`` at the real part:

.. math::

    y_t = \\sigma' z_t, \\quad y_{tt} = \\sigma'' z_t^2 + \\sigma' z_{tt}, \\quad
    y_e = \\sigma' z_e, \\quad y_{et} = \\sigma'' z_t z_e + \\sigma' z_{et},

    y_{ett} = \\sigma''' z_t^2 z_e + \\sigma'' (z_{tt} z_e + 2 z_t z_{et}) + \\sigma' z_{ett},

    y_s = \\sigma' z_s, \\quad y_{es} = \\sigma'' z_s z_e + \\sigma' z_{es},

so a layer is one matrix product of ``4 n_q + 4`` rows (against ``8 n_q`` component rows for
the ``C^3`` pass and ``4 n_q`` for the ``C^2`` pass of ``H[., v]``) and a few elementwise
products, with ``sin``/``cos`` evaluated once on the shared real rows. The outputs are
``J e_j = y_e``, ``J dq = y_t``, ``H[dq, dq] = y_tt``, ``H[e_j, dq] = y_et``,
``S[e_j, dq, dq] = y_ett``, ``H[e_j, v] = y_es``. The left contraction differentiates the
reverse sweep ``lambda_{l-1} = W_l^T (sigma'(z_l) * lambda_l)`` along ``e_j``:
``lambda'_{l-1} = W_l^T (sigma'(z_l) * lambda'_l + sigma''(z_l) z_{l,e} * lambda_l)``,
from ``lambda_L = g``, ``lambda'_L = 0``: row ``j`` of ``lambda'_0`` is ``(g^T H) e_j``.

Activations with three derivatives: ``identity``, ``sin``, ``tanh``, ``softplus``
(multicomplex: ``identity``, ``sin``, ``tanh``). ``relu`` and ``elu`` are refused.

Measured (``bench/hocs.py``, one core)
--------------------------------------
Microseconds per call on one core of this shared 2-core machine (best of two runs, others'
jobs on both cores, so +-30%); sin decoders ``hidden x width : n_q : k``; "Newton set" is
everything an iteration needs (one :func:`jet` with ``dq`` and ``v`` + one
:meth:`Jet.left_hessian`; torch: six ``torch.func`` calls); numpy and torch agree to 3e-15:

==============  =========  ============  ===========  ===================================
decoder         multidual  multicomplex  torch.func   J alone: nnet JVPs / multidual / torch
==============  =========  ============  ===========  ===================================
6x64 : 4 : 30         354         5,220       46,146  69 / 91 / 2,776
8x128 : 4 : 60        746        10,893       57,623  139 / 117 / 3,858
8x128 : 8 : 60        910        16,063       62,774  174 / 143 / 4,011
8x128 : 16 : 60     1,310        26,889       66,710  312 / 351 / 4,599
10x128 : 8 : 60     1,156        20,108       76,781  223 / 262 / 5,264
==============  =========  ============  ===========  ===================================

The multidual jet is 15-20x faster than the multicomplex step (fewer rows, and no recursive
multicomplex ``sin``) and 50-130x faster than ``torch.func`` (whose per-call overhead
dominates at these sizes): the runtime should use it and keep the multicomplex step as the
reference of the tests. A Newton iteration's derivatives cost 0.6-0.9 ms at ``n_q = 8`` on
an 8 x 128 decoder (timed alone at different loads), so the issue's budget (under 2 ms of
derivative work per step) allows two or three iterations per step. Where it goes, in the
0.91 ms run: of 0.73 ms for the jet, its matrix products (36 rows per layer) take
0.36 ms; of 0.18 ms for the left contraction, 0.08 ms; the rest is elementwise work and
numpy's per-call overhead (the same calls on a width-8 decoder take 0.23 ms). Folding ``v``
into the ``dq`` path (``d^2/dt^2 D(q + t dq + t^2 v/2)`` gives ``H[., v] + S[., dq, dq]``
in one block, 3 n_q + 4 rows) was tried and saved only 6%, so the terms stay separate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...reduced.nnet import MLP

__all__ = [
    "Jet",
    "PcaFilter",
    "csfd_derivative",
    "filtered_decoder",
    "filtered_encoder",
    "jet",
    "multicomplex_forward",
    "multicomplex_mul",
    "multicomplex_sin",
]

#: Complex step of the multicomplex reference: small enough that the O(h^2) truncation is far
#: below rounding, large enough that h^3 is a normal float64.
DEFAULT_STEP = 1e-20

_SMOOTH = ("identity", "sin", "tanh", "softplus")


# --------------------------------------------------------------------------- multicomplex
def _order(x: np.ndarray) -> int:
    m = x.shape[0]
    n = m.bit_length() - 1
    if m != 1 << n:
        raise ValueError(f"a multicomplex array needs 2^n components on axis 0, got {m}")
    return n


def multicomplex_mul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Product of two multicomplex arrays of the same order.

    Parameters
    ----------
    x, y : (2^n, ...) float arrays
        Components; component ``A`` (a bit set of units) at index ``A``.

    Returns
    -------
    (2^n, ...) float array
    """
    m = x.shape[0]
    if m == 1:
        return x * y
    h = m // 2
    a, b, c, d = x[:h], x[h:], y[:h], y[h:]
    return np.concatenate(
        [
            multicomplex_mul(a, c) - multicomplex_mul(b, d),
            multicomplex_mul(a, d) + multicomplex_mul(b, c),
        ]
    )


def _mc_trig(x: np.ndarray):
    """(sin, cos, sinh, cosh) of a multicomplex array, by the addition theorems."""
    if x.shape[0] == 1:
        return np.sin(x), np.cos(x), np.sinh(x), np.cosh(x)
    h = x.shape[0] // 2
    sa, ca, sha, cha = _mc_trig(x[:h])
    sb, cb, shb, chb = _mc_trig(x[h:])
    mul = multicomplex_mul
    return (
        np.concatenate([mul(sa, chb), mul(ca, shb)]),
        np.concatenate([mul(ca, chb), -mul(sa, shb)]),
        np.concatenate([mul(sha, cb), mul(cha, sb)]),
        np.concatenate([mul(cha, cb), mul(sha, sb)]),
    )


def _mc_inv(x: np.ndarray) -> np.ndarray:
    """1 / x, recursively: 1 / (a + b i) = (a - b i) / (a^2 + b^2)."""
    if x.shape[0] == 1:
        return 1.0 / x
    h = x.shape[0] // 2
    a, b = x[:h], x[h:]
    w = _mc_inv(multicomplex_mul(a, a) + multicomplex_mul(b, b))
    return np.concatenate([multicomplex_mul(a, w), -multicomplex_mul(b, w)])


def multicomplex_sin(x: np.ndarray) -> np.ndarray:
    """``sin`` of a multicomplex array, exactly (see the module docstring).

    Parameters
    ----------
    x : (2^n, ...) float array

    Returns
    -------
    (2^n, ...) float array
    """
    _order(x)
    return _mc_trig(x)[0]


def _mc_tanh(x: np.ndarray) -> np.ndarray:
    _, _, sh, ch = _mc_trig(x)
    return multicomplex_mul(sh, _mc_inv(ch))


_MC_ACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x,
    "sin": multicomplex_sin,
    "tanh": _mc_tanh,
}


def multicomplex_forward(net: MLP, x: np.ndarray) -> np.ndarray:
    """Evaluate ``net`` at multicomplex inputs.

    Parameters
    ----------
    net : MLP
        Activations ``identity``, ``sin`` or ``tanh``.
    x : (2^n, B, in) float array
        Components of B multicomplex input vectors.

    Returns
    -------
    (2^n, B, out) float array
    """
    _order(x)
    for a in net.activations:
        if a not in _MC_ACT:
            raise ValueError(
                f"multicomplex_forward: no multicomplex continuation of {a!r} here; "
                f"use a network with {tuple(_MC_ACT)} activations (or jet(), the multidual pass)"
            )
    m, B = x.shape[0], x.shape[1]
    h = np.asarray(x, dtype=np.float64)
    for W, b, a in zip(net.W, net.b, net.activations):
        z = (h.reshape(m * B, -1) @ W.T).reshape(m, B, -1)
        z[0] += b
        h = _MC_ACT[a](z)
    return h


def csfd_derivative(
    net: MLP, q: np.ndarray, directions: list[np.ndarray], h: float = DEFAULT_STEP
) -> np.ndarray:
    """Mixed directional derivative ``D^n f(q)[u_1, ..., u_n]`` by the multicomplex step.

    Parameters
    ----------
    net : MLP
    q : (in,) or (R, in) float array
        Point(s).
    directions : list of n arrays, each (in,) or (R, in)
        ``u_1 .. u_n`` (rows broadcast against ``q``).
    h : float
        Step; anything in [1e-100, 1e-8] gives the same digits.

    Returns
    -------
    (R, out) float array (R = 1 when everything is 1-D)
    """
    n = len(directions)
    rows = np.broadcast_shapes(np.shape(q), *(np.shape(u) for u in directions))
    rows = (1, rows[0]) if len(rows) == 1 else rows
    x = np.zeros((1 << n, *rows))
    x[0] = q
    for k, u in enumerate(directions):
        x[1 << k] = h * np.asarray(u, dtype=np.float64)
    return multicomplex_forward(net, x)[(1 << n) - 1] / h**n


# --------------------------------------------------------------------------- jets
def _derivs(name: str, z: np.ndarray, third: bool):
    """s, s', s'', s''' of a smooth activation at real z (s''' None unless ``third``)."""
    if name == "sin":
        s, c = np.sin(z), np.cos(z)
        return s, c, -s, (-c if third else None)
    if name == "tanh":
        t = np.tanh(z)
        p = 1.0 - t * t
        return t, p, -2.0 * t * p, (p * (6.0 * t * t - 2.0) if third else None)
    if name == "softplus":
        sg = 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic sigmoid, without overflow
        d2 = sg * (1.0 - sg)
        return np.logaddexp(0.0, z), sg, d2, (d2 * (1.0 - 2.0 * sg) if third else None)
    raise AssertionError(name)


@dataclass
class Jet:
    """Derivatives of a decoder at ``q`` (from :func:`jet`); batch axis first when ``q`` was 2-D.

    Attributes
    ----------
    y : (k,) ``D(q)``
    J : (k, r) ``dD/dq``
    Jd : (k,) ``J dq`` or None
    Hdd : (k,) ``H[dq, dq]`` or None
    Hd : (k, r) ``H[., dq]`` (column j: ``H[e_j, dq]``) or None
    Sdd : (k, r) ``S[., dq, dq]`` or None
    Hv : (k, r) ``H[., v]`` or None
    """

    y: np.ndarray
    J: np.ndarray
    Jd: np.ndarray | None = None
    Hdd: np.ndarray | None = None
    Hd: np.ndarray | None = None
    Sdd: np.ndarray | None = None
    Hv: np.ndarray | None = None
    _left: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)

    def left_hessian(self, a: np.ndarray) -> np.ndarray:
        """``a^T H = sum_i a_i d^2 D_i / dq^2``, the left contraction (sec. 4.4).

        Parameters
        ----------
        a : (k,) or (B, k) float array

        Returns
        -------
        (r, r) or (B, r, r) float array, symmetric to rounding
        """
        return self._left(a)


def _batch(x, n: int, what: str, B: int | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if (
        x.ndim not in (1, 2)
        or x.shape[-1] != n
        or (B is not None and x.ndim == 2 and x.shape[0] != B)
    ):
        want = f"({n},)" + (f" or ({B}, {n})" if B else f" or (B, {n})")
        raise ValueError(f"jet: {what} must have shape {want}, got {x.shape}")
    return x


def jet(
    net: MLP,
    q: np.ndarray,
    d: np.ndarray | None = None,
    v: np.ndarray | None = None,
    *,
    third: bool = True,
    method: str = "multidual",
    h: float = DEFAULT_STEP,
) -> Jet:
    """The decoder's derivatives a Newton step of Shen 2021 needs, in one batched pass.

    Parameters
    ----------
    net : MLP
        The decoder ``D`` (r -> k), smooth activations (``identity``, ``sin``, ``tanh``,
        ``softplus``).
    q : (r,) or (B, r) float array
        Latent point(s).
    d : same shape as q, optional
        ``dq``: gives ``Jd``, ``Hdd``, ``Hd`` and (``third``) ``Sdd``.
    v : same shape as q, optional
        Gives ``Hv``.
    third : bool
        Compute ``S[., dq, dq]`` (the third-order term).
    method : {"multidual", "multicomplex"}
        The fast jet, or the paper's multicomplex step (the reference; also the complex-step
        backpropagation for :meth:`Jet.left_hessian`).
    h : float
        Step of the multicomplex method.

    Returns
    -------
    Jet
    """
    for a in net.activations:
        if a not in _SMOOTH:
            raise ValueError(
                f"jet: activation {a!r} has no third derivative; a high-order decoder "
                f"needs one of {_SMOOTH} (sin in Shen 2021)"
            )
    r = net.in_dim
    single = np.ndim(q) == 1
    q2 = np.atleast_2d(_batch(q, r, "q"))
    B = q2.shape[0]
    d2 = None if d is None else np.broadcast_to(_batch(d, r, "d", B), q2.shape)
    v2 = None if v is None else np.broadcast_to(_batch(v, r, "v", B), q2.shape)
    if method == "multidual":
        out = _jet_multidual(net, q2, d2, v2, third)
    elif method == "multicomplex":
        out = _jet_multicomplex(net, q2, d2, v2, third, h)
    else:
        raise ValueError(f"jet: method must be 'multidual' or 'multicomplex', got {method!r}")
    if single:
        left = out._left
        for name in ("y", "J", "Jd", "Hdd", "Hd", "Sdd", "Hv"):
            val = getattr(out, name)
            if val is not None:
                setattr(out, name, val[0])
        out._left = lambda a: left(np.atleast_2d(a))[0]
    return out


def _check_left(a, B: int, k: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = np.broadcast_to(a, (B, a.shape[0]))
    if a.shape != (B, k):
        raise ValueError(f"left_hessian: a must have shape ({k},) or ({B}, {k}), got {a.shape}")
    return a


def _jet_multidual(net: MLP, q, d, v, third: bool) -> Jet:
    B, r = q.shape
    has_d, has_v = d is not None, v is not None
    third = third and has_d
    # Rows of each point: the shared ones (no e: "0", "t", "s", "tt"), then one block of r
    # rows (one per e_j) for each component with e ("e", "et", "es", "ett"). With the points
    # on the leading axis, s'(z_0) of a point multiplies all of its rows in one product.
    shared = ["0"] + ["t"] * has_d + ["s"] * has_v + ["tt"] * has_d
    blocks = ["e"] + ["et"] * has_d + ["es"] * has_v + ["ett"] * third
    row = {name: i for i, name in enumerate(shared)}
    n0 = len(shared)
    blk = {name: slice(n0 + i * r, n0 + (i + 1) * r) for i, name in enumerate(blocks)}
    n_rows = n0 + len(blocks) * r
    x = np.zeros((B, n_rows, r))
    x[:, 0] = q
    x[:, blk["e"]] = np.eye(r)
    if has_d:
        x[:, row["t"]] = d
    if has_v:
        x[:, row["s"]] = v
    saved = []  # per layer: s'(z_0), s''(z_0) (B, w) and z_e (B, r, w), for left_hessian
    for W, b, act in zip(net.W, net.b, net.activations):
        z = (x.reshape(B * n_rows, -1) @ W.T).reshape(B, n_rows, -1)
        z[:, 0] += b
        if act == "identity":
            saved.append(None)
            x = z
            continue
        s0, g1, g2, g3 = _derivs(act, z[:, 0], third)
        y = g1[:, None, :] * z  # the s' z term of every row
        y[:, 0] = s0
        ze = z[:, blk["e"]]
        G2 = g2[:, None, :]
        if has_d:
            zt = z[:, row["t"] : row["t"] + 1]  # (B, 1, w)
            y[:, row["tt"]] += g2 * z[:, row["t"]] ** 2
            y[:, blk["et"]] += (G2 * zt) * ze
            if third:
                c1 = G2 * z[:, row["tt"] : row["tt"] + 1] + g3[:, None, :] * zt * zt
                y[:, blk["ett"]] += c1 * ze + (2.0 * G2 * zt) * z[:, blk["et"]]
        if has_v:
            y[:, blk["es"]] += (G2 * z[:, row["s"] : row["s"] + 1]) * ze
        saved.append((g1, g2, ze))
        x = y

    def col(name):  # a block (B, r, k) -> (B, k, r)
        return np.ascontiguousarray(x[:, blk[name]].transpose(0, 2, 1))

    def left(a):
        lam = _check_left(a, B, net.out_dim)
        lam_e = None  # zero until the first nonlinear layer
        for W, s in zip(reversed(net.W), reversed(saved)):
            if s is not None:
                g1, g2, ze = s
                mu = lam * g1
                mu_e = (lam * g2)[:, None, :] * ze
                if lam_e is not None:
                    mu_e += lam_e * g1[:, None, :]
            else:
                mu, mu_e = lam, lam_e
            lam = mu @ W
            lam_e = None if mu_e is None else mu_e @ W
        if lam_e is None:  # a linear network has no Hessian
            return np.zeros((B, r, r))
        return lam_e

    return Jet(
        y=x[:, 0].copy(),
        J=col("e"),
        Jd=x[:, row["t"]].copy() if has_d else None,
        Hdd=x[:, row["tt"]].copy() if has_d else None,
        Hd=col("et") if has_d else None,
        Sdd=col("ett") if third else None,
        Hv=col("es") if has_v else None,
        _left=left,
    )


def _jet_multicomplex(net: MLP, q, d, v, third: bool, h: float) -> Jet:
    B, r = q.shape
    k = net.out_dim
    E = np.tile(np.eye(r), (B, 1))  # (B r, r): row (b, j) is e_j
    Q = np.repeat(q, r, axis=0)

    def col(c):  # (B r, k) -> (B, k, r)
        return np.ascontiguousarray(c.reshape(B, r, k).transpose(0, 2, 1))

    out: dict[str, np.ndarray | None] = dict.fromkeys(("Jd", "Hdd", "Hd", "Sdd", "Hv"))
    if d is None:
        x = np.zeros((2, B * r, r))
        x[0], x[1] = Q, h * E
        y = multicomplex_forward(net, x)
        J = col(y[1] / h)
    else:  # x + h i1 e_j + h i2 dq + h i3 dq (eq. 18): five terms in one C^3 pass
        D = np.repeat(d, r, axis=0)
        x = np.zeros((8, B * r, r))
        x[0], x[1], x[2], x[4] = Q, h * E, h * D, h * D
        y = multicomplex_forward(net, x)
        J = col(y[1] / h)
        first = slice(0, B * r, r)  # row j = 0 of each point: the shared components
        out["Jd"] = y[2][first] / h
        out["Hdd"] = y[6][first] / h**2
        out["Hd"] = col(y[3] / h**2)
        out["Sdd"] = col(y[7] / h**3) if third else None
    if v is not None:
        x = np.zeros((4, B * r, r))
        x[0], x[1], x[2] = Q, h * E, h * np.repeat(v, r, axis=0)
        out["Hv"] = col(multicomplex_forward(net, x)[3] / h**2)

    def left(a):  # complex-step backpropagation (sec. 4.4) through MLP.vjp
        a = _check_left(a, B, k)
        _, g = net.vjp(Q + 1j * h * E, np.repeat(a, r, axis=0))
        return g.imag.reshape(B, r, r) / h

    return Jet(y=y[0][::r].copy(), J=J, _left=left, **out)


# --------------------------------------------------------------------------- the filter
class PcaFilter:
    """The PCA-orthogonal filter ``P = I - U U^T M`` for an M-orthonormal basis ``U``.

    ``U^T M P x = 0`` for every ``x`` (Shen 2021, sec. 3.5 and Fig. 3, whose ``I - U U^T`` is
    the Euclidean special case): the M-orthogonal projector onto the complement of the PCA
    space, so ``u = U p + P D(q)`` splits the kinetic energy into a ``p`` and a ``q`` part.

    Parameters
    ----------
    U : (3n, n_p) float array
        M-orthonormal basis (``U^T M U = I``).
    mass : (n,) float array
        Vertex masses, kg; ``M = diag(repeat(mass, 3))`` (as :mod:`.subspace`).
    """

    def __init__(self, U: np.ndarray, mass: np.ndarray) -> None:
        U = np.asarray(U, dtype=np.float64)
        mass = np.asarray(mass, dtype=np.float64)
        if U.ndim != 2 or mass.ndim != 1 or U.shape[0] != 3 * mass.shape[0]:
            raise ValueError(
                f"PcaFilter: U must be (3n, n_p) and mass (n,), got {U.shape} and {mass.shape}"
            )
        self.U = U
        self.MU = U * np.repeat(mass, 3)[:, None]  # (3n, n_p): M U
        G = U.T @ self.MU
        if not np.allclose(G, np.eye(U.shape[1]), atol=1e-8):
            raise ValueError(
                "PcaFilter: U is not M-orthonormal (|U^T M U - I| = "
                f"{np.abs(G - np.eye(U.shape[1])).max():.2e}); use the basis of a "
                "core.subspace.Subspace (or m_orthonormalize it)"
            )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``P x`` for (3n,) or (B, 3n) displacements."""
        x = np.asarray(x, dtype=np.float64)
        return x - (x @ self.MU) @ self.U.T

    def in_coordinates(self, V: np.ndarray) -> np.ndarray:
        """The filter in the coordinates of an M-orthonormal basis ``V`` that contains ``U``.

        With ``x = V c`` and ``E = V^T M U`` (k, n_p): ``P V c = V (I - E E^T) c``, a
        Euclidean projector because ``V^T M V = I``. When ``U`` is the first ``n_p`` columns
        of ``V`` it zeroes the first ``n_p`` coordinates.

        Parameters
        ----------
        V : (3n, k) float array

        Returns
        -------
        F : (k, k) float array, symmetric, ``F^2 = F``
        """
        E = np.asarray(V, dtype=np.float64).T @ self.MU
        gap = np.abs(E.T @ E - np.eye(E.shape[1])).max()
        if gap > 1e-8:
            raise ValueError(
                f"PcaFilter.in_coordinates: the basis does not contain span(U) "
                f"(|E^T E - I| = {gap:.2e}); build V from the same PCA, with U among its columns"
            )
        return np.eye(E.shape[0]) - E @ E.T


def filtered_decoder(net: MLP, F: np.ndarray) -> MLP:
    """The decoder followed by the linear filter ``F`` (k, k), folded into its last layer.

    Every derivative of the result is ``F`` times the decoder's, at no extra cost.
    """
    if net.activations[-1] != "identity":
        raise ValueError("filtered_decoder: the decoder's last layer must be linear (identity)")
    W, b = list(net.W), list(net.b)
    W[-1], b[-1] = F @ W[-1], F @ b[-1]
    return MLP(W, b, net.activations)


def filtered_encoder(net: MLP, F: np.ndarray) -> MLP:
    """The linear filter ``F`` (k, k) followed by the encoder, folded into its first layer."""
    W = list(net.W)
    W[0] = W[0] @ F
    return MLP(W, net.b, net.activations)
