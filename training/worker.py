"""The worker's ``train`` job: ``worker.py`` hands it the job spec.

Spec keys: ``method`` (a name in :mod:`core.registry`), ``method_origin`` (optional: the file
that registers a method defined outside the package), ``bakes`` (list of .nrbake paths, or a
glob), ``out`` (the .nrmodel path), ``settings`` (the method's settings, checked by its
record once, here, before anything runs: :meth:`.run.TrainingRun.from_spec`), ``device``
(``"auto"``, ``"cpu"``, ``"cuda"``), ``mesh_hash`` (optional: refuse bakes of another mesh),
``checkpoint_dir`` (optional; default: next to the model), ``quiet`` (optional: the
result's warnings are not emitted as events; Compare Methods' PCA models, of which only the
basis is used). The trainer gets the run (``train(run)``; one of the older signature its
fields). torch is imported only by the trainers of methods that need it, so a linear model
trains with numpy and scipy alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core import jobs, registry
from ..core.errors import NeuralRomError
from .run import TrainingRun

PROGRESS_UNITS = 1000


def resolve_device(preference: str, method: registry.Method) -> str:
    """The device ``method`` trains on, from the preference (auto, cpu, cuda).

    Raises a NeuralRomError when CUDA is asked for but this interpreter cannot use it, or
    when the method needs torch and this interpreter has none.
    """
    preference = (preference or "auto").lower()
    if preference not in ("auto", "cpu", "cuda"):
        raise NeuralRomError(f"Unknown training device {preference!r}: use auto, cpu or cuda.")
    if not method.needs_torch:
        if preference == "cuda":
            jobs.emit(
                "warning",
                message=f"The {method.label} model trains with numpy on the CPU; CUDA is used "
                "by the learned methods.",
            )
        return "cpu"
    try:
        import torch
    except ImportError as e:
        raise NeuralRomError(
            f"Training the {method.label} model needs PyTorch in the job interpreter: set "
            "Preferences > Neural ROM > Python to an environment with torch (see the README)."
        ) from e
    cuda = torch.cuda.is_available()
    if preference == "cuda" and not cuda:
        raise NeuralRomError(
            "Training device is CUDA, but torch in the job interpreter sees no CUDA GPU: install a "
            "CUDA build of torch there, or set the device to Auto or CPU."
        )
    return "cuda" if (cuda and preference != "cpu") else "cpu"


def bake_inputs(bakes) -> frozenset[str]:
    """The frame inputs the bakes drive (:meth:`core.cache.BakeCache.driven_by`, over every
    bake); none when ``bakes`` are not FEM or cloth bakes the cache opens (a face file, a
    family's entries: their trainer checks them)."""
    from ..core.data.cache import BakeDataset

    paths = [bakes] if isinstance(bakes, (str, Path)) else bakes
    if not isinstance(paths, (list, tuple)) or not all(isinstance(b, (str, Path)) for b in paths):
        return frozenset()
    try:
        ds = BakeDataset.open(bakes)
    except NeuralRomError:
        return frozenset()
    return frozenset().union(*(t.driven_by() for t in ds.trajectories))


def run(spec: dict, progress=None) -> dict:
    """Train as ``spec`` says (the module docstring); the training's progress goes to
    ``progress(fraction, message)`` when given (a comparison's lane), else to this job's
    progress events."""
    method = registry.get(
        spec.get("method") or registry.baseline().name, origin=spec.get("method_origin")
    )
    if progress is None:
        meter = jobs.Progress(PROGRESS_UNITS)

        def progress(fraction: float, message: str) -> None:
            meter.update(int(round(fraction * PROGRESS_UNITS)), message)

    def metric(values: dict) -> None:
        jobs.emit("metric", values=values)

    # the settings are checked here, once (TrainingRun.create: Method.values)
    job = TrainingRun.from_spec(
        spec, method, progress=progress, should_cancel=jobs.should_cancel, metric=metric
    )
    method.check_bake_inputs(bake_inputs(spec["bakes"]))
    device = job.device = resolve_device(job.device, method)
    result = method.run_function()(job)
    for w in [] if spec.get("quiet") else result.get("warnings", []):
        jobs.emit("warning", message=w)
    # the trainer's record names the method of the model it wrote: the autoencoder's names
    # the linear model when it kept that (keep_linear); a plug-in's may name none
    return {
        **result,
        "method": result.get("method") or method.name,
        "device": device,
        "threads": _threads(),
    }


def _threads() -> int:
    """The threads this training ran its math on: torch's intra-op threads when it used
    torch, else the BLAS's (one in a Compare Methods lane, :data:`core.jobs.ONE_THREAD_ENV`)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return int(torch.get_num_threads())
    from ..core.physics.blas import get_blas_threads

    return int(max(get_blas_threads() or [1]))
