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

from ..data.files import write_atomic, write_npz
from ..errors import JobCancelled, MeshError, NeuralRomError
from .events import Progress, emit, should_cancel

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
    from ..geometry.cage import tetrahedralize_embedded
    from ..geometry.embedding import embed_points
    from ..geometry.mesher import tetrahedralize
    from ..geometry.tetmesh import TetMesh

    V = np.asarray(V, dtype=np.float64)
    kw = {"target_edge_length": float(target_edge_length), "quality": float(quality)}
    notes: list[str] = []
    meshed = V, F
    if not embedded:
        meshed = _repaired(V, F, name, float(target_edge_length), notes)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if embedded:
                tm, emb = tetrahedralize_embedded(V, F, resolution=int(cage_resolution), **kw)
            else:
                # boundary may be split (finer tets than the render mesh); the render vertices
                # stay the first nodes, so the render mesh still maps one to one (a repaired
                # surface's ride on its tets: an embedding, exact at rest)
                tm = tetrahedralize(*meshed, keep_surface=False, check=False, **kw)
                emb = None if meshed[0] is V else embed_points(V, tm)
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
    _refuse_degenerate(tm, meshed, name, float(target_edge_length), measures, notes)
    Minv = np.linalg.inv(np.asarray(M, dtype=np.float64))
    local = TetMesh(tm.X @ Minv[:3, :3].T + Minv[:3, 3], tm.T, tm.n_surface_inputs)
    return TetJobResult(local, emb, measures, notes + [str(w.message) for w in caught])


#: Surface vertices closer than this share of the Tet Size are merged before meshing.
MERGE_SHARE = 0.01

#: More tets than this many times the Tet Size's count (the volume over a regular tet's, or
#: four per surface face for a thin body) is refused: features far below the Tet Size
#: forced TetGen to refine around them.
EXPLOSION_FACTOR = 30.0

#: A smallest dihedral angle below this (degrees) is a flat tet: the user is told.
FLAT_DIHEDRAL_DEG = 0.1


def _repaired(V, F, name: str, edge: float, notes: list[str]):
    """``(V, F)`` as given, or with the vertices closer than :data:`MERGE_SHARE` of the
    Tet Size merged and the faces that collapse dropped (:func:`.surface.
    merge_close_vertices`), a note added; refused when the repaired surface is not closed."""
    from ..geometry.surface import check_surface, merge_close_vertices

    V2, F2, merged, dropped = merge_close_vertices(V, F, MERGE_SHARE * edge)
    if not merged and not dropped:
        return V, F
    try:
        check_surface(V2, F2)
    except MeshError as e:
        raise MeshError(
            f"'{name}' has {merged} vertices within {MERGE_SHARE * edge * 1000:.3g} mm of "
            "others (a Boolean through a ring of vertices leaves them), which would fill it "
            "with slivers, and merging them does not leave a closed surface: merge them in "
            f"Blender (Mesh > Clean Up > Merge by Distance) and fix the mesh. Details: {e}"
        ) from None
    notes.append(
        f"'{name}': merged {merged} vertices within {MERGE_SHARE * edge * 1000:.3g} mm of "
        f"others and dropped {dropped} faces of no area before meshing (they would have "
        "made slivers); its vertices ride on the tets of the repaired surface."
    )
    return V2, F2


def _refuse_degenerate(tm, surface, name: str, edge: float, measures: dict, notes) -> None:
    """Refuse tets far more numerous than the Tet Size asks; note a flat tet (a Boolean's
    sliver faces leave some next to the surface: measured 0.01 degrees, harmless to the
    solver there, but worth a cleanup)."""
    from ..geometry.surface import enclosed_volume

    V, F = surface
    # a thin body's count is set by its surface: its faces are faces of tets
    expected = max(abs(enclosed_volume(V, F)) / (edge**3 / (6.0 * np.sqrt(2.0))), 4.0 * len(F))
    e = float(np.linalg.norm(V[F] - V[np.roll(F, 1, axis=1)], axis=2).min())
    dihedral = float(measures.get("min_dihedral_deg", 90.0))
    if len(tm.T) > EXPLOSION_FACTOR * expected + 1000:
        raise MeshError(
            f"Tetrahedralizing '{name}' made {len(tm.T):,} tets where its Tet Size asks "
            f"about {expected:,.0f}, smallest dihedral angle {dihedral:.2g} degrees: its surface "
            f"has features far smaller than the Tet Size (shortest edge {e * 1000:.3g} mm). "
            "Clean the mesh (Mesh > Clean Up > Merge by Distance, Limited Dissolve) or raise "
            "Tet Size."
        )
    if dihedral < FLAT_DIHEDRAL_DEG:
        notes.append(
            f"'{name}' has nearly flat tets (smallest dihedral angle {dihedral:.2g} degrees) "
            f"next to sliver faces of its surface (shortest edge {e * 1000:.3g} mm); if it "
            "simulates stiffly there, clean the mesh (Mesh > Clean Up > Limited Dissolve)."
        )


def write_result(folder: Path, result: TetJobResult) -> None:
    """Write a meshed surface into the job folder; ``result.json`` last (the commit)."""
    from ..data.meshfile import write_tetmesh

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
    from ..data.meshfile import read_tetmesh
    from ..geometry.embedding import Embedding

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


def run_tetrahedralize(spec: dict) -> dict:
    """``kind: "tetrahedralize"``: mesh an object's surface, or a cage around it, with
    TetGen (:func:`mesh_surface`) and leave the tets in the job folder, where the
    add-on stores them when the job ended well (``addon/tets.py``).

    TetGen has no safe point: a cancel is seen before and after it, and a cancel during it
    (or a hang) ends with the parent killing this worker (``cancel_timeout_s``). A crash, a
    kill or a cancel leaves no ``result.json``, so the object keeps what it had.

    Spec keys: ``folder`` (with ``surface.npz``), ``name``, ``embedded``,
    ``target_edge_length`` (m), ``quality``, ``cage_resolution``.
    """
    folder = Path(spec["folder"])
    name = str(spec["name"])
    meter = Progress(3)
    with np.load(folder / SURFACE_FILE, allow_pickle=False) as z:
        V, F, M = z["V"], z["F"], z["M"]
    what = "a cage around" if spec["embedded"] else "the surface of"
    meter.update(1, f"meshing {what} {name} ({len(V)} vertices)")
    if should_cancel():
        raise JobCancelled(f"tetrahedralizing {name} cancelled: nothing stored")
    result = mesh_surface(
        V,
        F,
        M,
        name=name,
        embedded=bool(spec["embedded"]),
        target_edge_length=float(spec["target_edge_length"]),
        quality=float(spec["quality"]),
        cage_resolution=int(spec["cage_resolution"]),
    )
    for message in result.warnings:
        emit("warning", message=message)
    if should_cancel():
        raise JobCancelled(f"tetrahedralizing {name} cancelled: nothing stored")
    meter.update(2, f"writing {len(result.mesh.T)} tets")
    write_result(folder, result)
    meter.update(3, f"{len(result.mesh.T)} tets")
    return {
        "n_tets": len(result.mesh.T),
        "n_nodes": len(result.mesh.X),
        "embedded": result.embedding is not None,
        "quality": result.quality,
    }
