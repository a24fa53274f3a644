"""The active-face model file: :func:`save`, and :func:`load` (its runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...data.modelfile import save_model
from ...geometry.embedding import Embedding
from ...physics.fem import Material
from ...reduced.nnet import MLP
from .model import ActiveModel
from .runtime import ActiveFace

NAME = "active"


def save(path: str | Path, model: ActiveModel, metadata: dict | None = None) -> Path:
    """Write an active-face model file (torch-free)."""
    dec_arrays, dec_meta = model.decoder.to_arrays("decoder.")
    arrays = {
        "X": model.X,
        "T": model.T,
        "fixed": model.fixed,
        "jaw_nodes": model.jaw_nodes,
        "jaw_pivot": model.jaw_pivot,
        "jaw_axis": model.jaw_axis,
        "codes": model.codes,
        "lift": model.lift,
        "U": model.U,
        "cub_elements": model.cub_elements,
        "cub_weights": model.cub_weights,
        "jaw_scale": np.array(float(model.jaw_scale)),
        "detail": model.detail,
        "blend": model.blend,
        **dec_arrays,
        **{f"skin.{k}": v for k, v in model.skin.to_arrays().items()},
    }
    meta = {"material": model.material.to_dict(), "decoder": dec_meta, **(metadata or {})}
    return save_model(path, method=NAME, mesh_hash=model.hash(), arrays=arrays, metadata=meta)


def model_from_file(model) -> ActiveModel:
    """The :class:`ActiveModel` of an opened model file (:class:`core.modelfile.Model`)."""
    a, meta = model.arrays, model.metadata
    return ActiveModel(
        X=a["X"],
        T=a["T"],
        material=Material.from_dict(meta["material"]),
        fixed=a["fixed"],
        jaw_nodes=a["jaw_nodes"],
        jaw_pivot=a["jaw_pivot"],
        jaw_axis=a["jaw_axis"],
        skin=Embedding.from_arrays({k[5:]: v for k, v in a.items() if k.startswith("skin.")}),
        decoder=MLP.from_arrays(a, meta["decoder"]),
        codes=a["codes"],
        lift=a["lift"],
        U=a["U"],
        cub_elements=a["cub_elements"],
        cub_weights=a["cub_weights"],
        jaw_scale=float(a["jaw_scale"]) if "jaw_scale" in a else 0.0,
        detail=a["detail"] if "detail" in a else np.zeros((0, 0)),
        blend=a["blend"] if "blend" in a else np.zeros((0, 0)),
    )


def load(model, *, settings=None, colliders=None) -> ActiveFace:
    """The runtime of an opened active-face model file."""
    return ActiveFace(model_from_file(model), colliders=colliders)
