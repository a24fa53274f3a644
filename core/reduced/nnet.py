"""A small numpy evaluator for trained multilayer perceptrons: forward, JVP, VJP, complex step.

Learned reduced models (the decoder of Fulton 2019, the high-order differentiable
autoencoder of Shen 2021, LiCROM's neural field) are trained with PyTorch in
``training/`` but *played back* with numpy alone, so the per-frame step in Blender never
imports torch. This module is that runtime: a fully connected network

.. math::  y = W_L\\,a_{L-1}(\\cdots a_1(W_1 x + b_1)\\cdots) + b_L

with one activation name per layer (``activations[l]`` is applied after layer ``l``;
the last one is usually ``"identity"``), and the three products a reduced simulator
needs:

- :meth:`MLP.forward`: :math:`y = f(x)`, for real *or complex* ``x``;
- :meth:`MLP.jvp`: :math:`(f(x), J v)` in one forward-mode pass (tangents of the decoder,
  e.g. :math:`\\partial x / \\partial z \\cdot \\dot z`, eq. (6) of Fulton 2019);
- :meth:`MLP.vjp`: :math:`(f(x), J^T u)` in one reverse-mode pass (reduced forces
  :math:`J^T f`, eq. (8) of Fulton 2019);
- :meth:`MLP.jacobian`: the dense :math:`J`, from ``in`` JVPs or ``out`` VJPs, whichever
  is fewer, batched into one pass.

Complex inputs (the complex-step method)
----------------------------------------
Shen 2021 (section 3.1) differentiates the network by evaluating it at complex inputs:
:math:`J v = \\operatorname{Im} f(x + i h v) / h + O(h^2)` with no cancellation error, so
``h = 1e-20`` gives derivatives to machine precision. That requires every activation to
be evaluated by its *analytic continuation*:

- ``identity``, ``sin``, ``tanh``: entire / meromorphic; numpy's complex versions are used.
- ``softplus``: :math:`\\log(1 + e^z)`, evaluated stably as
  :math:`\\max(z, 0) + \\log(1 + e^{-|z|})` with the branch picked on :math:`\\operatorname{Re} z`.
- ``elu`` (:math:`\\alpha = 1`, as ``torch.nn.ELU()``): :math:`z` for
  :math:`\\operatorname{Re} z > 0`, :math:`e^z - 1` otherwise.
- ``relu``: :math:`z` for :math:`\\operatorname{Re} z > 0`, ``0`` otherwise.

``relu`` and ``elu`` are only *piecewise* analytic: the branch is selected on the real
part, so the complex step is exact away from :math:`\\operatorname{Re} z = 0` and meaningless
exactly at a kink (where :math:`J` itself is undefined for ``relu``; ``elu`` with
:math:`\\alpha = 1` is :math:`C^1` there but not :math:`C^2`). A SIREN's :math:`\\sin(\\omega_0 z)`
is ``sin`` with :math:`\\omega_0` folded into the preceding layer's weights and bias.

Everything is evaluated in float64 (complex128 for complex inputs) whatever the dtype
the weights were stored in. The evaluator is deliberately plain numpy, one matrix
product and one or two ufuncs per layer, so a small decoder (30 -> 100 -> 100 -> 300)
costs a few tens of microseconds per forward + VJP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import CacheError

__all__ = ["ACTIVATIONS", "MLP"]

ACTIVATIONS = ("identity", "relu", "elu", "sin", "tanh", "softplus")

_META_KIND = "mlp"

# --------------------------------------------------------------------------- activations
# Each takes the pre-activation z (real or complex, any shape) and returns a(z), or
# (a(z), a'(z)); a'(z) is None for the identity so the multiply is skipped. Branches of
# piecewise functions are chosen on Re z, and the argument of exp is clamped on the
# branch that is *not* taken so it can never overflow.


def _identity(z):
    return z


def _identity_d(z):
    return z, None


def _relu(z):
    if z.dtype.kind == "c":
        return np.where(z.real > 0, z, 0)
    return np.maximum(z, 0.0)


def _relu_d(z):
    pos = z.real > 0
    if z.dtype.kind == "c":
        return np.where(pos, z, 0), pos.astype(np.float64)
    return np.maximum(z, 0.0), pos.astype(np.float64)


def _elu(z):
    if z.dtype.kind == "c":
        pos = z.real > 0
        return np.where(pos, z, np.expm1(np.where(pos, 0, z)))
    # exact on both branches: z + expm1(0) = z, and 0 + expm1(z)
    return np.maximum(z, 0.0) + np.expm1(np.minimum(z, 0.0))


def _elu_d(z):
    if z.dtype.kind == "c":
        pos = z.real > 0
        zn = np.where(pos, 0, z)
        return np.where(pos, z, np.expm1(zn)), np.where(pos, 1.0, np.exp(zn))
    zn = np.minimum(z, 0.0)
    # exp and expm1 separately: exp(z) = expm1(z) + 1 loses all relative accuracy for z << 0
    return np.maximum(z, 0.0) + np.expm1(zn), np.exp(zn)


def _sin(z):
    return np.sin(z)


def _sin_d(z):
    return np.sin(z), np.cos(z)


def _tanh(z):
    return np.tanh(z)


def _tanh_d(z):
    t = np.tanh(z)
    return t, 1.0 - t * t


def _softplus_parts(z):
    pos = z.real >= 0
    e = np.exp(np.where(pos, -z, z))  # e^{-|z|}, continued analytically on each branch
    return pos, e


def _softplus(z):
    pos, e = _softplus_parts(z)
    return np.where(pos, z, 0) + np.log1p(e)


def _softplus_d(z):
    pos, e = _softplus_parts(z)
    inv = 1.0 / (1.0 + e)
    # sigmoid(z) = 1 / (1 + e^{-z}) on Re z >= 0, e^{z} / (1 + e^{z}) otherwise
    return np.where(pos, z, 0) + np.log1p(e), np.where(pos, inv, e * inv)


_VALUE: dict[str, Callable] = {
    "identity": _identity,
    "relu": _relu,
    "elu": _elu,
    "sin": _sin,
    "tanh": _tanh,
    "softplus": _softplus,
}
_VALUE_AND_DERIV: dict[str, Callable] = {
    "identity": _identity_d,
    "relu": _relu_d,
    "elu": _elu_d,
    "sin": _sin_d,
    "tanh": _tanh_d,
    "softplus": _softplus_d,
}
assert set(_VALUE) == set(ACTIVATIONS) == set(_VALUE_AND_DERIV)


def _matmul(h: np.ndarray, M: np.ndarray) -> np.ndarray:
    """``h @ M`` for real M; a complex h is split so M is never up-cast to complex."""
    if h.dtype.kind == "c":
        out = np.empty(h.shape[:-1] + M.shape[-1:], dtype=np.complex128)
        np.matmul(h.real, M, out=out.real)
        np.matmul(h.imag, M, out=out.imag)
        return out
    return h @ M


def _as_input(x: Any, n: int, what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "c":
        x = x.astype(np.complex128, copy=False)
    elif x.dtype.kind in "biuf":
        x = x.astype(np.float64, copy=False)
    else:
        raise TypeError(f"MLP: {what} must be a real or complex numeric array, got dtype {x.dtype}")
    if x.ndim not in (1, 2) or x.shape[-1] != n:
        raise ValueError(f"MLP: {what} must have shape ({n},) or (B, {n}), got {x.shape}")
    return x


class MLP:
    """A dense feed-forward network evaluated with numpy in float64.

    Parameters
    ----------
    weights : list of (out_l, in_l) float arrays
        Layer matrices :math:`W_l`, in the ``torch.nn.Linear.weight`` layout; ``in_1`` is
        the input size and ``in_{l+1} = out_l``. Stored as float64 copies whatever the
        dtype given (models may be saved in float32).
    biases : list of (out_l,) float arrays
        Layer offsets :math:`b_l` (``torch.nn.Linear.bias``).
    activations : list of str
        One name from :data:`ACTIVATIONS` per layer, applied after that layer's affine map.

    Attributes
    ----------
    in_dim, out_dim : int
        Input and output sizes.
    sizes : tuple of int
        ``(in_dim, out_1, ..., out_dim)``.
    """

    def __init__(
        self,
        weights: Sequence[np.ndarray],
        biases: Sequence[np.ndarray],
        activations: Sequence[str],
    ) -> None:
        weights, biases, activations = list(weights), list(biases), list(activations)
        L = len(weights)
        if L == 0:
            raise ValueError("MLP: needs at least one layer (got no weights)")
        if len(biases) != L or len(activations) != L:
            raise ValueError(
                f"MLP: got {L} weight matrices, {len(biases)} bias vectors and "
                f"{len(activations)} activations; give one of each per layer"
            )
        self.W: list[np.ndarray] = []
        self.b: list[np.ndarray] = []
        for i, (W, b, a) in enumerate(zip(weights, biases, activations, strict=True)):
            if a not in _VALUE:
                raise ValueError(
                    f"MLP: layer {i} has unknown activation {a!r}; use one of {ACTIVATIONS}"
                )
            W = np.array(W, dtype=np.float64, order="C")
            b = np.array(b, dtype=np.float64)
            if W.ndim != 2:
                raise ValueError(f"MLP: weight {i} must be a 2-D (out, in) array, got {W.shape}")
            if b.shape != (W.shape[0],):
                raise ValueError(
                    f"MLP: bias {i} must have shape ({W.shape[0]},) to match weight {i} "
                    f"of shape {W.shape}, got {b.shape}"
                )
            if i > 0 and W.shape[1] != self.W[-1].shape[0]:
                raise ValueError(
                    f"MLP: weight {i} takes {W.shape[1]} inputs but layer {i - 1} has "
                    f"{self.W[-1].shape[0]} outputs"
                )
            if not (np.isfinite(W).all() and np.isfinite(b).all()):
                raise ValueError(f"MLP: layer {i} has non-finite weights or biases (NaN/inf)")
            self.W.append(W)
            self.b.append(b)
        self.activations: tuple[str, ...] = tuple(activations)
        # W^T views: rows of a batch are multiplied as h @ W^T (BLAS reads the transpose flag)
        self._Wt = [W.T for W in self.W]
        self._f = [_VALUE[a] for a in self.activations]
        self._fd = [_VALUE_AND_DERIV[a] for a in self.activations]
        self.in_dim: int = int(self.W[0].shape[1])
        self.out_dim: int = int(self.W[-1].shape[0])
        self.sizes: tuple[int, ...] = (self.in_dim, *(int(W.shape[0]) for W in self.W))

    def __repr__(self) -> str:
        arch = " -> ".join(str(s) for s in self.sizes)
        return f"MLP({arch}, activations={list(self.activations)})"

    @property
    def n_layers(self) -> int:
        return len(self.W)

    @property
    def n_params(self) -> int:
        return int(sum(W.size + b.size for W, b in zip(self.W, self.b, strict=True)))

    # ----------------------------------------------------------------------- evaluation

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Evaluate the network.

        Parameters
        ----------
        x : (in,) or (B, in) float or complex array
            Input(s). Complex inputs are evaluated through the analytic continuation of
            every activation (see the module docstring), for the complex-step method.

        Returns
        -------
        y : (out,) or (B, out) float64 or complex128 array
        """
        h = _as_input(x, self.in_dim, "x")
        for Wt, b, f in zip(self._Wt, self.b, self._f, strict=True):
            z = _matmul(h, Wt)
            z += b
            h = f(z)
        return h

    __call__ = forward

    def jvp(self, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Forward-mode product :math:`J(x) v`, with :math:`f(x)`, in one pass.

        Parameters
        ----------
        x : (in,) or (B, in) array
            Point(s) of evaluation.
        v : array
            Tangent(s): the shape of ``x`` (one tangent per point), or ``(K, in)`` with a
            1-D ``x`` (K tangents at one point, e.g. the columns of a basis).

        Returns
        -------
        y : (out,) or (B, out) array
            :math:`f(x)`.
        Jv : (out,), (B, out) or (K, out) array
        """
        h = _as_input(x, self.in_dim, "x")
        dh = _as_input(v, self.in_dim, "v")
        self._check_pair(h, dh, "v")
        for Wt, b, fd in zip(self._Wt, self.b, self._fd, strict=True):
            z = _matmul(h, Wt)
            z += b
            h, d = fd(z)
            dh = _matmul(dh, Wt)
            if d is not None:
                dh = dh * d
        return h, dh

    def vjp(self, x: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reverse-mode product :math:`J(x)^T u`, with :math:`f(x)`, in one pass.

        The forward sweep keeps each layer's activation derivative :math:`a'(z_l)`; the
        backward sweep is :math:`g \\leftarrow (g \\odot a'(z_l)) W_l`.

        Parameters
        ----------
        x : (in,) or (B, in) array
            Point(s) of evaluation.
        u : array
            Cotangent(s): the shape of ``f(x)``, or ``(K, out)`` with a 1-D ``x``.

        Returns
        -------
        y : (out,) or (B, out) array
            :math:`f(x)`.
        JTu : (in,), (B, in) or (K, in) array
        """
        h = _as_input(x, self.in_dim, "x")
        g = _as_input(u, self.out_dim, "u")
        self._check_pair(h, g, "u")
        derivs = []
        for Wt, b, fd in zip(self._Wt, self.b, self._fd, strict=True):
            z = _matmul(h, Wt)
            z += b
            h, d = fd(z)
            derivs.append(d)
        for W, d in zip(reversed(self.W), reversed(derivs), strict=True):
            if d is not None:
                g = g * d
            g = _matmul(g, W)
        return h, g

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """Dense Jacobian :math:`J = \\partial f / \\partial x` at one point.

        Uses ``in`` batched JVPs or ``out`` batched VJPs, whichever is fewer.

        Parameters
        ----------
        x : (in,) array

        Returns
        -------
        J : (out, in) array
        """
        x = _as_input(x, self.in_dim, "x")
        if x.ndim != 1:
            raise ValueError(f"MLP.jacobian: x must be one point of shape ({self.in_dim},)")
        if self.in_dim <= self.out_dim:
            _, JV = self.jvp(x, np.eye(self.in_dim))
            return np.ascontiguousarray(JV.T)
        _, JTU = self.vjp(x, np.eye(self.out_dim))
        return JTU

    def _check_pair(self, x: np.ndarray, t: np.ndarray, name: str) -> None:
        if x.ndim == 2 and (t.ndim != 2 or t.shape[0] != x.shape[0]):
            raise ValueError(
                f"MLP: with a batch x of shape {x.shape}, {name} needs one row per point "
                f"(shape ({x.shape[0]}, {t.shape[-1]})), got {t.shape}"
            )

    # ----------------------------------------------------------------------- storage

    def to_arrays(
        self, prefix: str = "", dtype: Any = np.float64
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Arrays and JSON metadata that :meth:`from_arrays` turns back into this network.

        Parameters
        ----------
        prefix : str
            Prepended to every array name, so several networks share one model file
            (e.g. ``"decoder."``).
        dtype : numpy dtype
            Storage dtype of the weights (float64 round-trips exactly; float32 halves
            the file).

        Returns
        -------
        arrays : dict
            ``{prefix}W{l}`` (out_l, in_l) and ``{prefix}b{l}`` (out_l,) for each layer.
        meta : dict
            JSON-able: ``{"kind": "mlp", "prefix": ..., "sizes": [...],
            "activations": [...]}``; store it in the model file's metadata.
        """
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise ValueError(f"MLP.to_arrays: dtype must be a float type, got {dtype}")
        arrays: dict[str, np.ndarray] = {}
        for i, (W, b) in enumerate(zip(self.W, self.b, strict=True)):
            arrays[f"{prefix}W{i}"] = W.astype(dtype)
            arrays[f"{prefix}b{i}"] = b.astype(dtype)
        meta = {
            "kind": _META_KIND,
            "prefix": prefix,
            "sizes": list(self.sizes),
            "activations": list(self.activations),
        }
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> MLP:
        """Rebuild a network saved with :meth:`to_arrays` (typically from a model file).

        Raises
        ------
        CacheError
            When the metadata or arrays are missing or inconsistent: the model file is
            corrupt or was written by another tool.
        """

        def bad(why: str) -> CacheError:
            return CacheError(
                f"network {meta.get('prefix', '') if isinstance(meta, Mapping) else ''!r} "
                f"in the model cannot be rebuilt ({why}); the model file is corrupt or was "
                "written by another tool: re-export or retrain the model"
            )

        if not isinstance(meta, Mapping) or meta.get("kind") != _META_KIND:
            raise bad("its metadata is not an MLP description")
        prefix = meta.get("prefix", "")
        acts = meta.get("activations")
        sizes = meta.get("sizes")
        if not isinstance(prefix, str) or not isinstance(acts, list) or not acts:
            raise bad("no prefix or activation list")
        try:
            W = [arrays[f"{prefix}W{i}"] for i in range(len(acts))]
            b = [arrays[f"{prefix}b{i}"] for i in range(len(acts))]
        except KeyError as e:
            raise bad(f"array {e.args[0]!r} is missing") from e
        try:
            net = cls(W, b, acts)
        except (ValueError, TypeError) as e:
            raise bad(str(e)) from e
        if sizes is not None and list(net.sizes) != list(sizes):
            raise bad(f"layer sizes {list(net.sizes)} disagree with the recorded {sizes}")
        return net
