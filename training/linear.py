"""Training of the linear reduced model: mass-weighted POD + optimized cubature.

numpy + scipy only (the baseline every learned method is compared with), but it goes
through the same worker, checkpoints and model files as the learned methods.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..core import fem as _fem
from ..core import registry
from ..core.bake import BakeSpec
from ..core.cache import BakeDataset
from ..core.compare import rollout_metrics, stiffening_hint
from ..core.cubature import Cubature, optimized_cubature
from ..core.errors import JobCancelled, NeuralRomError
from ..core.files import write_npz
from ..core.frame import to_pin_frame
from ..core.methods.common import surface_sample
from ..core.methods.linear import NAME, ReducedSimulation
from ..core.methods.linear import save as save_linear_model
from ..core.sim import SimSettings, boundary_vertices
from ..core.subspace import Subspace, mass_weighted_pod

Report = Callable[[float, str], None]


@dataclass
class LinearSettings:
    """Settings of a linear model (all JSON-able).

    Attributes
    ----------
    k : int or None
        Basis size; None chooses it from ``tolerance``.
    tolerance : float or None
        Largest per-vertex reconstruction error allowed on the data (m); Fulton 2019
        section 4.3 grows the basis until it is met. Default when neither is given: 1% of
        the bounding-box diagonal.
    max_k : int
    cubature_target : float
        Relative reduced-force error of the cubature on training poses (An et al. 2008).
    max_cubature : int
        At most this many cubature elements.
    cubature_poses : int
        Training poses the cubature is fitted on (sampled evenly over the training frames).
    max_frames : int
        Frames used for the POD (sampled evenly when there are more).
    validation_fraction : float
        Share of whole trajectories held out.
    seed : int
    """

    k: int | None = None
    tolerance: float | None = None
    max_k: int = 60
    cubature_target: float = 0.05
    max_cubature: int = 500
    cubature_poses: int = 200
    cubature_validation: float = 0.2
    max_frames: int = 2000
    validation_fraction: float = 0.2
    seed: int = 0

    @classmethod
    def from_dict(cls, d: dict | None) -> LinearSettings:
        """Settings checked by value against the method's registry record."""
        return cls(**registry.get(NAME).validate(d))


def train(bakes, out, settings: dict, *, device: str = "cpu", **kwargs) -> dict:
    """The registry's trainer entry point (``core.methods.linear.METHOD``): numpy on the CPU
    whatever ``device`` says; ``kwargs`` as :func:`train_linear` takes them."""
    return train_linear(bakes, out, LinearSettings.from_dict(settings), **kwargs)


def even_indices(n: int, count: int) -> np.ndarray:
    """At most ``count`` distinct indices spread evenly over ``0 .. n-1``, sorted (int array)."""
    return (
        np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(int))
        if n
        else np.zeros(0, int)
    )


def _physics_of(ds: BakeDataset) -> tuple[dict, BakeSpec]:
    """Material and time step shared by every bake (a model has one)."""
    specs = [BakeSpec.from_dict(t.meta["spec"]) for t in ds]
    first = specs[0]
    for t, s in zip(ds, specs):
        if (
            s.material != first.material
            or s.dt != first.dt
            or list(s.gravity) != list(first.gravity)
        ):
            raise NeuralRomError(
                f"Bake {Path(t.path).name} has another material, time step or gravity than "
                f"{Path(ds[0].path).name}; train one model per physics setup."
            )
    return first.material, first


@dataclass
class TrainingBakes:
    """Bakes of one mesh opened for training: the dataset, its physics, the mesh, pins and
    masses, and the whole-trajectory split (``train`` / ``val`` bake indices)."""

    ds: BakeDataset
    spec: BakeSpec
    material: _fem.Material
    X: np.ndarray
    T: np.ndarray
    pinned: np.ndarray
    mass: np.ndarray
    train: np.ndarray
    val: np.ndarray
    warnings: list

    def frames(self, indices, count: int) -> tuple[np.ndarray, np.ndarray]:
        """At most ``count`` evenly spaced frames of bakes ``indices``: positions (F, n, 3)
        in the pins' frame (:func:`core.frame.to_pin_frame`: bakes whose pins move rigidly
        are learnt in that frame) and the bake index of each frame (F,)."""
        chunks = [np.asarray(self.ds[int(i)].channel("positions")) for i in indices]
        ids = [np.full(self.ds[int(i)].n_frames, int(i)) for i in indices]
        allx = np.concatenate(chunks) if chunks else np.zeros((0,) + self.X.shape)
        allid = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        pick = even_indices(len(allx), count)
        return to_pin_frame(allx[pick], self.X, self.pinned), allid[pick]


def open_bakes(bakes, expect_mesh_hash, validation_fraction: float, seed: int) -> TrainingBakes:
    """Open bakes for a trainer (refusing stale, foreign or mixed ones) and split them."""
    ds = BakeDataset.open(bakes, expect_mesh_hash=expect_mesh_hash)
    material_dict, spec = _physics_of(ds)
    material = _fem.Material.from_dict(material_dict)
    first = ds[0]
    X, T = np.asarray(first.X, float), np.asarray(first.T, np.int64)
    pinned = (
        np.asarray(first.extra("pinned"), np.int64)
        if "pinned" in first.extra_names
        else np.zeros(0, np.int64)
    )
    mass = _fem.mass_matrix(X, T, material.density, lumped=True)
    train, val = ds.split(validation_fraction, seed)
    warnings = []
    if len(val) == 0:
        warnings.append(
            "Only one bake: nothing is held out, so the validation error is the training error. "
            "Bake more variants for an honest error."
        )
    return TrainingBakes(ds, spec, material, X, T, pinned, mass, train, val, warnings)


def train_linear(
    bakes,
    out: str | Path,
    settings: LinearSettings | None = None,
    *,
    expect_mesh_hash: str | None = None,
    checkpoint_dir: str | Path | None = None,
    progress: Report | None = None,
    should_cancel: Callable[[], bool] | None = None,
    metric: Callable[[dict], None] | None = None,
) -> dict:
    """Train a linear model from bakes of one mesh and write it to ``out``.

    Whole trajectories are held out for validation (never frames of a trajectory that is
    also trained on). Checkpoints (basis, then cubature) go to ``checkpoint_dir``; a run
    cancelled after one resumes from it when the bakes and settings are the same.

    Returns
    -------
    dict with ``model`` (path), ``k``, ``cubature`` (size), the validation errors and timings.
    """
    s = settings or LinearSettings()
    say = progress or (lambda f, m: None)
    emit = metric or (lambda d: None)
    cancel = should_cancel or (lambda: False)
    t0 = time.perf_counter()
    b = open_bakes(bakes, expect_mesh_hash, s.validation_fraction, s.seed)
    ds, spec, material, X, T = b.ds, b.spec, b.material, b.X, b.T
    pinned, mass, train_idx, val_idx, warnings = b.pinned, b.mass, b.train, b.val, b.warnings
    key = hashlib.sha256(
        json.dumps(
            {
                "bakes": [t.meta.get("bake_id", str(t.path)) for t in ds],
                "frames": [t.n_frames for t in ds],
                "settings": asdict(s),
            },
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]
    ckpt = Path(checkpoint_dir) if checkpoint_dir else None
    if ckpt:
        ckpt.mkdir(parents=True, exist_ok=True)

    say(0.02, "loading bakes")
    train_x, train_groups = b.frames(train_idx, s.max_frames)
    val_x, _ = b.frames(val_idx, s.max_frames)
    if cancel():
        raise JobCancelled("Training cancelled before the basis was computed.")

    # 1. basis ---------------------------------------------------------------------------
    basis_file = ckpt / f"basis_{key}.npz" if ckpt else None
    if basis_file and basis_file.exists():
        with np.load(basis_file, allow_pickle=False) as d:
            sub = Subspace.from_arrays({k: d[k] for k in d.files} | {"info": str(d["info"])})
        say(0.3, f"basis of {sub.k} modes from checkpoint")
    else:
        say(0.05, "POD of the bake displacements")
        tol = s.tolerance
        if s.k is None and tol is None:
            tol = 0.01 * float(np.linalg.norm(X.max(0) - X.min(0)))
        sub = mass_weighted_pod(
            train_x - X,
            mass,
            pinned,
            k=s.k,
            tolerance=tol,
            max_k=s.max_k,
            validation=(val_x - X) if len(val_x) else None,
            X=X,
        )
        if basis_file:
            arr = sub.to_arrays()
            write_npz(
                basis_file,
                {k: v for k, v in arr.items() if k not in ("kind", "info")}
                | {"kind": np.array(arr["kind"]), "info": np.array(json.dumps(arr["info"]))},
            )
    err_train = sub.reconstruction_error(train_x)
    err_val = sub.reconstruction_error(val_x) if len(val_x) else err_train
    emit({"k": sub.k, "pod_max_error_train_m": err_train, "pod_max_error_val_m": err_val})
    say(0.3, f"basis: {sub.k} modes, max vertex error {err_val * 1000:.3g} mm on held-out frames")
    if cancel():
        raise JobCancelled("Training cancelled after the basis (checkpointed).")

    # 2. cubature ------------------------------------------------------------------------
    fem = _fem.TetFEM(X, T, material)
    cub_file = ckpt / f"cubature_{key}.npz" if ckpt else None
    if cub_file and cub_file.exists():
        with np.load(cub_file, allow_pickle=False) as d:
            cub = Cubature.from_arrays({k: d[k] for k in d.files}, n_elements=len(T))
        say(0.75, f"cubature of {len(cub)} elements from checkpoint")
    else:
        pick = even_indices(len(train_x), s.cubature_poses)
        poses = train_x[pick]
        groups = train_groups[pick]
        held = val_x[even_indices(len(val_x), s.cubature_poses)] if len(val_x) else None

        def cub_progress(done, total, info=None):
            say(0.3 + 0.45 * min(done / max(total, 1), 1.0), f"cubature: {done} elements")

        cub = optimized_cubature(
            fem,
            sub.U,
            poses,
            target=s.cubature_target,
            max_elements=s.max_cubature,
            seed=s.seed,
            heldout_poses=held,
            validation_fraction=s.cubature_validation,
            groups=groups,
            progress=cub_progress,
            should_cancel=cancel,
        )
        if cub_file:
            write_npz(cub_file, cub.to_arrays())
    emit(
        {
            "cubature_elements": len(cub),
            **{k: v for k, v in cub.info.items() if k.endswith("error")},
        }
    )

    # 3. contact sample and a held-out rollout -------------------------------------------
    contact = surface_sample(X, boundary_vertices(T), mass, seed=s.seed)
    sim_settings = spec.sim_settings()
    rollout = {}
    if len(val_idx):
        say(0.8, "rollout of a held-out bake")
        rollout = _rollout_error(
            ds[int(val_idx[0])], X, T, material, sub, cub, contact, sim_settings, cancel
        )
        emit({f"rollout_{k}": v for k, v in rollout.items() if isinstance(v, (int, float))})
        hint = stiffening_hint(rollout)
        if hint:
            warnings.append(hint)

    # 4. model file ----------------------------------------------------------------------
    say(0.95, "writing the model")
    seconds = time.perf_counter() - t0
    metrics = {
        "k": sub.k,
        "pod_max_error_train_m": err_train,
        "pod_max_error_val_m": err_val,
        "cubature_elements": len(cub),
        "cubature_train_rel_error": cub.info.get("train_rel_error"),
        "cubature_heldout_rel_error": cub.info.get("heldout_rel_error"),
        "cubature_validation_rel_error": cub.info.get("validation_rel_error"),
        "rollout": rollout,
        "train_seconds": seconds,
    }
    path = save_linear_model(
        out,
        mesh_hash=ds.mesh_hash,
        T=T,
        subspace=sub,
        cubature=cub,
        contact=contact,
        material=material,
        settings=sim_settings,
        metadata={
            "training": asdict(s),
            "bakes": [str(t.path) for t in ds],
            "train_trajectories": [int(i) for i in train_idx],
            "validation_trajectories": [int(i) for i in val_idx],
            "metrics": metrics,
            "warnings": warnings,
        },
    )
    say(1.0, f"model written: {sub.k} modes, {len(cub)} cubature elements")
    return {"model": str(path), "warnings": warnings, **metrics}


def _rollout_error(cache, X, T, material, sub, cub, contact, settings: SimSettings, cancel) -> dict:
    """Replay a held-out bake's scenario with the reduced model; errors against the bake."""

    def make_sim(driver):
        return ReducedSimulation(
            X,
            T,
            material,
            sub.U,
            settings,
            pinned=sub.pinned,
            cubature=(cub.elements, cub.weights),
            contact=contact,
            colliders=driver.colliders(0),
        )

    return rollout_metrics(make_sim, cache, cancel=cancel)
