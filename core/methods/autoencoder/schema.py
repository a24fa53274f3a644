"""The autoencoder model file: :func:`save`, :func:`load` and the decoder's ONNX graph
(:mod:`core.methods.autoencoder`)."""

from __future__ import annotations

from pathlib import Path

from ...physics.sim import SimSettings
from ...reduced.model import save_subspace_model, subspace_arguments
from ...reduced.nnet import MLP
from ...reduced.onnx import onnx_decoder_graph
from ...reduced.subspace import Subspace
from .runtime import (
    DEFAULT_LBFGS_TOL,
    DEFAULT_LBFGS_WINDOW,
    DEFAULT_MAX_ITERS,
    AutoencoderSimulation,
)

NAME = "autoencoder"


def save(
    path: str | Path,
    *,
    subspace: Subspace,
    decoder: MLP,
    encoder: MLP | None,
    metadata: dict | None = None,
    **model,
) -> Path:
    """Write an autoencoder latent-space model file (Fulton 2019).

    Parameters
    ----------
    path : target ``.nrmodel`` file (written atomically)
    subspace : the PCA outer layer ``U`` (3n, k), M-orthonormal, zero on pinned DOFs
    decoder : MLP ``phi``: latent (r,) -> PCA coordinates (k,); stored with prefix ``dec_``
    encoder : MLP (k,) -> (r,) or None; stored with prefix ``enc_``
    metadata : JSON-able extras merged into the file's metadata, typically ``training``
        (settings), ``metrics`` and ``lbfgs`` (``window``, ``tolerance``, ``max_iters``;
        this module's defaults when absent)
    model : the rest of :func:`core.reduced.model.save_subspace_model`'s keywords
        (``mesh_hash``, ``T``, ``cubature`` fitted on ``U``, ``contact``, ``material``,
        ``settings``)
    """
    if decoder.out_dim != subspace.k:
        raise ValueError(
            f"decoder outputs {decoder.out_dim} coordinates but the PCA basis has {subspace.k}"
        )
    if encoder is not None and (encoder.in_dim != subspace.k or encoder.out_dim != decoder.in_dim):
        raise ValueError(
            f"encoder maps {encoder.in_dim} -> {encoder.out_dim}; expected {subspace.k} -> "
            f"{decoder.in_dim}"
        )
    dec_arrays, dec_meta = decoder.to_arrays(prefix="dec_")
    enc_arrays, enc_meta = encoder.to_arrays(prefix="enc_") if encoder is not None else ({}, None)
    meta = {
        "decoder": dec_meta,
        "encoder": enc_meta,
        "latent_dim": int(decoder.in_dim),
        "k": int(subspace.k),
        "lbfgs": {
            "window": DEFAULT_LBFGS_WINDOW,
            "tolerance": DEFAULT_LBFGS_TOL,
            "max_iters": DEFAULT_MAX_ITERS,
        },
        **(metadata or {}),
    }
    arrays = {**dec_arrays, **enc_arrays}
    return save_subspace_model(path, NAME, subspace=subspace, arrays=arrays, metadata=meta, **model)


def load(model, *, settings: SimSettings | None = None, colliders=None) -> AutoencoderSimulation:
    """The runtime of an opened autoencoder model file."""
    a, meta = model.arrays, model.metadata
    decoder = MLP.from_arrays(a, meta["decoder"])
    encoder = MLP.from_arrays(a, meta["encoder"]) if meta.get("encoder") else None
    lb = meta.get("lbfgs") or {}
    args = subspace_arguments(model, settings, colliders)
    return AutoencoderSimulation(
        args.pop("X"),
        args.pop("T"),
        args.pop("material"),
        args.pop("U"),
        decoder,
        args.pop("settings"),
        encoder=encoder,
        lbfgs_window=int(lb.get("window", DEFAULT_LBFGS_WINDOW)),
        lbfgs_tol=float(lb.get("tolerance", DEFAULT_LBFGS_TOL)),
        max_iters=int(lb.get("max_iters", DEFAULT_MAX_ITERS)),
        **args,
    )


def onnx_graph(model, g) -> str:
    """The decoder of an opened model file as an ONNX graph (:mod:`core.onnxgraph`,
    :func:`.common.onnx_decoder_graph`); the latent dynamics stay in the runtime."""
    onnx_decoder_graph(model, g, "z", "z: latent coordinates (the decoder's input)", 0)
    return "Autoencoder (Fulton 2019) decoder: z -> PCA coordinates q -> positions = X + U q."
