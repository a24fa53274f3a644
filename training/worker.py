"""The worker's ``train`` job: ``worker.py`` hands it the job spec.

Spec keys: ``method`` (``"linear"`` or ``"autoencoder"``), ``bakes`` (list of .nrbake
paths, or a glob), ``out`` (the .nrmodel path), ``settings`` (the method's settings dict), ``device``
(``"auto"``, ``"cpu"``, ``"cuda"``), ``mesh_hash`` (optional: refuse bakes of another mesh),
``checkpoint_dir`` (optional; default: next to the model). torch is imported only by the
methods that need it, so a linear model trains with numpy and scipy alone.
"""

from __future__ import annotations

from pathlib import Path

from ..core import jobs
from ..core.errors import NeuralRomError

METHODS = ("linear", "autoencoder")
PROGRESS_UNITS = 1000


def resolve_device(preference: str, method: str) -> str:
    """The device a method trains on, from the preference (auto, cpu, cuda).

    Raises a NeuralRomError when CUDA is asked for but this interpreter cannot use it.
    """
    preference = (preference or "auto").lower()
    if preference not in ("auto", "cpu", "cuda"):
        raise NeuralRomError(f"Unknown training device {preference!r}: use auto, cpu or cuda.")
    if method == "linear":
        if preference == "cuda":
            jobs.emit(
                "warning",
                message="The linear model trains with numpy on the CPU; CUDA is used by the learned methods.",
            )
        return "cpu"
    try:
        import torch
    except ImportError as e:
        raise NeuralRomError(
            "Training this method needs PyTorch in the job interpreter: set Preferences > "
            "Neural ROM > Python to an environment with torch (see the README)."
        ) from e
    cuda = torch.cuda.is_available()
    if preference == "cuda" and not cuda:
        raise NeuralRomError(
            "Training device is CUDA, but torch in the job interpreter sees no CUDA GPU: install a "
            "CUDA build of torch there, or set the device to Auto or CPU."
        )
    return "cuda" if (cuda and preference != "cpu") else "cpu"


def run(spec: dict) -> dict:
    method = spec.get("method", "linear")
    if method not in METHODS:
        raise NeuralRomError(
            f"Unknown training method {method!r}; this version trains {', '.join(METHODS)}."
        )
    out = Path(spec["out"])
    settings = dict(spec.get("settings") or {})
    device = resolve_device(spec.get("device") or settings.get("device") or "auto", method)
    meter = jobs.Progress(PROGRESS_UNITS)

    def progress(fraction: float, message: str) -> None:
        meter.update(int(round(fraction * PROGRESS_UNITS)), message)

    def metric(values: dict) -> None:
        jobs.emit("metric", values=values)

    if method == "linear":
        from .linear import LinearSettings, train_linear

        result = train_linear(
            spec["bakes"],
            out,
            LinearSettings.from_dict(settings),
            expect_mesh_hash=spec.get("mesh_hash"),
            checkpoint_dir=spec.get("checkpoint_dir") or out.parent / (out.stem + ".checkpoints"),
            progress=progress,
            should_cancel=jobs.should_cancel,
            metric=metric,
        )
    elif method == "autoencoder":
        from .autoencoder import AutoencoderSettings, train_autoencoder

        result = train_autoencoder(
            spec["bakes"],
            out,
            AutoencoderSettings.from_dict(settings),
            expect_mesh_hash=spec.get("mesh_hash"),
            checkpoint_dir=spec.get("checkpoint_dir") or out.parent / (out.stem + ".checkpoints"),
            progress=progress,
            should_cancel=jobs.should_cancel,
            metric=metric,
            device=device,
        )
    for w in result.get("warnings", []):
        jobs.emit("warning", message=w)
    return {**result, "method": method, "device": device}
