"""Tetrahedralization of a closed surface with TetGen (constrained Delaunay + quality
refinement), ``tetgen`` (the pyvista TetGen wrapper) imported lazily.

TetGen is native code that can crash or hang: the add-on runs it in the worker process, and
only on a surface :func:`.surface.check_surface` accepted (see :mod:`.surface` for why).
Units are SI: positions in metres, volumes in m^3.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
import warnings

import numpy as np
from scipy.spatial import cKDTree

from ..errors import MeshError
from .surface import check_surface, enclosed_volume
from .tetmesh import (
    TetMesh,
    as_faces,
    as_points,
    drop_unused_nodes,
    orient_positive,
    regular_tet_volume,
)

__all__ = ["tetrahedralize"]

_STDOUT_LOCK = threading.Lock()


@contextlib.contextmanager
def _native_stdout_to(log: list):
    """Send what native code prints on fd 1 into ``log`` instead of the terminal.

    TetGen's wrapper prints progress ("parsing switches", "success") with printf; in the worker
    process that would interleave with the JSON-lines event stream, and in Blender it is noise.
    POSIX only (on Windows the extension's C runtime cannot be flushed from here; output then
    simply goes to the console).
    """
    with _STDOUT_LOCK:  # fd 1 is process-wide: one redirection at a time
        try:
            fflush = ctypes.CDLL(None).fflush if os.name == "posix" else None
            saved = os.dup(1) if fflush is not None else None
        except (OSError, AttributeError):  # no libc symbol, or no fd 1 (a detached process)
            fflush = saved = None
        if saved is None:
            yield log
            return
        fflush.argtypes = [ctypes.c_void_p]
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        fflush(None)
        try:
            with tempfile.TemporaryFile() as tmp:
                os.dup2(tmp.fileno(), 1)
                try:
                    yield log
                finally:
                    fflush(None)
                    os.dup2(saved, 1)
                    tmp.seek(0)
                    log.append(tmp.read().decode("utf-8", "replace"))
        finally:
            os.close(saved)


def _match_inputs(X: np.ndarray, V: np.ndarray) -> np.ndarray | None:
    """Index of the node equal to each input vertex, or None if any is missing."""
    nV = len(V)
    if len(X) >= nV and np.array_equal(X[:nV], V):
        return np.arange(nV)  # TetGen keeps input points first, in order
    d, j = cKDTree(X).query(V, k=1)
    if (d > 0).any() or len(np.unique(j)) != nV:
        return None
    return j.astype(np.int64)


def tetrahedralize(
    V,
    F,
    *,
    max_volume: float | None = None,
    target_edge_length: float | None = None,
    quality: float | None = 1.5,
    min_dihedral: float | None = 10.0,
    keep_surface: bool = True,
    check: bool = True,
    max_elements: int = 5_000_000,
) -> TetMesh:
    """Fill a closed surface with tetrahedra (TetGen constrained Delaunay + quality refinement).

    Parameters
    ----------
    V : (n, 3) float array
        Surface vertices, metres.
    F : (k, 3) int array
        Surface triangles (closed, manifold, consistently oriented, not self-intersecting).
    max_volume : float, optional
        Largest allowed tet volume, m^3 (TetGen ``-a``).
    target_edge_length : float, optional
        Target edge length, m; becomes ``max_volume = l^3 / (6 sqrt 2)`` (the regular tet's
        volume). With both given the smaller volume wins.
    quality : float or None
        Largest allowed radius-edge ratio R / l_min (TetGen ``-q``); > 1.0, 1.2-2.0 is typical
        (regular tet: 0.612). None disables quality refinement.
    min_dihedral : float, optional
        Smallest allowed dihedral angle in degrees (TetGen ``-q#/#``); keep it below ~20.
        The default, 10, removes the slivers a radius-edge bound alone lets through (they
        make the stiffness matrix ill-conditioned); None disables it.
    keep_surface : bool
        Do not split the boundary (TetGen ``-Y``): the surface of the tet mesh is exactly
        ``F``. Because TetGen may not refine tets that lean on an unsplittable boundary triangle,
        ``max_volume`` and ``quality`` then hold only as far as the surface resolution allows;
        remesh the surface finer or pass ``keep_surface=False`` where they must hold everywhere.
    check : bool
        Run :func:`check_surface` first (strongly recommended: TetGen crashes the process on
        some invalid inputs).
    max_elements : int
        Refuse settings whose ``max_volume`` would ask for more tets than this.

    Returns
    -------
    TetMesh
        Positively oriented tets, no unused nodes. The input vertices are nodes
        ``0 .. len(V)-1`` in input order (``n_surface_inputs = len(V)``) whenever TetGen kept
        them all, which it always does with ``keep_surface``.
    """
    V = as_points(V, "V")
    F = as_faces(F, len(V))
    if check:
        check_surface(V, F)
    elif len(F) < 4:
        raise MeshError(f"The surface has {len(F)} faces; a closed surface needs at least 4.")

    if quality is not None and not (quality > 1.0):
        raise MeshError(
            f"quality={quality} is not a valid radius-edge bound: use a value above 1.0 "
            "(1.2-2.0 is typical; smaller values mean better tets and more of them)."
        )
    if min_dihedral is not None and not (0.0 <= min_dihedral <= 30.0):
        raise MeshError(
            f"min_dihedral={min_dihedral} degrees is out of range: use 0-30 (TetGen rarely "
            "terminates above ~20 degrees)."
        )
    vols = []
    if max_volume is not None:
        if not (max_volume > 0):
            raise MeshError(f"max_volume={max_volume} must be positive (m^3).")
        vols.append(float(max_volume))
    if target_edge_length is not None:
        if not (target_edge_length > 0):
            raise MeshError(f"target_edge_length={target_edge_length} must be positive (m).")
        vols.append(regular_tet_volume(target_edge_length))
    vmax = min(vols) if vols else None
    if vmax is not None:
        estimate = abs(enclosed_volume(V, F)) / vmax
        if estimate > max_elements:
            raise MeshError(
                f"max_volume={vmax:.3g} m^3 would ask for about {estimate:.3g} tets (limit "
                f"{max_elements}). Use a larger max volume / edge length; the object may also be "
                "in the wrong units (apply its scale: Ctrl+A > Scale)."
            )

    import tetgen  # lazy: only needed here

    kw = {
        "plc": True,
        "quality": quality is not None or min_dihedral is not None,
        "minratio": float(quality) if quality is not None else 2.0,
        "mindihedral": float(min_dihedral) if min_dihedral is not None else 0.0,
        "nobisect": bool(keep_surface),
        "fixedvolume": vmax is not None,  # TetGen ignores maxvolume without it ("-a#")
        "maxvolume": float(vmax) if vmax is not None else -1.0,
        # TetGen's final vertex smoothing moves nodes after refinement and breaks the volume and
        # radius-edge bounds by ~10 %; without it the bounds hold.
        "smooth_maxiter": 0,
        "quiet": True,
        "verbose": 0,
    }
    log: list[str] = []
    try:
        with _native_stdout_to(log):
            gen = tetgen.TetGen(V, F.astype(np.int32))
            nodes, elems = gen.tetrahedralize(**kw)[:2]
    except (RuntimeError, ValueError) as exc:
        text = str(exc)
        said = " ".join(line.strip() for line in "".join(log).splitlines() if line.strip())
        said = said.replace("parsing switches", "").replace("success", "").strip()
        hint = (
            "Run check_surface on it to see why, repair it, or use an embedding cage "
            "(tetrahedralize_embedded)."
        )
        if "self-intersect" in text.lower():
            hint = (
                "Find the intersecting faces with the 3D-Print Toolbox 'Intersections' check and "
                "separate or union the overlapping parts, or use an embedding cage "
                "(tetrahedralize_embedded). Save your work: a failed TetGen run can leave this "
                "process unstable."
            )
        raise MeshError(
            f"TetGen could not tetrahedralize the surface: {text}"
            + (f" (TetGen said: {said})" if said else "")
            + f". {hint}"
        ) from None

    X = np.asarray(nodes, dtype=np.float64)
    T = np.asarray(elems, dtype=np.int64)
    if T.ndim != 2 or T.shape[1] != 4 or len(T) == 0:
        raise MeshError(
            "TetGen returned no tetrahedra: the surface does not enclose a volume it can fill. "
            "Run check_surface on it, or use an embedding cage (tetrahedralize_embedded)."
        )
    T = orient_positive(X, T)

    match = _match_inputs(X, V)
    if match is None:
        if keep_surface:
            raise MeshError(
                "TetGen merged or dropped some input vertices, so the render mesh cannot map one "
                "to one onto the tet mesh. Merge by Distance and Delete Loose, then try again."
            )
        X, T, _ = drop_unused_nodes(X, T)
        return TetMesh(X, T, 0)
    rest = np.ones(len(X), dtype=bool)
    rest[match] = False
    perm = np.concatenate([match, np.flatnonzero(rest)])
    inv = np.empty(len(X), dtype=np.int64)
    inv[perm] = np.arange(len(X))
    X, T = X[perm], inv[T]
    X, T, _ = drop_unused_nodes(X, T, keep_first=len(V))
    mesh = TetMesh(X, T, len(V))
    if keep_surface and len(mesh.boundary_faces()) != len(F):
        warnings.warn(
            f"TetGen split the boundary ({len(mesh.boundary_faces())} boundary triangles for "
            f"{len(F)} input faces) despite keep_surface; render faces no longer coincide with "
            "tet faces (vertices still do).",
            stacklevel=2,
        )
    return mesh
