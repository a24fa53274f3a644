"""The Shen 2021 model file: :func:`save`, :func:`load` and the decoder's ONNX graph
(:mod:`core.methods.shen`)."""

from __future__ import annotations

from pathlib import Path

from ...physics.sim import SimSettings
from ...reduced.model import save_subspace_model, subspace_arguments
from ...reduced.nnet import MLP
from ...reduced.onnx import onnx_decoder_graph
from ...reduced.subspace import Subspace
from .runtime import ShenSimulation

NAME = "shen"


def save(
    path: str | Path,
    *,
    subspace: Subspace,
    n_p: int,
    decoder: MLP,
    encoder: MLP | None,
    metadata: dict | None = None,
    decoder_sees_p: bool = False,
    **model,
) -> Path:
    """Write a Shen 2021 model file.

    Parameters
    ----------
    subspace : the PCA basis ``V`` (3n, k), M-orthonormal; its first ``n_p`` columns are the
        linear part
    decoder : ``D``: (n_z,) -> (k,), or (n_p + n_z,) -> (k,) with ``decoder_sees_p`` (stored
        with prefix ``dec_``; filtered when loaded)
    encoder : (k,) -> (n_z,) or None (prefix ``enc_``)
    The rest as :func:`core.methods.autoencoder.save`.
    """
    if decoder.out_dim != subspace.k or not 0 <= n_p < subspace.k:
        raise ValueError(
            f"decoder outputs {decoder.out_dim} coordinates, n_p = {n_p}; the basis has "
            f"{subspace.k}"
        )
    dec_arrays, dec_meta = decoder.to_arrays(prefix="dec_")
    arrays = dict(dec_arrays)
    enc_meta = None
    if encoder is not None:
        enc_arrays, enc_meta = encoder.to_arrays(prefix="enc_")
        arrays.update(enc_arrays)
    meta = {
        "decoder": dec_meta,
        "encoder": enc_meta,
        "n_p": int(n_p),
        "n_z": int(decoder.in_dim - (n_p if decoder_sees_p else 0)),
        "decoder_sees_p": bool(decoder_sees_p),
        "k": int(subspace.k),
        **(metadata or {}),
    }
    return save_subspace_model(path, NAME, subspace=subspace, arrays=arrays, metadata=meta, **model)


def load(model, *, settings: SimSettings | None = None, colliders=None) -> ShenSimulation:
    """The runtime of an opened Shen model file."""
    a, meta = model.arrays, model.metadata
    decoder = MLP.from_arrays(a, meta["decoder"])
    encoder = MLP.from_arrays(a, meta["encoder"]) if meta.get("encoder") else None
    args = subspace_arguments(model, settings, colliders)
    return ShenSimulation(
        args.pop("X"),
        args.pop("T"),
        args.pop("material"),
        args.pop("U"),
        int(meta["n_p"]),
        decoder,
        args.pop("settings"),
        encoder=encoder,
        fictitious=bool(meta.get("fictitious", True)),
        decoder_sees_p=bool(meta.get("decoder_sees_p", False)),
        **args,
    )


def onnx_graph(model, g) -> str:
    """The decoder of an opened model file as an ONNX graph (:mod:`core.onnxgraph`,
    :func:`.common.onnx_decoder_graph`); the latent dynamics stay in the runtime."""
    onnx_decoder_graph(
        model,
        g,
        "r",
        "r = (p, z): the linear PCA coordinates p (m) then the latent z (generalized coordinates)",
        int(model.metadata["n_p"]),
    )
    return "High-order autoencoder (Shen 2021) decoder: r = (p, z) -> q = [p, 0] + D(z) -> positions = X + U q."
