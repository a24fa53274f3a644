"""LiCROM's training data: bakes of one or several meshes of an object family (given as
paths, or per object with its origin), opened, split and held out as whole bakes
(:mod:`training.licrom`'s docstring has the method)."""

from __future__ import annotations

import glob as _glob
import os
from pathlib import Path

import numpy as np

from ...core.data.cache import BAKE_SUFFIX, BakeCache, BakeDataset
from ...core.errors import CacheError, NeuralRomError
from ...core.methods.licrom import (
    body_frames,
)
from ...core.physics import fem as _fem
from ...core.reduced.pose import to_pin_frame
from ..run import TrainingBakes, physics_of

# ------------------------------------------------------------------------------------------
# Bakes of several meshes
# ------------------------------------------------------------------------------------------


def bake_entries(bakes) -> tuple[list[Path], list[np.ndarray | None]]:
    """Bake paths and their reference origins from a list, a glob or a folder.

    A list entry is a path, or ``{"path": ..., "origin": [x, y, z]}``: the point of the bake's
    world space (metres) that is the model's reference origin, the origin of the object the
    bake simulated (see :func:`open_family`). Returns ``(paths, origins)``, None where an
    entry gives no origin.
    """
    if isinstance(bakes, (str, os.PathLike)):
        paths = _bake_paths(bakes)
        return paths, [None] * len(paths)
    paths, origins = [], []
    for b in bakes:
        if isinstance(b, dict):
            paths.append(Path(b["path"]))
            o = b.get("origin")
            if o is not None:
                o = np.asarray(o, dtype=np.float64).reshape(3)
                if not np.all(np.isfinite(o)):
                    raise NeuralRomError(f"the reference origin of {b['path']} is not finite")
            origins.append(o)
        else:
            paths.append(Path(b))
            origins.append(None)
    if not paths:
        raise CacheError("no bakes given: LiCROM trains on at least one bake")
    if any(o is None for o in origins) and any(o is not None for o in origins):
        raise NeuralRomError(
            "some bakes give a reference origin and some do not: give every bake its object's "
            "origin (training several objects at once) or none (one object, world space)"
        )
    return paths, origins


def _bake_paths(bakes) -> list[Path]:
    """Bake paths from a list, a glob or a folder (as :meth:`BakeDataset.open` takes them)."""
    if isinstance(bakes, (str, os.PathLike)):
        s = os.fspath(bakes)
        if _glob.has_magic(s):
            found = sorted(_glob.glob(s))
            if not found:
                raise CacheError(f"no bakes match {s!r}; bake the scenarios first")
            return [Path(p) for p in found]
        if Path(s).is_dir() and Path(s).suffix != BAKE_SUFFIX:
            found = sorted(Path(s).glob("*" + BAKE_SUFFIX))
            if not found:
                raise CacheError(f"no *{BAKE_SUFFIX} bakes in {s}; bake the scenarios first")
            return found
        return [Path(s)]
    paths = [Path(p) for p in bakes]
    if not paths:
        raise CacheError("no bakes given: LiCROM trains on at least one bake")
    return paths


class Mesh:
    """One mesh of the family: rest nodes X (n, 3) (world, as baked) and ``X_ref`` (the same in
    the model's reference space: ``X - origin``), tets T (m, 4), pinned nodes, lumped masses
    (kg) and the indices of its bakes in the whole list."""

    def __init__(
        self, cache: BakeCache, material: _fem.Material, origin: np.ndarray | None = None
    ) -> None:
        self.X = np.asarray(cache.X, dtype=np.float64)
        self.origin = np.zeros(3) if origin is None else np.asarray(origin, np.float64)
        self.X_ref = self.X - self.origin
        self.T = np.asarray(cache.T, dtype=np.int64)
        self.hash = cache.mesh_hash
        self.pinned = (
            np.asarray(cache.extra("pinned"), np.int64)
            if "pinned" in cache.extra_names
            else np.zeros(0, np.int64)
        )
        self.mass = _fem.mass_matrix(self.X, self.T, material.density, lumped=True)
        self.bakes: list[int] = []

    def displacements(
        self, cache: BakeCache, frames: np.ndarray, floating: bool = False
    ) -> np.ndarray:
        """Displacements (F, n, 3) of ``frames`` of a bake, metres: in the pins' frame, or with
        ``floating`` in the body frame (each frame's best rigid motion taken out,
        :func:`core.methods.licrom.body_frames`)."""
        x = np.asarray(cache.channel("positions"))[frames]
        if floating:
            R, c = body_frames(self.X, x, self.mass)
            return np.einsum("fia,fab->fib", x - c[:, None], R) - self.X  # R^T (x - c) - X
        return to_pin_frame(x, self.X, self.pinned) - self.X


def open_family(bakes, validation_fraction: float, seed: int, expect_mesh_hash: str | None):
    """Open bakes of several meshes of one object family (one physics).

    ``bakes`` as :func:`bake_entries` takes them. The model's reference space (where the
    field, its domain and its pins live) is the bakes' world space, or, where the entries
    give each bake's origin (the origin of the object it simulated, at the bake's start),
    world space shifted so that origin is zero: the meshes of several objects placed apart
    in a scene (three variants of a prop side by side) then share one reference space,
    each relative to its own object's origin. Displacements are translation-free, so they
    are the world ones either way.

    Returns ``(caches, meshes, mesh_of, train, val, primary)``: the opened bakes, the distinct
    meshes (:class:`Mesh`, in order of first appearance), the mesh index of each bake, the
    whole-bake split (global indices) and the index of the primary mesh (the one the model
    is replayed and opened on by default: ``expect_mesh_hash``'s, else the first held-out
    bake's, else the first).
    """
    paths, origins = bake_entries(bakes)
    caches = [BakeCache.open(p) for p in paths]
    all_ds = BakeDataset(caches)
    material_dict, _ = physics_of(all_ds)
    material = _fem.Material.from_dict(material_dict)
    meshes: list[Mesh] = []
    by_hash: dict[str, int] = {}
    mesh_of = []
    for i, c in enumerate(caches):
        if c.mesh_hash not in by_hash:
            by_hash[c.mesh_hash] = len(meshes)
            meshes.append(Mesh(c, material, origins[i]))
        m = by_hash[c.mesh_hash]
        meshes[m].bakes.append(i)
        mesh_of.append(m)
    train, val = all_ds.split(validation_fraction, seed)
    if expect_mesh_hash is not None:
        if expect_mesh_hash not in by_hash:
            raise CacheError(
                "None of the bakes belongs to the target mesh; bake it (or one of its family) "
                "on the object you train for, or train without a target."
            )
        primary = by_hash[expect_mesh_hash]
        mine = np.asarray(meshes[primary].bakes)
        if len(val) and len(mine) > 1 and not np.isin(val, mine).any():
            # the held-out rollout replays a bake of the target mesh: trade one of its
            # training bakes for a held-out bake of another mesh (the same count held out)
            take = int(np.setdiff1d(mine, val)[-1])
            train = np.sort(np.append(np.setdiff1d(train, [take]), val[0]))
            val = np.sort(np.append(val[1:], take))
    else:
        primary = mesh_of[int(val[0])] if len(val) else 0
    return caches, meshes, np.array(mesh_of), train, val, primary, material, all_ds


def primary_bakes(caches, meshes, mesh_of, train, val, primary, material, all_ds):
    """The :class:`TrainingBakes` of the primary mesh (what :class:`TrainingRun` replays
    and writes the physics of), with local train/val indices."""
    mine = meshes[primary].bakes
    local = {g: i for i, g in enumerate(mine)}
    ds = BakeDataset([caches[g] for g in mine])
    m = meshes[primary]
    tr = np.array([local[g] for g in train if g in local], np.int64)
    va = np.array([local[g] for g in val if g in local], np.int64)
    warnings = []
    if len(val) == 0:
        warnings.append(
            "Only one bake: nothing is held out, so the validation error is the training error. "
            "Bake more variants for an honest error."
            if len(caches) == 1
            else "Nothing is held out (validation fraction 0), so the validation error is the "
            "training error. Hold out a share of the bakes for an honest error."
        )
    spec = physics_of(all_ds)[1]
    return TrainingBakes(ds, spec, material, m.X, m.T, m.pinned, m.mass, tr, va, warnings)
