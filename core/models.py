"""Trained models: write them as torch-free model files and turn them back into simulators.

``load_simulator`` is what Blender's frame driver calls: it reads a ``.nrmodel`` file
(:mod:`.modelfile`: arrays + JSON, no pickle), checks it belongs to the mesh, and returns an
object following :class:`.reduced.Simulator`. Each method registers a loader here, so the
driver has one entry point for all of them: ``"linear"`` plays back as
:class:`.reduced.ReducedSimulation`, ``"autoencoder"`` (Fulton 2019) as
:class:`.latent.LatentSimulation`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import fem as _fem
from .colliders import Collider
from .cubature import Cubature
from .errors import CacheError
from .latent import (
    DEFAULT_LBFGS_TOL,
    DEFAULT_LBFGS_WINDOW,
    DEFAULT_MAX_ITERS,
    LatentSimulation,
)
from .modelfile import load_model, save_model
from .nnet import MLP
from .reduced import ReducedSimulation
from .sim import SimSettings
from .subspace import Subspace

LINEAR = "linear"
AUTOENCODER = "autoencoder"
METHODS = (LINEAR, AUTOENCODER)


def settings_to_dict(s: SimSettings) -> dict:
    return {
        "dt": float(s.dt),
        "substeps": int(s.substeps),
        "gravity": [float(g) for g in s.gravity],
        "damping_alpha": float(s.damping_alpha),
        "damping_beta": float(s.damping_beta),
        "newton_tol": float(s.newton_tol),
        "max_newton_iters": int(s.max_newton_iters),
    }


def _subspace_payload(T, subspace, cubature, contact, material, settings) -> tuple[dict, dict]:
    """Arrays and metadata every subspace model file has: basis, cubature, contact, physics."""
    arrays = {
        "X": subspace.X,
        "T": np.asarray(T, dtype=np.int64),
        "U": subspace.U,
        "mass": subspace.mass,
        "pinned": subspace.pinned,
        "cubature_elements": cubature.elements,
        "cubature_weights": cubature.weights,
        "contact_vertices": np.asarray(contact[0], dtype=np.int64),
        "contact_mass": np.asarray(contact[1], dtype=np.float64),
    }
    meta = {
        "material": material.to_dict(),
        "settings": settings_to_dict(settings),
        "subspace": {"kind": subspace.kind, "k": subspace.k, "info": subspace.info},
        "cubature": cubature.info,
    }
    return arrays, meta


def save_linear_model(
    path: str | Path,
    *,
    mesh_hash: str,
    T: np.ndarray,
    subspace: Subspace,
    cubature: Cubature,
    contact: tuple[np.ndarray, np.ndarray],
    material: _fem.Material,
    settings: SimSettings,
    metadata: dict | None = None,
) -> Path:
    """Write a linear (POD/modal + cubature) model file.

    Parameters
    ----------
    path : target ``.nrmodel`` file (written atomically)
    mesh_hash : hash of the tet mesh (world space, as baked) the model belongs to
    T : (m, 4) int array
    subspace, cubature : the trained basis and cubature rule
    contact : (vertices (s,), masses (s,)) contact sample
    material, settings : the physics the model steps with
    metadata : training settings and metrics (JSON-able)
    """
    arrays, meta = _subspace_payload(T, subspace, cubature, contact, material, settings)
    meta.update(metadata or {})
    return save_model(path, method=LINEAR, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def save_autoencoder_model(
    path: str | Path,
    *,
    mesh_hash: str,
    T: np.ndarray,
    subspace: Subspace,
    cubature: Cubature,
    contact: tuple[np.ndarray, np.ndarray],
    material: _fem.Material,
    settings: SimSettings,
    decoder: MLP,
    encoder: MLP | None,
    metadata: dict | None = None,
) -> Path:
    """Write an autoencoder latent-space model file (Fulton 2019).

    Parameters
    ----------
    path : target ``.nrmodel`` file (written atomically)
    mesh_hash : hash of the tet mesh (world space, as baked) the model belongs to
    T : (m, 4) int array
    subspace : the PCA outer layer ``U`` (3n, k), M-orthonormal, zero on pinned DOFs
    cubature : cubature rule fitted on ``U``
    contact : (vertices (s,), masses (s,)) contact sample
    material, settings : the physics the model steps with
    decoder : MLP ``phi``: latent (r,) -> PCA coordinates (k,); stored with prefix ``dec_``
    encoder : MLP (k,) -> (r,) or None; stored with prefix ``enc_``
    metadata : JSON-able extras merged into the file's metadata, typically ``training``
        (settings), ``metrics`` and ``lbfgs`` (``window``, ``tolerance``, ``max_iters``;
        defaults of :mod:`.latent` when absent)
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
    arrays, meta = _subspace_payload(T, subspace, cubature, contact, material, settings)
    arrays.update(dec_arrays, **enc_arrays)
    meta.update(
        {
            "decoder": dec_meta,
            "encoder": enc_meta,
            "latent_dim": int(decoder.in_dim),
            "pca_dim": int(subspace.k),
            "lbfgs": {
                "window": DEFAULT_LBFGS_WINDOW,
                "tolerance": DEFAULT_LBFGS_TOL,
                "max_iters": DEFAULT_MAX_ITERS,
            },
            **(metadata or {}),
        }
    )
    return save_model(path, method=AUTOENCODER, mesh_hash=mesh_hash, arrays=arrays, metadata=meta)


def load_simulator(
    path: str | Path,
    *,
    expect_mesh_hash: str | None = None,
    colliders: list[Collider] | None = None,
    settings: SimSettings | None = None,
):
    """A simulator for the model file at ``path``.

    Parameters
    ----------
    expect_mesh_hash : refuse a model of another mesh (:class:`CacheError` says what to do)
    colliders : initial colliders
    settings : override the time step settings stored in the model

    Returns
    -------
    (simulator, model) : a :class:`.reduced.Simulator` and the loaded :class:`modelfile.Model`
    """
    model = load_model(path, expect_mesh_hash=expect_mesh_hash)
    if model.method not in METHODS:
        raise CacheError(
            f"{Path(path).name} holds a {model.method!r} model, which this version of Neural ROM "
            f"cannot run (it knows {', '.join(METHODS)}): update the extension."
        )
    a, meta = model.arrays, model.metadata
    s = settings or SimSettings(**meta["settings"])
    material = _fem.Material.from_dict(meta["material"])
    if model.method == AUTOENCODER:
        try:
            decoder = MLP.from_arrays(a, meta["decoder"])
            encoder = MLP.from_arrays(a, meta["encoder"]) if meta.get("encoder") else None
        except KeyError as e:
            raise CacheError(
                f"{Path(path).name} has no decoder description; the model file is corrupt or "
                "was written by another tool: retrain the model."
            ) from e
        lb = meta.get("lbfgs") or {}
        sim = LatentSimulation(
            a["X"],
            a["T"],
            material,
            a["U"],
            decoder,
            s,
            pinned=a["pinned"],
            cubature=(a["cubature_elements"], a["cubature_weights"]),
            contact=(a["contact_vertices"], a["contact_mass"]),
            colliders=colliders,
            encoder=encoder,
            lbfgs_window=int(lb.get("window", DEFAULT_LBFGS_WINDOW)),
            lbfgs_tol=float(lb.get("tolerance", DEFAULT_LBFGS_TOL)),
            max_iters=int(lb.get("max_iters", DEFAULT_MAX_ITERS)),
        )
        return sim, model
    sim = ReducedSimulation(
        a["X"],
        a["T"],
        material,
        a["U"],
        s,
        pinned=a["pinned"],
        cubature=(a["cubature_elements"], a["cubature_weights"]),
        contact=(a["contact_vertices"], a["contact_mass"]),
        colliders=colliders,
    )
    return sim, model
