"""Tetrahedralize an object's surface: what the worker's ``tetrahedralize`` job runs.

TetGen is native code that can crash or hang, so it never runs in Blender's process: the
add-on writes the object's world-space surface and settings (:func:`write_request`), the
worker meshes it (:func:`mesh_surface`) and writes the result next to the request
(:func:`write_result`), and the add-on stores it on the object when the job ended well
(:func:`read_result`). A crash, a kill or a cancel leaves only these job files behind; the
object and its recorded tets stay as they were.

Files, in the job folder (``<cache dir>/<object>/tets.job/``): ``surface.npz`` (``V`` (n, 3)
world m, ``F`` (k, 3), ``M`` (4, 4) ``matrix_world``), then ``tets.npz`` (local space,
:func:`.meshfile.write_tetmesh`), ``embedding.npz`` when the surface rides on a cage, and
``result.json`` (quality, warnings) written last: a folder without it holds no result.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import MeshError, NeuralRomError
from .files import write_atomic, write_npz

SURFACE_FILE = "surface.npz"
TETS_FILE = "tets.npz"
EMBEDDING_FILE = "embedding.npz"
RESULT_FILE = "result.json"


@dataclass
class TetJobResult:
    """A meshed surface: the tet mesh in the object's local space (its first
    ``n_surface_inputs`` nodes are the render vertices unless ``embedding`` carries them),
    the embedding or None, TetGen's quality measures and the mesher's warnings."""

    mesh: object  # core.tetmesh.TetMesh
    embedding: object | None  # core.embedding.Embedding
    quality: dict
    warnings: list[str] = field(default_factory=list)


def write_request(folder: Path, V: np.ndarray, F: np.ndarray, M: np.ndarray) -> Path:
    """Write the surface a job meshes into ``folder`` (created; an old result is removed).

    Parameters
    ----------
    V : (n, 3) float array, world metres. F : (k, 3) int array. M : (4, 4) ``matrix_world``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in (RESULT_FILE, TETS_FILE, EMBEDDING_FILE):
        (folder / name).unlink(missing_ok=True)
    path = folder / SURFACE_FILE
    write_npz(
        path,
        {
            "V": np.asarray(V, dtype=np.float64),
            "F": np.asarray(F, dtype=np.int64),
            "M": np.asarray(M, dtype=np.float64),
        },
    )
    return path


def mesh_surface(
    V: np.ndarray,
    F: np.ndarray,
    M: np.ndarray,
    *,
    name: str,
    embedded: bool,
    target_edge_length: float,
    quality: float,
    cage_resolution: int,
) -> TetJobResult:
    """Tetrahedralize a world-space surface (or a cage around it) and map it to local space.

    Tet size is in world metres; the result is in the object's local space (``M`` is its
    ``matrix_world``). With ``embedded`` the surface rides on a cage
    (:func:`.cage.tetrahedralize_embedded`); otherwise it must be closed and manifold (the
    caller checked) and its vertices stay the first tet nodes.

    Raises
    ------
    MeshError
        TetGen failed, or did not keep the surface vertices; the message says which
        setting of object ``name`` to change.
    """
    from .cage import tetrahedralize_embedded
    from .mesher import tetrahedralize
    from .tetmesh import TetMesh

    V = np.asarray(V, dtype=np.float64)
    kw = {"target_edge_length": float(target_edge_length), "quality": float(quality)}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if embedded:
                tm, emb = tetrahedralize_embedded(V, F, resolution=int(cage_resolution), **kw)
            else:
                # boundary may be split (finer tets than the render mesh); the render vertices
                # stay the first nodes, so the render mesh still maps one to one
                tm = tetrahedralize(V, F, keep_surface=False, check=False, **kw)
                emb = None
    except NeuralRomError:
        raise
    except Exception as e:  # the mesher's own failures (tetgen RuntimeError, ...)
        raise MeshError(
            f"Tetrahedralizing '{name}' failed ({e}). Try Embedding 'Always', a larger "
            "Tet Size or a higher Quality bound."
        ) from e
    if emb is None and tm.n_surface_inputs != len(V):
        raise MeshError(
            f"The tets of '{name}' do not keep its vertices as nodes; set Embedding to "
            "'Always' to simulate it through a cage."
        )
    q = tm.quality
    measures = dict(q() if callable(q) else q)
    Minv = np.linalg.inv(np.asarray(M, dtype=np.float64))
    local = TetMesh(tm.X @ Minv[:3, :3].T + Minv[:3, 3], tm.T, tm.n_surface_inputs)
    return TetJobResult(local, emb, measures, [str(w.message) for w in caught])


def write_result(folder: Path, result: TetJobResult) -> None:
    """Write a meshed surface into the job folder; ``result.json`` last (the commit)."""
    from .meshfile import write_tetmesh

    folder = Path(folder)
    write_tetmesh(folder / TETS_FILE, result.mesh)
    if result.embedding is not None:
        write_npz(folder / EMBEDDING_FILE, result.embedding.to_arrays())
    info = {
        "quality": {k: float(v) for k, v in result.quality.items()},
        "warnings": list(result.warnings),
        "embedded": result.embedding is not None,
    }
    write_atomic(folder / RESULT_FILE, json.dumps(info, indent=1).encode())


def read_result(folder: Path) -> TetJobResult:
    """The meshed surface a finished job left in ``folder``.

    Raises
    ------
    MeshError
        The job left no (complete) result: it failed, crashed or was cancelled.
    """
    from .embedding import Embedding
    from .meshfile import read_tetmesh

    folder = Path(folder)
    try:
        info = json.loads((folder / RESULT_FILE).read_text())
        mesh = read_tetmesh(folder / TETS_FILE)
        emb = None
        if info.get("embedded"):
            with np.load(folder / EMBEDDING_FILE, allow_pickle=False) as z:
                emb = Embedding.from_arrays({k: z[k] for k in z.files})
    except (OSError, ValueError, KeyError, NeuralRomError) as e:
        raise MeshError(
            f"The tetrahedralize job left no result in {folder} ({e}); run Tetrahedralize again."
        ) from e
    return TetJobResult(mesh, emb, dict(info.get("quality", {})), list(info.get("warnings", [])))
