"""The training run: one object a trainer gets, ``train(run) -> dict``, built once by the
worker (:meth:`TrainingRun.from_spec`: the settings checked against the method's record,
:meth:`core.registry.Method.values`, here and only here) or by the public call
``Method.trainer_function()(bakes, out, settings, **job)`` (:func:`call`).

A trainer is named in its method's registry record (``trainer="training.<name>:train"``).
Its body is what is specific to the method; the rest is the run's and :mod:`.stages`'::

    def train(run):
        s = run.settings                                # read-only: s.k, s["k"]
        b = run.open_bakes()                            # FEM bakes, split, checkpoints keyed
        train_x, groups, val_x = b.training_frames(s.max_frames)
        run.check_cancel("Training cancelled before the basis was computed.")
        sub, _ = pod_basis(run, train_x, val_x, label="POD", span=(0.05, 0.3))
        ...                                             # the method's own stages
        cub = fit_cubature(run, sub, train_x, groups, val_x, project=True, span=(0.3, 0.75))
        save = functools.partial(core.methods.mine.save, subspace=sub, cubature=cub,
                                 contact=run.contact_sample(), ...)
        return run.finish(run.out, save, k=sub.k, dofs=..., max_error_val_m=..., cubature=cub,
                          metrics={...method-specific...})

What each piece does:

* :meth:`TrainingRun.open_bakes` opens the bakes (:func:`open_bakes`: stale, foreign or
  mixed bakes are refused; whole bakes are held out, ``validation_fraction`` and ``seed`` of
  the settings) and keys the checkpoints; a method with data of its own (a family of meshes,
  cloth bakes) opens it itself and hands it to :meth:`TrainingRun.use_bakes`. The run holds
  the job's callbacks (``say``, ``emit``, :meth:`TrainingRun.check_cancel`).
* :class:`Checkpoints`: files ``<stage>_<key><suffix>`` in the checkpoint folder, ``key`` a
  hash of the method, the bakes and the settings, so a cancelled run resumes from the stages
  it finished and never from another run's. :meth:`Checkpoints.stage` runs a stage or reads
  it back; :meth:`Checkpoints.file` names a file for a stage a trainer saves itself (the
  autoencoder's torch state every few epochs).
* :meth:`TrainingRun.finish`: writes the model with the runtime's ``save`` and the common
  metadata, replays a held-out bake with the model as a user will load it
  (:func:`core.registry.load_simulator`, :func:`core.compare.rollout_metrics`), warns when
  the dynamics, not the shapes, limit the accuracy (:func:`core.compare.stiffening_hint`),
  and returns the result record: the common keys (``model``, ``method``, ``k``, ``dofs``,
  ``cubature_elements``, ``max_error_val_m``, ``rollout``, ``rollout_max_error_m``,
  ``step_ms``, ``train_seconds``, ``device``, ``warnings``) and the method's own metrics.

A trainer of the old signature ``train(bakes, out, settings, *, device, expect_mesh_hash,
checkpoint_dir, progress, should_cancel, metric)`` (a plug-in's) still works: the worker
calls it with the run's fields (:func:`legacy`).

numpy only at import: the linear method trains without torch.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import registry
from ..core.bake import BakeSpec
from ..core.data.cache import BakeCache, BakeDataset
from ..core.data.files import ensure_writable_dir, temporary_path, write_npz
from ..core.engine.replay import rollout_metrics, stiffening_hint
from ..core.errors import JobCancelled, NeuralRomError
from ..core.physics import fem as _fem
from ..core.physics.colliders import ContactPoints
from ..core.physics.sim import SimSettings
from ..core.reduced.cubature import Cubature
from ..core.reduced.model import surface_sample
from ..core.reduced.pose import to_pin_frame

#: ``progress(fraction, message)``: fraction of the whole job in [0, 1]
Report = Callable[[float, str], None]


def even_indices(n: int, count: int) -> np.ndarray:
    """At most ``count`` distinct indices spread evenly over ``0 .. n-1``, sorted (int array)."""
    return (
        np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(int))
        if n
        else np.zeros(0, int)
    )


# ------------------------------------------------------------------------------------------
# Bakes and the split
# ------------------------------------------------------------------------------------------


def physics_of(ds: BakeDataset) -> tuple[dict, BakeSpec]:
    """Material (as a dict) and bake spec shared by every bake (a model has one physics).

    Raises NeuralRomError naming the first bake whose material, time step or gravity differ.
    """
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
    masses, and the whole-trajectory split (``train`` / ``val`` bake indices).

    Attributes
    ----------
    X : (n, 3) float array, rest positions (m); T : (m, 4) int array
    pinned : (p,) int array; mass : (n,) lumped vertex masses (kg)
    train, val : sorted bake indices; no frame of a ``val`` bake is ever trained on
    warnings : what the user should know about the data (the run's warnings list)
    """

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

    def training_frames(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(train_x (F, n, 3), train_groups (F,), val_x (G, n, 3))``: at most ``count``
        frames of the training bakes with their bake indices, and as many of the held-out
        ones (G = 0 when only one bake was given)."""
        train_x, groups = self.frames(self.train, count)
        val_x, _ = self.frames(self.val, count)
        return train_x, groups, val_x

    @property
    def sim_settings(self) -> SimSettings:
        """The time stepping and contact of the bakes, which the model steps with: the
        penalty stiffness each bake recorded (variants sized from their own pushes may
        differ: the stiffest), none for bakes before it (the runtime's rest rule, theirs)."""
        s = self.spec.sim_settings()
        stored = [t.meta.get("contact_stiffness") for t in self.ds]
        stored = [float(k) for k in stored if k is not None]
        if s.contact_stiffness is None and stored:
            s.contact_stiffness = max(stored)
        return s

    def heldout_bake(self) -> BakeCache | None:
        """The first held-out bake (the one the rollout replays), None when none is."""
        return self.ds[int(self.val[0])] if len(self.val) else None


def open_bakes(bakes, expect_mesh_hash, validation_fraction: float, seed: int) -> TrainingBakes:
    """Open bakes for a trainer (refusing stale, foreign or mixed ones) and split them into
    whole training and validation trajectories (:meth:`core.cache.BakeDataset.split`)."""
    ds = BakeDataset.open(bakes, expect_mesh_hash=expect_mesh_hash)
    material_dict, spec = physics_of(ds)
    material = _fem.Material.from_dict(material_dict)
    first = ds[0]
    X, T = np.asarray(first.X, float), np.asarray(first.T, np.int64)
    pinned = (
        np.asarray(first.extra("pinned"), np.int64)
        if "pinned" in first.extra_names
        else np.zeros(0, np.int64)
    )
    mass = _fem.mass_matrix(X, T, material.density, lumped=True)
    return TrainingBakes(
        ds, spec, material, X, T, pinned, mass, *split(ds, validation_fraction, seed)
    )


def split(ds: BakeDataset, validation_fraction: float, seed: int) -> tuple:
    """``(train, val, warnings)``: whole bakes held out (:meth:`core.cache.BakeDataset.split`)
    and the warning when none is."""
    train, val = ds.split(validation_fraction, seed)
    warnings = []
    if len(val) == 0:
        warnings.append(
            "Only one bake: nothing is held out, so the validation error is the training error. "
            "Bake more variants for an honest error."
        )
    return train, val, warnings


# ------------------------------------------------------------------------------------------
# Checkpoints
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoint files of one training run: ``<directory>/<stage>_<key><suffix>``.

    ``key`` hashes the method, the bakes (ids and frame counts) and the settings, so a run
    resumes only from stages of a run like it. ``directory`` None: no checkpoints (every
    stage is computed, nothing is written).
    """

    directory: Path | None
    key: str

    @classmethod
    def open(cls, directory, method: str, ds: BakeDataset, settings: Mapping) -> Checkpoints:
        key = hashlib.sha256(
            json.dumps(
                {
                    "method": method,
                    # each bake's id, new whenever a bake is written (a bake made again
                    # under the same name is other data), not its path
                    "bakes": [t.metadata_full.get("bake_id", str(t.path)) for t in ds],
                    "frames": [t.n_frames for t in ds],
                    "settings": dict(settings),
                },
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()[:16]
        path = Path(directory) if directory else None
        if path:
            ensure_writable_dir(path, "training checkpoints")
        return cls(path, key)

    def file(self, stage: str, suffix: str = ".npz") -> Path | None:
        """The file of ``stage`` (None without a directory); write it atomically
        (:func:`core.files.atomic_path`)."""
        return self.directory / f"{stage}_{self.key}{suffix}" if self.directory else None

    def stage(
        self,
        stage: str,
        compute: Callable[[], Any],
        *,
        to_arrays: Callable[[Any], dict],
        from_arrays: Callable[[dict], Any],
    ) -> tuple[Any, bool]:
        """``(value, resumed)``: the stage's value read back from its ``.npz`` checkpoint
        (``resumed`` True), or ``compute()``, checkpointed (numeric arrays only: it is read
        with ``allow_pickle=False``)."""
        f = self.file(stage)
        if f is not None and f.exists():
            with np.load(f, allow_pickle=False) as d:
                return from_arrays({k: d[k] for k in d.files}), True
        value = compute()
        if f is not None:
            write_npz(f, to_arrays(value))
        return value, False


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def _nothing(*args) -> None:
    return None


def _never() -> bool:
    return False


@dataclass
class TrainingRun:
    """One training job: the method, its checked settings (read-only: ``run.settings.k`` or
    ``run.settings["k"]``), the device, the data and where the model goes, the opened bakes,
    the checkpoints and the job's callbacks (see the module docstring).

    Attributes
    ----------
    data : the training data as given: .nrbake paths or a glob (what
        :meth:`core.cache.BakeDataset.open` takes), or a method's own (a face file)
    bakes, checkpoints : set by :meth:`open_bakes` / :meth:`use_bakes`; until then no bakes
        and no checkpoints
    """

    method: str
    settings: registry.Values
    device: str
    out: Path
    data: Any
    expect_mesh_hash: str | None = None
    checkpoint_dir: Path | None = None
    progress: Report = _nothing
    should_cancel: Callable[[], bool] = _never
    metric: Callable[[dict], None] = _nothing
    started: float = field(default_factory=time.perf_counter)
    bakes: TrainingBakes | None = None
    checkpoints: Checkpoints = Checkpoints(None, "")

    @classmethod
    def create(
        cls,
        method: registry.Method | str,
        bakes,
        out: str | Path,
        settings: Mapping | None = None,
        *,
        device: str = "auto",
        expect_mesh_hash: str | None = None,
        checkpoint_dir: str | Path | None = None,
        progress: Report | None = None,
        should_cancel: Callable[[], bool] | None = None,
        metric: Callable[[dict], None] | None = None,
    ) -> TrainingRun:
        """The run of ``method`` (a record or a registered name) with ``settings`` checked
        against its record (:meth:`core.registry.Method.values`: the one validation; missing
        settings take their defaults). Nothing is opened yet.

        Parameters
        ----------
        bakes : the training data (:attr:`data`)
        out : the model file to write
        device : what the model trains on ("cpu", "cuda", "auto"), reported in the result
        expect_mesh_hash : refuse bakes of another mesh
        checkpoint_dir : where checkpoints go (None: no checkpoints)
        progress : ``progress(fraction, message)``
        should_cancel : polled between stages (and epochs); True cancels the job
        metric : ``metric(dict)`` of training metrics, streamed to the panel
        """
        record = method if isinstance(method, registry.Method) else registry.get(method)
        return cls(
            record.name,
            record.values(settings),
            str(device),
            Path(out),
            bakes,
            expect_mesh_hash,
            Path(checkpoint_dir) if checkpoint_dir else None,
            progress or _nothing,
            should_cancel or _never,
            metric or _nothing,
        )

    @classmethod
    def from_spec(cls, spec: Mapping, method: registry.Method, **callbacks) -> TrainingRun:
        """The run of a train job's spec (:mod:`training.worker`): its ``settings`` checked
        here, once; ``device`` as the spec asks (the worker resolves it);
        ``checkpoint_dir`` by default next to the model. ``callbacks``: ``progress``,
        ``should_cancel``, ``metric``."""
        out = Path(spec["out"])
        return cls.create(
            method,
            spec["bakes"],
            out,
            spec.get("settings"),
            device=spec.get("device") or "auto",
            expect_mesh_hash=spec.get("mesh_hash"),
            checkpoint_dir=spec.get("checkpoint_dir") or out.parent / (out.stem + ".checkpoints"),
            **callbacks,
        )

    def job(self) -> dict:
        """The keywords of the old trainer call ``trainer(data, out, settings, **job)``."""
        return {
            "device": self.device,
            "expect_mesh_hash": self.expect_mesh_hash,
            "checkpoint_dir": self.checkpoint_dir,
            "progress": self.progress,
            "should_cancel": self.should_cancel,
            "metric": self.metric,
        }

    def use_bakes(self, bakes: TrainingBakes, keyed_on: BakeDataset | None = None) -> TrainingBakes:
        """Train on ``bakes`` (opened by the method's own reader) and key the checkpoints on
        the bakes of ``keyed_on`` (default: ``bakes.ds``), the method and the settings."""
        self.bakes = bakes
        ds = keyed_on if keyed_on is not None else bakes.ds
        self.checkpoints = Checkpoints.open(self.checkpoint_dir, self.method, ds, self.settings)
        return bakes

    def open_bakes(self) -> TrainingBakes:
        """Open and split the FEM bakes (:func:`open_bakes`: stale, foreign or mixed bakes
        are refused; whole bakes held out by the settings' ``validation_fraction`` and
        ``seed``) and key the checkpoints."""
        s = self.settings
        b = open_bakes(self.data, self.expect_mesh_hash, s["validation_fraction"], s["seed"])
        self.use_bakes(b)
        self.say(0.02, "loading bakes")
        return b

    @property
    def warnings(self) -> list[str]:
        """Warnings the result carries (append to it)."""
        return self.bakes.warnings

    def say(self, fraction: float, message: str) -> None:
        self.progress(fraction, message)

    def emit(self, values: dict) -> None:
        self.metric(values)

    def check_cancel(self, message: str) -> None:
        """Raise :class:`JobCancelled` with ``message`` when the job is cancelled."""
        if self.should_cancel():
            raise JobCancelled(message)

    def contact_sample(self) -> ContactPoints:
        """The contact sample of the points that touched colliders in the bakes (the render
        surface of an embedded object, else the tet surface):
        :func:`core.methods.common.surface_sample`."""
        b = self.bakes
        points = b.spec.contact_points(b.T, b.mass)
        return surface_sample(b.X, points, seed=self.settings["seed"])

    # --------------------------------------------------------------------------- the end
    def finish(
        self,
        out: str | Path,
        save: Callable[..., Path],
        *,
        k: int,
        dofs: int,
        max_error_val_m: float,
        cubature: Cubature | None = None,
        metrics: Mapping | None = None,
        metadata: Mapping | None = None,
        rollout: bool = True,
        at: float = 0.9,
        stiffening: bool = True,
    ) -> dict:
        """Replay a held-out bake with the model, write the model to ``out``, return the
        result record.

        Parameters
        ----------
        save : ``save(path, *, mesh_hash, T, material, settings, metadata) -> Path``: the
            runtime module's ``save`` with the method's own arguments bound
            (``functools.partial``); ``settings`` is the bakes'
            :class:`core.physics.sim.SimSettings`
        k : size of the PCA/POD basis
        dofs : reduced coordinates the runtime steps (``k`` for a linear model, the latent
            size of a latent one)
        max_error_val_m : largest vertex error of the model's shapes on the held-out
            frames (the training frames when none is held out), metres
        cubature : the cubature rule, reported (size and errors) when given
        metrics : the method's own metrics (JSON-able), merged into the record
        metadata : the method's own entries of the model file's metadata
        rollout : replay a held-out bake (the rollout replays the file as
            :func:`core.registry.load_simulator` opens it, so it measures what users run)
        at : progress fraction where the rollout starts
        stiffening : warn when the rollout is far worse than the model's closest shapes
            (:func:`core.compare.stiffening_hint`, whose advice is about subspace dynamics:
            modes and cubature); a learned model without a solve turns it off

        Returns
        -------
        dict: ``model`` (path), ``warnings`` and the metrics: the common keys (see the module
        docstring) and ``metrics``. The model file's metadata holds the same metrics, the
        settings (``training``), the bakes and the split.
        """
        b = self.bakes
        record = self._record(k, dofs, max_error_val_m, cubature, metrics)
        common = {
            "training": dict(self.settings),
            "ground_z": self._ground_z(),
            "bakes": [str(t.path) for t in b.ds],
            "train_trajectories": [int(i) for i in b.train],
            "validation_trajectories": [int(i) for i in b.val],
        }
        physics = {
            "mesh_hash": b.ds.mesh_hash,
            "T": b.T,
            "material": b.material,
            "settings": b.sim_settings,
        }

        def write(path) -> Path:
            meta = {**common, "metrics": record, "warnings": self.warnings, **(metadata or {})}
            return save(path, **physics, metadata=meta)

        roll: dict = {"skipped": "no held-out bake"}
        if not rollout:
            roll = {"skipped": "turned off in the settings"}
        elif len(b.val):
            self.say(at, "rollout of a held-out bake")
            roll = self._rollout(write, out, stiffening)
        record.update(
            rollout=roll,
            rollout_max_error_m=roll.get("max_error_m"),
            step_ms=roll.get("step_ms"),
            train_seconds=time.perf_counter() - self.started,
        )
        self.say(max(at, 0.97), "writing the model")
        path = write(out)
        self.say(
            1.0,
            f"model written: {dofs} reduced coordinates"
            + (f", {len(cubature)} cubature elements" if cubature is not None else ""),
        )
        return {"model": str(path), "warnings": self.warnings, **record}

    def _ground_z(self) -> float | None:
        """The ground plane (z, m) every training bake had, which a simulation of the model
        needs too (None: the bakes had none, or not the same one)."""
        grounds = {self.bakes.ds[int(i)].meta.get("ground_z") for i in self.bakes.train}
        if len(grounds) != 1 or None in grounds:
            if len(grounds) > 1:
                self.warnings.append(
                    "The training bakes have different ground planes; the model records none, "
                    "so Simulate has a ground only if the scene has a collider."
                )
            return None
        return float(grounds.pop())

    def _record(self, k, dofs, max_error_val_m, cubature, metrics) -> dict:
        """The metrics every method reports, then the method's own."""
        info = cubature.info if cubature is not None else {}
        return {
            "method": self.method,
            "device": self.device,
            "k": int(k),
            "dofs": int(dofs),
            "max_error_val_m": float(max_error_val_m),
            "cubature_elements": len(cubature) if cubature is not None else None,
            "cubature_train_rel_error": info.get("train_rel_error"),
            "cubature_heldout_rel_error": info.get("heldout_rel_error"),
            "cubature_validation_rel_error": info.get("validation_rel_error"),
            **(metrics or {}),
        }

    def _rollout(self, write: Callable[[Path], Path], out, stiffening: bool = True) -> dict:
        """Rollout metrics of the first held-out bake, replayed by the model written to a
        temporary beside ``out`` (removed after); metrics streamed, warnings added."""
        tmp = None
        try:
            tmp = write(temporary_path(out))
            roll = rollout_metrics(
                lambda driver: registry.load_simulator(
                    tmp, colliders=driver.colliders(0) if driver is not None else None
                )[0],
                self.bakes.heldout_bake(),
                cancel=self.should_cancel,
            )
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        self.emit({f"rollout_{k}": v for k, v in roll.items() if isinstance(v, (int, float))})
        if "skipped" in roll:  # the runtime failed on it: worth a look
            self.warnings.append(f"Held-out rollout skipped: {roll['skipped']}")
        hint = stiffening_hint(roll) if stiffening else None
        if hint:
            self.warnings.append(hint)
        return roll


def call(method: registry.Method, train: Callable, bakes, out, settings=None, **job) -> dict:
    """``train(run)`` called as ``trainer(bakes, out, settings, **job)``
    (:meth:`core.registry.Method.trainer_function`): the run built by
    :meth:`TrainingRun.create`, which checks the settings."""
    return train(TrainingRun.create(method, bakes, out, settings, **job))


def legacy(trainer: Callable) -> Callable:
    """A trainer of the old signature ``trainer(bakes, out, settings, **job)`` as
    ``train(run)`` (:meth:`core.registry.Method.run_function`)."""

    def train(run: TrainingRun) -> dict:
        return trainer(run.data, run.out, dict(run.settings), **run.job())

    return train
