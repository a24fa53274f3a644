"""Tet-mesh files: our ``.npz`` (keeps ``n_surface_inputs`` and the hash) and, through
``meshio`` (imported lazily), Gmsh ``.msh``, ``.vtu`` and ``.vtk``. Writes are atomic
(:mod:`.files`).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np

from ..errors import MeshError
from ..geometry.tetmesh import TetMesh, drop_unused_nodes, orient_positive
from .files import atomic_path, write_npz

__all__ = ["read_tetmesh", "write_tetmesh"]

_NPZ_FORMAT = "neural_rom.tetmesh"
_NPZ_VERSION = 1
# point-data array carrying n_surface_inputs through .msh/.vtu/.vtk
_SURFACE_MARKER = "neural_rom_surface_input"


def _meshio_module(suffix: str):
    import meshio  # lazy: only needed for file I/O

    return {".msh": meshio.gmsh, ".vtu": meshio.vtu, ".vtk": meshio.vtk}.get(suffix)


_SUPPORTED = ".npz, .msh (Gmsh 4.1), .vtu, .vtk"


def write_tetmesh(path, mesh: TetMesh) -> None:
    """Write a tet mesh: ``.npz`` (ours, keeps ``n_surface_inputs`` and the hash), or through
    meshio ``.msh`` (Gmsh 4.1 binary), ``.vtu``, ``.vtk``. Coordinates are written as float64
    exactly. The file appears atomically (:mod:`.files`).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    mod = None if suffix == ".npz" else _meshio_module(suffix)
    if suffix != ".npz" and mod is None:
        raise MeshError(f"Cannot write '{path.name}': use one of {_SUPPORTED}.")
    if mod is None:
        arrays = {
            "format": np.array(_NPZ_FORMAT),
            "version": np.array(_NPZ_VERSION, dtype=np.int64),
            "X": np.asarray(mesh.X),
            "T": np.asarray(mesh.T),
            "n_surface_inputs": np.array(mesh.n_surface_inputs, dtype=np.int64),
            "hash": np.array(mesh.hash()),
        }
        write_npz(path, arrays)
        return
    import meshio

    marker = (np.arange(mesh.n_vertices) < mesh.n_surface_inputs).astype(np.int32)
    m = meshio.Mesh(
        np.asarray(mesh.X), [("tetra", np.asarray(mesh.T))], point_data={_SURFACE_MARKER: marker}
    )
    with (
        atomic_path(path) as tmp,
        contextlib.redirect_stdout(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        mod.write(str(tmp), m)


def read_tetmesh(path) -> TetMesh:
    """Read a tet mesh written by :func:`write_tetmesh` or by another tool (Gmsh, TetGen via
    meshio, ...). Tets are re-oriented positively and unused nodes (e.g. Gmsh geometry points)
    dropped; quadratic ``tetra10`` cells keep their corner nodes. ``n_surface_inputs`` survives
    ``.npz`` and, through a point-data marker, our own ``.msh``/``.vtu``/``.vtk``.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"No tet mesh file at '{path}'. Check the path (relative to the .blend?).")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            # our own file handle: np.load leaks its handle when the zip is truncated
            with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as d:
                if "X" not in d or "T" not in d:
                    raise MeshError(
                        f"'{path.name}' is not a Neural ROM tet mesh (no X/T arrays); "
                        "re-export it with write_tetmesh."
                    )
                X, T = np.array(d["X"]), np.array(d["T"])
                ns = int(d["n_surface_inputs"]) if "n_surface_inputs" in d else 0
                stored = str(d["hash"]) if "hash" in d else None
        except MeshError:
            raise
        except Exception as exc:  # noqa: BLE001 - zipfile, pickle refusal, truncation: all "bad file"
            raise MeshError(
                f"Cannot read '{path.name}' ({type(exc).__name__}: {exc}); the file is truncated "
                "or not an .npz written by write_tetmesh. Re-export it."
            ) from None
        if len(T) == 0:
            raise MeshError(f"'{path.name}' holds no tetrahedra. Tetrahedralize the surface first.")
        mesh = TetMesh(X, T, ns)
        if stored is not None and stored != mesh.hash():
            raise MeshError(
                f"'{path.name}' is corrupted: its content does not match the hash stored with it. "
                "Re-export it."
            )
        return mesh

    mod = _meshio_module(suffix)
    if mod is None:
        raise MeshError(f"Cannot read '{path.name}': use one of {_SUPPORTED}.")
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = mod.read(str(path))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - meshio even calls sys.exit() on bad files
        raise MeshError(
            f"Cannot read '{path.name}' as {suffix[1:]} ({type(exc).__name__}: {exc}). "
            "Is the file complete and in that format?"
        ) from None
    blocks = []
    for cb in m.cells:
        if cb.type in ("tetra", "tetra10"):  # tetra10: keep the corner nodes
            blocks.append(np.asarray(cb.data)[:, :4])
    if not blocks:
        kinds = sorted({cb.type for cb in m.cells}) or ["none"]
        raise MeshError(
            f"'{path.name}' has no tetrahedra (cell types: {', '.join(kinds)}). It is a surface "
            "or another kind of mesh: tetrahedralize it first (tetrahedralize), or export the "
            "volume cells from the tool that made it."
        )
    X = np.asarray(m.points, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 3:
        raise MeshError(f"'{path.name}' has {X.shape[1]}-D points; a tet mesh needs 3-D points.")
    T = np.concatenate(blocks).astype(np.int64)
    if T.min() < 0 or T.max() >= len(X):
        raise MeshError(f"'{path.name}' has tets that index missing nodes; the file is corrupted.")
    T = orient_positive(X, T)
    ns = 0
    marker = m.point_data.get(_SURFACE_MARKER)
    X, T, new = drop_unused_nodes(X, T)
    if marker is not None:
        marker = np.asarray(marker).reshape(-1)
        if len(marker) == len(new):
            kept = marker[new >= 0] != 0
            k = int(kept.sum())
            if kept[:k].all():  # the marker is a prefix: the first k nodes are surface inputs
                ns = k
    return TetMesh(X, T, ns)
