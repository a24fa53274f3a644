"""The ONNX graphs of subspace models (:mod:`core.data.onnx` builds them): what their
``positions`` output is, and the decoder graph of the autoencoder and Shen 2021 models."""

from __future__ import annotations

import numpy as np

from .nnet import MLP

#: What the ``positions`` output of a subspace model's ONNX graph is (:mod:`core.onnxgraph`).
ONNX_POSITIONS = (
    "X + U q (m), vertex positions of the tet mesh in the pins' frame: world = R y + c with "
    "the pins' rigid motion (the identity for an object whose pins do not move)"
)


def onnx_decoder_graph(model, g, latent: str, doc: str, split: int = 0) -> None:
    """A decoder model's ONNX graph: ``latent`` (B, r) -> PCA coordinates ``q`` (B, k) ->
    positions. ``split`` > 0 (Shen 2021) passes the first ``split`` latent coordinates
    through as the first PCA coordinates (``q = [p, 0] + F D(r[d0:])``, ``d0`` 0 when the
    decoder reads them, else ``split``); the decoder is the model file's ``decoder``."""
    a, meta = model.arrays, model.metadata
    U = np.asarray(a["U"])
    k = U.shape[1]
    net = MLP.from_arrays(a, meta["decoder"])
    if split:  # the filter F = I - E_p E_p^T on its output, as ShenSimulation applies it
        W, b = list(net.W), list(net.b)
        W[-1], b[-1] = W[-1].copy(), b[-1].copy()
        W[-1][:split], b[-1][:split] = 0.0, 0.0
        net = MLP(W, b, net.activations)
    d0 = 0 if (not split or meta.get("decoder_sees_p")) else split
    r = g.input(latent, ["B", d0 + net.in_dim], doc)
    x = (
        r
        if d0 == 0
        else g.node(
            "Slice",
            r,
            g.const([d0], "start", integer=True),
            g.const([d0 + net.in_dim], "end", integer=True),
            g.const([1], "axes", integer=True),
        )
    )
    q = g.mlp(x, net, "decoder")
    if split:
        E = np.zeros((d0 + net.in_dim, k))
        E[np.arange(split), np.arange(split)] = 1.0
        q = g.node("Add", g.node("MatMul", r, g.const(E, "pass_through")), q)
    g.output(q, "q", ["B", k], "q: PCA coordinates (m) of the shape")
    g.affine_positions(q, np.asarray(a["X"]), U, "positions", ONNX_POSITIONS)
