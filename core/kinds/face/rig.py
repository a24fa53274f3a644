"""The active-face asset: flesh between skin and skull, a hinged jaw, muscles, shape keys.

A :class:`FaceRig` is what the active-face method (Srinivasan et al. 2021) simulates:

* a **flesh** lattice (an embedded regular lattice, as the paper uses: Kuhn-split cubes of
  edge ``spacing``, so no element is a sliver) covering the skin, with the cells wholly inside
  the skull or the jaw removed (the bones are holes);
* **constrained** nodes: lattice nodes inside the skull stay at rest, nodes inside the jaw
  follow the jaw's rigid transform (a hinge about ``jaw_axis`` through ``jaw_pivot``);
* the **skin** (a closed triangle mesh) embedded in the flesh (barycentric coordinates);
* **muscles**: per-element labels and fibre directions; an activation ``alpha`` in [0, 1]
  contracts an element along its fibre by ``1 - 0.5 alpha`` with a volume-preserving bulge
  across it: ``S = s d d^T + s^-1/2 (I - d d^T)``, the shape target of eq. (3-4).

:func:`face_rig` builds one from any closed skin, skull and jaw (a user's own meshes, with the
checks a user needs: a skull through the skin, a jaw off the flesh, slivers);
:func:`demo_head` builds the procedural demo head (about 21 cm tall) and :func:`make_shape_keys`
its "sculpted" expressions by our own simulation of muscle activations (a smile, a frown,
a pucker, ... at 22-40% fibre contraction) and jaw angles (half the keys 15-25 deg open), seeded:
5-20 mm of skin motion where the face moves, as on a real face. :func:`save_face` / :func:`load_face` store both in one ``.npz`` (no pickle).

Units: metres, radians. The face looks along -y, z is up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ...errors import MeshError
from ...geometry.cage import inside_render_mesh, is_closed
from ...geometry.embedding import Embedding, embed_points
from ...geometry.grid import grid_tetmesh
from ...geometry.surface import icosphere
from ...geometry.tetmesh import TetMesh
from ...physics.fem import Material, TetFEM

__all__ = [
    "FaceRig",
    "ShapeKeys",
    "check_shape_keys",
    "check_tets",
    "demo_muscles",
    "EXPRESSIONS",
    "ellipsoid_mesh",
    "demo_head",
    "face_rig",
    "jaw_transform",
    "load_face",
    "make_shape_keys",
    "muscle_actions",
    "save_face",
]

#: Largest fibre contraction at full activation.
CONTRACTION = 0.5
#: Flesh (shear modulus from the ``flesh`` preset's Young's modulus), Pa.
FLESH = Material(youngs_modulus=3.0e4, poisson_ratio=0.45, density=1060.0, model="shape_targeting")
#: Lattice spacing of the small demo head (tests) and the bench head, metres.
SPACING = {"small": 0.018, "bench": 0.0135}


@dataclass(eq=False)
class FaceRig:
    """A face ready to simulate (see the module docstring).

    Attributes
    ----------
    X : (n, 3) float array
        Flesh lattice nodes at rest, metres.
    T : (m, 4) int array
        Tets (positively oriented).
    skin_V : (s, 3) float array, skin_F : (k, 3) int array
        The skin at rest.
    skin : Embedding
        The skin's vertices in the flesh.
    fixed : (f,) int array
        Skull nodes (stay at rest).
    jaw_nodes : (j,) int array
        Jaw nodes (follow the jaw's transform).
    jaw_pivot : (3,) float array, jaw_axis : (3,) float array
        The hinge: a positive angle opens the mouth.
    muscle : (m,) int array
        Muscle of each element, -1 for passive flesh.
    fiber : (m, 3) float array
        Unit fibre direction of each element (zero for passive flesh).
    muscle_names : list of str
    bones : dict
        ``skull_V``, ``skull_F``, ``jaw_V``, ``jaw_F`` (for drawing and checks).
    """

    X: np.ndarray
    T: np.ndarray
    skin_V: np.ndarray
    skin_F: np.ndarray
    skin: Embedding
    fixed: np.ndarray
    jaw_nodes: np.ndarray
    jaw_pivot: np.ndarray
    jaw_axis: np.ndarray
    muscle: np.ndarray
    fiber: np.ndarray
    muscle_names: list = field(default_factory=list)
    bones: dict = field(default_factory=dict)
    material: Material = field(default_factory=lambda: FLESH)

    @property
    def n_muscles(self) -> int:
        return len(self.muscle_names)

    @property
    def constrained(self) -> np.ndarray:
        """Skull then jaw nodes: the order of :meth:`boundary`'s rows."""
        return np.concatenate([self.fixed, self.jaw_nodes])

    def boundary(self, jaw: float | np.ndarray = 0.0) -> np.ndarray:
        """Positions (c, 3) of :attr:`constrained` for a jaw angle (rad) or a 4x4 transform."""
        M = jaw_transform(self, jaw) if np.ndim(jaw) == 0 else np.asarray(jaw, float)
        J = self.X[self.jaw_nodes] @ M[:3, :3].T + M[:3, 3]
        return np.concatenate([self.X[self.fixed], J])

    def fem(self) -> TetFEM:
        return TetFEM(self.X, self.T, self.material)

    def skin_matrix(self) -> sp.csr_matrix:
        """(s, n) sparse map from node positions to skin vertices."""
        return self.skin.matrix

    def mesh(self) -> TetMesh:
        return TetMesh(self.X, self.T)


@dataclass(eq=False)
class ShapeKeys:
    """Sculpted expressions of a skin.

    Attributes
    ----------
    positions : (K, s, 3) float array
        Skin vertex positions of each key, metres.
    jaw : (K,) float array
        Jaw angle of each key, radians (0 when the sculpt has none).
    names : list of str
    held_out : (K,) bool array
        Keys kept out of training (to measure generalization).
    activations : (K, k) float array or None
        The muscle activations that made each key (procedural keys only; never trained on).
    """

    positions: np.ndarray
    jaw: np.ndarray
    names: list
    held_out: np.ndarray
    activations: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.positions)


# ------------------------------------------------------------------------------- geometry


def ellipsoid_mesh(center, radii, subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    """A closed ellipsoid (V (k, 3), F (f, 3)) from an icosphere, metres."""
    V, F = icosphere(1.0, subdivisions)
    # a generic tilt (from when inside/outside was a ray count that points on a mirror plane
    # fooled; the winding number needs none): kept, so the demo head stays the same head
    c, s = np.cos(0.3), np.sin(0.3)
    R = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    return (V @ R.T) * np.asarray(radii) + np.asarray(center), F


def jaw_transform(rig: FaceRig, angle: float) -> np.ndarray:
    """4x4 rigid transform of the jaw opened by ``angle`` radians about its hinge."""
    a = np.asarray(rig.jaw_axis, float)
    a = a / np.linalg.norm(a)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    R = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * (K @ K)
    M = np.eye(4)
    M[:3, :3] = R
    M[:3, 3] = rig.jaw_pivot - R @ rig.jaw_pivot
    return M


def check_tets(X: np.ndarray, T: np.ndarray, min_dihedral_deg: float = 5.0) -> None:
    """Refuse sliver elements (MeshError naming how many and the worst angle)."""
    q = TetMesh(X, T).element_quality()
    bad = (q["min_dihedral_deg"] < min_dihedral_deg) | (q["volume"] <= 0)
    if bad.any():
        raise MeshError(
            f"The flesh has {int(bad.sum())} sliver tets (smallest dihedral angle "
            f"{q['min_dihedral_deg'].min():.2g} deg, below {min_dihedral_deg} deg): use the "
            "embedded lattice, or remesh the flesh with a quality bound."
        )


def face_rig(
    skin: tuple[np.ndarray, np.ndarray],
    skull: tuple[np.ndarray, np.ndarray],
    jaw: tuple[np.ndarray, np.ndarray],
    jaw_pivot,
    jaw_axis,
    spacing: float,
    muscles: list[dict] | None = None,
    material: Material = FLESH,
) -> FaceRig:
    """A :class:`FaceRig` from closed meshes (skin, skull, jaw), by an embedded lattice.

    Parameters
    ----------
    skin, skull, jaw : (V (k, 3) float array, F (f, 3) int array)
    jaw_pivot, jaw_axis : (3,) the hinge
    spacing : lattice cell edge, metres
    muscles : list of dicts, optional
        ``{"name", "p0", "p1", "radius"}`` (a capsule; fibres along p0 -> p1) or
        ``{"name", "center", "normal", "ring_radius", "radius"}`` (a ring; fibres around it).

    Raises
    ------
    MeshError
        An open mesh; a skull that pokes through the skin; a jaw that does not touch the
        flesh; a lattice too coarse to hold a node in the flesh.
    """
    for name, (_, F) in (("skin", skin), ("skull", skull), ("jaw", jaw)):
        if not is_closed(np.asarray(F)):
            raise MeshError(
                f"The {name} mesh is not closed: close its holes (or pick the "
                f"closed mesh of the {name}) and try again."
            )
    sV, sF = (np.asarray(a) for a in skin)
    kV, kF = (np.asarray(a) for a in skull)
    jV, jF = (np.asarray(a) for a in jaw)
    out = ~inside_render_mesh(kV, sV, sF)
    if out.any():
        raise MeshError(
            f"{int(out.sum())} skull vertices lie outside the skin (e.g. at "
            f"{np.round(kV[np.flatnonzero(out)[0]], 4).tolist()} m): the skull pokes through "
            "the skin; shrink or move the skull inside it."
        )
    if spacing <= 0:
        raise MeshError("The lattice spacing must be positive.")
    lo = sV.min(0) - 0.5 * spacing
    div = np.ceil((sV.max(0) + 0.5 * spacing - lo) / spacing).astype(int)
    Xg, Tg = grid_tetmesh(tuple(div * spacing), tuple(div), tuple(lo))
    nc = int(np.prod(div))
    cells = Tg.reshape(nc, 6, 4)
    in_skin = inside_render_mesh(Xg, sV, sF)
    in_skull = inside_render_mesh(Xg, kV, kF)
    in_jaw = inside_render_mesh(Xg, jV, jF)
    cell_nodes = _cell_corners(div)
    centers = Xg[cell_nodes].mean(1)
    c_skin = inside_render_mesh(centers, sV, sF)
    # a cell is flesh when it reaches into the skin and is not wholly bone
    has_skin_vertex = np.zeros(nc, bool)
    ijk = np.floor((sV - lo) / spacing).astype(int).clip(0, div - 1)
    has_skin_vertex[(ijk[:, 0] * div[1] + ijk[:, 1]) * div[2] + ijk[:, 2]] = True
    reach = c_skin | in_skin[cell_nodes].any(1) | has_skin_vertex
    bone = in_skull[cell_nodes].all(1) | in_jaw[cell_nodes].all(1)
    keep = reach & ~bone
    T = cells[keep].reshape(-1, 4)
    used, T = np.unique(T, return_inverse=True)
    T = T.reshape(-1, 4)
    X = Xg[used]
    fixed = np.flatnonzero(in_skull[used])
    jaw_nodes = np.flatnonzero(in_jaw[used] & ~in_skull[used])
    if len(jaw_nodes) == 0:
        raise MeshError(
            "The jaw does not touch the flesh: no flesh node lies inside it. Move the jaw into "
            "the head (under the skin, below the skull) or use a finer lattice spacing."
        )
    if len(fixed) == 0:
        raise MeshError(
            "No flesh node lies inside the skull, so nothing holds the face: use a finer "
            "lattice spacing or a larger skull."
        )
    check_tets(X, T)
    emb = embed_points(sV, TetMesh(X, T))
    if emb.n_outside:
        raise MeshError(f"{emb.n_outside} skin vertices are outside the flesh lattice.")
    C = X[T].mean(1)
    muscle = np.full(len(T), -1, np.int64)
    fiber = np.zeros((len(T), 3))
    names = []
    for i, mdef in enumerate(muscles or []):
        names.append(mdef["name"])
        if "p0" in mdef:
            p0, p1 = np.asarray(mdef["p0"], float), np.asarray(mdef["p1"], float)
            d = p1 - p0
            t = np.clip((C - p0) @ d / (d @ d), 0, 1)
            dist = np.linalg.norm(C - (p0 + t[:, None] * d), axis=1)
            sel = (dist < mdef["radius"]) & (muscle < 0)
            fiber[sel] = d / np.linalg.norm(d)
        else:
            c0, nrm = np.asarray(mdef["center"], float), np.asarray(mdef["normal"], float)
            nrm = nrm / np.linalg.norm(nrm)
            r = C - c0
            h = r @ nrm
            radial = r - h[:, None] * nrm
            rho = np.linalg.norm(radial, axis=1)
            dist = np.hypot(rho - mdef["ring_radius"], h)
            sel = (dist < mdef["radius"]) & (muscle < 0)
            tang = np.cross(nrm, radial[sel] / np.maximum(rho[sel, None], 1e-12))
            fiber[sel] = tang
        muscle[sel] = i
    return FaceRig(
        X=X,
        T=T,
        skin_V=sV.astype(float),
        skin_F=sF.astype(np.int64),
        skin=emb,
        fixed=fixed,
        jaw_nodes=jaw_nodes,
        jaw_pivot=np.asarray(jaw_pivot, float),
        jaw_axis=np.asarray(jaw_axis, float),
        muscle=muscle,
        fiber=fiber,
        muscle_names=names,
        bones={"skull_V": kV, "skull_F": kF, "jaw_V": jV, "jaw_F": jF},
        material=material,
    )


def _cell_corners(div) -> np.ndarray:
    """(cells, 8) node indices of the cells of :func:`core.grid.grid_tetmesh`."""
    nx, ny, nz = (int(d) for d in div)
    i, j, k = np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij")
    i, j, k = i.ravel(), j.ravel(), k.ravel()

    def vid(a, b, c):
        return (a * (ny + 1) + b) * (nz + 1) + c

    return np.stack(
        [vid(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1)) for c in range(8)], axis=1
    )


# ------------------------------------------------------------------------------- demo head


def demo_muscles() -> list[dict]:
    """The demo head's muscles: capsules and a ring (see :func:`face_rig`).

    The capsules run from the bone (their first end at the skull's or the jaw's surface, so
    their elements pull on fixed nodes, as a muscle's origin does) to the skin around the
    mouth and the brows; 1.6-2 cm thick, so a full contraction moves the skin 4-11 mm.
    """
    m = []
    for side, sx in (("L", 1.0), ("R", -1.0)):
        m.append(
            {
                "name": f"zygomaticus_{side}",
                "p0": (0.058 * sx, -0.04, 0.012),
                "p1": (0.026 * sx, -0.078, -0.042),
                "radius": 0.02,
            }
        )
        m.append(
            {
                "name": f"frontalis_{side}",
                "p0": (0.025 * sx, -0.074, 0.03),
                "p1": (0.025 * sx, -0.06, 0.095),
                "radius": 0.02,
            }
        )
        m.append(
            {
                "name": f"risorius_{side}",
                "p0": (0.066 * sx, -0.03, -0.045),
                "p1": (0.026 * sx, -0.078, -0.045),
                "radius": 0.018,
            }
        )
        m.append(
            {
                "name": f"depressor_{side}",
                "p0": (0.032 * sx, -0.05, -0.09),
                "p1": (0.024 * sx, -0.078, -0.05),
                "radius": 0.018,
            }
        )
    m.append(
        {
            "name": "orbicularis_oris",
            "center": (0.0, -0.076, -0.045),
            "normal": (0.0, 1.0, 0.0),
            "ring_radius": 0.024,
            "radius": 0.016,
        }
    )
    return m


#: The demo keys' expressions: muscle -> relative activation (names of :func:`demo_muscles`).
EXPRESSIONS = {
    "smile": {"zygomaticus_L": 1.0, "zygomaticus_R": 1.0, "risorius_L": 0.5, "risorius_R": 0.5},
    "smirk_L": {"zygomaticus_L": 1.0, "risorius_L": 0.8},
    "smirk_R": {"zygomaticus_R": 1.0, "risorius_R": 0.8},
    "frown": {"depressor_L": 1.0, "depressor_R": 1.0, "risorius_L": 0.3, "risorius_R": 0.3},
    "pucker": {"orbicularis_oris": 1.0},
    "brows_up": {"frontalis_L": 1.0, "frontalis_R": 1.0},
    "grimace": {"risorius_L": 1.0, "risorius_R": 1.0, "depressor_L": 0.5, "depressor_R": 0.5},
}


def demo_head(size: str = "small") -> FaceRig:
    """The procedural demo head (skin 21 cm tall, skull, hinged jaw, 9 muscles).

    ``size``: ``"small"`` (about 2-3K tets, tests) or ``"bench"`` (over 5K tets).
    """
    if size not in SPACING:
        raise ValueError(f"size must be one of {sorted(SPACING)}, got {size!r}")
    sub = 3 if size == "small" else 4
    skin = ellipsoid_mesh((0, 0, 0), (0.075, 0.09, 0.105), sub)
    skull = ellipsoid_mesh((0, 0.006, 0.026), (0.06, 0.07, 0.066), 2)
    jaw = ellipsoid_mesh((0, 0.0, -0.066), (0.046, 0.046, 0.016), 2)
    return face_rig(
        skin,
        skull,
        jaw,
        jaw_pivot=(0, 0.035, -0.045),
        jaw_axis=(1.0, 0, 0),
        spacing=SPACING[size],
        muscles=demo_muscles(),
    )


def muscle_actions(rig: FaceRig, activations: np.ndarray) -> np.ndarray:
    """Per-element actions (m, 6) of muscle activations (k,) in [0, 1] (module docstring)."""
    a = np.asarray(activations, float).reshape(-1)
    if a.shape != (rig.n_muscles,):
        raise ValueError(f"need {rig.n_muscles} activations, got {a.shape}")
    act = np.where(rig.muscle >= 0, a[np.maximum(rig.muscle, 0)], 0.0)
    s = 1.0 - CONTRACTION * act
    d = rig.fiber
    dd = d[:, :, None] * d[:, None, :]
    S = s[:, None, None] * dd + (s**-0.5)[:, None, None] * (np.eye(3) - dd)
    passive = rig.muscle < 0
    S[passive] = np.eye(3)
    b = S[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]].copy()
    b[:, [0, 3, 5]] -= 1.0
    return b


def make_shape_keys(
    rig: FaceRig,
    count: int,
    *,
    held_out: int = 0,
    seed: int = 0,
    max_jaw: float = 0.44,
    tol: float = 1e-7,
) -> ShapeKeys:
    """``count`` expressions simulated from muscle activations and jaw angles (seeded).

    Each key is one or two of :data:`EXPRESSIONS` (a smile, a frown, a pucker, ...) at a
    strength uniform in [0.45, 0.8] (fibre contraction 22-40%), plus 0-0.15 of every muscle
    (asymmetry, noise), clipped to [0, 1]; the jaw is open in half of the keys, uniformly
    between 0.6 ``max_jaw`` and ``max_jaw`` (15-25 deg by default), and slightly (up to
    0.1 ``max_jaw``) in the rest. Rigs whose muscles are not the demo's get random
    activations instead (each muscle at 0.45-0.8 with probability 0.35). The names say what a
    key is (``key007_smile+pucker_jaw21``). The last ``held_out`` keys are held out.
    """
    from ...physics.quasistatic import QuasistaticSolver

    rng = np.random.default_rng(seed)
    k = rig.n_muscles
    index = {n: i for i, n in enumerate(rig.muscle_names)}
    presets = {}
    for name, weights in EXPRESSIONS.items():
        if weights.keys() <= index.keys():
            v = np.zeros(k)
            v[[index[m] for m in weights]] = list(weights.values())
            presets[name] = v
    acts = np.zeros((count, k))
    labels = []
    for i in range(count):
        if presets:
            pick = rng.choice(len(presets), size=1 + int(rng.random() < 0.5), replace=False)
            for j in pick:
                acts[i] += rng.uniform(0.45, 0.8) * list(presets.values())[j]
            acts[i] += rng.uniform(0.0, 0.15, k)
            labels.append("+".join(list(presets)[j] for j in sorted(pick)))
        else:
            acts[i] = np.where(rng.random(k) < 0.35, rng.uniform(0.45, 0.8, k), 0.0)
            labels.append("random")
    acts = acts.clip(0.0, 1.0)
    wide = rng.random(count) < 0.5
    jaw = np.where(wide, rng.uniform(0.6, 1.0, count), rng.uniform(0.0, 0.1, count)) * max_jaw
    solver = QuasistaticSolver(rig.fem(), rig.constrained)
    P = np.empty((count, len(rig.skin_V), 3))
    for i in range(count):
        eq = solver.solve(muscle_actions(rig, acts[i]), rig.boundary(jaw[i]), tol=tol)
        P[i] = rig.skin.apply(eq.x)
    ho = np.zeros(count, bool)
    if held_out:
        ho[-held_out:] = True
    names = [f"key{i:03d}_{labels[i]}_jaw{np.degrees(jaw[i]):.0f}" for i in range(count)]
    return ShapeKeys(positions=P, jaw=jaw, names=names, held_out=ho, activations=acts)


def check_shape_keys(rig: FaceRig, keys: ShapeKeys) -> None:
    """Refuse shape keys of another vertex count or with non-finite positions."""
    P = np.asarray(keys.positions)
    if P.ndim != 3 or P.shape[1:] != rig.skin_V.shape:
        raise MeshError(
            f"The shape keys have {P.shape[1] if P.ndim == 3 else '?'} vertices, the skin has "
            f"{len(rig.skin_V)}: shape keys must come from the skin mesh itself (same vertex "
            "count and order)."
        )
    if not np.isfinite(P).all() or not np.isfinite(keys.jaw).all():
        raise MeshError("The shape keys hold NaN or infinite positions or jaw angles.")
    if len(keys.jaw) != len(P) or len(keys.held_out) != len(P):
        raise MeshError("The shape keys need one jaw angle and one held-out flag per key.")


# ------------------------------------------------------------------------------- files


def save_face(path: str | Path, rig: FaceRig, keys: ShapeKeys | None = None) -> Path:
    """Write a rig (and its shape keys) to one ``.npz`` (JSON metadata, no pickle)."""
    path = Path(path)
    arrays = {
        "X": rig.X,
        "T": rig.T,
        "skin_V": rig.skin_V,
        "skin_F": rig.skin_F,
        "fixed": rig.fixed,
        "jaw_nodes": rig.jaw_nodes,
        "jaw_pivot": rig.jaw_pivot,
        "jaw_axis": rig.jaw_axis,
        "muscle": rig.muscle,
        "fiber": rig.fiber,
        **{f"bone_{k}": v for k, v in rig.bones.items()},
        **{f"emb_{k}": v for k, v in rig.skin.to_arrays().items()},
    }
    meta = {"muscle_names": rig.muscle_names, "material": rig.material.to_dict()}
    if keys is not None:
        check_shape_keys(rig, keys)
        arrays.update(key_positions=keys.positions, key_jaw=keys.jaw, key_held_out=keys.held_out)
        if keys.activations is not None:
            arrays["key_activations"] = keys.activations
        meta["key_names"] = list(keys.names)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    return path


def load_face(path: str | Path) -> tuple[FaceRig, ShapeKeys | None]:
    """Read :func:`save_face`'s file."""
    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    meta = json.loads(bytes(d.pop("meta")).decode())
    skin = Embedding.from_arrays({k[4:]: v for k, v in d.items() if k.startswith("emb_")})
    rig = FaceRig(
        X=d["X"],
        T=d["T"],
        skin_V=d["skin_V"],
        skin_F=d["skin_F"],
        skin=skin,
        fixed=d["fixed"],
        jaw_nodes=d["jaw_nodes"],
        jaw_pivot=d["jaw_pivot"],
        jaw_axis=d["jaw_axis"],
        muscle=d["muscle"],
        fiber=d["fiber"],
        muscle_names=list(meta["muscle_names"]),
        bones={k[5:]: v for k, v in d.items() if k.startswith("bone_")},
        material=Material.from_dict(meta["material"]),
    )
    keys = None
    if "key_positions" in d:
        keys = ShapeKeys(
            positions=d["key_positions"],
            jaw=d["key_jaw"],
            names=list(meta["key_names"]),
            held_out=d["key_held_out"],
            activations=d.get("key_activations"),
        )
    return rig, keys
